//! The fixtures the official MCP conformance suite calls by name (`mcp-tasks serve --demo` registers
//! them): content-type tools, progress and logging, elicitation and sampling, 2026-07-28 multi-round
//! input, resources, a resource template and prompts. Each is an ordinary tool, resource or prompt of
//! this server's runtime — nothing in the dispatcher knows about them.

use mcp_tasks_engine::{LogLevel, Outcome};
use mcp_tasks_protocol::mcp_2025::TaskSupport;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Duration;

use crate::catalog::{Prompt, Resource, ResourceTemplate};
use crate::tool::{handler_fn, text_result, Ask, Elicitation, Tool};

/// A 1×1 PNG.
pub const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
/// A short silent WAV (8 kHz, 8-bit mono, 8 samples).
pub const WAV_SILENCE: &str =
    "UklGRiwAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQgAAACAgICAgICAgA==";

fn result(content: Value) -> Outcome {
    Outcome::Result {
        value: json!({"content": content}),
        is_error: false,
    }
}

fn no_args() -> Value {
    json!({"type": "object", "properties": {}})
}

fn tool(
    name: &str,
    description: &str,
    schema: Value,
    f: Arc<dyn mcp_tasks_engine::TaskHandler>,
) -> Tool {
    Tool::new(name, f)
        .description(description)
        .input_schema(schema)
        .task_support(TaskSupport::Forbidden)
}

