//! The step journal by identity: a step is matched by its name and occurrence, so a step future
//! dropped on the way (a timeout, a `select!`) shifts nothing; steps started at once are refused;
//! repeated names replay in order.

use async_trait::async_trait;
use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_engine::store::TaskStore;
use mcp_tasks_engine::{
    Engine, EngineConfig, NewTask, Outcome, StepError, TaskContext, TaskHandler, TaskStatus,
};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn failure(e: StepError) -> Outcome {
    Outcome::Error {
        code: -32603,
        message: e.to_string(),
        data: None,
    }
}

/// Step `a`; then step `slow`, given up on after 20 ms (its future dropped); then step `b`, whose
/// output names the attempt that ran it. The first run then waits to be handed off.
struct Drops {
    bodies: Arc<Mutex<Vec<(String, u32)>>>,
}

#[async_trait]
impl TaskHandler for Drops {
    async fn run(&self, ctx: TaskContext, _args: Arc<Value>) -> Outcome {
        let attempt = ctx.attempt();
        let note = |name: &str| {
            self.bodies
                .lock()
                .unwrap()
                .push((name.to_string(), attempt))
        };
        let a: u32 = match ctx
            .step("a", || async {
                note("a");
                attempt
            })
            .await
        {
            Ok(v) => v,
            Err(e) => return failure(e),
        };
        let slow = ctx.step("slow", || async {
            note("slow");
            tokio::time::sleep(Duration::from_secs(30)).await;
            attempt
        });
        tokio::select! {
            _ = slow => {}
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
        let b: u32 = match ctx
            .step("b", || async {
                note("b");
                attempt
            })
            .await
        {
            Ok(v) => v,
            Err(e) => return failure(e),
        };
        if attempt == 1 {
            ctx.cancelled().await;
            return failure(StepError::Stopped);
        }
        Outcome::Result {
            value: json!({"a": a, "b": b}),
            is_error: false,
        }
    }
}

/// Three steps of one name, each recording its place; the first run stops after two.
struct Repeats {
    bodies: Arc<Mutex<Vec<(String, u32)>>>,
}

#[async_trait]
impl TaskHandler for Repeats {
    async fn run(&self, ctx: TaskContext, _args: Arc<Value>) -> Outcome {
        let attempt = ctx.attempt();
        let mut got = Vec::new();
        for i in 0..3u32 {
            if i == 2 && attempt == 1 {
                ctx.cancelled().await;
                return failure(StepError::Stopped);
            }
            let bodies = self.bodies.clone();
            match ctx
                .step("fetch", || async move {
                    bodies.lock().unwrap().push((format!("fetch {i}"), attempt));
                    json!({"i": i, "attempt": attempt})
                })
                .await
            {
                Ok(v) => got.push(v),
                Err(e) => return failure(e),
            }
        }
        Outcome::Result {
            value: json!({"got": got}),
            is_error: false,
        }
    }
}

/// Two steps at once: the second is refused, saying why.
struct AtOnce;

#[async_trait]
impl TaskHandler for AtOnce {
    async fn run(&self, ctx: TaskContext, _args: Arc<Value>) -> Outcome {
        let (first, second) = tokio::join!(
            ctx.step("first", || async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                1
            }),
            ctx.step("second", || async { 2 })
        );
        let refused = match second {
            Err(e @ StepError::Concurrent { .. }) => e.to_string(),
            other => format!("not refused: {other:?}"),
        };
        // Once the first has ended, a step may start again.
        let third = ctx.step("third", || async { 3 }).await;
        Outcome::Result {
            value: json!({"first": first.ok(), "refused": refused, "third": third.ok()}),
            is_error: false,
        }
    }
}

