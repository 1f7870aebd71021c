//! Streams held open are capped per caller (issue 26, item 4): 2025-11-25 GET streams, 2026-07-28
//! `subscriptions/listen` and blocking `tasks/result` count together, per principal and for
//! anonymous callers per client address; past the cap a clear error (429, -32008); a freed stream
//! makes room; another address is not affected. A listen with nothing it can watch is acknowledged
//! and ended at once instead of being held open.

mod support;

use mcp_tasks_server::auth::{AuthConfig, Limits};
use mcp_tasks_server::ServerConfig;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::stateless::{Stateless, EXT, V};
use support::Client;

/// A server whose anonymous callers may hold `max_streams` streams per client address.
async fn start_capped(max_streams: usize) -> support::TestServer {
    let config = ServerConfig {
        auth: AuthConfig {
            anonymous_limits: Limits {
                max_streams,
                ..Limits::default()
            },
            ..AuthConfig::default()
        },
        ..ServerConfig::default()
    };
    support::start_with(
        Arc::new(mcp_tasks_engine::store::memory::MemoryStore::new()),
        support::fast_engine(),
        config,
        vec![],
    )
    .await
}

/// The body of a `subscriptions/listen` for `ids`, as the extension's client sends it.
fn listen_body(id: i64, ids: &[&str]) -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": {
        "notifications": {"taskIds": ids},
        "_meta": {"io.modelcontextprotocol/protocolVersion": V,
                  "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXT: {}}}},
    }})
}

/// Asks to open `c`'s GET stream, whatever the answer.
async fn get_stream(c: &Client) -> reqwest::Response {
    c.http
        .get(&c.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", c.session.clone().unwrap())
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_of_every_kind_count_together_per_client_address() {
    let s = start_capped(3).await;
    // One client address holds a GET stream, a blocking tasks/result and a listen: three.
    let mut a = Client::connect_from(&s.url, "127.0.0.1").await;
    let t1 = a.create_task("slow_compute", json!({"seconds": 30})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let t2 = a.create_task("slow_compute", json!({"seconds": 30})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let get = a.open_stream().await;
    let _result = a
        .stream_request("tasks/result", json!({"taskId": t1}))
        .await;
    let mut stateless = Stateless::with_tasks(&s.url);
    let t3 = stateless
        .start_task("slow_compute", json!({"seconds": 30}))
        .await;
    let mut listening = support::stateless::listen(&s.url, listen_body(7, &[&t3])).await;
    let ack = support::next_msg(&mut listening).await;
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([t3]));

    // A fourth of any kind is refused with a clear error.
    let refused = stateless
        .call(
            "subscriptions/listen",
            json!({"notifications": {"taskIds": [t3]}}),
        )
        .await;
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert_eq!(refused.code(), -32008);
    assert_eq!(refused.body["error"]["data"]["limit"], 3);
    assert!(
        refused.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Too many streams open"),
        "{}",
        refused.body
    );
    let blocked = a.request("tasks/result", json!({"taskId": t2})).await;
    assert_eq!(blocked.status, 429);
    assert_eq!(blocked.error_code(), -32008);
    let b = Client::connect_from(&s.url, "127.0.0.1").await;
    let get_b = get_stream(&b).await;
    assert_eq!(get_b.status(), 429, "a GET stream of another session");
    let body: serde_json::Value = get_b.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32008, "{body}");
    // A finished task's result does not block, so it holds no stream.
    let done = a.create_task("slow_compute", json!({"seconds": 0})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    a.wait_terminal(&done).await;
    let answered = a.request("tasks/result", json!({"taskId": done})).await;
    assert_eq!(answered.status, 200);

    // Another client address is not affected.
    let c = Client::connect_from(&s.url, "127.0.0.2").await;
    let _other = c.open_stream().await;

    // A stream that closes makes room again.
    drop(get);
    let mut opened = false;
    for _ in 0..50 {
        let r = get_stream(&b).await;
        if r.status() == 200 {
            opened = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(opened, "the closed GET stream's place was given back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_with_nothing_to_watch_is_acknowledged_and_ended() {
    let s = start_capped(2).await;
    let mut c = Stateless::with_tasks(&s.url);
    // Unknown ids, many times over: each is answered at once and holds nothing.
    for _ in 0..5 {
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            c.call(
                "subscriptions/listen",
                json!({"notifications": {"taskIds": ["no-such-task"]}}),
            ),
        )
        .await
        .expect("the listen ends instead of being held open");
        assert_eq!(answer.status, 200);
        let ack = &answer.notifications[0];
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        assert_eq!(ack["params"]["notifications"]["taskIds"], json!([]));
        let result = answer.result();
        assert_eq!(result["resultType"], "complete");
        assert!(
            result["_meta"]["io.modelcontextprotocol/subscriptionId"].is_number(),
            "{result}"
        );
    }
    // They held nothing: the cap of two is still free.
    let t = c.start_task("slow_compute", json!({"seconds": 30})).await;
    let mut first = support::stateless::listen(&s.url, listen_body(1, &[&t])).await;
    let mut second = support::stateless::listen(&s.url, listen_body(2, &[&t])).await;
    for rx in [&mut first, &mut second] {
        let ack = support::next_msg(rx).await;
        assert_eq!(ack["params"]["notifications"]["taskIds"], json!([t]));
    }
}
