//! The flusher: writes the change log's pending tasks as rows on a thread and a connection of its
//! own, so that no group of the writer waits for it.
//!
//! Every durable write passes through the one writer thread, so the writer's time per task bounds
//! what the store takes on any number of cores. Writing a task as its row (the table's b-tree and
//! its indexes, and the commit that makes them durable) was most of that time, and a flush of 64
//! tasks held up whichever group came next. The writer now hands the pending tasks over as a
//! *batch* and goes on logging; the flusher writes the batch in one transaction with the log's
//! sequence number it covers, commits, and says so. Three rules keep readers right:
//!
//! - One batch at a time, and the two connections never write at once: the writer waits for a
//!   batch in flight before it begins a transaction of its own (`ChangeLog::settle`), so a job that
//!   reads rows sees the batch's.
//! - A batch's tasks stay pinned in the record cache until the writer has taken in the flusher's
//!   commit (`ChangeLog::reap`): a reader that finds a task not pinned finds its row current.
//! - The log alternates between two files: the writer appends to one while the batch of the other
//!   is written, and a file starts over only once a commit covers all its frames.
//!
//! A batch that fails goes back to the writer, whole: its tasks are pending again, and the writer
//! writes them itself, with everything pending since, before it hands over another.

use rusqlite::Connection;
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};

use super::cache::IdMap;
use super::changelog::{flushed_seq, write_pending, Pending};
use super::rows;
use super::Context;
use crate::store::StoreError;

/// Pending tasks handed to the flusher, and the log's last sequence number they cover.
pub(super) struct Batch {
    pub pending: IdMap<Pending>,
    pub seq: u64,
}

/// How a batch ended.
pub(super) enum Done {
    /// Its rows are committed: the ids of its tasks.
    Written(Vec<String>),
    /// Nothing of it was written (the error, or `None` in a test's crash): the batch comes back.
    NotWritten(Batch, Option<StoreError>),
    /// The thread stopped without an answer (a panic it did not catch): the batch is gone with
    /// it, and its frames are read back from the log.
    Lost,
}

/// Test hooks on the flusher: hold it before it writes, or make its next batches fail.
#[cfg(test)]
#[derive(Clone, Default)]
pub(super) struct Hooks {
    /// Held by a test, the flusher waits for it before each batch.
    pub gate: Gate,
    /// Set, every batch fails as a database error would, and nothing of it is written.
    pub fail: Arc<std::sync::atomic::AtomicBool>,
    /// Set, the flusher writes nothing, as if the process died (`ChangeLog::crash`).
    pub crash: Arc<std::sync::atomic::AtomicBool>,
    /// Set, the thread stops at its next batch without an answer, as a panic would stop it.
    pub die: Arc<std::sync::atomic::AtomicBool>,
    /// Set, each batch is committed and then reported failed, as a commit whose error came after
    /// it landed would be.
    pub fail_after_commit: Arc<std::sync::atomic::AtomicBool>,
}

/// A gate a test holds shut to keep the flusher from writing (see [`Hooks`]).
#[cfg(test)]
#[derive(Clone, Default)]
pub(super) struct Gate(Arc<(Mutex<bool>, Condvar)>);

/// The gate held shut until this is dropped (a failing test lets the flusher go too).
#[cfg(test)]
pub(super) struct Held(Gate);

#[cfg(test)]
impl Gate {
    /// Shuts the gate: the next batch waits before it is written.
    pub(super) fn hold(&self) -> Held {
        *lock(&self.0 .0) = true;
        Held(self.clone())
    }

