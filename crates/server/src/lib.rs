//! The mcp-tasks MCP server runtime: dispatch per wire era, tools, and the transports
//! (Streamable HTTP and stdio) over the task engine.
//!
//! ```no_run
//! use std::sync::Arc;
//! use mcp_tasks_engine::{EngineConfig, store::memory::MemoryStore};
//! use mcp_tasks_server::{Server, ServerConfig, demo};
//!
//! # async fn run() -> anyhow_like::Result<()> {
//! let mut builder = Server::builder(Arc::new(MemoryStore::new()), EngineConfig::default(), ServerConfig::default());
//! for tool in demo::tools() {
//!     builder = builder.tool(tool)?;
//! }
//! let server = builder.build();
//! server.start().await?;
//! mcp_tasks_server::http::serve(server, "127.0.0.1:8080".parse()?).await?;
//! # Ok(()) }
//! # mod anyhow_like { pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>; }
//! ```

pub mod auth;
pub mod catalog;
pub mod config;
pub mod demo;
mod era_2025;
pub mod era_2026;
pub mod fixtures;
pub mod http;
mod mrtr;
pub mod render_2025;
pub mod render_2026;
pub mod router;
pub mod session;
pub mod stdio;
pub mod tool;
pub mod tools;

use dashmap::DashMap;
use mcp_tasks_engine::store::{StoreError, TaskStore};
use mcp_tasks_engine::{Engine, EngineConfig};
use mcp_tasks_protocol::jsonrpc::{ErrorObject, Message, Notification, Request, RequestId};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

pub use config::ServerConfig;
pub use tool::{Tool, ToolRegistry};

use router::{StreamSender, Streams};
use session::{Session, Sessions};

/// The principal of callers that presented no credentials.
pub const ANONYMOUS: &str = "anonymous";
/// The principal of the local user on stdio.
pub const LOCAL_USER: &str = "local-user";

/// Who is calling, and in which session.
#[derive(Clone, Debug)]
pub struct Peer {
    /// The resolved principal.
    pub principal: String,
    /// The principal's limits.
    pub limits: auth::Limits,
    /// The session, once initialized.
    pub session: Option<Arc<Session>>,
    /// Whether the request came on the stateless (2026-07-28) wire, as the transport decided.
    pub stateless: bool,
}

impl Peer {
    /// A peer for `principal` with no session yet.
    pub fn new(principal: auth::Principal) -> Peer {
        Peer {
            principal: principal.name,
            limits: principal.limits,
            session: None,
            stateless: false,
        }
    }
}

