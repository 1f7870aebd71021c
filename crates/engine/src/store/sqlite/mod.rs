//! The default [`TaskStore`]: one SQLite file in WAL mode.
//!
//! All writes go through one writer thread that commits them in groups (`writer.rs`). A caller is
//! answered only after the commit that holds its write (`synchronous=FULL`), so "created" means
//! "survives kill -9 and power loss". Reads run on a small pool of read connections and never wait for
//! the writer (WAL). The schema is versioned and migrated on open (`schema.rs`); row mapping and the
//! single-row statements are in `rows.rs`.

mod cache;
mod deliveries;
mod events;
mod frame;
mod lock;
mod old_log;
mod reaper;
mod rows;
mod schema;
mod unfinished;
mod writer;

use crate::store::prelude::*;
use async_trait::async_trait;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};

use self::cache::{RecordCache, Tx};
use self::rows::{
    insert_input, select_input, select_task_shared, select_tasks, session_from_row, sql_int,
    SharedArguments, INPUT_COLUMNS, SESSION_COLUMNS, SIGNAL_COLUMNS, TASK_COLUMNS,
};
use self::writer::{Completion, Job};
use super::{
    after_answer, apply_change, claim_orphan, decode_cursor, held_by_holder, id_floor, prefix_end,
    write_base, ActiveCounts, ActiveLimit, AnswerError, Context, Created, FinishedCounts, Handed,
    InvalidCursor, ListQuery, Lookup, OrphanPlan, PurgePolicy, Purged, SessionLimit, SessionRecord,
    StoreError, TaskChange, TaskFilter, TaskPage, UpdateError,
};
use crate::model::{
    InputRecord, InputResponse, NewSignal, SignalRecord, StepRecord, TaskRecord, TaskStatus,
    Transition,
};
use crate::webhook::{Delivery, DeliveryAttempt, DeliveryNext, DeliveryQuery};

/// What a create job made: a new task is handed back shared with the writer's group (see
/// [`Tx::wrote_shared`]).
enum Made {
    New(Arc<TaskRecord>),
    Existing(Box<TaskRecord>),
}

/// Idle read connections kept open.
const MAX_IDLE_READERS: usize = 8;

/// A [`TaskStore`] on one SQLite file.
pub struct SqliteStore {
    path: PathBuf,
    jobs: mpsc::Sender<Job>,
    readers: Arc<Mutex<Vec<Connection>>>,
    /// The arguments of unfinished tasks, shared by every record read of them.
    shared: Arc<SharedArguments>,
    /// The records the writer committed lately (see `cache.rs`).
    cache: Arc<RecordCache>,
    /// The writer thread, joined when the store is dropped.
    writer: Option<std::thread::JoinHandle<()>>,
}

impl Drop for SqliteStore {
    /// Closes the store: the writer commits what it holds, closes its connection and lets go of the
    /// file, so the file can be opened again (by this process or another) as soon as this returns.
    fn drop(&mut self) {
        let (closed, _) = mpsc::channel(1);
        drop(std::mem::replace(&mut self.jobs, closed));
        if let Some(writer) = self.writer.take() {
            // The writer's last group is at most one commit; its callers are answered without
            // waiting on anything this thread holds.
            let _ = writer.join();
        }
    }
}

