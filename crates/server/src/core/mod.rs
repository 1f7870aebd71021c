//! The era-neutral core: what a request does once its wire form has been parsed. Tool lookup,
//! argument validation, the prepare step, task submission with idempotency and limits, visible-task
//! lookup, listing, cancel, waiting, input routing, and handler spawning.
//!
//! Invariant: nothing here parses or renders a wire form; where behaviour differs by wire the
//! method takes an [`Era`](crate::wire::Era) value. `Server`'s fields are private to this module and
//! its children: the wire modules and transports go through methods.

pub(crate) mod budget;
pub(crate) mod calls;
pub(crate) mod event_api;
mod events;
mod inputs;
mod limits;
pub(crate) mod lists;
mod peers;
mod resources;
pub(crate) mod rules;
mod seal;
pub(crate) mod signal_urls;
mod stop;
mod stopping;
pub(crate) mod streams;
pub(crate) mod tasks;

pub(crate) use calls::{HandlerRun, TaskStart};
pub(crate) use events::CREATED;
pub(crate) use inputs::check_capability;
pub(crate) use resources::CATALOG_METHODS;
pub(crate) use seal::{Sealer, Unsealed};
pub use stop::{StopPlan, StopReport};

use dashmap::DashMap;
use mcp_tasks_engine::store::{StoreError, TaskStore};
use mcp_tasks_engine::{Engine, EngineConfig, InputResponse};
use mcp_tasks_protocol::jsonrpc::{ErrorObject, Message, RequestId};
use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use crate::auth::{self, Principal};
use crate::catalog::{self, Catalog};
use crate::config::ServerConfig;
use crate::core::streams::Streams;
use crate::session::{Session, Sessions};
use crate::tool::{self, Tool, ToolRegistry};

/// The wire form of a message, as [`classify`](crate::wire::era::classify) decided it. Core methods
/// take it where behaviour differs by wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Era {
    /// The session-based wire: MCP 2025-11-25 (tasks), 2025-06-18 and 2025-03-26 (no tasks).
    Session,
    /// The stateless wire: MCP 2026-07-28 with the tasks extension.
    Stateless,
    /// Asynchronous Tool Execution (the SEP of 2025-08-26): operations named by client tokens, for
    /// session clients that opt in.
    AsyncTools,
}

impl Era {
    /// The label stored with a task created on this wire.
    pub fn task_label(self) -> &'static str {
        match self {
            Era::Session => mcp_tasks_protocol::version::V2025_11_25,
            Era::Stateless => mcp_tasks_protocol::version::V2026_07_28,
            Era::AsyncTools => ASYNC_TOOLS_LABEL,
        }
    }
}

/// The era label of tasks started as Asynchronous Tool Execution operations.
pub(crate) const ASYNC_TOOLS_LABEL: &str = "async-tool-execution";

/// Who sent a message, in which session, from where.
#[derive(Clone, Debug)]
pub struct Peer {
    /// The resolved principal.
    pub principal: Principal,
    /// The session, on the session-based wire once initialized.
    pub session: Option<Arc<Session>>,
    /// The client's address (HTTP only): anonymous stateless callers are told apart by it.
    pub address: Option<IpAddr>,
}

impl Peer {
    /// A peer for `principal` with no session and no address.
    pub fn new(principal: Principal) -> Peer {
        Peer {
            principal,
            session: None,
            address: None,
        }
    }

    /// The principal's name.
    pub fn name(&self) -> &str {
        &self.principal.name
    }

    /// Whether the caller presented no credentials.
    pub(crate) fn is_anonymous(&self) -> bool {
        self.principal.name == auth::ANONYMOUS
    }

    /// The session id, or "" without one.
    pub(crate) fn session_id(&self) -> &str {
        self.session.as_ref().map(|s| s.id.as_str()).unwrap_or("")
    }

    /// What tells this caller apart from others of its principal: nothing for an authenticated
    /// caller; for an anonymous one (many clients share the principal) its session, else its address.
    pub(crate) fn anonymous_scope(&self) -> Option<String> {
        if !self.is_anonymous() {
            return None;
        }
        match (&self.session, self.address) {
            (Some(s), _) => Some(s.id.clone()),
            (None, Some(a)) => Some(format!("address:{}", auth::client_group(a))),
            (None, None) => Some(String::new()),
        }
    }

