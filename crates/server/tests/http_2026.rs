//! The 2026-07-28 stateless wire and the tasks extension (SEP-2663) over real HTTP on 127.0.0.1. Every
//! message is validated against the official 2026-07-28 schema and the extension's schema.

mod support;

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::stateless::{listen, wait_status, Stateless, EXT, V};
use support::{start, start_with};

#[tokio::test]
async fn discover_advertises_the_extension_and_no_legacy_tasks_capability() {
    let s = start(vec![]).await;
    let mut c = Stateless::new(&s.url, json!({}));
    let r = c.call("server/discover", json!({})).await;
    let caps = &r.result()["capabilities"];
    assert_eq!(caps["extensions"][EXT], json!({}));
    assert!(caps.get("tasks").is_none());
    assert!(r.result()["supportedVersions"]
        .as_array()
        .unwrap()
        .contains(&json!(V)));
    assert_eq!(
        r.result()["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-tasks"
    );
}

#[tokio::test]
async fn missing_meta_and_unsupported_versions_are_rejected_with_400() {
    let s = start(vec![]).await;
    let mut c = Stateless::new(&s.url, json!({}));
    let hdr = |m: &str| {
        vec![
            ("mcp-protocol-version".to_string(), V.to_string()),
            ("mcp-method".to_string(), m.to_string()),
        ]
    };
    let r = c
        .raw(
            "tools/list",
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": V}}),
            hdr("tools/list"),
        )
        .await;
    assert_eq!((r.status, r.code()), (400, -32602));
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("clientCapabilities"));
    let meta = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01", "io.modelcontextprotocol/clientCapabilities": {}}});
    let headers = vec![
        ("mcp-protocol-version".to_string(), "2099-01-01".to_string()),
        ("mcp-method".to_string(), "tools/list".to_string()),
    ];
    let r = c.raw("tools/list", meta, headers).await;
    assert_eq!((r.status, r.code()), (400, -32022));
    assert_eq!(r.body["error"]["data"]["requested"], "2099-01-01");
}

#[tokio::test]
async fn headers_must_match_the_body() {
    let s = start(vec![]).await;
    let mut c = Stateless::new(&s.url, json!({}));
    let meta = json!({"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {}});
    let call = json!({"name": "greet", "arguments": {"name": "h"}, "_meta": meta});
    let h = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect::<Vec<_>>()
    };
    for (why, headers) in [
        (
            "method mismatch",
            h(&[
                ("mcp-protocol-version", V),
                ("mcp-method", "tools/list"),
                ("mcp-name", "greet"),
            ]),
        ),
        (
            "missing method",
            h(&[("mcp-protocol-version", V), ("mcp-name", "greet")]),
        ),
        (
            "missing name",
            h(&[("mcp-protocol-version", V), ("mcp-method", "tools/call")]),
        ),
        (
            "name mismatch",
            h(&[
                ("mcp-protocol-version", V),
                ("mcp-method", "tools/call"),
                ("mcp-name", "gret"),
            ]),
        ),
        (
            "version mismatch",
            h(&[
                ("mcp-protocol-version", "2025-11-25"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "greet"),
            ]),
        ),
        (
            "case of the value",
            h(&[
                ("mcp-protocol-version", V),
                ("mcp-method", "TOOLS/CALL"),
                ("mcp-name", "greet"),
            ]),
        ),
    ] {
        let r = c.raw("tools/call", call.clone(), headers).await;
        assert_eq!((r.status, r.code()), (400, -32020), "{why}");
        assert!(
            r.body["id"].is_i64(),
            "the error echoes the request id ({why})"
        );
    }
    // Header names are case-insensitive, values are trimmed, and the base64 form is decoded.
    let ok = h(&[
        ("MCP-PROTOCOL-VERSION", V),
        ("Mcp-Method", "tools/call"),
        ("mcp-name", "=?base64?Z3JlZXQ=?="),
    ]);
    let r = c.raw("tools/call", call.clone(), ok).await;
    assert_eq!(r.result()["content"][0]["text"], "Hello, h!");
    let ok = h(&[
        ("mcp-protocol-version", V),
        ("mcp-method", "tools/call"),
        ("mcp-name", "  greet  "),
    ]);
    assert_eq!(c.raw("tools/call", call, ok).await.status, 200);
}

#[tokio::test]
async fn removed_and_unknown_methods_are_404_method_not_found() {
    let s = start(vec![]).await;
    let mut c = Stateless::with_tasks(&s.url);
    for m in ["tasks/result", "tasks/list", "initialize_me"] {
        let r = c.call(m, json!({"taskId": "x"})).await;
        assert_eq!((r.status, r.code()), (404, -32601), "{m}");
    }
    let get = reqwest::Client::new()
        .get(&s.url)
        .header("mcp-protocol-version", V)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(get.status().as_u16(), 405);
}

#[tokio::test]
async fn tools_list_and_sync_calls_carry_result_type_and_no_task_fields() {
    let s = start(vec![]).await;
    let mut c = Stateless::new(&s.url, json!({}));
    let r = c.call("tools/list", json!({})).await;
    assert!(r.result()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t.get("execution").is_none()));
    assert!(r.result()["ttlMs"].is_u64());
    let r = c
        .call(
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "Ann"}, "task": {"ttl": 1000}}),
        )
        .await;
    assert_eq!(
        r.result()["resultType"],
        "complete",
        "the legacy task param is ignored"
    );
    assert!(r.result().get("taskId").is_none());
}

