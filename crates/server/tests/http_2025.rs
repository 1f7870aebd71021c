//! The 2025-11-25 wire over real HTTP on 127.0.0.1: one test per rule, named after it. Every message the
//! server sends is validated against the official schema by the test client.

mod support;

use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_engine::EngineConfig;
use mcp_tasks_server::ServerConfig;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{start, start_with, Client};

async fn raw_post(url: &str, headers: &[(&str, &str)], body: &str) -> support::Exchange {
    let mut rb = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    support::read_exchange(rb.send().await.unwrap()).await
}

// ---- base protocol ----

#[tokio::test]
async fn malformed_json_is_a_parse_error_without_id() {
    let s = start(vec![]).await;
    let ex = raw_post(&s.url, &[("content-type", "application/json")], "{not json").await;
    assert_eq!(ex.status, 400);
    assert_eq!(ex.error_code(), -32700);
    assert!(ex.reply.as_ref().unwrap().get("id").is_none());
    support::schema::assert_valid("JSONRPCErrorResponse", ex.reply.as_ref().unwrap());
}

#[tokio::test]
async fn wrong_jsonrpc_version_is_invalid_request() {
    let s = start(vec![]).await;
    let ex = raw_post(
        &s.url,
        &[("content-type", "application/json")],
        r#"{"jsonrpc":"1.0","id":5,"method":"ping"}"#,
    )
    .await;
    assert_eq!(ex.status, 400);
    assert_eq!(ex.error_code(), -32600);
    assert_eq!(ex.reply.as_ref().unwrap()["id"], json!(5));
    assert!(ex.error()["message"].as_str().unwrap().contains("2.0"));
}

#[tokio::test]
async fn unknown_method_is_method_not_found_naming_it() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let ex = c.request("tools/frobnicate", json!({})).await;
    assert_eq!(ex.error_code(), -32601);
    assert!(ex.error()["message"]
        .as_str()
        .unwrap()
        .contains("tools/frobnicate"));
}

#[tokio::test]
async fn ping_answers_empty_result() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    assert_eq!(c.request("ping", json!({})).await.result(), &json!({}));
}

#[tokio::test]
async fn initialize_declares_task_capabilities_for_2025_11_25() {
    let s = start(vec![]).await;
    let mut c = Client::new(&s.url);
    let ex = c
        .request("initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}))
        .await;
    let r = ex.result();
    assert_eq!(r["protocolVersion"], "2025-11-25");
    assert_eq!(
        r["capabilities"]["tasks"],
        json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}})
    );
    // Visible ASCII; an anonymous session's id is its client address's prefix (a keyed digest),
    // then 128 random bits.
    let id = c.session.clone().unwrap();
    assert!(id.bytes().all(|b| (0x21..=0x7e).contains(&b)), "{id}");
    let (prefix, random) = id.split_once('-').unwrap();
    assert_eq!(prefix.len(), 12, "{id}");
    assert!(
        random.len() == 32 && random.bytes().all(|b| b.is_ascii_hexdigit()),
        "{id}"
    );
}

#[tokio::test]
async fn older_versions_are_served_without_tasks() {
    let s = start(vec![]).await;
    for v in ["2025-06-18", "2025-03-26"] {
        let mut c = Client::connect_version(&s.url, v).await;
        assert_eq!(c.version, v);
        let tools = c.request("tools/list", json!({})).await.result()["tools"].clone();
        assert!(tools
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t.get("execution").is_none()));
        // The task param is ignored: the call runs normally and returns its result.
        let ex = c
            .request(
                "tools/call",
                json!({"name": "slow_compute", "arguments": {"seconds": 0}, "task": {}}),
            )
            .await;
        assert!(ex.result()["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("finished"));
        assert_eq!(
            c.request("tasks/list", json!({})).await.error_code(),
            -32601
        );
    }
}

#[tokio::test]
async fn unsupported_requested_version_gets_the_latest() {
    let s = start(vec![]).await;
    let c = Client::connect_version(&s.url, "1999-01-01").await;
    assert_eq!(c.version, "2025-11-25");
}

#[tokio::test]
async fn initialize_without_protocol_version_is_invalid_params() {
    let s = start(vec![]).await;
    let mut c = Client::new(&s.url);
    let ex = c.request("initialize", json!({"capabilities": {}})).await;
    assert_eq!(ex.error_code(), -32602);
    assert!(ex.error()["message"]
        .as_str()
        .unwrap()
        .contains("protocolVersion"));
}

#[tokio::test]
async fn request_without_session_header_is_400() {
    let s = start(vec![]).await;
    let ex = raw_post(
        &s.url,
        &[("content-type", "application/json")],
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
    )
    .await;
    assert_eq!(ex.status, 400);
    assert!(ex.error()["message"]
        .as_str()
        .unwrap()
        .contains("Mcp-Session-Id"));
}

#[tokio::test]
async fn unknown_or_deleted_session_is_404() {
    let s = start(vec![]).await;
    let ex = raw_post(
        &s.url,
        &[
            ("mcp-session-id", "nope"),
            ("content-type", "application/json"),
        ],
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
    )
    .await;
    assert_eq!(ex.status, 404);
    let c = Client::connect(&s.url).await;
    let sid = c.session.clone().unwrap();
    let del = reqwest::Client::new()
        .delete(&s.url)
        .header("mcp-session-id", &sid)
        .send()
        .await
        .unwrap();
    assert_eq!(del.status().as_u16(), 204);
    let ex = raw_post(
        &s.url,
        &[
            ("mcp-session-id", &sid),
            ("content-type", "application/json"),
        ],
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
    )
    .await;
    assert_eq!(ex.status, 404);
}

#[tokio::test]
async fn mismatched_or_unknown_protocol_version_header_is_400() {
    let s = start(vec![]).await;
    let c = Client::connect(&s.url).await;
    let sid = c.session.clone().unwrap();
    for v in ["2025-06-18", "banana"] {
        let ex = raw_post(
            &s.url,
            &[
                ("mcp-session-id", &sid),
                ("mcp-protocol-version", v),
                ("content-type", "application/json"),
            ],
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
        )
        .await;
        assert_eq!(ex.status, 400, "version header {v}");
    }
}

#[tokio::test]
async fn disallowed_origin_is_403_and_localhost_is_fine() {
    let s = start(vec![]).await;
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let ex = raw_post(
        &s.url,
        &[
            ("origin", "http://evil.example"),
            ("content-type", "application/json"),
        ],
        init,
    )
    .await;
    assert_eq!(ex.status, 403);
    let ex = raw_post(
        &s.url,
        &[
            ("origin", "http://localhost:3000"),
            ("content-type", "application/json"),
        ],
        init,
    )
    .await;
    assert_eq!(ex.status, 200);
}

#[tokio::test]
async fn oversized_body_is_413() {
    let config = ServerConfig {
        max_body_bytes: 1024,
        ..ServerConfig::default()
    };
    let s = start_with(
        Arc::new(MemoryStore::new()),
        support::fast_engine(),
        config,
        vec![],
    )
    .await;
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(4096)
    );
    let ex = raw_post(&s.url, &[("content-type", "application/json")], &big).await;
    assert_eq!(ex.status, 413);
    assert!(ex.error()["message"].as_str().unwrap().contains("1024"));
}

