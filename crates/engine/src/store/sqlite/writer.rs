//! The one writer thread and its group commit.
//!
//! Whatever queued up while the previous transaction was being made durable goes into the next one.
//! A job's caller is answered only after the commit that holds its write.
//!
//! A group is one SQLite transaction (`BEGIN IMMEDIATE` … `COMMIT`, WAL, `synchronous=FULL`): one
//! sync of the WAL for all its writes. Every write is a row when its caller hears of it, so the
//! database file is the whole truth: SQLite's backup API, `VACUUM INTO` and Litestream see every
//! acknowledged write (issue 49 retired a log of our own that held them first).
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
/// thread publishes what it commits to `cache`, and ends when every sender is dropped, after the
/// jobs queued before; it holds `lock` (the file's claim by this process) until its connection is
/// closed.
pub(super) fn spawn(
    conn: Connection,
    cache: Arc<RecordCache>,
    lock: std::fs::File,
) -> Result<(mpsc::Sender<Job>, std::thread::JoinHandle<()>), StoreError> {
    let (tx, rx) = mpsc::channel::<Job>(QUEUE);
    let thread = std::thread::Builder::new()
        // Short enough for the 15 bytes a thread name keeps on Linux (`top -H`, `/proc`).
        .name("sqlite-writer".into())
        .spawn(move || {
            writer_loop(&conn, &cache, rx);
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

fn writer_loop(conn: &Connection, cache: &RecordCache, mut rx: mpsc::Receiver<Job>) {
    // Only this thread writes, so only it keeps the counts (see `unfinished.rs`).
    let mut counts = Counts::default();
    let mut hot = Hot::new(conn);
    while let Some(first) = rx.blocking_recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let mut jobs = group.into_iter().peekable();
        while jobs.peek().is_some() {
            transaction(conn, &mut hot, cache, &mut counts, &mut jobs);
        }
    }
}

/// Runs jobs from `jobs` in one transaction, until they run out or one fails after it has written,
/// and answers each job that ran. The SQLite transaction is begun by the first job that needs one
/// (see [`Tx::conn`]).
fn transaction(
    conn: &Connection,
    hot: &mut Hot<'_>,
    cache: &RecordCache,
    counts: &mut Counts,
    jobs: &mut impl Iterator<Item = Job>,
) {
    let mut done: Vec<Completion> = Vec::new();
    let mut records = Group::new(cache, counts);
    for job in jobs.by_ref() {
        let before = conn.total_changes();
        let (ok, complete) = job(&mut records.tx(hot));
        if ok {
            records.job_succeeded();
            done.push(complete);
            continue;
        }
        records.job_failed();
        if conn.total_changes() == before && records.state.began != conn.is_autocommit() {
            // It changed no row (a statement that fails undoes itself): the others' writes stand.
            done.push(complete);
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
        for complete in done {
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
            for complete in done {
                complete(Err(StoreError::backend(
                    "commit a write transaction",
                    cause.clone(),
                )));
            }
            return;
        }
    }
    // Before any caller hears of its write, so each reads what it wrote.
    records.committed();
    for complete in done {
        complete(Ok(()));
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
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t (k TEXT PRIMARY KEY);")
            .unwrap();
        let lock = std::fs::File::create(dir.path().join("w.lock")).unwrap();
        let (queue, thread) = spawn(conn, Arc::new(RecordCache::default()), lock).unwrap();
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
