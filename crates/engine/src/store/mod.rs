//! Storage: the [`TaskStore`] contract every backend implements, split by concern into sub-traits
//! ([`TaskRows`], [`InputStore`], [`JournalStore`], [`LeaseStore`], [`SessionStore`],
//! [`OutboxStore`], [`EventStore`]; see `contract.rs`), and the backends.
//!
//! Invariants every store keeps (and [`testkit`] checks):
//! - a write returns only after it is durable (for SQLite: committed);
//! - [`TaskRows::update`] is an atomic compare-and-set on the status, so of two racing terminal
//!   transitions exactly one wins and the loser gets the winner's record;
//! - a terminal status never changes again; `progress` and `progress_total` never decrease, and the
//!   total is never below the progress (the rules are in one place, [`TaskChange::progress`]);
//! - nothing that is still running is ever purged, and a purged task's input requests (answered or
//!   not) are removed with it in the same atomic step;
//! - a status change that makes webhook events writes them to the outbox in the same atomic step
//!   ([`crate::webhook`]); they outlive their task (a purge leaves them to be delivered);
//! - so does a status change that makes a task event ([`crate::events`]), with a delivery for
//!   each subscription it matches.

mod change;
mod contract;
mod errors;
pub mod memory;
pub mod postgres;
pub mod sqlite;
pub mod testkit;

pub(crate) use change::{
    after_answer, apply_change, claim_orphan, held_by_holder, storable_text, write_base,
    ProgressState,
};
pub use change::{ProgressUpdate, TaskChange};
pub use contract::{
    EventStore, InputStore, JournalStore, LeaseStore, OutboxStore, SessionStore, SignalStore,
    TaskRows, TaskStore,
};
pub(crate) use errors::Context;
pub use errors::{error_chain, AnswerError, Handed, StoreError, UpdateError};

/// The store's traits, for callers: `use mcp_tasks_engine::store::prelude::*` brings every
/// method of an `Arc<dyn TaskStore>` into scope.
pub mod prelude {
    pub use super::{
        EventStore, InputStore, JournalStore, LeaseStore, OutboxStore, SessionStore, SignalStore,
        TaskRows, TaskStore,
    };
}

use serde_json::Value;
use std::sync::Arc;
use thiserror::Error;

pub use crate::model::{ActiveLimit, Among};
use crate::model::{Outcome, TaskRecord, TaskStatus};

/// Result of [`TaskRows::create`].
#[derive(Debug, Clone, PartialEq)]
pub enum Created {
    /// A new task was stored.
    New(TaskRecord),
    /// The idempotency key matched an existing task for the same work; nothing was stored.
    Existing(TaskRecord),
}

/// Result of looking a task up by id.
// Almost every lookup finds the task, so boxing the large variant would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// The task exists.
    Found(TaskRecord),
    /// The task existed but its retention ran out; only a tombstone is left.
    Expired {
        /// Who owned it.
        owner: String,
        /// Its session.
        session: Option<String>,
    },
    /// Never existed, or the tombstone is gone too.
    Missing,
}

/// Which tasks an operator looks at ([`TaskRows::search`]); unset fields select everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskFilter {
    /// Only tasks in one of these statuses (empty: any).
    pub statuses: Vec<TaskStatus>,
    /// Only this tool's.
    pub tool: Option<String>,
    /// Only this principal's.
    pub owner: Option<String>,
    /// Only tasks created at or after this time (Unix ms).
    pub created_after: Option<u64>,
    /// Only tasks created before this time (Unix ms).
    pub created_before: Option<u64>,
    /// At most this many.
    pub limit: usize,
}

impl TaskFilter {
    /// Whether `t` is selected (the memory store's check, and the rule the SQL stores follow).
    pub fn selects(&self, t: &TaskRecord) -> bool {
        (self.statuses.is_empty() || self.statuses.contains(&t.status))
            && self.tool.as_ref().is_none_or(|x| *x == t.tool)
            && self.owner.as_ref().is_none_or(|x| *x == t.owner)
            && self.created_after.is_none_or(|x| t.created_at >= x)
            && self.created_before.is_none_or(|x| t.created_at < x)
    }

    /// The statuses as one `,a,b,` string for SQL matching, when any are given.
    pub(crate) fn status_list(&self) -> Option<String> {
        (!self.statuses.is_empty()).then(|| {
            let names: Vec<&str> = self.statuses.iter().map(|s| s.as_str()).collect();
            format!(",{},", names.join(","))
        })
    }
}

/// Unfinished tasks by status ([`TaskRows::count_active`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ActiveCounts {
    /// Tasks `working`.
    pub working: u64,
    /// Tasks `input_required`.
    pub input_required: u64,
}

