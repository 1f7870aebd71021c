//! The executor: creates tasks durably, runs their handlers under a lease, applies every transition
//! through the store's compare-and-set, and sweeps expired tasks.

use async_trait::async_trait;
use dashmap::DashMap;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::context::{ContextSink, InputError, LogLevel, TaskContext};
use crate::ids::random_id;
use crate::model::{
    ActiveLimit, InputRecord, InputResponse, NewTask, Outcome, TaskRecord, TaskStatus,
};
use crate::notifier::{Notifier, TaskEvent};
use crate::rules::{OutcomeRules, PlainRules};
use crate::store::{
    AnswerError, Created, Lookup, PurgePolicy, StoreError, TaskChange, TaskStore, UpdateError,
};

/// The work behind a tool: an async function from arguments to an [`Outcome`].
///
/// Handlers should watch [`TaskContext::cancelled`] and return promptly once it fires; a handler that
/// does not is dropped after [`EngineConfig::cancel_grace`].
#[async_trait]
pub trait TaskHandler: Send + Sync + 'static {
    /// Runs the work.
    async fn run(&self, ctx: TaskContext, arguments: Value) -> Outcome;
}

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

struct Registered {
    handler: Arc<dyn TaskHandler>,
    retry_on_restart: bool,
}

/// Builds an [`Engine`].
pub struct EngineBuilder {
    store: Arc<dyn TaskStore>,
    notifier: Notifier,
    config: EngineConfig,
    handlers: HashMap<String, Registered>,
    input_guard: Option<InputGuard>,
    rules: Arc<dyn OutcomeRules>,
}

