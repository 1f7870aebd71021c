//! The two task wires as a load generator speaks them: create a task of the `noop` tool, read it, and
//! fetch its result. One client = one HTTP connection pool (and, on 2025-11-25, one session).

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};

/// Which task wire a target speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// MCP 2025-11-25: `initialize`, sessions, `params.task`, `tasks/result`.
    Session2025,
    /// MCP 2026-07-28 + the tasks extension: `_meta` on every request, result inline in `tasks/get`.
    Stateless2026,
    /// A server that answers every request with one canned reply (the ceiling).
    Canned,
}

impl Wire {
    /// Short label for tables.
    pub fn label(self) -> &'static str {
        match self {
            Wire::Session2025 => "2025-11-25",
            Wire::Stateless2026 => "2026-07-28",
            Wire::Canned => "canned",
        }
    }
}

/// What a task read says.
pub struct Status {
    /// Whether the task is finished.
    pub terminal: bool,
    /// Whether the read carried the result (2026: inline).
    pub has_result: bool,
}

/// One client of one target.
pub struct Client {
    http: reqwest::Client,
    /// The endpoints (replicas): each request goes to the next one, with no stickiness.
    urls: Vec<String>,
    turn: std::cell::Cell<usize>,
    wire: Wire,
    session: Option<String>,
    next_id: u64,
    /// An API key sent as `Authorization: Bearer` on every request.
    bearer: Option<String>,
}

const EXT: &str = "io.modelcontextprotocol/tasks";

impl Client {
    /// A client; on 2025-11-25 it initializes a session first. `url` may list several endpoints,
    /// comma-separated (replicas on one store): requests go to them in turn.
    pub async fn connect(url: &str, wire: Wire) -> Result<Client> {
        Self::connect_as(url, wire, None).await
    }

