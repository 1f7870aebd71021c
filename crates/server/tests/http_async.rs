//! Asynchronous Tool Execution (the SEP of 2025-08-26) over real HTTP on 127.0.0.1, for clients that
//! opt in at `initialize`. Every message is validated against the 2025-11-25 schema (by the test
//! client) and the form's own shapes (`crates/protocol/schemas/async-tool-execution`).

mod support;

use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_engine::EngineConfig;
use mcp_tasks_server::ServerConfig;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use support::schema::assert_valid_in;
use support::{next_msg, start, start_with, Client};

const OPT_IN: &str = "asyncToolExecution";

async fn opted_in(url: &str) -> Client {
    Client::connect_caps(
        url,
        json!({"experimental": {OPT_IN: {}}, "elicitation": {}, "sampling": {}}),
    )
    .await
}

/// `tools/call` with `operation`: the reply, checked against the form's `CallToolResult`.
async fn start_op(c: &mut Client, params: Value) -> Value {
    let ex = c.request("tools/call", params).await;
    let reply = ex.reply.expect("a reply");
    if reply.get("result").is_some() {
        assert_valid_in("async-tools", "CallToolResult", &reply["result"]);
    }
    reply
}

async fn status(c: &mut Client, token: &str) -> Value {
    let reply = c
        .request("tools/async/status", json!({"token": token}))
        .await
        .reply
        .unwrap();
    if let Some(r) = reply.get("result") {
        assert_valid_in("async-tools", "GetOperationStatusResult", r);
    }
    reply
}

async fn wait_status(c: &mut Client, token: &str, want: &str) -> Value {
    for _ in 0..300 {
        let s = status(c, token).await;
        if s["result"]["status"] == want {
            return s["result"].clone();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "operation {token} never became {want}: {}",
        status(c, token).await
    );
}

#[tokio::test]
async fn only_clients_that_opt_in_see_invocation_modes() {
    let s = start(vec![]).await;
    let mut c = Client::new(&s.url);
    let init = c
        .request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {"experimental": {OPT_IN: {}}}, "clientInfo": {"name": "t", "version": "0"}}),
        )
        .await;
    assert_eq!(
        init.result()["capabilities"]["experimental"][OPT_IN],
        json!({}),
        "the server says it serves the form"
    );
    let tools = c.request("tools/list", json!({})).await.result()["tools"].clone();
    let mode = |name: &str| {
        let t = tools
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap()
            .clone();
        assert_valid_in("async-tools", "Tool", &t);
        t["invocationMode"].clone()
    };
    assert_eq!(mode("greet"), "sync", "taskSupport forbidden");
    assert_eq!(mode("slow_compute"), "async", "optional: the hybrid tools");
    assert_eq!(mode("failing_job"), "async");
    // Everyone else sees the list exactly as before.
    let mut plain = Client::connect(&s.url).await;
    let tools = plain.request("tools/list", json!({})).await.result()["tools"].clone();
    assert!(tools
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t.get("invocationMode").is_none()));
}

