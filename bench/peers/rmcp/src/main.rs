//! Benchmark peer: rmcp (pinned in Cargo.toml) serving one tool, `noop`, as a task of the MCP tasks
//! extension (`io.modelcontextprotocol/tasks`, SEP-2663) on the 2026-07-28 wire, over rmcp's
//! streamable HTTP server transport mounted in axum.
//!
//! Written the way rmcp's own examples do it (`examples/servers/src/common/task_demo.rs` for the
//! tasks, `counter_streamhttp.rs` for HTTP): a `#[tool_router]` handler that, when the request
//! declares the tasks extension, hands the call to `TaskManager::spawn` and answers with a
//! `CreateTaskResult`; `tasks/get`, `tasks/update` and `tasks/cancel` go to the same
//! `TaskManager`. One handler is shared by every request (rmcp builds a service per stateless
//! request from the factory, and the task table must be the same for all of them).
//!
//! Usage: mcp-peer-rmcp [--port N] [--json] [--ttl-ms N]
//!   --port N     port on 127.0.0.1 (0 or absent: ephemeral)
//!   --json       `json_response`: answer a POST with application/json instead of an SSE stream
//!                (rmcp's default is SSE)
//!   --ttl-ms N   the tasks' TTL (default: rmcp's DEFAULT_TASK_TTL_MS, 300000; 0 = unlimited)
//!
//! Prints exactly one line on stdout, `listening on http://127.0.0.1:PORT/mcp`. Logs go to stderr,
//! errors only unless RUST_LOG says otherwise.

use std::sync::Arc;

use axum::serve::ListenerExt;

use rmcp::{
    ErrorData as McpError, ServerHandler,
    handler::server::{router::tool::ToolRouter, tool::ToolCallContext},
    model::*,
    service::{RequestContext, RoleServer},
    task_manager::{DEFAULT_TASK_TTL_MS, TaskExit, TaskManager, TaskOptions},
    tool, tool_router,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};

#[derive(Clone)]
struct Peer {
    tool_router: ToolRouter<Peer>,
    tasks: TaskManager,
    ttl_ms: Option<u64>,
}

#[tool_router]
impl Peer {
    fn new(ttl_ms: Option<u64>) -> Self {
        Self {
            tool_router: Self::tool_router(),
            tasks: TaskManager::new(),
            ttl_ms,
        }
    }

    /// Run inline for clients that do not declare the tasks extension.
    #[tool(description = "Does nothing and returns \"ok\" at once (runs as a task)")]
    async fn noop(&self) -> Result<CallToolResult, McpError> {
        Ok(CallToolResult::success(vec![ContentBlock::text("ok")]))
    }
}

impl ServerHandler for Peer {
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // SEP-2663: the server decides per request; a task only for a request that declared the
        // extension in its capabilities.
        let client_supports_tasks = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        if request.name == "noop" && client_supports_tasks {
            let options = TaskOptions::new().with_ttl_ms(self.ttl_ms);
            let task = self.tasks.spawn(options, |ctx| {
                Box::pin(async move {
                    if ctx.is_cancel_requested() {
                        return Err(TaskExit::Cancelled);
                    }
                    Ok(CallToolResult::success(vec![ContentBlock::text("ok")]))
                })
            });
            return Ok(CallToolResponse::Task(CreateTaskResult::new(task)));
        }
        let tcc = ToolCallContext::new(self, request, context);
        self.tool_router.call(tcc).await
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tool_router.list_all()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tool_router.get(name).cloned()
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        Ok(GetTaskResult::new(self.tasks.get_task(&request.task_id)?))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks.cancel_task(&request.task_id)
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
    }
}

struct Args {
    port: u16,
    json: bool,
    ttl_ms: Option<u64>,
}

fn usage(message: &str) -> ! {
    eprintln!("{message}\nusage: mcp-peer-rmcp [--port N] [--json] [--ttl-ms N]");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut args = Args {
        port: 0,
        json: false,
        ttl_ms: Some(DEFAULT_TASK_TTL_MS),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| it.next())
                .unwrap_or_else(|| usage(&format!("{name} needs a value")))
        };
        match flag.as_str() {
            "--port" => {
                args.port = value("--port")
                    .parse()
                    .unwrap_or_else(|_| usage("--port needs an integer in 0..65535"))
            }
            "--ttl-ms" => {
                let ms: u64 = value("--ttl-ms")
                    .parse()
                    .unwrap_or_else(|_| usage("--ttl-ms needs an integer"));
                args.ttl_ms = (ms > 0).then_some(ms);
            }
            "--json" => args.json = true,
            "-h" | "--help" => usage("mcp-peer-rmcp: rmcp tasks peer"),
            other => usage(&format!("unknown argument: {other}")),
        }
    }
    args
}

#[tokio::main]
async fn main() -> anyhow_free::Result {
    let args = parse_args();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();

    let ct = tokio_util::sync::CancellationToken::new();
    let peer = Arc::new(Peer::new(args.ttl_ms));
    let service = StreamableHttpService::new(
        move || Ok(peer.clone()),
        LocalSessionManager::default().into(),
        StreamableHttpServerConfig::default()
            .with_json_response(args.json)
            .with_cancellation_token(ct.child_token()),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await?;
    println!("listening on http://{}/mcp", listener.local_addr()?);
    // TCP_NODELAY, as axum documents it: an SSE reply is written as several small segments
    // (headers, event, end of stream) and, with Nagle's algorithm on, the last waits for the
    // client's delayed ACK (~40 ms on Linux). Node's HTTP server, which the TypeScript peer uses,
    // sets TCP_NODELAY by default.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            shutdown_signal().await;
            ct.cancel();
        })
        .await?;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = ctrl_c => {}
        _ = term.recv() => {}
    }
}

/// `main`'s error type without another dependency.
mod anyhow_free {
    pub type Result = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;
}