    /// [`Client::connect`] with an API key.
    pub async fn connect_as(url: &str, wire: Wire, bearer: Option<&str>) -> Result<Client> {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(2)
            .build()?;
        let mut c = Client {
            http,
            urls: url.split(',').map(str::to_string).collect(),
            turn: std::cell::Cell::new(0),
            wire,
            session: None,
            next_id: 1,
            bearer: bearer.map(str::to_string),
        };
        if wire == Wire::Session2025 {
            let init = json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "mcp-tasks-bench", "version": "1"}});
            c.call("initialize", init).await?;
            if c.session.is_some() {
                c.notify("notifications/initialized").await?;
            }
        }
        Ok(c)
    }

    /// Starts a task of `noop`; returns its id.
    pub async fn create(&mut self) -> Result<String> {
        self.create_of("noop", json!({})).await
    }

    /// Starts a task of `noop` with an idempotency key of its own (our server's `_meta` key);
    /// returns its id.
    pub async fn create_keyed(&mut self) -> Result<String> {
        // Unique within the run and across runs on one store: the run's start and a counter.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        static RUN: std::sync::OnceLock<u128> = std::sync::OnceLock::new();
        let run = RUN.get_or_init(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default()
        });
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let key = format!("bench-{run:x}-{n}");
        self.create_with("noop", json!({}), Some(&key)).await
    }

    /// Starts a task of `tool` with `arguments`; returns its id.
    pub async fn create_of(&mut self, tool: &str, arguments: Value) -> Result<String> {
        self.create_with(tool, arguments, None).await
    }

    async fn create_with(
        &mut self,
        tool: &str,
        arguments: Value,
        key: Option<&str>,
    ) -> Result<String> {
        let mut params = match self.wire {
            Wire::Stateless2026 => json!({"name": tool, "arguments": arguments}),
            // A ttl, so stores that keep tasks without one forever (the TypeScript SDK's) purge them.
            _ => json!({"name": tool, "arguments": arguments, "task": {"ttl": 300_000}}),
        };
        if let Some(key) = key {
            params["_meta"] = json!({ "io.github.mcp-tasks/idempotency-key": key });
        }
        let r = self.call("tools/call", params).await?;
        let id = match self.wire {
            Wire::Stateless2026 => r.get("taskId"),
            _ => r.get("task").and_then(|t| t.get("taskId")),
        };
        id.and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| anyhow!("tools/call did not create a task: {r}"))
    }

    /// Reads a task.
    pub async fn get(&mut self, id: &str) -> Result<Status> {
        let r = self.call("tasks/get", json!({"taskId": id})).await?;
        let status = r
            .get("status")
            .and_then(Value::as_str)
            .or_else(|| r.get("task").and_then(|t| t["status"].as_str()))
            .ok_or_else(|| anyhow!("tasks/get without a status: {r}"))?;
        let terminal = matches!(status, "completed" | "failed" | "cancelled");
        Ok(Status {
            terminal,
            has_result: r.get("result").is_some() || r.get("content").is_some(),
        })
    }

    /// Fetches a finished task's result (2025: `tasks/result`).
    pub async fn result(&mut self, id: &str) -> Result<()> {
        self.result_text(id).await.map(|_| ())
    }

    /// `tasks/result` (2025; it blocks until the task is finished): the result's first text.
    pub async fn result_text(&mut self, id: &str) -> Result<String> {
        let r = self.call("tasks/result", json!({"taskId": id})).await?;
        Ok(r["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    async fn notify(&mut self, method: &str) -> Result<()> {
        let body = json!({"jsonrpc": "2.0", "method": method});
        self.request(method, None, body).send().await?;
        Ok(())
    }

    fn next_url(&self) -> &str {
        let turn = self.turn.get();
        self.turn.set(turn.wrapping_add(1));
        &self.urls[turn % self.urls.len()]
    }

    fn request(&self, method: &str, name: Option<&str>, body: Value) -> reqwest::RequestBuilder {
        let mut rb = self
            .http
            .post(self.next_url())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(key) = &self.bearer {
            rb = rb.bearer_auth(key);
        }
        match self.wire {
            Wire::Session2025 => {
                if let Some(s) = &self.session {
                    rb = rb
                        .header("mcp-session-id", s)
                        .header("mcp-protocol-version", "2025-11-25");
                }
            }
            Wire::Stateless2026 => {
                rb = rb
                    .header("mcp-protocol-version", "2026-07-28")
                    .header("mcp-method", method);
                if let Some(n) = name {
                    rb = rb.header("mcp-name", n);
                }
            }
            Wire::Canned => {}
        }
        rb.body(body.to_string())
    }

    /// One request; the reply's `result` (JSON or an SSE stream ending with the reply).
    async fn call(&mut self, method: &str, params: Value) -> Result<Value> {
        let reply = self.reply(method, params).await?;
        if let Some(e) = reply.get("error") {
            bail!("{method} failed: {e}");
        }
        Ok(reply["result"].clone())
    }

    /// One request; the whole reply, a result or a JSON-RPC error. `Err` when no reply came.
    pub async fn reply(&mut self, method: &str, mut params: Value) -> Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        let name = params
            .get("name")
            .or(params.get("taskId"))
            .and_then(Value::as_str)
            .map(str::to_string);
        if self.wire == Wire::Stateless2026 {
            // Beside whatever `_meta` the call has (an idempotency key).
            let mut meta = params.get("_meta").cloned().unwrap_or_else(|| json!({}));
            meta["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
            meta["io.modelcontextprotocol/clientCapabilities"] = json!({"extensions": {EXT: {}}});
            params["_meta"] = meta;
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let resp = self.request(method, name.as_deref(), body).send().await?;
        if let Some(s) = resp.headers().get("mcp-session-id") {
            self.session = Some(s.to_str().unwrap_or_default().to_string());
        }
        let status = resp.status();
        let sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"));
        let text = resp.text().await?;
        let reply: Value = if sse {
            text.split("\n\n")
                .filter_map(|event| {
                    let data: String = event
                        .lines()
                        .filter_map(|l| l.strip_prefix("data:"))
                        .map(str::trim_start)
                        .collect();
                    serde_json::from_str::<Value>(&data).ok()
                })
                .find(|v| v.get("result").is_some() || v.get("error").is_some())
                .with_context(|| format!("{method}: no reply on the stream"))?
        } else {
            serde_json::from_str(&text)
                .with_context(|| format!("{method}: HTTP {status}, not JSON: {text:.200}"))?
        };
        Ok(reply)
    }
}
