//! The database schema as a list of versioned migrations.
//!
//! The version a database is at is kept in `PRAGMA user_version`. Opening a database applies, in
//! order and in one transaction, every migration above that version, so a database is either wholly
//! at the old version or wholly at the new one. Migration 1 is the schema that databases made before
//! versioning already have (created with `IF NOT EXISTS`, at user_version 0), so for them it changes
//! nothing but the version. Migrations are append-only: never edit one that has shipped.

use rusqlite::{Connection, TransactionBehavior};
use std::path::Path;

use super::Context;
use crate::store::StoreError;

/// One step of the schema.
pub(super) struct Migration {
    /// The user_version a database is at after this step.
    pub(super) version: u32,
    /// What the step does, for error messages.
    pub(super) what: &'static str,
    /// The statements.
    pub(super) sql: &'static str,
}

/// Every migration, in order; `version` counts up from 1 without gaps.
pub(super) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        what: "create the tables",
        sql: r#"
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
"#,
    },
    Migration {
        version: 2,
        what: "delete input requests of purged tasks",
        // Purge used to leave a task's input requests behind; they can never be read again.
        sql: "DELETE FROM input_requests WHERE task_id NOT IN (SELECT id FROM tasks);",
    },
    Migration {
        version: 3,
        what: "add tasks.progress_message",
        sql: "ALTER TABLE tasks ADD COLUMN progress_message TEXT;",
    },
    Migration {
        version: 4,
        what: "add tasks.retain_after_finish_ms",
        sql: "ALTER TABLE tasks ADD COLUMN retain_after_finish_ms INTEGER;",
    },
    Migration {
        version: 5,
        what: "add tasks.checkpoint",
        sql: "ALTER TABLE tasks ADD COLUMN checkpoint TEXT;",
    },
    Migration {
        version: 6,
        what: "add task_history (a row per status change)",
        sql: "CREATE TABLE task_history (task_id TEXT NOT NULL, at INTEGER NOT NULL, \
              status TEXT NOT NULL, message TEXT); \
              CREATE INDEX task_history_task ON task_history (task_id, at);",
    },
    Migration {
        version: 7,
        what: "add sessions.idle_ms (a session's own idle limit) and an index of sessions by owner",
        sql: "ALTER TABLE sessions ADD COLUMN idle_ms INTEGER; \
              CREATE INDEX sessions_by_owner ON sessions (owner, id);",
    },
    Migration {
        version: 8,
        what: "add task_steps (a task's step journal)",
        sql: "CREATE TABLE task_steps (task_id TEXT NOT NULL, seq INTEGER NOT NULL, \
              name TEXT NOT NULL, output TEXT NOT NULL, attempt INTEGER NOT NULL, \
              at INTEGER NOT NULL, PRIMARY KEY (task_id, seq)) WITHOUT ROWID;",
    },
    Migration {
        version: 9,
        what: "add tasks.webhooks, webhook_outbox and webhook_attempts (webhooks on task events)",
        sql: "ALTER TABLE tasks ADD COLUMN webhooks TEXT; \
              CREATE TABLE webhook_outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, \
              id TEXT NOT NULL UNIQUE, task_id TEXT NOT NULL, target INTEGER NOT NULL, \
              event TEXT NOT NULL, url TEXT NOT NULL, secret TEXT NOT NULL, subscription TEXT, \
              snapshot TEXT NOT NULL, created_at INTEGER NOT NULL, next_at INTEGER NOT NULL, \
              state TEXT NOT NULL, attempts INTEGER NOT NULL, lease_owner TEXT, \
              lease_until INTEGER, delivered_at INTEGER, last_status INTEGER, last_error TEXT); \
              CREATE INDEX webhook_outbox_task ON webhook_outbox (task_id, target, seq); \
              CREATE INDEX webhook_outbox_due ON webhook_outbox (next_at) WHERE state = 'pending'; \
              CREATE TABLE webhook_attempts (delivery TEXT NOT NULL, at INTEGER NOT NULL, \
              status INTEGER, latency_ms INTEGER NOT NULL, error TEXT); \
              CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery, at);",
    },
    Migration {
        version: 10,
        what: "move task_history into tasks.history (a JSON array per task)",
        // A status change wrote a history row and its index entry: two more b-trees, and two more
        // pages in the commit, for each change. Appended to the task's own row, which the change
        // rewrites anyway, the history costs a few hundred instructions (issue 30).
        sql: "ALTER TABLE tasks ADD COLUMN history TEXT; \
              UPDATE tasks SET history = (SELECT json_group_array(json_object('at', h.at, \
              'status', h.status, 'message', h.message) ORDER BY h.at, h.rowid) \
              FROM task_history h WHERE h.task_id = tasks.id) \
              WHERE id IN (SELECT task_id FROM task_history); \
              DROP TABLE task_history;",
    },
    Migration {
        version: 11,
        what: "record how far the change log is written as rows",
        // Read by `old_log.rs` only: the replay of an earlier build's log skips the frames at or
        // below this number. No later migration may drop the table while that replay is kept.
        sql: "CREATE TABLE change_log (flushed_seq INTEGER NOT NULL); \
              INSERT INTO change_log (flushed_seq) VALUES (0);",
    },
    Migration {
        version: 12,
        what: "keep a webhook secret once, with its task, not in each of its events",
        // A row keeps its copy only where its task is gone (or holds another secret).
        sql: "UPDATE webhook_outbox SET secret = '' WHERE secret = (SELECT \
              json_extract(t.webhooks, '$[' || webhook_outbox.target || '].secret') \
              FROM tasks t WHERE t.id = webhook_outbox.task_id);",
    },
    Migration {
        version: 13,
        what: "add the event log, event subscriptions, verified endpoints and event deliveries",
        sql: "CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL, \
              name TEXT NOT NULL, owner TEXT, session TEXT, task_id TEXT, tool TEXT, \
              fields TEXT NOT NULL, data TEXT NOT NULL, created_at INTEGER NOT NULL); \
              CREATE INDEX events_by_name ON events (name, seq); \
              CREATE INDEX events_by_time ON events (created_at); \
              CREATE INDEX events_by_id ON events (id); \
              CREATE INDEX events_by_task ON events (task_id) WHERE task_id IS NOT NULL; \
              CREATE TABLE event_log (purged_through INTEGER NOT NULL); \
              INSERT INTO event_log (purged_through) VALUES (0); \
              CREATE TABLE event_subscriptions (id TEXT PRIMARY KEY, principal TEXT NOT NULL, \
              name TEXT NOT NULL, arguments TEXT NOT NULL, task_id TEXT, tool TEXT, \
              filter TEXT NOT NULL, url TEXT NOT NULL, secret TEXT NOT NULL, \
              previous_secret TEXT, previous_until INTEGER, created_at INTEGER NOT NULL, \
              refreshed_at INTEGER NOT NULL, expires_at INTEGER, from_major INTEGER NOT NULL, \
              from_minor INTEGER NOT NULL, last_delivery_at INTEGER, last_error TEXT, \
              failed_since INTEGER); \
              CREATE INDEX event_subscriptions_by_name ON event_subscriptions (name, task_id); \
              CREATE INDEX event_subscriptions_by_principal ON event_subscriptions \
              (principal, created_at); \
              CREATE TABLE event_verifications (principal TEXT NOT NULL, url TEXT NOT NULL, \
              until INTEGER NOT NULL, PRIMARY KEY (principal, url)); \
              CREATE TABLE event_deliveries (subscription TEXT NOT NULL, event_seq INTEGER NOT NULL, \
              state TEXT NOT NULL, attempts INTEGER NOT NULL, next_at INTEGER NOT NULL, \
              created_at INTEGER NOT NULL, lease_owner TEXT, lease_until INTEGER, \
              last_status INTEGER, last_error TEXT, PRIMARY KEY (subscription, event_seq)); \
              CREATE INDEX event_deliveries_due ON event_deliveries (next_at) WHERE state = 'pending'; \
              CREATE INDEX event_deliveries_by_event ON event_deliveries (event_seq);",
    },
    Migration {
        version: 14,
        what: "keep the gaps (given-up deliveries) each event subscription is still to be told of",
        sql: "CREATE TABLE event_gaps (subscription TEXT PRIMARY KEY, after_major INTEGER NOT NULL, \
              after_minor INTEGER NOT NULL);",
    },
    Migration {
        version: 15,
        what: "schedule the telling of each event gap (when it is due, attempts made)",
        sql: "ALTER TABLE event_gaps ADD COLUMN next_at INTEGER NOT NULL DEFAULT 0; \
              ALTER TABLE event_gaps ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;",
    },
    Migration {
        version: 16,
        what: "keep each step's duration, and the error of a step that failed for good",
        sql: "ALTER TABLE task_steps ADD COLUMN duration_ms INTEGER NOT NULL DEFAULT 0; \
              ALTER TABLE task_steps ADD COLUMN error TEXT;",
    },
    Migration {
        version: 17,
        what: "add task_signals (named payloads sent to a task, which its handler waits for)",
        sql: "CREATE TABLE task_signals (task_id TEXT NOT NULL, seq INTEGER NOT NULL, \
              name TEXT NOT NULL, payload TEXT NOT NULL, sender TEXT NOT NULL, key TEXT, \
              at INTEGER NOT NULL, PRIMARY KEY (task_id, seq)) WITHOUT ROWID; \
              CREATE INDEX task_signals_by_name ON task_signals (task_id, name, seq); \
              CREATE UNIQUE INDEX task_signals_by_key ON task_signals (task_id, key) \
              WHERE key IS NOT NULL;",
    },
];

