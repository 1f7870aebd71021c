//! One run of a task's handler: started under a lease that is renewed while it runs, stopped when the
//! task is cancelled (with a grace period), and finished through the store's compare-and-set. The
//! handler's reports reach the store and the notifier through [`TaskSink`].

use async_trait::async_trait;
use futures::FutureExt;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use super::replay::Resumed;
use super::Engine;
use crate::clock::now_ms;
use crate::context::{
    CheckpointError, ContextSink, InputError, LogLevel, StepEntry, StepError, StepJournal,
    StepSlot, StopReason, TaskContext,
};
use crate::handler::TaskHandler;
use crate::ids::random_id;
use crate::model::{InputRecord, InputResponse, Outcome, StepRecord, TaskRecord, TaskStatus};
use crate::notifier::TaskEvent;
use crate::store::{error_chain, Lookup, ProgressState, ProgressUpdate, TaskChange, UpdateError};
use crate::trace::{RunLabels, Traced};

impl Engine {
    /// Starts `rec`'s handler in the background. The run holds only what it needs (its sink, with
    /// the id, tool, principal and shown progress; the arguments), not the record: with 100,000
    /// tasks running, every byte of the run's future counts a hundred thousand times.
    /// `claim` (what it holds, see [`HeldLimit`](crate::HeldLimit)) is given back when the run
    /// ends; `journal` is the task's step journal when the caller read it already (a resume).
    pub(super) fn spawn_run(
        self: &Arc<Self>,
        rec: &TaskRecord,
        handler: Arc<dyn TaskHandler>,
        claim: Option<super::HeldClaim>,
        journal: Option<Vec<StepRecord>>,
        resumed: bool,
    ) {
        tokio::spawn(self.prepare_run(rec, handler, claim, journal, resumed));
    }

