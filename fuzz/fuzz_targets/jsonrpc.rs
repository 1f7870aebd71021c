//! The JSON-RPC parser: any bytes give a message or an exact error, never a panic; a message that
//! parses renders to JSON that parses back to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_tasks_protocol::jsonrpc::{parse_message, Message};

fuzz_target!(|data: &[u8]| {
    let Ok(message) = parse_message(data) else {
        return;
    };
    let rendered = message.to_json();
    let again: Message = parse_message(rendered.as_bytes())
        .unwrap_or_else(|e| panic!("our own rendering does not parse: {rendered}: {e:?}"));
    assert_eq!(
        again, message,
        "the message changed on the way round: {rendered}"
    );
});
