//! `pg-cost`: what one task costs PostgreSQL, in figures any machine can show. Our server runs on
//! PostgreSQL behind a [`Tap`] (one replica, then several on one schema), the load runs tasks end to
//! end (create, the tool's finish, `tasks/get` until finished), and per task the report gives the
//! statements (by text), round trips and commits the tap saw, the transactions and WAL flushes
//! PostgreSQL counted (`pg_stat_database`, `pg_stat_wal`), and the CPU time of PostgreSQL's own
//! processes (from `/proc`, when the server is on this machine). Beside it, the same figures for a
//! `pgbench` transaction that inserts one row, and the throughput of one replica against several.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::json;

use crate::credentials::Credential;
use crate::load::{self, Mode};
use crate::pg_tap::{Counts, Tap};
use crate::targets::{postgres_url, Target};
use crate::wire::Wire;
use mcp_tasks_engine::store::postgres::relay::ALONE_AFTER;

/// What to measure.
pub struct CostArgs {
    /// Tasks run end to end for each replica count (and `pgbench` transactions).
    pub tasks: usize,
    /// Concurrent clients (and `pgbench` connections).
    pub clients: usize,
    /// The wire the load speaks.
    pub wire: Wire,
    /// Replica counts to measure, e.g. `[1, 3]`.
    pub replicas: Vec<usize>,
    /// Operations per throughput run (0: no throughput runs).
    pub throughput_ops: usize,
    /// Rounds of throughput runs (each replica count once per round); the best of each is kept.
    pub rounds: usize,
    /// Where `postgres-cost.md` and `postgres-cost.json` go (none: printed only).
    pub out: Option<PathBuf>,
}

/// PostgreSQL's own counters (database-wide: every client of the database counts).
#[derive(Clone, Copy, Debug, Default)]
struct DbStats {
    /// Transactions committed (read-only ones too).
    xact_commit: i64,
    /// WAL flushes to disk (`pg_stat_wal.wal_sync`, PostgreSQL 14 and later).
    wal_sync: Option<i64>,
    /// WAL bytes written.
    wal_bytes: Option<i64>,
}

impl DbStats {
    /// The transactions the read of these figures made (each query its own).
    fn queries(&self) -> i64 {
        1 + i64::from(self.wal_sync.is_some())
    }
}

/// One side of a measurement.
#[derive(Clone, Debug, Default)]
struct Snapshot {
    counts: Counts,
    db: DbStats,
    /// PostgreSQL's CPU seconds (none when it is not on this machine).
    pg_cpu: Option<PgCpu>,
}

/// Per-task figures of one measured run.
#[derive(Clone, Debug, Default)]
struct Measured {
    label: String,
    units: usize,
    counts: Counts,
    transactions: f64,
    wal_syncs: Option<f64>,
    wal_bytes: Option<f64>,
    pg_cpu_us: Option<f64>,
    pg_background_us: Option<f64>,
    server_cpu_us: Option<f64>,
    polls: Option<f64>,
    errors: usize,
}

impl Measured {
    fn per(&self, n: u64) -> f64 {
        n as f64 / self.units.max(1) as f64
    }
}

/// A monitor connection for PostgreSQL's counters.
struct Monitor {
    client: tokio_postgres::Client,
    /// Whether PostgreSQL's processes can be read in this machine's `/proc`.
    local: bool,
}

impl Monitor {
    async fn stats(&self) -> Result<DbStats> {
        let row = self
            .client
            .query_one(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
                &[],
            )
            .await
            .context("read pg_stat_database")?;
        let mut stats = DbStats {
            xact_commit: row.get(0),
            ..DbStats::default()
        };
        // pg_stat_wal came with PostgreSQL 14; older servers get no WAL figures.
        if let Ok(row) = self
            .client
            .query_one(
                "SELECT wal_sync::bigint, wal_bytes::bigint FROM pg_stat_wal",
                &[],
            )
            .await
        {
            stats.wal_sync = Some(row.get(0));
            stats.wal_bytes = Some(row.get(1));
        }
        Ok(stats)
    }

    async fn snapshot(&self, tap: &Tap) -> Result<Snapshot> {
        Ok(Snapshot {
            counts: tap.counts(),
            db: self.stats().await?,
            pg_cpu: if self.local { pg_cpu() } else { None },
        })
    }
}

