//! The load: `clients` concurrent clients doing one mode's operation until `ops` are done, with the
//! latency of each operation recorded.

use anyhow::{anyhow, Result};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::wire::{Client, Wire};

/// What a run measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `tools/call` → task handle.
    Create,
    /// `tasks/get` on tasks that exist (and are finished).
    Get,
    /// One task from call to result: create, poll until finished, fetch the result.
    E2e,
    /// `tools/call` of our `wait` tool: tasks that stay unfinished (for memory and restart
    /// profiles with `drive`; not one of the suite's modes).
    Hold,
    /// [`Mode::Create`] with an idempotency key of its own on each call, as our client and
    /// Asynchronous Tool Execution send (for `drive`; not one of the suite's modes).
    Keyed,
}

impl Mode {
    /// All modes, in the order a run takes them.
    pub const ALL: [Mode; 3] = [Mode::Create, Mode::Get, Mode::E2e];
    /// Short name.
    pub fn label(self) -> &'static str {
        match self {
            Mode::Create => "create",
            Mode::Get => "get",
            Mode::E2e => "e2e",
            Mode::Hold => "hold",
            Mode::Keyed => "keyed",
        }
    }
}

/// The figures of one mode against one target.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    /// Operations completed.
    pub ops: usize,
    /// Operations per second.
    pub rate: f64,
    /// Latency percentiles in ms.
    pub p50: f64,
    /// 90th percentile, ms.
    pub p90: f64,
    /// 99th percentile, ms.
    pub p99: f64,
    /// 99.9th percentile, ms: where a stall of the server that few requests meet shows.
    pub p999: f64,
    /// The slowest operation, ms.
    pub max: f64,
    /// Failed operations.
    pub errors: usize,
    /// `tasks/get` requests per task in the e2e mode (1.0: the first poll already saw it finished);
    /// 0 in the other modes.
    pub polls: f64,
    /// The server's CPU time per operation, µs (user and system, all its threads; filled in by the
    /// suite, which knows the server's process).
    pub cpu_us: f64,
}

/// The `p` quantile of `sorted` (ascending), in ms; 0 when it is empty.
pub(crate) fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

/// Creates `n` tasks with one client and waits until each is finished; returns their ids.
async fn own_tasks(c: &mut Client, n: usize) -> Result<Vec<String>> {
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        let id = c.create().await?;
        while !c.get(&id).await?.terminal {}
        ids.push(id);
    }
    Ok(ids)
}

/// Runs `mode` against `url` with `clients` clients for `ops` operations (or until `limit`). For the
/// get mode each client first creates `per_client` tasks of its own and waits until they are finished
/// (not timed; some servers show a task only to the session that made it), then reads those.
/// Each client presents `credential`.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    url: &str,
    wire: Wire,
    mode: Mode,
    clients: usize,
    ops: usize,
    per_client: usize,
    limit: Duration,
    credential: crate::credentials::Credential,
) -> Result<Figures> {
    let next = Arc::new(AtomicUsize::new(0));
    let ready = Arc::new(tokio::sync::Barrier::new(clients + 1));
    let mut workers = Vec::new();
    for i in 0..clients {
        let (url, next, ready) = (url.to_string(), next.clone(), ready.clone());
        let bearer = credential.bearer(i)?;
        workers.push(tokio::spawn(async move {
            let mut c = Client::connect_as(&url, wire, bearer.as_deref()).await;
            let existing = match (&mut c, mode) {
                (Ok(c), Mode::Get) => own_tasks(c, per_client).await,
                _ => Ok(Vec::new()),
            };
            // Everyone starts the timed part together, also a client that failed to prepare.
            ready.wait().await;
            let (mut c, existing) = (c?, existing?);
            let deadline = Instant::now() + limit;
            let mut lat = Vec::new();
            let mut errors = 0;
            let mut pick = 0;
            let mut gets = 0usize;
            while next.fetch_add(1, Ordering::Relaxed) < ops && Instant::now() < deadline {
                let t0 = Instant::now();
                let done: Result<()> = async {
                    match mode {
                        Mode::Create => {
                            c.create().await?;
                        }
                        Mode::Hold => {
                            c.create_of("wait", serde_json::json!({})).await?;
                        }
                        Mode::Keyed => {
                            c.create_keyed().await?;
                        }
                        Mode::Get => {
                            pick = (pick + 1) % existing.len().max(1);
                            let id = existing.get(pick).ok_or_else(|| anyhow!("no tasks"))?;
                            c.get(id).await?;
                        }
                        Mode::E2e => {
                            let id = c.create().await?;
                            let mut polls = 0;
                            let status = loop {
                                let s = c.get(&id).await?;
                                polls += 1;
                                gets += 1;
                                if s.terminal || polls > 10_000 {
                                    break s;
                                }
                            };
                            if !status.has_result {
                                c.result(&id).await?;
                            }
                        }
                    }
                    Ok(())
                }
                .await;
                match done {
                    Ok(()) => lat.push(t0.elapsed()),
                    Err(_) => errors += 1,
                }
            }
            Ok::<_, anyhow::Error>((lat, errors, gets))
        }));
    }
    ready.wait().await;
    let started = Instant::now();
    let mut lat = Vec::new();
    let mut errors = 0;
    let mut gets = 0;
    for w in workers {
        let (l, e, g) = w.await??;
        lat.extend(l);
        errors += e;
        gets += g;
    }
    let elapsed = started.elapsed().as_secs_f64();
    lat.sort();
    Ok(Figures {
        ops: lat.len(),
        rate: lat.len() as f64 / elapsed.max(1e-9),
        p50: percentile(&lat, 0.50),
        p90: percentile(&lat, 0.90),
        p99: percentile(&lat, 0.99),
        p999: percentile(&lat, 0.999),
        max: percentile(&lat, 1.0),
        errors,
        polls: if mode == Mode::E2e {
            gets as f64 / lat.len().max(1) as f64
        } else {
            0.0
        },
        cpu_us: 0.0,
    })
}
