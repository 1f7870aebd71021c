//! Hosts that speak no tasks: a call of a tool with a sync budget still runs as a durable task; the
//! client gets the result when it is done within the budget, else a result saying the work goes on
//! as task ID, which the plain tools `task_status`, `task_result` and `task_cancel` follow up. The
//! same call made again joins the running task. Every message is validated against the schemas.

mod support;

use mcp_tasks_protocol::mcp_2025::TaskSupport;
use mcp_tasks_server::tool::{handler_fn, text_result, Tool};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::stateless::Stateless;
use support::{start, start_with, Client};

/// A server with the `wait` tool and two principals, alice and bob (keys `key-alice`, `key-bob`).
async fn with_principals(runs: Arc<AtomicUsize>) -> support::TestServer {
    use mcp_tasks_server::auth::{hash_key, ApiKey, AuthConfig, Limits};
    let key = |who: &str| ApiKey {
        principal: who.into(),
        sha256: hash_key(&format!("key-{who}")),
        limits: Limits::default(),
        scopes: None,
    };
    let config = mcp_tasks_server::ServerConfig {
        auth: AuthConfig {
            keys: vec![key("alice"), key("bob")],
            ..AuthConfig::default()
        },
        ..mcp_tasks_server::ServerConfig::default()
    };
    start_with(
        Arc::new(mcp_tasks_engine::store::memory::MemoryStore::new()),
        support::fast_engine(),
        config,
        vec![wait_tool(runs)],
    )
    .await
}

/// `wait {ms}`: reports progress every 100 ms and answers "waited MS"; counts its runs.
fn wait_tool(runs: Arc<AtomicUsize>) -> Tool {
    Tool::new(
        "wait",
        handler_fn(move |ctx, args| {
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                let ms = args["ms"].as_u64().unwrap_or(0);
                let steps = (ms / 100).max(1);
                for i in 1..=steps {
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(ms / steps)) => {}
                        () = ctx.cancelled() => return text_result("stopped", true),
                    }
                    ctx.progress(i as f64, Some(steps as f64), None).await;
                }
                text_result(format!("waited {ms}"), false)
            }
        }),
    )
    .input_schema(
        json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]}),
    )
    .output_schema(json!({"type": "object"}))
    .task_support(TaskSupport::Optional)
    .sync_budget(Duration::from_millis(800))
}

fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn a_2025_client_without_tasks_gets_results_within_the_budget_and_a_task_after_it() {
    let runs = Arc::new(AtomicUsize::new(0));
    let server = with_principals(runs.clone()).await;
    let mut c = Client::connect_token(&server.url, "key-alice", json!({})).await;

    // The follow-up tools are listed for this client; the budgeted tool promises no output schema.
    let listed = c.request("tools/list", json!({})).await;
    let tools = listed.result()["tools"].as_array().unwrap().clone();
    for name in ["task_status", "task_result", "task_cancel"] {
        assert!(tools.iter().any(|t| t["name"] == name), "{name} listed");
    }
    let wait = tools.iter().find(|t| t["name"] == "wait").unwrap();
    assert!(wait.get("outputSchema").is_none(), "{wait}");

    // Done within the budget: the normal result, with the call's progress on the way.
    let quick = c
        .request(
            "tools/call",
            json!({"name": "wait", "arguments": {"ms": 300}, "_meta": {"progressToken": "p1"}}),
        )
        .await;
    assert_eq!(text(quick.result()), "waited 300");
    assert!(
        quick.notifications.iter().any(
            |n| n["method"] == "notifications/progress" && n["params"]["progressToken"] == "p1"
        ),
        "{:?}",
        quick.notifications
    );

    // Past the budget: a normal result naming the task the work continues as.
    let slow = c
        .request(
            "tools/call",
            json!({"name": "wait", "arguments": {"ms": 2500}}),
        )
        .await;
    let r = slow.result().clone();
    assert!(r.get("isError").is_none(), "{r}");
    assert!(
        text(&r).contains("continues in the background as task"),
        "{r}"
    );
    let id = r["structuredContent"]["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        json!(id)
    );

    // The same call again joins that task: no second run.
    let again = c
        .request(
            "tools/call",
            json!({"name": "wait", "arguments": {"ms": 2500}}),
        )
        .await;
    assert_eq!(again.result()["structuredContent"]["taskId"], json!(id));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "quick + slow, the repeat joined"
    );

    let status = c
        .request(
            "tools/call",
            json!({"name": "task_status", "arguments": {"taskId": id}}),
        )
        .await;
    assert_eq!(status.result()["structuredContent"]["status"], "working");
    assert!(
        text(status.result()).contains("working"),
        "{}",
        status.result()
    );

    // Another principal cannot see it: "no task", as for a missing one.
    let mut other = Client::connect_token(&server.url, "key-bob", json!({})).await;
    let theirs = other
        .request(
            "tools/call",
            json!({"name": "task_status", "arguments": {"taskId": id}}),
        )
        .await;
    assert_eq!(theirs.result()["isError"], true);
    assert!(
        text(theirs.result()).starts_with("No task"),
        "{}",
        theirs.result()
    );

    // task_result waits a while; called again it hands over the result once the work is done.
    let mut result = Value::Null;
    for _ in 0..10 {
        let r = c
            .request(
                "tools/call",
                json!({"name": "task_result", "arguments": {"taskId": id}}),
            )
            .await;
        result = r.result().clone();
        if text(&result) == "waited 2500" {
            break;
        }
        assert!(text(&result).contains("still running"), "{result}");
    }
    assert_eq!(text(&result), "waited 2500");

    // task_cancel stops a task; a missing id is a tool error the model can read.
    let long = c
        .request(
            "tools/call",
            json!({"name": "wait", "arguments": {"ms": 60000}}),
        )
        .await;
    let long_id = long.result()["structuredContent"]["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let cancelled = c
        .request(
            "tools/call",
            json!({"name": "task_cancel", "arguments": {"taskId": long_id}}),
        )
        .await;
    assert!(
        text(cancelled.result()).ends_with("is cancelled."),
        "{}",
        cancelled.result()
    );
    assert_eq!(
        cancelled.result()["structuredContent"]["status"],
        "cancelled"
    );
    let missing = c
        .request(
            "tools/call",
            json!({"name": "task_result", "arguments": {}}),
        )
        .await;
    assert_eq!(missing.result()["isError"], true);
}

