//! OAuth 2.1 access tokens, as the MCP authorization spec's resource server checks them: JWTs (typed
//! `JWT` or `at+jwt`, RFC 9068) signed by the configured issuer with an allowed asymmetric algorithm,
//! for this server's audience, within their lifetime. The issuer's key set is fetched (from
//! `jwks_url`, or from the `jwks_uri` of the issuer's metadata), kept, and fetched again when a token
//! names a key it does not hold, at most once per [`REFRESH_AT_MOST_EVERY`]. A token that passed is
//! remembered for [`REMEMBER_FOR`] at most (never past its `exp`), so a client's next requests with
//! it cost a hash instead of a signature check.
//!
//! The principal of a token is its issuer and its principal claim (`sub` by default), so two
//! issuers' users never share a principal, nor does a token's user an API key's principal.

use base64::Engine as _;
use dashmap::DashMap;
use jsonwebtoken::jwk::JwkSet;
/// A signature algorithm (of `jsonwebtoken`, whose checks this module runs).
pub use jsonwebtoken::Algorithm;
use jsonwebtoken::{DecodingKey, Validation};
// `reqwest` keeps the useful part of a failure (refused, the certificate's issuer unknown) in the
// error's sources.
use mcp_tasks_engine::error_chain;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::Limits;

/// A key set is fetched again for an unknown `kid` at most this often: a client sending tokens
/// with made-up key ids cannot make the server hammer the issuer.
pub const REFRESH_AT_MOST_EVERY: Duration = Duration::from_secs(30);

/// While no key set is held because fetching it failed, it is tried again at most this often; the
/// tokens checked in between fail at once with the last failure, so an unreachable issuer neither
/// makes every request wait for a timeout nor gets a fetch per request.
pub const RETRY_UNREADABLE_EVERY: Duration = Duration::from_secs(5);

/// A token that passed every check is taken as checked when it comes again, for at most this long
/// and never past its `exp` (plus the leeway): a client sends the same token with each of its
/// requests, and checking its signature each time is most of what authenticating it costs.
pub const REMEMBER_FOR: Duration = Duration::from_secs(300);

/// How many checked tokens are remembered (by their SHA-256, never as themselves); past it the
/// expired ones are dropped, and all of them when that leaves it more than nine tenths full.
pub const REMEMBER_AT_MOST: usize = 10_000;

/// `[auth.oauth]`: the authorization server whose access tokens this server accepts.
#[derive(Clone, Debug, PartialEq)]
pub struct OAuthConfig {
    /// The issuer (`iss`) tokens must name, e.g. `https://idp.example.com/realms/main`.
    pub issuer: String,
    /// This server's resource identifier: the audience (`aud`) tokens must name, and the
    /// `resource` of its protected-resource metadata.
    pub audience: String,
    /// Where the issuer's key set is; `None`: the `jwks_uri` of its metadata.
    pub jwks_url: Option<String>,
    /// Signature algorithms accepted (RS256 and ES256 by default; never `none`, never HMAC).
    pub algorithms: Vec<Algorithm>,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
    /// The claim that names the user (`sub`).
    pub principal_claim: String,
    /// The claim that lists the token's scopes: a space-separated string (`scope`) or an array
    /// (`scp`).
    pub scopes_claim: String,
    /// Scopes this server knows, for its metadata's `scopes_supported`.
    pub scopes_supported: Vec<String>,
    /// Limits of each OAuth principal.
    pub limits: Limits,
    /// The scope that makes a token's user an operator (the admin API, the dashboard, the
    /// metrics); `None`: OAuth users never are.
    pub operator_scope: Option<String>,
}

impl OAuthConfig {
    /// Settings for tokens of `issuer` meant for `audience`, every other one at its default.
    pub fn new(issuer: impl Into<String>, audience: impl Into<String>) -> OAuthConfig {
        OAuthConfig {
            issuer: issuer.into(),
            audience: audience.into(),
            jwks_url: None,
            algorithms: vec![Algorithm::RS256, Algorithm::ES256],
            leeway: Duration::from_secs(60),
            principal_claim: "sub".into(),
            scopes_claim: "scope".into(),
            scopes_supported: Vec::new(),
            limits: Limits::default(),
            operator_scope: None,
        }
    }

