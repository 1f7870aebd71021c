//! What this replica knows of the other replicas on its database: which client streams they hold,
//! and whether they are alive. Replicas tell each other through notes on the relay
//! ([`Notifier::tell_peers`](mcp_tasks_engine::Notifier::tell_peers)): a stream opened or closed,
//! and a heartbeat.
//!
//! The router uses this view so that each of a session task's messages goes out once across all
//! replicas. The rule every replica applies to an event of time `t` (the task's `updated_at` as of
//! the event, the same number on every replica): a stream of the task itself (an open
//! `tasks/result`) that was open at `t` takes it, wherever it is; otherwise one standalone stream of
//! the session (the replica with the smallest id among those holding one). A replica about to send
//! on a standalone stream first waits [`SETTLE`], so that the note of a task stream opened elsewhere
//! before `t` has arrived: the notes are milliseconds behind, the wait keeps the rule exact unless
//! they fall further behind than that. Input requests are exact regardless: their stream is recorded
//! in the store ([`InputStore::hand_input`](mcp_tasks_engine::store::InputStore::hand_input)); this
//! view only tells whether the stream recorded there is still held.

use dashmap::DashMap;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

use crate::core::streams::StreamChange;

use super::events::Render;
use super::Server;
use mcp_tasks_engine::TaskEvent;
use std::sync::Arc;

/// How often a replica says it is alive.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(2);
/// A replica not heard for this long is taken for gone (it was killed, or lost its database).
const SILENCE: Duration = Duration::from_secs(10);
/// Every how many heartbeats a replica lists all its open streams (a refresh): a close note that was
/// missed (the listening connection was down) then costs a stale entry for a while, not forever.
const REFRESH_EVERY: u32 = 5;
/// An open stream of another replica not said to be open for this long is forgotten.
const STALE: Duration = Duration::from_secs(30);
/// Streams per refresh note (each note is one NOTIFY).
const STREAMS_PER_NOTE: usize = 40;
/// How long a closed stream is remembered (a late note about it is then recognised).
const CLOSED_KEPT: Duration = Duration::from_secs(60);
/// How often the calls let through here are told to the other replicas' rate limits.
const RATE_EXCHANGE: Duration = Duration::from_millis(500);
/// Rate-limit keys per note (a key is a principal's name, or an anonymous scope).
const RATE_KEYS_PER_NOTE: usize = 40;
/// How long a message bound for a standalone stream waits for notes of task streams opened elsewhere.
pub(crate) const SETTLE: Duration = Duration::from_millis(200);

/// A stream on a replica: (replica id, stream id there).
type Remote = (String, u64);

/// An event waiting to go out on a standalone stream: until when, the event, its session, its time.
type Settling = (Instant, TaskEvent, String, u64);

/// An event's time for the routing rule: the task's `updated_at` as of the event, the same number on
/// every replica. A log line changes nothing in the task, so its `updated_at` is that of the last
/// change, maybe long before: a log goes by the time it is routed (replicas may then disagree for
/// a few milliseconds around a stream's opening: a log line is advisory).
fn event_time(event: &TaskEvent) -> u64 {
    match event {
        TaskEvent::Log { .. } => mcp_tasks_engine::now_ms(),
        _ => event.task().updated_at,
    }
}

/// A task's own stream on another replica, with when it opened and closed (Unix ms).
struct RemoteTaskStream {
    peer: String,
    id: u64,
    opened: u64,
    closed: Option<u64>,
    /// When it was last said to be open (by its opening note, or a refresh).
    seen: Instant,
}

/// The other replicas' streams and heartbeats, as heard.
pub(crate) struct Peers {
    me: String,
    started: Instant,
    heard: DashMap<String, Instant>,
    /// task → its own streams on other replicas (closed ones for a while).
    task_streams: DashMap<String, Vec<RemoteTaskStream>>,
    /// session → its standalone streams on other replicas, with when each was last said to be open.
    standalone: DashMap<String, Vec<(Remote, Instant)>>,
    /// Streams of other replicas that closed lately.
    closed: DashMap<Remote, Instant>,
    /// Streams of other replicas said to be open (by their opening note or a refresh), and when.
    known_open: DashMap<Remote, Instant>,
    /// Events waiting [`SETTLE`] before they go out on a standalone stream here: (when, event,
    /// session).
    settling: std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<Settling>>,
}

