//! The client side of the `mcp-tasks` binary: `call`, `task …` and `tools`, against any MCP server.

mod args;
mod display;
pub mod events;
mod handles;
mod input;
mod prompt;

use anyhow::{anyhow, Context, Result};
use mcp_tasks_client::{
    CallOptions, Called, Client, ClientError, ConnectOptions, Endpoint, TaskHandle, TaskOutcome,
    TaskRef, TaskStatus, Wire,
};
use serde_json::Value;
use std::sync::Arc;

use display::Display;
use tokio::signal::unix::{signal, Signal, SignalKind};

fn interrupts() -> Result<Signal> {
    signal(SignalKind::interrupt()).context("cannot handle Ctrl-C")
}

/// Writes a line to stdout; a closed stdout (`| head`) ends the program quietly instead of a panic.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        if writeln!(std::io::stdout().lock(), $($t)*).is_err() {
            std::process::exit(exit::OK);
        }
    }};
}

/// Exit statuses of the client commands.
pub mod exit {
    /// The task completed.
    pub const OK: i32 = 0;
    /// The tool reported an error or the task failed.
    pub const FAILED: i32 = 1;
    /// A usage or connection error.
    pub const USAGE: i32 = 2;
    /// The task was cancelled.
    pub const CANCELLED: i32 = 3;
    /// Detached by Ctrl-C.
    pub const DETACHED: i32 = 130;
}

/// Where the server is.
#[derive(clap::Args, Clone, Debug)]
pub struct ServerArgs {
    /// The server's MCP endpoint.
    #[arg(long, env = "MCP_TASKS_URL", global = true)]
    pub url: Option<String>,
    /// Run the server as a command speaking MCP on stdin/stdout instead ("COMMAND ARGS", split as a
    /// shell would, without running one).
    #[arg(
        long,
        value_name = "COMMAND ARGS",
        global = true,
        conflicts_with = "url"
    )]
    pub stdio: Option<String>,
    /// An extra HTTP header, `NAME:VALUE` (repeatable).
    #[arg(long = "header", value_name = "NAME:VALUE", global = true)]
    pub headers: Vec<String>,
    /// An API key or an OAuth access token, sent as `Authorization: Bearer KEY`.
    #[arg(long, env = "MCP_TASKS_KEY", hide_env_values = true, global = true)]
    pub key: Option<String>,
    /// Speak 2025-11-25 (or older) even to a server that offers 2026-07-28.
    #[arg(long, global = true)]
    pub no_2026: bool,
}

/// The default endpoint: `mcp-tasks serve`'s.
const DEFAULT_URL: &str = "http://127.0.0.1:8080/mcp";

impl ServerArgs {
    fn headers(&self) -> Result<Vec<(String, String)>> {
        self.headers
            .iter()
            .map(|h| {
                let (n, v) = h
                    .split_once(':')
                    .ok_or_else(|| anyhow!("--header {h:?} is not NAME:VALUE"))?;
                Ok((n.trim().to_string(), v.trim().to_string()))
            })
            .collect()
    }

    /// The endpoint: `reference` (a remembered task's) when given, else --stdio, --url or the default.
    fn endpoint(&self, reference: Option<&str>) -> Result<Endpoint> {
        let headers = self.headers()?;
        if let Some(r) = reference {
            return Ok(Endpoint::from_reference(r, headers, self.key.clone())?);
        }
        if let Some(cmd) = &self.stdio {
            return Ok(Endpoint::Stdio(mcp_tasks_client::StdioCommand::parse(cmd)?));
        }
        Ok(Endpoint::Http(mcp_tasks_client::HttpEndpoint {
            url: self.url.as_deref().unwrap_or(DEFAULT_URL).to_string(),
            headers,
            bearer: self.key.clone(),
        }))
    }

    /// Whether the command line names a server (else a remembered task's is used).
    fn names_server(&self) -> bool {
        self.url.is_some() || self.stdio.is_some()
    }
}

fn describe(e: &Endpoint) -> String {
    match e {
        Endpoint::Http(h) => h.url.clone(),
        Endpoint::Stdio(c) => format!("the stdio server `{}`", c.line()),
    }
}

