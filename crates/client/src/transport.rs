//! The two ways to reach a server, behind one interface: Streamable HTTP and stdio.

use serde_json::Value;

use crate::error::Result;
use crate::http::{Exchange, HttpEndpoint, HttpTransport, Route};
use crate::stdio::{StdioCommand, StdioTransport};

/// Where a server is.
#[derive(Clone, Debug)]
pub enum Endpoint {
    /// A Streamable HTTP endpoint.
    Http(HttpEndpoint),
    /// A command that serves MCP on its stdin/stdout.
    Stdio(StdioCommand),
}

/// The prefix a stdio endpoint's reference carries in place of a URL.
pub const STDIO_PREFIX: &str = "stdio:";

impl Endpoint {
    /// The endpoint a reference's `url` names: `stdio:COMMAND` or an HTTP URL.
    pub fn from_reference(
        url: &str,
        headers: Vec<(String, String)>,
        bearer: Option<String>,
    ) -> Result<Endpoint> {
        match url.strip_prefix(STDIO_PREFIX) {
            Some(cmd) => Ok(Endpoint::Stdio(StdioCommand::parse(cmd)?)),
            None => Ok(Endpoint::Http(HttpEndpoint {
                url: url.to_string(),
                headers,
                bearer,
            })),
        }
    }
}

pub(crate) enum Transport {
    Http(HttpTransport),
    Stdio(StdioTransport),
}

/// Methods whose notifications say that one of the server's lists changed.
pub(crate) fn is_list_change(method: &str) -> bool {
    matches!(
        method,
        "notifications/tools/list_changed"
            | "notifications/prompts/list_changed"
            | "notifications/resources/list_changed"
    )
}

impl Transport {
    /// A stdio server's stderr is relayed at debug while `on` (and a moment after): see
    /// `StdioTransport::quiet_stderr`. Nothing to do over HTTP.
    pub(crate) fn quiet_stderr(&self, on: bool) {
        if let Transport::Stdio(s) = self {
            s.quiet_stderr(on);
        }
    }

    /// Opens the transport; a stdio server's list changes go to `changes`.
    pub(crate) fn open(
        endpoint: &Endpoint,
        changes: &tokio::sync::broadcast::Sender<String>,
    ) -> Result<Transport> {
        Ok(match endpoint {
            Endpoint::Http(h) => Transport::Http(HttpTransport::new(h)?),
            Endpoint::Stdio(c) => Transport::Stdio(StdioTransport::spawn(c, changes.clone())?),
        })
    }

    /// The endpoint as a reference names it.
    pub(crate) fn url(&self) -> String {
        match self {
            Transport::Http(h) => h.url().to_string(),
            Transport::Stdio(s) => format!("{STDIO_PREFIX}{}", s.command().line()),
        }
    }

    pub(crate) async fn post(
        &self,
        body: &Value,
        route: Option<Route<'_>>,
        context: &str,
    ) -> Result<Exchange> {
        match self {
            Transport::Http(h) => h.post(body, route, context).await,
            Transport::Stdio(s) => s.send(body, context).await,
        }
    }

    pub(crate) fn set_session(&self, id: Option<String>) {
        if let Transport::Http(h) = self {
            h.set_session(id);
        }
    }

    pub(crate) fn session(&self) -> Option<String> {
        match self {
            Transport::Http(h) => h.session(),
            Transport::Stdio(_) => None,
        }
    }

    pub(crate) fn set_version(&self, v: Option<String>) {
        if let Transport::Http(h) = self {
            h.set_version(v);
        }
    }

    /// Resolves when the server is gone for good: a stdio server exited. Never for HTTP, whose
    /// requests each connect anew.
    pub(crate) async fn closed(&self) -> crate::error::ClientError {
        match self {
            Transport::Http(_) => std::future::pending().await,
            Transport::Stdio(s) => s.closed().await,
        }
    }

    pub(crate) async fn end_session(&self) {
        if let Transport::Http(h) = self {
            h.end_session().await;
        }
    }
}
