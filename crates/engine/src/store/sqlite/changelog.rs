//! The change log: task writes made durable by one append and one sync, written as rows later.
//!
//! A durable create used to be an insert into `tasks` and its indexes, and its finish an update of
//! three indexed columns, each committed through the WAL: about ten page frames and their
//! checksums per task, most of the writer's work (issue 30). Instead the writer appends each
//! group's task writes to a file beside the database (`<file>-changes`), one frame per task, and
//! syncs it once; that is the commit the callers wait for. The rows follow in a later transaction
//! (a *flush*), one statement per task whatever it went through meanwhile: a task created and
//! finished between two flushes costs one insert of its final state.
//!
//! Until its flush a logged task is *pending*: its record is pinned in the record cache (readers
//! by id find it there) and the writer holds it here. Whatever reads task rows first flushes (the
//! writer's own jobs through [`Tx::conn`](super::cache::Tx::conn), readers through
//! `SqliteStore::flushed`), so no reader of rows sees them behind the log.
//!
//! Flushes run on a thread of their own (`flusher.rs`), so the log is two files, `<file>-changes`
//! and `<file>-changes-2`: the writer appends to one while the other's tasks are written as rows.
//! The flush's transaction also records the log's highest sequence number it covers
//! (`change_log.flushed_seq`), and only then does the file start over. Opening the store replays
//! the frames of both files above that number, in the order they were numbered, so a crash
//! between the log's sync and the flush, or between the flush's commit and the start over, loses
//! nothing and applies nothing twice. A frame is its
//! length, a CRC-32 of its content, and the content (`frame.rs`): a torn last frame (a crash in the
//! middle of an append nobody was answered for) ends the replay there.

use rusqlite::{params, Connection, Statement};
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::cache::{IdMap, RecordCache};
use super::flusher::{Batch, Done, Flusher};
use super::frame::{self, Entry, FrameError};
use super::rows;
use super::Context;
use crate::model::{TaskRecord, Transition};
use crate::store::StoreError;

/// Pending tasks past which the writer flushes after answering a group: bounds what a flush takes
/// (its time holds up the next group), what the cache pins and what a restart replays.
pub(super) const FLUSH_TASKS: usize = 64;
/// Log bytes past which the writer flushes, whatever the count: large results.
pub(super) const FLUSH_BYTES: u64 = 16 << 20;
/// Pending tasks past which, while a batch is in flight, the writer waits for it before it logs
/// more.
pub(super) const MAX_PENDING: usize = 16 * FLUSH_TASKS;
/// How long a pending task may wait for its row at most (give or take a flush), so that rows read
/// by other processes (an operator's `sqlite3`) lag little.
pub(super) const IDLE_FLUSH: std::time::Duration = std::time::Duration::from_millis(200);

/// Bytes of a frame's header: the content's length and its CRC-32, little-endian.
const HEADER: usize = 8;
/// Largest frame content a replay accepts: more is taken for a torn length.
const MAX_FRAME: u32 = 1 << 30;

/// The two log files of the database at `db`: `<file>-changes` and `<file>-changes-2`. The writer
/// appends to one while the flusher writes the other's tasks as rows (`flusher.rs`).
pub(super) fn paths_of(db: &Path) -> [PathBuf; 2] {
    ["-changes", "-changes-2"].map(|suffix| {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    })
}

/// A task whose row is behind: its latest record, whether it has a row at all, and the status
/// changes its row's history lacks.
#[derive(Clone, Debug)]
pub(super) struct Pending {
    pub record: Arc<TaskRecord>,
    pub new: bool,
    pub transitions: Vec<Transition>,
}

impl Pending {
    /// Adds `later` (the same task's writes in a later group) on top of this.
    pub(super) fn then(&mut self, later: Pending) {
        self.record = later.record;
        self.new |= later.new;
        self.transitions.extend(later.transitions);
    }
}

impl From<Entry> for Pending {
    fn from(entry: Entry) -> Pending {
        Pending {
            record: Arc::new(entry.record),
            new: entry.new,
            transitions: entry.transitions,
        }
    }
}

/// Takes `later` into `pending`, on top of what it holds of the same task.
fn merge(pending: &mut IdMap<Pending>, later: Pending) {
    match pending.get_mut(&later.record.id) {
        Some(earlier) => earlier.then(later),
        None => {
            pending.insert(later.record.id.clone(), later);
        }
    }
}

