//! MCP Events (SEP-3415) over real HTTP, against a receiver on 127.0.0.1 that checks every POST
//! the way the AI SDK's and a ChatGPT-like receiver do: capabilities on both wires, `events/list`,
//! a verified `events/subscribe`, a signed `task.finished` delivery (`webhook-id` = `eventId`,
//! `X-MCP-Subscription-Id`, `Content-Length`), isolation between principals, a failed
//! verification that stores nothing, retries under one `webhook-id`, refresh and rotation,
//! unsubscribe, the limits, both error numberings, polls, and a subscription that outlives a
//! restart.

mod support;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_engine::store::prelude::*;
use mcp_tasks_engine::store::sqlite::SqliteStore;
use mcp_tasks_server::auth::{hash_key, ApiKey, AuthConfig, Limits};
use mcp_tasks_server::events::{ErrorNumbering, EventSettings};
use mcp_tasks_server::ServerConfig;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::stateless::{wait_status, Stateless};
use support::{fast_engine, start_with, Client};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwMfKQ9r8GKYo=";
const OTHER_SECRET: &str = "whsec_bmV3LXNlY3JldC1uZXctc2VjcmV0LW5ldy1zZWNyZXQ=";

/// What the receiver does with a POST.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Echoes challenges, takes events (204).
    Good,
    /// Answers a verification with a wrong challenge.
    WrongChallenge,
    /// Answers the next `n` events 503.
    Refuse(u32),
    /// Answers every event with this status.
    Status(u16),
}

/// One POST the receiver took.
#[derive(Clone, Debug)]
struct Post {
    headers: HeaderMap,
    body: Value,
    /// The body's bytes as they came (what the signatures sign).
    raw: Vec<u8>,
}

/// A receiver on 127.0.0.1 that verifies every signature with the secrets it knows.
struct Receiver {
    url: String,
    posts: Arc<Mutex<Vec<Post>>>,
    mode: Arc<Mutex<Mode>>,
}

fn verifies(secrets: &[&str], headers: &HeaderMap, body: &[u8]) -> bool {
    let h = |k: &str| headers.get(k).and_then(|v| v.to_str().ok()).unwrap_or("");
    let signed = format!("{}.{}.", h("webhook-id"), h("webhook-timestamp"));
    h("webhook-signature").split(' ').any(|sig| {
        secrets.iter().any(|s| {
            let key = base64::engine::general_purpose::STANDARD
                .decode(s.trim_start_matches("whsec_"))
                .unwrap();
            let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(&key).unwrap();
            mac.update(signed.as_bytes());
            mac.update(body);
            let want =
                base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
            sig == format!("v1,{want}")
        })
    })
}

impl Receiver {
    async fn start(secrets: &'static [&'static str]) -> Receiver {
        let posts: Arc<Mutex<Vec<Post>>> = Arc::default();
        let mode = Arc::new(Mutex::new(Mode::Good));
        let (p, m) = (posts.clone(), mode.clone());
        let app = axum::Router::new().route(
            "/hooks",
            axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                let (posts, mode) = (p.clone(), m.clone());
                async move {
                    if !verifies(secrets, &headers, &body) {
                        return (StatusCode::UNAUTHORIZED, String::new());
                    }
                    let msg: Value = serde_json::from_slice(&body).unwrap();
                    posts.lock().unwrap().push(Post {
                        headers: headers.clone(),
                        body: msg.clone(),
                        raw: body.to_vec(),
                    });
                    let mut mode = mode.lock().unwrap();
                    if msg["type"] == "verification" {
                        let challenge = if *mode == Mode::WrongChallenge {
                            json!("not it")
                        } else {
                            msg["challenge"].clone()
                        };
                        return (StatusCode::OK, json!({"challenge": challenge}).to_string());
                    }
                    if let Mode::Status(code) = *mode {
                        return (StatusCode::from_u16(code).unwrap(), String::new());
                    }
                    if let Mode::Refuse(n) = *mode {
                        if n > 0 {
                            *mode = Mode::Refuse(n - 1);
                            return (StatusCode::SERVICE_UNAVAILABLE, String::new());
                        }
                    }
                    (StatusCode::NO_CONTENT, String::new())
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver {
            url: format!(
                "http://127.0.0.1:{}/hooks?mcp_event_subscription=abc",
                addr.port()
            ),
            posts,
            mode,
        }
    }

    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn events(&self) -> Vec<Post> {
        self.posts
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.body.get("type").is_none())
            .cloned()
            .collect()
    }

    fn verifications(&self) -> usize {
        self.posts
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.body["type"] == "verification")
            .count()
    }

    /// Waits (at most `secs`) until `n` events came.
    async fn wait_events(&self, n: usize, secs: u64) -> Vec<Post> {
        for _ in 0..secs * 20 {
            let got = self.events();
            if got.len() >= n {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{n} events did not come in {secs} s: {:?}", self.events());
    }
}

fn keys() -> AuthConfig {
    let key = |who: &str| ApiKey {
        principal: who.into(),
        sha256: hash_key(&format!("key-{who}")),
        limits: Limits::default(),
        scopes: None,
    };
    AuthConfig {
        keys: vec![key("alice"), key("bob")],
        allow_anonymous: true,
        ..AuthConfig::default()
    }
}

fn config(events: EventSettings) -> ServerConfig {
    ServerConfig {
        auth: keys(),
        events,
        ..ServerConfig::default()
    }
}

fn loopback() -> EventSettings {
    EventSettings {
        allow_insecure_loopback: true,
        ..EventSettings::default()
    }
}

/// A server on the memory store with loopback callbacks allowed and the demo tools.
async fn on_memory() -> support::TestServer {
    start_with(
        Arc::new(MemoryStore::new()),
        fast_engine(),
        config(loopback()),
        vec![],
    )
    .await
}

fn client(url: &str, who: &str) -> Stateless {
    Stateless::with_tasks(url).bearer(&format!("key-{who}"))
}

fn subscribe_params(name: &str, arguments: Value, url: &str, secret: &str) -> Value {
    json!({
        "name": name,
        "arguments": arguments,
        "delivery": {"mode": "webhook", "url": url, "secret": secret},
        "cursor": null,
    })
}

/// The checks the AI SDK's client makes of a subscribe result.
fn check_subscribe_result(r: &Value) {
    assert_eq!(r["resultType"], "complete", "{r}");
    let id = r["id"].as_str().expect("id");
    assert!(id.starts_with("sub_") && id.len() > 4);
    let before = r["refreshBefore"].as_str().expect("refreshBefore");
    assert!(before.ends_with('Z'), "{before}");
    assert!(r["truncated"].is_boolean(), "{r}");
    assert!(r["cursor"].is_string(), "{r}");
}

#[tokio::test]
async fn capabilities_advertise_events_on_both_wires() {
    let s = on_memory().await;
    let mut c = client(&s.url, "alice");
    let d = c.call("server/discover", json!({})).await;
    let caps = &d.result()["capabilities"];
    assert_eq!(caps["events"], json!({}), "{caps}");
    assert_eq!(
        caps["extensions"]["io.modelcontextprotocol/events"],
        json!({})
    );
    assert!(caps["extensions"]["io.modelcontextprotocol/tasks"].is_object());
    let old = Client::connect_token(&s.url, "key-alice", json!({})).await;
    let _ = old;
    let mut raw = Client::new(&s.url);
    raw.token = Some("key-alice".into());
    let init = raw
        .request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
        )
        .await;
    assert_eq!(init.result()["capabilities"]["events"], json!({}));
}

