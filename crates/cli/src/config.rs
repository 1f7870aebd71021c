//! The TOML config file of `mcp-tasks serve`.

use anyhow::{bail, Context, Result};
use mcp_tasks_server::tools::command::CommandToolSpec;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The whole file. Every section and key is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// `[server]`.
    #[serde(default)]
    pub server: ServerSection,
    /// `[tasks]`.
    #[serde(default)]
    pub tasks: TasksSection,
    /// `[[tools]]`: command tools.
    #[serde(default)]
    pub tools: Vec<CommandToolSpec>,
    /// `[[upstreams]]`: MCP servers whose tools are served as task tools (the gateway).
    #[serde(default)]
    pub upstreams: Vec<mcp_tasks_server::gateway::UpstreamSpec>,
    /// `[admin]`: where metrics and health are served.
    #[serde(default)]
    pub admin: AdminSection,
    /// `[telemetry]`: where traces go.
    #[serde(default)]
    pub telemetry: TelemetrySection,
    /// `[auth]`: API keys and limits.
    #[serde(default)]
    pub auth: AuthSection,
    /// `[webhooks]`: where task events may be sent, and the operator's subscriptions.
    #[serde(default)]
    pub webhooks: WebhooksSection,
    /// `[events]`: MCP Events (SEP-3415): subscriptions to task events by webhook, and polls.
    #[serde(default)]
    pub events: EventsSection,
    /// `[signals]`: signed URLs third parties send a task's signals to.
    #[serde(default)]
    pub signals: SignalsSection,
}

/// `[signals]`: the signed URLs a handler hands a third party (`TaskContext::signal_url`), which
/// POSTs a task's signal to `{public_url}/signals/{token}` without credentials. Off unless both
/// are set.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalsSection {
    /// This server's address as the senders reach it, e.g. `https://tasks.example.com`.
    pub public_url: Option<String>,
    /// The key that signs the URLs, at least 32 characters, the same on every replica (or
    /// `MCP_TASKS_SIGNAL_URL_SECRET`, which wins).
    pub url_secret: Option<String>,
}

impl SignalsSection {
    /// The settings, checked; `None` when signed URLs are off.
    pub fn to_settings(&self) -> Result<Option<mcp_tasks_server::SignalUrlSettings>> {
        let secret = std::env::var("MCP_TASKS_SIGNAL_URL_SECRET")
            .ok()
            .filter(|s| !s.is_empty())
            .or_else(|| self.url_secret.clone());
        match (&self.public_url, secret) {
            (None, None) => Ok(None),
            (Some(_), None) => bail!(
                "[signals] public_url is set but url_secret is not (or MCP_TASKS_SIGNAL_URL_SECRET): \
                 the URLs need a key to be signed with"
            ),
            (None, Some(_)) => bail!(
                "[signals] url_secret is set but public_url is not: the URLs need the address \
                 senders reach this server at"
            ),
            (Some(url), Some(secret)) => {
                if !(url.starts_with("https://") || url.starts_with("http://")) {
                    bail!("[signals] public_url must be an http(s) URL, got {url:?}");
                }
                if secret.chars().count() < 32 {
                    bail!("[signals] url_secret must be at least 32 characters");
                }
                Ok(Some(mcp_tasks_server::SignalUrlSettings {
                    public_url: url.clone(),
                    secret: secret.into_bytes(),
                }))
            }
        }
    }
}

/// `[events]`: MCP Events (`io.modelcontextprotocol/events`): clients subscribe to task events
/// by webhook (ChatGPT, the AI SDK) or poll them.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsSection {
    /// Let subscriptions name `http://127.0.0.1` and `http://[::1]` (tests and local
    /// development only; default false). Other hosts: `[webhooks] allowed_hosts`.
    pub allow_insecure_loopback: Option<bool>,
    /// Live subscriptions one principal may hold (default 100).
    pub max_subscriptions_per_principal: Option<usize>,
    /// Lifetime of a subscription whose client suggests none, in seconds (default 86400).
    pub default_ttl_secs: Option<u64>,
    /// Shortest lifetime granted, in seconds (default 300).
    pub min_ttl_secs: Option<u64>,
    /// Longest lifetime granted, also to a client that asks for none, in seconds (default
    /// 604800, 7 days).
    pub max_ttl_secs: Option<u64>,
    /// How long an endpoint's verification holds for its principal, in seconds (default 86400).
    pub verification_ttl_secs: Option<u64>,
    /// Seconds one POST (verification or delivery) may take (default 10).
    pub timeout_secs: Option<u64>,
    /// Hours the event log keeps an event for polls and replays (default 24).
    pub keep_hours: Option<u64>,
    /// Seconds a refreshed subscription's replaced secret signs beside the new one (default
    /// 3600).
    pub rotation_grace_secs: Option<u64>,
    /// Error numbers: `sketch` (-32011…-32015, what ChatGPT uses; the default) or `sep-3415`
    /// (-32023…-32027).
    pub error_codes: Option<String>,
    /// Send control envelopes to a subscription's endpoint: `terminated` when it ends on the
    /// server's side (an operator ended it; its type is no longer declared), `gap` when one of
    /// its deliveries was given up. Default false: ChatGPT takes none; the AI SDK's receiver
    /// does.
    pub control_envelopes: Option<bool>,
    /// The wait after a `gap` envelope was not taken, doubling up to 10 min (default 30).
    pub gap_retry_secs: Option<u64>,
    /// `[[events.types]]`: the server's own event types, which its tools publish (a command
    /// tool with `::event NAME {json}`). (Not `[[events]]`: TOML cannot make `events` both this
    /// table and an array.)
    #[serde(default)]
    pub types: Vec<EventTypeEntry>,
}

