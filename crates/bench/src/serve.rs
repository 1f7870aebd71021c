//! The servers this binary runs for the suite: ours with a no-op task tool, and the ceiling.

use anyhow::Result;
use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_engine::store::postgres::PostgresStore;
use mcp_tasks_engine::store::sqlite::SqliteStore;
use mcp_tasks_engine::store::TaskStore;
use mcp_tasks_engine::EngineConfig;
use mcp_tasks_protocol::mcp_2025::TaskSupport;
use mcp_tasks_server::tool::{handler_fn, text_result, Tool};
use mcp_tasks_server::{Server, ServerConfig};
use std::sync::Arc;

/// Serves our server on `store` (`memory:`, `sqlite://PATH`, the file started afresh unless `keep`,
/// or `postgres://…`, in schema `pg_schema` or a fresh one), with limits lifted so the load measures the server, and these tools (each a task when
/// asked): `noop` (done at once), `wait` (runs until cancelled), `stamp {ms}` (sleeps `ms`, then answers
/// the Unix time in µs at which it finished). With `prefill`, first stores that many finished tasks.
/// With `auth`, callers may also present the load's API key or access tokens (see `credentials`).
pub async fn ours(
    store: &str,
    keep: bool,
    prefill: usize,
    pg_schema: Option<String>,
    auth: bool,
) -> Result<()> {
    let notifier = mcp_tasks_engine::Notifier::new();
    let store: Arc<dyn TaskStore> = if store.starts_with("postgres") {
        // A schema of its own (named after the process unless `pg_schema` names a shared one, for
        // replicas), and the relay, so replicas on it wake each other as `mcp-tasks serve` does.
        let schema =
            pg_schema.unwrap_or_else(|| format!("bench_{}", &mcp_tasks_engine::random_id()[..12]));
        let pg: Arc<dyn TaskStore> = Arc::new(PostgresStore::open_in_schema(store, &schema).await?);
        let sep = if store.contains('?') { '&' } else { '?' };
        let url = format!("{store}{sep}options=-c%20search_path%3D{schema}");
        mcp_tasks_engine::store::postgres::relay::start(
            &url,
            notifier.clone(),
            pg.clone(),
            tokio_util::sync::CancellationToken::new(),
        )
        .await?;
        pg
    } else {
        match store.strip_prefix("sqlite://") {
            Some(path) => {
                if !keep {
                    let _ = std::fs::remove_file(path);
                }
                Arc::new(SqliteStore::open(path)?)
            }
            // Every task kept, as the peers' in-memory stores do: a scale run reads what it made.
            None => Arc::new(MemoryStore::with_max_finished(usize::MAX)),
        }
    };
    let noop = Tool::new(
        "noop",
        handler_fn(|_ctx, _args| async move { text_result("ok", false) }),
    )
    .description("Does nothing, at once.")
    .task_support(TaskSupport::Optional);
    let wait = Tool::new(
        "wait",
        handler_fn(|ctx, _args| async move {
            ctx.cancelled().await;
            text_result("stopped", false)
        }),
    )
    .description("Runs until cancelled.")
    .task_support(TaskSupport::Optional);
    let stamp = Tool::new(
        "stamp",
        handler_fn(|_ctx, args| async move {
            let ms = args
                .get("ms")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0);
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            text_result(now_us().to_string(), false)
        }),
    )
    .description("Sleeps `ms`, then answers the Unix time in µs at which it finished.")
    .task_support(TaskSupport::Optional);
    let mut config = ServerConfig::default();
    let lifted = mcp_tasks_server::auth::Limits {
        max_running_tasks: 10_000_000,
        calls_per_minute: None,
        max_plain_calls: 1_000_000,
        max_streams: 1_000_000,
        max_running_bytes: u64::MAX,
    };
    if auth {
        let jwks = crate::credentials::serve_key_set().await?;
        config.auth = crate::credentials::accept_all(jwks, lifted);
    } else {
        config.auth.anonymous_limits = lifted;
        // Every client of the load generator comes from 127.0.0.1, and the scale scenarios open
        // sessions round after round: the per-address budget (60 a minute) would refuse them.
        config.auth.anonymous_sessions = mcp_tasks_server::auth::SessionBudget {
            per_minute_per_address: 1_000_000,
            per_minute: 1_000_000,
            max_per_address: 1_000_000,
            max: 1_000_000,
            ..Default::default()
        };
    }
    // MCP Events with webhooks to loopback (the events benchmark's receiver), and no cap.
    config.events = mcp_tasks_server::events::EventSettings {
        allow_insecure_loopback: true,
        max_subscriptions_per_principal: 10_000_000,
        ..Default::default()
    };
    let server = Server::builder(store, EngineConfig::default(), config)
        .notifier(notifier)
        .tool(noop)?
        .tool(wait)?
        .tool(stamp)?
        .build();
    // Recovery of what a previous run left unfinished is part of starting (and of restart time).
    let recovered = server.start().await?;
    if recovered > 0 {
        eprintln!("recovered {recovered} unfinished tasks");
    }
    if prefill > 0 {
        use futures::StreamExt;
        let started = std::time::Instant::now();
        let engine = server.engine().clone();
        // Concurrent submits, so the SQLite writer commits them in groups.
        futures::stream::iter(0..prefill)
            .map(|i| {
                let engine = engine.clone();
                async move {
                    let mut new =
                        mcp_tasks_engine::NewTask::new("noop", serde_json::json!({"i": i}));
                    new.owner = "prefill".into();
                    let outcome = mcp_tasks_engine::Outcome::Result {
                        value: serde_json::json!({"content": [{"type": "text", "text": "ok"}]}),
                        is_error: false,
                    };
                    engine.submit_finished(new, outcome).await
                }
            })
            .buffer_unordered(512)
            .for_each(|r| async move {
                if let Err(e) = r {
                    eprintln!("prefill failed: {e}");
                }
            })
            .await;
        eprintln!(
            "prefilled {prefill} tasks in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
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

/// Unix time in µs (the blocked-result scenario measures lags well under a millisecond).
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}
