//! `mcp-tasks call` / `task …` against servers no one here wrote: the official TypeScript SDK v1
//! server with its experimental tasks API (2025-11-25 wire, `interop/ts/task-server.mjs`) and an
//! rmcp 3 server with its `TaskManager` (2026-07-28 wire, `interop/rmcp-server`). Each offers `count`
//! (status messages while it runs), `fail` (a tool error) and `ask` (an elicitation).

mod common;

use common::{repo_root, rmcp_server, text, ClientCli as Cli, ServerProcess};
use std::process::Command;

struct Peer;

impl Peer {
    fn ts_sdk() -> ServerProcess {
        let modules = repo_root().join("interop/ts/node_modules/@modelcontextprotocol/sdk");
        assert!(modules.exists(), "interop/ts/node_modules is missing: run `npm ci --prefix interop/ts` (scripts/test.sh does)");
        let mut c = Command::new("node");
        c.arg("interop/ts/task-server.mjs");
        ServerProcess::spawn(c)
    }

    fn rmcp() -> ServerProcess {
        ServerProcess::spawn(Command::new(rmcp_server()))
    }
}

/// The same scenario against a peer speaking `wire`.
fn scenario(peer: &ServerProcess, wire: &str) {
    let cli = Cli::new(&peer.url);
    let out = cli.run(&["tools"]);
    assert!(
        text(&out.stderr).contains(&format!("({wire})")),
        "{}",
        text(&out.stderr)
    );

    // A task with status messages: shown on stderr, the result on stdout.
    let out = cli.run(&["call", "count", "seconds=2"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "counted to 2\n");
    assert!(
        text(&out.stderr).contains("1 of 2"),
        "progress shown: {}",
        text(&out.stderr)
    );

    // A tool error: exit 1.
    let out = cli.run(&["call", "fail"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "fail: on purpose\n");

    // An elicitation answered with --answer, and one left unanswered (declined).
    let out = cli.run(&["call", "ask", "--answer", "confirm=yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "confirm=true\n");
    let out = cli.run(&["call", "ask"]);
    assert_eq!(
        text(&out.stdout),
        "action=decline\n",
        "{}",
        text(&out.stderr)
    );

    // Detach, then the result from a second process (no --url: the remembered reference).
    let out = cli.run(&["call", "count", "seconds=1", "--detach"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    let out = cli.run(&["task", "result", &id, "--url", &peer.url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "counted to 1\n");

    // Cancel from another process; the result then exits 3.
    let out = cli.run(&["call", "count", "seconds=60", "--detach"]);
    let long = text(&out.stdout).trim().to_string();
    let out = cli.run(&["task", "cancel", &long]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = cli.run(&["task", "result", &long]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
}

#[test]
fn the_cli_drives_the_typescript_sdk_v1_server() {
    let peer = Peer::ts_sdk();
    scenario(&peer, "2025-11-25");
    // Both directions: the server asks its question as a task the client runs, polls it with
    // tasks/get and reads the answer with tasks/result.
    let cli = Cli::new(&peer.url);
    let out = cli.run(&["call", "confirm_as_task", "--answer", "confirm=yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "as a task: confirm=true\n");
    let out = cli.run(&["call", "confirm_as_task"]);
    assert_eq!(
        text(&out.stdout),
        "as a task: action=decline\n",
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn the_cli_drives_an_rmcp_3_server() {
    scenario(&Peer::rmcp(), "2026-07-28");
}