    /// Which of an anonymous caller's tasks count against its limits: those of every session its
    /// client address opened (on 2025-11-25; they share an id prefix), or its address's stateless
    /// calls (on 2026-07-28). `None` for an authenticated caller: all of the principal's.
    pub(crate) fn anonymous_among(&self) -> Option<mcp_tasks_engine::Among> {
        use mcp_tasks_engine::Among;
        let scope = self.anonymous_scope()?;
        Some(match self.session.as_ref().and_then(|s| s.group_prefix()) {
            Some(prefix) => Among::SessionsStartingWith(prefix.to_string()),
            None => Among::Session(scope),
        })
    }
}

/// A request that failed: the JSON-RPC error and how HTTP carries it.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    /// The JSON-RPC error.
    pub(crate) error: ErrorObject,
    /// The HTTP status (200 unless a wire or a limit says otherwise).
    pub(crate) status: u16,
    /// For a refused call: when to try again (HTTP `Retry-After`).
    pub(crate) retry_after_ms: Option<u64>,
    /// For a call the caller's credentials do not allow (401, 403): what to do about it (HTTP
    /// `WWW-Authenticate`).
    pub(crate) challenge: Option<Box<auth::Challenge>>,
}

impl From<ErrorObject> for Failure {
    fn from(error: ErrorObject) -> Failure {
        Failure {
            error,
            status: 200,
            retry_after_ms: None,
            challenge: None,
        }
    }
}

impl Failure {
    /// The same error with another HTTP status.
    pub(crate) fn with_status(mut self, status: u16) -> Failure {
        self.status = status;
        self
    }
}

/// Logs a failure of the store or engine, with its causes, and turns it into an internal error the
/// client can read.
pub(crate) fn internal(e: impl std::error::Error) -> Failure {
    let chain = mcp_tasks_engine::error_chain(&e);
    tracing::error!(error = %chain, "internal error while serving a request");
    ErrorObject::internal(format!("Internal error: {chain}")).into()
}

/// A reply and how it goes out over HTTP.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The JSON-RPC response or error.
    pub message: Message,
    /// 200, or what the wire or a limit prescribes (404 unknown method, 400 bad headers, 429, …).
    pub http_status: u16,
    /// For a refused call: milliseconds until it may be retried (`Retry-After`).
    pub retry_after_ms: Option<u64>,
    /// For a call the caller's credentials do not allow: the `WWW-Authenticate` value. Such a reply
    /// is always an HTTP error (401, 403), whatever the client accepts, so the client can act on it.
    pub challenge: Option<String>,
    /// The task this reply tells the client about for the first time: the transport calls
    /// [`Server::reply_written`] once the reply is out, and only then do the task's messages follow.
    pub announces: Option<String>,
}

