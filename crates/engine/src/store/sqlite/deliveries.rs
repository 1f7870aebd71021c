//! The webhook outbox in SQLite: claiming due deliveries, settling them, and what an operator reads.
//! Entries are written by the task write itself (`rows::update_task`), in its transaction.

use rusqlite::types::Type;
use rusqlite::{params, Connection, OptionalExtension, Row};

use super::rows::sql_int;
use super::Context;
use crate::store::StoreError;
use crate::webhook::{
    Delivery, DeliveryAttempt, DeliveryNext, DeliveryQuery, DeliveryState, OutboxEntry,
    WebhookEvent,
};

/// The columns a [`Delivery`] is read from, with `{secret}` for what stands in the secret's place.
macro_rules! delivery_columns {
    ($secret:literal) => {
        concat!(
            "id, task_id, target, event, url, ",
            $secret,
            ", subscription, snapshot, created_at, state, attempts, next_at, delivered_at, \
             last_status, last_error"
        )
    };
}

/// An operator's listing: without the secret.
const DELIVERY_COLUMNS: &str = delivery_columns!("''");

/// A claim: with the secret, which a row holds only once its task is purged (see `purge_task`);
/// until then it is read from the task's targets, where it is kept once.
const CLAIM_COLUMNS: &str = delivery_columns!(
    "COALESCE(NULLIF(o.secret, ''), (SELECT json_extract(t.webhooks, '$[' || o.target || \
     '].secret') FROM tasks t WHERE t.id = o.task_id), '')"
);

fn text_error(idx: usize, what: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, what.into())
}

fn delivery_from_row(row: &Row<'_>) -> rusqlite::Result<Delivery> {
    let event: String = row.get(3)?;
    let state: String = row.get(9)?;
    let time = |i: usize| -> rusqlite::Result<u64> {
        Ok(u64::try_from(row.get::<_, i64>(i)?).unwrap_or(0))
    };
    Ok(Delivery {
        entry: OutboxEntry {
            id: row.get(0)?,
            task_id: row.get(1)?,
            target: row.get(2)?,
            event: WebhookEvent::parse(&event)
                .ok_or_else(|| text_error(3, format!("bad event {event:?}")))?,
            url: row.get(4)?,
            secret: row.get(5)?,
            subscription: row.get(6)?,
            snapshot: row.get(7)?,
            created_at: time(8)?,
        },
        state: DeliveryState::parse(&state)
            .ok_or_else(|| text_error(9, format!("bad delivery state {state:?}")))?,
        attempts: row.get(10)?,
        next_at: time(11)?,
        delivered_at: row
            .get::<_, Option<i64>>(12)?
            .map(|v| u64::try_from(v).unwrap_or(0)),
        last_status: row.get(13)?,
        last_error: row.get(14)?,
    })
}

/// Whether anything is due for `node`: a read, so that a server polling an empty outbox every
/// second does not queue a write (and a commit) each time.
pub(super) fn any_due(conn: &Connection, node: &str, now: u64) -> Result<bool, StoreError> {
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM webhook_outbox WHERE state = 'pending' AND next_at <= ?1 \
         AND (lease_owner IS NULL OR lease_owner = ?2 OR lease_until <= ?1))",
    )
    .and_then(|mut s| s.query_row(params![sql_int(now), node], |r| r.get(0)))
    .context("look for due webhook deliveries")
}

