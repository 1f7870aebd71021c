//! Waiting for signals in a handler, and sending them to other tasks, journaled: a wait's outcome
//! (the signal it took, or its timeout) is a step, so every later run of the task gets the same
//! payload, and each wait for a name takes the next signal of that name after the one the wait
//! before it took.
//!
//! Step names: `::signal:NAME` (what a wait took), `::signal-deadline:NAME` (when a wait with a
//! timeout gives up), `::signal-sent:NAME:TASK` (a signal this task sent).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::{Duration, Instant};

use super::{millis_since, Ended};
use crate::clock::{format_rfc3339, now_ms};
use crate::context::{StepEntry, StepError, StepSlot, TaskContext};
use crate::engine::SignalError;

/// A signal a wait took ([`TaskContext::wait_signal`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Signal {
    /// Its name.
    pub name: String,
    /// What it carries (`null` when the sender gave nothing).
    pub payload: Value,
    /// Who sent it, in words (`owner alice`, `operator`, `task <id>`, `signed url`).
    pub sender: String,
    /// Its place among the task's signals.
    pub seq: u32,
    /// When it was sent, Unix ms.
    pub at: u64,
}

/// What a wait ended with, as recorded.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Waited {
    Received(Signal),
    TimedOut,
}

impl TaskContext {
    /// Waits for the signal `name`: the first one of that name sent to this task after the one
    /// the previous wait for `name` took (a signal sent before the wait, or while no node ran the
    /// task, counts: signals are kept with the task). Journaled: a later run of the task gets the
    /// same signal here without waiting. A long wait suspends the task as a long
    /// [`TaskContext::sleep`] does (no slot or lease held; the signal wakes it on any node).
    ///
    /// The task's status message says what it waits for. Ends with [`StepError::Stopped`] when
    /// the run is told to stop (the wait is not recorded, and the next run waits again).
    pub async fn wait_signal(&self, name: &str) -> Result<Signal, StepError> {
        match self.wait_signal_until(name, None).await? {
            Some(signal) => Ok(signal),
            // Only a journal recorded by code that gave this wait a timeout says so.
            None => Err(StepError::Serde {
                name: format!("{WAIT_PREFIX}{name}"),
                message: "recorded as timed out, but this wait has no timeout: the code changed \
                          since the task started"
                    .into(),
            }),
        }
    }

