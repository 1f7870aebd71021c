//! Streamable HTTP transport: one endpoint (`/mcp`) for POST, GET and DELETE.
//!
//! - POST carries one JSON-RPC message. A request is answered with JSON when its reply is ready within
//!   [`ServerConfig::sse_after`](crate::ServerConfig::sse_after), otherwise with an SSE stream that
//!   carries related notifications and then the reply, with keep-alive comments so idle proxies do not
//!   cut it. Notifications and responses get `202 Accepted`.
//! - GET opens the session's standalone SSE stream for server-initiated messages.
//! - DELETE ends the session.
//!
//! `Origin` is checked against the allow-list (403), bodies over the size limit get 413, a missing
//! `Mcp-Session-Id` 400, an unknown one 404, an unsupported `MCP-Protocol-Version` 400.

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Request as HttpRequest, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::stream::{self, Stream, StreamExt};
use mcp_tasks_protocol::jsonrpc::{parse_message, ErrorObject, Message, RequestId};
use mcp_tasks_protocol::version;
use serde_json::Value;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::{Peer, Server};

/// Header carrying the session id.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// Header carrying the negotiated protocol version.
pub const VERSION_HEADER: &str = "mcp-protocol-version";

/// The axum router serving `/mcp` (and `/healthz`).
pub fn router(server: Arc<Server>) -> axum::Router {
    axum::Router::new()
        .route("/mcp", get(get_stream).post(post).delete(delete))
        .route("/healthz", get(|| async { "ok" }))
        .layer(middleware::from_fn_with_state(server.clone(), check_origin))
        .layer(DefaultBodyLimit::disable())
        .with_state(server)
}

/// Serves on `addr` until `shutdown` resolves.
pub async fn serve(server: Arc<Server>, addr: SocketAddr) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    serve_listener(server, listener, std::future::pending()).await
}

/// Serves on an already bound listener until `shutdown` resolves.
pub async fn serve_listener(
    server: Arc<Server>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(server))
        .with_graceful_shutdown(shutdown)
        .await
}

fn error_response(status: StatusCode, id: Option<RequestId>, error: ErrorObject) -> Response {
    json_response(status, &Message::error(id, error))
}

fn json_response(status: StatusCode, msg: &Message) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        msg.to_json(),
    )
        .into_response()
}

async fn check_origin(State(server): State<Arc<Server>>, req: HttpRequest, next: Next) -> Response {
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let ok = origin
            .to_str()
            .map(|o| server.config().origin_allowed(o))
            .unwrap_or(false);
        if !ok {
            tracing::warn!(origin = ?origin, "rejected request from a disallowed Origin");
            return error_response(
                StatusCode::FORBIDDEN,
                None,
                ErrorObject::invalid_request(format!(
                    "Origin {origin:?} is not allowed (see allowed_origins in the server config)"
                )),
            );
        }
    }
    next.run(req).await
}

/// Resolves the caller from the `Authorization` header, or the 401 to answer with.
// The error is the handler's response itself; boxing it would only add an allocation.
#[allow(clippy::result_large_err)]
fn principal_of(server: &Server, headers: &HeaderMap) -> Result<crate::auth::Principal, Response> {
    let value = headers
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or("\u{0}"));
    server.authenticate(value).map_err(|e| {
        tracing::info!(target: "mcp_tasks::audit", reason = %e, "authentication failed");
        let challenge = match e {
            crate::auth::AuthError::Missing => "Bearer",
            _ => "Bearer error=\"invalid_token\"",
        };
        let mut resp = error_response(
            StatusCode::UNAUTHORIZED,
            None,
            ErrorObject::invalid_request(e.to_string()),
        );
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(challenge),
        );
        resp
    })
}

