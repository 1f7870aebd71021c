//! A [`TaskStore`] on PostgreSQL, for several replicas on one database.
//!
//! Every change is a transaction that locks the rows it reads (`FOR UPDATE`), so a compare-and-set is
//! atomic across replicas. Creates of one owner are serialized by a transaction advisory lock on the
//! owner, which makes the running-task limit and idempotency keys exact across replicas; they are
//! committed in groups (`creates.rs`). Orphans are
//! claimed with `FOR UPDATE SKIP LOCKED`, so replicas sweeping at once never take the same task. The
//! schema is versioned and migrated on open under an advisory lock (`schema.rs`); row mapping and the
//! single-row statements are in `rows.rs`.

mod connect;
mod creates;
mod deliveries;
mod events;
mod groups;
mod presence;
pub mod relay;
mod rows;
mod schema;
mod waits;
mod writes;

use crate::store::prelude::*;
use async_trait::async_trait;
use deadpool_postgres::{GenericClient, Pool};

use self::rows::{
    input_from_row, insert_input, pg_int, select_input, select_task, select_task_versioned,
    session_from_row, signal_from_row, tasks_from_rows, update_task, INPUT_COLUMNS,
    SESSION_COLUMNS, SIGNAL_COLUMNS, TASK_COLUMNS,
};
use super::{
    after_answer, apply_change, claim_orphan, decode_cursor, held_by_holder, id_floor, write_base,
    ActiveCounts, ActiveLimit, AnswerError, Context, Created, FinishedCounts, Handed,
    InvalidCursor, ListQuery, Lookup, OrphanPlan, PurgePolicy, Purged, SessionLimit, SessionRecord,
    StoreError, TaskChange, TaskFilter, TaskPage, UpdateError,
};
use crate::model::{
    InputRecord, InputResponse, NewSignal, SignalRecord, StepRecord, TaskRecord, TaskStatus,
    Transition,
};
use crate::webhook::{Delivery, DeliveryAttempt, DeliveryNext, DeliveryQuery};

/// Rows this store wrote last that it keeps, to write them again without reading them first.
const RECENT_MAX: usize = 4_096;
/// Tasks this store finished lately that it keeps, to answer reads of them without the database.
const FINISHED_MAX: usize = 4_096;
/// How long a task this store finished is answered from memory: the polls right after a finish.
/// A finished task never changes (every update expects an unfinished status); it can only be
/// purged, by its expiry (checked on each read) or by an operator's purge, which another replica
/// or process may run: at most this long unseen here.
const FINISHED_FRESH: std::time::Duration = std::time::Duration::from_secs(2);
/// Set once a purge found no copy of a webhook secret left to drop (see
/// `rows::SECRET_COPIES`): later purges skip the search.
static SECRET_COPIES_GONE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// A [`TaskStore`] on a PostgreSQL database shared by any number of replicas.
pub struct PostgresStore {
    pool: Pool,
    config: tokio_postgres::Config,
    /// Creates go through the group loop (`creates.rs`).
    creates: tokio::sync::mpsc::Sender<creates::Job>,
    /// Compare-and-set task writes go through the group loop (`writes.rs`).
    writes: tokio::sync::mpsc::Sender<writes::Job>,
    /// Unfinished tasks as this store last wrote them, with their row version (at most
    /// [`RECENT_MAX`]): an update of one starts from here instead of a read. Only a hint: the write
    /// is a compare-and-set on the version, and a row changed elsewhere is read after all.
    recent: dashmap::DashMap<String, (TaskRecord, i64)>,
    /// Tasks this store finished lately, with when (at most [`FINISHED_MAX`]; see
    /// [`FINISHED_FRESH`]).
    finished: dashmap::DashMap<String, (TaskRecord, std::time::Instant)>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("hosts", &self.config.get_hosts())
            .field("dbname", &self.config.get_dbname())
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Keeps `t` at row version `version` for the next update, while it is unfinished. When the map
    /// is full it starts over: tasks finished elsewhere (a cancel on another replica, say) would
    /// otherwise hold their places for good.
    fn remember(&self, t: &TaskRecord, version: i64) {
        if t.status.is_terminal() {
            return;
        }
        if self.recent.len() >= RECENT_MAX {
            self.recent.clear();
        }
        self.recent.insert(t.id.clone(), (t.clone(), version));
    }

    /// Writes `t` if its row is still at `version` (whether it was), in the next group of writes.
    async fn write(
        &self,
        t: &TaskRecord,
        version: i64,
        was: crate::webhook::WriteBase,
    ) -> Result<bool, StoreError> {
        let (done, answer) = tokio::sync::oneshot::channel();
        let job = writes::Job {
            task: t.clone(),
            version,
            was,
            done,
        };
        self.writes
            .send(job)
            .await
            .map_err(|_| StoreError::message("the PostgreSQL write loop stopped"))?;
        answer
            .await
            .map_err(|_| StoreError::message("the PostgreSQL write loop stopped"))?
    }

