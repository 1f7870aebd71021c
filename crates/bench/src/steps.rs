//! What one step of the step journal costs (`mcp-tasks-bench steps`): tasks whose handler runs
//! `steps` journaled steps (each body returns a small JSON object, at once), on each store, against
//! the same handler computing the same values without the journal. Prints steps per second (many
//! tasks at once: the store's throughput) and the time of one step (one task alone: its latency).

use anyhow::{Context, Result};
use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_engine::store::postgres::PostgresStore;
use mcp_tasks_engine::store::sqlite::SqliteStore;
use mcp_tasks_engine::store::TaskStore;
use mcp_tasks_engine::{
    Engine, EngineConfig, NewTask, Outcome, TaskContext, TaskHandler, TaskStatus,
};
use mcp_tasks_server::tool::handler_fn;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A handler that runs `steps` steps (journaled or not), then finishes.
fn stepper(journaled: bool) -> Arc<dyn TaskHandler> {
    handler_fn(move |ctx, args| run_steps(ctx, args, journaled))
}

async fn run_steps(ctx: TaskContext, args: Value, journaled: bool) -> Outcome {
    {
        let steps = args["steps"].as_u64().unwrap_or(1);
        let mut sum = 0u64;
        for i in 0..steps {
            let out = if journaled {
                match ctx
                    .step(&format!("step {i}"), || async move { json!({"i": i}) })
                    .await
                {
                    Ok(v) => v,
                    Err(e) => {
                        return Outcome::Error {
                            code: -32603,
                            message: e.to_string(),
                            data: None,
                        }
                    }
                }
            } else {
                json!({"i": i})
            };
            sum += out["i"].as_u64().unwrap_or(0);
        }
        Outcome::Result {
            value: json!({"sum": sum}),
            is_error: false,
        }
    }
}

/// One measurement: `tasks` tasks of `steps` steps each, at once.
async fn measure(
    store: Arc<dyn TaskStore>,
    journaled: bool,
    tasks: usize,
    steps: u64,
) -> Result<Duration> {
    let engine = Engine::builder(store, EngineConfig::default())
        .handler("stepper", stepper(journaled), true)
        .build();
    let started = Instant::now();
    let mut ids = Vec::with_capacity(tasks);
    for _ in 0..tasks {
        let s = engine
            .submit(NewTask::new("stepper", json!({"steps": steps})))
            .await?;
        ids.push(s.record.id);
    }
    for id in ids {
        let t = engine.wait_terminal(&id).await?;
        anyhow::ensure!(t.status == TaskStatus::Completed, "task {id} ended {:?}", t);
    }
    let took = started.elapsed();
    engine.shutdown();
    Ok(took)
}

/// A fresh store of kind `name` (a file in `dir`, a schema of its own), for measurement `tag`.
async fn open_store(name: &str, dir: &std::path::Path, tag: &str) -> Result<Arc<dyn TaskStore>> {
    Ok(match name {
        "memory" => Arc::new(MemoryStore::new()),
        "sqlite" => Arc::new(SqliteStore::open(dir.join(format!("{tag}.db")))?),
        "postgres" => {
            let schema = format!("bench_steps_{tag}_{}", &mcp_tasks_engine::random_id()[..8]);
            Arc::new(
                PostgresStore::open_in_schema(&crate::targets::postgres_url(), &schema)
                    .await
                    .context("open PostgreSQL (MCP_TASKS_TEST_PG)")?,
            )
        }
        other => anyhow::bail!("unknown store {other}: memory, sqlite or postgres"),
    })
}

/// Runs the benchmark on `stores` (memory, sqlite, postgres).
pub async fn run(stores: &[String], tasks: usize, steps: u64) -> Result<()> {
    let scratch = tempfile::tempdir()?;
    println!("store      | steps/s, {tasks} tasks at once | one step alone | without the journal (same work)");
    println!(
        "-----------|------------------------|----------------|--------------------------------"
    );
    for name in stores {
        if name == "postgres" && !crate::targets::postgres_reachable().await {
            continue;
        }
        let total = tasks as u64 * steps;
        let many = measure(
            open_store(name, scratch.path(), "many").await?,
            true,
            tasks,
            steps,
        )
        .await?;
        let alone = measure(
            open_store(name, scratch.path(), "alone").await?,
            true,
            1,
            steps,
        )
        .await?;
        let plain = measure(
            open_store(name, scratch.path(), "plain").await?,
            false,
            tasks,
            steps,
        )
        .await?;
        println!(
            "{name:<10} | {:>22.0} | {:>11.3} ms | {:.3} s for the same {total} values ({:.3} s with steps)",
            total as f64 / many.as_secs_f64(),
            alone.as_secs_f64() * 1_000.0 / steps as f64,
            plain.as_secs_f64(),
            many.as_secs_f64(),
        );
    }
    drop_schemas().await;
    Ok(())
}

/// Drops the schemas this benchmark made.
async fn drop_schemas() {
    let Ok((client, conn)) =
        tokio_postgres::connect(&crate::targets::postgres_url(), tokio_postgres::NoTls).await
    else {
        return;
    };
    tokio::spawn(conn);
    let Ok(rows) = client
        .query(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'bench_steps_%'",
            &[],
        )
        .await
    else {
        return;
    };
    for row in rows {
        let name: String = row.get(0);
        let _ = client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
            .await;
    }
}
