//! Between records and PostgreSQL rows: the column lists, row mapping, and the statements that read
//! and write one task or input request.

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::Context;
use crate::model::{InputRecord, InputResponse, Outcome, TaskRecord, TaskStatus};
use crate::store::{SessionRecord, StoreError};

/// The `tasks` columns a [`TaskRecord`] is read from, in [`task_from_row`]'s order (the same as the
/// SQLite store's).
pub(super) const TASK_COLUMNS: &str = "id, owner, session, era, tool, arguments, request_meta, status, status_message, \
    progress, progress_total, created_at, updated_at, ttl_ms, poll_interval_ms, outcome, idempotency_key, \
    fingerprint, attempt, lease_owner, lease_until, finished_at, progress_message, retain_after_finish_ms, checkpoint, \
    webhooks";

/// The `input_requests` columns an [`InputRecord`] is read from, in [`input_from_row`]'s order.
pub(super) const INPUT_COLUMNS: &str =
    "key, task_id, method, params, created_at, response, answered_at";

/// The `sessions` columns a [`SessionRecord`] is read from, in [`session_from_row`]'s order.
pub(super) const SESSION_COLUMNS: &str = "id, owner, data, created_at, last_seen, idle_ms";

/// A time or count as a BIGINT, clamped (no real time reaches `i64::MAX` ms).
pub(super) fn pg_int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn opt_pg_int(v: Option<u64>) -> Option<i64> {
    v.map(pg_int)
}

fn u64_from_pg(v: i64) -> u64 {
    // Every time and count is written from a u64 clamped to i64::MAX, so a negative value can only
    // come from outside; reading it as 0 is the closest valid value.
    u64::try_from(v).unwrap_or(0)
}

pub(super) fn bad_row(what: &str, e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::backend(format!("read {what} from a row"), e)
}

fn json<T: serde::de::DeserializeOwned>(what: &str, s: &str) -> Result<T, StoreError> {
    serde_json::from_str(s).map_err(|e| bad_row(what, e))
}

fn opt_json<T: serde::de::DeserializeOwned>(
    what: &str,
    s: Option<String>,
) -> Result<Option<T>, StoreError> {
    s.map(|s| json(what, &s)).transpose()
}

fn text<T: serde::Serialize>(what: &str, v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).with_context(|| format!("serialize {what}"))
}

/// A journal step from `SELECT task_id, seq, name, output, attempt, at`.
pub(super) fn step_from_row(row: &Row) -> Result<crate::model::StepRecord, StoreError> {
    let read = |e| bad_row("a journal step", e);
    Ok(crate::model::StepRecord {
        task_id: row.try_get(0).map_err(read)?,
        seq: u32::try_from(row.try_get::<_, i32>(1).map_err(read)?).unwrap_or(0),
        name: row.try_get(2).map_err(read)?,
        output: json("a step's output", row.try_get(3).map_err(read)?)?,
        attempt: u32::try_from(row.try_get::<_, i32>(4).map_err(read)?).unwrap_or(0),
        at: u64::try_from(row.try_get::<_, i64>(5).map_err(read)?).unwrap_or(0),
        duration_ms: u64::try_from(row.try_get::<_, i64>(6).map_err(read)?).unwrap_or(0),
        error: row.try_get(7).map_err(read)?,
    })
}

/// The columns [`signal_from_row`] reads, in its order.
pub(super) const SIGNAL_COLUMNS: &str = "task_id, seq, name, payload, sender, key, at";

/// Maps a row selected with [`SIGNAL_COLUMNS`].
pub(super) fn signal_from_row(row: &Row) -> Result<crate::model::SignalRecord, StoreError> {
    let read = |e| bad_row("a signal", e);
    Ok(crate::model::SignalRecord {
        task_id: row.try_get(0).map_err(read)?,
        seq: u32::try_from(row.try_get::<_, i32>(1).map_err(read)?).unwrap_or(0),
        name: row.try_get(2).map_err(read)?,
        payload: json("a signal's payload", row.try_get(3).map_err(read)?)?,
        sender: row.try_get(4).map_err(read)?,
        key: row.try_get(5).map_err(read)?,
        at: u64::try_from(row.try_get::<_, i64>(6).map_err(read)?).unwrap_or(0),
    })
}

