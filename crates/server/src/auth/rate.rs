//! Token buckets: task-management calls per key, and anonymous sessions opened, shared across
//! replicas by exchanging what each let through.

use dashmap::DashMap;
use std::sync::Mutex;
use std::time::Instant;

struct Bucket {
    tokens: f64,
    last: Instant,
}

/// Token buckets for task-management calls, one per key (a principal, or an anonymous client
/// address), and for anonymous sessions opened. A bucket of calls holds ten seconds' worth, so short
/// bursts pass and sustained floods are cut to the rate; one of sessions a minute's worth.
///
/// With replicas, each one also counts the calls it let through ([`RateLimiter::share`]) and tells the
/// others, who take them from their own buckets ([`RateLimiter::taken_elsewhere`]): one bucket per key
/// across replicas, as fresh as the last exchange (every half second).
#[derive(Default)]
pub struct RateLimiter {
    buckets: DashMap<String, Mutex<Bucket>>,
    /// Calls let through here since the last [`RateLimiter::drain_taken`]: key → (calls, per minute).
    taken: DashMap<String, (u32, u32)>,
    shared: std::sync::atomic::AtomicBool,
}

/// Keys of buckets that count sessions opened (not calls): they hold a whole minute's worth, so a
/// client that opens its sessions together at start is not refused.
pub(crate) const SESSIONS_OPENED: &str = "sessions opened by ";

fn rate_and_capacity(key: &str, per_minute: u32) -> (f64, f64) {
    let rate = f64::from(per_minute.max(1)) / 60.0;
    let burst_secs = if key.starts_with(SESSIONS_OPENED) {
        60.0
    } else {
        10.0
    };
    (rate, (rate * burst_secs).max(5.0))
}

impl RateLimiter {
    /// Counts the calls let through from now on, for [`RateLimiter::drain_taken`].
    pub fn share(&self) {
        self.shared
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The calls let through since the last drain: (key, calls, per minute).
    pub fn drain_taken(&self) -> Vec<(String, u32, u32)> {
        let keys: Vec<String> = self.taken.iter().map(|e| e.key().clone()).collect();
        keys.into_iter()
            .filter_map(|k| self.taken.remove(&k).map(|(k, (n, rate))| (k, n, rate)))
            .collect()
    }

    /// Takes `calls` that another replica let through from `key`'s bucket here. The bucket may go
    /// below zero (down to minus its capacity): the calls happened, and the next ones wait for them.
    pub fn taken_elsewhere(&self, key: &str, calls: u32, per_minute: u32) {
        self.with_bucket(key, per_minute, |b, capacity| {
            b.tokens = (b.tokens - f64::from(calls)).max(-capacity);
        });
    }

    /// Runs `f` on `key`'s bucket (made full if new), refilled up to now; `f` gets its capacity.
    fn with_bucket<T>(
        &self,
        key: &str,
        per_minute: u32,
        f: impl FnOnce(&mut Bucket, f64) -> T,
    ) -> T {
        let (rate, capacity) = rate_and_capacity(key, per_minute);
        let now = Instant::now();
        let entry = self.buckets.entry(key.to_string()).or_insert_with(|| {
            Mutex::new(Bucket {
                tokens: capacity,
                last: now,
            })
        });
        let mut b = entry.lock().unwrap_or_else(|p| p.into_inner());
        b.tokens = (b.tokens + now.duration_since(b.last).as_secs_f64() * rate).min(capacity);
        b.last = now;
        f(&mut b, capacity)
    }

    /// Takes one call from `key`'s bucket; `Err(wait_ms)` when it is empty.
    pub fn check(&self, key: &str, per_minute: u32) -> Result<(), u64> {
        self.check_cost(key, per_minute, 1)
    }

    /// Takes a request that costs `cost` calls (one per item it names) from `key`'s bucket: it goes
    /// through when the bucket holds a call, and the bucket may then go below zero by the rest, so a
    /// large request delays the caller's next ones (by its whole cost) instead of never fitting.
    /// `Err(wait_ms)` when the bucket is empty.
    pub fn check_cost(&self, key: &str, per_minute: u32, cost: u32) -> Result<(), u64> {
        let (rate, _) = rate_and_capacity(key, per_minute);
        let cost = cost.max(1);
        let taken = self.with_bucket(key, per_minute, |b, _| {
            if b.tokens >= 1.0 {
                b.tokens -= f64::from(cost);
                Ok(())
            } else {
                Err(((1.0 - b.tokens) / rate * 1000.0).ceil() as u64)
            }
        });
        if taken.is_ok() && self.shared.load(std::sync::atomic::Ordering::Relaxed) {
            let mut t = self.taken.entry(key.to_string()).or_insert((0, per_minute));
            t.0 = t.0.saturating_add(cost);
            t.1 = per_minute;
        }
        taken
    }

    /// Forgets buckets untouched for `idle` (they would be full again anyway).
    pub fn forget_idle(&self, idle: std::time::Duration) {
        let now = Instant::now();
        self.buckets.retain(|_, b| {
            now.duration_since(b.get_mut().unwrap_or_else(|p| p.into_inner()).last) < idle
        });
    }
}