    /// Why these settings cannot be used, if they cannot.
    pub fn check(&self) -> Result<(), String> {
        if self.issuer.trim().is_empty() || self.audience.trim().is_empty() {
            return Err("[auth.oauth] needs issuer and audience".into());
        }
        if self.algorithms.is_empty() {
            return Err("[auth.oauth] algorithms is empty: no token could be accepted".into());
        }
        if let Some(a) = self.algorithms.iter().find(|a| is_hmac(**a)) {
            return Err(format!(
                "[auth.oauth] algorithms: {a:?} is HMAC, a shared secret: an issuer's tokens are \
                 checked with its public keys (RS*, PS*, ES*, EdDSA)"
            ));
        }
        Ok(())
    }
}

fn is_hmac(a: Algorithm) -> bool {
    matches!(a, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512)
}

/// Parses an algorithm name of the config (`RS256`, `ES256`, …).
pub fn parse_algorithm(name: &str) -> Result<Algorithm, String> {
    if name.eq_ignore_ascii_case("none") {
        return Err("algorithm \"none\" is never accepted: a token must be signed".into());
    }
    let a: Algorithm = name
        .parse()
        .map_err(|_| format!("unknown signature algorithm {name:?}"))?;
    if is_hmac(a) {
        return Err(format!(
            "algorithm {name} is HMAC: an issuer's tokens are checked with its public keys"
        ));
    }
    Ok(a)
}

/// A valid access token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessToken {
    /// The principal: `ISSUER#CLAIM`.
    pub principal: String,
    /// Its scopes.
    pub scopes: Vec<String>,
    /// Its `exp`: seconds since the Unix epoch.
    pub expires_at: u64,
}

/// Why an access token was not accepted. The message is safe to show the client, except that of
/// [`TokenError::KeySet`], which is the server's problem and names its addresses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a JWT.
    #[error("the token is not a JWT: {0}")]
    Malformed(String),
    /// A `typ` other than `JWT` or `at+jwt`.
    #[error("the token's type {0:?} is not an access token (JWT or at+jwt)")]
    WrongType(String),
    /// An algorithm not in the config (or `none`).
    #[error("the token is signed with {0}, which this server does not accept")]
    Algorithm(String),
    /// No key of the issuer's key set has the token's `kid`.
    #[error("the token's key {0:?} is not in the issuer's key set")]
    UnknownKey(String),
    /// The signature does not verify.
    #[error("the token's signature does not verify")]
    BadSignature,
    /// Past `exp`.
    #[error("the token has expired")]
    Expired,
    /// Before `nbf`.
    #[error("the token is not valid yet")]
    NotYetValid,
    /// `aud` does not name this server.
    #[error("the token is not meant for this server (audience)")]
    WrongAudience,
    /// `iss` is not the configured issuer.
    #[error("the token was not issued by this server's authorization server (issuer)")]
    WrongIssuer,
    /// A claim the server needs is missing or of the wrong type.
    #[error("the token has no {0:?} claim")]
    MissingClaim(String),
    /// The key the token names is in the issuer's key set but cannot check a signature (a curve or
    /// parameters this server does not support).
    #[error("the issuer's key {0} cannot be used")]
    UnusableKey(String),
    /// The issuer's key set could not be fetched (the token is not at fault).
    #[error("the issuer's key set could not be read: {0}")]
    KeySet(String),
}

/// The key set as last fetched, and when.
#[derive(Default)]
struct Keys {
    set: Option<Arc<JwkSet>>,
}

