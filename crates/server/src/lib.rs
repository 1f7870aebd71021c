//! The mcp-tasks MCP server runtime: tools that run as durable tasks, served over Streamable HTTP or
//! stdio on three wire forms (MCP 2025-11-25 tasks, MCP 2026-07-28 with the tasks extension, and
//! Asynchronous Tool Execution), all from one task store.
//!
//! ```no_run
//! use std::sync::Arc;
//! use mcp_tasks_engine::{EngineConfig, store::memory::MemoryStore};
//! use mcp_tasks_server::{Server, ServerConfig, tool::{handler_fn, text_result, Tool}};
//! use mcp_tasks_protocol::mcp_2025::TaskSupport;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let echo = Tool::new("echo", handler_fn(|_ctx, args| async move {
//!     text_result(args.to_string(), false)
//! }))
//! .task_support(TaskSupport::Optional);
//! let server = Server::builder(Arc::new(MemoryStore::new()), EngineConfig::default(), ServerConfig::default())
//!     .tool(echo)?
//!     .build();
//! server.start().await?;
//! mcp_tasks_server::http::serve(server, "127.0.0.1:8080".parse()?).await?;
//! # Ok(()) }
//! ```
//!
//! A message flows top to bottom: a transport ([`http`], [`stdio`]) reports facts, the wire form is
//! classified once, the wire module of that form parses and renders, and the era-neutral core does
//! the work on the engine.
#![deny(missing_docs)]

pub mod admin;
pub mod auth;
pub mod catalog;
pub mod config;
mod core;
#[cfg(feature = "demo")]
pub mod demo;
pub mod events;
pub mod gateway;
mod inbound;
pub mod session;
pub mod tool;
pub mod tools;
mod transport;
pub mod webhooks;
pub mod wire;

pub use auth::{ANONYMOUS, LOCAL_USER};
pub use config::{ServerConfig, SignalUrlSettings};
pub use core::lists::ListKind;
pub use core::{Era, Peer, Reply, Server, ServerBuilder, StopPlan, StopReport};
pub use inbound::Transport;
pub use tool::{Tool, ToolRegistry};
pub use transport::{connections, http, stdio};
