//! Scenarios at scale, for our server only: rates with 1,000,000 tasks stored against 1,000, memory
//! with 100,000 unfinished tasks and the restart that recovers them, and how soon a blocked
//! `tasks/result` answers once its task is done.

use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::load::{self, Mode};
use crate::targets::Target;
use crate::wire::{Client, Wire};

fn ours(name: &str, args: &[String]) -> Result<Target> {
    let mut command = vec![
        std::env::current_exe()?.display().to_string(),
        "serve-ours".to_string(),
    ];
    command.extend(args.iter().cloned());
    Ok(Target {
        name: name.to_string(),
        wire: Wire::Session2025,
        command,
        replicas: 1,
    })
}

/// Rounds of the flat-with-size comparison; the median of each side is compared.
const FLAT_ROUNDS: usize = 5;

/// Create and get rates with `small` and `large` finished tasks already stored, on each store. Both
/// servers run at once and are measured in alternation, several rounds, so a drift of the machine
/// (these machines are shared) touches both sides alike; the medians are compared.
async fn flat(
    scratch: &std::path::Path,
    small: usize,
    large: usize,
    out: &mut String,
) -> Result<()> {
    let _ = writeln!(
        out,
        "### Rates with many tasks stored (16 clients, 2025-11-25; median of {FLAT_ROUNDS} alternating rounds)\n"
    );
    let _ = writeln!(out, "| store | stored | create ops/s | get ops/s |");
    let _ = writeln!(out, "|---|---:|---:|---:|");
    for store in ["memory:", "sqlite"] {
        let mut servers = Vec::new();
        for stored in [small, large] {
            let store_arg = match store {
                "sqlite" => format!(
                    "sqlite://{}",
                    scratch.join(format!("flat-{stored}.db")).display()
                ),
                s => s.to_string(),
            };
            eprintln!("== {store} with {stored} tasks stored (prefilling)");
            let t = ours(
                "ours",
                &[
                    "--store".into(),
                    store_arg,
                    "--prefill".into(),
                    stored.to_string(),
                ],
            )?;
            servers.push(t.start_within(Duration::from_secs(600))?);
        }
        // rates[size][mode] over the rounds.
        let mut rates = vec![vec![Vec::new(), Vec::new()]; servers.len()];
        for round in 0..FLAT_ROUNDS {
            for (m, mode) in [Mode::Create, Mode::Get].into_iter().enumerate() {
                for (i, running) in servers.iter().enumerate() {
                    let f = load::run(
                        &running.url,
                        Wire::Session2025,
                        mode,
                        16,
                        3000,
                        64,
                        Duration::from_secs(60),
                        crate::credentials::Credential::None,
                    )
                    .await?;
                    rates[i][m].push(f.rate);
                }
            }
            eprintln!(
                "   round {}: create {:.0} / {:.0}, get {:.0} / {:.0}",
                round + 1,
                rates[0][0][round],
                rates[1][0][round],
                rates[0][1][round],
                rates[1][1][round]
            );
        }
        drop(servers);
        let medians: Vec<(f64, f64)> = rates
            .iter()
            .map(|r| (median(&r[0]), median(&r[1])))
            .collect();
        for ((c, g), stored) in medians.iter().zip([small, large]) {
            let _ = writeln!(out, "| {store} | {stored} | {c:.0} | {g:.0} |");
        }
        if let [(c0, g0), (c1, g1)] = medians[..] {
            let _ = writeln!(
                out,
                "| {store}: large / small | | {:.2}× | {:.2}× |",
                c1 / c0.max(1e-9),
                g1 / g0.max(1e-9)
            );
        }
    }
    Ok(())
}

fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Memory with `n` unfinished (`wait`) tasks, then a kill -9 and a restart on the same SQLite file.
async fn unfinished(scratch: &std::path::Path, n: usize, out: &mut String) -> Result<()> {
    let db = format!("sqlite://{}", scratch.join("unfinished.db").display());
    eprintln!("== {n} unfinished tasks on SQLite");
    // Logging as `mcp-tasks serve` does by default: a subscriber keeps each running task's span.
    let t = ours(
        "ours",
        &["--store".into(), db.clone(), "--log".into(), "info".into()],
    )?;
    let mut running = t.start()?;
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..16 {
        let (url, next) = (running.url.clone(), next.clone());
        workers.push(tokio::spawn(async move {
            let mut c = Client::connect(&url, Wire::Session2025).await?;
            while next.fetch_add(1, Ordering::Relaxed) < n {
                c.create_of("wait", serde_json::json!({})).await?;
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    for w in workers {
        w.await??;
    }
    let (rss, peak) = running.rss_mib();
    eprintln!("   RSS {rss:.0} MiB (peak {peak:.0})");
    running.kill();
    let started = Instant::now();
    let t = ours("ours", &["--store".into(), db, "--keep".into()])?;
    let restarted = t.start_within(Duration::from_secs(600))?;
    let mut c = Client::connect(&restarted.url, Wire::Session2025).await?;
    let id = c.create().await?;
    c.get(&id).await?;
    let restart = started.elapsed();
    eprintln!(
        "   restart serving again after {:.2} s",
        restart.as_secs_f64()
    );
    let _ = writeln!(out, "\n### {n} unfinished tasks (SQLite)\n");
    let _ = writeln!(
        out,
        "- server RSS, logging at `info` as `mcp-tasks serve` does: {rss:.0} MiB (peak {peak:.0} MiB)"
    );
    let _ = writeln!(
        out,
        "- restart after kill -9, recovery included, until a request is served: {:.2} s",
        restart.as_secs_f64()
    );
    Ok(())
}

/// Latency from a task's completion to the reply of a `tasks/result` that was waiting for it.
async fn blocked_result(label: &str, store: &str, n: usize, out: &mut String) -> Result<()> {
    eprintln!("== blocked tasks/result on {label}");
    let t = ours("ours", &["--store".into(), store.into()])?;
    let running = t.start()?;
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..16 {
        let (url, next) = (running.url.clone(), next.clone());
        workers.push(tokio::spawn(async move {
            let mut c = Client::connect(&url, Wire::Session2025).await?;
            let mut lags = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < n {
                let id = c.create_of("stamp", serde_json::json!({"ms": 20})).await?;
                let done_at: u64 = c.result_text(&id).await?.parse().context("stamp")?;
                let now = crate::serve::now_us();
                lags.push(now.saturating_sub(done_at));
            }
            Ok::<_, anyhow::Error>(lags)
        }));
    }
    let mut lags = Vec::new();
    for w in workers {
        lags.extend(w.await??);
    }
    lags.sort_unstable();
    let pct = |p: f64| lags[((lags.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0;
    let (p50, p99) = (pct(0.5), pct(0.99));
    eprintln!("   p50 {p50:.2} ms, p99 {p99:.2} ms");
    let _ = writeln!(
        out,
        "- blocked `tasks/result` ({label}, 16 clients, {n} tasks): answered p50 {p50:.2} ms, p99 {p99:.2} ms after the task finished"
    );
    Ok(())
}

/// Lets the kernel write back what a scenario left dirty (hundreds of MB of database files) before
/// the next one starts: otherwise the next scenario's commits wait behind that writeback, which is
/// the previous scenario's cost, not its own (the blocked-result p99 on SQLite read 21-29 ms after
/// the 100,000-task scenario, 2.5-3.3 ms on its own). The suite also calls it after building the
/// peers, whose build output would otherwise be written back under the first target's commits.
pub(crate) fn settle() {
    let _ = std::process::Command::new("sync").status();
}

/// The scenarios `parts` names (`all`, or some of `flat`, `unfinished`, `blocked`); Markdown for the
/// report.
pub async fn all(
    scratch: &std::path::Path,
    large: usize,
    unfinished_n: usize,
    parts: &str,
) -> Result<String> {
    let wanted = |part: &str| {
        parts
            .split(',')
            .map(str::trim)
            .any(|p| p == "all" || p == part)
    };
    let mut out = String::from("\n## At scale (our server)\n\n");
    if wanted("flat") {
        flat(scratch, 1_000, large, &mut out).await?;
        settle();
    }
    if wanted("unfinished") {
        unfinished(scratch, unfinished_n, &mut out).await?;
        settle();
    }
    if wanted("blocked") {
        let _ = writeln!(out, "\n### Blocked result\n");
        blocked_result("memory", "memory:", 1_000, &mut out).await?;
        let db = format!("sqlite://{}", scratch.join("blocked.db").display());
        blocked_result("SQLite", &db, 1_000, &mut out).await?;
    }
    Ok(out)
}
