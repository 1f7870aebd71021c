//! A connection to one MCP server: finds the wire, frames requests for it, and answers what the
//! server asks on the way.

use mcp_tasks_protocol::jsonrpc::{ErrorObject, Message, Notification, RequestId};
use mcp_tasks_protocol::mcp_2025::TaskSupport;
use mcp_tasks_protocol::{meta, version};
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use crate::error::{ClientError, Result};
use crate::hosted::Hosted;
use crate::http::Route;
use crate::input::{self, InputHandler, NoInput};
use crate::transport::{Endpoint, Transport};
use crate::wire::Wire;

pub use mcp_tasks_protocol::meta::IDEMPOTENCY_CAPABILITY;

/// How to connect.
#[derive(Clone)]
pub struct ConnectOptions {
    /// This client's name, sent as `clientInfo`.
    pub client_name: String,
    /// This client's version.
    pub client_version: String,
    /// Answers the server's questions.
    pub input: Arc<dyn InputHandler>,
    /// Skip `server/discover` and speak 2025-11-25 (or older) through `initialize`.
    pub no_2026: bool,
    /// On 2025-11-25, let the server ask its questions as tasks this client runs (declared as
    /// `capabilities.tasks.requests.{elicitation.create, sampling.createMessage}` for what the input
    /// handler answers).
    pub host_tasks: bool,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            client_name: "mcp-tasks-client".into(),
            client_version: env!("CARGO_PKG_VERSION").into(),
            input: Arc::new(NoInput),
            no_2026: false,
            host_tasks: true,
        }
    }
}

impl std::fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("client_name", &self.client_name)
            .field("no_2026", &self.no_2026)
            .finish_non_exhaustive()
    }
}

/// What one request brings of its own: an input handler for the questions the server asks while it
/// runs (in place of the connection's), and a token that cancels it.
#[derive(Clone, Default)]
pub(crate) struct Scope {
    pub(crate) input: Option<Arc<dyn InputHandler>>,
    pub(crate) cancel: Option<tokio_util::sync::CancellationToken>,
}

/// A tool as a server lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolInfo {
    /// Its name.
    pub name: String,
    /// Its description, if any.
    pub description: Option<String>,
    /// The JSON schema of its arguments.
    pub input_schema: Value,
    /// 2025-11-25 `execution.taskSupport`; `None` on wires where the server decides per call.
    pub task_support: Option<TaskSupport>,
    /// Its display title, if any.
    pub title: Option<String>,
    /// The JSON schema of its `structuredContent`, if any.
    pub output_schema: Option<Value>,
    /// Its behaviour hints, if any.
    pub annotations: Option<Value>,
}

pub(crate) struct Inner {
    pub(crate) transport: Transport,
    pub(crate) wire: Wire,
    pub(crate) tasks: bool,
    pub(crate) keys_honoured: bool,
    pub(crate) server_info: Value,
    pub(crate) capabilities: Value,
    pub(crate) input: Arc<dyn InputHandler>,
    /// The tools as last listed (a call reads a tool's task support there instead of listing again).
    pub(crate) tools: std::sync::Mutex<Option<Vec<ToolInfo>>>,
    hosted: Arc<Hosted>,
    options: ConnectOptions,
    next_id: AtomicI64,
    /// List changes the server announced (the notification's method).
    changes: tokio::sync::broadcast::Sender<String>,
}

/// A connection to an MCP server (Streamable HTTP or stdio). Cheap to clone.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.inner.transport.url())
            .field("wire", &self.inner.wire)
            .field("tasks", &self.inner.tasks)
            .finish()
    }
}

