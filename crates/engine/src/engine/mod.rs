//! The executor: creates tasks durably, runs their handlers under a lease, applies every transition
//! through the store's compare-and-set, and sweeps expired tasks.
//!
//! This module holds the engine itself and what callers ask of it (submit, look up, cancel, wait,
//! answer input). How a run proceeds is in [`runner`]; start-up recovery and the sweeper are in
//! [`maintenance`].

mod handoff;
mod landing;
mod maintenance;
mod replay;
mod retry;
mod rewind;
mod runner;
mod services;
mod signals;
mod timers;

pub use handoff::ResumeCounts;
pub(crate) use replay::Resumed;
pub use rewind::{Rewind, Rewound};
pub use services::ServiceState;
pub use signals::{
    SignalError, SignalSend, SignalSent, SignalUrls, MAX_SIGNAL_BYTES, MAX_SIGNAL_KEY,
    MAX_SIGNAL_NAME,
};

use dashmap::DashMap;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::fingerprint::fingerprint;
use crate::handler::TaskHandler;
use crate::ids::{random_id, task_id};
use crate::model::{
    ActiveLimit, HeldLimit, InputRecord, InputResponse, NewTask, Outcome, TaskRecord, TaskStatus,
};
use crate::notifier::{Notifier, TaskEvent};
use crate::rules::{OutcomeRules, PlainRules};
use crate::store::{AnswerError, Created, Lookup, StoreError, TaskChange, TaskStore, UpdateError};

/// Engine settings. Times in milliseconds unless the type says otherwise.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// This node's name, used as lease owner. Unique per process.
    pub node_id: String,
    /// Retention when the caller asks for none. `None`: unlimited.
    pub default_ttl_ms: Option<u64>,
    /// Longest retention granted. `None`: no upper bound (unlimited allowed).
    pub max_ttl_ms: Option<u64>,
    /// Shortest retention granted.
    pub min_ttl_ms: u64,
    /// Poll interval suggested to clients.
    pub poll_interval_ms: u64,
    /// Execution lease length; renewed every third of it while a handler runs.
    pub lease_ms: u64,
    /// A finished task stays readable at least this long after finishing, even past its TTL.
    pub finished_grace_ms: u64,
    /// How long an expired task answers "expired" instead of "not found".
    pub tombstone_ms: u64,
    /// Sessions idle longer than this are removed.
    pub session_idle_ms: u64,
    /// How often the sweeper runs.
    pub sweep_interval: Duration,
    /// How long a cancelled handler may take to stop before it is dropped.
    pub cancel_grace: Duration,
    /// How long a handler told to stop for a hand-off may take to save where it is and return
    /// (default 8 s: more than a command tool's default kill grace of 5 s, so the checkpoint it
    /// prints on SIGTERM is read): with the default drain (12 s), the close (2 s) and the webhooks' stop, a
    /// stop fits in Kubernetes' default 30 s grace.
    pub hand_off_grace: Duration,
    /// Largest input request a task may store, in bytes of its serialized params (default 256 KiB).
    /// A question is kept until its task is purged and is sent to the client, possibly more than
    /// once, so an unbounded one costs memory, storage and bandwidth; larger ones are refused with
    /// [`InputError::TooLarge`](crate::InputError::TooLarge).
    pub max_input_request_bytes: usize,
    /// Least time between two `task.progress` webhook events of one run (default 5 s): a report
    /// inside it sends none, and the last such report is sent when the interval ends, so a
    /// receiver sees the latest progress within it. Only tasks with a target that asked for
    /// progress events are paced at all.
    pub webhook_progress_interval: Duration,
    /// Most runs a task gets (default 10): a task whose run was interrupted (a crash, a lost
    /// node) or handed off this many times is failed with "given up after N attempts" instead of
    /// being resumed again, so a task that crashes its server (a poison task) cannot crash-loop
    /// a node, or each replica in turn. At least 1.
    pub max_attempts: u32,
    /// A durable sleep longer than this suspends its task instead of holding its run (default 60 s;
    /// `None`: every sleep holds its run): the slot, the lease and, for a command tool, the process
    /// are freed, and the task is run again at its wake time (see
    /// [`TaskContext::sleep`](crate::TaskContext::sleep)).
    pub suspend_sleeps_over: Option<Duration>,
    /// The most one step may record, as JSON (default 2 MiB): a step past it fails its task with
    /// a message saying so, since a journal must stay small enough to read at every resume.
    pub max_step_output_bytes: usize,
    /// The most a task's journal may hold (default 32 MiB: each step's output, name and error,
    /// and 64 bytes per step): a step that would take it past fails its task with a message
    /// saying so. It bounds what a resumed run reads into memory.
    pub max_journal_bytes: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            node_id: format!("node-{}", &random_id()[..12]),
            default_ttl_ms: Some(3_600_000),
            max_ttl_ms: Some(86_400_000),
            min_ttl_ms: 1_000,
            poll_interval_ms: 1_000,
            lease_ms: 30_000,
            finished_grace_ms: 300_000,
            tombstone_ms: 3_600_000,
            session_idle_ms: 86_400_000,
            sweep_interval: Duration::from_secs(30),
            cancel_grace: Duration::from_secs(10),
            hand_off_grace: Duration::from_secs(8),
            max_input_request_bytes: 256 * 1024,
            webhook_progress_interval: Duration::from_secs(5),
            max_attempts: 10,
            suspend_sleeps_over: Some(Duration::from_secs(60)),
            max_step_output_bytes: 2 * 1024 * 1024,
            max_journal_bytes: 32 * 1024 * 1024,
        }
    }
}