    /// Keeps `t`, which this store just finished, for the reads right after.
    fn keep_finished(&self, t: &TaskRecord) {
        if self.finished.len() >= FINISHED_MAX {
            self.finished.clear();
        }
        self.finished
            .insert(t.id.clone(), (t.clone(), std::time::Instant::now()));
    }

    /// Task `id` as this store finished it, while that is fresh and the task not expired.
    fn fresh_finished(&self, id: &str) -> Option<TaskRecord> {
        let now = crate::clock::now_ms();
        let fresh = self.finished.get(id).and_then(|e| {
            let (t, at) = e.value();
            (at.elapsed() < FINISHED_FRESH && t.expires_at().is_none_or(|x| x > now))
                .then(|| t.clone())
        });
        if fresh.is_none() {
            self.finished.remove(id);
        }
        fresh
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.context("get a PostgreSQL connection")
    }

    /// Runs `f` in a transaction and commits it when `f` succeeds (rolls back otherwise).
    async fn in_tx<T, E, F>(&self, f: F) -> Result<T, E>
    where
        E: From<StoreError>,
        F: for<'t> FnOnce(
            &'t deadpool_postgres::Transaction<'t>,
        ) -> futures::future::BoxFuture<'t, Result<T, E>>,
    {
        let mut client = self.client().await?;
        let tx = client.transaction().await.context("begin a transaction")?;
        let value = f(&tx).await?;
        tx.commit().await.context("commit")?;
        Ok(value)
    }
}

#[async_trait]
impl TaskRows for PostgresStore {
    async fn create(
        &self,
        task: TaskRecord,
        limit: Option<ActiveLimit>,
    ) -> Result<Created, StoreError> {
        let (done, answer) = tokio::sync::oneshot::channel();
        self.creates
            .send(creates::Job { task, limit, done })
            .await
            .map_err(|_| StoreError::message("the PostgreSQL create loop stopped"))?;
        let created = answer
            .await
            .map_err(|_| StoreError::message("the PostgreSQL create loop stopped"))??;
        if let Created::New(t) = &created {
            self.remember(t, 0);
        }
        Ok(created)
    }

