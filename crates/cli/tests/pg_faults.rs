//! Losing the database mid-load: every connection of a replica terminated by PostgreSQL
//! (`pg_terminate_backend`), and a PostgreSQL server of the test's own restarted, while a client
//! creates tasks. Requests that hit the outage fail with a JSON-RPC error that says what failed; the
//! replica reconnects by itself; every task that got a `CreateTaskResult` exists and finishes, once.

mod common;
#[path = "../../server/tests/support/mod.rs"]
mod support;

use common::{is_root, ServerProcess};
use serde_json::json;
use std::time::{Duration, Instant};
use support::Client;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_connections_are_killed_recovers_and_loses_nothing() {
    let pg = common::pg::FreshSchema::new("faults").await;
    // The replica's connections carry a name of their own, so only they are terminated.
    let app = format!("mcp-tasks-fault-{}", &mcp_tasks_engine::random_id()[..8]);
    let url = format!("{}&application_name={app}", pg.url);
    let a = ServerProcess::start(&["--demo", "--store", url.as_str()]);
    let mut c = Client::connect(&a.url).await;

    // Tasks that will finish while the connections keep being killed: their outcomes must still land.
    let mut created = Vec::new();
    for _ in 0..10 {
        let t = c.create_task("slow_compute", json!({"seconds": 1})).await;
        created.push(t["taskId"].as_str().unwrap().to_string());
    }
    // From 0.5 s to 3 s: every connection of the replica terminated every 30 ms.
    let killer = tokio::spawn(common::pg::terminate_connections(
        vec![app.clone()],
        Duration::from_millis(500),
        Duration::from_millis(2_500),
    ));

    let mut failures = Vec::new();
    let mut last_ok = false;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        let ex = c
            .request(
                "tools/call",
                json!({"name": "slow_compute", "arguments": {"seconds": 0.1}, "task": {"ttl": 60_000}}),
            )
            .await;
        let reply = ex
            .reply
            .clone()
            .expect("a JSON-RPC reply, even during the outage");
        match reply.get("result") {
            Some(r) => {
                created.push(r["task"]["taskId"].as_str().unwrap().to_string());
                last_ok = true;
            }
            None => {
                failures.push(reply["error"].clone());
                last_ok = false;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let terminated = killer.await.unwrap();
    assert!(terminated > 0, "the replica's connections were terminated");
    assert!(
        last_ok,
        "the replica serves again after the outage: {failures:?}"
    );
    for e in &failures {
        assert_eq!(e["code"], -32603, "{e}");
        let message = e["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("store") || message.contains("PostgreSQL"),
            "the error says what failed: {e}"
        );
    }
    // Every task that was acknowledged exists and finishes (slow_compute always completes).
    for id in &created {
        let t = c.wait_terminal(id).await;
        assert_eq!(t["status"], "completed", "{t}");
    }
    eprintln!(
        "{} tasks created, {} requests failed during the outage, {terminated} connections terminated",
        created.len(),
        failures.len()
    );
    drop(a);
    pg.drop_schema().await;
}

/// A PostgreSQL server of the test's own (initdb in a temporary directory, on a free loopback port),
/// so that restarting it disturbs no other test.
struct PrivatePostgres {
    bin: std::path::PathBuf,
    data: std::path::PathBuf,
    port: u16,
    _dir: tempfile::TempDir,
}

impl PrivatePostgres {
    fn start() -> PrivatePostgres {
        let mut versions: Vec<std::path::PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.path().join("bin"))
                    .collect()
            })
            .unwrap_or_default();
        versions.sort();
        let bin = versions.pop().filter(|b| b.join("initdb").exists()).expect(
            "PostgreSQL's server programs (initdb, pg_ctl) under /usr/lib/postgresql/*/bin",
        );
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        if is_root() {
            // initdb refuses to run as root: the server's files belong to `postgres`.
            let out = std::process::Command::new("id")
                .args(["-u", "postgres"])
                .output()
                .unwrap();
            let uid: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
            std::os::unix::fs::chown(&data, Some(uid), None).unwrap();
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let pg = PrivatePostgres {
            bin,
            data,
            port,
            _dir: dir,
        };
        pg.run(
            "initdb",
            &[
                "-D",
                pg.data.to_str().unwrap(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
        );
        pg.ctl(&["start", "-w"]);
        pg
    }

    fn run(&self, program: &str, args: &[&str]) {
        let program = self.bin.join(program);
        let mut cmd = if is_root() {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&program);
            c
        } else {
            std::process::Command::new(&program)
        };
        let out = cmd.args(args).output().expect("run a PostgreSQL program");
        assert!(
            out.status.success(),
            "{} {args:?}: {}{}",
            program.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn ctl(&self, args: &[&str]) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.data.display()
        );
        let log = self.data.join("server.log");
        let mut all = vec![
            "-D",
            self.data.to_str().unwrap(),
            "-o",
            options.as_str(),
            "-l",
            log.to_str().unwrap(),
        ];
        all.extend_from_slice(args);
        self.run("pg_ctl", &all);
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let data = self.data.to_str().unwrap().to_string();
        let _ = std::panic::catch_unwind(|| {
            self.run("pg_ctl", &["-D", &data, "stop", "-m", "immediate"])
        });
    }
}

/// The database restarts (stopped, down for a second and a half, started again) while a client
/// creates tasks: requests fail with a JSON-RPC error naming the store while it is down, the replica
/// reconnects by itself, and every acknowledged task completes, run once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restart_under_load_loses_nothing() {
    let pg = PrivatePostgres::start();
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs.log");
    let config = dir.path().join("restart.toml");
    std::fs::write(
        &config,
        format!(
            r#"[auth]
anonymous_max_running_tasks = 1000
anonymous_calls_per_minute = 100000

[tasks]
lease_secs = 10

[[tools]]
name = "logged"
command = ["sh", "-c", "echo \"$MCP_TASKS_TASK_ID\" >> {}; sleep 1; echo done"]
task_support = "required"
"#,
            runs.display()
        ),
    )
    .unwrap();
    let url = pg.url();
    let a = ServerProcess::start(&[
        "--store",
        url.as_str(),
        "--config",
        config.to_str().unwrap(),
    ]);
    let mut c = support::stateless::Stateless::with_tasks(&a.url);

    let restarted = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1_000));
        pg.ctl(&["stop", "-m", "fast", "-w"]);
        let down = Instant::now();
        std::thread::sleep(Duration::from_millis(1_500));
        pg.ctl(&["start", "-w"]);
        eprintln!("database down for {:?}", down.elapsed());
        pg
    });
    let mut created = Vec::new();
    let mut failures = Vec::new();
    let started = Instant::now();
    let mut last_ok = false;
    while started.elapsed() < Duration::from_secs(7) {
        let answer = c
            .call("tools/call", json!({"name": "logged", "arguments": {}}))
            .await;
        match answer.body["result"]["taskId"].as_str() {
            Some(id) => {
                created.push(id.to_string());
                last_ok = true;
            }
            None => {
                failures.push(answer.body.clone());
                last_ok = false;
            }
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    let _pg = restarted.join().expect("the database restarted");
    assert!(
        !failures.is_empty(),
        "requests failed while the database was down"
    );
    assert!(
        last_ok,
        "the replica serves again after the restart: {:?}",
        failures.last()
    );
    for e in &failures {
        assert_eq!(e["error"]["code"], -32603, "{e}");
        let message = e["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("store") || message.contains("PostgreSQL"),
            "the error says what failed: {e}"
        );
    }
    for id in &created {
        let t = support::stateless::wait_status(&mut c, id, &["completed", "failed", "cancelled"])
            .await;
        assert_eq!(t["status"], "completed", "{t}");
    }
    let log = std::fs::read_to_string(&runs).unwrap_or_default();
    for id in &created {
        assert_eq!(log.lines().filter(|l| l == id).count(), 1, "{id} ran once");
    }
    eprintln!(
        "{} tasks created, {} requests failed while the database restarted",
        created.len(),
        failures.len()
    );
    drop(a);
}

/// Replica A cut off from PostgreSQL (a relay that stops forwarding: no reset, no answer) while it
/// runs a retry-safe command tool that records its node, attempt and time every 0.1 s: A stops
/// the run before its lease runs out by its own clock (killing the program's process group), and
/// replica B takes the task over only after that, within three lease lengths of the cut. The
/// history checker finds no two runs of the task overlapping. Before fencing, A's program went on
/// for 10 s after B had taken the task over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cut_off_from_postgresql_stops_its_run_before_another_takes_it_over() {
    let p = Partition::new("partition", "", "ticker", "", "").await;
    let a = p.replica("a", true);
    let b = p.replica("b", false);
    let mut c = Client::connect(&a.url).await;
    let id = c.create_task("ticker", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let history = || p.history();
    let ran_on = |node: &str| p.ran_on(node);
    assert!(
        common::eventually(Duration::from_secs(10), || ran_on("a")),
        "the task ran on a"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cut = Instant::now();
    p.relay.cut();
    assert!(
        common::eventually(Duration::from_secs(9), || ran_on("b")),
        "b took the task over within three lease lengths of the cut: {:?}",
        common::history::runs(&history())
    );
    let took_over = cut.elapsed();
    // Both sides go on for a while: any overlap would show now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let h = history();
    common::history::assert_no_overlap(&h);
    let runs = common::history::runs(&h);
    let runs = &runs[&id];
    assert_eq!(
        runs.iter().map(|r| r.node.as_str()).collect::<Vec<_>>(),
        ["a", "b"],
        "{runs:?}"
    );
    assert_eq!(runs[1].attempt, 2, "{runs:?}");
    let gap = (runs[1].first_ns - runs[0].last_ns) as f64 / 1e9;
    eprintln!(
        "a's last effect {gap:.3} s before b's first; b took over {:.1} s after the cut",
        took_over.as_secs_f64()
    );
    drop(a);
    drop(b);
    p.pg.drop_schema().await;
}

/// Two replicas of one PostgreSQL schema, one of which reaches it through a relay the test can
/// cut, and a retry-safe command tool `tool` that records its task, node, attempt and time every
/// 0.1 s in `effects` (its shell line begins with `prelude`).
struct Partition {
    pg: common::pg::FreshSchema,
    _dir: tempfile::TempDir,
    effects: std::path::PathBuf,
    config: std::path::PathBuf,
    relay: common::relay::Relay,
    through_relay: String,
}

impl Partition {
    /// `tasks` and `tool_extra` are more lines of `[tasks]` and of the tool.
    async fn new(tag: &str, tasks: &str, tool: &str, prelude: &str, tool_extra: &str) -> Partition {
        let pg = common::pg::FreshSchema::new(tag).await;
        let dir = tempfile::tempdir().unwrap();
        let effects = dir.path().join("effects.log");
        let config = dir.path().join("replica.toml");
        std::fs::write(
            &config,
            format!(
                r#"[tasks]
lease_secs = 3
{tasks}
[[tools]]
name = "{tool}"
command = ["sh", "-c", "{prelude}while :; do echo \"$MCP_TASKS_TASK_ID $NODE $MCP_TASKS_ATTEMPT $(date +%s%N)\" >> {log}; sleep 0.1; done"]
task_support = "required"
retry_on_restart = true
{tool_extra}"#,
                log = effects.display()
            ),
        )
        .unwrap();
        let (named, target) = pg_address(&pg.url);
        let relay = common::relay::Relay::start(target);
        let through_relay = pg
            .url
            .replacen(&named, &format!("127.0.0.1:{}", relay.port), 1);
        assert_ne!(through_relay, pg.url);
        Partition {
            pg,
            _dir: dir,
            effects,
            config,
            relay,
            through_relay,
        }
    }

    /// A replica named `node` (the tool's `$NODE`), through the relay when `cut_off_later`.
    fn replica(&self, node: &str, cut_off_later: bool) -> ServerProcess {
        let url = if cut_off_later {
            &self.through_relay
        } else {
            &self.pg.url
        };
        let config = self.config.to_str().unwrap();
        let mut cmd = common::serve_command(&["--store", url, "--config", config]);
        cmd.env("NODE", node);
        ServerProcess::spawn(cmd)
    }

    fn history(&self) -> Vec<common::history::Effect> {
        read_effects(&self.effects)
    }

    fn ran_on(&self, node: &str) -> bool {
        self.history().iter().any(|e| e.node == node)
    }
}

/// The checker itself: runs one after another pass, a run that goes on into the next fails.
#[test]
fn the_history_checker_finds_overlapping_runs() {
    use common::history::{assert_no_overlap, Effect};
    let e = |node: &str, attempt: u64, at_ns: u128| Effect {
        task: "t".into(),
        node: node.into(),
        attempt,
        at_ns,
        step: None,
    };
    assert_no_overlap(&[e("a", 1, 1), e("a", 1, 5), e("b", 2, 6), e("b", 2, 9)]);
    let overlapping = [e("a", 1, 1), e("b", 2, 4), e("a", 1, 5)];
    let caught = std::panic::catch_unwind(|| assert_no_overlap(&overlapping));
    assert!(caught.is_err(), "an overlap is caught");
}

/// The host and port of a PostgreSQL URL (`postgres://user@HOST:PORT/db?…`) as written, and the
/// address they name.
fn pg_address(url: &str) -> (String, std::net::SocketAddr) {
    let after_scheme = url.split("://").nth(1).expect("a URL");
    let authority = after_scheme.split(['/', '?']).next().unwrap();
    let named = authority.rsplit('@').next().unwrap().to_string();
    let host_port = if named.contains(':') {
        named.clone()
    } else {
        format!("{named}:5432")
    };
    use std::net::ToSocketAddrs;
    let addr = host_port
        .to_socket_addrs()
        .expect("the test database's address")
        .next()
        .expect("an address");
    (named, addr)
}

/// The ticker's effects: "TASK NODE ATTEMPT NS" lines.
fn read_effects(path: &std::path::Path) -> Vec<common::history::Effect> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some(common::history::Effect {
                task: w.next()?.to_string(),
                node: w.next()?.to_string(),
                attempt: w.next()?.parse().ok()?,
                at_ns: w.next()?.parse().ok()?,
                step: None,
            })
        })
        .collect()
}

