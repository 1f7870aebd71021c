//! The session-based wire (MCP 2025-11-25, and 2025-06-18 / 2025-03-26 without tasks): method dispatch
//! and the notifications this era sends for task events.

use async_trait::async_trait;
use mcp_tasks_engine::store::{ActiveLimit, AnswerError, ListQuery, Lookup, StoreError};
use mcp_tasks_engine::{
    ContextSink, EngineError, InputError, InputRecord, InputResponse, LogLevel, NewTask, Outcome,
    TaskContext, TaskEvent, TaskRecord, TaskStatus,
};
use mcp_tasks_protocol::jsonrpc::{ErrorObject, Message, Request, RequestId};
use mcp_tasks_protocol::mcp_2025::TaskSupport;
use mcp_tasks_protocol::{error_codes, meta, version};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use crate::render_2025;
use crate::router::StreamSender;
use crate::session::{Session, SessionData};
use crate::{Peer, Server, ANONYMOUS};

/// `notifications/progress` params.
pub(crate) fn progress_params(
    token: &Value,
    progress: f64,
    total: Option<f64>,
    message: Option<String>,
) -> Value {
    let mut p = json!({"progressToken": token, "progress": progress});
    if let Some(t) = total {
        p["total"] = json!(t);
    }
    if let Some(m) = message {
        p["message"] = json!(m);
    }
    p
}

/// `notifications/message` params.
pub(crate) fn log_params(level: LogLevel, logger: Option<String>, data: Value) -> Value {
    let mut p = json!({"level": level.as_str(), "data": data});
    if let Some(l) = logger {
        p["logger"] = json!(l);
    }
    p
}

/// The era label stored on tasks created through this wire.
pub(crate) const ERA: &str = version::V2025_11_25;

fn internal(e: StoreError) -> ErrorObject {
    tracing::error!(error = %e, "store failure while serving a request");
    ErrorObject::internal(format!("Internal error: {e}"))
}

fn params_object(req: &Request) -> Result<Map<String, Value>, ErrorObject> {
    match &req.params {
        None => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(_) => Err(ErrorObject::invalid_params(format!(
            "{}: params must be an object",
            req.method
        ))),
    }
}

/// Answers `initialize`: negotiates the version and creates the session.
pub(crate) async fn initialize(
    server: &Server,
    principal: &str,
    params: Option<&Value>,
) -> Result<(Arc<Session>, Value), ErrorObject> {
    let params = params
        .and_then(Value::as_object)
        .ok_or_else(|| ErrorObject::invalid_params("initialize: params must be an object with protocolVersion, capabilities and clientInfo"))?;
    let requested = params
        .get("protocolVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            ErrorObject::invalid_params("initialize: missing string \"protocolVersion\"")
        })?;
    let capabilities = params
        .get("capabilities")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if !capabilities.is_object() {
        return Err(ErrorObject::invalid_params(
            "initialize: \"capabilities\" must be an object",
        ));
    }
    let client_info = params
        .get("clientInfo")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let negotiated = version::negotiate(requested);
    let data = SessionData {
        protocol_version: negotiated.to_string(),
        client_capabilities: capabilities,
        client_info,
        log_level: LogLevel::Info,
    };
    let session = server
        .sessions
        .create(principal, data)
        .await
        .map_err(internal)?;
    let mut caps = json!({"tools": {"listChanged": false}, "logging": {}});
    if let Value::Object(c) = &mut caps {
        c.extend(server.catalog_capabilities());
    }
    if version::has_session_tasks(negotiated) {
        caps["tasks"] = json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}});
    }
    let mut result = json!({
        "protocolVersion": negotiated,
        "capabilities": caps,
        "serverInfo": {"name": server.config.name, "version": server.config.version},
    });
    if let Some(i) = &server.config.instructions {
        result["instructions"] = json!(i);
    }
    tracing::info!(session = %session.id, principal, version = negotiated, "session initialized");
    Ok((session, result))
}

