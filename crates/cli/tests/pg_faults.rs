//! Losing the database mid-load: every connection of a replica is terminated by PostgreSQL
//! (`pg_terminate_backend`) while a client creates tasks. Requests that hit the outage fail with a
//! JSON-RPC error that says what failed; the replica reconnects by itself; every task that got a
//! `CreateTaskResult` exists and finishes, once.

mod common;
#[path = "../../server/tests/support/mod.rs"]
mod support;

use common::ServerProcess;
use serde_json::json;
use std::time::{Duration, Instant};
use support::Client;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_connections_are_killed_recovers_and_loses_nothing() {
    let pg = common::pg::FreshSchema::new("faults").await;
    // The replica's connections carry a name of their own, so only they are terminated.
    let app = format!("mcp-tasks-fault-{}", &mcp_tasks_engine::random_id()[..8]);
    let url = format!("{}&application_name={app}", pg.url);
    let a = ServerProcess::start(&["--demo", "--store", url.as_str()]);
    let mut c = Client::connect(&a.url).await;

    // Tasks that will finish while the connections keep being killed: their outcomes must still land.
    let mut created = Vec::new();
    for _ in 0..10 {
        let t = c.create_task("slow_compute", json!({"seconds": 1})).await;
        created.push(t["taskId"].as_str().unwrap().to_string());
    }
    // From 0.5 s to 3 s: every connection of the replica terminated every 30 ms.
    let killer = {
        let app = app.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let (client, conn) =
                tokio_postgres::connect(&common::pg::test_url(), tokio_postgres::NoTls)
                    .await
                    .unwrap();
            tokio::spawn(conn);
            let until = Instant::now() + Duration::from_millis(2_500);
            let mut terminated = 0;
            while Instant::now() < until {
                let row = client
                    .query_one(
                        "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity \
                         WHERE application_name = $1",
                        &[&app],
                    )
                    .await
                    .unwrap();
                terminated += row.get::<_, i64>(0);
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
            terminated
        })
    };

    let mut failures = Vec::new();
    let mut last_ok = false;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        let ex = c
            .request(
                "tools/call",
                json!({"name": "slow_compute", "arguments": {"seconds": 0.1}, "task": {"ttl": 60_000}}),
            )
            .await;
        let reply = ex
            .reply
            .clone()
            .expect("a JSON-RPC reply, even during the outage");
        match reply.get("result") {
            Some(r) => {
                created.push(r["task"]["taskId"].as_str().unwrap().to_string());
                last_ok = true;
            }
            None => {
                failures.push(reply["error"].clone());
                last_ok = false;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let terminated = killer.await.unwrap();
    assert!(terminated > 0, "the replica's connections were terminated");
    assert!(
        last_ok,
        "the replica serves again after the outage: {failures:?}"
    );
    for e in &failures {
        assert_eq!(e["code"], -32603, "{e}");
        let message = e["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("store") || message.contains("PostgreSQL"),
            "the error says what failed: {e}"
        );
    }
    // Every task that was acknowledged exists and finishes (slow_compute always completes).
    for id in &created {
        let t = c.wait_terminal(id).await;
        assert_eq!(t["status"], "completed", "{t}");
    }
    eprintln!(
        "{} tasks created, {} requests failed during the outage, {terminated} connections terminated",
        created.len(),
        failures.len()
    );
    drop(a);
    pg.drop_schema().await;
}
