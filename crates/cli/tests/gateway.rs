//! `mcp-tasks serve` as a gateway: the reference server `@modelcontextprotocol/server-everything`
//! (pinned in interop/everything) behind it over stdio, its tools served as our durable task tools,
//! driven by our client on both wires.

mod common;

use common::{bin, repo_root, text, ClientCli as Cli, ServerProcess};
use std::process::Command;

const WIRES: [&[&str]; 2] = [&[], &["--no-2026"]];

fn everything() -> String {
    let main = repo_root().join(
        "interop/everything/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    assert!(main.exists(), "interop/everything/node_modules is missing: run `npm ci --prefix interop/everything` (scripts/test.sh does)");
    main.display().to_string()
}

fn config(dir: &std::path::Path, body: &str) -> String {
    let path = dir.join("gateway.toml");
    std::fs::write(&path, body).unwrap();
    path.display().to_string()
}

fn args<'a>(wire: &[&'a str], rest: &[&'a str]) -> Vec<&'a str> {
    let mut v = rest.to_vec();
    v.extend_from_slice(wire);
    v
}

#[test]
fn server_everything_behind_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        &format!(
            r#"
[[upstreams]]
name = "everything"
command = ["node", "{}", "stdio"]
prefix = "ev"
exclude = ["toggle-simulated-logging", "toggle-subscriber-updates"]

[upstreams.tool_overrides.trigger-long-running-operation]
task_support = "required"
timeout_secs = 4
"#,
            everything()
        ),
    );
    let server = ServerProcess::start(&["--store", "memory:", "--config", &cfg]);
    let cli = Cli::new(&server.url);

    // The upstream's tools, prefixed, without the excluded ones, with the task support set.
    let out = cli.run(&["tools", "--no-2026"]);
    let tools = text(&out.stdout);
    assert!(
        tools
            .lines()
            .any(|l| l.starts_with("ev_echo ") && l.contains("optional")),
        "{tools}"
    );
    assert!(
        tools
            .lines()
            .any(|l| l.starts_with("ev_trigger-long-running-operation") && l.contains("required")),
        "{tools}"
    );
    assert!(!tools.contains("toggle-simulated-logging"), "{tools}");

    for wire in WIRES {
        // A plain upstream call, now a task with the upstream's progress as its own.
        let out = cli.run(&args(
            wire,
            &[
                "call",
                "ev_trigger-long-running-operation",
                "duration=2",
                "steps=2",
            ],
        ));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stdout).contains("Long running operation completed"),
            "{}",
            text(&out.stdout)
        );
        assert!(
            text(&out.stderr).contains("1/2"),
            "{wire:?}: progress came through: {}",
            text(&out.stderr)
        );

        // Longer than its timeout: the task fails, saying so, and the upstream call is cancelled.
        let out = cli.run(&args(
            wire,
            &[
                "call",
                "ev_trigger-long-running-operation",
                "duration=10",
                "steps=5",
            ],
        ));
        assert_eq!(out.status.code(), Some(1), "{wire:?}");
        assert!(
            text(&out.stderr).contains("timed out after 4 s"),
            "{}",
            text(&out.stderr)
        );

        // The upstream's elicitation becomes the task's question, answered by our client.
        let out = cli.run(&args(
            wire,
            &[
                "call",
                "ev_trigger-elicitation-request",
                "--answer",
                "name=Ann",
                "--answer",
                "email=ann@example.com",
            ],
        ));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stdout).contains("\"name\": \"Ann\""),
            "{wire:?}: {}",
            text(&out.stdout)
        );

        // Cancel a running call from another process.
        let out = cli.run(&args(
            wire,
            &[
                "call",
                "ev_trigger-long-running-operation",
                "duration=3",
                "steps=3",
                "--detach",
            ],
        ));
        let id = text(&out.stdout).trim().to_string();
        let out = cli.run(&["task", "cancel", &id]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let out = cli.run(&["task", "result", &id]);
        assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));

        // An upstream tool that runs only as a task upstream: the gateway's task follows the
        // upstream task (its status messages become ours).
        let out = cli.run(&args(
            wire,
            &["call", "ev_simulate-research-query", "topic=tides"],
        ));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stdout).contains("# Research Report: tides"),
            "{}",
            text(&out.stdout)
        );

        // Structured content passes through.
        let out = cli.run(&args(wire, &["call", "ev_get-sum", "a=2", "b=3"]));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(text(&out.stdout).contains('5'), "{}", text(&out.stdout));
    }
}

#[test]
fn a_tool_name_taken_twice_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let ev = everything();
    let cfg = config(
        dir.path(),
        &format!(
            "[[upstreams]]\nname = \"one\"\ncommand = [\"node\", \"{ev}\", \"stdio\"]\ntools = [\"echo\"]\n\n[[upstreams]]\nname = \"two\"\ncommand = [\"node\", \"{ev}\", \"stdio\"]\ntools = [\"echo\"]\n"
        ),
    );
    let out = Command::new(bin())
        .args([
            "serve",
            "--store",
            "memory:",
            "--listen",
            "127.0.0.1:0",
            "--config",
            &cfg,
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("upstream \"two\": tool \"echo\" is already taken") && err.contains("prefix"),
        "{err}"
    );

    // A tool the upstream does not have, and an upstream that is not there.
    let cfg = config(
        dir.path(),
        &format!("[[upstreams]]\nname = \"one\"\ncommand = [\"node\", \"{ev}\", \"stdio\"]\ntools = [\"nope\"]\n"),
    );
    let out = Command::new(bin())
        .args([
            "serve",
            "--store",
            "memory:",
            "--listen",
            "127.0.0.1:0",
            "--config",
            &cfg,
        ])
        .output()
        .unwrap();
    assert!(
        text(&out.stderr).contains("\"nope\", which the upstream does not offer"),
        "{}",
        text(&out.stderr)
    );
    let cfg = config(
        dir.path(),
        "[[upstreams]]\nname = \"gone\"\ncommand = [\"/nonexistent/server\"]\n",
    );
    let out = Command::new(bin())
        .args([
            "serve",
            "--store",
            "memory:",
            "--listen",
            "127.0.0.1:0",
            "--config",
            &cfg,
        ])
        .output()
        .unwrap();
    assert!(
        text(&out.stderr).contains("upstream \"gone\""),
        "{}",
        text(&out.stderr)
    );
}
