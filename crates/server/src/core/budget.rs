//! Calls of clients that did not ask for a task, for tools with a sync budget: the call still runs
//! as a durable task; the client gets the result as a normal reply when the task finishes within
//! the budget, else a normal `CallToolResult` saying the work continues as task ID. Three plain
//! tools — `task_status`, `task_result`, `task_cancel` — let a model in any host follow it up,
//! under the same principal rules as the task methods (another principal's task is "not found").
//! The same call (tool and arguments) made again by the same caller while the first still runs,
//! within [`SAME_CALL_WINDOW`], joins that task instead of starting the work twice.

use mcp_tasks_engine::store::Lookup;
use mcp_tasks_engine::{fingerprint, Outcome, TaskEvent, TaskRecord, TaskStatus};
use mcp_tasks_protocol::jsonrpc::{ErrorObject, Message};
use mcp_tasks_protocol::meta;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use super::tasks::{Cancel, Unavailable};
use super::{calls, internal, Failure, Peer, Server, TaskStart};
use crate::core::streams::StreamSender;
use crate::tool::RegisteredTool;

/// The follow-up tools, listed for clients that speak no tasks when some tool has a sync budget.
pub(crate) const FOLLOW_UP_TOOLS: [&str; 3] = ["task_status", "task_result", "task_cancel"];

/// How long after a call the same call joins its task (while the task runs).
pub(crate) const SAME_CALL_WINDOW: Duration = Duration::from_secs(300);

/// How long `task_result` waits for a running task when no budget applies to its tool.
const DEFAULT_RESULT_WAIT: Duration = Duration::from_secs(30);

/// Renders a progress report (progress, total, message) as the call's progress notification.
pub(crate) type ProgressNote = Box<dyn Fn(f64, Option<f64>, Option<&str>) -> Message + Send + Sync>;

pub(crate) use super::events::RenderFn;

/// A plain call that runs as a task within a budget.
pub(crate) struct BudgetedCall {
    /// The tool.
    pub(crate) tool: Arc<RegisteredTool>,
    /// Its (validated, possibly prepared) arguments.
    pub(crate) arguments: Value,
    /// The tool-error result of invalid arguments (answered at once, no task).
    pub(crate) invalid: Option<Value>,
    /// The era label stored with the task.
    pub(crate) era: &'static str,
    /// Wire metadata kept with the task (without the call's progress token: the call's progress
    /// goes out here, while the call lasts, and not after).
    pub(crate) request_meta: Value,
    /// The call's progress notification (rendered by its wire), when it sent a progress token.
    pub(crate) progress: Option<ProgressNote>,
    /// How long the call waits.
    pub(crate) budget: Duration,
    /// How the task's events are rendered for its session (2025-11-25), so they go out at once:
    /// the client knows the call it made, and a question must not wait for the reply.
    pub(crate) announce_with: Option<RenderFn>,
    /// Whether the client speaks tasks: it was shown the tool's output schema, which a
    /// "continues as task" note cannot meet (for others `tools/list` leaves the schema out).
    pub(crate) speaks_tasks: bool,
}

impl Server {
    /// The sync budget that applies to a plain call of `tool`: its own, else the server's; none for
    /// tools that never run as tasks.
    pub(crate) fn sync_budget(&self, tool: &RegisteredTool) -> Option<Duration> {
        if tool.tool.task_support == mcp_tasks_protocol::mcp_2025::TaskSupport::Forbidden {
            return None;
        }
        tool.tool.sync_budget.or(self.config.sync_budget)
    }

    /// Whether the follow-up tools are offered: some tool has a sync budget.
    pub(crate) fn offers_follow_ups(&self) -> bool {
        self.config.sync_budget.is_some()
            || self
                .tools
                .all()
                .iter()
                .any(|t| t.tool.sync_budget.is_some())
    }

