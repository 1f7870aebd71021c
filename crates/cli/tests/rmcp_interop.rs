//! Interop with the official Rust SDK client: rmcp 3.x (crates.io, a dev-dependency only) runs task
//! tools on the real `mcp-tasks` binary over Streamable HTTP, speaking MCP 2026-07-28 with the
//! `io.modelcontextprotocol/tasks` extension (SEP-2663): create, poll `tasks/get`, answer an input
//! request with `tasks/update`, cancel with `tasks/cancel`.
//!
//! Everything goes through rmcp's typed client API; there is no hand-written HTTP:
//! - `ClientServiceExt::serve_with_lifecycle` with `ClientLifecycleMode::Discover` sends
//!   `server/discover` (no `initialize`) and from then on stamps every request's `_meta` with
//!   `io.modelcontextprotocol/protocolVersion` and `io.modelcontextprotocol/clientCapabilities`;
//!   its transport sets the `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers.
//! - `call_tool` for a synchronous tool; `call_tool_once` for task tools, which returns
//!   `CallToolResponse::Task(CreateTaskResult)` (rmcp's high-level `call_tool` does not drive the
//!   task lifecycle: it fails with `UnexpectedResponse` on a task); then the typed `get_task`,
//!   `update_task` and `cancel_task`. rmcp does not answer a task's `inputRequests` itself (its
//!   `ClientHandler` only serves non-task MRTR rounds), so the test builds the `ElicitResult`.

mod common;
mod rmcp_scenario;

use common::ServerProcess;
use rmcp_scenario::LIMIT;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_sdk_rmcp_3_client_runs_tasks_over_http() {
    let server = ServerProcess::start(&["--demo", "--store", "memory:"]);
    tokio::time::timeout(LIMIT, rmcp_scenario::scenario(&server.url))
        .await
        .expect("the rmcp scenario finished in time");
}

/// The same endpoint also serves the 2025-11-25 wire: rmcp's legacy `initialize` handshake, and
/// without the tasks extension `slow_compute` answers inline (rmcp 3.x has no 2025-11-25 task API).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_sdk_rmcp_3_client_on_the_2025_11_25_wire() {
    let server = ServerProcess::start(&["--demo", "--store", "memory:"]);
    tokio::time::timeout(LIMIT, rmcp_scenario::legacy_scenario(&server.url))
        .await
        .expect("the legacy rmcp scenario finished in time");
}