#[tokio::test]
async fn events_list_offers_the_task_types_for_webhooks_and_polls() {
    let s = on_memory().await;
    let mut c = client(&s.url, "alice");
    let r = c.call("events/list", json!({})).await;
    let list = r.result();
    assert_eq!(list["resultType"], "complete");
    let names: Vec<&str> = list["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["task.finished", "task.input_required"]);
    for e in list["events"].as_array().unwrap() {
        assert!(e["description"].is_string());
        let modes = e["delivery"].as_array().unwrap();
        // "push" is events/stream.
        assert_eq!(modes, &[json!("poll"), json!("push"), json!("webhook")]);
        assert_eq!(e["inputSchema"]["type"], "object");
        assert_eq!(e["payloadSchema"]["type"], "object");
    }
    // The 2025-11-25 wire serves the same methods in a session.
    let mut old = Client::connect_token(&s.url, "key-alice", json!({})).await;
    let r = old.request("events/list", json!({})).await;
    assert_eq!(r.result()["events"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn a_verified_subscription_gets_its_principal_s_task_end_signed_once_per_event() {
    let receiver = Receiver::start(&[SECRET]).await;
    let s = on_memory().await;
    let mut alice = client(&s.url, "alice");
    let sub = alice
        .call(
            "events/subscribe",
            subscribe_params("task.finished", json!({}), &receiver.url, SECRET),
        )
        .await;
    let r = sub.result().clone();
    check_subscribe_result(&r);
    assert_eq!(receiver.verifications(), 1, "verified before the answer");
    let verification = receiver.posts.lock().unwrap()[0].clone();
    assert_eq!(
        verification.headers["x-mcp-subscription-id"]
            .to_str()
            .unwrap(),
        r["id"].as_str().unwrap()
    );
    assert!(verification.headers["webhook-id"]
        .to_str()
        .unwrap()
        .starts_with("msg_verification_"));

    // Bob's task reaches none of Alice's subscriptions; Alice's does.
    let mut bob = client(&s.url, "bob");
    let theirs = bob.start_task("slow_compute", json!({"seconds": 0})).await;
    wait_status(&mut bob, &theirs, &["completed"]).await;
    let mine = alice
        .start_task("slow_compute", json!({"seconds": 0}))
        .await;
    wait_status(&mut alice, &mine, &["completed"]).await;
    let got = receiver.wait_events(1, 10).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got_all = receiver.events();
    assert_eq!(got_all.len(), 1, "one event, Alice's only: {got_all:?}");
    let e = &got[0];
    let h = |k: &str| e.headers[k].to_str().unwrap().to_string();
    assert_eq!(h("webhook-id"), e.body["eventId"].as_str().unwrap());
    assert!(h("webhook-id").starts_with("evt_"));
    assert_eq!(h("x-mcp-subscription-id"), r["id"].as_str().unwrap());
    assert_eq!(h("content-type"), "application/json");
    assert!(
        e.headers.get("content-length").is_some(),
        "a fixed Content-Length"
    );
    assert!(h("webhook-timestamp").bytes().all(|b| b.is_ascii_digit()));
    assert_eq!(e.body["name"], "task.finished");
    assert!(e.body["timestamp"].as_str().unwrap().ends_with('Z'));
    assert_eq!(e.body["data"]["taskId"], json!(mine));
    assert_eq!(e.body["data"]["tool"], "slow_compute");
    assert_eq!(e.body["data"]["status"], "completed");
    assert!(e.body["data"]["result"]["content"].is_array());
    assert!(e.body["cursor"].is_string());
    assert!(e.body.get("type").is_none(), "an event has no type");

    // The refresh keeps the id, needs no second verification, and says how delivery went.
    let again = alice
        .call(
            "events/subscribe",
            subscribe_params("task.finished", json!({}), &receiver.url, SECRET),
        )
        .await;
    let again = again.result();
    check_subscribe_result(again);
    assert_eq!(again["id"], r["id"]);
    assert_eq!(receiver.verifications(), 1);
    assert_eq!(again["deliveryStatus"]["active"], true);
    assert_eq!(again["deliveryStatus"]["lastError"], Value::Null);
    assert!(again["deliveryStatus"]["lastDeliveryAt"].is_string());

    // Unsubscribed: no more events; unsubscribing again is still an empty result.
    let unsub = json!({"name": "task.finished", "arguments": {}, "delivery": {"mode": "webhook", "url": receiver.url}});
    let u = alice.call("events/unsubscribe", unsub.clone()).await;
    assert_eq!(u.result()["resultType"], "complete");
    let u = alice.call("events/unsubscribe", unsub).await;
    assert_eq!(u.result()["resultType"], "complete", "unknown: still {{}}");
    let later = alice
        .start_task("slow_compute", json!({"seconds": 0}))
        .await;
    wait_status(&mut alice, &later, &["completed"]).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(receiver.events().len(), 1, "nothing after unsubscribe");
}

#[tokio::test]
async fn a_failed_verification_stores_nothing_and_says_why() {
    let receiver = Receiver::start(&[SECRET]).await;
    receiver.set(Mode::WrongChallenge);
    let store = Arc::new(MemoryStore::new());
    let s = start_with(store.clone(), fast_engine(), config(loopback()), vec![]).await;
    let mut alice = client(&s.url, "alice");
    let r = alice
        .call(
            "events/subscribe",
            subscribe_params("task.finished", json!({}), &receiver.url, SECRET),
        )
        .await;
    assert_eq!(r.code(), -32015, "{}", r.body);
    assert_eq!(r.body["error"]["data"]["reason"], "challenge_failed");
    assert!(store.subscriptions(None, 10).await.unwrap().is_empty());
    assert_eq!(
        store.verification("alice", &receiver.url).await.unwrap(),
        None
    );
    // Nothing listens there: connection_refused.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let r = alice
        .call(
            "events/subscribe",
            subscribe_params(
                "task.finished",
                json!({}),
                &format!("http://127.0.0.1:{closed}/x"),
                SECRET,
            ),
        )
        .await;
    assert_eq!(r.code(), -32015);
    assert_eq!(r.body["error"]["data"]["reason"], "connection_refused");
    // A receiver that does not know the secret answers 401: the challenge failed.
    let strict = Receiver::start(&[OTHER_SECRET]).await;
    let r = alice
        .call(
            "events/subscribe",
            subscribe_params("task.finished", json!({}), &strict.url, SECRET),
        )
        .await;
    assert_eq!(r.body["error"]["data"]["reason"], "challenge_failed");
    assert!(store.subscriptions(None, 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn bad_subscriptions_are_refused_with_the_error_the_extension_names() {
    let receiver = Receiver::start(&[SECRET]).await;
    let s = start_with(
        Arc::new(MemoryStore::new()),
        fast_engine(),
        config(EventSettings::default()),
        vec![],
    )
    .await;
    let mut alice = client(&s.url, "alice");
    // Plain http to loopback needs the development switch.
    let r = alice
        .call(
            "events/subscribe",
            subscribe_params("task.finished", json!({}), &receiver.url, SECRET),
        )
        .await;
    assert_eq!(r.code(), -32602, "{}", r.body);
    for url in [
        "https://user:pw@hooks.example.com/in",
        "https://hooks.example.com/in#frag",
        "https://127.0.0.1/in",
        "not a url",
    ] {
        let r = alice
            .call(
                "events/subscribe",
                subscribe_params("task.finished", json!({}), url, SECRET),
            )
            .await;
        assert_eq!(r.code(), -32602, "{url}: {}", r.body);
    }
    // Checked before the URL (whose host is looked up): the secret's own refusal.
    for secret in ["whsec_c2hvcnQ=", "nothing", "whsec_!!!"] {
        let r = alice
            .call(
                "events/subscribe",
                subscribe_params(
                    "task.finished",
                    json!({}),
                    "https://hooks.example.com/in",
                    secret,
                ),
            )
            .await;
        assert_eq!(r.code(), -32602, "{secret}: {}", r.body);
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(message.contains("delivery.secret"), "{message}");
    }
    let r = alice
        .call(
            "events/subscribe",
            subscribe_params("no.such", json!({}), "https://hooks.example.com/in", SECRET),
        )
        .await;
    assert_eq!(r.code(), -32011);
    assert_eq!(r.body["error"]["data"]["kind"], "event");
    let r = alice
        .call(
            "events/subscribe",
            subscribe_params(
                "task.finished",
                json!({"colour": "red"}),
                "https://hooks.example.com/in",
                SECRET,
            ),
        )
        .await;
    assert_eq!(
        r.code(),
        -32602,
        "arguments outside the inputSchema: {}",
        r.body
    );
    let mut push = subscribe_params(
        "task.finished",
        json!({}),
        "https://hooks.example.com/in",
        SECRET,
    );
    push["delivery"]["mode"] = json!("push");
    let r = alice.call("events/subscribe", push).await;
    assert_eq!(r.code(), -32014);
    assert_eq!(
        r.body["error"]["data"],
        json!({"feature": "deliveryMode", "value": "push"})
    );
    let mut bad_ttl = subscribe_params(
        "task.finished",
        json!({}),
        "https://hooks.example.com/in",
        SECRET,
    );
    bad_ttl["ttlMs"] = json!(-5);
    assert_eq!(alice.call("events/subscribe", bad_ttl).await.code(), -32602);
    // Anonymous callers have no principal to hold a subscription.
    let mut anon = Stateless::with_tasks(&s.url);
    let r = anon
        .call(
            "events/subscribe",
            subscribe_params(
                "task.finished",
                json!({}),
                "https://hooks.example.com/in",
                SECRET,
            ),
        )
        .await;
    assert_eq!(r.code(), -32012);
    let r = anon
        .call("events/unsubscribe", json!({"name": "task.finished", "arguments": {}, "delivery": {"url": "https://hooks.example.com/in"}}))
        .await;
    assert_eq!(r.code(), -32012);
}

#[tokio::test]
async fn sep_numbering_and_the_subscription_cap_are_settings() {
    let receiver = Receiver::start(&[SECRET]).await;
    let s = start_with(
        Arc::new(MemoryStore::new()),
        fast_engine(),
        config(EventSettings {
            error_numbering: ErrorNumbering::Sep,
            max_subscriptions_per_principal: 2,
            ..loopback()
        }),
        vec![],
    )
    .await;
    let mut alice = client(&s.url, "alice");
    let r = alice
        .call(
            "events/subscribe",
            subscribe_params("no.such", json!({}), &receiver.url, SECRET),
        )
        .await;
    assert_eq!(r.code(), -32023);
    for tool in ["a", "b"] {
        let r = alice
            .call(
                "events/subscribe",
                subscribe_params(
                    "task.finished",
                    json!({"tool": tool}),
                    &receiver.url,
                    SECRET,
                ),
            )
            .await;
        check_subscribe_result(r.result());
    }
    let r = alice
        .call(
            "events/subscribe",
            subscribe_params("task.finished", json!({"tool": "c"}), &receiver.url, SECRET),
        )
        .await;
    assert_eq!(r.code(), -32025, "{}", r.body);
    assert_eq!(r.body["error"]["data"]["limit"], "subscriptions");
    // A refresh is never refused by the cap, and one verification covered all three.
    let r = alice
        .call(
            "events/subscribe",
            subscribe_params("task.finished", json!({"tool": "a"}), &receiver.url, SECRET),
        )
        .await;
    check_subscribe_result(r.result());
    assert_eq!(receiver.verifications(), 1);
}

#[tokio::test]
async fn a_refused_event_is_retried_under_the_same_webhook_id_and_a_rotated_secret_signs_twice() {
    static BOTH: [&str; 2] = [SECRET, OTHER_SECRET];
    let receiver = Receiver::start(&BOTH).await;
    let s = on_memory().await;
    let mut alice = client(&s.url, "alice");
    let r = alice
        .call(
            "events/subscribe",
            subscribe_params(
                "task.finished",
                json!({"tool": "slow_compute"}),
                &receiver.url,
                SECRET,
            ),
        )
        .await;
    check_subscribe_result(r.result());
    receiver.set(Mode::Refuse(1));
    let task = alice
        .start_task("slow_compute", json!({"seconds": 0}))
        .await;
    wait_status(&mut alice, &task, &["completed"]).await;
    // The first attempt gets 503; the retry comes 10-12 s later, under the same id.
    let got = receiver.wait_events(2, 20).await;
    assert_eq!(got[0].headers["webhook-id"], got[1].headers["webhook-id"]);
    assert_eq!(got[0].body, got[1].body, "the same body");
    // Rotation: the refresh with a new secret keeps the id; deliveries are signed by both.
    let r = alice
        .call(
            "events/subscribe",
            subscribe_params(
                "task.finished",
                json!({"tool": "slow_compute"}),
                &receiver.url,
                OTHER_SECRET,
            ),
        )
        .await;
    check_subscribe_result(r.result());
    let task = alice
        .start_task("slow_compute", json!({"seconds": 0}))
        .await;
    wait_status(&mut alice, &task, &["completed"]).await;
    let got = receiver.wait_events(3, 10).await;
    let sigs = got[2].headers["webhook-signature"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(sigs.split(' ').count(), 2, "old and new secret: {sigs}");
    // Each signature alone verifies with its own secret: one the new, one the old.
    let body = got[2].raw.clone();
    let alone = |sig: &str| {
        let mut h = got[2].headers.clone();
        h.insert("webhook-signature", sig.parse().unwrap());
        h
    };
    let (first, second) = sigs.split_once(' ').unwrap();
    assert!(
        verifies(&[OTHER_SECRET], &alone(first), &body),
        "the new secret signs first"
    );
    assert!(
        verifies(&[SECRET], &alone(second), &body),
        "the old one signs beside it"
    );
    assert!(!verifies(&[SECRET], &alone(first), &body));
}

#[tokio::test]
async fn polls_read_the_log_from_a_cursor_for_anonymous_callers_too() {
    let s = on_memory().await;
    let mut anon = Stateless::with_tasks(&s.url);
    let first = anon
        .call(
            "events/poll",
            json!({"name": "task.finished", "arguments": {}, "cursor": null}),
        )
        .await;
    let first = first.result().clone();
    assert_eq!(first["resultType"], "complete");
    assert_eq!(first["events"], json!([]));
    assert_eq!(first["truncated"], false);
    assert_eq!(first["hasMore"], false);
    assert!(first["nextPollMs"].as_u64().unwrap() >= 1000);
    let task = anon.start_task("slow_compute", json!({"seconds": 0})).await;
    wait_status(&mut anon, &task, &["completed"]).await;
    // Another anonymous caller (another address) and Alice see nothing of it.
    let mut other = Stateless::with_tasks(&s.url).bound_to("127.0.0.2");
    let theirs = other
        .call(
            "events/poll",
            json!({"name": "task.finished", "cursor": first["cursor"]}),
        )
        .await;
    assert_eq!(theirs.result()["events"], json!([]));
    let mut alice = client(&s.url, "alice");
    let hers = alice
        .call(
            "events/poll",
            json!({"name": "task.finished", "cursor": first["cursor"]}),
        )
        .await;
    assert_eq!(hers.result()["events"], json!([]));
    let page = anon
        .call(
            "events/poll",
            json!({"name": "task.finished", "cursor": first["cursor"]}),
        )
        .await;
    let page = page.result();
    assert_eq!(page["events"].as_array().unwrap().len(), 1, "{page}");
    let e = &page["events"][0];
    assert_eq!(e["data"]["taskId"], json!(task));
    assert!(e["eventId"].as_str().unwrap().starts_with("evt_"));
    // From the page's cursor: nothing new.
    let next = anon
        .call(
            "events/poll",
            json!({"name": "task.finished", "cursor": page["cursor"]}),
        )
        .await;
    assert_eq!(next.result()["events"], json!([]));
    let bad = anon
        .call(
            "events/poll",
            json!({"name": "task.finished", "cursor": "garbage"}),
        )
        .await;
    assert_eq!(bad.code(), -32602);
}

#[tokio::test]
async fn a_subscription_made_before_a_restart_gets_its_event_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    let receiver = Receiver::start(&[SECRET]).await;
    let id = {
        let store = Arc::new(SqliteStore::open(&path).unwrap());
        let mut s = start_with(store, fast_engine(), config(loopback()), vec![]).await;
        let mut alice = client(&s.url, "alice");
        let r = alice
            .call(
                "events/subscribe",
                subscribe_params("task.finished", json!({}), &receiver.url, SECRET),
            )
            .await;
        check_subscribe_result(r.result());
        let id = r.result()["id"].clone();
        s.stop();
        s.server.engine().shutdown();
        drop(s);
        id
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let s = start_with(store, fast_engine(), config(loopback()), vec![]).await;
    let mut alice = client(&s.url, "alice");
    let task = alice
        .start_task("slow_compute", json!({"seconds": 0}))
        .await;
    wait_status(&mut alice, &task, &["completed"]).await;
    let got = receiver.wait_events(1, 10).await;
    assert_eq!(
        got[0].headers["x-mcp-subscription-id"].to_str().unwrap(),
        id.as_str().unwrap()
    );
    assert_eq!(got[0].body["data"]["taskId"], json!(task));
    assert_eq!(
        receiver.verifications(),
        1,
        "the verification outlived the restart too"
    );
}

#[tokio::test]
async fn a_task_waiting_for_input_sends_what_to_answer() {
    let receiver = Receiver::start(&[SECRET]).await;
    let s = on_memory().await;
    let mut alice = client(&s.url, "alice");
    let r = alice
        .call(
            "events/subscribe",
            subscribe_params(
                "task.input_required",
                json!({"tool": "confirm_delete"}),
                &receiver.url,
                SECRET,
            ),
        )
        .await;
    check_subscribe_result(r.result());
    let task = alice
        .start_task("confirm_delete", json!({"filename": "notes.txt"}))
        .await;
    let got = receiver.wait_events(1, 10).await;
    let data = &got[0].body["data"];
    assert_eq!(got[0].body["name"], "task.input_required");
    assert_eq!(data["taskId"], json!(task));
    let asked: Vec<&Value> = data["inputRequests"]
        .as_object()
        .unwrap()
        .values()
        .collect();
    assert_eq!(asked.len(), 1, "{data}");
    assert_eq!(asked[0]["method"], "elicitation/create");
    assert!(asked[0]["params"]["message"]
        .as_str()
        .unwrap()
        .contains("notes.txt"));
}

#[tokio::test]
async fn gone_and_too_large_are_not_retried_and_the_subscription_stays() {
    let receiver = Receiver::start(&[SECRET]).await;
    let store = Arc::new(MemoryStore::new());
    let s = start_with(store.clone(), fast_engine(), config(loopback()), vec![]).await;
    let mut alice = client(&s.url, "alice");
    let r = alice
        .call(
            "events/subscribe",
            subscribe_params("task.finished", json!({}), &receiver.url, SECRET),
        )
        .await;
    let id = r.result()["id"].as_str().unwrap().to_string();
    for status in [410, 413] {
        receiver.set(Mode::Status(status));
        let before = receiver.events().len();
        let task = alice
            .start_task("slow_compute", json!({"seconds": 0}))
            .await;
        wait_status(&mut alice, &task, &["completed"]).await;
        receiver.wait_events(before + 1, 10).await;
        // No retry comes (the first would be 10 s later; the delivery is settled at once).
        let mut settled = false;
        for _ in 0..100 {
            let d = store.event_deliveries(&id, 10).await.unwrap();
            if d.first().is_some_and(|d| {
                d.attempts == 1 && d.state != mcp_tasks_engine::webhook::DeliveryState::Pending
            }) {
                settled = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            settled,
            "{status}: {:?}",
            store.event_deliveries(&id, 10).await.unwrap()
        );
        let sub = store.get_subscription(&id).await.unwrap().expect("kept");
        assert_eq!(sub.last_error.as_deref(), Some("http_4xx"), "{status}");
    }
    assert_eq!(receiver.events().len(), 2, "one attempt each");
    // Once it answers again, the next event comes.
    receiver.set(Mode::Good);
    let task = alice
        .start_task("slow_compute", json!({"seconds": 0}))
        .await;
    wait_status(&mut alice, &task, &["completed"]).await;
    let got = receiver.wait_events(3, 10).await;
    assert_eq!(got[2].body["data"]["taskId"], json!(task));
    let r = alice
        .call(
            "events/subscribe",
            subscribe_params("task.finished", json!({}), &receiver.url, SECRET),
        )
        .await;
    assert_eq!(
        r.result()["deliveryStatus"]["lastError"],
        Value::Null,
        "a success clears it"
    );
}

/// `build.finished`, declared as `[[events.types]]` would declare it.
fn builds(audience: mcp_tasks_server::events::Audience) -> EventSettings {
    EventSettings {
        types: vec![mcp_tasks_server::events::EventType {
            name: "build.finished".into(),
            description: "A build ended".into(),
            input_schema: json!({"type": "object", "properties": {"branch": {"type": "string"}}, "additionalProperties": false}),
            payload_schema: json!({"type": "object", "properties": {"branch": {"type": "string"}, "status": {"type": "string"}}, "required": ["branch", "status"]}),
            audience,
        }],
        ..loopback()
    }
}

/// A command tool that prints `::event build.finished {...}` for its `branch` (and two lines
/// that are refused: data without a status, an undeclared type). The script is a file: the
/// argv template would take its braces for placeholders.
fn build_tool() -> mcp_tasks_server::Tool {
    let dir = std::env::temp_dir().join(format!("mcp-tasks-build-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("build.sh");
    std::fs::write(
        &script,
        "echo \"::event build.finished {\\\"branch\\\": \\\"$1\\\", \\\"status\\\": \\\"passed\\\"}\"\n\
         echo '::event build.finished {\"branch\": \"x\"}'\n\
         echo '::event nope {}'\n\
         echo built\n",
    )
    .unwrap();
    let spec: mcp_tasks_server::tools::command::CommandToolSpec = serde_json::from_value(json!({
        "name": "build",
        "command": ["sh", script.to_str().unwrap(), "{branch}"],
        "input_schema": {"type": "object", "properties": {"branch": {"type": "string"}}, "required": ["branch"]},
        "task_support": "optional"
    }))
    .unwrap();
    spec.into_tool()
}

#[tokio::test]
async fn a_command_tool_publishes_its_declared_events_to_the_subscriptions_that_match() {
    let receiver = Receiver::start(&[SECRET]).await;
    let store = Arc::new(MemoryStore::new());
    let s = start_with(
        store.clone(),
        fast_engine(),
        config(builds(mcp_tasks_server::events::Audience::Owner)),
        vec![build_tool()],
    )
    .await;
    let mut alice = client(&s.url, "alice");
    let names: Vec<Value> = alice.call("events/list", json!({})).await.result()["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].clone())
        .collect();
    assert!(names.contains(&json!("build.finished")), "{names:?}");
    let r = alice
        .call(
            "events/subscribe",
            subscribe_params(
                "build.finished",
                json!({"branch": "main"}),
                &receiver.url,
                SECRET,
            ),
        )
        .await;
    check_subscribe_result(r.result());
    let poll = alice
        .call(
            "events/poll",
            json!({"name": "build.finished", "arguments": {"branch": "dev"}, "cursor": null}),
        )
        .await;
    let from = poll.result()["cursor"].clone();
    for branch in ["dev", "main"] {
        let t = alice.start_task("build", json!({"branch": branch})).await;
        let done = wait_status(&mut alice, &t, &["completed"]).await;
        let _ = done;
    }
    let got = receiver.wait_events(1, 10).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        receiver.events().len(),
        1,
        "only main's: {:?}",
        receiver.events()
    );
    assert_eq!(got[0].body["name"], "build.finished");
    assert_eq!(
        got[0].body["data"],
        json!({"branch": "main", "status": "passed"})
    );
    // A poll with the other filter gets dev's; Bob sees none (the owner's type).
    let page = alice
        .call(
            "events/poll",
            json!({"name": "build.finished", "arguments": {"branch": "dev"}, "cursor": from}),
        )
        .await;
    let events = page.result()["events"].as_array().unwrap().clone();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["data"]["branch"], "dev");
    let mut bob = client(&s.url, "bob");
    let theirs = bob
        .call(
            "events/poll",
            json!({"name": "build.finished", "cursor": from}),
        )
        .await;
    assert_eq!(theirs.result()["events"], json!([]));
    // The bad lines were refused: data against the schema, an undeclared type.
    let all = store
        .read_events(&mcp_tasks_engine::events::EventQuery {
            name: "build.finished".into(),
            principal: "alice".into(),
            session: None,
            task_id: None,
            tool: None,
            filter: Default::default(),
            after: mcp_tasks_engine::events::EventPosition::START,
            limit: 100,
        })
        .await
        .unwrap();
    assert_eq!(
        all.events.len(),
        2,
        "one per run: the one without a status was refused"
    );
}

#[tokio::test]
async fn a_callers_type_goes_to_every_principal_that_may_call_its_tool() {
    let receiver = Receiver::start(&[SECRET]).await;
    let s = start_with(
        Arc::new(MemoryStore::new()),
        fast_engine(),
        config(builds(mcp_tasks_server::events::Audience::Callers(
            "build".into(),
        ))),
        vec![build_tool()],
    )
    .await;
    let mut bob = client(&s.url, "bob");
    let r = bob
        .call(
            "events/subscribe",
            subscribe_params("build.finished", json!({}), &receiver.url, SECRET),
        )
        .await;
    check_subscribe_result(r.result());
    let mut alice = client(&s.url, "alice");
    let t = alice.start_task("build", json!({"branch": "main"})).await;
    wait_status(&mut alice, &t, &["completed"]).await;
    let got = receiver.wait_events(1, 10).await;
    assert_eq!(
        got[0].body["data"]["branch"], "main",
        "Bob hears of Alice's build"
    );
}

#[tokio::test]
async fn a_subscription_to_a_task_that_already_ended_still_gets_its_event() {
    let receiver = Receiver::start(&[SECRET]).await;
    let s = on_memory().await;
    let mut alice = client(&s.url, "alice");
    let task = alice
        .start_task("slow_compute", json!({"seconds": 0}))
        .await;
    wait_status(&mut alice, &task, &["completed"]).await;
    // The host learnt the task's id from a reply, and subscribes after it ended.
    let r = alice
        .call(
            "events/subscribe",
            subscribe_params(
                "task.finished",
                json!({"taskId": task}),
                &receiver.url,
                SECRET,
            ),
        )
        .await;
    check_subscribe_result(r.result());
    let got = receiver.wait_events(1, 10).await;
    assert_eq!(got[0].body["data"]["taskId"], json!(task));
    // Bob subscribing to Alice's task gets nothing of it.
    let mut bob = client(&s.url, "bob");
    let r = bob
        .call(
            "events/subscribe",
            subscribe_params(
                "task.finished",
                json!({"taskId": task}),
                &receiver.url,
                SECRET,
            ),
        )
        .await;
    check_subscribe_result(r.result());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(receiver.events().len(), 1, "Alice's event only");
}

/// Opens `events/stream` (request id 7) as `who` (anonymous when `None`); its messages, each
/// checked to be JSON-RPC and, for a notification, one of the stream's with the request's id as
/// its subscription id.
async fn open_stream(
    url: &str,
    who: Option<&str>,
    params: Value,
) -> tokio::sync::mpsc::UnboundedReceiver<Value> {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": support::stateless::V,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
    });
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "events/stream", "params": params});
    let mut rb = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", support::stateless::V)
        .header("mcp-method", "events/stream");
    if let Some(who) = who {
        rb = rb.bearer_auth(format!("key-{who}"));
    }
    let resp = rb.body(body.to_string()).send().await.unwrap();
    support::sse_reader_with(resp, |m| {
        support::schema::assert_valid_in("2026-07-28", "JSONRPCMessage", m);
        if let Some(method) = m["method"].as_str() {
            assert!(
                [
                    "notifications/events/active",
                    "notifications/events/event",
                    "notifications/events/heartbeat",
                    "notifications/events/error",
                    "notifications/events/terminated",
                ]
                .contains(&method),
                "{m}"
            );
            assert_eq!(
                m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 7,
                "{m}"
            );
        }
    })
}

/// The next message of a stream, within 10 s.
async fn next_of(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Value>) -> Value {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a message within 10 s")
        .expect("the stream is open")
}

#[tokio::test]
async fn a_stream_says_it_is_active_then_sends_each_event_of_its_caller_and_resumes_from_a_cursor()
{
    let s = on_memory().await;
    let mut alice = client(&s.url, "alice");
    let mut bob = client(&s.url, "bob");
    let mut stream = open_stream(
        &s.url,
        Some("alice"),
        json!({"name": "task.finished", "arguments": {}, "cursor": null}),
    )
    .await;
    let active = next_of(&mut stream).await;
    assert_eq!(active["method"], "notifications/events/active", "{active}");
    assert_eq!(active["params"]["truncated"], false);
    let start = active["params"]["cursor"].clone();
    assert!(start.is_string(), "{active}");
    // Bob's task is not Alice's: only hers comes.
    let theirs = bob.start_task("slow_compute", json!({"seconds": 0})).await;
    wait_status(&mut bob, &theirs, &["completed"]).await;
    let first = alice
        .start_task("slow_compute", json!({"seconds": 0}))
        .await;
    let e = next_of(&mut stream).await;
    assert_eq!(e["method"], "notifications/events/event", "{e}");
    assert_eq!(e["params"]["name"], "task.finished");
    assert_eq!(e["params"]["data"]["taskId"], json!(first), "{e}");
    assert_eq!(e["params"]["data"]["status"], "completed");
    assert!(e["params"]["eventId"].as_str().unwrap().starts_with("evt_"));
    let after_first = e["params"]["cursor"].clone();
    let second = alice
        .start_task("slow_compute", json!({"seconds": 0}))
        .await;
    let e2 = next_of(&mut stream).await;
    assert_eq!(e2["params"]["data"]["taskId"], json!(second), "{e2}");
    drop(stream);
    // A stream from the first event's cursor replays what came after it, and only that.
    let mut again = open_stream(
        &s.url,
        Some("alice"),
        json!({"name": "task.finished", "arguments": {}, "cursor": after_first}),
    )
    .await;
    let active = next_of(&mut again).await;
    assert_eq!(active["params"]["cursor"], after_first, "{active}");
    let replayed = next_of(&mut again).await;
    assert_eq!(
        replayed["params"]["data"]["taskId"],
        json!(second),
        "{replayed}"
    );
    assert_eq!(replayed["params"]["eventId"], e2["params"]["eventId"]);
    // From the start with a filter on one task: that task's event alone.
    let mut one = open_stream(
        &s.url,
        Some("alice"),
        json!({"name": "task.finished", "arguments": {"taskId": first}, "cursor": start}),
    )
    .await;
    next_of(&mut one).await;
    let only = next_of(&mut one).await;
    assert_eq!(only["params"]["data"]["taskId"], json!(first), "{only}");
    assert!(
        tokio::time::timeout(Duration::from_millis(1500), one.recv())
            .await
            .is_err(),
        "nothing else for that task"
    );
}

#[tokio::test]
async fn a_stream_with_a_bad_request_is_an_error_and_a_stop_ends_it_with_its_result() {
    let s = on_memory().await;
    for (params, code) in [
        (
            json!({"name": "no.such.type", "cursor": null}),
            Some(-32011),
        ),
        (
            json!({"name": "task.finished", "cursor": "garbage"}),
            Some(-32602),
        ),
        (
            json!({"name": "task.finished", "arguments": {"taskId": 3}, "cursor": null}),
            Some(-32602),
        ),
    ] {
        // Answered at once, before anything is streamed.
        let m = client(&s.url, "alice")
            .call("events/stream", params.clone())
            .await;
        assert!(
            m.notifications.is_empty(),
            "{params}: {:?}",
            m.notifications
        );
        let got = m.code();
        if let Some(code) = code {
            assert_eq!(got, code, "{params}: {}", m.body);
        }
    }
    // A client that takes no stream is told so at once (a stream it cannot read would run on).
    let refused = reqwest::Client::new()
        .post(&s.url)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .header("mcp-protocol-version", support::stateless::V)
        .header("mcp-method", "events/stream")
        .body(
            json!({"jsonrpc": "2.0", "id": 3, "method": "events/stream", "params": {
            "name": "task.finished", "cursor": null,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": support::stateless::V,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
            }}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 406);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["id"], 3, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("text/event-stream"));
    // Anonymous callers may stream too (their events are those of their address).
    let mut rx = open_stream(
        &s.url,
        None,
        json!({"name": "task.finished", "cursor": null}),
    )
    .await;
    assert_eq!(
        next_of(&mut rx).await["method"],
        "notifications/events/active"
    );
    s.server.shutdown();
    let end = next_of(&mut rx).await;
    assert_eq!(end["id"], 7, "{end}");
    assert_eq!(end["result"]["resultType"], "complete", "{end}");
    assert_eq!(
        end["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        7
    );
}

#[tokio::test]
async fn max_age_skips_older_events_on_a_replay() {
    let s = on_memory().await;
    let mut alice = client(&s.url, "alice");
    let start = alice
        .call(
            "events/poll",
            json!({"name": "task.finished", "cursor": null}),
        )
        .await
        .result()["cursor"]
        .clone();
    let old = alice
        .start_task("slow_compute", json!({"seconds": 0}))
        .await;
    wait_status(&mut alice, &old, &["completed"]).await;
    // Wide margins: the newer event must stay within maxAgeMs until the stream below opens.
    tokio::time::sleep(Duration::from_millis(4000)).await;
    let new = alice
        .start_task("slow_compute", json!({"seconds": 0}))
        .await;
    wait_status(&mut alice, &new, &["completed"]).await;
    let ids = |page: &Value| -> Vec<Value> {
        page["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["data"]["taskId"].clone())
            .collect()
    };
    let all = alice
        .call(
            "events/poll",
            json!({"name": "task.finished", "cursor": start}),
        )
        .await;
    assert_eq!(ids(all.result()), vec![json!(old), json!(new)]);
    let recent = alice
        .call(
            "events/poll",
            json!({"name": "task.finished", "cursor": start, "maxAgeMs": 3500}),
        )
        .await;
    assert_eq!(ids(recent.result()), vec![json!(new)], "{}", recent.body);
    // The floor is passed over, not a gap.
    assert_eq!(recent.result()["truncated"], false);
    let mut stream = open_stream(
        &s.url,
        Some("alice"),
        json!({"name": "task.finished", "cursor": start, "maxAgeMs": 3500}),
    )
    .await;
    next_of(&mut stream).await;
    assert_eq!(
        next_of(&mut stream).await["params"]["data"]["taskId"],
        json!(new)
    );
    // The floor is where the replay starts, not an age: what happens after, however old the
    // stream grows, comes (maxAgeMs 0 replays nothing and misses nothing live).
    let mut live = open_stream(
        &s.url,
        Some("alice"),
        json!({"name": "task.finished", "cursor": start, "maxAgeMs": 0}),
    )
    .await;
    next_of(&mut live).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let later = alice
        .start_task("slow_compute", json!({"seconds": 0}))
        .await;
    assert_eq!(
        next_of(&mut live).await["params"]["data"]["taskId"],
        json!(later)
    );
    assert_eq!(
        next_of(&mut stream).await["params"]["data"]["taskId"],
        json!(later)
    );
}

#[tokio::test]
async fn subscriptions_to_a_type_removed_from_the_config_end_when_the_operator_says_and_are_told_so(
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    let receiver = Receiver::start(&[SECRET]).await;
    let with_envelopes = |mut e: EventSettings| {
        e.control_envelopes = true;
        e
    };
    let (kept, removed) = {
        let store = Arc::new(SqliteStore::open(&path).unwrap());
        let mut s = start_with(
            store,
            fast_engine(),
            config(with_envelopes(builds(
                mcp_tasks_server::events::Audience::Owner,
            ))),
            vec![build_tool()],
        )
        .await;
        let mut alice = client(&s.url, "alice");
        let mut ids = Vec::new();
        for name in ["task.finished", "build.finished"] {
            let r = alice
                .call(
                    "events/subscribe",
                    subscribe_params(name, json!({}), &receiver.url, SECRET),
                )
                .await;
            check_subscribe_result(r.result());
            ids.push(r.result()["id"].as_str().unwrap().to_string());
        }
        s.stop();
        s.server.engine().shutdown();
        drop(s);
        (ids[0].clone(), ids[1].clone())
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Started again without `build.finished`: nothing ends by itself (a replica of an older
    // config in a rolling deploy would end the new types' subscriptions for everyone).
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let s = start_with(
        store.clone(),
        fast_engine(),
        config(with_envelopes(loopback())),
        vec![],
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(store.get_subscription(&removed).await.unwrap().is_some());
    assert_eq!(s.server.end_undeclared_subscriptions().await.unwrap(), 1);
    let mut terminated = Vec::new();
    for _ in 0..100 {
        terminated = receiver
            .posts
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.body["type"] == "terminated")
            .cloned()
            .collect::<Vec<_>>();
        if !terminated.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(terminated.len(), 1, "one terminated envelope");
    let t = &terminated[0];
    assert_eq!(
        t.headers["x-mcp-subscription-id"].to_str().unwrap(),
        removed
    );
    assert!(t.headers["webhook-id"]
        .to_str()
        .unwrap()
        .starts_with("msg_terminated_"));
    assert_eq!(t.body["error"]["code"], -32011, "NotFound: {}", t.body);
    assert_eq!(t.body["error"]["data"], json!({"kind": "event"}));
    assert!(store.get_subscription(&removed).await.unwrap().is_none());
    assert!(
        store.get_subscription(&kept).await.unwrap().is_some(),
        "a subscription to a type still declared stays"
    );
}

#[tokio::test]
async fn a_given_up_delivery_is_told_as_a_gap_until_taken_with_the_missed_event_s_cursor() {
    let receiver = Receiver::start(&[SECRET]).await;
    let mut settings = loopback();
    settings.control_envelopes = true;
    settings.gap_retry = Duration::from_millis(300);
    let store = Arc::new(MemoryStore::new());
    let s = start_with(store.clone(), fast_engine(), config(settings), vec![]).await;
    let mut alice = client(&s.url, "alice");
    let r = alice
        .call(
            "events/subscribe",
            subscribe_params("task.finished", json!({}), &receiver.url, SECRET),
        )
        .await;
    let id = r.result()["id"].as_str().unwrap().to_string();
    // 413: given up at once, so the receiver missed this event.
    receiver.set(Mode::Status(413));
    let task = alice
        .start_task("slow_compute", json!({"seconds": 0}))
        .await;
    wait_status(&mut alice, &task, &["completed"]).await;
    let missed = receiver.wait_events(1, 10).await[0].clone();
    // The endpoint refuses the next two POSTs (503): the gap is told again, backing off, until
    // it is taken.
    receiver.set(Mode::Refuse(2));
    let gaps = || -> Vec<Post> {
        receiver
            .posts
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.body["type"] == "gap")
            .cloned()
            .collect()
    };
    for _ in 0..300 {
        if gaps().len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let told = gaps();
    assert_eq!(
        told.len(),
        3,
        "refused twice, taken the third time: {told:?}"
    );
    let gap = told[2].clone();
    let ids: std::collections::BTreeSet<&str> = told
        .iter()
        .map(|p| p.headers["webhook-id"].to_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 1, "one message, told three times: {ids:?}");
    assert_eq!(gap.headers["x-mcp-subscription-id"].to_str().unwrap(), id);
    assert!(gap.headers["webhook-id"]
        .to_str()
        .unwrap()
        .starts_with("msg_gap_"));
    assert!(
        gap.body["cursor"].is_string(),
        "the AI SDK needs a string: {}",
        gap.body
    );
    // Taken: forgotten, not sent again.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert_eq!(gaps().len(), 3, "a gap taken is not told again");
    assert!(store
        .due_event_gaps(u64::MAX / 2, 10)
        .await
        .unwrap()
        .is_empty());
    // The cursor to keep is the missed event's: everything up to it was delivered or given up.
    assert_eq!(gap.body["cursor"], missed.body["cursor"], "{}", gap.body);
    assert!(verifies(&[SECRET], &gap.headers, &gap.raw), "signed");
    // Delivery goes on as before.
    let next = alice
        .start_task("slow_compute", json!({"seconds": 0}))
        .await;
    wait_status(&mut alice, &next, &["completed"]).await;
    let got = receiver.wait_events(2, 10).await;
    assert_eq!(got[1].body["data"]["taskId"], json!(next));
}
