//! Interop with the official SDK clients: the TypeScript SDK v1 (`@modelcontextprotocol/sdk`, pinned in
//! interop/ts/package.json) and the Python SDK v1 (`mcp`, pinned in interop/python/requirements.txt)
//! run a task tool end to end over Streamable HTTP and over stdio: create, poll, progress, result,
//! cancel, list; and the TypeScript client running the server's question as its own task. The scripts
//! print one line per check and exit non-zero on any failure.
//!
//! Their dependencies are installed by `scripts/test.sh` (the README's test command).

mod common;

use common::{bin, repo_root, ServerProcess};
use std::path::PathBuf;
use std::process::Command;

fn run_checks(program: &PathBuf, script: &str, transport: &str, target: &str) {
    let out = Command::new(program)
        .arg(script)
        .args([transport, target])
        .current_dir(repo_root())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    let summary = stdout.lines().last().unwrap_or("");
    assert!(
        out.status.success() && summary.ends_with(" 0 failed"),
        "{script} {transport} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

fn node() -> PathBuf {
    let modules = repo_root().join("interop/ts/node_modules/@modelcontextprotocol/sdk");
    assert!(modules.exists(), "interop/ts/node_modules is missing: run `npm ci --prefix interop/ts` (scripts/test.sh does)");
    PathBuf::from("node")
}

fn python() -> PathBuf {
    common::wrap_client::python()
}

#[test]
fn typescript_sdk_v1_client_over_http() {
    let node = node();
    let server = ServerProcess::start(&["--demo", "--store", "memory:"]);
    run_checks(&node, "interop/ts/tasks-interop.mjs", "http", &server.url);
}

#[test]
fn typescript_sdk_v1_client_over_stdio() {
    run_checks(
        &node(),
        "interop/ts/tasks-interop.mjs",
        "stdio",
        bin().to_str().unwrap(),
    );
}

#[test]
fn python_sdk_v1_client_over_http() {
    let py = python();
    let server = ServerProcess::start(&["--demo", "--store", "memory:"]);
    run_checks(&py, "interop/python/tasks_interop.py", "http", &server.url);
}

#[test]
fn python_sdk_v1_client_over_stdio() {
    run_checks(
        &python(),
        "interop/python/tasks_interop.py",
        "stdio",
        bin().to_str().unwrap(),
    );
}

/// Both directions of 2025-11-25: the TypeScript SDK v1 client declares that it runs elicitations
/// as tasks (with its task store); our server asks `confirm_delete`'s question that way, polls the
/// client's task and takes its result as the answer.
#[test]
fn typescript_sdk_v1_client_hosts_the_servers_question_as_a_task() {
    let server = ServerProcess::start(&["--demo", "--store", "memory:"]);
    let out = Command::new(node())
        .args(["interop/ts/hosted-elicitation.mjs", &server.url])
        .current_dir(repo_root())
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.lines().last() == Some("2 passed, 0 failed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
