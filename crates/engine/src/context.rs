//! What a running handler can do besides computing its result.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use crate::model::InputResponse;

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

/// Why a run was told to stop ([`TaskContext::stop_reason`]). Only [`StopReason::Cancelled`] means
/// that the work itself is no longer wanted: on every other reason the task goes on (on another
/// node, at the next start) or is already over, so work the run started elsewhere (an upstream
/// task, a remote job) is left running for the run that takes the task over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StopReason {
    /// The task was cancelled (by its client, or by an operator): stop the work, and what it
    /// started elsewhere.
    Cancelled,
    /// This node hands its running tasks to others (a deploy, a drain that ended): save what is
    /// needed to go on ([`TaskContext::save_checkpoint`]) and return; the task resumes elsewhere.
    HandedOff,
    /// This node could not keep the task's lease (another node took the task over, or the store
    /// could not be reached before the lease ran out): another run may have the task now, so this
    /// one must stop at once and write nothing.
    LeaseLost,
    /// The task was finished by someone else (another node, an expiry) while this run went on.
    FinishedElsewhere,
    /// The engine is shutting down without handing its tasks off; they are recovered at the next
    /// start.
    ShuttingDown,
    /// The run suspended itself for a long durable sleep ([`TaskContext::sleep`]): it is ended
    /// now, holding no slot and no lease, and the task is run again (on any node) at its wake time.
    Suspended,
}

impl StopReason {
    /// A short phrase for messages: "cancelled", "handed off", ….
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Cancelled => "cancelled",
            StopReason::HandedOff => "handed off",
            StopReason::LeaseLost => "lease lost",
            StopReason::FinishedElsewhere => "finished elsewhere",
            StopReason::ShuttingDown => "shutting down",
            StopReason::Suspended => "suspended",
        }
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A task's step journal, kept by its sink ([`ContextSink::journal`]): what
/// [`TaskContext::step`] replays and records. Every method is required.
#[async_trait]
pub trait StepJournal: Send + Sync {
    /// Takes the journal's next place for a step named `name`: its recorded output when an earlier
    /// run recorded it, or the place to record it at once the body ran.
    async fn replay_step(&self, name: &str) -> Result<StepSlot, StepError>;
    /// Records what the step at `seq` returned (or failed with for good), durably, before the step
    /// returns it.
    async fn record_step(&self, seq: u32, step: StepEntry) -> Result<(), StepError>;
    /// The step given place `seq` by [`StepJournal::replay_step`] ended: recorded, failed, or its
    /// future dropped before it was. The next step may start.
    fn end_step(&self, seq: u32);
    /// Whether steps that earlier runs recorded remain that this run has not replayed yet: the run
    /// is still on the path the journal recorded, not past its end (what
    /// [`TaskContext::patched`] tells old journals from new runs by). Meaningful once a step was
    /// asked for ([`StepJournal::replay_step`] reads the journal).
    fn replaying(&self) -> bool;
    /// What [`TaskContext::patched`] answered for `id` earlier in this run, if it did: a run
    /// answers the same for one id every time (as Temporal does), so a second check of one change
    /// cannot take the new path after the first took the old one.
    fn patch_answer(&self, id: &str) -> Option<bool>;
    /// Keeps what [`TaskContext::patched`] answered for `id` in this run.
    fn keep_patch_answer(&self, id: &str, answer: bool);
    /// The place of the last signal named `name` that this run's waits took, replayed or new (0:
    /// none yet): the next [`TaskContext::wait_signal`] for `name` takes the first one after it,
    /// so each wait takes the signal the journal says it took, and a later one the next.
    fn signal_taken(&self, name: &str) -> u32;
    /// Keeps that a wait of this run took the signal named `name` at place `seq`.
    fn keep_signal_taken(&self, name: &str, seq: u32);
    /// A recorded step could not be read back as the handler asked (its type changed, or a plain
    /// step met a recorded failure): the handler gets `error`; a sink that checks a journal
    /// against new code ([`replay_check`](crate::replay_check)) reports it.
    fn unreadable(&self, error: &StepError);
}

