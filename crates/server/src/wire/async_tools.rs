//! Asynchronous Tool Execution (the SEP of 2025-08-26), for session clients that opt in with
//! `capabilities.experimental.asyncToolExecution` at `initialize`: tools show an `invocationMode`;
//! `tools/call` with `operation {token?, keepAlive?}` starts an operation named by the client's token
//! (a task of the one store), read with `tools/async/status` and `tools/async/result`; requests and
//! notifications the server sends for an operation carry `_operation {token}`.
//!
//! Mapping onto tasks: the token is the task's idempotency key in its own namespace (so a retried call
//! with the same token and arguments gets the same operation, and other arguments get -32602);
//! `keepAlive` is retention counted from when the task finishes; statuses map one to one (`cancelled`
//! is spelt `canceled` here), with `submitted` for an operation just accepted. A tool result with
//! `isError` is a `completed` operation whose result says so.

use mcp_tasks_engine::{now_ms, random_id, Outcome, TaskEvent, TaskRecord, TaskStatus};
use mcp_tasks_protocol::jsonrpc::{ErrorObject, Message, Request, RequestId};
use mcp_tasks_protocol::mcp_2025::TaskSupport;
use mcp_tasks_protocol::meta;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use super::era_2025;
use super::messages::{self, params_object};
use crate::core::streams::StreamSender;
use crate::core::{calls, Failure, Peer, Server, TaskStart, ASYNC_TOOLS_LABEL};
use crate::session::Session;

/// Where a task keeps its operation's token (in its wire metadata).
const TOKEN_META: &str = "operationToken";

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

/// The proposal's `OperationStatus` of a task.
fn status_of(rec: &TaskRecord) -> &'static str {
    match rec.status {
        TaskStatus::Working => "working",
        TaskStatus::InputRequired => "input_required",
        TaskStatus::Completed => "completed",
        TaskStatus::Failed => "failed",
        TaskStatus::Cancelled => "canceled",
    }
}

/// The token of an operation's task.
fn token_of(rec: &TaskRecord) -> Option<&str> {
    rec.request_meta.get(TOKEN_META).and_then(Value::as_str)
}

fn not_found() -> Failure {
    ErrorObject::invalid_params("Failed to retrieve operation: Operation not found").into()
}

/// Serves one request of this form.
pub(crate) async fn dispatch(
    server: &Arc<Server>,
    peer: &Peer,
    mut req: Request,
    out: StreamSender,
    cancel: CancellationToken,
) -> Result<Value, Failure> {
    let session = era_2025::session_of(peer, &req.method)?;
    let params = params_object(&req.method, req.params.take())?;
    if !session.async_tools() {
        // A long-running operation called by a client that did not opt in: invalid request.
        return Err(ErrorObject::invalid_request(format!(
            "{} needs Asynchronous Tool Execution: declare capabilities.experimental.{} = {{}} at initialize",
            req.method,
            era_2025::ASYNC_TOOLS_CAPABILITY
        ))
        .into());
    }
    match req.method.as_str() {
        "tools/list" => era_2025::tools_list(server, session, &params, true),
        "tools/call" => {
            server.check_rate(peer, &req.method)?;
            call(server, peer, session, &req.id, &params, out, cancel).await
        }
        "tools/async/status" => {
            server.check_rate(peer, &req.method)?;
            let op = find(server, peer, &params, &req.method).await?;
            if op.status == TaskStatus::InputRequired {
                resend_questions(server, session, &op).await?;
            }
            let mut result = json!({"status": status_of(&op)});
            if let Some(error) = failure_text(&op) {
                result["error"] = json!(error);
            }
            Ok(result)
        }
        "tools/async/result" => {
            server.check_rate(peer, &req.method)?;
            let op = find(server, peer, &params, &req.method).await?;
            let token = token_of(&op).unwrap_or_default();
            match (&op.status, &op.outcome) {
                (TaskStatus::Completed, Some(Outcome::Result { value, .. })) => {
                    tracing::info!(target: "mcp_tasks::audit", task = %op.id, principal = %peer.name(), "operation result retrieved");
                    Ok(json!({"result": value}))
                }
                (TaskStatus::Failed | TaskStatus::Cancelled, _) => {
                    Err(ErrorObject::invalid_params(format!(
                        "Operation {token:?} is {}: {}; it has no result",
                        status_of(&op),
                        failure_text(&op).unwrap_or_default()
                    ))
                    .into())
                }
                _ => Err(ErrorObject::invalid_params(format!(
                    "Operation {token:?} is {}; its result is available once tools/async/status says completed",
                    status_of(&op)
                ))
                .into()),
            }
        }
        m => Err(ErrorObject::method_not_found(m).into()),
    }
}

