//! Webhooks on task events, signed by the Standard Webhooks scheme: a client registers one on a
//! task-augmented `tools/call` (`_meta["io.github.mcp-tasks/webhook"]`, every wire form), an
//! operator subscribes in the config (`[[webhooks.subscriptions]]`). Either becomes a
//! [`WebhookTarget`] kept with the task; the store writes each event to its outbox in the same step
//! as the status change ([`mcp_tasks_engine::webhook`]); [`delivery`] sends them.

pub mod address;
pub mod body;
pub mod delivery;
pub mod seal;
pub mod sign;

use mcp_tasks_engine::webhook::{WebhookEvent, WebhookTarget};
use serde_json::{json, Map, Value};
use std::time::Duration;

pub use address::AllowedHosts;
pub use seal::SecretKeys;

/// The `_meta` key of a registration on `tools/call`, and of what the create result says back.
pub use mcp_tasks_protocol::meta::WEBHOOK as META_KEY;

/// An operator's subscription: events of matching tasks go to one endpoint.
#[derive(Clone, PartialEq, Eq)]
pub struct Subscription {
    /// Its name (shown with its deliveries).
    pub name: String,
    /// The endpoint.
    pub url: String,
    /// The signing secret (`whsec_…`).
    pub secret: String,
    /// Tasks of these principals only (empty: every principal).
    pub principals: Vec<String>,
    /// Tasks of these tools only (empty: every tool).
    pub tools: Vec<String>,
    /// These events only (empty: every event).
    pub events: Vec<WebhookEvent>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("secret", &"<redacted>")
            .field("principals", &self.principals)
            .field("tools", &self.tools)
            .field("events", &self.events)
            .finish()
    }
}

impl Subscription {
    fn matches(&self, owner: &str, tool: &str) -> bool {
        (self.principals.is_empty() || self.principals.iter().any(|p| p == owner))
            && (self.tools.is_empty() || self.tools.iter().any(|t| t == tool))
    }
}

/// How webhooks are sent (`[webhooks]` in the config).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookSettings {
    /// Hosts that may be plain http and private or loopback.
    pub allowed_hosts: AllowedHosts,
    /// How long an event is tried before it is given up (default 24 h).
    pub max_age: Duration,
    /// How long one attempt may take (default 10 s).
    pub timeout: Duration,
    /// The operator's subscriptions.
    pub subscriptions: Vec<Subscription>,
    /// How long settled deliveries (and their attempts) are kept for operators (default 7 days).
    pub keep_settled: Duration,
    /// Unfinished tasks with a client-registered webhook one principal may have (default 1000):
    /// each is an endpoint the server will call, so a principal cannot make it call without bound.
    /// Checked at registration, so calls at the same moment may pass it by their number.
    pub max_registrations_per_principal: u64,
    /// The keys the secrets clients register are sealed with before they are stored (none: stored
    /// as given). See [`seal`].
    pub secret_keys: SecretKeys,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        WebhookSettings {
            allowed_hosts: AllowedHosts::default(),
            max_age: Duration::from_secs(24 * 3600),
            timeout: Duration::from_secs(10),
            subscriptions: Vec::new(),
            keep_settled: Duration::from_secs(7 * 24 * 3600),
            max_registrations_per_principal: 1000,
            secret_keys: SecretKeys::default(),
        }
    }
}

impl WebhookSettings {
    /// Checks the subscriptions: each URL as a registration's would be (without a lookup: the
    /// names may resolve only where the server runs), each secret a `whsec_` secret.
    pub fn check(&self) -> Result<(), String> {
        for s in &self.subscriptions {
            address::check_url(&s.url, &self.allowed_hosts)
                .map_err(|e| format!("[[webhooks.subscriptions]] {:?}: {e}", s.name))?;
            sign::key_of(&s.secret)
                .map_err(|e| format!("[[webhooks.subscriptions]] {:?}: {e}", s.name))?;
        }
        Ok(())
    }

    /// Where delivery `entry` goes and the secret that signs it. A client's target: as stored
    /// (the secret opened if sealed). An operator's subscription (whose targets keep no secret):
    /// the subscription as configured now, found by name, so that a changed URL or secret applies
    /// to events still pending, and one removed from the config sends nothing more.
    pub fn endpoint_of(
        &self,
        entry: &mcp_tasks_engine::webhook::OutboxEntry,
    ) -> Result<(String, String), Unsigned> {
        if let Some(name) = &entry.subscription {
            return self
                .subscriptions
                .iter()
                .find(|s| s.name == *name)
                .map(|s| (s.url.clone(), s.secret.clone()))
                .ok_or_else(|| {
                    Unsigned::Gone(format!(
                        "subscription {name:?} is no longer in [[webhooks.subscriptions]]: its \
                         events are not sent"
                    ))
                });
        }
        if entry.secret.is_empty() {
            return Err(Unsigned::Gone("the event's target has no secret".into()));
        }
        let secret = self
            .secret_keys
            .open(&entry.secret)
            .map_err(Unsigned::NoKey)?;
        Ok((entry.url.clone(), secret))
    }
}

