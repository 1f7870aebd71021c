//! Keeping the store in order: recovering tasks a previous run left unfinished, and the sweeper that
//! purges expired tasks, reclaims expired leases and fails tasks that waited for input too long.

use std::collections::HashSet;
use std::sync::Arc;

use super::handoff::ResumeKind;
use super::Engine;
use crate::clock::now_ms;
use crate::context::StopReason;
use crate::model::{TaskRecord, TaskStatus};
use crate::notifier::TaskEvent;
use crate::store::{error_chain, OrphanPlan, PurgePolicy, StoreError, TaskChange, UpdateError};
use tokio::sync::broadcast::error::RecvError;

/// The fence stops a run this fraction of the lease (1/5: 6 s of the default 30 s) before its
/// known lease runs out ([`Engine::start_fence`]).
const FENCE_MARGIN: u64 = 5;

/// How many leases one write renews (a write holds the SQLite writer; keep each one short).
const RENEW_AT_ONCE: usize = 1_000;

/// One run of a periodic job (see `Engine::every`).
type Job = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), StoreError>> + Send>>;

impl Engine {
    /// Recovers tasks a previous run left unfinished (failing them, or re-running retry-safe tools) and
    /// starts the background sweeper. Returns how many tasks were recovered.
    pub async fn start(self: &Arc<Self>) -> Result<usize, StoreError> {
        let n = self.recover(self.store.is_exclusive()).await?;
        // Start counts as a sweep: readiness gives the sweeper its first interval.
        self.last_sweep_ms
            .store(now_ms(), std::sync::atomic::Ordering::Relaxed);
        self.start_stopper();
        self.start_lease_renewal();
        if !self.store.is_exclusive() {
            self.start_takeover();
            self.start_fence();
        }
        self.every(
            "sweeper",
            self.config.sweep_interval,
            "task sweep failed",
            |engine| {
                Box::pin(async move {
                    engine.sweep().await?;
                    engine
                        .last_sweep_ms
                        .store(now_ms(), std::sync::atomic::Ordering::Relaxed);
                    Ok(())
                })
            },
        );
        Ok(n)
    }