impl Peers {
    /// A view for a replica with a fresh id.
    pub(crate) fn new() -> Peers {
        Peers {
            me: mcp_tasks_engine::random_id()[..16].to_string(),
            started: Instant::now(),
            heard: DashMap::new(),
            task_streams: DashMap::new(),
            standalone: DashMap::new(),
            closed: DashMap::new(),
            known_open: DashMap::new(),
            settling: std::sync::OnceLock::new(),
        }
    }

    /// The note telling the others that a stream here opened or closed.
    pub(crate) fn stream_note(&self, change: StreamChange<'_>) -> Value {
        json!({
            "peer": self.me,
            "stream": {
                "session": change.session,
                "task": change.task,
                "id": change.id,
                "open": change.open,
                "at": change.at,
            },
        })
    }

    /// The heartbeat note.
    pub(crate) fn alive_note(&self) -> Value {
        json!({ "peer": self.me })
    }

    /// Takes in a note from another replica (anything unreadable is ignored).
    pub(crate) fn heard(&self, note: &Value) {
        let Some(peer) = note.get("peer").and_then(Value::as_str) else {
            return;
        };
        if peer == self.me {
            return;
        }
        self.heard.insert(peer.to_string(), Instant::now());
        if let Some(streams) = note.get("streams").and_then(Value::as_array) {
            self.refreshed(peer, streams);
            return;
        }
        let Some(stream) = note.get("stream") else {
            return;
        };
        let (Some(session), Some(id), Some(open)) = (
            stream.get("session").and_then(Value::as_str),
            stream.get("id").and_then(Value::as_u64),
            stream.get("open").and_then(Value::as_bool),
        ) else {
            return;
        };
        let at = stream
            .get("at")
            .and_then(Value::as_u64)
            .unwrap_or_else(mcp_tasks_engine::now_ms);
        let task = stream.get("task").and_then(Value::as_str);
        if open {
            self.opened(peer, session, task, id, at);
            return;
        }
        let remote = (peer.to_string(), id);
        if let Some(task) = task {
            if let Some(mut v) = self.task_streams.get_mut(task) {
                if let Some(r) = v.iter_mut().find(|r| r.peer == peer && r.id == id) {
                    r.closed = Some(at);
                }
            }
        } else {
            let mut empty = false;
            if let Some(mut v) = self.standalone.get_mut(session) {
                v.retain(|(r, _)| *r != remote);
                empty = v.is_empty();
            }
            if empty {
                self.standalone.remove_if(session, |_, v| v.is_empty());
            }
        }
        self.known_open.remove(&remote);
        self.closed.insert(remote, Instant::now());
    }

    /// A stream of `peer` is (still) open: recorded, or its entry refreshed.
    fn opened(&self, peer: &str, session: &str, task: Option<&str>, id: u64, at: u64) {
        let remote = (peer.to_string(), id);
        if self.closed.contains_key(&remote) {
            return;
        }
        let now = Instant::now();
        self.known_open.insert(remote.clone(), now);
        match task {
            Some(task) => {
                let mut v = self.task_streams.entry(task.to_string()).or_default();
                match v.iter_mut().find(|r| r.peer == peer && r.id == id) {
                    Some(r) => r.seen = now,
                    None => v.push(RemoteTaskStream {
                        peer: peer.to_string(),
                        id,
                        opened: at,
                        closed: None,
                        seen: now,
                    }),
                }
            }
            None => {
                let mut v = self.standalone.entry(session.to_string()).or_default();
                match v.iter_mut().find(|(r, _)| *r == remote) {
                    Some((_, seen)) => *seen = now,
                    None => v.push((remote, now)),
                }
            }
        }
    }

