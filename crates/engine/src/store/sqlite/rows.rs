//! Between records and rows: the column lists, row mapping, and the statements that read and write
//! one task or input request.

use rusqlite::types::Type;
use rusqlite::{params, Connection, OptionalExtension, Params, Row, Statement};

use serde_json::Value;
use std::sync::Arc;

use super::Context;
use crate::model::{InputRecord, InputResponse, Outcome, TaskRecord, TaskStatus};
use crate::store::{SessionRecord, StoreError};

/// The `tasks` columns a [`TaskRecord`] is read from, in [`task_from_row`]'s order, with `$args`
/// in the place of the arguments.
macro_rules! task_columns {
    ($args:literal) => {
        concat!(
            "id, owner, session, era, tool, ",
            $args,
            ", request_meta, status, status_message, progress, progress_total, created_at, \
             updated_at, ttl_ms, poll_interval_ms, outcome, idempotency_key, fingerprint, attempt, \
             lease_owner, lease_until, finished_at, progress_message, retain_after_finish_ms, checkpoint, \
             webhooks"
        )
    };
}

/// The `tasks` columns a [`TaskRecord`] is read from, in [`task_from_row`]'s order.
pub(super) const TASK_COLUMNS: &str = task_columns!("arguments");

/// [`TASK_COLUMNS`] with `null` for the arguments: for a task whose arguments are held already.
const TASK_COLUMNS_BUT_ARGUMENTS: &str = task_columns!("'null'");

/// The arguments of the unfinished tasks this store has seen, shared with every record read of
/// them: a progress report or a poll of a task with large arguments neither parses them again nor
/// makes another copy (each copy of the record points at one value). A task's entry goes when it
/// finishes; the store is the database's only user, so nothing finishes behind its back.
#[derive(Default)]
pub(super) struct SharedArguments(std::sync::Mutex<std::collections::HashMap<String, Arc<Value>>>);

impl SharedArguments {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Arc<Value>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, id: &str) -> Option<Arc<Value>> {
        self.lock().get(id).cloned()
    }

    /// Holds `t`'s arguments while it is unfinished; forgets them once it has finished.
    pub(super) fn keep(&self, t: &TaskRecord) {
        if t.status.is_terminal() {
            self.lock().remove(&t.id);
        } else {
            self.lock()
                .entry(t.id.clone())
                .or_insert_with(|| t.arguments.clone());
        }
    }

    /// How many tasks' arguments are held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }
}

/// One task by id, its arguments shared through `shared` (see [`SharedArguments`]).
pub(super) fn select_task_shared(
    conn: &Connection,
    id: &str,
    shared: &SharedArguments,
) -> Result<Option<TaskRecord>, StoreError> {
    let Some(arguments) = shared.get(id) else {
        let found = select_task(conn, id)?;
        if let Some(t) = &found {
            shared.keep(t);
        }
        return Ok(found);
    };
    let found = conn
        .prepare_cached(&format!(
            "SELECT {TASK_COLUMNS_BUT_ARGUMENTS} FROM tasks WHERE id = ?1"
        ))
        .and_then(|mut s| s.query_row([id], task_from_row).optional())
        .with_context(|| format!("read task {id}"))?;
    Ok(found.map(|mut t| {
        t.arguments = arguments;
        t
    }))
}

/// The `input_requests` columns an [`InputRecord`] is read from, in [`input_from_row`]'s order.
pub(super) const INPUT_COLUMNS: &str =
    "key, task_id, method, params, created_at, response, answered_at";

/// The `sessions` columns a [`SessionRecord`] is read from, in [`session_from_row`]'s order.
pub(super) const SESSION_COLUMNS: &str = "id, owner, data, created_at, last_seen, idle_ms";

fn status_from_sql(idx: usize, s: String) -> rusqlite::Result<TaskStatus> {
    TaskStatus::parse(&s).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            idx,
            Type::Text,
            format!("bad status {s:?}").into(),
        )
    })
}

fn json_from_sql<T: serde::de::DeserializeOwned>(idx: usize, s: &str) -> rusqlite::Result<T> {
    serde_json::from_str(s)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, Box::new(e)))
}

fn opt_json_from_sql<T: serde::de::DeserializeOwned>(
    idx: usize,
    s: Option<String>,
) -> rusqlite::Result<Option<T>> {
    s.map(|s| json_from_sql(idx, &s)).transpose()
}

fn u64_from_sql(v: i64) -> u64 {
    // Every time and count is written from a u64 clamped to i64::MAX, so a negative value can only
    // come from outside; reading it as 0 is the closest valid value.
    u64::try_from(v).unwrap_or(0)
}

fn opt_i64(v: Option<u64>) -> Option<i64> {
    v.map(sql_int)
}

