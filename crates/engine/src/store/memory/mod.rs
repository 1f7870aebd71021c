//! An in-memory [`TaskStore`] for tests and throwaway servers (`--store memory:`). Nothing survives
//! the process.
//!
//! Finished tasks are kept for their ttl like in any store, but at most
//! [`DEFAULT_MAX_FINISHED`] of them (or what [`MemoryStore::with_max_finished`] says): past it the
//! one that finished first goes (as if purged: "expired" to its owner). Memory is the one thing this
//! store has, and a busy throwaway server would otherwise hold every task of the last hours.

use crate::store::prelude::*;
use async_trait::async_trait;

mod events;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Mutex;

use super::{
    after_answer, apply_change, claim_orphan, decode_cursor, held_by_holder, write_base,
    ActiveCounts, ActiveLimit, Among, AnswerError, Created, FinishedCounts, Handed, InvalidCursor,
    ListQuery, Lookup, OrphanPlan, PurgePolicy, Purged, SessionLimit, SessionRecord, StoreError,
    TaskChange, TaskFilter, TaskPage, UpdateError,
};
use crate::model::{
    InputRecord, InputResponse, NewSignal, SignalRecord, StepRecord, TaskRecord, TaskStatus,
    Transition,
};
use crate::webhook::{
    outbox_entries, Delivery, DeliveryAttempt, DeliveryNext, DeliveryQuery, DeliveryState,
};

#[derive(Default)]
struct Inner {
    tasks: HashMap<String, TaskRecord>,
    /// Status changes after creation, per task.
    history: HashMap<String, Vec<Transition>>,
    /// (owner, created_at, id) → (), the list order.
    by_owner: BTreeMap<(String, u64, String), ()>,
    idempotency: HashMap<(String, String), String>,
    tombstones: HashMap<String, (String, Option<String>, u64)>,
    sessions: HashMap<String, SessionRecord>,
    inputs: HashMap<String, InputRecord>,
    /// Each task's step journal, in step order.
    steps: HashMap<String, Vec<StepRecord>>,
    /// Each task's signals, in the order sent.
    signals: HashMap<String, Vec<SignalRecord>>,
    /// Unfinished tasks by (owner, session), and their number per owner: the limit check on every
    /// create reads these instead of scanning every task ever stored.
    unfinished: HashMap<(String, Option<String>), HashSet<String>>,
    unfinished_per_owner: HashMap<String, usize>,
    /// Finished tasks' ids in the order they finished: the first to finish goes first past the
    /// cap. Ids of tasks purged meanwhile are skipped (and dropped at each purge).
    finished: VecDeque<String>,
    /// How many finished tasks are kept.
    finished_live: usize,
    /// Tombstone ids in the order they were made, so they are bounded like finished tasks.
    tombstone_order: VecDeque<String>,
    /// The webhook outbox in write order (the key), with each delivery's lease and attempts.
    outbox: BTreeMap<u64, Outboxed>,
    /// Outbox keys by delivery id.
    outbox_ids: HashMap<String, u64>,
    /// (task, target) pairs whose receiver answered 410: their later events are settled as gone.
    gone_targets: HashSet<(String, u32)>,
    next_outbox: u64,
    /// The event log, its subscriptions and their deliveries.
    events: events::EventLog,
}

/// A delivery as this store keeps it.
struct Outboxed {
    delivery: Delivery,
    lease: Option<(String, u64)>,
    attempts: Vec<DeliveryAttempt>,
}