#[tokio::test]
async fn notifications_are_accepted_with_202() {
    let s = start(vec![]).await;
    let c = Client::connect(&s.url).await;
    assert_eq!(c.notify("notifications/initialized", json!({})).await, 202);
}

#[tokio::test]
async fn tools_list_paginates_with_cursor() {
    let config = ServerConfig {
        page_size: 3,
        ..ServerConfig::default()
    };
    let s = start_with(
        Arc::new(MemoryStore::new()),
        support::fast_engine(),
        config,
        vec![],
    )
    .await;
    let mut c = Client::connect(&s.url).await;
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let params = match &cursor {
            Some(cur) => json!({"cursor": cur}),
            None => json!({}),
        };
        let r = c.request("tools/list", params).await.result().clone();
        names.extend(
            r["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_string()),
        );
        match r.get("nextCursor") {
            Some(n) => cursor = Some(n.as_str().unwrap().to_string()),
            None => break,
        }
    }
    assert_eq!(
        names,
        [
            "greet",
            "slow_compute",
            "pipeline",
            "approval_flow",
            "failing_job",
            "protocol_error_job",
            "confirm_delete",
            "write_haiku",
            "multi_input",
            "test_tool_with_task"
        ]
    );
    assert_eq!(
        c.request("tools/list", json!({"cursor": "zzz"}))
            .await
            .error_code(),
        -32602
    );
}

#[tokio::test]
async fn tools_list_shows_task_support_per_tool() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let tools = c.request("tools/list", json!({})).await.result()["tools"].clone();
    let support: Vec<(String, String)> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().into(),
                t["execution"]["taskSupport"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert!(support.contains(&("greet".into(), "forbidden".into())));
    assert!(support.contains(&("slow_compute".into(), "optional".into())));
    assert!(support.contains(&("failing_job".into(), "required".into())));
}

#[tokio::test]
async fn invalid_arguments_are_a_tool_error_the_model_can_read() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let ex = c
        .request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": "soon"}}),
        )
        .await;
    assert_eq!(ex.result()["isError"], json!(true));
    let text = ex.result()["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("/seconds") && text.contains("number"),
        "{text}"
    );
    let ex = c
        .request("tools/call", json!({"name": "greet", "arguments": {}}))
        .await;
    assert!(ex.result()["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("name"));
}

#[tokio::test]
async fn unknown_tool_is_invalid_params_listing_known_tools() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let ex = c
        .request("tools/call", json!({"name": "gret", "arguments": {}}))
        .await;
    assert_eq!(ex.error_code(), -32602);
    assert!(ex.error()["message"].as_str().unwrap().contains("greet"));
}

#[tokio::test]
async fn forbidden_tool_called_as_task_is_method_not_found_r8() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let ex = c
        .request(
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "x"}, "task": {}}),
        )
        .await;
    assert_eq!(ex.error_code(), -32601);
}

#[tokio::test]
async fn required_tool_called_without_task_is_method_not_found_r10() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let ex = c
        .request(
            "tools/call",
            json!({"name": "failing_job", "arguments": {}}),
        )
        .await;
    assert_eq!(ex.error_code(), -32601);
}

