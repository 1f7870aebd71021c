//! The session-based wire (MCP 2025-11-25, and 2025-06-18 / 2025-03-26 without tasks): parses each
//! method's params, calls the core, renders the result; and the notifications this wire sends for
//! task events.

use async_trait::async_trait;
use mcp_tasks_engine::{
    ContextSink, InputError, InputRecord, InputResponse, LogLevel, TaskContext, TaskEvent,
    TaskHandler, TaskRecord,
};
use mcp_tasks_protocol::jsonrpc::{ErrorObject, Message, Request, RequestId};
use mcp_tasks_protocol::mcp_2025::TaskSupport;
use mcp_tasks_protocol::{error_codes, meta, version};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use super::messages::{self, params_object};
use super::render_2025;
use crate::core::budget::BudgetedCall;
use crate::core::streams::StreamSender;
use crate::core::{
    calls, internal, tasks::Cancel, Era, Failure, HandlerRun, Peer, Server, TaskStart,
    ASYNC_TOOLS_LABEL,
};
use crate::session::{Session, SessionData};

/// The era label stored on tasks created through this wire.
pub(crate) const ERA: &str = version::V2025_11_25;

/// Whether a task of era `label` is one this wire shows (its own, and Asynchronous Tool Execution
/// operations, which are session tasks too).
pub(crate) fn shows(label: &str) -> bool {
    label == ERA || label == ASYNC_TOOLS_LABEL
}

/// The capability a client declares at `initialize` to opt into Asynchronous Tool Execution.
pub(crate) const ASYNC_TOOLS_CAPABILITY: &str = "asyncToolExecution";

/// Answers `initialize`: negotiates the version and creates the session.
pub(crate) async fn initialize(
    server: &Server,
    peer: &Peer,
    params: Option<&Value>,
) -> Result<(Arc<Session>, Value), Failure> {
    let principal = &peer.principal;
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
        return Err(
            ErrorObject::invalid_params("initialize: \"capabilities\" must be an object").into(),
        );
    }
    let client_info = params
        .get("clientInfo")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let async_tools = capabilities
        .get("experimental")
        .and_then(|e| e.get(ASYNC_TOOLS_CAPABILITY))
        .is_some_and(|v| !v.is_null());
    let negotiated = version::negotiate(requested);
    let data = SessionData {
        protocol_version: negotiated.to_string(),
        client_capabilities: capabilities,
        client_info,
        log_level: LogLevel::Info,
        async_tools,
    };
    let budgeted = server.session_budget(peer)?;
    let session = server
        .sessions()
        .create(&principal.name, data, budgeted)
        .await
        .map_err(|e| server.too_many_sessions(&e).unwrap_or_else(|| internal(e)))?;
    let mut caps = json!({"tools": {"listChanged": server.tools().can_change()}, "logging": {}});
    if let Value::Object(c) = &mut caps {
        c.extend(server.catalog_capabilities());
    }
    if version::has_session_tasks(negotiated) {
        caps["tasks"] = json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}});
    }
    caps["experimental"] = json!({
        meta::IDEMPOTENCY_CAPABILITY: {},
        meta::SIGNALS_CAPABILITY: {},
        meta::WEBHOOKS_CAPABILITY: crate::webhooks::capability(),
    });
    if async_tools {
        caps["experimental"][ASYNC_TOOLS_CAPABILITY] = json!({});
    }
    // MCP Events: the top-level key the AI SDK reads on this wire (SEP-3415 defines the
    // extension on 2026-07-28 only).
    caps["events"] = json!({});
    let mut result = json!({
        "protocolVersion": negotiated,
        "capabilities": caps,
        "serverInfo": {"name": server.config().name, "version": server.config().version},
    });
    if let Some(i) = &server.config().instructions {
        result["instructions"] = json!(i);
    }
    tracing::info!(session = %session.id, principal = %principal.name, version = negotiated, async_tools, "session initialized");
    Ok((session, result))
}

/// The session a request needs, or the error a request before `initialize` gets.
pub(crate) fn session_of<'a>(peer: &'a Peer, method: &str) -> Result<&'a Arc<Session>, Failure> {
    peer.session.as_ref().ok_or_else(|| {
        ErrorObject::invalid_request(format!("{method} before initialize: send initialize first"))
            .into()
    })
}

