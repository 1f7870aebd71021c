//! What a resumed run replays of the runs before it: the step journal (see `crate::journal`) and
//! the questions earlier runs asked, so a resumed run neither redoes a recorded step nor asks the
//! user again.

use serde_json::Value;

use super::runner::TaskSink;
use crate::clock::now_ms;
use crate::context::{InputError, StepEntry, StepError, StepSlot};
use crate::model::{InputRecord, StepRecord, TaskStatus};
use crate::store::{error_chain, TaskChange, UpdateError};

/// A run's view of the earlier runs of its task, read when first needed.
#[derive(Default)]
pub(crate) struct Resumed {
    /// The recorded steps, in journal order (`None`: not read yet).
    journal: Option<Vec<StepRecord>>,
    /// Which of them this run has replayed or recorded (by index in `journal`).
    consumed: Vec<bool>,
    /// Where each name's records are in `journal`, in order (made when first needed).
    by_name: std::collections::HashMap<String, Vec<usize>>,
    /// How many of the records in `journal` at `indexed` this run has not replayed yet.
    unreplayed: usize,
    /// How much of `journal` `by_name` and `unreplayed` cover.
    indexed: usize,
    /// The place the next new step is recorded at.
    next_seq: u32,
    /// How many steps of each name this run has completed (replayed or recorded): the next step
    /// of a name is matched with the record of that name at this occurrence.
    occurrences: std::collections::HashMap<String, u32>,
    /// The step whose body runs now (its place and name): steps run one after another.
    in_flight: Option<(u32, String)>,
    /// The size of the journal as the caps count it (see [`journal_bytes`]): what was read, and
    /// what this run recorded.
    bytes: usize,
    /// What `TaskContext::patched` answered in this run, by change id.
    patches: std::collections::HashMap<String, bool>,
    /// The place of the last signal of each name this run's waits took (see
    /// [`StepJournal::signal_taken`](crate::StepJournal::signal_taken)).
    signals_taken: std::collections::HashMap<String, u32>,
    /// Questions earlier runs asked that this run has not taken up yet, oldest first (`None`: not
    /// read yet).
    inputs: Option<Vec<InputRecord>>,
}

impl Resumed {
    /// What a run starts from when the journal was read for it already.
    pub(crate) fn with_journal(journal: Vec<StepRecord>) -> Box<Resumed> {
        Box::new(Resumed {
            journal: Some(journal),
            ..Default::default()
        })
    }

    /// Whether a new step named `name` may be recorded: not while an earlier run's step is still
    /// unreplayed, since then this code does not take the path the journal records (it changed
    /// since the task started). Checked when a new step is recorded, not when it starts: a step
    /// whose future was dropped (in this run or an earlier one) records nothing and so cannot be
    /// told from one that is yet to come.
    fn may_record(&self, name: &str) -> Result<(), StepError> {
        if self.unreplayed == 0 {
            return Ok(());
        }
        let journal = self.journal.as_deref().unwrap_or_default();
        match journal
            .iter()
            .zip(&self.consumed)
            .find(|(r, consumed)| !**consumed && !is_marker(&r.name))
        {
            Some((unreplayed, _)) => Err(StepError::Mismatch {
                seq: unreplayed.seq,
                recorded: unreplayed.name.clone(),
                found: name.to_string(),
            }),
            None => Ok(()),
        }
    }

    /// The journal's place for a step named `name` (see [`TaskSink::replay`]).
    fn next(&mut self, name: &str) -> Next {
        if let Some((_, running)) = &self.in_flight {
            return Next::Refused(StepError::Concurrent {
                running: running.clone(),
                asked: name.to_string(),
            });
        }
        let journal = self.journal.get_or_insert_with(Vec::new);
        // Index what was read (once: a run's own records are indexed as it makes them).
        for (at, r) in journal.iter().enumerate().skip(self.indexed) {
            self.by_name.entry(r.name.clone()).or_default().push(at);
            self.next_seq = self.next_seq.max(r.seq + 1);
            // A patch marker left unreplayed (code that dropped the check) is no path of the code.
            if !is_marker(&r.name) {
                self.unreplayed += 1;
            }
            self.bytes += journal_bytes(&r.name, &r.output, r.error.as_deref());
        }
        self.indexed = journal.len();
        self.consumed.resize(journal.len(), false);
        let occurrence = self.occurrences.get(name).copied().unwrap_or(0);
        let found = self
            .by_name
            .get(name)
            .and_then(|places| places.get(occurrence as usize))
            .copied();
        if let Some(at) = found {
            self.consumed[at] = true;
            if !is_marker(name) {
                self.unreplayed -= 1;
            }
            *self.occurrences.entry(name.to_string()).or_default() += 1;
            return Next::Slot(StepSlot::Recorded {
                output: journal[at].output.clone(),
                error: journal[at].error.clone(),
            });
        }
        // Used up now, whether or not the step is recorded: a step whose future is dropped after
        // its record landed (the reply lost) must not have its place taken by the next step.
        // Places are never matched, so a gap they leave costs nothing.
        let seq = self.next_seq;
        self.next_seq += 1;
        self.in_flight = Some((seq, name.to_string()));
        Next::Slot(StepSlot::Run(seq))
    }
}