    /// The follow-up tools as `tools/list` entries (those whose names no tool of ours takes).
    pub(crate) fn follow_up_tools(&self) -> Vec<Value> {
        if !self.offers_follow_ups() {
            return Vec::new();
        }
        let id = json!({"type": "object", "properties": {"taskId": {
            "type": "string",
            "description": "The task ID a call's reply gave (\"continues as task ID\")."
        }}, "required": ["taskId"]});
        let entries = [
            ("task_status", "How a task started by an earlier call is going: its status, progress and status message.", true),
            ("task_result", "The result of a task started by an earlier call; waits a while if it is still running.", true),
            ("task_cancel", "Stops a task started by an earlier call.", false),
        ];
        entries
            .into_iter()
            .filter(|(name, _, _)| self.tools.get(name).is_none())
            .map(|(name, description, read_only)| {
                json!({
                    "name": name,
                    "description": description,
                    "inputSchema": id,
                    "annotations": {"readOnlyHint": read_only, "idempotentHint": true, "openWorldHint": false},
                })
            })
            .collect()
    }

    /// Runs a plain call as a task and waits up to its budget (see the module docs). Progress goes
    /// out on the call's stream while it waits; the client going away leaves the task running.
    pub(crate) async fn call_within_budget(
        self: &Arc<Self>,
        peer: &Peer,
        call: BudgetedCall,
        out: &StreamSender,
        cancel: &CancellationToken,
    ) -> Result<Value, Failure> {
        if let Some(result) = call.invalid {
            return Ok(result);
        }
        let name = call.tool.tool.name.clone();
        let same = format!(
            "{}\u{0}{}\u{0}{}",
            peer.name(),
            peer.anonymous_scope().unwrap_or_default(),
            fingerprint(&name, &call.arguments)
        );
        let joined = match self.same_calls.get(&same).map(|e| e.value().clone()) {
            Some((id, at)) if at.elapsed() < SAME_CALL_WINDOW => match self.engine.get(&id).await {
                Ok(Lookup::Found(t)) if !t.status.is_terminal() => Some(t),
                _ => None,
            },
            _ => None,
        };
        let (rec, created) = match joined {
            Some(t) => {
                tracing::info!(task = %t.id, tool = %name, "the same call joins its running task");
                (t, false)
            }
            None => {
                let start = TaskStart {
                    tool: name.clone(),
                    arguments: call.arguments,
                    era: call.era,
                    request_meta: call.request_meta,
                    ttl_ms: None,
                    idempotency_key: None,
                    key_label: "Idempotency key",
                    retain_after_finish_ms: None,
                    cancellable_by: None,
                    invalid: None,
                    // A plain call registers no webhook: only a task-augmented one does.
                    webhook: None,
                };
                let rec = self.start_task(peer, start, cancel).await?.record;
                if let Some(render) = call.announce_with {
                    // The reply comes only after the budget; the task's messages need not wait.
                    let _ = super::CREATED.try_with(|c| c.set(None));
                    self.announced(&rec.id, &render);
                    self.engine.notifier().announce(&rec.id);
                }
                self.same_calls
                    .insert(same, (rec.id.clone(), Instant::now()));
                (rec, true)
            }
        };
        let waited = tokio::select! {
            w = self.wait_within(&rec.id, call.budget, call.progress.as_ref().map(|p| (p, out))) => w?,
            () = cancel.cancelled() => {
                // The client cancelled its call: the work it started stops too.
                if created {
                    let why = "cancelled with the call that started it".to_string();
                    let _ = self.engine.cancel(&rec.id, Some(why)).await;
                }
                return Err(ErrorObject::internal("the call was cancelled").into());
            }
        };
        Ok(match waited {
            Some(done) => finished_result(&done)?,
            None => {
                let now = self.engine.get(&rec.id).await;
                let current = match now {
                    Ok(Lookup::Found(t)) => t,
                    _ => rec,
                };
                if current.status.is_terminal() {
                    finished_result(&current)?
                } else {
                    let structured = !call.speaks_tasks || call.tool.tool.output_schema.is_none();
                    continues(&name, &current, call.budget, structured)
                }
            }
        })
    }

