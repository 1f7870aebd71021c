//! Which protocol revision a connection speaks.

use mcp_tasks_protocol::version;

/// The protocol revision of a connection, found by [`crate::Client::connect`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wire {
    /// MCP 2026-07-28: stateless, `_meta` on every request; tasks through the extension
    /// `io.modelcontextprotocol/tasks` when the server offers it.
    V2026,
    /// MCP 2025-11-25: a session from `initialize`; tasks when the server declares `capabilities.tasks`.
    V2025,
    /// An older revision negotiated through `initialize` (no tasks): plain calls only.
    Legacy(String),
}

impl Wire {
    /// The revision's version string.
    pub fn version(&self) -> &str {
        match self {
            Wire::V2026 => version::V2026_07_28,
            Wire::V2025 => version::V2025_11_25,
            Wire::Legacy(v) => v,
        }
    }

    /// The wire of a version string that can carry tasks.
    pub fn from_version(v: &str) -> Option<Wire> {
        match v {
            version::V2026_07_28 => Some(Wire::V2026),
            version::V2025_11_25 => Some(Wire::V2025),
            _ => None,
        }
    }

    /// Whether requests carry the version in `_meta` instead of a session (2026-07-28).
    pub fn is_stateless(&self) -> bool {
        matches!(self, Wire::V2026)
    }
}

impl std::fmt::Display for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.version())
    }
}
