//! Built-in demo tools (`mcp-tasks serve --demo`), with the names and behaviour public test suites use.

use mcp_tasks_engine::{LogLevel, Outcome};
use mcp_tasks_protocol::mcp_2025::TaskSupport;
use serde_json::json;
use std::time::Duration;

use crate::tool::{handler_fn, text_result, Ask, Elicitation, Tool};

/// All demo tools.
pub fn tools() -> Vec<Tool> {
    vec![
        greet(),
        slow_compute(),
        pipeline(),
        approval_flow(),
        failing_job(),
        protocol_error_job(),
        confirm_delete(),
        write_haiku(),
        multi_input(),
        test_tool_with_task(),
    ]
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
            let unit = if seconds == 1.0 { "second" } else { "seconds" };
            text_result(format!("slow_compute{what} finished after {seconds} {unit}"), false)
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

/// `approval_flow {sleep_seconds, timeout_seconds}`: prepares (a journaled step), waits for the
/// signal `approve` up to `timeout_seconds` (the status message says so; a long wait suspends the
/// task), sleeps `sleep_seconds` durably, and finishes with the signal's payload and sender. No
/// signal in time ends it as a tool error saying so. Every part survives a restart or a hand-off.
pub fn approval_flow() -> Tool {
    Tool::new(
        "approval_flow",
        handler_fn(|ctx, args| async move {
            let secs = |name: &str, default: f64| {
                let v = args.get(name).and_then(|v| v.as_f64()).unwrap_or(default);
                Duration::from_secs_f64(v.clamp(0.0, 30.0 * 86_400.0))
            };
            let (sleep, timeout) = (secs("sleep_seconds", 1.0), secs("timeout_seconds", 3600.0));
            let prepared = ctx
                .step("prepare", || async {
                    let at = mcp_tasks_engine::format_rfc3339(mcp_tasks_engine::now_ms());
                    json!({"preparedAt": at})
                })
                .await;
            let prepared = match prepared {
                Ok(p) => p,
                Err(e) => return text_result(format!("approval_flow: {e}"), true),
            };
            let signal = match ctx.wait_signal_timeout("approve", timeout).await {
                Ok(Some(signal)) => signal,
                Ok(None) => {
                    return text_result(
                        format!(
                            "approval_flow: no `approve` signal within {} s",
                            timeout.as_secs_f64()
                        ),
                        true,
                    )
                }
                Err(e) => return text_result(format!("approval_flow: {e}"), true),
            };
            ctx.status(format!("approved by {}; finishing", signal.sender))
                .await;
            if let Err(e) = ctx.sleep(sleep).await {
                return text_result(format!("approval_flow: {e}"), true);
            }
            Outcome::Result {
                value: json!({
                    "content": [{"type": "text", "text": format!(
                        "approved by {} with {}", signal.sender, signal.payload
                    )}],
                    "structuredContent": {
                        "approval": signal.payload,
                        "approvedBy": signal.sender,
                        "preparedAt": prepared["preparedAt"],
                        "attempt": ctx.attempt(),
                    },
                }),
                is_error: false,
            }
        }),
    )
    .description(
        "Prepares, then waits for the signal `approve` (send it with `mcp-tasks task signal TASK \
         approve '{...}'` or the io.github.mcp-tasks/signal method) up to `timeout_seconds`, sleeps \
         `sleep_seconds` durably and finishes with the signal's payload. Survives restarts.",
    )
    .input_schema(json!({
        "type": "object",
        "properties": {
            "sleep_seconds": {"type": "number", "minimum": 0, "maximum": 2592000, "default": 1, "description": "The durable sleep after the approval"},
            "timeout_seconds": {"type": "number", "minimum": 0, "maximum": 2592000, "default": 3600, "description": "How long to wait for the approval"}
        }
    }))
    .output_schema(json!({
        "type": "object",
        "properties": {
            "approval": {"description": "The approve signal's payload"},
            "approvedBy": {"type": "string"},
            "preparedAt": {"type": "string"},
            "attempt": {"type": "integer"}
        },
        "required": ["approval", "approvedBy", "preparedAt", "attempt"]
    }))
    .task_support(TaskSupport::Optional)
    .retry_on_restart(true)
}

/// `pipeline {items, seconds_per_item}`: works through `items` items on the step journal, so a
/// restart or a deploy resumes it where it was. Each item is a durable sleep of `seconds_per_item`
/// (the work) and a step returning `{item, attempt}`, `attempt` being the run that did it; each
/// step's body also writes one audit log line (`pipeline step ran`), the side effect that happens
/// once. The result's `structuredContent.steps` lists the recorded outputs in item order.
pub fn pipeline() -> Tool {
    Tool::new(
        "pipeline",
        handler_fn(|ctx, args| async move {
            let items = args.get("items").and_then(|v| v.as_u64()).unwrap_or(5);
            let per_item = args
                .get("seconds_per_item")
                .and_then(|v| v.as_f64())
                .unwrap_or(1.0)
                .max(0.0);
            let mut steps = Vec::with_capacity(items as usize);
            for item in 0..items {
                if let Err(e) = ctx.sleep(Duration::from_secs_f64(per_item)).await {
                    return text_result(format!("pipeline stopped at item {item}: {e}"), true);
                }
                let attempt = ctx.attempt();
                let task = ctx.task_id().unwrap_or("").to_string();
                let out = ctx
                    .step(&format!("item {item}"), || async move {
                        tracing::info!(target: "mcp_tasks::audit", task = %task, item, attempt, "pipeline step ran");
                        json!({"item": item, "attempt": attempt})
                    })
                    .await;
                match out {
                    Ok(v) => {
                        // Its output is recorded now: no later run may run this body again.
                        let task = ctx.task_id().unwrap_or("");
                        tracing::info!(target: "mcp_tasks::audit", task = %task, item, attempt, "pipeline step recorded");
                        steps.push(v)
                    }
                    Err(e) => return text_result(format!("pipeline: {e}"), true),
                }
                let message = format!("item {item} done (attempt {attempt})");
                ctx.progress((item + 1) as f64, Some(items as f64), Some(message)).await;
            }
            let by: Vec<String> = steps
                .iter()
                .map(|s| format!("{}:{}", s["item"], s["attempt"]))
                .collect();
            Outcome::Result {
                value: json!({
                    "content": [{"type": "text", "text": format!(
                        "pipeline processed {items} items (item:attempt {}); this is attempt {}",
                        by.join(" "), ctx.attempt()
                    )}],
                    "structuredContent": {"steps": steps, "attempt": ctx.attempt()},
                }),
                is_error: false,
            }
        }),
    )
    .description(
        "Works through `items` items, `seconds_per_item` each, one journaled step per item: a restart \
         or a deploy resumes it where it stopped. The result lists each item with the attempt (run) \
         that did it.",
    )
    .input_schema(json!({
        "type": "object",
        "properties": {
            "items": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 5, "description": "How many items"},
            "seconds_per_item": {"type": "number", "minimum": 0, "maximum": 3600, "default": 1, "description": "How long each item takes"}
        }
    }))
    .output_schema(json!({
        "type": "object",
        "properties": {
            "steps": {"type": "array", "items": {"type": "object", "properties": {
                "item": {"type": "integer"}, "attempt": {"type": "integer"}
            }, "required": ["item", "attempt"]}},
            "attempt": {"type": "integer"}
        },
        "required": ["steps", "attempt"]
    }))
    .task_support(TaskSupport::Optional)
    .retry_on_restart(true)
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

/// `confirm_delete {filename}`: asks the user to confirm (one form elicitation), then reports what it
/// would have done. A demo: no file is touched.
pub fn confirm_delete() -> Tool {
    Tool::new(
        "confirm_delete",
        handler_fn(|ctx, args| async move {
            let filename = args.get("filename").and_then(|v| v.as_str()).unwrap_or("").to_string();
            let schema = json!({
                "type": "object",
                "properties": {"confirm": {"type": "boolean", "title": "Delete it?", "description": format!("Delete {filename}")}},
                "required": ["confirm"]
            });
            match ctx.elicit(&format!("Delete {filename}? This cannot be undone."), schema).await {
                Ok(Elicitation::Accept(c)) if c.get("confirm").and_then(|v| v.as_bool()) == Some(true) => {
                    text_result(format!("Deleted {filename} (demo: no file was touched)"), false)
                }
                Ok(Elicitation::Accept(_)) | Ok(Elicitation::Decline) => {
                    text_result(format!("Kept {filename}: deletion was not confirmed"), false)
                }
                Ok(Elicitation::Cancel) => text_result(format!("Kept {filename}: the user dismissed the question"), false),
                Err(e) => text_result(format!("Kept {filename}: could not ask for confirmation: {e}"), true),
            }
        }),
    )
    .description("Asks the user to confirm deleting a file (one elicitation), then reports the decision. Task only; touches nothing.")
    .input_schema(json!({
        "type": "object",
        "properties": {"filename": {"type": "string", "description": "The file to delete"}},
        "required": ["filename"]
    }))
    .task_support(TaskSupport::Required)
}

/// `write_haiku {topic}`: asks the client's model for a haiku (one sampling request) and returns it.
pub fn write_haiku() -> Tool {
    Tool::new(
        "write_haiku",
        handler_fn(|ctx, args| async move {
            let topic = args.get("topic").and_then(|v| v.as_str()).unwrap_or("the sea").to_string();
            let params = json!({
                "messages": [{"role": "user", "content": {"type": "text", "text": format!("Write a haiku about {topic}.")}}],
                "systemPrompt": "You are a poet. Answer with the haiku only.",
                "maxTokens": 100
            });
            match ctx.sample(params).await {
                Ok(result) => {
                    let content = &result["content"];
                    let block = if content.is_array() { &content[0] } else { content };
                    match block.get("text").and_then(|t| t.as_str()) {
                        Some(text) => text_result(text, false),
                        None => text_result(format!("the model answered without text: {result}"), true),
                    }
                }
                Err(e) => text_result(format!("could not get a haiku about {topic}: {e}"), true),
            }
        }),
    )
    .description("Asks the client's model (sampling) for a haiku about a topic and returns it. Task only.")
    .input_schema(json!({
        "type": "object",
        "properties": {"topic": {"type": "string"}},
        "required": ["topic"]
    }))
    .task_support(TaskSupport::Required)
}

/// `multi_input {}`: asks two questions at once (two elicitations outstanding together).
pub fn multi_input() -> Tool {
    Tool::new(
        "multi_input",
        handler_fn(|ctx, _args| async move {
            let name = ctx.elicit(
                "What is your name?",
                json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
            );
            let color = ctx.elicit(
                "What is your favourite colour?",
                json!({"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}),
            );
            let (name, color) = tokio::join!(name, color);
            let field = |r: Result<Elicitation, _>, key: &str| match r {
                Ok(Elicitation::Accept(c)) => Ok(c.get(key).and_then(|v| v.as_str()).unwrap_or("").to_string()),
                Ok(other) => Err(format!("{key}: {other:?}")),
                Err(e) => Err(format!("{key}: {e}")),
            };
            match (field(name, "name"), field(color, "color")) {
                (Ok(n), Ok(c)) => text_result(format!("Hello {n}, you like {c}."), false),
                (a, b) => text_result(format!("not answered: {:?} {:?}", a.err(), b.err()), true),
            }
        }),
    )
    .description("Asks two questions at once (name and colour) and greets you. Task only.")
    .input_schema(json!({"type": "object", "properties": {}}))
    .task_support(TaskSupport::Required)
}

/// `test_tool_with_task {}`: asks for the user's name inside the call (before any task exists: in
/// rounds on 2026-07-28, on the call's stream on 2025-11-25), then greets them from a task.
pub fn test_tool_with_task() -> Tool {
    let ask_name = handler_fn(|ctx, _args| async move {
        let schema = json!({"type": "object", "properties": {"name": {"type": "string", "title": "Your name"}}, "required": ["name"]});
        match ctx.elicit("What is your name?", schema).await {
            Ok(Elicitation::Accept(c)) => match c.get("name").and_then(|v| v.as_str()) {
                Some(name) => Outcome::Result {
                    value: json!({"user_name": name}),
                    is_error: false,
                },
                None => text_result("no name given", true),
            },
            Ok(other) => text_result(format!("no name given: {other:?}"), true),
            Err(e) => text_result(format!("could not ask for a name: {e}"), true),
        }
    });
    Tool::new(
        "test_tool_with_task",
        handler_fn(|ctx, args| async move {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(300)) => {}
                _ = ctx.cancelled() => {}
            }
            let name = args
                .get("user_name")
                .and_then(|v| v.as_str())
                .unwrap_or("stranger");
            text_result(
                format!("Hello, {name}! This greeting was made by a background task."),
                false,
            )
        }),
    )
    .description(
        "Asks for your name (before the task starts), then greets you from a task. Task only.",
    )
    .input_schema(json!({"type": "object", "properties": {}}))
    .task_support(TaskSupport::Required)
    .prepare(ask_name)
}
