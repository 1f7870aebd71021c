//! Task events to client streams: each event's messages (rendered by the task's wire) go out on
//! exactly one open stream of the task's session — its `tasks/result` stream if one is open, else the
//! session's standalone stream — or are held briefly when none is open yet.

use dashmap::mapref::entry::Entry;
use mcp_tasks_engine::TaskEvent;
use mcp_tasks_protocol::jsonrpc::Message;
use std::time::{Duration, Instant};

use super::Server;
use crate::session::Session;

/// How long a new task's events wait for the reply that creates it before they go out anyway (the
/// reply was lost with its connection, say).
const ANNOUNCE_WAIT: Duration = Duration::from_secs(10);

/// How many events are kept for a session with no open stream (a client opens its GET stream a moment
/// after initialize)…
const HELD_MAX: usize = 64;
/// …and for how long.
const HELD_FOR: Duration = Duration::from_secs(10);

/// Whether the client knows a new session task yet. Nothing about a task may reach the client before
/// the reply that tells it the task id has been written: a question on the GET stream that overtakes
/// the `tools/call` reply cannot be matched to its task.
pub(crate) enum Announce {
    /// The creating reply has not been written: the task's events wait here, in order.
    Pending(Instant, Vec<TaskEvent>),
    /// The reply was written before the router saw the task's creation.
    Written(Instant),
}

tokio::task_local! {
    /// The task a request created, set by `start_task` so the transport learns which task its reply
    /// announces.
    pub(crate) static CREATED: std::cell::Cell<Option<String>>;
}

/// Renders an event as the messages its task's wire sends, for a session (if cached here).
pub(crate) type Render<'a> = &'a dyn Fn(&TaskEvent, Option<&Session>) -> Vec<Message>;

/// A [`Render`] that lives as long as the program: a wire's `notifications_for`, handed to core by
/// the layer above (core renders no wire form itself).
pub(crate) type RenderFn = fn(&TaskEvent, Option<&Session>) -> Vec<Message>;

impl Server {
    /// Delivers one engine event to the client it concerns, once the client knows the task.
    pub(crate) fn route_event(&self, event: &TaskEvent, render: Render<'_>) {
        let task = event.task();
        // Session tasks only: the stateless wire pushes nothing unasked.
        if task.session.is_some() && task.era != super::Era::Stateless.task_label() {
            if matches!(event, TaskEvent::Created(_)) {
                // The one insert per task; a reply written before the router got here leaves a mark.
                match self.announce.entry(task.id.clone()) {
                    Entry::Vacant(e) => {
                        e.insert(Announce::Pending(Instant::now(), Vec::new()));
                        return;
                    }
                    Entry::Occupied(e) => {
                        e.remove();
                    }
                }
            } else if let Some(mut e) = self.announce.get_mut(&task.id) {
                if let Announce::Pending(_, queue) = e.value_mut() {
                    queue.push(event.clone());
                    return;
                }
            }
        }
        self.deliver_event(event, render);
    }

    /// The reply announcing `task` has been written: its waiting events go out, in order.
    pub(crate) fn announced(&self, task: &str, render: Render<'_>) {
        match self.announce.entry(task.to_string()) {
            Entry::Occupied(mut e) => {
                if let Announce::Pending(_, queue) = e.get_mut() {
                    // Delivered under the entry's lock, so the router cannot slip a later event in.
                    for event in queue.drain(..) {
                        self.deliver_event(&event, render);
                    }
                }
                e.remove();
            }
            Entry::Vacant(e) => {
                e.insert(Announce::Written(Instant::now()));
            }
        }
    }

    /// Lets out the events of tasks whose creating reply never came, and forgets old marks.
    pub(crate) fn expire_announcements(&self, render: Render<'_>) {
        let stale: Vec<String> = self
            .announce
            .iter()
            .filter(|e| match e.value() {
                Announce::Pending(at, _) | Announce::Written(at) => at.elapsed() >= ANNOUNCE_WAIT,
            })
            .map(|e| e.key().clone())
            .collect();
        for id in stale {
            self.announced(&id, render);
        }
    }

    /// Opens a session's standalone stream: what was held for it goes out first, rendered now.
    pub(crate) fn open_standalone_with(
        &self,
        session: &str,
        tx: crate::core::streams::StreamSender,
        render: Render<'_>,
    ) -> crate::core::streams::StreamGuard {
        let cached = self.sessions.cached(session);
        let first: Vec<Message> = self
            .held
            .remove(session)
            .map(|(_, q)| q)
            .unwrap_or_default()
            .into_iter()
            .filter(|(at, _)| at.elapsed() < HELD_FOR)
            .flat_map(|(_, event)| render(&event, cached.as_deref()))
            .collect();
        self.streams.register_standalone(session, tx, first)
    }

    /// Forgets held events that are too old to be useful.
    pub(crate) fn expire_held(&self) {
        self.held
            .retain(|_, q| q.back().is_some_and(|(at, _)| at.elapsed() < HELD_FOR));
    }

    /// No stream open yet (a client opens its GET stream a moment after initialize): keeps the
    /// notifications briefly for the first stream that opens. Input requests are not kept: they have
    /// their own path (re-sent on tasks/result). Held as events and rendered only if a stream opens:
    /// most sessions never open one.
    pub(super) fn hold(&self, session_id: &str, event: &TaskEvent) {
        if matches!(event, TaskEvent::InputRequested { .. }) {
            return;
        }
        let mut q = self.held.entry(session_id.to_string()).or_default();
        q.push_back((Instant::now(), event.clone()));
        while q.len() > HELD_MAX || q.front().is_some_and(|(at, _)| at.elapsed() >= HELD_FOR) {
            q.pop_front();
        }
    }

    fn deliver_event(&self, event: &TaskEvent, render: Render<'_>) {
        self.forget_sent(event);
        let task = event.task();
        // A `tasks/result` stream for the task may be open in another session of the same principal
        // (a client that reconnected): that stream gets the task's messages.
        let owning = self.streams.task_stream_session(&task.id);
        let Some(session_id) = owning.as_deref().or(task.session.as_deref()) else {
            return;
        };
        if self.peers.is_some() {
            self.deliver_across_replicas(event, session_id, render);
            return;
        }
        let session = self.sessions.cached(session_id);
        if !self.streams.has_session(session_id) {
            if session.is_some() {
                self.hold(session_id, event);
            }
            return;
        }
        let msgs = render(event, session.as_deref());
        let terminal = matches!(event, TaskEvent::Changed(t) if t.status.is_terminal());
        if msgs.is_empty() && !terminal {
            return;
        }
        let TaskEvent::InputRequested { input, .. } = event else {
            self.streams.deliver(session_id, &task.id, msgs, terminal);
            return;
        };
        if let Some(stream) = self.claim_input(&input.key, session_id, &task.id, || {
            self.streams.deliver(session_id, &task.id, msgs, false)
        }) {
            tracing::debug!(request = %input.key, stream, "input request sent");
        }
    }
}
