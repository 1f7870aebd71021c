//! The front door: what transports hand a message to. It runs the wire module [`classify`] chose,
//! and starts the background work (recovery, sweeping, the event router).
//!
//! [`classify`]: crate::wire::era::classify

use mcp_tasks_engine::store::StoreError;
use mcp_tasks_engine::InputResponse;
use mcp_tasks_protocol::jsonrpc::{ErrorObject, Message, Notification, Request, RequestId};
use serde_json::Value;
use std::sync::Arc;

use crate::core::streams::StreamSender;
use crate::core::{Era, Failure, Peer, Reply, Server};
use crate::session::Session;
use crate::wire::{async_tools, era_2025, era_2026};

/// Which transport a message came over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Streamable HTTP.
    Http,
    /// stdio.
    Stdio,
}

impl Server {
    /// Recovers interrupted tasks, starts the sweeper and the router that sends task events to client
    /// streams. Returns the number of tasks recovered.
    pub async fn start(self: &Arc<Self>) -> Result<usize, StoreError> {
        let recovered = self.engine().start().await?;
        if self.authenticator().oauth().is_some() {
            let server = self.clone();
            tokio::spawn(async move { server.authenticator().prefetch_keys().await });
        }
        // Anonymous sessions idle out sooner than the engine's sweep comes round: the caches are
        // swept four times within their idle limit (and their open streams kept alive as often).
        let sweep = self
            .engine()
            .config()
            .sweep_interval
            .min(self.authenticator().anonymous_sessions().idle / 4);
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(sweep.max(std::time::Duration::from_millis(100)));
            loop {
                tick.tick().await;
                let Some(server) = weak.upgrade() else { break };
                server.sweep_caches().await;
            }
        });
        // Held messages of tasks whose announcing reply was never written go out after 10 s.
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tick.tick().await;
                let Some(server) = weak.upgrade() else { break };
                server.expire_announcements(&crate::wire::notifications_for);
            }
        });
        // Replies written on other replicas open the gate here too.
        let mut peer_announced = self.engine().notifier().subscribe_peer_announcements();
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let task = match peer_announced.recv().await {
                    Ok(task) => task,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(_) => break,
                };
                let Some(server) = weak.upgrade() else { break };
                server.announced(&task, &crate::wire::notifications_for);
            }
        });
        self.start_peering(crate::wire::notifications_for);
        self.start_webhooks();
        self.start_events(crate::wire::events::input_renderer());
        let mut events = self.engine().notifier().subscribe_all();
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let event = match events.recv().await {
                    Ok(e) => e,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        tracing::debug!(skipped = n, "notification router lagged; clients will see the state on their next poll");
                        continue;
                    }
                    Err(_) => break,
                };
                let Some(server) = weak.upgrade() else { break };
                server.route_event(&event, &crate::wire::notifications_for);
            }
        });
        Ok(recovered)
    }

    /// Answers `initialize` for `peer`: negotiates the version and creates the session.
    pub(crate) async fn initialize(
        &self,
        peer: &Peer,
        params: Option<&Value>,
    ) -> Result<(Arc<Session>, Value), Failure> {
        let span = tracing::info_span!("request", method = "initialize", principal = %peer.name());
        let started = std::time::Instant::now();
        let done =
            tracing::Instrument::instrument(era_2025::initialize(self, peer, params), span).await;
        tracing::debug!(
            method = %"initialize",
            principal = %peer.name(),
            status = %if done.is_ok() { "ok" } else { "error" },
            duration_ms = %format_args!("{:.2}", started.elapsed().as_secs_f64() * 1e3),
            "request handled"
        );
        done
    }

    /// Handles one request of wire form `era` and returns the reply, or `None` when the client
    /// cancelled it (with `notifications/cancelled`, or by closing the stream of a stateless HTTP
    /// request). Messages related to the request (progress, logs, input requests) go to `out` first.
    pub(crate) async fn handle_request(
        self: &Arc<Self>,
        era: Era,
        peer: &Peer,
        transport: Transport,
        req: Request,
        out: StreamSender,
    ) -> Option<Reply> {
        // On the stateless HTTP wire a request is cancelled by closing its stream, never by
        // `notifications/cancelled` (which anyone could send for a guessable id).
        let by_stream = era == Era::Stateless && transport == Transport::Http;
        let session = peer.session_id().to_string();
        let id = req.id.clone();
        let started = std::time::Instant::now();
        let method = req.method.clone();
        let cancel = if by_stream {
            tokio_util::sync::CancellationToken::new()
        } else {
            self.track_request(&session, &id)
        };
        let closed = out.clone();
        let work = crate::core::CREATED.scope(std::cell::Cell::new(None), async {
            let result = match era {
                Era::Session => era_2025::dispatch(self, peer, req, out, cancel.clone()).await,
                Era::Stateless => era_2026::dispatch(self, peer, req, out, cancel.clone()).await,
                Era::AsyncTools => {
                    async_tools::dispatch(self, peer, req, out, cancel.clone()).await
                }
            };
            let mut reply = Reply::of(id.clone(), result);
            reply.announces = crate::core::CREATED.with(|c| c.take());
            reply
        });
        // Every log line of the request carries its method and principal, and, once known, the task
        // it made or is about.
        let span = tracing::info_span!("request", method = %method, principal = %peer.name(), task = tracing::field::Empty);
        let work = tracing::Instrument::instrument(work, span);
        let reply = tokio::select! {
            r = work => Some(r),
            _ = cancel.cancelled() => None,
            _ = closed.closed(), if by_stream => { cancel.cancel(); None }
        };
        if !by_stream {
            self.untrack_request(&session, &id);
        }
        let outcome = match &reply {
            None => "cancelled",
            Some(r) if matches!(r.message, mcp_tasks_protocol::jsonrpc::Message::Error(_)) => {
                "error"
            }
            Some(_) => "ok",
        };
        self.metrics().request(&method, outcome, started.elapsed());
        // One line for every request, also those that make no task (discovery, lists, plain calls).
        let code = match reply.as_ref().map(|r| &r.message) {
            Some(mcp_tasks_protocol::jsonrpc::Message::Error(e)) => Some(e.error.code),
            _ => None,
        };
        tracing::debug!(
            method = %method,
            principal = %peer.name(),
            status = %outcome,
            code,
            duration_ms = %format_args!("{:.2}", started.elapsed().as_secs_f64() * 1e3),
            "request handled"
        );
        reply
    }

    /// The transport has written `reply` to the client: messages about the task it announces may
    /// follow now. Call it for every reply (it does nothing for most).
    pub fn reply_written(&self, reply: &Reply) {
        if let Some(task) = &reply.announces {
            self.task_announced(task);
        }
    }

    /// Opens a session's standalone stream (the HTTP GET stream); events held for it go out first.
    pub(crate) fn open_standalone(
        &self,
        session: &str,
        tx: StreamSender,
    ) -> crate::core::streams::StreamGuard {
        self.open_standalone_with(session, tx, &crate::wire::notifications_for)
    }

    /// The reply that tells the client about `task` has been written.
    pub(crate) fn task_announced(&self, task: &str) {
        self.announced(task, &crate::wire::notifications_for);
        // The client's stream may be held by another replica, which holds the task's messages
        // until it hears this.
        self.engine().notifier().announce(task);
    }

    /// Handles one notification from the client.
    pub(crate) async fn handle_notification(&self, peer: &Peer, n: Notification) {
        match n.method.as_str() {
            "notifications/cancelled" => {
                let Some(id) = n
                    .params
                    .as_ref()
                    .and_then(|p| p.get("requestId"))
                    .and_then(|v| serde_json::from_value::<RequestId>(v.clone()).ok())
                else {
                    return;
                };
                if self.cancel_request(peer.session_id(), &id) {
                    tracing::debug!(request = %id, "request cancelled by client");
                }
                // An operation the call started is cancelled too, also after the call was answered.
                if self.cancel_operation_of(peer, &id).await {
                    tracing::debug!(request = %id, "operation cancelled by client");
                }
            }
            "notifications/initialized"
            | "notifications/progress"
            | "notifications/roots/list_changed" => {}
            other => tracing::debug!(method = other, "ignored notification"),
        }
    }

    /// Handles a response the client sent to a request of this server (an input request of a task, or
    /// of a plain call). An answer to an unknown or already answered request changes nothing and is
    /// reported as an error.
    pub(crate) async fn handle_client_response(
        self: &Arc<Self>,
        peer: &Peer,
        msg: Message,
    ) -> Result<(), ErrorObject> {
        let (id, response) = match msg {
            Message::Response(r) => (r.id, InputResponse::Result { value: r.result }),
            Message::Error(e) => match e.id {
                Some(id) => (
                    id,
                    InputResponse::Error {
                        code: e.error.code,
                        message: e.error.message,
                        data: e.error.data,
                    },
                ),
                None => {
                    return Err(ErrorObject::invalid_request(
                        "an error response needs the id of the request it answers",
                    ))
                }
            },
            _ => return Ok(()),
        };
        let key = match id {
            RequestId::String(key) => key,
            other => {
                return Err(ErrorObject::invalid_params(format!(
                    "no pending request of this server has id {other}"
                )))
            }
        };
        self.answer(peer, &key, response)
            .await
            .map_err(|f: Failure| f.error)
    }
}