impl EngineBuilder {
    /// Sets how the engine words the outcomes it makes up itself (failures it detects, the status
    /// message of a tool-level error). Without this the engine uses [`PlainRules`].
    pub fn outcome_rules(mut self, rules: Arc<dyn OutcomeRules>) -> Self {
        self.rules = rules;
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
            Registered {
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
        Arc::new(Engine {
            store: self.store,
            notifier: self.notifier,
            config: self.config,
            handlers: self.handlers,
            shutdown: CancellationToken::new(),
            running: DashMap::new(),
            order: DashMap::new(),
            input_guard: self.input_guard,
            rules: self.rules,
        })
    }
}

/// Runs tasks. Shared as `Arc<Engine>`.
pub struct Engine {
    store: Arc<dyn TaskStore>,
    notifier: Notifier,
    config: EngineConfig,
    handlers: HashMap<String, Registered>,
    shutdown: CancellationToken,
    /// Tasks whose handler runs in this process (never recovered as orphans by this node).
    running: DashMap<String, ()>,
    /// Per-task locks that make "apply a change, then publish it" one step, so events leave in the
    /// order their changes were committed (a progress report can never be published after the
    /// cancel that followed it).
    order: DashMap<String, Arc<tokio::sync::Mutex<()>>>,
    input_guard: Option<InputGuard>,
    rules: Arc<dyn OutcomeRules>,
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

/// Digest of a tool call (tool name + canonical JSON of the arguments, so key order does not matter):
/// tells a retry from different work under the same idempotency key, and binds state to one call.
pub fn fingerprint(tool: &str, arguments: &Value) -> String {
    fn canonical(v: &Value, out: &mut String) {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<_> = m.keys().collect();
                keys.sort();
                out.push('{');
                for k in keys {
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    canonical(&m[k], out);
                    out.push(',');
                }
                out.push('}');
            }
            Value::Array(a) => {
                out.push('[');
                for x in a {
                    canonical(x, out);
                    out.push(',');
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut text = String::new();
    canonical(arguments, &mut text);
    let mut h = Sha256::new();
    h.update(tool.as_bytes());
    h.update([0]);
    h.update(text.as_bytes());
    hex::encode(h.finalize())
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

    /// Recovers tasks a previous run left unfinished (failing them, or re-running retry-safe tools) and
    /// starts the background sweeper. Returns how many tasks were recovered.
    pub async fn start(self: &Arc<Self>) -> Result<usize, StoreError> {
        let n = self.recover(self.store.is_exclusive()).await?;
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
                    tracing::warn!(error = %e, "task sweep failed");
                }
            }
        });
        Ok(n)
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
    /// [`InputError::TaskEnded`] and a blocked result fetch gets the final answer.
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
        for task in orphans {
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
                            tracing::warn!(task = %task.id, error = %e, "could not re-queue interrupted task")
                        }
                    }
                }
                None => {
                    let message =
                        "interrupted: server restarted before the task finished".to_string();
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
                            tracing::warn!(task = %task.id, error = %e, "could not fail interrupted task")
                        }
                    }
                }
            }
        }
        Ok(n)
    }

    fn new_record(&self, new: NewTask) -> TaskRecord {
        let now = now_ms();
        TaskRecord {
            id: random_id(),
            fingerprint: fingerprint(&new.tool, &new.arguments),
            owner: new.owner,
            session: new.session,
            era: new.era,
            tool: new.tool,
            arguments: new.arguments,
            request_meta: new.request_meta,
            status: TaskStatus::Working,
            status_message: None,
            progress: None,
            progress_total: None,
            created_at: now,
            updated_at: now,
            ttl_ms: self.config.grant_ttl(new.requested_ttl_ms),
            poll_interval_ms: Some(self.config.poll_interval_ms),
            outcome: None,
            idempotency_key: new.idempotency_key,
            attempt: 1,
            lease_owner: Some(self.config.node_id.clone()),
            lease_until: Some(now + self.config.lease_ms),
            finished_at: None,
        }
    }

    /// Creates a task durably and starts its handler. With an idempotency key that matches an earlier
    /// call of the same owner, returns that task instead (and starts nothing).
    pub async fn submit(self: &Arc<Self>, new: NewTask) -> Result<Submitted, EngineError> {
        let reg = self
            .handlers
            .get(&new.tool)
            .ok_or_else(|| EngineError::UnknownTool(new.tool.clone()))?;
        let limit = new.active_limit.clone();
        let record = self.new_record(new);
        let submitted = self.store_new(record, limit).await?;
        if submitted.created {
            self.spawn_run(submitted.record.clone(), reg.handler.clone());
        }
        Ok(submitted)
    }

    /// Creates a task that is finished from the start with `outcome` (for calls that fail before any
    /// work starts, such as invalid arguments, when the caller asked for a task and must get one).
    pub async fn submit_finished(
        &self,
        new: NewTask,
        outcome: Outcome,
    ) -> Result<Submitted, EngineError> {
        let limit = new.active_limit.clone();
        let mut record = self.new_record(new);
        record.status = outcome.status();
        record.status_message = match &outcome {
            Outcome::Result {
                value,
                is_error: true,
            } => self.rules.error_summary(value),
            Outcome::Error { message, .. } => Some(message.clone()),
            Outcome::Result { .. } => None,
        };
        record.outcome = Some(outcome);
        record.finished_at = Some(record.created_at);
        record.lease_owner = None;
        record.lease_until = None;
        self.store_new(record, limit).await
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

    /// Looks a task up.
    pub async fn get(&self, id: &str) -> Result<Lookup, StoreError> {
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
        let progress_only =
            change.status.is_none() && change.status_message.is_none() && change.progress.is_some();
        let rec = self.store.update(id, expect, change, now_ms()).await?;
        if !progress_only {
            self.notifier
                .publish(TaskEvent::Changed(Arc::new(rec.clone())));
        }

        Ok(rec)
    }

    fn spawn_run(self: &Arc<Self>, rec: TaskRecord, handler: Arc<dyn TaskHandler>) {
        // Subscribe and mark as running before the task exists, so a cancel that lands at once is seen
        // and the sweeper never takes this task for an orphan.
        let events = self.notifier.subscribe_task(&rec.id);
        self.running.insert(rec.id.clone(), ());
        let engine = self.clone();
        tokio::spawn(async move {
            let id = rec.id.clone();
            engine.clone().run(rec, handler, events).await;
            engine.running.remove(&id);
        });
    }

    async fn run(
        self: Arc<Self>,
        rec: TaskRecord,
        handler: Arc<dyn TaskHandler>,
        mut events: crate::notifier::TaskSubscription,
    ) {
        let id = rec.id.clone();
        let cancel = self.shutdown.child_token();
        let sink = Arc::new(TaskSink {
            engine: self.clone(),
            id: id.clone(),
            last_progress: std::sync::Mutex::new(rec.progress),
        });
        let ctx = TaskContext::new(Some(id.clone()), cancel.clone(), sink);
        let arguments = rec.arguments.clone();
        let mut work = tokio::spawn(async move { handler.run(ctx, arguments).await });
        let renew_every = Duration::from_millis((self.config.lease_ms / 3).max(1));
        let mut renew = tokio::time::interval(renew_every);
        renew.tick().await;
        let mut deadline: Option<tokio::time::Instant> = None;
        let outcome = loop {
            let grace_over = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                joined = &mut work => break match joined {
                    Ok(outcome) => Some(outcome),
                    Err(e) if e.is_panic() => Some(self.rules.failure(format!("tool `{}` panicked", rec.tool))),
                    Err(_) => None,
                },
                ev = events.recv(), if deadline.is_none() => match ev {
                    Ok(TaskEvent::Changed(t)) if t.status.is_terminal() => {
                        cancel.cancel();
                        deadline = Some(tokio::time::Instant::now() + self.config.cancel_grace);
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => {
                        if let Ok(Lookup::Found(t)) = self.store.get(&id).await {
                            if t.status.is_terminal() {
                                cancel.cancel();
                                deadline = Some(tokio::time::Instant::now() + self.config.cancel_grace);
                            }
                        }
                    }
                    Err(RecvError::Closed) => {}
                },
                _ = cancel.cancelled(), if deadline.is_none() => {
                    // Server shutdown: give the handler its grace period, then leave the task to recovery.
                    deadline = Some(tokio::time::Instant::now() + self.config.cancel_grace);
                }
                _ = grace_over => {
                    tracing::warn!(task = %id, "handler ignored cancellation for the grace period; dropped");
                    work.abort();
                    break None;
                }
                _ = renew.tick() => {
                    let until = now_ms() + self.config.lease_ms;
                    if let Err(e) = self.store.renew_leases(&self.config.node_id, std::slice::from_ref(&id), until).await {
                        tracing::warn!(task = %id, error = %e, "lease renewal failed");
                    }
                }
            }
        };
        let Some(outcome) = outcome else { return };
        if self.shutdown.is_cancelled() {
            // The server is stopping: whatever the handler returned after being told to stop is not
            // the task's result. Leave the task unfinished for recovery on the next start.
            return;
        }
        self.finish(&id, outcome).await;
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
        let change = TaskChange {
            status: Some(status),
            status_message: message,
            outcome: Some(outcome),
            ..Default::default()
        };
        match self.apply(id, &TaskStatus::ACTIVE, change).await {
            Ok(rec) => {
                tracing::info!(target: "mcp_tasks::audit", task = %rec.id, tool = %rec.tool, owner = %rec.owner, status = %rec.status, "task finished");
            }
            Err(UpdateError::Conflict(cur)) => {
                tracing::debug!(task = %id, status = %cur.status, "task already terminal; result discarded");
            }
            Err(e) => tracing::error!(task = %id, error = %e, "could not store task outcome"),
        }
    }
}

