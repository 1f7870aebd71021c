//! The stdio transport with the real binary: newline-delimited JSON-RPC, logs on stderr only, and the
//! full task lifecycle. Every line the server writes is validated against the official schema.

mod common;
#[path = "../../server/tests/support/mod.rs"]
mod support;

use serde_json::{json, Value};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

struct StdioClient {
    _child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next_id: i64,
    /// Notifications seen while waiting for replies.
    notes: Vec<Value>,
    /// Replies to other requests seen while waiting for one.
    other_replies: Vec<Value>,
}

impl StdioClient {
    async fn spawn() -> StdioClient {
        StdioClient::spawn_with(&["--store", "memory:"]).await
    }

    /// `serve --demo --stdio` with `args`.
    async fn spawn_with(args: &[&str]) -> StdioClient {
        let mut child = Command::new(common::bin())
            .args(["serve", "--demo", "--stdio"])
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        StdioClient {
            _child: child,
            stdin,
            lines,
            next_id: 1,
            notes: Vec::new(),
            other_replies: Vec::new(),
        }
    }

    async fn send_bytes(&mut self, bytes: &[u8]) {
        self.stdin.write_all(bytes).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    async fn send_raw(&mut self, line: &str) {
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.write_all(b"\n").await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    async fn next_message(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(20), self.lines.next_line())
            .await
            .expect("server answered in time")
            .unwrap()
            .expect("stdout open");
        // Every stdout line must be exactly one JSON-RPC message (logs go to stderr).
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"))
    }

    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send_raw(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        )
        .await;
        loop {
            let m = self.next_message().await;
            if m.get("id") == Some(&json!(id)) {
                support::schema::check_reply("2025-11-25", method, &params, &m);
                return m;
            }
            if m.get("id").is_some() {
                self.other_replies.push(m);
                continue;
            }
            support::schema::check_notification("2025-11-25", &m);
            self.notes.push(m);
        }
    }
}

#[tokio::test]
async fn stdio_runs_the_whole_task_lifecycle() {
    let mut c = StdioClient::spawn().await;
    let init = c
        .request("initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}))
        .await;
    assert!(init["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"].is_object());
    c.send_raw(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    let tools = c.request("tools/list", json!({})).await;
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for demo in [
        "greet",
        "slow_compute",
        "failing_job",
        "protocol_error_job",
        "confirm_delete",
        "test_simple_text",
    ] {
        assert!(names.contains(&demo), "{demo} listed: {names:?}");
    }

    let created = c
        .request("tools/call", json!({"name": "slow_compute", "arguments": {"seconds": 1.5}, "task": {}, "_meta": {"progressToken": "sp"}}))
        .await;
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let result = c.request("tasks/result", json!({"taskId": id})).await;
    assert!(result["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("finished"));
    let progress: Vec<&Value> = c
        .notes
        .iter()
        .filter(|n| n["method"] == "notifications/progress")
        .collect();
    assert!(!progress.is_empty());
    assert!(progress
        .iter()
        .all(|n| n["params"]["progressToken"] == "sp"));
    assert!(c.notes.iter().any(
        |n| n["method"] == "notifications/tasks/status" && n["params"]["status"] == "completed"
    ));

    let long = c
        .request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 60}, "task": {}}),
        )
        .await;
    let long_id = long["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let cancelled = c.request("tasks/cancel", json!({"taskId": long_id})).await;
    assert_eq!(cancelled["result"]["status"], "cancelled");
    let again = c.request("tasks/cancel", json!({"taskId": long_id})).await;
    assert_eq!(again["error"]["code"], -32602);

    let listed = c.request("tasks/list", json!({})).await;
    assert_eq!(listed["result"]["tasks"].as_array().unwrap().len(), 2);
    let greet = c
        .request(
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "stdio"}}),
        )
        .await;
    assert_eq!(greet["result"]["content"][0]["text"], "Hello, stdio!");
}

