//! A task as the client sees it on either wire: its state, how it ended, and the small reference a
//! new process resumes it from.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{ClientError, Result};
use crate::wire::Wire;

/// Where a task is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Running.
    Working,
    /// Waiting for an answer from the client (elicitation or sampling).
    InputRequired,
    /// Done; the result is ready.
    Completed,
    /// Ended with an error.
    Failed,
    /// Cancelled.
    Cancelled,
}

impl TaskStatus {
    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<TaskStatus> {
        Some(match s {
            "working" => TaskStatus::Working,
            "input_required" => TaskStatus::InputRequired,
            "completed" => TaskStatus::Completed,
            "failed" => TaskStatus::Failed,
            "cancelled" => TaskStatus::Cancelled,
            _ => return None,
        })
    }

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    /// Whether the task has ended (it never changes again).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A task's state, from `tasks/get`, a create result or a status notification, on either wire.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskState {
    /// The server's id of the task.
    pub task_id: String,
    /// Its status.
    pub status: TaskStatus,
    /// A human-readable note on the current state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// Work done so far, when the server reports progress.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<f64>,
    /// Total work, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress_total: Option<f64>,
    /// When it was created (RFC 3339), as the server says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// When it last changed (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_updated_at: Option<String>,
    /// Retention from creation in milliseconds; `None` is unlimited or unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// The delay between polls the server asks for, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_interval_ms: Option<u64>,
    /// 2026-07-28: the result, inline once completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// 2026-07-28: the error, inline once failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// 2026-07-28: the open questions, when input is required (key → `{method, params}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_requests: Option<Map<String, Value>>,
}

impl TaskState {
    /// Reads a task object of either wire (`ttl`/`pollInterval` or `ttlMs`/`pollIntervalMs`).
    pub fn from_value(v: &Value) -> Result<TaskState> {
        let o = v
            .as_object()
            .ok_or_else(|| ClientError::protocol(format!("a task must be an object, got {v}")))?;
        let task_id = o
            .get("taskId")
            .and_then(Value::as_str)
            .ok_or_else(|| ClientError::protocol(format!("a task without taskId: {v}")))?
            .to_string();
        let status_text = o.get("status").and_then(Value::as_str).unwrap_or_default();
        let status = TaskStatus::parse(status_text).ok_or_else(|| {
            ClientError::protocol(format!(
                "task {task_id}: unknown status {:?}",
                o.get("status").unwrap_or(&Value::Null)
            ))
        })?;
        let text = |k: &str| o.get(k).and_then(Value::as_str).map(str::to_string);
        let num = |a: &str, b: &str| {
            o.get(a)
                .or_else(|| o.get(b))
                .and_then(Value::as_f64)
                .filter(|f| f.is_finite() && *f >= 0.0)
        };
        Ok(TaskState {
            status,
            status_message: text("statusMessage"),
            progress: o.get("progress").and_then(Value::as_f64),
            progress_total: o.get("progressTotal").and_then(Value::as_f64),
            created_at: text("createdAt"),
            last_updated_at: text("lastUpdatedAt"),
            ttl_ms: num("ttlMs", "ttl").map(|f| f as u64),
            poll_interval_ms: num("pollIntervalMs", "pollInterval").map(|f| f as u64),
            result: o.get("result").filter(|r| r.is_object()).cloned(),
            error: o.get("error").filter(|e| e.is_object()).cloned(),
            input_requests: o.get("inputRequests").and_then(Value::as_object).cloned(),
            task_id,
        })
    }
}

/// How a task ended.
#[derive(Clone, Debug, PartialEq)]
pub enum TaskOutcome {
    /// The tool returned a result (a `CallToolResult`).
    Completed(Value),
    /// The tool returned a result that reports an error (`isError: true`).
    ToolError(Value),
    /// The task failed with a protocol error.
    Failed {
        /// The JSON-RPC error code.
        code: i64,
        /// What went wrong.
        message: String,
        /// The error's data, if any.
        data: Option<Value>,
    },
    /// The task was cancelled.
    Cancelled {
        /// The server's note, if any.
        message: Option<String>,
    },
}

impl TaskOutcome {
    /// The outcome a tool result stands for: a tool error when it says `isError: true`.
    pub fn of_result(result: Value) -> TaskOutcome {
        if result.get("isError").and_then(Value::as_bool) == Some(true) {
            TaskOutcome::ToolError(result)
        } else {
            TaskOutcome::Completed(result)
        }
    }

