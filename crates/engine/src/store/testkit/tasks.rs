//! Tasks: create, read, compare-and-set, progress rules, lists, retention, counts and history ([`TaskRows`]).

use serde_json::json;
use std::future::Future;
use std::sync::Arc;

use super::{completed, failed, purge_finished_before, record};
use crate::model::{Outcome, TaskRecord, TaskStatus};
use crate::store::{
    ActiveCounts, ActiveLimit, Among, Created, FinishedCounts, ListQuery, Lookup, ProgressUpdate,
    PurgePolicy, StoreError, TaskChange, TaskFilter, TaskRows, UpdateError,
};

/// Runs this part of the contract, each test on a fresh store from `make`.
pub async fn run<S, F, Fut>(make: F)
where
    S: TaskRows,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    create_then_get_returns_the_same_record(make().await).await;
    several_tasks_are_read_at_once(make().await).await;
    a_task_is_found_by_its_key_for_its_owner_only(make().await).await;
    retention_after_finish_counts_from_the_end(make().await).await;
    idempotency_key_returns_existing_or_conflicts(make().await).await;
    update_is_compare_and_set(make().await).await;
    racing_terminal_updates_have_one_winner(Arc::new(make().await)).await;
    progress_never_decreases(make().await).await;
    a_smaller_progress_is_clamped_and_the_rest_of_the_report_applies(make().await).await;
    the_total_never_decreases(make().await).await;
    the_total_is_raised_to_the_progress(make().await).await;
    a_report_that_changes_only_the_total_is_kept(make().await).await;
    the_progress_message_is_kept_until_the_task_completes(make().await).await;
    list_pages_by_owner_and_session(make().await).await;
    purge_keeps_running_tasks_and_leaves_tombstones(make().await).await;
    active_limit_is_enforced_with_the_create(make().await).await;
    a_checkpoint_is_kept_until_the_task_finishes(make().await).await;
    unfinished_tasks_are_counted_by_status(make().await).await;
    finished_tasks_since_a_time_are_counted_by_how_they_ended(make().await).await;
    an_operator_searches_every_principals_tasks_and_purges_finished_ones(make().await).await;
}

async fn an_operator_searches_every_principals_tasks_and_purges_finished_ones(s: impl TaskRows) {
    let mut a = record("a", "alice", 1_000);
    a.tool = "build".into();
    s.create(a, None).await.unwrap();
    s.create(record("b", "bob", 2_000), None).await.unwrap();
    s.create(record("c", "alice", 3_000), None).await.unwrap();
    let done = completed();
    s.update("b", &TaskStatus::ACTIVE, done, 5_000)
        .await
        .unwrap();
    let ids = |found: Vec<TaskRecord>| found.into_iter().map(|t| t.id).collect::<Vec<_>>();
    let all = TaskFilter {
        limit: 10,
        ..Default::default()
    };
    assert_eq!(
        ids(s.search(&all).await.unwrap()),
        ["c", "b", "a"],
        "newest first"
    );
    let alice = TaskFilter {
        owner: Some("alice".into()),
        ..all.clone()
    };
    assert_eq!(ids(s.search(&alice).await.unwrap()), ["c", "a"]);
    let working_build = TaskFilter {
        statuses: vec![TaskStatus::Working],
        tool: Some("build".into()),
        ..all.clone()
    };
    assert_eq!(ids(s.search(&working_build).await.unwrap()), ["a"]);
    let window = TaskFilter {
        created_after: Some(2_000),
        created_before: Some(3_000),
        ..all.clone()
    };
    assert_eq!(ids(s.search(&window).await.unwrap()), ["b"]);
    let one = TaskFilter {
        limit: 1,
        ..all.clone()
    };
    assert_eq!(ids(s.search(&one).await.unwrap()), ["c"]);
    // Finished before 6 000, whatever its retention: b only (a and c still run).
    let purge = purge_finished_before(6_000);
    assert_eq!(s.purge(purge).await.unwrap().tasks, 1);
    assert_eq!(ids(s.search(&all).await.unwrap()), ["c", "a"]);
    assert!(matches!(s.get("b").await.unwrap(), Lookup::Expired { .. }));
}