    async fn get_many(&self, ids: &[String]) -> Result<Vec<TaskRecord>, StoreError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&format!(
                "SELECT {TASK_COLUMNS} FROM tasks WHERE id = ANY($1)"
            ))
            .await
            .context("prepare a read of several tasks")?;
        let rows = client
            .query(&stmt, &[&ids])
            .await
            .with_context(|| format!("read {} tasks", ids.len()))?;
        tasks_from_rows(&rows)
    }

    async fn get(&self, id: &str) -> Result<Lookup, StoreError> {
        if let Some(t) = self.fresh_finished(id) {
            return Ok(Lookup::Found(t));
        }
        let client = self.client().await?;
        if let Some(t) = select_task(&client, id, false).await? {
            return Ok(Lookup::Found(t));
        }
        let stmt = client
            .prepare_cached("SELECT owner, session FROM tombstones WHERE id = $1")
            .await
            .context("prepare the tombstone read")?;
        let tomb = client
            .query_opt(&stmt, &[&id])
            .await
            .with_context(|| format!("read the tombstone of task {id}"))?;
        Ok(match tomb {
            Some(row) => Lookup::Expired {
                owner: row.get(0),
                session: row.get(1),
            },
            None => Lookup::Missing,
        })
    }

    async fn find_by_key(&self, owner: &str, key: &str) -> Result<Option<TaskRecord>, StoreError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&format!(
                "SELECT {TASK_COLUMNS} FROM tasks WHERE owner = $1 AND idempotency_key = $2"
            ))
            .await
            .context("prepare the idempotency lookup")?;
        client
            .query_opt(&stmt, &[&owner, &key])
            .await
            .with_context(|| format!("find the task of {owner} with key {key:?}"))?
            .as_ref()
            .map(rows::task_from_row)
            .transpose()
    }

    async fn update(
        &self,
        id: &str,
        expect: &[TaskStatus],
        change: TaskChange,
        now: u64,
    ) -> Result<TaskRecord, UpdateError> {
        // Read, decide, then write only if the row is still as read: no transaction of its own to
        // open and close (the write joins whatever other writes commit with it, `writes.rs`), and
        // no read when this store wrote the row last (`recent`).
        let mut hint = self.recent.remove(id).map(|(_, v)| v);
        loop {
            let from_hint = hint.is_some();
            let (mut rec, version) = match hint.take() {
                Some(v) => v,
                None => {
                    // The connection goes back before the write waits for its group.
                    let client = self.client().await?;
                    select_task_versioned(&client, id)
                        .await?
                        .ok_or(UpdateError::NotFound)?
                }
            };
            if !expect.contains(&rec.status) || !held_by_holder(&rec, &change) {
                if from_hint {
                    continue; // decided on the row as read, not as remembered
                }
                return Err(UpdateError::Conflict(Box::new(rec)));
            }
            let was = write_base(&rec, &change);
            apply_change(&mut rec, change.clone(), now);
            if self.write(&rec, version, was).await? {
                self.remember(&rec, version + 1);
                if rec.status.is_terminal() {
                    self.keep_finished(&rec);
                }
                return Ok(rec);
            }
        }
    }

    async fn list(&self, q: &ListQuery) -> Result<Result<TaskPage, InvalidCursor>, StoreError> {
        let (after_at, after_id) = match &q.cursor {
            None => (-1i64, String::new()),
            Some(c) => match decode_cursor(c) {
                Ok((at, id)) => (pg_int(at), id),
                Err(e) => return Ok(Err(e)),
            },
        };
        let limit = pg_int(q.limit as u64).saturating_add(1);
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&format!(
                "SELECT {TASK_COLUMNS} FROM tasks WHERE owner = $1 \
                 AND ($2::TEXT IS NULL OR session = $2) \
                 AND (created_at > $3 OR (created_at = $3 AND id > $4)) \
                 ORDER BY created_at, id LIMIT $5"
            ))
            .await
            .context("prepare the task list")?;
        let found = client
            .query(&stmt, &[&q.owner, &q.session, &after_at, &after_id, &limit])
            .await
            .with_context(|| format!("list the tasks of {:?}", q.owner))?;
        let mut tasks = tasks_from_rows(&found)?;
        let more = tasks.len() > q.limit;
        tasks.truncate(q.limit);
        Ok(Ok(TaskPage::new(tasks, more)))
    }

    async fn history(&self, task_id: &str) -> Result<Vec<Transition>, StoreError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT at, status, message FROM task_history WHERE task_id = $1 ORDER BY at",
            )
            .await
            .context("prepare a history read")?;
        let rows = client
            .query(&stmt, &[&task_id])
            .await
            .with_context(|| format!("read the history of task {task_id}"))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let at: i64 = row.try_get(0).context("read a history row")?;
            let status: String = row.try_get(1).context("read a history row")?;
            let message: Option<String> = row.try_get(2).context("read a history row")?;
            if let Some(status) = TaskStatus::parse(&status) {
                out.push(Transition {
                    at: u64::try_from(at).unwrap_or(0),
                    status,
                    message,
                });
            }
        }
        Ok(out)
    }

    async fn search(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>, StoreError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&format!(
                "SELECT {TASK_COLUMNS} FROM tasks WHERE ($1::TEXT IS NULL OR strpos($1, ',' || status || ',') > 0) \
                 AND ($2::TEXT IS NULL OR tool = $2) AND ($3::TEXT IS NULL OR owner = $3) \
                 AND ($4::BIGINT IS NULL OR created_at >= $4) AND ($5::BIGINT IS NULL OR created_at < $5) \
                 ORDER BY created_at DESC, id DESC LIMIT $6"
            ))
            .await
            .context("prepare the task search")?;
        let rows = client
            .query(
                &stmt,
                &[
                    &filter.status_list(),
                    &filter.tool,
                    &filter.owner,
                    &filter.created_after.map(pg_int),
                    &filter.created_before.map(pg_int),
                    &pg_int(filter.limit as u64),
                ],
            )
            .await
            .context("search tasks")?;
        tasks_from_rows(&rows)
    }

    async fn count_finished(&self, created_after: u64) -> Result<FinishedCounts, StoreError> {
        let client = self.client().await?;
        // Task ids begin with their creation time (`ids::task_id`), so the primary key finds the
        // range; only those rows are read. A result's flag is read from the end of its JSON as
        // serialized (`{"kind":"result","value":…,"is_error":true}`), not by parsing it:
        // PostgreSQL's JSON types refuse a `\u0000` anywhere in it, and a tool's output may hold one.
        let stmt = client
            .prepare_cached(
                "SELECT status, COALESCE(right(outcome, 16) = '\"is_error\":true}', false), COUNT(*) \
                 FROM tasks WHERE id >= $1 AND created_at >= $2 \
                 AND status IN ('completed', 'failed', 'cancelled') GROUP BY 1, 2",
            )
            .await
            .context("prepare the count of finished tasks")?;
        let rows = client
            .query(&stmt, &[&id_floor(created_after), &pg_int(created_after)])
            .await
            .context("count finished tasks")?;
        let mut counts = FinishedCounts::default();
        for row in rows {
            let status: String = row.try_get(0).context("read a finished count")?;
            let is_error: bool = row.try_get(1).context("read a finished count")?;
            let n: i64 = row.try_get(2).context("read a finished count")?;
            counts.add_count(&status, is_error, u64::try_from(n).unwrap_or(0));
        }
        Ok(counts)
    }

    async fn count_active(&self) -> Result<ActiveCounts, StoreError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT status, COUNT(*) FROM tasks \
                 WHERE status IN ('working', 'input_required') GROUP BY status",
            )
            .await
            .context("prepare the count of unfinished tasks")?;
        let rows = client
            .query(&stmt, &[])
            .await
            .context("count unfinished tasks")?;
        let mut counts = ActiveCounts::default();
        for row in rows {
            let status: String = row.try_get(0).context("read a status count")?;
            let n: i64 = row.try_get(1).context("read a status count")?;
            counts.add_count(&status, n);
        }
        Ok(counts)
    }

    async fn purge(&self, p: PurgePolicy) -> Result<Purged, StoreError> {
        self.finished.clear();
        self.in_tx(move |tx| {
            Box::pin(async move {
                let now = pg_int(p.now);
                let (grace_edge, cond) = match p.finished_before {
                    // An operator's purge: everything finished before the cutoff ($1 is still
                    // bound, for the tombstones).
                    Some(cutoff) => (
                        pg_int(cutoff),
                        "$1::BIGINT IS NOT NULL AND status IN ('completed', 'failed', 'cancelled') \
                         AND finished_at < $2",
                    ),
                    None => (
                        pg_int(p.now.saturating_sub(p.finished_grace_ms)),
                        "expires_at IS NOT NULL AND expires_at <= $1 \
                         AND status IN ('completed', 'failed', 'cancelled') AND finished_at <= $2",
                    ),
                };
                tx.execute(
                    &format!(
                        "INSERT INTO tombstones (id, owner, session, expired_at) \
                         SELECT id, owner, session, $1 FROM tasks WHERE {cond} \
                         ON CONFLICT (id) DO UPDATE SET owner = EXCLUDED.owner, \
                         session = EXCLUDED.session, expired_at = EXCLUDED.expired_at"
                    ),
                    &[&now, &grace_edge],
                )
                .await
                .context("tombstone expired tasks")?;
                // A purged task's questions and answers go with it; nothing can reach them any more.
                tx.execute(
                    &format!(
                        "DELETE FROM input_requests WHERE task_id IN (SELECT id FROM tasks WHERE {cond})"
                    ),
                    &[&now, &grace_edge],
                )
                .await
                .context("delete the input requests of expired tasks")?;
                tx.execute(
                    &format!(
                        "DELETE FROM task_history WHERE task_id IN (SELECT id FROM tasks WHERE {cond})"
                    ),
                    &[&now, &grace_edge],
                )
                .await
                .context("delete the history of expired tasks")?;
                tx.execute(
                    &format!(
                        "DELETE FROM task_steps WHERE task_id IN (SELECT id FROM tasks WHERE {cond})"
                    ),
                    &[&now, &grace_edge],
                )
                .await
                .context("delete the step journals of expired tasks")?;
                tx.execute(
                    &format!(
                        "DELETE FROM task_signals WHERE task_id IN (SELECT id FROM tasks WHERE {cond})"
                    ),
                    &[&now, &grace_edge],
                )
                .await
                .context("delete the signals of expired tasks")?;
                // Events outlive their task: those still kept take the secret of their target,
                // which goes with the task's row; in the same statement as the delete, so a task
                // finished meanwhile cannot go without its events' copy.
                let tasks: i64 = tx
                    .query_one(
                        &format!(
                            "WITH gone AS (DELETE FROM tasks WHERE {cond} RETURNING id, webhooks), \
                             kept AS (UPDATE webhook_outbox o SET secret = COALESCE(g.webhooks::json \
                             -> o.target ->> 'secret', '') FROM gone g WHERE o.task_id = g.id \
                             AND o.secret = '' AND g.webhooks IS NOT NULL) \
                             SELECT count(*) FROM gone"
                        ),
                        &[&now, &grace_edge],
                    )
                    .await
                    .context("delete expired tasks")?
                    .get(0);
                let tasks = u64::try_from(tasks).unwrap_or(0);
                // Past the window of the earlier builds' replicas, the copies they needed go.
                if !rows::copies_secrets(p.now)
                    && !SECRET_COPIES_GONE.load(std::sync::atomic::Ordering::Relaxed)
                {
                    let blanked = tx
                        .execute(
                            "UPDATE webhook_outbox o SET secret = '' FROM tasks t \
                             WHERE t.id = o.task_id AND o.secret <> '' \
                             AND o.secret = t.webhooks::json -> o.target ->> 'secret'",
                            &[],
                        )
                        .await
                        .context("drop the copies of webhook secrets kept with their tasks")?;
                    if blanked == 0 {
                        SECRET_COPIES_GONE.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                let tomb_edge = pg_int(p.now.saturating_sub(p.tombstone_ms));
                let tombstones = tx
                    .execute("DELETE FROM tombstones WHERE expired_at < $1", &[&tomb_edge])
                    .await
                    .context("delete old tombstones")?;
                let count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
                Ok(Purged {
                    tasks: count(tasks),
                    tombstones: count(tombstones),
                })
            })
        })
        .await
    }
}

#[async_trait]
impl InputStore for PostgresStore {
    async fn add_input(&self, input: InputRecord, now: u64) -> Result<TaskRecord, UpdateError> {
        self.in_tx(move |tx| {
            Box::pin(async move {
                let mut rec = select_task(tx, &input.task_id, true)
                    .await?
                    .ok_or(UpdateError::NotFound)?;
                if rec.status.is_terminal() {
                    return Err(UpdateError::Conflict(Box::new(rec)));
                }
                let change = TaskChange {
                    status: Some(TaskStatus::InputRequired),
                    ..Default::default()
                };
                let was = write_base(&rec, &change);
                apply_change(&mut rec, change, now);
                update_task(tx, &rec, was).await?;
                insert_input(tx, &input).await?;
                Ok(rec)
            })
        })
        .await
    }

    async fn answer_input(
        &self,
        key: &str,
        response: InputResponse,
        now: u64,
    ) -> Result<(TaskRecord, InputRecord), AnswerError> {
        let key = key.to_string();
        self.in_tx(move |tx| {
            Box::pin(async move {
                let input = select_input(tx, &key, true)
                    .await?
                    .ok_or(AnswerError::Unknown)?;
                if input.response.is_some() {
                    return Err(AnswerError::AlreadyAnswered);
                }
                let mut rec = select_task(tx, &input.task_id, true)
                    .await?
                    .ok_or(AnswerError::Unknown)?;
                if rec.status.is_terminal() {
                    return Err(AnswerError::TaskEnded(rec.status));
                }
                rows::answer_input(tx, &key, &response, now).await?;
                let pending = rows::pending_inputs(tx, &input.task_id).await?;
                let change = after_answer(rec.status, pending > 0);
                let was = write_base(&rec, &change);
                apply_change(&mut rec, change, now);
                update_task(tx, &rec, was).await?;
                Ok((
                    rec,
                    InputRecord {
                        response: Some(response),
                        answered_at: Some(now),
                        ..input
                    },
                ))
            })
        })
        .await
    }

    async fn get_input(&self, key: &str) -> Result<Option<InputRecord>, StoreError> {
        let client = self.client().await?;
        select_input(&client, key, false).await
    }

    async fn hand_input(
        &self,
        key: &str,
        from: Option<&str>,
        to: Option<&str>,
    ) -> Result<Handed, StoreError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "WITH handed AS (UPDATE input_requests SET sent_to = $3 \
                 WHERE key = $1 AND response IS NULL AND sent_to IS NOT DISTINCT FROM $2 \
                 RETURNING 1) \
                 SELECT (SELECT COUNT(*) FROM handed), response IS NULL, sent_to \
                 FROM input_requests WHERE key = $1",
            )
            .await
            .context("prepare the input hand-over")?;
        let row = client
            .query_opt(&stmt, &[&key, &from, &to])
            .await
            .with_context(|| format!("hand over input request {key}"))?;
        // The statement's snapshot shows the row as it was before the update.
        Ok(match row {
            None => Handed::Gone,
            Some(row) if row.get::<_, i64>(0) == 1 => Handed::Done,
            Some(row) if !row.get::<_, bool>(1) => Handed::Gone,
            Some(row) => match row.get::<_, Option<String>>(2) {
                Some(holder) => Handed::HeldBy(holder),
                None => Handed::Free,
            },
        })
    }

    async fn inputs(&self, task_id: &str) -> Result<Vec<InputRecord>, StoreError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&format!(
                "SELECT {INPUT_COLUMNS} FROM input_requests WHERE task_id = $1 ORDER BY created_at, key"
            ))
            .await
            .context("prepare the input request list")?;
        client
            .query(&stmt, &[&task_id])
            .await
            .with_context(|| format!("read the input requests of task {task_id}"))?
            .iter()
            .map(input_from_row)
            .collect()
    }

    async fn overdue_waiting(&self, now: u64) -> Result<Vec<TaskRecord>, StoreError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&format!(
                "SELECT {TASK_COLUMNS} FROM tasks WHERE status = 'input_required' \
                 AND expires_at IS NOT NULL AND expires_at <= $1"
            ))
            .await
            .context("prepare the overdue query")?;
        let found = client
            .query(&stmt, &[&pg_int(now)])
            .await
            .context("find tasks that expired waiting for input")?;
        tasks_from_rows(&found)
    }
}

