//! The rate limit on task-management calls, era-neutral: one bucket per principal, and for anonymous
//! callers (who share a principal) one per session or, without a session, per client address.

use mcp_tasks_protocol::error_codes;
use mcp_tasks_protocol::jsonrpc::ErrorObject;
use serde_json::json;

use super::{Failure, Peer, Server};

impl Server {
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
        let key = match peer.anonymous_scope() {
            Some(scope) => format!("{}:{scope}", peer.name()),
            None => peer.name().to_string(),
        };
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
