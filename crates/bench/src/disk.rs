//! What a durable commit costs this machine: a small write in place and `fdatasync`, again and
//! again, timed by the clock and by the thread's CPU time.
//!
//! The SQLite store pays one such commit per writer group (the sync of its WAL) and the memory
//! store none, so where one commit costs a large share of what a create costs the memory store, the
//! durable store's rate beside the memory store's is bounded by it whatever the server does. On a
//! virtual machine the CPU figure is the one to read: each request to the virtual disk is an exit
//! to the hypervisor, counted as the guest's system time.

use anyhow::{Context, Result};
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

use crate::load::percentile;

/// Bytes each commit writes: a small writer group's share of a WAL frame.
pub const WRITE: usize = 512;
/// The region the writes cycle through, written and synced before the timing: the file neither
/// grows nor gets new blocks, as SQLite's WAL does not once it has been through its first round
/// (it starts over at its head after a checkpoint).
const REGION: u64 = 1 << 20;

/// The cost of one durable commit.
#[derive(Clone, Copy, Debug)]
pub struct CommitCost {
    /// Commits timed.
    pub commits: usize,
    /// Wall time of one commit, median, µs.
    pub p50_us: f64,
    /// Wall time of one commit, 99th percentile, µs.
    pub p99_us: f64,
    /// CPU time of the committing thread per commit (user and system), µs.
    pub cpu_us: f64,
}

/// The CPU time this thread has run, ns (`/proc/thread-self/schedstat`: user and system alike).
fn thread_cpu_ns() -> Result<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat")
        .context("read /proc/thread-self/schedstat")?;
    s.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .context("parse /proc/thread-self/schedstat")
}

/// Times `commits` commits in a file in `dir` (the file is removed after). Blocks for about
/// `commits` × the disk's flush time.
pub fn measure(dir: &Path, commits: usize) -> Result<CommitCost> {
    let path = dir.join("commit-cost");
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("create {}", path.display()))?;
    let zeros = vec![0u8; REGION as usize];
    file.write_all_at(&zeros, 0)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("write {}", path.display()))?;
    let frame = vec![0x5au8; WRITE];
    let mut walls = Vec::with_capacity(commits);
    let cpu_before = thread_cpu_ns()?;
    for i in 0..commits as u64 {
        let at = (i * WRITE as u64) % (REGION - WRITE as u64);
        let started = Instant::now();
        file.write_all_at(&frame, at)
            .and_then(|()| file.sync_data())
            .with_context(|| format!("commit to {}", path.display()))?;
        walls.push(started.elapsed());
    }
    let cpu = thread_cpu_ns()? - cpu_before;
    drop(file);
    let _ = std::fs::remove_file(&path);
    walls.sort();
    Ok(CommitCost {
        commits,
        p50_us: percentile(&walls, 0.5) * 1e3,
        p99_us: percentile(&walls, 0.99) * 1e3,
        cpu_us: cpu as f64 / 1e3 / commits.max(1) as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_takes_time_and_cpu_and_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let cost = measure(dir.path(), 50).unwrap();
        assert_eq!(cost.commits, 50);
        assert!(cost.p50_us > 0.0 && cost.p99_us >= cost.p50_us, "{cost:?}");
        assert!(cost.cpu_us > 0.0, "{cost:?}");
        assert!(!dir.path().join("commit-cost").exists());
    }
}
