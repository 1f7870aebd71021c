//! Signed signal URLs: `POST {public_url}/signals/{token}` sends a task a signal without
//! credentials, for a third party that cannot hold an API key (a payment provider's webhook, a CI
//! system). The token is sealed with `[signals] url_secret` (`seal.rs`) and names one task, one
//! signal and when it expires, so a URL is good for nothing else; a handler asks for one with
//! `TaskContext::signal_url`.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use mcp_tasks_engine::{now_ms, SignalError, SignalSend, SignalUrls, MAX_SIGNAL_BYTES};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::Arc;

use super::seal::Sealer;
use super::Server;

/// What a token holds.
#[derive(Serialize, Deserialize)]
struct Grant {
    /// The task.
    t: String,
    /// The signal.
    n: String,
    /// Until when, Unix ms.
    e: u64,
}

/// Makes and checks the tokens.
pub(crate) struct Signer {
    base: String,
    sealer: Sealer,
}

impl Signer {
    /// A signer for URLs under `public_url`, sealing with `secret`.
    pub(crate) fn new(public_url: &str, secret: &[u8]) -> Signer {
        Signer {
            base: public_url.trim_end_matches('/').to_string(),
            sealer: Sealer::new(Some(secret)),
        }
    }

    /// The grant a token carries, if this server sealed it and it has not expired.
    fn open(&self, token: &str, now: u64) -> Result<Grant, &'static str> {
        let bytes = self
            .sealer
            .open(token)
            .map_err(|_| "this signal URL was not made by this server (or was changed)")?;
        let grant: Grant =
            serde_json::from_slice(&bytes).map_err(|_| "this signal URL is malformed")?;
        if grant.e < now {
            return Err("this signal URL has expired");
        }
        Ok(grant)
    }
}

impl SignalUrls for Signer {
    fn url(&self, task_id: &str, name: &str, expires_at: u64) -> String {
        let grant = Grant {
            t: task_id.to_string(),
            n: name.to_string(),
            e: expires_at,
        };
        let bytes = serde_json::to_vec(&grant).unwrap_or_default();
        format!("{}/signals/{}", self.base, self.sealer.seal(&bytes))
    }
}

fn refused(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({"error": message.into()}))).into_response()
}

/// `POST /signals/{token}`: the body (JSON; empty for null) is the payload; an `Idempotency-Key`
/// or `webhook-id` header is the signal's key, so a sender's retries are one signal.
pub(crate) async fn post(
    State(server): State<Arc<Server>>,
    Path(token): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(signer) = server.signal_urls() else {
        return refused(StatusCode::NOT_FOUND, "this server makes no signal URLs");
    };
    let grant = match signer.open(&token, now_ms()) {
        Ok(g) => g,
        Err(why) => return refused(StatusCode::FORBIDDEN, why),
    };
    // Read only once the URL is known good, and never past the cap: anyone may post here.
    let too_large = || {
        refused(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("a signal carries at most {MAX_SIGNAL_BYTES} bytes"),
        )
    };
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_SIGNAL_BYTES as u64) {
        return too_large();
    }
    let read = axum::body::to_bytes(body, MAX_SIGNAL_BYTES);
    let body = match tokio::time::timeout(server.config().body_timeout, read).await {
        Ok(Ok(body)) => body,
        Ok(Err(_)) => return too_large(),
        Err(_) => return refused(StatusCode::REQUEST_TIMEOUT, "the body took too long"),
    };
    let payload = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                return refused(
                    StatusCode::BAD_REQUEST,
                    format!("the body must be JSON (the signal's payload): {e}"),
                )
            }
        }
    };
    let key = ["idempotency-key", "webhook-id"]
        .iter()
        .find_map(|h| headers.get(*h).and_then(|v| v.to_str().ok()))
        .map(str::to_string);
    let send = SignalSend {
        name: grant.n.clone(),
        payload,
        sender: "signed url".into(),
        key,
        owner: None,
    };
    match server.engine().signal(&grant.t, send).await {
        Ok(sent) => {
            tracing::info!(target: "mcp_tasks::audit", task = %grant.t, signal = %grant.n, seq = sent.signal.seq, "signal sent through a signed URL");
            Json(json!({
                "taskId": grant.t,
                "signal": {"seq": sent.signal.seq, "name": sent.signal.name, "at": sent.signal.at},
                "duplicate": !sent.fresh,
            }))
            .into_response()
        }
        // The task was purged: the URL outlived it.
        Err(SignalError::NotFound(_)) => refused(StatusCode::GONE, "the task is gone"),
        Err(e @ SignalError::Finished { .. }) => refused(StatusCode::GONE, e.to_string()),
        Err(e @ SignalError::Store(_)) => refused(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        Err(e) => refused(StatusCode::BAD_REQUEST, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_opens_only_unchanged_with_its_secret_and_before_it_expires() {
        let signer = Signer::new("https://t.example/", b"0123456789abcdef0123456789abcdef");
        let url = signer.url("task-1", "approve", 2_000);
        let token = url
            .strip_prefix("https://t.example/signals/")
            .expect("under the public URL, one slash");
        let grant = signer.open(token, 1_000).unwrap();
        assert_eq!(
            (grant.t.as_str(), grant.n.as_str(), grant.e),
            ("task-1", "approve", 2_000)
        );
        assert_eq!(
            signer.open(token, 2_001).err(),
            Some("this signal URL has expired")
        );
        let other = Signer::new("https://t.example", b"another secret of thirty-two b..");
        assert!(other.open(token, 1_000).is_err(), "another secret");
        let mut changed = token.to_string();
        changed.replace_range(0..1, if token.starts_with('e') { "f" } else { "e" });
        assert!(signer.open(&changed, 1_000).is_err(), "a changed token");
    }
}
