//! The delivery loop: claims due events from the store's outbox (under a lease, so among replicas
//! one sends each), POSTs each signed, and records how it went. A failure is tried again after 1 s,
//! 2 s, 4 s … (at most 5 minutes apart, with jitter, or later when the receiver's `Retry-After`
//! says so) until the event is [`WebhookSettings::max_age`] old; 410 Gone stops the task's events to
//! that target. Woken when a task with webhooks changes, and once a second for retries.

use mcp_tasks_engine::store::TaskStore;
use mcp_tasks_engine::webhook::{Delivery, DeliveryAttempt, DeliveryNext};
use mcp_tasks_engine::{now_ms, Notifier, TaskEvent};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{address, sign, WebhookSettings};

/// How long a claim holds a delivery: past it another node may send it (one attempt's timeout
/// and then some).
const LEASE: Duration = Duration::from_secs(60);
/// Deliveries claimed at once.
const BATCH: usize = 32;
/// Sends in flight at once, all receivers together; each runs on its own, so a slow receiver
/// holds up no other receiver's events.
const MAX_IN_FLIGHT: usize = 64;
/// Sends in flight at once to one receiver (its scheme, host and port). More of its deliveries
/// wait, claimed, for the next round.
const PER_RECEIVER: usize = 4;
/// Most deliveries one claim takes (the ones in flight and held back, found again, included).
const MAX_CLAIM: usize = 512;
/// The first retry's delay; each next one doubles, up to [`MAX_DELAY`].
const FIRST_DELAY: Duration = Duration::from_secs(1);
const MAX_DELAY: Duration = Duration::from_secs(300);
/// How much of the receiver's answer is read (it is only shown to operators).
const MAX_ANSWER: usize = 4096;
/// How long sends in flight when the server stops may go on, so their answers are recorded (and
/// not sent again by another node) before the rest of the claims are let go.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// What became of one attempt, for metrics: `delivered`, `retry`, `gone`, `failed`.
pub type AttemptObserver = Arc<dyn Fn(&'static str, Duration) + Send + Sync>;

/// Sends the outbox's events. One per server.
pub struct Deliverer {
    store: Arc<dyn TaskStore>,
    node: String,
    settings: Arc<WebhookSettings>,
    client: reqwest::Client,
    wake: Arc<Notify>,
    observer: Option<AttemptObserver>,
    /// Send slots, all receivers together ([`MAX_IN_FLIGHT`]).
    in_flight: Arc<tokio::sync::Semaphore>,
    /// Send slots per receiver ([`PER_RECEIVER`]), by origin.
    receivers: dashmap::DashMap<String, Arc<tokio::sync::Semaphore>>,
    /// The deliveries being sent now: a claim finds this node's own claims again (it renews
    /// their lease), and they are not sent twice.
    sending: Arc<dashmap::DashSet<String>>,
    /// Deliveries settled lately, with the round they were settled in: a claim made before a
    /// settle may come back after it, still showing the delivery pending.
    settled: dashmap::DashMap<String, u64>,
    /// Counts the rounds.
    rounds: std::sync::atomic::AtomicU64,
    /// How many the last round held back for a busy receiver (claimed again by the next).
    held_back: std::sync::atomic::AtomicUsize,
    /// The sends in flight, to end them when the server stops.
    aborts: dashmap::DashMap<String, tokio::task::AbortHandle>,
}

/// A send in flight; when it ends (however it ends), its delivery is marked settled as of this
/// round, no longer being sent, and the loop is woken.
struct Sent<'a> {
    deliverer: &'a Deliverer,
    id: &'a str,
}

impl Drop for Sent<'_> {
    fn drop(&mut self) {
        let d = self.deliverer;
        let round = d.rounds.load(std::sync::atomic::Ordering::Acquire);
        d.settled.insert(self.id.to_string(), round);
        d.sending.remove(self.id);
        d.aborts.remove(self.id);
        d.wake.notify_one();
    }
}