/// Routes one request of an initialized session (or `ping` before it).
pub(crate) async fn dispatch(
    server: &Arc<Server>,
    peer: &Peer,
    req: Request,
    out: StreamSender,
    cancel: CancellationToken,
) -> Result<Value, ErrorObject> {
    if req.method == "ping" {
        return Ok(json!({}));
    }
    let Some(session) = peer.session.clone() else {
        return Err(ErrorObject::invalid_request(format!(
            "{} before initialize: send initialize first",
            req.method
        )));
    };
    let tasks = session.has_tasks();
    let manages_tasks = req.method.starts_with("tasks/")
        || (req.method == "tools/call"
            && req.params.as_ref().is_some_and(|p| p.get("task").is_some()));
    if tasks && manages_tasks {
        // Anonymous callers share one principal, so they are limited per session.
        let key = if peer.principal == ANONYMOUS {
            format!("{ANONYMOUS}:{}", session.id)
        } else {
            peer.principal.clone()
        };
        if let Err(wait_ms) = server.rate.check(&key, peer.limits.calls_per_minute) {
            tracing::info!(target: "mcp_tasks::audit", principal = %peer.principal, method = %req.method, "rate limited");
            return Err(ErrorObject::new(
                error_codes::RATE_LIMITED,
                format!(
                    "Rate limit: at most {} task calls per minute; retry in {wait_ms} ms",
                    peer.limits.calls_per_minute
                ),
            )
            .with_data(json!({"retryAfterMs": wait_ms})));
        }
    }
    // A prompt that asks for input is built like a plain tool call: inline, asking on this stream.
    if let Some(handler) = (req.method == "prompts/get")
        .then(|| prompt_handler(server, &req))
        .flatten()
    {
        let args = req
            .params
            .as_ref()
            .and_then(|p| p.get("arguments"))
            .cloned()
            .unwrap_or_else(|| json!({}));
        let meta = req.params.as_ref().and_then(|p| p.get("_meta")).cloned();
        return run_inline(server, &session, handler, args, meta, out, cancel).await;
    }
    match req.method.as_str() {
        "initialize" => Err(ErrorObject::invalid_request(
            "this session is already initialized",
        )),
        "tools/list" => tools_list(server, &session, &req),
        "tools/call" => tools_call(server, peer, &session, &req, out, cancel).await,
        "logging/setLevel" => set_level(server, &session, &req).await,
        "resources/list"
        | "resources/templates/list"
        | "resources/read"
        | "prompts/list"
        | "prompts/get"
        | "completion/complete" => catalog_call(server, &req, false),
        "resources/subscribe" | "resources/unsubscribe" => subscribe(server, &session, &req),
        "tasks/get" if tasks => tasks_get(server, peer, &session, &req).await,
        "tasks/result" if tasks => tasks_result(server, peer, &session, &req, out).await,
        "tasks/list" if tasks => tasks_list(server, peer, &session, &req).await,
        "tasks/cancel" if tasks => tasks_cancel(server, peer, &session, &req).await,
        m if m.starts_with("tasks/") => Err(ErrorObject::new(
            error_codes::METHOD_NOT_FOUND,
            format!(
                "Method not found: {m} (tasks need protocol version {ERA}; this session uses {})",
                session.protocol_version()
            ),
        )),
        m => Err(ErrorObject::method_not_found(m)),
    }
}

fn tools_list(server: &Server, session: &Session, req: &Request) -> Result<Value, ErrorObject> {
    let params = params_object(req)?;
    let start = match params.get("cursor") {
        None | Some(Value::Null) => 0,
        Some(Value::String(c)) => c
            .strip_prefix("t")
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|&n| n <= server.tools.all().len())
            .ok_or_else(|| {
                ErrorObject::invalid_params(format!("tools/list: invalid cursor {c:?}"))
            })?,
        Some(_) => {
            return Err(ErrorObject::invalid_params(
                "tools/list: cursor must be a string",
            ))
        }
    };
    let page = server.config.page_size.max(1);
    let all = server.tools.all();
    let end = (start + page).min(all.len());
    let tools: Vec<Value> = all[start..end]
        .iter()
        .map(|t| t.describe(session.has_tasks()))
        .collect();
    let mut result = json!({"tools": tools});
    if end < all.len() {
        result["nextCursor"] = json!(format!("t{end}"));
    }
    Ok(result)
}

async fn set_level(
    server: &Server,
    session: &Session,
    req: &Request,
) -> Result<Value, ErrorObject> {
    let params = params_object(req)?;
    let level = params
        .get("level")
        .and_then(Value::as_str)
        .ok_or_else(|| ErrorObject::invalid_params("logging/setLevel: missing string \"level\""))?;
    let level = LogLevel::parse(level).ok_or_else(|| {
        ErrorObject::invalid_params(format!(
            "logging/setLevel: unknown level {level:?} (use debug, info, notice, warning, error, critical, alert or emergency)"
        ))
    })?;
    server
        .sessions
        .set_log_level(session, level)
        .await
        .map_err(internal)?;
    Ok(json!({}))
}

