//! The event log in PostgreSQL ([`crate::events`]).
//!
//! Sequence numbers are handed out in the order transactions ask, not the order they commit, so a
//! reader that went on from the highest number it saw could skip an event committed later with a
//! lower one. An event's position is therefore (the id of the transaction that wrote it, its
//! number), and readers read only below the oldest transaction still running
//! (`pg_snapshot_xmin`): every transaction there is over, and every later event is written by a
//! later transaction, so a position once passed never gains an event before it.
//!
//! Deliveries are written by [`EventStore::fan_out_events`], not with the event: a subscription
//! stored while an event's transaction runs would miss it. Fan-out goes through the log in that
//! same order from a cursor kept in `event_log`, one replica at a time (an advisory lock tried,
//! [`FAN_OUT_RUNNER_LOCK`]). It then waits for [`FAN_OUT_LOCK`] alone, which a subscription's
//! put with a replay holds shared: a replay and a fan-out never overlap, so each sees the other's
//! work (the fan-out the committed subscription, the replay the events fanned out before it),
//! while replays go on side by side (they were one at a time, which halved subscribes per second
//! under load), and a waiting fan-out is not starved by them (new shared holders queue behind it).

use async_trait::async_trait;
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use super::rows::pg_int;
use super::{Context, PostgresStore};
use crate::events::{
    EventDelivery, EventDeliveryState, EventGap, EventPage, EventPosition, EventQuery,
    EventSubscription, EventsPurged, NewEvent, StoredEvent, Subscribed, SubscriptionPut,
    SubscriptionStart,
};
use crate::store::{EventStore, StoreError};
use crate::webhook::{DeliveryAttempt, DeliveryNext, DeliveryState};

/// The advisory lock fan-out holds alone and subscription puts with a replay hold shared
/// ("mcpevent" in ASCII), seeding a hash of the schema's name: deployments in other schemas of
/// the database take their own.
const FAN_OUT_LOCK: i64 = 0x6d63_7065_7665_6e74;
/// The advisory lock a fan-out tries first, so that one replica at a time fans out and the others
/// do not queue for [`FAN_OUT_LOCK`] to find the work done ("mcpfanot").
const FAN_OUT_RUNNER_LOCK: i64 = 0x6d63_7066_616e_6f74;

const EVENT_COLUMNS: &str = "e.seq, e.xid::text::bigint, e.id, e.name, e.owner, e.task_id, \
     e.tool, e.fields::text, e.data, e.created_at, e.session";

const SUBSCRIPTION_COLUMNS: &str = "s.id, s.principal, s.name, s.arguments, s.task_id, s.tool, \
     s.filter::text, s.url, s.secret, s.previous_secret, s.previous_until, s.created_at, \
     s.refreshed_at, s.expires_at, s.from_major, s.from_minor, s.last_delivery_at, \
     s.last_error, s.failed_since";

/// The position (as two BIGINTs `$a`, `$b`) as an `(xid, seq)` row to compare with.
macro_rules! position_row {
    ($a:literal, $b:literal) => {
        concat!("(", $a, "::BIGINT::TEXT::xid8, ", $b, "::BIGINT)")
    };
}

fn time(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    i: usize,
    what: &str,
) -> Result<T, StoreError> {
    row.try_get(i)
        .map_err(|e| StoreError::backend(format!("read {what} from a row"), e))
}

fn map_of(
    text: &str,
    what: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::backend(format!("read {what}"), e))
}

fn event_from(row: &Row, at: usize) -> Result<StoredEvent, StoreError> {
    let what = "an event";
    let fields: String = get(row, at + 7, what)?;
    Ok(StoredEvent {
        position: EventPosition {
            major: time(get(row, at + 1, what)?),
            minor: time(get(row, at, what)?),
        },
        event: NewEvent {
            id: get(row, at + 2, what)?,
            name: get(row, at + 3, what)?,
            owner: get(row, at + 4, what)?,
            task_id: get(row, at + 5, what)?,
            tool: get(row, at + 6, what)?,
            fields: map_of(&fields, "an event's fields")?,
            data: get(row, at + 8, what)?,
            created_at: time(get(row, at + 9, what)?),
            session: get(row, at + 10, what)?,
        },
    })
}