#[tokio::test]
async fn optional_tool_without_task_runs_inline_with_progress() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let ex = c
        .request("tools/call", json!({"name": "slow_compute", "arguments": {"seconds": 1.2, "label": "inline"}, "_meta": {"progressToken": "inl"}}))
        .await;
    assert!(ex.content_type.starts_with("text/event-stream"));
    assert!(ex.result()["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("inline"));
    let progress: Vec<f64> = ex
        .notifications
        .iter()
        .filter(|n| n["method"] == "notifications/progress")
        .map(|n| {
            assert_eq!(n["params"]["progressToken"], "inl");
            n["params"]["progress"].as_f64().unwrap()
        })
        .collect();
    assert!(progress.len() >= 2, "{progress:?}");
    assert!(
        progress.windows(2).all(|w| w[0] < w[1]),
        "progress increases: {progress:?}"
    );
}

#[tokio::test]
async fn notifications_cancelled_stops_an_inline_call() {
    let s = start(vec![]).await;
    let c = Client::connect(&s.url).await;
    let body = json!({"jsonrpc": "2.0", "id": 777, "method": "tools/call", "params": {"name": "slow_compute", "arguments": {"seconds": 30}}});
    let started = Instant::now();
    let call = tokio::spawn(c.post(body.to_string()).send());
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        c.notify(
            "notifications/cancelled",
            json!({"requestId": 777, "reason": "user pressed stop"})
        )
        .await,
        202
    );
    let resp = call.await.unwrap().unwrap();
    let ex = support::read_exchange(resp).await;
    assert!(ex.reply.is_none(), "a cancelled request gets no reply");
    assert_eq!(ex.status, 200);
    assert!(
        ex.content_type.starts_with("text/event-stream"),
        "a request is answered with JSON or a stream, never 202"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn set_level_accepts_rfc5424_levels_only() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    assert_eq!(
        c.request("logging/setLevel", json!({"level": "warning"}))
            .await
            .result(),
        &json!({})
    );
    let ex = c
        .request("logging/setLevel", json!({"level": "loud"}))
        .await;
    assert_eq!(ex.error_code(), -32602);
    assert!(ex.error()["message"].as_str().unwrap().contains("loud"));
}

// ---- tasks ----

#[tokio::test]
async fn create_task_result_is_durable_working_task_with_granted_ttl() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let ex = c
        .request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 5}, "task": {"ttl": 60000}}),
        )
        .await;
    let task = &ex.result()["task"];
    assert_eq!(task["status"], "working");
    assert_eq!(task["ttl"], 60000);
    assert!(task["pollInterval"].is_u64());
    assert_eq!(task["taskId"].as_str().unwrap().len(), 44);
    assert!(ex.result()["_meta"]["io.modelcontextprotocol/model-immediate-response"].is_string());
    // Durable before the reply: the store has it.
    let id = task["taskId"].as_str().unwrap();
    assert!(matches!(
        s.server.engine().get(id).await.unwrap(),
        mcp_tasks_engine::store::Lookup::Found(_)
    ));
}

#[tokio::test]
async fn requested_ttl_is_clamped_and_the_real_value_reported_r37_r38() {
    let engine = EngineConfig {
        min_ttl_ms: 5_000,
        max_ttl_ms: Some(120_000),
        default_ttl_ms: Some(60_000),
        ..support::fast_engine()
    };
    let s = start_with(
        Arc::new(MemoryStore::new()),
        engine,
        ServerConfig::default(),
        vec![],
    )
    .await;
    let mut c = Client::connect(&s.url).await;
    for (asked, granted) in [
        (json!(1), 5_000),
        (json!(999_999_999), 120_000),
        (Value::Null, 60_000),
    ] {
        let mut task = json!({});
        if !asked.is_null() {
            task["ttl"] = asked;
        }
        let ex = c
            .request(
                "tools/call",
                json!({"name": "slow_compute", "arguments": {"seconds": 0}, "task": task}),
            )
            .await;
        assert_eq!(ex.result()["task"]["ttl"], granted);
    }
    let ex = c
        .request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0}, "task": {"ttl": -5}}),
        )
        .await;
    assert_eq!(ex.error_code(), -32602);
}

#[tokio::test]
async fn tasks_get_of_unknown_id_is_invalid_params_r60() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let ex = c
        .request(
            "tasks/get",
            json!({"taskId": "0123456789abcdef0123456789abcdef"}),
        )
        .await;
    assert_eq!(ex.error_code(), -32602);
    assert_eq!(
        ex.error()["message"],
        "Failed to retrieve task: Task not found"
    );
    assert_eq!(c.request("tasks/get", json!({})).await.error_code(), -32602);
}

#[tokio::test]
async fn tasks_get_ignores_stray_task_param_and_progress_token() {
    // The TypeScript SDK v1 re-sends `task` and a fresh progress token on tasks/get.
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let task = c.create_task("slow_compute", json!({"seconds": 0})).await;
    let id = task["taskId"].as_str().unwrap();
    let ex = c
        .request(
            "tasks/get",
            json!({"taskId": id, "task": {"ttl": 1}, "_meta": {"progressToken": 9}}),
        )
        .await;
    assert_eq!(ex.result()["taskId"], id);
}

