//! Benchmark peer: turul-mcp-server (pinned in Cargo.toml) on its default MCP 2026-07-28 lane with
//! the Tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663, feature `ext-tasks`), serving one
//! tool, `noop`, as a task (`tasks/get` with the result inline, `tasks/update`, `tasks/cancel`) over
//! turul's streamable HTTP server, with turul-mcp-ext-tasks' in-memory or SQLite task store.
//!
//! Written the way turul's own example does it (`examples/ext-tasks-server`):
//! `McpServer::builder().with_ext_tasks(store).ext_task_tool(tool).bind_address(…).build()?.run()`,
//! with a hand-written `McpTool`. `ext_task_tool` elects a task when the request declares the
//! extension and runs the tool inline otherwise. No `with_ext_tasks_retention`, as in the example,
//! so no retention sweep runs (turul's documented default).
//!
//! **SQLite on one connection** (`--pool 1`, the default here): `SqliteTaskStore::open` puts the store
//! on sqlx's default pool of 10 connections, and then turul loses task completions. Its terminal
//! write is a deferred transaction that reads the row and then writes it; when another connection
//! holds the write lock at that moment (the next task's create, say), SQLite answers `SQLITE_BUSY`
//! at once, without the busy timeout (a reader may not wait to become a writer), the worker logs
//! "terminal write rejected (task likely cancelled)" and the task stays `working` for ever. With
//! one connection nothing contends. `SqliteTaskStore::from_pool` is turul's own constructor for a
//! pool the application builds; the connect options are `open`'s (the file, created if missing,
//! sqlx's defaults otherwise). `--pool 0` uses `SqliteTaskStore::open` as it is.
//!
//! Usage: mcp-peer-turul-2026 [--port N] [--store memory|sqlite] [--db PATH]
//!                            [--journal wal|delete] [--pool N] [--nagle]
//!   --port N       port on 127.0.0.1 (0 or absent: ephemeral)
//!   --store S      `memory` (default): `InMemoryTaskStore::new()`;
//!                  `sqlite`: `SqliteTaskStore::from_pool` on a pool of `--pool` connections
//!   --pool N       SQLite connections (default 1; 0: `SqliteTaskStore::open(path)`, sqlx's pool of 10)
//!   --db PATH      the SQLite file (default: a fresh file in the temp directory, removed on SIGTERM)
//!   --journal J    `wal` (default): put the file in WAL mode first (see common/peer.rs);
//!                  `delete`: leave it to turul (SQLite's rollback journal)
//!   --nagle        leave Nagle's algorithm on turul's sockets (default: TCP_NODELAY, see
//!                  common/peer.rs; without it every reply waits ~40 ms for the client's delayed ACK)
//!
//! Prints exactly one line on stdout, `listening on http://127.0.0.1:PORT/mcp`. Logs go to stderr,
//! errors only unless RUST_LOG says otherwise.

#[path = "../../common/peer.rs"]
mod peer;

use std::sync::Arc;

use serde_json::Value;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use turul_mcp_ext_tasks::v2026_07_28::sqlite::SqliteTaskStore;
use turul_mcp_ext_tasks::{InMemoryTaskStore, TaskStore};
use turul_mcp_protocol::ToolSchema;
use turul_mcp_protocol::tools::{CallToolResult, ToolResult};
use turul_mcp_server::prelude::*;

const BIN: &str = "mcp-peer-turul-2026";

struct Noop {
    input_schema: ToolSchema,
}

impl HasBaseMetadata for Noop {
    fn name(&self) -> &str {
        "noop"
    }
}
impl HasDescription for Noop {
    fn description(&self) -> Option<&str> {
        Some("Does nothing and returns \"ok\" at once (runs as a task)")
    }
}
impl HasInputSchema for Noop {
    fn input_schema(&self) -> &ToolSchema {
        &self.input_schema
    }
}
impl HasOutputSchema for Noop {}
impl HasAnnotations for Noop {}
impl HasToolMeta for Noop {}
impl HasIcons for Noop {}

#[async_trait]
impl McpTool for Noop {
    async fn call(&self, _args: Value, _s: Option<SessionContext>) -> McpResult<CallToolResult> {
        Ok(CallToolResult::success(vec![ToolResult::text("ok")]))
    }
}

#[tokio::main]
async fn main() -> Result<(), peer::BoxError> {
    let args = peer::parse_args(BIN);
    peer::init_tracing();

    let db = (args.store == peer::Store::Sqlite).then(|| peer::DbFile::new(BIN, args.db.clone()));
    if let Some(db) = db.as_ref().filter(|_| args.wal) {
        db.make_wal().await?;
    }
    let store: Arc<dyn TaskStore> = match &db {
        None => Arc::new(InMemoryTaskStore::new()),
        Some(db) => match args.pool.unwrap_or(1) {
            0 => Arc::new(SqliteTaskStore::open(&db.path).await?),
            size => {
                // As `SqliteTaskStore::open` connects, on a pool of `size` connections.
                let options = SqliteConnectOptions::new()
                    .filename(&db.path)
                    .create_if_missing(true);
                let pool = SqlitePoolOptions::new()
                    .max_connections(size)
                    .connect_with(options)
                    .await?;
                Arc::new(SqliteTaskStore::from_pool(pool).await?)
            }
        },
    };

    peer::serve(args.port, args.nagle, db.as_ref(), move |addr| {
        let store = Arc::clone(&store);
        async move {
            let server = McpServer::builder()
                .name(BIN)
                .version(env!("CARGO_PKG_VERSION"))
                .with_ext_tasks(store)
                .ext_task_tool(Noop {
                    input_schema: ToolSchema::object(),
                })
                .bind_address(addr)
                .build()
                .map_err(|e| e.to_string())?;
            server.run().await.map_err(|e| e.to_string())
        }
    })
    .await
}
