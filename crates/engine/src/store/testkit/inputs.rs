//! Input requests: a task's questions and their one answer ([`InputStore`]).

use serde_json::json;
use std::future::Future;

use super::{failed, input, purge_finished_before, record};
use crate::model::{InputRecord, InputResponse, TaskStatus};
use crate::store::{
    AnswerError, Handed, InputStore, Lookup, ProgressUpdate, PurgePolicy, TaskChange, TaskRows,
    UpdateError,
};

/// Runs this part of the contract, each test on a fresh store from `make`.
pub async fn run<S, F, Fut>(make: F)
where
    S: TaskRows + InputStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    input_requests_move_the_task_and_take_one_answer(make().await).await;
    purge_takes_the_input_requests_of_purged_tasks(make().await).await;
    every_status_change_is_kept_until_the_task_is_purged(make().await).await;
    a_pending_request_is_handed_from_its_holder_to_another(make().await).await;
}

/// What every store does with a hand-over its holder asks for (a shared store's refusals of the
/// wrong holder are the PostgreSQL tests'): each step is done.
async fn a_pending_request_is_handed_from_its_holder_to_another(s: impl TaskRows + InputStore) {
    s.create(record("h", "alice", 1_000), None).await.unwrap();
    s.add_input(input("h-q", "h", 1_100), 1_100).await.unwrap();
    let steps = [(None, Some("a")), (Some("a"), Some("b")), (Some("b"), None)];
    for (from, to) in steps {
        assert_eq!(
            s.hand_input("h-q", from, to).await.unwrap(),
            Handed::Done,
            "from {from:?} to {to:?}"
        );
    }
}

async fn purge_takes_the_input_requests_of_purged_tasks(s: impl TaskRows + InputStore) {
    let answer = InputResponse::Result {
        value: json!({"answer": "yes"}),
    };
    // g1 asks twice, gets one answer, then ends; g2 keeps running with a question of its own.
    s.create(record("g1", "alice", 1_000), None).await.unwrap();
    s.create(record("g2", "alice", 1_000), None).await.unwrap();
    s.add_input(input("g1-a", "g1", 1_100), 1_100)
        .await
        .unwrap();
    s.add_input(input("g1-b", "g1", 1_200), 1_200)
        .await
        .unwrap();
    s.add_input(input("g2-a", "g2", 1_300), 1_300)
        .await
        .unwrap();
    s.answer_input("g1-a", answer.clone(), 1_400).await.unwrap();
    s.answer_input("g2-a", answer, 1_500).await.unwrap();
    let cancel = TaskChange {
        status: Some(TaskStatus::Cancelled),
        ..Default::default()
    };
    s.update("g1", &TaskStatus::ACTIVE, cancel, 2_000)
        .await
        .unwrap();
    let policy = PurgePolicy {
        now: 70_000,
        finished_grace_ms: 5_000,
        tombstone_ms: 10_000,
        finished_before: None,
    };
    assert_eq!(s.purge(policy).await.unwrap().tasks, 1);
    assert!(matches!(s.get("g1").await.unwrap(), Lookup::Expired { .. }));
    assert_eq!(s.get_input("g1-a").await.unwrap(), None, "answered: gone");
    assert_eq!(s.get_input("g1-b").await.unwrap(), None, "unanswered: gone");
    assert_eq!(s.inputs("g1").await.unwrap(), Vec::<InputRecord>::new());
    let kept = s.inputs("g2").await.unwrap();
    assert_eq!(
        kept.iter().map(|i| i.key.as_str()).collect::<Vec<_>>(),
        ["g2-a"],
        "a running task's inputs stay"
    );
    assert!(kept[0].response.is_some());
    assert!(s.get_input("g2-a").await.unwrap().is_some());
}

