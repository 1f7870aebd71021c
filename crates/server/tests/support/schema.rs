//! Validation of server messages against the official MCP JSON schemas copied into
//! `crates/protocol/schemas/` (see the README there for their origin).

use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

fn schema_doc(doc: &str) -> &'static Value {
    static DOCS: OnceLock<HashMap<&'static str, Value>> = OnceLock::new();
    let docs = DOCS.get_or_init(|| {
        let parse = |t: &str| serde_json::from_str::<Value>(t).unwrap();
        let mut m = HashMap::new();
        m.insert(
            "2025-11-25",
            parse(include_str!(
                "../../../protocol/schemas/2025-11-25/schema.json"
            )),
        );
        m.insert(
            "2026-07-28",
            parse(include_str!(
                "../../../protocol/schemas/2026-07-28/schema.json"
            )),
        );
        m.insert(
            "async-tools",
            parse(include_str!(
                "../../../protocol/schemas/async-tool-execution/schema.json"
            )),
        );
        m.insert(
            "ext-tasks",
            parse(include_str!(
                "../../../protocol/schemas/ext-tasks-2026-07-28/schema.json"
            )),
        );
        m
    });
    &docs[doc]
}

fn validator_in(doc_name: &str, def: &str) -> &'static jsonschema::Validator {
    static CACHE: OnceLock<Mutex<HashMap<String, &'static jsonschema::Validator>>> =
        OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut map = cache.lock().unwrap();
    let key = format!("{doc_name}#{def}");
    if let Some(v) = map.get(&key) {
        return v;
    }
    let mut doc = schema_doc(doc_name).clone();
    assert!(
        doc["$defs"].get(def).is_some(),
        "schema {doc_name} has no $defs/{def}"
    );
    doc["$ref"] = json!(format!("#/$defs/{def}"));
    let v: &'static jsonschema::Validator =
        Box::leak(Box::new(jsonschema::validator_for(&doc).unwrap()));
    map.insert(key, v);
    v
}

/// Asserts `value` is valid against `$defs/def` of the 2025-11-25 schema (2025-06-18 and 2025-03-26
/// messages are a subset of it).
pub fn assert_valid(def: &str, value: &Value) {
    assert_valid_in("2025-11-25", def, value)
}

/// Asserts `value` is valid against `$defs/def` of schema `doc` (`2025-11-25`, `2026-07-28`, `ext-tasks`).
pub fn assert_valid_in(doc: &str, def: &str, value: &Value) {
    let v = validator_in(doc, def);
    let errors: Vec<String> = v
        .iter_errors(value)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "message does not match schema {doc} $defs/{def}:\n{}\nmessage: {value}",
        errors.join("\n")
    );
}

/// Checks a 2025 reply (result or error) to `method`.
pub fn check_reply(version: &str, method: &str, params: &Value, reply: &Value) {
    let _ = version;
    assert_valid("JSONRPCMessage", reply);
    if reply.get("error").is_some() {
        assert_valid("JSONRPCErrorResponse", reply);
        return;
    }
    assert_valid("JSONRPCResultResponse", reply);
    let result = &reply["result"];
    let def = match method {
        "initialize" => "InitializeResult",
        "tools/list" => "ListToolsResult",
        "tools/call" if params.get("task").is_some() && result.get("task").is_some() => {
            "CreateTaskResult"
        }
        "tools/call" => "CallToolResult",
        "tasks/get" => "GetTaskResult",
        "tasks/cancel" => "CancelTaskResult",
        "tasks/list" => "ListTasksResult",
        // The payload of a tools/call task is what tools/call would have returned.
        "tasks/result" => "CallToolResult",
        "resources/list" => "ListResourcesResult",
        "resources/read" => "ReadResourceResult",
        "resources/templates/list" => "ListResourceTemplatesResult",
        "prompts/list" => "ListPromptsResult",
        "prompts/get" => "GetPromptResult",
        "completion/complete" => "CompleteResult",
        _ => "Result",
    };
    assert_valid(def, result);
    if method == "tasks/result" {
        assert!(
            result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"].is_string(),
            "tasks/result must carry related-task _meta: {result}"
        );
    }
}