/// Why an operation failed or was canceled, for `error`.
fn failure_text(op: &TaskRecord) -> Option<String> {
    match (&op.status, &op.outcome) {
        (TaskStatus::Failed, Some(Outcome::Error { message, .. })) => Some(message.clone()),
        (TaskStatus::Failed | TaskStatus::Cancelled, _) => Some(
            op.status_message
                .clone()
                .unwrap_or_else(|| format!("the operation {}", status_of(op))),
        ),
        _ => None,
    }
}

/// The operation a `tools/async/*` request names by `token`.
async fn find(
    server: &Server,
    peer: &Peer,
    params: &Map<String, Value>,
    method: &str,
) -> Result<TaskRecord, Failure> {
    let token = match params.get("token") {
        Some(Value::String(t)) if !t.is_empty() => t,
        _ => {
            return Err(ErrorObject::invalid_params(format!(
                "{method}: missing string \"token\" (the operation's token from tools/call)"
            ))
            .into())
        }
    };
    match server.task_by_key(peer, ASYNC_TOOLS_LABEL, token).await? {
        // Past its keepAlive it is gone, whether or not the sweeper has purged it yet.
        Some(t) if t.status.is_terminal() && t.expires_at().is_some_and(|e| e <= now_ms()) => Err(
            ErrorObject::invalid_params("Failed to retrieve operation: Operation has expired")
                .into(),
        ),
        Some(t) => Ok(t),
        None => {
            tracing::info!(target: "mcp_tasks::audit", principal = %peer.name(), method, "operation lookup failed");
            Err(not_found())
        }
    }
}

/// `tools/call` with `operation`: starts (or, for a retry with the same token, finds) the operation.
async fn call(
    server: &Arc<Server>,
    peer: &Peer,
    session: &Arc<Session>,
    request_id: &RequestId,
    params: &Map<String, Value>,
    out: StreamSender,
    cancel: CancellationToken,
) -> Result<Value, Failure> {
    // The proposal's example nests the call as `request {name, arguments}`; both forms are accepted.
    let call_params = match params.get("request") {
        Some(Value::Object(inner)) => inner.clone(),
        _ => params.clone(),
    };
    let operation = match params.get("operation") {
        Some(Value::Object(o)) => o,
        _ => {
            return Err(ErrorObject::invalid_params(
                "tools/call: \"operation\" must be an object {token?, keepAlive?}",
            )
            .into())
        }
    };
    let token =
        match operation.get("token") {
            None | Some(Value::Null) => random_id(),
            Some(Value::String(t)) if !t.is_empty() && t.len() <= 256 => t.clone(),
            Some(_) => return Err(ErrorObject::invalid_params(
                "tools/call: operation.token must be a non-empty string of at most 256 characters",
            )
            .into()),
        };
    let keep_alive_ms = match operation.get("keepAlive") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_f64() {
            Some(s) if s.is_finite() && s >= 0.0 => Some((s * 1000.0) as u64),
            _ => {
                return Err(ErrorObject::invalid_params(
                    "tools/call: operation.keepAlive must be a non-negative number of seconds",
                )
                .into())
            }
        },
    };
    let (tool, arguments) = server.tool_call(peer, &call_params)?;
    let name = tool.tool.name.as_str();
    if tool.tool.task_support == TaskSupport::Forbidden {
        return Err(ErrorObject::invalid_params(format!(
            "Tool {name} runs synchronously (invocationMode \"sync\"); call it without \"operation\""
        ))
        .into());
    }
    if tool.tool.prepare.is_some() {
        // A retry must not ask its questions again: the token already names the operation.
        if let Some(rec) = server.task_by_key(peer, ASYNC_TOOLS_LABEL, &token).await? {
            return Ok(accepted(name, &token, &rec));
        }
    }
    let invalid = calls::invalid_arguments(&tool, &arguments);
    let req_meta = call_params.get("_meta").or(params.get("_meta"));
    let arguments = match era_2025::prepared_arguments(
        server,
        session,
        tool.tool.prepare.as_ref(),
        arguments,
        invalid.is_some(),
        req_meta,
        &out,
        &cancel,
    )
    .await?
    {
        Ok(args) => args,
        Err(tool_error) => return Ok(tool_error),
    };
    let keep_ms = server.engine().config().grant_ttl(keep_alive_ms);
    let mut stored = era_2025::task_meta(server, session, req_meta);
    stored[TOKEN_META] = json!(token);
    let started = server
        .start_task(
            peer,
            TaskStart {
                tool: name.to_string(),
                arguments,
                era: ASYNC_TOOLS_LABEL,
                request_meta: stored,
                ttl_ms: None,
                idempotency_key: Some(token.clone()),
                key_label: "Operation token",
                retain_after_finish_ms: keep_ms,
                cancellable_by: Some(request_id.clone()),
                invalid,
                webhook: req_meta.and_then(|m| m.get(meta::WEBHOOK)).cloned(),
            },
            &cancel,
        )
        .await?;
    let mut result = accepted(name, &token, &started.record);
    if let Some(w) = started.webhook {
        result["_meta"] = serde_json::json!({ meta::WEBHOOK: w });
    }
    Ok(result)
}

