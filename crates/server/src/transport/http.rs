//! Streamable HTTP transport: one endpoint (`/mcp`) for POST, GET and DELETE.
//!
//! - POST carries one JSON-RPC message. A request is answered with JSON when its reply is ready within
//!   [`ServerConfig::sse_after`](crate::ServerConfig::sse_after), otherwise with an SSE stream that
//!   carries related messages and then the reply, with keep-alive comments so idle proxies do not cut
//!   it. Notifications and responses get `202 Accepted`.
//! - GET opens the session's standalone SSE stream for server-initiated messages.
//! - DELETE ends the session.
//!
//! A deciding header sent twice gets 400, a body not declared JSON 415, an `Accept` that allows no
//! reply form 406 (see `strict`); a JSON object with a key twice is a parse error (400).
//! `Origin` is checked against the allow-list (403), bodies over the size limit get 413, a session
//! message without `Mcp-Session-Id` 400, an unknown session 404, an unsupported
//! `MCP-Protocol-Version` 400; a call refused by a rate limit 429 with `Retry-After`.

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Request as HttpRequest, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::stream;
use mcp_tasks_protocol::error_codes;
use mcp_tasks_protocol::jsonrpc::{parse_message, ErrorObject, Message, Request};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::strict::{self, Accepts};
use crate::core::{Era, Peer, Reply, Server};
use crate::inbound::Transport;
use crate::wire::era::{self, Facts};

mod caller;
mod replies;

use caller::{peer_of, require_session, session_header, session_request, SessionHeader};
use replies::{is_reply, json_response, message_response, sse, Envelope, HttpError};

/// Header carrying the session id.
pub const SESSION_HEADER: &str = "mcp-session-id";
/// Header carrying the protocol version.
pub const VERSION_HEADER: &str = "mcp-protocol-version";

/// How long in-flight requests may take to finish once shutdown begins.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The axum router serving `/mcp` (and `/healthz`).
pub fn router(server: Arc<Server>) -> axum::Router {
    let mut r = axum::Router::new()
        .route(
            "/mcp",
            get(get_stream)
                .post(post)
                .delete(delete)
                .fallback(method_not_allowed),
        )
        .route("/healthz", get(|| async { "ok" }));
    if server.signal_urls().is_some() {
        r = r.route(
            "/signals/{token}",
            axum::routing::post(crate::core::signal_urls::post),
        );
    }
    if let Some(oauth) = server.authenticator().oauth() {
        // RFC 9728: at the well-known name, and at it followed by the resource's path.
        const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";
        r = r.route(WELL_KNOWN, get(resource_metadata));
        let url = crate::auth::oauth::resource_metadata_url(&oauth.audience);
        if let Some(suffixed) = url.find(WELL_KNOWN).map(|i| &url[i..]) {
            if suffixed != WELL_KNOWN {
                r = r.route(suffixed, get(resource_metadata));
            }
        }
    }
    r.fallback(no_such_path)
        .layer(middleware::from_fn_with_state(
            server.clone(),
            check_headers,
        ))
        .layer(DefaultBodyLimit::disable())
        .with_state(server)
}