/// `[[events.types]]`: an event type the server's tools publish.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventTypeEntry {
    /// Its name, e.g. `build.finished`.
    pub name: String,
    /// What it means (shown in `events/list`).
    pub description: Option<String>,
    /// The subscription arguments: a JSON Schema object whose properties name payload fields a
    /// subscription may filter on (exact match). Default: no arguments.
    pub input_schema: Option<serde_json::Value>,
    /// The payload's JSON Schema (checked at every publish). Default: any object.
    pub payload_schema: Option<serde_json::Value>,
    /// Who sees its events: `owner` (the principal whose task published it; the default) or
    /// `callers` (every principal that may call `tool`: its scopes apply).
    pub audience: Option<String>,
    /// The tool whose callers see it (`audience = "callers"`).
    pub tool: Option<String>,
}

impl EventTypeEntry {
    fn to_type(&self) -> Result<mcp_tasks_server::events::EventType> {
        use mcp_tasks_server::events::{Audience, EventType};
        let audience = match (self.audience.as_deref(), &self.tool) {
            (None | Some("owner"), _) => Audience::Owner,
            (Some("callers"), Some(tool)) => Audience::Callers(tool.clone()),
            (Some("callers"), None) => bail!(
                "[[events.types]] {:?}: audience = \"callers\" needs the tool whose callers see it (tool = \"…\")",
                self.name
            ),
            (Some(other), _) => bail!(
                "[[events.types]] {:?}: audience {other:?} is not \"owner\" or \"callers\"",
                self.name
            ),
        };
        Ok(EventType {
            name: self.name.clone(),
            description: self.description.clone().unwrap_or_default(),
            input_schema: self
                .input_schema
                .clone()
                .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}})),
            payload_schema: self
                .payload_schema
                .clone()
                .unwrap_or_else(|| serde_json::json!({"type": "object"})),
            audience,
        })
    }
}

impl EventsSection {
    /// The server's Events settings, checked; `webhooks` gives the hosts allowed beyond the
    /// public internet.
    pub fn to_settings(
        &self,
        webhooks: &mcp_tasks_server::webhooks::WebhookSettings,
    ) -> Result<mcp_tasks_server::events::EventSettings> {
        use mcp_tasks_server::events::{ErrorNumbering, EventSettings};
        use std::time::Duration;
        let d = EventSettings::default();
        let secs = |v: Option<u64>, key: &str, default: Duration| -> Result<Duration> {
            match v {
                Some(0) => bail!("[events] {key} must be at least 1"),
                Some(s) => Ok(Duration::from_secs(s)),
                None => Ok(default),
            }
        };
        let settings = EventSettings {
            allow_insecure_loopback: self.allow_insecure_loopback.unwrap_or(false),
            allowed_hosts: webhooks.allowed_hosts.clone(),
            max_subscriptions_per_principal: match self.max_subscriptions_per_principal {
                Some(0) => bail!("[events] max_subscriptions_per_principal must be at least 1"),
                Some(n) => n,
                None => d.max_subscriptions_per_principal,
            },
            default_ttl: secs(self.default_ttl_secs, "default_ttl_secs", d.default_ttl)?,
            min_ttl: secs(self.min_ttl_secs, "min_ttl_secs", d.min_ttl)?,
            max_ttl: secs(self.max_ttl_secs, "max_ttl_secs", d.max_ttl)?,
            verification_ttl: secs(
                self.verification_ttl_secs,
                "verification_ttl_secs",
                d.verification_ttl,
            )?,
            timeout: secs(self.timeout_secs, "timeout_secs", d.timeout)?,
            keep: secs(
                self.keep_hours.map(|h| h.saturating_mul(3600)),
                "keep_hours",
                d.keep,
            )?,
            rotation_grace: secs(
                self.rotation_grace_secs,
                "rotation_grace_secs",
                d.rotation_grace,
            )?,
            error_numbering: match self.error_codes.as_deref() {
                None => ErrorNumbering::Sketch,
                Some(s) => ErrorNumbering::parse(s).ok_or_else(|| {
                    anyhow::anyhow!("[events] error_codes: {s:?} is not \"sketch\" or \"sep-3415\"")
                })?,
            },
            types: self
                .types
                .iter()
                .map(EventTypeEntry::to_type)
                .collect::<Result<_>>()?,
            control_envelopes: self.control_envelopes.unwrap_or(d.control_envelopes),
            gap_retry: secs(self.gap_retry_secs, "gap_retry_secs", d.gap_retry)?,
        };
        if settings.min_ttl > settings.max_ttl {
            bail!("[events] min_ttl_secs is longer than max_ttl_secs");
        }
        settings.check().map_err(anyhow::Error::msg)?;
        Ok(settings)
    }
}

/// `[webhooks]`: signed webhooks on task events (Standard Webhooks).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhooksSection {
    /// Hosts (`host` or `host:port`) webhooks may reach by plain http and at private or loopback
    /// addresses; every other URL must be https to a public address.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Hours an event is tried before it is given up (default 24).
    pub max_age_hours: Option<u64>,
    /// Seconds one delivery attempt may take (default 10).
    pub timeout_secs: Option<u64>,
    /// Days settled deliveries and their attempts are kept for operators (default 7).
    pub keep_days: Option<u64>,
    /// Least seconds between two `task.progress` events of one task's run, for the targets that
    /// ask for them (default 5; the latest progress is sent at the end of each interval).
    pub progress_interval_secs: Option<u64>,
    /// Unfinished tasks with a webhook its client registered that one principal may have
    /// (default 1000); a registration past it is refused.
    pub max_registrations_per_principal: Option<u64>,
    /// `[[webhooks.subscriptions]]`: the operator's own endpoints.
    #[serde(default)]
    pub subscriptions: Vec<SubscriptionEntry>,
    /// Keys (`whkey_…`, from `mcp-tasks key seal`) that encrypt the secrets clients register
    /// before they are stored: the first seals, every one listed opens (rotation). Replaced by
    /// `MCP_TASKS_WEBHOOK_KEYS` (comma-separated) when that is set. Default: none, secrets are
    /// stored as given.
    #[serde(default)]
    pub secret_keys: Vec<String>,
}

