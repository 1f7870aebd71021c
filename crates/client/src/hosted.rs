//! The receiver side of 2025-11-25 tasks: a server may ask its question (`elicitation/create`,
//! `sampling/createMessage`) as a task; the client then answers at once with a `CreateTaskResult`,
//! works out the answer in the background (the input handler), and serves `tasks/get`,
//! `tasks/result`, `tasks/list` and `tasks/cancel` about it.

use mcp_tasks_protocol::jsonrpc::ErrorObject;
use mcp_tasks_protocol::meta;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::input::{self, InputHandler};

/// Poll interval the client suggests for its own tasks.
const POLL_MS: u64 = 500;
/// Tasks kept at most (the oldest finished ones go first).
const MAX_TASKS: usize = 1000;

struct Entry {
    task: Map<String, Value>,
    created: u128,
    outcome: Option<Result<Value, ErrorObject>>,
    abort: Option<tokio::task::AbortHandle>,
}

/// The tasks this client runs for a server.
#[derive(Default)]
pub(crate) struct Hosted {
    tasks: Mutex<HashMap<String, Entry>>,
    changed: tokio::sync::Notify,
}

fn now() -> (u128, String) {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_millis(), rfc3339(d))
}

/// RFC 3339 in UTC with milliseconds, from a time since the epoch.
fn rfc3339(d: Duration) -> String {
    let secs = d.as_secs();
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

fn unknown(id: &str) -> ErrorObject {
    ErrorObject::invalid_params(format!("no task {id:?} on this client"))
}

fn task_id(params: &Value) -> Result<String, ErrorObject> {
    params
        .get("taskId")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| ErrorObject::invalid_params("taskId (a string) is required"))
}