#[tokio::test]
async fn an_operation_runs_to_completion_and_its_result_is_fetched_by_token() {
    let s = start(vec![]).await;
    let mut c = opted_in(&s.url).await;
    let reply = start_op(
        &mut c,
        json!({"name": "slow_compute", "arguments": {"seconds": 0.3}, "operation": {"token": "op-1", "keepAlive": 120}}),
    )
    .await;
    let op = &reply["result"]["operation"];
    assert_eq!(op["token"], "op-1");
    assert_eq!(op["keepAlive"], 120, "the granted value");
    assert_eq!(op["status"], "submitted");
    assert!(op["pollFrequency"].as_u64().unwrap() >= 1);
    assert!(reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("op-1"));
    // Not ready yet: a clear error.
    let early = c
        .request("tools/async/result", json!({"token": "op-1"}))
        .await;
    assert_eq!(early.error_code(), -32602);
    assert!(early.error()["message"]
        .as_str()
        .unwrap()
        .contains("once tools/async/status says completed"));
    wait_status(&mut c, "op-1", "completed").await;
    let result = c
        .request("tools/async/result", json!({"token": "op-1"}))
        .await;
    assert_valid_in("async-tools", "GetOperationPayloadResult", result.result());
    assert!(result.result()["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("finished"));
    // A result can be fetched again (call-now, fetch-later).
    let again = c
        .request("tools/async/result", json!({"token": "op-1"}))
        .await;
    assert_eq!(again.result(), result.result());
}

#[tokio::test]
async fn the_proposals_nested_request_form_and_a_server_chosen_token_work() {
    let s = start(vec![]).await;
    let mut c = opted_in(&s.url).await;
    let reply = start_op(
        &mut c,
        json!({"request": {"name": "slow_compute", "arguments": {"seconds": 0}}, "operation": {"keepAlive": 60}}),
    )
    .await;
    let token = reply["result"]["operation"]["token"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(token.len(), 32, "a random token: {token}");
    wait_status(&mut c, &token, "completed").await;
}

#[tokio::test]
async fn a_token_names_one_operation() {
    let s = start(vec![]).await;
    let mut c = opted_in(&s.url).await;
    let call =
        json!({"name": "slow_compute", "arguments": {"seconds": 5}, "operation": {"token": "t"}});
    start_op(&mut c, call.clone()).await;
    // The same call again (a retry after a lost reply) is the same operation.
    let retry = start_op(&mut c, call).await;
    assert_eq!(retry["result"]["operation"]["token"], "t");
    assert_eq!(retry["result"]["operation"]["status"], "working");
    // Other work under the token is refused.
    let other = start_op(
        &mut c,
        json!({"name": "slow_compute", "arguments": {"seconds": 1}, "operation": {"token": "t"}}),
    )
    .await;
    assert_eq!(other["error"]["code"], -32602);
    assert!(other["error"]["message"]
        .as_str()
        .unwrap()
        .contains("Operation token \"t\" was already used"));
    // Another anonymous client's "t" is another operation, and it cannot see this one.
    let mut d = opted_in(&s.url).await;
    assert_eq!(status(&mut d, "t").await["error"]["code"], -32602);
}

#[tokio::test]
async fn tool_errors_complete_and_protocol_errors_fail() {
    let s = start(vec![]).await;
    let mut c = opted_in(&s.url).await;
    start_op(
        &mut c,
        json!({"name": "failing_job", "arguments": {}, "operation": {"token": "tool-error"}}),
    )
    .await;
    wait_status(&mut c, "tool-error", "completed").await;
    let r = c
        .request("tools/async/result", json!({"token": "tool-error"}))
        .await;
    assert_eq!(r.result()["result"]["isError"], true, "the result says so");
    start_op(
        &mut c,
        json!({"name": "protocol_error_job", "arguments": {}, "operation": {"token": "rpc-error"}}),
    )
    .await;
    let failed = wait_status(&mut c, "rpc-error", "failed").await;
    assert!(!failed["error"].as_str().unwrap().is_empty(), "{failed}");
    let r = c
        .request("tools/async/result", json!({"token": "rpc-error"}))
        .await;
    assert_eq!(r.error_code(), -32602);
    assert!(r.error()["message"].as_str().unwrap().contains("failed"));
    // Invalid arguments: the operation exists and completed with the validation message.
    start_op(
        &mut c,
        json!({"name": "slow_compute", "arguments": {"seconds": "soon"}, "operation": {"token": "bad-args"}}),
    )
    .await;
    wait_status(&mut c, "bad-args", "completed").await;
    let r = c
        .request("tools/async/result", json!({"token": "bad-args"}))
        .await;
    assert!(r.result()["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("Invalid arguments"));
}

#[tokio::test]
async fn cancelling_the_original_request_cancels_the_operation_after_its_reply() {
    let s = start(vec![]).await;
    let mut c = opted_in(&s.url).await;
    let ex = c
        .request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 30}, "operation": {"token": "long"}}),
        )
        .await;
    let request_id = ex.reply.unwrap()["id"].clone();
    assert_eq!(
        c.notify(
            "notifications/cancelled",
            json!({"requestId": request_id, "reason": "user"})
        )
        .await,
        202
    );
    let canceled = wait_status(&mut c, "long", "canceled").await;
    assert!(canceled["error"].as_str().unwrap().contains("cancelled"));
    let r = c
        .request("tools/async/result", json!({"token": "long"}))
        .await;
    assert_eq!(r.error_code(), -32602);
}

#[tokio::test]
async fn clients_that_did_not_opt_in_are_told_how_to() {
    let s = start(vec![]).await;
    let mut c = Client::connect(&s.url).await;
    let call = c
        .request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {}, "operation": {"token": "x"}}),
        )
        .await;
    assert_eq!(call.error_code(), -32600);
    assert!(call.error()["message"]
        .as_str()
        .unwrap()
        .contains("capabilities.experimental.asyncToolExecution"));
    let st = c.request("tools/async/status", json!({"token": "x"})).await;
    assert_eq!(st.error_code(), -32600);
}

#[tokio::test]
async fn unknown_tokens_and_sync_tools_get_invalid_params() {
    let s = start(vec![]).await;
    let mut c = opted_in(&s.url).await;
    let st = status(&mut c, "never-started").await;
    assert_eq!(st["error"]["code"], -32602);
    assert_eq!(
        st["error"]["message"],
        "Failed to retrieve operation: Operation not found"
    );
    let no_token = c.request("tools/async/status", json!({})).await;
    assert_eq!(no_token.error_code(), -32602);
    let sync = start_op(
        &mut c,
        json!({"name": "greet", "arguments": {"name": "x"}, "operation": {}}),
    )
    .await;
    assert_eq!(sync["error"]["code"], -32602);
    assert!(sync["error"]["message"]
        .as_str()
        .unwrap()
        .contains("invocationMode \"sync\""));
}

