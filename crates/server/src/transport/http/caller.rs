//! Who sends a request and in which session: the principal from `Authorization` (401, 503 and
//! their challenges), the session `Mcp-Session-Id` names (a session belongs to the principal that
//! opened it), and the version header checked against it.

use axum::extract::{ConnectInfo, Request as HttpRequest};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use mcp_tasks_protocol::jsonrpc::ErrorObject;
use mcp_tasks_protocol::version;
use std::net::SocketAddr;
use std::sync::Arc;

use super::replies::HttpError;
use super::{SESSION_HEADER, VERSION_HEADER};
use crate::core::{Peer, Server};
use crate::session::Session;

/// The caller of a request, from its `Authorization` header and its connection.
pub(super) async fn peer_of(
    server: &Server,
    req: &axum::http::request::Parts,
) -> Result<Peer, HttpError> {
    let value = req
        .headers
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or("\u{0}"));
    let principal = server.authenticate(value).await.map_err(|e| {
        if let crate::auth::AuthError::Token(crate::auth::oauth::TokenError::KeySet(why)) = &e {
            // The token is not at fault: a 401 would make the client throw it away and sign in
            // again, to no avail. The reason (an address, a TLS error) is for the operator only.
            tracing::warn!(reason = %why, "cannot check an access token: the issuer's key set is unreadable");
            return HttpError {
                // About when the next fetch will be tried (sooner than the refresh interval).
                retry_after_secs: Some(
                    u8::try_from(crate::auth::oauth::RETRY_UNREADABLE_EVERY.as_secs())
                        .unwrap_or(u8::MAX),
                ),
                ..HttpError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorObject::internal(
                        "access tokens cannot be checked right now: the authorization server's \
                         keys are unreadable; try again later",
                    ),
                )
            };
        }
        tracing::info!(target: "mcp_tasks::audit", reason = %e, "authentication failed");
        HttpError {
            challenge: Some(challenge(server, &e)),
            ..HttpError::new(
                StatusCode::UNAUTHORIZED,
                ErrorObject::invalid_request(e.to_string()),
            )
        }
    })?;
    let mut peer = Peer::new(principal);
    peer.address = req
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    Ok(peer)
}

/// The `WWW-Authenticate` of a 401: with OAuth, where the protected-resource metadata is (RFC 9728),
/// so a client can find the authorization server; and, when a credential was sent, why it failed.
pub(super) fn challenge(server: &Server, e: &crate::auth::AuthError) -> String {
    let sent = !matches!(e, crate::auth::AuthError::Missing);
    let oauth = server.authenticator().oauth();
    crate::auth::Challenge {
        error: sent.then_some("invalid_token"),
        description: (sent && oauth.is_some()).then(|| e.to_string()),
        scope: None,
        resource_metadata: oauth.map(|o| crate::auth::oauth::resource_metadata_url(&o.audience)),
    }
    .header_value()
}

/// What the `Mcp-Session-Id` header names.
pub(super) enum SessionHeader {
    Absent,
    Unknown,
    Found(Arc<Session>),
}

/// Looks up the session a request names. A session belongs to the principal that opened it; to
/// anyone else it does not exist.
pub(super) async fn session_header(
    server: &Server,
    peer: &Peer,
    headers: &HeaderMap,
) -> Result<SessionHeader, HttpError> {
    let Some(id) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return Ok(SessionHeader::Absent);
    };
    match server.sessions().get(id).await {
        Ok(Some(s)) if s.owner == peer.name() => Ok(SessionHeader::Found(s)),
        Ok(_) => Ok(SessionHeader::Unknown),
        Err(e) => Err(HttpError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorObject::internal(e.to_string()),
        )),
    }
}

/// The session a session-wire message needs, with its version header checked against it.
pub(super) fn require_session(
    found: SessionHeader,
    headers: &HeaderMap,
) -> Result<Arc<Session>, HttpError> {
    let session = match found {
        SessionHeader::Found(s) => s,
        SessionHeader::Absent => return Err(HttpError::bad_request(
            "missing Mcp-Session-Id header: send initialize first and echo the session id it returns",
        )),
        SessionHeader::Unknown => {
            return Err(HttpError::new(
                StatusCode::NOT_FOUND,
                ErrorObject::invalid_request(
                    "session not found (it ended or expired): initialize a new session",
                ),
            ))
        }
    };
    if let Some(v) = headers.get(VERSION_HEADER) {
        let v = v.to_str().unwrap_or("");
        if !version::SESSION_VERSIONS.contains(&v) {
            return Err(HttpError::bad_request(format!(
                "unsupported MCP-Protocol-Version {v:?} (supported: {})",
                version::SESSION_VERSIONS.join(", ")
            )));
        }
        if v != session.protocol_version() {
            return Err(HttpError::bad_request(format!(
                "MCP-Protocol-Version {v:?} does not match the version negotiated for this session ({})",
                session.protocol_version()
            )));
        }
    }
    Ok(session)
}

/// The caller and session of a GET or DELETE: its caller must be the session's owner.
pub(super) async fn session_request(
    server: &Server,
    req: HttpRequest,
) -> Result<(Peer, Arc<Session>), Response> {
    let (parts, _) = req.into_parts();
    let peer = peer_of(server, &parts)
        .await
        .map_err(IntoResponse::into_response)?;
    let found = session_header(server, &peer, &parts.headers)
        .await
        .map_err(IntoResponse::into_response)?;
    let session = require_session(found, &parts.headers).map_err(IntoResponse::into_response)?;
    Ok((peer, session))
}
