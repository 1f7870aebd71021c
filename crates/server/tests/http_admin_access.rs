//! Who reaches the operator's routes (issue 26, items 1–3), over real HTTP with the admin routes
//! next to `/mcp`: every admin route, the dashboard and the metrics in each authentication setup
//! (none, API keys, OAuth, both); a non-operator key and an OAuth user without the operator scope
//! get 403, no credentials 401; health probes stay public; a foreign `Origin`, a foreign `Host` and
//! a form-encoded POST are refused; the login cookie's flags, and no cookie for an empty key.

mod support;

#[path = "support/authz.rs"]
mod authz;

use authz::{sign, AuthServer, Key};
use mcp_tasks_server::auth::oauth::OAuthConfig;
use mcp_tasks_server::auth::{hash_key, ApiKey, AuthConfig, Limits};
use mcp_tasks_server::{Server, ServerConfig};
use std::sync::Arc;

/// Which authentication the server has.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Setup {
    None,
    Keys,
    OAuth,
    Both,
}

struct Running {
    base: String,
    server: support::TestServer,
    idp: Option<(AuthServer, Key)>,
}

impl Running {
    /// An access token of `sub` granting `scope`, for this server.
    fn token(&self, sub: &str, scope: &str) -> String {
        let (idp, signer) = self.idp.as_ref().expect("an OAuth setup");
        sign(signer, "at+jwt", &idp.claims(sub, &self.server.url, scope))
    }
}

/// A server in `setup`: keys `key-ops` (an operator) and `key-alice` (not); OAuth tokens with
/// `admin` as the operator scope.
async fn start(setup: Setup, metrics_public: Option<bool>) -> Running {
    let (listener, url) = support::bind().await;
    // `key-NAME` is NAME's key; `key-ops-ci` is another key of the principal ops, not an
    // operator's.
    let key = |who: &str, key: &str, operator: bool| {
        (
            ApiKey {
                principal: who.into(),
                sha256: hash_key(key),
                limits: Limits::default(),
                scopes: None,
            },
            operator.then(|| hash_key(key)),
        )
    };
    let mut auth = AuthConfig::default();
    if matches!(setup, Setup::Keys | Setup::Both) {
        for (k, op) in [
            key("ops", "key-ops", true),
            key("ops", "key-ops-ci", false),
            key("alice", "key-alice", false),
        ] {
            auth.keys.push(k);
            auth.operators.extend(op);
        }
    }
    let mut idp = None;
    if matches!(setup, Setup::OAuth | Setup::Both) {
        let signer = Key::fixture("rsa-a", "r1");
        let server = AuthServer::start(&[&signer]).await;
        auth.oauth = Some(OAuthConfig {
            operator_scope: Some("admin".into()),
            ..OAuthConfig::new(&server.issuer, &url)
        });
        idp = Some((server, signer));
    }
    auth.allow_anonymous = setup == Setup::None;
    let config = ServerConfig {
        auth,
        metrics_public,
        ..ServerConfig::default()
    };
    let server = serve(listener, url, config).await;
    Running {
        base: server.url.trim_end_matches("/mcp").to_string(),
        server,
        idp,
    }
}

/// A demo server with `config`, its operator's routes next to `/mcp`.
async fn serve(
    listener: tokio::net::TcpListener,
    url: String,
    config: ServerConfig,
) -> support::TestServer {
    let b = Server::builder(
        Arc::new(mcp_tasks_engine::store::memory::MemoryStore::new()),
        support::fast_engine(),
        config,
    )
    .demo()
    .unwrap();
    support::serve_with_admin_on(b.build(), listener, url).await
}

/// Every operator's route: (method, path, status an operator gets). The task ids name no task,
/// so an operator's show and cancel get 404 (past the check), never 401 or 403.
const ROUTES: &[(&str, &str, u16)] = &[
    ("GET", "/admin/api/tasks", 200),
    ("GET", "/admin/api/tasks/0123456789abcdef", 404),
    ("POST", "/admin/api/tasks/0123456789abcdef/cancel", 404),
    ("POST", "/admin/api/purge?finished_before_ms=0", 200),
    ("GET", "/admin/api/summary", 200),
    ("GET", "/admin/api/events", 200),
    ("GET", "/admin/api/me", 200),
    ("GET", "/ui", 200),
];

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(20))
        .build()
        .unwrap()
}

/// The status of `method path` sent with `authorization` (and a JSON body for a POST).
/// GET `url` (with `cookie`, when given): its body as JSON.
async fn get_json(url: &str, cookie: Option<&str>) -> serde_json::Value {
    let mut req = http().get(url);
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    req.send().await.unwrap().json().await.unwrap()
}

async fn status(base: &str, method: &str, path: &str, authorization: Option<&str>) -> u16 {
    let mut rb = http().request(method.parse().unwrap(), format!("{base}{path}"));
    if method == "POST" {
        rb = rb.header("content-type", "application/json").body("{}");
    }
    if let Some(a) = authorization {
        rb = rb.header("authorization", a);
    }
    rb.send().await.unwrap().status().as_u16()
}

