//! How many unfinished tasks each owner has, per session, kept by the writer: what the limit on
//! unfinished tasks checks at a create.
//!
//! Counting rows at each create read up to `max` index entries, so creating n unfinished tasks of
//! an owner whose limit is high read about n²/2 of them (100,000 tasks took 17 minutes). The writer
//! is the database's only writer and every task write goes through [`Tx`](super::cache::Tx), so it
//! can keep the counts instead, as it keeps the records (`cache.rs`). Triggers could keep them too,
//! but a trigger doubles what each task statement costs (measured; see `docs/bench/history.md`).
//!
//! An owner's counts are read from the rows the first time a limit of theirs is checked and kept up
//! to date from then on. Whatever makes them uncertain forgets them, and the next check reads the
//! rows again:
//!
//! - a job failed: its own changes are undone, and an owner first read during the job is
//!   forgotten (the read may have seen the job's writes);
//! - a transaction rolled back (a failed commit, or a job that failed after it had written): every
//!   owner is forgotten.
//!
//! A purge deletes finished tasks only, so it leaves the counts as they are.

use rusqlite::{params, Connection};
use std::collections::{BTreeMap, HashMap};

use super::Context;
use crate::model::{Among, TaskStatus};
use crate::store::StoreError;

/// The unfinished tasks of one owner.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct OwnerCounts {
    /// All of them.
    all: usize,
    /// Those with a session, by session; a session with none has no entry. Ordered, so that the
    /// sessions starting with a prefix are one range.
    sessions: BTreeMap<String, usize>,
}

impl OwnerCounts {
    fn add(&mut self, session: Option<&str>, up: bool) {
        self.all = step(self.all, up);
        if let Some(s) = session {
            match self.sessions.get_mut(s) {
                Some(n) => {
                    *n = step(*n, up);
                    if *n == 0 {
                        self.sessions.remove(s);
                    }
                }
                None if up => {
                    self.sessions.insert(s.to_string(), 1);
                }
                // Counts only ever go below what they were read as after a bug; the debug check in
                // `Counts::of` catches that.
                None => {}
            }
        }
    }

    /// Those counted by `among`, up to `max`.
    fn among(&self, among: &Among, max: usize) -> usize {
        match among {
            Among::All => self.all,
            Among::Session(s) => self.sessions.get(s.as_str()).copied().unwrap_or(0),
            Among::SessionsStartingWith(p) => {
                let mut n = 0usize;
                for (_, c) in self
                    .sessions
                    .range::<str, _>((
                        std::ops::Bound::Included(p.as_str()),
                        std::ops::Bound::Unbounded,
                    ))
                    .take_while(|(s, _)| s.starts_with(p.as_str()))
                {
                    n += c;
                    // Enough to decide the limit; the rest of the range need not be walked.
                    if n >= max {
                        break;
                    }
                }
                n
            }
        }
        .min(max)
    }
}

fn step(n: usize, up: bool) -> usize {
    if up {
        n + 1
    } else {
        n.saturating_sub(1)
    }
}

/// One change the current job made to a known owner's counts, kept to undo it.
#[derive(Debug)]
struct Change {
    owner: String,
    session: Option<String>,
    up: bool,
}

/// The counts the writer keeps (see the module note).
#[derive(Debug, Default)]
pub(super) struct Counts {
    /// The owners whose counts are known.
    owners: HashMap<String, OwnerCounts>,
    /// The current job's changes to known owners.
    job: Vec<Change>,
    /// The owners first read during the current job.
    read_in_job: Vec<String>,
}

impl Counts {
    /// Task `owner`/`session` went from `before` (`None`: it did not exist) to `after`.
    pub(super) fn changed(
        &mut self,
        owner: &str,
        session: Option<&str>,
        before: Option<TaskStatus>,
        after: TaskStatus,
    ) {
        let was = before.is_some_and(|s| !s.is_terminal());
        let is = !after.is_terminal();
        if was == is {
            return;
        }
        // An owner not read yet is read whole when it is first needed; nothing to keep before.
        let Some(c) = self.owners.get_mut(owner) else {
            return;
        };
        c.add(session, is);
        self.job.push(Change {
            owner: owner.to_string(),
            session: session.map(str::to_string),
            up: is,
        });
    }

