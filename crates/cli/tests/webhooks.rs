//! Webhooks on task events, end to end: the real binary sends, a receiver on loopback verifies
//! every delivery with the official `standardwebhooks` library (interop/python/webhook_receiver.py).
//! Order, signatures, retries, 410, kill -9, two PostgreSQL replicas, the refusals that keep
//! webhooks off private addresses, the client's `--webhook`, and the admin commands.

mod common;
#[path = "../../server/tests/support/mod.rs"]
mod support;

use common::receiver::Receiver;
use common::{ClientCli, ServerProcess};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use support::Client;

const META: &str = "io.github.mcp-tasks/webhook";
/// The Standard Webhooks specification's example secret.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// Another valid secret.
const OTHER_SECRET: &str = "whsec_QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFB";

/// A config that lets webhooks reach 127.0.0.1 (the receiver), plus `extra`.
fn config(dir: &Path, extra: &str) -> PathBuf {
    let path = dir.join("mcp-tasks.toml");
    std::fs::write(
        &path,
        format!("[webhooks]\nallowed_hosts = [\"127.0.0.1\"]\n{extra}"),
    )
    .unwrap();
    path
}

/// `serve` arguments for a demo server on a SQLite file in `dir` (the same file on a restart), with
/// [`config`]'s `extra`.
fn on_file(dir: &Path, extra: &str) -> Vec<String> {
    let cfg = config(dir, extra);
    let db = dir.join("tasks.db");
    [
        "--demo",
        "--store",
        db.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec()
}

/// A demo server on memory whose config lets webhooks reach 127.0.0.1, and the directory the
/// config is in (kept while the server runs).
fn memory_server() -> (ServerProcess, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "");
    let server = ServerProcess::start(&[
        "--demo",
        "--store",
        "memory:",
        "--config",
        cfg.to_str().unwrap(),
    ]);
    (server, dir)
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

fn base(server: &ServerProcess) -> String {
    server.url.trim_end_matches("/mcp").to_string()
}

async fn get_json(url: &str) -> Value {
    reqwest::get(url).await.unwrap().json().await.unwrap()
}

/// The admin API's deliveries of `task`, oldest first.
async fn deliveries(server: &ServerProcess, task: &str) -> Vec<Value> {
    let mut all = get_json(&format!("{}/admin/api/webhooks?task={task}", base(server))).await
        ["deliveries"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    all.reverse();
    all
}

/// Waits until the admin API shows `task`'s deliveries in a state `done` accepts.
async fn wait_deliveries(
    server: &ServerProcess,
    task: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let d = deliveries(server, task).await;
        if done(&d) {
            return d;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "deliveries of {task}: {d:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates a task on the 2025-11-25 wire with `webhook` in the call's `_meta`: the create result.
async fn create(c: &mut Client, tool: &str, args: Value, webhook: Value) -> Value {
    let ex = c
        .request(
            "tools/call",
            json!({"name": tool, "arguments": args, "task": {"ttl": 600_000}, "_meta": {META: webhook}}),
        )
        .await;
    ex.result().clone()
}

fn types(seen: &[Value]) -> Vec<String> {
    seen.iter()
        .map(|d| d["body"]["type"].as_str().unwrap_or("?").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_s_events_arrive_in_order_verified_by_standardwebhooks_and_operators_see_them() {
    let rx = Receiver::start(SECRET, &[]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "");
    let server = ServerProcess::start(&[
        "--demo",
        "--store",
        "memory:",
        "--config",
        cfg.to_str().unwrap(),
    ]);
    let mut c = Client::connect_caps(&server.url, json!({"elicitation": {}})).await;
    let created = create(
        &mut c,
        "confirm_delete",
        json!({"filename": "a.txt"}),
        json!({"url": rx.url(), "secret": SECRET}),
    )
    .await;
    let id = created["task"]["taskId"].as_str().unwrap().to_string();
    let said = &created["_meta"][META];
    assert_eq!(said["url"], rx.url());
    assert_eq!(
        said["events"],
        json!([
            "task.input_required",
            "task.completed",
            "task.failed",
            "task.cancelled"
        ])
    );
    assert!(
        said.get("secret").is_none(),
        "a secret the client gave is not echoed"
    );
    // The question goes out on tasks/result; its event reaches the receiver meanwhile.
    let mut stream = c
        .stream_request("tasks/result", json!({"taskId": id}))
        .await;
    let ask = loop {
        let m = support::next_msg(&mut stream).await;
        if m["method"] == "elicitation/create" {
            break m;
        }
    };
    let first = rx.wait_for(1, Duration::from_secs(20));
    assert_eq!(types(&first), ["task.input_required"]);
    c.respond(
        &ask["id"],
        json!({"action": "accept", "content": {"confirm": true}}),
    )
    .await;
    loop {
        if support::next_msg(&mut stream).await.get("method").is_none() {
            break;
        }
    }
    let seen = rx.wait_for(2, Duration::from_secs(20));
    assert_eq!(types(&seen), ["task.input_required", "task.completed"]);
    for d in &seen {
        assert_eq!(d["verified"], true, "{d}");
        assert_eq!(d["answered"], 204);
        assert_eq!(d["body"]["data"]["taskId"], id.as_str());
        assert!(d["id"].as_str().unwrap().starts_with("msg_"));
        assert!(d["timestamp"].as_str().unwrap().parse::<u64>().is_ok());
    }
    assert_ne!(seen[0]["id"], seen[1]["id"]);
    assert_eq!(seen[0]["body"]["data"]["status"], "input_required");
    let done = &seen[1]["body"]["data"];
    assert_eq!(done["status"], "completed");
    assert_eq!(done["tool"], "confirm_delete");
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Deleted a.txt"),
        "{done}"
    );
    // The operator's view: both delivered at the first attempt, no secret anywhere.
    let listed = wait_deliveries(&server, &id, |d| {
        d.len() == 2 && d.iter().all(|x| x["state"] == "delivered")
    })
    .await;
    assert_eq!(listed[1]["id"], seen[1]["id"]);
    assert_eq!(listed[1]["attempts"], 1);
    assert_eq!(listed[1]["lastStatus"], 204);
    let task = get_json(&format!("{}/admin/api/tasks/{id}", base(&server))).await;
    assert_eq!(task["webhooks"][0]["url"], rx.url());
    assert_eq!(task["deliveries"].as_array().unwrap().len(), 2);
    assert!(
        !task.to_string().contains(&SECRET[6..]),
        "no secret in {task}"
    );
    // mcp-tasks admin webhooks: list, show, redeliver (the same webhook-id again).
    let cli = ClientCli::new(&server.url);
    let admin_url = base(&server);
    let admin = |args: &[&str]| {
        let mut all = vec!["admin", "--url", admin_url.as_str()];
        all.extend_from_slice(args);
        let out = cli.run(&all);
        assert!(out.status.success(), "{all:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let table = admin(&["webhooks", "list", "--task", &id]);
    assert!(table.starts_with("DELIVERY"), "{table}");
    assert_eq!(table.matches("delivered").count(), 2, "{table}");
    let delivery = seen[1]["id"].as_str().unwrap();
    let shown = admin(&["webhooks", "show", delivery]);
    assert!(
        shown.contains("task.completed") && shown.contains("204"),
        "{shown}"
    );
    assert!(!shown.contains(&SECRET[6..]));
    assert!(admin(&["webhooks", "redeliver", delivery]).contains("sent again"));
    let again = rx.wait_for(3, Duration::from_secs(20));
    assert_eq!(
        again[2]["id"], seen[1]["id"],
        "a redelivery keeps its webhook-id"
    );
    assert_eq!(again[2]["verified"], true);
    // Counted once the receiver's answer is in, a moment after it printed the delivery.
    let start = Instant::now();
    loop {
        let metrics = reqwest::get(format!("{}/metrics", base(&server)))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if metrics.contains("mcp_tasks_webhook_attempts_total{outcome=\"delivered\"} 3") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{metrics}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_with_another_secret_cannot_verify_and_the_event_is_tried_again() {
    let rx = Receiver::start(OTHER_SECRET, &[]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "");
    let server = ServerProcess::start(&[
        "--demo",
        "--store",
        "memory:",
        "--config",
        cfg.to_str().unwrap(),
    ]);
    let mut c = Client::connect(&server.url).await;
    let created = create(
        &mut c,
        "slow_compute",
        json!({"seconds": 0.1}),
        json!({"url": rx.url(), "secret": SECRET}),
    )
    .await;
    let id = created["task"]["taskId"].as_str().unwrap().to_string();
    // The first attempt, then a second about a second later: neither verifies.
    let seen = rx.wait_for(2, Duration::from_secs(20));
    for d in &seen {
        assert_eq!(d["verified"], false, "{d}");
        assert_eq!(d["answered"], 400);
        assert!(d["error"]
            .as_str()
            .unwrap()
            .contains("No matching signature"));
    }
    assert_eq!(seen[0]["id"], seen[1]["id"], "a retry keeps its webhook-id");
    let d = wait_deliveries(&server, &id, |d| {
        d.first().is_some_and(|x| x["attempts"].as_u64() >= Some(2))
    })
    .await;
    assert_eq!(d[0]["state"], "pending");
    assert_eq!(d[0]["lastStatus"], 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_410_stops_the_task_s_later_events_to_that_receiver() {
    let rx = Receiver::start(SECRET, &["--status", "410"]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "");
    let server = ServerProcess::start(&[
        "--demo",
        "--store",
        "memory:",
        "--config",
        cfg.to_str().unwrap(),
    ]);
    let mut c = Client::connect_caps(&server.url, json!({"elicitation": {}})).await;
    let created = create(
        &mut c,
        "confirm_delete",
        json!({"filename": "b.txt"}),
        json!({"url": rx.url(), "secret": SECRET}),
    )
    .await;
    let id = created["task"]["taskId"].as_str().unwrap().to_string();
    let mut stream = c
        .stream_request("tasks/result", json!({"taskId": id}))
        .await;
    let ask = loop {
        let m = support::next_msg(&mut stream).await;
        if m["method"] == "elicitation/create" {
            break m;
        }
    };
    rx.wait_for(1, Duration::from_secs(20));
    wait_deliveries(&server, &id, |d| {
        d.first().is_some_and(|x| x["state"] == "gone")
    })
    .await;
    c.respond(
        &ask["id"],
        json!({"action": "accept", "content": {"confirm": false}}),
    )
    .await;
    loop {
        if support::next_msg(&mut stream).await.get("method").is_none() {
            break;
        }
    }
    // The completion's event is written, and settled as gone without being sent.
    let d = wait_deliveries(&server, &id, |d| d.len() == 2).await;
    assert_eq!(
        d.iter().map(|x| x["state"].clone()).collect::<Vec<_>>(),
        [json!("gone"), json!("gone")]
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(rx.seen().len(), 1, "{:?}", rx.seen());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_down_for_30_s_gets_the_event_when_it_returns_with_the_secret_the_server_made() {
    let port = common::free_port();
    let url = format!("http://127.0.0.1:{port}/hooks");
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "");
    let server = ServerProcess::start(&[
        "--demo",
        "--store",
        "memory:",
        "--config",
        cfg.to_str().unwrap(),
    ]);
    // mcp-tasks call registers it (2026-07-28, the client's default with this server); the
    // secret the server made is printed once, also with --quiet.
    let cli = ClientCli::new(&server.url);
    let out = cli.run(&[
        "call",
        "slow_compute",
        "seconds=0.2",
        "--webhook",
        &url,
        "--quiet",
    ]);
    assert!(out.status.success(), "{out:?}");
    let down_since = Instant::now();
    let stderr = String::from_utf8(out.stderr).unwrap();
    let secret = stderr
        .split_whitespace()
        .find(|w| w.starts_with("whsec_"))
        .unwrap_or_else(|| panic!("no secret in {stderr}"))
        .to_string();
    assert!(stderr.contains("shown this once"), "{stderr}");
    // Nobody listens: attempts fail and are tried again after 1, 2, 4, 8, 16 s.
    tokio::time::sleep(Duration::from_secs(30).saturating_sub(down_since.elapsed())).await;
    let rx = Receiver::start_on(port, &secret, &[]);
    let seen = rx.wait_for(1, Duration::from_secs(45));
    assert_eq!(seen[0]["verified"], true, "{:?}", seen[0]);
    assert_eq!(seen[0]["body"]["type"], "task.completed");
    let id = seen[0]["body"]["data"]["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let d = wait_deliveries(&server, &id, |d| {
        d.first().is_some_and(|x| x["state"] == "delivered")
    })
    .await;
    assert!(d[0]["attempts"].as_u64().unwrap() >= 6, "{d:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_wire_form_registers_a_webhook() {
    let rx = Receiver::start(SECRET, &[]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "");
    let server = ServerProcess::start(&[
        "--demo",
        "--store",
        "memory:",
        "--config",
        cfg.to_str().unwrap(),
    ]);
    let cli = ClientCli::new(&server.url);
    // 2025-11-25 (params.task) and 2026-07-28 (the tasks extension), through mcp-tasks call.
    let url = rx.url();
    for wire in [&["--no-2026"][..], &[][..]] {
        let mut args = vec![
            "call",
            "slow_compute",
            "seconds=0.1",
            "--webhook",
            url.as_str(),
            "--webhook-secret",
            SECRET,
            "--webhook-event",
            "task.completed",
        ];
        args.extend_from_slice(wire);
        let out = cli.run(&args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        assert!(!String::from_utf8_lossy(&out.stderr).contains("whsec_"));
    }
    // Asynchronous Tool Execution: an operation's call carries it the same way.
    let mut c = Client::connect_caps(
        &server.url,
        json!({"experimental": {"asyncToolExecution": {}}}),
    )
    .await;
    let r = c
        .request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0.1},
                   "operation": {"token": "op-webhook"},
                   "_meta": {META: {"url": rx.url(), "secret": SECRET, "events": ["task.completed"]}}}),
        )
        .await;
    assert_eq!(r.result()["_meta"][META]["url"], rx.url());
    let seen = rx.wait_for(3, Duration::from_secs(20));
    assert_eq!(types(&seen), ["task.completed"; 3]);
    assert!(seen.iter().all(|d| d["verified"] == true));
    let tasks: HashSet<_> = seen
        .iter()
        .map(|d| d["body"]["data"]["taskId"].clone())
        .collect();
    assert_eq!(tasks.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_written_before_a_kill_9_is_delivered_after_the_restart_with_its_id() {
    let port = common::free_port();
    let url = format!("http://127.0.0.1:{port}/hooks");
    let dir = tempfile::tempdir().unwrap();
    let args = on_file(dir.path(), "");
    let server = ServerProcess::start(&strs(&args));
    let mut c = Client::connect(&server.url).await;
    let created = create(
        &mut c,
        "slow_compute",
        json!({"seconds": 0.1}),
        json!({"url": url, "secret": SECRET}),
    )
    .await;
    let id = created["task"]["taskId"].as_str().unwrap().to_string();
    // Completed, its event written, not delivered (nobody listens).
    let before = wait_deliveries(&server, &id, |d| {
        d.first().is_some_and(|x| x["attempts"].as_u64() >= Some(1))
    })
    .await;
    assert_eq!(before[0]["state"], "pending");
    server.kill9();
    let rx = Receiver::start_on(port, SECRET, &[]);
    let server = ServerProcess::start(&strs(&args));
    let seen = rx.wait_for(1, Duration::from_secs(30));
    assert_eq!(
        seen[0]["id"], before[0]["id"],
        "the same webhook-id after the restart"
    );
    assert_eq!(seen[0]["verified"], true);
    assert_eq!(seen[0]["body"]["data"]["taskId"], id.as_str());
    wait_deliveries(&server, &id, |d| {
        d.first().is_some_and(|x| x["state"] == "delivered")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_postgresql_replicas_deliver_each_event_once() {
    let pg = common::pg::FreshSchema::new("webhooks").await;
    let rx = Receiver::start(SECRET, &[]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "");
    let args = [
        "--demo",
        "--store",
        pg.url.as_str(),
        "--config",
        cfg.to_str().unwrap(),
    ];
    let a = ServerProcess::start(&args);
    let b = ServerProcess::start(&args);
    let mut tasks = HashSet::new();
    for server in [&a, &b] {
        let mut c = Client::connect(&server.url).await;
        for _ in 0..10 {
            let created = create(
                &mut c,
                "slow_compute",
                json!({"seconds": 0.2}),
                json!({"url": rx.url(), "secret": SECRET, "events": ["task.completed"]}),
            )
            .await;
            tasks.insert(created["task"]["taskId"].as_str().unwrap().to_string());
        }
    }
    let seen = rx.wait_for(20, Duration::from_secs(30));
    // Both replicas claim from the one outbox: nothing more comes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let seen_all = rx.seen();
    assert_eq!(seen_all.len(), 20, "{seen:?}");
    let ids: HashSet<_> = seen_all.iter().map(|d| d["id"].clone()).collect();
    assert_eq!(ids.len(), 20, "each event once");
    let delivered: HashSet<String> = seen_all
        .iter()
        .map(|d| d["body"]["data"]["taskId"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(delivered, tasks);
    assert!(seen_all.iter().all(|d| d["verified"] == true));
    drop((a, b));
    pg.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_addresses_are_refused_at_registration_and_at_delivery() {
    let dir = tempfile::tempdir().unwrap();
    // No allowed hosts; an operator subscription to a name that resolves to loopback.
    let cfg = dir.path().join("mcp-tasks.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[webhooks.subscriptions]]\nname = \"ops\"\nurl = \"https://localhost:9/hooks\"\nsecret = \"{SECRET}\"\n"
        ),
    )
    .unwrap();
    let server = ServerProcess::start(&[
        "--demo",
        "--store",
        "memory:",
        "--config",
        cfg.to_str().unwrap(),
    ]);
    let mut c = Client::connect(&server.url).await;
    for (url, says) in [
        (
            "https://169.254.169.254/latest/meta-data",
            "169.254.169.254 is 169.254.169.254, a private, loopback or link-local address",
        ),
        ("https://10.0.0.1/hooks", "10.0.0.1 is 10.0.0.1"),
        ("https://localhost:9/hooks", "localhost is 127.0.0.1"),
        (
            "http://hooks.example.com/",
            "plain http is sent only to hosts the operator allows",
        ),
    ] {
        let ex = c
            .request(
                "tools/call",
                json!({"name": "slow_compute", "arguments": {"seconds": 0}, "task": {},
                       "_meta": {META: {"url": url}}}),
            )
            .await;
        assert_eq!(ex.error_code(), -32602, "{url}");
        let message = ex.error()["message"].as_str().unwrap();
        assert!(message.contains(says), "{url}: {message}");
    }
    // The operator's subscription resolves at delivery, where the lookup refuses it: no
    // connection is made, and the delivery says why.
    let id = c.create_task("slow_compute", json!({"seconds": 0})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let d = wait_deliveries(&server, &id, |d| {
        d.first().is_some_and(|x| x["attempts"].as_u64() >= Some(1))
    })
    .await;
    assert_eq!(d[0]["subscription"], "ops");
    let why = d[0]["lastError"].as_str().unwrap();
    assert!(
        why.contains("localhost resolves to") && why.contains("allowed_hosts"),
        "{why}"
    );
    // A subscription to a private address is refused when the config is read.
    std::fs::write(
        &cfg,
        format!(
            "[[webhooks.subscriptions]]\nurl = \"https://10.0.0.1/x\"\nsecret = \"{SECRET}\"\n"
        ),
    )
    .unwrap();
    let out = std::process::Command::new(common::bin())
        .args([
            "serve",
            "--store",
            "memory:",
            "--listen",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("[[webhooks.subscriptions]]") && stderr.contains("10.0.0.1"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_events_come_only_to_a_target_that_asks_paced_by_the_interval() {
    let rx = Receiver::start(SECRET, &[]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "progress_interval_secs = 1\n");
    let server = ServerProcess::start(&[
        "--demo",
        "--store",
        "memory:",
        "--config",
        cfg.to_str().unwrap(),
    ]);
    let mut c = Client::connect(&server.url).await;
    // slow_compute reports progress at once and then every second.
    let asks = create(
        &mut c,
        "slow_compute",
        json!({"seconds": 3, "label": "asks"}),
        json!({"url": rx.url(), "secret": SECRET, "events": ["task.progress", "task.completed"]}),
    )
    .await;
    assert_eq!(
        asks["_meta"][META]["events"],
        json!(["task.progress", "task.completed"])
    );
    let asks = asks["task"]["taskId"].as_str().unwrap().to_string();
    // The same work for a target that names no events: every status event, no progress.
    let quiet = create(
        &mut c,
        "slow_compute",
        json!({"seconds": 3, "label": "quiet"}),
        json!({"url": rx.url(), "secret": SECRET}),
    )
    .await["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    c.wait_terminal(&asks).await;
    c.wait_terminal(&quiet).await;
    // A task's deliveries, once its completion came (or 20 s passed).
    let of = |task: &str| -> Vec<Value> {
        let start = Instant::now();
        loop {
            let all = rx.seen();
            let mine: Vec<Value> = all
                .into_iter()
                .filter(|d| d["body"]["data"]["taskId"] == task)
                .collect();
            if mine
                .last()
                .is_some_and(|d| d["body"]["type"] == "task.completed")
                || start.elapsed() > Duration::from_secs(20)
            {
                return mine;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let quiet_seen = of(&quiet);
    assert_eq!(types(&quiet_seen), ["task.completed"]);
    let asks_seen = of(&asks);
    let kinds = types(&asks_seen);
    let (last, progress) = kinds.split_last().unwrap();
    assert_eq!(last, "task.completed", "{kinds:?}");
    // Reports at 0, 1, 2 and 3 s: paced at one a second, so at least two events and at most four,
    // each verified, showing the task at work, in order.
    assert!(
        (2..=4).contains(&progress.len()) && progress.iter().all(|k| k == "task.progress"),
        "{kinds:?}"
    );
    assert!(asks_seen.iter().all(|d| d["verified"] == true));
    let data: Vec<&Value> = asks_seen[..progress.len()]
        .iter()
        .map(|d| &d["body"]["data"])
        .collect();
    assert!(data.iter().all(|d| d["status"] == "working"), "{data:?}");
    assert!(data.iter().all(|d| d["progressTotal"] == 3.0), "{data:?}");
    assert!(data[0]["progressMessage"].is_string(), "{data:?}");
    let done: Vec<f64> = data
        .iter()
        .map(|d| d["progress"].as_f64().unwrap())
        .collect();
    assert!(done.windows(2).all(|w| w[0] < w[1]), "{done:?}");
    // Paced: sent at least about a second apart (their timestamps are when each was written).
    let stamps: Vec<u64> = asks_seen[..progress.len()]
        .iter()
        .map(|d| {
            let t = d["body"]["timestamp"].as_str().unwrap();
            let ms = time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339)
                .unwrap()
                .unix_timestamp_nanos()
                / 1_000_000;
            u64::try_from(ms).unwrap()
        })
        .collect();
    assert!(stamps.windows(2).all(|w| w[1] - w[0] >= 995), "{stamps:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrations_past_the_cap_are_refused_and_a_call_without_a_task_cannot_register() {
    let rx = Receiver::start(SECRET, &[]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "max_registrations_per_principal = 2\n");
    let server = ServerProcess::start(&[
        "--demo",
        "--store",
        "memory:",
        "--config",
        cfg.to_str().unwrap(),
    ]);
    let mut c = Client::connect(&server.url).await;
    let hook = json!({"url": rx.url(), "secret": SECRET});
    let call = |hook: Option<&Value>| {
        let mut p = json!({"name": "slow_compute", "arguments": {"seconds": 60}, "task": {}});
        if let Some(h) = hook {
            p["_meta"] = json!({META: h});
        }
        p
    };
    let mut ids = Vec::new();
    for _ in 0..2 {
        let r = c.request("tools/call", call(Some(&hook))).await;
        ids.push(r.result()["task"]["taskId"].as_str().unwrap().to_string());
    }
    let refused = c.request("tools/call", call(Some(&hook))).await;
    assert_eq!(refused.error_code(), -32004, "{:?}", refused.error());
    let message = refused.error()["message"].as_str().unwrap();
    assert!(
        message.contains("Too many webhook registrations: 2") && message.contains("the limit is 2"),
        "{message}"
    );
    assert_eq!(
        refused.error()["data"],
        json!({"registered": 2, "limit": 2})
    );
    // A task without a webhook is not held back by it.
    let plain = c.request("tools/call", call(None)).await;
    let plain = plain.result()["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    // Once a registered task finishes, its place is free again.
    c.request("tasks/cancel", json!({"taskId": ids[0]})).await;
    let again = c.request("tools/call", call(Some(&hook))).await;
    assert!(again.result()["task"]["taskId"].is_string());

    // A call that makes no task cannot carry one: it would never be sent.
    let r = c
        .request(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0}, "_meta": {META: hook}}),
        )
        .await;
    assert_eq!(r.error_code(), -32602);
    let message = r.error()["message"].as_str().unwrap();
    assert!(
        message.contains("runs without one") && message.contains("add \"task\": {}"),
        "{message}"
    );
    // 2026-07-28 without the tasks extension: a plain call, the same refusal.
    let mut plain_2026 = support::stateless::Stateless::new(&server.url, json!({}));
    let r = plain_2026
        .call_with_meta(
            "tools/call",
            json!({"name": "slow_compute", "arguments": {"seconds": 0}}),
            json!({META: hook}),
        )
        .await;
    assert_eq!(r.code(), -32602, "{}", r.body);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("declare the io.modelcontextprotocol/tasks extension"),
        "{}",
        r.body
    );
    for id in ids.iter().skip(1).chain([&plain]) {
        c.request("tasks/cancel", json!({"taskId": id})).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_server_lets_go_of_a_delivery_in_flight_so_the_next_start_sends_it_at_once() {
    // A receiver that takes the request and never answers: the delivery is in flight at the stop.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let held = std::thread::spawn(move || {
        let (conn, _) = silent.accept().unwrap();
        // Held until the server gives up on it; then the port is free for the real receiver.
        std::thread::sleep(Duration::from_secs(4));
        drop(conn);
    });
    let url = format!("http://127.0.0.1:{port}/hooks");
    let dir = tempfile::tempdir().unwrap();
    let args = on_file(dir.path(), "timeout_secs = 30\n");
    let server = ServerProcess::start(&strs(&args));
    let mut c = Client::connect(&server.url).await;
    let created = create(
        &mut c,
        "slow_compute",
        json!({"seconds": 0}),
        json!({"url": url, "secret": SECRET}),
    )
    .await;
    let id = created["task"]["taskId"].as_str().unwrap().to_string();
    c.wait_terminal(&id).await;
    // Give the sender a moment to connect and send; the receiver holds it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopping = Instant::now();
    let pid = nix::unistd::Pid::from_raw(server.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let mut server = server;
    let status = server.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(
        stopping.elapsed() < Duration::from_secs(10),
        "stopped in {:?}: the send in flight does not hold the stop for its 30 s timeout",
        stopping.elapsed()
    );
    held.join().unwrap();
    // The next start (another node id) sends it at once, not when the claim would have run out
    // (a minute after it was made).
    let rx = Receiver::start_on(port, SECRET, &[]);
    let restarted = Instant::now();
    let _server = ServerProcess::start(&strs(&args));
    let seen = rx.wait_for(1, Duration::from_secs(30));
    assert!(
        restarted.elapsed() < Duration::from_secs(15),
        "delivered {:?} after the restart",
        restarted.elapsed()
    );
    assert_eq!(seen[0]["body"]["data"]["taskId"], id.as_str());
    assert_eq!(seen[0]["verified"], true);
}

/// A receiver that answers 503 with a `Retry-After` it chose (so huge that the retry time
/// overflowed, zero, a date in the past) gets a few attempts in 10 s, the backoff's: it can slow
/// the sender down, not make it hammer the receiver. Before the clamp, the huge value meant
/// 1,100–2,200 attempts in 10 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_s_retry_after_cannot_make_the_server_hammer_it() {
    let values = [
        "18446744073709551615".to_string(),
        "0".to_string(),
        "Thu, 01 Jan 2015 00:00:00 GMT".to_string(),
    ];
    let receivers: Vec<Receiver> = values
        .iter()
        .map(|v| Receiver::start(SECRET, &["--status", "503", "--retry-after", v]))
        .collect();
    let (server, _dir) = memory_server();
    let mut c = Client::connect(&server.url).await;
    let mut ids = Vec::new();
    for rx in &receivers {
        let created = create(
            &mut c,
            "slow_compute",
            json!({"seconds": 0}),
            json!({"url": rx.url(), "secret": SECRET}),
        )
        .await;
        ids.push(created["task"]["taskId"].as_str().unwrap().to_string());
    }
    for rx in &receivers {
        rx.wait_for(1, Duration::from_secs(20));
    }
    let asked_at = now_ms();
    tokio::time::sleep(Duration::from_secs(10)).await;
    for ((rx, value), id) in receivers.iter().zip(&values).zip(&ids) {
        let seen = rx.seen();
        assert!(seen.iter().all(|d| d["answered"] == 503), "{seen:?}");
        let d = deliveries(&server, id).await;
        let next = d[0]["nextAt"].as_u64().unwrap_or(0);
        if value.len() > 10 && value.bytes().all(|b| b.is_ascii_digit()) {
            // Asked to wait for ages: it waits as long as the backoff's ceiling, 5 minutes (with
            // its jitter), not forever and not not at all.
            assert_eq!(seen.len(), 1, "Retry-After {value}: {seen:?}");
            assert!(
                next > asked_at + 200_000 && next <= asked_at + 361_000,
                "Retry-After {value}: next attempt {} ms away",
                next.saturating_sub(asked_at)
            );
        } else {
            // Zero, a date in the past: the backoff's 1 s, 2 s, 4 s (+ a fifth at most), attempts
            // at about 0, 1, 3 and 7 s.
            assert!(
                (3..=5).contains(&seen.len()),
                "Retry-After {value}: {} attempts in about 10 s",
                seen.len()
            );
        }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// With proxy variables in the server's environment, a delivery still goes straight to the
/// receiver (its address checked on the connection itself), and the proxy sees nothing. Before,
/// every attempt went to the proxy and the address check never ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_variables_do_not_route_deliveries_through_a_proxy() {
    let (proxy_port, proxied) = common::counting_proxy();
    let proxy = format!("http://127.0.0.1:{proxy_port}");
    let rx = Receiver::start(SECRET, &[]);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "");
    let mut cmd = common::serve_command(&[
        "--demo",
        "--store",
        "memory:",
        "--config",
        cfg.to_str().unwrap(),
    ]);
    common::through_proxy(&mut cmd, &proxy);
    let server = ServerProcess::spawn(cmd);
    let mut c = Client::connect(&server.url).await;
    create(
        &mut c,
        "slow_compute",
        json!({"seconds": 0}),
        json!({"url": rx.url(), "secret": SECRET}),
    )
    .await;
    let seen = rx.wait_for(1, Duration::from_secs(20));
    assert_eq!(seen[0]["verified"], true, "{seen:?}");
    assert_eq!(
        proxied.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the proxy was used"
    );
}

/// A task created already finished (a task-augmented call whose arguments fail the tool's schema)
/// sends its webhook's `task.failed` like any other finish. Before, a store wrote events only with
/// a status change, and such a task had none: neither its webhook nor an operator's subscription
/// heard of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_created_finished_sends_its_event() {
    let rx = Receiver::start(SECRET, &[]);
    let (server, _dir) = memory_server();
    let mut c = Client::connect(&server.url).await;
    let created = create(
        &mut c,
        "slow_compute",
        json!({"seconds": -5}),
        json!({"url": rx.url(), "secret": SECRET}),
    )
    .await;
    let id = created["task"]["taskId"].as_str().unwrap().to_string();
    assert_eq!(created["task"]["status"], "failed", "{created}");
    let seen = rx.wait_for(1, Duration::from_secs(20));
    assert_eq!(types(&seen), ["task.failed"], "{seen:?}");
    assert_eq!(seen[0]["body"]["data"]["taskId"], id.as_str());
    assert_eq!(seen[0]["verified"], true);
}

/// A slow receiver holds up nobody else's events: each delivery is sent on its own. Before, a
/// round of deliveries waited for all of them, so an event claimed after a slow send went out only
/// when that send ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_receiver_does_not_delay_another_receivers_events() {
    let slow = Receiver::start(SECRET, &["--delay", "8"]);
    let fast = Receiver::start(SECRET, &[]);
    let (server, _dir) = memory_server();
    let mut c = Client::connect(&server.url).await;
    create(
        &mut c,
        "slow_compute",
        json!({"seconds": 0}),
        json!({"url": slow.url(), "secret": SECRET}),
    )
    .await;
    // The slow receiver has its event and sits on it.
    slow.wait_for(1, Duration::from_secs(10));
    let sent = Instant::now();
    create(
        &mut c,
        "slow_compute",
        json!({"seconds": 0}),
        json!({"url": fast.url(), "secret": SECRET}),
    )
    .await;
    fast.wait_for(1, Duration::from_secs(20));
    let took = sent.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "the fast receiver's event took {took:?}: it waited for the slow one"
    );
}

/// Whether any file of the SQLite store in `dir` (the database, its WAL) holds
/// `text`.
fn store_files_hold(dir: &Path, text: &str) -> bool {
    std::fs::read_dir(dir).unwrap().flatten().any(|e| {
        e.file_name().to_string_lossy().starts_with("tasks.db")
            && std::fs::read(e.path())
                .is_ok_and(|bytes| bytes.windows(text.len()).any(|w| w == text.as_bytes()))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_key_no_webhook_secret_is_stored_in_the_clear_and_deliveries_still_verify() {
    // The secrets' key material, as it would show in a file.
    let (client_key, sub_key) = (&SECRET[6..], &OTHER_SECRET[6..]);
    let made = std::process::Command::new(common::bin())
        .args(["key", "seal"])
        .output()
        .unwrap();
    assert!(made.status.success());
    let printed = common::text(&made.stdout);
    let key = printed
        .split('"')
        .find(|s| s.starts_with("whkey_"))
        .unwrap_or_else(|| panic!("no key in {printed}"))
        .to_string();
    let sub_rx = Receiver::start(OTHER_SECRET, &[]);
    let subscription = format!(
        "[[webhooks.subscriptions]]\nname = \"ops\"\nurl = \"{}\"\nsecret = \"{OTHER_SECRET}\"\n\
         events = [\"task.completed\"]\n",
        sub_rx.url()
    );
    // The control: without a key, the client's secret is in the store's files, once per task.
    let plain = tempfile::tempdir().unwrap();
    {
        let args = on_file(plain.path(), &subscription);
        let server = ServerProcess::start(&strs(&args));
        let rx = Receiver::start(SECRET, &[]);
        let mut c = Client::connect(&server.url).await;
        create(
            &mut c,
            "slow_compute",
            json!({"seconds": 0.1}),
            json!({"url": rx.url(), "secret": SECRET}),
        )
        .await;
        assert_eq!(rx.wait_for(1, Duration::from_secs(30))[0]["verified"], true);
        sub_rx.wait_for(1, Duration::from_secs(30));
        server.kill9();
        assert!(store_files_hold(plain.path(), client_key));
        assert!(
            !store_files_hold(plain.path(), sub_key),
            "a subscription's secret stays in the config"
        );
    }
    // With the key: sealed before it is stored; the deliveries verify all the same.
    let dir = tempfile::tempdir().unwrap();
    let args = on_file(
        dir.path(),
        &format!("secret_keys = [\"{key}\"]\n{subscription}"),
    );
    let server = ServerProcess::start(&strs(&args));
    let rx = Receiver::start(SECRET, &[]);
    let mut c = Client::connect(&server.url).await;
    create(
        &mut c,
        "slow_compute",
        json!({"seconds": 0.1}),
        json!({"url": rx.url(), "secret": SECRET}),
    )
    .await;
    assert_eq!(rx.wait_for(1, Duration::from_secs(30))[0]["verified"], true);
    // An event whose receiver is down, kept pending across a kill -9.
    let port = common::free_port();
    let created = create(
        &mut c,
        "slow_compute",
        json!({"seconds": 0.1}),
        json!({"url": format!("http://127.0.0.1:{port}/hooks"), "secret": SECRET}),
    )
    .await;
    let id = created["task"]["taskId"].as_str().unwrap().to_string();
    wait_deliveries(&server, &id, |d| {
        d.first().is_some_and(|x| x["attempts"].as_u64() >= Some(1))
    })
    .await;
    let subs = sub_rx.wait_for(3, Duration::from_secs(30));
    assert!(subs.iter().all(|d| d["verified"] == true), "{subs:?}");
    server.kill9();
    assert!(
        !store_files_hold(dir.path(), client_key),
        "the client's secret is stored sealed"
    );
    assert!(!store_files_hold(dir.path(), sub_key));
    // The key given by the environment instead; the pending event is opened and signed.
    let args = on_file(dir.path(), &subscription);
    let rx = Receiver::start_on(port, SECRET, &[]);
    let mut cmd = common::serve_command(&strs(&args));
    cmd.env("MCP_TASKS_WEBHOOK_KEYS", &key);
    let server = ServerProcess::spawn(cmd);
    let seen = rx.wait_for(1, Duration::from_secs(30));
    assert_eq!(seen[0]["verified"], true);
    assert_eq!(seen[0]["body"]["data"]["taskId"], id.as_str());
    drop(server);
    // Without the key, a sealed secret cannot sign: the attempt says which key it needs.
    let args = on_file(dir.path(), "");
    let server = ServerProcess::start(&strs(&args));
    let delivery = deliveries(&server, &id).await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let admin_url = base(&server);
    let out = ClientCli::new(&server.url).run(&[
        "admin",
        "--url",
        &admin_url,
        "webhooks",
        "redeliver",
        &delivery,
    ]);
    assert!(out.status.success(), "{out:?}");
    let waiting = wait_deliveries(&server, &id, |d| {
        d.first().is_some_and(|x| {
            x["lastError"]
                .as_str()
                .is_some_and(|e| e.contains("sealed"))
        })
    })
    .await;
    let why = waiting[0]["lastError"].as_str().unwrap_or_default();
    assert!(
        why.contains("sealed with key") && why.contains("secret_keys"),
        "{waiting:?}"
    );
    assert_eq!(
        waiting[0]["state"], "pending",
        "a missing key is tried again: the operator may configure it"
    );
    assert_eq!(rx.seen().len(), 1, "nothing unsigned was sent");
    // With the key back, the event goes.
    drop(server);
    let mut cmd = common::serve_command(&strs(&args));
    cmd.env("MCP_TASKS_WEBHOOK_KEYS", &key);
    let _server = ServerProcess::spawn(cmd);
    let seen = rx.wait_for(2, Duration::from_secs(30));
    assert_eq!(seen[1]["verified"], true);
}
