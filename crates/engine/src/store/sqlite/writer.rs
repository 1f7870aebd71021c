//! The one writer thread and its group commit.
//!
//! Whatever queued up while the previous transaction was being made durable goes into the next one.
//! A job's caller is answered only after the commit that holds its write.
//!
//! A group's task writes go to the change log, not to rows (`changelog.rs`): a group whose jobs only
//! create and update tasks is one append and one sync. Its SQLite transaction is begun only by a job
//! that needs rows.
//!
//! Jobs run without a savepoint each. A savepoint made SQLite copy every page a job touched into
//! its sub-journal, about a sixth of the writer's work per task, to undo jobs that almost never
//! need undoing: a job checks before it writes, and a statement that fails undoes itself. So a job
//! that fails without having changed a row leaves the others' writes standing, and only a job that
//! fails after it has written (a database error halfway through its statements) costs the rest of
//! its transaction: that transaction is rolled back, the jobs that ran in it are told so, and the
//! jobs after it go into a new one.

use rusqlite::Connection;
use std::sync::Arc;
use tokio::sync::mpsc;

use super::cache::{Group, Hot, RecordCache, Tx};
use super::changelog::{self, ChangeLog, HandOff};
use super::unfinished::Counts;
use crate::store::StoreError;

/// Tells a job's caller how the transaction holding its write ended.
pub(super) type Completion = Box<dyn FnOnce(Result<(), StoreError>) + Send>;
/// A write: runs against the writer's connection inside the group's transaction and says whether
/// it succeeded and how to answer its caller once the transaction ends. It sees and reports the
/// task records of its group through the [`Tx`].
pub(super) type Job = Box<dyn FnOnce(&mut Tx<'_, '_>) -> (bool, Completion) + Send>;

/// Most jobs one transaction takes; bounds the latency a job can add to the others in its group.
pub(super) const MAX_GROUP: usize = 512;
/// Writes that may wait for the writer before senders have to wait too.
const QUEUE: usize = 8192;

/// Starts the writer thread on `conn` and returns the queue to send it jobs and the thread. The
/// thread publishes what it commits to `cache`, and ends when every sender is dropped, after
/// writing every pending task as its row; it holds `lock` (the file's claim by this process) until
/// its connection is closed.
pub(super) fn spawn(
    conn: Connection,
    log: ChangeLog,
    cache: Arc<RecordCache>,
    lock: std::fs::File,
) -> Result<(mpsc::Sender<Job>, std::thread::JoinHandle<()>), StoreError> {
    let (tx, rx) = mpsc::channel::<Job>(QUEUE);
    let thread = std::thread::Builder::new()
        // Short enough for the 15 bytes a thread name keeps on Linux (`top -H`, `/proc`).
        .name("sqlite-writer".into())
        .spawn(move || {
            let mut log = log;
            writer_loop(&conn, &mut log, &cache, rx);
            drop(conn);
            drop(lock);
        })
        .map_err(|e| StoreError::backend("start the SQLite writer thread", e))?;
    Ok((tx, thread))
}

/// Runs one transaction-control statement through the statement cache (they run for every group;
/// compiling them each time was a measurable share of a create).
fn control(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

fn writer_loop(
    conn: &Connection,
    log: &mut ChangeLog,
    cache: &RecordCache,
    mut rx: mpsc::Receiver<Job>,
) {
    // Only this thread writes, so only it keeps the counts (see `unfinished.rs`).
    let mut counts = Counts::default();
    let mut hot = Hot::new(conn);
    while let Some(first) = rx.blocking_recv() {
        // A batch the flusher finished: its file may start over, its records be unpinned.
        log.reap(cache, false);
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let mut jobs = group.into_iter().peekable();
        while jobs.peek().is_some() {
            transaction(conn, &mut hot, log, cache, &mut counts, &mut jobs);
        }
        if log.due() {
            match log.hand_off() {
                HandOff::Handed => {}
                HandOff::Busy if !log.overdue() => {}
                HandOff::Busy => {
                    // The flusher is behind: wait for it rather than pin and log without bound.
                    log.settle(cache);
                    if log.hand_off() != HandOff::Handed {
                        flush(conn, &mut hot, log, cache, &mut counts);
                    }
                }
                HandOff::Unable => flush(conn, &mut hot, log, cache, &mut counts),
            }
        }
    }
    // Closing: the rows hold everything, so the file is whole without its log.
    log.settle(cache);
    flush(conn, &mut hot, log, cache, &mut counts);
    // Its connection closes before the writer's, and both before the file's lock is let go.
    log.stop_flusher();
}

/// Asks the writer for a flush every [`changelog::IDLE_FLUSH`] while tasks are pending, so that
/// rows read by other processes lag little however few writes come; ends with the store. A task on
/// the caller's runtime rather than a timed wait in the writer: that wait cost a timer and a wake-up
/// per group.
pub(super) fn flush_now_and_then(jobs: &mpsc::Sender<Job>, cache: Arc<RecordCache>) {
    let jobs = jobs.downgrade();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(changelog::IDLE_FLUSH).await;
            let Some(jobs) = jobs.upgrade() else { return };
            if cache.pinned_len() == 0 {
                continue;
            }
            if jobs.send(idle_job()).await.is_err() {
                return;
            }
        }
    });
}