/// Every PostgreSQL backend of the server terminated, twice, while the demo's `pipeline` records
/// its steps: each store error inside the run is transient and retried, so the task completes with
/// every step run once. Before, the first error in a step write failed the task for good ("the
/// step journal failed: … terminating connection due to administrator command").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backends_terminated_twice_during_a_pipeline_do_not_fail_it() {
    let pg = common::pg::FreshSchema::new("blip").await;
    let app = format!("mcp-tasks-blip-{}", &mcp_tasks_engine::random_id()[..8]);
    let url = format!("{}&application_name={app}", pg.url);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let mut cmd = common::serve_command(&["--demo", "--store", url.as_str()]);
    common::audit::log_audit_to(&mut cmd, &log);
    let a = ServerProcess::spawn(cmd);
    let mut c = Client::connect(&a.url).await;
    let id = c
        .create_task("pipeline", json!({"items": 30, "seconds_per_item": 0.05}))
        .await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    // Twice, for 0.3 s: every connection of the server terminated every 30 ms.
    let mut terminated = 0;
    for _ in 0..2 {
        terminated += common::pg::terminate_connections(
            vec![app.clone()],
            Duration::from_millis(300),
            Duration::from_millis(300),
        )
        .await;
    }
    assert!(terminated > 0, "the server's connections were terminated");
    let t = c.wait_terminal(&id).await;
    assert_eq!(t["status"], "completed", "{t}");
    let runs: Vec<usize> = common::audit::pipeline_step_runs(&[&log])
        .into_iter()
        .filter(|((task, _), _)| *task == id)
        .map(|(_, n)| n)
        .collect();
    assert_eq!(runs.len(), 30, "every step ran: {runs:?}");
    assert!(runs.iter().all(|n| *n == 1), "each step once: {runs:?}");
    eprintln!("{terminated} connections terminated during the pipeline");
    drop(a);
    pg.drop_schema().await;
}

