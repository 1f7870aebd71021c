//! Wake-ups across replicas: PostgreSQL `LISTEN/NOTIFY` behind the engine's [`Notifier`].
//!
//! Every event published on a replica goes out as a small `NOTIFY` (which task, what kind, the few
//! fields the store does not keep: a progress message, a log line); every other replica hears it on
//! its one listening connection, reads the task (and input request) from the store and publishes the
//! event locally. So a result fetch blocked on B returns when the task finishes on A, a cancel
//! received by B reaches the runner on A (through its stopper), an answer received by C wakes the
//! handler on A, and the server's router on each replica forwards what concerns the client streams it
//! holds. Outgoing notifications leave in publish order on one connection. After the listening
//! connection is lost and made again, the tasks waited on here are read once more (notifications sent
//! in between are gone): polling is that fallback, never the mechanism. A relay that has heard no
//! other relay lately sends no events at all ([`super::presence`]). Once the notifier is narrowed
//! ([`Notifier::narrow`]), an event no client stream takes is marked as for its task's waiters
//! only, and a narrowed replica neither reads nor publishes such an event unless someone there
//! waits on the task. Nor is such an event sent unless another replica may want it: relays tell
//! each other what they wait on, and a skip is kept until no note that names it can be on its way
//! ([`super::waits`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, NoTls};
use tokio_util::sync::CancellationToken;

use super::presence::{Presence, Timing};
use super::waits::{WaitNote, Waits};
use super::Context;
use crate::context::LogLevel;
use crate::model::TaskRecord;
use crate::notifier::{Notifier, Relayed, TaskEvent, WaitChange};
use crate::store::{Lookup, StoreError, TaskStore};

/// How long a relay that has heard no other sends events after it starts (then it takes itself for
/// alone and sends none until it hears one): a measure of steady state starts after this.
pub const ALONE_AFTER: Duration = super::presence::GRACE;

/// `NOTIFY` payloads must stay under 8000 bytes; a log line larger than this goes without its data.
const MAX_PAYLOAD: usize = 7_500;
/// Most notifications whose tasks are read together.
const MAX_READ_TOGETHER: usize = 64;
/// Most tasks read together when every task waited on is read again.
const CATCH_UP_TOGETHER: usize = 256;
/// Longest wait between attempts to reconnect.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// One relayed event, as sent.
#[derive(Debug, Serialize, Deserialize)]
struct Wire {
    /// The sending relay (its own notifications come back to it).
    from: String,
    /// The task.
    task: String,
    /// The task's changing fields as of the event: the receiver reads the rest (arguments, the
    /// outcome) from the store, where it may already have moved on. Without them, three quick
    /// changes read back as the latest state three times. Absent for an announcement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    state: Option<State>,
    /// Only those who wait on the task need this event (no client stream takes it, and it is no
    /// hand-off): a replica where nobody does skips it, and so the read of the task (see
    /// [`Notifier::narrow`]). Absent from older senders: brought in everywhere.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    waiters_only: bool,
    #[serde(flatten)]
    kind: Kind,
}

/// Whether only those who wait on `event`'s task need it elsewhere: `rule` (the notifier's, see
/// [`Notifier::narrow`]) says no client stream takes it, and it is no hand-off (every replica's
/// engine takes a task whose lease was let go of).
fn waiters_only(event: &TaskEvent, rule: Option<&crate::notifier::WaitersOnly>) -> bool {
    let Some(rule) = rule else { return false };
    let released = matches!(event, TaskEvent::Changed(t) if t.lease_owner.is_none() && !t.status.is_terminal());
    !released && rule(event.task())
}

/// What an event changes about a task, as it was when the event was published.
#[derive(Debug, Serialize, Deserialize)]
struct State {
    status: crate::model::TaskStatus,
    status_message: Option<String>,
    progress: Option<f64>,
    progress_total: Option<f64>,
    progress_message: Option<String>,
    updated_at: u64,
    ttl_ms: Option<u64>,
    finished_at: Option<u64>,
    attempt: u32,
}

impl State {
    fn of(t: &TaskRecord) -> State {
        State {
            status: t.status,
            status_message: t.status_message.clone(),
            progress: t.progress,
            progress_total: t.progress_total,
            progress_message: t.progress_message.clone(),
            updated_at: t.updated_at,
            ttl_ms: t.ttl_ms,
            finished_at: t.finished_at,
            attempt: t.attempt,
        }
    }

