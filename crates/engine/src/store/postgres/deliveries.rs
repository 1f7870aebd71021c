//! The webhook outbox in PostgreSQL: claiming due deliveries (one replica each: `FOR UPDATE SKIP
//! LOCKED` and a lease), settling them, and what an operator reads. Entries are written by the task
//! write itself (`rows::write_task`), in its statement.

use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use super::rows::pg_int;
use super::Context;
use crate::store::StoreError;
use crate::webhook::{
    Delivery, DeliveryAttempt, DeliveryNext, DeliveryQuery, DeliveryState, OutboxEntry,
    WebhookEvent,
};

/// An operator's listing: without the secret.
const DELIVERY_COLUMNS: &str = "id, task_id, target, event, url, '' AS secret, subscription, \
     snapshot, created_at, state, attempts, next_at, delivered_at, last_status, last_error";

/// A claim (of the updated rows `w`): with the secret, which a row holds only once its task is
/// purged (see `keep_secrets_of_purged`); until then it is read from the task's targets, where it
/// is kept once. Read as `json`, not `jsonb`, which refuses some text a row may hold.
const CLAIM_COLUMNS: &str = "w.id, w.task_id, w.target, w.event, w.url, \
     COALESCE(NULLIF(w.secret, ''), (SELECT t.webhooks::json -> w.target ->> 'secret' \
     FROM tasks t WHERE t.id = w.task_id), ''), w.subscription, w.snapshot, w.created_at, \
     w.state, w.attempts, w.next_at, w.delivered_at, w.last_status, w.last_error";