/// PostgreSQL statistics of a backend reach the shared counters when it has been idle for a moment
/// (at most once a second) or when it exits; a measurement waits this long at each edge.
const STATS_SETTLE: Duration = Duration::from_millis(1_500);

/// PostgreSQL's CPU seconds, and the share of its background processes in them.
#[derive(Clone, Copy, Debug, Default)]
struct PgCpu {
    total: f64,
    /// The WAL writer, checkpointer, background writer, autovacuum and the like (not a client's
    /// backend).
    background: f64,
}

/// The CPU time of every PostgreSQL process on this machine (user and system), plus what its
/// postmaster's children that ended have used (`cutime`, `cstime`): backends that exit during a
/// measurement are not lost. None when no PostgreSQL process is visible.
fn pg_cpu() -> Option<PgCpu> {
    let mut procs = Vec::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        let fields: Vec<f64> = stat[close + 1..]
            .split_whitespace()
            .skip(1) // the state letter
            .map(|v| v.parse().unwrap_or(0.0))
            .collect();
        // After the state: ppid is field 4, utime 14, stime 15, cutime 16, cstime 17.
        if fields.len() > 14 {
            procs.push((pid, comm.to_string(), fields));
        }
    }
    let is_pg: std::collections::HashSet<u32> = procs
        .iter()
        .filter(|(_, comm, _)| comm == "postgres" || comm == "postmaster")
        .map(|(pid, _, _)| *pid)
        .collect();
    if is_pg.is_empty() {
        return None;
    }
    let mut cpu = PgCpu::default();
    for (pid, _, f) in &procs {
        if !is_pg.contains(pid) {
            continue;
        }
        let own = f[10] + f[11];
        cpu.total += own;
        if !is_pg.contains(&(f[0] as u32)) {
            cpu.total += f[12] + f[13]; // the postmaster: the children it reaped
            cpu.background += own;
            continue;
        }
        // A process title names its role; a client's backend shows its user and database.
        let title = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let title = String::from_utf8_lossy(&title);
        if [
            "checkpointer",
            "writer",
            "autovacuum",
            "launcher",
            "archiver",
            "stats",
            "walsender",
        ]
        .iter()
        .any(|role| title.contains(role))
        {
            cpu.background += own;
        }
    }
    cpu.total /= 100.0;
    cpu.background /= 100.0;
    Some(cpu)
}

/// The database's address (`MCP_TASKS_TEST_PG`, else 127.0.0.1:5432/test), and a URL that reaches
/// the same database through `via`.
async fn upstream() -> Result<(SocketAddr, tokio_postgres::Config)> {
    let url = postgres_url();
    let config: tokio_postgres::Config = url
        .parse()
        .with_context(|| format!("{url} is not a PostgreSQL URL"))?;
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => bail!("pg-cost reads the protocol on TCP: {url} must name a host, not a socket"),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let addr = tokio::net::lookup_host((host.as_str(), port))
        .await
        .with_context(|| format!("resolve {host}"))?
        .next()
        .with_context(|| format!("{host} has no address"))?;
    Ok((addr, config))
}