/// Tools of the core suites (content types, errors, progress, logging, elicitation, sampling).
pub fn core_tools() -> Vec<Tool> {
    vec![
        tool(
            "test_simple_text",
            "Returns a simple text response.",
            no_args(),
            handler_fn(|_, _| async {
                text_result("This is a simple text response for testing.", false)
            }),
        ),
        tool(
            "test_image_content",
            "Returns a small PNG image.",
            no_args(),
            handler_fn(|_, _| async {
                result(json!([{"type": "image", "data": PNG_1X1, "mimeType": "image/png"}]))
            }),
        ),
        tool(
            "test_audio_content",
            "Returns a short WAV clip.",
            no_args(),
            handler_fn(|_, _| async {
                result(json!([{"type": "audio", "data": WAV_SILENCE, "mimeType": "audio/wav"}]))
            }),
        ),
        tool(
            "test_embedded_resource",
            "Returns an embedded text resource.",
            no_args(),
            handler_fn(|_, _| async {
                result(json!([{"type": "resource", "resource": {
                    "uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content."
                }}]))
            }),
        ),
        tool(
            "test_multiple_content_types",
            "Returns text, an image and an embedded resource.",
            no_args(),
            handler_fn(|_, _| async {
                result(json!([
                    {"type": "text", "text": "Multiple content types test:"},
                    {"type": "image", "data": PNG_1X1, "mimeType": "image/png"},
                    {"type": "resource", "resource": {"uri": "test://mixed-content-resource", "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}"}}
                ]))
            }),
        ),
        tool(
            "test_error_handling",
            "Always returns a tool error.",
            no_args(),
            handler_fn(|_, _| async {
                text_result("This tool intentionally returns an error for testing", true)
            }),
        ),
        tool(
            "test_tool_with_progress",
            "Reports progress 0, 50 and 100 of 100.",
            no_args(),
            handler_fn(|ctx, _| async move {
                for (i, p) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                    if i > 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    ctx.progress(p, Some(100.0), Some(format!("{p} of 100")))
                        .await;
                }
                text_result("Progress test completed", false)
            }),
        ),
        tool(
            "test_tool_with_logging",
            "Writes three info log messages while it runs.",
            no_args(),
            handler_fn(|ctx, _| async move {
                ctx.log(LogLevel::Info, json!("Tool execution started"))
                    .await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                ctx.log(LogLevel::Info, json!("Tool processing data")).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                ctx.log(LogLevel::Info, json!("Tool execution completed"))
                    .await;
                text_result("Logging test completed", false)
            }),
        ),
        tool(
            "test_sampling",
            "Asks the client's model to answer a prompt (sampling).",
            json!({"type": "object", "properties": {"prompt": {"type": "string", "description": "What to ask the model"}}, "required": ["prompt"]}),
            handler_fn(|ctx, args| async move {
                let prompt = args["prompt"].as_str().unwrap_or("").to_string();
                let params = json!({"messages": [{"role": "user", "content": {"type": "text", "text": prompt}}], "maxTokens": 100});
                match ctx.sample(params).await {
                    Ok(r) => {
                        let text = r["content"]["text"]
                            .as_str()
                            .or_else(|| r["content"][0]["text"].as_str())
                            .unwrap_or("");
                        text_result(format!("LLM response: {text}"), false)
                    }
                    Err(e) => text_result(format!("sampling failed: {e}"), true),
                }
            }),
        ),
        tool(
            "test_elicitation",
            "Asks the user for a username and email (elicitation).",
            json!({"type": "object", "properties": {"message": {"type": "string", "description": "What to tell the user"}}, "required": ["message"]}),
            handler_fn(|ctx, args| async move {
                let message = args["message"]
                    .as_str()
                    .unwrap_or("Please provide your details")
                    .to_string();
                let schema = json!({"type": "object", "properties": {
                    "username": {"type": "string", "description": "User's response"},
                    "email": {"type": "string", "description": "User's email address"}
                }, "required": ["username", "email"]});
                elicitation_summary("User response", ctx.elicit(&message, schema).await)
            }),
        ),
        tool(
            "test_elicitation_sep1034_defaults",
            "Elicitation whose fields carry default values (SEP-1034).",
            no_args(),
            handler_fn(|ctx, _| async move {
                let schema = json!({"type": "object", "properties": {
                    "name": {"type": "string", "default": "John Doe"},
                    "age": {"type": "integer", "default": 30},
                    "score": {"type": "number", "default": 95.5},
                    "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
                    "verified": {"type": "boolean", "default": true}
                }});
                elicitation_summary(
                    "Elicitation completed",
                    ctx.elicit("Please review your profile", schema).await,
                )
            }),
        ),
        tool(
            "test_elicitation_sep1330_enums",
            "Elicitation with every enum form (SEP-1330).",
            no_args(),
            handler_fn(|ctx, _| async move {
                let schema = json!({"type": "object", "properties": {
                    "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                    "titledSingle": {"type": "string", "oneOf": [
                        {"const": "value1", "title": "First Option"}, {"const": "value2", "title": "Second Option"}, {"const": "value3", "title": "Third Option"}]},
                    "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"], "enumNames": ["Option One", "Option Two", "Option Three"]},
                    "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                    "titledMulti": {"type": "array", "items": {"anyOf": [
                        {"const": "value1", "title": "First Choice"}, {"const": "value2", "title": "Second Choice"}, {"const": "value3", "title": "Third Choice"}]}}
                }});
                elicitation_summary(
                    "Elicitation completed",
                    ctx.elicit("Pick some options", schema).await,
                )
            }),
        ),
        tool(
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features",
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                "$defs": {"address": {"$anchor": "addressDef", "type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
                "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}, "contactMethod": {"type": "string", "enum": ["phone", "email"]}, "phone": {"type": "string"}, "email": {"type": "string"}},
                "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
                "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
                "then": {"required": ["phone"]}, "else": {"required": ["email"]},
                "additionalProperties": false
            }),
            handler_fn(|_, args| async move { text_result(format!("Received: {args}"), false) }),
        ),
    ]
}

fn elicitation_summary(
    prefix: &str,
    r: Result<Elicitation, mcp_tasks_engine::InputError>,
) -> Outcome {
    match r {
        Ok(Elicitation::Accept(c)) => text_result(
            format!("{prefix}: action=accept, content={}", Value::Object(c)),
            false,
        ),
        Ok(Elicitation::Decline) => text_result(format!("{prefix}: action=decline"), false),
        Ok(Elicitation::Cancel) => text_result(format!("{prefix}: action=cancel"), false),
        Err(e) => text_result(format!("{prefix}: could not ask: {e}"), true),
    }
}

