//! Store errors inside a run, sorted: a permanent one (the backend refuses the data itself) fails
//! the task at once saying why; a transient one is retried while the run holds its lease.

use async_trait::async_trait;
use mcp_tasks_engine::store::postgres::PostgresStore;
use mcp_tasks_engine::store::StoreError;
use mcp_tasks_engine::{
    Engine, EngineConfig, NewTask, Outcome, OutcomeRules, PlainRules, TaskContext, TaskHandler,
    TaskStatus,
};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

fn test_url() -> String {
    std::env::var("MCP_TASKS_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// Reports progress with a NUL character in its message, then returns a tool error whose text
/// (the task's status message) has one too: PostgreSQL's text cannot hold it.
struct SaysNul;

#[async_trait]
impl TaskHandler for SaysNul {
    async fn run(&self, ctx: TaskContext, _args: Arc<Value>) -> Outcome {
        ctx.progress(1.0, Some(2.0), Some("half\u{0}way".into()))
            .await;
        Outcome::Result {
            value: json!({"content": [{"type": "text", "text": "before\u{0}after"}]}),
            is_error: true,
        }
    }
}

/// The first text of a tool error as the task's status message, as the server's rules draw it.
struct FirstText;

impl OutcomeRules for FirstText {
    fn failure(&self, message: String) -> Outcome {
        PlainRules.failure(message)
    }
    fn error_summary(&self, result: &Value) -> Option<String> {
        result["content"][0]["text"].as_str().map(str::to_string)
    }
}

/// A step whose name PostgreSQL cannot store: a permanent error, given to the handler at once.
struct NulStep;

#[async_trait]
impl TaskHandler for NulStep {
    async fn run(&self, ctx: TaskContext, _args: Arc<Value>) -> Outcome {
        match ctx.step("bad\u{0}name", || async { 1 }).await {
            Ok(_) => Outcome::Result {
                value: json!({"content": []}),
                is_error: false,
            },
            Err(e) => Outcome::Error {
                code: -32603,
                message: e.to_string(),
                data: None,
            },
        }
    }
}

/// An output with a NUL character (a tool's error text, a progress message) is made storable: the
/// task ends, its messages with U+FFFD for the NUL and its outcome whole. Before, PostgreSQL
/// refused the status message, the finish retried it forever and the task stayed `working`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_with_a_nul_byte_ends_its_task_on_postgresql() {
    let schema = format!("t_nul_{}", &mcp_tasks_engine::random_id()[..12]);
    let store = Arc::new(
        PostgresStore::open_in_schema(&test_url(), &schema)
            .await
            .unwrap(),
    );
    let engine = Engine::builder(store.clone(), EngineConfig::default())
        .handler("nul", Arc::new(SaysNul), false)
        .handler("nul_step", Arc::new(NulStep), false)
        .outcome_rules(Arc::new(FirstText))
        .build();
    engine.start().await.unwrap();
    let submit = |tool: &'static str| {
        let engine = engine.clone();
        async move {
            let id = engine
                .submit(NewTask::new(tool, json!({})))
                .await
                .unwrap()
                .record
                .id;
            tokio::time::timeout(Duration::from_secs(10), engine.wait_terminal(&id))
                .await
                .expect("the task ends within 10 s")
                .unwrap();
            // As stored, not as published.
            match engine.store().get(&id).await.unwrap() {
                mcp_tasks_engine::store::Lookup::Found(t) => t,
                other => panic!("{other:?}"),
            }
        }
    };
    let done = submit("nul").await;
    assert_eq!(done.status, TaskStatus::Completed, "{done:?}");
    assert_eq!(done.status_message.as_deref(), Some("before\u{FFFD}after"));
    let Some(Outcome::Result {
        value,
        is_error: true,
    }) = &done.outcome
    else {
        panic!("{done:?}")
    };
    assert_eq!(
        value["content"][0]["text"], "before\u{0}after",
        "the outcome is whole"
    );
    assert_eq!(done.progress, Some(1.0));
    // The operator's counts read it (PostgreSQL's JSON types refuse its NUL escape).
    let counts = engine.store().count_finished(0).await.unwrap();
    assert_eq!(counts.completed_with_error, 1, "{counts:?}");

    // A permanent error in a step write reaches the handler at once (not retried until the lease
    // runs out), and the task fails saying what the store refused.
    let started = std::time::Instant::now();
    let done = submit("nul_step").await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(done.status, TaskStatus::Failed, "{done:?}");
    let message = done.status_message.unwrap_or_default();
    assert!(message.contains("the step journal failed"), "{message}");
    engine.shutdown();
    if let Ok((client, conn)) = tokio_postgres::connect(&test_url(), tokio_postgres::NoTls).await {
        tokio::spawn(conn);
        let _ = client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .await;
    }
}

#[test]
fn refusals_and_unserializable_data_are_permanent_and_a_lost_backend_is_not() {
    assert!(!StoreError::message("the writer thread is gone").is_permanent());
    let json = serde_json::from_str::<Value>("{").unwrap_err();
    assert!(StoreError::backend("encode a record", json).is_permanent());
    let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
    assert!(!StoreError::backend("update a task", io).is_permanent());
    assert!(StoreError::TooManyActive { active: 1, max: 1 }.is_permanent());
}