impl EngineConfig {
    /// The retention granted for a request: the default when none is asked, clamped to the bounds.
    pub fn grant_ttl(&self, requested: Option<u64>) -> Option<u64> {
        let wanted = requested.or(self.default_ttl_ms);
        match (wanted, self.max_ttl_ms) {
            (None, max) => max,
            (Some(t), Some(max)) => Some(t.clamp(self.min_ttl_ms.min(max), max)),
            (Some(t), None) => Some(t.max(self.min_ttl_ms)),
        }
    }
}

/// Why the engine could not do what was asked.
#[derive(Debug, Error)]
pub enum EngineError {
    /// No handler is registered under this name.
    #[error("no handler registered for tool `{0}`")]
    UnknownTool(String),
    /// The task does not exist (or was purged).
    #[error("task not found")]
    NotFound,
    /// The task's retention ran out.
    #[error("task has expired")]
    Expired,
    /// The task is already terminal; carries its record.
    #[error("task is already {}", .0.status)]
    AlreadyTerminal(Box<TaskRecord>),
    /// The store failed or rejected the write.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The key's running tasks already hold too much here (see [`HeldLimit`]).
    #[error(
        "the running tasks of {key} hold {held} bytes; {adding} more would pass the limit of {max}"
    )]
    TooMuchHeld {
        /// Whose runs.
        key: String,
        /// What they hold now.
        held: u64,
        /// What this task would add.
        adding: u64,
        /// The limit.
        max: u64,
    },
    /// An operator's rewind of the task's journal would not run it again (see
    /// [`Engine::rewind`]): why.
    #[error("the task cannot be rewound: {0}")]
    CannotRewind(String),
}

/// A submitted task and whether it was new.
#[derive(Debug, Clone)]
pub struct Submitted {
    /// The task as stored.
    pub record: TaskRecord,
    /// `false` when an idempotency key matched an earlier task.
    pub created: bool,
}

/// Decides whether a task may send an input request to its client (e.g. only when the client declared
/// the capability). Gets the task, the request method and params; `Err` explains why not.
pub type InputGuard = Arc<dyn Fn(&TaskRecord, &str, &Value) -> Result<(), String> + Send + Sync>;

/// What a run holds, counted under its key until dropped (when the run ends).
pub(crate) struct HeldClaim {
    held: Arc<DashMap<String, u64>>,
    key: String,
    bytes: u64,
}

impl Drop for HeldClaim {
    fn drop(&mut self) {
        if let dashmap::Entry::Occupied(mut e) = self.held.entry(self.key.clone()) {
            *e.get_mut() = e.get().saturating_sub(self.bytes);
            if *e.get() == 0 {
                e.remove();
            }
        }
    }
}