/// Resolves the session of a non-initialize message, or the HTTP error to answer with. A session
/// belongs to the principal that opened it; to anyone else it does not exist.
async fn session_of(server: &Server, headers: &HeaderMap) -> Result<Peer, Response> {
    let principal = principal_of(server, headers)?;
    let Some(id) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return Err(error_response(
            StatusCode::BAD_REQUEST,
            None,
            ErrorObject::invalid_request("missing Mcp-Session-Id header: send initialize first and echo the session id it returns"),
        ));
    };
    let session = match server.sessions().get(id).await {
        Ok(Some(s)) if s.owner == principal.name => s,
        Ok(_) => {
            return Err(error_response(
                StatusCode::NOT_FOUND,
                None,
                ErrorObject::invalid_request(
                    "session not found (it ended or expired): initialize a new session",
                ),
            ));
        }
        Err(e) => {
            return Err(error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                None,
                ErrorObject::internal(e.to_string()),
            ));
        }
    };
    if let Some(v) = headers.get(VERSION_HEADER) {
        let v = v.to_str().unwrap_or("");
        if !version::SESSION_VERSIONS.contains(&v) {
            return Err(error_response(
                StatusCode::BAD_REQUEST,
                None,
                ErrorObject::invalid_request(format!(
                    "unsupported MCP-Protocol-Version {v:?} (supported: {})",
                    version::SESSION_VERSIONS.join(", ")
                )),
            ));
        }
        if v != session.protocol_version() {
            return Err(error_response(
                StatusCode::BAD_REQUEST,
                None,
                ErrorObject::invalid_request(format!(
                    "MCP-Protocol-Version {v:?} does not match the version negotiated for this session ({})",
                    session.protocol_version()
                )),
            ));
        }
    }
    let mut peer = Peer::new(principal);
    peer.session = Some(session);
    Ok(peer)
}

async fn post(State(server): State<Arc<Server>>, headers: HeaderMap, body: Body) -> Response {
    if let Some(ct) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    {
        if !ct.to_ascii_lowercase().starts_with("application/json") {
            return error_response(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                None,
                ErrorObject::invalid_request(format!(
                    "Content-Type must be application/json, got {ct:?}"
                )),
            );
        }
    }
    let limit = server.config().max_body_bytes;
    let bytes: Bytes = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(_) => {
            return error_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                None,
                ErrorObject::invalid_request(format!(
                    "request body larger than the limit of {limit} bytes"
                )),
            );
        }
    };
    let msg = match parse_message(&bytes) {
        Ok(m) => m,
        Err(rejected) => {
            return error_response(StatusCode::BAD_REQUEST, rejected.id, rejected.error)
        }
    };
    if is_stateless_message(&headers, &msg) {
        return post_stateless(server, headers, msg).await;
    }
    if let Message::Request(req) = &msg {
        if req.method == "initialize" {
            let principal = match principal_of(&server, &headers) {
                Ok(p) => p,
                Err(resp) => return resp,
            };
            return match server
                .initialize(&principal.name, req.params.as_ref())
                .await
            {
                Ok((session, result)) => {
                    let mut resp =
                        json_response(StatusCode::OK, &Message::response(req.id.clone(), result));
                    if let Ok(v) = HeaderValue::from_str(&session.id) {
                        resp.headers_mut().insert(SESSION_HEADER, v);
                    }
                    resp
                }
                Err(e) => json_response(StatusCode::OK, &Message::error(Some(req.id.clone()), e)),
            };
        }
    }
    let peer = match session_of(&server, &headers).await {
        Ok(p) => p,
        Err(resp) => return resp,
    };
    match msg {
        Message::Notification(n) => {
            server.handle_notification(&peer, n).await;
            StatusCode::ACCEPTED.into_response()
        }
        m @ (Message::Response(_) | Message::Error(_)) => {
            match server.handle_client_response(&peer, m).await {
                Ok(()) => StatusCode::ACCEPTED.into_response(),
                Err(e) => error_response(StatusCode::BAD_REQUEST, None, e),
            }
        }
        Message::Request(req) => answer_request(server, peer, req).await,
    }
}

fn is_reply(m: &Message) -> bool {
    matches!(m, Message::Response(_) | Message::Error(_))
}

