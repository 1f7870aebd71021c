//! `mcp-tasks call` / `task …` / `tools` against our own server, on both wires, as a script would
//! run them: exit statuses, stdout, stderr, and a second process resuming a detached task.

mod common;

use common::{bin, text, ClientCli as Cli, ServerProcess};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The two wires: 2026-07-28 (found by `server/discover`), and 2025-11-25 (`--no-2026`).
const WIRES: [&[&str]; 2] = [&[], &["--no-2026"]];

fn args<'a>(wire: &[&'a str], rest: &[&'a str]) -> Vec<&'a str> {
    let mut v: Vec<&str> = rest.to_vec();
    v.extend_from_slice(wire);
    v
}

#[test]
fn a_task_with_progress_prints_its_result_on_both_wires() {
    let server = ServerProcess::start(&["--store", "memory:", "--demo"]);
    let cli = Cli::new(&server.url);
    for wire in WIRES {
        let out = cli.run(&args(
            wire,
            &["call", "slow_compute", "seconds=2", "label=p"],
        ));
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{wire:?}: {stderr}");
        assert_eq!(
            stdout, "slow_compute (p) finished after 2 seconds\n",
            "{wire:?}"
        );
        assert!(
            stderr.contains("working 1/2"),
            "{wire:?}: progress shown: {stderr}"
        );
        assert!(stderr.contains("completed"), "{wire:?}: {stderr}");
        // --json prints the whole CallToolResult.
        let out = cli.run(&args(
            wire,
            &["call", "--json", "slow_compute", "seconds=0", "-q"],
        ));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["content"][0]["type"], "text", "{wire:?}: {v}");
        assert!(
            out.stderr.is_empty(),
            "{wire:?}: --quiet: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn failures_and_tool_errors_exit_1_and_bad_arguments_exit_2() {
    let server = ServerProcess::start(&["--store", "memory:", "--demo"]);
    let cli = Cli::new(&server.url);
    for wire in WIRES {
        let out = cli.run(&args(wire, &["call", "failing_job"]));
        assert_eq!(out.status.code(), Some(1), "{wire:?}");
        assert!(text(&out.stdout).contains("failed on purpose"), "{wire:?}");
        assert!(
            text(&out.stderr).contains("the tool reported an error"),
            "{wire:?}"
        );
        let out = cli.run(&args(wire, &["call", "protocol_error_job"]));
        assert_eq!(out.status.code(), Some(1), "{wire:?}");
        assert!(
            text(&out.stderr).contains("(error -32603)"),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        // Checked against the input schema before anything runs; the message names the field.
        let out = cli.run(&args(wire, &["call", "slow_compute", "seconds=soon"]));
        assert_eq!(out.status.code(), Some(2), "{wire:?}");
        assert!(
            text(&out.stderr).contains("seconds: \"soon\" is not of type \"number\""),
            "{}",
            text(&out.stderr)
        );
        let out = cli.run(&args(wire, &["call", "no_such_tool"]));
        assert_eq!(out.status.code(), Some(2));
        assert!(
            text(&out.stderr).contains("has no tool \"no_such_tool\""),
            "{}",
            text(&out.stderr)
        );
    }
    // A server that is not there: exit 2 and a message that says which.
    let out = cli.run(&["call", "--url", "http://127.0.0.1:9/mcp", "greet", "name=x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot talk MCP with http://127.0.0.1:9/mcp"));
}

#[test]
fn questions_are_answered_with_answer_flags_or_declined() {
    let server = ServerProcess::start(&["--store", "memory:", "--demo"]);
    let cli = Cli::new(&server.url);
    for wire in WIRES {
        let out = cli.run(&args(
            wire,
            &[
                "call",
                "confirm_delete",
                "filename=a.txt",
                "--answer",
                "confirm=yes",
            ],
        ));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stdout).starts_with("Deleted a.txt"),
            "{wire:?}: {}",
            text(&out.stdout)
        );
        // No terminal, no answer: declined, and the CLI says how to answer.
        let out = cli.run(&args(wire, &["call", "confirm_delete", "filename=b.txt"]));
        assert_eq!(out.status.code(), Some(0), "{wire:?}");
        assert!(
            text(&out.stdout).starts_with("Kept b.txt"),
            "{wire:?}: {}",
            text(&out.stdout)
        );
        assert!(
            text(&out.stderr).contains("give --answer confirm=VALUE"),
            "{}",
            text(&out.stderr)
        );
        // Sampling: refused without a command (the tool sees the refusal on 2025; 2026 cannot send
        // one back and says so), answered by --sampling-command.
        let sampler = r#"cat >/dev/null; echo '{"role":"assistant","content":{"type":"text","text":"autumn leaves fall"},"model":"test"}'"#;
        let out = cli.run(&args(
            wire,
            &[
                "call",
                "write_haiku",
                "topic=fall",
                "--sampling-command",
                sampler,
            ],
        ));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stdout).contains("autumn leaves fall"),
            "{wire:?}: {}",
            text(&out.stdout)
        );
    }
}