fn subscription_from(row: &Row, at: usize) -> Result<EventSubscription, StoreError> {
    let what = "a subscription";
    let opt = |i: usize| -> Result<Option<u64>, StoreError> {
        Ok(get::<Option<i64>>(row, at + i, what)?.map(time))
    };
    let filter: String = get(row, at + 6, what)?;
    Ok(EventSubscription {
        id: get(row, at, what)?,
        principal: get(row, at + 1, what)?,
        name: get(row, at + 2, what)?,
        arguments: get(row, at + 3, what)?,
        task_id: get(row, at + 4, what)?,
        tool: get(row, at + 5, what)?,
        filter: map_of(&filter, "a subscription's filter")?,
        url: get(row, at + 7, what)?,
        secret: get(row, at + 8, what)?,
        previous_secret: get(row, at + 9, what)?,
        previous_until: opt(10)?,
        created_at: time(get(row, at + 11, what)?),
        refreshed_at: time(get(row, at + 12, what)?),
        expires_at: opt(13)?,
        from: EventPosition {
            major: time(get(row, at + 14, what)?),
            minor: time(get(row, at + 15, what)?),
        },
        last_delivery_at: opt(16)?,
        last_error: get(row, at + 17, what)?,
        failed_since: opt(18)?,
    })
}

/// The oldest transaction still running: every event below it is committed or never will be.
async fn bound(db: &impl GenericClient) -> Result<i64, StoreError> {
    let row = db
        .query_one(
            "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint",
            &[],
        )
        .await
        .context("read the oldest running transaction")?;
    get(&row, 0, "the oldest running transaction")
}

/// The position every event a reader can see now is at or before, and every later one after.
fn horizon_at(bound: i64) -> EventPosition {
    EventPosition {
        major: time(bound.saturating_sub(1)),
        minor: time(i64::MAX),
    }
}

fn filter_text(filter: &serde_json::Map<String, serde_json::Value>) -> String {
    serde_json::Value::Object(filter.clone()).to_string()
}

