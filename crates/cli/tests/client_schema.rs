//! Every message the client sends, on both wires, validated against the official JSON schemas:
//! the CLI drives a stdio server through `tee`, which keeps a copy of each line the client wrote.

mod common;

#[path = "../../server/tests/support/schema.rs"]
#[allow(dead_code)]
mod schema;

use common::bin;
use serde_json::Value;
use std::process::{Command, Stdio};

const WIRES: [&[&str]; 2] = [&[], &["--no-2026"]];

/// The schema definition a client message must match: `(schema, $def)`.
fn def_of(msg: &Value) -> (&'static str, &'static str) {
    let modern = msg["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == "2026-07-28";
    let method = msg.get("method").and_then(Value::as_str);
    let is_request = msg.get("id").is_some();
    match (modern, method, is_request) {
        // A response to the server (2025 questions on a stream, and the tasks the client runs for it).
        (_, None, _) => ("2025-11-25", "JSONRPCResultResponse"),
        (true, Some("server/discover"), _) => ("2026-07-28", "DiscoverRequest"),
        (true, Some("tools/list"), _) => ("2026-07-28", "ListToolsRequest"),
        (true, Some("tools/call"), _) => ("2026-07-28", "CallToolRequest"),
        (true, Some("subscriptions/listen"), _) => ("2026-07-28", "SubscriptionsListenRequest"),
        (true, Some("tasks/get"), _) => ("ext-tasks", "GetTaskRequest"),
        (true, Some("tasks/update"), _) => ("ext-tasks", "UpdateTaskRequest"),
        (true, Some("tasks/cancel"), _) => ("ext-tasks", "CancelTaskRequest"),
        (false, Some("initialize"), _) => ("2025-11-25", "InitializeRequest"),
        (false, Some("notifications/initialized"), _) => ("2025-11-25", "InitializedNotification"),
        (false, Some("tools/list"), _) => ("2025-11-25", "ListToolsRequest"),
        (false, Some("tools/call"), _) => ("2025-11-25", "CallToolRequest"),
        (false, Some("tasks/get"), _) => ("2025-11-25", "GetTaskRequest"),
        (false, Some("tasks/result"), _) => ("2025-11-25", "GetTaskPayloadRequest"),
        (false, Some("tasks/cancel"), _) => ("2025-11-25", "CancelTaskRequest"),
        (false, Some("tasks/list"), _) => ("2025-11-25", "ListTasksRequest"),
        (m, Some(other), r) => panic!(
            "the client sent an unexpected message ({other}, 2026: {m}, request: {r}): {msg}"
        ),
    }
}

#[test]
fn every_message_the_client_sends_matches_the_schema() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sent.jsonl");
    let server = format!(
        "sh -c 'tee -a {} | {} serve --stdio --demo --store memory:'",
        log.display(),
        bin().display()
    );
    let state = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(bin())
            .args(args)
            .env("XDG_STATE_HOME", state.path())
            .env("RUST_LOG", "error")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.code().is_some_and(|c| c <= 3),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    let sampler = r#"cat >/dev/null; echo '{"role":"assistant","content":{"type":"text","text":"ok"},"model":"m"}'"#;
    for wire in WIRES {
        let with = |rest: &[&str]| {
            let mut v: Vec<&str> = rest.to_vec();
            v.extend_from_slice(&["--stdio", &server]);
            v.extend_from_slice(wire);
            run(&v)
        };
        with(&["tools"]);
        with(&[
            "call",
            "slow_compute",
            "seconds=1",
            "label=x",
            "--ttl",
            "60",
        ]);
        with(&["call", "greet", "name=Ann"]);
        with(&[
            "call",
            "confirm_delete",
            "filename=a",
            "--answer",
            "confirm=yes",
        ]);
        with(&[
            "call",
            "write_haiku",
            "topic=x",
            "--sampling-command",
            sampler,
        ]);
        with(&[
            "call",
            "multi_input",
            "--answer",
            "name=A",
            "--answer",
            "color=b",
        ]);
        with(&[
            "call",
            "test_input_required_result_elicitation",
            "--answer",
            "user_name=Ann",
        ]);
        with(&["call", "slow_compute", "seconds=1", "--no-task"]);
        with(&["call", "failing_job"]);
    }
    let sent = std::fs::read_to_string(&log).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for line in sent.lines().filter(|l| !l.trim().is_empty()) {
        let msg: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        let (doc, def) = def_of(&msg);
        schema::assert_valid_in(doc, def, &msg);
        if doc != "ext-tasks" {
            schema::assert_valid_in(doc, "JSONRPCMessage", &msg);
        }
        seen.insert(format!("{doc} {def}"));
        // What a response carries: a question's answer, or one about a task the client runs.
        if let Some(result) = msg.get("result") {
            let kind = if result.get("task").is_some() {
                "CreateTaskResult"
            } else if result.get("taskId").is_some() {
                "GetTaskResult"
            } else if result.get("action").is_some() {
                "ElicitResult"
            } else if result.get("model").is_some() {
                "CreateMessageResult"
            } else {
                panic!("a response of unknown kind: {msg}")
            };
            schema::assert_valid_in("2025-11-25", kind, result);
            seen.insert(format!("result {kind}"));
        }
    }
    // The scenario reached every kind of message it is meant to check.
    for want in [
        "2026-07-28 DiscoverRequest",
        "2026-07-28 CallToolRequest",
        "ext-tasks GetTaskRequest",
        "ext-tasks UpdateTaskRequest",
        "2026-07-28 SubscriptionsListenRequest",
        "2025-11-25 InitializeRequest",
        "2025-11-25 CallToolRequest",
        "2025-11-25 GetTaskPayloadRequest",
        "2025-11-25 JSONRPCResultResponse",
        // Our server asks a 2025 client that hosts tasks its questions as tasks.
        "result CreateTaskResult",
        "result GetTaskResult",
        "result ElicitResult",
        "result CreateMessageResult",
    ] {
        assert!(seen.contains(want), "no {want} was sent; seen: {seen:?}");
    }
}
