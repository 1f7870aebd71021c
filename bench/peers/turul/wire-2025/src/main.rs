//! Benchmark peer: turul-mcp-server (pinned in Cargo.toml) on its MCP 2025-11-25 lane, serving one
//! tool, `noop`, as a core task (`params.task`, `tasks/get`, `tasks/result`, `tasks/list`,
//! `tasks/cancel`) over turul's streamable HTTP server, with turul's in-memory or SQLite task storage.
//!
//! Written the way turul's own example does it (`examples/tasks-e2e-inmemory-server`):
//! `McpServer::builder().with_task_storage(…).tool(…).bind_address(…).build()?.run()`. The tool is a
//! hand-written `McpTool` (as in `examples/ext-tasks-server`) rather than `#[mcp_tool]`, so that
//! its result is the same `{"content":[{"type":"text","text":"ok"}]}` as every other peer's; it
//! declares `execution.taskSupport: "optional"`, as the example's tools do (turul refuses
//! `params.task` for a tool that declares nothing).
//!
//! Usage: mcp-peer-turul-2025 [--port N] [--store memory|sqlite] [--db PATH]
//!                            [--journal wal|delete] [--nagle]
//!   --port N       port on 127.0.0.1 (0 or absent: ephemeral)
//!   --store S      `memory` (default): `InMemoryTaskStorage::new()`;
//!                  `sqlite`: `SqliteTaskStorage::with_config` with turul's default config but the path
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
use turul_mcp_protocol::ToolSchema;
use turul_mcp_protocol::tools::{CallToolResult, TaskSupport, ToolExecution, ToolResult};
use turul_mcp_server::prelude::*;
use turul_mcp_task_storage::{
    InMemoryTaskStorage, SqliteTaskConfig, SqliteTaskStorage, TaskStorage,
};

const BIN: &str = "mcp-peer-turul-2025";

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
impl HasExecution for Noop {
    fn execution(&self) -> Option<ToolExecution> {
        Some(ToolExecution {
            task_support: Some(TaskSupport::Optional),
        })
    }
}

#[async_trait]
impl McpTool for Noop {
    async fn call(&self, _args: Value, _s: Option<SessionContext>) -> McpResult<CallToolResult> {
        Ok(CallToolResult::success(vec![ToolResult::text("ok")]))
    }
}

#[tokio::main]
async fn main() -> Result<(), peer::BoxError> {
    let args = peer::parse_args(BIN);
    if args.pool.is_some() {
        // `SqliteTaskConfig::max_connections` exists but `with_config` never reads it: the pool is
        // sqlx's default (10 connections), and there is no constructor that takes a pool.
        eprintln!(
            "{BIN}: --pool is for mcp-peer-turul-2026; turul's 2025 SQLite storage takes no pool"
        );
        std::process::exit(2);
    }
    peer::init_tracing();

    let db = (args.store == peer::Store::Sqlite).then(|| peer::DbFile::new(BIN, args.db.clone()));
    if let Some(db) = db.as_ref().filter(|_| args.wal) {
        db.make_wal().await?;
    }
    let storage: Arc<dyn TaskStorage> = match &db {
        None => Arc::new(InMemoryTaskStorage::new()),
        Some(db) => Arc::new(
            SqliteTaskStorage::with_config(SqliteTaskConfig {
                database_path: db.path.clone(),
                ..SqliteTaskConfig::default()
            })
            .await?,
        ),
    };

    peer::serve(args.port, args.nagle, db.as_ref(), move |addr| {
        let storage = Arc::clone(&storage);
        async move {
            let server = McpServer::builder()
                .name(BIN)
                .version(env!("CARGO_PKG_VERSION"))
                .with_task_storage(storage)
                .tool(Noop {
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
