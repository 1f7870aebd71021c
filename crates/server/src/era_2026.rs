//! The stateless wire (MCP 2026-07-28) with the tasks extension `io.modelcontextprotocol/tasks`
//! (SEP-2663): per-request `_meta` instead of `initialize`, `resultType` on every result,
//! multi-round-trip input for plain calls, and server-directed tasks read with `tasks/get` and fed
//! with `tasks/update`.

use mcp_tasks_engine::store::{ActiveLimit, Lookup};
use mcp_tasks_engine::{
    fingerprint, EngineError, InputResponse, LogLevel, NewTask, Outcome, TaskContext, TaskEvent,
    TaskRecord,
};
use mcp_tasks_protocol::jsonrpc::{ErrorObject, Message, Request};
use mcp_tasks_protocol::mcp_2025::TaskSupport;
use mcp_tasks_protocol::{error_codes, meta, version};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use crate::auth::Principal;
use crate::mrtr::{next_state, RoundSink};
use crate::render_2026;
use crate::router::StreamSender;
use crate::Server;

/// The era label stored on tasks created through this wire.
pub(crate) const ERA: &str = version::V2026_07_28;

/// An error with the HTTP status this era gives it.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The JSON-RPC error.
    pub error: ErrorObject,
    /// The HTTP status (200 unless the spec says otherwise).
    pub http: u16,
}

impl From<ErrorObject> for Failure {
    fn from(error: ErrorObject) -> Failure {
        let http = match error.code {
            error_codes::METHOD_NOT_FOUND => 404,
            error_codes::HEADER_MISMATCH
            | error_codes::MISSING_REQUIRED_CLIENT_CAPABILITY
            | error_codes::UNSUPPORTED_PROTOCOL_VERSION => 400,
            _ => 200,
        };
        Failure { error, http }
    }
}

fn bad_meta(msg: String) -> Failure {
    // A request whose `_meta` is missing or malformed is 400 on HTTP.
    Failure {
        error: ErrorObject::invalid_params(msg),
        http: 400,
    }
}

/// What a request says about itself in `_meta`.
#[derive(Debug, Clone)]
pub(crate) struct RequestMeta {
    pub caps: Value,
    pub log_level: Option<LogLevel>,
    pub progress_token: Option<Value>,
}

/// Whether a message belongs to this wire: its `_meta` names a protocol version.
pub(crate) fn is_stateless(params: Option<&Value>) -> bool {
    params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(meta::PROTOCOL_VERSION))
        .is_some()
}

/// The protocol version a request declares, if any.
pub(crate) fn declared_version(params: Option<&Value>) -> Option<&str> {
    params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(meta::PROTOCOL_VERSION))
        .and_then(Value::as_str)
}

pub(crate) fn parse_meta(req: &Request) -> Result<RequestMeta, Failure> {
    let m = req
        .params
        .as_ref()
        .and_then(|p| p.get("_meta"))
        .and_then(Value::as_object)
        .ok_or_else(|| {
            bad_meta(format!(
                "{}: params._meta is required (with {} and {})",
                req.method,
                meta::PROTOCOL_VERSION,
                meta::CLIENT_CAPABILITIES
            ))
        })?;
    let v = m
        .get(meta::PROTOCOL_VERSION)
        .and_then(Value::as_str)
        .ok_or_else(|| {
            bad_meta(format!(
                "{}: _meta[{:?}] must be a string",
                req.method,
                meta::PROTOCOL_VERSION
            ))
        })?;
    if !version::STATELESS_VERSIONS.contains(&v) {
        return Err(Failure {
            error: ErrorObject::new(
                error_codes::UNSUPPORTED_PROTOCOL_VERSION,
                format!(
                    "Unsupported protocol version {v:?} in _meta (supported: {}; for {} send initialize instead)",
                    version::STATELESS_VERSIONS.join(", "),
                    version::SESSION_VERSIONS.join(", ")
                ),
            )
            .with_data(json!({"supported": version::STATELESS_VERSIONS, "requested": v})),
            http: 400,
        });
    }
    let caps = match m.get(meta::CLIENT_CAPABILITIES) {
        Some(c @ Value::Object(_)) => c.clone(),
        _ => {
            return Err(bad_meta(format!(
                "{}: _meta[{:?}] is required (an object; {{}} declares no capabilities)",
                req.method,
                meta::CLIENT_CAPABILITIES
            )));
        }
    };
    let log_level = m
        .get(meta::LOG_LEVEL)
        .and_then(Value::as_str)
        .and_then(LogLevel::parse);
    let progress_token = m
        .get(meta::PROGRESS_TOKEN)
        .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
        .cloned();
    Ok(RequestMeta {
        caps,
        log_level,
        progress_token,
    })
}