    /// What [`Engine::spawn_run`] spawns: the run registered as running, not yet started.
    fn prepare_run(
        self: &Arc<Self>,
        rec: &TaskRecord,
        handler: Arc<dyn TaskHandler>,
        claim: Option<super::HeldClaim>,
        journal: Option<Vec<StepRecord>>,
        resumed: bool,
    ) -> Traced<impl std::future::Future<Output = ()> + Send + 'static, TaskSink> {
        // Marked as running before the handler starts, so a cancel that lands at once finds its
        // token and the sweeper never takes this task for an orphan.
        self.start_stopper();
        if let Some(f) = &self.on_run_start {
            f(rec, now_ms());
        }
        let stop = self.shutdown.child_token();
        // One copy of the id for the running map and the sink.
        let id: Arc<str> = Arc::from(rec.id.as_str());
        let sink = Arc::new(TaskSink {
            engine: self.clone(),
            id: id.clone(),
            tool: rec.tool.clone(),
            owner: rec.owner.clone(),
            shown: std::sync::Mutex::new(ProgressState::of(rec)),
            checkpoint: rec.checkpoint.clone(),
            attempt: rec.attempt,
            // A wake from a durable sleep keeps its attempt (it goes on with the same run's work)
            // but has a journal to replay all the same.
            replays: resumed || rec.attempt > 1,
            resumed: std::sync::Mutex::new(journal.map(Resumed::with_journal)),
            progress_events: rec
                .webhooks
                .iter()
                .any(|t| t.wants_progress())
                .then(Default::default),
            stop: stop.clone(),
            reason: AtomicU8::new(NO_REASON),
            lease_until: AtomicU64::new(rec.lease_until.unwrap_or(0)),
            stop_seen: AtomicBool::new(false),
            stale_status: AtomicBool::new(rec.attempt > 1 && rec.status_message.is_some()),
            kill: CancellationToken::new(),
            wake_at: AtomicU64::new(0),
            suspension: std::sync::Mutex::new(None),
            signal_bell: tokio::sync::Notify::new(),
        });
        if self.is_handing_off() {
            // Submitted while this node hands off (an embedder that did not stop taking calls):
            // the run is handed off at once, so another node (or the next start) runs the task.
            sink.stop(StopReason::HandedOff);
        }
        self.running.insert(id, sink.clone());
        // The claim goes into the run itself: an `async` block around the run would hold the run's
        // future twice (its capture and the copy it awaits), 856 bytes a task instead of 488.
        let run = self
            .clone()
            .run(sink.clone(), rec.arguments.clone(), handler, claim);
        Traced::new(run, sink)
    }

    /// Runs the handler until it returns, or until `stop` fires (the task was finished elsewhere, its
    /// lease was lost, or the server is stopping) and the grace period after it ends.
    ///
    /// An `async` block rather than an `async fn`: an `async fn` moves each argument into a local
    /// of its own and so holds both for the whole run; the block uses its captures in place.
    #[allow(clippy::manual_async_fn)] // on purpose, see above
    fn run(
        self: Arc<Self>,
        sink: Arc<TaskSink>,
        arguments: Arc<Value>,
        handler: Arc<dyn TaskHandler>,
        claim: Option<super::HeldClaim>,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        async move {
            let stop = &sink.stop;
            // What this run's key holds is given back when the run ends, however it ends.
            let _claim = &claim;
            // However the run ends, or if it is dropped (the runtime stopping), it is no longer
            // running.
            let _entry = RunningEntry {
                engine: &self,
                id: &sink.id,
            };
            // The id comes from the sink (`ContextSink::task_id`): no copy of it per run.
            let ctx = TaskContext::new(None, stop.clone(), sink.clone());
            // Run inline rather than as a task of its own: one task per running handler, not two.
            // A panic is caught here, and dropping the future is what aborting it means.
            let mut work = std::panic::AssertUnwindSafe(handler.run(ctx, arguments)).catch_unwind();
            let outcome = tokio::select! {
                // The handler first: work that ended in the same instant as a stop (a fence
                // when the node was starved for a while) is the run's, not dropped.
                biased;
                joined = &mut work => Some(joined),
                // Boxed: what follows a stop is needed only then, not held in every running
                // task's future.
                _ = stop.cancelled() => Box::pin(self.after_stop(&sink, &mut work)).await,
            };
            drop(work);
            // Boxed: what follows the handler is needed once, at the end; inline it would sit in
            // every running task's future for the whole run.
            Box::pin(self.conclude(&sink, outcome)).await;
        }
    }

    /// What the handler returns once told to stop: nothing for a lost lease (another node may run
    /// the task now, or will once the lease runs out: the handler is dropped at once, a command
    /// tool's process group with it, so the two runs never overlap); otherwise what it returns
    /// within its grace (a hand-off's or a cancel's), unless the fence ends the run sooner.
    async fn after_stop<F>(&self, sink: &TaskSink, work: &mut F) -> Option<F::Output>
    where
        F: std::future::Future + Unpin,
    {
        let grace = match sink.stop_reason() {
            Some(StopReason::LeaseLost) => {
                tracing::warn!(task = %sink.id, "lease lost; the handler is dropped at once");
                return None;
            }
            // It asked for it, waiting in its sleep: nothing more of it is wanted.
            Some(StopReason::Suspended) => return None,
            Some(StopReason::HandedOff) => self.config.hand_off_grace,
            _ => self.config.cancel_grace,
        };
        tokio::select! {
            joined = tokio::time::timeout(grace, work) => match joined {
                Ok(joined) => Some(joined),
                Err(_) => {
                    tracing::warn!(task = %sink.id, "handler ignored cancellation for the grace period; dropped");
                    None
                }
            },
            // The fence: the lease runs out before the grace would.
            () = sink.kill.cancelled() => None,
        }
    }

    /// Writes what the handler returned (`None`: it was dropped). A run told to stop writes
    /// nothing when the task is over or another node may run it (a cancel, a lost lease, a finish
    /// elsewhere), except an outcome returned before a lost lease's stop reached the handler,
    /// written while this node still holds the lease; on a hand-off or a shutdown it writes a successful result returned within the
    /// grace by a handler that did not see the stop (the work is done: running it again would
    /// repeat it), and otherwise leaves the task unfinished, released at once on a hand-off.
    async fn conclude(&self, sink: &TaskSink, outcome: Option<std::thread::Result<Outcome>>) {
        let reason = sink.stop_reason();
        let outcome = match outcome {
            Some(Ok(outcome)) => outcome,
            Some(Err(_)) if reason.is_none() => {
                self.rules.failure(format!("tool `{}` panicked", sink.tool))
            }
            // A handler that panicked while stopping leaves the task to its next run.
            Some(Err(_)) | None => {
                match reason {
                    Some(StopReason::HandedOff) => self.release(&sink.id).await,
                    Some(StopReason::Suspended) => {
                        sink.engine
                            .suspend(&sink.id, sink.suspended_until(), sink.awaited())
                            .await
                    }
                    _ => {}
                }
                return;
            }
        };
        match reason {
            None => self.finish(&sink.id, outcome).await,
            // The handler ran to its end before the lease's stop reached it (the fence, with the
            // lease nearly out; or a renewal that found the lease gone): the work happened once
            // and whole, so its outcome is the task's wherever this node still holds the lease.
            // The write is conditional on that (`holder`): if another node took the task over,
            // it is a conflict and nothing is written. Dropping it instead had the task run again
            // (or fail as interrupted) for work already done.
            Some(StopReason::LeaseLost) if !sink.stop_seen.load(Ordering::Acquire) => {
                tracing::info!(task = %sink.id, "the handler finished as its lease was lost; its outcome is written while this node still holds the lease");
                self.finish(&sink.id, outcome).await;
            }
            Some(StopReason::HandedOff | StopReason::ShuttingDown)
                if outcome.is_success() && !sink.stop_seen.load(Ordering::Acquire) =>
            {
                tracing::info!(task = %sink.id, "the handler finished while stopping; its result is the task's");
                self.finish(&sink.id, outcome).await;
            }
            Some(StopReason::HandedOff) => self.release(&sink.id).await,
            // It returned a result in the instant its sleep suspended it, without looking at the
            // stop (the sleep lost a `select!`): the work is done, and this node still holds
            // the task.
            Some(StopReason::Suspended)
                if outcome.is_success() && !sink.stop_seen.load(Ordering::Acquire) =>
            {
                self.finish(&sink.id, outcome).await
            }
            // Anything else it returned then answers the stop (a `select!` on `cancelled()`, a
            // question cut short): the sleep goes on as a suspension.
            Some(StopReason::Suspended) => {
                sink.engine
                    .suspend(&sink.id, sink.suspended_until(), sink.awaited())
                    .await
            }
            // Over, or maybe another node's now: what the handler returned is not the task's.
            // (Shutting down: left for recovery at the next start.)
            Some(_) => {}
        }
    }

    async fn finish(&self, id: &str, outcome: Outcome) {
        let status = outcome.status();
        let message = match &outcome {
            Outcome::Error { message, .. } => Some(Some(message.clone())),
            Outcome::Result {
                value,
                is_error: true,
            } => Some(self.rules.error_summary(value)),
            // A progress note such as "scanning files" is stale once the work is done.
            Outcome::Result { .. } => Some(None),
        };
        let mut replaced = false;
        let mut change = TaskChange {
            status: Some(status),
            status_message: message,
            outcome: Some(outcome),
            // Only while this node still holds the lease: if another node took the task over (and may
            // be running it again), this run's outcome is not the task's.
            holder: Some(self.config.node_id.clone()),
            ..Default::default()
        };
        // A store that cannot be reached now (a lost database connection) is tried again until it
        // can: the outcome is the task's only copy, and a task must not stay `working` forever. The
        // task stays registered as running meanwhile, so its lease is still renewed (or, when another
        // node took it over, the next attempt is a conflict and ends this).
        let mut backoff = std::time::Duration::from_millis(100);
        loop {
            match self.apply(id, &TaskStatus::ACTIVE, change.clone()).await {
                Ok(rec) => {
                    tracing::info!(target: "mcp_tasks::audit", task = %rec.id, tool = %rec.tool, owner = %rec.owner, status = %rec.status, "task finished");
                    return;
                }
                Err(UpdateError::Conflict(cur)) => {
                    tracing::debug!(task = %id, status = %cur.status, lease = ?cur.lease_owner, "task finished or taken over elsewhere; result discarded");
                    return;
                }
                Err(UpdateError::NotFound) => {
                    tracing::warn!(task = %id, "task gone before its outcome was stored");
                    return;
                }
                Err(UpdateError::Store(e)) if e.is_permanent() && !replaced => {
                    // The store refuses this outcome itself (bytes it cannot hold, too big): it
                    // never will take it. The task fails saying so, in words it can store.
                    let why = format!(
                        "the task's outcome could not be stored: {}",
                        error_chain(&e)
                    );
                    tracing::warn!(task = %id, error = %why, "the store refused the outcome; the task fails instead");
                    change.status = Some(TaskStatus::Failed);
                    change.status_message = Some(Some(why.clone()));
                    change.outcome = Some(self.rules.failure(why));
                    replaced = true;
                    continue;
                }
                Err(UpdateError::Store(e)) if e.is_permanent() => {
                    tracing::error!(task = %id, error = %error_chain(&e), "the store refused even the failure that replaced the outcome; the task is left to recovery");
                    return;
                }
                Err(e) => {
                    tracing::warn!(task = %id, error = %error_chain(&e), retry_in_ms = backoff.as_millis() as u64, "could not store the task's outcome; retrying");
                }
            }
            tokio::select! {
                _ = self.shutdown.cancelled() => {
                    tracing::warn!(task = %id, "stopping before the outcome was stored; the task is left to recovery");
                    return;
                }
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(std::time::Duration::from_secs(5));
        }
    }
}

