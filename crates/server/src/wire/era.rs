//! The one place that decides which wire form a message belongs to. Transports report facts (headers,
//! the message's `_meta`, the session); [`classify`] decides, once per message, and nothing else
//! second-guesses it.

use mcp_tasks_protocol::version;

pub use crate::core::Era;

/// What a transport knows about one inbound message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Facts<'a> {
    /// The method of a request or notification; `None` for a response.
    pub method: Option<&'a str>,
    /// Whether `params._meta` carries a protocol version (of any value: a bad one is the stateless
    /// wire's error to report).
    pub meta_version: bool,
    /// The `MCP-Protocol-Version` HTTP header, if any.
    pub header_version: Option<&'a str>,
    /// The session the message arrived in, if any: whether it opted into Asynchronous Tool Execution.
    pub session_async_tools: Option<bool>,
    /// Whether a `tools/call` carries `params.operation`.
    pub has_operation: bool,
}

/// The wire form of a message:
/// 1. a protocol version in `_meta`, or a stateless version in the header → [`Era::Stateless`];
/// 2. `tools/async/*`, or a `tools/call` with `operation` → [`Era::AsyncTools`] (which tells a client
///    that did not opt in how to), as is `tools/list` in a session that opted in (it shows
///    `invocationMode`);
/// 3. everything else → [`Era::Session`].
pub fn classify(f: &Facts<'_>) -> Era {
    if f.meta_version
        || f.header_version
            .is_some_and(|v| version::STATELESS_VERSIONS.contains(&v))
    {
        return Era::Stateless;
    }
    match f.method {
        Some(m) if m.starts_with("tools/async/") => Era::AsyncTools,
        Some("tools/call") if f.has_operation => Era::AsyncTools,
        Some("tools/list") if f.session_async_tools == Some(true) => Era::AsyncTools,
        _ => Era::Session,
    }
}

/// The facts a message body itself carries: its method, whether its `_meta` names a protocol version,
/// and whether it is a `tools/call` with `operation`.
pub fn body_facts(msg: &mcp_tasks_protocol::jsonrpc::Message) -> Facts<'_> {
    use mcp_tasks_protocol::jsonrpc::Message;
    let (method, params) = match msg {
        Message::Request(r) => (Some(r.method.as_str()), r.params.as_ref()),
        Message::Notification(n) => (Some(n.method.as_str()), n.params.as_ref()),
        _ => (None, None),
    };
    let meta_version = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(mcp_tasks_protocol::meta::PROTOCOL_VERSION))
        .is_some();
    let has_operation = method == Some("tools/call")
        && params
            .and_then(|p| p.get("operation"))
            .is_some_and(|o| !o.is_null());
    Facts {
        method,
        meta_version,
        has_operation,
        ..Facts::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(method: &str) -> Facts<'_> {
        Facts {
            method: Some(method),
            ..Facts::default()
        }
    }

    #[test]
    fn a_protocol_version_in_meta_is_the_stateless_wire_whatever_else_is_said() {
        let f = Facts {
            meta_version: true,
            header_version: Some("2025-11-25"),
            session_async_tools: Some(true),
            has_operation: true,
            ..facts("tools/call")
        };
        assert_eq!(classify(&f), Era::Stateless);
    }

    #[test]
    fn a_stateless_version_header_is_the_stateless_wire() {
        let f = Facts {
            header_version: Some("2026-07-28"),
            ..facts("tools/list")
        };
        assert_eq!(classify(&f), Era::Stateless);
    }

    #[test]
    fn a_session_version_header_is_the_session_wire() {
        for v in ["2025-11-25", "2025-06-18", "2025-03-26", "1999-01-01"] {
            let f = Facts {
                header_version: Some(v),
                ..facts("tools/call")
            };
            assert_eq!(classify(&f), Era::Session, "{v}");
        }
    }

    #[test]
    fn no_version_anywhere_is_the_session_wire() {
        assert_eq!(classify(&facts("initialize")), Era::Session);
        assert_eq!(classify(&facts("tasks/get")), Era::Session);
        assert_eq!(classify(&Facts::default()), Era::Session, "a response");
    }

    #[test]
    fn async_methods_and_calls_with_an_operation_are_async_tool_execution() {
        assert_eq!(classify(&facts("tools/async/status")), Era::AsyncTools);
        assert_eq!(classify(&facts("tools/async/result")), Era::AsyncTools);
        let op = Facts {
            has_operation: true,
            ..facts("tools/call")
        };
        assert_eq!(classify(&op), Era::AsyncTools);
        assert_eq!(classify(&facts("tools/call")), Era::Session);
    }

    #[test]
    fn tools_list_shows_invocation_modes_only_to_sessions_that_opted_in() {
        let opted = Facts {
            session_async_tools: Some(true),
            ..facts("tools/list")
        };
        assert_eq!(classify(&opted), Era::AsyncTools);
        let not = Facts {
            session_async_tools: Some(false),
            ..facts("tools/list")
        };
        assert_eq!(classify(&not), Era::Session);
        assert_eq!(classify(&facts("tools/list")), Era::Session);
    }

    #[test]
    fn body_facts_reads_meta_and_operation() {
        use mcp_tasks_protocol::jsonrpc::parse_message;
        let m = parse_message(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","operation":{"token":"t"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#).unwrap();
        let f = body_facts(&m);
        assert!(f.meta_version && f.has_operation);
        assert_eq!(f.method, Some("tools/call"));
        let m = parse_message(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","operation":null}}"#).unwrap();
        assert!(!body_facts(&m).has_operation);
        let m = parse_message(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#).unwrap();
        assert_eq!(body_facts(&m), Facts::default());
    }
}