/// The protected-resource metadata (RFC 9728): this server as an OAuth resource, and the
/// authorization server whose tokens it takes.
async fn resource_metadata(State(server): State<Arc<Server>>, uri: axum::http::Uri) -> Response {
    let Some(oauth) = server.authenticator().oauth() else {
        return no_such_path(uri).await;
    };
    let body = serde_json::json!({
        "resource": oauth.audience,
        "authorization_servers": [oauth.issuer],
        "scopes_supported": server.scopes_supported(),
        "bearer_methods_supported": ["header"],
        "resource_name": server.config().name,
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Serves on `addr` until the process ends.
pub async fn serve(server: Arc<Server>, addr: SocketAddr) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    serve_listener(server, listener, std::future::pending()).await
}

/// Serves on an already bound listener until `shutdown` resolves; then stops taking connections,
/// ends open streams and long waits ([`Server::shutdown`]), and lets in-flight replies finish (for at
/// most ten seconds).
pub async fn serve_listener(
    server: Arc<Server>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(server.clone());
    serve_router(server, listener, app, shutdown).await
}

/// [`serve_listener`] with `app` as the router (e.g. [`router`] merged with
/// [`admin::router`](crate::admin::router)).
pub async fn serve_router(
    server: Arc<Server>,
    listener: TcpListener,
    app: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let stopper = server.clone();
    let stop = async move {
        // The caller's signal, or the end of serving in `Server::stop`.
        tokio::select! {
            () = shutdown => {}
            () = stopper.serve_loops().ending() => {}
        }
        // Open streams and long waits end now, so their connections can close.
        stopper.shutdown();
    };
    // Counted until it returns, so that `Server::stop` can wait for it.
    let counted = server.clone();
    let _serving = counted.serve_loops().enter();
    let config = server.config();
    let limits = super::connections::ConnectionLimits {
        max_connections: config.max_connections,
        header_timeout: config.header_timeout,
        idle_timeout: config.idle_timeout,
    };
    let draining = server.clone();
    let winding_down: super::connections::WindingDown = Arc::new(move || draining.draining());
    let closer = server.clone();
    let closing = async move { closer.closing().await };
    super::connections::serve(
        listener,
        app,
        limits,
        winding_down,
        closing,
        stop,
        SHUTDOWN_GRACE,
    )
    .await
}

/// The address a bound listener serves on, for logs.
pub fn endpoint_url(addr: SocketAddr) -> String {
    format!("http://{addr}/mcp")
}

/// Any path but `/mcp` (and the admin paths where they are served here).
async fn no_such_path(uri: axum::http::Uri) -> Response {
    HttpError::new(
        StatusCode::NOT_FOUND,
        ErrorObject::invalid_request(format!(
            "nothing is served at {:?}: MCP is served at /mcp",
            uri.path()
        )),
    )
    .into_response()
}

/// A method `/mcp` does not serve.
async fn method_not_allowed(method: axum::http::Method) -> Response {
    let mut resp = HttpError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        ErrorObject::invalid_request(format!(
            "/mcp does not serve {method}: POST sends a message, GET opens a stream, DELETE ends a session"
        )),
    )
    .into_response();
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
    resp
}

/// Checks every request's headers before its handler runs: no deciding header twice, an allowed
/// `Origin`.
async fn check_headers(
    State(server): State<Arc<Server>>,
    req: HttpRequest,
    next: Next,
) -> Response {
    // The close at the end of a drain: a reply a balancer acts on (503: another replica), where a
    // closed listener would lose a request written into it (see `core::stopping`).
    if req.uri().path() == "/mcp" && server.refuses_requests() {
        let mut refused = HttpError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorObject::new(
                error_codes::SERVER_STOPPING,
                "the server is stopping (a restart or deploy); try again in a moment (another \
                 replica answers)",
            ),
        );
        refused.retry_after_secs = Some(1);
        return refused.into_response();
    }
    if let Some(problem) = strict::oversized_headers(req.headers()) {
        return HttpError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ErrorObject::invalid_request(problem),
        )
        .into_response();
    }
    if let Some(problem) = strict::repeated_header(req.headers()) {
        return HttpError::bad_request(problem).into_response();
    }
    // Routing would answer HEAD with GET's handler (opening a stream whose body is then dropped).
    if req.method() == axum::http::Method::HEAD && req.uri().path() == "/mcp" {
        return method_not_allowed(axum::http::Method::HEAD).await;
    }
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let ok = origin
            .to_str()
            .map(|o| server.config().origin_allowed(o))
            .unwrap_or(false);
        if !ok {
            tracing::warn!(origin = ?origin, "rejected request from a disallowed Origin");
            return HttpError::new(
                StatusCode::FORBIDDEN,
                ErrorObject::invalid_request(format!(
                    "Origin {origin:?} is not allowed (see allowed_origins in the server config)"
                )),
            )
            .into_response();
        }
    }
    next.run(req).await
}

async fn post(State(server): State<Arc<Server>>, req: HttpRequest) -> Response {
    let (parts, body) = req.into_parts();
    match post_message(server, parts, body).await {
        Ok(r) | Err(r) => r,
    }
}

