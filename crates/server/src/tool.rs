//! Tools as the server offers them: metadata for `tools/list`, a JSON-schema validator for arguments,
//! the task policy, and the handler that does the work.

use mcp_tasks_engine::{InputError, InputResponse, Outcome, TaskContext, TaskHandler};
use mcp_tasks_protocol::mcp_2025::TaskSupport;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use thiserror::Error;

/// A tool: what clients see in `tools/list` and the handler that runs when it is called.
///
/// ```
/// use mcp_tasks_server::tool::{Tool, handler_fn, text_result};
/// use mcp_tasks_protocol::mcp_2025::TaskSupport;
///
/// let tool = Tool::new("shout", handler_fn(|_ctx, args| async move {
///     text_result(args["text"].as_str().unwrap_or("").to_uppercase(), false)
/// }))
/// .description("Upper-cases text")
/// .input_schema(serde_json::json!({"type": "object", "properties": {"text": {"type": "string"}}}))
/// .task_support(TaskSupport::Optional);
/// assert_eq!(tool.name, "shout");
/// ```
#[derive(Clone)]
pub struct Tool {
    /// Unique name.
    pub name: String,
    /// Display name.
    pub title: Option<String>,
    /// What the tool does (shown to models).
    pub description: Option<String>,
    /// JSON Schema of the arguments (root `type: object`).
    pub input_schema: Value,
    /// JSON Schema of `structuredContent`, when the tool returns any.
    pub output_schema: Option<Value>,
    /// Behaviour hints (`readOnlyHint`, `destructiveHint`, …).
    pub annotations: Option<Value>,
    /// Whether the tool runs as a task: never, optionally, or always.
    pub task_support: TaskSupport,
    /// Re-run the tool after a crash instead of failing the interrupted task (only for tools that are
    /// safe to run twice).
    pub retry_on_restart: bool,
    /// The work.
    pub handler: Arc<dyn TaskHandler>,
    /// Client capabilities the tool cannot work without (e.g. `{"sampling": {}}`): on 2026-07-28 a call
    /// from a client that did not declare them gets -32021 naming them.
    pub requires: Option<Value>,
    /// Work done before a task is created, inside the call (it may ask for input there, in rounds on
    /// 2026-07-28 or on the call's stream on 2025-11-25). Its result object becomes the task's arguments.
    pub prepare: Option<Arc<dyn TaskHandler>>,
    /// For clients that did not ask for a task: the call still runs as a durable task, and the
    /// client gets its result when it finishes within this time, else a result saying the work
    /// continues as task ID (followed up with the plain tools `task_status`, `task_result`,
    /// `task_cancel`). `None`: the server's default ([`ServerConfig::sync_budget`](crate::ServerConfig)).
    pub sync_budget: Option<std::time::Duration>,
    /// Scopes a caller must hold to call the tool (an OAuth access token's, or an API key's
    /// `scopes`). The tool is listed to every caller; a call without them is refused with a
    /// challenge naming them (HTTP 403, or 401 without credentials), so the client can ask for them.
    pub scopes: Vec<String>,
}