fn open(path: &Path, flags: OpenFlags) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(path, flags)
        .with_context(|| format!("open SQLite database {}", path.display()))?;
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .with_context(|| format!("set the busy timeout of {}", path.display()))?;
    // Every statement of the store stays compiled: rusqlite keeps 16 by default, fewer than the writer
    // uses, so the cache evicted statements the hot path needed again.
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`, creating its folder too, brings its schema
    /// up to date and starts the writer thread. Must be called inside a tokio runtime.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("create folder {}", dir.display()))?;
        }
        // Before anything touches the file: the records this store keeps in memory are right only
        // while no other process writes it.
        let lock = lock::claim(&path)?;
        let mut writer = open(&path, OpenFlags::default())?;
        writer
            .execute_batch(
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;",
            )
            .with_context(|| format!("configure {}", path.display()))?;
        schema::migrate(&mut writer, &path)?;
        // What an earlier build left in its change log and not in rows is written now, before
        // anything reads rows (`old_log.rs`).
        old_log::replay(&path, &mut writer)?;
        let cache = Arc::new(RecordCache::default());
        let (jobs, writer) = writer::spawn(writer, cache.clone(), lock)?;
        Ok(SqliteStore {
            path,
            jobs,
            readers: Arc::new(Mutex::new(Vec::new())),
            shared: Arc::default(),
            cache,
            writer: Some(writer),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` inside the next group transaction and returns its value once that transaction is
    /// committed. An `Err` from `f` rolls back only `f`'s own writes.
    async fn write<T, E, F>(&self, f: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: FnOnce(&mut Tx<'_, '_>) -> Result<T, E> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel::<Result<T, E>>();
        let job: Job = Box::new(move |conn| {
            let result = f(conn);
            let ok = result.is_ok();
            let done: Completion = Box::new(move |commit| {
                let _ = tx.send(match commit {
                    Ok(()) => result,
                    Err(e) => Err(E::from(e)),
                });
            });
            (ok, done)
        });
        self.jobs
            .send(job)
            .await
            .map_err(|_| E::from(StoreError::message("the SQLite writer thread has stopped")))?;
        rx.await.map_err(|_| {
            E::from(StoreError::message(
                "the SQLite writer thread dropped a write",
            ))
        })?
    }

    /// Runs `f` on a read connection on the blocking pool.
    async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let readers = self.readers.clone();
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            let conn = readers.lock().unwrap_or_else(|p| p.into_inner()).pop();
            let conn = match conn {
                Some(c) => c,
                None => open(
                    &path,
                    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )?,
            };
            let out = f(&conn);
            let mut pool = readers.lock().unwrap_or_else(|p| p.into_inner());
            if pool.len() < MAX_IDLE_READERS {
                pool.push(conn);
            }
            out
        })
        .await
        .context("run a read on the blocking pool")?
    }
}

#[async_trait]
impl TaskRows for SqliteStore {
    async fn create(
        &self,
        task: TaskRecord,
        limit: Option<ActiveLimit>,
    ) -> Result<Created, StoreError> {
        let shared = self.shared.clone();
        let created = self
            .write(move |tx| {
                if let Some(key) = &task.idempotency_key {
                    if let Some(existing) = tx.find_key(&task.owner, key)? {
                        if existing.fingerprint == task.fingerprint {
                            return Ok(Made::Existing(Box::new(existing)));
                        }
                        return Err(StoreError::IdempotencyConflict {
                            key: key.clone(),
                            task_id: existing.id,
                        });
                    }
                }
                if let Some(l) = &limit {
                    // A lookup in the counts the writer keeps (`unfinished.rs`), not a count of rows.
                    let active = tx.unfinished(l)?;
                    if active >= l.max {
                        return Err(StoreError::TooManyActive { active, max: l.max });
                    }
                }
                tx.insert_task(&task)?;
                let task = Arc::new(task);
                tx.wrote_shared(task.clone());
                Ok(Made::New(task))
            })
            .await?;
        Ok(match created {
            Made::New(t) => {
                // The caller's own copy, made here rather than on the writer thread.
                let t = Arc::unwrap_or_clone(t);
                shared.keep(&t);
                Created::New(t)
            }
            Made::Existing(t) => Created::Existing(*t),
        })
    }

    async fn find_by_key(&self, owner: &str, key: &str) -> Result<Option<TaskRecord>, StoreError> {
        let (owner, key) = (owner.to_string(), key.to_string());
        self.read(move |conn| rows::select_by_key(conn, &owner, &key))
            .await
    }

