//! The HTTP front door of every wire, in process: one POST through the server's router (the strict
//! header checks, the era classifier, the JSON-RPC parser, then the wire's own parsing of `params`)
//! on the demo tools and a memory store. Whatever arrives, the answer is never a 5xx and never a
//! panic, and a JSON answer is one JSON-RPC message.
//!
//! Input (readable, so the corpus can be written by hand): the first byte picks how the request is
//! completed, `0` a 2025-11-25 session's message, `1` a session that opted into Asynchronous Tool
//! Execution, `2` a 2026-07-28 stateless message (`_meta` and the routing headers filled in from the
//! body), anything else sent as it is; then optional `Name: value` header lines and a blank line
//! (headers given win over the ones filled in); then the body.
#![no_main]

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderName, HeaderValue, Request};
use libfuzzer_sys::fuzz_target;
use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_engine::EngineConfig;
use mcp_tasks_protocol::jsonrpc::{parse_message, Message};
use mcp_tasks_server::{demo, Server, ServerConfig};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tower_service::Service;

const V2025: &str = "2025-11-25";
const V2026: &str = "2026-07-28";

/// One server for the whole run, with a session of each kind opened on it.
struct Harness {
    runtime: tokio::runtime::Runtime,
    router: axum::Router,
    session: String,
    async_session: String,
}

static HARNESS: LazyLock<Harness> = LazyLock::new(|| {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let router = runtime.block_on(async {
        let mut b = Server::builder(
            Arc::new(MemoryStore::new()),
            EngineConfig::default(),
            ServerConfig::default(),
        );
        for t in demo::tools::tools() {
            b = b.tool(t).expect("the demo tools register");
        }
        let server = b.build();
        server.start().await.expect("the server starts");
        mcp_tasks_server::http::router(server)
    });
    let mut h = Harness {
        runtime,
        router,
        session: String::new(),
        async_session: String::new(),
    };
    h.session = h.open_session(json!({}));
    h.async_session = h.open_session(json!({"experimental": {"asyncToolExecution": {}}}));
    h
});

impl Harness {
    fn open_session(&self, capabilities: Value) -> String {
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": V2025, "capabilities": capabilities,
            "clientInfo": {"name": "fuzz", "version": "1"}}});
        let req = Request::post("/mcp")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(Body::from(body.to_string()))
            .expect("a request");
        let (status, headers, _) = self.send(req).expect("initialize answers");
        assert_eq!(status, 200);
        headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .expect("a session id")
            .to_string()
    }

    /// Sends one request; `None` when the answer took longer than 200 ms (a long wait, such as a
    /// blocking `tasks/result`, is not a failure: the request is dropped, as a client that gives up
    /// would).
    fn send(&self, mut req: Request<Body>) -> Option<(u16, axum::http::HeaderMap, Vec<u8>)> {
        req.extensions_mut()
            .insert(ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40000))));
        let mut router = self.router.clone();
        self.runtime.block_on(async move {
            tokio::time::timeout(Duration::from_millis(200), async move {
                let resp = router.call(req).await.expect("the router is infallible");
                let (parts, body) = resp.into_parts();
                let bytes = axum::body::to_bytes(body, 16 << 20).await.ok()?;
                Some((parts.status.as_u16(), parts.headers, bytes.to_vec()))
            })
            .await
            .ok()
            .flatten()
        })
    }
}

/// The header lines and the body of an input.
fn split(rest: &[u8]) -> (Vec<(String, String)>, &[u8]) {
    let Some(end) = rest.windows(2).position(|w| w == b"\n\n") else {
        return (Vec::new(), rest);
    };
    let headers = String::from_utf8_lossy(&rest[..end])
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    (headers, &rest[end + 2..])
}

/// What the 2026-07-28 wire needs besides the body: `_meta` in `params`, and the headers that mirror
/// the method and the name.
fn complete_stateless(body: &[u8], headers: &mut Vec<(String, String)>) -> Vec<u8> {
    let Ok(Value::Object(mut msg)) = serde_json::from_slice::<Value>(body) else {
        return body.to_vec();
    };
    headers.push(("mcp-protocol-version".into(), V2026.into()));
    let method = msg.get("method").and_then(Value::as_str).map(String::from);
    if let Some(m) = &method {
        headers.push(("mcp-method".into(), m.clone()));
    }
    if let Some(Value::Object(params)) = msg.get_mut("params") {
        for field in ["name", "taskId", "uri"] {
            if let Some(v) = params.get(field).and_then(Value::as_str) {
                headers.push(("mcp-name".into(), v.to_string()));
                break;
            }
        }
        params.entry("_meta").or_insert_with(|| {
            json!({
                "io.modelcontextprotocol/protocolVersion": V2026,
                "io.modelcontextprotocol/clientCapabilities":
                    {"extensions": {"io.modelcontextprotocol/tasks": {}}},
                "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "1"},
            })
        });
    }
    serde_json::to_vec(&msg).unwrap_or_else(|_| body.to_vec())
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let h = &*HARNESS;
    let (given, body) = split(rest);
    let mut filled: Vec<(String, String)> = vec![
        ("content-type".into(), "application/json".into()),
        (
            "accept".into(),
            "application/json, text/event-stream".into(),
        ),
    ];
    let body = match mode {
        b'0' | b'1' => {
            let session = if mode == b'0' {
                &h.session
            } else {
                &h.async_session
            };
            filled.push(("mcp-session-id".into(), session.clone()));
            filled.push(("mcp-protocol-version".into(), V2025.into()));
            body.to_vec()
        }
        b'2' => complete_stateless(body, &mut filled),
        _ => {
            filled.clear();
            body.to_vec()
        }
    };
    let mut req = Request::post("/mcp");
    for (name, value) in &filled {
        if !given.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
            req = req.header(name.as_str(), value.as_str());
        }
    }
    for (name, value) in &given {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            req = req.header(n, v);
        }
    }
    let Ok(req) = req.body(Body::from(body)) else {
        return;
    };
    let Some((status, headers, reply)) = h.send(req) else {
        return;
    };
    assert!(
        status < 500,
        "HTTP {status}: {}",
        String::from_utf8_lossy(&reply)
    );
    let json = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("application/json"));
    if json && !reply.is_empty() {
        match parse_message(&reply) {
            Ok(Message::Response(_)) | Ok(Message::Error(_)) => {}
            other => panic!(
                "a JSON answer that is not one JSON-RPC reply: {other:?}: {}",
                String::from_utf8_lossy(&reply)
            ),
        }
    }
});
