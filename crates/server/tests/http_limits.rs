//! Limits under load, over real HTTP on 127.0.0.1: the default configuration does not refuse normal use
//! (many clients creating and polling tasks as fast as they can), while configured limits stay enforced
//! per principal, per session (2025-11-25) and per client address (2026-07-28).

mod support;

use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_server::auth::{AuthConfig, Limits};
use mcp_tasks_server::ServerConfig;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{start_with, Client};

const V: &str = "2026-07-28";

/// One stateless call; returns the reply body and the HTTP status.
async fn call(
    http: &reqwest::Client,
    url: &str,
    id: u64,
    method: &str,
    params: Value,
) -> (u16, Value) {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    let mut rb = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", V)
        .header("mcp-method", method);
    if let Some(n) = params
        .get("name")
        .or(params.get("taskId"))
        .and_then(Value::as_str)
    {
        rb = rb.header("mcp-name", n);
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let ex = support::read_exchange(rb.body(body.to_string()).send().await.unwrap()).await;
    (ex.status, ex.reply.unwrap_or(Value::Null))
}

#[derive(Default)]
struct Tally {
    calls: AtomicU64,
    refused: AtomicU64,
    other_errors: AtomicU64,
    tasks: AtomicU64,
}

/// `clients` stateless clients each create a task and poll it to the end, again and again, as fast as
/// they can, for `run`.
async fn hammer(url: &str, clients: usize, run: Duration) -> Arc<Tally> {
    let tally = Arc::new(Tally::default());
    let deadline = Instant::now() + run;
    let mut workers = Vec::new();
    for _ in 0..clients {
        let (url, tally) = (url.to_string(), tally.clone());
        workers.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut id = 0;
            let note = |status: u16, reply: &Value| {
                tally.calls.fetch_add(1, Ordering::Relaxed);
                match reply["error"]["code"].as_i64() {
                    Some(-32005) => tally.refused.fetch_add(1, Ordering::Relaxed),
                    Some(_) => tally.other_errors.fetch_add(1, Ordering::Relaxed),
                    None if status == 200 => 0,
                    None => tally.other_errors.fetch_add(1, Ordering::Relaxed),
                };
            };
            while Instant::now() < deadline {
                id += 1;
                let args = json!({"name": "slow_compute", "arguments": {"seconds": 0}});
                let (status, reply) = call(&http, &url, id, "tools/call", args).await;
                note(status, &reply);
                let Some(task) = reply["result"]["taskId"].as_str().map(String::from) else {
                    continue;
                };
                tally.tasks.fetch_add(1, Ordering::Relaxed);
                loop {
                    id += 1;
                    let (status, reply) =
                        call(&http, &url, id, "tasks/get", json!({"taskId": task})).await;
                    note(status, &reply);
                    let done = reply["result"]["status"]
                        .as_str()
                        .is_none_or(|s| s != "working");
                    if done || Instant::now() >= deadline {
                        break;
                    }
                }
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    tally
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_limits_do_not_refuse_sixteen_clients_polling_as_fast_as_they_can() {
    let s = start_with(
        Arc::new(MemoryStore::new()),
        support::fast_engine(),
        ServerConfig::default(),
        vec![],
    )
    .await;
    let started = Instant::now();
    let tally = hammer(&s.url, 16, Duration::from_secs(10)).await;
    let calls = tally.calls.load(Ordering::Relaxed);
    println!(
        "16 clients, {:.1} s: {calls} calls ({:.0}/s), {} tasks, {} refused, {} other errors",
        started.elapsed().as_secs_f64(),
        calls as f64 / started.elapsed().as_secs_f64(),
        tally.tasks.load(Ordering::Relaxed),
        tally.refused.load(Ordering::Relaxed),
        tally.other_errors.load(Ordering::Relaxed),
    );
    assert!(calls > 1_000, "the load did not run: {calls} calls");
    assert_eq!(
        tally.refused.load(Ordering::Relaxed),
        0,
        "rate-limited under default limits"
    );
    assert_eq!(tally.other_errors.load(Ordering::Relaxed), 0);
}

fn limited(per_minute: u32) -> ServerConfig {
    ServerConfig {
        auth: AuthConfig {
            anonymous_limits: Limits {
                calls_per_minute: Some(per_minute),
                ..Limits::default()
            },
            ..AuthConfig::default()
        },
        ..ServerConfig::default()
    }
}

/// A server whose anonymous callers may make `per_minute` task calls a minute.
async fn start_limited(per_minute: u32) -> support::TestServer {
    start_with(
        Arc::new(MemoryStore::new()),
        support::fast_engine(),
        limited(per_minute),
        vec![],
    )
    .await
}

#[tokio::test]
async fn a_configured_limit_refuses_an_anonymous_stateless_client_by_its_address() {
    let s = start_limited(60).await;
    let http = reqwest::Client::new();
    let mut refused = None;
    for id in 0..30 {
        let (status, reply) = call(&http, &s.url, id, "tasks/get", json!({"taskId": "nope"})).await;
        if reply["error"]["code"] == -32005 {
            refused = Some((status, reply));
            break;
        }
    }
    let (status, reply) = refused.expect("60/min allows a burst of 10, then refuses");
    assert_eq!(status, 429);
    assert!(reply["error"]["data"]["retryAfterMs"].as_u64().unwrap() > 0);
    // Another client from the same address shares the bucket: anonymous callers have no other name.
    let (_, again) = call(
        &reqwest::Client::new(),
        &s.url,
        99,
        "tasks/get",
        json!({"taskId": "x"}),
    )
    .await;
    assert_eq!(again["error"]["code"], -32005);
    // A client from another address has a bucket of its own.
    let (status, other) = call(
        &from("127.0.0.2"),
        &s.url,
        100,
        "tasks/get",
        json!({"taskId": "x"}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        other["error"]["code"], -32602,
        "not found, not limited: {other}"
    );
}

/// An HTTP client whose connections come from `ip` (any 127.0.0.0/8 address is this machine).
fn from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap()
}

#[tokio::test]
async fn anonymous_stateless_clients_have_running_task_caps_of_their_own_address() {
    let config = ServerConfig {
        auth: AuthConfig {
            anonymous_limits: Limits {
                max_running_tasks: 1,
                ..Limits::default()
            },
            ..AuthConfig::default()
        },
        ..ServerConfig::default()
    };
    let s = start_with(
        Arc::new(MemoryStore::new()),
        support::fast_engine(),
        config,
        vec![],
    )
    .await;
    let long = json!({"name": "slow_compute", "arguments": {"seconds": 30}});
    let a = from("127.0.0.1");
    let (_, first) = call(&a, &s.url, 1, "tools/call", long.clone()).await;
    assert!(first["result"]["taskId"].is_string(), "{first}");
    let (_, second) = call(&a, &s.url, 2, "tools/call", long.clone()).await;
    assert_eq!(second["error"]["code"], -32004, "{second}");
    assert_eq!(second["error"]["data"], json!({"running": 1, "limit": 1}));
    // Another address is not held back by the first one's task.
    let (_, other) = call(&from("127.0.0.2"), &s.url, 3, "tools/call", long).await;
    assert!(other["result"]["taskId"].is_string(), "{other}");
}

#[tokio::test]
async fn a_configured_limit_refuses_per_client_address_on_the_session_wire() {
    let s = start_limited(60).await;
    let mut a = Client::connect(&s.url).await;
    let mut refused = false;
    for _ in 0..30 {
        let ex = a.request("tasks/list", json!({})).await;
        if ex
            .reply
            .as_ref()
            .is_some_and(|r| r["error"]["code"] == -32005)
        {
            assert_eq!(ex.status, 429);
            refused = true;
            break;
        }
    }
    assert!(refused, "60/min allows a burst of 10, then refuses");
    // A new session from the same address shares the bucket: sessions are no way around it.
    let mut again = Client::connect(&s.url).await;
    let ex = again.request("tasks/list", json!({})).await;
    assert_eq!(ex.status, 429, "{:?}", ex.reply);
    // Another address has a bucket of its own, and so do the address's stateless calls.
    let mut b = Client::connect_from(&s.url, "127.0.0.2").await;
    let ex = b.request("tasks/list", json!({})).await;
    assert_eq!(ex.status, 200);
    assert!(ex.reply.unwrap().get("result").is_some());
    let unknown = json!({"taskId": format!("{:044x}", 1)});
    let (status, reply) = call(&from("127.0.0.1"), &s.url, 1, "tasks/get", unknown).await;
    assert_eq!(
        status, 200,
        "the stateless wire is counted on its own: {reply}"
    );
    assert_eq!(reply["error"]["code"], -32602, "not rate limited: {reply}");
}

#[tokio::test]
async fn long_lists_are_refused_with_the_limit_and_each_item_counts_as_a_call() {
    let s = start_limited(60).await;
    let http = reqwest::Client::new();
    let ids = |n: usize| -> Vec<String> { (0..n).map(|i| format!("{i:044x}")).collect() };
    let (status, reply) = call(
        &http,
        &s.url,
        1,
        "subscriptions/listen",
        json!({"notifications": {"taskIds": ids(1001)}}),
    )
    .await;
    assert_eq!(status, 200, "a JSON-RPC error, as for any invalid params");
    assert_eq!(reply["error"]["code"], -32602);
    assert_eq!(
        reply["error"]["message"],
        "subscriptions/listen: 1001 taskIds; at most 1000 in one request"
    );
    assert_eq!(reply["error"]["data"]["limit"], 1000);
    let answers: serde_json::Map<String, Value> = (0..101)
        .map(|i| (format!("q{i}"), json!({"action": "cancel"})))
        .collect();
    let (_, reply) = call(
        &http,
        &s.url,
        2,
        "tasks/update",
        json!({"taskId": "x", "inputResponses": answers}),
    )
    .await;
    assert_eq!(reply["error"]["code"], -32602);
    assert_eq!(
        reply["error"]["message"],
        "tasks/update: 101 inputResponses; at most 100 in one request"
    );
    // 60 calls a minute hold a burst of 10: a listen naming 30 tasks is let through (the bucket held
    // a call) and leaves it 20 calls in debt, so the next call waits about 20 s.
    let (status, _) = call(&http, &s.url, 3, "tasks/get", json!({"taskId": "x"})).await;
    assert_eq!(status, 200, "refusals above did not count");
    let listen = json!({"jsonrpc": "2.0", "id": 4, "method": "subscriptions/listen", "params": {
    "notifications": {"taskIds": ids(30)},
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    }}});
    let resp = http
        .post(&s.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", V)
        .header("mcp-method", "subscriptions/listen")
        .body(listen.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200, "the listen itself is served");
    drop(resp);
    let (status, reply) = call(&http, &s.url, 5, "tasks/get", json!({"taskId": "x"})).await;
    assert_eq!(status, 429, "{reply}");
    let wait = reply["error"]["data"]["retryAfterMs"].as_u64().unwrap();
    assert!(wait > 15_000, "the debt of the 30 items: {wait} ms");
}
