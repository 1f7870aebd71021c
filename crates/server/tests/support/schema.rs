//! Validation of server messages against the official MCP JSON schemas copied into
//! `crates/protocol/schemas/` (see the README there for their origin).

use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

fn schema_doc(version: &str) -> &'static Value {
    static DOCS: OnceLock<HashMap<&'static str, Value>> = OnceLock::new();
    let docs = DOCS.get_or_init(|| {
        let mut m = HashMap::new();
        let text = include_str!("../../../protocol/schemas/2025-11-25/schema.json");
        m.insert("2025-11-25", serde_json::from_str(text).unwrap());
        m
    });
    // 2025-06-18 and 2025-03-26 messages are a subset of 2025-11-25's without task fields.
    let _ = version;
    &docs["2025-11-25"]
}

fn validator(def: &str) -> &'static jsonschema::Validator {
    static CACHE: OnceLock<Mutex<HashMap<String, &'static jsonschema::Validator>>> =
        OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut map = cache.lock().unwrap();
    if let Some(v) = map.get(def) {
        return v;
    }
    let mut doc = schema_doc("2025-11-25").clone();
    assert!(doc["$defs"].get(def).is_some(), "schema has no $defs/{def}");
    doc["$ref"] = json!(format!("#/$defs/{def}"));
    let v: &'static jsonschema::Validator =
        Box::leak(Box::new(jsonschema::validator_for(&doc).unwrap()));
    map.insert(def.to_string(), v);
    v
}

/// Asserts `value` is valid against `$defs/def`.
pub fn assert_valid(def: &str, value: &Value) {
    let v = validator(def);
    let errors: Vec<String> = v
        .iter_errors(value)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "message does not match schema $defs/{def}:\n{}\nmessage: {value}",
        errors.join("\n")
    );
}

/// Checks a reply (result or error) to `method`.
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

/// Checks a server-sent notification or request.
pub fn check_notification(version: &str, msg: &Value) {
    let _ = version;
    assert_valid("JSONRPCMessage", msg);
    let def = match msg["method"].as_str().unwrap_or("") {
        "notifications/progress" => "ProgressNotification",
        "notifications/tasks/status" => "TaskStatusNotification",
        "notifications/message" => "LoggingMessageNotification",
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