#[tokio::test]
async fn optional_tool_runs_sync_without_the_extension_and_as_a_task_with_it() {
    let s = start(vec![]).await;
    let mut plain = Stateless::new(&s.url, json!({}));
    let r = plain
        .call(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0.2}}),
        )
        .await;
    assert_eq!(r.result()["resultType"], "complete");
    let mut c = Stateless::with_tasks(&s.url);
    let r = c
        .call(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 1, "label": "x"}}),
        )
        .await;
    let created = r.result();
    assert_eq!(created["resultType"], "task");
    assert!(
        created.get("task").is_none()
            && created.get("ttl").is_none()
            && created.get("result").is_none()
    );
    assert!(created["ttlMs"].as_u64().unwrap() > 0);
    let id = created["taskId"].as_str().unwrap().to_string();
    // Strongly consistent: readable at once.
    assert_eq!(
        c.call("tasks/get", json!({"taskId": id})).await.result()["status"],
        "working"
    );
    let done = wait_status(&mut c, &id, &["completed"]).await;
    assert!(done["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("(x)"));
    assert!(
        done["result"].get("_meta").is_none(),
        "no related-task _meta on the inlined result"
    );
}

#[tokio::test]
async fn required_tool_needs_the_extension_and_tool_errors_are_completed() {
    let s = start(vec![]).await;
    let mut plain = Stateless::new(&s.url, json!({}));
    let r = plain
        .call(
            "tools/call",
            json!({"name": "failing_job", "arguments": {}}),
        )
        .await;
    assert_eq!((r.status, r.code()), (400, -32021));
    assert_eq!(
        r.body["error"]["data"]["requiredCapabilities"]["extensions"][EXT],
        json!({})
    );
    for m in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let r = plain
            .call(m, json!({"taskId": "x", "inputResponses": {}}))
            .await;
        assert_eq!(r.code(), -32021, "{m} without the extension");
    }
    let mut c = Stateless::with_tasks(&s.url);
    let id = c
        .call(
            "tools/call",
            json!({"name": "failing_job", "arguments": {}}),
        )
        .await
        .result()["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let t = wait_status(&mut c, &id, &["completed", "failed"]).await;
    assert_eq!(
        t["status"], "completed",
        "isError is completed on this wire"
    );
    assert_eq!(t["result"]["isError"], json!(true));
    let id = c
        .call(
            "tools/call",
            json!({"name": "protocol_error_job", "arguments": {}}),
        )
        .await
        .result()["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let t = wait_status(&mut c, &id, &["completed", "failed"]).await;
    assert_eq!(t["status"], "failed");
    assert_eq!(t["error"]["code"], -32603);
    assert!(t.get("result").is_none());
}

#[tokio::test]
async fn cancel_is_an_ack_and_settles_to_cancelled_even_when_repeated() {
    let s = start(vec![]).await;
    let mut c = Stateless::with_tasks(&s.url);
    let id = c
        .call(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 60}}),
        )
        .await
        .result()["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let ack = c.call("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(
        ack.result()
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| *k != "_meta")
            .collect::<Vec<_>>(),
        ["resultType"]
    );
    assert_eq!(
        wait_status(&mut c, &id, &["cancelled"]).await["status"],
        "cancelled"
    );
    assert_eq!(
        c.call("tasks/cancel", json!({"taskId": id})).await.result()["resultType"],
        "complete"
    );
    let r = c
        .call(
            "tasks/get",
            json!({"taskId": "0123456789abcdef0123456789abcdef"}),
        )
        .await;
    assert_eq!((r.status, r.code()), (200, -32602));
}

