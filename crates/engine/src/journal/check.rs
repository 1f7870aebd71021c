//! Replay testing: [`replay_check`] runs a handler against a journal recorded by a real task
//! (saved with `mcp-tasks admin journal export`, a [`JournalExport`]) without running any step's
//! body, and says whether the handler's code still takes the path the journal records: the test to
//! run before deploying a change to a tool whose tasks are in flight.
//!
//! The check replays each recorded step to the handler, matched as a resumed run matches them (by
//! name and occurrence, `engine/replay.rs`), and ends at the first thing a resumed run would do
//! anew: a step past the journal's end (its body is not run), a question, or a wait longer than
//! the check's bound. A step the journal does not hold while recorded steps are still ahead is
//! the mismatch a resumed run would fail the task with.

use async_trait::async_trait;
use futures::FutureExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

use crate::context::{
    ContextSink, InputError, LogLevel, StepEntry, StepError, StepJournal, StepSlot, TaskContext,
};
use crate::engine::Resumed;
use crate::handler::TaskHandler;
use crate::model::{InputResponse, Outcome, StepRecord};

/// A task's journal as `mcp-tasks admin journal export` writes it (and the admin API's
/// `GET /admin/api/tasks/{id}/journal` answers): what [`replay_check`] replays.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JournalExport {
    /// The task.
    pub task_id: String,
    /// Its tool.
    pub tool: String,
    /// The arguments it was called with.
    pub arguments: Value,
    /// The run it was in when exported.
    pub attempt: u32,
    /// The checkpoint it held, if any.
    #[serde(default)]
    pub checkpoint: Option<Value>,
    /// Its steps, in journal order, outputs included.
    pub steps: Vec<StepRecord>,
}

/// How a [`replay_check`] went.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayReport {
    /// How many of the journal's steps the handler asked for and got replayed.
    pub replayed: usize,
    /// Recorded steps the handler never asked for, by name, in journal order: a run of this code
    /// would not redo them, but would not use them either (it took a shorter path).
    pub unreplayed: Vec<String>,
    /// Where the check stopped.
    pub ended: ReplayEnd,
}

impl ReplayReport {
    /// Whether the code replays the journal: no mismatch (that is an `Err` of [`replay_check`]),
    /// and every recorded step used.
    pub fn is_clean(&self) -> bool {
        self.unreplayed.is_empty()
    }
}

/// Where a [`replay_check`] stopped.
#[derive(Clone, Debug, PartialEq)]
pub enum ReplayEnd {
    /// The handler asked for a step past the journal's end: a resumed run would run it (the check
    /// does not).
    NewStep(String),
    /// The handler returned, with this outcome.
    Returned(Outcome),
    /// The handler asked its client a question (`method`).
    AskedInput(String),
    /// The handler neither returned nor asked for a new step within the check's bound (a durable
    /// sleep recorded to wake later, a wait on something outside).
    Waited,
}

/// Why a [`replay_check`] failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ReplayCheckError {
    /// The handler took another path than the journal's, or could not read a recorded step back
    /// (its type changed): the error a resumed run would get.
    #[error("{0}")]
    Mismatch(StepError),
    /// The handler panicked while replaying (with this message).
    #[error("the handler panicked while replaying its journal: {0}")]
    Panicked(String),
}

/// Replays `journal` to `handler` (with the journal's arguments and checkpoint) and reports
/// whether its code takes the recorded path; see the module's documentation. No step body runs;
/// progress, status and logs go nowhere. Waits at most `bound` for the handler to get to the
/// journal's end.
pub async fn replay_check(
    handler: &dyn TaskHandler,
    journal: &JournalExport,
    bound: Duration,
) -> Result<ReplayReport, ReplayCheckError> {
    let sink = Arc::new(ReplaySink {
        resumed: Mutex::new(*Resumed::with_journal(journal.steps.clone())),
        checkpoint: journal.checkpoint.clone(),
        attempt: journal.attempt.max(1) + 1,
        task_id: journal.task_id.clone(),
        ended: Mutex::new(None),
        stop: CancellationToken::new(),
    });
    let ctx = TaskContext::new(
        Some(journal.task_id.clone()),
        sink.stop.clone(),
        sink.clone(),
    );
    let args = Arc::new(journal.arguments.clone());
    // The handler runs until it returns, or until the sink saw where to stop (what it does after
    // that is a resumed run's business: its future is dropped). A handler that panics at the
    // check's refusal (an `unwrap` of the step) has still shown where it stopped.
    let run = std::panic::AssertUnwindSafe(handler.run(ctx, args)).catch_unwind();
    let outcome = tokio::select! {
        outcome = run => Some(outcome),
        () = tokio::time::sleep(bound) => None,
        () = sink.stop.cancelled() => None,
    };
    let ended = sink.ended.lock().unwrap_or_else(|p| p.into_inner()).take();
    let (replayed, unreplayed) = sink.tally();
    let ended = match (ended, outcome) {
        (Some(Err(mismatch)), _) => return Err(ReplayCheckError::Mismatch(mismatch)),
        (Some(Ok(end)), _) => end,
        (None, Some(Ok(outcome))) => ReplayEnd::Returned(outcome),
        (None, Some(Err(panic))) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic without a message".into());
            return Err(ReplayCheckError::Panicked(message));
        }
        (None, None) => ReplayEnd::Waited,
    };
    Ok(ReplayReport {
        replayed,
        unreplayed,
        ended,
    })
}