/// Maps a row selected with [`TASK_COLUMNS`].
pub(super) fn task_from_row(row: &Row) -> Result<TaskRecord, StoreError> {
    let get = |e| bad_row("a task", e);
    let status: String = row.try_get(7).map_err(get)?;
    Ok(TaskRecord {
        id: row.try_get(0).map_err(get)?,
        owner: row.try_get(1).map_err(get)?,
        session: row.try_get(2).map_err(get)?,
        era: row.try_get(3).map_err(get)?,
        tool: row.try_get(4).map_err(get)?,
        arguments: json("task arguments", row.try_get(5).map_err(get)?)?,
        request_meta: json("task request metadata", row.try_get(6).map_err(get)?)?,
        status: TaskStatus::parse(&status)
            .ok_or_else(|| StoreError::message(format!("bad task status {status:?} in a row")))?,
        status_message: row.try_get(8).map_err(get)?,
        progress: row.try_get(9).map_err(get)?,
        progress_total: row.try_get(10).map_err(get)?,
        created_at: u64_from_pg(row.try_get(11).map_err(get)?),
        updated_at: u64_from_pg(row.try_get(12).map_err(get)?),
        ttl_ms: row
            .try_get::<_, Option<i64>>(13)
            .map_err(get)?
            .map(u64_from_pg),
        poll_interval_ms: row
            .try_get::<_, Option<i64>>(14)
            .map_err(get)?
            .map(u64_from_pg),
        outcome: opt_json::<Outcome>("a task outcome", row.try_get(15).map_err(get)?)?,
        idempotency_key: row.try_get(16).map_err(get)?,
        fingerprint: row.try_get(17).map_err(get)?,
        attempt: u32::try_from(row.try_get::<_, i32>(18).map_err(get)?).unwrap_or(0),
        lease_owner: row.try_get(19).map_err(get)?,
        lease_until: row
            .try_get::<_, Option<i64>>(20)
            .map_err(get)?
            .map(u64_from_pg),
        finished_at: row
            .try_get::<_, Option<i64>>(21)
            .map_err(get)?
            .map(u64_from_pg),
        progress_message: row.try_get(22).map_err(get)?,
        retain_after_finish_ms: row
            .try_get::<_, Option<i64>>(23)
            .map_err(get)?
            .map(u64_from_pg),
        checkpoint: opt_json::<serde_json::Value>(
            "a task checkpoint",
            row.try_get(24).map_err(get)?,
        )?,
        webhooks: crate::webhook::decode_targets(
            row.try_get::<_, Option<String>>(25)
                .map_err(get)?
                .as_deref(),
        )
        .map_err(|e| bad_row("a task's webhooks", e))?,
    })
}

/// Maps rows selected with [`TASK_COLUMNS`].
pub(super) fn tasks_from_rows(rows: &[Row]) -> Result<Vec<TaskRecord>, StoreError> {
    rows.iter().map(task_from_row).collect()
}

/// Maps a row selected with [`INPUT_COLUMNS`].
pub(super) fn input_from_row(row: &Row) -> Result<InputRecord, StoreError> {
    let get = |e| bad_row("an input request", e);
    Ok(InputRecord {
        key: row.try_get(0).map_err(get)?,
        task_id: row.try_get(1).map_err(get)?,
        method: row.try_get(2).map_err(get)?,
        params: json("input request params", row.try_get(3).map_err(get)?)?,
        created_at: u64_from_pg(row.try_get(4).map_err(get)?),
        response: opt_json::<InputResponse>("an input response", row.try_get(5).map_err(get)?)?,
        answered_at: row
            .try_get::<_, Option<i64>>(6)
            .map_err(get)?
            .map(u64_from_pg),
    })
}

/// Maps a row selected with [`SESSION_COLUMNS`].
pub(super) fn session_from_row(row: &Row) -> Result<SessionRecord, StoreError> {
    let get = |e| bad_row("a session", e);
    Ok(SessionRecord {
        id: row.try_get(0).map_err(get)?,
        owner: row.try_get(1).map_err(get)?,
        data: json("session data", row.try_get(2).map_err(get)?)?,
        created_at: u64_from_pg(row.try_get(3).map_err(get)?),
        last_seen: u64_from_pg(row.try_get(4).map_err(get)?),
        idle_ms: row
            .try_get::<_, Option<i64>>(5)
            .map_err(get)?
            .map(u64_from_pg),
    })
}

