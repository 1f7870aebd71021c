//! Store errors inside a run: a transient one (a lost connection, a busy or full database, an
//! administrator's termination) is retried with backoff for as long as the run holds its lease;
//! a permanent one ([`StoreError::is_permanent`](crate::store::StoreError::is_permanent): the
//! backend refused the data) is returned at once, so the task fails saying why instead of
//! waiting for a write that can never land.

use std::time::Duration;

use super::runner::TaskSink;
use crate::clock::now_ms;
use crate::context::StopReason;
use crate::store::{error_chain, UpdateError};

/// The first wait after a transient error; each next one doubles, up to [`MAX_WAIT`].
const FIRST_WAIT: Duration = Duration::from_millis(50);
const MAX_WAIT: Duration = Duration::from_secs(2);

/// What [`TaskSink::retrying`] ended with, and whether it had to try more than once (a write that
/// failed may have landed all the same: the caller checks before it takes a conflict for one).
pub(super) struct Retried<T> {
    pub(super) result: Result<T, UpdateError>,
    pub(super) retried: bool,
}

/// How long a write made under the task's ordering lock (progress, a question) is tried again:
/// a cancel, an answer or the finish waits for that lock meanwhile.
pub(super) const UNDER_LOCK: Duration = Duration::from_secs(2);

impl TaskSink {
    /// Runs `op` (a write of this run, `what` for the log) until it gives anything but a transient
    /// store error, for at most as long as the run's lease was known to last when the first error
    /// came (renewals made meanwhile do not stretch it), or `within` when that is shorter. It stops
    /// early when the run must write nothing more: cancelled, finished elsewhere, its lease lost.
    /// A run handed off or shutting down goes on trying: its checkpoint and last steps are what
    /// the next run resumes from.
    pub(super) async fn retrying<T, F, Fut>(
        &self,
        what: &str,
        within: Option<Duration>,
        mut op: F,
    ) -> Retried<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, UpdateError>>,
    {
        let mut wait = FIRST_WAIT;
        let mut retried = false;
        let mut deadline: Option<u64> = None;
        loop {
            let result = op().await;
            let error = match &result {
                Err(UpdateError::Store(e)) if !e.is_permanent() => e,
                _ => return Retried { result, retried },
            };
            let now = now_ms();
            let deadline = *deadline.get_or_insert_with(|| {
                let lease = match self.lease_until.load(std::sync::atomic::Ordering::Acquire) {
                    0 => now + self.engine.config.lease_ms,
                    until => until.min(now + self.engine.config.lease_ms),
                };
                match within {
                    Some(w) => lease.min(now + u64::try_from(w.as_millis()).unwrap_or(u64::MAX)),
                    None => lease,
                }
            });
            let left = deadline.saturating_sub(now);
            let must_stop = matches!(
                self.stop_reason(),
                Some(StopReason::Cancelled | StopReason::FinishedElsewhere | StopReason::LeaseLost)
            ) || self.kill.is_cancelled();
            if must_stop || left == 0 {
                tracing::warn!(task = %self.id, error = %error_chain(error), "{what} failed; not tried again (the run's lease is over, or the task is no longer its)");
                return Retried { result, retried };
            }
            tracing::warn!(task = %self.id, error = %error_chain(error), retry_in_ms = wait.as_millis() as u64, "{what} failed; trying again");
            tokio::select! {
                () = tokio::time::sleep(wait.min(Duration::from_millis(left))) => {}
                () = self.kill.cancelled() => {}
            }
            wait = (wait * 2).min(MAX_WAIT);
            retried = true;
        }
    }
}
