//! A small OAuth authorization server on loopback for the OAuth tests: it serves its metadata
//! (RFC 8414) and its key set, and signs access tokens with the test keys in `tests/fixtures/oauth`
//! (RS256 and ES256). Keys can be added to the set while it runs (a rotation), and it counts how
//! often the key set was fetched.
#![allow(dead_code)]

use axum::routing::get;
use axum::Json;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
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
        let path = format!(
            "{}/tests/fixtures/oauth/{name}.pem",
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

/// The running authorization server.
pub struct AuthServer {
    /// Its issuer identifier (its base URL).
    pub issuer: String,
    published: Arc<Mutex<Vec<Jwk>>>,
    fetches: Arc<AtomicUsize>,
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
    /// Starts one publishing `keys`.
    pub async fn start(keys: &[&Key]) -> AuthServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let issuer = format!("http://{}", listener.local_addr().unwrap());
        let published = Arc::new(Mutex::new(keys.iter().map(|k| k.jwk()).collect::<Vec<_>>()));
        let fetches = Arc::new(AtomicUsize::new(0));
        let meta = json!({
            "issuer": issuer,
            "jwks_uri": format!("{issuer}/jwks"),
            "token_endpoint": format!("{issuer}/token"),
            "grant_types_supported": ["client_credentials"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "response_types_supported": ["code"],
        });
        let (set, count) = (published.clone(), fetches.clone());
        let app = axum::Router::new()
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
                    async move { Json(JwkSet { keys }) }
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
            stop: Some(tx),
        }
    }

    /// Adds `key` to the published set (a key rotation).
    pub fn publish(&self, key: &Key) {
        self.published.lock().unwrap().push(key.jwk());
    }

    /// How often the key set was fetched.
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
