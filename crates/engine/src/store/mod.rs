//! Storage: the [`TaskStore`] trait every backend implements, and the backends.
//!
//! Invariants every store keeps (and [`testkit`] checks):
//! - a write returns only after it is durable (for SQLite: committed);
//! - [`TaskStore::update`] is an atomic compare-and-set on the status, so of two racing terminal
//!   transitions exactly one wins and the loser gets the winner's record;
//! - a terminal status never changes again; `progress` and `progress_total` never decrease, and the
//!   total is never below the progress (the rules are in one place, [`TaskChange::progress`]);
//! - nothing that is still running is ever purged, and a purged task's input requests (answered or
//!   not) are removed with it in the same atomic step;
//! - a status change that makes webhook events writes them to the outbox in the same atomic step
//!   ([`crate::webhook`]); they outlive their task (a purge leaves them to be delivered).

mod change;
mod errors;
pub mod memory;
pub mod postgres;
pub mod sqlite;
pub mod testkit;

pub(crate) use change::{
    after_answer, apply_change, claim_orphan, held_by_holder, write_base, ProgressState,
};
pub use change::{ProgressUpdate, TaskChange};
pub(crate) use errors::Context;
pub use errors::{error_chain, AnswerError, Handed, StoreError, UpdateError};

use async_trait::async_trait;
use serde_json::Value;
use std::sync::Arc;
use thiserror::Error;

pub use crate::model::{ActiveLimit, Among};
use crate::model::{
    InputRecord, InputResponse, Outcome, StepRecord, TaskRecord, TaskStatus, Transition,
};
use crate::webhook::{Delivery, DeliveryAttempt, DeliveryNext, DeliveryQuery};

/// Result of [`TaskStore::create`].
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

/// Which tasks an operator looks at ([`TaskStore::search`]); unset fields select everything.
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

/// Unfinished tasks by status ([`TaskStore::count_active`]).
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
}

/// Finished tasks by how they ended ([`TaskStore::count_finished`]).
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

/// Which tasks [`TaskStore::list`] returns.
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
    /// purge policy's `session_idle_ms`.
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

/// A cap on live sessions, checked atomically with [`TaskStore::create_session`]. Sessions past
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

/// What [`TaskStore::purge`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    /// Tasks whose retention ended (tombstoned).
    pub tasks: usize,
    /// Tombstones past their own retention.
    pub tombstones: usize,
    /// Idle sessions.
    pub sessions: usize,
}

/// Retention settings for [`TaskStore::purge`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PurgePolicy {
    /// Now, Unix ms.
    pub now: u64,
    /// A finished task stays at least this long after it finished, even past its TTL.
    pub finished_grace_ms: u64,
    /// How long a tombstone answers "expired" before the id becomes "not found".
    pub tombstone_ms: u64,
    /// Sessions idle longer than this are removed (those with their own `idle_ms`: longer than that).
    pub session_idle_ms: u64,
    /// Instead of the expired tasks: every task that finished before this time (Unix ms), whatever
    /// its retention (an operator's purge).
    pub finished_before: Option<u64>,
}

