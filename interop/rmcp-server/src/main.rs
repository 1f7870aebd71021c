//! A server no one here wrote, for the client's tests: rmcp (pinned in Cargo.toml) serving task
//! tools through its `TaskManager` (tasks extension `io.modelcontextprotocol/tasks`, 2026-07-28),
//! over rmcp's streamable HTTP server transport, written the way rmcp's examples
//! (`examples/servers/src/common/task_demo.rs`) do it.
//!
//! Tools (tasks for requests that declare the extension):
//! - `count {seconds}`: counts the seconds, its status message saying "i of n"; stops on cancel;
//! - `fail {}`: completes with a tool error (`isError: true`, "fail: on purpose");
//! - `ask {}`: asks the user to confirm (an `inputRequests` elicitation), then reports the answer.
//!
//! Usage: mcp-interop-rmcp-server — prints `listening on http://127.0.0.1:PORT/mcp` on stdout.

use std::sync::Arc;
use std::time::Duration;

use rmcp::{
    ErrorData as McpError, ServerHandler,
    model::*,
    service::{RequestContext, RoleServer},
    task_manager::{TaskExit, TaskManager, TaskOptions},
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};
use serde_json::{Value, json};

#[derive(Clone)]
struct Tasks {
    tasks: TaskManager,
}

fn tool(name: &str, description: &str, schema: Value) -> Tool {
    let Value::Object(schema) = schema else {
        unreachable!("schemas here are objects")
    };
    Tool::new(name.to_string(), description.to_string(), Arc::new(schema))
}

fn text(t: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(t.into())])
}

impl ServerHandler for Tasks {
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let as_task = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        if !as_task {
            return Err(McpError::invalid_request(
                "these tools run as tasks: declare the tasks extension",
                None,
            ));
        }
        let args = request.arguments.clone().unwrap_or_default();
        let options = TaskOptions::new().with_poll_interval_ms(200);
        let task = match request.name.as_ref() {
            "count" => {
                let seconds = args.get("seconds").and_then(Value::as_u64).unwrap_or(1);
                self.tasks.spawn(options, move |ctx| {
                    Box::pin(async move {
                        for i in 1..=seconds {
                            tokio::select! {
                                _ = ctx.cancelled() => return Err(TaskExit::Cancelled),
                                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                            }
                            ctx.set_status_message(format!("{i} of {seconds}"));
                        }
                        Ok(text(format!("counted to {seconds}")))
                    })
                })
            }
            "fail" => self.tasks.spawn(options, |_ctx| {
                Box::pin(async move {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    Ok(CallToolResult::error(vec![ContentBlock::text(
                        "fail: on purpose",
                    )]))
                })
            }),
            "ask" => self.tasks.spawn(options, |ctx| {
                Box::pin(async move {
                    let ask: InputRequest = serde_json::from_value(json!({
                        "method": "elicitation/create",
                        "params": {"mode": "form", "message": "Go ahead?",
                            "requestedSchema": {"type": "object",
                                "properties": {"confirm": {"type": "boolean", "title": "Confirm"}},
                                "required": ["confirm"]}}
                    }))
                    .map_err(|e| TaskExit::Error(McpError::internal_error(e.to_string(), None)))?;
                    let answer = ctx.request_input("confirm", ask).await?;
                    let said = match answer.get("action").and_then(Value::as_str) {
                        Some("accept") => format!("confirm={}", answer["content"]["confirm"]),
                        other => format!("action={}", other.unwrap_or("?")),
                    };
                    Ok(text(said))
                })
            }),
            other => {
                return Err(McpError::invalid_params(format!("no tool {other}"), None));
            }
        };
        Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(vec![
            tool(
                "count",
                "Counts the seconds, saying how far it got",
                json!({"type": "object", "properties": {"seconds": {"type": "integer", "minimum": 0}},
                    "required": ["seconds"]}),
            ),
            tool("fail", "Fails on purpose", json!({"type": "object"})),
            tool(
                "ask",
                "Asks the user to confirm, then says what they answered",
                json!({"type": "object"}),
            ),
        ]))
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

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let ct = tokio_util::sync::CancellationToken::new();
    let handler = Arc::new(Tasks {
        tasks: TaskManager::new(),
    });
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        LocalSessionManager::default().into(),
        StreamableHttpServerConfig::default().with_cancellation_token(ct.child_token()),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    println!("listening on http://{}/mcp", listener.local_addr()?);
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            ct.cancel();
        })
        .await?;
    Ok(())
}