#[tokio::test]
async fn tasks_result_blocks_until_terminal_and_returns_the_call_result_r26_r30() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let ex = c
        .request("tools/call", json!({"name": "slow_compute", "arguments": {"seconds": 2, "label": "L"}, "task": {}, "_meta": {"progressToken": "tok-1"}}))
        .await;
    let id = ex.result()["task"]["taskId"].as_str().unwrap().to_string();
    let started = Instant::now();
    let ex = c.request("tasks/result", json!({"taskId": id})).await;
    assert!(
        started.elapsed() >= Duration::from_millis(1200),
        "it blocked until the task finished"
    );
    let r = ex.result();
    assert!(r["content"][0]["text"].as_str().unwrap().contains("(L)"));
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id
    );
    // Progress came on the stream with the original request's token (R48), increasing.
    let progress: Vec<&Value> = ex
        .notifications
        .iter()
        .filter(|n| n["method"] == "notifications/progress")
        .collect();
    assert!(
        !progress.is_empty(),
        "progress on the tasks/result stream: {:?}",
        ex.notifications
    );
    assert!(progress
        .iter()
        .all(|n| n["params"]["progressToken"] == "tok-1"));
    let status: Vec<&Value> = ex
        .notifications
        .iter()
        .filter(|n| n["method"] == "notifications/tasks/status")
        .collect();
    assert_eq!(status.last().unwrap()["params"]["status"], "completed");
    // A second fetch of a terminal task answers at once with the same payload.
    let again = c.request("tasks/result", json!({"taskId": id})).await;
    assert_eq!(again.content_type, "application/json");
    assert_eq!(again.result(), r);
    let t = c.get_task(&id).await;
    assert_eq!(t["status"], "completed");
    assert_eq!(
        (t["progress"].as_f64(), t["progressTotal"].as_f64()),
        (Some(2.0), Some(2.0))
    );
}

#[tokio::test]
async fn tool_error_result_is_failed_but_result_is_a_success_r29_r64() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let task = c.create_task("failing_job", json!({})).await;
    let id = task["taskId"].as_str().unwrap();
    let t = c.wait_terminal(id).await;
    assert_eq!(t["status"], "failed");
    assert!(t["statusMessage"].is_string(), "failed tasks say why");
    let ex = c.request("tasks/result", json!({"taskId": id})).await;
    assert_eq!(ex.result()["isError"], json!(true));
}

#[tokio::test]
async fn jsonrpc_error_outcome_is_failed_and_result_returns_the_error_r29() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let task = c.create_task("protocol_error_job", json!({})).await;
    let id = task["taskId"].as_str().unwrap();
    let ex = c.request("tasks/result", json!({"taskId": id})).await;
    assert_eq!(ex.error_code(), -32603);
    assert!(ex.error()["message"]
        .as_str()
        .unwrap()
        .contains("on purpose"));
    assert_eq!(c.get_task(id).await["status"], "failed");
}

#[tokio::test]
async fn cancel_moves_to_cancelled_before_answering_and_terminal_cancel_is_invalid_r54_r55() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let task = c.create_task("slow_compute", json!({"seconds": 60})).await;
    let id = task["taskId"].as_str().unwrap().to_string();
    let ex = c.request("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(ex.result()["status"], "cancelled");
    assert_eq!(c.get_task(&id).await["status"], "cancelled");
    let ex = c.request("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(ex.error_code(), -32602);
    assert_eq!(
        ex.error()["message"],
        "Cannot cancel task: already in terminal status 'cancelled'"
    );
    // Cancelled stays cancelled even though the handler would have completed (R56).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(c.get_task(&id).await["status"], "cancelled");
    let ex = c.request("tasks/result", json!({"taskId": id})).await;
    assert_eq!(ex.error_code(), -32603);
}

#[tokio::test]
async fn cancel_wakes_a_blocked_tasks_result() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let task = c.create_task("slow_compute", json!({"seconds": 60})).await;
    let id = task["taskId"].as_str().unwrap().to_string();
    let body =
        json!({"jsonrpc": "2.0", "id": 900, "method": "tasks/result", "params": {"taskId": id}});
    let waiting = tokio::spawn(c.post(body.to_string()).send());
    tokio::time::sleep(Duration::from_millis(500)).await;
    c.request("tasks/cancel", json!({"taskId": id})).await;
    let resp = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("woken")
        .unwrap()
        .unwrap();
    let ex = support::read_exchange(resp).await;
    assert_eq!(ex.error_code(), -32603);
    assert_eq!(ex.error()["data"]["status"], "cancelled");
}

#[tokio::test]
async fn cancel_of_completed_task_reports_its_status_r54() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let task = c.create_task("slow_compute", json!({"seconds": 0})).await;
    let id = task["taskId"].as_str().unwrap();
    c.wait_terminal(id).await;
    let ex = c.request("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(
        ex.error()["message"],
        "Cannot cancel task: already in terminal status 'completed'"
    );
}

