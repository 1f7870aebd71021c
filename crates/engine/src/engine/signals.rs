//! Signals: named payloads sent to a task from outside its run (`Engine::signal`), kept in the
//! store from the moment they are sent, and the wait for one in a run (`TaskSink::wait_signal`).
//!
//! A wait that would outlast [`EngineConfig::suspend_sleeps_over`](crate::EngineConfig) suspends
//! the task, as a long durable sleep does, under the lease owner [`AWAITING`]: a signal sent then
//! sets that lease to run out at once, so a node takes the task up and its run finds the signal.
//! The two sides look at each other's write, so neither a signal nor a suspension is missed: the
//! sender wakes a task it finds awaiting, and a suspension that finds a signal stored meanwhile
//! wakes the task itself.

use serde_json::Value;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::runner::TaskSink;
use super::timers::{Suspension, AWAITING};
use super::Engine;
use crate::clock::now_ms;
use crate::context::StepError;
use crate::model::{NewSignal, SignalRecord, TaskStatus};
use crate::store::{error_chain, TaskChange, UpdateError};

/// The longest signal name.
pub const MAX_SIGNAL_NAME: usize = 128;
/// The most a signal's payload may hold, as JSON (256 KiB): a signal says what happened; large
/// data goes elsewhere, with a reference to it in the signal.
pub const MAX_SIGNAL_BYTES: usize = 256 * 1024;
/// The longest sender key.
pub const MAX_SIGNAL_KEY: usize = 256;

/// How often a run waiting for a signal looks in the store for one sent through another node (a
/// signal sent through this one wakes it at once).
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// How long a wait without a deadline is suspended for before it looks again (it wakes at once
/// when a signal comes): a year, far enough to be "until a signal", near enough for every clock.
const NO_DEADLINE_MS: u64 = 365 * 24 * 3600 * 1000;

/// Signs the URLs a third party (a payment provider's webhook, a CI system) posts a task's
/// signal to without credentials of its own: the server that serves them sets one on the engine
/// ([`EngineBuilder::signal_urls`](crate::EngineBuilder::signal_urls)), and a handler asks for a
/// URL with [`TaskContext::signal_url`](crate::TaskContext::signal_url).
pub trait SignalUrls: Send + Sync {
    /// The URL that sends task `task_id` the signal `name` until `expires_at` (Unix ms).
    fn url(&self, task_id: &str, name: &str, expires_at: u64) -> String;
}

/// A signal to send ([`Engine::signal`]).
#[derive(Clone, Debug, PartialEq)]
pub struct SignalSend {
    /// The signal's name (what the handler waits for): 1 to [`MAX_SIGNAL_NAME`] characters, no
    /// control characters.
    pub name: String,
    /// What it carries (`null` for nothing), at most [`MAX_SIGNAL_BYTES`] as JSON.
    pub payload: Value,
    /// Who sends it, in words, for the task's history and the audit log.
    pub sender: String,
    /// The sender's key for this signal: sending again with the same key (a retried request) is
    /// the same signal, not another.
    pub key: Option<String>,
    /// With `Some`, only a task of this owner takes the signal (a task of another is "not found").
    pub owner: Option<String>,
}

/// A signal [`Engine::signal`] stored, or found stored under its key.
#[derive(Clone, Debug, PartialEq)]
pub struct SignalSent {
    /// The signal as stored.
    pub signal: SignalRecord,
    /// `false` when its key was sent before: this is that signal, and nothing new was stored.
    pub fresh: bool,
}