/// `mcp-tasks call`.
#[derive(clap::Args, Debug)]
pub struct CallArgs {
    /// The tool to call.
    pub tool: String,
    /// Arguments as NAME=VALUE; a VALUE that parses as JSON is that JSON, else a string.
    #[arg(value_name = "NAME=VALUE")]
    pub pairs: Vec<String>,
    /// Arguments as one JSON object (NAME=VALUE pairs override its fields).
    #[arg(long, value_name = "JSON")]
    pub args: Option<String>,
    /// Print the whole CallToolResult as JSON instead of its text.
    #[arg(long)]
    pub json: bool,
    /// Start the task, print its id and how to resume, and exit.
    #[arg(long)]
    pub detach: bool,
    /// Call plainly, not as a task.
    #[arg(long)]
    pub no_task: bool,
    /// Ask the server to keep the task this long after creation (2025-11-25; seconds).
    #[arg(long, value_name = "SECS")]
    pub ttl: Option<u64>,
    /// The create's idempotency key (one is made otherwise): the same key never starts a second job
    /// on servers that honour keys.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    /// Fill a form field of a question the tool asks (repeatable).
    #[arg(long = "answer", value_name = "NAME=VALUE")]
    pub answers: Vec<String>,
    /// Answer sampling requests: the command gets the request's params as JSON on stdin and prints
    /// the CreateMessageResult JSON.
    #[arg(long, value_name = "CMD")]
    pub sampling_command: Option<String>,
    /// On Ctrl-C, cancel the task instead of detaching from it.
    #[arg(long)]
    pub cancel_on_interrupt: bool,
    /// Have the server POST the task's events to this URL, signed (Standard Webhooks; mcp-tasks
    /// servers). The secret the server makes is printed once on stderr.
    #[arg(long, value_name = "URL")]
    pub webhook: Option<String>,
    /// Only this event to the webhook (repeatable): task.completed, task.failed, task.cancelled,
    /// task.input_required, task.progress (paced by the server) [default: every one but
    /// task.progress].
    #[arg(long = "webhook-event", value_name = "EVENT", requires = "webhook")]
    pub webhook_events: Vec<String>,
    /// Sign the webhook's deliveries with this secret (whsec_…) instead of one the server makes.
    #[arg(
        long,
        value_name = "SECRET",
        env = "MCP_TASKS_WEBHOOK_SECRET",
        hide_env_values = true,
        requires = "webhook"
    )]
    pub webhook_secret: Option<String>,
    /// No progress on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `mcp-tasks task …`.
#[derive(clap::Subcommand, Debug)]
pub enum TaskCommand {
    /// Print a task's state.
    Get(TaskIdArgs),
    /// Wait for a task to end and print its result (exit status as for `call`).
    Result(TaskWaitArgs),
    /// Print a task's state (as `task get` does; a JSON line each with --json) each time it
    /// changes, until it ends.
    Watch(TaskWaitArgs),
    /// Cancel a task.
    Cancel(TaskIdArgs),
    /// Send a task a signal its tool waits for (an approval, a decision, news from elsewhere);
    /// kept with the task if nothing waits for it yet.
    Signal(SignalArgs),
    /// List tasks: the server's (2025-11-25 `tasks/list`) and the ones this machine started there,
    /// with their status.
    List(ListArgs),
}