fn time(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn delivery_from_row(row: &Row) -> Result<Delivery, StoreError> {
    let get = |e| StoreError::backend("read a webhook delivery from a row", e);
    let event: String = row.try_get(3).map_err(get)?;
    let state: String = row.try_get(9).map_err(get)?;
    Ok(Delivery {
        entry: OutboxEntry {
            id: row.try_get(0).map_err(get)?,
            task_id: row.try_get(1).map_err(get)?,
            target: u32::try_from(row.try_get::<_, i32>(2).map_err(get)?).unwrap_or(0),
            event: WebhookEvent::parse(&event).ok_or_else(|| {
                StoreError::message(format!("bad webhook event {event:?} in a row"))
            })?,
            url: row.try_get(4).map_err(get)?,
            secret: row.try_get(5).map_err(get)?,
            subscription: row.try_get(6).map_err(get)?,
            snapshot: row.try_get(7).map_err(get)?,
            created_at: time(row.try_get(8).map_err(get)?),
        },
        state: DeliveryState::parse(&state).ok_or_else(|| {
            StoreError::message(format!("bad webhook delivery state {state:?} in a row"))
        })?,
        attempts: u32::try_from(row.try_get::<_, i32>(10).map_err(get)?).unwrap_or(0),
        next_at: time(row.try_get(11).map_err(get)?),
        delivered_at: row.try_get::<_, Option<i64>>(12).map_err(get)?.map(time),
        last_status: row
            .try_get::<_, Option<i32>>(13)
            .map_err(get)?
            .and_then(|s| u16::try_from(s).ok()),
        last_error: row.try_get(14).map_err(get)?,
    })
}

/// Claims due deliveries for `node` in one statement: rows another replica is claiming are
/// skipped, and a row leased meanwhile no longer matches when it is locked.
pub(super) async fn claim(
    db: &impl GenericClient,
    node: &str,
    now: u64,
    lease_until: u64,
    limit: usize,
) -> Result<Vec<Delivery>, StoreError> {
    let stmt = db
        .prepare_cached(&format!(
            "WITH due AS (SELECT seq FROM webhook_outbox o WHERE state = 'pending' \
             AND next_at <= $1 AND (lease_owner IS NULL OR lease_owner = $2 OR lease_until <= $1) \
             AND NOT EXISTS (SELECT 1 FROM webhook_outbox p WHERE p.state = 'pending' \
             AND p.task_id = o.task_id AND p.target = o.target AND p.seq < o.seq) \
             ORDER BY next_at, seq LIMIT $4 FOR UPDATE SKIP LOCKED) \
             UPDATE webhook_outbox w SET lease_owner = $2, lease_until = $3 FROM due \
             WHERE w.seq = due.seq RETURNING {CLAIM_COLUMNS}, w.seq"
        ))
        .await
        .context("prepare the webhook delivery claim")?;
    let rows = db
        .query(
            &stmt,
            &[
                &pg_int(now),
                &node,
                &pg_int(lease_until),
                &i64::try_from(limit).unwrap_or(i64::MAX),
            ],
        )
        .await
        .context("claim due webhook deliveries")?;
    let mut found = rows
        .iter()
        .map(|r| {
            let seq: i64 = r
                .try_get(15)
                .map_err(|e| StoreError::backend("read a webhook delivery from a row", e))?;
            Ok((seq, delivery_from_row(r)?))
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    found.sort_by_key(|(seq, d)| (d.next_at, *seq));
    Ok(found.into_iter().map(|(_, d)| d).collect())
}

/// Settles or reschedules one delivery after an attempt, if `node` holds it: one statement for the
/// delivery, its attempt and (on 410) its task's later events to the same target.
pub(super) async fn finish(
    db: &impl GenericClient,
    id: &str,
    node: &str,
    attempt: &DeliveryAttempt,
    next: DeliveryNext,
) -> Result<bool, StoreError> {
    let (state, next_at, delivered_at) = next.settles(attempt.at);
    let stmt = db
        .prepare_cached(
            "WITH d AS (UPDATE webhook_outbox SET state = $3, next_at = COALESCE($4, next_at), \
             delivered_at = $5, attempts = attempts + 1, last_status = $6, last_error = $7, \
             lease_owner = NULL, lease_until = NULL \
             WHERE id = $1 AND state = 'pending' AND lease_owner = $2 \
             RETURNING id, task_id, target, seq), \
             a AS (INSERT INTO webhook_attempts (delivery, at, status, latency_ms, error) \
             SELECT id, $8, $6, $9, $7 FROM d), \
             g AS (UPDATE webhook_outbox o SET state = 'gone' FROM d WHERE $3 = 'gone' \
             AND o.state = 'pending' AND o.task_id = d.task_id AND o.target = d.target \
             AND o.seq > d.seq) \
             SELECT count(*) FROM d",
        )
        .await
        .context("prepare the webhook delivery settle")?;
    let status = attempt.status.map(i32::from);
    let row = db
        .query_one(
            &stmt,
            &[
                &id,
                &node,
                &state.as_str(),
                &next_at.map(pg_int),
                &delivered_at.map(pg_int),
                &status,
                &attempt.error,
                &pg_int(attempt.at),
                &pg_int(attempt.latency_ms),
            ],
        )
        .await
        .with_context(|| format!("settle webhook delivery {id}"))?;
    let n: i64 = row
        .try_get(0)
        .map_err(|e| StoreError::backend("read a count", e))?;
    Ok(n == 1)
}

/// Deliveries for an operator, newest first.
pub(super) async fn list(
    db: &impl GenericClient,
    q: &DeliveryQuery,
) -> Result<Vec<Delivery>, StoreError> {
    let stmt = db
        .prepare_cached(&format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_outbox WHERE ($1::TEXT IS NULL OR task_id = $1) \
             AND ($2::TEXT IS NULL OR state = $2) AND ($4::TEXT IS NULL OR id = $4) \
             ORDER BY seq DESC LIMIT $3"
        ))
        .await
        .context("prepare the webhook delivery list")?;
    let rows = db
        .query(
            &stmt,
            &[
                &q.task_id,
                &q.state.map(DeliveryState::as_str),
                &i64::try_from(q.limit()).unwrap_or(i64::MAX),
                &q.id,
            ],
        )
        .await
        .context("list webhook deliveries")?;
    rows.iter().map(delivery_from_row).collect()
}

/// The attempts of one delivery, oldest first.
pub(super) async fn attempts(
    db: &impl GenericClient,
    id: &str,
) -> Result<Vec<DeliveryAttempt>, StoreError> {
    let stmt = db
        .prepare_cached(
            "SELECT at, status, latency_ms, error FROM webhook_attempts WHERE delivery = $1 \
             ORDER BY at",
        )
        .await
        .context("prepare the webhook attempts read")?;
    let rows = db
        .query(&stmt, &[&id])
        .await
        .with_context(|| format!("read the attempts of webhook delivery {id}"))?;
    let get = |e| StoreError::backend("read a webhook attempt from a row", e);
    rows.iter()
        .map(|r| {
            Ok(DeliveryAttempt {
                at: time(r.try_get(0).map_err(get)?),
                status: r
                    .try_get::<_, Option<i32>>(1)
                    .map_err(get)?
                    .and_then(|s| u16::try_from(s).ok()),
                latency_ms: time(r.try_get(2).map_err(get)?),
                error: r.try_get(3).map_err(get)?,
            })
        })
        .collect()
}

/// Makes a delivery pending again, due at `now`.
pub(super) async fn redeliver(
    db: &impl GenericClient,
    id: &str,
    now: u64,
) -> Result<bool, StoreError> {
    let n = db
        .execute(
            "UPDATE webhook_outbox SET state = 'pending', next_at = $2, delivered_at = NULL, \
             lease_owner = NULL, lease_until = NULL WHERE id = $1",
            &[&id, &pg_int(now)],
        )
        .await
        .with_context(|| format!("redeliver webhook delivery {id}"))?;
    Ok(n == 1)
}

/// Lets go of the pending deliveries `node` holds.
pub(super) async fn release(db: &impl GenericClient, node: &str) -> Result<usize, StoreError> {
    let n = db
        .execute(
            "UPDATE webhook_outbox SET lease_owner = NULL, lease_until = NULL \
             WHERE state = 'pending' AND lease_owner = $1",
            &[&node],
        )
        .await
        .context("release this node's webhook deliveries")?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// Unfinished tasks of `owner` with a client-registered webhook, up to `max`.
pub(super) async fn count_registrations(
    db: &impl GenericClient,
    owner: &str,
    max: u64,
) -> Result<u64, StoreError> {
    let row = db
        .query_one(
            "SELECT COUNT(*) FROM (SELECT 1 FROM tasks WHERE owner = $1 \
             AND status IN ('working', 'input_required') AND webhooks IS NOT NULL \
             AND EXISTS (SELECT 1 FROM jsonb_array_elements(webhooks::jsonb) AS w \
             WHERE NOT w ? 'subscription') LIMIT $2) AS registered",
            &[&owner, &i64::try_from(max).unwrap_or(i64::MAX)],
        )
        .await
        .with_context(|| format!("count the webhook registrations of {owner}"))?;
    let n: i64 = row
        .try_get(0)
        .map_err(|e| StoreError::backend("read a count", e))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Removes settled deliveries written before `before`, with their attempts.
pub(super) async fn purge(db: &impl GenericClient, before: u64) -> Result<usize, StoreError> {
    let row = db
        .query_one(
            "WITH d AS (DELETE FROM webhook_outbox WHERE state <> 'pending' AND created_at < $1 \
             RETURNING id), a AS (DELETE FROM webhook_attempts WHERE delivery IN (SELECT id FROM d)) \
             SELECT count(*) FROM d",
            &[&pg_int(before)],
        )
        .await
        .context("delete old webhook deliveries")?;
    let n: i64 = row
        .try_get(0)
        .map_err(|e| StoreError::backend("read a count", e))?;
    Ok(usize::try_from(n).unwrap_or(0))
}