impl Hosted {
    /// Starts answering `method` (`params` carries the `task` field) as a task; returns the
    /// `CreateTaskResult`.
    pub(crate) fn create(
        self: &Arc<Self>,
        input: Arc<dyn InputHandler>,
        method: &str,
        mut params: Value,
    ) -> Value {
        let ttl = params.pointer("/task/ttl").and_then(Value::as_u64);
        if let Some(p) = params.as_object_mut() {
            p.remove("task");
        }
        let id = format!("{:032x}", rand::random::<u128>());
        let (ms, at) = now();
        let mut task = Map::new();
        task.insert("taskId".into(), json!(id));
        task.insert("status".into(), json!("working"));
        task.insert("createdAt".into(), json!(at));
        task.insert("lastUpdatedAt".into(), json!(at));
        task.insert("ttl".into(), json!(ttl));
        task.insert("pollInterval".into(), json!(POLL_MS));
        let created = json!({"task": task.clone()});
        {
            let mut g = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
            if g.len() >= MAX_TASKS {
                let oldest = g
                    .iter()
                    .filter(|(_, e)| e.outcome.is_some())
                    .min_by_key(|(_, e)| e.created)
                    .map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    g.remove(&k);
                }
            }
            g.insert(
                id.clone(),
                Entry {
                    task,
                    created: ms,
                    outcome: None,
                    abort: None,
                },
            );
        }
        let me = self.clone();
        let method = method.to_string();
        let task_id = id.clone();
        let handle = tokio::spawn(async move {
            let outcome = input::answer(&*input, &method, &params).await;
            me.finish(&task_id, outcome);
        });
        if let Some(e) = self
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&id)
        {
            e.abort = Some(handle.abort_handle());
        }
        created
    }

    fn finish(&self, id: &str, outcome: Result<Value, ErrorObject>) {
        let mut g = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = g.get_mut(id) {
            if e.outcome.is_none() {
                let status = if outcome.is_ok() {
                    "completed"
                } else {
                    "failed"
                };
                e.task.insert("status".into(), json!(status));
                if let Err(err) = &outcome {
                    e.task.insert("statusMessage".into(), json!(err.message));
                }
                e.task.insert("lastUpdatedAt".into(), json!(now().1));
                e.outcome = Some(outcome);
            }
        }
        drop(g);
        self.changed.notify_waiters();
    }

    /// Answers one of the task requests a server sends about this client's tasks.
    pub(crate) async fn serve(&self, method: &str, params: &Value) -> Result<Value, ErrorObject> {
        match method {
            "tasks/get" => {
                let id = task_id(params)?;
                let g = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
                g.get(&id)
                    .map(|e| Value::Object(e.task.clone()))
                    .ok_or_else(|| unknown(&id))
            }
            "tasks/list" => {
                let g = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
                let mut all: Vec<&Entry> = g.values().collect();
                all.sort_by_key(|e| e.created);
                Ok(
                    json!({"tasks": all.iter().map(|e| Value::Object(e.task.clone())).collect::<Vec<_>>()}),
                )
            }
            "tasks/cancel" => {
                let id = task_id(params)?;
                let task = {
                    let mut g = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
                    let e = g.get_mut(&id).ok_or_else(|| unknown(&id))?;
                    if e.outcome.is_some() {
                        return Err(ErrorObject::invalid_params(format!(
                            "task {id:?} already ended ({}); it cannot be cancelled",
                            e.task["status"].as_str().unwrap_or("?")
                        )));
                    }
                    if let Some(a) = e.abort.take() {
                        a.abort();
                    }
                    e.task.insert("status".into(), json!("cancelled"));
                    e.task.insert("lastUpdatedAt".into(), json!(now().1));
                    e.outcome = Some(Err(ErrorObject::new(-32800, "the request was cancelled")));
                    e.task.clone()
                };
                self.changed.notify_waiters();
                Ok(Value::Object(task))
            }
            "tasks/result" => {
                let id = task_id(params)?;
                loop {
                    let wake = self.changed.notified();
                    {
                        let g = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
                        let e = g.get(&id).ok_or_else(|| unknown(&id))?;
                        if let Some(outcome) = &e.outcome {
                            let mut r = outcome.clone()?;
                            if let Some(o) = r.as_object_mut() {
                                o.insert(
                                    "_meta".into(),
                                    json!({meta::RELATED_TASK: {"taskId": id}}),
                                );
                            }
                            return Ok(r);
                        }
                    }
                    wake.await;
                }
            }
            m => Err(ErrorObject::method_not_found(m)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339() {
        assert_eq!(
            rfc3339(Duration::from_millis(0)),
            "1970-01-01T00:00:00.000Z"
        );
        assert_eq!(
            rfc3339(Duration::from_millis(1_795_000_000_123)),
            "2026-11-18T11:06:40.123Z"
        );
        assert_eq!(
            rfc3339(Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00.000Z"
        );
    }

    /// Asserts `v` matches `$defs/def` of the official 2025-11-25 schema.
    fn assert_schema(def: &str, v: &Value) {
        let mut doc: Value = serde_json::from_str(include_str!(
            "../../protocol/schemas/2025-11-25/schema.json"
        ))
        .unwrap();
        doc["$ref"] = json!(format!("#/$defs/{def}"));
        let validator = jsonschema::validator_for(&doc).unwrap();
        let errors: Vec<String> = validator.iter_errors(v).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{def}: {errors:?}: {v}");
    }

    #[tokio::test]
    async fn a_hosted_question_is_a_task_with_its_answer_as_result() {
        let hosted = Arc::new(Hosted::default());
        let created = hosted.create(
            Arc::new(crate::NoInput),
            "elicitation/create",
            json!({"message": "ok?", "requestedSchema": {"type": "object"}, "task": {"ttl": 5000}}),
        );
        assert_schema("CreateTaskResult", &created);
        let id = created["task"]["taskId"].as_str().unwrap().to_string();
        assert_eq!(created["task"]["status"], "working");
        assert_eq!(created["task"]["ttl"], 5000);
        let r = hosted
            .serve("tasks/result", &json!({"taskId": id}))
            .await
            .unwrap();
        assert_schema("ElicitResult", &r);
        assert_eq!(r["action"], "decline");
        assert_eq!(r["_meta"][meta::RELATED_TASK]["taskId"], id.as_str());
        let t = hosted
            .serve("tasks/get", &json!({"taskId": id}))
            .await
            .unwrap();
        assert_schema("GetTaskResult", &t);
        assert_eq!(t["status"], "completed");
        let e = hosted
            .serve("tasks/cancel", &json!({"taskId": id}))
            .await
            .unwrap_err();
        assert_eq!(e.code, -32602);
        let l = hosted.serve("tasks/list", &json!({})).await.unwrap();
        assert_schema("ListTasksResult", &l);
        assert_eq!(l["tasks"].as_array().unwrap().len(), 1);
        assert!(hosted
            .serve("tasks/get", &json!({"taskId": "nope"}))
            .await
            .is_err());
        // Sampling refused by the handler: the task fails with the refusal as its error.
        let created = hosted.create(
            Arc::new(crate::NoInput),
            "sampling/createMessage",
            json!({"task": {}}),
        );
        let id = created["task"]["taskId"].as_str().unwrap().to_string();
        let e = hosted
            .serve("tasks/result", &json!({"taskId": id}))
            .await
            .unwrap_err();
        assert!(e.message.contains("sampling refused"), "{}", e.message);
        // A running one is cancelled: its state says so, its result is the cancellation.
        struct Never;
        impl InputHandler for Never {
            fn elicit<'a>(&'a self, _: &'a Value) -> futures::future::BoxFuture<'a, Value> {
                Box::pin(futures::future::pending())
            }
        }
        let created = hosted.create(Arc::new(Never), "elicitation/create", json!({"task": {}}));
        let id = created["task"]["taskId"].as_str().unwrap().to_string();
        let c = hosted
            .serve("tasks/cancel", &json!({"taskId": id}))
            .await
            .unwrap();
        assert_schema("CancelTaskResult", &c);
        assert_eq!(c["status"], "cancelled");
        assert!(hosted
            .serve("tasks/result", &json!({"taskId": id}))
            .await
            .is_err());
    }
}
