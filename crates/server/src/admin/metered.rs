//! A task store that times each of its operations into `mcp_store_operation_seconds{op}`.

use async_trait::async_trait;
use mcp_tasks_engine::events::{
    EventDelivery, EventDeliveryState, EventPage, EventPosition, EventQuery, EventSubscription,
    EventsPurged, NewEvent, Subscribed, SubscriptionStart,
};
use mcp_tasks_engine::store::prelude::*;
use mcp_tasks_engine::store::{
    ActiveCounts, ActiveLimit, AnswerError, Created, FinishedCounts, Handed, InvalidCursor,
    ListQuery, Lookup, OrphanPlan, PurgePolicy, Purged, SessionLimit, SessionRecord, StoreError,
    TaskChange, TaskFilter, TaskPage, TaskStore, UpdateError,
};
use mcp_tasks_engine::webhook::{Delivery, DeliveryAttempt, DeliveryNext, DeliveryQuery};
use mcp_tasks_engine::{
    InputRecord, InputResponse, NewSignal, SignalRecord, StepRecord, TaskRecord, TaskStatus,
    Transition,
};
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use super::Metrics;

/// `inner`, with every operation timed.
pub(crate) struct MeteredStore {
    inner: Arc<dyn TaskStore>,
    metrics: Arc<Metrics>,
}

impl MeteredStore {
    pub(crate) fn new(inner: Arc<dyn TaskStore>, metrics: Arc<Metrics>) -> MeteredStore {
        MeteredStore { inner, metrics }
    }

    async fn timed<T>(&self, op: &'static str, f: impl Future<Output = T>) -> T {
        let start = Instant::now();
        let out = f.await;
        self.metrics.store_op(op, start.elapsed());
        out
    }
}

#[async_trait]
impl TaskRows for MeteredStore {
    async fn create(
        &self,
        task: TaskRecord,
        limit: Option<ActiveLimit>,
    ) -> Result<Created, StoreError> {
        self.timed("create", self.inner.create(task, limit)).await
    }

    async fn get(&self, id: &str) -> Result<Lookup, StoreError> {
        self.timed("get", self.inner.get(id)).await
    }

    async fn get_many(&self, ids: &[String]) -> Result<Vec<TaskRecord>, StoreError> {
        self.timed("get_many", self.inner.get_many(ids)).await
    }

    async fn find_by_key(&self, owner: &str, key: &str) -> Result<Option<TaskRecord>, StoreError> {
        self.timed("find_by_key", self.inner.find_by_key(owner, key))
            .await
    }

    async fn update(
        &self,
        id: &str,
        expect: &[TaskStatus],
        change: TaskChange,
        now: u64,
    ) -> Result<TaskRecord, UpdateError> {
        self.timed("update", self.inner.update(id, expect, change, now))
            .await
    }

    async fn list(&self, query: &ListQuery) -> Result<Result<TaskPage, InvalidCursor>, StoreError> {
        self.timed("list", self.inner.list(query)).await
    }

    async fn history(&self, task_id: &str) -> Result<Vec<Transition>, StoreError> {
        self.timed("history", self.inner.history(task_id)).await
    }

    async fn search(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>, StoreError> {
        self.timed("search", self.inner.search(filter)).await
    }

    async fn count_finished(&self, created_after: u64) -> Result<FinishedCounts, StoreError> {
        self.timed("count_finished", self.inner.count_finished(created_after))
            .await
    }

    async fn count_active(&self) -> Result<ActiveCounts, StoreError> {
        self.timed("count_active", self.inner.count_active()).await
    }

    async fn purge(&self, policy: PurgePolicy) -> Result<Purged, StoreError> {
        self.timed("purge", self.inner.purge(policy)).await
    }
}

#[async_trait]
impl InputStore for MeteredStore {
    async fn add_input(&self, input: InputRecord, now: u64) -> Result<TaskRecord, UpdateError> {
        self.timed("add_input", self.inner.add_input(input, now))
            .await
    }

    async fn answer_input(
        &self,
        key: &str,
        response: InputResponse,
        now: u64,
    ) -> Result<(TaskRecord, InputRecord), AnswerError> {
        self.timed("answer_input", self.inner.answer_input(key, response, now))
            .await
    }

    async fn get_input(&self, key: &str) -> Result<Option<InputRecord>, StoreError> {
        self.timed("get_input", self.inner.get_input(key)).await
    }

    async fn hand_input(
        &self,
        key: &str,
        from: Option<&str>,
        to: Option<&str>,
    ) -> Result<Handed, StoreError> {
        self.timed("hand_input", self.inner.hand_input(key, from, to))
            .await
    }

    async fn inputs(&self, task_id: &str) -> Result<Vec<InputRecord>, StoreError> {
        self.timed("inputs", self.inner.inputs(task_id)).await
    }