/// One of the two log files.
struct LogFile {
    file: File,
    path: PathBuf,
    /// Where the next frame goes: the bytes of frames appended since the file last started over.
    len: u64,
    /// Set when an append failed: the file may end in a partial frame, so nothing more is appended
    /// to it until it is emptied (every write goes to rows meanwhile).
    broken: bool,
}

impl LogFile {
    /// Opens the file at `path` and reads what it holds.
    fn open(path: PathBuf) -> Result<(LogFile, Vec<u8>), StoreError> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("open the change log {}", path.display()))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .with_context(|| format!("read the change log {}", path.display()))?;
        let f = LogFile {
            file,
            path,
            len: 0,
            broken: false,
        };
        Ok((f, bytes))
    }

    /// Starts the file over (see [`ChangeLog::empty`]).
    fn empty(&mut self) -> Result<(), StoreError> {
        if self.broken {
            // The file may end in a partial frame: cut it, so that nothing follows it.
            self.file
                .set_len(0)
                .with_context(|| format!("empty the change log {}", self.path.display()))?;
            self.broken = false;
        }
        self.len = 0;
        Ok(())
    }
}

/// What [`ChangeLog::hand_off`] did.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum HandOff {
    /// The pending tasks went to the flusher.
    Handed,
    /// A batch is in flight: the pending tasks wait for the next hand-off.
    Busy,
    /// There is no flusher, or a batch failed and the writer writes what is pending itself.
    Unable,
}

