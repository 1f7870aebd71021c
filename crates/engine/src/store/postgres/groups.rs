//! The loop under creates (`creates.rs`) and writes (`writes.rs`) in groups: whatever jobs queue up
//! while one group commits go into the next, at most a fixed number, one group at a time.

use deadpool_postgres::Pool;
use std::future::Future;
use tokio::sync::mpsc;

/// Starts a loop that hands `commit` each group of at most `max` jobs sent to the returned sender,
/// with `pool`; it ends when every sender is dropped.
pub(super) fn spawn<J, F, Fut>(pool: Pool, max: usize, commit: F) -> mpsc::Sender<J>
where
    J: Send + 'static,
    F: Fn(Pool, Vec<J>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let (tx, mut rx) = mpsc::channel::<J>(4 * max);
    tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            let mut group = vec![first];
            while group.len() < max {
                match rx.try_recv() {
                    Ok(job) => group.push(job),
                    Err(_) => break,
                }
            }
            commit(pool.clone(), group).await;
        }
    });
    tx
}
