//! Built-in demo tools (`mcp-tasks serve --demo`), with the names and behaviour public test suites use.

use mcp_tasks_engine::{LogLevel, Outcome};
use mcp_tasks_protocol::mcp_2025::TaskSupport;
use serde_json::json;
use std::time::Duration;

use crate::tool::{handler_fn, text_result, Tool};

/// All demo tools.
pub fn tools() -> Vec<Tool> {
    vec![greet(), slow_compute(), failing_job(), protocol_error_job()]
}

/// `greet {name}`: answers at once, never as a task.
pub fn greet() -> Tool {
    Tool::new(
        "greet",
        handler_fn(|_ctx, args| async move {
            let name = args.get("name").and_then(|v| v.as_str()).unwrap_or("world");
            text_result(format!("Hello, {name}!"), false)
        }),
    )
    .description("Greets someone by name. Answers at once; never runs as a task.")
    .input_schema(json!({
        "type": "object",
        "properties": {"name": {"type": "string", "description": "Who to greet"}},
        "required": ["name"]
    }))
    .task_support(TaskSupport::Forbidden)
}

/// `slow_compute {seconds, label?}`: sleeps, reporting progress each second; stops promptly on cancel.
pub fn slow_compute() -> Tool {
    Tool::new(
        "slow_compute",
        handler_fn(|ctx, args| async move {
            let seconds = args.get("seconds").and_then(|v| v.as_f64()).unwrap_or(1.0).max(0.0);
            let label = args.get("label").and_then(|v| v.as_str()).map(str::to_string);
            let whole = seconds.ceil() as u64;
            ctx.progress(0.0, Some(seconds), Some("started".into())).await;
            for i in 1..=whole {
                let step = (seconds - (i - 1) as f64).min(1.0);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs_f64(step)) => {}
                    _ = ctx.cancelled() => return text_result("slow_compute was cancelled", true),
                }
                let done = (i as f64).min(seconds);
                ctx.progress(done, Some(seconds), Some(format!("{done} of {seconds} seconds"))).await;
                ctx.log(LogLevel::Debug, json!(format!("slow_compute: {done}/{seconds}"))).await;
            }
            let what = label.map(|l| format!(" ({l})")).unwrap_or_default();
            text_result(format!("slow_compute{what} finished after {seconds} seconds"), false)
        }),
    )
    .description("Sleeps for `seconds`, reporting progress every second. Runs as a task or inline.")
    .input_schema(json!({
        "type": "object",
        "properties": {
            "seconds": {"type": "number", "minimum": 0, "maximum": 86400, "description": "How long to work"},
            "label": {"type": "string", "description": "A label echoed in the result"}
        },
        "required": ["seconds"]
    }))
    .task_support(TaskSupport::Optional)
}

/// `failing_job {}`: a task that ends with a tool error (`isError: true`) after about a second.
pub fn failing_job() -> Tool {
    Tool::new(
        "failing_job",
        handler_fn(|ctx, _args| async move {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = ctx.cancelled() => {}
            }
            text_result(
                "failing_job failed on purpose: the demo job always reports an error",
                true,
            )
        }),
    )
    .description("Always fails with a tool error after about one second. Task only.")
    .input_schema(json!({"type": "object", "properties": {}}))
    .task_support(TaskSupport::Required)
}

/// `protocol_error_job {}`: ends in a JSON-RPC error (-32603) instead of a result.
pub fn protocol_error_job() -> Tool {
    Tool::new(
        "protocol_error_job",
        handler_fn(|ctx, _args| async move {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                _ = ctx.cancelled() => {}
            }
            Outcome::Error {
                code: -32603,
                message: "protocol_error_job failed on purpose with a JSON-RPC error".into(),
                data: None,
            }
        }),
    )
    .description("Ends in a JSON-RPC internal error (-32603) after half a second.")
    .input_schema(json!({"type": "object", "properties": {}}))
    .task_support(TaskSupport::Optional)
}