/// Tools of the 2026-07-28 suites: diagnostics and multi-round input (SEP-2322).
pub fn stateless_tools() -> Vec<Tool> {
    let name_schema = || json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]});
    let accepted = |r: Result<Elicitation, mcp_tasks_engine::InputError>,
                    field: &str|
     -> Result<String, Outcome> {
        match r {
            Ok(Elicitation::Accept(c)) => Ok(c
                .get(field)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()),
            Ok(other) => Err(text_result(format!("not answered: {other:?}"), false)),
            Err(e) => Err(text_result(format!("could not ask: {e}"), true)),
        }
    };
    vec![
        tool("test_missing_capability", "Needs the client's sampling capability.", no_args(), handler_fn(|ctx, _| async move {
            match ctx.sample(json!({"messages": [{"role": "user", "content": {"type": "text", "text": "Say hi"}}], "maxTokens": 20})).await {
                Ok(r) => text_result(format!("sampled: {}", r["content"]), false),
                Err(e) => text_result(e.to_string(), true),
            }
        }))
        .requires(json!({"sampling": {}})),
        tool("test_streaming_elicitation", "Asks for a name; on 2026-07-28 the question comes back as an input_required result.", no_args(), handler_fn(move |ctx, _| async move {
            match accepted(ctx.elicit_as("user_name", "What is your name?", name_schema()).await, "name") {
                Ok(n) => text_result(format!("Hello, {n}!"), false),
                Err(o) => o,
            }
        })),
        tool(
            "test_custom_headers",
            "Echoes its arguments; region and priority are mirrored in Mcp-Param-* headers (SEP-2243).",
            json!({"type": "object", "properties": {
                "region": {"type": "string", "description": "Region (header Mcp-Param-Region)", "x-mcp-header": "Region"},
                "priority": {"type": "integer", "description": "Priority (header Mcp-Param-Priority)", "x-mcp-header": "Priority"},
                "query": {"type": "string", "description": "Not mirrored"}
            }, "required": ["region", "query"]}),
            handler_fn(|_, args| async move { text_result(format!("region={} query={}", args["region"], args["query"]), false) }),
        ),
        tool("test_logging_tool", "Logs while it runs; logs reach only requests that ask for them.", no_args(), handler_fn(|ctx, _| async move {
            ctx.log(LogLevel::Info, json!("test_logging_tool ran")).await;
            text_result("logged", false)
        })),
        tool("test_input_required_result_elicitation", "Asks for your name (key user_name), then greets you.", no_args(), handler_fn(move |ctx, _| async move {
            match accepted(ctx.elicit_as("user_name", "What is your name?", name_schema()).await, "name") {
                Ok(n) => text_result(format!("Hello, {n}!"), false),
                Err(o) => o,
            }
        })),
        tool("test_input_required_result_sampling", "Asks the client's model a question.", no_args(), handler_fn(|ctx, _| async move {
            let q = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "What is the capital of France?"}}], "maxTokens": 100});
            match ctx.sample_as("capital_question", q).await {
                Ok(r) => text_result(format!("The model says: {}", r["content"]["text"].as_str().unwrap_or("")), false),
                Err(e) => text_result(e.to_string(), true),
            }
        })),
        tool("test_input_required_result_list_roots", "Asks the client for its roots.", no_args(), handler_fn(|ctx, _| async move {
            match ctx.list_roots_as("client_roots").await {
                Ok(r) => text_result(format!("Roots: {}", r["roots"]), false),
                Err(e) => text_result(e.to_string(), true),
            }
        })),
        tool("test_input_required_result_request_state", "Asks for a confirmation; the round carries a request state.", no_args(), handler_fn(|ctx, _| async move {
            let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]});
            match ctx.elicit_as("confirm", "Please confirm", schema).await {
                Ok(Elicitation::Accept(c)) => text_result(format!("state-ok: confirmed={}", c.get("ok").unwrap_or(&Value::Null)), false),
                Ok(other) => text_result(format!("state-ok: {other:?}"), false),
                Err(e) => text_result(e.to_string(), true),
            }
        })),
        tool("test_input_required_result_multiple_inputs", "Asks three things at once: a name, a greeting from the model, and the roots.", no_args(), handler_fn(move |ctx, _| async move {
            let greeting = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "Generate a greeting"}}], "maxTokens": 50});
            let (name, hello, roots) = tokio::join!(
                ctx.elicit_as("user_name", "What is your name?", name_schema()),
                ctx.sample_as("greeting", greeting),
                ctx.list_roots_as("client_roots"),
            );
            match (name, hello, roots) {
                (Ok(Elicitation::Accept(n)), Ok(h), Ok(r)) => text_result(
                    format!("{} {} (roots: {})", h["content"]["text"].as_str().unwrap_or(""), n.get("name").and_then(Value::as_str).unwrap_or(""), r["roots"]),
                    false,
                ),
                other => text_result(format!("not all answered: {other:?}"), true),
            }
        })),
        tool("test_input_required_result_multi_round", "Asks two questions, one round after the other.", no_args(), handler_fn(|ctx, _| async move {
            let name = ctx.elicit_as("step1", "Step 1: What is your name?", json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})).await;
            let Ok(Elicitation::Accept(n)) = name else { return text_result("step 1 not answered", true) };
            let color = ctx.elicit_as("step2", "Step 2: What is your favorite color?", json!({"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]})).await;
            let Ok(Elicitation::Accept(c)) = color else { return text_result("step 2 not answered", true) };
            text_result(format!("{} likes {}", n.get("name").and_then(Value::as_str).unwrap_or(""), c.get("color").and_then(Value::as_str).unwrap_or("")), false)
        })),
        tool("test_input_required_result_tampered_state", "Asks for a confirmation; a tampered request state is refused.", no_args(), handler_fn(|ctx, _| async move {
            let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]});
            match ctx.elicit_as("confirm", "Please confirm", schema).await {
                Ok(_) => text_result("confirmed", false),
                Err(e) => text_result(e.to_string(), true),
            }
        })),
        tool("test_input_required_result_capabilities", "Asks the user if the client can be asked, else the client's model.", no_args(), handler_fn(move |ctx, _| async move {
            match ctx.elicit_as("user_name", "What is your name?", name_schema()).await {
                Ok(Elicitation::Accept(c)) => return text_result(format!("Hello, {}!", c.get("name").and_then(Value::as_str).unwrap_or("")), false),
                Ok(other) => return text_result(format!("{other:?}"), false),
                Err(mcp_tasks_engine::InputError::Unsupported(_)) => {}
                Err(e) => return text_result(e.to_string(), true),
            }
            let q = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "Suggest a name"}}], "maxTokens": 20});
            match ctx.sample_as("name_suggestion", q).await {
                Ok(r) => text_result(format!("Suggested: {}", r["content"]["text"].as_str().unwrap_or("")), false),
                Err(e) => text_result(e.to_string(), true),
            }
        })),
    ]
}

