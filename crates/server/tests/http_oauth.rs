//! OAuth principals over real HTTP (issue 14), with a small authorization server on loopback
//! (`support/authz.rs`): the protected-resource metadata and the 401 that points to it; each way a
//! token can be wrong refused with `invalid_token` and its reason; an unreadable key set a 503 to
//! retry; two users isolated on both wires; a tool's required scopes refused with 403
//! `insufficient_scope` (401 for anonymous callers) and a fresh token stepping up on the same
//! session; API keys beside tokens; OAuth users' limits.

mod support;

#[path = "support/authz.rs"]
mod authz;

use authz::{now, sign, AuthServer, Key};
use base64::Engine as _;
use mcp_tasks_protocol::mcp_2025::TaskSupport;
use mcp_tasks_server::auth::oauth::OAuthConfig;
use mcp_tasks_server::auth::{hash_key, ApiKey, AuthConfig, Limits};
use mcp_tasks_server::tool::{handler_fn, text_result};
use mcp_tasks_server::{demo, Server, ServerConfig, Tool};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use support::stateless::Stateless;
use support::{long_task, sees_nothing, Client};

/// A tool only callers holding the `deploy` scope may call.
fn deploy_tool() -> Tool {
    Tool::new(
        "deploy",
        handler_fn(|_ctx, _args| async move { text_result("deployed", false) }),
    )
    .description("Deploys (needs the deploy scope)")
    .task_support(TaskSupport::Optional)
    .scopes(["deploy"])
}

/// An authorization server and a server that takes its tokens (the demo tools and `deploy`), with
/// two API keys beside: `ops` (every scope) and `ci` (only `build`).
struct Setup {
    idp: AuthServer,
    signer: Key,
    server: support::TestServer,
}

impl Setup {
    async fn start(anonymous: bool) -> Setup {
        let signer = Key::fixture("rsa-a", "r1");
        let idp = AuthServer::start(&[&signer, &Key::fixture("ec-a", "e1")]).await;
        let (listener, url) = support::bind().await;
        let key = |who: &str, scopes: Option<Vec<String>>| ApiKey {
            principal: who.into(),
            sha256: hash_key(&format!("key-{who}")),
            limits: Limits::default(),
            scopes,
        };
        let auth = AuthConfig {
            keys: vec![key("ops", None), key("ci", Some(vec!["build".into()]))],
            allow_anonymous: anonymous,
            oauth: Some(OAuthConfig {
                limits: Limits {
                    max_running_tasks: 2,
                    ..Limits::default()
                },
                ..OAuthConfig::new(&idp.issuer, &url)
            }),
            ..AuthConfig::default()
        };
        let config = ServerConfig {
            auth,
            ..ServerConfig::default()
        };
        let mut b = Server::builder(
            Arc::new(mcp_tasks_engine::store::memory::MemoryStore::new()),
            support::fast_engine(),
            config,
        );
        for t in demo::tools::tools().into_iter().chain([deploy_tool()]) {
            b = b.tool(t).unwrap();
        }
        let server = support::serve_on(b.build(), listener, url).await;
        Setup {
            idp,
            signer,
            server,
        }
    }

    fn url(&self) -> &str {
        &self.server.url
    }

    /// Where the protected-resource metadata is.
    fn metadata_url(&self) -> String {
        self.url()
            .replace("/mcp", "/.well-known/oauth-protected-resource/mcp")
    }

    /// A valid access token of `sub` for this server, granting `scope`.
    fn token(&self, sub: &str, scope: &str) -> String {
        self.token_with(sub, scope, |_| {})
    }

    /// A token of `sub` whose claims `change` alters.
    fn token_with(
        &self,
        sub: &str,
        scope: &str,
        change: impl Fn(&mut Map<String, Value>),
    ) -> String {
        let mut claims = self.idp.claims(sub, self.url(), scope);
        change(&mut claims);
        sign(&self.signer, "at+jwt", &claims)
    }
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

/// One POST of `body` with `headers`: its status, `WWW-Authenticate` and body.
async fn post(url: &str, headers: &[(&str, &str)], body: &str) -> (u16, Option<String>, String) {
    let mut rb = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    let r = rb.send().await.unwrap();
    let status = r.status().as_u16();
    let challenge = r
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string());
    (status, challenge, r.text().await.unwrap())
}