    async fn get(&self, id: &str) -> Result<Lookup, StoreError> {
        // A task written lately is answered without a read connection (see `cache.rs`).
        if let Some(t) = self.cache.get(id) {
            return Ok(Lookup::Found(t));
        }
        let id = id.to_string();
        let shared = self.shared.clone();
        self.read(move |conn| {
            if let Some(t) = select_task_shared(conn, &id, &shared)? {
                return Ok(Lookup::Found(t));
            }
            let tomb = conn
                .prepare_cached("SELECT owner, session FROM tombstones WHERE id = ?1")
                .and_then(|mut s| {
                    s.query_row([&id], |r| {
                        Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))
                    })
                    .optional()
                })
                .with_context(|| format!("read the tombstone of task {id}"))?;
            Ok(match tomb {
                Some((owner, session)) => Lookup::Expired { owner, session },
                None => Lookup::Missing,
            })
        })
        .await
    }

    async fn get_many(&self, ids: &[String]) -> Result<Vec<TaskRecord>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // One statement for the lot: the ids go in as one JSON array.
        let list = serde_json::to_string(ids).context("encode task ids")?;
        let n = ids.len();
        self
            .read(move |conn| {
                select_tasks(
                    conn,
                    &format!(
                        "SELECT {TASK_COLUMNS} FROM tasks WHERE id IN (SELECT value FROM json_each(?1))"
                    ),
                    [&list],
                    || format!("read {n} tasks"),
                )
            })
            .await
    }

    async fn update(
        &self,
        id: &str,
        expect: &[TaskStatus],
        change: TaskChange,
        now: u64,
    ) -> Result<TaskRecord, UpdateError> {
        let id = id.to_string();
        let expect = expect.to_vec();
        let shared = self.shared.clone();
        let rec = self
            .write(move |tx| {
                // The writer thread is the only writer, so read-check-write here is atomic.
                let mut rec = tx.task(&id, &shared)?.ok_or(UpdateError::NotFound)?;
                if !expect.contains(&rec.status) || !held_by_holder(&rec, &change) {
                    return Err(UpdateError::Conflict(Box::new(rec)));
                }
                let (before, was) = (rec.status, write_base(&rec, &change));
                apply_change(&mut rec, change, now);
                tx.update_task(before, &rec, was)?;
                let rec = Arc::new(rec);
                tx.wrote_shared(rec.clone());
                Ok(rec)
            })
            .await?;
        // The caller's own copy, made here rather than on the writer thread.
        let rec = Arc::unwrap_or_clone(rec);
        self.shared.keep(&rec);
        Ok(rec)
    }

    async fn list(&self, q: &ListQuery) -> Result<Result<TaskPage, InvalidCursor>, StoreError> {
        let q = q.clone();
        self.read(move |conn| {
            let (after_at, after_id) = match &q.cursor {
                None => (-1i64, String::new()),
                Some(c) => match decode_cursor(c) {
                    Ok((at, id)) => (sql_int(at), id),
                    Err(e) => return Ok(Err(e)),
                },
            };
            let limit = sql_int(q.limit as u64).saturating_add(1);
            // One statement per shape (see the count in `create`): `session` is bound as given or
            // matched by itself when absent.
            let session_filter = if q.session.is_some() { "session = ?2" } else { "?2 IS NULL" };
            let sql = format!(
                "SELECT {TASK_COLUMNS} FROM tasks WHERE owner = ?1 AND {session_filter} \
                 AND (created_at > ?3 OR (created_at = ?3 AND id > ?4)) ORDER BY created_at, id LIMIT ?5"
            );
            let mut tasks = select_tasks(
                conn,
                &sql,
                params![q.owner, q.session, after_at, after_id, limit],
                || format!("list the tasks of {:?}", q.owner),
            )?;
            let more = tasks.len() > q.limit;
            tasks.truncate(q.limit);
            Ok(Ok(TaskPage::new(tasks, more)))
        })
        .await
    }

    async fn history(&self, task_id: &str) -> Result<Vec<Transition>, StoreError> {
        let id = task_id.to_string();
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT json_extract(h.value, '$.at'), json_extract(h.value, '$.status'), \
                     json_extract(h.value, '$.message') FROM tasks, json_each(tasks.history) AS h \
                     WHERE tasks.id = ?1 ORDER BY h.key",
                )
                .context("prepare a history read")?;
            let rows = stmt
                .query_map([&id], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, Option<String>>(2)?,
                    ))
                })
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .with_context(|| format!("read the history of task {id}"))?;
            Ok(rows
                .into_iter()
                .filter_map(|(at, status, message)| {
                    Some(Transition {
                        at: u64::try_from(at).unwrap_or(0),
                        status: TaskStatus::parse(&status)?,
                        message,
                    })
                })
                .collect())
        })
        .await
    }

    async fn search(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>, StoreError> {
        let f = filter.clone();
        self.read(move |conn| {
            let sql = format!(
                "SELECT {TASK_COLUMNS} FROM tasks WHERE (?1 IS NULL OR instr(?1, ',' || status || ',') > 0) \
                 AND (?2 IS NULL OR tool = ?2) AND (?3 IS NULL OR owner = ?3) \
                 AND (?4 IS NULL OR created_at >= ?4) AND (?5 IS NULL OR created_at < ?5) \
                 ORDER BY created_at DESC, id DESC LIMIT ?6"
            );
            select_tasks(
                conn,
                &sql,
                params![
                    f.status_list(),
                    f.tool,
                    f.owner,
                    f.created_after.map(sql_int),
                    f.created_before.map(sql_int),
                    sql_int(f.limit as u64)
                ],
                || "search tasks".to_string(),
            )
        })
        .await
    }

    async fn count_finished(&self, created_after: u64) -> Result<FinishedCounts, StoreError> {
        self.read(move |conn| {
            // Task ids begin with their creation time (`ids::task_id`), so the primary key finds the
            // range; only those rows are read.
            let mut stmt = conn
                .prepare_cached(
                    "SELECT status, coalesce(json_extract(outcome, '$.is_error'), 0), COUNT(*) \
                     FROM tasks WHERE id >= ?1 AND created_at >= ?2 \
                     AND status IN ('completed', 'failed', 'cancelled') GROUP BY 1, 2",
                )
                .context("prepare the count of finished tasks")?;
            let rows = stmt
                .query_map(
                    params![id_floor(created_after), sql_int(created_after)],
                    |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, i64>(1)?,
                            r.get::<_, i64>(2)?,
                        ))
                    },
                )
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .context("count finished tasks")?;
            let mut counts = FinishedCounts::default();
            for (status, is_error, n) in rows {
                counts.add_count(&status, is_error != 0, u64::try_from(n).unwrap_or(0));
            }
            Ok(counts)
        })
        .await
    }

    async fn count_active(&self) -> Result<ActiveCounts, StoreError> {
        self.read(|conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT status, COUNT(*) FROM tasks \
                     WHERE status IN ('working', 'input_required') GROUP BY status",
                )
                .context("prepare the count of unfinished tasks")?;
            let rows = stmt
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .context("count unfinished tasks")?;
            let mut counts = ActiveCounts::default();
            for (status, n) in rows {
                counts.add_count(&status, n);
            }
            Ok(counts)
        })
        .await
    }

    async fn purge(&self, p: PurgePolicy) -> Result<Purged, StoreError> {
        self.write(move |tx| {
                let conn = tx.conn()?;
            let now = sql_int(p.now);
            let (grace_edge, cond) = match p.finished_before {
                // An operator's purge: everything finished before the cutoff.
                Some(cutoff) => (
                    sql_int(cutoff),
                    "status IN ('completed', 'failed', 'cancelled') AND finished_at < ?2",
                ),
                None => (
                    sql_int(p.now.saturating_sub(p.finished_grace_ms)),
                    "expires_at IS NOT NULL AND expires_at <= ?1 \
                     AND status IN ('completed', 'failed', 'cancelled') AND finished_at <= ?2",
                ),
            };
            conn.execute(
                &format!(
                    "INSERT OR REPLACE INTO tombstones (id, owner, session, expired_at) \
                     SELECT id, owner, session, ?1 FROM tasks WHERE {cond}"
                ),
                params![now, grace_edge],
            )
            .context("tombstone expired tasks")?;
            // A purged task's questions and answers go with it; nothing can reach them any more.
            conn.execute(
                &format!(
                    "DELETE FROM input_requests WHERE task_id IN (SELECT id FROM tasks WHERE {cond})"
                ),
                params![now, grace_edge],
            )
            .context("delete the input requests of expired tasks")?;
            conn.execute(
                &format!(
                    "DELETE FROM task_steps WHERE task_id IN (SELECT id FROM tasks WHERE {cond})"
                ),
                params![now, grace_edge],
            )
            .context("delete the step journals of expired tasks")?;
            conn.execute(
                &format!(
                    "DELETE FROM task_signals WHERE task_id IN (SELECT id FROM tasks WHERE {cond})"
                ),
                params![now, grace_edge],
            )
            .context("delete the signals of expired tasks")?;
            deliveries::keep_secrets_of_purged(conn, cond, now, grace_edge)?;
            let tasks = conn
                .execute(
                    &format!("DELETE FROM tasks WHERE {cond}"),
                    params![now, grace_edge],
                )
                .context("delete expired tasks")?;
            // Which tasks went is not listed; every reader goes to the rows again.
            tx.forget_all();
            let tomb_edge = sql_int(p.now.saturating_sub(p.tombstone_ms));
            let tombstones = conn
                .execute("DELETE FROM tombstones WHERE expired_at < ?1", [tomb_edge])
                .context("delete old tombstones")?;
            Ok(Purged { tasks, tombstones })
        })
        .await
    }
}