/// One task by id; `lock` takes its row lock for the rest of the transaction.
pub(super) async fn select_task(
    db: &impl GenericClient,
    id: &str,
    lock: bool,
) -> Result<Option<TaskRecord>, StoreError> {
    let sql = if lock {
        format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = $1 FOR UPDATE")
    } else {
        format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = $1")
    };
    let stmt = db
        .prepare_cached(&sql)
        .await
        .context("prepare a task read")?;
    db.query_opt(&stmt, &[&id])
        .await
        .with_context(|| format!("read task {id}"))?
        .as_ref()
        .map(task_from_row)
        .transpose()
}

/// One task by id with its row version (see [`update_task_if`]).
pub(super) async fn select_task_versioned(
    db: &impl GenericClient,
    id: &str,
) -> Result<Option<(TaskRecord, i64)>, StoreError> {
    let stmt = db
        .prepare_cached(&format!(
            "SELECT {TASK_COLUMNS}, version FROM tasks WHERE id = $1"
        ))
        .await
        .context("prepare a task read")?;
    let Some(row) = db
        .query_opt(&stmt, &[&id])
        .await
        .with_context(|| format!("read task {id}"))?
    else {
        return Ok(None);
    };
    let version: i64 = row
        .try_get(26)
        .map_err(|e| bad_row("a task's version", e))?;
    Ok(Some((task_from_row(&row)?, version)))
}

/// Writes a changed task if its row is still at `version` (nobody changed it since it was read):
/// a compare-and-set in one statement. `false` when the row moved on (read it again).
pub(super) async fn update_task_if(
    db: &impl GenericClient,
    t: &TaskRecord,
    version: i64,
    was: crate::webhook::WriteBase,
) -> Result<bool, StoreError> {
    write_task(db, t, Some(version), was).await
}

/// Writes the columns of an existing task that a change can touch (the rest never changes); inside
/// a transaction that holds the row's lock.
pub(super) async fn update_task(
    db: &impl GenericClient,
    t: &TaskRecord,
    was: crate::webhook::WriteBase,
) -> Result<(), StoreError> {
    write_task(db, t, None, was).await.map(|_| ())
}

/// The task update, and the same with the status change recorded in the task's history in the same
/// statement (the history row is written only if the update is).
const UPDATE_TASK: &str = "UPDATE tasks SET status = $2, status_message = $3, progress = $4, \
     progress_total = $5, updated_at = $6, outcome = $7, attempt = $8, lease_owner = $9, \
     lease_until = $10, finished_at = $11, progress_message = $12, ttl_ms = $13, \
     expires_at = $14, checkpoint = $16, version = version + 1 \
     WHERE id = $1 AND ($15::BIGINT IS NULL OR version = $15)";

/// The one task write: the changeable columns, bumping the row version; with `version`, only if
/// the row is still at it; a status other than `was` (see [`write_base`](crate::store::write_base))
/// also goes into the task's history. Whether a
/// row was written.
async fn write_task(
    db: &impl GenericClient,
    t: &TaskRecord,
    version: Option<i64>,
    was: crate::webhook::WriteBase,
) -> Result<bool, StoreError> {
    let outcome = t
        .outcome
        .as_ref()
        .map(|o| text("a task outcome", o))
        .transpose()?;
    let checkpoint = t
        .checkpoint
        .as_ref()
        .map(|c| text("a task checkpoint", c))
        .transpose()?;
    let outbox = Outbox::of(&crate::webhook::outbox_entries(t, was));
    let event = crate::events::task_event(t, was);
    let sql = write_sql(t, was, &outbox, event.is_some());
    let stmt = db
        .prepare_cached(&sql)
        .await
        .context("prepare the task update")?;
    let task_params: [&(dyn ToSql + Sync); 16] = [
        &t.id,
        &t.status.as_str(),
        &t.status_message,
        &t.progress,
        &t.progress_total,
        &pg_int(t.updated_at),
        &outcome,
        &i32::try_from(t.attempt).unwrap_or(i32::MAX),
        &t.lease_owner,
        &opt_pg_int(t.lease_until),
        &opt_pg_int(t.finished_at),
        &t.progress_message,
        &opt_pg_int(t.ttl_ms),
        &opt_pg_int(t.expires_at()),
        &version,
        &checkpoint,
    ];
    let outbox_params: [&(dyn ToSql + Sync); 7] = [
        &outbox.ids,
        &outbox.targets,
        &outbox.events,
        &outbox.urls,
        &outbox.secrets,
        &outbox.subscriptions,
        &outbox.snapshots,
    ];
    let event_params: Vec<&(dyn ToSql + Sync)> = match &event {
        Some(e) => vec![&e.id, &e.name, &e.owner, &e.tool, &e.data, &e.session],
        None => Vec::new(),
    };
    let mut params: Vec<&(dyn ToSql + Sync)> = task_params.to_vec();
    if !outbox.ids.is_empty() {
        params.extend_from_slice(&outbox_params);
    }
    params.extend(event_params);
    let n = db
        .execute(&stmt, &params)
        .await
        .with_context(|| format!("update task {}", t.id))?;
    Ok(n >= 1)
}