    async fn overdue_waiting(&self, now: u64) -> Result<Vec<TaskRecord>, StoreError> {
        self.timed("overdue_waiting", self.inner.overdue_waiting(now))
            .await
    }
}

#[async_trait]
impl JournalStore for MeteredStore {
    async fn record_step(&self, node: &str, step: StepRecord) -> Result<(), UpdateError> {
        self.timed("record_step", self.inner.record_step(node, step))
            .await
    }

    async fn steps(&self, task_id: &str) -> Result<Vec<StepRecord>, StoreError> {
        self.timed("steps", self.inner.steps(task_id)).await
    }

    async fn truncate_steps(&self, task_id: &str, from: u32) -> Result<usize, StoreError> {
        self.timed("truncate_steps", self.inner.truncate_steps(task_id, from))
            .await
    }
}

#[async_trait]
impl SignalStore for MeteredStore {
    async fn send_signal(&self, signal: NewSignal) -> Result<(SignalRecord, bool), UpdateError> {
        self.timed("send_signal", self.inner.send_signal(signal))
            .await
    }

    async fn next_signal(
        &self,
        task_id: &str,
        name: &str,
        after: u32,
    ) -> Result<Option<SignalRecord>, StoreError> {
        self.timed("next_signal", self.inner.next_signal(task_id, name, after))
            .await
    }

    async fn signals(&self, task_id: &str) -> Result<Vec<SignalRecord>, StoreError> {
        self.timed("signals", self.inner.signals(task_id)).await
    }
}

#[async_trait]
impl LeaseStore for MeteredStore {
    async fn renew_leases(
        &self,
        node: &str,
        ids: &[String],
        until: u64,
    ) -> Result<Vec<String>, StoreError> {
        self.timed("renew_leases", self.inner.renew_leases(node, ids, until))
            .await
    }

    async fn claim_orphans(
        &self,
        node: &str,
        now: u64,
        all: bool,
        lease_until: u64,
        plan: OrphanPlan,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        self.timed(
            "claim_orphans",
            self.inner.claim_orphans(node, now, all, lease_until, plan),
        )
        .await
    }

    fn is_exclusive(&self) -> bool {
        self.inner.is_exclusive()
    }
}

#[async_trait]
impl SessionStore for MeteredStore {
    async fn put_session(&self, session: &SessionRecord) -> Result<(), StoreError> {
        self.timed("put_session", self.inner.put_session(session))
            .await
    }

    async fn create_session(
        &self,
        session: &SessionRecord,
        limit: &SessionLimit,
    ) -> Result<(), StoreError> {
        self.timed("create_session", self.inner.create_session(session, limit))
            .await
    }

    async fn get_session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        self.timed("get_session", self.inner.get_session(id)).await
    }

    async fn touch_session(&self, id: &str, now: u64) -> Result<bool, StoreError> {
        self.timed("touch_session", self.inner.touch_session(id, now))
            .await
    }

    async fn delete_session(&self, id: &str) -> Result<bool, StoreError> {
        self.timed("delete_session", self.inner.delete_session(id))
            .await
    }

    async fn purge_sessions(&self, now: u64, idle_ms: u64) -> Result<usize, StoreError> {
        self.timed("purge_sessions", self.inner.purge_sessions(now, idle_ms))
            .await
    }
}

#[async_trait]
impl OutboxStore for MeteredStore {
    async fn claim_deliveries(
        &self,
        node: &str,
        now: u64,
        lease_until: u64,
        limit: usize,
    ) -> Result<Vec<Delivery>, StoreError> {
        self.timed(
            "claim_deliveries",
            self.inner.claim_deliveries(node, now, lease_until, limit),
        )
        .await
    }

    async fn finish_delivery(
        &self,
        id: &str,
        node: &str,
        attempt: DeliveryAttempt,
        next: DeliveryNext,
    ) -> Result<bool, StoreError> {
        self.timed(
            "finish_delivery",
            self.inner.finish_delivery(id, node, attempt, next),
        )
        .await
    }

    async fn deliveries(&self, query: &DeliveryQuery) -> Result<Vec<Delivery>, StoreError> {
        self.timed("deliveries", self.inner.deliveries(query)).await
    }

    async fn delivery_attempts(&self, id: &str) -> Result<Vec<DeliveryAttempt>, StoreError> {
        self.timed("delivery_attempts", self.inner.delivery_attempts(id))
            .await
    }

    async fn redeliver(&self, id: &str, now: u64) -> Result<bool, StoreError> {
        self.timed("redeliver", self.inner.redeliver(id, now)).await
    }

    async fn purge_deliveries(&self, before: u64) -> Result<usize, StoreError> {
        self.timed("purge_deliveries", self.inner.purge_deliveries(before))
            .await
    }