    /// The stored record as it was at the event.
    fn over(self, mut t: TaskRecord) -> TaskRecord {
        if !self.status.is_terminal() {
            // Finished since: the outcome did not exist yet at this event.
            t.outcome = None;
        }
        t.status = self.status;
        t.status_message = self.status_message;
        t.progress = self.progress;
        t.progress_total = self.progress_total;
        t.progress_message = self.progress_message;
        t.updated_at = self.updated_at;
        t.ttl_ms = self.ttl_ms;
        t.finished_at = self.finished_at;
        t.attempt = self.attempt;
        t
    }

    /// Shortens the free-text fields (for a payload that would not fit).
    fn shorten(&mut self) {
        let cut = |s: &mut Option<String>| {
            if let Some(v) = s {
                *v = v.chars().take(500).collect();
            }
        };
        cut(&mut self.status_message);
        cut(&mut self.progress_message);
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Kind {
    /// Not an event: the reply announcing the task was written on the sender.
    Announced,
    /// Not an event: a note between the replicas' servers (`task` is empty).
    Note {
        note: Value,
    },
    Created,
    Changed,
    Progress {
        message: Option<String>,
        advanced: bool,
    },
    InputRequested {
        input: String,
    },
    InputAnswered {
        input: String,
    },
    Log {
        level: LogLevel,
        logger: Option<String>,
        data: Value,
    },
}

impl Kind {
    fn of(event: &TaskEvent) -> Kind {
        match event {
            TaskEvent::Created(_) => Kind::Created,
            TaskEvent::Changed(_) => Kind::Changed,
            TaskEvent::Progress {
                message, advanced, ..
            } => Kind::Progress {
                message: message.clone(),
                advanced: *advanced,
            },
            TaskEvent::InputRequested { input, .. } => Kind::InputRequested {
                input: input.key.clone(),
            },
            TaskEvent::InputAnswered { input, .. } => Kind::InputAnswered {
                input: input.key.clone(),
            },
            TaskEvent::Log {
                level,
                logger,
                data,
                ..
            } => Kind::Log {
                level: *level,
                logger: logger.clone(),
                data: data.clone(),
            },
        }
    }
}

/// The channel replicas on the database (and schema) `config` points to notify each other on.
async fn channel_name(client: &tokio_postgres::Client) -> Result<String, StoreError> {
    let schema: Option<String> = client
        .query_one("SELECT current_schema()", &[])
        .await
        .context("read the current schema")?
        .get(0);
    // Stores in other schemas of the same database must not hear each other.
    Ok(match schema.as_deref() {
        None | Some("public") => "mcp_tasks".to_string(),
        Some(s) => format!("mcp_tasks_{s}"),
    })
}

/// Relays `notifier`'s events to and from the other replicas on the database `url` points to, until
/// `stop` fires. Returns once both connections are up and listening.
pub async fn start(
    url: &str,
    notifier: Notifier,
    store: Arc<dyn TaskStore>,
    stop: CancellationToken,
) -> Result<(), StoreError> {
    start_timed(url, notifier, store, stop, Timing::default()).await
}

/// [`start`], with the presence timing given (tests shorten it).
pub(super) async fn start_timed(
    url: &str,
    notifier: Notifier,
    store: Arc<dyn TaskStore>,
    stop: CancellationToken,
    timing: Timing,
) -> Result<(), StoreError> {
    let (mut config, _) = super::connect::parse_url(url)?;
    super::connect::named(&mut config);
    let me = format!("relay-{}", &crate::ids::random_id()[..12]);
    let (listener, channel) = listen(&config).await?;
    let (out_tx, out_rx) = mpsc::unbounded_channel::<String>();
    let presence = Arc::new(Presence::new(timing));
    let waits = Arc::new(Waits::new(timing.silence, timing.grace));
    let from = me.clone();
    let out = out_tx.clone();
    let heard = presence.clone();
    let skips = waits.clone();
    let narrowing = notifier.narrowing();
    let relay: crate::notifier::Relay = Arc::new(move |relayed: Relayed<'_>| match relayed {
        Relayed::Event {
            event,
            run_elsewhere,
        } => {
            if !heard.sending() {
                return;
            }
            let only = waiters_only(event, narrowing.get());
            let send = || {
                let wire = Wire {
                    from: from.clone(),
                    task: event.task().id.clone(),
                    state: Some(State::of(event.task())),
                    waiters_only: only,
                    kind: Kind::of(event),
                };
                if let Some(payload) = encode(wire) {
                    let _ = out.send(payload);
                }
            };
            heard.send_if_heard(|| {
                if only {
                    // Nobody elsewhere waits on it: skipped, and kept should a wait turn up.
                    skips.send_or_skip(&event.task().id, run_elsewhere, send);
                } else {
                    send();
                }
            });
        }
        Relayed::Announced(task) => {
            if !heard.sending() {
                return;
            }
            let wire = Wire {
                from: from.clone(),
                task: task.to_string(),
                state: None,
                waiters_only: false,
                kind: Kind::Announced,
            };
            if let Some(payload) = encode(wire) {
                heard.send_if_heard(|| {
                    let _ = out.send(payload);
                });
            }
        }
        // Notes are few (heartbeats, streams opened): they always go, so that a server of an
        // older version that only hears notes still knows this replica is there.
        Relayed::Note(note) => {
            if let Some(payload) = note_payload(&from, note.clone()) {
                let _ = out.send(payload);
            }
        }
        // Skipped while alone like events: the list that goes with the resume has it.
        Relayed::Waiting(change) => {
            let note = match change {
                WaitChange::Task { id, waited: true } => WaitNote::Wait {
                    tasks: vec![id.to_string()],
                    all: None,
                },
                WaitChange::Task { id, waited: false } => WaitNote::Unwait {
                    tasks: vec![id.to_string()],
                },
                WaitChange::Everything(all) => WaitNote::Wait {
                    tasks: Vec::new(),
                    all: Some(all),
                },
            };
            if let Some(payload) = note_payload(&from, note.to_value()) {
                heard.send_if_heard(|| {
                    let _ = out.send(payload);
                });
            }
        }
    });
    // Said before anything else: the others answer, and so this relay learns it is not alone;
    // then what is waited on here, with the relay set under the same lock, so that every change
    // of it after the list is told.
    notifier.waits_in_order(|all, tasks| {
        if let Some(hello) = presence_note(&me, PresenceNote::Hello) {
            let _ = out_tx.send(hello);
        }
        for payload in list_payloads(&me, all, tasks) {
            let _ = out_tx.send(payload);
        }
        notifier
            .set_relay(relay)
            .map_err(|_| StoreError::message("the notifier already has a relay"))
    })?;
    let notes = SendNotes {
        heartbeat: presence_note(&me, PresenceNote::Here).unwrap_or_default(),
        every: timing.heartbeat,
        resumed: presence_note(&me, PresenceNote::Resumed).unwrap_or_default(),
        me: me.clone(),
        notifier: notifier.clone(),
        store: store.clone(),
        silence: timing.silence,
    };
    tokio::spawn(send_loop(
        config.clone(),
        channel.clone(),
        out_rx,
        notes,
        stop.clone(),
    ));
    tokio::spawn(mark_loop(
        me.clone(),
        waits.clone(),
        out_tx.clone(),
        stop.clone(),
    ));
    tokio::spawn(listen_loop(
        config,
        channel,
        listener,
        Hearing {
            me,
            presence,
            waits,
            out: out_tx,
            notifier,
        },
        store,
        stop,
    ));
    Ok(())
}

/// Sends a mark whenever one is due (see [`Waits::mark_due`]), until `stop` fires.
async fn mark_loop(
    me: String,
    waits: Arc<Waits>,
    out: mpsc::UnboundedSender<String>,
    stop: CancellationToken,
) {
    let mut every = tokio::time::interval(super::waits::MARK_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = every.tick() => {}
        }
        if let Some(n) = waits.mark_due() {
            if let Some(payload) = note_payload(&me, WaitNote::Mark { n }.to_value()) {
                let _ = out.send(payload);
            }
        }
    }
}