/// The version a database is at once every migration is applied.
pub(super) fn latest() -> u32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Reads the database's schema version.
pub(super) fn version(conn: &Connection) -> Result<u32, StoreError> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
        .context("read the schema version")
}

/// Brings the database at `path` (open as `conn`) up to the latest schema. Refuses a database from a
/// newer build, whose schema this one does not know.
pub(super) fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let db = path.display();
    // IMMEDIATE takes the write lock before reading the version, so two processes opening the same
    // new file cannot both apply the same migration.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .with_context(|| format!("begin the schema migration of {db}"))?;
    let current = version(&tx)?;
    if current > latest() {
        return Err(StoreError::message(format!(
            "{db} is at schema version {current}, newer than this build knows ({}); \
             use a newer build",
            latest()
        )));
    }
    for m in MIGRATIONS.iter().filter(|m| m.version > current) {
        tx.execute_batch(m.sql).with_context(|| {
            format!("migrate {db} to schema version {} ({})", m.version, m.what)
        })?;
        // user_version is part of the database header, so it commits or rolls back with the step.
        tx.pragma_update(None, "user_version", m.version)
            .with_context(|| format!("record schema version {} in {db}", m.version))?;
    }
    tx.commit()
        .with_context(|| format!("commit the schema migration of {db}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_count_up_from_one_without_gaps() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version as usize, i + 1, "migration {}", m.what);
        }
    }

    #[test]
    fn a_new_database_gets_every_migration_once() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn, Path::new(":memory:")).unwrap();
        assert_eq!(version(&conn).unwrap(), latest());
        // A second open finds nothing to do (and would fail if a step ran twice and was not
        // idempotent, e.g. an ALTER TABLE ADD COLUMN).
        migrate(&mut conn, Path::new(":memory:")).unwrap();
        assert_eq!(version(&conn).unwrap(), latest());
    }

    #[test]
    fn a_database_from_a_newer_build_is_refused() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "user_version", latest() + 1)
            .unwrap();
        let err = migrate(&mut conn, Path::new(":memory:")).unwrap_err();
        assert!(err.to_string().contains("newer than this build"), "{err}");
        assert_eq!(version(&conn).unwrap(), latest() + 1, "left untouched");
    }

    #[test]
    fn a_failing_migration_leaves_the_database_as_it_was() {
        let mut conn = Connection::open_in_memory().unwrap();
        // A table named like migration 1's last index makes the step fail after it made its tables.
        conn.execute_batch("CREATE TABLE input_requests_task (x TEXT)")
            .unwrap();
        let err = migrate(&mut conn, Path::new(":memory:")).unwrap_err();
        assert!(
            err.chain()
                .contains("to schema version 1 (create the tables)"),
            "{}",
            err.chain()
        );
        assert_eq!(version(&conn).unwrap(), 0);
        let tables: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(tables, 1, "nothing of the failed step stays");
    }
}