#[async_trait]
impl JournalStore for PostgresStore {
    async fn record_step(&self, node: &str, step: StepRecord) -> Result<(), UpdateError> {
        let client = self.client().await?;
        // FOR SHARE: a lease changing hands at the same moment waits for the insert, or the check
        // sees the new holder; a step is never recorded by a run that no longer holds the task.
        let stmt = client
            .prepare_cached(
                "WITH held AS (SELECT id FROM tasks WHERE id = $1 AND lease_owner = $2 \
                 AND status IN ('working', 'input_required') FOR SHARE) \
                 INSERT INTO task_steps (task_id, seq, name, output, attempt, at, duration_ms, \
                 error) SELECT id, $3, $4, $5, $6, $7, $8, $9 FROM held ON CONFLICT DO NOTHING",
            )
            .await
            .context("prepare the step record")?;
        let output = step.output.to_string();
        let n = client
            .execute(
                &stmt,
                &[
                    &step.task_id,
                    &node,
                    &i32::try_from(step.seq).unwrap_or(i32::MAX),
                    &step.name,
                    &output,
                    &i32::try_from(step.attempt).unwrap_or(i32::MAX),
                    &pg_int(step.at),
                    &pg_int(step.duration_ms),
                    &step.error,
                ],
            )
            .await
            .with_context(|| format!("record step {} of task {}", step.seq, step.task_id))?;
        if n == 1 {
            return Ok(());
        }
        match select_task(&client, &step.task_id, false).await? {
            Some(t) => Err(UpdateError::Conflict(Box::new(t))),
            None => Err(UpdateError::NotFound),
        }
    }

