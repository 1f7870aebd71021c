//! Three `mcp-tasks serve` replicas on one PostgreSQL schema behind nginx, which round-robins every
//! request with no stickiness (`common::cluster`): what works against one server works through the
//! balancer, for the official TypeScript and Python SDK v1 clients, the official MCP Tasks client on
//! both wires, and the rmcp client; a replica killed under load has its tasks taken over within two
//! lease lengths, none run twice; the database connections lost under load lose nothing.

mod common;
mod rmcp_scenario;
#[path = "../../server/tests/support/mod.rs"]
mod support;

use common::cluster::{run_script, Cluster};
use common::repo_root;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::stateless::{listen, Stateless, EXT, V};
use support::Client;

fn node() -> PathBuf {
    assert!(
        repo_root()
            .join("interop/ts/node_modules/@modelcontextprotocol/sdk")
            .exists(),
        "interop/ts/node_modules is missing: run scripts/test.sh"
    );
    PathBuf::from("node")
}

#[test]
fn typescript_sdk_v1_client_through_three_replicas() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(Cluster::start("lb_ts", 3, ""));
    run_script(
        &node(),
        "interop/ts/tasks-interop.mjs",
        &["http", &cluster.url],
    );
    rt.block_on(cluster.finish());
}

#[test]
fn python_sdk_v1_client_through_three_replicas() {
    let py = repo_root().join("interop/python/.venv/bin/python");
    assert!(
        py.exists(),
        "interop/python/.venv is missing: run scripts/test.sh"
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(Cluster::start("lb_py", 3, ""));
    run_script(
        &py,
        "interop/python/tasks_interop.py",
        &["http", &cluster.url],
    );
    rt.block_on(cluster.finish());
}

#[test]
fn mcp_tasks_client_on_both_wires_through_three_replicas() {
    assert!(
        repo_root()
            .join("interop/ext-tasks/node_modules/@modelcontextprotocol/ext-tasks")
            .exists(),
        "interop/ext-tasks/node_modules is missing: run scripts/test.sh"
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(Cluster::start("lb_ext", 3, ""));
    for wire in ["2025", "2026"] {
        run_script(
            &node(),
            "interop/ext-tasks/ext-tasks-interop.mjs",
            &[wire, &cluster.url],
        );
    }
    rt.block_on(cluster.finish());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_client_through_three_replicas() {
    let cluster = Cluster::start("lb_rmcp", 3, "").await;
    tokio::time::timeout(rmcp_scenario::LIMIT, rmcp_scenario::scenario(&cluster.url))
        .await
        .expect("the rmcp scenario finished in time");
    tokio::time::timeout(
        rmcp_scenario::LIMIT,
        rmcp_scenario::legacy_scenario(&cluster.url),
    )
    .await
    .expect("the legacy rmcp scenario finished in time");
    cluster.finish().await;
}

/// Tasks spread over the three replicas by the balancer; one `subscriptions/listen` stream (held by
/// whichever replica the balancer picked) sees every one of them finish, and 2025-11-25
/// `tasks/result` calls blocked on any replica return.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_listener_and_blocked_results_see_tasks_on_every_replica() {
    let cluster = Cluster::start("lb_listen", 3, "").await;
    let mut c = Stateless::with_tasks(&cluster.url);
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(
            c.start_task(
                "slow_compute",
                json!({"seconds": 1, "label": format!("t{i}")}),
            )
            .await,
        );
    }
    let params = json!({
        "notifications": {"taskIds": ids},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": V,
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXT: {}}},
        },
    });
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": params});
    let mut rx = listen(&cluster.url, body).await;
    let ack = support::next_msg(&mut rx).await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    let mut completed = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while completed.len() < ids.len() {
        let n = tokio::time::timeout_at(deadline.into(), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("the listener saw only {completed:?} of {ids:?} finish"))
            .expect("the listen stream stays open");
        if n["method"] == "notifications/tasks" && n["params"]["status"] == "completed" {
            completed.insert(n["params"]["taskId"].as_str().unwrap().to_string());
        }
    }

    // 2025-11-25: each request of the session goes to the next replica; results block and return.
    let mut s = Client::connect(&cluster.url).await;
    let mut made = Vec::new();
    for i in 0..3 {
        let t = s
            .create_task(
                "slow_compute",
                json!({"seconds": 1, "label": format!("blocked {i}")}),
            )
            .await;
        made.push(t["taskId"].as_str().unwrap().to_string());
    }
    for (i, id) in made.iter().enumerate() {
        let r = tokio::time::timeout(
            Duration::from_secs(20),
            s.request("tasks/result", json!({"taskId": id})),
        )
        .await
        .expect("a blocked tasks/result returned");
        assert!(
            r.result()["content"]
                .to_string()
                .contains(&format!("blocked {i}")),
            "{}",
            r.result()
        );
    }
    cluster.finish().await;
}