impl Reply {
    /// A reply to request `id` from a dispatcher's result.
    pub(crate) fn of(id: RequestId, result: Result<serde_json::Value, Failure>) -> Reply {
        match result {
            Ok(v) => Reply {
                message: Message::response(id, v),
                http_status: 200,
                retry_after_ms: None,
                challenge: None,
                announces: None,
            },
            Err(f) => Reply {
                message: Message::error(Some(id), f.error),
                http_status: f.status,
                retry_after_ms: f.retry_after_ms,
                challenge: f.challenge.map(|c| c.header_value()),
                announces: None,
            },
        }
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
    metrics: Arc<crate::admin::Metrics>,
    store: Arc<dyn TaskStore>,
    tools: ToolRegistry,
    config: ServerConfig,
    catalog: Catalog,
}

impl ServerBuilder {
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
    /// Adds a tool of `group`: the group's tools can be replaced while the server runs
    /// ([`Server::replace_tools`]), and the server tells clients when they are.
    pub fn group_tool(mut self, group: &str, tool: Tool) -> Result<Self, tool::ToolError> {
        self.engine = self.engine.handler(
            tool.name.clone(),
            tool.handler.clone(),
            tool.retry_on_restart,
        );
        self.tools.add_to(Some(group), tool)?;
        Ok(self)
    }
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
    /// Adds another server's resources and prompts, passed through (see [`catalog::CatalogSource`]).
    pub fn catalog_source(mut self, source: Arc<dyn catalog::CatalogSource>) -> Self {
        self.catalog.sources.push(source);
        self
    }
    /// Adds a prompt.
    pub fn prompt(mut self, p: catalog::Prompt) -> Self {
        self.catalog.prompts.push(p);
        self
    }
    /// Uses `notifier` for wake-ups instead of a fresh in-process one: one a relay feeds with the
    /// events of other replicas (see `mcp_tasks_engine::store::postgres::relay`).
    pub fn notifier(mut self, notifier: mcp_tasks_engine::Notifier) -> Self {
        self.engine = self.engine.notifier(notifier);
        self
    }
    /// Finishes the server. Call [`Server::start`] before serving.
    ///
    /// It narrows the engine's notifier (`Notifier::narrow`): another replica's event of a task no
    /// client stream takes (outside any session, or of the 2026-07-28 wire) is then brought in only
    /// where something waits on the task. An embedder reading `Notifier::subscribe_all` beside the
    /// server marks what it needs with `Notifier::watch` or `Notifier::watch_everything`.
    pub fn build(self) -> Arc<Server> {
        let signal_urls = self
            .config
            .signal_urls
            .as_ref()
            .map(|c| Arc::new(signal_urls::Signer::new(&c.public_url, &c.secret)));
        let mut engine = self.engine;
        if let Some(signer) = &signal_urls {
            engine = engine.signal_urls(signer.clone());
        }
        let engine = engine
            .input_guard(inputs::input_guard())
            .outcome_rules(Arc::new(rules::WireRules))
            .event_rules(Arc::new(crate::events::Declared(Arc::new(
                self.config.events.clone(),
            ))))
            .build();
        let metrics = self.metrics.clone();
        engine
            .notifier()
            .observe_local(Arc::new(move |e| metrics.observe(e)));
        // Other replicas listen when the notifier has a relay: then they hear of our streams.
        let peers = (engine.notifier().has_relay() && !self.store.is_exclusive())
            .then(|| Arc::new(peers::Peers::new()));
        // No client stream takes the events of a task outside any session, nor of one of the
        // 2026-07-28 wire (an anonymous caller's tasks there carry its scope, not a session with
        // streams): only those who wait on the task do, and each marks what it waits on (a
        // listening stream its tasks, the dashboard everything, the engine its running tasks; a
        // blocked result holds a subscription). So another replica's event of such a task is read
        // from the store only where it is waited on.
        let stateless = Era::Stateless.task_label();
        let _ = engine
            .notifier()
            .narrow(Arc::new(move |t| t.session.is_none() || t.era == stateless));
        Arc::new(Server {
            engine,
            peers,
            sessions: Sessions::new(self.store),
            tools: self.tools,
            catalog: self.catalog,
            subscriptions: DashMap::new(),
            resource_events: tokio::sync::broadcast::channel(256).0,
            list_events: tokio::sync::broadcast::channel(16).0,
            authenticator: auth::Authenticator::new(self.config.auth.clone()),
            rate: auth::RateLimiter::default(),
            plain_calls: limits::Held::default(),
            streams_open: limits::Held::default(),
            sealer: Sealer::new(
                self.config
                    .request_state_secret
                    .as_deref()
                    .map(str::as_bytes),
            ),
            config: self.config,
            signal_urls,
            streams: Streams::default(),
            inflight: DashMap::new(),
            sent_inputs: Arc::new(DashMap::new()),
            inline_inputs: DashMap::new(),
            shutdown: CancellationToken::new(),
            stopping: stopping::Stopping::default(),
            serve_loops: stop::ServeLoops::default(),
            webhooks_loop: std::sync::Mutex::new(None),
            events_loop: std::sync::Mutex::new(None),
            event_sender: std::sync::OnceLock::new(),
            announce: DashMap::new(),
            held: DashMap::new(),
            operations: DashMap::new(),
            same_calls: DashMap::new(),
            metrics: self.metrics,
            admin_logins: DashMap::new(),
        })
    }
}

/// An MCP server whose tools run as durable tasks. Transport-independent: serve it with
/// [`http`](crate::http) or [`stdio`](crate::stdio).
pub struct Server {
    engine: Arc<Engine>,
    /// Makes and checks signed signal URLs (`[signals]`), when configured.
    signal_urls: Option<Arc<signal_urls::Signer>>,
    sessions: Sessions,
    tools: ToolRegistry,
    catalog: Catalog,
    /// Resource subscriptions of 2025 sessions on this node: session → URIs.
    subscriptions: DashMap<String, HashSet<String>>,
    /// Resource changes, for 2026-07-28 `subscriptions/listen` streams.
    resource_events: tokio::sync::broadcast::Sender<String>,
    /// List changes, for 2026-07-28 `subscriptions/listen` streams.
    list_events: tokio::sync::broadcast::Sender<lists::ListKind>,
    config: ServerConfig,
    streams: Streams,
    /// Requests in flight on this node by (session, request id), for `notifications/cancelled`.
    inflight: DashMap<(String, RequestId), CancellationToken>,
    /// Input requests sent on a stream of this node: key → where. A `tasks/result` that opens later
    /// re-sends only those whose stream is gone.
    sent_inputs: Arc<DashMap<String, SentInput>>,
    /// The other replicas' streams, when the store is shared and a relay carries notes between them.
    peers: Option<Arc<peers::Peers>>,
    /// Input requests of plain (non-task) calls waiting for the client's answer: key → (session, answer).
    inline_inputs: DashMap<String, (String, tokio::sync::oneshot::Sender<InputResponse>)>,
    authenticator: auth::Authenticator,
    rate: auth::RateLimiter,
    /// Plain calls running now, per caller (the rate limit's keys).
    plain_calls: limits::Held,
    /// Streams held open now, per principal (anonymous callers: per client address).
    streams_open: limits::Held,
    sealer: Sealer,
    /// Raised when the server stops: long waits (blocked results, listen streams) end.
    shutdown: CancellationToken,
    /// The drain, then the close (`stopping`).
    stopping: stopping::Stopping,
    /// The HTTP serve loops, ended by [`Server::stop`] (`stop.rs`).
    serve_loops: stop::ServeLoops,
    /// The webhook delivery loop, once started: awaited at the end, so it lets go of its claims.
    webhooks_loop: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The event delivery loop, waited for at a stop.
    events_loop: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Its sender, told of subscriptions stored here.
    event_sender: std::sync::OnceLock<Arc<crate::events::deliver::EventSender>>,
    /// New session tasks whose creating reply the client may not have yet.
    announce: DashMap<String, events::Announce>,
    /// Events for sessions with no stream open yet, unrendered, oldest first (bounded, short-lived).
    held: DashMap<
        String,
        std::collections::VecDeque<(std::time::Instant, mcp_tasks_engine::TaskEvent)>,
    >,
    /// Asynchronous Tool Execution operations by the (session, request id) of the call that started
    /// them, so `notifications/cancelled` for that call cancels the operation after it was answered.
    operations: DashMap<(String, RequestId), String>,
    /// Plain calls run as tasks within a sync budget, by caller and call: (task, when), so the same
    /// call made again while the task runs joins it (`core::budget`).
    same_calls: DashMap<String, (String, std::time::Instant)>,
    /// This process's metrics (`/metrics`).
    metrics: Arc<crate::admin::Metrics>,
    /// Dashboard logins: token → (operator, until).
    admin_logins: DashMap<String, (String, std::time::Instant)>,
}

impl Server {
    /// Starts building a server over `store`.
    pub fn builder(
        store: Arc<dyn TaskStore>,
        engine: EngineConfig,
        config: ServerConfig,
    ) -> ServerBuilder {
        // Every store operation is timed (`mcp_store_operation_seconds`).
        let metrics = Arc::new(crate::admin::Metrics::new());
        let store: Arc<dyn TaskStore> =
            Arc::new(crate::admin::MeteredStore::new(store, metrics.clone()));
        let started = metrics.clone();
        ServerBuilder {
            engine: Engine::builder(store.clone(), engine)
                .on_run_start(Arc::new(move |t, now| started.run_started(t, now))),
            metrics,
            store,
            tools: ToolRegistry::default(),
            config,
            catalog: Catalog::default(),
        }
    }

