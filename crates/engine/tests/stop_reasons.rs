//! A run is stopped for a reason it can read (`TaskContext::stop_reason`): a cancel, a hand-off, a
//! lost lease, a finish elsewhere, a shutdown. Only a cancel means the work is no longer wanted;
//! what the handler returns after a stop is written only where it is still the task's: a
//! successful result returned within the grace of a hand-off or a shutdown.

use async_trait::async_trait;
use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_engine::store::{Lookup, TaskChange, TaskStore};
use mcp_tasks_engine::{
    now_ms, Engine, EngineConfig, NewTask, Outcome, StopReason, TaskContext, TaskEvent,
    TaskHandler, TaskRecord, TaskStatus,
};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Waits to be told to stop, notes why, then returns `then` (a result, or an error).
struct Notes {
    started: Arc<std::sync::atomic::AtomicUsize>,
    reasons: Arc<Mutex<Vec<StopReason>>>,
    succeed: bool,
}

#[async_trait]
impl TaskHandler for Notes {
    async fn run(&self, ctx: TaskContext, _args: Arc<Value>) -> Outcome {
        self.started
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        ctx.cancelled().await;
        let reason = ctx.stop_reason().expect("stopped, with a reason");
        assert_eq!(ctx.is_handed_off(), reason == StopReason::HandedOff);
        self.reasons.lock().unwrap().push(reason);
        if self.succeed {
            Outcome::Result {
                value: json!({"content": [], "finished": "while stopping"}),
                is_error: false,
            }
        } else {
            Outcome::Error {
                code: -32603,
                message: format!("stopped: {reason}"),
                data: None,
            }
        }
    }
}

/// Works for 150 ms without looking at its context, then returns a result.
struct Finishes {
    started: Arc<std::sync::atomic::AtomicUsize>,
}

#[async_trait]
impl TaskHandler for Finishes {
    async fn run(&self, _ctx: TaskContext, _args: Arc<Value>) -> Outcome {
        self.started
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(150)).await;
        Outcome::Result {
            value: json!({"content": [], "finished": "its work"}),
            is_error: false,
        }
    }
}

struct Fixture {
    store: Arc<dyn TaskStore>,
    started: Arc<std::sync::atomic::AtomicUsize>,
    reasons: Arc<Mutex<Vec<StopReason>>>,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            store: Arc::new(MemoryStore::new()),
            started: Arc::default(),
            reasons: Arc::default(),
        }
    }

    /// A node named `name` with a short lease (renewed every 100 ms).
    fn node(&self, name: &str) -> Arc<Engine> {
        let config = EngineConfig {
            node_id: name.into(),
            cancel_grace: Duration::from_millis(500),
            lease_ms: 300,
            ..EngineConfig::default()
        };
        Engine::builder(self.store.clone(), config)
            .handler(
                "succeeds",
                Arc::new(Notes {
                    started: self.started.clone(),
                    reasons: self.reasons.clone(),
                    succeed: true,
                }),
                false,
            )
            .handler(
                "finishes",
                Arc::new(Finishes {
                    started: self.started.clone(),
                }),
                false,
            )
            .handler(
                "fails",
                Arc::new(Notes {
                    started: self.started.clone(),
                    reasons: self.reasons.clone(),
                    succeed: false,
                }),
                false,
            )
            .build()
    }

    async fn task(&self, id: &str) -> TaskRecord {
        match self.store.get(id).await.unwrap() {
            Lookup::Found(t) => t,
            other => panic!("{id}: {other:?}"),
        }
    }

    async fn submit(&self, node: &Arc<Engine>, tool: &str) -> String {
        let before = self.started.load(std::sync::atomic::Ordering::SeqCst);
        let id = node
            .submit(NewTask::new(tool, json!({})))
            .await
            .unwrap()
            .record
            .id;
        // Its handler runs, not yet stopped.
        soon("the handler started", || async {
            (self.started.load(std::sync::atomic::Ordering::SeqCst) > before).then_some(())
        })
        .await;
        assert!(node.running_count() >= 1);
        id
    }

    /// Waits until the handler noted its reason and the run ended.
    async fn stopped(&self, node: &Arc<Engine>) -> StopReason {
        let reason = soon("the handler stopped", || async {
            self.reasons.lock().unwrap().last().copied()
        })
        .await;
        soon("the run ended", || async {
            (node.running_count() == 0).then_some(())
        })
        .await;
        reason
    }
}

/// What `check` gives once it gives something, asked every 5 ms for at most 5 s.
async fn soon<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let wait = async {
        loop {
            if let Some(v) = check().await {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), wait)
        .await
        .unwrap_or_else(|_| panic!("{what} within 5 s"))
}

#[tokio::test]
async fn a_cancel_is_read_as_cancelled_and_what_the_handler_returns_is_not_written() {
    let f = Fixture::new();
    let node = f.node("a");
    node.start().await.unwrap();
    let id = f.submit(&node, "succeeds").await;
    node.cancel(&id, None).await.unwrap();
    assert_eq!(f.stopped(&node).await, StopReason::Cancelled);
    let t = f.task(&id).await;
    assert_eq!(t.status, TaskStatus::Cancelled);
    assert_eq!(t.outcome, None, "{t:?}");
    node.shutdown();
}

