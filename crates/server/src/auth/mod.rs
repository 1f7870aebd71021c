//! Who is calling: bearer API keys checked against hashes in the config, or the anonymous principal;
//! and the limits that apply to each principal.
//!
//! Only SHA-256 hashes of keys are kept. A key is `mcpt_` followed by 43 characters of base64url
//! (256 random bits); `mcp-tasks key new --principal NAME` makes one and prints the config entry.

pub mod oauth;
mod rate;

pub use rate::RateLimiter;
pub(crate) use rate::SESSIONS_OPENED;

use base64::Engine as _;
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// The principal of callers that presented no credentials.
pub const ANONYMOUS: &str = "anonymous";
/// The principal of the local user on stdio.
pub const LOCAL_USER: &str = "local-user";

/// Per-principal limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Unfinished tasks a principal may have at once (for anonymous callers: per session).
    pub max_running_tasks: usize,
    /// Task-management calls (task-augmented `tools/call`, `tasks/*`) per minute; `None` (the default):
    /// no limit. Unfinished tasks are capped either way (`max_running_tasks`).
    pub calls_per_minute: Option<u32>,
    /// Plain (non-task) tool calls running at once (for anonymous callers: per session, or per
    /// client address on the stateless wire).
    pub max_plain_calls: usize,
    /// Streams held open at once: 2025-11-25 GET streams, 2026-07-28 `subscriptions/listen` and
    /// blocking `tasks/result` together (for anonymous callers: per client address).
    pub max_streams: usize,
    /// Bytes of arguments the principal's tasks running on this node may hold together (for
    /// anonymous callers: per client address); a call past it is refused.
    pub max_running_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_running_tasks: 100,
            max_plain_calls: 16,
            max_streams: 128,
            max_running_bytes: 64 * 1024 * 1024,
            // Off by default: any rate that lets many clients on one address poll at full speed is more
            // than one machine serves, so it would bind nothing; configure one for exposed servers.
            calls_per_minute: None,
        }
    }
}

/// The sessions (2025-11-25 `initialize`) anonymous callers may open and hold. Keyed callers are
/// bound by their key; anonymous ones, who can open sessions without end, by these.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionBudget {
    /// Sessions one client address may open per minute (a minute's worth at once).
    pub per_minute_per_address: u32,
    /// Sessions all anonymous callers together may open per minute.
    pub per_minute: u32,
    /// Live sessions of one client address.
    pub max_per_address: usize,
    /// Live anonymous sessions in all.
    pub max: usize,
    /// An anonymous session unused this long ends (keyed sessions: after a day).
    pub idle: std::time::Duration,
}

impl Default for SessionBudget {
    fn default() -> Self {
        SessionBudget {
            per_minute_per_address: 60,
            per_minute: 1200,
            max_per_address: 100,
            max: 10_000,
            idle: std::time::Duration::from_secs(3600),
        }
    }
}

/// The group a client address is counted in for anonymous limits: an IPv4 address itself, an IPv6
/// address its /64 network (one host commonly holds a whole /64, and can pick a new address in it
/// for every connection). An IPv4-mapped IPv6 address counts as its IPv4 address.
pub fn client_group(address: std::net::IpAddr) -> String {
    use std::net::IpAddr;
    match address {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let s = v6.segments();
                let net = std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0);
                format!("{net}/64")
            }
        },
    }
}

/// One configured API key.
#[derive(Clone, Debug)]
pub struct ApiKey {
    /// The principal the key authenticates.
    pub principal: String,
    /// Lowercase hex SHA-256 of the key.
    pub sha256: String,
    /// Its limits.
    pub limits: Limits,
    /// The scopes the key grants, for tools that require scopes; `None`: every scope (a key is
    /// the operator's own grant).
    pub scopes: Option<Vec<String>>,
}