#[derive(Clone)]
struct ToolHandler {
    handler: Arc<dyn TaskHandler>,
    retry_on_restart: bool,
}

/// Builds an [`Engine`].
pub struct EngineBuilder {
    store: Arc<dyn TaskStore>,
    notifier: Notifier,
    config: EngineConfig,
    handlers: HashMap<String, ToolHandler>,
    input_guard: Option<InputGuard>,
    rules: Arc<dyn OutcomeRules>,
    event_rules: Arc<dyn crate::events::EventRules>,
    on_run_start: Option<RunStart>,
    signal_urls: Option<Arc<dyn signals::SignalUrls>>,
}

/// Told when a task's handler starts in this process (a first run or a run after recovery), with
/// the task and the time now (Unix ms).
pub type RunStart = Arc<dyn Fn(&TaskRecord, u64) + Send + Sync>;

impl EngineBuilder {
    /// Sets what is told when a handler starts (see [`RunStart`]).
    pub fn on_run_start(mut self, f: RunStart) -> Self {
        self.on_run_start = Some(f);
        self
    }
    /// Sets what signs the URLs third parties send a task's signals to
    /// ([`TaskContext::signal_url`](crate::TaskContext::signal_url)); without it a handler gets
    /// none.
    pub fn signal_urls(mut self, signer: Arc<dyn SignalUrls>) -> Self {
        self.signal_urls = Some(signer);
        self
    }
    /// Sets how the engine words the outcomes it makes up itself (failures it detects, the status
    /// message of a tool-level error). Without this the engine uses [`PlainRules`].
    pub fn outcome_rules(mut self, rules: Arc<dyn OutcomeRules>) -> Self {
        self.rules = rules;
        self
    }
    /// Sets how a task's own events are made ([`TaskContext::publish`](crate::TaskContext::publish)).
    /// Without this every publish is refused ([`crate::events::NoEventTypes`]).
    pub fn event_rules(mut self, rules: Arc<dyn crate::events::EventRules>) -> Self {
        self.event_rules = rules;
        self
    }
    /// Sets the check run before a task's input request is stored and sent.
    pub fn input_guard(mut self, guard: InputGuard) -> Self {
        self.input_guard = Some(guard);
        self
    }
    /// Registers `handler` under `name`. With `retry_on_restart`, a run interrupted by a crash is
    /// started again on recovery instead of failing.
    pub fn handler(
        mut self,
        name: impl Into<String>,
        handler: Arc<dyn TaskHandler>,
        retry_on_restart: bool,
    ) -> Self {
        self.handlers.insert(
            name.into(),
            ToolHandler {
                handler,
                retry_on_restart,
            },
        );
        self
    }
    /// Uses `notifier` instead of a fresh in-process one.
    pub fn notifier(mut self, notifier: Notifier) -> Self {
        self.notifier = notifier;
        self
    }
    /// Finishes the engine. Call [`Engine::start`] to recover orphans and run the sweeper.
    pub fn build(self) -> Arc<Engine> {
        let engine = Arc::new(Engine {
            store: self.store,
            notifier: self.notifier,
            config: self.config,
            handlers: std::sync::RwLock::new(self.handlers),
            shutdown: CancellationToken::new(),
            running: DashMap::new(),
            held: Arc::default(),
            renew_now: tokio::sync::Notify::new(),
            stopper: std::sync::atomic::AtomicBool::new(false),
            order: DashMap::new(),
            input_guard: self.input_guard,
            rules: self.rules,
            event_rules: self.event_rules,
            on_run_start: self.on_run_start,
            signal_urls: self.signal_urls,
            last_sweep_ms: std::sync::atomic::AtomicU64::new(0),
            handing_off: std::sync::atomic::AtomicBool::new(false),
            not_claiming: std::sync::atomic::AtomicBool::new(false),
            takeover_now: Arc::default(),
            resumes: Default::default(),
            landing: Default::default(),
            services: Default::default(),
            idle: tokio::sync::Notify::new(),
        });
        // A running handler's stopper takes its task's events from the all-tasks feed: they are
        // wanted from other replicas. Asked of the running map, not marked per task: a mark costs
        // each of 100,000 running tasks about 200 bytes.
        let me = Arc::downgrade(&engine);
        // Its leases are held here: another replica need not send their events for a runner.
        engine.notifier.runs_as(&engine.config.node_id);
        engine.notifier.also_waited_on(Arc::new(move |task| {
            me.upgrade()
                .is_some_and(|engine| engine.running.contains_key(task))
        }));
        engine
    }
}

