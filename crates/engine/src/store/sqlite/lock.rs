//! The database file's claim by one process.
//!
//! The SQLite store is exclusive: at start-up it takes every unfinished task as orphaned by a run
//! that is gone, and it keeps the records it wrote lately in memory (`cache.rs`). A second server
//! on the same file would run the first one's tasks again and answer from records the other one
//! changed, so the second open is refused. The claim is an advisory lock on a file beside the
//! database (`<file>.lock`, not the database itself: SQLite's own locks are POSIX record locks, and
//! some network file systems emulate whole-file locks with those). The operating system lets go of
//! it when the process ends, kill -9 included, so a crash leaves nothing to clean up.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

use super::Context;
use crate::store::StoreError;

/// The lock file of the database at `db`.
pub(super) fn path_of(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Claims the database at `db` for this process; the claim lasts as long as the returned file is
/// open.
pub(super) fn claim(db: &Path) -> Result<File, StoreError> {
    let path = path_of(db);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("open the lock file {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(StoreError::message(format!(
            "the task store {} is in use by another process (another `mcp-tasks serve`?): a \
             SQLite store serves one process at a time; stop the other one, or use PostgreSQL \
             for several servers on one store",
            db.display()
        ))),
        Err(TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("lock {} for this process", path.display()))
        }
    }
}
