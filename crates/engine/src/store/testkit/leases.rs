//! Leases: take-over of orphaned tasks and writes fenced by the lease ([`LeaseStore`]).

use std::future::Future;
use std::sync::Arc;

use super::{failed, record};
use crate::model::{TaskRecord, TaskStatus};
use crate::store::{
    ActiveLimit, Among, LeaseStore, Lookup, OrphanPlan, StoreError, TaskChange, TaskRows,
    UpdateError,
};

/// Runs this part of the contract, each test on a fresh store from `make`.
pub async fn run<S, F, Fut>(make: F)
where
    S: TaskRows + LeaseStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    orphans_are_claimed_by_lease(make().await).await;
    orphans_are_changed_by_the_plan_in_one_step(make().await).await;
    an_update_for_a_lease_holder_fails_once_the_lease_moved(make().await).await;
    a_noted_change_is_kept_in_the_history_without_a_status_change(make().await).await;
}

async fn orphans_are_claimed_by_lease(s: impl TaskRows + LeaseStore) {
    let mut fresh = record("o1", "alice", 1_000);
    fresh.lease_until = Some(50_000);
    let mut stale = record("o2", "alice", 1_000);
    stale.lease_until = Some(2_000);
    let mut done = record("o3", "alice", 1_000);
    done.status = TaskStatus::Completed;
    for t in [fresh, stale, done] {
        s.create(t, None).await.unwrap();
    }
    let claimed = s
        .claim_orphans("node-b", 10_000, false, 40_000, claim_only())
        .await
        .unwrap();
    assert_eq!(
        claimed.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["o2"]
    );
    assert_eq!(claimed[0].lease_owner.as_deref(), Some("node-b"));
    // node-a keeps o1; it lost o2 to node-b, o3 is finished and o4 never existed.
    let lost = s
        .renew_leases(
            "node-a",
            &["o1".into(), "o2".into(), "o3".into(), "o4".into()],
            90_000,
        )
        .await
        .unwrap();
    assert_eq!(lost, ["o2", "o3", "o4"]);
    let mut all = s
        .claim_orphans("node-c", 10_000, true, 40_000, claim_only())
        .await
        .unwrap();
    all.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(
        all.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["o1", "o2"]
    );
}

async fn an_update_for_a_lease_holder_fails_once_the_lease_moved(s: impl TaskRows + LeaseStore) {
    s.create(record("h1", "alice", 1_000), None).await.unwrap();
    let finish = |holder: &str| TaskChange {
        status: Some(TaskStatus::Completed),
        holder: Some(holder.into()),
        ..Default::default()
    };
    // node-b took the task over; node-a's late outcome is refused and changes nothing.
    s.claim_orphans("node-b", 10_000, true, 40_000, claim_only())
        .await
        .unwrap();
    match s
        .update("h1", &TaskStatus::ACTIVE, finish("node-a"), 11_000)
        .await
    {
        Err(UpdateError::Conflict(cur)) => {
            assert_eq!(cur.status, TaskStatus::Working);
            assert_eq!(cur.lease_owner.as_deref(), Some("node-b"));
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    let done = s
        .update("h1", &TaskStatus::ACTIVE, finish("node-b"), 12_000)
        .await
        .unwrap();
    assert_eq!(done.status, TaskStatus::Completed);
}

/// A plan that only claims (changes nothing else).
fn claim_only() -> OrphanPlan {
    Arc::new(|_| Some(TaskChange::default()))
}

async fn orphans_are_changed_by_the_plan_in_one_step(s: impl TaskRows + LeaseStore) {
    let mut keep_me = record("k1", "alice", 1_000);
    keep_me.retain_after_finish_ms = Some(5_000);
    let mut rerun = record("r1", "alice", 1_000);
    rerun.status = TaskStatus::InputRequired;
    let mine = record("m1", "alice", 1_000);
    for t in [keep_me, rerun, mine] {
        s.create(t, None).await.unwrap();
    }
    let plan: OrphanPlan = Arc::new(|t: &TaskRecord| match t.id.as_str() {
        "m1" => None,
        "r1" => Some(TaskChange {
            status: Some(TaskStatus::Working),
            attempt: Some(t.attempt + 1),
            ..Default::default()
        }),
        _ => Some(failed("interrupted")),
    });
    let mut changed = s
        .claim_orphans("node-b", 10_000, true, 40_000, plan)
        .await
        .unwrap();
    changed.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(
        changed.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["k1", "r1"],
        "m1 left alone"
    );
    // Stored as returned.
    for t in &changed {
        assert_eq!(s.get(&t.id).await.unwrap(), Lookup::Found(t.clone()));
    }
    let failed = &changed[0];
    assert_eq!(failed.status, TaskStatus::Failed);
    assert_eq!(failed.finished_at, Some(10_000));
    assert_eq!(failed.lease_owner, None, "a finished task holds no lease");
    assert_eq!(failed.ttl_ms, Some(9_000 + 5_000), "retention from the end");
    assert_eq!(failed.status_message.as_deref(), Some("interrupted"));
    let again = &changed[1];
    assert_eq!(again.status, TaskStatus::Working);
    assert_eq!(again.attempt, 2);
    assert_eq!(again.lease_owner.as_deref(), Some("node-b"));
    assert_eq!(again.lease_until, Some(40_000));
    let Lookup::Found(untouched) = s.get("m1").await.unwrap() else {
        panic!("m1 is gone")
    };
    assert_eq!(untouched.lease_owner.as_deref(), Some("node-a"));
    // The failed task no longer counts against a limit; the two unfinished ones do.
    let limit = ActiveLimit {
        max: 3,
        owner: "alice".into(),
        among: Among::All,
    };
    s.create(record("n1", "alice", 11_000), Some(limit.clone()))
        .await
        .unwrap();
    match s.create(record("n2", "alice", 12_000), Some(limit)).await {
        Err(StoreError::TooManyActive { active: 3, max: 3 }) => {}
        other => panic!("expected the limit, got {other:?}"),
    }
}

async fn a_noted_change_is_kept_in_the_history_without_a_status_change(
    s: impl TaskRows + LeaseStore,
) {
    s.create(record("n", "alice", 1_000), None).await.unwrap();
    // A hand-off: the lease is let go, the status stays, the history keeps it.
    let hand_off = TaskChange {
        lease: Some((None, None)),
        status_message: Some(Some("handed off".into())),
        holder: Some("node-a".into()),
        noted: true,
        ..Default::default()
    };
    let rec = s
        .update("n", &TaskStatus::ACTIVE, hand_off, 1_100)
        .await
        .unwrap();
    assert_eq!((rec.lease_owner, rec.lease_until), (None, None));
    // A released task is an orphan at once, whatever the time; the resume is noted too.
    let plan: OrphanPlan = Arc::new(|t: &TaskRecord| {
        Some(TaskChange {
            status_message: Some(Some("resumed".into())),
            attempt: Some(t.attempt + 1),
            noted: true,
            ..Default::default()
        })
    });
    let claimed = s
        .claim_orphans("node-b", 1_200, false, 31_200, plan)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].lease_owner.as_deref(), Some("node-b"));
    assert_eq!(claimed[0].attempt, 2);
    let h = s.history("n").await.unwrap();
    let seen: Vec<(u64, TaskStatus, Option<&str>)> = h
        .iter()
        .map(|t| (t.at, t.status, t.message.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            (1_100, TaskStatus::Working, Some("handed off")),
            (1_200, TaskStatus::Working, Some("resumed"))
        ]
    );
}