/// A spawned handler that is stopped when the request running it is dropped (the client cancelled or
/// went away), so a plain call never outlives its request.
pub(crate) struct AbortOnDrop<T>(pub(crate) tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Where an input request went: session, stream id, and the task that asked.
#[derive(Clone, Debug)]
pub(crate) struct SentInput {
    pub(crate) session: String,
    pub(crate) stream: u64,
    pub(crate) task: String,
}

/// Builds a [`Server`].
pub struct ServerBuilder {
    engine: mcp_tasks_engine::EngineBuilder,
    store: Arc<dyn TaskStore>,
    tools: ToolRegistry,
    config: ServerConfig,
    catalog: catalog::Catalog,
}

impl ServerBuilder {
    /// Adds a resource.
    pub fn resource(mut self, r: catalog::Resource) -> Self {
        self.catalog.resources.push(r);
        self
    }
    /// Adds a resource template.
    pub fn resource_template(mut self, t: catalog::ResourceTemplate) -> Self {
        self.catalog.templates.push(t);
        self
    }
    /// Adds the demo tools, the conformance fixtures (tools, resources, prompts) and the task demos.
    pub fn demo(mut self) -> Result<Self, tool::ToolError> {
        for t in fixtures::core_tools()
            .into_iter()
            .chain(fixtures::stateless_tools())
            .chain(demo::tools())
        {
            self = self.tool(t)?;
        }
        let (resources, templates) = fixtures::resources();
        self.catalog.resources.extend(resources);
        self.catalog.templates.extend(templates);
        self.catalog.prompts.extend(fixtures::prompts());
        Ok(self)
    }
    /// Adds a prompt.
    pub fn prompt(mut self, p: catalog::Prompt) -> Self {
        self.catalog.prompts.push(p);
        self
    }
    /// Adds a tool.
    pub fn tool(mut self, tool: Tool) -> Result<Self, tool::ToolError> {
        self.engine = self.engine.handler(
            tool.name.clone(),
            tool.handler.clone(),
            tool.retry_on_restart,
        );
        self.tools.add(tool)?;
        Ok(self)
    }
    /// Finishes the server. Call [`Server::start`] before serving.
    pub fn build(self) -> Arc<Server> {
        Arc::new(Server {
            engine: self.engine.input_guard(era_2025::input_guard()).build(),
            sessions: Sessions::new(self.store),
            tools: self.tools,
            catalog: self.catalog,
            subscriptions: DashMap::new(),
            resource_events: tokio::sync::broadcast::channel(256).0,
            authenticator: auth::Authenticator::new(self.config.auth.clone()),
            rate: auth::RateLimiter::default(),
            signer: mrtr::StateSigner::new(
                self.config
                    .request_state_secret
                    .as_deref()
                    .map(str::as_bytes),
            ),
            config: self.config,
            streams: Streams::default(),
            inflight: DashMap::new(),
            sent_inputs: DashMap::new(),
            inline_inputs: DashMap::new(),
        })
    }
}

/// An MCP server whose tools run as durable tasks. Transport-independent; see [`http`] and [`stdio`].
pub struct Server {
    engine: Arc<Engine>,
    sessions: Sessions,
    tools: ToolRegistry,
    pub(crate) catalog: catalog::Catalog,
    /// Resource subscriptions of 2025 sessions on this node: session → URIs.
    pub(crate) subscriptions: DashMap<String, std::collections::HashSet<String>>,
    /// Resource changes, for 2026-07-28 `subscriptions/listen` streams.
    pub(crate) resource_events: tokio::sync::broadcast::Sender<String>,
    config: ServerConfig,
    streams: Streams,
    inflight: DashMap<(String, RequestId), CancellationToken>,
    /// Input requests sent on a stream of this node: key → (session, stream id). A `tasks/result` that
    /// opens later re-sends only those whose stream is gone.
    pub(crate) sent_inputs: DashMap<String, SentInput>,
    /// Input requests of plain (non-task) calls waiting for the client's answer.
    pub(crate) inline_inputs: DashMap<
        String,
        (
            String,
            tokio::sync::oneshot::Sender<mcp_tasks_engine::InputResponse>,
        ),
    >,
    authenticator: auth::Authenticator,
    pub(crate) rate: auth::RateLimiter,
    pub(crate) signer: mrtr::StateSigner,
}

/// A reply and the HTTP status it goes out with.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The JSON-RPC response or error.
    pub message: Message,
    /// 200, or what the wire era prescribes for this error (404 unknown method, 400 bad headers, …).
    pub http_status: u16,
}

impl Server {
    /// Starts building a server over `store`.
    pub fn builder(
        store: Arc<dyn TaskStore>,
        engine: EngineConfig,
        config: ServerConfig,
    ) -> ServerBuilder {
        ServerBuilder {
            engine: Engine::builder(store.clone(), engine),
            store,
            tools: ToolRegistry::default(),
            config,
            catalog: catalog::Catalog::default(),
        }
    }

