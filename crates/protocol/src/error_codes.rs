//! JSON-RPC and MCP error codes, with the spec revision that defines each.

/// Invalid JSON was received (JSON-RPC 2.0).
pub const PARSE_ERROR: i64 = -32700;
/// The JSON sent is not a valid request object (JSON-RPC 2.0).
pub const INVALID_REQUEST: i64 = -32600;
/// The method does not exist or is not available (JSON-RPC 2.0). MCP 2025-11-25 also uses it for a tool
/// called in a task mode its `execution.taskSupport` does not allow.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid method parameters (JSON-RPC 2.0). MCP uses it for unknown tools, unknown or expired task ids,
/// bad cursors and cancelling a terminal task.
pub const INVALID_PARAMS: i64 = -32602;
/// Internal error (JSON-RPC 2.0).
pub const INTERNAL_ERROR: i64 = -32603;
/// mcp-tasks: the caller already has as many unfinished tasks as its limit allows
/// (implementation-defined range).
pub const TOO_MANY_TASKS: i64 = -32004;
/// mcp-tasks: a task-management call was refused by the caller's rate limit; `data.retryAfterMs` says
/// when to try again (implementation-defined range).
pub const RATE_LIMITED: i64 = -32005;
/// mcp-tasks: no new session: the caller (an anonymous caller's client address, or all anonymous
/// callers together) already holds as many live sessions as allowed (implementation-defined range).
pub const TOO_MANY_SESSIONS: i64 = -32006;
/// mcp-tasks: the caller's credentials do not grant the scopes the tool requires; `data` names
/// `requiredScopes` and `missingScopes`. Over HTTP it comes with 403 (401 for a caller without
/// credentials) and a `WWW-Authenticate` challenge naming the scopes to ask for
/// (implementation-defined range).
pub const INSUFFICIENT_SCOPE: i64 = -32007;
/// mcp-tasks: no new stream: the caller (an anonymous caller's client address) already holds as
/// many streams open (GET streams, `subscriptions/listen`, blocking `tasks/result`) as allowed;
/// `data` names `open` and `limit`. Over HTTP it comes with 429 (implementation-defined range).
pub const TOO_MANY_STREAMS: i64 = -32008;
/// mcp-tasks: the server is stopping (draining for a restart or deploy) and takes no new calls;
/// over HTTP it comes with 503 and `Retry-After` (implementation-defined range).
pub const SERVER_STOPPING: i64 = -32009;
/// MCP 2026-07-28: an HTTP header disagrees with the body (`Mcp-Method`, `Mcp-Name`, protocol version).
pub const HEADER_MISMATCH: i64 = -32020;
/// MCP 2026-07-28: the request needs a client capability the client did not declare.
pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
/// MCP 2026-07-28: the request's protocol version is not supported.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
