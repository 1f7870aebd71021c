//! An upstream's resources, resource templates and prompts, passed through: listed as the upstream
//! last listed them (again when it says its lists changed), read and rendered by the upstream.
//! Prompt names take the upstream's prefix like its tools; resource URIs stay as they are.

use async_trait::async_trait;
use mcp_tasks_client::{Client, ClientError};
use mcp_tasks_protocol::error_codes;
use mcp_tasks_protocol::jsonrpc::ErrorObject;
use serde_json::{json, Map, Value};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::Link;
use crate::catalog::{CatalogSource, Listed};

/// Most pages read of one list (a server that never stops paging is cut off there).
const MAX_PAGES: usize = 100;
/// How long a read or prompt waits for a restarting upstream.
const WAIT_FOR_UPSTREAM: Duration = Duration::from_secs(30);

/// One upstream's resources and prompts.
pub(crate) struct UpstreamCatalog {
    link: Arc<Link>,
    prefix: Option<String>,
    listed: RwLock<Listed>,
    /// Whether the upstream offers resources, and prompts (from its capabilities at start-up).
    offers: RwLock<(bool, bool)>,
}

impl UpstreamCatalog {
    pub(crate) fn new(link: Arc<Link>, prefix: Option<String>) -> UpstreamCatalog {
        UpstreamCatalog {
            link,
            prefix,
            listed: RwLock::default(),
            offers: RwLock::new((false, false)),
        }
    }

    /// Lists the upstream's resources, templates and prompts again (all pages).
    pub(crate) async fn refresh(&self, client: &Client) -> Result<(), ClientError> {
        let caps = client.capabilities();
        let offers = (
            caps.get("resources").is_some_and(Value::is_object),
            caps.get("prompts").is_some_and(Value::is_object),
        );
        let mut listed = Listed::default();
        if offers.0 {
            listed.resources = all_pages(client, "resources/list", "resources").await?;
            // Templates are optional even for servers with resources.
            listed.templates = all_pages(client, "resources/templates/list", "resourceTemplates")
                .await
                .unwrap_or_default();
        }
        if offers.1 {
            listed.prompts = all_pages(client, "prompts/list", "prompts").await?;
            if let Some(p) = &self.prefix {
                for prompt in &mut listed.prompts {
                    if let Some(name) = prompt.get("name").and_then(Value::as_str) {
                        prompt["name"] = json!(format!("{p}_{name}"));
                    }
                }
            }
        }
        *self.offers.write().unwrap_or_else(|e| e.into_inner()) = offers;
        *self.listed.write().unwrap_or_else(|e| e.into_inner()) = listed;
        Ok(())
    }

    async fn client(&self) -> Result<Client, ErrorObject> {
        self.link
            .client(WAIT_FOR_UPSTREAM)
            .await
            .map_err(|why| upstream_error(self.link.name(), &why))
    }
}

/// Every page of a list.
async fn all_pages(client: &Client, method: &str, field: &str) -> Result<Vec<Value>, ClientError> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let r = client.request(method, params, &|_| {}).await?;
        out.extend(
            r.get(field)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        );
        cursor = r
            .get("nextCursor")
            .and_then(Value::as_str)
            .map(String::from);
        if cursor.is_none() {
            break;
        }
    }
    Ok(out)
}

fn upstream_error(upstream: &str, why: &str) -> ErrorObject {
    ErrorObject::new(
        error_codes::INTERNAL_ERROR,
        format!("upstream {upstream}: {why}"),
    )
}

/// The upstream's answer as ours: its JSON-RPC error as it is, anything else as an internal error
/// naming the upstream.
fn answer(upstream: &str, r: Result<Value, ClientError>) -> Result<Value, ErrorObject> {
    match r {
        Ok(v) => Ok(v),
        Err(ClientError::Rpc {
            code,
            message,
            data,
            ..
        }) => Err(ErrorObject {
            code,
            message,
            data,
        }),
        Err(e) => Err(upstream_error(upstream, &e.to_string())),
    }
}

#[async_trait]
impl CatalogSource for UpstreamCatalog {
    fn offers(&self) -> (bool, bool) {
        *self.offers.read().unwrap_or_else(|e| e.into_inner())
    }

    fn listed(&self) -> Listed {
        self.listed
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    async fn read(&self, uri: &str) -> Result<Value, ErrorObject> {
        let client = self.client().await?;
        let r = client
            .request("resources/read", json!({"uri": uri}), &|_| {})
            .await;
        answer(self.link.name(), r)
    }

    async fn get_prompt(
        &self,
        name: &str,
        arguments: &Map<String, Value>,
    ) -> Result<Value, ErrorObject> {
        let upstream_name = match &self.prefix {
            Some(p) => name.strip_prefix(&format!("{p}_")).unwrap_or(name),
            None => name,
        };
        let client = self.client().await?;
        let r = client
            .request(
                "prompts/get",
                json!({"name": upstream_name, "arguments": arguments}),
                &|_| {},
            )
            .await;
        answer(self.link.name(), r)
    }
}
