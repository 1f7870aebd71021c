//! One run of a task's handler: started under a lease that is renewed while it runs, stopped when the
//! task is cancelled (with a grace period), and finished through the store's compare-and-set. The
//! handler's reports reach the store and the notifier through [`TaskSink`].

use async_trait::async_trait;
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;

use super::Engine;
use crate::clock::now_ms;
use crate::context::{ContextSink, InputError, LogLevel, TaskContext};
use crate::handler::TaskHandler;
use crate::ids::random_id;
use crate::model::{InputRecord, InputResponse, Outcome, TaskRecord, TaskStatus};
use crate::notifier::{TaskEvent, TaskSubscription};
use crate::store::{error_chain, Lookup, ProgressState, ProgressUpdate, TaskChange, UpdateError};

impl Engine {
    pub(super) fn spawn_run(self: &Arc<Self>, rec: TaskRecord, handler: Arc<dyn TaskHandler>) {
        // Subscribe and mark as running before the task exists, so a cancel that lands at once is seen
        // and the sweeper never takes this task for an orphan.
        let events = self.notifier.subscribe_task(&rec.id);
        self.running.insert(rec.id.clone(), ());
        let engine = self.clone();
        tokio::spawn(async move {
            let id = rec.id.clone();
            engine.clone().run(rec, handler, events).await;
            engine.running.remove(&id);
        });
    }

    async fn run(
        self: Arc<Self>,
        rec: TaskRecord,
        handler: Arc<dyn TaskHandler>,
        mut events: TaskSubscription,
    ) {
        let id = rec.id.clone();
        let cancel = self.shutdown.child_token();
        let sink = Arc::new(TaskSink {
            engine: self.clone(),
            id: id.clone(),
            shown: std::sync::Mutex::new(ProgressState::of(&rec)),
        });
        let ctx = TaskContext::new(Some(id.clone()), cancel.clone(), sink);
        let arguments = rec.arguments.clone();
        let mut work = tokio::spawn(async move { handler.run(ctx, arguments).await });
        let mut deadline: Option<tokio::time::Instant> = None;
        let outcome = loop {
            let grace_over = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                joined = &mut work => break match joined {
                    Ok(outcome) => Some(outcome),
                    Err(e) if e.is_panic() => Some(self.rules.failure(format!("tool `{}` panicked", rec.tool))),
                    Err(_) => None,
                },
                ev = events.recv(), if deadline.is_none() => match ev {
                    Ok(TaskEvent::Changed(t)) if t.status.is_terminal() => {
                        cancel.cancel();
                        deadline = Some(tokio::time::Instant::now() + self.config.cancel_grace);
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => {
                        if let Ok(Lookup::Found(t)) = self.store.get(&id).await {
                            if t.status.is_terminal() {
                                cancel.cancel();
                                deadline = Some(tokio::time::Instant::now() + self.config.cancel_grace);
                            }
                        }
                    }
                    Err(RecvError::Closed) => {}
                },
                _ = cancel.cancelled(), if deadline.is_none() => {
                    // Server shutdown: give the handler its grace period, then leave the task to recovery.
                    deadline = Some(tokio::time::Instant::now() + self.config.cancel_grace);
                }
                _ = grace_over => {
                    tracing::warn!(task = %id, "handler ignored cancellation for the grace period; dropped");
                    work.abort();
                    break None;
                }
            }
        };
        let Some(outcome) = outcome else { return };
        if self.shutdown.is_cancelled() {
            // The server is stopping: whatever the handler returned after being told to stop is not
            // the task's result. Leave the task unfinished for recovery on the next start.
            return;
        }
        self.finish(&id, outcome).await;
    }

    async fn finish(&self, id: &str, outcome: Outcome) {
        let status = outcome.status();
        let message = match &outcome {
            Outcome::Error { message, .. } => Some(Some(message.clone())),
            Outcome::Result {
                value,
                is_error: true,
            } => Some(self.rules.error_summary(value)),
            // A progress note such as "scanning files" is stale once the work is done.
            Outcome::Result { .. } => Some(None),
        };
        let change = TaskChange {
            status: Some(status),
            status_message: message,
            outcome: Some(outcome),
            ..Default::default()
        };
        match self.apply(id, &TaskStatus::ACTIVE, change).await {
            Ok(rec) => {
                tracing::info!(target: "mcp_tasks::audit", task = %rec.id, tool = %rec.tool, owner = %rec.owner, status = %rec.status, "task finished");
            }
            Err(UpdateError::Conflict(cur)) => {
                tracing::debug!(task = %id, status = %cur.status, "task already terminal; result discarded");
            }
            Err(e) => {
                tracing::error!(task = %id, error = %error_chain(&e), "could not store task outcome")
            }
        }
    }
}

/// Reports from a running task: into the store, then out through the notifier.
struct TaskSink {
    engine: Arc<Engine>,
    id: String,
    /// The progress the task shows as of this sink's last write. Only this sink changes it while the
    /// run lasts, so it tells (by the store's own rules) whether a report would change anything,
    /// without a read.
    shown: std::sync::Mutex<ProgressState>,
}

