//! The soak: `mcp-tasks serve --demo` killed with SIGKILL again and again under a mixed load, on
//! SQLite and on PostgreSQL, then asked for every task it acknowledged. Lost (acknowledged, then not
//! found) and stuck (found, never finished) must both be 0.
//!
//! A cycle starts the server on the store the previous cycle left, runs the load (clients on both
//! wires creating tasks of varied length, cancelling some, reading some, making plain calls) for a
//! random part of the cycle, and kills the server in the middle of it. After the last cycle the
//! server is started once more and every acknowledged task is read until it is finished, or until
//! the settle time runs out. Loopback only; every wait is bounded.

use anyhow::{bail, Context, Result};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::targets::{postgres_url, Target};
use crate::wire::{Client, Wire};

/// The API key the soak's clients send (its hash is in the server's config).
const KEY: &str = "mcpt_soak-key-for-loopback-only";

/// What the soak is asked to do.
pub struct SoakArgs {
    /// The `mcp-tasks` binary.
    pub server: std::path::PathBuf,
    /// `sqlite`, `postgres`, or both.
    pub stores: Vec<String>,
    /// Kill -9 cycles per store.
    pub cycles: usize,
    /// Length of one cycle; the kill comes between a third of it and all of it.
    pub cycle: Duration,
    /// Concurrent clients (half on each wire).
    pub clients: usize,
    /// Longest wait, after the last restart, for every task to finish.
    pub settle: Duration,
}

/// A task the server acknowledged: its id was in a reply.
#[derive(Clone)]
struct Acked {
    id: String,
    wire: Wire,
}

/// What one store's soak found.
#[derive(Default)]
struct Tally {
    acknowledged: usize,
    found: usize,
    lost: Vec<String>,
    stuck: Vec<String>,
    by_status: BTreeMap<String, usize>,
    kills: usize,
    plain_calls: usize,
    cancels: usize,
}

/// Runs the soak on every store asked for; `Err` when any task was lost or stuck.
pub async fn run(args: SoakArgs) -> Result<()> {
    let mut failed = Vec::new();
    println!(
        "soak: {} cycles of {:?} per store, {} clients, settle up to {:?}",
        args.cycles, args.cycle, args.clients, args.settle
    );
    println!(
        "{:<10} {:>6} {:>12} {:>7} {:>5} {:>6}  statuses",
        "store", "kills", "acknowledged", "found", "lost", "stuck"
    );
    for store in &args.stores {
        let tally = match store.as_str() {
            "sqlite" => {
                let dir = tempfile::tempdir()?;
                let url = format!("sqlite://{}", dir.path().join("soak.db").display());
                soak_store(&args, &url, dir.path()).await?
            }
            "postgres" => {
                let schema = format!("bench_soak_{}", &mcp_tasks_engine::random_id()[..12]);
                let (client, conn) =
                    tokio_postgres::connect(&postgres_url(), tokio_postgres::NoTls)
                        .await
                        .with_context(|| format!("connect to {}", postgres_url()))?;
                tokio::spawn(conn);
                client
                    .batch_execute(&format!("CREATE SCHEMA {schema}"))
                    .await?;
                let base = postgres_url();
                let sep = if base.contains('?') { '&' } else { '?' };
                let url = format!("{base}{sep}options=-c%20search_path%3D{schema}");
                let dir = tempfile::tempdir()?;
                let tally = soak_store(&args, &url, dir.path()).await;
                let _ = client
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                    .await;
                tally?
            }
            other => bail!("unknown store {other:?}: sqlite or postgres"),
        };
        let statuses: Vec<String> = tally
            .by_status
            .iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect();
        println!(
            "{:<10} {:>6} {:>12} {:>7} {:>5} {:>6}  {} (plain calls {}, cancels {})",
            store,
            tally.kills,
            tally.acknowledged,
            tally.found,
            tally.lost.len(),
            tally.stuck.len(),
            statuses.join(", "),
            tally.plain_calls,
            tally.cancels,
        );
        for id in tally.lost.iter().take(5) {
            println!("    lost: {id}");
        }
        for id in tally.stuck.iter().take(5) {
            println!("    stuck: {id}");
        }
        if tally.acknowledged == 0 {
            failed.push(format!(
                "{store}: no task was acknowledged (the load never ran)"
            ));
        }
        if !tally.lost.is_empty() || !tally.stuck.is_empty() {
            failed.push(format!(
                "{store}: {} lost, {} stuck",
                tally.lost.len(),
                tally.stuck.len()
            ));
        }
    }
    if !failed.is_empty() {
        bail!("soak failed: {}", failed.join("; "));
    }
    println!("soak passed: nothing lost, nothing stuck");
    Ok(())
}

/// The server on `store_url`, with short leases (PostgreSQL takes a killed server's tasks over once
/// their lease runs out) and the soak's key.
fn target(args: &SoakArgs, store_url: &str, scratch: &std::path::Path) -> Result<Target> {
    let config = scratch.join("soak.toml");
    let hash = mcp_tasks_server::auth::hash_key(KEY);
    std::fs::write(
        &config,
        format!(
            "[tasks]\nlease_secs = 2\nsweep_interval_secs = 1\n\n\
             [[auth.keys]]\nprincipal = \"soak\"\nsha256 = \"{hash}\"\n\
             max_running_tasks = 1000000\nmax_plain_calls = 1000\n"
        ),
    )?;
    Ok(Target {
        name: "mcp-tasks serve".into(),
        wire: Wire::Session2025,
        command: vec![
            args.server.display().to_string(),
            "serve".into(),
            "--demo".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--store".into(),
            store_url.into(),
            "--config".into(),
            config.display().to_string(),
        ],
        replicas: 1,
    })
}