    async fn steps(&self, task_id: &str) -> Result<Vec<StepRecord>, StoreError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "SELECT task_id, seq, name, output, attempt, at, duration_ms, error \
                 FROM task_steps WHERE task_id = $1 ORDER BY seq",
            )
            .await
            .context("prepare the step journal read")?;
        client
            .query(&stmt, &[&task_id])
            .await
            .with_context(|| format!("read the step journal of task {task_id}"))?
            .iter()
            .map(rows::step_from_row)
            .collect()
    }

    async fn truncate_steps(&self, task_id: &str, from: u32) -> Result<usize, StoreError> {
        let client = self.client().await?;
        let n = client
            .execute(
                "DELETE FROM task_steps WHERE task_id = $1 AND seq >= $2",
                &[&task_id, &i32::try_from(from).unwrap_or(i32::MAX)],
            )
            .await
            .with_context(|| format!("drop steps {from}… of task {task_id}"))?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }
}

#[async_trait]
impl SignalStore for PostgresStore {
    async fn send_signal(&self, signal: NewSignal) -> Result<(SignalRecord, bool), UpdateError> {
        self.in_tx(move |tx| {
            Box::pin(async move {
                // The task's row locked: senders to one task take places one at a time, and a
                // task that finishes meanwhile waits for the signal or refuses it.
                let rec = select_task(tx, &signal.task_id, true)
                    .await?
                    .ok_or(UpdateError::NotFound)?;
                if let Some(key) = &signal.key {
                    let same = tx
                        .query_opt(
                            &format!(
                                "SELECT {SIGNAL_COLUMNS} FROM task_signals \
                                 WHERE task_id = $1 AND key = $2"
                            ),
                            &[&signal.task_id, key],
                        )
                        .await
                        .with_context(|| {
                            format!("look up signal key {key} of task {}", signal.task_id)
                        })?;
                    if let Some(row) = same {
                        return Ok((signal_from_row(&row)?, false));
                    }
                }
                if rec.status.is_terminal() {
                    return Err(UpdateError::Conflict(Box::new(rec)));
                }
                let payload = signal.payload.to_string();
                let row = tx
                    .query_one(
                        "INSERT INTO task_signals (task_id, seq, name, payload, sender, key, at) \
                         SELECT $1, COALESCE(MAX(seq), 0) + 1, $2, $3, $4, $5, $6 \
                         FROM task_signals WHERE task_id = $1 RETURNING seq",
                        &[
                            &signal.task_id,
                            &signal.name,
                            &payload,
                            &signal.sender,
                            &signal.key,
                            &pg_int(signal.at),
                        ],
                    )
                    .await
                    .with_context(|| {
                        format!("store signal {} of task {}", signal.name, signal.task_id)
                    })?;
                let seq: i32 = row
                    .try_get(0)
                    .map_err(|e| rows::bad_row("a signal's place", e))?;
                Ok((
                    SignalRecord {
                        task_id: signal.task_id,
                        seq: u32::try_from(seq).unwrap_or(0),
                        name: signal.name,
                        payload: signal.payload,
                        sender: signal.sender,
                        key: signal.key,
                        at: signal.at,
                    },
                    true,
                ))
            })
        })
        .await
    }

