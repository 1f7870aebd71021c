//! Helpers for tests that run the real `mcp-tasks` binary.
#![allow(dead_code)]

pub mod audit;
pub mod cluster;
pub mod history;
pub mod pg;
pub mod receiver;
pub mod relay;
pub mod wrap_client;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mcp-tasks"))
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// A running `mcp-tasks serve` over HTTP on an ephemeral loopback port. Killed (SIGKILL) on drop.
pub struct ServerProcess {
    pub child: Child,
    pub url: String,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ServerProcess {
    /// Starts the server with `args` (plus `--listen 127.0.0.1:0`) and waits for its URL.
    pub fn start(args: &[&str]) -> ServerProcess {
        ServerProcess::spawn(serve_command(args))
    }

    /// Starts any server that prints `listening on URL` as its first line, and waits for that URL.
    pub fn spawn(mut cmd: Command) -> ServerProcess {
        let mut child = cmd
            .current_dir(repo_root())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the server");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            for _ in lines {}
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("server printed its URL");
        let url = line
            .strip_prefix("listening on ")
            .expect("listening line")
            .trim()
            .to_string();
        ServerProcess { child, url }
    }

    /// Kills the server with SIGKILL, as a crash would.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `mcp-tasks serve ARGS --listen 127.0.0.1:0`, logging warnings and errors only.
pub fn serve_command(args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.arg("serve")
        .args(args)
        .args(["--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "warn");
    cmd
}

/// A loopback port free now: for a server whose own URL (an OAuth audience, a replica's address)
/// must be known before it starts.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// `mcp-tasks` as a client: its own state directory (remembered tasks), `MCP_TASKS_URL` set to
/// `url`, no terminal.
pub struct ClientCli {
    pub url: String,
    pub state: tempfile::TempDir,
}

impl ClientCli {
    pub fn new(url: &str) -> ClientCli {
        ClientCli {
            url: url.to_string(),
            state: tempfile::tempdir().unwrap(),
        }
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bin());
        c.args(args)
            .env("XDG_STATE_HOME", self.state.path())
            .env("MCP_TASKS_URL", &self.url)
            .env_remove("MCP_TASKS_KEY")
            .stdin(Stdio::null());
        c
    }

    /// Runs to the end (at most 60 s).
    pub fn run(&self, args: &[&str]) -> std::process::Output {
        let mut child = self
            .cmd(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while child.try_wait().unwrap().is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "mcp-tasks {args:?} hung"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        child.wait_with_output().unwrap()
    }
}

/// Bytes as text (lossy).
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Waits until `f` returns true or `limit` passes.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Whether the tests run as root (CI containers): some programs (initdb, nginx's workers) need
/// another user then.
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// The rmcp server, built with its own pinned lock file (scripts/test.sh builds it first; this
/// builds it when run on its own).
pub fn rmcp_server() -> PathBuf {
    let target = std::env::var_os("MCP_TASKS_INTEROP_TARGET")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/mcp-tasks/interop-target")
        });
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "--quiet",
            "--locked",
            "--manifest-path",
            "interop/rmcp-server/Cargo.toml",
        ])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(repo_root())
        .status()
        .expect("run cargo");
    assert!(status.success(), "building interop/rmcp-server failed");
    target.join("debug/mcp-interop-rmcp-server")
}

/// The official TypeScript SDK v1 task server (`interop/ts/task-server.mjs`, 2025-11-25 over HTTP).
pub fn ts_task_server() -> ServerProcess {
    let modules = repo_root().join("interop/ts/node_modules/@modelcontextprotocol/sdk");
    assert!(modules.exists(), "interop/ts/node_modules is missing: run `npm ci --prefix interop/ts` (scripts/test.sh does)");
    let mut c = Command::new("node");
    c.arg("interop/ts/task-server.mjs");
    ServerProcess::spawn(c)
}

/// Runs `cmd` to its end, killing it after `limit` (the test then fails on its status).
pub fn output_within(cmd: &mut Command, limit: Duration) -> std::process::Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the command");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        if rx.recv_timeout(limit).is_err() {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    });
    let out = child.wait_with_output().expect("wait for the command");
    let _ = tx.send(());
    out
}

/// A loopback listener standing in for a proxy: counts the connections made to it.
pub fn counting_proxy() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // Answer like a proxy that cannot reach anything, and close.
            if let Ok(mut conn) = conn {
                use std::io::Write;
                let _ = conn.write_all(
                    b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
            }
        }
    });
    (port, seen)
}

/// Sets every proxy variable of `cmd`'s environment to `proxy`, with no `NO_PROXY`.
pub fn through_proxy(cmd: &mut Command, proxy: &str) {
    for var in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        cmd.env(var, proxy);
    }
    cmd.env_remove("NO_PROXY").env_remove("no_proxy");
}
