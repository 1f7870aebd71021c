//! What goes wrong in a store: the backend's failures (each with what the store was doing and its
//! cause), and the refusals of a compare-and-set, an answer or a hand-over.

use thiserror::Error;

use super::TaskRecord;
use crate::model::TaskStatus;

/// A failure of the storage backend itself.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The backend failed. `context` says what the store was doing; the cause, when there is one, is
    /// the error's [`source()`](std::error::Error::source) (render the whole chain with
    /// [`StoreError::chain`]).
    #[error("task store error: {context}")]
    Backend {
        /// What the store was doing, e.g. "insert task 1f2e…" or "open /var/lib/tasks.db".
        context: String,
        /// The error that caused it, if any.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    },
    /// The owner already has as many unfinished tasks as its limit allows.
    #[error("too many unfinished tasks: {active} running, the limit is {max}")]
    TooManyActive {
        /// Unfinished tasks now.
        active: usize,
        /// The limit.
        max: usize,
    },
    /// The owner (or the group of its sessions a [`SessionLimit`](super::SessionLimit) names) already has as many live
    /// sessions as the limit allows.
    #[error("too many sessions: {live} live, the limit is {max}")]
    TooManySessions {
        /// Live sessions now.
        live: usize,
        /// The limit.
        max: usize,
        /// Whether it is the limit of the sessions with the limit's prefix (else the owner's).
        of_prefix: bool,
    },
    /// The principal already has as many live event subscriptions as the limit allows.
    #[error("too many event subscriptions: {live} live, the limit is {max}")]
    TooManySubscriptions {
        /// Live subscriptions now.
        live: usize,
        /// The limit.
        max: usize,
    },
    /// The same idempotency key was used for different work.
    #[error("idempotency key {key:?} was already used for a different call (task {task_id})")]
    IdempotencyConflict {
        /// The key.
        key: String,
        /// The task the key belongs to.
        task_id: String,
    },
}

impl StoreError {
    /// A backend failure while doing `context`, caused by `source`.
    pub fn backend(
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> StoreError {
        StoreError::Backend {
            context: context.into(),
            source: Some(source.into()),
        }
    }

    /// A backend failure with no underlying error to carry (e.g. the writer thread is gone).
    pub fn message(context: impl Into<String>) -> StoreError {
        StoreError::Backend {
            context: context.into(),
            source: None,
        }
    }

    /// This error and its causes as one line, "context: cause: cause…", for logs and messages.
    pub fn chain(&self) -> String {
        error_chain(self)
    }

    /// Whether trying the same operation again cannot help: the backend refused the data itself
    /// (bytes it cannot store, a value too big, a constraint, JSON that does not serialize), not
    /// its connection or its load. A run fails its task at once on such an error, and retries
    /// every other one (a lost connection, a busy or full database, an administrator's
    /// termination) until its lease runs out. The refusals of a limit or a key are permanent too.
    pub fn is_permanent(&self) -> bool {
        let StoreError::Backend { source, .. } = self else {
            return true;
        };
        let mut next: Option<&(dyn std::error::Error + 'static)> = match source {
            Some(s) => Some(s.as_ref()),
            None => None,
        };
        while let Some(cause) = next {
            if let Some(verdict) = permanent_cause(cause) {
                return verdict;
            }
            next = cause.source();
        }
        false
    }
}

/// What one cause says of an error: permanent (`Some(true)`), transient (`Some(false)`), or
/// nothing (look at its own cause).
fn permanent_cause(cause: &(dyn std::error::Error + 'static)) -> Option<bool> {
    if let Some(e) = cause.downcast_ref::<tokio_postgres::Error>() {
        // SQLSTATE classes: 22 data exception (a NUL byte, bad UTF-8, a value out of range), 23
        // integrity constraint, 42 syntax or access rule, 54 program limit (a row too big), 2B
        // dependent objects. Everything else (08 connection, 40 serialization and deadlock, 53
        // resources, 57 operator intervention, no code at all: a closed connection) may pass.
        return Some(e.as_db_error().is_some_and(|db| {
            matches!(
                db.code().code().get(..2),
                Some("22" | "23" | "42" | "54" | "2B")
            )
        }));
    }
    if let Some(e) = cause.downcast_ref::<rusqlite::Error>() {
        use rusqlite::ErrorCode as C;
        return Some(match e {
            rusqlite::Error::SqliteFailure(f, _) => matches!(
                f.code,
                C::ConstraintViolation | C::TooBig | C::TypeMismatch | C::ApiMisuse
            ),
            rusqlite::Error::ToSqlConversionFailure(_)
            | rusqlite::Error::InvalidParameterName(_)
            | rusqlite::Error::InvalidParameterCount(_, _) => true,
            _ => false,
        });
    }
    if cause.downcast_ref::<serde_json::Error>().is_some() {
        return Some(true);
    }
    None
}

/// Renders an error and its chain of causes as one line, "error: cause: cause…". A cause whose text
/// the line already ends with is left out, since some errors repeat their source in their own message.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !text.is_empty() && !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = cause.source();
    }
    out
}

/// Why an [`TaskRows::update`](super::TaskRows::update) did not apply.
#[derive(Debug, Error)]
pub enum UpdateError {
    /// No such task (or it was purged).
    #[error("task not found")]
    NotFound,
    /// The task's status was not one of the expected ones; carries the current record.
    #[error("task is {}", .0.status)]
    Conflict(Box<TaskRecord>),
    /// The backend failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The outcome of [`InputStore::hand_input`](super::InputStore::hand_input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handed {
    /// The holder is now the one asked for.
    Done,
    /// Another holder has it (the value as stored).
    HeldBy(String),
    /// Not held by anyone, although a holder was expected.
    Free,
    /// The request is answered or gone: it needs no sending.
    Gone,
}

/// Why an answer to an input request was not taken.
#[derive(Debug, Error)]
pub enum AnswerError {
    /// No input request has this key.
    #[error("no pending input request has this id")]
    Unknown,
    /// The request was answered before; the earlier answer stands.
    #[error("this input request was already answered")]
    AlreadyAnswered,
    /// The task is terminal; it no longer takes input.
    #[error("the task is already {0}")]
    TaskEnded(TaskStatus),
    /// The backend failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Turns a failed backend call into a [`StoreError`] that says what was being done and keeps the
/// failure as its source.
pub(crate) trait Context<T> {
    /// Fails with `what` as the context.
    fn context(self, what: &str) -> Result<T, StoreError>;
    /// Fails with `what()` as the context; for contexts that must be formatted.
    fn with_context(self, what: impl FnOnce() -> String) -> Result<T, StoreError>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> Context<T> for Result<T, E> {
    fn context(self, what: &str) -> Result<T, StoreError> {
        self.map_err(|e| StoreError::backend(what, e))
    }
    fn with_context(self, what: impl FnOnce() -> String) -> Result<T, StoreError> {
        self.map_err(|e| StoreError::backend(what(), e))
    }
}
