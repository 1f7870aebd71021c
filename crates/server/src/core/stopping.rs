//! How a server stops so that a balancer learns of it from replies: first a drain, then a short
//! close.
//!
//! - **Draining** (SIGTERM): no new tool call is taken (503, `Retry-After`, -32009), `/readyz` is
//!   503, everything else is served so clients follow their running tasks, and every HTTP/1 reply
//!   ends its connection.
//! - **Closing** (once nothing runs here): the listener closes at once, so a balancer's next
//!   connect is refused, which it may retry elsewhere whatever the request (nothing was sent) and
//!   which marks this replica down. Connections the kernel completed before that are accepted
//!   first: closing the listener would reset them, with any request a balancer wrote into them.
//!   Every request on a connection still open is answered 503 "stopping" (a balancer sends it on
//!   to another replica) until none has come for a moment, or until a bound; only then do the
//!   connections close. Closing a connection while a balancer writes a request into it loses that
//!   request: nginx answers such a POST with 502 and rightly does not replay it elsewhere. So a
//!   connection accepted just before the close has the quiet moment to bring its request, which
//!   is answered. What remains is the instant between taking the kernel's last completed
//!   connection and closing the listener.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The stopping states of a server and when a request last met the close.
#[derive(Debug)]
pub(crate) struct Stopping {
    draining: AtomicBool,
    closing: AtomicBool,
    started: Instant,
    /// Milliseconds since `started` at which the close began or last turned a request away.
    last_refused_ms: AtomicU64,
    /// Told when the close begins (the listener closes then).
    closing_begun: tokio::sync::Notify,
}

impl Default for Stopping {
    fn default() -> Stopping {
        Stopping {
            draining: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            started: Instant::now(),
            last_refused_ms: AtomicU64::new(0),
            closing_begun: tokio::sync::Notify::new(),
        }
    }
}

impl Stopping {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub(crate) fn begin_drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    pub(crate) fn draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    pub(crate) fn begin_closing(&self) {
        self.last_refused_ms.store(self.now_ms(), Ordering::SeqCst);
        self.draining.store(true, Ordering::SeqCst);
        self.closing.store(true, Ordering::SeqCst);
        self.closing_begun.notify_waiters();
    }

    /// Resolves once the close has begun.
    pub(crate) async fn closing(&self) {
        loop {
            let begun = self.closing_begun.notified();
            tokio::pin!(begun);
            // Registered before the check, so a close that begins in between is not missed.
            begun.as_mut().enable();
            if self.closing.load(Ordering::SeqCst) {
                return;
            }
            begun.await;
        }
    }

    /// Whether requests are turned away now; each one asked about counts as turned away.
    pub(crate) fn refuses(&self) -> bool {
        if !self.closing.load(Ordering::SeqCst) {
            return false;
        }
        self.last_refused_ms
            .fetch_max(self.now_ms(), Ordering::SeqCst);
        true
    }

    /// Resolves once no request was turned away for `quiet`, or `bound` after the close began.
    pub(crate) async fn quiet(&self, quiet: Duration, bound: Duration) {
        let until = tokio::time::Instant::now() + bound;
        let quiet_ms = u64::try_from(quiet.as_millis()).unwrap_or(u64::MAX);
        loop {
            let since = self
                .now_ms()
                .saturating_sub(self.last_refused_ms.load(Ordering::SeqCst));
            if since >= quiet_ms {
                return;
            }
            let wait = Duration::from_millis(quiet_ms - since);
            if tokio::time::Instant::now() + wait >= until {
                tokio::time::sleep_until(until).await;
                return;
            }
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_close_ends_after_a_quiet_moment_or_at_its_bound() {
        let s = Stopping::default();
        assert!(!s.refuses(), "nothing is refused before the close");
        s.begin_closing();
        assert!(s.draining(), "a close is a drain too");
        let began = Instant::now();
        s.quiet(Duration::from_millis(100), Duration::from_secs(5))
            .await;
        let took = began.elapsed();
        assert!(
            took >= Duration::from_millis(100) && took < Duration::from_secs(4),
            "quiet after its moment: {took:?}"
        );

        // A request every 20 ms keeps it from being quiet, until the bound.
        let s = std::sync::Arc::new(Stopping::default());
        s.begin_closing();
        let knocking = {
            let s = s.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    assert!(s.refuses());
                }
            })
        };
        let began = Instant::now();
        s.quiet(Duration::from_millis(200), Duration::from_millis(600))
            .await;
        knocking.abort();
        let took = began.elapsed();
        assert!(
            took >= Duration::from_millis(600),
            "held to the bound: {took:?}"
        );
    }
}