/// Routes one request of an initialized session (or `ping` before it).
pub(crate) async fn dispatch(
    server: &Arc<Server>,
    peer: &Peer,
    mut req: Request,
    out: StreamSender,
    cancel: CancellationToken,
) -> Result<Value, Failure> {
    if req.method == "ping" {
        return Ok(json!({}));
    }
    let session = session_of(peer, &req.method)?;
    let params = params_object(&req.method, req.params.take())?;
    let tasks = session.has_tasks();
    let manages_tasks = req.method.starts_with("tasks/")
        || (req.method == "tools/call" && params.get("task").is_some());
    if tasks && manages_tasks {
        server.check_rate(peer, &req.method)?;
    }
    // A prompt that asks for input is built like a plain tool call: inline, asking on this stream.
    if let Some(handler) = (req.method == "prompts/get")
        .then(|| server.prompt_handler(&params))
        .flatten()
    {
        let args = params
            .get("arguments")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let meta = params.get("_meta").cloned();
        return run_inline(server, session, handler, args, meta, out, cancel).await;
    }
    match req.method.as_str() {
        "initialize" => {
            Err(ErrorObject::invalid_request("this session is already initialized").into())
        }
        "tools/list" => tools_list(server, session, &params, false),
        "tools/call" => tools_call(server, peer, session, &params, out, cancel).await,
        "logging/setLevel" => set_level(server, session, &params).await,
        m if crate::core::CATALOG_METHODS.contains(&m) => {
            server.catalog_request(m, &params, Era::Session).await
        }
        "resources/subscribe" | "resources/unsubscribe" => {
            let uri = params.get("uri").and_then(Value::as_str).ok_or_else(|| {
                ErrorObject::invalid_params(format!("{}: missing string \"uri\"", req.method))
            })?;
            server.subscribe(&session.id, uri, req.method == "resources/subscribe")?;
            Ok(json!({}))
        }
        m if super::events::METHODS.contains(&m) => {
            super::events::serve(server, peer, m, &req.id, &params, &out).await
        }
        "tasks/get" if tasks => {
            let t = find(server, peer, &params, &req.method).await?;
            tracing::debug!(target: "mcp_tasks::audit", task = %t.id, principal = %peer.name(), "task retrieved");
            Ok(render_2025::task_object(&t))
        }
        "tasks/result" if tasks => tasks_result(server, peer, session, &params, out).await,
        meta::SIGNAL_METHOD if tasks => {
            let t = find(server, peer, &params, &req.method).await?;
            super::signals::send(server, peer, &t, &params).await
        }
        "tasks/list" if tasks => tasks_list(server, peer, &params).await,
        "tasks/cancel" if tasks => {
            let t = find(server, peer, &params, &req.method).await?;
            match server.cancel_task(&t).await.map_err(|u| u.task_error())? {
                Cancel::Done(rec) => Ok(render_2025::task_object(&rec)),
                Cancel::AlreadyFinished(cur) => Err(ErrorObject::invalid_params(format!(
                    "Cannot cancel task: already in terminal status '{}'",
                    render_2025::status(&cur)
                ))
                .into()),
            }
        }
        m @ ("tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel") => {
            Err(ErrorObject::new(
                error_codes::METHOD_NOT_FOUND,
                format!(
                "Method not found: {m} (tasks need protocol version {ERA}; this session uses {})",
                session.protocol_version()
            ),
            )
            .into())
        }
        m => Err(ErrorObject::method_not_found(m).into()),
    }
}

/// `tools/list` of a session; `invocation_modes` adds the Asynchronous Tool Execution field.
pub(crate) fn tools_list(
    server: &Server,
    session: &Session,
    params: &Map<String, Value>,
    invocation_modes: bool,
) -> Result<Value, Failure> {
    let speaks_tasks = speaks_tasks(session);
    let (mut tools, next) = messages::tools_page(server, params, |t| {
        let mut d = t.describe(session.has_tasks());
        if invocation_modes {
            super::async_tools::add_invocation_mode(&mut d, t.tool.task_support);
        }
        if !speaks_tasks {
            messages::for_plain_callers(server, t, &mut d);
        }
        d
    })?;
    if !speaks_tasks && next.is_none() {
        tools.extend(server.follow_up_tools());
    }
    let mut result = json!({"tools": tools});
    if let Some(c) = next {
        result["nextCursor"] = json!(c);
    }
    Ok(result)
}

