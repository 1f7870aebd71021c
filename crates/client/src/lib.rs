//! An MCP client for long-running tool calls, over Streamable HTTP or stdio: it finds the server's wire (2026-07-28 with the
//! tasks extension, 2025-11-25 tasks, or an older revision with plain calls), calls tools as tasks
//! where the server offers them, follows a task to its end (polling at the server's interval,
//! taking what the server pushes), answers the server's questions through an [`InputHandler`],
//! cancels, and resumes a task from a [`TaskRef`] in a new process.
//!
//! ```no_run
//! # async fn demo() -> mcp_tasks_client::Result<()> {
//! use mcp_tasks_client::{Called, CallOptions, Client, ConnectOptions, Endpoint, HttpEndpoint};
//!
//! let endpoint = Endpoint::Http(HttpEndpoint {
//!     url: "http://127.0.0.1:8080/mcp".into(),
//!     headers: vec![],
//!     bearer: None,
//! });
//! let client = Client::connect(&endpoint, ConnectOptions::default()).await?;
//! let args = serde_json::json!({"seconds": 3});
//! match client.call_tool("slow_compute", args, &CallOptions::default(), &|_| {}).await? {
//!     Called::Task(task) => println!("{:?}", task.wait(&|e| eprintln!("{e:?}")).await?),
//!     Called::Done(outcome) => println!("{outcome:?}"),
//! }
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod client;
mod error;
mod handle;
mod hosted;
mod http;
mod input;
mod stdio;
mod task;
mod transport;
mod wire;

pub use client::{Client, ConnectOptions, ToolInfo, IDEMPOTENCY_CAPABILITY};
pub use error::{ClientError, Result};
pub use handle::{CallOptions, Called, Event, TaskHandle, Webhook};
pub use http::HttpEndpoint;
pub use input::{InputHandler, NoInput};
pub use stdio::StdioCommand;
pub use task::{TaskOutcome, TaskRef, TaskState, TaskStatus};
pub use transport::{Endpoint, STDIO_PREFIX};
pub use wire::Wire;
