//! Which tasks the other replicas wait on, so that an event only waiters need (see
//! [`super::relay`]) goes out only when another replica waits on its task.
//!
//! Each relay tells the others what its process waits on: the whole list when it starts, when
//! another relay says hello, when it sends again after being alone and after a failed send; and
//! each change as it happens (a first subscription to a task, a last one dropped, a view of every
//! task opened or closed). A relay that has not listed (just heard, or of an older version that
//! never lists) counts as waiting on everything, and so does every relay for a grace after this
//! one starts listening or listens again.
//!
//! Skipping is exact. A waiter marks its task, which queues the note, before it reads the store;
//! so when a change it did not see is skipped here, its note was queued before that change was
//! committed, and the skip is after it. The skip is kept until every other relay has answered a
//! mark this relay sent after it: each relay sends in the order it queued, and PostgreSQL delivers
//! in commit order, so a note queued before the skip arrives before that answer; and a relay this
//! one had not heard at all then is heard before the answers too, if its note was committed
//! before the change. A note that names a kept skip has the task sent again (as it is stored
//! then). What that leaves to the waiting side (`relay`): a relay reads again what it waits on
//! after its first send, and after a send that follows a failure or a stall long enough for the
//! others to forget it (its notes queued before were committed late); it lists again after a
//! failed send, and its list goes before its answer to any mark; the rest of a list whose first
//! parts were lost is dropped. A relay that listens again sends every kept skip again (a note
//! naming it may be among what it missed) and counts the others as not listed.

use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most tasks kept as skipped; past it, nothing more is skipped until marks let go of some.
const MAX_SKIPPED: usize = 100_000;
/// Most tasks kept as waited on by one other relay; past it, it counts as waiting on everything
/// until it lists again.
const MAX_WAITED: usize = 100_000;
/// How often at most a relay that skipped events sends a mark.
pub(super) const MARK_EVERY: Duration = Duration::from_millis(250);
/// How long a mark may go unanswered before another one is sent (one lost in a failed send).
const MARK_AGAIN: Duration = Duration::from_secs(1);
/// Task ids in one part of a list (a part must fit in one notification with room to spare).
const LIST_PART_BYTES: usize = 6_000;

/// What relays say to each other about what they wait on, as a note (`{"relay": …}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "relay", rename_all = "snake_case")]
pub(super) enum WaitNote {
    /// The sender waits on these tasks now; with `all`, it waits on every task now (`true`) or no
    /// longer (`false`).
    Wait {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tasks: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        all: Option<bool>,
    },
    /// The sender no longer waits on these tasks.
    Unwait { tasks: Vec<String> },
    /// A part of everything the sender waits on: the first part (`first`) starts a list, the last
    /// (`more: false`) completes it. Parts of a list that was not started are dropped (the rest of
    /// a list whose first parts were lost in a failed send: the list sent after it stands).
    Waits {
        all: bool,
        tasks: Vec<String>,
        #[serde(default)]
        first: bool,
        more: bool,
    },
    /// Every other relay answers with [`WaitNote::Marked`].
    Mark { n: u64 },
    /// The answer to the mark `n` of the relay `to`.
    Marked { to: String, n: u64 },
}

impl WaitNote {
    /// The wait note a relayed note is, if it is one.
    pub fn of(note: &serde_json::Value) -> Option<WaitNote> {
        match note.get("relay")?.as_str()? {
            "wait" | "unwait" | "waits" | "mark" | "marked" => {
                serde_json::from_value(note.clone()).ok()
            }
            _ => None,
        }
    }

    /// As a relayed note.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    /// Everything waited on (`all`, `tasks`) as the parts of a list, in order.
    pub fn list(all: bool, tasks: Vec<String>) -> Vec<WaitNote> {
        let mut parts = Vec::new();
        let mut part = Vec::new();
        let mut bytes = 0;
        for t in tasks {
            if bytes + t.len() + 3 > LIST_PART_BYTES && !part.is_empty() {
                parts.push(std::mem::take(&mut part));
                bytes = 0;
            }
            bytes += t.len() + 3;
            part.push(t);
        }
        parts.push(part);
        let last = parts.len() - 1;
        parts
            .into_iter()
            .enumerate()
            .map(|(i, tasks)| WaitNote::Waits {
                all,
                tasks,
                first: i == 0,
                more: i < last,
            })
            .collect()
    }
}

/// What another relay waits on, as far as this one knows.
struct Other {
    heard: Instant,
    /// What it listed, with the changes since: `None` until it lists (it may wait on anything).
    known: Option<Known>,
    /// The parts of a list still arriving.
    listing: Option<Known>,
    /// The newest of this relay's marks it answered.
    answered: u64,
}

