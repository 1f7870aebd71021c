//! The task record and its state machine.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

use crate::webhook::WebhookTarget;

/// Where a task is in its life. `working ⇄ input_required → {completed | failed | cancelled}`;
/// the three terminal states are final.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Being processed.
    Working,
    /// Waiting for an answer from the client.
    InputRequired,
    /// Finished with a result (which may itself report a tool error).
    Completed,
    /// Finished with a protocol-level error.
    Failed,
    /// Stopped on request before it finished.
    Cancelled,
}

impl TaskStatus {
    /// All statuses.
    pub const ALL: [TaskStatus; 5] = [
        TaskStatus::Working,
        TaskStatus::InputRequired,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ];
    /// The statuses a task can still leave.
    pub const ACTIVE: [TaskStatus; 2] = [TaskStatus::Working, TaskStatus::InputRequired];

    /// Whether this status is final.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        )
    }

    /// Whether the state machine allows moving from `self` to `to`.
    pub fn can_become(self, to: TaskStatus) -> bool {
        match self {
            TaskStatus::Working => to != TaskStatus::Working,
            TaskStatus::InputRequired => to != TaskStatus::InputRequired,
            _ => false,
        }
    }

    /// The snake_case name used in storage and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Working => "working",
            TaskStatus::InputRequired => "input_required",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    /// Parses the snake_case name.
    pub fn parse(s: &str) -> Option<TaskStatus> {
        TaskStatus::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a task's work ended: the handler's result, or a protocol-level error (code, message, data).
///
/// A result is kept whole even when it reports a tool-level error (`is_error`): how that maps to a
/// status is a wire-era decision made by the renderer, not here.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// The handler produced a result object.
    Result {
        /// The result object as the original request would have returned it.
        value: Value,
        /// Whether the result reports a tool-level error.
        is_error: bool,
    },
    /// The handler failed with a protocol-level error.
    Error {
        /// Error code.
        code: i64,
        /// Error message.
        message: String,
        /// Error details.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<Value>,
    },
}

impl Outcome {
    /// The status a task takes when its work ends with this outcome.
    pub fn status(&self) -> TaskStatus {
        match self {
            Outcome::Result { .. } => TaskStatus::Completed,
            Outcome::Error { .. } => TaskStatus::Failed,
        }
    }
    /// Whether the work succeeded: a result that reports no tool-level error.
    pub fn is_success(&self) -> bool {
        matches!(
            self,
            Outcome::Result {
                is_error: false,
                ..
            }
        )
    }
}

/// A change of a task's status, as its history keeps it (the first status, `working`, is the
/// task's creation).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Transition {
    /// When, Unix ms.
    pub at: u64,
    /// The status it went to.
    pub status: TaskStatus,
    /// The status message it had then.
    pub message: Option<String>,
}

/// One recorded step of a task's journal ([`TaskContext::step`](crate::TaskContext::step)): what the
/// step's body returned, reused instead of running the body again when a later run of the task
/// replays the journal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// The task.
    pub task_id: String,
    /// Its place in the journal: 0 for the task's first step.
    pub seq: u32,
    /// The name the handler gave it.
    pub name: String,
    /// What its body returned, as JSON; for a step that failed for good, what it failed with (see
    /// [`TaskContext::step_with`](crate::TaskContext::step_with)).
    pub output: Value,
    /// The run (attempt) that ran the body.
    pub attempt: u32,
    /// When it was recorded, Unix ms.
    pub at: u64,
    /// How long its body ran (all its tries, for a step with retries), ms.
    #[serde(default)]
    pub duration_ms: u64,
    /// For a step that failed for good, the failure in words; its output is then replayed as that
    /// failure, and the body is not run again.
    #[serde(default)]
    pub error: Option<String>,
}

/// A signal sent to a task: a named payload a handler waits for with
/// [`TaskContext::wait_signal`](crate::TaskContext::wait_signal), kept with the task from the
/// moment it is sent (before the wait, or while no node runs the task) until the task is purged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SignalRecord {
    /// The task.
    pub task_id: String,
    /// Its place among the task's signals: 1 for the first, one more for each signal after.
    pub seq: u32,
    /// The signal's name (what the handler waits for).
    pub name: String,
    /// What it carries, as JSON (`null` when the sender gave nothing).
    pub payload: Value,
    /// Who sent it, in words: `owner <principal>`, `operator`, `task <id>`, `signed url`.
    pub sender: String,
    /// The sender's key for this signal: a second send with the same key is the same signal (a
    /// retried request), not another one.
    pub key: Option<String>,
    /// When it was stored, Unix ms.
    pub at: u64,
}