/// The environment variable that gives `[webhooks] secret_keys` (comma-separated), so the keys
/// can stay out of the config file.
pub const WEBHOOK_KEYS_ENV: &str = "MCP_TASKS_WEBHOOK_KEYS";

/// `[[webhooks.subscriptions]]`: events of matching tasks go to one endpoint.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionEntry {
    /// A name for it (shown with its deliveries); default: its URL.
    pub name: Option<String>,
    /// The endpoint.
    pub url: String,
    /// The signing secret, `whsec_` and base64 (make one with `mcp-tasks key webhook`).
    pub secret: String,
    /// Only tasks of these principals (default: every one).
    #[serde(default)]
    pub principals: Vec<String>,
    /// Only tasks of these tools (default: every one).
    #[serde(default)]
    pub tools: Vec<String>,
    /// Only these events (default: every status event: task.input_required, task.completed,
    /// task.failed, task.cancelled); task.progress is sent only when listed.
    #[serde(default)]
    pub events: Vec<String>,
}

impl WebhooksSection {
    /// The least time between two `task.progress` events of a run (`progress_interval_secs`).
    pub fn progress_interval(&self) -> Result<Option<std::time::Duration>> {
        match self.progress_interval_secs {
            Some(0) => bail!("[webhooks] progress_interval_secs must be at least 1"),
            Some(s) => Ok(Some(std::time::Duration::from_secs(s))),
            None => Ok(None),
        }
    }

    /// The server's webhook settings, checked.
    pub fn to_settings(&self) -> Result<mcp_tasks_server::webhooks::WebhookSettings> {
        use mcp_tasks_engine::webhook::WebhookEvent;
        use mcp_tasks_server::webhooks::{AllowedHosts, Subscription, WebhookSettings};
        let defaults = WebhookSettings::default();
        let hours = match self.max_age_hours {
            Some(0) => bail!("[webhooks] max_age_hours must be at least 1"),
            Some(h) => std::time::Duration::from_secs(h.saturating_mul(3600)),
            None => defaults.max_age,
        };
        let mut subscriptions = Vec::new();
        for (i, s) in self.subscriptions.iter().enumerate() {
            let name = s.name.clone().unwrap_or_else(|| s.url.clone());
            let mut events = Vec::new();
            for e in &s.events {
                let Some(event) = WebhookEvent::parse(e) else {
                    bail!(
                        "[[webhooks.subscriptions]] #{} ({name}): unknown event {e:?}; the events are {}",
                        i + 1,
                        WebhookEvent::ALL.map(WebhookEvent::as_str).join(", ")
                    );
                };
                events.push(event);
            }
            subscriptions.push(Subscription {
                name,
                url: s.url.clone(),
                secret: s.secret.clone(),
                principals: s.principals.clone(),
                tools: s.tools.clone(),
                events,
            });
        }
        let key_texts = match std::env::var(WEBHOOK_KEYS_ENV) {
            Ok(v) if !v.trim().is_empty() => v
                .split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(String::from)
                .collect(),
            _ => self.secret_keys.clone(),
        };
        let secret_keys = mcp_tasks_server::webhooks::SecretKeys::parse(&key_texts)
            .map_err(|e| anyhow::anyhow!("[webhooks] secret_keys: {e}"))?;
        let settings = WebhookSettings {
            secret_keys,
            allowed_hosts: AllowedHosts::parse(&self.allowed_hosts).map_err(anyhow::Error::msg)?,
            max_age: hours,
            timeout: match self.timeout_secs {
                Some(0) => bail!("[webhooks] timeout_secs must be at least 1"),
                Some(s) => std::time::Duration::from_secs(s),
                None => defaults.timeout,
            },
            subscriptions,
            keep_settled: self.keep_days.map_or(defaults.keep_settled, |d| {
                std::time::Duration::from_secs(d.saturating_mul(86_400))
            }),
            max_registrations_per_principal: match self.max_registrations_per_principal {
                Some(0) => bail!("[webhooks] max_registrations_per_principal must be at least 1"),
                Some(n) => n,
                None => defaults.max_registrations_per_principal,
            },
        };
        settings.check().map_err(anyhow::Error::msg)?;
        Ok(settings)
    }
}

