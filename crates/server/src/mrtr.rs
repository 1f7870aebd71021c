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
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use mcp_tasks_engine::{now_ms, ContextSink, InputError, InputResponse, LogLevel};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use sha2::Sha256;
use std::collections::BTreeMap;
use std::sync::Mutex;
use tokio::sync::Notify;

use mcp_tasks_protocol::jsonrpc::ErrorObject;

/// How long a `requestState` stays valid.
const STATE_TTL_MS: u64 = 15 * 60 * 1000;

/// What `requestState` carries between rounds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RoundState {
    /// Principal the state was issued to.
    pub principal: String,
    /// Digest of tool + arguments.
    pub call: String,
    /// Expiry, Unix ms.
    pub exp: u64,
    /// Answers so far, by key.
    pub answers: BTreeMap<String, Value>,
    /// Keys asked in the last round and not yet answered.
    pub pending: Vec<String>,
}

/// Signs and checks `requestState` values.
pub struct StateSigner {
    key: Vec<u8>,
}

type HmacSha256 = Hmac<Sha256>;

impl StateSigner {
    /// A signer with `secret`, or a random one (then states do not survive a restart or cross replicas).
    pub fn new(secret: Option<&[u8]>) -> StateSigner {
        let key = match secret {
            Some(s) => s.to_vec(),
            None => {
                let mut k = vec![0u8; 32];
                getrandom::fill(&mut k)
                    .expect("the operating system's random number generator failed");
                k
            }
        };
        StateSigner { key }
    }

    fn mac(&self, payload: &[u8]) -> Vec<u8> {
        let mut mac =
            <HmacSha256 as KeyInit>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(payload);
        mac.finalize().into_bytes().to_vec()
    }

    /// Encodes and signs a state.
    pub fn seal(&self, state: &RoundState) -> String {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let payload = serde_json::to_vec(state).unwrap_or_default();
        format!(
            "{}.{}",
            b64.encode(&payload),
            b64.encode(self.mac(&payload))
        )
    }

    /// Checks and decodes a state issued to `principal` for `call`.
    pub fn open(
        &self,
        token: &str,
        principal: &str,
        call: &str,
    ) -> Result<RoundState, ErrorObject> {
        let bad = |why: &str| {
            ErrorObject::invalid_params(format!(
                "requestState rejected: {why}; start the call again without it"
            ))
        };
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let (payload, sig) = token.split_once('.').ok_or_else(|| bad("malformed"))?;
        let payload = b64.decode(payload).map_err(|_| bad("malformed"))?;
        let sig = b64.decode(sig).map_err(|_| bad("malformed"))?;
        let mut mac =
            <HmacSha256 as KeyInit>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(&payload);
        mac.verify_slice(&sig)
            .map_err(|_| bad("signature does not match (tampered or issued by another server)"))?;
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
}

/// A context sink for one round: answers questions from what is in hand, and records the rest.
pub struct RoundSink {
    answers: BTreeMap<String, Value>,
    caps: Value,
    asked: Mutex<RoundAsked>,
    /// Raised when the handler waits for an answer that is not in hand.
    pub blocked: Notify,
    progress: Option<(Value, crate::router::StreamSender)>,
    log: Option<(LogLevel, crate::router::StreamSender)>,
}

#[derive(Default)]
struct RoundAsked {
    next: usize,
    missing: Vec<(String, String, Value)>,
}

impl RoundSink {
    /// A sink with the answers in hand and the client's capabilities for this request.
    pub fn new(
        answers: BTreeMap<String, Value>,
        caps: Value,
        progress: Option<(Value, crate::router::StreamSender)>,
        log: Option<(LogLevel, crate::router::StreamSender)>,
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
    pub fn missing(&self) -> (Map<String, Value>, Vec<String>) {
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
    pub fn answers(&self) -> &BTreeMap<String, Value> {
        &self.answers
    }
}

#[async_trait]
impl ContextSink for RoundSink {
    async fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        let Some((token, out)) = &self.progress else {
            return;
        };
        let p = crate::era_2025::progress_params(token, progress, total, message);
        let _ = out
            .send(mcp_tasks_protocol::jsonrpc::Message::notification(
                "notifications/progress",
                p,
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
        let p = crate::era_2025::log_params(level, logger, data);
        let _ = out
            .send(mcp_tasks_protocol::jsonrpc::Message::notification(
                "notifications/message",
                p,
            ))
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
        crate::era_2025::check_capability(&self.caps, method, &params)
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
pub fn next_state(
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
        let s = StateSigner::new(Some(b"k"));
        let st = next_state(
            "alice",
            "c1",
            BTreeMap::from([("r1".into(), json!({"action": "accept"}))]),
            vec!["r2".into()],
        );
        let token = s.seal(&st);
        assert_eq!(s.open(&token, "alice", "c1").unwrap(), st);
        assert!(s.open(&token, "bob", "c1").is_err());
        assert!(s.open(&token, "alice", "c2").is_err());
        let mut tampered = token.clone();
        tampered.insert(3, 'x');
        assert!(s.open(&tampered, "alice", "c1").is_err());
        assert!(StateSigner::new(Some(b"other"))
            .open(&token, "alice", "c1")
            .is_err());
    }
}
