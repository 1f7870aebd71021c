//! Tool calls, era-neutral: which tool and arguments a call names, whether the arguments are valid,
//! running a handler inside a request, and starting a task (idempotency, limits, error mapping).

use mcp_tasks_engine::store::{ActiveLimit, Among, StoreError};
use mcp_tasks_engine::{
    EngineError, HeldLimit, NewTask, Outcome, TaskContext, TaskHandler, TaskRecord,
};
use mcp_tasks_protocol::error_codes;
use mcp_tasks_protocol::jsonrpc::ErrorObject;
use mcp_tasks_protocol::meta;
use serde_json::{json, Map, Value};
use std::sync::Arc;

use super::{internal, Failure, Peer, Server};
use tokio_util::sync::CancellationToken;

/// A task that stopped before it could report (it panicked): the error [`internal`] reports.
#[derive(Debug, thiserror::Error)]
#[error("the task that stores the call stopped: {0}")]
struct JoinFailure(String);
use crate::tool::RegisteredTool;

/// A handler running inside a request (no task). Dropping it stops the handler, so a plain call never
/// outlives its request.
pub(crate) struct HandlerRun(tokio::task::JoinHandle<Outcome>);

impl Drop for HandlerRun {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl HandlerRun {
    /// Starts `handler` with `ctx` on `arguments`.
    pub(crate) fn spawn(handler: Arc<dyn TaskHandler>, ctx: TaskContext, arguments: Value) -> Self {
        HandlerRun(tokio::spawn(async move {
            handler.run(ctx, Arc::new(arguments)).await
        }))
    }

    /// Whether the handler has returned.
    pub(crate) fn is_finished(&self) -> bool {
        self.0.is_finished()
    }

    /// Stops the handler.
    pub(crate) fn abort(&self) {
        self.0.abort();
    }