/// A 2025-11-25 session with its GET stream on one replica and each `tasks/result` stream on
/// another (the balancer's round robin): every question and status notification of its tasks
/// reaches the client once, on one of the two streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_task_messages_go_out_once_across_replicas() {
    let cluster = Cluster::start("lb_once", 3, "").await;
    let mut c = Client::connect_caps(&cluster.url, json!({"elicitation": {}})).await;
    let mut get = c.open_stream().await;
    for round in 0..4 {
        let t = c
            .create_task(
                "confirm_delete",
                json!({"filename": format!("round{round}.txt")}),
            )
            .await;
        let id = t["taskId"].as_str().unwrap().to_string();
        let mut result = c
            .stream_request("tasks/result", json!({"taskId": id}))
            .await;
        let mut seen: Vec<(&str, Value)> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        let reply = loop {
            let (from, msg) = tokio::select! {
                m = result.recv() => ("result", m.expect("the tasks/result stream ends with its reply")),
                m = get.recv() => ("get", m.expect("the GET stream stays open")),
                _ = tokio::time::sleep_until(deadline.into()) => panic!("round {round}: no reply; saw {seen:?}"),
            };
            if from == "result" && msg.get("id").is_some() && msg.get("method").is_none() {
                break msg;
            }
            if msg["method"] == "elicitation/create" {
                let (status, body) = c
                    .respond(
                        &msg["id"],
                        json!({"action": "accept", "content": {"confirm": true}}),
                    )
                    .await;
                assert_eq!(status, 202, "round {round}: the answer was taken: {body}");
            }
            seen.push((from, msg));
        };
        assert!(
            reply["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .starts_with("Deleted"),
            "{reply}"
        );
        // Late copies would come now.
        tokio::time::sleep(Duration::from_millis(300)).await;
        while let Ok(msg) = get.try_recv() {
            seen.push(("get", msg));
        }
        let about_task = |m: &Value| {
            m["params"]["taskId"] == json!(id)
                || m["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"]
                    == json!(id)
        };
        let questions = seen
            .iter()
            .filter(|(_, m)| m["method"] == "elicitation/create" && about_task(m))
            .count();
        assert_eq!(questions, 1, "round {round}: one question: {seen:?}");
        let mut statuses: Vec<&str> = seen
            .iter()
            .filter(|(_, m)| m["method"] == "notifications/tasks/status" && about_task(m))
            .map(|(_, m)| m["params"]["status"].as_str().unwrap())
            .collect();
        let all = statuses.clone();
        statuses.sort();
        statuses.dedup();
        assert_eq!(
            statuses.len(),
            all.len(),
            "round {round}: each status once: {seen:?}"
        );
        assert!(all.contains(&"completed"), "round {round}: {seen:?}");
    }
    cluster.finish().await;
}

const LEASE_SECS: u64 = 2;

/// A command tool that logs when each run starts and ends, to count runs per task; tasks are leased
/// for `lease_secs`.
fn run_logging_config(log: &std::path::Path, lease_secs: u64) -> String {
    let script = format!(
        "echo \"start $MCP_TASKS_TASK_ID $$\" >> {log}; sleep 2; echo \"end $MCP_TASKS_TASK_ID $$\" >> {log}; echo done",
        log = log.display()
    );
    format!(
        r#"[auth]
anonymous_max_running_tasks = 1000
anonymous_calls_per_minute = 100000

[tasks]
lease_secs = {lease_secs}
sweep_interval_secs = 1

[[tools]]
name = "once"
command = ["sh", "-c", {script:?}]
task_support = "required"

[[tools]]
name = "again"
command = ["sh", "-c", {script:?}]
task_support = "required"
retry_on_restart = true
"#
    )
}

/// Creates a task of `tool` through the balancer with a 2026-07-28 request; `Err` with what came
/// back when the request failed (a replica died under it, or the database was away).
async fn try_create(http: &reqwest::Client, url: &str, tool: &str) -> Result<String, String> {
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {
            "name": tool, "arguments": {},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": V,
                "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXT: {}}},
            },
        },
    });
    let resp = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", V)
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| format!("send: {e}"))?;
    let status = resp.status().as_u16();
    let text = resp.text().await.map_err(|e| format!("read: {e}"))?;
    let reply: Value = if let Some(data) = text.lines().find_map(|l| l.strip_prefix("data:")) {
        serde_json::from_str(data.trim()).map_err(|e| format!("{status}: {e}: {text}"))?
    } else {
        serde_json::from_str(&text).map_err(|_| format!("HTTP {status}: {text}"))?
    };
    match reply["result"]["taskId"].as_str() {
        Some(id) => Ok(id.to_string()),
        None => Err(format!("HTTP {status}: {reply}")),
    }
}