impl Inner {
    /// Keeps a status change of `t` (from `was`, see [`write_base`]) in its history.
    fn record_transition(&mut self, t: &TaskRecord, was: crate::webhook::WriteBase) {
        if let Some(event) = crate::events::task_event(t, was) {
            self.events.append(event);
        }
        for entry in outbox_entries(t, was) {
            let gone = self
                .gone_targets
                .contains(&(entry.task_id.clone(), entry.target));
            let key = self.next_outbox;
            self.next_outbox += 1;
            self.outbox_ids.insert(entry.id.clone(), key);
            self.outbox.insert(
                key,
                Outboxed {
                    delivery: Delivery {
                        next_at: entry.created_at,
                        entry,
                        state: if gone {
                            DeliveryState::Gone
                        } else {
                            DeliveryState::Pending
                        },
                        attempts: 0,
                        delivered_at: None,
                        last_status: None,
                        last_error: None,
                    },
                    lease: None,
                    attempts: Vec::new(),
                },
            );
        }
        if was.was != Some(t.status) {
            self.history
                .entry(t.id.clone())
                .or_default()
                .push(Transition {
                    at: t.updated_at,
                    status: t.status,
                    message: t.status_message.clone(),
                });
        }
    }

    /// Keeps the unfinished and finished indexes right for `rec` after a change, or its creation
    /// (`new`).
    fn track(&mut self, rec: &TaskRecord, new: bool) {
        let key = (rec.owner.clone(), rec.session.clone());
        let set = self.unfinished.entry(key.clone()).or_default();
        let changed = if rec.status.is_terminal() {
            set.remove(&rec.id)
        } else {
            set.insert(rec.id.clone())
        };
        if set.is_empty() {
            self.unfinished.remove(&key);
        }
        // Finished now (it was unfinished until this change), or created finished.
        if rec.status.is_terminal() && (changed || new) {
            self.finished.push_back(rec.id.clone());
            self.finished_live += 1;
        }
        if changed {
            let n = self
                .unfinished_per_owner
                .entry(rec.owner.clone())
                .or_default();
            if rec.status.is_terminal() {
                *n = n.saturating_sub(1);
            } else {
                *n += 1;
            }
            if *n == 0 {
                self.unfinished_per_owner.remove(&rec.owner);
            }
        }
    }

    /// Removes a task and everything that goes with it (history, questions, keys), leaving a
    /// tombstone made at `now`.
    fn remove_task(&mut self, id: &str, now: u64, max_tombstones: usize) -> bool {
        let Some(t) = self.tasks.remove(id) else {
            return false;
        };
        self.history.remove(id);
        self.steps.remove(id);
        self.signals.remove(id);
        self.gone_targets.retain(|(task, _)| task != id);
        self.inputs.retain(|_, i| i.task_id != id);
        self.by_owner
            .remove(&(t.owner.clone(), t.created_at, t.id.clone()));
        if let Some(k) = &t.idempotency_key {
            self.idempotency.remove(&(t.owner.clone(), k.clone()));
        }
        if t.status.is_terminal() {
            self.finished_live = self.finished_live.saturating_sub(1);
        }
        self.tombstones
            .insert(t.id.clone(), (t.owner.clone(), t.session.clone(), now));
        self.tombstone_order.push_back(t.id);
        while self.tombstones.len() > max_tombstones {
            match self.tombstone_order.pop_front() {
                Some(old) => {
                    self.tombstones.remove(&old);
                }
                None => break,
            }
        }
        true
    }

    /// Drops the tasks that finished first while more than `max` finished ones are kept.
    fn keep_finished_within(&mut self, max: usize, now: u64) {
        while self.finished_live > max {
            let Some(id) = self.finished.pop_front() else {
                break;
            };
            if self.tasks.get(&id).is_some_and(|t| t.status.is_terminal()) {
                self.remove_task(&id, now, max);
            }
        }
    }

    /// Unfinished tasks of `owner` among `among`.
    fn unfinished_of(&self, owner: &str, among: &Among) -> usize {
        match among {
            Among::All => self.unfinished_per_owner.get(owner).copied().unwrap_or(0),
            Among::Session(s) => self
                .unfinished
                .get(&(owner.to_string(), Some(s.clone())))
                .map_or(0, HashSet::len),
            Among::SessionsStartingWith(_) => self
                .unfinished
                .iter()
                .filter(|((o, session), _)| o == owner && among.counts(session.as_deref()))
                .map(|(_, ids)| ids.len())
                .sum(),
        }
    }
}

