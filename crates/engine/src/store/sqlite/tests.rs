//! The SQLite store's own tests, beside the contract test kit: old schemas migrated, shared
//! arguments, the writer under load.

use super::*;

/// Inserts `t` as builds of schema version 1 wrote tasks (no `progress_message` column yet).
fn insert_as_v1(conn: &Connection, t: &TaskRecord) {
    conn.execute(
        "INSERT INTO tasks (id, owner, session, era, tool, arguments, request_meta, status, \
         status_message, progress, progress_total, created_at, updated_at, ttl_ms, \
         poll_interval_ms, outcome, idempotency_key, fingerprint, attempt, lease_owner, \
         lease_until, finished_at, expires_at) VALUES \
         (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,?22,?23)",
        params![
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
            t.ttl_ms.map(sql_int),
            t.poll_interval_ms.map(sql_int),
            t.outcome
                .as_ref()
                .map(|o| serde_json::to_string(o).unwrap()),
            t.idempotency_key,
            t.fingerprint,
            i64::from(t.attempt),
            t.lease_owner,
            t.lease_until.map(sql_int),
            t.finished_at.map(sql_int),
            t.expires_at().map(sql_int),
        ],
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfinished_tasks_arguments_are_shared_by_every_record_read_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("t.db")).unwrap();
    let mut t = super::super::testkit::record("big", "o", 1);
    t.arguments = Arc::new(serde_json::json!({"data": "x".repeat(100_000)}));
    let created = match store.create(t, None).await.unwrap() {
        Created::New(t) => t,
        Created::Existing(_) => unreachable!("a new id"),
    };
    let progress = TaskChange {
        progress: Some(crate::store::ProgressUpdate {
            progress: 1.0,
            total: Some(2.0),
            message: None,
        }),
        ..Default::default()
    };
    let updated = store
        .update("big", &TaskStatus::ACTIVE, progress, 2)
        .await
        .unwrap();
    let Lookup::Found(read) = store.get("big").await.unwrap() else {
        panic!("the task is there")
    };
    // One value, not a parse per read or report.
    assert!(Arc::ptr_eq(&created.arguments, &updated.arguments));
    assert!(Arc::ptr_eq(&created.arguments, &read.arguments));
    assert_eq!(store.shared.len(), 1);
    let done = TaskChange {
        status: Some(TaskStatus::Completed),
        outcome: Some(crate::model::Outcome::Result {
            value: serde_json::json!({}),
            is_error: false,
        }),
        ..Default::default()
    };
    store
        .update("big", &TaskStatus::ACTIVE, done, 3)
        .await
        .unwrap();
    assert_eq!(
        store.shared.len(),
        0,
        "a finished task's arguments are let go"
    );
    // Read again from the file, whole: a record this heavy is not among the ones kept in memory.
    assert!(store.cache.get("big").is_none());
    let Lookup::Found(read) = store.get("big").await.unwrap() else {
        panic!("the task is there")
    };
    assert_eq!(read.arguments, created.arguments);
    assert!(!Arc::ptr_eq(&created.arguments, &read.arguments));
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_made_before_schema_versions_is_upgraded_and_keeps_its_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let t = super::super::testkit::record("old", "alice", 1_000);
    {
        // What earlier builds left: the tables, created with IF NOT EXISTS, at user_version 0.
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(schema::MIGRATIONS[0].sql).unwrap();
        insert_as_v1(&conn, &t);
        assert_eq!(schema::version(&conn).unwrap(), 0);
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.get("old").await.unwrap(), Lookup::Found(t));
    let conn = Connection::open(&path).unwrap();
    assert_eq!(schema::version(&conn).unwrap(), schema::latest());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_kept_in_rows_moves_into_its_task_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v9.db");
    let (a, b) = (
        super::super::testkit::record("a", "alice", 1_000),
        super::super::testkit::record("b", "alice", 1_000),
    );
    {
        // A database at schema version 9, when each status change was a row of `task_history`.
        let conn = Connection::open(&path).unwrap();
        for m in schema::MIGRATIONS.iter().filter(|m| m.version <= 9) {
            conn.execute_batch(m.sql).unwrap();
        }
        conn.execute_batch("PRAGMA user_version = 9").unwrap();
        insert_as_v1(&conn, &a);
        insert_as_v1(&conn, &b);
        // Two changes in one millisecond keep the order they were written in.
        for (task, at, status, message) in [
            ("a", 2_000, "input_required", Some("which one?")),
            ("b", 2_500, "completed", None),
            ("a", 3_000, "working", None),
            ("a", 3_000, "completed", Some("done")),
        ] {
            conn.execute(
                "INSERT INTO task_history (task_id, at, status, message) VALUES (?1, ?2, ?3, ?4)",
                params![task, at, status, message],
            )
            .unwrap();
        }
    }
    let store = SqliteStore::open(&path).unwrap();
    let t = |at, status, message: Option<&str>| Transition {
        at,
        status,
        message: message.map(str::to_string),
    };
    assert_eq!(
        store.history("a").await.unwrap(),
        [
            t(2_000, TaskStatus::InputRequired, Some("which one?")),
            t(3_000, TaskStatus::Working, None),
            t(3_000, TaskStatus::Completed, Some("done")),
        ]
    );
    assert_eq!(
        store.history("b").await.unwrap(),
        [t(2_500, TaskStatus::Completed, None)]
    );
    let conn = Connection::open(&path).unwrap();
    assert_eq!(schema::version(&conn).unwrap(), schema::latest());
    let tables: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'task_history%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tables, 0, "the table and its index are gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_drops_the_input_requests_earlier_builds_left_behind() {
    for start in [0, 1] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("orphans.db");
        let alive = super::super::testkit::record("alive", "alice", 1_000);
        let question = |key: &str, task: &str| InputRecord {
            key: key.into(),
            task_id: task.into(),
            method: "ask".into(),
            params: serde_json::json!({"q": key}),
            created_at: 1_100,
            response: None,
            answered_at: None,
        };
        {
            // A database as migration 1 left it (or as it was before versions, at 0), holding
            // one question of a live task and one of a task purge already removed.
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(schema::MIGRATIONS[0].sql).unwrap();
            conn.pragma_update(None, "user_version", start).unwrap();
            insert_as_v1(&conn, &alive);
            insert_input(&conn, &question("kept", "alive")).unwrap();
            insert_input(&conn, &question("orphan", "purged-long-ago")).unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(
            store.get_input("orphan").await.unwrap(),
            None,
            "from {start}"
        );
        assert_eq!(store.inputs("purged-long-ago").await.unwrap(), vec![]);
        assert_eq!(
            store.get_input("kept").await.unwrap(),
            Some(question("kept", "alive")),
            "from {start}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_say_what_failed_and_keep_their_cause() {
    let dir = tempfile::tempdir().unwrap();
    // A file where the database's folder should be.
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, b"x").unwrap();
    let err = match SqliteStore::open(blocker.join("tasks.db")) {
        Err(e) => e,
        Ok(_) => panic!("opened a database under a file"),
    };
    assert!(
        matches!(&err, StoreError::Backend { context, source: Some(_) } if context.starts_with("create folder")),
        "{err:?}"
    );
    let chain = err.chain();
    assert!(
        chain.starts_with("task store error: create folder"),
        "{chain}"
    );
    assert!(
        chain.len() > err.to_string().len() + 2,
        "the cause is rendered too: {chain}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_written_lately_is_read_from_memory_and_a_heavy_one_from_its_row() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("cache.db")).unwrap();
    let t = super::super::testkit::record("small", "o", 1);
    store.create(t.clone(), None).await.unwrap();
    assert_eq!(
        store.cache.get("small"),
        Some(t.clone()),
        "kept once committed"
    );
    let done = |value: serde_json::Value| TaskChange {
        status: Some(TaskStatus::Completed),
        outcome: Some(crate::model::Outcome::Result {
            value,
            is_error: false,
        }),
        ..Default::default()
    };
    let finished = store
        .update(
            "small",
            &TaskStatus::ACTIVE,
            done(serde_json::json!({"n": 1})),
            2,
        )
        .await
        .unwrap();
    assert_eq!(store.cache.get("small"), Some(finished.clone()));
    assert_eq!(store.get("small").await.unwrap(), Lookup::Found(finished));

    // A record that outgrows the cache leaves it, and no older record of it stays behind.
    let mut h = super::super::testkit::record("heavy", "o", 1);
    h.arguments = Arc::new(serde_json::json!({"a": 1}));
    store.create(h, None).await.unwrap();
    assert!(store.cache.get("heavy").is_some());
    let big = serde_json::json!({"blob": "y".repeat(200_000)});
    store
        .update("heavy", &TaskStatus::ACTIVE, done(big.clone()), 3)
        .await
        .unwrap();
    assert!(store.cache.get("heavy").is_none(), "too heavy to keep");
    let Lookup::Found(read) = store.get("heavy").await.unwrap() else {
        panic!("the task is there")
    };
    assert_eq!(
        read.outcome,
        Some(crate::model::Outcome::Result {
            value: big,
            is_error: false
        })
    );

    // A purge names no tasks, so nothing kept survives it (the expired task goes from the file).
    let purged = store
        .purge(PurgePolicy {
            now: u64::MAX / 4,
            finished_before: Some(u64::MAX / 4),
            finished_grace_ms: 0,
            tombstone_ms: 60_000,
            session_idle_ms: u64::MAX / 8,
        })
        .await
        .unwrap();
    assert_eq!(purged.tasks, 2);
    assert_eq!(store.cache.len(), 0);
    assert!(matches!(
        store.get("small").await.unwrap(),
        Lookup::Expired { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_records_kept_in_memory_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("bounded.db")).unwrap();
    // Enough that the first ones are out of both generations even though the last ones are still
    // pending or in the flusher's batch (pinned, not yet in a generation) and the first ones
    // entered late, once their batch was written.
    let pinned = 2 * (super::changelog::MAX_PENDING + super::writer::MAX_GROUP);
    let n = 2 * cache::GENERATION + 2 * pinned + 100;
    let writes: Vec<_> = (0..n)
        .map(|i| {
            store.create(
                super::super::testkit::record(&format!("t{i}"), "o", 1),
                None,
            )
        })
        .collect();
    for w in futures::future::join_all(writes).await {
        w.unwrap();
    }
    // The generations, the pending tasks and a batch in flight: each at most the most that may be
    // pending and one group more.
    assert!(
        store.cache.len() <= 2 * cache::GENERATION + pinned,
        "{}",
        store.cache.len()
    );
    // The latest are kept, the first ones were let go and are read from their rows.
    assert!(store.cache.get(&format!("t{}", n - 1)).is_some());
    assert!(store.cache.get("t0").is_none());
    assert!(matches!(store.get("t0").await.unwrap(), Lookup::Found(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_store_on_the_same_file_is_refused_until_the_first_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("one.db");
    let first = SqliteStore::open(&path).unwrap();
    let err = match SqliteStore::open(&path) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("two stores on one file"),
    };
    assert!(err.contains("in use by another process"), "{err}");
    assert!(err.contains("one.db"), "{err}");
    drop(first);
    SqliteStore::open(&path).expect("free again once the first is closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unfinished_limit_holds_within_a_group_and_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let limit = |max| {
        Some(ActiveLimit {
            max,
            owner: "o".into(),
            among: crate::model::Among::All,
        })
    };
    // Tasks of the owner written before its limit is first checked are counted too.
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    for i in 0..3 {
        let t = super::super::testkit::record(&format!("early{i}"), "o", 1);
        store.create(t, None).await.unwrap();
    }
    // Many creates at once share group transactions: each sees the ones before it in its group.
    let creates = (0..40).map(|i| {
        let store = store.clone();
        tokio::spawn(async move {
            let t = super::super::testkit::record(&format!("t{i:02}"), "o", 2);
            store.create(t, limit(10)).await
        })
    });
    let mut made = Vec::new();
    for c in creates {
        match c.await.unwrap() {
            Ok(Created::New(t)) => made.push(t.id),
            Err(StoreError::TooManyActive {
                active: 10,
                max: 10,
            }) => {}
            other => panic!("expected a task or the limit, got {other:?}"),
        }
    }
    assert_eq!(
        made.len(),
        7,
        "3 earlier tasks and 7 of the 40 reach the limit of 10"
    );
    // A finish makes room for exactly one more.
    let done = TaskChange {
        status: Some(TaskStatus::Completed),
        ..Default::default()
    };
    store
        .update(&made[0], &TaskStatus::ACTIVE, done, 3)
        .await
        .unwrap();
    let more = |id: &str| super::super::testkit::record(id, "o", 4);
    store.create(more("after1"), limit(10)).await.unwrap();
    assert!(matches!(
        store.create(more("after2"), limit(10)).await,
        Err(StoreError::TooManyActive {
            active: 10,
            max: 10
        })
    ));
    drop(store);
    // A new store reads the counts from the rows again.
    let store = SqliteStore::open(&path).unwrap();
    assert!(matches!(
        store.create(more("reopened1"), limit(10)).await,
        Err(StoreError::TooManyActive {
            active: 10,
            max: 10
        })
    ));
    store.create(more("reopened2"), limit(11)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_the_logged_writes_are_rows_loses_none_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    let store = SqliteStore::open(&path).unwrap();
    // From here the writer writes no rows by itself: no flush when idle, none when it closes.
    store.crash.store(true, std::sync::atomic::Ordering::SeqCst);
    let record = super::super::testkit::record;
    let finish = |n: u64| TaskChange {
        status: Some(TaskStatus::Completed),
        outcome: Some(crate::model::Outcome::Result {
            value: serde_json::json!({ "n": n }),
            is_error: false,
        }),
        ..Default::default()
    };
    for id in ["a", "b"] {
        store.create(record(id, "o", 1), None).await.unwrap();
    }
    // A read of rows writes the pending ones: "a" and "b" have rows from here.
    assert_eq!(store.count_active().await.unwrap().working, 2);
    let a = store
        .update("a", &TaskStatus::ACTIVE, finish(1), 10)
        .await
        .unwrap();
    let c = match store.create(record("c", "o", 2), None).await.unwrap() {
        Created::New(t) => t,
        Created::Existing(_) => unreachable!("a new id"),
    };
    let wait = TaskChange {
        status: Some(TaskStatus::InputRequired),
        ..Default::default()
    };
    store
        .update("c", &TaskStatus::ACTIVE, wait, 11)
        .await
        .unwrap();
    let c_done = store
        .update("c", &TaskStatus::ACTIVE, finish(3), 12)
        .await
        .unwrap();
    drop(store);

    // What the process left: "c" has no row and "a" an old one; the log holds both.
    let raw = Connection::open(&path).unwrap();
    let rows: Vec<(String, String)> = raw
        .prepare("SELECT id, status FROM tasks ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        rows,
        [
            ("a".to_string(), "working".to_string()),
            ("b".to_string(), "working".to_string())
        ]
    );
    drop(raw);
    let logged: u64 = changelog::paths_of(&path)
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert!(logged > 0);

    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.get("a").await.unwrap(), Lookup::Found(a));
    assert_eq!(store.get("c").await.unwrap(), Lookup::Found(c_done));
    assert_eq!(c.status, TaskStatus::Working);
    assert_eq!(
        history_of(&store, "c").await,
        [TaskStatus::InputRequired, TaskStatus::Completed]
    );
    assert_eq!(store.count_active().await.unwrap().working, 1, "only b");
    // Written as rows at open: a third open applies none of those frames again (a second insert
    // of "c" would fail).
    drop(store);
    let store = SqliteStore::open(&path).unwrap();
    assert!(matches!(store.get("c").await.unwrap(), Lookup::Found(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_with_an_idempotency_key_is_logged_and_found_by_its_key_before_and_after_a_crash()
{
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keys.db");
    let store = SqliteStore::open(&path).unwrap();
    store.crash.store(true, std::sync::atomic::Ordering::SeqCst);
    let keyed = |id: &str, key: &str, fingerprint: &str| {
        let mut t = super::super::testkit::record(id, "o", 1);
        t.idempotency_key = Some(key.to_string());
        t.fingerprint = fingerprint.to_string();
        t
    };
    // An unkeyed task pending first: a keyed create must not write it as a row.
    store
        .create(super::super::testkit::record("plain", "o", 1), None)
        .await
        .unwrap();
    let first = match store
        .create(keyed("k1", "key-1", "fp"), None)
        .await
        .unwrap()
    {
        Created::New(t) => t,
        Created::Existing(_) => panic!("a new key"),
    };
    assert_eq!(
        store.cache.pinned_len(),
        2,
        "both logged, neither a row yet"
    );
    // Found by its key while pending: by a reader, and by the writer on a second create.
    assert_eq!(
        store.find_by_key("o", "key-1").await.unwrap(),
        Some(first.clone())
    );
    assert_eq!(store.find_by_key("other", "key-1").await.unwrap(), None);
    assert_eq!(
        store
            .create(keyed("k2", "key-1", "fp"), None)
            .await
            .unwrap(),
        Created::Existing(first.clone())
    );
    assert!(matches!(
        store.create(keyed("k3", "key-1", "other"), None).await,
        Err(StoreError::IdempotencyConflict { ref task_id, .. }) if task_id == "k1"
    ));
    assert_eq!(store.cache.pinned_len(), 2, "no lookup wrote rows");
    // Two creates with one key in one group: the second finds the first.
    let (a, b) = tokio::join!(
        store.create(keyed("g1", "key-g", "fp"), None),
        store.create(keyed("g2", "key-g", "fp"), None)
    );
    let ids: Vec<String> = [a.unwrap(), b.unwrap()]
        .into_iter()
        .map(|c| match c {
            Created::New(t) | Created::Existing(t) => t.id,
        })
        .collect();
    assert_eq!(ids[0], ids[1], "one task for one key: {ids:?}");
    drop(store);

    // The process died with the keyed tasks logged only: found by key after the replay.
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.find_by_key("o", "key-1").await.unwrap(),
        Some(first.clone())
    );
    assert_eq!(
        store
            .create(keyed("k4", "key-1", "fp"), None)
            .await
            .unwrap(),
        Created::Existing(first)
    );
    assert!(store.find_by_key("o", "key-g").await.unwrap().is_some());
}

/// The tasks' rows as another process sees them: id and status, by id.
fn rows_of(path: &Path) -> Vec<(String, String)> {
    let raw = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let rows = raw
        .prepare("SELECT id, status FROM tasks ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    rows
}

/// The statuses in task `id`'s history, oldest first.
async fn history_of(store: &SqliteStore, id: &str) -> Vec<TaskStatus> {
    store
        .history(id)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.status)
        .collect()
}

/// Creates tasks `prefix{from..to}` one after another.
async fn create_each(store: &SqliteStore, prefix: &str, from: usize, to: usize) {
    for i in from..to {
        let t = super::super::testkit::record(&format!("{prefix}{i:03}"), "o", i as u64 + 1);
        store.create(t, None).await.unwrap();
    }
}

fn completed(n: u64) -> TaskChange {
    TaskChange {
        status: Some(TaskStatus::Completed),
        outcome: Some(crate::model::Outcome::Result {
            value: serde_json::json!({ "n": n }),
            is_error: false,
        }),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_go_on_while_the_flusher_writes_rows_and_a_read_of_rows_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("held.db");
    let store = SqliteStore::open(&path).unwrap();
    let held = store.flusher_hooks.gate.hold();
    // A flush's worth: the writer hands it over (or a part of it earlier, when the idle flush asks
    // first), and the flusher waits at the gate with it.
    create_each(&store, "a", 0, changelog::FLUSH_TASKS).await;
    // Neither creates nor finishes wait for that batch's rows: they are logged.
    let more: Vec<_> = (0..100)
        .map(|i| {
            let t = super::super::testkit::record(&format!("b{i:03}"), "o", 1);
            store.create(t, None)
        })
        .collect();
    let more = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        futures::future::join_all(more),
    )
    .await
    .expect("creates held up by a flush in flight");
    assert!(more.into_iter().all(|c| c.is_ok()));
    let done = store
        .update("a000", &TaskStatus::ACTIVE, completed(0), 10)
        .await
        .unwrap();
    // Read by id from the records the batch keeps pinned.
    assert_eq!(store.get("a000").await.unwrap(), Lookup::Found(done));
    assert!(matches!(store.get("a063").await.unwrap(), Lookup::Found(_)));
    assert!(rows_of(&path).is_empty(), "no row yet: the flusher is held");
    // A read of rows waits for the batch in flight, then has every task written.
    let counted = tokio::spawn({
        let store = std::sync::Arc::new(store);
        let s = store.clone();
        async move { (s.count_active().await, store) }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !counted.is_finished(),
        "read rows behind the flusher's batch"
    );
    drop(held);
    let (counts, store) = counted.await.unwrap();
    assert_eq!(
        counts.unwrap().working as usize,
        changelog::FLUSH_TASKS + 100 - 1
    );
    let rows = rows_of(&path);
    assert_eq!(rows.len(), changelog::FLUSH_TASKS + 100);
    assert_eq!(rows[0], ("a000".to_string(), "completed".to_string()));
    drop(store);
}

/// Waits (at most 5 s) until the rows hold `n` tasks and nothing is pinned.
async fn written(store: &SqliteStore, path: &Path, n: usize) {
    for _ in 0..50 {
        if rows_of(path).len() == n && store.cache.pinned_len() == 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(rows_of(path).len(), n);
    assert_eq!(store.cache.pinned_len(), 0, "nothing pinned once written");
}

/// Creates a full batch (`a000`…, handed to the flusher), finishes `a000` while the batch is out,
/// waits for the batch's answer (the idle flush asks every 0.2 s), and has one more group
/// (`b000`'s create) take it in. The finished `a000`.
async fn finish_while_a_batch_is_out(store: &SqliteStore) -> TaskRecord {
    create_each(store, "a", 0, changelog::FLUSH_TASKS).await;
    let done = store
        .update("a000", &TaskStatus::ACTIVE, completed(0), 10)
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    create_each(store, "b", 0, 1).await;
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_the_flusher_fails_to_write_is_written_by_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("failing.db");
    let store = SqliteStore::open(&path).unwrap();
    let fail = store.flusher_hooks.fail.clone();
    fail.store(true, std::sync::atomic::Ordering::SeqCst);
    // A task of the failed batch finishes: its create comes back from the flusher, its finish
    // goes on top, and the writer inserts it finished, with the finish in its history once.
    let done = finish_while_a_batch_is_out(&store).await;
    written(&store, &path, changelog::FLUSH_TASKS + 1).await;
    assert_eq!(
        rows_of(&path)[0],
        ("a000".to_string(), "completed".to_string())
    );
    assert_eq!(store.get("a000").await.unwrap(), Lookup::Found(done));
    assert_eq!(history_of(&store, "a000").await, [TaskStatus::Completed]);
    // Hand-offs go on once the flusher writes again.
    fail.store(false, std::sync::atomic::Ordering::SeqCst);
    create_each(&store, "c", 0, changelog::FLUSH_TASKS).await;
    written(&store, &path, 2 * changelog::FLUSH_TASKS + 1).await;
    drop(store);
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.count_active().await.unwrap().working as usize,
        2 * changelog::FLUSH_TASKS
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_commit_failed_after_it_landed_is_not_written_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("landed.db");
    let store = SqliteStore::open(&path).unwrap();
    let lie = store.flusher_hooks.fail_after_commit.clone();
    lie.store(true, std::sync::atomic::Ordering::SeqCst);
    // The finish is pending when the batch's answer comes back. Had the writer taken the batch
    // back, it would insert rows that exist: every flush would fail, and with it every read of
    // rows.
    let done = finish_while_a_batch_is_out(&store).await;
    lie.store(false, std::sync::atomic::Ordering::SeqCst);
    written(&store, &path, changelog::FLUSH_TASKS + 1).await;
    assert_eq!(
        store.count_active().await.unwrap().working as usize,
        changelog::FLUSH_TASKS
    );
    assert_eq!(store.get("a000").await.unwrap(), Lookup::Found(done));
    assert_eq!(history_of(&store, "a000").await, [TaskStatus::Completed]);
    drop(store);
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.count_active().await.unwrap().working as usize,
        changelog::FLUSH_TASKS
    );
    assert_eq!(history_of(&store, "a000").await, [TaskStatus::Completed]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flusher_thread_that_stops_without_an_answer_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gone.db");
    let store = SqliteStore::open(&path).unwrap();
    store
        .flusher_hooks
        .die
        .store(true, std::sync::atomic::Ordering::SeqCst);
    create_each(&store, "a", 0, changelog::FLUSH_TASKS).await;
    let done = store
        .update("a000", &TaskStatus::ACTIVE, completed(0), 10)
        .await
        .unwrap();
    // The count waits for the batch, finds the thread gone, and has the writer read the batch
    // back from the log and write it.
    let counted = tokio::time::timeout(std::time::Duration::from_secs(20), store.count_active())
        .await
        .expect("the writer waited on a flusher that is gone")
        .unwrap();
    assert_eq!(counted.working as usize, changelog::FLUSH_TASKS - 1);
    assert_eq!(rows_of(&path).len(), changelog::FLUSH_TASKS);
    assert_eq!(
        rows_of(&path)[0],
        ("a000".to_string(), "completed".to_string())
    );
    assert_eq!(store.get("a000").await.unwrap(), Lookup::Found(done));
    // The writer flushes by itself from here.
    create_each(&store, "b", 0, changelog::FLUSH_TASKS).await;
    written(&store, &path, 2 * changelog::FLUSH_TASKS).await;
    drop(store);
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.count_active().await.unwrap().working as usize,
        2 * changelog::FLUSH_TASKS - 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_batch_that_cannot_be_read_back_is_left_for_the_replay() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("unread.db");
    let store = SqliteStore::open(&path).unwrap();
    let held = store.flusher_hooks.gate.hold();
    store
        .flusher_hooks
        .die
        .store(true, std::sync::atomic::Ordering::SeqCst);
    // The first batch goes out of the first file and waits at the gate.
    create_each(&store, "a", 0, changelog::FLUSH_TASKS).await;
    // Its frames are gone from under the writer, then the thread stops without an answer.
    let [first, _] = changelog::paths_of(&path);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&first)
        .unwrap()
        .set_len(0)
        .unwrap();
    drop(held);
    // A read of rows fails rather than have a flush record a number past the lost frames.
    let counted = tokio::time::timeout(std::time::Duration::from_secs(20), store.count_active())
        .await
        .expect("the writer waited on a flusher that is gone");
    let err = counted.expect_err("rows written past frames that could not be read back");
    assert!(err.to_string().contains("read back"), "{err}");
    drop(store);
    let raw = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let flushed: i64 = raw
        .query_row("SELECT flushed_seq FROM change_log", [], |r| r.get(0))
        .unwrap();
    assert_eq!(flushed, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_while_a_batch_is_in_flight_replays_both_log_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two.db");
    let store = SqliteStore::open(&path).unwrap();
    // Batches go through the flusher; the read writes the rest (the replay's order across the two
    // files is pinned down by `changelog::tests`, whose batches are handed over by hand: here the
    // idle flush decides which file the held batch is in).
    create_each(&store, "a", 0, changelog::FLUSH_TASKS + 6).await;
    assert_eq!(
        store.count_active().await.unwrap().working as usize,
        changelog::FLUSH_TASKS + 6
    );
    // A batch is held at the gate; what follows goes to the other file, over its old frames:
    // among it the finish of a task whose create is in the held batch.
    let held = store.flusher_hooks.gate.hold();
    create_each(&store, "b", 0, changelog::FLUSH_TASKS).await;
    create_each(&store, "c", 0, 3).await;
    let done = store
        .update("b000", &TaskStatus::ACTIVE, completed(7), 10)
        .await
        .unwrap();
    // The process dies: the flusher writes nothing, nor does the writer when it closes.
    store.crash.store(true, std::sync::atomic::Ordering::SeqCst);
    drop(held);
    drop(store);
    assert_eq!(rows_of(&path).len(), changelog::FLUSH_TASKS + 6);

    // Both files' frames are replayed, the finish after the create.
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.get("b000").await.unwrap(), Lookup::Found(done));
    assert_eq!(history_of(&store, "b000").await, [TaskStatus::Completed]);
    assert_eq!(
        store.count_active().await.unwrap().working as usize,
        2 * changelog::FLUSH_TASKS + 6 + 3 - 1
    );
    drop(store);
    let rows = rows_of(&path);
    assert_eq!(rows.len(), 2 * changelog::FLUSH_TASKS + 6 + 3);
    assert!(rows.contains(&("b000".to_string(), "completed".to_string())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_secret_is_kept_once_with_its_task_and_not_in_its_events() {
    use crate::webhook::WebhookTarget;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secrets.db");
    let secret = "whsec_c2VjcmV0LWtlcHQtb25jZS1mb3ItdGhpcy10ZXN0";
    let mut t = super::super::testkit::record("hooked", "alice", 1_000);
    t.webhooks = vec![WebhookTarget {
        url: "https://a.example/hook".into(),
        secret: secret.into(),
        events: vec![],
        subscription: None,
    }];
    let secrets_in_events = |path: &Path| -> (i64, i64) {
        let raw = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        raw.query_row(
            "SELECT count(*), count(*) FILTER (WHERE secret <> '') FROM webhook_outbox",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
    };
    {
        let store = SqliteStore::open(&path).unwrap();
        store.create(t, None).await.unwrap();
        store
            .update("hooked", &TaskStatus::ACTIVE, completed(2_000), 2_000)
            .await
            .unwrap();
        assert_eq!(secrets_in_events(&path), (1, 0), "the event holds no copy");
        let claimed = store
            .claim_deliveries("node-a", 3_000, 30_000, 10)
            .await
            .unwrap();
        assert_eq!(
            claimed[0].entry.secret, secret,
            "a claim reads it from the task"
        );
    }
    // What builds before schema version 12 wrote: a copy in each event. Opening drops it.
    {
        let raw = Connection::open(&path).unwrap();
        raw.execute("UPDATE webhook_outbox SET secret = ?1", [secret])
            .unwrap();
        raw.execute_batch("PRAGMA user_version = 11").unwrap();
    }
    assert_eq!(secrets_in_events(&path), (1, 1));
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        secrets_in_events(&path),
        (1, 0),
        "the migration drops the copies"
    );
    let claimed = store
        .claim_deliveries("node-b", 1 << 40, 1 << 41, 10)
        .await
        .unwrap();
    assert_eq!(claimed[0].entry.secret, secret);
}

/// What a process does to the store in the model-based crash test below.
#[derive(Clone, Debug)]
enum Op {
    /// Creates the task of this number, if it is not there.
    Create(u8),
    /// Takes a working task over as a new attempt (what a resume writes).
    Resume(u8),
    /// Sets a working task's status message (a change that keeps the status).
    Note(u8),
    /// Finishes a working task.
    Finish(u8),
    /// Reads rows (which flushes what is pending).
    ReadRows,
    /// Holds the flusher's next batch in flight, or lets a held one go.
    ToggleGate,
    /// Waits past the idle flush.
    Idle,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0u8..12).prop_map(Op::Create),
        2 => (0u8..12).prop_map(Op::Resume),
        2 => (0u8..12).prop_map(Op::Note),
        3 => (0u8..12).prop_map(Op::Finish),
        1 => Just(Op::ReadRows),
        1 => Just(Op::ToggleGate),
        1 => Just(Op::Idle),
    ]
}

/// Runs `lifetimes` processes one after another on one file, each doing its ops and then closing
/// or dying (`true`: as kill -9 would: neither the flusher nor the writer writes anything more);
/// after each, every write a caller was answered for must be what the next process reads.
async fn lifetimes_lose_nothing(lifetimes: Vec<(Vec<Op>, bool)>) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("life.db");
    let mut model: std::collections::BTreeMap<String, TaskRecord> = Default::default();
    let mut now = 1_000u64;
    for (n, (ops, crash)) in lifetimes.into_iter().enumerate() {
        let store = SqliteStore::open(&path).map_err(|e| format!("open {n}: {e}"))?;
        for (id, want) in &model {
            match store.get(id).await {
                Ok(Lookup::Found(got)) if got == *want => {}
                other => {
                    return Err(format!(
                        "process {n} reads {id} as {other:?}, but {want:?} was acknowledged"
                    ))
                }
            }
        }
        let mut held = None;
        for op in ops {
            now += 10;
            let write = |k: u8| format!("t{k}");
            match op {
                Op::Create(k) => {
                    if let std::collections::btree_map::Entry::Vacant(slot) = model.entry(write(k))
                    {
                        let rec = super::super::testkit::record(slot.key(), "alice", now);
                        store
                            .create(rec.clone(), None)
                            .await
                            .map_err(|e| e.to_string())?;
                        slot.insert(rec);
                    }
                }
                Op::Resume(k) | Op::Note(k) | Op::Finish(k) => {
                    let id = write(k);
                    let Some(was) = model.get(&id) else { continue };
                    if was.status.is_terminal() {
                        continue;
                    }
                    let change = match op {
                        Op::Resume(_) => TaskChange {
                            attempt: Some(was.attempt + 1),
                            lease: Some((Some(format!("node-{n}")), Some(now + 30_000))),
                            noted: true,
                            ..Default::default()
                        },
                        Op::Note(_) => TaskChange {
                            status_message: Some(Some(format!("at {now}"))),
                            ..Default::default()
                        },
                        _ => completed(now),
                    };
                    let rec = store
                        .update(&id, &TaskStatus::ACTIVE, change, now)
                        .await
                        .map_err(|e| format!("update {id}: {e:?}"))?;
                    model.insert(id, rec);
                }
                Op::ReadRows => {
                    // A read of rows waits for the batch in flight: let it go first.
                    held = None;
                    store.count_active().await.map_err(|e| e.to_string())?;
                }
                Op::ToggleGate => {
                    held = match held.take() {
                        Some(h) => {
                            drop(h);
                            None
                        }
                        None => Some(store.flusher_hooks.gate.hold()),
                    };
                }
                Op::Idle => {
                    tokio::time::sleep(changelog::IDLE_FLUSH + std::time::Duration::from_millis(50))
                        .await
                }
            }
        }
        if crash {
            store.crash.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        drop(held);
        drop(store);
    }
    let store = SqliteStore::open(&path).map_err(|e| format!("open at the end: {e}"))?;
    for (id, want) in &model {
        match store.get(id).await {
            Ok(Lookup::Found(got)) if got == *want => {}
            other => return Err(format!("at the end, {id} reads {other:?}, not {want:?}")),
        }
    }
    Ok(())
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 24, ..Default::default() })]

    /// Processes on one file, each closing or dying after random writes, flushes and batches held
    /// in flight: whatever a caller was answered for, the next process reads (the window of issue
    /// 48's item 11 is looked for here).
    #[test]
    fn processes_that_close_or_die_in_turn_lose_no_acknowledged_write(
        lifetimes in proptest::collection::vec(
            (proptest::collection::vec(op(), 1..40), proptest::bool::ANY),
            1..5,
        )
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let outcome = rt.block_on(lifetimes_lose_nothing(lifetimes));
        proptest::prop_assert!(outcome.is_ok(), "{}", outcome.unwrap_err());
    }
}
