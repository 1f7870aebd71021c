//! What a handler may read of the world between its steps without breaking replay: the clock,
//! random numbers and ids, each recorded as a step (so a later run reads what the first one did),
//! and [`TaskContext::patched`], which tells a journal recorded before a code change from a run
//! that starts after it.
//!
//! Their steps have names no handler's step should take (`::now`, `::random`, `::uuid`,
//! `::patch:ID`), so they never match a step of the handler's own.

use serde_json::Value;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Ended;
use crate::clock::now_ms;
use crate::context::{StepEntry, StepError, StepSlot, TaskContext};

/// What the marker step of a `patched` change is named after: a step no handler asks for, which
/// the journal's matching ignores when it is left unreplayed (code that dropped the check).
pub(crate) const PATCH_PREFIX: &str = "::patch:";

/// 64 bits from the operating system's CSPRNG.
fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    // As for task ids: a process without an entropy source must not hand out guessable numbers.
    getrandom::fill(&mut buf).expect("the operating system's random number generator failed");
    u64::from_le_bytes(buf)
}

/// A random (version 4) UUID in its hyphenated lowercase form. Sixteen random bytes with the
/// version and variant bits set (RFC 9562 §5.4): not worth a crate.
fn uuid_v4() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the operating system's random number generator failed");
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

impl TaskContext {
    /// The time now, recorded as a step: every later run of the task gets the time the first run
    /// read here (to the millisecond), so code that branches on it takes the same path.
    pub async fn now(&self) -> Result<SystemTime, StepError> {
        let ms: u64 = self.step("::now", || async { now_ms() }).await?;
        Ok(UNIX_EPOCH + Duration::from_millis(ms))
    }

    /// 64 random bits, recorded as a step: every later run gets the same number.
    pub async fn random_u64(&self) -> Result<u64, StepError> {
        self.step("::random", || async { random_u64() }).await
    }

    /// A random UUID (version 4, hyphenated), recorded as a step: every later run gets the same
    /// id, so an id handed to another system (an idempotency key, a file name) stays the same
    /// across a resume.
    pub async fn uuid(&self) -> Result<String, StepError> {
        self.step("::uuid", || async { uuid_v4() }).await
    }

    /// Whether this run takes the path of the code change `id` (Temporal's `patched`): `true` for
    /// a run that starts after the change was deployed, and for every later run of such a task;
    /// `false` when the task's journal was recorded by code without the change and this run
    /// replays it, so the old path is taken and the journal still matches.
    ///
    /// ```text
    /// if ctx.patched("send-receipt").await? {
    ///     ctx.step("receipt", || send_receipt(&order)).await?;   // new code
    /// }
    /// ```
    ///
    /// One run answers the same for one `id` every time it asks. Once no task recorded without
    /// the change is left (`admin tasks` lists none started before the deploy), the check and
    /// the old path can go: the marker steps left in journals are skipped by the matching (they
    /// never make a replay mismatch). A plain call (not a task) always takes the new path.
    pub async fn patched(&self, id: &str) -> Result<bool, StepError> {
        let Some(journal) = self.sink().journal() else {
            return Ok(true);
        };
        if let Some(answer) = journal.patch_answer(id) {
            return Ok(answer);
        }
        let name = format!("{PATCH_PREFIX}{id}");
        match journal.replay_step(&name).await? {
            StepSlot::Recorded { .. } => {
                journal.keep_patch_answer(id, true);
                Ok(true)
            }
            StepSlot::Run(seq) => {
                let _ended = Ended { journal, seq };
                if journal.replaying() {
                    // Steps recorded by code without this change are still ahead: take its path.
                    journal.keep_patch_answer(id, false);
                    return Ok(false);
                }
                let marker = StepEntry {
                    name,
                    output: Value::Bool(true),
                    error: None,
                    duration_ms: 0,
                };
                journal.record_step(seq, marker).await?;
                journal.keep_patch_answer(id, true);
                Ok(true)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn uuids_are_version_4_hyphenated_and_distinct() {
        let a = super::uuid_v4();
        assert_eq!(a.len(), 36);
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'), "{a}");
        assert!(matches!(&parts[3][..1], "8" | "9" | "a" | "b"), "{a}");
        assert_ne!(a, super::uuid_v4());
    }
}