async fn unfinished_tasks_are_counted_by_status(s: impl TaskRows) {
    assert_eq!(s.count_active().await.unwrap(), ActiveCounts::default());
    for id in ["w1", "w2", "asks", "done"] {
        s.create(record(id, "alice", 1_000), None).await.unwrap();
    }
    let ask = TaskChange {
        status: Some(TaskStatus::InputRequired),
        ..Default::default()
    };
    s.update("asks", &TaskStatus::ACTIVE, ask, 1_100)
        .await
        .unwrap();
    let done = completed();
    s.update("done", &TaskStatus::ACTIVE, done, 1_200)
        .await
        .unwrap();
    assert_eq!(
        s.count_active().await.unwrap(),
        ActiveCounts {
            working: 2,
            input_required: 1
        }
    );
}

async fn finished_tasks_since_a_time_are_counted_by_how_they_ended(s: impl TaskRows) {
    // Ids as the engine makes them (creation time first), which stores may use to find the range.
    let day = 1_700_000_000_000u64;
    let hour_ago = day + 10_000_000;
    let tool_error = TaskChange {
        status: Some(TaskStatus::Completed),
        outcome: Some(Outcome::Result {
            value: json!({"bad": true}),
            is_error: true,
        }),
        ..Default::default()
    };
    let cancel = TaskChange {
        status: Some(TaskStatus::Cancelled),
        ..Default::default()
    };
    let plan: Vec<(u64, Option<TaskChange>)> = vec![
        (hour_ago - 1, Some(completed())),
        (hour_ago - 1, Some(failed("broke"))),
        (hour_ago, Some(completed())),
        (hour_ago + 5, Some(completed())),
        (hour_ago + 6, Some(tool_error)),
        (hour_ago + 7, Some(failed("broke"))),
        (hour_ago + 8, Some(failed("broke"))),
        (hour_ago + 9, Some(cancel)),
        (hour_ago + 10, None),
    ];
    for (at, change) in plan {
        let id = crate::ids::task_id(at);
        s.create(record(&id, "alice", at), None).await.unwrap();
        if let Some(change) = change {
            s.update(&id, &TaskStatus::ACTIVE, change, at + 1)
                .await
                .unwrap();
        }
    }
    assert_eq!(
        s.count_finished(hour_ago).await.unwrap(),
        FinishedCounts {
            completed: 2,
            completed_with_error: 1,
            failed: 2,
            cancelled: 1
        }
    );
    let all = s.count_finished(0).await.unwrap();
    assert_eq!((all.completed, all.failed), (3, 3));
    assert_eq!(
        s.count_finished(hour_ago + 11).await.unwrap(),
        FinishedCounts::default()
    );
}

async fn a_checkpoint_is_kept_until_the_task_finishes(s: impl TaskRows) {
    s.create(record("k", "alice", 1_000), None).await.unwrap();
    let saved = json!({"remote": {"url": "http://127.0.0.1:9/jobs", "job": "u-1"}});
    let change = TaskChange {
        checkpoint: Some(Some(saved.clone())),
        ..Default::default()
    };
    let rec = s
        .update("k", &TaskStatus::ACTIVE, change, 1_100)
        .await
        .unwrap();
    assert_eq!(rec.checkpoint, Some(saved.clone()));
    let Lookup::Found(read) = s.get("k").await.unwrap() else {
        panic!("k is gone")
    };
    assert_eq!(read.checkpoint, Some(saved), "stored, not only returned");
    // Another change leaves it as it is; finishing clears it.
    let progress = TaskChange {
        progress: Some(ProgressUpdate {
            progress: 1.0,
            total: None,
            message: None,
        }),
        ..Default::default()
    };
    let rec = s
        .update("k", &TaskStatus::ACTIVE, progress, 1_200)
        .await
        .unwrap();
    assert!(rec.checkpoint.is_some());
    let done = completed();
    s.update("k", &TaskStatus::ACTIVE, done, 1_300)
        .await
        .unwrap();
    let Lookup::Found(read) = s.get("k").await.unwrap() else {
        panic!("k is gone")
    };
    assert_eq!(read.checkpoint, None);
}

