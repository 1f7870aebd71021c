//! Two `mcp-tasks serve` replicas on one PostgreSQL schema: a client's session, its tasks and the
//! wake-ups cross from one to the other (LISTEN/NOTIFY), with no polling behind them.

mod common;
#[path = "../../server/tests/support/mod.rs"]
mod support;

use common::ServerProcess;
use serde_json::json;
use std::time::{Duration, Instant};
use support::stateless::{listen, wait_status, Stateless, EXT, V};
use support::Client;

fn config(dir: &std::path::Path, ticks: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("replicas.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[[tools]]
name = "ticker"
description = "Appends a line every 100 ms until stopped."
command = ["sh", "-c", "while true; do echo tick >> {}; sleep 0.1; done"]
task_support = "required"
"#,
            ticks.display()
        ),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_blocked_on_one_replica_wakes_and_a_cancel_stops_the_other() {
    wakes_and_cancels_across("replicas", Duration::ZERO).await;
}

/// A replica that has run alone long enough to stop sending events (nobody listened), and one that
/// joins it then: each hears the other at once, both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_ran_alone_and_one_that_joins_it_hear_each_other_at_once() {
    let alone = mcp_tasks_engine::store::postgres::relay::ALONE_AFTER + Duration::from_secs(1);
    wakes_and_cancels_across("replicas_join", alone).await;
}

/// A result created on A and blocked on B wakes when A finishes it; a cancel through B stops A's
/// process within a second. B starts `later` after A.
async fn wakes_and_cancels_across(tag: &str, later: Duration) {
    let pg = common::pg::FreshSchema::new(tag).await;
    let dir = tempfile::tempdir().unwrap();
    let ticks = dir.path().join("ticks.txt");
    let config = config(dir.path(), &ticks);
    let args = [
        "--demo",
        "--store",
        pg.url.as_str(),
        "--config",
        config.to_str().unwrap(),
    ];
    let a = ServerProcess::start(&args);
    tokio::time::sleep(later).await;
    let b = ServerProcess::start(&args);

    // A session opened on A, a task created on A, its result awaited on B.
    let mut c = Client::connect(&a.url).await;
    let t = c
        .create_task("slow_compute", json!({"seconds": 1, "label": "from A"}))
        .await;
    let id = t["taskId"].as_str().unwrap().to_string();
    c.url = b.url.clone();
    let asked = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(20),
        c.request("tasks/result", json!({"taskId": id})),
    )
    .await
    .expect("B's blocked tasks/result woke when A finished the task");
    assert!(
        r.result()["content"].to_string().contains("from A"),
        "{}",
        r.result()
    );
    assert!(
        asked.elapsed() < Duration::from_secs(4),
        "woken, not polled (the task takes 1 s): {:?}",
        asked.elapsed()
    );

    // A command task running on A, cancelled through B: A's process group stops within a second.
    c.url = a.url.clone();
    let t = c.create_task("ticker", json!({})).await;
    let id = t["taskId"].as_str().unwrap().to_string();
    let lines = || {
        std::fs::read_to_string(&ticks)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    };
    assert!(
        common::eventually(Duration::from_secs(10), || lines() >= 3),
        "the ticker runs on A"
    );
    c.url = b.url.clone();
    let r = c.request("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(r.result()["status"], "cancelled", "{}", r.result());
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let after_cancel = lines();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        lines(),
        after_cancel,
        "the ticker's processes on A were stopped within a second of the cancel on B"
    );
    c.url = a.url.clone();
    assert_eq!(c.get_task(&id).await["status"], "cancelled");
    drop((a, b));
    pg.drop_schema().await;
}