async fn set_level(
    server: &Server,
    session: &Session,
    params: &Map<String, Value>,
) -> Result<Value, Failure> {
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
        .sessions()
        .set_log_level(session, level)
        .await
        .map_err(internal)?;
    Ok(json!({}))
}

/// The key of a task's `request_meta` naming the questions it asks as tasks the client runs.
pub(crate) const ASK_AS_TASK: &str = "askAsTask";

/// The wire metadata a session task keeps: the client's capabilities (the task may ask for input long
/// after this request), the progress token of the call, and which questions go to the client as
/// tasks it runs (2025-11-25 "both directions": the client declared `tasks.requests.…`). Not with
/// replicas: the server polls such a question on the client's stream, which may be another
/// replica's.
pub(crate) fn task_meta(server: &Server, session: &Session, req_meta: Option<&Value>) -> Value {
    let mut stored = Map::new();
    let data = session.data();
    if version::has_session_tasks(&data.protocol_version) && !server.shares_streams() {
        let caps = &data.client_capabilities;
        let mut ask = Map::new();
        if caps
            .pointer("/tasks/requests/elicitation/create")
            .is_some_and(Value::is_object)
        {
            ask.insert("elicitation/create".into(), json!(true));
        }
        if caps
            .pointer("/tasks/requests/sampling/createMessage")
            .is_some_and(Value::is_object)
        {
            ask.insert("sampling/createMessage".into(), json!(true));
        }
        if !ask.is_empty() {
            stored.insert(ASK_AS_TASK.into(), Value::Object(ask));
        }
    }
    stored.insert("clientCapabilities".into(), data.client_capabilities);
    if let Some(token) = req_meta.and_then(|m| m.get(meta::PROGRESS_TOKEN)) {
        if token.is_string() || token.is_i64() || token.is_u64() {
            stored.insert(meta::PROGRESS_TOKEN.into(), token.clone());
        }
    }
    Value::Object(stored)
}

/// A tool's prepare step, run inside the call before its task is created (it may ask for input on
/// this call's stream): the task's arguments, or the tool-error result to answer with instead.
/// Arguments that failed validation are kept as they are (the task records the failure).
#[allow(clippy::too_many_arguments)] // one call's context, passed through
pub(crate) async fn prepared_arguments(
    server: &Arc<Server>,
    session: &Arc<Session>,
    prepare: Option<&Arc<dyn TaskHandler>>,
    arguments: Value,
    invalid: bool,
    req_meta: Option<&Value>,
    out: &StreamSender,
    cancel: &CancellationToken,
) -> Result<Result<Value, Value>, Failure> {
    let Some(prepare) = prepare.filter(|_| !invalid) else {
        return Ok(Ok(arguments));
    };
    let prepared = run_inline(
        server,
        session,
        prepare.clone(),
        arguments,
        req_meta.cloned(),
        out.clone(),
        cancel.clone(),
    )
    .await?;
    if prepared.get("isError") == Some(&Value::Bool(true)) {
        return Ok(Err(prepared));
    }
    Ok(Ok(prepared))
}

/// Whether the session's client speaks tasks: a 2025-11-25 session whose client declared the
/// `tasks` capability. Others get plain calls (within a sync budget where one is set).
fn speaks_tasks(session: &Session) -> bool {
    session.has_tasks() && session.data().client_capabilities.get("tasks").is_some()
}