/// `[auth]`: who may call, and how much.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    /// Serve callers without credentials as the anonymous principal (default: true when neither
    /// keys nor `[auth.oauth]` are configured, false otherwise).
    pub anonymous: Option<bool>,
    /// Unfinished tasks an anonymous client address may have, on each wire (default 100).
    pub anonymous_max_running_tasks: Option<usize>,
    /// Task calls per minute per anonymous client address, on each wire (default: no limit).
    pub anonymous_calls_per_minute: Option<u32>,
    /// Plain (non-task) tool calls an anonymous client address may run at once, on each wire
    /// (default 16).
    pub anonymous_max_plain_calls: Option<usize>,
    /// Streams one anonymous client address may hold open (GET streams, subscriptions/listen,
    /// blocking tasks/result; default 128).
    pub anonymous_max_streams: Option<usize>,
    /// Bytes of arguments one anonymous client address's running tasks may hold (default 64 MiB).
    pub anonymous_max_running_bytes: Option<u64>,
    /// Sessions one anonymous client address may open per minute (default 60).
    pub anonymous_sessions_per_minute: Option<u32>,
    /// Sessions all anonymous callers together may open per minute (default 1200).
    pub anonymous_sessions_per_minute_total: Option<u32>,
    /// Live sessions of one anonymous client address (default 100).
    pub anonymous_max_sessions_per_address: Option<usize>,
    /// Live anonymous sessions in all (default 10000).
    pub anonymous_max_sessions: Option<usize>,
    /// An anonymous session unused this long ends (default 3600; keyed sessions: a day).
    pub anonymous_session_idle_secs: Option<u64>,
    /// `[[auth.keys]]`.
    #[serde(default)]
    pub keys: Vec<KeyEntry>,
    /// `[auth.oauth]`: access tokens of an OAuth authorization server, beside the keys.
    pub oauth: Option<OAuthSection>,
}

/// `[auth.oauth]`: this server as an OAuth 2.1 resource server (the MCP authorization spec): it
/// accepts the access tokens (JWTs) of one authorization server, and each token's user is a
/// principal of its own, `ISSUER#SUBJECT`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthSection {
    /// The authorization server's issuer identifier, exactly as its tokens' `iss` says.
    pub issuer: String,
    /// This server's resource identifier: its public URL as clients reach it (e.g.
    /// "https://mcp.example.com/mcp"). Tokens must name it in `aud`.
    pub audience: String,
    /// The issuer's key set (default: the `jwks_uri` of its metadata).
    pub jwks_url: Option<String>,
    /// Signature algorithms accepted (default ["RS256", "ES256"]; never "none" or HMAC).
    pub algorithms: Option<Vec<String>>,
    /// Clock skew allowed on `exp` and `nbf`, seconds (default 60).
    pub leeway_secs: Option<u64>,
    /// The claim naming the user (default "sub").
    pub principal_claim: Option<String>,
    /// The claim listing the token's scopes (default "scope", space-separated; an array claim such
    /// as "scp" works too).
    pub scopes_claim: Option<String>,
    /// The scopes the metadata lists (default: every scope a tool or upstream requires).
    pub scopes_supported: Option<Vec<String>>,
    /// Unfinished tasks each OAuth user may have at once (default 100).
    pub max_running_tasks: Option<usize>,
    /// Task calls per minute of each OAuth user (default: no limit).
    pub calls_per_minute: Option<u32>,
    /// Plain (non-task) tool calls each OAuth user may run at once (default 16).
    pub max_plain_calls: Option<usize>,
    /// Streams each OAuth user may hold open (default 128).
    pub max_streams: Option<usize>,
    /// Bytes of arguments each OAuth user's running tasks may hold (default 64 MiB).
    pub max_running_bytes: Option<u64>,
    /// The scope that makes a token's user an operator (admin API, dashboard, metrics); default
    /// none: OAuth users are never operators.
    pub operator_scope: Option<String>,
}

impl OAuthSection {
    /// The server's OAuth settings, checked.
    pub fn to_config(&self) -> Result<mcp_tasks_server::auth::oauth::OAuthConfig> {
        use mcp_tasks_server::auth::oauth::{parse_algorithm, OAuthConfig};
        use mcp_tasks_server::auth::Limits;
        let url = |what: &str, v: &str| -> Result<()> {
            let u = reqwest::Url::parse(v)
                .with_context(|| format!("[auth.oauth] {what} {v:?} is not a URL"))?;
            if !matches!(u.scheme(), "https" | "http") {
                bail!("[auth.oauth] {what} {v:?} must be an https:// (or http://) URL");
            }
            Ok(())
        };
        url("issuer", &self.issuer)?;
        url("audience", &self.audience)?;
        if let Some(j) = &self.jwks_url {
            url("jwks_url", j)?;
        }
        let mut config = OAuthConfig::new(self.issuer.trim(), self.audience.trim());
        config.jwks_url = self.jwks_url.clone();
        if let Some(names) = &self.algorithms {
            config.algorithms = names
                .iter()
                .map(|n| {
                    parse_algorithm(n).map_err(|e| anyhow::anyhow!("[auth.oauth] algorithms: {e}"))
                })
                .collect::<Result<_>>()?;
        }
        if let Some(secs) = self.leeway_secs {
            config.leeway = std::time::Duration::from_secs(secs);
        }
        for (name, value, slot) in [
            (
                "principal_claim",
                &self.principal_claim,
                &mut config.principal_claim,
            ),
            ("scopes_claim", &self.scopes_claim, &mut config.scopes_claim),
        ] {
            if let Some(v) = value {
                if v.trim().is_empty() {
                    bail!("[auth.oauth] {name} is empty: name a claim of the tokens");
                }
                *slot = v.trim().to_string();
            }
        }
        config.scopes_supported = self.scopes_supported.clone().unwrap_or_default();
        if let Some(scope) = &self.operator_scope {
            if scope.trim().is_empty() || scope.contains(char::is_whitespace) {
                bail!("[auth.oauth] operator_scope {scope:?} must be one scope (no spaces)");
            }
            config.operator_scope = Some(scope.clone());
        }
        let d = Limits::default();
        config.limits = Limits {
            max_running_tasks: self.max_running_tasks.unwrap_or(d.max_running_tasks),
            calls_per_minute: self.calls_per_minute.or(d.calls_per_minute),
            max_plain_calls: self.max_plain_calls.unwrap_or(d.max_plain_calls),
            max_streams: self.max_streams.unwrap_or(d.max_streams),
            max_running_bytes: self.max_running_bytes.unwrap_or(d.max_running_bytes),
        };
        config.check().map_err(anyhow::Error::msg)?;
        Ok(config)
    }
}

