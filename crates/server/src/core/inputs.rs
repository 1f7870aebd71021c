//! Input requests, era-neutral: whether a client can be asked at all (its declared capabilities), a
//! question asked on a request's own stream, sending a task's question at most once per live stream,
//! and routing the client's answers back to the task or call that asked.

use mcp_tasks_engine::store::{AnswerError, Lookup};
use mcp_tasks_engine::{InputError, InputRecord, InputResponse, TaskRecord};
use mcp_tasks_protocol::jsonrpc::{ErrorObject, Message, Request, RequestId};
use serde_json::{json, Map, Value};
use std::sync::Arc;

use super::{internal, Failure, Peer, SentInput, Server};
use crate::core::streams::StreamSender;

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

/// The engine's check before a task sends an input request: the capabilities its client declared
/// (kept with the task when it was created).
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

/// The answer to an `elicitation/create` must be an `ElicitResult`.
fn check_answer_shape(method: &str, value: &Value) -> Result<(), String> {
    if method == "elicitation/create" {
        crate::tool::parse_elicit_result(value).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The client's task, when its answer to a question is a `CreateTaskResult`: its id and poll interval.
fn client_task_of(method: &str, value: &Value) -> Option<(String, std::time::Duration)> {
    if !matches!(method, "elicitation/create" | "sampling/createMessage") {
        return None;
    }
    let task = value.get("task")?;
    let id = task.get("taskId")?.as_str()?.to_string();
    let poll = task
        .get("pollInterval")
        .and_then(Value::as_u64)
        .unwrap_or(1_000)
        .clamp(100, 10_000);
    Some((id, std::time::Duration::from_millis(poll)))
}

/// How long one poll of a client's task may take before it is tried again.
const CLIENT_POLL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

fn unknown_request(key: &str) -> Failure {
    ErrorObject::invalid_params(format!(
        "no pending request of this server has id {}",
        RequestId::String(key.to_string())
    ))
    .into()
}

impl Server {
    /// Follows a question the client runs as its own task: `tasks/get` on the client's stream for
    /// this task at the client's poll interval, then `tasks/result`, whose answer is the question's.
    /// Ends when the answer is in, or the question or its task is gone. Lives in this process only:
    /// after a restart the task is recovered like any other interrupted one.
    pub(crate) fn follow_client_task(
        self: &Arc<Self>,
        session: String,
        key: String,
        task: String,
        client_task: String,
        mut poll: std::time::Duration,
    ) {
        let server = self.clone();
        tokio::spawn(async move {
            let ask = |method: &'static str| {
                let (server, session, task, client_task) = (
                    server.clone(),
                    session.clone(),
                    task.clone(),
                    client_task.clone(),
                );
                async move {
                    let (_, tx, _) = server.streams.pick(&session, &task)?;
                    let asked =
                        server.ask_on_stream(&session, &tx, method, json!({"taskId": client_task}));
                    tokio::time::timeout(CLIENT_POLL_TIMEOUT, asked)
                        .await
                        .ok()?
                        .ok()
                }
            };
            loop {
                tokio::time::sleep(poll).await;
                let still_asked = match server.engine.pending_inputs(&task).await {
                    Ok(p) => p.iter().any(|i| i.key == key && i.response.is_none()),
                    Err(_) => continue,
                };
                if !still_asked {
                    return;
                }
                // No stream of the client's open for this task right now: ask again later.
                let Some(state) = ask("tasks/get").await else {
                    continue;
                };
                let value = match state {
                    InputResponse::Result { value } => value,
                    // The client no longer knows its task: the question fails with its error.
                    error => {
                        let _ = server.engine.answer_input(&key, error).await;
                        return;
                    }
                };
                if let Some(p) = value.get("pollInterval").and_then(Value::as_u64) {
                    poll = std::time::Duration::from_millis(p.clamp(100, 10_000));
                }
                let status = value.get("status").and_then(Value::as_str).unwrap_or("");
                if !matches!(status, "completed" | "failed" | "cancelled") {
                    continue;
                }
                let Some(outcome) = ask("tasks/result").await else {
                    continue;
                };
                let answer = match outcome {
                    InputResponse::Result { mut value } => {
                        if let Some(o) = value.as_object_mut() {
                            o.remove("_meta");
                        }
                        InputResponse::Result { value }
                    }
                    error => error,
                };
                let method = if value.get("status") == Some(&json!("cancelled")) {
                    "cancelled"
                } else {
                    "answered"
                };
                match server.engine.answer_input(&key, answer).await {
                    Ok(_) => {
                        tracing::info!(target: "mcp_tasks::audit", task = %task, request = %key, client_task = %client_task, outcome = method, "input answered by a client task")
                    }
                    Err(e) => {
                        tracing::debug!(task = %task, request = %key, error = ?e, "a client task's answer was not used")
                    }
                }
                return;
            }
        });
    }

    /// Asks a question of the client that made a plain call, on that call's stream, and waits for the
    /// answer. Only the session that made the call can answer it.
    pub(crate) async fn ask_on_stream(
        &self,
        session: &str,
        out: &StreamSender,
        method: &str,
        params: Value,
    ) -> Result<InputResponse, InputError> {
        let key = mcp_tasks_engine::random_id();
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.inline_inputs
            .insert(key.clone(), (session.to_string(), tx));
        // Removes the pending entry however this ends (answered, cancelled, stream closed).
        struct Forget<'a>(&'a Server, String);
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                self.0.inline_inputs.remove(&self.1);
            }
        }
        let _forget = Forget(self, key.clone());
        let request = Message::Request(Request {
            id: RequestId::String(key),
            method: method.to_string(),
            params: Some(params),
        });
        if out.send(request).await.is_err() {
            return Err(InputError::Cancelled);
        }
        rx.await.map_err(|_| InputError::Cancelled)
    }

    /// Sends a task's input request `key` at most once per live stream: unless it already went out on a
    /// stream that is still open, runs `send` (which returns the stream it used) and records that
    /// stream. A `tasks/result` opening at the same moment as the router therefore never sends it too.
    pub(crate) fn claim_input(
        &self,
        key: &str,
        session: &str,
        task: &str,
        send: impl FnOnce() -> Option<u64>,
    ) -> Option<u64> {
        use dashmap::mapref::entry::Entry;
        let sent = |stream| SentInput {
            session: session.to_string(),
            stream,
            task: task.to_string(),
        };
        match self.sent_inputs.entry(key.to_string()) {
            Entry::Occupied(e) if self.streams.is_live(&e.get().session, e.get().stream) => None,
            Entry::Occupied(mut e) => {
                let stream = send()?;
                e.insert(sent(stream));
                Some(stream)
            }
            Entry::Vacant(e) => {
                let stream = send()?;
                e.insert(sent(stream));
                Some(stream)
            }
        }
    }

    /// Sends a task's input request on stream `stream` of `session` unless it is already out on a
    /// stream that is still open, here or on another replica: like [`Server::claim_input`], with the
    /// record of where it went kept in the store when replicas share one (the hand-over there is
    /// atomic, so two replicas never both send it). Returns whether `send` ran and succeeded.
    pub(crate) async fn claim_input_shared(
        &self,
        key: &str,
        session: &str,
        task: &str,
        stream: u64,
        send: impl FnOnce() -> bool,
    ) -> bool {
        match self.claim_ctx() {
            Some(ctx) => claim_shared(ctx, key, session, task, stream, send).await,
            None => self
                .claim_input(key, session, task, || send().then_some(stream))
                .is_some(),
        }
    }

    /// Whether other replicas may hold this server's clients' streams (a shared store with a relay).
    pub(crate) fn shares_streams(&self) -> bool {
        self.peers.is_some()
    }

    /// A copy of what [`claim_shared`] needs, for a claim made off the router's path.
    pub(crate) fn claim_ctx(&self) -> Option<ClaimCtx> {
        Some(ClaimCtx {
            store: self.engine.store().clone(),
            peers: self.peers.clone()?,
            streams: self.streams.clone(),
            sent: self.sent_inputs.clone(),
        })
    }

    /// Forgets where input requests went once they no longer need sending: answered, or their task
    /// finished.
    pub(crate) fn forget_sent(&self, event: &mcp_tasks_engine::TaskEvent) {
        use mcp_tasks_engine::TaskEvent;
        match event {
            TaskEvent::InputAnswered { input, .. } => {
                self.sent_inputs.remove(&input.key);
            }
            TaskEvent::Changed(t) if t.status.is_terminal() => {
                self.sent_inputs.retain(|_, sent| sent.task != t.id);
                if t.era == super::ASYNC_TOOLS_LABEL {
                    self.forget_operation(&t.id);
                }
            }
            _ => {}
        }
    }

    /// A task's input requests still waiting for an answer.
    pub(crate) async fn pending_inputs(&self, task: &str) -> Result<Vec<InputRecord>, Failure> {
        self.engine.pending_inputs(task).await.map_err(internal)
    }

    /// A client's answer to request `key` of this server: a question of a plain call of the caller's
    /// session, or of one of the caller's tasks. Unknown, foreign, malformed or late answers change
    /// nothing and are refused.
    pub(crate) async fn answer(
        self: &Arc<Self>,
        peer: &Peer,
        key: &str,
        response: InputResponse,
    ) -> Result<(), Failure> {
        if let Some((_, (_, tx))) = self
            .inline_inputs
            .remove_if(key, |_, (session, _)| session == peer.session_id())
        {
            let _ = tx.send(response);
            return Ok(());
        }
        // The answer must come from the task's owner; anything else is indistinguishable from unknown.
        let input = self
            .engine
            .store()
            .get_input(key)
            .await
            .map_err(internal)?
            .ok_or_else(|| unknown_request(key))?;
        match self.engine.get(&input.task_id).await.map_err(internal)? {
            Lookup::Found(t) if t.owner == peer.name() => {}
            _ => return Err(unknown_request(key)),
        }
        if let InputResponse::Result { value } = &response {
            // The client runs the question as a task (it declared so, and was asked so): follow it.
            if let Some((client_task, poll)) = client_task_of(&input.method, value) {
                tracing::info!(target: "mcp_tasks::audit", task = %input.task_id, principal = %peer.name(), request = %key, client_task = %client_task, "input taken as a client task");
                self.follow_client_task(
                    peer.session_id().to_string(),
                    key.to_string(),
                    input.task_id.clone(),
                    client_task,
                    poll,
                );
                return Ok(());
            }
            check_answer_shape(&input.method, value).map_err(|e| {
                Failure::from(ErrorObject::invalid_params(format!(
                    "answer to {key:?} rejected: {e}"
                )))
            })?;
        }
        match self.engine.answer_input(key, response).await {
            Ok((task, _)) => {
                tracing::info!(target: "mcp_tasks::audit", task = %task.id, principal = %peer.name(), request = %key, "input answered");
                Ok(())
            }
            Err(AnswerError::Unknown) => Err(unknown_request(key)),
            Err(AnswerError::AlreadyAnswered) => Err(ErrorObject::invalid_params(format!(
                "request {key:?} was already answered; the first answer stands"
            ))
            .into()),
            Err(AnswerError::TaskEnded(status)) => Err(ErrorObject::invalid_params(format!(
                "request {key:?} belongs to a task that is already {status}; the answer was not used"
            ))
            .into()),
            Err(AnswerError::Store(e)) => Err(internal(e)),
        }
    }

    /// Answers several of a task's outstanding questions at once (the 2026-07-28 `tasks/update`). Every
    /// answer is checked first, so a malformed one rejects the update as a whole; keys that are not the
    /// task's outstanding questions are acknowledged and ignored.
    pub(crate) async fn answer_many(
        &self,
        peer: &Peer,
        task: &TaskRecord,
        responses: Map<String, Value>,
        method: &str,
    ) -> Result<(), Failure> {
        // The task's questions in one read, not one per answer.
        let open: std::collections::HashMap<String, InputRecord> =
            match self.engine.store().inputs(&task.id).await {
                Ok(inputs) => inputs
                    .into_iter()
                    .filter(|i| i.response.is_none())
                    .map(|i| (i.key.clone(), i))
                    .collect(),
                Err(e) => return Err(ErrorObject::internal(e.to_string()).into()),
            };
        let mut accepted = Vec::new();
        for (key, value) in responses {
            let Some(input) = open.get(&key) else {
                continue;
            };
            if let Err(why) = check_answer_shape(&input.method, &value) {
                return Err(ErrorObject::invalid_params(format!(
                    "{method}: inputResponses[{key:?}] is not an ElicitResult ({why}); nothing was applied"
                ))
                .into());
            }
            accepted.push((key, value));
        }
        for (key, value) in accepted {
            match self
                .engine
                .answer_input(&key, InputResponse::Result { value })
                .await
            {
                Ok(_) => {
                    tracing::info!(target: "mcp_tasks::audit", task = %task.id, principal = %peer.name(), request = %key, "input answered")
                }
                Err(e) => {
                    tracing::debug!(task = %task.id, request = %key, error = %e, "answer not taken")
                }
            }
        }
        Ok(())
    }
}

