//! The storage contract, by concern: [`TaskRows`], [`InputStore`], [`JournalStore`],
//! [`LeaseStore`], [`SessionStore`], [`OutboxStore`] and [`EventStore`], and [`TaskStore`], which
//! is all of them.
//!
//! A backend implements each sub-trait (and gets [`TaskStore`] for free); a feature widens the one
//! sub-trait it needs, and its part of [`testkit`](super::testkit) checks every backend. Callers
//! bring the methods into scope with `use mcp_tasks_engine::store::prelude::*`. No method has a
//! default body that succeeds without doing the work: the one default ([`TaskRows::get_many`])
//! does the same work another way.

use async_trait::async_trait;

use super::{
    ActiveCounts, ActiveLimit, AnswerError, Created, FinishedCounts, Handed, InvalidCursor,
    ListQuery, Lookup, OrphanPlan, PurgePolicy, Purged, SessionLimit, SessionRecord, StoreError,
    TaskChange, TaskFilter, TaskPage, UpdateError,
};
use crate::events::{
    EventDelivery, EventDeliveryState, EventGap, EventPage, EventPosition, EventQuery,
    EventSubscription, EventsPurged, NewEvent, Subscribed, SubscriptionStart,
};
use crate::model::{
    InputRecord, InputResponse, NewSignal, SignalRecord, StepRecord, TaskRecord, TaskStatus,
    Transition,
};
use crate::webhook::{Delivery, DeliveryAttempt, DeliveryNext, DeliveryQuery};

/// Tasks themselves: their creation, reads, compare-and-set updates, lists and counts, history,
/// and retention. The part of the contract everything else hangs off.
#[async_trait]
pub trait TaskRows: Send + Sync + 'static {
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
    /// cheaper way than one [`TaskRows::get`] each override it.
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

    /// How many tasks are `working` and how many `input_required`, across every node.
    async fn count_active(&self) -> Result<ActiveCounts, StoreError>;

    /// Finished tasks created at or after `created_after` (Unix ms), by how they ended, across every
    /// node: a count, not a read of the tasks (the dashboard asks every few seconds).
    async fn count_finished(&self, created_after: u64) -> Result<FinishedCounts, StoreError>;

    /// The status changes of task `task_id` after its creation, oldest first (purged with it).
    async fn history(&self, task_id: &str) -> Result<Vec<Transition>, StoreError>;

    /// Every principal's tasks that `filter` selects, newest first (an operator's view).
    async fn search(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>, StoreError>;

    /// Removes finished tasks past retention (leaving tombstones) together with everything that is
    /// theirs (input requests, journal steps), and old tombstones. Their webhook events stay to be
    /// delivered. Sessions have their own retention ([`SessionStore::purge_sessions`]).
    async fn purge(&self, policy: PurgePolicy) -> Result<Purged, StoreError>;
}

/// Input requests (`input_required`): a task's questions, their answers, and which client stream
/// sends each one.
#[async_trait]
pub trait InputStore: Send + Sync + 'static {
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
}

/// The step journal: what a durable handler's steps returned, so that a run after a hand-off or a
/// restart replays them instead of doing them again.
#[async_trait]
pub trait JournalStore: Send + Sync + 'static {
    /// Records `step` in its task's journal, durably, if `node` holds the task's lease and the task
    /// is unfinished; otherwise [`UpdateError::Conflict`] with the task (or [`UpdateError::NotFound`]).
    /// A place (`seq`) already taken is a conflict too: the first record of a step stays. Steps go
    /// with their task when it is purged.
    async fn record_step(&self, node: &str, step: StepRecord) -> Result<(), UpdateError>;

    /// The task's journal, in step order.
    async fn steps(&self, task_id: &str) -> Result<Vec<StepRecord>, StoreError>;

    /// Deletes the task's steps at places `from` and after (all of them for 0); returns how many
    /// went. Unconditional: the caller fences the task's runs first (an operator's rewind takes the
    /// lease before, see `Engine::rewind`).
    async fn truncate_steps(&self, task_id: &str, from: u32) -> Result<usize, StoreError>;
}