/// The payload of `note` from the relay `me`.
fn note_payload(me: &str, note: Value) -> Option<String> {
    encode(Wire {
        from: me.to_string(),
        task: String::new(),
        state: None,
        waiters_only: false,
        kind: Kind::Note { note },
    })
}

/// The payloads listing what is waited on here (see [`WaitNote::list`]).
fn list_payloads(me: &str, all: bool, tasks: Vec<String>) -> Vec<String> {
    WaitNote::list(all, tasks)
        .into_iter()
        .filter_map(|part| note_payload(me, part.to_value()))
        .collect()
}

/// Whether `payload` is a part of a list of what a relay waits on (our own encoding: a note's
/// fields are not escaped, text inside a string is).
fn is_list_part(payload: &str) -> bool {
    payload.contains(r#""relay":"waits""#)
}

/// Queues the list of what is waited on here, in order with the changes of it.
fn send_list(me: &str, notifier: &Notifier, out: &mpsc::UnboundedSender<String>) {
    notifier.waits_in_order(|all, tasks| {
        for payload in list_payloads(me, all, tasks) {
            let _ = out.send(payload);
        }
    });
}

/// The notes the send loop makes itself: a heartbeat when silent for `every`, and a resume after a
/// failed send.
struct SendNotes {
    heartbeat: String,
    every: Duration,
    resumed: String,
    /// This relay, and what it lists (after a failed send) and reads again.
    me: String,
    notifier: Notifier,
    store: Arc<dyn TaskStore>,
    /// How long another relay may go unheard before it is forgotten.
    silence: Duration,
}

/// What one relay says to the others about itself (carried as a note without a `peer`, which the
/// servers of older versions ignore).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PresenceNote {
    /// Just started: the others answer with [`PresenceNote::Here`].
    Hello,
    /// Still there (sent when it has sent nothing for a heartbeat), or an answer to a hello.
    Here,
    /// Sends events again after a silence, or after a send that failed: the others read again
    /// what they wait on.
    Resumed,
}

