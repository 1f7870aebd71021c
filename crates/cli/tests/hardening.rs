//! The server under a client that holds connections open (issue 13, item 1), as a person would run
//! it: `mcp-tasks serve` under a lowered descriptor limit, hundreds of silent connections, and a
//! request that must still be served.

mod common;

use common::{text, ClientCli as Cli, ServerProcess};
use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// `mcp-tasks serve --demo` under 256 descriptors, soft and hard (the server cannot raise it, and
/// fits its connections under it), with `config` if given; its stderr piped. The server and its
/// `host:port`.
fn serve_at_256_descriptors(config: Option<&std::path::Path>) -> (ServerProcess, String) {
    let mut cmd = std::process::Command::new("prlimit");
    cmd.args(["--nofile=256:256", "--"])
        .arg(common::bin())
        .args([
            "serve",
            "--demo",
            "--store",
            "memory:",
            "--listen",
            "127.0.0.1:0",
        ])
        .env("RUST_LOG", "warn")
        .stderr(std::process::Stdio::piped());
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    let server = ServerProcess::spawn(cmd);
    let addr = server
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    (server, addr)
}

#[test]
fn silent_connections_beyond_the_descriptor_limit_do_not_stop_new_requests() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("limits.toml");
    // Long enough that all 300 silent connections below are open at once, even on a busy machine.
    std::fs::write(&cfg, "[server]\nheader_timeout_secs = 3\n").unwrap();
    let (mut server, addr) = serve_at_256_descriptors(Some(&cfg));
    // 300 connections that never send a byte: more than the server has descriptors for.
    let held: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(&addr).expect("the kernel takes the connection"))
        .collect();
    let started = Instant::now();
    let url = server.url.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(Cli::new(&url).run(&["tools", "--no-2026"]));
    });
    // Without the limits, this request hangs: every descriptor is taken by a silent connection.
    let out = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the request is served within 30 s");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let took = started.elapsed();
    // The held connections are closed 3 s after they were accepted, in waves of the cap.
    assert!(took < Duration::from_secs(20), "served after {took:?}");
    drop(held);
    server.child.kill().unwrap();
    let mut log = String::new();
    server
        .child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(
        log.contains("open connection limit reached"),
        "the cap is logged: {log}"
    );
}

#[test]
fn at_the_connection_cap_silent_connections_make_room_for_a_fresh_request_at_once() {
    // The default header timeout (10 s): without making room, a fresh request would wait for the
    // silent connections to time out.
    let (_server, addr) = serve_at_256_descriptors(None);
    let held: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(&addr).expect("the kernel takes the connection"))
        .collect();
    // Let the server take as many as it has room for.
    std::thread::sleep(Duration::from_millis(500));
    for round in 0..3 {
        let started = Instant::now();
        let mut fresh = TcpStream::connect(&addr).unwrap();
        fresh
            .set_read_timeout(Some(Duration::from_secs(15)))
            .unwrap();
        std::io::Write::write_all(
            &mut fresh,
            b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        let mut answer = String::new();
        let _ = fresh.read_to_string(&mut answer);
        let took = started.elapsed();
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "round {round}: {answer:?} after {took:?}"
        );
        assert!(
            took < Duration::from_secs(2),
            "round {round}: answered after {took:?}"
        );
    }
    drop(held);
}

/// What `serve --demo` on a memory store writes on stderr (a pipe) under `RUST_LOG=filter` while
/// each of `runs` (arguments of `mcp-tasks`, against its URL) is made.
fn serve_log(filter: &str, runs: &[&[&str]]) -> String {
    let mut cmd = common::serve_command(&["--demo", "--store", "memory:"]);
    cmd.env("RUST_LOG", filter)
        .env_remove("NO_COLOR")
        .stderr(std::process::Stdio::piped());
    let mut server = ServerProcess::spawn(cmd);
    for args in runs {
        Cli::new(&server.url).run(args);
    }
    // A stop, not a kill: the log's writer, off the request path, writes what it holds first.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while server.child.try_wait().unwrap().is_none() {
        assert!(
            std::time::Instant::now() < until,
            "serve did not stop on SIGTERM"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut log = String::new();
    server
        .child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    log
}

#[test]
fn log_lines_to_a_pipe_carry_no_colour_codes() {
    // As `mcp-tasks serve 2> log` would: stderr is a pipe, not a terminal, and NO_COLOR is unset.
    let log = serve_log("info", &[&["tools", "--no-2026"]]);
    assert!(log.contains("INFO"), "some lines were logged: {log}");
    assert!(!log.contains('\u{1b}'), "a colour code in: {log:?}");
}

#[test]
fn every_request_has_a_debug_line_with_its_method_principal_status_and_duration() {
    // Discovery and a list on both wires: requests that make no task.
    let log = serve_log(
        "mcp_tasks_server=debug",
        &[&["tools"], &["tools", "--no-2026"]],
    );
    let handled: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("request handled"))
        .collect();
    for method in ["server/discover", "initialize", "tools/list"] {
        let line = handled
            .iter()
            .find(|l| l.contains(&format!("method={method}")))
            .unwrap_or_else(|| panic!("no line for {method} in:\n{log}"));
        assert!(line.contains("DEBUG"), "{line}");
        assert!(line.contains("principal="), "{line}");
        assert!(line.contains("status=ok"), "{line}");
        assert!(line.contains("duration_ms="), "{line}");
    }
}