impl Tool {
    /// A tool with an empty-object input schema, `forbidden` task support and no description.
    pub fn new(name: impl Into<String>, handler: Arc<dyn TaskHandler>) -> Tool {
        Tool {
            name: name.into(),
            title: None,
            description: None,
            input_schema: json!({"type": "object"}),
            output_schema: None,
            annotations: None,
            task_support: TaskSupport::Forbidden,
            retry_on_restart: false,
            handler,
            requires: None,
            prepare: None,
            sync_budget: None,
            scopes: Vec::new(),
        }
    }
    /// Sets the scopes a caller needs (see [`Tool::scopes`]).
    pub fn scopes<S: Into<String>>(mut self, scopes: impl IntoIterator<Item = S>) -> Self {
        self.scopes = scopes.into_iter().map(Into::into).collect();
        self
    }
    /// Sets the sync budget (see [`Tool::sync_budget`]).
    pub fn sync_budget(mut self, budget: std::time::Duration) -> Self {
        self.sync_budget = Some(budget);
        self
    }
    /// Sets the description.
    pub fn description(mut self, d: impl Into<String>) -> Self {
        self.description = Some(d.into());
        self
    }
    /// Sets the display title.
    pub fn title(mut self, t: impl Into<String>) -> Self {
        self.title = Some(t.into());
        self
    }
    /// Sets the input schema.
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = schema;
        self
    }
    /// Sets the output schema.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }
    /// Sets the task policy.
    pub fn task_support(mut self, s: TaskSupport) -> Self {
        self.task_support = s;
        self
    }
    /// Marks the tool safe to re-run after a crash.
    pub fn retry_on_restart(mut self, yes: bool) -> Self {
        self.retry_on_restart = yes;
        self
    }
    /// Sets the step that runs before the task is created (see [`Tool::prepare`]).
    pub fn prepare(mut self, h: Arc<dyn TaskHandler>) -> Self {
        self.prepare = Some(h);
        self
    }
    /// Sets the client capabilities the tool needs (see [`Tool::requires`]).
    pub fn requires(mut self, capabilities: Value) -> Self {
        self.requires = Some(capabilities);
        self
    }
    /// Sets annotations.
    pub fn annotations(mut self, a: Value) -> Self {
        self.annotations = Some(a);
        self
    }
}

/// A [`TaskHandler`] from an async closure.
pub fn handler_fn<F, Fut>(f: F) -> Arc<dyn TaskHandler>
where
    F: Fn(TaskContext, Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    struct FnHandler<F>(F);
    // Written out rather than with `#[async_trait]`: its `async fn` would box a future holding the
    // context and the arguments beside the closure's future (which holds them again), for as long
    // as the task runs. This boxes the closure's future alone.
    impl<F, Fut> TaskHandler for FnHandler<F>
    where
        F: Fn(TaskContext, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        fn run<'life0, 'async_trait>(
            &'life0 self,
            ctx: TaskContext,
            arguments: Arc<Value>,
        ) -> std::pin::Pin<Box<dyn Future<Output = Outcome> + Send + 'async_trait>>
        where
            'life0: 'async_trait,
            Self: 'async_trait,
        {
            Box::pin((self.0)(ctx, Arc::unwrap_or_clone(arguments)))
        }
    }
    Arc::new(FnHandler(f))
}

/// A `CallToolResult` with one text block.
pub fn text_result(text: impl Into<String>, is_error: bool) -> Outcome {
    let mut v = json!({"content": [{"type": "text", "text": text.into()}]});
    if is_error {
        v["isError"] = json!(true);
    }
    Outcome::Result { value: v, is_error }
}

/// Why a tool could not be registered.
#[derive(Debug, Error)]
pub enum ToolError {
    /// Two tools share a name.
    #[error("duplicate tool name `{0}`")]
    Duplicate(String),
    /// The input schema is not a usable JSON Schema.
    #[error("tool `{name}`: invalid input schema: {reason}")]
    BadSchema {
        /// Tool name.
        name: String,
        /// What the schema compiler said.
        reason: String,
    },
}

/// A tool with its compiled argument validator.
pub struct RegisteredTool {
    /// The tool.
    pub tool: Tool,
    validator: jsonschema::Validator,
}