/// Authentication settings.
#[derive(Clone, Debug)]
pub struct AuthConfig {
    /// Configured keys.
    pub keys: Vec<ApiKey>,
    /// Whether callers without a key are served (as the anonymous principal).
    pub allow_anonymous: bool,
    /// Limits of anonymous callers, counted per client address (see [`client_group`]) and wire.
    pub anonymous_limits: Limits,
    /// What anonymous callers may open and hold: sessions, in total and per client address.
    pub anonymous_sessions: SessionBudget,
    /// Limits of the local user on stdio.
    pub local_limits: Limits,
    /// The keys (their `sha256`, as in [`ApiKey::sha256`]) that open the admin API and the
    /// dashboard (`operator = true`): the key, not its principal, so another key of the same
    /// principal does not. With no authentication configured at all (no keys, no OAuth), those are
    /// open to loopback callers only; OAuth users operate with `[auth.oauth] operator_scope`.
    pub operators: Vec<String>,
    /// Access tokens of an OAuth authorization server, accepted beside the API keys.
    pub oauth: Option<oauth::OAuthConfig>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            keys: Vec::new(),
            allow_anonymous: true,
            anonymous_limits: Limits::default(),
            anonymous_sessions: SessionBudget::default(),
            local_limits: Limits {
                max_running_tasks: 1000,
                calls_per_minute: None,
                max_plain_calls: 64,
                max_streams: 1024,
                max_running_bytes: 1024 * 1024 * 1024,
            },
            operators: Vec::new(),
            oauth: None,
        }
    }
}

/// A resolved caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// Its name (`anonymous` for callers without a key; `ISSUER#SUBJECT` for an OAuth user).
    pub name: String,
    /// Its limits.
    pub limits: Limits,
    /// The scopes it holds, for tools that require scopes: an access token's, or an API key's
    /// `scopes`; none for anonymous callers. `None`: not limited by scopes (an API key without
    /// `scopes`, the local user of stdio).
    pub scopes: Option<Vec<String>>,
}

impl Principal {
    /// Which of `required` this principal does not hold (empty: it may go on).
    pub fn missing_scopes<'a>(&self, required: &'a [String]) -> Vec<&'a str> {
        match &self.scopes {
            None => Vec::new(),
            Some(held) => required
                .iter()
                .filter(|r| !held.contains(r))
                .map(String::as_str)
                .collect(),
        }
    }
}

/// A `WWW-Authenticate: Bearer …` challenge (RFC 6750 section 3, with RFC 9728's
/// `resource_metadata`): what a 401 or a 403 tells the client to do next.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Challenge {
    /// `invalid_token`, `insufficient_scope`, or none (no credential was sent).
    pub error: Option<&'static str>,
    /// Why, for a person.
    pub description: Option<String>,
    /// The scopes to ask the authorization server for, space-separated.
    pub scope: Option<String>,
    /// Where this server's protected-resource metadata is (only with `[auth.oauth]`).
    pub resource_metadata: Option<String>,
}

impl Challenge {
    /// The header's value.
    pub fn header_value(&self) -> String {
        // Quoted-strings: no quotes, backslashes or control characters inside.
        let quote = |v: &str| -> String {
            v.chars()
                .map(|c| match c {
                    '"' | '\\' => '\'',
                    c if c.is_control() => ' ',
                    c => c,
                })
                .collect()
        };
        let mut params = Vec::new();
        if let Some(e) = self.error {
            params.push(format!("error=\"{e}\""));
        }
        if let Some(d) = &self.description {
            params.push(format!("error_description=\"{}\"", quote(d)));
        }
        if let Some(s) = &self.scope {
            params.push(format!("scope=\"{}\"", quote(s)));
        }
        if let Some(m) = &self.resource_metadata {
            params.push(format!("resource_metadata=\"{}\"", quote(m)));
        }
        if params.is_empty() {
            "Bearer".into()
        } else {
            format!("Bearer {}", params.join(", "))
        }
    }
}

/// Why a request was not authenticated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization` header and anonymous access is off.
    #[error("authentication required: send Authorization: Bearer <api key>")]
    Missing,
    /// The header is not `Bearer <token>`.
    #[error("malformed Authorization header: expected \"Bearer <api key>\"")]
    Malformed,
    /// The key is not configured.
    #[error("invalid API key")]
    Invalid,
    /// An OAuth access token that is not valid (and not an API key either).
    #[error("invalid access token: {0}")]
    Token(oauth::TokenError),
}