async fn active_limit_is_enforced_with_the_create(s: impl TaskRows) {
    let limit = |max, session: Option<&str>| {
        Some(ActiveLimit {
            max,
            owner: "alice".into(),
            among: session.map_or(Among::All, |s| Among::Session(s.into())),
        })
    };
    s.create(record("a1", "alice", 1), limit(2, None))
        .await
        .unwrap();
    s.create(record("a2", "alice", 2), limit(2, None))
        .await
        .unwrap();
    match s.create(record("a3", "alice", 3), limit(2, None)).await {
        Err(StoreError::TooManyActive { active: 2, max: 2 }) => {}
        other => panic!("expected the limit, got {other:?}"),
    }
    assert_eq!(
        s.get("a3").await.unwrap(),
        Lookup::Missing,
        "nothing stored"
    );
    // Per session: another session of the same owner has its own count.
    let mut other = record("a4", "alice", 4);
    other.session = Some("s2".into());
    s.create(other, limit(2, Some("s2"))).await.unwrap();
    // Finished tasks do not count.
    let done = TaskChange {
        status: Some(TaskStatus::Completed),
        ..Default::default()
    };
    s.update("a1", &TaskStatus::ACTIVE, done, 5).await.unwrap();
    s.create(record("a5", "alice", 5), limit(3, None))
        .await
        .unwrap();
    s.create(
        record("b1", "bob", 6),
        limit(1, None).map(|l| ActiveLimit {
            owner: "bob".into(),
            ..l
        }),
    )
    .await
    .unwrap();
    // Among sessions that share a prefix: "c1-x" and "c1-y" count together, "c10" and "c2-x" not.
    let by_prefix = || {
        Some(ActiveLimit {
            max: 2,
            owner: "carol".into(),
            among: Among::SessionsStartingWith("c1-".into()),
        })
    };
    for (id, session) in [
        ("c1", "c1-x"),
        ("c2", "c10"),
        ("c3", "c2-x"),
        ("c4", "c1-y"),
    ] {
        let mut t = record(id, "carol", 7);
        t.session = Some(session.into());
        s.create(t, by_prefix()).await.unwrap();
    }
    let mut third = record("c5", "carol", 8);
    third.session = Some("c1-z".into());
    match s.create(third, by_prefix()).await {
        Err(StoreError::TooManyActive { active: 2, max: 2 }) => {}
        other => panic!("expected the prefix's limit, got {other:?}"),
    }
}

async fn create_then_get_returns_the_same_record(s: impl TaskRows) {
    let t = record("a1", "alice", 1_000);
    assert_eq!(
        s.create(t.clone(), None).await.unwrap(),
        Created::New(t.clone())
    );
    assert_eq!(s.get("a1").await.unwrap(), Lookup::Found(t));
    assert_eq!(s.get("nope").await.unwrap(), Lookup::Missing);
}

async fn several_tasks_are_read_at_once(s: impl TaskRows) {
    let a = record("m1", "alice", 1_000);
    let b = record("m2", "bob", 1_001);
    s.create(a.clone(), None).await.unwrap();
    s.create(b.clone(), None).await.unwrap();
    let mut found = s
        .get_many(&["m2".into(), "gone".into(), "m1".into()])
        .await
        .unwrap();
    found.sort_by(|x, y| x.id.cmp(&y.id));
    assert_eq!(found, vec![a, b]);
    assert!(s.get_many(&[]).await.unwrap().is_empty());
}

