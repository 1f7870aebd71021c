//! The gateway: the tools of upstream MCP servers (a stdio command or a URL) served as our durable
//! task tools. Each call is one of our tasks that holds the upstream call; the upstream's progress and
//! log messages become the task's, its questions (elicitation, sampling) the task's input requests,
//! and a cancel or timeout of the task cancels the upstream call (`notifications/cancelled`).

mod catalog;
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
    #[error("upstream {name:?}: {why}")]
    Config {
        /// The upstream's name.
        name: String,
        /// What is wrong.
        why: String,
    },
    /// The upstream could not be reached or did not speak MCP.
    #[error("upstream {name:?}: {source}")]
    Connect {
        /// The upstream's name.
        name: String,
        /// The client's error.
        #[source]
        source: mcp_tasks_client::ClientError,
    },
}

/// Default time an upstream has at start-up to answer `initialize` and list its tools.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// Default longest run of an upstream call.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3600);
/// First and longest pause before an upstream is started again; a connection that lived this long
/// starts the pauses over.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Pause before listening for an HTTP upstream's list changes again after the stream ended.
const RELISTEN_PAUSE: Duration = Duration::from_secs(5);

/// A connected upstream and the tools it gives.
pub struct Upstream {
    /// Its name (from the config).
    pub name: String,
    /// Its tools, as our tools (names prefixed when the config says so).
    pub tools: Vec<Tool>,
    link: Arc<Link>,
    catalog: Arc<catalog::UpstreamCatalog>,
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

/// The connection to one upstream as it comes and goes: calls take the current client, waiting while
/// the upstream restarts.
pub(crate) struct Link {
    spec: UpstreamSpec,
    endpoint: Endpoint,
    current: tokio::sync::watch::Sender<Option<Client>>,
    /// Why the upstream is down, while it is.
    down: std::sync::Mutex<Option<String>>,
    /// Raised by a call that found the connection unusable (an HTTP upstream forgot our session).
    broken: tokio::sync::Notify,
}

impl Link {
    /// The upstream's name.
    pub(crate) fn name(&self) -> &str {
        &self.spec.name
    }

    /// The connected client, waiting up to `within` while the upstream restarts.
    pub(crate) async fn client(&self, within: Duration) -> Result<Client, String> {
        let mut rx = self.current.subscribe();
        let found = tokio::time::timeout(within, rx.wait_for(Option::is_some)).await;
        match found {
            Ok(Ok(c)) => c.clone().ok_or_else(|| "not connected".to_string()),
            _ => Err(
                match self.down.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                    Some(why) => format!("not connected (restarting after: {why})"),
                    None => "not connected".to_string(),
                },
            ),
        }
    }

    /// Whether the upstream goes on when the gateway stops (an HTTP server does; a stdio server
    /// dies with us), so its tasks can be followed again after a restart.
    pub(crate) fn outlives_us(&self) -> bool {
        matches!(self.endpoint, Endpoint::Http(_))
    }

    /// A client that reaches the upstream task `saved` names: on 2025-11-25 over HTTP in the session
    /// it was made in (servers bind tasks to sessions), else the current connection.
    pub(crate) async fn resume(
        &self,
        saved: &mcp_tasks_client::TaskRef,
    ) -> Result<Client, mcp_tasks_client::ClientError> {
        let wire = mcp_tasks_client::Wire::from_version(&saved.wire);
        match (&self.endpoint, wire, &saved.session) {
            (Endpoint::Http(_), Some(wire @ mcp_tasks_client::Wire::V2025), Some(session)) => {
                Client::resume(&self.endpoint, wire, Some(session.clone()), options()).await
            }
            _ => self
                .client(DEFAULT_TIMEOUT)
                .await
                .map_err(mcp_tasks_client::ClientError::Unsupported),
        }
    }

    /// Says that the connection no longer works, so the supervisor connects again.
    pub(crate) fn report_broken(&self) {
        self.broken.notify_one();
    }

