//! A small OAuth authorization server on loopback for the OAuth tests: it serves its metadata
//! (RFC 8414) and its key set, and signs access tokens with the test keys in `tests/fixtures/oauth`
//! (RS256 and ES256). Keys can be added to the set while it runs (a rotation), and it counts how
//! often the key set was fetched. Its token endpoint grants client credentials (RFC 6749 section
//! 4.4) to registered clients, for the scopes each may have, with the audience a client names in
//! `resource` (RFC 8707): the access token's subject is the client.
//!
//! Used by `crates/server/tests` and, through `#[path]`, by `crates/cli/tests`.
#![allow(dead_code)]

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Json};
use base64::Engine as _;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A signing key of the test server.
#[derive(Clone)]
pub struct Key {
    pub kid: String,
    pub alg: Algorithm,
    encoding: EncodingKey,
}

impl Key {
    /// A fixture key (`rsa-a`, `rsa-b`, `ec-a`) as `kid`.
    pub fn fixture(name: &str, kid: &str) -> Key {
        // From the server crate's fixtures, whichever crate's tests include this file.
        let path = format!(
            "{}/../server/tests/fixtures/oauth/{name}.pem",
            env!("CARGO_MANIFEST_DIR")
        );
        let pem = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let (alg, encoding) = if name.starts_with("ec") {
            (Algorithm::ES256, EncodingKey::from_ec_pem(&pem).unwrap())
        } else {
            (Algorithm::RS256, EncodingKey::from_rsa_pem(&pem).unwrap())
        };
        Key {
            kid: kid.into(),
            alg,
            encoding,
        }
    }

    /// Its public half as a JWK.
    pub fn jwk(&self) -> Jwk {
        let mut jwk = Jwk::from_encoding_key(&self.encoding, self.alg).unwrap();
        jwk.common.key_id = Some(self.kid.clone());
        jwk
    }
}

/// A client registered for the client-credentials grant.
#[derive(Clone)]
struct ClientCredentials {
    secret: String,
    scopes: Vec<String>,
}

/// What the token endpoint needs: the clients, the key it signs with, what it has issued.
struct Tokens {
    issuer: String,
    signer: Key,
    clients: Mutex<HashMap<String, ClientCredentials>>,
    /// (client, scope) of every token issued.
    issued: Mutex<Vec<(String, String)>>,
}

/// The running authorization server.
pub struct AuthServer {
    /// Its issuer identifier (its base URL).
    pub issuer: String,
    published: Arc<Mutex<Vec<Jwk>>>,
    fetches: Arc<AtomicUsize>,
    down: Arc<AtomicBool>,
    delay_ms: Arc<AtomicU64>,
    tokens: Arc<Tokens>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

impl AuthServer {
    /// Starts one publishing `keys`; it signs the tokens of its token endpoint with the first.
    pub async fn start(keys: &[&Key]) -> AuthServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let issuer = format!("http://{}", listener.local_addr().unwrap());
        let published = Arc::new(Mutex::new(keys.iter().map(|k| k.jwk()).collect::<Vec<_>>()));
        let fetches = Arc::new(AtomicUsize::new(0));
        let down = Arc::new(AtomicBool::new(false));
        let delay_ms = Arc::new(AtomicU64::new(0));
        let meta = json!({
            "issuer": issuer,
            "jwks_uri": format!("{issuer}/jwks"),
            "token_endpoint": format!("{issuer}/token"),
            // Required by RFC 8414 (and the SDKs' metadata schemas); nothing is served there.
            "authorization_endpoint": format!("{issuer}/authorize"),
            "code_challenge_methods_supported": ["S256"],
            "grant_types_supported": ["client_credentials"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "response_types_supported": ["code"],
        });
        let (set, count, outage, slow) = (
            published.clone(),
            fetches.clone(),
            down.clone(),
            delay_ms.clone(),
        );
        let tokens = Arc::new(Tokens {
            issuer: issuer.clone(),
            signer: keys[0].clone(),
            clients: Mutex::default(),
            issued: Mutex::default(),
        });
        let grants = tokens.clone();
        let app = axum::Router::new()
            .route(
                "/token",
                post(
                    move |headers: HeaderMap, Form(form): Form<HashMap<String, String>>| {
                        let grants = grants.clone();
                        async move { grants.grant(&headers, &form) }
                    },
                ),
            )
            .route(
                "/.well-known/oauth-authorization-server",
                get(move || {
                    let meta = meta.clone();
                    async move { Json(meta) }
                }),
            )
            .route(
                "/jwks",
                get(move || {
                    count.fetch_add(1, Ordering::SeqCst);
                    let keys = set.lock().unwrap().clone();
                    let down = outage.load(Ordering::SeqCst);
                    let delay = std::time::Duration::from_millis(slow.load(Ordering::SeqCst));
                    async move {
                        tokio::time::sleep(delay).await;
                        if down {
                            StatusCode::SERVICE_UNAVAILABLE.into_response()
                        } else {
                            Json(JwkSet { keys }).into_response()
                        }
                    }
                }),
            );
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        AuthServer {
            issuer,
            published,
            fetches,
            down,
            delay_ms,
            tokens,
            stop: Some(tx),
        }
    }