/// Finished tasks a [`MemoryStore`] keeps at most unless told otherwise.
pub const DEFAULT_MAX_FINISHED: usize = 50_000;

/// Tasks, tombstones and sessions in a mutex-guarded map.
pub struct MemoryStore {
    inner: Mutex<Inner>,
    max_finished: usize,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::with_max_finished(DEFAULT_MAX_FINISHED)
    }
}

impl MemoryStore {
    /// An empty store that keeps at most [`DEFAULT_MAX_FINISHED`] finished tasks.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// An empty store that keeps at most `max` finished tasks (and as many tombstones): past it,
    /// the task that finished first goes. Unfinished tasks are never dropped.
    pub fn with_max_finished(max: usize) -> MemoryStore {
        MemoryStore {
            inner: Mutex::new(Inner::default()),
            max_finished: max.max(1),
        }
    }

    /// The most finished tasks this store keeps.
    pub fn max_finished(&self) -> usize {
        self.max_finished
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a half-applied change (every change is applied
        // to a clone or in one assignment), so a poisoned lock is still consistent.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl TaskRows for MemoryStore {
    async fn create(
        &self,
        task: TaskRecord,
        limit: Option<ActiveLimit>,
    ) -> Result<Created, StoreError> {
        let mut inner = self.lock();
        if let Some(key) = &task.idempotency_key {
            let existing = inner
                .idempotency
                .get(&(task.owner.clone(), key.clone()))
                .and_then(|id| inner.tasks.get(id));
            if let Some(existing) = existing {
                if existing.fingerprint == task.fingerprint {
                    return Ok(Created::Existing(existing.clone()));
                }
                return Err(StoreError::IdempotencyConflict {
                    key: key.clone(),
                    task_id: existing.id.clone(),
                });
            }
        }
        if let Some(l) = &limit {
            let active = inner.unfinished_of(&l.owner, &l.among);
            if active >= l.max {
                return Err(StoreError::TooManyActive { active, max: l.max });
            }
        }
        if let Some(key) = &task.idempotency_key {
            inner
                .idempotency
                .insert((task.owner.clone(), key.clone()), task.id.clone());
        }
        inner
            .by_owner
            .insert((task.owner.clone(), task.created_at, task.id.clone()), ());
        inner.track(&task, true);
        inner.tasks.insert(task.id.clone(), task.clone());
        Ok(Created::New(task))
    }

    async fn find_by_key(&self, owner: &str, key: &str) -> Result<Option<TaskRecord>, StoreError> {
        let inner = self.lock();
        Ok(inner
            .idempotency
            .get(&(owner.to_string(), key.to_string()))
            .and_then(|id| inner.tasks.get(id))
            .cloned())
    }

    async fn get(&self, id: &str) -> Result<Lookup, StoreError> {
        let inner = self.lock();
        if let Some(t) = inner.tasks.get(id) {
            return Ok(Lookup::Found(t.clone()));
        }
        Ok(match inner.tombstones.get(id) {
            Some((owner, session, _)) => Lookup::Expired {
                owner: owner.clone(),
                session: session.clone(),
            },
            None => Lookup::Missing,
        })
    }

    async fn update(
        &self,
        id: &str,
        expect: &[TaskStatus],
        change: TaskChange,
        now: u64,
    ) -> Result<TaskRecord, UpdateError> {
        let mut inner = self.lock();
        let rec = inner.tasks.get_mut(id).ok_or(UpdateError::NotFound)?;
        if !expect.contains(&rec.status) || !held_by_holder(rec, &change) {
            return Err(UpdateError::Conflict(Box::new(rec.clone())));
        }
        let was = write_base(rec, &change);
        apply_change(rec, change, now);
        let rec = rec.clone();
        inner.track(&rec, false);
        inner.record_transition(&rec, was);
        if rec.status.is_terminal() {
            inner.keep_finished_within(self.max_finished, now);
        }
        Ok(rec)
    }

    async fn list(&self, q: &ListQuery) -> Result<Result<TaskPage, InvalidCursor>, StoreError> {
        let inner = self.lock();
        let start = match &q.cursor {
            None => (q.owner.clone(), 0, String::new()),
            Some(c) => match decode_cursor(c) {
                Ok((at, id)) => (q.owner.clone(), at, id),
                Err(e) => return Ok(Err(e)),
            },
        };
        let skip_start = q.cursor.is_some();
        let mut tasks = Vec::new();
        let mut more = false;
        for ((owner, _, id), ()) in inner.by_owner.range(start.clone()..) {
            if owner != &q.owner {
                break;
            }
            if skip_start && (owner, id) == (&start.0, &start.2) {
                continue;
            }
            let Some(t) = inner.tasks.get(id) else {
                continue;
            };
            if q.session.is_some() && t.session != q.session {
                continue;
            }
            if tasks.len() == q.limit {
                more = true;
                break;
            }
            tasks.push(t.clone());
        }
        Ok(Ok(TaskPage::new(tasks, more)))
    }

    async fn history(&self, task_id: &str) -> Result<Vec<Transition>, StoreError> {
        Ok(self
            .lock()
            .history
            .get(task_id)
            .cloned()
            .unwrap_or_default())
    }

    async fn search(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>, StoreError> {
        let mut found: Vec<TaskRecord> = self
            .lock()
            .tasks
            .values()
            .filter(|t| filter.selects(t))
            .cloned()
            .collect();
        found.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
        found.truncate(filter.limit);
        Ok(found)
    }

    async fn count_finished(&self, created_after: u64) -> Result<FinishedCounts, StoreError> {
        let mut counts = FinishedCounts::default();
        for t in self.lock().tasks.values() {
            if t.created_at >= created_after {
                counts.add(t);
            }
        }
        Ok(counts)
    }

    async fn count_active(&self) -> Result<ActiveCounts, StoreError> {
        let mut counts = ActiveCounts::default();
        for t in self.lock().tasks.values() {
            counts.add(t.status);
        }
        Ok(counts)
    }

    async fn purge(&self, p: PurgePolicy) -> Result<Purged, StoreError> {
        let mut inner = self.lock();
        let mut purged = Purged::default();
        let expired: Vec<String> = inner
            .tasks
            .values()
            .filter(|t| match p.finished_before {
                Some(cutoff) => t.status.is_terminal() && t.finished_at.is_some_and(|f| f < cutoff),
                None => {
                    t.status.is_terminal()
                        && t.expires_at().is_some_and(|e| e <= p.now)
                        && t.finished_at
                            .is_some_and(|f| f.saturating_add(p.finished_grace_ms) <= p.now)
                }
            })
            .map(|t| t.id.clone())
            .collect();
        // A purged task's questions and answers go with it; nothing can reach them any more.
        for id in &expired {
            if inner.remove_task(id, p.now, self.max_finished) {
                purged.tasks += 1;
            }
        }
        let before = inner.tombstones.len();
        inner
            .tombstones
            .retain(|_, (_, _, at)| at.saturating_add(p.tombstone_ms) > p.now);
        purged.tombstones = before - inner.tombstones.len();
        let Inner {
            tasks,
            finished,
            tombstones,
            tombstone_order,
            ..
        } = &mut *inner;
        tombstone_order.retain(|id| tombstones.contains_key(id));
        finished.retain(|id| tasks.contains_key(id));
        Ok(purged)
    }
}

#[async_trait]
impl InputStore for MemoryStore {
    async fn add_input(&self, input: InputRecord, now: u64) -> Result<TaskRecord, UpdateError> {
        let mut inner = self.lock();
        let rec = inner
            .tasks
            .get_mut(&input.task_id)
            .ok_or(UpdateError::NotFound)?;
        if rec.status.is_terminal() {
            return Err(UpdateError::Conflict(Box::new(rec.clone())));
        }
        let change = TaskChange {
            status: Some(TaskStatus::InputRequired),
            ..Default::default()
        };
        let was = write_base(rec, &change);
        apply_change(rec, change, now);
        let rec = rec.clone();
        inner.inputs.insert(input.key.clone(), input);
        inner.record_transition(&rec, was);
        Ok(rec)
    }

    async fn answer_input(
        &self,
        key: &str,
        response: InputResponse,
        now: u64,
    ) -> Result<(TaskRecord, InputRecord), AnswerError> {
        let mut inner = self.lock();
        let input = inner.inputs.get(key).ok_or(AnswerError::Unknown)?.clone();
        if input.response.is_some() {
            return Err(AnswerError::AlreadyAnswered);
        }
        let status = inner
            .tasks
            .get(&input.task_id)
            .map(|t| t.status)
            .ok_or(AnswerError::Unknown)?;
        if status.is_terminal() {
            return Err(AnswerError::TaskEnded(status));
        }
        let answered = InputRecord {
            response: Some(response),
            answered_at: Some(now),
            ..input
        };
        inner.inputs.insert(key.to_string(), answered.clone());
        let still_pending = inner
            .inputs
            .values()
            .any(|i| i.task_id == answered.task_id && i.response.is_none());
        let rec = inner
            .tasks
            .get_mut(&answered.task_id)
            .ok_or(AnswerError::Unknown)?;
        let change = after_answer(rec.status, still_pending);
        let was = write_base(rec, &change);
        apply_change(rec, change, now);
        let rec = rec.clone();
        inner.record_transition(&rec, was);
        Ok((rec, answered))
    }

    async fn hand_input(
        &self,
        _key: &str,
        _from: Option<&str>,
        _to: Option<&str>,
    ) -> Result<Handed, StoreError> {
        // One process: it knows its own streams, so no holder is kept.
        Ok(Handed::Done)
    }

    async fn get_input(&self, key: &str) -> Result<Option<InputRecord>, StoreError> {
        Ok(self.lock().inputs.get(key).cloned())
    }

    async fn inputs(&self, task_id: &str) -> Result<Vec<InputRecord>, StoreError> {
        let mut v: Vec<InputRecord> = self
            .lock()
            .inputs
            .values()
            .filter(|i| i.task_id == task_id)
            .cloned()
            .collect();
        v.sort_by(|a, b| (a.created_at, &a.key).cmp(&(b.created_at, &b.key)));
        Ok(v)
    }

    async fn overdue_waiting(&self, now: u64) -> Result<Vec<TaskRecord>, StoreError> {
        Ok(self
            .lock()
            .tasks
            .values()
            .filter(|t| {
                t.status == TaskStatus::InputRequired && t.expires_at().is_some_and(|e| e <= now)
            })
            .cloned()
            .collect())
    }
}

#[async_trait]
impl JournalStore for MemoryStore {
    async fn record_step(&self, node: &str, step: StepRecord) -> Result<(), UpdateError> {
        let mut inner = self.lock();
        let rec = inner
            .tasks
            .get(&step.task_id)
            .ok_or(UpdateError::NotFound)?;
        let journal = inner.steps.get(&step.task_id);
        let taken = journal.is_some_and(|j| j.iter().any(|s| s.seq == step.seq));
        if rec.status.is_terminal() || rec.lease_owner.as_deref() != Some(node) || taken {
            return Err(UpdateError::Conflict(Box::new(rec.clone())));
        }
        let journal = inner.steps.entry(step.task_id.clone()).or_default();
        let at = journal.partition_point(|s| s.seq < step.seq);
        journal.insert(at, step);
        Ok(())
    }

    async fn steps(&self, task_id: &str) -> Result<Vec<StepRecord>, StoreError> {
        Ok(self.lock().steps.get(task_id).cloned().unwrap_or_default())
    }

    async fn truncate_steps(&self, task_id: &str, from: u32) -> Result<usize, StoreError> {
        let mut inner = self.lock();
        let Some(journal) = inner.steps.get_mut(task_id) else {
            return Ok(0);
        };
        let before = journal.len();
        journal.retain(|s| s.seq < from);
        Ok(before - journal.len())
    }
}

#[async_trait]
impl SignalStore for MemoryStore {
    async fn send_signal(&self, signal: NewSignal) -> Result<(SignalRecord, bool), UpdateError> {
        let mut inner = self.lock();
        let rec = inner
            .tasks
            .get(&signal.task_id)
            .ok_or(UpdateError::NotFound)?;
        let finished = rec.status.is_terminal().then(|| rec.clone());
        let kept = inner.signals.entry(signal.task_id.clone()).or_default();
        if let Some(key) = &signal.key {
            if let Some(same) = kept.iter().find(|s| s.key.as_ref() == Some(key)) {
                return Ok((same.clone(), false));
            }
        }
        if let Some(rec) = finished {
            return Err(UpdateError::Conflict(Box::new(rec)));
        }
        let stored = SignalRecord {
            task_id: signal.task_id,
            seq: kept.last().map_or(1, |s| s.seq + 1),
            name: signal.name,
            payload: signal.payload,
            sender: signal.sender,
            key: signal.key,
            at: signal.at,
        };
        kept.push(stored.clone());
        Ok((stored, true))
    }

    async fn next_signal(
        &self,
        task_id: &str,
        name: &str,
        after: u32,
    ) -> Result<Option<SignalRecord>, StoreError> {
        Ok(self.lock().signals.get(task_id).and_then(|kept| {
            kept.iter()
                .find(|s| s.seq > after && s.name == name)
                .cloned()
        }))
    }

    async fn signals(&self, task_id: &str) -> Result<Vec<SignalRecord>, StoreError> {
        Ok(self
            .lock()
            .signals
            .get(task_id)
            .cloned()
            .unwrap_or_default())
    }
}

#[async_trait]
impl LeaseStore for MemoryStore {
    async fn renew_leases(
        &self,
        node: &str,
        ids: &[String],
        until: u64,
    ) -> Result<Vec<String>, StoreError> {
        let mut inner = self.lock();
        let mut lost = Vec::new();
        for id in ids {
            match inner.tasks.get_mut(id) {
                Some(t) if t.lease_owner.as_deref() == Some(node) && !t.status.is_terminal() => {
                    t.lease_until = Some(until);
                }
                _ => lost.push(id.clone()),
            }
        }
        Ok(lost)
    }

    async fn claim_orphans(
        &self,
        node: &str,
        now: u64,
        all: bool,
        lease_until: u64,
        plan: OrphanPlan,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        let mut inner = self.lock();
        let mut out = Vec::new();
        for t in inner.tasks.values_mut() {
            if t.status.is_terminal() || !(all || t.lease_until.is_none_or(|u| u < now)) {
                continue;
            }
            if let Some(was) = claim_orphan(t, &plan, node, lease_until, now) {
                out.push((t.clone(), was));
            }
        }
        for (t, was) in &out {
            inner.track(t, false);
            inner.record_transition(t, *was);
        }
        inner.keep_finished_within(self.max_finished, now);
        let out: Vec<TaskRecord> = out.into_iter().map(|(t, _)| t).collect();
        Ok(out)
    }

    fn is_exclusive(&self) -> bool {
        true
    }
}

#[async_trait]
impl SessionStore for MemoryStore {
    async fn put_session(&self, session: &SessionRecord) -> Result<(), StoreError> {
        self.lock()
            .sessions
            .insert(session.id.clone(), session.clone());
        Ok(())
    }

    async fn create_session(
        &self,
        session: &SessionRecord,
        limit: &SessionLimit,
    ) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let now = session.last_seen;
        let live = inner
            .sessions
            .values()
            .filter(|s| s.owner == session.owner && s.is_live(now));
        let (mut all, mut of_prefix) = (0, 0);
        for s in live {
            all += 1;
            if limit
                .per_prefix
                .as_ref()
                .is_some_and(|(p, _)| s.id.starts_with(p.as_str()))
            {
                of_prefix += 1;
            }
        }
        limit.check(of_prefix, all)?;
        inner.sessions.insert(session.id.clone(), session.clone());
        Ok(())
    }

    async fn get_session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        Ok(self.lock().sessions.get(id).cloned())
    }

    async fn touch_session(&self, id: &str, now: u64) -> Result<bool, StoreError> {
        Ok(match self.lock().sessions.get_mut(id) {
            Some(s) if !s.is_live(now) => false,
            Some(s) => {
                s.last_seen = s.last_seen.max(now);
                true
            }
            None => false,
        })
    }

    async fn delete_session(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self.lock().sessions.remove(id).is_some())
    }