async fn soak_store(args: &SoakArgs, store_url: &str, scratch: &std::path::Path) -> Result<Tally> {
    let target = target(args, store_url, scratch)?;
    let acked: Arc<Mutex<Vec<Acked>>> = Arc::default();
    let counts: Arc<Mutex<(usize, usize)>> = Arc::default();
    let mut tally = Tally::default();
    let mut rng = Rng::new(0x5eed ^ args.cycles as u64);
    for _ in 0..args.cycles {
        let mut running = target.start()?;
        let stop = tokio_util::sync::CancellationToken::new();
        let workers: Vec<_> = (0..args.clients)
            .map(|i| {
                let wire = if i % 2 == 0 {
                    Wire::Session2025
                } else {
                    Wire::Stateless2026
                };
                let (url, stop, acked, counts) = (
                    running.url.clone(),
                    stop.clone(),
                    acked.clone(),
                    counts.clone(),
                );
                let seed = rng.next();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = stop.cancelled() => {}
                        _ = load(&url, wire, seed, &acked, &counts) => {}
                    }
                })
            })
            .collect();
        let third = args.cycle / 3;
        let at = third + Duration::from_millis(rng.below(args.cycle.as_millis() as u64 * 2 / 3));
        tokio::time::sleep(at).await;
        // SIGKILL while requests are in flight: a crash, not a shutdown.
        running.kill();
        tally.kills += 1;
        stop.cancel();
        for w in workers {
            let _ = w.await;
        }
    }
    let running = target.start()?;
    let acked = acked.lock().map(|a| a.clone()).unwrap_or_default();
    let (plain, cancels) = counts.lock().map(|c| *c).unwrap_or_default();
    tally.plain_calls = plain;
    tally.cancels = cancels;
    tally.acknowledged = acked.len();
    settle(&running.url, &acked, args.settle, &mut tally).await?;
    Ok(tally)
}

/// One client's load until it is stopped: tasks of 0–3 s (some cancelled at once), reads, plain
/// calls. A failed request (the server is being killed) makes it reconnect.
async fn load(
    url: &str,
    wire: Wire,
    seed: u64,
    acked: &Mutex<Vec<Acked>>,
    counts: &Mutex<(usize, usize)>,
) {
    let mut rng = Rng::new(seed);
    let mut mine: Vec<String> = Vec::new();
    loop {
        let Ok(mut client) = Client::connect_as(url, wire, Some(KEY)).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        loop {
            let roll = rng.below(100);
            let outcome: Result<()> = async {
                if roll < 60 {
                    let secs = rng.below(3000) as f64 / 1000.0;
                    let id = client
                        .create_of("slow_compute", json!({"seconds": secs}))
                        .await?;
                    if let Ok(mut a) = acked.lock() {
                        a.push(Acked {
                            id: id.clone(),
                            wire,
                        });
                    }
                    if roll < 12 {
                        client.reply("tasks/cancel", json!({"taskId": id})).await?;
                        if let Ok(mut c) = counts.lock() {
                            c.1 += 1;
                        }
                    }
                    mine.push(id);
                } else if roll < 90 {
                    if let Some(id) = mine.get(rng.below(mine.len().max(1) as u64) as usize) {
                        client.get(&id.clone()).await?;
                    }
                } else {
                    let args = json!({"name": "greet", "arguments": {"name": "soak"}});
                    let r = client.reply("tools/call", args).await?;
                    if r.get("result").is_some() {
                        if let Ok(mut c) = counts.lock() {
                            c.0 += 1;
                        }
                    }
                }
                Ok(())
            }
            .await;
            if outcome.is_err() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads every acknowledged task (on the wire that made it) until it is finished or `limit` is up.
async fn settle(url: &str, acked: &[Acked], limit: Duration, tally: &mut Tally) -> Result<()> {
    let deadline = Instant::now() + limit;
    let mut clients = BTreeMap::new();
    for wire in [Wire::Session2025, Wire::Stateless2026] {
        clients.insert(
            wire.label(),
            Client::connect_as(url, wire, Some(KEY)).await?,
        );
    }
    let mut pending: Vec<&Acked> = acked.iter().collect();
    let mut found = std::collections::HashSet::new();
    let mut status_of: BTreeMap<String, String> = BTreeMap::new();
    loop {
        let mut still = Vec::new();
        for a in pending {
            let client = clients
                .get_mut(a.wire.label())
                .context("a client per wire")?;
            let reply = client.reply("tasks/get", json!({"taskId": a.id})).await?;
            if let Some(e) = reply.get("error") {
                if e["code"] == -32602 {
                    tally.lost.push(a.id.clone());
                    continue;
                }
                bail!("tasks/get {}: {e}", a.id);
            }
            let r = &reply["result"];
            let status = r["status"]
                .as_str()
                .or_else(|| r["task"]["status"].as_str())
                .unwrap_or("?")
                .to_string();
            found.insert(a.id.clone());
            if matches!(status.as_str(), "completed" | "failed" | "cancelled") {
                status_of.insert(a.id.clone(), status);
            } else {
                still.push(a);
            }
        }
        pending = still;
        if pending.is_empty() || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tally.found = found.len();
    tally.stuck = pending.iter().map(|a| a.id.clone()).collect();
    for s in status_of.values() {
        *tally.by_status.entry(s.clone()).or_default() += 1;
    }
    if !tally.stuck.is_empty() {
        *tally.by_status.entry("unfinished".into()).or_default() += tally.stuck.len();
    }
    Ok(())
}

/// A small deterministic generator (xorshift64*): a run's choices repeat for the same arguments.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// A number below `n` (0 when `n` is 0).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}