#[test]
fn a_detached_task_is_resumed_cancelled_and_listed_from_other_processes() {
    let server = ServerProcess::start(&["--store", "memory:", "--demo"]);
    let cli = Cli::new(&server.url);
    for wire in WIRES {
        let out = cli.run(&args(
            wire,
            &["call", "slow_compute", "seconds=1", "--detach"],
        ));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        let id = text(&out.stdout).trim().to_string();
        assert!(
            text(&out.stderr).contains(&format!("mcp-tasks task result {id} --url")),
            "{}",
            text(&out.stderr)
        );
        // Another process, no --url: the remembered reference (with the 2025 session) is enough.
        let mut c = cli.cmd(&["task", "result", &id]);
        c.env_remove("MCP_TASKS_URL");
        let out = c.output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        assert_eq!(
            text(&out.stdout),
            "slow_compute finished after 1 second\n",
            "{wire:?}"
        );
        let out = cli.run(&["task", "get", &id, "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{wire:?}: {e}: {}", text(&out.stderr)));
        assert_eq!(v["status"], "completed", "{wire:?}");

        // Cancel a long one from a third process; its result then exits 3.
        let out = cli.run(&args(
            wire,
            &["call", "slow_compute", "seconds=60", "--detach"],
        ));
        let long = text(&out.stdout).trim().to_string();
        let out = cli.run(&["task", "cancel", &long]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        assert!(text(&out.stdout).contains("cancelled"));
        let out = cli.run(&["task", "result", &long]);
        assert_eq!(
            out.status.code(),
            Some(3),
            "{wire:?}: {}",
            text(&out.stderr)
        );

        let out = cli.run(&["task", "list", "--local"]);
        assert!(text(&out.stdout).contains(&id) && text(&out.stdout).contains(&long));
    }
    // Every task this machine started, each with its status read from its server on its own
    // wire: with --url (a 2026-07-28 server has no task list), and without (no server named).
    for with_url in [true, false] {
        let mut c = cli.cmd(&["task", "list", "--json"]);
        if !with_url {
            c.env_remove("MCP_TASKS_URL");
        }
        let out = c.output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let rows: Vec<serde_json::Value> = text(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let ours: Vec<&serde_json::Value> = rows
            .iter()
            .filter(|r| r.get("startedHere").is_some())
            .collect();
        assert!(
            ours.len() >= 2 * WIRES.len(),
            "with --url {with_url}: {rows:?}"
        );
        for r in ours {
            assert!(
                r["status"] == "completed" || r["status"] == "cancelled",
                "with --url {with_url}: {r}"
            );
        }
    }
    let out = cli.run(&["task", "get", "no-such-task"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("does not know this task"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn ctrl_c_detaches_or_cancels() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let server = ServerProcess::start(&["--store", "memory:", "--demo"]);
    let cli = Cli::new(&server.url);
    for cancel in [false, true] {
        let mut a = vec!["call", "slow_compute", "seconds=60"];
        if cancel {
            a.push("--cancel-on-interrupt");
        }
        let child = cli
            .cmd(&a)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Wait until the task exists (it is remembered when created).
        let tasks = cli.state.path().join("mcp-tasks/tasks");
        assert!(common::eventually(Duration::from_secs(20), || {
            std::fs::read_dir(&tasks).map(|d| d.count()).unwrap_or(0) > usize::from(cancel)
        }));
        std::thread::sleep(Duration::from_millis(300));
        kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = text(&out.stderr);
        if cancel {
            assert_eq!(out.status.code(), Some(3), "{stderr}");
            assert!(stderr.contains("cancelling task"), "{stderr}");
        } else {
            assert_eq!(out.status.code(), Some(130), "{stderr}");
            assert!(
                stderr.contains("detached from task") && stderr.contains("mcp-tasks task result"),
                "{stderr}"
            );
        }
    }
}

#[test]
fn tools_lists_task_support() {
    let server = ServerProcess::start(&["--store", "memory:", "--demo"]);
    let cli = Cli::new(&server.url);
    let out = cli.run(&["tools", "--no-2026"]);
    let stdout = text(&out.stdout);
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("failing_job") && l.contains("required")),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("slow_compute") && l.contains("optional")),
        "{stdout}"
    );
    assert!(text(&out.stderr).contains("(2025-11-25)"));
    // Descriptions line up after the longest name (`test_input_required_result_multi_round` …).
    let starts: Vec<usize> = stdout
        .lines()
        .filter_map(|l| {
            l.find("  ")
                .map(|i| i + l[i..].len() - l[i..].trim_start().len())
        })
        .collect();
    assert!(starts.windows(2).all(|w| w[0] == w[1]), "{stdout}");
    // On 2026-07-28 tools carry no task support: said once on stderr, not on every row.
    let out = cli.run(&["tools"]);
    let stderr = text(&out.stderr);
    assert!(stderr.contains("(2026-07-28)"), "{stderr}");
    assert!(stderr.contains("the server decides per call"), "{stderr}");
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("server decides"), "{stdout}");
    let greet = stdout.lines().find(|l| l.starts_with("greet ")).unwrap();
    assert!(
        !greet.contains("optional") && !greet.contains("forbidden"),
        "{greet}"
    );
}

#[test]
fn a_stdio_server_is_driven_on_both_wires() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("tasks.db");
    let server = format!(
        "{} serve --stdio --demo --store sqlite://{}",
        bin().display(),
        db.display()
    );
    let state = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(bin())
            .args(args)
            .env("XDG_STATE_HOME", state.path())
            .env("RUST_LOG", "warn")
            .env_remove("MCP_TASKS_URL")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    for wire in WIRES {
        let out = run(&args(
            wire,
            &[
                "call",
                "--stdio",
                &server,
                "slow_compute",
                "seconds=1",
                "label=s",
            ],
        ));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        assert_eq!(
            text(&out.stdout),
            "slow_compute (s) finished after 1 second\n"
        );
        let out = run(&args(
            wire,
            &[
                "call",
                "--stdio",
                &server,
                "confirm_delete",
                "filename=f",
                "--answer",
                "confirm=yes",
            ],
        ));
        assert!(
            text(&out.stdout).starts_with("Deleted f"),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        // A finished task, read back by a later process through a new server on the same store.
        let out = run(&args(
            wire,
            &[
                "call",
                "--stdio",
                &server,
                "slow_compute",
                "seconds=0",
                "--detach",
            ],
        ));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains("--stdio"),
            "the resume hint names the command: {}",
            text(&out.stderr)
        );
        let id = text(&out.stdout).trim().to_string();
        let out = run(&["task", "get", &id, "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{wire:?}: {e}: {}", text(&out.stderr)));
        assert!(v["taskId"] == id.as_str(), "{v}");
    }
    let out = run(&["tools", "--stdio", "/nonexistent/server"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("start the stdio server"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn pushed_states_end_the_wait_before_the_next_poll() {
    // The server asks for polls 8 s apart; a task of one second still ends the call in about one
    // second: 2026-07-28 through subscriptions/listen, 2025-11-25 through the blocking tasks/result.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("slow-polls.toml");
    std::fs::write(&config, "[tasks]\npoll_interval_ms = 8000\n").unwrap();
    let server = ServerProcess::start(&[
        "--store",
        "memory:",
        "--demo",
        "--config",
        config.to_str().unwrap(),
    ]);
    let cli = Cli::new(&server.url);
    for wire in WIRES {
        let start = Instant::now();
        let out = cli.run(&args(wire, &["call", "slow_compute", "seconds=1"]));
        let took = start.elapsed();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        assert!(
            took < Duration::from_secs(5),
            "{wire:?}: took {took:?}, as if it had waited for a poll"
        );
    }
}

/// A loopback proxy that, once armed, swallows the answer to the first `tools/call` it relays and
/// closes that connection: the create reached the server, its answer never reached the client.
struct LossyProxy {
    url: String,
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    _runtime: tokio::runtime::Runtime,
}

impl LossyProxy {
    fn start(upstream: &str) -> LossyProxy {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        use std::sync::Arc;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let up = upstream
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap()
            .to_string();
        let path = upstream.splitn(4, '/').nth(3).unwrap_or("mcp").to_string();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let armed = Arc::new(AtomicBool::new(false));
        let (c, a) = (calls.clone(), armed.clone());
        runtime.spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (calls, armed, up) = (c.clone(), a.clone(), up.clone());
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(&up).await else {
                        return;
                    };
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let cut = Arc::new(AtomicBool::new(false));
                    let cut2 = cut.clone();
                    let upward = async move {
                        let mut buf = vec![0u8; 65536];
                        loop {
                            let n = match cr.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            let chunk = &buf[..n];
                            if chunk.windows(10).any(|w| w == b"tools/call") {
                                calls.fetch_add(1, Ordering::SeqCst);
                                if armed.swap(false, Ordering::SeqCst) {
                                    cut2.store(true, Ordering::SeqCst);
                                }
                            }
                            if sw.write_all(chunk).await.is_err() {
                                return;
                            }
                        }
                    };
                    let downward = async move {
                        let mut buf = vec![0u8; 65536];
                        loop {
                            let n = match sr.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            if cut.load(Ordering::SeqCst) {
                                // The answer is lost: give the server a moment, then hang up.
                                tokio::time::sleep(Duration::from_millis(300)).await;
                                return;
                            }
                            if cw.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    };
                    tokio::select! {
                        _ = upward => {}
                        _ = downward => {}
                    }
                });
            }
        });
        LossyProxy {
            url: format!("http://{addr}/{path}"),
            calls,
            armed,
            _runtime: runtime,
        }
    }
}