    /// Waits for the handler's outcome; a panic or an abort becomes an internal error.
    pub(crate) async fn outcome(&mut self) -> Outcome {
        match (&mut self.0).await {
            Ok(o) => o,
            Err(e) if e.is_panic() => crate::core::rules::failure("the tool panicked".into()),
            Err(_) => crate::core::rules::failure("the tool was stopped".into()),
        }
    }
}

/// An outcome as a request's own result: the result object, or the JSON-RPC error.
pub(crate) fn outcome_to_result(o: Outcome) -> Result<Value, Failure> {
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

/// What a wire asks of [`Server::start_task`].
pub(crate) struct TaskStart {
    /// The tool.
    pub(crate) tool: String,
    /// Its (validated, possibly prepared) arguments.
    pub(crate) arguments: Value,
    /// The era label stored with the task.
    pub(crate) era: &'static str,
    /// Wire metadata kept with the task (client capabilities, progress token, …).
    pub(crate) request_meta: Value,
    /// Requested retention.
    pub(crate) ttl_ms: Option<u64>,
    /// The client's idempotency key, as it sent it.
    pub(crate) idempotency_key: Option<String>,
    /// What the wire calls that key, for the error on reuse ("Idempotency key", "Operation token").
    pub(crate) key_label: &'static str,
    /// Retention counted from when the task finishes, instead of `ttl_ms` from creation.
    pub(crate) retain_after_finish_ms: Option<u64>,
    /// The call's request id, when `notifications/cancelled` for it must reach the task after the
    /// reply (Asynchronous Tool Execution).
    pub(crate) cancellable_by: Option<mcp_tasks_protocol::jsonrpc::RequestId>,
    /// The tool-error result of invalid arguments: the task is created finished with it.
    pub(crate) invalid: Option<Value>,
    /// The client's webhook registration (`_meta["io.github.mcp-tasks/webhook"]`), as sent.
    pub(crate) webhook: Option<Value>,
}

/// What [`Server::start_task`] made or found.
pub(crate) struct Started {
    /// The task.
    pub(crate) record: TaskRecord,
    /// What the create result says under `_meta["io.github.mcp-tasks/webhook"]` (with the secret
    /// when the server made one): only when this call registered one and made the task.
    pub(crate) webhook: Option<Value>,
}

impl Server {
    /// The tool a `tools/call` names and its arguments (an object; absent means `{}`), when `peer`
    /// holds the scopes the tool requires.
    pub(crate) fn tool_call(
        &self,
        peer: &Peer,
        params: &Map<String, Value>,
    ) -> Result<(Arc<RegisteredTool>, Value), Failure> {
        if self.draining() {
            return Err(Failure {
                error: ErrorObject::new(
                    error_codes::SERVER_STOPPING,
                    "the server is stopping (a restart or deploy): no new calls are taken here; \
                     try again in a moment (another replica takes it)",
                ),
                status: 503,
                retry_after_ms: Some(2_000),
                challenge: None,
            });
        }
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| ErrorObject::invalid_params("tools/call: missing string \"name\""))?;
        let Some(tool) = self.tools.get(name) else {
            return Err(ErrorObject::invalid_params(format!(
                "Unknown tool: {name} (known: {})",
                self.tools.names().join(", ")
            ))
            .into());
        };
        self.check_scopes(peer, &tool.tool)?;
        let arguments = match params.get("arguments") {
            None | Some(Value::Null) => json!({}),
            Some(v @ Value::Object(_)) => v.clone(),
            Some(_) => {
                return Err(ErrorObject::invalid_params(
                    "tools/call: \"arguments\" must be an object",
                )
                .into())
            }
        };
        Ok((tool, arguments))
    }

    /// Refuses a call of `tool` by a caller without the scopes it requires: 403 with an
    /// `insufficient_scope` challenge naming what to ask for (the scopes held and the missing ones,
    /// so a client that asks again keeps what it had); 401 for a caller without credentials.
    fn check_scopes(&self, peer: &Peer, tool: &crate::Tool) -> Result<(), Failure> {
        let missing = peer.principal.missing_scopes(&tool.scopes);
        if missing.is_empty() {
            return Ok(());
        }
        let held = peer.principal.scopes.as_deref().unwrap_or_default();
        let mut wanted: Vec<&str> = held.iter().map(String::as_str).collect();
        wanted.extend(missing.iter().copied());
        let anonymous = peer.is_anonymous();
        tracing::info!(target: "mcp_tasks::audit", principal = %peer.name(), tool = %tool.name,
            missing = %missing.join(" "), "call refused: insufficient scope");
        let message = if anonymous {
            format!(
                "Tool {} requires scope(s) {}: authenticate with an access token that grants them",
                tool.name,
                missing.join(" ")
            )
        } else {
            format!(
                "Tool {} requires scope(s) {}, which your credentials do not grant",
                tool.name,
                missing.join(" ")
            )
        };
        let oauth = self.authenticator().oauth();
        Err(Failure {
            error: ErrorObject::new(error_codes::INSUFFICIENT_SCOPE, message.clone())
                .with_data(json!({"requiredScopes": tool.scopes, "missingScopes": missing})),
            status: if anonymous { 401 } else { 403 },
            retry_after_ms: None,
            challenge: Some(Box::new(crate::auth::Challenge {
                error: (!anonymous).then_some("insufficient_scope"),
                description: (!anonymous).then_some(message),
                scope: Some(wanted.join(" ")),
                resource_metadata: oauth
                    .map(|o| crate::auth::oauth::resource_metadata_url(&o.audience)),
            })),
        })
    }

    /// Refuses a webhook registration past `[webhooks] max_registrations_per_principal`: each is
    /// an endpoint this server will call, so one principal's are bounded. (Counted before the task
    /// is written: calls at the same moment may pass the cap by their number.)
    async fn check_registrations(&self, peer: &Peer) -> Result<(), Failure> {
        let max = self.config.webhooks.max_registrations_per_principal;
        let registered = self
            .engine
            .store()
            .count_registrations(peer.name(), max)
            .await
            .map_err(internal)?;
        if registered < max {
            return Ok(());
        }
        tracing::info!(target: "mcp_tasks::audit", principal = %peer.name(), registered, limit = max, "webhook registration refused: too many");
        Err(ErrorObject::new(
            error_codes::TOO_MANY_TASKS,
            format!(
                "Too many webhook registrations: {registered} of your unfinished tasks have a webhook, the limit is {max}; wait for one to finish, or call without _meta[\"{}\"]",
                crate::webhooks::META_KEY
            ),
        )
        .with_data(json!({"registered": registered, "limit": max}))
        .into())
    }

    /// Starts a task for a call: running, or — when the arguments were invalid — finished at once with
    /// the validation message as its tool-error result (a caller that asked for a task gets one).
    /// Anonymous callers' idempotency keys and running-task counts are scoped to their session or
    /// address, so one client can neither collide with nor find another's tasks.
    pub(crate) async fn start_task(
        self: &Arc<Self>,
        peer: &Peer,
        start: TaskStart,
        cancel: &CancellationToken,
    ) -> Result<Started, Failure> {
        let scope = peer.anonymous_scope();
        if start.webhook.is_some() {
            self.check_registrations(peer).await?;
        }
        let registered = crate::webhooks::register(
            &self.config.webhooks,
            peer.name(),
            &start.tool,
            start.webhook.as_ref(),
        )
        .await
        .map_err(|e| Failure::from(ErrorObject::invalid_params(format!("tools/call: {e}"))))?;
        let scoped_key = start
            .idempotency_key
            .as_deref()
            .map(|k| scoped_key(peer, start.era, k));
        // Where tasks are counted and listed: the session; for an anonymous caller without one, the
        // scope that tells it apart (its address), so one client cannot use up the others' tasks.
        let session = match (&peer.session, &scope) {
            (Some(s), _) => Some(s.id.clone()),
            (None, Some(scope)) => Some(scope.clone()),
            (None, None) => None,
        };
        // What its run will hold here: the arguments (a task finished at once holds nothing).
        // Small ones are not counted: the cap on running tasks bounds them already, and counting
        // would cost every call.
        let bytes = super::limits::json_size(&start.arguments);
        let held =
            (start.invalid.is_none() && bytes >= super::limits::HELD_FROM_BYTES).then(|| {
                HeldLimit {
                    key: Self::held_key(peer),
                    bytes,
                    max: peer.principal.limits.max_running_bytes,
                }
            });
        let new = NewTask {
            tool: start.tool,
            arguments: start.arguments,
            owner: peer.name().to_string(),
            session: session.clone(),
            era: start.era.to_string(),
            request_meta: start.request_meta,
            requested_ttl_ms: start.ttl_ms,
            retain_after_finish_ms: start.retain_after_finish_ms,
            idempotency_key: scoped_key,
            active_limit: Some(ActiveLimit {
                max: peer.principal.limits.max_running_tasks,
                owner: peer.name().to_string(),
                // Anonymous callers share one principal: count per client address.
                among: peer.anonymous_among().unwrap_or(Among::All),
            }),
            held,
            webhooks: registered.targets,
        };
        // The create runs to its end in a task of its own: a call cancelled or dropped half-way must
        // not leave a stored task that nothing runs. A task whose call was cancelled meanwhile is
        // cancelled in turn; an operation is remembered under its call's id first, so a cancel that
        // comes later still reaches it.
        let server = self.clone();
        let (invalid, cancel) = (start.invalid, cancel.clone());
        let remember = start
            .cancellable_by
            .map(|id| (peer.session_id().to_string(), id));
        let submitted = tokio::spawn(tracing::Instrument::in_current_span(async move {
            let submitted = match invalid {
                Some(value) => {
                    server
                        .engine
                        .submit_finished(
                            new,
                            Outcome::Result {
                                value,
                                is_error: true,
                            },
                        )
                        .await
                }
                None => server.engine.submit(new).await,
            };
            if let Ok(s) = &submitted {
                if s.created && !s.record.status.is_terminal() {
                    if let Some(key) = remember {
                        server.operations.insert(key, s.record.id.clone());
                    }
                    if cancel.is_cancelled() {
                        let why = "cancelled with the call that started it".to_string();
                        let _ = server.engine.cancel(&s.record.id, Some(why)).await;
                    }
                }
            }
            submitted
        }))
        .await
        .map_err(|e| internal(JoinFailure(e.to_string())))?;
        if let Ok(s) = &submitted {
            // The request's span (see `Server::handle_request`) names the task it made or found.
            tracing::Span::current().record("task", s.record.id.as_str());
            if peer.session.is_some() && start.era != super::Era::Stateless.task_label() {
                // The reply to this request names the task (see `Server::reply_written`), also when
                // a retry finds it: that releases messages a lost first reply left waiting.
                let _ = super::CREATED.try_with(|c| c.set(Some(s.record.id.clone())));
            }
        }
        let key = start.idempotency_key.as_deref().unwrap_or_default();
        let label = start.key_label;
        let reply = registered.reply;
        submitted.map(|s| Started {
            webhook: if s.created { reply } else { None },
            record: s.record,
        }).map_err(|e| match e {
            EngineError::Store(StoreError::IdempotencyConflict { .. }) => ErrorObject::invalid_params(format!(
                "{label} {key:?} was already used for a different call; use a new one for new work"
            ))
            .into(),
            EngineError::Store(StoreError::TooManyActive { active, max }) => ErrorObject::new(
                error_codes::TOO_MANY_TASKS,
                format!("Too many unfinished tasks: {active} running, the limit is {max}; wait for one to finish or cancel one"),
            )
            .with_data(json!({"running": active, "limit": max}))
            .into(),
            EngineError::TooMuchHeld { held, adding, max, .. } => {
                tracing::info!(target: "mcp_tasks::audit", principal = %peer.name(), held, adding, limit = max, "task refused: its running tasks hold too much");
                ErrorObject::new(
                    error_codes::TOO_MANY_TASKS,
                    format!("Too much held by running tasks: their arguments take {held} bytes and this call's {adding} more; the limit is {max} (max_running_bytes); wait for one to finish, or send less"),
                )
                .with_data(json!({"heldBytes": held, "addingBytes": adding, "limitBytes": max}))
                .into()
            }
            other => internal(other),
        })
    }
}

/// Refuses a webhook registration on a call that runs without a task (`how` says what would make
/// one): its webhook would never be sent, and the caller should hear so rather than wait for it.
pub(crate) fn no_webhook_without_task(req_meta: Option<&Value>, how: &str) -> Result<(), Failure> {
    if req_meta
        .and_then(|m| m.get(crate::webhooks::META_KEY))
        .is_none()
    {
        return Ok(());
    }
    Err(ErrorObject::invalid_params(format!(
        "tools/call: _meta[\"{}\"] registers a webhook on the call's task, and this call runs without one: {how}",
        crate::webhooks::META_KEY
    ))
    .into())
}

/// The isError result a call with invalid arguments gets: validation errors are tool errors the model
/// can correct (SEP-1303), not protocol errors.
pub(crate) fn invalid_arguments(tool: &RegisteredTool, arguments: &Value) -> Option<Value> {
    tool.validate(arguments).err().map(|problems| {
        json!({
            "content": [{"type": "text", "text": format!("Invalid arguments for tool {}: {problems}", tool.tool.name)}],
            "isError": true,
        })
    })
}

/// The idempotency key of a call: our own `_meta` key, or `_meta.taskId` as some guides write it.
pub(crate) fn idempotency_key(meta: Option<&Value>) -> Result<Option<String>, Failure> {
    let Some(meta) = meta else { return Ok(None) };
    for key in [meta::IDEMPOTENCY_KEY, meta::LEGACY_TASK_ID_KEY] {
        match meta.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s.starts_with("operation:") => {
                return Err(ErrorObject::invalid_params(format!(
                    "tools/call: _meta[{key:?}] must not start with \"operation:\" (kept for operation tokens)"
                ))
                .into());
            }
            Some(Value::String(s)) if !s.is_empty() && s.len() <= 256 => {
                return Ok(Some(s.clone()))
            }
            Some(_) => {
                return Err(ErrorObject::invalid_params(format!(
                    "tools/call: _meta[{key:?}] must be a non-empty string of at most 256 characters"
                ))
                .into());
            }
        }
    }
    Ok(None)
}

/// The stored form of a client's key: its wire's namespace (operation tokens and idempotency keys never
/// collide), and for an anonymous caller its session or address, so one client can neither collide
/// with nor find another's tasks through a guessable key.
pub(crate) fn scoped_key(peer: &Peer, era: &str, key: &str) -> String {
    let key = if era == super::ASYNC_TOOLS_LABEL {
        format!("operation:{key}")
    } else {
        key.to_string()
    };
    match peer.anonymous_scope() {
        Some(s) => format!("{s}:{key}"),
        None => key,
    }
}