/// What a step counts for against the journal's caps: its output as JSON, its name and error, and
/// 64 bytes for the rest of its row. Counted without writing the JSON anywhere.
fn journal_bytes(name: &str, output: &Value, error: Option<&str>) -> usize {
    row_bytes(output_bytes(output), name, error)
}

/// [`journal_bytes`] of a step whose output is `output` bytes of JSON.
fn row_bytes(output: usize, name: &str, error: Option<&str>) -> usize {
    output + name.len() + error.map_or(0, str::len) + 64
}

/// The size of `output` as compact JSON.
fn output_bytes(output: &Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing a Value to a sink that cannot fail does not fail.
    let _ = serde_json::to_writer(&mut counter, output);
    counter.0
}

/// What a replay check (`journal/check.rs`) asks of the same matching a resumed run uses.
impl Resumed {
    /// The journal's place for a step named `name`: its record, or a new place.
    pub(crate) fn take(&mut self, name: &str) -> Result<StepSlot, StepError> {
        match self.next(name) {
            Next::Slot(slot) => Ok(slot),
            Next::Refused(e) => Err(e),
        }
    }

    /// The mismatch recording a new step named `name` would be, if recorded steps are ahead.
    pub(crate) fn mismatch(&self, name: &str) -> Option<StepError> {
        self.may_record(name).err()
    }

    /// The step at `seq` ended.
    pub(crate) fn end(&mut self, seq: u32) {
        if self.in_flight.as_ref().is_some_and(|(s, _)| *s == seq) {
            self.in_flight = None;
        }
    }

    /// How many recorded steps are not replayed yet.
    pub(crate) fn unreplayed_count(&self) -> usize {
        self.unreplayed
    }

    /// How many recorded steps were replayed.
    pub(crate) fn replayed_count(&self) -> usize {
        self.consumed.iter().filter(|c| **c).count()
    }

    /// The names of the recorded steps not replayed, in journal order.
    pub(crate) fn unreplayed_names(&self) -> Vec<String> {
        let journal = self.journal.as_deref().unwrap_or_default();
        journal
            .iter()
            .enumerate()
            .filter(|(at, r)| {
                !self.consumed.get(*at).copied().unwrap_or(false) && !is_marker(&r.name)
            })
            .map(|(_, r)| r.name.clone())
            .collect()
    }

    /// What `patched` answered for `id` in this run.
    pub(crate) fn patch_answer(&self, id: &str) -> Option<bool> {
        self.patches.get(id).copied()
    }

    /// Keeps what `patched` answered for `id`.
    pub(crate) fn keep_patch_answer(&mut self, id: &str, answer: bool) {
        self.patches.insert(id.to_string(), answer);
    }

    /// The place of the last signal named `name` this run's waits took (0: none yet).
    pub(crate) fn signal_taken(&self, name: &str) -> u32 {
        self.signals_taken.get(name).copied().unwrap_or(0)
    }

    /// Keeps that a wait of this run took the signal named `name` at place `seq`.
    pub(crate) fn keep_signal_taken(&mut self, name: &str, seq: u32) {
        let taken = self.signals_taken.entry(name.to_string()).or_default();
        *taken = (*taken).max(seq);
    }
}

/// Whether a record is a `patched` marker rather than a step of the handler's.
fn is_marker(name: &str) -> bool {
    name.starts_with(crate::journal::determinism::PATCH_PREFIX)
}

/// What the journal says about its next place, decided under the lock.
enum Next {
    Slot(StepSlot),
    /// A step while another runs: refused, the task goes on.
    Refused(StepError),
}