impl ActiveCounts {
    /// Counts one task of `status` (other statuses are not counted).
    pub fn add(&mut self, status: TaskStatus) {
        match status {
            TaskStatus::Working => self.working += 1,
            TaskStatus::InputRequired => self.input_required += 1,
            _ => {}
        }
    }

    /// Counts `n` tasks of status `status` (as stored; a store's count may come back negative or
    /// as another status, neither counted).
    pub(crate) fn add_count(&mut self, status: &str, n: i64) {
        let n = u64::try_from(n).unwrap_or(0);
        match TaskStatus::parse(status) {
            Some(TaskStatus::Working) => self.working += n,
            Some(TaskStatus::InputRequired) => self.input_required += n,
            _ => {}
        }
    }
}

/// Finished tasks by how they ended ([`TaskRows::count_finished`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FinishedCounts {
    /// `completed` with a result that is not a tool error.
    pub completed: u64,
    /// `completed` with a result that reports a tool error (`is_error`).
    pub completed_with_error: u64,
    /// `failed` (a protocol-level error).
    pub failed: u64,
    /// `cancelled`.
    pub cancelled: u64,
}

impl FinishedCounts {
    /// Counts one task (unfinished ones are not counted).
    pub fn add(&mut self, t: &TaskRecord) {
        match (t.status, &t.outcome) {
            (TaskStatus::Completed, Some(Outcome::Result { is_error: true, .. })) => {
                self.completed_with_error += 1
            }
            (TaskStatus::Completed, _) => self.completed += 1,
            (TaskStatus::Failed, _) => self.failed += 1,
            (TaskStatus::Cancelled, _) => self.cancelled += 1,
            _ => {}
        }
    }

    /// Counts `n` tasks of status `status` (as stored) that ended with a tool error or not.
    pub(crate) fn add_count(&mut self, status: &str, is_error: bool, n: u64) {
        match (TaskStatus::parse(status), is_error) {
            (Some(TaskStatus::Completed), true) => self.completed_with_error += n,
            (Some(TaskStatus::Completed), false) => self.completed += n,
            (Some(TaskStatus::Failed), _) => self.failed += n,
            (Some(TaskStatus::Cancelled), _) => self.cancelled += n,
            _ => {}
        }
    }
}

/// The smallest task id made at or after `ms` (see `ids::task_id`): where a range of ids by creation
/// time starts.
pub(crate) fn id_floor(ms: u64) -> String {
    format!("{:012x}", ms & 0xffff_ffff_ffff)
}

/// Where the strings that start with `prefix` end, in byte order (and so in code-point order): the
/// prefix with its last character raised by one, or `None` when no string is past them all. A range
/// `[prefix, end)` of an index holds exactly the strings that start with `prefix`.
pub(crate) fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = (u32::from(last) + 1..=u32::from(char::MAX)).find_map(char::from_u32);
        if let Some(c) = next {
            chars.push(c);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// Which tasks [`TaskRows::list`] returns.
#[derive(Debug, Clone, PartialEq)]
pub struct ListQuery {
    /// Only this principal's tasks.
    pub owner: String,
    /// Only this session's tasks, when set.
    pub session: Option<String>,
    /// Continue after this cursor (from a previous page).
    pub cursor: Option<String>,
    /// Page size.
    pub limit: usize,
}

/// A page of tasks, oldest first.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskPage {
    /// The tasks.
    pub tasks: Vec<TaskRecord>,
    /// Cursor for the next page, when there is one.
    pub next_cursor: Option<String>,
}

impl TaskPage {
    /// The page of `tasks` (at most a page's worth, in list order); `more` when the list goes on, so
    /// the page carries a cursor after its last task.
    pub(crate) fn new(tasks: Vec<TaskRecord>, more: bool) -> TaskPage {
        let next_cursor = if more {
            tasks.last().map(|t| encode_cursor(t.created_at, &t.id))
        } else {
            None
        };
        TaskPage { tasks, next_cursor }
    }
}

/// A client session as a record, so any node can serve any request of it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRecord {
    /// Random session id.
    pub id: String,
    /// Principal that opened it.
    pub owner: String,
    /// Wire-level state (negotiated version, client capabilities, log level), opaque to the engine.
    pub data: Value,
    /// Creation time, Unix ms.
    pub created_at: u64,
    /// Last request, Unix ms.
    pub last_seen: u64,
    /// How long it may stay unused before it ends: this session's own limit, instead of the
    /// `idle_ms` [`SessionStore::purge_sessions`] is given.
    pub idle_ms: Option<u64>,
}

impl SessionRecord {
    /// Whether it is still live at `now`: not past its own idle limit (a session without one
    /// lives until the purge takes it).
    pub fn is_live(&self, now: u64) -> bool {
        self.idle_ms
            .is_none_or(|idle| self.last_seen.saturating_add(idle) > now)
    }
}