/// What a step left, for [`StepJournal::record_step`] to record.
#[derive(Clone, Debug, PartialEq)]
pub struct StepEntry {
    /// The step's name.
    pub name: String,
    /// What its body returned, or, for a step that failed for good, what it failed with.
    pub output: Value,
    /// For a step that failed for good, the failure in words.
    pub error: Option<String>,
    /// How long its body ran, all tries together, ms.
    pub duration_ms: u64,
}

/// Where a context's reports go: the task store for a task, or straight to the caller for a plain call.
#[async_trait]
pub trait ContextSink: Send + Sync {
    /// Progress so far, with an optional total and message. For a task, the report is merged into
    /// the task by the store's rules (see [`TaskChange::progress`](crate::store::TaskChange::progress)):
    /// progress and total never decrease, and the total is never below the progress.
    async fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>);
    /// A new human-readable status message.
    async fn status(&self, message: String);
    /// A log message for the client.
    async fn log(&self, level: LogLevel, logger: Option<String>, data: Value);
    /// Sends a request for input to the client and waits for the answer.
    async fn request_input(
        &self,
        method: &str,
        params: Value,
    ) -> Result<InputResponse, InputError> {
        let _ = (method, params);
        Err(InputError::Unsupported(
            "this context cannot ask the client for input".into(),
        ))
    }
    /// The checkpoint the task had when this run started (see [`ContextSink::save_checkpoint`]).
    fn checkpoint(&self) -> Option<Value> {
        None
    }
    /// Saves `state` with the task, durably, to resume from when the run is interrupted.
    async fn save_checkpoint(&self, state: Value) -> Result<(), CheckpointError> {
        let _ = state;
        Err(CheckpointError::NotATask)
    }
    /// Publishes the task's own event `name` carrying `data`, durably, before this returns.
    async fn publish(&self, name: &str, data: Value) -> Result<(), crate::events::PublishError> {
        let _ = (name, data);
        Err(crate::events::PublishError::NotATask)
    }
    /// Which run of the task this is: 1 for the first, one more for each resume after an
    /// interruption or a hand-off.
    fn attempt(&self) -> u32 {
        1
    }
    /// Asks to end this run until `wake_at` (Unix ms), for a durable sleep: `true` when the sink
    /// takes it (the run is then told to stop for [`StopReason::Suspended`] and the task is run
    /// again at that time); `false` to sleep in the run (a plain call, a sleep too short to be
    /// worth it, a run already told to stop).
    fn suspend(&self, wake_at: u64) -> bool {
        let _ = wake_at;
        false
    }
    /// The id of the task this sink reports for, when it knows it: a context made without an id
    /// takes it from here, so a task's run keeps its id once (in the sink), not twice.
    fn task_id(&self) -> Option<&str> {
        None
    }
    /// Why the run was told to stop, once its token is cancelled; `None` means a cancel (the only
    /// reason a plain call is stopped for).
    fn stop_reason(&self) -> Option<StopReason> {
        None
    }
    /// The handler saw its stop through the context (`cancelled()` resolved, `is_cancelled()`,
    /// `stop_reason()` or `is_handed_off()` answered after it): what it returns now is taken for
    /// its answer to the stop.
    fn stop_seen(&self) {}
    /// The step journal this sink keeps (see [`StepJournal`]), or `None` for a sink that keeps
    /// none: a plain call, whose steps all run and record nothing. No default: a sink says which
    /// it is, so a task's sink cannot lose its steps by forgetting to keep them.
    fn journal(&self) -> Option<&dyn StepJournal>;
    /// Waits for the first signal named `name` sent to this task after place `after`, until
    /// `deadline` (Unix ms; `None`: for as long as it takes): `Ok(None)` once the deadline passed
    /// without one. The sink may suspend the task meanwhile, as for a long sleep
    /// ([`ContextSink::suspend`]): the future then never completes. Ends with
    /// [`StepError::Stopped`] when the run is told to stop.
    async fn next_signal(
        &self,
        name: &str,
        after: u32,
        deadline: Option<u64>,
    ) -> Result<Option<crate::model::SignalRecord>, StepError> {
        let _ = (name, after, deadline);
        Err(StepError::NotRunning(
            "signals are sent to tasks; this call is not one".into(),
        ))
    }
    /// Sends the signal `name` carrying `payload` to the task `task_id` of the same owner, under
    /// the sender's `key` (a retry with the same key is the same signal). Returns its place.
    async fn send_signal(
        &self,
        task_id: &str,
        name: &str,
        payload: Value,
        key: String,
    ) -> Result<u32, crate::SignalError> {
        let _ = (task_id, name, payload, key);
        Err(crate::SignalError::NotATask)
    }
    /// What signs the URLs third parties send this task's signals to, when the server makes them
    /// (see [`TaskContext::signal_url`]).
    fn signal_urls(&self) -> Option<Arc<dyn crate::SignalUrls>> {
        None
    }
    /// Like [`ContextSink::request_input`], naming the question `key` where the wire shows keys
    /// (2026-07-28 rounds); sinks that make their own unique keys may ignore it.
    async fn request_input_as(
        &self,
        key: &str,
        method: &str,
        params: Value,
    ) -> Result<InputResponse, InputError> {
        let _ = key;
        self.request_input(method, params).await
    }
}

