//! Property tests of the task state machine as the stores enforce it: whatever sequence or interleaving
//! of events arrives, a task ends in exactly one terminal state, never leaves it, its progress and
//! total never go down, and the total is never below the progress.

use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_engine::store::sqlite::SqliteStore;
use mcp_tasks_engine::store::{testkit, TaskChange, TaskStore, UpdateError};
use mcp_tasks_engine::{Outcome, ProgressUpdate, TaskStatus};
use proptest::prelude::*;
use std::sync::Arc;

#[derive(Clone, Debug)]
enum Event {
    /// Progress and, maybe, a total (which may be below the progress or an earlier total).
    Progress(u8, Option<u8>),
    NeedInput,
    InputAnswered,
    Complete,
    Fail,
    Cancel,
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        (0u8..100, prop::option::of(0u8..120)).prop_map(|(p, t)| Event::Progress(p, t)),
        Just(Event::NeedInput),
        Just(Event::InputAnswered),
        Just(Event::Complete),
        Just(Event::Fail),
        Just(Event::Cancel),
    ]
}

/// The change an event asks for and the statuses it may start from (what the engine passes).
fn as_change(e: &Event) -> (Vec<TaskStatus>, TaskChange) {
    let active = TaskStatus::ACTIVE.to_vec();
    match e {
        Event::Progress(p, total) => (
            active,
            TaskChange {
                progress: Some(ProgressUpdate {
                    progress: f64::from(*p),
                    total: total.map(f64::from),
                    message: None,
                }),
                ..Default::default()
            },
        ),
        Event::NeedInput => (
            vec![TaskStatus::Working],
            TaskChange {
                status: Some(TaskStatus::InputRequired),
                ..Default::default()
            },
        ),
        Event::InputAnswered => (
            vec![TaskStatus::InputRequired],
            TaskChange {
                status: Some(TaskStatus::Working),
                ..Default::default()
            },
        ),
        Event::Complete => (
            active,
            TaskChange {
                status: Some(TaskStatus::Completed),
                outcome: Some(Outcome::Result {
                    value: serde_json::json!({"content": []}),
                    is_error: false,
                }),
                ..Default::default()
            },
        ),
        Event::Fail => (
            active,
            TaskChange {
                status: Some(TaskStatus::Failed),
                outcome: Some(Outcome::Error {
                    code: -32603,
                    message: "x".into(),
                    data: None,
                }),
                ..Default::default()
            },
        ),
        Event::Cancel => (
            active,
            TaskChange {
                status: Some(TaskStatus::Cancelled),
                ..Default::default()
            },
        ),
    }
}

async fn check_sequence(
    store: Arc<dyn TaskStore>,
    id: &str,
    events: &[Event],
) -> Result<(), TestCaseError> {
    store
        .create(testkit::record(id, "alice", 1), None)
        .await
        .unwrap();
    let mut first_terminal: Option<TaskStatus> = None;
    let mut max_progress: Option<f64> = None;
    let mut max_reported_total: Option<f64> = None;
    let mut last_total: Option<f64> = None;
    let mut status = TaskStatus::Working;
    for (i, e) in events.iter().enumerate() {
        let (expect, change) = as_change(e);
        let wanted = change.status;
        match store.update(id, &expect, change, 10 + i as u64).await {
            Ok(rec) => {
                prop_assert!(
                    !status.is_terminal(),
                    "changed after terminal: {status} -> {}",
                    rec.status
                );
                if let Some(w) = wanted {
                    prop_assert!(status.can_become(w), "illegal transition {status} -> {w}");
                }
                if let Event::Progress(p, total) = e {
                    let p = f64::from(*p);
                    max_progress = Some(max_progress.map_or(p, |m: f64| m.max(p)));
                    if let Some(t) = total.map(f64::from) {
                        max_reported_total = Some(max_reported_total.map_or(t, |m: f64| m.max(t)));
                    }
                }
                prop_assert_eq!(rec.progress, max_progress, "progress never decreases");
                if let (Some(total), Some(progress)) = (rec.progress_total, rec.progress) {
                    prop_assert!(
                        total >= progress,
                        "total {} below progress {}",
                        total,
                        progress
                    );
                }
                prop_assert!(
                    rec.progress_total >= last_total,
                    "total decreased: {:?} -> {:?}",
                    last_total,
                    rec.progress_total
                );
                // Exactly: the largest total reported, raised to the progress, once there is one.
                let expected_total = max_reported_total.map(|t| t.max(max_progress.unwrap_or(t)));
                prop_assert_eq!(rec.progress_total, expected_total);
                last_total = rec.progress_total;
                status = rec.status;
                if status.is_terminal() && first_terminal.is_none() {
                    first_terminal = Some(status);
                }
            }
            Err(UpdateError::Conflict(cur)) => {
                prop_assert_eq!(
                    cur.status,
                    status,
                    "a rejected change reports the current state"
                );
                prop_assert!(!expect.contains(&status));
            }
            Err(e) => return Err(TestCaseError::fail(format!("store error {e}"))),
        }
    }
    prop_assert_eq!(Some(status).filter(|s| s.is_terminal()), first_terminal);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn any_sequence_ends_in_at_most_one_terminal_state_memory(events in prop::collection::vec(event(), 1..30)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(check_sequence(Arc::new(MemoryStore::new()), "t", &events))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn any_sequence_ends_in_at_most_one_terminal_state_sqlite(events in prop::collection::vec(event(), 1..20)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let dir = tempfile::tempdir().unwrap();
        rt.block_on(async {
            let store = Arc::new(SqliteStore::open(dir.path().join("p.db")).unwrap());
            check_sequence(store, "t", &events).await
        })?;
    }

    /// The same events fired concurrently: exactly one terminal event wins when any is present.
    #[test]
    fn concurrent_events_have_exactly_one_terminal_winner(events in prop::collection::vec(event(), 1..12)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let outcome: Result<(), TestCaseError> = rt.block_on(async {
            let stores: Vec<Arc<dyn TaskStore>> = vec![
                Arc::new(MemoryStore::new()),
                Arc::new(SqliteStore::open(dir.path().join("c.db")).unwrap()),
            ];
            for store in stores {
                store.create(testkit::record("c", "alice", 1), None).await.unwrap();
                let handles: Vec<_> = events.iter().cloned().map(|e| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        let (expect, change) = as_change(&e);
                        let terminal = change.status.is_some_and(|s| s.is_terminal());
                        (terminal, store.update("c", &expect, change, 5).await.map(|r| r.status))
                    })
                }).collect();
                let mut winners = Vec::new();
                for h in handles {
                    if let (true, Ok(st)) = h.await.unwrap() {
                        winners.push(st);
                    }
                }
                let any_terminal = events.iter().any(|e| matches!(e, Event::Complete | Event::Fail | Event::Cancel));
                prop_assert_eq!(winners.len(), usize::from(any_terminal), "terminal winners: {:?}", winners);
                let Ok(mcp_tasks_engine::store::Lookup::Found(rec)) = store.get("c").await else {
                    return Err(TestCaseError::fail("task vanished"));
                };
                if let Some(w) = winners.first() {
                    prop_assert_eq!(rec.status, *w);
                }
            }
            Ok(())
        });
        outcome?;
    }
}
