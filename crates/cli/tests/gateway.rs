//! `mcp-tasks serve` as a gateway: the reference server `@modelcontextprotocol/server-everything`
//! (pinned in interop/everything) behind it over stdio, its tools served as our durable task tools,
//! driven by our client on both wires.

mod common;
mod rmcp_scenario;

use common::{repo_root, serve_command, text, ClientCli as Cli, ServerProcess};
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

/// `[[upstreams]] scopes` hold for every tool of the upstream, a tool's override in its place:
/// a key holding only the upstream's scope calls its tools but not the one that needs more.
#[test]
fn upstream_tools_need_the_scopes_of_their_upstream_or_their_override() {
    let dir = tempfile::tempdir().unwrap();
    let hash = |k: &str| mcp_tasks_server::auth::hash_key(k);
    let cfg = config(
        dir.path(),
        &format!(
            r#"
[[auth.keys]]
principal = "reader"
sha256 = "{reader}"
scopes = ["ev:read"]

[[auth.keys]]
principal = "ops"
sha256 = "{ops}"

[[upstreams]]
name = "everything"
command = ["node", "{ev}", "stdio"]
tools = ["echo", "get-sum"]
scopes = ["ev:read"]

[upstreams.tool_overrides.get-sum]
scopes = ["ev:read", "ev:math"]
"#,
            reader = hash("key-reader"),
            ops = hash("key-ops"),
            ev = everything()
        ),
    );
    let server = ServerProcess::start(&["--store", "memory:", "--config", &cfg]);
    let cli = Cli::new(&server.url);
    let call = |wire: &[&str], key: &str, rest: &[&str]| {
        let mut a = vec!["call", "--key", key];
        a.extend_from_slice(rest);
        cli.run(&args(wire, &a))
    };
    for wire in WIRES {
        let out = call(wire, "key-reader", &["echo", "message=hi"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        assert!(text(&out.stdout).contains("hi"), "{}", text(&out.stdout));
        let out = call(wire, "key-reader", &["get-sum", "a=1", "b=2"]);
        assert_ne!(out.status.code(), Some(0), "{wire:?}");
        assert!(
            text(&out.stderr).contains("requires scope(s) ev:math"),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        let out = call(wire, "key-ops", &["get-sum", "a=1", "b=2"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        assert!(text(&out.stdout).contains('3'), "{}", text(&out.stdout));
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
    let out = serve_command(&["--store", "memory:", "--config", &cfg])
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
    let out = serve_command(&["--store", "memory:", "--config", &cfg])
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
    let out = serve_command(&["--store", "memory:", "--config", &cfg])
        .output()
        .unwrap();
    assert!(
        text(&out.stderr).contains("upstream \"gone\""),
        "{}",
        text(&out.stderr)
    );
}

/// A gateway in front of server-everything over stdio, its tools under their own names.
fn everything_gateway(dir: &std::path::Path) -> ServerProcess {
    let cfg = config(
        dir,
        &format!(
            "[[upstreams]]\nname = \"everything\"\ncommand = [\"node\", \"{}\", \"stdio\"]\n",
            everything()
        ),
    );
    ServerProcess::start(&["--store", "memory:", "--config", &cfg])
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let out = Command::new("pgrep")
        .args(["-P", &pid.to_string()])
        .output()
        .unwrap();
    text(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

#[test]
fn an_upstream_killed_mid_call_fails_its_task_with_its_last_words_and_is_started_again() {
    let dir = tempfile::tempdir().unwrap();
    let server = everything_gateway(dir.path());
    let cli = Cli::new(&server.url);
    let out = cli.run(&[
        "call",
        "trigger-long-running-operation",
        "duration=60",
        "steps=60",
        "--detach",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    // The call reached the upstream: its progress is the task's.
    assert!(
        common::eventually(std::time::Duration::from_secs(20), || {
            let out = cli.run(&["task", "get", &id, "--json"]);
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            v["progress"].as_f64().is_some_and(|p| p >= 1.0)
        }),
        "no progress from the upstream"
    );
    let upstream = children_of(server.child.id());
    assert_eq!(upstream.len(), 1, "one upstream process: {upstream:?}");
    let killed = Command::new("kill")
        .args(["-9", &upstream[0].to_string()])
        .status()
        .unwrap();
    assert!(killed.success());

    // The task fails at once, saying how the upstream ended and what it last wrote on stderr.
    let out = cli.run(&["task", "result", &id]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(err.contains("upstream everything"), "{err}");
    assert!(err.contains("signal: 9"), "{err}");
    assert!(err.contains("Starting default (STDIO) server"), "{err}");

    // The gateway starts the upstream again; its tools work as before.
    assert!(
        common::eventually(std::time::Duration::from_secs(20), || {
            let out = cli.run(&["call", "echo", "message=back again"]);
            out.status.code() == Some(0) && text(&out.stdout).contains("back again")
        }),
        "the upstream did not come back"
    );
    let again = children_of(server.child.id());
    assert_eq!(again.len(), 1, "{again:?}");
    assert_ne!(again, upstream);
}

#[test]
fn a_gateway_killed_with_kill_9_follows_the_upstream_task_again_after_a_restart() {
    // Task servers no one here wrote, over HTTP: the TypeScript SDK v1 (2025-11-25, tasks bound to
    // the session) and rmcp 3 (2026-07-28). Each outlives the gateway.
    let peers = [
        ("typescript", common::ts_task_server()),
        (
            "rmcp",
            ServerProcess::spawn(Command::new(common::rmcp_server())),
        ),
    ];
    for (peer, upstream) in &peers {
        let dir = tempfile::tempdir().unwrap();
        let store = format!("sqlite://{}", dir.path().join("gateway.db").display());
        let cfg = config(
            dir.path(),
            &format!(
                "[[upstreams]]\nname = \"peer\"\nurl = \"{}\"\n",
                upstream.url
            ),
        );
        let gateway = ServerProcess::start(&["--store", &store, "--config", &cfg]);
        let cli = Cli::new(&gateway.url);
        let out = cli.run(&["call", "count", "seconds=5", "--detach"]);
        assert_eq!(out.status.code(), Some(0), "{peer}: {}", text(&out.stderr));
        let id = text(&out.stdout).trim().to_string();
        // The upstream task runs; its status message is our task's.
        assert!(
            common::eventually(std::time::Duration::from_secs(20), || {
                let out = cli.run(&["task", "get", &id, "--json"]);
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
                v["statusMessage"]
                    .as_str()
                    .is_some_and(|m| m.contains(" of 5"))
            }),
            "{peer}: the upstream task did not report"
        );
        gateway.kill9();

        // A new gateway on the same store follows the same upstream task to its end: the task
        // completes (without the resume it would fail as interrupted: the tool is not retried).
        let gateway = ServerProcess::start(&["--store", &store, "--config", &cfg]);
        let out = cli.run(&["task", "result", &id, "--url", &gateway.url]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{peer}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        assert_eq!(text(&out.stdout), "counted to 5\n", "{peer}");
    }
}

/// The FastMCP server (official Python SDK v1) in interop/python, over Streamable HTTP.
fn python_upstream(markers: &std::path::Path) -> ServerProcess {
    let py = repo_root().join("interop/python/.venv/bin/python");
    assert!(py.exists(), "interop/python/.venv is missing: run scripts/test.sh, which creates it from requirements.txt");
    let mut c = Command::new(py);
    c.arg("interop/python/upstream_server.py").arg(markers);
    ServerProcess::spawn(c)
}

/// A gateway in front of `upstream` (tools prefixed `py_`, sync budget 1 s).
fn python_gateway(dir: &std::path::Path, upstream: &ServerProcess) -> ServerProcess {
    let cfg = config(
        dir,
        &format!(
            "[[upstreams]]\nname = \"python\"\nurl = \"{}\"\nprefix = \"py\"\nsync_budget_secs = 1\n",
            upstream.url
        ),
    );
    ServerProcess::start(&["--store", "memory:", "--config", &cfg])
}

/// Runs an interop script that prints `ok - …` lines and ends with `N passed, M failed`.
fn run_script(program: &str, script: &str, args: &[&str]) {
    let out = Command::new(program)
        .arg(script)
        .args(args)
        .current_dir(repo_root())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    let stdout = text(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.trim_end().ends_with(" 0 failed"),
        "{script} failed ({}):\n{stdout}\n{}",
        out.status,
        text(&out.stderr)
    );
}

#[test]
fn a_python_sdk_server_behind_the_gateway_driven_by_the_python_sdk_client_that_sends_no_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = python_upstream(dir.path());
    let gateway = python_gateway(dir.path(), &upstream);
    let py = repo_root().join("interop/python/.venv/bin/python");
    run_script(
        py.to_str().unwrap(),
        "interop/python/gateway_client.py",
        &[&gateway.url, dir.path().to_str().unwrap()],
    );
}

#[test]
fn a_python_sdk_server_behind_the_gateway_driven_by_the_typescript_sdk_client_with_tasks() {
    let modules = repo_root().join("interop/ts/node_modules/@modelcontextprotocol/sdk");
    assert!(modules.exists(), "interop/ts/node_modules is missing: run `npm ci --prefix interop/ts` (scripts/test.sh does)");
    let dir = tempfile::tempdir().unwrap();
    let upstream = python_upstream(dir.path());
    let gateway = python_gateway(dir.path(), &upstream);
    run_script(
        "node",
        "interop/ts/gateway-client.mjs",
        &[&gateway.url, dir.path().to_str().unwrap()],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_sdk_server_behind_the_gateway_driven_by_the_rmcp_client_with_and_without_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = python_upstream(dir.path());
    let gateway = python_gateway(dir.path(), &upstream);
    tokio::time::timeout(
        rmcp_scenario::LIMIT,
        rmcp_scenario::gateway_scenario(&gateway.url),
    )
    .await
    .expect("the rmcp scenario finished in time");
}

#[test]
fn a_question_of_one_call_is_not_taken_for_another_calls_on_a_stdio_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let server = everything_gateway(dir.path());
    let cli = Cli::new(&server.url);
    // A call whose question nobody answers (its client detached): it waits, as a task may.
    let out = cli.run(&["call", "trigger-elicitation-request", "--detach"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let waiting = text(&out.stdout).trim().to_string();
    assert!(
        common::eventually(std::time::Duration::from_secs(20), || {
            let out = cli.run(&["task", "get", &waiting, "--json"]);
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            v["status"] == "input_required"
        }),
        "the first call did not ask"
    );
    // Another call's sampling request reaches that call's client, not the waiting one.
    let sampler = dir.path().join("sample.sh");
    std::fs::write(
        &sampler,
        "#!/bin/sh\ncat >/dev/null\necho '{\"role\":\"assistant\",\"content\":{\"type\":\"text\",\"text\":\"sampled-reply\"},\"model\":\"m\",\"stopReason\":\"endTurn\"}'\n",
    )
    .unwrap();
    std::fs::set_permissions(
        &sampler,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let mut c = cli.cmd(&[
        "call",
        "trigger-sampling-request",
        "prompt=hello",
        "--sampling-command",
        sampler.to_str().unwrap(),
    ]);
    let out = common::output_within(&mut c, std::time::Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("sampled-reply"),
        "{}",
        text(&out.stdout)
    );
    let out = cli.run(&["task", "cancel", &waiting]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// A deploy of the gateway (SIGTERM: drain, then hand-off) in front of an upstream that outlives
/// it: the upstream task is left running, not cancelled (only a client's cancel is passed on), and
/// the gateway that starts next on the same store follows it to its end. Before stop reasons, the
/// hand-off cancelled the upstream task it then had to resume from, and the task failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_stopped_by_sigterm_leaves_the_upstream_task_running_and_completes_it_after_a_restart(
) {
    let upstream = ServerProcess::start(&["--demo", "--store", "memory:"]);
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite://{}", dir.path().join("gateway.db").display());
    let cfg = config(
        dir.path(),
        &format!(
            "[tasks]\ndrain_secs = 1\n\n[[upstreams]]\nname = \"up\"\nurl = \"{}\"\n",
            upstream.url
        ),
    );
    let gateway = ServerProcess::start(&["--store", &store, "--config", &cfg]);
    let cli = Cli::new(&gateway.url);
    let out = cli.run(&["call", "slow_compute", "seconds=8", "--detach"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let id = text(&out.stdout).trim().to_string();
    // The upstream task runs and reports through ours.
    assert!(
        common::eventually(std::time::Duration::from_secs(20), || {
            let out = cli.run(&["task", "get", &id, "--json"]);
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            v["progress"].as_f64().is_some_and(|p| p >= 1.0)
        }),
        "the upstream task did not report"
    );
    let pid = nix::unistd::Pid::from_raw(gateway.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let mut gateway = gateway;
    let status = tokio::task::block_in_place(|| gateway.child.wait()).unwrap();
    assert!(status.success(), "the gateway stopped with {status}");

    // The upstream task was not cancelled by the hand-off: it is still working.
    let upstream_tasks = |url: &str| {
        let base = url.trim_end_matches("/mcp").to_string();
        async move {
            reqwest::get(format!("{base}/admin/api/tasks"))
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap()
        }
    };
    let listed = upstream_tasks(&upstream.url).await;
    let tasks = listed["tasks"].as_array().expect("the upstream's tasks");
    assert_eq!(tasks.len(), 1, "{listed}");
    assert_eq!(tasks[0]["status"], "working", "{listed}");

    // The next gateway resumes from the saved upstream task: ours completes with its result.
    let gateway = ServerProcess::start(&["--store", &store, "--config", &cfg]);
    let out =
        tokio::task::block_in_place(|| cli.run(&["task", "result", &id, "--url", &gateway.url]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("slow_compute finished after 8 seconds"),
        "{}",
        text(&out.stdout)
    );
    let listed = upstream_tasks(&upstream.url).await;
    assert_eq!(listed["tasks"][0]["status"], "completed", "{listed}");
    assert_eq!(
        listed["tasks"].as_array().map(Vec::len),
        Some(1),
        "no second upstream task: {listed}"
    );
}

/// A gateway whose environment names a proxy reaches an upstream on this machine directly: a
/// loopback address is never proxied (before, its `initialize` went to the proxy, and the gateway
/// would not start: "HTTP 502").
#[test]
fn a_gateway_with_proxy_variables_reaches_a_loopback_upstream_directly() {
    let upstream = ServerProcess::start(&["--demo", "--store", "memory:"]);
    let (proxy_port, proxied) = common::counting_proxy();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        &format!("[[upstreams]]\nname = \"up\"\nurl = \"{}\"\n", upstream.url),
    );
    let mut cmd = serve_command(&["--store", "memory:", "--config", &cfg]);
    common::through_proxy(&mut cmd, &format!("http://127.0.0.1:{proxy_port}"));
    let gateway = ServerProcess::spawn(cmd);
    let cli = Cli::new(&gateway.url);
    let out = cli.run(&["call", "slow_compute", "seconds=0"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("finished"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(
        proxied.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the proxy was used"
    );
}
