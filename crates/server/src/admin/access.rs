//! Who may reach the operator's routes (the admin API, the dashboard, the metrics) and how a
//! browser is kept from being used against them.
//!
//! - **The operator rule** ([`Authenticator::operator`](crate::auth::Authenticator::operator)):
//!   open without credentials only when the server has no authentication configured at all and
//!   the caller is on loopback; otherwise an operator's key, an OAuth token with the operator
//!   scope, or the dashboard's login cookie. No credentials: 401; someone else's: 403.
//! - **Cross-site requests** ([`guard`]): an `Origin` must be on the allow-list (as on `/mcp`);
//!   `Host` must be an IP address, `localhost` or a configured name (a DNS-rebinding page names
//!   its own host); a state-changing request must be declared JSON, which no HTML form can send
//!   and which a cross-site script cannot send without a CORS preflight that is never granted.
//! - **The login cookie**: `HttpOnly; SameSite=Strict`, and `Secure` when the page was reached
//!   over TLS (a proxy's `X-Forwarded-Proto: https`, or an https `Origin`).

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::auth::OperatorRefusal;
use crate::Server;

/// The cookie a dashboard login sets.
const COOKIE: &str = "mcp_tasks_admin";
/// How long a login lasts.
const LOGIN_FOR: std::time::Duration = std::time::Duration::from_secs(12 * 3600);

/// An error body: `{"error": message}`.
pub(crate) fn fail(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({"error": message.into()}))).into_response()
}

/// A refusal as a response: 401 (with a `WWW-Authenticate` challenge), 403 or 503.
pub(crate) fn refusal(why: OperatorRefusal) -> Response {
    match why {
        OperatorRefusal::Unauthenticated(m) => {
            let mut r = fail(StatusCode::UNAUTHORIZED, m);
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            r
        }
        OperatorRefusal::Forbidden(m) => fail(StatusCode::FORBIDDEN, m),
        OperatorRefusal::Unavailable(m) => {
            let mut r = fail(StatusCode::SERVICE_UNAVAILABLE, m);
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            r
        }
    }
}

/// Checks every request to an operator's route before it runs: `Host`, `Origin`, and a JSON
/// content type on anything that changes state (see the module docs).
pub(crate) async fn guard(State(server): State<Arc<Server>>, req: Request, next: Next) -> Response {
    if let Some(host) = request_host(&req) {
        if !server.config().host_allowed(&host) {
            tracing::warn!(host = %host, path = %req.uri().path(), "refused an operator's route for a disallowed Host");
            return fail(
                StatusCode::FORBIDDEN,
                format!(
                    "Host {host:?} is not allowed for the operator's routes (add it to \
                     [server] allowed_hosts)"
                ),
            );
        }
    }
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let ok = origin
            .to_str()
            .is_ok_and(|o| server.config().origin_allowed(o));
        if !ok {
            tracing::warn!(origin = ?origin, path = %req.uri().path(), "refused an operator's route for a disallowed Origin");
            return fail(
                StatusCode::FORBIDDEN,
                format!(
                    "Origin {origin:?} is not allowed (see allowed_origins in the server config)"
                ),
            );
        }
    }
    let safe = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if !safe && !declared_json(req.headers()) {
        return fail(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "the operator's routes take JSON: send Content-Type: application/json",
        );
    }
    next.run(req).await
}

/// The host a request names (`Host`, or the authority of an HTTP/2 request), without its port.
fn request_host(req: &Request) -> Option<String> {
    let raw = match req.headers().get(header::HOST) {
        Some(v) => v.to_str().unwrap_or("\u{0}").to_string(),
        None => req.uri().authority()?.as_str().to_string(),
    };
    Some(strip_port(&raw).to_ascii_lowercase())
}

/// `host` of `host:port`, `[v6]` of `[v6]:port`.
fn strip_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority
            .split_once(']')
            .map_or(authority, |(h, _)| &authority[..h.len() + 1]);
    }
    match authority.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => authority,
    }
}

/// Whether the request says its body is JSON (`application/json`, parameters allowed).
fn declared_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

/// The login token a request's cookie carries, if any.
fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .map(|(_, v)| v.to_string())
}

/// The operator making the request: by the dashboard's login cookie (when no `Authorization` is
/// sent), else by the operator rule.
pub(crate) async fn operator(
    server: &Server,
    headers: &HeaderMap,
    peer: Option<SocketAddr>,
) -> Result<String, OperatorRefusal> {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or("\u{0}"));
    if authorization.is_none() {
        if let Some(token) = cookie_token(headers) {
            let logins = server.admin_logins();
            match logins.get(&token).map(|e| e.value().clone()) {
                Some((who, until)) if until > std::time::Instant::now() => return Ok(who),
                Some(_) => {
                    logins.remove(&token);
                }
                None => {}
            }
        }
    }
    // Behind a proxy on this host every caller is loopback: a request that says it was forwarded
    // is not taken for a local one.
    let local = peer.is_some_and(|p| is_loopback(p.ip())) && !forwarded(headers);
    server.authenticator().operator(authorization, local).await
}

