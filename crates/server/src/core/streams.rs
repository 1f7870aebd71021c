//! Delivers task notifications to whichever client stream is open on this node.
//!
//! Each message goes to exactly one stream (the transport spec forbids broadcasting): a stream that
//! belongs to the task (an open `tasks/result`) is preferred, then the session's standalone stream
//! (the HTTP GET stream, or stdout on stdio). With no stream open the notification is dropped:
//! notifications are advisory and clients poll `tasks/get` (spec: they must not rely on them).

use dashmap::DashMap;
use mcp_tasks_protocol::jsonrpc::Message;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, Notify};

/// A sender for messages to one client stream.
pub type StreamSender = mpsc::Sender<Message>;

/// A stream that belongs to one task, with a signal raised once the task's terminal event went out.
struct TaskStream {
    id: u64,
    tx: StreamSender,
    terminal_sent: Arc<Notify>,
    /// When it opened (Unix ms): with replicas, it takes the task's events from then on.
    opened_ms: u64,
}

#[derive(Default)]
struct SessionStreams {
    standalone: Vec<(u64, StreamSender)>,
    per_task: HashMap<String, Vec<TaskStream>>,
}

/// A stream opening or closing, as told to the [`Streams`] observer.
#[derive(Clone, Copy, Debug)]
pub struct StreamChange<'a> {
    /// The session the stream belongs to.
    pub session: &'a str,
    /// The task, for a task's own stream (an open `tasks/result`); `None` for a standalone stream.
    pub task: Option<&'a str>,
    /// The stream's id on this node.
    pub id: u64,
    /// Opened (`true`) or closed.
    pub open: bool,
    /// When (Unix ms).
    pub at: u64,
}