/// A running task's entry in [`Engine::running`], removed when the run ends.
struct RunningEntry<'a> {
    engine: &'a Engine,
    id: &'a str,
}

impl Drop for RunningEntry<'_> {
    fn drop(&mut self) {
        self.engine.running.remove(self.id);
        if self.engine.running.is_empty() {
            self.engine.idle.notify_waiters();
        }
    }
}

/// Reports from a running task: into the store, then out through the notifier.
pub(super) struct TaskSink {
    pub(super) engine: Arc<Engine>,
    pub(super) id: Arc<str>,
    /// The tool and the principal, for the run's spans and messages.
    tool: String,
    pub(super) owner: String,
    /// The progress the task shows as of this sink's last write. Only this sink changes it while the
    /// run lasts, so it tells (by the store's own rules) whether a report would change anything,
    /// without a read.
    shown: std::sync::Mutex<ProgressState>,
    /// The checkpoint the task had when this run started.
    checkpoint: Option<Value>,
    /// Which run of the task this is.
    pub(super) attempt: u32,
    /// The token that stops the handler (a child of the engine's shutdown), and why it was
    /// cancelled ([`StopReason`] as a number; the first reason given stays).
    pub(super) stop: CancellationToken,
    reason: AtomicU8,
    /// Until when this node is known to hold the task's lease (Unix ms by this node's clock; the
    /// value its last claim or renewal wrote, 0 when unknown): the fence stops the run before it.
    pub(super) lease_until: AtomicU64,
    /// Whether the handler saw its stop through the context ([`ContextSink::stop_seen`]).
    stop_seen: AtomicBool,
    /// The task came to this run with a status message from before it (a resumed run: "resumed
    /// after a hand-off (attempt 2)"): the run's first progress report with a message clears it,
    /// so the task shows the run's progress as a first run's does, not the note for good.
    stale_status: AtomicBool,
    /// Cancelled when the run must end at once, even inside its grace (the fence).
    pub(super) kill: CancellationToken,
    /// When a run that suspended itself (a long durable sleep) wakes, Unix ms (0 until then).
    pub(super) wake_at: AtomicU64,
    /// What the run suspended itself for (a sleep, a wait for a signal), once it did.
    pub(super) suspension: std::sync::Mutex<Option<super::timers::Suspension>>,
    /// Rung when a signal is sent to the task through this node: a wait for one looks again.
    pub(super) signal_bell: tokio::sync::Notify,
    /// Whether earlier runs of the task may have left steps and questions to replay (a resume, a
    /// wake): a first run reads neither.
    pub(super) replays: bool,
    /// What this run replays of earlier runs (the step journal, their questions), read when first
    /// needed: a first run reads nothing.
    pub(super) resumed: std::sync::Mutex<Option<Box<Resumed>>>,
    /// The pacing of `task.progress` webhook events, for a task with a target that asked for them
    /// (`None` for every other task: nothing is paced, and the run holds one word for it).
    progress_events: Option<Arc<std::sync::Mutex<ProgressPacer>>>,
}