    /// The notes listing every stream open here (see [`REFRESH_EVERY`]).
    pub(crate) fn refresh_notes(&self, open: &[(String, Option<String>, u64, u64)]) -> Vec<Value> {
        open.chunks(STREAMS_PER_NOTE)
            .map(|chunk| {
                let streams: Vec<Value> = chunk
                    .iter()
                    .map(|(session, task, id, at)| json!([session, task, id, at]))
                    .collect();
                json!({"peer": self.me, "streams": streams})
            })
            .collect()
    }

    /// Takes in a refresh note's list of open streams.
    fn refreshed(&self, peer: &str, streams: &[Value]) {
        for s in streams {
            if let (Some(session), task, Some(id), Some(at)) = (
                s.get(0).and_then(Value::as_str),
                s.get(1).and_then(Value::as_str),
                s.get(2).and_then(Value::as_u64),
                s.get(3).and_then(Value::as_u64),
            ) {
                self.opened(peer, session, task, id, at);
            }
        }
    }

    fn alive(&self, peer: &str) -> bool {
        match self.heard.get(peer) {
            Some(at) => at.elapsed() < SILENCE,
            // Not heard yet: it may be us who just started.
            None => self.started.elapsed() < SILENCE,
        }
    }

    /// Whether a stream of `task` itself on another replica was open at `t` (Unix ms): that stream
    /// takes the task's event of time `t`.
    pub(crate) fn task_stream_covers(&self, task: &str, t: u64) -> bool {
        self.task_streams.get(task).is_some_and(|v| {
            v.iter().any(|r| {
                r.opened <= t
                    && match r.closed {
                        Some(closed) => t < closed,
                        None => self.alive(&r.peer),
                    }
            })
        })
    }

    /// Whether a live replica with a smaller id than this one holds a standalone stream of
    /// `session`: it sends the session's messages that no task stream takes.
    pub(crate) fn standalone_elsewhere_first(&self, session: &str) -> bool {
        self.standalone.get(session).is_some_and(|v| {
            v.iter()
                .any(|((peer, _), _)| peer.as_str() < self.me.as_str() && self.alive(peer))
        })
    }

    /// Whether another live replica holds any open stream of `session` or of `task`.
    pub(crate) fn streams_elsewhere(&self, session: &str, task: &str) -> bool {
        self.task_streams
            .get(task)
            .is_some_and(|v| v.iter().any(|r| r.closed.is_none() && self.alive(&r.peer)))
            || self
                .standalone
                .get(session)
                .is_some_and(|v| v.iter().any(|((peer, _), _)| self.alive(peer)))
    }

    /// How stream `id` of `session` here is named in the store, as an input request's holder (with
    /// the time of the claim).
    pub(crate) fn holder(&self, session: &str, id: u64) -> String {
        format!("{} {id} {} {session}", self.me, mcp_tasks_engine::now_ms())
    }

    /// Whether two holders name the same stream (claimed at different times).
    pub(crate) fn same_stream(a: &str, b: &str) -> bool {
        let key = |h: &str| {
            let mut p = h.splitn(4, ' ');
            let (peer, id, _, session) = (p.next(), p.next(), p.next(), p.next());
            (
                peer.map(str::to_string),
                id.map(str::to_string),
                session.map(str::to_string),
            )
        };
        key(a) == key(b)
    }

    /// Whether the stream `holder` names is still open: here, `local` says; on another replica, if
    /// that replica is alive and the stream is known to be open, or (its opening note may still be
    /// on its way) is not known to be closed and was claimed less than [`STALE`] ago. A holder
    /// whose release was lost is so taken over within [`STALE`] at the latest.
    pub(crate) fn holder_alive(&self, holder: &str, local: impl Fn(&str, u64) -> bool) -> bool {
        let mut parts = holder.splitn(4, ' ');
        let (Some(peer), Some(Ok(id)), Some(Ok(at)), Some(session)) = (
            parts.next(),
            parts.next().map(str::parse::<u64>),
            parts.next().map(str::parse::<u64>),
            parts.next(),
        ) else {
            return false;
        };
        if peer == self.me {
            return local(session, id);
        }
        let remote = (peer.to_string(), id);
        if !self.alive(peer) || self.closed.contains_key(&remote) {
            return false;
        }
        if self
            .known_open
            .get(&remote)
            .is_some_and(|seen| seen.elapsed() < STALE)
        {
            return true;
        }
        mcp_tasks_engine::now_ms().saturating_sub(at) < STALE.as_millis() as u64
    }