#[tokio::test]
async fn questions_progress_and_logs_carry_the_operation_token() {
    let s = start(vec![]).await;
    let mut c = opted_in(&s.url).await;
    let mut stream = c.open_stream().await;
    start_op(
        &mut c,
        json!({"name": "slow_compute", "arguments": {"seconds": 1.2}, "operation": {"token": "p"}, "_meta": {"progressToken": "pt"}}),
    )
    .await;
    let progress = next_msg(&mut stream).await;
    assert_eq!(progress["method"], "notifications/progress");
    assert_eq!(progress["params"]["progressToken"], "pt");
    assert_valid_in("async-tools", "TaggedMessage", &progress);
    assert_eq!(progress["params"]["_operation"]["token"], "p");
    wait_status(&mut c, "p", "completed").await;

    start_op(
        &mut c,
        json!({"name": "confirm_delete", "arguments": {"filename": "a.txt"}, "operation": {"token": "ask"}}),
    )
    .await;
    let question = loop {
        let m = next_msg(&mut stream).await;
        if m["method"] == "elicitation/create" {
            break m;
        }
    };
    assert_valid_in("async-tools", "TaggedMessage", &question);
    assert_eq!(question["params"]["_operation"]["token"], "ask");
    wait_status(&mut c, "ask", "input_required").await;
    let (code, _) = c
        .respond(
            &question["id"],
            json!({"action": "accept", "content": {"confirm": true}, "_operation": {"token": "ask"}}),
        )
        .await;
    assert_eq!(code, 202);
    wait_status(&mut c, "ask", "completed").await;
    let r = c
        .request("tools/async/result", json!({"token": "ask"}))
        .await;
    assert!(r.result()["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("Deleted"));
}

#[tokio::test]
async fn a_question_asked_while_no_stream_was_open_is_sent_when_the_client_polls() {
    let s = start(vec![]).await;
    let mut c = opted_in(&s.url).await;
    start_op(
        &mut c,
        json!({"name": "confirm_delete", "arguments": {"filename": "b.txt"}, "operation": {"token": "late"}}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut stream = c.open_stream().await;
    wait_status(&mut c, "late", "input_required").await;
    let question = next_msg(&mut stream).await;
    assert_eq!(question["method"], "elicitation/create");
    assert_eq!(question["params"]["_operation"]["token"], "late");
}

#[tokio::test]
async fn an_operation_is_a_task_of_the_one_store() {
    let s = start(vec![]).await;
    let mut c = opted_in(&s.url).await;
    start_op(
        &mut c,
        json!({"name": "slow_compute", "arguments": {"seconds": 0}, "operation": {"token": "shared"}}),
    )
    .await;
    wait_status(&mut c, "shared", "completed").await;
    let listed = c.request("tasks/list", json!({})).await;
    let task_id = listed.result()["tasks"][0]["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let got = c.request("tasks/get", json!({"taskId": task_id})).await;
    assert_eq!(got.result()["status"], "completed");
    let payload = c.request("tasks/result", json!({"taskId": task_id})).await;
    assert!(payload.result()["content"].is_array());
    // The 2026-07-28 wire reads it too.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": task_id, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    }}});
    let resp = reqwest::Client::new()
        .post(&s.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tasks/get")
        .header("mcp-name", task_id.as_str())
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["result"]["status"], "completed", "{v}");
}

#[tokio::test]
async fn keep_alive_counts_from_completion() {
    let engine = EngineConfig {
        finished_grace_ms: 0,
        ..support::fast_engine()
    };
    let s = start_with(
        Arc::new(MemoryStore::new()),
        engine,
        ServerConfig::default(),
        vec![],
    )
    .await;
    let mut c = opted_in(&s.url).await;
    // Runs 1.5 s, then is kept 1 s: still there after 2 s from the start, gone soon after.
    let reply = start_op(
        &mut c,
        json!({"name": "slow_compute", "arguments": {"seconds": 1.5}, "operation": {"token": "brief", "keepAlive": 1}}),
    )
    .await;
    assert_eq!(reply["result"]["operation"]["keepAlive"], 1);
    wait_status(&mut c, "brief", "completed").await;
    assert_eq!(
        status(&mut c, "brief").await["result"]["status"],
        "completed"
    );
    let mut gone = false;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if status(&mut c, "brief").await["error"]["code"] == -32602 {
            gone = true;
            break;
        }
    }
    assert!(gone, "the operation outlived its keepAlive");
}

#[tokio::test]
async fn idempotency_keys_cannot_pose_as_operation_tokens() {
    let s = start(vec![]).await;
    let mut c = opted_in(&s.url).await;
    start_op(
        &mut c,
        json!({"name": "slow_compute", "arguments": {"seconds": 0}, "operation": {"token": "x"}}),
    )
    .await;
    let posing = c
        .request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0}, "task": {},
                   "_meta": {"io.github.mcp-tasks/idempotency-key": "operation:x"}}),
        )
        .await;
    assert_eq!(posing.error_code(), -32602);
    assert!(posing.error()["message"]
        .as_str()
        .unwrap()
        .contains("kept for operation tokens"));
}
