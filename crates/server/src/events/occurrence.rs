//! What an event carries on the wire: an `EventOccurrence` (`{eventId, name, timestamp, data,
//! cursor}`), the same in a webhook's body and in a poll's page. A task event's `data` is rendered
//! from the task as the event found it (the store keeps an `EventSnapshot`); a tool's event
//! carries the payload it was published with.
//!
//! ```json
//! {"eventId": "evt_…", "name": "task.finished", "timestamp": "2026-12-02T10:00:00.000Z",
//!  "data": {"taskId": "…", "tool": "slow_compute", "status": "completed",
//!           "result": {"content": […], "isError": false}},
//!  "cursor": "c0.2a"}
//! ```

use mcp_tasks_engine::events::{StoredEvent, TASK_FINISHED, TASK_INPUT_REQUIRED};
use mcp_tasks_engine::webhook::EventSnapshot;
use mcp_tasks_engine::{format_rfc3339, InputRecord, Outcome};
use serde_json::{json, Map, Value};
use std::sync::Arc;

use super::MAX_BODY_BYTES;

/// Renders a task's pending input requests as the `inputRequests` of `task.input_required` (the
/// 2026-07-28 shape; handed down by the wire layer, which owns that shape).
pub type InputRenderer = Arc<dyn Fn(&[InputRecord]) -> Map<String, Value> + Send + Sync>;

/// The occurrence of `event`, with `cursor` as its watermark; `pending` are its task's input
/// requests now (read for `task.input_required` only). `None` when the stored data cannot be
/// read (a store written by another build).
pub fn render(
    event: &StoredEvent,
    cursor: Option<String>,
    pending: &[InputRecord],
    inputs: &InputRenderer,
) -> Option<Value> {
    let e = &event.event;
    let data = match e.name.as_str() {
        TASK_FINISHED | TASK_INPUT_REQUIRED => task_data(event, pending, inputs)?,
        _ => serde_json::from_str::<Value>(&e.data).ok()?,
    };
    let mut occurrence = json!({
        "eventId": e.id,
        "name": e.name,
        "timestamp": format_rfc3339(e.created_at),
        "data": data,
    });
    occurrence["cursor"] = cursor.map_or(Value::Null, Value::String);
    // A result too large for one body is left out: the receiver fetches it from the task.
    if occurrence.to_string().len() > MAX_BODY_BYTES {
        if let Some(d) = occurrence["data"].as_object_mut() {
            if d.remove("result").is_some() {
                d.insert("resultOmitted".into(), json!(true));
            }
        }
    }
    Some(occurrence)
}

fn task_data(
    event: &StoredEvent,
    pending: &[InputRecord],
    inputs: &InputRenderer,
) -> Option<Value> {
    let seen: EventSnapshot = serde_json::from_str(&event.event.data).ok()?;
    let mut data = Map::new();
    data.insert("taskId".into(), json!(seen.task_id));
    data.insert("tool".into(), json!(seen.tool));
    if event.event.name == TASK_INPUT_REQUIRED {
        let asked = inputs(pending);
        if !asked.is_empty() {
            data.insert("inputRequests".into(), Value::Object(asked));
        }
        return Some(Value::Object(data));
    }
    // A result that reports a tool error is a failure, as operators count it.
    let status = match &seen.outcome {
        Some(Outcome::Result { is_error: true, .. }) => "failed",
        _ => seen.status.as_str(),
    };
    data.insert("status".into(), json!(status));
    if let Some(m) = &seen.status_message {
        data.insert("statusMessage".into(), json!(m));
    }
    if seen.result_omitted {
        data.insert("resultOmitted".into(), json!(true));
    }
    match seen.outcome {
        Some(Outcome::Result { value, .. }) => {
            data.insert("result".into(), value);
        }
        Some(Outcome::Error {
            code,
            message,
            data: details,
        }) => {
            let mut error = json!({"code": code, "message": message});
            if let Some(d) = details {
                error["data"] = d;
            }
            data.insert("error".into(), error);
        }
        None => {}
    }
    Some(Value::Object(data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_tasks_engine::events::{EventPosition, NewEvent};
    use mcp_tasks_engine::TaskStatus;

    fn finished(outcome: Option<Outcome>) -> StoredEvent {
        let seen = EventSnapshot {
            task_id: "t1".into(),
            tool: "slow".into(),
            status: TaskStatus::Completed,
            status_message: None,
            progress: None,
            progress_total: None,
            progress_message: None,
            attempt: 1,
            created_at: 1_000,
            updated_at: 4_000,
            outcome,
            result_omitted: false,
        };
        let mut e = NewEvent::new(TASK_FINISHED, &json!({}));
        e.data = serde_json::to_string(&seen).unwrap();
        e.created_at = 4_000;
        StoredEvent {
            position: EventPosition { major: 0, minor: 7 },
            event: e,
        }
    }

    fn no_inputs() -> InputRenderer {
        Arc::new(|_| Map::new())
    }

    #[test]
    fn a_finished_task_carries_its_result_or_error() {
        let ok = finished(Some(Outcome::Result {
            value: json!({"content": [], "isError": false}),
            is_error: false,
        }));
        let o = render(&ok, Some("c0.7".into()), &[], &no_inputs()).unwrap();
        assert_eq!(o["eventId"], json!(ok.event.id));
        assert_eq!(o["name"], "task.finished");
        assert_eq!(o["timestamp"], "1970-01-01T00:00:04.000Z");
        assert_eq!(o["cursor"], "c0.7");
        assert_eq!(o["data"]["status"], "completed");
        assert_eq!(o["data"]["result"]["isError"], false);
        let tool_error = finished(Some(Outcome::Result {
            value: json!({"content": [], "isError": true}),
            is_error: true,
        }));
        let o = render(&tool_error, None, &[], &no_inputs()).unwrap();
        assert_eq!(o["data"]["status"], "failed");
        assert_eq!(o["cursor"], Value::Null);
        let err = finished(Some(Outcome::Error {
            code: -32603,
            message: "boom".into(),
            data: None,
        }));
        let o = render(&err, None, &[], &no_inputs()).unwrap();
        assert_eq!(
            o["data"]["error"],
            json!({"code": -32603, "message": "boom"})
        );
    }

    #[test]
    fn a_result_too_large_for_one_body_is_left_out() {
        let big = finished(Some(Outcome::Result {
            value: json!({"content": [{"type": "text", "text": "x".repeat(200 * 1024)}], "pad": "y".repeat(60 * 1024)}),
            is_error: false,
        }));
        let o = render(&big, None, &[], &no_inputs()).unwrap();
        assert_eq!(o["data"]["resultOmitted"], true);
        assert!(o["data"].get("result").is_none());
        assert!(o.to_string().len() <= MAX_BODY_BYTES);
    }
}
