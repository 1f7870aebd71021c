//! Stopping without failing work (issue 27, item 1, the drain): on SIGTERM `mcp-tasks serve` takes
//! no new calls (503 with `Retry-After` and -32009), `/readyz` is 503 from the first moment, a task
//! that ends within `[tasks] drain_secs` completes normally on the stopping server, and the
//! process exits once nothing runs, after a moment in which every request is answered 503.

mod common;
#[path = "../../server/tests/support/mod.rs"]
mod support;

use common::ServerProcess;
use serde_json::json;
use std::time::{Duration, Instant};
use support::Client;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_a_running_task_to_completion_and_refuses_new_calls() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("drain.toml");
    std::fs::write(&cfg, "[tasks]\ndrain_secs = 20\n").unwrap();
    let store = format!("sqlite://{}", dir.path().join("tasks.db").display());
    let cfg = cfg.display().to_string();
    let mut server = ServerProcess::start(&["--demo", "--store", &store, "--config", &cfg]);
    let base = server.url.trim_end_matches("/mcp").to_string();
    let mut c = Client::connect(&server.url).await;
    let id = c.create_task("slow_compute", json!({"seconds": 3})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();

    let pid = nix::unistd::Pid::from_raw(server.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let signalled = Instant::now();
    // Not ready from the first moment: a balancer stops sending.
    let mut ready = None;
    for _ in 0..50 {
        let r = reqwest::get(format!("{base}/readyz")).await.unwrap();
        if r.status() == 503 {
            ready = Some(r.json::<serde_json::Value>().await.unwrap());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ready = ready.expect("/readyz turns 503");
    assert_eq!(ready["checks"]["draining"]["ok"], false, "{ready}");
    assert!(signalled.elapsed() < Duration::from_secs(2));
    // A new call is refused, saying why and when to come back.
    let refused = c
        .request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 1}, "task": {}}),
        )
        .await;
    assert_eq!(refused.status, 503);
    assert!(refused.retry_after.is_some(), "Retry-After");
    assert_eq!(refused.error_code(), -32009);
    assert!(
        refused.error()["message"]
            .as_str()
            .unwrap()
            .contains("stopping"),
        "{}",
        refused.error()
    );
    // The running task finishes on the stopping server, and its client gets the result.
    let result = c.request("tasks/result", json!({"taskId": id})).await;
    assert_eq!(result.status, 200);
    assert!(
        result.result()["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("finished after 3 seconds"),
        "{:?}",
        result.reply
    );
    // Then the close. A balancer's connections are opened before their requests are written:
    // here each poll goes on a connection opened two polls (about 100 ms) earlier, so whenever the
    // close begins some connection was opened before it and writes after. Polls are served a
    // moment longer (the linger); then a request on a connection opened before the close is
    // answered 503 "stopping" (a balancer sends it elsewhere), never reset; and a new connection
    // is refused, since the listener closed as the close began.
    let addr = server.url.trim_start_matches("http://");
    let addr = addr[..addr.find('/').unwrap()].to_string();
    let headers = format!(
        "mcp-session-id: {}\r\nmcp-protocol-version: {}\r\n",
        c.session.clone().unwrap(),
        c.version
    );
    let mut seen: Vec<String> = Vec::new();
    let mut waiting = std::collections::VecDeque::new();
    let polled = Instant::now();
    while polled.elapsed() < Duration::from_secs(10) {
        let refused = match tokio::net::TcpStream::connect(&addr).await {
            Ok(conn) => {
                waiting.push_back(conn);
                false
            }
            Err(_) => true,
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        if refused {
            // The connections opened before are still answered.
            for conn in waiting.drain(..) {
                note(&mut seen, poll_on(conn, &headers, &id).await);
            }
            note(&mut seen, "refused".into());
            break;
        }
        if waiting.len() >= 2 {
            let conn = waiting.pop_front().unwrap();
            note(&mut seen, poll_on(conn, &headers, &id).await);
        }
    }
    assert_eq!(
        seen,
        ["200", "503", "refused"],
        "served, then answered 503 on a connection opened before the close, then refused"
    );
    let exited = common::eventually(Duration::from_secs(10), || {
        matches!(server.child.try_wait(), Ok(Some(_)))
    });
    assert!(exited, "the server exits once nothing runs");
    assert!(signalled.elapsed() < Duration::from_secs(15));
    drop(server);
    // Stored as completed: nothing left for the next start to fail.
    let status: String = rusqlite::Connection::open(dir.path().join("tasks.db"))
        .unwrap()
        .query_row("SELECT status FROM tasks WHERE id = ?1", [&id], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(status, "completed");
}

/// Writes a `tasks/get` of `id` on `conn` and says what came back: the status, or "reset" when
/// the connection ended without a reply.
async fn poll_on(mut conn: tokio::net::TcpStream, headers: &str, id: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = json!({"jsonrpc": "2.0", "id": 99, "method": "tasks/get", "params": {"taskId": id}})
        .to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\n{headers}connection: close\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    if conn.write_all(request.as_bytes()).await.is_err() {
        return "reset".into();
    }
    let mut reply = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut reply)).await;
    let text = String::from_utf8_lossy(&reply);
    match (read, text.split(' ').nth(1)) {
        (Ok(Ok(_)), Some(status)) if text.starts_with("HTTP/1.1 ") => {
            if status == "503" {
                assert!(text.contains("-32009"), "{text}");
            }
            status.to_string()
        }
        _ => "reset".into(),
    }
}

