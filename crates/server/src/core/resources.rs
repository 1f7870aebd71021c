//! Resources, prompts and completion, shared by the wires: list, read, get, complete, subscriptions,
//! and the capabilities they add.

use mcp_tasks_engine::TaskHandler;
use mcp_tasks_protocol::jsonrpc::{ErrorObject, Message};
use serde_json::{json, Map, Value};
use std::sync::Arc;

use super::{Era, Failure, Server};
use crate::catalog::CatalogError;

/// The methods [`Server::catalog_request`] serves.
pub(crate) const CATALOG_METHODS: [&str; 6] = [
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "prompts/list",
    "prompts/get",
    "completion/complete",
];

impl Server {
    /// `resources/*`, `prompts/*` and `completion/complete`. A missing resource is -32002 on the
    /// session wire and -32602 on the stateless one (SEP-2164).
    pub(crate) async fn catalog_request(
        &self,
        method: &str,
        params: &Map<String, Value>,
        era: Era,
    ) -> Result<Value, Failure> {
        // What another server offers (a gateway upstream's) is read or rendered there.
        let name = |field: &str| params.get(field).and_then(Value::as_str);
        match method {
            "resources/read" => {
                if let Some(source) = name("uri").and_then(|u| self.catalog.source_of_resource(u)) {
                    return source
                        .read(name("uri").unwrap_or_default())
                        .await
                        .map_err(Failure::from);
                }
            }
            "prompts/get" => {
                if let Some(source) = name("name").and_then(|n| self.catalog.source_of_prompt(n)) {
                    let args = params
                        .get("arguments")
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_default();
                    return source
                        .get_prompt(name("name").unwrap_or_default(), &args)
                        .await
                        .map_err(Failure::from);
                }
            }
            _ => {}
        }
        let cursor = match params.get("cursor") {
            None | Some(Value::Null) => None,
            Some(Value::String(c)) => Some(c.as_str()),
            Some(_) => {
                return Err(ErrorObject::invalid_params(format!(
                    "{method}: cursor must be a string"
                ))
                .into())
            }
        };
        let size = self.config.page_size;
        let c = &self.catalog;
        let listed = |r: Result<Value, String>| {
            r.map_err(|e| Failure::from(ErrorObject::invalid_params(format!("{method}: {e}"))))
        };
        let failed = |e: CatalogError| -> Failure {
            match e {
                CatalogError::NotFound(m) if method == "resources/read" => {
                    let uri = params.get("uri").cloned().unwrap_or(Value::Null);
                    let code = if era == Era::Stateless {
                        -32602
                    } else {
                        -32002
                    };
                    ErrorObject::new(code, m)
                        .with_data(json!({"uri": uri}))
                        .into()
                }
                CatalogError::NotFound(m) | CatalogError::Invalid(m) => {
                    ErrorObject::invalid_params(m).into()
                }
            }
        };
        let string = |field: &str| {
            params.get(field).and_then(Value::as_str).ok_or_else(|| {
                Failure::from(ErrorObject::invalid_params(format!(
                    "{method}: missing string \"{field}\""
                )))
            })
        };
        match method {
            "resources/list" => listed(c.list_resources(cursor, size)),
            "resources/templates/list" => listed(c.list_templates(cursor, size)),
            "resources/read" => c.read(string("uri")?).map_err(failed),
            "prompts/list" => listed(c.list_prompts(cursor, size)),
            "prompts/get" => {
                let args = params
                    .get("arguments")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                c.get_prompt(string("name")?, &args).map_err(failed)
            }
            "completion/complete" => {
                let reference = params.get("ref").cloned().unwrap_or(Value::Null);
                let arg = params.get("argument").cloned().unwrap_or(Value::Null);
                let name = arg.get("name").and_then(Value::as_str).ok_or_else(|| {
                    ErrorObject::invalid_params("completion/complete: missing argument.name")
                })?;
                let value = arg.get("value").and_then(Value::as_str).unwrap_or("");
                c.complete(&reference, name, value).map_err(failed)
            }
            m => Err(ErrorObject::method_not_found(m).into()),
        }
    }

    /// The input-asking handler of the prompt named in `params`, if it has one: such a prompt is built
    /// like a plain tool call.
    pub(crate) fn prompt_handler(
        &self,
        params: &Map<String, Value>,
    ) -> Option<Arc<dyn TaskHandler>> {
        let name = params.get("name")?.as_str()?;
        self.catalog.prompt(name)?.handler.clone()
    }

    /// `resources/subscribe` / `resources/unsubscribe` for a session.
    pub(crate) fn subscribe(&self, session: &str, uri: &str, on: bool) -> Result<(), Failure> {
        if !self.catalog.exists(uri) {
            return Err(
                ErrorObject::new(-32002, format!("Resource not found: {uri}"))
                    .with_data(json!({"uri": uri}))
                    .into(),
            );
        }
        let mut subs = self.subscriptions.entry(session.to_string()).or_default();
        if on {
            subs.insert(uri.to_string());
        } else {
            subs.remove(uri);
        }
        Ok(())
    }

    /// Resource changes, for stateless listen streams.
    pub(crate) fn resource_changes(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.resource_events.subscribe()
    }

    /// Tells subscribed clients that a resource changed (`notifications/resources/updated`).
    pub fn resource_updated(&self, uri: &str) {
        let _ = self.resource_events.send(uri.to_string());
        for entry in self.subscriptions.iter() {
            if entry.value().contains(uri) {
                let msg =
                    Message::notification("notifications/resources/updated", json!({"uri": uri}));
                self.streams.deliver(entry.key(), "", vec![msg], false);
            }
        }
    }

    /// Capabilities beyond tools and tasks (resources, prompts, completions).
    pub(crate) fn catalog_capabilities(&self) -> Map<String, Value> {
        let mut m = Map::new();
        // Lists change only where another server's are passed through.
        let changes = !self.catalog.sources.is_empty();
        if self.catalog.has_resources() {
            m.insert(
                "resources".into(),
                json!({"subscribe": true, "listChanged": changes}),
            );
        }
        if self.catalog.has_prompts() {
            m.insert("prompts".into(), json!({"listChanged": changes}));
        }
        if self.catalog.has_resources() || self.catalog.has_prompts() {
            m.insert("completions".into(), json!({}));
        }
        m
    }
}
