//! The MCP Events methods (`events/list`, `events/subscribe`, `events/unsubscribe`,
//! `events/poll`, `events/stream`), the same on both wires: their params parsed, their results rendered
//! (`resultType: "complete"` always, `refreshBefore` and `truncated` always present), and the
//! capability both `server/discover` and `initialize` advertise.

use mcp_tasks_protocol::jsonrpc::{ErrorObject, RequestId};
use serde_json::{json, Map, Value};
use std::sync::Arc;

use super::render_2026;
use crate::core::event_api::{replay_floor, PollRequest, SubscribeRequest};
use crate::core::streams::StreamSender;
use crate::core::{Failure, Peer, Server};
use crate::events::occurrence::{self, InputRenderer};

mod stream;

/// The methods served here.
pub(crate) const METHODS: [&str; 5] = [
    "events/list",
    "events/subscribe",
    "events/unsubscribe",
    "events/poll",
    "events/stream",
];

/// How `task.input_required` names what to answer: the 2026-07-28 `inputRequests` map.
pub(crate) fn input_renderer() -> InputRenderer {
    Arc::new(render_2026::input_requests)
}

/// The capabilities Events add: the top-level `events` the deployed clients read (ChatGPT, the
/// AI SDK) and the extension's entry SEP-3415 names.
pub(crate) fn add_capabilities(caps: &mut Value) {
    if let Value::Object(c) = caps {
        c.insert("events".into(), json!({}));
        let ext = c.entry("extensions").or_insert_with(|| json!({}));
        if let Value::Object(e) = ext {
            e.insert(crate::events::EXTENSION.into(), json!({}));
        }
    }
}

/// Serves `method` (one of [`METHODS`]) for request `id`; `out` carries an `events/stream`'s
/// notifications.
pub(crate) async fn serve(
    server: &Arc<Server>,
    peer: &Peer,
    method: &str,
    id: &RequestId,
    params: &Map<String, Value>,
    out: &StreamSender,
) -> Result<Value, Failure> {
    let mut result = match method {
        "events/list" => list(server, peer, params)?,
        "events/subscribe" => subscribe(server, peer, params).await?,
        "events/unsubscribe" => {
            let name = text(params, "name", method)?;
            let arguments = arguments(params, method)?;
            let url = params
                .get("delivery")
                .and_then(|d| d.get("url"))
                .and_then(Value::as_str)
                .ok_or_else(|| invalid(format!("{method}: missing string \"delivery.url\"")))?;
            server
                .unsubscribe_events(peer, &name, &arguments, url)
                .await?;
            json!({})
        }
        "events/poll" => poll(server, peer, params).await?,
        "events/stream" => stream::serve(server, peer, id, params, out).await?,
        m => return Err(ErrorObject::method_not_found(m).into()),
    };
    if let Value::Object(m) = &mut result {
        m.entry("resultType").or_insert_with(|| json!("complete"));
    }
    Ok(result)
}

fn invalid(message: String) -> Failure {
    ErrorObject::invalid_params(message).into()
}

fn text(params: &Map<String, Value>, key: &str, method: &str) -> Result<String, Failure> {
    params
        .get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| invalid(format!("{method}: missing string {key:?}")))
}

fn arguments(params: &Map<String, Value>, method: &str) -> Result<Map<String, Value>, Failure> {
    match params.get("arguments") {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(_) => Err(invalid(format!("{method}: arguments must be an object"))),
    }
}

fn cursor(params: &Map<String, Value>, method: &str) -> Result<Option<String>, Failure> {
    match params.get("cursor") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(invalid(format!(
            "{method}: cursor must be a string or null"
        ))),
    }
}

fn list(server: &Server, peer: &Peer, params: &Map<String, Value>) -> Result<Value, Failure> {
    let types = server.event_types(peer);
    let page = server.config().page_size.max(1);
    let start = match params.get("cursor") {
        None | Some(Value::Null) => 0,
        Some(Value::String(c)) => c
            .strip_prefix("e")
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n < types.len())
            .ok_or_else(|| {
                invalid(format!(
                    "events/list: cursor {c:?} is not one this server handed out"
                ))
            })?,
        Some(_) => return Err(invalid("events/list: cursor must be a string".into())),
    };
    let events: Vec<Value> = types
        .iter()
        .skip(start)
        .take(page)
        .map(|t| t.definition())
        .collect();
    let mut r = json!({"events": events});
    if start + page < types.len() {
        r["nextCursor"] = json!(format!("e{}", start + page));
    }
    Ok(r)
}

