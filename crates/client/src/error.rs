//! What can go wrong talking to a server, with enough context to say what to do about it.

use serde_json::Value;

/// An error of the client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server could not be reached, or the connection broke before the answer arrived.
    #[error("{context}: {source}")]
    Connection {
        /// What the client was doing.
        context: String,
        /// The transport's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
        /// Whether the request certainly never reached the server (nothing was sent).
        not_sent: bool,
    },
    /// The server answered with an HTTP status that is not a JSON-RPC answer.
    #[error("{context}: HTTP {status}{}", body_note(.body))]
    Http {
        /// What the client was doing.
        context: String,
        /// The HTTP status.
        status: u16,
        /// The start of the response body, if any.
        body: String,
    },
    /// The server answered the request with a JSON-RPC error.
    #[error("{method}: {message} (JSON-RPC error {code})")]
    Rpc {
        /// The method of the request.
        method: String,
        /// The error code.
        code: i64,
        /// The error message.
        message: String,
        /// The error's data, if any.
        data: Option<Value>,
    },
    /// The server's answer did not have the shape the protocol gives it.
    #[error("{0}")]
    Protocol(String),
    /// The server does not offer what was asked (a method, tasks, a tool).
    #[error("{0}")]
    Unsupported(String),
    /// A stdio server could not be started or stopped answering.
    #[error("{context}: {source}")]
    Io {
        /// What the client was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The caller cancelled the request (the server was told with `notifications/cancelled`).
    #[error("{0}: cancelled")]
    Cancelled(String),
    /// The stdio server exited: its exit status and the last lines it wrote on standard error.
    #[error("the stdio server {command} exited ({status}){}", stderr_note(.stderr_tail))]
    Exited {
        /// The server's command line.
        command: String,
        /// How it ended ("exit status: 1", "signal: 9 (SIGKILL)").
        status: String,
        /// Its last lines on standard error (empty when not kept or none).
        stderr_tail: String,
    },
    /// A task reference could not be read.
    #[error("not a task reference: {0}")]
    BadReference(String),
}

fn body_note(body: &str) -> String {
    if body.trim().is_empty() {
        String::new()
    } else {
        format!(": {}", body.trim())
    }
}

fn stderr_note(tail: &str) -> String {
    if tail.trim().is_empty() {
        String::new()
    } else {
        format!("; its last words on stderr:\n{}", tail.trim_end())
    }
}

impl ClientError {
    /// Whether a retry may succeed where this failed: the connection broke, a gateway gave up, or
    /// the server is stopping (-32009: a restart or deploy; it comes back, or another replica
    /// answers).
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Connection { .. } => true,
            ClientError::Http { status, .. } => matches!(status, 502..=504),
            ClientError::Rpc { code, .. } => {
                *code == mcp_tasks_protocol::error_codes::SERVER_STOPPING
            }
            _ => false,
        }
    }

    /// The JSON-RPC error code, when the server answered with an error.
    pub fn rpc_code(&self) -> Option<i64> {
        match self {
            ClientError::Rpc { code, .. } => Some(*code),
            _ => None,
        }
    }

    pub(crate) fn protocol(msg: impl Into<String>) -> Self {
        ClientError::Protocol(msg.into())
    }
}

/// The client's result type.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopping_server_and_a_broken_connection_are_worth_a_retry_and_a_refusal_is_not() {
        let rpc = |code| ClientError::Rpc {
            method: "tasks/get".into(),
            code,
            message: "m".into(),
            data: None,
        };
        assert!(rpc(mcp_tasks_protocol::error_codes::SERVER_STOPPING).is_transient());
        assert!(!rpc(-32602).is_transient());
        let http = |status| ClientError::Http {
            context: "c".into(),
            status,
            body: String::new(),
        };
        assert!(http(502).is_transient());
        assert!(!http(400).is_transient());
    }
}