async fn tools_call(
    server: &Arc<Server>,
    peer: &Peer,
    session: &Arc<Session>,
    params: &Map<String, Value>,
    out: StreamSender,
    cancel: CancellationToken,
) -> Result<Value, Failure> {
    if let Some(r) = server.follow_up_call(peer, params).await {
        return r;
    }
    let (tool, arguments) = server.tool_call(peer, params)?;
    let name = tool.tool.name.as_str();
    let tasks = session.has_tasks();
    // Sessions without tasks ignore task metadata entirely (they process the call normally).
    let task_meta_param = if tasks { params.get("task") } else { None };
    let as_task = match task_meta_param {
        None | Some(Value::Null) => false,
        Some(Value::Object(_)) => true,
        Some(_) => {
            return Err(
                ErrorObject::invalid_params("tools/call: \"task\" must be an object").into(),
            )
        }
    };
    let support = tool.tool.task_support;
    // A client that asked for no task still gets one behind the scenes where a budget is set.
    let budget = if as_task {
        None
    } else {
        server.sync_budget(&tool)
    };
    if as_task && support == TaskSupport::Forbidden {
        return Err(ErrorObject::new(
            error_codes::METHOD_NOT_FOUND,
            format!("Tool {name} does not support task-augmented execution (execution.taskSupport is \"forbidden\"); call it without \"task\""),
        )
        .into());
    }
    if !as_task && tasks && support == TaskSupport::Required && budget.is_none() {
        return Err(ErrorObject::new(
            error_codes::METHOD_NOT_FOUND,
            format!("Tool {name} requires task-augmented execution (execution.taskSupport is \"required\"); add \"task\": {{}} to the call"),
        )
        .into());
    }
    let invalid = calls::invalid_arguments(&tool, &arguments);
    let req_meta = params.get("_meta");
    if !as_task && budget.is_none() {
        calls::no_webhook_without_task(
            req_meta,
            if tasks {
                "add \"task\": {} to the call"
            } else {
                "this session's protocol version has no tasks (2025-11-25 and later have)"
            },
        )?;
        if let Some(result) = invalid {
            return Ok(result);
        }
        let _slot = server.plain_call_slot(peer)?;
        return run_inline(
            server,
            session,
            tool.tool.handler.clone(),
            arguments,
            req_meta.cloned(),
            out,
            cancel,
        )
        .await;
    }
    let arguments = match prepared_arguments(
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
    if let Some(budget) = budget {
        let mut request_meta = task_meta(server, session, req_meta);
        if let Some(m) = request_meta.as_object_mut() {
            m.remove(meta::PROGRESS_TOKEN);
        }
        let call = BudgetedCall {
            tool: tool.clone(),
            arguments,
            invalid,
            era: ERA,
            request_meta,
            progress: messages::progress_note(req_meta),
            budget,
            announce_with: Some(notifications_for),
            speaks_tasks: speaks_tasks(session),
        };
        return server.call_within_budget(peer, call, &out, &cancel).await;
    }
    // Not used (the server suggests its own interval), but a value that is not one is refused as ttl
    // is: the client has a wrong idea of the field.
    match task_meta_param.and_then(|t| t.get("pollInterval")) {
        None | Some(Value::Null) => {}
        Some(v) if v.as_f64().is_some_and(|ms| ms.is_finite() && ms >= 0.0) => {}
        Some(_) => {
            return Err(ErrorObject::invalid_params(
                "tools/call: task.pollInterval must be a non-negative number of milliseconds",
            )
            .into());
        }
    }
    let ttl_ms = match task_meta_param.and_then(|t| t.get("ttl")) {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_f64() {
            Some(ms) if ms.is_finite() && ms >= 0.0 => Some(ms as u64),
            _ => {
                return Err(ErrorObject::invalid_params(
                    "tools/call: task.ttl must be a non-negative number of milliseconds",
                )
                .into());
            }
        },
    };
    let started = server
        .start_task(
            peer,
            TaskStart {
                tool: name.to_string(),
                arguments,
                era: ERA,
                request_meta: task_meta(server, session, req_meta),
                ttl_ms,
                idempotency_key: calls::idempotency_key(req_meta)?,
                key_label: "Idempotency key",
                retain_after_finish_ms: None,
                cancellable_by: None,
                invalid,
                webhook: req_meta.and_then(|m| m.get(meta::WEBHOOK)).cloned(),
            },
            &cancel,
        )
        .await?;
    let rec = started.record;
    let mut result_meta = Map::new();
    if let Some(w) = started.webhook {
        result_meta.insert(meta::WEBHOOK.into(), w);
    }
    result_meta.insert(
        meta::MODEL_IMMEDIATE_RESPONSE.into(),
        json!(format!(
            "Started {name} as task {}. It runs in the background; its result will follow.",
            rec.id
        )),
    );
    Ok(json!({"task": render_2025::task(&rec), "_meta": result_meta}))
}

/// Runs a handler within the request (no task): progress, logs and questions go to the request's
/// own stream.
pub(crate) async fn run_inline(
    server: &Arc<Server>,
    session: &Arc<Session>,
    handler: Arc<dyn TaskHandler>,
    arguments: Value,
    req_meta: Option<Value>,
    out: StreamSender,
    cancel: CancellationToken,
) -> Result<Value, Failure> {
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
    let mut run = HandlerRun::spawn(handler, ctx, arguments);
    calls::outcome_to_result(run.outcome().await)
}

/// Reports of a handler running inside a session request, sent on that request's stream.
struct InlineSink {
    server: Arc<Server>,
    out: StreamSender,
    token: Option<Value>,
    session: Arc<Session>,
    last: std::sync::Mutex<Option<f64>>,
}

#[async_trait]
impl ContextSink for InlineSink {
    /// A plain call keeps no journal: its steps all run and record nothing.
    fn journal(&self) -> Option<&dyn mcp_tasks_engine::StepJournal> {
        None
    }

    async fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        let Some(token) = &self.token else { return };
        {
            let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|l| progress <= l) {
                return; // progress must increase with each notification
            }
            *last = Some(progress);
        }
        let _ = self
            .out
            .send(messages::progress(
                token,
                progress,
                total,
                message.as_deref(),
                None,
            ))
            .await;
    }
    async fn request_input(
        &self,
        method: &str,
        params: Value,
    ) -> Result<InputResponse, InputError> {
        crate::core::check_capability(&self.session.data().client_capabilities, method, &params)
            .map_err(InputError::Unsupported)?;
        self.server
            .ask_on_stream(&self.session.id, &self.out, method, params)
            .await
    }
    async fn status(&self, _message: String) {}
    async fn log(&self, level: LogLevel, logger: Option<String>, data: Value) {
        if level < self.session.log_level() {
            return;
        }
        let _ = self
            .out
            .send(messages::log(level, logger.as_deref(), data, None))
            .await;
    }
}