/// The tool a `tools/call` names and its arguments (an object; absent means `{}`), for both eras.
pub(crate) fn tool_and_arguments<'a>(
    server: &'a Server,
    params: &Map<String, Value>,
) -> Result<(&'a crate::tool::RegisteredTool, Value), ErrorObject> {
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| ErrorObject::invalid_params("tools/call: missing string \"name\""))?;
    let Some(tool) = server.tools.get(name) else {
        return Err(ErrorObject::invalid_params(format!(
            "Unknown tool: {name} (known: {})",
            server.tools.names().join(", ")
        )));
    };
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(v @ Value::Object(_)) => v.clone(),
        Some(_) => {
            return Err(ErrorObject::invalid_params(
                "tools/call: \"arguments\" must be an object",
            ))
        }
    };
    Ok((tool, arguments))
}

/// The idempotency key of a call: our own `_meta` key, or `_meta.taskId` as some guides write it.
fn idempotency_key(meta: Option<&Value>) -> Result<Option<String>, ErrorObject> {
    let Some(meta) = meta else { return Ok(None) };
    for key in [meta::IDEMPOTENCY_KEY, meta::LEGACY_TASK_ID_KEY] {
        match meta.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if !s.is_empty() && s.len() <= 256 => {
                return Ok(Some(s.clone()))
            }
            Some(_) => {
                return Err(ErrorObject::invalid_params(format!(
                    "tools/call: _meta[{key:?}] must be a non-empty string of at most 256 characters"
                )));
            }
        }
    }
    Ok(None)
}

async fn tools_call(
    server: &Arc<Server>,
    peer: &Peer,
    session: &Arc<Session>,
    req: &Request,
    out: StreamSender,
    cancel: CancellationToken,
) -> Result<Value, ErrorObject> {
    let params = params_object(req)?;
    let (tool, arguments) = tool_and_arguments(server, &params)?;
    let name = tool.tool.name.as_str();
    let tasks = session.has_tasks();
    // Sessions without tasks ignore task metadata entirely (they process the call normally).
    let task_meta = if tasks { params.get("task") } else { None };
    let as_task = match task_meta {
        None | Some(Value::Null) => false,
        Some(Value::Object(_)) => true,
        Some(_) => {
            return Err(ErrorObject::invalid_params(
                "tools/call: \"task\" must be an object",
            ))
        }
    };
    let support = tool.tool.task_support;
    if as_task && support == TaskSupport::Forbidden {
        return Err(ErrorObject::new(
            error_codes::METHOD_NOT_FOUND,
            format!("Tool {name} does not support task-augmented execution (execution.taskSupport is \"forbidden\"); call it without \"task\""),
        ));
    }
    if !as_task && tasks && support == TaskSupport::Required {
        return Err(ErrorObject::new(
            error_codes::METHOD_NOT_FOUND,
            format!("Tool {name} requires task-augmented execution (execution.taskSupport is \"required\"); add \"task\": {{}} to the call"),
        ));
    }
    // Input validation errors are tool errors the model can correct (SEP-1303), not protocol errors.
    let invalid = tool.validate(&arguments).err().map(|problems| {
        json!({
            "content": [{"type": "text", "text": format!("Invalid arguments for tool {name}: {problems}")}],
            "isError": true,
        })
    });
    let req_meta = params.get("_meta").cloned();
    if !as_task {
        if let Some(result) = invalid {
            return Ok(result);
        }
        return run_inline(
            server,
            session,
            tool.tool.handler.clone(),
            arguments,
            req_meta,
            out,
            cancel,
        )
        .await;
    }
    // A tool may do a first step inside the call (asking for input on this call's stream) before
    // its task is created; that step's result becomes the task's arguments.
    let arguments = match (&tool.tool.prepare, &invalid) {
        (Some(prepare), None) => {
            let prepared = run_inline(
                server,
                session,
                prepare.clone(),
                arguments,
                req_meta.clone(),
                out.clone(),
                cancel.clone(),
            )
            .await?;
            if prepared.get("isError") == Some(&Value::Bool(true)) {
                return Ok(prepared);
            }
            prepared
        }
        _ => arguments,
    };
    let requested_ttl = match task_meta.and_then(|t| t.get("ttl")) {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_f64() {
            Some(ms) if ms.is_finite() && ms >= 0.0 => Some(ms as u64),
            _ => {
                return Err(ErrorObject::invalid_params(
                    "tools/call: task.ttl must be a non-negative number of milliseconds",
                ));
            }
        },
    };
    // Anonymous callers share one principal, so their keys are scoped to the session: one client can
    // neither collide with nor discover another's tasks through a guessable key.
    let client_key = idempotency_key(req_meta.as_ref())?;
    let scoped_key = client_key.clone().map(|k| {
        if peer.principal == ANONYMOUS {
            format!("{}:{k}", session.id)
        } else {
            k
        }
    });
    let mut stored_meta = Map::new();
    // The task may ask for input long after this request: keep what the client said it can answer.
    stored_meta.insert(
        "clientCapabilities".into(),
        session.data().client_capabilities,
    );
    if let Some(token) = req_meta.as_ref().and_then(|m| m.get(meta::PROGRESS_TOKEN)) {
        if token.is_string() || token.is_i64() || token.is_u64() {
            stored_meta.insert(meta::PROGRESS_TOKEN.into(), token.clone());
        }
    }
    let new = NewTask {
        tool: name.to_string(),
        arguments,
        owner: peer.principal.clone(),
        session: Some(session.id.clone()),
        era: ERA.to_string(),
        request_meta: Value::Object(stored_meta),
        requested_ttl_ms: requested_ttl,
        idempotency_key: scoped_key,
        active_limit: Some(ActiveLimit {
            max: peer.limits.max_running_tasks,
            owner: peer.principal.clone(),
            // Anonymous callers share one principal: count per session.
            session: (peer.principal == ANONYMOUS).then(|| session.id.clone()),
        }),
    };
    // A caller that asked for a task gets one, even when the arguments are wrong: it finishes at once
    // with the validation message as its (failed) result.
    let rec = server
        .submit_task(new, invalid, client_key.as_deref())
        .await?;
    let mut result_meta = Map::new();
    result_meta.insert(
        meta::MODEL_IMMEDIATE_RESPONSE.into(),
        json!(format!(
            "Started {name} as task {}. It runs in the background; its result will follow.",
            rec.id
        )),
    );
    Ok(json!({"task": render_2025::task(&rec), "_meta": result_meta}))
}