    /// Like [`TaskContext::wait_signal`], giving up after `timeout`: `Ok(None)` then. The time to
    /// give up at is recorded first, so a run that resumes the task waits only what is left.
    pub async fn wait_signal_timeout(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<Option<Signal>, StepError> {
        let millis = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let deadline: u64 = self
            .step(&format!("{DEADLINE_PREFIX}{name}"), || async move {
                now_ms().saturating_add(millis)
            })
            .await?;
        self.wait_signal_until(name, Some(deadline)).await
    }

    async fn wait_signal_until(
        &self,
        name: &str,
        deadline: Option<u64>,
    ) -> Result<Option<Signal>, StepError> {
        let Some(journal) = self.sink().journal() else {
            return Err(StepError::NotRunning(
                "signals are sent to tasks; this call is not one".into(),
            ));
        };
        let step = format!("{WAIT_PREFIX}{name}");
        let serde_error = |e: serde_json::Error| StepError::Serde {
            name: step.clone(),
            message: e.to_string(),
        };
        match journal.replay_step(&step).await? {
            StepSlot::Recorded {
                output,
                error: None,
            } => {
                let waited: Waited = serde_json::from_value(output).map_err(|e| {
                    let e = serde_error(e);
                    journal.unreadable(&e);
                    e
                })?;
                Ok(match waited {
                    Waited::Received(signal) => {
                        journal.keep_signal_taken(name, signal.seq);
                        Some(signal)
                    }
                    Waited::TimedOut => None,
                })
            }
            StepSlot::Recorded {
                error: Some(error), ..
            } => {
                let e = StepError::RecordedFailure { name: step, error };
                journal.unreadable(&e);
                Err(e)
            }
            StepSlot::Run(seq) => {
                let _ended = Ended { journal, seq };
                let started = Instant::now();
                let after = journal.signal_taken(name);
                let until = deadline.map_or_else(
                    || " (no time limit)".to_string(),
                    |d| format!(" until {}", format_rfc3339(d)),
                );
                self.status(format!("waiting for the signal `{name}`{until}"))
                    .await;
                let waited = match self.sink().next_signal(name, after, deadline).await? {
                    Some(r) => Waited::Received(Signal {
                        name: r.name,
                        payload: r.payload,
                        sender: r.sender,
                        seq: r.seq,
                        at: r.at,
                    }),
                    None => Waited::TimedOut,
                };
                let entry = StepEntry {
                    name: step.clone(),
                    output: serde_json::to_value(&waited).map_err(serde_error)?,
                    error: None,
                    duration_ms: millis_since(started),
                };
                journal.record_step(seq, entry).await?;
                Ok(match waited {
                    Waited::Received(signal) => {
                        journal.keep_signal_taken(name, signal.seq);
                        Some(signal)
                    }
                    Waited::TimedOut => None,
                })
            }
        }
    }

    /// A URL a third party POSTs the signal `name` to (its body, JSON, is the payload), valid for
    /// `valid_for`: signed by the server, so the sender needs no credentials, and good for this
    /// task and this signal only. Journaled: every run of the task gets the same URL. Fails with
    /// [`StepError::Unsupported`] where the server makes no such URLs (`[signals] public_url` and
    /// `url_secret` unset).
    pub async fn signal_url(&self, name: &str, valid_for: Duration) -> Result<String, StepError> {
        let unsupported = || {
            StepError::Unsupported(
                "this server makes no signal URLs: set [signals] public_url and url_secret".into(),
            )
        };
        let (Some(signer), Some(task)) = (self.sink().signal_urls(), self.task_id()) else {
            return Err(unsupported());
        };
        let task = task.to_string();
        let millis = u64::try_from(valid_for.as_millis()).unwrap_or(u64::MAX);
        self.step(&format!("{URL_PREFIX}{name}"), || async move {
            signer.url(&task, name, now_ms().saturating_add(millis))
        })
        .await
    }

    /// Sends the signal `name` carrying `payload` to task `task_id`, a task of this task's owner
    /// (another principal's answers [`SignalError::NotFound`]). Journaled: a later run of this
    /// task does not send it again, and gets what the send answered (its place among the other
    /// task's signals, or why it was refused, as [`SignalError::Refused`]). Returns the place.
    pub async fn signal_task(
        &self,
        task_id: &str,
        name: &str,
        payload: Value,
    ) -> Result<u32, SignalError> {
        let Some(journal) = self.sink().journal() else {
            return Err(SignalError::NotATask);
        };
        // The key is recorded first: a run that dies between the send and its record sends
        // again under the same key, which the other task takes as the same signal.
        let key = self.uuid().await.map_err(SignalError::Journal)?;
        let step = format!("{SENT_PREFIX}{name}:{task_id}");
        match journal
            .replay_step(&step)
            .await
            .map_err(SignalError::Journal)?
        {
            StepSlot::Recorded { output, error } => match error {
                Some(refused) => Err(SignalError::Refused(refused)),
                None => serde_json::from_value(output).map_err(|e| {
                    let e = StepError::Serde {
                        name: step.clone(),
                        message: e.to_string(),
                    };
                    journal.unreadable(&e);
                    SignalError::Journal(e)
                }),
            },
            StepSlot::Run(seq) => {
                let _ended = Ended { journal, seq };
                let started = Instant::now();
                let sent = self.sink().send_signal(task_id, name, payload, key).await;
                let (output, error) = match &sent {
                    Ok(place) => (Value::from(*place), None),
                    // Worth another try by a later run: nothing is recorded.
                    Err(SignalError::Store(_)) => return sent,
                    Err(e) => (Value::Null, Some(e.to_string())),
                };
                let entry = StepEntry {
                    name: step,
                    output,
                    error: error.clone(),
                    duration_ms: millis_since(started),
                };
                journal
                    .record_step(seq, entry)
                    .await
                    .map_err(SignalError::Journal)?;
                match error {
                    // As a replay would say it, so a run and its replays take the same path.
                    Some(refused) => Err(SignalError::Refused(refused)),
                    None => sent,
                }
            }
        }
    }
}

/// The step a wait's outcome is recorded as.
const WAIT_PREFIX: &str = "::signal:";
/// The step a wait's deadline is recorded as.
const DEADLINE_PREFIX: &str = "::signal-deadline:";
/// The step a signal URL is recorded as.
const URL_PREFIX: &str = "::signal-url:";
/// The step a signal this task sent is recorded as.
const SENT_PREFIX: &str = "::signal-sent:";