    /// Waits while the gate is shut.
    pub(super) fn pass(&self) {
        let (shut, signal) = &*self.0;
        let mut g = lock(shut);
        while *g {
            g = signal.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }
}

#[cfg(test)]
impl Drop for Held {
    fn drop(&mut self) {
        let (shut, signal) = &*self.0 .0;
        *lock(shut) = false;
        signal.notify_all();
    }
}

/// The slot the flusher leaves its answer in, and the signal that it did.
type Answer = Arc<(Mutex<Option<Done>>, Condvar)>;

/// The flusher thread, as the writer sees it.
pub(super) struct Flusher {
    batches: Option<mpsc::SyncSender<Batch>>,
    answer: Answer,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Flusher {
    /// Starts the flusher on `conn`, a second read-write connection to the store's file.
    pub(super) fn start(
        conn: Connection,
        #[cfg(test)] hooks: Hooks,
    ) -> Result<Flusher, StoreError> {
        let (batches, rx) = mpsc::sync_channel::<Batch>(1);
        let answer: Answer = Arc::default();
        let theirs = answer.clone();
        let thread = std::thread::Builder::new()
            .name("sqlite-flusher".into())
            .spawn(move || {
                while let Ok(batch) = rx.recv() {
                    #[cfg(test)]
                    let done = {
                        hooks.gate.pass();
                        if hooks.die.load(std::sync::atomic::Ordering::SeqCst) {
                            return;
                        }
                        if hooks.crash.load(std::sync::atomic::Ordering::SeqCst) {
                            Done::NotWritten(batch, None)
                        } else if hooks.fail.load(std::sync::atomic::Ordering::SeqCst) {
                            let e = StoreError::message("the test made the flusher fail");
                            Done::NotWritten(batch, Some(e))
                        } else if hooks
                            .fail_after_commit
                            .load(std::sync::atomic::Ordering::SeqCst)
                        {
                            let e = write_rows(&conn, &batch).err().unwrap_or_else(|| {
                                StoreError::message("the test failed a commit that landed")
                            });
                            not_written(&conn, batch, e)
                        } else {
                            write(&conn, batch)
                        }
                    };
                    #[cfg(not(test))]
                    let done = write(&conn, batch);
                    let (slot, signal) = &*theirs;
                    *lock(slot) = Some(done);
                    signal.notify_all();
                }
            })
            .map_err(|e| StoreError::backend("start the SQLite flusher thread", e))?;
        Ok(Flusher {
            batches: Some(batches),
            answer,
            thread: Some(thread),
        })
    }

    /// Hands `batch` over; gives it back if the flusher has stopped. The caller sends one batch
    /// at a time and takes its answer ([`Flusher::answer`]) before it sends the next.
    pub(super) fn send(&self, batch: Batch) -> Result<(), Batch> {
        match &self.batches {
            Some(tx) => tx.send(batch).map_err(|e| e.0),
            None => Err(batch),
        }
    }

    /// How the batch in flight ended, waiting for it if `wait`; `None` while it is in flight (and
    /// not waited for). A thread that stopped without answering is [`Done::Lost`], so that the
    /// writer never waits on a thread that is gone.
    pub(super) fn answer(&self, wait: bool) -> Option<Done> {
        let (slot, signal) = &*self.answer;
        let mut guard = lock(slot);
        loop {
            if let Some(done) = guard.take() {
                return Some(done);
            }
            if self.thread.as_ref().is_none_or(|t| t.is_finished()) {
                return Some(Done::Lost);
            }
            if !wait {
                return None;
            }
            guard = signal
                .wait_timeout(guard, std::time::Duration::from_millis(100))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl Drop for Flusher {
    /// Stops the thread and closes its connection: the writer drops the flusher before it lets go
    /// of the file.
    fn drop(&mut self) {
        self.batches.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes `batch` as rows in one transaction that also records the log's sequence number it
/// covers. The statements are compiled per batch through the connection's statement cache: a
/// batch is tens of tasks, and a held statement would borrow the connection for the thread's life.
/// Whatever happens, the writer gets an answer: it may be waiting for one, and a batch that is not
/// written has to come back to it.
fn write(conn: &Connection, batch: Batch) -> Done {
    let written =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| write_rows(conn, &batch)))
            .unwrap_or_else(|_| Err(StoreError::message("the flusher panicked writing rows")));
    match written {
        Ok(()) => Done::Written(batch.pending.into_keys().collect()),
        Err(e) => not_written(conn, batch, e),
    }
}

/// A batch whose write failed with `e`: rolled back, and it comes back to the writer. Unless its
/// commit landed after all (an error after the commit record reached the file): then the rows
/// say they cover the batch's last frame, and the batch is written. Handed back, the writer would
/// insert its tasks again, and every flush after it would fail on rows that exist. Nothing else
/// writes that number while a batch is out: the writer waits for it before it writes.
fn not_written(conn: &Connection, batch: Batch, e: StoreError) -> Done {
    if !conn.is_autocommit() {
        if let Err(r) = conn.execute_batch("ROLLBACK") {
            tracing::error!(error = %crate::store::error_chain(&r), "SQLite rollback failed");
        }
    }
    if conn.is_autocommit() && flushed_seq(conn).is_ok_and(|n| n >= batch.seq) {
        tracing::warn!(
            error = %crate::store::error_chain(&e),
            tasks = batch.pending.len(),
            "writing the change log as rows reported a failure, but its commit landed"
        );
        return Done::Written(batch.pending.into_keys().collect());
    }
    Done::NotWritten(batch, Some(e))
}

fn write_rows(conn: &Connection, batch: &Batch) -> Result<(), StoreError> {
    conn.prepare_cached("BEGIN IMMEDIATE")
        .and_then(|mut s| s.execute([]))
        .context("begin writing the change log as rows")?;
    let mut insert = conn
        .prepare_cached(rows::INSERT_TASK)
        .context("prepare the flusher's insert")?;
    let mut update = conn
        .prepare_cached(rows::UPDATE_TASK)
        .context("prepare the flusher's update")?;
    write_pending(conn, &mut insert, &mut update, &batch.pending, batch.seq)?;
    conn.prepare_cached("COMMIT")
        .and_then(|mut s| s.execute([]))
        .with_context(|| format!("commit {} tasks written as rows", batch.pending.len()))?;
    Ok(())
}
