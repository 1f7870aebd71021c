//! The executor end to end on the memory store: handlers run, report, finish, get cancelled, panic, and
//! are recovered after a simulated crash.

use async_trait::async_trait;
use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_engine::store::prelude::*;
use mcp_tasks_engine::store::{testkit, Lookup, TaskStore};
use mcp_tasks_engine::{
    Engine, EngineConfig, EngineError, InputError, NewTask, Outcome, OutcomeRules, TaskContext,
    TaskEvent, TaskHandler, TaskStatus,
};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Rules as a JSON-RPC server would set them: failures are internal errors, and a tool error's
/// status message is its first text block.
struct WireRules;

impl OutcomeRules for WireRules {
    fn failure(&self, message: String) -> Outcome {
        Outcome::Error {
            code: -32603,
            message,
            data: None,
        }
    }

    fn error_summary(&self, result: &Value) -> Option<String> {
        result["content"]
            .as_array()?
            .iter()
            .find_map(|b| b["text"].as_str())
            .map(String::from)
    }
}

struct Sleepy {
    ms: u64,
    obey_cancel: bool,
}

#[async_trait]
impl TaskHandler for Sleepy {
    async fn run(&self, ctx: TaskContext, args: std::sync::Arc<Value>) -> Outcome {
        ctx.progress(1.0, Some(2.0), None).await;
        if self.obey_cancel {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(self.ms)) => {}
                _ = ctx.cancelled() => return WireRules.failure("stopped".into()),
            }
        } else {
            tokio::time::sleep(Duration::from_millis(self.ms)).await;
        }
        ctx.progress(2.0, Some(2.0), None).await;
        Outcome::Result {
            value: json!({"content": [], "echo": args}),
            is_error: false,
        }
    }
}

struct Panics;
#[async_trait]
impl TaskHandler for Panics {
    async fn run(&self, _ctx: TaskContext, _args: std::sync::Arc<Value>) -> Outcome {
        panic!("boom")
    }
}

struct Counting(Arc<AtomicUsize>);
#[async_trait]
impl TaskHandler for Counting {
    async fn run(&self, _ctx: TaskContext, _args: std::sync::Arc<Value>) -> Outcome {
        self.0.fetch_add(1, Ordering::SeqCst);
        Outcome::Result {
            value: json!({"content": []}),
            is_error: false,
        }
    }
}

fn engine(store: Arc<dyn TaskStore>, counter: Arc<AtomicUsize>) -> Arc<Engine> {
    let config = EngineConfig {
        cancel_grace: Duration::from_millis(300),
        ..EngineConfig::default()
    };
    Engine::builder(store, config)
        .outcome_rules(Arc::new(WireRules))
        .handler(
            "sleepy",
            Arc::new(Sleepy {
                ms: 200,
                obey_cancel: true,
            }),
            false,
        )
        .handler(
            "long",
            Arc::new(Sleepy {
                ms: 60_000,
                obey_cancel: true,
            }),
            false,
        )
        .handler(
            "deaf",
            Arc::new(Sleepy {
                ms: 60_000,
                obey_cancel: false,
            }),
            false,
        )
        .handler("panics", Arc::new(Panics), false)
        .handler("retry", Arc::new(Counting(counter)), true)
        .build()
}

#[tokio::test]
async fn a_task_runs_to_completion_with_progress() {
    let e = engine(Arc::new(MemoryStore::new()), Default::default());
    let s = e
        .submit(NewTask::new("sleepy", json!({"x": 1})))
        .await
        .unwrap();
    assert!(s.created);
    assert_eq!(s.record.status, TaskStatus::Working);
    let done = e.wait_terminal(&s.record.id).await.unwrap();
    assert_eq!(done.status, TaskStatus::Completed);
    assert_eq!(done.progress, Some(2.0));
    assert!(
        matches!(&done.outcome, Some(Outcome::Result { value, .. }) if value["echo"]["x"] == 1)
    );
    assert_eq!(done.lease_owner, None, "a finished task holds no lease");
}

