//! `[[upstreams]]` as written in the config file.

use mcp_tasks_protocol::mcp_2025::TaskSupport;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// An upstream MCP server whose tools the gateway serves as task tools.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamSpec {
    /// A name for logs and errors.
    pub name: String,
    /// A stdio server to start: the program and its arguments.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Working directory of the stdio server.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Extra environment variables of the stdio server.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// A Streamable HTTP server's endpoint.
    #[serde(default)]
    pub url: Option<String>,
    /// Extra HTTP headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// A bearer token for the HTTP server.
    #[serde(default)]
    pub bearer: Option<String>,
    /// Only these tools (default: all).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Not these tools.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Served as `PREFIX_tool` (default: the upstream's names).
    #[serde(default)]
    pub prefix: Option<String>,
    /// Longest run of a call, for every tool of this upstream (default 3600 s).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// How long the upstream has, at start-up, to answer `initialize` and list its tools (default
    /// 20 s): a program that prints something else on its stdout is refused then, not waited for.
    #[serde(default)]
    pub connect_timeout_secs: Option<u64>,
    /// Run interrupted calls again after a restart, for every tool (only for tools safe to repeat).
    #[serde(default)]
    pub retry_on_restart: Option<bool>,
    /// Seconds a client that did not ask for a task waits for a result before the call continues
    /// as a task, for every tool of this upstream.
    #[serde(default)]
    pub sync_budget_secs: Option<u64>,
    /// Scopes a caller must hold to call any tool of this upstream (an OAuth access token's, or an
    /// API key's `scopes`); the tools are listed to everyone.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Per-tool settings, by the upstream's tool name.
    #[serde(default)]
    pub tool_overrides: BTreeMap<String, ToolOverride>,
}

/// Settings of one upstream tool.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolOverride {
    /// `forbidden`, `optional` (default) or `required`.
    #[serde(default)]
    pub task_support: Option<TaskSupport>,
    /// Longest run of a call.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Run interrupted calls again after a restart.
    #[serde(default)]
    pub retry_on_restart: Option<bool>,
    /// Seconds a client that did not ask for a task waits before the call continues as a task.
    #[serde(default)]
    pub sync_budget_secs: Option<u64>,
    /// Scopes a caller must hold to call this tool, in place of the upstream's `scopes`.
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
}