/// Prepares (or finds in the connection's cache) the statement that writes `t`, so that a flight
/// of writes sent after it leaves in order (a write whose statement is ready is sent when it is
/// first polled).
pub(super) async fn prepare_write(
    db: &impl GenericClient,
    t: &TaskRecord,
    was: crate::webhook::WriteBase,
) -> Result<(), StoreError> {
    let outbox = Outbox::of(&crate::webhook::outbox_entries(t, was));
    let event = crate::events::task_event(t, was).is_some();
    db.prepare_cached(&write_sql(t, was, &outbox, event))
        .await
        .context("prepare the task update")?;
    Ok(())
}

/// The statement of a task write: the update alone, with the history row when the status
/// changes, with the webhook outbox rows when there are webhook events, and with the task's
/// event in the log when it makes one (`event`: a status change, so with the history row too).
fn write_sql(
    t: &TaskRecord,
    was: crate::webhook::WriteBase,
    outbox: &Outbox,
    event: bool,
) -> std::borrow::Cow<'static, str> {
    let history = was.was != Some(t.status);
    if event {
        // Its parameters follow the task's and the outbox's (when there is one).
        let p = if outbox.ids.is_empty() { 17 } else { 24 };
        let log = format!(
            "ev AS (INSERT INTO events (id, name, owner, task_id, tool, fields, data, created_at, \
             session) SELECT ${}, ${}, ${}, u.id, ${}, '{{}}'::jsonb, ${}, $6, ${} FROM u)",
            p,
            p + 1,
            p + 2,
            p + 3,
            p + 4,
            p + 5
        );
        return std::borrow::Cow::Owned(if outbox.ids.is_empty() {
            format!(
                "WITH u AS ({UPDATE_TASK} RETURNING id), {log} \
                 INSERT INTO task_history (task_id, at, status, message) SELECT id, $6, $2, $3 FROM u"
            )
        } else {
            format!(
                "WITH u AS ({UPDATE_TASK} RETURNING id), \
                 h AS (INSERT INTO task_history (task_id, at, status, message) SELECT id, $6, $2, $3 FROM u), \
                 {log} {OUTBOX_INSERT}"
            )
        });
    }
    if !history && outbox.ids.is_empty() {
        std::borrow::Cow::Borrowed(UPDATE_TASK)
    } else if outbox.ids.is_empty() {
        std::borrow::Cow::Owned(format!(
            "WITH u AS ({UPDATE_TASK} RETURNING id) \
             INSERT INTO task_history (task_id, at, status, message) SELECT id, $6, $2, $3 FROM u"
        ))
    } else {
        // The events go with the change, in the same statement: written only if the update is
        // (and, after a 410 from a target, settled as gone at once). A progress event keeps the
        // status: no history row.
        let history_row = if history {
            ", h AS (INSERT INTO task_history (task_id, at, status, message) SELECT id, $6, $2, $3 FROM u)"
        } else {
            ""
        };
        std::borrow::Cow::Owned(format!(
            "WITH u AS ({UPDATE_TASK} RETURNING id){history_row} {OUTBOX_INSERT}"
        ))
    }
}

/// The outbox rows of a task write (the updated row `u`, the events' arrays `$17`…`$23`).
const OUTBOX_INSERT: &str = "INSERT INTO webhook_outbox (id, task_id, target, event, url, secret, subscription, \
     snapshot, created_at, next_at, state, attempts) \
     SELECT e.id, u.id, e.target, e.event, e.url, e.secret, e.subscription, e.snapshot, $6, $6, \
     CASE WHEN EXISTS (SELECT 1 FROM webhook_outbox g WHERE g.task_id = u.id \
     AND g.target = e.target AND g.state = 'gone') THEN 'gone' ELSE 'pending' END, 0 \
     FROM u, unnest($17::TEXT[], $18::INT[], $19::TEXT[], $20::TEXT[], \
     $21::TEXT[], $22::TEXT[], $23::TEXT[]) AS e(id, target, event, url, secret, subscription, snapshot)";

