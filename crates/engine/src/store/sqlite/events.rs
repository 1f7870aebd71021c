//! The event log in SQLite ([`crate::events`]): `events` numbered by the one writer in commit
//! order (a position is `(0, seq)`), subscriptions, verified endpoints and deliveries. An event
//! and its deliveries are written by one statement pair in the writer's transaction: by the task
//! write (`rows::update_task`) for a task event, by [`EventStore::append_event`] for a tool's.
//!
//! Filters are matched in SQL, by the rule of [`crate::events::matches`]: each field the filter
//! names holds the same value (`json_each` over the filter, `json_extract` from the fields; the
//! server allows filter names without `"` or `\`, so the path quoting holds).

use async_trait::async_trait;
use rusqlite::{params, Connection, OptionalExtension, Row};
use serde_json::{Map, Value};

use super::rows::sql_int;
use super::{Context, SqliteStore};
use crate::events::{
    EventDelivery, EventDeliveryState, EventGap, EventPage, EventPosition, EventQuery,
    EventSubscription, EventsPurged, NewEvent, StoredEvent, Subscribed, SubscriptionPut,
    SubscriptionStart,
};
use crate::store::{EventStore, StoreError};
use crate::webhook::{DeliveryAttempt, DeliveryNext, DeliveryState};

const EVENT_COLUMNS: &str =
    "e.seq, e.id, e.name, e.owner, e.task_id, e.tool, e.fields, e.data, e.created_at, e.session";

const SUBSCRIPTION_COLUMNS: &str = "s.id, s.principal, s.name, s.arguments, s.task_id, s.tool, \
     s.filter, s.url, s.secret, s.previous_secret, s.previous_until, s.created_at, \
     s.refreshed_at, s.expires_at, s.from_major, s.from_minor, s.last_delivery_at, s.last_error, \
     s.failed_since";

/// `{fields}` holds each value the filter `{filter}` names (both JSON text): the same value and
/// the same kind (true is not 1; 1 is 1.0, as the other stores compare numbers).
macro_rules! filter_met {
    ($filter:literal, $fields:literal) => {
        concat!(
            "NOT EXISTS (SELECT 1 FROM json_each(",
            $filter,
            ") f WHERE json_extract(",
            $fields,
            ", '$.\"' || f.key || '\"') IS NOT f.value OR \
             replace(replace(COALESCE(json_type(",
            $fields,
            ", '$.\"' || f.key || '\"'), ''), 'integer', 'real'), 'false', 'true') IS NOT \
             replace(replace(f.type, 'integer', 'real'), 'false', 'true'))"
        )
    };
}

fn time(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn json_map(text: &str, what: &str) -> rusqlite::Result<Map<String, Value>> {
    serde_json::from_str(text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Text,
            format!("{what}: {e}").into(),
        )
    })
}

fn event_from(row: &Row<'_>, at: usize) -> rusqlite::Result<StoredEvent> {
    let fields: String = row.get(at + 6)?;
    Ok(StoredEvent {
        position: EventPosition {
            major: 0,
            minor: time(row.get(at)?),
        },
        event: NewEvent {
            id: row.get(at + 1)?,
            name: row.get(at + 2)?,
            owner: row.get(at + 3)?,
            task_id: row.get(at + 4)?,
            tool: row.get(at + 5)?,
            fields: json_map(&fields, "an event's fields")?,
            data: row.get(at + 7)?,
            created_at: time(row.get(at + 8)?),
            session: row.get(at + 9)?,
        },
    })
}

