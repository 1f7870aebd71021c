//! The work behind a tool, as the engine sees it.

use async_trait::async_trait;
use serde_json::Value;
use std::sync::Arc;

use crate::context::TaskContext;
use crate::model::Outcome;

/// The work behind a tool: an async function from arguments to an [`Outcome`].
///
/// Handlers should watch [`TaskContext::cancelled`] and return promptly once it fires; a handler that
/// does not is dropped after [`EngineConfig::cancel_grace`](crate::EngineConfig::cancel_grace).
#[async_trait]
pub trait TaskHandler: Send + Sync + 'static {
    /// Runs the work. The arguments are the task's own (shared with its record, however large):
    /// read them in place, or clone what must be owned.
    async fn run(&self, ctx: TaskContext, arguments: Arc<Value>) -> Outcome;
}