/// The fence holds inside the grace of a hand-off too: replica A, SIGTERMed, hands off a command
/// tool that ignores SIGTERM (its grace is long), and is cut off from PostgreSQL meanwhile. A's
/// fence ends the run (killing the program) before the lease it last wrote runs out; B takes the
/// task over only after that. The history checker finds no overlap. Before, the fence skipped
/// runs already told to stop, so this one went on through its whole grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_ends_a_run_in_its_hand_off_grace_before_the_lease_runs_out() {
    let p = Partition::new(
        "fencegrace",
        "drain_secs = 0\nhand_off_grace_secs = 30\n",
        "stubborn",
        "trap '' TERM; ",
        "kill_grace_secs = 60\n",
    )
    .await;
    let a = p.replica("a", true);
    let mut c = Client::connect(&a.url).await;
    let id = c.create_task("stubborn", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let history = || p.history();
    let ran_on = |node: &str| p.ran_on(node);
    assert!(
        common::eventually(Duration::from_secs(10), || ran_on("a")),
        "the task ran on a"
    );
    // The hand-off begins (the program ignores SIGTERM: it is in its grace), then the cut.
    let pid = nix::unistd::Pid::from_raw(a.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    p.relay.cut();
    let b = p.replica("b", false);
    assert!(
        common::eventually(Duration::from_secs(12), || ran_on("b")),
        "b took the task over: {:?}",
        common::history::runs(&history())
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let h = history();
    common::history::assert_no_overlap(&h);
    let runs = common::history::runs(&h);
    assert_eq!(
        runs[&id]
            .iter()
            .map(|r| r.node.as_str())
            .collect::<Vec<_>>(),
        ["a", "b"],
        "{runs:?}"
    );
    drop(a);
    drop(b);
    p.pg.drop_schema().await;
}
