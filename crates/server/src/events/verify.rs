//! The HTTP side of Events: the client every POST goes out on (no proxy, no redirects, the
//! address checked at every connection), the verification challenge a subscribe makes before it
//! stores anything, and the failure categories (`deliveryStatus.lastError`, `data.reason`) that
//! stand for what went wrong: never the receiver's own words.

use std::sync::Arc;
use std::time::Duration;

use crate::webhooks::{address, sign, AllowedHosts};

/// The kind of failure of a POST, as SEP-3415 names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Nothing listened, or the address was refused.
    ConnectionRefused,
    /// No answer in time.
    Timeout,
    /// The TLS handshake failed.
    TlsError,
    /// The receiver answered 4xx.
    Http4xx,
    /// The receiver answered 5xx (or anything else that is not 2xx).
    Http5xx,
    /// The receiver answered, but not with the challenge.
    ChallengeFailed,
}

impl Failure {
    /// The category's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::ConnectionRefused => "connection_refused",
            Failure::Timeout => "timeout",
            Failure::TlsError => "tls_error",
            Failure::Http4xx => "http_4xx",
            Failure::Http5xx => "http_5xx",
            Failure::ChallengeFailed => "challenge_failed",
        }
    }

    /// The category of an HTTP status that is not 2xx.
    pub fn of_status(status: u16) -> Failure {
        if (400..500).contains(&status) {
            Failure::Http4xx
        } else {
            Failure::Http5xx
        }
    }

    /// The category of a request that got no answer.
    pub fn of_error(e: &reqwest::Error) -> Failure {
        if e.is_timeout() {
            return Failure::Timeout;
        }
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(c) = cause {
            let text = c.to_string().to_ascii_lowercase();
            if text.contains("certificate") || text.contains("tls") || text.contains("handshake") {
                return Failure::TlsError;
            }
            cause = c.source();
        }
        Failure::ConnectionRefused
    }
}

/// The client Events POST with: never through a proxy (the resolver below must see the
/// receiver's address), no redirects, `timeout` per request, every connection's address checked.
pub fn client(timeout: Duration, allowed: AllowedHosts) -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout)
        .connect_timeout(timeout)
        .dns_resolver(Arc::new(address::GuardedResolver {
            allowed: Arc::new(allowed),
        }))
        .user_agent(concat!("mcp-tasks/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// A fresh `webhook-id` for a control envelope: `msg_<type>_` and 64 random bits.
pub fn control_id(kind: &str) -> String {
    format!("msg_{kind}_{}", &mcp_tasks_engine::random_id()[..16])
}

/// Sends `body` to `url` signed with each of `keys` (`v1,…` signatures, space separated), with
/// `id` as its `webhook-id` and `subscription` as its `X-MCP-Subscription-Id`; a fixed
/// `Content-Length` (no chunked body). The answer, or why there was none.
pub async fn post(
    client: &reqwest::Client,
    url: &str,
    keys: &[Vec<u8>],
    id: &str,
    subscription: &str,
    body: String,
) -> Result<reqwest::Response, reqwest::Error> {
    let timestamp = mcp_tasks_engine::now_ms() / 1000;
    let signature = keys
        .iter()
        .map(|k| sign::signature(k, id, timestamp, &body))
        .collect::<Vec<_>>()
        .join(" ");
    client
        .post(url)
        .header("content-type", "application/json")
        .header("webhook-id", id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .header("x-mcp-subscription-id", subscription)
        .body(body.into_bytes())
        .send()
        .await
}

/// Proves the endpoint at `url` wants `subscription`'s events: POSTs a signed
/// `{"type":"verification","challenge":…}` and expects a 2xx whose JSON body echoes the
/// challenge (compared in constant time). The failure's category otherwise.
pub async fn challenge(
    client: &reqwest::Client,
    url: &str,
    key: &[u8],
    subscription: &str,
) -> Result<(), Failure> {
    let nonce = format!(
        "{}{}",
        mcp_tasks_engine::random_id(),
        mcp_tasks_engine::random_id()
    );
    let body = serde_json::json!({"type": "verification", "challenge": nonce}).to_string();
    let id = control_id("verification");
    let resp = post(client, url, &[key.to_vec()], &id, subscription, body)
        .await
        .map_err(|e| Failure::of_error(&e))?;
    if !resp.status().is_success() {
        return Err(Failure::ChallengeFailed);
    }
    let answer = read_limited(resp, 64 * 1024)
        .await
        .ok_or(Failure::ChallengeFailed)?;
    let echoed = serde_json::from_slice::<serde_json::Value>(&answer)
        .ok()
        .and_then(|v| {
            v.get("challenge")
                .and_then(|c| c.as_str().map(str::to_string))
        })
        .ok_or(Failure::ChallengeFailed)?;
    if constant_time_eq(echoed.as_bytes(), nonce.as_bytes()) {
        Ok(())
    } else {
        Err(Failure::ChallengeFailed)
    }
}

/// The body of `resp`, if it is at most `max` bytes.
async fn read_limited(resp: reqwest::Response, max: usize) -> Option<Vec<u8>> {
    use futures::StreamExt;
    let mut body = resp.bytes_stream();
    let mut got = Vec::new();
    while let Some(chunk) = body.next().await {
        got.extend_from_slice(&chunk.ok()?);
        if got.len() > max {
            return None;
        }
    }
    Some(got)
}

/// Whether `a` and `b` are equal, in time that depends on their length only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_fall_into_their_categories() {
        assert_eq!(Failure::of_status(404), Failure::Http4xx);
        assert_eq!(Failure::of_status(503), Failure::Http5xx);
        assert_eq!(Failure::of_status(302), Failure::Http5xx);
        assert_eq!(Failure::Http4xx.as_str(), "http_4xx");
    }

    #[test]
    fn the_compare_needs_every_byte() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(control_id("verification").starts_with("msg_verification_"));
    }
}