fn declares_tasks(caps: &Value) -> bool {
    caps.get("extensions")
        .and_then(|e| e.get(meta::TASKS_EXTENSION))
        .is_some_and(|v| !v.is_null())
}

fn missing_tasks_extension(what: &str) -> Failure {
    ErrorObject::new(
        error_codes::MISSING_REQUIRED_CLIENT_CAPABILITY,
        format!(
            "{what} needs the tasks extension: declare _meta[\"{}\"].extensions[\"{}\"] = {{}}",
            meta::CLIENT_CAPABILITIES,
            meta::TASKS_EXTENSION
        ),
    )
    .with_data(json!({"requiredCapabilities": {"extensions": {meta::TASKS_EXTENSION: {}}}}))
    .into()
}

fn internal(e: impl std::fmt::Display) -> Failure {
    tracing::error!(error = %e, "internal error serving a request");
    ErrorObject::internal(format!("Internal error: {e}")).into()
}

/// Adds what every result of this era carries: `resultType` (default `complete`) and the server's info.
pub(crate) fn finish_result(server: &Server, mut v: Value) -> Value {
    if let Value::Object(m) = &mut v {
        m.entry("resultType").or_insert_with(|| json!("complete"));
        let meta = m.entry("_meta").or_insert_with(|| json!({}));
        if let Value::Object(meta) = meta {
            meta.insert(
                meta::SERVER_INFO.into(),
                json!({"name": server.config.name, "version": server.config.version}),
            );
        }
    }
    v
}