/// Signals: named payloads sent to a task from outside its run (its owner, an operator, another
/// task, a third party's signed URL), kept until the task is purged, which its handler waits for.
#[async_trait]
pub trait SignalStore: Send + Sync + 'static {
    /// Stores `signal` after the task's last one (its place one more than the last), if the task
    /// is unfinished; otherwise [`UpdateError::Conflict`] with the task (or
    /// [`UpdateError::NotFound`]). A signal with a key the task already has a signal under is that
    /// signal: it is returned as it was stored, with `false` (nothing new was stored), also once
    /// the task has finished (a retried send gets the answer the first one got).
    async fn send_signal(&self, signal: NewSignal) -> Result<(SignalRecord, bool), UpdateError>;

    /// The first signal named `name` sent to the task after place `after` (0: from the first).
    async fn next_signal(
        &self,
        task_id: &str,
        name: &str,
        after: u32,
    ) -> Result<Option<SignalRecord>, StoreError>;

    /// Every signal sent to the task, in the order they were sent.
    async fn signals(&self, task_id: &str) -> Result<Vec<SignalRecord>, StoreError>;
}

/// Leases: which node runs which task, and the take-over of tasks whose node is gone.
#[async_trait]
pub trait LeaseStore: Send + Sync + 'static {
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
    /// owner until `lease_until` and the change `plan` gives it (applied as by [`TaskRows::update`]
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

    /// Whether only one process can use this store at a time (memory, SQLite). Then every unfinished
    /// task found at start-up belongs to a run that is gone.
    fn is_exclusive(&self) -> bool;
}

/// MCP sessions (2025-11-25 `Mcp-Session-Id`), shared by every replica of a store.
#[async_trait]
pub trait SessionStore: Send + Sync + 'static {
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

    /// Removes sessions idle for `idle_ms` or longer at `now` (those with their own idle limit: for
    /// that long), the sessions [`SessionRecord::is_live`] says are over. Returns how many went.
    async fn purge_sessions(&self, now: u64, idle_ms: u64) -> Result<usize, StoreError>;
}

/// The webhook outbox: the events status changes wrote (in the same step, see
/// [`TaskRows::update`]), their claims by the delivery loop, attempts and an operator's view.
#[async_trait]
pub trait OutboxStore: Send + Sync + 'static {
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