/// Reports from a running task: into the store, then out through the notifier.
struct TaskSink {
    engine: Arc<Engine>,
    id: String,
    /// The last progress value published; progress notifications must strictly increase.
    last_progress: std::sync::Mutex<Option<f64>>,
}

#[async_trait]
impl ContextSink for TaskSink {
    async fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        if !progress.is_finite() {
            return;
        }
        {
            let last = self.last_progress.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|l| progress <= l) {
                return;
            }
        }
        let change = TaskChange {
            progress: Some((progress, total)),
            ..Default::default()
        };
        let _held = self.engine.order_lock(&self.id).await;
        match self
            .engine
            .store
            .update(&self.id, &TaskStatus::ACTIVE, change, now_ms())
            .await
        {
            Ok(rec) => {
                *self.last_progress.lock().unwrap_or_else(|p| p.into_inner()) = Some(progress);
                self.engine.notifier.publish(TaskEvent::Progress {
                    task: Arc::new(rec),
                    message,
                });
            }
            Err(UpdateError::Conflict(_)) | Err(UpdateError::NotFound) => {}
            Err(e) => tracing::warn!(task = %self.id, error = %e, "progress update failed"),
        }
    }

    async fn status(&self, message: String) {
        let change = TaskChange {
            status_message: Some(Some(message)),
            ..Default::default()
        };
        match self
            .engine
            .apply(&self.id, &TaskStatus::ACTIVE, change)
            .await
        {
            Ok(_) | Err(UpdateError::Conflict(_)) | Err(UpdateError::NotFound) => {}
            Err(e) => tracing::warn!(task = %self.id, error = %e, "status update failed"),
        }
    }

    async fn request_input(
        &self,
        method: &str,
        params: Value,
    ) -> Result<InputResponse, InputError> {
        let engine = &self.engine;
        let store_err = |e: &dyn std::fmt::Display| InputError::Store(e.to_string());
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
        let input = InputRecord {
            key: random_id(),
            task_id: self.id.clone(),
            method: method.to_string(),
            params,
            created_at: now_ms(),
            response: None,
            answered_at: None,
        };
        let key = input.key.clone();
        // Subscribe first: the answer can come as soon as the request is published.
        let mut events = engine.notifier.subscribe_task(&self.id);
        {
            let _held = engine.order_lock(&self.id).await;
            let was = match engine.store.get(&self.id).await {
                Ok(Lookup::Found(t)) => t.status,
                _ => TaskStatus::Working,
            };
            let rec = match engine.store.add_input(input.clone(), now_ms()).await {
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
                    if let Ok(Some(i)) = engine.store.get_input(&key).await {
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

    #[test]
    fn fingerprint_ignores_key_order() {
        let a = fingerprint(
            "t",
            &serde_json::json!({"a": 1, "b": [1, {"x": 2, "y": 3}]}),
        );
        let b = fingerprint(
            "t",
            &serde_json::json!({"b": [1, {"y": 3, "x": 2}], "a": 1}),
        );
        assert_eq!(a, b);
        assert_ne!(a, fingerprint("u", &serde_json::json!({"a": 1})));
    }
}