/// Runs a handler within the request (no task): progress goes to the request's own stream.
async fn run_inline(
    server: &Arc<Server>,
    session: &Arc<Session>,
    handler: Arc<dyn mcp_tasks_engine::TaskHandler>,
    arguments: Value,
    req_meta: Option<Value>,
    out: StreamSender,
    cancel: CancellationToken,
) -> Result<Value, ErrorObject> {
    let token = req_meta
        .as_ref()
        .and_then(|m| m.get(meta::PROGRESS_TOKEN))
        .cloned();
    let sink = Arc::new(InlineSink {
        server: server.clone(),
        out,
        token,
        session: session.clone(),
        last: std::sync::Mutex::new(None),
    });
    let ctx = TaskContext::new(None, cancel, sink);
    let _ = server;
    let mut work = crate::AbortOnDrop(tokio::spawn(
        async move { handler.run(ctx, arguments).await },
    ));
    match (&mut work.0).await {
        Ok(Outcome::Result { value, .. }) => Ok(value),
        Ok(Outcome::Error {
            code,
            message,
            data,
        }) => Err(ErrorObject {
            code,
            message,
            data,
        }),
        Err(e) if e.is_panic() => Err(ErrorObject::internal("the tool panicked")),
        Err(_) => Err(ErrorObject::internal("the tool was stopped")),
    }
}

struct InlineSink {
    server: Arc<Server>,
    out: StreamSender,
    token: Option<Value>,
    session: Arc<Session>,
    last: std::sync::Mutex<Option<f64>>,
}