/// On the 2026-07-28 wire no client stream takes a task's events, so a replica brings in another's
/// events of it only where something waits on it: here the handler running on A, stopped by a
/// cancel on B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_through_one_replica_stops_a_2026_task_running_on_another() {
    let pg = common::pg::FreshSchema::new("replicas_stateless").await;
    let dir = tempfile::tempdir().unwrap();
    let ticks = dir.path().join("ticks.txt");
    let config = config(dir.path(), &ticks);
    let args = [
        "--store",
        pg.url.as_str(),
        "--config",
        config.to_str().unwrap(),
    ];
    let a = ServerProcess::start(&args);
    let b = ServerProcess::start(&args);
    let mut c = Stateless::with_tasks(&a.url);
    let id = c.start_task("ticker", json!({})).await;
    let lines = || {
        std::fs::read_to_string(&ticks)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    };
    assert!(
        common::eventually(Duration::from_secs(10), || lines() >= 3),
        "the ticker runs on A"
    );
    c.url = b.url.clone();
    c.call("tasks/cancel", json!({"taskId": id})).await.result();
    assert_eq!(
        wait_status(&mut c, &id, &["cancelled"]).await["status"],
        "cancelled"
    );
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let after_cancel = lines();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        lines(),
        after_cancel,
        "the ticker's processes on A were stopped within a second of the cancel on B"
    );
    drop((a, b));
    pg.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_answered_through_one_replica_wakes_the_handler_on_the_other() {
    let pg = common::pg::FreshSchema::new("replicas_input").await;
    let args = ["--demo", "--store", pg.url.as_str()];
    let a = ServerProcess::start(&args);
    let b = ServerProcess::start(&args);
    // 2026-07-28: a task created on A, its questions read and answered on B.
    let mut c = Stateless::with_tasks(&a.url);
    let id = c.start_task("multi_input", json!({})).await;
    c.url = b.url.clone();
    let answer = |r: &serde_json::Value| {
        if r["params"]["message"].as_str().unwrap().contains("name") {
            json!({"action": "accept", "content": {"name": "Lin"}})
        } else {
            json!({"action": "accept", "content": {"color": "blue"}})
        }
    };
    // Both questions arrive (the second once the first is answered, or both at once).
    let deadline = Instant::now() + Duration::from_secs(20);
    let done = loop {
        assert!(Instant::now() < deadline, "the task on A never finished");
        let t = wait_status(&mut c, &id, &["input_required", "completed"]).await;
        if t["status"] == "completed" {
            break t;
        }
        let reqs = t["inputRequests"].as_object().cloned().unwrap_or_default();
        let answers: serde_json::Map<String, serde_json::Value> =
            reqs.iter().map(|(k, r)| (k.clone(), answer(r))).collect();
        if !answers.is_empty() {
            c.call(
                "tasks/update",
                json!({"taskId": id, "inputResponses": answers}),
            )
            .await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        done["result"]["content"][0]["text"],
        "Hello Lin, you like blue."
    );
    drop((a, b));
    pg.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_on_one_replica_sees_a_task_finish_on_another() {
    let pg = common::pg::FreshSchema::new("replicas_listen").await;
    let args = ["--demo", "--store", pg.url.as_str()];
    let a = ServerProcess::start(&args);
    let b = ServerProcess::start(&args);
    let mut c = Stateless::with_tasks(&a.url);
    let id = c.start_task("slow_compute", json!({"seconds": 1})).await;
    let params = json!({
        "notifications": {"taskIds": [id]},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": V,
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXT: {}}},
        },
    });
    let body =
        json!({"jsonrpc": "2.0", "id": 9, "method": "subscriptions/listen", "params": params});
    let mut rx = listen(&b.url, body).await;
    let ack = support::next_msg(&mut rx).await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([id]));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = tokio::time::timeout_at(deadline.into(), rx.recv())
            .await
            .expect("B pushed the task's completion on A")
            .unwrap();
        assert_eq!(n["method"], "notifications/tasks");
        if n["params"]["status"] == "completed" {
            assert!(n["params"]["result"]["content"].is_array());
            break;
        }
    }
    drop((a, b));
    pg.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_stream_on_one_replica_gets_the_task_messages_of_another_in_order_once() {
    let pg = common::pg::FreshSchema::new("replicas_stream").await;
    let args = ["--demo", "--store", pg.url.as_str()];
    let a = ServerProcess::start(&args);
    let b = ServerProcess::start(&args);
    // The session's GET stream is held by B; the task is created and run on A.
    let mut c = Client::connect(&a.url).await;
    c.url = b.url.clone();
    let mut stream = c.open_stream().await;
    c.url = a.url.clone();
    let ex = c
        .request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 2}, "task": {"ttl": 60_000},
                   "_meta": {"progressToken": "p1"}}),
        )
        .await;
    let id = ex.result()["task"]["taskId"].as_str().unwrap().to_string();
    let mut progress = Vec::new();
    let mut statuses = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while statuses.last().map(String::as_str) != Some("completed") {
        let n = tokio::time::timeout_at(deadline.into(), stream.recv())
            .await
            .expect("B's stream carried the task's messages")
            .unwrap();
        match n["method"].as_str().unwrap_or_default() {
            "notifications/progress" => progress.push(n["params"]["progress"].as_f64().unwrap()),
            "notifications/tasks/status" if n["params"]["taskId"] == json!(id) => {
                statuses.push(n["params"]["status"].as_str().unwrap().to_string())
            }
            _ => {}
        }
    }
    // Live, not let out by the 10 s fallback of a gate that never heard of A's reply.
    assert!(
        deadline.saturating_duration_since(Instant::now()) > Duration::from_secs(9),
        "the messages came as they happened"
    );
    // A little longer: nothing repeats after the end.
    tokio::time::sleep(Duration::from_millis(500)).await;
    while let Ok(n) = stream.try_recv() {
        if n["method"] == "notifications/tasks/status" && n["params"]["taskId"] == json!(id) {
            statuses.push(n["params"]["status"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(
        statuses.iter().filter(|s| *s == "completed").count(),
        1,
        "completed once: {statuses:?}"
    );
    assert!(
        progress.windows(2).all(|w| w[0] < w[1]) && !progress.is_empty(),
        "progress in order, each once: {progress:?}"
    );
    drop((a, b));
    pg.drop_schema().await;
}

/// One caller spread over two replicas meets one rate limit, not one per replica: each replica tells
/// the other the calls it let through (approximately: every half second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limit_holds_across_replicas() {
    let pg = common::pg::FreshSchema::new("replicas_rate").await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rate.toml");
    // 60 a minute: a bucket of 10 calls, refilled at one a second.
    std::fs::write(&config, "[auth]\nanonymous_calls_per_minute = 60\n").unwrap();
    let args = [
        "--demo",
        "--store",
        pg.url.as_str(),
        "--config",
        config.to_str().unwrap(),
    ];
    let a = ServerProcess::start(&args);
    let b = ServerProcess::start(&args);
    let mut ca = Stateless::with_tasks(&a.url);
    let mut cb = Stateless::with_tasks(&b.url);
    let started = Instant::now();
    let (mut let_through, mut limited) = (0, 0);
    for i in 0..30 {
        let c = if i % 2 == 0 { &mut ca } else { &mut cb };
        let answer = c.call("tasks/get", json!({"taskId": "no-such-task"})).await;
        if answer.body["error"]["code"] == -32005 {
            limited += 1;
        } else {
            let_through += 1;
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    let refill = started.elapsed().as_secs_f64().ceil() as i32;
    // One bucket: 10 plus the refill, and what both replicas let through before they first heard of
    // each other (half a second); a bucket per replica would let about twice that through.
    assert!(
        let_through <= 10 + refill + 4,
        "{let_through} calls let through, {limited} limited in {:?}",
        started.elapsed()
    );
    assert!(let_through >= 10, "the bucket's calls pass: {let_through}");
    drop((a, b));
    pg.drop_schema().await;
}