/// One `[[auth.keys]]` entry. Make one with `mcp-tasks key new --principal NAME`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    /// The principal the key authenticates.
    pub principal: String,
    /// Lowercase hex SHA-256 of the key (the key itself is never stored).
    pub sha256: String,
    /// Unfinished tasks this principal may have at once (default 100).
    pub max_running_tasks: Option<usize>,
    /// Task calls per minute (default: no limit).
    pub calls_per_minute: Option<u32>,
    /// Plain (non-task) tool calls this principal may run at once (default 16).
    pub max_plain_calls: Option<usize>,
    /// Streams this principal may hold open (GET streams, subscriptions/listen, blocking
    /// tasks/result; default 128).
    pub max_streams: Option<usize>,
    /// Bytes of arguments this principal's running tasks may hold together (default 64 MiB).
    pub max_running_bytes: Option<u64>,
    /// The key also opens the admin API and the dashboard.
    #[serde(default)]
    pub operator: bool,
    /// The scopes the key grants, for tools that require scopes (default: every scope).
    pub scopes: Option<Vec<String>>,
}

impl AuthSection {
    /// The server's auth settings.
    pub fn to_config(&self) -> Result<mcp_tasks_server::auth::AuthConfig> {
        use mcp_tasks_server::auth::{ApiKey, AuthConfig, Limits, SessionBudget};
        let defaults = Limits::default();
        let mut keys = Vec::new();
        for k in &self.keys {
            let hash = k.sha256.trim().to_ascii_lowercase();
            if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                bail!("[[auth.keys]] for `{}`: sha256 must be 64 hex digits (use `mcp-tasks key new`)", k.principal);
            }
            if k.principal.is_empty()
                || k.principal == mcp_tasks_server::ANONYMOUS
                || k.principal == mcp_tasks_server::LOCAL_USER
            {
                bail!(
                    "[[auth.keys]]: principal {:?} is reserved or empty",
                    k.principal
                );
            }
            keys.push(ApiKey {
                principal: k.principal.clone(),
                sha256: hash,
                limits: Limits {
                    max_running_tasks: k.max_running_tasks.unwrap_or(defaults.max_running_tasks),
                    calls_per_minute: k.calls_per_minute.or(defaults.calls_per_minute),
                    max_plain_calls: k.max_plain_calls.unwrap_or(defaults.max_plain_calls),
                    max_streams: k.max_streams.unwrap_or(defaults.max_streams),
                    max_running_bytes: k.max_running_bytes.unwrap_or(defaults.max_running_bytes),
                },
                scopes: k.scopes.clone(),
            });
        }
        let base = AuthConfig::default();
        let operators = self
            .keys
            .iter()
            .filter(|k| k.operator)
            .map(|k| k.sha256.trim().to_ascii_lowercase())
            .collect();
        let oauth = self
            .oauth
            .as_ref()
            .map(OAuthSection::to_config)
            .transpose()?;
        Ok(AuthConfig {
            operators,
            // Open only when nothing at all authenticates callers.
            allow_anonymous: self.anonymous.unwrap_or(keys.is_empty() && oauth.is_none()),
            keys,
            anonymous_limits: Limits {
                max_running_tasks: self
                    .anonymous_max_running_tasks
                    .unwrap_or(defaults.max_running_tasks),
                calls_per_minute: self
                    .anonymous_calls_per_minute
                    .or(defaults.calls_per_minute),
                max_plain_calls: self
                    .anonymous_max_plain_calls
                    .unwrap_or(defaults.max_plain_calls),
                max_streams: self.anonymous_max_streams.unwrap_or(defaults.max_streams),
                max_running_bytes: self
                    .anonymous_max_running_bytes
                    .unwrap_or(defaults.max_running_bytes),
            },
            anonymous_sessions: {
                let d = base.anonymous_sessions;
                let idle = match self.anonymous_session_idle_secs {
                    Some(0) => bail!("[auth] anonymous_session_idle_secs must be at least 1"),
                    Some(secs) => std::time::Duration::from_secs(secs),
                    None => d.idle,
                };
                SessionBudget {
                    per_minute_per_address: at_least_one(
                        self.anonymous_sessions_per_minute,
                        "anonymous_sessions_per_minute",
                        d.per_minute_per_address,
                    )?,
                    per_minute: at_least_one(
                        self.anonymous_sessions_per_minute_total,
                        "anonymous_sessions_per_minute_total",
                        d.per_minute,
                    )?,
                    max_per_address: at_least_one(
                        self.anonymous_max_sessions_per_address,
                        "anonymous_max_sessions_per_address",
                        d.max_per_address,
                    )?,
                    max: at_least_one(
                        self.anonymous_max_sessions,
                        "anonymous_max_sessions",
                        d.max,
                    )?,
                    idle,
                }
            },
            local_limits: base.local_limits,
            oauth,
        })
    }
}

/// An `[auth]` budget of anonymous callers: the configured value, which must be at least 1 (zero
/// would refuse every anonymous session; `anonymous = false` says that plainly), or the default.
fn at_least_one<T: Copy + PartialEq + From<u8>>(
    value: Option<T>,
    name: &str,
    default: T,
) -> Result<T> {
    match value {
        Some(v) if v == T::from(0) => {
            bail!("[auth] {name} must be at least 1 (set `anonymous = false` to serve no anonymous callers)")
        }
        Some(v) => Ok(v),
        None => Ok(default),
    }
}

