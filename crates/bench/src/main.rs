//! The mcp-tasks benchmark suite: our server (SQLite and memory stores, both wires), the peer servers
//! under `bench/peers/` (the TypeScript SDK v1, rmcp 3 and turul 0.4.5) and a ceiling (an HTTP
//! server that answers every request with a canned reply), measured one after another in one run on
//! the same harness, in three modes (create, get, e2e) with throughput, p50/p90/p99 and server
//! memory. Writes `docs/bench/README.md` and PNG charts.
//!
//! ```text
//! cargo run --release -p mcp-tasks-bench                 # the whole suite
//! cargo run --release -p mcp-tasks-bench -- --only ours  # our server only
//! ```

mod credentials;
mod disk;
mod events;
mod load;
mod pg_cost;
mod pg_tap;
mod report;
mod scale;
mod serve;
mod soak;
mod steps;
mod targets;
mod wire;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::time::Duration;

use crate::load::Mode;

/// The same allocator as the `mcp-tasks` binary, so the servers measured here are the ones users run.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use crate::wire::Wire;

#[derive(Parser, Debug)]
#[command(about = "Benchmark suite for mcp-tasks and peer MCP task servers, on 127.0.0.1")]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    suite: SuiteArgs,
}

#[derive(clap::Args, Debug)]
struct SuiteArgs {
    /// Concurrent clients.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Operations per mode and target.
    #[arg(long, default_value_t = 3000)]
    ops: usize,
    /// Longest a mode may run against one target, in seconds.
    #[arg(long, default_value_t = 60)]
    max_seconds: u64,
    /// Which targets: all, ours (our server only), or a comma-separated list of sqlite-2025,
    /// sqlite-2026, memory-2025, memory-2026, postgres-2025, postgres-2026 (on MCP_TASKS_TEST_PG, else
    /// 127.0.0.1:5432/test, a fresh schema each), postgres3-2025, postgres3-2026 (three replicas on
    /// one schema; every request goes to the next replica), ceiling, ts-sdk-v1, rmcp,
    /// turul-memory-2025, turul-sqlite-2025, turul-memory-2026, turul-sqlite-2026 (turul 0.4.5 on
    /// its in-memory or SQLite task store, one wire each).
    #[arg(long, default_value = "all")]
    only: String,
    /// Where the report goes.
    #[arg(long, default_value = "docs/bench")]
    out: std::path::PathBuf,
    /// Also run the scenarios at scale (1,000,000 stored tasks, 100,000 unfinished, restart, blocked
    /// results); several minutes.
    #[arg(long)]
    scale: bool,
    /// Tasks stored for the large case of --scale.
    #[arg(long, default_value_t = 1_000_000)]
    scale_stored: usize,
    /// Unfinished tasks for --scale.
    #[arg(long, default_value_t = 100_000)]
    scale_unfinished: usize,
    /// Which scenarios of --scale: all, or a comma-separated list of flat (rates with many tasks
    /// stored), unfinished (RSS and restart with unfinished tasks), blocked (blocked results).
    #[arg(long, default_value = "all")]
    scale_parts: String,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve our server with a no-op task tool (run by the suite).
    ServeOurs {
        /// `memory:`, `sqlite://PATH` (the file is started afresh unless --keep) or `postgres://…`.
        #[arg(long)]
        store: String,
        /// Keep the SQLite file (a restart).
        #[arg(long)]
        keep: bool,
        /// Store this many finished tasks before serving.
        #[arg(long, default_value_t = 0)]
        prefill: usize,
        /// PostgreSQL schema to use (replicas share one); default: a fresh one.
        #[arg(long)]
        pg_schema: Option<String>,
        /// Log to standard error as `mcp-tasks serve` does, at this level or `RUST_LOG`-style
        /// filter (e.g. `info`, its default); without it the server installs no subscriber.
        #[arg(long)]
        log: Option<String>,
        /// Also take the load's API key and OAuth access tokens (`drive --credential`).
        #[arg(long)]
        auth: bool,
    },
    /// Serve the ceiling: a canned reply to every request (run by the suite).
    Ceiling,
    /// Run one mode against a server that is already running (e.g. under a profiler).
    Drive {
        /// Its MCP endpoint.
        #[arg(long)]
        url: String,
        /// 2025 or 2026.
        #[arg(long, default_value = "2025")]
        wire: String,
        /// create, get, e2e, hold (tasks of the `wait` tool, left unfinished), or keyed (creates,
        /// each with an idempotency key of its own).
        #[arg(long, default_value = "create")]
        mode: String,
        /// Concurrent clients.
        #[arg(long, default_value_t = 16)]
        clients: usize,
        /// Operations.
        #[arg(long, default_value_t = 3000)]
        ops: usize,
        /// What each client presents: none, key (an API key) or token (an OAuth access token of
        /// its own user); key and token need `serve-ours --auth`.
        #[arg(long, default_value = "none")]
        credential: String,
    },
    /// What a step of the step journal costs: steps per second on each store, many tasks at once,
    /// and one step's time for one task alone, beside the same work without the journal.
    Steps {
        /// Stores: memory, sqlite, postgres (MCP_TASKS_TEST_PG, else 127.0.0.1:5432/test, a
        /// fresh schema), comma-separated.
        #[arg(long, default_value = "memory,sqlite,postgres")]
        stores: String,
        /// Tasks at once.
        #[arg(long, default_value_t = 32)]
        tasks: usize,
        /// Steps per task.
        #[arg(long, default_value_t = 200)]
        steps: u64,
    },
    /// What one task costs PostgreSQL: statements, round trips and commits (read from the protocol
    /// by a relay in front of the database), transactions and WAL flushes (PostgreSQL's counters)
    /// and PostgreSQL's CPU time, for one replica and several, beside a pgbench one-row insert; and
    /// the throughput of several replicas against one. Uses MCP_TASKS_TEST_PG, else
    /// 127.0.0.1:5432/test (fresh schemas, dropped at the end).
    PgCost {
        /// Tasks run end to end per replica count (and pgbench transactions).
        #[arg(long, default_value_t = 2000)]
        tasks: usize,
        /// Concurrent clients (and pgbench connections).
        #[arg(long, default_value_t = 8)]
        clients: usize,
        /// 2025 or 2026 (where tasks/get carries the result, so a task's life is create, finish,
        /// get).
        #[arg(long, default_value = "2026")]
        wire: String,
        /// Replica counts, comma-separated.
        #[arg(long, default_value = "1,3")]
        replicas: String,
        /// Operations per throughput run (create, then e2e) for each replica count; 0 for none.
        #[arg(long, default_value_t = 3000)]
        throughput_ops: usize,
        /// Rounds of throughput runs; the best of each replica count is reported.
        #[arg(long, default_value_t = 2)]
        rounds: usize,
        /// Where postgres-cost.md and postgres-cost.json go.
        #[arg(long, default_value = "docs/bench")]
        out: std::path::PathBuf,
        /// Print the report only.
        #[arg(long)]
        no_write: bool,
    },
    /// What a subscribed task costs (MCP Events): tasks end to end without a subscription and with
    /// one `task.finished` subscription per task whose event goes to a receiver on loopback, side
    /// by side on fresh servers: tasks/s and server CPU per task.
    Events {
        /// Stores: memory, sqlite, postgres, comma-separated.
        #[arg(long, default_value = "sqlite,postgres")]
        stores: String,
        /// Tasks per run.
        #[arg(long, default_value_t = 2000)]
        tasks: usize,
        /// Concurrent clients.
        #[arg(long, default_value_t = 8)]
        clients: usize,
        /// Rounds (each runs both modes); medians of the ratios are reported.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// Kill `mcp-tasks serve --demo` with SIGKILL again and again under a mixed load, then read
    /// every task it acknowledged: lost and stuck must be 0 (exit 1 otherwise).
    Soak {
        /// Stores: sqlite, postgres (MCP_TASKS_TEST_PG, else 127.0.0.1:5432/test, a fresh schema),
        /// comma-separated.
        #[arg(long, default_value = "sqlite,postgres")]
        stores: String,
        /// Kill -9 cycles per store.
        #[arg(long, default_value_t = 5)]
        cycles: usize,
        /// Seconds per cycle (the kill comes between a third of it and its end).
        #[arg(long, default_value_t = 6)]
        cycle_secs: u64,
        /// Concurrent clients, half on each wire.
        #[arg(long, default_value_t = 8)]
        clients: usize,
        /// Longest wait, after the last restart, for every task to finish, in seconds.
        #[arg(long, default_value_t = 60)]
        settle_secs: u64,
        /// The `mcp-tasks` binary [default: the one next to this binary].
        #[arg(long)]
        server: Option<std::path::PathBuf>,
    },
}

fn main() -> Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Runtime::new()?;
    match args.command {
        Some(Command::ServeOurs {
            store,
            keep,
            prefill,
            pg_schema,
            log,
            auth,
        }) => {
            if let Some(filter) = log {
                // As `mcp-tasks serve` logs: without the span held for each task's whole run.
                let off = mcp_tasks_engine::trace::RUN_SPAN_TARGET;
                tracing_subscriber::fmt()
                    .with_env_filter(tracing_subscriber::EnvFilter::new(format!(
                        "{filter},{off}=off"
                    )))
                    .with_writer(std::io::stderr)
                    .init();
            }
            runtime.block_on(serve::ours(&store, keep, prefill, pg_schema, auth))
        }
        Some(Command::Ceiling) => runtime.block_on(serve::ceiling()),
        Some(Command::Events {
            stores,
            tasks,
            clients,
            rounds,
        }) => runtime.block_on(events::run(&stores, tasks, clients, rounds)),
        Some(Command::Drive {
            url,
            wire,
            mode,
            clients,
            ops,
            credential,
        }) => runtime.block_on(drive(&url, &wire, &mode, clients, ops, &credential)),
        Some(Command::Soak {
            stores,
            cycles,
            cycle_secs,
            clients,
            settle_secs,
            server,
        }) => {
            let server = match server {
                Some(s) => s,
                None => std::env::current_exe()?.with_file_name("mcp-tasks"),
            };
            if !server.exists() {
                anyhow::bail!(
                    "{} is missing: build it (cargo build -p mcp-tasks) or pass --server",
                    server.display()
                );
            }
            runtime.block_on(soak::run(soak::SoakArgs {
                server,
                stores: stores.split(',').map(|s| s.trim().to_string()).collect(),
                cycles: cycles.max(1),
                cycle: Duration::from_secs(cycle_secs.max(1)),
                clients: clients.max(1),
                settle: Duration::from_secs(settle_secs),
            }))
        }
        Some(Command::Steps {
            stores,
            tasks,
            steps,
        }) => {
            let stores: Vec<String> = stores.split(',').map(|s| s.trim().to_string()).collect();
            runtime.block_on(steps::run(&stores, tasks.max(1), steps.max(1)))
        }
        Some(Command::PgCost {
            tasks,
            clients,
            wire,
            replicas,
            throughput_ops,
            rounds,
            out,
            no_write,
        }) => {
            let replicas = replicas
                .split(',')
                .map(|r| r.trim().parse::<usize>())
                .collect::<Result<Vec<_>, _>>()
                .context("--replicas is a comma-separated list of numbers, e.g. 1,3")?;
            runtime.block_on(pg_cost::run(pg_cost::CostArgs {
                tasks: tasks.max(1),
                clients: clients.max(1),
                wire: match wire.as_str() {
                    "2025" => Wire::Session2025,
                    "2026" => Wire::Stateless2026,
                    other => anyhow::bail!("--wire is 2025 or 2026, not {other}"),
                },
                replicas: replicas.into_iter().map(|r| r.max(1)).collect(),
                throughput_ops,
                rounds,
                out: (!no_write).then_some(out),
            }))
        }
        None => runtime.block_on(suite(args.suite)),
    }
}

