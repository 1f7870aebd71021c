//! How MCP 2026-07-28 with the tasks extension (SEP-2663) shows a task. The only place that knows this
//! era's shapes: flat `CreateTaskResult` with `resultType: "task"`, `ttlMs` / `pollIntervalMs`, and the
//! `DetailedTask` of `tasks/get` with `result` / `error` / `inputRequests` inline.
//!
//! Invariant: a tool result with `isError: true` is `completed` here (the record's own status).

use mcp_tasks_engine::{format_rfc3339, InputRecord, Outcome, TaskRecord, TaskStatus};
use serde_json::{json, Map, Value};

/// The `Task` fields of this era.
pub fn task_fields(rec: &TaskRecord) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("taskId".into(), json!(rec.id));
    m.insert("status".into(), json!(rec.status.as_str()));
    // A progress note stands in for a status message the tool did not set (Tasks are Progress).
    if let Some(msg) = rec
        .status_message
        .as_ref()
        .or(rec.progress_message.as_ref())
    {
        m.insert("statusMessage".into(), json!(msg));
    }
    m.insert("createdAt".into(), json!(format_rfc3339(rec.created_at)));
    m.insert(
        "lastUpdatedAt".into(),
        json!(format_rfc3339(rec.updated_at)),
    );
    // Always present: null means unlimited.
    m.insert("ttlMs".into(), json!(rec.ttl_ms));
    if let Some(p) = rec.poll_interval_ms {
        m.insert("pollIntervalMs".into(), json!(p.max(1)));
    }
    // Tasks are Progress: the extension's task allows extra fields.
    if let Some(p) = rec.progress {
        m.insert("progress".into(), json!(p));
    }
    if let Some(t) = rec.progress_total {
        m.insert("progressTotal".into(), json!(t));
    }
    m
}

/// `CreateTaskResult`: the task, flat, with `resultType: "task"`.
pub fn create_result(rec: &TaskRecord) -> Map<String, Value> {
    let mut m = task_fields(rec);
    m.insert("resultType".into(), json!("task"));
    m
}

/// The `DetailedTask` of `tasks/get` and `notifications/tasks`: the task plus what its status carries.
/// `pending` are the task's unanswered input requests (used when it is `input_required`).
pub fn detailed(rec: &TaskRecord, pending: &[InputRecord]) -> Map<String, Value> {
    let mut m = task_fields(rec);
    match (rec.status, &rec.outcome) {
        (TaskStatus::Completed, Some(Outcome::Result { value, .. })) => {
            // Exactly what the plain call would have returned, which carries its result type.
            let mut result = value.clone();
            if let Value::Object(r) = &mut result {
                r.entry("resultType").or_insert_with(|| json!("complete"));
            }
            m.insert("result".into(), result);
        }
        (
            TaskStatus::Failed,
            Some(Outcome::Error {
                code,
                message,
                data,
            }),
        ) => {
            let mut e = json!({"code": code, "message": message});
            if let Some(d) = data {
                e["data"] = d.clone();
            }
            m.insert("error".into(), e);
        }
        (TaskStatus::Failed, _) => {
            let message = rec
                .status_message
                .clone()
                .unwrap_or_else(|| "the task failed".into());
            m.insert("error".into(), json!({"code": -32603, "message": message}));
        }
        (TaskStatus::InputRequired, _) => {
            m.insert(
                "inputRequests".into(),
                Value::Object(input_requests(pending)),
            );
        }
        _ => {}
    }
    m
}

/// The `InputRequests` map: key → `{method, params}`.
pub fn input_requests(pending: &[InputRecord]) -> Map<String, Value> {
    pending
        .iter()
        .filter(|i| i.response.is_none())
        .map(|i| {
            (
                i.key.clone(),
                json!({"method": i.method, "params": i.params}),
            )
        })
        .collect()
}