/// Checks access tokens of one issuer.
pub struct TokenVerifier {
    config: OAuthConfig,
    refresh_every: Duration,
    http: reqwest::Client,
    keys: RwLock<Keys>,
    /// The last fetch of the key set; held while fetching, so one fetch serves all the requests
    /// that wait for it.
    fetched: tokio::sync::Mutex<LastFetch>,
    /// Tokens that passed, by the SHA-256 of the token.
    checked: DashMap<[u8; 32], Checked>,
    /// Counts the key sets fetched: a token remembered under an earlier one is checked again (a
    /// key may have been withdrawn), even one whose check raced with the fetch.
    generation: AtomicU64,
}

/// A token that passed, until when that holds, and the key set it was checked under.
struct Checked {
    token: AccessToken,
    until: Instant,
    generation: u64,
}

/// When the key set was last fetched (or tried), and why that failed if it did.
#[derive(Default)]
struct LastFetch {
    at: Option<Instant>,
    failed: Option<TokenError>,
}

impl TokenVerifier {
    /// A verifier for `config` (checked with [`OAuthConfig::check`] first).
    pub fn new(config: OAuthConfig) -> TokenVerifier {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        TokenVerifier {
            config,
            refresh_every: REFRESH_AT_MOST_EVERY,
            http,
            keys: RwLock::default(),
            fetched: tokio::sync::Mutex::default(),
            checked: DashMap::new(),
            generation: AtomicU64::new(0),
        }
    }

    /// Fetches the key set again for an unknown key at most this often instead of every
    /// [`REFRESH_AT_MOST_EVERY`] (tests).
    pub fn refresh_at_most_every(mut self, every: Duration) -> TokenVerifier {
        self.refresh_every = every;
        self
    }

    /// The settings.
    pub fn config(&self) -> &OAuthConfig {
        &self.config
    }

    /// Fetches the issuer's key set now unless one is held (at start, so the first caller does not
    /// wait for it, and a wrong issuer or key set address shows in the log at once). Returns how
    /// many keys it holds.
    pub async fn prefetch(&self) -> Result<usize, TokenError> {
        let mut fetched = self.fetched.lock().await;
        if let Some(set) = self.held() {
            return Ok(set.keys.len());
        }
        let set = self.fetch_into(&mut fetched).await?;
        Ok(set.keys.len())
    }

    /// How many checked tokens are remembered now.
    pub fn remembered(&self) -> usize {
        self.checked.len()
    }

