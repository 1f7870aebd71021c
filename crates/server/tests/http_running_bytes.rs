//! What a principal's running tasks may hold (issue 26, item 6): the arguments of its tasks running
//! on this node count against `max_running_bytes`; a call past it is refused with a clear error
//! (-32004 naming the bytes), and a run that ends gives its share back.

mod support;

use mcp_tasks_protocol::mcp_2025::TaskSupport;
use mcp_tasks_server::auth::{AuthConfig, Limits};
use mcp_tasks_server::tool::{handler_fn, text_result};
use mcp_tasks_server::{ServerConfig, Tool};
use serde_json::json;
use std::sync::Arc;
use support::Client;

/// Runs until cancelled, whatever its arguments.
fn hold() -> Tool {
    Tool::new(
        "hold",
        handler_fn(|ctx, _args| async move {
            ctx.cancelled().await;
            text_result("stopped", false)
        }),
    )
    .task_support(TaskSupport::Optional)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_tasks_hold_at_most_max_running_bytes_of_arguments() {
    let config = ServerConfig {
        auth: AuthConfig {
            anonymous_limits: Limits {
                max_running_bytes: 100_000,
                ..Limits::default()
            },
            ..AuthConfig::default()
        },
        ..ServerConfig::default()
    };
    let s = support::start_with(
        Arc::new(mcp_tasks_engine::store::memory::MemoryStore::new()),
        support::fast_engine(),
        config,
        vec![hold()],
    )
    .await;
    let mut c = Client::connect(&s.url).await;
    let big = "x".repeat(40_000);
    let first = c.create_task("hold", json!({"data": big})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    c.create_task("hold", json!({"data": big})).await;
    // A third would hold about 120 KB: refused, saying why.
    let refused = c
        .request(
            "tools/call",
            json!({"name": "hold", "arguments": {"data": big}, "task": {}}),
        )
        .await;
    assert_eq!(refused.error_code(), -32004);
    let error = refused.error();
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("max_running_bytes"),
        "{error}"
    );
    assert_eq!(error["data"]["limitBytes"], 100_000);
    assert!(
        error["data"]["heldBytes"].as_u64().unwrap() >= 80_000,
        "{error}"
    );
    // Small calls still fit.
    c.create_task("hold", json!({"data": "small"})).await;
    // A run that ends gives its share back.
    c.request("tasks/cancel", json!({"taskId": first})).await;
    let mut accepted = false;
    for _ in 0..50 {
        let r = c
            .request(
                "tools/call",
                json!({"name": "hold", "arguments": {"data": big}, "task": {}}),
            )
            .await;
        if r.reply.as_ref().is_some_and(|m| m.get("result").is_some()) {
            accepted = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(accepted, "the cancelled task's bytes were given back");
}