/// Runs tasks. Shared as `Arc<Engine>`.
pub struct Engine {
    store: Arc<dyn TaskStore>,
    notifier: Notifier,
    config: EngineConfig,
    /// Handlers by tool name; registered at build time, and while running for tools that come and
    /// go (a gateway upstream's).
    handlers: std::sync::RwLock<HashMap<String, ToolHandler>>,
    shutdown: CancellationToken,
    /// Tasks whose handler runs in this process (never recovered as orphans by this node), with the
    /// token that stops the handler (a child of `shutdown`), and the task marked as waited on here
    /// (a cancel received by another replica must reach this stopper).
    running: DashMap<Arc<str>, Arc<runner::TaskSink>>,
    /// What the runs of each key hold here (see [`HeldLimit`]).
    held: Arc<DashMap<String, u64>>,
    /// Whether the stopper (the node's one subscriber that stops handlers of finished tasks) runs.
    stopper: std::sync::atomic::AtomicBool,
    /// Asks the lease loop for a pass now (the stopper missed events and must find finished tasks).
    renew_now: tokio::sync::Notify,
    /// Per-task locks that make "apply a change, then publish it" one step, so events leave in the
    /// order their changes were committed (a progress report can never be published after the
    /// cancel that followed it).
    order: DashMap<String, Arc<tokio::sync::Mutex<()>>>,
    input_guard: Option<InputGuard>,
    rules: Arc<dyn OutcomeRules>,
    event_rules: Arc<dyn crate::events::EventRules>,
    on_run_start: Option<RunStart>,
    /// Signs the URLs third parties send signals to, when the server makes them.
    signal_urls: Option<Arc<dyn signals::SignalUrls>>,
    /// When the last sweep ended well (Unix ms; 0 before the first).
    last_sweep_ms: std::sync::atomic::AtomicU64,
    /// Set by [`Engine::hand_off`]: this node stops and claims no task any more.
    handing_off: std::sync::atomic::AtomicBool,
    /// Set by [`Engine::stop_claiming`] (a drain began): this node claims no task any more, so
    /// what other nodes hand off goes to nodes that stay.
    not_claiming: std::sync::atomic::AtomicBool,
    /// Asks the take-over loop for a pass now (another node let go of a task).
    takeover_now: Arc<tokio::sync::Notify>,
    /// Hand-offs and resumes, counted.
    resumes: handoff::ResumeCounters,
    /// Status changes being written now, which a read of their task waits for.
    landing: landing::Landing,
    /// The background services, by name, with their handles.
    services: services::Services,
    /// Woken when the last run here ends ([`Engine::idle`]).
    idle: tokio::sync::Notify,
}

/// Holds a task's ordering lock; on release, drops the map entry unless someone else holds or waits for it.
struct OrderGuard<'a> {
    order: &'a DashMap<String, Arc<tokio::sync::Mutex<()>>>,
    id: String,
    held: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for OrderGuard<'_> {
    fn drop(&mut self) {
        drop(self.held.take());
        self.order
            .remove_if(&self.id, |_, m| Arc::strong_count(m) == 1);
    }
}

impl Engine {
    /// Starts building an engine over `store`.
    pub fn builder(store: Arc<dyn TaskStore>, config: EngineConfig) -> EngineBuilder {
        EngineBuilder {
            store,
            notifier: Notifier::new(),
            config,
            handlers: HashMap::new(),
            input_guard: None,
            rules: Arc::new(PlainRules),
            event_rules: Arc::new(crate::events::NoEventTypes),
            on_run_start: None,
            signal_urls: None,
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn TaskStore> {
        &self.store
    }
    /// The notifier.
    pub fn notifier(&self) -> &Notifier {
        &self.notifier
    }
    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }
    /// Registers (or replaces) the handler of tool `name` while the engine runs. Tasks already
    /// running keep the handler they started with.
    pub fn set_handler(
        &self,
        name: impl Into<String>,
        handler: Arc<dyn TaskHandler>,
        retry_on_restart: bool,
    ) {
        self.handlers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                name.into(),
                ToolHandler {
                    handler,
                    retry_on_restart,
                },
            );
    }