#[async_trait]
impl EventStore for PostgresStore {
    async fn append_event(&self, event: NewEvent) -> Result<EventPosition, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "INSERT INTO events (id, name, owner, task_id, tool, fields, data, created_at, \
                 session) VALUES ($1, $2, $3, $4, $5, $6::TEXT::jsonb, $7, $8, $9) \
                 RETURNING seq, xid::text::bigint",
                &[
                    &event.id,
                    &event.name,
                    &event.owner,
                    &event.task_id,
                    &event.tool,
                    &filter_text(&event.fields),
                    &event.data,
                    &pg_int(event.created_at),
                    &event.session,
                ],
            )
            .await
            .with_context(|| format!("write the {} event {}", event.name, event.id))?;
        let what = "a new event's position";
        Ok(EventPosition {
            major: time(get(&row, 1, what)?),
            minor: time(get(&row, 0, what)?),
        })
    }

    async fn read_events(&self, q: &EventQuery) -> Result<EventPage, StoreError> {
        let client = self.client().await?;
        let below = bound(&client).await?;
        let purged = client
            .query_one("SELECT purged_major, purged_minor FROM event_log", &[])
            .await
            .context("read how far the event log was purged")?;
        let purged = EventPosition {
            major: time(get(&purged, 0, "the purge mark")?),
            minor: time(get(&purged, 1, "the purge mark")?),
        };
        let limit = i64::try_from(q.limit).unwrap_or(i64::MAX);
        let rows = client
            .query(
                &format!(
                    "SELECT {EVENT_COLUMNS} FROM events e WHERE e.name = $1 \
                     AND (e.xid, e.seq) > {} AND e.xid < $4::BIGINT::TEXT::xid8 \
                     AND (e.owner IS NULL OR e.owner = $5) \
                     AND ($6::TEXT IS NULL OR e.task_id = $6) AND ($7::TEXT IS NULL OR e.tool = $7) \
                     AND e.fields @> $8::TEXT::jsonb AND ($10::TEXT IS NULL OR e.session = $10) \
                     ORDER BY e.xid, e.seq LIMIT $9",
                    position_row!("$2", "$3")
                ),
                &[
                    &q.name,
                    &pg_int(q.after.major),
                    &pg_int(q.after.minor),
                    &below,
                    &q.principal,
                    &q.task_id,
                    &q.tool,
                    &filter_text(&q.filter),
                    &(limit.saturating_add(1)),
                    &q.session,
                ],
            )
            .await
            .with_context(|| format!("read the {} events", q.name))?;
        let mut events = rows
            .iter()
            .map(|r| event_from(r, 0))
            .collect::<Result<Vec<_>, _>>()?;
        let more = events.len() > q.limit;
        events.truncate(q.limit);
        let next = match events.last() {
            Some(e) if more => e.position,
            _ => horizon_at(below).max(q.after),
        };
        Ok(EventPage {
            events,
            next,
            more,
            truncated: q.after < purged,
        })
    }

    async fn event_horizon(&self) -> Result<EventPosition, StoreError> {
        let client = self.client().await?;
        Ok(horizon_at(bound(&client).await?))
    }

    async fn put_subscription(
        &self,
        sub: &EventSubscription,
        start: SubscriptionStart,
        max: usize,
    ) -> Result<Subscribed, StoreError> {
        let mut client = self.client().await?;
        let tx = client
            .transaction()
            .await
            .context("begin a subscription's put")?;
        // A replay and the fan-out must see each other (one's events are the other's); a start
        // from now needs no lock: fan-out reaches events after this transaction only once it
        // ended, and then sees the subscription.
        if matches!(start, SubscriptionStart::After(_)) {
            tx.execute(
                "SELECT pg_advisory_xact_lock_shared(hashtextextended(current_schema(), $1))",
                &[&FAN_OUT_LOCK],
            )
            .await
            .context("take the event fan-out lock")?;
        }
        // Locked: two puts of one id, or of one principal's, are one after the other.
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
            &[&sub.principal],
        )
        .await
        .context("take the principal's subscription lock")?;
        let stored = tx
            .query_opt(
                "SELECT from_major, from_minor FROM event_subscriptions WHERE id = $1",
                &[&sub.id],
            )
            .await
            .with_context(|| format!("look up subscription {}", sub.id))?;
        let stored = match stored {
            Some(r) => Some(EventPosition {
                major: time(get(&r, 0, "a subscription's start")?),
                minor: time(get(&r, 1, "a subscription's start")?),
            }),
            None => None,
        };
        let from = match (start, stored) {
            (SubscriptionStart::After(p), _) => p,
            (SubscriptionStart::Kept, Some(p)) => p,
            _ => {
                // After every event of transactions before this one: those of transactions
                // still running, which cannot see this subscription, are not its.
                let row = tx
                    .query_one("SELECT pg_current_xact_id()::text::bigint", &[])
                    .await
                    .context("read the subscription's transaction")?;
                EventPosition {
                    major: time(get(&row, 0, "the subscription's transaction")?),
                    minor: 0,
                }
            }
        };
        if stored.is_none() {
            let max_i = i64::try_from(max).unwrap_or(i64::MAX);
            let row = tx
                .query_one(
                    "SELECT COUNT(*) FROM (SELECT 1 FROM event_subscriptions WHERE principal = $1 \
                     AND (expires_at IS NULL OR expires_at > $2) LIMIT $3) l",
                    &[&sub.principal, &pg_int(sub.refreshed_at), &max_i],
                )
                .await
                .with_context(|| format!("count the subscriptions of {}", sub.principal))?;
            let live = usize::try_from(get::<i64>(&row, 0, "a count")?).unwrap_or(0);
            if live >= max {
                return Err(StoreError::TooManySubscriptions { live, max });
            }
        }
        let opt = |v: Option<u64>| v.map(pg_int);
        tx.execute(
            "INSERT INTO event_subscriptions (id, principal, name, arguments, task_id, tool, \
             filter, url, secret, previous_secret, previous_until, created_at, refreshed_at, \
             expires_at, from_major, from_minor) VALUES ($1, $2, $3, $4, $5, $6, $7::TEXT::jsonb, \
             $8, $9, $10, $11, $12, $13, $14, $15, $16) ON CONFLICT (id) DO UPDATE SET \
             principal = EXCLUDED.principal, name = EXCLUDED.name, arguments = EXCLUDED.arguments, \
             task_id = EXCLUDED.task_id, tool = EXCLUDED.tool, filter = EXCLUDED.filter, \
             url = EXCLUDED.url, secret = EXCLUDED.secret, \
             previous_secret = EXCLUDED.previous_secret, previous_until = EXCLUDED.previous_until, \
             refreshed_at = EXCLUDED.refreshed_at, expires_at = EXCLUDED.expires_at, \
             from_major = EXCLUDED.from_major, from_minor = EXCLUDED.from_minor",
            &[
                &sub.id,
                &sub.principal,
                &sub.name,
                &sub.arguments,
                &sub.task_id,
                &sub.tool,
                &filter_text(&sub.filter),
                &sub.url,
                &sub.secret,
                &sub.previous_secret,
                &opt(sub.previous_until),
                &pg_int(sub.created_at),
                &pg_int(sub.refreshed_at),
                &opt(sub.expires_at),
                &pg_int(from.major),
                &pg_int(from.minor),
            ],
        )
        .await
        .with_context(|| format!("store subscription {}", sub.id))?;
        let mut truncated = false;
        if let SubscriptionStart::After(p) = start {
            // The client says where it stands, and what it missed after that is replayed: its
            // gap is told by this answer, not an envelope.
            tx.execute("DELETE FROM event_gaps WHERE subscription = $1", &[&sub.id])
                .await
                .with_context(|| format!("forget the gap of subscription {}", sub.id))?;
            let purged = tx
                .query_one("SELECT purged_major, purged_minor FROM event_log", &[])
                .await
                .context("read how far the event log was purged")?;
            let purged = EventPosition {
                major: time(get(&purged, 0, "the purge mark")?),
                minor: time(get(&purged, 1, "the purge mark")?),
            };
            truncated = p < purged;
            // A replay of what the log holds after `p`: what fan-out went through already
            // (later events are fanned out to this subscription by the next fan-out).
            tx.execute(
                &format!(
                    "INSERT INTO event_deliveries (subscription, event_seq, state, attempts, \
                     next_at, created_at) SELECT s.id, e.seq, 'pending', 0, $2, $2 \
                     FROM event_subscriptions s JOIN events e ON {} \
                     WHERE s.id = $1 AND (e.owner IS NULL OR e.owner = s.principal) \
                     AND (e.xid, e.seq) > {} \
                     AND (s.expires_at IS NULL OR s.expires_at > e.created_at) \
                     AND (s.task_id IS NULL OR s.task_id = e.task_id) \
                     AND (s.tool IS NULL OR s.tool = e.tool) AND e.fields @> s.filter \
                     ON CONFLICT (subscription, event_seq) DO UPDATE SET state = 'pending', \
                     attempts = 0, next_at = EXCLUDED.next_at, lease_owner = NULL, \
                     lease_until = NULL WHERE event_deliveries.state NOT IN ('delivered', 'pending')",
                    // One task's subscription reads that task's events only (events_by_task).
                    if sub.task_id.is_some() {
                        "e.task_id = s.task_id AND e.name = s.name"
                    } else {
                        "e.name = s.name"
                    },
                    position_row!("$3", "$4")
                ),
                &[
                    &sub.id,
                    &pg_int(sub.refreshed_at),
                    &pg_int(p.major),
                    &pg_int(p.minor),
                ],
            )
            .await
            .with_context(|| format!("replay the log to subscription {}", sub.id))?;
        }
        tx.commit().await.context("commit a subscription's put")?;
        Ok(Subscribed {
            put: if stored.is_some() {
                SubscriptionPut::Refreshed
            } else {
                SubscriptionPut::New
            },
            from,
            truncated,
        })
    }

    async fn fan_out_events(&self, limit: usize) -> Result<usize, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.context("begin a fan-out")?;
        // Only one replica at a time; the others find the work done.
        let locked = tx
            .query_one(
                "SELECT pg_try_advisory_xact_lock(hashtextextended(current_schema(), $1))",
                &[&FAN_OUT_RUNNER_LOCK],
            )
            .await
            .context("take the event fan-out's runner lock")?;
        if !get::<bool>(&locked, 0, "the fan-out's runner lock")? {
            return Ok(0);
        }
        // The replays in progress end first; those asked for later wait for this.
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(current_schema(), $1))",
            &[&FAN_OUT_LOCK],
        )
        .await
        .context("take the event fan-out lock")?;
        let cursor = tx
            .query_one("SELECT fanned_major, fanned_minor FROM event_log", &[])
            .await
            .context("read the fan-out cursor")?;
        let (major, minor): (i64, i64) = (
            get(&cursor, 0, "the fan-out cursor")?,
            get(&cursor, 1, "the fan-out cursor")?,
        );
        let below = bound(&tx).await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let last = tx
            .query_opt(
                &format!(
                    "WITH batch AS (SELECT e.seq, e.xid, e.name, e.owner, e.task_id, \
                     e.tool AS b_tool, e.fields, e.created_at FROM events e WHERE (e.xid, e.seq) > {} \
                     AND e.xid < $3::BIGINT::TEXT::xid8 ORDER BY e.xid, e.seq LIMIT $4), \
                     m AS (SELECT s.id, s.principal, s.from_major, s.from_minor, s.expires_at, \
                     s.tool, s.filter, b.* FROM batch b JOIN event_subscriptions s \
                     ON s.name = b.name AND s.task_id = b.task_id \
                     UNION ALL SELECT s.id, s.principal, s.from_major, s.from_minor, \
                     s.expires_at, s.tool, s.filter, b.* FROM batch b JOIN event_subscriptions s \
                     ON s.name = b.name AND s.task_id IS NULL), \
                     ins AS (INSERT INTO event_deliveries (subscription, event_seq, state, \
                     attempts, next_at, created_at) SELECT m.id, m.seq, 'pending', 0, \
                     m.created_at, m.created_at FROM m WHERE (m.owner IS NULL OR m.principal = m.owner) \
                     AND (m.from_major, m.from_minor) < (m.xid::text::bigint, m.seq) \
                     AND (m.expires_at IS NULL OR m.expires_at > m.created_at) \
                     AND (m.tool IS NULL OR m.tool = m.b_tool) AND m.fields @> m.filter \
                     ON CONFLICT DO NOTHING) \
                     SELECT b.xid::text::bigint, b.seq, (SELECT COUNT(*) FROM batch) FROM batch b \
                     ORDER BY b.xid DESC, b.seq DESC LIMIT 1",
                    position_row!("$1", "$2")
                ),
                &[&major, &minor, &below, &limit],
            )
            .await
            .context("fan events out to their subscriptions")?;
        let Some(last) = last else {
            return Ok(0);
        };
        let what = "the fan-out's end";
        let (major, minor, n): (i64, i64, i64) = (
            get(&last, 0, what)?,
            get(&last, 1, what)?,
            get(&last, 2, what)?,
        );
        tx.execute(
            "UPDATE event_log SET fanned_major = $1, fanned_minor = $2",
            &[&major, &minor],
        )
        .await
        .context("move the fan-out cursor")?;
        tx.commit().await.context("commit a fan-out")?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    async fn get_subscription(&self, id: &str) -> Result<Option<EventSubscription>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!(
                    "SELECT {SUBSCRIPTION_COLUMNS} FROM event_subscriptions s WHERE s.id = $1"
                ),
                &[&id],
            )
            .await
            .with_context(|| format!("read subscription {id}"))?;
        row.map(|r| subscription_from(&r, 0)).transpose()
    }

    async fn delete_subscription(&self, id: &str) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "WITH d AS (DELETE FROM event_deliveries WHERE subscription = $1), \
                 g AS (DELETE FROM event_gaps WHERE subscription = $1), \
                 s AS (DELETE FROM event_subscriptions WHERE id = $1 RETURNING 1) \
                 SELECT COUNT(*) FROM s",
                &[&id],
            )
            .await
            .with_context(|| format!("remove subscription {id}"))?;
        Ok(get::<i64>(&row, 0, "a count")? > 0)
    }

    async fn subscriptions(
        &self,
        principal: Option<&str>,
        limit: usize,
    ) -> Result<Vec<EventSubscription>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT {SUBSCRIPTION_COLUMNS} FROM event_subscriptions s \
                     WHERE $1::TEXT IS NULL OR s.principal = $1 ORDER BY s.created_at, s.id LIMIT $2"
                ),
                &[&principal, &i64::try_from(limit).unwrap_or(i64::MAX)],
            )
            .await
            .context("list subscriptions")?;
        rows.iter().map(|r| subscription_from(r, 0)).collect()
    }

    async fn put_verification(
        &self,
        principal: &str,
        url: &str,
        until: u64,
    ) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO event_verifications (principal, url, until) VALUES ($1, $2, $3) \
                 ON CONFLICT (principal, url) DO UPDATE SET until = EXCLUDED.until",
                &[&principal, &url, &pg_int(until)],
            )
            .await
            .context("keep an endpoint's verification")?;
        Ok(())
    }

    async fn verification(&self, principal: &str, url: &str) -> Result<Option<u64>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT until FROM event_verifications WHERE principal = $1 AND url = $2",
                &[&principal, &url],
            )
            .await
            .context("read an endpoint's verification")?;
        row.map(|r| get::<i64>(&r, 0, "a verification").map(time))
            .transpose()
    }

    async fn claim_event_deliveries(
        &self,
        node: &str,
        now: u64,
        lease_until: u64,
        limit: usize,
    ) -> Result<Vec<EventDelivery>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "WITH due AS (SELECT subscription, event_seq FROM event_deliveries \
                     WHERE state = 'pending' AND next_at <= $1 AND (lease_owner IS NULL \
                     OR lease_owner = $2 OR lease_until <= $1) ORDER BY next_at LIMIT $4 \
                     FOR UPDATE SKIP LOCKED), \
                     d AS (UPDATE event_deliveries w SET lease_owner = $2, lease_until = $3 \
                     FROM due WHERE w.subscription = due.subscription \
                     AND w.event_seq = due.event_seq RETURNING w.subscription, w.event_seq, \
                     w.attempts, w.created_at, w.next_at) \
                     SELECT {SUBSCRIPTION_COLUMNS}, {EVENT_COLUMNS}, d.attempts, d.created_at \
                     FROM d JOIN event_subscriptions s ON s.id = d.subscription \
                     JOIN events e ON e.seq = d.event_seq ORDER BY d.next_at"
                ),
                &[
                    &pg_int(now),
                    &node,
                    &pg_int(lease_until),
                    &i64::try_from(limit).unwrap_or(i64::MAX),
                ],
            )
            .await
            .context("claim event deliveries")?;
        rows.iter()
            .map(|r| {
                Ok(EventDelivery {
                    subscription: subscription_from(r, 0)?,
                    event: event_from(r, 19)?,
                    attempts: u32::try_from(get::<i32>(r, 30, "a delivery")?).unwrap_or(0),
                    created_at: time(get(r, 31, "a delivery")?),
                })
            })
            .collect()
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
        let (state, next_at, _) = next.settles(attempt.at);
        let gap = keep_gap && next == DeliveryNext::GiveUp;
        let client = self.client().await?;
        let status = attempt.status.map(i32::from);
        let row = client
            .query_one(
                "WITH d AS (UPDATE event_deliveries SET state = $4, \
                 next_at = COALESCE($5, next_at), attempts = attempts + 1, last_status = $6, \
                 last_error = $7, lease_owner = NULL, lease_until = NULL \
                 WHERE subscription = $1 AND event_seq IN (SELECT seq FROM events WHERE id = $2) \
                 AND state = 'pending' AND lease_owner = $3 RETURNING 1), \
                 s AS (UPDATE event_subscriptions SET \
                 last_delivery_at = CASE WHEN $4 = 'delivered' THEN $8 ELSE last_delivery_at END, \
                 last_error = CASE WHEN $4 = 'delivered' THEN NULL ELSE $7 END, \
                 failed_since = CASE WHEN $4 = 'delivered' THEN NULL \
                 ELSE COALESCE(failed_since, $8) END \
                 WHERE id = $1 AND ($4 = 'delivered' OR $7::TEXT IS NOT NULL) \
                 AND EXISTS (SELECT 1 FROM d)), \
                 g AS (INSERT INTO event_gaps (subscription, after_major, after_minor, next_at, \
                 attempts) SELECT $1, e.xid::text::bigint, e.seq, $8, 0 FROM events e \
                 WHERE e.id = $2 AND $9::BOOLEAN AND EXISTS (SELECT 1 FROM d) \
                 ORDER BY e.xid DESC, e.seq DESC LIMIT 1 \
                 ON CONFLICT (subscription) DO UPDATE SET after_major = excluded.after_major, \
                 after_minor = excluded.after_minor WHERE (excluded.after_major, \
                 excluded.after_minor) > (event_gaps.after_major, event_gaps.after_minor)) \
                 SELECT COUNT(*) FROM d",
                &[
                    &subscription,
                    &event_id,
                    &node,
                    &state.as_str(),
                    &next_at.map(pg_int),
                    &status,
                    &failure,
                    &pg_int(attempt.at),
                    &gap,
                ],
            )
            .await
            .with_context(|| format!("settle the delivery of {event_id} to {subscription}"))?;
        Ok(get::<i64>(&row, 0, "a count")? > 0)
    }

    async fn event_deliveries(
        &self,
        subscription: &str,
        limit: usize,
    ) -> Result<Vec<EventDeliveryState>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT d.subscription, COALESCE(e.id, ''), COALESCE(e.name, ''), d.state, \
                 d.attempts, d.next_at, d.created_at, d.last_status, d.last_error \
                 FROM event_deliveries d LEFT JOIN events e ON e.seq = d.event_seq \
                 WHERE d.subscription = $1 ORDER BY d.event_seq DESC LIMIT $2",
                &[&subscription, &i64::try_from(limit).unwrap_or(i64::MAX)],
            )
            .await
            .with_context(|| format!("list the deliveries of subscription {subscription}"))?;
        rows.iter()
            .map(|r| {
                let what = "an event delivery";
                let state: String = get(r, 3, what)?;
                Ok(EventDeliveryState {
                    subscription: get(r, 0, what)?,
                    event_id: get(r, 1, what)?,
                    name: get(r, 2, what)?,
                    state: DeliveryState::parse(&state).unwrap_or(DeliveryState::Failed),
                    attempts: u32::try_from(get::<i32>(r, 4, what)?).unwrap_or(0),
                    next_at: time(get(r, 5, what)?),
                    created_at: time(get(r, 6, what)?),
                    last_status: get::<Option<i32>>(r, 7, what)?
                        .and_then(|s| u16::try_from(s).ok()),
                    last_error: get(r, 8, what)?,
                })
            })
            .collect()
    }

    async fn release_event_deliveries(&self, node: &str) -> Result<usize, StoreError> {
        let client = self.client().await?;
        let n = client
            .execute(
                "UPDATE event_deliveries SET lease_owner = NULL, lease_until = NULL \
                 WHERE state = 'pending' AND lease_owner = $1",
                &[&node],
            )
            .await
            .context("let go of event deliveries")?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    async fn due_event_gaps(&self, now: u64, limit: usize) -> Result<Vec<EventGap>, StoreError> {
        let client = self.client().await?;
        // With the latest event delivered to each: the cursor told is the later of the two.
        let rows = client
            .query(
                &format!(
                    "SELECT {SUBSCRIPTION_COLUMNS}, g.after_major, g.after_minor, c.major, c.minor, \
                     g.attempts FROM event_gaps g JOIN event_subscriptions s ON s.id = g.subscription \
                     LEFT JOIN LATERAL (SELECT e.xid::text::bigint AS major, e.seq AS minor \
                     FROM event_deliveries d JOIN events e ON e.seq = d.event_seq \
                     WHERE d.subscription = g.subscription AND d.state = 'delivered' \
                     ORDER BY e.xid DESC, e.seq DESC LIMIT 1) c ON true \
                     WHERE g.next_at <= $1 AND (s.expires_at IS NULL OR s.expires_at > $1) \
                     ORDER BY g.next_at, g.subscription LIMIT $2"
                ),
                &[&pg_int(now), &pg_int(limit as u64)],
            )
            .await
            .context("read the event gaps due")?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let what = "an event gap";
            let missed = EventPosition {
                major: time(get(&row, 19, what)?),
                minor: time(get(&row, 20, what)?),
            };
            let delivered = EventPosition {
                major: time(get::<Option<i64>>(&row, 21, what)?.unwrap_or(0)),
                minor: time(get::<Option<i64>>(&row, 22, what)?.unwrap_or(0)),
            };
            out.push(EventGap {
                subscription: subscription_from(&row, 0)?,
                missed,
                cursor: missed.max(delivered),
                attempts: u32::try_from(get::<i32>(&row, 23, what)?).unwrap_or(0),
            });
        }
        Ok(out)
    }

    async fn claim_event_gap(
        &self,
        subscription: &str,
        now: u64,
        retry_at: u64,
    ) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let n = client
            .execute(
                "UPDATE event_gaps SET next_at = $3, attempts = attempts + 1 \
                 WHERE subscription = $1 AND next_at <= $2",
                &[&subscription, &pg_int(now), &pg_int(retry_at)],
            )
            .await
            .with_context(|| format!("claim the gap of subscription {subscription}"))?;
        Ok(n > 0)
    }

    async fn forget_event_gap(
        &self,
        subscription: &str,
        missed: EventPosition,
    ) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let n = client
            .execute(
                "DELETE FROM event_gaps WHERE subscription = $1 AND after_major = $2 \
                 AND after_minor = $3",
                &[&subscription, &pg_int(missed.major), &pg_int(missed.minor)],
            )
            .await
            .with_context(|| format!("forget the gap of subscription {subscription}"))?;
        Ok(n > 0)
    }

    async fn purge_events(&self, now: u64, before: u64) -> Result<EventsPurged, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.context("begin an event purge")?;
        let (now, before) = (pg_int(now), pg_int(before));
        let count = |row: Row, what: &str| -> Result<usize, StoreError> {
            Ok(usize::try_from(get::<i64>(&row, 0, what)?).unwrap_or(0))
        };
        let row = tx
            .query_one(
                "WITH s AS (DELETE FROM event_subscriptions WHERE expires_at IS NOT NULL \
                 AND expires_at <= $1 RETURNING id), \
                 d AS (DELETE FROM event_deliveries WHERE subscription IN (SELECT id FROM s) \
                 RETURNING 1) SELECT (SELECT COUNT(*) FROM s), (SELECT COUNT(*) FROM d)",
                &[&now],
            )
            .await
            .context("remove ended subscriptions")?;
        let mut purged = EventsPurged {
            subscriptions: usize::try_from(get::<i64>(&row, 0, "a count")?).unwrap_or(0),
            deliveries: usize::try_from(get::<i64>(&row, 1, "a count")?).unwrap_or(0),
            events: 0,
        };
        tx.execute(
            "DELETE FROM event_gaps WHERE subscription NOT IN (SELECT id FROM event_subscriptions)",
            &[],
        )
        .await
        .context("remove the gaps of ended subscriptions")?;
        tx.execute("DELETE FROM event_verifications WHERE until <= $1", &[&now])
            .await
            .context("remove ended verifications")?;
        let settled = tx
            .query_one(
                "WITH d AS (DELETE FROM event_deliveries WHERE state <> 'pending' \
                 AND created_at < $1 RETURNING 1) SELECT COUNT(*) FROM d",
                &[&before],
            )
            .await
            .context("remove settled event deliveries")?;
        purged.deliveries += count(settled, "a count")?;
        let gone = tx
            .query_opt(
                "WITH g AS (DELETE FROM events e WHERE created_at < $1 AND NOT EXISTS \
                 (SELECT 1 FROM event_deliveries d WHERE d.event_seq = e.seq \
                 AND d.state = 'pending') AND (e.xid, e.seq) <= (SELECT \
                 fanned_major::TEXT::xid8, fanned_minor FROM event_log) RETURNING xid, seq), \
                 d AS (DELETE FROM event_deliveries WHERE event_seq IN (SELECT seq FROM g)) \
                 SELECT g.xid::text::bigint, g.seq, (SELECT COUNT(*) FROM g) FROM g \
                 ORDER BY g.xid DESC, g.seq DESC LIMIT 1",
                &[&before],
            )
            .await
            .context("remove old events")?;
        if let Some(last) = gone {
            let what = "the purge's end";
            let (major, minor, n): (i64, i64, i64) = (
                get(&last, 0, what)?,
                get(&last, 1, what)?,
                get(&last, 2, what)?,
            );
            purged.events = usize::try_from(n).unwrap_or(0);
            tx.execute(
                "UPDATE event_log SET purged_major = $1, purged_minor = $2 \
                 WHERE (purged_major, purged_minor) < ($1, $2)",
                &[&major, &minor],
            )
            .await
            .context("keep how far the event log was purged")?;
        }
        tx.commit().await.context("commit an event purge")?;
        Ok(purged)
    }
}
