//! MCP Events, wire-neutral: the types a caller may subscribe to, webhook subscriptions (checked,
//! verified, then stored), unsubscribing, and polls of the log. The wire layer parses the
//! requests into these shapes and renders what comes back.

use mcp_tasks_engine::events::{
    EventPosition, EventQuery, EventSubscription, StoredEvent, SubscriptionPut, SubscriptionStart,
};
use mcp_tasks_engine::store::StoreError;
use mcp_tasks_engine::{now_ms, InputRecord};
use mcp_tasks_protocol::jsonrpc::ErrorObject;
use serde_json::{json, Map, Value};
use std::time::Duration;

use super::{internal, Failure, Peer, Server};
use crate::events::verify;
use crate::events::{subscription_id, ErrorKind, EventSettings, EventType};
use crate::webhooks::{address, sign};

/// An `events/subscribe` request, parsed.
pub(crate) struct SubscribeRequest {
    /// The event type.
    pub(crate) name: String,
    /// The subscription arguments (an object).
    pub(crate) arguments: Map<String, Value>,
    /// `delivery.mode`.
    pub(crate) mode: String,
    /// `delivery.url`.
    pub(crate) url: String,
    /// `delivery.secret`.
    pub(crate) secret: String,
    /// `cursor`: `None` for "from now".
    pub(crate) cursor: Option<String>,
    /// `ttlMs`: `None` absent (the default), `Some(None)` null (no expiry asked).
    pub(crate) ttl_ms: Option<Option<u64>>,
}

/// What a subscribe did.
pub(crate) struct SubscribeOutcome {
    /// The subscription's id.
    pub(crate) id: String,
    /// When it must be refreshed by (Unix ms).
    pub(crate) refresh_before: u64,
    /// Where its deliveries start.
    pub(crate) cursor: String,
    /// Whether events after the cursor given were purged.
    pub(crate) truncated: bool,
    /// On a refresh: how delivery has gone.
    pub(crate) status: Option<EventSubscription>,
}

/// An `events/poll` request (or an `events/stream`'s next read), parsed.
#[derive(Clone)]
pub(crate) struct PollRequest {
    /// The event type.
    pub(crate) name: String,
    /// The arguments (filters).
    pub(crate) arguments: Map<String, Value>,
    /// `cursor`: `None` for "from now".
    pub(crate) cursor: Option<String>,
    /// `maxEvents`.
    pub(crate) max_events: Option<usize>,
    /// The replay floor (Unix ms): events made before it are passed over. From `maxAgeMs`, taken
    /// once when the request came (now − maxAgeMs), and only with a cursor.
    pub(crate) not_before_ms: Option<u64>,
    /// The method asking, for its errors.
    pub(crate) method: &'static str,
}

/// A page of a poll.
pub(crate) struct PollOutcome {
    /// The events, each with its pending input requests (for `task.input_required`).
    pub(crate) events: Vec<(StoredEvent, Vec<InputRecord>)>,
    /// Where the next poll goes on.
    pub(crate) cursor: String,
    /// Whether events after the cursor given were purged.
    pub(crate) truncated: bool,
    /// Whether more follow at once.
    pub(crate) has_more: bool,
}

/// Most events one poll returns.
const MAX_POLL: usize = 100;

impl Server {
    /// An error of the extension's, numbered as configured.
    pub(crate) fn event_error(
        &self,
        kind: ErrorKind,
        message: impl Into<String>,
        data: Value,
    ) -> Failure {
        let code = self.config.events.error_numbering.code(kind);
        ErrorObject::new(code, message).with_data(data).into()
    }

    /// The types offered to `peer`, for `events/list`.
    pub(crate) fn event_types(&self, peer: &Peer) -> Vec<EventType> {
        self.config
            .events
            .all_types()
            .into_iter()
            .filter(|t| self.may_see(peer, t))
            .collect()
    }

    /// The type `name`, if `peer` may see its events: a type of every caller of a tool needs the
    /// tool's scopes.
    fn event_type(&self, peer: &Peer, name: &str) -> Result<EventType, Failure> {
        let ty = self.config.events.find(name).ok_or_else(|| {
            self.event_error(
                ErrorKind::NotFound,
                format!("unknown event type {name:?}: events/list says which there are"),
                json!({"kind": "event", "name": name}),
            )
        })?;
        if !self.may_see(peer, &ty) {
            return Err(self.event_error(
                ErrorKind::Forbidden,
                format!("the events of {name:?} are for the callers of its tool, and this caller lacks the tool's scopes"),
                json!({"reason": "insufficient_scope"}),
            ));
        }
        Ok(ty)
    }

