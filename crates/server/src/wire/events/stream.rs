//! `events/stream`: one long-lived request per subscription, its events sent as notifications on
//! the request's own stream (an SSE response on HTTP, stdout on stdio) from the same durable log
//! `events/poll` reads, so a stream that breaks goes on from its last cursor.
//!
//! The request sends `notifications/events/active {cursor, truncated}` first (again, with
//! `truncated: true`, if the log was purged past the stream), then `notifications/events/event`
//! for each event, `notifications/events/heartbeat {cursor}` every [`HEARTBEAT`], a transient
//! `notifications/events/error` when the log cannot be read, and `notifications/events/terminated`
//! when the caller may no longer see the type (it is gone from the config, or their scopes no
//! longer cover it). Each carries `_meta["io.modelcontextprotocol/subscriptionId"]`, the request's
//! id. The result, `{_meta}`, comes only when the server ends the stream (a stop, a terminate);
//! the client ends it by closing it (HTTP) or with `notifications/cancelled` (stdio).

use mcp_tasks_engine::{TaskEvent, TaskStatus};
use mcp_tasks_protocol::jsonrpc::{ErrorObject, Message, RequestId};
use mcp_tasks_protocol::{error_codes, meta};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Duration;

use crate::core::event_api::{replay_floor, PollRequest};
use crate::core::streams::StreamSender;
use crate::core::{internal, Failure, Peer, Server};

/// How often a quiet stream says it is alive (clients take a stream silent for twice the interval
/// for dead; the reference asks for at least every 30 s).
const HEARTBEAT: Duration = Duration::from_secs(20);
/// How often the log is read again when nothing woke the stream: events of other replicas, and of
/// tools, are not announced on this node's notifier.
const RECHECK: Duration = Duration::from_secs(1);
/// The longest a stream lasts: then the server ends it (its result), and the client opens the next
/// from its cursor, authenticated again.
const MAX_LIFETIME: Duration = Duration::from_secs(3600);
/// How long a stream waits after a failed read before it reads again.
const RETRY_AFTER_ERROR: Duration = Duration::from_secs(2);

pub(super) async fn serve(
    server: &Arc<Server>,
    peer: &Peer,
    id: &RequestId,
    params: &Map<String, Value>,
    out: &StreamSender,
) -> Result<Value, Failure> {
    let method = "events/stream";
    let gone = || Failure::from(ErrorObject::internal("client went away"));
    let sub_meta = json!({meta::SUBSCRIPTION_ID: id.to_value()});
    // Subscribed before the first read, so no change falls between the read and the wait.
    let mut changes = server.engine().notifier().subscribe_all();
    let from = super::cursor(params, method)?;
    let not_before_ms = replay_floor(from.as_deref(), super::max_age(params, method)?);
    let start = match from {
        Some(c) => c,
        // From now: the log's horizon, named in `active` so the client can keep it.
        None => server
            .engine()
            .store()
            .event_horizon()
            .await
            .map_err(internal)?
            .cursor(),
    };
    let mut req = PollRequest {
        name: super::text(params, "name", method)?,
        arguments: super::arguments(params, method)?,
        // The floor is a moment (the open's now − maxAgeMs), not an age: live events are above
        // it. Without a cursor there is nothing to replay, so none.
        not_before_ms,
        cursor: Some(start),
        max_events: None,
        method,
    };
    // The first read checks the type, the arguments and the cursor: what is wrong with them is the
    // request's error, before anything is streamed.
    let mut page = server.poll_events(peer, req.clone()).await?;
    let _slot = server.stream_slot(peer, method)?;
    let send = async |name: &str, mut params: Value| -> Result<(), Failure> {
        match params.get_mut("_meta") {
            Some(Value::Object(m)) => {
                m.insert(meta::SUBSCRIPTION_ID.into(), id.to_value());
            }
            _ => params["_meta"] = sub_meta.clone(),
        }
        out.send(Message::notification(name, params))
            .await
            .map_err(|_| gone())
    };
    let principal = peer.name().to_string();
    let task_type = matches!(
        req.name.as_str(),
        mcp_tasks_engine::events::TASK_FINISHED | mcp_tasks_engine::events::TASK_INPUT_REQUIRED
    );
    let ends_at = tokio::time::Instant::now() + MAX_LIFETIME;
    let mut heartbeat =
        tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
    let mut first = true;
    loop {
        // `active` first, and again before the events of a read that found the log purged past
        // the stream: with the cursor the read went on from (a client that keeps it loses
        // nothing it has not been told of).
        if first || page.truncated {
            send(
                "notifications/events/active",
                json!({"cursor": req.cursor, "truncated": page.truncated}),
            )
            .await?;
            first = false;
        }
        for occurrence in super::occurrences(&page) {
            send("notifications/events/event", occurrence).await?;
        }
        req.cursor = Some(page.cursor.clone());
        if !page.has_more {
            // Woken by a change of the caller's that makes a task event, by the recheck (one
            // deadline a read resets, so chatter cannot put it off), or for a heartbeat.
            let recheck = tokio::time::sleep(RECHECK);
            tokio::pin!(recheck);
            let mut woken = false;
            while !woken {
                tokio::select! {
                    e = changes.recv() => woken = match e {
                        Ok(ev) => task_type && makes_an_event(&ev) && ev.task().owner == principal,
                        // Missed some: the log has them.
                        Err(_) => true,
                    },
                    () = &mut recheck => woken = true,
                    _ = heartbeat.tick() => {
                        send("notifications/events/heartbeat", json!({"cursor": page.cursor})).await?;
                    }
                    () = out.closed() => return Err(gone()),
                    // A stream lasts at most this long: its credentials are checked again when
                    // the client opens the next one from its cursor.
                    () = tokio::time::sleep_until(ends_at) => return Ok(json!({"_meta": sub_meta})),
                    () = server.stopping() => return Ok(json!({"_meta": sub_meta})),
                }
            }
        }
        page = loop {
            match server.poll_events(peer, req.clone()).await {
                Ok(p) => break p,
                // The store could not be read: said, and tried again.
                Err(f) if f.error.code == error_codes::INTERNAL_ERROR => {
                    tracing::warn!(principal = %peer.name(), error = %f.error.message, "events/stream: the event log could not be read; trying again");
                    send(
                        "notifications/events/error",
                        json!({"error": error_value(&f.error)}),
                    )
                    .await?;
                    tokio::select! {
                        () = tokio::time::sleep(RETRY_AFTER_ERROR) => {}
                        () = out.closed() => return Err(gone()),
                        () = server.stopping() => return Ok(json!({"_meta": sub_meta})),
                    }
                }
                // The type is gone, or no longer the caller's to see: the stream ends.
                Err(f) => {
                    tracing::info!(target: "mcp_tasks::audit", principal = %peer.name(), name = %req.name, reason = %f.error.message, "events/stream terminated");
                    send(
                        "notifications/events/terminated",
                        json!({"error": error_value(&f.error)}),
                    )
                    .await?;
                    return Ok(json!({"_meta": sub_meta}));
                }
            }
        };
    }
}

/// Whether a task event on this node writes an event to the log (the ones the webhook sender
/// wakes for too).
fn makes_an_event(event: &TaskEvent) -> bool {
    match event {
        TaskEvent::Changed(t) => t.status.is_terminal() || t.status == TaskStatus::InputRequired,
        TaskEvent::InputRequested { .. } => true,
        _ => false,
    }
}

fn error_value(e: &ErrorObject) -> Value {
    serde_json::to_value(e).unwrap_or_else(|_| json!({"code": e.code, "message": e.message}))
}