#[test]
fn a_create_whose_answer_was_lost_is_sent_again_without_a_second_job() {
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs.log");
    let config = dir.path().join("tally.toml");
    std::fs::write(
        &config,
        format!(
            "[[tools]]\nname = \"tally\"\ncommand = [\"sh\", \"-c\", \"echo run >> {}; echo counted\"]\ntask_support = \"required\"\n",
            runs.display()
        ),
    )
    .unwrap();
    let server =
        ServerProcess::start(&["--store", "memory:", "--config", config.to_str().unwrap()]);
    let proxy = LossyProxy::start(&server.url);
    let cli = Cli::new(&proxy.url);
    for (i, wire) in WIRES.iter().enumerate() {
        proxy.calls.store(0, Ordering::SeqCst);
        proxy.armed.store(true, Ordering::SeqCst);
        let out = cli.run(&args(wire, &["call", "tally"]));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        assert_eq!(text(&out.stdout), "counted\n", "{wire:?}");
        assert!(
            !proxy.armed.load(Ordering::SeqCst),
            "{wire:?}: the proxy lost an answer"
        );
        assert!(
            proxy.calls.load(Ordering::SeqCst) >= 2,
            "{wire:?}: the create was sent again"
        );
        let ran = std::fs::read_to_string(&runs)
            .unwrap_or_default()
            .lines()
            .count();
        assert_eq!(ran, i + 1, "{wire:?}: the job ran once for the two sends");
    }
}