/// A time or count as SQLite stores it: an i64, clamped (no real time reaches `i64::MAX` ms).
pub(super) fn sql_int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Maps a row selected with [`TASK_COLUMNS`].
pub(super) fn task_from_row(row: &Row<'_>) -> rusqlite::Result<TaskRecord> {
    Ok(TaskRecord {
        id: row.get(0)?,
        owner: row.get(1)?,
        session: row.get(2)?,
        era: row.get(3)?,
        tool: row.get(4)?,
        arguments: json_from_sql(5, &row.get::<_, String>(5)?)?,
        request_meta: json_from_sql(6, &row.get::<_, String>(6)?)?,
        status: status_from_sql(7, row.get(7)?)?,
        status_message: row.get(8)?,
        progress: row.get(9)?,
        progress_total: row.get(10)?,
        created_at: u64_from_sql(row.get(11)?),
        updated_at: u64_from_sql(row.get(12)?),
        ttl_ms: row.get::<_, Option<i64>>(13)?.map(u64_from_sql),
        poll_interval_ms: row.get::<_, Option<i64>>(14)?.map(u64_from_sql),
        outcome: opt_json_from_sql::<Outcome>(15, row.get(15)?)?,
        idempotency_key: row.get(16)?,
        fingerprint: row.get(17)?,
        attempt: u32::try_from(row.get::<_, i64>(18)?).unwrap_or(u32::MAX),
        lease_owner: row.get(19)?,
        lease_until: row.get::<_, Option<i64>>(20)?.map(u64_from_sql),
        finished_at: row.get::<_, Option<i64>>(21)?.map(u64_from_sql),
        progress_message: row.get(22)?,
        retain_after_finish_ms: row.get::<_, Option<i64>>(23)?.map(u64_from_sql),
        checkpoint: opt_json_from_sql::<serde_json::Value>(24, row.get(24)?)?,
        webhooks: crate::webhook::decode_targets(row.get::<_, Option<String>>(25)?.as_deref())
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(25, Type::Text, Box::new(e)))?,
    })
}

/// Maps a row selected with [`INPUT_COLUMNS`].
/// A journal step from `SELECT task_id, seq, name, output, attempt, at`.
pub(super) fn step_from_row(row: &Row<'_>) -> rusqlite::Result<crate::model::StepRecord> {
    Ok(crate::model::StepRecord {
        task_id: row.get(0)?,
        seq: row.get(1)?,
        name: row.get(2)?,
        output: json_from_sql(3, &row.get::<_, String>(3)?)?,
        attempt: row.get(4)?,
        at: u64::try_from(row.get::<_, i64>(5)?).unwrap_or(0),
        duration_ms: u64::try_from(row.get::<_, i64>(6)?).unwrap_or(0),
        error: row.get(7)?,
    })
}

/// The columns [`signal_from_row`] reads, in its order.
pub(super) const SIGNAL_COLUMNS: &str = "task_id, seq, name, payload, sender, key, at";

/// Maps a row selected with [`SIGNAL_COLUMNS`].
pub(super) fn signal_from_row(row: &Row<'_>) -> rusqlite::Result<crate::model::SignalRecord> {
    Ok(crate::model::SignalRecord {
        task_id: row.get(0)?,
        seq: row.get(1)?,
        name: row.get(2)?,
        payload: json_from_sql(3, &row.get::<_, String>(3)?)?,
        sender: row.get(4)?,
        key: row.get(5)?,
        at: u64_from_sql(row.get(6)?),
    })
}

pub(super) fn input_from_row(row: &Row<'_>) -> rusqlite::Result<InputRecord> {
    Ok(InputRecord {
        key: row.get(0)?,
        task_id: row.get(1)?,
        method: row.get(2)?,
        params: json_from_sql(3, &row.get::<_, String>(3)?)?,
        created_at: u64_from_sql(row.get(4)?),
        response: opt_json_from_sql::<InputResponse>(5, row.get(5)?)?,
        answered_at: row.get::<_, Option<i64>>(6)?.map(u64_from_sql),
    })
}

/// Maps a row selected with [`SESSION_COLUMNS`].
pub(super) fn session_from_row(row: &Row<'_>) -> rusqlite::Result<SessionRecord> {
    Ok(SessionRecord {
        id: row.get(0)?,
        owner: row.get(1)?,
        data: json_from_sql(2, &row.get::<_, String>(2)?)?,
        created_at: u64_from_sql(row.get(3)?),
        last_seen: u64_from_sql(row.get(4)?),
        idle_ms: row.get::<_, Option<i64>>(5)?.map(u64_from_sql),
    })
}

