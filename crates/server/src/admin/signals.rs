//! Signals in the admin API: an operator sends a task a signal (`POST
//! /admin/api/tasks/{id}/signal`, for `mcp-tasks admin signal` and the dashboard), and a task's
//! view lists the signals sent to it.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use mcp_tasks_engine::{SignalError, SignalRecord, SignalSend};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;

use super::access::{fail, Operator};
use crate::Server;

/// How much of a signal's payload (as JSON text) a task's view shows.
const PAYLOAD_SHOWN: usize = 300;

/// One signal as a task's view shows it (its payload cut short).
pub(crate) fn signal_view(s: &SignalRecord) -> Value {
    let text = s.payload.to_string();
    let shown = if text.len() > PAYLOAD_SHOWN {
        let mut cut = PAYLOAD_SHOWN;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}…", &text[..cut])
    } else {
        text.clone()
    };
    json!({
        "seq": s.seq,
        "name": s.name,
        "sender": s.sender,
        "at": s.at,
        "payload": shown,
        "payloadBytes": text.len(),
    })
}

/// What `POST /admin/api/tasks/{id}/signal` takes.
#[derive(Debug, Deserialize)]
pub(crate) struct SignalBody {
    /// The signal's name.
    name: String,
    /// What it carries (null when left out).
    #[serde(default)]
    payload: Value,
    /// A key: sending again with it is the same signal.
    #[serde(default)]
    key: Option<String>,
}

/// `POST /admin/api/tasks/{id}/signal`: sends the task a signal as the operator.
pub(crate) async fn send(
    State(server): State<Arc<Server>>,
    Operator(who): Operator,
    Path(id): Path<String>,
    Json(body): Json<SignalBody>,
) -> Response {
    let send = SignalSend {
        name: body.name,
        payload: body.payload,
        sender: format!("operator {who}"),
        key: body.key,
        owner: None,
    };
    match server.engine().signal(&id, send).await {
        Ok(sent) => {
            tracing::info!(target: "mcp_tasks::audit", task = %id, operator = %who, signal = %sent.signal.name, seq = sent.signal.seq, "operator sent a signal");
            Json(json!({
                "taskId": id,
                "signal": signal_view(&sent.signal),
                "duplicate": !sent.fresh,
            }))
            .into_response()
        }
        Err(SignalError::NotFound(_)) => fail(StatusCode::NOT_FOUND, format!("no task {id}")),
        Err(e @ SignalError::Finished { .. }) => fail(StatusCode::CONFLICT, e.to_string()),
        Err(e @ SignalError::Store(_)) => fail(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        Err(e) => fail(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
    }
}