async fn answer_request(
    server: Arc<Server>,
    peer: Peer,
    req: mcp_tasks_protocol::jsonrpc::Request,
) -> Response {
    // Only calls that can run long or send related messages may become streams; the rest (tasks/get
    // above all: the client wants to poll) are always answered with plain JSON.
    let may_stream = matches!(
        req.method.as_str(),
        "tools/call" | "tasks/result" | "subscriptions/listen" | "prompts/get"
    );
    let (tx, mut rx) = mpsc::channel::<Message>(256);
    let (status_tx, status_rx) = tokio::sync::oneshot::channel::<u16>();
    let worker = server.clone();
    let out = tx.clone();
    tokio::spawn(async move {
        if let Some(reply) = worker.handle_request(&peer, req, out).await {
            let _ = status_tx.send(reply.http_status);
            let _ = tx.send(reply.message).await;
        }
    });
    let json_reply = |m: Message, status_rx: tokio::sync::oneshot::Receiver<u16>| async move {
        let status = status_rx
            .await
            .ok()
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(StatusCode::OK);
        json_response(status, &m)
    };
    if !may_stream {
        return match rx.recv().await {
            Some(m) if is_reply(&m) => json_reply(m, status_rx).await,
            // Something to send before the reply after all: only a stream can carry it.
            Some(m) => sse(server.config().keep_alive, Some(m), rx, true),
            None => sse(server.config().keep_alive, None, rx, true), // cancelled: a stream that ends
        };
    }
    let first = tokio::time::timeout(server.config().sse_after, rx.recv()).await;
    let first = match first {
        Ok(Some(m)) if is_reply(&m) => return json_reply(m, status_rx).await,
        Ok(Some(m)) => Some(m),
        // Cancelled by the client: a request is answered with JSON or a stream, so send a stream that
        // ends without a reply.
        Ok(None) => None,
        Err(_) => None,
    };
    sse(server.config().keep_alive, first, rx, true)
}

/// Decodes an `Mcp-Name`-style header value, including the `=?base64?…?=` form for values that are
/// not header-safe.
fn header_text(v: &HeaderValue) -> Option<String> {
    // Whitespace around a field value is not part of it (RFC 9110 §5.5).
    let s = v.to_str().ok()?.trim();
    if let Some(b64) = s
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
        return String::from_utf8(bytes).ok();
    }
    Some(s.to_string())
}

/// A 400 + -32020 (HeaderMismatch) answer to request `id`.
fn header_mismatch(id: mcp_tasks_protocol::jsonrpc::RequestId, msg: String) -> Response {
    error_response(
        StatusCode::BAD_REQUEST,
        Some(id),
        ErrorObject::new(mcp_tasks_protocol::error_codes::HEADER_MISMATCH, msg),
    )
}