impl Deliverer {
    /// A deliverer for `node` on `store`.
    pub fn new(
        store: Arc<dyn TaskStore>,
        node: String,
        settings: Arc<WebhookSettings>,
        observer: Option<AttemptObserver>,
    ) -> Result<Deliverer, reqwest::Error> {
        let client = reqwest::Client::builder()
            // Never through a proxy, whatever the environment says (HTTP(S)_PROXY): a proxy would
            // make the connection, so the address check on every connection (the resolver below)
            // would never see the receiver's address.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout)
            .dns_resolver(Arc::new(address::GuardedResolver {
                allowed: Arc::new(settings.allowed_hosts.clone()),
            }))
            .user_agent(concat!("mcp-tasks/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Deliverer {
            store,
            node,
            settings,
            client,
            wake: Arc::new(Notify::new()),
            observer,
            in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
            receivers: dashmap::DashMap::new(),
            sending: Arc::default(),
            settled: dashmap::DashMap::new(),
            rounds: std::sync::atomic::AtomicU64::new(0),
            held_back: std::sync::atomic::AtomicUsize::new(0),
            aborts: dashmap::DashMap::new(),
        })
    }

    /// Runs until `stop`: claims and sends, woken by events of tasks with webhooks on `notifier`.
    /// Once stopped, it lets go of what it still holds ([`OutboxStore::release_deliveries`](mcp_tasks_engine::store::OutboxStore::release_deliveries)).
    pub async fn run(self: Arc<Self>, notifier: &Notifier, stop: CancellationToken) {
        self.clone().deliver_until(notifier, &stop).await;
        match self.store.release_deliveries(&self.node).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                released = n,
                "stopping: webhook deliveries let go, for another replica (or the next start) to send"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "stopping: webhook deliveries could not be let go; their claims run out in a minute")
            }
        }
    }

    async fn deliver_until(self: Arc<Self>, notifier: &Notifier, stop: &CancellationToken) {
        // Woken inline by the events of tasks with webhooks, not by a subscriber of every event:
        // a task without any costs no wake-up here. (Events of other replicas' tasks are theirs
        // to send; a late progress event, at the end of an interval, is found by the next
        // second's round.)
        let wake = Arc::downgrade(&self.wake);
        notifier.observe_local(Arc::new(move |event: &TaskEvent| {
            let wanted = match event {
                TaskEvent::Changed(t) | TaskEvent::InputRequested { task: t, .. } => {
                    !t.webhooks.is_empty()
                }
                TaskEvent::Progress { task: t, .. } => {
                    t.webhooks.iter().any(|w| w.wants_progress())
                }
                _ => false,
            };
            if wanted {
                if let Some(wake) = wake.upgrade() {
                    wake.notify_one();
                }
            }
        }));
        let mut last_purge = Instant::now();
        loop {
            let claimed = tokio::select! {
                r = self.round() => r,
                () = stop.cancelled() => Ok(0),
            };
            if stop.is_cancelled() {
                // The sends in flight get a moment to be answered and recorded; the rest are
                // ended, so none goes on after its claim is let go (another node sends it).
                let all = u32::try_from(MAX_IN_FLIGHT).unwrap_or(u32::MAX);
                let _ = tokio::time::timeout(STOP_GRACE, self.in_flight.acquire_many(all)).await;
                for send in self.aborts.iter() {
                    send.value().abort();
                }
                return;
            }
            let sent = match claimed {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(error = %e, "webhook deliveries could not be claimed; trying again in a second");
                    0
                }
            };
            if last_purge.elapsed() > Duration::from_secs(3600) {
                last_purge = Instant::now();
                let before = now_ms().saturating_sub(
                    u64::try_from(self.settings.keep_settled.as_millis()).unwrap_or(u64::MAX),
                );
                if let Err(e) = self.store.purge_deliveries(before).await {
                    tracing::warn!(error = %e, "old webhook deliveries could not be removed");
                }
            }
            if sent > 0 {
                // What was sent may have let the next event of its task go: claim again at once.
                continue;
            }
            tokio::select! {
                () = self.wake.notified() => {}
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                () = stop.cancelled() => return,
            }
        }
    }

    /// Claims what is due (as many as there are free send slots) and starts sending each on its
    /// own; how many it started. A delivery whose receiver has as many sends in flight as it may
    /// is not started: it stays claimed by this node, whose next claim finds it again. A send
    /// that ends wakes the loop: it may have let the next event of its task go.
    pub async fn round(self: &Arc<Self>) -> Result<usize, mcp_tasks_engine::store::StoreError> {
        let free = self.in_flight.available_permits().min(BATCH);
        if free == 0 {
            return Ok(0);
        }
        // What was settled before this round began is settled in what this round's claim reads.
        let round = self
            .rounds
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel)
            + 1;
        self.settled.retain(|_, at| *at >= round);
        // Receivers with nothing in flight hold nothing worth keeping.
        self.receivers
            .retain(|_, slots| slots.available_permits() < PER_RECEIVER);
        let now = now_ms();
        let lease_until = now + u64::try_from(self.lease().as_millis()).unwrap_or(60_000);
        // The claim finds this node's own claims too (it only skips other nodes'): the ones being
        // sent and the ones held back for a busy receiver. Room for them, so they do not crowd out
        // new ones.
        let held_back = self.held_back.load(std::sync::atomic::Ordering::Acquire);
        let limit = (free + self.sending.len() + held_back).min(MAX_CLAIM);
        let due = self
            .store
            .claim_deliveries(&self.node, now, lease_until, limit)
            .await?;
        let mut started = 0;
        let mut held = 0;
        for d in due {
            // Marked as being sent before asking whether it was settled: a send that settles it
            // marks it settled before it lets go of the mark, so one of the two sees the other.
            if !self.sending.insert(d.entry.id.clone()) {
                continue;
            }
            if self.settled.contains_key(&d.entry.id) {
                self.sending.remove(&d.entry.id);
                continue;
            }
            let Ok(receiver) = self.receiver_slots(&d.entry.url).try_acquire_owned() else {
                self.sending.remove(&d.entry.id);
                held += 1;
                continue;
            };
            let Ok(slot) = self.in_flight.clone().try_acquire_owned() else {
                self.sending.remove(&d.entry.id);
                break;
            };
            started += 1;
            let me = self.clone();
            let id = d.entry.id.clone();
            let handle = tokio::spawn(async move {
                let id = d.entry.id.clone();
                // However the send ends (a panic included), the delivery is no longer being sent.
                let _sent = Sent {
                    deliverer: &me,
                    id: &id,
                };
                me.deliver(d).await;
                drop((receiver, slot));
            });
            // Kept to end the send if the server stops before it does; a send that ended already
            // (it let go of its mark) needs none.
            self.aborts.insert(id.clone(), handle.abort_handle());
            if !self.sending.contains(&id) {
                self.aborts.remove(&id);
            }
        }
        self.held_back
            .store(held, std::sync::atomic::Ordering::Release);
        Ok(started)
    }

    /// How long a claim holds a delivery: a send may take the attempt's timeout, and the claim
    /// must outlast it.
    fn lease(&self) -> Duration {
        LEASE.max(self.settings.timeout * 2 + Duration::from_secs(10))
    }

    /// The send slots of the receiver at `url`.
    fn receiver_slots(&self, url: &str) -> Arc<tokio::sync::Semaphore> {
        let origin = reqwest::Url::parse(url)
            .map(|u| u.origin().ascii_serialization())
            .unwrap_or_else(|_| url.to_string());
        self.receivers
            .entry(origin)
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(PER_RECEIVER)))
            .clone()
    }

    async fn deliver(&self, d: Delivery) {
        let started = Instant::now();
        let (attempt, next) = self.attempt(&d).await;
        let outcome = match next {
            DeliveryNext::Delivered => "delivered",
            DeliveryNext::RetryAt(_) => "retry",
            DeliveryNext::Gone => "gone",
            DeliveryNext::GiveUp => "failed",
        };
        tracing::info!(
            target: "mcp_tasks::audit",
            delivery = %d.entry.id, task = %d.entry.task_id, event = %d.entry.event,
            url = %loggable_url(&d.entry.url), status = ?attempt.status, error = ?attempt.error, outcome,
            "webhook attempt"
        );
        if let Some(observe) = &self.observer {
            observe(outcome, started.elapsed());
        }
        match self
            .store
            .finish_delivery(&d.entry.id, &self.node, attempt, next)
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!(delivery = %d.entry.id, "a webhook delivery's lease moved to another node before its attempt was recorded")
            }
            Err(e) => {
                tracing::warn!(delivery = %d.entry.id, error = %e, "a webhook attempt could not be recorded; it will be tried again when its lease ends")
            }
        }
    }

    /// One attempt and what follows from it.
    async fn attempt(&self, d: &Delivery) -> (DeliveryAttempt, DeliveryNext) {
        let at = now_ms();
        let started = Instant::now();
        let done = |status: Option<u16>, error: Option<String>| DeliveryAttempt {
            at,
            status,
            latency_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            error,
        };
        // Where it goes and what signs it: an operator's subscription as configured now.
        let (url, secret) = match self.settings.endpoint_of(&d.entry) {
            Ok(e) => e,
            Err(super::Unsigned::Gone(why)) => {
                return (done(None, Some(why)), DeliveryNext::GiveUp)
            }
            // A key the operator may still configure: tried again, until max_age.
            Err(super::Unsigned::NoKey(why)) => {
                return (done(None, Some(why)), self.retry_or_give_up(d, at, None))
            }
        };
        let key = match sign::key_of(&secret) {
            Ok(k) => k,
            Err(e) => return (done(None, Some(e)), DeliveryNext::GiveUp),
        };
        // Checked again: the operator may have changed what is allowed since it was registered.
        let checked = match address::check_url(&url, &self.settings.allowed_hosts) {
            Ok(c) => c,
            Err(e) => {
                // Recorded and logged: without the URL's query, where tokens go.
                let why = e.to_string().replace(&url, &loggable_url(&url));
                return (done(None, Some(why)), DeliveryNext::GiveUp);
            }
        };
        let body = match super::body::render(&d.entry) {
            Ok(b) => b,
            Err(e) => {
                let why = format!("the event's stored snapshot cannot be read: {e}");
                return (done(None, Some(why)), DeliveryNext::GiveUp);
            }
        };
        let timestamp = at / 1000;
        let signature = sign::signature(&key, &d.entry.id, timestamp, &body);
        let sent = self
            .client
            .post(checked.url)
            .header("content-type", "application/json")
            .header("webhook-id", &d.entry.id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body)
            .send()
            .await;
        let (status, error, retry_after) = match sent {
            Ok(resp) => {
                let status = resp.status();
                let retry_after = resp
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| retry_after(v, std::time::SystemTime::now()));
                let error = if status.is_success() {
                    None
                } else {
                    let text = read_some(resp).await;
                    Some(if text.is_empty() {
                        format!("the receiver answered {status}")
                    } else {
                        format!("the receiver answered {status}: {text}")
                    })
                };
                (Some(status.as_u16()), error, retry_after)
            }
            // Without the URL, which often carries a token: the attempt is shown and logged.
            Err(e) => (None, Some(error_text(&e.without_url())), None),
        };
        let attempt = done(status, error);
        let next = match status {
            Some(s) if (200..300).contains(&s) => DeliveryNext::Delivered,
            Some(410) => DeliveryNext::Gone,
            _ => self.retry_or_give_up(d, at, retry_after),
        };
        (attempt, next)
    }

    /// The next attempt after a failed one, or giving up once it would fall past `max_age`.
    fn retry_or_give_up(
        &self,
        d: &Delivery,
        at: u64,
        retry_after: Option<Duration>,
    ) -> DeliveryNext {
        let delay = next_delay(d.attempts + 1, retry_after);
        let next_at = at.saturating_add(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
        let max_age = u64::try_from(self.settings.max_age.as_millis()).unwrap_or(u64::MAX);
        if next_at > d.entry.created_at.saturating_add(max_age) {
            DeliveryNext::GiveUp
        } else {
            DeliveryNext::RetryAt(next_at)
        }
    }
}

