//! The era classifier: the facts a message body carries (`body_facts`) and the header version
//! decide its wire form exactly as `wire::era::classify` documents, for any body and header.
//!
//! Input: the header version (up to the first newline), then the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_tasks_protocol::jsonrpc::{parse_message, Message};
use mcp_tasks_protocol::version::STATELESS_VERSIONS;
use mcp_tasks_server::wire::era::{body_facts, classify, Era, Facts};

fuzz_target!(|data: &[u8]| {
    let (header, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&data[..0], data),
    };
    let header = std::str::from_utf8(header).ok().filter(|h| !h.is_empty());
    let Ok(message) = parse_message(body) else {
        return;
    };
    let (method, params) = match &message {
        Message::Request(r) => (Some(r.method.as_str()), r.params.as_ref()),
        Message::Notification(n) => (Some(n.method.as_str()), n.params.as_ref()),
        _ => (None, None),
    };
    for session_async_tools in [None, Some(false), Some(true)] {
        let facts = Facts {
            header_version: header,
            session_async_tools,
            ..body_facts(&message)
        };
        assert_eq!(facts.method, method);
        let meta_version = params
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
            .is_some();
        assert_eq!(facts.meta_version, meta_version);
        let expected = if meta_version || header.is_some_and(|h| STATELESS_VERSIONS.contains(&h)) {
            Era::Stateless
        } else {
            let operation = params
                .and_then(|p| p.get("operation"))
                .is_some_and(|o| !o.is_null());
            match method {
                Some(m) if m.starts_with("tools/async/") => Era::AsyncTools,
                Some("tools/call") if operation => Era::AsyncTools,
                Some("tools/list") if session_async_tools == Some(true) => Era::AsyncTools,
                _ => Era::Session,
            }
        };
        assert_eq!(classify(&facts), expected, "{facts:?}");
    }
});
