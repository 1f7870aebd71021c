//! The PostgreSQL store's own tests, beside the contract test kit: URLs, the input hand-over,
//! migrations and limits under concurrent replicas.

use super::connect::{parse_url, redact, POOL_SIZE};
use super::*;
use crate::store::Among;
use std::sync::Arc;
use tokio_postgres::NoTls;

/// The test database (`MCP_TASKS_TEST_PG`, else the machine's server).
fn test_url() -> String {
    std::env::var("MCP_TASKS_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A schema name no other test run uses.
fn fresh_schema(tag: &str) -> String {
    format!("t_{tag}_{}", &crate::ids::random_id()[..12])
}

async fn drop_schema(schema: &str) {
    if let Ok((client, conn)) = tokio_postgres::connect(&test_url(), NoTls).await {
        tokio::spawn(conn);
        let _ = client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .await;
    }
}

#[test]
fn the_pool_size_comes_from_the_url_and_is_not_passed_on() {
    let (config, size) =
        parse_url("postgres://u@h:5433/db?pool_max_conns=4&application_name=x").unwrap();
    assert_eq!(size, 4);
    assert_eq!(config.get_application_name(), Some("x"));
    assert_eq!(config.get_dbname(), Some("db"));
    let (_, size) = parse_url("postgres://u@h/db?pool_max_conns=3").unwrap();
    assert_eq!(size, 3);
    let (config, size) = parse_url("host=h user=u pool_max_conns=2 dbname=d").unwrap();
    assert_eq!((size, config.get_dbname()), (2, Some("d")));
    assert_eq!(parse_url("postgres://u@h/db").unwrap().1, POOL_SIZE);
    for bad in [
        "postgres://h/db?pool_max_conns=0",
        "postgres://h/db?pool_max_conns=many",
    ] {
        let e = parse_url(bad).unwrap_err().to_string();
        assert!(e.contains("pool_max_conns"), "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_the_store_test_kit() {
    let run = fresh_schema("kit");
    let counter = std::sync::atomic::AtomicUsize::new(0);
    let url = test_url();
    let made = std::sync::Mutex::new(Vec::new());
    super::super::testkit::run_all(|| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let schema = format!("{run}_{n}");
        made.lock().unwrap().push(schema.clone());
        let url = url.clone();
        async move { PostgresStore::open_in_schema(&url, &schema).await.unwrap() }
    })
    .await;
    for schema in made.into_inner().unwrap() {
        drop_schema(&schema).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_request_is_handed_to_one_stream_at_a_time() {
    let schema = fresh_schema("hand");
    let s = PostgresStore::open_in_schema(&test_url(), &schema)
        .await
        .unwrap();
    s.create(super::super::testkit::record("t1", "alice", 1_000), None)
        .await
        .unwrap();
    let input = InputRecord {
        key: "q1".into(),
        task_id: "t1".into(),
        method: "ask".into(),
        params: serde_json::json!({"message": "ok?"}),
        created_at: 2_000,
        response: None,
        answered_at: None,
    };
    s.add_input(input, 2_000).await.unwrap();
    assert_eq!(
        s.hand_input("q1", None, Some("a 1 s")).await.unwrap(),
        Handed::Done
    );
    // A second claimant finds the first; only a hand-over from it succeeds.
    assert_eq!(
        s.hand_input("q1", None, Some("b 2 s")).await.unwrap(),
        Handed::HeldBy("a 1 s".into())
    );
    assert_eq!(
        s.hand_input("q1", Some("a 1 s"), Some("b 2 s"))
            .await
            .unwrap(),
        Handed::Done
    );
    assert_eq!(
        s.hand_input("q1", Some("a 1 s"), None).await.unwrap(),
        Handed::HeldBy("b 2 s".into()),
        "a stale holder cannot release it"
    );
    assert_eq!(
        s.hand_input("q1", Some("b 2 s"), None).await.unwrap(),
        Handed::Done
    );
    assert_eq!(
        s.hand_input("q1", Some("b 2 s"), Some("c 3 s"))
            .await
            .unwrap(),
        Handed::Free
    );
    let yes = InputResponse::Result {
        value: serde_json::json!({"action": "accept"}),
    };
    s.answer_input("q1", yes, 3_000).await.unwrap();
    assert_eq!(
        s.hand_input("q1", None, Some("c 3 s")).await.unwrap(),
        Handed::Gone
    );
    assert_eq!(
        s.hand_input("nope", None, Some("c 3 s")).await.unwrap(),
        Handed::Gone
    );
    drop(s);
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_migrating_at_once_apply_each_migration_once() {
    let schema = fresh_schema("migrate");
    let url = test_url();
    let opens = (0..4).map(|_| PostgresStore::open_in_schema(&url, &schema));
    for store in futures::future::join_all(opens).await {
        store.unwrap();
    }
    let (client, conn) = tokio_postgres::connect(&url, NoTls).await.unwrap();
    tokio::spawn(conn);
    let n: i64 = client
        .query_one(
            &format!("SELECT COUNT(*) FROM {schema}.mcp_tasks_migrations"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, i64::from(schema::latest()));
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_is_refused() {
    let schema = fresh_schema("newer");
    let url = test_url();
    PostgresStore::open_in_schema(&url, &schema).await.unwrap();
    let (client, conn) = tokio_postgres::connect(&url, NoTls).await.unwrap();
    tokio::spawn(conn);
    client
        .execute(
            &format!("INSERT INTO {schema}.mcp_tasks_migrations VALUES ($1, 'from the future', 0)"),
            &[&(schema::latest() + 1)],
        )
        .await
        .unwrap();
    let err = PostgresStore::open_in_schema(&url, &schema)
        .await
        .unwrap_err();
    assert!(
        err.chain().contains("newer than this build"),
        "{}",
        err.chain()
    );
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_running_task_limit_is_exact_under_concurrent_creates() {
    let schema = fresh_schema("limit");
    let url = test_url();
    // Two stores on one schema: two replicas.
    let a = std::sync::Arc::new(PostgresStore::open_in_schema(&url, &schema).await.unwrap());
    let b = std::sync::Arc::new(PostgresStore::open_in_schema(&url, &schema).await.unwrap());
    let limit = ActiveLimit {
        max: 5,
        owner: "alice".into(),
        among: Among::All,
    };
    let creates = (0..40).map(|i| {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        let limit = limit.clone();
        async move {
            let t = super::super::testkit::record(&format!("c{i}"), "alice", 1_000 + i);
            store.create(t, Some(limit)).await
        }
    });
    let results = futures::future::join_all(creates).await;
    let made = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(made, 5, "exactly the limit: {results:?}");
    assert!(results
        .iter()
        .filter_map(|r| r.as_ref().err())
        .all(|e| matches!(e, StoreError::TooManyActive { .. })));
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_caps_are_exact_under_concurrent_creates() {
    let schema = fresh_schema("session_cap");
    let url = test_url();
    let a = std::sync::Arc::new(PostgresStore::open_in_schema(&url, &schema).await.unwrap());
    let b = std::sync::Arc::new(PostgresStore::open_in_schema(&url, &schema).await.unwrap());
    // 40 creates from two replicas, two prefixes: at most 3 per prefix, 5 in all.
    let creates = (0..40u64).map(|i| {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        let prefix = if i % 4 < 2 { "p1-" } else { "p2-" };
        async move {
            let s = SessionRecord {
                id: format!("{prefix}{i}"),
                owner: "anon".into(),
                data: serde_json::json!({}),
                created_at: 1_000,
                last_seen: 1_000,
                idle_ms: Some(60_000),
            };
            let limit = SessionLimit {
                max: 5,
                per_prefix: Some((prefix.into(), 3)),
            };
            (prefix, store.create_session(&s, &limit).await)
        }
    });
    let results = futures::future::join_all(creates).await;
    let made = |p: &str| results.iter().filter(|(q, r)| *q == p && r.is_ok()).count();
    assert_eq!(
        made("p1-") + made("p2-"),
        5,
        "exactly the owner's cap: {results:?}"
    );
    assert!(made("p1-") <= 3 && made("p2-") <= 3);
    assert!(results
        .iter()
        .filter_map(|(_, r)| r.as_ref().err())
        .all(|e| matches!(e, StoreError::TooManySessions { .. })));
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_session_limits_are_exact_under_concurrent_creates() {
    let schema = fresh_schema("session_limit");
    let url = test_url();
    let a = std::sync::Arc::new(PostgresStore::open_in_schema(&url, &schema).await.unwrap());
    let b = std::sync::Arc::new(PostgresStore::open_in_schema(&url, &schema).await.unwrap());
    let creates = (0..40u64).map(|i| {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        let session = if i % 4 < 2 { "s1" } else { "s2" };
        async move {
            let mut t = super::super::testkit::record(&format!("c{i}"), "alice", 1_000 + i);
            t.session = Some(session.into());
            let limit = ActiveLimit {
                max: 3,
                owner: "alice".into(),
                among: Among::Session(session.into()),
            };
            (session, store.create(t, Some(limit)).await)
        }
    });
    let results = futures::future::join_all(creates).await;
    for session in ["s1", "s2"] {
        let made = results
            .iter()
            .filter(|(s, r)| *s == session && r.is_ok())
            .count();
        assert_eq!(made, 3, "exactly the limit in {session}");
    }
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_under_concurrent_creates_makes_one_task() {
    let schema = fresh_schema("key");
    let url = test_url();
    let a = std::sync::Arc::new(PostgresStore::open_in_schema(&url, &schema).await.unwrap());
    let b = std::sync::Arc::new(PostgresStore::open_in_schema(&url, &schema).await.unwrap());
    let creates = (0..30u64).map(|i| {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        async move {
            let mut t = super::super::testkit::record(&format!("k{i}"), "alice", 1_000 + i);
            t.idempotency_key = Some("same".into());
            store.create(t, None).await.unwrap()
        }
    });
    let results = futures::future::join_all(creates).await;
    let new: Vec<_> = results
        .iter()
        .filter_map(|r| match r {
            Created::New(t) => Some(t.id.clone()),
            Created::Existing(_) => None,
        })
        .collect();
    assert_eq!(new.len(), 1, "{results:?}");
    assert!(results.iter().all(|r| match r {
        Created::New(t) | Created::Existing(t) => t.id == new[0],
    }));
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_updates_from_two_replicas_lose_nothing() {
    let schema = fresh_schema("cas");
    let url = test_url();
    let a = std::sync::Arc::new(PostgresStore::open_in_schema(&url, &schema).await.unwrap());
    let b = std::sync::Arc::new(PostgresStore::open_in_schema(&url, &schema).await.unwrap());
    a.create(super::super::testkit::record("p1", "alice", 1_000), None)
        .await
        .unwrap();
    // Progress never decreases: whatever order 40 racing reports land in, the last word is 40 —
    // unless a write based on a stale read overwrote a later one.
    let reports = (1..=40u64).map(|i| {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        async move {
            let change = TaskChange {
                progress: Some(crate::store::ProgressUpdate {
                    progress: i as f64,
                    total: Some(40.0),
                    message: None,
                }),
                ..Default::default()
            };
            store
                .update("p1", &TaskStatus::ACTIVE, change, 2_000 + i)
                .await
                .unwrap();
        }
    });
    futures::future::join_all(reports).await;
    let Lookup::Found(t) = a.get("p1").await.unwrap() else {
        panic!("gone")
    };
    assert_eq!(t.progress, Some(40.0));
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_changed_by_another_replica_is_read_again_not_overwritten() {
    let schema = fresh_schema("hint");
    let url = test_url();
    let a = PostgresStore::open_in_schema(&url, &schema).await.unwrap();
    let b = PostgresStore::open_in_schema(&url, &schema).await.unwrap();
    // A created it, so A remembers it; B then changes it twice.
    a.create(super::super::testkit::record("h1", "alice", 1_000), None)
        .await
        .unwrap();
    let report = |p: f64| TaskChange {
        progress: Some(crate::store::ProgressUpdate {
            progress: p,
            total: Some(10.0),
            message: None,
        }),
        ..Default::default()
    };
    b.update("h1", &TaskStatus::ACTIVE, report(5.0), 2_000)
        .await
        .unwrap();
    // A's update starts from its stale copy, loses the compare-and-set, reads, and keeps B's 5.
    let t = a
        .update("h1", &TaskStatus::ACTIVE, report(3.0), 3_000)
        .await
        .unwrap();
    assert_eq!(t.progress, Some(5.0), "progress never goes back: {t:?}");
    // B finishes it; A (remembering it as working) must not write over the end.
    b.update(
        "h1",
        &TaskStatus::ACTIVE,
        TaskChange {
            status: Some(TaskStatus::Cancelled),
            ..Default::default()
        },
        4_000,
    )
    .await
    .unwrap();
    let r = a
        .update(
            "h1",
            &TaskStatus::ACTIVE,
            TaskChange {
                status: Some(TaskStatus::Completed),
                ..Default::default()
            },
            5_000,
        )
        .await;
    assert!(
        matches!(&r, Err(UpdateError::Conflict(t)) if t.status == TaskStatus::Cancelled),
        "{r:?}"
    );
    drop((a, b));
    drop_schema(&schema).await;
}

#[test]
fn passwords_are_not_shown() {
    assert_eq!(
        redact("postgres://alice:secret@db:5432/tasks"),
        "postgres://alice:***@db:5432/tasks"
    );
    assert_eq!(
        redact("postgres://alice@db/tasks"),
        "postgres://alice@db/tasks"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_committed_together_lose_nothing_and_a_failing_one_costs_the_others_nothing() {
    let schema = fresh_schema("group");
    let url = test_url();
    let store = std::sync::Arc::new(PostgresStore::open_in_schema(&url, &schema).await.unwrap());
    let ids: Vec<String> = (0..40).map(|i| format!("g{i:02}")).collect();
    for id in &ids {
        store
            .create(super::super::testkit::record(id, "alice", 1_000), None)
            .await
            .unwrap();
    }
    // Forty writes at once: all but the first queue up behind it and commit together. One of them
    // names a lease holder with a NUL byte, which PostgreSQL refuses in text (messages are made
    // storable before they reach a store; a holder is the engine's own): its group is rolled back
    // and each write made again alone.
    let finishes = ids.iter().enumerate().map(|(i, id)| {
        let store = store.clone();
        async move {
            let change = if i == 17 {
                TaskChange {
                    lease: Some((Some("bad\0holder".into()), Some(3_000))),
                    ..Default::default()
                }
            } else {
                TaskChange {
                    status: Some(TaskStatus::Completed),
                    status_message: Some(Some("done".to_string())),
                    ..Default::default()
                }
            };
            (
                i,
                store.update(id, &TaskStatus::ACTIVE, change, 2_000).await,
            )
        }
    });
    for (i, result) in futures::future::join_all(finishes).await {
        assert_eq!(result.is_err(), i == 17, "write {i}: {result:?}");
    }
    for (i, id) in ids.iter().enumerate() {
        let Lookup::Found(t) = store.get(id).await.unwrap() else {
            panic!("{id} is gone")
        };
        let (status, message) = if i == 17 {
            (TaskStatus::Working, None)
        } else {
            (TaskStatus::Completed, Some("done"))
        };
        assert_eq!(t.status, status, "{id}");
        assert_eq!(t.status_message.as_deref(), message, "{id}");
        // Written once: one history row for the finish (a rolled-back group left none behind).
        let history = store.history(id).await.unwrap();
        assert_eq!(history.len(), usize::from(i != 17), "{id}: {history:?}");
    }
    drop_schema(&schema).await;
}

/// A task record without a time to live (the kit's records expired long ago by the clock).
fn unexpiring(id: &str) -> crate::model::TaskRecord {
    let mut t = super::super::testkit::record(id, "alice", 1_000);
    t.ttl_ms = None;
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_finished_here_is_read_from_memory_while_fresh_and_not_after() {
    let schema = fresh_schema("fin");
    let url = test_url();
    let store = PostgresStore::open_in_schema(&url, &schema).await.unwrap();
    for id in ["f1", "f2"] {
        store.create(unexpiring(id), None).await.unwrap();
        let done = TaskChange {
            status: Some(TaskStatus::Completed),
            ..Default::default()
        };
        store
            .update(id, &TaskStatus::ACTIVE, done, 2_000)
            .await
            .unwrap();
    }
    // Deleted behind this store's back, as an operator's purge run elsewhere would.
    let (client, conn) = tokio_postgres::connect(&url, NoTls).await.unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!("DELETE FROM {schema}.tasks"))
        .await
        .unwrap();
    assert!(
        matches!(store.get("f1").await.unwrap(), Lookup::Found(t) if t.status == TaskStatus::Completed),
        "a poll right after the finish is answered from memory"
    );
    // A purge here forgets at once.
    let policy = PurgePolicy {
        now: 3_000,
        finished_grace_ms: 0,
        tombstone_ms: 0,
        finished_before: None,
    };
    store.purge(policy).await.unwrap();
    assert!(matches!(store.get("f1").await.unwrap(), Lookup::Missing));
    // And one done elsewhere shows once the finish is no longer fresh.
    store.create(unexpiring("f3"), None).await.unwrap();
    let done = TaskChange {
        status: Some(TaskStatus::Completed),
        ..Default::default()
    };
    store
        .update("f3", &TaskStatus::ACTIVE, done, 2_000)
        .await
        .unwrap();
    client
        .batch_execute(&format!("DELETE FROM {schema}.tasks"))
        .await
        .unwrap();
    assert!(matches!(store.get("f3").await.unwrap(), Lookup::Found(_)));
    tokio::time::sleep(FINISHED_FRESH + std::time::Duration::from_millis(100)).await;
    assert!(matches!(store.get("f3").await.unwrap(), Lookup::Missing));
    drop_schema(&schema).await;
}

/// `test_url()` with `schema` first on its search path (as the relay finds its channel).
fn url_in_schema(schema: &str) -> String {
    let base = test_url();
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}options=-c%20search_path%3D{schema}")
}

/// A connection listening on the relays' channel of `schema`, as a replica would, and one to
/// speak on it as another relay: what the relays under test say arrives on the receiver.
async fn overhear(
    schema: &str,
) -> (
    tokio_postgres::Client,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let (client, mut conn) = tokio_postgres::connect(&test_url(), NoTls).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(m)) = std::future::poll_fn(|cx| conn.poll_message(cx)).await {
            if let tokio_postgres::AsyncMessage::Notification(n) = m {
                let _ = tx.send(n.payload().to_string());
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN mcp_tasks_{schema}"))
        .await
        .unwrap();
    (client, rx)
}

/// Says `note` on `schema`'s channel as the relay `relay-test`.
async fn say(client: &tokio_postgres::Client, schema: &str, note: &str) {
    let payload =
        format!(r#"[{{"from":"relay-test","task":"","kind":"note","note":{{"relay":"{note}"}}}}]"#);
    client
        .execute(
            "SELECT pg_notify($1, $2)",
            &[&format!("mcp_tasks_{schema}"), &payload],
        )
        .await
        .unwrap();
}

/// Whether a payload naming `needle` arrives within `wait` (others are let go).
async fn arrives(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    needle: &str,
    wait: std::time::Duration,
) -> bool {
    let until = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(until, rx.recv()).await {
            Ok(Some(p)) if p.contains(needle) => return true,
            Ok(Some(_)) => continue,
            _ => return false,
        }
    }
}

/// A notifier with a relay on `schema`'s channel (short presence timing), and what stops it.
async fn relay_on(
    schema: &str,
    store: Arc<dyn TaskStore>,
) -> (
    crate::notifier::Notifier,
    tokio_util::sync::CancellationToken,
) {
    relay_timed(schema, store, short_presence()).await
}

/// [`relay_on`] with the presence timing given.
async fn relay_timed(
    schema: &str,
    store: Arc<dyn TaskStore>,
    timing: super::presence::Timing,
) -> (
    crate::notifier::Notifier,
    tokio_util::sync::CancellationToken,
) {
    let notifier = crate::notifier::Notifier::new();
    let stop = tokio_util::sync::CancellationToken::new();
    relay::start_timed(
        &url_in_schema(schema),
        notifier.clone(),
        store,
        stop.clone(),
        timing,
    )
    .await
    .unwrap();
    (notifier, stop)
}

fn short_presence() -> super::presence::Timing {
    super::presence::Timing {
        silence: std::time::Duration::from_millis(1_500),
        heartbeat: std::time::Duration::from_millis(200),
        grace: std::time::Duration::from_millis(600),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_alone_sends_no_events_and_sends_again_once_another_is_heard() {
    use crate::notifier::TaskEvent;
    let schema = fresh_schema("alone");
    let store: Arc<dyn TaskStore> = Arc::new(
        PostgresStore::open_in_schema(&test_url(), &schema)
            .await
            .unwrap(),
    );
    let (client, mut heard) = overhear(&schema).await;
    let (notifier, stop) = relay_on(&schema, store).await;
    let event = |id: &str| TaskEvent::Created(Arc::new(unexpiring(id)));
    let wait = std::time::Duration::from_millis(800);
    assert!(arrives(&mut heard, r#""relay":"hello""#, wait).await);
    notifier.publish(event("within-grace"));
    assert!(
        arrives(&mut heard, "within-grace", wait).await,
        "a new relay sends before it knows it is alone"
    );
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    notifier.publish(event("alone"));
    assert!(
        !arrives(&mut heard, "alone", wait).await,
        "nobody else was heard: the event is not sent"
    );
    assert!(
        arrives(&mut heard, r#""relay":"here""#, wait).await,
        "a relay alone still says it is there"
    );
    // Another relay says hello: this one answers that it sends again, and does.
    say(&client, &schema, "hello").await;
    assert!(arrives(&mut heard, r#""relay":"resumed""#, wait).await);
    notifier.publish(event("heard"));
    assert!(arrives(&mut heard, "heard", wait).await);
    // The other falls silent for longer than the silence: alone again.
    tokio::time::sleep(std::time::Duration::from_millis(1_700)).await;
    notifier.publish(event("silent-again"));
    assert!(!arrives(&mut heard, "silent-again", wait).await);
    // A heartbeat of the other ends it again, with a resume.
    say(&client, &schema, "here").await;
    assert!(arrives(&mut heard, r#""relay":"resumed""#, wait).await);
    stop.cancel();
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_from_another_replica_reads_again_what_is_waited_on() {
    use crate::notifier::TaskEvent;
    let schema = fresh_schema("resume");
    let pg = PostgresStore::open_in_schema(&test_url(), &schema)
        .await
        .unwrap();
    pg.create(unexpiring("w1"), None).await.unwrap();
    let store: Arc<dyn TaskStore> = Arc::new(pg);
    let (client, _heard) = overhear(&schema).await;
    let (notifier, stop) = relay_on(&schema, store).await;
    // After the relay's first send, which reads again what is waited on (nothing yet).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let mut waiting = notifier.subscribe_task("w1");
    // Finished by a replica that thought itself alone, so it sent nothing: only the store knows.
    let other = PostgresStore::open_in_schema(&test_url(), &schema)
        .await
        .unwrap();
    let done = TaskChange {
        status: Some(TaskStatus::Completed),
        ..Default::default()
    };
    other
        .update("w1", &TaskStatus::ACTIVE, done, 2_000)
        .await
        .unwrap();
    // A heartbeat alone changes nothing here.
    say(&client, &schema, "here").await;
    let quiet = tokio::time::timeout(std::time::Duration::from_millis(500), waiting.recv()).await;
    assert!(quiet.is_err(), "nothing was relayed, nothing is read");
    say(&client, &schema, "resumed").await;
    let seen = tokio::time::timeout(std::time::Duration::from_secs(3), waiting.recv())
        .await
        .expect("a resume reads again the tasks waited on");
    match seen {
        Ok(TaskEvent::Changed(t)) => assert_eq!(t.status, TaskStatus::Completed),
        other => panic!("unexpected {other:?}"),
    }
    stop.cancel();
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_only_waiters_need_is_brought_in_only_where_someone_waits() {
    use crate::notifier::{Notifier, TaskEvent};
    let schema = fresh_schema("narrow");
    let pg = PostgresStore::open_in_schema(&test_url(), &schema)
        .await
        .unwrap();
    let sessionless = |id: &str| {
        let mut t = unexpiring(id);
        t.session = None;
        t
    };
    let mut released = sessionless("released");
    released.lease_owner = None;
    let records = [
        sessionless("free"),
        unexpiring("in-session"),
        sessionless("subscribed"),
        sessionless("watched"),
        released.clone(),
        sessionless("everything"),
    ];
    for t in &records {
        pg.create(t.clone(), None).await.unwrap();
    }
    let store: Arc<dyn TaskStore> = Arc::new(pg);
    let stop = tokio_util::sync::CancellationToken::new();
    let (a, b) = (Notifier::new(), Notifier::new());
    for n in [&a, &b] {
        relay::start(
            &url_in_schema(&schema),
            n.clone(),
            store.clone(),
            stop.clone(),
        )
        .await
        .unwrap();
    }
    for n in [&a, &b] {
        // Tasks outside any session are for their waiters only (the server's rule, in short).
        let _ = n.narrow(Arc::new(|t: &crate::model::TaskRecord| t.session.is_none()));
    }
    // After each relay's first send, which reads again what is waited on (nothing yet).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let mut seen = b.subscribe_all();
    let _subscribed = b.subscribe_task("subscribed");
    let watch = b.watch("watched");
    // The next event B brings in, by task id (B's own publishes are not made here).
    let next =
        async |seen: &mut tokio::sync::broadcast::Receiver<TaskEvent>| match tokio::time::timeout(
            std::time::Duration::from_secs(5),
            seen.recv(),
        )
        .await
        {
            Ok(Ok(e)) => e.task().id.clone(),
            other => panic!("nothing brought in: {other:?}"),
        };
    let publish = |t: &crate::model::TaskRecord| a.publish(TaskEvent::Changed(Arc::new(t.clone())));
    // In order: what B skips never shows, and what it brings in comes next.
    for t in &records[..5] {
        publish(t);
    }
    assert_eq!(
        next(&mut seen).await,
        "in-session",
        "a session task's events go everywhere"
    );
    assert_eq!(
        next(&mut seen).await,
        "subscribed",
        "a task subscribed to here"
    );
    assert_eq!(next(&mut seen).await, "watched", "a task watched here");
    assert_eq!(
        next(&mut seen).await,
        "released",
        "a hand-off: every engine takes it"
    );
    drop(watch);
    publish(&records[3]);
    publish(&records[5]);
    publish(&records[1]);
    assert_eq!(
        next(&mut seen).await,
        "in-session",
        "the two before it were skipped: nothing here waits on them any more"
    );
    let everything = b.watch_everything();
    publish(&records[5]);
    assert_eq!(next(&mut seen).await, "everything", "a view of every task");
    drop(everything);
    // A replica that does not narrow brings in everything (and marks nothing it sends).
    let c = Notifier::new();
    relay::start(
        &url_in_schema(&schema),
        c.clone(),
        store.clone(),
        stop.clone(),
    )
    .await
    .unwrap();
    let mut all = c.subscribe_all();
    a.publish(TaskEvent::Changed(Arc::new(records[0].clone())));
    assert_eq!(next(&mut all).await, "free");
    c.publish(TaskEvent::Changed(Arc::new(records[0].clone())));
    assert_eq!(
        next(&mut seen).await,
        "free",
        "unmarked: brought in everywhere"
    );
    stop.cancel();
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_whose_send_failed_says_it_resumed_so_the_others_read_again() {
    use crate::notifier::{Notifier, TaskEvent};
    let schema = fresh_schema("sendfail");
    let store: Arc<dyn TaskStore> = Arc::new(
        PostgresStore::open_in_schema(&test_url(), &schema)
            .await
            .unwrap(),
    );
    let (client, mut heard) = overhear(&schema).await;
    let app = format!("relay_{schema}");
    let notifier = Notifier::new();
    let stop = tokio_util::sync::CancellationToken::new();
    let timing = super::presence::Timing {
        grace: std::time::Duration::from_secs(30),
        ..short_presence()
    };
    relay::start_timed(
        &format!("{}&application_name={app}", url_in_schema(&schema)),
        notifier.clone(),
        store,
        stop.clone(),
        timing,
    )
    .await
    .unwrap();
    let wait = std::time::Duration::from_secs(3);
    assert!(arrives(&mut heard, r#""relay":"hello""#, wait).await);
    // Its sending connection is cut (its last statement was a notification; the listening
    // connection's was LISTEN).
    let cut = client
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = $1 AND query LIKE 'SELECT pg_notify%'",
            &[&app],
        )
        .await
        .unwrap();
    assert_eq!(cut, 1, "one sending connection");
    notifier.publish(TaskEvent::Created(Arc::new(unexpiring("after-the-cut"))));
    // The resume and the newest event go out once connected again, maybe in one notification.
    let mut said = String::new();
    let until = tokio::time::Instant::now() + wait;
    while !(said.contains(r#""relay":"resumed""#) && said.contains("after-the-cut")) {
        match tokio::time::timeout_at(until, heard.recv()).await {
            Ok(Some(p)) => said.push_str(&p),
            _ => break,
        }
    }
    assert!(
        said.contains(r#""relay":"resumed""#),
        "what the failed send lost is read again by the others: {said}"
    );
    let (resumed, event) = (
        said.find(r#""relay":"resumed""#).unwrap(),
        said.find("after-the-cut"),
    );
    assert!(
        event.is_some_and(|e| e > resumed),
        "the newest event follows the resume: {said}"
    );
    stop.cancel();
    drop_schema(&schema).await;
}

/// Says `note` (a JSON object) on `schema`'s channel as the relay `relay-test`.
async fn say_note(client: &tokio_postgres::Client, schema: &str, note: serde_json::Value) {
    let payload =
        serde_json::json!([{"from": "relay-test", "task": "", "kind": "note", "note": note}]);
    client
        .execute(
            "SELECT pg_notify($1, $2)",
            &[&format!("mcp_tasks_{schema}"), &payload.to_string()],
        )
        .await
        .unwrap();
}

/// The next payload naming `needle` within `wait`, if one arrives (others are let go).
async fn next_naming(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    needle: &str,
    wait: std::time::Duration,
) -> Option<String> {
    let until = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(until, rx.recv()).await {
            Ok(Some(p)) if p.contains(needle) => return Some(p),
            Ok(Some(_)) => continue,
            _ => return None,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_goes_out_only_when_another_replica_waits_on_its_task_and_a_late_wait_gets_it_again(
) {
    use crate::notifier::TaskEvent;
    let schema = fresh_schema("waits");
    let store: Arc<dyn TaskStore> = Arc::new(
        PostgresStore::open_in_schema(&test_url(), &schema)
            .await
            .unwrap(),
    );
    let (client, mut heard) = overhear(&schema).await;
    // A long silence: the made-up relay must not be forgotten between its notes on a slow machine.
    let long_silence = super::presence::Timing {
        silence: std::time::Duration::from_secs(20),
        ..short_presence()
    };
    let (notifier, stop) = relay_timed(&schema, store, long_silence).await;
    // Every task's events are for its waiters only, and this process runs node-a's tasks.
    let _ = notifier.narrow(Arc::new(|_: &crate::model::TaskRecord| true));
    notifier.runs_as("node-a");
    let wait = std::time::Duration::from_millis(800);
    let hello = next_naming(&mut heard, r#""relay":"hello""#, wait)
        .await
        .expect("a hello");
    let me: serde_json::Value = serde_json::from_str(&hello).unwrap();
    let me = me[0]["from"].as_str().unwrap().to_string();
    // The other relay (this test) says what it waits on: nothing.
    say_note(
        &client,
        &schema,
        serde_json::json!({"relay": "waits", "all": false, "tasks": [], "first": true, "more": false}),
    )
    .await;
    // Past the grace: a relay not heard yet may no longer turn up.
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let event = |id: &str| TaskEvent::Changed(Arc::new(unexpiring(id)));
    let mut elsewhere = unexpiring("run-elsewhere");
    elsewhere.lease_owner = Some("node-b".into());
    notifier.publish(TaskEvent::Changed(Arc::new(elsewhere)));
    assert!(
        arrives(&mut heard, r#""task":"run-elsewhere""#, wait).await,
        "another node runs it: its runner waits on it"
    );
    notifier.publish(event("run-here"));
    // A mark follows the skip (unanswered, it keeps the skip); the event does not go before it.
    let mut before_mark = String::new();
    let until = tokio::time::Instant::now() + wait;
    while let Ok(Some(p)) = tokio::time::timeout_at(until, heard.recv()).await {
        before_mark.push_str(&p);
        if p.contains(r#""relay":"mark""#) {
            break;
        }
    }
    assert!(
        before_mark.contains(r#""relay":"mark""#),
        "a mark after a skip: {before_mark}"
    );
    assert!(
        !before_mark.contains(r#""task":"run-here""#),
        "skipped: {before_mark}"
    );
    // The other relay waits on it now: its note names a kept skip, so it goes out again.
    say_note(
        &client,
        &schema,
        serde_json::json!({"relay": "wait", "tasks": ["run-here"]}),
    )
    .await;
    let again = next_naming(&mut heard, r#""task":"run-here""#, wait)
        .await
        .expect("sent again once a wait names it");
    assert!(again.contains(r#""kind":"changed""#), "{again}");
    notifier.publish(event("run-here"));
    assert!(
        arrives(&mut heard, r#""task":"run-here""#, wait).await,
        "waited on: sent"
    );
    say_note(
        &client,
        &schema,
        serde_json::json!({"relay": "unwait", "tasks": ["run-here"]}),
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    notifier.publish(event("run-here"));
    assert!(
        !arrives(&mut heard, r#""task":"run-here""#, wait).await,
        "nobody waits any more: skipped"
    );
    // Answering the marks lets go of the skips (marks keep coming while any is kept): a wait then
    // finds nothing to send again. The other relay says it is there meanwhile, so that it stays
    // known with its list.
    let until = tokio::time::Instant::now() + std::time::Duration::from_millis(2_500);
    let mut answered = 0;
    let mut heartbeat = tokio::time::interval(std::time::Duration::from_millis(400));
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(until) => break,
            _ = heartbeat.tick() => say(&client, &schema, "here").await,
            p = heard.recv() => {
                let Some(p) = p else { break };
                let wires: serde_json::Value = serde_json::from_str(&p).unwrap();
                for w in wires.as_array().into_iter().flatten() {
                    if w["from"] == me.as_str() && w["note"]["relay"] == "mark" {
                        let n = w["note"]["n"].as_u64().unwrap();
                        say_note(
                            &client,
                            &schema,
                            serde_json::json!({"relay": "marked", "to": me, "n": n}),
                        )
                        .await;
                        answered += 1;
                    }
                }
            }
        }
    }
    assert!(answered > 0, "marks were sent");
    say_note(
        &client,
        &schema,
        serde_json::json!({"relay": "wait", "tasks": ["run-here"]}),
    )
    .await;
    assert!(
        !arrives(&mut heard, r#""task":"run-here""#, wait).await,
        "the skip was let go of once the marks after it were answered"
    );
    // A hello is answered with what is waited on here.
    let _sub = notifier.subscribe_task("waited-here");
    assert!(
        arrives(&mut heard, "waited-here", wait).await,
        "a first subscription is told"
    );
    say(&client, &schema, "hello").await;
    let list = next_naming(&mut heard, r#""relay":"waits""#, wait)
        .await
        .expect("a hello is answered with the list");
    assert!(list.contains("waited-here"), "{list}");
    stop.cancel();
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_waiting_on_another_replicas_task_hears_it_finish_and_nobody_else_is_sent_it() {
    use crate::notifier::{Notifier, TaskEvent};
    let schema = fresh_schema("waitfin");
    let pg = PostgresStore::open_in_schema(&test_url(), &schema)
        .await
        .unwrap();
    for id in ["waited", "unwaited"] {
        let mut t = unexpiring(id);
        t.session = None;
        pg.create(t, None).await.unwrap();
    }
    let store: Arc<dyn TaskStore> = Arc::new(pg);
    let stop = tokio_util::sync::CancellationToken::new();
    let (a, b) = (Notifier::new(), Notifier::new());
    for n in [&a, &b] {
        let _ = n.narrow(Arc::new(|t: &crate::model::TaskRecord| t.session.is_none()));
        n.runs_as("node-a");
        relay::start_timed(
            &url_in_schema(&schema),
            n.clone(),
            store.clone(),
            stop.clone(),
            short_presence(),
        )
        .await
        .unwrap();
    }
    let (_client, mut heard) = overhear(&schema).await;
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let mut waiting = b.subscribe_task("waited");
    // Finished on A (which runs it): B waits, so it goes out; the other task's finish does not.
    let finish = |id: &str| {
        let mut t = unexpiring(id);
        t.session = None;
        t.status = TaskStatus::Completed;
        t.lease_owner = None;
        t
    };
    // Its runner is here: A's engine would hold it in its running set.
    a.also_waited_on(Arc::new(|_| true));
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    a.publish(TaskEvent::Changed(Arc::new(finish("unwaited"))));
    a.publish(TaskEvent::Changed(Arc::new(finish("waited"))));
    let seen = tokio::time::timeout(std::time::Duration::from_secs(3), waiting.recv())
        .await
        .expect("B hears the finish");
    assert!(matches!(seen, Ok(TaskEvent::Changed(t)) if t.id == "waited"));
    let mut said = String::new();
    let until = tokio::time::Instant::now() + std::time::Duration::from_millis(500);
    while let Ok(Some(p)) = tokio::time::timeout_at(until, heard.recv()).await {
        said.push_str(&p);
    }
    assert!(
        !said.contains(r#""task":"unwaited""#),
        "nobody waits on it: not sent: {said}"
    );
    stop.cancel();
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_that_start_as_another_replica_finishes_their_tasks_all_wake() {
    use crate::notifier::{Notifier, TaskEvent};
    let schema = fresh_schema("waitrace");
    let pg = PostgresStore::open_in_schema(&test_url(), &schema)
        .await
        .unwrap();
    let ids: Vec<String> = (0..300).map(|i| format!("race-{i}")).collect();
    for id in &ids {
        let mut t = unexpiring(id);
        t.session = None;
        pg.create(t, None).await.unwrap();
    }
    let store: Arc<dyn TaskStore> = Arc::new(pg);
    let stop = tokio_util::sync::CancellationToken::new();
    let (a, b) = (Notifier::new(), Notifier::new());
    let app = format!("relay_{schema}");
    for (n, url) in [
        (&a, url_in_schema(&schema)),
        (
            &b,
            format!("{}&application_name={app}", url_in_schema(&schema)),
        ),
    ] {
        let _ = n.narrow(Arc::new(|_: &crate::model::TaskRecord| true));
        relay::start_timed(
            &url,
            n.clone(),
            store.clone(),
            stop.clone(),
            short_presence(),
        )
        .await
        .unwrap();
    }
    // A runs every task: its finishes are skipped unless B waits on them.
    a.runs_as("node-a");
    a.also_waited_on(Arc::new(|_| true));
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    // Each task is finished on A right after B read it unfinished: mostly before A heard that B
    // waits on it, so the finish is skipped and must be sent again once B's note arrives.
    let (read_tx, mut read_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let finisher = {
        let (a, store, n) = (a.clone(), store.clone(), ids.len());
        tokio::spawn(async move {
            for _ in 0..n {
                let Some(id) = read_rx.recv().await else {
                    break;
                };
                let done = TaskChange {
                    status: Some(TaskStatus::Completed),
                    ..Default::default()
                };
                let rec = store
                    .update(&id, &TaskStatus::ACTIVE, done, 2_000)
                    .await
                    .unwrap();
                a.publish(TaskEvent::Changed(Arc::new(rec)));
            }
        })
    };
    // B waits on each: subscribe, then read, then wait.
    let mut waiters = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let (b, store, id, read) = (b.clone(), store.clone(), id.clone(), read_tx.clone());
        waiters.push(tokio::spawn(async move {
            let mut sub = b.subscribe_task(&id);
            if let Ok(Lookup::Found(t)) = store.get(&id).await {
                if t.status.is_terminal() {
                    return true;
                }
            }
            let _ = read.send(id.clone());
            let until = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
            loop {
                match tokio::time::timeout_at(until, sub.recv()).await {
                    Ok(Ok(e)) if e.task().status.is_terminal() => return true,
                    Ok(Ok(_)) => continue,
                    Ok(Err(_)) => {
                        // Lagged: the store has it.
                        if let Ok(Lookup::Found(t)) = store.get(&id).await {
                            if t.status.is_terminal() {
                                return true;
                            }
                        }
                    }
                    Err(_) => return false,
                }
            }
        }));
        if i % 5 == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        if i == ids.len() / 2 {
            // B's sending connection is cut: the notes it held are lost, and its list after
            // connecting again must stand for them.
            let (client, conn) = tokio_postgres::connect(&test_url(), NoTls).await.unwrap();
            tokio::spawn(conn);
            client
                .execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE application_name = $1 AND query LIKE 'SELECT pg_notify%'",
                    &[&app],
                )
                .await
                .unwrap();
        }
    }
    finisher.await.unwrap();
    let mut stuck = Vec::new();
    for (id, w) in ids.iter().zip(waiters) {
        if !w.await.unwrap() {
            stuck.push(id.clone());
        }
    }
    assert!(stuck.is_empty(), "never woke: {stuck:?}");
    stop.cancel();
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_secrets_are_copied_into_events_only_while_earlier_builds_may_run() {
    use crate::webhook::WebhookTarget;
    use std::sync::atomic::Ordering;
    let schema = fresh_schema("secrets");
    let s = PostgresStore::open_in_schema(&test_url(), &schema)
        .await
        .unwrap();
    let secret = "whsec_c2VjcmV0LWtlcHQtb25jZS1mb3ItdGhpcy10ZXN0";
    let hooked = |id: &str| {
        let mut t = super::super::testkit::record(id, "alice", 1_000);
        t.webhooks = vec![WebhookTarget {
            url: "https://a.example/hook".into(),
            secret: secret.into(),
            events: vec![],
            subscription: None,
        }];
        t
    };
    let done = || TaskChange {
        status: Some(TaskStatus::Completed),
        outcome: Some(crate::model::Outcome::Result {
            value: serde_json::json!({}),
            is_error: false,
        }),
        ..Default::default()
    };
    let (client, conn) = tokio_postgres::connect(&test_url(), NoTls).await.unwrap();
    tokio::spawn(conn);
    let copies = |task: &'static str| {
        let client = &client;
        let schema = schema.clone();
        async move {
            client
                .query_one(
                    &format!(
                        "SELECT count(*) FILTER (WHERE secret <> '') FROM {schema}.webhook_outbox \
                         WHERE task_id = $1"
                    ),
                    &[&task],
                )
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    // Just migrated: earlier builds' replicas may still run, and sign with the event's copy.
    assert!(rows::copies_secrets(crate::clock::now_ms()));
    s.create(hooked("early"), None).await.unwrap();
    s.update("early", &TaskStatus::ACTIVE, done(), 2_000)
        .await
        .unwrap();
    assert_eq!(copies("early").await, 1);
    // Past the window: no copy, and a claim reads the secret from the task.
    rows::SECRET_COPIES.store(0, Ordering::Relaxed);
    s.create(hooked("late"), None).await.unwrap();
    s.update("late", &TaskStatus::ACTIVE, done(), 2_000)
        .await
        .unwrap();
    assert_eq!(copies("late").await, 0);
    let claimed = s
        .claim_deliveries("node-a", 3_000, 30_000, 10)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    assert!(claimed.iter().all(|d| d.entry.secret == secret));
    // A purge that removes no task drops the copies left from the window.
    let keep_all = PurgePolicy {
        now: 3_000,
        finished_grace_ms: 0,
        tombstone_ms: 1 << 40,
        finished_before: None,
    };
    s.purge(keep_all).await.unwrap();
    assert_eq!(
        copies("early").await,
        0,
        "the copy goes once the window is over"
    );
    // A purge that removes the task copies its secret into the events that outlive it.
    let purge_all = PurgePolicy {
        now: 1 << 41,
        finished_grace_ms: 0,
        tombstone_ms: 0,
        finished_before: None,
    };
    s.purge(purge_all).await.unwrap();
    assert!(!matches!(s.get("late").await.unwrap(), Lookup::Found(_)));
    assert_eq!(copies("late").await, 1);
    let again = s
        .claim_deliveries("node-b", 1 << 40, 1 << 41, 10)
        .await
        .unwrap();
    assert_eq!(again.len(), 2);
    assert!(again.iter().all(|d| d.entry.secret == secret));
    drop_schema(&schema).await;
}

/// Two replicas fan the log out while events are written and subscriptions are made with a
/// replay from the start, side by side: every subscription gets every event, once (a replay and
/// a fan-out never miss each other, and replays do not wait for one another).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replays_beside_fan_outs_and_writes_miss_no_event() {
    use super::super::testkit::events::{subscription, tool_event};
    use crate::events::{EventPosition, SubscriptionStart};
    const EVENTS: usize = 150;
    const SUBSCRIPTIONS: usize = 24;
    let schema = fresh_schema("fan");
    let a = Arc::new(
        PostgresStore::open_in_schema(&test_url(), &schema)
            .await
            .unwrap(),
    );
    let b = Arc::new(
        PostgresStore::open_in_schema(&test_url(), &schema)
            .await
            .unwrap(),
    );
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let a = a.clone();
        tokio::spawn(async move {
            for _ in 0..EVENTS {
                a.append_event(tool_event("race", None, 1_000, serde_json::json!({})))
                    .await
                    .unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
        })
    };
    let fan_outs: Vec<_> = [a.clone(), b.clone()]
        .into_iter()
        .map(|s| {
            let done = done.clone();
            tokio::spawn(async move {
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    s.fan_out_events(20).await.unwrap();
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
            })
        })
        .collect();
    let subscribers: Vec<_> = (0..SUBSCRIPTIONS)
        .map(|i| {
            let s = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(12 * i as u64)).await;
                let sub = subscription(&format!("r{i}"), &format!("p{}", i % 5), "race", 1_000);
                s.put_subscription(&sub, SubscriptionStart::After(EventPosition::START), 10)
                    .await
                    .unwrap();
            })
        })
        .collect();
    writer.await.unwrap();
    for t in subscribers {
        t.await.unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    for t in fan_outs {
        t.await.unwrap();
    }
    // What is left, fanned out once every transaction before it is over (other tests' too: the
    // log is read below the oldest one running).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let counts = loop {
        a.fan_out_events(1_000).await.unwrap();
        let mut counts = Vec::new();
        for i in 0..SUBSCRIPTIONS {
            counts.push(
                a.event_deliveries(&format!("r{i}"), 1_000)
                    .await
                    .unwrap()
                    .len(),
            );
        }
        if counts.iter().all(|n| *n >= EVENTS) || std::time::Instant::now() > deadline {
            break counts;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(
        counts,
        vec![EVENTS; SUBSCRIPTIONS],
        "deliveries per subscription"
    );
    drop_schema(&schema).await;
}
