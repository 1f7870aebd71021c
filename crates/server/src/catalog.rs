//! Resources, resource templates and prompts: what a server offers besides tools, with list (paged),
//! read / get, argument completion, and resource subscriptions.

use mcp_tasks_protocol::jsonrpc::ErrorObject;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// Produces the contents of a resource (`TextResourceContents` / `BlobResourceContents` objects) for a
/// URI and the variables a template matched (empty for plain resources).
pub type ReadFn =
    Arc<dyn Fn(&str, &HashMap<String, String>) -> Result<Vec<Value>, String> + Send + Sync>;

/// Produces a prompt's messages from its arguments; `Err` names what is wrong with them.
pub type RenderFn = Arc<dyn Fn(&Map<String, Value>) -> Result<Vec<Value>, String> + Send + Sync>;

/// Completion candidates for an argument, given what the user typed so far.
pub type CompleteFn = Arc<dyn Fn(&str, &str) -> Vec<String> + Send + Sync>;

/// A resource with a fixed URI.
#[derive(Clone)]
pub struct Resource {
    /// The `Resource` object shown by `resources/list` (uri, name, title, mimeType, …).
    pub meta: Value,
    /// Its contents.
    pub read: ReadFn,
}

/// A family of resources named by an RFC 6570 level-1 URI template (`test://items/{id}`).
#[derive(Clone)]
pub struct ResourceTemplate {
    /// The `ResourceTemplate` object shown by `resources/templates/list` (uriTemplate, name, …).
    pub meta: Value,
    /// Contents for a matched URI.
    pub read: ReadFn,
    /// Completion for template variables.
    pub complete: Option<CompleteFn>,
}

/// A prompt template.
#[derive(Clone)]
pub struct Prompt {
    /// The `Prompt` object shown by `prompts/list` (name, title, description, arguments).
    pub meta: Value,
    /// Its messages.
    pub render: RenderFn,
    /// Completion for its arguments.
    pub complete: Option<CompleteFn>,
    /// A handler that builds the `GetPromptResult` and may ask the client for input while doing so
    /// (then `render` is not used).
    pub handler: Option<Arc<dyn mcp_tasks_engine::TaskHandler>>,
}

/// What a [`CatalogSource`] offers now, as its lists show it.
#[derive(Clone, Debug, Default)]
pub struct Listed {
    /// `Resource` objects.
    pub resources: Vec<Value>,
    /// `ResourceTemplate` objects.
    pub templates: Vec<Value>,
    /// `Prompt` objects.
    pub prompts: Vec<Value>,
}

/// Resources and prompts of another server, passed through (a gateway upstream's): listed after
/// the server's own, read and rendered by the source.
#[async_trait::async_trait]
pub trait CatalogSource: Send + Sync {
    /// Whether it offers resources, and prompts (the server's capabilities say so then).
    fn offers(&self) -> (bool, bool);
    /// What it offers now.
    fn listed(&self) -> Listed;
    /// `resources/read` of `uri`, which its list names or one of its templates matches.
    async fn read(&self, uri: &str) -> Result<Value, ErrorObject>;
    /// `prompts/get` of prompt `name`, which its list names.
    async fn get_prompt(
        &self,
        name: &str,
        arguments: &Map<String, Value>,
    ) -> Result<Value, ErrorObject>;
}

/// Everything a server offers besides tools.
#[derive(Clone, Default)]
pub struct Catalog {
    /// Resources, in list order.
    pub resources: Vec<Resource>,
    /// Resource templates, in list order.
    pub templates: Vec<ResourceTemplate>,
    /// Prompts, in list order.
    pub prompts: Vec<Prompt>,
    /// Other servers' resources and prompts, listed after these.
    pub sources: Vec<Arc<dyn CatalogSource>>,
}

/// Why a read, get or completion failed.
#[derive(Debug, Clone, PartialEq)]
pub enum CatalogError {
    /// No such resource / prompt.
    NotFound(String),
    /// Bad arguments.
    Invalid(String),
}