/// Events for subscribers ([`crate::events`]): the durable log, subscriptions, the verified
/// endpoints, and the deliveries fan-out writes (with the event, in the same step: a task's
/// status change writes its event in [`TaskRows::update`]'s step, a tool's event is
/// [`EventStore::append_event`]).
#[async_trait]
pub trait EventStore: Send + Sync + 'static {
    /// Appends `event` to the log, with a pending delivery for each live subscription it
    /// matches ([`crate::events::matches`]) in the same step or by a later
    /// [`EventStore::fan_out_events`]. Returns where it stands.
    async fn append_event(&self, event: NewEvent) -> Result<EventPosition, StoreError>;

    /// A page of the log for `query`, in log order.
    async fn read_events(&self, query: &EventQuery) -> Result<EventPage, StoreError>;

    /// The position of the last event committed (every event a reader can see is at or before
    /// it, and every later one will be after it): where a read or a subscription that starts
    /// "now" starts.
    async fn event_horizon(&self) -> Result<EventPosition, StoreError>;

    /// Stores `sub`, or refreshes the subscription with its id (every field but `created_at`,
    /// the delivery status, `last_delivery_at`, `last_error` and `failed_since`, and `from`, which
    /// `start` sets, is replaced), in one step. A new one is refused
    /// ([`StoreError::TooManySubscriptions`]) when its principal already has `max` live
    /// subscriptions; a refresh is never refused.
    async fn put_subscription(
        &self,
        sub: &EventSubscription,
        start: SubscriptionStart,
        max: usize,
    ) -> Result<Subscribed, StoreError>;

    /// Writes the deliveries of events committed since the last call, for a store that does not
    /// write them with the event (PostgreSQL: there a subscription stored while an event's
    /// transaction runs would miss it); how many events it went through. Among replicas one call
    /// at a time does the work, from where the last one ended. A store that writes deliveries
    /// with each event has nothing to do here (0).
    async fn fan_out_events(&self, limit: usize) -> Result<usize, StoreError>;

    /// The subscription `id`, live or not.
    async fn get_subscription(&self, id: &str) -> Result<Option<EventSubscription>, StoreError>;

    /// Removes subscription `id` and its pending deliveries; whether it existed.
    async fn delete_subscription(&self, id: &str) -> Result<bool, StoreError>;

    /// Subscriptions, of `principal` or of everyone, oldest first, at most `limit`.
    async fn subscriptions(
        &self,
        principal: Option<&str>,
        limit: usize,
    ) -> Result<Vec<EventSubscription>, StoreError>;

    /// Keeps that `principal` proved it owns the endpoint `url` (a verification), until `until`.
    async fn put_verification(
        &self,
        principal: &str,
        url: &str,
        until: u64,
    ) -> Result<(), StoreError>;

    /// Until when `principal`'s verification of `url` holds, if there is one.
    async fn verification(&self, principal: &str, url: &str) -> Result<Option<u64>, StoreError>;

    /// Claims up to `limit` event deliveries for `node` until `lease_until`, oldest due first:
    /// pending, due by `now`, not leased by another node until after `now`, their subscription
    /// still there. One step: among replicas, one claims each.
    async fn claim_event_deliveries(
        &self,
        node: &str,
        now: u64,
        lease_until: u64,
        limit: usize,
    ) -> Result<Vec<EventDelivery>, StoreError>;

    /// Settles or reschedules the delivery of `event_id` to `subscription` as `next` says, and
    /// keeps how it went on the subscription (a success for [`DeliveryNext::Delivered`]; else
    /// `failure`, the kind of failure; neither for a give-up that says nothing of the endpoint),
    /// if `node` still holds its lease (otherwise nothing changes: `false`).
    /// [`DeliveryNext::Gone`] settles this delivery only. A subscription put again from a cursor
    /// ([`SubscriptionStart::After`]) makes its deliveries after it that were given up or gone
    /// pending again, and forgets its gap.
    ///
    /// With `keep_gap`, a [`DeliveryNext::GiveUp`] also keeps the subscription's gap at this
    /// event's position (the later of it and the gap already kept, whose schedule stays; a new
    /// gap is due at once), in the same step and only if the lease was held: see
    /// [`EventStore::due_event_gaps`].
    #[allow(clippy::too_many_arguments)]
    async fn finish_event_delivery(
        &self,
        subscription: &str,
        event_id: &str,
        node: &str,
        attempt: &DeliveryAttempt,
        next: DeliveryNext,
        failure: Option<&str>,
        keep_gap: bool,
    ) -> Result<bool, StoreError>;

    /// The deliveries to `subscription`, newest first, at most `limit`.
    async fn event_deliveries(
        &self,
        subscription: &str,
        limit: usize,
    ) -> Result<Vec<EventDeliveryState>, StoreError>;

    /// Lets go of the event deliveries `node` holds. Returns how many.
    async fn release_event_deliveries(&self, node: &str) -> Result<usize, StoreError>;

    /// Removes events written before `before` that no pending delivery still needs, settled
    /// deliveries written before it, and subscriptions (with their deliveries) and
    /// verifications ended by `now`. A later read from a position before a removed event is
    /// `truncated`.
    async fn purge_events(&self, now: u64, before: u64) -> Result<EventsPurged, StoreError>;

    /// Gaps due to be told by `now` (never told, or their retry time come), of subscriptions
    /// still live at `now`, soonest due first, at most `limit`: a gap that is not taken waits
    /// its turn behind the others instead of holding them up.
    async fn due_event_gaps(&self, now: u64, limit: usize) -> Result<Vec<EventGap>, StoreError>;

    /// Claims `subscription`'s gap to be told now, if it is still due at `now`: it is due again
    /// at `retry_at` (if this telling is not taken), one more attempt counted. One step: among
    /// replicas, one claims it; `false` when it is not due (claimed elsewhere, forgotten).
    async fn claim_event_gap(
        &self,
        subscription: &str,
        now: u64,
        retry_at: u64,
    ) -> Result<bool, StoreError>;

    /// Forgets `subscription`'s gap if it is still at `missed` (it was told, or given up on): a
    /// gap noted meanwhile stays. Whether it did.
    async fn forget_event_gap(
        &self,
        subscription: &str,
        missed: EventPosition,
    ) -> Result<bool, StoreError>;
}

/// The whole storage contract of the engine: every concern's sub-trait. Every method is one atomic
/// operation. Implemented for every type that implements the sub-traits; an engine holds an
/// `Arc<dyn TaskStore>`.
pub trait TaskStore:
    TaskRows
    + InputStore
    + JournalStore
    + SignalStore
    + LeaseStore
    + SessionStore
    + OutboxStore
    + EventStore
{
}

impl<S> TaskStore for S where
    S: TaskRows
        + InputStore
        + JournalStore
        + SignalStore
        + LeaseStore
        + SessionStore
        + OutboxStore
        + EventStore
{
}