#[tokio::test]
async fn stdio_reports_bad_lines_and_keeps_going() {
    let mut c = StdioClient::spawn().await;
    c.send_raw("this is not json").await;
    let m = c.next_message().await;
    assert_eq!(m["error"]["code"], -32700);
    assert!(m.get("id").is_none());
    c.send_raw(r#"{"jsonrpc":"2.0","id":"x","method":"tools/list"}"#)
        .await;
    let m = c.next_message().await;
    assert_eq!(
        m["error"]["code"], -32600,
        "requests before initialize are refused: {m}"
    );
    // Invalid UTF-8 is a parse error for that line only.
    c.send_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\",\"x\":\"\xff\"}\n")
        .await;
    let m = c.next_message().await;
    assert_eq!(m["error"]["code"], -32700);
    let ping = c.request("ping", json!({})).await;
    assert_eq!(ping["result"], json!({}));
}

#[tokio::test]
async fn blocked_tasks_result_does_not_hold_up_other_requests() {
    let mut c = StdioClient::spawn().await;
    c.request("initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}))
        .await;
    let created = c
        .request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 30}, "task": {}}),
        )
        .await;
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    c.send_raw(
        &json!({"jsonrpc": "2.0", "id": 999, "method": "tasks/result", "params": {"taskId": id}})
            .to_string(),
    )
    .await;
    let started = std::time::Instant::now();
    let ping = c.request("ping", json!({})).await;
    assert_eq!(ping["result"], json!({}));
    assert!(started.elapsed() < Duration::from_secs(2));
    c.request("tasks/cancel", json!({"taskId": id})).await;
    // The blocked tasks/result is woken by the cancel (its reply may come before the cancel's own).
    let woken = loop {
        if let Some(m) = c.other_replies.iter().find(|m| m["id"] == json!(999)) {
            break m.clone();
        }
        let m = c.next_message().await;
        if m.get("id").is_some() {
            c.other_replies.push(m);
        }
    };
    support::schema::check_reply("2025-11-25", "tasks/result", &json!({}), &woken);
    assert_eq!(woken["error"]["code"], -32603);
}

#[tokio::test]
async fn stdio_elicitation_round_trip() {
    let mut c = StdioClient::spawn().await;
    let caps = json!({"elicitation": {"form": {}}, "sampling": {}});
    c.request("initialize", json!({"protocolVersion": "2025-11-25", "capabilities": caps, "clientInfo": {"name": "t", "version": "1"}}))
        .await;
    let created = c
        .request(
            "tools/call",
            json!({"name": "confirm_delete", "arguments": {"filename": "x.log"}, "task": {}}),
        )
        .await;
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    c.send_raw(
        &json!({"jsonrpc": "2.0", "id": 500, "method": "tasks/result", "params": {"taskId": id}})
            .to_string(),
    )
    .await;
    // On stdio everything shares one stream: the request arrives once, tagged with the task.
    // It may have come out already while we waited for the tools/call reply.
    let seen = c
        .other_replies
        .iter()
        .position(|m| m["method"] == "elicitation/create");
    let req = match seen {
        Some(i) => c.other_replies.remove(i),
        None => loop {
            let m = c.next_message().await;
            if m["method"] == "elicitation/create" {
                break m;
            }
        },
    };
    support::schema::check_notification("2025-11-25", &req);
    assert_eq!(
        req["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id.as_str()
    );
    let answer = json!({"jsonrpc": "2.0", "id": req["id"], "result": {"action": "accept", "content": {"confirm": true}}});
    c.send_raw(&answer.to_string()).await;
    let done = loop {
        let m = c.next_message().await;
        if m["id"] == json!(500) {
            break m;
        }
        assert_ne!(
            m["method"], "elicitation/create",
            "the request is not sent twice"
        );
    };
    support::schema::check_reply("2025-11-25", "tasks/result", &json!({}), &done);
    assert!(done["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("Deleted x.log"));
}

#[tokio::test]
async fn stdio_serves_the_2026_wire_without_initialize() {
    let mut c = StdioClient::spawn().await;
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    });
    let send = |id: i64, method: &str, mut params: Value| {
        params["_meta"] = meta.clone();
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
    };
    let ask = async |c: &mut StdioClient, id: i64, method: &str, params: Value| {
        c.send_raw(&send(id, method, params)).await;
        loop {
            let m = c.next_message().await;
            if m["id"] == json!(id) {
                support::schema::check_reply_2026(method, &m);
                return m;
            }
        }
    };
    let d = ask(&mut c, 1, "server/discover", json!({})).await;
    assert!(d["result"]["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"].is_object());
    let created = ask(
        &mut c,
        2,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 0.3}}),
    )
    .await;
    assert_eq!(created["result"]["resultType"], "task");
    let id = created["result"]["taskId"].as_str().unwrap().to_string();
    let mut n = 3;
    loop {
        let t = ask(&mut c, n, "tasks/get", json!({"taskId": id})).await;
        n += 1;
        if t["result"]["status"] == "completed" {
            assert!(t["result"]["result"]["content"].is_array());
            break;
        }
        assert!(n < 100, "task did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A parent that leaves the stdin it passes on non-blocking (a Node.js launcher that opens its own
/// `process.stdin` on the inherited pipe does): the server still waits through an idle pause and
/// answers, instead of ending on EAGAIN.
#[test]
fn a_non_blocking_stdin_is_waited_on_not_failed() {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    use std::io::{BufRead, Write};
    let (read, write) = nix::unistd::pipe().unwrap();
    fcntl(&read, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).unwrap();
    let mut child = std::process::Command::new(common::bin())
        .args(["serve", "--demo", "--stdio", "--store", "memory:"])
        .stdin(Stdio::from(read))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let early = child.try_wait().unwrap();
    if early.is_some() {
        panic!("the server ended while its stdin was idle: {early:?}");
    }
    let mut input = std::fs::File::from(write);
    writeln!(
        input,
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{{}},"clientInfo":{{"name":"t","version":"1"}}}}}}"#
    )
    .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(20));
    let _ = child.kill();
    let _ = child.wait();
    let reply: Value = serde_json::from_str(&line.expect("an answer within 20 s")).unwrap();
    assert_eq!(reply["id"], 1, "{reply}");
    assert!(reply["result"]["protocolVersion"].is_string(), "{reply}");
}