/// Matches `uri` against a level-1 template; returns the variables.
pub fn match_template(template: &str, uri: &str) -> Option<HashMap<String, String>> {
    let mut vars = HashMap::new();
    let mut rest = uri;
    let mut t = template;
    while !t.is_empty() {
        match t.find('{') {
            None => return (rest == t).then_some(vars),
            Some(open) => {
                let literal = &t[..open];
                rest = rest.strip_prefix(literal)?;
                let close = t[open..].find('}')? + open;
                let name = &t[open + 1..close];
                t = &t[close + 1..];
                // The variable runs to the next literal character (or the end), never across '/'.
                let stop = t.chars().next();
                let end = rest
                    .find(|c: char| Some(c) == stop || c == '/')
                    .unwrap_or(rest.len());
                if end == 0 {
                    return None;
                }
                vars.insert(name.to_string(), rest[..end].to_string());
                rest = &rest[end..];
            }
        }
    }
    rest.is_empty().then_some(vars)
}

fn page<T>(
    items: &[T],
    cursor: Option<&str>,
    size: usize,
    prefix: &str,
) -> Result<(std::ops::Range<usize>, Option<String>), String> {
    let start = match cursor {
        None => 0,
        Some(c) => c
            .strip_prefix(prefix)
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|&n| n <= items.len())
            .ok_or_else(|| format!("invalid cursor {c:?}"))?,
    };
    let end = (start + size.max(1)).min(items.len());
    Ok((
        start..end,
        (end < items.len()).then(|| format!("{prefix}{end}")),
    ))
}

impl Catalog {
    /// Whether there is anything to offer (capabilities are advertised only then).
    pub fn has_resources(&self) -> bool {
        !self.resources.is_empty()
            || !self.templates.is_empty()
            || self.sources.iter().any(|s| s.offers().0)
    }
    /// Whether there are prompts.
    pub fn has_prompts(&self) -> bool {
        !self.prompts.is_empty() || self.sources.iter().any(|s| s.offers().1)
    }

    /// A page of `items` as `{field: [...], nextCursor}`.
    fn page_of(
        items: Vec<Value>,
        field: &str,
        cursor: Option<&str>,
        size: usize,
        prefix: &str,
    ) -> Result<Value, String> {
        let (range, next) = page(&items, cursor, size, prefix)?;
        let mut r = json!({field: items[range].to_vec()});
        if let Some(n) = next {
            r["nextCursor"] = json!(n);
        }
        Ok(r)
    }

    /// `resources/list`: the server's own, then each source's.
    pub fn list_resources(&self, cursor: Option<&str>, size: usize) -> Result<Value, String> {
        let all = self
            .resources
            .iter()
            .map(|r| r.meta.clone())
            .chain(self.sources.iter().flat_map(|s| s.listed().resources))
            .collect();
        Self::page_of(all, "resources", cursor, size, "r")
    }

    /// `resources/templates/list`: the server's own, then each source's.
    pub fn list_templates(&self, cursor: Option<&str>, size: usize) -> Result<Value, String> {
        let all = self
            .templates
            .iter()
            .map(|t| t.meta.clone())
            .chain(self.sources.iter().flat_map(|s| s.listed().templates))
            .collect();
        Self::page_of(all, "resourceTemplates", cursor, size, "t")
    }

    /// The source that offers `uri`, when the server's own resources do not.
    pub fn source_of_resource(&self, uri: &str) -> Option<Arc<dyn CatalogSource>> {
        if self.exists(uri) {
            return None;
        }
        self.sources
            .iter()
            .find(|s| {
                let l = s.listed();
                l.resources.iter().any(|r| r["uri"] == uri)
                    || l.templates.iter().any(|t| {
                        t["uriTemplate"]
                            .as_str()
                            .and_then(|tpl| match_template(tpl, uri))
                            .is_some()
                    })
            })
            .cloned()
    }

    /// The source that offers prompt `name`, when the server's own prompts do not.
    pub fn source_of_prompt(&self, name: &str) -> Option<Arc<dyn CatalogSource>> {
        if self.prompt(name).is_some() {
            return None;
        }
        self.sources
            .iter()
            .find(|s| s.listed().prompts.iter().any(|p| p["name"] == name))
            .cloned()
    }

    /// Whether `uri` names a resource (directly or through a template).
    pub fn exists(&self, uri: &str) -> bool {
        self.resources.iter().any(|r| r.meta["uri"] == uri)
            || self.templates.iter().any(|t| {
                t.meta["uriTemplate"]
                    .as_str()
                    .and_then(|tpl| match_template(tpl, uri))
                    .is_some()
            })
    }

