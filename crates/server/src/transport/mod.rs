//! Transports: Streamable HTTP and stdio, and the registry of open client streams. A transport reports
//! facts about each message (headers, session, caller) and writes replies; it interprets no method
//! beyond what the transport itself needs (`initialize`, which opens a session).

pub mod connections;
mod headers;
pub mod http;
pub mod stdio;
pub(crate) mod strict;