/// Writes every pending task as its row, in a transaction of its own.
fn flush(
    conn: &Connection,
    hot: &mut Hot<'_>,
    log: &mut ChangeLog,
    cache: &RecordCache,
    counts: &mut Counts,
) {
    if log.pending.is_empty() {
        return;
    }
    transaction(
        conn,
        hot,
        log,
        cache,
        counts,
        &mut std::iter::once(flush_job()),
    );
}

/// A job that asks the writer to hand the pending tasks to the flusher once its group is done
/// (see [`ChangeLog::hand_off`]). Tests' "crashed" writer asks nothing.
fn idle_job() -> Job {
    Box::new(|t: &mut Tx<'_, '_>| {
        if !t.crashed() {
            t.flush_soon();
        }
        (true, Box::new(|_| {}) as Completion)
    })
}

/// A job that writes every pending task as its row. A failure is logged: the tasks stay pending
/// (and in the log), and the next flush tries again. Tests' "crashed" writer writes nothing.
fn flush_job() -> Job {
    Box::new(|t: &mut Tx<'_, '_>| {
        if t.crashed() {
            return (true, Box::new(|_| {}) as Completion);
        }
        let result = t.conn().map(|_| ());
        let ok = result.is_ok();
        let complete: Completion = Box::new(move |commit| {
            if let Err(e) = result.and(commit) {
                tracing::error!(
                    error = %crate::store::error_chain(&e),
                    "writing the change log as rows failed"
                );
            }
        });
        (ok, complete)
    })
}