/// Until when (Unix ms) events are written with a copy of their secret: an hour after the first
/// replica of this build migrated the database (schema migration [`super::schema::SECRET_ONCE`]), so
/// that replicas of earlier builds, which sign with the event's own copy, keep working through a
/// rolling deploy. After it, a purge drops the copies that are left (`blank_secret_copies`).
/// Process-wide: the latest window of any database this process opened (a later one is
/// conservative).
pub(super) static SECRET_COPIES: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(0);

/// How long after the migration events still carry a copy of their secret.
pub(super) const SECRET_COPY_WINDOW_MS: u64 = 3_600_000;

/// Whether an event written at `now` carries a copy of its secret (see [`SECRET_COPIES`]).
pub(super) fn copies_secrets(now: u64) -> bool {
    now < SECRET_COPIES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Outbox entries as the arrays the task write unnests.
#[derive(Default)]
struct Outbox {
    ids: Vec<String>,
    targets: Vec<i32>,
    events: Vec<&'static str>,
    urls: Vec<String>,
    secrets: Vec<String>,
    subscriptions: Vec<Option<String>>,
    snapshots: Vec<String>,
}

impl Outbox {
    fn of(entries: &[crate::webhook::OutboxEntry]) -> Outbox {
        let mut o = Outbox::default();
        let copy = copies_secrets(crate::clock::now_ms());
        for e in entries {
            o.ids.push(e.id.clone());
            o.targets.push(i32::try_from(e.target).unwrap_or(i32::MAX));
            o.events.push(e.event.as_str());
            o.urls.push(e.url.clone());
            // The secret is kept once, with the task (a claim reads it there), except in the
            // window in which replicas of earlier builds may still sign with the event's copy.
            o.secrets.push(if copy {
                e.secret.clone()
            } else {
                String::new()
            });
            o.subscriptions.push(e.subscription.clone());
            o.snapshots.push(e.snapshot.clone());
        }
        o
    }
}

/// The column values of `t` in [`TASK_COLUMNS`] order, then `expires_at`.
struct TaskValues {
    status: &'static str,
    arguments: String,
    request_meta: String,
    outcome: Option<String>,
    created_at: i64,
    updated_at: i64,
    ttl_ms: Option<i64>,
    poll_interval_ms: Option<i64>,
    attempt: i32,
    lease_until: Option<i64>,
    finished_at: Option<i64>,
    retain_after_finish_ms: Option<i64>,
    checkpoint: Option<String>,
    webhooks: Option<String>,
    expires_at: Option<i64>,
}

impl TaskValues {
    fn of(t: &TaskRecord) -> Result<TaskValues, StoreError> {
        Ok(TaskValues {
            status: t.status.as_str(),
            arguments: text("task arguments", &t.arguments)?,
            request_meta: text("task request metadata", &t.request_meta)?,
            outcome: t
                .outcome
                .as_ref()
                .map(|o| text("a task outcome", o))
                .transpose()?,
            created_at: pg_int(t.created_at),
            updated_at: pg_int(t.updated_at),
            ttl_ms: opt_pg_int(t.ttl_ms),
            poll_interval_ms: opt_pg_int(t.poll_interval_ms),
            attempt: i32::try_from(t.attempt).unwrap_or(i32::MAX),
            lease_until: opt_pg_int(t.lease_until),
            finished_at: opt_pg_int(t.finished_at),
            retain_after_finish_ms: opt_pg_int(t.retain_after_finish_ms),
            checkpoint: t
                .checkpoint
                .as_ref()
                .map(|c| text("a task checkpoint", c))
                .transpose()?,
            webhooks: crate::webhook::encode_targets(&t.webhooks),
            expires_at: opt_pg_int(t.expires_at()),
        })
    }

    fn params<'a>(&'a self, t: &'a TaskRecord) -> [&'a (dyn ToSql + Sync); 27] {
        [
            &t.id,
            &t.owner,
            &t.session,
            &t.era,
            &t.tool,
            &self.arguments,
            &self.request_meta,
            &self.status,
            &t.status_message,
            &t.progress,
            &t.progress_total,
            &self.created_at,
            &self.updated_at,
            &self.ttl_ms,
            &self.poll_interval_ms,
            &self.outcome,
            &t.idempotency_key,
            &t.fingerprint,
            &self.attempt,
            &t.lease_owner,
            &self.lease_until,
            &self.finished_at,
            &t.progress_message,
            &self.retain_after_finish_ms,
            &self.checkpoint,
            &self.webhooks,
            &self.expires_at,
        ]
    }
}