    /// The unfinished tasks `limit` counts, up to its `max`. An owner not kept yet is read from
    /// `conn` (the writer's, inside the current transaction); debug builds check the kept counts
    /// against its rows every time.
    pub(super) fn of(
        &mut self,
        conn: &Connection,
        owner: &str,
        among: &Among,
        max: usize,
    ) -> Result<usize, StoreError> {
        if !self.owners.contains_key(owner) {
            let read = read_owner(conn, owner)?;
            self.owners.insert(owner.to_string(), read);
            self.read_in_job.push(owner.to_string());
        }
        let n = self.owners.get(owner).map_or(0, |c| c.among(among, max));
        #[cfg(debug_assertions)]
        {
            // Every debug build's test run checks the kept counts against the rows.
            let rows = count_rows(conn, owner, among, max)?;
            debug_assert_eq!(
                n, rows,
                "kept count of {owner}'s unfinished tasks {among:?} differs from the rows"
            );
        }
        Ok(n)
    }

    /// The current job succeeded: its changes stand (until the transaction ends).
    pub(super) fn job_succeeded(&mut self) {
        self.job.clear();
        self.read_in_job.clear();
    }

    /// The current job failed: its changes go, and so does what it read (it may have read its
    /// own writes, which are undone).
    pub(super) fn job_failed(&mut self) {
        for c in self.job.drain(..).rev() {
            if let Some(o) = self.owners.get_mut(&c.owner) {
                o.add(c.session.as_deref(), !c.up);
            }
        }
        for owner in self.read_in_job.drain(..) {
            self.owners.remove(&owner);
        }
    }

    /// What the database holds is not known (a rolled back transaction): every owner is read
    /// again when next needed.
    pub(super) fn forget(&mut self) {
        self.owners.clear();
        self.job.clear();
        self.read_in_job.clear();
    }

    /// Owners whose counts are known (for tests).
    #[cfg(test)]
    pub(super) fn known(&self) -> usize {
        self.owners.len()
    }
}

/// Reads `owner`'s unfinished tasks from the rows: one range of the `tasks_unfinished_by_owner`
/// index.
fn read_owner(conn: &Connection, owner: &str) -> Result<OwnerCounts, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT session, COUNT(*) FROM tasks WHERE owner = ?1 \
             AND status IN ('working', 'input_required') GROUP BY session",
        )
        .context("prepare the count of an owner's unfinished tasks")?;
    let rows = stmt
        .query_map(params![owner], |r| {
            Ok((r.get::<_, Option<String>>(0)?, r.get::<_, i64>(1)?))
        })
        .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("count the unfinished tasks of {owner:?}"))?;
    let mut c = OwnerCounts::default();
    for (session, n) in rows {
        let n = usize::try_from(n).unwrap_or(0);
        c.all += n;
        if let Some(s) = session {
            c.sessions.insert(s, n);
        }
    }
    Ok(c)
}