/// Asserts what each route answers to `authorization`: `Some(code)` for a refusal on every route,
/// `None` for an operator (each route's own status).
async fn every_route(r: &Running, authorization: Option<&str>, refused: Option<u16>) {
    for (method, path, ok) in ROUTES {
        let got = status(&r.base, method, path, authorization).await;
        let want = refused.unwrap_or(*ok);
        assert_eq!(
            got, want,
            "{method} {path} with {authorization:?}: got {got}, want {want}"
        );
    }
    for path in ["/healthz", "/readyz"] {
        assert_eq!(
            status(&r.base, "GET", path, authorization).await,
            200,
            "{path} stays public"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_authentication_loopback_callers_operate_and_metrics_are_public() {
    let r = start(Setup::None, None).await;
    every_route(&r, None, None).await;
    // A header sent anyway changes nothing: there is nothing to check it against.
    every_route(&r, Some("Bearer whatever"), None).await;
    // Behind a proxy on this host every caller is loopback: a forwarded request is not local.
    for header in ["x-forwarded-for", "forwarded", "x-real-ip"] {
        let resp = http()
            .get(format!("{}/admin/api/tasks", r.base))
            .header(header, "for=203.0.113.9")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 403, "{header}");
    }
    assert_eq!(status(&r.base, "GET", "/metrics", None).await, 200);
    // Nothing to log in to, so no cookie either.
    let login = http()
        .post(format!("{}/admin/login", r.base))
        .header("content-type", "application/json")
        .body(r#"{"key":""}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), 400);
    assert!(login.headers().get("set-cookie").is_none());
    // So the dashboard shows no "Log out" (it shows it only to a logged-in browser).
    let me = get_json(&format!("{}/admin/api/me", r.base), None).await;
    assert_eq!(me["loggedIn"], false, "{me}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_keys_only_an_operators_key_opens_the_admin_routes_and_metrics() {
    let r = start(Setup::Keys, None).await;
    every_route(&r, None, Some(401)).await;
    every_route(&r, Some("Bearer not-a-key"), Some(401)).await;
    every_route(&r, Some("Bearer key-alice"), Some(403)).await;
    // The key decides, not its principal: ops's other key is not an operator's.
    every_route(&r, Some("Bearer key-ops-ci"), Some(403)).await;
    every_route(&r, Some("Bearer key-ops"), None).await;
    // Readiness is public, its reasons are the operator's.
    let ready = get_json(&format!("{}/readyz", r.base), None).await;
    assert_eq!(ready["status"], "ready", "{ready}");
    assert_eq!(status(&r.base, "GET", "/metrics", None).await, 401);
    assert_eq!(
        status(&r.base, "GET", "/metrics", Some("Bearer key-alice")).await,
        403
    );
    assert_eq!(
        status(&r.base, "GET", "/metrics", Some("Bearer key-ops")).await,
        200
    );
    // A 401 says how to authenticate.
    let resp = http()
        .get(format!("{}/admin/api/tasks", r.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["www-authenticate"], "Bearer");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("operator"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_oauth_only_loopback_is_not_enough_and_the_operator_scope_opens_them() {
    let r = start(Setup::OAuth, None).await;
    // The outside probe's finding: OAuth on, no keys, a loopback caller without credentials.
    every_route(&r, None, Some(401)).await;
    let user = format!("Bearer {}", r.token("bob", "tasks"));
    every_route(&r, Some(&user), Some(403)).await;
    let operator = format!("Bearer {}", r.token("carol", "tasks admin"));
    every_route(&r, Some(&operator), None).await;
    assert_eq!(status(&r.base, "GET", "/metrics", None).await, 401);
    assert_eq!(status(&r.base, "GET", "/metrics", Some(&user)).await, 403);
    assert_eq!(
        status(&r.base, "GET", "/metrics", Some(&operator)).await,
        200
    );
    // A forged token is no credential at all.
    let forged = format!("Bearer {}x", r.token("carol", "tasks admin"));
    every_route(&r, Some(&forged), Some(401)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_keys_and_oauth_both_kinds_of_operator_get_in_and_nobody_else() {
    let r = start(Setup::Both, None).await;
    every_route(&r, None, Some(401)).await;
    every_route(&r, Some("Bearer key-alice"), Some(403)).await;
    let user = format!("Bearer {}", r.token("bob", "tasks"));
    every_route(&r, Some(&user), Some(403)).await;
    every_route(&r, Some("Bearer key-ops"), None).await;
    let operator = format!("Bearer {}", r.token("carol", "admin"));
    every_route(&r, Some(&operator), None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_public_opens_the_metrics_to_a_scraper_and_nothing_else() {
    let r = start(Setup::Keys, Some(true)).await;
    assert_eq!(status(&r.base, "GET", "/metrics", None).await, 200);
    every_route(&r, None, Some(401)).await;
    let r = start(Setup::None, Some(false)).await;
    // Off: the metrics follow the operator rule (loopback without authentication passes).
    assert_eq!(status(&r.base, "GET", "/metrics", None).await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_site_requests_are_refused_on_every_operators_route() {
    // The default setup: no authentication, so only these checks stand between a web page in the
    // operator's browser and the admin API.
    let r = start(Setup::None, None).await;
    for (method, path, _) in ROUTES {
        let send = |rb: reqwest::RequestBuilder| async move {
            let rb = if *method == "POST" {
                rb.header("content-type", "application/json").body("{}")
            } else {
                rb
            };
            rb.send().await.unwrap().status().as_u16()
        };
        let url = format!("{}{path}", r.base);
        let foreign_origin = send(
            http()
                .request(method.parse().unwrap(), &url)
                .header("origin", "http://evil.example"),
        )
        .await;
        assert_eq!(foreign_origin, 403, "{method} {path} from a foreign Origin");
        // DNS rebinding: the page's own name resolves to 127.0.0.1, so the browser sends it as
        // Host (and, on a same-origin GET, no Origin at all).
        let port = r.base.rsplit(':').next().unwrap();
        let rebound = send(
            http()
                .request(method.parse().unwrap(), &url)
                .header("host", format!("rebind.evil.example:{port}")),
        )
        .await;
        assert_eq!(rebound, 403, "{method} {path} with a foreign Host");
    }
    // A form from another site (no preflight) cannot change anything.
    for path in [
        "/admin/api/purge?finished_before_ms=0",
        "/admin/api/tasks/0123456789abcdef/cancel",
        "/admin/login",
        "/admin/logout",
    ] {
        for ct in [
            "application/x-www-form-urlencoded",
            "text/plain",
            "multipart/form-data; boundary=x",
        ] {
            let resp = http()
                .post(format!("{}{path}", r.base))
                .header("content-type", ct)
                .body("key=x")
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 415, "POST {path} as {ct}");
        }
        let bare = http()
            .post(format!("{}{path}", r.base))
            .send()
            .await
            .unwrap();
        assert_eq!(bare.status(), 415, "POST {path} without a content type");
    }
    // The MCP endpoint's own checks are unchanged, and a listed name or an address passes.
    let ok = http()
        .get(format!("{}/admin/api/tasks", r.base))
        .header("host", "localhost")
        .header("origin", "http://localhost:3000")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_host_name_reaches_the_operators_routes() {
    let (listener, url) = support::bind().await;
    let config = ServerConfig {
        allowed_hosts: vec!["ops.example.com".into()],
        ..ServerConfig::default()
    };
    let s = serve(listener, url, config).await;
    let base = s.url.trim_end_matches("/mcp");
    let with_host = |h: &'static str| {
        http()
            .get(format!("{base}/admin/api/tasks"))
            .header("host", h)
            .send()
    };
    assert_eq!(with_host("ops.example.com").await.unwrap().status(), 200);
    assert_eq!(
        with_host("OPS.example.com:443").await.unwrap().status(),
        200
    );
    assert_eq!(with_host("other.example.com").await.unwrap().status(), 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_login_cookie_is_http_only_strict_and_secure_over_tls_and_never_for_an_empty_key() {
    let r = start(Setup::Both, None).await;
    let login = |key: String, tls: bool| {
        let mut rb = http()
            .post(format!("{}/admin/login", r.base))
            .header("content-type", "application/json")
            .body(serde_json::json!({ "key": key }).to_string());
        if tls {
            rb = rb.header("x-forwarded-proto", "https");
        }
        rb.send()
    };
    for empty in ["", "   "] {
        let resp = login(empty.into(), false).await.unwrap();
        assert_eq!(resp.status(), 401, "empty key {empty:?}");
        assert!(resp.headers().get("set-cookie").is_none());
    }
    let resp = login("key-alice".into(), false).await.unwrap();
    assert_eq!(resp.status(), 403);
    assert!(resp.headers().get("set-cookie").is_none());
    let resp = login(r.token("bob", "tasks"), false).await.unwrap();
    assert_eq!(resp.status(), 403, "an OAuth user without the scope");

    let resp = login("key-ops".into(), false).await.unwrap();
    assert_eq!(resp.status(), 200);
    let set = resp.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    assert!(!set.contains("Secure"), "plain http: {set}");
    let resp = login("key-ops".into(), true).await.unwrap();
    let set = resp.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(set.contains("; Secure"), "{set}");

    // An OAuth operator logs in with a token; the cookie then opens the API, and says so. The
    // login lasts no longer than the token (an hour here), not the usual 12 hours.
    let resp = login(r.token("carol", "admin"), false).await.unwrap();
    assert_eq!(resp.status(), 200);
    let set = resp.headers()["set-cookie"].to_str().unwrap().to_string();
    let max_age: u64 = set
        .split("Max-Age=")
        .nth(1)
        .and_then(|v| v.split(';').next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(max_age <= 3600, "{set}");
    let cookie = resp.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let me = get_json(&format!("{}/admin/api/me", r.base), Some(&cookie)).await;
    assert_eq!(me["loggedIn"], true, "{me}");
    assert!(me["operator"].as_str().unwrap().ends_with("#carol"), "{me}");
}
