//! A webhook receiver on loopback that verifies every delivery with the official `standardwebhooks`
//! library (interop/python/webhook_receiver.py, in the interop venv scripts/test.sh makes).

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::repo_root;

/// A running receiver; killed on drop.
pub struct Receiver {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    seen: Arc<Mutex<Vec<Value>>>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Receiver {
    /// Starts one on any free port, verifying with `secret`; `extra` are its flags (`--status`).
    pub fn start(secret: &str, extra: &[&str]) -> Receiver {
        Receiver::start_on(0, secret, extra)
    }

    /// Starts one on `port`.
    pub fn start_on(port: u16, secret: &str, extra: &[&str]) -> Receiver {
        let py = repo_root().join("interop/python/.venv/bin/python");
        assert!(
            py.exists(),
            "interop/python/.venv is missing: run scripts/test.sh"
        );
        let mut child = Command::new(py)
            .arg(repo_root().join("interop/python/webhook_receiver.py"))
            .args(["--secret", secret, "--port", &port.to_string()])
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the webhook receiver");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first: Value = serde_json::from_str(
            &lines
                .next()
                .expect("the receiver says where it listens")
                .unwrap(),
        )
        .unwrap();
        let port = u16::try_from(first["listening"].as_u64().unwrap()).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let keep = seen.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str(&line) {
                    keep.lock().unwrap().push(v);
                }
            }
        });
        Receiver { child, port, seen }
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hooks", self.port)
    }

    /// What it received so far, in order.
    pub fn seen(&self) -> Vec<Value> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until it received at least `n` deliveries (at most `within`).
    pub fn wait_for(&self, n: usize, within: Duration) -> Vec<Value> {
        let start = Instant::now();
        loop {
            let seen = self.seen();
            if seen.len() >= n {
                return seen;
            }
            assert!(
                start.elapsed() < within,
                "{} of {n} deliveries within {within:?}: {seen:?}",
                seen.len()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The event types of the deliveries that verified and were accepted, in order.
    pub fn accepted_types(&self) -> Vec<String> {
        self.seen()
            .iter()
            .filter(|d| d["verified"] == true && d["answered"].as_u64().is_some_and(|s| s < 300))
            .map(|d| d["body"]["type"].as_str().unwrap_or("?").to_string())
            .collect()
    }
}