impl RegisteredTool {
    /// Checks `arguments` against the input schema; on failure, a readable list of what is wrong.
    pub fn validate(&self, arguments: &Value) -> Result<(), String> {
        let problems: Vec<String> = self
            .validator
            .iter_errors(arguments)
            .take(5)
            .map(|e| {
                let path = e.instance_path().to_string();
                if path.is_empty() {
                    e.to_string()
                } else {
                    format!("{path}: {e}")
                }
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }

    /// The tool as a `tools/list` entry; `with_execution` adds `execution.taskSupport` (2025-11-25 only).
    pub fn describe(&self, with_execution: bool) -> Value {
        let t = &self.tool;
        let mut m = Map::new();
        m.insert("name".into(), json!(t.name));
        if let Some(v) = &t.title {
            m.insert("title".into(), json!(v));
        }
        if let Some(v) = &t.description {
            m.insert("description".into(), json!(v));
        }
        m.insert("inputSchema".into(), t.input_schema.clone());
        if let Some(v) = &t.output_schema {
            m.insert("outputSchema".into(), v.clone());
        }
        if let Some(v) = &t.annotations {
            m.insert("annotations".into(), v.clone());
        }
        if with_execution {
            m.insert(
                "execution".into(),
                json!({"taskSupport": t.task_support.as_str()}),
            );
        }
        Value::Object(m)
    }
}

/// The tools of a server, in registration order. Tools added at build time stay; a group's tools (a
/// gateway upstream's) can be replaced while the server runs, so lookups hand out shared snapshots.
#[derive(Default)]
pub struct ToolRegistry {
    set: std::sync::RwLock<Arc<ToolSet>>,
}

#[derive(Clone, Default)]
struct ToolSet {
    tools: Vec<Arc<RegisteredTool>>,
    by_name: HashMap<String, usize>,
    /// The group of each tool that belongs to one (by name).
    groups: HashMap<String, String>,
}

impl ToolSet {
    fn reindex(&mut self) {
        self.by_name = self
            .tools
            .iter()
            .enumerate()
            .map(|(i, t)| (t.tool.name.clone(), i))
            .collect();
    }
}

fn compile(tool: Tool) -> Result<RegisteredTool, ToolError> {
    if tool.input_schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err(ToolError::BadSchema {
            name: tool.name,
            reason: "the root must have \"type\": \"object\"".into(),
        });
    }
    let validator =
        jsonschema::validator_for(&tool.input_schema).map_err(|e| ToolError::BadSchema {
            name: tool.name.clone(),
            reason: e.to_string(),
        })?;
    Ok(RegisteredTool { tool, validator })
}

impl ToolRegistry {
    fn snapshot(&self) -> Arc<ToolSet> {
        self.set.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Adds a tool, compiling its schema.
    pub fn add(&mut self, tool: Tool) -> Result<(), ToolError> {
        self.add_to(None, tool)
    }

    /// Adds a tool of `group` (see [`ToolRegistry::replace_group`]).
    pub fn add_to(&mut self, group: Option<&str>, tool: Tool) -> Result<(), ToolError> {
        let set = Arc::make_mut(self.set.get_mut().unwrap_or_else(|e| e.into_inner()));
        if set.by_name.contains_key(&tool.name) {
            return Err(ToolError::Duplicate(tool.name));
        }
        let registered = compile(tool)?;
        let name = registered.tool.name.clone();
        set.by_name.insert(name.clone(), set.tools.len());
        set.tools.push(Arc::new(registered));
        if let Some(g) = group {
            set.groups.insert(name, g.to_string());
        }
        Ok(())
    }

    /// Replaces the tools of `group` with `tools`, in one step. A tool whose name another group or
    /// the server's own tools hold, or whose schema does not compile, is left out and reported.
    /// Returns the names removed, the names added, and the problems.
    pub fn replace_group(&self, group: &str, tools: Vec<Tool>) -> GroupChange {
        let mut guard = self.set.write().unwrap_or_else(|e| e.into_inner());
        let mut set = (**guard).clone();
        let before: Vec<String> = set
            .groups
            .iter()
            .filter(|(_, g)| g.as_str() == group)
            .map(|(n, _)| n.clone())
            .collect();
        set.tools
            .retain(|t| set.groups.get(&t.tool.name).map(String::as_str) != Some(group));
        set.groups.retain(|_, g| g != group);
        set.reindex();
        let mut change = GroupChange::default();
        for tool in tools {
            if set.by_name.contains_key(&tool.name) {
                change.problems.push(ToolError::Duplicate(tool.name));
                continue;
            }
            match compile(tool) {
                Ok(r) => {
                    let name = r.tool.name.clone();
                    set.by_name.insert(name.clone(), set.tools.len());
                    set.tools.push(Arc::new(r));
                    set.groups.insert(name.clone(), group.to_string());
                    change.now.push(name);
                }
                Err(e) => change.problems.push(e),
            }
        }
        change.gone = before
            .into_iter()
            .filter(|n| !change.now.contains(n))
            .collect();
        *guard = Arc::new(set);
        change
    }

    /// Looks a tool up by name.
    pub fn get(&self, name: &str) -> Option<Arc<RegisteredTool>> {
        let set = self.snapshot();
        set.by_name.get(name).map(|&i| set.tools[i].clone())
    }
    /// All tools in order.
    pub fn all(&self) -> Vec<Arc<RegisteredTool>> {
        self.snapshot().tools.clone()
    }
    /// Names, for error messages.
    pub fn names(&self) -> Vec<String> {
        self.snapshot()
            .tools
            .iter()
            .map(|t| t.tool.name.clone())
            .collect()
    }
    /// Whether some tools belong to a group, i.e. the list can change while the server runs.
    pub fn can_change(&self) -> bool {
        !self.snapshot().groups.is_empty()
    }
}

/// What [`ToolRegistry::replace_group`] did.
#[derive(Debug, Default)]
pub struct GroupChange {
    /// The group's tools now.
    pub now: Vec<String>,
    /// Tools the group had before and has no more.
    pub gone: Vec<String>,
    /// Tools left out, and why.
    pub problems: Vec<ToolError>,
}

/// The user's answer to a form elicitation.
#[derive(Clone, Debug, PartialEq)]
pub enum Elicitation {
    /// Accepted, with the form's content.
    Accept(Map<String, Value>),
    /// Explicitly declined.
    Decline,
    /// Dismissed without a choice.
    Cancel,
}

/// Asking the client for input from a handler: `elicitation/create` and `sampling/createMessage`.
/// The task is `input_required` while a request is unanswered; works the same whether the request
/// travels on a `tasks/result` stream, the GET stream or stdio.
#[async_trait::async_trait]
pub trait Ask {
    /// Asks the user to fill in a form (`requested_schema`: an object schema of primitive fields).
    async fn elicit(
        &self,
        message: &str,
        requested_schema: Value,
    ) -> Result<Elicitation, InputError>;
    /// Asks the user to complete an out-of-band interaction at `url` (URL-mode elicitation; only for
    /// clients that declared `elicitation.url`). Resolves with the user's consent or refusal.
    async fn elicit_url(&self, message: &str, url: &str) -> Result<Elicitation, InputError>;
    /// Asks the client's model for a completion (`params` as `sampling/createMessage` takes them);
    /// returns the `CreateMessageResult`.
    async fn sample(&self, params: Value) -> Result<Value, InputError>;
    /// [`Ask::elicit`] with a question key (the `inputRequests` key of a 2026-07-28 round).
    async fn elicit_as(
        &self,
        key: &str,
        message: &str,
        requested_schema: Value,
    ) -> Result<Elicitation, InputError>;
    /// [`Ask::sample`] with a question key.
    async fn sample_as(&self, key: &str, params: Value) -> Result<Value, InputError>;
    /// Asks the client for its roots (`roots/list`) under a question key; returns the `ListRootsResult`.
    async fn list_roots_as(&self, key: &str) -> Result<Value, InputError>;
}

fn client_answer(r: InputResponse) -> Result<Value, InputError> {
    match r {
        InputResponse::Result { value } => Ok(value),
        InputResponse::Error { code, message, .. } => Err(InputError::Client { code, message }),
    }
}

/// Reads an `ElicitResult`: an action, and for `accept` the form's fields (an object whose values
/// are strings, numbers, booleans or lists of strings); anything else is malformed.
pub fn parse_elicit_result(v: &Value) -> Result<Elicitation, InputError> {
    match v.get("action").and_then(Value::as_str) {
        Some("accept") => match v.get("content") {
            None | Some(Value::Null) => Ok(Elicitation::Accept(Default::default())),
            Some(Value::Object(content)) => {
                // The schema's values: a string, a number, a boolean, or a list of strings.
                let bad = content.iter().find(|(_, value)| match value {
                    Value::String(_) | Value::Number(_) | Value::Bool(_) => false,
                    Value::Array(items) => !items.iter().all(Value::is_string),
                    _ => true,
                });
                match bad {
                    Some((key, _)) => Err(InputError::Malformed(format!(
                        "an ElicitResult's content[{key:?}] must be a string, a number, a boolean or a list of strings"
                    ))),
                    None => Ok(Elicitation::Accept(content.clone())),
                }
            }
            Some(other) => Err(InputError::Malformed(format!(
                "an ElicitResult's content must be an object of the form's fields, got {}",
                mcp_tasks_protocol::jsonrpc::type_name(other)
            ))),
        },
        Some("decline") => Ok(Elicitation::Decline),
        Some("cancel") => Ok(Elicitation::Cancel),
        _ => Err(InputError::Malformed(format!(
            "expected an ElicitResult with action accept, decline or cancel, got {v}"
        ))),
    }
}

#[async_trait::async_trait]
impl Ask for TaskContext {
    async fn elicit(
        &self,
        message: &str,
        requested_schema: Value,
    ) -> Result<Elicitation, InputError> {
        let params =
            json!({"mode": "form", "message": message, "requestedSchema": requested_schema});
        let answer = client_answer(self.request_input("elicitation/create", params).await?)?;
        parse_elicit_result(&answer)
    }

