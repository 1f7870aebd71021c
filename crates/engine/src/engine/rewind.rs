//! An operator's rewind of a running task's journal: run it again from step N (the steps before
//! are replayed, N and those after run again), or drop the journal and its checkpoint and start
//! over. For a step whose recorded outcome is wrong (a failure recorded during an outage that is
//! over), or a journal the deployed code cannot replay.
//!
//! The steps are dropped while no run can write: the rewind first takes the task's lease under a
//! name of its own, so the run that held it is fenced (its next record, checkpoint or outcome is
//! refused, its next renewal fails and its handler stops); then the steps go; then the lease is let
//! go of, with a note in the task's history, and the task is taken up again. A run of this node is
//! stopped and waited for, so the task is taken up at once (by this node for a store only it
//! opens, by any replica of a shared one). A run on another replica cannot be waited for: it stops
//! at its own renewal or, at the latest, by its fence before its lease runs out, so the lease is
//! let go of with that replica's expiry and nobody takes the task up before then (two runs of one
//! task never overlap). A node that fails between the steps leaves the task leased until the
//! fence's lease runs out: it is then recovered with the steps dropped or not, and the rewind can
//! be asked again. A finished task is final (the protocol says so): it is refused.

use std::sync::Arc;
use std::time::Duration;

use super::{Engine, EngineError};
use crate::clock::now_ms;
use crate::context::StopReason;
use crate::model::{TaskRecord, TaskStatus};
use crate::store::{error_chain, Lookup, TaskChange, UpdateError};

/// What an operator's rewind drops ([`Engine::rewind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rewind {
    /// Keep the steps before place `N`; drop it and every step after: the next run replays the
    /// kept steps and runs the rest again.
    FromStep(u32),
    /// Drop the whole journal and the checkpoint: the next run starts over.
    StartOver,
}

impl Rewind {
    /// The first place dropped.
    fn from(self) -> u32 {
        match self {
            Rewind::FromStep(seq) => seq,
            Rewind::StartOver => 0,
        }
    }

    /// What the task's history says about it.
    fn note(self, dropped: usize, operator: &str) -> String {
        match self {
            Rewind::FromStep(seq) => format!(
                "rewound by operator {operator}: runs again from step {seq} ({dropped} step(s) \
                 dropped)"
            ),
            Rewind::StartOver => format!(
                "restarted by operator {operator}: journal ({dropped} step(s)) and checkpoint \
                 dropped; runs again from the start"
            ),
        }
    }
}

/// What a rewind did.
#[derive(Clone, Debug)]
pub struct Rewound {
    /// The task once let go of (its lease free, to be taken up again).
    pub task: TaskRecord,
    /// How many steps were dropped.
    pub dropped: usize,
}

/// How long a rewind waits for a run on this node to end after it was fenced, past the grace its
/// handler is given to stop.
const RUN_END_SLACK: Duration = Duration::from_secs(2);

