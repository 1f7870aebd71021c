//! A task's step journal in the admin API: each step as `GET /admin/api/tasks/{id}` shows it
//! (output cut short), the whole journal for `mcp-tasks admin journal export` (outputs in full:
//! what `replay_check` replays), and the operator's rewinds: run again from step N, or drop the
//! journal and start over (`Engine::rewind`).

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use mcp_tasks_engine::store::Lookup;
use mcp_tasks_engine::{EngineError, JournalExport, Rewind, StepRecord};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

use super::access::{fail, Operator};
use super::api::{shown_status, summary};
use crate::Server;

/// How much of a step's output (as JSON text) a task's view shows.
const OUTPUT_SHOWN: usize = 300;

/// One step as a task's view shows it: its output as JSON text, cut at [`OUTPUT_SHOWN`] bytes
/// (at a character's edge, with "…"), and its full size.
pub(crate) fn step_view(s: &StepRecord) -> Value {
    let text = s.output.to_string();
    let bytes = text.len();
    let shown = if bytes > OUTPUT_SHOWN {
        let mut cut = OUTPUT_SHOWN;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}…", &text[..cut])
    } else {
        text
    };
    json!({
        "seq": s.seq,
        "name": s.name,
        "attempt": s.attempt,
        "at": s.at,
        "durationMs": s.duration_ms,
        "error": s.error,
        "output": shown,
        "outputBytes": bytes,
    })
}

/// `GET /admin/api/tasks/{id}/journal`: the task's journal in full, as a [`JournalExport`].
pub(crate) async fn export(
    State(server): State<Arc<Server>>,
    _: Operator,
    Path(id): Path<String>,
) -> Response {
    let store = server.engine().store();
    let task = match store.get(&id).await {
        Ok(Lookup::Found(t)) => t,
        Ok(_) => return fail(StatusCode::NOT_FOUND, format!("no task {id}")),
        Err(e) => return fail(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    };
    let steps = match store.steps(&id).await {
        Ok(steps) => steps,
        Err(e) => return fail(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    };
    Json(JournalExport {
        task_id: task.id.clone(),
        tool: task.tool.clone(),
        arguments: (*task.arguments).clone(),
        attempt: task.attempt,
        checkpoint: task.checkpoint.clone(),
        steps,
    })
    .into_response()
}

/// What `POST /admin/api/tasks/{id}/journal/rewind` takes.
#[derive(Debug, Deserialize)]
pub(crate) struct RewindParams {
    /// The first step to drop (its place, `seq`): it and every step after run again.
    from: u32,
}

/// `POST /admin/api/tasks/{id}/journal/rewind?from=N`: drops steps N… and runs the task again.
pub(crate) async fn rewind(
    State(server): State<Arc<Server>>,
    Operator(who): Operator,
    Path(id): Path<String>,
    Query(p): Query<RewindParams>,
) -> Response {
    act(&server, &who, &id, Rewind::FromStep(p.from)).await
}

/// `POST /admin/api/tasks/{id}/journal/restart`: drops the journal and the checkpoint, and runs
/// the task again from the start.
pub(crate) async fn restart(
    State(server): State<Arc<Server>>,
    Operator(who): Operator,
    Path(id): Path<String>,
) -> Response {
    act(&server, &who, &id, Rewind::StartOver).await
}

async fn act(server: &Arc<Server>, who: &str, id: &str, rewind: Rewind) -> Response {
    match server.engine().rewind(id, rewind, who).await {
        Ok(done) => {
            Json(json!({"dropped": done.dropped, "task": summary(&done.task)})).into_response()
        }
        Err(EngineError::AlreadyTerminal(t)) => (
            StatusCode::CONFLICT,
            Json(json!({
                "error": format!(
                    "task {id} has finished ({}); a finished task is final: call the tool again \
                     for a new task",
                    shown_status(&t)
                ),
                "task": summary(&t),
            })),
        )
            .into_response(),
        Err(EngineError::NotFound) | Err(EngineError::Expired) => {
            fail(StatusCode::NOT_FOUND, format!("no task {id}"))
        }
        Err(e @ EngineError::CannotRewind(_)) => {
            fail(StatusCode::UNPROCESSABLE_ENTITY, format!("task {id}: {e}"))
        }
        Err(e) => fail(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}