/// When a run last wrote a `task.progress` event, and whether a report inside the interval since
/// is still to be sent when it ends.
#[derive(Default)]
struct ProgressPacer {
    last: Option<tokio::time::Instant>,
    trailing: bool,
    /// Counts the events written: a timer armed before the last one has nothing left to send.
    sent: u64,
}

impl TaskSink {
    /// Asks to end this run until `wake_at` for `why` (see [`ContextSink::suspend`]): `true` when
    /// the run is told to stop for the suspension.
    pub(super) fn suspend_for(&self, wake_at: u64, why: super::timers::Suspension) -> bool {
        let Some(over) = self.engine.config.suspend_sleeps_over else {
            return false;
        };
        // Only a tool that goes on after its run ended may end it for a sleep: the run that
        // wakes it replays its journal (`retry_on_restart`, the rule for every resume).
        let resumes = self
            .engine
            .registered(&self.tool)
            .is_some_and(|r| r.retry_on_restart);
        if !resumes {
            return false;
        }
        let over = u64::try_from(over.as_millis()).unwrap_or(u64::MAX);
        if wake_at.saturating_sub(now_ms()) <= over || self.stop.is_cancelled() {
            return false;
        }
        self.wake_at.store(wake_at, Ordering::Release);
        *self.suspension.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
        self.stop(StopReason::Suspended);
        // Another reason may have come first (a cancel at the same moment): then the run stops
        // for it, and the sleep ends as a stop.
        self.stop_reason() == Some(StopReason::Suspended)
    }
}

impl TaskSink {
    /// Whether the progress write about to be made carries a `task.progress` event: yes when the
    /// interval since the last one is over. Otherwise the report is sent when the interval ends
    /// (one timer per interval, whatever the number of reports in it), as the task shows then.
    fn progress_event_due(&self) -> bool {
        let Some(pacer) = &self.progress_events else {
            return false;
        };
        let interval = self.engine.config.webhook_progress_interval;
        let now = tokio::time::Instant::now();
        let mut p = pacer.lock().unwrap_or_else(|e| e.into_inner());
        let next = match p.last {
            Some(last) if now < last + interval => last + interval,
            _ => {
                // This report carries the event; a timer still armed (it is waiting for the
                // ordering lock this report holds) finds it sent.
                p.last = Some(now);
                p.trailing = false;
                p.sent += 1;
                return true;
            }
        };
        if !p.trailing {
            p.trailing = true;
            let armed_at = p.sent;
            let (engine, id, pacer) = (self.engine.clone(), self.id.clone(), pacer.clone());
            tokio::spawn(async move {
                tokio::time::sleep_until(next).await;
                // In order with the run's other writes, so the event shows what came before it.
                let _held = engine.order_lock(&id).await;
                {
                    let mut p = pacer.lock().unwrap_or_else(|e| e.into_inner());
                    if p.sent != armed_at {
                        return;
                    }
                    p.trailing = false;
                    p.sent += 1;
                    p.last = Some(tokio::time::Instant::now());
                }
                // Only while this node still runs the task: a finished, handed-off or lost task
                // sends no late progress (the store refuses the write).
                let change = TaskChange {
                    progress_event: true,
                    holder: Some(engine.config.node_id.clone()),
                    ..Default::default()
                };
                match engine
                    .store
                    .update(&id, &TaskStatus::ACTIVE, change, now_ms())
                    .await
                {
                    Ok(_) | Err(UpdateError::Conflict(_)) | Err(UpdateError::NotFound) => {}
                    Err(e) => {
                        tracing::warn!(task = %id, error = %error_chain(&e), "progress webhook event not written")
                    }
                }
            });
        }
        false
    }
}