async fn idempotency_key_returns_existing_or_conflicts(s: impl TaskRows) {
    let mut t = record("k1", "alice", 1_000);
    t.idempotency_key = Some("key".into());
    s.create(t.clone(), None).await.unwrap();
    let mut retry = record("k2", "alice", 2_000);
    retry.idempotency_key = Some("key".into());
    assert_eq!(
        s.create(retry.clone(), None).await.unwrap(),
        Created::Existing(t.clone())
    );
    retry.fingerprint = "other work".into();
    match s.create(retry.clone(), None).await {
        Err(StoreError::IdempotencyConflict { task_id, .. }) => assert_eq!(task_id, "k1"),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let mut bob = record("k3", "bob", 3_000);
    bob.idempotency_key = Some("key".into());
    assert!(
        matches!(s.create(bob, None).await.unwrap(), Created::New(_)),
        "keys are per owner"
    );
    assert_eq!(s.get("k2").await.unwrap(), Lookup::Missing);
}

async fn update_is_compare_and_set(s: impl TaskRows) {
    s.create(record("u1", "alice", 1_000), None).await.unwrap();
    let change = TaskChange {
        status: Some(TaskStatus::Completed),
        outcome: Some(Outcome::Result {
            value: json!({"answer": 42}),
            is_error: false,
        }),
        ..Default::default()
    };
    let done = s
        .update("u1", &TaskStatus::ACTIVE, change, 5_000)
        .await
        .unwrap();
    assert_eq!(done.status, TaskStatus::Completed);
    assert_eq!(done.updated_at, 5_000);
    assert_eq!(done.finished_at, Some(5_000));
    assert_eq!(done.lease_owner, None);
    let cancel = TaskChange {
        status: Some(TaskStatus::Cancelled),
        ..Default::default()
    };
    match s
        .update("u1", &TaskStatus::ACTIVE, cancel.clone(), 6_000)
        .await
    {
        Err(UpdateError::Conflict(cur)) => assert_eq!(cur.status, TaskStatus::Completed),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(matches!(
        s.update("zz", &TaskStatus::ACTIVE, cancel, 6_000).await,
        Err(UpdateError::NotFound)
    ));
    match s.get("u1").await.unwrap() {
        Lookup::Found(t) => assert_eq!(t, done, "a rejected update changes nothing"),
        other => panic!("{other:?}"),
    }
}

async fn racing_terminal_updates_have_one_winner<S: TaskRows>(s: Arc<S>) {
    for i in 0..20 {
        let id = format!("race{i}");
        s.create(record(&id, "alice", 1_000 + i), None)
            .await
            .unwrap();
        let mut handles = Vec::new();
        for status in [
            TaskStatus::Completed,
            TaskStatus::Cancelled,
            TaskStatus::Failed,
        ] {
            let s = s.clone();
            let id = id.clone();
            handles.push(tokio::spawn(async move {
                let change = TaskChange {
                    status: Some(status),
                    ..Default::default()
                };
                s.update(&id, &TaskStatus::ACTIVE, change, 2_000)
                    .await
                    .map(|t| t.status)
            }));
        }
        let mut winners = Vec::new();
        let mut losers_saw = Vec::new();
        for h in handles {
            match h.await.unwrap() {
                Ok(st) => winners.push(st),
                Err(UpdateError::Conflict(cur)) => losers_saw.push(cur.status),
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(winners.len(), 1, "exactly one terminal transition wins");
        assert!(
            losers_saw.iter().all(|st| *st == winners[0]),
            "losers are told the winner"
        );
    }
}

/// A change holding only a progress report.
fn report(progress: f64, total: Option<f64>, message: Option<&str>) -> TaskChange {
    TaskChange {
        progress: Some(ProgressUpdate {
            progress,
            total,
            message: message.map(String::from),
        }),
        ..Default::default()
    }
}

/// Applies `change` to running task `id` and returns (progress, total, message) as stored.
async fn shown(
    s: &impl TaskRows,
    id: &str,
    change: TaskChange,
    at: u64,
) -> (Option<f64>, Option<f64>, Option<String>) {
    let t = s.update(id, &TaskStatus::ACTIVE, change, at).await.unwrap();
    let Lookup::Found(stored) = s.get(id).await.unwrap() else {
        panic!("task {id} vanished")
    };
    assert_eq!(stored, t, "what update returns is what is stored");
    (t.progress, t.progress_total, t.progress_message)
}

async fn a_smaller_progress_is_clamped_and_the_rest_of_the_report_applies(s: impl TaskRows) {
    s.create(record("pc", "alice", 1_000), None).await.unwrap();
    shown(&s, "pc", report(5.0, Some(10.0), None), 2_000).await;
    assert_eq!(
        shown(&s, "pc", report(3.0, Some(20.0), Some("later")), 3_000).await,
        (Some(5.0), Some(20.0), Some("later".into()))
    );
    // Non-finite numbers change nothing.
    assert_eq!(
        shown(&s, "pc", report(f64::NAN, Some(30.0), Some("x")), 4_000).await,
        (Some(5.0), Some(20.0), Some("later".into()))
    );
    assert_eq!(
        shown(&s, "pc", report(6.0, Some(f64::INFINITY), None), 5_000).await,
        (Some(5.0), Some(20.0), Some("later".into()))
    );
}

async fn the_total_never_decreases(s: impl TaskRows) {
    s.create(record("pt", "alice", 1_000), None).await.unwrap();
    shown(&s, "pt", report(1.0, Some(10.0), None), 2_000).await;
    assert_eq!(
        shown(&s, "pt", report(2.0, Some(8.0), None), 3_000).await,
        (Some(2.0), Some(10.0), None),
        "a smaller total keeps the old one"
    );
    assert_eq!(
        shown(&s, "pt", report(3.0, None, None), 4_000).await,
        (Some(3.0), Some(10.0), None),
        "a report without a total keeps it"
    );
}

async fn the_total_is_raised_to_the_progress(s: impl TaskRows) {
    s.create(record("pr", "alice", 1_000), None).await.unwrap();
    assert_eq!(
        shown(&s, "pr", report(5.0, Some(3.0), None), 2_000).await,
        (Some(5.0), Some(5.0), None)
    );
    assert_eq!(
        shown(&s, "pr", report(7.0, None, None), 3_000).await,
        (Some(7.0), Some(7.0), None),
        "progress past the stored total raises it"
    );
    s.create(record("pn", "alice", 1_000), None).await.unwrap();
    assert_eq!(
        shown(&s, "pn", report(4.0, None, None), 2_000).await,
        (Some(4.0), None, None),
        "an unknown total stays unknown"
    );
}

async fn a_report_that_changes_only_the_total_is_kept(s: impl TaskRows) {
    s.create(record("po", "alice", 1_000), None).await.unwrap();
    shown(&s, "po", report(5.0, Some(10.0), None), 2_000).await;
    assert_eq!(
        shown(&s, "po", report(5.0, Some(20.0), None), 3_000).await,
        (Some(5.0), Some(20.0), None)
    );
}

async fn the_progress_message_is_kept_until_the_task_completes(s: impl TaskRows) {
    s.create(record("pm", "alice", 1_000), None).await.unwrap();
    s.create(record("pf", "alice", 1_000), None).await.unwrap();
    for id in ["pm", "pf"] {
        assert_eq!(
            shown(&s, id, report(1.0, None, Some("scanning")), 2_000).await,
            (Some(1.0), None, Some("scanning".into()))
        );
        assert_eq!(
            shown(&s, id, report(2.0, None, None), 3_000).await,
            (Some(2.0), None, Some("scanning".into())),
            "a report without a message keeps the last one"
        );
    }
    let complete = TaskChange {
        status: Some(TaskStatus::Completed),
        ..Default::default()
    };
    let done = s
        .update("pm", &TaskStatus::ACTIVE, complete, 4_000)
        .await
        .unwrap();
    assert_eq!(done.progress_message, None, "stale once the work is done");
    assert_eq!(done.progress, Some(2.0), "the progress itself stays");
    assert_eq!(s.get("pm").await.unwrap(), Lookup::Found(done));
    let fail = TaskChange {
        status: Some(TaskStatus::Failed),
        ..Default::default()
    };
    let failed = s
        .update("pf", &TaskStatus::ACTIVE, fail, 4_000)
        .await
        .unwrap();
    assert_eq!(
        failed.progress_message.as_deref(),
        Some("scanning"),
        "a failure keeps the note of where the work stopped"
    );
}

async fn progress_never_decreases(s: impl TaskRows) {
    s.create(record("p1", "alice", 1_000), None).await.unwrap();
    let step = |p: f64| report(p, Some(10.0), None);
    s.update("p1", &TaskStatus::ACTIVE, step(5.0), 2_000)
        .await
        .unwrap();
    let t = s
        .update("p1", &TaskStatus::ACTIVE, step(3.0), 3_000)
        .await
        .unwrap();
    assert_eq!(t.progress, Some(5.0));
    let t = s
        .update("p1", &TaskStatus::ACTIVE, step(7.0), 4_000)
        .await
        .unwrap();
    assert_eq!((t.progress, t.progress_total), (Some(7.0), Some(10.0)));
}

async fn list_pages_by_owner_and_session(s: impl TaskRows) {
    for i in 0..7u64 {
        let mut t = record(&format!("l{i}"), "alice", 1_000 + i);
        t.session = Some(if i % 2 == 0 { "even" } else { "odd" }.into());
        s.create(t, None).await.unwrap();
    }
    s.create(record("other", "bob", 1_003), None).await.unwrap();
    let mut q = ListQuery {
        owner: "alice".into(),
        session: None,
        cursor: None,
        limit: 3,
    };
    let mut seen = Vec::new();
    loop {
        let page = s.list(&q).await.unwrap().unwrap();
        assert!(page.tasks.len() <= 3);
        seen.extend(page.tasks.iter().map(|t| t.id.clone()));
        match page.next_cursor {
            Some(c) => q.cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen, ["l0", "l1", "l2", "l3", "l4", "l5", "l6"]);
    let odd = ListQuery {
        owner: "alice".into(),
        session: Some("odd".into()),
        cursor: None,
        limit: 10,
    };
    let page = s.list(&odd).await.unwrap().unwrap();
    assert_eq!(
        page.tasks.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["l1", "l3", "l5"]
    );
    assert_eq!(page.next_cursor, None);
    let bad = ListQuery {
        cursor: Some("not a cursor".into()),
        ..odd
    };
    assert!(s.list(&bad).await.unwrap().is_err());
}

async fn purge_keeps_running_tasks_and_leaves_tombstones(s: impl TaskRows) {
    let running = record("r1", "alice", 1_000);
    let mut finished = record("f1", "alice", 1_000);
    finished.status = TaskStatus::Completed;
    finished.finished_at = Some(2_000);
    let mut unlimited = record("n1", "alice", 1_000);
    unlimited.status = TaskStatus::Failed;
    unlimited.finished_at = Some(2_000);
    unlimited.ttl_ms = None;
    for t in [running, finished, unlimited] {
        s.create(t, None).await.unwrap();
    }
    let policy = |now| PurgePolicy {
        now,
        finished_grace_ms: 5_000,
        tombstone_ms: 10_000,
        finished_before: None,
    };
    // ttl (60 s) not reached: nothing goes.
    assert_eq!(s.purge(policy(30_000)).await.unwrap().tasks, 0);
    let p = s.purge(policy(70_000)).await.unwrap();
    assert_eq!(p.tasks, 1);
    assert!(
        matches!(s.get("r1").await.unwrap(), Lookup::Found(_)),
        "running tasks are never purged"
    );
    assert!(
        matches!(s.get("n1").await.unwrap(), Lookup::Found(_)),
        "unlimited ttl is kept"
    );
    assert_eq!(
        s.get("f1").await.unwrap(),
        Lookup::Expired {
            owner: "alice".into(),
            session: Some("s1".into())
        }
    );
    let p = s.purge(policy(90_000)).await.unwrap();
    assert_eq!(p.tombstones, 1);
    assert_eq!(s.get("f1").await.unwrap(), Lookup::Missing);
}

async fn a_task_is_found_by_its_key_for_its_owner_only(s: impl TaskRows) {
    let mut t = record("keyed", "alice", 1_000);
    t.idempotency_key = Some("op-1".into());
    s.create(t.clone(), None).await.unwrap();
    assert_eq!(s.find_by_key("alice", "op-1").await.unwrap(), Some(t));
    assert_eq!(s.find_by_key("bob", "op-1").await.unwrap(), None);
    assert_eq!(s.find_by_key("alice", "op-2").await.unwrap(), None);
}

async fn retention_after_finish_counts_from_the_end(s: impl TaskRows) {
    let mut t = record("kept", "alice", 1_000);
    t.ttl_ms = None;
    t.retain_after_finish_ms = Some(5_000);
    s.create(t.clone(), None).await.unwrap();
    let change = TaskChange {
        status: Some(TaskStatus::Completed),
        ..TaskChange::default()
    };
    let done = s
        .update("kept", &TaskStatus::ACTIVE, change, 61_000)
        .await
        .unwrap();
    assert_eq!(
        done.expires_at(),
        Some(66_000),
        "five seconds after it finished"
    );
    let policy = |now| PurgePolicy {
        now,
        finished_grace_ms: 0,
        tombstone_ms: 60_000,
        finished_before: None,
    };
    s.purge(policy(65_999)).await.unwrap();
    assert!(
        matches!(s.get("kept").await.unwrap(), Lookup::Found(_)),
        "kept until then"
    );
    s.purge(policy(66_000)).await.unwrap();
    assert!(matches!(
        s.get("kept").await.unwrap(),
        Lookup::Expired { .. }
    ));
}
