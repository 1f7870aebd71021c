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
    // Enough that the first ones are out of both generations.
    let n = 2 * cache::GENERATION + 2 * super::writer::MAX_GROUP + 100;
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
    // Two generations at most.
    assert!(
        store.cache.len() <= 2 * cache::GENERATION,
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
async fn every_acknowledged_write_is_a_row_another_connection_reads_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.db");
    let store = SqliteStore::open(&path).unwrap();
    let record = super::super::testkit::record;
    // What another process (`sqlite3`, a backup, Litestream) reads once a caller heard "done":
    // no write waits in memory or in a file of our own.
    store.create(record("a", "o", 1), None).await.unwrap();
    assert_eq!(rows_of(&path), [("a".into(), "working".into())]);
    let wait = TaskChange {
        status: Some(TaskStatus::InputRequired),
        ..Default::default()
    };
    store
        .update("a", &TaskStatus::ACTIVE, wait, 11)
        .await
        .unwrap();
    assert_eq!(rows_of(&path), [("a".into(), "input_required".into())]);
    store
        .update("a", &TaskStatus::ACTIVE, completed(3), 12)
        .await
        .unwrap();
    assert_eq!(rows_of(&path), [("a".into(), "completed".into())]);
    let raw = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let (history, outcome): (String, String) = raw
        .query_row(
            "SELECT history, outcome FROM tasks WHERE id = 'a'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(
        history.contains("input_required") && history.contains("completed"),
        "{history}"
    );
    assert!(outcome.contains(r#""n":3"#), "{outcome}");
    drop(raw);
    assert_eq!(
        history_of(&store, "a").await,
        [TaskStatus::InputRequired, TaskStatus::Completed]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_files_beside_the_database_are_sqlites_own_and_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("only.db");
    let store = SqliteStore::open(&path).unwrap();
    create_each(&store, "t", 0, 200).await;
    for i in 0..100 {
        store
            .update(&format!("t{i:03}"), &TaskStatus::ACTIVE, completed(i), 10)
            .await
            .unwrap();
    }
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["only.db", "only.db-shm", "only.db-wal", "only.db.lock"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_with_sqlites_backup_api_under_create_load_holds_every_task_acknowledged_before_it_began(
) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.db");
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let acknowledged = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    // Four clients creating as fast as the writer takes them, as in the report of issue 49.
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let (store, acknowledged, stop) = (store.clone(), acknowledged.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let id = format!("c{c}-{i}");
                    let t = super::super::testkit::record(&id, "o", i + 1);
                    store.create(t, None).await.unwrap();
                    acknowledged.lock().unwrap().push(id);
                    i += 1;
                }
            })
        })
        .collect();
    let mut checked = 0;
    for round in 0..5 {
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        // Every task a client heard of before the backup begins.
        let before: Vec<String> = acknowledged.lock().unwrap().clone();
        let copy = dir.path().join(format!("backup-{round}.db"));
        let src = path.clone();
        let dst = copy.clone();
        let copy_made = tokio::task::spawn_blocking(move || {
            let from = Connection::open_with_flags(&src, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
            let mut to = Connection::open(&dst).unwrap();
            let backup = rusqlite::backup::Backup::new(&from, &mut to).unwrap();
            // All pages in one step, under one read transaction: stepping a few pages at a time
            // starts over whenever a commit lands between steps, which under this load may be
            // always.
            loop {
                match backup.step(-1).unwrap() {
                    rusqlite::backup::StepResult::Done => break,
                    _ => std::thread::sleep(std::time::Duration::from_millis(1)),
                }
            }
        });
        tokio::time::timeout(std::time::Duration::from_secs(30), copy_made)
            .await
            .expect("the backup did not finish in 30 s")
            .unwrap();
        let raw = Connection::open_with_flags(&copy, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        let ids: std::collections::HashSet<String> = raw
            .prepare("SELECT id FROM tasks")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let missing: Vec<&String> = before.iter().filter(|id| !ids.contains(*id)).collect();
        assert!(
            missing.is_empty(),
            "backup {round} lacks {} of the {} tasks acknowledged before it began, e.g. {:?}",
            missing.len(),
            before.len(),
            &missing[..missing.len().min(5)]
        );
        checked += before.len();
    }
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.await.unwrap();
    }
    assert!(checked > 100, "too little load to show anything: {checked}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_an_earlier_build_left_with_writes_in_its_change_log_gets_them_as_rows_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("upgrade.db");
    let store = SqliteStore::open(&path).unwrap();
    let a = match store
        .create(super::super::testkit::record("a", "o", 1), None)
        .await
        .unwrap()
    {
        Created::New(t) => t,
        Created::Existing(_) => unreachable!("a new id"),
    };
    drop(store);
    // What an earlier build's crash left: "a" finished and "b" created in the log only.
    let [first, second] = old_log::paths_of(&path);
    let mut a_done = a.clone();
    a_done.status = TaskStatus::Completed;
    a_done.updated_at = 9;
    let finish = Transition {
        at: 9,
        status: TaskStatus::Completed,
        message: None,
    };
    let b = super::super::testkit::record("b", "o", 2);
    old_log::append_frames(
        &first,
        0,
        &[
            (&a_done, false, std::slice::from_ref(&finish)),
            (&b, true, &[]),
        ],
    );
    std::fs::write(&second, b"").unwrap();
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.get("a").await.unwrap(), Lookup::Found(a_done));
    assert_eq!(store.get("b").await.unwrap(), Lookup::Found(b));
    assert_eq!(history_of(&store, "a").await, [TaskStatus::Completed]);
    assert!(!first.exists() && !second.exists(), "the old log stays");
    assert_eq!(store.count_active().await.unwrap().working, 1, "only b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_with_one_idempotency_key_in_one_group_make_one_task() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("keys.db")).unwrap();
    let keyed = |id: &str, key: &str, fingerprint: &str| {
        let mut t = super::super::testkit::record(id, "o", 1);
        t.idempotency_key = Some(key.to_string());
        t.fingerprint = fingerprint.to_string();
        t
    };
    // Queued together, so that the writer takes them into one group: the second finds the first
    // among the group's own writes.
    let creates: Vec<_> = (0..8)
        .map(|i| store.create(keyed(&format!("g{i}"), "key-g", "fp"), None))
        .collect();
    let ids: std::collections::BTreeSet<String> = futures::future::join_all(creates)
        .await
        .into_iter()
        .map(|c| match c.unwrap() {
            Created::New(t) | Created::Existing(t) => t.id,
        })
        .collect();
    assert_eq!(ids.len(), 1, "one task for one key: {ids:?}");
    assert!(matches!(
        store.create(keyed("other", "key-g", "another"), None).await,
        Err(StoreError::IdempotencyConflict { ref task_id, .. }) if ids.contains(task_id)
    ));
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
        // As a version 11 file is: without what later migrations add.
        raw.execute_batch(
            "DROP TABLE events; DROP TABLE event_log; DROP TABLE event_subscriptions; \
             DROP TABLE event_verifications; DROP TABLE event_deliveries; DROP TABLE event_gaps; \
             ALTER TABLE task_steps DROP COLUMN duration_ms; \
             ALTER TABLE task_steps DROP COLUMN error; DROP TABLE task_signals; \
             PRAGMA user_version = 11",
        )
        .unwrap();
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
    /// Reads rows.
    ReadRows,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0u8..12).prop_map(Op::Create),
        2 => (0u8..12).prop_map(Op::Resume),
        2 => (0u8..12).prop_map(Op::Note),
        3 => (0u8..12).prop_map(Op::Finish),
        1 => Just(Op::ReadRows),
    ]
}

