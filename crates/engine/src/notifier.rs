//! Wake-ups: who hears that a task changed.
//!
//! Every change is published once, to the task's own topic (waiters on one task: a blocked result
//! fetch, the runner watching for cancellation) and to the all-tasks feed (the server's router, which
//! forwards notifications to whichever client stream is open). In one process this is tokio broadcast
//! channels; across replicas the same interface is fed by PostgreSQL LISTEN/NOTIFY.

use dashmap::DashMap;
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::broadcast;

use crate::context::LogLevel;
use crate::model::{InputRecord, TaskRecord};

/// Something that happened to a task.
#[derive(Clone, Debug)]
pub enum TaskEvent {
    /// The task was created. Carries the new record.
    Created(Arc<TaskRecord>),
    /// The task's status or status message changed. Carries the new record.
    Changed(Arc<TaskRecord>),
    /// The handler reported progress that changed what the task shows (progress, total or message).
    /// Carries the record after the update.
    Progress {
        /// The record with the new progress.
        task: Arc<TaskRecord>,
        /// The report's message, if it had one.
        message: Option<String>,
        /// Whether the progress value itself went up (a change of the total or the message alone
        /// does not move it; push channels that require a rising value skip such events).
        advanced: bool,
    },
    /// The task asked the client for input. Carries the record (now `input_required`) and the request.
    InputRequested {
        /// The record after the change.
        task: Arc<TaskRecord>,
        /// The request.
        input: Arc<InputRecord>,
    },
    /// An input request was answered. Carries the record after the change and the answered request.
    InputAnswered {
        /// The record after the change.
        task: Arc<TaskRecord>,
        /// The request with its answer.
        input: Arc<InputRecord>,
    },
    /// The handler wrote a log message for the client.
    Log {
        /// The record (for its id, session and request metadata).
        task: Arc<TaskRecord>,
        /// Severity.
        level: LogLevel,
        /// Logger name.
        logger: Option<String>,
        /// The message payload.
        data: Value,
    },
}

impl TaskEvent {
    /// The record the event is about.
    pub fn task(&self) -> &Arc<TaskRecord> {
        match self {
            TaskEvent::Created(t) | TaskEvent::Changed(t) => t,
            TaskEvent::Progress { task, .. }
            | TaskEvent::Log { task, .. }
            | TaskEvent::InputRequested { task, .. }
            | TaskEvent::InputAnswered { task, .. } => task,
        }
    }
}

/// Events buffered per task topic for a slow subscriber. A topic lives as long as someone waits on the
/// task (its runner, a blocked result), and tokio allocates every slot up front: with 64 slots the
/// topics of 100,000 running tasks held most of the server's memory. A subscriber that lags re-reads
/// the store, so a few slots are enough.
const TOPIC_CAPACITY: usize = 8;

/// Publish/subscribe for task events. Cheap to clone.
#[derive(Clone)]
pub struct Notifier {
    inner: Arc<Inner>,
}

struct Inner {
    all: broadcast::Sender<TaskEvent>,
    per_task: DashMap<String, broadcast::Sender<TaskEvent>>,
    /// Where events published here also go (other replicas), if anywhere.
    relay: std::sync::OnceLock<Relay>,
    /// Tasks whose creating reply another replica has written (see [`Notifier::announce`]).
    announced: broadcast::Sender<String>,
    /// Notes other replicas sent (see [`Notifier::tell_peers`]).
    notes: broadcast::Sender<Arc<serde_json::Value>>,
    /// Told of every event published here (not those other replicas bring in).
    observers: std::sync::RwLock<Vec<Observer>>,
    /// Tasks whose events from other replicas someone here takes without a subscription of its
    /// own (see [`Notifier::watch`]): id → how many watch it.
    watched: DashMap<String, usize>,
    /// How many here take every task's events from other replicas (see
    /// [`Notifier::watch_everything`]).
    everything: std::sync::atomic::AtomicUsize,
    /// Who else here waits on tasks, each asked per task (see [`Notifier::also_waited_on`]).
    waited_on: std::sync::RwLock<Vec<WaitedOn>>,
    /// Which tasks' events concern only those who wait on the task, once set (see
    /// [`Notifier::narrow`]). Shared with the relay, which marks such events as it sends them.
    narrowed: Arc<std::sync::OnceLock<WaitersOnly>>,
    /// The nodes whose leases are held in this process (see [`Notifier::runs_as`]).
    nodes: std::sync::RwLock<Vec<String>>,
    /// Orders the changes of what is waited on here as the relay hears of them, against the
    /// relay's list of it (see [`Relayed::Waiting`]).
    wait_order: std::sync::Mutex<()>,
}

