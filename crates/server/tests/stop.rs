//! `Server::stop`, the stop sequence the binary used to own (issue 49, item 3): drain, hand-off,
//! close, the serve loops' end, webhooks, engine; and an interruption that skips the rest.

mod support;

use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_engine::store::Lookup;
use mcp_tasks_engine::TaskStatus;
use mcp_tasks_protocol::mcp_2025::TaskSupport;
use mcp_tasks_server::tool::{handler_fn, text_result};
use mcp_tasks_server::{demo, Server, ServerConfig, StopPlan, Tool};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{bind, fast_engine, long_task, Client};

/// A server with the demo tools on a memory store, served on loopback by a serve loop whose handle
/// the test keeps.
async fn serving() -> Served {
    let mut engine = fast_engine();
    engine.hand_off_grace = Duration::from_millis(500);
    serving_with(engine).await
}

/// A served server: the server, its URL, its serve loop.
type Served = (
    Arc<Server>,
    String,
    tokio::task::JoinHandle<std::io::Result<()>>,
);

/// [`serving`] with `engine`'s settings, and `stubborn` beside the demo tools: a task that runs for
/// a minute whatever it is told.
async fn serving_with(engine: mcp_tasks_engine::EngineConfig) -> Served {
    let mut b = Server::builder(
        Arc::new(MemoryStore::new()),
        engine,
        ServerConfig::default(),
    );
    for t in demo::tools::tools() {
        b = b.tool(t).unwrap();
    }
    let stubborn = Tool::new(
        "stubborn",
        handler_fn(|_ctx, _args| async move {
            tokio::time::sleep(Duration::from_secs(60)).await;
            text_result("done", false)
        }),
    )
    .input_schema(json!({"type": "object"}))
    .task_support(TaskSupport::Optional);
    b = b.tool(stubborn).unwrap();
    let server = b.build();
    server.start().await.unwrap();
    let (listener, url) = bind().await;
    let app = mcp_tasks_server::http::router(server.clone());
    let serve = tokio::spawn(mcp_tasks_server::http::serve_router(
        server.clone(),
        listener,
        app,
        std::future::pending(),
    ));
    (server, url, serve)
}

fn plan() -> StopPlan {
    StopPlan {
        drain: Duration::from_millis(400),
        linger: Duration::from_millis(100),
        close_quiet: Duration::from_millis(100),
        close_bound: Duration::from_millis(500),
        webhooks: Duration::from_millis(500),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_drains_hands_off_what_still_runs_closes_and_ends_the_serve_loop() {
    let (server, url, serve) = serving().await;
    let mut c = Client::connect(&url).await;
    let id = long_task(&mut c).await;
    let stop = tokio::spawn({
        let server = server.clone();
        async move { server.stop(&plan(), std::future::pending()).await }
    });
    // Draining: a new call is turned away while the running task goes on.
    let until = Instant::now() + Duration::from_secs(5);
    while !server.draining() {
        assert!(Instant::now() < until, "the drain never began");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let refused = c
        .post(
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}"#
                .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    let report = tokio::time::timeout(Duration::from_secs(5), stop)
        .await
        .expect("the stop took too long")
        .unwrap();
    assert_eq!(report.running_at_drain, 1);
    assert_eq!(report.handed_off, 1);
    assert!(!report.interrupted);
    // Handed off: unfinished, its lease let go for whoever comes next.
    let Lookup::Found(t) = server.engine().store().get(&id).await.unwrap() else {
        panic!("the task is gone")
    };
    assert_eq!(t.status, TaskStatus::Working);
    assert_eq!(t.lease_owner, None);
    // The serve loop ended, the listener with it, and the engine's services.
    tokio::time::timeout(Duration::from_secs(2), serve)
        .await
        .expect("the serve loop outlived the stop")
        .unwrap()
        .unwrap();
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    assert!(tokio::net::TcpStream::connect(&addr).await.is_err());
    // Every service's loop has returned; its task is done a moment later.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let services = server.engine().services();
    assert!(!services.is_empty());
    assert!(services.iter().all(|s| !s.running), "{services:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_stop_skips_the_rest_of_the_drain_and_the_hand_off() {
    let (server, url, serve) = serving().await;
    let mut c = Client::connect(&url).await;
    long_task(&mut c).await;
    let mut long = plan();
    long.drain = Duration::from_secs(20);
    let began = Instant::now();
    let report = server
        .stop(&long, tokio::time::sleep(Duration::from_millis(200)))
        .await;
    assert!(report.interrupted);
    assert_eq!(report.handed_off, 0);
    assert!(
        began.elapsed() < Duration::from_secs(4),
        "{:?}",
        began.elapsed()
    );
    tokio::time::timeout(Duration::from_secs(2), serve)
        .await
        .expect("the serve loop outlived the stop")
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_with_nothing_running_lingers_and_hands_off_nothing() {
    let (server, _url, serve) = serving().await;
    let mut long = plan();
    long.drain = Duration::from_secs(10);
    let began = Instant::now();
    let report = server.stop(&long, std::future::pending()).await;
    assert_eq!(report, Default::default());
    // The linger (0.1 s) and the close's quiet moment (0.1 s), not the drain's 10 s.
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    serve.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_stop_returns_at_once_even_when_a_handler_ignores_its_stop() {
    let mut engine = fast_engine();
    engine.cancel_grace = Duration::from_secs(30);
    engine.hand_off_grace = Duration::from_secs(30);
    let (server, url, _serve) = serving_with(engine).await;
    let mut c = Client::connect(&url).await;
    c.create_task("stubborn", json!({})).await;
    let mut long = plan();
    long.drain = Duration::from_millis(100);
    let began = Instant::now();
    // The drain ends, the hand-off begins (its grace 30 s, which the handler ignores), and the
    // second signal comes.
    let report = server
        .stop(&long, tokio::time::sleep(Duration::from_millis(400)))
        .await;
    assert!(report.interrupted);
    assert!(
        began.elapsed() < Duration::from_secs(3),
        "the stop waited for the handler: {:?}",
        began.elapsed()
    );
}
