//! Keeping the store in order: recovering tasks a previous run left unfinished, and the sweeper that
//! purges expired tasks, reclaims expired leases and fails tasks that waited for input too long.

use std::sync::Arc;

use super::Engine;
use crate::clock::now_ms;
use crate::model::{TaskRecord, TaskStatus};
use crate::store::{error_chain, PurgePolicy, StoreError, TaskChange, UpdateError};

/// How many interrupted tasks recovery works on at once.
const RECOVER_AT_ONCE: usize = 512;
/// How many leases one write renews (a write holds the SQLite writer; keep each one short).
const RENEW_AT_ONCE: usize = 1_000;

impl Engine {
    /// Recovers tasks a previous run left unfinished (failing them, or re-running retry-safe tools) and
    /// starts the background sweeper. Returns how many tasks were recovered.
    pub async fn start(self: &Arc<Self>) -> Result<usize, StoreError> {
        let n = self.recover(self.store.is_exclusive()).await?;
        self.start_lease_renewal();
        let me = Arc::downgrade(self);
        let interval = self.config.sweep_interval;
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tick.tick() => {}
                }
                let Some(engine) = me.upgrade() else { break };
                if let Err(e) = engine.sweep().await {
                    tracing::warn!(error = %error_chain(&e), "task sweep failed");
                }
            }
        });
        Ok(n)
    }

    /// Renews the leases of every task this node runs, every third of the lease, in a few writes: one
    /// timer per node rather than one per task (with 100,000 running tasks, a timer each meant 10,000
    /// single-row writes a second and 100,000 timers held).
    fn start_lease_renewal(self: &Arc<Self>) {
        let me = Arc::downgrade(self);
        let every = std::time::Duration::from_millis((self.config.lease_ms / 3).max(1));
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tick.tick() => {}
                }
                let Some(engine) = me.upgrade() else { break };
                let ids: Vec<String> = engine.running.iter().map(|e| e.key().clone()).collect();
                let until = now_ms() + engine.config.lease_ms;
                for chunk in ids.chunks(RENEW_AT_ONCE) {
                    if let Err(e) = engine
                        .store
                        .renew_leases(&engine.config.node_id, chunk, until)
                        .await
                    {
                        tracing::warn!(error = %error_chain(&e), tasks = chunk.len(), "lease renewal failed");
                    }
                }
            }
        });
    }

    /// Stops the sweeper and asks running handlers to stop.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// One sweep: purge expired tasks, tombstones and idle sessions; recover tasks whose lease expired.
    pub async fn sweep(self: &Arc<Self>) -> Result<(), StoreError> {
        let policy = PurgePolicy {
            now: now_ms(),
            finished_grace_ms: self.config.finished_grace_ms,
            tombstone_ms: self.config.tombstone_ms,
            session_idle_ms: self.config.session_idle_ms,
        };
        let purged = self.store.purge(policy).await?;
        if purged.tasks + purged.tombstones + purged.sessions > 0 {
            tracing::debug!(
                tasks = purged.tasks,
                tombstones = purged.tombstones,
                sessions = purged.sessions,
                "purged"
            );
        }
        self.recover(false).await?;
        self.expire_waiting().await?;
        Ok(())
    }

    /// Fails tasks whose retention ran out while they waited for input: their handler is woken with
    /// [`InputError::TaskEnded`](crate::InputError::TaskEnded) and a blocked result fetch gets the final answer.
    async fn expire_waiting(&self) -> Result<(), StoreError> {
        for task in self.store.overdue_waiting(now_ms()).await? {
            let message = format!(
                "expired: no answer to the task's input request within its ttl of {} ms",
                task.ttl_ms.unwrap_or(0)
            );
            let change = TaskChange {
                status: Some(TaskStatus::Failed),
                status_message: Some(Some(message.clone())),
                outcome: Some(self.rules.failure(message)),
                ..Default::default()
            };
            match self
                .apply(&task.id, &[TaskStatus::InputRequired], change)
                .await
            {
                Ok(rec) => {
                    tracing::info!(target: "mcp_tasks::audit", task = %rec.id, owner = %rec.owner, "task expired waiting for input")
                }
                Err(UpdateError::Conflict(_)) | Err(UpdateError::NotFound) => {}
                Err(UpdateError::Store(e)) => return Err(e),
            }
        }
        Ok(())
    }

    async fn recover(self: &Arc<Self>, all: bool) -> Result<usize, StoreError> {
        let now = now_ms();
        let orphans = self
            .store
            .claim_orphans(&self.config.node_id, now, all, now + self.config.lease_ms)
            .await?;
        let orphans: Vec<TaskRecord> = orphans
            .into_iter()
            .filter(|t| !self.running.contains_key(&t.id))
            .collect();
        let n = orphans.len();
        // Recovered side by side, a bounded number at a time: each change is its own
        // compare-and-set, and the SQLite writer commits concurrent ones in groups (one after
        // another, 100,000 orphans took half a minute of commits before the server listened).
        let mut pending = tokio::task::JoinSet::new();
        for task in orphans {
            if pending.len() >= RECOVER_AT_ONCE {
                let _ = pending.join_next().await;
            }
            let engine = self.clone();
            pending.spawn(async move { engine.recover_one(task).await });
        }
        while pending.join_next().await.is_some() {}
        Ok(n)
    }

    /// Fails one interrupted task, or re-runs it when its tool is safe to retry.
    async fn recover_one(self: Arc<Self>, task: TaskRecord) {
        let retry = self
            .handlers
            .get(&task.tool)
            .filter(|r| r.retry_on_restart)
            .map(|r| r.handler.clone());
        match retry {
            Some(handler) => {
                let change = TaskChange {
                    status: Some(TaskStatus::Working),
                    status_message: Some(Some(format!(
                        "restarted after an interruption (attempt {})",
                        task.attempt + 1
                    ))),
                    attempt: Some(task.attempt + 1),
                    ..Default::default()
                };
                let expect = [TaskStatus::Working, TaskStatus::InputRequired];
                // `working` -> `working` is not a state change, so the CAS expects either status.
                match self.apply(&task.id, &expect, change).await {
                    Ok(rec) => {
                        tracing::info!(task = %rec.id, tool = %rec.tool, attempt = rec.attempt, "re-running interrupted task");
                        self.spawn_run(rec, handler);
                    }
                    Err(e) => {
                        tracing::warn!(task = %task.id, error = %error_chain(&e), "could not re-queue interrupted task")
                    }
                }
            }
            None => {
                let message = "interrupted: server restarted before the task finished".to_string();
                let change = TaskChange {
                    status: Some(TaskStatus::Failed),
                    status_message: Some(Some(message.clone())),
                    outcome: Some(self.rules.failure(message)),
                    ..Default::default()
                };
                match self.apply(&task.id, &TaskStatus::ACTIVE, change).await {
                    Ok(rec) => {
                        tracing::info!(task = %rec.id, tool = %rec.tool, "failed interrupted task")
                    }
                    Err(e) => {
                        tracing::warn!(task = %task.id, error = %error_chain(&e), "could not fail interrupted task")
                    }
                }
            }
        }
    }
}
