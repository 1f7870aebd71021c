//! The work behind a tool, as the engine sees it.

use async_trait::async_trait;
use serde_json::Value;

use crate::context::TaskContext;
use crate::model::Outcome;

/// The work behind a tool: an async function from arguments to an [`Outcome`].
///
/// Handlers should watch [`TaskContext::cancelled`] and return promptly once it fires; a handler that
/// does not is dropped after [`EngineConfig::cancel_grace`](crate::EngineConfig::cancel_grace).
#[async_trait]
pub trait TaskHandler: Send + Sync + 'static {
    /// Runs the work.
    async fn run(&self, ctx: TaskContext, arguments: Value) -> Outcome;
}