    /// Waits up to `budget` for task `id` to finish; `None` if it still runs then. Progress goes
    /// out as the given notification on the given stream.
    async fn wait_within(
        &self,
        id: &str,
        budget: Duration,
        progress: Option<(&ProgressNote, &StreamSender)>,
    ) -> Result<Option<TaskRecord>, Failure> {
        let deadline = tokio::time::Instant::now() + budget;
        // Subscribed before the read, so no change falls between them.
        let mut events = self.engine.notifier().subscribe_task(id);
        let mut read = true;
        loop {
            if read {
                match self.engine.get(id).await.map_err(internal)? {
                    Lookup::Found(t) if t.status.is_terminal() => return Ok(Some(t)),
                    Lookup::Found(_) => {}
                    _ => return Err(ErrorObject::internal(format!("task {id} is gone")).into()),
                }
                read = false;
            }
            tokio::select! {
                e = events.recv() => match e {
                    Ok(TaskEvent::Progress { task, message, .. }) => {
                        if let (Some((note, out)), Some(p)) = (progress, task.progress) {
                            // Advisory: a full stream drops it rather than hold the wait.
                            let _ = out.try_send(note(p, task.progress_total, message.as_deref()));
                        }
                    }
                    Ok(ev) => read = ev.task().status.is_terminal() || matches!(ev, TaskEvent::Changed(_)),
                    // Missed events or a closed topic: the store has the truth.
                    Err(_) => {
                        read = true;
                        events = self.engine.notifier().subscribe_task(id);
                    }
                },
                () = tokio::time::sleep_until(deadline) => return Ok(None),
                () = self.stopping() => return Ok(None),
            }
        }
    }

    /// `task_status`, `task_result` or `task_cancel` when `params` names one of them and no tool of
    /// ours takes the name; `None` otherwise.
    pub(crate) async fn follow_up_call(
        &self,
        peer: &Peer,
        params: &Map<String, Value>,
    ) -> Option<Result<Value, Failure>> {
        let name = params.get("name")?.as_str()?;
        if !FOLLOW_UP_TOOLS.contains(&name) || self.tools.get(name).is_some() {
            return None;
        }
        if !self.offers_follow_ups() {
            return None;
        }
        let id = params
            .get("arguments")
            .and_then(|a| a.get("taskId"))
            .and_then(Value::as_str);
        let Some(id) = id else {
            return Some(Ok(tool_error(format!(
                "{name} needs the task ID: {{\"taskId\": \"…\"}} (a call's reply names it)"
            ))));
        };
        let task = match self.visible_task(peer, id, name, |_| true).await {
            Ok(t) => t,
            Err(Unavailable::NotFound) | Err(Unavailable::Expired) => {
                return Some(Ok(tool_error(format!(
                    "No task {id}: it does not exist, is not yours, or finished long enough ago to be removed"
                ))))
            }
            Err(Unavailable::Internal(f)) => return Some(Err(f)),
        };
        Some(match name {
            "task_status" => Ok(status_result(&task)),
            "task_cancel" => match self.cancel_task(&task).await {
                Ok(Cancel::Done(t)) => Ok(text_result(format!("Task {} is cancelled.", t.id), &t)),
                Ok(Cancel::AlreadyFinished(t)) => Ok(text_result(
                    format!(
                        "Task {} had already finished ({}); nothing to cancel.",
                        t.id, t.status
                    ),
                    &t,
                )),
                Err(Unavailable::Internal(f)) => Err(f),
                Err(_) => Ok(tool_error(format!("No task {id}"))),
            },
            _ => {
                let wait = self
                    .tools
                    .get(&task.tool)
                    .and_then(|t| self.sync_budget(&t))
                    .unwrap_or(DEFAULT_RESULT_WAIT);
                match self.wait_within(&task.id, wait, None).await {
                    Ok(Some(done)) => finished_result(&done),
                    Ok(None) => {
                        let now = match self.engine.get(&task.id).await {
                            Ok(Lookup::Found(t)) => t,
                            _ => task,
                        };
                        if now.status.is_terminal() {
                            finished_result(&now)
                        } else {
                            Ok(text_result(
                                format!(
                                    "Task {} is still running ({}); call task_result again for its result.",
                                    now.id,
                                    describe(&now)
                                ),
                                &now,
                            ))
                        }
                    }
                    Err(f) => Err(f),
                }
            }
        })
    }