/// A task of this wire the caller may see; anything else answers exactly like a missing task.
async fn find(
    server: &Server,
    peer: &Peer,
    params: &Map<String, Value>,
    method: &str,
) -> Result<TaskRecord, Failure> {
    messages::named_task(server, peer, params, method, shows).await
}

async fn tasks_result(
    server: &Arc<Server>,
    peer: &Peer,
    session: &Session,
    params: &Map<String, Value>,
    out: StreamSender,
) -> Result<Value, Failure> {
    let t = find(server, peer, params, "tasks/result").await?;
    let t = if t.status.is_terminal() {
        t
    } else {
        // A blocking result holds a stream (and a connection) until the task ends.
        let _held = server.stream_slot(peer, "tasks/result")?;
        wait_streaming(server, session, &t, &out).await?
    };
    tracing::info!(target: "mcp_tasks::audit", task = %t.id, principal = %peer.name(), "task result retrieved");
    render_2025::payload(&t).map_err(Failure::from)
}

/// How often a `tasks/result` waiting on another replica's task asks again for its questions that
/// another stream holds.
const RECLAIM_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Waits for a task to finish. While it waits, this request's stream is where the task's
/// notifications go (in order, on exactly one stream); the reply follows the last of them.
async fn wait_streaming(
    server: &Arc<Server>,
    session: &Session,
    task: &TaskRecord,
    out: &StreamSender,
) -> Result<TaskRecord, Failure> {
    let id = task.id.as_str();
    // The task's events from other replicas come here from before the stream is registered (a
    // 2026-07-28 task's are brought in only where something waits on it).
    let _watch = server.engine().notifier().watch(id);
    let owner = server.streams().register_task(&session.id, id, out.clone());
    // Input requests the task is waiting on go out on this stream, unless they already went out on a
    // stream that is still open (the client would answer them twice).
    for input in server.pending_inputs(id).await? {
        let msg = input_request_message(task, &input);
        // Non-blocking send under the claim: the stream is fresh, so it has room.
        server
            .claim_input_shared(&input.key, &session.id, id, owner.id(), || {
                out.try_send(msg).is_ok()
            })
            .await;
    }
    // With replicas, a question held by another replica's stream comes here once that stream is
    // gone (its release may have been lost): ask again now and then while waiting.
    let reclaim = async {
        if !server.shares_streams() {
            return std::future::pending::<()>().await;
        }
        loop {
            tokio::time::sleep(RECLAIM_EVERY).await;
            let Ok(pending) = server.pending_inputs(id).await else {
                continue;
            };
            for input in pending {
                let msg = input_request_message(task, &input);
                server
                    .claim_input_shared(&input.key, &session.id, id, owner.id(), || {
                        out.try_send(msg).is_ok()
                    })
                    .await;
            }
        }
    };
    let t = tokio::select! {
        t = server.wait_finished(id, out) => t,
        () = reclaim => unreachable!("the reclaim loop never ends"),
    }
    .map_err(|u| u.task_error())?;
    // Let the router put the terminal status on this stream before the reply. It may have gone out
    // before we registered, or have been dropped under load: then don't wait long.
    let _ =
        tokio::time::timeout(std::time::Duration::from_millis(500), owner.terminal_sent()).await;
    Ok(t)
}