    /// Forgets replicas that went silent (and their streams) and old closed streams.
    pub(crate) fn sweep(&self) {
        self.heard.retain(|_, at| at.elapsed() < SILENCE * 6);
        self.closed.retain(|_, at| at.elapsed() < CLOSED_KEPT);
        self.known_open.retain(|_, seen| seen.elapsed() < STALE);
        self.standalone.retain(|_, v| {
            v.retain(|((peer, _), seen)| self.alive(peer) && seen.elapsed() < STALE);
            !v.is_empty()
        });
        let forget_before =
            mcp_tasks_engine::now_ms().saturating_sub(CLOSED_KEPT.as_millis() as u64);
        self.task_streams.retain(|_, v| {
            v.retain(|r| match r.closed {
                Some(closed) => closed >= forget_before,
                None => self.alive(&r.peer) && r.seen.elapsed() < STALE,
            });
            !v.is_empty()
        });
    }
}

impl Server {
    /// Routes one event of a session task when other replicas may hold the client's streams (see the
    /// module's rule).
    pub(crate) fn deliver_across_replicas(
        &self,
        event: &TaskEvent,
        session_id: &str,
        render: Render<'_>,
    ) {
        let Some(peers) = &self.peers else { return };
        let task = event.task();
        let session = self.sessions.cached(session_id);
        if let TaskEvent::InputRequested { input, .. } = event {
            // Exact through the store: any stream of the session here may claim it.
            let Some(ctx) = self.claim_ctx() else { return };
            let Some((stream, tx, _)) = self.streams.pick(session_id, &task.id) else {
                return;
            };
            let msgs = render(event, session.as_deref());
            let (key, session_id, task_id) =
                (input.key.clone(), session_id.to_string(), task.id.clone());
            // Off the router's path (a store round trip): the question may follow a notification
            // published after it.
            tokio::spawn(async move {
                let send = || msgs.into_iter().all(|m| tx.try_send(m).is_ok());
                if super::inputs::claim_shared(ctx, &key, &session_id, &task_id, stream, send).await
                {
                    tracing::debug!(request = %key, stream, "input request sent");
                }
            });
            return;
        }
        let at = event_time(event);
        let terminal = matches!(event, TaskEvent::Changed(t) if t.status.is_terminal());
        if self
            .streams
            .task_stream_since(session_id, &task.id)
            .is_some_and(|opened| opened <= at)
        {
            let msgs = render(event, session.as_deref());
            if !msgs.is_empty() || terminal {
                self.streams.deliver(session_id, &task.id, msgs, terminal);
            }
            return;
        }
        if peers.task_stream_covers(&task.id, at) {
            return;
        }
        if !self.streams.has_standalone(session_id) {
            if session.is_some() && !peers.streams_elsewhere(session_id, &task.id) {
                self.hold(session_id, event);
            }
            return;
        }
        if let Some(settling) = peers.settling.get() {
            let _ = settling.send((
                Instant::now() + SETTLE,
                event.clone(),
                session_id.to_string(),
                at,
            ));
        }
    }

    /// An event that settled: out on this replica's standalone stream of the session, unless a task
    /// stream (here or elsewhere) open at its time, or another replica's standalone stream, takes it.
    fn deliver_settled(
        &self,
        event: &TaskEvent,
        session_id: &str,
        at: u64,
        render: super::events::RenderFn,
    ) {
        let Some(peers) = &self.peers else { return };
        let task = event.task();
        if peers.task_stream_covers(&task.id, at)
            || peers.standalone_elsewhere_first(session_id)
            || self
                .streams
                .task_stream_since(session_id, &task.id)
                .is_some_and(|opened| opened <= at)
        {
            return;
        }
        let session = self.sessions.cached(session_id);
        let msgs = render(event, session.as_deref());
        if !msgs.is_empty() {
            self.streams.deliver_standalone(session_id, msgs);
        }
    }