    async fn next_signal(
        &self,
        task_id: &str,
        name: &str,
        after: u32,
    ) -> Result<Option<SignalRecord>, StoreError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&format!(
                "SELECT {SIGNAL_COLUMNS} FROM task_signals \
                 WHERE task_id = $1 AND name = $2 AND seq > $3 ORDER BY seq LIMIT 1"
            ))
            .await
            .context("prepare a signal read")?;
        let after = i32::try_from(after).unwrap_or(i32::MAX);
        client
            .query_opt(&stmt, &[&task_id, &name, &after])
            .await
            .with_context(|| format!("read signal {name} of task {task_id}"))?
            .as_ref()
            .map(signal_from_row)
            .transpose()
    }

    async fn signals(&self, task_id: &str) -> Result<Vec<SignalRecord>, StoreError> {
        let client = self.client().await?;
        client
            .query(
                &format!(
                    "SELECT {SIGNAL_COLUMNS} FROM task_signals WHERE task_id = $1 ORDER BY seq"
                ),
                &[&task_id],
            )
            .await
            .with_context(|| format!("read the signals of task {task_id}"))?
            .iter()
            .map(signal_from_row)
            .collect()
    }
}

#[async_trait]
impl LeaseStore for PostgresStore {
    async fn renew_leases(
        &self,
        node: &str,
        ids: &[String],
        until: u64,
    ) -> Result<Vec<String>, StoreError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "UPDATE tasks SET lease_until = $1, version = version + 1 WHERE id = ANY($2) \
                 AND lease_owner = $3 AND status IN ('working', 'input_required') RETURNING id",
            )
            .await
            .context("prepare the lease renewal")?;
        let renewed: std::collections::HashSet<String> = client
            .query(&stmt, &[&pg_int(until), &ids, &node])
            .await
            .with_context(|| format!("renew {} leases", ids.len()))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        Ok(ids
            .iter()
            .filter(|id| !renewed.contains(*id))
            .cloned()
            .collect())
    }

    async fn claim_orphans(
        &self,
        node: &str,
        now: u64,
        all: bool,
        lease_until: u64,
        plan: OrphanPlan,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        let node = node.to_string();
        self.in_tx(move |tx| {
            Box::pin(async move {
                // SKIP LOCKED: a task another replica is changing right now is not an orphan to
                // fight over; the next sweep sees it again if it still is one.
                let stmt = tx
                    .prepare_cached(&format!(
                        "SELECT {TASK_COLUMNS} FROM tasks WHERE status IN ('working', 'input_required') \
                         AND ($1 OR lease_until IS NULL OR lease_until < $2) FOR UPDATE SKIP LOCKED"
                    ))
                    .await
                    .context("prepare the orphan query")?;
                let found = tx
                    .query(&stmt, &[&all, &pg_int(now)])
                    .await
                    .context("find unfinished tasks nobody runs")?;
                let mut changed = Vec::new();
                for mut t in tasks_from_rows(&found)? {
                    if let Some(was) = claim_orphan(&mut t, &plan, &node, lease_until, now) {
                        changed.push((t, was));
                    }
                }
                // Pipelined: the updates go out together on the one connection.
                futures::future::try_join_all(changed.iter().map(|(t, was)| update_task(tx, t, *was)))
                    .await?;
                Ok(changed.into_iter().map(|(t, _)| t).collect())
            })
        })
        .await
    }

    fn is_exclusive(&self) -> bool {
        // Other replicas may run tasks from this database: only expired leases are orphans.
        false
    }
}

