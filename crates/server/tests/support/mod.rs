//! Test support shared by the integration tests: an in-process server on 127.0.0.1, an MCP client over
//! HTTP that validates every message the server sends against the official JSON schema, and helpers.
#![allow(dead_code)]

pub mod schema;
pub mod stateless;

use futures::StreamExt;
use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_engine::store::TaskStore;
use mcp_tasks_engine::EngineConfig;
use mcp_tasks_protocol::jsonrpc::{parse_message, Message};
use mcp_tasks_server::{demo, Server, ServerConfig};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A server running in this process on an ephemeral loopback port.
pub struct TestServer {
    pub server: Arc<Server>,
    pub url: String,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl TestServer {
    /// Begins a graceful shutdown, as SIGTERM does for the binary.
    pub fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.server.engine().shutdown();
    }
}

/// Engine settings that make tests fast: short sweeps and grace periods.
pub fn fast_engine() -> EngineConfig {
    EngineConfig {
        sweep_interval: Duration::from_millis(200),
        cancel_grace: Duration::from_secs(2),
        poll_interval_ms: 200,
        ..EngineConfig::default()
    }
}

/// Starts a server with the demo tools (plus `extra`) on a memory store.
pub async fn start(extra: Vec<mcp_tasks_server::Tool>) -> TestServer {
    start_with(
        Arc::new(MemoryStore::new()),
        fast_engine(),
        ServerConfig::default(),
        extra,
    )
    .await
}

/// Starts a server with everything `--demo` registers (tools, conformance fixtures, resources, prompts).
pub async fn start_demo() -> TestServer {
    let b = Server::builder(
        Arc::new(MemoryStore::new()),
        fast_engine(),
        ServerConfig::default(),
    )
    .demo()
    .unwrap();
    serve(b.build()).await
}

async fn serve(server: Arc<Server>) -> TestServer {
    let (listener, url) = bind().await;
    serve_on(server, listener, url).await
}

/// A listener on an ephemeral loopback port, and the MCP endpoint's URL on it: for servers whose
/// config names their own URL (an OAuth audience).
pub async fn bind() -> (tokio::net::TcpListener, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    (listener, url)
}

/// Starts `server` and serves it on `listener` (whose endpoint is `url`).
pub async fn serve_on(
    server: Arc<Server>,
    listener: tokio::net::TcpListener,
    url: String,
) -> TestServer {
    let app = mcp_tasks_server::http::router(server.clone());
    serve_app(server, listener, url, app).await
}

/// Starts `server` and serves it on `listener` with the operator's routes next to `/mcp` (as
/// `mcp-tasks serve` does without `[admin] listen`).
pub async fn serve_with_admin_on(
    server: Arc<Server>,
    listener: tokio::net::TcpListener,
    url: String,
) -> TestServer {
    let app = mcp_tasks_server::http::router(server.clone())
        .merge(mcp_tasks_server::admin::router(server.clone(), false));
    serve_app(server, listener, url, app).await
}

/// Starts `server` and serves `app` on `listener` until the test server is dropped or stopped.
async fn serve_app(
    server: Arc<Server>,
    listener: tokio::net::TcpListener,
    url: String,
    app: axum::Router,
) -> TestServer {
    server.start().await.unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let s = server.clone();
    tokio::spawn(async move {
        let _ = mcp_tasks_server::http::serve_router(s, listener, app, async {
            let _ = rx.await;
        })
        .await;
    });
    TestServer {
        server,
        url,
        shutdown: Some(tx),
    }
}

/// Starts a server with the demo tools (plus `extra`).
pub async fn start_with(
    store: Arc<dyn TaskStore>,
    engine: EngineConfig,
    config: ServerConfig,
    extra: Vec<mcp_tasks_server::Tool>,
) -> TestServer {
    let mut b = Server::builder(store, engine, config);
    for t in demo::tools::tools().into_iter().chain(extra) {
        b = b.tool(t).unwrap();
    }
    serve(b.build()).await
}