/// A task id.
#[derive(clap::Args, Debug)]
pub struct TaskIdArgs {
    /// The task's id.
    pub id: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// A signal to send.
#[derive(clap::Args, Debug)]
pub struct SignalArgs {
    /// The task's id.
    pub id: String,
    /// The signal's name (what the tool waits for, e.g. `approve`).
    pub name: String,
    /// What it carries, as JSON (`'{"by": "ann"}'`, `'"text"'`, `42`); `-` reads it from stdin.
    /// Without it the signal carries null.
    pub payload: Option<String>,
    /// A key for this signal: sending again with the same key (a retry) is the same signal.
    #[arg(long, value_name = "KEY")]
    pub signal_key: Option<String>,
    /// Print the server's answer as JSON.
    #[arg(long)]
    pub json: bool,
}

/// A task to wait for.
#[derive(clap::Args, Debug)]
pub struct TaskWaitArgs {
    /// The task's id.
    pub id: String,
    /// Print JSON: the whole CallToolResult (`task result`), or each state as a line (`task watch`).
    #[arg(long)]
    pub json: bool,
    /// Fill a form field of a question the tool asks (repeatable).
    #[arg(long = "answer", value_name = "NAME=VALUE")]
    pub answers: Vec<String>,
    /// Answer sampling requests with this command (see `call --help`).
    #[arg(long, value_name = "CMD")]
    pub sampling_command: Option<String>,
    /// No progress on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `task list`.
#[derive(clap::Args, Debug)]
pub struct ListArgs {
    /// Print JSON lines.
    #[arg(long)]
    pub json: bool,
    /// Only the tasks this machine started (do not ask the server); of every server, unless --url
    /// names one.
    #[arg(long)]
    pub local: bool,
}

fn options(input: Arc<dyn mcp_tasks_client::InputHandler>) -> ConnectOptions {
    ConnectOptions {
        client_name: "mcp-tasks".into(),
        client_version: env!("CARGO_PKG_VERSION").into(),
        input,
        no_2026: false,
        host_tasks: true,
    }
}

async fn connect(
    server: &ServerArgs,
    input: Arc<dyn mcp_tasks_client::InputHandler>,
) -> Result<Client> {
    let endpoint = server.endpoint(None)?;
    let mut o = options(input);
    o.no_2026 = server.no_2026;
    Client::connect(&endpoint, o)
        .await
        .with_context(|| format!("cannot talk MCP with {}", describe(&endpoint)))
}

/// An error and its causes on one line, leaving out a cause whose text the line already holds
/// (errors that show their source in their own message).
pub fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// The exit status of an outcome.
fn status_of(outcome: &TaskOutcome) -> i32 {
    match outcome {
        TaskOutcome::Completed(_) => exit::OK,
        TaskOutcome::ToolError(_) | TaskOutcome::Failed { .. } => exit::FAILED,
        TaskOutcome::Cancelled { .. } => exit::CANCELLED,
    }
}

/// Prints an outcome: the result's text (or JSON) on stdout, failures on stderr.
fn print_outcome(outcome: &TaskOutcome, json: bool) {
    match outcome {
        TaskOutcome::Completed(r) | TaskOutcome::ToolError(r) => {
            if json {
                out!("{}", serde_json::to_string_pretty(r).unwrap_or_default());
            } else {
                use std::io::Write as _;
                let mut stdout = std::io::stdout().lock();
                if write!(stdout, "{}", result_text(r))
                    .and_then(|_| stdout.flush())
                    .is_err()
                {
                    std::process::exit(exit::OK);
                }
                if matches!(outcome, TaskOutcome::ToolError(_)) {
                    eprintln!("the tool reported an error");
                }
            }
        }
        TaskOutcome::Failed {
            code,
            message,
            data,
        } => {
            if json {
                let e =
                    serde_json::json!({"error": {"code": code, "message": message, "data": data}});
                out!("{}", serde_json::to_string_pretty(&e).unwrap_or_default());
            }
            eprintln!("the task failed: {message} (error {code})");
        }
        TaskOutcome::Cancelled { message } => {
            if json {
                out!(
                    "{}",
                    serde_json::json!({"cancelled": true, "message": message})
                );
            }
            match message {
                Some(m) => eprintln!("the task was cancelled: {m}"),
                None => eprintln!("the task was cancelled"),
            }
        }
    }
}

/// A result's content as text: each text block on its own line; other blocks as JSON; the
/// structured content when there is no content.
fn result_text(r: &Value) -> String {
    let mut out = String::new();
    if let Some(blocks) = r.get("content").and_then(Value::as_array) {
        for b in blocks {
            match (
                b.get("type").and_then(Value::as_str),
                b.get("text").and_then(Value::as_str),
            ) {
                (Some("text"), Some(t)) => out.push_str(t),
                _ => out.push_str(&b.to_string()),
            }
            if !out.ends_with('\n') {
                out.push('\n');
            }
        }
    }
    if out.is_empty() {
        if let Some(s) = r.get("structuredContent") {
            out = format!("{}\n", serde_json::to_string_pretty(s).unwrap_or_default());
        }
    }
    out
}

fn resume_hint(r: &TaskRef) -> String {
    match r.url.strip_prefix(mcp_tasks_client::STDIO_PREFIX) {
        Some(cmd) => format!(
            "mcp-tasks task result {} --stdio {}",
            shell_word(&r.task_id),
            shell_word(cmd)
        ),
        None => format!(
            "mcp-tasks task result {} --url {}",
            shell_word(&r.task_id),
            shell_word(&r.url)
        ),
    }
}

fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:@=".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// `mcp-tasks call`: returns the exit status.
pub async fn call(server: &ServerArgs, a: CallArgs) -> Result<i32> {
    // Ctrl-C is ours from the start: a task created before the wait began is still detached cleanly.
    let mut sigint = interrupts()?;
    let arguments = args::build(a.args.as_deref(), &a.pairs)?;
    let display = Display::new(a.quiet);
    let input = Arc::new(input::CliInput::new(
        &a.answers,
        a.sampling_command.clone(),
        display.bar(),
    )?);
    let client = connect(server, input).await?;
    let tools = client
        .list_tools()
        .await
        .context("cannot list the server's tools")?;
    let Some(tool) = tools.iter().find(|t| t.name == a.tool) else {
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        return Err(anyhow!(
            "the server has no tool {:?}; it has: {}",
            a.tool,
            names.join(", ")
        ));
    };
    args::check(&a.tool, &tool.input_schema, &arguments)?;
    let options = CallOptions {
        as_task: !a.no_task,
        ttl_ms: a.ttl.map(|s| s.saturating_mul(1000)),
        idempotency_key: a.idempotency_key.clone(),
        webhook: a.webhook.as_ref().map(|url| mcp_tasks_client::Webhook {
            url: url.clone(),
            events: a.webhook_events.clone(),
            secret: a.webhook_secret.clone(),
        }),
        ..CallOptions::default()
    };
    let called = client
        .call_tool(&a.tool, arguments, &options, &|e| display.event(e))
        .await
        .with_context(|| format!("calling {}", a.tool))?;
    let task = match called {
        Called::Done(outcome) => {
            display.finish();
            print_outcome(&outcome, a.json);
            return Ok(status_of(&outcome));
        }
        Called::Task(t) => t,
    };
    if let Some(w) = task.webhook() {
        let url = w.get("url").and_then(|u| u.as_str()).unwrap_or_default();
        match w.get("secret").and_then(|s| s.as_str()) {
            // Shown even with --quiet: the server tells it this once.
            Some(secret) => {
                let text = format!(
                    "webhook: the task's events go to {url}, signed with {secret} (shown this once)"
                );
                if a.quiet {
                    eprintln!("{text}");
                } else {
                    display.line(&text);
                }
            }
            None => display.line(&format!("webhook: the task's events go to {url}")),
        }
    }
    let reference = task.to_ref();
    if let Err(e) = handles::remember(&reference) {
        display.line(&format!("warning: cannot remember the task: {e:#}"));
    }
    if a.detach {
        display.finish();
        if server.stdio.is_some() {
            eprintln!("note: a stdio server stops when this command exits, and its running tasks with it (a durable store then marks them interrupted, or runs them again if the tool is safe to retry)");
        }
        out!("{}", task.id());
        eprintln!(
            "started task {}; resume with:\n  {}",
            task.id(),
            resume_hint(&reference)
        );
        return Ok(exit::OK);
    }
    let status = follow(&task, &display, a.json, a.cancel_on_interrupt, &mut sigint).await?;
    // The session this call opened ends with it, unless it detached (its task stays reachable).
    if status != exit::DETACHED && client.wire() == &Wire::V2025 {
        client.close().await;
    }
    Ok(status)
}

/// Waits for `task` with the display, handling Ctrl-C; prints the outcome and returns the status.
async fn follow(
    task: &TaskHandle,
    display: &Display,
    json: bool,
    cancel_on_interrupt: bool,
    sigint: &mut Signal,
) -> Result<i32> {
    let on_event = |e: &mcp_tasks_client::Event| display.event(e);
    let waited = tokio::select! {
        r = task.wait(&on_event) => r,
        _ = sigint.recv() => {
            display.finish();
            if cancel_on_interrupt {
                eprintln!("interrupted: cancelling task {}", task.id());
                let s = task.cancel().await.context("cannot cancel the task")?;
                eprintln!("task {}: {}", task.id(), s.status);
                return Ok(if s.status == TaskStatus::Cancelled { exit::CANCELLED } else { exit::FAILED });
            }
            eprintln!("detached from task {} (it goes on); resume with:\n  {}", task.id(), resume_hint(&task.to_ref()));
            return Ok(exit::DETACHED);
        }
    };
    display.finish();
    let outcome = waited.with_context(|| format!("following task {}", task.id()))?;
    print_outcome(&outcome, json);
    Ok(status_of(&outcome))
}

/// A handle for task `id`: from what this machine remembers (its URL, wire and session), or from
/// `--url` with a fresh connection.
async fn open_task(
    server: &ServerArgs,
    id: &str,
    input: Arc<dyn mcp_tasks_client::InputHandler>,
) -> Result<TaskHandle> {
    let remembered = handles::recall(id);
    let ours = |r: &handles::Remembered| {
        let named = match (&server.url, &server.stdio) {
            (Some(u), _) => Some(u.clone()),
            (_, Some(c)) => Some(format!("{}{c}", mcp_tasks_client::STDIO_PREFIX)),
            _ => None,
        };
        named.is_none_or(|n| n == r.reference.url)
    };
    match remembered {
        Some(r) if ours(&r) => {
            let wire = Wire::from_version(&r.reference.wire)
                .ok_or_else(|| anyhow!("task {id}: unknown wire {:?}", r.reference.wire))?;
            let endpoint = server.endpoint(Some(&r.reference.url))?;
            let client =
                Client::resume(&endpoint, wire, r.reference.session.clone(), options(input))
                    .await
                    .context("cannot set up the client")?;
            Ok(TaskHandle::attach(&client, id))
        }
        _ => {
            if !server.names_server() {
                return Err(anyhow!(
                    "this machine did not start task {id}: give the server with --url (or MCP_TASKS_URL) or --stdio"
                ));
            }
            let client = connect(server, input).await?;
            Ok(TaskHandle::attach(&client, id))
        }
    }
}

/// `mcp-tasks task …`: returns the exit status.
pub async fn task(server: &ServerArgs, cmd: TaskCommand) -> Result<i32> {
    match cmd {
        TaskCommand::Get(a) => {
            let t = open_task(server, &a.id, Arc::new(mcp_tasks_client::NoInput)).await?;
            let s = t.get().await.map_err(explain)?;
            if a.json {
                out!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                out!("{}", state_line(&s));
            }
            Ok(exit::OK)
        }
        TaskCommand::Result(a) => {
            let display = Display::new(a.quiet);
            let input = Arc::new(input::CliInput::new(
                &a.answers,
                a.sampling_command.clone(),
                display.bar(),
            )?);
            let mut sigint = interrupts()?;
            let t = open_task(server, &a.id, input).await?;
            follow(&t, &display, a.json, false, &mut sigint).await
        }
        TaskCommand::Watch(a) => {
            let input = Arc::new(input::CliInput::new(
                &a.answers,
                a.sampling_command.clone(),
                None,
            )?);
            let t = open_task(server, &a.id, input).await?;
            let last = std::sync::Mutex::new(None::<Value>);
            let outcome = t
                .wait(&|e| {
                    if let mcp_tasks_client::Event::Status(s) = e {
                        let v = serde_json::to_value(&**s).unwrap_or(Value::Null);
                        let mut l = last.lock().unwrap_or_else(|p| p.into_inner());
                        let shown = l.as_ref().map(strip_times);
                        if shown.as_ref() != Some(&strip_times(&v)) {
                            if a.json {
                                out!("{v}");
                            } else {
                                out!("{}", state_line(s));
                            }
                            *l = Some(v);
                        }
                    }
                })
                .await
                .map_err(explain)?;
            Ok(status_of(&outcome))
        }
        TaskCommand::Cancel(a) => {
            let t = open_task(server, &a.id, Arc::new(mcp_tasks_client::NoInput)).await?;
            let s = t.cancel().await.map_err(explain)?;
            if a.json {
                out!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                out!("{}  {}", s.task_id, s.status);
            }
            Ok(if s.status == TaskStatus::Cancelled {
                exit::OK
            } else {
                exit::FAILED
            })
        }
        TaskCommand::Signal(a) => {
            let payload = signal_payload(a.payload.as_deref())?;
            let t = open_task(server, &a.id, Arc::new(mcp_tasks_client::NoInput)).await?;
            let r = t
                .signal(&a.name, payload, a.signal_key.as_deref())
                .await
                .map_err(explain)?;
            if a.json {
                out!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                let seq = &r["signal"]["seq"];
                let again = if r["duplicate"] == true {
                    " (sent before under this key)"
                } else {
                    ""
                };
                out!("{}  signal {} #{seq} sent{again}", a.id, a.name);
            }
            Ok(exit::OK)
        }
        TaskCommand::List(a) => list(server, a).await,
    }
}

/// The payload `task signal` sends: its argument as JSON, stdin for `-`, null without one.
fn signal_payload(arg: Option<&str>) -> anyhow::Result<Value> {
    let text = match arg {
        None => return Ok(Value::Null),
        Some("-") => std::io::read_to_string(std::io::stdin())
            .map_err(|e| anyhow::anyhow!("reading the payload from stdin: {e}"))?,
        Some(text) => text.to_string(),
    };
    serde_json::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "the payload must be JSON ({e}); for text, quote it: '\"{}\"'",
            text.trim().replace('"', "\\\"")
        )
    })
}

