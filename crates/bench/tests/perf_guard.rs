//! The performance guard of the test command: counts the instructions our server spends per task
//! created, and per task run end to end (create, poll, result), under callgrind, and fails when either
//! is more than twice the figure recorded here. Instruction counts repeat from run to run on a busy
//! machine where timings do not, so the guard catches a 2× slowdown without tripping on noise.
//!
//! The figures are for the test command's (debug) build, 2025-11-25 wire, 4 clients, on the memory
//! store (the request path) and on SQLite (the durable path beside it: issue 30's ratio of the two is
//! kept from sliding back).
//! When a change makes the request path cheaper, lower them in the same commit; when a change must
//! make it dearer, say why in the commit that raises them. `docs/bench/` has the release figures.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Instructions per create, measured when this guard was set (debug build): 514k (three runs within
/// 0.3%).
const CREATE_INSTRUCTIONS: u64 = 514_000;
/// Instructions per end-to-end task (create, polls, tasks/result), measured likewise: 1,066k (three runs
/// within 1.5%).
const E2E_INSTRUCTIONS: u64 = 1_066_000;
/// Instructions per create on SQLite (a fresh file): 818k when the SQLite guard was set (issue 30,
/// after the writer's record cache), 786k after the writer dropped its savepoint per job, the
/// history moved into the task's row and the writer held its two statements, against 576k on
/// memory in the same run; 810k with the change log (against 579k on memory). The log cut the
/// release build's figure by 8% (`docs/bench/history.md`); in this debug build its frame encoding
/// and hashing are unoptimized, and 200 creates flush on the timer rather than in batches. The log
/// was removed again (issue 49: SQLite's file the whole truth); the figure stays, as the guard
/// fails only past twice it and the release suite moved within its spread.
const SQLITE_CREATE_INSTRUCTIONS: u64 = 810_000;
/// Instructions per end-to-end task on SQLite, measured likewise: 1,378k when set (a poll waits for
/// a finish being written instead of polling again), 1,349k after the same three steps, against
/// 1,111k on memory in the same run; 1,378k with the change log (1,116k on memory; see the create).
const SQLITE_E2E_INSTRUCTIONS: u64 = 1_378_000;

fn bench() -> &'static str {
    env!("CARGO_BIN_EXE_mcp-tasks-bench")
}

/// Runs the server on `store` (`memory` or `sqlite`, a fresh file) under callgrind, drives `ops`
/// operations of `mode` (none when 0), stops it and returns the instructions it executed.
fn server_instructions(store: &str, mode: &str, ops: usize) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("callgrind.out");
    let store = match store {
        "sqlite" => format!("sqlite://{}", dir.path().join("guard.db").display()),
        _ => "memory:".to_string(),
    };
    let mut server = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .args([bench(), "serve-ours", "--store", &store])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("valgrind is installed (scripts/test.sh installs it)");
    let stdout = server.stdout.take().unwrap();
    let line = BufReader::new(stdout).lines().next().unwrap().unwrap();
    let url = line
        .strip_prefix("listening on ")
        .unwrap()
        .trim()
        .to_string();
    if ops > 0 {
        let started = Instant::now();
        let drive = Command::new(bench())
            .args(["drive", "--url", &url, "--wire", "2025", "--mode", mode])
            .args(["--clients", "4", "--ops", &ops.to_string()])
            .output()
            .unwrap();
        assert!(
            drive.status.success(),
            "the load failed: {}",
            String::from_utf8_lossy(&drive.stderr)
        );
        let report = String::from_utf8_lossy(&drive.stdout);
        assert!(report.contains(" 0 errors"), "{report}");
        println!(
            "{} (under callgrind, {:?})",
            report.trim(),
            started.elapsed()
        );
    }
    // SIGTERM ends the server; callgrind writes its counts on the way out.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let output = server.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    let refs = log
        .lines()
        .find_map(|l| l.split("I   refs:").nth(1))
        .unwrap_or_else(|| panic!("no instruction count in callgrind's output:\n{log}"));
    refs.trim().replace(',', "").parse().unwrap()
}

fn check(store: &str, mode: &str, ops: usize, recorded: u64) {
    let idle = server_instructions(store, mode, 0);
    let loaded = server_instructions(store, mode, ops);
    let per_op = loaded.saturating_sub(idle) / ops as u64;
    println!(
        "{store} {mode}: {per_op} instructions per operation (recorded {recorded}; the guard fails \
         above {})",
        2 * recorded
    );
    assert!(
        per_op <= 2 * recorded,
        "{mode} on {store} costs {per_op} instructions, more than twice the {recorded} recorded in \
         this guard: find what made the request path dearer (see crates/bench/tests/perf_guard.rs)"
    );
}

#[test]
fn a_create_costs_at_most_twice_its_recorded_instructions() {
    check("memory", "create", 400, CREATE_INSTRUCTIONS);
}

#[test]
fn an_end_to_end_task_costs_at_most_twice_its_recorded_instructions() {
    check("memory", "e2e", 200, E2E_INSTRUCTIONS);
}

#[test]
fn a_durable_create_costs_at_most_twice_its_recorded_instructions() {
    check("sqlite", "create", 400, SQLITE_CREATE_INSTRUCTIONS);
}

#[test]
fn a_durable_end_to_end_task_costs_at_most_twice_its_recorded_instructions() {
    check("sqlite", "e2e", 200, SQLITE_E2E_INSTRUCTIONS);
}
