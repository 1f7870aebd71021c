//! The wire forms, one module each: they parse a method's params, call the core, and render the
//! result or error in their own shapes. [`era::classify`] decides which one a message belongs to.
//!
//! Invariant: a difference between wires lives in exactly one of these modules; the core knows none.

pub(crate) mod async_tools;
pub mod era;
pub(crate) mod era_2025;
pub(crate) mod era_2026;
pub(crate) mod events;
mod messages;
mod mrtr;
mod render_2025;
mod render_2026;
mod signals;

use mcp_tasks_engine::TaskEvent;
use mcp_tasks_protocol::jsonrpc::Message;

use crate::session::Session;

/// The notifications a task event produces on the wire its task was created on (session wires only:
/// the stateless wire pushes through `subscriptions/listen`).
pub(crate) fn notifications_for(event: &TaskEvent, session: Option<&Session>) -> Vec<Message> {
    let era = event.task().era.as_str();
    if era == era_2025::ERA {
        era_2025::notifications_for(event, session)
    } else if era == crate::core::ASYNC_TOOLS_LABEL {
        async_tools::notifications_for(event, session)
    } else {
        Vec::new()
    }
}

/// Whether a request's reply may be preceded by related messages or take long (so HTTP may answer it
/// with a stream). Everything else, `tasks/get` above all (the client wants to poll), is answered
/// with plain JSON.
pub(crate) fn may_stream(method: &str) -> bool {
    matches!(
        method,
        "tools/call" | "tasks/result" | "subscriptions/listen" | "prompts/get" | "events/stream"
    )
}