/// A task's state as `task get` and `task watch` print it: id, status, progress, message.
fn state_line(s: &mcp_tasks_client::TaskState) -> String {
    let mut line = format!("{}  {}", s.task_id, s.status);
    if let Some(p) = s.progress {
        match s.progress_total {
            Some(t) => line.push_str(&format!("  {p}/{t}")),
            None => line.push_str(&format!("  {p}")),
        }
    }
    if let Some(m) = &s.status_message {
        line.push_str(&format!("  {m}"));
    }
    line
}

/// A state without its change time, to tell real changes from repeated polls.
fn strip_times(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("lastUpdatedAt");
    }
    v
}

fn explain(e: ClientError) -> anyhow::Error {
    match e.rpc_code() {
        Some(-32602) => anyhow!("{e}\n(the server does not know this task: a wrong id, an expired task, or another session's or caller's)"),
        _ => anyhow::Error::new(e),
    }
}

/// The status of a task this machine started, read from its server as `task get` reads it (on
/// the wire and session it was started on), or why not: `unknown` (the server does not know it
/// any more) or `unreachable`.
async fn remembered_status(server: &ServerArgs, r: &handles::Remembered) -> String {
    let Some(wire) = Wire::from_version(&r.reference.wire) else {
        return "unknown".into();
    };
    let Ok(endpoint) = server.endpoint(Some(&r.reference.url)) else {
        return "unreachable".into();
    };
    let options = options(Arc::new(mcp_tasks_client::NoInput));
    let Ok(client) = Client::resume(&endpoint, wire, r.reference.session.clone(), options).await
    else {
        return "unreachable".into();
    };
    match TaskHandle::attach(&client, &r.reference.task_id)
        .get()
        .await
    {
        Ok(s) => s.status.to_string(),
        Err(e) if e.rpc_code().is_some() => "unknown".into(),
        Err(_) => "unreachable".into(),
    }
}