/// Copies what a process killed now would leave of the database at `from` (the file and its WAL,
/// as the kernel holds them; nothing of the process's memory) to `to`.
fn crash_image(from: &Path, to: &Path) {
    for suffix in ["", "-wal"] {
        let mut src = from.as_os_str().to_owned();
        src.push(suffix);
        let mut dst = to.as_os_str().to_owned();
        dst.push(suffix);
        if Path::new(&src).exists() {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// Runs `lifetimes` processes one after another, each doing its ops and then closing or dying
/// (`true`: the next process opens what a kill -9 would leave: a copy of the file and its WAL made
/// while the store is open); after each, every write a caller was answered for must be what the
/// next process reads.
async fn lifetimes_lose_nothing(lifetimes: Vec<(Vec<Op>, bool)>) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let mut path = dir.path().join("life-0.db");
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
                    let counted = store.count_active().await.map_err(|e| e.to_string())?;
                    let working = model
                        .values()
                        .filter(|t| t.status == TaskStatus::Working)
                        .count();
                    if counted.working as usize != working {
                        return Err(format!(
                            "process {n} counts {} working rows, {working} were acknowledged",
                            counted.working
                        ));
                    }
                }
            }
        }
        let next = dir.path().join(format!("life-{}.db", n + 1));
        if crash {
            crash_image(&path, &next);
            drop(store);
        } else {
            drop(store);
            crash_image(&path, &next);
        }
        path = next;
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

    /// Processes in turn, each closing or dying after random writes: whatever a caller was
    /// answered for, the next process reads from the file and its WAL alone.
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