/// The delay before attempt `n + 1` after `n` failed: 1 s doubling to at most 5 minutes, with up to
/// a fifth of it added at random so that receivers coming back are not hit by every sender at once.
pub fn backoff(failed: u32) -> Duration {
    let base = FIRST_DELAY
        .saturating_mul(1u32 << failed.saturating_sub(1).min(16))
        .min(MAX_DELAY);
    let mut r = [0u8; 2];
    let _ = getrandom::fill(&mut r);
    let jitter = base.mul_f64(f64::from(u16::from_le_bytes(r)) / f64::from(u16::MAX) / 5.0);
    base + jitter
}

/// The delay before the next attempt after `failed` attempts failed: the backoff, or longer when
/// the receiver asked for it (`Retry-After`), but never past [`MAX_DELAY`]: a receiver may slow
/// us down, not make us wait forever (a huge value) nor hurry us (zero, a date in the past).
fn next_delay(failed: u32, retry_after: Option<Duration>) -> Duration {
    let own = backoff(failed);
    match retry_after {
        Some(asked) if asked > own => asked.min(MAX_DELAY.max(own)),
        _ => own,
    }
}

/// A `Retry-After` value: delay-seconds or an HTTP-date (RFC 9110 §10.2.3), as a delay from
/// `now`; a date already past is no delay. `None` for anything else.
fn retry_after(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Digits beyond u64 are a very long delay, clamped by the caller like any other.
        return Some(
            value
                .parse::<u64>()
                .map_or(Duration::MAX, Duration::from_secs),
        );
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or_default())
}