impl Client {
    /// Connects and finds the wire: `server/discover` offering the tasks extension → 2026-07-28;
    /// else `initialize` → 2025-11-25 (tasks when the server declares them) or an older revision.
    pub async fn connect(endpoint: &Endpoint, options: ConnectOptions) -> Result<Client> {
        let mut discovered: Option<Value> = None;
        let changes = tokio::sync::broadcast::channel(16).0;
        let http = Transport::open(endpoint, &changes)?;
        let http = if options.no_2026 {
            http
        } else {
            let mut probe = Inner::new(http, Wire::V2026, options.clone(), changes.clone());
            // A server that does not know the method may say so at length on stderr (the Python
            // SDK v1 logs a validation error per request type it tried): at debug, not info.
            probe.transport.quiet_stderr(true);
            let discovered_now = probe
                .request_raw("server/discover", json!({}), None, &|_| {})
                .await;
            probe.transport.quiet_stderr(false);
            match discovered_now {
                Ok(r) => {
                    let offers_2026 = r
                        .get("supportedVersions")
                        .and_then(Value::as_array)
                        .is_some_and(|v| v.iter().any(|x| x == version::V2026_07_28));
                    let caps = r.get("capabilities").cloned().unwrap_or(json!({}));
                    if offers_2026 && caps["extensions"].get(meta::TASKS_EXTENSION).is_some() {
                        probe.tasks = true;
                        probe.keys_honoured = honours_keys(&caps);
                        probe.server_info = r
                            .get("_meta")
                            .and_then(|m| m.get(meta::SERVER_INFO))
                            .cloned()
                            .or_else(|| r.get("serverInfo").cloned())
                            .unwrap_or(Value::Null);
                        probe.capabilities = caps;
                        return Ok(Client {
                            inner: Arc::new(probe),
                        });
                    }
                    if offers_2026 {
                        discovered = Some(caps);
                    }
                }
                // Not a 2026 server (the method is unknown, or it wants a session): try initialize.
                Err(e @ ClientError::Connection { .. }) => return Err(e),
                Err(_) => {}
            }
            probe.transport
        };
        let mut inner = Inner::new(http, Wire::V2025, options.clone(), changes);
        match inner.initialize().await {
            Ok(()) => Ok(Client {
                inner: Arc::new(inner),
            }),
            Err(e) => match discovered {
                // A 2026 server without the tasks extension and without sessions: plain calls.
                Some(caps) => {
                    inner.transport.set_session(None);
                    inner.wire = Wire::V2026;
                    inner.tasks = false;
                    inner.capabilities = caps;
                    Ok(Client {
                        inner: Arc::new(inner),
                    })
                }
                None => Err(e),
            },
        }
    }

    /// Connects to continue with an existing task: the wire and (2025-11-25 over HTTP) session the
    /// reference names, without a new handshake. A stdio server is a new process: on 2025-11-25 it
    /// gets a new session through `initialize`.
    pub async fn resume(
        endpoint: &Endpoint,
        wire: Wire,
        session: Option<String>,
        options: ConnectOptions,
    ) -> Result<Client> {
        let changes = tokio::sync::broadcast::channel(16).0;
        let transport = Transport::open(endpoint, &changes)?;
        let mut inner = Inner::new(transport, wire.clone(), options, changes);
        inner.tasks = true;
        if wire == Wire::V2025 {
            if matches!(endpoint, Endpoint::Stdio(_)) {
                inner.initialize().await?;
            } else {
                inner
                    .transport
                    .set_version(Some(version::V2025_11_25.into()));
                inner.transport.set_session(session);
            }
        }
        Ok(Client {
            inner: Arc::new(inner),
        })
    }

    /// The wire this connection speaks.
    pub fn wire(&self) -> &Wire {
        &self.inner.wire
    }

    /// Whether the server runs tools as tasks on this wire.
    pub fn has_tasks(&self) -> bool {
        self.inner.tasks
    }

    /// The MCP endpoint (`stdio:COMMAND` for a stdio server).
    pub fn url(&self) -> String {
        self.inner.transport.url()
    }

    /// The 2025-11-25 session id, if any.
    pub fn session(&self) -> Option<String> {
        self.inner.transport.session()
    }

    /// The server's `Implementation` (name, version), when it said.
    pub fn server_info(&self) -> &Value {
        &self.inner.server_info
    }

    /// The server's capabilities.
    pub fn capabilities(&self) -> &Value {
        &self.inner.capabilities
    }

    /// Sends a request and returns its result; notifications that arrive on the way go to
    /// `on_note`, and the server's questions to the input handler.
    pub async fn request(
        &self,
        method: &str,
        params: Value,
        on_note: &(dyn Fn(&Notification) + Sync),
    ) -> Result<Value> {
        self.inner.request_raw(method, params, None, on_note).await
    }