fn escape(part: &str) -> String {
    part.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn url_via(config: &tokio_postgres::Config, via: SocketAddr) -> String {
    let user = config.get_user().unwrap_or("postgres");
    let password = config
        .get_password()
        .map(|p| format!(":{}", escape(&String::from_utf8_lossy(p))))
        .unwrap_or_default();
    let db = config.get_dbname().unwrap_or(user);
    format!("postgres://{}{password}@{via}/{}", escape(user), escape(db))
}

/// Runs the whole measurement and writes (or prints) the report.
pub async fn run(args: CostArgs) -> Result<()> {
    let (addr, config) = upstream().await?;
    let (client, connection) = config
        .connect(tokio_postgres::NoTls)
        .await
        .with_context(|| format!("connect to {}", postgres_url()))?;
    tokio::spawn(connection);
    let version: String = client.query_one("SHOW server_version", &[]).await?.get(0);
    let monitor = Monitor {
        client,
        local: addr.ip().is_loopback() && pg_cpu().is_some(),
    };
    if !monitor.local {
        eprintln!("PostgreSQL is not on this machine: its CPU time is left out");
    }
    let exe = std::env::current_exe()?.display().to_string();
    let mut runs = Vec::new();
    let mut schemas = Vec::new();
    for &replicas in &args.replicas {
        let schema = format!("bench_cost_{}_{replicas}", std::process::id());
        schemas.push(schema.clone());
        eprintln!(
            "pg-cost: {replicas} replica(s), {} tasks end to end…",
            args.tasks
        );
        runs.push(ours(&args, &monitor, &exe, addr, &config, replicas, &schema).await?);
    }
    let pgbench_schema = format!("bench_cost_pgbench_{}", std::process::id());
    schemas.push(pgbench_schema.clone());
    eprintln!("pg-cost: pgbench, {} one-row inserts…", args.tasks);
    let pgbench = match pgbench(&args, &monitor, addr, &config, &pgbench_schema).await {
        Ok(m) => Some(m),
        Err(e) => {
            eprintln!("pg-cost: no pgbench figures: {e:#}");
            None
        }
    };
    let mut throughput = Vec::new();
    if args.throughput_ops > 0 {
        for round in 0..args.rounds.max(1) {
            for &replicas in &args.replicas {
                let schema = format!("bench_cost_rate_{}_{replicas}_{round}", std::process::id());
                schemas.push(schema.clone());
                eprintln!(
                    "pg-cost: throughput, {replicas} replica(s), round {}…",
                    round + 1
                );
                let rates = rates(&args, &exe, replicas, &schema).await?;
                throughput.push((replicas, rates));
            }
        }
    }
    for schema in &schemas {
        let _ = monitor
            .client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .await;
    }
    let report = Report {
        args: &args,
        version,
        runs,
        pgbench,
        throughput,
    };
    let markdown = report.markdown();
    println!("{markdown}");
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out)?;
        std::fs::write(out.join("postgres-cost.md"), &markdown)?;
        std::fs::write(
            out.join("postgres-cost.json"),
            serde_json::to_string_pretty(&report.json())?,
        )?;
        eprintln!("wrote {}", out.join("postgres-cost.md").display());
    }
    Ok(())
}

/// `replicas` replicas of our server on `store` (a PostgreSQL URL), all in `schema`.
fn replicas_on(args: &CostArgs, exe: &str, store: String, replicas: usize, schema: &str) -> Target {
    Target {
        name: format!("mcp-tasks postgres ×{replicas}"),
        wire: args.wire,
        command: vec![
            exe.to_string(),
            "serve-ours".into(),
            "--store".into(),
            store,
            "--pg-schema".into(),
            schema.to_string(),
        ],
        replicas,
    }
}

/// Our server with `replicas` replicas on one schema, through a tap.
async fn ours(
    args: &CostArgs,
    monitor: &Monitor,
    exe: &str,
    addr: SocketAddr,
    config: &tokio_postgres::Config,
    replicas: usize,
    schema: &str,
) -> Result<Measured> {
    let tap = Tap::start(addr).await?;
    let target = replicas_on(args, exe, url_via(config, tap.addr), replicas, schema);
    let running = target.start()?;
    let started = tokio::time::Instant::now();
    // Every pooled connection prepares its statements once; the measurement starts after that.
    let warm = (args.tasks / 4).max(50);
    load::run(
        &running.url,
        args.wire,
        Mode::E2e,
        args.clients,
        warm,
        0,
        Duration::from_secs(120),
        Credential::None,
    )
    .await?;
    // And after a replica alone has found out it is (until then its relay sends every event).
    tokio::time::sleep_until(started + ALONE_AFTER + Duration::from_millis(500)).await;
    tokio::time::sleep(STATS_SETTLE).await;
    let before = monitor.snapshot(&tap).await?;
    let server_before = running.cpu_seconds();
    let figures = load::run(
        &running.url,
        args.wire,
        Mode::E2e,
        args.clients,
        args.tasks,
        0,
        Duration::from_secs(600),
        Credential::None,
    )
    .await?;
    let server_cpu = running.cpu_seconds() - server_before;
    let counts = tap.counts();
    // Stopping the server ends its connections; their backends then report their statistics.
    drop(running);
    tokio::time::sleep(STATS_SETTLE).await;
    let mut after = monitor.snapshot(&tap).await?;
    after.counts = counts;
    let mut m = measured(
        format!(
            "mcp-tasks, {replicas} replica{}",
            if replicas == 1 { "" } else { "s" }
        ),
        figures.ops,
        &before,
        &after,
    );
    m.server_cpu_us = Some(server_cpu * 1e6 / figures.ops.max(1) as f64);
    m.polls = Some(figures.polls);
    m.errors = figures.errors;
    Ok(m)
}