/// Claims due deliveries for `node` (see [`OutboxStore::claim_deliveries`](crate::store::OutboxStore::claim_deliveries)).
/// The writer thread is the only writer, so the select and the lease update are one step.
pub(super) fn claim(
    conn: &Connection,
    node: &str,
    now: u64,
    lease_until: u64,
    limit: usize,
) -> Result<Vec<Delivery>, StoreError> {
    let now = sql_int(now);
    let found = conn
        .prepare_cached(&format!(
            "SELECT {CLAIM_COLUMNS} FROM webhook_outbox o WHERE state = 'pending' \
             AND next_at <= ?1 AND (lease_owner IS NULL OR lease_owner = ?2 OR lease_until <= ?1) \
             AND NOT EXISTS (SELECT 1 FROM webhook_outbox p WHERE p.state = 'pending' \
             AND p.task_id = o.task_id AND p.target = o.target AND p.seq < o.seq) \
             ORDER BY next_at, seq LIMIT ?3"
        ))
        .and_then(|mut s| {
            s.query_map(
                params![now, node, i64::try_from(limit).unwrap_or(i64::MAX)],
                delivery_from_row,
            )?
            .collect::<rusqlite::Result<Vec<_>>>()
        })
        .context("read the due webhook deliveries")?;
    for d in &found {
        conn.prepare_cached(
            "UPDATE webhook_outbox SET lease_owner = ?2, lease_until = ?3 WHERE id = ?1",
        )
        .and_then(|mut s| s.execute(params![d.entry.id, node, sql_int(lease_until)]))
        .with_context(|| format!("claim webhook delivery {}", d.entry.id))?;
    }
    Ok(found)
}

/// Settles or reschedules one delivery after an attempt, if `node` holds it.
pub(super) fn finish(
    conn: &Connection,
    id: &str,
    node: &str,
    attempt: &DeliveryAttempt,
    next: DeliveryNext,
) -> Result<bool, StoreError> {
    let (state, next_at, delivered_at) = next.settles(attempt.at);
    let held: Option<(String, u32, i64)> = conn
        .prepare_cached(
            "SELECT task_id, target, seq FROM webhook_outbox WHERE id = ?1 AND state = 'pending' \
             AND lease_owner = ?2",
        )
        .and_then(|mut s| {
            s.query_row(params![id, node], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()
        })
        .with_context(|| format!("read webhook delivery {id}"))?;
    let Some((task, target, seq)) = held else {
        return Ok(false);
    };
    conn.prepare_cached(
        "UPDATE webhook_outbox SET state = ?2, next_at = COALESCE(?3, next_at), \
         delivered_at = ?4, attempts = attempts + 1, last_status = ?5, last_error = ?6, \
         lease_owner = NULL, lease_until = NULL WHERE id = ?1",
    )
    .and_then(|mut s| {
        s.execute(params![
            id,
            state.as_str(),
            next_at.map(sql_int),
            delivered_at.map(sql_int),
            attempt.status,
            attempt.error
        ])
    })
    .with_context(|| format!("settle webhook delivery {id}"))?;
    conn.prepare_cached(
        "INSERT INTO webhook_attempts (delivery, at, status, latency_ms, error) \
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )
    .and_then(|mut s| {
        s.execute(params![
            id,
            sql_int(attempt.at),
            attempt.status,
            sql_int(attempt.latency_ms),
            attempt.error
        ])
    })
    .with_context(|| format!("keep an attempt of webhook delivery {id}"))?;
    if next == DeliveryNext::Gone {
        conn.prepare_cached(
            "UPDATE webhook_outbox SET state = 'gone' WHERE state = 'pending' AND task_id = ?1 \
             AND target = ?2 AND seq > ?3",
        )
        .and_then(|mut s| s.execute(params![task, target, seq]))
        .with_context(|| format!("stop the later webhook deliveries of task {task}"))?;
    }
    Ok(true)
}

/// Deliveries for an operator, newest first.
pub(super) fn list(conn: &Connection, q: &DeliveryQuery) -> Result<Vec<Delivery>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {DELIVERY_COLUMNS} FROM webhook_outbox WHERE (?1 IS NULL OR task_id = ?1) \
         AND (?2 IS NULL OR state = ?2) AND (?4 IS NULL OR id = ?4) ORDER BY seq DESC LIMIT ?3"
    ))
    .and_then(|mut s| {
        s.query_map(
            params![
                q.task_id,
                q.state.map(DeliveryState::as_str),
                i64::try_from(q.limit()).unwrap_or(i64::MAX),
                q.id
            ],
            delivery_from_row,
        )?
        .collect::<rusqlite::Result<Vec<_>>>()
    })
    .context("list webhook deliveries")
}

