//! The soak: `mcp-tasks serve --demo` killed with SIGKILL again and again under a mixed load, on
//! SQLite and on PostgreSQL, then asked for every task it acknowledged. Lost (acknowledged, then not
//! found) and stuck (found, never finished) must both be 0.
//!
//! A cycle starts the server on the store the previous cycle left, runs the load (clients on both
//! wires creating tasks of varied length, cancelling some, reading some, making plain calls) for a
//! random part of the cycle, and kills the server in the middle of it. After the last cycle the
//! server is started once more and every acknowledged task is read until it is finished, or until
//! the settle time runs out. Loopback only; every wait is bounded.
//!
//! Some of the tasks are the demo's `pipeline`, whose step bodies each write an audit line (task,
//! item, attempt). From every process's lines a history checker (in Jepsen's manner) asserts that
//! no two runs of one task overlapped (the processes ran one after another, and within one the
//! log is in order), that a task's attempts grow from run to run, and that each interruption made
//! at most one step run again: the step in flight at the kill.

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
    /// What the history checker found.
    history: History,
    /// Tasks a client saw finished whose status later differed (an outcome is written once).
    changed: Vec<String>,
    /// Tasks a client saw finished.
    seen_finished: usize,
    /// Each finished task's status at the end.
    final_status: BTreeMap<String, String>,
    /// Each finished task's status message at the end.
    final_message: BTreeMap<String, String>,
}