/// Inserts a new task.
pub(super) async fn insert_task(db: &impl GenericClient, t: &TaskRecord) -> Result<(), StoreError> {
    let values = TaskValues::of(t)?;
    let stmt = prepare_insert(db).await?;
    db.execute(&stmt, &values.params(t))
        .await
        .with_context(|| format!("insert task {}", t.id))?;
    Ok(())
}

/// The task insert, prepared on `db` (from its cache after the first time: then no round trip, so
/// inserts that follow are sent at once, in order).
pub(super) async fn prepare_insert(
    db: &impl GenericClient,
) -> Result<tokio_postgres::Statement, StoreError> {
    db.prepare_cached(&format!(
        "INSERT INTO tasks ({TASK_COLUMNS}, expires_at) VALUES \
         ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21,$22,$23,$24,$25,$26,$27)"
    ))
    .await
    .context("prepare the task insert")
}

/// One input request by key; `lock` takes its row lock for the rest of the transaction.
pub(super) async fn select_input(
    db: &impl GenericClient,
    key: &str,
    lock: bool,
) -> Result<Option<InputRecord>, StoreError> {
    let sql = if lock {
        format!("SELECT {INPUT_COLUMNS} FROM input_requests WHERE key = $1 FOR UPDATE")
    } else {
        format!("SELECT {INPUT_COLUMNS} FROM input_requests WHERE key = $1")
    };
    let stmt = db
        .prepare_cached(&sql)
        .await
        .context("prepare an input request read")?;
    db.query_opt(&stmt, &[&key])
        .await
        .with_context(|| format!("read input request {key}"))?
        .as_ref()
        .map(input_from_row)
        .transpose()
}

/// Inserts a new input request.
pub(super) async fn insert_input(
    db: &impl GenericClient,
    i: &InputRecord,
) -> Result<(), StoreError> {
    let params = text("input request params", &i.params)?;
    let response = i
        .response
        .as_ref()
        .map(|r| text("an input response", r))
        .transpose()?;
    let stmt = db
        .prepare_cached(&format!(
            "INSERT INTO input_requests ({INPUT_COLUMNS}) VALUES ($1,$2,$3,$4,$5,$6,$7)"
        ))
        .await
        .context("prepare the input request insert")?;
    db.execute(
        &stmt,
        &[
            &i.key,
            &i.task_id,
            &i.method,
            &params,
            &pg_int(i.created_at),
            &response,
            &opt_pg_int(i.answered_at),
        ],
    )
    .await
    .with_context(|| format!("insert input request {}", i.key))?;
    Ok(())
}

/// Records the answer to input request `key`.
pub(super) async fn answer_input(
    db: &impl GenericClient,
    key: &str,
    response: &InputResponse,
    now: u64,
) -> Result<(), StoreError> {
    let response = text("an input response", response)?;
    let stmt = db
        .prepare_cached("UPDATE input_requests SET response = $2, answered_at = $3 WHERE key = $1")
        .await
        .context("prepare the answer write")?;
    db.execute(&stmt, &[&key, &response, &pg_int(now)])
        .await
        .with_context(|| format!("store the answer to input request {key}"))?;
    Ok(())
}

/// How many of a task's input requests wait for an answer.
pub(super) async fn pending_inputs(
    db: &impl GenericClient,
    task_id: &str,
) -> Result<i64, StoreError> {
    let stmt = db
        .prepare_cached(
            "SELECT COUNT(*) FROM input_requests WHERE task_id = $1 AND response IS NULL",
        )
        .await
        .context("prepare the pending input count")?;
    Ok(db
        .query_one(&stmt, &[&task_id])
        .await
        .with_context(|| format!("count the open input requests of task {task_id}"))?
        .get(0))
}
