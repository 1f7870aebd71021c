//! The body of a webhook: one shape whatever wire form the task was created on.
//!
//! ```json
//! {"type": "task.completed", "timestamp": "2026-11-27T10:00:00.000Z",
//!  "data": {"taskId": "…", "tool": "slow_compute", "status": "completed",
//!           "statusMessage": "…", "progress": 10, "progressTotal": 10,
//!           "progressMessage": "…", "attempt": 1,
//!           "createdAt": "…", "updatedAt": "…",
//!           "result": {"content": […], "isError": false}}}
//! ```
//!
//! `task.progress` (sent only to a target that lists it, at most once per
//! `[webhooks] progress_interval_secs` of a run, the latest progress at the end of each) has the
//! same `data` with `status` `working` (or `input_required`) and no `result`.
//!
//! `result` (the tool's `CallToolResult`) comes with `task.completed`, and with `task.failed` when
//! the tool's result reports an error (`isError`: `status` is then `failed`); `error` (`{code,
//! message, data?}`) comes with `task.failed` for a JSON-RPC error; `timestamp` is when the event happened. The body is rendered from
//! what the store kept with the event, so every attempt sends the same bytes.

use mcp_tasks_engine::webhook::{EventSnapshot, OutboxEntry, WebhookEvent};
use mcp_tasks_engine::{format_rfc3339, Outcome};
use serde_json::{json, Map, Value};

/// Largest `result` sent inline; a larger one is left out (`resultOmitted: true`): the receiver
/// fetches it with `tasks/result`. The store keeps no more with the event than the body sends
/// ([`EventSnapshot`] leaves such a result out).
pub const MAX_RESULT_BYTES: usize = mcp_tasks_engine::webhook::MAX_INLINE_RESULT_BYTES;

/// The body of `entry`'s event, or why its stored snapshot cannot be read.
pub fn render(entry: &OutboxEntry) -> Result<String, serde_json::Error> {
    let seen: EventSnapshot = serde_json::from_str(&entry.snapshot)?;
    let mut data = Map::new();
    data.insert("taskId".into(), json!(seen.task_id));
    data.insert("tool".into(), json!(seen.tool));
    // A result that reports a tool error is a failure here, as operators count it.
    let status = match entry.event {
        WebhookEvent::Failed => "failed",
        _ => seen.status.as_str(),
    };
    data.insert("status".into(), json!(status));
    if let Some(m) = &seen.status_message {
        data.insert("statusMessage".into(), json!(m));
    }
    if let Some(p) = seen.progress {
        data.insert("progress".into(), json!(p));
    }
    if let Some(t) = seen.progress_total {
        data.insert("progressTotal".into(), json!(t));
    }
    if let Some(m) = &seen.progress_message {
        data.insert("progressMessage".into(), json!(m));
    }
    data.insert("attempt".into(), json!(seen.attempt));
    data.insert("createdAt".into(), json!(format_rfc3339(seen.created_at)));
    data.insert("updatedAt".into(), json!(format_rfc3339(seen.updated_at)));
    if seen.result_omitted {
        data.insert("resultOmitted".into(), json!(true));
    }
    match seen.outcome {
        Some(Outcome::Result { value, .. }) => {
            // Events kept before their snapshots left large results out hold them whole.
            if value.to_string().len() <= MAX_RESULT_BYTES {
                data.insert("result".into(), value);
            } else {
                data.insert("resultOmitted".into(), json!(true));
            }
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
    let body = json!({
        "type": entry.event.as_str(),
        "timestamp": format_rfc3339(entry.created_at),
        "data": Value::Object(data),
    });
    serde_json::to_string(&body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_tasks_engine::TaskStatus;

    fn entry(outcome: Option<Outcome>, event: WebhookEvent) -> OutboxEntry {
        let seen = EventSnapshot {
            task_id: "t1".into(),
            tool: "slow".into(),
            status: TaskStatus::Completed,
            status_message: None,
            progress: Some(3.0),
            progress_total: Some(3.0),
            progress_message: Some("3 of 3".into()),
            attempt: 1,
            created_at: 1_000,
            updated_at: 4_000,
            outcome,
            result_omitted: false,
        };
        OutboxEntry {
            id: "msg_1".into(),
            task_id: "t1".into(),
            target: 0,
            event,
            url: "https://a.example/".into(),
            secret: "whsec_x".into(),
            subscription: None,
            snapshot: serde_json::to_string(&seen).unwrap(),
            created_at: 4_000,
        }
    }

    #[test]
    fn the_body_carries_the_result_or_the_error_and_is_the_same_every_time() {
        let e = entry(
            Some(Outcome::Result {
                value: json!({"content": [], "isError": false}),
                is_error: false,
            }),
            WebhookEvent::Completed,
        );
        let body: Value = serde_json::from_str(&render(&e).unwrap()).unwrap();
        assert_eq!(body["type"], "task.completed");
        assert_eq!(body["timestamp"], "1970-01-01T00:00:04.000Z");
        assert_eq!(body["data"]["taskId"], "t1");
        assert_eq!(body["data"]["progress"], 3.0);
        assert_eq!(body["data"]["progressMessage"], "3 of 3");
        assert_eq!(body["data"]["result"]["isError"], false);
        assert_eq!(render(&e).unwrap(), render(&e).unwrap());
        let e = entry(
            Some(Outcome::Error {
                code: -32603,
                message: "boom".into(),
                data: None,
            }),
            WebhookEvent::Failed,
        );
        let body: Value = serde_json::from_str(&render(&e).unwrap()).unwrap();
        assert_eq!(
            body["data"]["error"],
            json!({"code": -32603, "message": "boom"})
        );
        let big = "x".repeat(MAX_RESULT_BYTES + 1);
        let e = entry(
            Some(Outcome::Result {
                value: json!({"content": [{"type": "text", "text": big}]}),
                is_error: false,
            }),
            WebhookEvent::Completed,
        );
        let body: Value = serde_json::from_str(&render(&e).unwrap()).unwrap();
        assert_eq!(body["data"]["resultOmitted"], true);
        assert!(body["data"].get("result").is_none());
    }

    #[test]
    fn an_event_keeps_only_the_result_its_body_sends() {
        let mut rec = mcp_tasks_engine::store::testkit::record("t1", "o", 1);
        rec.status = TaskStatus::Completed;
        let small = json!({"content": [{"type": "text", "text": "done"}]});
        let big = json!({"content": [{"type": "text", "text": "x".repeat(MAX_RESULT_BYTES)}]});
        for (value, kept) in [(small, true), (big, false)] {
            rec.outcome = Some(Outcome::Result {
                value: value.clone(),
                is_error: false,
            });
            let seen = EventSnapshot::of(&rec);
            let stored = serde_json::to_string(&seen).unwrap();
            assert_eq!(seen.result_omitted, !kept);
            assert!(
                stored.len() < MAX_RESULT_BYTES.min(value.to_string().len()) + 1_000,
                "the event keeps {} bytes for a {}-byte result",
                stored.len(),
                value.to_string().len()
            );
            let mut e = entry(None, WebhookEvent::Completed);
            e.snapshot = stored;
            let body: Value = serde_json::from_str(&render(&e).unwrap()).unwrap();
            assert_eq!(body["data"].get("result") == Some(&value), kept);
            assert_eq!(
                body["data"].get("resultOmitted") == Some(&json!(true)),
                !kept
            );
        }
    }
}
