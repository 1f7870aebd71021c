//! The gateway: the tools of upstream MCP servers (a stdio command or a URL) served as our durable
//! task tools. Each call is one of our tasks that holds the upstream call; the upstream's progress and
//! log messages become the task's, its questions (elicitation, sampling) the task's input requests,
//! and a cancel or timeout of the task cancels the upstream call (`notifications/cancelled`).

mod handler;
mod spec;

pub use spec::{ToolOverride, UpstreamSpec};

use mcp_tasks_client::{Client, ConnectOptions, Endpoint, HttpEndpoint, StdioCommand};
use mcp_tasks_protocol::mcp_2025::TaskSupport;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

use crate::tool::Tool;
use handler::{Declares, UpstreamTool};

/// Why an upstream could not be put in front of.
#[derive(Debug, Error)]
pub enum GatewayError {
    /// The `[[upstreams]]` entry is not usable.
    #[error("upstream {name}: {why}")]
    Config {
        /// The upstream's name.
        name: String,
        /// What is wrong.
        why: String,
    },
    /// The upstream could not be reached or did not speak MCP.
    #[error("upstream {name}: {source}")]
    Connect {
        /// The upstream's name.
        name: String,
        /// The client's error.
        #[source]
        source: mcp_tasks_client::ClientError,
    },
}

/// Default longest run of an upstream call.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3600);

/// A connected upstream and the tools it gives.
pub struct Upstream {
    /// Its name (from the config).
    pub name: String,
    /// The connection.
    pub client: Client,
    /// Its tools, as our tools (names prefixed when the config says so).
    pub tools: Vec<Tool>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("name", &self.name)
            .field(
                "tools",
                &self.tools.iter().map(|t| &t.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Connects to the upstream `spec` names, lists its tools and makes our tools of them.
pub async fn connect(spec: &UpstreamSpec) -> Result<Upstream, GatewayError> {
    let config = |why: String| GatewayError::Config {
        name: spec.name.clone(),
        why,
    };
    let endpoint = match (&spec.command, &spec.url) {
        (Some(argv), None) => {
            if argv.is_empty() {
                return Err(config("command is empty".into()));
            }
            Endpoint::Stdio(StdioCommand {
                argv: argv.clone(),
                cwd: spec.cwd.clone(),
                env: spec
                    .env
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                // A stdio upstream dies with the gateway, even when the gateway is killed.
                prepare: Some(crate::tools::command::die_with_server),
            })
        }
        (None, Some(url)) => Endpoint::Http(HttpEndpoint {
            url: url.clone(),
            headers: spec
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            bearer: spec.bearer.clone(),
        }),
        _ => {
            return Err(config(
                "give exactly one of command = [...] and url = \"...\"".into(),
            ))
        }
    };
    let options = ConnectOptions {
        client_name: "mcp-tasks-gateway".into(),
        client_version: env!("CARGO_PKG_VERSION").into(),
        // Questions go to the task of the call that asked (each call brings its own handler);
        // this one stands for the questions no call is waiting for.
        input: Arc::new(Declares),
        no_2026: false,
        host_tasks: false,
    };
    let connect_error = |source| GatewayError::Connect {
        name: spec.name.clone(),
        source,
    };
    let client = Client::connect(&endpoint, options)
        .await
        .map_err(connect_error)?;
    let listed = client.list_tools().await.map_err(connect_error)?;
    for wanted in spec.tools.iter().flatten() {
        if !listed.iter().any(|t| &t.name == wanted) {
            return Err(config(format!(
                "tools names {wanted:?}, which the upstream does not offer (it offers: {})",
                listed
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    for name in spec.tool_overrides.keys() {
        if !listed.iter().any(|t| &t.name == name) {
            return Err(config(format!(
                "tool_overrides names {name:?}, which the upstream does not offer"
            )));
        }
    }
    let mut tools = Vec::new();
    for info in listed {
        let chosen = spec
            .tools
            .as_ref()
            .is_none_or(|only| only.contains(&info.name));
        if !chosen || spec.exclude.contains(&info.name) {
            continue;
        }
        let o = spec
            .tool_overrides
            .get(&info.name)
            .cloned()
            .unwrap_or_default();
        let timeout = o
            .timeout_secs
            .or(spec.timeout_secs)
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_TIMEOUT);
        let exposed = match &spec.prefix {
            Some(p) => format!("{p}_{}", info.name),
            None => info.name.clone(),
        };
        let handler = UpstreamTool {
            upstream: spec.name.clone(),
            client: client.clone(),
            tool: info.name.clone(),
            timeout,
            upstream_task: info.task_support == Some(TaskSupport::Required),
        };
        let mut tool = Tool::new(exposed, Arc::new(handler))
            .input_schema(info.input_schema.clone())
            .task_support(o.task_support.unwrap_or(TaskSupport::Optional))
            .retry_on_restart(
                o.retry_on_restart
                    .or(spec.retry_on_restart)
                    .unwrap_or(false),
            );
        tool.title = info.title.clone();
        tool.description = Some(match &info.description {
            Some(d) => d.clone(),
            None => format!("{} (from upstream {})", info.name, spec.name),
        });
        tool.output_schema = info.output_schema.clone();
        tool.annotations = info.annotations.clone();
        tools.push(tool);
    }
    tracing::info!(upstream = %spec.name, wire = %client.wire(), tools = tools.len(), "upstream connected");
    Ok(Upstream {
        name: spec.name.clone(),
        client,
        tools,
    })
}