    fn set_down(&self, why: String) {
        *self.down.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
        self.current.send_replace(None);
    }

    fn set_up(&self, client: Client) {
        *self.down.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.current.send_replace(Some(client));
    }
}

fn endpoint_of(spec: &UpstreamSpec) -> Result<Endpoint, GatewayError> {
    let config = |why: String| GatewayError::Config {
        name: spec.name.clone(),
        why,
    };
    match (&spec.command, &spec.url) {
        (Some(argv), None) => {
            if argv.is_empty() {
                return Err(config("command is empty".into()));
            }
            Ok(Endpoint::Stdio(StdioCommand {
                argv: argv.clone(),
                cwd: spec.cwd.clone(),
                env: spec
                    .env
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                // A stdio upstream dies with the gateway, even when the gateway is killed, and
                // gets none of the gateway's own secrets. It leads a process group of its own: a
                // host that stops `wrap` by signalling our group (the SDKs' stdio clients do)
                // reaches only us, and the task it is running is handed on, not failed by its
                // death beside us; its group is killed when the connection ends.
                prepare: Some(|cmd| {
                    cmd.env_remove("MCP_TASKS_WEBHOOK_KEYS");
                    crate::tools::command::die_with_server(cmd);
                }),
                // Its last words on stderr go into the error of the calls it leaves behind.
                keep_stderr: true,
                own_group: true,
            }))
        }
        (None, Some(url)) => Ok(Endpoint::Http(HttpEndpoint {
            url: url.clone(),
            headers: spec
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            bearer: spec.bearer.clone(),
        })),
        _ => Err(config(
            "give exactly one of command = [...] and url = \"...\"".into(),
        )),
    }
}

/// How the gateway connects to an upstream.
fn options() -> ConnectOptions {
    ConnectOptions {
        client_name: "mcp-tasks-gateway".into(),
        client_version: env!("CARGO_PKG_VERSION").into(),
        // Questions go to the task of the call that asked (each call brings its own handler);
        // this one stands for the questions no call is waiting for.
        input: Arc::new(Declares),
        no_2026: false,
        host_tasks: false,
    }
}

async fn open(spec: &UpstreamSpec, endpoint: &Endpoint) -> Result<Client, GatewayError> {
    Client::connect(endpoint, options())
        .await
        .map_err(|source| GatewayError::Connect {
            name: spec.name.clone(),
            source,
        })
}

/// Connects to the upstream `spec` names, lists its tools and makes our tools of them. A tool the
/// config names that the upstream does not offer is an error here (at start-up).
pub async fn connect(spec: &UpstreamSpec) -> Result<Upstream, GatewayError> {
    let limit = spec
        .connect_timeout_secs
        .map_or(DEFAULT_CONNECT_TIMEOUT, Duration::from_secs);
    match tokio::time::timeout(limit, connect_now(spec)).await {
        Ok(connected) => connected,
        Err(_) => Err(GatewayError::Config {
            name: spec.name.clone(),
            why: format!(
                "it did not answer initialize and tools/list within {} s: is it an MCP server \
                 speaking JSON-RPC on its stdout (or at its URL)?",
                limit.as_secs()
            ),
        }),
    }
}

async fn connect_now(spec: &UpstreamSpec) -> Result<Upstream, GatewayError> {
    let endpoint = endpoint_of(spec)?;
    let client = open(spec, &endpoint).await?;
    let link = Arc::new(Link {
        spec: spec.clone(),
        endpoint,
        current: tokio::sync::watch::channel(None).0,
        down: std::sync::Mutex::new(None),
        broken: tokio::sync::Notify::new(),
    });
    let listed = client
        .list_tools()
        .await
        .map_err(|source| GatewayError::Connect {
            name: spec.name.clone(),
            source,
        })?;
    let (tools, problems) = tools_of(&link, &listed);
    if let Some(why) = problems.into_iter().next() {
        return Err(GatewayError::Config {
            name: spec.name.clone(),
            why,
        });
    }
    let catalog = Arc::new(catalog::UpstreamCatalog::new(
        link.clone(),
        spec.prefix.clone(),
    ));
    if let Err(e) = catalog.refresh(&client).await {
        tracing::warn!(upstream = %spec.name, error = %e, "cannot list the upstream's resources and prompts; serving its tools only");
    }
    tracing::info!(upstream = %spec.name, wire = %client.wire(), tools = tools.len(), "upstream connected");
    link.set_up(client);
    Ok(Upstream {
        name: spec.name.clone(),
        tools,
        link,
        catalog,
    })
}

