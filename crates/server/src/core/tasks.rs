//! Tasks as callers see them, era-neutral: the lookup that makes another principal's task look like a
//! missing one, listing, cancel, and waiting for the end.

use mcp_tasks_engine::store::{ListQuery, Lookup, TaskPage};
use mcp_tasks_engine::{EngineError, TaskRecord};
use mcp_tasks_protocol::jsonrpc::{ErrorObject, RequestId};

use super::{internal, Failure, Peer, Server};
use crate::core::streams::StreamSender;

/// Why a caller cannot have a task.
#[derive(Debug)]
pub(crate) enum Unavailable {
    /// No such task for this caller: never existed, another principal's, or of another wire.
    NotFound,
    /// The caller's task existed, but its retention ran out.
    Expired,
    /// The store failed.
    Internal(Failure),
}

impl Unavailable {
    /// The error in the words of the task wires.
    pub(crate) fn task_error(self) -> Failure {
        match self {
            Unavailable::NotFound => {
                ErrorObject::invalid_params("Failed to retrieve task: Task not found").into()
            }
            Unavailable::Expired => {
                ErrorObject::invalid_params("Failed to retrieve task: Task has expired").into()
            }
            Unavailable::Internal(f) => f,
        }
    }
}

/// What a cancel did.
pub(crate) enum Cancel {
    /// The task is now cancelled (durably) and its handler told to stop.
    Done(TaskRecord),
    /// The task had already finished; carries it as it is.
    AlreadyFinished(TaskRecord),
}

impl Server {
    /// The task `peer` started with key `key` on wire `era` (an operation token), if it is still
    /// stored.
    pub(crate) async fn task_by_key(
        &self,
        peer: &Peer,
        era: &str,
        key: &str,
    ) -> Result<Option<TaskRecord>, Failure> {
        let stored = super::calls::scoped_key(peer, era, key);
        let found = self
            .engine
            .store()
            .find_by_key(peer.name(), &stored)
            .await
            .map_err(internal)?;
        Ok(found.filter(|t| t.era == era))
    }

    /// Cancels the operation that request `id` of `peer`'s session started, if any and still running;
    /// returns whether there was one.
    pub(crate) async fn cancel_operation_of(&self, peer: &Peer, id: &RequestId) -> bool {
        let Some((_, task)) = self
            .operations
            .remove(&(peer.session_id().to_string(), id.clone()))
        else {
            return false;
        };
        match self
            .visible_task(peer, &task, "notifications/cancelled", |_| true)
            .await
        {
            Ok(t) => {
                let _ = self.cancel_task(&t).await;
                true
            }
            Err(_) => false,
        }
    }

    /// Forgets the request that started a finished operation.
    pub(crate) fn forget_operation(&self, task: &str) {
        self.operations.retain(|_, t| t != task);
    }

    /// The task `id` if `peer` may see it and `era_visible` accepts its era; anything else answers
    /// exactly like a missing task.
    pub(crate) async fn visible_task(
        &self,
        peer: &Peer,
        id: &str,
        method: &str,
        era_visible: impl Fn(&str) -> bool,
    ) -> Result<TaskRecord, Unavailable> {
        let found = self
            .engine
            .get(id)
            .await
            .map_err(|e| Unavailable::Internal(internal(e)))?;
        match found {
            Lookup::Found(t) if t.owner == peer.name() && era_visible(&t.era) => {
                tracing::Span::current().record("task", t.id.as_str());
                Ok(t)
            }
            Lookup::Expired { owner, .. } if owner == peer.name() => Err(Unavailable::Expired),
            _ => {
                // Many of these from one principal look like someone guessing ids.
                tracing::info!(target: "mcp_tasks::audit", principal = %peer.name(), method, "task lookup failed");
                Err(Unavailable::NotFound)
            }
        }
    }

    /// A page of the caller's tasks, oldest first. Anonymous callers are told apart only by session;
    /// authenticated ones see the tasks of all their sessions.
    pub(crate) async fn list_tasks(
        &self,
        peer: &Peer,
        cursor: Option<String>,
        method: &str,
    ) -> Result<TaskPage, Failure> {
        let q = ListQuery {
            owner: peer.name().to_string(),
            session: peer
                .anonymous_scope()
                .map(|_| peer.session_id().to_string()),
            cursor,
            limit: self.config.page_size.max(1),
        };
        self.engine
            .store()
            .list(&q)
            .await
            .map_err(internal)?
            .map_err(|_| ErrorObject::invalid_params(format!("{method}: invalid cursor")).into())
    }

    /// Cancels a task the caller can see (durably, before this returns).
    pub(crate) async fn cancel_task(&self, task: &TaskRecord) -> Result<Cancel, Unavailable> {
        match self.engine.cancel(&task.id, None).await {
            Ok(rec) => Ok(Cancel::Done(rec)),
            Err(EngineError::AlreadyTerminal(cur)) => Ok(Cancel::AlreadyFinished(*cur)),
            Err(EngineError::NotFound) => Err(Unavailable::NotFound),
            Err(e) => Err(Unavailable::Internal(internal(e))),
        }
    }

    /// Waits until a task is finished, while the client keeps `out` open and the server runs.
    pub(crate) async fn wait_finished(
        &self,
        id: &str,
        out: &StreamSender,
    ) -> Result<TaskRecord, Unavailable> {
        let done = tokio::select! {
            r = self.engine.wait_terminal(id) => r,
            _ = out.closed() => return Err(Unavailable::Internal(ErrorObject::internal("client went away").into())),
            _ = self.stopping() => return Err(Unavailable::Internal(ErrorObject::internal("the server is shutting down; ask again").into())),
        };
        match done {
            Ok(t) => Ok(t),
            Err(EngineError::Expired) => Err(Unavailable::Expired),
            Err(EngineError::NotFound) => Err(Unavailable::NotFound),
            Err(e) => Err(Unavailable::Internal(internal(e))),
        }
    }
}