async fn post_message(
    server: Arc<Server>,
    parts: axum::http::request::Parts,
    body: Body,
) -> Result<Response, Response> {
    let headers = &parts.headers;
    let fail = |e: HttpError| e.into_response();
    if let Some(problem) = strict::content_type_problem(headers) {
        return Err(fail(HttpError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorObject::invalid_request(problem),
        )));
    }
    let accepts = Accepts::of(headers);
    let limit = server.config().max_body_bytes;
    let wait = server.config().body_timeout;
    let bytes: Bytes = match tokio::time::timeout(wait, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(_)) => {
            return Err(fail(HttpError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                ErrorObject::invalid_request(format!(
                    "request body larger than the limit of {limit} bytes"
                )),
            )))
        }
        Err(_) => {
            return Err(fail(HttpError::new(
                StatusCode::REQUEST_TIMEOUT,
                ErrorObject::invalid_request(format!(
                    "the request body did not arrive within {} s",
                    wait.as_secs_f64()
                )),
            )))
        }
    };
    let msg = parse_message(&bytes).map_err(|rejected| {
        fail(HttpError {
            id: rejected.id,
            ..HttpError::new(StatusCode::BAD_REQUEST, rejected.error)
        })
    })?;
    if let Message::Request(req) = &msg {
        if !accepts.json && !accepts.sse {
            let got = headers
                .get_all(header::ACCEPT)
                .iter()
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .collect::<Vec<_>>()
                .join(", ");
            return Err(fail(HttpError {
                id: Some(req.id.clone()),
                ..HttpError::new(
                    StatusCode::NOT_ACCEPTABLE,
                    ErrorObject::invalid_request(format!(
                        "Accept must allow application/json or text/event-stream (a reply is one of them), got {got:?}"
                    )),
                )
            }));
        }
    }
    let mut peer = peer_of(&server, &parts).await.map_err(fail)?;
    let found = session_header(&server, &peer, headers)
        .await
        .map_err(fail)?;
    let facts = Facts {
        header_version: headers.get(VERSION_HEADER).and_then(|v| v.to_str().ok()),
        session_async_tools: match &found {
            SessionHeader::Found(s) => Some(s.async_tools()),
            _ => None,
        },
        ..era::body_facts(&msg)
    };
    let era = era::classify(&facts);
    if era == Era::Stateless {
        return Ok(post_stateless(server, peer, headers, msg, accepts).await);
    }
    if let Message::Request(req) = &msg {
        if req.method == "initialize" {
            return Ok(initialize(&server, &peer, req, accepts).await);
        }
    }
    peer.session = Some(require_session(found, headers).map_err(fail)?);
    Ok(match msg {
        Message::Notification(n) => {
            server.handle_notification(&peer, n).await;
            StatusCode::ACCEPTED.into_response()
        }
        m @ (Message::Response(_) | Message::Error(_)) => {
            match server.handle_client_response(&peer, m).await {
                Ok(()) => StatusCode::ACCEPTED.into_response(),
                Err(e) => fail(HttpError::new(StatusCode::BAD_REQUEST, e)),
            }
        }
        Message::Request(req) => answer_request(server, era, peer, req, accepts).await,
    })
}

async fn initialize(
    server: &Arc<Server>,
    peer: &Peer,
    req: &Request,
    accepts: Accepts,
) -> Response {
    match server.initialize(peer, req.params.as_ref()).await {
        Ok((session, result)) => {
            let mut resp = message_response(&Message::response(req.id.clone(), result), accepts);
            if let Ok(v) = HeaderValue::from_str(&session.id) {
                resp.headers_mut().insert(SESSION_HEADER, v);
            }
            resp
        }
        // A refused session is an HTTP error (429, 503) with Retry-After, whatever the client accepts.
        Err(f) if f.status != 200 => {
            let (envelope, message) = Envelope::of(Reply::of(req.id.clone(), Err(f)));
            envelope.json(server.clone(), &message)
        }
        Err(f) => message_response(&Message::error(Some(req.id.clone()), f.error), accepts),
    }
}

/// A message of the stateless wire (2026-07-28): no session; headers checked against the body.
async fn post_stateless(
    server: Arc<Server>,
    peer: Peer,
    headers: &HeaderMap,
    msg: Message,
    accepts: Accepts,
) -> Response {
    match msg {
        // Nothing a client may notify changes state on this wire: requests are cancelled by closing
        // their stream.
        Message::Notification(_) => StatusCode::ACCEPTED.into_response(),
        Message::Response(_) | Message::Error(_) => HttpError::bad_request(
            "this server sends no requests on the 2026-07-28 wire, so it expects no responses",
        )
        .into_response(),
        Message::Request(req) => {
            if let Err(msg) = crate::wire::era_2026::check_headers(&server, headers, &req) {
                return HttpError {
                    id: Some(req.id.clone()),
                    ..HttpError::new(
                        StatusCode::BAD_REQUEST,
                        ErrorObject::new(error_codes::HEADER_MISMATCH, msg),
                    )
                }
                .into_response();
            }
            answer_request(server, Era::Stateless, peer, req, accepts).await
        }
    }
}

