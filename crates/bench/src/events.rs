//! What a subscribed task costs (MCP Events): tasks end to end on the 2026-07-28 wire (create,
//! the tool's finish 20 ms later, `tasks/get` until finished) without a subscription, and with one
//! `task.finished` subscription per task (`events/subscribe` with its `taskId` right after the
//! create, its event POSTed to a receiver on loopback), side by side on fresh servers, in rounds:
//! tasks per second, our server's CPU per task, and how many events were delivered.

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::credentials::Credential;
use crate::targets;
use crate::wire::{Client, Wire};

/// The secret the subscriptions give (any valid one: the receiver here does not verify).
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwMfKQ9r8GKYo=";

/// One mode's figures.
struct Figures {
    rate: f64,
    cpu_us: f64,
    delivered: usize,
}

/// A receiver on 127.0.0.1 that answers verifications and counts events; its URL.
async fn receiver(count: Arc<AtomicUsize>) -> Result<String> {
    let app = axum::Router::new().route(
        "/hooks",
        axum::routing::post(move |body: axum::body::Bytes| {
            let count = count.clone();
            async move {
                let msg: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                if msg["type"] == "verification" {
                    return (
                        axum::http::StatusCode::OK,
                        json!({"challenge": msg["challenge"]}).to_string(),
                    );
                }
                count.fetch_add(1, Ordering::Relaxed);
                (axum::http::StatusCode::NO_CONTENT, String::new())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(format!("http://127.0.0.1:{port}/hooks"))
}

/// Runs `tasks` tasks with `clients` clients on a fresh server on `store`, each subscribed to its
/// end when `subscribe`.
async fn one(
    store: &str,
    scratch: &std::path::Path,
    tasks: usize,
    clients: usize,
    subscribe: bool,
) -> Result<Figures> {
    let mut target = targets::ours(store, Wire::Stateless2026, scratch, 1)?;
    target.command.push("--auth".into());
    let running = target.start()?;
    let count = Arc::new(AtomicUsize::new(0));
    let hook = receiver(count.clone()).await?;
    let bearer = Credential::Key.bearer(0)?;
    // The endpoint's verification is once per principal and URL: made before the clock starts.
    if subscribe {
        let mut c =
            Client::connect_as(&running.url, Wire::Stateless2026, bearer.as_deref()).await?;
        let r = c
            .reply(
                "events/subscribe",
                json!({"name": "task.finished", "arguments": {"taskId": "warm-up"},
                       "delivery": {"mode": "webhook", "url": hook, "secret": SECRET}}),
            )
            .await
            .context("the first subscribe (and the endpoint's verification)")?;
        if let Some(e) = r.get("error") {
            bail!("events/subscribe failed: {e}");
        }
    }
    let next = Arc::new(AtomicUsize::new(0));
    let cpu_before = running.cpu_seconds();
    let started = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..clients {
        let (url, hook, next, bearer) = (
            running.url.clone(),
            hook.clone(),
            next.clone(),
            bearer.clone(),
        );
        handles.push(tokio::task::spawn_local(async move {
            let mut c = Client::connect_as(&url, Wire::Stateless2026, bearer.as_deref()).await?;
            while next.fetch_add(1, Ordering::Relaxed) < tasks {
                let id = c.create_of("stamp", json!({"ms": 20})).await?;
                if subscribe {
                    let r = c
                        .reply(
                            "events/subscribe",
                            json!({"name": "task.finished", "arguments": {"taskId": id},
                                   "delivery": {"mode": "webhook", "url": hook, "secret": SECRET},
                                   "ttlMs": 600_000}),
                        )
                        .await?;
                    if let Some(e) = r.get("error") {
                        bail!("events/subscribe failed: {e}");
                    }
                }
                let mut polls = 0;
                while !c.get(&id).await?.terminal {
                    polls += 1;
                    if polls > 2_000 {
                        bail!("task {id} did not finish");
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    for h in handles {
        h.await??;
    }
    if subscribe {
        // Every task's event, delivered (a task that ended before its subscribe makes none).
        let deadline = Instant::now() + Duration::from_secs(30);
        while count.load(Ordering::Relaxed) < tasks && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = running.cpu_seconds() - cpu_before;
    Ok(Figures {
        rate: tasks as f64 / elapsed,
        cpu_us: cpu * 1e6 / tasks as f64,
        delivered: count.load(Ordering::Relaxed),
    })
}

/// `mcp-tasks-bench events`: both modes, `rounds` times alternating, on each of `stores`.
pub async fn run(stores: &str, tasks: usize, clients: usize, rounds: usize) -> Result<()> {
    let scratch = tempfile::tempdir()?;
    let local = tokio::task::LocalSet::new();
    let mut md = format!(
        "# What a subscribed task costs\n\nGenerated by `cargo run --release -p mcp-tasks-bench -- events` \
         ({tasks} tasks of `stamp {{ms: 20}}` per run, {clients} clients, 2026-07-28 wire, API key; \
         rounds alternate the modes on fresh servers). Per task: create, the tool's finish, \
         `tasks/get` until finished; subscribed: also `events/subscribe` with its taskId right \
         after the create, and its `task.finished` POSTed to a receiver on loopback.\n\n\
         | store | round | mode | tasks/s | server CPU µs/task | events delivered |\n|---|---:|---|---:|---:|---:|\n"
    );
    let mut summary = String::from("\n| store | tasks/s, subscribed ÷ plain (median) | CPU/task, subscribed ÷ plain (median) |\n|---|---:|---:|\n");
    for store in stores.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if store == "postgres" && !targets::postgres_reachable().await {
            continue;
        }
        let mut rates = Vec::new();
        let mut cpus = Vec::new();
        for round in 1..=rounds {
            let mut pair = Vec::new();
            for subscribe in [false, true] {
                let f = local
                    .run_until(one(store, scratch.path(), tasks, clients, subscribe))
                    .await
                    .with_context(|| format!("{store} round {round}"))?;
                let mode = if subscribe { "subscribed" } else { "plain" };
                eprintln!(
                    "{store} round {round} {mode:<10} {:>7.0} tasks/s  {:>6.0} µs CPU/task  {} delivered",
                    f.rate, f.cpu_us, f.delivered
                );
                md.push_str(&format!(
                    "| {store} | {round} | {mode} | {:.0} | {:.0} | {} |\n",
                    f.rate,
                    f.cpu_us,
                    if subscribe {
                        f.delivered.to_string()
                    } else {
                        "–".into()
                    }
                ));
                pair.push(f);
            }
            rates.push(pair[1].rate / pair[0].rate);
            cpus.push(pair[1].cpu_us / pair[0].cpu_us);
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        summary.push_str(&format!(
            "| {store} | {:.2}× | {:.2}× |\n",
            median(&mut rates),
            median(&mut cpus)
        ));
    }
    md.push_str(&summary);
    println!("{md}");
    Ok(())
}
