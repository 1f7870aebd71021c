//! Handing running tasks off when this node stops (a deploy, a drain that ended): each handler is
//! told to stop with a reason it can tell from a cancel, its lease is let go at once, and the task
//! stays unfinished with a status message that says it will resume. Another node sharing the store
//! claims it as soon as it hears of the release; a node alone claims it at its next start.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::Engine;
use crate::model::TaskStatus;
use crate::store::{error_chain, TaskChange, UpdateError};

/// How resumable work fared on this node, since it started ([`Engine::resume_counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResumeCounts {
    /// Tasks this node handed off while stopping.
    pub handed_off: u64,
    /// Tasks this node resumed by starting their tool over (`retry_on_restart`, no journal).
    pub resumed_retry: u64,
    /// Tasks this node resumed from the checkpoint an earlier run saved.
    pub resumed_checkpoint: u64,
    /// Tasks this node resumed by replaying their step journal.
    pub resumed_steps: u64,
    /// Tasks this node failed instead of resuming: they had had
    /// [`EngineConfig::max_attempts`](crate::EngineConfig::max_attempts) runs.
    pub given_up: u64,
}

/// How a task resumes, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ResumeKind {
    Retry,
    Checkpoint,
    Steps,
}

/// The counters behind [`ResumeCounts`].
#[derive(Default)]
pub(super) struct ResumeCounters {
    handed_off: AtomicU64,
    retry: AtomicU64,
    checkpoint: AtomicU64,
    steps: AtomicU64,
    pub(super) given_up: AtomicU64,
}

impl ResumeCounters {
    pub(super) fn resumed(&self, kind: ResumeKind) {
        let counter = match kind {
            ResumeKind::Retry => &self.retry,
            ResumeKind::Checkpoint => &self.checkpoint,
            ResumeKind::Steps => &self.steps,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Longer than this past the handlers' grace period, a hand-off stops waiting for runs to end.
const HAND_OFF_SLACK: Duration = Duration::from_secs(1);

impl Engine {
    /// Hands off every task this node runs: each handler is told to stop
    /// ([`TaskContext::is_handed_off`](crate::TaskContext::is_handed_off) is then true, so it can
    /// save a checkpoint) and gets the grace period to return; then its lease is let go at once,
    /// the task stays unfinished with a status message saying it will resume, and its history
    /// keeps the hand-off. From now on this node claims no task. Returns how many runs were told
    /// to stop. Call it once the drain time is over, before [`Engine::shutdown`].
    pub async fn hand_off(&self) -> usize {
        self.handing_off.store(true, Ordering::SeqCst);
        let stops: Vec<_> = self.running.iter().map(|e| e.value().clone()).collect();
        for run in &stops {
            run.stop(crate::context::StopReason::HandedOff);
        }
        // Each run lets go of its task as soon as its handler returns; wait for the last.
        let bound = self.config.hand_off_grace + HAND_OFF_SLACK;
        if tokio::time::timeout(bound, self.idle()).await.is_err() {
            tracing::warn!(
                left = self.running.len(),
                "runs did not end within the hand-off grace; their leases run out instead"
            );
        }
        stops.len()
    }

    /// Whether [`Engine::hand_off`] has begun.
    pub fn is_handing_off(&self) -> bool {
        self.handing_off.load(Ordering::SeqCst)
    }

    /// From now on this node claims no task (not another node's hand-off, not an expired lease):
    /// call it when a drain begins, so the work other nodes let go of goes to nodes that stay.
    /// Runs already here go on. [`Engine::hand_off`] implies it.
    pub fn stop_claiming(&self) {
        self.not_claiming.store(true, Ordering::SeqCst);
    }

    /// Whether this node claims tasks (neither [`Engine::stop_claiming`] nor [`Engine::hand_off`]).
    pub fn is_claiming(&self) -> bool {
        !self.not_claiming.load(Ordering::SeqCst) && !self.is_handing_off()
    }

    /// Hand-offs and resumes on this node since it started.
    pub fn resume_counts(&self) -> ResumeCounts {
        let c = &self.resumes;
        ResumeCounts {
            handed_off: c.handed_off.load(Ordering::Relaxed),
            resumed_retry: c.retry.load(Ordering::Relaxed),
            resumed_checkpoint: c.checkpoint.load(Ordering::Relaxed),
            resumed_steps: c.steps.load(Ordering::Relaxed),
            given_up: c.given_up.load(Ordering::Relaxed),
        }
    }

    /// Lets go of task `id` after its handler stopped for a hand-off, while this node still holds it.
    pub(super) async fn release(&self, id: &str) {
        let node = &self.config.node_id;
        let message = format!(
            "handed off: server {node} is stopping; the task will resume on another server, or \
             on this one when it starts again"
        );
        let change = TaskChange {
            lease: Some((None, None)),
            status_message: Some(Some(message)),
            holder: Some(node.clone()),
            noted: true,
            ..Default::default()
        };
        match self.apply(id, &TaskStatus::ACTIVE, change).await {
            Ok(rec) => {
                self.resumes.handed_off.fetch_add(1, Ordering::Relaxed);
                tracing::info!(target: "mcp_tasks::audit", task = %rec.id, tool = %rec.tool, owner = %rec.owner, attempt = rec.attempt, "task handed off");
            }
            // Finished meanwhile, or no longer this node's: nothing to let go of.
            Err(UpdateError::Conflict(_)) | Err(UpdateError::NotFound) => {}
            Err(UpdateError::Store(e)) => {
                tracing::warn!(task = %id, error = %error_chain(&e), "could not let go of a handed-off task; it is taken over when its lease runs out")
            }
        }
    }
}
