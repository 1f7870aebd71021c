//! The servers a run measures, each in a process of its own so its memory can be read: our server on
//! each store and wire, the peers under `bench/peers/`, and the ceiling.

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::wire::Wire;

/// A server to measure.
#[derive(Clone, Debug)]
pub struct Target {
    /// Name in tables and charts.
    pub name: String,
    /// The wire the load speaks to it.
    pub wire: Wire,
    /// The command that starts it (it prints `listening on URL` first).
    pub command: Vec<String>,
    /// How many processes of it run side by side (replicas on one store); the load spreads every
    /// request over them in turn.
    pub replicas: usize,
}

/// Linux reports process CPU time in ticks of `USER_HZ`, which is 100 on every architecture the
/// suite runs on.
const CLOCK_TICKS_PER_SECOND: f64 = 100.0;

/// A running target; killed when dropped.
pub struct Running {
    children: Vec<Child>,
    /// Its MCP endpoint (several, comma-separated, for replicas).
    pub url: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Target {
    /// Starts the target and waits (at most 60 s) for its URL.
    pub fn start(&self) -> Result<Running> {
        self.start_within(Duration::from_secs(60))
    }

    /// Starts the target and waits at most `limit` for its URL.
    pub fn start_within(&self, limit: Duration) -> Result<Running> {
        self.start_with(limit, None)
    }

    /// Starts the target with its audit log lines (and errors) appended to `log`, without colours.
    pub fn start_logged(&self, log: &std::path::Path) -> Result<Running> {
        self.start_with(Duration::from_secs(60), Some(log))
    }

    fn start_with(&self, limit: Duration, log: Option<&std::path::Path>) -> Result<Running> {
        let mut children = Vec::new();
        let mut urls = Vec::new();
        for _ in 0..self.replicas.max(1) {
            let (child, url) = self.start_one(limit, log)?;
            children.push(child);
            urls.push(url);
        }
        Ok(Running {
            children,
            url: urls.join(","),
        })
    }

    fn start_one(&self, limit: Duration, log: Option<&std::path::Path>) -> Result<(Child, String)> {
        let (program, args) = self
            .command
            .split_first()
            .context("a target needs a command")?;
        let mut cmd = Command::new(program);
        cmd.args(args).stdout(Stdio::piped());
        match log {
            Some(path) => {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .with_context(|| format!("open {}", path.display()))?;
                cmd.stderr(Stdio::from(file))
                    .env("RUST_LOG", "error,mcp_tasks::audit=info")
                    .env("NO_COLOR", "1");
            }
            None => {
                cmd.stderr(Stdio::null()).env("RUST_LOG", "error");
            }
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}: {:?}", self.name, self.command))?;
        let stdout = child.stdout.take().context("no stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            for _ in lines {}
        });
        let line = match rx.recv_timeout(limit) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                bail!("{} did not print its URL within {limit:?}", self.name);
            }
        };
        let url = line
            .strip_prefix("listening on ")
            .with_context(|| format!("{}: unexpected first line {line:?}", self.name))?
            .trim()
            .to_string();
        Ok((child, url))
    }
}

impl Running {
    /// Kills the server at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// CPU time the server's processes have used so far (user and system, Linux `/proc`, in clock
    /// ticks of 10 ms), in seconds; replicas summed. Threads that ended are included.
    pub fn cpu_seconds(&self) -> f64 {
        self.children
            .iter()
            .map(|child| {
                let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id()))
                    .unwrap_or_default();
                // The command name (field 2) may hold spaces; the fields after its `)` are fixed.
                let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
                let ticks: Vec<f64> = rest
                    .split_whitespace()
                    .skip(11) // state … cmajflt: utime and stime are fields 14 and 15
                    .take(2)
                    .filter_map(|v| v.parse().ok())
                    .collect();
                ticks.iter().sum::<f64>() / CLOCK_TICKS_PER_SECOND
            })
            .sum()
    }

    /// The server's resident memory now and at its peak, in MiB (Linux `/proc`); replicas summed.
    pub fn rss_mib(&self) -> (f64, f64) {
        let mut total = (0.0, 0.0);
        for child in &self.children {
            let status =
                std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .and_then(|v| v.split_whitespace().next())
                    .and_then(|kb| kb.parse::<f64>().ok())
                    .map_or(0.0, |kb| kb / 1024.0)
            };
            total.0 += field("VmRSS:");
            total.1 += field("VmHWM:");
        }
        total
    }
}