/// [`TaskSink::reason`] before any reason was given.
const NO_REASON: u8 = 0;

fn reason_code(reason: StopReason) -> u8 {
    match reason {
        StopReason::Cancelled => 1,
        StopReason::HandedOff => 2,
        StopReason::LeaseLost => 3,
        StopReason::FinishedElsewhere => 4,
        StopReason::ShuttingDown => 5,
        StopReason::Suspended => 6,
    }
}

fn reason_of(code: u8) -> Option<StopReason> {
    Some(match code {
        1 => StopReason::Cancelled,
        2 => StopReason::HandedOff,
        3 => StopReason::LeaseLost,
        4 => StopReason::FinishedElsewhere,
        5 => StopReason::ShuttingDown,
        6 => StopReason::Suspended,
        _ => return None,
    })
}

impl TaskSink {
    /// Tells the handler to stop for `reason`; a run stopped already keeps its first reason.
    pub(super) fn stop(&self, reason: StopReason) {
        let _ = self.reason.compare_exchange(
            NO_REASON,
            reason_code(reason),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        self.stop.cancel();
    }

    /// The fence: the lease runs out soon and could not be renewed. The run is stopped (for a
    /// lost lease, unless it was stopped already) and ended at once, inside its grace too.
    pub(super) fn fence(&self) {
        self.stop(StopReason::LeaseLost);
        self.kill.cancel();
    }

    /// Why the run was told to stop, if it was: the reason given, or a shutdown (the engine's
    /// token, the parent of the run's, was cancelled).
    pub(super) fn stop_reason(&self) -> Option<StopReason> {
        if !self.stop.is_cancelled() {
            return None;
        }
        Some(reason_of(self.reason.load(Ordering::Acquire)).unwrap_or(StopReason::ShuttingDown))
    }
}

impl RunLabels for TaskSink {
    fn task(&self) -> &str {
        &self.id
    }
    fn tool(&self) -> &str {
        &self.tool
    }
    fn principal(&self) -> &str {
        &self.owner
    }
}

impl TaskSink {
    fn shown(&self) -> std::sync::MutexGuard<'_, ProgressState> {
        // The state is replaced in one assignment, so a poisoned lock still holds a whole value.
        self.shown.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A task's journal: its steps' records in the store (`replay.rs`).
#[async_trait]
impl StepJournal for TaskSink {
    async fn replay_step(&self, name: &str) -> Result<StepSlot, StepError> {
        self.replay(name).await
    }

    async fn record_step(&self, seq: u32, step: StepEntry) -> Result<(), StepError> {
        self.record(seq, step).await
    }

    fn end_step(&self, seq: u32) {
        TaskSink::end_step(self, seq)
    }

    fn replaying(&self) -> bool {
        TaskSink::replaying(self)
    }

    fn patch_answer(&self, id: &str) -> Option<bool> {
        TaskSink::patch_answer(self, id)
    }

    fn keep_patch_answer(&self, id: &str, answer: bool) {
        TaskSink::keep_patch_answer(self, id, answer)
    }

    fn signal_taken(&self, name: &str) -> u32 {
        TaskSink::signal_taken(self, name)
    }

    fn keep_signal_taken(&self, name: &str, seq: u32) {
        TaskSink::keep_signal_taken(self, name, seq)
    }

    fn unreadable(&self, error: &StepError) {
        // The handler gets the error and decides; a task that fails on it says why.
        tracing::warn!(task = %self.id, error = %error, "a recorded step could not be read back");
    }
}

#[async_trait]
impl ContextSink for TaskSink {
    fn checkpoint(&self) -> Option<Value> {
        self.checkpoint.clone()
    }

    fn attempt(&self) -> u32 {
        self.attempt
    }

    fn suspend(&self, wake_at: u64) -> bool {
        self.suspend_for(wake_at, super::timers::Suspension::Sleep)
    }

    async fn next_signal(
        &self,
        name: &str,
        after: u32,
        deadline: Option<u64>,
    ) -> Result<Option<crate::model::SignalRecord>, StepError> {
        self.wait_signal(name, after, deadline).await
    }

    async fn send_signal(
        &self,
        task_id: &str,
        name: &str,
        payload: Value,
        key: String,
    ) -> Result<u32, crate::SignalError> {
        self.send_to(task_id, name, payload, key).await
    }

    fn task_id(&self) -> Option<&str> {
        Some(&self.id)
    }

    fn signal_urls(&self) -> Option<Arc<dyn crate::SignalUrls>> {
        self.signer()
    }

    fn stop_reason(&self) -> Option<StopReason> {
        TaskSink::stop_reason(self)
    }

    fn stop_seen(&self) {
        self.stop_seen.store(true, Ordering::Release);
    }

    fn journal(&self) -> Option<&dyn StepJournal> {
        Some(self)
    }

