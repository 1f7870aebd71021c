//! A full disk under the embedded SQLite store: the server's files on a 4 MiB tmpfs, filled by the
//! tasks it creates. A create that finds no room gets a JSON-RPC error that says the store is
//! full, reads go on working, and once space is freed and the server restarted every task that
//! was acknowledged is found. Needs root, to mount the tmpfs (CI and these machines run as root).

mod common;
#[path = "../../server/tests/support/mod.rs"]
mod support;

use common::ServerProcess;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use support::Client;

/// A tmpfs mounted for the test; unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        assert!(
            common::is_root(),
            "this test mounts a tmpfs: run it as root (CI does)"
        );
        std::fs::create_dir_all(at).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .expect("run mount");
        assert!(status.success(), "mount a tmpfs at {}", at.display());
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_creates_clearly_keeps_reads_and_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("small");
    let _tmpfs = Tmpfs::mount(&mnt, "4m");
    // Room to free later.
    let filler = mnt.join("filler");
    std::fs::write(&filler, vec![0u8; 1024 * 1024]).unwrap();
    let store = format!("sqlite://{}", mnt.join("tasks.db").display());
    let mut server = ServerProcess::start(&["--demo", "--store", &store]);
    let mut c = Client::connect(&server.url).await;

    // 40 KiB of arguments a task: the disk is full after a few dozen.
    let label = "x".repeat(40 * 1024);
    let mut acknowledged = Vec::new();
    let mut refusal = None;
    for _ in 0..400 {
        let ex = c
            .request(
                "tools/call",
                json!({"name": "slow_compute", "arguments": {"seconds": 0, "label": label}, "task": {"ttl": 600_000}}),
            )
            .await;
        let reply = ex.reply.clone().expect("a JSON-RPC reply");
        match reply["result"]["task"]["taskId"].as_str() {
            Some(id) => acknowledged.push(id.to_string()),
            None => {
                refusal = Some(reply["error"].clone());
                break;
            }
        }
    }
    let refusal = refusal.expect("the disk filled up");
    assert_eq!(refusal["code"], -32603, "{refusal}");
    let message = refusal["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("full"),
        "the error says the store is full: {refusal}"
    );
    assert!(!acknowledged.is_empty(), "some creates went through first");

    // Reads keep working while the disk is full.
    for id in &acknowledged {
        let t = c.get_task(id).await;
        assert!(t["taskId"] == id.as_str(), "{t}");
    }

    // Space freed, the server restarted: every acknowledged task is there.
    std::fs::remove_file(&filler).unwrap();
    let pid = nix::unistd::Pid::from_raw(server.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let _ = tokio::task::block_in_place(|| server.child.wait());
    drop(server);
    let server = ServerProcess::start(&["--demo", "--store", &store]);
    let mut c = Client::connect(&server.url).await;
    for id in &acknowledged {
        let t = c.wait_terminal(id).await;
        assert_eq!(t["status"], "completed", "{id}: {t}");
    }
    // And it takes new work again.
    let t = c.create_task("slow_compute", json!({"seconds": 0})).await;
    assert!(t["taskId"].is_string(), "{t}");
    eprintln!(
        "{} tasks acknowledged before the disk was full: {message}",
        acknowledged.len()
    );
}