/// Serves one request of this era. `out` carries messages related to it (progress, logs, and for
/// `subscriptions/listen` the subscription's notifications).
pub(crate) async fn dispatch(
    server: &Arc<Server>,
    principal: &Principal,
    req: Request,
    out: StreamSender,
    cancel: CancellationToken,
) -> Result<Value, Failure> {
    let rm = parse_meta(&req)?;
    let params = match &req.params {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    // A prompt that asks for input is built in rounds, like a plain tool call.
    if let Some(handler) = (req.method == "prompts/get")
        .then(|| crate::era_2025::prompt_handler(server, &req))
        .flatten()
    {
        let name = params.get("name").and_then(Value::as_str).unwrap_or("");
        let args = params
            .get("arguments")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let call = fingerprint(&format!("prompt:{name}"), &args);
        let answers = answers_in_hand(server, principal, &call, &params)?;
        let result = match run_round(handler, args, answers, &rm, &out, cancel).await {
            Round::Done(o) => outcome_to_result(o)?,
            need => input_required(server, principal, &call, need),
        };
        return Ok(finish_result(server, result));
    }
    let result = match req.method.as_str() {
        "server/discover" => discover(server),
        "tools/list" => tools_list(server, &params)?,
        "tools/call" => tools_call(server, principal, &rm, &params, out, cancel).await?,
        "tasks/get" | "tasks/update" | "tasks/cancel" | "subscriptions/listen" => {
            let wants_tasks = req.method != "subscriptions/listen"
                || params
                    .get("notifications")
                    .and_then(|n| n.get("taskIds"))
                    .is_some();
            if wants_tasks && !declares_tasks(&rm.caps) {
                return Err(missing_tasks_extension(&req.method));
            }
            check_rate(server, principal, &req.method)?;
            match req.method.as_str() {
                "tasks/get" => tasks_get(server, principal, &params).await?,
                "tasks/update" => tasks_update(server, principal, &params).await?,
                "tasks/cancel" => tasks_cancel(server, principal, &params).await?,
                _ => return listen(server, principal, &req, &params, out).await,
            }
        }
        "resources/list"
        | "resources/templates/list"
        | "resources/read"
        | "prompts/list"
        | "prompts/get"
        | "completion/complete" => {
            let mut r = crate::era_2025::catalog_call(server, &req, true)?;
            if req.method != "completion/complete" && req.method != "prompts/get" {
                // List and read results are cacheable on this wire.
                r["ttlMs"] = json!(60_000);
                r["cacheScope"] = json!("public");
            }
            r
        }
        "tasks/result" | "tasks/list" => {
            return Err(ErrorObject::new(
                error_codes::METHOD_NOT_FOUND,
                format!("Method not found: {} (removed in the tasks extension: poll tasks/get, which carries the result)", req.method),
            )
            .into());
        }
        m => return Err(ErrorObject::method_not_found(m).into()),
    };
    Ok(finish_result(server, result))
}

fn check_rate(server: &Server, principal: &Principal, method: &str) -> Result<(), Failure> {
    server.rate.check(&principal.name, principal.limits.calls_per_minute).map_err(|wait_ms| {
        tracing::info!(target: "mcp_tasks::audit", principal = %principal.name, method, "rate limited");
        Failure::from(
            ErrorObject::new(
                error_codes::RATE_LIMITED,
                format!("Rate limit: at most {} task calls per minute; retry in {wait_ms} ms", principal.limits.calls_per_minute),
            )
            .with_data(json!({"retryAfterMs": wait_ms})),
        )
    })
}

fn discover(server: &Server) -> Value {
    let mut caps = json!({
        "tools": {"listChanged": false},
        "extensions": {meta::TASKS_EXTENSION: {}},
    });
    if let Some(extra) = server.capabilities_2026() {
        if let (Value::Object(c), Value::Object(e)) = (&mut caps, extra) {
            c.extend(e);
        }
    }
    let mut r = json!({
        "supportedVersions": version::ALL_VERSIONS,
        "capabilities": caps,
        "ttlMs": 60_000,
        "cacheScope": "public",
    });
    if let Some(i) = &server.config.instructions {
        r["instructions"] = json!(i);
    }
    r
}

fn tools_list(server: &Server, params: &Map<String, Value>) -> Result<Value, Failure> {
    let all = server.tools.all();
    let start = match params.get("cursor") {
        None | Some(Value::Null) => 0,
        Some(Value::String(c)) => c
            .strip_prefix("t")
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|&n| n <= all.len())
            .ok_or_else(|| {
                ErrorObject::invalid_params(format!("tools/list: invalid cursor {c:?}"))
            })?,
        Some(_) => {
            return Err(ErrorObject::invalid_params("tools/list: cursor must be a string").into())
        }
    };
    let end = (start + server.config.page_size.max(1)).min(all.len());
    let tools: Vec<Value> = all[start..end].iter().map(|t| t.describe(false)).collect();
    let mut r = json!({"tools": tools, "ttlMs": 60_000, "cacheScope": "public"});
    if end < all.len() {
        r["nextCursor"] = json!(format!("t{end}"));
    }
    Ok(r)
}

/// The answers a retried call carries: those in its (verified) `requestState`, plus its
/// `inputResponses` for the questions of the last round (others are ignored).
fn answers_in_hand(
    server: &Server,
    principal: &Principal,
    call: &str,
    params: &Map<String, Value>,
) -> Result<BTreeMap<String, Value>, Failure> {
    let responses = match params.get("inputResponses") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => {
            return Err(
                ErrorObject::invalid_params("tools/call: inputResponses must be an object").into(),
            )
        }
    };
    let (mut answers, pending): (BTreeMap<String, Value>, Option<Vec<String>>) = match params
        .get("requestState")
    {
        None | Some(Value::Null) => (BTreeMap::new(), None),
        Some(Value::String(s)) => {
            let st = server.signer.open(s, &principal.name, call)?;
            (st.answers, Some(st.pending))
        }
        Some(_) => {
            return Err(
                ErrorObject::invalid_params("tools/call: requestState must be a string").into(),
            )
        }
    };
    for (key, value) in responses {
        let expected = pending.as_ref().is_none_or(|p| p.contains(&key));
        if !expected {
            continue;
        }
        if !value.is_object() {
            return Err(ErrorObject::invalid_params(format!(
                "tools/call: inputResponses[{key:?}] must be an object"
            ))
            .into());
        }
        answers.insert(key, value);
    }
    Ok(answers)
}

/// Runs a handler for one round of a plain call: its result, or the questions it is waiting on.
enum Round {
    Done(Outcome),
    NeedsInput {
        requests: Map<String, Value>,
        pending: Vec<String>,
        answers: BTreeMap<String, Value>,
    },
}