/// The result a handler returns within the grace of a hand-off, having finished its work without
/// looking at the stop, is the task's: the work is done, and running it again (or failing it as
/// unable to resume) would throw it away.
#[tokio::test]
async fn a_result_returned_during_the_hand_off_grace_is_written() {
    let f = Fixture::new();
    let node = f.node("a");
    node.start().await.unwrap();
    let id = f.submit(&node, "finishes").await;
    node.hand_off().await;
    let t = f.task(&id).await;
    assert_eq!(t.status, TaskStatus::Completed, "{t:?}");
    let Some(Outcome::Result { value, .. }) = &t.outcome else {
        panic!("{t:?}")
    };
    assert_eq!(value["finished"], "its work");
    node.shutdown();
}

/// A handler that saw the stop and returns a success at once (`select!` on `cancelled()`, then a
/// result: a common shape) answered the stop: its result is not the task's, which is let go.
#[tokio::test]
async fn a_result_returned_by_a_handler_that_saw_the_hand_off_is_not_written() {
    let f = Fixture::new();
    let node = f.node("a");
    node.start().await.unwrap();
    let id = f.submit(&node, "succeeds").await;
    node.hand_off().await;
    assert_eq!(f.stopped(&node).await, StopReason::HandedOff);
    let t = f.task(&id).await;
    assert_eq!(t.status, TaskStatus::Working, "{t:?}");
    assert_eq!(t.lease_owner, None, "let go");
    assert_eq!(t.outcome, None);
    node.shutdown();
}

/// An error returned after a hand-off is taken for the stop's own doing: the task is let go
/// unfinished, to resume elsewhere.
#[tokio::test]
async fn an_error_returned_after_a_hand_off_is_not_written_and_the_task_is_let_go() {
    let f = Fixture::new();
    let node = f.node("a");
    node.start().await.unwrap();
    let id = f.submit(&node, "fails").await;
    node.hand_off().await;
    assert_eq!(f.stopped(&node).await, StopReason::HandedOff);
    let t = f.task(&id).await;
    assert_eq!(t.status, TaskStatus::Working, "{t:?}");
    assert_eq!(t.lease_owner, None, "let go");
    assert_eq!(t.outcome, None);
    node.shutdown();
}

#[tokio::test]
async fn a_shutdown_is_read_as_shutting_down_and_a_result_returned_then_is_written() {
    let f = Fixture::new();
    let node = f.node("a");
    node.start().await.unwrap();
    let seen = f.submit(&node, "succeeds").await;
    let finished = f.submit(&node, "finishes").await;
    node.shutdown();
    assert_eq!(f.stopped(&node).await, StopReason::ShuttingDown);
    soon("both runs ended", || async {
        (node.running_count() == 0).then_some(())
    })
    .await;
    // Left for the next start: it saw the stop.
    assert_eq!(f.task(&seen).await.status, TaskStatus::Working);
    // Its work was done within the grace.
    assert_eq!(f.task(&finished).await.status, TaskStatus::Completed);
}

/// Another node took the task over (its lease moved): the run is dropped at once, with no grace
/// (the other node may run the task now), and nothing of it is written over the new holder's run.
#[tokio::test]
async fn a_lease_taken_over_drops_the_run_at_once_and_nothing_is_written() {
    let f = Fixture::new();
    let node = f.node("a");
    node.start().await.unwrap();
    let id = f.submit(&node, "succeeds").await;
    let change = TaskChange {
        lease: Some((Some("b".into()), Some(now_ms() + 60_000))),
        ..Default::default()
    };
    f.store
        .update(&id, &TaskStatus::ACTIVE, change, now_ms())
        .await
        .unwrap();
    soon("the run was dropped", || async {
        (node.running_count() == 0).then_some(())
    })
    .await;
    // Dropped without a grace: a handler that saw the stop in the same instant may have noted it,
    // but nothing it returned is written.
    let reasons = f.reasons.lock().unwrap().clone();
    assert!(
        reasons.iter().all(|r| *r == StopReason::LeaseLost),
        "{reasons:?}"
    );
    let t = f.task(&id).await;
    assert_eq!(t.status, TaskStatus::Working, "{t:?}");
    assert_eq!(t.lease_owner.as_deref(), Some("b"));
    assert_eq!(t.outcome, None);
    node.shutdown();
}

/// Finished by someone else (another replica's run, as its relay tells this node): the run reads
/// a finish elsewhere, not a cancel.
#[tokio::test]
async fn a_task_finished_elsewhere_is_read_as_such() {
    let f = Fixture::new();
    let node = f.node("a");
    node.start().await.unwrap();
    let id = f.submit(&node, "fails").await;
    let change = TaskChange {
        status: Some(TaskStatus::Completed),
        outcome: Some(Outcome::Result {
            value: json!({"content": [], "by": "b"}),
            is_error: false,
        }),
        ..Default::default()
    };
    let done = f
        .store
        .update(&id, &TaskStatus::ACTIVE, change, now_ms())
        .await
        .unwrap();
    node.notifier()
        .publish_from_peer(TaskEvent::Changed(Arc::new(done)));
    assert_eq!(f.stopped(&node).await, StopReason::FinishedElsewhere);
    let t = f.task(&id).await;
    let Some(Outcome::Result { value, .. }) = &t.outcome else {
        panic!("{t:?}")
    };
    assert_eq!(value["by"], "b", "the other node's outcome stays");
    node.shutdown();
}