    async fn publish(&self, name: &str, data: Value) -> Result<(), crate::events::PublishError> {
        use crate::events::PublishError;
        let store = &self.engine.store;
        let task = match store.get(&self.id).await {
            Ok(crate::store::Lookup::Found(t)) => t,
            Ok(_) => return Err(PublishError::Refused("the task is gone".into())),
            Err(e) => return Err(PublishError::Store(error_chain(&e))),
        };
        let event = self
            .engine
            .event_rules
            .event(&task, name, &data)
            .map_err(PublishError::Refused)?;
        store
            .append_event(event)
            .await
            .map(|_| ())
            .map_err(|e| PublishError::Store(error_chain(&e)))
    }

    async fn save_checkpoint(&self, state: Value) -> Result<(), CheckpointError> {
        let change = TaskChange {
            checkpoint: Some(Some(state)),
            // Only while this run is the task's: a run whose lease went elsewhere must not write.
            holder: Some(self.engine.config.node_id.clone()),
            ..Default::default()
        };
        let store = &self.engine.store;
        match self
            .retrying("saving the checkpoint", None, || {
                store.update(&self.id, &TaskStatus::ACTIVE, change.clone(), now_ms())
            })
            .await
            .result
        {
            Ok(_) => Ok(()),
            Err(UpdateError::Conflict(cur)) => {
                Err(CheckpointError::NotRunning(cur.status.as_str().to_string()))
            }
            Err(UpdateError::NotFound) => Err(CheckpointError::NotRunning("purged".into())),
            Err(UpdateError::Store(e)) => Err(CheckpointError::Store(error_chain(&e))),
        }
    }

    async fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        if !progress.is_finite() || total.is_some_and(|t| !t.is_finite()) {
            return;
        }
        let update = ProgressUpdate {
            progress,
            total,
            message,
        };
        // Held across the write and the publish, so events leave in commit order.
        let _held = self.engine.order_lock(&self.id).await;
        let before = self.shown().clone();
        if before.after(&update) == before {
            // Nothing the task shows would change: no write, no event.
            return;
        }
        let message = update.message.clone();
        let clears = message.is_some() && self.stale_status.load(Ordering::Acquire);
        let change = TaskChange {
            progress: Some(update),
            progress_event: self.progress_event_due(),
            status_message: clears.then_some(None),
            ..Default::default()
        };
        let store = &self.engine.store;
        match self
            .retrying("a progress update", Some(super::retry::UNDER_LOCK), || {
                store.update(&self.id, &TaskStatus::ACTIVE, change.clone(), now_ms())
            })
            .await
            .result
        {
            Ok(rec) => {
                if clears {
                    self.stale_status.store(false, Ordering::Release);
                }
                let after = ProgressState::of(&rec);
                let changed = after != before;
                let advanced = after.progress.unwrap_or(f64::NEG_INFINITY)
                    > before.progress.unwrap_or(f64::NEG_INFINITY);
                *self.shown() = after;
                if changed {
                    self.engine.notifier.publish(TaskEvent::Progress {
                        task: Arc::new(rec),
                        message,
                        advanced,
                    });
                }
            }
            Err(UpdateError::Conflict(_)) | Err(UpdateError::NotFound) => {}
            Err(e) => {
                tracing::warn!(task = %self.id, error = %error_chain(&e), "progress update failed")
            }
        }
    }

    async fn status(&self, message: String) {
        // The handler's own message replaces what the task came with.
        self.stale_status.store(false, Ordering::Release);
        let change = TaskChange {
            status_message: Some(Some(message)),
            ..Default::default()
        };
        let engine = &self.engine;
        match self
            .retrying("a status update", None, || {
                engine.apply(&self.id, &TaskStatus::ACTIVE, change.clone())
            })
            .await
            .result
        {
            Ok(_) | Err(UpdateError::Conflict(_)) | Err(UpdateError::NotFound) => {}
            Err(e) => {
                tracing::warn!(task = %self.id, error = %error_chain(&e), "status update failed")
            }
        }
    }