impl Engine {
    /// Rewinds task `id`'s journal as `rewind` says, for `operator` (named in the history and the
    /// audit log); see the module's documentation for how the task's runs are fenced. Refused for a
    /// finished task ([`EngineError::AlreadyTerminal`]) and for one that would not be run again
    /// ([`EngineError::CannotRewind`]: its tool is not served here, or is not safe to run again and
    /// keeps no checkpoint to go on from, or the task has had its
    /// [`EngineConfig::max_attempts`](crate::EngineConfig::max_attempts) runs: a rewind's run counts
    /// as one).
    pub async fn rewind(
        self: &Arc<Self>,
        id: &str,
        rewind: Rewind,
        operator: &str,
    ) -> Result<Rewound, EngineError> {
        let task = match self.store.get(id).await? {
            Lookup::Found(t) => t,
            Lookup::Expired { .. } => return Err(EngineError::Expired),
            Lookup::Missing => return Err(EngineError::NotFound),
        };
        if task.status.is_terminal() {
            return Err(EngineError::AlreadyTerminal(Box::new(task)));
        }
        let Some(registered) = self.registered(&task.tool) else {
            return Err(EngineError::CannotRewind(format!(
                "its tool {} is not served here",
                task.tool
            )));
        };
        let max_attempts = self.config.max_attempts.max(1);
        if task.attempt >= max_attempts {
            return Err(EngineError::CannotRewind(format!(
                "it has had {} runs, the most a task gets ([tasks] max_attempts = {max_attempts})",
                task.attempt
            )));
        }
        let keeps_checkpoint = rewind != Rewind::StartOver && task.checkpoint.is_some();
        if !registered.retry_on_restart && !keeps_checkpoint {
            return Err(EngineError::CannotRewind(format!(
                "its tool {} is not safe to run again (retry_on_restart) and {}, so the next run \
                 would fail it",
                task.tool,
                if rewind == Rewind::StartOver {
                    "starting over drops its checkpoint"
                } else {
                    "it saved no checkpoint to go on from"
                }
            )));
        }
        // Fence: the lease under the rewind's own name, so no run writes while steps go; long
        // enough to outlast the wait for this node's run below.
        let fence = format!(
            "rewind:{}:{}",
            self.config.node_id,
            &crate::ids::random_id()[..8]
        );
        let bound = self.config.cancel_grace + RUN_END_SLACK;
        let hold_ms = self
            .config
            .lease_ms
            .max(2 * u64::try_from(bound.as_millis()).unwrap_or(u64::MAX / 4));
        let hold = TaskChange {
            lease: Some((Some(fence.clone()), Some(now_ms() + hold_ms))),
            ..Default::default()
        };
        // Whose run may still be going on, and until when its lease says it may.
        let other_holder = task.lease_owner.as_deref().is_some_and(|owner| {
            owner != self.config.node_id && !super::timers::is_suspended(Some(owner))
        });
        let not_before = if other_holder { task.lease_until } else { None };
        match self.apply(id, &TaskStatus::ACTIVE, hold).await {
            Ok(_) => {}
            Err(UpdateError::NotFound) => return Err(EngineError::NotFound),
            Err(UpdateError::Conflict(cur)) => return Err(EngineError::AlreadyTerminal(cur)),
            Err(UpdateError::Store(e)) => return Err(e.into()),
        }
        // A run here is stopped now rather than at its next renewal, and waited for: this node
        // takes no task up while its run is still in the running map.
        if let Some(running) = self.running.get(id).map(|r| r.value().clone()) {
            running.stop(StopReason::LeaseLost);
            let ended = async {
                while self.running.contains_key(id) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            };
            if tokio::time::timeout(bound, ended).await.is_err() {
                tracing::warn!(task = %id, "a rewound task's run did not end within its grace; it is fenced and writes nothing");
            }
        }
        let dropped = self.store.truncate_steps(id, rewind.from()).await?;
        let release = TaskChange {
            // Free now, or once another replica's run has surely stopped (see the module's note).
            lease: Some((None, not_before)),
            status_message: Some(Some(rewind.note(dropped, operator))),
            checkpoint: (rewind == Rewind::StartOver).then_some(None),
            holder: Some(fence),
            noted: true,
            ..Default::default()
        };
        let task = match self.apply(id, &TaskStatus::ACTIVE, release).await {
            Ok(t) => t,
            Err(UpdateError::NotFound) => return Err(EngineError::NotFound),
            // Finished meanwhile (a cancel, an expiry): nothing runs it again.
            Err(UpdateError::Conflict(cur)) if cur.status.is_terminal() => {
                return Err(EngineError::AlreadyTerminal(cur))
            }
            // Another rewind took the lease meanwhile (or this one's ran out): that one goes on.
            Err(UpdateError::Conflict(cur)) => {
                return Err(EngineError::CannotRewind(format!(
                    "it was taken by {} while this rewind dropped {dropped} step(s) from step {}; \
                     that one decides how it runs again",
                    cur.lease_owner.as_deref().unwrap_or("nobody"),
                    rewind.from()
                )))
            }
            Err(UpdateError::Store(e)) => return Err(e.into()),
        };
        tracing::info!(target: "mcp_tasks::audit", task = %id, tool = %task.tool, owner = %task.owner, operator, from = rewind.from(), dropped, start_over = rewind == Rewind::StartOver, "task journal rewound");
        // Taken up again like a hand-off: a shared store's replicas hear of the release (this one
        // too) and take it once its lease is free; a store only this node opens has nobody else
        // to.
        if not_before.is_some() {
            tracing::info!(task = %id, "the rewound task's run was on another server: it is taken up once that server's lease runs out");
        } else if self.store.is_exclusive() {
            if let Err(e) = self.recover(false).await {
                tracing::warn!(task = %id, error = %error_chain(&e), "could not take a rewound task up again; it is at the next sweep");
            }
        } else {
            self.takeover_now.notify_one();
        }
        Ok(Rewound { task, dropped })
    }
}
