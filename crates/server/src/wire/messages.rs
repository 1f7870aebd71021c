//! Notifications both wires send for work running inside a request: progress on the request's
//! `progressToken`, and log messages.

use mcp_tasks_engine::LogLevel;
use mcp_tasks_protocol::jsonrpc::Message;
use serde_json::{json, Map, Value};

/// `notifications/progress` for `token`, tagged with `meta` when given.
pub(crate) fn progress(
    token: &Value,
    progress: f64,
    total: Option<f64>,
    message: Option<&str>,
    meta: Option<Map<String, Value>>,
) -> Message {
    let mut p = json!({"progressToken": token, "progress": progress});
    if let Some(t) = total {
        p["total"] = json!(t);
    }
    if let Some(m) = message {
        p["message"] = json!(m);
    }
    if let Some(m) = meta {
        p["_meta"] = Value::Object(m);
    }
    Message::notification("notifications/progress", p)
}

/// `notifications/message`, tagged with `meta` when given.
pub(crate) fn log(
    level: LogLevel,
    logger: Option<&str>,
    data: Value,
    meta: Option<Map<String, Value>>,
) -> Message {
    let mut p = json!({"level": level.as_str(), "data": data});
    if let Some(l) = logger {
        p["logger"] = json!(l);
    }
    if let Some(m) = meta {
        p["_meta"] = Value::Object(m);
    }
    Message::notification("notifications/message", p)
}

/// A request's params as an object (absent means empty); anything else is invalid params. Taken,
/// not copied: a call's arguments can be megabytes.
pub(crate) fn params_object(
    method: &str,
    params: Option<Value>,
) -> Result<Map<String, Value>, crate::core::Failure> {
    match params {
        None => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m),
        Some(_) => Err(
            mcp_tasks_protocol::jsonrpc::ErrorObject::invalid_params(format!(
                "{method}: params must be an object"
            ))
            .into(),
        ),
    }
}

/// An optional string `cursor` param.
pub(crate) fn cursor(
    method: &str,
    params: &Map<String, Value>,
) -> Result<Option<String>, crate::core::Failure> {
    match params.get("cursor") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(c)) => Ok(Some(c.clone())),
        Some(_) => Err(
            mcp_tasks_protocol::jsonrpc::ErrorObject::invalid_params(format!(
                "{method}: cursor must be a string"
            ))
            .into(),
        ),
    }
}

/// A page of `all` starting at `cursor` (`t<index>`), with the next cursor when more follow.
pub(crate) fn page_of<T>(
    method: &str,
    all: &[T],
    cursor: Option<&str>,
    size: usize,
) -> Result<(std::ops::Range<usize>, Option<String>), crate::core::Failure> {
    let start = match cursor {
        None => 0,
        Some(c) => c
            .strip_prefix('t')
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|&n| n <= all.len())
            .ok_or_else(|| {
                mcp_tasks_protocol::jsonrpc::ErrorObject::invalid_params(format!(
                    "{method}: invalid cursor {c:?}"
                ))
            })?,
    };
    let end = (start + size.max(1)).min(all.len());
    let next = (end < all.len()).then(|| format!("t{end}"));
    Ok((start..end, next))
}

/// The task a `tasks/*` request names in `taskId`, if the caller may see it and `era_visible` accepts
/// its era; anything else answers exactly like a missing task. The `taskId` param is the source of
/// truth: related-task metadata and a stray `task` are ignored.
pub(crate) async fn named_task(
    server: &crate::core::Server,
    peer: &crate::core::Peer,
    params: &Map<String, Value>,
    method: &str,
    era_visible: impl Fn(&str) -> bool,
) -> Result<mcp_tasks_engine::TaskRecord, crate::core::Failure> {
    let Some(Value::String(id)) = params.get("taskId") else {
        return Err(
            mcp_tasks_protocol::jsonrpc::ErrorObject::invalid_params(format!(
                "{method}: missing string \"taskId\""
            ))
            .into(),
        );
    };
    server
        .visible_task(peer, id, method, era_visible)
        .await
        .map_err(|u| u.task_error())
}

/// A page of the server's tools for `tools/list`, each shown by `describe`, and the next cursor.
pub(crate) fn tools_page(
    server: &crate::core::Server,
    params: &Map<String, Value>,
    describe: impl Fn(&crate::tool::RegisteredTool) -> Value,
) -> Result<(Vec<Value>, Option<String>), crate::core::Failure> {
    let all = server.tools().all();
    let cursor = cursor("tools/list", params)?;
    let (range, next) = page_of(
        "tools/list",
        &all,
        cursor.as_deref(),
        server.config().page_size,
    )?;
    Ok((all[range].iter().map(|t| describe(t)).collect(), next))
}

/// The progress notification of a call that sent a progress token, for reports made while it lasts.
pub(crate) fn progress_note(req_meta: Option<&Value>) -> Option<crate::core::budget::ProgressNote> {
    let token = req_meta?
        .get(mcp_tasks_protocol::meta::PROGRESS_TOKEN)?
        .clone();
    if !(token.is_string() || token.is_i64() || token.is_u64()) {
        return None;
    }
    Some(Box::new(move |p, total, message| {
        progress(&token, p, total, message, None)
    }))
}

/// A tool as listed to a client that gets plain calls: a tool whose calls may answer "continues as
/// task ID" (a sync budget applies) promises no output schema, which that note cannot meet.
pub(crate) fn for_plain_callers(
    server: &crate::core::Server,
    tool: &crate::tool::RegisteredTool,
    listed: &mut Value,
) {
    if server.sync_budget(tool).is_some() {
        if let Some(m) = listed.as_object_mut() {
            m.remove("outputSchema");
        }
    }
}