    /// Takes in a note from another replica: its streams, its heartbeat, the calls it let through.
    fn heard_from_peer(&self, note: &Value) {
        let Some(peers) = &self.peers else { return };
        peers.heard(note);
        if note.get("peer").and_then(Value::as_str) == Some(peers.me.as_str()) {
            return;
        }
        for entry in note
            .get("rate")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let (Some(key), Some(calls), Some(per_minute)) = (
                entry.get(0).and_then(Value::as_str),
                entry.get(1).and_then(Value::as_u64),
                entry.get(2).and_then(Value::as_u64),
            ) {
                self.rate.taken_elsewhere(
                    key,
                    u32::try_from(calls).unwrap_or(u32::MAX),
                    u32::try_from(per_minute).unwrap_or(u32::MAX),
                );
            }
        }
    }

    /// Tells the other replicas of this one's streams and that it is alive, and listens to theirs.
    /// `render` is how an event that settled becomes messages (the wire layer's, handed down: core
    /// renders no wire form itself).
    pub(crate) fn start_peering(self: &Arc<Self>, render: super::events::RenderFn) {
        let Some(peers) = self.peers.clone() else {
            return;
        };
        let notifier = self.engine.notifier().clone();
        let weak = Arc::downgrade(self);
        let observer_peers = peers.clone();
        let observer_notifier = notifier.clone();
        self.streams
            .observe(Arc::new(move |change: StreamChange<'_>| {
                observer_notifier.tell_peers(&observer_peers.stream_note(change));
                if !change.open {
                    if let Some(ctx) = weak.upgrade().and_then(|s| s.claim_ctx()) {
                        super::inputs::release_stream(&ctx, change.session, change.id);
                    }
                }
            }));
        let (settle_tx, mut settle_rx) = tokio::sync::mpsc::unbounded_channel();
        let _ = peers.settling.set(settle_tx);
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            // In order: every event waits the same time.
            while let Some((until, event, session, at)) = settle_rx.recv().await {
                tokio::time::sleep_until(until.into()).await;
                let Some(server) = weak.upgrade() else { break };
                server.deliver_settled(&event, &session, at, render);
            }
        });
        let mut notes = notifier.subscribe_peer_notes();
        let weak = Arc::downgrade(self);
        let stop = self.shutdown.clone();
        tokio::spawn(async move {
            loop {
                let note = tokio::select! {
                    _ = stop.cancelled() => break,
                    note = notes.recv() => note,
                };
                let Some(server) = weak.upgrade() else { break };
                match note {
                    Ok(note) => server.heard_from_peer(&note),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(_) => break,
                }
            }
        });
        // The calls let through here go to the other replicas' buckets every half second.
        self.rate.share();
        let weak = Arc::downgrade(self);
        let stop = self.shutdown.clone();
        let rate_notifier = notifier.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(RATE_EXCHANGE);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tick.tick() => {}
                }
                let Some(server) = weak.upgrade() else { break };
                let Some(peers) = &server.peers else { break };
                let taken = server.rate.drain_taken();
                // A note is one NOTIFY (under 8,000 bytes): a few dozen keys each.
                for chunk in taken.chunks(RATE_KEYS_PER_NOTE) {
                    let entries: Vec<Value> = chunk
                        .iter()
                        .map(|(k, n, per_minute)| json!([k, n, per_minute]))
                        .collect();
                    rate_notifier.tell_peers(&json!({"peer": peers.me, "rate": entries}));
                }
            }
        });
        let stop = self.shutdown.clone();
        let weak_refresh = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(HEARTBEAT);
            let mut beats = 0u32;
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tick.tick() => {}
                }
                beats = beats.wrapping_add(1);
                if beats.is_multiple_of(REFRESH_EVERY) {
                    let Some(server) = weak_refresh.upgrade() else {
                        break;
                    };
                    for note in peers.refresh_notes(&server.streams.open_streams()) {
                        notifier.tell_peers(&note);
                    }
                }
                notifier.tell_peers(&peers.alive_note());
                peers.sweep();
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(session: &str, task: Option<&str>, id: u64, open: bool) -> Value {
        json!({"session": session, "task": task, "id": id, "open": open, "at": if open { 1_000 } else { 2_000 }})
    }

    #[test]
    fn streams_of_other_replicas_are_tracked_until_they_close() {
        let a = Peers::new();
        let other = "0000000000000000"; // sorts before any random id but this one
        a.heard(&json!({"peer": other, "stream": change("s1", None, 7, true)}));
        a.heard(&json!({"peer": other, "stream": change("s1", Some("t1"), 8, true)}));
        assert!(a.standalone_elsewhere_first("s1"));
        assert!(a.task_stream_covers("t1", 1_000));
        assert!(a.task_stream_covers("t1", 5_000), "open: every later event");
        assert!(!a.task_stream_covers("t1", 999), "not before it opened");
        assert!(a.streams_elsewhere("s1", "t2"));
        assert!(!a.task_stream_covers("t2", 1_000));
        let holder = format!("{other} 8 {} s1", mcp_tasks_engine::now_ms());
        assert!(a.holder_alive(&holder, |_, _| false));
        // Not known to be open and claimed long ago: its release was lost; taken over.
        let old = format!("{other} 99 1000 s1");
        assert!(!a.holder_alive(&old, |_, _| true));
        // Known to be open: alive however old the claim.
        let open_old = format!("{other} 7 1000 s1");
        assert!(a.holder_alive(&open_old, |_, _| false));
        assert!(Peers::same_stream(&format!("{other} 7 5 s1"), &open_old));
        assert!(!Peers::same_stream(&format!("{other} 8 5 s1"), &open_old));
        a.heard(&json!({"peer": other, "stream": change("s1", Some("t1"), 8, false)}));
        assert!(
            a.task_stream_covers("t1", 1_999),
            "events while it was open"
        );
        assert!(!a.task_stream_covers("t1", 2_000), "not after it closed");
        assert!(!a.holder_alive(&holder, |_, _| true), "closed");
        assert!(!a.streams_elsewhere("s2", "t1"));
        // A replica with a larger id does not go first.
        let b = Peers::new();
        b.heard(&json!({"peer": "ffffffffffffffffff", "stream": change("s1", None, 1, true)}));
        assert!(!b.standalone_elsewhere_first("s1"));
        assert!(b.streams_elsewhere("s1", "t1"));
    }

    #[test]
    fn a_refresh_brings_back_streams_whose_opening_note_was_missed() {
        let here = Peers::new();
        let there = Peers::new();
        let open = vec![
            ("s1".to_string(), None, 1, 0),
            ("s1".to_string(), Some("t1".to_string()), 2, 1_000),
        ];
        let notes = there.refresh_notes(&open);
        assert_eq!(notes.len(), 1);
        for n in &notes {
            here.heard(n);
        }
        assert!(here.task_stream_covers("t1", 1_500));
        assert!(here.streams_elsewhere("s1", "t9"));
        // A refresh never reopens a stream known to be closed.
        here.heard(
            &json!({"peer": there.me.clone(), "stream": change("s1", Some("t1"), 2, false)}),
        );
        for n in &notes {
            here.heard(n);
        }
        assert!(!here.task_stream_covers("t1", 2_500));
        // Many streams take several notes, each small enough for one NOTIFY.
        let many: Vec<_> = (0..100)
            .map(|i| {
                (
                    format!("session-{i:032}"),
                    Some(format!("{i:044}")),
                    i,
                    1_000,
                )
            })
            .collect();
        let notes = there.refresh_notes(&many);
        assert!(notes.len() >= 3);
        assert!(notes.iter().all(|n| n.to_string().len() < 7_500));
    }

    #[test]
    fn a_local_holder_is_asked_and_nonsense_is_dead() {
        let a = Peers::new();
        let mine = a.holder("sess", 3);
        assert!(a.holder_alive(&mine, |s, id| s == "sess" && id == 3));
        assert!(!a.holder_alive(&mine, |_, _| false));
        assert!(!a.holder_alive("garbage", |_, _| true));
        a.heard(&json!({"peer": a.me.clone(), "stream": change("s", None, 1, true)}));
        assert!(!a.streams_elsewhere("s", "t"), "its own notes are ignored");
    }
}
