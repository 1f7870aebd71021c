//! The step journal: steps recorded by the lease holder, once ([`JournalStore`]).

use serde_json::json;
use std::future::Future;

use super::{completed, purge_finished_before, record};
use crate::model::{StepRecord, TaskStatus};
use crate::store::{JournalStore, TaskRows, UpdateError};

/// Runs this part of the contract, each test on a fresh store from `make`.
pub async fn run<S, F, Fut>(make: F)
where
    S: TaskRows + JournalStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    steps_are_recorded_by_the_lease_holder_once_and_purged_with_the_task(make().await).await;
    a_journal_is_truncated_from_a_place_and_only_that_task_s(make().await).await;
}

fn step(task: &str, seq: u32, name: &str) -> StepRecord {
    StepRecord {
        task_id: task.into(),
        seq,
        name: name.into(),
        output: json!({"item": seq, "attempt": 1}),
        attempt: 1,
        at: 1_000 + u64::from(seq),
        // An odd place holds a step that failed for good: its error and duration read back.
        duration_ms: 40 + u64::from(seq),
        error: (seq % 2 == 1).then(|| format!("step {seq} failed: 503 from upstream")),
    }
}

async fn steps_are_recorded_by_the_lease_holder_once_and_purged_with_the_task(
    s: impl TaskRows + JournalStore,
) {
    s.create(record("j", "alice", 1_000), None).await.unwrap();
    s.create(record("other", "alice", 1_000), None)
        .await
        .unwrap();
    assert!(s.steps("j").await.unwrap().is_empty());
    // Recorded out of order, read in step order.
    s.record_step("node-a", step("j", 1, "second"))
        .await
        .unwrap();
    s.record_step("node-a", step("j", 0, "first"))
        .await
        .unwrap();
    s.record_step("node-a", step("other", 0, "elsewhere"))
        .await
        .unwrap();
    let journal = s.steps("j").await.unwrap();
    assert_eq!(journal, vec![step("j", 0, "first"), step("j", 1, "second")]);
    // The first record of a place stays.
    let mut again = step("j", 1, "changed");
    again.output = json!("different");
    assert!(matches!(
        s.record_step("node-a", again).await,
        Err(UpdateError::Conflict(_))
    ));
    // Only the lease holder records.
    assert!(matches!(
        s.record_step("node-b", step("j", 2, "third")).await,
        Err(UpdateError::Conflict(t)) if t.lease_owner.as_deref() == Some("node-a")
    ));
    assert!(matches!(
        s.record_step("node-a", step("nope", 0, "x")).await,
        Err(UpdateError::NotFound)
    ));
    assert_eq!(s.steps("j").await.unwrap().len(), 2);
    // A finished task records nothing more, and keeps its journal until it is purged.
    s.update("j", &TaskStatus::ACTIVE, completed(), 1_500)
        .await
        .unwrap();
    assert!(matches!(
        s.record_step("node-a", step("j", 2, "third")).await,
        Err(UpdateError::Conflict(t)) if t.status == TaskStatus::Completed
    ));
    assert_eq!(s.steps("j").await.unwrap().len(), 2);
    let purge = purge_finished_before(2_000);
    assert_eq!(s.purge(purge).await.unwrap().tasks, 1);
    assert!(
        s.steps("j").await.unwrap().is_empty(),
        "purged with the task"
    );
    assert_eq!(s.steps("other").await.unwrap().len(), 1, "only its own");
}

async fn a_journal_is_truncated_from_a_place_and_only_that_task_s(s: impl TaskRows + JournalStore) {
    s.create(record("j", "alice", 1_000), None).await.unwrap();
    s.create(record("other", "alice", 1_000), None)
        .await
        .unwrap();
    for seq in 0..4 {
        s.record_step("node-a", step("j", seq, "item"))
            .await
            .unwrap();
    }
    s.record_step("node-a", step("other", 3, "item"))
        .await
        .unwrap();
    assert_eq!(s.truncate_steps("j", 2).await.unwrap(), 2);
    let left: Vec<u32> = s.steps("j").await.unwrap().iter().map(|r| r.seq).collect();
    assert_eq!(left, [0, 1]);
    assert_eq!(
        s.truncate_steps("j", 2).await.unwrap(),
        0,
        "nothing left there"
    );
    assert_eq!(s.steps("other").await.unwrap().len(), 1, "only its own");
    // A place freed is recorded again.
    s.record_step("node-a", step("j", 2, "again"))
        .await
        .unwrap();
    assert_eq!(s.truncate_steps("j", 0).await.unwrap(), 3);
    assert!(s.steps("j").await.unwrap().is_empty());
    assert_eq!(s.truncate_steps("nope", 0).await.unwrap(), 0);
}