impl TaskSink {
    fn resumed(&self) -> std::sync::MutexGuard<'_, Option<Box<Resumed>>> {
        // Every change under the lock is one assignment or push: a poisoned lock holds a whole value.
        self.resumed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Fills the part of [`Resumed`] that `part` picks with what `read` reads, unless it is there.
    async fn read_once<T, E>(
        &self,
        part: fn(&mut Resumed) -> &mut Option<T>,
        read: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<(), E> {
        if self.resumed().as_mut().is_some_and(|r| part(r).is_some()) {
            return Ok(());
        }
        let value = read.await?;
        let mut held = self.resumed();
        part(held.get_or_insert_with(Box::default)).get_or_insert(value);
        Ok(())
    }

    /// Takes the journal's next place for a step named `name` (see
    /// [`ContextSink::replay_step`](crate::ContextSink::replay_step)). A first run has nothing to
    /// replay and reads nothing; a later one reads the journal once.
    pub(super) async fn replay(&self, name: &str) -> Result<StepSlot, StepError> {
        let store = &self.engine.store;
        let first_run = !self.replays;
        self.read_once(|r| &mut r.journal, async {
            if first_run {
                return Ok(Vec::new());
            }
            store
                .steps(&self.id)
                .await
                .map_err(|e| StepError::Store(error_chain(&e)))
        })
        .await?;
        let next = self.resumed().get_or_insert_with(Box::default).next(name);
        match next {
            Next::Slot(slot) => Ok(slot),
            Next::Refused(e) => Err(e),
        }
    }

    /// The step at `seq` ended (recorded, failed, or its future was dropped): the next may start.
    pub(super) fn end_step(&self, seq: u32) {
        if let Some(r) = self.resumed().as_mut() {
            r.end(seq);
        }
    }

    /// Whether steps earlier runs recorded are still ahead of this run (see
    /// [`StepJournal::replaying`](crate::StepJournal::replaying)).
    pub(super) fn replaying(&self) -> bool {
        self.resumed().as_ref().is_some_and(|r| r.unreplayed > 0)
    }

    /// See [`StepJournal::patch_answer`](crate::StepJournal::patch_answer).
    pub(super) fn patch_answer(&self, id: &str) -> Option<bool> {
        self.resumed().as_ref().and_then(|r| r.patch_answer(id))
    }

    /// See [`StepJournal::keep_patch_answer`](crate::StepJournal::keep_patch_answer).
    pub(super) fn keep_patch_answer(&self, id: &str, answer: bool) {
        self.resumed()
            .get_or_insert_with(Box::default)
            .keep_patch_answer(id, answer);
    }

    /// See [`StepJournal::signal_taken`](crate::StepJournal::signal_taken).
    pub(super) fn signal_taken(&self, name: &str) -> u32 {
        self.resumed().as_ref().map_or(0, |r| r.signal_taken(name))
    }

    /// See [`StepJournal::keep_signal_taken`](crate::StepJournal::keep_signal_taken).
    pub(super) fn keep_signal_taken(&self, name: &str, seq: u32) {
        self.resumed()
            .get_or_insert_with(Box::default)
            .keep_signal_taken(name, seq);
    }

    /// Whether `entry` may be recorded: its output within the step cap, and the journal with it
    /// within its own. Returns what it counts for (see [`journal_bytes`]).
    fn within_caps(&self, entry: &StepEntry) -> Result<usize, StepError> {
        let config = &self.engine.config;
        let output = output_bytes(&entry.output);
        if output > config.max_step_output_bytes {
            return Err(StepError::TooLarge {
                name: entry.name.clone(),
                bytes: output,
                limit: config.max_step_output_bytes,
            });
        }
        let bytes = row_bytes(output, &entry.name, entry.error.as_deref());
        let held = self.resumed().as_ref().map_or(0, |r| r.bytes);
        if held + bytes > config.max_journal_bytes {
            return Err(StepError::JournalFull {
                name: entry.name.clone(),
                bytes: held + bytes,
                limit: config.max_journal_bytes,
            });
        }
        Ok(bytes)
    }

    /// Records what the step at `seq` left, while this run holds the task.
    pub(super) async fn record(&self, seq: u32, entry: StepEntry) -> Result<(), StepError> {
        // Two statements: each takes the lock for itself.
        let replayable = self
            .resumed()
            .as_ref()
            .map_or(Ok(()), |r| r.may_record(&entry.name));
        let checked = replayable.and_then(|()| self.within_caps(&entry));
        let bytes = match checked {
            Ok(bytes) => bytes,
            Err(e) => {
                // The journal cannot be replayed by this code, or cannot hold the step: the task
                // fails, saying why.
                self.fail(e.to_string()).await;
                return Err(e);
            }
        };
        let step = StepRecord {
            task_id: self.id.to_string(),
            seq,
            name: entry.name,
            output: entry.output,
            attempt: self.attempt,
            at: now_ms(),
            duration_ms: entry.duration_ms,
            // A program's stderr may carry a NUL, which PostgreSQL's text cannot hold.
            error: entry.error.map(crate::store::storable_text),
        };
        let node = &self.engine.config.node_id;
        let store = &self.engine.store;
        let attempt = self
            .retrying(
                &format!("recording step {seq} ({})", step.name),
                None,
                || store.record_step(node, step.clone()),
            )
            .await;
        let mut recorded = attempt.result;
        if attempt.retried && matches!(recorded, Err(UpdateError::Conflict(_))) {
            // A try that failed may have landed all the same: then the place holds this very
            // record, and the step is recorded.
            if let Ok(journal) = store.steps(&self.id).await {
                if journal.iter().any(|r| {
                    r.seq == seq
                        && r.name == step.name
                        && r.output == step.output
                        && r.error == step.error
                        && r.attempt == step.attempt
                }) {
                    recorded = Ok(());
                }
            }
        }
        match recorded {
            Ok(()) => {
                if let Some(r) = self.resumed().as_mut() {
                    *r.occurrences.entry(step.name.clone()).or_default() += 1;
                    let j = r.journal.get_or_insert_with(Vec::new);
                    r.next_seq = r.next_seq.max(seq + 1);
                    r.by_name
                        .entry(step.name.clone())
                        .or_default()
                        .push(j.len());
                    j.push(step);
                    r.indexed = j.len();
                    r.consumed.resize(j.len(), true);
                    r.bytes += bytes;
                }
                Ok(())
            }
            Err(UpdateError::Conflict(cur))
                if !cur.status.is_terminal()
                    && cur.lease_owner.as_deref() == Some(node.as_str()) =>
            {
                Err(StepError::AlreadyRecorded(seq))
            }
            Err(UpdateError::Conflict(cur)) => {
                Err(StepError::NotRunning(if cur.status.is_terminal() {
                    cur.status.as_str().to_string()
                } else {
                    format!("held by {}", cur.lease_owner.as_deref().unwrap_or("nobody"))
                }))
            }
            Err(UpdateError::NotFound) => Err(StepError::NotRunning("purged".into())),
            Err(UpdateError::Store(e)) => Err(StepError::Store(error_chain(&e))),
        }
    }

    /// The first question an earlier run of this task asked with the same `method` and `params`
    /// that this run has not taken up yet; taken up now.
    pub(super) async fn earlier_input(
        &self,
        method: &str,
        params: &Value,
    ) -> Result<Option<InputRecord>, InputError> {
        // Read before this run asks anything: every question found is an earlier run's.
        let store = &self.engine.store;
        self.read_once(|r| &mut r.inputs, async {
            store
                .inputs(&self.id)
                .await
                .map_err(|e| InputError::Store(error_chain(&e)))
        })
        .await?;
        let mut held = self.resumed();
        let Some(inputs) = held.as_mut().and_then(|r| r.inputs.as_mut()) else {
            return Ok(None);
        };
        Ok(inputs
            .iter()
            .position(|i| i.method == method && i.params == *params)
            .map(|at| inputs.remove(at)))
    }

    /// Fails the task with `message`, while this run holds it.
    async fn fail(&self, message: String) {
        let change = TaskChange {
            status: Some(TaskStatus::Failed),
            status_message: Some(Some(message.clone())),
            outcome: Some(self.engine.rules.failure(message)),
            holder: Some(self.engine.config.node_id.clone()),
            ..Default::default()
        };
        if let Err(UpdateError::Store(e)) = self
            .engine
            .apply(&self.id, &TaskStatus::ACTIVE, change)
            .await
        {
            tracing::warn!(task = %self.id, error = %error_chain(&e), "could not fail the task after a replay mismatch");
        }
    }
}
