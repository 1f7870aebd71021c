//! Task updates in groups: the compare-and-set writes that queue up while one group commits go into
//! the next, in one transaction, so that PostgreSQL flushes its WAL once for all of them.
//!
//! Measured with `mcp-tasks-bench pg-cost` (docs/bench/history.md): most of PostgreSQL's CPU per
//! task is in the kernel (sockets, the WAL flush, waking the backends that wait on it), and a task's
//! finish was a transaction of its own, flushed on its own. A group of one is written as before,
//! alone; a larger group is BEGIN, the writes and COMMIT pipelined: one round trip.
//!
//! Each write stays what it was: a compare-and-set on the row version, which says whether the row
//! was written. A write that fails (an error, not a mismatch) rolls the group back; then each write
//! of the group is made again alone, so one bad write never costs the others theirs.

use deadpool_postgres::{GenericClient, Pool};
use tokio::sync::{mpsc, oneshot};

use super::rows::{prepare_write, update_task_if};
use super::Context;
use crate::model::TaskRecord;
use crate::store::StoreError;
use crate::webhook::WriteBase;

/// Most writes one transaction takes.
const MAX_GROUP: usize = 256;

/// One write waiting for its group: `task` as it is to be stored, if its row is still at `version`.
pub(super) struct Job {
    pub(super) task: TaskRecord,
    pub(super) version: i64,
    pub(super) was: WriteBase,
    /// Whether the row was written (false: it was not at `version`).
    pub(super) done: oneshot::Sender<Result<bool, StoreError>>,
}

/// Starts the loop that commits writes in groups on `pool`; it ends when every sender is dropped.
pub(super) fn spawn(pool: Pool) -> mpsc::Sender<Job> {
    super::groups::spawn(pool, MAX_GROUP, |pool, group| async move {
        write_group(&pool, group).await
    })
}

async fn write_group(pool: &Pool, mut group: Vec<Job>) {
    let client = match pool.get().await.context("get a PostgreSQL connection") {
        Ok(c) => c,
        Err(e) => {
            let cause = super::creates::shared_cause(&e);
            for job in group {
                let _ = job.done.send(Err(StoreError::message(cause.clone())));
            }
            return;
        }
    };
    if group.len() == 1 {
        return alone(&client, group).await;
    }
    // Rows locked in one order by every replica's groups: two groups never wait on each other.
    group.sort_by(|a, b| a.task.id.cmp(&b.task.id));
    // Every statement ready first: a write whose statement is ready is sent when first polled, so
    // BEGIN, the writes and COMMIT leave in that order, in one flight (one round trip).
    let mut prepared = true;
    for job in &group {
        prepared &= prepare_write(&client, &job.task, job.was).await.is_ok();
    }
    if !prepared {
        // Whatever failed to prepare fails again, and says why, when written alone.
        return alone(&client, group).await;
    }
    let (begun, written, committed) = tokio::join!(
        client.batch_execute("BEGIN"),
        futures::future::join_all(
            group
                .iter()
                .map(|j| update_task_if(&client, &j.task, j.version, j.was))
        ),
        client.batch_execute("COMMIT"),
    );
    if begun.is_err() {
        // No transaction: each write stood alone and its answer is its own.
        for (job, result) in group.into_iter().zip(written) {
            let _ = job.done.send(result);
        }
        return;
    }
    if !written.iter().all(Result::is_ok) {
        // One write failed and the transaction with it (its COMMIT rolled back): the group's
        // other writes were undone too.
        return alone(&client, group).await;
    }
    match committed.context("commit") {
        Ok(()) => {
            for (job, result) in group.into_iter().zip(written) {
                let _ = job.done.send(result);
            }
        }
        Err(e) => {
            // Whether the commit happened is unknown, as for a single write whose answer was
            // lost: every write of the group fails with the cause.
            let cause = super::creates::shared_cause(&e);
            for job in group {
                let _ = job.done.send(Err(StoreError::message(cause.clone())));
            }
        }
    }
}

/// Writes each job of `group` alone, in its own implicit transaction.
async fn alone(client: &deadpool_postgres::Object, group: Vec<Job>) {
    for job in group {
        let written = update_task_if(client, &job.task, job.version, job.was).await;
        let _ = job.done.send(written);
    }
}