    /// Recovers interrupted tasks, starts the sweeper and the notification router. Returns the number of
    /// tasks recovered.
    pub async fn start(self: &Arc<Self>) -> Result<usize, StoreError> {
        let recovered = self.engine.start().await?;
        let me = Arc::downgrade(self);
        let sweep = self.engine.config().sweep_interval;
        let idle = self.engine.config().session_idle_ms;
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(sweep);
            loop {
                tick.tick().await;
                let Some(server) = weak.upgrade() else { break };
                server.sessions.evict_idle(idle);
                server.streams.expire_held();
                server.rate.forget_idle(std::time::Duration::from_secs(600));
            }
        });
        let mut events = self.engine.notifier().subscribe_all();
        tokio::spawn(async move {
            loop {
                let event = match events.recv().await {
                    Ok(e) => e,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        tracing::debug!(skipped = n, "notification router lagged; clients will see the state on their next poll");
                        continue;
                    }
                    Err(_) => break,
                };
                let Some(server) = me.upgrade() else { break };
                server.route_event(&event);
            }
        });
        Ok(recovered)
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }
    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }
    /// The tools.
    pub fn tools(&self) -> &ToolRegistry {
        &self.tools
    }
    /// Resolves the caller of an HTTP request from its `Authorization` header.
    pub fn authenticate(
        &self,
        authorization: Option<&str>,
    ) -> Result<auth::Principal, auth::AuthError> {
        self.authenticator.resolve(authorization)
    }
    /// The local user (stdio).
    pub fn local_user(&self) -> auth::Principal {
        self.authenticator.local_user()
    }
    /// The sessions.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }
    /// Open client streams.
    pub fn streams(&self) -> &Streams {
        &self.streams
    }

    /// Answers `initialize` for `principal`: negotiates the version and creates the session.
    pub async fn initialize(
        &self,
        principal: &str,
        params: Option<&serde_json::Value>,
    ) -> Result<(Arc<Session>, serde_json::Value), mcp_tasks_protocol::jsonrpc::ErrorObject> {
        era_2025::initialize(self, principal, params).await
    }

    /// Handles one request of either wire era and returns the reply, or `None` when the client
    /// cancelled it (with `notifications/cancelled`, or by closing the stream of a stateless request).
    /// Messages related to the request (progress, logs, input requests) go to `out` before the reply.
    pub async fn handle_request(
        self: &Arc<Self>,
        peer: &Peer,
        req: Request,
        out: StreamSender,
    ) -> Option<Reply> {
        let stateless = peer.stateless || era_2026::is_stateless(req.params.as_ref());
        let key = (
            peer.session
                .as_ref()
                .map(|s| s.id.clone())
                .unwrap_or_default(),
            req.id.clone(),
        );
        let cancel = CancellationToken::new();
        // On the stateless HTTP wire a request is cancelled by closing its stream, never by
        // `notifications/cancelled` (which anyone could send for a guessable id).
        if !peer.stateless {
            self.inflight.insert(key.clone(), cancel.clone());
        }
        let id = req.id.clone();
        let closed = out.clone();
        let work = async {
            if stateless {
                let principal = auth::Principal {
                    name: peer.principal.clone(),
                    limits: peer.limits.clone(),
                };
                match era_2026::dispatch(self, &principal, req, out, cancel.clone()).await {
                    Ok(v) => Reply {
                        message: Message::response(id.clone(), v),
                        http_status: 200,
                    },
                    Err(f) => Reply {
                        message: Message::error(Some(id.clone()), f.error),
                        http_status: f.http,
                    },
                }
            } else {
                let r = era_2025::dispatch(self, peer, req, out, cancel.clone()).await;
                Reply {
                    message: Message::reply(id.clone(), r),
                    http_status: 200,
                }
            }
        };
        let reply = tokio::select! {
            r = work => Some(r),
            _ = cancel.cancelled() => None,
            // On the stateless wire, a client closing the request's stream cancels the request.
            _ = closed.closed(), if stateless => { cancel.cancel(); None }
        };
        if !peer.stateless {
            self.inflight.remove(&key);
        }
        reply
    }

    /// Creates a task for a call (both eras): started, or — when the arguments were invalid — finished
    /// at once with the validation message as its tool-error result. Errors say what to do.
    pub(crate) async fn submit_task(
        &self,
        new: mcp_tasks_engine::NewTask,
        invalid: Option<serde_json::Value>,
        client_key: Option<&str>,
    ) -> Result<mcp_tasks_engine::TaskRecord, ErrorObject> {
        use mcp_tasks_engine::store::StoreError;
        use mcp_tasks_engine::{EngineError, Outcome};
        let submitted = match invalid {
            Some(value) => {
                self.engine
                    .submit_finished(
                        new,
                        Outcome::Result {
                            value,
                            is_error: true,
                        },
                    )
                    .await
            }
            None => self.engine.submit(new).await,
        };
        submitted.map(|s| s.record).map_err(|e| match e {
            EngineError::Store(StoreError::IdempotencyConflict { .. }) => ErrorObject::invalid_params(format!(
                "Idempotency key {:?} was already used for a different call; use a new key for new work",
                client_key.unwrap_or_default()
            )),
            EngineError::Store(StoreError::TooManyActive { active, max }) => ErrorObject::new(
                mcp_tasks_protocol::error_codes::TOO_MANY_TASKS,
                format!("Too many unfinished tasks: {active} running, the limit is {max}; wait for one to finish or cancel one"),
            )
            .with_data(serde_json::json!({"running": active, "limit": max})),
            other => {
                tracing::error!(error = %other, "could not create a task");
                ErrorObject::internal(format!("Internal error: {other}"))
            }
        })
    }

    /// Capabilities beyond tools and tasks (resources, prompts, completions, logging).
    pub(crate) fn catalog_capabilities(&self) -> serde_json::Map<String, serde_json::Value> {
        use serde_json::json;
        let mut m = serde_json::Map::new();
        if self.catalog.has_resources() {
            m.insert(
                "resources".into(),
                json!({"subscribe": true, "listChanged": false}),
            );
        }
        if self.catalog.has_prompts() {
            m.insert("prompts".into(), json!({"listChanged": false}));
        }
        if self.catalog.has_resources() || self.catalog.has_prompts() {
            m.insert("completions".into(), json!({}));
        }
        m
    }

    /// Capabilities beyond tools and tasks that `server/discover` advertises.
    pub(crate) fn capabilities_2026(&self) -> Option<serde_json::Value> {
        let mut m = self.catalog_capabilities();
        m.insert("logging".into(), serde_json::json!({}));
        Some(serde_json::Value::Object(m))
    }

    /// Tells subscribed clients that a resource changed (`notifications/resources/updated`).
    pub fn resource_updated(&self, uri: &str) {
        let _ = self.resource_events.send(uri.to_string());
        for entry in self.subscriptions.iter() {
            if entry.value().contains(uri) {
                let msg = Message::notification(
                    "notifications/resources/updated",
                    serde_json::json!({"uri": uri}),
                );
                self.streams.deliver(entry.key(), "", vec![msg], false);
            }
        }
    }

    /// Handles one notification from the client.
    pub async fn handle_notification(&self, peer: &Peer, n: Notification) {
        match n.method.as_str() {
            "notifications/cancelled" => {
                let Some(params) = n.params else { return };
                let Some(id) = params
                    .get("requestId")
                    .and_then(|v| serde_json::from_value::<RequestId>(v.clone()).ok())
                else {
                    return;
                };
                let key = (
                    peer.session
                        .as_ref()
                        .map(|s| s.id.clone())
                        .unwrap_or_default(),
                    id,
                );
                if let Some((_, token)) = self.inflight.remove(&key) {
                    tracing::debug!(request = %key.1, "request cancelled by client");
                    token.cancel();
                }
            }
            "notifications/initialized"
            | "notifications/progress"
            | "notifications/roots/list_changed" => {}
            other => tracing::debug!(method = other, "ignored notification"),
        }
    }

    /// Handles a response the client sent to a request of this server (an input request of a task, or
    /// of a plain call). An answer to an unknown or already answered request changes nothing and is
    /// reported as an error.
    pub async fn handle_client_response(
        &self,
        peer: &Peer,
        msg: Message,
    ) -> Result<(), ErrorObject> {
        era_2025::client_response(self, peer, msg).await
    }

    fn route_event(&self, event: &mcp_tasks_engine::TaskEvent) {
        use mcp_tasks_engine::TaskEvent;
        let task = event.task();
        match event {
            TaskEvent::InputAnswered { input, .. } => {
                self.sent_inputs.remove(&input.key);
            }
            TaskEvent::Changed(t) if t.status.is_terminal() => {
                self.sent_inputs.retain(|_, sent| sent.task != t.id);
            }
            _ => {}
        }
        // A `tasks/result` stream for the task may be open in another session of the same principal
        // (a client that reconnected): that stream gets the task's messages.
        let owning = self.streams.task_stream_session(&task.id);
        let Some(session_id) = owning.as_deref().or(task.session.as_deref()) else {
            return;
        };
        let session = self.sessions.cached(session_id);
        if !self.streams.has_session(session_id) {
            // No stream open yet (a client opens its GET stream a moment after initialize): keep the
            // notifications briefly for the first stream that opens. Input requests are not kept:
            // they have their own path (re-sent on tasks/result).
            if session.is_some() && !matches!(event, TaskEvent::InputRequested { .. }) {
                self.streams.hold(
                    session_id,
                    era_2025::notifications_for(event, session.as_deref()),
                );
            }
            return;
        }
        let msgs = era_2025::notifications_for(event, session.as_deref());
        let terminal = matches!(event, TaskEvent::Changed(t) if t.status.is_terminal());
        if msgs.is_empty() && !terminal {
            return;
        }
        let TaskEvent::InputRequested { input, .. } = event else {
            self.streams.deliver(session_id, &task.id, msgs, terminal);
            return;
        };
        // Claim the request before sending it, so a `tasks/result` opening at the same moment does not
        // send it too (and the client answer it twice).
        if let Some(stream) = self.claim_input(&input.key, session_id, &task.id, |_| {
            self.streams.deliver(session_id, &task.id, msgs, false)
        }) {
            tracing::debug!(request = %input.key, stream, "input request sent");
        }
    }

    /// Sends input request `key` at most once per live stream: unless it already went out on a stream
    /// that is still open, runs `send` (which returns the stream it used) and records that stream.
    pub(crate) fn claim_input(
        &self,
        key: &str,
        session: &str,
        task: &str,
        send: impl FnOnce(Option<&SentInput>) -> Option<u64>,
    ) -> Option<u64> {
        use dashmap::mapref::entry::Entry;
        match self.sent_inputs.entry(key.to_string()) {
            Entry::Occupied(e) if self.streams.is_live(&e.get().session, e.get().stream) => None,
            Entry::Occupied(mut e) => {
                let stream = send(Some(e.get()))?;
                e.insert(SentInput {
                    session: session.to_string(),
                    stream,
                    task: task.to_string(),
                });
                Some(stream)
            }
            Entry::Vacant(e) => {
                let stream = send(None)?;
                e.insert(SentInput {
                    session: session.to_string(),
                    stream,
                    task: task.to_string(),
                });
                Some(stream)
            }
        }
    }

    /// Ends a session: forgets it, closes its streams and stops its in-flight requests.
    pub async fn end_session(&self, id: &str) -> Result<bool, StoreError> {
        let existed = self.sessions.delete(id).await?;
        self.streams.close_session(id);
        self.streams.drop_held(id);
        self.subscriptions.remove(id);
        self.inflight.retain(|(session, _), token| {
            if session == id {
                token.cancel();
                false
            } else {
                true
            }
        });
        Ok(existed)
    }
}