#[async_trait]
impl InputStore for SqliteStore {
    async fn add_input(&self, input: InputRecord, now: u64) -> Result<TaskRecord, UpdateError> {
        let shared = self.shared.clone();
        self.write(move |tx| {
            let conn = tx.conn()?;
            let mut rec = tx
                .task(&input.task_id, &shared)?
                .ok_or(UpdateError::NotFound)?;
            if rec.status.is_terminal() {
                return Err(UpdateError::Conflict(Box::new(rec)));
            }
            let change = TaskChange {
                status: Some(TaskStatus::InputRequired),
                ..Default::default()
            };
            let (before, was) = (rec.status, write_base(&rec, &change));
            apply_change(&mut rec, change, now);
            // The input first: a refused one (its key taken) then fails before this job has
            // written anything, which leaves the other writes of its transaction standing.
            insert_input(conn, &input)?;
            tx.update_task(before, &rec, was)?;
            tx.wrote(&rec);
            Ok(rec)
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
        let shared = self.shared.clone();
        self.write(move |tx| {
            let conn = tx.conn()?;
            let input = select_input(conn, &key)?.ok_or(AnswerError::Unknown)?;
            if input.response.is_some() {
                return Err(AnswerError::AlreadyAnswered);
            }
            let mut rec = tx
                .task(&input.task_id, &shared)?
                .ok_or(AnswerError::Unknown)?;
            if rec.status.is_terminal() {
                return Err(AnswerError::TaskEnded(rec.status));
            }
            rows::answer_input(conn, &key, &response, now)?;
            let pending = rows::pending_inputs(conn, &input.task_id)?;
            let change = after_answer(rec.status, pending > 0);
            let (before, was) = (rec.status, write_base(&rec, &change));
            apply_change(&mut rec, change, now);
            tx.update_task(before, &rec, was)?;
            tx.wrote(&rec);
            Ok((
                rec,
                InputRecord {
                    response: Some(response),
                    answered_at: Some(now),
                    ..input
                },
            ))
        })
        .await
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
        let key = key.to_string();
        self.read(move |conn| select_input(conn, &key)).await
    }

    async fn inputs(&self, task_id: &str) -> Result<Vec<InputRecord>, StoreError> {
        let task_id = task_id.to_string();
        self.read(move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {INPUT_COLUMNS} FROM input_requests WHERE task_id = ?1 ORDER BY created_at, key"
            ))
            .and_then(|mut stmt| {
                stmt.query_map([&task_id], rows::input_from_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .with_context(|| format!("read the input requests of task {task_id}"))
        })
        .await
    }

    async fn overdue_waiting(&self, now: u64) -> Result<Vec<TaskRecord>, StoreError> {
        self.read(move |conn| {
            let sql = format!(
                "SELECT {TASK_COLUMNS} FROM tasks WHERE status = 'input_required' \
                 AND expires_at IS NOT NULL AND expires_at <= ?1"
            );
            select_tasks(conn, &sql, [sql_int(now)], || {
                "find tasks that expired waiting for input".into()
            })
        })
        .await
    }
}

#[async_trait]
impl JournalStore for SqliteStore {
    async fn record_step(&self, node: &str, step: StepRecord) -> Result<(), UpdateError> {
        let node = node.to_string();
        let shared = self.shared.clone();
        let output = step.output.to_string();
        self.write(move |tx| {
            let conn = tx.conn()?;
            // The writer thread is the only writer, so the check and the insert are one step.
            let rec = tx
                .task(&step.task_id, &shared)?
                .ok_or(UpdateError::NotFound)?;
            if rec.status.is_terminal() || rec.lease_owner.as_deref() != Some(node.as_str()) {
                return Err(UpdateError::Conflict(Box::new(rec)));
            }
            let n = conn
                .prepare_cached(
                    "INSERT OR IGNORE INTO task_steps \
                     (task_id, seq, name, output, attempt, at, duration_ms, error) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        step.task_id,
                        step.seq,
                        step.name,
                        output,
                        step.attempt,
                        sql_int(step.at),
                        sql_int(step.duration_ms),
                        step.error,
                    ])
                })
                .with_context(|| format!("record step {} of task {}", step.seq, step.task_id))?;
            if n == 0 {
                return Err(UpdateError::Conflict(Box::new(rec)));
            }
            Ok(())
        })
        .await
    }

    async fn steps(&self, task_id: &str) -> Result<Vec<StepRecord>, StoreError> {
        let task_id = task_id.to_string();
        self.read(move |conn| {
            conn.prepare_cached(
                "SELECT task_id, seq, name, output, attempt, at, duration_ms, error \
                 FROM task_steps WHERE task_id = ?1 ORDER BY seq",
            )
            .and_then(|mut stmt| {
                stmt.query_map([&task_id], rows::step_from_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .with_context(|| format!("read the step journal of task {task_id}"))
        })
        .await
    }

    async fn truncate_steps(&self, task_id: &str, from: u32) -> Result<usize, StoreError> {
        let task_id = task_id.to_string();
        self.write(move |tx| {
            let n = tx
                .conn()?
                .execute(
                    "DELETE FROM task_steps WHERE task_id = ?1 AND seq >= ?2",
                    params![task_id, from],
                )
                .with_context(|| format!("drop steps {from}… of task {task_id}"))?;
            Ok(n)
        })
        .await
    }
}

#[async_trait]
impl SignalStore for SqliteStore {
    async fn send_signal(&self, signal: NewSignal) -> Result<(SignalRecord, bool), UpdateError> {
        let shared = self.shared.clone();
        self.write(move |tx| {
            // The writer thread is the only writer: the check, the key's lookup and the place are
            // one step.
            let rec = tx
                .task(&signal.task_id, &shared)?
                .ok_or(UpdateError::NotFound)?;
            let conn = tx.conn()?;
            if let Some(key) = &signal.key {
                let same = conn
                    .prepare_cached(&format!(
                        "SELECT {SIGNAL_COLUMNS} FROM task_signals WHERE task_id = ?1 AND key = ?2"
                    ))
                    .and_then(|mut s| {
                        s.query_row(params![signal.task_id, key], rows::signal_from_row)
                            .optional()
                    })
                    .with_context(|| {
                        format!("look up signal key {key} of task {}", signal.task_id)
                    })?;
                if let Some(same) = same {
                    return Ok((same, false));
                }
            }
            if rec.status.is_terminal() {
                return Err(UpdateError::Conflict(Box::new(rec)));
            }
            let seq: u32 = conn
                .prepare_cached(
                    "SELECT COALESCE(MAX(seq), 0) + 1 FROM task_signals WHERE task_id = ?1",
                )
                .and_then(|mut s| s.query_row([&signal.task_id], |r| r.get(0)))
                .with_context(|| format!("place a signal of task {}", signal.task_id))?;
            conn.prepare_cached(
                "INSERT INTO task_signals (task_id, seq, name, payload, sender, key, at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    signal.task_id,
                    seq,
                    signal.name,
                    signal.payload.to_string(),
                    signal.sender,
                    signal.key,
                    sql_int(signal.at),
                ])
            })
            .with_context(|| format!("store signal {} of task {}", signal.name, signal.task_id))?;
            Ok((
                SignalRecord {
                    task_id: signal.task_id,
                    seq,
                    name: signal.name,
                    payload: signal.payload,
                    sender: signal.sender,
                    key: signal.key,
                    at: signal.at,
                },
                true,
            ))
        })
        .await
    }

    async fn next_signal(
        &self,
        task_id: &str,
        name: &str,
        after: u32,
    ) -> Result<Option<SignalRecord>, StoreError> {
        let (task_id, name) = (task_id.to_string(), name.to_string());
        self.read(move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {SIGNAL_COLUMNS} FROM task_signals \
                 WHERE task_id = ?1 AND name = ?2 AND seq > ?3 ORDER BY seq LIMIT 1"
            ))
            .and_then(|mut s| {
                s.query_row(params![task_id, name, after], rows::signal_from_row)
                    .optional()
            })
            .with_context(|| format!("read signal {name} of task {task_id}"))
        })
        .await
    }

    async fn signals(&self, task_id: &str) -> Result<Vec<SignalRecord>, StoreError> {
        let task_id = task_id.to_string();
        self.read(move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {SIGNAL_COLUMNS} FROM task_signals WHERE task_id = ?1 ORDER BY seq"
            ))
            .and_then(|mut s| {
                s.query_map([&task_id], rows::signal_from_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .with_context(|| format!("read the signals of task {task_id}"))
        })
        .await
    }
}

