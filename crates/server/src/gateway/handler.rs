//! One upstream tool as our task handler: the call runs inside the task, and what happens on the
//! way (progress, logs, questions) goes to the task.

use async_trait::async_trait;
use futures::future::BoxFuture;
use mcp_tasks_client::{
    CallOptions, Called, ClientError, Event, InputHandler, TaskHandle, TaskOutcome, TaskRef,
};
use mcp_tasks_engine::{InputResponse, LogLevel, Outcome, StopReason, TaskContext, TaskHandler};
use mcp_tasks_protocol::error_codes;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Declares that the gateway answers elicitation and sampling (each call's own handler does), and
/// declines what arrives while no call waits.
pub(super) struct Declares;

impl InputHandler for Declares {
    fn can_elicit(&self) -> bool {
        true
    }
    fn can_sample(&self) -> bool {
        true
    }
}

/// A call's questions, asked of its task's client.
struct AskTheTask(TaskContext);

impl InputHandler for AskTheTask {
    fn can_elicit(&self) -> bool {
        true
    }
    fn can_sample(&self) -> bool {
        true
    }
    fn elicit<'a>(&'a self, params: &'a Value) -> BoxFuture<'a, Value> {
        Box::pin(async move {
            match self
                .0
                .request_input("elicitation/create", params.clone())
                .await
            {
                Ok(InputResponse::Result { value }) => value,
                // The task's client cannot or did not answer: the upstream hears "decline"/"cancel".
                Ok(InputResponse::Error { .. }) => json!({"action": "decline"}),
                Err(e) => {
                    tracing::debug!(error = %e, "an upstream question found no answer");
                    json!({"action": "cancel"})
                }
            }
        })
    }
    fn sample<'a>(&'a self, params: &'a Value) -> BoxFuture<'a, Result<Value, String>> {
        Box::pin(async move {
            match self
                .0
                .request_input("sampling/createMessage", params.clone())
                .await
            {
                Ok(InputResponse::Result { value }) => Ok(value),
                Ok(InputResponse::Error { message, .. }) => Err(message),
                Err(e) => Err(e.to_string()),
            }
        })
    }
}

/// An upstream tool behind one of our tools.
pub(super) struct UpstreamTool {
    pub(super) link: Arc<super::Link>,
    pub(super) tool: String,
    pub(super) timeout: Duration,
}

fn level_of(text: &str) -> LogLevel {
    LogLevel::parse(text).unwrap_or(LogLevel::Info)
}

/// The checkpoint key under which a call's upstream task is saved.
const UPSTREAM_TASK: &str = "upstreamTask";

#[async_trait]
impl TaskHandler for UpstreamTool {
    async fn run(&self, ctx: TaskContext, arguments: Arc<Value>) -> Outcome {
        let upstream = self.link.name();
        let deadline = tokio::time::sleep(self.timeout);
        tokio::pin!(deadline);
        // A run after a gateway restart follows the upstream task the interrupted run started.
        let saved = ctx
            .checkpoint()
            .and_then(|c| c.get(UPSTREAM_TASK).cloned())
            .and_then(|r| serde_json::from_value::<TaskRef>(r).ok());
        if let Some(saved) = saved {
            let input: Arc<dyn InputHandler> = Arc::new(AskTheTask(ctx.clone()));
            return match self.link.resume(&saved).await {
                Ok(client) => {
                    tracing::info!(task = ?ctx.task_id(), upstream, upstream_task = %saved.task_id, "following the upstream task again");
                    let t = TaskHandle::attach(&client, &saved.task_id).with_input(Some(input));
                    self.follow(&ctx, &t, &mut deadline, false, false, true)
                        .await
                }
                Err(e) => self.failed(&e),
            };
        }
        // A restarting upstream is waited for, within the call's time.
        let client = tokio::select! {
            c = self.link.client(self.timeout) => c,
            () = ctx.cancelled() => Err(format!("{} before the upstream was back", stop_phrase(&ctx))),
        };
        let client = match client {
            Ok(c) => c,
            Err(why) => return upstream_error(upstream, &why),
        };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
        let cancel = CancellationToken::new();
        let options = CallOptions {
            // As a task wherever the upstream offers one (the client reads the tool's support).
            as_task: true,
            input: Some(Arc::new(AskTheTask(ctx.clone()))),
            cancel: Some(cancel.clone()),
            ..CallOptions::default()
        };
        let on_event = move |e: &Event| {
            let _ = tx.send(e.clone());
        };
        let call = client.call_tool(&self.tool, (*arguments).clone(), &options, &on_event);
        tokio::pin!(call);
        let mut timed_out = false;
        // Told to stop for another reason than a cancel (a hand-off, a lost lease): the call is
        // not cancelled but waited for (within the run's grace), so an upstream task it starts is
        // saved for the run that takes this task over.
        let mut stopping = false;
        let result = loop {
            tokio::select! {
                r = &mut call => break r,
                Some(e) = rx.recv() => forward(&ctx, e).await,
                () = ctx.cancelled(), if !cancel.is_cancelled() && !stopping => {
                    if passes_on(&ctx) {
                        cancel.cancel();
                    } else {
                        stopping = true;
                    }
                }
                () = &mut deadline, if !cancel.is_cancelled() => {
                    timed_out = true;
                    cancel.cancel();
                }
            }
        };
        // What was reported last still reaches the task.
        while let Ok(e) = rx.try_recv() {
            forward(&ctx, e).await;
        }
        match result {
            Ok(Called::Done(outcome)) => self.outcome(outcome, timed_out, "call"),
            Ok(Called::Task(t)) => {
                // The upstream runs it as its own task. Over HTTP the upstream outlives us: the
                // task is saved with ours, so a gateway that restarts follows it instead of failing.
                let mut saved = false;
                if self.link.outlives_us() {
                    let state = json!({UPSTREAM_TASK: t.to_ref()});
                    match ctx.save_checkpoint(state).await {
                        Ok(()) => saved = true,
                        Err(e) => {
                            tracing::warn!(task = ?ctx.task_id(), error = %e, "cannot save the upstream task with ours; a restart will not resume it")
                        }
                    }
                }
                if stopping {
                    if saved {
                        return self.left_running(&ctx, "task");
                    }
                    // Nobody could follow it after us: it is cancelled rather than left to run
                    // beside the call the next run makes.
                    let _ = t.cancel().await;
                    return upstream_error(
                        self.link.name(),
                        &format!("{}; the upstream task was cancelled: it could not be saved for the next run", stop_phrase(&ctx)),
                    );
                }
                let stopped = cancel.is_cancelled();
                self.follow(&ctx, &t, &mut deadline, stopped, timed_out, saved)
                    .await
            }
            Err(ClientError::Rpc {
                code,
                message,
                data,
                ..
            }) => Outcome::Error {
                code,
                message,
                data,
            },
            Err(ClientError::Cancelled(_)) => {
                self.outcome(TaskOutcome::Cancelled { message: None }, timed_out, "call")
            }
            Err(e) => self.failed(&e),
        }
    }
}

impl UpstreamTool {
    /// Follows upstream task `t` to its end: its progress, logs and questions become the task's,
    /// and our cancel or the deadline cancels it. `cancelled` says a cancel already happened on
    /// the way (it is sent on), `timed_out` that it was the deadline. A hand-off or a lost lease
    /// leaves the upstream task running when it is `saved` with ours: the run that takes the task
    /// over follows it from the checkpoint.
    async fn follow(
        &self,
        ctx: &TaskContext,
        t: &TaskHandle,
        deadline: &mut std::pin::Pin<&mut tokio::time::Sleep>,
        mut cancelled: bool,
        mut timed_out: bool,
        saved: bool,
    ) -> Outcome {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
        let on_event = move |e: &Event| {
            let _ = tx.send(e.clone());
        };
        let wait = t.wait(&on_event);
        tokio::pin!(wait);
        if cancelled {
            let _ = t.cancel().await;
        }
        let waited = loop {
            tokio::select! {
                r = &mut wait => break r,
                Some(e) = rx.recv() => forward(ctx, e).await,
                () = ctx.cancelled(), if !cancelled => {
                    // Left running only when the next run can follow it (it is saved with ours).
                    if !passes_on(ctx) && saved {
                        return self.left_running(ctx, "task");
                    }
                    cancelled = true;
                    let _ = t.cancel().await;
                }
                () = deadline.as_mut(), if !cancelled => {
                    cancelled = true;
                    timed_out = true;
                    let _ = t.cancel().await;
                }
            }
        };
        while let Ok(e) = rx.try_recv() {
            forward(ctx, e).await;
        }
        match waited {
            Ok(outcome) => self.outcome(outcome, timed_out, "task"),
            Err(e) => self.failed(&e),
        }
    }

    /// What a run stopped for another reason than a cancel returns: the upstream `what` goes on.
    /// (Not the task's outcome: the engine writes no error returned after such a stop.)
    fn left_running(&self, ctx: &TaskContext, what: &str) -> Outcome {
        tracing::info!(task = ?ctx.task_id(), upstream = self.link.name(), reason = %stop_phrase(ctx), "run stopped; the upstream {what} goes on");
        upstream_error(
            self.link.name(),
            &format!(
                "{}; the upstream {what} goes on for the run that takes this task over",
                stop_phrase(ctx)
            ),
        )
    }

    /// Our outcome for a call that could not go through; a connection the upstream no longer
    /// accepts (it forgot our session) is reported, so the supervisor connects again.
    fn failed(&self, e: &ClientError) -> Outcome {
        if matches!(e, ClientError::Http { status: 404, .. }) {
            self.link.report_broken();
        }
        upstream_error(self.link.name(), &e.to_string())
    }

    /// Our outcome for how the upstream `what` (call or task) ended.
    fn outcome(&self, o: TaskOutcome, timed_out: bool, what: &str) -> Outcome {
        match o {
            TaskOutcome::Completed(value) => Outcome::Result {
                value,
                is_error: false,
            },
            TaskOutcome::ToolError(value) => Outcome::Result {
                value,
                is_error: true,
            },
            TaskOutcome::Failed {
                code,
                message,
                data,
            } => Outcome::Error {
                code,
                message,
                data,
            },
            TaskOutcome::Cancelled { .. } if timed_out => upstream_error(
                self.link.name(),
                &format!(
                    "{} timed out after {} s (the upstream {what} was cancelled)",
                    self.tool,
                    self.timeout.as_secs()
                ),
            ),
            TaskOutcome::Cancelled { message } => upstream_error(
                self.link.name(),
                &message.unwrap_or_else(|| format!("the upstream {what} was cancelled")),
            ),
        }
    }
}

/// What the upstream reports on the way, as the task's own.
async fn forward(ctx: &TaskContext, e: Event) {
    match e {
        Event::Progress {
            progress,
            total,
            message,
        } => ctx.progress(progress, total, message).await,
        Event::Log { level, data } => ctx.log(level_of(&level), data).await,
        Event::Status(s) => match (s.progress, s.status_message) {
            (Some(p), m) => ctx.progress(p, s.progress_total, m).await,
            (None, Some(m)) => ctx.status(m).await,
            (None, None) => {}
        },
        Event::Retrying { .. } => {}
    }
}

/// Whether our stop is passed on to the upstream: a cancel of the task, or its end elsewhere (an
/// expiry; a finish by another node's run, whose upstream task is then done already). On a
/// hand-off or a lost lease the task goes on, and so does the upstream work, for the run that
/// takes the task over.
fn passes_on(ctx: &TaskContext) -> bool {
    matches!(
        ctx.stop_reason(),
        None | Some(StopReason::Cancelled | StopReason::FinishedElsewhere)
    )
}

/// "cancelled", "handed off", …: why the run was told to stop.
fn stop_phrase(ctx: &TaskContext) -> &'static str {
    ctx.stop_reason().unwrap_or(StopReason::Cancelled).as_str()
}

fn upstream_error(upstream: &str, why: &str) -> Outcome {
    Outcome::Error {
        code: error_codes::INTERNAL_ERROR,
        message: format!("upstream {upstream}: {why}"),
        data: None,
    }
}