/// A signal to store (the store's `send_signal`): a [`SignalRecord`] without its place, which the
/// store gives it.
#[derive(Clone, Debug, PartialEq)]
pub struct NewSignal {
    /// The task.
    pub task_id: String,
    /// The signal's name.
    pub name: String,
    /// What it carries.
    pub payload: Value,
    /// Who sends it, in words.
    pub sender: String,
    /// The sender's key for it, if any (see [`SignalRecord::key`]).
    pub key: Option<String>,
    /// When it is sent, Unix ms.
    pub at: u64,
}

/// One task, era-agnostic, exactly as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// Creation time (Unix ms) and 128 random bits, in 44 hex digits.
    pub id: String,
    /// The principal that created the task.
    pub owner: String,
    /// The session that created it; for a caller without one, whatever scope the server tells such
    /// callers apart by (opaque here: it counts for [`ActiveLimit`] and list filters).
    pub session: Option<String>,
    /// The wire era it was created under (an opaque label chosen by the server).
    pub era: String,
    /// The tool (handler) name.
    pub tool: String,
    /// The handler's arguments, shared: every copy of the record (the store's, the events', the
    /// runner's) points at one value, however large.
    pub arguments: Arc<Value>,
    /// Wire metadata the server needs again later (e.g. a progress token). Opaque to the engine.
    /// Shared like `arguments`: it never changes after the create, and a deep copy of its nested
    /// maps was most of what copying and dropping a record cost.
    pub request_meta: Arc<Value>,
    /// Current status.
    pub status: TaskStatus,
    /// Human-readable note on the current state.
    pub status_message: Option<String>,
    /// Progress so far (never decreases).
    pub progress: Option<f64>,
    /// Total work, when known (never decreases, and never below `progress`).
    pub progress_total: Option<f64>,
    /// The message of the latest progress report that had one; cleared when the task completes,
    /// since a note such as "scanning files" is stale once the work is done.
    pub progress_message: Option<String>,
    /// How long the task stays after it finishes, when retention counts from the end rather than from
    /// creation: on finishing, `ttl_ms` becomes the time it ran plus this.
    pub retain_after_finish_ms: Option<u64>,
    /// Creation time, Unix ms.
    pub created_at: u64,
    /// Last change, Unix ms.
    pub updated_at: u64,
    /// Retention from creation in ms; `None` is unlimited.
    pub ttl_ms: Option<u64>,
    /// Suggested poll interval in ms.
    pub poll_interval_ms: Option<u64>,
    /// How the work ended, once it has.
    pub outcome: Option<Outcome>,
    /// The caller's idempotency key, if it gave one.
    pub idempotency_key: Option<String>,
    /// Digest of tool + arguments, to tell a true retry from a key reused for other work.
    pub fingerprint: String,
    /// How many times execution has started (1 for the first run).
    pub attempt: u32,
    /// The node that holds the execution lease.
    pub lease_owner: Option<String>,
    /// When the lease runs out, Unix ms.
    pub lease_until: Option<u64>,
    /// When the task reached a terminal status, Unix ms.
    pub finished_at: Option<u64>,
    /// What the handler saved to resume from (e.g. the upstream task it follows): a task that has
    /// one is run again after an interruption, and the new run finds it in
    /// [`TaskContext::checkpoint`](crate::TaskContext::checkpoint). Cleared when the task finishes.
    #[serde(default)]
    pub checkpoint: Option<Value>,
    /// Where the task's events are sent ([`crate::webhook`]), as registered when it was created.
    /// Never serialized with the record: the targets hold their signing secrets.
    #[serde(skip)]
    pub webhooks: Vec<WebhookTarget>,
}

impl TaskRecord {
    /// When retention ends (`created_at + ttl`), if it ever does.
    pub fn expires_at(&self) -> Option<u64> {
        self.ttl_ms.map(|t| self.created_at.saturating_add(t))
    }
}