async fn input_requests_move_the_task_and_take_one_answer(s: impl TaskRows + InputStore) {
    s.create(record("i1", "alice", 1_000), None).await.unwrap();
    let t = s.add_input(input("q1", "i1", 2_000), 2_000).await.unwrap();
    assert_eq!(t.status, TaskStatus::InputRequired);
    let t = s.add_input(input("q2", "i1", 2_001), 2_001).await.unwrap();
    assert_eq!(t.status, TaskStatus::InputRequired);
    assert!(matches!(
        s.add_input(input("q9", "nope", 1), 1).await,
        Err(UpdateError::NotFound)
    ));
    let yes = InputResponse::Result {
        value: json!({"action": "accept"}),
    };
    let (t, answered) = s.answer_input("q1", yes.clone(), 3_000).await.unwrap();
    assert_eq!(t.status, TaskStatus::InputRequired, "q2 is still pending");
    assert_eq!(answered.response, Some(yes.clone()));
    assert!(matches!(
        s.answer_input("q1", yes.clone(), 3_001).await,
        Err(AnswerError::AlreadyAnswered)
    ));
    assert!(matches!(
        s.answer_input("zz", yes.clone(), 3_001).await,
        Err(AnswerError::Unknown)
    ));
    let (t, _) = s.answer_input("q2", yes.clone(), 3_002).await.unwrap();
    assert_eq!(t.status, TaskStatus::Working, "all answered: back to work");
    let all = s.inputs("i1").await.unwrap();
    assert_eq!(
        all.iter().map(|i| i.key.as_str()).collect::<Vec<_>>(),
        ["q1", "q2"]
    );
    assert_eq!(
        s.get_input("q2").await.unwrap().unwrap().answered_at,
        Some(3_002)
    );
    // A task that ends takes no more answers, and one waiting past its ttl is reported overdue.
    let mut waiting = record("i2", "alice", 1_000);
    waiting.ttl_ms = Some(500);
    s.create(waiting, None).await.unwrap();
    s.add_input(input("q3", "i2", 1_100), 1_100).await.unwrap();
    let overdue = s.overdue_waiting(1_600).await.unwrap();
    assert_eq!(
        overdue.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["i2"]
    );
    let cancel = TaskChange {
        status: Some(TaskStatus::Cancelled),
        ..Default::default()
    };
    s.update("i2", &TaskStatus::ACTIVE, cancel, 1_700)
        .await
        .unwrap();
    assert!(matches!(
        s.answer_input("q3", yes, 1_800).await,
        Err(AnswerError::TaskEnded(TaskStatus::Cancelled))
    ));
}

async fn every_status_change_is_kept_until_the_task_is_purged(s: impl TaskRows + InputStore) {
    s.create(record("h", "alice", 1_000), None).await.unwrap();
    s.add_input(input("h-q", "h", 1_100), 1_100).await.unwrap();
    // Progress alone is no status change.
    let progress = TaskChange {
        progress: Some(ProgressUpdate {
            progress: 1.0,
            total: None,
            message: None,
        }),
        ..Default::default()
    };
    s.update("h", &TaskStatus::ACTIVE, progress, 1_150)
        .await
        .unwrap();
    let answer = InputResponse::Result {
        value: json!({"answer": "yes"}),
    };
    s.answer_input("h-q", answer, 1_200).await.unwrap();
    let fail = failed("it broke");
    s.update("h", &TaskStatus::ACTIVE, fail, 1_300)
        .await
        .unwrap();
    let h = s.history("h").await.unwrap();
    let seen: Vec<(u64, TaskStatus)> = h.iter().map(|t| (t.at, t.status)).collect();
    assert_eq!(
        seen,
        [
            (1_100, TaskStatus::InputRequired),
            (1_200, TaskStatus::Working),
            (1_300, TaskStatus::Failed)
        ]
    );
    assert_eq!(h[2].message.as_deref(), Some("it broke"));
    assert!(s.history("nope").await.unwrap().is_empty());
    let purge = purge_finished_before(2_000);
    assert_eq!(s.purge(purge).await.unwrap().tasks, 1);
    assert!(
        s.history("h").await.unwrap().is_empty(),
        "purged with the task"
    );
}