async fn drive(
    url: &str,
    wire: &str,
    mode: &str,
    clients: usize,
    ops: usize,
    credential: &str,
) -> Result<()> {
    let credential = credentials::Credential::parse(credential)?;
    let wire = match wire {
        "2026" => Wire::Stateless2026,
        _ => Wire::Session2025,
    };
    let mode = Mode::ALL
        .into_iter()
        .chain([Mode::Hold, Mode::Keyed])
        .find(|m| m.label() == mode)
        .context("mode is create, get, e2e, hold or keyed")?;
    let f = load::run(
        url,
        wire,
        mode,
        clients,
        ops,
        64,
        Duration::from_secs(600),
        credential,
    )
    .await?;
    println!(
        "{} {}: {} ops, {:.0} ops/s, p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms, {} errors{}",
        wire.label(),
        mode.label(),
        f.ops,
        f.rate,
        f.p50,
        f.p99,
        f.p999,
        f.max,
        f.errors,
        if mode == Mode::E2e {
            format!(", {:.2} polls/task", f.polls)
        } else {
            String::new()
        }
    );
    Ok(())
}

/// Whether target `key` is in the `--only` list (`all`, and `ours` for every target of our server).
fn wanted(only: &str, key: &str) -> bool {
    let ours = !matches!(key, "ceiling" | "ts-sdk-v1" | "rmcp") && !key.starts_with("turul-");
    only.split(',')
        .map(str::trim)
        .any(|k| k == "all" || k == key || (k == "ours" && ours))
}

