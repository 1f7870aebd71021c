//! Multi-round-trip requests (MCP 2026-07-28, SEP-2322) for handlers that ask for input while they run
//! inside a request (not as a task).
//!
//! The server keeps nothing between rounds. A handler runs; when it asks for input that is not in hand,
//! the run is stopped and the request answered with `resultType: "input_required"`, the questions
//! (`inputRequests`, keyed `r1`, `r2`, … in the order the handler asked) and a `requestState` that
//! carries the answers so far. The client retries the same call with `inputResponses` and that state;
//! the handler runs again from the start and gets the stored answers back at once, in the same order.
//! Handlers must therefore ask the same questions in the same order for the same arguments — which is
//! what a handler that depends only on its arguments and the answers does.
//!
//! `requestState` is signed (HMAC-SHA256 with the server's secret) and bound to the principal, the
//! tool and its arguments, and an expiry: a tampered, foreign or stale state is refused with -32602.

use async_trait::async_trait;
use mcp_tasks_engine::{now_ms, ContextSink, InputError, InputResponse, LogLevel};
use mcp_tasks_protocol::jsonrpc::ErrorObject;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::Mutex;
use tokio::sync::Notify;

use super::messages;
use crate::core::streams::StreamSender;
use crate::core::{Sealer, Unsealed};

/// How long a `requestState` stays valid.
const STATE_TTL_MS: u64 = 15 * 60 * 1000;

/// What `requestState` carries between rounds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct RoundState {
    /// Principal the state was issued to.
    pub(crate) principal: String,
    /// Digest of tool + arguments.
    pub(crate) call: String,
    /// Expiry, Unix ms.
    pub(crate) exp: u64,
    /// Answers so far, by key.
    pub(crate) answers: BTreeMap<String, Value>,
    /// Keys asked in the last round and not yet answered.
    pub(crate) pending: Vec<String>,
}

/// Encodes and signs a state.
pub(crate) fn seal(sealer: &Sealer, state: &RoundState) -> String {
    sealer.seal(&serde_json::to_vec(state).unwrap_or_default())
}

/// Checks and decodes a state issued to `principal` for `call`.
pub(crate) fn open(
    sealer: &Sealer,
    token: &str,
    principal: &str,
    call: &str,
) -> Result<RoundState, ErrorObject> {
    let bad = |why: &str| {
        ErrorObject::invalid_params(format!(
            "requestState rejected: {why}; start the call again without it"
        ))
    };
    let payload = sealer.open(token).map_err(|e| match e {
        Unsealed::Malformed => bad("malformed"),
        Unsealed::BadSignature => {
            bad("signature does not match (tampered or issued by another server)")
        }
    })?;
    let state: RoundState = serde_json::from_slice(&payload).map_err(|_| bad("malformed"))?;
    if state.principal != principal {
        return Err(bad("issued to another caller"));
    }
    if state.call != call {
        return Err(bad("issued for another tool call or other arguments"));
    }
    if state.exp < now_ms() {
        return Err(bad("expired"));
    }
    Ok(state)
}

/// A context sink for one round: answers questions from what is in hand, and records the rest.
pub(crate) struct RoundSink {
    answers: BTreeMap<String, Value>,
    caps: Value,
    asked: Mutex<RoundAsked>,
    /// Raised when the handler waits for an answer that is not in hand.
    pub(crate) blocked: Notify,
    progress: Option<(Value, StreamSender)>,
    log: Option<(LogLevel, StreamSender)>,
}

#[derive(Default)]
struct RoundAsked {
    next: usize,
    missing: Vec<(String, String, Value)>,
}

impl RoundSink {
    /// A sink with the answers in hand and the client's capabilities for this request.
    pub(crate) fn new(
        answers: BTreeMap<String, Value>,
        caps: Value,
        progress: Option<(Value, StreamSender)>,
        log: Option<(LogLevel, StreamSender)>,
    ) -> RoundSink {
        RoundSink {
            answers,
            caps,
            asked: Mutex::new(RoundAsked::default()),
            blocked: Notify::new(),
            progress,
            log,
        }
    }