impl PresenceNote {
    fn name(self) -> &'static str {
        match self {
            PresenceNote::Hello => "hello",
            PresenceNote::Here => "here",
            PresenceNote::Resumed => "resumed",
        }
    }

    /// The presence note a relayed note is, if it is one.
    fn of(note: &Value) -> Option<PresenceNote> {
        match note.get("relay")?.as_str()? {
            "hello" => Some(PresenceNote::Hello),
            "here" => Some(PresenceNote::Here),
            "resumed" => Some(PresenceNote::Resumed),
            _ => None,
        }
    }
}

/// The payload of `note` from the relay `me`.
fn presence_note(me: &str, note: PresenceNote) -> Option<String> {
    note_payload(me, serde_json::json!({ "relay": note.name() }))
}

/// What the listening side needs to keep this relay's presence: who it is, when it last heard
/// another relay, what the others wait on, and where its own notes go.
struct Hearing {
    me: String,
    presence: Arc<Presence>,
    waits: Arc<Waits>,
    out: mpsc::UnboundedSender<String>,
    notifier: Notifier,
}

/// What hearing a wire from another relay says (see [`Hearing::heard`]).
struct Heard {
    /// It was a note between the relays (handled here, not for the notifier).
    relays_note: bool,
    /// What this process waits on must be read again (the other skipped events).
    read_again: bool,
    /// The others must hear again what is waited on here: another relay said hello.
    list: bool,
}

impl Hearing {
    /// Another relay's `wire` arrived.
    fn heard(&self, wire: &Wire) -> Heard {
        let note = match &wire.kind {
            Kind::Note { note } => Some(note),
            _ => None,
        };
        let presence = note.and_then(PresenceNote::of);
        let resumed = self.presence.heard(|| {
            if let Some(p) = presence_note(&self.me, PresenceNote::Resumed) {
                let _ = self.out.send(p);
            }
        });
        self.waits.heard(&wire.from);
        if resumed {
            tracing::info!(
                "another replica is listening: task events go out to the other replicas again"
            );
            // What was waited on here while alone went nowhere: the list goes before anything
            // else this wire makes this relay say (an answer to a mark must follow it).
            send_list(&self.me, &self.notifier, &self.out);
        } else if presence == Some(PresenceNote::Hello) {
            // A resume answers a hello as well.
            if let Some(p) = presence_note(&self.me, PresenceNote::Here) {
                let _ = self.out.send(p);
            }
        }
        let mut relays_note = presence.is_some();
        if let Some(wait) = note.and_then(WaitNote::of) {
            relays_note = true;
            self.told(&wire.from, &wait);
        }
        Heard {
            relays_note,
            read_again: presence == Some(PresenceNote::Resumed),
            list: !resumed && presence == Some(PresenceNote::Hello),
        }
    }

