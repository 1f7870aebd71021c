//! How a change applies to a task, the same in every store: the [`TaskChange`], the progress rules,
//! what an answer and an orphan claim change, and whether a change may apply under the lease.

use serde_json::Value;

use super::OrphanPlan;
use crate::model::{Outcome, TaskRecord, TaskStatus};
use crate::webhook::WriteBase;

/// A change to apply to a task. Fields left `None` are untouched.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskChange {
    /// New status. A terminal one also sets `finished_at` and releases the lease.
    pub status: Option<TaskStatus>,
    /// New status message (`Some(None)` clears it).
    pub status_message: Option<Option<String>>,
    /// A progress report. It is merged into the task by these rules, the same in every store:
    /// - progress never decreases: a smaller value keeps the stored one, and the rest of the report
    ///   still applies;
    /// - the total never decreases (a smaller one keeps the stored one), is kept when the report has
    ///   none, and is raised to the progress when it would be below it;
    /// - a message replaces the stored `progress_message`; a report without one keeps it;
    /// - a report with a non-finite number changes nothing.
    ///
    /// Completion (status `completed`) clears `progress_message`.
    pub progress: Option<ProgressUpdate>,
    /// The outcome.
    pub outcome: Option<Outcome>,
    /// New lease owner and expiry.
    pub lease: Option<(Option<String>, Option<u64>)>,
    /// New attempt counter.
    pub attempt: Option<u32>,
    /// New checkpoint (`Some(None)` clears it); see [`TaskRecord::checkpoint`].
    pub checkpoint: Option<Option<Value>>,
    /// Apply only while this node holds the task's lease; otherwise the update is a
    /// [`UpdateError::Conflict`](super::UpdateError::Conflict). A handler whose lease went to another node (which may be running
    /// the task again) must not write its outcome.
    pub holder: Option<String>,
    /// Keep this change as a row of the task's history even when the status stays the same (a
    /// hand-off, a resume): a status change is always kept.
    pub noted: bool,
    /// Write a `task.progress` webhook event for the task's targets that ask for progress, showing
    /// the task after this change (nothing when none asks, or the task is finished). The engine
    /// sets it at most once per pacing interval of a run.
    pub progress_event: bool,
}

/// One progress report of a running task; see [`TaskChange::progress`] for how it is applied.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProgressUpdate {
    /// Work done so far.
    pub progress: f64,
    /// Total work, when the handler knows it.
    pub total: Option<f64>,
    /// A human-readable note on the progress.
    pub message: Option<String>,
}

/// What a task shows of its progress: the fields a [`ProgressUpdate`] can change.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ProgressState {
    pub(crate) progress: Option<f64>,
    pub(crate) total: Option<f64>,
    pub(crate) message: Option<String>,
}

impl ProgressState {
    /// The progress `rec` shows.
    pub(crate) fn of(rec: &TaskRecord) -> ProgressState {
        ProgressState {
            progress: rec.progress,
            total: rec.progress_total,
            message: rec.progress_message.clone(),
        }
    }

    /// The progress after `update`, by the rules of [`TaskChange::progress`].
    pub(crate) fn after(&self, update: &ProgressUpdate) -> ProgressState {
        if !update.progress.is_finite() || update.total.is_some_and(|t| !t.is_finite()) {
            return self.clone();
        }
        let progress = self
            .progress
            .map_or(update.progress, |old| old.max(update.progress));
        let total = match (self.total, update.total) {
            (Some(old), Some(new)) => Some(old.max(new)),
            (old, new) => old.or(new),
        }
        .map(|t| t.max(progress));
        ProgressState {
            progress: Some(progress),
            total,
            message: update.message.clone().or_else(|| self.message.clone()),
        }
    }
}

/// The change an answer makes to its task: back to `working` once no question waits any more.
pub(crate) fn after_answer(status: TaskStatus, still_pending: bool) -> TaskChange {
    TaskChange {
        status: (!still_pending && status == TaskStatus::InputRequired)
            .then_some(TaskStatus::Working),
        ..Default::default()
    }
}

/// What a store's write compares the task after `change` with (see [`WriteBase`]): its status before
/// the change, or `None` when the change is kept whatever it does ([`TaskChange::noted`]); a history
/// row is written when the status differs from this. Called before the change is applied.
pub(crate) fn write_base(rec: &TaskRecord, change: &TaskChange) -> WriteBase {
    WriteBase {
        was: (!change.noted).then_some(rec.status),
        progress_event: change.progress_event,
    }
}

/// Claims an orphan for `node` until `lease_until` and applies `plan`'s change to it (a change that
/// finishes the task also lets go of the lease). `None` when `plan` leaves the task alone; otherwise
/// what the write decides its history row on (see [`write_base`]).
pub(crate) fn claim_orphan(
    rec: &mut TaskRecord,
    plan: &OrphanPlan,
    node: &str,
    lease_until: u64,
    now: u64,
) -> Option<WriteBase> {
    let change = plan(rec)?;
    let was = write_base(rec, &change);
    rec.lease_owner = Some(node.to_string());
    rec.lease_until = Some(lease_until);
    apply_change(rec, change, now);
    Some(was)
}

/// Whether `change` may apply to `rec` as far as its lease goes (see [`TaskChange::holder`]).
pub(crate) fn held_by_holder(rec: &TaskRecord, change: &TaskChange) -> bool {
    change
        .holder
        .as_deref()
        .is_none_or(|h| rec.lease_owner.as_deref() == Some(h))
}

/// A message as every store can keep it: PostgreSQL's text holds no NUL character (a tool's error
/// text, a program's output, may have one), so each becomes U+FFFD on every store alike. (JSON
/// values are stored as JSON text, where a NUL is an escape, and keep theirs.)
pub(crate) fn storable_text(text: String) -> String {
    if text.contains('\0') {
        text.replace('\0', "\u{FFFD}")
    } else {
        text
    }
}

pub(crate) fn apply_change(rec: &mut TaskRecord, change: TaskChange, now: u64) {
    if let Some(status) = change.status {
        rec.status = status;
        if status.is_terminal() {
            rec.finished_at = Some(now);
            rec.lease_owner = None;
            rec.lease_until = None;
            if let Some(keep) = rec.retain_after_finish_ms {
                // Retention counts from now: expires_at (created_at + ttl) becomes now + keep.
                rec.ttl_ms = Some(now.saturating_sub(rec.created_at).saturating_add(keep));
            }
        }
    }
    if let Some(m) = change.status_message {
        rec.status_message = m.map(storable_text);
    }
    if let Some(update) = change.progress {
        let after = ProgressState::of(rec).after(&update);
        rec.progress = after.progress;
        rec.progress_total = after.total;
        rec.progress_message = after.message.map(storable_text);
    }
    if change.status == Some(TaskStatus::Completed) {
        // A progress note is stale once the work is done (the engine clears the status message too).
        rec.progress_message = None;
    }
    if let Some(o) = change.outcome {
        rec.outcome = Some(o);
    }
    if let Some((owner, until)) = change.lease {
        if !rec.status.is_terminal() {
            rec.lease_owner = owner;
            rec.lease_until = until;
        }
    }
    if let Some(a) = change.attempt {
        rec.attempt = a;
    }
    if let Some(c) = change.checkpoint {
        rec.checkpoint = c;
    }
    if rec.status.is_terminal() {
        // Nothing is left to resume.
        rec.checkpoint = None;
    }
    rec.updated_at = now.max(rec.updated_at);
}