    async fn elicit_url(&self, message: &str, url: &str) -> Result<Elicitation, InputError> {
        let params = json!({
            "mode": "url",
            "message": message,
            "url": url,
            "elicitationId": mcp_tasks_engine::random_id(),
        });
        let answer = client_answer(self.request_input("elicitation/create", params).await?)?;
        parse_elicit_result(&answer)
    }

    async fn elicit_as(
        &self,
        key: &str,
        message: &str,
        requested_schema: Value,
    ) -> Result<Elicitation, InputError> {
        let params =
            json!({"mode": "form", "message": message, "requestedSchema": requested_schema});
        let answer = client_answer(
            self.request_input_as(key, "elicitation/create", params)
                .await?,
        )?;
        parse_elicit_result(&answer)
    }

    async fn sample_as(&self, key: &str, params: Value) -> Result<Value, InputError> {
        let answer = client_answer(
            self.request_input_as(key, "sampling/createMessage", params)
                .await?,
        )?;
        if answer.get("content").is_none() {
            return Err(InputError::Malformed(format!(
                "expected a CreateMessageResult with content, got {answer}"
            )));
        }
        Ok(answer)
    }

    async fn list_roots_as(&self, key: &str) -> Result<Value, InputError> {
        let answer = client_answer(self.request_input_as(key, "roots/list", json!({})).await?)?;
        if !answer.get("roots").is_some_and(Value::is_array) {
            return Err(InputError::Malformed(format!(
                "expected a ListRootsResult with roots, got {answer}"
            )));
        }
        Ok(answer)
    }

    async fn sample(&self, params: Value) -> Result<Value, InputError> {
        let answer = client_answer(self.request_input("sampling/createMessage", params).await?)?;
        if answer.get("content").is_none() {
            return Err(InputError::Malformed(format!(
                "expected a CreateMessageResult with content, got {answer}"
            )));
        }
        Ok(answer)
    }
}
