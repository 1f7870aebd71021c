//! MCP Events with real clients against the real binary: the Vercel AI SDK's client and its own
//! verifying receiver (`@ai-sdk/mcp` 2.0.99, interop/ai-sdk) on the 2026-07-28 path and on the
//! 2025-11-25 path, and a strict ChatGPT-like client (webhook only, every POST verified with the
//! official `standardwebhooks` library, interop/python/events_chatgpt_like.py), each to a
//! delivered `task.finished` of a real task; and a subscription that outlives a `kill -9`.

mod common;
#[path = "../../server/tests/support/mod.rs"]
mod support;

use common::{repo_root, ServerProcess};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use support::stateless::{wait_status, Stateless};

/// A config with Alice's key and loopback callbacks allowed.
fn config(dir: &Path) -> PathBuf {
    config_with(dir, "")
}

/// [`config`] with `events` added to its `[events]` table.
fn config_with(dir: &Path, events: &str) -> PathBuf {
    let path = dir.join("mcp-tasks.toml");
    std::fs::write(
        &path,
        format!(
            "[events]\nallow_insecure_loopback = true\n{events}\n\n[[auth.keys]]\nprincipal = \"alice\"\nsha256 = \"{}\"\n\n[[auth.keys]]\nprincipal = \"ops\"\nsha256 = \"{}\"\noperator = true\n",
            mcp_tasks_server::auth::hash_key("key-alice"),
            mcp_tasks_server::auth::hash_key("key-ops")
        ),
    )
    .unwrap();
    path
}

fn server(dir: &Path, store: &str) -> ServerProcess {
    let cfg = config(dir);
    ServerProcess::start(&[
        "--demo",
        "--store",
        store,
        "--config",
        cfg.to_str().unwrap(),
    ])
}

/// A script's JSON lines, as they come.
struct Script {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Drop for Script {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Script {
    fn start(mut cmd: Command) -> Script {
        let mut child = cmd
            .current_dir(repo_root())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the client script");
        let out: ChildStdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Script { child, lines }
    }

    /// The next line, which must carry `key` (an `error` line fails the test with its reason).
    fn expect(&self, key: &str) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("the script said nothing about {key:?} in 60 s"));
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|_| panic!("not JSON: {line}"));
        assert!(
            v.get("error").is_none(),
            "the script failed: {}",
            v["error"]
        );
        assert!(v.get(key).is_some(), "expected {key:?}, got {v}");
        v
    }
}

fn ai_sdk(url: &str, legacy: bool) -> Script {
    ai_sdk_with(url, legacy, &[])
}

fn ai_sdk_with(url: &str, legacy: bool, env: &[(&str, &str)]) -> Script {
    let script = repo_root().join("interop/ai-sdk/events-interop.mjs");
    assert!(
        repo_root()
            .join("interop/ai-sdk/node_modules/@ai-sdk/mcp")
            .exists(),
        "interop/ai-sdk/node_modules is missing: run scripts/test.sh"
    );
    let mut cmd = Command::new("node");
    cmd.arg(script)
        .env("MCP_URL", url)
        .env("TOKEN", "key-alice");
    if legacy {
        cmd.env("LEGACY", "1");
    }
    cmd.envs(env.iter().copied());
    Script::start(cmd)
}

