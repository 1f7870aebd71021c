//! Wire types for the Model Context Protocol as mcp-tasks speaks it.
//!
//! This crate knows the wire and nothing else: JSON-RPC 2.0 framing ([`jsonrpc`]), the error codes of
//! both spec eras ([`error_codes`]), protocol version strings and `_meta` keys ([`version`], [`meta`]),
//! and the task-related shapes of MCP 2025-11-25 ([`mcp_2025`]). It does no I/O and depends on serde only,
//! so any MCP implementation can use it.
//!
//! ```
//! use mcp_tasks_protocol::jsonrpc::{Message, parse_message};
//!
//! let msg = parse_message(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).unwrap();
//! assert!(matches!(msg, Message::Request(ref r) if r.method == "ping"));
//! ```
#![deny(missing_docs)]

pub mod error_codes;
pub mod jsonrpc;
pub mod mcp_2025;
pub mod meta;
pub mod strict_json;
pub mod version;