/// Our server on `store` (`sqlite`, `memory` or `postgres`) speaking `wire`, run by this very
/// binary: `replicas` processes on one store (more than one only on PostgreSQL).
pub fn ours(store: &str, wire: Wire, scratch: &std::path::Path, replicas: usize) -> Result<Target> {
    let exe = std::env::current_exe()?.display().to_string();
    let store_arg = match store {
        "sqlite" => format!(
            "sqlite://{}",
            scratch.join(format!("bench-{}.db", wire.label())).display()
        ),
        "postgres" => postgres_url(),
        _ => "memory:".to_string(),
    };
    let mut command = vec![exe, "serve-ours".into(), "--store".into(), store_arg];
    if store == "postgres" {
        // A schema of its own, dropped by the suite at the end (see `drop_pg_schemas`).
        command.push("--pg-schema".into());
        command.push(format!(
            "bench_{}_{}_{replicas}",
            wire.label().replace('-', "_"),
            std::process::id()
        ));
    }
    let name = if replicas > 1 {
        format!("mcp-tasks {store} ×{replicas} ({})", wire.label())
    } else {
        format!("mcp-tasks {store} ({})", wire.label())
    };
    Ok(Target {
        name,
        wire,
        command,
        replicas,
    })
}

/// The PostgreSQL server the postgres targets use (`MCP_TASKS_TEST_PG`, else 127.0.0.1:5432/test).
pub fn postgres_url() -> String {
    std::env::var("MCP_TASKS_TEST_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// Whether that server answers; when it does not, the postgres targets are left out (and said so).
pub async fn postgres_reachable() -> bool {
    let url = postgres_url();
    let attempt = tokio::time::timeout(
        Duration::from_secs(5),
        tokio_postgres::connect(&url, tokio_postgres::NoTls),
    )
    .await;
    match attempt {
        Ok(Ok(_)) => true,
        Ok(Err(e)) => {
            eprintln!("leaving out the postgres targets: cannot connect to {url}: {e}");
            false
        }
        Err(_) => {
            eprintln!("leaving out the postgres targets: {url} did not answer within 5 s");
            false
        }
    }
}

/// Drops the PostgreSQL schemas `targets` ran in.
pub async fn drop_pg_schemas(targets: &[Target]) {
    let schemas: Vec<&String> = targets
        .iter()
        .filter_map(|t| {
            let i = t.command.iter().position(|a| a == "--pg-schema")?;
            t.command.get(i + 1)
        })
        .collect();
    if schemas.is_empty() {
        return;
    }
    let Ok((client, conn)) = tokio_postgres::connect(&postgres_url(), tokio_postgres::NoTls).await
    else {
        return;
    };
    tokio::spawn(conn);
    for schema in schemas {
        let _ = client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .await;
    }
}

/// The ceiling: every request answered with one canned reply.
pub fn ceiling() -> Result<Target> {
    let exe = std::env::current_exe()?.display().to_string();
    Ok(Target {
        name: "ceiling (canned reply)".into(),
        wire: Wire::Canned,
        command: vec![exe, "ceiling".into()],
        replicas: 1,
    })
}

/// Names and versions of what was measured, for the report's header.
pub type Versions = Vec<(String, String)>;

/// The turul peers: `--only` key, task store, wire. Each key is also the name `build.sh` prints its
/// command under.
pub const TURUL: [(&str, &str, Wire); 4] = [
    ("turul-memory-2025", "memory", Wire::Session2025),
    ("turul-sqlite-2025", "sqlite", Wire::Session2025),
    ("turul-memory-2026", "memory", Wire::Stateless2026),
    ("turul-sqlite-2026", "sqlite", Wire::Stateless2026),
];

/// The peer servers under `bench/peers/` that `wanted` (given a `--only` key) accepts, built or
/// installed first by their `build.sh` (pinned versions; quick when nothing changed): the TypeScript
/// SDK v1 on 2025-11-25, rmcp 3 on 2026-07-28 (it serves no other task form) and turul 0.4.5 on
/// each wire and task store (`TURUL`; the SQLite ones on a file in `scratch`). Also returns their
/// versions for the report.
pub fn peers(
    wanted: impl Fn(&str) -> bool,
    scratch: &std::path::Path,
) -> Result<(Vec<Target>, Versions)> {
    let want_ts = wanted("ts-sdk-v1");
    let want_rmcp = wanted("rmcp");
    let want_turul: Vec<_> = TURUL.iter().filter(|(key, ..)| wanted(key)).collect();
    if !want_ts && !want_rmcp && want_turul.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/peers");
    eprintln!("== building the peers (bench/peers/build.sh)");
    // The peers have their own lockfiles and build in their own target directory (build.sh's
    // default), not in the CARGO_TARGET_DIR this suite may have been built with.
    let out = Command::new("bash")
        .arg(dir.join("build.sh"))
        .env_remove("CARGO_TARGET_DIR")
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run bench/peers/build.sh")?;
    if !out.status.success() {
        bail!("bench/peers/build.sh failed ({})", out.status);
    }
    let listing = String::from_utf8_lossy(&out.stdout);
    let command = |name: &str| -> Result<Vec<String>> {
        let line = listing
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .with_context(|| format!("build.sh printed no command for {name}"))?;
        Ok(line.split_whitespace().map(String::from).collect())
    };
    let version = |file: &str, after: &str| {
        std::fs::read_to_string(dir.join(file))
            .ok()
            .and_then(|t| {
                let rest = &t[t.find(after)? + after.len()..];
                let v: String = rest
                    .chars()
                    .skip_while(|c| !c.is_ascii_digit())
                    .take_while(|c| c.is_ascii_digit() || *c == '.')
                    .collect();
                (!v.is_empty()).then_some(v)
            })
            .unwrap_or_else(|| "unknown".into())
    };
    let mut targets = Vec::new();
    let mut versions = Vec::new();
    if want_ts {
        let v = version("ts-sdk-v1/package.json", "\"@modelcontextprotocol/sdk\"");
        targets.push(Target {
            name: "TypeScript SDK v1 (InMemoryTaskStore)".into(),
            wire: Wire::Session2025,
            command: command("ts-sdk-v1")?,
            replicas: 1,
        });
        versions.push(("TypeScript SDK (npm @modelcontextprotocol/sdk)".into(), v));
    }
    if want_rmcp {
        let v = version("rmcp/Cargo.toml", "rmcp = { version = \"=");
        targets.push(Target {
            name: "rmcp 3 (TaskManager)".into(),
            wire: Wire::Stateless2026,
            command: command("rmcp")?,
            replicas: 1,
        });
        versions.push(("rmcp (crates.io)".into(), v));
    }
    if !want_turul.is_empty() {
        let v = version(
            "turul/wire-2025/Cargo.toml",
            "turul-mcp-server = { version = \"=",
        );
        for (key, store, wire) in want_turul {
            let mut command = command(key)?;
            if *store == "sqlite" {
                command.push("--db".into());
                command.push(scratch.join(format!("{key}.db")).display().to_string());
            }
            targets.push(Target {
                name: format!("turul {v} {store} ({})", wire.label()),
                wire: *wire,
                command,
                replicas: 1,
            });
        }
        versions.push(("turul-mcp-framework (crates.io turul-mcp-server)".into(), v));
    }
    Ok((targets, versions))
}
