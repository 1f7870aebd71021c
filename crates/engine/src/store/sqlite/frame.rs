//! The frame content of the change log earlier builds kept (`old_log.rs`): a task's record and its
//! log entry, in a compact binary form. This build only reads it; tests write it as those builds
//! did.
//!
//! Strings and numbers are as they are, and only the JSON values a record holds (arguments,
//! metadata, outcome, checkpoint) are JSON text, as in their rows. A field added to
//! [`TaskRecord`] after the log was retired must be given its default in [`decode`] (the record is
//! built field by field, so it does not compile until it is).

use serde_json::Value;
use std::sync::Arc;

use crate::model::{Outcome, TaskRecord, TaskStatus, Transition};

/// The first byte of every frame this build writes; another value is a log of another format.
const FORMAT: u8 = 1;

/// A log entry: the task's record, whether it had no row before, and the status changes its row's
/// history lacks.
pub(super) struct Entry {
    pub seq: u64,
    pub new: bool,
    pub transitions: Vec<Transition>,
    pub record: TaskRecord,
}

/// Why a frame's content could not be read.
#[derive(Debug, thiserror::Error)]
pub(super) enum FrameError {
    #[error("the frame ends early")]
    Short,
    #[error("unknown frame format {0}")]
    Format(u8),
    #[error("unknown task status {0}")]
    Status(u8),
    #[error("a string is not UTF-8")]
    Utf8(#[from] std::string::FromUtf8Error),
    #[error("a JSON value does not parse")]
    Json(#[from] serde_json::Error),
}

#[cfg(test)]
fn status_code(s: TaskStatus) -> u8 {
    match s {
        TaskStatus::Working => 0,
        TaskStatus::InputRequired => 1,
        TaskStatus::Completed => 2,
        TaskStatus::Failed => 3,
        TaskStatus::Cancelled => 4,
    }
}

fn status_of(code: u8) -> Result<TaskStatus, FrameError> {
    Ok(match code {
        0 => TaskStatus::Working,
        1 => TaskStatus::InputRequired,
        2 => TaskStatus::Completed,
        3 => TaskStatus::Failed,
        4 => TaskStatus::Cancelled,
        c => return Err(FrameError::Status(c)),
    })
}

#[cfg(test)]
/// Appends to a frame.
struct Out<'b>(&'b mut Vec<u8>);

#[cfg(test)]
impl Out<'_> {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    fn opt_str(&mut self, s: Option<&str>) {
        match s {
            None => self.u8(0),
            Some(s) => {
                self.u8(1);
                self.str(s);
            }
        }
    }
    fn opt_u64(&mut self, v: Option<u64>) {
        match v {
            None => self.u8(0),
            Some(v) => {
                self.u8(1);
                self.u64(v);
            }
        }
    }
    fn opt_f64(&mut self, v: Option<f64>) {
        self.opt_u64(v.map(f64::to_bits));
    }
    /// A JSON value as its text, written in place.
    fn json(&mut self, v: &impl serde::Serialize) -> Result<(), serde_json::Error> {
        let at = self.0.len();
        self.u64(0);
        serde_json::to_writer(&mut *self.0, v)?;
        let len = (self.0.len() - at - 8) as u64;
        self.0[at..at + 8].copy_from_slice(&len.to_le_bytes());
        Ok(())
    }
    fn opt_json(&mut self, v: Option<&impl serde::Serialize>) -> Result<(), serde_json::Error> {
        match v {
            None => {
                self.u8(0);
                Ok(())
            }
            Some(v) => {
                self.u8(1);
                self.json(v)
            }
        }
    }
}

#[cfg(test)]
/// Writes entry `seq` of `record` to `buf`. A record with webhooks is never logged (their outbox
/// entries are rows written with it), so they are not written.
pub(super) fn encode(
    buf: &mut Vec<u8>,
    seq: u64,
    new: bool,
    transitions: &[Transition],
    record: &TaskRecord,
) -> Result<(), serde_json::Error> {
    let TaskRecord {
        id,
        owner,
        session,
        era,
        tool,
        arguments,
        request_meta,
        status,
        status_message,
        progress,
        progress_total,
        progress_message,
        retain_after_finish_ms,
        created_at,
        updated_at,
        ttl_ms,
        poll_interval_ms,
        outcome,
        idempotency_key,
        fingerprint,
        attempt,
        lease_owner,
        lease_until,
        finished_at,
        checkpoint,
        webhooks,
    } = record;
    debug_assert!(webhooks.is_empty(), "a task with webhooks is not logged");
    let mut o = Out(buf);
    o.u8(FORMAT);
    o.u64(seq);
    o.u8(u8::from(new));
    o.u64(transitions.len() as u64);
    for t in transitions {
        o.u64(t.at);
        o.u8(status_code(t.status));
        o.opt_str(t.message.as_deref());
    }
    o.str(id);
    o.str(owner);
    o.opt_str(session.as_deref());
    o.str(era);
    o.str(tool);
    o.json(&**arguments)?;
    o.json(&**request_meta)?;
    o.u8(status_code(*status));
    o.opt_str(status_message.as_deref());
    o.opt_f64(*progress);
    o.opt_f64(*progress_total);
    o.opt_str(progress_message.as_deref());
    o.opt_u64(*retain_after_finish_ms);
    o.u64(*created_at);
    o.u64(*updated_at);
    o.opt_u64(*ttl_ms);
    o.opt_u64(*poll_interval_ms);
    o.opt_json(outcome.as_ref())?;
    o.opt_str(idempotency_key.as_deref());
    o.str(fingerprint);
    o.u64(u64::from(*attempt));
    o.opt_str(lease_owner.as_deref());
    o.opt_u64(*lease_until);
    o.opt_u64(*finished_at);
    o.opt_json(checkpoint.as_ref())?;
    Ok(())
}

