//! The step journal a handler writes through its [`TaskContext`]: steps whose output is stored with
//! the task before they return, and durable sleeps, so a later run of the task (after a restart or
//! a hand-off) replays what was done instead of doing it again.
//!
//! The rules (Temporal's, Restate's and DBOS's, for one task): a step's body runs at least once (a
//! run stopped after the body but before the record runs it again); once recorded, its output is
//! what every later run gets; steps are matched by identity, their name and occurrence (the third
//! step named `fetch` of a run replays the third `fetch` recorded), so a step whose future was
//! dropped (a timeout, a `select!`) shifts nothing; a run that records a new step while an earlier
//! run's step is still unreplayed fails the task (the code changed under it); steps run one after
//! another, and one started while another runs is refused. Code between steps runs again on every
//! run, so it must decide the same way each time: anything that reads the world (a clock, a file, a
//! remote service) belongs in a step, or in one of the recorded helpers (`determinism`).
//!
//! `options` holds [`TaskContext::step_with`]'s retries and timeouts, whose outcome (an output, or
//! a failure for good) is recorded like any output.

use serde::{de::DeserializeOwned, Serialize};
use std::future::Future;
use std::time::{Duration, Instant};

use crate::clock::now_ms;
use crate::context::{StepEntry, StepError, StepJournal, StepSlot, TaskContext};

mod check;
pub(crate) mod determinism;
mod options;
mod signals;

pub use check::{replay_check, JournalExport, ReplayCheckError, ReplayEnd, ReplayReport};
pub use options::{RetryPolicy, Retryable, StepFailed, StepOptions};
pub use signals::Signal;

/// Tells the journal that the step at `seq` ended, when dropped.
struct Ended<'a> {
    journal: &'a dyn StepJournal,
    seq: u32,
}

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        self.journal.end_step(self.seq);
    }
}

/// Milliseconds since `started`, for a step's duration.
fn millis_since(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl TaskContext {
    /// Runs `body` as the journal's next step named `name`, and stores what it returns with the
    /// task before returning it; when an earlier run of this task recorded this step, returns the
    /// recorded output without running `body`.
    ///
    /// The output is stored as JSON: return a `Result` from `body` to record a failure as well (it
    /// is replayed like any output), or use [`TaskContext::step_with`] for retries and a timeout.
    /// A plain call (not a task) keeps no journal and runs every body. Steps are matched by name
    /// and occurrence: the `n`th step named `name` that this run completes replays the `n`th one
    /// recorded under that name.
    ///
    /// Run steps one after another: a step started while another's body runs fails with
    /// [`StepError::Concurrent`] (and runs nothing).
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future before it completes (a timeout, the losing branch of a
    /// `select!`) is safe: nothing is recorded, the step's occurrence is not used up (the next step
    /// of that name takes its place) and the next step may start. The body may have run in part,
    /// so, as after a crash, it must be safe to run again. A later run that completes a step an
    /// earlier run gave up on, while that run went on to record later steps, takes another path
    /// than the journal's: recording it fails the task as a replay mismatch (its body has run).
    /// A timeout belongs inside the step ([`StepOptions::timeout`]), where it is recorded.
    pub async fn step<T, F, Fut>(&self, name: &str, body: F) -> Result<T, StepError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = T>,
    {
        let serde_error = |e: serde_json::Error| StepError::Serde {
            name: name.to_string(),
            message: e.to_string(),
        };
        let Some(journal) = self.sink().journal() else {
            // A plain call: nothing to replay, nothing kept; the output still has to be JSON, as
            // it would be for a task.
            let output = body().await;
            serde_json::to_value(&output).map_err(serde_error)?;
            return Ok(output);
        };
        match journal.replay_step(name).await? {
            StepSlot::Recorded {
                output,
                error: None,
            } => serde_json::from_value(output).map_err(|e| {
                let e = serde_error(e);
                journal.unreadable(&e);
                e
            }),
            StepSlot::Recorded {
                error: Some(error), ..
            } => {
                let e = StepError::RecordedFailure {
                    name: name.to_string(),
                    error,
                };
                journal.unreadable(&e);
                Err(e)
            }
            StepSlot::Run(seq) => {
                // Ends the step however this future ends: returned, failed or dropped.
                let _ended = Ended { journal, seq };
                let started = Instant::now();
                let output = body().await;
                let value = serde_json::to_value(&output).map_err(serde_error)?;
                let entry = StepEntry {
                    name: name.to_string(),
                    output: value,
                    error: None,
                    duration_ms: millis_since(started),
                };
                journal.record_step(seq, entry).await?;
                Ok(output)
            }
        }
    }

    /// Sleeps for `duration`, durably: the time to wake up is recorded as a step first, so a run
    /// that resumes the task after a restart sleeps only what is left of it (or not at all). Ends
    /// early with [`StepError::Stopped`] when the run is told to stop.
    ///
    /// A sleep longer than the engine's
    /// [`suspend_sleeps_over`](crate::EngineConfig::suspend_sleeps_over) suspends the task instead
    /// of holding its run: the run ends here (this future never completes; the handler is dropped),
    /// the task stays `working` with a status message saying until when, no node holds its slot or
    /// lease, and at the wake time a node runs it again, which replays the journal to this sleep
    /// and goes on. Code before the sleep runs again then, as after any resume. Only a tool
    /// registered `retry_on_restart` is suspended (its wake replays it); another sleeps in its run.
    ///
    /// So a long `ctx.sleep` is not a timeout to race other work with in a `select!`: the
    /// suspension ends the whole run, the other branch with it, and at the wake the sleep is over
    /// at once. Bound work with [`StepOptions::timeout`] or `tokio::time::timeout` instead.
    pub async fn sleep(&self, duration: Duration) -> Result<(), StepError> {
        let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        let wake_at: u64 = self
            .step("sleep", || async move { now_ms().saturating_add(millis) })
            .await?;
        let left = Duration::from_millis(wake_at.saturating_sub(now_ms()));
        if !left.is_zero() && self.sink().suspend(wake_at) {
            // The runner ends the run for the suspension; nothing after this runs in it. Pending
            // rather than returning a stop: the runner polls the handler first, and a handler
            // that returned here would be taken for one that finished.
            return std::future::pending().await;
        }
        tokio::select! {
            () = tokio::time::sleep(left) => Ok(()),
            () = self.cancelled() => Err(StepError::Stopped),
        }
    }
}