    /// The server's tools (every page), asked afresh; the list is kept for [`Client::call_tool`].
    pub async fn list_tools(&self) -> Result<Vec<ToolInfo>> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..1000 {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let r = self.request("tools/list", params, &|_| {}).await?;
            let tools = r.get("tools").and_then(Value::as_array).ok_or_else(|| {
                ClientError::protocol("tools/list: the result has no tools array")
            })?;
            for t in tools {
                let Some(name) = t.get("name").and_then(Value::as_str) else {
                    continue;
                };
                let task_support = match self.inner.wire {
                    Wire::V2025 => Some(
                        t.pointer("/execution/taskSupport")
                            .and_then(|v| serde_json::from_value(v.clone()).ok())
                            .unwrap_or_default(),
                    ),
                    _ => None,
                };
                out.push(ToolInfo {
                    name: name.to_string(),
                    description: t
                        .get("description")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    input_schema: t
                        .get("inputSchema")
                        .cloned()
                        .unwrap_or(json!({"type": "object"})),
                    task_support,
                    title: t.get("title").and_then(Value::as_str).map(str::to_string),
                    output_schema: t.get("outputSchema").filter(|v| v.is_object()).cloned(),
                    annotations: t.get("annotations").filter(|v| v.is_object()).cloned(),
                });
            }
            match r.get("nextCursor").and_then(Value::as_str) {
                Some(c) if !c.is_empty() => cursor = Some(c.to_string()),
                _ => {
                    *self.inner.tools.lock().unwrap_or_else(|e| e.into_inner()) = Some(out.clone());
                    return Ok(out);
                }
            }
        }
        Err(ClientError::protocol("tools/list: more than 1000 pages"))
    }

    /// Resolves when the server is gone for good (a stdio server exited), with how it ended
    /// ([`ClientError::Exited`]: status and last stderr lines). Never resolves for an HTTP server,
    /// whose requests each connect anew.
    pub async fn closed(&self) -> ClientError {
        self.inner.transport.closed().await
    }

    /// The server's list changes as they are announced: the notification's method
    /// (`notifications/tools/list_changed`, …). A stdio server's arrive on their own; over HTTP they
    /// arrive while [`Client::follow_lists`] runs (or on a request's stream).
    pub fn list_changes(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.inner.changes.subscribe()
    }

    /// Listens for the server's list changes until the stream ends: on 2026-07-28 a
    /// `subscriptions/listen` for tool, prompt and resource list changes, on 2025-11-25 over HTTP
    /// the session's standalone stream (`GET`); over stdio they need no listening (it waits until
    /// the server exits). Call it again (after a pause) when it returns.
    pub async fn follow_lists(&self) -> Result<()> {
        let inner = &self.inner;
        match (&inner.transport, inner.wire.is_stateless()) {
            (Transport::Stdio(_), _) => {
                let _ = self.closed().await;
                Ok(())
            }
            (_, true) => {
                let filter = json!({"notifications": {
                    "toolsListChanged": true,
                    "promptsListChanged": true,
                    "resourcesListChanged": true,
                }});
                inner
                    .request_raw("subscriptions/listen", filter, None, &|_| {})
                    .await
                    .map(|_| ())
            }
            (Transport::Http(h), false) => {
                let mut stream = h.get_stream().await?;
                while let Some(m) = stream.next().await {
                    if let Message::Notification(n) = m? {
                        if crate::transport::is_list_change(&n.method) {
                            let _ = inner.changes.send(n.method.clone());
                        }
                    }
                }
                Ok(())
            }
        }
    }

    /// Ends a 2025-11-25 session (`DELETE`). A detached client leaves it open instead, so its tasks
    /// stay reachable.
    pub async fn close(&self) {
        self.inner.transport.end_session().await;
    }
}

impl Client {
    /// Whether the server sends webhooks on task events (mcp-tasks' experimental capability).
    pub fn offers_webhooks(&self) -> bool {
        self.inner
            .capabilities
            .pointer("/experimental")
            .and_then(|e| e.get(mcp_tasks_protocol::meta::WEBHOOKS_CAPABILITY))
            .is_some()
    }
}

fn honours_keys(caps: &Value) -> bool {
    caps.pointer("/experimental")
        .and_then(|e| e.get(IDEMPOTENCY_CAPABILITY))
        .is_some()
}