    async fn request_input(
        &self,
        method: &str,
        params: Value,
    ) -> Result<InputResponse, InputError> {
        let engine = &self.engine;
        let store_err = |e: &dyn std::error::Error| InputError::Store(error_chain(e));
        // A resumed run asking what an earlier run asked gets that question's answer, or waits
        // for it: the user is not asked again, and a question pending at a hand-off stays the one
        // to answer.
        if self.replays {
            if let Some(earlier) = self.earlier_input(method, &params).await? {
                if let Some(answer) = earlier.response {
                    return Ok(answer);
                }
                let events = engine.notifier.subscribe_task(&self.id);
                // Answered after the earlier questions were read but before this subscription.
                if let Ok(Some(i)) = engine.store.get_input(&earlier.key).await {
                    if let Some(r) = i.response {
                        return Ok(r);
                    }
                }
                return self.wait_for_answer(&earlier.key, events).await;
            }
        }
        let rec = match engine
            .store
            .get(&self.id)
            .await
            .map_err(|e| store_err(&e))?
        {
            Lookup::Found(rec) => rec,
            _ => return Err(InputError::Store("the task is gone".into())),
        };
        if rec.status.is_terminal() {
            return Err(InputError::TaskEnded(rec.status));
        }
        if let Some(guard) = &engine.input_guard {
            guard(&rec, method, &params).map_err(InputError::Unsupported)?;
        }
        let size = serialized_size(&params)?;
        let max = engine.config.max_input_request_bytes;
        if size > max {
            return Err(InputError::TooLarge { size, max });
        }
        let input = InputRecord {
            key: random_id(),
            task_id: self.id.to_string(),
            method: method.to_string(),
            params,
            created_at: now_ms(),
            response: None,
            answered_at: None,
        };
        let key = input.key.clone();
        // Subscribe first: the answer can come as soon as the request is published.
        let events = engine.notifier.subscribe_task(&self.id);
        {
            let _held = engine.order_lock(&self.id).await;
            let was = match engine.store.get(&self.id).await {
                Ok(Lookup::Found(t)) => t.status,
                _ => TaskStatus::Working,
            };
            let asked = self
                .retrying(
                    "asking for input",
                    Some(super::retry::UNDER_LOCK),
                    || async {
                        // A try that failed may have landed: the question is stored, not asked twice.
                        if let Ok(Some(_)) = engine.store.get_input(&input.key).await {
                            if let Ok(Lookup::Found(rec)) = engine.store.get(&self.id).await {
                                return Ok(rec);
                            }
                        }
                        engine.store.add_input(input.clone(), now_ms()).await
                    },
                )
                .await
                .result;
            let rec = match asked {
                Ok(rec) => rec,
                Err(UpdateError::Conflict(cur)) => return Err(InputError::TaskEnded(cur.status)),
                Err(e) => return Err(store_err(&e)),
            };
            let task = Arc::new(rec);
            // A second question while one is open is not a status change.
            if was != TaskStatus::InputRequired {
                engine.notifier.publish(TaskEvent::Changed(task.clone()));
            }
            engine.notifier.publish(TaskEvent::InputRequested {
                task,
                input: Arc::new(input),
            });
        }
        tracing::info!(target: "mcp_tasks::audit", task = %self.id, method, request = %key, "task asked for input");
        self.wait_for_answer(&key, events).await
    }

