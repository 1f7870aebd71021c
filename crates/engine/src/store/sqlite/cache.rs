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
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use serde_json::Value;

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
pub(super) struct RecordCache(Mutex<Generations>);

/// Two maps instead of a least-recently-used list: a write goes into `current`; when `current` is
/// full it becomes `previous` and the old `previous` is dropped. A lookup tries both, so a record
/// stays for at least [`GENERATION`] later writes.
#[derive(Default)]
struct Generations {
    current: HashMap<String, TaskRecord>,
    /// What `current` weighs, estimated.
    current_bytes: usize,
    previous: HashMap<String, TaskRecord>,
}

impl RecordCache {
    fn lock(&self) -> MutexGuard<'_, Generations> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The committed record of task `id`, when it was written lately.
    pub(super) fn get(&self, id: &str) -> Option<TaskRecord> {
        let g = self.lock();
        g.current.get(id).or_else(|| g.previous.get(id)).cloned()
    }

    /// Takes a committed group's records.
    fn publish(&self, records: impl Iterator<Item = (String, TaskRecord)>) {
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
                g.previous = full;
                g.current_bytes = 0;
            }
            // A record replaced in `current` is counted twice until the generation turns: the
            // estimate errs on the side of turning early.
            g.current_bytes += bytes;
            g.current.insert(id, rec);
        }
    }

    fn remove(&self, id: &str) {
        let mut g = self.lock();
        g.current.remove(id);
        g.previous.remove(id);
    }

    fn clear(&self) {
        let mut g = self.lock();
        g.current.clear();
        g.current_bytes = 0;
        g.previous.clear();
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
    let mut values = vec![&*rec.arguments, &rec.request_meta];
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

/// What one job sees of the group transaction it runs in: the writer's connection, the task
/// records the group has written so far, and the counts of unfinished tasks.
///
/// Every write of a task row goes through [`Tx::insert_task`] or [`Tx::update_task`], so that the
/// counts follow the rows.
pub(super) struct Tx<'a, 'c> {
    /// The writer's connection, inside the group's transaction.
    pub conn: &'a Connection,
    hot: &'a mut Hot<'c>,
    writes: &'a mut HashMap<String, TaskRecord>,
    cache: &'a RecordCache,
    counts: &'a mut Counts,
}

impl<'a, 'c> Tx<'a, 'c> {
    /// The task as this transaction sees it: written earlier in the group, else committed lately,
    /// else its row.
    pub(super) fn task(
        &self,
        id: &str,
        shared: &SharedArguments,
    ) -> Result<Option<TaskRecord>, StoreError> {
        if let Some(rec) = self.writes.get(id) {
            return Ok(Some(rec.clone()));
        }
        if let Some(rec) = self.cache.get(id) {
            return Ok(Some(rec));
        }
        select_task_shared(self.conn, id, shared)
    }

    /// Inserts task `t`'s row.
    pub(super) fn insert_task(&mut self, t: &TaskRecord) -> Result<(), StoreError> {
        let stmt = prepared(self.hot.conn, &mut self.hot.insert_task, rows::INSERT_TASK)?;
        rows::insert_task(stmt, t)?;
        self.counts
            .changed(&t.owner, t.session.as_deref(), None, t.status);
        Ok(())
    }

    /// Writes back task `t`'s row, whose status was `before` (see [`rows::update_task`] for `was`).
    pub(super) fn update_task(
        &mut self,
        before: TaskStatus,
        t: &TaskRecord,
        was: crate::webhook::WriteBase,
    ) -> Result<(), StoreError> {
        let stmt = prepared(self.hot.conn, &mut self.hot.update_task, rows::UPDATE_TASK)?;
        rows::update_task(self.conn, stmt, t, was)?;
        self.counts
            .changed(&t.owner, t.session.as_deref(), Some(before), t.status);
        Ok(())
    }

    /// The unfinished tasks `limit` counts, up to its `max`, as this transaction sees them.
    pub(super) fn unfinished(&mut self, limit: &ActiveLimit) -> Result<usize, StoreError> {
        self.counts
            .of(self.conn, &limit.owner, &limit.among, limit.max)
    }

    /// Says the job wrote `rec` as the task's row. Call it once the job's statements have all
    /// succeeded: a job that fails afterwards is undone, and its record with it (see
    /// [`Group::job_failed`]).
    pub(super) fn wrote(&mut self, rec: &TaskRecord) {
        self.writes.insert(rec.id.clone(), rec.clone());
    }

    /// Says the job changed task `id`'s row in a way it has no record of (a lease renewal): the
    /// next reader takes the row.
    pub(super) fn forget(&mut self, id: &str) {
        self.writes.remove(id);
        self.cache.remove(id);
    }

    /// Says the job changed task rows it does not name (a purge): every reader takes rows.
    pub(super) fn forget_all(&mut self) {
        self.writes.clear();
        self.cache.clear();
    }
}

/// One group transaction's view: the records its jobs wrote, published when it commits, and the
/// writer's counts of unfinished tasks.
pub(super) struct Group<'a> {
    writes: HashMap<String, TaskRecord>,
    cache: &'a RecordCache,
    counts: &'a mut Counts,
}

impl<'a> Group<'a> {
    pub(super) fn new(cache: &'a RecordCache, counts: &'a mut Counts) -> Group<'a> {
        Group {
            writes: HashMap::new(),
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
            conn: hot.conn,
            hot,
            writes: &mut self.writes,
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

    /// The group committed: its records become the committed ones.
    pub(super) fn committed(self) {
        self.cache.publish(self.writes.into_iter());
    }

    /// The transaction was rolled back (its commit failed, or a job failed after it had written):
    /// what its jobs counted did not happen.
    pub(super) fn rolled_back(self) {
        self.counts.forget();
    }
}