#[tokio::test]
async fn a_client_that_speaks_tasks_sees_no_follow_up_tools() {
    let server = start(vec![wait_tool(Arc::default())]).await;
    let mut c = Client::connect_caps(&server.url, json!({"tasks": {}})).await;
    let listed = c.request("tools/list", json!({})).await;
    let tools = listed.result()["tools"].as_array().unwrap().clone();
    assert!(!tools.iter().any(|t| t["name"] == "task_status"));
    let wait = tools.iter().find(|t| t["name"] == "wait").unwrap();
    assert!(wait.get("outputSchema").is_some(), "{wait}");
}

#[tokio::test]
async fn a_2026_client_without_the_extension_gets_the_same() {
    let runs = Arc::new(AtomicUsize::new(0));
    let server = start(vec![wait_tool(runs.clone())]).await;
    let mut c = Stateless::new(&server.url, json!({}));
    let listed = c.call("tools/list", json!({})).await;
    let tools = listed.result()["tools"].as_array().unwrap().clone();
    assert!(tools.iter().any(|t| t["name"] == "task_result"));

    let quick = c
        .call(
            "tools/call",
            json!({"name": "wait", "arguments": {"ms": 200}}),
        )
        .await;
    assert_eq!(text(quick.result()), "waited 200");
    let slow = c
        .call(
            "tools/call",
            json!({"name": "wait", "arguments": {"ms": 2000}}),
        )
        .await;
    let id = slow.result()["structuredContent"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", slow.result()))
        .to_string();
    let mut result = Value::Null;
    for _ in 0..10 {
        let r = c
            .call(
                "tools/call",
                json!({"name": "task_result", "arguments": {"taskId": id}}),
            )
            .await;
        result = r.result().clone();
        if text(&result) == "waited 2000" {
            break;
        }
    }
    assert_eq!(text(&result), "waited 2000");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// What a host that hands the model only a reply's `structuredContent` (Claude Code through
/// `wrap` does) needs: the reply's structured part says what to call next, with which
/// arguments, and which event to subscribe to; a client that follows only that gets the result.
#[tokio::test]
async fn the_structured_part_alone_says_how_to_follow_the_task_up() {
    let runs = Arc::new(AtomicUsize::new(0));
    let server = start(vec![wait_tool(runs.clone())]).await;
    let mut c = Stateless::new(&server.url, json!({}));
    let slow = c
        .call(
            "tools/call",
            json!({"name": "wait", "arguments": {"ms": 2000}}),
        )
        .await;
    let structured = slow.result()["structuredContent"].clone();
    let next = &structured["next"];
    let id = structured["taskId"].as_str().unwrap().to_string();
    assert_eq!(
        next["event"],
        json!({"name": "task.finished", "arguments": {"taskId": id}})
    );
    assert_eq!(next["status"]["tool"], "task_status");
    assert_eq!(next["cancel"]["tool"], "task_cancel");
    assert!(next["message"].as_str().unwrap().contains("task_result"));
    let mut result = Value::Null;
    for _ in 0..10 {
        // Only what the structured part says: the tool and its arguments.
        let r = c
            .call(
                "tools/call",
                json!({"name": next["result"]["tool"], "arguments": next["result"]["arguments"]}),
            )
            .await;
        result = r.result().clone();
        if text(&result) == "waited 2000" {
            break;
        }
    }
    assert_eq!(text(&result), "waited 2000");
    assert!(
        result["structuredContent"].get("next").is_none(),
        "a finished task needs no next step: {result}"
    );
    let status = c
        .call(
            "tools/call",
            json!({"name": "task_status", "arguments": {"taskId": id}}),
        )
        .await;
    assert!(status.result()["structuredContent"].get("next").is_none());
}
