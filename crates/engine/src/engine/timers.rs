//! Durable timers that free the node: a run whose durable sleep is longer than
//! [`EngineConfig::suspend_sleeps_over`](crate::EngineConfig::suspend_sleeps_over) ends
//! ([`StopReason::Suspended`](crate::StopReason::Suspended)), and its task is left `working` under
//! a lease no node holds ([`SUSPENDED`]) that runs out at the wake time. Recovery takes such a task
//! up like one whose node died, once that time has come (`maintenance.rs`: not counted against
//! `max_attempts`); the node that suspended it also looks at the wake time itself, so the task
//! wakes on time rather than at the next take-over pass or sweep.

use std::sync::Arc;
use std::time::Duration;

use super::Engine;
use crate::clock::{format_rfc3339, now_ms};
use crate::model::TaskStatus;
use crate::store::{error_chain, TaskChange, UpdateError};

/// The lease owner of a suspended task: no node.
pub(crate) const SUSPENDED: &str = "(suspended)";
/// The lease owner of a task suspended while it waits for a signal (`signals.rs`): no node, and a
/// signal sent to it ends the suspension at once.
pub(crate) const AWAITING: &str = "(awaiting signal)";

/// Whether a task's lease owner says it is suspended (for a sleep or a signal): no node runs it,
/// and it is not an interrupted task.
pub(crate) fn is_suspended(owner: Option<&str>) -> bool {
    matches!(owner, Some(SUSPENDED | AWAITING))
}

/// What a run ended for when it suspended itself.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Suspension {
    /// A durable sleep.
    Sleep,
    /// A wait for the signal `name` after place `after`.
    Signal {
        /// The signal waited for.
        name: String,
        /// The place after which a signal of that name is the one.
        after: u32,
    },
}

impl Engine {
    /// Leaves task `id` suspended until `wake_at` after its run ended for a durable sleep or a
    /// long wait for a signal (`awaited`: its name and the place after which it counts), while
    /// this node still holds it, and looks for it again at that time.
    pub(super) async fn suspend(
        self: &Arc<Self>,
        id: &str,
        wake_at: u64,
        awaited: Option<(String, u32)>,
    ) {
        let (owner, message) = match &awaited {
            None => (
                SUSPENDED,
                format!(
                    "sleeping until {} (a durable sleep: no server holds it meanwhile)",
                    format_rfc3339(wake_at)
                ),
            ),
            Some((name, _)) => (
                AWAITING,
                format!(
                    "waiting for the signal `{name}` until {} (no server holds it meanwhile)",
                    format_rfc3339(wake_at)
                ),
            ),
        };
        let change = TaskChange {
            lease: Some((Some(owner.to_string()), Some(wake_at))),
            status_message: Some(Some(message)),
            holder: Some(self.config.node_id.clone()),
            ..Default::default()
        };
        match self.apply(id, &TaskStatus::ACTIVE, change).await {
            Ok(rec) => {
                tracing::info!(task = %rec.id, tool = %rec.tool, wake_at, awaiting = awaited.is_some(), "task suspended");
                self.wake_at(wake_at);
                if let Some((name, after)) = awaited {
                    // A signal stored before the suspension landed found the task running and
                    // woke nothing: look for it now that a sender would wake the task.
                    self.recheck_signal(id, &name, after).await;
                }
            }
            // Finished meanwhile, or another node's now: nothing to suspend.
            Err(UpdateError::Conflict(_)) | Err(UpdateError::NotFound) => {}
            Err(UpdateError::Store(e)) => {
                tracing::warn!(task = %id, error = %error_chain(&e), "could not suspend a task for its durable sleep; it is taken over when its lease runs out");
            }
        }
    }

    /// At `wake_at` (and a moment after, so the lease has run out by every clock that compares
    /// it), looks for tasks to take up: the suspended task among them.
    pub(super) fn wake_at(self: &Arc<Self>, wake_at: u64) {
        let me = Arc::downgrade(self);
        let shutdown = self.shutdown.clone();
        let wait = Duration::from_millis(wake_at.saturating_sub(now_ms()).saturating_add(5));
        tokio::spawn(async move {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
            let Some(engine) = me.upgrade() else { return };
            if let Err(e) = engine.recover(false).await {
                tracing::warn!(error = %error_chain(&e), "waking a suspended task failed; it is taken up at the next pass");
            }
        });
    }
}
