//! The admin API (JSON) under `/admin/api`, for `mcp-tasks admin …` and the dashboard: every
//! principal's tasks, one task in full, cancel, purge. Operators only (see
//! `Authenticator::operator`).

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use mcp_tasks_engine::store::{Lookup, PurgePolicy, TaskFilter};
use mcp_tasks_engine::{EngineError, Outcome, TaskRecord, TaskStatus};
use serde::Deserialize;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;

use super::finished_status;
use crate::Server;

/// Most tasks one listing returns.
const MAX_LIST: usize = 1000;

/// The routes, relative to `/admin/api`.
pub(crate) fn routes() -> axum::Router<Arc<Server>> {
    axum::Router::new()
        .route("/admin/api/tasks", get(list))
        .route("/admin/api/tasks/{id}", get(show))
        .route("/admin/api/tasks/{id}/cancel", post(cancel))
        .route("/admin/api/purge", post(purge))
}

fn fail(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({"error": message.into()}))).into_response()
}

/// The operator making the request, or why the request is refused (403).
fn operator(server: &Server, headers: &HeaderMap, peer: SocketAddr) -> Result<String, String> {
    let authorization = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    server
        .authenticator()
        .operator(authorization, peer.ip().is_loopback())
}

/// The status an operator sees: `working`, `input_required`, or how a finished task counts
/// (`completed`, `failed` — also a tool error —, `cancelled`).
pub fn shown_status(t: &TaskRecord) -> &'static str {
    if t.status.is_terminal() {
        finished_status(t)
    } else {
        t.status.as_str()
    }
}

/// A task in a listing.
pub fn summary(t: &TaskRecord) -> Value {
    json!({
        "taskId": t.id,
        "tool": t.tool,
        "principal": t.owner,
        "status": shown_status(t),
        "statusMessage": t.status_message,
        "progress": t.progress,
        "total": t.progress_total,
        "progressMessage": t.progress_message,
        "wire": t.era,
        "createdAt": t.created_at,
        "updatedAt": t.updated_at,
        "finishedAt": t.finished_at,
        "attempt": t.attempt,
    })
}

/// What `GET /admin/api/tasks` takes.
#[derive(Debug, Deserialize)]
struct ListParams {
    /// One of the shown statuses.
    status: Option<String>,
    tool: Option<String>,
    principal: Option<String>,
    /// Only tasks created at or after this time (Unix ms).
    since: Option<u64>,
    limit: Option<usize>,
}

async fn list(
    State(server): State<Arc<Server>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(p): Query<ListParams>,
) -> Response {
    if let Err(why) = operator(&server, &headers, peer) {
        return fail(StatusCode::FORBIDDEN, why);
    }
    let limit = p.limit.unwrap_or(200).clamp(1, MAX_LIST);
    // Shown statuses map onto stored ones; a tool error is a completed task shown as failed.
    let statuses = match p.status.as_deref() {
        None | Some("") => vec![],
        Some("working") => vec![TaskStatus::Working],
        Some("input_required") => vec![TaskStatus::InputRequired],
        Some("completed") => vec![TaskStatus::Completed],
        Some("failed") => vec![TaskStatus::Failed, TaskStatus::Completed],
        Some("cancelled") => vec![TaskStatus::Cancelled],
        Some(other) => {
            return fail(
                StatusCode::BAD_REQUEST,
                format!("unknown status {other:?}: use working, input_required, completed, failed or cancelled"),
            )
        }
    };
    let filter = TaskFilter {
        statuses,
        tool: p.tool.filter(|t| !t.is_empty()),
        owner: p.principal.filter(|t| !t.is_empty()),
        created_after: p.since,
        created_before: None,
        limit: MAX_LIST,
    };
    match server.engine().store().search(&filter).await {
        Ok(found) => {
            let tasks: Vec<Value> = found
                .iter()
                .filter(|t| {
                    p.status
                        .as_deref()
                        .is_none_or(|s| s.is_empty() || shown_status(t) == s)
                })
                .take(limit)
                .map(summary)
                .collect();
            Json(json!({"tasks": tasks})).into_response()
        }
        Err(e) => fail(StatusCode::SERVICE_UNAVAILABLE, e.chain()),
    }
}