/// Why a caller may not use the admin API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OperatorRefusal {
    /// No credentials, or ones that are not valid (401).
    #[error("{0}")]
    Unauthenticated(String),
    /// Valid credentials of someone who is not an operator, or a caller the rule keeps out (403).
    #[error("{0}")]
    Forbidden(String),
    /// The credentials cannot be checked now: the OAuth issuer's key set is unreadable (503).
    #[error("{0}")]
    Unavailable(String),
}

/// Lowercase hex SHA-256 of a key.
pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// A new random API key.
pub fn generate_key() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random number generator failed");
    format!(
        "mcpt_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// Resolves callers from `Authorization` headers.
pub struct Authenticator {
    config: AuthConfig,
    by_hash: HashMap<String, usize>,
    tokens: Option<oauth::TokenVerifier>,
}

impl Authenticator {
    /// An authenticator over `config`.
    pub fn new(config: AuthConfig) -> Authenticator {
        let by_hash = config
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.sha256.to_ascii_lowercase(), i))
            .collect();
        let tokens = config.oauth.clone().map(oauth::TokenVerifier::new);
        Authenticator {
            config,
            by_hash,
            tokens,
        }
    }

    /// Fetches the OAuth issuer's key set ahead of the first token (see
    /// [`oauth::TokenVerifier::prefetch`]); a failure is logged, and tried again when tokens come (at
    /// most every [`oauth::RETRY_UNREADABLE_EVERY`]).
    pub async fn prefetch_keys(&self) {
        let Some(tokens) = &self.tokens else { return };
        match tokens.prefetch().await {
            Ok(n) => tracing::debug!(keys = n, "the OAuth issuer's key set is held"),
            Err(e) => tracing::warn!(
                issuer = %tokens.config().issuer,
                error = %e,
                "cannot read the OAuth issuer's key set yet: tokens that need it get 503 until it can be read"
            ),
        }
    }

    /// The OAuth settings, when access tokens are accepted.
    pub fn oauth(&self) -> Option<&oauth::OAuthConfig> {
        self.config.oauth.as_ref()
    }

    /// The principal behind an `Authorization` header value (or its absence): an API key's, else
    /// (with `[auth.oauth]`) an access token's user.
    pub async fn resolve(&self, authorization: Option<&str>) -> Result<Principal, AuthError> {
        match self.resolve_key(authorization) {
            Err(AuthError::Invalid) => {}
            other => return other,
        }
        let (Some(tokens), Some(value)) = (&self.tokens, authorization) else {
            return Err(AuthError::Invalid);
        };
        let token = value.trim().split_once(' ').map_or("", |(_, t)| t.trim());
        if !token.contains('.') {
            // Not shaped like a JWT: it was meant as an API key.
            return Err(AuthError::Invalid);
        }
        let t = tokens.verify(token).await.map_err(AuthError::Token)?;
        Ok(Principal {
            name: t.principal,
            limits: tokens.config().limits.clone(),
            scopes: Some(t.scopes),
        })
    }

    /// The principal behind an `Authorization` header value (or its absence), by API key only.
    pub fn resolve_key(&self, authorization: Option<&str>) -> Result<Principal, AuthError> {
        let Some(value) = authorization else {
            return if self.config.allow_anonymous {
                Ok(Principal {
                    name: ANONYMOUS.into(),
                    limits: self.config.anonymous_limits.clone(),
                    scopes: Some(Vec::new()),
                })
            } else {
                Err(AuthError::Missing)
            };
        };
        let key = self.key_of(value)?;
        Ok(Principal {
            name: key.principal.clone(),
            limits: key.limits.clone(),
            scopes: key.scopes.clone(),
        })
    }

    /// The configured key an `Authorization` value carries.
    fn key_of(&self, value: &str) -> Result<&ApiKey, AuthError> {
        let (scheme, token) = value.trim().split_once(' ').ok_or(AuthError::Malformed)?;
        if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
            return Err(AuthError::Malformed);
        }
        let i = self
            .by_hash
            .get(&hash_key(token.trim()))
            .ok_or(AuthError::Invalid)?;
        Ok(&self.config.keys[*i])
    }

    /// Whether any authentication is configured (API keys or `[auth.oauth]`). Without any, the
    /// admin API is open to loopback callers; with some, it takes an operator's credentials.
    pub fn configured(&self) -> bool {
        !self.config.keys.is_empty() || self.config.oauth.is_some()
    }

    /// Who may use the admin API, the dashboard and (unless public) the metrics:
    /// - with no authentication configured at all, any loopback caller (`loopback`), and nobody
    ///   else;
    /// - otherwise an operator: the principal of a key whose entry says `operator = true`, or an
    ///   OAuth user whose token carries `[auth.oauth] operator_scope`.
    ///
    /// `Err` says why not, and how the refusal is answered.
    pub async fn operator(
        &self,
        authorization: Option<&str>,
        loopback: bool,
    ) -> Result<String, OperatorRefusal> {
        self.operator_until(authorization, loopback)
            .await
            .map(|(who, _)| who)
    }

    /// [`Authenticator::operator`], and until when the credentials hold: an access token's `exp`
    /// (seconds since the Unix epoch); `None` for a key or a loopback caller.
    pub async fn operator_until(
        &self,
        authorization: Option<&str>,
        loopback: bool,
    ) -> Result<(String, Option<u64>), OperatorRefusal> {
        if !self.configured() {
            return if loopback {
                Ok(("loopback".into(), None))
            } else {
                Err(OperatorRefusal::Forbidden(
                    "no authentication is configured: the admin API is open to loopback callers only \
                     (configure an [[auth.keys]] entry with operator = true to open it to others)"
                        .into(),
                ))
            };
        }
        let Some(value) = authorization else {
            return Err(OperatorRefusal::Unauthenticated(
                "send an operator's credentials: Authorization: Bearer <operator key or access token>"
                    .into(),
            ));
        };
        // The key itself must be an operator's: another key of the same principal is not.
        match self.key_of(value) {
            Ok(key)
                if self
                    .config
                    .operators
                    .iter()
                    .any(|o| o.eq_ignore_ascii_case(&key.sha256)) =>
            {
                return Ok((key.principal.clone(), None))
            }
            Ok(key) => {
                return Err(OperatorRefusal::Forbidden(format!(
                    "this key of {} is not an operator's (set operator = true on its [[auth.keys]] \
                     entry)",
                    key.principal
                )))
            }
            Err(AuthError::Invalid) => {}
            Err(e) => return Err(OperatorRefusal::Unauthenticated(e.to_string())),
        }
        let token = value.trim().split_once(' ').map_or("", |(_, t)| t.trim());
        let Some(tokens) = self.tokens.as_ref().filter(|_| token.contains('.')) else {
            return Err(OperatorRefusal::Unauthenticated(
                AuthError::Invalid.to_string(),
            ));
        };
        let t = match tokens.verify(token).await {
            Ok(t) => t,
            Err(oauth::TokenError::KeySet(why)) => {
                return Err(OperatorRefusal::Unavailable(format!(
                    "access tokens cannot be checked right now: {why}"
                )))
            }
            Err(e) => {
                return Err(OperatorRefusal::Unauthenticated(
                    AuthError::Token(e).to_string(),
                ))
            }
        };
        match &tokens.config().operator_scope {
            Some(scope) if t.scopes.contains(scope) => Ok((t.principal, Some(t.expires_at))),
            Some(scope) => Err(OperatorRefusal::Forbidden(format!(
                "{} is not an operator: its token does not carry the operator scope {scope:?}",
                t.principal
            ))),
            None => Err(OperatorRefusal::Forbidden(format!(
                "{} is not an operator: no [auth.oauth] operator_scope is configured, so OAuth \
                 users cannot operate (use an operator\'s API key)",
                t.principal
            ))),
        }
    }

    /// What anonymous callers may open and hold.
    pub fn anonymous_sessions(&self) -> &SessionBudget {
        &self.config.anonymous_sessions
    }

    /// The local user of stdio.
    pub fn local_user(&self) -> Principal {
        Principal {
            name: LOCAL_USER.into(),
            limits: self.config.local_limits.clone(),
            scopes: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_address_is_counted_by_its_ipv4_address_or_its_ipv6_64() {
        let group = |a: &str| client_group(a.parse().unwrap());
        assert_eq!(group("203.0.113.7"), "203.0.113.7");
        assert_eq!(group("::ffff:203.0.113.7"), "203.0.113.7");
        assert_eq!(group("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
        assert_eq!(
            group("2001:db8:1:2:bbbb:cccc:dddd:eeee"),
            "2001:db8:1:2::/64"
        );
        assert_ne!(group("2001:db8:1:3::1"), group("2001:db8:1:2::1"));
        assert_eq!(group("::1"), "::/64");
    }

    #[test]
    fn calls_let_through_elsewhere_empty_the_bucket_here() {
        let here = RateLimiter::default();
        here.taken_elsewhere("k", 10, 60);
        assert!(
            here.check("k", 60).is_err(),
            "the other replica used the bucket"
        );
        let there = RateLimiter::default();
        there.check("k", 60).unwrap();
        assert!(there.drain_taken().is_empty(), "counted only when shared");
        there.share();
        there.check("k", 60).unwrap();
        there.check("k", 60).unwrap();
        assert_eq!(there.drain_taken(), vec![("k".to_string(), 2, 60)]);
        assert!(there.drain_taken().is_empty());
    }

    fn auth(anonymous: bool) -> Authenticator {
        Authenticator::new(AuthConfig {
            keys: vec![ApiKey {
                principal: "alice".into(),
                sha256: hash_key("secret-a"),
                limits: Limits::default(),
                scopes: None,
            }],
            allow_anonymous: anonymous,
            ..AuthConfig::default()
        })
    }

    #[test]
    fn keys_resolve_to_principals_and_bad_ones_do_not() {
        let a = auth(false);
        assert_eq!(
            a.resolve_key(Some("Bearer secret-a")).unwrap().name,
            "alice"
        );
        assert_eq!(
            a.resolve_key(Some("bearer   secret-a")).unwrap().name,
            "alice"
        );
        assert_eq!(a.resolve_key(Some("Bearer nope")), Err(AuthError::Invalid));
        assert_eq!(a.resolve_key(Some("Basic abc")), Err(AuthError::Malformed));
        assert_eq!(a.resolve_key(None), Err(AuthError::Missing));
        assert_eq!(auth(true).resolve_key(None).unwrap().name, ANONYMOUS);
    }

    #[tokio::test]
    async fn the_admin_api_is_open_without_credentials_only_to_loopback_and_only_without_auth() {
        let none = Authenticator::new(AuthConfig::default());
        assert_eq!(none.operator(None, true).await, Ok("loopback".into()));
        assert!(matches!(
            none.operator(None, false).await,
            Err(OperatorRefusal::Forbidden(_))
        ));
        let keyed = auth(true);
        for loopback in [true, false] {
            assert!(matches!(
                keyed.operator(None, loopback).await,
                Err(OperatorRefusal::Unauthenticated(_))
            ));
            assert!(matches!(
                keyed.operator(Some("Bearer secret-a"), loopback).await,
                Err(OperatorRefusal::Forbidden(_))
            ));
        }
        let oauth_only = Authenticator::new(AuthConfig {
            oauth: Some(oauth::OAuthConfig::new(
                "https://idp.example",
                "https://mcp.example/mcp",
            )),
            ..AuthConfig::default()
        });
        assert!(matches!(
            oauth_only.operator(None, true).await,
            Err(OperatorRefusal::Unauthenticated(_))
        ));
    }

    #[test]
    fn generated_keys_are_long_and_distinct() {
        let (a, b) = (generate_key(), generate_key());
        assert!(a.starts_with("mcpt_") && a.len() == 48);
        assert_ne!(a, b);
    }

    #[test]
    fn rate_limiter_allows_a_burst_then_refuses() {
        let r = RateLimiter::default();
        let allowed = (0..100).filter(|_| r.check("k", 60).is_ok()).count();
        assert_eq!(allowed, 10, "ten seconds' worth at 60/min");
        assert!(r.check("k", 60).unwrap_err() > 0);
        assert!(r.check("other", 60).is_ok(), "buckets are per key");
    }
}