    /// Checks `token`: its header, its key, its signature and claims (or finds it checked in the
    /// last [`REMEMBER_FOR`] and not expired since).
    pub async fn verify(&self, token: &str) -> Result<AccessToken, TokenError> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        // Read before any key is looked up: a fetch that lands during the check makes the entry
        // this check leaves behind stale.
        let generation = self.generation.load(Ordering::Acquire);
        let good = |c: &Checked| c.until > now && c.generation == generation;
        // The guard of `get` is dropped before `remove_if` (which would wait for it).
        let hit = self
            .checked
            .get(&digest)
            .map(|c| good(&c).then(|| c.token.clone()));
        match hit {
            Some(Some(token)) => return Ok(token),
            Some(None) => {
                self.checked.remove_if(&digest, |_, c| !good(c));
            }
            None => {}
        }
        let (checked, exp) = self.check(token).await?;
        self.remember(digest, &checked, exp, generation);
        Ok(checked)
    }

    /// Remembers `token` (of SHA-256 `digest`), checked under key set `generation`, valid until
    /// `exp` (seconds since the epoch) plus the leeway.
    fn remember(&self, digest: [u8; 32], token: &AccessToken, exp: u64, generation: u64) {
        let unix_now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let left = exp
            .saturating_add(self.config.leeway.as_secs())
            .saturating_sub(unix_now);
        let now = Instant::now();
        let until = now + Duration::from_secs(left).min(REMEMBER_FOR);
        if self.checked.len() >= REMEMBER_AT_MOST {
            let current = self.generation.load(Ordering::Acquire);
            self.checked
                .retain(|_, c| c.until > now && c.generation == current);
            // Not one full scan per new token while nearly all are live.
            if self.checked.len() >= REMEMBER_AT_MOST / 10 * 9 {
                self.checked.clear();
            }
        }
        self.checked.insert(
            digest,
            Checked {
                token: token.clone(),
                until,
                generation,
            },
        );
    }

    /// Checks `token` in full; the token and its `exp`.
    async fn check(&self, token: &str) -> Result<(AccessToken, u64), TokenError> {
        let header = raw_header(token)?;
        let alg_name = header
            .get("alg")
            .and_then(Value::as_str)
            .ok_or_else(|| TokenError::Malformed("its header has no \"alg\"".into()))?;
        let alg: Algorithm = alg_name
            .parse()
            .map_err(|_| TokenError::Algorithm(alg_name.to_string()))?;
        if !self.config.algorithms.contains(&alg) {
            return Err(TokenError::Algorithm(alg_name.to_string()));
        }
        if let Some(typ) = header.get("typ") {
            let typ = typ.as_str().unwrap_or_default();
            let t = typ.to_ascii_lowercase();
            if !matches!(t.as_str(), "jwt" | "at+jwt" | "application/at+jwt") {
                return Err(TokenError::WrongType(typ.to_string()));
            }
        }
        let kid = header.get("kid").and_then(Value::as_str);
        let key = self.key_for(kid, alg).await?;
        let mut validation = Validation::new(alg);
        validation.leeway = self.config.leeway.as_secs();
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation)
            .map_err(|e| {
                use jsonwebtoken::errors::ErrorKind as K;
                match e.kind() {
                    K::InvalidSignature => TokenError::BadSignature,
                    K::ExpiredSignature => TokenError::Expired,
                    K::ImmatureSignature => TokenError::NotYetValid,
                    K::InvalidAudience => TokenError::WrongAudience,
                    K::InvalidIssuer => TokenError::WrongIssuer,
                    K::MissingRequiredClaim(c) => TokenError::MissingClaim(c.clone()),
                    K::InvalidAlgorithm | K::InvalidAlgorithmName => {
                        TokenError::Algorithm(alg_name.to_string())
                    }
                    _ => TokenError::Malformed(e.to_string()),
                }
            })?
            .claims;
        let who = match claims.get(&self.config.principal_claim) {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => {
                return Err(TokenError::MissingClaim(
                    self.config.principal_claim.clone(),
                ))
            }
        };
        let scopes = match claims.get(&self.config.scopes_claim) {
            Some(Value::String(s)) => s.split_whitespace().map(String::from).collect(),
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect(),
            _ => Vec::new(),
        };
        // `exp` is required and was checked to be a number by the validation above.
        let exp = claims
            .get("exp")
            .and_then(|e| e.as_u64().or_else(|| e.as_f64().map(|f| f as u64)))
            .unwrap_or(0);
        Ok((
            AccessToken {
                principal: format!("{}#{who}", self.config.issuer),
                scopes,
                expires_at: exp,
            },
            exp,
        ))
    }

    /// The key a token of `alg` with `kid` is checked with: from the key set held, else from a fresh
    /// one (at most once per [`REFRESH_AT_MOST_EVERY`], or at once when none is held yet; after a
    /// failed fetch at most once per [`RETRY_UNREADABLE_EVERY`], that failure the answer meanwhile).
    async fn key_for(&self, kid: Option<&str>, alg: Algorithm) -> Result<DecodingKey, TokenError> {
        if let Some(key) = self.find(kid, alg)? {
            return Ok(key);
        }
        {
            let mut fetched = self.fetched.lock().await;
            // Another request may have fetched it while this one waited.
            if let Some(key) = self.find(kid, alg)? {
                return Ok(key);
            }
            let every = if fetched.failed.is_some() {
                RETRY_UNREADABLE_EVERY.min(self.refresh_every)
            } else {
                self.refresh_every
            };
            let due = fetched.at.is_none_or(|at| at.elapsed() >= every);
            if due {
                self.fetch_into(&mut fetched).await?;
            } else if let Some(e) = &fetched.failed {
                // Not `UnknownKey`: the key may well be in the set that cannot be read.
                return Err(e.clone());
            }
        }
        self.find(kid, alg)?
            .ok_or_else(|| TokenError::UnknownKey(kid.unwrap_or("(none)").to_string()))
    }

    /// Fetches the key set now, keeps it, and notes the attempt in `last`.
    async fn fetch_into(&self, last: &mut LastFetch) -> Result<Arc<JwkSet>, TokenError> {
        let result = self.fetch().await;
        // When it ended, not began: the requests that waited for a slow failure (up to the
        // timeout per address) take its answer instead of each trying again.
        last.at = Some(Instant::now());
        match result {
            Ok(set) => {
                let set = Arc::new(set);
                if let Ok(mut k) = self.keys.write() {
                    k.set = Some(set.clone());
                }
                // A key may be gone from the new set: its tokens are checked again.
                self.generation.fetch_add(1, Ordering::Release);
                self.checked.clear();
                last.failed = None;
                Ok(set)
            }
            Err(e) => {
                last.failed = Some(e.clone());
                Err(e)
            }
        }
    }

    fn held(&self) -> Option<Arc<JwkSet>> {
        self.keys.read().ok().and_then(|k| k.set.clone())
    }

    /// The held key for `kid` (without a `kid`: the only key usable with `alg`).
    fn find(&self, kid: Option<&str>, alg: Algorithm) -> Result<Option<DecodingKey>, TokenError> {
        let Some(set) = self.held() else {
            return Ok(None);
        };
        let jwk = match kid {
            Some(kid) => set.find(kid),
            None => {
                let usable: Vec<_> = set
                    .keys
                    .iter()
                    .filter(|k| DecodingKey::from_jwk(k).is_ok() && key_fits(k, alg))
                    .collect();
                match usable.as_slice() {
                    [one] => Some(*one),
                    _ => None,
                }
            }
        };
        let Some(jwk) = jwk else {
            return Ok(None);
        };
        if !key_fits(jwk, alg) {
            return Err(TokenError::Algorithm(format!(
                "{alg:?} with a key not meant for it"
            )));
        }
        DecodingKey::from_jwk(jwk).map(Some).map_err(|e| {
            TokenError::UnusableKey(format!(
                "{}: {e}",
                jwk.common.key_id.as_deref().unwrap_or("(no kid)")
            ))
        })
    }

    /// Fetches the key set (finding its address in the issuer's metadata first when not configured).
    async fn fetch(&self) -> Result<JwkSet, TokenError> {
        let url = match &self.config.jwks_url {
            Some(u) => u.clone(),
            None => self.discover_jwks_url().await?,
        };
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| TokenError::KeySet(format!("GET {url}: {}", error_chain(&e))))?;
        if !resp.status().is_success() {
            return Err(TokenError::KeySet(format!(
                "GET {url}: HTTP {}",
                resp.status()
            )));
        }
        let set: JwkSet = resp.json().await.map_err(|e| {
            TokenError::KeySet(format!("{url}: not a JWK set: {}", error_chain(&e)))
        })?;
        tracing::info!(url = %url, keys = set.keys.len(), "fetched the OAuth issuer's key set");
        Ok(set)
    }

    /// The `jwks_uri` of the issuer's metadata: RFC 8414's well-known address, else OpenID
    /// Connect's.
    async fn discover_jwks_url(&self) -> Result<String, TokenError> {
        let mut tried = Vec::new();
        for url in metadata_urls(&self.config.issuer) {
            let found = async {
                let resp = self
                    .http
                    .get(&url)
                    .send()
                    .await
                    .map_err(|e| error_chain(&e))?;
                if !resp.status().is_success() {
                    return Err(format!("HTTP {}", resp.status()));
                }
                let meta: Value = resp.json().await.map_err(|e| error_chain(&e))?;
                meta.get("jwks_uri")
                    .and_then(Value::as_str)
                    .map(String::from)
                    .ok_or_else(|| "no jwks_uri".to_string())
            }
            .await;
            match found {
                Ok(u) => return Ok(u),
                Err(why) => tried.push(format!("{url}: {why}")),
            }
        }
        Err(TokenError::KeySet(format!(
            "no jwks_uri in the issuer's metadata (tried {}); set [auth.oauth] jwks_url",
            tried.join("; ")
        )))
    }
}

