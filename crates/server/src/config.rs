//! Server settings (transport and protocol), separate from the engine's.

use std::time::Duration;

/// Settings of the MCP server. `Default` gives the documented defaults.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// `serverInfo.name`.
    pub name: String,
    /// `serverInfo.version`.
    pub version: String,
    /// `instructions` in the initialize result.
    pub instructions: Option<String>,
    /// Largest accepted HTTP request body, in bytes (default 4 MiB).
    pub max_body_bytes: usize,
    /// Open HTTP connections at most (default 4096; `mcp-tasks serve` lowers it to fit the process's
    /// descriptor limit with
    /// [`fit_connections_to_descriptors`](crate::connections::fit_connections_to_descriptors)).
    pub max_connections: usize,
    /// Time for a request's headers to arrive once they begin, and for a new connection's first
    /// request to begin (default 10 s).
    pub header_timeout: Duration,
    /// Time for a POST body to arrive (default 30 s); 408 after it.
    pub body_timeout: Duration,
    /// Time a connection with no request in progress may send nothing before it is closed (default
    /// 60 s). A balancer's keep-alive to the server should be shorter, so that it ends idle
    /// connections itself and never writes a request to one the server is closing.
    pub idle_timeout: Duration,
    /// `Origin` values accepted on HTTP (exact match; `*` accepts any). Requests without `Origin` are
    /// accepted. Default: localhost origins on any port.
    pub allowed_origins: Vec<String>,
    /// Host names (without port) the operator's routes (admin API, dashboard, metrics) answer
    /// to, beside IP addresses and `localhost`, which always pass; `*` accepts any. A name that is
    /// not listed is refused (403): that is how a DNS-rebinding page, which names its own host,
    /// is kept out. Default: none.
    pub allowed_hosts: Vec<String>,
    /// Whether `/metrics` answers without an operator's credentials; `None` (the default):
    /// public only when no authentication (keys, OAuth) is configured.
    pub metrics_public: Option<bool>,
    /// Interval of SSE keep-alive comments, so idle proxies don't cut long streams (default 15 s).
    pub keep_alive: Duration,
    /// How long a POST waits for its reply before switching to an SSE stream (default 250 ms).
    pub sse_after: Duration,
    /// Tools and tasks per `tools/list` / `tasks/list` page (default 100).
    pub page_size: usize,
    /// API keys, anonymous access and per-principal limits.
    pub auth: crate::auth::AuthConfig,
    /// Secret that signs 2026-07-28 `requestState` values. Give every replica the same one; without it a
    /// random secret is used (states then do not survive a restart).
    pub request_state_secret: Option<String>,
    /// The sync budget of every tool that sets none (see [`Tool::sync_budget`](crate::Tool)); off
    /// when `None`.
    pub sync_budget: Option<Duration>,
    /// Webhooks on task events: allowed hosts, retry age, the operator's subscriptions.
    pub webhooks: crate::webhooks::WebhookSettings,
    /// MCP Events (`[events]`): subscriptions, their deliveries, the types offered.
    pub events: crate::events::EventSettings,
    /// Signed URLs third parties send a task's signals to (`[signals]`); `None`: none are made.
    pub signal_urls: Option<SignalUrlSettings>,
}

/// Where the signed signal URLs point and what signs them (`[signals] public_url`, `url_secret`).
#[derive(Clone)]
pub struct SignalUrlSettings {
    /// This server's address as the senders reach it (`https://tasks.example.com`): the URLs are
    /// `{public_url}/signals/{token}`.
    pub public_url: String,
    /// The key that signs them: the same on every replica, so any of them takes a URL another made.
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for SignalUrlSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignalUrlSettings")
            .field("public_url", &self.public_url)
            .finish_non_exhaustive()
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            name: "mcp-tasks".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            instructions: None,
            max_body_bytes: 4 * 1024 * 1024,
            max_connections: 4096,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            allowed_origins: vec!["localhost".into()],
            allowed_hosts: Vec::new(),
            metrics_public: None,
            keep_alive: Duration::from_secs(15),
            sse_after: Duration::from_millis(250),
            page_size: 100,
            auth: crate::auth::AuthConfig::default(),
            request_state_secret: None,
            sync_budget: None,
            webhooks: crate::webhooks::WebhookSettings::default(),
            events: crate::events::EventSettings::default(),
            signal_urls: None,
        }
    }
}

impl ServerConfig {
    /// Whether an `Origin` header value is allowed. The entry `localhost` stands for
    /// `http(s)://localhost`, `127.0.0.1` and `[::1]` on any port.
    pub fn origin_allowed(&self, origin: &str) -> bool {
        self.allowed_origins.iter().any(|allowed| {
            if allowed == "*" || allowed == origin {
                return true;
            }
            if allowed == "localhost" {
                let rest = origin
                    .strip_prefix("http://")
                    .or_else(|| origin.strip_prefix("https://"));
                if let Some(rest) = rest {
                    let host = if rest.starts_with('[') {
                        rest.split_once(']')
                            .map(|(h, _)| format!("{h}]"))
                            .unwrap_or_default()
                    } else {
                        rest.split(':').next().unwrap_or("").to_string()
                    };
                    return matches!(host.as_str(), "localhost" | "127.0.0.1" | "[::1]");
                }
            }
            false
        })
    }
}

impl ServerConfig {
    /// Whether the operator's routes answer to `host` (lowercase, without its port): an IP
    /// address, `localhost` (or a name under it), or a name in `allowed_hosts`.
    pub fn host_allowed(&self, host: &str) -> bool {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if bare.parse::<std::net::IpAddr>().is_ok()
            || host == "localhost"
            || host.ends_with(".localhost")
        {
            return true;
        }
        self.allowed_hosts
            .iter()
            .any(|a| a == "*" || a.trim().eq_ignore_ascii_case(host))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_localhost_pass_as_hosts_and_other_names_only_when_listed() {
        let mut c = ServerConfig::default();
        for ok in [
            "127.0.0.1",
            "[::1]",
            "10.1.2.3",
            "localhost",
            "app.localhost",
        ] {
            assert!(c.host_allowed(ok), "{ok}");
        }
        for no in ["evil.example", "localhost.evil.example", "127.0.0.1.nip.io"] {
            assert!(!c.host_allowed(no), "{no}");
        }
        c.allowed_hosts = vec!["Ops.Example.com".into()];
        assert!(c.host_allowed("ops.example.com"));
        assert!(!c.host_allowed("evil.example"));
        c.allowed_hosts = vec!["*".into()];
        assert!(c.host_allowed("evil.example"));
    }

    #[test]
    fn localhost_origins_pass_and_others_do_not() {
        let c = ServerConfig::default();
        assert!(c.origin_allowed("http://localhost:3000"));
        assert!(c.origin_allowed("http://127.0.0.1"));
        assert!(c.origin_allowed("http://[::1]:8080"));
        assert!(!c.origin_allowed("http://evil.example"));
        assert!(!c.origin_allowed("http://localhost.evil.example"));
        assert!(!c.origin_allowed("null"));
    }
}
