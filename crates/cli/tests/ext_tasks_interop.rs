//! Interop with the official MCP Tasks client, `@modelcontextprotocol/ext-tasks` (pinned, with the
//! TypeScript SDK v2 client `@modelcontextprotocol/client` it runs on, in
//! interop/ext-tasks/package.json), against `mcp-tasks serve --demo` over Streamable HTTP, once per
//! wire: 2025-11-25 (the SDK's default `initialize`; ext-tasks drives the session-based tasks wire) and
//! 2026-07-28 (the SDK pinned to 2026-07-28; ext-tasks drives the `io.modelcontextprotocol/tasks`
//! extension). Each run checks a task with a result, a failing tool, a JSON-RPC error, cancel, an
//! elicitation and a sampling request answered through the package's input handler, and hand-off of a
//! task from one client to another by task id. The script prints one line per check and
//! `N passed, M failed` last.
//!
//! Its dependencies are installed by `scripts/test.sh` (the README's test command).

mod common;

use common::{repo_root, ServerProcess};
use std::process::Command;

const SCRIPT: &str = "interop/ext-tasks/ext-tasks-interop.mjs";

fn run_checks(wire: &str) {
    let modules =
        repo_root().join("interop/ext-tasks/node_modules/@modelcontextprotocol/ext-tasks");
    assert!(
        modules.exists(),
        "interop/ext-tasks/node_modules is missing: run `npm ci --prefix interop/ext-tasks` (scripts/test.sh does)"
    );
    let server = ServerProcess::start(&["--demo", "--store", "memory:"]);
    let out = Command::new("node")
        .arg(SCRIPT)
        .args([wire, server.url.as_str()])
        .current_dir(repo_root())
        .output()
        .unwrap_or_else(|e| panic!("cannot run node: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    let summary = stdout.lines().last().unwrap_or("");
    assert!(
        out.status.success() && summary.ends_with(" 0 failed"),
        "{SCRIPT} {wire} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

#[test]
fn ext_tasks_client_on_2025_11_25() {
    run_checks("2025");
}

#[test]
fn ext_tasks_client_on_2026_07_28() {
    run_checks("2026");
}
