//! Calling a tool (as a task when the server offers it) and following a task to its end on either
//! wire: poll at the server's interval, take what the server pushes, answer its questions, cancel.

use mcp_tasks_protocol::jsonrpc::Notification;
use mcp_tasks_protocol::mcp_2025::TaskSupport;
use mcp_tasks_protocol::meta;
use serde_json::{json, Map, Value};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::client::{Client, Scope};
use crate::error::{ClientError, Result};
use crate::input::InputHandler;
use crate::task::{TaskOutcome, TaskRef, TaskState, TaskStatus};
use crate::wire::Wire;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Poll interval when the server gives none.
const DEFAULT_POLL: Duration = Duration::from_secs(1);
/// Bounds on the server's poll interval (a zero would spin; an hour would look hung).
const MIN_POLL: Duration = Duration::from_millis(50);
const MAX_POLL: Duration = Duration::from_secs(30);
/// Consecutive connection failures after which waiting gives up.
const MAX_FAILURES: u32 = 10;
/// Multi-round-trip rounds a plain 2026 call may take.
const MAX_ROUNDS: usize = 10;
/// While the server pushes a task's state, `tasks/get` only this often (a missed notification
/// costs at most this long).
const PUSH_SAFETY_POLL: Duration = Duration::from_secs(15);

/// What happens while a call or task runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The task's state, as polled or pushed.
    Status(Box<TaskState>),
    /// A progress report (2025-11-25 `notifications/progress`, or a plain call's).
    Progress {
        /// Work done.
        progress: f64,
        /// Total work, when known.
        total: Option<f64>,
        /// A note, when given.
        message: Option<String>,
    },
    /// A log message the server sent.
    Log {
        /// Its level.
        level: String,
        /// Its data.
        data: Value,
    },
    /// The connection broke; the client tries again after `retry_in`.
    Retrying {
        /// What failed.
        error: String,
        /// When the next try is.
        retry_in: Duration,
    },
}

/// How to call a tool.
#[derive(Clone)]
pub struct CallOptions {
    /// Run it as a task when the server offers that (default); `false` makes a plain call.
    pub as_task: bool,
    /// Retention the client asks for (2025-11-25 only: on 2026-07-28 the server decides).
    pub ttl_ms: Option<u64>,
    /// The idempotency key of the create; one is made when `None`. A create retried after a
    /// connection error carries the same key, so a server that honours keys starts one job.
    pub idempotency_key: Option<String>,
    /// Answers the questions the server asks during this call (in place of the connection's
    /// handler): a gateway sends them to the task the call belongs to.
    pub input: Option<Arc<dyn InputHandler>>,
    /// Cancels the call: the server is told (`notifications/cancelled`) and the call ends with
    /// [`ClientError::Cancelled`].
    pub cancel: Option<CancellationToken>,
    /// Have the server POST the task's events to a URL (mcp-tasks servers: the experimental
    /// capability `io.github.mcp-tasks/webhooks`). Only a task call can register one.
    pub webhook: Option<Webhook>,
}

/// A webhook registration: where the task's events go, which, and the secret that signs them
/// (Standard Webhooks). Without a secret the server makes one and tells it once
/// ([`TaskHandle::webhook`]).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Webhook {
    /// The endpoint (https, unless the server allows its host).
    pub url: String,
    /// Event types (`task.completed`, `task.failed`, `task.cancelled`, `task.input_required`);
    /// empty for every one.
    pub events: Vec<String>,
    /// The signing secret (`whsec_…`), or `None` for one the server makes.
    pub secret: Option<String>,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("url", &self.url)
            .field("events", &self.events)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Webhook {
    fn registration(&self) -> Value {
        let mut r = Map::new();
        r.insert("url".into(), json!(self.url));
        if !self.events.is_empty() {
            r.insert("events".into(), json!(self.events));
        }
        if let Some(s) = &self.secret {
            r.insert("secret".into(), json!(s));
        }
        Value::Object(r)
    }
}

impl Default for CallOptions {
    fn default() -> Self {
        CallOptions {
            as_task: true,
            ttl_ms: None,
            idempotency_key: None,
            input: None,
            cancel: None,
            webhook: None,
        }
    }
}

