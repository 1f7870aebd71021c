//! The change log of earlier builds, read once when such a store is opened, then removed.
//!
//! Builds before issue 49 made a task write durable by appending it to a log of their own beside
//! the database (`<file>-changes` and `<file>-changes-2`) and wrote it as a row later. SQLite's
//! tools saw nothing of what was only in the log: a backup or a Litestream replica lost the last
//! acknowledged writes. Every write is now a row when its caller hears of it, so the log is gone;
//! a store such a build left behind may still hold writes only there (a crash, or a kill, before
//! their flush). Opening it writes them as rows, in one transaction that also records how far the
//! log is covered, and only then deletes the two files.
//!
//! A frame is its content's length and CRC-32 (little-endian), then the content (`frame.rs`).
//! Each file's frames end at the first torn or zeroed one; the frames at or below
//! `change_log.flushed_seq` were written as rows already; the rest are applied in the order they
//! were numbered, across both files.

use rusqlite::{params, Connection};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::frame::{self, Entry, FrameError};
use super::rows;
use super::Context;
use crate::model::{TaskRecord, Transition};
use crate::store::StoreError;

/// Bytes of a frame's header: the content's length and its CRC-32.
const HEADER: usize = 8;
/// Largest frame content taken as whole: more is a torn length.
const MAX_FRAME: u32 = 1 << 30;

/// The two log files earlier builds kept beside the database at `db`.
pub(super) fn paths_of(db: &Path) -> [PathBuf; 2] {
    ["-changes", "-changes-2"].map(|suffix| {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    })
}

/// A task's writes found in the log: its latest record, whether it had no row before them, and
/// the status changes its row's history lacks.
struct Pending {
    record: TaskRecord,
    new: bool,
    transitions: Vec<Transition>,
}