/// Checks the 2026-07-28 routing headers against the body: `MCP-Protocol-Version`, `Mcp-Method`, and
/// `Mcp-Name` for the methods that name a tool, prompt, resource or task.
#[allow(clippy::result_large_err)]
fn check_stateless_headers(
    server: &Server,
    headers: &HeaderMap,
    req: &mcp_tasks_protocol::jsonrpc::Request,
) -> Result<(), String> {
    // A body that declares no version is reported as malformed `_meta` (-32602) by the dispatcher.
    if let Some(declared) = crate::era_2026::declared_version(req.params.as_ref()) {
        match headers
            .get(VERSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
        {
            None => return Err("missing MCP-Protocol-Version header".into()),
            Some(v) if v != declared => {
                return Err(format!(
                    "MCP-Protocol-Version header {v:?} does not match _meta protocolVersion {declared:?}"
                ));
            }
            Some(_) => {}
        }
    }
    match headers.get("mcp-method").and_then(header_text) {
        None => {
            return Err(format!(
                "missing Mcp-Method header (expected {:?})",
                req.method
            ))
        }
        Some(m) if m != req.method => {
            return Err(format!(
                "Mcp-Method header {m:?} does not match the body's method {:?}",
                req.method
            ));
        }
        Some(_) => {}
    }
    let name_field = match req.method.as_str() {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    };
    if let Some(field) = name_field {
        // A body without the field is invalid params, which the dispatcher reports (-32602).
        let Some(expected) = req
            .params
            .as_ref()
            .and_then(|p| p.get(field))
            .and_then(Value::as_str)
        else {
            return Ok(());
        };
        match headers.get("mcp-name").map(header_text) {
            None => {
                return Err(format!(
                    "missing Mcp-Name header (expected params.{field} {expected:?})"
                ))
            }
            Some(None) => return Err("Mcp-Name header is not valid text".into()),
            Some(Some(n)) if n != expected => {
                return Err(format!(
                    "Mcp-Name header {n:?} does not match params.{field} {expected:?}"
                ));
            }
            Some(Some(_)) => {}
        }
    }
    if req.method == "tools/call" {
        check_param_headers(server, headers, req)?;
    }
    Ok(())
}

/// Arguments a tool marks with `x-mcp-header` are mirrored in `Mcp-Param-<Name>` headers; each must be
/// present when the argument is, and equal to it (after base64 decoding).
#[allow(clippy::result_large_err)]
fn check_param_headers(
    server: &Server,
    headers: &HeaderMap,
    req: &mcp_tasks_protocol::jsonrpc::Request,
) -> Result<(), String> {
    let params = req.params.as_ref();
    let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
        return Ok(());
    };
    let Some(tool) = server.tools().get(name) else {
        return Ok(());
    };
    let Some(props) = tool
        .tool
        .input_schema
        .get("properties")
        .and_then(Value::as_object)
    else {
        return Ok(());
    };
    let args = params.and_then(|p| p.get("arguments"));
    for (arg, schema) in props {
        let Some(header) = schema.get("x-mcp-header").and_then(Value::as_str) else {
            continue;
        };
        let value = match args.and_then(|a| a.get(arg)) {
            None | Some(Value::Null) => continue,
            Some(Value::String(s)) => s.clone(),
            Some(Value::Bool(b)) => b.to_string(),
            Some(other) => other.to_string(),
        };
        let hname = format!("mcp-param-{}", header.to_ascii_lowercase());
        let Some(raw) = headers.get(hname.as_str()) else {
            return Err(format!(
                "missing Mcp-Param-{header} header for argument {arg:?}"
            ));
        };
        match strict_header_value(raw) {
            Some(v) if v == value => {}
            Some(v) => {
                return Err(format!(
                    "Mcp-Param-{header} header {v:?} does not match argument {arg:?}"
                ));
            }
            None => {
                return Err(format!(
                    "Mcp-Param-{header} header is not valid (bad base64 or characters)"
                ))
            }
        }
    }
    Ok(())
}

/// A header value that must decode exactly: `=?base64?…?=` must be canonical padded base64 of UTF-8.
fn strict_header_value(v: &HeaderValue) -> Option<String> {
    let s = v.to_str().ok()?.trim();
    match s
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(b64) => {
            use base64::Engine as _;
            let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(s.to_string()),
    }
}

/// A message of the stateless wire (2026-07-28): no session; headers checked against the body.
async fn post_stateless(server: Arc<Server>, headers: HeaderMap, msg: Message) -> Response {
    let principal = match principal_of(&server, &headers) {
        Ok(p) => p,
        Err(resp) => return resp,
    };
    let mut peer = Peer::new(principal);
    peer.stateless = true;
    match msg {
        // Nothing a client may notify changes state on this wire: requests are cancelled by closing
        // their stream.
        Message::Notification(_) => StatusCode::ACCEPTED.into_response(),
        Message::Response(_) | Message::Error(_) => error_response(
            StatusCode::BAD_REQUEST,
            None,
            ErrorObject::invalid_request(
                "this server sends no requests on the 2026-07-28 wire, so it expects no responses",
            ),
        ),
        Message::Request(req) => {
            if let Err(msg) = check_stateless_headers(&server, &headers, &req) {
                return header_mismatch(req.id.clone(), msg);
            }
            answer_request(server, peer, req).await
        }
    }
}