impl TaskSink {
    fn shown(&self) -> std::sync::MutexGuard<'_, ProgressState> {
        // The state is replaced in one assignment, so a poisoned lock still holds a whole value.
        self.shown.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl ContextSink for TaskSink {
    async fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        if !progress.is_finite() || total.is_some_and(|t| !t.is_finite()) {
            return;
        }
        let update = ProgressUpdate {
            progress,
            total,
            message,
        };
        // Held across the write and the publish, so events leave in commit order.
        let _held = self.engine.order_lock(&self.id).await;
        let before = self.shown().clone();
        if before.after(&update) == before {
            // Nothing the task shows would change: no write, no event.
            return;
        }
        let message = update.message.clone();
        let change = TaskChange {
            progress: Some(update),
            ..Default::default()
        };
        match self
            .engine
            .store
            .update(&self.id, &TaskStatus::ACTIVE, change, now_ms())
            .await
        {
            Ok(rec) => {
                let after = ProgressState::of(&rec);
                let changed = after != before;
                let advanced = after.progress.unwrap_or(f64::NEG_INFINITY)
                    > before.progress.unwrap_or(f64::NEG_INFINITY);
                *self.shown() = after;
                if changed {
                    self.engine.notifier.publish(TaskEvent::Progress {
                        task: Arc::new(rec),
                        message,
                        advanced,
                    });
                }
            }
            Err(UpdateError::Conflict(_)) | Err(UpdateError::NotFound) => {}
            Err(e) => {
                tracing::warn!(task = %self.id, error = %error_chain(&e), "progress update failed")
            }
        }
    }

    async fn status(&self, message: String) {
        let change = TaskChange {
            status_message: Some(Some(message)),
            ..Default::default()
        };
        match self
            .engine
            .apply(&self.id, &TaskStatus::ACTIVE, change)
            .await
        {
            Ok(_) | Err(UpdateError::Conflict(_)) | Err(UpdateError::NotFound) => {}
            Err(e) => {
                tracing::warn!(task = %self.id, error = %error_chain(&e), "status update failed")
            }
        }
    }

    async fn request_input(
        &self,
        method: &str,
        params: Value,
    ) -> Result<InputResponse, InputError> {
        let engine = &self.engine;
        let store_err = |e: &dyn std::error::Error| InputError::Store(error_chain(e));
        let rec = match engine
            .store
            .get(&self.id)
            .await
            .map_err(|e| store_err(&e))?
        {
            Lookup::Found(rec) => rec,
            _ => return Err(InputError::Store("the task is gone".into())),
        };
        if rec.status.is_terminal() {
            return Err(InputError::TaskEnded(rec.status));
        }
        if let Some(guard) = &engine.input_guard {
            guard(&rec, method, &params).map_err(InputError::Unsupported)?;
        }
        let size = serialized_size(&params)?;
        let max = engine.config.max_input_request_bytes;
        if size > max {
            return Err(InputError::TooLarge { size, max });
        }
        let input = InputRecord {
            key: random_id(),
            task_id: self.id.clone(),
            method: method.to_string(),
            params,
            created_at: now_ms(),
            response: None,
            answered_at: None,
        };
        let key = input.key.clone();
        // Subscribe first: the answer can come as soon as the request is published.
        let mut events = engine.notifier.subscribe_task(&self.id);
        {
            let _held = engine.order_lock(&self.id).await;
            let was = match engine.store.get(&self.id).await {
                Ok(Lookup::Found(t)) => t.status,
                _ => TaskStatus::Working,
            };
            let rec = match engine.store.add_input(input.clone(), now_ms()).await {
                Ok(rec) => rec,
                Err(UpdateError::Conflict(cur)) => return Err(InputError::TaskEnded(cur.status)),
                Err(e) => return Err(store_err(&e)),
            };
            let task = Arc::new(rec);
            // A second question while one is open is not a status change.
            if was != TaskStatus::InputRequired {
                engine.notifier.publish(TaskEvent::Changed(task.clone()));
            }
            engine.notifier.publish(TaskEvent::InputRequested {
                task,
                input: Arc::new(input),
            });
        }
        tracing::info!(target: "mcp_tasks::audit", task = %self.id, method, request = %key, "task asked for input");
        loop {
            match events.recv().await {
                Ok(TaskEvent::InputAnswered { input, .. }) if input.key == key => {
                    if let Some(r) = &input.response {
                        return Ok(r.clone());
                    }
                }
                Ok(TaskEvent::Changed(t)) if t.status.is_terminal() => {
                    return Err(InputError::TaskEnded(t.status))
                }
                Ok(_) => {}
                Err(_) => {
                    // Missed events: the store knows.
                    if let Ok(Some(i)) = engine.store.get_input(&key).await {
                        if let Some(r) = i.response {
                            return Ok(r);
                        }
                    }
                    if let Ok(Lookup::Found(t)) = engine.store.get(&self.id).await {
                        if t.status.is_terminal() {
                            return Err(InputError::TaskEnded(t.status));
                        }
                    }
                }
            }
        }
    }

    async fn log(&self, level: LogLevel, logger: Option<String>, data: Value) {
        if let Ok(Lookup::Found(rec)) = self.engine.store.get(&self.id).await {
            if !rec.status.is_terminal() {
                self.engine.notifier.publish(TaskEvent::Log {
                    task: Arc::new(rec),
                    level,
                    logger,
                    data,
                });
            }
        }
    }
}

/// The length of `value` as JSON, counted without building the text.
fn serialized_size(value: &Value) -> Result<usize, InputError> {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).map_err(|e| {
        InputError::Malformed(format!("the input request cannot be serialized: {e}"))
    })?;
    Ok(count.0)
}