    /// Registers a client of the client-credentials grant that may ask for `scopes`.
    pub fn register(&self, client_id: &str, secret: &str, scopes: &[&str]) {
        self.tokens.clients.lock().unwrap().insert(
            client_id.into(),
            ClientCredentials {
                secret: secret.into(),
                scopes: scopes.iter().map(|s| s.to_string()).collect(),
            },
        );
    }

    /// The (client, scope) of every token the token endpoint issued, in order.
    pub fn issued(&self) -> Vec<(String, String)> {
        self.tokens.issued.lock().unwrap().clone()
    }

    /// Adds `key` to the published set (a key rotation).
    pub fn publish(&self, key: &Key) {
        self.published.lock().unwrap().push(key.jwk());
    }

    /// Makes its key set answer 503 (an outage) or serve the keys again.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Makes its key set answer only after `delay` (a slow or hanging identity provider).
    pub fn set_delay(&self, delay: std::time::Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// How often the key set was fetched (or tried, during an outage).
    pub fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }

    /// Claims of a token for `sub` meant for `audience`, valid for an hour from now.
    pub fn claims(&self, sub: &str, audience: &str, scope: &str) -> Map<String, Value> {
        let now = now();
        let v = json!({
            "iss": self.issuer, "sub": sub, "aud": audience, "scope": scope,
            "iat": now, "exp": now + 3600, "client_id": "test-client",
        });
        v.as_object().unwrap().clone()
    }
}

impl Tokens {
    /// The token endpoint: client credentials only, the client authenticated by HTTP Basic
    /// (`client_secret_basic`) or in the form (`client_secret_post`).
    fn grant(&self, headers: &HeaderMap, form: &HashMap<String, String>) -> Response {
        let oauth_error = |status: StatusCode, error: &str, why: &str| {
            (
                status,
                Json(json!({"error": error, "error_description": why})),
            )
                .into_response()
        };
        if form.get("grant_type").map(String::as_str) != Some("client_credentials") {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
                "only client_credentials",
            );
        }
        let basic = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Basic "))
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .and_then(|b| String::from_utf8(b).ok())
            // RFC 6749 section 2.3.1 form-urlencodes both parts; the tests' ids and secrets are
            // plain letters and digits, the same either way.
            .and_then(|s| {
                let (id, secret) = s.split_once(':')?;
                Some((id.to_string(), secret.to_string()))
            });
        let (id, secret) = match (basic, form.get("client_id"), form.get("client_secret")) {
            (Some(pair), _, _) => pair,
            (None, Some(id), Some(secret)) => (id.clone(), secret.clone()),
            _ => {
                return oauth_error(
                    StatusCode::UNAUTHORIZED,
                    "invalid_client",
                    "no client credentials",
                )
            }
        };
        let Some(client) = self.clients.lock().unwrap().get(&id).cloned() else {
            return oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", "unknown client");
        };
        if client.secret != secret {
            return oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", "wrong secret");
        }
        let asked: Vec<&str> = form
            .get("scope")
            .map(|s| s.split_whitespace().collect())
            .unwrap_or_default();
        if let Some(no) = asked
            .iter()
            .find(|s| !client.scopes.iter().any(|c| c == *s))
        {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_scope",
                &format!("{id} may not have {no}"),
            );
        }
        let Some(resource) = form.get("resource") else {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_target",
                "name the resource (RFC 8707)",
            );
        };
        let scope = asked.join(" ");
        let now = now();
        let claims = json!({
            "iss": self.issuer, "sub": id, "aud": resource, "scope": scope,
            "iat": now, "exp": now + 3600, "client_id": id,
        });
        let token = sign(&self.signer, "at+jwt", claims.as_object().unwrap());
        self.issued.lock().unwrap().push((id, scope.clone()));
        Json(json!({
            "access_token": token, "token_type": "Bearer", "expires_in": 3600, "scope": scope,
        }))
        .into_response()
    }
}

/// Seconds since the epoch.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// `claims` signed with `key`, typed `typ` (`at+jwt`, `JWT`).
pub fn sign(key: &Key, typ: &str, claims: &Map<String, Value>) -> String {
    let mut header = Header::new(key.alg);
    header.kid = Some(key.kid.clone());
    header.typ = Some(typ.into());
    jsonwebtoken::encode(&header, claims, &key.encoding).unwrap()
}