/// One task by id.
pub(super) fn select_task(conn: &Connection, id: &str) -> Result<Option<TaskRecord>, StoreError> {
    conn.prepare_cached(&format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?1"))
        .and_then(|mut s| s.query_row([id], task_from_row).optional())
        .with_context(|| format!("read task {id}"))
}

/// The task of `owner` with idempotency key `key`, from its row.
pub(super) fn select_by_key(
    conn: &Connection,
    owner: &str,
    key: &str,
) -> Result<Option<TaskRecord>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {TASK_COLUMNS} FROM tasks WHERE owner = ?1 AND idempotency_key = ?2"
    ))
    .and_then(|mut s| s.query_row([owner, key], task_from_row).optional())
    .with_context(|| format!("find the task of {owner} with key {key:?}"))
}

/// The tasks `sql` (which selects [`TASK_COLUMNS`]) returns; `what` names the query for errors.
pub(super) fn select_tasks(
    conn: &Connection,
    sql: &str,
    params: impl Params,
    what: impl FnOnce() -> String,
) -> Result<Vec<TaskRecord>, StoreError> {
    conn.prepare_cached(sql)
        .and_then(|mut s| {
            s.query_map(params, task_from_row)?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
        .with_context(what)
}

/// One input request by key.
pub(super) fn select_input(
    conn: &Connection,
    key: &str,
) -> Result<Option<InputRecord>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {INPUT_COLUMNS} FROM input_requests WHERE key = ?1"
    ))
    .and_then(|mut s| s.query_row([key], input_from_row).optional())
    .with_context(|| format!("read input request {key}"))
}

fn outcome_json(t: &TaskRecord) -> Result<Option<String>, StoreError> {
    t.outcome
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .with_context(|| format!("serialize the outcome of task {}", t.id))
}

/// The statement [`insert_task`] runs.
pub(super) const INSERT_TASK: &str = concat!(
    "INSERT INTO tasks (",
    task_columns!("arguments"),
    ", expires_at, history) VALUES \
     (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22,?23,?24,?25,?26,?27,\
     CASE WHEN ?28 IS NULL THEN NULL ELSE '[' || ?28 || ']' END)"
);

/// Stores a new task, through `stmt` (prepared from [`INSERT_TASK`]). `history` is the status
/// changes it went through after its creation, each a JSON [`Transition`](crate::model::Transition),
/// joined by commas (see [`transitions_text`]): a task written first from an earlier build's
/// change log (`old_log.rs`) may have finished already.
pub(super) fn insert_task(
    stmt: &mut Statement<'_>,
    t: &TaskRecord,
    history: Option<&str>,
) -> Result<(), StoreError> {
    let outcome = outcome_json(t)?;
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
        sql_int(t.created_at),
        sql_int(t.updated_at),
        opt_i64(t.ttl_ms),
        opt_i64(t.poll_interval_ms),
        outcome,
        t.idempotency_key,
        t.fingerprint,
        i64::from(t.attempt),
        t.lease_owner,
        opt_i64(t.lease_until),
        opt_i64(t.finished_at),
        t.progress_message,
        opt_i64(t.retain_after_finish_ms),
        t.checkpoint.as_ref().map(ToString::to_string),
        crate::webhook::encode_targets(&t.webhooks),
        opt_i64(t.expires_at()),
        history,
    ])
    .with_context(|| format!("insert task {}", t.id))?;
    Ok(())
}

/// The statement [`update_task`] runs.
pub(super) const UPDATE_TASK: &str = "UPDATE tasks SET status=?2, status_message=?3, progress=?4, progress_total=?5, updated_at=?6, \
         outcome=?7, attempt=?8, lease_owner=?9, lease_until=?10, finished_at=?11, \
         progress_message=?12, ttl_ms=?13, expires_at=?14, checkpoint=?15, \
         history = CASE WHEN ?16 IS NULL THEN history \
         WHEN history IS NULL OR history = '[]' THEN '[' || ?16 || ']' \
         ELSE substr(history, 1, length(history) - 1) || ',' || ?16 || ']' END WHERE id=?1";

