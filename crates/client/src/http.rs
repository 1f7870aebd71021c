//! Streamable HTTP: one POST per message, answered with JSON, an SSE stream, or 202; the session id
//! (2025-11-25) and the protocol version travel in headers.

use base64::Engine as _;
use futures::StreamExt;
use mcp_tasks_protocol::jsonrpc::{message_from_value, Message};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use serde_json::Value;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::mpsc;

use crate::error::{ClientError, Result};

/// How a client reaches a server over HTTP.
#[derive(Clone, Debug)]
pub struct HttpEndpoint {
    /// The MCP endpoint, e.g. `http://127.0.0.1:8080/mcp`.
    pub url: String,
    /// Extra headers sent with every request (`NAME`, `VALUE`).
    pub headers: Vec<(String, String)>,
    /// A bearer token, sent as `Authorization: Bearer …`.
    pub bearer: Option<String>,
}

/// The messages a server sends in answer to one request: notifications and requests on the way, then
/// the response. Ends when the server closes the stream.
pub(crate) struct Exchange {
    rx: mpsc::Receiver<Result<Message>>,
}

impl Exchange {
    /// The next message, `None` when the stream ended.
    pub(crate) async fn next(&mut self) -> Option<Result<Message>> {
        self.rx.recv().await
    }

    pub(crate) fn from_receiver(rx: mpsc::Receiver<Result<Message>>) -> Exchange {
        Exchange { rx }
    }

    fn of(items: Vec<Result<Message>>) -> Exchange {
        let (tx, rx) = mpsc::channel(items.len().max(1));
        for i in items {
            let _ = tx.try_send(i);
        }
        Exchange { rx }
    }
}

/// Routing headers of MCP 2026-07-28: the method, and the name a request is about (a tool, a task).
pub(crate) struct Route<'a> {
    pub method: &'a str,
    pub name: Option<&'a str>,
}

pub(crate) struct HttpTransport {
    http: reqwest::Client,
    url: reqwest::Url,
    base: HeaderMap,
    session: Mutex<Option<String>>,
    version: Mutex<Option<String>>,
}

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";

impl HttpTransport {
    pub(crate) fn new(endpoint: &HttpEndpoint) -> Result<HttpTransport> {
        let url = reqwest::Url::parse(&endpoint.url)
            .map_err(|e| ClientError::Unsupported(format!("not a URL: {:?}: {e}", endpoint.url)))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ClientError::Unsupported(format!(
                "{}: only http:// and https:// endpoints are supported",
                endpoint.url
            )));
        }
        let mut base = HeaderMap::new();
        for (name, value) in &endpoint.headers {
            let n = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
                ClientError::Unsupported(format!("not a valid header name: {name:?}"))
            })?;
            let v = HeaderValue::from_str(value.trim()).map_err(|_| {
                ClientError::Unsupported(format!("not a valid value for header {name}"))
            })?;
            base.append(n, v);
        }
        if let Some(key) = &endpoint.bearer {
            let v = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                ClientError::Unsupported("the key is not a valid header value".into())
            })?;
            base.insert(reqwest::header::AUTHORIZATION, v);
        }
        let mut builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(10));
        // Proxy variables (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, with NO_PROXY) are honoured, but a
        // server on this machine is never reached through one: a proxy elsewhere cannot reach it.
        if is_loopback(&url) {
            builder = builder.no_proxy();
        }
        let http = builder.build().map_err(|e| ClientError::Connection {
            context: "set up the HTTP client".into(),
            source: Box::new(e),
            not_sent: true,
        })?;
        Ok(HttpTransport {
            http,
            url,
            base,
            session: Mutex::new(None),
            version: Mutex::new(None),
        })
    }

    pub(crate) fn url(&self) -> &str {
        self.url.as_str()
    }

    pub(crate) fn set_session(&self, id: Option<String>) {
        *self.session.lock().unwrap_or_else(|e| e.into_inner()) = id;
    }

    pub(crate) fn session(&self) -> Option<String> {
        self.session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn set_version(&self, v: Option<String>) {
        *self.version.lock().unwrap_or_else(|e| e.into_inner()) = v;
    }

    fn headers(&self, route: Option<&Route<'_>>) -> HeaderMap {
        let mut h = self.base.clone();
        h.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(s) = self.session() {
            if let Ok(v) = HeaderValue::from_str(&s) {
                h.insert(SESSION_HEADER, v);
            }
        }
        if let Some(v) = self
            .version
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_deref()
        {
            if let Ok(v) = HeaderValue::from_str(v) {
                h.insert(VERSION_HEADER, v);
            }
        }
        if let Some(r) = route {
            h.insert("mcp-method", header_text(r.method));
            if let Some(n) = r.name {
                h.insert("mcp-name", header_text(n));
            }
        }
        h
    }

    /// POSTs one message and returns what comes back. `context` names the request in errors.
    pub(crate) async fn post(
        &self,
        body: &Value,
        route: Option<Route<'_>>,
        context: &str,
    ) -> Result<Exchange> {
        let resp = self
            .http
            .post(self.url.clone())
            .headers(self.headers(route.as_ref()))
            .json(body)
            .send()
            .await
            .map_err(|e| connection(context, e))?;
        if let Some(s) = resp.headers().get(SESSION_HEADER) {
            if let Ok(s) = s.to_str() {
                self.set_session(Some(s.to_string()));
            }
        }
        let status = resp.status();
        if status == reqwest::StatusCode::ACCEPTED {
            return Ok(Exchange::of(Vec::new()));
        }
        let content_type = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        if content_type.starts_with("text/event-stream") && status.is_success() {
            return Ok(sse_exchange(resp, context.to_string()));
        }
        let bytes = resp.bytes().await.map_err(|e| connection(context, e))?;
        // An error status may still carry a JSON-RPC answer (400 and 404 on 2026-07-28).
        if content_type.starts_with("application/json") {
            if let Ok(v) = serde_json::from_slice::<Value>(&bytes) {
                if let Ok(m) = message_from_value(v) {
                    return Ok(Exchange::of(vec![Ok(m)]));
                }
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        Err(ClientError::Http {
            context: context.to_string(),
            status: status.as_u16(),
            body: text.chars().take(300).collect(),
        })
    }

    /// Opens the session's standalone stream (2025-11-25 `GET`), on which the server sends what
    /// belongs to no request (list changes, resource updates). `Unsupported` when the server offers
    /// none (405).
    pub(crate) async fn get_stream(&self) -> Result<Exchange> {
        let context = "open the server's stream (GET)";
        let mut headers = self.headers(None);
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        headers.remove(CONTENT_TYPE);
        let resp = self
            .http
            .get(self.url.clone())
            .headers(headers)
            .send()
            .await
            .map_err(|e| connection(context, e))?;
        let status = resp.status();
        let is_sse = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().starts_with("text/event-stream"));
        if status.is_success() && is_sse {
            return Ok(sse_exchange(resp, context.to_string()));
        }
        if status == reqwest::StatusCode::METHOD_NOT_ALLOWED {
            return Err(ClientError::Unsupported(
                "the server offers no standalone stream (GET is 405)".into(),
            ));
        }
        let body = resp.text().await.unwrap_or_default();
        Err(ClientError::Http {
            context: context.to_string(),
            status: status.as_u16(),
            body: body.chars().take(300).collect(),
        })
    }

    /// Ends the session (2025-11-25): `DELETE` with the session id. Errors are ignored: the server
    /// expires sessions anyway.
    pub(crate) async fn end_session(&self) {
        if self.session().is_none() {
            return;
        }
        let _ = self
            .http
            .delete(self.url.clone())
            .headers(self.headers(None))
            .timeout(Duration::from_secs(5))
            .send()
            .await;
    }
}

fn connection(context: &str, e: reqwest::Error) -> ClientError {
    ClientError::Connection {
        context: context.to_string(),
        not_sent: e.is_connect(),
        source: Box::new(e),
    }
}

/// A header value for `text`: as is when it is visible ASCII without surrounding spaces, else in
/// the `=?base64?…?=` form MCP defines for values that are not header-safe.
pub(crate) fn header_text(text: &str) -> HeaderValue {
    let safe = !text.is_empty()
        && text.bytes().all(|b| (0x20..0x7f).contains(&b))
        && text.trim() == text
        && !(text.starts_with("=?base64?") && text.ends_with("?="));
    let encoded;
    let s = if safe {
        text
    } else {
        encoded = format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(text)
        );
        &encoded
    };
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static(""))
}