async fn run_round(
    handler: Arc<dyn mcp_tasks_engine::TaskHandler>,
    arguments: Value,
    answers: BTreeMap<String, Value>,
    rm: &RequestMeta,
    out: &StreamSender,
    cancel: CancellationToken,
) -> Round {
    let progress = rm.progress_token.clone().map(|t| (t, out.clone()));
    let log = rm.log_level.map(|l| (l, out.clone()));
    let sink = Arc::new(RoundSink::new(answers, rm.caps.clone(), progress, log));
    let ctx = TaskContext::new(None, cancel.clone(), sink.clone());
    let mut guard = crate::AbortOnDrop(tokio::spawn(
        async move { handler.run(ctx, arguments).await },
    ));
    let work = &mut guard.0;
    let outcome = tokio::select! {
        r = &mut *work => r,
        _ = sink.blocked.notified() => {
            // Give questions asked side by side a moment to arrive, then end the round.
            tokio::time::sleep(Duration::from_millis(25)).await;
            if !work.is_finished() {
                work.abort();
                cancel.cancel();
                let (requests, pending) = sink.missing();
                return Round::NeedsInput { requests, pending, answers: sink.answers().clone() };
            }
            work.await
        }
    };
    Round::Done(match outcome {
        Ok(o) => o,
        Err(e) if e.is_panic() => Outcome::internal_error("the tool panicked"),
        Err(_) => Outcome::internal_error("the tool was stopped"),
    })
}

fn input_required(server: &Server, principal: &Principal, call: &str, round: Round) -> Value {
    let Round::NeedsInput {
        requests,
        pending,
        answers,
    } = round
    else {
        return Value::Null;
    };
    let state = next_state(&principal.name, call, answers, pending);
    json!({"resultType": "input_required", "inputRequests": requests, "requestState": server.signer.seal(&state)})
}

fn outcome_to_result(o: Outcome) -> Result<Value, Failure> {
    match o {
        Outcome::Result { value, .. } => Ok(value),
        Outcome::Error {
            code,
            message,
            data,
        } => Err(ErrorObject {
            code,
            message,
            data,
        }
        .into()),
    }
}

async fn tools_call(
    server: &Arc<Server>,
    principal: &Principal,
    rm: &RequestMeta,
    params: &Map<String, Value>,
    out: StreamSender,
    cancel: CancellationToken,
) -> Result<Value, Failure> {
    let (tool, arguments) = crate::era_2025::tool_and_arguments(server, params)?;
    let name = tool.tool.name.as_str();
    if let Some(Value::Object(needed)) = &tool.tool.requires {
        let missing = needed
            .keys()
            .any(|k| rm.caps.get(k).is_none_or(Value::is_null));
        if missing {
            return Err(ErrorObject::new(
                error_codes::MISSING_REQUIRED_CLIENT_CAPABILITY,
                format!(
                    "Tool {name} needs client capabilities {} that this request did not declare",
                    Value::Object(needed.clone())
                ),
            )
            .with_data(json!({"requiredCapabilities": needed}))
            .into());
        }
    }
    // The legacy `task` param is not an opt-in here: the server decides (it is ignored).
    let ext = declares_tasks(&rm.caps);
    let as_task = match tool.tool.task_support {
        TaskSupport::Forbidden => false,
        TaskSupport::Optional => ext,
        TaskSupport::Required if ext => true,
        TaskSupport::Required => return Err(missing_tasks_extension(&format!("Tool {name}"))),
    };
    let invalid = tool.validate(&arguments).err().map(|problems| {
        json!({"content": [{"type": "text", "text": format!("Invalid arguments for tool {name}: {problems}")}], "isError": true})
    });
    let call = fingerprint(name, &arguments);
    let answers = answers_in_hand(server, principal, &call, params)?;
    if !as_task {
        if let Some(r) = invalid {
            return Ok(r);
        }
        return match run_round(
            tool.tool.handler.clone(),
            arguments,
            answers,
            rm,
            &out,
            cancel,
        )
        .await
        {
            Round::Done(o) => outcome_to_result(o),
            need => Ok(input_required(server, principal, &call, need)),
        };
    }
    check_rate(server, principal, "tools/call")?;
    // A tool may ask its questions before the task starts (in rounds, like a plain call).
    let arguments = match (&tool.tool.prepare, &invalid) {
        (Some(prepare), None) => {
            match run_round(prepare.clone(), arguments, answers, rm, &out, cancel).await {
                Round::Done(Outcome::Result {
                    value,
                    is_error: false,
                }) => value,
                Round::Done(o) => return outcome_to_result(o),
                need => return Ok(input_required(server, principal, &call, need)),
            }
        }
        _ => arguments,
    };
    let new = NewTask {
        tool: name.to_string(),
        arguments,
        owner: principal.name.clone(),
        session: None,
        era: ERA.to_string(),
        request_meta: json!({"clientCapabilities": rm.caps}),
        requested_ttl_ms: None,
        idempotency_key: None,
        active_limit: Some(ActiveLimit {
            max: principal.limits.max_running_tasks,
            owner: principal.name.clone(),
            session: None,
        }),
    };
    let rec = server.submit_task(new, invalid, None).await?;
    Ok(Value::Object(render_2026::create_result(&rec)))
}