/// Counts the rows `among` names, up to `max`: the check the kept counts replace, run beside them
/// in debug builds.
#[cfg(any(debug_assertions, test))]
fn count_rows(
    conn: &Connection,
    owner: &str,
    among: &Among,
    max: usize,
) -> Result<usize, StoreError> {
    let (filter, from, to) = match among {
        Among::All => ("", None, None),
        Among::Session(s) => ("AND session = ?2", Some(s.clone()), None),
        Among::SessionsStartingWith(p) => match crate::store::prefix_end(p) {
            Some(end) => (
                "AND session >= ?2 AND session < ?3",
                Some(p.clone()),
                Some(end),
            ),
            None => ("AND session >= ?2", Some(p.clone()), None),
        },
    };
    let sql = format!(
        "SELECT COUNT(*) FROM (SELECT 1 FROM tasks WHERE owner = ?1 {filter} \
         AND status IN ('working', 'input_required') LIMIT {max})"
    );
    let n: i64 = conn
        .prepare_cached(&sql)
        .and_then(|mut s| match (&from, &to) {
            (None, _) => s.query_row(params![owner], |r| r.get(0)),
            (Some(f), None) => s.query_row(params![owner, f], |r| r.get(0)),
            (Some(f), Some(t)) => s.query_row(params![owner, f, t], |r| r.get(0)),
        })
        .context("count unfinished tasks")?;
    Ok(usize::try_from(n).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE tasks (id TEXT PRIMARY KEY, owner TEXT, session TEXT, status TEXT);",
        )
        .unwrap();
        conn
    }

    fn put(conn: &Connection, c: &mut Counts, id: &str, owner: &str, session: Option<&str>) {
        conn.execute(
            "INSERT INTO tasks VALUES (?1, ?2, ?3, 'working')",
            params![id, owner, session],
        )
        .unwrap();
        c.changed(owner, session, None, TaskStatus::Working);
    }

    fn finish(conn: &Connection, c: &mut Counts, id: &str) {
        let (owner, session): (String, Option<String>) = conn
            .query_row(
                "SELECT owner, session FROM tasks WHERE id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        conn.execute("UPDATE tasks SET status = 'completed' WHERE id = ?1", [id])
            .unwrap();
        c.changed(
            &owner,
            session.as_deref(),
            Some(TaskStatus::Working),
            TaskStatus::Completed,
        );
    }

    fn all_shapes(conn: &Connection, c: &mut Counts, owner: &str) {
        for among in [
            Among::All,
            Among::Session("a1".into()),
            Among::Session("b".into()),
            Among::SessionsStartingWith("a".into()),
            Among::SessionsStartingWith("".into()),
        ] {
            for max in [1, 2, 100] {
                let kept = c.of(conn, owner, &among, max).unwrap();
                assert_eq!(
                    kept,
                    count_rows(conn, owner, &among, max).unwrap(),
                    "{among:?} {max}"
                );
            }
        }
    }

    #[test]
    fn kept_counts_follow_the_rows_through_finishes_and_rollbacks() {
        let conn = db();
        let mut c = Counts::default();
        // Written before the owner is read: found by the read.
        put(&conn, &mut c, "t1", "o", Some("a1"));
        put(&conn, &mut c, "t2", "o", None);
        c.job_succeeded();
        assert_eq!(c.of(&conn, "o", &Among::All, 100).unwrap(), 2);
        c.job_succeeded();
        put(&conn, &mut c, "t3", "o", Some("a2"));
        put(&conn, &mut c, "t4", "o", Some("b"));
        put(&conn, &mut c, "t5", "p", Some("a1"));
        finish(&conn, &mut c, "t1");
        c.job_succeeded();
        all_shapes(&conn, &mut c, "o");
        all_shapes(&conn, &mut c, "p");
        c.job_succeeded();

        // A failed job: its changes go (here with a savepoint, in the writer with its transaction).
        conn.execute_batch("SAVEPOINT job").unwrap();
        put(&conn, &mut c, "t6", "o", Some("a1"));
        finish(&conn, &mut c, "t3");
        conn.execute_batch("ROLLBACK TO job; RELEASE job").unwrap();
        c.job_failed();
        all_shapes(&conn, &mut c, "o");
        c.job_succeeded();

        // An owner first read inside a job that is rolled back saw that job's writes: forgotten.
        conn.execute_batch("SAVEPOINT job").unwrap();
        put(&conn, &mut c, "t7", "q", Some("a1"));
        assert_eq!(c.of(&conn, "q", &Among::All, 100).unwrap(), 1);
        conn.execute_batch("ROLLBACK TO job; RELEASE job").unwrap();
        c.job_failed();
        assert_eq!(c.known(), 2, "q is read again");
        all_shapes(&conn, &mut c, "q");

        c.forget();
        assert_eq!(c.known(), 0);
        all_shapes(&conn, &mut c, "o");
    }

    #[test]
    fn a_prefix_count_stops_at_the_limit() {
        let mut c = OwnerCounts::default();
        for i in 0..50 {
            c.add(Some(&format!("a{i:02}")), true);
        }
        c.add(Some("b"), true);
        let among = Among::SessionsStartingWith("a".into());
        assert_eq!(c.among(&among, 10), 10);
        assert_eq!(c.among(&among, 1000), 50);
        assert_eq!(c.among(&Among::All, 1000), 51);
    }
}
