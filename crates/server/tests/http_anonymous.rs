//! Anonymous callers' budgets (issue 13, item 3): sessions opened per minute and live sessions, per
//! client address and in total; anonymous sessions idle out sooner than keyed ones; an anonymous
//! client's limits hold per address across its sessions, and per wire. Client addresses are told
//! apart by binding to different loopback addresses (127.0.0.2, 127.0.0.3, …).

mod support;

use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_server::auth::{hash_key, ApiKey, AuthConfig, Limits, SessionBudget};
use mcp_tasks_server::ServerConfig;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use support::stateless::Stateless;
use support::{fast_engine, start_with, Client, Exchange, TestServer};

const KEY: &str = "mcpt_test-key-of-alice";

/// A server with `budget` for anonymous sessions, `limits` for anonymous calls, and one API key
/// (alice, `KEY`) while anonymous access stays on.
async fn start_budgeted(budget: SessionBudget, limits: Limits) -> TestServer {
    let config = ServerConfig {
        auth: AuthConfig {
            keys: vec![ApiKey {
                principal: "alice".into(),
                sha256: hash_key(KEY),
                limits: Limits::default(),
                scopes: None,
            }],
            allow_anonymous: true,
            anonymous_limits: limits,
            anonymous_sessions: budget,
            ..AuthConfig::default()
        },
        ..ServerConfig::default()
    };
    start_with(Arc::new(MemoryStore::new()), fast_engine(), config, vec![]).await
}

/// An `initialize` from `ip`; the client holds the session when it was opened.
async fn open_from(url: &str, ip: &str) -> (Client, Exchange) {
    let mut c = Client::new_from(url, ip);
    let ex = c
        .request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
        )
        .await;
    (c, ex)
}