fn task_id(params: &Map<String, Value>, method: &str) -> Result<String, Failure> {
    match params.get("taskId") {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => {
            Err(ErrorObject::invalid_params(format!("{method}: missing string \"taskId\"")).into())
        }
    }
}

/// A task the caller may see (created under either era); anything else is "not found".
async fn find(
    server: &Server,
    principal: &Principal,
    params: &Map<String, Value>,
    method: &str,
) -> Result<TaskRecord, Failure> {
    let id = task_id(params, method)?;
    match server.engine.get(&id).await.map_err(internal)? {
        Lookup::Found(t) if t.owner == principal.name => Ok(t),
        Lookup::Expired { owner, .. } if owner == principal.name => {
            Err(ErrorObject::invalid_params("Failed to retrieve task: Task has expired").into())
        }
        _ => {
            tracing::info!(target: "mcp_tasks::audit", principal = %principal.name, method, "task lookup failed");
            Err(ErrorObject::invalid_params("Failed to retrieve task: Task not found").into())
        }
    }
}

async fn detailed(server: &Server, rec: &TaskRecord) -> Result<Map<String, Value>, Failure> {
    let pending = if rec.status == mcp_tasks_engine::TaskStatus::InputRequired {
        server
            .engine
            .pending_inputs(&rec.id)
            .await
            .map_err(internal)?
    } else {
        Vec::new()
    };
    Ok(render_2026::detailed(rec, &pending))
}

async fn tasks_get(
    server: &Server,
    principal: &Principal,
    params: &Map<String, Value>,
) -> Result<Value, Failure> {
    let t = find(server, principal, params, "tasks/get").await?;
    if t.status.is_terminal() {
        tracing::info!(target: "mcp_tasks::audit", task = %t.id, principal = %principal.name, "task result retrieved");
    }
    Ok(Value::Object(detailed(server, &t).await?))
}

async fn tasks_update(
    server: &Server,
    principal: &Principal,
    params: &Map<String, Value>,
) -> Result<Value, Failure> {
    let responses = match params.get("inputResponses") {
        Some(Value::Object(m)) => m.clone(),
        _ => {
            return Err(ErrorObject::invalid_params(
                "tasks/update: inputResponses must be an object",
            )
            .into())
        }
    };
    let t = find(server, principal, params, "tasks/update").await?;
    // Check every answer first, so a malformed one rejects the update as a whole.
    let mut accepted = Vec::new();
    for (key, value) in responses {
        // Keys that are not this task's outstanding questions are acknowledged and ignored.
        let Ok(Some(input)) = server.engine.store().get_input(&key).await else {
            continue;
        };
        if input.task_id != t.id || input.response.is_some() {
            continue;
        }
        if input.method == "elicitation/create" && crate::tool::parse_elicit_result(&value).is_err()
        {
            return Err(ErrorObject::invalid_params(format!(
                "tasks/update: inputResponses[{key:?}] is not an ElicitResult (action accept, decline or cancel); nothing was applied"
            ))
            .into());
        }
        accepted.push((key, value));
    }
    for (key, value) in accepted {
        match server
            .engine
            .answer_input(&key, InputResponse::Result { value })
            .await
        {
            Ok(_) => {
                tracing::info!(target: "mcp_tasks::audit", task = %t.id, principal = %principal.name, request = %key, "input answered")
            }
            Err(e) => tracing::debug!(task = %t.id, request = %key, error = %e, "answer not taken"),
        }
    }
    Ok(json!({}))
}

