//! The step journal a handler writes through its [`TaskContext`]: steps whose output is stored with
//! the task before they return, and durable sleeps, so a later run of the task (after a restart or
//! a hand-off) replays what was done instead of doing it again.
//!
//! The rules (Temporal's, Restate's and DBOS's, for one task): a step's body runs at least once (a
//! run stopped after the body but before the record runs it again); once recorded, its output is
//! what every later run gets; steps are matched by their place in the journal, and a place whose
//! recorded name differs from the one asked for fails the task (the code changed under it). Code
//! between steps runs again on every run, so it must decide the same way each time: anything that
//! reads the world (a clock, a file, a remote service) belongs in a step.

use serde::{de::DeserializeOwned, Serialize};
use std::future::Future;
use std::time::Duration;

use crate::clock::now_ms;
use crate::context::{StepError, StepSlot, TaskContext};

impl TaskContext {
    /// Runs `body` as the journal's next step named `name`, and stores what it returns with the
    /// task before returning it; when an earlier run of this task recorded this step, returns the
    /// recorded output without running `body`.
    ///
    /// The output is stored as JSON: return a `Result` from `body` to record a failure as well (it
    /// is replayed like any output). A plain call (not a task) keeps no journal and runs every body.
    /// Run steps one after another, not at once: their places in the journal follow the order of
    /// the calls.
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
        match self.sink().replay_step(name).await? {
            StepSlot::Recorded(value) => serde_json::from_value(value).map_err(serde_error),
            StepSlot::Run(seq) => {
                let output = body().await;
                let value = serde_json::to_value(&output).map_err(serde_error)?;
                self.sink().record_step(seq, name, value).await?;
                Ok(output)
            }
        }
    }

    /// Sleeps for `duration`, durably: the time to wake up is recorded as a step first, so a run
    /// that resumes the task after a restart sleeps only what is left of it (or not at all). Ends
    /// early with [`StepError::Stopped`] when the run is told to stop.
    pub async fn sleep(&self, duration: Duration) -> Result<(), StepError> {
        let millis = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        let wake_at: u64 = self
            .step("sleep", || async move { now_ms().saturating_add(millis) })
            .await?;
        let left = Duration::from_millis(wake_at.saturating_sub(now_ms()));
        tokio::select! {
            () = tokio::time::sleep(left) => Ok(()),
            () = self.cancelled() => Err(StepError::Stopped),
        }
    }
}