struct Fixture {
    store: Arc<dyn TaskStore>,
    bodies: Arc<Mutex<Vec<(String, u32)>>>,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            store: Arc::new(MemoryStore::new()),
            bodies: Arc::default(),
        }
    }

    fn node(&self) -> Arc<Engine> {
        let config = EngineConfig {
            cancel_grace: Duration::from_millis(500),
            ..EngineConfig::default()
        };
        Engine::builder(self.store.clone(), config)
            .handler(
                "drops",
                Arc::new(Drops {
                    bodies: self.bodies.clone(),
                }),
                true,
            )
            .handler(
                "repeats",
                Arc::new(Repeats {
                    bodies: self.bodies.clone(),
                }),
                true,
            )
            .handler("at_once", Arc::new(AtOnce), true)
            .build()
    }

    /// Runs `tool` on one node until its first run recorded `steps` steps, hands it off, and lets a
    /// second node finish it.
    async fn across_a_hand_off(&self, tool: &str, steps: usize) -> Value {
        let first = self.node();
        first.start().await.unwrap();
        let id = first
            .submit(NewTask::new(tool, json!({})))
            .await
            .unwrap()
            .record
            .id;
        let store = self.store.clone();
        let recorded = async {
            while store.steps(&id).await.unwrap().len() < steps {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), recorded)
            .await
            .expect("the first run recorded its steps");
        first.hand_off().await;
        first.shutdown();
        let second = self.node();
        second.start().await.unwrap();
        let done = tokio::time::timeout(Duration::from_secs(5), second.wait_terminal(&id))
            .await
            .expect("the task ends")
            .unwrap();
        second.shutdown();
        assert_eq!(done.status, TaskStatus::Completed, "{done:?}");
        match done.outcome {
            Some(Outcome::Result { value, .. }) => value,
            other => panic!("{other:?}"),
        }
    }

    fn bodies(&self) -> Vec<(String, u32)> {
        self.bodies.lock().unwrap().clone()
    }
}

/// Before, steps were matched by place: the dropped `slow` used up place 1, `b` was recorded at
/// place 2, and the resumed run met `b` at place 1: "replay mismatch".
#[tokio::test]
async fn a_dropped_step_future_shifts_no_later_step() {
    let f = Fixture::new();
    let value = f.across_a_hand_off("drops", 2).await;
    // `a` and `b` are the first run's, replayed; `slow` never recorded, so it ran again (and was
    // dropped again).
    assert_eq!(value, json!({"a": 1, "b": 1}));
    let bodies = f.bodies();
    let ran = |name: &str| {
        bodies
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, a)| *a)
            .collect::<Vec<_>>()
    };
    assert_eq!(ran("a"), [1]);
    assert_eq!(ran("b"), [1]);
    assert_eq!(ran("slow"), [1, 2]);
}

#[tokio::test]
async fn steps_of_one_name_replay_by_occurrence() {
    let f = Fixture::new();
    let value = f.across_a_hand_off("repeats", 2).await;
    assert_eq!(
        value["got"],
        json!([
            {"i": 0, "attempt": 1},
            {"i": 1, "attempt": 1},
            {"i": 2, "attempt": 2},
        ])
    );
    assert_eq!(
        f.bodies(),
        [
            ("fetch 0".to_string(), 1),
            ("fetch 1".to_string(), 1),
            ("fetch 2".to_string(), 2)
        ]
    );
}

#[tokio::test]
async fn a_step_started_while_another_runs_is_refused_saying_why() {
    let f = Fixture::new();
    let node = f.node();
    node.start().await.unwrap();
    let id = node
        .submit(NewTask::new("at_once", json!({})))
        .await
        .unwrap()
        .record
        .id;
    let done = tokio::time::timeout(Duration::from_secs(5), node.wait_terminal(&id))
        .await
        .unwrap()
        .unwrap();
    let Some(Outcome::Result { value, .. }) = done.outcome else {
        panic!("{done:?}")
    };
    assert_eq!(value["first"], 1);
    assert_eq!(value["third"], 3);
    let refused = value["refused"].as_str().unwrap();
    assert!(
        refused.contains("`second` was started while step `first` still runs"),
        "{refused}"
    );
    // The journal holds the two that ran, nothing of the refused one.
    let names: Vec<String> = f
        .store
        .steps(&id)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["first", "third"]);
    node.shutdown();
}