#[tokio::test]
async fn tasks_list_shows_only_this_sessions_tasks_with_pagination_r49_r53() {
    let config = ServerConfig {
        page_size: 2,
        ..ServerConfig::default()
    };
    let s = start_with(
        Arc::new(MemoryStore::new()),
        support::fast_engine(),
        config,
        vec![],
    )
    .await;
    let mut a = Client::connect(&s.url).await;
    let mut b = Client::connect(&s.url).await;
    let mut mine = Vec::new();
    for _ in 0..5 {
        mine.push(
            a.create_task("slow_compute", json!({"seconds": 0})).await["taskId"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    let theirs = b.create_task("slow_compute", json!({"seconds": 0})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let params = match &cursor {
            Some(cur) => json!({"cursor": cur}),
            None => json!({}),
        };
        let r = a.request("tasks/list", params).await.result().clone();
        assert!(r["tasks"].as_array().unwrap().len() <= 2);
        seen.extend(
            r["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["taskId"].as_str().unwrap().to_string()),
        );
        match r.get("nextCursor") {
            Some(n) => cursor = Some(n.as_str().unwrap().to_string()),
            None => break,
        }
    }
    // Ordered by creation time; tasks created in the same millisecond are ordered by id.
    mine.sort();
    seen.sort();
    assert_eq!(seen, mine);
    assert!(!seen.contains(&theirs));
    assert_eq!(
        a.request("tasks/list", json!({"cursor": "bogus"}))
            .await
            .error_code(),
        -32602
    );
}

#[tokio::test]
async fn status_and_progress_notifications_arrive_on_the_get_stream_r44_r48() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let mut stream = c.open_stream().await;
    let ex = c
        .request("tools/call", json!({"name": "slow_compute", "arguments": {"seconds": 1.5}, "task": {}, "_meta": {"progressToken": 42}}))
        .await;
    let id = ex.result()["task"]["taskId"].as_str().unwrap().to_string();
    let mut progress = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let msg = tokio::time::timeout_at(deadline.into(), stream.recv())
            .await
            .expect("notifications")
            .unwrap();
        match msg["method"].as_str().unwrap() {
            "notifications/progress" => {
                assert_eq!(msg["params"]["progressToken"], 42);
                progress.push(msg["params"]["progress"].as_f64().unwrap());
            }
            "notifications/tasks/status" => {
                assert_eq!(msg["params"]["taskId"], id.as_str());
                assert!(
                    msg["params"].get("_meta").is_none(),
                    "status notifications carry no related-task (R46)"
                );
                if msg["params"]["status"] == "completed" {
                    break;
                }
            }
            _ => {}
        }
    }
    assert!(!progress.is_empty());
    assert!(progress.windows(2).all(|w| w[0] < w[1]));
}

#[tokio::test]
async fn idempotency_key_returns_the_same_task_and_rejects_other_work() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let call = |key: &str, secs: u64, form: &str| {
        let meta = if form == "ours" {
            json!({"io.github.mcp-tasks/idempotency-key": key})
        } else {
            json!({"taskId": key})
        };
        json!({"name": "slow_compute", "arguments": {"seconds": secs}, "task": {}, "_meta": meta})
    };
    let first = c
        .request("tools/call", call("k-1", 3, "ours"))
        .await
        .result()["task"]["taskId"]
        .clone();
    let again = c
        .request("tools/call", call("k-1", 3, "ours"))
        .await
        .result()["task"]["taskId"]
        .clone();
    assert_eq!(first, again, "a retry returns the same task");
    let ex = c.request("tools/call", call("k-1", 4, "ours")).await;
    assert_eq!(ex.error_code(), -32602);
    assert!(ex.error()["message"].as_str().unwrap().contains("k-1"));
    let legacy = c
        .request("tools/call", call("guide-id", 3, "legacy"))
        .await
        .result()["task"]["taskId"]
        .clone();
    assert_ne!(
        legacy,
        json!("guide-id"),
        "_meta.taskId is a key, not the task id"
    );
    let legacy2 = c
        .request("tools/call", call("guide-id", 3, "legacy"))
        .await
        .result()["task"]["taskId"]
        .clone();
    assert_eq!(legacy, legacy2);
}

#[tokio::test]
async fn expired_task_answers_expired_then_not_found() {
    let engine = EngineConfig {
        min_ttl_ms: 1,
        finished_grace_ms: 0,
        tombstone_ms: 1_500,
        sweep_interval: Duration::from_millis(100),
        ..support::fast_engine()
    };
    let s = start_with(
        Arc::new(MemoryStore::new()),
        engine,
        ServerConfig::default(),
        vec![],
    )
    .await;
    let mut c = Client::connect(&s.url).await;
    let ex = c
        .request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0}, "task": {"ttl": 200}}),
        )
        .await;
    let id = ex.result()["task"]["taskId"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let ex = c.request("tasks/get", json!({"taskId": id})).await;
    assert_eq!(
        ex.error()["message"],
        "Failed to retrieve task: Task has expired"
    );
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let ex = c.request("tasks/get", json!({"taskId": id})).await;
    assert_eq!(
        ex.error()["message"],
        "Failed to retrieve task: Task not found"
    );
}

#[tokio::test]
async fn running_task_is_never_purged_even_past_ttl() {
    let engine = EngineConfig {
        min_ttl_ms: 1,
        finished_grace_ms: 0,
        sweep_interval: Duration::from_millis(100),
        ..support::fast_engine()
    };
    let s = start_with(
        Arc::new(MemoryStore::new()),
        engine,
        ServerConfig::default(),
        vec![],
    )
    .await;
    let mut c = Client::connect(&s.url).await;
    let ex = c
        .request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 2}, "task": {"ttl": 100}}),
        )
        .await;
    let id = ex.result()["task"]["taskId"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(c.get_task(&id).await["status"], "working");
}