impl Upstream {
    /// The upstream's resources and prompts, to pass through
    /// ([`ServerBuilder::catalog_source`](crate::ServerBuilder::catalog_source)).
    pub fn catalog(&self) -> Arc<dyn crate::catalog::CatalogSource> {
        self.catalog.clone()
    }

    /// The connected client, if the upstream is up now.
    pub fn client(&self) -> Option<Client> {
        self.link.current.borrow().clone()
    }

    /// Keeps the upstream in front of `server` until the server stops: a stdio upstream that exits
    /// is started again (pauses from 1 s doubling to 60 s; the calls it leaves behind fail with its
    /// exit status and last stderr lines), and the upstream's tool list is followed
    /// (`notifications/tools/list_changed`), our list changing with it. Register the tools of
    /// [`Upstream::tools`] as the group named after the upstream first.
    pub fn supervise(&self, server: Arc<crate::Server>) -> tokio::task::JoinHandle<()> {
        let (link, catalog) = (self.link.clone(), self.catalog.clone());
        tokio::spawn(async move { supervise(link, catalog, server).await })
    }
}

async fn supervise(
    link: Arc<Link>,
    catalog: Arc<catalog::UpstreamCatalog>,
    server: Arc<crate::Server>,
) {
    let name = link.spec.name.clone();
    let mut backoff = FIRST_BACKOFF;
    server.metrics().upstream_up(&name, true);
    loop {
        let Some(client) = link.current.borrow().clone() else {
            return;
        };
        let since = std::time::Instant::now();
        let follower = {
            let client = client.clone();
            let link = link.clone();
            tokio::spawn(async move {
                loop {
                    match client.follow_lists().await {
                        Err(mcp_tasks_client::ClientError::Http { status: 404, .. }) => {
                            link.report_broken();
                            return;
                        }
                        Err(mcp_tasks_client::ClientError::Unsupported(_)) => return,
                        Err(e)
                            if e.rpc_code()
                                == Some(mcp_tasks_protocol::error_codes::METHOD_NOT_FOUND) =>
                        {
                            return
                        }
                        Err(e) => {
                            tracing::debug!(upstream = %link.name(), error = %e, "listening for the upstream's list changes failed")
                        }
                        Ok(()) => {}
                    }
                    tokio::time::sleep(RELISTEN_PAUSE).await;
                }
            })
        };
        let mut changes = client.list_changes();
        let why = loop {
            tokio::select! {
                e = client.closed() => break e.to_string(),
                () = link.broken.notified() => break "the upstream no longer knows our session".to_string(),
                change = changes.recv() => match change {
                    Ok(m) if m == "notifications/tools/list_changed" => refresh(&link, &client, &server).await,
                    Ok(_) => refresh_catalog(&link, &catalog, &client, &server).await,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {}
                    // Changes missed: list everything again.
                    Err(_) => {
                        refresh(&link, &client, &server).await;
                        refresh_catalog(&link, &catalog, &client, &server).await;
                    }
                },
                () = server.stopping() => {
                    follower.abort();
                    return;
                }
            }
        };
        follower.abort();
        if since.elapsed() >= MAX_BACKOFF {
            backoff = FIRST_BACKOFF;
        }
        tracing::warn!(upstream = %name, error = %why, "upstream lost; connecting again in {} s", backoff.as_secs());
        link.set_down(why);
        server.metrics().upstream_up(&name, false);
        loop {
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = server.stopping() => return,
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
            match open(&link.spec, &link.endpoint).await {
                Ok(c) => {
                    tracing::info!(upstream = %name, "upstream connected again");
                    refresh(&link, &c, &server).await;
                    refresh_catalog(&link, &catalog, &c, &server).await;
                    link.set_up(c);
                    server.metrics().upstream_up(&name, true);
                    break;
                }
                Err(e) => {
                    tracing::warn!(upstream = %name, error = %e, "upstream still down; trying again in {} s", backoff.as_secs());
                    link.set_down(e.to_string());
                }
            }
        }
    }
}