/// What a caller asks for when starting a task. Defaults: the empty owner, no session.
#[derive(Clone, Debug, PartialEq)]
pub struct NewTask {
    /// Handler name.
    pub tool: String,
    /// Handler arguments.
    pub arguments: Value,
    /// Principal. Empty unless set: tasks that belong to a principal must set it, since idempotency
    /// keys, active limits and listing are all per owner.
    pub owner: String,
    /// Session.
    pub session: Option<String>,
    /// Wire-era label.
    pub era: String,
    /// Opaque wire metadata to keep with the task.
    pub request_meta: Value,
    /// Requested retention in ms (`None`: the configured default). Clamped to the configured bounds.
    pub requested_ttl_ms: Option<u64>,
    /// Retention counted from when the task finishes instead of from creation (already granted by the
    /// caller, e.g. with [`EngineConfig::grant_ttl`](crate::EngineConfig::grant_ttl)).
    pub retain_after_finish_ms: Option<u64>,
    /// Idempotency key.
    pub idempotency_key: Option<String>,
    /// Refuse the task when its owner already has this many unfinished tasks.
    pub active_limit: Option<ActiveLimit>,
    /// Count what the task holds while it runs on this node (its arguments' size) under a key, and
    /// refuse it when the key's runs would hold more than a maximum.
    pub held: Option<HeldLimit>,
    /// Where the task's events are sent (kept with the task; see [`crate::webhook`]).
    pub webhooks: Vec<WebhookTarget>,
}

/// A cap on what the runs of one key (a principal) hold on this node at once, checked when a task is
/// submitted: its `bytes` count from then until its run ends here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLimit {
    /// Whose runs.
    pub key: String,
    /// What this task holds (e.g. its arguments' size in bytes).
    pub bytes: u64,
    /// At most this much for the key's runs together.
    pub max: u64,
}

/// A cap on unfinished tasks, checked atomically with a create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveLimit {
    /// At most this many unfinished (`working` / `input_required`) tasks…
    pub max: usize,
    /// …of this owner…
    pub owner: String,
    /// …among these of its tasks.
    pub among: Among,
}

/// Which of an owner's tasks an [`ActiveLimit`] counts, by the tasks' `session`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Among {
    /// All of them.
    All,
    /// Those of one session.
    Session(String),
    /// Those of every session whose id starts with this prefix: a server that gives the sessions of
    /// one client a common prefix counts them together.
    SessionsStartingWith(String),
}

impl Among {
    /// Whether a task in `session` is counted.
    pub fn counts(&self, session: Option<&str>) -> bool {
        match self {
            Among::All => true,
            Among::Session(s) => session == Some(s.as_str()),
            Among::SessionsStartingWith(p) => session.is_some_and(|s| s.starts_with(p.as_str())),
        }
    }
}

impl NewTask {
    /// A task for `tool` with `arguments` and every other field at its default. The owner is the
    /// empty string: set [`NewTask::owner`] for a task that belongs to a principal.
    pub fn new(tool: impl Into<String>, arguments: Value) -> NewTask {
        NewTask {
            tool: tool.into(),
            arguments,
            owner: String::new(),
            session: None,
            era: String::new(),
            request_meta: Value::Null,
            requested_ttl_ms: None,
            retain_after_finish_ms: None,
            idempotency_key: None,
            active_limit: None,
            held: None,
            webhooks: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_states_have_no_exit() {
        for from in TaskStatus::ALL.into_iter().filter(|s| s.is_terminal()) {
            for to in TaskStatus::ALL {
                assert!(!from.can_become(to), "{from} -> {to}");
            }
        }
    }

    #[test]
    fn active_states_reach_everything_else() {
        assert!(TaskStatus::Working.can_become(TaskStatus::InputRequired));
        assert!(TaskStatus::InputRequired.can_become(TaskStatus::Working));
        assert!(TaskStatus::InputRequired.can_become(TaskStatus::Cancelled));
        assert!(!TaskStatus::Working.can_become(TaskStatus::Working));
    }
}

/// A request for input a task sent to its client (an elicitation, a sampling request, …), stored with
/// the task so any node can deliver it and route the answer back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InputRecord {
    /// Random key; also the id of the request on the wire.
    pub key: String,
    /// The task that asked.
    pub task_id: String,
    /// The request's method (e.g. `elicitation/create`).
    pub method: String,
    /// The request's params.
    pub params: Value,
    /// When it was asked, Unix ms.
    pub created_at: u64,
    /// The answer, once there is one.
    pub response: Option<InputResponse>,
    /// When it was answered, Unix ms.
    pub answered_at: Option<u64>,
}

/// The client's answer to an input request: a result object or a JSON-RPC error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum InputResponse {
    /// The result object (e.g. an `ElicitResult`).
    Result {
        /// The result.
        value: Value,
    },
    /// The client answered with an error.
    Error {
        /// Error code.
        code: i64,
        /// Error message.
        message: String,
        /// Error details.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<Value>,
    },
}
