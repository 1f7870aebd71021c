//! Durable execution beyond plain steps: steps with retries and timeouts whose outcome (failure
//! included) is recorded and replayed, the recorded clock / random / uuid helpers, `patched` code
//! changes that replay old journals on the old path, and the caps on what a journal holds. Each
//! across a hand-off: the first node runs part of the task, a second one resumes it from the store.

use futures::future::BoxFuture;
use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_engine::store::TaskStore;
use mcp_tasks_engine::{
    replay_check, Engine, EngineConfig, EngineError, JournalExport, NewTask, Outcome,
    ReplayCheckError, ReplayEnd, RetryPolicy, Rewind, StepError, StepFailed, StepOptions,
    TaskContext, TaskHandler, TaskRecord, TaskStatus,
};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

type Script = Arc<dyn Fn(TaskContext) -> BoxFuture<'static, Outcome> + Send + Sync>;

/// A handler written as a closure, for tests that each need their own.
struct Scripted(Script);

#[async_trait::async_trait]
impl TaskHandler for Scripted {
    async fn run(&self, ctx: TaskContext, _args: Arc<Value>) -> Outcome {
        (self.0)(ctx).await
    }
}

fn script<F, Fut>(f: F) -> Script
where
    F: Fn(TaskContext) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Outcome> + Send + 'static,
{
    Arc::new(move |ctx| Box::pin(f(ctx)))
}

fn done(value: Value) -> Outcome {
    Outcome::Result {
        value,
        is_error: false,
    }
}

fn failure(message: impl std::fmt::Display) -> Outcome {
    Outcome::Error {
        code: -32603,
        message: message.to_string(),
        data: None,
    }
}

/// On its first run, waits to be handed off (the run ends; another node resumes the task).
async fn hand_off_on_first_run(ctx: &TaskContext) -> Option<Outcome> {
    if ctx.attempt() == 1 {
        ctx.cancelled().await;
        return Some(failure(StepError::Stopped));
    }
    None
}

fn fast() -> RetryPolicy<String> {
    RetryPolicy::attempts(3).delays(Duration::from_millis(1), 2.0, Duration::from_millis(5))
}

struct Fixture {
    store: Arc<dyn TaskStore>,
    config: EngineConfig,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            store: Arc::new(MemoryStore::new()),
            config: EngineConfig {
                cancel_grace: Duration::from_millis(500),
                ..EngineConfig::default()
            },
        }
    }

    fn node(&self, script: &Script) -> Arc<Engine> {
        self.node_with(script, true)
    }

    fn node_with(&self, script: &Script, retry_on_restart: bool) -> Arc<Engine> {
        Engine::builder(self.store.clone(), self.config.clone())
            .handler("tool", Arc::new(Scripted(script.clone())), retry_on_restart)
            .build()
    }

    /// Runs the task on a node with `first` until its journal holds `steps` steps, hands it off,
    /// and lets a node with `second` (the same code, or a new version) finish it.
    async fn across_a_hand_off(&self, first: &Script, steps: usize, second: &Script) -> TaskRecord {
        let node = self.node(first);
        let id = started(&node, &self.store, steps).await;
        node.hand_off().await;
        node.shutdown();
        self.finish_on(second, &id).await
    }

    async fn finish_on(&self, script: &Script, id: &str) -> TaskRecord {
        let node = self.node(script);
        node.start().await.unwrap();
        let done = tokio::time::timeout(Duration::from_secs(5), node.wait_terminal(id))
            .await
            .expect("the task ends")
            .unwrap();
        node.shutdown();
        done
    }

    /// The names of the task's recorded steps, in journal order.
    async fn names(&self, id: &str) -> Vec<String> {
        let steps = self.store.steps(id).await.unwrap();
        steps.into_iter().map(|s| s.name).collect()
    }

    async fn run_once(&self, script: &Script) -> TaskRecord {
        self.run_once_with(&self.node(script)).await
    }

    async fn run_once_with(&self, node: &Arc<Engine>) -> TaskRecord {
        node.start().await.unwrap();
        let id = submit(node).await;
        let done = tokio::time::timeout(Duration::from_secs(5), node.wait_terminal(&id))
            .await
            .expect("the task ends")
            .unwrap();
        node.shutdown();
        done
    }
}

fn value_of(t: &TaskRecord) -> Value {
    assert_eq!(t.status, TaskStatus::Completed, "{t:?}");
    match &t.outcome {
        Some(Outcome::Result { value, .. }) => value.clone(),
        other => panic!("{other:?}"),
    }
}

fn message_of(t: &TaskRecord) -> String {
    assert_eq!(t.status, TaskStatus::Failed, "{t:?}");
    match &t.outcome {
        Some(Outcome::Error { message, .. }) => message.clone(),
        other => panic!("{other:?}"),
    }
}

/// A step whose every try fails: recorded as failed after its tries, and replayed as that failure
/// by the next run, which does not try again.
#[tokio::test]
async fn a_step_that_failed_for_good_is_replayed_as_its_failure() {
    let f = Fixture::new();
    let tries = Arc::new(AtomicU32::new(0));
    let counted = tries.clone();
    let s = script(move |ctx| {
        let tries = counted.clone();
        async move {
            let charged = ctx
                .step_with("charge", StepOptions::new().retry(fast()), |n| {
                    let tries = tries.clone();
                    async move {
                        tries.fetch_add(1, Ordering::SeqCst);
                        Err::<u32, String>(format!("card declined (try {n})"))
                    }
                })
                .await;
            if let Some(stopped) = hand_off_on_first_run(&ctx).await {
                return stopped;
            }
            match charged {
                Err(StepFailed::Failed {
                    error, attempts, ..
                }) => done(json!({"error": error, "attempts": attempts, "run": ctx.attempt()})),
                other => failure(format!("{other:?}")),
            }
        }
    });
    let t = f.across_a_hand_off(&s, 1, &s).await;
    assert_eq!(
        value_of(&t),
        json!({"error": "card declined (try 3)", "attempts": 3, "run": 2})
    );
    assert_eq!(tries.load(Ordering::SeqCst), 3, "the replay tried nothing");
    let journal = f.store.steps(&t.id).await.unwrap();
    assert_eq!(journal.len(), 1);
    assert_eq!(
        journal[0].error.as_deref(),
        Some("step `charge` failed after 3 tries: card declined (try 3)")
    );
    assert_eq!(journal[0].attempt, 1);
}

/// An error the policy does not retry ends the step at once; a later success is recorded as an
/// output, not as an error.
#[tokio::test]
async fn only_the_errors_the_policy_names_are_tried_again() {
    let f = Fixture::new();
    let s = script(|ctx| async move {
        let policy = RetryPolicy::attempts(5)
            .delays(Duration::from_millis(1), 2.0, Duration::from_millis(5))
            .retry_if(|e: &String| e.starts_with("transient"));
        let fatal = ctx
            .step_with(
                "fatal",
                StepOptions::new().retry(policy.clone()),
                |n| async move {
                    Err::<u32, String>(if n < 3 {
                        "transient".into()
                    } else {
                        format!("fatal at {n}")
                    })
                },
            )
            .await;
        let recovered = ctx
            .step_with(
                "recovered",
                StepOptions::new().retry(policy),
                |n| async move {
                    if n < 2 {
                        Err("transient blip".to_string())
                    } else {
                        Ok(n)
                    }
                },
            )
            .await;
        let fatal = match fatal {
            Err(StepFailed::Failed {
                error, attempts, ..
            }) => json!([error, attempts]),
            other => json!(format!("{other:?}")),
        };
        done(json!({"fatal": fatal, "recovered": recovered.ok()}))
    });
    let t = f.run_once(&s).await;
    assert_eq!(
        value_of(&t),
        json!({"fatal": ["fatal at 3", 3], "recovered": 2})
    );
    let journal = f.store.steps(&t.id).await.unwrap();
    assert!(journal[0].error.is_some());
    assert_eq!(journal[1].error, None);
    assert_eq!(journal[1].output, json!(2));
}

