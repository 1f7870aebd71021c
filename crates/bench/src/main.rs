//! Load generator for mcp-tasks: creates N tasks of a no-op tool over Streamable HTTP with C concurrent
//! clients and reports throughput and latency percentiles of `tools/call` → `CreateTaskResult` and of
//! `tasks/get`. By default it runs the same load against the SQLite store and the memory store in one
//! run, side by side, so the figures can be compared as ratios on a noisy machine.
//!
//! ```text
//! cargo run --release -p mcp-tasks-bench -- --tasks 4000 --clients 32
//! ```

use anyhow::{bail, Context, Result};
use clap::Parser;
use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_engine::store::sqlite::SqliteStore;
use mcp_tasks_engine::store::TaskStore;
use mcp_tasks_engine::EngineConfig;
use mcp_tasks_protocol::mcp_2025::TaskSupport;
use mcp_tasks_server::tool::{handler_fn, text_result, Tool};
use mcp_tasks_server::{Server, ServerConfig};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(about = "Task creation / polling benchmark for mcp-tasks over HTTP on 127.0.0.1")]
struct Args {
    /// Total tasks to create.
    #[arg(long, default_value_t = 2000)]
    tasks: usize,
    /// Concurrent clients (each with its own session).
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Stores to compare: sqlite, memory (comma-separated).
    #[arg(long, default_value = "sqlite,memory")]
    stores: String,
    /// Stop after this many seconds per store, whatever is done by then.
    #[arg(long, default_value_t = 120)]
    max_seconds: u64,
}

struct Sample {
    create: Vec<Duration>,
    get: Vec<Duration>,
    elapsed: Duration,
    errors: usize,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn start_server(store: Arc<dyn TaskStore>) -> Result<(Arc<Server>, String)> {
    let noop = Tool::new(
        "noop",
        handler_fn(|_ctx, _args| async move { text_result("ok", false) }),
    )
    .description("Does nothing, at once.")
    .task_support(TaskSupport::Optional);
    let engine = EngineConfig::default();
    // Measure the server, not its per-principal limits: the load comes from anonymous callers.
    let mut config = ServerConfig::default();
    config.auth.anonymous_limits = mcp_tasks_server::auth::Limits {
        max_running_tasks: 1_000_000,
        calls_per_minute: None,
    };
    let server = Server::builder(store, engine, config).tool(noop)?.build();
    server.start().await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/mcp", listener.local_addr()?);
    let s = server.clone();
    tokio::spawn(async move {
        mcp_tasks_server::http::serve_listener(s, listener, std::future::pending()).await
    });
    Ok((server, url))
}

async fn rpc(
    http: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    id: u64,
    method: &str,
    params: Value,
) -> Result<(Value, Option<String>)> {
    let mut rb = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    if let Some(s) = session {
        rb = rb
            .header("mcp-session-id", s)
            .header("mcp-protocol-version", "2025-11-25");
    }
    let resp = rb.send().await?;
    let sid = resp
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body: Value = resp
        .json()
        .await
        .context("reply is not JSON (the no-op tool should answer within the SSE threshold)")?;
    if body.get("error").is_some() {
        bail!("{method} failed: {}", body["error"]);
    }
    Ok((body["result"].clone(), sid))
}

async fn client(
    url: String,
    next: Arc<AtomicUsize>,
    total: usize,
    deadline: Instant,
) -> Result<Sample> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(4)
        .build()?;
    let init = json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}});
    let (_, sid) = rpc(&http, &url, None, 0, "initialize", init).await?;
    let sid = sid.context("no session id")?;
    let mut s = Sample {
        create: Vec::new(),
        get: Vec::new(),
        elapsed: Duration::ZERO,
        errors: 0,
    };
    let mut id = 1;
    while next.fetch_add(1, Ordering::Relaxed) < total && Instant::now() < deadline {
        id += 2;
        let t0 = Instant::now();
        let created = rpc(
            &http,
            &url,
            Some(&sid),
            id,
            "tools/call",
            json!({"name": "noop", "arguments": {}, "task": {}}),
        )
        .await;
        let (created, _) = match created {
            Ok(c) => c,
            Err(_) => {
                s.errors += 1;
                continue;
            }
        };
        s.create.push(t0.elapsed());
        let task_id = created["task"]["taskId"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let t1 = Instant::now();
        match rpc(
            &http,
            &url,
            Some(&sid),
            id + 1,
            "tasks/get",
            json!({"taskId": task_id}),
        )
        .await
        {
            Ok(_) => s.get.push(t1.elapsed()),
            Err(_) => s.errors += 1,
        }
    }
    Ok(s)
}

async fn run(store_name: &str, args: &Args) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let store: Arc<dyn TaskStore> = match store_name {
        "sqlite" => Arc::new(SqliteStore::open(dir.path().join("bench.db"))?),
        "memory" => Arc::new(MemoryStore::new()),
        other => bail!("unknown store {other:?} (use sqlite or memory)"),
    };
    let (server, url) = start_server(store).await?;
    let next = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs(args.max_seconds);
    let started = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..args.clients {
        handles.push(tokio::spawn(client(
            url.clone(),
            next.clone(),
            args.tasks,
            deadline,
        )));
    }
    let mut all = Sample {
        create: Vec::new(),
        get: Vec::new(),
        elapsed: Duration::ZERO,
        errors: 0,
    };
    for h in handles {
        let s = h.await??;
        all.create.extend(s.create);
        all.get.extend(s.get);
        all.errors += s.errors;
    }
    all.elapsed = started.elapsed();
    server.engine().shutdown();
    all.create.sort();
    all.get.sort();
    let rate = all.create.len() as f64 / all.elapsed.as_secs_f64();
    println!(
        "{:<8} {:>7} {:>8} {:>10.0} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>7}",
        store_name,
        all.create.len(),
        args.clients,
        rate,
        ms(percentile(&all.create, 0.50)),
        ms(percentile(&all.create, 0.99)),
        ms(percentile(&all.get, 0.50)),
        ms(percentile(&all.get, 0.99)),
        all.errors
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    println!(
        "mcp-tasks benchmark: {} tasks of a no-op tool, {} concurrent HTTP clients on 127.0.0.1 (each task: tools/call with task, then tasks/get)",
        args.tasks, args.clients
    );
    println!(
        "{:<8} {:>7} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7}",
        "store",
        "tasks",
        "clients",
        "tasks/s",
        "create p50",
        "create p99",
        "get p50",
        "get p99",
        "errors"
    );
    println!(
        "{:<8} {:>7} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7}",
        "", "", "", "", "ms", "ms", "ms", "ms", ""
    );
    for store in args
        .stores
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        run(store, &args).await?;
    }
    Ok(())
}
