//! The records of recently written tasks, kept in memory by the writer so that the hot path reads
//! no row it has just written.
//!
//! The store is the database's only user (the file is locked, see `lock.rs`), and every write goes
//! through the one writer thread, so the writer knows each task's committed state as it commits it.
//! Two views follow from that:
//!
//! - [`RecordCache`]: committed records, shared with readers. A `tasks/get` of a task written lately
//!   is answered from it without a read connection; the writer reads the record it is about to
//!   change from it instead of from its row. Only the writer fills it, after the commit that holds
//!   the write and before the writer answers the write's caller, so a caller that was told "done"
//!   reads what it wrote. Readers never fill it: a row they read may be older than a record the
//!   writer publishes at the same moment.
//! - [`Tx`]: one group transaction's own writes, seen by the later jobs of the same group and
//!   published when the group commits (dropped when it does not).
//!
//! A job that changes task rows without saying which records it leaves (a purge) empties both.

use rusqlite::{Connection, Statement};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;

/// A map keyed by task id. Ids are the server's own (random), so a fast seeded hash is safe; SipHash
/// was a tenth of the writer's work per task.
pub(super) type IdMap<V> = std::collections::HashMap<String, V, foldhash::fast::RandomState>;

/// Pending tasks' ids by their owner and idempotency key.
type KeyMap = std::collections::HashMap<(String, String), String, foldhash::fast::RandomState>;

use super::changelog::{write_row, ChangeLog, Pending};
use super::reaper::Reaper;
use super::rows::{self, select_task_shared, SharedArguments};
use super::unfinished::Counts;
use super::Context;
use crate::model::{ActiveLimit, Outcome, TaskRecord, TaskStatus, Transition};
use crate::store::StoreError;

/// Records per generation: the cache holds between one and two generations, so at most twice this
/// many records, however many tasks are stored or unfinished.
pub(super) const GENERATION: usize = 4096;
/// Bytes per generation (estimated, see [`weight`]): records with large results or arguments fill
/// a generation before its count does, so the cache holds at most about twice this.
const GENERATION_BYTES: usize = 8 << 20;
/// A record heavier than this is not kept: reading its row now and then costs little beside what
/// producing it did, and one such record would take a generation's room from thousands of others.
const MAX_RECORD_BYTES: usize = 64 << 10;

/// Committed task records, most recently written first to stay (see the module note).
#[derive(Default)]
pub(super) struct RecordCache {
    generations: Mutex<Generations>,
    /// Drops a generation the cache lets go of, away from the writer (see `reaper.rs`).
    pub(super) reaper: Reaper,
}

/// Two maps instead of a least-recently-used list: a write goes into `current`; when `current` is
/// full it becomes `previous` and the old `previous` is dropped. A lookup tries both, so a record
/// stays for at least [`GENERATION`] later writes.
#[derive(Default)]
struct Generations {
    /// The records of pending tasks (see `changelog.rs`): their rows are behind, so they stay
    /// until their flush, whatever the generations hold.
    pinned: IdMap<Arc<TaskRecord>>,
    /// The pinned tasks that have an idempotency key, by owner and key: their rows may be missing,
    /// so a lookup by key looks here before it reads rows.
    pinned_keys: KeyMap,
    current: IdMap<Arc<TaskRecord>>,
    /// What `current` weighs, estimated.
    current_bytes: usize,
    previous: IdMap<Arc<TaskRecord>>,
}

impl RecordCache {
    fn lock(&self) -> MutexGuard<'_, Generations> {
        self.generations.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The committed record of task `id`, when it was written lately.
    pub(super) fn get(&self, id: &str) -> Option<TaskRecord> {
        let g = self.lock();
        g.pinned
            .get(id)
            .or_else(|| g.current.get(id))
            .or_else(|| g.previous.get(id))
            .map(|r| TaskRecord::clone(r))
    }

    /// How many tasks are pending: when none is, the rows are current.
    pub(super) fn pinned_len(&self) -> usize {
        self.lock().pinned.len()
    }

    /// The records of those of `ids` that are pending.
    pub(super) fn pinned_of(&self, ids: &[String]) -> Vec<TaskRecord> {
        let g = self.lock();
        if g.pinned.is_empty() {
            return Vec::new();
        }
        ids.iter()
            .filter_map(|id| g.pinned.get(id).map(|r| TaskRecord::clone(r)))
            .collect()
    }