fn measured(label: String, units: usize, before: &Snapshot, after: &Snapshot) -> Measured {
    let per = |v: f64| v / units.max(1) as f64;
    let delta = |a: Option<i64>, b: Option<i64>| match (a, b) {
        (Some(a), Some(b)) => Some(per((a - b) as f64)),
        _ => None,
    };
    Measured {
        label,
        units,
        counts: after.counts.since(&before.counts),
        // The monitor's own reads at the window's start are transactions of the window: the read of
        // the commit counter, and the read of the WAL counters where there are some.
        transactions: per(
            (after.db.xact_commit - before.db.xact_commit - before.db.queries()).max(0) as f64,
        ),
        wal_syncs: delta(after.db.wal_sync, before.db.wal_sync),
        wal_bytes: delta(after.db.wal_bytes, before.db.wal_bytes),
        pg_cpu_us: match (after.pg_cpu, before.pg_cpu) {
            (Some(a), Some(b)) => Some(per(a.total - b.total) * 1e6),
            _ => None,
        },
        pg_background_us: match (after.pg_cpu, before.pg_cpu) {
            (Some(a), Some(b)) => Some(per(a.background - b.background) * 1e6),
            _ => None,
        },
        server_cpu_us: None,
        polls: None,
        errors: 0,
    }
}

