//! Webhooks on task events: where a task's events go ([`WebhookTarget`]), the events themselves
//! ([`WebhookEvent`]), and the outbox every store keeps of them.
//!
//! An event is written to the outbox in the same atomic step as the status change that causes it
//! ([`outbox_entries`], called by every store's one task write), so a change that is committed has
//! its events committed with it and nothing is lost to a crash between the two. Sending is not the
//! engine's: a delivery loop (the server's) claims due entries under a lease
//! ([`OutboxStore::claim_deliveries`](crate::store::OutboxStore::claim_deliveries)), so among replicas one
//! sends each, and reports each attempt back
//! ([`OutboxStore::finish_delivery`](crate::store::OutboxStore::finish_delivery)). Per task and target
//! an entry is claimed only once every earlier one is settled: events go out in order.
//!
//! What the task showed when the event happened is kept with the event ([`EventSnapshot`]); the
//! server renders the body from it, the same bytes on every attempt under the same id.

use serde::{Deserialize, Serialize};
use std::fmt;

use crate::model::{Outcome, TaskRecord, TaskStatus};

/// A task event a webhook can be sent for: the task's status changed to one of these, or (only for
/// targets that ask for it, at most once per pacing interval) its progress moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WebhookEvent {
    /// The task waits for an answer from its client.
    #[serde(rename = "task.input_required")]
    InputRequired,
    /// The task finished with a result.
    #[serde(rename = "task.completed")]
    Completed,
    /// The task failed.
    #[serde(rename = "task.failed")]
    Failed,
    /// The task was cancelled.
    #[serde(rename = "task.cancelled")]
    Cancelled,
    /// The task's progress moved (sent only to targets that list it, paced by the engine:
    /// [`EngineConfig::webhook_progress_interval`](crate::EngineConfig::webhook_progress_interval)).
    #[serde(rename = "task.progress")]
    Progress,
}

impl WebhookEvent {
    /// Every event, in the order they are documented.
    pub const ALL: [WebhookEvent; 5] = [
        WebhookEvent::InputRequired,
        WebhookEvent::Completed,
        WebhookEvent::Failed,
        WebhookEvent::Cancelled,
        WebhookEvent::Progress,
    ];

    /// What a target that names no events gets: every status event. Progress is sent only to a
    /// target that asks for it: it can be many events per task.
    pub const DEFAULT: [WebhookEvent; 4] = [
        WebhookEvent::InputRequired,
        WebhookEvent::Completed,
        WebhookEvent::Failed,
        WebhookEvent::Cancelled,
    ];

    /// The event's `type`, e.g. `task.completed`.
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookEvent::InputRequired => "task.input_required",
            WebhookEvent::Completed => "task.completed",
            WebhookEvent::Failed => "task.failed",
            WebhookEvent::Cancelled => "task.cancelled",
            WebhookEvent::Progress => "task.progress",
        }
    }

    /// Parses an event's `type`.
    pub fn parse(s: &str) -> Option<WebhookEvent> {
        WebhookEvent::ALL.into_iter().find(|e| e.as_str() == s)
    }

    /// The event a task that just moved to the status `rec` shows makes, if any (`working` makes
    /// none). A result that reports a tool error (`isError`) is a failure, as operators count it.
    pub fn of_record(rec: &TaskRecord) -> Option<WebhookEvent> {
        match (rec.status, &rec.outcome) {
            (TaskStatus::Completed, Some(Outcome::Result { is_error: true, .. })) => {
                Some(WebhookEvent::Failed)
            }
            (status, _) => WebhookEvent::of_status(status),
        }
    }

    /// The event a task moving to `status` makes, if any (`working` makes none).
    pub fn of_status(status: TaskStatus) -> Option<WebhookEvent> {
        match status {
            TaskStatus::Working => None,
            TaskStatus::InputRequired => Some(WebhookEvent::InputRequired),
            TaskStatus::Completed => Some(WebhookEvent::Completed),
            TaskStatus::Failed => Some(WebhookEvent::Failed),
            TaskStatus::Cancelled => Some(WebhookEvent::Cancelled),
        }
    }
}

