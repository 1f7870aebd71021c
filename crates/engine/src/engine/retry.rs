//! Store errors inside a run: a transient one (a lost connection, a busy or full database, an
//! administrator's termination) is retried with backoff for as long as the run holds its lease;
//! a permanent one ([`StoreError::is_permanent`](crate::store::StoreError::is_permanent): the
//! backend refused the data) is returned at once, so the task fails saying why instead of
//! waiting for a write that can never land.

use std::time::Duration;

use super::runner::TaskSink;
use crate::clock::now_ms;
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

impl TaskSink {
    /// Runs `op` (a write of this run, `what` for the log) until it gives anything but a transient
    /// store error, while the run is not told to stop and its lease (the one its node last wrote)
    /// has not run out.
    pub(super) async fn retrying<T, F, Fut>(&self, what: &str, mut op: F) -> Retried<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, UpdateError>>,
    {
        let mut wait = FIRST_WAIT;
        let mut retried = false;
        loop {
            let result = op().await;
            let error = match &result {
                Err(UpdateError::Store(e)) if !e.is_permanent() => e,
                _ => return Retried { result, retried },
            };
            let deadline = match self.lease_until.load(std::sync::atomic::Ordering::Acquire) {
                0 => now_ms() + self.engine.config.lease_ms,
                until => until,
            };
            let left = deadline.saturating_sub(now_ms());
            if self.stop.is_cancelled() || left == 0 {
                tracing::warn!(task = %self.id, error = %error_chain(error), "{what} failed; the run's lease is over, so it is not tried again");
                return Retried { result, retried };
            }
            tracing::warn!(task = %self.id, error = %error_chain(error), retry_in_ms = wait.as_millis() as u64, "{what} failed; trying again");
            tokio::select! {
                () = tokio::time::sleep(wait.min(Duration::from_millis(left))) => {}
                () = self.stop.cancelled() => {}
            }
            wait = (wait * 2).min(MAX_WAIT);
            retried = true;
        }
    }
}