async fn answer_request(
    server: Arc<Server>,
    era: Era,
    peer: Peer,
    req: Request,
    accepts: Accepts,
) -> Response {
    // Only calls that can run long or send related messages may become streams; the rest (tasks/get
    // above all: the client wants to poll) are always answered with plain JSON. A client that
    // accepts no stream gets the reply alone, as JSON; one that accepts only streams, a stream.
    let may_stream = crate::wire::may_stream(&req.method) && accepts.sse;
    // A stream of events to a client that takes no stream would run on, sending nothing.
    if req.method == "events/stream" && !accepts.sse {
        let mut refused = HttpError::new(
            StatusCode::NOT_ACCEPTABLE,
            ErrorObject::invalid_request(
                "events/stream answers with a stream: send Accept: text/event-stream (or use events/poll)",
            ),
        );
        refused.id = Some(req.id.clone());
        return refused.into_response();
    }
    let (tx, mut rx) = mpsc::channel::<Message>(256);
    let (envelope_tx, envelope_rx) = tokio::sync::oneshot::channel::<Envelope>();
    let worker = server.clone();
    tokio::spawn(async move {
        let out = tx.clone();
        if let Some(reply) = worker
            .handle_request(era, &peer, Transport::Http, req, out)
            .await
        {
            // The message goes on the channel: a stream carries it when one is open, else it is the
            // JSON body.
            let (envelope, message) = Envelope::of(reply);
            let _ = envelope_tx.send(envelope);
            let _ = tx.send(message).await;
        }
    });
    let keep_alive = server.config().keep_alive;
    let first = if may_stream {
        match tokio::time::timeout(server.config().sse_after, rx.recv()).await {
            Ok(m) => m,
            // Still running: stream.
            Err(_) => return sse(server, keep_alive, None, rx, envelope_rx),
        }
    } else if accepts.sse {
        rx.recv().await
    } else {
        // No stream to carry what comes before the reply (progress, logs, questions): it is not
        // sent, and a question goes unanswered until the call ends.
        loop {
            match rx.recv().await {
                Some(m) if !is_reply(&m) => {
                    tracing::debug!(
                        "a message before the reply was not sent: the client accepts no stream"
                    );
                }
                other => break other,
            }
        }
    };
    match first {
        // The envelope went out before the reply, so it is here.
        Some(m) if is_reply(&m) => match envelope_rx.await {
            // A challenge (401, 403) is an HTTP error whatever the client accepts: that is where
            // clients look for it.
            Ok(envelope) if accepts.json || envelope.challenge.is_some() => {
                envelope.json(server, &m)
            }
            Ok(envelope) => {
                let (again, rx_again) = tokio::sync::oneshot::channel();
                let _ = again.send(envelope);
                sse(server, keep_alive, Some(m), rx, rx_again)
            }
            Err(_) if accepts.json => json_response(StatusCode::OK, &m),
            Err(_) => {
                let (_, closed) = tokio::sync::oneshot::channel();
                sse(server, keep_alive, Some(m), rx, closed)
            }
        },
        // Something to send before the reply: only a stream can carry it. Cancelled (`None`): a
        // request is answered with JSON or a stream, so a stream that ends without a reply.
        first => sse(server, keep_alive, first, rx, envelope_rx),
    }
}

fn stateless_get_or_delete(headers: &HeaderMap) -> Option<Response> {
    let v = headers.get(VERSION_HEADER).and_then(|v| v.to_str().ok())?;
    let era = era::classify(&Facts {
        header_version: Some(v),
        ..Facts::default()
    });
    (era == Era::Stateless).then(|| {
        HttpError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            ErrorObject::invalid_request(
                "2026-07-28 has no GET stream or sessions: use subscriptions/listen",
            ),
        )
        .into_response()
    })
}

async fn get_stream(State(server): State<Arc<Server>>, req: HttpRequest) -> Response {
    if let Some(r) = stateless_get_or_delete(req.headers()) {
        return r;
    }
    let accepts = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/event-stream") || a.contains("*/*"));
    if !accepts {
        return HttpError::new(
            StatusCode::NOT_ACCEPTABLE,
            ErrorObject::invalid_request(
                "GET /mcp opens an SSE stream: send Accept: text/event-stream",
            ),
        )
        .into_response();
    }
    let (peer, session) = match session_request(&server, req).await {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    let slot = match server.stream_slot(&peer, "GET stream") {
        Ok(slot) => slot,
        Err(f) => {
            return HttpError::new(
                StatusCode::from_u16(f.status).unwrap_or(StatusCode::TOO_MANY_REQUESTS),
                f.error,
            )
            .into_response()
        }
    };
    let (tx, rx) = mpsc::channel::<Message>(256);
    let guard = (server.open_standalone(&session.id, tx), slot);
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

async fn delete(State(server): State<Arc<Server>>, req: HttpRequest) -> Response {
    if let Some(r) = stateless_get_or_delete(req.headers()) {
        return r;
    }
    let (_, session) = match session_request(&server, req).await {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    match server.end_session(&session.id).await {
        Ok(_) => {
            tracing::info!(session = %session.id, "session ended by client");
            StatusCode::NO_CONTENT.into_response()
        }
        Err(e) => HttpError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorObject::internal(e.to_string()),
        )
        .into_response(),
    }
}
