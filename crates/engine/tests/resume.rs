//! Work that survives: a stopping node hands its tasks off (a reason the handler can tell from a
//! cancel, the lease let go at once, the history keeps it), and the next run resumes them from a
//! checkpoint or by replaying the step journal; answered questions are not asked again.

use async_trait::async_trait;
use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_engine::store::{Lookup, TaskStore};
use mcp_tasks_engine::{
    Engine, EngineConfig, InputResponse, NewTask, Outcome, StepError, TaskContext, TaskHandler,
    TaskRecord, TaskStatus,
};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn failure(message: String) -> Outcome {
    Outcome::Error {
        code: -32603,
        message,
        data: None,
    }
}

/// Works through `items` items, one step each; each step's body notes (item, attempt) in `done`, the
/// side effect that must happen once. On its first run it stops after `pause_after` steps and
/// waits to be told to stop (as a long step would be when the deploy comes).
struct Pipeline {
    done: Arc<Mutex<Vec<(u64, u32)>>>,
    stopped_by: Arc<Mutex<Vec<&'static str>>>,
    pause_after: u64,
}

#[async_trait]
impl TaskHandler for Pipeline {
    async fn run(&self, ctx: TaskContext, args: Arc<Value>) -> Outcome {
        let items = args["items"].as_u64().unwrap_or(3);
        let mut outputs = Vec::new();
        for item in 0..items {
            if item == self.pause_after && ctx.attempt() == 1 {
                ctx.cancelled().await;
                let why = if ctx.is_handed_off() {
                    "hand-off"
                } else {
                    "cancel"
                };
                self.stopped_by.lock().unwrap().push(why);
                return failure("stopped".into());
            }
            let done = self.done.clone();
            let attempt = ctx.attempt();
            let out: Result<Value, StepError> = ctx
                .step(&format!("item {item}"), || async move {
                    done.lock().unwrap().push((item, attempt));
                    json!({"item": item, "attempt": attempt})
                })
                .await;
            match out {
                Ok(v) => outputs.push(v),
                Err(e) => return failure(e.to_string()),
            }
        }
        Outcome::Result {
            value: json!({"content": [], "steps": outputs}),
            is_error: false,
        }
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

struct Fixture {
    store: Arc<dyn TaskStore>,
    done: Arc<Mutex<Vec<(u64, u32)>>>,
    stopped_by: Arc<Mutex<Vec<&'static str>>>,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            store: Arc::new(MemoryStore::new()),
            done: Arc::default(),
            stopped_by: Arc::default(),
        }
    }

    fn node(&self, pause_after: u64) -> Arc<Engine> {
        let config = EngineConfig {
            cancel_grace: Duration::from_millis(500),
            ..EngineConfig::default()
        };
        Engine::builder(self.store.clone(), config)
            .handler(
                "pipeline",
                Arc::new(Pipeline {
                    done: self.done.clone(),
                    stopped_by: self.stopped_by.clone(),
                    pause_after,
                }),
                true,
            )
            .handler("asks", Arc::new(Asks), true)
            .handler("reports", Arc::new(Reports), true)
            .handler("sleeps", Arc::new(Sleeps), true)
            .handler("restarts_counting", Arc::new(RestartsCounting), true)
            .build()
    }

    async fn task(&self, id: &str) -> TaskRecord {
        match self.store.get(id).await.unwrap() {
            Lookup::Found(t) => t,
            other => panic!("{id}: {other:?}"),
        }
    }

    /// Waits until `done` holds `n` side effects.
    async fn until_done(&self, n: usize) {
        soon("the steps ran", || async {
            (self.done.lock().unwrap().len() >= n).then_some(())
        })
        .await;
    }
}