async fn tasks_cancel(
    server: &Server,
    principal: &Principal,
    params: &Map<String, Value>,
) -> Result<Value, Failure> {
    let t = find(server, principal, params, "tasks/cancel").await?;
    match server.engine.cancel(&t.id, None).await {
        // Cancelling a finished task is acknowledged too (the extension's cancel is an ack, not a state).
        Ok(_) | Err(EngineError::AlreadyTerminal(_)) | Err(EngineError::NotFound) => Ok(json!({})),
        Err(e) => Err(internal(e)),
    }
}

/// `subscriptions/listen`: acknowledges, sends the current state of each accepted task, then streams
/// `notifications/tasks` (the full `DetailedTask`) whenever it changes, until the client goes away.
async fn listen(
    server: &Arc<Server>,
    principal: &Principal,
    req: &Request,
    params: &Map<String, Value>,
    out: StreamSender,
) -> Result<Value, Failure> {
    let gone = || Failure::from(ErrorObject::internal("client went away"));
    let filter = params
        .get("notifications")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let sub_meta = json!({meta::SUBSCRIPTION_ID: req.id.to_value()});
    // Subscribe before reading anything, so no change falls between the read and the stream.
    let mut events = server.engine.notifier().subscribe_all();
    let mut resource_events = server.resource_events.subscribe();
    let mut accepted = Vec::new();
    for id in filter
        .get("taskIds")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if matches!(server.engine.get(id).await, Ok(Lookup::Found(t)) if t.owner == principal.name)
        {
            accepted.push(id.to_string());
        }
    }
    let uris: Vec<String> = filter
        .get("resourceSubscriptions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|u| server.catalog.exists(u))
        .map(String::from)
        .collect();
    // This server's tool, prompt and resource lists never change while it runs: nothing to promise there.
    let mut ack = Map::new();
    if filter.contains_key("taskIds") {
        ack.insert("taskIds".into(), json!(accepted));
    }
    if filter.contains_key("resourceSubscriptions") {
        ack.insert("resourceSubscriptions".into(), json!(uris));
    }
    let ack = Message::notification(
        "notifications/subscriptions/acknowledged",
        json!({"notifications": ack, "_meta": sub_meta}),
    );
    out.send(ack).await.map_err(|_| gone())?;
    // What was last sent per task: a change that renders the same (an input event next to its status
    // change) is not sent twice.
    let mut last: std::collections::HashMap<String, Value> = std::collections::HashMap::new();
    let send_state = async |id: &str,
                            last: &mut std::collections::HashMap<String, Value>|
           -> Result<(), Failure> {
        let Ok(Lookup::Found(t)) = server.engine.get(id).await else {
            return Ok(());
        };
        let mut params = detailed(server, &t).await?;
        if last.get(id) == Some(&Value::Object(params.clone())) {
            return Ok(());
        }
        last.insert(id.to_string(), Value::Object(params.clone()));
        params.insert("_meta".into(), sub_meta.clone());
        out.send(Message::notification(
            "notifications/tasks",
            Value::Object(params),
        ))
        .await
        .map_err(|_| gone())
    };
    for id in accepted.clone() {
        send_state(&id, &mut last).await?;
    }
    loop {
        tokio::select! {
            e = events.recv() => match e {
                Ok(ev) => {
                    let relevant = matches!(ev, TaskEvent::Changed(_) | TaskEvent::InputRequested { .. } | TaskEvent::InputAnswered { .. });
                    if relevant && accepted.contains(&ev.task().id) {
                        send_state(&ev.task().id.clone(), &mut last).await?;
                    }
                }
                // Missed events: the store has the truth; resend what changed.
                Err(_) => {
                    for id in accepted.clone() {
                        send_state(&id, &mut last).await?;
                    }
                }
            },
            Ok(uri) = resource_events.recv() => {
                if uris.contains(&uri) {
                    let n = Message::notification("notifications/resources/updated", json!({"uri": uri, "_meta": sub_meta}));
                    out.send(n).await.map_err(|_| gone())?;
                }
            }
            _ = out.closed() => return Err(gone()),
        }
    }
}
