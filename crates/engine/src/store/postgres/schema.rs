//! The PostgreSQL schema and its versioned migrations.
//!
//! Applied versions are rows of `mcp_tasks_migrations`. Opening a store takes a session advisory lock
//! for the whole migration, so replicas that start together apply each migration once: the first
//! applies, the others wait and then find nothing left to do. A database at a version newer than this
//! build knows is refused rather than used half-understood.

use tokio_postgres::Client;

use super::Context;
use crate::store::StoreError;

/// The advisory lock key migrations run under ("mcptasks" in ASCII).
const MIGRATION_LOCK: i64 = 0x6d63_7074_6173_6b73;

/// One schema change.
struct Migration {
    version: i32,
    what: &'static str,
    sql: &'static str,
}

/// Every migration, in order; `version` counts up from 1 without gaps. The columns mirror the SQLite
/// schema's (times are Unix ms in BIGINT; JSON is stored as text, exactly as serialized).
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        what: "create the tables",
        sql: r#"
CREATE TABLE tasks (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    session TEXT,
    era TEXT NOT NULL,
    tool TEXT NOT NULL,
    arguments TEXT NOT NULL,
    request_meta TEXT NOT NULL,
    status TEXT NOT NULL,
    status_message TEXT,
    progress DOUBLE PRECISION,
    progress_total DOUBLE PRECISION,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    ttl_ms BIGINT,
    poll_interval_ms BIGINT,
    outcome TEXT,
    idempotency_key TEXT,
    fingerprint TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    lease_owner TEXT,
    lease_until BIGINT,
    finished_at BIGINT,
    expires_at BIGINT,
    progress_message TEXT,
    retain_after_finish_ms BIGINT
);
CREATE UNIQUE INDEX tasks_idempotency ON tasks(owner, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX tasks_owner_order ON tasks(owner, created_at, id);
CREATE INDEX tasks_unfinished ON tasks(lease_until)
    WHERE status IN ('working', 'input_required');
CREATE INDEX tasks_unfinished_by_owner ON tasks(owner, session)
    WHERE status IN ('working', 'input_required');
CREATE INDEX tasks_expiry ON tasks(expires_at) WHERE expires_at IS NOT NULL;
CREATE TABLE tombstones (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    session TEXT,
    expired_at BIGINT NOT NULL
);
CREATE TABLE input_requests (
    key TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    method TEXT NOT NULL,
    params TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    response TEXT,
    answered_at BIGINT
);
CREATE INDEX input_requests_task ON input_requests(task_id, created_at);
CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    data TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    last_seen BIGINT NOT NULL
);
"#,
    },
    Migration {
        version: 2,
        what: "add tasks.version (one-round-trip compare-and-set)",
        sql: "ALTER TABLE tasks ADD COLUMN version BIGINT NOT NULL DEFAULT 0;",
    },
    Migration {
        version: 3,
        what: "add input_requests.sent_to (the client stream a question went out on)",
        sql: "ALTER TABLE input_requests ADD COLUMN sent_to TEXT;",
    },
    Migration {
        version: 4,
        what: "add tasks.checkpoint",
        sql: "ALTER TABLE tasks ADD COLUMN checkpoint TEXT;",
    },
    Migration {
        version: 5,
        what: "add task_history (a row per status change)",
        sql: "CREATE TABLE task_history (task_id TEXT NOT NULL, at BIGINT NOT NULL, \
              status TEXT NOT NULL, message TEXT); \
              CREATE INDEX task_history_task ON task_history (task_id, at);",
    },
    Migration {
        version: 6,
        what: "add sessions.idle_ms (a session's own idle limit) and an index of sessions by owner",
        sql: "ALTER TABLE sessions ADD COLUMN idle_ms BIGINT; \
              CREATE INDEX sessions_by_owner ON sessions (owner, id);",
    },
    Migration {
        version: 7,
        what: "add task_steps (a task's step journal)",
        sql: "CREATE TABLE task_steps (task_id TEXT NOT NULL, seq INTEGER NOT NULL, \
              name TEXT NOT NULL, output TEXT NOT NULL, attempt INTEGER NOT NULL, \
              at BIGINT NOT NULL, PRIMARY KEY (task_id, seq));",
    },
    Migration {
        version: 8,
        what: "add tasks.webhooks, webhook_outbox and webhook_attempts (webhooks on task events)",
        sql: "ALTER TABLE tasks ADD COLUMN webhooks TEXT; \
              CREATE TABLE webhook_outbox (seq BIGSERIAL PRIMARY KEY, id TEXT NOT NULL UNIQUE, \
              task_id TEXT NOT NULL, target INTEGER NOT NULL, event TEXT NOT NULL, \
              url TEXT NOT NULL, secret TEXT NOT NULL, subscription TEXT, snapshot TEXT NOT NULL, \
              created_at BIGINT NOT NULL, next_at BIGINT NOT NULL, state TEXT NOT NULL, \
              attempts INTEGER NOT NULL, lease_owner TEXT, lease_until BIGINT, \
              delivered_at BIGINT, last_status INTEGER, last_error TEXT); \
              CREATE INDEX webhook_outbox_task ON webhook_outbox (task_id, target, seq); \
              CREATE INDEX webhook_outbox_due ON webhook_outbox (next_at) WHERE state = 'pending'; \
              CREATE TABLE webhook_attempts (delivery TEXT NOT NULL, at BIGINT NOT NULL, \
              status INTEGER, latency_ms BIGINT NOT NULL, error TEXT); \
              CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery, at);",
    },
    Migration {
        version: 9,
        what: "keep a webhook secret once, with its task, not in each of its events",
        // Nothing changes here: replicas of earlier builds, still running in a rolling deploy,
        // sign with an event's own copy. When this was applied starts the window in which events
        // are still written with one (`rows::SECRET_COPIES`); the copies go after it.
        sql: "SELECT 1;",
    },
    Migration {
        version: 10,
        what: "add the event log, event subscriptions, verified endpoints and event deliveries",
        // An event's position is (the writing transaction's id, its number): readers read only
        // below the oldest transaction still running, so the order they see never gains an
        // event before one they saw (`events.rs`).
        sql: "CREATE TABLE events (seq BIGSERIAL PRIMARY KEY, \
              xid xid8 NOT NULL DEFAULT pg_current_xact_id(), id TEXT NOT NULL, \
              name TEXT NOT NULL, owner TEXT, session TEXT, task_id TEXT, tool TEXT, \
              fields JSONB NOT NULL, data TEXT NOT NULL, created_at BIGINT NOT NULL); \
              CREATE INDEX events_by_name ON events (name, xid, seq); \
              CREATE INDEX events_in_order ON events (xid, seq); \
              CREATE INDEX events_by_time ON events (created_at); \
              CREATE INDEX events_by_id ON events (id); \
              CREATE INDEX events_by_task ON events (task_id) WHERE task_id IS NOT NULL; \
              CREATE TABLE event_log (purged_major BIGINT NOT NULL, purged_minor BIGINT NOT NULL, \
              fanned_major BIGINT NOT NULL, fanned_minor BIGINT NOT NULL); \
              INSERT INTO event_log VALUES (0, 0, 0, 0); \
              CREATE TABLE event_subscriptions (id TEXT PRIMARY KEY, principal TEXT NOT NULL, \
              name TEXT NOT NULL, arguments TEXT NOT NULL, task_id TEXT, tool TEXT, \
              filter JSONB NOT NULL, url TEXT NOT NULL, secret TEXT NOT NULL, \
              previous_secret TEXT, previous_until BIGINT, created_at BIGINT NOT NULL, \
              refreshed_at BIGINT NOT NULL, expires_at BIGINT, from_major BIGINT NOT NULL, \
              from_minor BIGINT NOT NULL, last_delivery_at BIGINT, last_error TEXT, \
              failed_since BIGINT); \
              CREATE INDEX event_subscriptions_by_name ON event_subscriptions (name, task_id); \
              CREATE INDEX event_subscriptions_by_principal ON event_subscriptions \
              (principal, created_at); \
              CREATE TABLE event_verifications (principal TEXT NOT NULL, url TEXT NOT NULL, \
              until BIGINT NOT NULL, PRIMARY KEY (principal, url)); \
              CREATE TABLE event_deliveries (subscription TEXT NOT NULL, event_seq BIGINT NOT NULL, \
              state TEXT NOT NULL, attempts INTEGER NOT NULL, next_at BIGINT NOT NULL, \
              created_at BIGINT NOT NULL, lease_owner TEXT, lease_until BIGINT, \
              last_status INTEGER, last_error TEXT, PRIMARY KEY (subscription, event_seq)); \
              CREATE INDEX event_deliveries_due ON event_deliveries (next_at) WHERE state = 'pending'; \
              CREATE INDEX event_deliveries_by_event ON event_deliveries (event_seq);",
    },
    Migration {
        version: 11,
        what: "keep the gaps (given-up deliveries) each event subscription is still to be told of",
        sql: "CREATE TABLE event_gaps (subscription TEXT PRIMARY KEY, after_major BIGINT NOT NULL, \
              after_minor BIGINT NOT NULL);",
    },
    Migration {
        version: 12,
        what: "schedule the telling of each event gap (when it is due, attempts made)",
        sql: "ALTER TABLE event_gaps ADD COLUMN next_at BIGINT NOT NULL DEFAULT 0, \
              ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;",
    },
    Migration {
        version: 13,
        what: "keep each step's duration, and the error of a step that failed for good",
        sql: "ALTER TABLE task_steps ADD COLUMN duration_ms BIGINT NOT NULL DEFAULT 0, \
              ADD COLUMN error TEXT;",
    },
    Migration {
        version: 14,
        what: "add task_signals (named payloads sent to a task, which its handler waits for)",
        sql: "CREATE TABLE task_signals (task_id TEXT NOT NULL, seq INTEGER NOT NULL, \
              name TEXT NOT NULL, payload TEXT NOT NULL, sender TEXT NOT NULL, key TEXT, \
              at BIGINT NOT NULL, PRIMARY KEY (task_id, seq)); \
              CREATE INDEX task_signals_by_name ON task_signals (task_id, name, seq); \
              CREATE UNIQUE INDEX task_signals_by_key ON task_signals (task_id, key) \
              WHERE key IS NOT NULL;",
    },
];

