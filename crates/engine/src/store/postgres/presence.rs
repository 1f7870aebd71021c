//! Whether any other replica listens, so that a replica alone on its database sends no `NOTIFY`.
//!
//! Each relayed event costs PostgreSQL a transaction of its own, a round trip, and a delivery to every
//! listening connection, its sender's included: on one replica that was about a third of the
//! database's work per task, for notifications nobody else heard. So a relay sends events (and
//! announcements) only while it has heard another relay lately. Relays tell each other they are
//! there: a hello when one starts (answered at once by the others), and a heartbeat from each when it
//! has sent nothing for a while.
//!
//! Skipping is exact, not best effort. An event is published after its change is committed, and the
//! decision to skip it is taken under the same lock as the one that notices a relay again. When a
//! relay starts sending after a silence it says so ("resumed"), and every relay that hears that reads
//! again each task it waits on, as after a lost listening connection: whatever was skipped before
//! the resume is in the store by then (a log line is not stored: one skipped is gone, as one sent
//! while a listening connection was down). A new relay sends for a short grace after it starts, before it
//! has heard anyone: it does not know yet whether it is alone, and an older version among the others
//! would not answer its hello nor read again on a resume.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long the others' silence may last before a relay takes itself for alone. Long: a relay
/// wrongly alone skips events that a replica whose sending connection is down (but whose listening
/// one is not) would still have used, and a resume re-reads only what is waited on through a topic.
pub(super) const SILENCE: Duration = Duration::from_secs(30);
/// How long a relay that has said nothing says it is there (well within [`SILENCE`]).
pub(super) const HEARTBEAT: Duration = Duration::from_secs(2);
/// How long a new relay sends before it has heard anyone: more than one heartbeat, so that every
/// live relay, of this version or an older one, has been heard by then.
pub(super) const GRACE: Duration = Duration::from_secs(3);

/// The timing of a relay's presence (shortened in tests).
#[derive(Clone, Copy, Debug)]
pub(super) struct Timing {
    pub silence: Duration,
    pub heartbeat: Duration,
    pub grace: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            silence: SILENCE,
            heartbeat: HEARTBEAT,
            grace: GRACE,
        }
    }
}

/// Until when this relay sends events: the last time it heard another relay, plus the silence.
#[derive(Debug)]
pub(super) struct Presence {
    silence: Duration,
    fresh_until: Mutex<Instant>,
}

impl Presence {
    /// A relay starting now: it sends for the grace.
    pub fn new(timing: Timing) -> Presence {
        Presence {
            silence: timing.silence,
            fresh_until: Mutex::new(Instant::now() + timing.grace),
        }
    }

    /// Whether this relay sends now (checked again by [`Presence::send_if_heard`]: a `true` here
    /// only spares the work of encoding an event that would be skipped).
    pub fn sending(&self) -> bool {
        Instant::now() < *self.fresh_until.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `send` if another relay was heard lately, and says whether it did. The lock is held
    /// while `send` queues, so a skip and the resume that follows it cannot cross.
    pub fn send_if_heard(&self, send: impl FnOnce()) -> bool {
        let fresh_until = self.fresh_until.lock().unwrap_or_else(|e| e.into_inner());
        if Instant::now() >= *fresh_until {
            return false;
        }
        send();
        true
    }

    /// Another relay was heard now. Returns whether this relay had stopped sending (then it must
    /// say it resumed, after any skipped event's decision: the lock orders them).
    pub fn heard(&self, resume: impl FnOnce()) -> bool {
        let mut fresh_until = self.fresh_until.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let stopped = now >= *fresh_until;
        // Within the grace, hearing someone must not shorten it.
        *fresh_until = (*fresh_until).max(now + self.silence);
        if stopped {
            resume();
        }
        stopped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(grace_ms: u64, silence_ms: u64) -> Timing {
        Timing {
            silence: Duration::from_millis(silence_ms),
            heartbeat: Duration::from_millis(silence_ms / 4),
            grace: Duration::from_millis(grace_ms),
        }
    }

    #[test]
    fn a_new_relay_sends_for_its_grace_then_stops_until_it_hears_someone() {
        let p = Presence::new(timing(40, 60));
        assert!(p.send_if_heard(|| {}), "within the grace");
        std::thread::sleep(Duration::from_millis(50));
        let mut sent = false;
        assert!(!p.send_if_heard(|| sent = true), "alone after the grace");
        assert!(!sent, "a skipped send is not run");
        let mut resumed = false;
        assert!(p.heard(|| resumed = true), "hearing someone ends the stop");
        assert!(resumed, "and the resume is said");
        assert!(p.send_if_heard(|| {}));
        // Heard again within the silence: no resume.
        assert!(!p.heard(|| panic!("no resume while sending")));
        std::thread::sleep(Duration::from_millis(70));
        assert!(
            !p.send_if_heard(|| {}),
            "silent for longer than the silence"
        );
        assert!(p.heard(|| {}), "heard after a silence: a resume");
    }

    #[test]
    fn a_relay_heard_within_the_grace_resumes_nothing() {
        let p = Presence::new(timing(1_000, 60));
        assert!(!p.heard(|| panic!("it never stopped")));
        assert!(p.send_if_heard(|| {}));
    }
}