/// The check's sink: the journal replayed, nothing recorded, the first new thing noted.
struct ReplaySink {
    resumed: Mutex<Resumed>,
    checkpoint: Option<Value>,
    attempt: u32,
    task_id: String,
    /// Where the check stopped, once it did: an end, or the mismatch.
    ended: Mutex<Option<Result<ReplayEnd, StepError>>>,
    /// Told once the check stopped, so the handler's waits end.
    stop: CancellationToken,
}

impl ReplaySink {
    fn resumed(&self) -> std::sync::MutexGuard<'_, Resumed> {
        self.resumed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes where the check stopped (the first stop counts) and tells the handler to stop.
    fn end(&self, end: Result<ReplayEnd, StepError>) {
        self.ended
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(end);
        self.stop.cancel();
    }

    fn tally(&self) -> (usize, Vec<String>) {
        let r = self.resumed();
        (r.replayed_count(), r.unreplayed_names())
    }
}

/// The step the check refuses to run, as the handler sees it.
fn check_ends_here(name: &str) -> StepError {
    StepError::NotRunning(format!(
        "the replay check ends at step `{name}`, past the journal's end"
    ))
}

#[async_trait]
impl StepJournal for ReplaySink {
    async fn replay_step(&self, name: &str) -> Result<StepSlot, StepError> {
        let (slot, ahead) = {
            let mut r = self.resumed();
            (r.take(name)?, r.unreplayed_count() > 0)
        };
        match slot {
            StepSlot::Recorded { .. } => Ok(slot),
            // A patch marker decides by what is ahead (`TaskContext::patched`): let it ask.
            StepSlot::Run(_) if name.starts_with(crate::journal::determinism::PATCH_PREFIX) => {
                Ok(slot)
            }
            StepSlot::Run(_) if ahead => {
                let mismatch = self.resumed().mismatch(name).unwrap_or_else(|| {
                    StepError::NotRunning(format!("step `{name}` does not replay"))
                });
                self.end(Err(mismatch.clone()));
                Err(mismatch)
            }
            StepSlot::Run(_) => {
                self.end(Ok(ReplayEnd::NewStep(name.to_string())));
                Err(check_ends_here(name))
            }
        }
    }

    async fn record_step(&self, _seq: u32, step: StepEntry) -> Result<(), StepError> {
        // Only a patch marker past the journal's end gets here: a new run from this point.
        self.end(Ok(ReplayEnd::NewStep(step.name.clone())));
        Err(check_ends_here(&step.name))
    }

    fn end_step(&self, seq: u32) {
        self.resumed().end(seq);
    }

    fn replaying(&self) -> bool {
        self.resumed().unreplayed_count() > 0
    }

    fn patch_answer(&self, id: &str) -> Option<bool> {
        self.resumed().patch_answer(id)
    }

    fn keep_patch_answer(&self, id: &str, answer: bool) {
        self.resumed().keep_patch_answer(id, answer);
    }

    fn signal_taken(&self, name: &str) -> u32 {
        self.resumed().signal_taken(name)
    }

    fn keep_signal_taken(&self, name: &str, seq: u32) {
        self.resumed().keep_signal_taken(name, seq);
    }

    fn unreadable(&self, error: &StepError) {
        // As good as a mismatch: a resumed run gets this error for the recorded step.
        self.end(Err(error.clone()));
    }
}

#[async_trait]
impl ContextSink for ReplaySink {
    async fn progress(&self, _progress: f64, _total: Option<f64>, _message: Option<String>) {}

    async fn status(&self, _message: String) {}

    async fn log(&self, _level: LogLevel, _logger: Option<String>, _data: Value) {}

    async fn request_input(
        &self,
        method: &str,
        _params: Value,
    ) -> Result<InputResponse, InputError> {
        self.end(Ok(ReplayEnd::AskedInput(method.to_string())));
        Err(InputError::Unsupported(
            "the replay check ends at a question".into(),
        ))
    }

    fn checkpoint(&self) -> Option<Value> {
        self.checkpoint.clone()
    }

    async fn save_checkpoint(&self, _state: Value) -> Result<(), crate::CheckpointError> {
        // Kept nowhere: the check changes nothing, and the handler goes on as after a save.
        Ok(())
    }

    fn attempt(&self) -> u32 {
        self.attempt
    }

    fn task_id(&self) -> Option<&str> {
        Some(&self.task_id)
    }

    fn journal(&self) -> Option<&dyn StepJournal> {
        Some(self)
    }
}