/// The migration from which events are written without a copy of their secret, once its window
/// has passed (see `rows::SECRET_COPIES`).
pub(super) const SECRET_ONCE: i32 = 9;

/// The version a database is at once every migration is applied.
pub(super) fn latest() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Creates schema `name` if it is missing, under the migration lock (`CREATE SCHEMA IF NOT EXISTS`
/// run by several replicas at once can fail on PostgreSQL's own unique index).
pub(super) async fn create_schema(client: &Client, name: &str) -> Result<(), StoreError> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await
        .context("take the migration lock")?;
    let result = client
        .batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {name}"))
        .await
        .with_context(|| format!("create schema {name}"));
    let _ = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    result
}

/// Brings the schema `client` sees (its `search_path`) up to date, under the migration lock.
pub(super) async fn migrate(client: &mut Client) -> Result<(), StoreError> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await
        .context("take the migration lock")?;
    let result = apply(client).await;
    // Released whatever happened; a connection that died has released it already.
    let _ = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    result
}

async fn apply(client: &mut Client) -> Result<(), StoreError> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS mcp_tasks_migrations (\
             version INTEGER PRIMARY KEY, what TEXT NOT NULL, applied_at BIGINT NOT NULL)",
        )
        .await
        .context("create the migrations table")?;
    let at: i32 = client
        .query_one(
            "SELECT COALESCE(MAX(version), 0) FROM mcp_tasks_migrations",
            &[],
        )
        .await
        .context("read the schema version")?
        .get(0);
    if at > latest() {
        return Err(StoreError::message(format!(
            "the database schema is at version {at}, newer than this build knows ({}): \
             run a newer mcp-tasks",
            latest()
        )));
    }
    for m in MIGRATIONS.iter().filter(|m| m.version > at) {
        let tx = client.transaction().await.context("begin a migration")?;
        tx.batch_execute(m.sql)
            .await
            .with_context(|| format!("apply migration {} ({})", m.version, m.what))?;
        let now = i64::try_from(crate::clock::now_ms()).unwrap_or(i64::MAX);
        tx.execute(
            "INSERT INTO mcp_tasks_migrations (version, what, applied_at) VALUES ($1, $2, $3)",
            &[&m.version, &m.what, &now],
        )
        .await
        .with_context(|| format!("record migration {}", m.version))?;
        tx.commit()
            .await
            .with_context(|| format!("commit migration {}", m.version))?;
        tracing::info!(
            version = m.version,
            what = m.what,
            "applied schema migration"
        );
    }
    Ok(())
}