    /// The record of the pending task of `owner` with idempotency key `key`, if there is one.
    pub(super) fn pinned_by_key(&self, owner: &str, key: &str) -> Option<TaskRecord> {
        let g = self.lock();
        if g.pinned_keys.is_empty() {
            return None;
        }
        let id = g.pinned_keys.get(&(owner.to_string(), key.to_string()))?;
        g.pinned.get(id).map(|r| TaskRecord::clone(r))
    }

    /// Takes the records of a group's logged writes: pending until their flush.
    fn pin(&self, records: impl Iterator<Item = Arc<TaskRecord>>) {
        let mut g = self.lock();
        for rec in records {
            g.current.remove(&rec.id);
            g.previous.remove(&rec.id);
            if let Some(key) = &rec.idempotency_key {
                g.pinned_keys
                    .insert((rec.owner.clone(), key.clone()), rec.id.clone());
            }
            g.pinned.insert(rec.id.clone(), rec);
        }
    }

    /// The pending tasks' rows were committed: their records become ordinary recent ones, but for
    /// those the same transaction went on to change without a record (`forgot`, or all of them).
    fn unpin_all(&self, forgot_all: bool, forgot: &[String]) {
        let mut g = self.lock();
        g.pinned_keys.clear();
        let mut pinned = std::mem::take(&mut g.pinned);
        drop(g);
        if forgot_all {
            self.reaper.reap(pinned);
            return;
        }
        for id in forgot {
            pinned.remove(id);
        }
        self.publish(pinned.into_iter());
    }

    /// The rows of tasks `ids` (a flusher's batch) were committed: each record becomes an ordinary
    /// recent one, but for the tasks logged again since (`still_pending`), whose newer record stays
    /// pinned.
    pub(super) fn unpin(&self, ids: Vec<String>, still_pending: impl Fn(&str) -> bool) {
        let mut g = self.lock();
        let mut records = Vec::with_capacity(ids.len());
        for id in ids {
            if still_pending(&id) {
                continue;
            }
            let Some(rec) = g.pinned.remove(&id) else {
                continue;
            };
            if let Some(key) = &rec.idempotency_key {
                // Only if the key is still this task's: a later task may have taken it.
                let k = (rec.owner.clone(), key.clone());
                if g.pinned_keys.get(&k) == Some(&id) {
                    g.pinned_keys.remove(&k);
                }
            }
            records.push((id, rec));
        }
        drop(g);
        self.publish(records.into_iter());
    }

    /// Takes a committed group's records.
    fn publish(&self, records: impl Iterator<Item = (String, Arc<TaskRecord>)>) {
        let mut turned = Vec::new();
        let mut g = self.lock();
        for (id, rec) in records {
            g.previous.remove(&id);
            let Some(bytes) = weight(&rec) else {
                // Too heavy to keep; an older record of it must not stay either.
                g.current.remove(&id);
                continue;
            };
            if (g.current.len() >= GENERATION || g.current_bytes + bytes > GENERATION_BYTES)
                && !g.current.contains_key(&id)
            {
                let full = std::mem::take(&mut g.current);
                turned.push(std::mem::replace(&mut g.previous, full));
                g.current_bytes = 0;
            }
            // A record replaced in `current` is counted twice until the generation turns: the
            // estimate errs on the side of turning early.
            g.current_bytes += bytes;
            g.current.insert(id, rec);
        }
        drop(g);
        if !turned.is_empty() {
            self.reaper.reap(turned);
        }
    }

    /// Drops a committed record. A pinned one stays: its row is behind, so it is the only copy.
    fn remove(&self, id: &str) {
        let mut g = self.lock();
        g.current.remove(id);
        g.previous.remove(id);
    }

    /// Drops every committed record but the pinned ones (see [`RecordCache::remove`]).
    fn clear(&self) {
        let mut g = self.lock();
        let both = (
            std::mem::take(&mut g.current),
            std::mem::take(&mut g.previous),
        );
        g.current_bytes = 0;
        drop(g);
        self.reaper.reap(both);
    }

    /// Records held (for tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        let g = self.lock();
        g.pinned.len() + g.current.len() + g.previous.len()
    }
}