/// Writes back the fields a [`TaskChange`](crate::store::TaskChange) can touch; a status other than
/// `was` (see [`write_base`](crate::store::write_base)) is also appended to the task's history (the
/// row's `history` column, a JSON array of [`Transition`](crate::model::Transition)s).
pub(super) fn update_task(
    conn: &Connection,
    stmt: &mut Statement<'_>,
    t: &TaskRecord,
    was: crate::webhook::WriteBase,
) -> Result<(), StoreError> {
    for e in crate::webhook::outbox_entries(t, was) {
        // The secret is not copied: it is kept once, with the task's targets (`deliveries.rs`).
        // After a 410 from a target, the task's later events to it are settled as gone at once.
        conn.prepare_cached(
            "INSERT INTO webhook_outbox (id, task_id, target, event, url, secret, subscription, \
             snapshot, created_at, next_at, state, attempts) \
             SELECT ?1, ?2, ?3, ?4, ?5, '', ?6, ?7, ?8, ?8, \
             CASE WHEN EXISTS (SELECT 1 FROM webhook_outbox WHERE task_id = ?2 AND target = ?3 \
             AND state = 'gone') THEN 'gone' ELSE 'pending' END, 0",
        )
        .and_then(|mut s| {
            s.execute(params![
                e.id,
                e.task_id,
                e.target,
                e.event.as_str(),
                e.url,
                e.subscription,
                e.snapshot,
                sql_int(e.created_at),
            ])
        })
        .with_context(|| format!("write the {} event of task {} to the outbox", e.event, t.id))?;
    }
    if let Some(event) = crate::events::task_event(t, was) {
        super::events::write_event(conn, &event)?;
    }
    // Appended as text to the array the row holds (it is only ever written here): SQLite's JSON
    // functions would parse and render the whole array at every change.
    let transition = transition_of(t, was)
        .map(|tr| transitions_text(std::slice::from_ref(&tr)))
        .transpose()?;
    update_row(stmt, t, transition.as_deref())
}

/// The status change a write of `t` on top of `was` makes, if it changes the status.
pub(super) fn transition_of(
    t: &TaskRecord,
    was: crate::webhook::WriteBase,
) -> Option<crate::model::Transition> {
    (was.was != Some(t.status)).then(|| crate::model::Transition {
        at: t.updated_at,
        status: t.status,
        message: t.status_message.clone(),
    })
}

/// `transitions` as the text [`insert_task`] and [`update_row`] add to a row's history: each one
/// JSON, joined by commas.
pub(super) fn transitions_text(
    transitions: &[crate::model::Transition],
) -> Result<String, StoreError> {
    let mut text = String::new();
    for tr in transitions {
        if !text.is_empty() {
            text.push(',');
        }
        text.push_str(&serde_json::to_string(tr).context("serialize a status change")?);
    }
    Ok(text)
}

/// Writes back the fields of task `t` a change can touch, through `stmt` (prepared from
/// [`UPDATE_TASK`]), and appends `history` (see [`transitions_text`]) to its history.
pub(super) fn update_row(
    stmt: &mut Statement<'_>,
    t: &TaskRecord,
    history: Option<&str>,
) -> Result<(), StoreError> {
    let outcome = outcome_json(t)?;
    let n = stmt
        .execute(params![
            t.id,
            t.status.as_str(),
            t.status_message,
            t.progress,
            t.progress_total,
            sql_int(t.updated_at),
            outcome,
            i64::from(t.attempt),
            t.lease_owner,
            opt_i64(t.lease_until),
            opt_i64(t.finished_at),
            t.progress_message,
            opt_i64(t.ttl_ms),
            opt_i64(t.expires_at()),
            t.checkpoint.as_ref().map(ToString::to_string),
            history,
        ])
        .with_context(|| format!("update task {}", t.id))?;
    if n != 1 {
        return Err(StoreError::message(format!(
            "update task {}: its row is missing",
            t.id
        )));
    }
    Ok(())
}

/// Stores a new, unanswered input request.
pub(super) fn insert_input(conn: &Connection, input: &InputRecord) -> Result<(), StoreError> {
    conn.prepare_cached(&format!(
        "INSERT INTO input_requests ({INPUT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, NULL, NULL)"
    ))
    .and_then(|mut st| {
        st.execute(params![
            input.key,
            input.task_id,
            input.method,
            input.params.to_string(),
            sql_int(input.created_at),
        ])
    })
    .with_context(|| {
        format!(
            "insert input request {} of task {}",
            input.key, input.task_id
        )
    })?;
    Ok(())
}

/// Records the answer to input request `key`.
pub(super) fn answer_input(
    conn: &Connection,
    key: &str,
    response: &InputResponse,
    now: u64,
) -> Result<(), StoreError> {
    let text = serde_json::to_string(response)
        .with_context(|| format!("serialize the answer to input request {key}"))?;
    conn.prepare_cached("UPDATE input_requests SET response = ?2, answered_at = ?3 WHERE key = ?1")
        .and_then(|mut st| st.execute(params![key, text, sql_int(now)]))
        .with_context(|| format!("store the answer to input request {key}"))?;
    Ok(())
}

/// How many of a task's input requests are unanswered.
pub(super) fn pending_inputs(conn: &Connection, task_id: &str) -> Result<usize, StoreError> {
    let n: i64 = conn
        .prepare_cached(
            "SELECT COUNT(*) FROM input_requests WHERE task_id = ?1 AND response IS NULL",
        )
        .and_then(|mut st| st.query_row([task_id], |r| r.get(0)))
        .with_context(|| format!("count the unanswered input requests of task {task_id}"))?;
    Ok(usize::try_from(n).unwrap_or(0))
}
