//! How answers go out: an HTTP error with a JSON-RPC body, a reply with what travels beside it
//! (status, `Retry-After`, a challenge, the task it announces), as JSON or as an SSE stream.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, Stream, StreamExt};
use mcp_tasks_protocol::jsonrpc::{ErrorObject, Message, RequestId};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

use super::super::strict::Accepts;
use crate::core::{Reply, Server};

/// An HTTP answer that is not a reply to a request: a JSON-RPC error with its status.
pub(super) struct HttpError {
    pub(super) status: StatusCode,
    pub(super) id: Option<RequestId>,
    pub(super) error: ErrorObject,
    /// `WWW-Authenticate` for a 401 or a 403.
    pub(super) challenge: Option<String>,
    /// `Retry-After` (seconds) for a 503; a byte, to keep the error small (clippy's
    /// `result_large_err`): nothing here asks a client to wait longer.
    pub(super) retry_after_secs: Option<u8>,
}

impl HttpError {
    pub(super) fn new(status: StatusCode, error: ErrorObject) -> HttpError {
        HttpError {
            status,
            id: None,
            error,
            challenge: None,
            retry_after_secs: None,
        }
    }
    pub(super) fn bad_request(message: impl std::fmt::Display) -> HttpError {
        HttpError::new(
            StatusCode::BAD_REQUEST,
            ErrorObject::invalid_request(message),
        )
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let mut resp = json_response(self.status, &Message::error(self.id, self.error));
        if let Some(v) = self.challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        if let Some(secs) = self.retry_after_secs {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(u16::from(secs)));
        }
        resp
    }
}

/// How a reply goes out, carried beside its message (which travels on the request's channel).
pub(super) struct Envelope {
    pub(super) http_status: u16,
    pub(super) retry_after_ms: Option<u64>,
    /// `WWW-Authenticate` of a call the caller's credentials do not allow.
    pub(super) challenge: Option<String>,
    /// The task the reply tells the client about for the first time.
    pub(super) announces: Option<String>,
}

impl Envelope {
    pub(super) fn of(reply: Reply) -> (Envelope, Message) {
        let envelope = Envelope {
            http_status: reply.http_status,
            retry_after_ms: reply.retry_after_ms,
            challenge: reply.challenge,
            announces: reply.announces,
        };
        (envelope, reply.message)
    }

    /// The reply as a JSON response. One that announces a new task tells the server once its body
    /// has been written, so the task's messages on other streams cannot overtake it.
    pub(super) fn json(self, server: Arc<Server>, message: &Message) -> Response {
        let status = StatusCode::from_u16(self.http_status).unwrap_or(StatusCode::OK);
        let mut resp = json_response(status, message);
        if let Some(ms) = self.retry_after_ms {
            // Whole seconds, rounded up: a client that waits this long is let through.
            let secs = ms.div_ceil(1000).max(1);
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        if let Some(v) = self.challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        if let Some(task) = self.announces {
            let body = std::mem::take(resp.body_mut());
            *resp.body_mut() = then_announce(body, move || server.task_announced(&task));
        }
        resp
    }
}

/// `body`, then `announce` once the connection has written it out (see [`after_the_write`]).
fn then_announce(body: Body, announce: impl FnOnce() + Send + 'static) -> Body {
    let written = stream::once(async move {
        after_the_write(announce);
        None
    })
    .filter_map(|x: Option<Result<Bytes, axum::Error>>| async move { x });
    Body::from_stream(body.into_data_stream().chain(written))
}

/// Runs `announce` once the connection task that polls the body at its end has written what it
/// took. hyper asks a body for more as soon as it has taken a frame, and writes its buffer to the
/// socket only after: an announcement made inside that poll could send the task's first question
/// on the GET stream before the reply that names the task had left (seen as a rare failure of the
/// ext-tasks interop test, the question 2 ms ahead of the reply). A task spawned from the
/// connection's task goes to its worker's next-task slot and runs when that poll is over, after
/// the write. (Making the body wait one poll instead cost a second write per reply: the reply,
/// then the chunked body's end.)
fn after_the_write(announce: impl FnOnce() + Send + 'static) {
    tokio::spawn(async move { announce() });
}

pub(super) fn json_response(status: StatusCode, msg: &Message) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        msg.to_json(),
    )
        .into_response()
}

/// One message as the whole answer: a JSON body, or a one-event SSE stream for a client that
/// accepts only streams.
pub(super) fn message_response(message: &Message, accepts: Accepts) -> Response {
    if accepts.json {
        return json_response(StatusCode::OK, message);
    }
    let event = Event::default().event("message").data(message.to_json());
    Sse::new(stream::once(async move { Ok::<_, Infallible>(event) })).into_response()
}

pub(super) fn is_reply(m: &Message) -> bool {
    matches!(m, Message::Response(_) | Message::Error(_))
}

/// An SSE response from a channel; it ends after the reply, and then tells the server the reply was
/// written.
pub(super) fn sse(
    server: Arc<Server>,
    keep_alive: Duration,
    first: Option<Message>,
    rx: mpsc::Receiver<Message>,
    mut envelope: tokio::sync::oneshot::Receiver<Envelope>,
) -> Response {
    let rest = stream::unfold((rx, false), move |(mut rx, done)| async move {
        if done {
            return None;
        }
        let m = rx.recv().await?;
        let finished = is_reply(&m);
        Some((m, (rx, finished)))
    });
    // Polled once the last event has been handed on: the reply (if any) is out.
    let written = stream::once(async move {
        if let Some(task) = envelope.try_recv().ok().and_then(|e| e.announces) {
            after_the_write(move || server.task_announced(&task));
        }
        None
    })
    .filter_map(|x: Option<Message>| async move { x });
    let events: std::pin::Pin<Box<dyn Stream<Item = Result<Event, Infallible>> + Send>> = Box::pin(
        stream::iter(first)
            .chain(rest)
            .chain(written)
            .map(|m| Ok(Event::default().event("message").data(m.to_json()))),
    );
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(keep_alive))
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::{Context, Poll};

    #[tokio::test(flavor = "current_thread")]
    async fn a_reply_announces_its_task_only_after_the_poll_that_ends_it() {
        let announced = Arc::new(AtomicBool::new(false));
        let told = announced.clone();
        let mut body = then_announce(Body::from("the reply"), move || {
            told.store(true, Ordering::SeqCst)
        });
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut poll = || std::pin::Pin::new(&mut body).poll_frame(&mut cx);
        match poll() {
            Poll::Ready(Some(Ok(frame))) => assert!(frame.is_data()),
            _ => panic!("the reply's bytes come first"),
        }
        assert!(matches!(poll(), Poll::Ready(None)));
        // hyper writes its buffer after the poll that ended the body: nothing is announced in it.
        assert!(!announced.load(Ordering::SeqCst));
        tokio::task::yield_now().await;
        assert!(announced.load(Ordering::SeqCst));
    }
}