/// Told of every stream that opens or closes (other replicas learn where a client's streams are).
pub type StreamObserver = Arc<dyn Fn(StreamChange<'_>) + Send + Sync>;

/// Open client streams by session.
#[derive(Default, Clone)]
pub struct Streams {
    inner: Arc<DashMap<String, Mutex<SessionStreams>>>,
    /// task id → (session, number of open task streams), for tasks/result opened in another session.
    task_sessions: Arc<DashMap<String, (String, usize)>>,
    next: Arc<AtomicU64>,
    observer: Arc<std::sync::OnceLock<StreamObserver>>,
}

/// Unregisters a stream when dropped.
pub struct StreamGuard {
    streams: Streams,
    session: String,
    task: Option<String>,
    id: u64,
    terminal_sent: Arc<Notify>,
}

impl StreamGuard {
    /// This stream's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Resolves once the router has sent the task's terminal event on this stream (task streams only).
    pub async fn terminal_sent(&self) {
        self.terminal_sent.notified().await
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if let Some(observe) = self.streams.observer.get() {
            observe(StreamChange {
                session: &self.session,
                task: self.task.as_deref(),
                id: self.id,
                open: false,
                at: mcp_tasks_engine::now_ms(),
            });
        }
        if let Some(t) = &self.task {
            let mut gone = false;
            if let Some(mut e) = self.streams.task_sessions.get_mut(t) {
                e.1 = e.1.saturating_sub(1);
                gone = e.1 == 0;
            }
            if gone {
                self.streams.task_sessions.remove_if(t, |_, (_, n)| *n == 0);
            }
        }
        let mut empty = false;
        if let Some(entry) = self.streams.inner.get(&self.session) {
            let mut s = entry.lock().unwrap_or_else(|p| p.into_inner());
            match &self.task {
                None => s.standalone.retain(|(i, _)| *i != self.id),
                Some(t) => {
                    if let Some(v) = s.per_task.get_mut(t) {
                        v.retain(|ts| ts.id != self.id);
                        if v.is_empty() {
                            s.per_task.remove(t);
                        }
                    }
                }
            }
            empty = s.standalone.is_empty() && s.per_task.is_empty();
        }
        if empty {
            self.streams.inner.remove_if(&self.session, |_, s| {
                let s = s.lock().unwrap_or_else(|p| p.into_inner());
                s.standalone.is_empty() && s.per_task.is_empty()
            });
        }
    }
}

impl Streams {
    /// Registers a session's standalone stream (HTTP GET, or stdout); `first` goes out on it before
    /// anything else.
    pub fn register_standalone(
        &self,
        session: &str,
        tx: StreamSender,
        first: Vec<Message>,
    ) -> StreamGuard {
        for msg in first {
            if tx.try_send(msg).is_err() {
                break;
            }
        }
        self.register(session, None, tx)
    }

    /// Registers a stream that belongs to one task (an open `tasks/result`).
    pub fn register_task(&self, session: &str, task: &str, tx: StreamSender) -> StreamGuard {
        self.register(session, Some(task.to_string()), tx)
    }

    fn register(&self, session: &str, task: Option<String>, tx: StreamSender) -> StreamGuard {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let opened_ms = mcp_tasks_engine::now_ms();
        let terminal_sent = Arc::new(Notify::new());
        let entry = self.inner.entry(session.to_string()).or_default();
        {
            let mut s = entry.lock().unwrap_or_else(|p| p.into_inner());
            match &task {
                None => s.standalone.push((id, tx)),
                Some(t) => s.per_task.entry(t.clone()).or_default().push(TaskStream {
                    id,
                    tx,
                    terminal_sent: terminal_sent.clone(),
                    opened_ms,
                }),
            }
        }
        drop(entry);
        if let Some(observe) = self.observer.get() {
            observe(StreamChange {
                session,
                task: task.as_deref(),
                id,
                open: true,
                at: opened_ms,
            });
        }
        if let Some(t) = &task {
            let mut e = self
                .task_sessions
                .entry(t.clone())
                .or_insert_with(|| (session.to_string(), 0));
            e.0 = session.to_string();
            e.1 += 1;
        }
        StreamGuard {
            streams: self.clone(),
            session: session.to_string(),
            task,
            id,
            terminal_sent,
        }
    }

    /// Sends a task's messages on exactly one open stream of the session: the task's own stream (an
    /// open `tasks/result`) if there is one, else the standalone stream. With `terminal`, the task
    /// stream is told its last event went out. Returns the id of the stream used, if any.
    pub fn deliver(
        &self,
        session: &str,
        task: &str,
        msgs: Vec<Message>,
        terminal: bool,
    ) -> Option<u64> {
        let entry = self.inner.get(session)?;
        let s = entry.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(ts) = s
            .per_task
            .get(task)
            .and_then(|v| v.iter().find(|ts| !ts.tx.is_closed()))
        {
            // A full stream means a slow client; notifications are advisory, so drop rather than block.
            let sent = msgs.into_iter().all(|m| ts.tx.try_send(m).is_ok());
            if terminal {
                ts.terminal_sent.notify_one();
            }
            return sent.then_some(ts.id);
        }
        let (id, tx) = s.standalone.iter().find(|(_, tx)| !tx.is_closed())?;
        msgs.into_iter()
            .all(|m| tx.try_send(m).is_ok())
            .then_some(*id)
    }

    /// When the earliest open stream of `task` itself in `session` here (an open `tasks/result`)
    /// opened (Unix ms), if there is one.
    pub fn task_stream_since(&self, session: &str, task: &str) -> Option<u64> {
        let entry = self.inner.get(session)?;
        let s = entry.lock().unwrap_or_else(|p| p.into_inner());
        s.per_task
            .get(task)?
            .iter()
            .filter(|ts| !ts.tx.is_closed())
            .map(|ts| ts.opened_ms)
            .min()
    }

    /// Whether `session` has an open standalone stream here.
    pub fn has_standalone(&self, session: &str) -> bool {
        self.inner.get(session).is_some_and(|entry| {
            let s = entry.lock().unwrap_or_else(|p| p.into_inner());
            s.standalone.iter().any(|(_, tx)| !tx.is_closed())
        })
    }

    /// Sends messages on the session's standalone stream only. Returns the stream's id if sent.
    pub fn deliver_standalone(&self, session: &str, msgs: Vec<Message>) -> Option<u64> {
        let entry = self.inner.get(session)?;
        let s = entry.lock().unwrap_or_else(|p| p.into_inner());
        let (id, tx) = s.standalone.iter().find(|(_, tx)| !tx.is_closed())?;
        msgs.into_iter()
            .all(|m| tx.try_send(m).is_ok())
            .then_some(*id)
    }

    /// Every open stream here: (session, task for a task's own stream, id, when it opened in Unix ms;
    /// 0 for standalone streams, whose opening time nothing needs).
    pub fn open_streams(&self) -> Vec<(String, Option<String>, u64, u64)> {
        let mut out = Vec::new();
        for entry in self.inner.iter() {
            let s = entry.value().lock().unwrap_or_else(|p| p.into_inner());
            for (id, tx) in &s.standalone {
                if !tx.is_closed() {
                    out.push((entry.key().clone(), None, *id, 0));
                }
            }
            for (task, streams) in &s.per_task {
                for ts in streams.iter().filter(|ts| !ts.tx.is_closed()) {
                    out.push((entry.key().clone(), Some(task.clone()), ts.id, ts.opened_ms));
                }
            }
        }
        out
    }

    /// Sets the observer told of every stream opened or closed from now on (once).
    pub fn observe(&self, observer: StreamObserver) {
        let _ = self.observer.set(observer);
    }

    /// The stream [`Streams::deliver`] would use for `task` of `session`: its id, its sender, and
    /// whether it is the task's own stream.
    pub fn pick(&self, session: &str, task: &str) -> Option<(u64, StreamSender, bool)> {
        let entry = self.inner.get(session)?;
        let s = entry.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(ts) = s
            .per_task
            .get(task)
            .and_then(|v| v.iter().find(|ts| !ts.tx.is_closed()))
        {
            return Some((ts.id, ts.tx.clone(), true));
        }
        s.standalone
            .iter()
            .find(|(_, tx)| !tx.is_closed())
            .map(|(id, tx)| (*id, tx.clone(), false))
    }

    /// The session whose open stream waits for `task` (a `tasks/result`), if any.
    pub fn task_stream_session(&self, task: &str) -> Option<String> {
        self.task_sessions.get(task).map(|e| e.0.clone())
    }

    /// Whether stream `id` of `session` is still registered and open.
    pub fn is_live(&self, session: &str, id: u64) -> bool {
        let Some(entry) = self.inner.get(session) else {
            return false;
        };
        let s = entry.lock().unwrap_or_else(|p| p.into_inner());
        s.standalone
            .iter()
            .any(|(i, tx)| *i == id && !tx.is_closed())
            || s.per_task
                .values()
                .flatten()
                .any(|ts| ts.id == id && !ts.tx.is_closed())
    }

    /// Closes every stream of a session (it ended): their receivers see the end of the stream.
    pub fn close_session(&self, session: &str) {
        self.inner.remove(session);
    }

    /// Closes every stream (the server is stopping): their receivers see the end of the stream.
    pub fn close_all(&self) {
        self.inner.clear();
    }

    /// Whether a session has any open stream here.
    pub fn has_session(&self, session: &str) -> bool {
        self.inner.contains_key(session)
    }
}
