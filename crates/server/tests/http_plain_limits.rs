//! Plain (non-task) calls are capped (issue 13, item 4): per caller, and per command tool's
//! processes; past a cap a plain call gets -32004 like the cap on unfinished tasks, and a task waits
//! for a process slot instead.

mod support;

use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_server::auth::{AuthConfig, Limits};
use mcp_tasks_server::tools::command::CommandToolSpec;
use mcp_tasks_server::ServerConfig;
use serde_json::{json, Value};
use std::sync::Arc;
use support::{fast_engine, read_exchange, start_with, Client};

fn plain_call(id: u64, tool: &str, arguments: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}})
    .to_string()
}

/// Sends the calls at once on `c`'s session and returns each reply.
async fn all_at_once(c: &Client, calls: Vec<String>) -> Vec<Value> {
    let sent = calls.into_iter().map(|body| {
        let rb = c.post(body);
        async move { read_exchange(rb.send().await.unwrap()).await.reply.unwrap() }
    });
    futures::future::join_all(sent).await
}

/// A server whose anonymous callers may run `max_plain_calls` plain calls at once.
async fn start_capped(max_plain_calls: usize) -> support::TestServer {
    let config = ServerConfig {
        auth: AuthConfig {
            anonymous_limits: Limits {
                max_plain_calls,
                ..Limits::default()
            },
            ..AuthConfig::default()
        },
        ..ServerConfig::default()
    };
    start_with(Arc::new(MemoryStore::new()), fast_engine(), config, vec![]).await
}

/// A server with the command tool `nap` (`sleep SECS`), at most `max_processes` of it at once.
async fn start_napping(secs: u32, max_processes: usize) -> support::TestServer {
    let spec: CommandToolSpec = serde_json::from_value(json!({
        "name": "nap",
        "command": ["sleep", secs.to_string()],
        "max_processes": max_processes,
    }))
    .unwrap();
    start_with(
        Arc::new(MemoryStore::new()),
        fast_engine(),
        ServerConfig::default(),
        vec![spec.into_tool()],
    )
    .await
}

fn code(reply: &Value) -> i64 {
    reply["error"]["code"].as_i64().unwrap_or(0)
}

#[tokio::test]
async fn a_caller_runs_at_most_its_plain_call_limit_at_once() {
    let s = start_capped(2).await;
    let c = Client::connect(&s.url).await;
    let slow = |id| plain_call(id, "slow_compute", json!({"seconds": 1.0}));
    let replies = all_at_once(&c, vec![slow(1), slow(2), slow(3)]).await;
    let refused: Vec<&Value> = replies.iter().filter(|r| code(r) == -32004).collect();
    assert_eq!(refused.len(), 1, "{replies:?}");
    assert_eq!(
        refused[0]["error"]["message"],
        "Too many calls running: 2 plain calls, the limit is 2; wait for one to finish, or call the tool as a task"
    );
    assert_eq!(
        refused[0]["error"]["data"],
        json!({"running": 2, "limit": 2})
    );
    assert_eq!(
        replies.iter().filter(|r| r.get("result").is_some()).count(),
        2
    );
    // The slots are given back when the calls end.
    let again = all_at_once(&c, vec![slow(4), slow(5)]).await;
    assert!(again.iter().all(|r| r.get("result").is_some()), "{again:?}");
    // Another session of the same address shares the slots; another address has its own.
    let same = Client::connect(&s.url).await;
    let other = Client::connect_from(&s.url, "127.0.0.2").await;
    let busy = all_at_once(&c, vec![slow(6), slow(7)]);
    let shared = async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        all_at_once(&same, vec![slow(8)]).await
    };
    let elsewhere = async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        all_at_once(&other, vec![slow(9)]).await
    };
    let (_, shared, elsewhere) = tokio::join!(busy, shared, elsewhere);
    assert_eq!(code(&shared[0]), -32004, "{shared:?}");
    assert!(elsewhere[0].get("result").is_some(), "{elsewhere:?}");
}

#[tokio::test]
async fn on_the_stateless_wire_the_cap_is_per_client_address() {
    let s = start_capped(1).await;
    let call = |url: String| async move {
        let mut c = support::stateless::Stateless::new(&url, json!({}));
        c.call(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 1.0}}),
        )
        .await
        .body
    };
    let (a, b) = tokio::join!(call(s.url.clone()), call(s.url.clone()));
    let codes = [code(&a), code(&b)];
    assert!(codes.contains(&-32004), "one of two is refused: {a} {b}");
    assert!(codes.contains(&0), "the other runs: {a} {b}");
}

#[tokio::test]
async fn a_command_tool_runs_at_most_max_processes_and_tasks_wait_their_turn() {
    let s = start_napping(1, 1).await;
    let mut c = Client::connect(&s.url).await;
    let replies = all_at_once(
        &c,
        vec![
            plain_call(1, "nap", json!({})),
            plain_call(2, "nap", json!({})),
        ],
    )
    .await;
    let refused: Vec<&Value> = replies.iter().filter(|r| code(r) == -32004).collect();
    assert_eq!(refused.len(), 1, "{replies:?}");
    assert!(
        refused[0]["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Too many processes running: 1 of tool nap, the limit is 1"),
        "{refused:?}"
    );
    // As tasks, the second waits for the first and then runs.
    let a = c.create_task("nap", json!({})).await;
    let b = c.create_task("nap", json!({})).await;
    let (a, b) = (
        a["taskId"].as_str().unwrap().to_string(),
        b["taskId"].as_str().unwrap().to_string(),
    );
    let mut saw_waiting = false;
    for _ in 0..20 {
        let t = c.get_task(&b).await;
        if t["statusMessage"]
            .as_str()
            .is_some_and(|m| m.contains("waiting: 1 processes of nap"))
        {
            saw_waiting = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(saw_waiting, "the waiting task says why");
    for id in [&a, &b] {
        let done = c.wait_terminal(id).await;
        assert_eq!(done["status"], "completed", "{done}");
    }
}

#[tokio::test]
async fn a_flood_of_plain_calls_starts_no_more_processes_than_the_caps_allow() {
    // The flood: 60 plain calls of a command tool at once (they used to start 60
    // processes). 16 plain calls per caller get in; of those, 4 processes run; the rest are told
    // -32004 at once. The four run for 3 s: the whole flood arrives while they do.
    let s = start_napping(3, 4).await;
    let c = Client::connect(&s.url).await;
    let started = std::time::Instant::now();
    let replies = all_at_once(
        &c,
        (1..=60).map(|i| plain_call(i, "nap", json!({}))).collect(),
    )
    .await;
    let ran = replies.iter().filter(|r| r.get("result").is_some()).count();
    let refused: Vec<String> = replies
        .iter()
        .filter(|r| code(r) == -32004)
        .map(|r| {
            r["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(ran, 4, "{replies:?}");
    assert_eq!(
        refused.len(),
        56,
        "every other call is refused: {replies:?}"
    );
    assert!(refused
        .iter()
        .any(|m| m.starts_with("Too many calls running: 16 plain calls")));
    assert!(refused
        .iter()
        .any(|m| m.starts_with("Too many processes running: 4 of tool nap")));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "no call waited for a slot"
    );
}