    /// Renews the leases of every task this node runs, every third of the lease, in a few writes: one
    /// timer per node rather than one per task (with 100,000 running tasks, a timer each meant 10,000
    /// single-row writes a second and 100,000 timers held). A lease that cannot be renewed (the task
    /// was finished or taken over elsewhere) stops its handler: a task never runs on two nodes.
    fn start_lease_renewal(self: &Arc<Self>) {
        let me = Arc::downgrade(self);
        let every = std::time::Duration::from_millis((self.config.lease_ms / 3).max(1));
        self.services.spawn("lease renewal", async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                let Some(engine) = me.upgrade() else { break };
                // Runs in their grace after a shutdown keep their leases until they end.
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = engine.renew_now.notified() => {}
                    () = engine.shut_down_and_idle() => break,
                }
                let ids: Vec<String> = engine.running.iter().map(|e| e.key().to_string()).collect();
                let until = now_ms() + engine.config.lease_ms;
                for chunk in ids.chunks(RENEW_AT_ONCE) {
                    match engine
                        .store
                        .renew_leases(&engine.config.node_id, chunk, until)
                        .await
                    {
                        Ok(lost) => {
                            // What the write set is now this node's known lease on each task
                            // it kept (the fence stops a run before its known lease ends).
                            for id in chunk {
                                if let Some(running) = engine.running.get(id.as_str()) {
                                    if !lost.contains(id) {
                                        running
                                            .lease_until
                                            .store(until, std::sync::atomic::Ordering::Release);
                                    }
                                }
                            }
                            for id in lost {
                                if let Some(running) = engine.running.get(id.as_str()) {
                                    tracing::info!(task = %id, "lease lost (task finished or taken over elsewhere); stopping its handler");
                                    running.stop(StopReason::LeaseLost);
                                }
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %error_chain(&e), tasks = chunk.len(), "lease renewal failed")
                        }
                    }
                }
            }
        });
    }

    /// Fencing by time, on a store shared by several nodes: a run whose lease this node could not
    /// renew in time (the store unreachable, a renewal that hangs) is stopped, its handler dropped
    /// at once, [`FENCE_MARGIN`] of the lease before that lease runs out by this node's clock.
    /// Another node claims the task only once the lease ran out by its own clock, so the two runs
    /// never overlap while the nodes' clocks agree within the margin less one check interval
    /// (0.15 of the lease: 4.5 s with the default 30 s). Checked every 1/20 of the lease, from
    /// what the renewals wrote (no store call: a store that hangs cannot hold the fence up).
    fn start_fence(self: &Arc<Self>) {
        let lease = self.config.lease_ms.max(1);
        let margin = lease / FENCE_MARGIN;
        let every = std::time::Duration::from_millis((lease / 20).max(1));
        let me = Arc::downgrade(self);
        let shutdown = self.shutdown.clone();
        self.services.spawn("fence", async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                // Upgraded only after the wait: a dropped engine is not kept alive by its fence.
                let Some(engine) = me.upgrade() else { break };
                // Runs in their grace after a stop (a hand-off, a shutdown) are fenced too: the
                // loop ends once the engine is shut down and nothing runs (seen at the next tick,
                // 1/20 of the lease).
                if shutdown.is_cancelled() && engine.running.is_empty() {
                    break;
                }
                let now = now_ms();
                for run in engine.running.iter() {
                    let until = run.lease_until.load(std::sync::atomic::Ordering::Acquire);
                    if until != 0 && now + margin >= until && !run.kill.is_cancelled() {
                        tracing::warn!(
                            task = %run.key(),
                            lease_left_ms = until.saturating_sub(now),
                            "the task's lease could not be renewed in time; its run is ended before the lease runs out, so that no other node runs it at the same time"
                        );
                        run.fence();
                    }
                }
            }
        });
    }

    /// On a store shared by several nodes, looks for tasks whose lease ran out (their node died) every
    /// half lease, whatever the sweep interval: a dead node's tasks are taken over within one and a
    /// half lease lengths of its last renewal, not a lease plus a whole sweep interval later. A task
    /// another node lets go of (a hand-off) is looked for at once: the stopper hears of the release
    /// and wakes this loop.
    fn start_takeover(self: &Arc<Self>) {
        let half_lease = std::time::Duration::from_millis((self.config.lease_ms / 2).max(1));
        let me = Arc::downgrade(self);
        let shutdown = self.shutdown.clone();
        let wake = self.takeover_now.clone();
        self.services.spawn("take-over", async move {
            let mut tick = tokio::time::interval(half_lease);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tick.tick() => {}
                    _ = wake.notified() => {}
                }
                let Some(engine) = me.upgrade() else { break };
                if let Err(e) = engine.recover(false).await {
                    tracing::warn!(error = %error_chain(&e), "looking for tasks to take over failed");
                }
            }
        });
    }

    /// Runs `job` every `period` (the first time one period from now) as service `name` until the
    /// engine shuts down or is dropped; a failure is logged as `failed` and the next period tries
    /// again.
    fn every<F>(
        self: &Arc<Self>,
        name: &'static str,
        period: std::time::Duration,
        failed: &'static str,
        job: F,
    ) where
        F: Fn(Arc<Engine>) -> Job + Send + 'static,
    {
        let me = Arc::downgrade(self);
        let shutdown = self.shutdown.clone();
        self.services.spawn(name, async move {
            let mut tick = tokio::time::interval(period);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tick.tick() => {}
                }
                let Some(engine) = me.upgrade() else { break };
                if let Err(e) = job(engine).await {
                    tracing::warn!(error = %error_chain(&e), "{failed}");
                }
            }
        });
    }

    /// Stops the handler of a task this node runs as soon as the task is finished by anyone (a
    /// cancel, an expiry, another node): one subscriber to every task event for the whole node,
    /// instead of a topic per running task. Started by the first run (or [`Engine::start`]). When it misses events it asks the lease loop for a pass,
    /// which finds the finished tasks in the store.
    pub(super) fn start_stopper(self: &Arc<Self>) {
        // Called for every run: a load first, so the common case writes nothing shared.
        if self.stopper.load(std::sync::atomic::Ordering::Acquire)
            || self.stopper.swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        let me = Arc::downgrade(self);
        let mut events = self.notifier.subscribe_all();
        let shutdown = self.shutdown.clone();
        self.services.spawn("stopper", async move {
            loop {
                let event = tokio::select! {
                    _ = shutdown.cancelled() => break,
                    event = events.recv() => event,
                };
                let Some(engine) = me.upgrade() else { break };
                match event {
                    Ok(TaskEvent::Changed(t)) if t.status.is_terminal() => {
                        if let Some(running) = engine.running.get(t.id.as_str()) {
                            running.stop(if t.status == TaskStatus::Cancelled {
                                StopReason::Cancelled
                            } else {
                                StopReason::FinishedElsewhere
                            });
                        }
                    }
                    // Let go of by its node (a hand-off): whoever shares the store takes it now.
                    Ok(TaskEvent::Changed(t))
                        if t.lease_owner.is_none() && !engine.store.is_exclusive() =>
                    {
                        engine.takeover_now.notify_one();
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(missed)) => {
                        tracing::debug!(
                            missed,
                            "task events missed; checking running tasks in the store"
                        );
                        engine.renew_now.notify_one();
                    }
                    Err(RecvError::Closed) => break,
                }
            }
        });
    }

    /// Stops the sweeper and asks running handlers to stop.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// One sweep: purge expired tasks, tombstones and idle sessions; recover tasks whose lease expired
    /// (on a store only this process opens; a shared store is looked at every half lease instead,
    /// by the timer [`Engine::start`] starts for it).
    pub async fn sweep(self: &Arc<Self>) -> Result<(), StoreError> {
        let policy = PurgePolicy {
            now: now_ms(),
            finished_grace_ms: self.config.finished_grace_ms,
            tombstone_ms: self.config.tombstone_ms,
            finished_before: None,
        };
        let purged = self.store.purge(policy).await?;
        let sessions = self
            .store
            .purge_sessions(policy.now, self.config.session_idle_ms)
            .await?;
        if purged.tasks + purged.tombstones + sessions > 0 {
            tracing::debug!(
                tasks = purged.tasks,
                tombstones = purged.tombstones,
                sessions,
                "purged"
            );
        }
        if self.store.is_exclusive() {
            self.recover(false).await?;
        }
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

    pub(super) async fn recover(self: &Arc<Self>, all: bool) -> Result<usize, StoreError> {
        if !self.is_claiming() {
            // Draining or stopping: what this node or others let go of is for the nodes that
            // stay (or the next start).
            return Ok(0);
        }
        let now = now_ms();
        let engine = self.clone();
        let max_attempts = self.config.max_attempts.max(1);
        // The tasks the plan gave up on, to count them once their change is committed.
        let given_up: Arc<std::sync::Mutex<HashSet<String>>> = Arc::default();
        let gave_up = given_up.clone();
        // Wake times of suspended tasks left asleep, to look at them again then.
        let sleeping: Arc<std::sync::Mutex<Vec<u64>>> = Arc::default();
        let asleep_until = sleeping.clone();
        // Decided inside the store's write, per orphan: fail it, or set it up to run again when its
        // tool is safe to retry. A task whose handler runs here (its renewal was late) is left alone.
        let plan: OrphanPlan = Arc::new(move |task: &TaskRecord| {
            if engine.running.contains_key(task.id.as_str()) {
                return None;
            }
            let registered = engine.registered(&task.tool);
            // A run that saved a checkpoint can go on from it; a tool safe to repeat starts over.
            let resume = registered.is_some() && task.checkpoint.is_some();
            let retry = registered.as_ref().is_some_and(|r| r.retry_on_restart);
            // A suspended task (a durable sleep) is not an interrupted one: it is left alone until
            // its wake time (also at a start, which takes every other unfinished task), and for a
            // node that serves its tool (a replica of an older deploy must not fail it); its wake
            // goes on with the same run's work, so it keeps its attempt and is never given up.
            if super::timers::is_suspended(task.lease_owner.as_deref()) {
                let until = task.lease_until.unwrap_or(0);
                if until > now {
                    asleep_until
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(until);
                    return None;
                }
                if !retry && !resume {
                    return None;
                }
                let woke = if task.lease_owner.as_deref() == Some(super::timers::AWAITING) {
                    "woke to look for its signal"
                } else {
                    "woke from its durable sleep"
                };
                return Some(TaskChange {
                    status_message: Some(Some(format!("{woke} (attempt {})", task.attempt))),
                    noted: true,
                    ..Default::default()
                });
            }
            // A released lease is a hand-off; an expired one, or any at start-up, an interruption.
            let cause = if task.lease_owner.is_none() {
                "a hand-off"
            } else {
                "an interruption"
            };
            if (resume || retry) && task.attempt >= max_attempts {
                // A task that keeps ending its runs (a poison task that crashes its server) is
                // not run again: it fails, saying how its last run ended.
                let last = if task.lease_owner.is_none() {
                    "was handed off by a stopping server"
                } else {
                    "was interrupted (its server stopped or lost the task before it finished)"
                };
                let message = format!(
                    "given up after {} attempts: the last one {last}; [tasks] max_attempts = {max_attempts}",
                    task.attempt
                );
                gave_up
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(task.id.clone());
                return Some(TaskChange {
                    status: Some(TaskStatus::Failed),
                    status_message: Some(Some(message.clone())),
                    outcome: Some(engine.rules.failure(message)),
                    ..Default::default()
                });
            }
            Some(if resume || retry {
                TaskChange {
                    // The status stays: a question pending at the hand-off is still the one to
                    // answer (the resumed run takes it up when it asks it again).
                    status_message: Some(Some(format!(
                        "resumed after {cause} (attempt {})",
                        task.attempt + 1
                    ))),
                    attempt: Some(task.attempt + 1),
                    noted: true,
                    ..Default::default()
                }
            } else {
                // Say why it cannot go on, so whoever reads the failure knows what would let it.
                let why = if registered.is_none() {
                    format!("its tool {} is not served any more", task.tool)
                } else {
                    "its tool is not safe to run again (retry_on_restart) and it saved no \
                     checkpoint to go on from"
                        .to_string()
                };
                let message = if task.lease_owner.is_none() {
                    format!("interrupted: handed off by a stopping server; it cannot resume: {why}")
                } else {
                    format!(
                        "interrupted: server restarted before the task finished; it cannot resume: {why}"
                    )
                };
                TaskChange {
                    status: Some(TaskStatus::Failed),
                    status_message: Some(Some(message.clone())),
                    outcome: Some(engine.rules.failure(message)),
                    ..Default::default()
                }
            })
        });
        let recovered = self
            .store
            .claim_orphans(
                &self.config.node_id,
                now,
                all,
                now + self.config.lease_ms,
                plan,
            )
            .await?;
        for until in std::mem::take(&mut *sleeping.lock().unwrap_or_else(|e| e.into_inner())) {
            self.wake_at(until);
        }
        let n = recovered.len();
        for rec in recovered {
            if rec.status.is_terminal() {
                let gave_up = given_up
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains(&rec.id);
                if gave_up {
                    self.resumes
                        .given_up
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::warn!(target: "mcp_tasks::audit", task = %rec.id, tool = %rec.tool, owner = %rec.owner, attempts = rec.attempt, "gave up on a task that kept ending its runs");
                } else {
                    tracing::info!(target: "mcp_tasks::audit", task = %rec.id, tool = %rec.tool, owner = %rec.owner, "failed interrupted task");
                }
                self.notifier.publish(TaskEvent::Changed(Arc::new(rec)));
                continue;
            }
            match self.registered(&rec.tool) {
                Some(reg) => {
                    // Read now, not by the run: it tells how the task resumes, and the run needs it.
                    let journal = match self.store.steps(&rec.id).await {
                        Ok(j) => Some(j),
                        Err(e) => {
                            tracing::warn!(task = %rec.id, error = %error_chain(&e), "could not read the step journal; the run reads it when it needs it");
                            None
                        }
                    };
                    let kind = if rec.checkpoint.is_some() {
                        ResumeKind::Checkpoint
                    } else if journal.as_ref().is_some_and(|j| !j.is_empty()) {
                        ResumeKind::Steps
                    } else {
                        ResumeKind::Retry
                    };
                    self.resumes.resumed(kind);
                    tracing::info!(target: "mcp_tasks::audit", task = %rec.id, tool = %rec.tool, attempt = rec.attempt, how = ?kind, "resuming interrupted task");
                    let handler = reg.handler.clone();
                    self.spawn_run(&rec, handler, None, journal, true);
                    self.notifier.publish(TaskEvent::Changed(Arc::new(rec)));
                }
                // The plan re-runs only tools it found registered.
                None => {
                    tracing::error!(task = %rec.id, tool = %rec.tool, "no handler for a task set to re-run")
                }
            }
        }
        Ok(n)
    }
}
