//! How MCP 2025-11-25 shows a task. The only place that knows this era's mapping rules.
//!
//! Invariant: a tool result with `isError: true` is stored as `completed` (era-agnostic) and shown here
//! as `failed`, as SEP-1686 requires; `tasks/result` still returns that result as a success.

use mcp_tasks_engine::{format_rfc3339, Outcome, TaskRecord, TaskStatus};
use mcp_tasks_protocol::jsonrpc::ErrorObject;
use mcp_tasks_protocol::mcp_2025::Task;
use mcp_tasks_protocol::meta::RELATED_TASK;
use serde_json::{json, Map, Value};

/// The status this era reports for a record.
pub fn status(rec: &TaskRecord) -> &'static str {
    match (&rec.status, &rec.outcome) {
        (TaskStatus::Completed, Some(Outcome::Result { is_error: true, .. })) => "failed",
        (s, _) => s.as_str(),
    }
}

/// The `Task` object.
pub fn task(rec: &TaskRecord) -> Task {
    Task {
        task_id: rec.id.clone(),
        status: status(rec).to_string(),
        status_message: rec
            .status_message
            .clone()
            .or_else(|| rec.progress_message.clone()),
        created_at: format_rfc3339(rec.created_at),
        last_updated_at: format_rfc3339(rec.updated_at),
        ttl: rec.ttl_ms,
        poll_interval: rec.poll_interval_ms,
        progress: rec.progress,
        progress_total: rec.progress_total,
    }
}

/// The task as a flat result object (`GetTaskResult`, `CancelTaskResult`, status notification params).
pub fn task_object(rec: &TaskRecord) -> Value {
    Value::Object(task(rec).to_object())
}

/// `_meta` with the related-task key.
pub fn related_meta(task_id: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(RELATED_TASK.into(), json!({"taskId": task_id}));
    m
}

/// What `tasks/result` returns for a terminal task: exactly what the original request would have
/// returned, tagged with the related task.
pub fn payload(rec: &TaskRecord) -> Result<Value, ErrorObject> {
    match &rec.outcome {
        Some(Outcome::Result { value, .. }) => {
            let mut v = value.clone();
            if let Value::Object(obj) = &mut v {
                let meta = obj.entry("_meta").or_insert_with(|| json!({}));
                if let Value::Object(meta) = meta {
                    meta.extend(related_meta(&rec.id));
                }
            }
            Ok(v)
        }
        Some(Outcome::Error {
            code,
            message,
            data,
        }) => Err(ErrorObject {
            code: *code,
            message: message.clone(),
            data: data.clone(),
        }),
        None if rec.status == TaskStatus::Cancelled => Err(ErrorObject::internal(
            "Task was cancelled",
        )
        .with_data(
            json!({"taskId": rec.id, "status": "cancelled", "statusMessage": rec.status_message}),
        )),
        None => Err(ErrorObject::internal("Task has no result")),
    }
}
