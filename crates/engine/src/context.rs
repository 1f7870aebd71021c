//! What a running handler can do besides computing its result.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Log severities (RFC 5424), lowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Debug detail.
    Debug,
    /// Normal information.
    Info,
    /// Normal but significant.
    Notice,
    /// Warning.
    Warning,
    /// Error.
    Error,
    /// Critical.
    Critical,
    /// Action needed now.
    Alert,
    /// System unusable.
    Emergency,
}

impl LogLevel {
    /// Parses the lowercase RFC 5424 name.
    pub fn parse(s: &str) -> Option<LogLevel> {
        serde_json::from_value(Value::String(s.to_string())).ok()
    }
    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }
}

/// Where a context's reports go: the task store for a task, or straight to the caller for a plain call.
#[async_trait]
pub trait ContextSink: Send + Sync {
    /// Progress so far (`progress` never decreases; smaller values are ignored), with an optional total
    /// and message.
    async fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>);
    /// A new human-readable status message.
    async fn status(&self, message: String);
    /// A log message for the client.
    async fn log(&self, level: LogLevel, logger: Option<String>, data: Value);
}

/// Handed to every handler run: report progress and status, log, and observe cancellation.
#[derive(Clone)]
pub struct TaskContext {
    task_id: Option<String>,
    cancel: CancellationToken,
    sink: Arc<dyn ContextSink>,
}

impl TaskContext {
    /// A context that reports to `sink` and is cancelled through `cancel`.
    pub fn new(
        task_id: Option<String>,
        cancel: CancellationToken,
        sink: Arc<dyn ContextSink>,
    ) -> Self {
        TaskContext {
            task_id,
            cancel,
            sink,
        }
    }
    /// The task id, when the handler runs as a task.
    pub fn task_id(&self) -> Option<&str> {
        self.task_id.as_deref()
    }
    /// Reports progress; also visible on the task as `progress` / `progressTotal`.
    pub async fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        self.sink.progress(progress, total, message).await
    }
    /// Sets the task's status message (a status notification goes out).
    pub async fn status(&self, message: impl Into<String>) {
        self.sink.status(message.into()).await
    }
    /// Sends a log message to the client (subject to its `logging/setLevel`).
    pub async fn log(&self, level: LogLevel, data: impl Into<Value>) {
        self.sink.log(level, None, data.into()).await
    }
    /// Whether cancellation was requested.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }
    /// Resolves when cancellation is requested: `select!` on it beside the work.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await
    }
    /// The cancellation token itself, for handing to sub-tasks.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.cancel.clone()
    }
}
