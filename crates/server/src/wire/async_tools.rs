//! Asynchronous Tool Execution (the SEP of 2025-08-26), for session clients that opt in with
//! `capabilities.experimental.asyncToolExecution`: tools show an `invocationMode`, and operations
//! named by a client token are started with `tools/call` + `operation` and read with
//! `tools/async/status` / `tools/async/result`.

use mcp_tasks_engine::TaskEvent;
use mcp_tasks_protocol::jsonrpc::{ErrorObject, Message, Request};
use mcp_tasks_protocol::mcp_2025::TaskSupport;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use super::era_2025;
use super::messages::params_object;
use crate::core::{Failure, Peer, Server};
use crate::session::Session;
use crate::transport::streams::StreamSender;

/// Adds `invocationMode` to a `tools/list` entry: `async` for tools that run as tasks (required, and
/// optional ones — the proposal's hybrid tools, which opted-in clients call asynchronously), `sync`
/// for those that never do.
pub(crate) fn add_invocation_mode(tool: &mut Value, support: TaskSupport) {
    let mode = match support {
        TaskSupport::Forbidden => "sync",
        TaskSupport::Optional | TaskSupport::Required => "async",
    };
    tool["invocationMode"] = json!(mode);
}

/// Serves one request of this form.
pub(crate) async fn dispatch(
    server: &Arc<Server>,
    peer: &Peer,
    req: Request,
    _out: StreamSender,
    _cancel: CancellationToken,
) -> Result<Value, Failure> {
    let session = era_2025::session_of(peer, &req.method)?;
    let params = params_object(&req.method, req.params.as_ref())?;
    match req.method.as_str() {
        "tools/list" => era_2025::tools_list(server, session, &params, session.async_tools()),
        m => Err(ErrorObject::method_not_found(m).into()),
    }
}

/// The notifications an operation's events produce.
pub(crate) fn notifications_for(_event: &TaskEvent, _session: Option<&Session>) -> Vec<Message> {
    Vec::new()
}