#[test]
fn api_keys_go_as_bearer_tokens_or_headers() {
    // `mcp-tasks key new` prints the key on a comment line and the config entry after it.
    let made = Command::new(bin())
        .args(["key", "new", "--principal", "alice"])
        .output()
        .unwrap();
    let printed = text(&made.stdout);
    let key = printed
        .lines()
        .nth(1)
        .and_then(|l| l.strip_prefix("# "))
        .unwrap()
        .to_string();
    let entry: String = printed
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("keys.toml");
    std::fs::write(&config, format!("{entry}\n")).unwrap();
    let server = ServerProcess::start(&[
        "--store",
        "memory:",
        "--demo",
        "--config",
        config.to_str().unwrap(),
    ]);
    let cli = Cli::new(&server.url);
    for wire in WIRES {
        let out = cli.run(&args(wire, &["call", "greet", "name=Al"]));
        assert_eq!(out.status.code(), Some(2), "{wire:?}: no key, no entry");
        assert!(
            text(&out.stderr).contains("authentication required"),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        let out = cli.run(&args(wire, &["call", "greet", "name=Al", "--key", &key]));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        assert_eq!(text(&out.stdout), "Hello, Al!\n");
        let bearer = format!("Authorization: Bearer {key}");
        let out = cli.run(&args(
            wire,
            &["call", "slow_compute", "seconds=0", "--header", &bearer],
        ));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        // The key reaches `task …` too (it is never remembered with the task).
        let out = cli.run(&args(
            wire,
            &[
                "call",
                "slow_compute",
                "seconds=0",
                "--key",
                &key,
                "--detach",
            ],
        ));
        let id = text(&out.stdout).trim().to_string();
        let remembered = std::fs::read_dir(cli.state.path().join("mcp-tasks/tasks"))
            .unwrap()
            .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
            .collect::<String>();
        assert!(!remembered.contains(&key), "the key is not written to disk");
        let mut c = cli.cmd(&["task", "result", &id]);
        c.env("MCP_TASKS_KEY", &key);
        let out = c.output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{wire:?}: {}",
            text(&out.stderr)
        );
    }
}