impl Inner {
    fn new(
        transport: Transport,
        wire: Wire,
        options: ConnectOptions,
        changes: tokio::sync::broadcast::Sender<String>,
    ) -> Inner {
        if wire.is_stateless() {
            transport.set_version(Some(version::V2026_07_28.into()));
        }
        Inner {
            transport,
            wire,
            tasks: false,
            keys_honoured: false,
            server_info: Value::Null,
            capabilities: Value::Null,
            input: options.input.clone(),
            tools: std::sync::Mutex::new(None),
            hosted: Arc::default(),
            options,
            next_id: AtomicI64::new(1),
            changes,
        }
    }

    /// The capabilities this client declares (the input it can answer).
    fn client_capabilities(&self, stateless: bool) -> Value {
        let mut caps = Map::new();
        if self.input.can_elicit() {
            caps.insert("elicitation".into(), json!({"form": {}, "url": {}}));
        }
        if self.input.can_sample() {
            caps.insert("sampling".into(), json!({}));
        }
        if stateless {
            caps.insert("extensions".into(), json!({meta::TASKS_EXTENSION: {}}));
        } else if self.options.host_tasks && (self.input.can_elicit() || self.input.can_sample()) {
            let mut requests = Map::new();
            if self.input.can_elicit() {
                requests.insert("elicitation".into(), json!({"create": {}}));
            }
            if self.input.can_sample() {
                requests.insert("sampling".into(), json!({"createMessage": {}}));
            }
            caps.insert(
                "tasks".into(),
                json!({"list": {}, "cancel": {}, "requests": requests}),
            );
        }
        Value::Object(caps)
    }

    async fn initialize(&mut self) -> Result<()> {
        self.transport.set_version(None);
        let params = json!({
            "protocolVersion": version::V2025_11_25,
            "capabilities": self.client_capabilities(false),
            "clientInfo": {"name": self.options.client_name, "version": self.options.client_version},
        });
        let r = self
            .request_raw("initialize", params, None, &|_| {})
            .await?;
        let v = r
            .get("protocolVersion")
            .and_then(Value::as_str)
            .ok_or_else(|| ClientError::protocol("initialize: the result has no protocolVersion"))?
            .to_string();
        let caps = r.get("capabilities").cloned().unwrap_or(json!({}));
        self.tasks =
            v == version::V2025_11_25 && caps.pointer("/tasks/requests/tools/call").is_some();
        self.keys_honoured = honours_keys(&caps);
        self.wire = match Wire::from_version(&v) {
            Some(Wire::V2025) => Wire::V2025,
            _ => Wire::Legacy(v.clone()),
        };
        self.server_info = r.get("serverInfo").cloned().unwrap_or(Value::Null);
        self.capabilities = caps;
        self.transport.set_version(Some(v));
        self.notify("notifications/initialized", json!({})).await
    }

    /// The answer to a request the server sent: a question (as a task this client runs, when the
    /// server asks that way and the client said it may), a request about such a task, or a ping.
    async fn answer_server(&self, method: &str, params: Value) -> Result<Value, ErrorObject> {
        let hosting = self.options.host_tasks && !self.wire.is_stateless();
        let can = match method {
            "elicitation/create" => self.input.can_elicit(),
            "sampling/createMessage" => self.input.can_sample(),
            _ => false,
        };
        if hosting && can && params.get("task").is_some_and(Value::is_object) {
            return Ok(self.hosted.create(self.input.clone(), method, params));
        }
        if hosting
            && matches!(
                method,
                "tasks/get" | "tasks/result" | "tasks/list" | "tasks/cancel"
            )
        {
            return self.hosted.serve(method, &params).await;
        }
        input::answer(&*self.input, method, &params).await
    }

