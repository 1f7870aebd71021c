//! The limits on a caller, era-neutral: the rate of task-management calls, plain calls at once, and
//! the sessions anonymous callers open. One count per principal; for anonymous callers (who share a
//! principal) one per client address and wire.

use mcp_tasks_engine::Among;
use mcp_tasks_protocol::error_codes;
use mcp_tasks_protocol::jsonrpc::ErrorObject;
use serde_json::json;
use std::sync::Arc;

use super::{Failure, Peer, Server};
use crate::auth::{self, SESSIONS_OPENED};
use crate::session::Budgeted;
use mcp_tasks_engine::store::{SessionLimit, StoreError};

/// How many of something each caller holds now (plain calls running, streams open), by key.
#[derive(Clone, Default)]
pub(crate) struct Held(Arc<dashmap::DashMap<String, usize>>);

impl Held {
    /// Counts one more under `key`, or says how many are held when `max` already are.
    fn take(&self, key: String, max: usize) -> Result<Slot, usize> {
        let mut held = self.0.entry(key.clone()).or_insert(0);
        if *held >= max {
            return Err(*held);
        }
        *held += 1;
        drop(held);
        Ok(Slot {
            held: self.clone(),
            key,
        })
    }
}

/// One thing counted for its caller (a plain call running, a stream open) until dropped.
pub(crate) struct Slot {
    held: Held,
    key: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let dashmap::Entry::Occupied(mut e) = self.held.0.entry(self.key.clone()) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
    }
}

impl Server {
    /// The key a caller's limits are counted under: the principal, and for anonymous callers (who
    /// share one) their client address too, on each wire: all the sessions it opened (they share an
    /// id prefix), or its stateless calls.
    fn limit_key(peer: &Peer) -> String {
        match (peer.anonymous_scope(), peer.anonymous_among()) {
            (_, Some(Among::SessionsStartingWith(prefix))) => {
                format!("{}:sessions {prefix}", peer.name())
            }
            (Some(scope), _) => format!("{}:{scope}", peer.name()),
            (None, _) => peer.name().to_string(),
        }
    }

    /// Counts a plain call as running for its caller, or refuses it when `max_plain_calls` are
    /// already running: -32004, like the cap on unfinished tasks.
    pub(crate) fn plain_call_slot(&self, peer: &Peer) -> Result<Slot, Failure> {
        let max = peer.principal.limits.max_plain_calls;
        self.plain_calls.take(Self::limit_key(peer), max).map_err(|now| {
            tracing::info!(target: "mcp_tasks::audit", principal = %peer.name(), running = now, limit = max, "plain call refused: too many running");
            ErrorObject::new(
                error_codes::TOO_MANY_TASKS,
                format!("Too many calls running: {now} plain calls, the limit is {max}; wait for one to finish, or call the tool as a task"),
            )
            .with_data(json!({"running": now, "limit": max}))
            .into()
        })
    }

    /// The key of what a caller's tasks hold running here: the principal, for anonymous callers
    /// their client address (across wires and sessions, like streams).
    pub(crate) fn held_key(peer: &Peer) -> String {
        match (peer.is_anonymous(), peer.address) {
            (true, Some(a)) => format!("{}:address {}", peer.name(), auth::client_group(a)),
            _ => peer.name().to_string(),
        }
    }

    /// Counts a stream held open for its caller (a 2025 GET stream, a 2026 `subscriptions/listen`,
    /// a blocking `tasks/result`), or refuses it when `max_streams` are open: -32008 with HTTP 429.
    /// Anonymous callers count per client address, across wires and sessions: streams hold
    /// connections, and those are the server's to share.
    pub(crate) fn stream_slot(&self, peer: &Peer, what: &str) -> Result<Slot, Failure> {
        let max = peer.principal.limits.max_streams;
        let key = Self::held_key(peer);
        self.streams_open.take(key, max).map_err(|now| {
            tracing::info!(target: "mcp_tasks::audit", principal = %peer.name(), open = now, limit = max, what, "stream refused: too many open");
            Failure {
                error: ErrorObject::new(
                    error_codes::TOO_MANY_STREAMS,
                    format!("Too many streams open: {now} (GET streams, subscriptions/listen, events/stream and blocking tasks/result together), the limit is {max}; close one, or poll tasks/get instead"),
                )
                .with_data(json!({"open": now, "limit": max})),
                status: 429,
                retry_after_ms: None,
                challenge: None,
            }
        })
    }

    /// Takes one task-management call from the caller's bucket, or refuses it: -32005 with
    /// `data.retryAfterMs`, sent as HTTP 429 with `Retry-After`.
    pub(crate) fn check_rate(&self, peer: &Peer, method: &str) -> Result<(), Failure> {
        self.check_rate_cost(peer, method, 1)
    }