/// `[server]`: transport settings.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    /// HTTP listen address (default `127.0.0.1:8080`).
    pub listen: Option<String>,
    /// Task store URL: `sqlite://PATH`, `postgres://USER@HOST:PORT/DB` or `memory:`.
    pub store: Option<String>,
    /// Allowed `Origin` values (default `["localhost"]`: localhost, 127.0.0.1 and [::1] on any port).
    pub allowed_origins: Option<Vec<String>>,
    /// Host names the admin API, the dashboard and the metrics answer to, beside IP addresses and
    /// `localhost` (default none; `"*"`: any). Name the host a proxy forwards, e.g.
    /// `["ops.example.com"]`.
    pub allowed_hosts: Option<Vec<String>>,
    /// Largest request body in bytes (default 4 MiB).
    pub max_body_bytes: Option<usize>,
    /// Open HTTP connections at most (default 4096, and never more than the open-file limit allows).
    pub max_connections: Option<usize>,
    /// Seconds for a request's headers, and a new connection's first request (default 10).
    pub header_timeout_secs: Option<u64>,
    /// Seconds for a POST body (default 30).
    pub body_timeout_secs: Option<u64>,
    /// Seconds a connection with nothing in progress may stay silent (default 60). Behind a
    /// balancer, keep its upstream keep-alive shorter (nginx: `keepalive_timeout` in `upstream`).
    pub idle_timeout_secs: Option<u64>,
    /// Seconds between SSE keep-alive comments (default 15).
    pub keep_alive_secs: Option<u64>,
    /// `instructions` sent to clients at initialize.
    pub instructions: Option<String>,
    /// Secret that signs 2026-07-28 `requestState` values (give all replicas the same one; default:
    /// random per process).
    pub request_state_secret: Option<String>,
}

/// `[telemetry]`: OpenTelemetry export.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySection {
    /// A collector's OTLP/HTTP base URL (e.g. "http://127.0.0.1:4318"): spans are exported there
    /// as JSON to `/v1/traces`.
    pub otlp_endpoint: Option<String>,
}

/// `[admin]`: the operator's endpoints (`/metrics`, `/healthz`, `/readyz`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminSection {
    /// Serve them on this address instead of next to `/mcp` (e.g. "127.0.0.1:9090").
    pub listen: Option<String>,
    /// Serve `/metrics` without an operator's credentials, for a scraper (default: true when no
    /// authentication is configured, false otherwise).
    pub metrics_public: Option<bool>,
}

/// `[tasks]`: task retention and execution settings.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TasksSection {
    /// Retention when the client asks for none, seconds (default 3600).
    pub default_ttl_secs: Option<u64>,
    /// Longest retention granted, seconds (default 86400).
    pub max_ttl_secs: Option<u64>,
    /// Suggested poll interval, milliseconds (default 1000).
    pub poll_interval_ms: Option<u64>,
    /// A finished task stays readable at least this long after finishing, seconds (default 300).
    pub finished_grace_secs: Option<u64>,
    /// Seconds a cancelled handler gets to stop before it is dropped (default 10).
    pub cancel_grace_secs: Option<u64>,
    /// Seconds between sweeps of expired tasks (default 30).
    pub sweep_interval_secs: Option<u64>,
    /// Length of the lease a node holds on a task it runs, seconds (default 30, renewed every third
    /// of it). With replicas, a dead replica's tasks are taken over once their leases run out.
    pub lease_secs: Option<u64>,
    /// For clients that do not ask for tasks: seconds a call waits for its result before it
    /// continues as a task the client follows with `task_status` / `task_result` / `task_cancel`
    /// (every tool; `[[tools]]` and `[[upstreams]]` entries can set their own). Off unless set.
    pub sync_budget_secs: Option<u64>,
    /// On SIGTERM / SIGINT: seconds the running tasks get to finish while no new calls are taken
    /// and `/readyz` says 503 (default 12: with the hand-off and the close, a stop takes at most
    /// 26 s, under Kubernetes' 30 s grace). A second signal stops at once.
    pub drain_secs: Option<u64>,
    /// Seconds a handler told to stop for a hand-off gets to save where it is and return
    /// (default 8: more than a command tool's default kill grace, 5 s).
    pub hand_off_grace_secs: Option<u64>,
    /// Most runs a task gets (default 10, at least 1): a task interrupted or handed off this many
    /// times fails with "given up after N attempts" instead of being resumed again.
    pub max_attempts: Option<u32>,
    /// A durable sleep (a Rust handler's `ctx.sleep`, the demo's `pipeline`) longer than this
    /// many seconds suspends its task instead of holding a running slot and a lease for it: the
    /// task stays working ("sleeping until …") and any server runs it again at its wake time
    /// (default 60; 0: every sleep holds its run).
    pub suspend_sleeps_over_secs: Option<u64>,
}

impl ConfigFile {
    /// Reads and checks a config file.
    pub fn load(path: &Path) -> Result<ConfigFile> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config file {}", path.display()))?;
        let cfg: ConfigFile = toml::from_str(&text)
            .with_context(|| format!("invalid config file {}", path.display()))?;
        for t in &cfg.tools {
            if t.command.is_empty() {
                bail!("{}: tool `{}` has an empty command", path.display(), t.name);
            }
        }
        Ok(cfg)
    }
}