/// A receiver's URL for a log line: without its user info, query and fragment, where tokens go
/// (`https://hooks.example.com/in?token=…` is logged as `https://hooks.example.com/in`).
fn loggable_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            u.set_query(None);
            u.set_fragment(None);
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        // Checked at registration, so this is not expected; show the part before any query.
        Err(_) => url.split(['?', '#']).next().unwrap_or_default().to_string(),
    }
}

/// The start of the receiver's answer, for operators.
async fn read_some(resp: reqwest::Response) -> String {
    use futures::StreamExt;
    let mut body = resp.bytes_stream();
    let mut got = Vec::new();
    while let Some(Ok(chunk)) = body.next().await {
        got.extend_from_slice(&chunk);
        if got.len() >= MAX_ANSWER {
            got.truncate(MAX_ANSWER);
            break;
        }
    }
    String::from_utf8_lossy(&got).trim().to_string()
}

/// An error and its causes, on one line (the resolver's refusal is a cause).
fn error_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let c_text = c.to_string();
        if !text.contains(&c_text) {
            text.push_str(": ");
            text.push_str(&c_text);
        }
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_double_from_a_second_to_five_minutes_with_a_little_jitter() {
        for (failed, base) in [(1, 1), (2, 2), (3, 4), (9, 256), (10, 300), (40, 300)] {
            let d = backoff(failed);
            let base = Duration::from_secs(base);
            assert!(d >= base && d <= base + base / 5, "{failed}: {d:?}");
        }
    }

    #[test]
    fn urls_are_logged_without_their_secrets() {
        assert_eq!(
            loggable_url("https://user:pw@hooks.example.com/in?token=abc#frag"),
            "https://hooks.example.com/in"
        );
        assert_eq!(
            loggable_url("https://hooks.example.com/in"),
            "https://hooks.example.com/in"
        );
        assert_eq!(loggable_url("not a url?token=abc"), "not a url");
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            retry_after("18446744073709551615", now),
            Some(Duration::from_secs(u64::MAX))
        );
        assert_eq!(
            retry_after("99999999999999999999999", now),
            Some(Duration::MAX)
        );
        let later = httpdate::fmt_http_date(now + Duration::from_secs(90));
        assert_eq!(retry_after(&later, now), Some(Duration::from_secs(90)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(90));
        assert_eq!(retry_after(&past, now), Some(Duration::ZERO));
        assert_eq!(retry_after("-5", now), None);
        assert_eq!(retry_after("soon", now), None);
        assert_eq!(retry_after("", now), None);
    }

    /// A receiver may ask for a later retry, up to the backoff's ceiling; a huge, zero or past
    /// `Retry-After` neither stalls the event nor hurries the next attempt.
    #[test]
    fn retry_after_is_clamped_into_the_backoff_bounds() {
        for failed in [1, 3, 20] {
            let own = FIRST_DELAY
                .saturating_mul(1 << (failed - 1).min(16))
                .min(MAX_DELAY);
            for asked in [None, Some(Duration::ZERO), Some(Duration::from_millis(1))] {
                let d = next_delay(failed, asked);
                assert!(d >= own && d <= own + own / 5, "{failed} {asked:?}: {d:?}");
            }
            for huge in [Duration::from_secs(u64::MAX), Duration::MAX] {
                let d = next_delay(failed, Some(huge));
                assert!(
                    d <= MAX_DELAY + MAX_DELAY / 5 && d >= own,
                    "{failed}: {d:?}"
                );
            }
        }
        assert_eq!(
            next_delay(1, Some(Duration::from_secs(30))),
            Duration::from_secs(30)
        );
    }
}