#[tokio::test]
async fn a_handed_off_task_resumes_from_its_journal_and_each_step_runs_once() {
    let f = Fixture::new();
    let first = f.node(2);
    first.start().await.unwrap();
    let id = first
        .submit(NewTask::new("pipeline", json!({"items": 4})))
        .await
        .unwrap()
        .record
        .id;
    f.until_done(2).await;
    assert_eq!(first.hand_off().await, 1);
    // The handler was told why: a hand-off, not a cancel.
    assert_eq!(*f.stopped_by.lock().unwrap(), ["hand-off"]);
    let t = f.task(&id).await;
    assert_eq!(t.status, TaskStatus::Working, "unfinished, to resume");
    assert_eq!(
        (t.lease_owner.as_deref(), t.lease_until),
        (None, None),
        "let go at once"
    );
    assert!(
        t.status_message
            .as_deref()
            .is_some_and(|m| m.contains("will resume")),
        "{t:?}"
    );
    assert_eq!(first.resume_counts().handed_off, 1);
    // A stopping node claims nothing, even on its own sweep.
    first.sweep().await.unwrap();
    assert_eq!(f.task(&id).await.lease_owner, None);
    first.shutdown();

    let second = f.node(u64::MAX);
    assert_eq!(second.start().await.unwrap(), 1);
    let done = second.wait_terminal(&id).await.unwrap();
    assert_eq!(done.status, TaskStatus::Completed, "{done:?}");
    assert_eq!(done.attempt, 2);
    // Steps 0 and 1 ran on the first run only; 2 and 3 on the second.
    assert_eq!(*f.done.lock().unwrap(), [(0, 1), (1, 1), (2, 2), (3, 2)]);
    let Some(Outcome::Result { value, .. }) = &done.outcome else {
        panic!("{done:?}")
    };
    let attempts: Vec<u64> = value["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["attempt"].as_u64().unwrap())
        .collect();
    assert_eq!(attempts, [1, 1, 2, 2], "which run did which step");
    let journal = f.store.steps(&id).await.unwrap();
    assert_eq!(journal.len(), 4);
    assert_eq!(second.resume_counts().resumed_steps, 1);
    // The history shows the hand-off and the resume.
    let history = f.store.history(&id).await.unwrap();
    let messages: Vec<&str> = history
        .iter()
        .filter_map(|h| h.message.as_deref())
        .collect();
    assert!(messages[0].starts_with("handed off"), "{messages:?}");
    assert_eq!(messages[1], "resumed after a hand-off (attempt 2)");
    assert_eq!(history.last().unwrap().status, TaskStatus::Completed);
    second.shutdown();
}

#[tokio::test]
async fn a_cancel_is_not_a_hand_off() {
    let f = Fixture::new();
    let node = f.node(1);
    node.start().await.unwrap();
    let id = node
        .submit(NewTask::new("pipeline", json!({"items": 3})))
        .await
        .unwrap()
        .record
        .id;
    f.until_done(1).await;
    node.cancel(&id, None).await.unwrap();
    soon("the handler stopped", || async {
        (!f.stopped_by.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    assert_eq!(*f.stopped_by.lock().unwrap(), ["cancel"]);
    node.shutdown();
}

#[tokio::test]
async fn a_replay_that_meets_another_step_fails_the_task_naming_both() {
    let f = Fixture::new();
    let first = f.node(2);
    first.start().await.unwrap();
    let id = first
        .submit(NewTask::new("pipeline", json!({"items": 4})))
        .await
        .unwrap()
        .record
        .id;
    f.until_done(2).await;
    first.hand_off().await;
    first.shutdown();
    // The code changed: the new version's first step has another name.
    struct Renamed;
    #[async_trait]
    impl TaskHandler for Renamed {
        async fn run(&self, ctx: TaskContext, _args: Arc<Value>) -> Outcome {
            match ctx.step("fetch", || async { 1 }).await {
                Ok(_) => Outcome::Result {
                    value: json!({}),
                    is_error: false,
                },
                Err(e) => failure(e.to_string()),
            }
        }
    }
    let second = Engine::builder(f.store.clone(), EngineConfig::default())
        .handler("pipeline", Arc::new(Renamed), true)
        .build();
    second.start().await.unwrap();
    let done = second.wait_terminal(&id).await.unwrap();
    assert_eq!(done.status, TaskStatus::Failed);
    let message = done.status_message.unwrap_or_default();
    assert!(
        message.contains("`item 0`") && message.contains("`fetch`") && message.contains("step 0"),
        "{message}"
    );
    second.shutdown();
}

/// Asks one question and returns the answer with the attempt that got it.
struct Asks;

#[async_trait]
impl TaskHandler for Asks {
    async fn run(&self, ctx: TaskContext, _args: Arc<Value>) -> Outcome {
        let answer = match ctx
            .request_input("elicitation/create", json!({"message": "go?"}))
            .await
        {
            Ok(a) => a,
            Err(e) => return failure(e.to_string()),
        };
        Outcome::Result {
            value: json!({"answer": answer, "attempt": ctx.attempt()}),
            is_error: false,
        }
    }
}

#[tokio::test]
async fn a_question_pending_at_a_hand_off_is_answered_once_and_not_asked_again() {
    let f = Fixture::new();
    let first = f.node(0);
    first.start().await.unwrap();
    let id = first
        .submit(NewTask::new("asks", json!({})))
        .await
        .unwrap()
        .record
        .id;
    let question = soon("the question was asked", || async {
        first.pending_inputs(&id).await.unwrap().into_iter().next()
    })
    .await;
    first.hand_off().await;
    first.shutdown();
    let t = f.task(&id).await;
    assert_eq!(
        t.status,
        TaskStatus::InputRequired,
        "still waiting for the answer"
    );
    // Answered while no run holds the task: kept for the next run.
    let answer = InputResponse::Result {
        value: json!({"action": "accept", "content": {"ok": true}}),
    };
    let second = f.node(0);
    second
        .answer_input(&question.key, answer.clone())
        .await
        .unwrap();
    second.start().await.unwrap();
    let done = second.wait_terminal(&id).await.unwrap();
    assert_eq!(done.status, TaskStatus::Completed, "{done:?}");
    let Some(Outcome::Result { value, .. }) = &done.outcome else {
        panic!("{done:?}")
    };
    assert_eq!(value["attempt"], 2);
    assert_eq!(value["answer"], serde_json::to_value(&answer).unwrap());
    assert_eq!(
        f.store.inputs(&id).await.unwrap().len(),
        1,
        "the user was asked once"
    );
    second.shutdown();
}

/// Sleeps durably for 30 s, then says how long its run took.
struct Sleeps;

#[async_trait]
impl TaskHandler for Sleeps {
    async fn run(&self, ctx: TaskContext, _args: Arc<Value>) -> Outcome {
        let started = std::time::Instant::now();
        match ctx.sleep(Duration::from_secs(30)).await {
            Ok(()) => Outcome::Result {
                value: json!({"ranMs": started.elapsed().as_millis() as u64}),
                is_error: false,
            },
            Err(e) => failure(e.to_string()),
        }
    }
}

#[tokio::test]
async fn a_durable_sleep_does_not_start_again_after_a_hand_off() {
    let f = Fixture::new();
    let first = f.node(0);
    first.start().await.unwrap();
    let id = first
        .submit(NewTask::new("sleeps", json!({})))
        .await
        .unwrap()
        .record
        .id;
    soon("the wake-up time was recorded", || async {
        (!f.store.steps(&id).await.unwrap().is_empty()).then_some(())
    })
    .await;
    first.hand_off().await;
    first.shutdown();
    // The recorded wake-up time moves into the past (as if the restart took the whole 30 s).
    let mut journal = f.store.steps(&id).await.unwrap();
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0].name, "sleep");
    let wake_at = journal[0].output.as_u64().unwrap();
    let now = mcp_tasks_engine::now_ms();
    assert!(wake_at >= now + 29_000, "{wake_at} vs {now}");
    drop(journal.pop());
    // A fresh store holding the same task with a wake-up time already past.
    let g = Fixture::new();
    let mut t = f.task(&id).await;
    t.lease_owner = Some("gone".into());
    g.store.create(t, None).await.unwrap();
    let mut step = f.store.steps(&id).await.unwrap().remove(0);
    step.output = json!(now - 1);
    g.store.record_step("gone", step).await.unwrap();
    let second = g.node(0);
    second.start().await.unwrap();
    let done = tokio::time::timeout(Duration::from_secs(5), second.wait_terminal(&id))
        .await
        .expect("it did not sleep 30 s again")
        .unwrap();
    assert_eq!(done.status, TaskStatus::Completed, "{done:?}");
    second.shutdown();
}

/// Reports 5 of 10 and waits on its first run; a later run starts counting again from 1.
struct RestartsCounting;

#[async_trait]
impl TaskHandler for RestartsCounting {
    async fn run(&self, ctx: TaskContext, _args: Arc<Value>) -> Outcome {
        if ctx.attempt() == 1 {
            ctx.progress(5.0, Some(10.0), Some("first run".into()))
                .await;
            ctx.cancelled().await;
            return failure("stopped".into());
        }
        ctx.progress(1.0, Some(10.0), Some("second run".into()))
            .await;
        Outcome::Result {
            value: json!({}),
            is_error: false,
        }
    }
}

#[tokio::test]
async fn progress_never_goes_back_across_attempts() {
    let f = Fixture::new();
    let first = f.node(0);
    first.start().await.unwrap();
    let id = first
        .submit(NewTask::new("restarts_counting", json!({})))
        .await
        .unwrap()
        .record
        .id;
    soon("the progress was reported", || async {
        f.task(&id).await.progress.map(|_| ())
    })
    .await;
    first.hand_off().await;
    first.shutdown();
    let second = f.node(0);
    second.start().await.unwrap();
    let done = second.wait_terminal(&id).await.unwrap();
    assert_eq!(done.status, TaskStatus::Completed);
    assert_eq!(done.attempt, 2);
    assert_eq!(
        (done.progress, done.progress_total),
        (Some(5.0), Some(10.0)),
        "the second run's 1 of 10 did not take the task back"
    );
    second.shutdown();
}

#[tokio::test]
async fn a_task_submitted_during_a_hand_off_is_handed_off_at_once() {
    let f = Fixture::new();
    let node = f.node(0);
    node.start().await.unwrap();
    node.hand_off().await;
    let id = node
        .submit(NewTask::new("sleeps", json!({})))
        .await
        .unwrap()
        .record
        .id;
    let t = soon("the task was released", || async {
        let t = f.task(&id).await;
        t.lease_owner.is_none().then_some(t)
    })
    .await;
    assert_eq!(t.status, TaskStatus::Working);
    assert!(t
        .status_message
        .unwrap_or_default()
        .starts_with("handed off"));
    node.shutdown();
}

/// A node that stopped claiming (a drain began) takes no task another node let go of; a node that
/// claims takes it.
#[tokio::test]
async fn a_draining_node_claims_no_hand_off() {
    let f = Fixture::new();
    let first = f.node(0);
    first.start().await.unwrap();
    let id = first
        .submit(NewTask::new("sleeps", json!({})))
        .await
        .unwrap()
        .record
        .id;
    soon("the run started", || async {
        (first.running_count() == 1).then_some(())
    })
    .await;
    first.hand_off().await;
    first.shutdown();
    assert_eq!(f.task(&id).await.lease_owner, None, "let go");

    let draining = f.node(0);
    draining.stop_claiming();
    assert!(!draining.is_claiming());
    assert_eq!(draining.start().await.unwrap(), 0, "claims nothing");
    draining.sweep().await.unwrap();
    assert_eq!(f.task(&id).await.lease_owner, None, "still free");
    draining.shutdown();

    let staying = f.node(0);
    assert_eq!(staying.start().await.unwrap(), 1);
    staying.shutdown();
}

/// Reports "item N done" (N its attempt), then waits to be stopped.
struct Reports;

#[async_trait]
impl TaskHandler for Reports {
    async fn run(&self, ctx: TaskContext, _args: Arc<Value>) -> Outcome {
        let n = ctx.attempt();
        ctx.progress(f64::from(n), Some(10.0), Some(format!("item {n} done")))
            .await;
        ctx.cancelled().await;
        failure("stopped".into())
    }
}

#[tokio::test]
async fn a_resumed_runs_first_progress_replaces_the_resume_note_as_its_status() {
    let f = Fixture::new();
    let first = f.node(0);
    first.start().await.unwrap();
    let id = first
        .submit(NewTask::new("reports", json!({})))
        .await
        .unwrap()
        .record
        .id;
    soon("the first run reported", || async {
        let t = f.task(&id).await;
        (t.progress_message.as_deref() == Some("item 1 done")).then_some(())
    })
    .await;
    assert_eq!(f.task(&id).await.status_message, None);
    first.hand_off().await;
    first.shutdown();
    let second = f.node(0);
    second.start().await.unwrap();
    let t = soon("the second run reported", || async {
        let t = f.task(&id).await;
        (t.progress_message.as_deref() == Some("item 2 done")).then_some(t)
    })
    .await;
    // As on the first run: the task shows the run's progress, not "resumed after a hand-off".
    assert_eq!(t.status_message, None, "{t:?}");
    assert_eq!(t.attempt, 2);
    second.shutdown();
}