/// Runs jobs from `jobs` in one transaction, until they run out or one fails after it has written,
/// and answers each job that ran. The SQLite transaction is begun by the first job that needs one
/// (see [`Tx::conn`]); a group whose jobs only log commits with one append to the change log.
fn transaction(
    conn: &Connection,
    hot: &mut Hot<'_>,
    log: &mut ChangeLog,
    cache: &RecordCache,
    counts: &mut Counts,
    jobs: &mut impl Iterator<Item = Job>,
) {
    // Each job's completion, and whether it logged a write.
    let mut done: Vec<(Completion, bool)> = Vec::new();
    let mut records = Group::new(cache, counts, log);
    for job in jobs.by_ref() {
        let before = conn.total_changes();
        records.state.changes_base = None;
        let (ok, complete, logged) = {
            let mut tx = records.tx(hot);
            let (ok, complete) = job(&mut tx);
            (ok, complete, tx.logged())
        };
        if ok {
            records.job_succeeded();
            done.push((complete, logged));
            continue;
        }
        records.job_failed();
        // A flush the job asked for (`Tx::conn`) is not its own writing.
        let base = records.state.changes_base.unwrap_or(before);
        if conn.total_changes() == base && records.state.began != conn.is_autocommit() {
            // It changed no row (a statement that fails undoes itself) and logged nothing (its
            // staged writes went with it): the others' writes stand.
            done.push((complete, false));
            continue;
        }
        // It failed halfway through its writes (or SQLite ended the transaction itself): only
        // rolling the transaction back undoes what it wrote. It answers with its own error.
        complete(Ok(()));
        if !conn.is_autocommit() {
            if let Err(e) = control(conn, "ROLLBACK") {
                tracing::error!(error = %crate::store::error_chain(&e), "SQLite rollback failed");
            }
        }
        records.rolled_back();
        for (complete, _) in done {
            complete(Err(StoreError::message(
                "the transaction holding this write was rolled back after another write in it \
                 failed halfway; this write was not made",
            )));
        }
        return;
    }
    if records.state.began {
        if let Err(e) = control(conn, "COMMIT") {
            // Leave no transaction open for the next group; if this fails too there was none.
            let _ = control(conn, "ROLLBACK");
            records.rolled_back();
            let cause = Arc::new(e);
            for (complete, _) in done {
                complete(Err(StoreError::backend(
                    "commit a write transaction",
                    cause.clone(),
                )));
            }
            return;
        }
    }
    // Before any caller hears of its write, so each reads what it wrote.
    let logging = records.committed().map_err(Arc::new);
    for (complete, logged) in done {
        complete(match &logging {
            Err(cause) if logged => Err(StoreError::backend("log a write", cause.clone())),
            _ => Ok(()),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc as std_mpsc;

    /// What a test job's caller heard: `Ok` or the error's text.
    type Heard = std_mpsc::Receiver<Result<(), String>>;

    /// A job running `f` on the writer's connection; its caller hears the job's own error if `f`
    /// fails, else how the transaction ended.
    fn job(f: impl FnOnce(&Connection) -> rusqlite::Result<()> + Send + 'static) -> (Job, Heard) {
        let (tx, rx) = std_mpsc::channel();
        let job: Job = Box::new(move |t: &mut Tx<'_, '_>| {
            let result = t
                .conn()
                .map_err(|e| e.to_string())
                .and_then(|c| f(c).map_err(|e| e.to_string()));
            let ok = result.is_ok();
            let complete: Completion = Box::new(move |commit| {
                let _ = tx.send(match commit {
                    Ok(()) => result,
                    Err(e) => Err(e.to_string()),
                });
            });
            (ok, complete)
        });
        (job, rx)
    }

    fn insert(k: &'static str) -> impl Fn(&Connection) -> rusqlite::Result<()> {
        move |c| c.execute("INSERT INTO t (k) VALUES (?1)", [k]).map(|_| ())
    }

    /// Starts a writer on a fresh file with one table, and runs `jobs` in one group: a first job
    /// holds the writer until all of them are queued. Returns what each job's caller heard and the
    /// rows the table holds afterwards.
    fn run_in_one_group(jobs: Vec<(Job, Heard)>) -> (Vec<Result<(), String>>, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.sqlite");
        let mut conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; CREATE TABLE t (k TEXT PRIMARY KEY); \
             CREATE TABLE change_log (flushed_seq INTEGER NOT NULL); \
             INSERT INTO change_log VALUES (0);",
        )
        .unwrap();
        let log = ChangeLog::open(&path, &mut conn).unwrap();
        let lock = std::fs::File::create(dir.path().join("w.lock")).unwrap();
        let (queue, thread) = spawn(conn, log, Arc::new(RecordCache::default()), lock).unwrap();
        let (started_tx, started) = std_mpsc::channel();
        let (release, released) = std_mpsc::channel::<()>();
        let (gate, gate_heard) = job(move |_| {
            started_tx.send(()).unwrap();
            released.recv().unwrap();
            Ok(())
        });
        queue.blocking_send(gate).unwrap();
        started.recv().unwrap();
        let mut heard = Vec::new();
        for (j, h) in jobs {
            queue.blocking_send(j).unwrap();
            heard.push(h);
        }
        release.send(()).unwrap();
        assert_eq!(gate_heard.recv().unwrap(), Ok(()));
        let heard = heard.into_iter().map(|h| h.recv().unwrap()).collect();
        drop(queue);
        thread.join().unwrap();
        let conn = Connection::open(&path).unwrap();
        let rows = conn
            .prepare("SELECT k FROM t ORDER BY k")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<Vec<String>, _>>()
            .unwrap();
        (heard, rows)
    }

    #[test]
    fn a_job_that_fails_after_writing_costs_its_transaction_and_no_more() {
        let (heard, rows) = run_in_one_group(vec![
            job(insert("a")),
            // Writes "b", then fails on a taken key: only the transaction's rollback undoes "b".
            job(|c| {
                insert("b")(c)?;
                insert("a")(c)
            }),
            job(insert("c")),
            job(insert("d")),
        ]);
        assert!(
            heard[0].as_ref().unwrap_err().contains("rolled back"),
            "{heard:?}"
        );
        assert!(
            heard[1].as_ref().unwrap_err().contains("UNIQUE"),
            "{heard:?}"
        );
        assert_eq!(heard[2], Ok(()));
        assert_eq!(heard[3], Ok(()));
        assert_eq!(rows, ["c", "d"]);
    }

    #[test]
    fn jobs_that_fail_without_writing_leave_the_others_writes_standing() {
        let (heard, rows) = run_in_one_group(vec![
            job(insert("a")),
            // Its one statement fails (the key is taken) and undoes itself.
            job(insert("a")),
            // Changes no row, then fails, as a refused compare-and-set does.
            job(|c| {
                c.execute("UPDATE t SET k = 'x' WHERE k = 'none'", [])?;
                Err(rusqlite::Error::QueryReturnedNoRows)
            }),
            job(insert("b")),
        ]);
        assert_eq!(heard[0], Ok(()));
        assert!(
            heard[1].as_ref().unwrap_err().contains("UNIQUE"),
            "{heard:?}"
        );
        assert!(heard[2].is_err());
        assert_eq!(heard[3], Ok(()));
        assert_eq!(rows, ["a", "b"]);
    }
}
