//! The admin API (JSON) under `/admin/api`, for `mcp-tasks admin …` and the dashboard: every
//! principal's tasks, one task in full, cancel, purge; a task's journal is `journal`'s. Operators
//! only (see `access`).

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use mcp_tasks_engine::store::{Lookup, PurgePolicy, TaskFilter};
use mcp_tasks_engine::{EngineError, Outcome, TaskRecord, TaskStatus};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

use super::access::{self, fail, Operator};
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
        .route("/admin/api/tasks/{id}/signal", post(super::signals::send))
        .route("/admin/api/tasks/{id}/journal", get(super::journal::export))
        .route(
            "/admin/api/tasks/{id}/journal/rewind",
            post(super::journal::rewind),
        )
        .route(
            "/admin/api/tasks/{id}/journal/restart",
            post(super::journal::restart),
        )
        .route("/admin/api/purge", post(purge))
        .route("/admin/api/summary", get(summary_counts))
        .route("/admin/api/events", get(events))
        .route("/admin/api/webhooks", get(super::webhooks::list))
        .route("/admin/api/webhooks/{id}", get(super::webhooks::show))
        .route(
            "/admin/api/webhooks/{id}/redeliver",
            post(super::webhooks::redeliver),
        )
        .route("/admin/api/subscriptions", get(super::subscriptions::list))
        .route(
            "/admin/api/subscriptions/end-undeclared",
            post(super::subscriptions::end_undeclared),
        )
        .route(
            "/admin/api/subscriptions/{id}",
            get(super::subscriptions::show).delete(super::subscriptions::end),
        )
        .route("/admin/api/me", get(access::me))
        .route("/admin/login", post(access::login))
        .route("/admin/logout", post(access::logout))
}

/// Counts for the dashboard's strip: unfinished tasks now, and how the tasks created in the last
/// hour ended (with the failure rate among those finished).
async fn summary_counts(State(server): State<Arc<Server>>, _: Operator) -> Response {
    let store = server.engine().store();
    let active = match store.count_active().await {
        Ok(a) => a,
        Err(e) => return fail(StatusCode::SERVICE_UNAVAILABLE, e.chain()),
    };
    let hour_ago = mcp_tasks_engine::now_ms().saturating_sub(3_600_000);
    let finished = match store.count_finished(hour_ago).await {
        Ok(f) => f,
        Err(e) => return fail(StatusCode::SERVICE_UNAVAILABLE, e.chain()),
    };
    // The metrics' three statuses: a result that reports a tool error counts as failed.
    let (completed, cancelled) = (finished.completed, finished.cancelled);
    let failed = finished.failed + finished.completed_with_error;
    let done = completed + failed + cancelled;
    Json(json!({
        "working": active.working,
        "input_required": active.input_required,
        "lastHour": {
            "completed": completed,
            "failed": failed,
            "cancelled": cancelled,
            "failureRate": if done == 0 { 0.0 } else { failed as f64 / done as f64 },
        },
    }))
    .into_response()
}

/// Server-sent events for the dashboard: each task that is created or changes (status, progress,
/// message), as its listing entry (`event: task`); `event: resync` when events were missed.
async fn events(State(server): State<Arc<Server>>, _: Operator) -> Response {
    use axum::response::sse::{Event, KeepAlive, Sse};
    use mcp_tasks_engine::TaskEvent;
    let rx = server.engine().notifier().subscribe_all();
    // The view shows every task: the other replicas' events of each are brought in while it is open.
    let watch = server.engine().notifier().watch_everything();
    let stream = futures::stream::unfold((rx, watch), |(mut rx, watch)| async move {
        loop {
            match rx.recv().await {
                Ok(TaskEvent::Created(t) | TaskEvent::Changed(t))
                | Ok(TaskEvent::Progress { task: t, .. }) => {
                    let ev = Event::default().event("task").data(summary(&t).to_string());
                    return Some((Ok::<_, std::convert::Infallible>(ev), (rx, watch)));
                }
                Ok(_) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    let ev = Event::default().event("resync").data("{}");
                    return Some((Ok(ev), (rx, watch)));
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
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
    _: Operator,
    Query(p): Query<ListParams>,
) -> Response {
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

async fn show(State(server): State<Arc<Server>>, _: Operator, Path(id): Path<String>) -> Response {
    let t = match server.engine().get(&id).await {
        Ok(Lookup::Found(t)) => t,
        Ok(_) => return fail(StatusCode::NOT_FOUND, format!("no task {id}")),
        Err(e) => return fail(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    };
    let mut v = summary(&t);
    v["arguments"] = (*t.arguments).clone();
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
    // The step journal: which run did which step, how long it took, how it ended (outputs cut
    // short: the whole journal is `/journal`).
    let steps = server
        .engine()
        .store()
        .steps(&t.id)
        .await
        .unwrap_or_default();
    v["steps"] = json!(steps
        .iter()
        .map(super::journal::step_view)
        .collect::<Vec<_>>());
    let signals = server.engine().signals(&t.id).await.unwrap_or_default();
    v["signals"] = json!(signals
        .iter()
        .map(super::signals::signal_view)
        .collect::<Vec<_>>());
    let pending = server
        .engine()
        .pending_inputs(&t.id)
        .await
        .unwrap_or_default();
    v["webhooks"] = super::webhooks::targets(&t.webhooks);
    let deliveries = server
        .engine()
        .store()
        .deliveries(&mcp_tasks_engine::webhook::DeliveryQuery {
            task_id: Some(t.id.clone()),
            ..Default::default()
        })
        .await
        .unwrap_or_default();
    v["deliveries"] = json!(deliveries
        .iter()
        .rev()
        .map(super::webhooks::summary)
        .collect::<Vec<_>>());
    v["pendingInputs"] = json!(pending
        .iter()
        .map(|i| json!({"key": i.key, "method": i.method, "params": i.params, "askedAt": i.created_at}))
        .collect::<Vec<_>>());
    Json(v).into_response()
}

async fn cancel(
    State(server): State<Arc<Server>>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> Response {
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
    Operator(who): Operator,
    Query(p): Query<PurgeParams>,
) -> Response {
    let now = mcp_tasks_engine::now_ms();
    let config = server.engine().config();
    let policy = PurgePolicy {
        now,
        finished_grace_ms: config.finished_grace_ms,
        tombstone_ms: config.tombstone_ms,
        finished_before: Some(now.saturating_sub(p.finished_before_ms)),
    };
    let store = server.engine().store();
    // An operator's purge also takes the idle sessions, as the sweeper does.
    let purged = match store.purge(policy).await {
        Ok(purged) => store
            .purge_sessions(now, config.session_idle_ms)
            .await
            .map(|_| purged),
        Err(e) => Err(e),
    };
    match purged {
        Ok(purged) => {
            tracing::info!(target: "mcp_tasks::audit", operator = %who, tasks = purged.tasks, "operator purged finished tasks");
            Json(json!({"purged": purged.tasks})).into_response()
        }
        Err(e) => fail(StatusCode::SERVICE_UNAVAILABLE, e.chain()),
    }
}
