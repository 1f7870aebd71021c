//! The admin API's MCP Events subscriptions: every principal's, with how delivery goes
//! (`GET /admin/api/subscriptions[?principal=P]`), one with its latest deliveries
//! (`GET /admin/api/subscriptions/{id}`), ending one (`DELETE /admin/api/subscriptions/{id}`), and
//! ending those to types this server no longer declares
//! (`POST /admin/api/subscriptions/end-undeclared`).
//! Secrets are never shown.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use mcp_tasks_engine::events::EventSubscription;
use mcp_tasks_engine::now_ms;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

use super::access::{fail, Operator};
use crate::Server;

/// Most subscriptions one listing returns.
const MAX_LIST: usize = 1000;

/// A subscription as operators see it (no secret).
pub(crate) fn summary(s: &EventSubscription) -> Value {
    let now = now_ms();
    json!({
        "id": s.id,
        "principal": s.principal,
        "name": s.name,
        "arguments": serde_json::from_str::<Value>(&s.arguments).unwrap_or(Value::Null),
        "url": s.url,
        "createdAt": s.created_at,
        "refreshedAt": s.refreshed_at,
        "expiresAt": s.expires_at,
        "active": s.is_live(now),
        "rotating": s.previous_until.is_some_and(|u| u > now),
        "lastDeliveryAt": s.last_delivery_at,
        "lastError": s.last_error,
        "failedSince": s.failed_since,
    })
}

/// What `GET /admin/api/subscriptions` takes.
#[derive(Debug, Deserialize)]
pub(crate) struct ListParams {
    principal: Option<String>,
    limit: Option<usize>,
}

pub(crate) async fn list(
    State(server): State<Arc<Server>>,
    _: Operator,
    Query(p): Query<ListParams>,
) -> Response {
    let limit = p.limit.unwrap_or(200).clamp(1, MAX_LIST);
    let principal = p.principal.filter(|p| !p.is_empty());
    match server
        .engine()
        .store()
        .subscriptions(principal.as_deref(), limit)
        .await
    {
        Ok(found) => Json(json!({"subscriptions": found.iter().map(summary).collect::<Vec<_>>()}))
            .into_response(),
        Err(e) => fail(StatusCode::SERVICE_UNAVAILABLE, e.chain()),
    }
}

pub(crate) async fn show(
    State(server): State<Arc<Server>>,
    _: Operator,
    Path(id): Path<String>,
) -> Response {
    let store = server.engine().store();
    let sub = match store.get_subscription(&id).await {
        Ok(Some(s)) => s,
        Ok(None) => return fail(StatusCode::NOT_FOUND, format!("no subscription {id}")),
        Err(e) => return fail(StatusCode::SERVICE_UNAVAILABLE, e.chain()),
    };
    let deliveries = match store.event_deliveries(&id, 100).await {
        Ok(d) => d,
        Err(e) => return fail(StatusCode::SERVICE_UNAVAILABLE, e.chain()),
    };
    let mut v = summary(&sub);
    v["deliveries"] = json!(deliveries
        .iter()
        .map(|d| json!({
            "eventId": d.event_id,
            "name": d.name,
            "state": d.state.as_str(),
            "attempts": d.attempts,
            "createdAt": d.created_at,
            "nextAt": (d.state == mcp_tasks_engine::webhook::DeliveryState::Pending).then_some(d.next_at),
            "lastStatus": d.last_status,
            "lastError": d.last_error,
        }))
        .collect::<Vec<_>>());
    Json(v).into_response()
}

pub(crate) async fn end(
    State(server): State<Arc<Server>>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> Response {
    let store = server.engine().store();
    // Read first: its endpoint and secret sign the `terminated` envelope sent after.
    let sub = match store.get_subscription(&id).await {
        Ok(s) => s,
        Err(e) => return fail(StatusCode::SERVICE_UNAVAILABLE, e.chain()),
    };
    match store.delete_subscription(&id).await {
        Ok(true) => {
            tracing::info!(target: "mcp_tasks::audit", operator = %who, subscription = %id, "operator ended an event subscription");
            if let Some(sub) = sub {
                server.event_terminated(sub, "the server's operator ended this subscription");
            }
            Json(json!({"ended": id})).into_response()
        }
        Ok(false) => fail(StatusCode::NOT_FOUND, format!("no subscription {id}")),
        Err(e) => fail(StatusCode::SERVICE_UNAVAILABLE, e.chain()),
    }
}

pub(crate) async fn end_undeclared(
    State(server): State<Arc<Server>>,
    Operator(who): Operator,
) -> Response {
    match server.end_undeclared_subscriptions().await {
        Ok(n) => {
            tracing::info!(target: "mcp_tasks::audit", operator = %who, ended = n, "operator ended the subscriptions to undeclared event types");
            Json(json!({"ended": n})).into_response()
        }
        Err(e) => fail(StatusCode::SERVICE_UNAVAILABLE, e.chain()),
    }
}
