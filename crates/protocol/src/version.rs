//! Protocol revisions this implementation knows.

/// MCP 2025-11-25: the first revision with tasks (SEP-1686).
pub const V2025_11_25: &str = "2025-11-25";
/// MCP 2025-06-18: served without tasks.
pub const V2025_06_18: &str = "2025-06-18";
/// MCP 2025-03-26: served without tasks; the version assumed when an HTTP client sends no version header.
pub const V2025_03_26: &str = "2025-03-26";

/// MCP 2026-07-28: stateless (no `initialize`); tasks are the extension `io.modelcontextprotocol/tasks`.
pub const V2026_07_28: &str = "2026-07-28";

/// Stateless revisions served per request (declared in each request's `_meta`).
pub const STATELESS_VERSIONS: &[&str] = &[V2026_07_28];

/// Every revision this server speaks, newest first (for `server/discover`).
pub const ALL_VERSIONS: &[&str] = &[V2026_07_28, V2025_11_25, V2025_06_18, V2025_03_26];

/// Revisions negotiated through `initialize`, newest first.
pub const SESSION_VERSIONS: &[&str] = &[V2025_11_25, V2025_06_18, V2025_03_26];

/// Whether `version` is a revision with 2025-11-25 style tasks.
pub fn has_session_tasks(version: &str) -> bool {
    version == V2025_11_25
}

/// Picks the revision to answer an `initialize` with: the requested one when supported, else the newest.
pub fn negotiate(requested: &str) -> &'static str {
    SESSION_VERSIONS
        .iter()
        .copied()
        .find(|v| *v == requested)
        .unwrap_or(V2025_11_25)
}
