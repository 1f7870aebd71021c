//! Creates in groups: whatever creates queue up while one transaction commits go into the next, with
//! a fixed number of round trips per group however large it is.
//!
//! A create must see every other create of its owner (the running-task limit and idempotency keys are
//! exact across replicas), so it holds a transaction advisory lock on the owner. One create per
//! transaction made all creates of one owner wait for each other's commit (on the benchmark's single
//! anonymous owner: one at a time, an eighth of SQLite's rate). A group takes the locks of all its
//! owners at once, in sorted order (so groups on different replicas never deadlock), reads the
//! idempotency keys and the unfinished counts it needs in one query each, decides every create in
//! memory in arrival order, and sends the inserts pipelined.

use deadpool_postgres::{GenericClient, Pool};
use std::collections::HashMap;
use tokio::sync::{mpsc, oneshot};

use super::rows::{insert_task, prepare_insert, task_from_row, TASK_COLUMNS};
use super::Context;
use crate::model::TaskRecord;
use crate::store::{ActiveLimit, Among, Created, StoreError};

/// Most creates one transaction takes.
const MAX_GROUP: usize = 256;

/// One create waiting for its group.
pub(super) struct Job {
    pub(super) task: TaskRecord,
    pub(super) limit: Option<ActiveLimit>,
    pub(super) done: oneshot::Sender<Result<Created, StoreError>>,
}

/// Starts the loop that commits creates in groups on `pool`; it ends when every sender is dropped.
pub(super) fn spawn(pool: Pool) -> mpsc::Sender<Job> {
    super::groups::spawn(pool, MAX_GROUP, |pool, group: Vec<Job>| async move {
        let (jobs, answers): (Vec<_>, Vec<_>) = group
            .into_iter()
            .map(|j| ((j.task, j.limit), j.done))
            .unzip();
        match commit_group(&pool, jobs).await {
            Ok(results) => {
                for (done, result) in answers.into_iter().zip(results) {
                    let _ = done.send(result);
                }
            }
            Err(e) => {
                // Nothing of the group was committed: every create in it fails with the cause.
                let cause = shared_cause(&e);
                for done in answers {
                    let _ = done.send(Err(StoreError::message(cause.clone())));
                }
            }
        }
    })
}

/// The words of a group's error for each of its creates (a `StoreError` cannot be cloned): its
/// chain, without the "task store error" that the new error puts in front again.
pub(super) fn shared_cause(e: &StoreError) -> String {
    let chain = e.chain();
    match chain.strip_prefix("task store error: ") {
        Some(rest) => rest.to_string(),
        None => chain,
    }
}

/// Which unfinished tasks a limit counts: an owner's, among some of its sessions.
type Scope = (String, Among);

async fn commit_group(
    pool: &Pool,
    jobs: Vec<(TaskRecord, Option<ActiveLimit>)>,
) -> Result<Vec<Result<Created, StoreError>>, StoreError> {
    let client = pool.get().await.context("get a PostgreSQL connection")?;
    match decide_and_insert(&client, jobs).await {
        Ok(results) => Ok(results),
        Err(e) => {
            // Whatever failed, the connection goes back to the pool outside a transaction (or
            // closed, which the pool notices).
            let _ = client.batch_execute("ROLLBACK").await;
            Err(e)
        }
    }
}

