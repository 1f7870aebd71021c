//! A thread that drops, away from the writer, what the record cache lets go of in bulk.
//!
//! When the record cache turns a generation (`cache.rs`), the old one is dropped: thousands of
//! records, allocated on other threads and long out of the CPU's caches. Dropped where it was let
//! go of, that took 15–29 ms of the writer thread for 4,096 records, under the cache's lock: every
//! `tasks/get` answered from the cache and every caller in the writer's group waited for it. Here
//! the writer only sends the map away.

use std::sync::mpsc;
use std::sync::OnceLock;

/// Anything that can be dropped on another thread.
type Garbage = Box<dyn Send>;

/// Drops what it is given on a thread of its own, started at the first use and ended when the
/// reaper is dropped (after it has dropped what it was given).
#[derive(Default)]
pub(super) struct Reaper {
    /// The way to the thread, or `None` if it could not be started (things are then dropped in
    /// place, as before there was a reaper).
    to: OnceLock<Option<mpsc::Sender<Garbage>>>,
    /// Tests: holds the thread before each drop.
    #[cfg(test)]
    pub(super) gate: Gate,
}

impl Reaper {
    /// Drops `what` on the reaper's thread.
    pub(super) fn reap<T: Send + 'static>(&self, what: T) {
        let to = self.to.get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Garbage>();
            #[cfg(test)]
            let gate = self.gate.clone();
            std::thread::Builder::new()
                .name("sqlite-reaper".into())
                .spawn(move || {
                    while let Ok(garbage) = rx.recv() {
                        #[cfg(test)]
                        gate.pass();
                        drop(garbage);
                    }
                })
                .map_err(|e| tracing::warn!(error = %e, "could not start the SQLite store's reaper thread; dropping in place"))
                .ok()
                .map(|_| tx)
        });
        match to {
            // A send fails only once the thread is gone; `what` then comes back and drops here.
            Some(tx) => drop(tx.send(Box::new(what))),
            None => drop(what),
        }
    }
}

/// A gate a test holds shut to keep the reaper from dropping.
#[cfg(test)]
#[derive(Clone, Default)]
pub(super) struct Gate(std::sync::Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>);

/// The gate held shut until this is dropped (a failing test lets the reaper go too).
#[cfg(test)]
pub(super) struct Held(Gate);

#[cfg(test)]
impl Gate {
    /// Shuts the gate: the next drop waits.
    pub(super) fn hold(&self) -> Held {
        *self.0 .0.lock().unwrap_or_else(|p| p.into_inner()) = true;
        Held(self.clone())
    }

    /// Waits while the gate is shut.
    pub(super) fn pass(&self) {
        let (shut, signal) = &*self.0;
        let mut g = shut.lock().unwrap_or_else(|p| p.into_inner());
        while *g {
            g = signal.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }
}

#[cfg(test)]
impl Drop for Held {
    fn drop(&mut self) {
        let (shut, signal) = &*self.0 .0;
        *shut.lock().unwrap_or_else(|p| p.into_inner()) = false;
        signal.notify_all();
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::sync::{Arc, Weak};
    use std::time::{Duration, Instant};

    /// Waits up to 10 s for `w`'s value to be dropped.
    pub(in crate::store::sqlite) fn dropped<T>(w: &Weak<T>) -> bool {
        let until = Instant::now() + Duration::from_secs(10);
        while w.strong_count() > 0 {
            if Instant::now() > until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    #[test]
    fn what_is_reaped_is_dropped_on_the_reapers_thread_not_the_callers() {
        let reaper = Reaper::default();
        let held = reaper.gate.hold();
        let value = Arc::new(vec![0u8; 64]);
        let w = Arc::downgrade(&value);
        reaper.reap(value);
        // The caller is back while the reaper's thread is held: nothing was dropped here.
        assert_eq!(w.strong_count(), 1);
        drop(held);
        assert!(dropped(&w), "the reaper never dropped what it was given");
    }

    #[test]
    fn a_dropped_reaper_drops_what_it_was_given_before_its_thread_ends() {
        let reaper = Reaper::default();
        let held = reaper.gate.hold();
        let value = Arc::new(1u32);
        let w = Arc::downgrade(&value);
        reaper.reap(value);
        drop(reaper);
        drop(held);
        assert!(dropped(&w));
    }
}
