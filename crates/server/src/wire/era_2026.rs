//! The stateless wire (MCP 2026-07-28) with the tasks extension `io.modelcontextprotocol/tasks`
//! (SEP-2663): per-request `_meta` instead of `initialize`, `resultType` on every result,
//! multi-round-trip input for plain calls, and server-directed tasks read with `tasks/get` and fed
//! with `tasks/update`. Parses params, calls the core, renders; also checks the HTTP routing headers
//! against the body.

use mcp_tasks_engine::{fingerprint, LogLevel, Outcome, TaskContext, TaskRecord};
use mcp_tasks_protocol::jsonrpc::{ErrorObject, Request};
use mcp_tasks_protocol::mcp_2025::TaskSupport;
use mcp_tasks_protocol::{error_codes, meta, version};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use super::messages;
use super::mrtr::{self, next_state, RoundSink};
use super::render_2026;
use crate::core::budget::BudgetedCall;
use crate::core::streams::StreamSender;
use crate::core::{calls, tasks::Cancel, Era, Failure, HandlerRun, Peer, Server, TaskStart};

mod headers;
mod listen;

pub(crate) use headers::{check_headers, Headers};

/// The era label stored on tasks created through this wire.
pub(crate) const ERA: &str = version::V2026_07_28;

/// The HTTP status this wire gives an error: 404 for an unknown method, 400 for header, capability
/// and version errors, else what the failure already says (200, or 429 for a refused call).
fn with_http_status(f: Failure) -> Failure {
    let status = match f.error.code {
        error_codes::METHOD_NOT_FOUND => 404,
        error_codes::HEADER_MISMATCH
        | error_codes::MISSING_REQUIRED_CLIENT_CAPABILITY
        | error_codes::UNSUPPORTED_PROTOCOL_VERSION => 400,
        _ => return f,
    };
    f.with_status(status)
}

fn bad_meta(msg: String) -> Failure {
    // A request whose `_meta` is missing or malformed is 400 on HTTP.
    Failure::from(ErrorObject::invalid_params(msg)).with_status(400)
}