/// Reads a frame.
struct In<'b>(&'b [u8]);

impl<'b> In<'b> {
    fn take(&mut self, n: usize) -> Result<&'b [u8], FrameError> {
        if self.0.len() < n {
            return Err(FrameError::Short);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, FrameError> {
        Ok(self.take(1)?[0])
    }
    fn u64(&mut self) -> Result<u64, FrameError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn bytes(&mut self) -> Result<&'b [u8], FrameError> {
        let n = usize::try_from(self.u64()?).map_err(|_| FrameError::Short)?;
        self.take(n)
    }
    fn string(&mut self) -> Result<String, FrameError> {
        Ok(String::from_utf8(self.bytes()?.to_vec())?)
    }
    fn present(&mut self) -> Result<bool, FrameError> {
        Ok(self.u8()? != 0)
    }
    fn opt_string(&mut self) -> Result<Option<String>, FrameError> {
        if self.present()? {
            self.string().map(Some)
        } else {
            Ok(None)
        }
    }
    fn opt_u64(&mut self) -> Result<Option<u64>, FrameError> {
        if self.present()? {
            self.u64().map(Some)
        } else {
            Ok(None)
        }
    }
    fn opt_f64(&mut self) -> Result<Option<f64>, FrameError> {
        Ok(self.opt_u64()?.map(f64::from_bits))
    }
    fn json<T: serde::de::DeserializeOwned>(&mut self) -> Result<T, FrameError> {
        Ok(serde_json::from_slice(self.bytes()?)?)
    }
    fn opt_json<T: serde::de::DeserializeOwned>(&mut self) -> Result<Option<T>, FrameError> {
        if self.present()? {
            self.json().map(Some)
        } else {
            Ok(None)
        }
    }
}

/// Reads an entry [`encode`] wrote.
pub(super) fn decode(content: &[u8]) -> Result<Entry, FrameError> {
    let mut i = In(content);
    let format = i.u8()?;
    if format != FORMAT {
        return Err(FrameError::Format(format));
    }
    let seq = i.u64()?;
    let new = i.present()?;
    let n = i.u64()?;
    let mut transitions = Vec::new();
    for _ in 0..n {
        transitions.push(Transition {
            at: i.u64()?,
            status: status_of(i.u8()?)?,
            message: i.opt_string()?,
        });
    }
    let record = TaskRecord {
        id: i.string()?,
        owner: i.string()?,
        session: i.opt_string()?,
        era: i.string()?,
        tool: i.string()?,
        arguments: Arc::new(i.json::<Value>()?),
        request_meta: Arc::new(i.json::<Value>()?),
        status: status_of(i.u8()?)?,
        status_message: i.opt_string()?,
        progress: i.opt_f64()?,
        progress_total: i.opt_f64()?,
        progress_message: i.opt_string()?,
        retain_after_finish_ms: i.opt_u64()?,
        created_at: i.u64()?,
        updated_at: i.u64()?,
        ttl_ms: i.opt_u64()?,
        poll_interval_ms: i.opt_u64()?,
        outcome: i.opt_json::<Outcome>()?,
        idempotency_key: i.opt_string()?,
        fingerprint: i.string()?,
        attempt: u32::try_from(i.u64()?).unwrap_or(u32::MAX),
        lease_owner: i.opt_string()?,
        lease_until: i.opt_u64()?,
        finished_at: i.opt_u64()?,
        checkpoint: i.opt_json()?,
        webhooks: Vec::new(),
    };
    Ok(Entry {
        seq,
        new,
        transitions,
        record,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_of_a_record_comes_back_as_it_went() {
        let mut r = crate::store::testkit::record("t1", "o", 7);
        // Every optional field set, so that one written or read wrong shows.
        r.session = Some("s".into());
        r.arguments = Arc::new(serde_json::json!({"a": [1, "é\"\n"]}));
        r.request_meta = Arc::new(serde_json::json!({"m": true}));
        r.status = TaskStatus::Failed;
        r.status_message = Some("why".into());
        r.progress = Some(0.5);
        r.progress_total = Some(2.0);
        r.progress_message = Some("half".into());
        r.retain_after_finish_ms = Some(9);
        r.updated_at = 8;
        r.ttl_ms = Some(10);
        r.poll_interval_ms = Some(11);
        r.outcome = Some(Outcome::Error {
            code: -1,
            message: "m".into(),
            data: Some(serde_json::json!([1])),
        });
        r.idempotency_key = Some("k".into());
        r.attempt = 3;
        r.lease_owner = Some("n".into());
        r.lease_until = Some(12);
        r.finished_at = Some(13);
        r.checkpoint = Some(serde_json::json!({"c": 1}));
        let transitions = vec![
            Transition {
                at: 5,
                status: TaskStatus::InputRequired,
                message: None,
            },
            Transition {
                at: 8,
                status: TaskStatus::Failed,
                message: Some("why".into()),
            },
        ];
        let mut buf = Vec::new();
        encode(&mut buf, 42, true, &transitions, &r).unwrap();
        let e = decode(&buf).unwrap();
        assert_eq!((e.seq, e.new), (42, true));
        assert_eq!(e.transitions, transitions);
        assert_eq!(e.record, r);
        // Every prefix is short, never a record.
        for n in 0..buf.len() {
            assert!(decode(&buf[..n]).is_err(), "{n} bytes");
        }
    }
}