/// `start`/`end` lines of the run log, per task.
fn runs(log: &std::path::Path) -> HashMap<String, (usize, usize)> {
    let mut seen: HashMap<String, (usize, usize)> = HashMap::new();
    for line in std::fs::read_to_string(log).unwrap_or_default().lines() {
        let mut words = line.split(' ');
        if let (Some(what), Some(id)) = (words.next(), words.next()) {
            let e = seen.entry(id.to_string()).or_default();
            match what {
                "start" => e.0 += 1,
                "end" => e.1 += 1,
                _ => {}
            }
        }
    }
    seen
}

/// No two runs of one task overlapped: between a run's start and its end (its shell's pid on both
/// lines, appended in order) the log holds no other start of that task. (A run killed with its
/// replica leaves no end, so only runs that ended are checked.) The lines of each task are in
/// the message when it fails.
fn assert_no_overlapping_runs(log: &std::path::Path) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut lines: HashMap<&str, Vec<(&str, &str)>> = HashMap::new();
    for line in text.lines() {
        let w: Vec<&str> = line.split(' ').collect();
        if let [what, id, pid] = w[..] {
            lines.entry(id).or_default().push((what, pid));
        }
    }
    for (id, seq) in &lines {
        for (at, (what, pid)) in seq.iter().enumerate() {
            if *what != "end" {
                continue;
            }
            let began = seq[..at]
                .iter()
                .rposition(|(w, p)| *w == "start" && p == pid)
                .unwrap_or_else(|| panic!("{id}: an end with no start: {seq:?}"));
            assert!(
                !seq[began + 1..at].iter().any(|(w, _)| *w == "start"),
                "{id}: another run began while run {pid} ran: {seq:?}"
            );
        }
    }
}

/// The run log's lines of task `id`, for a failure's message.
fn lines_of(log: &std::path::Path, id: &str) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split(' ').nth(1) == Some(id))
        .map(str::to_string)
        .collect()
}

/// Creates tasks through the balancer from four clients for `for_how_long`; the acknowledged ids
/// with their tools, and the failures.
async fn load(url: &str, for_how_long: Duration) -> (Vec<(String, &'static str)>, Vec<String>) {
    let mut clients = Vec::new();
    for k in 0..4 {
        let url = url.to_string();
        clients.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut made = Vec::new();
            let mut failed = Vec::new();
            let started = Instant::now();
            let mut n = k;
            while started.elapsed() < for_how_long {
                let tool = if n % 2 == 0 { "once" } else { "again" };
                n += 1;
                match try_create(&http, &url, tool).await {
                    Ok(id) => made.push((id, tool)),
                    Err(e) => failed.push(e),
                }
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
            (made, failed)
        }));
    }
    let mut made = Vec::new();
    let mut failed = Vec::new();
    for c in clients {
        let (m, f) = c.await.unwrap();
        made.extend(m);
        failed.extend(f);
    }
    (made, failed)
}

fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

fn parse_rfc3339_ms(s: &str) -> i64 {
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|e| panic!("{s}: {e}"));
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