async fn show(
    State(server): State<Arc<Server>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Err(why) = operator(&server, &headers, peer) {
        return fail(StatusCode::FORBIDDEN, why);
    }
    let t = match server.engine().get(&id).await {
        Ok(Lookup::Found(t)) => t,
        Ok(_) => return fail(StatusCode::NOT_FOUND, format!("no task {id}")),
        Err(e) => return fail(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    };
    let mut v = summary(&t);
    v["arguments"] = t.arguments.clone();
    match &t.outcome {
        Some(Outcome::Result { value, is_error }) => {
            v["result"] = value.clone();
            v["isError"] = json!(is_error);
        }
        Some(Outcome::Error {
            code,
            message,
            data,
        }) => v["error"] = json!({"code": code, "message": message, "data": data}),
        None => {}
    }
    // The status history: created `working`, then each change (a finish as the operator sees it).
    let changes = server
        .engine()
        .store()
        .history(&t.id)
        .await
        .unwrap_or_default();
    let mut history = vec![json!({"status": "working", "at": t.created_at, "message": null})];
    for c in &changes {
        let status = if c.status.is_terminal() && c.status == t.status {
            shown_status(&t)
        } else {
            c.status.as_str()
        };
        history.push(json!({"status": status, "at": c.at, "message": c.message}));
    }
    v["history"] = json!(history);
    let pending = server
        .engine()
        .pending_inputs(&t.id)
        .await
        .unwrap_or_default();
    v["pendingInputs"] = json!(pending
        .iter()
        .map(|i| json!({"key": i.key, "method": i.method, "params": i.params, "askedAt": i.created_at}))
        .collect::<Vec<_>>());
    Json(v).into_response()
}

async fn cancel(
    State(server): State<Arc<Server>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let who = match operator(&server, &headers, peer) {
        Ok(w) => w,
        Err(why) => return fail(StatusCode::FORBIDDEN, why),
    };
    let why = format!("cancelled by operator {who}");
    match server.engine().cancel(&id, Some(why)).await {
        Ok(t) => {
            tracing::info!(target: "mcp_tasks::audit", task = %id, operator = %who, "operator cancelled task");
            Json(summary(&t)).into_response()
        }
        Err(EngineError::AlreadyTerminal(t)) => (
            StatusCode::CONFLICT,
            Json(json!({"error": format!("task {id} had already finished ({})", shown_status(&t)), "task": summary(&t)})),
        )
            .into_response(),
        Err(EngineError::NotFound) | Err(EngineError::Expired) => {
            fail(StatusCode::NOT_FOUND, format!("no task {id}"))
        }
        Err(e) => fail(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// What `POST /admin/api/purge` takes.
#[derive(Debug, Deserialize)]
struct PurgeParams {
    /// Purge tasks that finished more than this long ago (ms).
    finished_before_ms: u64,
}

async fn purge(
    State(server): State<Arc<Server>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(p): Query<PurgeParams>,
) -> Response {
    let who = match operator(&server, &headers, peer) {
        Ok(w) => w,
        Err(why) => return fail(StatusCode::FORBIDDEN, why),
    };
    let now = mcp_tasks_engine::now_ms();
    let config = server.engine().config();
    let policy = PurgePolicy {
        now,
        finished_grace_ms: config.finished_grace_ms,
        tombstone_ms: config.tombstone_ms,
        session_idle_ms: config.session_idle_ms,
        finished_before: Some(now.saturating_sub(p.finished_before_ms)),
    };
    match server.engine().store().purge(policy).await {
        Ok(purged) => {
            tracing::info!(target: "mcp_tasks::audit", operator = %who, tasks = purged.tasks, "operator purged finished tasks");
            Json(json!({"purged": purged.tasks})).into_response()
        }
        Err(e) => fail(StatusCode::SERVICE_UNAVAILABLE, e.chain()),
    }
}