impl std::fmt::Debug for CallOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallOptions")
            .field("as_task", &self.as_task)
            .field("ttl_ms", &self.ttl_ms)
            .field("idempotency_key", &self.idempotency_key)
            .field("input", &self.input.is_some())
            .field("cancel", &self.cancel.is_some())
            .field("webhook", &self.webhook)
            .finish()
    }
}

/// What a call gave back.
#[derive(Debug)]
pub enum Called {
    /// The server runs it as a task.
    Task(Box<TaskHandle>),
    /// The server answered at once.
    Done(TaskOutcome),
}

/// A random key for idempotency and progress tokens.
fn random_key() -> String {
    let n: u128 = rand::random();
    format!("{n:032x}")
}

fn note_event(n: &Notification, token: Option<&str>) -> Option<Event> {
    let p = n.params.as_ref()?;
    match n.method.as_str() {
        "notifications/tasks/status" | "notifications/tasks" => TaskState::from_value(p)
            .ok()
            .map(|s| Event::Status(Box::new(s))),
        "notifications/progress" => {
            let theirs = p.get("progressToken");
            if token.is_some_and(|t| theirs.and_then(Value::as_str) != Some(t)) {
                return None;
            }
            Some(Event::Progress {
                progress: p.get("progress").and_then(Value::as_f64)?,
                total: p.get("total").and_then(Value::as_f64),
                message: p.get("message").and_then(Value::as_str).map(str::to_string),
            })
        }
        "notifications/message" => Some(Event::Log {
            level: p
                .get("level")
                .and_then(Value::as_str)
                .unwrap_or("info")
                .to_string(),
            data: p.get("data").cloned().unwrap_or(Value::Null),
        }),
        _ => None,
    }
}

