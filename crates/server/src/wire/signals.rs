//! `io.github.mcp-tasks/signal`: a task's owner sends it a signal over MCP, on either wire (the
//! caller finds the task as it would for `tasks/get`; anything else answers as a missing task).

use mcp_tasks_engine::{SignalError, SignalSend, TaskRecord};
use mcp_tasks_protocol::jsonrpc::ErrorObject;
use mcp_tasks_protocol::meta::SIGNAL_METHOD;
use serde_json::{json, Map, Value};

use crate::core::{Failure, Peer, Server};

/// Sends the signal `params` describe to `task`, found for the caller by its wire.
pub(crate) async fn send(
    server: &Server,
    peer: &Peer,
    task: &TaskRecord,
    params: &Map<String, Value>,
) -> Result<Value, Failure> {
    let Some(Value::String(name)) = params.get("name") else {
        return Err(ErrorObject::invalid_params(format!(
            "{SIGNAL_METHOD}: missing string \"name\" (the signal the task waits for)"
        ))
        .into());
    };
    let key = match params.get("key") {
        None | Some(Value::Null) => None,
        Some(Value::String(k)) => Some(k.clone()),
        Some(_) => {
            return Err(ErrorObject::invalid_params(format!(
                "{SIGNAL_METHOD}: \"key\" must be a string"
            ))
            .into())
        }
    };
    let send = SignalSend {
        name: name.clone(),
        payload: params.get("payload").cloned().unwrap_or(Value::Null),
        sender: format!("owner {}", peer.name()),
        key,
        owner: Some(task.owner.clone()),
    };
    let sent = server
        .engine()
        .signal(&task.id, send)
        .await
        .map_err(|e| refused(&task.id, e))?;
    tracing::debug!(target: "mcp_tasks::audit", task = %task.id, principal = %peer.name(), signal = %sent.signal.name, "signal sent over MCP");
    Ok(json!({
        "taskId": task.id,
        "signal": {"seq": sent.signal.seq, "name": sent.signal.name, "at": sent.signal.at},
        "duplicate": !sent.fresh,
    }))
}

/// The JSON-RPC error for a refused signal.
pub(crate) fn refused(task: &str, e: SignalError) -> Failure {
    match e {
        SignalError::Store(_) => ErrorObject::internal(format!("{SIGNAL_METHOD}: {e}")).into(),
        SignalError::NotFound(_) => {
            ErrorObject::invalid_params(format!("{SIGNAL_METHOD}: task not found: {task}")).into()
        }
        e => ErrorObject::invalid_params(format!("{SIGNAL_METHOD}: {e}")).into(),
    }
}