/// Lists the upstream's tools again and puts them in place of the ones we serve for it.
async fn refresh(link: &Arc<Link>, client: &Client, server: &crate::Server) {
    let listed = match client.list_tools().await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(upstream = %link.name(), error = %e, "cannot list the upstream's tools; keeping the list we have");
            return;
        }
    };
    let (tools, problems) = tools_of(link, &listed);
    for why in problems {
        tracing::warn!(upstream = %link.name(), "{why}");
    }
    let change = server.replace_tools(link.name(), tools);
    for p in &change.problems {
        tracing::warn!(upstream = %link.name(), error = %p, "an upstream tool is left out");
    }
    tracing::info!(upstream = %link.name(), tools = change.now.len(), gone = ?change.gone, "upstream tools listed");
}

/// Lists the upstream's resources and prompts again and tells our clients.
async fn refresh_catalog(
    link: &Arc<Link>,
    catalog: &catalog::UpstreamCatalog,
    client: &Client,
    server: &crate::Server,
) {
    match catalog.refresh(client).await {
        Ok(()) => {
            use crate::catalog::CatalogSource;
            let (resources, prompts) = catalog.offers();
            if resources {
                server.list_changed(crate::ListKind::Resources);
            }
            if prompts {
                server.list_changed(crate::ListKind::Prompts);
            }
        }
        Err(e) => {
            tracing::warn!(upstream = %link.name(), error = %e, "cannot list the upstream's resources and prompts; keeping the lists we have")
        }
    }
}

/// Our tools for the upstream's `listed` ones, as the spec selects and names them, and what in the
/// spec does not match the list.
fn tools_of(link: &Arc<Link>, listed: &[mcp_tasks_client::ToolInfo]) -> (Vec<Tool>, Vec<String>) {
    let spec = &link.spec;
    let mut problems = Vec::new();
    for wanted in spec.tools.iter().flatten() {
        if !listed.iter().any(|t| &t.name == wanted) {
            problems.push(format!(
                "tools names {wanted:?}, which the upstream does not offer (it offers: {})",
                listed
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    for name in spec.tool_overrides.keys() {
        if !listed.iter().any(|t| &t.name == name) {
            problems.push(format!(
                "tool_overrides names {name:?}, which the upstream does not offer"
            ));
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
            link: link.clone(),
            tool: info.name.clone(),
            timeout,
        };
        let mut tool = Tool::new(exposed, Arc::new(handler))
            .input_schema(info.input_schema.clone())
            .task_support(o.task_support.unwrap_or(TaskSupport::Optional))
            .retry_on_restart(
                o.retry_on_restart
                    .or(spec.retry_on_restart)
                    .unwrap_or(false),
            );
        tool.sync_budget = o
            .sync_budget_secs
            .or(spec.sync_budget_secs)
            .map(Duration::from_secs);
        tool.scopes = o.scopes.clone().unwrap_or_else(|| spec.scopes.clone());
        tool.title = info.title.clone();
        tool.description = Some(match &info.description {
            Some(d) => d.clone(),
            None => format!("{} (from upstream {})", info.name, spec.name),
        });
        tool.output_schema = info.output_schema.clone();
        tool.annotations = info.annotations.clone();
        tools.push(tool);
    }
    (tools, problems)
}