#[async_trait]
impl LeaseStore for SqliteStore {
    async fn renew_leases(
        &self,
        node: &str,
        ids: &[String],
        until: u64,
    ) -> Result<Vec<String>, StoreError> {
        let node = node.to_string();
        let ids = ids.to_vec();
        self.write(move |tx| {
            let conn = tx.conn()?;
            let mut stmt = conn
                .prepare_cached(
                    "UPDATE tasks SET lease_until = ?1 WHERE id = ?2 AND lease_owner = ?3 \
                     AND status IN ('working', 'input_required')",
                )
                .context("prepare the lease renewal")?;
            let mut lost = Vec::new();
            for id in ids {
                let renewed = stmt
                    .execute(params![sql_int(until), id, node])
                    .with_context(|| format!("renew the lease on task {id}"))?;
                if renewed == 0 {
                    lost.push(id);
                } else {
                    tx.forget(&id);
                }
            }
            Ok(lost)
        })
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
        let node = node.to_string();
        let shared = self.shared.clone();
        self.write(move |tx| {
            let conn = tx.conn()?;
            let sql = format!(
                "SELECT {TASK_COLUMNS} FROM tasks WHERE status IN ('working', 'input_required') \
                 AND (?1 OR lease_until IS NULL OR lease_until < ?2)"
            );
            let found = select_tasks(conn, &sql, params![all, sql_int(now)], || {
                "find unfinished tasks nobody runs".into()
            })?;
            let mut changed = Vec::with_capacity(found.len());
            for mut t in found {
                let before = t.status;
                if let Some(was) = claim_orphan(&mut t, &plan, &node, lease_until, now) {
                    tx.update_task(before, &t, was)?;
                    shared.keep(&t);
                    tx.wrote(&t);
                    changed.push(t);
                }
            }
            Ok(changed)
        })
        .await
    }