async fn suite(args: SuiteArgs) -> Result<()> {
    let scratch = tempfile::tempdir()?;
    let mut list = Vec::new();
    for (store, wire, key, replicas) in [
        ("sqlite", Wire::Session2025, "sqlite-2025", 1),
        ("sqlite", Wire::Stateless2026, "sqlite-2026", 1),
        ("memory", Wire::Session2025, "memory-2025", 1),
        ("memory", Wire::Stateless2026, "memory-2026", 1),
        ("postgres", Wire::Session2025, "postgres-2025", 1),
        ("postgres", Wire::Stateless2026, "postgres-2026", 1),
        ("postgres", Wire::Session2025, "postgres3-2025", 3),
        ("postgres", Wire::Stateless2026, "postgres3-2026", 3),
    ] {
        if wanted(&args.only, key) {
            if store == "postgres" && !targets::postgres_reachable().await {
                continue;
            }
            list.push(targets::ours(store, wire, scratch.path(), replicas)?);
        }
    }
    if wanted(&args.only, "ceiling") {
        list.push(targets::ceiling()?);
    }
    let (peers, versions) = targets::peers(|key| wanted(&args.only, key), scratch.path())?;
    list.extend(peers);
    // What building the peers wrote goes to disk now, not under the first target's commits.
    scale::settle();
    // In the directory the SQLite files go to, before any server runs.
    let dir = scratch.path().to_path_buf();
    let commit = tokio::task::spawn_blocking(move || disk::measure(&dir, 2000)).await??;
    eprintln!(
        "a durable commit on this machine: p50 {:.0} µs, {:.0} µs of CPU",
        commit.p50_us, commit.cpu_us
    );
    let mut rows = Vec::new();
    let limit = Duration::from_secs(args.max_seconds);
    for target in &list {
        eprintln!("== {}", target.name);
        let running = target.start()?;
        for mode in Mode::ALL {
            let cpu_before = running.cpu_seconds();
            let mut figures = load::run(
                &running.url,
                target.wire,
                mode,
                args.clients,
                args.ops,
                64,
                limit,
                credentials::Credential::None,
            )
            .await
            .with_context(|| format!("{} {}", target.name, mode.label()))?;
            // The get mode's untimed set-up (each client's own finished tasks) is counted too; it is
            // 64 tasks a client against the mode's thousands of reads.
            figures.cpu_us = (running.cpu_seconds() - cpu_before) * 1e6 / figures.ops.max(1) as f64;
            eprintln!(
                "   {:<6} {:>8.0} ops/s  p50 {:.2} ms  p99 {:.2} ms  errors {}  server CPU {:.0} µs/op{}",
                mode.label(),
                figures.rate,
                figures.p50,
                figures.p99,
                figures.errors,
                figures.cpu_us,
                if mode == Mode::E2e {
                    format!("  polls/task {:.2}", figures.polls)
                } else {
                    String::new()
                }
            );
            rows.push(report::Row {
                target: target.name.clone(),
                wire: target.wire.label(),
                mode,
                figures,
                rss: running.rss_mib(),
            });
        }
    }
    targets::drop_pg_schemas(&list).await;
    std::fs::create_dir_all(&args.out)?;
    let mut md = report::markdown(&rows, args.clients, args.ops, &versions, &commit);
    if args.scale {
        md.push_str(
            &scale::all(
                scratch.path(),
                args.scale_stored,
                args.scale_unfinished,
                &args.scale_parts,
            )
            .await?,
        );
    }
    std::fs::write(args.out.join("README.md"), &md)?;
    report::charts(&rows, &args.out)?;
    println!("{md}");
    eprintln!("wrote {}", args.out.join("README.md").display());
    Ok(())
}