/// What one POST produced.
#[derive(Debug)]
pub struct Exchange {
    pub status: u16,
    pub content_type: String,
    /// The `Retry-After` header, if any.
    pub retry_after: Option<String>,
    /// The `WWW-Authenticate` header, if any.
    pub challenge: Option<String>,
    /// Messages that came before the reply (SSE only).
    pub notifications: Vec<Value>,
    /// The reply (absent for 202).
    pub reply: Option<Value>,
}

impl Exchange {
    pub fn result(&self) -> &Value {
        let r = self.reply.as_ref().expect("no reply");
        r.get("result")
            .unwrap_or_else(|| panic!("expected a result, got {r}"))
    }
    pub fn error(&self) -> &Value {
        let r = self.reply.as_ref().expect("no reply");
        r.get("error")
            .unwrap_or_else(|| panic!("expected an error, got {r}"))
    }
    pub fn error_code(&self) -> i64 {
        self.error()["code"].as_i64().unwrap()
    }
}

/// An MCP client over Streamable HTTP for tests.
pub struct Client {
    pub url: String,
    pub http: reqwest::Client,
    pub session: Option<String>,
    pub version: String,
    pub token: Option<String>,
    next_id: AtomicI64,
}

impl Client {
    pub fn new(url: &str) -> Client {
        Client {
            url: url.to_string(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
            session: None,
            version: "2025-11-25".into(),
            token: None,
            next_id: AtomicI64::new(1),
        }
    }

    /// A client that has completed initialize (2025-11-25).
    pub async fn connect(url: &str) -> Client {
        Self::connect_version(url, "2025-11-25").await
    }

    pub async fn connect_version(url: &str, version: &str) -> Client {
        Self::connect_with(url, version, json!({}), None).await
    }

    /// A 2025-11-25 client declaring `capabilities` (e.g. elicitation and sampling).
    pub async fn connect_caps(url: &str, capabilities: Value) -> Client {
        Self::connect_with(url, "2025-11-25", capabilities, None).await
    }

    /// A client with a bearer token.
    pub async fn connect_token(url: &str, token: &str, capabilities: Value) -> Client {
        Self::connect_with(url, "2025-11-25", capabilities, Some(token.to_string())).await
    }

    pub async fn connect_with(
        url: &str,
        version: &str,
        capabilities: Value,
        token: Option<String>,
    ) -> Client {
        let mut c = Client::new(url);
        c.token = token;
        c.initialize(version, capabilities).await;
        c
    }

    /// A client whose connections come from `ip` (any 127.0.0.0/8 address): another client
    /// address on the same machine.
    pub fn new_from(url: &str, ip: &str) -> Client {
        Client {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .local_address(ip.parse::<std::net::IpAddr>().unwrap())
                .build()
                .unwrap(),
            ..Client::new(url)
        }
    }

    /// A 2025-11-25 session opened from `ip`.
    pub async fn connect_from(url: &str, ip: &str) -> Client {
        let mut c = Client::new_from(url, ip);
        c.initialize("2025-11-25", json!({})).await;
        c
    }

    /// Opens a session (replacing this client's, if it had one) and says it is initialized.
    pub async fn initialize(&mut self, version: &str, capabilities: Value) {
        self.session = None;
        let ex = self
            .request(
                "initialize",
                json!({"protocolVersion": version, "capabilities": capabilities, "clientInfo": {"name": "test", "version": "0"}}),
            )
            .await;
        self.version = ex.result()["protocolVersion"].as_str().unwrap().to_string();
        self.notify("notifications/initialized", json!({})).await;
    }

    fn id(&self) -> i64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub fn post(&self, body: String) -> reqwest::RequestBuilder {
        let mut rb = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        if let Some(s) = &self.session {
            rb = rb
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", &self.version);
        }
        if let Some(t) = &self.token {
            rb = rb.header("authorization", format!("Bearer {t}"));
        }
        rb
    }

    /// Sends a request and collects everything the server sends back, validating each message.
    pub async fn request(&mut self, method: &str, params: Value) -> Exchange {
        let id = self.id();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let resp = self.post(body.to_string()).send().await.unwrap();
        if let Some(s) = resp.headers().get("mcp-session-id") {
            self.session = Some(s.to_str().unwrap().to_string());
        }
        let ex = read_exchange(resp).await;
        if let Some(r) = &ex.reply {
            schema::check_reply(&self.version, method, &params, r);
            assert_eq!(r["id"], json!(id), "reply id");
        }
        for n in &ex.notifications {
            schema::check_notification(&self.version, n);
        }
        ex
    }

    pub async fn notify(&self, method: &str, params: Value) -> u16 {
        let body = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.post(body.to_string())
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    /// Calls a tool as a task and returns the task object.
    pub async fn create_task(&mut self, tool: &str, args: Value) -> Value {
        let ex = self
            .request(
                "tools/call",
                json!({"name": tool, "arguments": args, "task": {"ttl": 60_000}}),
            )
            .await;
        ex.result()["task"].clone()
    }

    pub async fn get_task(&mut self, id: &str) -> Value {
        self.request("tasks/get", json!({"taskId": id}))
            .await
            .result()
            .clone()
    }

    /// Polls tasks/get until the task is terminal (bounded).
    pub async fn wait_terminal(&mut self, id: &str) -> Value {
        for _ in 0..200 {
            let t = self.get_task(id).await;
            if ["completed", "failed", "cancelled"].contains(&t["status"].as_str().unwrap()) {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("task {id} did not finish in 20 s");
    }

    /// Opens the GET stream; messages arrive on the returned channel (validated).
    pub async fn open_stream(&self) -> tokio::sync::mpsc::UnboundedReceiver<Value> {
        let mut get = self.http.get(&self.url);
        if let Some(t) = &self.token {
            get = get.header("authorization", format!("Bearer {t}"));
        }
        let resp = get
            .header("accept", "text/event-stream")
            .header("mcp-session-id", self.session.as_ref().unwrap())
            .header("mcp-protocol-version", &self.version)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200, "GET stream");
        sse_reader(resp, self.version.clone(), None)
    }

    /// Sends a request whose reply will come on a stream, and returns everything the server sends on it
    /// as it arrives (validated; the reply is validated against `method`'s result type).
    pub async fn stream_request(
        &mut self,
        method: &str,
        params: Value,
    ) -> tokio::sync::mpsc::UnboundedReceiver<Value> {
        let id = self.id();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let resp = self.post(body.to_string()).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let ct = resp
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        if ct.starts_with("application/json") {
            let v: Value = resp.json().await.unwrap();
            schema::check_reply(&self.version, method, &params, &v);
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            tx.send(v).unwrap();
            return rx;
        }
        sse_reader(
            resp,
            self.version.clone(),
            Some((method.to_string(), params)),
        )
    }

    /// Answers a request the server sent (POSTs a JSON-RPC response); returns the HTTP status and body.
    pub async fn respond(&self, id: &Value, result: Value) -> (u16, String) {
        let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
        let resp = self.post(body.to_string()).send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap())
    }

    /// Answers a request the server sent with a JSON-RPC error.
    pub async fn respond_error(&self, id: &Value, code: i64, message: &str) -> (u16, String) {
        let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
        let resp = self.post(body.to_string()).send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap())
    }
}

/// Reads an SSE response incrementally, validating each message; `reply_of` names the request whose
/// reply may come on it.
pub fn sse_reader(
    resp: reqwest::Response,
    version: String,
    reply_of: Option<(String, Value)>,
) -> tokio::sync::mpsc::UnboundedReceiver<Value> {
    sse_reader_with(resp, move |v| {
        match (&reply_of, v.get("method").is_none()) {
            (Some((m, p)), true) => schema::check_reply(&version, m, p, v),
            (None, true) => panic!("a reply on a stream without a request: {v}"),
            (_, false) => schema::check_notification(&version, v),
        }
    })
}

/// Reads an SSE response incrementally, checking each message with `check`.
pub fn sse_reader_with(
    resp: reqwest::Response,
    check: impl Fn(&Value) + Send + 'static,
) -> tokio::sync::mpsc::UnboundedReceiver<Value> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut body = resp.bytes_stream();
        let mut buf = String::new();
        loop {
            let chunk = tokio::select! {
                c = body.next() => c,
                _ = tx.closed() => return,
            };
            let Some(Ok(chunk)) = chunk else { return };
            buf.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buf.find("\n\n") {
                let event = buf[..end].to_string();
                buf.drain(..end + 2);
                if let Some(v) = sse_data(&event) {
                    check(&v);
                    if tx.send(v).is_err() {
                        return;
                    }
                }
            }
        }
    });
    rx
}

