//! One upstream tool as our task handler: the call runs inside the task, and what happens on the
//! way (progress, logs, questions) goes to the task.

use async_trait::async_trait;
use futures::future::BoxFuture;
use mcp_tasks_client::{
    CallOptions, Called, Client, ClientError, Event, InputHandler, TaskOutcome,
};
use mcp_tasks_engine::{InputResponse, LogLevel, Outcome, TaskContext, TaskHandler};
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
    pub(super) upstream: String,
    pub(super) client: Client,
    pub(super) tool: String,
    pub(super) timeout: Duration,
    /// The upstream runs this tool only as a task (2025 `taskSupport: required`).
    pub(super) upstream_task: bool,
}

fn level_of(text: &str) -> LogLevel {
    LogLevel::parse(text).unwrap_or(LogLevel::Info)
}

#[async_trait]
impl TaskHandler for UpstreamTool {
    async fn run(&self, ctx: TaskContext, arguments: Value) -> Outcome {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
        let cancel = CancellationToken::new();
        let options = CallOptions {
            as_task: self.upstream_task,
            input: Some(Arc::new(AskTheTask(ctx.clone()))),
            cancel: Some(cancel.clone()),
            ..CallOptions::default()
        };
        let on_event = move |e: &Event| {
            let _ = tx.send(e.clone());
        };
        let call = self
            .client
            .call_tool(&self.tool, arguments, &options, &on_event);
        tokio::pin!(call);
        let deadline = tokio::time::sleep(self.timeout);
        tokio::pin!(deadline);
        let mut timed_out = false;
        let result = loop {
            tokio::select! {
                r = &mut call => break r,
                Some(e) = rx.recv() => forward(&ctx, e).await,
                () = ctx.cancelled(), if !cancel.is_cancelled() => cancel.cancel(),
                () = &mut deadline, if !cancel.is_cancelled() => {
                    timed_out = true;
                    cancel.cancel();
                }
            }
        };
        // What was reported last still reaches the task.
        while let Ok(e) = rx.try_recv() {
            if let Event::Progress {
                progress,
                total,
                message,
            } = e
            {
                ctx.progress(progress, total, message).await;
            }
        }
        match result {
            Ok(Called::Done(outcome)) => self.outcome(outcome, timed_out, "call"),
            Ok(Called::Task(t)) => {
                // The upstream runs it as its own task: follow that task, with the same forwarding,
                // cancel and deadline.
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
                let on_event = move |e: &Event| {
                    let _ = tx.send(e.clone());
                };
                let wait = t.wait(&on_event);
                tokio::pin!(wait);
                let mut cancelled = cancel.is_cancelled();
                if cancelled {
                    let _ = t.cancel().await;
                }
                let waited = loop {
                    tokio::select! {
                        r = &mut wait => break r,
                        Some(e) = rx.recv() => forward(&ctx, e).await,
                        () = ctx.cancelled(), if !cancelled => {
                            cancelled = true;
                            let _ = t.cancel().await;
                        }
                        () = &mut deadline, if !cancelled => {
                            cancelled = true;
                            timed_out = true;
                            let _ = t.cancel().await;
                        }
                    }
                };
                match waited {
                    Ok(outcome) => self.outcome(outcome, timed_out, "task"),
                    Err(e) => upstream_error(&self.upstream, &e.to_string()),
                }
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
            Err(e) => upstream_error(&self.upstream, &e.to_string()),
        }
    }
}

impl UpstreamTool {
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
                &self.upstream,
                &format!(
                    "{} timed out after {} s (the upstream {what} was cancelled)",
                    self.tool,
                    self.timeout.as_secs()
                ),
            ),
            TaskOutcome::Cancelled { message } => upstream_error(
                &self.upstream,
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

fn upstream_error(upstream: &str, why: &str) -> Outcome {
    Outcome::Error {
        code: error_codes::INTERNAL_ERROR,
        message: format!("upstream {upstream}: {why}"),
        data: None,
    }
}