#[tokio::test]
async fn tasks_methods_need_a_2025_11_25_session() {
    let s = start(vec![]).await;
    let mut c = Client::connect_version(&s.url, "2025-06-18").await;
    let ex = c.request("tasks/get", json!({"taskId": "x"})).await;
    assert_eq!(ex.error_code(), -32601);
    assert!(ex.error()["message"]
        .as_str()
        .unwrap()
        .contains("2025-11-25"));
}

#[tokio::test]
async fn many_concurrent_task_creations_all_succeed() {
    let s = start(vec![]).await;
    let c = Client::connect(&s.url).await;
    let sid = c.session.clone().unwrap();
    let mut handles = Vec::new();
    for i in 0..20 {
        let url = s.url.clone();
        let sid = sid.clone();
        handles.push(tokio::spawn(async move {
            let body = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "slow_compute", "arguments": {"seconds": 0}, "task": {}}});
            let ex = raw_post(&url, &[("mcp-session-id", &sid), ("content-type", "application/json")], &body.to_string()).await;
            ex.result()["task"]["taskId"].as_str().unwrap().to_string()
        }));
    }
    let mut ids = std::collections::HashSet::new();
    for h in handles {
        ids.insert(h.await.unwrap());
    }
    assert_eq!(ids.len(), 20);
}

#[tokio::test]
async fn each_notification_goes_on_exactly_one_stream() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let mut stream = c.open_stream().await;
    let ex = c
        .request("tools/call", json!({"name": "slow_compute", "arguments": {"seconds": 1}, "task": {}, "_meta": {"progressToken": "one"}}))
        .await;
    let id = ex.result()["task"]["taskId"].as_str().unwrap().to_string();
    let result = c.request("tasks/result", json!({"taskId": id})).await;
    let on_result: Vec<String> = result.notifications.iter().map(|n| n.to_string()).collect();
    assert!(
        on_result.iter().any(|n| n.contains("\"completed\"")),
        "terminal status on the tasks/result stream: {on_result:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    while let Ok(n) = stream.try_recv() {
        assert!(
            !on_result.contains(&n.to_string()),
            "sent on two streams: {n}"
        );
        assert_ne!(
            n["params"]["status"], "completed",
            "the terminal status went out twice: {n}"
        );
    }
}

#[tokio::test]
async fn task_call_with_invalid_arguments_still_gets_a_task_that_failed() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let ex = c.request("tools/call", json!({"name": "slow_compute", "arguments": {"seconds": "x"}, "task": {"ttl": 60000.0}})).await;
    let task = &ex.result()["task"];
    assert_eq!(task["status"], "failed");
    assert!(task["statusMessage"].as_str().unwrap().contains("/seconds"));
    let id = task["taskId"].as_str().unwrap();
    let r = c.request("tasks/result", json!({"taskId": id})).await;
    assert_eq!(r.result()["isError"], json!(true));
}

#[tokio::test]
async fn idempotency_keys_of_anonymous_sessions_do_not_meet() {
    let s = start(vec![]).await;
    let mut a = Client::connect(&s.url).await;
    let mut b = Client::connect(&s.url).await;
    let call = |secs: u64| json!({"name": "slow_compute", "arguments": {"seconds": secs}, "task": {}, "_meta": {"taskId": "job-1"}});
    let ta = a.request("tools/call", call(1)).await.result()["task"]["taskId"].clone();
    let tb = b.request("tools/call", call(1)).await.result()["task"]["taskId"].clone();
    assert_ne!(ta, tb, "another session's key never returns its task");
    let ex = b.request("tools/call", call(2)).await;
    assert_eq!(ex.error_code(), -32602);
    assert!(
        !ex.error()["message"]
            .as_str()
            .unwrap()
            .contains(ta.as_str().unwrap()),
        "no task id leaks"
    );
}

#[tokio::test]
async fn delete_closes_the_sessions_streams() {
    let s = start(vec![]).await;
    let c = Client::connect(&s.url).await;
    let mut stream = c.open_stream().await;
    let del = reqwest::Client::new()
        .delete(&s.url)
        .header("mcp-session-id", c.session.as_ref().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(del.status().as_u16(), 204);
    let end = tokio::time::timeout(Duration::from_secs(3), stream.recv())
        .await
        .expect("stream ended");
    assert!(end.is_none());
}

#[tokio::test]
async fn tasks_get_is_plain_json_never_a_stream_r24() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let id = c.create_task("slow_compute", json!({"seconds": 1})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let ex = c.request("tasks/get", json!({"taskId": id})).await;
    assert_eq!(ex.content_type, "application/json");
}

#[tokio::test]
async fn notifications_before_the_get_stream_opens_are_delivered_when_it_does() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let ex = c
        .request("tools/call", json!({"name": "slow_compute", "arguments": {"seconds": 1}, "task": {}, "_meta": {"progressToken": "early"}}))
        .await;
    let id = ex.result()["task"]["taskId"].as_str().unwrap().to_string();
    c.wait_terminal(&id).await;
    // The client opens its GET stream late: what happened meanwhile comes first, once.
    let mut stream = c.open_stream().await;
    let mut seen = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(300), stream.recv()).await {
        seen.push(m);
    }
    assert!(
        seen.iter()
            .any(|m| m["method"] == "notifications/progress"
                && m["params"]["progressToken"] == "early"),
        "{seen:?}"
    );
    assert!(
        seen.iter().any(|m| m["params"]["status"] == "completed"),
        "{seen:?}"
    );
    let mut again = c.open_stream().await;
    assert!(
        tokio::time::timeout(Duration::from_millis(300), again.recv())
            .await
            .is_err(),
        "held messages go out once"
    );
}