/// The host closing stdin, or SIGTERM, stops a stdio server as a deploy stops `serve`: the drain,
/// then the hand-off of what still runs (its history says so, and the next start knows it was
/// handed off, not interrupted by a crash). Before, the process ended at once on either.
#[tokio::test]
async fn stdin_closing_or_sigterm_drains_and_hands_off() {
    for by_signal in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("drain.toml");
        std::fs::write(&cfg, "[tasks]\ndrain_secs = 1\n").unwrap();
        let store = format!("sqlite://{}", dir.path().join("tasks.db").display());
        let cfg = cfg.display().to_string();
        let mut c = StdioClient::spawn_with(&["--store", &store, "--config", &cfg]).await;
        c.request("initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}))
            .await;
        let created = c
            .request(
                "tools/call",
                json!({"name": "slow_compute", "arguments": {"seconds": 600}, "task": {}}),
            )
            .await;
        let id = created["result"]["task"]["taskId"]
            .as_str()
            .unwrap()
            .to_string();
        let started = std::time::Instant::now();
        if by_signal {
            let pid = nix::unistd::Pid::from_raw(c._child.id().unwrap() as i32);
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        } else {
            drop(c.stdin);
        }
        let status = tokio::time::timeout(Duration::from_secs(20), c._child.wait())
            .await
            .expect("the server stopped")
            .unwrap();
        let took = started.elapsed();
        assert!(status.success(), "by signal {by_signal}: {status}");
        // The drain (1 s), then the hand-off (the demo returns at once when told to stop).
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(10),
            "by signal {by_signal}: {took:?}"
        );
        // The next start finds the task let go of by a stopping server (the operator's view: the
        // task belongs to the stdio session's local user).
        let server = common::ServerProcess::start(&["--demo", "--store", &store]);
        let base = server.url.trim_end_matches("/mcp").to_string();
        let mut t = Value::Null;
        for _ in 0..100 {
            t = reqwest::get(format!("{base}/admin/api/tasks/{id}"))
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap();
            if t.to_string().contains("\"failed\"") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let message = t.to_string();
        assert!(
            message.contains("handed off by a stopping server"),
            "by signal {by_signal}: {t}"
        );
    }
}