    async fn release_deliveries(&self, node: &str) -> Result<usize, StoreError> {
        self.timed("release_deliveries", self.inner.release_deliveries(node))
            .await
    }

    async fn count_registrations(&self, owner: &str, max: u64) -> Result<u64, StoreError> {
        self.timed(
            "count_registrations",
            self.inner.count_registrations(owner, max),
        )
        .await
    }
}

#[async_trait]
impl EventStore for MeteredStore {
    async fn append_event(&self, event: NewEvent) -> Result<EventPosition, StoreError> {
        self.timed("append_event", self.inner.append_event(event))
            .await
    }

    async fn read_events(&self, query: &EventQuery) -> Result<EventPage, StoreError> {
        self.timed("read_events", self.inner.read_events(query))
            .await
    }

    async fn event_horizon(&self) -> Result<EventPosition, StoreError> {
        self.timed("event_horizon", self.inner.event_horizon())
            .await
    }

    async fn put_subscription(
        &self,
        sub: &EventSubscription,
        start: SubscriptionStart,
        max: usize,
    ) -> Result<Subscribed, StoreError> {
        self.timed(
            "put_subscription",
            self.inner.put_subscription(sub, start, max),
        )
        .await
    }

    async fn fan_out_events(&self, limit: usize) -> Result<usize, StoreError> {
        self.timed("fan_out_events", self.inner.fan_out_events(limit))
            .await
    }

    async fn get_subscription(&self, id: &str) -> Result<Option<EventSubscription>, StoreError> {
        self.timed("get_subscription", self.inner.get_subscription(id))
            .await
    }

    async fn delete_subscription(&self, id: &str) -> Result<bool, StoreError> {
        self.timed("delete_subscription", self.inner.delete_subscription(id))
            .await
    }

    async fn subscriptions(
        &self,
        principal: Option<&str>,
        limit: usize,
    ) -> Result<Vec<EventSubscription>, StoreError> {
        self.timed("subscriptions", self.inner.subscriptions(principal, limit))
            .await
    }

    async fn put_verification(
        &self,
        principal: &str,
        url: &str,
        until: u64,
    ) -> Result<(), StoreError> {
        self.timed(
            "put_verification",
            self.inner.put_verification(principal, url, until),
        )
        .await
    }

    async fn verification(&self, principal: &str, url: &str) -> Result<Option<u64>, StoreError> {
        self.timed("verification", self.inner.verification(principal, url))
            .await
    }

    async fn claim_event_deliveries(
        &self,
        node: &str,
        now: u64,
        lease_until: u64,
        limit: usize,
    ) -> Result<Vec<EventDelivery>, StoreError> {
        self.timed(
            "claim_event_deliveries",
            self.inner
                .claim_event_deliveries(node, now, lease_until, limit),
        )
        .await
    }

    async fn finish_event_delivery(
        &self,
        subscription: &str,
        event_id: &str,
        node: &str,
        attempt: &DeliveryAttempt,
        next: DeliveryNext,
        failure: Option<&str>,
        keep_gap: bool,
    ) -> Result<bool, StoreError> {
        self.timed(
            "finish_event_delivery",
            self.inner.finish_event_delivery(
                subscription,
                event_id,
                node,
                attempt,
                next,
                failure,
                keep_gap,
            ),
        )
        .await
    }

    async fn event_deliveries(
        &self,
        subscription: &str,
        limit: usize,
    ) -> Result<Vec<EventDeliveryState>, StoreError> {
        self.timed(
            "event_deliveries",
            self.inner.event_deliveries(subscription, limit),
        )
        .await
    }

    async fn release_event_deliveries(&self, node: &str) -> Result<usize, StoreError> {
        self.timed(
            "release_event_deliveries",
            self.inner.release_event_deliveries(node),
        )
        .await
    }

    async fn purge_events(&self, now: u64, before: u64) -> Result<EventsPurged, StoreError> {
        self.timed("purge_events", self.inner.purge_events(now, before))
            .await
    }

    async fn due_event_gaps(
        &self,
        now: u64,
        limit: usize,
    ) -> Result<Vec<mcp_tasks_engine::events::EventGap>, StoreError> {
        self.timed("due_event_gaps", self.inner.due_event_gaps(now, limit))
            .await
    }

    async fn claim_event_gap(
        &self,
        subscription: &str,
        now: u64,
        retry_at: u64,
    ) -> Result<bool, StoreError> {
        self.timed(
            "claim_event_gap",
            self.inner.claim_event_gap(subscription, now, retry_at),
        )
        .await
    }

    async fn forget_event_gap(
        &self,
        subscription: &str,
        missed: mcp_tasks_engine::events::EventPosition,
    ) -> Result<bool, StoreError> {
        self.timed(
            "forget_event_gap",
            self.inner.forget_event_gap(subscription, missed),
        )
        .await
    }
}