#[derive(Default)]
struct Known {
    all: bool,
    tasks: HashSet<String>,
}

impl Other {
    fn new(now: Instant) -> Other {
        Other {
            heard: now,
            known: None,
            listing: None,
            answered: 0,
        }
    }

    fn wants(&self, task: &str) -> bool {
        self.known
            .as_ref()
            .is_none_or(|k| k.all || k.tasks.contains(task))
    }
}

struct State {
    others: HashMap<String, Other>,
    /// Until then every event goes: a relay not heard yet may wait on anything.
    unsure_until: Instant,
    /// Tasks whose events were skipped, each with the first mark sent after its newest skip.
    skipped: HashMap<String, u64>,
    /// The number of the next mark.
    next_mark: u64,
    /// When the newest mark was sent.
    mark_sent: Option<Instant>,
    /// The newest mark, while some other relay has not answered it.
    unanswered: Option<u64>,
}

/// What the other relays wait on, and what this relay skipped (see the module's text).
pub(super) struct Waits {
    state: Mutex<State>,
    /// How long a relay goes unheard before it is forgotten.
    silence: Duration,
    /// How long after it starts listening this relay skips nothing.
    grace: Duration,
}

impl Waits {
    /// A relay that starts listening now.
    pub fn new(silence: Duration, grace: Duration) -> Waits {
        Waits {
            state: Mutex::new(State {
                others: HashMap::new(),
                unsure_until: Instant::now() + grace,
                skipped: HashMap::new(),
                next_mark: 1,
                mark_sent: None,
                unanswered: None,
            }),
            silence,
            grace,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `send` for an event of `task` that only its waiters need if another relay may wait on
    /// it, or if `needed` anyway (another replica may run the task); otherwise keeps the skip.
    /// Returns whether it sent. `send` runs with the lock held: a skip, and the note that has it
    /// sent again, cannot cross.
    pub fn send_or_skip(&self, task: &str, needed: bool, send: impl FnOnce()) -> bool {
        let mut s = self.state();
        let wanted = needed
            || Instant::now() < s.unsure_until
            || s.skipped.len() >= MAX_SKIPPED
            || s.others.values().any(|o| o.wants(task));
        if wanted {
            send();
        } else {
            let mark = s.next_mark;
            s.skipped.insert(task.to_string(), mark);
        }
        wanted
    }

    /// Another relay, `from`, was heard now.
    pub fn heard(&self, from: &str) {
        let now = Instant::now();
        let mut s = self.state();
        match s.others.get_mut(from) {
            Some(o) => o.heard = now,
            None => {
                s.others.insert(from.to_string(), Other::new(now));
            }
        }
    }

    /// `from` said `note` (heard with [`Waits::heard`] first). Runs `again` for each skipped task
    /// it turns out to wait on, with the lock held; answers to marks are the caller's.
    pub fn told(&self, from: &str, note: &WaitNote, mut again: impl FnMut(&str)) {
        let mut s = self.state();
        let s = &mut *s;
        let Some(other) = s.others.get_mut(from) else {
            return;
        };
        // The tasks of the skips it waits on, sent again below.
        let mut named: Vec<String> = Vec::new();
        let mut all_named = false;
        match note {
            WaitNote::Wait { tasks, all } => {
                // Before its list, it counts as waiting on everything, and the list has these.
                let Some(known) = other.known.as_mut() else {
                    return;
                };
                if let Some(all) = all {
                    known.all = *all;
                    all_named = *all;
                }
                if known.tasks.len() + tasks.len() > MAX_WAITED {
                    other.known = None;
                    all_named = true;
                } else {
                    known.tasks.extend(tasks.iter().cloned());
                    named.extend(tasks.iter().cloned());
                }
            }
            WaitNote::Unwait { tasks } => {
                if let Some(known) = other.known.as_mut() {
                    for t in tasks {
                        known.tasks.remove(t);
                    }
                }
                return;
            }
            WaitNote::Waits {
                all,
                tasks,
                first,
                more,
            } => {
                if *first {
                    other.listing = Some(Known::default());
                }
                let Some(listing) = other.listing.as_mut() else {
                    return;
                };
                listing.all |= *all;
                if listing.tasks.len() + tasks.len() > MAX_WAITED {
                    listing.all = true;
                } else {
                    listing.tasks.extend(tasks.iter().cloned());
                }
                if *more {
                    return;
                }
                let known = other.listing.take().unwrap_or_default();
                all_named = known.all;
                if !all_named {
                    named.extend(known.tasks.iter().cloned());
                }
                other.known = Some(known);
            }
            WaitNote::Mark { .. } | WaitNote::Marked { .. } => return,
        }
        if all_named {
            for (t, _) in s.skipped.drain() {
                again(&t);
            }
        } else {
            for t in named {
                if s.skipped.remove(&t).is_some() {
                    again(&t);
                }
            }
        }
    }

    /// `from` answered this relay's mark `n`: the skips it covers are let go of once every other
    /// relay answered it.
    pub fn answered(&self, from: &str, n: u64) {
        let mut s = self.state();
        if let Some(o) = s.others.get_mut(from) {
            o.answered = o.answered.max(n);
        }
        if let Some(m) = s.unanswered {
            if s.others.values().all(|o| o.answered >= m) {
                s.unanswered = None;
            }
        }
        forget_answered(&mut s);
    }

    /// This relay listens again after its listening connection was lost: what the others said
    /// meanwhile is gone, so each counts as waiting on everything until it lists again, and every
    /// kept skip is sent again (`again`, with the lock held): a wait that named it may be among
    /// what was lost, and an answer to a mark sent before the loss would let go of it.
    pub fn listening_again(&self, mut again: impl FnMut(&str)) {
        let mut s = self.state();
        for o in s.others.values_mut() {
            o.known = None;
            o.listing = None;
        }
        s.unsure_until = Instant::now() + self.grace;
        for (t, _) in s.skipped.drain() {
            again(&t);
        }
    }

    /// The number of a mark to send now, if one is due: there are skips to let go of, and no
    /// recent mark is unanswered. Forgets the relays silent for longer than the silence.
    pub fn mark_due(&self) -> Option<u64> {
        let now = Instant::now();
        let mut s = self.state();
        let silence = self.silence;
        let before = s.others.len();
        s.others
            .retain(|_, o| now.duration_since(o.heard) < silence);
        if s.others.len() != before {
            forget_answered(&mut s);
        }
        // A relay that has not listed (an older one never does) keeps every skip: no mark then.
        if s.skipped.is_empty() || s.others.values().any(|o| o.known.is_none()) {
            return None;
        }
        if let Some(at) = s.mark_sent {
            let wait = if s.unanswered.is_some() {
                MARK_AGAIN
            } else {
                MARK_EVERY
            };
            if now.duration_since(at) < wait {
                return None;
            }
        }
        let n = s.next_mark;
        s.next_mark += 1;
        s.mark_sent = Some(now);
        s.unanswered = Some(n);
        Some(n)
    }

    /// How many skips are kept (for tests).
    #[cfg(test)]
    pub fn skipped(&self) -> usize {
        self.state().skipped.len()
    }
}

/// Lets go of the skips every other relay answered a mark sent after (all of them when no other
/// relay is left).
fn forget_answered(s: &mut State) {
    let answered = s.others.values().map(|o| o.answered).min();
    match answered {
        None => s.skipped.clear(),
        Some(n) => s.skipped.retain(|_, mark| *mark > n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waits() -> Waits {
        Waits::new(Duration::from_secs(30), Duration::ZERO)
    }

    fn sent(w: &Waits, task: &str) -> bool {
        w.send_or_skip(task, false, || {})
    }

    fn listed(w: &Waits, from: &str, tasks: &[&str]) -> Vec<String> {
        w.heard(from);
        let mut again = Vec::new();
        for part in WaitNote::list(false, tasks.iter().map(|t| t.to_string()).collect()) {
            w.told(from, &part, |t| again.push(t.to_string()));
        }
        again
    }

    #[test]
    fn a_relay_that_has_not_listed_counts_as_waiting_on_everything() {
        let w = waits();
        w.heard("b");
        assert!(sent(&w, "t1"), "b has not said what it waits on");
        listed(&w, "b", &["t2"]);
        assert!(!sent(&w, "t1"), "b listed, without t1");
        assert!(sent(&w, "t2"));
        assert!(w.send_or_skip("t1", true, || {}), "needed anyway");
        // An older relay, which never lists, keeps every event going.
        w.heard("old");
        assert!(sent(&w, "t1"));
    }

    #[test]
    fn nothing_is_skipped_within_the_grace() {
        let w = Waits::new(Duration::from_secs(30), Duration::from_secs(30));
        listed(&w, "b", &[]);
        assert!(sent(&w, "t1"), "a relay not heard yet may wait on it");
    }

    #[test]
    fn a_note_naming_a_kept_skip_has_the_task_sent_again_once() {
        let w = waits();
        listed(&w, "b", &[]);
        assert!(!sent(&w, "t1"));
        assert!(!sent(&w, "t2"));
        let mut again = Vec::new();
        let wait = WaitNote::Wait {
            tasks: vec!["t1".into()],
            all: None,
        };
        w.told("b", &wait, |t| again.push(t.to_string()));
        assert_eq!(
            again,
            ["t1"],
            "b waited on t1 before its change was skipped"
        );
        assert!(sent(&w, "t1"), "and its next events go");
        w.told("b", &wait, |t| again.push(t.to_string()));
        assert_eq!(again, ["t1"], "sent again once");
        let unwait = WaitNote::Unwait {
            tasks: vec!["t1".into()],
        };
        w.told("b", &unwait, |_| panic!("nothing to send"));
        assert!(!sent(&w, "t1"), "nobody waits any more");
        // A view of everything has every kept skip sent again.
        let all = WaitNote::Wait {
            tasks: vec![],
            all: Some(true),
        };
        let mut again = Vec::new();
        w.told("b", &all, |t| again.push(t.to_string()));
        again.sort();
        assert_eq!(again, ["t1", "t2"]);
        assert!(sent(&w, "t3"));
    }

    #[test]
    fn skips_are_kept_until_every_other_relay_answered_a_later_mark() {
        let w = waits();
        listed(&w, "b", &[]);
        listed(&w, "c", &[]);
        assert_eq!(w.mark_due(), None, "nothing skipped, no mark");
        assert!(!sent(&w, "t1"));
        let first = w.mark_due().expect("a mark is due");
        assert!(!sent(&w, "t2"), "skipped after the first mark was sent");
        assert_eq!(w.mark_due(), None, "the first is not answered yet");
        w.answered("b", first);
        assert_eq!(w.skipped(), 2, "c has not answered");
        w.answered("c", first);
        assert_eq!(w.skipped(), 1, "t1 let go of; t2 needs the next mark");
        // A note arriving late still finds t2.
        let mut again = Vec::new();
        let wait = WaitNote::Wait {
            tasks: vec!["t1".into(), "t2".into()],
            all: None,
        };
        w.told("c", &wait, |t| again.push(t.to_string()));
        assert_eq!(again, ["t2"]);
    }

    #[test]
    fn a_list_in_parts_replaces_what_was_known_and_names_kept_skips() {
        let w = waits();
        listed(&w, "b", &["old"]);
        assert!(!sent(&w, "new-0"));
        let many: Vec<String> = (0..2_000).map(|i| format!("new-{i}")).collect();
        let parts = WaitNote::list(false, many.clone());
        assert!(parts.len() > 1, "{} parts", parts.len());
        for p in &parts {
            let text = serde_json::to_string(&p.to_value()).unwrap();
            assert!(text.len() < 7_000, "{}", text.len());
            assert_eq!(WaitNote::of(&p.to_value()).as_ref(), Some(p));
        }
        let mut again = Vec::new();
        for p in &parts {
            w.told("b", p, |t| again.push(t.to_string()));
        }
        assert_eq!(again, ["new-0"]);
        assert!(!sent(&w, "old"), "the list replaced what was known");
        assert!(sent(&w, "new-1999"));
    }

    #[test]
    fn listening_again_counts_every_relay_as_waiting_on_everything_until_it_lists() {
        let w = waits();
        listed(&w, "b", &[]);
        assert!(!sent(&w, "t1"));
        let mut again = Vec::new();
        w.listening_again(|t| again.push(t.to_string()));
        assert_eq!(again, ["t1"], "a wait that named it may have been lost");
        assert_eq!(w.skipped(), 0);
        assert!(sent(&w, "t1"), "b counts as waiting on everything");
        assert_eq!(w.mark_due(), None, "no mark while a relay has not listed");
        assert!(listed(&w, "b", &[]).is_empty());
        assert!(!sent(&w, "t1"), "b listed again");
    }

    #[test]
    fn the_parts_of_a_list_that_was_not_started_are_dropped() {
        let w = waits();
        listed(&w, "b", &["kept"]);
        let many: Vec<String> = (0..2_000).map(|i| format!("t-{i}")).collect();
        let parts = WaitNote::list(false, many);
        assert!(parts.len() > 2);
        // The tail of a list whose first parts were lost: b's list stays as it was.
        for p in &parts[1..] {
            w.told("b", p, |_| {});
        }
        assert!(sent(&w, "kept"));
        assert!(!sent(&w, "t-1999"));
        // A list started again, with a stray part of an older one after its first: the new
        // one's first part starts it over.
        w.told("b", &parts[1], |_| {});
        for p in &parts {
            w.told("b", p, |_| {});
        }
        assert!(sent(&w, "t-0") && sent(&w, "t-1999"));
        assert!(!sent(&w, "kept"));
    }

    #[test]
    fn a_relay_unheard_for_the_silence_is_forgotten_with_the_skips_it_held() {
        let w = Waits::new(Duration::from_millis(30), Duration::ZERO);
        listed(&w, "b", &[]);
        assert!(!sent(&w, "t1"));
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(w.mark_due(), None, "nobody left to answer");
        assert_eq!(w.skipped(), 0);
    }
}