    /// Forgets the handler of tool `name`: new calls of it are refused; running ones go on.
    pub fn remove_handler(&self, name: &str) {
        self.handlers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
    }

    fn registered(&self, tool: &str) -> Option<ToolHandler> {
        self.handlers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(tool)
            .cloned()
    }

    /// When the sweeper last finished a sweep without error (Unix ms), if it has: readiness checks
    /// that it is alive.
    pub fn last_sweep_ms(&self) -> Option<u64> {
        match self
            .last_sweep_ms
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            0 => None,
            t => Some(t),
        }
    }

    /// How many handlers run in this process now.
    pub fn running_count(&self) -> usize {
        self.running.len()
    }

    /// Records a client's answer to input request `key` and wakes the handler waiting for it.
    pub async fn answer_input(
        &self,
        key: &str,
        response: InputResponse,
    ) -> Result<(TaskRecord, InputRecord), AnswerError> {
        let input = self
            .store
            .get_input(key)
            .await?
            .ok_or(AnswerError::Unknown)?;
        let _held = self.order_lock(&input.task_id).await;
        let (rec, answered) = self.store.answer_input(key, response, now_ms()).await?;
        let task = Arc::new(rec.clone());
        if rec.status == TaskStatus::Working {
            self.notifier.publish(TaskEvent::Changed(task.clone()));
        }
        self.notifier.publish(TaskEvent::InputAnswered {
            task,
            input: Arc::new(answered.clone()),
        });
        Ok((rec, answered))
    }

    /// A task's input requests still waiting for an answer.
    pub async fn pending_inputs(&self, task_id: &str) -> Result<Vec<InputRecord>, StoreError> {
        Ok(self
            .store
            .inputs(task_id)
            .await?
            .into_iter()
            .filter(|i| i.response.is_none())
            .collect())
    }

    fn new_record(&self, new: NewTask) -> TaskRecord {
        let now = now_ms();
        TaskRecord {
            id: task_id(now),
            fingerprint: fingerprint(&new.tool, &new.arguments),
            owner: new.owner,
            session: new.session,
            era: new.era,
            tool: new.tool,
            arguments: Arc::new(new.arguments),
            request_meta: Arc::new(new.request_meta),
            status: TaskStatus::Working,
            status_message: None,
            progress: None,
            progress_total: None,
            progress_message: None,
            retain_after_finish_ms: new.retain_after_finish_ms,
            created_at: now,
            updated_at: now,
            // Also for retention counted from the end: until then it bounds how long the task may wait
            // for input (the sweeper fails it after), and finishing replaces it.
            ttl_ms: self.config.grant_ttl(new.requested_ttl_ms),
            poll_interval_ms: Some(self.config.poll_interval_ms),
            outcome: None,
            idempotency_key: new.idempotency_key,
            attempt: 1,
            lease_owner: Some(self.config.node_id.clone()),
            lease_until: Some(now + self.config.lease_ms),
            finished_at: None,
            checkpoint: None,
            webhooks: new.webhooks,
        }
    }

    /// Creates a task durably and starts its handler. With an idempotency key that matches an earlier
    /// call of the same owner, returns that task instead (and starts nothing).
    pub async fn submit(self: &Arc<Self>, new: NewTask) -> Result<Submitted, EngineError> {
        let reg = self
            .registered(&new.tool)
            .ok_or_else(|| EngineError::UnknownTool(new.tool.clone()))?;
        let limit = new.active_limit.clone();
        // Taken before the create, given back when the run ends (or now, when nothing runs).
        let claim = match &new.held {
            Some(h) => match self.hold(h) {
                Ok(claim) => Some(claim),
                Err(refused) => {
                    // A retry of a task that exists gets it, whatever the runs hold: it adds none.
                    if let Some(key) = &new.idempotency_key {
                        if let Some(existing) = self.store.find_by_key(&new.owner, key).await? {
                            if existing.fingerprint == fingerprint(&new.tool, &new.arguments) {
                                return Ok(Submitted {
                                    record: existing,
                                    created: false,
                                });
                            }
                        }
                    }
                    return Err(refused);
                }
            },
            None => None,
        };
        let record = self.new_record(new);
        let submitted = self.store_new(record, limit).await?;
        if submitted.created {
            self.spawn_run(&submitted.record, reg.handler.clone(), claim, None, false);
        }
        Ok(submitted)
    }

    /// Counts `h.bytes` for `h.key`, or refuses when the key's runs would hold more than `h.max`.
    fn hold(&self, h: &HeldLimit) -> Result<HeldClaim, EngineError> {
        let mut held = self.held.entry(h.key.clone()).or_insert(0);
        if h.bytes > 0 && held.saturating_add(h.bytes) > h.max {
            let now = *held;
            drop(held);
            // No entry of nothing left behind by a refusal.
            self.held.remove_if(&h.key, |_, n| *n == 0);
            return Err(EngineError::TooMuchHeld {
                key: h.key.clone(),
                held: now,
                adding: h.bytes,
                max: h.max,
            });
        }
        *held += h.bytes;
        Ok(HeldClaim {
            held: self.held.clone(),
            key: h.key.clone(),
            bytes: h.bytes,
        })
    }

    /// What the runs of `key` hold here now (see [`HeldLimit`]).
    pub fn held(&self, key: &str) -> u64 {
        self.held.get(key).map_or(0, |n| *n)
    }

    /// Creates a task that is finished from the start with `outcome` (for calls that fail before any
    /// work starts, such as invalid arguments, when the caller asked for a task and must get one).
    pub async fn submit_finished(
        &self,
        new: NewTask,
        outcome: Outcome,
    ) -> Result<Submitted, EngineError> {
        let limit = new.active_limit.clone();
        let status_message = match &outcome {
            Outcome::Result {
                value,
                is_error: true,
            } => self.rules.error_summary(value),
            Outcome::Error { message, .. } => Some(message.clone()),
            Outcome::Result { .. } => None,
        };
        // Its webhooks (a client's, an operator's subscription) and its principal's event
        // subscriptions hear of the finish like any other: the task is stored working, then
        // finished, and the finish writes its events in the same step, as every finish does.
        // (Created finished at once, it would make none: a store writes events with a status
        // change.)
        let record = self.new_record(new);
        let submitted = self.store_new(record, limit).await?;
        if !submitted.created {
            return Ok(submitted);
        }
        let change = TaskChange {
            status: Some(outcome.status()),
            status_message: Some(status_message),
            outcome: Some(outcome),
            ..Default::default()
        };
        match self
            .apply(&submitted.record.id, &TaskStatus::ACTIVE, change)
            .await
        {
            Ok(record) => Ok(Submitted {
                record,
                created: true,
            }),
            Err(UpdateError::Conflict(cur)) => Ok(Submitted {
                record: *cur,
                created: true,
            }),
            Err(UpdateError::NotFound) => Err(EngineError::NotFound),
            Err(UpdateError::Store(e)) => Err(e.into()),
        }
    }

    /// Stores a new task (or finds the one its idempotency key names) and announces a new one.
    async fn store_new(
        &self,
        record: TaskRecord,
        limit: Option<ActiveLimit>,
    ) -> Result<Submitted, EngineError> {
        match self.store.create(record, limit).await? {
            Created::New(rec) => {
                tracing::info!(target: "mcp_tasks::audit", task = %rec.id, tool = %rec.tool, owner = %rec.owner, status = %rec.status, "task created");
                self.notifier
                    .publish(TaskEvent::Created(Arc::new(rec.clone())));
                Ok(Submitted {
                    record: rec,
                    created: true,
                })
            }
            Created::Existing(rec) => Ok(Submitted {
                record: rec,
                created: false,
            }),
        }
    }

    /// Looks a task up. When a status change of the task is being written at this moment (its
    /// handler has just finished, say), answers with the state after it (see `landing.rs`).
    pub async fn get(&self, id: &str) -> Result<Lookup, StoreError> {
        self.landing.settled(id).await;
        self.store.get(id).await
    }

    /// Moves a task to `cancelled` (durably, before returning) and tells its handler to stop.
    pub async fn cancel(
        &self,
        id: &str,
        reason: Option<String>,
    ) -> Result<TaskRecord, EngineError> {
        let change = TaskChange {
            status: Some(TaskStatus::Cancelled),
            status_message: Some(Some(
                reason.unwrap_or_else(|| "cancelled at the client's request".into()),
            )),
            ..Default::default()
        };
        match self.apply(id, &TaskStatus::ACTIVE, change).await {
            Ok(rec) => {
                tracing::info!(target: "mcp_tasks::audit", task = %rec.id, owner = %rec.owner, "task cancelled");
                Ok(rec)
            }
            Err(UpdateError::NotFound) => Err(EngineError::NotFound),
            Err(UpdateError::Conflict(cur)) => Err(EngineError::AlreadyTerminal(cur)),
            Err(UpdateError::Store(e)) => Err(e.into()),
        }
    }

    /// Waits until the task is terminal and returns it. Woken by the notifier; on a lagging feed it
    /// re-reads the store, so no wake-up is lost.
    pub async fn wait_terminal(&self, id: &str) -> Result<TaskRecord, EngineError> {
        let mut events = self.notifier.subscribe_task(id);
        loop {
            match self.store.get(id).await? {
                Lookup::Found(t) if t.status.is_terminal() => return Ok(t),
                Lookup::Found(_) => {}
                Lookup::Expired { .. } => return Err(EngineError::Expired),
                Lookup::Missing => return Err(EngineError::NotFound),
            }
            loop {
                match events.recv().await {
                    Ok(TaskEvent::Changed(t)) if t.status.is_terminal() => return Ok((*t).clone()),
                    Ok(_) => continue,
                    Err(_) => break, // lagged: re-read the store
                }
            }
        }
    }

    /// Ordering locks currently held or waited for (for tests and metrics).
    pub fn ordering_locks(&self) -> usize {
        self.order.len()
    }

    /// Takes the task's ordering lock. The map entry goes away when its last holder lets go, so the map
    /// only holds tasks that are being changed right now.
    async fn order_lock(&self, id: &str) -> OrderGuard<'_> {
        let lock = self.order.entry(id.to_string()).or_default().clone();
        let held = lock.lock_owned().await;
        OrderGuard {
            order: &self.order,
            id: id.to_string(),
            held: Some(held),
        }
    }

    /// Applies a change (compare-and-set) and publishes it, in commit order for this task.
    async fn apply(
        &self,
        id: &str,
        expect: &[TaskStatus],
        change: TaskChange,
    ) -> Result<TaskRecord, UpdateError> {
        let _held = self.order_lock(id).await;
        let _landing = change.status.is_some().then(|| self.landing.begin(id));
        let progress_only =
            change.status.is_none() && change.status_message.is_none() && change.progress.is_some();
        let rec = self.store.update(id, expect, change, now_ms()).await?;
        if !progress_only {
            self.notifier
                .publish(TaskEvent::Changed(Arc::new(rec.clone())));
        }

        Ok(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_is_clamped_and_defaulted() {
        let c = EngineConfig {
            default_ttl_ms: Some(60_000),
            max_ttl_ms: Some(120_000),
            min_ttl_ms: 1_000,
            ..Default::default()
        };
        assert_eq!(c.grant_ttl(None), Some(60_000));
        assert_eq!(c.grant_ttl(Some(10)), Some(1_000));
        assert_eq!(c.grant_ttl(Some(10_000_000)), Some(120_000));
        let unlimited = EngineConfig {
            default_ttl_ms: None,
            max_ttl_ms: None,
            ..c
        };
        assert_eq!(unlimited.grant_ttl(None), None);
        assert_eq!(unlimited.grant_ttl(Some(5_000)), Some(5_000));
    }
}