    fn is_exclusive(&self) -> bool {
        true
    }
}

#[async_trait]
impl SessionStore for SqliteStore {
    async fn put_session(&self, s: &SessionRecord) -> Result<(), StoreError> {
        let s = s.clone();
        self.write(move |tx| insert_session(tx.conn()?, &s)).await
    }

    async fn create_session(
        &self,
        s: &SessionRecord,
        limit: &SessionLimit,
    ) -> Result<(), StoreError> {
        let (s, limit) = (s.clone(), limit.clone());
        self.write(move |tx| {
            let conn = tx.conn()?;
            // The writer thread runs one job at a time: the counts and the insert are one step.
            let of_prefix = match &limit.per_prefix {
                Some((prefix, max)) => {
                    live_sessions(conn, &s.owner, Some(prefix), *max, s.last_seen)?
                }
                None => 0,
            };
            let all = live_sessions(conn, &s.owner, None, limit.max, s.last_seen)?;
            limit.check(of_prefix, all)?;
            insert_session(conn, &s)
        })
        .await
    }

    async fn get_session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let id = id.to_string();
        self.read(move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1"
            ))
            .and_then(|mut s| s.query_row([&id], session_from_row).optional())
            .with_context(|| format!("read session {id}"))
        })
        .await
    }

    async fn touch_session(&self, id: &str, now: u64) -> Result<bool, StoreError> {
        let id = id.to_string();
        self.write(move |tx| {
            let conn = tx.conn()?;
            let n = conn
                .execute(
                    "UPDATE sessions SET last_seen = MAX(last_seen, ?2) WHERE id = ?1 \
                     AND (idle_ms IS NULL OR last_seen + idle_ms > ?2)",
                    params![id, sql_int(now)],
                )
                .with_context(|| format!("touch session {id}"))?;
            Ok(n > 0)
        })
        .await
    }

    async fn delete_session(&self, id: &str) -> Result<bool, StoreError> {
        let id = id.to_string();
        self.write(move |tx| {
            let conn = tx.conn()?;
            let n = conn
                .execute("DELETE FROM sessions WHERE id = ?1", [&id])
                .with_context(|| format!("delete session {id}"))?;
            Ok(n > 0)
        })
        .await
    }

    async fn purge_sessions(&self, now: u64, idle_ms: u64) -> Result<usize, StoreError> {
        self.write(move |tx| {
            let conn = tx.conn()?;
            let n = conn
                .execute(
                    "DELETE FROM sessions WHERE last_seen <= ?1 - COALESCE(idle_ms, ?2)",
                    params![sql_int(now), sql_int(idle_ms)],
                )
                .context("delete idle sessions")?;
            Ok(n)
        })
        .await
    }
}