#[tokio::test]
async fn cancel_wins_over_a_later_completion_and_stops_the_handler() {
    let e = engine(Arc::new(MemoryStore::new()), Default::default());
    let s = e.submit(NewTask::new("long", json!({}))).await.unwrap();
    let rec = e.cancel(&s.record.id, Some("test".into())).await.unwrap();
    assert_eq!(rec.status, TaskStatus::Cancelled);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let Lookup::Found(after) = e.get(&s.record.id).await.unwrap() else {
        panic!()
    };
    assert_eq!(after.status, TaskStatus::Cancelled);
    assert_eq!(
        after.outcome, None,
        "the handler's late outcome is discarded"
    );
    assert!(matches!(
        e.cancel(&s.record.id, None).await,
        Err(EngineError::AlreadyTerminal(_))
    ));
}

#[tokio::test]
async fn a_handler_that_ignores_cancel_is_dropped_after_the_grace() {
    let e = engine(Arc::new(MemoryStore::new()), Default::default());
    let s = e.submit(NewTask::new("deaf", json!({}))).await.unwrap();
    assert_eq!(e.running_count(), 1);
    let cancelled = std::time::Instant::now();
    e.cancel(&s.record.id, None).await.unwrap();
    // After the 300 ms grace the runner stops waiting for the handler and drops it.
    let released = async {
        while e.running_count() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(3), released)
        .await
        .expect("runner let go of the task");
    assert!(
        cancelled.elapsed() >= Duration::from_millis(300),
        "the handler had its grace period"
    );
}

#[tokio::test]
async fn a_handler_whose_lease_was_taken_over_stops_and_writes_nothing() {
    let store: Arc<dyn TaskStore> = Arc::new(MemoryStore::new());
    let config = EngineConfig {
        cancel_grace: Duration::from_millis(300),
        lease_ms: 300,
        ..EngineConfig::default()
    };
    let e = Engine::builder(store.clone(), config)
        .outcome_rules(Arc::new(WireRules))
        .handler(
            "long",
            Arc::new(Sleepy {
                ms: 60_000,
                obey_cancel: true,
            }),
            false,
        )
        .build();
    e.start().await.unwrap();
    let s = e.submit(NewTask::new("long", json!({}))).await.unwrap();
    assert_eq!(e.running_count(), 1);
    // Another node takes the task over (as after a lease that looked expired to it).
    let far = mcp_tasks_engine::now_ms() + 60_000;
    let taken = store
        .claim_orphans(
            "node-b",
            0,
            true,
            far,
            Arc::new(|_| Some(Default::default())),
        )
        .await
        .unwrap();
    assert_eq!(taken.len(), 1);
    // The next renewal (every lease/3) finds the lease lost and stops the handler.
    let stopped = async {
        while e.running_count() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(3), stopped)
        .await
        .expect("the handler stopped after losing its lease");
    let Lookup::Found(after) = e.get(&s.record.id).await.unwrap() else {
        panic!()
    };
    assert_eq!(after.status, TaskStatus::Working, "node-b's task now");
    assert_eq!(after.lease_owner.as_deref(), Some("node-b"));
    assert_eq!(after.outcome, None, "the stopped handler wrote nothing");
    e.shutdown();
}