/// A cap on live sessions, checked atomically with [`SessionStore::create_session`]. Sessions past
/// their own idle limit do not count, purged or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionLimit {
    /// At most this many live sessions of the new session's owner…
    pub max: usize,
    /// …and at most `.1` of them whose id starts with `.0` (the new session's id must).
    pub per_prefix: Option<(String, usize)>,
}

impl SessionLimit {
    /// Whether a new session fits beside `of_prefix` live sessions with its prefix and `all` live
    /// sessions of its owner: [`StoreError::TooManySessions`] (the prefix's cap first) when not.
    pub(crate) fn check(&self, of_prefix: usize, all: usize) -> Result<(), StoreError> {
        if let Some((_, max)) = &self.per_prefix {
            if of_prefix >= *max {
                return Err(StoreError::TooManySessions {
                    live: of_prefix,
                    max: *max,
                    of_prefix: true,
                });
            }
        }
        if all >= self.max {
            return Err(StoreError::TooManySessions {
                live: all,
                max: self.max,
                of_prefix: false,
            });
        }
        Ok(())
    }
}

/// What [`TaskRows::purge`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    /// Tasks whose retention ended (tombstoned).
    pub tasks: usize,
    /// Tombstones past their own retention.
    pub tombstones: usize,
}

/// Retention settings for [`TaskRows::purge`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PurgePolicy {
    /// Now, Unix ms.
    pub now: u64,
    /// A finished task stays at least this long after it finished, even past its TTL.
    pub finished_grace_ms: u64,
    /// How long a tombstone answers "expired" before the id becomes "not found".
    pub tombstone_ms: u64,
    /// Instead of the expired tasks: every task that finished before this time (Unix ms), whatever
    /// its retention (an operator's purge).
    pub finished_before: Option<u64>,
}

/// A `tasks/list` cursor that this store did not issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("invalid cursor")]
pub struct InvalidCursor;

/// Encodes a list position as an opaque cursor.
pub(crate) fn encode_cursor(created_at: u64, id: &str) -> String {
    hex::encode(format!("{created_at}:{id}"))
}

/// Decodes a cursor made by [`encode_cursor`].
pub(crate) fn decode_cursor(cursor: &str) -> Result<(u64, String), InvalidCursor> {
    let bytes = hex::decode(cursor).map_err(|_| InvalidCursor)?;
    let text = String::from_utf8(bytes).map_err(|_| InvalidCursor)?;
    let (at, id) = text.split_once(':').ok_or(InvalidCursor)?;
    let at = at.parse().map_err(|_| InvalidCursor)?;
    if id.is_empty() || id.len() > 128 {
        return Err(InvalidCursor);
    }
    Ok((at, id.to_string()))
}

/// What recovery does with one orphaned task (see [`LeaseStore::claim_orphans`]): the change to
/// apply, or `None` to leave the task alone. Called inside the store's write, so keep it quick.
pub type OrphanPlan = Arc<dyn Fn(&TaskRecord) -> Option<TaskChange> + Send + Sync>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_range_holds_exactly_the_strings_with_the_prefix() {
        assert_eq!(prefix_end("ab-").as_deref(), Some("ab."));
        assert_eq!(prefix_end("a\u{d7ff}").as_deref(), Some("a\u{e000}"));
        assert_eq!(prefix_end("a\u{10ffff}").as_deref(), Some("b"));
        assert_eq!(prefix_end("\u{10ffff}"), None);
        assert_eq!(prefix_end(""), None);
        let end = prefix_end("ab-").unwrap();
        for (s, inside) in [
            ("ab-", true),
            ("ab-zz", true),
            ("ab", false),
            ("ab.", false),
            ("ab,", false),
        ] {
            assert_eq!(s >= "ab-" && s < end.as_str(), inside, "{s}");
        }
    }

    #[test]
    fn a_chain_shows_the_context_and_each_cause_once() {
        let e = StoreError::backend("insert task t1", std::io::Error::other("disk full"));
        assert_eq!(e.chain(), "task store error: insert task t1: disk full");
        assert_eq!(
            StoreError::message("the writer stopped").chain(),
            "task store error: the writer stopped"
        );
        let wrapped = UpdateError::Store(StoreError::backend("read task t1", e));
        assert_eq!(
            error_chain(&wrapped),
            "task store error: read task t1: task store error: insert task t1: disk full"
        );

        /// An error that repeats its cause in its own message, as some library errors do.
        #[derive(Debug, Error)]
        #[error("failed: {0}")]
        struct Repeats(#[source] std::io::Error);
        let r = Repeats(std::io::Error::other("no space"));
        assert_eq!(error_chain(&r), "failed: no space");
    }
}