/// About how many bytes `rec` holds, or `None` past [`MAX_RECORD_BYTES`]. Walks the JSON values
/// only as far as the limit, so a large result costs no more to weigh than a small one.
fn weight(rec: &TaskRecord) -> Option<usize> {
    let strings = [
        Some(&rec.id),
        Some(&rec.owner),
        rec.session.as_ref(),
        Some(&rec.era),
        Some(&rec.tool),
        rec.status_message.as_ref(),
        rec.progress_message.as_ref(),
        rec.idempotency_key.as_ref(),
        Some(&rec.fingerprint),
        rec.lease_owner.as_ref(),
    ];
    let mut left = MAX_RECORD_BYTES.checked_sub(std::mem::size_of::<TaskRecord>())?;
    for s in strings.into_iter().flatten() {
        left = left.checked_sub(s.len())?;
    }
    left = left.checked_sub(rec.webhooks.len() * 512)?;
    let mut values = vec![&*rec.arguments, &*rec.request_meta];
    values.extend(rec.checkpoint.as_ref());
    match &rec.outcome {
        Some(Outcome::Result { value, .. }) => values.push(value),
        Some(Outcome::Error { message, data, .. }) => {
            left = left.checked_sub(message.len())?;
            values.extend(data.as_ref());
        }
        None => {}
    }
    // Each node's own room is counted when it is queued, so a long array is refused before its
    // items are.
    left = left.checked_sub(values.len() * 32)?;
    while let Some(v) = values.pop() {
        match v {
            Value::String(s) => left = left.checked_sub(s.len())?,
            Value::Array(items) => {
                left = left.checked_sub(items.len() * 32)?;
                values.extend(items);
            }
            Value::Object(map) => {
                for (k, item) in map {
                    left = left.checked_sub(k.len() + 32)?;
                    values.push(item);
                }
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    Some(MAX_RECORD_BYTES - left)
}

/// The writer's connection with the two statements every create runs, prepared once for the
/// writer's life (at first use). Through the statement cache each execution hashed its whole SQL
/// text twice, to look it up and to give it back: about 4.5k instructions per create.
pub(super) struct Hot<'c> {
    conn: &'c Connection,
    insert_task: Option<Statement<'c>>,
    update_task: Option<Statement<'c>>,
}

impl<'c> Hot<'c> {
    pub(super) fn new(conn: &'c Connection) -> Hot<'c> {
        Hot {
            conn,
            insert_task: None,
            update_task: None,
        }
    }
}

/// Prepares `sql` into `slot` the first time it is needed.
fn prepared<'s, 'c>(
    conn: &'c Connection,
    slot: &'s mut Option<Statement<'c>>,
    sql: &str,
) -> Result<&'s mut Statement<'c>, StoreError> {
    match slot {
        Some(stmt) => Ok(stmt),
        None => Ok(slot.insert(
            conn.prepare(sql)
                .context("prepare a statement of the writer")?,
        )),
    }
}

/// A task this group transaction wrote to the change log rather than to its row: whether it is
/// new since the last flush, and the status changes it made (its record is the group's latest).
#[derive(Debug, Default)]
struct Logged {
    new: bool,
    transitions: Vec<Transition>,
}

/// What one job sees of the group transaction it runs in: the writer's connection, the task
/// records the group has written so far, the change log and the counts of unfinished tasks.
///
/// Every write of a task goes through [`Tx::insert_task`] or [`Tx::update_task`], so that the
/// counts follow the tasks. Such a write goes to the change log (see `changelog.rs`) unless the job
/// reads or writes rows itself ([`Tx::conn`]), the task has webhooks (their outbox entries are
/// rows written with it), its record is too heavy to keep in memory, or the log cannot take
/// writes.
pub(super) struct Tx<'a, 'c> {
    hot: &'a mut Hot<'c>,
    group: &'a mut GroupState,
    log: &'a mut ChangeLog,
    cache: &'a RecordCache,
    counts: &'a mut Counts,
    /// The job reads or writes rows: its task writes go to rows too, so that they commit with
    /// whatever else it writes.
    rows: bool,
    /// The job's logged writes, taken into the group by [`Tx::wrote`].
    staged: Vec<(String, Logged)>,
    /// The job took some logged write into the group.
    logged: bool,
}

impl<'a, 'c> Tx<'a, 'c> {
    /// The writer's connection inside the group's transaction, for a job that reads or writes task
    /// rows: the transaction is begun if need be, and every pending task is written as its row in
    /// it first (a flush, once per group), so the rows are current.
    pub(super) fn conn(&mut self) -> Result<&'c Connection, StoreError> {
        let conn = self.hot.conn;
        if !self.rows {
            self.begin()?;
            self.flush()?;
            self.rows = true;
        }
        Ok(conn)
    }

    /// The writer's connection inside the group's transaction, for a job that touches no task row
    /// (sessions, webhook deliveries): no flush.
    pub(super) fn other_tables(&mut self) -> Result<&'c Connection, StoreError> {
        self.begin()?;
        Ok(self.hot.conn)
    }

    fn begin(&mut self) -> Result<(), StoreError> {
        if !self.group.began {
            // The flusher's connection is not writing from here (see `flusher.rs`).
            self.log.settle(self.cache);
            self.hot
                .conn
                .prepare_cached("BEGIN IMMEDIATE")
                .and_then(|mut s| s.execute([]))
                .context("begin a write transaction")?;
            self.group.began = true;
        }
        Ok(())
    }

    /// Writes every pending task (the group's first flush only), and every task this group logged
    /// so far, as its row.
    fn flush(&mut self) -> Result<(), StoreError> {
        self.log.rows_can_be_current()?;
        if self.log.pending.is_empty() && self.group.logged.is_empty() {
            return Ok(());
        }
        let conn = self.hot.conn;
        let insert = prepared(conn, &mut self.hot.insert_task, rows::INSERT_TASK)?;
        let update = prepared(conn, &mut self.hot.update_task, rows::UPDATE_TASK)?;
        // Once per group: a second job that needs rows must not write the pending tasks again.
        // They stay pending until the group commits, and writing them again would put their
        // logged state over the later writes this group made to their rows since (and insert the
        // new ones twice).
        if !self.log.pending.is_empty() && !self.group.flushed {
            self.log.write_rows(conn, insert, update)?;
            self.group.flushed = true;
        }
        for (id, logged) in std::mem::take(&mut self.group.logged) {
            let Some(record) = self.group.writes.get(&id) else {
                continue;
            };
            write_row(insert, update, record, logged.new, &logged.transitions)?;
        }
        // What the flush changed is not the job's own writing (see `writer::transaction`).
        self.group.changes_base = Some(conn.total_changes());
        Ok(())
    }

    /// Whether a write of `t` goes to the change log (see the type's note).
    fn logs(&self, t: &TaskRecord) -> bool {
        // A record too heavy to keep in memory goes to its row: pinned, it would be held whole
        // until its flush, and written twice.
        !self.rows && t.webhooks.is_empty() && self.log.usable() && weight(t).is_some()
    }

    /// Tests: whether the writer is to behave as if the process died (no flush of its own).
    pub(super) fn crashed(&self) -> bool {
        self.log.crashed()
    }

    /// Asks the writer to hand the pending tasks to the flusher after this group (an idle flush).
    pub(super) fn flush_soon(&mut self) {
        self.log.flush_soon = true;
    }

    /// Whether the job took a logged write into the group (its caller then waits on the log).
    pub(super) fn logged(&self) -> bool {
        self.logged
    }

    /// The task as this transaction sees it: written earlier in the group, else committed lately
    /// (pending tasks included), else its row (current: a task whose row is behind is pinned).
    pub(super) fn task(
        &self,
        id: &str,
        shared: &SharedArguments,
    ) -> Result<Option<TaskRecord>, StoreError> {
        if let Some(rec) = self.group.writes.get(id) {
            return Ok(Some(TaskRecord::clone(rec)));
        }
        if let Some(rec) = self.cache.get(id) {
            return Ok(Some(rec));
        }
        select_task_shared(self.hot.conn, id, shared)
    }

    /// The task of `owner` with idempotency key `key`, as this transaction sees it, without
    /// writing the pending tasks as rows: one this group wrote, else a pending one (its row may be
    /// missing or behind), else its row (rows are current for every task that is not pending).
    pub(super) fn find_key(
        &self,
        owner: &str,
        key: &str,
    ) -> Result<Option<TaskRecord>, StoreError> {
        let ours = |t: &TaskRecord| t.owner == owner && t.idempotency_key.as_deref() == Some(key);
        if let Some(rec) = self.group.writes.values().find(|t| ours(t)) {
            return Ok(Some(TaskRecord::clone(rec)));
        }
        if let Some(rec) = self.cache.pinned_by_key(owner, key) {
            return Ok(Some(rec));
        }
        rows::select_by_key(self.hot.conn, owner, key)
    }

    /// Stores new task `t`.
    pub(super) fn insert_task(&mut self, t: &TaskRecord) -> Result<(), StoreError> {
        if self.logs(t) {
            self.staged.push((
                t.id.clone(),
                Logged {
                    new: true,
                    transitions: Vec::new(),
                },
            ));
        } else {
            self.conn()?;
            let stmt = prepared(self.hot.conn, &mut self.hot.insert_task, rows::INSERT_TASK)?;
            rows::insert_task(stmt, t, None)?;
        }
        self.counts
            .changed(&t.owner, t.session.as_deref(), None, t.status);
        Ok(())
    }

    /// Writes back task `t`, whose status was `before` (see [`rows::update_task`] for `was`).
    pub(super) fn update_task(
        &mut self,
        before: TaskStatus,
        t: &TaskRecord,
        was: crate::webhook::WriteBase,
    ) -> Result<(), StoreError> {
        if self.logs(t) {
            self.staged.push((
                t.id.clone(),
                Logged {
                    new: false,
                    transitions: rows::transition_of(t, was).into_iter().collect(),
                },
            ));
        } else {
            let conn = self.conn()?;
            let stmt = prepared(conn, &mut self.hot.update_task, rows::UPDATE_TASK)?;
            rows::update_task(conn, stmt, t, was)?;
        }
        self.counts
            .changed(&t.owner, t.session.as_deref(), Some(before), t.status);
        Ok(())
    }

    /// The unfinished tasks `limit` counts, up to its `max`, as this transaction sees them.
    pub(super) fn unfinished(&mut self, limit: &ActiveLimit) -> Result<usize, StoreError> {
        if !self.counts.knows(&limit.owner) {
            // Read from rows the first time, so the rows must hold every task.
            self.conn()?;
        }
        // Debug builds check the kept counts against the rows, when the rows are current.
        let current = self.log.pending.is_empty()
            && !self.log.flushing()
            && self.group.logged.is_empty()
            && self.staged.is_empty();
        self.counts.of(
            self.hot.conn,
            &limit.owner,
            &limit.among,
            limit.max,
            current,
        )
    }

    /// Says the job wrote `rec` as the task's record. Call it once the job's statements have all
    /// succeeded: a job that fails afterwards is undone, and its record with it (see
    /// [`Group::job_failed`]).
    pub(super) fn wrote(&mut self, rec: &TaskRecord) {
        self.wrote_shared(Arc::new(rec.clone()));
    }

    /// [`Tx::wrote`] for a record the job hands over shared, so that the writer does not copy it:
    /// its caller takes its own copy after the group, on its own thread.
    pub(super) fn wrote_shared(&mut self, rec: Arc<TaskRecord>) {
        let mut i = 0;
        while i < self.staged.len() {
            if self.staged[i].0 == rec.id {
                let (id, l) = self.staged.swap_remove(i);
                let into = self.group.logged.entry(id).or_default();
                into.new |= l.new;
                into.transitions.extend(l.transitions);
                self.logged = true;
            } else {
                i += 1;
            }
        }
        self.group.writes.insert(rec.id.clone(), rec);
    }

    /// Says the job changed task `id`'s row in a way it has no record of (a lease renewal): the
    /// next reader takes the row.
    pub(super) fn forget(&mut self, id: &str) {
        if !self.group.logged.contains_key(id) {
            self.group.writes.remove(id);
        }
        self.group.forgot.push(id.to_string());
        self.cache.remove(id);
    }

    /// Says the job changed task rows it does not name (a purge): every reader takes rows.
    pub(super) fn forget_all(&mut self) {
        let logged = &self.group.logged;
        self.group.writes.retain(|id, _| logged.contains_key(id));
        self.group.forgot_all = true;
        self.cache.clear();
    }
}

/// A group transaction's own state, apart from what it borrows.
#[derive(Default)]
pub(super) struct GroupState {
    /// The records its jobs wrote, logged or not.
    writes: IdMap<Arc<TaskRecord>>,
    /// Which of them go to the change log, and how.
    logged: IdMap<Logged>,
    /// Its SQLite transaction is open.
    pub(super) began: bool,
    /// It wrote the pending tasks as rows (see [`Tx::conn`]).
    flushed: bool,
    /// The connection's change count after the current job's flush, if it flushed.
    pub(super) changes_base: Option<u64>,
    /// Tasks whose rows it changed without a record ([`Tx::forget`]); all of them, after
    /// [`Tx::forget_all`]. Their records from before must not be published when it commits.
    forgot: Vec<String>,
    forgot_all: bool,
}

/// One group transaction: its state, the records published when it commits, the change log and
/// the writer's counts of unfinished tasks.
pub(super) struct Group<'a> {
    pub(super) state: GroupState,
    log: &'a mut ChangeLog,
    cache: &'a RecordCache,
    counts: &'a mut Counts,
}