#[async_trait]
impl SessionStore for PostgresStore {
    async fn put_session(&self, s: &SessionRecord) -> Result<(), StoreError> {
        let client = self.client().await?;
        insert_session(&client, s).await
    }

    async fn create_session(
        &self,
        s: &SessionRecord,
        limit: &SessionLimit,
    ) -> Result<(), StoreError> {
        let (s, limit) = (s.clone(), limit.clone());
        self.in_tx(move |tx| {
            Box::pin(async move {
                // One owner's session creates queue on its lock, across replicas: the counts then
                // see every create before this one.
                tx.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended('sessions of ' || $1, 0))",
                    &[&s.owner],
                )
                .await
                .context("lock the owner's sessions")?;
                let now = pg_int(s.last_seen);
                let count = |prefix: Option<String>, max: usize| {
                    let owner = s.owner.clone();
                    async move {
                        let row = tx
                            .query_one(
                                "SELECT COUNT(*) FROM (SELECT 1 FROM sessions WHERE owner = $1 \
                                 AND (idle_ms IS NULL OR last_seen + idle_ms > $2) \
                                 AND ($3::TEXT IS NULL OR starts_with(id, $3)) LIMIT $4) AS live",
                                &[&owner, &now, &prefix, &pg_int(max as u64)],
                            )
                            .await
                            .with_context(|| format!("count the live sessions of {owner}"))?;
                        Ok::<usize, StoreError>(usize::try_from(row.get::<_, i64>(0)).unwrap_or(0))
                    }
                };
                let of_prefix = match &limit.per_prefix {
                    Some((prefix, max)) => count(Some(prefix.clone()), *max).await?,
                    None => 0,
                };
                limit.check(of_prefix, count(None, limit.max).await?)?;
                insert_session(tx, &s).await
            })
        })
        .await
    }

    async fn get_session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(&format!(
                "SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1"
            ))
            .await
            .context("prepare the session read")?;
        client
            .query_opt(&stmt, &[&id])
            .await
            .with_context(|| format!("read session {id}"))?
            .as_ref()
            .map(session_from_row)
            .transpose()
    }

    async fn touch_session(&self, id: &str, now: u64) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(
                "UPDATE sessions SET last_seen = GREATEST(last_seen, $2) WHERE id = $1 \
                 AND (idle_ms IS NULL OR last_seen + idle_ms > $2)",
            )
            .await
            .context("prepare the session touch")?;
        let n = client
            .execute(&stmt, &[&id, &pg_int(now)])
            .await
            .with_context(|| format!("touch session {id}"))?;
        Ok(n > 0)
    }

    async fn delete_session(&self, id: &str) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached("DELETE FROM sessions WHERE id = $1")
            .await
            .context("prepare the session delete")?;
        let n = client
            .execute(&stmt, &[&id])
            .await
            .with_context(|| format!("delete session {id}"))?;
        Ok(n > 0)
    }

    async fn purge_sessions(&self, now: u64, idle_ms: u64) -> Result<usize, StoreError> {
        let client = self.client().await?;
        let n = client
            .execute(
                "DELETE FROM sessions WHERE last_seen <= $1::BIGINT - COALESCE(idle_ms, $2::BIGINT)",
                &[&pg_int(now), &pg_int(idle_ms)],
            )
            .await
            .context("delete idle sessions")?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }
}