/// Waits for the next message on a stream (bounded).
pub async fn next_msg(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Value>) -> Value {
    tokio::time::timeout(Duration::from_secs(15), rx.recv())
        .await
        .expect("a message in time")
        .expect("stream open")
}

/// The JSON in an SSE event's data lines, if any.
pub fn sse_data(event: &str) -> Option<Value> {
    let data: Vec<&str> = event
        .lines()
        .filter_map(|l| {
            l.strip_prefix("data:")
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
        })
        .collect();
    if data.is_empty() || data.iter().all(|d| d.is_empty()) {
        return None;
    }
    Some(serde_json::from_str(&data.join("\n")).expect("SSE data is JSON"))
}

pub async fn read_exchange(resp: reqwest::Response) -> Exchange {
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let challenge = resp
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string());
    let text = resp.text().await.unwrap();
    let mut notifications = Vec::new();
    let mut reply = None;
    if content_type.starts_with("text/event-stream") {
        for event in text.split("\n\n") {
            if let Some(v) = sse_data(event) {
                assert!(
                    reply.is_none(),
                    "nothing may follow the reply on a POST stream: {v}"
                );
                if v.get("id").is_some() && (v.get("result").is_some() || v.get("error").is_some())
                {
                    reply = Some(v);
                } else {
                    notifications.push(v);
                }
            }
        }
    } else if !text.is_empty() {
        let v: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {text}"));
        // Parsing it back as a JSON-RPC message checks the framing too.
        parse_message(text.as_bytes()).unwrap_or_else(|e| panic!("not JSON-RPC: {e:?}"));
        reply = Some(v);
    }
    Exchange {
        status,
        content_type,
        retry_after,
        challenge,
        notifications,
        reply,
    }
}