    async fn log(&self, level: LogLevel, logger: Option<String>, data: Value) {
        if let Ok(Lookup::Found(rec)) = self.engine.store.get(&self.id).await {
            if !rec.status.is_terminal() {
                self.engine.notifier.publish(TaskEvent::Log {
                    task: Arc::new(rec),
                    level,
                    logger,
                    data,
                });
            }
        }
    }
}

impl TaskSink {
    /// Waits for the answer to input request `key` of this task, on `events` (subscribed before the
    /// request could be answered); a missed event is made up for by reading the store.
    async fn wait_for_answer(
        &self,
        key: &str,
        mut events: crate::notifier::TaskSubscription,
    ) -> Result<InputResponse, InputError> {
        let engine = &self.engine;
        loop {
            match events.recv().await {
                Ok(TaskEvent::InputAnswered { input, .. }) if input.key == key => {
                    if let Some(r) = &input.response {
                        return Ok(r.clone());
                    }
                }
                Ok(TaskEvent::Changed(t)) if t.status.is_terminal() => {
                    return Err(InputError::TaskEnded(t.status))
                }
                Ok(_) => {}
                Err(_) => {
                    // Missed events: the store knows.
                    if let Ok(Some(i)) = engine.store.get_input(key).await {
                        if let Some(r) = i.response {
                            return Ok(r);
                        }
                    }
                    if let Ok(Lookup::Found(t)) = engine.store.get(&self.id).await {
                        if t.status.is_terminal() {
                            return Err(InputError::TaskEnded(t.status));
                        }
                    }
                }
            }
        }
    }
}

/// The length of `value` as JSON, counted without building the text.
fn serialized_size(value: &Value) -> Result<usize, InputError> {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).map_err(|e| {
        InputError::Malformed(format!("the input request cannot be serialized: {e}"))
    })?;
    Ok(count.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;
    use crate::EngineConfig;

    struct Never;
    #[async_trait]
    impl TaskHandler for Never {
        async fn run(&self, ctx: TaskContext, _arguments: Arc<Value>) -> Outcome {
            ctx.cancelled().await;
            Outcome::Error {
                code: -1,
                message: "stopped".into(),
                data: None,
            }
        }
    }

    /// Every running task holds its run's future for as long as it runs: 100,000 running tasks
    /// hold 100,000 of them. It was 856 bytes while an `async` block around the run held the run
    /// twice, and 488 while the run was an `async fn` with the end of the run inline; 344 with
    /// Rust 1.89. The bound leaves a toolchain's layout changes room (half again) and still catches
    /// a run held twice; the figure itself is printed, for the benchmark notes.
    #[tokio::test]
    async fn a_running_tasks_future_is_not_held_twice() {
        let engine = Engine::builder(Arc::new(MemoryStore::new()), EngineConfig::default()).build();
        let rec = crate::store::testkit::record("t1", "o", 1);
        let run = engine.prepare_run(&rec, Arc::new(Never), None, None, false);
        let size = std::mem::size_of_val(&run);
        println!("a running task's future: {size} bytes");
        assert!(size <= 520, "a running task's future is {size} bytes");
    }

    /// An engine on a memory store with `handler` as tool `tool`, and a task of it submitted.
    async fn running(tool: &str, handler: Arc<dyn TaskHandler>) -> (Arc<Engine>, String) {
        let engine = Engine::builder(Arc::new(MemoryStore::new()), EngineConfig::default())
            .handler(tool, handler, false)
            .build();
        let id = engine
            .submit(crate::NewTask::new(tool, serde_json::json!({})))
            .await
            .unwrap()
            .record
            .id;
        (engine, id)
    }

    struct SaysItsId;
    #[async_trait]
    impl TaskHandler for SaysItsId {
        async fn run(&self, ctx: TaskContext, _arguments: Arc<Value>) -> Outcome {
            Outcome::Result {
                value: serde_json::json!({ "id": ctx.task_id() }),
                is_error: false,
            }
        }
    }

    /// A run's context has no id of its own; it tells the sink's.
    #[tokio::test]
    async fn a_handler_knows_its_tasks_id() {
        let (engine, id) = running("id", Arc::new(SaysItsId)).await;
        let done = engine.wait_terminal(&id).await.unwrap();
        match done.outcome {
            Some(Outcome::Result { value, .. }) => assert_eq!(value["id"], id.as_str()),
            other => panic!("expected a result, got {other:?}"),
        }
    }

    /// With events narrowed to those who wait (replicas), a running task's events from other
    /// replicas are still wanted here: its stopper needs them. Asked of the running map, without
    /// a watch per task.
    #[tokio::test]
    async fn a_running_tasks_events_are_wanted_while_it_runs() {
        let (engine, id) = running("never", Arc::new(Never)).await;
        assert!(engine.notifier().narrow(Arc::new(|_| true)).is_ok());
        assert!(engine.notifier().wants(&id), "running: wanted");
        assert!(
            !engine.notifier().wants("another"),
            "not running: not wanted"
        );
        engine.cancel(&id, None).await.unwrap();
        engine.wait_terminal(&id).await.unwrap();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while engine.running_count() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert!(!engine.notifier().wants(&id), "ended: no longer wanted");
    }

    /// Fences its own run (as the fence does when the node was starved past its renewals) and,
    /// when `moved`, first gives the lease to node `b` (a take-over); then returns a result in
    /// the same poll: the work ended in the instant its lease was lost.
    struct EndsAsItsLeaseIsLost {
        engine: std::sync::OnceLock<std::sync::Weak<Engine>>,
        moved: bool,
    }
    #[async_trait]
    impl TaskHandler for EndsAsItsLeaseIsLost {
        async fn run(&self, ctx: TaskContext, _arguments: Arc<Value>) -> Outcome {
            let engine = self.engine.get().and_then(|e| e.upgrade()).expect("engine");
            let id = ctx.task_id().expect("a task's run").to_string();
            if self.moved {
                let change = TaskChange {
                    lease: Some((Some("b".into()), Some(crate::now_ms() + 60_000))),
                    ..Default::default()
                };
                engine
                    .store
                    .update(&id, &TaskStatus::ACTIVE, change, crate::now_ms())
                    .await
                    .expect("the lease moves");
            }
            engine.running.get(id.as_str()).expect("running").fence();
            Outcome::Result {
                value: serde_json::json!({"done": true}),
                is_error: false,
            }
        }
    }

    async fn ended_as_lease_lost(moved: bool) -> crate::TaskRecord {
        let handler = Arc::new(EndsAsItsLeaseIsLost {
            engine: std::sync::OnceLock::new(),
            moved,
        });
        let engine = Engine::builder(Arc::new(MemoryStore::new()), EngineConfig::default())
            .handler("ends", handler.clone(), false)
            .build();
        let _ = handler.engine.set(Arc::downgrade(&engine));
        let id = engine
            .submit(crate::NewTask::new("ends", serde_json::json!({})))
            .await
            .unwrap()
            .record
            .id;
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while engine.running_count() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert_eq!(engine.running_count(), 0, "the run ended");
        match engine.store.get(&id).await.unwrap() {
            crate::store::Lookup::Found(t) => t,
            other => panic!("{other:?}"),
        }
    }

    /// Work that ended as its lease was lost (the fence, after the node was starved) is the
    /// task's while this node still holds the lease: written, not dropped to be run again. (Seen
    /// in a cluster test: a retry-safe command ran to its end three times.)
    #[tokio::test]
    async fn an_outcome_returned_as_the_lease_is_fenced_is_written_while_the_lease_is_held() {
        let t = ended_as_lease_lost(false).await;
        assert_eq!(t.status, TaskStatus::Completed, "{t:?}");
        assert!(matches!(&t.outcome, Some(Outcome::Result { value, .. }) if value["done"] == true));
    }

    /// ... and nothing is written once another node took the task over: its run is the task's.
    #[tokio::test]
    async fn an_outcome_returned_after_a_take_over_is_not_written() {
        let t = ended_as_lease_lost(true).await;
        assert_eq!(t.status, TaskStatus::Working, "{t:?}");
        assert_eq!(t.lease_owner.as_deref(), Some("b"));
        assert_eq!(t.outcome, None);
    }
}