/// Writes as rows what the log of an earlier build holds beyond its rows, then removes the log's
/// files. `conn` is the writer's connection, its schema current. Nothing to do, and no file made,
/// when there is no log.
pub(super) fn replay(db: &Path, conn: &mut Connection) -> Result<(), StoreError> {
    let paths = paths_of(db);
    let mut contents = Vec::new();
    for path in &paths {
        match std::fs::read(path) {
            Ok(bytes) => contents.push((path, bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(StoreError::backend(
                    format!(
                        "read the change log {} an earlier build left",
                        path.display()
                    ),
                    e,
                ))
            }
        }
    }
    if contents.is_empty() {
        return Ok(());
    }
    let flushed = flushed_seq(conn)?;
    let mut entries = Vec::new();
    for (path, bytes) in &contents {
        for entry in frames(bytes) {
            let entry = entry.with_context(|| {
                format!(
                    "replay the change log {} an earlier build left",
                    path.display()
                )
            })?;
            // At or below it: written as rows by a flush whose start over of the file did not
            // follow.
            if entry.seq > flushed {
                entries.push(entry);
            }
        }
    }
    entries.sort_by_key(|e| e.seq);
    let last = entries.last().map_or(flushed, |e| e.seq);
    // By task, in the order first seen: each task's writes folded into one row write.
    let mut order: Vec<String> = Vec::new();
    let mut pending: HashMap<String, Pending> = HashMap::new();
    for Entry {
        record,
        new,
        transitions,
        ..
    } in entries
    {
        match pending.get_mut(&record.id) {
            Some(p) => {
                p.record = record;
                p.new |= new;
                p.transitions.extend(transitions);
            }
            None => {
                order.push(record.id.clone());
                pending.insert(
                    record.id.clone(),
                    Pending {
                        record,
                        new,
                        transitions,
                    },
                );
            }
        }
    }
    if !pending.is_empty() {
        let n = pending.len();
        let tx = conn
            .transaction()
            .context("begin replaying an earlier build's change log")?;
        {
            let mut insert = tx
                .prepare(rows::INSERT_TASK)
                .context("prepare the replay")?;
            let mut update = tx
                .prepare(rows::UPDATE_TASK)
                .context("prepare the replay")?;
            for id in &order {
                let p = &pending[id];
                let history = if p.transitions.is_empty() {
                    None
                } else {
                    Some(rows::transitions_text(&p.transitions)?)
                };
                if p.new {
                    rows::insert_task(&mut insert, &p.record, history.as_deref())?;
                } else {
                    rows::update_row(&mut update, &p.record, history.as_deref())?;
                }
            }
            tx.execute(
                "UPDATE change_log SET flushed_seq = ?1",
                params![rows::sql_int(last)],
            )
            .context("record how far the change log is written as rows")?;
        }
        tx.commit().with_context(|| {
            format!("commit {n} tasks replayed from an earlier build's change log")
        })?;
        tracing::info!(
            tasks = n,
            log = %paths[0].display(),
            "wrote the tasks an earlier build left in its change log as rows"
        );
    }
    // Only once their frames are rows (or were): a crash before this replays them again, and the
    // recorded number skips what is done.
    for (path, _) in &contents {
        // Written as rows and recorded: a file left behind is replayed as nothing at every open.
        if let Err(e) = std::fs::remove_file(path) {
            tracing::warn!(
                error = %e,
                log = %path.display(),
                "could not remove the change log an earlier build left (its writes are rows now)"
            );
        }
    }
    Ok(())
}

/// The log's last sequence number the rows hold.
fn flushed_seq(conn: &Connection) -> Result<u64, StoreError> {
    let n: i64 = conn
        .query_row("SELECT flushed_seq FROM change_log", [], |r| r.get(0))
        .context("read how far the change log is written as rows")?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// The frames in `bytes`, up to the first torn or damaged one (the end of what a crash let be
/// written). A frame that is whole and checks out but does not parse is an error: the file is not
/// a log a build of ours wrote.
fn frames(bytes: &[u8]) -> Vec<Result<Entry, FrameError>> {
    let mut at = 0usize;
    let mut out = Vec::new();
    while let Some(header) = bytes.get(at..at + HEADER) {
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        // A zero length is where nothing was written yet (or zeros a file system left).
        if len == 0 || len > MAX_FRAME {
            break;
        }
        let Some(content) = bytes.get(at + HEADER..at + HEADER + len as usize) else {
            break;
        };
        if crc32fast::hash(content) != crc {
            break;
        }
        at += HEADER + len as usize;
        out.push(frame::decode(content));
    }
    out
}

/// Writes frames as an earlier build did, for tests.
#[cfg(test)]
pub(super) fn append_frames(
    path: &Path,
    from_seq: u64,
    frames: &[(&TaskRecord, bool, &[Transition])],
) -> u64 {
    use std::io::Write;
    let mut buf = Vec::new();
    let mut seq = from_seq;
    for (record, new, transitions) in frames {
        seq += 1;
        let at = buf.len();
        buf.extend_from_slice(&[0; HEADER]);
        frame::encode(&mut buf, seq, *new, transitions, record).unwrap();
        let content = &buf[at + HEADER..];
        let len = u32::try_from(content.len()).unwrap();
        let crc = crc32fast::hash(content);
        buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
        buf[at + 4..at + HEADER].copy_from_slice(&crc.to_le_bytes());
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap()
        .write_all(&buf)
        .unwrap();
    seq
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TaskStatus;
    use crate::store::testkit::record;

    /// A migrated database at `dir`, as an earlier build left it (its log files are the test's).
    fn migrated(dir: &Path) -> (PathBuf, Connection) {
        let path = dir.join("log.db");
        let mut conn = Connection::open(&path).unwrap();
        super::super::schema::migrate(&mut conn, &path).unwrap();
        (path, conn)
    }

    fn statuses(conn: &Connection) -> Vec<(String, String)> {
        conn.prepare("SELECT id, status FROM tasks ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    fn finished(mut t: TaskRecord) -> (TaskRecord, Transition) {
        t.status = TaskStatus::Completed;
        t.updated_at = 5;
        let finish = Transition {
            at: 5,
            status: TaskStatus::Completed,
            message: None,
        };
        (t, finish)
    }

    #[test]
    fn no_log_means_nothing_to_do_and_no_file_made() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut conn) = migrated(dir.path());
        replay(&path, &mut conn).unwrap();
        for p in paths_of(&path) {
            assert!(!p.exists(), "{} was made", p.display());
        }
    }

    #[test]
    fn frames_above_the_flushed_number_become_rows_in_numbered_order_and_the_files_go() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut conn) = migrated(dir.path());
        let [first, second] = paths_of(&path);
        // Frame 1 was flushed (its row exists); frames 2 and 3 were not. Task b's create is in the
        // second file and its finish in the first, numbered after it: by file, the finish would
        // come first and the create would put the task back to working.
        let a = record("a", "o", 1);
        rows::insert_task(&mut conn.prepare(rows::INSERT_TASK).unwrap(), &a, None).unwrap();
        conn.execute("UPDATE change_log SET flushed_seq = 1", [])
            .unwrap();
        append_frames(&first, 0, &[(&a, true, &[])]);
        let b = record("b", "o", 2);
        append_frames(&second, 1, &[(&b, true, &[])]);
        let (b_done, finish) = finished(b);
        append_frames(
            &first,
            2,
            &[(&b_done, false, std::slice::from_ref(&finish))],
        );
        replay(&path, &mut conn).unwrap();
        assert_eq!(
            statuses(&conn),
            [
                ("a".into(), "working".into()),
                ("b".into(), "completed".into())
            ]
        );
        let history: String = conn
            .query_row("SELECT history FROM tasks WHERE id = 'b'", [], |r| r.get(0))
            .unwrap();
        assert_eq!(history, r#"[{"at":5,"status":"completed","message":null}]"#);
        assert!(!first.exists() && !second.exists(), "the log's files stay");
        // A second open finds nothing to do.
        replay(&path, &mut conn).unwrap();
        assert_eq!(statuses(&conn).len(), 2);
    }

    #[test]
    fn a_torn_last_frame_is_dropped_and_the_frames_before_it_are_replayed() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut conn) = migrated(dir.path());
        let [first, _] = paths_of(&path);
        append_frames(&first, 0, &[(&record("t1", "o", 1), true, &[])]);
        let whole = std::fs::metadata(&first).unwrap().len();
        append_frames(&first, 1, &[(&record("t2", "o", 2), true, &[])]);
        // A crash in the middle of the second append: its last bytes never reached the disk.
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&first)
            .unwrap();
        f.set_len(whole + 20).unwrap();
        drop(f);
        replay(&path, &mut conn).unwrap();
        assert_eq!(statuses(&conn), [("t1".into(), "working".into())]);
        assert!(!first.exists());
    }

    #[test]
    fn a_frame_that_checks_out_but_does_not_parse_stops_the_open_and_keeps_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut conn) = migrated(dir.path());
        let [first, _] = paths_of(&path);
        // A whole frame of an unknown format.
        let content = [9u8; 12];
        let mut bytes = (content.len() as u32).to_le_bytes().to_vec();
        bytes.extend_from_slice(&crc32fast::hash(&content).to_le_bytes());
        bytes.extend_from_slice(&content);
        std::fs::write(&first, &bytes).unwrap();
        let e = replay(&path, &mut conn).unwrap_err().to_string();
        assert!(e.contains("replay the change log"), "{e}");
        assert!(first.exists(), "the log was removed unread");
    }
}