/// `task signal` from another process: the approval_flow demo waits for `approve`, the CLI's
/// signal (JSON payload, a key) lets it finish with that payload, a key sent again is the same
/// signal, and a payload that is not JSON is refused before anything is sent. Both wires.
#[test]
fn a_signal_sent_with_the_cli_lets_an_approval_finish_on_both_wires() {
    let server = ServerProcess::start(&["--store", "memory:", "--demo"]);
    let cli = Cli::new(&server.url);
    for wire in WIRES {
        let out = cli.run(&args(
            wire,
            &[
                "call",
                "approval_flow",
                "sleep_seconds=0",
                "timeout_seconds=60",
                "--detach",
            ],
        ));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        let id = text(&out.stdout).trim().to_string();
        let out = cli.run(&["task", "signal", &id, "approve", "not json"]);
        assert_eq!(out.status.code(), Some(2), "{wire:?}");
        assert!(
            text(&out.stderr).contains("the payload must be JSON"),
            "{}",
            text(&out.stderr)
        );
        let sent = [
            "task",
            "signal",
            &id,
            "approve",
            r#"{"by": "ann"}"#,
            "--signal-key",
            "k",
        ];
        let out = cli.run(&sent);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        assert_eq!(
            text(&out.stdout),
            format!("{id}  signal approve #1 sent\n"),
            "{wire:?}"
        );
        let out = cli.run(&["task", "result", &id]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        let stdout = text(&out.stdout);
        assert!(
            stdout.starts_with("approved by owner ") && stdout.contains(r#"{"by":"ann"}"#),
            "{wire:?}: {stdout}"
        );
        let out = cli.run(&sent);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{wire:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stdout).contains("(sent before under this key)"),
            "{wire:?}: {}",
            text(&out.stdout)
        );
    }
}
