//! The servers this binary runs for the suite: ours with a no-op task tool, and the ceiling.

use anyhow::Result;
use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_engine::store::sqlite::SqliteStore;
use mcp_tasks_engine::store::TaskStore;
use mcp_tasks_engine::EngineConfig;
use mcp_tasks_protocol::mcp_2025::TaskSupport;
use mcp_tasks_server::tool::{handler_fn, text_result, Tool};
use mcp_tasks_server::{Server, ServerConfig};
use std::sync::Arc;

/// Serves our server with one tool, `noop` (a task when asked, done at once), on `store`
/// (`memory:` or `sqlite://PATH`, a fresh file), with limits lifted so the load measures the server.
pub async fn ours(store: &str) -> Result<()> {
    let store: Arc<dyn TaskStore> = match store.strip_prefix("sqlite://") {
        Some(path) => {
            let _ = std::fs::remove_file(path);
            Arc::new(SqliteStore::open(path)?)
        }
        None => Arc::new(MemoryStore::new()),
    };
    let noop = Tool::new(
        "noop",
        handler_fn(|_ctx, _args| async move { text_result("ok", false) }),
    )
    .description("Does nothing, at once.")
    .task_support(TaskSupport::Optional);
    let mut config = ServerConfig::default();
    config.auth.anonymous_limits = mcp_tasks_server::auth::Limits {
        max_running_tasks: 10_000_000,
        calls_per_minute: None,
    };
    let server = Server::builder(store, EngineConfig::default(), config)
        .tool(noop)?
        .build();
    server.start().await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("listening on http://{}/mcp", listener.local_addr()?);
    mcp_tasks_server::http::serve_listener(server, listener, std::future::pending()).await?;
    Ok(())
}

/// The ceiling: a minimal HTTP server answering every request with one canned JSON reply (shaped so
/// every step of every mode reads it as done), on the same loopback and HTTP stack as ours.
pub async fn ceiling() -> Result<()> {
    use axum::http::header;
    const REPLY: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"task":{"taskId":"ceiling","status":"completed"},"taskId":"ceiling","status":"completed","resultType":"task","content":[{"type":"text","text":"ok"}]}}"#;
    let app = axum::Router::new()
        .fallback(|| async { ([(header::CONTENT_TYPE, "application/json")], REPLY) });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("listening on http://{}/mcp", listener.local_addr()?);
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app).await?;
    Ok(())
}