#[async_trait]
impl OutboxStore for PostgresStore {
    async fn claim_deliveries(
        &self,
        node: &str,
        now: u64,
        lease_until: u64,
        limit: usize,
    ) -> Result<Vec<Delivery>, StoreError> {
        let client = self.client().await?;
        deliveries::claim(&client, node, now, lease_until, limit).await
    }

    async fn finish_delivery(
        &self,
        id: &str,
        node: &str,
        attempt: DeliveryAttempt,
        next: DeliveryNext,
    ) -> Result<bool, StoreError> {
        let client = self.client().await?;
        deliveries::finish(&client, id, node, &attempt, next).await
    }

    async fn deliveries(&self, query: &DeliveryQuery) -> Result<Vec<Delivery>, StoreError> {
        let client = self.client().await?;
        deliveries::list(&client, query).await
    }

    async fn delivery_attempts(&self, id: &str) -> Result<Vec<DeliveryAttempt>, StoreError> {
        let client = self.client().await?;
        deliveries::attempts(&client, id).await
    }

    async fn redeliver(&self, id: &str, now: u64) -> Result<bool, StoreError> {
        let client = self.client().await?;
        deliveries::redeliver(&client, id, now).await
    }

    async fn purge_deliveries(&self, before: u64) -> Result<usize, StoreError> {
        let client = self.client().await?;
        deliveries::purge(&client, before).await
    }

    async fn release_deliveries(&self, node: &str) -> Result<usize, StoreError> {
        let client = self.client().await?;
        deliveries::release(&client, node).await
    }

    async fn count_registrations(&self, owner: &str, max: u64) -> Result<u64, StoreError> {
        let client = self.client().await?;
        deliveries::count_registrations(&client, owner, max).await
    }
}

/// Creates or replaces a session row.
async fn insert_session(
    client: &impl deadpool_postgres::GenericClient,
    s: &SessionRecord,
) -> Result<(), StoreError> {
    let stmt = client
        .prepare_cached(&format!(
            "INSERT INTO sessions ({SESSION_COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6) \
             ON CONFLICT (id) DO UPDATE SET owner = EXCLUDED.owner, data = EXCLUDED.data, \
             created_at = EXCLUDED.created_at, last_seen = EXCLUDED.last_seen, \
             idle_ms = EXCLUDED.idle_ms"
        ))
        .await
        .context("prepare the session write")?;
    client
        .execute(
            &stmt,
            &[
                &s.id,
                &s.owner,
                &s.data.to_string(),
                &pg_int(s.created_at),
                &pg_int(s.last_seen),
                &s.idle_ms.map(pg_int),
            ],
        )
        .await
        .with_context(|| format!("store session {}", s.id))?;
    Ok(())
}

#[cfg(test)]
mod tests;