impl fmt::Display for WebhookEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where one task's events go: an endpoint, the secret its deliveries are signed with, and the
/// events it wants. Kept with the task ([`TaskRecord::webhooks`]) from its creation.
///
/// `Debug` leaves the secret out: a record in a log line must not carry it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookTarget {
    /// The endpoint (checked by the server when it was registered, and again on every connection).
    pub url: String,
    /// The signing secret, `whsec_` and the base64 of the key (Standard Webhooks), as the server
    /// stores it: it may be sealed (encrypted at rest), and it is empty for an operator's
    /// subscription, whose secret stays in the server's config. Stores keep it here only, once
    /// per task and target, not in each event.
    pub secret: String,
    /// The events sent there; empty means [`WebhookEvent::DEFAULT`] (every status event).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<WebhookEvent>,
    /// Who asked for it: `None` for the task's client, the subscription's name for an operator's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscription: Option<String>,
}

impl WebhookTarget {
    /// Whether this target wants `event`.
    pub fn wants(&self, event: WebhookEvent) -> bool {
        if self.events.is_empty() {
            WebhookEvent::DEFAULT.contains(&event)
        } else {
            self.events.contains(&event)
        }
    }

    /// Whether this target asked for progress events.
    pub fn wants_progress(&self) -> bool {
        self.events.contains(&WebhookEvent::Progress)
    }
}

impl fmt::Debug for WebhookTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookTarget")
            .field("url", &self.url)
            .field("secret", &"<redacted>")
            .field("events", &self.events)
            .field("subscription", &self.subscription)
            .finish()
    }
}

/// A task's targets as stored in its row (JSON; `None` for a task without any).
pub(crate) fn encode_targets(targets: &[WebhookTarget]) -> Option<String> {
    (!targets.is_empty()).then(|| serde_json::to_string(targets).unwrap_or_default())
}

/// A task's targets from its row; a column that does not parse is a store error the caller words.
pub(crate) fn decode_targets(
    column: Option<&str>,
) -> Result<Vec<WebhookTarget>, serde_json::Error> {
    column.map_or(Ok(Vec::new()), serde_json::from_str)
}

/// An event to deliver, as written to the outbox.
#[derive(Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    /// The `webhook-id`: the same on every attempt, so receivers can drop duplicates.
    pub id: String,
    /// The task.
    pub task_id: String,
    /// Which of the task's targets (its index in [`TaskRecord::webhooks`]): events of one task to
    /// one target go out in order.
    pub target: u32,
    /// The event.
    pub event: WebhookEvent,
    /// Where it goes.
    pub url: String,
    /// What signs it: the target's secret as stored ([`WebhookTarget::secret`]), given with a
    /// claim; empty in an operator's listing.
    pub secret: String,
    /// Who asked for it (see [`WebhookTarget::subscription`]).
    pub subscription: Option<String>,
    /// The task as the event found it ([`EventSnapshot`] as JSON), rendered into the body the same
    /// way on every attempt.
    pub snapshot: String,
    /// When it was written, Unix ms.
    pub created_at: u64,
}

impl fmt::Debug for OutboxEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutboxEntry")
            .field("id", &self.id)
            .field("task_id", &self.task_id)
            .field("target", &self.target)
            .field("event", &self.event)
            .field("url", &self.url)
            .field("created_at", &self.created_at)
            .finish_non_exhaustive()
    }
}

/// The events a write of `rec` makes: one per target that wants the event of its new status, when
/// the status changed (see [`WriteBase`]); or, when the change asked for a progress event and the
/// task still runs, one per target that asked for progress. Every store calls this in its task
/// write and stores what it returns in the same atomic step.
pub(crate) fn outbox_entries(rec: &TaskRecord, base: WriteBase) -> Vec<OutboxEntry> {
    if rec.webhooks.is_empty() {
        return Vec::new();
    }
    let status_changed = base.was.is_some_and(|w| w != rec.status);
    let event = if status_changed {
        WebhookEvent::of_record(rec)
    } else if base.progress_event && !rec.status.is_terminal() {
        Some(WebhookEvent::Progress)
    } else {
        None
    };
    let Some(event) = event else {
        return Vec::new();
    };
    let now = rec.updated_at;
    let snapshot = serde_json::to_string(&EventSnapshot::of(rec)).unwrap_or_default();
    rec.webhooks
        .iter()
        .enumerate()
        .filter(|(_, t)| t.wants(event))
        .map(|(i, t)| OutboxEntry {
            id: format!("msg_{}", crate::ids::random_id()),
            task_id: rec.id.clone(),
            target: u32::try_from(i).unwrap_or(u32::MAX),
            event,
            url: t.url.clone(),
            secret: t.secret.clone(),
            subscription: t.subscription.clone(),
            snapshot: snapshot.clone(),
            created_at: now,
        })
        .collect()
}

