//! Task-related shapes of MCP 2025-11-25 (SEP-1686), named as in the official schema.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `Tool.execution.taskSupport`: whether a tool may, must, or must not be called as a task.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskSupport {
    /// Never a task (the default when absent). A task-augmented call gets -32601.
    #[default]
    Forbidden,
    /// Either a task or a normal call.
    Optional,
    /// Only a task. A normal call gets -32601.
    Required,
}

impl TaskSupport {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskSupport::Forbidden => "forbidden",
            TaskSupport::Optional => "optional",
            TaskSupport::Required => "required",
        }
    }
}

/// A task as MCP 2025-11-25 shows it (`Task`). `ttl` is always serialized: `null` means unlimited.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// The server-generated id.
    pub task_id: String,
    /// `working`, `input_required`, `completed`, `failed` or `cancelled`.
    pub status: String,
    /// A human-readable note on the current state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// RFC 3339 creation time.
    pub created_at: String,
    /// RFC 3339 time of the last change.
    pub last_updated_at: String,
    /// Retention from creation in milliseconds; `None` (serialized `null`) is unlimited.
    pub ttl: Option<u64>,
    /// Suggested delay between polls, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_interval: Option<u64>,
    /// Work done so far, when the tool reports progress ("Tasks are Progress" proposal).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<f64>,
    /// Total work, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress_total: Option<f64>,
}

impl Task {
    /// The task as a JSON object (for flat results such as `GetTaskResult`).
    pub fn to_object(&self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        }
    }
}

/// `TaskMetadata`: the `task` field of a task-augmented request.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskMetadata {
    /// Requested retention from creation, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u64>,
}