/// `mcp-tasks admin ARGS` against the server at `base` as the operator; its stdout (it must succeed).
fn admin(base: &str, args: &[&str]) -> String {
    let out = Command::new(common::bin())
        .args(["admin", "--url", base, "--key", "key-ops"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// `events watch task.finished EXTRA --count 1 --json` against `url` as Alice.
fn watch_args(url: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["events", "watch", "task.finished"]
        .map(String::from)
        .to_vec();
    args.extend(extra.iter().map(|a| a.to_string()));
    for a in ["--count", "1", "--json", "--url", url, "--key", "key-alice"] {
        args.push(a.to_string());
    }
    args
}

/// Runs a real task as Alice and returns its id once it completed.
async fn alices_task(url: &str) -> String {
    let mut alice = Stateless::with_tasks(url).bearer("key-alice");
    let id = alice
        .start_task("slow_compute", json!({"seconds": 0}))
        .await;
    wait_status(&mut alice, &id, &["completed"]).await;
    id
}

async fn ai_sdk_gets_the_event(legacy: bool) {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), "memory:");
    let script = ai_sdk(&s.url, legacy);
    let listed = script.expect("listed");
    assert_eq!(
        listed["listed"],
        json!(["task.finished", "task.input_required"])
    );
    let sub = script.expect("subscribed")["subscribed"].clone();
    assert!(sub["id"].as_str().unwrap().starts_with("sub_"), "{sub}");
    let task = alices_task(&s.url).await;
    let got = script.expect("event");
    let event = &got["event"];
    assert_eq!(got["status"], 204, "the AI SDK's receiver took it: {got}");
    assert_eq!(event["name"], "task.finished");
    assert_eq!(event["data"]["taskId"], json!(task));
    assert_eq!(event["data"]["status"], "completed");
    let refreshed = script.expect("refreshed")["refreshed"].clone();
    assert_eq!(refreshed["id"], sub["id"], "a refresh keeps the id");
    let done = script.expect("unsubscribed");
    assert_eq!(
        done["stored"], 0,
        "the client's record is gone: the unsubscribe did not fail"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ai_sdk_client_and_receiver_get_a_task_s_end_on_2026_07_28() {
    ai_sdk_gets_the_event(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ai_sdk_client_and_receiver_get_a_task_s_end_on_2025_11_25() {
    ai_sdk_gets_the_event(true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_ending_a_subscription_tells_the_ai_sdk_receiver_with_terminated() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config_with(dir.path(), "control_envelopes = true");
    let s = ServerProcess::start(&[
        "--demo",
        "--store",
        "memory:",
        "--config",
        cfg.to_str().unwrap(),
    ]);
    let script = ai_sdk_with(&s.url, false, &[("TERMINATE", "1")]);
    script.expect("listed");
    let sub = script.expect("subscribed")["subscribed"].clone();
    let id = sub["id"].as_str().unwrap();
    let base = s.url.trim_end_matches("/mcp").to_string();
    admin(&base, &["subscriptions", "end", id]);
    let got = script.expect("terminated");
    assert_eq!(got["status"], 204, "the receiver took it: {got}");
    assert_eq!(got["stored"], 0, "the receiver dropped its record: {got}");
    let t = &got["terminated"];
    assert_eq!(t["subscription"]["id"], sub["id"], "{t}");
    assert!(
        t["messageId"]
            .as_str()
            .unwrap()
            .starts_with("msg_terminated_"),
        "{t}"
    );
    assert_eq!(t["termination"]["type"], "terminated");
    assert_eq!(t["termination"]["error"]["code"], -32012, "Forbidden: {t}");
    // Every type it serves is declared: the operator's sweep ends nothing.
    let swept = admin(&base, &["subscriptions", "end-undeclared"]);
    assert_eq!(swept.trim(), "0 subscriptions ended");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_strict_chatgpt_like_client_gets_a_task_s_end_by_webhook_only() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), "memory:");
    let py = repo_root().join("interop/python/.venv/bin/python");
    let mut cmd = Command::new(py);
    cmd.arg("interop/python/events_chatgpt_like.py")
        .arg(&s.url)
        .arg("key-alice")
        .arg("--hold");
    let mut script = Script::start(cmd);
    let caps = script.expect("discovered");
    assert_eq!(caps["discovered"]["events"], json!({}));
    script.expect("listed");
    let sub = script.expect("subscribed")["subscribed"].clone();
    assert_eq!(sub["resultType"], "complete");
    assert!(
        sub["refreshBefore"].is_string() && sub["truncated"] == false,
        "{sub}"
    );
    let task = alices_task(&s.url).await;
    let got = script.expect("event");
    assert_eq!(got["event"]["body"]["data"]["taskId"], json!(task));
    // The operator sees the subscription, its delivery, and the count in /metrics.
    let base = s.url.trim_end_matches("/mcp").to_string();
    let admin = |args: &[&str]| admin(&base, args);
    let listed: Value = serde_json::from_str(&admin(&["subscriptions", "list", "--json"])).unwrap();
    assert_eq!(listed[0]["id"], sub["id"], "{listed}");
    assert_eq!(listed[0]["principal"], "alice");
    assert_eq!(listed[0]["active"], true);
    let mut shown: Value = Value::Null;
    for _ in 0..50 {
        shown = serde_json::from_str(&admin(&[
            "subscriptions",
            "show",
            sub["id"].as_str().unwrap(),
            "--json",
        ]))
        .unwrap();
        if shown["deliveries"][0]["state"] == "delivered" {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(shown["deliveries"][0]["state"], "delivered", "{shown}");
    assert!(shown.get("secret").is_none() && !shown.to_string().contains("whsec_"));
    let metrics = reqwest::Client::new()
        .get(format!("{base}/metrics"))
        .bearer_auth("key-ops")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("mcp_tasks_event_delivery_attempts_total{outcome=\"delivered\"} 1"),
        "{metrics}"
    );
    {
        use std::io::Write;
        let stdin = script.child.stdin.as_mut().unwrap();
        writeln!(stdin, "go on").unwrap();
    }
    let done = script.expect("unsubscribed");
    assert_eq!(done["unsubscribed"]["resultType"], "complete");
    assert_eq!(done["refused"], json!([]), "every POST verified");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subscription_outlives_kill_9_and_the_event_of_a_task_finished_after_it_comes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("tasks.db");
    let s = server(dir.path(), db.to_str().unwrap());
    let py = repo_root().join("interop/python/.venv/bin/python");
    let mut cmd = Command::new(py);
    cmd.arg("interop/python/events_chatgpt_like.py")
        .arg(&s.url)
        .arg("key-alice");
    let script = Script::start(cmd);
    script.expect("discovered");
    script.expect("listed");
    script.expect("subscribed");
    // A task started before the crash finishes after the restart.
    let mut alice = Stateless::with_tasks(&s.url).bearer("key-alice");
    let task = alice
        .start_task("slow_compute", json!({"seconds": 3}))
        .await;
    s.kill9();
    let s = server(dir.path(), db.to_str().unwrap());
    let mut alice = Stateless::with_tasks(&s.url).bearer("key-alice");
    wait_status(&mut alice, &task, &["completed", "failed"]).await;
    let got = script.expect("event");
    assert_eq!(got["event"]["body"]["data"]["taskId"], json!(task));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_lists_the_types_and_watches_a_task_s_end_on_its_stream_and_goes_on_from_a_cursor()
{
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path(), "memory:");
    let list = Command::new(common::bin())
        .args(["events", "list", "--url", &s.url, "--key", "key-alice"])
        .output()
        .unwrap();
    assert!(
        list.status.success(),
        "{}",
        String::from_utf8_lossy(&list.stderr)
    );
    let text = String::from_utf8_lossy(&list.stdout).to_string();
    assert!(
        text.contains("task.finished  [poll, push, webhook]  arguments: taskId, tool"),
        "{text}"
    );
    assert!(text.contains("task.input_required"), "{text}");
    let mut watch = Command::new(common::bin());
    watch.args(watch_args(&s.url, &["tool=slow_compute"]));
    let script = Script::start(watch);
    // The watch starts from now: give its stream a moment to open before the task ends.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let task = alices_task(&s.url).await;
    let line = script.expect("eventId");
    assert_eq!(line["name"], "task.finished");
    assert_eq!(line["data"]["taskId"], json!(task));
    // A task that ends while nobody watches is replayed by a watch from the last cursor.
    let later = alices_task(&s.url).await;
    let cursor = line["cursor"].as_str().unwrap().to_string();
    let again = Command::new(common::bin())
        .args(watch_args(&s.url, &["--cursor", &cursor]))
        .output()
        .unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let replayed: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(replayed["data"]["taskId"], json!(later), "{replayed}");
    let told = String::from_utf8_lossy(&again.stderr).to_string();
    assert!(
        told.contains(&format!("cursor {}", replayed["cursor"].as_str().unwrap())),
        "where to go on from: {told}"
    );
}