/// The group in two flights of pipelined statements (a round trip each, where one statement after
/// the other took five): BEGIN, the owners' locks, the idempotency keys and the unfinished counts;
/// then the inserts and COMMIT. PostgreSQL runs a connection's statements in the order they were
/// sent, so the counts are read under the locks. Every statement is prepared (or found in the
/// connection's cache) before a flight, so that a flight's statements leave in order.
async fn decide_and_insert(
    client: &deadpool_postgres::Object,
    jobs: Vec<(TaskRecord, Option<ActiveLimit>)>,
) -> Result<Vec<Result<Created, StoreError>>, StoreError> {
    let mut owners: Vec<&str> = jobs
        .iter()
        .filter(|(t, l)| t.idempotency_key.is_some() || l.is_some())
        .map(|(t, _)| t.owner.as_str())
        .collect();
    owners.sort_unstable();
    owners.dedup();
    let (key_owners, keys): (Vec<&str>, Vec<&str>) = jobs
        .iter()
        .filter_map(|(t, _)| Some((t.owner.as_str(), t.idempotency_key.as_deref()?)))
        .unzip();
    // Unfinished tasks per limit scope, counted up to the largest limit asked for it.
    let mut scopes: HashMap<Scope, usize> = HashMap::new();
    for (_, l) in &jobs {
        if let Some(l) = l {
            let max = scopes
                .entry((l.owner.clone(), l.among.clone()))
                .or_default();
            *max = (*max).max(l.max);
        }
    }
    let scope_list: Vec<(Scope, i64)> = scopes
        .into_iter()
        .map(|(s, max)| (s, i64::try_from(max).unwrap_or(i64::MAX)))
        .collect();

    // Owner locks taken in the array's (sorted) order: groups on different replicas never deadlock.
    let lock_stmt = client
        .prepare_cached(
            "SELECT pg_advisory_xact_lock(hashtextextended(o, 0)) FROM unnest($1::TEXT[]) AS o",
        )
        .await
        .context("prepare the owner locks")?;
    let key_stmt = client
        .prepare_cached(&format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE (owner, idempotency_key) IN \
             (SELECT * FROM unnest($1::TEXT[], $2::TEXT[]))"
        ))
        .await
        .context("prepare the idempotency lookup")?;
    let count_stmt = client
        .prepare_cached(
            "SELECT COUNT(*) FROM (SELECT 1 FROM tasks WHERE owner = $1 \
             AND ($2::TEXT IS NULL OR session = $2) \
             AND ($3::TEXT IS NULL OR starts_with(session, $3)) \
             AND status IN ('working', 'input_required') LIMIT $4) AS active",
        )
        .await
        .context("prepare the unfinished count")?;
    prepare_insert(client).await?;

    let filters: Vec<(Option<&String>, Option<&String>)> = scope_list
        .iter()
        .map(|((_, among), _)| match among {
            Among::All => (None, None),
            Among::Session(s) => (Some(s), None),
            Among::SessionsStartingWith(p) => (None, Some(p)),
        })
        .collect();
    let params: Vec<[&(dyn tokio_postgres::types::ToSql + Sync); 4]> = scope_list
        .iter()
        .zip(&filters)
        .map(|(((owner, _), max), (session, prefix))| {
            [owner as _, session as _, prefix as _, max as _]
        })
        .collect();
    let pg: &tokio_postgres::Client = client;
    let (begun, locked, found, counts) = tokio::join!(
        pg.batch_execute("BEGIN"),
        async {
            if owners.is_empty() {
                Ok(Vec::new())
            } else {
                pg.query(&lock_stmt, &[&owners]).await
            }
        },
        async {
            if keys.is_empty() {
                Ok(Vec::new())
            } else {
                pg.query(&key_stmt, &[&key_owners, &keys]).await
            }
        },
        futures::future::try_join_all(params.iter().map(|p| pg.query_one(&count_stmt, p))),
    );
    begun.context("begin a group of creates")?;
    locked.context("lock the owners of a group of creates")?;
    let found = found.context("look up idempotency keys")?;
    let counts = counts.context("count unfinished tasks")?;

    let mut by_key: HashMap<(String, String), TaskRecord> = HashMap::new();
    for row in found {
        let t = task_from_row(&row)?;
        if let Some(k) = t.idempotency_key.clone() {
            by_key.insert((t.owner.clone(), k), t);
        }
    }
    let mut active: HashMap<Scope, usize> = scope_list
        .iter()
        .zip(counts)
        .map(|((scope, _), row)| {
            let n: i64 = row.get(0);
            (scope.clone(), usize::try_from(n).unwrap_or(0))
        })
        .collect();

    // Each create decided in arrival order, seeing the ones before it.
    let mut results = Vec::with_capacity(jobs.len());
    let mut inserts = Vec::new();
    for (task, limit) in jobs {
        if let Some(key) = &task.idempotency_key {
            if let Some(existing) = by_key.get(&(task.owner.clone(), key.clone())) {
                results.push(if existing.fingerprint == task.fingerprint {
                    Ok(Created::Existing(existing.clone()))
                } else {
                    Err(StoreError::IdempotencyConflict {
                        key: key.clone(),
                        task_id: existing.id.clone(),
                    })
                });
                continue;
            }
        }
        if let Some(l) = &limit {
            let n = active
                .get(&(l.owner.clone(), l.among.clone()))
                .copied()
                .unwrap_or(0);
            if n >= l.max {
                results.push(Err(StoreError::TooManyActive {
                    active: n,
                    max: l.max,
                }));
                continue;
            }
        }
        if !task.status.is_terminal() {
            for ((owner, among), n) in active.iter_mut() {
                if *owner == task.owner && among.counts(task.session.as_deref()) {
                    *n += 1;
                }
            }
        }
        if let Some(key) = &task.idempotency_key {
            by_key.insert((task.owner.clone(), key.clone()), task.clone());
        }
        inserts.push(task.clone());
        results.push(Ok(Created::New(task)));
    }
    // A failed insert aborts the transaction: the COMMIT sent behind it then rolls back.
    let (inserted, committed) = tokio::join!(
        futures::future::try_join_all(inserts.iter().map(|t| insert_task(client, t))),
        pg.batch_execute("COMMIT"),
    );
    inserted?;
    committed.context("commit a group of creates")?;
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_error_reads_once_in_each_create() {
        let e = StoreError::backend(
            "get a PostgreSQL connection",
            std::io::Error::other("connection refused"),
        );
        assert_eq!(
            StoreError::message(shared_cause(&e)).chain(),
            "task store error: get a PostgreSQL connection: connection refused"
        );
    }
}
