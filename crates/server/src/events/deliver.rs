//! The event delivery loop: fans the log out to subscriptions (for a store that does that apart
//! from the write), claims due deliveries under a lease (among replicas one sends each), POSTs
//! each event on its own (one event per request, signed, `webhook-id` = `eventId` on every
//! attempt), and records how it went on the delivery and its subscription.
//!
//! Retries: at most [`MAX_ATTEMPTS`] attempts over about 15 minutes (10 s, 1 min, 3 min, 10 min
//! apart, with jitter; later when the receiver's `Retry-After` asks, up to 10 min). The first
//! retry comes soon: the AI SDK's receiver answers 503 until it has stored the subscribe result.
//! 410 drops that delivery and keeps the subscription; 413 is not retried.

use mcp_tasks_engine::events::{EventDelivery, TASK_INPUT_REQUIRED};
use mcp_tasks_engine::store::TaskStore;
use mcp_tasks_engine::webhook::{DeliveryAttempt, DeliveryNext};
use mcp_tasks_engine::{now_ms, Notifier, TaskEvent, TaskStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::occurrence::{self, InputRenderer};
use super::verify::{self, Failure};
use super::{ErrorKind, EventSettings, MAX_BODY_BYTES};
use crate::webhooks::{address, sign, SecretKeys};
use mcp_tasks_engine::events::EventSubscription;

/// Most attempts one delivery gets.
pub const MAX_ATTEMPTS: u32 = 5;
/// The waits after the 1st, 2nd, 3rd and 4th failed attempts.
const DELAYS: [Duration; 4] = [
    Duration::from_secs(10),
    Duration::from_secs(60),
    Duration::from_secs(180),
    Duration::from_secs(600),
];
/// Longest wait a receiver's `Retry-After` can ask for.
const MAX_DELAY: Duration = Duration::from_secs(600);
/// How long a claim holds a delivery.
const LEASE: Duration = Duration::from_secs(60);
/// Sends in flight at once.
const MAX_IN_FLIGHT: usize = 32;
/// Events one fan-out goes through.
const FAN_OUT: usize = 500;
/// How long sends in flight may go on when the server stops.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// How often the gaps due to be told are looked for (or every [`EventSettings::gap_retry`], when
/// shorter).
const GAP_CHECK: Duration = Duration::from_secs(5);
/// Gaps one round looks at.
const GAPS_PER_ROUND: usize = 32;
/// Most times one gap is told: with the default wait (30 s doubling to 10 min), about two hours
/// of an endpoint refusing envelopes; then it is forgotten (the subscription's delivery status
/// still says its endpoint failed).
pub const GAP_ATTEMPTS: u32 = 16;
/// Attempts a `terminated` envelope gets, [`TERMINATED_RETRY`] × the attempt apart.
const TERMINATED_ATTEMPTS: u32 = 3;
const TERMINATED_RETRY: Duration = Duration::from_secs(2);
/// Most subscriptions the sweep for undeclared types reads.
const END_SWEEP: usize = 100_000;

/// What became of one attempt, for metrics: `delivered`, `retry`, `gone`, `failed`.
pub type AttemptObserver = Arc<dyn Fn(&'static str, Duration) + Send + Sync>;

/// Sends the event deliveries. One per server.
pub struct EventSender {
    store: Arc<dyn TaskStore>,
    node: String,
    settings: Arc<EventSettings>,
    keys: SecretKeys,
    client: reqwest::Client,
    inputs: InputRenderer,
    observer: Option<AttemptObserver>,
    wake: Arc<Notify>,
    slots: Arc<tokio::sync::Semaphore>,
    /// (subscription, event) being sent now: a claim that finds one again does not send it twice.
    sending: Arc<dashmap::DashSet<(String, String)>>,
    /// Deliveries settled lately, with the round they were settled in: a claim read before a
    /// settle committed may come back after it, still showing the delivery pending.
    settled: dashmap::DashMap<(String, String), u64>,
    /// Counts the rounds.
    rounds: std::sync::atomic::AtomicU64,
    /// Whether the store held a subscription when last asked, and when that was: without one
    /// there is nothing to fan out or claim, and a round costs the store nothing.
    subscribed: std::sync::Mutex<Option<(bool, Instant)>>,
}

/// How long an answer to "is there any subscription?" is trusted (a subscription made on this
/// node says so at once; one made on another replica is seen within this).
const SUBSCRIBED_FOR: Duration = Duration::from_secs(5);

impl EventSender {
    /// A sender for `node` on `store`.
    pub fn new(
        store: Arc<dyn TaskStore>,
        node: String,
        settings: Arc<EventSettings>,
        keys: SecretKeys,
        inputs: InputRenderer,
        observer: Option<AttemptObserver>,
    ) -> Result<EventSender, reqwest::Error> {
        let client = verify::client(settings.timeout, settings.hosts())?;
        Ok(EventSender {
            store,
            node,
            settings,
            keys,
            client,
            inputs,
            observer,
            wake: Arc::new(Notify::new()),
            slots: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
            sending: Arc::default(),
            subscribed: std::sync::Mutex::new(None),
            settled: dashmap::DashMap::new(),
            rounds: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Says a subscription was just stored (here): the next round fans out and claims.
    pub fn subscribed(&self) {
        *self.subscribed.lock().unwrap_or_else(|e| e.into_inner()) = Some((true, Instant::now()));
        self.wake.notify_one();
    }

    /// Whether the store holds any subscription (asked at most every [`SUBSCRIBED_FOR`]).
    async fn any_subscription(&self) -> Result<bool, mcp_tasks_engine::store::StoreError> {
        let known = *self.subscribed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((any, at)) = known {
            if at.elapsed() < SUBSCRIBED_FOR {
                return Ok(any);
            }
        }
        let any = !self.store.subscriptions(None, 1).await?.is_empty();
        *self.subscribed.lock().unwrap_or_else(|e| e.into_inner()) = Some((any, Instant::now()));
        Ok(any)
    }

    /// Runs until `stop`, woken by task events that make subscriber events, and once a second.
    /// Once stopped, it lets go of what it still holds.
    pub async fn run(self: Arc<Self>, notifier: &Notifier, stop: CancellationToken) {
        let wake = Arc::downgrade(&self.wake);
        notifier.observe_local(Arc::new(move |event: &TaskEvent| {
            let makes_one = match event {
                TaskEvent::Changed(t) => {
                    t.status.is_terminal() || t.status == TaskStatus::InputRequired
                }
                TaskEvent::InputRequested { .. } => true,
                _ => false,
            };
            if makes_one {
                if let Some(wake) = wake.upgrade() {
                    wake.notify_one();
                }
            }
        }));
        let mut last_purge: Option<Instant> = None;
        let mut last_gaps: Option<Instant> = None;
        loop {
            let round = tokio::select! {
                r = self.round() => r,
                () = stop.cancelled() => Ok(0),
            };
            if stop.is_cancelled() {
                let all = u32::try_from(MAX_IN_FLIGHT).unwrap_or(u32::MAX);
                let _ = tokio::time::timeout(STOP_GRACE, self.slots.acquire_many(all)).await;
                match self.store.release_event_deliveries(&self.node).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(released = n, "stopping: event deliveries let go"),
                    Err(e) => {
                        tracing::warn!(error = %e, "stopping: event deliveries could not be let go; their claims run out in a minute")
                    }
                }
                return;
            }
            if let Err(e) = &round {
                tracing::warn!(error = %e, "event deliveries could not be claimed; trying again in a second");
            }
            if last_purge.is_none_or(|at| at.elapsed() > Duration::from_secs(600)) {
                last_purge = Some(Instant::now());
                // The fan-out cursor first: the log keeps what it has not gone through (with no
                // subscription, rounds leave it where it was).
                for _ in 0..1_000 {
                    match self.store.fan_out_events(FAN_OUT).await {
                        Ok(n) if n == FAN_OUT => {}
                        Ok(_) => break,
                        Err(e) => {
                            tracing::warn!(error = %e, "the event log could not be fanned out");
                            break;
                        }
                    }
                }
                let now = now_ms();
                let keep = u64::try_from(self.settings.keep.as_millis()).unwrap_or(u64::MAX);
                match self.store.purge_events(now, now.saturating_sub(keep)).await {
                    Ok(p) if p.events + p.subscriptions + p.deliveries > 0 => {
                        tracing::debug!(
                            events = p.events,
                            subscriptions = p.subscriptions,
                            deliveries = p.deliveries,
                            "event log purged"
                        )
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "the event log could not be purged"),
                }
            }
            if self.settings.control_envelopes
                && last_gaps.is_none_or(|at| at.elapsed() >= GAP_CHECK.min(self.settings.gap_retry))
            {
                last_gaps = Some(Instant::now());
                if let Err(e) = self.tell_gaps(&stop).await {
                    tracing::warn!(error = %e, "the event gaps could not be read");
                }
            }
            if matches!(round, Ok(n) if n > 0) {
                continue;
            }
            tokio::select! {
                () = self.wake.notified() => {}
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                () = stop.cancelled() => {}
            }
        }
    }

    /// Fans out what is new, claims what is due (as many as there are free send slots) and starts
    /// sending each; how many it started.
    pub async fn round(self: &Arc<Self>) -> Result<usize, mcp_tasks_engine::store::StoreError> {
        // Without a subscription nothing is due; the fan-out cursor waits (a new subscription
        // starts after what it skips, and a replay writes its own deliveries).
        if !self.any_subscription().await? && self.sending.is_empty() {
            return Ok(0);
        }
        // A backlog (the cursor waited while there was no subscription) goes in a few batches.
        for _ in 0..20 {
            if self.store.fan_out_events(FAN_OUT).await? < FAN_OUT {
                break;
            }
        }
        let free = self.slots.available_permits();
        if free == 0 {
            return Ok(0);
        }
        // What was settled before this round began is settled in what this round's claim reads.
        let round = self
            .rounds
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel)
            + 1;
        self.settled.retain(|_, at| *at >= round);
        let now = now_ms();
        let lease_until = now + u64::try_from(self.lease().as_millis()).unwrap_or(60_000);
        let due = self
            .store
            .claim_event_deliveries(&self.node, now, lease_until, free + self.sending.len())
            .await?;
        let mut started = 0;
        for d in due {
            let key = (d.subscription.id.clone(), d.event.event.id.clone());
            // Marked as being sent before asking whether it was settled: a send marks it settled
            // before it lets go of the mark, so one of the two sees the other.
            if !self.sending.insert(key.clone()) {
                continue;
            }
            if self.settled.contains_key(&key) {
                self.sending.remove(&key);
                continue;
            }
            let Ok(slot) = self.slots.clone().try_acquire_owned() else {
                self.sending.remove(&key);
                break;
            };
            started += 1;
            let me = self.clone();
            tokio::spawn(async move {
                me.deliver(d).await;
                let round = me.rounds.load(std::sync::atomic::Ordering::Acquire);
                me.settled.insert(key.clone(), round);
                me.sending.remove(&key);
                drop(slot);
                me.wake.notify_one();
            });
        }
        Ok(started)
    }

    fn lease(&self) -> Duration {
        LEASE.max(self.settings.timeout * 2 + Duration::from_secs(10))
    }

    async fn deliver(&self, d: EventDelivery) {
        let started = Instant::now();
        let (attempt, next, failure) = self.attempt(&d).await;
        let outcome = match next {
            DeliveryNext::Delivered => "delivered",
            DeliveryNext::RetryAt(_) => "retry",
            DeliveryNext::Gone => "gone",
            DeliveryNext::GiveUp => "failed",
        };
        tracing::info!(
            target: "mcp_tasks::audit",
            subscription = %d.subscription.id, event = %d.event.event.id, name = %d.event.event.name,
            status = ?attempt.status, failure = failure.map(Failure::as_str), outcome,
            "event delivery attempt"
        );
        if let Some(observe) = &self.observer {
            observe(outcome, started.elapsed());
        }
        if let Err(e) = self
            .store
            .finish_event_delivery(
                &d.subscription.id,
                &d.event.event.id,
                &self.node,
                &attempt,
                next,
                failure.map(Failure::as_str),
                // Given up after being tried: the subscriber has a gap, kept with the give-up (so
                // only by the node that held the delivery) and told, with control envelopes on,
                // once its endpoint takes envelopes again, with a cursor to keep: it reconciles
                // what it missed by other means (the task itself), as the extension says.
                self.settings.control_envelopes && failure.is_some(),
            )
            .await
        {
            tracing::warn!(subscription = %d.subscription.id, error = %e, "an event delivery attempt could not be recorded; it is tried again when its lease ends");
        }
    }

    /// One attempt, and what follows from it.
    async fn attempt(&self, d: &EventDelivery) -> (DeliveryAttempt, DeliveryNext, Option<Failure>) {
        let at = now_ms();
        let started = Instant::now();
        let done = |status: Option<u16>, error: Option<String>| DeliveryAttempt {
            at,
            status,
            latency_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            error,
        };
        let sub = &d.subscription;
        if !sub.is_live(at) {
            return (
                done(None, Some("the subscription ended".into())),
                DeliveryNext::GiveUp,
                None,
            );
        }
        let keys = match self.keys_of(sub, at) {
            Ok(k) => k,
            Err(why) => return (done(None, Some(why)), DeliveryNext::GiveUp, None),
        };
        if let Err(e) = address::check_url(&sub.url, &self.settings.hosts()) {
            return (
                done(None, Some(e.to_string())),
                DeliveryNext::GiveUp,
                Some(Failure::ConnectionRefused),
            );
        }
        let pending = match (
            &d.event.event.task_id,
            d.event.event.name == TASK_INPUT_REQUIRED,
        ) {
            (Some(task), true) => self.store.inputs(task).await.unwrap_or_default(),
            _ => Vec::new(),
        };
        let Some(body) = occurrence::render(
            &d.event,
            Some(d.event.position.cursor()),
            &pending,
            &self.inputs,
        ) else {
            let why = "the event's stored data cannot be read".to_string();
            return (done(None, Some(why)), DeliveryNext::GiveUp, None);
        };
        let body = body.to_string();
        if body.len() > MAX_BODY_BYTES {
            let why = format!(
                "the event is {} bytes, more than a body may carry",
                body.len()
            );
            return (
                done(None, Some(why)),
                DeliveryNext::GiveUp,
                Some(Failure::Http4xx),
            );
        }
        let sent = verify::post(
            &self.client,
            &sub.url,
            &keys,
            &d.event.event.id,
            &sub.id,
            body,
        )
        .await;
        match sent {
            Ok(resp) => {
                let status = resp.status().as_u16();
                let retry_after = resp
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs);
                if (200..300).contains(&status) {
                    return (done(Some(status), None), DeliveryNext::Delivered, None);
                }
                let failure = Some(Failure::of_status(status));
                let error = Some(format!("the receiver answered {status}"));
                let next = match status {
                    410 => DeliveryNext::Gone,
                    413 => DeliveryNext::GiveUp,
                    _ => next_attempt(d.attempts + 1, at, retry_after),
                };
                (done(Some(status), error), next, failure)
            }
            Err(e) => {
                let failure = Failure::of_error(&e);
                let error = Some(failure.as_str().to_string());
                (
                    done(None, error),
                    next_attempt(d.attempts + 1, at, None),
                    Some(failure),
                )
            }
        }
    }

    /// Tells the subscriptions with a gap due (a delivery given up) that they missed events, with
    /// a signed `{"type": "gap", "cursor": …}` envelope (the later of the latest event missed and
    /// the latest delivered), when control envelopes are on. Each is claimed in the store first
    /// (one replica tells it; it is due again after [`EventSettings::gap_retry`], doubling to
    /// 10 min, if this telling is not taken), and forgotten once its endpoint takes one (2xx),
    /// or after [`GAP_ATTEMPTS`]. Gaps are read soonest due first, so one endpoint that refuses
    /// them does not hold the others up. `webhook-id` is derived from the subscription and the
    /// cursor: one told twice is one message to its receiver.
    async fn tell_gaps(
        self: &Arc<Self>,
        stop: &CancellationToken,
    ) -> Result<(), mcp_tasks_engine::store::StoreError> {
        if !self.settings.control_envelopes {
            return Ok(());
        }
        let now = now_ms();
        for gap in self.store.due_event_gaps(now, GAPS_PER_ROUND).await? {
            if stop.is_cancelled() {
                return Ok(());
            }
            let id = gap.subscription.id.clone();
            if gap.attempts >= GAP_ATTEMPTS {
                tracing::warn!(subscription = %id, attempts = gap.attempts, "a gap envelope was never taken; it is no longer told");
                self.store.forget_event_gap(&id, gap.missed).await?;
                continue;
            }
            // One of the send slots, as a delivery: the stop waits for it too.
            let Ok(slot) = self.slots.clone().try_acquire_owned() else {
                return Ok(());
            };
            let wait = self
                .settings
                .gap_retry
                .saturating_mul(1 << gap.attempts.min(10))
                .min(MAX_DELAY);
            let retry_at = now.saturating_add(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
            if !self.store.claim_event_gap(&id, now, retry_at).await? {
                continue;
            }
            let me = self.clone();
            tokio::spawn(async move {
                let _slot = slot;
                let sub = gap.subscription;
                let cursor = gap.cursor.cursor();
                let message = format!(
                    "msg_gap_{}",
                    &crate::auth::hash_key(&format!("{}\u{0}{cursor}", sub.id))[..32]
                );
                let body = serde_json::json!({"type": "gap", "cursor": cursor}).to_string();
                let sent = match (
                    me.keys_of(&sub, now_ms()),
                    address::check_url(&sub.url, &me.settings.hosts()),
                ) {
                    (Ok(keys), Ok(_)) => {
                        verify::post(&me.client, &sub.url, &keys, &message, &sub.id, body)
                            .await
                            .map(|r| r.status().is_success())
                            .unwrap_or(false)
                    }
                    _ => false,
                };
                if !sent {
                    tracing::debug!(subscription = %sub.id, attempt = gap.attempts + 1, "the gap envelope was not taken; told again later");
                    return;
                }
                match me.store.forget_event_gap(&sub.id, gap.missed).await {
                    Ok(_) => {
                        tracing::info!(target: "mcp_tasks::audit", subscription = %sub.id, message_id = %message, cursor = %cursor, "gap envelope delivered")
                    }
                    Err(e) => {
                        tracing::warn!(subscription = %sub.id, error = %e, "a told gap could not be forgotten; it is told again")
                    }
                }
            });
        }
        Ok(())
    }

    /// Tells `sub`'s endpoint that the subscription has ended (already removed from the store) with
    /// a signed `{"type": "terminated", "error": …}` control envelope, when
    /// [`EventSettings::control_envelopes`] is on (ChatGPT takes none). Sent in the background, at
    /// most [`TERMINATED_ATTEMPTS`] times: the subscription is gone whether or not it arrives (a
    /// receiver that missed it sees its record lapse at `refreshBefore`).
    pub fn terminated(
        self: &Arc<Self>,
        sub: EventSubscription,
        kind: ErrorKind,
        message: String,
        data: Option<serde_json::Value>,
    ) {
        if !self.settings.control_envelopes {
            return;
        }
        let mut error = serde_json::json!({
            "code": self.settings.error_numbering.code(kind),
            "message": message,
        });
        if let Some(d) = data {
            error["data"] = d;
        }
        let body = serde_json::json!({"type": "terminated", "error": error}).to_string();
        let me = self.clone();
        tokio::spawn(async move {
            let id = format!("msg_terminated_{}", mcp_tasks_engine::random_id());
            for attempt in 1..=TERMINATED_ATTEMPTS {
                let keys = match me.keys_of(&sub, now_ms()) {
                    Ok(k) => k,
                    Err(why) => {
                        tracing::warn!(subscription = %sub.id, why, "the terminated envelope cannot be signed; not sent");
                        return;
                    }
                };
                // One of the sender's send slots: many ended at once (an operator's sweep) go a
                // few at a time, beside the deliveries.
                let Ok(slot) = me.slots.clone().acquire_owned().await else {
                    return;
                };
                let outcome = match address::check_url(&sub.url, &me.settings.hosts()) {
                    Err(e) => Err(e.to_string()),
                    Ok(_) => {
                        match verify::post(&me.client, &sub.url, &keys, &id, &sub.id, body.clone())
                            .await
                        {
                            Ok(r) if r.status().is_success() => Ok(()),
                            Ok(r) => Err(format!("the receiver answered {}", r.status().as_u16())),
                            Err(e) => Err(Failure::of_error(&e).as_str().to_string()),
                        }
                    }
                };
                drop(slot);
                match outcome {
                    Ok(()) => {
                        tracing::info!(target: "mcp_tasks::audit", subscription = %sub.id, message_id = %id, "terminated envelope delivered");
                        return;
                    }
                    Err(why) if attempt == TERMINATED_ATTEMPTS => {
                        tracing::warn!(subscription = %sub.id, message_id = %id, why, "the terminated envelope was not taken; given up");
                    }
                    Err(why) => {
                        tracing::debug!(subscription = %sub.id, why, attempt, "the terminated envelope was not taken; trying again");
                        tokio::time::sleep(TERMINATED_RETRY * attempt).await;
                    }
                }
            }
        });
    }

    /// Ends the subscriptions to types this server no longer declares (removed from the config
    /// since they were made): each is removed and, with control envelopes on, told so
    /// (`NotFound`, `{"kind": "event"}`). How many. An operator's act
    /// (`POST /admin/api/subscriptions/end-undeclared`).
    pub async fn end_undeclared(
        self: &Arc<Self>,
    ) -> Result<usize, mcp_tasks_engine::store::StoreError> {
        let ended = end_undeclared_in(self.store.as_ref(), &self.settings).await?;
        let n = ended.len();
        for sub in ended {
            let message = format!(
                "the event type {:?} is no longer offered by this server",
                sub.name
            );
            self.terminated(
                sub,
                ErrorKind::NotFound,
                message,
                Some(serde_json::json!({"kind": "event"})),
            );
        }
        Ok(n)
    }

    /// The keys that sign for `sub` at `now`: its secret's, and its replaced secret's while that
    /// still signs too.
    fn keys_of(
        &self,
        sub: &mcp_tasks_engine::events::EventSubscription,
        now: u64,
    ) -> Result<Vec<Vec<u8>>, String> {
        let mut keys = vec![sign::key_of(&self.keys.open(&sub.secret)?)?];
        if let (Some(old), Some(until)) = (&sub.previous_secret, sub.previous_until) {
            if now < until {
                if let Ok(k) = self.keys.open(old).and_then(|s| sign::key_of(&s)) {
                    keys.push(k);
                }
            }
        }
        Ok(keys)
    }
}

/// Removes the subscriptions in `store` to types `settings` does not declare; those removed.
async fn end_undeclared_in(
    store: &dyn TaskStore,
    settings: &EventSettings,
) -> Result<Vec<EventSubscription>, mcp_tasks_engine::store::StoreError> {
    let declared: std::collections::HashSet<String> =
        settings.all_types().into_iter().map(|t| t.name).collect();
    let mut ended = Vec::new();
    for sub in store.subscriptions(None, END_SWEEP).await? {
        if !declared.contains(&sub.name) && store.delete_subscription(&sub.id).await? {
            tracing::info!(target: "mcp_tasks::audit", subscription = %sub.id, name = %sub.name, principal = %sub.principal, "event subscription ended: its type is no longer declared");
            ended.push(sub);
        }
    }
    Ok(ended)
}

/// [`EventSender::end_undeclared`] for a server that sends no events (none is told); how many.
pub(crate) async fn end_undeclared_without_envelopes(
    store: &dyn TaskStore,
    settings: &EventSettings,
) -> Result<usize, mcp_tasks_engine::store::StoreError> {
    Ok(end_undeclared_in(store, settings).await?.len())
}

/// What follows `failed` failed attempts, the last at `at`: another after its delay (or the
/// receiver's `Retry-After`, up to [`MAX_DELAY`]), or giving up after [`MAX_ATTEMPTS`].
fn next_attempt(failed: u32, at: u64, retry_after: Option<Duration>) -> DeliveryNext {
    if failed >= MAX_ATTEMPTS {
        return DeliveryNext::GiveUp;
    }
    let delay = delay_after(failed);
    let delay = match retry_after {
        Some(asked) if asked > delay => asked.min(MAX_DELAY),
        _ => delay,
    };
    DeliveryNext::RetryAt(at.saturating_add(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)))
}

/// The wait after `failed` failed attempts, with up to a fifth added at random.
fn delay_after(failed: u32) -> Duration {
    let i = usize::try_from(failed.saturating_sub(1)).unwrap_or(usize::MAX);
    let base = DELAYS[i.min(DELAYS.len() - 1)];
    let mut r = [0u8; 2];
    let _ = getrandom::fill(&mut r);
    base + base.mul_f64(f64::from(u16::from_le_bytes(r)) / f64::from(u16::MAX) / 5.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_attempts_over_about_fifteen_minutes() {
        let mut at = 0u64;
        let mut attempts = 1;
        while let DeliveryNext::RetryAt(next) = next_attempt(attempts, at, None) {
            assert!(next > at);
            at = next;
            attempts += 1;
        }
        assert_eq!(attempts, MAX_ATTEMPTS);
        assert!((850_000..=1_020_000).contains(&at), "{at}");
        let DeliveryNext::RetryAt(first) = next_attempt(1, 0, None) else {
            panic!("retried")
        };
        assert!((10_000..=12_000).contains(&first), "{first}");
    }

    #[test]
    fn retry_after_slows_down_within_the_bound() {
        let DeliveryNext::RetryAt(t) = next_attempt(1, 0, Some(Duration::from_secs(120))) else {
            panic!("retried")
        };
        assert_eq!(t, 120_000);
        let DeliveryNext::RetryAt(t) = next_attempt(1, 0, Some(Duration::from_secs(99_999))) else {
            panic!("retried")
        };
        assert_eq!(t, 600_000);
        let DeliveryNext::RetryAt(t) = next_attempt(1, 0, Some(Duration::ZERO)) else {
            panic!("retried")
        };
        assert!(t >= 10_000);
    }
}