    /// The questions asked and not answered, as an `InputRequests` map.
    pub(crate) fn missing(&self) -> (Map<String, Value>, Vec<String>) {
        let asked = self.asked.lock().unwrap_or_else(|p| p.into_inner());
        let map = asked
            .missing
            .iter()
            .map(|(k, m, p)| (k.clone(), json!({"method": m, "params": p})))
            .collect();
        (
            map,
            asked.missing.iter().map(|(k, _, _)| k.clone()).collect(),
        )
    }

    /// The answers in hand.
    pub(crate) fn answers(&self) -> &BTreeMap<String, Value> {
        &self.answers
    }
}

#[async_trait]
impl ContextSink for RoundSink {
    /// A plain call's round keeps no journal: its steps all run and record nothing.
    fn journal(&self) -> Option<&dyn mcp_tasks_engine::StepJournal> {
        None
    }

    async fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        let Some((token, out)) = &self.progress else {
            return;
        };
        let _ = out
            .send(messages::progress(
                token,
                progress,
                total,
                message.as_deref(),
                None,
            ))
            .await;
    }
    async fn status(&self, _message: String) {}
    async fn log(&self, level: LogLevel, logger: Option<String>, data: Value) {
        // Only when the request asked for logs (`_meta` logLevel), and at or above that level.
        let Some((min, out)) = &self.log else { return };
        if level < *min {
            return;
        }
        let _ = out
            .send(messages::log(level, logger.as_deref(), data, None))
            .await;
    }

    async fn request_input(
        &self,
        method: &str,
        params: Value,
    ) -> Result<InputResponse, InputError> {
        let key = {
            let mut asked = self.asked.lock().unwrap_or_else(|p| p.into_inner());
            asked.next += 1;
            format!("r{}", asked.next)
        };
        self.request_input_as(&key, method, params).await
    }

    async fn request_input_as(
        &self,
        key: &str,
        method: &str,
        params: Value,
    ) -> Result<InputResponse, InputError> {
        if let Some(answer) = self.answers.get(key) {
            // An answer of the wrong shape counts as no answer: the question is asked again.
            let usable =
                method != "elicitation/create" || crate::tool::parse_elicit_result(answer).is_ok();
            if usable {
                return Ok(InputResponse::Result {
                    value: answer.clone(),
                });
            }
        }
        crate::core::check_capability(&self.caps, method, &params)
            .map_err(InputError::Unsupported)?;
        self.asked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .missing
            .push((key.to_string(), method.to_string(), params));
        self.blocked.notify_one();
        // The round ends here: the runner stops this handler and returns the questions.
        std::future::pending().await
    }
}

/// A fresh state for the next round.
pub(crate) fn next_state(
    principal: &str,
    call: &str,
    answers: BTreeMap<String, Value>,
    pending: Vec<String>,
) -> RoundState {
    RoundState {
        principal: principal.to_string(),
        call: call.to_string(),
        exp: now_ms() + STATE_TTL_MS,
        answers,
        pending,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_state_opens_only_unchanged_for_its_caller_and_call() {
        let s = Sealer::new(Some(b"k"));
        let st = next_state(
            "alice",
            "c1",
            BTreeMap::from([("r1".into(), json!({"action": "accept"}))]),
            vec!["r2".into()],
        );
        let token = seal(&s, &st);
        assert_eq!(open(&s, &token, "alice", "c1").unwrap(), st);
        assert!(open(&s, &token, "bob", "c1").is_err());
        assert!(open(&s, &token, "alice", "c2").is_err());
        let mut tampered = token.clone();
        tampered.insert(3, 'x');
        assert!(open(&s, &tampered, "alice", "c1").is_err());
        assert!(open(&Sealer::new(Some(b"other")), &token, "alice", "c1").is_err());
    }
}