/// A step's place in the journal ([`StepJournal::replay_step`]).
#[derive(Clone, Debug, PartialEq)]
pub enum StepSlot {
    /// An earlier run recorded this step: its output, to return without running the body.
    Recorded {
        /// What the body returned, or what it failed with for good.
        output: Value,
        /// For a step that failed for good, the failure in words.
        error: Option<String>,
    },
    /// Nothing is recorded here yet: run the body, then record its output at this place.
    Run(u32),
}

/// Why a step (or a durable sleep) could not give its output.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum StepError {
    /// The journal holds another step at this place: the code changed since the task started. The
    /// task is failed with this message.
    #[error(
        "replay mismatch: step {seq} of this task was recorded as `{recorded}`, but this run's \
         step {seq} is `{found}`; the tool's code changed since the task started, so its journal \
         cannot be replayed"
    )]
    Mismatch {
        /// The place in the journal.
        seq: u32,
        /// The name recorded there.
        recorded: String,
        /// The name this run gave.
        found: String,
    },
    /// The step's output does not serialize to JSON, or the recorded output does not read back
    /// as the type asked for.
    #[error("step `{name}`: {message}")]
    Serde {
        /// The step.
        name: String,
        /// What went wrong.
        message: String,
    },
    /// The task finished, or another node runs it now: this run must stop.
    #[error("the task is no longer this run's ({0})")]
    NotRunning(String),
    /// The journal holds a record at this place already (another run recorded it meanwhile):
    /// the first stays.
    #[error("step {0} of this task is recorded already; steps must run one after another")]
    AlreadyRecorded(u32),
    /// A step was started while another one's body still ran: a task's steps run one after
    /// another (their order is what a replay follows). The step asked for did not run.
    #[error(
        "step `{asked}` was started while step `{running}` still runs; a task's steps must run \
         one after another (await each before starting the next)"
    )]
    Concurrent {
        /// The step whose body runs.
        running: String,
        /// The step that was refused.
        asked: String,
    },
    /// What was asked is not offered here (said in words: what is missing, and how to get it).
    #[error("{0}")]
    Unsupported(String),
    /// Told to stop (a cancel, a hand-off) during a durable sleep or between a step's tries.
    #[error("stopped while waiting")]
    Stopped,
    /// The step's output is larger than a step may record
    /// ([`EngineConfig::max_step_output_bytes`](crate::EngineConfig::max_step_output_bytes)). The
    /// task is failed with this message.
    #[error(
        "step `{name}` returned {bytes} bytes of JSON, more than the {limit} a step may record; \
         keep large data elsewhere (a file, an object store) and return a reference to it"
    )]
    TooLarge {
        /// The step.
        name: String,
        /// The size of its output as JSON.
        bytes: usize,
        /// The cap.
        limit: usize,
    },
    /// Recording the step would take the task's journal past its cap
    /// ([`EngineConfig::max_journal_bytes`](crate::EngineConfig::max_journal_bytes)). The task is
    /// failed with this message.
    #[error(
        "recording step `{name}` would take this task's journal to {bytes} bytes, past its cap \
         of {limit}; a task with this many steps should be split (child tasks, or a new task \
         per batch)"
    )]
    JournalFull {
        /// The step.
        name: String,
        /// What the journal would hold with it.
        bytes: usize,
        /// The cap.
        limit: usize,
    },
    /// A plain [`TaskContext::step`] met a record of a step that failed for good (one made by
    /// [`TaskContext::step_with`] under the same name).
    #[error(
        "step `{name}` is recorded as failed ({error}); a step recorded with step_with must be \
         read with step_with"
    )]
    RecordedFailure {
        /// The step.
        name: String,
        /// The failure recorded.
        error: String,
    },
    /// The journal could not be read or written (rendered with its causes).
    #[error("the step journal failed: {0}")]
    Store(String),
}