#[async_trait]
impl ContextSink for InlineSink {
    async fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        let Some(token) = &self.token else { return };
        {
            let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|l| progress <= l) {
                return; // progress must increase with each notification
            }
            *last = Some(progress);
        }
        let p = progress_params(token, progress, total, message);
        let _ = self
            .out
            .send(Message::notification("notifications/progress", p))
            .await;
    }
    async fn request_input(
        &self,
        method: &str,
        params: Value,
    ) -> Result<InputResponse, InputError> {
        check_capability(&self.session.data().client_capabilities, method, &params)
            .map_err(InputError::Unsupported)?;
        let key = mcp_tasks_engine::random_id();
        let (tx, rx) = tokio::sync::oneshot::channel();
        // Bound to the session that made the call: only it can answer.
        self.server
            .inline_inputs
            .insert(key.clone(), (self.session.id.clone(), tx));
        // Removes the pending entry however this ends (answered, cancelled, stream closed).
        struct Forget<'a>(&'a Server, String);
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                self.0.inline_inputs.remove(&self.1);
            }
        }
        let _forget = Forget(&self.server, key.clone());
        let request = Message::Request(Request {
            id: RequestId::String(key),
            method: method.to_string(),
            params: Some(params),
        });
        if self.out.send(request).await.is_err() {
            return Err(InputError::Cancelled);
        }
        rx.await.map_err(|_| InputError::Cancelled)
    }
    async fn status(&self, _message: String) {}
    async fn log(&self, level: LogLevel, logger: Option<String>, data: Value) {
        if level < self.session.log_level() {
            return;
        }
        let p = log_params(level, logger, data);
        let _ = self
            .out
            .send(Message::notification("notifications/message", p))
            .await;
    }
}

fn task_id_param(req: &Request) -> Result<String, ErrorObject> {
    let params = params_object(req)?;
    // The taskId param is the source of truth; related-task metadata and a stray `task` are ignored.
    match params.get("taskId") {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(ErrorObject::invalid_params(format!(
            "{}: missing string \"taskId\"",
            req.method
        ))),
    }
}

fn not_found() -> ErrorObject {
    ErrorObject::invalid_params("Failed to retrieve task: Task not found")
}

/// Whether `peer` may see a task owned by `owner` in `session`. Anonymous callers reach tasks by their
/// unguessable id from any session (so a reconnecting client finds its task); authenticated callers
/// only their own.
fn visible(peer: &Peer, owner: &str) -> bool {
    owner == peer.principal
}

/// Finds a task the caller may see; anything else answers exactly like a missing task.
async fn find(server: &Server, peer: &Peer, req: &Request) -> Result<TaskRecord, ErrorObject> {
    let id = task_id_param(req)?;
    match server.engine.get(&id).await.map_err(internal)? {
        Lookup::Found(t) if visible(peer, &t.owner) && t.era == ERA => Ok(t),
        Lookup::Expired { owner, .. } if visible(peer, &owner) => Err(ErrorObject::invalid_params(
            "Failed to retrieve task: Task has expired",
        )),
        _ => {
            // Many of these from one principal look like someone guessing ids (R70).
            tracing::info!(target: "mcp_tasks::audit", principal = %peer.principal, method = %req.method, "task lookup failed");
            Err(not_found())
        }
    }
}

async fn tasks_get(
    server: &Server,
    peer: &Peer,
    _s: &Session,
    req: &Request,
) -> Result<Value, ErrorObject> {
    let t = find(server, peer, req).await?;
    tracing::debug!(target: "mcp_tasks::audit", task = %t.id, principal = %peer.principal, "task retrieved");
    Ok(render_2025::task_object(&t))
}

async fn tasks_result(
    server: &Arc<Server>,
    peer: &Peer,
    session: &Session,
    req: &Request,
    out: StreamSender,
) -> Result<Value, ErrorObject> {
    let t = find(server, peer, req).await?;
    let t = if t.status.is_terminal() {
        t
    } else {
        wait_streaming(server, session, &t.id, &out).await?
    };
    tracing::info!(target: "mcp_tasks::audit", task = %t.id, principal = %peer.principal, "task result retrieved");
    render_2025::payload(&t)
}

/// Waits for a task to finish. While it waits, this request's stream is where the router sends the
/// task's notifications (in order, on exactly one stream); the reply follows the last of them.
async fn wait_streaming(
    server: &Arc<Server>,
    session: &Session,
    id: &str,
    out: &StreamSender,
) -> Result<TaskRecord, ErrorObject> {
    let owner = server.streams.register_task(&session.id, id, out.clone());
    // Input requests the task is waiting on go out on this stream, unless they already went out on a
    // stream that is still open (the client would answer them twice).
    for input in server.engine.pending_inputs(id).await.map_err(internal)? {
        let msg = input_request_message(id, &input);
        // Non-blocking send under the claim: the stream is fresh, so it has room.
        server.claim_input(&input.key, &session.id, id, |_| {
            out.try_send(msg).is_ok().then(|| owner.id())
        });
    }
    let done = tokio::select! {
        r = server.engine.wait_terminal(id) => r,
        _ = out.closed() => return Err(ErrorObject::internal("client went away")),
    };
    let t = match done {
        Ok(t) => t,
        Err(EngineError::Expired) => {
            return Err(ErrorObject::invalid_params(
                "Failed to retrieve task: Task has expired",
            ))
        }
        Err(EngineError::NotFound) => return Err(not_found()),
        Err(e) => return Err(ErrorObject::internal(e.to_string())),
    };
    // Let the router put the terminal status on this stream before the reply. It may have gone out
    // before we registered, or have been dropped under load: then don't wait long.
    let _ =
        tokio::time::timeout(std::time::Duration::from_millis(500), owner.terminal_sent()).await;
    Ok(t)
}