/// The immediate `CallToolResult` of a call that started (or, retried, found) operation `rec`.
fn accepted(tool: &str, token: &str, rec: &TaskRecord) -> Value {
    // Just accepted: `submitted`; a retry of a call that already ran reports where it is.
    let status = match rec.status {
        TaskStatus::Working if rec.progress.is_none() && rec.attempt == 1 => "submitted",
        _ => status_of(rec),
    };
    let poll_secs = rec.poll_interval_ms.unwrap_or(1000).div_ceil(1000).max(1);
    json!({
        "content": [{"type": "text", "text": format!(
            "Started {tool} as operation {token}. Poll tools/async/status with this token; fetch the result with tools/async/result once it is completed."
        )}],
        "operation": {
            "token": token,
            // What the operation has (a retry reports the first call's grant).
            "keepAlive": rec.retain_after_finish_ms.map(|ms| ms.div_ceil(1000)),
            "pollFrequency": poll_secs,
            "status": status,
        },
    })
}

/// An operation waiting for input: its questions go (again) to the session's open stream, unless they
/// already went out on a stream that is still open.
async fn resend_questions(
    server: &Server,
    session: &Session,
    op: &TaskRecord,
) -> Result<(), Failure> {
    let Some(token) = token_of(op) else {
        return Ok(());
    };
    for input in server.pending_inputs(&op.id).await? {
        let msg = input_request(token, &input);
        server.claim_input(&input.key, &session.id, &op.id, || {
            server
                .streams()
                .deliver(&session.id, &op.id, vec![msg], false)
        });
    }
    Ok(())
}

/// A task's input request as this form sends it: the request's id is its key, and its params carry
/// `_operation {token}`.
fn input_request(token: &str, input: &mcp_tasks_engine::InputRecord) -> Message {
    let mut params = input.params.clone();
    params["_operation"] = json!({"token": token});
    Message::Request(Request {
        id: RequestId::String(input.key.clone()),
        method: input.method.clone(),
        params: Some(params),
    })
}

/// The messages an operation's events produce: its questions, progress on the call's token while it
/// rises, and logs, each carrying `_operation {token}`. The proposal has no status notification.
pub(crate) fn notifications_for(event: &TaskEvent, session: Option<&Session>) -> Vec<Message> {
    let task = event.task();
    let Some(token) = token_of(task) else {
        return Vec::new();
    };
    let tag = |mut m: Message| {
        if let Message::Notification(n) = &mut m {
            if let Some(p) = n.params.as_mut() {
                p["_operation"] = json!({"token": token});
            }
        }
        m
    };
    match event {
        TaskEvent::InputRequested { input, .. } => vec![input_request(token, input)],
        TaskEvent::Progress {
            task,
            message,
            advanced: true,
        } if !task.status.is_terminal() => match task.request_meta.get(meta::PROGRESS_TOKEN) {
            Some(progress_token) => vec![tag(messages::progress(
                progress_token,
                task.progress.unwrap_or(0.0),
                task.progress_total,
                message.as_deref(),
                None,
            ))],
            None => Vec::new(),
        },
        TaskEvent::Log {
            level,
            logger,
            data,
            ..
        } => {
            if session.is_some_and(|s| *level < s.log_level()) {
                return Vec::new();
            }
            vec![tag(messages::log(
                *level,
                logger.as_deref(),
                data.clone(),
                None,
            ))]
        }
        _ => Vec::new(),
    }
}