    /// The scopes this server knows, for its protected-resource metadata: `[auth.oauth]
    /// scopes_supported` when set, else every scope a tool requires (sorted, once each).
    pub fn scopes_supported(&self) -> Vec<String> {
        if let Some(o) = self.authenticator().oauth() {
            if !o.scopes_supported.is_empty() {
                return o.scopes_supported.clone();
            }
        }
        let mut all: Vec<String> = self
            .tools
            .all()
            .iter()
            .flat_map(|t| t.tool.scopes.iter().cloned())
            .collect();
        all.sort();
        all.dedup();
        all
    }

    /// What signs signal URLs, when `[signals]` is set.
    pub(crate) fn signal_urls(&self) -> Option<&signal_urls::Signer> {
        self.signal_urls.as_deref()
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }
    /// Dashboard logins (see `admin::api`).
    pub(crate) fn admin_logins(&self) -> &DashMap<String, (String, std::time::Instant)> {
        &self.admin_logins
    }
    /// Who may call (API keys, operators).
    pub(crate) fn authenticator(&self) -> &auth::Authenticator {
        &self.authenticator
    }
    /// This process's metrics.
    pub fn metrics(&self) -> &Arc<crate::admin::Metrics> {
        &self.metrics
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
    pub async fn authenticate(
        &self,
        authorization: Option<&str>,
    ) -> Result<Principal, auth::AuthError> {
        self.authenticator.resolve(authorization).await
    }
    /// The local user (stdio).
    pub fn local_user(&self) -> Principal {
        self.authenticator.local_user()
    }
    /// The sessions.
    pub(crate) fn sessions(&self) -> &Sessions {
        &self.sessions
    }
    /// Open client streams.
    pub(crate) fn streams(&self) -> &Streams {
        &self.streams
    }
    /// Resources, templates and prompts.
    pub(crate) fn catalog(&self) -> &Catalog {
        &self.catalog
    }
    /// Seals and opens state handed to clients (2026-07-28 `requestState`).
    pub(crate) fn sealer(&self) -> &Sealer {
        &self.sealer
    }
    /// Starts the webhook delivery loop: it claims and sends the outbox's events until the server
    /// stops (with replicas, each runs one; the store's leases give each event to one).
    pub(crate) fn start_webhooks(self: &Arc<Self>) {
        let metrics = self.metrics.clone();
        let observer: crate::webhooks::delivery::AttemptObserver =
            Arc::new(move |outcome, took| metrics.webhook_attempt(outcome, took));
        match crate::webhooks::delivery::Deliverer::new(
            self.engine.store().clone(),
            self.engine.config().node_id.clone(),
            Arc::new(self.config.webhooks.clone()),
            Some(observer),
        ) {
            Ok(deliverer) => {
                let notifier = self.engine.notifier().clone();
                let stop = self.shutdown.clone();
                let running =
                    tokio::spawn(async move { Arc::new(deliverer).run(&notifier, stop).await });
                *self.webhooks_loop.lock().unwrap_or_else(|e| e.into_inner()) = Some(running);
            }
            Err(e) => {
                tracing::error!(error = %e, "the webhook sender could not be made: no webhooks are sent")
            }
        }
    }

    /// Starts the event delivery loop (MCP Events): it fans out the log, then claims and sends
    /// deliveries until the server stops. `inputs` renders `task.input_required`'s requests.
    pub(crate) fn start_events(self: &Arc<Self>, inputs: crate::events::occurrence::InputRenderer) {
        let metrics = self.metrics.clone();
        let observer: crate::events::deliver::AttemptObserver =
            Arc::new(move |outcome, took| metrics.event_attempt(outcome, took));
        match crate::events::deliver::EventSender::new(
            self.engine.store().clone(),
            self.engine.config().node_id.clone(),
            Arc::new(self.config.events.clone()),
            self.config.webhooks.secret_keys.clone(),
            inputs,
            Some(observer),
        ) {
            Ok(sender) => {
                let sender = Arc::new(sender);
                let _ = self.event_sender.set(sender.clone());
                let notifier = self.engine.notifier().clone();
                let stop = self.shutdown.clone();
                let running = tokio::spawn(async move { sender.run(&notifier, stop).await });
                *self.events_loop.lock().unwrap_or_else(|e| e.into_inner()) = Some(running);
            }
            Err(e) => {
                tracing::error!(error = %e, "the event sender could not be made: no events are delivered")
            }
        }
    }

    /// Waits (at most `limit`) for the webhook delivery loop to end after [`Server::shutdown`]: it
    /// gives the sends in flight a moment to be recorded, then lets go of the deliveries it
    /// claimed, so another replica sends them at once instead of when the claims run out.
    pub async fn webhooks_stopped(&self, limit: std::time::Duration) {
        let running = self
            .webhooks_loop
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let events = self
            .events_loop
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(events) = events {
            if tokio::time::timeout(limit, events).await.is_err() {
                tracing::warn!(
                    "the event sender did not stop in time; its claims run out by themselves"
                );
            }
        }
        if let Some(running) = running {
            if tokio::time::timeout(limit, running).await.is_err() {
                tracing::warn!(
                    "the webhook sender did not stop in time; its claims run out by themselves"
                );
            }
        }
    }

    /// The HTTP serve loops, counted for [`Server::stop`].
    pub(crate) fn serve_loops(&self) -> &stop::ServeLoops {
        &self.serve_loops
    }

    /// Resolves when the server is stopping.
    pub(crate) fn stopping(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.shutdown.cancelled()
    }

    /// Begins a drain (a deploy, SIGTERM): from now on no tool call is taken (HTTP 503 with
    /// `Retry-After` and -32009, so a balancer's next try goes elsewhere), `/readyz` answers 503 and
    /// HTTP/1 replies end their connections; everything else is served as before, so running tasks
    /// can finish and their clients follow them. The engine claims no task any more
    /// ([`Engine::stop_claiming`]). [`Server::close`] comes next.
    pub fn begin_drain(&self) {
        self.stopping.begin_drain();
        // A draining node takes no work: what other replicas hand off goes to those that stay.
        self.engine.stop_claiming();
    }

    /// Whether a drain has begun.
    pub fn draining(&self) -> bool {
        self.stopping.draining()
    }

    /// The close that ends a drain, once nothing runs here: the listener closes at once (after
    /// taking the connections the kernel completed), and every request to `/mcp` on a connection
    /// still open is answered 503 "stopping" (a balancer sends it on to another replica) until none
    /// has come for `quiet`, or for at most `bound`. End the serving future after it (see
    /// `core/stopping.rs`).
    pub async fn close(&self, quiet: std::time::Duration, bound: std::time::Duration) {
        self.stopping.begin_closing();
        self.stopping.quiet(quiet, bound).await;
    }

    /// Resolves once the close has begun: the listener closes then (see `core/stopping.rs`).
    pub(crate) async fn closing(&self) {
        self.stopping.closing().await
    }

    /// Whether requests are turned away (the close has begun); each one asked about counts as
    /// turned away.
    pub(crate) fn refuses_requests(&self) -> bool {
        self.stopping.refuses()
    }

    /// Stops the server: running handlers are told to stop (their tasks are recovered on the next
    /// start), open streams end, and long waits give up, so in-flight replies can finish.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
        self.streams.close_all();
        self.engine.shutdown();
    }