/// The storage contract of the engine. Every method is one atomic operation.
#[async_trait]
pub trait TaskStore: Send + Sync + 'static {
    /// Stores a new task, unless `task.idempotency_key` is already used by the same owner: then the
    /// existing task is returned when its fingerprint matches, and
    /// [`StoreError::IdempotencyConflict`] otherwise. With `limit`, refuses with
    /// [`StoreError::TooManyActive`] when the cap is reached (checked in the same atomic step).
    /// Durable before it returns.
    async fn create(
        &self,
        task: TaskRecord,
        limit: Option<ActiveLimit>,
    ) -> Result<Created, StoreError>;

    /// Looks a task up by id.
    async fn get(&self, id: &str) -> Result<Lookup, StoreError>;

    /// The stored tasks among `ids` (those gone are left out), in no particular order. Stores with a
    /// cheaper way than one [`TaskStore::get`] each override it.
    async fn get_many(&self, ids: &[String]) -> Result<Vec<TaskRecord>, StoreError> {
        let mut found = Vec::with_capacity(ids.len());
        for id in ids {
            if let Lookup::Found(t) = self.get(id).await? {
                found.push(t);
            }
        }
        Ok(found)
    }

    /// The task `owner` created with idempotency key `key`, while it is stored (a purged task frees its
    /// key).
    async fn find_by_key(&self, owner: &str, key: &str) -> Result<Option<TaskRecord>, StoreError>;

    /// Applies `change` if the task's status is in `expect` (compare-and-set), stamping `updated_at`
    /// with `now`. Returns the updated record.
    async fn update(
        &self,
        id: &str,
        expect: &[TaskStatus],
        change: TaskChange,
        now: u64,
    ) -> Result<TaskRecord, UpdateError>;

    /// Lists one owner's tasks (optionally one session's), oldest first, a page at a time.
    /// An unknown or malformed cursor is an error the caller reports as invalid params.
    async fn list(&self, query: &ListQuery) -> Result<Result<TaskPage, InvalidCursor>, StoreError>;

    /// Stores a new input request of an active task and moves the task to `input_required` (one atomic
    /// step). Returns the task after the change.
    async fn add_input(&self, input: InputRecord, now: u64) -> Result<TaskRecord, UpdateError>;

    /// Records the answer to the input request `key`, and moves its task back to `working` when no
    /// other request is pending (one atomic step). The first answer wins; later ones are rejected.
    async fn answer_input(
        &self,
        key: &str,
        response: InputResponse,
        now: u64,
    ) -> Result<(TaskRecord, InputRecord), AnswerError>;

    /// One input request by key.
    async fn get_input(&self, key: &str) -> Result<Option<InputRecord>, StoreError>;

    /// Hands the sending of input request `key` from one client stream to another: its holder
    /// becomes `to` (`None`: nobody) if it is `from` now. Replicas use it so that a question goes out
    /// on one stream at a time, whichever replica holds that stream. A store only one process can open
    /// keeps no holder (that process knows its own streams) and hands over every time.
    async fn hand_input(
        &self,
        key: &str,
        from: Option<&str>,
        to: Option<&str>,
    ) -> Result<Handed, StoreError>;

    /// A task's input requests, oldest first (answered ones included).
    async fn inputs(&self, task_id: &str) -> Result<Vec<InputRecord>, StoreError>;

    /// Tasks waiting for input whose retention ended before `now` (they are failed, not purged).
    async fn overdue_waiting(&self, now: u64) -> Result<Vec<TaskRecord>, StoreError>;
    /// How many tasks are `working` and how many `input_required`, across every node.
    async fn count_active(&self) -> Result<ActiveCounts, StoreError>;
    /// Finished tasks created at or after `created_after` (Unix ms), by how they ended, across every
    /// node: a count, not a read of the tasks (the dashboard asks every few seconds).
    async fn count_finished(&self, created_after: u64) -> Result<FinishedCounts, StoreError>;
    /// The status changes of task `task_id` after its creation, oldest first (purged with it).
    async fn history(&self, task_id: &str) -> Result<Vec<Transition>, StoreError>;
    /// Every principal's tasks that `filter` selects, newest first (an operator's view).
    async fn search(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>, StoreError>;

    /// Records `step` in its task's journal, durably, if `node` holds the task's lease and the task
    /// is unfinished; otherwise [`UpdateError::Conflict`] with the task (or [`UpdateError::NotFound`]).
    /// A place (`seq`) already taken is a conflict too: the first record of a step stays. Steps go
    /// with their task when it is purged.
    async fn record_step(&self, node: &str, step: StepRecord) -> Result<(), UpdateError>;
    /// The task's journal, in step order.
    async fn steps(&self, task_id: &str) -> Result<Vec<StepRecord>, StoreError>;

    /// Extends the leases `node` holds on `ids` to `until`. Returns the ids whose lease it could not
    /// extend: the task is finished, gone, or leased by another node. Their handlers must stop.
    async fn renew_leases(
        &self,
        node: &str,
        ids: &[String],
        until: u64,
    ) -> Result<Vec<String>, StoreError>;

    /// Takes over unfinished tasks that nobody runs: those whose lease expired before `now`, or, with
    /// `all`, every unfinished task (for a store only one process can open). Each gets `node` as lease
    /// owner until `lease_until` and the change `plan` gives it (applied as by [`TaskStore::update`]
    /// at `now`: failing it, or setting it up to run again), all in one step; a task `plan` answers
    /// `None` for is left as it is. Returns the changed tasks. One step rather than a claim and then
    /// an update per task: recovery of 100,000 tasks is one pass over the store.
    async fn claim_orphans(
        &self,
        node: &str,
        now: u64,
        all: bool,
        lease_until: u64,
        plan: OrphanPlan,
    ) -> Result<Vec<TaskRecord>, StoreError>;

    /// Removes finished tasks past retention (leaving tombstones) together with their input requests,
    /// old tombstones and idle sessions.
    async fn purge(&self, policy: PurgePolicy) -> Result<Purged, StoreError>;

    /// Creates or replaces a session.
    async fn put_session(&self, session: &SessionRecord) -> Result<(), StoreError>;
    /// Creates a session unless `limit` is reached: [`StoreError::TooManySessions`] then, and
    /// nothing stored. The count and the insert are one atomic step (across replicas too).
    async fn create_session(
        &self,
        session: &SessionRecord,
        limit: &SessionLimit,
    ) -> Result<(), StoreError>;
    /// Reads a session.
    async fn get_session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError>;
    /// Marks a session as used at `now`; returns `false` when it no longer exists (purged or deleted)
    /// or is past its own idle limit (it is not brought back).
    async fn touch_session(&self, id: &str, now: u64) -> Result<bool, StoreError>;
    /// Deletes a session; returns whether it existed.
    async fn delete_session(&self, id: &str) -> Result<bool, StoreError>;

    /// Whether only one process can use this store at a time (memory, SQLite). Then every unfinished
    /// task found at start-up belongs to a run that is gone.
    fn is_exclusive(&self) -> bool;

    /// Claims up to `limit` webhook deliveries for `node` until `lease_until`, oldest due first:
    /// pending, due by `now`, not leased by another node until after `now`, and each the oldest
    /// pending event of its task and target (so a task's events go out in order). One step: among
    /// replicas, one claims each. Each comes with its target's secret, which a store keeps once,
    /// with the task's targets, and copies into an event only when the task is purged before it.
    async fn claim_deliveries(
        &self,
        node: &str,
        now: u64,
        lease_until: u64,
        limit: usize,
    ) -> Result<Vec<Delivery>, StoreError>;

    /// Keeps `attempt` of delivery `id` and moves it on as `next` says, if `node` still holds its
    /// lease (otherwise nothing changes and the answer is `false`). [`DeliveryNext::Gone`] settles
    /// the later pending events of the same task and target too.
    async fn finish_delivery(
        &self,
        id: &str,
        node: &str,
        attempt: DeliveryAttempt,
        next: DeliveryNext,
    ) -> Result<bool, StoreError>;

    /// Deliveries for an operator, newest first, without their secrets (`secret` is empty).
    async fn deliveries(&self, query: &DeliveryQuery) -> Result<Vec<Delivery>, StoreError>;

    /// The attempts made to deliver `id`, oldest first.
    async fn delivery_attempts(&self, id: &str) -> Result<Vec<DeliveryAttempt>, StoreError>;

    /// Makes delivery `id` pending again, due at `now` and unleased (an operator's redelivery, even
    /// of one delivered or given up). `false` when there is no such delivery.
    async fn redeliver(&self, id: &str, now: u64) -> Result<bool, StoreError>;

    /// Removes deliveries settled (delivered, failed, gone) and written before `before`, with their
    /// attempts. Returns how many went. Pending ones stay whatever their age: the delivery loop
    /// gives them up at the maximum age.
    async fn purge_deliveries(&self, before: u64) -> Result<usize, StoreError>;

    /// Lets go of the pending deliveries `node` holds (it is stopping: another node may send them at
    /// once instead of when the lease runs out). Returns how many.
    async fn release_deliveries(&self, node: &str) -> Result<usize, StoreError>;

    /// How many unfinished tasks of `owner` carry a webhook their client registered (a target that
    /// is not an operator's subscription), counted up to `max`: what the cap on registrations per
    /// principal reads.
    async fn count_registrations(&self, owner: &str, max: u64) -> Result<u64, StoreError>;
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

/// What recovery does with one orphaned task (see [`TaskStore::claim_orphans`]): the change to
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