/// What a store's task write compares with to decide what it records besides the task: a history row
/// when the status differs from `was` (`None`: a noted change, always recorded, which makes no
/// status event), and a `task.progress` event when `progress_event` is set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct WriteBase {
    /// The status before the change, or `None` for a noted change.
    pub(crate) was: Option<TaskStatus>,
    /// The change asked for a progress event ([`TaskChange::progress_event`](crate::store::TaskChange::progress_event)).
    pub(crate) progress_event: bool,
}

/// Largest result a webhook body carries inline, as JSON text: a larger one is left out of the
/// event (the receiver fetches it from the task), and so it is not kept with the event either.
pub const MAX_INLINE_RESULT_BYTES: usize = 256 * 1024;

/// What a task showed when one of its events happened: kept with the event, so every attempt sends
/// the same body, also after the task moved on or was purged. The server renders the body from it
/// (the engine names no wire field). It holds what the body sends and no more: a result past
/// [`MAX_INLINE_RESULT_BYTES`] is left out ([`EventSnapshot::result_omitted`]), so each target's
/// event does not keep its own copy of a large result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventSnapshot {
    /// The task.
    pub task_id: String,
    /// Its tool.
    pub tool: String,
    /// Its status after the change.
    pub status: TaskStatus,
    /// Its status message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// Its progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<f64>,
    /// Its total.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_total: Option<f64>,
    /// Its note on the progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_message: Option<String>,
    /// Its run.
    pub attempt: u32,
    /// When it was created, Unix ms.
    pub created_at: u64,
    /// When it changed, Unix ms.
    pub updated_at: u64,
    /// How it ended, for a finished task; `None` too for a result left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// The task finished with a result larger than [`MAX_INLINE_RESULT_BYTES`], left out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub result_omitted: bool,
}

impl EventSnapshot {
    /// What `rec` shows.
    pub fn of(rec: &TaskRecord) -> EventSnapshot {
        let mut outcome = rec
            .status
            .is_terminal()
            .then(|| rec.outcome.clone())
            .flatten();
        let result_omitted = matches!(&outcome, Some(Outcome::Result { value, .. })
            if json_len_over(value, MAX_INLINE_RESULT_BYTES));
        if result_omitted {
            outcome = None;
        }
        EventSnapshot {
            task_id: rec.id.clone(),
            tool: rec.tool.clone(),
            status: rec.status,
            status_message: rec.status_message.clone(),
            progress: rec.progress,
            progress_total: rec.progress_total,
            progress_message: rec.progress_message.clone(),
            attempt: rec.attempt,
            created_at: rec.created_at,
            updated_at: rec.updated_at,
            outcome,
            result_omitted,
        }
    }
}