async fn tasks_list(
    server: &Server,
    peer: &Peer,
    session: &Session,
    req: &Request,
) -> Result<Value, ErrorObject> {
    let params = params_object(req)?;
    let cursor = match params.get("cursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) => Some(c.clone()),
        Some(_) => {
            return Err(ErrorObject::invalid_params(
                "tasks/list: cursor must be a string",
            ))
        }
    };
    // Anonymous callers are told apart only by session; authenticated ones see all their sessions' tasks.
    let session_filter = (peer.principal == ANONYMOUS).then(|| session.id.clone());
    let q = ListQuery {
        owner: peer.principal.clone(),
        session: session_filter,
        cursor,
        limit: server.config.page_size.max(1),
    };
    let page = server
        .engine
        .store()
        .list(&q)
        .await
        .map_err(internal)?
        .map_err(|_| ErrorObject::invalid_params("tasks/list: invalid cursor"))?;
    let tasks: Vec<Value> = page
        .tasks
        .iter()
        .filter(|t| t.era == ERA)
        .map(render_2025::task_object)
        .collect();
    let mut result = json!({"tasks": tasks});
    if let Some(c) = page.next_cursor {
        result["nextCursor"] = json!(c);
    }
    Ok(result)
}

async fn tasks_cancel(
    server: &Server,
    peer: &Peer,
    _s: &Session,
    req: &Request,
) -> Result<Value, ErrorObject> {
    let t = find(server, peer, req).await?;
    match server.engine.cancel(&t.id, None).await {
        Ok(rec) => Ok(render_2025::task_object(&rec)),
        Err(EngineError::AlreadyTerminal(cur)) => Err(ErrorObject::invalid_params(format!(
            "Cannot cancel task: already in terminal status '{}'",
            render_2025::status(&cur)
        ))),
        Err(EngineError::NotFound) => Err(not_found()),
        Err(e) => Err(ErrorObject::internal(e.to_string())),
    }
}

/// The notifications this era sends for a task event, for a session (if cached here).
pub(crate) fn notifications_for(event: &TaskEvent, session: Option<&Session>) -> Vec<Message> {
    let task = event.task();
    if task.era != ERA {
        return Vec::new();
    }
    match event {
        TaskEvent::Created(_) => Vec::new(),
        TaskEvent::Changed(t) => {
            vec![Message::notification(
                "notifications/tasks/status",
                render_2025::task_object(t),
            )]
        }
        TaskEvent::Progress { task, message } => {
            // Progress uses the original request's token and stops once the task is terminal.
            let Some(token) = task.request_meta.get(meta::PROGRESS_TOKEN) else {
                return Vec::new();
            };
            if task.status.is_terminal() || task.status == TaskStatus::Cancelled {
                return Vec::new();
            }
            let mut p = json!({
                "progressToken": token,
                "progress": task.progress.unwrap_or(0.0),
                "_meta": render_2025::related_meta(&task.id),
            });
            if let Some(t) = task.progress_total {
                p["total"] = json!(t);
            }
            if let Some(m) = message {
                p["message"] = json!(m);
            }
            vec![Message::notification("notifications/progress", p)]
        }
        TaskEvent::InputRequested { task, input } => vec![input_request_message(&task.id, input)],
        TaskEvent::InputAnswered { .. } => Vec::new(),
        TaskEvent::Log {
            task,
            level,
            logger,
            data,
        } => {
            if session.is_some_and(|s| *level < s.log_level()) {
                return Vec::new();
            }
            let mut p = log_params(*level, logger.clone(), data.clone());
            p["_meta"] = Value::Object(render_2025::related_meta(&task.id));
            vec![Message::notification("notifications/message", p)]
        }
    }
}