    fn next_id(&self) -> RequestId {
        RequestId::Number(self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// `params` with what this wire puts in every request's `_meta`; `declare_tasks` declares the
    /// tasks extension (2026-07-28), which lets the server answer a call with a task.
    fn framed(&self, mut params: Value, declare_tasks: bool) -> Value {
        if self.wire.is_stateless() {
            if !params.is_object() {
                params = json!({});
            }
            let m = params.as_object_mut().and_then(|p| {
                p.entry("_meta")
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
            });
            if let Some(m) = m {
                m.insert(meta::PROTOCOL_VERSION.into(), json!(version::V2026_07_28));
                m.insert(
                    meta::CLIENT_CAPABILITIES.into(),
                    self.client_capabilities(declare_tasks),
                );
                m.insert(
                    meta::CLIENT_INFO.into(),
                    json!({"name": self.options.client_name, "version": self.options.client_version}),
                );
            }
        }
        params
    }

    pub(crate) async fn notify(&self, method: &str, params: Value) -> Result<()> {
        let body = Message::notification(method, self.framed(params, true)).to_value();
        let route = self
            .wire
            .is_stateless()
            .then_some(Route { method, name: None });
        let mut ex = self.transport.post(&body, route, method).await?;
        while ex.next().await.is_some() {}
        Ok(())
    }

    /// One request, framed for the wire; `name` is the `Mcp-Name` routing value (a tool or a task).
    pub(crate) async fn request_raw(
        &self,
        method: &str,
        params: Value,
        name: Option<&str>,
        on_note: &(dyn Fn(&Notification) + Sync),
    ) -> Result<Value> {
        self.request_framed(method, params, name, true, on_note)
            .await
    }

    /// [`Inner::request_raw`], saying whether a 2026 request declares the tasks extension.
    pub(crate) async fn request_framed(
        &self,
        method: &str,
        params: Value,
        name: Option<&str>,
        declare_tasks: bool,
        on_note: &(dyn Fn(&Notification) + Sync),
    ) -> Result<Value> {
        self.request_in(
            method,
            params,
            name,
            declare_tasks,
            on_note,
            &Scope::default(),
        )
        .await
    }

    /// [`Inner::request_framed`] within `scope`: its own input handler for what the server asks on
    /// the way, and a token that cancels the request (the server is told).
    pub(crate) async fn request_in(
        &self,
        method: &str,
        params: Value,
        name: Option<&str>,
        declare_tasks: bool,
        on_note: &(dyn Fn(&Notification) + Sync),
        scope: &Scope,
    ) -> Result<Value> {
        let id = self.next_id();
        let body = json!({
            "jsonrpc": "2.0",
            "id": id.to_value(),
            "method": method,
            "params": self.framed(params, declare_tasks),
        });
        let route = self.wire.is_stateless().then_some(Route { method, name });
        let mut ex = self.transport.post(&body, route, method).await?;
        let cancelled = async {
            match &scope.cancel {
                Some(t) => t.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(cancelled);
        loop {
            let next = tokio::select! {
                m = ex.next() => m,
                () = &mut cancelled => {
                    let _ = self
                        .notify(
                            "notifications/cancelled",
                            json!({"requestId": id.to_value(), "reason": "cancelled by the client"}),
                        )
                        .await;
                    return Err(ClientError::Cancelled(method.to_string()));
                }
            };
            let Some(m) = next else { break };
            match m? {
                Message::Response(r) if r.id == id => return Ok(r.result),
                // An exchange carries the answers to this request only; some servers answer what
                // they refuse under an id of their own (the Python SDK's "server-error").
                Message::Error(e) => {
                    return Err(ClientError::Rpc {
                        method: method.to_string(),
                        code: e.error.code,
                        message: e.error.message,
                        data: e.error.data,
                    });
                }
                Message::Request(r) => {
                    let params = r.params.clone().unwrap_or(json!({}));
                    let answer = match &scope.input {
                        Some(h) if input::is_question(&r.method) => {
                            input::answer(&**h, &r.method, &params).await
                        }
                        _ => self.answer_server(&r.method, params.clone()).await,
                    };
                    if !input::is_question(&r.method) && answer.is_err() {
                        tracing::debug!(method = %r.method, "answered a server request we do not offer");
                    }
                    let reply = Message::reply(r.id.clone(), answer).to_value();
                    let mut done = self
                        .transport
                        .post(&reply, None, "answer the server's request")
                        .await?;
                    while done.next().await.is_some() {}
                }
                Message::Notification(n) => {
                    if crate::transport::is_list_change(&n.method) {
                        let _ = self.changes.send(n.method.clone());
                    }
                    on_note(&n)
                }
                Message::Response(_) => {} // not ours
            }
        }
        Err(ClientError::Connection {
            context: method.to_string(),
            source: "the server closed the stream before answering".into(),
            not_sent: false,
        })
    }
}