async fn tasks_list(
    server: &Server,
    peer: &Peer,
    params: &Map<String, Value>,
) -> Result<Value, Failure> {
    let cursor = messages::cursor("tasks/list", params)?;
    let page = server.list_tasks(peer, cursor, "tasks/list").await?;
    let tasks: Vec<Value> = page
        .tasks
        .iter()
        .filter(|t| shows(&t.era))
        .map(render_2025::task_object)
        .collect();
    let mut result = json!({"tasks": tasks});
    if let Some(c) = page.next_cursor {
        result["nextCursor"] = json!(c);
    }
    Ok(result)
}

/// The notifications this wire sends for a task event, for a session (if cached here).
pub(crate) fn notifications_for(event: &TaskEvent, session: Option<&Session>) -> Vec<Message> {
    match event {
        TaskEvent::Created(_) | TaskEvent::InputAnswered { .. } => Vec::new(),
        // A session on an older revision knows no task notifications (its tasks are plain calls run
        // as tasks within a sync budget).
        TaskEvent::Changed(_) | TaskEvent::Progress { .. }
            if session.is_some_and(|s| !s.has_tasks()) =>
        {
            Vec::new()
        }
        TaskEvent::Changed(t) => {
            vec![Message::notification(
                "notifications/tasks/status",
                render_2025::task_object(t),
            )]
        }
        TaskEvent::Progress {
            task,
            message,
            advanced,
        } => {
            if task.status.is_terminal() {
                return Vec::new();
            }
            // Progress goes out on the original request's token while the value rises (the progress
            // rule of the base protocol); any other change of what the task shows (no token, or only
            // the total or message changed) is told as the task itself, which carries progress.
            match task.request_meta.get(meta::PROGRESS_TOKEN) {
                Some(token) if *advanced => vec![messages::progress(
                    token,
                    task.progress.unwrap_or(0.0),
                    task.progress_total,
                    message.as_deref(),
                    Some(render_2025::related_meta(&task.id)),
                )],
                _ => vec![Message::notification(
                    "notifications/tasks/status",
                    render_2025::task_object(task),
                )],
            }
        }
        TaskEvent::InputRequested { task, input } => vec![input_request_message(task, input)],
        TaskEvent::Log {
            task,
            level,
            logger,
            data,
        } => {
            if session.is_some_and(|s| *level < s.log_level()) {
                return Vec::new();
            }
            vec![messages::log(
                *level,
                logger.as_deref(),
                data.clone(),
                Some(render_2025::related_meta(&task.id)),
            )]
        }
    }
}

/// The JSON-RPC request that carries a task's input request to the client: its id is the request's key,
/// and it is tagged with the related task. A question the client said it runs as a task asks for one
/// (`params.task`, retention as long as the task's).
pub(crate) fn input_request_message(task: &TaskRecord, input: &InputRecord) -> Message {
    let mut params = input.params.clone();
    let as_task = task.request_meta[ASK_AS_TASK][&input.method] == json!(true);
    if let Value::Object(p) = &mut params {
        let meta = p.entry("_meta").or_insert_with(|| json!({}));
        if let Value::Object(meta) = meta {
            meta.extend(render_2025::related_meta(&task.id));
        }
        if as_task {
            p.insert(
                "task".into(),
                json!({"ttl": task.ttl_ms.unwrap_or(3_600_000)}),
            );
        }
    }
    Message::Request(Request {
        id: RequestId::String(input.key.clone()),
        method: input.method.clone(),
        params: Some(params),
    })
}