/// The JSON-RPC request that carries a task's input request to the client: its id is the request's key,
/// and it is tagged with the related task.
pub(crate) fn input_request_message(task_id: &str, input: &InputRecord) -> Message {
    let mut params = input.params.clone();
    if let Value::Object(p) = &mut params {
        let meta = p.entry("_meta").or_insert_with(|| json!({}));
        if let Value::Object(meta) = meta {
            meta.extend(render_2025::related_meta(task_id));
        }
    }
    Message::Request(Request {
        id: RequestId::String(input.key.clone()),
        method: input.method.clone(),
        params: Some(params),
    })
}

/// Whether a client with `caps` can take request `method` with `params`.
pub(crate) fn check_capability(caps: &Value, method: &str, params: &Value) -> Result<(), String> {
    let present = |v: Option<&Value>| v.is_some_and(|v| !v.is_null() && v != &Value::Bool(false));
    match method {
        "elicitation/create" => {
            let e = caps.get("elicitation");
            if !present(e) {
                return Err("the client did not declare the elicitation capability".into());
            }
            let e = e.unwrap_or(&Value::Null);
            let mode = params.get("mode").and_then(Value::as_str).unwrap_or("form");
            // `elicitation: {}` (no modes listed) means form support, as before modes existed.
            let modes_listed = present(e.get("form")) || present(e.get("url"));
            match mode {
                "url" if !present(e.get("url")) => {
                    Err("the client did not declare URL-mode elicitation".into())
                }
                "form" if modes_listed && !present(e.get("form")) => {
                    Err("the client did not declare form-mode elicitation".into())
                }
                _ => Ok(()),
            }
        }
        "sampling/createMessage" => {
            let s = caps.get("sampling");
            if !present(s) {
                return Err("the client did not declare the sampling capability".into());
            }
            if params.get("tools").is_some() && !present(s.and_then(|s| s.get("tools"))) {
                return Err("the client did not declare sampling with tools".into());
            }
            Ok(())
        }
        "roots/list" if !present(caps.get("roots")) => {
            Err("the client did not declare the roots capability".into())
        }
        _ => Ok(()),
    }
}

/// The engine's check before a task sends an input request: the capabilities its client declared.
pub(crate) fn input_guard() -> mcp_tasks_engine::InputGuard {
    Arc::new(|task: &TaskRecord, method: &str, params: &Value| {
        let caps = task
            .request_meta
            .get("clientCapabilities")
            .cloned()
            .unwrap_or_else(|| json!({}));
        check_capability(&caps, method, params)
    })
}

/// A response from the client to one of our requests: route it to the task (or plain call) that asked.
pub(crate) async fn client_response(
    server: &Server,
    peer: &Peer,
    msg: Message,
) -> Result<(), ErrorObject> {
    let (id, response) = match msg {
        Message::Response(r) => (r.id, InputResponse::Result { value: r.result }),
        Message::Error(e) => match e.id {
            Some(id) => (
                id,
                InputResponse::Error {
                    code: e.error.code,
                    message: e.error.message,
                    data: e.error.data,
                },
            ),
            None => {
                return Err(ErrorObject::invalid_request(
                    "an error response needs the id of the request it answers",
                ))
            }
        },
        _ => return Ok(()),
    };
    let RequestId::String(key) = id else {
        return Err(unknown_request(&id));
    };
    let caller = peer.session.as_ref().map(|s| s.id.as_str()).unwrap_or("");
    if let Some((_, (_, tx))) = server
        .inline_inputs
        .remove_if(&key, |_, (session, _)| session == caller)
    {
        let _ = tx.send(response);
        return Ok(());
    }
    // The answer must come from the task's owner; anything else is indistinguishable from unknown.
    let input = server
        .engine
        .store()
        .get_input(&key)
        .await
        .map_err(internal)?;
    let Some(input) = input else {
        return Err(unknown_request(&RequestId::String(key)));
    };
    match server.engine.get(&input.task_id).await.map_err(internal)? {
        Lookup::Found(t) if visible(peer, &t.owner) => {}
        _ => return Err(unknown_request(&RequestId::String(key))),
    }
    if let (InputResponse::Result { value }, "elicitation/create") =
        (&response, input.method.as_str())
    {
        crate::tool::parse_elicit_result(value)
            .map_err(|e| ErrorObject::invalid_params(format!("answer to {key:?} rejected: {e}")))?;
    }
    match server.engine.answer_input(&key, response).await {
        Ok((task, _)) => {
            tracing::info!(target: "mcp_tasks::audit", task = %task.id, principal = %peer.principal, request = %key, "input answered");
            Ok(())
        }
        Err(AnswerError::Unknown) => Err(unknown_request(&RequestId::String(key))),
        Err(AnswerError::AlreadyAnswered) => Err(ErrorObject::invalid_params(format!(
            "request {key:?} was already answered; the first answer stands"
        ))),
        Err(AnswerError::TaskEnded(status)) => Err(ErrorObject::invalid_params(format!(
            "request {key:?} belongs to a task that is already {status}; the answer was not used"
        ))),
        Err(AnswerError::Store(e)) => Err(internal(e)),
    }
}