#[tokio::test]
async fn the_metadata_and_the_401_tell_a_client_where_to_get_a_token() {
    let s = Setup::start(false).await;
    let http = reqwest::Client::new();
    for at in [
        s.url()
            .replace("/mcp", "/.well-known/oauth-protected-resource"),
        s.metadata_url(),
    ] {
        let meta: Value = http.get(&at).send().await.unwrap().json().await.unwrap();
        assert_eq!(meta["resource"], s.url(), "{at}");
        assert_eq!(meta["authorization_servers"], json!([s.idp.issuer]));
        assert_eq!(
            meta["scopes_supported"],
            json!(["deploy"]),
            "the scopes the tools require"
        );
        assert_eq!(meta["bearer_methods_supported"], json!(["header"]));
    }
    let (status, challenge, body) = post(s.url(), &[], INIT).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        challenge.unwrap(),
        format!("Bearer resource_metadata=\"{}\"", s.metadata_url())
    );
    let good = s.token("alice", "");
    let (status, _, _) = post(
        s.url(),
        &[("authorization", &format!("Bearer {good}"))],
        INIT,
    )
    .await;
    assert_eq!(status, 200);
    let (status, _, _) = post(s.url(), &[("authorization", "Bearer key-ops")], INIT).await;
    assert_eq!(status, 200, "API keys work beside tokens");
    let (status, _, body) = post(s.url(), &[("authorization", "Bearer key-nope")], INIT).await;
    assert_eq!(status, 401);
    assert!(body.contains("invalid API key"), "{body}");
}

#[tokio::test]
async fn each_way_a_token_can_be_wrong_is_a_401_that_says_why() {
    let s = Setup::start(false).await;
    let b64 = |v: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let forged = {
        let other = Key::fixture("rsa-b", "r1");
        sign(&other, "at+jwt", &s.idp.claims("alice", s.url(), ""))
    };
    let unknown_kid = sign(
        &Key::fixture("rsa-b", "r9"),
        "at+jwt",
        &s.idp.claims("alice", s.url(), ""),
    );
    let none = format!(
        "{}.{}.",
        b64(json!({"alg": "none", "typ": "JWT"})),
        b64(Value::Object(s.idp.claims("alice", s.url(), "")))
    );
    let cases = [
        (
            s.token_with("alice", "", |c| {
                c.insert("exp".into(), json!(now() - 600));
            }),
            "the token has expired",
        ),
        (
            s.token_with("alice", "", |c| {
                c.insert("nbf".into(), json!(now() + 600));
            }),
            "the token is not valid yet",
        ),
        (
            s.token_with("alice", "", |c| {
                c.insert("aud".into(), json!("http://127.0.0.1:9/other"));
            }),
            "not meant for this server",
        ),
        (
            s.token_with("alice", "", |c| {
                c.insert("iss".into(), json!("http://127.0.0.1:9"));
            }),
            "not issued by this server's authorization server",
        ),
        (forged, "signature does not verify"),
        (unknown_kid, "'r9' is not in the issuer's key set"),
        (none, "signed with none, which this server does not accept"),
    ];
    for (token, why) in cases {
        let (status, challenge, body) = post(
            s.url(),
            &[("authorization", &format!("Bearer {token}"))],
            INIT,
        )
        .await;
        assert_eq!(status, 401, "{why}: {body}");
        let challenge = challenge.unwrap();
        assert!(
            challenge.starts_with("Bearer error=\"invalid_token\", error_description=\""),
            "{challenge}"
        );
        assert!(challenge.contains(why), "{why}: {challenge}");
        assert!(
            challenge.ends_with(&format!("resource_metadata=\"{}\"", s.metadata_url())),
            "{challenge}"
        );
        // The header's quoted-string has no double quotes; the body says it as it is.
        let error: Value = serde_json::from_str(&body).unwrap();
        let said = error["error"]["message"]
            .as_str()
            .unwrap()
            .replace('"', "'");
        assert!(said.contains(why), "{body}");
    }
}