fn sse_exchange(resp: reqwest::Response, context: String) -> Exchange {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let mut events = sse_stream::SseStream::from_bytes_stream(resp.bytes_stream());
        while let Some(ev) = events.next().await {
            let item = match ev {
                Ok(sse) => {
                    let Some(data) = sse.data.filter(|d| !d.trim().is_empty()) else {
                        continue; // a priming event or a keep-alive
                    };
                    match serde_json::from_str::<Value>(&data)
                        .map_err(|e| e.to_string())
                        .and_then(|v| message_from_value(v).map_err(|r| r.error.message))
                    {
                        Ok(m) => Ok(m),
                        Err(e) => Err(ClientError::protocol(format!(
                            "{context}: the server sent an event that is not a JSON-RPC message: {e}"
                        ))),
                    }
                }
                Err(e) => Err(ClientError::Connection {
                    context: context.clone(),
                    source: e.to_string().into(),
                    not_sent: false,
                }),
            };
            let stop = item.is_err();
            if tx.send(item).await.is_err() || stop {
                return;
            }
        }
    });
    Exchange { rx }
}

/// Whether `url` names this machine: a loopback address (127.0.0.0/8, ::1) or `localhost`.
fn is_loopback(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<std::net::IpAddr>() {
        return ip.is_loopback();
    }
    let d = host.trim_end_matches('.').to_ascii_lowercase();
    d == "localhost" || d.ends_with(".localhost")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_header_values_go_in_base64() {
        assert_eq!(header_text("greet"), "greet");
        assert_eq!(header_text("tools/call"), "tools/call");
        assert_eq!(header_text("héllo"), "=?base64?aMOpbGxv?=");
        assert_eq!(header_text(" x"), "=?base64?IHg=?=");
        assert_eq!(header_text("=?base64?x?="), "=?base64?PT9iYXNlNjQ/eD89?=");
    }

    #[test]
    fn loopback_urls_are_never_proxied() {
        for u in [
            "http://127.0.0.1:8080/mcp",
            "http://127.9.9.9/mcp",
            "http://[::1]:1/mcp",
            "http://localhost/mcp",
            "http://LOCALHOST./mcp",
            "http://api.localhost/mcp",
        ] {
            assert!(is_loopback(&reqwest::Url::parse(u).unwrap()), "{u}");
        }
        for u in [
            "https://example.com/mcp",
            "http://10.0.0.1/mcp",
            "http://[2001:db8::1]/mcp",
            "http://localhost.example.com/mcp",
        ] {
            assert!(!is_loopback(&reqwest::Url::parse(u).unwrap()), "{u}");
        }
    }
}