    /// Whether `peer` may see the events of `ty`.
    pub(crate) fn may_see(&self, peer: &Peer, ty: &EventType) -> bool {
        match &ty.audience {
            crate::events::Audience::Owner => true,
            crate::events::Audience::Callers(tool) => self
                .tools
                .get(tool)
                .is_some_and(|t| peer.principal.missing_scopes(&t.tool.scopes).is_empty()),
        }
    }

    /// Subscribes `peer` by webhook: checks the request, verifies the endpoint unless `peer`
    /// verified it lately, then stores (or refreshes) the subscription.
    pub(crate) async fn subscribe_events(
        &self,
        peer: &Peer,
        req: SubscribeRequest,
    ) -> Result<SubscribeOutcome, Failure> {
        let settings = &self.config.events;
        if peer.is_anonymous() {
            return Err(self.event_error(
                ErrorKind::Forbidden,
                "events/subscribe needs an authenticated caller: webhook subscriptions belong to a principal (anonymous callers can use events/poll)",
                json!({"reason": "unauthenticated"}),
            ));
        }
        let ty = self.event_type(peer, &req.name)?;
        if req.mode != "webhook" {
            return Err(self.event_error(
                ErrorKind::Unsupported,
                format!(
                    "events/subscribe delivers by webhook only, not {:?}: use \"webhook\", or events/stream (push) or events/poll without a subscription",
                    req.mode
                ),
                json!({"feature": "deliveryMode", "value": req.mode}),
            ));
        }
        let filter = filter_of(&ty, &req.arguments, "events/subscribe")?;
        // The secret before the URL: a URL's check may look its host up.
        let key = sign::key_of(&req.secret).map_err(|e| {
            Failure::from(ErrorObject::invalid_params(format!(
                "events/subscribe: delivery.secret: {e}"
            )))
        })?;
        check_url(&req.url, settings).await?;
        let start = match &req.cursor {
            None => None,
            Some(c) => Some(EventPosition::parse(c).ok_or_else(|| {
                Failure::from(ErrorObject::invalid_params(format!(
                    "events/subscribe: cursor {c:?} is not one this server handed out"
                )))
            })?),
        };
        let now = now_ms();
        let ttl = granted_ttl(settings, req.ttl_ms);
        let arguments = Value::Object(req.arguments.clone());
        let id = subscription_id(peer.name(), &req.url, &req.name, &arguments);
        let store = self.engine.store();
        let existing = store.get_subscription(&id).await.map_err(internal)?;
        // The endpoint's verification, once per principal and URL for a while.
        let verified = store
            .verification(peer.name(), &req.url)
            .await
            .map_err(internal)?
            .is_some_and(|until| until > now);
        if !verified {
            let client = verify::client(settings.timeout, settings.hosts()).map_err(internal)?;
            if let Err(f) = verify::challenge(&client, &req.url, &key, &id).await {
                tracing::info!(target: "mcp_tasks::audit", principal = %peer.name(), subscription = %id, reason = f.as_str(), "event endpoint verification failed");
                return Err(self.event_error(
                    ErrorKind::CallbackEndpoint,
                    format!("the webhook endpoint did not pass verification ({}): it must answer the signed verification POST with 2xx and {{\"challenge\": …}}", f.as_str()),
                    json!({"reason": f.as_str()}),
                ));
            }
            let until = now.saturating_add(millis(settings.verification_ttl));
            store
                .put_verification(peer.name(), &req.url, until)
                .await
                .map_err(internal)?;
        }
        let sealed = self.config.webhooks.secret_keys.seal(&req.secret);
        let live = existing.as_ref().filter(|s| s.is_live(now));
        // A rotated secret signs beside the new one for a while; an unchanged one changes nothing.
        let (previous_secret, previous_until) = match live {
            Some(old) => {
                let same = self
                    .config
                    .webhooks
                    .secret_keys
                    .open(&old.secret)
                    .ok()
                    .as_deref()
                    == Some(req.secret.as_str());
                if same {
                    (old.previous_secret.clone(), old.previous_until)
                } else {
                    (
                        Some(old.secret.clone()),
                        Some(now.saturating_add(millis(settings.rotation_grace))),
                    )
                }
            }
            None => (None, None),
        };
        let sub = EventSubscription {
            id: id.clone(),
            principal: peer.name().to_string(),
            name: req.name.clone(),
            arguments: crate::events::canonical(&arguments).to_string(),
            task_id: filter.task_id,
            tool: filter.tool,
            filter: filter.fields,
            url: req.url.clone(),
            secret: sealed,
            previous_secret,
            previous_until,
            created_at: now,
            refreshed_at: now,
            expires_at: Some(now.saturating_add(millis(ttl))),
            from: EventPosition::START,
            last_delivery_at: None,
            last_error: None,
            failed_since: None,
        };
        // A live subscription's cursor moves nothing (its deliveries go on); a new one, or one
        // that lapsed, starts from the cursor given, else now.
        // A subscription to one task's event starts before it: a task that ended between the
        // reply that named it and this subscribe still sends its event.
        let start = match (live, start) {
            (Some(_), _) => SubscriptionStart::Kept,
            (None, Some(p)) => SubscriptionStart::After(p),
            (None, None) if sub.task_id.is_some() => SubscriptionStart::After(EventPosition::START),
            (None, None) => SubscriptionStart::Now,
        };
        let put = store
            .put_subscription(&sub, start, settings.max_subscriptions_per_principal)
            .await
            .map_err(|e| match e {
                StoreError::TooManySubscriptions { live, max } => self.event_error(
                    ErrorKind::ResourceExhausted,
                    format!("too many event subscriptions: {live} live, the limit is {max}; unsubscribe some first"),
                    json!({"limit": "subscriptions", "max": max}),
                ),
                e => internal(e),
            })?;
        tracing::info!(target: "mcp_tasks::audit", principal = %peer.name(), subscription = %id, name = %req.name, refreshed = put.put == SubscriptionPut::Refreshed, "event subscription stored");
        if let Some(sender) = self.event_sender.get() {
            sender.subscribed();
        }
        let status = match put.put {
            SubscriptionPut::Refreshed => store.get_subscription(&id).await.map_err(internal)?,
            SubscriptionPut::New => None,
        };
        Ok(SubscribeOutcome {
            id,
            refresh_before: sub.expires_at.unwrap_or(now),
            cursor: put.from.cursor(),
            truncated: put.truncated,
            status,
        })
    }