/// While the issuer's key set cannot be read, a token is not at fault: 503 with `Retry-After` and
/// no `invalid_token` (which would make the client throw the token away), the reason kept from the
/// client; API keys work on.
#[tokio::test]
async fn an_unreadable_key_set_is_a_503_to_retry_not_an_invalid_token() {
    let s = Setup::start(false).await;
    s.idp.set_down(true);
    let resp = reqwest::Client::new()
        .post(s.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .bearer_auth(s.token("alice", ""))
        .body(INIT)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "5");
    assert!(resp.headers().get("www-authenticate").is_none());
    let body = resp.text().await.unwrap();
    assert!(body.contains("try again later"), "{body}");
    assert!(
        !body.contains("/jwks"),
        "the key set's address is not shown: {body}"
    );
    let (status, _, body) = post(s.url(), &[("authorization", "Bearer key-ops")], INIT).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn two_users_see_nothing_of_each_others_tasks_and_sessions_on_the_2025_wire() {
    let s = Setup::start(false).await;
    let caps = json!({"elicitation": {"form": {}}});
    let mut alice = Client::connect_token(s.url(), &s.token("alice", ""), caps.clone()).await;
    let mut bob = Client::connect_token(s.url(), &s.token("bob", ""), caps).await;
    let ta = long_task(&mut alice).await;
    let tb = long_task(&mut bob).await;
    sees_nothing(&mut bob, &ta).await;
    sees_nothing(&mut alice, &tb).await;
    // The same user with another token, in another session, sees her task.
    let mut alice2 = Client::connect_token(s.url(), &s.token("alice", "x"), json!({})).await;
    assert_eq!(alice2.get_task(&ta).await["status"], "working");
    // Bob's token does not open Alice's session.
    let ping = r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#;
    let sid = alice.session.clone().unwrap();
    let bobs = format!("Bearer {}", s.token("bob", ""));
    let (status, _, _) = post(
        s.url(),
        &[("authorization", &bobs), ("mcp-session-id", &sid)],
        ping,
    )
    .await;
    assert_eq!(status, 404, "another user's session does not exist for bob");
    // Nor can Bob answer Alice's task's question.
    let mut stream = alice.open_stream().await;
    let asking = alice
        .create_task("confirm_delete", json!({"filename": "f"}))
        .await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let question = loop {
        let m = support::next_msg(&mut stream).await;
        if m.get("id").is_some() {
            break m;
        }
    };
    let (status, body) = bob
        .respond(&question["id"], json!({"action": "decline"}))
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(alice.get_task(&asking).await["status"], "input_required");
    for id in [&ta, &asking] {
        alice.request("tasks/cancel", json!({"taskId": id})).await;
    }
    bob.request("tasks/cancel", json!({"taskId": tb})).await;
}

#[tokio::test]
async fn two_users_see_nothing_of_each_others_tasks_on_the_2026_wire() {
    let s = Setup::start(false).await;
    let mut alice = Stateless::with_tasks(s.url()).bearer(&s.token("alice", ""));
    let mut bob = Stateless::with_tasks(s.url()).bearer(&s.token("bob", ""));
    let call = json!({"name": "slow_compute", "arguments": {"seconds": 30}});
    let key = json!({"io.github.mcp-tasks/idempotency-key": "job-1"});
    let ta = alice
        .call_with_meta("tools/call", call.clone(), key.clone())
        .await
        .result()["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    for m in ["tasks/get", "tasks/cancel", "tasks/update"] {
        let r = bob
            .call(m, json!({"taskId": ta, "inputResponses": {}}))
            .await;
        assert_eq!(
            r.body["error"]["message"], "Failed to retrieve task: Task not found",
            "{m}"
        );
    }
    // Idempotency keys are per user: Bob's "job-1" is a task of his own.
    let tb = bob
        .call_with_meta("tools/call", call.clone(), key.clone())
        .await
        .result()["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(ta, tb);
    // Alice with a fresh token is the same user: her key finds her task, and she can read it.
    let mut again = Stateless::with_tasks(s.url()).bearer(&s.token("alice", "more"));
    let same = again.call_with_meta("tools/call", call, key).await;
    assert_eq!(same.result()["taskId"], ta.as_str());
    let got = again.call("tasks/get", json!({"taskId": ta})).await;
    assert_eq!(got.result()["status"], "working");
    again.call("tasks/cancel", json!({"taskId": ta})).await;
    bob.call("tasks/cancel", json!({"taskId": tb})).await;
}

#[tokio::test]
async fn a_call_without_the_tools_scopes_is_403_and_a_fresh_token_steps_up_on_the_same_session() {
    let s = Setup::start(false).await;
    let mut alice =
        Client::connect_token(s.url(), &s.token("alice", "tasks:read"), json!({})).await;
    let listed = alice.request("tools/list", json!({})).await;
    assert!(
        listed.result()["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "deploy"),
        "a tool that needs scopes is listed to every caller"
    );
    let before = long_task(&mut alice).await;
    let refused = alice
        .request(
            "tools/call",
            json!({"name": "deploy", "arguments": {}, "task": {}}),
        )
        .await;
    assert_eq!(refused.status, 403);
    assert_eq!(
        refused.challenge.as_deref().unwrap(),
        format!(
            "Bearer error=\"insufficient_scope\", error_description=\"Tool deploy requires \
             scope(s) deploy, which your credentials do not grant\", scope=\"tasks:read deploy\", \
             resource_metadata=\"{}\"",
            s.metadata_url()
        ),
        "the scopes held and the missing one, so asking again loses nothing"
    );
    assert_eq!(refused.error_code(), -32007);
    assert_eq!(
        refused.error()["data"],
        json!({"requiredScopes": ["deploy"], "missingScopes": ["deploy"]})
    );
    // A client that accepts only streams still gets the challenge as an HTTP error.
    let sse_only = alice
        .post(
            json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
                   "params": {"name": "deploy", "arguments": {}}})
            .to_string(),
        )
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(sse_only.status().as_u16(), 403);
    assert!(sse_only.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .contains("insufficient_scope"));

    // Step up: a fresh token of the same user with the scope, on the same session.
    alice.token = Some(s.token("alice", "tasks:read deploy"));
    let task = alice.create_task("deploy", json!({})).await;
    let id = task["taskId"].as_str().unwrap();
    assert_eq!(alice.wait_terminal(id).await["status"], "completed");
    assert_eq!(
        alice.get_task(&before).await["status"],
        "working",
        "the session and its tasks are the user's, not the token's"
    );
    alice
        .request("tasks/cancel", json!({"taskId": before}))
        .await;

    // The same on the 2026 wire.
    let mut plain = Stateless::with_tasks(s.url()).bearer(&s.token("carol", ""));
    let deploy = json!({"name": "deploy", "arguments": {}});
    let r = plain.call("tools/call", deploy.clone()).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.code(), -32007);
    assert!(r.challenge.unwrap().contains("scope=\"deploy\""));
    let mut scoped = Stateless::with_tasks(s.url()).bearer(&s.token("carol", "deploy"));
    let r = scoped.call("tools/call", deploy.clone()).await;
    assert_eq!(r.status, 200, "{}", r.body);

    // API keys: one without `scopes` holds every scope; one with `scopes` only those.
    let mut ops = Stateless::with_tasks(s.url()).bearer("key-ops");
    assert_eq!(ops.call("tools/call", deploy.clone()).await.status, 200);
    let mut ci = Stateless::with_tasks(s.url()).bearer("key-ci");
    let r = ci.call("tools/call", deploy).await;
    assert_eq!(r.status, 403);
    assert!(r.challenge.unwrap().contains("scope=\"build deploy\""));
}