/// The attempts of one delivery, oldest first.
pub(super) fn attempts(conn: &Connection, id: &str) -> Result<Vec<DeliveryAttempt>, StoreError> {
    conn.prepare_cached(
        "SELECT at, status, latency_ms, error FROM webhook_attempts WHERE delivery = ?1 \
         ORDER BY at, rowid",
    )
    .and_then(|mut s| {
        s.query_map([id], |r| {
            Ok(DeliveryAttempt {
                at: u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0),
                status: r.get(1)?,
                latency_ms: u64::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
                error: r.get(3)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()
    })
    .with_context(|| format!("read the attempts of webhook delivery {id}"))
}

/// Makes a delivery pending again, due at `now`.
pub(super) fn redeliver(conn: &Connection, id: &str, now: u64) -> Result<bool, StoreError> {
    conn.prepare_cached(
        "UPDATE webhook_outbox SET state = 'pending', next_at = ?2, delivered_at = NULL, \
         lease_owner = NULL, lease_until = NULL WHERE id = ?1",
    )
    .and_then(|mut s| s.execute(params![id, sql_int(now)]))
    .map(|n| n == 1)
    .with_context(|| format!("redeliver webhook delivery {id}"))
}

/// Lets go of the pending deliveries `node` holds.
pub(super) fn release(conn: &Connection, node: &str) -> Result<usize, StoreError> {
    conn.prepare_cached(
        "UPDATE webhook_outbox SET lease_owner = NULL, lease_until = NULL \
         WHERE state = 'pending' AND lease_owner = ?1",
    )
    .and_then(|mut s| s.execute([node]))
    .context("release this node's webhook deliveries")
}

/// Unfinished tasks of `owner` with a client-registered webhook, up to `max` (read through the
/// partial index of unfinished tasks by owner).
pub(super) fn count_registrations(
    conn: &Connection,
    owner: &str,
    max: u64,
) -> Result<u64, StoreError> {
    conn.prepare_cached(
        "SELECT COUNT(*) FROM (SELECT 1 FROM tasks WHERE owner = ?1 \
         AND status IN ('working', 'input_required') AND webhooks IS NOT NULL \
         AND EXISTS (SELECT 1 FROM json_each(tasks.webhooks) \
         WHERE json_type(value, '$.subscription') IS NULL) LIMIT ?2)",
    )
    .and_then(|mut s| {
        s.query_row(
            params![owner, i64::try_from(max).unwrap_or(i64::MAX)],
            |r| r.get::<_, i64>(0),
        )
    })
    .map(|n| u64::try_from(n).unwrap_or(0))
    .with_context(|| format!("count the webhook registrations of {owner}"))
}

/// Before the tasks matching `cond` (over `?1` and `?2`) are deleted: their events that are still
/// kept get the secret of their target, which goes with the task's row. Only events outliving their
/// task hold one.
pub(super) fn keep_secrets_of_purged(
    conn: &Connection,
    cond: &str,
    now: i64,
    edge: i64,
) -> Result<usize, StoreError> {
    conn.execute(
        &format!(
            "UPDATE webhook_outbox SET secret = COALESCE((SELECT json_extract(t.webhooks, \
             '$[' || webhook_outbox.target || '].secret') FROM tasks t \
             WHERE t.id = webhook_outbox.task_id), '') \
             WHERE secret = '' AND task_id IN (SELECT id FROM tasks WHERE webhooks IS NOT NULL \
             AND {cond})"
        ),
        params![now, edge],
    )
    .context("keep the webhook secrets of expired tasks' events")
}

/// Removes settled deliveries written before `before`, with their attempts.
pub(super) fn purge(conn: &Connection, before: u64) -> Result<usize, StoreError> {
    let before = sql_int(before);
    conn.prepare_cached(
        "DELETE FROM webhook_attempts WHERE delivery IN (SELECT id FROM webhook_outbox \
         WHERE state <> 'pending' AND created_at < ?1)",
    )
    .and_then(|mut s| s.execute([before]))
    .context("delete the attempts of old webhook deliveries")?;
    conn.prepare_cached("DELETE FROM webhook_outbox WHERE state <> 'pending' AND created_at < ?1")
        .and_then(|mut s| s.execute([before]))
        .context("delete old webhook deliveries")
}