/// A task of `c` that runs for 30 s (`slow_compute`).
pub async fn long_task(c: &mut Client) -> String {
    c.create_task("slow_compute", json!({"seconds": 30})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Every task method of `c` on `id` answers exactly like a task that does not exist, and
/// `tasks/list` does not show it.
pub async fn sees_nothing(c: &mut Client, id: &str) {
    let missing = "0123456789abcdef0123456789abcdef";
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let theirs = c.request(method, json!({"taskId": id})).await;
        let nothing = c.request(method, json!({"taskId": missing})).await;
        assert_eq!(
            theirs.error(),
            nothing.error(),
            "{method} on another's task must look like a missing one"
        );
    }
    let listed = c.request("tasks/list", json!({})).await;
    assert!(
        listed.result()["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["taskId"] != id),
        "tasks/list leaks another's task"
    );
}

/// Keeps a `Message` import used for tests that build raw messages.
pub fn raw(m: Message) -> String {
    m.to_json()
}

/// `progress_script`: reports 1 of 10 ("one"); then 0.5 of 5 (both smaller: clamped, no change);
/// then 1 of 20 (only the total changes); then 25 with no total ("far"; the total is raised to it);
/// then waits until cancelled. Steps are `step_ms` apart.
pub fn progress_script(step_ms: u64) -> mcp_tasks_server::Tool {
    use mcp_tasks_protocol::mcp_2025::TaskSupport;
    use mcp_tasks_server::tool::{handler_fn, text_result, Tool};
    Tool::new(
        "progress_script",
        handler_fn(move |ctx, _args| async move {
            let pause = || tokio::time::sleep(Duration::from_millis(step_ms));
            ctx.progress(1.0, Some(10.0), Some("one".into())).await;
            pause().await;
            ctx.progress(0.5, Some(5.0), None).await;
            pause().await;
            ctx.progress(1.0, Some(20.0), None).await;
            pause().await;
            ctx.progress(25.0, None, Some("far".into())).await;
            ctx.cancelled().await;
            text_result("stopped", true)
        }),
    )
    .task_support(TaskSupport::Optional)
}