/// Why a delivery cannot be signed now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unsigned {
    /// Never: its subscription was removed, or it has no secret.
    Gone(String),
    /// Not with the keys configured now (a key missing or not yet rolled out): tried again.
    NoKey(String),
}

/// What a registration makes: the task's targets, and what the create result says back under
/// [`META_KEY`] (the URL and events; the secret only when the server made it).
#[derive(Debug, Default)]
pub(crate) struct TaskWebhooks {
    pub(crate) targets: Vec<WebhookTarget>,
    pub(crate) reply: Option<Value>,
}

/// The targets of a new task of `owner` running `tool`: the client's registration (`_meta` of
/// its call, checked here, its host looked up) and the operator's matching subscriptions. An
/// invalid registration is the caller's error, with the reason.
pub(crate) async fn register(
    settings: &WebhookSettings,
    owner: &str,
    tool: &str,
    registration: Option<&Value>,
) -> Result<TaskWebhooks, String> {
    let mut out = TaskWebhooks::default();
    if let Some(reg) = registration {
        let (target, reply) = client_target(settings, reg).await?;
        out.targets.push(target);
        out.reply = Some(reply);
    }
    out.targets.extend(
        settings
            .subscriptions
            .iter()
            .filter(|s| s.matches(owner, tool))
            .map(|s| WebhookTarget {
                url: s.url.clone(),
                // Kept in the config only: the delivery signs with the subscription's secret
                // (`WebhookSettings::signing_secret`), not a copy in every task.
                secret: String::new(),
                events: s.events.clone(),
                subscription: Some(s.name.clone()),
            }),
    );
    Ok(out)
}

async fn client_target(
    settings: &WebhookSettings,
    reg: &Value,
) -> Result<(WebhookTarget, Value), String> {
    let what = format!("_meta[\"{META_KEY}\"]");
    let obj = reg
        .as_object()
        .ok_or_else(|| format!("{what} must be an object {{\"url\", \"events\"?, \"secret\"?}}"))?;
    if let Some(k) = obj
        .keys()
        .find(|k| !["url", "events", "secret"].contains(&k.as_str()))
    {
        return Err(format!(
            "{what}: unknown key {k:?} (the keys are url, events, secret)"
        ));
    }
    let url = obj
        .get("url")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{what}.url must be the endpoint's URL (a string)"))?;
    let checked = address::check_url(url, &settings.allowed_hosts).map_err(|e| e.to_string())?;
    address::check_resolved(&checked)
        .await
        .map_err(|e| e.to_string())?;
    let events = match obj.get("events") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => {
            let mut events = Vec::new();
            for e in list {
                let name = e.as_str().unwrap_or_default();
                let event = WebhookEvent::parse(name).ok_or_else(|| {
                    format!(
                        "{what}.events: unknown event {e}; the events are {}",
                        WebhookEvent::ALL.map(WebhookEvent::as_str).join(", ")
                    )
                })?;
                if !events.contains(&event) {
                    events.push(event);
                }
            }
            events
        }
        Some(_) => return Err(format!("{what}.events must be a list of event names")),
    };
    let (secret, made) = match obj.get("secret") {
        None | Some(Value::Null) => (sign::new_secret(), true),
        Some(Value::String(s)) => {
            sign::key_of(s).map_err(|e| format!("{what}.secret: {e}"))?;
            (s.clone(), false)
        }
        Some(_) => return Err(format!("{what}.secret must be a whsec_ string")),
    };
    let mut reply = Map::new();
    reply.insert("url".into(), json!(url));
    reply.insert(
        "events".into(),
        json!(if events.is_empty() {
            WebhookEvent::DEFAULT.to_vec()
        } else {
            events.clone()
        }),
    );
    if made {
        // Shown this once: it is never logged, listed or shown again.
        reply.insert("secret".into(), json!(secret));
    }
    Ok((
        WebhookTarget {
            url: url.to_string(),
            secret: settings.secret_keys.seal(&secret),
            events,
            subscription: None,
        },
        Value::Object(reply),
    ))
}