    /// Housekeeping of this node's caches, run by the sweeper.
    pub(crate) async fn sweep_caches(&self) {
        // A session whose client holds a stream open here is in use, however long it sends nothing.
        let open: std::collections::HashSet<String> = self
            .streams
            .open_streams()
            .into_iter()
            .map(|(session, ..)| session)
            .collect();
        self.sessions.keep_alive(open).await;
        for id in self
            .sessions
            .evict_idle(self.engine.config().session_idle_ms)
        {
            self.forget_session(&id);
        }
        self.expire_held();
        self.rate.forget_idle(std::time::Duration::from_secs(600));
        self.forget_old_calls();
        let now = std::time::Instant::now();
        self.admin_logins.retain(|_, (_, until)| *until > now);
    }

    /// Registers a request in flight so `notifications/cancelled` from its session can stop it.
    pub(crate) fn track_request(&self, session: &str, id: &RequestId) -> CancellationToken {
        let token = CancellationToken::new();
        self.inflight
            .insert((session.to_string(), id.clone()), token.clone());
        token
    }

    /// Forgets a request that finished.
    pub(crate) fn untrack_request(&self, session: &str, id: &RequestId) {
        self.inflight.remove(&(session.to_string(), id.clone()));
    }

    /// Cancels request `id` of `session` if it is still running here; returns whether it was.
    pub(crate) fn cancel_request(&self, session: &str, id: &RequestId) -> bool {
        match self.inflight.remove(&(session.to_string(), id.clone())) {
            Some((_, token)) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Ends a session: forgets it, closes its streams and stops its in-flight requests.
    pub async fn end_session(&self, id: &str) -> Result<bool, StoreError> {
        let existed = self.sessions.delete(id).await?;
        self.forget_session(id);
        Ok(existed)
    }

    /// Forgets what this node holds for a session that ended (deleted, or idle past its limit):
    /// closes its streams and stops its in-flight requests.
    fn forget_session(&self, id: &str) {
        self.streams.close_session(id);
        self.held.remove(id);
        self.subscriptions.remove(id);
        self.operations.retain(|(session, _), _| session != id);
        self.inflight.retain(|(session, _), token| {
            if session == id {
                token.cancel();
                false
            } else {
                true
            }
        });
    }
}