    /// `resources/read`.
    pub fn read(&self, uri: &str) -> Result<Value, CatalogError> {
        if let Some(r) = self.resources.iter().find(|r| r.meta["uri"] == uri) {
            let contents = (r.read)(uri, &HashMap::new()).map_err(CatalogError::Invalid)?;
            return Ok(json!({"contents": contents}));
        }
        for t in &self.templates {
            if let Some(vars) = t.meta["uriTemplate"]
                .as_str()
                .and_then(|tpl| match_template(tpl, uri))
            {
                let contents = (t.read)(uri, &vars).map_err(CatalogError::Invalid)?;
                return Ok(json!({"contents": contents}));
            }
        }
        Err(CatalogError::NotFound(format!("Resource not found: {uri}")))
    }

    /// `prompts/list`: the server's own, then each source's.
    pub fn list_prompts(&self, cursor: Option<&str>, size: usize) -> Result<Value, String> {
        let all = self
            .prompts
            .iter()
            .map(|p| p.meta.clone())
            .chain(self.sources.iter().flat_map(|s| s.listed().prompts))
            .collect();
        Self::page_of(all, "prompts", cursor, size, "p")
    }

    /// The prompt named `name`.
    pub fn prompt(&self, name: &str) -> Option<&Prompt> {
        self.prompts.iter().find(|p| p.meta["name"] == name)
    }

    /// `prompts/get`: checks required arguments, then renders.
    pub fn get_prompt(&self, name: &str, args: &Map<String, Value>) -> Result<Value, CatalogError> {
        let Some(p) = self.prompts.iter().find(|p| p.meta["name"] == name) else {
            let known: Vec<&str> = self
                .prompts
                .iter()
                .filter_map(|p| p.meta["name"].as_str())
                .collect();
            return Err(CatalogError::NotFound(format!(
                "Unknown prompt: {name} (known: {})",
                known.join(", ")
            )));
        };
        for a in p.meta["arguments"].as_array().into_iter().flatten() {
            let an = a["name"].as_str().unwrap_or("");
            if a["required"] == json!(true) && !args.contains_key(an) {
                return Err(CatalogError::Invalid(format!(
                    "prompt {name}: missing required argument {an:?}"
                )));
            }
        }
        let messages = (p.render)(args).map_err(CatalogError::Invalid)?;
        let mut r = json!({"messages": messages});
        if let Some(d) = p.meta.get("description") {
            r["description"] = d.clone();
        }
        Ok(r)
    }

    /// `completion/complete` for a prompt argument or a template variable.
    pub fn complete(
        &self,
        reference: &Value,
        argument: &str,
        value: &str,
    ) -> Result<Value, CatalogError> {
        let f = match reference["type"].as_str() {
            Some("ref/prompt") => {
                let name = reference["name"].as_str().unwrap_or("");
                let p = self
                    .prompts
                    .iter()
                    .find(|p| p.meta["name"] == name)
                    .ok_or_else(|| CatalogError::NotFound(format!("Unknown prompt: {name}")))?;
                p.complete.clone()
            }
            Some("ref/resource") => {
                let uri = reference["uri"].as_str().unwrap_or("");
                let t = self
                    .templates
                    .iter()
                    .find(|t| t.meta["uriTemplate"] == uri)
                    .ok_or_else(|| {
                        CatalogError::NotFound(format!("Unknown resource template: {uri}"))
                    })?;
                t.complete.clone()
            }
            other => {
                return Err(CatalogError::Invalid(format!(
                    "ref.type must be ref/prompt or ref/resource, got {other:?}"
                )))
            }
        };
        let values: Vec<String> = f.map(|f| f(argument, value)).unwrap_or_default();
        let total = values.len();
        let shown: Vec<String> = values.into_iter().take(100).collect();
        Ok(json!({"completion": {"values": shown, "total": total, "hasMore": total > 100}}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_level_one_variables() {
        let v = match_template("test://template/{id}/data", "test://template/123/data").unwrap();
        assert_eq!(v["id"], "123");
        assert!(match_template("test://template/{id}/data", "test://template//data").is_none());
        assert!(match_template("test://template/{id}/data", "test://template/1/2/data").is_none());
        assert!(match_template("file:///{path}", "file:///x").is_some());
        assert!(match_template("a/{x}", "b/1").is_none());
    }
}
