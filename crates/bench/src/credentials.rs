//! Who the load calls as, to measure what authenticating a request costs: no credentials (the
//! anonymous principal), an API key, or an OAuth access token (an RS256 JWT, one user per client).
//!
//! `serve-ours --auth` accepts all three: the key below, and tokens of a made-up issuer whose key
//! set it serves itself on loopback (the public half of the server crate's test key
//! `crates/server/tests/fixtures/oauth/rsa-a.pem`, which also signs the load's tokens).

use anyhow::{bail, Result};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use mcp_tasks_server::auth::oauth::OAuthConfig;
use mcp_tasks_server::auth::{hash_key, ApiKey, AuthConfig, Limits};
use serde_json::json;

/// The load's API key.
const KEY: &str = "mcpt_bench-key-for-loopback-only";
/// The issuer of the load's tokens (never fetched: the key set's address is configured).
const ISSUER: &str = "https://issuer.bench.invalid";
/// The audience of the load's tokens.
const AUDIENCE: &str = "https://mcp.bench.invalid/mcp";
/// The key id the tokens name.
const KID: &str = "bench-rsa";
/// The signing key (a test key of this repository, not a secret).
const PEM: &str = include_str!("../../server/tests/fixtures/oauth/rsa-a.pem");

/// What each client of the load presents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credential {
    /// Nothing: the anonymous principal.
    None,
    /// The API key.
    Key,
    /// An access token of its own user.
    Token,
}

impl Credential {
    /// `none`, `key` or `token`.
    pub fn parse(s: &str) -> Result<Credential> {
        Ok(match s {
            "none" => Credential::None,
            "key" => Credential::Key,
            "token" => Credential::Token,
            _ => bail!("--credential is none, key or token"),
        })
    }

    /// The `Authorization: Bearer` value of client `i`.
    pub fn bearer(self, i: usize) -> Result<Option<String>> {
        Ok(match self {
            Credential::None => None,
            Credential::Key => Some(KEY.to_string()),
            Credential::Token => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)?
                    .as_secs();
                let claims = json!({
                    "iss": ISSUER, "aud": AUDIENCE, "sub": format!("bench-{i}"),
                    "scope": "tasks", "iat": now, "exp": now + 3600,
                });
                let mut header = Header::new(Algorithm::RS256);
                header.kid = Some(KID.into());
                header.typ = Some("at+jwt".into());
                Some(jsonwebtoken::encode(&header, &claims, &signing_key()?)?)
            }
        })
    }
}

fn signing_key() -> Result<EncodingKey> {
    Ok(EncodingKey::from_rsa_pem(PEM.as_bytes())?)
}

/// Serves the issuer's key set on loopback; returns its URL.
pub async fn serve_key_set() -> Result<String> {
    let mut jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(&signing_key()?, Algorithm::RS256)?;
    jwk.common.key_id = Some(KID.into());
    let body = json!({ "keys": [jwk] }).to_string();
    let app = axum::Router::new().route(
        "/jwks",
        axum::routing::get(move || {
            let body = body.clone();
            async move {
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    body,
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/jwks", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(url)
}

/// Auth settings that take all three credentials, every limit lifted.
pub fn accept_all(jwks_url: String, limits: Limits) -> AuthConfig {
    AuthConfig {
        keys: vec![ApiKey {
            principal: "bench".into(),
            sha256: hash_key(KEY),
            limits: limits.clone(),
            scopes: None,
        }],
        allow_anonymous: true,
        anonymous_limits: limits.clone(),
        oauth: Some(OAuthConfig {
            jwks_url: Some(jwks_url),
            limits,
            ..OAuthConfig::new(ISSUER, AUDIENCE)
        }),
        ..AuthConfig::default()
    }
}
