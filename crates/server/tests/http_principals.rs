//! Principals over real HTTP: bearer keys, task binding, isolation (another principal's task answers
//! exactly like a missing one), per-principal limits.

mod support;

use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_server::auth::{hash_key, ApiKey, AuthConfig, Limits};
use mcp_tasks_server::ServerConfig;
use serde_json::{json, Value};
use std::sync::Arc;
use support::{long_task, sees_nothing, start_with, Client};

fn auth(allow_anonymous: bool) -> AuthConfig {
    let key = |who: &str, limits: Limits| ApiKey {
        principal: who.into(),
        sha256: hash_key(&format!("key-{who}")),
        limits,
        scopes: None,
    };
    AuthConfig {
        keys: vec![
            key("alice", Limits::default()),
            key("bob", Limits::default()),
            key(
                "capped",
                Limits {
                    max_running_tasks: 2,
                    calls_per_minute: Some(6000),
                    ..Limits::default()
                },
            ),
            key(
                "slow",
                Limits {
                    max_running_tasks: 100,
                    calls_per_minute: Some(6),
                    ..Limits::default()
                },
            ),
        ],
        allow_anonymous,
        ..AuthConfig::default()
    }
}

async fn server(allow_anonymous: bool) -> support::TestServer {
    let config = ServerConfig {
        auth: auth(allow_anonymous),
        ..ServerConfig::default()
    };
    start_with(
        Arc::new(MemoryStore::new()),
        support::fast_engine(),
        config,
        vec![],
    )
    .await
}

async fn raw(
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut rb = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    let r = rb.send().await.unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.text().await.unwrap())
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