/// Whether `ip` is a loopback address, also as an IPv4-mapped IPv6 one (a dual-stack listener).
fn is_loopback(ip: std::net::IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

/// Whether a proxy says it forwarded the request (`Forwarded`, `X-Forwarded-For`, `X-Real-IP`).
fn forwarded(headers: &HeaderMap) -> bool {
    ["forwarded", "x-forwarded-for", "x-real-ip"]
        .iter()
        .any(|h| headers.contains_key(*h))
}

/// The operator making the request `parts` belongs to (see [`operator`]).
pub(crate) async fn operator_of(
    server: &Server,
    parts: &axum::http::request::Parts,
) -> Result<String, OperatorRefusal> {
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    operator(server, &parts.headers, peer).await
}

/// The operator making a request, as a handler's argument: the request is refused (401, 403 or
/// 503, saying why) before the handler runs otherwise.
pub(crate) struct Operator(pub(crate) String);

impl axum::extract::FromRequestParts<Arc<Server>> for Operator {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        server: &Arc<Server>,
    ) -> Result<Self, Self::Rejection> {
        operator_of(server, parts)
            .await
            .map(Operator)
            .map_err(refusal)
    }
}

/// What `POST /admin/login` takes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LoginBody {
    /// An operator's API key, or an access token carrying the operator scope.
    key: String,
}

/// Checks an operator's credentials and sets the dashboard's cookie (`{"operator": NAME}`), or
/// answers why not. Without authentication configured there is nothing to log in to (400), and
/// an empty key is refused before anything is checked.
pub(crate) async fn login(
    State(server): State<Arc<Server>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let Ok(LoginBody { key }) = serde_json::from_slice::<LoginBody>(&body) else {
        return fail(
            StatusCode::BAD_REQUEST,
            "send {\"key\": \"<operator key or access token>\"}",
        );
    };
    if !server.authenticator().configured() {
        return fail(
            StatusCode::BAD_REQUEST,
            "no authentication is configured: there is nothing to log in to (the dashboard is \
             open to loopback callers)",
        );
    }
    let key = key.trim();
    if key.is_empty() {
        return refusal(OperatorRefusal::Unauthenticated(
            "the key is empty: paste an operator's key".into(),
        ));
    }
    let bearer = format!("Bearer {key}");
    match server
        .authenticator()
        .operator_until(Some(&bearer), is_loopback(peer.ip()))
        .await
    {
        Ok((who, expires_at)) => {
            let token = mcp_tasks_engine::random_id();
            // A login lasts 12 hours, and never past the access token it was made with.
            let lasts = match expires_at {
                Some(exp) => {
                    let now = mcp_tasks_engine::now_ms() / 1000;
                    LOGIN_FOR.min(std::time::Duration::from_secs(exp.saturating_sub(now)))
                }
                None => LOGIN_FOR,
            };
            server.admin_logins().insert(
                token.clone(),
                (who.clone(), std::time::Instant::now() + lasts),
            );
            tracing::info!(target: "mcp_tasks::audit", operator = %who, "operator logged in to the dashboard");
            let cookie = format!(
                "{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{}",
                lasts.as_secs(),
                if over_tls(&headers) { "; Secure" } else { "" }
            );
            (
                [(header::SET_COOKIE, cookie)],
                Json(json!({"operator": who})),
            )
                .into_response()
        }
        Err(why) => refusal(why),
    }
}

/// Ends the dashboard's login (the cookie is cleared either way).
pub(crate) async fn logout(State(server): State<Arc<Server>>, headers: HeaderMap) -> Response {
    if let Some(t) = cookie_token(&headers) {
        server.admin_logins().remove(&t);
    }
    let cookie = format!(
        "{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0{}",
        if over_tls(&headers) { "; Secure" } else { "" }
    );
    (
        [(header::SET_COOKIE, cookie)],
        Json(json!({"loggedOut": true})),
    )
        .into_response()
}

/// `GET /admin/api/me`: who the operator is, and whether by the dashboard's login (so the page
/// offers to log out only then).
pub(crate) async fn me(
    State(server): State<Arc<Server>>,
    Operator(who): Operator,
    headers: HeaderMap,
) -> Response {
    let logged_in = headers.get(header::AUTHORIZATION).is_none()
        && cookie_token(&headers).is_some_and(|t| server.admin_logins().contains_key(&t));
    Json(json!({"operator": who, "loggedIn": logged_in})).into_response()
}

/// Whether the browser reached us over TLS (through a proxy that terminates it).
fn over_tls(headers: &HeaderMap) -> bool {
    let forwarded = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|p| p.trim().eq_ignore_ascii_case("https"));
    let origin = headers
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|o| o.starts_with("https://"));
    forwarded || origin
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_come_off_hosts_of_every_form() {
        assert_eq!(strip_port("localhost:8080"), "localhost");
        assert_eq!(strip_port("127.0.0.1"), "127.0.0.1");
        assert_eq!(strip_port("[::1]:9090"), "[::1]");
        assert_eq!(strip_port("[::1]"), "[::1]");
        assert_eq!(strip_port("example.com:x"), "example.com:x");
    }

    #[test]
    fn only_a_json_content_type_counts_as_json() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_str(v).unwrap());
            declared_json(&h)
        };
        assert!(with("application/json"));
        assert!(with("Application/JSON; charset=utf-8"));
        assert!(!with("application/x-www-form-urlencoded"));
        assert!(!with("text/plain"));
        assert!(!with("multipart/form-data; boundary=x"));
        assert!(!declared_json(&HeaderMap::new()));
    }
}