/// Why a signal was not sent.
#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    /// The name is empty, too long or has control characters.
    #[error(
        "a signal's name is 1 to {MAX_SIGNAL_NAME} characters without control characters; got {0:?}"
    )]
    BadName(String),
    /// The key is empty, too long or has control characters.
    #[error("a signal's key is 1 to {MAX_SIGNAL_KEY} characters without control characters")]
    BadKey,
    /// The payload is larger than a signal may carry.
    #[error(
        "the signal's payload is {size} bytes of JSON; a signal carries at most {max} (keep large \
         data elsewhere and send a reference to it)"
    )]
    TooLarge {
        /// Its size as JSON, in bytes.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// No such task (or not the owner's).
    #[error("no task {0}")]
    NotFound(String),
    /// The task finished: nothing waits for signals any more.
    #[error("task {id} is {status}; a finished task takes no signals")]
    Finished {
        /// The task.
        id: String,
        /// Its status.
        status: TaskStatus,
    },
    /// A run of the sending task sent this signal before and was refused then (the refusal was
    /// recorded in its journal, so every run takes the same path).
    #[error("the signal was refused: {0}")]
    Refused(String),
    /// The sending task's journal failed.
    #[error(transparent)]
    Journal(StepError),
    /// Sent from a context that is not a task's run (a plain call).
    #[error("signals are sent from a task's run; this call is not one")]
    NotATask,
    /// The store failed (rendered with its causes).
    #[error("the signal could not be stored: {0}")]
    Store(String),
}

/// Whether `text` is a valid name or key of at most `max` characters.
fn valid(text: &str, max: usize) -> bool {
    !text.is_empty() && text.chars().count() <= max && !text.chars().any(char::is_control)
}

impl Engine {
    /// Sends `send` to task `task_id`: stored with the task before this returns (kept whether or
    /// not a run waits for it now, or any node runs the task), and the wait for it woken, here or,
    /// for a suspended task, on whichever node takes it up. Returns the signal as stored (for a
    /// key sent before, the signal sent then).
    pub async fn signal(
        self: &Arc<Self>,
        task_id: &str,
        send: SignalSend,
    ) -> Result<SignalSent, SignalError> {
        if !valid(&send.name, MAX_SIGNAL_NAME) {
            return Err(SignalError::BadName(send.name));
        }
        if send
            .key
            .as_deref()
            .is_some_and(|k| !valid(k, MAX_SIGNAL_KEY))
        {
            return Err(SignalError::BadKey);
        }
        let size = send.payload.to_string().len();
        if size > MAX_SIGNAL_BYTES {
            return Err(SignalError::TooLarge {
                size,
                max: MAX_SIGNAL_BYTES,
            });
        }
        if let Some(owner) = &send.owner {
            let task = self
                .store
                .get(task_id)
                .await
                .map_err(|e| SignalError::Store(error_chain(&e)))?;
            let theirs = matches!(&task, crate::store::Lookup::Found(t) if &t.owner == owner);
            if !theirs {
                return Err(SignalError::NotFound(task_id.to_string()));
            }
        }
        let new = NewSignal {
            task_id: task_id.to_string(),
            name: send.name,
            payload: send.payload,
            sender: send.sender,
            key: send.key,
            at: now_ms(),
        };
        let (stored, fresh) = match self.store.send_signal(new).await {
            Ok(sent) => sent,
            Err(UpdateError::NotFound) => return Err(SignalError::NotFound(task_id.to_string())),
            Err(UpdateError::Conflict(t)) => {
                return Err(SignalError::Finished {
                    id: t.id,
                    status: t.status,
                })
            }
            Err(UpdateError::Store(e)) => return Err(SignalError::Store(error_chain(&e))),
        };
        if fresh {
            tracing::info!(target: "mcp_tasks::audit", task = %task_id, signal = %stored.name, seq = stored.seq, sender = %stored.sender, "signal sent");
        }
        // Rung and woken for a repeated key too: the first send may have died before it did.
        if let Some(run) = self.running.get(task_id) {
            run.signal_bell.notify_waiters();
        }
        self.wake_for_signal(task_id).await;
        Ok(SignalSent {
            signal: stored,
            fresh,
        })
    }

    /// Every signal sent to task `task_id`, in the order sent.
    pub async fn signals(
        &self,
        task_id: &str,
    ) -> Result<Vec<SignalRecord>, crate::store::StoreError> {
        self.store.signals(task_id).await
    }

