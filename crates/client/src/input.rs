//! Questions a server asks while a tool runs (elicitation, sampling), answered by the caller's handler.

use futures::future::BoxFuture;
use mcp_tasks_protocol::jsonrpc::ErrorObject;
use serde_json::{json, Value};

/// Answers the questions a server asks inside a call or a task. Both wires use it: on 2025-11-25
/// they arrive as requests on a stream, on 2026-07-28 as `inputRequests`.
pub trait InputHandler: Send + Sync {
    /// Whether to declare the elicitation capability (form mode, and URL mode shown as a link).
    fn can_elicit(&self) -> bool {
        false
    }

    /// Whether to declare the sampling capability.
    fn can_sample(&self) -> bool {
        false
    }

    /// Answers an `elicitation/create` (its params) with an `ElicitResult`
    /// (`{"action": "accept" | "decline" | "cancel", "content"?}`).
    fn elicit<'a>(&'a self, params: &'a Value) -> BoxFuture<'a, Value> {
        let _ = params;
        Box::pin(async { json!({"action": "decline"}) })
    }

    /// Answers a `sampling/createMessage` (its params) with a `CreateMessageResult`, or refuses with
    /// a reason the server is told.
    fn sample<'a>(&'a self, params: &'a Value) -> BoxFuture<'a, Result<Value, String>> {
        let _ = params;
        Box::pin(async { Err("this client does not answer sampling requests".to_string()) })
    }
}

/// Declines every elicitation and refuses sampling.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoInput;

impl InputHandler for NoInput {}

/// Whether `method` is a question an [`InputHandler`] answers.
pub(crate) fn is_question(method: &str) -> bool {
    matches!(method, "elicitation/create" | "sampling/createMessage")
}

/// The answer to a server's request: a question goes to the handler, `ping` and `roots/list` are
/// answered here, anything else is not offered.
pub(crate) async fn answer(
    handler: &dyn InputHandler,
    method: &str,
    params: &Value,
) -> Result<Value, ErrorObject> {
    match method {
        "elicitation/create" => Ok(handler.elicit(params).await),
        "sampling/createMessage" => handler
            .sample(params)
            .await
            .map_err(|why| ErrorObject::new(-32600, format!("sampling refused: {why}"))),
        "roots/list" => Ok(json!({"roots": []})),
        "ping" => Ok(json!({})),
        m => Err(ErrorObject::method_not_found(m)),
    }
}