fn subscription_from(row: &Row<'_>, at: usize) -> rusqlite::Result<EventSubscription> {
    let filter: String = row.get(at + 6)?;
    let opt = |i: usize| -> rusqlite::Result<Option<u64>> {
        Ok(row.get::<_, Option<i64>>(at + i)?.map(time))
    };
    Ok(EventSubscription {
        id: row.get(at)?,
        principal: row.get(at + 1)?,
        name: row.get(at + 2)?,
        arguments: row.get(at + 3)?,
        task_id: row.get(at + 4)?,
        tool: row.get(at + 5)?,
        filter: json_map(&filter, "a subscription's filter")?,
        url: row.get(at + 7)?,
        secret: row.get(at + 8)?,
        previous_secret: row.get(at + 9)?,
        previous_until: opt(10)?,
        created_at: time(row.get(at + 11)?),
        refreshed_at: time(row.get(at + 12)?),
        expires_at: opt(13)?,
        from: EventPosition {
            major: time(row.get(at + 14)?),
            minor: time(row.get(at + 15)?),
        },
        last_delivery_at: opt(16)?,
        last_error: row.get(at + 17)?,
        failed_since: opt(18)?,
    })
}

/// Writes `e` to the log with a pending delivery for each live subscription it matches (the
/// rule of [`crate::events::matches`]); inside the writer's transaction.
pub(super) fn write_event(conn: &Connection, e: &NewEvent) -> Result<EventPosition, StoreError> {
    let fields = Value::Object(e.fields.clone()).to_string();
    conn.prepare_cached(
        "INSERT INTO events (id, name, owner, task_id, tool, fields, data, created_at, session) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )
    .and_then(|mut s| {
        s.execute(params![
            e.id,
            e.name,
            e.owner,
            e.task_id,
            e.tool,
            fields,
            e.data,
            sql_int(e.created_at),
            e.session
        ])
    })
    .with_context(|| format!("write the {} event {}", e.name, e.id))?;
    let seq = conn.last_insert_rowid();
    // The subscriptions to this task (found by the (name, task_id) index), then those to every
    // task or to none: a per-task subscription costs the other tasks' events nothing.
    for task_match in ["s.task_id = ?5", "s.task_id IS NULL AND ?5 IS ?5"] {
        conn.prepare_cached(&format!(
            concat!(
                "INSERT INTO event_deliveries (subscription, event_seq, state, attempts, next_at, \
                 created_at) SELECT s.id, ?1, 'pending', 0, ?2, ?2 FROM event_subscriptions s \
                 WHERE s.name = ?3 AND {} AND (?4 IS NULL OR s.principal = ?4) \
                 AND s.from_major = 0 AND s.from_minor < ?1 \
                 AND (s.expires_at IS NULL OR s.expires_at > ?2) \
                 AND (s.tool IS NULL OR s.tool IS ?6) AND ",
                filter_met!("s.filter", "?7")
            ),
            task_match
        ))
        .and_then(|mut s| {
            s.execute(params![
                seq,
                sql_int(e.created_at),
                e.name,
                e.owner,
                e.task_id,
                e.tool,
                fields
            ])
        })
        .with_context(|| format!("write the deliveries of event {}", e.id))?;
    }
    Ok(EventPosition {
        major: 0,
        minor: time(seq),
    })
}

fn horizon(conn: &Connection) -> Result<EventPosition, StoreError> {
    let seq: Option<i64> = conn
        .query_row(
            "SELECT seq FROM sqlite_sequence WHERE name = 'events'",
            [],
            |r| r.get(0),
        )
        .optional()
        .context("read the event log's last number")?;
    Ok(EventPosition {
        major: 0,
        minor: seq.map_or(0, time),
    })
}

fn put_subscription(
    conn: &Connection,
    s: &EventSubscription,
    start: SubscriptionStart,
    max: usize,
) -> Result<Subscribed, StoreError> {
    let stored: Option<(i64, i64)> = conn
        .query_row(
            "SELECT from_major, from_minor FROM event_subscriptions WHERE id = ?1",
            [&s.id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .with_context(|| format!("look up subscription {}", s.id))?;
    let from = match (start, stored) {
        (SubscriptionStart::After(p), _) => p,
        (SubscriptionStart::Kept, Some((major, minor))) => EventPosition {
            major: time(major),
            minor: time(minor),
        },
        _ => horizon(conn)?,
    };
    let filter = Value::Object(s.filter.clone()).to_string();
    let opt = |v: Option<u64>| v.map(sql_int);
    let put = if stored.is_some() {
        conn.execute(
            "UPDATE event_subscriptions SET principal = ?2, name = ?3, arguments = ?4, \
             task_id = ?5, tool = ?6, filter = ?7, url = ?8, secret = ?9, previous_secret = ?10, \
             previous_until = ?11, refreshed_at = ?12, expires_at = ?13, from_major = ?14, \
             from_minor = ?15 WHERE id = ?1",
            params![
                s.id,
                s.principal,
                s.name,
                s.arguments,
                s.task_id,
                s.tool,
                filter,
                s.url,
                s.secret,
                s.previous_secret,
                opt(s.previous_until),
                sql_int(s.refreshed_at),
                opt(s.expires_at),
                sql_int(from.major),
                sql_int(from.minor)
            ],
        )
        .with_context(|| format!("refresh subscription {}", s.id))?;
        SubscriptionPut::Refreshed
    } else {
        let live: i64 = conn
            .prepare_cached(&format!(
                "SELECT COUNT(*) FROM (SELECT 1 FROM event_subscriptions WHERE principal = ?1 \
                 AND (expires_at IS NULL OR expires_at > ?2) LIMIT {max})"
            ))
            .and_then(|mut st| {
                st.query_row(params![s.principal, sql_int(s.refreshed_at)], |r| r.get(0))
            })
            .with_context(|| format!("count the subscriptions of {}", s.principal))?;
        let live = usize::try_from(live).unwrap_or(0);
        if live >= max {
            return Err(StoreError::TooManySubscriptions { live, max });
        }
        conn.execute(
            "INSERT INTO event_subscriptions (id, principal, name, arguments, task_id, tool, \
             filter, url, secret, previous_secret, previous_until, created_at, refreshed_at, \
             expires_at, from_major, from_minor) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, \
             ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
            params![
                s.id,
                s.principal,
                s.name,
                s.arguments,
                s.task_id,
                s.tool,
                filter,
                s.url,
                s.secret,
                s.previous_secret,
                opt(s.previous_until),
                sql_int(s.created_at),
                sql_int(s.refreshed_at),
                opt(s.expires_at),
                sql_int(from.major),
                sql_int(from.minor)
            ],
        )
        .with_context(|| format!("store subscription {}", s.id))?;
        SubscriptionPut::New
    };
    let mut truncated = false;
    if let SubscriptionStart::After(p) = start {
        // The client says where it stands, and what it missed after that is replayed: its gap
        // is told by this answer, not an envelope.
        conn.prepare_cached("DELETE FROM event_gaps WHERE subscription = ?1")
            .and_then(|mut st| st.execute([&s.id]))
            .with_context(|| format!("forget the gap of subscription {}", s.id))?;
        let purged_through: i64 = conn
            .query_row("SELECT purged_through FROM event_log", [], |r| r.get(0))
            .context("read how far the event log was purged")?;
        truncated = p.major == 0 && sql_int(p.minor) < purged_through;
        // A replay: the events already in the log after `from` are delivered too.
        // One task's subscription reads that task's events only (the events_by_task index).
        let join = if s.task_id.is_some() {
            "e.task_id = s.task_id AND e.name = s.name"
        } else {
            "e.name = s.name"
        };
        conn.prepare_cached(&format!(
            concat!(
            "INSERT OR IGNORE INTO event_deliveries (subscription, event_seq, state, attempts, \
             next_at, created_at) SELECT s.id, e.seq, 'pending', 0, ?2, ?2 \
             FROM event_subscriptions s JOIN events e ON {join} \
             WHERE s.id = ?1 AND (e.owner IS NULL OR e.owner = s.principal) \
             AND s.from_major = 0 AND e.seq > s.from_minor \
             AND (s.expires_at IS NULL OR s.expires_at > e.created_at) \
             AND (s.task_id IS NULL OR s.task_id IS e.task_id) \
             AND (s.tool IS NULL OR s.tool IS e.tool) AND ",
            filter_met!("s.filter", "e.fields")
        ),
            join = join
        ))
        .and_then(|mut st| st.execute(params![s.id, sql_int(s.refreshed_at)]))
        .with_context(|| format!("replay the log to subscription {}", s.id))?;
        // Deliveries given up on (or gone) before are tried again: a replay is the way back to
        // what was abandoned.
        conn.prepare_cached(
            "UPDATE event_deliveries SET state = 'pending', attempts = 0, next_at = ?3, \
             lease_owner = NULL, lease_until = NULL WHERE subscription = ?1 AND state <> 'pending' \
             AND state <> 'delivered' AND event_seq > ?2",
        )
        .and_then(|mut st| st.execute(params![s.id, sql_int(from.minor), sql_int(s.refreshed_at)]))
        .with_context(|| format!("re-arm the abandoned deliveries of subscription {}", s.id))?;
    }
    Ok(Subscribed {
        put,
        from,
        truncated,
    })
}

fn claim(
    conn: &Connection,
    node: &str,
    now: u64,
    lease_until: u64,
    limit: usize,
) -> Result<Vec<EventDelivery>, StoreError> {
    let mut st = conn
        .prepare_cached(&format!(
            "SELECT {SUBSCRIPTION_COLUMNS}, {EVENT_COLUMNS}, d.attempts, d.created_at \
             FROM event_deliveries d JOIN event_subscriptions s ON s.id = d.subscription \
             JOIN events e ON e.seq = d.event_seq WHERE d.state = 'pending' AND d.next_at <= ?1 \
             AND (d.lease_owner IS NULL OR d.lease_owner = ?2 OR d.lease_until <= ?1) \
             ORDER BY d.next_at LIMIT ?3"
        ))
        .context("prepare the event delivery claim")?;
    let due: Vec<EventDelivery> = st
        .query_map(
            params![sql_int(now), node, i64::try_from(limit).unwrap_or(i64::MAX)],
            |row| {
                Ok(EventDelivery {
                    subscription: subscription_from(row, 0)?,
                    event: event_from(row, 19)?,
                    attempts: row.get(29)?,
                    created_at: time(row.get(30)?),
                })
            },
        )
        .and_then(|rows| rows.collect())
        .context("claim event deliveries")?;
    let mut lease = conn
        .prepare_cached(
            "UPDATE event_deliveries SET lease_owner = ?3, lease_until = ?4 \
             WHERE subscription = ?1 AND event_seq = ?2",
        )
        .context("prepare the event delivery lease")?;
    for d in &due {
        lease
            .execute(params![
                d.subscription.id,
                sql_int(d.event.position.minor),
                node,
                sql_int(lease_until)
            ])
            .context("lease an event delivery")?;
    }
    Ok(due)
}

#[allow(clippy::too_many_arguments)]
fn finish(
    conn: &Connection,
    subscription: &str,
    event_id: &str,
    node: &str,
    attempt: &DeliveryAttempt,
    next: DeliveryNext,
    failure: Option<&str>,
    keep_gap: bool,
) -> Result<bool, StoreError> {
    let (state, next_at, _) = next.settles(attempt.at);
    let n = conn
        .prepare_cached(
            "UPDATE event_deliveries SET state = ?4, next_at = COALESCE(?5, next_at), \
             attempts = attempts + 1, last_status = ?6, last_error = ?7, lease_owner = NULL, \
             lease_until = NULL WHERE subscription = ?1 \
             AND event_seq = (SELECT seq FROM events WHERE id = ?2) \
             AND state = 'pending' AND lease_owner = ?3",
        )
        .and_then(|mut s| {
            s.execute(params![
                subscription,
                event_id,
                node,
                state.as_str(),
                next_at.map(sql_int),
                attempt.status,
                failure
            ])
        })
        .with_context(|| format!("settle the delivery of {event_id} to {subscription}"))?;
    if n == 0 {
        return Ok(false);
    }
    if keep_gap && next == DeliveryNext::GiveUp {
        conn.prepare_cached(
            "INSERT INTO event_gaps (subscription, after_major, after_minor, next_at, attempts) \
             SELECT ?1, 0, seq, ?3, 0 FROM events WHERE id = ?2 ORDER BY seq DESC LIMIT 1 \
             ON CONFLICT (subscription) DO UPDATE SET after_major = excluded.after_major, \
             after_minor = excluded.after_minor WHERE (excluded.after_major, excluded.after_minor) \
             > (event_gaps.after_major, event_gaps.after_minor)",
        )
        .and_then(|mut s| s.execute(params![subscription, event_id, sql_int(attempt.at)]))
        .with_context(|| format!("keep the gap of subscription {subscription}"))?;
    }
    // How delivery went, kept on the subscription: a success, or a failure of a kind (a give-up
    // for another reason, such as an ended subscription, says nothing of the endpoint).
    let (sql, kind) = match (next, failure) {
        (DeliveryNext::Delivered, _) => (
            "UPDATE event_subscriptions SET last_delivery_at = ?2, last_error = NULL, \
             failed_since = NULL WHERE id = ?1 AND ?3 IS NULL",
            None,
        ),
        (_, Some(kind)) => (
            "UPDATE event_subscriptions SET last_error = ?3, \
             failed_since = COALESCE(failed_since, ?2) WHERE id = ?1",
            Some(kind),
        ),
        (_, None) => return Ok(true),
    };
    conn.prepare_cached(sql)
        .and_then(|mut s| s.execute(params![subscription, sql_int(attempt.at), kind]))
        .with_context(|| format!("keep how delivery went on subscription {subscription}"))?;
    Ok(true)
}

fn purge(conn: &Connection, now: u64, before: u64) -> Result<EventsPurged, StoreError> {
    let mut purged = EventsPurged::default();
    let now = sql_int(now);
    let before = sql_int(before);
    purged.deliveries += conn
        .execute(
            "DELETE FROM event_deliveries WHERE subscription IN (SELECT id FROM \
             event_subscriptions WHERE expires_at IS NOT NULL AND expires_at <= ?1)",
            [now],
        )
        .context("remove the deliveries of ended subscriptions")?;
    purged.subscriptions = conn
        .execute(
            "DELETE FROM event_subscriptions WHERE expires_at IS NOT NULL AND expires_at <= ?1",
            [now],
        )
        .context("remove ended subscriptions")?;
    conn.execute(
        "DELETE FROM event_gaps WHERE subscription NOT IN (SELECT id FROM event_subscriptions)",
        [],
    )
    .context("remove the gaps of ended subscriptions")?;
    conn.execute("DELETE FROM event_verifications WHERE until <= ?1", [now])
        .context("remove ended verifications")?;
    purged.deliveries += conn
        .execute(
            "DELETE FROM event_deliveries WHERE state <> 'pending' AND created_at < ?1",
            [before],
        )
        .context("remove settled event deliveries")?;
    let last: Option<i64> = conn
        .query_row(
            "SELECT MAX(seq) FROM events e WHERE created_at < ?1 AND NOT EXISTS \
             (SELECT 1 FROM event_deliveries d WHERE d.event_seq = e.seq AND d.state = 'pending')",
            [before],
            |r| r.get(0),
        )
        .context("find the last event to purge")?;
    purged.events = conn
        .execute(
            "DELETE FROM events WHERE created_at < ?1 AND NOT EXISTS (SELECT 1 FROM \
             event_deliveries d WHERE d.event_seq = events.seq AND d.state = 'pending')",
            [before],
        )
        .context("remove old events")?;
    if let Some(last) = last {
        conn.execute(
            "DELETE FROM event_deliveries WHERE event_seq NOT IN (SELECT seq FROM events)",
            [],
        )
        .context("remove the deliveries of removed events")?;
        conn.execute(
            "UPDATE event_log SET purged_through = MAX(purged_through, ?1)",
            [last],
        )
        .context("keep how far the event log was purged")?;
    }
    Ok(purged)
}

#[async_trait]
impl EventStore for SqliteStore {
    async fn append_event(&self, event: NewEvent) -> Result<EventPosition, StoreError> {
        self.write(move |tx| write_event(tx.conn()?, &event)).await
    }

    async fn read_events(&self, q: &EventQuery) -> Result<EventPage, StoreError> {
        let q = q.clone();
        self.read(move |conn| {
            let end = horizon(conn)?;
            let purged_through: i64 = conn
                .query_row("SELECT purged_through FROM event_log", [], |r| r.get(0))
                .context("read how far the event log was purged")?;
            // A position of another store's order is past every one of this store's.
            let after = if q.after.major > 0 {
                i64::MAX
            } else {
                sql_int(q.after.minor)
            };
            let filter = Value::Object(q.filter.clone()).to_string();
            let limit = i64::try_from(q.limit).unwrap_or(i64::MAX);
            let mut st = conn
                .prepare_cached(&format!(
                    concat!(
                        "SELECT {} FROM events e WHERE e.name = ?1 AND e.seq > ?2 \
                         AND (e.owner IS NULL OR e.owner = ?3) \
                         AND (?4 IS NULL OR e.task_id IS ?4) AND (?5 IS NULL OR e.tool IS ?5) \
                         AND (?8 IS NULL OR e.session IS ?8) AND ",
                        filter_met!("?6", "e.fields"),
                        " ORDER BY e.seq LIMIT ?7"
                    ),
                    EVENT_COLUMNS
                ))
                .context("prepare the event read")?;
            let mut events: Vec<StoredEvent> = st
                .query_map(
                    params![
                        q.name,
                        after,
                        q.principal,
                        q.task_id,
                        q.tool,
                        filter,
                        limit + 1,
                        q.session
                    ],
                    |row| event_from(row, 0),
                )
                .and_then(|rows| rows.collect())
                .with_context(|| format!("read the {} events", q.name))?;
            let more = events.len() > q.limit;
            events.truncate(q.limit);
            let next = match events.last() {
                Some(e) if more => e.position,
                // The end was read before the events: one committed between is past it.
                Some(e) => end.max(q.after).max(e.position),
                None => end.max(q.after),
            };
            Ok(EventPage {
                events,
                next,
                more,
                truncated: after < purged_through,
            })
        })
        .await
    }

    async fn event_horizon(&self) -> Result<EventPosition, StoreError> {
        self.read(horizon).await
    }

    async fn put_subscription(
        &self,
        sub: &EventSubscription,
        start: SubscriptionStart,
        max: usize,
    ) -> Result<Subscribed, StoreError> {
        let sub = sub.clone();
        self.write(move |tx| put_subscription(tx.conn()?, &sub, start, max))
            .await
    }

    async fn fan_out_events(&self, _limit: usize) -> Result<usize, StoreError> {
        // Deliveries are written with each event (`write_event`), by the one writer.
        Ok(0)
    }

    async fn get_subscription(&self, id: &str) -> Result<Option<EventSubscription>, StoreError> {
        let id = id.to_string();
        self.read(move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {SUBSCRIPTION_COLUMNS} FROM event_subscriptions s WHERE s.id = ?1"
            ))
            .and_then(|mut st| st.query_row([&id], |r| subscription_from(r, 0)).optional())
            .with_context(|| format!("read subscription {id}"))
        })
        .await
    }

    async fn delete_subscription(&self, id: &str) -> Result<bool, StoreError> {
        let id = id.to_string();
        self.write(move |tx| {
            let conn = tx.conn()?;
            conn.execute(
                "DELETE FROM event_deliveries WHERE subscription = ?1",
                [&id],
            )
            .with_context(|| format!("remove the deliveries of subscription {id}"))?;
            conn.execute("DELETE FROM event_gaps WHERE subscription = ?1", [&id])
                .with_context(|| format!("remove the gap of subscription {id}"))?;
            let n = conn
                .execute("DELETE FROM event_subscriptions WHERE id = ?1", [&id])
                .with_context(|| format!("remove subscription {id}"))?;
            Ok(n > 0)
        })
        .await
    }

    async fn subscriptions(
        &self,
        principal: Option<&str>,
        limit: usize,
    ) -> Result<Vec<EventSubscription>, StoreError> {
        let principal = principal.map(str::to_string);
        self.read(move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {SUBSCRIPTION_COLUMNS} FROM event_subscriptions s \
                 WHERE ?1 IS NULL OR s.principal = ?1 ORDER BY s.created_at, s.id LIMIT ?2"
            ))
            .and_then(|mut st| {
                st.query_map(
                    params![principal, i64::try_from(limit).unwrap_or(i64::MAX)],
                    |r| subscription_from(r, 0),
                )
                .and_then(|rows| rows.collect())
            })
            .context("list subscriptions")
        })
        .await
    }

    async fn put_verification(
        &self,
        principal: &str,
        url: &str,
        until: u64,
    ) -> Result<(), StoreError> {
        let (principal, url) = (principal.to_string(), url.to_string());
        self.write(move |tx| {
            tx.conn()?
                .execute(
                    "INSERT OR REPLACE INTO event_verifications (principal, url, until) \
                     VALUES (?1, ?2, ?3)",
                    params![principal, url, sql_int(until)],
                )
                .context("keep an endpoint's verification")?;
            Ok(())
        })
        .await
    }

    async fn verification(&self, principal: &str, url: &str) -> Result<Option<u64>, StoreError> {
        let (principal, url) = (principal.to_string(), url.to_string());
        self.read(move |conn| {
            conn.query_row(
                "SELECT until FROM event_verifications WHERE principal = ?1 AND url = ?2",
                params![principal, url],
                |r| r.get::<_, i64>(0),
            )
            .optional()
            .map(|v| v.map(time))
            .context("read an endpoint's verification")
        })
        .await
    }

    async fn claim_event_deliveries(
        &self,
        node: &str,
        now: u64,
        lease_until: u64,
        limit: usize,
    ) -> Result<Vec<EventDelivery>, StoreError> {
        let node = node.to_string();
        let asked = node.clone();
        // A read first: a server polling with nothing due queues no write (and no commit).
        let any: bool = self
            .read(move |conn| {
                conn.prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM event_deliveries WHERE state = 'pending' \
                     AND next_at <= ?1 AND (lease_owner IS NULL OR lease_owner = ?2 \
                     OR lease_until <= ?1))",
                )
                .and_then(|mut s| s.query_row(params![sql_int(now), asked], |r| r.get(0)))
                .context("look for due event deliveries")
            })
            .await?;
        if !any {
            return Ok(Vec::new());
        }
        self.write(move |tx| claim(tx.conn()?, &node, now, lease_until, limit))
            .await
    }

    async fn finish_event_delivery(
        &self,
        subscription: &str,
        event_id: &str,
        node: &str,
        attempt: &DeliveryAttempt,
        next: DeliveryNext,
        failure: Option<&str>,
        keep_gap: bool,
    ) -> Result<bool, StoreError> {
        let (subscription, event_id, node) = (
            subscription.to_string(),
            event_id.to_string(),
            node.to_string(),
        );
        let (attempt, failure) = (attempt.clone(), failure.map(str::to_string));
        self.write(move |tx| {
            finish(
                tx.conn()?,
                &subscription,
                &event_id,
                &node,
                &attempt,
                next,
                failure.as_deref(),
                keep_gap,
            )
        })
        .await
    }

    async fn event_deliveries(
        &self,
        subscription: &str,
        limit: usize,
    ) -> Result<Vec<EventDeliveryState>, StoreError> {
        let subscription = subscription.to_string();
        self.read(move |conn| {
            conn.prepare_cached(
                "SELECT d.subscription, COALESCE(e.id, ''), COALESCE(e.name, ''), d.state, \
                 d.attempts, d.next_at, d.created_at, d.last_status, d.last_error \
                 FROM event_deliveries d LEFT JOIN events e ON e.seq = d.event_seq \
                 WHERE d.subscription = ?1 ORDER BY d.event_seq DESC LIMIT ?2",
            )
            .and_then(|mut st| {
                st.query_map(
                    params![subscription, i64::try_from(limit).unwrap_or(i64::MAX)],
                    |row| {
                        let state: String = row.get(3)?;
                        Ok(EventDeliveryState {
                            subscription: row.get(0)?,
                            event_id: row.get(1)?,
                            name: row.get(2)?,
                            state: DeliveryState::parse(&state).unwrap_or(DeliveryState::Failed),
                            attempts: row.get(4)?,
                            next_at: time(row.get(5)?),
                            created_at: time(row.get(6)?),
                            last_status: row.get(7)?,
                            last_error: row.get(8)?,
                        })
                    },
                )
                .and_then(|rows| rows.collect())
            })
            .with_context(|| format!("list the deliveries of subscription {subscription}"))
        })
        .await
    }

    async fn release_event_deliveries(&self, node: &str) -> Result<usize, StoreError> {
        let node = node.to_string();
        self.write(move |tx| {
            tx.conn()?
                .execute(
                    "UPDATE event_deliveries SET lease_owner = NULL, lease_until = NULL \
                     WHERE state = 'pending' AND lease_owner = ?1",
                    [&node],
                )
                .context("let go of event deliveries")
        })
        .await
    }

    async fn due_event_gaps(&self, now: u64, limit: usize) -> Result<Vec<EventGap>, StoreError> {
        self.read(move |conn| {
            // The cursor: the later of the gap and the latest event delivered (positions are
            // `(0, seq)` here).
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT {SUBSCRIPTION_COLUMNS}, g.after_minor, MAX(g.after_minor, \
                     COALESCE((SELECT MAX(d.event_seq) FROM event_deliveries d \
                     WHERE d.subscription = g.subscription AND d.state = 'delivered'), 0)), \
                     g.attempts FROM event_gaps g JOIN event_subscriptions s ON s.id = g.subscription \
                     WHERE g.next_at <= ?1 AND (s.expires_at IS NULL OR s.expires_at > ?1) \
                     ORDER BY g.next_at, g.subscription LIMIT ?2"
                ))
                .context("read the event gaps due")?;
            let rows = stmt
                .query_map(params![sql_int(now), sql_int(limit as u64)], |r| {
                    Ok(EventGap {
                        subscription: subscription_from(r, 0)?,
                        missed: EventPosition {
                            major: 0,
                            minor: time(r.get(19)?),
                        },
                        cursor: EventPosition {
                            major: 0,
                            minor: time(r.get(20)?),
                        },
                        attempts: r.get(21)?,
                    })
                })
                .context("read the event gaps due")?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
                .context("read an event gap")
        })
        .await
    }

    async fn claim_event_gap(
        &self,
        subscription: &str,
        now: u64,
        retry_at: u64,
    ) -> Result<bool, StoreError> {
        let id = subscription.to_string();
        self.write(move |tx| {
            let n = tx
                .conn()?
                .execute(
                    "UPDATE event_gaps SET next_at = ?3, attempts = attempts + 1 \
                     WHERE subscription = ?1 AND next_at <= ?2",
                    params![id, sql_int(now), sql_int(retry_at)],
                )
                .with_context(|| format!("claim the gap of subscription {id}"))?;
            Ok(n > 0)
        })
        .await
    }

    async fn forget_event_gap(
        &self,
        subscription: &str,
        missed: EventPosition,
    ) -> Result<bool, StoreError> {
        let id = subscription.to_string();
        self.write(move |tx| {
            let n = tx
                .conn()?
                .execute(
                    "DELETE FROM event_gaps WHERE subscription = ?1 AND after_major = ?2 \
                     AND after_minor = ?3",
                    params![id, sql_int(missed.major), sql_int(missed.minor)],
                )
                .with_context(|| format!("forget the gap of subscription {id}"))?;
            Ok(n > 0)
        })
        .await
    }

    async fn purge_events(&self, now: u64, before: u64) -> Result<EventsPurged, StoreError> {
        self.write(move |tx| purge(tx.conn()?, now, before)).await
    }
}