#[tokio::test]
async fn input_requests_are_inline_and_answered_with_tasks_update() {
    let s = start(vec![]).await;
    let mut c = Stateless::with_tasks(&s.url);
    let id = c
        .call(
            "tools/call",
            json!({"name": "multi_input", "arguments": {}}),
        )
        .await
        .result()["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let t = wait_status(&mut c, &id, &["input_required"]).await;
    let mut reqs = t["inputRequests"].as_object().unwrap().clone();
    for _ in 0..20 {
        if reqs.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        reqs = c.call("tasks/get", json!({"taskId": id})).await.result()["inputRequests"]
            .as_object()
            .unwrap()
            .clone();
    }
    assert_eq!(reqs.len(), 2, "both questions outstanding at once");
    let answer = |r: &Value| {
        if r["params"]["message"].as_str().unwrap().contains("name") {
            json!({"action": "accept", "content": {"name": "Lin"}})
        } else {
            json!({"action": "accept", "content": {"color": "blue"}})
        }
    };
    let (k1, r1) = reqs.iter().next().unwrap();
    assert_eq!(r1["method"], "elicitation/create");
    // A partial answer plus an unknown key: acknowledged; the answered key is gone at once.
    let ack = c.call("tasks/update", json!({"taskId": id, "inputResponses": {k1.clone(): answer(r1), "nope": {"action": "accept"}}})).await;
    assert_eq!(ack.result()["resultType"], "complete");
    let t = c
        .call("tasks/get", json!({"taskId": id}))
        .await
        .result()
        .clone();
    assert_eq!(t["status"], "input_required");
    let left = t["inputRequests"].as_object().unwrap();
    assert_eq!(left.len(), 1);
    assert!(!left.contains_key(k1));
    let (k2, r2) = left.iter().next().unwrap();
    c.call(
        "tasks/update",
        json!({"taskId": id, "inputResponses": {k2.clone(): answer(r2)}}),
    )
    .await;
    let done = wait_status(&mut c, &id, &["completed"]).await;
    assert_eq!(
        done["result"]["content"][0]["text"],
        "Hello Lin, you like blue."
    );
}

#[tokio::test]
async fn sync_calls_ask_in_rounds_with_a_signed_request_state() {
    let s = start(vec![]).await;
    // Without the extension, confirm_delete-like tools run synchronously: optional ask_inline tool.
    let mut c = Stateless::new(&s.url, json!({"elicitation": {"form": {}}}));
    let r = c
        .call(
            "tools/call",
            json!({"name": "test_tool_with_task", "arguments": {}}),
        )
        .await;
    assert_eq!(r.code(), -32021, "required tool without the extension");
    let mut c = Stateless::with_tasks(&s.url);
    let round1 = c
        .call(
            "tools/call",
            json!({"name": "test_tool_with_task", "arguments": {}}),
        )
        .await
        .result()
        .clone();
    assert_eq!(round1["resultType"], "input_required");
    assert!(round1.get("taskId").is_none());
    let (key, req) = round1["inputRequests"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .map(|(k, v)| (k.clone(), v.clone()))
        .unwrap();
    assert_eq!(req["method"], "elicitation/create");
    let state = round1["requestState"].as_str().unwrap().to_string();
    // A tampered state is refused and changes nothing.
    let mut bad = state.clone();
    bad.replace_range(2..3, if &bad[2..3] == "A" { "B" } else { "A" });
    let r = c.call("tools/call", json!({"name": "test_tool_with_task", "arguments": {}, "requestState": bad, "inputResponses": {key.clone(): {"action": "accept", "content": {"name": "Eve"}}}})).await;
    assert_eq!(r.code(), -32602);
    // The state is bound to the call: other arguments are refused.
    let r = c.call("tools/call", json!({"name": "test_tool_with_task", "arguments": {"x": 1}, "requestState": state, "inputResponses": {}})).await;
    assert_eq!(r.code(), -32602);
    // Missing answers: asked again.
    let again = c
        .call(
            "tools/call",
            json!({"name": "test_tool_with_task", "arguments": {}, "requestState": state}),
        )
        .await;
    assert_eq!(again.result()["resultType"], "input_required");
    let r = c.call("tools/call", json!({"name": "test_tool_with_task", "arguments": {}, "requestState": state, "inputResponses": {key: {"action": "accept", "content": {"name": "Alice"}}}})).await;
    let created = r.result();
    assert_eq!(created["resultType"], "task");
    assert!(created.get("requestState").is_none() && created.get("inputRequests").is_none());
    let id = created["taskId"].as_str().unwrap().to_string();
    let done = wait_status(&mut c, &id, &["completed"]).await;
    assert!(done["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("Alice"));
}

#[tokio::test]
async fn a_client_without_the_capability_is_not_asked() {
    use mcp_tasks_server::tool::{handler_fn, text_result, Ask, Tool};
    let ask = Tool::new(
        "ask_sync",
        handler_fn(|ctx, _| async move {
            match ctx.sample(json!({"messages": [], "maxTokens": 5})).await {
                Ok(r) => text_result(
                    r["content"]["text"].as_str().unwrap_or("").to_string(),
                    false,
                ),
                Err(e) => text_result(e.to_string(), true),
            }
        }),
    );
    let s = start(vec![ask]).await;
    let mut c = Stateless::new(&s.url, json!({}));
    let r = c
        .call("tools/call", json!({"name": "ask_sync", "arguments": {}}))
        .await;
    assert_eq!(r.result()["isError"], json!(true));
    assert!(r.result()["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("sampling"));
    let mut c = Stateless::new(&s.url, json!({"sampling": {}}));
    let r1 = c
        .call("tools/call", json!({"name": "ask_sync", "arguments": {}}))
        .await
        .result()
        .clone();
    let key = r1["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let answer =
        json!({"role": "assistant", "content": {"type": "text", "text": "sampled"}, "model": "m"});
    let r = c.call("tools/call", json!({"name": "ask_sync", "arguments": {}, "requestState": r1["requestState"], "inputResponses": {key: answer}})).await;
    assert_eq!(r.result()["content"][0]["text"], "sampled");
}

#[tokio::test]
async fn a_task_created_on_the_2025_wire_is_readable_and_cancellable_on_2026() {
    let s = start(vec![]).await;
    let mut old = support::Client::connect(&s.url).await;
    let id = old
        .create_task("slow_compute", json!({"seconds": 60}))
        .await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let mut c = Stateless::with_tasks(&s.url);
    let t = c
        .call("tasks/get", json!({"taskId": id}))
        .await
        .result()
        .clone();
    assert_eq!(t["status"], "working");
    assert!(
        t.get("ttlMs").is_some() && t.get("ttl").is_none(),
        "rendered the 2026 way"
    );
    c.call("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(old.get_task(&id).await["status"], "cancelled");
}

#[tokio::test]
async fn subscriptions_listen_pushes_the_detailed_task() {
    let s = start(vec![]).await;
    let mut c = Stateless::with_tasks(&s.url);
    let id = c
        .call(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 1}}),
        )
        .await
        .result()["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let params = json!({
        "notifications": {"taskIds": [id, "not-mine"]},
        "_meta": {"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXT: {}}}},
    });
    let body =
        json!({"jsonrpc": "2.0", "id": 77, "method": "subscriptions/listen", "params": params});
    let mut rx = listen(&s.url, body).await;
    let ack = support::next_msg(&mut rx).await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([id]),
        "only the caller's tasks are accepted"
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        77
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = tokio::time::timeout_at(deadline.into(), rx.recv())
            .await
            .expect("a task notification")
            .unwrap();
        assert_eq!(n["method"], "notifications/tasks");
        assert_eq!(
            n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            77
        );
        if n["params"]["status"] == "completed" {
            assert!(
                n["params"]["result"]["content"].is_array(),
                "the full DetailedTask"
            );
            break;
        }
    }
    // Without the extension, asking for task notifications is refused.
    let mut plain = Stateless::new(&s.url, json!({}));
    let r = plain
        .call(
            "subscriptions/listen",
            json!({"notifications": {"taskIds": [id]}}),
        )
        .await;
    assert_eq!(r.code(), -32021);
}

#[tokio::test]
async fn principals_apply_on_this_wire_too() {
    use mcp_tasks_server::auth::{hash_key, ApiKey, AuthConfig, Limits};
    let auth = AuthConfig {
        keys: vec![
            ApiKey {
                principal: "alice".into(),
                sha256: hash_key("ka"),
                limits: Limits::default(),
                scopes: None,
            },
            ApiKey {
                principal: "bob".into(),
                sha256: hash_key("kb"),
                limits: Limits::default(),
                scopes: None,
            },
        ],
        allow_anonymous: false,
        ..AuthConfig::default()
    };
    let config = mcp_tasks_server::ServerConfig {
        auth,
        ..Default::default()
    };
    let s = start_with(
        std::sync::Arc::new(mcp_tasks_engine::store::memory::MemoryStore::new()),
        support::fast_engine(),
        config,
        vec![],
    )
    .await;
    let mut anon = Stateless::with_tasks(&s.url);
    assert_eq!(anon.call("tools/list", json!({})).await.status, 401);
    let mut alice = Stateless::with_tasks(&s.url).bearer("ka");
    let mut bob = Stateless::with_tasks(&s.url).bearer("kb");
    let id = alice
        .call(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 30}}),
        )
        .await
        .result()["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    for m in ["tasks/get", "tasks/cancel", "tasks/update"] {
        let r = bob
            .call(m, json!({"taskId": id, "inputResponses": {}}))
            .await;
        assert_eq!(
            r.body["error"]["message"], "Failed to retrieve task: Task not found",
            "{m}"
        );
    }
    assert_eq!(
        alice
            .call("tasks/get", json!({"taskId": id}))
            .await
            .result()["status"],
        "working"
    );
    alice.call("tasks/cancel", json!({"taskId": id})).await;
}

#[tokio::test]
async fn sync_calls_stream_progress_on_their_own_response() {
    let s = start(vec![]).await;
    let mut c = Stateless::new(&s.url, json!({}));
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientCapabilities": {},
        "progressToken": "pt",
    });
    let headers = vec![
        ("mcp-protocol-version".to_string(), V.to_string()),
        ("mcp-method".to_string(), "tools/call".to_string()),
        ("mcp-name".to_string(), "slow_compute".to_string()),
    ];
    let r = c
        .raw(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 1.2}, "_meta": meta}),
            headers,
        )
        .await;
    assert_eq!(r.result()["resultType"], "complete");
    let progress: Vec<f64> = r
        .notifications
        .iter()
        .map(|n| n["params"]["progress"].as_f64().unwrap())
        .collect();
    assert!(
        progress.len() >= 2 && progress.windows(2).all(|w| w[0] < w[1]),
        "{progress:?}"
    );
}

