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

use super::reaper::Reaper;
use super::rows::{self, select_task_shared, SharedArguments};
use super::unfinished::Counts;
use super::Context;
use crate::model::{ActiveLimit, Outcome, TaskRecord, TaskStatus};
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
        g.current
            .get(id)
            .or_else(|| g.previous.get(id))
            .map(|r| TaskRecord::clone(r))
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

    /// Drops a committed record.
    fn remove(&self, id: &str) {
        let mut g = self.lock();
        g.current.remove(id);
        g.previous.remove(id);
    }

    /// Drops every committed record.
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
        g.current.len() + g.previous.len()
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

/// What one job sees of the group transaction it runs in: the writer's connection inside the
/// group's SQLite transaction, the task records the group has written so far and the counts of
/// unfinished tasks.
///
/// Every write of a task goes through [`Tx::insert_task`] or [`Tx::update_task`], so that the
/// counts follow the tasks. Each is a row in the group's transaction: when the group commits, the
/// database file (its WAL included) holds it, before any caller hears of it.
pub(super) struct Tx<'a, 'c> {
    hot: &'a mut Hot<'c>,
    group: &'a mut GroupState,
    cache: &'a RecordCache,
    counts: &'a mut Counts,
}

impl<'a, 'c> Tx<'a, 'c> {
    /// The writer's connection inside the group's transaction, begun by the first job that needs
    /// it: a group whose jobs all fail before they write begins none.
    pub(super) fn conn(&mut self) -> Result<&'c Connection, StoreError> {
        if !self.group.began {
            self.hot
                .conn
                .prepare_cached("BEGIN IMMEDIATE")
                .and_then(|mut s| s.execute([]))
                .context("begin a write transaction")?;
            self.group.began = true;
        }
        Ok(self.hot.conn)
    }

    /// The task as this transaction sees it: written earlier in the group, else committed lately,
    /// else its row.
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

    /// The task of `owner` with idempotency key `key`, as this transaction sees it.
    pub(super) fn find_key(
        &self,
        owner: &str,
        key: &str,
    ) -> Result<Option<TaskRecord>, StoreError> {
        // The group's own rows are in its transaction, but its records are at hand.
        let ours = |t: &TaskRecord| t.owner == owner && t.idempotency_key.as_deref() == Some(key);
        if let Some(rec) = self.group.writes.values().find(|t| ours(t)) {
            return Ok(Some(TaskRecord::clone(rec)));
        }
        rows::select_by_key(self.hot.conn, owner, key)
    }

    /// Stores new task `t`.
    pub(super) fn insert_task(&mut self, t: &TaskRecord) -> Result<(), StoreError> {
        self.conn()?;
        let stmt = prepared(self.hot.conn, &mut self.hot.insert_task, rows::INSERT_TASK)?;
        rows::insert_task(stmt, t, None)?;
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
        let conn = self.conn()?;
        let stmt = prepared(conn, &mut self.hot.update_task, rows::UPDATE_TASK)?;
        rows::update_task(conn, stmt, t, was)?;
        self.counts
            .changed(&t.owner, t.session.as_deref(), Some(before), t.status);
        Ok(())
    }

    /// The unfinished tasks `limit` counts, up to its `max`, as this transaction sees them.
    pub(super) fn unfinished(&mut self, limit: &ActiveLimit) -> Result<usize, StoreError> {
        // Read from rows the first time (and by debug builds each time, to check the counts).
        let conn = self.conn()?;
        self.counts.of(conn, &limit.owner, &limit.among, limit.max)
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
        self.group.writes.insert(rec.id.clone(), rec);
    }

    /// Says the job changed task `id`'s row in a way it has no record of (a lease renewal): the
    /// next reader takes the row.
    pub(super) fn forget(&mut self, id: &str) {
        self.group.writes.remove(id);
        self.cache.remove(id);
    }

    /// Says the job changed task rows it does not name (a purge): every reader takes rows.
    pub(super) fn forget_all(&mut self) {
        self.group.writes.clear();
        self.cache.clear();
    }
}

/// A group transaction's own state, apart from what it borrows.
#[derive(Default)]
pub(super) struct GroupState {
    /// The records its jobs wrote, published when it commits.
    writes: IdMap<Arc<TaskRecord>>,
    /// Its SQLite transaction is open.
    pub(super) began: bool,
}

/// One group transaction: its state, the records published when it commits, and the writer's
/// counts of unfinished tasks.
pub(super) struct Group<'a> {
    pub(super) state: GroupState,
    cache: &'a RecordCache,
    counts: &'a mut Counts,
}

impl<'a> Group<'a> {
    pub(super) fn new(cache: &'a RecordCache, counts: &'a mut Counts) -> Group<'a> {
        Group {
            state: GroupState::default(),
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
            cache: self.cache,
            counts: &mut *self.counts,
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

    /// The group's SQLite transaction committed (or it had none): its records become the committed
    /// ones.
    pub(super) fn committed(self) {
        self.cache.publish(self.state.writes.into_iter());
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