    /// The outcome of a 2026-07-28 `DetailedTask` that ended, from its inline result or error.
    pub(crate) fn of_detailed(state: &TaskState) -> Option<TaskOutcome> {
        match state.status {
            TaskStatus::Completed => Some(TaskOutcome::of_result(
                state.result.clone().unwrap_or(Value::Object(Map::new())),
            )),
            TaskStatus::Failed => Some(match &state.error {
                Some(e) => TaskOutcome::Failed {
                    code: e.get("code").and_then(Value::as_i64).unwrap_or(-32603),
                    message: e
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("the task failed")
                        .to_string(),
                    data: e.get("data").cloned(),
                },
                None => TaskOutcome::Failed {
                    code: -32603,
                    message: state
                        .status_message
                        .clone()
                        .unwrap_or_else(|| "the task failed".into()),
                    data: None,
                },
            }),
            TaskStatus::Cancelled => Some(TaskOutcome::Cancelled {
                message: state.status_message.clone(),
            }),
            _ => None,
        }
    }
}

/// What a new process needs to continue with a task: the server, the wire, the id, and on
/// 2025-11-25 the session (servers may bind tasks to it). Never credentials.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskRef {
    /// The server's MCP endpoint.
    pub url: String,
    /// The protocol revision the task was made on.
    pub wire: String,
    /// The task's id.
    pub task_id: String,
    /// The session (`Mcp-Session-Id`) on 2025-11-25.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The tool it runs, for people reading a list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
}

impl TaskRef {
    /// The reference as one line of JSON.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads a reference made by [`TaskRef::encode`].
    pub fn decode(text: &str) -> Result<TaskRef> {
        let r: TaskRef = serde_json::from_str(text.trim())
            .map_err(|e| ClientError::BadReference(format!("{e}")))?;
        Wire::from_version(&r.wire)
            .ok_or_else(|| ClientError::BadReference(format!("unknown wire {:?}", r.wire)))?;
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn both_wires_task_shapes_read_the_same() {
        let old = TaskState::from_value(&json!({"taskId": "t1", "status": "working",
            "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z",
            "ttl": 60000, "pollInterval": 500, "progress": 2, "progressTotal": 5}))
        .unwrap();
        let new = TaskState::from_value(&json!({"taskId": "t1", "status": "working",
            "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z",
            "ttlMs": 60000, "pollIntervalMs": 500, "progress": 2, "progressTotal": 5}))
        .unwrap();
        assert_eq!(old, new);
        assert_eq!(new.poll_interval_ms, Some(500));
        assert_eq!(new.progress_total, Some(5.0));
        assert!(TaskState::from_value(&json!({"taskId": "t", "status": "sleeping"})).is_err());
        assert!(TaskState::from_value(&json!({"status": "working"})).is_err());
        assert!(TaskState::from_value(&json!("t")).is_err());
    }

    #[test]
    fn a_detailed_task_gives_its_outcome() {
        let done = TaskState::from_value(&json!({"taskId": "t", "status": "completed",
            "result": {"content": [], "isError": true}}))
        .unwrap();
        assert!(matches!(
            TaskOutcome::of_detailed(&done),
            Some(TaskOutcome::ToolError(_))
        ));
        let failed = TaskState::from_value(&json!({"taskId": "t", "status": "failed",
            "error": {"code": -32000, "message": "boom"}}))
        .unwrap();
        assert_eq!(
            TaskOutcome::of_detailed(&failed),
            Some(TaskOutcome::Failed {
                code: -32000,
                message: "boom".into(),
                data: None
            })
        );
        let working = TaskState::from_value(&json!({"taskId": "t", "status": "working"})).unwrap();
        assert_eq!(TaskOutcome::of_detailed(&working), None);
    }

    #[test]
    fn references_round_trip_and_reject_nonsense() {
        let r = TaskRef {
            url: "http://127.0.0.1:1/mcp".into(),
            wire: "2025-11-25".into(),
            task_id: "abc".into(),
            session: Some("s1".into()),
            tool: None,
        };
        assert_eq!(TaskRef::decode(&r.encode()).unwrap(), r);
        assert!(TaskRef::decode("{}").is_err());
        assert!(TaskRef::decode(r#"{"url":"u","wire":"1999","task_id":"t"}"#).is_err());
    }
}