/// The pipeline tasks' side effects, from the audit lines, and what was wrong with them.
#[derive(Default)]
struct History {
    tasks: usize,
    steps: usize,
    /// Step bodies that ran again (each allowed by an interruption of its task).
    again: usize,
    /// Interruptions: runs of a task after its first.
    interruptions: usize,
    violations: Vec<String>,
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
                let tally = soak_store(&args, &url, dir.path()).await?;
                // `SOAK_KEEP=1` keeps the store and the servers' logs of a run that found something.
                if std::env::var_os("SOAK_KEEP").is_some() && !tally.changed.is_empty() {
                    println!("    kept: {}", dir.keep().display());
                }
                tally
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
        if !tally.changed.is_empty() {
            for c in tally.changed.iter().take(5) {
                println!("    changed after it was seen finished: {c}");
            }
            failed.push(format!(
                "{store}: {} tasks seen finished later showed another status",
                tally.changed.len()
            ));
        }
        let h = &tally.history;
        println!(
            "{:<10} history: {} pipeline tasks, {} step bodies run, {} again after {} interruptions, \
             {} violations; {} tasks seen finished, {} changed since",
            "",
            h.tasks,
            h.steps,
            h.again,
            h.interruptions,
            h.violations.len(),
            tally.seen_finished,
            tally.changed.len()
        );
        for v in h.violations.iter().take(5) {
            println!("    history: {v}");
        }
        if !h.violations.is_empty() {
            failed.push(format!(
                "{store}: the history checker found {} violations",
                h.violations.len()
            ));
        }
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
    let seen: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
    let counts: Arc<Mutex<(usize, usize, usize)>> = Arc::default();
    let mut tally = Tally::default();
    let mut rng = Rng::new(0x5eed ^ args.cycles as u64);
    let log_of = |cycle: usize| scratch.join(format!("cycle-{cycle}.log"));
    for cycle in 0..args.cycles {
        let mut running = target.start_logged(&log_of(cycle))?;
        let stop = tokio_util::sync::CancellationToken::new();
        let workers: Vec<_> = (0..args.clients)
            .map(|i| {
                let wire = if i % 2 == 0 {
                    Wire::Session2025
                } else {
                    Wire::Stateless2026
                };
                let (url, stop, acked, counts, seen) = (
                    running.url.clone(),
                    stop.clone(),
                    acked.clone(),
                    counts.clone(),
                    seen.clone(),
                );
                let seed = rng.next();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = stop.cancelled() => {}
                        _ = load(&url, wire, seed, &acked, &counts, &seen) => {}
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
    let running = target.start_logged(&log_of(args.cycles))?;
    let acked = acked.lock().map(|a| a.clone()).unwrap_or_default();
    let (plain, cancels, pipelines) = counts.lock().map(|c| *c).unwrap_or_default();
    tally.plain_calls = plain;
    tally.cancels = cancels;
    tally.acknowledged = acked.len();
    settle(&running.url, &acked, args.settle, &mut tally).await?;
    drop(running);
    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    tally.seen_finished = seen.len();
    for (id, was) in &seen {
        let now = tally
            .final_status
            .get(id)
            .map_or("unfinished", String::as_str);
        if now != was {
            let why = tally.final_message.get(id).map_or("", String::as_str);
            tally
                .changed
                .push(format!("{id}: seen {was}, then {now} ({why})"));
        }
    }
    let logs: Vec<String> = (0..=args.cycles)
        .map(|c| std::fs::read_to_string(log_of(c)).unwrap_or_default())
        .collect();
    tally.history = check_history(&logs);
    if pipelines > 0 && tally.history.steps == 0 {
        // The checker would pass on a log it cannot read: that is a failure of its own.
        tally.history.violations.push(format!(
            "{pipelines} pipeline tasks were acknowledged but no audit line of theirs was read"
        ));
    }
    Ok(tally)
}

/// Where an audit line is: (process, line).
type Place = (usize, usize);

/// One step body's run, from its audit line: the process (cycle) and the line's place in that
/// process's log make a total order that agrees with time.
#[derive(Clone, Debug)]
struct StepRan {
    task: String,
    item: u64,
    attempt: u64,
    at: Place,
    /// The line says the step's output was recorded (the handler has it), not that its body ran.
    recorded: bool,
}

/// The audit lines of `logs` (one per process, in the order they ran) as step runs.
fn steps_ran(logs: &[String]) -> Vec<StepRan> {
    let field = |line: &str, name: &str| -> Option<String> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .map(|v| v.trim_matches('"').to_string())
    };
    let mut out = Vec::new();
    for (cycle, log) in logs.iter().enumerate() {
        for (n, line) in log.lines().enumerate() {
            let recorded = line.contains("pipeline step recorded");
            if !recorded && !line.contains("pipeline step ran") {
                continue;
            }
            let (Some(task), Some(item), Some(attempt)) = (
                field(line, "task="),
                field(line, "item=").and_then(|v| v.parse().ok()),
                field(line, "attempt=").and_then(|v| v.parse().ok()),
            ) else {
                continue;
            };
            out.push(StepRan {
                task,
                item,
                attempt,
                at: (cycle, n),
                recorded,
            });
        }
    }
    out
}

/// Checks the history: per task, its runs (process, attempt) do not overlap and their attempts
/// grow; its step bodies ran again at most once per interruption.
fn check_history(logs: &[String]) -> History {
    let lines = steps_ran(logs);
    let (recorded, ran): (Vec<StepRan>, Vec<StepRan>) = lines.into_iter().partition(|l| l.recorded);
    let mut h = History {
        steps: ran.len(),
        ..History::default()
    };
    // Once a step's output is recorded, every later run replays it: its body never runs again.
    let mut recorded_at: BTreeMap<(&str, u64), Place> = BTreeMap::new();
    for r in &recorded {
        let at = recorded_at.entry((&r.task, r.item)).or_insert(r.at);
        *at = (*at).min(r.at);
    }
    for r in &ran {
        if recorded_at
            .get(&(r.task.as_str(), r.item))
            .is_some_and(|at| *at < r.at)
        {
            h.violations.push(format!(
                "task {}: item {}'s body ran again in attempt {} after its output was recorded",
                r.task, r.item, r.attempt
            ));
        }
    }
    let mut by_task: BTreeMap<&str, Vec<&StepRan>> = BTreeMap::new();
    for r in &ran {
        by_task.entry(&r.task).or_default().push(r);
    }
    h.tasks = by_task.len();
    for (task, effects) in by_task {
        // Runs: (cycle, attempt) → (first, last) place.
        let mut runs: BTreeMap<(usize, u64), (Place, Place)> = BTreeMap::new();
        for e in &effects {
            let span = runs.entry((e.at.0, e.attempt)).or_insert((e.at, e.at));
            span.0 = span.0.min(e.at);
            span.1 = span.1.max(e.at);
        }
        let mut spans: Vec<_> = runs.into_iter().collect();
        spans.sort_by_key(|(_, (first, _))| *first);
        for pair in spans.windows(2) {
            let (((_, a_attempt), (_, a_last)), ((_, b_attempt), (b_first, _))) =
                (pair[0], pair[1]);
            if a_last > b_first {
                h.violations.push(format!(
                    "task {task}: attempt {a_attempt} went on after attempt {b_attempt} began"
                ));
            }
            if b_attempt <= a_attempt {
                h.violations.push(format!(
                    "task {task}: a run of attempt {b_attempt} came after one of attempt {a_attempt}"
                ));
            }
        }
        let interruptions = spans.len().saturating_sub(1);
        let mut count: BTreeMap<u64, usize> = BTreeMap::new();
        for e in &effects {
            *count.entry(e.item).or_default() += 1;
        }
        h.again += count.values().map(|n| n - 1).sum::<usize>();
        h.interruptions += interruptions;
        // Each interruption may make one body run again: the one in flight when it came, which is
        // the last the interrupted run began. Anything else run by two runs is a lost record.
        let keys: Vec<(usize, u64)> = spans.iter().map(|(k, _)| *k).collect();
        let by_run = |k: (usize, u64)| -> Vec<u64> {
            let mut v: Vec<(Place, u64)> = effects
                .iter()
                .filter(|e| (e.at.0, e.attempt) == k)
                .map(|e| (e.at, e.item))
                .collect();
            v.sort();
            v.into_iter().map(|(_, item)| item).collect()
        };
        for pair in keys.windows(2) {
            let (before, after) = (by_run(pair[0]), by_run(pair[1]));
            let twice: Vec<u64> = after
                .iter()
                .copied()
                .filter(|i| before.contains(i))
                .collect();
            let allowed = before.last().copied();
            if twice.len() > 1 || twice.first().is_some_and(|i| Some(*i) != allowed) {
                h.violations.push(format!(
                    "task {task}: attempt {} ran again {twice:?} of what attempt {} ran \
                     (only its last item, {allowed:?}, was in flight)",
                    pair[1].1, pair[0].1
                ));
            }
        }
    }
    h
}

/// One client's load until it is stopped: tasks of 0–3 s (some cancelled at once), reads, plain
/// calls. A failed request (the server is being killed) makes it reconnect.
async fn load(
    url: &str,
    wire: Wire,
    seed: u64,
    acked: &Mutex<Vec<Acked>>,
    counts: &Mutex<(usize, usize, usize)>,
    seen: &Mutex<BTreeMap<String, String>>,
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
                    // A tenth of them journaled, for the history checker (and not among
                    // the ones cancelled at once below).
                    let id = if (12..18).contains(&roll) {
                        let items = 2 + rng.below(6);
                        let id = client
                            .create_of("pipeline", json!({"items": items, "seconds_per_item": 0.2}))
                            .await?;
                        if let Ok(mut c) = counts.lock() {
                            c.2 += 1;
                        }
                        id
                    } else {
                        let secs = rng.below(3000) as f64 / 1000.0;
                        client
                            .create_of("slow_compute", json!({"seconds": secs}))
                            .await?
                    };
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
                        let id = id.clone();
                        let r = client.reply("tasks/get", json!({"taskId": id})).await?;
                        let r = &r["result"];
                        let status = r["status"]
                            .as_str()
                            .or_else(|| r["task"]["status"].as_str());
                        if let Some(s @ ("completed" | "failed" | "cancelled")) = status {
                            if let Ok(mut seen) = seen.lock() {
                                seen.insert(id, s.to_string());
                            }
                        }
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
                let message = r["statusMessage"]
                    .as_str()
                    .or_else(|| r["task"]["statusMessage"].as_str())
                    .unwrap_or_default();
                tally
                    .final_message
                    .insert(a.id.clone(), message.to_string());
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
    tally.final_status = status_of;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn line(task: &str, item: u64, attempt: u64) -> String {
        format!(
            "2026-12-02T01:00:00.000Z  INFO mcp_tasks::audit: pipeline step ran task={task} item={item} attempt={attempt}\n"
        )
    }

    #[test]
    fn the_checker_allows_one_step_again_per_interruption_and_nothing_more() {
        // Run 1 did items 0 and 1 and was killed in item 2 (its body ran, not recorded); run 2
        // did item 2 again and the rest.
        let logs = [
            line("t", 0, 1) + &line("t", 1, 1) + &line("t", 2, 1),
            line("t", 2, 2) + &line("t", 3, 2),
        ];
        let h = check_history(&logs);
        assert_eq!((h.tasks, h.steps, h.again, h.interruptions), (1, 5, 1, 1));
        assert!(h.violations.is_empty(), "{:?}", h.violations);
        // A body run again after its output was recorded: the record was lost.
        let rec = |task: &str, item: u64, attempt: u64| {
            line(task, item, attempt).replace("step ran", "step recorded")
        };
        let logs = [
            line("t", 0, 1) + &rec("t", 0, 1) + &line("t", 1, 1),
            line("t", 0, 2),
        ];
        let v = check_history(&logs).violations;
        assert!(
            v.iter()
                .any(|v| v.contains("after its output was recorded")),
            "{v:?}"
        );
        // Two steps again after one interruption: a journal that lost a recorded step.
        let logs = [
            line("t", 0, 1) + &line("t", 1, 1),
            line("t", 0, 2) + &line("t", 1, 2),
        ];
        assert_eq!(check_history(&logs).violations.len(), 1);
        // Two runs in one process, interleaved: the task ran twice at once.
        let logs = [line("t", 0, 1) + &line("t", 0, 2) + &line("t", 1, 1)];
        let v = check_history(&logs).violations;
        assert!(v.iter().any(|v| v.contains("went on")), "{v:?}");
        // One interruption, one body run again, but not the one in flight: item 0 was done.
        let logs = [
            line("t", 0, 1) + &line("t", 1, 1),
            line("t", 0, 2) + &line("t", 2, 2),
        ];
        let v = check_history(&logs).violations;
        assert!(v.iter().any(|v| v.contains("was in flight")), "{v:?}");
        // A later run with an older attempt.
        let logs = [line("t", 0, 2), line("t", 1, 1)];
        let v = check_history(&logs).violations;
        assert!(v.iter().any(|v| v.contains("came after")), "{v:?}");
    }
}