/// Where the task database lives when no `--store` is given: `$XDG_DATA_HOME/mcp-tasks/tasks.db`, else
/// `~/.local/share/mcp-tasks/tasks.db`, else `./mcp-tasks.db`.
pub fn default_sqlite_path() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("mcp-tasks").join("tasks.db");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(home).join(".local/share/mcp-tasks/tasks.db");
    }
    PathBuf::from("mcp-tasks.db")
}

/// A parsed `--store` value.
#[derive(Debug, PartialEq)]
pub enum StoreUrl {
    /// `memory:`, or `memory:?max_finished=N`: keep at most N finished tasks (default 50,000).
    Memory {
        /// Finished tasks kept at most; past it the one that finished first goes.
        max_finished: usize,
    },
    /// `sqlite://PATH` (or a bare path).
    Sqlite(PathBuf),
    /// `postgres://…` or `postgresql://…`, as given.
    Postgres(String),
}

impl StoreUrl {
    /// Parses `memory:`, `sqlite://PATH`, `sqlite:PATH`, `postgres://…` or a bare file path.
    pub fn parse(s: &str) -> Result<StoreUrl> {
        if s == "memory:" || s == "memory" {
            return Ok(StoreUrl::Memory {
                max_finished: mcp_tasks_engine::store::memory::DEFAULT_MAX_FINISHED,
            });
        }
        if let Some(query) = s.strip_prefix("memory:?") {
            let n = query
                .strip_prefix("max_finished=")
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| *n > 0)
                .with_context(|| {
                    format!(
                        "unsupported store {s:?}: use memory: or memory:?max_finished=N (N ≥ 1)"
                    )
                })?;
            return Ok(StoreUrl::Memory { max_finished: n });
        }
        if let Some(p) = s
            .strip_prefix("sqlite://")
            .or_else(|| s.strip_prefix("sqlite:"))
        {
            if p.is_empty() {
                bail!("--store sqlite:// needs a file path, e.g. sqlite://./tasks.db");
            }
            return Ok(StoreUrl::Sqlite(PathBuf::from(p)));
        }
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return Ok(StoreUrl::Postgres(s.to_string()));
        }
        if s.contains("://") {
            bail!("unsupported store {s:?}: use sqlite://PATH, postgres://USER@HOST:PORT/DB or memory:");
        }
        Ok(StoreUrl::Sqlite(PathBuf::from(s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_urls_parse() {
        assert_eq!(
            StoreUrl::parse("memory:").unwrap(),
            StoreUrl::Memory {
                max_finished: 50_000
            }
        );
        assert_eq!(
            StoreUrl::parse("memory:?max_finished=10").unwrap(),
            StoreUrl::Memory { max_finished: 10 }
        );
        assert!(StoreUrl::parse("memory:?max_finished=0").is_err());
        assert!(StoreUrl::parse("memory:?size=3").is_err());
        assert_eq!(
            StoreUrl::parse("sqlite:///tmp/x.db").unwrap(),
            StoreUrl::Sqlite("/tmp/x.db".into())
        );
        assert_eq!(
            StoreUrl::parse("sqlite://./x.db").unwrap(),
            StoreUrl::Sqlite("./x.db".into())
        );
        assert_eq!(
            StoreUrl::parse("postgres://u@h:5432/db").unwrap(),
            StoreUrl::Postgres("postgres://u@h:5432/db".into())
        );
        assert!(StoreUrl::parse("mysql://h/db").is_err());
    }

    /// The keys the config accepts in the table a TOML snippet opens: serde's error for an unknown
    /// key lists them ("unknown field `zz`, expected one of `a`, `b`"), so the list follows the
    /// structs without a copy of their fields.
    fn accepted_keys(table: &str) -> Vec<String> {
        let doc = format!("{table}\nzz_not_a_key = 1\n");
        let err = match toml::from_str::<ConfigFile>(&doc) {
            Ok(_) => panic!("{table}: an unknown key was accepted"),
            Err(e) => e.to_string(),
        };
        let list = err
            .split_once("expected one of ")
            .or_else(|| err.split_once("expected "))
            .unwrap_or_else(|| panic!("{table}: no list of keys in: {err}"))
            .1;
        list.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn every_accepted_config_key_is_documented() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let docs: String = [
            "README.md",
            "examples/mcp-tasks.toml",
            "examples/gateway-everything.toml",
        ]
        .iter()
        .map(|f| std::fs::read_to_string(root.join(f)).unwrap())
        .collect();
        let tables = [
            "",
            "[server]",
            "[tasks]",
            "[admin]",
            "[telemetry]",
            "[auth]",
            "[auth.oauth]",
            "[[auth.keys]]",
            "[[tools]]",
            "[[upstreams]]",
            "[[upstreams]]\nname = \"u\"\ncommand = [\"x\"]\n[upstreams.tool_overrides.t]",
            "[webhooks]",
            "[[webhooks.subscriptions]]",
            "[events]",
            "[[events.types]]",
        ];
        let mut missing = Vec::new();
        for table in tables {
            let keys = accepted_keys(table);
            assert!(!keys.is_empty(), "{table}: {keys:?}");
            for key in keys {
                let shown = docs.contains(&format!("`{key}`"))
                    || docs.contains(&format!("{key} ="))
                    || docs.contains(&format!("`{key} ="))
                    || docs.contains(&format!("[{key}]"))
                    || docs.contains(&format!("[[{key}]]"))
                    || docs.contains(&format!(".{key}`"))
                    || docs.contains(&format!(".{key}]"))
                    || docs.contains(&format!("{key}`"));
                if !shown {
                    missing.push(format!("{} {key}", table.lines().next().unwrap_or("(top)")));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "config keys the README and the example configs do not mention: {missing:?}"
        );
    }

    #[test]
    fn example_config_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/mcp-tasks.toml");
        let cfg = ConfigFile::load(&path).unwrap();
        assert!(!cfg.tools.is_empty());
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/gateway-everything.toml");
        let cfg = ConfigFile::load(&path).unwrap();
        assert_eq!(cfg.upstreams[0].sync_budget_secs, Some(20));
    }

    #[test]
    fn the_oauth_example_reads_as_documented() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/oauth-keycloak.toml");
        let cfg = ConfigFile::load(&path).unwrap();
        let auth = cfg.auth.to_config().unwrap();
        assert!(
            !auth.allow_anonymous,
            "tokens configured: no anonymous callers"
        );
        let o = auth.oauth.unwrap();
        assert_eq!(o.issuer, "https://sso.example.com/realms/engineering");
        assert_eq!(o.audience, "https://mcp.example.com/mcp");
        assert_eq!(o.jwks_url, None);
        assert_eq!(o.limits.calls_per_minute, Some(600));
        assert_eq!(auth.keys[0].scopes, None);
        assert_eq!(auth.keys[1].scopes, Some(vec![]));
        assert_eq!(
            auth.operators,
            [auth.keys[0].sha256.clone()],
            "the ops key's hash"
        );
        assert_eq!(o.operator_scope.as_deref(), Some("tasks:admin"));
        assert_eq!(o.limits.max_streams, 128);
        assert_eq!(
            cfg.server.allowed_hosts,
            Some(vec!["mcp.example.com".into()])
        );
        assert!(oauth("operator_scope = \"two scopes\"")
            .unwrap_err()
            .to_string()
            .contains("one scope"));
        let deploy = cfg.tools[0].clone().into_tool();
        assert_eq!(deploy.scopes, ["tasks:deploy"]);
    }

    fn oauth(extra: &str) -> Result<mcp_tasks_server::auth::AuthConfig> {
        let cfg: ConfigFile = toml::from_str(&format!(
            "[auth.oauth]\nissuer = \"https://idp.example.com\"\naudience = \"https://h/mcp\"\n{extra}"
        ))?;
        cfg.auth.to_config()
    }

    #[test]
    fn oauth_settings_have_defaults_and_bad_ones_are_refused_with_the_reason() {
        let o = oauth("").unwrap().oauth.unwrap();
        use mcp_tasks_server::auth::oauth::Algorithm;
        assert_eq!(o.algorithms, [Algorithm::RS256, Algorithm::ES256]);
        assert_eq!(o.leeway, std::time::Duration::from_secs(60));
        assert_eq!(
            (o.principal_claim.as_str(), o.scopes_claim.as_str()),
            ("sub", "scope")
        );
        assert_eq!(o.limits, mcp_tasks_server::auth::Limits::default());
        let o = oauth("algorithms = [\"PS256\", \"EdDSA\"]\nscopes_claim = \"scp\"\nleeway_secs = 5\nmax_running_tasks = 3")
            .unwrap()
            .oauth
            .unwrap();
        assert_eq!(o.algorithms, [Algorithm::PS256, Algorithm::EdDSA]);
        assert_eq!(o.scopes_claim, "scp");
        assert_eq!(o.leeway, std::time::Duration::from_secs(5));
        assert_eq!(o.limits.max_running_tasks, 3);
        let err = |extra: &str| format!("{:#}", oauth(extra).unwrap_err());
        assert!(err("algorithms = [\"none\"]").contains("never accepted"));
        assert!(err("algorithms = [\"HS256\"]").contains("HMAC"));
        assert!(err("algorithms = []").contains("algorithms is empty"));
        assert!(err("principal_claim = \" \"").contains("principal_claim is empty"));
        assert!(err("jwks_url = \"keys.json\"").contains("jwks_url \"keys.json\" is not a URL"));
        assert!(err("unknown = 1").contains("unknown field"));
        let cfg: ConfigFile =
            toml::from_str("[auth.oauth]\nissuer = \"idp\"\naudience = \"https://h/mcp\"").unwrap();
        assert!(format!("{:#}", cfg.auth.to_config().unwrap_err())
            .contains("issuer \"idp\" is not a URL"));
        // Anonymous callers stay possible when asked for.
        assert!(oauth("").unwrap().allow_anonymous.eq(&false));
        let cfg: ConfigFile = toml::from_str(
            "[auth]\nanonymous = true\n[auth.oauth]\nissuer = \"https://i\"\naudience = \"https://h/mcp\"",
        )
        .unwrap();
        assert!(cfg.auth.to_config().unwrap().allow_anonymous);
    }

    #[test]
    fn sync_budgets_are_read_in_every_place_they_can_be_set() {
        let cfg: ConfigFile = toml::from_str(
            r#"
[tasks]
sync_budget_secs = 30

[[tools]]
name = "build"
command = ["make"]
sync_budget_secs = 5

[[upstreams]]
name = "up"
url = "http://127.0.0.1:9/mcp"
sync_budget_secs = 10

[upstreams.tool_overrides.slow]
sync_budget_secs = 2
"#,
        )
        .unwrap();
        assert_eq!(cfg.tasks.sync_budget_secs, Some(30));
        let tool = cfg.tools[0].clone().into_tool();
        assert_eq!(tool.sync_budget, Some(std::time::Duration::from_secs(5)));
        assert_eq!(cfg.upstreams[0].sync_budget_secs, Some(10));
        assert_eq!(
            cfg.upstreams[0].tool_overrides["slow"].sync_budget_secs,
            Some(2)
        );
    }
}