    async fn purge_sessions(&self, now: u64, idle_ms: u64) -> Result<usize, StoreError> {
        let mut inner = self.lock();
        let before = inner.sessions.len();
        inner
            .sessions
            .retain(|_, s| s.last_seen.saturating_add(s.idle_ms.unwrap_or(idle_ms)) > now);
        Ok(before - inner.sessions.len())
    }
}

#[async_trait]
impl OutboxStore for MemoryStore {
    async fn claim_deliveries(
        &self,
        node: &str,
        now: u64,
        lease_until: u64,
        limit: usize,
    ) -> Result<Vec<Delivery>, StoreError> {
        let mut inner = self.lock();
        // In write order: the first pending event of each task and target is the one that may go.
        let mut first_seen = HashSet::new();
        let mut due = Vec::new();
        for (key, o) in &inner.outbox {
            let d = &o.delivery;
            if d.state != DeliveryState::Pending
                || !first_seen.insert((d.entry.task_id.clone(), d.entry.target))
            {
                continue;
            }
            let free = o
                .lease
                .as_ref()
                .is_none_or(|(owner, until)| owner == node || *until <= now);
            if d.next_at <= now && free {
                due.push((d.next_at, *key));
            }
        }
        due.sort_unstable();
        due.truncate(limit);
        Ok(due
            .into_iter()
            .filter_map(|(_, key)| {
                let o = inner.outbox.get_mut(&key)?;
                o.lease = Some((node.to_string(), lease_until));
                Some(o.delivery.clone())
            })
            .collect())
    }

