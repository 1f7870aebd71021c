//! `mcp-tasks wrap -- COMMAND` (issue 28): one line of a host's config puts durable tasks in front of
//! any MCP server. Driven over stdio by the official Python SDK client sending no tasks (a plain
//! call past the budget, then `task_result`), restarted on the same command (the task started before
//! is found in the per-command store and its result read), and refusing what it cannot wrap with one
//! clear line.

mod common;

use common::{bin, repo_root, text};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// `wrap_client.py PHASE [TASK_ID]` against this build's binary.
fn client(data: &Path, markers: &Path, flags: &str, phase: &str, task: Option<&str>) -> String {
    common::wrap_client::run(&bin(), data, markers, flags, phase, task)
}

#[test]
fn a_host_that_speaks_no_tasks_gets_the_result_through_the_budget() {
    let data = tempfile::tempdir().unwrap();
    let markers = tempfile::tempdir().unwrap();
    client(data.path(), markers.path(), "--sync-budget 1", "all", None);
    // The tasks went to this user's file named after the wrapped server.
    let dir = data.path().join("mcp-tasks/wrap");
    let files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        files
            .iter()
            .any(|f| f.starts_with("upstream_server-") && f.ends_with(".db")),
        "{files:?}"
    );
}

#[test]
fn a_restarted_host_finds_the_task_it_started_and_reads_its_result() {
    let data = tempfile::tempdir().unwrap();
    let markers = tempfile::tempdir().unwrap();
    let flags = "--sync-budget 1 --retry-on-restart";
    let first = client(data.path(), markers.path(), flags, "start", None);
    let task = first
        .lines()
        .find_map(|l| l.strip_prefix("task "))
        .filter(|t| *t != "None")
        .unwrap_or_else(|| panic!("no task id in:\n{first}"))
        .to_string();
    // The SDK's client stopped the wrap as hosts do: stdin closed, and two seconds later (the
    // wrap still draining the running task) SIGTERM to the wrap's process group. The wrapped
    // server leads a group of its own, so the signal reached only the wrap: the task was handed
    // on, not failed by the upstream dying under it (which a later read would report).
    let signalled: Vec<String> = std::fs::read_dir(markers.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("sigterm-"))
        .collect();
    assert!(
        signalled.is_empty(),
        "the host's signal to the wrap reached the wrapped server: {signalled:?}"
    );
    // The host started the same command again: the same store, the task resumed and finished.
    client(data.path(), markers.path(), flags, "finish", Some(&task));
}

/// `mcp-tasks wrap ARGS` as a host would start it, with nothing on stdin; its exit and stderr.
fn wrap_fails(args: &[&str]) -> String {
    let data = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(bin());
    cmd.arg("wrap")
        .args(args)
        .env("XDG_DATA_HOME", data.path())
        .stdin(Stdio::null());
    let out = common::output_within(&mut cmd, Duration::from_secs(60));
    assert_eq!(
        out.status.code(),
        Some(1),
        "{args:?}: {}",
        text(&out.stderr)
    );
    let stderr = text(&out.stderr);
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "one clear line: {stderr}");
    errors[0].to_string()
}

#[test]
fn what_cannot_be_wrapped_is_said_in_one_line() {
    let missing = wrap_fails(&["--", "/nonexistent/mcp-server", "--flag"]);
    assert!(
        missing.contains("/nonexistent/mcp-server") && missing.contains("No such file"),
        "{missing}"
    );
    let exits = wrap_fails(&["--", "sh", "-c", "echo broken >&2; exit 3"]);
    assert!(exits.contains("exited (exit status: 3)"), "{exits}");
    let silent = wrap_fails(&[
        "--connect-timeout",
        "2",
        "--",
        "sh",
        "-c",
        "echo not json; sleep 30",
    ]);
    assert!(silent.contains("did not answer initialize"), "{silent}");
    let none = wrap_fails(&[]);
    assert!(none.contains("no server to wrap"), "{none}");
}

/// The TypeScript SDK v1 client with tasks, starting `mcp-tasks wrap` over stdio as a host would:
/// the wrapped server's tools as task tools, progress, an elicitation answered, a cancel that
/// reaches the wrapped server's handler, a plain call.
#[test]
fn the_typescript_sdk_client_with_tasks_through_wrap_over_stdio() {
    assert!(
        repo_root()
            .join("interop/ts/node_modules/@modelcontextprotocol/sdk")
            .exists(),
        "interop/ts/node_modules is missing: run scripts/test.sh"
    );
    let data = tempfile::tempdir().unwrap();
    let markers = tempfile::tempdir().unwrap();
    let command = serde_json::json!([
        bin(),
        "wrap",
        "--prefix",
        "py",
        "--sync-budget",
        "1",
        "--",
        common::wrap_client::python(),
        repo_root().join("interop/python/upstream_server.py"),
        markers.path(),
        "--stdio"
    ]);
    let mut cmd = Command::new("node");
    cmd.arg("interop/ts/gateway-client.mjs")
        .arg(format!("stdio:{command}"))
        .arg(markers.path())
        .current_dir(repo_root())
        .env("XDG_DATA_HOME", data.path())
        .env("RUST_LOG", "warn");
    let out = common::output_within(&mut cmd, Duration::from_secs(120));
    let stdout = text(&out.stdout);
    assert!(
        out.status.success() && stdout.trim_end().ends_with(" 0 failed"),
        "gateway-client.mjs over wrap failed ({}):\n{stdout}\n{}",
        out.status,
        text(&out.stderr)
    );
}

/// What `wrap` in front of the Python SDK v1 server writes on stderr at `level` from its start to
/// its stop (stdin closed once its tools are registered).
fn wrap_stderr(level: &str) -> String {
    use std::io::{BufRead, BufReader};
    let data = tempfile::tempdir().unwrap();
    let markers = tempfile::tempdir().unwrap();
    let mut child = Command::new(bin())
        .arg("wrap")
        .arg("--")
        .arg(common::wrap_client::python())
        .arg(repo_root().join("interop/python/upstream_server.py"))
        .arg(markers.path())
        .arg("--stdio")
        .env("XDG_DATA_HOME", data.path())
        .env("RUST_LOG", level)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut log = String::new();
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while !log.contains("tools registered") {
        let left = until.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                log.push_str(&line);
                log.push('\n');
            }
            Err(_) => panic!("wrap never registered its tools:\n{log}"),
        }
    }
    // A moment for what the upstream says late, then the host goes away.
    std::thread::sleep(Duration::from_millis(500));
    drop(child.stdin.take());
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > until {
            let _ = child.kill();
            panic!("wrap did not stop once stdin closed:\n{log}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(2)) {
        log.push_str(&line);
        log.push('\n');
    }
    log
}

#[test]
fn the_discovery_probe_s_complaints_from_an_upstream_are_logged_at_debug_not_info() {
    // The Python SDK v1 answers `server/discover` with a validation error for every request type it
    // knows, each on stderr: about 90 lines a start.
    let info = wrap_stderr("info");
    assert!(
        !info.contains("server/discover"),
        "the probe's complaints at info:\n{info}"
    );
    let debug = wrap_stderr("debug");
    let probe_lines: Vec<&str> = debug
        .lines()
        .filter(|l| l.contains("mcp_tasks_client::stderr") && l.contains("server/discover"))
        .collect();
    assert!(
        !probe_lines.is_empty(),
        "not relayed at debug either:\n{debug}"
    );
    assert!(
        probe_lines.iter().all(|l| l.contains("DEBUG")),
        "{probe_lines:?}"
    );
}