    /// Ends `peer`'s subscription to `name` with `arguments` at `url`, if there is one.
    pub(crate) async fn unsubscribe_events(
        &self,
        peer: &Peer,
        name: &str,
        arguments: &Map<String, Value>,
        url: &str,
    ) -> Result<(), Failure> {
        if peer.is_anonymous() {
            return Err(self.event_error(
                ErrorKind::Forbidden,
                "events/unsubscribe needs an authenticated caller",
                json!({"reason": "unauthenticated"}),
            ));
        }
        let id = subscription_id(peer.name(), url, name, &Value::Object(arguments.clone()));
        let existed = self
            .engine
            .store()
            .delete_subscription(&id)
            .await
            .map_err(internal)?;
        tracing::info!(target: "mcp_tasks::audit", principal = %peer.name(), subscription = %id, existed, "event subscription ended");
        Ok(())
    }

    /// Tells the endpoint of `sub` (already removed) that an operator ended it, if this server
    /// sends control envelopes (`Forbidden`: the subscriber may no longer have it).
    pub(crate) fn event_terminated(&self, sub: EventSubscription, message: &str) {
        if let Some(sender) = self.event_sender.get() {
            sender.terminated(sub, ErrorKind::Forbidden, message.to_string(), None);
        }
    }

    /// Ends every subscription to a type this server does not declare (removed from its config
    /// since): each is removed and, with control envelopes on, told so. How many. An operator's
    /// act, not done at start: during a rolling deploy an old replica does not know the types the
    /// new ones added, and would end their subscriptions for everyone.
    pub async fn end_undeclared_subscriptions(&self) -> Result<usize, StoreError> {
        match self.event_sender.get() {
            Some(sender) => sender.end_undeclared().await,
            None => {
                crate::events::deliver::end_undeclared_without_envelopes(
                    self.engine.store().as_ref(),
                    &self.config().events,
                )
                .await
            }
        }
    }

