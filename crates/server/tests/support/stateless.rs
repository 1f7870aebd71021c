//! A client of the 2026-07-28 stateless wire (each request carries its own version, capabilities and
//! routing headers), validating every reply and notification against the official schemas.

use serde_json::{json, Value};
use std::time::Duration;

use super::schema::{check_notification_2026, check_reply_2026};

/// The protocol version this client speaks.
pub const V: &str = "2026-07-28";
/// The tasks extension's identifier.
pub const EXT: &str = "io.modelcontextprotocol/tasks";

/// A stateless 2026-07-28 client.
pub struct Stateless {
    pub url: String,
    http: reqwest::Client,
    caps: Value,
    next: i64,
}

/// One request's answer: HTTP status, the reply, and the notifications streamed before it.
pub struct Answer {
    pub status: u16,
    /// The `WWW-Authenticate` header, if any.
    pub challenge: Option<String>,
    pub body: Value,
    pub notifications: Vec<Value>,
}

impl Stateless {
    pub fn new(url: &str, caps: Value) -> Stateless {
        Stateless {
            url: url.into(),
            http: reqwest::Client::new(),
            caps,
            next: 1,
        }
    }
    /// The same client, authenticating with API key `key`.
    pub fn bearer(mut self, key: &str) -> Stateless {
        self.http = reqwest::Client::builder()
            .default_headers(
                [(
                    reqwest::header::AUTHORIZATION,
                    format!("Bearer {key}").parse().unwrap(),
                )]
                .into_iter()
                .collect(),
            )
            .build()
            .unwrap();
        self
    }
    /// The same client, connecting from `ip` (any 127.0.0.0/8 address): another client address.
    pub fn bound_to(mut self, ip: &str) -> Stateless {
        self.http = reqwest::Client::builder()
            .local_address(ip.parse::<std::net::IpAddr>().unwrap())
            .build()
            .unwrap();
        self
    }
    pub fn with_tasks(url: &str) -> Stateless {
        Self::new(
            url,
            json!({"extensions": {EXT: {}}, "elicitation": {"form": {}}, "sampling": {}}),
        )
    }

    pub fn name_of(method: &str, params: &Value) -> Option<String> {
        let field = match method {
            "tools/call" | "prompts/get" => "name",
            "resources/read" => "uri",
            "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
            _ => return None,
        };
        params.get(field).and_then(Value::as_str).map(String::from)
    }

    /// Calls `tool` (which must answer with a task, as with the extension declared); its task id.
    pub async fn start_task(&mut self, tool: &str, arguments: Value) -> String {
        self.call("tools/call", json!({"name": tool, "arguments": arguments}))
            .await
            .result()["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("{tool} answered without a task"))
            .to_string()
    }

    /// Sends a well-formed request (meta and headers filled in) and reads the whole answer.
    pub async fn call(&mut self, method: &str, params: Value) -> Answer {
        self.call_with_meta(method, params, json!({})).await
    }

    /// Like [`Stateless::call`], with `extra` merged into `_meta`.
    pub async fn call_with_meta(
        &mut self,
        method: &str,
        mut params: Value,
        extra: Value,
    ) -> Answer {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": V,
            "io.modelcontextprotocol/clientCapabilities": self.caps,
            "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
        });
        if let (Some(meta), Some(extra)) = (params["_meta"].as_object_mut(), extra.as_object()) {
            meta.extend(extra.clone());
        }
        let mut headers = vec![
            ("mcp-protocol-version".to_string(), V.to_string()),
            ("mcp-method".to_string(), method.to_string()),
        ];
        if let Some(n) = Self::name_of(method, &params) {
            headers.push(("mcp-name".into(), n));
        }
        self.raw(method, params, headers).await
    }

    pub async fn raw(
        &mut self,
        method: &str,
        params: Value,
        headers: Vec<(String, String)>,
    ) -> Answer {
        let id = self.next;
        self.next += 1;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut rb = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        for (k, v) in &headers {
            rb = rb.header(k.as_str(), v.as_str());
        }
        let resp = rb.send().await.unwrap();
        assert!(
            resp.headers().get("mcp-session-id").is_none(),
            "no sessions on this wire"
        );
        let ex = super::read_exchange(resp).await;
        let reply = ex.reply.clone().unwrap_or(Value::Null);
        if !reply.is_null() {
            check_reply_2026(method, &reply);
        }
        for n in &ex.notifications {
            check_notification_2026(n);
        }
        Answer {
            status: ex.status,
            challenge: ex.challenge,
            body: reply,
            notifications: ex.notifications,
        }
    }
}

impl Answer {
    pub fn result(&self) -> &Value {
        self.body
            .get("result")
            .unwrap_or_else(|| panic!("expected a result, got {}", self.body))
    }
    pub fn code(&self) -> i64 {
        self.body["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("expected an error, got {}", self.body))
    }
}

/// Polls `tasks/get` until the task is in one of `want`.
pub async fn wait_status(c: &mut Stateless, id: &str, want: &[&str]) -> Value {
    for _ in 0..200 {
        let t = c
            .call("tasks/get", json!({"taskId": id}))
            .await
            .result()
            .clone();
        if want.contains(&t["status"].as_str().unwrap()) {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("task {id} never reached {want:?}");
}

/// Opens a `subscriptions/listen` stream; its messages arrive on the receiver (validated).
pub async fn listen(url: &str, body: Value) -> tokio::sync::mpsc::UnboundedReceiver<Value> {
    let resp = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", V)
        .header("mcp-method", "subscriptions/listen")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    super::sse_reader_with(resp, check_notification_2026)
}