    /// Ends the suspension of task `id` if it is suspended waiting for a signal: its lease is set
    /// to run out now, and this node looks for it at once.
    pub(super) async fn wake_for_signal(self: &Arc<Self>, id: &str) {
        let now = now_ms();
        let change = TaskChange {
            lease: Some((Some(AWAITING.to_string()), Some(now))),
            holder: Some(AWAITING.to_string()),
            ..Default::default()
        };
        match self.apply(id, &TaskStatus::ACTIVE, change).await {
            Ok(_) => {
                tracing::info!(task = %id, "a signal woke a task suspended waiting for it");
                self.wake_at(now);
            }
            // Not suspended for a signal (running, sleeping, finished): nothing to wake.
            Err(UpdateError::Conflict(_)) | Err(UpdateError::NotFound) => {}
            Err(UpdateError::Store(e)) => {
                tracing::warn!(task = %id, error = %error_chain(&e), "could not wake a task for its signal; it wakes at its deadline, or a later signal wakes it");
            }
        }
    }

    /// After task `id` was suspended awaiting the signal `name` after place `after`: wakes it if
    /// such a signal was stored meanwhile (its sender found the task still running, so it woke
    /// nothing).
    pub(super) async fn recheck_signal(self: &Arc<Self>, id: &str, name: &str, after: u32) {
        match self.store.next_signal(id, name, after).await {
            Ok(Some(_)) => self.wake_for_signal(id).await,
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(task = %id, error = %error_chain(&e), "could not look for a signal sent while its task was suspended; it wakes at its deadline, or a later signal wakes it");
            }
        }
    }
}

impl TaskSink {
    /// See [`ContextSink::next_signal`](crate::ContextSink::next_signal).
    pub(super) async fn wait_signal(
        &self,
        name: &str,
        after: u32,
        deadline: Option<u64>,
    ) -> Result<Option<SignalRecord>, StepError> {
        let store_error = |e: crate::store::StoreError| StepError::Store(error_chain(&e));
        loop {
            // Armed before the look, so a signal sent between the two rings it.
            let bell = self.signal_bell.notified();
            tokio::pin!(bell);
            bell.as_mut().enable();
            let found = self
                .engine
                .store
                .next_signal(&self.id, name, after)
                .await
                .map_err(store_error)?;
            if let Some(signal) = found {
                return Ok(Some(signal));
            }
            let now = now_ms();
            if deadline.is_some_and(|d| d <= now) {
                return Ok(None);
            }
            let wake = deadline.unwrap_or(now.saturating_add(NO_DEADLINE_MS));
            let awaiting = Suspension::Signal {
                name: name.to_string(),
                after,
            };
            if self.suspend_for(wake, awaiting) {
                // The runner ends the run for the suspension (see `TaskContext::sleep`).
                return std::future::pending().await;
            }
            let left = Duration::from_millis(deadline.map_or(u64::MAX, |d| d - now));
            tokio::select! {
                () = &mut bell => {}
                () = tokio::time::sleep(left.min(LOOK_EVERY)) => {}
                () = self.stop.cancelled() => return Err(StepError::Stopped),
            }
        }
    }

    /// See [`ContextSink::send_signal`](crate::ContextSink::send_signal): another task of this
    /// task's owner.
    pub(super) async fn send_to(
        &self,
        task_id: &str,
        name: &str,
        payload: Value,
        key: String,
    ) -> Result<u32, SignalError> {
        let send = SignalSend {
            name: name.to_string(),
            payload,
            sender: format!("task {}", self.id),
            key: Some(key),
            owner: Some(self.owner.clone()),
        };
        Ok(self.engine.signal(task_id, send).await?.signal.seq)
    }

    /// See [`ContextSink::signal_urls`](crate::ContextSink::signal_urls).
    pub(super) fn signer(&self) -> Option<Arc<dyn SignalUrls>> {
        self.engine.signal_urls.clone()
    }

    /// Whether this run's suspension (ended for a wait) was for a signal, and which.
    pub(super) fn awaited(&self) -> Option<(String, u32)> {
        match &*self.suspension.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(Suspension::Signal { name, after }) => Some((name.clone(), *after)),
            _ => None,
        }
    }

    /// The wake time this run's suspension asked for (0: none).
    pub(super) fn suspended_until(&self) -> u64 {
        self.wake_at.load(Ordering::Acquire)
    }
}