/// What a request says about itself in `_meta`.
#[derive(Debug, Clone)]
pub(crate) struct RequestMeta {
    pub caps: Value,
    pub log_level: Option<LogLevel>,
    pub progress_token: Option<Value>,
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
        return Err(Failure::from(ErrorObject::new(
                error_codes::UNSUPPORTED_PROTOCOL_VERSION,
                format!(
                    "Unsupported protocol version {v:?} in _meta (supported: {}; for {} send initialize instead)",
                    version::STATELESS_VERSIONS.join(", "),
                    version::SESSION_VERSIONS.join(", ")
                ),
            )
            .with_data(json!({"supported": version::STATELESS_VERSIONS, "requested": v})))
        .with_status(400));
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

/// Adds what every result of this era carries: `resultType` (default `complete`) and the server's info.
pub(crate) fn finish_result(server: &Server, mut v: Value) -> Value {
    if let Value::Object(m) = &mut v {
        m.entry("resultType").or_insert_with(|| json!("complete"));
        let meta = m.entry("_meta").or_insert_with(|| json!({}));
        if let Value::Object(meta) = meta {
            meta.insert(
                meta::SERVER_INFO.into(),
                json!({"name": server.config().name, "version": server.config().version}),
            );
        }
    }
    v
}

/// Serves one request of this era. `out` carries messages related to it (progress, logs, and for
/// `subscriptions/listen` the subscription's notifications).
pub(crate) async fn dispatch(
    server: &Arc<Server>,
    peer: &Peer,
    req: Request,
    out: StreamSender,
    cancel: CancellationToken,
) -> Result<Value, Failure> {
    serve(server, peer, req, out, cancel)
        .await
        .map_err(with_http_status)
}

async fn serve(
    server: &Arc<Server>,
    peer: &Peer,
    mut req: Request,
    out: StreamSender,
    cancel: CancellationToken,
) -> Result<Value, Failure> {
    let rm = parse_meta(&req)?;
    // Taken, not copied: a call's arguments can be megabytes.
    let params = match req.params.take() {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    // A prompt that asks for input is built in rounds, like a plain tool call.
    if let Some(handler) = (req.method == "prompts/get")
        .then(|| server.prompt_handler(&params))
        .flatten()
    {
        let name = params.get("name").and_then(Value::as_str).unwrap_or("");
        let args = params
            .get("arguments")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let call = fingerprint(&format!("prompt:{name}"), &args);
        let answers = answers_in_hand(server, peer, &call, &params)?;
        let result = match run_round(handler, args, answers, &rm, &out, cancel).await {
            Round::Done(o) => calls::outcome_to_result(o)?,
            need => input_required(server, peer, &call, need),
        };
        return Ok(finish_result(server, result));
    }
    let result = match req.method.as_str() {
        "server/discover" => discover(server),
        m if super::events::METHODS.contains(&m) => {
            super::events::serve(server, peer, m, &req.id, &params, &out).await?
        }
        "tools/list" => tools_list(server, &params, declares_tasks(&rm.caps))?,
        "tools/call" => tools_call(server, peer, &rm, &params, out, cancel).await?,
        meta::SIGNAL_METHOD => {
            server.check_rate_cost(peer, &req.method, 1)?;
            let t = find(server, peer, &params, &req.method).await?;
            super::signals::send(server, peer, &t, &params).await?
        }
        "tasks/get" | "tasks/update" | "tasks/cancel" | "subscriptions/listen" => {
            let wants_tasks = req.method != "subscriptions/listen"
                || params
                    .get("notifications")
                    .and_then(|n| n.get("taskIds"))
                    .is_some();
            if wants_tasks && !declares_tasks(&rm.caps) {
                return Err(missing_tasks_extension(&req.method));
            }
            let items = listed_items(&req.method, &params)?;
            server.check_rate_cost(peer, &req.method, items)?;
            match req.method.as_str() {
                "tasks/get" => tasks_get(server, peer, &params).await?,
                "tasks/update" => tasks_update(server, peer, &params).await?,
                "tasks/cancel" => tasks_cancel(server, peer, &params).await?,
                _ => return listen::listen(server, peer, &req, &params, out).await,
            }
        }
        m if crate::core::CATALOG_METHODS.contains(&m) => {
            let mut r = server.catalog_request(m, &params, Era::Stateless).await?;
            if m != "completion/complete" && m != "prompts/get" {
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

fn discover(server: &Server) -> Value {
    let mut caps = json!({
        "tools": {"listChanged": server.tools().can_change()},
        "extensions": {meta::TASKS_EXTENSION: {}},
        "experimental": {
            meta::IDEMPOTENCY_CAPABILITY: {},
            meta::SIGNALS_CAPABILITY: {},
            meta::WEBHOOKS_CAPABILITY: crate::webhooks::capability(),
        },
        "logging": {},
    });
    if let Value::Object(c) = &mut caps {
        c.extend(server.catalog_capabilities());
    }
    super::events::add_capabilities(&mut caps);
    let mut r = json!({
        "supportedVersions": version::ALL_VERSIONS,
        "capabilities": caps,
        "ttlMs": 60_000,
        "cacheScope": "public",
    });
    if let Some(i) = &server.config().instructions {
        r["instructions"] = json!(i);
    }
    r
}

fn tools_list(
    server: &Server,
    params: &Map<String, Value>,
    speaks_tasks: bool,
) -> Result<Value, Failure> {
    let (mut tools, next) = messages::tools_page(server, params, |t| {
        let mut d = t.describe(false);
        if !speaks_tasks {
            messages::for_plain_callers(server, t, &mut d);
        }
        d
    })?;
    if !speaks_tasks && next.is_none() {
        tools.extend(server.follow_up_tools());
    }
    let mut r = json!({"tools": tools, "ttlMs": 60_000, "cacheScope": "public"});
    if let Some(c) = next {
        r["nextCursor"] = json!(c);
    }
    Ok(r)
}

/// The answers a retried call carries: those in its (verified) `requestState`, plus its
/// `inputResponses` for the questions of the last round (others are ignored).
fn answers_in_hand(
    server: &Server,
    peer: &Peer,
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
            let st = mrtr::open(server.sealer(), s, peer.name(), call)?;
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
    let mut run = HandlerRun::spawn(handler, ctx, arguments);
    let outcome = tokio::select! {
        o = run.outcome() => o,
        _ = sink.blocked.notified() => {
            // Give questions asked side by side a moment to arrive, then end the round.
            tokio::time::sleep(Duration::from_millis(25)).await;
            if !run.is_finished() {
                run.abort();
                cancel.cancel();
                let (requests, pending) = sink.missing();
                return Round::NeedsInput { requests, pending, answers: sink.answers().clone() };
            }
            run.outcome().await
        }
    };
    Round::Done(outcome)
}

fn input_required(server: &Server, peer: &Peer, call: &str, round: Round) -> Value {
    let Round::NeedsInput {
        requests,
        pending,
        answers,
    } = round
    else {
        return Value::Null;
    };
    let state = next_state(peer.name(), call, answers, pending);
    json!({"resultType": "input_required", "inputRequests": requests, "requestState": mrtr::seal(server.sealer(), &state)})
}

async fn tools_call(
    server: &Arc<Server>,
    peer: &Peer,
    rm: &RequestMeta,
    params: &Map<String, Value>,
    out: StreamSender,
    cancel: CancellationToken,
) -> Result<Value, Failure> {
    if let Some(r) = server.follow_up_call(peer, params).await {
        return r;
    }
    let (tool, arguments) = server.tool_call(peer, params)?;
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
    // A client without the extension still gets a task behind the scenes where a budget is set.
    let budget = if ext { None } else { server.sync_budget(&tool) };
    let as_task = match tool.tool.task_support {
        TaskSupport::Forbidden => false,
        TaskSupport::Optional => ext || budget.is_some(),
        TaskSupport::Required if ext || budget.is_some() => true,
        TaskSupport::Required => return Err(missing_tasks_extension(&format!("Tool {name}"))),
    };
    let invalid = calls::invalid_arguments(&tool, &arguments);
    let call = fingerprint(name, &arguments);
    let answers = answers_in_hand(server, peer, &call, params)?;
    if !as_task {
        calls::no_webhook_without_task(
            params.get("_meta"),
            &if tool.tool.task_support == TaskSupport::Forbidden {
                format!("tool {name} always runs synchronously")
            } else {
                format!(
                    "declare the {} extension in the request's client capabilities",
                    meta::TASKS_EXTENSION
                )
            },
        )?;
        if let Some(r) = invalid {
            return Ok(r);
        }
        let _slot = server.plain_call_slot(peer)?;
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
            Round::Done(o) => calls::outcome_to_result(o),
            need => Ok(input_required(server, peer, &call, need)),
        };
    }
    server.check_rate(peer, "tools/call")?;
    // A tool may ask its questions before the task starts (in rounds, like a plain call).
    let arguments = match (&tool.tool.prepare, &invalid) {
        (Some(prepare), None) => {
            match run_round(
                prepare.clone(),
                arguments,
                answers,
                rm,
                &out,
                cancel.clone(),
            )
            .await
            {
                Round::Done(Outcome::Result {
                    value,
                    is_error: false,
                }) => value,
                Round::Done(o) => return calls::outcome_to_result(o),
                need => return Ok(input_required(server, peer, &call, need)),
            }
        }
        _ => arguments,
    };
    if let Some(budget) = budget {
        let call = BudgetedCall {
            tool: tool.clone(),
            arguments,
            invalid,
            era: ERA,
            request_meta: json!({"clientCapabilities": rm.caps}),
            progress: messages::progress_note(params.get("_meta")),
            budget,
            announce_with: None,
            speaks_tasks: false,
        };
        return server.call_within_budget(peer, call, &out, &cancel).await;
    }
    let started = server
        .start_task(
            peer,
            TaskStart {
                tool: name.to_string(),
                arguments,
                era: ERA,
                request_meta: json!({"clientCapabilities": rm.caps}),
                ttl_ms: None,
                // A retried call with the same key gets the same task (other arguments: -32602).
                idempotency_key: calls::idempotency_key(params.get("_meta"))?,
                key_label: "Idempotency key",
                retain_after_finish_ms: None,
                cancellable_by: None,
                invalid,
                webhook: params
                    .get("_meta")
                    .and_then(|m| m.get(meta::WEBHOOK))
                    .cloned(),
            },
            &cancel,
        )
        .await?;
    let mut result = render_2026::create_result(&started.record);
    if let Some(w) = started.webhook {
        if let Value::Object(m) = result
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()))
        {
            m.insert(meta::WEBHOOK.into(), w);
        }
    }
    Ok(Value::Object(result))
}

/// A task the caller may see (created under any wire: one store); anything else is "not found".
async fn find(
    server: &Server,
    peer: &Peer,
    params: &Map<String, Value>,
    method: &str,
) -> Result<TaskRecord, Failure> {
    messages::named_task(server, peer, params, method, |_| true).await
}

async fn detailed(server: &Server, rec: &TaskRecord) -> Result<Map<String, Value>, Failure> {
    let pending = if rec.status == mcp_tasks_engine::TaskStatus::InputRequired {
        server.pending_inputs(&rec.id).await?
    } else {
        Vec::new()
    };
    Ok(render_2026::detailed(rec, &pending))
}

async fn tasks_get(
    server: &Server,
    peer: &Peer,
    params: &Map<String, Value>,
) -> Result<Value, Failure> {
    let t = find(server, peer, params, "tasks/get").await?;
    // A finished task's reply carries its result; a cancelled one has none to retrieve.
    if matches!(
        t.status,
        mcp_tasks_engine::TaskStatus::Completed | mcp_tasks_engine::TaskStatus::Failed
    ) {
        tracing::info!(target: "mcp_tasks::audit", task = %t.id, principal = %peer.name(), "task result retrieved");
    }
    Ok(Value::Object(detailed(server, &t).await?))
}

async fn tasks_update(
    server: &Server,
    peer: &Peer,
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
    let t = find(server, peer, params, "tasks/update").await?;
    server
        .answer_many(peer, &t, responses, "tasks/update")
        .await?;
    Ok(json!({}))
}

async fn tasks_cancel(
    server: &Server,
    peer: &Peer,
    params: &Map<String, Value>,
) -> Result<Value, Failure> {
    let t = find(server, peer, params, "tasks/cancel").await?;
    // Cancelling a finished task is acknowledged too (the extension's cancel is an ack, not a state).
    match server.cancel_task(&t).await {
        Ok(Cancel::Done(_) | Cancel::AlreadyFinished(_))
        | Err(crate::core::tasks::Unavailable::NotFound) => Ok(json!({})),
        Err(u) => Err(u.task_error()),
    }
}

/// Most task ids and resource URIs one `subscriptions/listen` may name, each.
pub const MAX_LISTEN_ITEMS: usize = 1000;

/// Most answers one `tasks/update` may carry.
pub const MAX_INPUT_RESPONSES: usize = 100;

/// How many items a task request names (one for most): refused above the limits, and each counted
/// as a call by the rate limit.
fn listed_items(method: &str, params: &Map<String, Value>) -> Result<u32, Failure> {
    let count = |v: Option<&Value>| match v {
        Some(Value::Array(a)) => a.len(),
        Some(Value::Object(o)) => o.len(),
        _ => 0,
    };
    let too_many = |what: &str, n: usize, max: usize| -> Failure {
        ErrorObject::invalid_params(format!(
            "{method}: {n} {what}; at most {max} in one request"
        ))
        .with_data(json!({"limit": max, "got": n}))
        .into()
    };
    let n = match method {
        "subscriptions/listen" => {
            let filter = params.get("notifications");
            let ids = count(filter.and_then(|f| f.get("taskIds")));
            let uris = count(filter.and_then(|f| f.get("resourceSubscriptions")));
            if ids > MAX_LISTEN_ITEMS {
                return Err(too_many("taskIds", ids, MAX_LISTEN_ITEMS));
            }
            if uris > MAX_LISTEN_ITEMS {
                return Err(too_many("resourceSubscriptions", uris, MAX_LISTEN_ITEMS));
            }
            ids + uris
        }
        "tasks/update" => {
            let n = count(params.get("inputResponses"));
            if n > MAX_INPUT_RESPONSES {
                return Err(too_many("inputResponses", n, MAX_INPUT_RESPONSES));
            }
            n
        }
        _ => 1,
    };
    Ok(u32::try_from(n.max(1)).unwrap_or(u32::MAX))
}