#[tokio::test]
async fn another_callers_cancel_notification_does_not_stop_a_request() {
    let s = start(vec![]).await;
    let mut c = Stateless::new(&s.url, json!({}));
    let url = s.url.clone();
    let intruder = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let body = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1,
            "_meta": {"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {}}}});
        reqwest::Client::new()
            .post(&url)
            .header("content-type", "application/json")
            .header("mcp-protocol-version", V)
            .header("mcp-method", "notifications/cancelled")
            .body(body.to_string())
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    let r = c
        .call(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 1}}),
        )
        .await;
    assert_eq!(intruder.await.unwrap(), 202);
    assert!(
        r.result()["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("finished"),
        "the request ran to the end"
    );
}

#[tokio::test]
async fn a_malformed_answer_rejects_the_whole_update() {
    let s = start(vec![]).await;
    let mut c = Stateless::with_tasks(&s.url);
    let id = c
        .call(
            "tools/call",
            json!({"name": "multi_input", "arguments": {}}),
        )
        .await
        .result()["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let mut keys = Vec::new();
    for _ in 0..40 {
        let t = c
            .call("tasks/get", json!({"taskId": id}))
            .await
            .result()
            .clone();
        keys = t["inputRequests"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        if keys.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(keys.len(), 2);
    let r = c
        .call(
            "tasks/update",
            json!({"taskId": id, "inputResponses": {
            keys[0].clone(): {"action": "accept", "content": {"name": "x", "color": "y"}},
            keys[1].clone(): {"action": "bogus"}}}),
        )
        .await;
    assert_eq!(r.code(), -32602);
    // An accept whose content is not an object of the form's fields is malformed too.
    for content in [json!("str"), json!([1]), json!({"name": {"x": 1}})] {
        let r = c
            .call(
                "tasks/update",
                json!({"taskId": id, "inputResponses": {
                keys[0].clone(): {"action": "accept", "content": content}}}),
            )
            .await;
        assert_eq!(r.code(), -32602, "{content}");
        assert!(
            r.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("content"),
            "{}",
            r.body
        );
    }
    let t = c
        .call("tasks/get", json!({"taskId": id}))
        .await
        .result()
        .clone();
    assert_eq!(
        t["inputRequests"].as_object().unwrap().len(),
        2,
        "nothing was applied"
    );
    c.call("tasks/cancel", json!({"taskId": id})).await;
}

#[tokio::test]
async fn listening_to_a_finished_task_sends_its_state_at_once() {
    let s = start(vec![]).await;
    let mut c = Stateless::with_tasks(&s.url);
    let id = c
        .call(
            "tools/call",
            json!({"name": "failing_job", "arguments": {}}),
        )
        .await
        .result()["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    wait_status(&mut c, &id, &["completed"]).await;
    let params = json!({
        "notifications": {"taskIds": [id]},
        "_meta": {"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXT: {}}}},
    });
    let body =
        json!({"jsonrpc": "2.0", "id": 5, "method": "subscriptions/listen", "params": params});
    let mut rx = listen(&s.url, body).await;
    assert_eq!(
        support::next_msg(&mut rx).await["method"],
        "notifications/subscriptions/acknowledged"
    );
    let state = support::next_msg(&mut rx).await;
    assert_eq!(state["method"], "notifications/tasks");
    assert_eq!(state["params"]["status"], "completed");
    assert_eq!(state["params"]["result"]["isError"], json!(true));
}

#[tokio::test]
async fn a_retried_call_with_the_same_idempotency_key_gets_the_same_task() {
    let s = start(vec![]).await;
    let mut c = Stateless::with_tasks(&s.url);
    let key = json!({"io.github.mcp-tasks/idempotency-key": "job-42"});
    let args = json!({"name": "slow_compute", "arguments": {"seconds": 0.2}});
    let first = c
        .call_with_meta("tools/call", args.clone(), key.clone())
        .await;
    assert_eq!(first.status, 200);
    let id = first.body["result"]["taskId"].as_str().unwrap().to_string();
    // The retry (say, after a lost reply) names the same task, and no second run starts.
    let again = c
        .call_with_meta("tools/call", args.clone(), key.clone())
        .await;
    assert_eq!(again.body["result"]["taskId"], json!(id));
    assert_eq!(again.body["result"]["resultType"], json!("task"));
    // Other work under the same key is refused with a message that says what to do.
    let other = c
        .call_with_meta(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 5}}),
            key.clone(),
        )
        .await;
    assert_eq!(other.body["error"]["code"], -32602, "{}", other.body);
    assert!(other.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("already used for a different call"));
    // Another principal with the same key gets a task of its own.
    let mut config = mcp_tasks_server::ServerConfig::default();
    config.auth.keys = vec![
        mcp_tasks_server::auth::ApiKey {
            principal: "alice".into(),
            sha256: mcp_tasks_server::auth::hash_key("ka"),
            limits: Default::default(),
            scopes: None,
        },
        mcp_tasks_server::auth::ApiKey {
            principal: "bob".into(),
            sha256: mcp_tasks_server::auth::hash_key("kb"),
            limits: Default::default(),
            scopes: None,
        },
    ];
    let keyed = start_with(
        std::sync::Arc::new(mcp_tasks_engine::store::memory::MemoryStore::new()),
        support::fast_engine(),
        config,
        vec![],
    )
    .await;
    let mut ids = Vec::new();
    for token in ["ka", "kb"] {
        let mut c = Stateless::with_tasks(&keyed.url).bearer(token);
        let a = c
            .call_with_meta("tools/call", args.clone(), key.clone())
            .await;
        ids.push(a.body["result"]["taskId"].as_str().unwrap().to_string());
    }
    assert_ne!(ids[0], ids[1], "keys are per principal");
    let done = wait_status(&mut c, &id, &["completed"]).await;
    assert_eq!(done["status"], "completed");
}

#[tokio::test]
async fn progress_rules_on_the_stateless_wire() {
    let s = start(vec![support::progress_script(150)]).await;
    let mut c = Stateless::with_tasks(&s.url);
    let id = c
        .call(
            "tools/call",
            json!({"name": "progress_script", "arguments": {}}),
        )
        .await
        .result()["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let params = json!({
        "notifications": {"taskIds": [id]},
        "_meta": {"io.modelcontextprotocol/protocolVersion": V, "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXT: {}}}},
    });
    let body =
        json!({"jsonrpc": "2.0", "id": 5, "method": "subscriptions/listen", "params": params});
    let mut rx = listen(&s.url, body).await;
    let mut seen = Vec::new();
    loop {
        let n = support::next_msg(&mut rx).await;
        if n["method"] != "notifications/tasks" {
            continue;
        }
        let (p, t) = (
            n["params"]["progress"].clone(),
            n["params"]["progressTotal"].clone(),
        );
        if p.is_null() {
            continue;
        }
        assert!(t.as_f64().unwrap() >= p.as_f64().unwrap(), "{n}");
        seen.push((p.as_f64().unwrap(), t.as_f64().unwrap()));
        if p == 25.0 {
            assert_eq!(n["params"]["statusMessage"], "far");
            break;
        }
    }
    // A listener hears every change of what the task shows, the total-only one included, and never
    // a value going down.
    assert!(seen.contains(&(1.0, 20.0)), "{seen:?}");
    assert_eq!(seen.last(), Some(&(25.0, 25.0)));
    assert!(
        seen.windows(2)
            .all(|w| w[1].0 >= w[0].0 && w[1].1 >= w[0].1),
        "{seen:?}"
    );
    let t = c
        .call("tasks/get", json!({"taskId": id}))
        .await
        .result()
        .clone();
    assert_eq!(
        (t["progress"].clone(), t["progressTotal"].clone()),
        (json!(25.0), json!(25.0))
    );
    c.call("tasks/cancel", json!({"taskId": id})).await;
}

/// `io.github.mcp-tasks/signal` on this wire: the owner's signal reaches the task's wait (sent
/// before the wait is fine: it is kept), a key sent again is the same signal, and bad requests,
/// missing and finished tasks get -32602 saying why; the capability is declared.
#[tokio::test]
async fn the_signal_method_reaches_the_task_s_wait() {
    const SIGNAL: &str = "io.github.mcp-tasks/signal";
    let s = start(vec![]).await;
    let mut c = Stateless::with_tasks(&s.url);
    let caps = c.call("server/discover", json!({})).await.result().clone();
    assert!(
        caps["capabilities"]["experimental"]["io.github.mcp-tasks/signals"].is_object(),
        "{caps}"
    );
    let id = c
        .start_task(
            "approval_flow",
            json!({"sleep_seconds": 0, "timeout_seconds": 60}),
        )
        .await;
    let sent = c
        .call(
            SIGNAL,
            json!({"taskId": id, "name": "approve", "payload": {"ok": true}, "key": "k1"}),
        )
        .await;
    let r = sent.result();
    assert_eq!(
        (r["taskId"].as_str(), r["duplicate"].as_bool()),
        (Some(id.as_str()), Some(false))
    );
    assert_eq!(r["signal"]["seq"], 1);
    let again = c
        .call(
            SIGNAL,
            json!({"taskId": id, "name": "approve", "key": "k1"}),
        )
        .await;
    assert_eq!(again.result()["duplicate"], true);
    assert_eq!(again.result()["signal"]["seq"], 1);
    let t = wait_status(&mut c, &id, &["completed", "failed"]).await;
    let out = &t["result"]["structuredContent"];
    assert_eq!(out["approval"], json!({"ok": true}), "{t}");
    assert!(
        out["approvedBy"]
            .as_str()
            .unwrap_or("")
            .starts_with("owner "),
        "{t}"
    );
    for (params, says) in [
        (json!({"taskId": id}), "missing string \"name\""),
        (json!({"taskId": id, "name": ""}), "1 to 128 characters"),
        (
            json!({"taskId": id, "name": "approve", "key": 7}),
            "\"key\" must be a string",
        ),
        (
            json!({"taskId": id, "name": "approve"}),
            "a finished task takes no signals",
        ),
        (
            json!({"taskId": "0123456789abcdef0123456789abcdef", "name": "approve"}),
            "not found",
        ),
    ] {
        let r = c.call(SIGNAL, params.clone()).await;
        assert_eq!((r.status, r.code()), (200, -32602), "{params}");
        let message = r.body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .to_string();
        assert!(message.contains(says), "{params}: {message}");
    }
}