/// Checks a 2025 server-sent notification or request.
pub fn check_notification(version: &str, msg: &Value) {
    let _ = version;
    assert_valid("JSONRPCMessage", msg);
    let def = match msg["method"].as_str().unwrap_or("") {
        "notifications/progress" => "ProgressNotification",
        "notifications/tasks/status" => "TaskStatusNotification",
        "notifications/message" => "LoggingMessageNotification",
        "notifications/resources/updated" => "ResourceUpdatedNotification",
        "elicitation/create" => "ElicitRequest",
        "sampling/createMessage" => "CreateMessageRequest",
        other => panic!("unexpected server message {other}: {msg}"),
    };
    assert_valid(def, msg);
    if msg.get("id").is_some() {
        assert_valid("ServerRequest", msg);
        assert!(
            msg["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"].is_string()
                || msg["params"]["_meta"].is_null(),
            "a task's request carries related-task _meta (R32): {msg}"
        );
    } else {
        assert_valid("ServerNotification", msg);
    }
}

/// Checks a reply of the 2026-07-28 wire (with the tasks extension) to `method`.
pub fn check_reply_2026(method: &str, reply: &Value) {
    assert_valid_in("2026-07-28", "JSONRPCMessage", reply);
    if reply.get("error").is_some() {
        assert_valid_in("2026-07-28", "JSONRPCErrorResponse", reply);
        return;
    }
    let result = &reply["result"];
    assert!(
        result["resultType"].is_string(),
        "every 2026-07-28 result has resultType: {result}"
    );
    let (doc, def) = match (method, result["resultType"].as_str().unwrap_or("")) {
        (_, "input_required") => ("2026-07-28", "InputRequiredResult"),
        ("tools/call", "task") => ("ext-tasks", "CreateTaskResult"),
        ("tools/call", _) => ("2026-07-28", "CallToolResult"),
        ("server/discover", _) => ("2026-07-28", "DiscoverResult"),
        ("tools/list", _) => ("2026-07-28", "ListToolsResult"),
        ("tasks/get", _) => ("ext-tasks", "GetTaskResult"),
        ("tasks/update", _) => ("ext-tasks", "UpdateTaskResult"),
        ("tasks/cancel", _) => ("ext-tasks", "CancelTaskResult"),
        ("resources/list", _) => ("2026-07-28", "ListResourcesResult"),
        ("resources/read", _) => ("2026-07-28", "ReadResourceResult"),
        ("resources/templates/list", _) => ("2026-07-28", "ListResourceTemplatesResult"),
        ("prompts/list", _) => ("2026-07-28", "ListPromptsResult"),
        ("prompts/get", _) => ("2026-07-28", "GetPromptResult"),
        ("completion/complete", _) => ("2026-07-28", "CompleteResult"),
        _ => ("2026-07-28", "Result"),
    };
    assert_valid_in(doc, def, result);
}

/// Checks a notification of the 2026-07-28 wire.
pub fn check_notification_2026(msg: &Value) {
    assert_valid_in("2026-07-28", "JSONRPCMessage", msg);
    assert!(
        msg.get("id").is_none(),
        "the 2026-07-28 server sends no requests: {msg}"
    );
    match msg["method"].as_str().unwrap_or("") {
        "notifications/tasks" => assert_valid_in("ext-tasks", "TaskStatusNotification", msg),
        "notifications/subscriptions/acknowledged" => {
            assert_valid_in("2026-07-28", "SubscriptionsAcknowledgedNotification", msg)
        }
        "notifications/progress" => assert_valid_in("2026-07-28", "ProgressNotification", msg),
        "notifications/message" => assert_valid_in("2026-07-28", "LoggingMessageNotification", msg),
        other => panic!("unexpected 2026 notification {other}: {msg}"),
    }
}