fn is_stateless_message(headers: &HeaderMap, msg: &Message) -> bool {
    let params = match msg {
        Message::Request(r) => r.params.as_ref(),
        Message::Notification(n) => n.params.as_ref(),
        _ => None,
    };
    crate::era_2026::is_stateless(params)
        || headers
            .get(VERSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| mcp_tasks_protocol::version::STATELESS_VERSIONS.contains(&v))
}

/// An SSE response from a channel; with `end_on_reply` it ends after the first reply.
fn sse(
    keep_alive: std::time::Duration,
    first: Option<Message>,
    rx: mpsc::Receiver<Message>,
    end_on_reply: bool,
) -> Response {
    let rest = stream::unfold((rx, false), move |(mut rx, done)| async move {
        if done {
            return None;
        }
        let m = rx.recv().await?;
        let finished = end_on_reply && is_reply(&m);
        Some((m, (rx, finished)))
    });
    let events: std::pin::Pin<Box<dyn Stream<Item = Result<Event, Infallible>> + Send>> = Box::pin(
        stream::iter(first)
            .chain(rest)
            .map(|m| Ok(Event::default().event("message").data(m.to_json()))),
    );
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(keep_alive))
        .into_response()
}

fn stateless_get_or_delete(headers: &HeaderMap) -> Option<Response> {
    let v = headers.get(VERSION_HEADER).and_then(|v| v.to_str().ok())?;
    mcp_tasks_protocol::version::STATELESS_VERSIONS
        .contains(&v)
        .then(|| {
            error_response(
                StatusCode::METHOD_NOT_ALLOWED,
                None,
                ErrorObject::invalid_request(
                    "2026-07-28 has no GET stream or sessions: use subscriptions/listen",
                ),
            )
        })
}

async fn get_stream(State(server): State<Arc<Server>>, headers: HeaderMap) -> Response {
    if let Some(r) = stateless_get_or_delete(&headers) {
        return r;
    }
    let accepts = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/event-stream") || a.contains("*/*"));
    if !accepts {
        return error_response(
            StatusCode::NOT_ACCEPTABLE,
            None,
            ErrorObject::invalid_request(
                "GET /mcp opens an SSE stream: send Accept: text/event-stream",
            ),
        );
    }
    let peer = match session_of(&server, &headers).await {
        Ok(p) => p,
        Err(resp) => return resp,
    };
    let Some(session) = peer.session else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let (tx, rx) = mpsc::channel::<Message>(256);
    let guard = server.streams().register_standalone(&session.id, tx);
    // The guard lives as long as the stream: when the client disconnects, the stream is dropped and
    // the session's standalone stream is unregistered.
    let events = stream::unfold((rx, guard), |(mut rx, guard)| async move {
        let m = rx.recv().await?;
        Some((
            Ok::<_, Infallible>(Event::default().event("message").data(m.to_json())),
            (rx, guard),
        ))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(server.config().keep_alive))
        .into_response()
}

async fn delete(State(server): State<Arc<Server>>, headers: HeaderMap) -> Response {
    if let Some(r) = stateless_get_or_delete(&headers) {
        return r;
    }
    // Only the principal that opened a session can end it; to anyone else it does not exist.
    let peer = match session_of(&server, &headers).await {
        Ok(p) => p,
        Err(resp) => return resp,
    };
    let Some(session) = peer.session else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    match server.end_session(&session.id).await {
        Ok(_) => {
            tracing::info!(session = %session.id, "session ended by client");
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            None,
            ErrorObject::internal(e.to_string()),
        ),
    }
}

/// The address a bound listener serves on, for logs.
pub fn endpoint_url(addr: SocketAddr) -> String {
    format!("http://{addr}/mcp")
}