#[tokio::test]
async fn missing_or_bad_keys_get_401_with_a_challenge() {
    let s = server(false).await;
    let (status, headers, body) = raw(&s.url, &[], INIT).await;
    assert_eq!(status, 401);
    assert_eq!(headers.get("www-authenticate").unwrap(), "Bearer");
    assert!(body.contains("Authorization: Bearer"), "{body}");
    let (status, headers, _) = raw(&s.url, &[("authorization", "Bearer wrong")], INIT).await;
    assert_eq!(status, 401);
    assert!(headers
        .get("www-authenticate")
        .unwrap()
        .to_str()
        .unwrap()
        .contains("invalid_token"));
    let (status, _, _) = raw(&s.url, &[("authorization", "Basic abc")], INIT).await;
    assert_eq!(status, 401);
    let (status, _, _) = raw(&s.url, &[("authorization", "Bearer key-alice")], INIT).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn principals_and_anonymous_sessions_see_nothing_of_each_others_tasks() {
    let s = server(true).await;
    let mut alice = Client::connect_token(&s.url, "key-alice", json!({})).await;
    let mut alice2 = Client::connect_token(&s.url, "key-alice", json!({})).await;
    let mut bob = Client::connect_token(&s.url, "key-bob", json!({})).await;
    let mut anon1 = Client::connect(&s.url).await;
    let mut anon2 = Client::connect(&s.url).await;
    let ta = long_task(&mut alice).await;
    let tb = long_task(&mut bob).await;
    let t1 = long_task(&mut anon1).await;
    let t2 = long_task(&mut anon2).await;

    for (who, c) in [("bob", &mut bob), ("anon1", &mut anon1)] {
        println!("{who} probes alice's task");
        sees_nothing(c, &ta).await;
    }
    for c in [&mut alice, &mut anon2] {
        sees_nothing(c, &tb).await;
    }
    for c in [&mut alice, &mut bob] {
        sees_nothing(c, &t1).await;
        sees_nothing(c, &t2).await;
    }
    // Anonymous sessions do not list each other's tasks. (They can reach a task by its unguessable
    // id — that is how a reconnecting client finds its task — see the README.)
    let listed = anon2.request("tasks/list", json!({})).await;
    let ids: Vec<&str> = listed.result()["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["taskId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [t2.as_str()]);
    // A principal sees its tasks from any of its sessions.
    assert_eq!(alice2.get_task(&ta).await["taskId"], ta.as_str());
    let listed = alice2.request("tasks/list", json!({})).await;
    assert_eq!(listed.result()["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(
        alice2
            .request("tasks/cancel", json!({"taskId": ta}))
            .await
            .result()["status"],
        "cancelled"
    );
    for c in [&mut bob, &mut anon1, &mut anon2] {
        for id in [&tb, &t1, &t2] {
            let _ = c.request("tasks/cancel", json!({"taskId": id})).await;
        }
    }
}

#[tokio::test]
async fn a_session_belongs_to_its_principal() {
    let s = server(true).await;
    let alice = Client::connect_token(&s.url, "key-alice", json!({})).await;
    let sid = alice.session.clone().unwrap();
    let ping = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
    let (status, _, _) = raw(
        &s.url,
        &[
            ("authorization", "Bearer key-bob"),
            ("mcp-session-id", &sid),
        ],
        ping,
    )
    .await;
    assert_eq!(status, 404, "bob cannot use alice's session");
    let (status, _, _) = raw(&s.url, &[("mcp-session-id", &sid)], ping).await;
    assert_eq!(status, 404, "nor can an anonymous caller");
    let (status, _, _) = raw(
        &s.url,
        &[
            ("authorization", "Bearer key-alice"),
            ("mcp-session-id", &sid),
        ],
        ping,
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn another_principal_cannot_answer_a_tasks_input_request() {
    let s = server(true).await;
    let mut alice =
        Client::connect_token(&s.url, "key-alice", json!({"elicitation": {"form": {}}})).await;
    let bob = Client::connect_token(&s.url, "key-bob", json!({"elicitation": {"form": {}}})).await;
    let mut get = alice.open_stream().await;
    let id = alice
        .create_task("confirm_delete", json!({"filename": "f"}))
        .await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let req = loop {
        let m = support::next_msg(&mut get).await;
        if m.get("id").is_some() {
            break m;
        }
    };
    let (status, body) = bob
        .respond(
            &req["id"],
            json!({"action": "accept", "content": {"confirm": true}}),
        )
        .await;
    assert_eq!(status, 400);
    assert!(body.contains("no pending request"), "{body}");
    assert_eq!(
        alice.get_task(&id).await["status"],
        "input_required",
        "bob's answer changed nothing"
    );
    assert_eq!(
        alice
            .respond(&req["id"], json!({"action": "decline"}))
            .await
            .0,
        202
    );
    assert_eq!(alice.wait_terminal(&id).await["status"], "completed");
}

#[tokio::test]
async fn running_task_limit_gives_a_clear_error_and_frees_up() {
    let s = server(true).await;
    let mut c = Client::connect_token(&s.url, "key-capped", json!({})).await;
    let first = long_task(&mut c).await;
    long_task(&mut c).await;
    let ex = c
        .request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 30}, "task": {}}),
        )
        .await;
    assert_eq!(ex.status, 200, "an error, not a dropped connection");
    assert_eq!(ex.error_code(), -32004);
    let msg = ex.error()["message"].as_str().unwrap();
    assert!(msg.contains("limit is 2"), "{msg}");
    assert_eq!(ex.error()["data"], json!({"running": 2, "limit": 2}));
    c.request("tasks/cancel", json!({"taskId": first})).await;
    let ok = c
        .request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0}, "task": {}}),
        )
        .await;
    assert!(ok.result()["task"]["taskId"].is_string());
    // Other principals are not affected by this one's limit.
    let mut other = Client::connect_token(&s.url, "key-alice", json!({})).await;
    long_task(&mut other).await;
}

#[tokio::test]
async fn rate_limited_call_is_429_with_retry_after() {
    let s = server(true).await;
    let mut c = Client::connect_token(&s.url, "key-slow", json!({})).await;
    let mut limited: Option<Value> = None;
    for _ in 0..20 {
        let ex = c.request("tasks/list", json!({})).await;
        if let Some(e) = ex.reply.as_ref().and_then(|r| r.get("error")) {
            // A refused call is HTTP 429 with Retry-After (whole seconds), the JSON-RPC error in the body.
            assert_eq!(ex.status, 429);
            let secs: u64 = ex
                .retry_after
                .as_deref()
                .expect("Retry-After")
                .parse()
                .unwrap();
            assert!(secs >= 1, "{secs}");
            limited = Some(e.clone());
            break;
        }
        assert_eq!(ex.status, 200);
    }
    let e = limited.expect("the 6/min key is limited within 20 calls");
    assert_eq!(e["code"], -32005);
    assert!(e["data"]["retryAfterMs"].as_u64().unwrap() > 0);
    assert!(e["message"]
        .as_str()
        .unwrap()
        .contains("6 task calls per minute"));
    // Calls that do not manage tasks are not limited.
    assert_eq!(c.request("ping", json!({})).await.result(), &json!({}));
    assert!(c
        .request("tools/list", json!({}))
        .await
        .reply
        .unwrap()
        .get("result")
        .is_some());
}