impl Client {
    /// Calls tool `name` with `arguments`: as a task when the server offers it for this tool
    /// (and `options.as_task`), else plainly. `on_event` sees progress and logs of a plain call
    /// and of the create.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Value,
        options: &CallOptions,
        on_event: &(dyn Fn(&Event) + Sync),
    ) -> Result<Called> {
        let inner = &self.inner;
        let as_task = options.as_task && inner.tasks && self.tool_allows_task(name).await?;
        let key = options.idempotency_key.clone().unwrap_or_else(random_key);
        let token = random_key();
        let mut meta_map = Map::new();
        meta_map.insert(meta::PROGRESS_TOKEN.into(), json!(token));
        if as_task {
            meta_map.insert(meta::IDEMPOTENCY_KEY.into(), json!(key));
        }
        if let Some(w) = &options.webhook {
            if !as_task {
                return Err(ClientError::Unsupported(format!(
                    "a webhook is registered with a task, and {name} is not called as one here"
                )));
            }
            if !self.offers_webhooks() {
                return Err(ClientError::Unsupported(
                    "the server does not send webhooks (it declares no experimental io.github.mcp-tasks/webhooks capability)".into(),
                ));
            }
            meta_map.insert(meta::WEBHOOK.into(), w.registration());
        }
        let mut params = json!({"name": name, "arguments": arguments, "_meta": meta_map});
        if as_task && inner.wire == Wire::V2025 {
            params["task"] = match options.ttl_ms {
                Some(t) => json!({"ttl": t}),
                None => json!({}),
            };
        }
        let on_note = |n: &Notification| {
            if let Some(e) = note_event(n, Some(&token)) {
                on_event(&e);
            }
        };
        let mut rounds = 0;
        loop {
            let scope = Scope {
                input: options.input.clone(),
                cancel: options.cancel.clone(),
            };
            let r = self
                .create(&params, name, as_task, &on_note, &scope)
                .await?;
            let result_type = r.get("resultType").and_then(Value::as_str);
            let webhook = r
                .pointer("/_meta")
                .and_then(|m| m.get(meta::WEBHOOK))
                .cloned();
            if let Some(task) = r.get("task").filter(|_| inner.wire == Wire::V2025) {
                let state = TaskState::from_value(task)?;
                let mut handle =
                    TaskHandle::new(self.clone(), state, Some(name.into()), Some(token))
                        .with_input(options.input.clone());
                handle.webhook = webhook;
                return Ok(Called::Task(Box::new(handle)));
            }
            match result_type {
                Some("task") => {
                    let state = TaskState::from_value(&r)?;
                    let mut handle = TaskHandle::new(self.clone(), state, Some(name.into()), None)
                        .with_input(options.input.clone());
                    handle.webhook = webhook;
                    return Ok(Called::Task(Box::new(handle)));
                }
                Some("input_required") => {
                    rounds += 1;
                    if rounds > MAX_ROUNDS {
                        return Err(ClientError::protocol(format!(
                            "tools/call {name}: still asking for input after {MAX_ROUNDS} rounds"
                        )));
                    }
                    let asks = r
                        .get("inputRequests")
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_default();
                    let answers = self
                        .answer_all_with(options.input.as_deref(), &asks, &HashSet::new())
                        .await?;
                    params["inputResponses"] = Value::Object(answers);
                    match r.get("requestState") {
                        Some(s) => params["requestState"] = s.clone(),
                        None => {
                            if let Some(p) = params.as_object_mut() {
                                p.remove("requestState");
                            }
                        }
                    }
                }
                None | Some("complete") => {
                    let mut result = r;
                    if let Some(o) = result.as_object_mut() {
                        o.remove("resultType");
                    }
                    return Ok(Called::Done(TaskOutcome::of_result(result)));
                }
                Some(other) => {
                    return Err(ClientError::protocol(format!(
                        "tools/call {name}: unknown resultType {other:?}"
                    )))
                }
            }
        }
    }

    /// Whether `name` may run as a task: on 2025-11-25 its `taskSupport` says so; on 2026-07-28
    /// the server decides per call.
    async fn tool_allows_task(&self, name: &str) -> Result<bool> {
        if self.inner.wire != Wire::V2025 {
            return Ok(true);
        }
        let known = self
            .inner
            .tools
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(|tools| {
                tools
                    .iter()
                    .find(|t| t.name == name)
                    .map(|t| t.task_support)
            });
        if let Some(support) = known {
            return Ok(support != Some(TaskSupport::Forbidden));
        }
        // Not listed yet, or added since: list again.
        let tools = self.list_tools().await?;
        let tool = tools.iter().find(|t| t.name == name).ok_or_else(|| {
            ClientError::Unsupported(format!(
                "the server has no tool {name:?} (it has: {})",
                tools
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        Ok(tool.task_support != Some(TaskSupport::Forbidden))
    }

    /// One `tools/call`; a task-augmented one is retried after a connection error with the same
    /// idempotency key, when that cannot start a second job.
    async fn create(
        &self,
        params: &Value,
        name: &str,
        as_task: bool,
        on_note: &(dyn Fn(&Notification) + Sync),
        scope: &Scope,
    ) -> Result<Value> {
        let mut delay = Duration::from_millis(250);
        let mut tries = 0;
        loop {
            let r = self
                .inner
                .request_in(
                    "tools/call",
                    params.clone(),
                    Some(name),
                    as_task,
                    on_note,
                    scope,
                )
                .await;
            match r {
                Err(ClientError::Connection { not_sent, .. })
                    if tries < 4 && (not_sent || (as_task && self.inner.keys_honoured)) =>
                {
                    tries += 1;
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
                other => return other,
            }
        }
    }

    /// Answers every question of `asks` (key → `{method, params}`) not in `skip` with `handler`, or
    /// the connection's input handler when `None`. A refused sampling request cannot be sent back on
    /// this wire: it is an error here.
    async fn answer_all_with(
        &self,
        handler: Option<&dyn InputHandler>,
        asks: &Map<String, Value>,
        skip: &HashSet<String>,
    ) -> Result<Map<String, Value>> {
        let handler = handler.unwrap_or(&*self.inner.input);
        let mut answers = Map::new();
        for (key, ask) in asks {
            if skip.contains(key) {
                continue;
            }
            let method = ask
                .get("method")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let params = ask.get("params").cloned().unwrap_or(json!({}));
            match crate::input::answer(handler, method, &params).await {
                Ok(v) => {
                    answers.insert(key.clone(), v);
                }
                Err(e) => {
                    return Err(ClientError::Unsupported(format!(
                        "the server asks ({method}) for what this client does not answer: {}",
                        e.message
                    )))
                }
            }
        }
        Ok(answers)
    }
}

/// A task on a server: read its state, wait for its outcome, cancel it, or hand it to another
/// process as a [`TaskRef`].
pub struct TaskHandle {
    client: Client,
    first: TaskState,
    tool: Option<String>,
    progress_token: Option<String>,
    /// Answers the task's questions in place of the connection's handler.
    input: Option<Arc<dyn InputHandler>>,
    /// What the server said of the webhook this call registered.
    webhook: Option<Value>,
}

impl std::fmt::Debug for TaskHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskHandle")
            .field("task_id", &self.first.task_id)
            .field("wire", self.client.wire())
            .finish()
    }
}

impl TaskHandle {
    fn new(
        client: Client,
        first: TaskState,
        tool: Option<String>,
        progress_token: Option<String>,
    ) -> TaskHandle {
        TaskHandle {
            client,
            first,
            tool,
            progress_token,
            input: None,
            webhook: None,
        }
    }

    /// What the server said of the webhook the call registered (`url`, `events`, and `secret`
    /// when the server made it: this is the one time it is told), when it registered one.
    pub fn webhook(&self) -> Option<&Value> {
        self.webhook.as_ref()
    }

    /// Answers the task's questions with `input` instead of the connection's handler (a call's
    /// `CallOptions::input` comes along by itself).
    pub fn with_input(mut self, input: Option<Arc<dyn InputHandler>>) -> TaskHandle {
        self.input = input;
        self
    }

    /// A handle for task `task_id` on `client` (as from a reference).
    pub fn attach(client: &Client, task_id: &str) -> TaskHandle {
        let first = TaskState {
            task_id: task_id.to_string(),
            status: TaskStatus::Working,
            status_message: None,
            progress: None,
            progress_total: None,
            created_at: None,
            last_updated_at: None,
            ttl_ms: None,
            poll_interval_ms: None,
            result: None,
            error: None,
            input_requests: None,
        };
        TaskHandle::new(client.clone(), first, None, None)
    }

    /// The task's id.
    pub fn id(&self) -> &str {
        &self.first.task_id
    }

    /// The state the task had when this handle was made.
    pub fn first_state(&self) -> &TaskState {
        &self.first
    }

    /// The client this handle uses.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The reference a new process continues from.
    pub fn to_ref(&self) -> TaskRef {
        TaskRef {
            url: self.client.url(),
            wire: self.client.wire().version().to_string(),
            task_id: self.id().to_string(),
            session: match self.client.wire() {
                Wire::V2025 => self.client.session(),
                _ => None,
            },
            tool: self.tool.clone(),
        }
    }

    /// The task's current state (`tasks/get`).
    pub async fn get(&self) -> Result<TaskState> {
        TaskState::from_value(&self.about("tasks/get").await?)
    }

    /// A request about this task (`{taskId}`, routed by it).
    async fn about(&self, method: &str) -> Result<Value> {
        self.client
            .inner
            .request_raw(
                method,
                json!({"taskId": self.id()}),
                Some(self.id()),
                &|_| {},
            )
            .await
    }

    /// Sends the task the signal `name` carrying `payload` (the mcp-tasks extension method
    /// `io.github.mcp-tasks/signal`), under `key` when given (sending again with the same key is
    /// the same signal). Returns the server's answer: `{taskId, signal: {seq, name, at},
    /// duplicate}`.
    pub async fn signal(&self, name: &str, payload: Value, key: Option<&str>) -> Result<Value> {
        let mut params = json!({"taskId": self.id(), "name": name, "payload": payload});
        if let Some(key) = key {
            params["key"] = json!(key);
        }
        self.client
            .inner
            .request_raw(
                mcp_tasks_protocol::meta::SIGNAL_METHOD,
                params,
                Some(self.id()),
                &|_| {},
            )
            .await
    }

    /// Asks the server to cancel the task, and returns its state after.
    pub async fn cancel(&self) -> Result<TaskState> {
        let r = self.about("tasks/cancel").await?;
        match TaskState::from_value(&r) {
            Ok(s) => Ok(s),
            // 2026-07-28 answers with an empty acknowledgement.
            Err(_) => self.get().await,
        }
    }

    /// Waits until the task ends and returns how; `on_event` sees its states, progress and logs
    /// on the way. Questions go to the client's input handler.
    pub async fn wait(&self, on_event: &(dyn Fn(&Event) + Sync)) -> Result<TaskOutcome> {
        match self.client.wire() {
            Wire::V2025 => self.wait_2025(on_event).await,
            _ => self.wait_2026(on_event).await,
        }
    }

    /// The poll interval the server asks for in `s`, within sane bounds.
    fn interval(s: Option<&TaskState>) -> Duration {
        s.and_then(|s| s.poll_interval_ms)
            .map(Duration::from_millis)
            .unwrap_or(DEFAULT_POLL)
            .clamp(MIN_POLL, MAX_POLL)
    }

    /// 2026-07-28: `subscriptions/listen` pushes the task's state where the server offers it, with
    /// a slow `tasks/get` beside it as a safety net; without it (or after its stream drops) `tasks/get`
    /// at the server's interval. Questions are answered with `tasks/update`.
    async fn wait_2026(&self, on_event: &(dyn Fn(&Event) + Sync)) -> Result<TaskOutcome> {
        let id = self.id().to_string();
        let (push_tx, mut push_rx) = tokio::sync::mpsc::unbounded_channel::<TaskState>();
        let acked = AtomicBool::new(false);
        let on_note = |n: &Notification| {
            let Some(p) = n.params.as_ref() else { return };
            match n.method.as_str() {
                "notifications/subscriptions/acknowledged" => {
                    let ours = p
                        .pointer("/notifications/taskIds")
                        .and_then(Value::as_array)
                        .is_some_and(|ids| ids.iter().any(|i| i.as_str() == Some(id.as_str())));
                    acked.store(ours, Ordering::Relaxed);
                }
                "notifications/tasks" => {
                    if let Ok(s) = TaskState::from_value(p) {
                        if s.task_id == id {
                            let _ = push_tx.send(s);
                        }
                    }
                }
                _ => {}
            }
        };
        let listen_once = || {
            self.client.inner.request_raw(
                "subscriptions/listen",
                json!({"notifications": {"taskIds": [id]}}),
                None,
                &on_note,
            )
        };
        let mut listen = Box::pin(listen_once());
        let mut listening = true;
        let mut relisten_at: Option<tokio::time::Instant> = None;
        let mut listen_failures = 0u32;

        let mut answered: HashSet<String> = HashSet::new();
        let mut failures = 0;
        let mut pushed: Option<TaskState> = None;
        loop {
            let s = match pushed.take() {
                Some(s) => s,
                None => match self.get().await {
                    Ok(s) => {
                        failures = 0;
                        s
                    }
                    Err(e) if e.is_transient() && failures < MAX_FAILURES => {
                        failures += 1;
                        let retry_in = backoff(failures);
                        on_event(&Event::Retrying {
                            error: e.to_string(),
                            retry_in,
                        });
                        tokio::time::sleep(retry_in).await;
                        continue;
                    }
                    Err(e) => return Err(e),
                },
            };
            on_event(&Event::Status(Box::new(s.clone())));
            if let Some(outcome) = TaskOutcome::of_detailed(&s) {
                return Ok(outcome);
            }
            if let Some(asks) = s
                .input_requests
                .as_ref()
                .filter(|_| s.status == TaskStatus::InputRequired)
            {
                let answers = self
                    .client
                    .answer_all_with(self.input.as_deref(), asks, &answered)
                    .await?;
                if !answers.is_empty() {
                    let keys: Vec<String> = answers.keys().cloned().collect();
                    self.client
                        .inner
                        .request_raw(
                            "tasks/update",
                            json!({"taskId": self.id(), "inputResponses": answers}),
                            Some(self.id()),
                            &|_| {},
                        )
                        .await?;
                    answered.extend(keys);
                    continue;
                }
            }
            // Pushed states make polling a safety net; a dropped stream makes it the mechanism.
            let interval = Self::interval(Some(&s));
            let pushing = listening && acked.load(Ordering::Relaxed);
            let wait = if pushing {
                interval.max(PUSH_SAFETY_POLL)
            } else {
                interval
            };
            if let Some(at) = relisten_at.filter(|at| *at <= tokio::time::Instant::now()) {
                let _ = at;
                relisten_at = None;
                listen = Box::pin(listen_once());
                listening = true;
            }
            tokio::select! {
                Some(p) = push_rx.recv() => pushed = Some(p),
                r = &mut listen, if listening => {
                    listening = false;
                    acked.store(false, Ordering::Relaxed);
                    // A server without subscriptions says so at once: do not ask again.
                    let unsupported = matches!(&r, Err(e) if e.rpc_code().is_some());
                    listen_failures += 1;
                    if !unsupported && listen_failures < MAX_FAILURES {
                        relisten_at = Some(tokio::time::Instant::now() + backoff(listen_failures));
                    }
                }
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// 2025-11-25: `tasks/result` blocks until the end, carrying the task's status and progress
    /// notifications and its questions; `tasks/get` at the poll interval meanwhile keeps the state
    /// current where the server pushes nothing. A stream that drops is opened again.
    async fn wait_2025(&self, on_event: &(dyn Fn(&Event) + Sync)) -> Result<TaskOutcome> {
        let token = self.progress_token.clone();
        let last = Mutex::new(Some(self.first.clone()));
        let on_note = |n: &Notification| {
            if let Some(e) = note_event(n, token.as_deref()) {
                if let Event::Status(s) = &e {
                    *last.lock().unwrap_or_else(|e| e.into_inner()) = Some((**s).clone());
                }
                on_event(&e);
            }
        };
        let mut failures = 0;
        loop {
            let result = {
                let scope = Scope {
                    input: self.input.clone(),
                    cancel: None,
                };
                let fut = self.client.inner.request_in(
                    "tasks/result",
                    json!({"taskId": self.id()}),
                    Some(self.id()),
                    true,
                    &on_note,
                    &scope,
                );
                tokio::pin!(fut);
                loop {
                    let every =
                        Self::interval(last.lock().unwrap_or_else(|e| e.into_inner()).as_ref());
                    tokio::select! {
                        r = &mut fut => break r,
                        _ = tokio::time::sleep(every) => {
                            if let Ok(s) = self.get().await {
                                *last.lock().unwrap_or_else(|e| e.into_inner()) = Some(s.clone());
                                on_event(&Event::Status(Box::new(s)));
                            }
                        }
                    }
                }
            };
            match result {
                Ok(v) => {
                    let status = self.get().await.ok().map(|s| {
                        let st = s.status;
                        on_event(&Event::Status(Box::new(s)));
                        st
                    });
                    return Ok(match status {
                        Some(TaskStatus::Cancelled) => TaskOutcome::Cancelled { message: None },
                        _ => {
                            let mut v = v;
                            if let Some(o) = v.as_object_mut() {
                                o.remove("_meta");
                            }
                            TaskOutcome::of_result(v)
                        }
                    });
                }
                Err(ClientError::Rpc {
                    method,
                    code,
                    message,
                    data,
                }) => {
                    // The task's own error, or one about the request (an unknown task): the task's
                    // state tells which.
                    let s = self.get().await;
                    return match s {
                        Ok(s) if s.status == TaskStatus::Cancelled => {
                            on_event(&Event::Status(Box::new(s.clone())));
                            Ok(TaskOutcome::Cancelled {
                                message: s.status_message,
                            })
                        }
                        Ok(s) if s.status == TaskStatus::Failed => {
                            on_event(&Event::Status(Box::new(s)));
                            Ok(TaskOutcome::Failed {
                                code,
                                message,
                                data,
                            })
                        }
                        _ => Err(ClientError::Rpc {
                            method,
                            code,
                            message,
                            data,
                        }),
                    };
                }
                Err(e) if e.is_transient() && failures < MAX_FAILURES => {
                    failures += 1;
                    let retry_in = backoff(failures);
                    on_event(&Event::Retrying {
                        error: e.to_string(),
                        retry_in,
                    });
                    tokio::time::sleep(retry_in).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Wait before retry `n` (1-based): 0.5 s doubling to at most 30 s.
fn backoff(n: u32) -> Duration {
    Duration::from_millis(500u64.saturating_mul(1 << n.min(6).saturating_sub(1))).min(MAX_POLL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_stops() {
        assert_eq!(backoff(1), Duration::from_millis(500));
        assert_eq!(backoff(2), Duration::from_secs(1));
        assert_eq!(backoff(6), Duration::from_secs(16));
        assert_eq!(backoff(20), Duration::from_secs(16));
    }

    #[test]
    fn progress_of_other_requests_is_not_ours() {
        let n = |token: &str| Notification {
            method: "notifications/progress".into(),
            params: Some(json!({"progressToken": token, "progress": 1, "total": 4})),
        };
        assert!(note_event(&n("mine"), Some("mine")).is_some());
        assert!(note_event(&n("theirs"), Some("mine")).is_none());
        let status = Notification {
            method: "notifications/tasks/status".into(),
            params: Some(json!({"taskId": "t", "status": "working"})),
        };
        assert!(matches!(note_event(&status, None), Some(Event::Status(_))));
    }
}