/// What the server declares under `experimental` so clients can tell webhooks are offered.
pub(crate) fn capability() -> Value {
    json!({"events": WebhookEvent::ALL.map(WebhookEvent::as_str), "signature": "standard-webhooks-v1"})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local() -> WebhookSettings {
        WebhookSettings {
            allowed_hosts: AllowedHosts::parse(&["127.0.0.1".into()]).unwrap(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_registration_gets_a_made_secret_back_once_and_a_given_one_kept() {
        let r = register(
            &local(),
            "alice",
            "slow",
            Some(&json!({"url": "http://127.0.0.1:9/h", "events": ["task.completed"]})),
        )
        .await
        .unwrap();
        let reply = r.reply.unwrap();
        let secret = reply["secret"].as_str().unwrap();
        assert!(sign::key_of(secret).is_ok());
        assert_eq!(r.targets[0].secret, secret);
        assert_eq!(reply["events"], json!(["task.completed"]));
        let given = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let r = register(
            &local(),
            "alice",
            "slow",
            Some(&json!({"url": "http://127.0.0.1:9/h", "secret": given})),
        )
        .await
        .unwrap();
        assert_eq!(r.targets[0].secret, given);
        assert!(r.reply.unwrap().get("secret").is_none(), "not echoed");
    }

    #[tokio::test]
    async fn bad_registrations_say_what_is_wrong() {
        for (reg, says) in [
            (json!("http://x"), "must be an object"),
            (json!({"url": 5}), ".url must be"),
            (
                json!({"url": "http://127.0.0.1:9/h", "evnts": []}),
                "unknown key \"evnts\"",
            ),
            (
                json!({"url": "http://127.0.0.1:9/h", "events": ["task.done"]}),
                "unknown event",
            ),
            (
                json!({"url": "http://127.0.0.1:9/h", "secret": "hunter2"}),
                "starts with whsec_",
            ),
            (
                json!({"url": "https://169.254.169.254/"}),
                "169.254.169.254",
            ),
            (
                json!({"url": "https://10.0.0.1/"}),
                "private, loopback or link-local",
            ),
            (json!({"url": "https://localhost:9/"}), "localhost is"),
        ] {
            let e = register(&local(), "a", "t", Some(&reg)).await.unwrap_err();
            assert!(e.contains(says), "{reg}: {e}");
        }
    }

    #[tokio::test]
    async fn operator_subscriptions_match_by_principal_and_tool() {
        let mut s = local();
        s.subscriptions.push(Subscription {
            name: "failures".into(),
            url: "http://127.0.0.1:9/f".into(),
            secret: sign::new_secret(),
            principals: vec!["alice".into()],
            tools: vec![],
            events: vec![WebhookEvent::Failed],
        });
        let r = register(&s, "alice", "any", None).await.unwrap();
        assert_eq!(r.targets.len(), 1);
        assert_eq!(r.targets[0].subscription.as_deref(), Some("failures"));
        assert!(r.reply.is_none());
        assert!(register(&s, "bob", "any", None)
            .await
            .unwrap()
            .targets
            .is_empty());
        assert!(s.check().is_ok());
        s.subscriptions[0].secret = "nope".into();
        assert!(s.check().unwrap_err().contains("\"failures\""));
    }

    #[tokio::test]
    async fn a_delivery_is_signed_as_configured_now_and_a_missing_key_is_not_final() {
        let mut s = local();
        s.secret_keys = SecretKeys::parse(&[seal::new_key()]).unwrap();
        let given = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        s.subscriptions.push(Subscription {
            name: "ops".into(),
            url: "http://127.0.0.1:9/now".into(),
            secret: given.into(),
            principals: vec![],
            tools: vec![],
            events: vec![],
        });
        let reg = json!({"url": "http://127.0.0.1:9/client", "secret": given});
        let r = register(&s, "alice", "any", Some(&reg)).await.unwrap();
        let (client, sub) = (&r.targets[0], &r.targets[1]);
        assert!(
            client.secret.starts_with("whsealed.v1."),
            "sealed before it is stored"
        );
        assert_eq!(
            sub.secret, "",
            "a subscription's secret stays in the config"
        );
        let entry = |t: &WebhookTarget| mcp_tasks_engine::webhook::OutboxEntry {
            id: "msg_1".into(),
            task_id: "t".into(),
            target: 0,
            event: WebhookEvent::Completed,
            url: t.url.clone(),
            secret: t.secret.clone(),
            subscription: t.subscription.clone(),
            snapshot: "{}".into(),
            created_at: 0,
        };
        assert_eq!(
            s.endpoint_of(&entry(client)).unwrap(),
            ("http://127.0.0.1:9/client".to_string(), given.to_string())
        );
        // An event written before the subscription moved, with the copy older builds kept: the
        // subscription as it is now.
        let mut old = entry(sub);
        old.url = "http://127.0.0.1:9/before".into();
        old.secret = sign::new_secret();
        assert_eq!(
            s.endpoint_of(&old).unwrap(),
            ("http://127.0.0.1:9/now".to_string(), given.to_string())
        );
        let other_keys = WebhookSettings {
            secret_keys: SecretKeys::parse(&[seal::new_key()]).unwrap(),
            subscriptions: vec![],
            ..local()
        };
        assert!(matches!(
            other_keys.endpoint_of(&entry(client)),
            Err(Unsigned::NoKey(_))
        ));
        assert!(matches!(
            other_keys.endpoint_of(&old),
            Err(Unsigned::Gone(_))
        ));
    }
}