fn unknown_request(id: &RequestId) -> ErrorObject {
    ErrorObject::invalid_params(format!("no pending request of this server has id {id}"))
}

/// `resources/*`, `prompts/*` and `completion/complete`, shared by both wire eras. `stateless` picks the
/// 2026-07-28 "resource not found" code (-32602) over the older -32002.
pub(crate) fn catalog_call(
    server: &Server,
    req: &Request,
    stateless: bool,
) -> Result<Value, ErrorObject> {
    use crate::catalog::CatalogError;
    let params = params_object(req)?;
    let cursor = match params.get("cursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) => Some(c.as_str()),
        Some(_) => {
            return Err(ErrorObject::invalid_params(format!(
                "{}: cursor must be a string",
                req.method
            )))
        }
    };
    let size = server.config.page_size;
    let c = &server.catalog;
    let listed = |r: Result<Value, String>| {
        r.map_err(|e| ErrorObject::invalid_params(format!("{}: {e}", req.method)))
    };
    let failed = |e: CatalogError| match e {
        CatalogError::NotFound(m) if req.method == "resources/read" => {
            let uri = params.get("uri").cloned().unwrap_or(Value::Null);
            // 2026-07-28 (SEP-2164) uses invalid params; earlier revisions -32002.
            let code = if stateless { -32602 } else { -32002 };
            ErrorObject::new(code, m).with_data(json!({"uri": uri}))
        }
        CatalogError::NotFound(m) | CatalogError::Invalid(m) => ErrorObject::invalid_params(m),
    };
    match req.method.as_str() {
        "resources/list" => listed(c.list_resources(cursor, size)),
        "resources/templates/list" => listed(c.list_templates(cursor, size)),
        "resources/read" => {
            let uri = params.get("uri").and_then(Value::as_str).ok_or_else(|| {
                ErrorObject::invalid_params("resources/read: missing string \"uri\"")
            })?;
            c.read(uri).map_err(failed)
        }
        "prompts/list" => listed(c.list_prompts(cursor, size)),
        "prompts/get" => {
            let name = params.get("name").and_then(Value::as_str).ok_or_else(|| {
                ErrorObject::invalid_params("prompts/get: missing string \"name\"")
            })?;
            let args = params
                .get("arguments")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            c.get_prompt(name, &args).map_err(failed)
        }
        "completion/complete" => {
            let reference = params.get("ref").cloned().unwrap_or(Value::Null);
            let arg = params.get("argument").cloned().unwrap_or(Value::Null);
            let name = arg.get("name").and_then(Value::as_str).ok_or_else(|| {
                ErrorObject::invalid_params("completion/complete: missing argument.name")
            })?;
            let value = arg.get("value").and_then(Value::as_str).unwrap_or("");
            c.complete(&reference, name, value).map_err(failed)
        }
        m => Err(ErrorObject::method_not_found(m)),
    }
}

fn subscribe(server: &Server, session: &Session, req: &Request) -> Result<Value, ErrorObject> {
    let params = params_object(req)?;
    let uri = params.get("uri").and_then(Value::as_str).ok_or_else(|| {
        ErrorObject::invalid_params(format!("{}: missing string \"uri\"", req.method))
    })?;
    if !server.catalog.exists(uri) {
        return Err(
            ErrorObject::new(-32002, format!("Resource not found: {uri}"))
                .with_data(json!({"uri": uri})),
        );
    }
    let mut subs = server.subscriptions.entry(session.id.clone()).or_default();
    if req.method == "resources/subscribe" {
        subs.insert(uri.to_string());
    } else {
        subs.remove(uri);
    }
    Ok(json!({}))
}

/// The input-asking handler of the prompt a `prompts/get` names, if it has one.
pub(crate) fn prompt_handler(
    server: &Server,
    req: &Request,
) -> Option<Arc<dyn mcp_tasks_engine::TaskHandler>> {
    let name = req.params.as_ref()?.get("name")?.as_str()?;
    server.catalog.prompt(name)?.handler.clone()
}