    /// [`Server::check_rate`] for a request that names `cost` items (task ids, answers): each counts
    /// as a call.
    pub(crate) fn check_rate_cost(
        &self,
        peer: &Peer,
        method: &str,
        cost: u32,
    ) -> Result<(), Failure> {
        let Some(per_minute) = peer.principal.limits.calls_per_minute else {
            return Ok(());
        };
        let key = Self::limit_key(peer);
        self.rate.check_cost(&key, per_minute, cost).map_err(|wait_ms| {
            self.metrics.rate_limited();
            tracing::info!(target: "mcp_tasks::audit", principal = %peer.name(), method, "rate limited");
            Failure {
                error: ErrorObject::new(
                    error_codes::RATE_LIMITED,
                    format!("Rate limit: at most {per_minute} task calls per minute; retry in {wait_ms} ms"),
                )
                .with_data(json!({"retryAfterMs": wait_ms})),
                status: 429,
                retry_after_ms: Some(wait_ms),
                challenge: None,
            }
        })
    }

    /// What a new session of `peer` is held to: nothing for an authenticated caller; for an
    /// anonymous one, its client address's and all anonymous callers' budgets. Refuses at once when
    /// either has opened its sessions per minute (-32005; 429 for the address, 503 for all).
    pub(crate) fn session_budget(&self, peer: &Peer) -> Result<Option<Budgeted>, Failure> {
        if !peer.is_anonymous() {
            return Ok(None);
        }
        let budget = self.authenticator().anonymous_sessions();
        let group = peer.address.map(auth::client_group).unwrap_or_default();
        let opened = |key: String, per_minute: u32, status: u16, whose: &str| {
            self.rate.check(&key, per_minute).map_err(|wait_ms| {
                self.metrics.rate_limited();
                tracing::info!(target: "mcp_tasks::audit", address = %group, limit = per_minute, "session refused: too many opened");
                Failure {
                    error: ErrorObject::new(
                        error_codes::RATE_LIMITED,
                        format!("Too many sessions opened: at most {per_minute} per minute {whose}; retry in {wait_ms} ms"),
                    )
                    .with_data(json!({"retryAfterMs": wait_ms, "limit": per_minute})),
                    status,
                    retry_after_ms: Some(wait_ms),
                    challenge: None,
                }
            })
        };
        opened(
            format!("{SESSIONS_OPENED}{group}"),
            budget.per_minute_per_address,
            429,
            "from one client address",
        )?;
        opened(
            format!("{SESSIONS_OPENED}anonymous callers"),
            budget.per_minute,
            503,
            "by anonymous callers in all",
        )?;
        // The id prefix groups the address's sessions in the store, the same on every replica that
        // shares the secret; keyed, so an id says nothing of the address.
        let tag = self
            .sealer()
            .tag(format!("anonymous sessions of {group}").as_bytes());
        let id_prefix = format!("{}-", &tag[..12]);
        let idle_ms = u64::try_from(budget.idle.as_millis()).unwrap_or(u64::MAX);
        Ok(Some(Budgeted {
            limit: SessionLimit {
                max: budget.max,
                per_prefix: Some((id_prefix.clone(), budget.max_per_address)),
            },
            id_prefix,
            idle_ms,
        }))
    }

    /// The error a session refused by its live-session cap gets: -32006, 429 when it is the client
    /// address's cap, 503 when all anonymous callers'.
    pub(crate) fn too_many_sessions(&self, e: &StoreError) -> Option<Failure> {
        let StoreError::TooManySessions {
            live,
            max,
            of_prefix,
        } = *e
        else {
            return None;
        };
        let idle_mins = self
            .authenticator()
            .anonymous_sessions()
            .idle
            .as_secs()
            .div_ceil(60);
        let (message, status) = if of_prefix {
            (
                format!(
                    "Too many sessions: this client address has {live} live sessions, the limit is {max}; \
                     end one (HTTP DELETE with its Mcp-Session-Id) or wait until one has been unused for {idle_mins} min"
                ),
                429,
            )
        } else {
            (
                format!(
                    "Too many anonymous sessions: {live} live, the limit is {max}; try again later, \
                     or authenticate with an API key"
                ),
                503,
            )
        };
        tracing::info!(target: "mcp_tasks::audit", live, limit = max, per_address = of_prefix, "session refused: too many live");
        Some(Failure {
            error: ErrorObject::new(error_codes::TOO_MANY_SESSIONS, message)
                .with_data(json!({"live": live, "limit": max})),
            status,
            retry_after_ms: None,
            challenge: None,
        })
    }
}

/// Arguments smaller than this are not counted against `max_running_bytes`: with at most
/// `max_running_tasks` running, they hold little (100 × 4 KiB), and the count is kept off the
/// path of the ordinary small call.
pub(crate) const HELD_FROM_BYTES: u64 = 4 * 1024;

/// The size of `v` as JSON text, in bytes (counted, not written out).
pub(crate) fn json_size(v: &serde_json::Value) -> u64 {
    struct Counting(u64);
    impl std::io::Write for Counting {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Counting(0);
    // Counting cannot fail, and a Value always serializes.
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_json_size_is_the_length_of_the_text() {
        let v = serde_json::json!({"a": "x\"y", "b": [1, 2.5, null]});
        assert_eq!(super::json_size(&v), v.to_string().len() as u64);
    }
}