/// A try past the step's timeout is dropped and tried again; the last one's timeout is recorded,
/// and the replay returns it at once without running the (slow) body.
#[tokio::test]
async fn a_timed_out_step_is_recorded_and_replayed() {
    let f = Fixture::new();
    let tries = Arc::new(AtomicU32::new(0));
    let counted = tries.clone();
    let s = script(move |ctx| {
        let tries = counted.clone();
        async move {
            let options = StepOptions::new()
                .retry(fast().retry_timeouts(true))
                .timeout(Duration::from_millis(30));
            let slow = ctx
                .step_with("slow", options, |_| {
                    let tries = tries.clone();
                    async move {
                        tries.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        Ok::<u32, String>(1)
                    }
                })
                .await;
            if let Some(stopped) = hand_off_on_first_run(&ctx).await {
                return stopped;
            }
            match slow {
                Err(StepFailed::TimedOut {
                    timeout_ms,
                    attempts,
                    ..
                }) => done(json!([timeout_ms, attempts])),
                other => failure(format!("{other:?}")),
            }
        }
    });
    let started = Instant::now();
    let t = f.across_a_hand_off(&s, 1, &s).await;
    assert_eq!(value_of(&t), json!([30, 3]));
    assert_eq!(tries.load(Ordering::SeqCst), 3);
    assert!(started.elapsed() < Duration::from_secs(10));
    let journal = f.store.steps(&t.id).await.unwrap();
    assert!(
        journal[0].duration_ms >= 90,
        "three tries of 30 ms: {journal:?}"
    );
}