#[tokio::test]
async fn finished_tasks_leave_no_topics_behind() {
    let e = engine(Arc::new(MemoryStore::new()), Default::default());
    for _ in 0..5 {
        let s = e.submit(NewTask::new("sleepy", json!({}))).await.unwrap();
        e.wait_terminal(&s.record.id).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(e.notifier().topic_count(), 0);
    // Nor ordering locks, even after changes that lose their compare-and-set.
    let s = e.submit(NewTask::new("sleepy", json!({}))).await.unwrap();
    e.wait_terminal(&s.record.id).await.unwrap();
    assert!(e.cancel(&s.record.id, None).await.is_err());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(e.ordering_locks(), 0);
}

#[tokio::test]
async fn submit_finished_stores_a_terminal_task_without_running_anything() {
    let e = engine(Arc::new(MemoryStore::new()), Default::default());
    let outcome = Outcome::Result {
        value: json!({"content": [{"type": "text", "text": "bad args"}], "isError": true}),
        is_error: true,
    };
    let s = e
        .submit_finished(NewTask::new("long", json!({})), outcome)
        .await
        .unwrap();
    assert_eq!(s.record.status, TaskStatus::Completed);
    assert_eq!(s.record.status_message.as_deref(), Some("bad args"));
    assert_eq!(e.wait_terminal(&s.record.id).await.unwrap().id, s.record.id);
}

#[tokio::test]
async fn a_panicking_handler_fails_the_task_with_a_message() {
    let e = engine(Arc::new(MemoryStore::new()), Default::default());
    let s = e.submit(NewTask::new("panics", json!({}))).await.unwrap();
    let done = e.wait_terminal(&s.record.id).await.unwrap();
    assert_eq!(done.status, TaskStatus::Failed);
    assert_eq!(
        done.status_message.as_deref(),
        Some("tool `panics` panicked")
    );
    assert!(
        matches!(done.outcome, Some(Outcome::Error { code: -32603, .. })),
        "the failure is worded by the engine's rules: {:?}",
        done.outcome
    );
}

#[tokio::test]
async fn without_rules_failures_carry_no_wire_code_and_tool_errors_no_summary() {
    let e = Engine::builder(Arc::new(MemoryStore::new()), EngineConfig::default())
        .handler("panics", Arc::new(Panics), false)
        .build();
    let s = e.submit(NewTask::new("panics", json!({}))).await.unwrap();
    let done = e.wait_terminal(&s.record.id).await.unwrap();
    assert_eq!(
        done.outcome,
        Some(Outcome::Error {
            code: 0,
            message: "tool `panics` panicked".into(),
            data: None
        })
    );
    let outcome = Outcome::Result {
        value: json!({"content": [{"type": "text", "text": "bad args"}], "isError": true}),
        is_error: true,
    };
    let s = e
        .submit_finished(NewTask::new("panics", json!({})), outcome)
        .await
        .unwrap();
    assert_eq!(s.record.status, TaskStatus::Completed);
    assert_eq!(s.record.status_message, None);
}

#[tokio::test]
async fn new_tasks_have_no_owner_unless_given_one() {
    let e = engine(Arc::new(MemoryStore::new()), Default::default());
    let s = e.submit(NewTask::new("sleepy", json!({}))).await.unwrap();
    assert_eq!(s.record.owner, "");
    let mut n = NewTask::new("sleepy", json!({}));
    n.owner = "alice".into();
    assert_eq!(e.submit(n).await.unwrap().record.owner, "alice");
}

#[tokio::test]
async fn unknown_tool_is_refused_before_anything_is_stored() {
    let e = engine(Arc::new(MemoryStore::new()), Default::default());
    assert!(matches!(
        e.submit(NewTask::new("nope", json!({}))).await,
        Err(EngineError::UnknownTool(_))
    ));
}

#[tokio::test]
async fn idempotent_submit_returns_the_first_task() {
    let e = engine(Arc::new(MemoryStore::new()), Default::default());
    let mut n = NewTask::new("sleepy", json!({"a": 1}));
    n.idempotency_key = Some("k".into());
    let first = e.submit(n.clone()).await.unwrap();
    let second = e.submit(n.clone()).await.unwrap();
    assert!(first.created && !second.created);
    assert_eq!(first.record.id, second.record.id);
    n.arguments = json!({"a": 2});
    assert!(matches!(e.submit(n).await, Err(EngineError::Store(_))));
}

#[tokio::test]
async fn recovery_fails_interrupted_tasks_and_reruns_retry_safe_ones() {
    let store: Arc<dyn TaskStore> = Arc::new(MemoryStore::new());
    // What a crashed run left behind: two unfinished tasks with leases of a dead node.
    let mut plain = testkit::record("plain", "alice", 1);
    plain.tool = "sleepy".into();
    let mut retry = testkit::record("again", "alice", 1);
    retry.tool = "retry".into();
    let mut gone = testkit::record("gone", "alice", 1);
    gone.tool = "removed_tool".into();
    store.create(plain, None).await.unwrap();
    store.create(retry, None).await.unwrap();
    store.create(gone, None).await.unwrap();
    let counter = Arc::new(AtomicUsize::new(0));
    let e = engine(store.clone(), counter.clone());
    assert_eq!(e.start().await.unwrap(), 3);
    let Lookup::Found(g) = store.get("gone").await.unwrap() else {
        panic!()
    };
    assert_eq!(g.status, TaskStatus::Failed);
    assert!(
        g.status_message
            .as_deref()
            .unwrap()
            .ends_with("it cannot resume: its tool removed_tool is not served any more"),
        "{:?}",
        g.status_message
    );
    let Lookup::Found(p) = store.get("plain").await.unwrap() else {
        panic!()
    };
    assert_eq!(p.status, TaskStatus::Failed);
    assert_eq!(
        p.status_message.as_deref(),
        Some(
            "interrupted: server restarted before the task finished; it cannot resume: its tool \
             is not safe to run again (retry_on_restart) and it saved no checkpoint to go on from"
        )
    );
    let again = e.wait_terminal("again").await.unwrap();
    assert_eq!(again.status, TaskStatus::Completed);
    assert_eq!(again.attempt, 2);
    assert_eq!(counter.load(Ordering::SeqCst), 1);
    e.shutdown();
}

/// Asks its client one question of the size its arguments give, and reports how the asking went.
struct Asks(tokio::sync::mpsc::UnboundedSender<Result<(), InputError>>);

#[async_trait]
impl TaskHandler for Asks {
    async fn run(&self, ctx: TaskContext, args: std::sync::Arc<Value>) -> Outcome {
        let params = json!({"blob": "x".repeat(args["len"].as_u64().unwrap() as usize)});
        let asked = ctx.request_input("ask", params).await.map(|_| ());
        let _ = self.0.send(asked);
        ctx.cancelled().await;
        WireRules.failure("stopped".into())
    }
}

#[tokio::test]
async fn a_question_larger_than_the_cap_is_refused_and_stores_nothing() {
    let blob = |len: usize| json!({"blob": "x".repeat(len)});
    let max = serde_json::to_vec(&blob(100)).unwrap().len();
    let (tx, mut asked) = tokio::sync::mpsc::unbounded_channel();
    let config = EngineConfig {
        max_input_request_bytes: max,
        cancel_grace: Duration::from_millis(300),
        ..EngineConfig::default()
    };
    let store: Arc<dyn TaskStore> = Arc::new(MemoryStore::new());
    let e = Engine::builder(store.clone(), config)
        .handler("asks", Arc::new(Asks(tx)), false)
        .build();

    let big = e
        .submit(NewTask::new("asks", json!({"len": 101})))
        .await
        .unwrap();
    assert_eq!(
        asked.recv().await.unwrap(),
        Err(InputError::TooLarge { size: max + 1, max })
    );
    let Lookup::Found(rec) = e.get(&big.record.id).await.unwrap() else {
        panic!("task gone")
    };
    assert_eq!(rec.status, TaskStatus::Working);
    assert!(store.inputs(&big.record.id).await.unwrap().is_empty());

    // A question of exactly the cap is asked as usual.
    let fits = e
        .submit(NewTask::new("asks", json!({"len": 100})))
        .await
        .unwrap();
    let waiting = async {
        loop {
            if let Lookup::Found(t) = e.get(&fits.record.id).await.unwrap() {
                if t.status == TaskStatus::InputRequired {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(3), waiting)
        .await
        .expect("the question was asked");
    assert_eq!(store.inputs(&fits.record.id).await.unwrap().len(), 1);
    e.cancel(&big.record.id, None).await.unwrap();
    e.cancel(&fits.record.id, None).await.unwrap();
}

/// Reports a fixed series of progress updates, then finishes.
struct Reports;

#[async_trait]
impl TaskHandler for Reports {
    async fn run(&self, ctx: TaskContext, _args: std::sync::Arc<Value>) -> Outcome {
        ctx.progress(1.0, Some(10.0), None).await;
        ctx.progress(1.0, Some(10.0), None).await; // changes nothing
        ctx.progress(1.0, Some(20.0), None).await; // only the total
        ctx.progress(f64::NAN, Some(30.0), None).await; // ignored
        ctx.progress(0.5, Some(5.0), Some("halfway".into())).await; // clamped; the message counts
        ctx.progress(0.5, None, None).await; // changes nothing
        Outcome::Result {
            value: json!({"done": true}),
            is_error: false,
        }
    }
}

#[tokio::test]
async fn progress_events_go_out_for_every_visible_change_and_only_then() {
    let e = Engine::builder(Arc::new(MemoryStore::new()), EngineConfig::default())
        .handler("reports", Arc::new(Reports), false)
        .build();
    let mut feed = e.notifier().subscribe_all();
    let s = e.submit(NewTask::new("reports", json!({}))).await.unwrap();
    let mut seen = Vec::new();
    loop {
        match feed.recv().await.unwrap() {
            TaskEvent::Progress { task, message, .. } if task.id == s.record.id => seen.push((
                task.progress,
                task.progress_total,
                task.progress_message.clone(),
                message,
            )),
            TaskEvent::Changed(t) if t.id == s.record.id && t.status.is_terminal() => {
                assert_eq!(t.progress, Some(1.0));
                assert_eq!(t.progress_total, Some(20.0));
                assert_eq!(t.progress_message, None, "cleared on completion");
                break;
            }
            _ => {}
        }
    }
    let halfway = Some("halfway".to_string());
    assert_eq!(
        seen,
        [
            (Some(1.0), Some(10.0), None, None),
            (Some(1.0), Some(20.0), None, None),
            (Some(1.0), Some(20.0), halfway.clone(), halfway),
        ]
    );
}

#[tokio::test]
async fn retention_after_finish_bounds_every_task_that_has_it() {
    let e = engine(Arc::new(MemoryStore::new()), Default::default());
    // Finished at creation: kept for the retention from now, not forever.
    let mut new = NewTask::new("long", json!({}));
    new.retain_after_finish_ms = Some(7_000);
    let outcome = Outcome::Result {
        value: json!({"content": []}),
        is_error: true,
    };
    let done = e.submit_finished(new, outcome).await.unwrap().record;
    // Stored working, then finished (so its finish makes its events): from that finish.
    let finished = done.finished_at.unwrap();
    assert!(finished >= done.created_at && finished - done.created_at < 5_000);
    assert_eq!(done.expires_at(), Some(finished + 7_000));
    // Still running: the ordinary ttl bounds how long it may wait for input until it finishes.
    let mut new = NewTask::new("long", json!({}));
    new.retain_after_finish_ms = Some(7_000);
    let running = e.submit(new).await.unwrap().record;
    assert_eq!(running.ttl_ms, e.config().grant_ttl(None));
    let cancelled = e.cancel(&running.id, None).await.unwrap();
    assert_eq!(
        cancelled.expires_at(),
        cancelled.finished_at.map(|f| f + 7_000),
        "from when it finished"
    );
}

#[tokio::test]
async fn a_running_task_keeps_its_lease_ahead_of_the_clock() {
    let store = Arc::new(MemoryStore::new());
    let config = EngineConfig {
        lease_ms: 300,
        ..EngineConfig::default()
    };
    let e = Engine::builder(store.clone(), config)
        .handler(
            "long",
            Arc::new(Sleepy {
                ms: 900,
                obey_cancel: true,
            }),
            false,
        )
        .build();
    e.start().await.unwrap();
    let s = e.submit(NewTask::new("long", json!({}))).await.unwrap();
    // Three leases' worth later the task still runs, and its lease reaches past now.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let Lookup::Found(t) = store.get(&s.record.id).await.unwrap() else {
        panic!("task gone")
    };
    assert_eq!(t.status, TaskStatus::Working);
    let now = mcp_tasks_engine::now_ms();
    assert!(
        t.lease_until.is_some_and(|u| u > now),
        "lease {:?} expired before {now}",
        t.lease_until
    );
    e.shutdown();
}

/// Saves where it is on its first run and waits; a run that finds a checkpoint finishes with it.
struct Resumable;

#[async_trait]
impl TaskHandler for Resumable {
    async fn run(&self, ctx: TaskContext, _args: std::sync::Arc<Value>) -> Outcome {
        match ctx.checkpoint() {
            Some(saved) => Outcome::Result {
                value: json!({"content": [], "resumedFrom": saved}),
                is_error: false,
            },
            None => {
                ctx.save_checkpoint(json!({"remote": "job-7"}))
                    .await
                    .unwrap();
                ctx.cancelled().await;
                WireRules.failure("stopped".into())
            }
        }
    }
}

#[tokio::test]
async fn a_task_with_a_checkpoint_is_resumed_from_it_after_a_crash() {
    let store: Arc<dyn TaskStore> = Arc::new(MemoryStore::new());
    let start = || {
        Engine::builder(store.clone(), EngineConfig::default())
            .outcome_rules(Arc::new(WireRules))
            .handler("resumable", Arc::new(Resumable), false)
            .build()
    };
    let first = start();
    first.start().await.unwrap();
    let id = first
        .submit(NewTask::new("resumable", json!({})))
        .await
        .unwrap()
        .record
        .id;
    let saved = async {
        loop {
            if let Lookup::Found(t) = store.get(&id).await.unwrap() {
                if t.checkpoint.is_some() {
                    return t;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let t = tokio::time::timeout(Duration::from_secs(5), saved)
        .await
        .expect("the checkpoint was saved");
    assert_eq!(t.checkpoint, Some(json!({"remote": "job-7"})));
    // The node goes away with the task unfinished; the next one resumes it (the tool is not
    // retry-safe: without the checkpoint the task would fail as interrupted).
    first.shutdown();
    let second = start();
    assert_eq!(second.start().await.unwrap(), 1);
    let done = second.wait_terminal(&id).await.unwrap();
    assert_eq!(done.status, TaskStatus::Completed, "{done:?}");
    assert_eq!(done.attempt, 2);
    let Some(Outcome::Result { value, .. }) = &done.outcome else {
        panic!("{done:?}")
    };
    assert_eq!(value["resumedFrom"], json!({"remote": "job-7"}));
    // A finished task keeps nothing to resume.
    assert_eq!(done.checkpoint, None);
    second.shutdown();
}

#[tokio::test]
async fn a_sweep_removes_the_sessions_idle_past_their_limit() {
    let store = Arc::new(MemoryStore::new());
    let now = mcp_tasks_engine::now_ms();
    let session = |id: &str, last_seen: u64| mcp_tasks_engine::store::SessionRecord {
        id: id.into(),
        owner: "alice".into(),
        data: json!({}),
        created_at: last_seen,
        last_seen,
        idle_ms: None,
    };
    store
        .put_session(&session("idle", now - 120_000))
        .await
        .unwrap();
    store.put_session(&session("fresh", now)).await.unwrap();
    let config = EngineConfig {
        session_idle_ms: 60_000,
        ..EngineConfig::default()
    };
    let engine = Engine::builder(store.clone(), config)
        .outcome_rules(Arc::new(WireRules))
        .build();
    engine.sweep().await.unwrap();
    assert_eq!(
        store.get_session("idle").await.unwrap(),
        None,
        "idle for 2 min"
    );
    assert!(store.get_session("fresh").await.unwrap().is_some());
}