fn error_of(ex: &Exchange) -> Value {
    ex.reply
        .as_ref()
        .map(|r| r["error"].clone())
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_session_flood_is_cut_per_address_and_in_total_while_keyed_callers_go_on() {
    let s = start_budgeted(
        SessionBudget {
            per_minute_per_address: 5,
            per_minute: 8,
            ..SessionBudget::default()
        },
        Limits::default(),
    )
    .await;
    // One address: a minute's worth (5) at once, then 429 with Retry-After.
    for i in 0..5 {
        let (c, ex) = open_from(&s.url, "127.0.0.2").await;
        assert_eq!(ex.status, 200, "session {i}: {:?}", ex.reply);
        assert!(c.session.is_some());
    }
    let (c, ex) = open_from(&s.url, "127.0.0.2").await;
    assert_eq!(ex.status, 429, "{:?}", ex.reply);
    assert!(c.session.is_none(), "no session id on a refusal");
    let e = error_of(&ex);
    assert_eq!(e["code"], -32005);
    assert_eq!(e["data"]["limit"], 5);
    assert!(
        e["message"].as_str().unwrap().starts_with(
            "Too many sessions opened: at most 5 per minute from one client address; retry in "
        ),
        "{e}"
    );
    let wait: u64 = ex.retry_after.as_deref().unwrap().parse().unwrap();
    assert!(
        (1..=12).contains(&wait),
        "about 12 s for the next one: {wait}"
    );
    // Another address has its own budget, up to all anonymous callers' (8 a minute): 3 more.
    for _ in 0..3 {
        let (_, ex) = open_from(&s.url, "127.0.0.3").await;
        assert_eq!(ex.status, 200, "{:?}", ex.reply);
    }
    let (_, ex) = open_from(&s.url, "127.0.0.4").await;
    assert_eq!(
        ex.status, 503,
        "all anonymous callers' budget: {:?}",
        ex.reply
    );
    assert_eq!(error_of(&ex)["code"], -32005);
    assert!(ex.retry_after.is_some());
    // A keyed caller is not an anonymous one.
    let keyed = Client::connect_token(&s.url, KEY, json!({})).await;
    assert!(keyed.session.is_some());
}

#[tokio::test]
async fn live_anonymous_sessions_are_capped_per_address_and_in_total() {
    let s = start_budgeted(
        SessionBudget {
            max_per_address: 3,
            max: 5,
            ..SessionBudget::default()
        },
        Limits::default(),
    )
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let (c, ex) = open_from(&s.url, "127.0.0.2").await;
        assert_eq!(ex.status, 200);
        held.push(c);
    }
    let (_, ex) = open_from(&s.url, "127.0.0.2").await;
    assert_eq!(ex.status, 429, "{:?}", ex.reply);
    let e = error_of(&ex);
    assert_eq!(e["code"], -32006);
    assert_eq!(e["data"], json!({"live": 3, "limit": 3}));
    assert_eq!(
        e["message"],
        "Too many sessions: this client address has 3 live sessions, the limit is 3; end one (HTTP \
         DELETE with its Mcp-Session-Id) or wait until one has been unused for 60 min"
    );
    // Ending one makes room.
    let gone = held.pop().unwrap();
    let deleted = gone
        .http
        .delete(&s.url)
        .header("mcp-session-id", gone.session.as_ref().unwrap())
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status().as_u16(), 204);
    let (c, ex) = open_from(&s.url, "127.0.0.2").await;
    assert_eq!(ex.status, 200, "{:?}", ex.reply);
    held.push(c);
    // Other addresses, up to the total of 5.
    for _ in 0..2 {
        let (c, ex) = open_from(&s.url, "127.0.0.3").await;
        assert_eq!(ex.status, 200);
        held.push(c);
    }
    let (_, ex) = open_from(&s.url, "127.0.0.4").await;
    assert_eq!(ex.status, 503, "{:?}", ex.reply);
    let e = error_of(&ex);
    assert_eq!(e["code"], -32006);
    assert_eq!(e["data"], json!({"live": 5, "limit": 5}));
    assert_eq!(
        e["message"],
        "Too many anonymous sessions: 5 live, the limit is 5; try again later, or authenticate \
         with an API key"
    );
    // Keyed sessions are not counted.
    let keyed = Client::connect_token(&s.url, KEY, json!({})).await;
    assert!(keyed.session.is_some());
    // Every held session still works.
    for c in &mut held {
        let ex = c.request("tools/list", json!({})).await;
        assert_eq!(ex.status, 200);
    }
}

#[tokio::test]
async fn anonymous_sessions_idle_out_sooner_than_keyed_ones_unless_a_stream_is_open() {
    let s = start_budgeted(
        SessionBudget {
            idle: Duration::from_millis(1500),
            max_per_address: 2,
            ..SessionBudget::default()
        },
        Limits::default(),
    )
    .await;
    let (mut idle, _) = open_from(&s.url, "127.0.0.2").await;
    let (listening, _) = open_from(&s.url, "127.0.0.2").await;
    let _stream = listening.open_stream().await;
    let mut keyed = Client::connect_token(&s.url, KEY, json!({})).await;
    // Used within its idle limit, a session stays.
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(idle.request("tools/list", json!({})).await.status, 200);
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(idle.request("tools/list", json!({})).await.status, 200);
    // Unused past it, it has ended.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let list = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}).to_string();
    let ex = support::read_exchange(idle.post(list).send().await.unwrap()).await;
    assert_eq!(ex.status, 404, "{:?}", ex.reply);
    assert!(
        error_of(&ex)["message"]
            .as_str()
            .unwrap()
            .contains("session not found"),
        "{:?}",
        ex.reply
    );
    // The one whose client holds its stream open was not idle; the keyed one has a day.
    let mut listening = listening;
    assert_eq!(listening.request("tools/list", json!({})).await.status, 200);
    assert_eq!(keyed.request("tools/list", json!({})).await.status, 200);
    // The ended session no longer counts against its address (at most 2 live).
    let (_, ex) = open_from(&s.url, "127.0.0.2").await;
    assert_eq!(ex.status, 200, "{:?}", ex.reply);
}