/// Where an issuer's metadata may be: RFC 8414 (the well-known part between the host and the
/// issuer's path), then OpenID Connect Discovery (appended to the issuer).
pub fn metadata_urls(issuer: &str) -> Vec<String> {
    let issuer = issuer.trim_end_matches('/');
    let (origin, path) = split_origin(issuer);
    vec![
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{issuer}/.well-known/openid-configuration"),
    ]
}

/// Where the protected-resource metadata (RFC 9728) of `resource` is: its origin, the well-known
/// name, then its path (`https://h/mcp` → `https://h/.well-known/oauth-protected-resource/mcp`).
pub fn resource_metadata_url(resource: &str) -> String {
    let r = resource.trim_end_matches('/');
    let (origin, path) = split_origin(r);
    format!("{origin}/.well-known/oauth-protected-resource{path}")
}

/// A URL's origin and its path (with its leading slash; empty when it has none).
fn split_origin(url: &str) -> (&str, &str) {
    match url.find("://").map(|i| i + 3) {
        Some(start) => match url[start..].find('/') {
            Some(p) => url.split_at(start + p),
            None => (url, ""),
        },
        None => (url, ""),
    }
}

/// Whether `jwk` may check a signature of `alg`: its own `alg`, when it names one, is that one.
fn key_fits(jwk: &jsonwebtoken::jwk::Jwk, alg: Algorithm) -> bool {
    use jsonwebtoken::jwk::AlgorithmParameters as P;
    let family_ok = match &jwk.algorithm {
        P::RSA(_) => matches!(
            alg,
            Algorithm::RS256
                | Algorithm::RS384
                | Algorithm::RS512
                | Algorithm::PS256
                | Algorithm::PS384
                | Algorithm::PS512
        ),
        P::EllipticCurve(_) => matches!(alg, Algorithm::ES256 | Algorithm::ES384),
        P::OctetKeyPair(_) => alg == Algorithm::EdDSA,
        // A symmetric key never checks an issuer's token.
        P::OctetKey(_) => false,
    };
    let named = jwk
        .common
        .key_algorithm
        .map(|k| format!("{k:?}") == format!("{alg:?}"));
    family_ok && named != Some(false)
}