async fn subscribe(
    server: &Server,
    peer: &Peer,
    params: &Map<String, Value>,
) -> Result<Value, Failure> {
    let method = "events/subscribe";
    let name = text(params, "name", method)?;
    let arguments = arguments(params, method)?;
    let delivery = params
        .get("delivery")
        .and_then(Value::as_object)
        .ok_or_else(|| {
            invalid(format!(
                "{method}: missing object \"delivery\" ({{mode, url, secret}})"
            ))
        })?;
    let field = |k: &str| {
        delivery
            .get(k)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| invalid(format!("{method}: missing string \"delivery.{k}\"")))
    };
    let mode = field("mode")?;
    let url = field("url")?;
    let secret = if mode == "webhook" {
        field("secret")?
    } else {
        String::new()
    };
    let ttl_ms = match params.get("ttlMs") {
        None => None,
        Some(Value::Null) => Some(None),
        Some(v) => match v.as_u64().filter(|n| *n > 0) {
            Some(n) => Some(Some(n)),
            None => {
                return Err(invalid(format!(
                    "{method}: ttlMs must be a positive integer or null"
                )))
            }
        },
    };
    let out = server
        .subscribe_events(
            peer,
            SubscribeRequest {
                name,
                arguments,
                mode,
                url,
                secret,
                cursor: cursor(params, method)?,
                ttl_ms,
            },
        )
        .await?;
    let mut r = json!({
        "id": out.id,
        "refreshBefore": mcp_tasks_engine::format_rfc3339(out.refresh_before),
        "cursor": out.cursor,
        "truncated": out.truncated,
    });
    if let Some(s) = out.status {
        let mut status = json!({
            "active": s.is_live(mcp_tasks_engine::now_ms()),
            "lastError": s.last_error,
        });
        if let Some(at) = s.last_delivery_at {
            status["lastDeliveryAt"] = json!(mcp_tasks_engine::format_rfc3339(at));
        }
        if let Some(at) = s.failed_since {
            status["failedSince"] = json!(mcp_tasks_engine::format_rfc3339(at));
        }
        r["deliveryStatus"] = status;
    }
    Ok(r)
}

/// `maxAgeMs` of `method`'s params.
fn max_age(params: &Map<String, Value>, method: &str) -> Result<Option<u64>, Failure> {
    match params.get("maxAgeMs") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| invalid(format!("{method}: maxAgeMs must be a non-negative integer"))),
    }
}

async fn poll(server: &Server, peer: &Peer, params: &Map<String, Value>) -> Result<Value, Failure> {
    let method = "events/poll";
    let max_events = match params.get("maxEvents") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| {
                    invalid(format!(
                        "{method}: maxEvents must be a non-negative integer"
                    ))
                })?,
        ),
    };
    let from = cursor(params, method)?;
    let out = server
        .poll_events(
            peer,
            PollRequest {
                name: text(params, "name", method)?,
                arguments: arguments(params, method)?,
                not_before_ms: replay_floor(from.as_deref(), max_age(params, method)?),
                cursor: from,
                max_events,
                method,
            },
        )
        .await?;
    let events = occurrences(&out);
    Ok(json!({
        "events": events,
        "cursor": out.cursor,
        "truncated": out.truncated,
        "hasMore": out.has_more,
        "nextPollMs": if out.has_more { 0 } else { 2_000 },
    }))
}

/// The events of a page as `EventOccurrence`s, each with its own position as its cursor.
fn occurrences(page: &crate::core::event_api::PollOutcome) -> Vec<Value> {
    let inputs = input_renderer();
    page.events
        .iter()
        .filter_map(|(e, pending)| {
            occurrence::render(e, Some(e.position.cursor()), pending, &inputs)
        })
        .collect()
}
