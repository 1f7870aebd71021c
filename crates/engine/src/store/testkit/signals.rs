//! Signals: kept in the order sent while the task is unfinished, one per key ([`SignalStore`]).

use serde_json::json;
use std::future::Future;

use super::{completed, purge_finished_before, record};
use crate::model::{NewSignal, TaskStatus};
use crate::store::{SignalStore, TaskRows, UpdateError};

/// Runs this part of the contract, each test on a fresh store from `make`.
pub async fn run<S, F, Fut>(make: F)
where
    S: TaskRows + SignalStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    signals_are_kept_in_order_once_per_key_and_purged_with_the_task(make().await).await;
}

fn signal(task: &str, name: &str, payload: serde_json::Value, key: Option<&str>) -> NewSignal {
    NewSignal {
        task_id: task.into(),
        name: name.into(),
        payload,
        sender: "owner alice".into(),
        key: key.map(str::to_string),
        at: 1_100,
    }
}

async fn signals_are_kept_in_order_once_per_key_and_purged_with_the_task(
    s: impl TaskRows + SignalStore,
) {
    s.create(record("t", "alice", 1_000), None).await.unwrap();
    s.create(record("other", "alice", 1_000), None)
        .await
        .unwrap();
    assert!(s.signals("t").await.unwrap().is_empty());
    assert_eq!(s.next_signal("t", "approve", 0).await.unwrap(), None);

    let (first, fresh) = s
        .send_signal(signal("t", "approve", json!({"by": "bob"}), None))
        .await
        .unwrap();
    assert!(fresh);
    assert_eq!((first.seq, first.name.as_str()), (1, "approve"));
    assert_eq!(first.payload, json!({"by": "bob"}));
    assert_eq!(first.sender, "owner alice");
    let (note, _) = s
        .send_signal(signal("t", "note", json!("hi"), Some("k1")))
        .await
        .unwrap();
    let (second, _) = s
        .send_signal(signal("t", "approve", json!(null), None))
        .await
        .unwrap();
    assert_eq!((note.seq, second.seq), (2, 3));
    // Another task's signals have places of their own.
    let (elsewhere, _) = s
        .send_signal(signal("other", "approve", json!(1), None))
        .await
        .unwrap();
    assert_eq!(elsewhere.seq, 1);

    // The same key is the same signal, whatever the retry carries.
    let (again, fresh) = s
        .send_signal(signal("t", "note", json!("changed"), Some("k1")))
        .await
        .unwrap();
    assert!(!fresh);
    assert_eq!(again, note);
    // A key is the task's own: another task may use it.
    let (_, fresh) = s
        .send_signal(signal("other", "note", json!(2), Some("k1")))
        .await
        .unwrap();
    assert!(fresh);

    // By name, after a place.
    let next = |after| s.next_signal("t", "approve", after);
    assert_eq!(next(0).await.unwrap(), Some(first.clone()));
    assert_eq!(next(1).await.unwrap(), Some(second.clone()));
    assert_eq!(next(3).await.unwrap(), None);
    assert_eq!(
        s.next_signal("t", "note", 0).await.unwrap(),
        Some(note.clone())
    );
    assert_eq!(s.next_signal("t", "nothing", 0).await.unwrap(), None);
    assert_eq!(
        s.signals("t").await.unwrap(),
        vec![first, note.clone(), second],
        "every signal in the order sent"
    );

    assert!(matches!(
        s.send_signal(signal("nope", "approve", json!(1), None))
            .await,
        Err(UpdateError::NotFound)
    ));
    // A finished task takes no more signals and keeps its own until it is purged.
    s.update("t", &TaskStatus::ACTIVE, completed(), 1_500)
        .await
        .unwrap();
    assert!(matches!(
        s.send_signal(signal("t", "approve", json!(1), None)).await,
        Err(UpdateError::Conflict(t)) if t.status == TaskStatus::Completed
    ));
    let (kept, fresh) = s
        .send_signal(signal("t", "note", json!("late retry"), Some("k1")))
        .await
        .unwrap();
    assert_eq!(
        (kept, fresh),
        (note, false),
        "a retried key is answered as before"
    );
    assert_eq!(s.signals("t").await.unwrap().len(), 3);
    s.purge(purge_finished_before(2_000)).await.unwrap();
    assert!(s.signals("t").await.unwrap().is_empty());
    assert_eq!(s.signals("other").await.unwrap().len(), 2);
}