/// The token's header as JSON (before anything is trusted): to read `alg` as written, so that
/// `none` and unknown names are refused by name.
fn raw_header(token: &str) -> Result<Map<String, Value>, TokenError> {
    let mut parts = token.split('.');
    let (Some(head), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed(
            "it is not three base64url parts separated by dots".into(),
        ));
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(head.trim_end_matches('='))
        .map_err(|_| TokenError::Malformed("its header is not base64url".into()))?;
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(TokenError::Malformed(
            "its header is not a JSON object".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_looked_for_where_rfc_8414_and_openid_connect_put_it() {
        assert_eq!(
            metadata_urls("https://idp.example.com/realms/main/"),
            [
                "https://idp.example.com/.well-known/oauth-authorization-server/realms/main",
                "https://idp.example.com/realms/main/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            metadata_urls("http://127.0.0.1:9000"),
            [
                "http://127.0.0.1:9000/.well-known/oauth-authorization-server",
                "http://127.0.0.1:9000/.well-known/openid-configuration",
            ]
        );
    }

    #[test]
    fn none_and_hmac_are_refused_in_the_config() {
        assert!(parse_algorithm("none").unwrap_err().contains("never"));
        assert!(parse_algorithm("HS256").unwrap_err().contains("HMAC"));
        assert!(parse_algorithm("XX1").is_err());
        assert_eq!(parse_algorithm("ES256"), Ok(Algorithm::ES256));
        let mut c = OAuthConfig::new("https://i", "https://r/mcp");
        assert_eq!(c.check(), Ok(()));
        c.algorithms.push(Algorithm::HS256);
        assert!(c.check().unwrap_err().contains("HMAC"));
    }

    #[tokio::test]
    async fn a_remembered_token_is_taken_without_being_checked_again() {
        // No issuer behind it: a token that is not remembered could not be checked at all.
        let v = TokenVerifier::new(OAuthConfig::new("http://127.0.0.1:1", "http://127.0.0.1:9"));
        let token = "header.claims.signature";
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let alice = AccessToken {
            principal: "http://127.0.0.1:1#alice".into(),
            scopes: vec!["a".into()],
            expires_at: 0,
        };
        let in_an_hour = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 3600;
        v.remember(digest, &alice, in_an_hour, 0);
        assert_eq!(v.verify(token).await, Ok(alice.clone()));
        // Under an earlier key set it is not taken (and is dropped).
        v.generation.fetch_add(1, Ordering::Release);
        assert!(v.verify(token).await.is_err());
        assert_eq!(v.remembered(), 0);
        // One that expired (past the leeway too) is not taken either.
        v.remember(digest, &alice, in_an_hour - 3600 - 120, 1);
        assert!(v.verify(token).await.is_err());
        assert_eq!(v.remembered(), 0);
        // Full: the expired ones and those of earlier key sets go, and all when that frees little.
        v.remember(digest, &alice, in_an_hour, 0);
        v.remember([7; 32], &alice, in_an_hour - 3600 - 120, 1);
        for i in 2..REMEMBER_AT_MOST {
            let d: [u8; 32] = Sha256::digest(i.to_string().as_bytes()).into();
            v.remember(d, &alice, in_an_hour, 1);
        }
        assert_eq!(v.remembered(), REMEMBER_AT_MOST);
        v.remember([8; 32], &alice, in_an_hour, 1);
        assert_eq!(v.remembered(), 1);
        for i in 1..REMEMBER_AT_MOST / 2 {
            let d: [u8; 32] = Sha256::digest(i.to_string().as_bytes()).into();
            v.remember(d, &alice, in_an_hour - 3600 - 120, 1);
        }
        for i in REMEMBER_AT_MOST / 2..REMEMBER_AT_MOST {
            let d: [u8; 32] = Sha256::digest(i.to_string().as_bytes()).into();
            v.remember(d, &alice, in_an_hour, 1);
        }
        assert_eq!(v.remembered(), REMEMBER_AT_MOST);
        v.remember(digest, &alice, in_an_hour, 1);
        assert_eq!(
            v.remembered(),
            REMEMBER_AT_MOST / 2 + 2,
            "only the expired went"
        );
        assert_eq!(v.verify(token).await, Ok(alice));
    }

    #[tokio::test]
    async fn alg_none_and_garbage_are_refused_before_any_key_is_fetched() {
        let v = TokenVerifier::new(OAuthConfig {
            jwks_url: Some("http://127.0.0.1:1/never".into()),
            ..OAuthConfig::new("https://i", "https://r/mcp")
        });
        let b64 = |v: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        let none = format!(
            "{}.{}.",
            b64(serde_json::json!({"alg": "none", "typ": "JWT"})),
            b64(
                serde_json::json!({"sub": "x", "iss": "https://i", "aud": "https://r/mcp", "exp": 9999999999u64})
            )
        );
        assert_eq!(
            v.verify(&none).await,
            Err(TokenError::Algorithm("none".into()))
        );
        let hs = format!("{}.e30.c2ln", b64(serde_json::json!({"alg": "HS256"})));
        assert_eq!(
            v.verify(&hs).await,
            Err(TokenError::Algorithm("HS256".into()))
        );
        assert!(matches!(
            v.verify("abc").await,
            Err(TokenError::Malformed(_))
        ));
        let typ = format!(
            "{}.e30.c2ln",
            b64(serde_json::json!({"alg": "RS256", "typ": "dpop+jwt"}))
        );
        assert_eq!(
            v.verify(&typ).await,
            Err(TokenError::WrongType("dpop+jwt".into()))
        );
    }
}