fn text_contents(uri: &str, mime: &str, text: &str) -> Vec<Value> {
    vec![json!({"uri": uri, "mimeType": mime, "text": text})]
}

/// Resources and the resource template of the core suites.
pub fn resources() -> (Vec<Resource>, Vec<ResourceTemplate>) {
    let fixed = |uri: &str, name: &str, mime: &str, description: &str, contents: Value| Resource {
        meta: json!({"uri": uri, "name": name, "mimeType": mime, "description": description}),
        read: Arc::new(move |_, _| Ok(vec![contents.clone()])),
    };
    let resources = vec![
        fixed(
            "test://static-text",
            "static-text",
            "text/plain",
            "A static text resource",
            json!({"uri": "test://static-text", "mimeType": "text/plain", "text": "This is the content of the static text resource."}),
        ),
        fixed(
            "test://static-binary",
            "static-binary",
            "image/png",
            "A static binary resource (PNG)",
            json!({"uri": "test://static-binary", "mimeType": "image/png", "blob": PNG_1X1}),
        ),
        fixed(
            "test://watched-resource",
            "watched-resource",
            "text/plain",
            "A resource clients can subscribe to",
            json!({"uri": "test://watched-resource", "mimeType": "text/plain", "text": "Watched resource content"}),
        ),
    ];
    let template = ResourceTemplate {
        meta: json!({"uriTemplate": "test://template/{id}/data", "name": "template", "mimeType": "application/json", "description": "Data for an id"}),
        read: Arc::new(|uri, vars| {
            let id = vars.get("id").cloned().unwrap_or_default();
            let text =
                json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")})
                    .to_string();
            Ok(text_contents(uri, "application/json", &text))
        }),
        complete: Some(Arc::new(|_, prefix| {
            ["1", "123", "42"]
                .iter()
                .filter(|v| v.starts_with(prefix))
                .map(|v| v.to_string())
                .collect()
        })),
    };
    (resources, vec![template])
}