    /// Another relay, `from`, said `note` about what it waits on, or about marks.
    fn told(&self, from: &str, note: &WaitNote) {
        match note {
            WaitNote::Mark { n } => {
                let answer = WaitNote::Marked {
                    to: from.to_string(),
                    n: *n,
                };
                if let Some(p) = note_payload(&self.me, answer.to_value()) {
                    let _ = self.out.send(p);
                }
            }
            WaitNote::Marked { to, n } => {
                if *to == self.me {
                    self.waits.answered(from, *n);
                }
            }
            _ => self.waits.told(from, note, |task| self.send_again(task)),
        }
    }

    /// Sends `task` again, as it is stored now (the skipped change is committed), to those who
    /// wait on it.
    fn send_again(&self, task: &str) {
        let wire = Wire {
            from: self.me.clone(),
            task: task.to_string(),
            state: None,
            waiters_only: true,
            kind: Kind::Changed,
        };
        if let Some(p) = encode(wire) {
            let _ = self.out.send(p);
        }
    }
}

/// The payload for `wire`, shrunk (a log line loses its data) to fit a `NOTIFY`.
fn encode(mut wire: Wire) -> Option<String> {
    let text = serde_json::to_string(&wire).ok()?;
    if text.len() <= MAX_PAYLOAD {
        return Some(text);
    }
    if let Kind::Log { data, .. } = &mut wire.kind {
        *data = Value::String(format!(
            "(a log message of {} bytes, too large to relay to other replicas)",
            text.len()
        ));
    }
    if let Kind::Progress { message, .. } = &mut wire.kind {
        *message = message.as_ref().map(|m| m.chars().take(500).collect());
    }
    if let Some(state) = &mut wire.state {
        state.shorten();
    }
    let text = serde_json::to_string(&wire).ok()?;
    if text.len() <= MAX_PAYLOAD {
        return Some(text);
    }
    tracing::warn!(task = %wire.task, "event too large to relay to other replicas");
    None
}

/// Encoded events (JSON objects) packed into JSON arrays of at most [`MAX_PAYLOAD`] bytes, in order.
fn pack(payloads: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::from("[");
    for p in payloads {
        if current.len() > 1 && current.len() + p.len() + 2 > MAX_PAYLOAD {
            current.push(']');
            out.push(std::mem::replace(&mut current, String::from("[")));
        }
        if current.len() > 1 {
            current.push(',');
        }
        current.push_str(p);
    }
    if current.len() > 1 {
        current.push(']');
        out.push(current);
    }
    out
}

/// A connection listening on this store's channel; its notifications arrive on the receiver.
type Listening = (
    tokio_postgres::Client,
    mpsc::UnboundedReceiver<tokio_postgres::Notification>,
);

async fn listen(config: &tokio_postgres::Config) -> Result<(Listening, String), StoreError> {
    let (client, mut connection) = config
        .connect(NoTls)
        .await
        .context("connect the listening connection")?;
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    if tx.send(n).is_err() {
                        break;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "the PostgreSQL listening connection failed");
                    break;
                }
            }
        }
        // Dropping `tx` tells the listen loop that the connection is gone.
    });
    let channel = channel_name(&client).await?;
    client
        .batch_execute(&format!("LISTEN {channel}"))
        .await
        .with_context(|| format!("LISTEN {channel}"))?;
    Ok(((client, rx), channel))
}

