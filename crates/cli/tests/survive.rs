//! Work that survives a restart (issue 27): SIGTERM (a deploy) or kill -9 (a crash) in the middle of
//! a step tool (the demo's `pipeline`), a checkpointing command tool, a retry-safe tool and a tool
//! that cannot resume; started again on the same SQLite file, the first three complete, each step's
//! side effect happens once (kill -9: at most once more for the one in flight), and the fourth fails
//! saying why it could not resume.

mod common;
#[path = "../../server/tests/support/mod.rs"]
mod support;

use common::ServerProcess;
use nix::sys::signal::Signal;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use support::Client;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_tasks_off_and_the_next_start_resumes_them() {
    stop_and_resume(Signal::SIGTERM).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_no_recorded_step_and_the_next_start_resumes() {
    stop_and_resume(Signal::SIGKILL).await;
}

/// The server, its audit log (the pipeline's side effects) going to `log`.
fn start(args: &[&str], log: &Path) -> ServerProcess {
    let mut cmd = common::serve_command(args);
    common::audit::log_audit_to(&mut cmd, log);
    ServerProcess::spawn(cmd)
}

/// How many times the pipeline's step body ran for each item of task `id`, from the audit log.
fn step_runs(log: &Path, id: &str) -> BTreeMap<u64, usize> {
    common::audit::pipeline_step_runs(&[log])
        .into_iter()
        .filter(|((task, _), _)| task == id)
        .map(|((_, item), n)| (item, n))
        .collect()
}

async fn stop_and_resume(signal: Signal) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger.txt");
    let log = dir.path().join("server.log");
    let config = dir.path().join("survive.toml");
    std::fs::write(
        &config,
        format!(
            r#"[tasks]
drain_secs = 1

[[tools]]
name = "process_items"
command = ["sh", "examples/scripts/process-items.sh", "{{items}}", "{{seconds}}", "{ledger}"]
task_support = "required"
kill_grace_secs = 3

[[tools]]
name = "retry_safe"
command = ["sh", "-c", "sleep 3; echo slept"]
task_support = "required"
retry_on_restart = true
"#,
            ledger = ledger.display()
        ),
    )
    .unwrap();
    let store = format!("sqlite://{}", dir.path().join("tasks.db").display());
    let args = [
        "--demo",
        "--store",
        &store,
        "--config",
        config.to_str().unwrap(),
    ];
    let mut server = start(&args, &log);
    let mut c = Client::connect(&server.url).await;
    let mut create = async |tool: &str, args: Value| -> String {
        c.create_task(tool, args).await["taskId"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let pipeline = create("pipeline", json!({"items": 8, "seconds_per_item": 0.4})).await;
    let items = create("process_items", json!({"items": 8, "seconds": 0.4})).await;
    let retried = create("retry_safe", json!({})).await;
    let stuck = create("slow_compute", json!({"seconds": 60})).await;
    // Partway through: a few items done by both.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let pid = nix::unistd::Pid::from_raw(server.child.id() as i32);
    nix::sys::signal::kill(pid, signal).unwrap();
    let exited = common::eventually(Duration::from_secs(20), || {
        matches!(server.child.try_wait(), Ok(Some(_)))
    });
    assert!(exited, "the server stops by itself");
    let before = step_runs(&log, &pipeline);
    assert!(
        !before.is_empty() && before.len() < 8,
        "stopped partway: {before:?}"
    );
    drop(server);

    let server = start(&args, &log);
    c.url = server.url.clone();
    // The step tool: completes, each item's body ran once (kill -9: the one in flight may run
    // once more), items before the stop were done by the first run.
    let t = c.wait_terminal(&pipeline).await;
    assert_eq!(t["status"], "completed", "{t}");
    let r = c.request("tasks/result", json!({"taskId": pipeline})).await;
    let steps = r.result()["structuredContent"]["steps"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(steps.len(), 8);
    let by_first: Vec<u64> = steps
        .iter()
        .filter(|s| s["attempt"] == 1)
        .map(|s| s["item"].as_u64().unwrap())
        .collect();
    assert!(
        !by_first.is_empty() && by_first.len() < 8,
        "both runs did steps: {steps:?}"
    );
    assert_eq!(r.result()["structuredContent"]["attempt"], 2);
    let runs = step_runs(&log, &pipeline);
    assert_eq!(runs.len(), 8, "{runs:?}");
    // The history checker: the two runs did not overlap, and each step ran once (kill -9: the
    // one in flight at most once more).
    let history = common::audit::pipeline_effects(&[("server".to_string(), log.as_path())]);
    common::history::assert_no_overlap(&history);
    common::history::assert_steps_once(&history, usize::from(signal == Signal::SIGKILL));
    let extra: usize = runs.values().map(|n| n - 1).sum();
    if signal == Signal::SIGTERM {
        assert_eq!(extra, 0, "each step once: {runs:?}");
    } else {
        assert!(extra <= 1, "at most the step in flight again: {runs:?}");
    }
    for s in &by_first {
        assert_eq!(
            runs[s], 1,
            "a step recorded before the stop never runs again"
        );
    }

    // The checkpointing command: completes, every item in the ledger once (kill -9: the item in
    // flight at most twice), the second run went on from the checkpoint.
    let t = c.wait_terminal(&items).await;
    assert_eq!(t["status"], "completed", "{t}");
    let ledger = std::fs::read_to_string(&ledger).unwrap();
    let mut count = BTreeMap::<String, usize>::new();
    for line in ledger.lines() {
        let item = line.split_whitespace().nth(1).unwrap().to_string();
        *count.entry(item).or_default() += 1;
    }
    assert_eq!(count.len(), 8, "{ledger}");
    let extra: usize = count.values().map(|n| n - 1).sum();
    assert!(
        extra <= usize::from(signal == Signal::SIGKILL),
        "items done again: {ledger}"
    );
    assert!(
        ledger.contains("attempt 1") && ledger.contains("attempt 2"),
        "{ledger}"
    );
    let r = c.request("tasks/result", json!({"taskId": items})).await;
    assert!(
        r.result()["content"]
            .to_string()
            .contains("(attempt 2) did items"),
        "{}",
        r.result()
    );

    // The retry-safe tool starts over and completes.
    let t = c.wait_terminal(&retried).await;
    assert_eq!(t["status"], "completed", "{t}");

    // The one that cannot resume fails, saying why.
    let t = c.wait_terminal(&stuck).await;
    assert_eq!(t["status"], "failed");
    let message = t["statusMessage"].as_str().unwrap();
    assert!(
        message.contains("it cannot resume: its tool is not safe to run again"),
        "{message}"
    );
    if signal == Signal::SIGTERM {
        assert!(message.contains("handed off"), "{message}");
    }
    // The operator sees how each resumed.
    let base = server.url.trim_end_matches("/mcp");
    let metrics = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for kind in ["retry", "checkpoint", "steps"] {
        let line = format!("mcp_tasks_resumed_total{{kind=\"{kind}\"}} 1");
        assert!(metrics.contains(&line), "{line} in:\n{metrics}");
    }
    drop(server);
}

/// With PostgreSQL, a replica that stops hands its running task to another at once: the other is
/// woken by the release (not by polling or the 30 s lease running out), claims it within a second
/// and resumes it from the journal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_replica_hands_its_task_to_another_within_a_second() {
    let pg = common::pg::FreshSchema::new("handoff").await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("replica.toml");
    // The default lease (30 s) and sweep: only the release can explain a quick claim.
    std::fs::write(&config, "[tasks]\ndrain_secs = 1\n").unwrap();
    let args = [
        "--demo",
        "--store",
        &pg.url,
        "--config",
        config.to_str().unwrap(),
    ];
    let log_a = dir.path().join("a.log");
    let log_b = dir.path().join("b.log");
    let mut a = start(&args, &log_a);
    let b = start(&args, &log_b);
    let mut c = Client::connect(&a.url).await;
    let id = c
        .create_task("pipeline", json!({"items": 12, "seconds_per_item": 0.25}))
        .await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let pid = nix::unistd::Pid::from_raw(a.child.id() as i32);
    nix::sys::signal::kill(pid, Signal::SIGTERM).unwrap();
    assert!(common::eventually(Duration::from_secs(15), || matches!(
        a.child.try_wait(),
        Ok(Some(_))
    )));
    // The same session, on the other replica.
    c.url = b.url.clone();
    let t = c.wait_terminal(&id).await;
    assert_eq!(t["status"], "completed", "{t}");
    let r = c.request("tasks/result", json!({"taskId": id})).await;
    assert_eq!(r.result()["structuredContent"]["attempt"], 2);
    let mut runs = step_runs(&log_a, &id);
    for (item, n) in step_runs(&log_b, &id) {
        *runs.entry(item).or_default() += n;
    }
    assert_eq!(runs.len(), 12, "{runs:?}");
    assert!(runs.values().all(|n| *n == 1), "each step once: {runs:?}");
    assert!(!step_runs(&log_a, &id).is_empty() && !step_runs(&log_b, &id).is_empty());

    // From the hand-off to the resume, as the history recorded them.
    let (client, conn) = tokio_postgres::connect(&common::pg::test_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let rows = client
        .query(
            &format!(
                "SELECT at, message FROM {}.task_history WHERE task_id = $1 ORDER BY at",
                pg.name
            ),
            &[&id],
        )
        .await
        .unwrap();
    let at = |prefix: &str| -> i64 {
        rows.iter()
            .find(|r| {
                r.get::<_, Option<String>>(1)
                    .unwrap_or_default()
                    .starts_with(prefix)
            })
            .map(|r| r.get::<_, i64>(0))
            .unwrap_or_else(|| panic!("no {prefix:?} in the history"))
    };
    let gap = at("resumed after a hand-off") - at("handed off");
    eprintln!("hand-off to resume: {gap} ms");
    assert!(
        (0..1_000).contains(&gap),
        "claimed {gap} ms after the hand-off"
    );
    drop(b);
    pg.drop_schema().await;
}

/// `mcp-tasks call` follows a task through a deploy: it shows the hand-off, waits for the server to
/// come back, shows that the task resumed (attempt 2) and prints the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_follows_a_task_through_a_restart_and_shows_the_resume() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("drain.toml");
    std::fs::write(&config, "[tasks]\ndrain_secs = 1\n").unwrap();
    let store = format!("sqlite://{}", dir.path().join("tasks.db").display());
    let port = common::free_port();
    let listen = format!("127.0.0.1:{port}");
    let serve = || {
        let mut cmd = std::process::Command::new(common::bin());
        cmd.args(["serve", "--demo", "--store", &store, "--config"])
            .arg(&config)
            .args(["--listen", &listen])
            .env("RUST_LOG", "warn");
        ServerProcess::spawn(cmd)
    };
    let mut server = serve();
    let cli = common::ClientCli::new(&server.url);
    let call = cli
        // 12 items: about six left after the hand-off, so the resumed run is still working when
        // the client, which backs off after a refused connection, asks again.
        .cmd(&["call", "pipeline", "items=12", "seconds_per_item=0.4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let pid = nix::unistd::Pid::from_raw(server.child.id() as i32);
    nix::sys::signal::kill(pid, Signal::SIGTERM).unwrap();
    assert!(common::eventually(Duration::from_secs(15), || matches!(
        server.child.try_wait(),
        Ok(Some(_))
    )));
    drop(server);
    let server = serve();
    let out = tokio::task::spawn_blocking(move || call.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let (stdout, stderr) = (common::text(&out.stdout), common::text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("handed off"), "{stderr}");
    // The resumed run shows itself: the resume note, or (once the run reports, which replaces
    // the note as its status) its own progress on attempt 2.
    assert!(stderr.contains("(attempt 2)"), "{stderr}");
    assert!(stdout.contains("this is attempt 2"), "{stdout}");
    drop(server);
}

/// A retry-safe tool that kills its own server (a poison task) is resumed at each start only until
/// it has had `[tasks] max_attempts` runs; the next start fails it with "given up after N
/// attempts" and stays up, and the operator sees it counted. Without the cap every start died.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_kills_its_server_is_given_up_after_max_attempts_and_the_server_stays_up() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("poison.toml");
    std::fs::write(
        &config,
        r#"[tasks]
max_attempts = 3

[[tools]]
name = "poison"
command = ["sh", "-c", "sleep 0.5; kill -9 $MCP_TASKS_SERVER_PID; sleep 5"]
task_support = "required"
retry_on_restart = true
"#,
    )
    .unwrap();
    let store = format!("sqlite://{}", dir.path().join("tasks.db").display());
    let args = ["--store", &store, "--config", config.to_str().unwrap()];
    let log = dir.path().join("server.log");
    let mut server = start(&args, &log);
    let mut c = Client::connect(&server.url).await;
    let id = c.create_task("poison", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    // Each start runs the task again, and the task kills it; after three runs the next start
    // gives up on it and stays up.
    let mut starts = 1;
    loop {
        let died = common::eventually(Duration::from_secs(5), || {
            matches!(server.child.try_wait(), Ok(Some(_)))
        });
        if !died {
            break;
        }
        assert!(
            starts < 6,
            "the server was killed at {starts} starts in a row"
        );
        server = start(&args, &log);
        starts += 1;
    }
    assert_eq!(starts, 4, "three runs, then a start that gives up");
    let mut c = Client::connect(&server.url).await;
    let t = c.get_task(&id).await;
    assert_eq!(t["status"], "failed", "{t}");
    let message = t["statusMessage"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("given up after 3 attempts: the last one was interrupted"),
        "{message}"
    );
    assert!(message.contains("max_attempts = 3"), "{message}");
    let base = server.url.trim_end_matches("/mcp");
    let metrics = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("mcp_tasks_given_up_total 1"), "{metrics}");
    // Its history shows each attempt.
    let history = reqwest::get(format!("{base}/admin/api/tasks/{id}"))
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let text = history.to_string();
    assert!(
        text.contains("attempt 2") && text.contains("attempt 3"),
        "{text}"
    );
}

/// `mcp_tasks_runs_here` from the server's `/metrics`.
async fn runs_here(url: &str) -> f64 {
    let base = url.trim_end_matches("/mcp");
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("mcp_tasks_runs_here "))
        .and_then(|v| v.trim().parse().ok())
        .expect("mcp_tasks_runs_here in /metrics")
}

/// A durable sleep longer than `[tasks] suspend_sleeps_over_secs` (the demo pipeline's item):
/// the task stays working ("sleeping until …") while no handler runs (`mcp_tasks_runs_here` 0);
/// killed with -9 and then stopped with SIGTERM while it sleeps, the server starts again each
/// time and the task wakes on time, each item's body run once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_durable_sleep_holds_no_slot_and_wakes_on_time_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let config = dir.path().join("sleep.toml");
    std::fs::write(
        &config,
        "[tasks]\ndrain_secs = 1\nsuspend_sleeps_over_secs = 1\n",
    )
    .unwrap();
    let store = format!("sqlite://{}", dir.path().join("tasks.db").display());
    let args = [
        "--demo",
        "--store",
        &store,
        "--config",
        config.to_str().unwrap(),
    ];
    let server = start(&args, &log);
    let mut c = Client::connect(&server.url).await;
    let started = std::time::Instant::now();
    let id = c
        .create_task("pipeline", json!({"items": 2, "seconds_per_item": 6}))
        .await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    // Asleep for item 0: no handler runs, the task says until when.
    let asleep = async |c: &mut Client, url: &str| {
        for _ in 0..100 {
            let t = c.request("tasks/get", json!({"taskId": id})).await;
            let message = t.result()["statusMessage"]
                .as_str()
                .unwrap_or("")
                .to_string();
            if message.starts_with("sleeping until") && runs_here(url).await == 0.0 {
                assert_eq!(t.result()["status"], "working");
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("never suspended");
    };
    asleep(&mut c, &server.url).await;
    server.kill9();
    let server = start(&args, &log);
    c.url = server.url.clone();
    asleep(&mut c, &server.url).await;
    let pid = nix::unistd::Pid::from_raw(server.child.id() as i32);
    nix::sys::signal::kill(pid, Signal::SIGTERM).unwrap();
    let mut server = server;
    assert!(
        common::eventually(Duration::from_secs(20), || matches!(
            server.child.try_wait(),
            Ok(Some(_))
        )),
        "the server stops by itself"
    );
    drop(server);
    let server = start(&args, &log);
    c.url = server.url.clone();
    let t = c.wait_terminal(&id).await;
    let took = started.elapsed();
    assert_eq!(t["status"], "completed", "{t}");
    // Two sleeps of 6 s, each woken on time (within the wake's own slack and a restart).
    assert!(took >= Duration::from_secs(12), "{took:?}");
    assert!(took < Duration::from_secs(20), "woke late: {took:?}");
    let runs = step_runs(&log, &id);
    assert_eq!(
        runs.values().copied().collect::<Vec<_>>(),
        [1, 1],
        "{runs:?}"
    );
}

/// The approval_flow demo on SQLite waits for `approve` (suspended: no slot held, the status
/// says until when) across a kill -9 and a SIGTERM of the server; the signal sent after the
/// second restart wakes it at once, and it finishes with the signal's payload, its run's attempt
/// still 1 (a suspended wait is no interrupted run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_for_a_signal_holds_no_slot_across_restarts_and_the_signal_finishes_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let config = dir.path().join("signal.toml");
    std::fs::write(
        &config,
        "[tasks]\ndrain_secs = 1\nsuspend_sleeps_over_secs = 1\n",
    )
    .unwrap();
    let store = format!("sqlite://{}", dir.path().join("tasks.db").display());
    let args = [
        "--demo",
        "--store",
        &store,
        "--config",
        config.to_str().unwrap(),
    ];
    let server = start(&args, &log);
    let mut c = Client::connect(&server.url).await;
    let id = c
        .create_task(
            "approval_flow",
            json!({"sleep_seconds": 0, "timeout_seconds": 600}),
        )
        .await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let waiting = async |c: &mut Client, url: &str| {
        for _ in 0..100 {
            let t = c.request("tasks/get", json!({"taskId": id})).await;
            let message = t.result()["statusMessage"]
                .as_str()
                .unwrap_or("")
                .to_string();
            if message.starts_with("waiting for the signal `approve` until")
                && runs_here(url).await == 0.0
            {
                assert_eq!(t.result()["status"], "working");
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("never suspended waiting for its signal");
    };
    waiting(&mut c, &server.url).await;
    server.kill9();
    let server = start(&args, &log);
    c.url = server.url.clone();
    waiting(&mut c, &server.url).await;
    let pid = nix::unistd::Pid::from_raw(server.child.id() as i32);
    nix::sys::signal::kill(pid, Signal::SIGTERM).unwrap();
    let mut server = server;
    assert!(
        common::eventually(Duration::from_secs(20), || matches!(
            server.child.try_wait(),
            Ok(Some(_))
        )),
        "the server stops by itself"
    );
    drop(server);
    let server = start(&args, &log);
    c.url = server.url.clone();
    waiting(&mut c, &server.url).await;
    let sent = std::time::Instant::now();
    let r = c
        .request(
            "io.github.mcp-tasks/signal",
            json!({"taskId": id, "name": "approve", "payload": {"ticket": 42}}),
        )
        .await;
    assert_eq!(r.result()["signal"]["seq"], 1);
    let t = c.wait_terminal(&id).await;
    assert_eq!(t["status"], "completed", "{t}");
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "{:?}",
        sent.elapsed()
    );
    let result = c
        .request("tasks/result", json!({"taskId": id}))
        .await
        .result()
        .clone();
    let out = &result["structuredContent"];
    assert_eq!(out["approval"], json!({"ticket": 42}), "{result}");
    assert_eq!(out["attempt"], 1, "{result}");
}