impl<'a> Group<'a> {
    pub(super) fn new(
        cache: &'a RecordCache,
        counts: &'a mut Counts,
        log: &'a mut ChangeLog,
    ) -> Group<'a> {
        Group {
            state: GroupState::default(),
            log,
            cache,
            counts,
        }
    }

    /// The view the next job runs with.
    pub(super) fn tx<'b, 'c>(&'b mut self, hot: &'b mut Hot<'c>) -> Tx<'b, 'c>
    where
        'a: 'b,
    {
        Tx {
            hot,
            group: &mut self.state,
            log: &mut *self.log,
            cache: self.cache,
            counts: &mut *self.counts,
            rows: false,
            staged: Vec::new(),
            logged: false,
        }
    }

    /// The last job succeeded: its writes stand until the transaction ends.
    pub(super) fn job_succeeded(&mut self) {
        self.counts.job_succeeded();
    }

    /// The last job failed. Its records were never reported (a job reports them once its
    /// statements have succeeded), but its count changes may have been: they go, whether the job
    /// changed no row or the whole transaction is rolled back after it.
    pub(super) fn job_failed(&mut self) {
        self.counts.job_failed();
    }

    /// The group's SQLite transaction committed (or it had none): the flushed tasks are no longer
    /// pending, its logged writes are appended to the log and synced, and its records become the
    /// committed ones. An `Err` is a failed append: the jobs that logged are not written, and their
    /// records are dropped.
    pub(super) fn committed(self) -> Result<(), StoreError> {
        let Group {
            mut state,
            log,
            cache,
            counts,
        } = self;
        if state.flushed {
            log.flushed();
            cache.unpin_all(state.forgot_all, &state.forgot);
            if let Err(e) = log.empty() {
                // Its frames are all written as rows: appending after them is harmless.
                tracing::warn!(error = %e, "could not empty the change log");
            }
        }
        let mut outcome = Ok(());
        if !state.logged.is_empty() {
            let mut pending = Vec::with_capacity(state.logged.len());
            for (id, logged) in std::mem::take(&mut state.logged) {
                if let Some(record) = state.writes.remove(&id) {
                    pending.push(Pending {
                        record,
                        new: logged.new,
                        transitions: logged.transitions,
                    });
                }
            }
            let frames: Vec<_> = pending
                .iter()
                .map(|p| (&*p.record, p.new, p.transitions.as_slice()))
                .collect();
            match log.append(&frames) {
                Ok(()) => {
                    // The same records, shared: pinned for readers, pending for the flush.
                    cache.pin(pending.iter().map(|p| p.record.clone()));
                    for p in pending {
                        log.add(p);
                    }
                }
                Err(e) => {
                    // The kept counts took these writes in; read them from rows again.
                    counts.forget();
                    outcome = Err(e);
                }
            }
        }
        cache.publish(state.writes.into_iter());
        outcome
    }

    /// The transaction was rolled back (its commit failed, or a job failed after it had written):
    /// what its jobs counted did not happen.
    pub(super) fn rolled_back(self) {
        self.counts.forget();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testkit::record;

    #[test]
    fn a_generation_the_cache_lets_go_of_is_dropped_by_the_reaper_not_by_the_writer() {
        let cache = RecordCache::default();
        let held = cache.reaper.gate.hold();
        let first = Arc::new(record("t0", "o", 0));
        let w = Arc::downgrade(&first);
        let rest = (1..=2 * GENERATION).map(|i| {
            let id = format!("t{i}");
            let rec = Arc::new(record(&id, "o", i as u64));
            (id, rec)
        });
        // Two turns: the second lets go of the generation that holds `t0`. With the reaper held,
        // this returns only if the writer does not drop that generation itself.
        cache.publish(std::iter::once(("t0".to_string(), first)).chain(rest));
        assert!(cache.get("t0").is_none(), "t0's generation was let go of");
        assert!(cache.get(&format!("t{}", 2 * GENERATION)).is_some());
        assert_eq!(
            w.strong_count(),
            1,
            "t0 was dropped by the publishing thread"
        );
        drop(held);
        assert!(
            super::super::reaper::tests::dropped(&w),
            "the reaper never dropped t0"
        );
    }
}