async fn listen_loop(
    config: tokio_postgres::Config,
    channel: String,
    first: Listening,
    hearing: Hearing,
    store: Arc<dyn TaskStore>,
    stop: CancellationToken,
) {
    let notifier = hearing.notifier.clone();
    let mut current = Some(first);
    let mut backoff = Duration::from_millis(100);
    loop {
        let (client, mut rx) = match current.take() {
            Some(l) => l,
            None => {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                match listen(&config).await {
                    Ok((l, _)) => {
                        tracing::info!(channel, "listening for other replicas again");
                        backoff = Duration::from_millis(100);
                        // What the others said meanwhile is gone: until they list again, they
                        // count as waiting on everything, and a hello has them list.
                        hearing
                            .waits
                            .listening_again(|task| hearing.send_again(task));
                        if let Some(hello) = presence_note(&hearing.me, PresenceNote::Hello) {
                            let _ = hearing.out.send(hello);
                        }
                        // Whatever was sent while nobody listened is gone: read what is waited on.
                        catch_up(&notifier, &store).await;
                        l
                    }
                    Err(e) => {
                        tracing::warn!(error = %e.chain(), "cannot listen for other replicas; retrying");
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                        continue;
                    }
                }
            }
        };
        loop {
            let n = tokio::select! {
                _ = stop.cancelled() => return,
                n = rx.recv() => n,
            };
            let Some(n) = n else { break };
            // Whatever else has arrived goes with it: the tasks of all of them are read in one query.
            let mut arrived = vec![n];
            while arrived.len() < MAX_READ_TOGETHER {
                match rx.try_recv() {
                    Ok(n) => arrived.push(n),
                    Err(_) => break,
                }
            }
            let mut wires = Vec::new();
            let mut read_again = false;
            for n in arrived.iter().filter(|n| n.channel() == channel) {
                match serde_json::from_str::<Vec<Wire>>(n.payload()) {
                    Ok(w) => {
                        for wire in w.into_iter().filter(|w| w.from != hearing.me) {
                            let heard = hearing.heard(&wire);
                            read_again |= heard.read_again;
                            if heard.list {
                                send_list(&hearing.me, &notifier, &hearing.out);
                            }
                            // Nobody here waits on the task: neither read nor published here.
                            if !heard.relays_note
                                && (!wire.waiters_only || notifier.wants(&wire.task))
                            {
                                wires.push(wire);
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "unreadable notification from another replica")
                    }
                }
            }
            if read_again {
                // Another relay skipped events while it thought itself alone: they are stored.
                catch_up(&notifier, &store).await;
            }
            // Notes (streams, heartbeats) and announcements need no read: they go first, so that a
            // slow read does not make this replica think the others went silent.
            let (now, wires): (Vec<Wire>, Vec<Wire>) = wires
                .into_iter()
                .partition(|w| matches!(w.kind, Kind::Announced | Kind::Note { .. }));
            let none = std::collections::HashMap::new();
            for wire in now {
                deliver(wire, &notifier, &store, &none).await;
            }
            let tasks = read_tasks(&wires, &store).await;
            for wire in wires {
                deliver(wire, &notifier, &store, &tasks).await;
            }
        }
        drop(client);
    }
}

/// The tasks the relayed events in `wires` are about, as stored now, in one read (under load a
/// replica hears of every task the others create and finish: a read each fell behind).
async fn read_tasks(
    wires: &[Wire],
    store: &Arc<dyn TaskStore>,
) -> std::collections::HashMap<String, TaskRecord> {
    let mut ids: Vec<String> = wires
        .iter()
        .filter(|w| !matches!(w.kind, Kind::Announced | Kind::Note { .. }))
        .map(|w| w.task.clone())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.is_empty() {
        return Default::default();
    }
    match store.get_many(&ids).await {
        Ok(tasks) => tasks.into_iter().map(|t| (t.id.clone(), t)).collect(),
        Err(e) => {
            // One at a time, then: a wake-up lost here would leave a blocked request waiting.
            tracing::warn!(tasks = ids.len(), error = %e.chain(), "cannot read relayed tasks together; reading them one by one");
            let mut found = std::collections::HashMap::new();
            for id in ids {
                match store.get(&id).await {
                    Ok(Lookup::Found(t)) => {
                        found.insert(id, t);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(task = %id, error = %e.chain(), "cannot read a relayed task")
                    }
                }
            }
            found
        }
    }
}

/// Publishes here what another replica relayed, with the task (as read by [`read_tasks`]) and input
/// request as stored now.
async fn deliver(
    wire: Wire,
    notifier: &Notifier,
    store: &Arc<dyn TaskStore>,
    tasks: &std::collections::HashMap<String, TaskRecord>,
) {
    let kind = match wire.kind {
        Kind::Announced => {
            notifier.announced_by_peer(&wire.task);
            return;
        }
        Kind::Note { note } => {
            notifier.note_from_peer(note);
            return;
        }
        kind => kind,
    };
    // Gone (purged), or unreadable (said by `read_tasks`): nothing to publish.
    let Some(t) = tasks.get(&wire.task).cloned() else {
        return;
    };
    let task = Arc::new(match wire.state {
        Some(state) => state.over(t),
        None => t,
    });
    let input = |key: String| async move {
        match store.get_input(&key).await {
            Ok(Some(i)) => Some(Arc::new(i)),
            _ => None,
        }
    };
    let event = match kind {
        Kind::Announced | Kind::Note { .. } => return,
        Kind::Created => TaskEvent::Created(task),
        Kind::Changed => TaskEvent::Changed(task),
        Kind::Progress { message, advanced } => TaskEvent::Progress {
            task,
            message,
            advanced,
        },
        Kind::InputRequested { input: key } => match input(key).await {
            Some(input) => TaskEvent::InputRequested { task, input },
            None => return,
        },
        Kind::InputAnswered { input: key } => match input(key).await {
            Some(input) => TaskEvent::InputAnswered { task, input },
            None => return,
        },
        Kind::Log {
            level,
            logger,
            data,
        } => TaskEvent::Log {
            task,
            level,
            logger,
            data,
        },
    };
    notifier.publish_from_peer(event);
}

/// After notifications may have been lost: every task someone here waits on is read again and
/// published as it stands, so waiters re-check (a finished task ends their wait).
async fn catch_up(notifier: &Notifier, store: &Arc<dyn TaskStore>) {
    let watched = notifier.watched_tasks();
    for ids in watched.chunks(CATCH_UP_TOGETHER) {
        match store.get_many(ids).await {
            Ok(tasks) => {
                for t in tasks {
                    notifier.publish_from_peer(TaskEvent::Changed(Arc::new(t)));
                }
            }
            Err(e) => {
                tracing::warn!(tasks = ids.len(), error = %e.chain(), "cannot read the tasks waited on together; reading them one by one");
                for id in ids {
                    if let Ok(Lookup::Found(t)) = store.get(id).await {
                        notifier.publish_from_peer(TaskEvent::Changed(Arc::new(t)));
                    }
                }
            }
        }
    }
}

/// Sends the relayed events, in order, on one connection (made again when it fails).
async fn send_loop(
    config: tokio_postgres::Config,
    channel: String,
    mut rx: mpsc::UnboundedReceiver<String>,
    notes: SendNotes,
    stop: CancellationToken,
) {
    let mut backoff = Duration::from_millis(100);
    let mut pending: Vec<String> = Vec::new();
    // Whether what waits here is read again after the next send (it follows a failed one).
    let mut read_again = false;
    // When a send last succeeded.
    let mut last_sent: Option<std::time::Instant> = None;
    'connect: loop {
        let client = match config.connect(NoTls).await {
            Ok((client, connection)) => {
                tokio::spawn(connection);
                backoff = Duration::from_millis(100);
                client
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot connect to notify other replicas; retrying");
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        let Ok(stmt) = client.prepare("SELECT pg_notify($1, $2)").await else {
            continue 'connect;
        };
        loop {
            let mut batch = std::mem::take(&mut pending);
            if batch.is_empty() {
                // Silent for a heartbeat: say this relay is still there.
                let next = tokio::select! {
                    _ = stop.cancelled() => return,
                    p = rx.recv() => p,
                    _ = tokio::time::sleep(notes.every) => Some(notes.heartbeat.clone()),
                };
                match next {
                    Some(p) => batch.push(p),
                    None => return,
                }
            }
            // Whatever queued up meanwhile goes out pipelined, in order.
            while batch.len() < 256 {
                match rx.try_recv() {
                    Ok(p) => batch.push(p),
                    Err(_) => break,
                }
            }
            // Packed into as few notifications as fit (each one is a commit and a signal to every
            // listening replica, a measurable share of the database's work per task).
            let packed = pack(&batch);
            let params: Vec<[&(dyn tokio_postgres::types::ToSql + Sync); 2]> =
                packed.iter().map(|p| [&channel as _, p as _]).collect();
            let sends = params.iter().map(|p| client.execute(&stmt, p));
            if let Err(e) = futures::future::try_join_all(sends).await {
                // What is lost here is in the store: once connected again, a resume has the others
                // read again what they wait on, and the list of what is waited on here replaces
                // the changes of it that were lost; the newest goes out after them, unless it is
                // a part of an older list (it would undo the new one).
                tracing::warn!(error = %e, lost = batch.len().saturating_sub(1), "notifying other replicas failed; reconnecting");
                let newest = batch.pop().filter(|p| !is_list_part(p));
                pending = vec![notes.resumed.clone()];
                notes.notifier.waits_in_order(|all, tasks| {
                    pending.extend(list_payloads(&notes.me, all, tasks));
                });
                pending.extend(newest);
                read_again = true;
                continue 'connect;
            }
            // The waits this relay told of are heard by the others only from now on. A waiter
            // reads the store after it is told of, so one that read before a change another
            // relay skipped while that relay had not heard this one at all (this relay's first
            // send, or its first after a failure or a stall long enough to be forgotten) reads
            // again.
            let stalled = last_sent.is_none_or(|at| at.elapsed() >= notes.silence / 2);
            if std::mem::take(&mut read_again) || stalled {
                let (notifier, store) = (notes.notifier.clone(), notes.store.clone());
                tokio::spawn(async move { catch_up(&notifier, &store).await });
            }
            last_sent = Some(std::time::Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relayed_event_shows_the_task_as_it_was_then() {
        use crate::model::{Outcome, TaskStatus};
        let then = crate::store::testkit::record("t1", "alice", 1_000);
        let mut now = then.clone();
        now.status = TaskStatus::Completed;
        now.finished_at = Some(5_000);
        now.outcome = Some(Outcome::Result {
            value: serde_json::json!({"answer": 42}),
            is_error: false,
        });
        let shown = State::of(&then).over(now.clone());
        assert_eq!(shown.status, TaskStatus::Working);
        assert_eq!(shown.outcome, None, "no outcome before the task finished");
        assert_eq!(shown.finished_at, None);
        // A terminal event shows the stored outcome.
        let shown = State::of(&now).over(now.clone());
        assert_eq!(shown, now);
    }

    #[test]
    fn events_are_packed_in_order_into_payloads_that_fit() {
        let one = |i: usize| format!("{{\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(1_000));
        let payloads: Vec<String> = (0..20).map(one).collect();
        let packed = pack(&payloads);
        assert!(packed.len() > 1 && packed.len() < 20, "{}", packed.len());
        let mut seen = Vec::new();
        for p in &packed {
            assert!(p.len() <= MAX_PAYLOAD, "{}", p.len());
            let items: Vec<serde_json::Value> = serde_json::from_str(p).unwrap();
            seen.extend(items.iter().map(|v| v["n"].as_u64().unwrap()));
        }
        assert_eq!(seen, (0..20).collect::<Vec<u64>>());
        assert!(pack(&[]).is_empty());
    }

    #[test]
    fn payloads_round_trip_and_stay_small() {
        let state = || State::of(&crate::store::testkit::record("t1", "alice", 1_000));
        let wire = Wire {
            from: "relay-a".into(),
            task: "t1".into(),
            state: Some(state()),
            waiters_only: true,
            kind: Kind::Progress {
                message: Some("half".into()),
                advanced: true,
            },
        };
        let text = encode(wire).unwrap();
        let back: Wire = serde_json::from_str(&text).unwrap();
        assert!(matches!(back.kind, Kind::Progress { advanced: true, .. }));
        let big = Wire {
            from: "relay-a".into(),
            task: "t1".into(),
            state: Some(state()),
            waiters_only: false,
            kind: Kind::Log {
                level: LogLevel::Info,
                logger: None,
                data: Value::String("x".repeat(20_000)),
            },
        };
        let text = encode(big).unwrap();
        assert!(text.len() <= MAX_PAYLOAD, "{}", text.len());
        assert!(text.contains("too large to relay"));
    }
}
