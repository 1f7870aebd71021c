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
use tokio::sync::mpsc;

/// A sender for messages to one client stream.
pub type StreamSender = mpsc::Sender<Message>;

#[derive(Default)]
struct SessionStreams {
    standalone: Vec<(u64, StreamSender)>,
    per_task: HashMap<String, Vec<(u64, StreamSender)>>,
}

/// Open client streams by session.
#[derive(Default, Clone)]
pub struct Streams {
    inner: Arc<DashMap<String, Mutex<SessionStreams>>>,
    next: Arc<AtomicU64>,
}

/// Unregisters a stream when dropped.
pub struct StreamGuard {
    streams: Streams,
    session: String,
    task: Option<String>,
    id: u64,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let mut empty = false;
        if let Some(entry) = self.streams.inner.get(&self.session) {
            let mut s = entry.lock().unwrap_or_else(|p| p.into_inner());
            match &self.task {
                None => s.standalone.retain(|(i, _)| *i != self.id),
                Some(t) => {
                    if let Some(v) = s.per_task.get_mut(t) {
                        v.retain(|(i, _)| *i != self.id);
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
    /// Registers a session's standalone stream (HTTP GET, or stdout).
    pub fn register_standalone(&self, session: &str, tx: StreamSender) -> StreamGuard {
        self.register(session, None, tx)
    }

    /// Registers a stream that belongs to one task (an open `tasks/result`).
    pub fn register_task(&self, session: &str, task: &str, tx: StreamSender) -> StreamGuard {
        self.register(session, Some(task.to_string()), tx)
    }

    fn register(&self, session: &str, task: Option<String>, tx: StreamSender) -> StreamGuard {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let entry = self.inner.entry(session.to_string()).or_default();
        {
            let mut s = entry.lock().unwrap_or_else(|p| p.into_inner());
            match &task {
                None => s.standalone.push((id, tx)),
                Some(t) => s.per_task.entry(t.clone()).or_default().push((id, tx)),
            }
        }
        drop(entry);
        StreamGuard { streams: self.clone(), session: session.to_string(), task, id }
    }

    /// Sends `msg` on the session's standalone stream, unless a stream that belongs to the task is open
    /// (that stream forwards the task's messages itself, in order). Returns whether it was sent.
    pub fn deliver(&self, session: &str, task: Option<&str>, msg: Message) -> bool {
        let Some(entry) = self.inner.get(session) else { return false };
        let s = entry.lock().unwrap_or_else(|p| p.into_inner());
        if task.is_some_and(|t| s.per_task.contains_key(t)) {
            return false;
        }
        for (_, tx) in s.standalone.iter() {
            if !tx.is_closed() {
                // A full stream means a slow client; notifications are advisory, so drop rather than block.
                return tx.try_send(msg).is_ok();
            }
        }
        false
    }

    /// Whether a session has any open stream here.
    pub fn has_session(&self, session: &str) -> bool {
        self.inner.contains_key(session)
    }
}