#[async_trait]
impl OutboxStore for SqliteStore {
    async fn claim_deliveries(
        &self,
        node: &str,
        now: u64,
        lease_until: u64,
        limit: usize,
    ) -> Result<Vec<Delivery>, StoreError> {
        let node = node.to_string();
        let asked = node.clone();
        if !self
            .read(move |conn| deliveries::any_due(conn, &asked, now))
            .await?
        {
            return Ok(Vec::new());
        }
        self.write(move |tx| deliveries::claim(tx.conn()?, &node, now, lease_until, limit))
            .await
    }

    async fn finish_delivery(
        &self,
        id: &str,
        node: &str,
        attempt: DeliveryAttempt,
        next: DeliveryNext,
    ) -> Result<bool, StoreError> {
        let (id, node) = (id.to_string(), node.to_string());
        self.write(move |tx| deliveries::finish(tx.conn()?, &id, &node, &attempt, next))
            .await
    }

    async fn deliveries(&self, query: &DeliveryQuery) -> Result<Vec<Delivery>, StoreError> {
        let query = query.clone();
        self.read(move |conn| deliveries::list(conn, &query)).await
    }

    async fn delivery_attempts(&self, id: &str) -> Result<Vec<DeliveryAttempt>, StoreError> {
        let id = id.to_string();
        self.read(move |conn| deliveries::attempts(conn, &id)).await
    }