fn user_text(text: String) -> Value {
    json!({"role": "user", "content": {"type": "text", "text": text}})
}

fn arg(args: &Map<String, Value>, name: &str) -> String {
    args.get(name)
        .map(|v| {
            v.as_str()
                .map(String::from)
                .unwrap_or_else(|| v.to_string())
        })
        .unwrap_or_default()
}

/// Prompts of the core suites.
pub fn prompts() -> Vec<Prompt> {
    let plain = |meta: Value, render: crate::catalog::RenderFn| Prompt {
        meta,
        render,
        complete: None,
        handler: None,
    };
    vec![
        plain(
            json!({"name": "test_simple_prompt", "description": "A prompt without arguments"}),
            Arc::new(|_| {
                Ok(vec![user_text(
                    "This is a simple prompt for testing.".into(),
                )])
            }),
        ),
        Prompt {
            meta: json!({"name": "test_prompt_with_arguments", "description": "A prompt with two required arguments", "arguments": [
                {"name": "arg1", "description": "First argument", "required": true},
                {"name": "arg2", "description": "Second argument", "required": true}]}),
            render: Arc::new(|a| {
                Ok(vec![user_text(format!(
                    "Prompt with arguments: arg1='{}', arg2='{}'",
                    arg(a, "arg1"),
                    arg(a, "arg2")
                ))])
            }),
            complete: Some(Arc::new(|_, prefix| {
                ["test", "testValue1", "testValue2", "other"]
                    .iter()
                    .filter(|v| v.starts_with(prefix))
                    .map(|v| v.to_string())
                    .collect()
            })),
            handler: None,
        },
        plain(
            json!({"name": "test_prompt_with_embedded_resource", "description": "A prompt that embeds a resource", "arguments": [
                {"name": "resourceUri", "description": "URI of the resource to embed", "required": true}]}),
            Arc::new(|a| {
                Ok(vec![
                    json!({"role": "user", "content": {"type": "resource", "resource": {"uri": arg(a, "resourceUri"), "mimeType": "text/plain", "text": "Embedded resource content for testing."}}}),
                    user_text("Please process the embedded resource above.".into()),
                ])
            }),
        ),
        plain(
            json!({"name": "test_prompt_with_image", "description": "A prompt with an image"}),
            Arc::new(|_| {
                Ok(vec![
                    json!({"role": "user", "content": {"type": "image", "data": PNG_1X1, "mimeType": "image/png"}}),
                    user_text("Please analyze the image above.".into()),
                ])
            }),
        ),
        Prompt {
            meta: json!({"name": "test_input_required_result_prompt", "description": "Asks which context to use before building the prompt"}),
            render: Arc::new(|_| Err("this prompt asks for input first".into())),
            complete: None,
            handler: Some(handler_fn(|ctx, _| async move {
                let schema = json!({"type": "object", "properties": {"context": {"type": "string"}}, "required": ["context"]});
                match ctx
                    .elicit_as(
                        "user_context",
                        "What context should the prompt use?",
                        schema,
                    )
                    .await
                {
                    Ok(Elicitation::Accept(c)) => Outcome::Result {
                        value: json!({"messages": [user_text(format!("Use this context: {}", c.get("context").and_then(Value::as_str).unwrap_or("")))]}),
                        is_error: false,
                    },
                    Ok(other) => Outcome::Error {
                        code: -32602,
                        message: format!("no context given: {other:?}"),
                        data: None,
                    },
                    Err(e) => Outcome::Error {
                        code: -32602,
                        message: e.to_string(),
                        data: None,
                    },
                }
            })),
        },
    ]
}
