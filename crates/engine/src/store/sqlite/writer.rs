//! The one writer thread and its group commit.
//!
//! Whatever queued up while the previous transaction was being made durable goes into the next one,
//! each job in its own savepoint so one failing job does not undo the others. A job's caller is
//! answered only after the commit that holds its write.

use rusqlite::Connection;
use std::sync::Arc;
use tokio::sync::mpsc;

use super::cache::{Group, RecordCache, Tx};
use super::unfinished::Counts;
use crate::store::StoreError;

/// Tells a job's caller how the transaction holding its write ended.
pub(super) type Completion = Box<dyn FnOnce(Result<(), StoreError>) + Send>;
/// A write: runs against the writer's connection inside a savepoint and says whether it succeeded
/// (a failed job's savepoint is rolled back) and how to answer its caller once the group commits.
/// It sees and reports the task records of its group through the [`Tx`].
pub(super) type Job = Box<dyn FnOnce(&mut Tx<'_>) -> (bool, Completion) + Send>;

/// Most jobs one transaction takes; bounds the latency a job can add to the others in its group.
const MAX_GROUP: usize = 512;
/// Writes that may wait for the writer before senders have to wait too.
const QUEUE: usize = 8192;

/// Starts the writer thread on `conn` and returns the queue to send it jobs and the thread. The
/// thread publishes what it commits to `cache`, and ends when every sender is dropped; it holds
/// `lock` (the file's claim by this process) until its connection is closed.
pub(super) fn spawn(
    conn: Connection,
    cache: Arc<RecordCache>,
    lock: std::fs::File,
) -> Result<(mpsc::Sender<Job>, std::thread::JoinHandle<()>), StoreError> {
    let (tx, rx) = mpsc::channel::<Job>(QUEUE);
    let thread = std::thread::Builder::new()
        .name("mcp-tasks-sqlite-writer".into())
        .spawn(move || {
            writer_loop(&conn, &cache, rx);
            drop(conn);
            drop(lock);
        })
        .map_err(|e| StoreError::backend("start the SQLite writer thread", e))?;
    Ok((tx, thread))
}

/// Runs one transaction-control statement through the statement cache (they run several times per
/// write; compiling them each time was a measurable share of a create).
fn control(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

fn writer_loop(conn: &Connection, cache: &RecordCache, mut rx: mpsc::Receiver<Job>) {
    // Only this thread writes, so only it keeps the counts (see `unfinished.rs`).
    let mut counts = Counts::default();
    while let Some(first) = rx.blocking_recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        if let Err(e) = control(conn, "BEGIN IMMEDIATE") {
            // Every job of the group is told the same cause, so it is shared rather than copied.
            let cause = Arc::new(e);
            for job in group {
                // The job never ran; answer it with the error without touching the database.
                let (_, complete) = job_without_db(job);
                complete(Err(StoreError::backend(
                    "begin a write transaction",
                    cause.clone(),
                )));
            }
            continue;
        }
        let mut done: Vec<Completion> = Vec::with_capacity(group.len());
        let mut records = Group::new(cache, &mut counts);
        for job in group {
            if let Err(e) = control(conn, "SAVEPOINT job") {
                let (_, complete) = job_without_db(job);
                complete(Err(StoreError::backend("open a savepoint for a write", e)));
                continue;
            }
            let (ok, complete) = job(&mut records.tx(conn));
            let end = if ok {
                records.job_released();
                control(conn, "RELEASE job")
            } else {
                records.job_rolled_back();
                control(conn, "ROLLBACK TO job").and_then(|()| control(conn, "RELEASE job"))
            };
            if let Err(e) = end {
                records.job_failed();
                tracing::error!(error = %crate::store::error_chain(&e), "SQLite savepoint release failed");
            }
            done.push(complete);
        }
        let commit = control(conn, "COMMIT").map_err(Arc::new);
        if commit.is_err() {
            // Leave no transaction open for the next group; if this fails too there was none.
            let _ = control(conn, "ROLLBACK");
            records.rolled_back();
        } else {
            // Before any caller hears of its write, so each reads what it wrote.
            records.committed();
        }
        for complete in done {
            complete(match &commit {
                Ok(()) => Ok(()),
                Err(cause) => Err(StoreError::backend(
                    "commit a write transaction",
                    cause.clone(),
                )),
            });
        }
    }
}

/// Extracts a job's completion without running it against the database. Jobs are closures, so the only
/// way to get their completion is to run them; an in-memory connection with no tables makes every
/// statement fail, which is what an unrun job should report anyway.
fn job_without_db(job: Job) -> (bool, Completion) {
    match Connection::open_in_memory() {
        Ok(scratch) => {
            let cache = RecordCache::default();
            let mut counts = Counts::default();
            let mut group = Group::new(&cache, &mut counts);
            let mut tx = group.tx(&scratch);
            job(&mut tx)
        }
        Err(_) => (false, Box::new(|_| {})),
    }
}
