//! How the engine's outcomes read on the wire: the error a failure the engine detects itself carries
//! (JSON-RPC internal error), and the status message drawn from a tool result that reports an error.

use mcp_tasks_engine::{Outcome, OutcomeRules};
use mcp_tasks_protocol::error_codes;
use serde_json::Value;

/// The outcome of a failure detected outside the handler's own result (a panic, an interruption).
pub(crate) fn failure(message: String) -> Outcome {
    Outcome::Error {
        code: error_codes::INTERNAL_ERROR,
        message,
        data: None,
    }
}

/// The status message of a task whose result reports a tool error: the start of its first text block.
pub(crate) fn error_summary(value: &Value) -> Option<String> {
    let text = value
        .get("content")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find_map(|b| b.get("text").and_then(Value::as_str)))
        .unwrap_or("the tool reported an error");
    let mut s: String = text.chars().take(300).collect();
    if s.len() < text.len() {
        s.push('…');
    }
    Some(s)
}

/// The rules the engine words its own outcomes by, on every wire this server speaks.
pub(crate) struct WireRules;

impl OutcomeRules for WireRules {
    fn failure(&self, message: String) -> Outcome {
        failure(message)
    }
    fn error_summary(&self, result: &Value) -> Option<String> {
        error_summary(result)
    }
}