#[tokio::test]
async fn running_tasks_are_capped_per_address_across_its_sessions_and_per_wire() {
    let s = start_budgeted(
        SessionBudget::default(),
        Limits {
            max_running_tasks: 2,
            ..Limits::default()
        },
    )
    .await;
    let long =
        json!({"name": "slow_compute", "arguments": {"seconds": 30}, "task": {"ttl": 60_000}});
    // Two sessions of one address share its cap of 2…
    let mut a = Client::connect_from(&s.url, "127.0.0.2").await;
    let mut b = Client::connect_from(&s.url, "127.0.0.2").await;
    let mut c = Client::connect_from(&s.url, "127.0.0.2").await;
    assert!(a.request("tools/call", long.clone()).await.result()["task"]["taskId"].is_string());
    assert!(b.request("tools/call", long.clone()).await.result()["task"]["taskId"].is_string());
    let ex = c.request("tools/call", long.clone()).await;
    assert_eq!(ex.error_code(), -32004, "{:?}", ex.reply);
    assert_eq!(ex.error()["data"], json!({"running": 2, "limit": 2}));
    // …but a session cannot see another's tasks.
    let listed = c.request("tasks/list", json!({})).await;
    assert_eq!(listed.result()["tasks"], json!([]));
    // Another address has its own cap; so has the same address's stateless wire (and its tasks do
    // not count against the address's sessions).
    let mut other = Client::connect_from(&s.url, "127.0.0.3").await;
    assert!(other.request("tools/call", long.clone()).await.result()["task"]["taskId"].is_string());
    let mut stateless = Stateless::with_tasks(&s.url).bound_to("127.0.0.2");
    let args = json!({"seconds": 30});
    stateless.start_task("slow_compute", args.clone()).await;
    stateless.start_task("slow_compute", args.clone()).await;
    let third = stateless
        .call(
            "tools/call",
            json!({"name": "slow_compute", "arguments": args}),
        )
        .await;
    assert_eq!(third.body["error"]["code"], -32004, "{}", third.body);
    let ex = c.request("tools/call", long).await;
    assert_eq!(
        ex.error()["data"]["running"],
        2,
        "the sessions' count is unchanged"
    );
}

#[tokio::test]
async fn a_greedy_anonymous_client_does_not_starve_a_polite_one() {
    let s = start_budgeted(
        SessionBudget::default(),
        Limits {
            max_running_tasks: 3,
            calls_per_minute: Some(60),
            max_plain_calls: 2,
            ..Limits::default()
        },
    )
    .await;
    // The greedy one (127.0.0.2) uses up its running tasks and its calls.
    let mut greedy = Stateless::with_tasks(&s.url).bound_to("127.0.0.2");
    let mut refused = (false, false);
    for _ in 0..40 {
        let a = greedy
            .call(
                "tools/call",
                json!({"name": "slow_compute", "arguments": {"seconds": 30}}),
            )
            .await;
        match a.body["error"]["code"].as_i64() {
            Some(-32004) => refused.0 = true,
            Some(-32005) => {
                assert_eq!(a.status, 429);
                refused.1 = true;
                break;
            }
            _ => {}
        }
    }
    assert!(refused.0 && refused.1, "the greedy client met both caps");
    // The polite one (127.0.0.3) is served at once: a task, its status, its cancel.
    let mut polite = Stateless::with_tasks(&s.url).bound_to("127.0.0.3");
    let started = std::time::Instant::now();
    let id = polite
        .start_task("slow_compute", json!({"seconds": 30}))
        .await;
    let got = polite.call("tasks/get", json!({"taskId": id})).await;
    assert_eq!(got.body["result"]["status"], "working", "{}", got.body);
    let cancelled = polite.call("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    assert!(started.elapsed() < Duration::from_secs(5));
}