/// What a shared claim reads and writes.
#[derive(Clone)]
pub(crate) struct ClaimCtx {
    pub(crate) store: Arc<dyn mcp_tasks_engine::store::TaskStore>,
    pub(crate) peers: Arc<super::peers::Peers>,
    pub(crate) streams: crate::core::streams::Streams,
    pub(crate) sent: Arc<dashmap::DashMap<String, SentInput>>,
}

/// Claims input request `key` for stream `stream` of `session` in the store and sends it there; see
/// [`Server::claim_input_shared`]. A holder whose stream closed, or whose replica went silent, is
/// taken over.
pub(crate) async fn claim_shared(
    ctx: ClaimCtx,
    key: &str,
    session: &str,
    task: &str,
    stream: u64,
    send: impl FnOnce() -> bool,
) -> bool {
    use mcp_tasks_engine::store::Handed;
    if let Some(sent) = ctx.sent.get(key) {
        if ctx.streams.is_live(&sent.session, sent.stream) {
            return false;
        }
    }
    let mine = ctx.peers.holder(session, stream);
    let mut from: Option<String> = None;
    // A few rounds at most: each one loses only to a holder that changed in between.
    for _ in 0..4 {
        match ctx
            .store
            .hand_input(key, from.as_deref(), Some(&mine))
            .await
        {
            Ok(Handed::Done) => {
                // Recorded before it goes out: a stream closing meanwhile finds it and releases it.
                ctx.sent.insert(
                    key.to_string(),
                    SentInput {
                        session: session.to_string(),
                        stream,
                        task: task.to_string(),
                    },
                );
                if send() {
                    return true;
                }
                // The stream closed under us: let the next stream have it.
                ctx.sent.remove(key);
                let _ = ctx.store.hand_input(key, Some(&mine), None).await;
                return false;
            }
            Ok(Handed::Gone) => return false,
            Ok(Handed::Free) => from = None,
            Ok(Handed::HeldBy(holder)) => {
                if super::peers::Peers::same_stream(&holder, &mine)
                    || ctx
                        .peers
                        .holder_alive(&holder, |s, id| ctx.streams.is_live(s, id))
                {
                    return false;
                }
                from = Some(holder);
            }
            Err(e) => {
                tracing::warn!(request = %key, error = %e.chain(), "cannot record where an input request goes; not sending it now");
                return false;
            }
        }
    }
    false
}

/// Releases the input requests sent on a stream of this replica that closed, so that the next stream
/// of the client (on any replica) gets them.
pub(crate) fn release_stream(ctx: &ClaimCtx, session: &str, stream: u64) {
    let keys: Vec<String> = ctx
        .sent
        .iter()
        .filter(|e| e.value().stream == stream && e.value().session == session)
        .map(|e| e.key().clone())
        .collect();
    if keys.is_empty() {
        return;
    }
    let holder = ctx.peers.holder(session, stream);
    let store = ctx.store.clone();
    for key in &keys {
        ctx.sent.remove(key);
    }
    tokio::spawn(async move {
        for key in keys {
            if let Err(e) = store.hand_input(&key, Some(&holder), None).await {
                tracing::warn!(request = %key, error = %e.chain(), "cannot release an input request; other replicas take it over once its claim is stale");
            }
        }
    });
}