    async fn redeliver(&self, id: &str, now: u64) -> Result<bool, StoreError> {
        let id = id.to_string();
        self.write(move |tx| deliveries::redeliver(tx.conn()?, &id, now))
            .await
    }

    async fn purge_deliveries(&self, before: u64) -> Result<usize, StoreError> {
        self.write(move |tx| deliveries::purge(tx.conn()?, before))
            .await
    }

    async fn release_deliveries(&self, node: &str) -> Result<usize, StoreError> {
        let node = node.to_string();
        self.write(move |tx| deliveries::release(tx.conn()?, &node))
            .await
    }

    async fn count_registrations(&self, owner: &str, max: u64) -> Result<u64, StoreError> {
        let owner = owner.to_string();
        self.read(move |conn| deliveries::count_registrations(conn, &owner, max))
            .await
    }
}

/// Creates or replaces a session row.
fn insert_session(conn: &Connection, s: &SessionRecord) -> Result<(), StoreError> {
    conn.prepare_cached(&format!(
        "INSERT OR REPLACE INTO sessions ({SESSION_COLUMNS}) VALUES (?1,?2,?3,?4,?5,?6)"
    ))
    .and_then(|mut st| {
        st.execute(params![
            s.id,
            s.owner,
            s.data.to_string(),
            sql_int(s.created_at),
            sql_int(s.last_seen),
            s.idle_ms.map(sql_int)
        ])
    })
    .with_context(|| format!("store session {}", s.id))?;
    Ok(())
}

/// Live sessions of `owner` at `now` (of those whose id starts with `prefix`, when given), counted up
/// to `max`: a range of the `sessions_by_owner` index, never more than `max` entries of it.
fn live_sessions(
    conn: &Connection,
    owner: &str,
    prefix: Option<&String>,
    max: usize,
    now: u64,
) -> Result<usize, StoreError> {
    let live = "(idle_ms IS NULL OR last_seen + idle_ms > ?2)";
    let n: i64 = match prefix {
        None => conn
            .prepare_cached(&format!(
                "SELECT COUNT(*) FROM (SELECT 1 FROM sessions WHERE owner = ?1 AND {live} LIMIT {max})"
            ))
            .and_then(|mut st| st.query_row(params![owner, sql_int(now)], |r| r.get(0))),
        Some(p) => {
            let end = prefix_end(p).unwrap_or_else(|| format!("{p}\u{10ffff}"));
            conn.prepare_cached(&format!(
                "SELECT COUNT(*) FROM (SELECT 1 FROM sessions WHERE owner = ?1 AND {live} \
                 AND id >= ?3 AND id < ?4 LIMIT {max})"
            ))
            .and_then(|mut st| {
                st.query_row(params![owner, sql_int(now), p, end], |r| r.get(0))
            })
        }
    }
    .with_context(|| format!("count the live sessions of {owner}"))?;
    Ok(usize::try_from(n).unwrap_or(0))
}

#[cfg(test)]
mod tests;
