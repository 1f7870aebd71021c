//! kill -9 the server mid-task, restart it on the same store (a SQLite file, or a PostgreSQL schema):
//! finished results are still there, the interrupted task is `failed` with its message, and a
//! retry-safe tool runs again.

mod common;
#[path = "../../server/tests/support/mod.rs"]
mod support;

use common::ServerProcess;
use serde_json::json;
use support::Client;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_server_keeps_results_and_fails_interrupted_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash.db");
    crash_and_restart(&format!("sqlite://{}", db.display()), "", true).await;
}

/// The same on PostgreSQL (a fresh schema): there the restarted server takes over only tasks whose
/// lease ran out (another replica may be running the rest), so leases are short here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_server_on_postgres_keeps_results_and_fails_interrupted_tasks() {
    let pg = common::pg::FreshSchema::new("crash").await;
    crash_and_restart(
        &pg.url,
        "[tasks]\nlease_secs = 1\nsweep_interval_secs = 1\n",
        false,
    )
    .await;
    pg.drop_schema().await;
}

async fn crash_and_restart(store: &str, tasks_section: &str, recovers_at_start: bool) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("crash.toml");
    std::fs::write(
        &config,
        format!(
            r#"{tasks_section}
[[tools]]
name = "retry_safe_sleep"
command = ["sh", "-c", "sleep 2; echo slept"]
task_support = "required"
retry_on_restart = true
"#
        ),
    )
    .unwrap();
    let args = [
        "--demo",
        "--store",
        store,
        "--config",
        config.to_str().unwrap(),
    ];

    let server = ServerProcess::start(&args);
    let mut c = Client::connect(&server.url).await;
    let done = c
        .create_task(
            "slow_compute",
            json!({"seconds": 0, "label": "before crash"}),
        )
        .await;
    let done_id = done["taskId"].as_str().unwrap().to_string();
    c.wait_terminal(&done_id).await;
    let failed = c.create_task("failing_job", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    c.wait_terminal(&failed).await;
    let interrupted = c.create_task("slow_compute", json!({"seconds": 120})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    let retried = c.create_task("retry_safe_sleep", json!({})).await["taskId"]
        .as_str()
        .unwrap()
        .to_string();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    server.kill9();

    let server = ServerProcess::start(&args);
    // Sessions are records in the store too: the same session id still works after the restart.
    c.url = server.url.clone();
    let t = c.get_task(&done_id).await;
    assert_eq!(t["status"], "completed");
    let r = c.request("tasks/result", json!({"taskId": done_id})).await;
    assert!(r.result()["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("before crash"));
    assert_eq!(c.get_task(&failed).await["status"], "failed");
    assert_eq!(
        c.request("tasks/result", json!({"taskId": failed}))
            .await
            .result()["isError"],
        json!(true)
    );

    let t = if recovers_at_start {
        c.get_task(&interrupted).await
    } else {
        c.wait_terminal(&interrupted).await
    };
    assert_eq!(t["status"], "failed");
    assert!(
        t["statusMessage"]
            .as_str()
            .unwrap()
            .contains("interrupted: server restarted"),
        "{t}"
    );
    let r = c
        .request("tasks/result", json!({"taskId": interrupted}))
        .await;
    assert_eq!(r.error_code(), -32603);

    let t = c.wait_terminal(&retried).await;
    assert_eq!(t["status"], "completed", "retry-safe tool ran again: {t}");
    let r = c.request("tasks/result", json!({"taskId": retried})).await;
    assert!(r.result()["content"].to_string().contains("slept"));
    let listed = c.request("tasks/list", json!({})).await;
    assert_eq!(listed.result()["tasks"].as_array().unwrap().len(), 4);
}