async fn list(server: &ServerArgs, a: ListArgs) -> Result<i32> {
    let mut rows: Vec<Value> = Vec::new();
    let mut client = None;
    // No server named: the tasks this machine started, on every server, each status asked of its
    // own server (a default URL nobody serves is not a reason to fail).
    let everywhere = !a.local && !server.names_server();
    if everywhere {
        eprintln!(
            "no server named (--url, --stdio): the tasks this machine started, on every server"
        );
    }
    if !a.local && !everywhere {
        let c = connect(server, Arc::new(mcp_tasks_client::NoInput)).await?;
        if c.wire() == &Wire::V2025 && c.capabilities().pointer("/tasks/list").is_some() {
            let mut cursor: Option<String> = None;
            loop {
                let params = match &cursor {
                    Some(c) => serde_json::json!({"cursor": c}),
                    None => serde_json::json!({}),
                };
                let r = c.request("tasks/list", params, &|_| {}).await?;
                for t in r
                    .get("tasks")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let mut t = t.clone();
                    t["url"] = Value::String(c.url());
                    rows.push(t);
                }
                match r.get("nextCursor").and_then(Value::as_str) {
                    Some(c) if !c.is_empty() => cursor = Some(c.to_string()),
                    _ => break,
                }
            }
        } else {
            eprintln!(
                "the server ({} on {}) has no task list; showing the tasks this machine started there",
                c.url(),
                c.wire()
            );
        }
        client = Some(c);
    }
    // The tasks this machine started: on the server asked, else (--local) on the one --url names,
    // else on any.
    let only = match &client {
        Some(c) => Some(c.url()),
        None => server.url.clone(),
    };
    for r in handles::all() {
        if only.as_ref().is_some_and(|u| *u != r.reference.url)
            || rows
                .iter()
                .any(|t| t["taskId"] == r.reference.task_id.as_str())
        {
            continue;
        }
        let mut row = serde_json::json!({
            "taskId": r.reference.task_id, "url": r.reference.url, "wire": r.reference.wire,
            "tool": r.reference.tool, "startedHere": r.started_at,
        });
        // Its status from its server (a task list the server had not, or no server named), read
        // as `task get` reads it: on the task's own wire and session.
        if everywhere || client.as_ref().is_some_and(|c| c.url() == r.reference.url) {
            row["status"] = Value::String(remembered_status(server, &r).await);
        }
        rows.push(row);
    }
    if a.json {
        for row in &rows {
            out!("{row}");
        }
        return Ok(exit::OK);
    }
    let text = |row: &Value, k: &str| {
        row.get(k)
            .and_then(Value::as_str)
            .unwrap_or("-")
            .to_string()
    };
    let table: Vec<[String; 4]> = rows
        .iter()
        .map(|r| {
            [
                text(r, "taskId"),
                text(r, "status"),
                text(r, "tool"),
                text(r, "url"),
            ]
        })
        .collect();
    let header = ["TASK", "STATUS", "TOOL", "SERVER"].map(String::from);
    let widths: Vec<usize> = (0..3)
        .map(|i| {
            std::iter::once(&header)
                .chain(&table)
                .map(|r| r[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    if !table.is_empty() {
        for r in std::iter::once(&header).chain(&table) {
            out!(
                "{:<w0$}  {:<w1$}  {:<w2$}  {}",
                r[0],
                r[1],
                r[2],
                r[3],
                w0 = widths[0],
                w1 = widths[1],
                w2 = widths[2]
            );
        }
    }
    Ok(exit::OK)
}

/// `mcp-tasks tools`.
pub async fn tools(server: &ServerArgs, json: bool) -> Result<i32> {
    let client = connect(server, Arc::new(mcp_tasks_client::NoInput)).await?;
    let tools = client.list_tools().await?;
    // On 2026-07-28 a tool carries no task support: the server decides per call. Said once, not on
    // every row.
    let decides = client.has_tasks() && client.wire() == &Wire::V2026;
    if decides && !json {
        eprintln!(
            "on {} the server decides per call whether a call runs as a task (`--no-2026` shows each tool's 2025-11-25 task support)",
            client.wire()
        );
    }
    let width = tools
        .iter()
        .map(|t| t.name.chars().count())
        .max()
        .unwrap_or(0);
    for t in &tools {
        let support = match (t.task_support, client.has_tasks()) {
            (_, false) => "no tasks",
            (Some(s), true) => s.as_str(),
            // 2025-11-25: a tool that says nothing is `forbidden` (the spec's default).
            (None, true) if !decides => "forbidden",
            (None, true) => "server decides",
        };
        if json {
            out!(
                "{}",
                serde_json::json!({"name": t.name, "taskSupport": support, "description": t.description, "inputSchema": t.input_schema})
            );
        } else {
            let desc = t
                .description
                .as_deref()
                .unwrap_or("")
                .lines()
                .next()
                .unwrap_or("");
            if decides {
                out!("{:<width$}  {}", t.name, desc);
            } else {
                out!("{:<width$}  {:<9}  {}", t.name, support, desc);
            }
        }
    }
    eprintln!(
        "{} tools on {} ({})",
        tools.len(),
        client.url(),
        client.wire()
    );
    Ok(exit::OK)
}
