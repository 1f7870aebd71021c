//! Status changes on their way into the store, so that a read of the task can wait for the one in
//! flight instead of answering with the state it is leaving.
//!
//! A client that polls a task which has just finished would otherwise see `working` until the
//! finish is committed (a group commit on SQLite, a round trip on PostgreSQL) and poll again, and
//! again: on SQLite, 2.5 polls per task where the memory store needs one. The change is decided when
//! its write starts; waiting for that write (bounded by [`MAX_WAIT`]) answers with the state the task
//! is in once the read is answered, which is what a poll asks. Only status changes count: a progress
//! report does not change the answer a poller is waiting for, and tasks report progress often.

use dashmap::DashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// Longest a read waits for a change in flight; past it the read answers with the stored state (a
/// store that stalls must not stall reads too).
const MAX_WAIT: Duration = Duration::from_millis(100);

/// The tasks with a status change being written now.
#[derive(Default)]
pub(super) struct Landing(DashMap<String, Arc<Notify>>);

/// A change in flight; dropping it (the write ended, well or not) wakes the readers waiting on it.
pub(super) struct InFlight<'a> {
    landing: &'a Landing,
    id: String,
    notify: Arc<Notify>,
}

impl Landing {
    /// Marks a status change of task `id` as being written until the returned guard is dropped.
    /// Changes of one task are written one at a time (under its ordering lock), so an entry is
    /// never shared.
    pub(super) fn begin(&self, id: &str) -> InFlight<'_> {
        let notify = Arc::new(Notify::new());
        self.0.insert(id.to_string(), notify.clone());
        InFlight {
            landing: self,
            id: id.to_string(),
            notify,
        }
    }

    /// Waits (at most [`MAX_WAIT`]) for the status change of task `id` being written now, if any.
    pub(super) async fn settled(&self, id: &str) {
        let Some(notify) = self.0.get(id).map(|e| e.value().clone()) else {
            return;
        };
        let woken = notify.notified();
        tokio::pin!(woken);
        // Registered before the entry is looked at again: a write that ends after this look wakes
        // it, and one that ended before has taken its entry away.
        woken.as_mut().enable();
        if !self
            .0
            .get(id)
            .is_some_and(|e| Arc::ptr_eq(e.value(), &notify))
        {
            return;
        }
        let _ = tokio::time::timeout(MAX_WAIT, woken).await;
    }

    /// Changes in flight now (for tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.landing
            .0
            .remove_if(&self.id, |_, n| Arc::ptr_eq(n, &self.notify));
        self.notify.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_read_waits_for_the_change_in_flight_and_no_longer() {
        let landing = Arc::new(Landing::default());
        // Nothing in flight: no wait.
        tokio::time::timeout(Duration::from_millis(5), landing.settled("t"))
            .await
            .expect("answers at once");
        let flight = landing.begin("t");
        let reader = {
            let landing = landing.clone();
            tokio::spawn(async move {
                let t0 = tokio::time::Instant::now();
                landing.settled("t").await;
                t0.elapsed()
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!reader.is_finished(), "waits while the change is written");
        drop(flight);
        let waited = reader.await.unwrap();
        assert!(
            waited >= Duration::from_millis(20) && waited < MAX_WAIT,
            "{waited:?}"
        );
        assert_eq!(landing.len(), 0);
    }

    #[tokio::test]
    async fn a_stalled_write_holds_a_read_back_only_so_long() {
        let landing = Landing::default();
        let _flight = landing.begin("t");
        let t0 = tokio::time::Instant::now();
        landing.settled("t").await;
        let waited = t0.elapsed();
        assert!(waited >= MAX_WAIT && waited < 10 * MAX_WAIT, "{waited:?}");
        // Another task's reads are not held back at all.
        tokio::time::timeout(Duration::from_millis(5), landing.settled("other"))
            .await
            .expect("answers at once");
    }
}
