//! The admin API's webhook deliveries: list them (`GET /admin/api/webhooks`), one with its attempts
//! (`GET /admin/api/webhooks/{id}`), send one again (`POST /admin/api/webhooks/{id}/redeliver`).
//! Secrets are never shown; a delivery's body is rendered from its stored snapshot.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use mcp_tasks_engine::webhook::{Delivery, DeliveryQuery, DeliveryState, WebhookTarget};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

use super::access::{fail, Operator};
use crate::Server;

/// Most deliveries one listing returns.
const MAX_LIST: usize = 1000;

/// A delivery as operators see it (no secret, no body).
pub(crate) fn summary(d: &Delivery) -> Value {
    json!({
        "id": d.entry.id,
        "taskId": d.entry.task_id,
        "event": d.entry.event.as_str(),
        "url": d.entry.url,
        "subscription": d.entry.subscription,
        "state": d.state.as_str(),
        "attempts": d.attempts,
        "createdAt": d.entry.created_at,
        "nextAt": (d.state == DeliveryState::Pending).then_some(d.next_at),
        "deliveredAt": d.delivered_at,
        "lastStatus": d.last_status,
        "lastError": d.last_error,
    })
}

/// A task's targets as operators see them (no secret).
pub(crate) fn targets(targets: &[WebhookTarget]) -> Value {
    json!(targets
        .iter()
        .map(|t| json!({
            "url": t.url,
            "events": t.events,
            "subscription": t.subscription,
        }))
        .collect::<Vec<_>>())
}

/// What `GET /admin/api/webhooks` takes.
#[derive(Debug, Deserialize)]
pub(crate) struct ListParams {
    /// Those of one task.
    task: Option<String>,
    /// Those in one state: pending, delivered, failed, gone.
    state: Option<String>,
    limit: Option<usize>,
}

pub(crate) async fn list(
    State(server): State<Arc<Server>>,
    _: Operator,
    Query(p): Query<ListParams>,
) -> Response {
    let state = match p.state.as_deref() {
        None | Some("") => None,
        Some(s) => match DeliveryState::parse(s) {
            Some(s) => Some(s),
            None => {
                return fail(
                    StatusCode::BAD_REQUEST,
                    format!("unknown state {s:?}: use pending, delivered, failed or gone"),
                )
            }
        },
    };
    let query = DeliveryQuery {
        task_id: p.task.filter(|t| !t.is_empty()),
        state,
        limit: p.limit.unwrap_or(200).clamp(1, MAX_LIST),
        ..Default::default()
    };
    match server.engine().store().deliveries(&query).await {
        Ok(found) => Json(json!({"deliveries": found.iter().map(summary).collect::<Vec<_>>()}))
            .into_response(),
        Err(e) => fail(StatusCode::SERVICE_UNAVAILABLE, e.chain()),
    }
}

/// The delivery `id`, if the store has it.
async fn find(server: &Server, id: &str) -> Result<Option<Delivery>, Response> {
    let found = server
        .engine()
        .store()
        .deliveries(&DeliveryQuery {
            id: Some(id.to_string()),
            limit: 1,
            ..Default::default()
        })
        .await
        .map_err(|e| fail(StatusCode::SERVICE_UNAVAILABLE, e.chain()))?;
    Ok(found.into_iter().next())
}

pub(crate) async fn show(
    State(server): State<Arc<Server>>,
    _: Operator,
    Path(id): Path<String>,
) -> Response {
    let d = match find(&server, &id).await {
        Ok(Some(d)) => d,
        Ok(None) => return fail(StatusCode::NOT_FOUND, format!("no webhook delivery {id}")),
        Err(r) => return r,
    };
    let attempts = match server.engine().store().delivery_attempts(&id).await {
        Ok(a) => a,
        Err(e) => return fail(StatusCode::SERVICE_UNAVAILABLE, e.chain()),
    };
    let mut v = summary(&d);
    v["body"] = match crate::webhooks::body::render(&d.entry) {
        Ok(b) => serde_json::from_str(&b).unwrap_or(Value::Null),
        Err(e) => json!(format!("the stored snapshot cannot be read: {e}")),
    };
    v["attemptsMade"] = json!(attempts
        .iter()
        .map(
            |a| json!({"at": a.at, "status": a.status, "latencyMs": a.latency_ms, "error": a.error})
        )
        .collect::<Vec<_>>());
    Json(v).into_response()
}

pub(crate) async fn redeliver(
    State(server): State<Arc<Server>>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> Response {
    match server
        .engine()
        .store()
        .redeliver(&id, mcp_tasks_engine::now_ms())
        .await
    {
        Ok(true) => {
            tracing::info!(target: "mcp_tasks::audit", delivery = %id, operator = %who, "operator redelivered a webhook");
            (StatusCode::ACCEPTED, Json(json!({"redelivered": id}))).into_response()
        }
        Ok(false) => fail(StatusCode::NOT_FOUND, format!("no webhook delivery {id}")),
        Err(e) => fail(StatusCode::SERVICE_UNAVAILABLE, e.chain()),
    }
}