    async fn finish_delivery(
        &self,
        id: &str,
        node: &str,
        attempt: DeliveryAttempt,
        next: DeliveryNext,
    ) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        let Some(&key) = inner.outbox_ids.get(id) else {
            return Ok(false);
        };
        let Some(o) = inner.outbox.get_mut(&key) else {
            return Ok(false);
        };
        if o.delivery.state != DeliveryState::Pending
            || o.lease.as_ref().is_none_or(|(owner, _)| owner != node)
        {
            return Ok(false);
        }
        o.lease = None;
        let d = &mut o.delivery;
        d.attempts += 1;
        d.last_status = attempt.status;
        d.last_error = attempt.error.clone();
        let (state, next_at, delivered_at) = next.settles(attempt.at);
        d.state = state;
        d.next_at = next_at.unwrap_or(d.next_at);
        d.delivered_at = delivered_at;
        let (task, target) = (d.entry.task_id.clone(), d.entry.target);
        o.attempts.push(attempt);
        if next == DeliveryNext::Gone {
            inner.gone_targets.insert((task.clone(), target));
            for later in inner.outbox.range_mut(key..).map(|(_, o)| &mut o.delivery) {
                if later.state == DeliveryState::Pending
                    && later.entry.task_id == task
                    && later.entry.target == target
                {
                    later.state = DeliveryState::Gone;
                }
            }
        }
        Ok(true)
    }

    async fn deliveries(&self, query: &DeliveryQuery) -> Result<Vec<Delivery>, StoreError> {
        let inner = self.lock();
        Ok(inner
            .outbox
            .values()
            .rev()
            .map(|o| &o.delivery)
            .filter(|d| query.id.as_ref().is_none_or(|i| *i == d.entry.id))
            .filter(|d| query.task_id.as_ref().is_none_or(|t| *t == d.entry.task_id))
            .filter(|d| query.state.is_none_or(|s| s == d.state))
            .take(query.limit())
            .map(|d| {
                // An operator's listing leaves the secret out, as the other stores do.
                let mut d = d.clone();
                d.entry.secret.clear();
                d
            })
            .collect())
    }

    async fn delivery_attempts(&self, id: &str) -> Result<Vec<DeliveryAttempt>, StoreError> {
        let inner = self.lock();
        Ok(inner
            .outbox_ids
            .get(id)
            .and_then(|k| inner.outbox.get(k))
            .map(|o| o.attempts.clone())
            .unwrap_or_default())
    }

    async fn redeliver(&self, id: &str, now: u64) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        let Some(&key) = inner.outbox_ids.get(id) else {
            return Ok(false);
        };
        let Some(o) = inner.outbox.get_mut(&key) else {
            return Ok(false);
        };
        o.lease = None;
        o.delivery.state = DeliveryState::Pending;
        o.delivery.next_at = now;
        o.delivery.delivered_at = None;
        Ok(true)
    }

    async fn purge_deliveries(&self, before: u64) -> Result<usize, StoreError> {
        let mut inner = self.lock();
        let gone: Vec<(u64, String)> = inner
            .outbox
            .iter()
            .filter(|(_, o)| {
                o.delivery.state != DeliveryState::Pending && o.delivery.entry.created_at < before
            })
            .map(|(k, o)| (*k, o.delivery.entry.id.clone()))
            .collect();
        for (key, id) in &gone {
            inner.outbox.remove(key);
            inner.outbox_ids.remove(id);
        }
        Ok(gone.len())
    }

    async fn release_deliveries(&self, node: &str) -> Result<usize, StoreError> {
        let mut inner = self.lock();
        let mut n = 0;
        for o in inner.outbox.values_mut() {
            if o.delivery.state == DeliveryState::Pending
                && o.lease.as_ref().is_some_and(|(owner, _)| owner == node)
            {
                o.lease = None;
                n += 1;
            }
        }
        Ok(n)
    }

    async fn count_registrations(&self, owner: &str, max: u64) -> Result<u64, StoreError> {
        let inner = self.lock();
        let n = inner
            .unfinished
            .iter()
            .filter(|((o, _), _)| o == owner)
            .flat_map(|(_, ids)| ids)
            .filter_map(|id| inner.tasks.get(id))
            .filter(|t| t.webhooks.iter().any(|w| w.subscription.is_none()))
            .take(usize::try_from(max).unwrap_or(usize::MAX))
            .count();
        Ok(u64::try_from(n).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Outcome;
    use crate::store::testkit::record;

    #[tokio::test]
    async fn passes_the_store_test_kit() {
        super::super::testkit::run_all(|| async { super::MemoryStore::new() }).await;
    }

    #[tokio::test]
    async fn past_the_cap_the_task_that_finished_first_goes_and_running_ones_stay() {
        let store = MemoryStore::with_max_finished(3);
        let done = TaskChange {
            status: Some(TaskStatus::Completed),
            outcome: Some(Outcome::Result {
                value: serde_json::json!({}),
                is_error: false,
            }),
            ..Default::default()
        };
        // A running task created first, then six that finish in the order they were created.
        store.create(record("running", "o", 1), None).await.unwrap();
        for i in 0..6u64 {
            let id = format!("t{i}");
            store.create(record(&id, "o", 10 + i), None).await.unwrap();
            store
                .update(&id, &[TaskStatus::Working], done.clone(), 100 + i)
                .await
                .unwrap();
        }
        let found = |l: Lookup| matches!(l, Lookup::Found(_));
        for gone in ["t0", "t1", "t2"] {
            assert!(
                matches!(store.get(gone).await.unwrap(), Lookup::Expired { .. }),
                "{gone} finished first: dropped, and says it expired"
            );
        }
        for kept in ["t3", "t4", "t5", "running"] {
            assert!(found(store.get(kept).await.unwrap()), "{kept} is kept");
        }
        let inner = store.lock();
        assert_eq!(inner.finished_live, 3);
        assert_eq!(inner.finished.len(), 3);
        assert!(inner.tombstones.len() <= 3, "tombstones are bounded too");
        assert_eq!(inner.tombstones.len(), inner.tombstone_order.len());
    }
}
