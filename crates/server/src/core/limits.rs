//! The rate limit on task-management calls, era-neutral: one bucket per principal, and for anonymous
//! callers (who share a principal) one per session or, without a session, per client address.

use mcp_tasks_protocol::error_codes;
use mcp_tasks_protocol::jsonrpc::ErrorObject;
use serde_json::json;
use std::sync::Arc;

use super::{Failure, Peer, Server};

/// A plain call counted as running for its caller until dropped.
pub(crate) struct PlainCallSlot {
    server: Arc<Server>,
    key: String,
}

impl Drop for PlainCallSlot {
    fn drop(&mut self) {
        if let dashmap::Entry::Occupied(mut e) = self.server.plain_calls.entry(self.key.clone()) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
    }
}

impl Server {
    /// The key a caller's limits are counted under: the principal, and for anonymous callers (who
    /// share one) their session or client address too.
    fn limit_key(peer: &Peer) -> String {
        match peer.anonymous_scope() {
            Some(scope) => format!("{}:{scope}", peer.name()),
            None => peer.name().to_string(),
        }
    }

    /// Counts a plain call as running for its caller, or refuses it when `max_plain_calls` are
    /// already running: -32004, like the cap on unfinished tasks.
    pub(crate) fn plain_call_slot(self: &Arc<Self>, peer: &Peer) -> Result<PlainCallSlot, Failure> {
        let max = peer.principal.limits.max_plain_calls;
        let key = Self::limit_key(peer);
        let mut running = self.plain_calls.entry(key.clone()).or_insert(0);
        if *running >= max {
            let now = *running;
            drop(running);
            tracing::info!(target: "mcp_tasks::audit", principal = %peer.name(), running = now, limit = max, "plain call refused: too many running");
            return Err(ErrorObject::new(
                error_codes::TOO_MANY_TASKS,
                format!("Too many calls running: {now} plain calls, the limit is {max}; wait for one to finish, or call the tool as a task"),
            )
            .with_data(json!({"running": now, "limit": max}))
            .into());
        }
        *running += 1;
        drop(running);
        Ok(PlainCallSlot {
            server: self.clone(),
            key,
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
            }
        })
    }
}