/// Whether `value` as JSON text is longer than `max` bytes, found without keeping the text.
fn json_len_over(value: &serde_json::Value, max: usize) -> bool {
    /// Counts what is written, and stops the writing once past the limit.
    struct Counter {
        n: usize,
        max: usize,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.n += buf.len();
            if self.n > self.max {
                return Err(std::io::Error::other("past the limit"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter { n: 0, max };
    serde_json::to_writer(&mut counter, value).is_err()
}

/// Where a delivery stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// Not delivered yet: due at its `next_at`.
    Pending,
    /// The receiver answered 2xx.
    Delivered,
    /// Given up on: no 2xx before the maximum age.
    Failed,
    /// The receiver answered 410 Gone for this task's target: this and its later events are not sent.
    Gone,
}

impl DeliveryState {
    /// The name kept in storage and shown to operators.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Failed => "failed",
            DeliveryState::Gone => "gone",
        }
    }

    /// Parses the stored name.
    pub fn parse(s: &str) -> Option<DeliveryState> {
        [
            DeliveryState::Pending,
            DeliveryState::Delivered,
            DeliveryState::Failed,
            DeliveryState::Gone,
        ]
        .into_iter()
        .find(|d| d.as_str() == s)
    }
}

/// One outbox entry as the store holds it: the event and where its delivery stands.
#[derive(Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The event.
    pub entry: OutboxEntry,
    /// Where its delivery stands.
    pub state: DeliveryState,
    /// Attempts made so far.
    pub attempts: u32,
    /// When it is due next, Unix ms (pending only).
    pub next_at: u64,
    /// When it was delivered, Unix ms.
    pub delivered_at: Option<u64>,
    /// What the last attempt got: an HTTP status, or `None` when it got none.
    pub last_status: Option<u16>,
    /// What went wrong in the last attempt, if anything did.
    pub last_error: Option<String>,
}

impl fmt::Debug for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("entry", &self.entry)
            .field("state", &self.state)
            .field("attempts", &self.attempts)
            .field("next_at", &self.next_at)
            .field("delivered_at", &self.delivered_at)
            .field("last_status", &self.last_status)
            .field("last_error", &self.last_error)
            .finish()
    }
}

/// One attempt to deliver an event, as kept for the operator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryAttempt {
    /// When it was made, Unix ms.
    pub at: u64,
    /// The receiver's HTTP status, if it answered.
    pub status: Option<u16>,
    /// How long it took, ms.
    pub latency_ms: u64,
    /// What went wrong, if anything did (a refused address, a timeout, a non-2xx answer).
    pub error: Option<String>,
}

/// What becomes of a delivery after an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryNext {
    /// Delivered (2xx).
    Delivered,
    /// Try again at this time (Unix ms).
    RetryAt(u64),
    /// Stop: the receiver said 410 Gone. Later events of the same task and target stop too.
    Gone,
    /// Stop: too old to try again.
    GiveUp,
}

impl DeliveryNext {
    /// What a store writes after an attempt made at `at`: the state, the next due time (a retry
    /// only) and the delivery time (a success only).
    pub(crate) fn settles(self, at: u64) -> (DeliveryState, Option<u64>, Option<u64>) {
        match self {
            DeliveryNext::Delivered => (DeliveryState::Delivered, None, Some(at)),
            DeliveryNext::RetryAt(next) => (DeliveryState::Pending, Some(next), None),
            DeliveryNext::GiveUp => (DeliveryState::Failed, None, None),
            DeliveryNext::Gone => (DeliveryState::Gone, None, None),
        }
    }
}

/// Which deliveries an operator lists.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeliveryQuery {
    /// The one with this id.
    pub id: Option<String>,
    /// Those of one task.
    pub task_id: Option<String>,
    /// Those in one state.
    pub state: Option<DeliveryState>,
    /// At most this many, newest first (0: a default of 100).
    pub limit: usize,
}

impl DeliveryQuery {
    /// The limit to apply.
    pub(crate) fn limit(&self) -> usize {
        if self.limit == 0 {
            100
        } else {
            self.limit
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_round_trips_and_working_makes_none() {
        for e in WebhookEvent::ALL {
            assert_eq!(WebhookEvent::parse(e.as_str()), Some(e));
            assert_eq!(
                serde_json::to_value(e).unwrap(),
                serde_json::Value::from(e.as_str())
            );
        }
        assert_eq!(WebhookEvent::of_status(TaskStatus::Working), None);
        assert_eq!(
            WebhookEvent::of_status(TaskStatus::Failed),
            Some(WebhookEvent::Failed)
        );
    }

    #[test]
    fn a_target_s_debug_leaves_the_secret_out() {
        let t = WebhookTarget {
            url: "https://example.com/hook".into(),
            secret: "whsec_c2VjcmV0".into(),
            events: vec![],
            subscription: None,
        };
        let shown = format!("{t:?}");
        assert!(
            !shown.contains("c2VjcmV0") && shown.contains("redacted"),
            "{shown}"
        );
    }
}