/// Waits until every task is terminal; their final `tasks/get` results.
async fn settle(url: &str, ids: &[(String, &'static str)], limit: Duration) -> Vec<Value> {
    let mut c = Stateless::with_tasks(url);
    let deadline = Instant::now() + limit;
    let mut done = Vec::new();
    for (id, _) in ids {
        loop {
            let t = c.call("tasks/get", json!({"taskId": id})).await;
            let t = t.result().clone();
            if ["completed", "failed", "cancelled"].contains(&t["status"].as_str().unwrap()) {
                done.push(t);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "task {id} still {} long after the load",
                t["status"]
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    done
}

/// kill -9 of one replica while clients create tasks through the balancer: every acknowledged task
/// ends in one terminal state; the dead replica's tasks are failed as interrupted (or re-run, for
/// the retry-safe tool) within two lease lengths of the kill; no task ran twice, and a re-run began
/// only after the first run was gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_under_load_has_its_tasks_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("runs.log");
    let mut cluster = Cluster::start("lb_kill", 3, &run_logging_config(&log, LEASE_SECS)).await;
    let url = cluster.url.clone();
    let loader = tokio::spawn(async move { load(&url, Duration::from_secs(4)).await });
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let killed_at = SystemTime::now();
    cluster.kill9(0);
    let (made, failed) = loader.await.unwrap();
    assert!(made.len() >= 20, "the load created tasks: {}", made.len());
    for e in &failed {
        // Requests in flight on the dead replica: nginx answers 502 (the replica reset the
        // connection), or the reply is cut mid-body (nginx had passed its headers on when the kill
        // came) or before it (the connection reset): each a failed request whose task may exist,
        // which the run log's check below covers.
        assert!(
            e.starts_with("HTTP 502") || e.starts_with("read: ") || e.starts_with("send: "),
            "{e}"
        );
    }

    let finished = settle(&cluster.url, &made, Duration::from_secs(30)).await;
    assert_no_overlapping_runs(&log);
    let runs = runs(&log);
    let tools: BTreeMap<&str, &str> = made.iter().map(|(id, t)| (id.as_str(), *t)).collect();
    let mut interrupted = 0;
    let mut rerun = 0;
    let mut slowest_takeover = 0;
    for t in &finished {
        let id = t["taskId"].as_str().unwrap();
        let status = t["status"].as_str().unwrap();
        let (starts, ends) = runs.get(id).copied().unwrap_or_default();
        let message = t["statusMessage"].as_str().unwrap_or_default();
        if status == "failed" {
            assert!(message.contains("interrupted"), "{t}");
            assert_eq!(
                tools[id], "once",
                "only the tool that is not retry-safe fails: {t}"
            );
            // Its process had started, or the replica died before it could start it.
            assert!(starts <= 1, "ran at most once: {t}");
            assert_eq!(ends, 0, "its run died with the replica: {t}");
            interrupted += 1;
            let took = parse_rfc3339_ms(t["lastUpdatedAt"].as_str().unwrap()) - unix_ms(killed_at);
            slowest_takeover = slowest_takeover.max(took);
        } else {
            assert_eq!(status, "completed", "{t}");
            assert_eq!(ends, 1, "one run finished: {t} {:?}", lines_of(&log, id));
            if starts == 2 {
                // Re-run after the takeover: only for the retry-safe tool.
                assert_eq!(tools[id], "again", "{t}");
                rerun += 1;
            } else {
                assert_eq!(starts, 1, "{t}");
            }
        }
    }
    // The run log also holds the start of tasks whose create reply never arrived: they ran at most
    // once too (twice only when retry-safe).
    for (id, (starts, _)) in &runs {
        assert!(*starts <= 2, "{id} started {starts} times");
    }
    eprintln!(
        "{} tasks acknowledged, {} requests failed at the kill, {interrupted} failed as interrupted, \
         {rerun} re-run; slowest takeover {slowest_takeover} ms after the kill (lease {LEASE_SECS} s)",
        made.len(),
        failed.len()
    );
    assert!(
        interrupted + rerun > 0,
        "the killed replica held some of the tasks"
    );
    assert!(
        slowest_takeover <= (2 * LEASE_SECS * 1000) as i64,
        "taken over within two lease lengths: {slowest_takeover} ms"
    );
    cluster.finish().await;
}

/// Every PostgreSQL connection of every replica terminated every 30 ms for 2.5 s while clients
/// create tasks through the balancer: requests fail with a JSON-RPC error while it lasts, the
/// replicas reconnect by themselves, and every acknowledged task ends once, run once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_connections_lost_under_load_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("runs.log");
    // Leases outlast the outage: a task whose renewals failed for a while is not taken for dead.
    let cluster = Cluster::start("lb_conn", 3, &run_logging_config(&log, 10)).await;
    let apps = cluster.app_names.clone();
    let killer = tokio::spawn(common::pg::terminate_connections(
        apps,
        Duration::from_millis(800),
        Duration::from_millis(2_500),
    ));
    let (made, failed) = load(&cluster.url, Duration::from_secs(5)).await;
    let terminated = killer.await.unwrap();
    assert!(terminated > 0, "connections were terminated");
    for e in &failed {
        assert!(
            e.contains("-32603") && (e.contains("store") || e.contains("PostgreSQL")),
            "a JSON-RPC error naming the store: {e}"
        );
    }
    // After the outage every replica answers again (round robin: three in a row reach all three).
    let http = reqwest::Client::new();
    for _ in 0..3 {
        try_create(&http, &cluster.url, "once")
            .await
            .expect("the replicas serve again");
    }
    let finished = settle(&cluster.url, &made, Duration::from_secs(40)).await;
    assert_no_overlapping_runs(&log);
    let runs = runs(&log);
    for t in &finished {
        let id = t["taskId"].as_str().unwrap();
        assert_eq!(t["status"], "completed", "{t}");
        assert_eq!(runs.get(id), Some(&(1, 1)), "run once: {t}");
    }
    eprintln!(
        "{} tasks acknowledged, {} requests failed during the outage, {terminated} connections terminated",
        made.len(),
        failed.len()
    );
    cluster.finish().await;
}