    /// Forgets same-call entries past their window (run by the sweeper).
    pub(crate) fn forget_old_calls(&self) {
        self.same_calls
            .retain(|_, (_, at)| at.elapsed() < SAME_CALL_WINDOW);
    }
}

/// A finished task's outcome as the reply a plain call would have had.
fn finished_result(t: &TaskRecord) -> Result<Value, Failure> {
    match (&t.outcome, t.status) {
        (_, TaskStatus::Cancelled) => Ok(tool_error(format!(
            "Task {} was cancelled{}",
            t.id,
            t.status_message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ))),
        (Some(Outcome::Result { value, .. }), _) => Ok(value.clone()),
        (Some(o @ Outcome::Error { .. }), _) => calls::outcome_to_result(o.clone()),
        (None, status) => Err(ErrorObject::internal(format!(
            "task {} is {status} without an outcome",
            t.id
        ))
        .into()),
    }
}

/// The reply of a call still running when its budget ran out.
fn continues(tool: &str, t: &TaskRecord, budget: Duration, structured: bool) -> Value {
    let text = format!(
        "{tool} is still running after {} s ({}). The work continues in the background as task {id}. \
         To follow it up, call the tool task_status with {{\"taskId\": \"{id}\"}}; task_result with the \
         same argument returns the result once the work is done (it waits a while), and task_cancel \
         stops it. Calling {tool} again with the same arguments joins this task instead of starting \
         the work twice. A client that speaks MCP Events can subscribe to the task.finished event with \
         {{\"taskId\": \"{id}\"}} to be told when it ends.",
        budget.as_secs_f64(),
        describe(t),
        id = t.id
    );
    let mut r = json!({
        "content": [{"type": "text", "text": text}],
        "_meta": {meta::RELATED_TASK: {"taskId": t.id}},
    });
    // A tool with an output schema promises its own structured content; the note carries none then.
    if structured {
        r["structuredContent"] = summary(t);
    }
    r
}

/// Status, progress and message in a few words.
fn describe(t: &TaskRecord) -> String {
    let mut s = t.status.to_string();
    if let Some(p) = t.progress {
        match t.progress_total {
            Some(total) => s.push_str(&format!(", progress {p}/{total}")),
            None => s.push_str(&format!(", progress {p}")),
        }
    }
    if let Some(m) = t.status_message.as_ref().or(t.progress_message.as_ref()) {
        s.push_str(&format!(": {m}"));
    }
    s
}

/// The task as structured content.
fn summary(t: &TaskRecord) -> Value {
    let mut m = Map::new();
    m.insert("taskId".into(), json!(t.id));
    m.insert("status".into(), json!(t.status.as_str()));
    if let Some(v) = &t.status_message {
        m.insert("statusMessage".into(), json!(v));
    }
    if let Some(v) = t.progress {
        m.insert("progress".into(), json!(v));
    }
    if let Some(v) = t.progress_total {
        m.insert("total".into(), json!(v));
    }
    m.insert("tool".into(), json!(t.tool));
    if !t.status.is_terminal() {
        // What to do next, in the structured part too: some hosts hand the model only that.
        let follow = |tool: &str| json!({"tool": tool, "arguments": {"taskId": t.id}});
        m.insert(
            "next".into(),
            json!({
                "message": format!(
                    "The work continues as task {id}. Call task_result with {{\"taskId\": \"{id}\"}} \
                     for its result (it waits a while), task_status for how it goes, task_cancel to \
                     stop it; or subscribe to the task.finished event with the same arguments to be \
                     told when it ends.",
                    id = t.id
                ),
                "result": follow("task_result"),
                "status": follow("task_status"),
                "cancel": follow("task_cancel"),
                "event": {"name": mcp_tasks_engine::events::TASK_FINISHED, "arguments": {"taskId": t.id}},
            }),
        );
    }
    Value::Object(m)
}

fn status_result(t: &TaskRecord) -> Value {
    text_result(format!("Task {} ({}): {}.", t.id, t.tool, describe(t)), t)
}

fn text_result(text: String, t: &TaskRecord) -> Value {
    json!({
        "content": [{"type": "text", "text": text}],
        "structuredContent": summary(t),
    })
}

fn tool_error(text: String) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}
