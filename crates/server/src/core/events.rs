//! Task events to client streams: each event's messages (rendered by the task's wire) go out on
//! exactly one open stream of the task's session — its `tasks/result` stream if one is open, else the
//! session's standalone stream — or are held briefly when none is open yet.

use mcp_tasks_engine::TaskEvent;
use mcp_tasks_protocol::jsonrpc::Message;

use super::Server;
use crate::session::Session;

/// Renders an event as the messages its task's wire sends, for a session (if cached here).
pub(crate) type Render<'a> = &'a dyn Fn(&TaskEvent, Option<&Session>) -> Vec<Message>;

impl Server {
    /// Delivers one engine event to the client it concerns.
    pub(crate) fn route_event(&self, event: &TaskEvent, render: Render<'_>) {
        self.forget_sent(event);
        let task = event.task();
        // A `tasks/result` stream for the task may be open in another session of the same principal
        // (a client that reconnected): that stream gets the task's messages.
        let owning = self.streams.task_stream_session(&task.id);
        let Some(session_id) = owning.as_deref().or(task.session.as_deref()) else {
            return;
        };
        let session = self.sessions.cached(session_id);
        if !self.streams.has_session(session_id) {
            // No stream open yet (a client opens its GET stream a moment after initialize): keep the
            // notifications briefly for the first stream that opens. Input requests are not kept:
            // they have their own path (re-sent on tasks/result).
            if session.is_some() && !matches!(event, TaskEvent::InputRequested { .. }) {
                self.streams
                    .hold(session_id, render(event, session.as_deref()));
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
