//! The default [`TaskStore`]: one SQLite file in WAL mode.
//!
//! All writes go through one writer thread that commits them in groups: whatever queued up while the
//! previous transaction was being made durable goes into the next one, each job in its own savepoint
//! so one failing job does not undo the others. A caller is answered only after the commit that holds
//! its write (`synchronous=FULL`), so "created" means "survives kill -9 and power loss". Reads run on a
//! small pool of read connections and never wait for the writer (WAL).

use async_trait::async_trait;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, Row};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};

use super::{
    apply_change, decode_cursor, encode_cursor, ActiveLimit, AnswerError, Created, InvalidCursor,
    ListQuery, Lookup, PurgePolicy, Purged, SessionRecord, StoreError, TaskChange, TaskPage,
    TaskStore, UpdateError,
};
use crate::model::{InputRecord, InputResponse, Outcome, TaskRecord, TaskStatus};

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    session TEXT,
    era TEXT NOT NULL,
    tool TEXT NOT NULL,
    arguments TEXT NOT NULL,
    request_meta TEXT NOT NULL,
    status TEXT NOT NULL,
    status_message TEXT,
    progress REAL,
    progress_total REAL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    ttl_ms INTEGER,
    poll_interval_ms INTEGER,
    outcome TEXT,
    idempotency_key TEXT,
    fingerprint TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    lease_owner TEXT,
    lease_until INTEGER,
    finished_at INTEGER,
    expires_at INTEGER
);
CREATE UNIQUE INDEX IF NOT EXISTS tasks_idempotency ON tasks(owner, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS tasks_owner_order ON tasks(owner, created_at, id);
CREATE INDEX IF NOT EXISTS tasks_unfinished ON tasks(lease_until)
    WHERE status IN ('working', 'input_required');
CREATE INDEX IF NOT EXISTS tasks_unfinished_by_owner ON tasks(owner, session)
    WHERE status IN ('working', 'input_required');
CREATE INDEX IF NOT EXISTS tasks_expiry ON tasks(expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS tombstones (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    session TEXT,
    expired_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS input_requests (
    key TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    method TEXT NOT NULL,
    params TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    response TEXT,
    answered_at INTEGER
);
CREATE INDEX IF NOT EXISTS input_requests_task ON input_requests(task_id, created_at);
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    data TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    last_seen INTEGER NOT NULL
);
"#;

const TASK_COLUMNS: &str = "id, owner, session, era, tool, arguments, request_meta, status, status_message, \
    progress, progress_total, created_at, updated_at, ttl_ms, poll_interval_ms, outcome, idempotency_key, \
    fingerprint, attempt, lease_owner, lease_until, finished_at";

/// Most jobs one transaction takes; bounds the latency a job can add to the others in its group.
const MAX_GROUP: usize = 512;
/// Idle read connections kept open.
const MAX_IDLE_READERS: usize = 8;

type Completion = Box<dyn FnOnce(Result<(), StoreError>) + Send>;
type Job = Box<dyn FnOnce(&Connection) -> (bool, Completion) + Send>;

/// A [`TaskStore`] on one SQLite file.
pub struct SqliteStore {
    path: PathBuf,
    jobs: mpsc::Sender<Job>,
    readers: Arc<Mutex<Vec<Connection>>>,
}

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

fn open(path: &Path, flags: OpenFlags) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(path, flags).map_err(|e| {
        StoreError::Backend(format!(
            "cannot open SQLite database {}: {e}",
            path.display()
        ))
    })?;
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(backend)?;
    Ok(conn)
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path`, creating its folder too, and starts the
    /// writer thread. Must be called inside a tokio runtime.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref().to_path_buf();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                StoreError::Backend(format!("cannot create folder {}: {e}", dir.display()))
            })?;
        }
        let writer = open(&path, OpenFlags::default())?;
        writer
            .execute_batch(
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;",
            )
            .map_err(backend)?;
        writer.execute_batch(SCHEMA).map_err(backend)?;
        let (tx, rx) = mpsc::channel::<Job>(8192);
        std::thread::Builder::new()
            .name("mcp-tasks-sqlite-writer".into())
            .spawn(move || writer_loop(writer, rx))
            .map_err(|e| {
                StoreError::Backend(format!("cannot start the SQLite writer thread: {e}"))
            })?;
        Ok(SqliteStore {
            path,
            jobs: tx,
            readers: Arc::new(Mutex::new(Vec::new())),
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
        F: FnOnce(&Connection) -> Result<T, E> + Send + 'static,
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
        self.jobs.send(job).await.map_err(|_| {
            E::from(StoreError::Backend(
                "the SQLite writer thread has stopped".into(),
            ))
        })?;
        rx.await.map_err(|_| {
            E::from(StoreError::Backend(
                "the SQLite writer thread dropped a write".into(),
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
        .map_err(|e| StoreError::Backend(format!("read task failed: {e}")))?
    }
}

fn writer_loop(conn: Connection, mut rx: mpsc::Receiver<Job>) {
    while let Some(first) = rx.blocking_recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let mut done: Vec<Completion> = Vec::with_capacity(group.len());
        let begin = conn.execute_batch("BEGIN IMMEDIATE").map_err(backend);
        if let Err(e) = begin {
            for job in group {
                // The job never ran; answer it with the error without touching the database.
                let (_, complete) = job_without_db(job);
                complete(Err(StoreError::Backend(e.to_string())));
            }
            continue;
        }
        for job in group {
            let savepoint = conn.execute_batch("SAVEPOINT job").map_err(backend);
            if let Err(e) = savepoint {
                let (_, complete) = job_without_db(job);
                complete(Err(e));
                continue;
            }
            let (ok, complete) = job(&conn);
            let end = if ok {
                "RELEASE job"
            } else {
                "ROLLBACK TO job; RELEASE job"
            };
            if let Err(e) = conn.execute_batch(end) {
                tracing::error!(error = %e, "SQLite savepoint release failed");
            }
            done.push(complete);
        }
        let commit = conn.execute_batch("COMMIT").map_err(backend);
        if commit.is_err() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        for complete in done {
            complete(match &commit {
                Ok(()) => Ok(()),
                Err(e) => Err(StoreError::Backend(format!("commit failed: {e}"))),
            });
        }
    }
}

/// Extracts a job's completion without running it against the database. Jobs are closures, so the only
/// way to get their completion is to run them; an in-memory connection with no tables makes every
/// statement fail, which is what an unrun job should report anyway.
fn job_without_db(job: Job) -> (bool, Completion) {
    match Connection::open_in_memory() {
        Ok(scratch) => job(&scratch),
        Err(_) => (false, Box::new(|_| {})),
    }
}

fn status_from_sql(s: String) -> rusqlite::Result<TaskStatus> {
    TaskStatus::parse(&s).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            7,
            rusqlite::types::Type::Text,
            format!("bad status {s:?}").into(),
        )
    })
}

fn json_from_sql(idx: usize, s: String) -> rusqlite::Result<serde_json::Value> {
    serde_json::from_str(&s).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(idx, rusqlite::types::Type::Text, Box::new(e))
    })
}

fn task_from_row(row: &Row<'_>) -> rusqlite::Result<TaskRecord> {
    let outcome: Option<String> = row.get(15)?;
    let outcome = match outcome {
        None => None,
        Some(s) => Some(serde_json::from_str::<Outcome>(&s).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(15, rusqlite::types::Type::Text, Box::new(e))
        })?),
    };
    Ok(TaskRecord {
        id: row.get(0)?,
        owner: row.get(1)?,
        session: row.get(2)?,
        era: row.get(3)?,
        tool: row.get(4)?,
        arguments: json_from_sql(5, row.get(5)?)?,
        request_meta: json_from_sql(6, row.get(6)?)?,
        status: status_from_sql(row.get(7)?)?,
        status_message: row.get(8)?,
        progress: row.get(9)?,
        progress_total: row.get(10)?,
        created_at: row.get::<_, i64>(11)? as u64,
        updated_at: row.get::<_, i64>(12)? as u64,
        ttl_ms: row.get::<_, Option<i64>>(13)?.map(|v| v as u64),
        poll_interval_ms: row.get::<_, Option<i64>>(14)?.map(|v| v as u64),
        outcome,
        idempotency_key: row.get(16)?,
        fingerprint: row.get(17)?,
        attempt: row.get::<_, i64>(18)? as u32,
        lease_owner: row.get(19)?,
        lease_until: row.get::<_, Option<i64>>(20)?.map(|v| v as u64),
        finished_at: row.get::<_, Option<i64>>(21)?.map(|v| v as u64),
    })
}

const INPUT_COLUMNS: &str = "key, task_id, method, params, created_at, response, answered_at";

fn input_from_row(row: &Row<'_>) -> rusqlite::Result<InputRecord> {
    let response: Option<String> = row.get(5)?;
    let response = match response {
        None => None,
        Some(s) => Some(serde_json::from_str::<InputResponse>(&s).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(5, rusqlite::types::Type::Text, Box::new(e))
        })?),
    };
    Ok(InputRecord {
        key: row.get(0)?,
        task_id: row.get(1)?,
        method: row.get(2)?,
        params: json_from_sql(3, row.get(3)?)?,
        created_at: row.get::<_, i64>(4)? as u64,
        response,
        answered_at: row.get::<_, Option<i64>>(6)?.map(|v| v as u64),
    })
}

fn select_input(conn: &Connection, key: &str) -> Result<Option<InputRecord>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {INPUT_COLUMNS} FROM input_requests WHERE key = ?1"
    ))
    .and_then(|mut s| s.query_row([key], input_from_row).optional())
    .map_err(backend)
}

fn select_task(conn: &Connection, id: &str) -> Result<Option<TaskRecord>, StoreError> {
    conn.prepare_cached(&format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?1"))
        .and_then(|mut s| s.query_row([id], task_from_row).optional())
        .map_err(backend)
}

fn opt_i64(v: Option<u64>) -> Option<i64> {
    v.map(|x| x.min(i64::MAX as u64) as i64)
}

fn outcome_json(t: &TaskRecord) -> Result<Option<String>, StoreError> {
    t.outcome
        .as_ref()
        .map(|o| serde_json::to_string(o).map_err(backend))
        .transpose()
}

fn insert_task(conn: &Connection, t: &TaskRecord) -> Result<(), StoreError> {
    conn.prepare_cached(&format!(
        "INSERT INTO tasks ({TASK_COLUMNS}, expires_at) VALUES \
         (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22,?23)"
    ))
    .and_then(|mut stmt| {
        stmt.execute(params![
            t.id,
            t.owner,
            t.session,
            t.era,
            t.tool,
            t.arguments.to_string(),
            t.request_meta.to_string(),
            t.status.as_str(),
            t.status_message,
            t.progress,
            t.progress_total,
            t.created_at as i64,
            t.updated_at as i64,
            opt_i64(t.ttl_ms),
            opt_i64(t.poll_interval_ms),
            outcome_json(t).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?,
            t.idempotency_key,
            t.fingerprint,
            t.attempt as i64,
            t.lease_owner,
            opt_i64(t.lease_until),
            opt_i64(t.finished_at),
            opt_i64(t.expires_at()),
        ])
    })
    .map_err(backend)?;
    Ok(())
}

/// Writes back the fields a [`TaskChange`] can touch.
fn update_task(conn: &Connection, t: &TaskRecord) -> Result<(), StoreError> {
    let outcome = outcome_json(t)?;
    conn.prepare_cached(
        "UPDATE tasks SET status=?2, status_message=?3, progress=?4, progress_total=?5, updated_at=?6, \
         outcome=?7, attempt=?8, lease_owner=?9, lease_until=?10, finished_at=?11 WHERE id=?1",
    )
    .and_then(|mut stmt| {
        stmt.execute(params![
            t.id,
            t.status.as_str(),
            t.status_message,
            t.progress,
            t.progress_total,
            t.updated_at as i64,
            outcome,
            t.attempt as i64,
            t.lease_owner,
            opt_i64(t.lease_until),
            opt_i64(t.finished_at),
        ])
    })
    .map_err(backend)?;
    Ok(())
}

#[async_trait]
impl TaskStore for SqliteStore {
    async fn create(
        &self,
        task: TaskRecord,
        limit: Option<ActiveLimit>,
    ) -> Result<Created, StoreError> {
        self.write(move |conn| {
            if let Some(key) = &task.idempotency_key {
                let existing: Option<TaskRecord> = conn
                    .prepare_cached(&format!(
                        "SELECT {TASK_COLUMNS} FROM tasks WHERE owner = ?1 AND idempotency_key = ?2"
                    ))
                    .and_then(|mut s| {
                        s.query_row(params![task.owner, key], task_from_row)
                            .optional()
                    })
                    .map_err(backend)?;
                if let Some(existing) = existing {
                    if existing.fingerprint == task.fingerprint {
                        return Ok(Created::Existing(existing));
                    }
                    return Err(StoreError::IdempotencyConflict {
                        key: key.clone(),
                        task_id: existing.id,
                    });
                }
            }
            if let Some(l) = &limit {
                let active: i64 = conn
                    .prepare_cached(
                        "SELECT COUNT(*) FROM tasks WHERE owner = ?1 AND (?2 IS NULL OR session = ?2) \
                         AND status IN ('working', 'input_required')",
                    )
                    .and_then(|mut s| s.query_row(params![l.owner, l.session], |r| r.get(0)))
                    .map_err(backend)?;
                if active as usize >= l.max {
                    return Err(StoreError::TooManyActive { active: active as usize, max: l.max });
                }
            }
            insert_task(conn, &task)?;
            Ok(Created::New(task))
        })
        .await
    }

    async fn get(&self, id: &str) -> Result<Lookup, StoreError> {
        let id = id.to_string();
        self.read(move |conn| {
            if let Some(t) = select_task(conn, &id)? {
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
                .map_err(backend)?;
            Ok(match tomb {
                Some((owner, session)) => Lookup::Expired { owner, session },
                None => Lookup::Missing,
            })
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
        self.write(move |conn| {
            // The writer thread is the only writer, so read-check-write here is atomic.
            let mut rec = select_task(conn, &id)?.ok_or(UpdateError::NotFound)?;
            if !expect.contains(&rec.status) {
                return Err(UpdateError::Conflict(Box::new(rec)));
            }
            apply_change(&mut rec, change, now);
            update_task(conn, &rec)?;
            Ok(rec)
        })
        .await
    }

    async fn list(&self, q: &ListQuery) -> Result<Result<TaskPage, InvalidCursor>, StoreError> {
        let q = q.clone();
        self.read(move |conn| {
            let (after_at, after_id) = match &q.cursor {
                None => (-1i64, String::new()),
                Some(c) => match decode_cursor(c) {
                    Ok((at, id)) => (at as i64, id),
                    Err(e) => return Ok(Err(e)),
                },
            };
            let limit = q.limit as i64 + 1;
            let sql = format!(
                "SELECT {TASK_COLUMNS} FROM tasks WHERE owner = ?1 AND (?2 IS NULL OR session = ?2) \
                 AND (created_at > ?3 OR (created_at = ?3 AND id > ?4)) ORDER BY created_at, id LIMIT ?5"
            );
            let mut stmt = conn.prepare_cached(&sql).map_err(backend)?;
            let rows = stmt
                .query_map(params![q.owner, q.session, after_at, after_id, limit], task_from_row)
                .map_err(backend)?;
            let mut tasks = rows.collect::<rusqlite::Result<Vec<_>>>().map_err(backend)?;
            let more = tasks.len() > q.limit;
            tasks.truncate(q.limit);
            let next_cursor = if more { tasks.last().map(|t| encode_cursor(t.created_at, &t.id)) } else { None };
            Ok(Ok(TaskPage { tasks, next_cursor }))
        })
        .await
    }

    async fn add_input(&self, input: InputRecord, now: u64) -> Result<TaskRecord, UpdateError> {
        self.write(move |conn| {
            let mut rec = select_task(conn, &input.task_id)?.ok_or(UpdateError::NotFound)?;
            if rec.status.is_terminal() {
                return Err(UpdateError::Conflict(Box::new(rec)));
            }
            apply_change(&mut rec, TaskChange { status: Some(TaskStatus::InputRequired), ..Default::default() }, now);
            update_task(conn, &rec)?;
            conn.prepare_cached(&format!(
                "INSERT INTO input_requests ({INPUT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, NULL, NULL)"
            ))
            .and_then(|mut st| {
                st.execute(params![input.key, input.task_id, input.method, input.params.to_string(), input.created_at as i64])
            })
            .map_err(backend)?;
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
        self.write(move |conn| {
            let input = select_input(conn, &key)?.ok_or(AnswerError::Unknown)?;
            if input.response.is_some() {
                return Err(AnswerError::AlreadyAnswered);
            }
            let mut rec = select_task(conn, &input.task_id)?.ok_or(AnswerError::Unknown)?;
            if rec.status.is_terminal() {
                return Err(AnswerError::TaskEnded(rec.status));
            }
            let text = serde_json::to_string(&response).map_err(backend)?;
            conn.execute(
                "UPDATE input_requests SET response = ?2, answered_at = ?3 WHERE key = ?1",
                params![key, text, now as i64],
            )
            .map_err(backend)?;
            let pending: i64 = conn
                .query_row(
                    "SELECT COUNT(*) FROM input_requests WHERE task_id = ?1 AND response IS NULL",
                    [&input.task_id],
                    |r| r.get(0),
                )
                .map_err(backend)?;
            let back_to_work = pending == 0 && rec.status == TaskStatus::InputRequired;
            let change = TaskChange {
                status: back_to_work.then_some(TaskStatus::Working),
                ..Default::default()
            };
            apply_change(&mut rec, change, now);
            update_task(conn, &rec)?;
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

    async fn get_input(&self, key: &str) -> Result<Option<InputRecord>, StoreError> {
        let key = key.to_string();
        self.read(move |conn| select_input(conn, &key)).await
    }

    async fn inputs(&self, task_id: &str) -> Result<Vec<InputRecord>, StoreError> {
        let task_id = task_id.to_string();
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT {INPUT_COLUMNS} FROM input_requests WHERE task_id = ?1 ORDER BY created_at, key"
                ))
                .map_err(backend)?;
            let rows = stmt.query_map([&task_id], input_from_row).map_err(backend)?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(backend)
        })
        .await
    }

    async fn overdue_waiting(&self, now: u64) -> Result<Vec<TaskRecord>, StoreError> {
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT {TASK_COLUMNS} FROM tasks WHERE status = 'input_required' \
                     AND expires_at IS NOT NULL AND expires_at <= ?1"
                ))
                .map_err(backend)?;
            let rows = stmt
                .query_map([now as i64], task_from_row)
                .map_err(backend)?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(backend)
        })
        .await
    }

    async fn renew_leases(&self, node: &str, ids: &[String], until: u64) -> Result<(), StoreError> {
        let node = node.to_string();
        let ids = ids.to_vec();
        self.write(move |conn| {
            let mut stmt = conn
                .prepare_cached(
                    "UPDATE tasks SET lease_until = ?1 WHERE id = ?2 AND lease_owner = ?3 \
                     AND status IN ('working', 'input_required')",
                )
                .map_err(backend)?;
            for id in &ids {
                stmt.execute(params![until as i64, id, node])
                    .map_err(backend)?;
            }
            Ok(())
        })
        .await
    }

    async fn claim_orphans(
        &self,
        node: &str,
        now: u64,
        all: bool,
        lease_until: u64,
    ) -> Result<Vec<TaskRecord>, StoreError> {
        let node = node.to_string();
        self.write(move |conn| {
            let sql = format!(
                "SELECT {TASK_COLUMNS} FROM tasks WHERE status IN ('working', 'input_required') \
                 AND (?1 OR lease_until IS NULL OR lease_until < ?2)"
            );
            let mut stmt = conn.prepare_cached(&sql).map_err(backend)?;
            let mut found = stmt
                .query_map(params![all, now as i64], task_from_row)
                .map_err(backend)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(backend)?;
            let mut claim = conn
                .prepare_cached("UPDATE tasks SET lease_owner = ?1, lease_until = ?2 WHERE id = ?3")
                .map_err(backend)?;
            for t in &mut found {
                claim
                    .execute(params![node, lease_until as i64, t.id])
                    .map_err(backend)?;
                t.lease_owner = Some(node.clone());
                t.lease_until = Some(lease_until);
            }
            Ok(found)
        })
        .await
    }

    async fn purge(&self, p: PurgePolicy) -> Result<Purged, StoreError> {
        self.write(move |conn| {
            let now = p.now as i64;
            let grace_edge = p.now.saturating_sub(p.finished_grace_ms) as i64;
            let cond = "expires_at IS NOT NULL AND expires_at <= ?1 \
                        AND status IN ('completed', 'failed', 'cancelled') AND finished_at <= ?2";
            conn.execute(
                &format!(
                    "INSERT OR REPLACE INTO tombstones (id, owner, session, expired_at) \
                     SELECT id, owner, session, ?1 FROM tasks WHERE {cond}"
                ),
                params![now, grace_edge],
            )
            .map_err(backend)?;
            let tasks = conn
                .execute(
                    &format!("DELETE FROM tasks WHERE {cond}"),
                    params![now, grace_edge],
                )
                .map_err(backend)?;
            let tomb_edge = p.now.saturating_sub(p.tombstone_ms) as i64;
            let tombstones = conn
                .execute("DELETE FROM tombstones WHERE expired_at < ?1", [tomb_edge])
                .map_err(backend)?;
            let idle_edge = p.now.saturating_sub(p.session_idle_ms) as i64;
            let sessions = conn
                .execute("DELETE FROM sessions WHERE last_seen < ?1", [idle_edge])
                .map_err(backend)?;
            Ok(Purged {
                tasks,
                tombstones,
                sessions,
            })
        })
        .await
    }

    async fn put_session(&self, s: &SessionRecord) -> Result<(), StoreError> {
        let s = s.clone();
        self.write(move |conn| {
            conn.prepare_cached(
                "INSERT OR REPLACE INTO sessions (id, owner, data, created_at, last_seen) VALUES (?1,?2,?3,?4,?5)",
            )
            .and_then(|mut st| {
                st.execute(params![s.id, s.owner, s.data.to_string(), s.created_at as i64, s.last_seen as i64])
            })
            .map_err(backend)?;
            Ok(())
        })
        .await
    }

    async fn get_session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let id = id.to_string();
        self.read(move |conn| {
            let row = conn
                .prepare_cached(
                    "SELECT id, owner, data, created_at, last_seen FROM sessions WHERE id = ?1",
                )
                .and_then(|mut s| {
                    s.query_row([&id], |r| {
                        Ok(SessionRecord {
                            id: r.get(0)?,
                            owner: r.get(1)?,
                            data: json_from_sql(2, r.get(2)?)?,
                            created_at: r.get::<_, i64>(3)? as u64,
                            last_seen: r.get::<_, i64>(4)? as u64,
                        })
                    })
                    .optional()
                })
                .map_err(backend)?;
            Ok(row)
        })
        .await
    }

    async fn touch_session(&self, id: &str, now: u64) -> Result<bool, StoreError> {
        let id = id.to_string();
        self.write(move |conn| {
            let n = conn
                .execute(
                    "UPDATE sessions SET last_seen = MAX(last_seen, ?2) WHERE id = ?1",
                    params![id, now as i64],
                )
                .map_err(backend)?;
            Ok(n > 0)
        })
        .await
    }

    async fn delete_session(&self, id: &str) -> Result<bool, StoreError> {
        let id = id.to_string();
        self.write(move |conn| {
            let n = conn
                .execute("DELETE FROM sessions WHERE id = ?1", [&id])
                .map_err(backend)?;
            Ok(n > 0)
        })
        .await
    }

    fn is_exclusive(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn passes_the_store_test_kit() {
        let dir = tempfile::tempdir().unwrap();
        let dir_path = dir.path().to_path_buf();
        let counter = std::sync::atomic::AtomicUsize::new(0);
        super::super::testkit::run_all(|| {
            let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let path = dir_path.join(format!("kit-{n}.db"));
            async move { SqliteStore::open(path).unwrap() }
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn data_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("reopen.db");
        let t = super::super::testkit::record("reopen", "alice", 1_000);
        {
            let store = SqliteStore::open(&path).unwrap();
            store.create(t.clone(), None).await.unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.get(&t.id).await.unwrap(), Lookup::Found(t));
    }
}