    /// A page of the log for `peer`.
    pub(crate) async fn poll_events(
        &self,
        peer: &Peer,
        req: PollRequest,
    ) -> Result<PollOutcome, Failure> {
        let ty = self.event_type(peer, &req.name)?;
        let filter = filter_of(&ty, &req.arguments, req.method)?;
        let store = self.engine.store();
        let after = match &req.cursor {
            Some(c) => EventPosition::parse(c).ok_or_else(|| {
                Failure::from(ErrorObject::invalid_params(format!(
                    "{}: cursor {c:?} is not one this server handed out",
                    req.method
                )))
            })?,
            None => store.event_horizon().await.map_err(internal)?,
        };
        let query = EventQuery {
            name: req.name.clone(),
            principal: peer.name().to_string(),
            session: peer.anonymous_scope(),
            task_id: filter.task_id,
            tool: filter.tool,
            filter: filter.fields,
            after,
            limit: req.max_events.unwrap_or(MAX_POLL).clamp(1, MAX_POLL),
        };
        let page = store.read_events(&query).await.map_err(internal)?;
        // What lies below the replay floor is passed over, not reported missing.
        let floor = req.not_before_ms.unwrap_or(0);
        let mut events = Vec::with_capacity(page.events.len());
        for e in page
            .events
            .into_iter()
            .filter(|e| e.event.created_at >= floor)
        {
            let pending = match (
                &e.event.task_id,
                e.event.name == mcp_tasks_engine::events::TASK_INPUT_REQUIRED,
            ) {
                (Some(t), true) => store.inputs(t).await.map_err(internal)?,
                _ => Vec::new(),
            };
            events.push((e, pending));
        }
        Ok(PollOutcome {
            events,
            cursor: page.next.cursor(),
            truncated: page.truncated,
            has_more: page.more,
        })
    }
}

/// What a subscription's (or a poll's) arguments filter on.
struct Filter {
    task_id: Option<String>,
    tool: Option<String>,
    fields: Map<String, Value>,
}

/// The filter `arguments` make for `ty`, checked against its `inputSchema`.
fn filter_of(
    ty: &EventType,
    arguments: &Map<String, Value>,
    method: &str,
) -> Result<Filter, Failure> {
    let value = Value::Object(arguments.clone());
    let validator = jsonschema::validator_for(&ty.input_schema).map_err(|e| {
        Failure::from(ErrorObject::internal(format!(
            "the input schema of {:?}: {e}",
            ty.name
        )))
    })?;
    if let Some(e) = validator.iter_errors(&value).next() {
        return Err(ErrorObject::invalid_params(format!(
            "{method}: arguments do not match the inputSchema of {:?}: {e} (at {})",
            ty.name,
            e.instance_path()
        ))
        .into());
    }
    if ty.is_task_type() {
        let text = |k: &str| arguments.get(k).and_then(Value::as_str).map(str::to_string);
        return Ok(Filter {
            task_id: text("taskId"),
            tool: text("tool"),
            fields: Map::new(),
        });
    }
    for (k, v) in arguments {
        if k.contains(['"', '\\']) || !(v.is_string() || v.is_number() || v.is_boolean()) {
            return Err(ErrorObject::invalid_params(format!(
                "{method}: argument {k:?} must be a string, number or boolean to filter on"
            ))
            .into());
        }
    }
    Ok(Filter {
        task_id: None,
        tool: None,
        fields: arguments.clone(),
    })
}

/// Refuses a URL events are not sent to: not https (plain http only to an allowed host, or to
/// loopback with `allow_insecure_loopback`), with credentials or a fragment, to an address that
/// is not public.
async fn check_url(url: &str, settings: &EventSettings) -> Result<(), Failure> {
    let bad = |why: String| -> Failure {
        ErrorObject::invalid_params(format!("events/subscribe: delivery.url: {why}")).into()
    };
    if url.contains('#') {
        return Err(bad(format!(
            "{url:?} has a fragment; a webhook URL has none"
        )));
    }
    let checked = address::check_url(url, &settings.hosts()).map_err(|e| bad(e.to_string()))?;
    address::check_resolved(&checked)
        .await
        .map_err(|e| bad(e.to_string()))?;
    Ok(())
}

/// The lifetime granted for the suggestion `asked` (absent: the default; null: the longest).
fn granted_ttl(settings: &EventSettings, asked: Option<Option<u64>>) -> Duration {
    match asked {
        None => settings.default_ttl,
        Some(None) => settings.max_ttl,
        Some(Some(ms)) => Duration::from_millis(ms).clamp(settings.min_ttl, settings.max_ttl),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The replay floor `maxAgeMs` sets for a request from `cursor`: now − maxAgeMs, taken once; none
/// without a cursor (a request from now replays nothing) or without `maxAgeMs`.
pub(crate) fn replay_floor(cursor: Option<&str>, max_age_ms: Option<u64>) -> Option<u64> {
    match (cursor, max_age_ms) {
        (Some(_), Some(age)) => Some(now_ms().saturating_sub(age)),
        _ => None,
    }
}