/// Says of a task whether its events concern only those who wait on it (see [`Notifier::narrow`]).
pub type WaitersOnly = Arc<dyn Fn(&TaskRecord) -> bool + Send + Sync>;

/// Says whether something here waits on the task with this id (see [`Notifier::also_waited_on`]).
pub type WaitedOn = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Sees each event published in this process once (see [`Notifier::observe_local`]).
pub type Observer = Arc<dyn Fn(&TaskEvent) + Send + Sync>;

/// What this process tells other processes (see [`Notifier::set_relay`]).
#[derive(Clone, Copy, Debug)]
pub enum Relayed<'a> {
    /// An event published here.
    Event {
        /// The event.
        event: &'a TaskEvent,
        /// Whether another process may run its task, and so wait on its events (a cancel, an
        /// answer): the task's lease is held by a node not of this process (see
        /// [`Notifier::runs_as`]), or the event finished a task no handler here runs.
        run_elsewhere: bool,
    },
    /// The reply that told the client about this task has been written here.
    Announced(&'a str),
    /// A note for the other replicas' servers (opaque to the engine): which client streams a
    /// replica holds, that it is alive.
    Note(&'a serde_json::Value),
    /// What is waited on here changed (once narrowed: see [`Notifier::narrow`]): a task's
    /// subscription or [`Watch`] is the first or was the last, a [`WatchEverything`] the first or
    /// the last. Told with [`Notifier::waits_in_order`]'s lock held, so that the relay's
    /// list of what is waited on and these changes come out in one order.
    Waiting(WaitChange<'a>),
}

/// A change of what is waited on in this process (see [`Relayed::Waiting`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitChange<'a> {
    /// Someone here waits on this task now (`true`), or nobody any more (`false`).
    Task {
        /// The task.
        id: &'a str,
        /// Whether it is waited on now.
        waited: bool,
    },
    /// Every task is waited on here now (`true`), or no longer (`false`).
    Everything(bool),
}

/// Takes what this process tells other processes.
pub type Relay = Arc<dyn Fn(Relayed<'_>) + Send + Sync>;

impl Default for Notifier {
    fn default() -> Self {
        Self::new()
    }
}

impl Notifier {
    /// A notifier whose all-tasks feed buffers up to 4096 events per slow subscriber.
    pub fn new() -> Notifier {
        let (all, _) = broadcast::channel(4096);
        Notifier {
            inner: Arc::new(Inner {
                all,
                per_task: DashMap::new(),
                relay: std::sync::OnceLock::new(),
                announced: broadcast::channel(1024).0,
                notes: broadcast::channel(1024).0,
                observers: std::sync::RwLock::new(Vec::new()),
                watched: DashMap::new(),
                everything: std::sync::atomic::AtomicUsize::new(0),
                waited_on: std::sync::RwLock::new(Vec::new()),
                narrowed: Arc::new(std::sync::OnceLock::new()),
                nodes: std::sync::RwLock::new(Vec::new()),
                wait_order: std::sync::Mutex::new(()),
            }),
        }
    }

    /// Calls `observer` with every event published in this process from now on, before it goes
    /// out; events other replicas bring in are not shown (each is observed where it happened). For
    /// counting and waking, not for work: it runs inline.
    pub fn observe_local(&self, observer: Observer) {
        self.inner
            .observers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(observer);
    }

    /// Sends every event published from now on (not those [`Notifier::publish_from_peer`] brings in)
    /// to `relay` as well: how replicas hear each other. Set once; a second relay is refused.
    pub fn set_relay(&self, relay: Relay) -> Result<(), Relay> {
        self.inner.relay.set(relay)
    }

    /// Publishes an event to the task's topic and the all-tasks feed, and to the relay if one is set.
    pub fn publish(&self, event: TaskEvent) {
        for observe in self
            .inner
            .observers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            observe(&event);
        }
        if let Some(relay) = self.inner.relay.get() {
            let run_elsewhere = self.runs_elsewhere(event.task());
            relay(Relayed::Event {
                event: &event,
                run_elsewhere,
            });
        }
        self.publish_from_peer(event);
    }

    /// Tasks whose lease `node` holds are run by this process: their events need no other
    /// replica for a runner of its own (see [`Relayed::Event`]). An engine says so of itself.
    pub fn runs_as(&self, node: &str) {
        self.inner
            .nodes
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(node.to_string());
    }

    /// Whether a process other than this one may run `t` (see [`Relayed::Event`]).
    fn runs_elsewhere(&self, t: &TaskRecord) -> bool {
        match &t.lease_owner {
            Some(owner) => !self
                .inner
                .nodes
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .contains(owner),
            // Finished: the lease is let go of with the change, so whoever ran the task is known
            // only here, where its handler still runs as the finish is published.
            None if t.status.is_terminal() => !self.in_waited_on_sets(&t.id),
            // Let go of: every replica's engine may take it.
            None => true,
        }
    }

    /// Whether a set given to [`Notifier::also_waited_on`] holds `task`.
    fn in_waited_on_sets(&self, task: &str) -> bool {
        self.inner
            .waited_on
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|w| w(task))
    }

    /// Runs `f` with what is waited on here held still: the tasks subscribed to or watched, and
    /// whether every task is ([`WatchEverything`], or not narrowed: then every event is wanted).
    /// The relay lists them so for the other replicas; the changes it is told of after `f` are
    /// changes of this list.
    pub(crate) fn waits_in_order<R>(&self, f: impl FnOnce(bool, Vec<String>) -> R) -> R {
        let _order = self.wait_order();
        let everything = self.inner.narrowed.get().is_none()
            || self
                .inner
                .everything
                .load(std::sync::atomic::Ordering::Acquire)
                > 0;
        let mut tasks: Vec<String> = self
            .inner
            .per_task
            .iter()
            .map(|e| e.key().clone())
            .collect();
        tasks.extend(
            self.inner
                .watched
                .iter()
                .filter(|e| !self.inner.per_task.contains_key(e.key()))
                .map(|e| e.key().clone()),
        );
        f(everything, tasks)
    }

    /// The lock that orders changes of what is waited on here (see [`Relayed::Waiting`]).
    fn wait_order(&self) -> std::sync::MutexGuard<'_, ()> {
        self.inner
            .wait_order
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Tells the relay, if there is one, that what is waited on here changed (with
    /// [`Notifier::wait_order`] held).
    fn tell_waiting(&self, change: WaitChange<'_>) {
        if let Some(relay) = self.inner.relay.get() {
            relay(Relayed::Waiting(change));
        }
    }

    /// Whether `task` is waited on here by a subscription or a [`Watch`].
    fn held(&self, task: &str) -> bool {
        self.inner.per_task.contains_key(task) || self.inner.watched.contains_key(task)
    }

    /// Drops `task`'s topic if nobody listens to it any more, and says so to the relay.
    fn drop_topic_if_unheard(&self, task: &str) {
        let _order = self.wait_order();
        let dropped = self
            .inner
            .per_task
            .remove_if(task, |_, tx| tx.receiver_count() == 0)
            .is_some();
        if dropped && !self.held(task) {
            self.tell_waiting(WaitChange::Task {
                id: task,
                waited: false,
            });
        }
    }

    /// Tells other replicas that the reply announcing `task` to its client has been written here:
    /// a replica holding the client's stream holds the task's messages until then.
    pub fn announce(&self, task: &str) {
        if let Some(relay) = self.inner.relay.get() {
            relay(Relayed::Announced(task));
        }
    }

    /// Another replica wrote the reply announcing `task` (brought in by the relay).
    pub fn announced_by_peer(&self, task: &str) {
        let _ = self.inner.announced.send(task.to_string());
    }

    /// Tasks whose announcing reply another replica wrote, as they are reported.
    pub fn subscribe_peer_announcements(&self) -> broadcast::Receiver<String> {
        self.inner.announced.subscribe()
    }

    /// Whether a relay is set: other replicas may be listening.
    pub fn has_relay(&self) -> bool {
        self.inner.relay.get().is_some()
    }

    /// Sends `note` to the other replicas, if there is a relay; they receive it from
    /// [`Notifier::subscribe_peer_notes`]. Notes are small (they travel as one `NOTIFY`).
    pub fn tell_peers(&self, note: &serde_json::Value) {
        if let Some(relay) = self.inner.relay.get() {
            relay(Relayed::Note(note));
        }
    }

    /// A note another replica sent (brought in by the relay).
    pub fn note_from_peer(&self, note: serde_json::Value) {
        let _ = self.inner.notes.send(Arc::new(note));
    }

    /// Notes from other replicas, as they arrive.
    pub fn subscribe_peer_notes(&self) -> broadcast::Receiver<Arc<serde_json::Value>> {
        self.inner.notes.subscribe()
    }

    /// Publishes an event that another replica relayed: here only, not relayed again.
    pub fn publish_from_peer(&self, event: TaskEvent) {
        let id = event.task().id.clone();
        let mut gone = false;
        if let Some(tx) = self.inner.per_task.get(&id) {
            gone = tx.send(event.clone()).is_err();
        }
        if gone {
            // Nobody listens any more: drop the topic unless someone subscribed in between.
            self.drop_topic_if_unheard(&id);
        }
        let _ = self.inner.all.send(event);
    }

    /// Subscribes to one task's events. Subscribe *before* reading the store, so no change is missed
    /// between the read and the wait. The topic is released when the last subscription is dropped.
    pub fn subscribe_task(&self, id: &str) -> TaskSubscription {
        let _order = self.wait_order();
        let was_held = self.held(id);
        let rx = self
            .inner
            .per_task
            .entry(id.to_string())
            .or_insert_with(|| broadcast::channel(TOPIC_CAPACITY).0)
            .subscribe();
        if !was_held {
            self.tell_waiting(WaitChange::Task { id, waited: true });
        }
        TaskSubscription {
            rx: Some(rx),
            id: id.to_string(),
            notifier: self.clone(),
        }
    }

    /// Subscribes to every task's events. A receiver that lags loses the oldest events.
    pub fn subscribe_all(&self) -> broadcast::Receiver<TaskEvent> {
        self.inner.all.subscribe()
    }

    /// Number of per-task topics currently held (for tests and metrics).
    pub fn topic_count(&self) -> usize {
        self.inner.per_task.len()
    }

    /// The tasks someone in this process waits on through their topics or a [`Watch`] (a
    /// listening stream): what to re-check after events may have been missed. Not those of
    /// [`Notifier::also_waited_on`]: every running handler's task is, and its lease renewal finds
    /// a task finished elsewhere anyway.
    pub fn watched_tasks(&self) -> Vec<String> {
        self.waits_in_order(|_, tasks| tasks)
    }

    /// From now on, the events of the tasks `rule` picks concern only those who wait on the task
    /// (no client stream takes them): this replica marks them so as it relays them, and an event
    /// another replica marked so is brought in here only when someone here waits on its task (a
    /// subscription to it, a [`Notifier::watch`], a [`Notifier::watch_everything`], a set given to
    /// [`Notifier::also_waited_on`]: an engine's running tasks). Without this
    /// every relayed event is brought in, which costs the database a read per event on every
    /// replica. Called once, by an embedder whose every reader of the all-tasks feed that needs
    /// such events marks what it waits on (the server does); a second rule is refused.
    pub fn narrow(&self, rule: WaitersOnly) -> Result<(), WaitersOnly> {
        let _order = self.wait_order();
        self.inner.narrowed.set(rule)?;
        if self
            .inner
            .everything
            .load(std::sync::atomic::Ordering::Acquire)
            == 0
        {
            // Listed as waiting on everything until now (every event was wanted).
            self.tell_waiting(WaitChange::Everything(false));
        }
        Ok(())
    }

    /// The rule of [`Notifier::narrow`], once set (the relay reads it as it sends).
    pub(crate) fn narrowing(&self) -> Arc<std::sync::OnceLock<WaitersOnly>> {
        self.inner.narrowed.clone()
    }

    /// Marks `task` as waited on here until the returned guard is dropped, for someone who reads
    /// its events from the all-tasks feed (a listening stream), so that
    /// the task's events from other replicas are brought in after [`Notifier::narrow`].
    pub fn watch(&self, task: &str) -> Watch {
        let _order = self.wait_order();
        let was_held = self.held(task);
        *self.inner.watched.entry(task.to_string()).or_insert(0) += 1;
        if !was_held {
            self.tell_waiting(WaitChange::Task {
                id: task,
                waited: true,
            });
        }
        Watch {
            notifier: self.clone(),
            task: task.to_string(),
        }
    }

    /// Also counts as waited on here every task `waited_on` says so of, asked when an event of it
    /// comes in: for a set someone here keeps anyway (an engine's running tasks), so that its
    /// tasks need no [`Watch`] each.
    pub fn also_waited_on(&self, waited_on: WaitedOn) {
        self.inner
            .waited_on
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(waited_on);
    }

    /// Marks every task as waited on here until the returned guard is dropped (a live view of all
    /// tasks).
    pub fn watch_everything(&self) -> WatchEverything {
        let _order = self.wait_order();
        let before = self
            .inner
            .everything
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        if before == 0 && self.inner.narrowed.get().is_some() {
            self.tell_waiting(WaitChange::Everything(true));
        }
        WatchEverything {
            notifier: self.clone(),
        }
    }

    /// Whether an event of `task` from another replica, marked as concerning only those who wait
    /// on it, is wanted here (see [`Notifier::narrow`]).
    pub fn wants(&self, task: &str) -> bool {
        use std::sync::atomic::Ordering;
        self.inner.narrowed.get().is_none()
            || self.inner.everything.load(Ordering::Acquire) > 0
            || self.inner.per_task.contains_key(task)
            || self.inner.watched.contains_key(task)
            || self.in_waited_on_sets(task)
    }
}

/// A task marked as waited on (see [`Notifier::watch`]); unmarked when dropped.
pub struct Watch {
    notifier: Notifier,
    task: String,
}

impl Drop for Watch {
    fn drop(&mut self) {
        let notifier = &self.notifier;
        let _order = notifier.wait_order();
        let watched = &notifier.inner.watched;
        if let Some(mut n) = watched.get_mut(&self.task) {
            *n = n.saturating_sub(1);
        }
        let dropped = watched.remove_if(&self.task, |_, n| *n == 0).is_some();
        if dropped && !notifier.held(&self.task) {
            notifier.tell_waiting(WaitChange::Task {
                id: &self.task,
                waited: false,
            });
        }
    }
}

/// Every task marked as waited on (see [`Notifier::watch_everything`]); unmarked when dropped.
pub struct WatchEverything {
    notifier: Notifier,
}

impl Drop for WatchEverything {
    fn drop(&mut self) {
        let notifier = &self.notifier;
        let _order = notifier.wait_order();
        let before = notifier
            .inner
            .everything
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        if before == 1 && notifier.inner.narrowed.get().is_some() {
            notifier.tell_waiting(WaitChange::Everything(false));
        }
    }
}

/// A subscription to one task's events; releases the task's topic when the last one is dropped.
pub struct TaskSubscription {
    rx: Option<broadcast::Receiver<TaskEvent>>,
    id: String,
    notifier: Notifier,
}

impl TaskSubscription {
    /// The next event. `Lagged` means events were missed: re-read the store.
    pub async fn recv(&mut self) -> Result<TaskEvent, broadcast::error::RecvError> {
        match &mut self.rx {
            Some(rx) => rx.recv().await,
            None => Err(broadcast::error::RecvError::Closed),
        }
    }
}

impl Drop for TaskSubscription {
    fn drop(&mut self) {
        drop(self.rx.take());
        self.notifier.drop_topic_if_unheard(&self.id);
    }
}