/// Adds `what` to `seen` unless it is what was seen last.
fn note(seen: &mut Vec<String>, what: String) {
    if seen.last() != Some(&what) {
        seen.push(what);
    }
}

/// With the defaults, a whole stop (drain, hand-off, close, the webhooks' stop) fits in
/// Kubernetes' default grace period of 30 s, with room: at most 28 s from SIGTERM to exit, even
/// with a task that outlasts the drain and a program that ignores SIGTERM. Before, the defaults
/// added up to about 44 s (drain 25 s, the cancel grace 10 s and 2 s more for the hand-off, then
/// the close and 5 s for webhooks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_with_the_defaults_fits_in_kubernetes_grace() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("stubborn.toml");
    std::fs::write(
        &cfg,
        r#"[[tools]]
name = "stubborn"
command = ["sh", "-c", "trap '' TERM; while :; do sleep 1; done"]
task_support = "required"
kill_grace_secs = 60
"#,
    )
    .unwrap();
    let store = format!("sqlite://{}", dir.path().join("tasks.db").display());
    let cfg = cfg.display().to_string();
    let mut server = ServerProcess::start(&["--demo", "--store", &store, "--config", &cfg]);
    let mut c = Client::connect(&server.url).await;
    let stubborn = c.create_task("stubborn", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let long = c.create_task("slow_compute", json!({"seconds": 600})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pid = nix::unistd::Pid::from_raw(server.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let signalled = Instant::now();
    let exited = common::eventually(Duration::from_secs(40), || {
        matches!(server.child.try_wait(), Ok(Some(_)))
    });
    let took = signalled.elapsed();
    assert!(exited, "the server did not stop within 40 s");
    assert!(
        took <= Duration::from_secs(28),
        "SIGTERM to exit took {took:?}, past 28 s"
    );
    eprintln!("SIGTERM to exit: {took:?}");
    // Both were handed off (not left for a crash's recovery): the next start finds each let go
    // by a stopping server (neither can resume: no checkpoint, not retry-safe).
    drop(server);
    let server = ServerProcess::start(&["--demo", "--store", &store, "--config", &cfg]);
    let mut c = Client::connect(&server.url).await;
    for id in [&stubborn, &long] {
        let t = c.wait_terminal(id).await;
        let message = t["statusMessage"].as_str().unwrap_or_default();
        assert!(
            message.contains("handed off by a stopping server"),
            "{id}: {t}"
        );
    }
}