#[tokio::test]
async fn anonymous_callers_are_asked_to_authenticate_for_a_scoped_tool() {
    let s = Setup::start(true).await;
    let mut anon = Client::connect(s.url()).await;
    let t = long_task(&mut anon).await;
    anon.request("tasks/cancel", json!({"taskId": t})).await;
    let refused = anon
        .request("tools/call", json!({"name": "deploy", "arguments": {}}))
        .await;
    assert_eq!(refused.status, 401);
    assert_eq!(
        refused.challenge.as_deref().unwrap(),
        format!(
            "Bearer scope=\"deploy\", resource_metadata=\"{}\"",
            s.metadata_url()
        )
    );
    assert!(refused.error()["message"]
        .as_str()
        .unwrap()
        .contains("authenticate with an access token"));
}

#[tokio::test]
async fn oauth_users_are_held_to_the_oauth_limits_each_on_their_own() {
    let s = Setup::start(false).await;
    let mut alice = Client::connect_token(s.url(), &s.token("alice", ""), json!({})).await;
    let ids = [long_task(&mut alice).await, long_task(&mut alice).await];
    let third = alice
        .request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 30}, "task": {}}),
        )
        .await;
    assert_eq!(third.error_code(), -32004);
    assert_eq!(third.error()["data"], json!({"running": 2, "limit": 2}));
    // Another user of the same issuer has a limit of their own.
    let mut bob = Client::connect_token(s.url(), &s.token("bob", ""), json!({})).await;
    let b = long_task(&mut bob).await;
    bob.request("tasks/cancel", json!({"taskId": b})).await;
    for id in ids {
        alice.request("tasks/cancel", json!({"taskId": id})).await;
    }
}
