//! `subscriptions/listen`: the acknowledgement, then the watched tasks' states as they change
//! (and resource and list changes), until the client goes away, the server stops, or — when it
//! names nothing it can watch — at once.

use mcp_tasks_engine::store::Lookup;
use mcp_tasks_engine::TaskEvent;
use mcp_tasks_protocol::jsonrpc::{ErrorObject, Message, Request};
use mcp_tasks_protocol::meta;
use serde_json::{json, Map, Value};
use std::sync::Arc;

use super::{detailed, finish_result};
use crate::core::lists::ListKind;
use crate::core::streams::StreamSender;
use crate::core::{Failure, Peer, Server};

/// `subscriptions/listen`: acknowledges, sends the current state of each accepted task, then streams
/// `notifications/tasks` (the full `DetailedTask`) whenever it changes, until the client goes away.
pub(super) async fn listen(
    server: &Arc<Server>,
    peer: &Peer,
    req: &Request,
    params: &Map<String, Value>,
    out: StreamSender,
) -> Result<Value, Failure> {
    let gone = || Failure::from(ErrorObject::internal("client went away"));
    let filter = params
        .get("notifications")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let sub_meta = json!({meta::SUBSCRIPTION_ID: req.id.to_value()});
    // Subscribe before reading anything, so no change falls between the read and the stream.
    let mut events = server.engine().notifier().subscribe_all();
    let mut resource_events = server.resource_changes();
    let mut list_events = server.list_changes();
    // The named tasks in one read; those of other principals are left out like missing ones.
    let named: Vec<String> = filter
        .get("taskIds")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(String::from)
        .collect();
    // Marked as waited on before the read too, so that other replicas' events of them are brought
    // in here; once read, only the accepted ones stay marked (below).
    let watch = |ids: &[String]| -> Vec<mcp_tasks_engine::Watch> {
        ids.iter()
            .map(|id| server.engine().notifier().watch(id))
            .collect()
    };
    let named_watches = watch(&named);
    let mine: std::collections::HashSet<String> =
        match server.engine().store().get_many(&named).await {
            Ok(found) => found
                .into_iter()
                .filter(|t| t.owner == peer.name())
                .map(|t| t.id)
                .collect(),
            Err(e) => return Err(ErrorObject::internal(e.to_string()).into()),
        };
    // In the order named, each once (the acknowledgement lists them), and as a set to match events.
    let mut accepted = Vec::new();
    let mut watched = std::collections::HashSet::new();
    for id in named {
        if mine.contains(&id) && watched.insert(id.clone()) {
            accepted.push(id);
        }
    }
    // Marked before the others are let go of: no moment without a mark.
    let _watches = watch(&accepted);
    drop(named_watches);
    let uris: Vec<String> = filter
        .get("resourceSubscriptions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|u| server.catalog().exists(u))
        .map(String::from)
        .collect();
    // Lists are promised only where they can change (a gateway's upstream lists).
    let lists: Vec<ListKind> = [ListKind::Tools, ListKind::Prompts, ListKind::Resources]
        .into_iter()
        .filter(|k| filter.get(k.filter_field()) == Some(&Value::Bool(true)))
        .filter(|k| server.list_can_change(*k))
        .collect();
    let mut ack = Map::new();
    for k in &lists {
        ack.insert(k.filter_field().into(), json!(true));
    }
    if filter.contains_key("taskIds") {
        ack.insert("taskIds".into(), json!(accepted));
    }
    if filter.contains_key("resourceSubscriptions") {
        ack.insert("resourceSubscriptions".into(), json!(uris));
    }
    // Nothing it may watch (ids unknown or another's, nothing that can change): acknowledged, then
    // ended at once (gracefully, with the listen result) rather than held open for nothing.
    let nothing = accepted.is_empty() && uris.is_empty() && lists.is_empty();
    let held = if nothing {
        None
    } else {
        Some(server.stream_slot(peer, "subscriptions/listen")?)
    };
    let ack = Message::notification(
        "notifications/subscriptions/acknowledged",
        json!({"notifications": ack, "_meta": sub_meta}),
    );
    out.send(ack).await.map_err(|_| gone())?;
    if nothing {
        return Ok(finish_result(server, json!({"_meta": sub_meta})));
    }
    let _held = held;
    // What was last sent per task: a change that renders the same (an input event next to its status
    // change) is not sent twice.
    let mut last: std::collections::HashMap<String, Value> = std::collections::HashMap::new();
    let send_state = async |id: &str,
                            last: &mut std::collections::HashMap<String, Value>|
           -> Result<(), Failure> {
        let Ok(Lookup::Found(t)) = server.engine().get(id).await else {
            return Ok(());
        };
        let mut params = detailed(server, &t).await?;
        if last.get(id) == Some(&Value::Object(params.clone())) {
            return Ok(());
        }
        last.insert(id.to_string(), Value::Object(params.clone()));
        params.insert("_meta".into(), sub_meta.clone());
        out.send(Message::notification(
            "notifications/tasks",
            Value::Object(params),
        ))
        .await
        .map_err(|_| gone())
    };
    for id in accepted.clone() {
        send_state(&id, &mut last).await?;
    }
    loop {
        tokio::select! {
            e = events.recv() => match e {
                Ok(ev) => {
                    let relevant = matches!(ev, TaskEvent::Changed(_) | TaskEvent::Progress { .. } | TaskEvent::InputRequested { .. } | TaskEvent::InputAnswered { .. });
                    if relevant && watched.contains(&ev.task().id) {
                        send_state(&ev.task().id.clone(), &mut last).await?;
                    }
                }
                // Missed events: the store has the truth; resend what changed.
                Err(_) => {
                    for id in accepted.clone() {
                        send_state(&id, &mut last).await?;
                    }
                }
            },
            Ok(uri) = resource_events.recv() => {
                if uris.contains(&uri) {
                    let n = Message::notification("notifications/resources/updated", json!({"uri": uri, "_meta": sub_meta}));
                    out.send(n).await.map_err(|_| gone())?;
                }
            }
            Ok(kind) = list_events.recv() => {
                if lists.contains(&kind) {
                    let n = Message::notification(kind.notification(), json!({"_meta": sub_meta}));
                    out.send(n).await.map_err(|_| gone())?;
                }
            }
            _ = out.closed() => return Err(gone()),
            _ = server.stopping() => return Err(gone()),
        }
    }
}