/// A stop (a cancel) between two tries ends the step at once: the wait is not slept out (the
/// handler sees the stop well inside its grace, rather than being dropped at its end).
#[tokio::test]
async fn a_cancel_between_tries_is_not_slept_out() {
    let mut f = Fixture::new();
    f.config.cancel_grace = Duration::from_secs(5);
    let seen = Arc::new(std::sync::Mutex::new(None::<(Instant, String)>));
    let told = seen.clone();
    let s = script(move |ctx| {
        let told = told.clone();
        async move {
            let policy = RetryPolicy::attempts(3).delays(
                Duration::from_secs(60),
                2.0,
                Duration::from_secs(60),
            );
            let got = ctx
                .step_with("flaky", StepOptions::new().retry(policy), |_| async {
                    Err::<u32, String>("down".into())
                })
                .await;
            *told.lock().unwrap() = Some((Instant::now(), format!("{got:?}")));
            failure("stopped")
        }
    });
    let node = f.node(&s);
    node.start().await.unwrap();
    let id = submit(&node).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    node.cancel(&id, None).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    let (when, got) = loop {
        if let Some(seen) = seen.lock().unwrap().clone() {
            break seen;
        }
        assert!(
            Instant::now() < deadline,
            "the step slept on through the cancel"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(when.duration_since(started) < Duration::from_secs(1));
    assert_eq!(got, "Err(Journal(Stopped))");
    assert!(
        f.store.steps(&id).await.unwrap().is_empty(),
        "nothing recorded"
    );
    node.shutdown();
}

/// The clock, random numbers and ids a run reads through the context are the first run's on
/// every later run.
#[tokio::test]
async fn now_random_and_uuid_are_the_first_run_s_on_every_run() {
    let f = Fixture::new();
    let s = script(|ctx| async move {
        let now = ctx.now().await.unwrap();
        let random = ctx.random_u64().await.unwrap();
        let id = ctx.uuid().await.unwrap();
        let ms = now
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let seen = json!({"now": ms, "random": random, "uuid": id});
        // What the first run saw, kept as the checkpoint, to compare with the second's.
        if ctx.attempt() == 1 {
            ctx.save_checkpoint(seen.clone()).await.unwrap();
        }
        if let Some(stopped) = hand_off_on_first_run(&ctx).await {
            return stopped;
        }
        done(json!({"first": ctx.checkpoint(), "second": seen}))
    });
    let t = f.across_a_hand_off(&s, 3, &s).await;
    let v = value_of(&t);
    assert_eq!(v["first"], v["second"]);
    assert_eq!(v["second"]["uuid"].as_str().unwrap().len(), 36);
    // Two tasks do not share them.
    let other = value_of(&f.across_a_hand_off(&s, 3, &s).await);
    assert_ne!(other["second"]["uuid"], v["second"]["uuid"]);
    assert_ne!(other["second"]["random"], v["second"]["random"]);
}

/// Code v1: steps `a`, `b`, a hand-off, then `c`.
fn version_one() -> Script {
    script(|ctx| async move {
        ctx.step("a", || async { 1u8 }).await.unwrap();
        ctx.step("b", || async { 1u8 }).await.unwrap();
        if let Some(stopped) = hand_off_on_first_run(&ctx).await {
            return stopped;
        }
        ctx.step("c", || async { 1u8 }).await.unwrap();
        done(json!("v1"))
    })
}

/// Code v2: a new step `extra` between `a` and `b`, behind `patched` when `guarded`.
fn version_two(guarded: bool) -> Script {
    script(move |ctx| async move {
        let run = || async {
            ctx.step("a", || async { 1u8 }).await?;
            let new_path = if guarded {
                ctx.patched("extra-step").await?
            } else {
                true
            };
            if new_path {
                ctx.step("extra", || async { 1u8 }).await?;
            }
            ctx.step("b", || async { 1u8 }).await?;
            if let Some(stopped) = hand_off_on_first_run(&ctx).await {
                return Ok(stopped);
            }
            ctx.step("c", || async { 1u8 }).await?;
            Ok::<_, StepError>(done(json!({"newPath": new_path})))
        };
        run().await.unwrap_or_else(failure)
    })
}

/// A deploy that inserts a step: behind `patched`, a task started on the old code replays its
/// journal on the old path (no mismatch), and a task started on the new code takes the new path on
/// every run. Without the guard, the same change fails the old task as a replay mismatch.
#[tokio::test]
async fn patched_replays_old_journals_on_the_old_path_and_new_runs_on_the_new() {
    let f = Fixture::new();
    let old = f
        .across_a_hand_off(&version_one(), 2, &version_two(true))
        .await;
    assert_eq!(value_of(&old), json!({"newPath": false}));
    assert_eq!(f.names(&old.id).await, ["a", "b", "c"]);

    let new = f
        .across_a_hand_off(&version_two(true), 4, &version_two(true))
        .await;
    assert_eq!(value_of(&new), json!({"newPath": true}));
    assert_eq!(
        f.names(&new.id).await,
        ["a", "::patch:extra-step", "extra", "b", "c"]
    );

    let unguarded = f
        .across_a_hand_off(&version_one(), 2, &version_two(false))
        .await;
    let message = message_of(&unguarded);
    assert!(message.contains("replay mismatch"), "{message}");
}

/// A step's output past the step cap fails the task, saying so; so does a journal that would grow
/// past its cap, counting what earlier runs recorded.
#[tokio::test]
async fn the_journal_caps_fail_the_task_with_a_clear_message() {
    let mut f = Fixture::new();
    f.config.max_step_output_bytes = 1_000;
    let big = script(|ctx| async move {
        match ctx.step("big", || async { "x".repeat(2_000) }).await {
            Ok(_) => done(json!("recorded")),
            Err(e) => failure(e),
        }
    });
    let message = message_of(&f.run_once(&big).await);
    assert!(
        message.contains("step `big` returned 2002 bytes of JSON, more than the 1000"),
        "{message}"
    );

    let mut f = Fixture::new();
    f.config.max_journal_bytes = 1_000;
    // Each step: 100 bytes of output as JSON (98 x's and quotes), a 4-byte name, 64 for its row.
    let many = script(|ctx| async move {
        for i in 0..10 {
            if i == 4 {
                if let Some(stopped) = hand_off_on_first_run(&ctx).await {
                    return stopped;
                }
            }
            if let Err(e) = ctx.step("item", || async { "x".repeat(98) }).await {
                return failure(format!("at item {i}: {e}"));
            }
        }
        done(json!("all recorded"))
    });
    let t = f.across_a_hand_off(&many, 4, &many).await;
    let message = message_of(&t);
    // 5 × 168 = 840 fits; the sixth would make 1008: the four the first run recorded count.
    assert!(
        message.contains(
            "recording step `item` would take this task's journal to 1008 bytes, past its cap \
             of 1000"
        ),
        "{message}"
    );
    assert_eq!(f.store.steps(&t.id).await.unwrap().len(), 5);
}

/// A step's duration is recorded with it.
#[tokio::test]
async fn a_step_s_duration_is_recorded() {
    let f = Fixture::new();
    let s = script(|ctx| async move {
        ctx.step("wait", || tokio::time::sleep(Duration::from_millis(40)))
            .await
            .unwrap();
        done(json!(null))
    });
    let t = f.run_once(&s).await;
    let journal = f.store.steps(&t.id).await.unwrap();
    assert!(journal[0].duration_ms >= 40, "{journal:?}");
    assert!(journal[0].duration_ms < 5_000, "{journal:?}");
}

/// Steps `a` and `b`, each counting its body's runs; the first run then waits (until stopped),
/// a later one finishes with what the steps returned.
fn counting(runs: Arc<[AtomicU32; 2]>) -> Script {
    script(move |ctx| {
        let runs = runs.clone();
        async move {
            let mut got = Vec::new();
            for (i, name) in ["a", "b"].into_iter().enumerate() {
                let runs = runs.clone();
                match ctx
                    .step(name, || async move {
                        runs[i].fetch_add(1, Ordering::SeqCst) + 1
                    })
                    .await
                {
                    Ok(n) => got.push(n),
                    Err(e) => return failure(e),
                }
            }
            if ctx.attempt() == 1 {
                ctx.cancelled().await;
                return failure("stopped");
            }
            done(json!({"a": got[0], "b": got[1], "checkpoint": ctx.checkpoint()}))
        }
    })
}

/// A new task of `tool` on `node`.
async fn submit(node: &Arc<Engine>) -> String {
    let submitted = node.submit(NewTask::new("tool", json!({}))).await.unwrap();
    submitted.record.id
}

/// Starts `node`, submits a task and waits until its first run recorded `steps` steps.
async fn started(node: &Arc<Engine>, store: &Arc<dyn TaskStore>, steps: usize) -> String {
    node.start().await.unwrap();
    let id = submit(node).await;
    let recorded = async {
        while store.steps(&id).await.unwrap().len() < steps {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), recorded)
        .await
        .expect("the first run recorded its steps");
    id
}

/// An operator's "retry from step 1" on a running task: its run is stopped, step `b` is dropped
/// and runs again in the next run, `a` is replayed; the history says who did it.
#[tokio::test]
async fn a_rewind_from_a_step_runs_it_again_and_replays_the_steps_before() {
    let f = Fixture::new();
    let runs: Arc<[AtomicU32; 2]> = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
    let node = f.node(&counting(runs.clone()));
    let id = started(&node, &f.store, 2).await;
    let rewound = node
        .rewind(&id, Rewind::FromStep(1), "ops@example")
        .await
        .unwrap();
    assert_eq!(rewound.dropped, 1);
    let t = tokio::time::timeout(Duration::from_secs(5), node.wait_terminal(&id))
        .await
        .expect("the rewound task ends")
        .unwrap();
    assert_eq!(value_of(&t)["a"], 1, "replayed");
    assert_eq!(value_of(&t)["b"], 2, "run again");
    assert_eq!(runs[0].load(Ordering::SeqCst), 1);
    assert_eq!(runs[1].load(Ordering::SeqCst), 2);
    let journal = f.store.steps(&id).await.unwrap();
    assert_eq!(
        journal
            .iter()
            .map(|s| (s.name.as_str(), s.attempt))
            .collect::<Vec<_>>(),
        [("a", 1), ("b", 2)]
    );
    let history = f.store.history(&id).await.unwrap();
    assert!(
        history.iter().any(|h| h.message.as_deref()
            == Some("rewound by operator ops@example: runs again from step 1 (1 step(s) dropped)")),
        "{history:?}"
    );
    node.shutdown();
}

/// "Start over" drops every step and the checkpoint.
#[tokio::test]
async fn a_restart_drops_the_journal_and_the_checkpoint() {
    let f = Fixture::new();
    let runs: Arc<[AtomicU32; 2]> = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
    let inner = counting(runs.clone());
    let s = script(move |ctx| {
        let inner = inner.clone();
        async move {
            if ctx.attempt() == 1 {
                ctx.save_checkpoint(json!({"saved": true})).await.unwrap();
            }
            inner(ctx).await
        }
    });
    let node = f.node(&s);
    let id = started(&node, &f.store, 2).await;
    let rewound = node.rewind(&id, Rewind::StartOver, "ops").await.unwrap();
    assert_eq!(rewound.dropped, 2);
    let t = tokio::time::timeout(Duration::from_secs(5), node.wait_terminal(&id))
        .await
        .expect("the restarted task ends")
        .unwrap();
    assert_eq!(value_of(&t), json!({"a": 2, "b": 2, "checkpoint": null}));
    node.shutdown();
}

/// A finished task is final; a task whose next run would fail (a tool not safe to run again,
/// nothing to go on from) is not rewound, saying why; a refused rewind changes nothing.
#[tokio::test]
async fn a_rewind_that_would_not_run_the_task_again_is_refused() {
    let f = Fixture::new();
    let finished = f.run_once(&script(|_| async { done(json!(1)) })).await;
    let node = f.node(&script(|_| async { done(json!(1)) }));
    assert!(matches!(
        node.rewind(&finished.id, Rewind::StartOver, "ops").await,
        Err(EngineError::AlreadyTerminal(_))
    ));
    assert!(matches!(
        node.rewind("nope", Rewind::StartOver, "ops").await,
        Err(EngineError::NotFound)
    ));
    let runs: Arc<[AtomicU32; 2]> = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
    let unsafe_node = f.node_with(&counting(runs.clone()), false);
    let id = started(&unsafe_node, &f.store, 2).await;
    let err = unsafe_node
        .rewind(&id, Rewind::FromStep(0), "ops")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("not safe to run again (retry_on_restart) and it saved no checkpoint"),
        "{err}"
    );
    assert_eq!(
        f.store.steps(&id).await.unwrap().len(),
        2,
        "nothing dropped"
    );
    unsafe_node.cancel(&id, None).await.unwrap();
    unsafe_node.shutdown();
}

/// A journal recorded by v1 (steps `a`, `b`, then a hand-off), checked against new code before a
/// deploy: v1 itself and v2 behind `patched` replay it (and stop at `c`, a new step, whose body does
/// not run); v2 without the guard is the mismatch a resumed run would fail with.
#[tokio::test]
async fn a_replay_check_tells_code_that_replays_a_real_journal_from_code_that_does_not() {
    let f = Fixture::new();
    let node = f.node(&version_one());
    let id = started(&node, &f.store, 2).await;
    let task = match f.store.get(&id).await.unwrap() {
        mcp_tasks_engine::store::Lookup::Found(t) => t,
        other => panic!("{other:?}"),
    };
    let export = JournalExport {
        task_id: id.clone(),
        tool: task.tool.clone(),
        arguments: (*task.arguments).clone(),
        attempt: task.attempt,
        checkpoint: task.checkpoint.clone(),
        steps: f.store.steps(&id).await.unwrap(),
    };
    node.cancel(&id, None).await.unwrap();
    node.shutdown();
    // Through its JSON form, as `admin journal export` writes it.
    let export: JournalExport =
        serde_json::from_str(&serde_json::to_string(&export).unwrap()).unwrap();
    let bound = Duration::from_secs(5);
    for (name, code) in [("v1", version_one()), ("v2 patched", version_two(true))] {
        let report = replay_check(&Scripted(code), &export, bound)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(report.replayed, 2, "{name}");
        assert!(report.is_clean(), "{name}: {report:?}");
        assert_eq!(report.ended, ReplayEnd::NewStep("c".into()), "{name}");
    }
    let Err(ReplayCheckError::Mismatch(e)) =
        replay_check(&Scripted(version_two(false)), &export, bound).await
    else {
        panic!("the unguarded change replays")
    };
    assert!(
        e.to_string()
            .contains("step 1 of this task was recorded as `b`, but this run's step 1 is `extra`"),
        "{e}"
    );
    // Code with the same two steps that then returns: it gets the recorded outputs, no body runs.
    let runs: Arc<[AtomicU32; 2]> = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
    let report = replay_check(&Scripted(counting(runs.clone())), &export, bound)
        .await
        .unwrap();
    assert_eq!(report.replayed, 2);
    let ReplayEnd::Returned(Outcome::Result { value, .. }) = &report.ended else {
        panic!("{report:?}")
    };
    assert_eq!(value["a"], 1);
    assert_eq!(
        runs[0].load(Ordering::SeqCst) + runs[1].load(Ordering::SeqCst),
        0,
        "no body ran"
    );
    // Code that asks only for `a` and returns leaves `b` unused: not clean.
    let short = script(|ctx| async move {
        ctx.step("a", || async { 1u8 }).await.unwrap();
        done(json!("short"))
    });
    let report = replay_check(&Scripted(short), &export, bound)
        .await
        .unwrap();
    assert_eq!(report.unreplayed, ["b"]);
    assert!(!report.is_clean());
}

fn pg_url() -> String {
    std::env::var("MCP_TASKS_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A PostgreSQL schema of one test's own: each `replica` is another store on it (another
/// server), and `drop` takes it away at the end.
struct PgSchema(String);

impl PgSchema {
    fn new(prefix: &str) -> PgSchema {
        PgSchema(format!("{prefix}_{}", &mcp_tasks_engine::random_id()[..12]))
    }

    async fn replica(&self) -> Arc<dyn TaskStore> {
        Arc::new(
            mcp_tasks_engine::store::postgres::PostgresStore::open_in_schema(&pg_url(), &self.0)
                .await
                .unwrap(),
        )
    }

    async fn drop(self) {
        if let Ok((client, conn)) = tokio_postgres::connect(&pg_url(), tokio_postgres::NoTls).await
        {
            tokio::spawn(conn);
            let _ = client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.0))
                .await;
        }
    }
}

/// The task once it is finished, read from the store (a bare engine hears only its own changes;
/// the server relays the other replicas'), within `within`; `check` sees each state on the way.
async fn finished_in_store(
    store: &Arc<dyn TaskStore>,
    id: &str,
    within: Duration,
    check: impl Fn(&TaskRecord),
) -> TaskRecord {
    let deadline = Instant::now() + within;
    loop {
        let t = record_of(store, id).await;
        if t.status.is_terminal() {
            return t;
        }
        check(&t);
        assert!(Instant::now() < deadline, "the task did not end: {t:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// When dropped, notes the time: the end of a run (however it ends).
struct EndOfRun(Arc<std::sync::Mutex<Option<Instant>>>);

impl Drop for EndOfRun {
    fn drop(&mut self) {
        *self.0.lock().unwrap() = Some(Instant::now());
    }
}

/// A rewind asked of one PostgreSQL replica while another runs the task: the running replica's
/// run is fenced (a record it tries after the rewind is refused, and nothing of it stays), the
/// task is not taken up again until that run has ended (two runs of a task never overlap), step
/// `b` is dropped and runs again, `a` is replayed, and the task completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_on_one_replica_fences_the_run_on_another() {
    let schema = PgSchema::new("t_rewind");
    let runs: Arc<[AtomicU32; 2]> = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
    let late = Arc::new(std::sync::Mutex::new(None::<String>));
    let first_ended = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let second_started = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let gate = Arc::new(tokio::sync::Notify::new());
    let inner = counting(runs.clone());
    let (seen, opened, ended, began) = (
        late.clone(),
        gate.clone(),
        first_ended.clone(),
        second_started.clone(),
    );
    // The first run records `a` and `b`, then runs the body of `late` until the test opens the
    // gate (after the rewind), and tries to record it.
    let s = script(move |ctx| {
        let (inner, seen, opened) = (inner.clone(), seen.clone(), opened.clone());
        let (ended, began) = (ended.clone(), began.clone());
        async move {
            if ctx.attempt() > 1 {
                began.lock().unwrap().get_or_insert(Instant::now());
                return inner(ctx).await;
            }
            let _end = EndOfRun(ended);
            ctx.step("a", || async { 1u32 }).await.unwrap();
            ctx.step("b", || async { 1u32 }).await.unwrap();
            let refused = ctx
                .step("late", || async move {
                    opened.notified().await;
                    1u32
                })
                .await;
            *seen.lock().unwrap() = Some(format!("{refused:?}"));
            // Goes on as a run that missed its stop would, until it is dropped.
            std::future::pending::<()>().await;
            failure("unreachable")
        }
    });
    let config = EngineConfig {
        lease_ms: 3_000,
        cancel_grace: Duration::from_millis(500),
        ..EngineConfig::default()
    };
    let node = |store: Arc<dyn TaskStore>, name: &str| {
        Engine::builder(
            store,
            EngineConfig {
                node_id: name.into(),
                ..config.clone()
            },
        )
        .handler("tool", Arc::new(Scripted(s.clone())), true)
        .build()
    };
    let store_a = schema.replica().await;
    let a = node(store_a.clone(), "replica-a");
    let id = started(&a, &store_a, 2).await;
    let b = node(schema.replica().await, "replica-b");
    b.start().await.unwrap();
    let rewound = b.rewind(&id, Rewind::FromStep(1), "ops").await.unwrap();
    assert_eq!(rewound.dropped, 1);
    gate.notify_one();
    // Either replica may take it up.
    let t = finished_in_store(&store_a, &id, Duration::from_secs(20), |_| {}).await;
    let v = value_of(&t);
    // The second run replayed `a` (the first run's 1) and ran `b` again (the counting body's
    // first run of it).
    assert_eq!(
        (v["a"].clone(), v["b"].clone()),
        (json!(1), json!(1)),
        "{v}"
    );
    assert_eq!(runs[0].load(Ordering::SeqCst), 0, "a replayed, not run");
    assert_eq!(runs[1].load(Ordering::SeqCst), 1, "b run again once");
    let first_ended = first_ended.lock().unwrap().expect("the first run ended");
    let second_started = second_started.lock().unwrap().expect("a second run");
    assert!(
        second_started >= first_ended,
        "the second run started {:?} before the fenced one ended",
        first_ended - second_started
    );
    if let Some(late) = late.lock().unwrap().clone() {
        assert!(late.contains("NotRunning"), "{late}");
    }
    let journal = store_a.steps(&id).await.unwrap();
    assert_eq!(
        journal
            .iter()
            .map(|s| (s.name.as_str(), s.attempt))
            .collect::<Vec<_>>(),
        [("a", 1), ("b", 2)],
        "nothing of the fenced run's after the rewind: {journal:?}"
    );
    a.shutdown();
    b.shutdown();
    schema.drop().await;
}

/// Step `before` (counting its runs), a durable sleep of `sleep_ms`, step `after`; the result
/// names the run that finished.
fn sleeper(before: Arc<AtomicU32>, sleeps: u32, sleep_ms: u64) -> Script {
    script(move |ctx| {
        let before = before.clone();
        async move {
            let ran = ctx
                .step("before", || async move {
                    before.fetch_add(1, Ordering::SeqCst) + 1
                })
                .await;
            if let Err(e) = ran {
                return failure(e);
            }
            for _ in 0..sleeps {
                if let Err(e) = ctx.sleep(Duration::from_millis(sleep_ms)).await {
                    return failure(e);
                }
            }
            match ctx.step("after", || async { 1u8 }).await {
                Ok(_) => done(json!({"attempt": ctx.attempt()})),
                Err(e) => failure(e),
            }
        }
    })
}

async fn record_of(store: &Arc<dyn TaskStore>, id: &str) -> TaskRecord {
    match store.get(id).await.unwrap() {
        mcp_tasks_engine::store::Lookup::Found(t) => t,
        other => panic!("{other:?}"),
    }
}

/// Waits until the task is suspended (its run ended for the sleep), and returns it.
async fn suspended(node: &Arc<Engine>, store: &Arc<dyn TaskStore>, id: &str) -> TaskRecord {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let t = record_of(store, id).await;
        if t.lease_owner.as_deref() == Some("(suspended)") && node.running_count() == 0 {
            return t;
        }
        assert!(Instant::now() < deadline, "never suspended: {t:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A sleep longer than `suspend_sleeps_over` ends the run: the task stays working, says until
/// when, holds no running slot and no node's lease, and wakes on time (the steps before it
/// replayed).
#[tokio::test]
async fn a_long_durable_sleep_frees_its_slot_and_wakes_on_time() {
    let mut f = Fixture::new();
    f.config.suspend_sleeps_over = Some(Duration::from_millis(100));
    let before = Arc::new(AtomicU32::new(0));
    let node = f.node(&sleeper(before.clone(), 1, 800));
    node.start().await.unwrap();
    let started = Instant::now();
    let id = submit(&node).await;
    let t = suspended(&node, &f.store, &id).await;
    assert_eq!(t.status, TaskStatus::Working);
    let message = t.status_message.clone().unwrap_or_default();
    assert!(message.starts_with("sleeping until 20"), "{message}");
    let done = tokio::time::timeout(Duration::from_secs(5), node.wait_terminal(&id))
        .await
        .expect("it wakes")
        .unwrap();
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(800), "{took:?}");
    assert!(took < Duration::from_millis(1_500), "woke late: {took:?}");
    assert_eq!(
        value_of(&done),
        json!({"attempt": 1}),
        "a wake goes on with its run"
    );
    assert_eq!(
        before.load(Ordering::SeqCst),
        1,
        "the step before the sleep was replayed"
    );
    let history = f.store.history(&id).await.unwrap();
    assert!(
        history
            .iter()
            .any(|h| h.message.as_deref() == Some("woke from its durable sleep (attempt 1)")),
        "{history:?}"
    );
    node.shutdown();
}

/// Wakes are no failed runs: a task that sleeps three times with max_attempts 2 completes, its
/// attempt still 1 (a wake goes on with the same run's work), and a hand-off after the wakes still
/// resumes it. A short sleep (under the threshold) keeps its run.
#[tokio::test]
async fn wakes_keep_the_attempt_and_short_sleeps_keep_their_run() {
    let mut f = Fixture::new();
    f.config.suspend_sleeps_over = Some(Duration::from_millis(50));
    f.config.max_attempts = 2;
    let inner = sleeper(Arc::default(), 3, 150);
    let s = script(move |ctx| {
        let inner = inner.clone();
        async move {
            // After its sleeps, the first run waits to be handed off.
            let slept = inner(ctx.clone()).await;
            if let Some(stopped) = hand_off_on_first_run(&ctx).await {
                return stopped;
            }
            slept
        }
    });
    let t = f.across_a_hand_off(&s, 5, &s).await;
    // The second run replays the three sleeps (woken) and `after`: its result is the first
    // run's (`after` recorded by it) but its own attempt is 2.
    assert_eq!(value_of(&t), json!({"attempt": 2}));
    let short = f.node(&sleeper(Arc::default(), 1, 20));
    let t = f.run_once_with(&short).await;
    assert_eq!(value_of(&t), json!({"attempt": 1}), "slept in its run");
}

/// A tool that is not safe to run again (`retry_on_restart` off) sleeps in its run: suspending it
/// would have its wake fail it as a task that cannot resume.
#[tokio::test]
async fn a_tool_that_cannot_resume_sleeps_in_its_run() {
    let mut f = Fixture::new();
    f.config.suspend_sleeps_over = Some(Duration::from_millis(50));
    let node = f.node_with(&sleeper(Arc::default(), 1, 300), false);
    node.start().await.unwrap();
    let id = submit(&node).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(node.running_count(), 1, "still running its sleep");
    let t = tokio::time::timeout(Duration::from_secs(5), node.wait_terminal(&id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(value_of(&t), json!({"attempt": 1}));
    node.shutdown();
}

/// A handler that races its sleep with `cancelled()` sees the suspension's stop in the same poll:
/// what it returns for it is not the task's outcome, the sleep goes on as a suspension and completes.
#[tokio::test]
async fn a_failure_returned_for_the_suspension_s_stop_is_not_the_outcome() {
    let mut f = Fixture::new();
    f.config.suspend_sleeps_over = Some(Duration::from_millis(50));
    let s = script(|ctx| async move {
        // The sleep first: in the poll where it suspends, `cancelled()` is ready at once.
        tokio::select! {
            biased;
            slept = ctx.sleep(Duration::from_millis(400)) => match slept {
                Ok(()) => done(json!({"attempt": ctx.attempt()})),
                Err(e) => failure(e),
            },
            () = ctx.cancelled() => failure("cancelled while sleeping"),
        }
    });
    let t = f.run_once(&s).await;
    assert_eq!(value_of(&t), json!({"attempt": 1}));
}

/// A node stopped while its task sleeps: the next start takes it up and it still wakes on time.
#[tokio::test]
async fn a_suspended_task_wakes_on_time_after_a_restart() {
    let mut f = Fixture::new();
    f.config.suspend_sleeps_over = Some(Duration::from_millis(100));
    let before = Arc::new(AtomicU32::new(0));
    let s = sleeper(before.clone(), 1, 1_000);
    let first = f.node(&s);
    first.start().await.unwrap();
    let started = Instant::now();
    let id = submit(&first).await;
    suspended(&first, &f.store, &id).await;
    first.shutdown();
    let second = f.node(&s);
    second.start().await.unwrap();
    let done = tokio::time::timeout(Duration::from_secs(5), second.wait_terminal(&id))
        .await
        .expect("it wakes")
        .unwrap();
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(1_000), "{took:?}");
    assert!(took < Duration::from_millis(1_700), "woke late: {took:?}");
    assert_eq!(
        value_of(&done)["attempt"],
        1,
        "left asleep at the start (not run early), then woken"
    );
    assert_eq!(before.load(Ordering::SeqCst), 1);
    second.shutdown();
}

/// v2 checks the same change twice; v3 drops the check. A run answers the same for one change
/// every time: on an old journal both checks take the old path (the second no longer records a
/// marker the next run would meet at the first). A journal with a marker replays on code without
/// the check: the marker is skipped, not a mismatch.
#[tokio::test]
async fn patched_answers_once_per_run_and_its_markers_outlive_the_check() {
    let twice = script(|ctx| async move {
        let run = || async {
            ctx.step("a", || async { 1u8 }).await?;
            let first = ctx.patched("p").await?;
            if first {
                ctx.step("x", || async { 1u8 }).await?;
            }
            ctx.step("b", || async { 1u8 }).await?;
            let second = ctx.patched("p").await?;
            if let Some(stopped) = hand_off_on_first_run(&ctx).await {
                return Ok(stopped);
            }
            ctx.step("c", || async { 1u8 }).await?;
            Ok::<_, StepError>(done(json!([first, second])))
        };
        run().await.unwrap_or_else(failure)
    });
    let f = Fixture::new();
    // A v1 journal [a, b]: both checks answer false; nothing is recorded for them.
    let old = f.across_a_hand_off(&version_one(), 2, &twice).await;
    assert_eq!(value_of(&old), json!([false, false]));
    // A journal recorded by the checking code, replayed by code without the check.
    let without = script(|ctx| async move {
        let run = || async {
            ctx.step("a", || async { 1u8 }).await?;
            ctx.step("x", || async { 1u8 }).await?;
            ctx.step("b", || async { 1u8 }).await?;
            ctx.step("c", || async { 1u8 }).await?;
            Ok::<_, StepError>(done(json!("v3")))
        };
        run().await.unwrap_or_else(failure)
    });
    let newer = f.across_a_hand_off(&twice, 4, &without).await;
    assert_eq!(value_of(&newer), json!("v3"));
    assert_eq!(f.names(&newer.id).await, ["a", "::patch:p", "x", "b", "c"]);
}

/// A recorded output the new code reads as another type is what a resumed run would fail on:
/// the replay check says so, rather than reporting the handler's error return as clean.
#[tokio::test]
async fn a_replay_check_reports_a_step_whose_type_changed() {
    let f = Fixture::new();
    let node = f.node(&version_one());
    let id = started(&node, &f.store, 2).await;
    let task = record_of(&f.store, &id).await;
    let export = JournalExport {
        task_id: id.clone(),
        tool: task.tool.clone(),
        arguments: (*task.arguments).clone(),
        attempt: task.attempt,
        checkpoint: None,
        steps: f.store.steps(&id).await.unwrap(),
    };
    node.cancel(&id, None).await.unwrap();
    node.shutdown();
    let retyped = script(|ctx| async move {
        let run = || async {
            ctx.step("a", || async { 1u8 }).await?;
            let b: String = ctx
                .step("b", || async { "now a string".to_string() })
                .await?;
            Ok::<_, StepError>(done(json!(b)))
        };
        run().await.unwrap_or_else(failure)
    });
    let got = replay_check(&Scripted(retyped), &export, Duration::from_secs(5)).await;
    match got {
        Err(ReplayCheckError::Mismatch(StepError::Serde { name, .. })) => assert_eq!(name, "b"),
        other => panic!("{other:?}"),
    }
}

/// A task suspended by one PostgreSQL replica, which then stops: another replica takes it up at
/// its wake time (not before), the step before the sleep replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_suspended_on_one_replica_wakes_on_another() {
    let schema = PgSchema::new("t_sleep");
    let before = Arc::new(AtomicU32::new(0));
    let s = sleeper(before.clone(), 1, 1_500);
    let node = |store: Arc<dyn TaskStore>, name: &str| {
        Engine::builder(
            store,
            EngineConfig {
                node_id: name.into(),
                lease_ms: 1_000,
                suspend_sleeps_over: Some(Duration::from_millis(100)),
                ..EngineConfig::default()
            },
        )
        .handler("tool", Arc::new(Scripted(s.clone())), true)
        .build()
    };
    let store_a = schema.replica().await;
    let a = node(store_a.clone(), "replica-a");
    a.start().await.unwrap();
    let started = Instant::now();
    let id = submit(&a).await;
    suspended(&a, &store_a, &id).await;
    a.shutdown();
    let b = node(schema.replica().await, "replica-b");
    b.start().await.unwrap();
    let t = finished_in_store(&store_a, &id, Duration::from_secs(10), |t| {
        assert!(
            t.lease_owner.as_deref() == Some("(suspended)")
                || started.elapsed() >= Duration::from_millis(1_500),
            "taken up before its wake time: {t:?}"
        );
    })
    .await;
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(1_500), "{took:?}");
    // Woken by replica B's take-over pass (every half lease): within a second of the wake time.
    assert!(took < Duration::from_millis(3_000), "woke late: {took:?}");
    assert_eq!(value_of(&t), json!({"attempt": 1}));
    assert_eq!(before.load(Ordering::SeqCst), 1);
    b.shutdown();
    schema.drop().await;
}

// ---- Signals -------------------------------------------------------------------------------

fn signal(name: &str, payload: Value) -> mcp_tasks_engine::SignalSend {
    mcp_tasks_engine::SignalSend {
        name: name.into(),
        payload,
        sender: "owner test".into(),
        key: None,
        owner: None,
    }
}

/// Two waits for `approve`; the first run hands off between them. Returns both payloads, the
/// senders and the run.
fn approver(prepared: Arc<AtomicU32>) -> Script {
    script(move |ctx| {
        let prepared = prepared.clone();
        async move {
            let ran = ctx
                .step("prepare", || async move {
                    prepared.fetch_add(1, Ordering::SeqCst)
                })
                .await;
            if let Err(e) = ran {
                return failure(e);
            }
            let first = match ctx.wait_signal("approve").await {
                Ok(s) => s,
                Err(e) => return failure(e),
            };
            if let Some(stopped) = hand_off_on_first_run(&ctx).await {
                return stopped;
            }
            match ctx.wait_signal("approve").await {
                Ok(second) => done(json!({
                    "payloads": [first.payload, second.payload],
                    "senders": [first.sender, second.sender],
                    "attempt": ctx.attempt(),
                })),
                Err(e) => failure(e),
            }
        }
    })
}

/// A signal sent before the wait is taken by it; one sent while the task is handed off (no node
/// runs it) is kept and taken by the next run, which replays the first wait's signal instead of
/// taking another; a signal of another name is not taken; each wait takes the next of its name.
#[tokio::test]
async fn signals_sent_before_the_wait_or_during_a_hand_off_are_kept_and_replayed() {
    let f = Fixture::new();
    let prepared = Arc::new(AtomicU32::new(0));
    let s = approver(prepared.clone());
    let a = f.node(&s);
    a.start().await.unwrap();
    let id = submit(&a).await;
    // Sent at once: before the run's wait, or as it begins.
    a.signal(&id, signal("other", json!("not this")))
        .await
        .unwrap();
    let first = a
        .signal(&id, signal("approve", json!({"n": 1})))
        .await
        .unwrap();
    assert_eq!(first.signal.seq, 2, "signals take places in the order sent");
    let taken = async {
        while !f.names(&id).await.contains(&"::signal:approve".to_string()) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), taken)
        .await
        .expect("the first wait took its signal");
    a.hand_off().await;
    a.shutdown();
    // No node runs the task now.
    let b = f.node(&s);
    b.signal(&id, signal("approve", json!({"n": 2})))
        .await
        .unwrap();
    b.start().await.unwrap();
    let done = tokio::time::timeout(Duration::from_secs(5), b.wait_terminal(&id))
        .await
        .expect("the task ends")
        .unwrap();
    assert_eq!(
        value_of(&done),
        json!({
            "payloads": [{"n": 1}, {"n": 2}],
            "senders": ["owner test", "owner test"],
            "attempt": 2,
        })
    );
    assert_eq!(prepared.load(Ordering::SeqCst), 1, "prepare was replayed");
    assert_eq!(b.signals(&id).await.unwrap().len(), 3);
    // A finished task takes no more.
    assert!(matches!(
        b.signal(&id, signal("approve", json!(3))).await,
        Err(mcp_tasks_engine::SignalError::Finished { .. })
    ));
    b.shutdown();
}

/// Waits for `approve` up to `timeout_ms`; returns its payload, or that it timed out.
fn waits_for_approval(timeout_ms: u64) -> Script {
    script(move |ctx| async move {
        match ctx
            .wait_signal_timeout("approve", Duration::from_millis(timeout_ms))
            .await
        {
            Ok(Some(s)) => done(json!({"payload": s.payload, "attempt": ctx.attempt()})),
            Ok(None) => done(json!({"timedOut": true})),
            Err(e) => failure(e),
        }
    })
}

/// Waits until the task is suspended awaiting a signal (its run ended), and returns it.
async fn awaiting(node: &Arc<Engine>, store: &Arc<dyn TaskStore>, id: &str) -> TaskRecord {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let t = record_of(store, id).await;
        if t.lease_owner.as_deref() == Some("(awaiting signal)") && node.running_count() == 0 {
            return t;
        }
        assert!(Instant::now() < deadline, "never suspended: {t:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A wait longer than `suspend_sleeps_over` suspends the task (no slot, no lease, a status that
/// says what it waits for until when); a signal wakes it at once, and the run that takes it up
/// gets the payload, its attempt unchanged.
#[tokio::test]
async fn a_long_wait_frees_its_slot_and_a_signal_wakes_it_at_once() {
    let mut f = Fixture::new();
    f.config.suspend_sleeps_over = Some(Duration::from_millis(100));
    let node = f.node(&waits_for_approval(30_000));
    node.start().await.unwrap();
    let id = submit(&node).await;
    let t = awaiting(&node, &f.store, &id).await;
    assert_eq!(t.status, TaskStatus::Working);
    let message = t.status_message.clone().unwrap_or_default();
    assert!(
        message.starts_with("waiting for the signal `approve` until 20"),
        "{message}"
    );
    let sent = Instant::now();
    node.signal(&id, signal("approve", json!({"ok": true})))
        .await
        .unwrap();
    let done = tokio::time::timeout(Duration::from_secs(5), node.wait_terminal(&id))
        .await
        .expect("the signal wakes it")
        .unwrap();
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "{:?}",
        sent.elapsed()
    );
    assert_eq!(
        value_of(&done),
        json!({"payload": {"ok": true}, "attempt": 1})
    );
    let history = f.store.history(&id).await.unwrap();
    assert!(
        history
            .iter()
            .any(|h| h.message.as_deref() == Some("woke to look for its signal (attempt 1)")),
        "{history:?}"
    );
    node.shutdown();
}

/// A wait gives up at its timeout (held in its run when short), and that is recorded: the next
/// run does not wait again.
#[tokio::test]
async fn a_wait_gives_up_at_its_timeout() {
    let f = Fixture::new();
    let started = Instant::now();
    let t = f.run_once(&waits_for_approval(300)).await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(value_of(&t), json!({"timedOut": true}));
    assert_eq!(
        f.names(&t.id).await,
        vec!["::signal-deadline:approve", "::signal:approve"]
    );
}

/// A task suspended waiting on one node, that node stopped: a signal sent through the next one
/// (started later) wakes the task there.
#[tokio::test]
async fn a_suspended_wait_is_woken_by_a_signal_after_a_restart() {
    let mut f = Fixture::new();
    f.config.suspend_sleeps_over = Some(Duration::from_millis(100));
    let s = waits_for_approval(60_000);
    let first = f.node(&s);
    first.start().await.unwrap();
    let id = submit(&first).await;
    awaiting(&first, &f.store, &id).await;
    first.shutdown();
    let second = f.node(&s);
    second.start().await.unwrap();
    // Left asleep at the start: it has no signal yet.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        record_of(&f.store, &id).await.lease_owner.as_deref(),
        Some("(awaiting signal)")
    );
    second
        .signal(&id, signal("approve", json!("go")))
        .await
        .unwrap();
    let done = tokio::time::timeout(Duration::from_secs(5), second.wait_terminal(&id))
        .await
        .expect("the signal wakes it")
        .unwrap();
    assert_eq!(value_of(&done), json!({"payload": "go", "attempt": 1}));
    second.shutdown();
}

/// What a sender may send: a name, a key, a payload within bounds, to a task that exists and (with
/// an owner) is its own. A key sent again is the same signal.
#[tokio::test]
async fn signals_are_checked_and_a_key_sent_again_is_the_same_signal() {
    use mcp_tasks_engine::SignalError;
    let f = Fixture::new();
    let node = f.node(&waits_for_approval(60_000));
    node.start().await.unwrap();
    let id = submit(&node).await;
    let bad = |e: Result<mcp_tasks_engine::SignalSent, SignalError>| e.unwrap_err().to_string();
    assert!(bad(node.signal(&id, signal("", json!(1))).await).contains("1 to 128 characters"));
    assert!(bad(node.signal(&id, signal("a\nb", json!(1))).await).contains("control"));
    let big = json!("x".repeat(mcp_tasks_engine::MAX_SIGNAL_BYTES));
    assert!(bad(node.signal(&id, signal("approve", big)).await).contains("at most 262144"));
    assert!(matches!(
        node.signal("no-such-task", signal("approve", json!(1)))
            .await,
        Err(SignalError::NotFound(_))
    ));
    let mut theirs = signal("approve", json!(1));
    theirs.owner = Some("mallory".into());
    assert!(
        matches!(
            node.signal(&id, theirs).await,
            Err(SignalError::NotFound(_))
        ),
        "another principal's task is not found"
    );
    let mut keyed = signal("other", json!(1));
    keyed.key = Some("retry-1".into());
    let once = node.signal(&id, keyed.clone()).await.unwrap();
    assert!(once.fresh);
    keyed.payload = json!(2);
    let again = node.signal(&id, keyed).await.unwrap();
    assert_eq!((again.signal, again.fresh), (once.signal, false));
    assert_eq!(node.signals(&id).await.unwrap().len(), 1);
    node.shutdown();
}

/// Sends `approve` to the task named in its arguments; on its first run, then waits to be handed
/// off.
struct SendsApproval;

#[async_trait::async_trait]
impl TaskHandler for SendsApproval {
    async fn run(&self, ctx: TaskContext, args: Arc<Value>) -> Outcome {
        let target = args["target"].as_str().unwrap_or_default().to_string();
        let sent = ctx
            .signal_task(&target, "approve", json!({"from": "sender"}))
            .await;
        if let Some(stopped) = hand_off_on_first_run(&ctx).await {
            return stopped;
        }
        match sent {
            Ok(place) => done(json!({"place": place})),
            Err(e) => done(json!({"refused": e.to_string()})),
        }
    }
}

/// A handler sends a signal to another task of its owner, once however often it is replayed; a
/// task of another owner is not found, and that refusal is what a replay gets too.
#[tokio::test]
async fn a_handler_signals_another_task_of_its_owner_once() {
    let f = Fixture::new();
    let waiter = waits_for_approval(60_000);
    let node = || {
        Engine::builder(f.store.clone(), f.config.clone())
            .handler("tool", Arc::new(Scripted(waiter.clone())), true)
            .handler("sender", Arc::new(SendsApproval), true)
            .build()
    };
    let task = |tool: &str, owner: &str, args: Value| {
        let mut t = NewTask::new(tool, args);
        t.owner = owner.into();
        t
    };
    let a = node();
    a.start().await.unwrap();
    let target = a.submit(task("tool", "alice", json!({}))).await.unwrap();
    let target = target.record.id;
    let other = a.submit(task("tool", "alice", json!({}))).await.unwrap();
    let other = other.record.id;
    let mine = a
        .submit(task("sender", "alice", json!({"target": target})))
        .await
        .unwrap()
        .record
        .id;
    let theirs = a
        .submit(task("sender", "mallory", json!({"target": other})))
        .await
        .unwrap()
        .record
        .id;
    let sent = async {
        while f.names(&mine).await.len() < 2 || f.names(&theirs).await.len() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), sent)
        .await
        .expect("both senders sent");
    a.hand_off().await;
    a.shutdown();
    let b = node();
    b.start().await.unwrap();
    let wait = |id: String| {
        let b = b.clone();
        async move {
            tokio::time::timeout(Duration::from_secs(5), b.wait_terminal(&id))
                .await
                .expect("the task ends")
                .unwrap()
        }
    };
    assert_eq!(value_of(&wait(mine.clone()).await), json!({"place": 1}));
    let refused = value_of(&wait(theirs.clone()).await);
    assert_eq!(
        refused,
        json!({"refused": format!("the signal was refused: no task {other}")}),
        "a replay gets the refusal its first run got"
    );
    let got = value_of(&wait(target.clone()).await);
    assert_eq!(got["payload"], json!({"from": "sender"}));
    let kept = b.signals(&target).await.unwrap();
    assert_eq!(kept.len(), 1, "sent once: {kept:?}");
    assert_eq!(kept[0].sender, format!("task {mine}"));
    assert!(b.signals(&other).await.unwrap().is_empty());
    b.shutdown();
}

/// On two PostgreSQL replicas: a signal sent through replica B reaches a wait running on replica
/// A (which looks in the store every second), and one sent through B to a task A suspended while
/// waiting wakes it on B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_through_one_replica_reaches_a_wait_on_another() {
    let schema = PgSchema::new("t_signal");
    let node = |store: Arc<dyn TaskStore>, name: &str, suspend: Option<Duration>| {
        Engine::builder(
            store,
            EngineConfig {
                node_id: name.into(),
                lease_ms: 1_000,
                suspend_sleeps_over: suspend,
                ..EngineConfig::default()
            },
        )
        .handler("tool", Arc::new(Scripted(waits_for_approval(60_000))), true)
        .build()
    };
    let store_a = schema.replica().await;
    let a = node(store_a.clone(), "replica-a", None);
    a.start().await.unwrap();
    let b = node(schema.replica().await, "replica-b", None);
    b.start().await.unwrap();
    // Waiting in its run on A.
    let held = submit(&a).await;
    let in_wait = async {
        loop {
            let t = record_of(&store_a, &held).await;
            if t.status_message
                .as_deref()
                .unwrap_or("")
                .starts_with("waiting for the signal")
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), in_wait)
        .await
        .expect("the run waits");
    let sent = Instant::now();
    b.signal(&held, signal("approve", json!("via b")))
        .await
        .unwrap();
    let t = finished_in_store(&store_a, &held, Duration::from_secs(5), |t| {
        assert_eq!(t.lease_owner.as_deref(), Some("replica-a"), "{t:?}");
    })
    .await;
    assert!(
        sent.elapsed() < Duration::from_secs(3),
        "{:?}",
        sent.elapsed()
    );
    assert_eq!(value_of(&t), json!({"payload": "via b", "attempt": 1}));
    a.shutdown();
    b.shutdown();

    // Suspended on A (A then stops): B's signal wakes it on B.
    let a = node(
        store_a.clone(),
        "replica-a2",
        Some(Duration::from_millis(100)),
    );
    a.start().await.unwrap();
    let asleep = submit(&a).await;
    awaiting(&a, &store_a, &asleep).await;
    a.shutdown();
    let b = node(
        schema.replica().await,
        "replica-b2",
        Some(Duration::from_millis(100)),
    );
    b.start().await.unwrap();
    b.signal(&asleep, signal("approve", json!("woken on b")))
        .await
        .unwrap();
    let t = finished_in_store(&store_a, &asleep, Duration::from_secs(5), |_| {}).await;
    assert_eq!(value_of(&t), json!({"payload": "woken on b", "attempt": 1}));
    b.shutdown();
    schema.drop().await;
}