/// `pgbench` inserting one row per transaction (prepared statements, `clients` connections),
/// through a tap, into a table of its own schema.
async fn pgbench(
    args: &CostArgs,
    monitor: &Monitor,
    addr: SocketAddr,
    config: &tokio_postgres::Config,
    schema: &str,
) -> Result<Measured> {
    monitor
        .client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema};
             CREATE TABLE {schema}.probe (id bigserial PRIMARY KEY, owner text NOT NULL,
                                          created_at bigint NOT NULL, body text NOT NULL)"
        ))
        .await
        .context("create pgbench's table")?;
    let dir = tempfile::tempdir()?;
    let script = dir.path().join("insert.sql");
    std::fs::write(
        &script,
        format!(
            "INSERT INTO {schema}.probe (owner, created_at, body) VALUES ('anonymous', 1, 'one row');\n"
        ),
    )?;
    let tap = Tap::start(addr).await?;
    let clients = args.clients.max(1);
    let per_client = (args.tasks / clients).max(1);
    let mut command = tokio::process::Command::new("pgbench");
    command
        .args(["-n", "-M", "prepared", "-f"])
        .arg(&script)
        .args(["-c", &clients.to_string(), "-j", "2"])
        .args(["-t", &per_client.to_string()])
        .args(["-h", "127.0.0.1", "-p", &tap.addr.port().to_string()])
        .args(["-U", config.get_user().unwrap_or("postgres")])
        .arg(config.get_dbname().unwrap_or("postgres"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    // Plain TCP, so the tap can read it (libpq would otherwise try TLS and GSS first).
    command
        .env("PGSSLMODE", "disable")
        .env("PGGSSENCMODE", "disable");
    if let Some(p) = config.get_password() {
        command.env("PGPASSWORD", String::from_utf8_lossy(p).to_string());
    }
    let before = monitor.snapshot(&tap).await?;
    let output = command
        .output()
        .await
        .context("run pgbench (Debian: postgresql-client)")?;
    if !output.status.success() {
        bail!(
            "pgbench failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    tokio::time::sleep(STATS_SETTLE).await;
    let after = monitor.snapshot(&tap).await?;
    Ok(measured(
        "pgbench, one-row insert".into(),
        per_client * clients,
        &before,
        &after,
    ))
}

/// Create and end-to-end rates of `replicas` replicas on a fresh schema, without a tap.
async fn rates(args: &CostArgs, exe: &str, replicas: usize, schema: &str) -> Result<(f64, f64)> {
    let target = replicas_on(args, exe, postgres_url(), replicas, schema);
    let running = target.start()?;
    let mut rates = [0.0; 2];
    for (i, mode) in [Mode::Create, Mode::E2e].into_iter().enumerate() {
        let f = load::run(
            &running.url,
            args.wire,
            mode,
            args.clients,
            args.throughput_ops,
            0,
            Duration::from_secs(120),
            Credential::None,
        )
        .await?;
        rates[i] = f.rate;
    }
    Ok((rates[0], rates[1]))
}

/// How one row of the report's table shows a column.
type Cell<'a> = Box<dyn Fn(&Measured) -> String + 'a>;

struct Report<'a> {
    args: &'a CostArgs,
    version: String,
    runs: Vec<Measured>,
    pgbench: Option<Measured>,
    throughput: Vec<(usize, (f64, f64))>,
}

fn fixed(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.digits$}"))
}

impl Report<'_> {
    fn columns(&self) -> Vec<&Measured> {
        self.runs.iter().chain(self.pgbench.as_ref()).collect()
    }

    /// The best create and end-to-end rate of each replica count.
    fn best_rates(&self) -> Vec<(usize, f64, f64)> {
        let mut best: Vec<(usize, f64, f64)> = Vec::new();
        for &(replicas, (create, e2e)) in &self.throughput {
            match best.iter_mut().find(|b| b.0 == replicas) {
                Some(b) => {
                    b.1 = b.1.max(create);
                    b.2 = b.2.max(e2e);
                }
                None => best.push((replicas, create, e2e)),
            }
        }
        best
    }

    fn markdown(&self) -> String {
        let cols = self.columns();
        let mut s = String::new();
        s.push_str("# What one task costs PostgreSQL\n\n");
        s.push_str(&format!(
            "Generated by `cargo run --release -p mcp-tasks-bench -- pg-cost` \
             (PostgreSQL {}, {} wire, {} clients, {} tasks end to end per column: create, the \
             tool's finish, `tasks/get` until finished{}). Per task; for pgbench, per \
             transaction. Statements, round trips and commits are read from the protocol by a counting \
             proxy in front of the database; transactions and WAL flushes are PostgreSQL's own counters \
             (`pg_stat_database`, `pg_stat_wal`), which count the monitor's reads too; CPU is PostgreSQL's \
             processes' user and system time from `/proc`.\n\n",
            self.version,
            self.args.wire.label(),
            self.args.clients,
            self.args.tasks,
            if self.args.wire == Wire::Session2025 {
                ", `tasks/result`"
            } else {
                ""
            }
        ));
        s.push_str("| per task |");
        for c in &cols {
            s.push_str(&format!(" {} |", c.label));
        }
        s.push_str("\n|---|");
        for _ in &cols {
            s.push_str("---:|");
        }
        s.push('\n');
        let pgbench_cpu = self.pgbench.as_ref().and_then(|p| p.pg_cpu_us);
        let rows: Vec<(&str, Cell<'_>)> = vec![
            (
                "statements",
                Box::new(|m| format!("{:.2}", m.per(m.counts.statement_total()))),
            ),
            (
                "round trips",
                Box::new(|m| format!("{:.2}", m.per(m.counts.round_trips))),
            ),
            (
                "syncs (ReadyForQuery)",
                Box::new(|m| format!("{:.2}", m.per(m.counts.syncs))),
            ),
            (
                "write commits",
                Box::new(|m| format!("{:.2}", m.per(m.counts.write_commits))),
            ),
            (
                "read-only transactions",
                Box::new(|m| format!("{:.2}", m.per(m.counts.read_commits))),
            ),
            (
                "statements prepared",
                Box::new(|m| format!("{:.3}", m.per(m.counts.parses))),
            ),
            (
                "transactions (pg_stat_database)",
                Box::new(|m| format!("{:.2}", m.transactions)),
            ),
            (
                "WAL flushes (pg_stat_wal)",
                Box::new(|m| fixed(m.wal_syncs, 2)),
            ),
            ("WAL bytes", Box::new(|m| fixed(m.wal_bytes, 0))),
            ("PostgreSQL CPU, µs", Box::new(|m| fixed(m.pg_cpu_us, 0))),
            (
                "of which background processes, µs",
                Box::new(|m| fixed(m.pg_background_us, 0)),
            ),
            (
                "PostgreSQL CPU ÷ pgbench's",
                Box::new(move |m| match (m.pg_cpu_us, pgbench_cpu) {
                    (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
                    _ => "–".into(),
                }),
            ),
            (
                "our server's CPU, µs",
                Box::new(|m| fixed(m.server_cpu_us, 0)),
            ),
            ("tasks/get per task", Box::new(|m| fixed(m.polls, 2))),
            (
                "notifications delivered",
                Box::new(|m| format!("{:.2}", m.per(m.counts.notifications))),
            ),
        ];
        for (name, cell) in &rows {
            s.push_str(&format!("| {name} |"));
            for c in &cols {
                s.push_str(&format!(" {} |", cell(c)));
            }
            s.push('\n');
        }
        for run in &self.runs {
            if run.errors > 0 {
                s.push_str(&format!(
                    "\n{}: {} tasks failed in the load.\n",
                    run.label, run.errors
                ));
            }
            s.push_str(&format!(
                "\n## Statements per task, {}\n\n| statement | per task |\n|---|---:|\n",
                run.label
            ));
            let mut statements: Vec<_> = run.counts.statements.iter().collect();
            statements.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            for (text, n) in statements {
                s.push_str(&format!(
                    "| `{}` | {:.3} |\n",
                    text.replace('|', "\\|"),
                    run.per(*n)
                ));
            }
        }
        let best = self.best_rates();
        if !best.is_empty() {
            s.push_str(&format!(
                "\n## Replicas on one database\n\nTasks per second, best of {} round(s) of {} \
                 operations each, without the counting proxy; every request goes to the next replica.\n\n\
                 | replicas | create/s | e2e/s | create vs one | e2e vs one |\n|---:|---:|---:|---:|---:|\n",
                self.args.rounds.max(1),
                self.args.throughput_ops
            ));
            let one = best.iter().find(|b| b.0 == 1).copied();
            for (replicas, create, e2e) in &best {
                let (rc, re) = match one {
                    Some((_, c1, e1)) if c1 > 0.0 && e1 > 0.0 => {
                        (format!("{:.2}×", create / c1), format!("{:.2}×", e2e / e1))
                    }
                    _ => ("–".into(), "–".into()),
                };
                s.push_str(&format!(
                    "| {replicas} | {create:.0} | {e2e:.0} | {rc} | {re} |\n"
                ));
            }
        }
        if let Some(one) = self.runs.first() {
            if let Some(cpu) = one.pg_cpu_us.filter(|c| *c > 0.0) {
                s.push_str(&format!(
                    "\n## What a database host carries\n\nAt {cpu:.0} µs of PostgreSQL CPU per task \
                     ({}), a host whose N cores do nothing else runs out of CPU at N × {:.0} tasks/s: \
                     {:.0} on 4 cores, {:.0} on 16, {:.0} on 64, if the work spreads over the cores \
                     (it does for separate connections; one connection is one process).",
                    one.label,
                    1e6 / cpu,
                    4e6 / cpu,
                    16e6 / cpu,
                    64e6 / cpu
                ));
                if let Some(syncs) = one.wal_syncs.filter(|w| *w > 0.0) {
                    s.push_str(&format!(
                        " WAL flushes are {syncs:.2} per task here; with group commit one flush \
                         serves every commit waiting for it, so the disk caps the rate at flushes/s \
                         × tasks per flush, not at 1/fsync time."
                    ));
                }
                s.push('\n');
            }
        }
        s
    }

    fn json(&self) -> serde_json::Value {
        let column = |m: &Measured| {
            json!({
                "label": m.label,
                "units": m.units,
                "statements": m.per(m.counts.statement_total()),
                "round_trips": m.per(m.counts.round_trips),
                "syncs": m.per(m.counts.syncs),
                "write_commits": m.per(m.counts.write_commits),
                "read_commits": m.per(m.counts.read_commits),
                "rollbacks": m.per(m.counts.rollbacks),
                "errors_in_protocol": m.per(m.counts.errors),
                "parses": m.per(m.counts.parses),
                "transactions": m.transactions,
                "wal_syncs": m.wal_syncs,
                "wal_bytes": m.wal_bytes,
                "pg_cpu_us": m.pg_cpu_us,
                "pg_background_us": m.pg_background_us,
                "server_cpu_us": m.server_cpu_us,
                "polls": m.polls,
                "notifications_delivered": m.per(m.counts.notifications),
                "failed_tasks": m.errors,
                "by_statement": m.counts.statements.iter()
                    .map(|(k, v)| (k.clone(), json!(m.per(*v))))
                    .collect::<serde_json::Map<_, _>>(),
            })
        };
        json!({
            "postgres_version": self.version,
            "wire": self.args.wire.label(),
            "clients": self.args.clients,
            "tasks": self.args.tasks,
            "runs": self.runs.iter().map(column).collect::<Vec<_>>(),
            "pgbench": self.pgbench.as_ref().map(column),
            "throughput": self.best_rates().iter()
                .map(|(r, c, e)| json!({"replicas": r, "create_per_s": c, "e2e_per_s": e}))
                .collect::<Vec<_>>(),
        })
    }
}