/// The open log files and what they hold that the rows do not.
pub(super) struct ChangeLog {
    files: [LogFile; 2],
    /// The file appends go to.
    current: usize,
    /// The sequence number of the last frame appended.
    seq: u64,
    /// The pending tasks not handed to the flusher, by id.
    pub(super) pending: IdMap<Pending>,
    /// The flusher, once started (the writer writes every flush itself without one).
    flusher: Option<Flusher>,
    /// The file holding the frames of the batch in flight, and the last sequence number it covers.
    in_flight: Option<(usize, u64)>,
    /// The last sequence number the rows are known to cover (what `change_log.flushed_seq` says).
    flushed_to: u64,
    /// A batch came back unwritten: no more hand-offs until the writer has written every pending
    /// task itself (which empties both files).
    refused: bool,
    /// A lost batch could not be read back: its frames are only in its file, so no flush is made
    /// until a restart replays them.
    unread: bool,
    /// The writer was asked to hand the pending tasks over after this group (an idle flush).
    pub(super) flush_soon: bool,
    /// Tests: the writer neither flushes when idle nor when it closes, as if the process died.
    #[cfg(test)]
    pub(super) crash: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl ChangeLog {
    /// Opens the log of `db` (connected as `conn`, whose schema is current), writes as rows what a
    /// previous run logged and did not flush, and empties it.
    pub(super) fn open(db: &Path, conn: &mut Connection) -> Result<ChangeLog, StoreError> {
        let [first, second] = paths_of(db);
        let (first, first_bytes) = LogFile::open(first)?;
        let (second, second_bytes) = LogFile::open(second)?;
        // A file just made is found again after a power loss only once its folder is synced: a
        // synced frame in a file whose name was lost would be lost with it.
        let dir = db
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        File::open(dir)
            .and_then(|d| d.sync_all())
            .with_context(|| format!("sync the folder {}", dir.display()))?;
        let flushed = flushed_seq(conn)?;
        let mut pending: IdMap<Pending> = IdMap::default();
        let mut seq = flushed;
        // Each file's frames end at its first torn one: the last append, if a crash cut it, which
        // nobody was told had succeeded (none follows a failed one), or the older frames the last
        // start over left behind, all of them written as rows already. The two files' frames are
        // replayed in the order they were numbered: a task handed to the flusher may have later
        // frames in the other file.
        let mut entries = Vec::new();
        for (file, bytes) in [(&first, &first_bytes), (&second, &second_bytes)] {
            for entry in frames(bytes) {
                let entry = entry
                    .with_context(|| format!("replay the change log {}", file.path.display()))?;
                if entry.seq > flushed {
                    entries.push(entry);
                }
                // Else written as rows by a flush whose commit the file's start over did not
                // follow.
            }
        }
        entries.sort_by_key(|e| e.seq);
        for entry in entries {
            seq = seq.max(entry.seq);
            merge(&mut pending, entry.into());
        }
        let mut log = ChangeLog {
            files: [first, second],
            current: 0,
            seq,
            pending,
            flusher: None,
            in_flight: None,
            flushed_to: flushed,
            refused: false,
            unread: false,
            flush_soon: false,
            #[cfg(test)]
            crash: Default::default(),
        };
        if !log.pending.is_empty() {
            let n = log.pending.len();
            let tx = conn.transaction().with_context(|| {
                format!(
                    "begin replaying the change log {}",
                    log.files[0].path.display()
                )
            })?;
            {
                let mut insert = tx
                    .prepare(rows::INSERT_TASK)
                    .context("prepare the replay")?;
                let mut update = tx
                    .prepare(rows::UPDATE_TASK)
                    .context("prepare the replay")?;
                log.write_rows(&tx, &mut insert, &mut update)?;
            }
            tx.commit().with_context(|| {
                format!(
                    "commit {n} tasks replayed from the change log {}",
                    log.files[0].path.display()
                )
            })?;
            tracing::info!(tasks = n, log = %log.files[0].path.display(), "replayed the change log");
            log.flushed();
        }
        log.empty()?;
        Ok(log)
    }

    /// Starts writing flushes on a thread of their own, on `conn` (see `flusher.rs`).
    pub(super) fn start_flusher(&mut self, flusher: Flusher) {
        self.flusher = Some(flusher);
    }

    /// Stops the flusher, closing its connection; flushes from here are the writer's.
    pub(super) fn stop_flusher(&mut self) {
        debug_assert!(self.in_flight.is_none());
        self.flusher = None;
    }

    /// Whether a batch is in flight: the rows lack its tasks until [`ChangeLog::settle`].
    pub(super) fn flushing(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Whether the pending tasks are due to be written as rows: past the count or the bytes of a
    /// flush, or asked for by an idle flush.
    pub(super) fn due(&mut self) -> bool {
        let soon = std::mem::take(&mut self.flush_soon);
        !self.pending.is_empty()
            && (soon || self.pending.len() >= FLUSH_TASKS || self.len() >= FLUSH_BYTES)
    }

    /// Whether so much is pending while a batch is in flight that the writer waits for it rather
    /// than log more (what the cache pins and a restart replays stays bounded).
    pub(super) fn overdue(&self) -> bool {
        self.pending.len() >= MAX_PENDING || self.len() >= 2 * FLUSH_BYTES
    }

    /// Hands every pending task to the flusher, if there is one and no batch is in flight; appends
    /// go to the other file from here.
    pub(super) fn hand_off(&mut self) -> HandOff {
        let Some(flusher) = &self.flusher else {
            return HandOff::Unable;
        };
        if self.in_flight.is_some() {
            return HandOff::Busy;
        }
        let other = 1 - self.current;
        // The other file is empty unless a batch failed (then `refused` is set too); the pending
        // tasks' frames are all in the current one.
        if self.refused
            || self.files[self.current].broken
            || self.files[other].broken
            || self.files[other].len != 0
        {
            return HandOff::Unable;
        }
        let batch = Batch {
            pending: std::mem::take(&mut self.pending),
            seq: self.seq,
        };
        match flusher.send(batch) {
            Ok(()) => {
                self.in_flight = Some((self.current, self.seq));
                self.current = other;
                HandOff::Handed
            }
            Err(batch) => {
                tracing::error!("the SQLite flusher thread has stopped; the writer flushes itself");
                self.pending = batch.pending;
                self.flusher = None;
                HandOff::Unable
            }
        }
    }

    /// Takes in how the batch in flight ended, if it did (waiting for it if `wait`): its tasks'
    /// rows are committed, so the file that held their frames starts over and their records are
    /// unpinned, but for those logged again since; or it failed, and its tasks are pending again.
    pub(super) fn reap(&mut self, cache: &RecordCache, wait: bool) {
        let Some((file, upto)) = self.in_flight else {
            return;
        };
        let Some(done) = self.flusher.as_ref().and_then(|f| f.answer(wait)) else {
            return;
        };
        self.in_flight = None;
        let batch = match done {
            Done::Written(ids) => {
                // The batch's commit covers every frame of the file: none was appended after it.
                self.files[file].len = 0;
                self.flushed_to = upto;
                let pending = &self.pending;
                cache.unpin(ids, |id| pending.contains_key(id));
                return;
            }
            Done::NotWritten(batch, error) => {
                if let Some(e) = error {
                    tracing::error!(
                        error = %crate::store::error_chain(&e),
                        tasks = batch.pending.len(),
                        "writing the change log as rows failed; the writer writes them itself"
                    );
                }
                batch.pending
            }
            Done::Lost => {
                // The thread is gone and the batch with it; its frames are still in the file.
                self.flusher = None;
                match self.read_back(file, upto) {
                    Ok(pending) => {
                        tracing::error!(
                            tasks = pending.len(),
                            "the SQLite flusher thread stopped; the writer read its batch back \
                             from the change log and writes every flush itself from here"
                        );
                        pending
                    }
                    Err(e) => {
                        // Left in the file. No flush may record a number past its frames (the
                        // file would start over and a replay would skip them), so none is made
                        // from here: the next open replays them.
                        tracing::error!(
                            error = %crate::store::error_chain(&e),
                            "the SQLite flusher thread stopped and its batch could not be read \
                             back; no task is written as a row until a restart replays the log"
                        );
                        self.unread = true;
                        return;
                    }
                }
            }
        };
        // Its tasks are older than what is pending now: theirs go under the later writes.
        let mut older = batch;
        for later in std::mem::take(&mut self.pending).into_values() {
            merge(&mut older, later);
        }
        self.pending = older;
        self.refused = true;
    }

    /// The pending tasks of a batch read back from the frames of `file` numbered from
    /// [`ChangeLog::flushed_to`] to `upto`.
    fn read_back(&self, file: usize, upto: u64) -> Result<IdMap<Pending>, StoreError> {
        let f = &self.files[file];
        let mut bytes = vec![0u8; f.len as usize];
        f.file
            .read_exact_at(&mut bytes, 0)
            .with_context(|| format!("read the change log {} back", f.path.display()))?;
        let mut pending: IdMap<Pending> = IdMap::default();
        for entry in frames(&bytes) {
            let entry =
                entry.with_context(|| format!("read the change log {} back", f.path.display()))?;
            if entry.seq > self.flushed_to && entry.seq <= upto {
                merge(&mut pending, entry.into());
            }
        }
        Ok(pending)
    }

    /// Waits for the batch in flight, if any, and takes in how it ended: from here the rows hold
    /// every task but the pending ones, and the writer's connection may write.
    pub(super) fn settle(&mut self, cache: &RecordCache) {
        self.reap(cache, true);
    }

    /// Tests: whether the writer is to behave as if the process died.
    #[cfg(test)]
    pub(super) fn crashed(&self) -> bool {
        self.crash.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Whether the writer is to behave as if the process died: never, but in tests.
    #[cfg(not(test))]
    pub(super) fn crashed(&self) -> bool {
        false
    }

    /// Whether writes may go to the log now.
    pub(super) fn usable(&self) -> bool {
        !self.files[self.current].broken
    }

    /// Bytes the file appends go to holds.
    pub(super) fn len(&self) -> u64 {
        self.files[self.current].len
    }

    /// Writes every pending task as its row, through the writer's statements, inside the caller's
    /// transaction, and records in it that the log is written up to its last frame. The tasks stay
    /// pending until [`ChangeLog::flushed`] (the transaction may still roll back).
    pub(super) fn write_rows(
        &self,
        conn: &Connection,
        insert: &mut Statement<'_>,
        update: &mut Statement<'_>,
    ) -> Result<(), StoreError> {
        write_pending(conn, insert, update, &self.pending, self.seq)
    }

    /// Fails once a lost batch could not be read back: until a restart replays its frames the rows
    /// lack its tasks, and no flush may record a number past them.
    pub(super) fn rows_can_be_current(&self) -> Result<(), StoreError> {
        if self.unread {
            return Err(StoreError::message(
                "a batch of the change log could not be read back after the flusher thread \
                 stopped; tasks are written as rows again once a restart replays the log",
            ));
        }
        Ok(())
    }

    /// The transaction holding [`ChangeLog::write_rows`] committed: nothing is pending. Returns
    /// the tasks that were.
    pub(super) fn flushed(&mut self) -> IdMap<Pending> {
        self.flushed_to = self.seq;
        std::mem::take(&mut self.pending)
    }

    /// Starts the log over once what it holds is written as rows: the next frame is written at the
    /// start of the current file, over the old ones, and the other file is empty too. The files are
    /// not truncated: an append that grows a file makes its sync write the file's size too, a
    /// journal commit of the file system's own, where an append into blocks the file already has
    /// syncs only the data. Frames left behind the new ones are at or below the recorded number,
    /// so a replay skips them; a torn or zeroed frame ends it.
    pub(super) fn empty(&mut self) -> Result<(), StoreError> {
        debug_assert!(self.pending.is_empty() && self.in_flight.is_none());
        // Both files, whatever one of them says: a file left broken keeps hand-offs off (see
        // [`ChangeLog::hand_off`]) until a later flush empties it.
        let [first, second] = &mut self.files;
        let (a, b) = (first.empty(), second.empty());
        a.and(b)?;
        self.refused = false;
        Ok(())
    }

    /// Appends one frame per task in `group` (each task's writes in one group, with whether it was
    /// new and the status changes it made) and syncs the file: once this returns `Ok`, the writes
    /// survive a crash. On `Err` nothing in `group` may be taken as written.
    pub(super) fn append(
        &mut self,
        group: &[(&TaskRecord, bool, &[Transition])],
    ) -> Result<(), StoreError> {
        let mut buf = Vec::with_capacity(group.len() * 1024);
        let mut seq = self.seq;
        for (record, new, transitions) in group {
            seq += 1;
            let at = buf.len();
            buf.extend_from_slice(&[0; HEADER]);
            frame::encode(&mut buf, seq, *new, transitions, record)
                .with_context(|| format!("encode task {} for the change log", record.id))?;
            let content = &buf[at + HEADER..];
            let len = u32::try_from(content.len())
                .ok()
                .filter(|n| *n <= MAX_FRAME)
                .ok_or_else(|| {
                    StoreError::message(format!("task {} is too large to log", record.id))
                })?;
            let crc = crc32fast::hash(content);
            buf[at..at + 4].copy_from_slice(&len.to_le_bytes());
            buf[at + 4..at + HEADER].copy_from_slice(&crc.to_le_bytes());
        }
        let f = &mut self.files[self.current];
        let written = f
            .file
            .write_all_at(&buf, f.len)
            .and_then(|()| f.file.sync_data());
        if let Err(e) = written {
            f.broken = true;
            return Err(StoreError::backend(
                format!("append to the change log {}", f.path.display()),
                e,
            ));
        }
        f.len += buf.len() as u64;
        self.seq = seq;
        Ok(())
    }

    /// Takes in a group's writes that [`ChangeLog::append`] made durable.
    pub(super) fn add(&mut self, p: Pending) {
        merge(&mut self.pending, p);
    }
}

/// Writes `pending` as rows through `insert` and `update`, inside the caller's transaction, and
/// records in it that the rows cover the log up to frame `seq` (the writer's flush and the
/// flusher's batch alike).
pub(super) fn write_pending(
    conn: &Connection,
    insert: &mut Statement<'_>,
    update: &mut Statement<'_>,
    pending: &IdMap<Pending>,
    seq: u64,
) -> Result<(), StoreError> {
    for p in pending.values() {
        write_row(insert, update, &p.record, p.new, &p.transitions)?;
    }
    conn.prepare_cached("UPDATE change_log SET flushed_seq = ?1")
        .and_then(|mut s| s.execute(params![rows::sql_int(seq)]))
        .context("record how far the change log is written as rows")?;
    Ok(())
}

/// Writes a task whose row is behind: its insert if it has none yet (`new`), else the update to
/// `record`, with the status changes its history lacks.
pub(super) fn write_row(
    insert: &mut Statement<'_>,
    update: &mut Statement<'_>,
    record: &TaskRecord,
    new: bool,
    transitions: &[Transition],
) -> Result<(), StoreError> {
    let history = if transitions.is_empty() {
        None
    } else {
        Some(rows::transitions_text(transitions)?)
    };
    if new {
        rows::insert_task(insert, record, history.as_deref())
    } else {
        rows::update_row(update, record, history.as_deref())
    }
}

/// The log's last sequence number the rows hold.
pub(super) fn flushed_seq(conn: &Connection) -> Result<u64, StoreError> {
    let n: i64 = conn
        .query_row("SELECT flushed_seq FROM change_log", [], |r| r.get(0))
        .context("read how far the change log is written as rows")?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// The frames in `bytes`, up to the first torn or damaged one (the end of what a crash let be
/// written). A frame that is whole and checks out but does not parse is an error: the file is not
/// a log this build wrote.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TaskStatus;

    /// A migrated database at `dir` and its log, opened as a store would.
    fn open(dir: &Path) -> (Connection, ChangeLog) {
        let path = dir.join("log.db");
        let mut conn = Connection::open(&path).unwrap();
        super::super::schema::migrate(&mut conn, &path).unwrap();
        let log = ChangeLog::open(&path, &mut conn).unwrap();
        (conn, log)
    }

    fn statuses(conn: &Connection) -> Vec<(String, String)> {
        conn.prepare("SELECT id, status FROM tasks ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    fn append_new(log: &mut ChangeLog, t: &TaskRecord) {
        log.append(&[(t, true, &[])]).unwrap();
        log.add(Pending {
            record: Arc::new(t.clone()),
            new: true,
            transitions: Vec::new(),
        });
    }

    /// Logs `t` completed at 5, with that status change.
    fn append_finish(log: &mut ChangeLog, t: &mut TaskRecord) {
        t.status = TaskStatus::Completed;
        t.updated_at = 5;
        let finish = Transition {
            at: 5,
            status: TaskStatus::Completed,
            message: None,
        };
        log.append(&[(t, false, std::slice::from_ref(&finish))])
            .unwrap();
        log.add(Pending {
            record: Arc::new(t.clone()),
            new: false,
            transitions: vec![finish],
        });
    }

    #[test]
    fn a_torn_last_frame_is_dropped_and_the_frames_before_it_are_replayed() {
        let dir = tempfile::tempdir().unwrap();
        let (conn, mut log) = open(dir.path());
        append_new(&mut log, &crate::store::testkit::record("t1", "o", 1));
        let whole = log.len();
        append_new(&mut log, &crate::store::testkit::record("t2", "o", 2));
        drop((conn, log));
        // A crash in the middle of the second append: its last bytes never reached the disk.
        let [file, _] = paths_of(&dir.path().join("log.db"));
        let f = OpenOptions::new().write(true).open(&file).unwrap();
        f.set_len(whole + 20).unwrap();
        drop(f);
        let (conn, log) = open(dir.path());
        assert_eq!(statuses(&conn), [("t1".into(), "working".into())]);
        assert_eq!(log.len(), 0, "emptied once replayed");
        assert!(log.usable());
    }

    #[test]
    fn frames_a_committed_flush_wrote_are_not_replayed_again() {
        let dir = tempfile::tempdir().unwrap();
        let (mut conn, mut log) = open(dir.path());
        let mut t = crate::store::testkit::record("t1", "o", 1);
        append_new(&mut log, &t);
        append_finish(&mut log, &mut t);
        // Flushed and committed, but the process dies before the file is emptied.
        let tx = conn.transaction().unwrap();
        {
            let mut insert = tx.prepare(rows::INSERT_TASK).unwrap();
            let mut update = tx.prepare(rows::UPDATE_TASK).unwrap();
            log.write_rows(&tx, &mut insert, &mut update).unwrap();
        }
        tx.commit().unwrap();
        assert_eq!(log.flushed().len(), 1, "coalesced into one task");
        assert!(log.len() > 0);
        drop((conn, log));
        // A replay of those frames would insert t1 a second time and fail.
        let (conn, mut log) = open(dir.path());
        assert_eq!(statuses(&conn), [("t1".into(), "completed".into())]);
        let history: String = conn
            .query_row("SELECT history FROM tasks WHERE id = 't1'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(history, r#"[{"at":5,"status":"completed","message":null}]"#);
        // Numbering goes on above the flushed frames: a later frame is not taken for one of them.
        append_new(&mut log, &crate::store::testkit::record("t2", "o", 2));
        drop((conn, log));
        let (conn, _log) = open(dir.path());
        assert_eq!(statuses(&conn).len(), 2);
    }

    #[test]
    fn a_replay_takes_both_files_frames_in_the_order_they_were_numbered() {
        use super::super::flusher::{Flusher, Hooks};
        let dir = tempfile::tempdir().unwrap();
        let (conn, mut log) = open(dir.path());
        let hooks = Hooks::default();
        let rows = Connection::open(dir.path().join("log.db")).unwrap();
        log.start_flusher(Flusher::start(rows, hooks.clone()).unwrap());
        let cache = RecordCache::default();
        // A first batch through the first file: from here appends go to the second.
        append_new(&mut log, &crate::store::testkit::record("a", "o", 1));
        assert_eq!(log.hand_off(), HandOff::Handed);
        log.settle(&cache);
        assert!(!log.flushing());
        // The second file's batch is held; the finish of its task goes to the first file, over
        // the first batch's frame.
        let held = hooks.gate.hold();
        let mut t = crate::store::testkit::record("b", "o", 2);
        append_new(&mut log, &t);
        assert_eq!(log.hand_off(), HandOff::Handed);
        append_finish(&mut log, &mut t);
        // The process dies: the held batch is never written.
        hooks.crash.store(true, std::sync::atomic::Ordering::SeqCst);
        drop(held);
        log.settle(&cache);
        drop((conn, log));
        let (conn, _log) = open(dir.path());
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
    }
}