/// Why a checkpoint was not saved.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CheckpointError {
    /// The handler does not run as a task (a plain call): there is nothing to resume.
    #[error("a plain call keeps no checkpoint")]
    NotATask,
    /// The task finished, or another node runs it now.
    #[error("the task is no longer this run's ({0})")]
    NotRunning(String),
    /// The store could not write it (rendered with its causes).
    #[error("the checkpoint could not be stored: {0}")]
    Store(String),
}

/// Why a request for input got no answer.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum InputError {
    /// The client cannot take this kind of request (it did not declare the capability).
    #[error("the client cannot answer this request: {0}")]
    Unsupported(String),
    /// The task ended (cancelled, failed, expired) while it waited.
    #[error("the task ended ({0}) while waiting for input")]
    TaskEnded(crate::model::TaskStatus),
    /// The handler was told to stop while it waited.
    #[error("cancelled while waiting for input")]
    Cancelled,
    /// The client answered with a JSON-RPC error (e.g. -1: the user rejected a sampling request).
    #[error("the client refused: {message} ({code})")]
    Client {
        /// Error code.
        code: i64,
        /// Error message.
        message: String,
    },
    /// The client's answer was not what the request asks for.
    #[error("the client's answer is malformed: {0}")]
    Malformed(String),
    /// The request's params are larger than the engine stores
    /// ([`EngineConfig::max_input_request_bytes`](crate::EngineConfig::max_input_request_bytes));
    /// nothing was stored or sent.
    #[error("the input request is {size} bytes; the limit is {max}")]
    TooLarge {
        /// Serialized size of the params, in bytes.
        size: usize,
        /// The limit, in bytes.
        max: usize,
    },
    /// The request could not be stored or read. Holds the store error with its causes, rendered
    /// (see [`error_chain`](crate::error_chain)), so this error stays cheap to clone and compare.
    #[error("input request failed: {0}")]
    Store(String),
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
    /// The state this run resumes from: what an interrupted run of the task saved with
    /// [`TaskContext::save_checkpoint`], or `None` on a first run.
    pub fn checkpoint(&self) -> Option<Value> {
        self.sink.checkpoint()
    }
    /// Saves `state` with the task, durably, before this returns. A task that has a checkpoint is
    /// run again after an interruption (a crash, a restart), and that run finds the state in
    /// [`TaskContext::checkpoint`] — e.g. the id of remote work to follow instead of starting it again.
    pub async fn save_checkpoint(&self, state: Value) -> Result<(), CheckpointError> {
        self.sink.save_checkpoint(state).await
    }
    /// Which run of the task this is: 1 for the first, one more for each resume after an
    /// interruption or a hand-off.
    pub fn attempt(&self) -> u32 {
        self.sink.attempt()
    }
    /// Publishes an event of a type the server declared (MCP Events: `[[events]]` in the config),
    /// carrying `data`, durably, before this returns: subscribers get it by webhook, pollers in the
    /// log. Who sees it is the type's (its task's principal, or every caller of a tool). A run
    /// that is resumed publishes again what it publishes again: put a publish after a step whose
    /// output says it happened, if it must come once.
    pub async fn publish(
        &self,
        name: &str,
        data: Value,
    ) -> Result<(), crate::events::PublishError> {
        self.sink.publish(name, data).await
    }
    /// Whether this run was told to stop because its server hands the task off (a deploy, a drain
    /// that ended): save what is needed to go on ([`TaskContext::save_checkpoint`]) and return;
    /// the task resumes on another server or at the next start. `false` for a cancel.
    pub fn is_handed_off(&self) -> bool {
        self.stop_reason() == Some(StopReason::HandedOff)
    }
    /// Why this run was told to stop, once it was (`None` while it may go on). Pass a stop on to
    /// work started elsewhere (an upstream task) only when this is [`StopReason::Cancelled`]: on
    /// any other reason the task goes on, and the run that takes it over follows that work.
    ///
    /// What the run returns after a stop: for [`StopReason::HandedOff`] and
    /// [`StopReason::ShuttingDown`], a successful result returned within the grace period by a
    /// handler that did not see the stop (it finished its work meanwhile) is written as the task's
    /// outcome: running it again would repeat it. Anything a handler returns once it saw the stop
    /// through this context (`cancelled()` resolved, or `is_cancelled()`, `stop_reason()`,
    /// `is_handed_off()` answered after it) is taken for its answer to the stop and not written,
    /// nor is an error: the task resumes, or fails as interrupted when it cannot. For the other
    /// reasons nothing the run returns is written.
    pub fn stop_reason(&self) -> Option<StopReason> {
        if !self.cancel.is_cancelled() {
            return None;
        }
        self.sink.stop_seen();
        Some(self.sink.stop_reason().unwrap_or(StopReason::Cancelled))
    }
    /// The sink this context reports to (for the step journal).
    pub(crate) fn sink(&self) -> &Arc<dyn ContextSink> {
        &self.sink
    }
    /// The task id, when the handler runs as a task: the one given to [`TaskContext::new`], else
    /// the sink's.
    pub fn task_id(&self) -> Option<&str> {
        self.task_id.as_deref().or_else(|| self.sink.task_id())
    }
    /// Reports progress; also visible on the task as `progress`, `progress_total` and
    /// `progress_message`. Non-finite numbers are ignored.
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
    /// Sends a request (`method`, `params`) to the client and waits for its answer. The task is
    /// `input_required` while any request is unanswered. Fails at once when the client lacks the
    /// capability, and wakes with an error when the task is cancelled or expires meanwhile.
    pub async fn request_input(
        &self,
        method: &str,
        params: Value,
    ) -> Result<InputResponse, InputError> {
        tokio::select! {
            r = self.sink.request_input(method, params) => r,
            _ = self.cancel.cancelled() => {
                self.sink.stop_seen();
                Err(InputError::Cancelled)
            }
        }
    }

    /// Like [`TaskContext::request_input`], naming the question `key` (shown as the `inputRequests` key
    /// of a 2026-07-28 round; tasks use unique keys of their own).
    pub async fn request_input_as(
        &self,
        key: &str,
        method: &str,
        params: Value,
    ) -> Result<InputResponse, InputError> {
        tokio::select! {
            r = self.sink.request_input_as(key, method, params) => r,
            _ = self.cancel.cancelled() => {
                self.sink.stop_seen();
                Err(InputError::Cancelled)
            }
        }
    }

    /// Whether cancellation was requested.
    pub fn is_cancelled(&self) -> bool {
        let stopped = self.cancel.is_cancelled();
        if stopped {
            self.sink.stop_seen();
        }
        stopped
    }
    /// Resolves when cancellation is requested: `select!` on it beside the work.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await;
        self.sink.stop_seen();
    }
    /// The cancellation token itself, for handing to sub-tasks.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.cancel.clone()
    }
}