#[tokio::test]
async fn graceful_shutdown_lets_in_flight_replies_finish_and_ends_streams() {
    let mut s = support::start(vec![]).await;
    let c = Client::connect(&s.url).await;
    let mut stream = c.open_stream().await;
    let mut caller = Client::connect(&s.url).await;
    // A plain call that takes a second, started before the shutdown begins.
    let call = tokio::spawn(async move {
        caller
            .request(
                "tools/call",
                json!({"name": "slow_compute", "arguments": {"seconds": 1}}),
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    s.stop();
    // The open GET stream ends at once…
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while stream.recv().await.is_some() {}
    })
    .await;
    assert!(ended.is_ok(), "the GET stream did not end on shutdown");
    // …and the call in flight still gets its whole reply.
    let ex = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the in-flight call finished")
        .unwrap();
    assert_eq!(ex.status, 200);
    let text = ex.result()["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(text.contains("finished"), "{text}");
    // New connections are refused once the server has stopped.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let refused = reqwest::Client::new()
        .get(s.url.replace("/mcp", "/healthz"))
        .send()
        .await;
    assert!(refused.is_err(), "still serving after shutdown");
}

#[tokio::test]
async fn progress_rules_on_the_session_wire() {
    let s = start(vec![support::progress_script(150)]).await;
    let mut c = Client::connect(&s.url).await;
    let mut stream = c.open_stream().await;
    let created = c
        .request(
            "tools/call",
            json!({"name": "progress_script", "arguments": {}, "task": {}, "_meta": {"progressToken": "pr"}}),
        )
        .await;
    let id = created.result()["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let mut progress = Vec::new();
    let mut total_only = None;
    while progress.last() != Some(&25.0) {
        let m = support::next_msg(&mut stream).await;
        match m["method"].as_str() {
            Some("notifications/progress") => {
                assert_eq!(m["params"]["progressToken"], "pr");
                let p = m["params"]["progress"].as_f64().unwrap();
                let t = m["params"]["total"].as_f64().unwrap();
                assert!(t >= p, "total below progress: {m}");
                progress.push(p);
            }
            Some("notifications/tasks/status") if m["params"]["progressTotal"] == 20.0 => {
                total_only = Some(m);
            }
            _ => {}
        }
    }
    // Each progress notification rises; the decreasing report produced none.
    assert_eq!(progress, vec![1.0, 25.0]);
    // The total-only change went out as the task, which carries progress.
    let t = total_only.expect("a change of the total alone is told");
    assert_eq!(t["params"]["progress"], 1.0);
    // Pollers see the clamped values and the progress message as the status message.
    let task = c.get_task(&id).await;
    assert_eq!(task["progress"], 25.0);
    assert_eq!(task["progressTotal"], 25.0, "raised to the progress");
    assert_eq!(task["statusMessage"], "far");
    c.request("tasks/cancel", json!({"taskId": id})).await;
}

/// `io.github.mcp-tasks/signal` on this wire: the status says what the task waits for, the
/// owner's signal reaches the wait and the result carries its payload; a task the caller cannot
/// see is "not found".
#[tokio::test]
async fn the_signal_method_reaches_the_task_s_wait_on_the_session_wire() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let id = c
        .create_task(
            "approval_flow",
            json!({"sleep_seconds": 0, "timeout_seconds": 60}),
        )
        .await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let waiting = async {
        loop {
            let t = c.get_task(&id).await;
            let message = t["statusMessage"].as_str().unwrap_or("").to_string();
            if message.starts_with("waiting for the signal `approve` until") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the status says what the task waits for");
    let sent = c
        .request(
            "io.github.mcp-tasks/signal",
            json!({"taskId": id, "name": "approve", "payload": "yes"}),
        )
        .await;
    assert_eq!(sent.result()["signal"]["seq"], 1);
    let t = c.wait_terminal(&id).await;
    assert_eq!(t["status"], "completed", "{t}");
    let result = c
        .request("tasks/result", json!({"taskId": id}))
        .await
        .result()
        .clone();
    assert_eq!(result["structuredContent"]["approval"], "yes", "{result}");
    let missing = c
        .request(
            "io.github.mcp-tasks/signal",
            json!({"taskId": "0123456789abcdef0123456789abcdef", "name": "approve"}),
        )
        .await;
    assert_eq!(missing.error_code(), -32602);
}

/// The URL the `signed` tool handed out, by task (each run of a task hands out the same one).
type Handed = Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>;

/// A tool that hands out a signed URL for `approve` (valid `valid_ms`) to `handed`, then waits
/// for the signal and answers with its payload and sender.
fn hands_out_a_signal_url(handed: Handed) -> mcp_tasks_server::Tool {
    use mcp_tasks_protocol::mcp_2025::TaskSupport;
    use mcp_tasks_server::tool::{handler_fn, text_result, Tool};
    Tool::new(
        "signed",
        handler_fn(move |ctx, args| {
            let handed = handed.clone();
            async move {
                let valid = Duration::from_millis(args["valid_ms"].as_u64().unwrap_or(60_000));
                let url = match ctx.signal_url("approve", valid).await {
                    Ok(url) => url,
                    Err(e) => return text_result(e.to_string(), true),
                };
                let task = ctx.task_id().unwrap_or_default().to_string();
                handed.lock().unwrap().insert(task, url);
                match ctx.wait_signal("approve").await {
                    Ok(s) => text_result(format!("{} from {}", s.payload, s.sender), false),
                    Err(e) => text_result(e.to_string(), true),
                }
            }
        }),
    )
    .task_support(TaskSupport::Optional)
    .retry_on_restart(true)
}

/// The URL the tool handed out for task `id`.
async fn signal_url_of(handed: &Handed, id: &str) -> String {
    for _ in 0..100 {
        if let Some(url) = handed.lock().unwrap().get(id) {
            return url.clone();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no signal URL handed out");
}

/// `[signals]`: a third party POSTs the payload to the signed URL a handler handed out, without
/// credentials, even where every MCP request needs a key; a retry under the same `webhook-id` is
/// the same signal; a changed or expired URL is refused (403) and sends nothing; a body that is
/// not JSON is refused (400); a URL of a finished task answers 410. Without `[signals]` the
/// handler is told how to get URLs.
#[tokio::test]
async fn a_signed_url_sends_its_task_s_signal_without_credentials() {
    let mut config = ServerConfig::default();
    config.auth.keys = vec![mcp_tasks_server::auth::ApiKey {
        principal: "alice".into(),
        sha256: mcp_tasks_server::auth::hash_key("key-alice"),
        limits: Default::default(),
        scopes: None,
    }];
    config.auth.allow_anonymous = false;
    let handed = Handed::default();
    let base = "http://127.0.0.1:1"; // replaced below: the URLs must name where the test reaches
    config.signal_urls = Some(mcp_tasks_server::SignalUrlSettings {
        public_url: base.into(),
        secret: b"a secret of at least thirty-two bytes".to_vec(),
    });
    let s = start_with(
        Arc::new(MemoryStore::new()),
        support::fast_engine(),
        config,
        vec![hands_out_a_signal_url(handed.clone())],
    )
    .await;
    let mut c = Client::connect_token(&s.url, "key-alice", json!({})).await;
    let id = c.create_task("signed", json!({"valid_ms": 60_000})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    // The server's own address stands in for the public one.
    let root = s.url.trim_end_matches("/mcp");
    let url = signal_url_of(&handed, &id).await.replacen(base, root, 1);
    assert!(url.starts_with(&format!("{root}/signals/")), "{url}");
    let http = reqwest::Client::new();
    let post = |url: String, body: &'static str| {
        http.post(url)
            .header("content-type", "application/json")
            .header("webhook-id", "msg_1")
            .body(body)
            .send()
    };
    // One character of the sealed grant changed (not the signature's last, whose low bits
    // base64 leaves unused).
    let at = url.find("/signals/").unwrap() + "/signals/".len() + 10;
    let mut changed = url.clone();
    let was = changed.remove(at);
    changed.insert(at, if was == 'a' { 'b' } else { 'a' });
    let r = post(changed, r#"{"paid": true}"#).await.unwrap();
    assert_eq!(r.status(), 403);
    let r = post(url.clone(), "not json").await.unwrap();
    assert_eq!(r.status(), 400);
    let big = format!("\"{}\"", "x".repeat(300 * 1024));
    let r = http.post(url.clone()).body(big).send().await.unwrap();
    assert_eq!(r.status(), 413);
    let r = post(url.clone(), r#"{"paid": true}"#).await.unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        (body["signal"]["seq"].as_u64(), body["duplicate"].as_bool()),
        (Some(1), Some(false))
    );
    let t = c.wait_terminal(&id).await;
    assert_eq!(t["status"], "completed", "{t}");
    let result = c.request("tasks/result", json!({"taskId": id})).await;
    assert_eq!(
        result.result()["content"][0]["text"],
        r#"{"paid":true} from signed url"#
    );
    // The sender's retry, after the task finished: the same signal, not an error.
    let r = post(url.clone(), r#"{"paid": true}"#).await.unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["duplicate"], true);
    // Another send to the finished task: gone.
    let r = http.post(url).body("{}").send().await.unwrap();
    assert_eq!(r.status(), 410);

    // An expired URL sends nothing.
    let id = c.create_task("signed", json!({"valid_ms": 1})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let url = signal_url_of(&handed, &id).await.replacen(base, root, 1);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let r = post(url.clone(), "{}").await.unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, 403, "{url}: {text}");
    assert!(text.contains("expired"), "{text}");
    assert_eq!(c.get_task(&id).await["status"], "working");

    // Without [signals]: no URL, and the handler is told why.
    let plain = start(vec![hands_out_a_signal_url(Handed::default())]).await;
    let mut c = Client::connect(&plain.url).await;
    let id = c.create_task("signed", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let t = c.wait_terminal(&id).await;
    let result = c.request("tasks/result", json!({"taskId": id})).await;
    assert!(
        result.result()["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("set [signals] public_url and url_secret"),
        "{t} {:?}",
        result.reply
    );
}
