//! Command tools: run a program (no shell) with argv templated from the JSON arguments.
//!
//! Progress and status come from a line protocol on the program's stdout; those lines are consumed and
//! not part of the output:
//!
//! | line | effect |
//! |---|---|
//! | `::progress 3/10 copying files` | progress 3 of 10, with an optional message (`::progress 3` without a total) |
//! | `::status compressing` | sets the task's status message |
//! | `::log warning disk almost full` | a log message at that level (debug … emergency) |
//! | `::ask {"message": "Proceed?", "schema": {…}}` | asks the user (a form elicitation); the answer comes back as one JSON line on the program's stdin |
//! | `::checkpoint {"next": 7}` | stores the JSON with the task, durably, before the program's next line is read |
//! | `::event build.finished {"branch": "main"}` | publishes an event of a type declared in `[[events]]` (MCP Events), durably, before the program's next line is read |
//!
//! A task that stored a checkpoint resumes after a restart or a hand-off instead of failing: the
//! program is started again with `MCP_TASKS_CHECKPOINT` set to the last checkpoint (JSON) and
//! `MCP_TASKS_ATTEMPT` to the run's number (1 for the first). When the server hands the task off (a
//! deploy), the program's process group gets SIGTERM and `kill_grace_secs` to print a last
//! `::checkpoint` and exit.
//!
//! The answer line is the `ElicitResult`: `{"action":"accept","content":{…}}`, `{"action":"decline"}` or
//! `{"action":"cancel"}`; when the question cannot be asked (the client has no elicitation capability,
//! the task was cancelled, the `::ask` line is longer than 64 KiB) it is
//! `{"action":"cancel","error":"why"}`. A directive line longer than 64 KiB is not applied: the server
//! logs it and tells the client (a warning log message).
//!
//! Progress and status reports are applied at most every 100 ms, the latest of each winning (and the
//! last ones when the program ends): a program may print a line per item without making the server
//! write each one.
//! Exit code 0 gives a normal result; any other exit code, a timeout or a failure to start gives a
//! result with `isError: true`. Cancellation sends SIGTERM to the program's process group and SIGKILL
//! after the grace period.

mod output;

use async_trait::async_trait;
use mcp_tasks_engine::{LogLevel, Outcome, TaskContext, TaskHandler};
use mcp_tasks_protocol::mcp_2025::TaskSupport;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use output::{read_lines, Piece, Reports, MAX_LINE};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::process::Command;
use tokio::sync::mpsc;

use crate::tool::{Ask, Elicitation, Tool};

/// A command tool as written in the config file (`[[tools]]`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandToolSpec {
    /// Tool name.
    pub name: String,
    /// Display title.
    #[serde(default)]
    pub title: Option<String>,
    /// Description shown to clients.
    #[serde(default)]
    pub description: Option<String>,
    /// The program and its arguments. `{name}` is replaced by the argument `name` (strings as they are,
    /// other values as JSON); an element that is exactly `{name}` is dropped when the argument is absent
    /// and expands to one element per item for an array. `{{` and `}}` are literal braces.
    pub command: Vec<String>,
    /// JSON Schema of the arguments (default: an object with no constraints).
    #[serde(default)]
    pub input_schema: Option<Value>,
    /// `forbidden`, `optional` (default) or `required`.
    #[serde(default)]
    pub task_support: Option<TaskSupport>,
    /// Working directory (default: the server's).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Extra environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Seconds before the program is stopped and the call fails (default 3600).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// Seconds between SIGTERM and SIGKILL on cancel or timeout (default 5).
    #[serde(default)]
    pub kill_grace_secs: Option<u64>,
    /// Processes of this tool running at once (default 32). Past it a task waits for one to end
    /// (its status message says so) and a plain call is refused with -32004.
    #[serde(default)]
    pub max_processes: Option<usize>,
    /// Bytes of stdout and of stderr kept each (default 1 MiB); the rest is dropped and the result says so.
    #[serde(default)]
    pub max_output_bytes: Option<usize>,
    /// Re-run after a server crash instead of failing (only for idempotent commands).
    #[serde(default)]
    pub retry_on_restart: bool,
    /// Seconds a client that did not ask for a task waits for the result; a call still running
    /// then continues as a task (see `Tool::sync_budget`). Default: the `[tasks]` setting.
    #[serde(default)]
    pub sync_budget_secs: Option<u64>,
    /// Scopes a caller must hold to call the tool (an OAuth access token's, or an API key's
    /// `scopes`); the tool is listed to everyone (see `Tool::scopes`).
    #[serde(default)]
    pub scopes: Vec<String>,
}

impl CommandToolSpec {
    /// Builds the tool.
    pub fn into_tool(self) -> Tool {
        let mut tool = Tool::new(
            self.name.clone(),
            Arc::new(CommandHandler {
                spec: self.clone(),
                slots: Arc::new(tokio::sync::Semaphore::new(
                    self.max_processes.unwrap_or(DEFAULT_MAX_PROCESSES).max(1),
                )),
            }),
        )
        .input_schema(
            self.input_schema
                .clone()
                .unwrap_or_else(|| json!({"type": "object"})),
        )
        .task_support(self.task_support.unwrap_or(TaskSupport::Optional))
        .retry_on_restart(self.retry_on_restart);
        tool.sync_budget = self.sync_budget_secs.map(Duration::from_secs);
        tool.scopes = self.scopes;
        tool.title = self.title;
        tool.description = Some(
            self.description
                .unwrap_or_else(|| format!("Runs {}", self.command.join(" "))),
        );
        tool
    }
}

/// Expands the argv template. Errors name the template element that could not be filled.
pub fn expand_argv(template: &[String], args: &Value) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for element in template {
        if let Some(name) = whole_placeholder(element) {
            match args.get(name) {
                None | Some(Value::Null) => {}
                Some(Value::Array(items)) => out.extend(items.iter().map(scalar)),
                Some(v) => out.push(scalar(v)),
            }
            continue;
        }
        out.push(fill(element, args)?);
    }
    if out.is_empty() {
        return Err("the command is empty".into());
    }
    Ok(out)
}

fn whole_placeholder(s: &str) -> Option<&str> {
    let inner = s.strip_prefix('{')?.strip_suffix('}')?;
    (!inner.is_empty() && !inner.contains(['{', '}'])).then_some(inner)
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn fill(template: &str, args: &Value) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                out.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                out.push('}');
            }
            '{' => {
                let name: String = chars.by_ref().take_while(|&c| c != '}').collect();
                match args.get(&name) {
                    None | Some(Value::Null) => {}
                    Some(v) => out.push_str(&scalar(v)),
                }
            }
            '}' => return Err(format!("unmatched '}}' in {template:?}")),
            c => out.push(c),
        }
    }
    Ok(out)
}

struct CommandHandler {
    spec: CommandToolSpec,
    /// One permit per process that may run at once.
    slots: Arc<tokio::sync::Semaphore>,
}

/// Processes of one command tool running at once, unless `max_processes` says otherwise.
const DEFAULT_MAX_PROCESSES: usize = 32;

/// Output kept from one stream, bounded.
#[derive(Default)]
struct Captured {
    text: Vec<u8>,
    dropped: usize,
}

impl Captured {
    fn push(&mut self, bytes: &[u8], cap: usize) {
        let room = cap.saturating_sub(self.text.len());
        let take = room.min(bytes.len());
        self.text.extend_from_slice(&bytes[..take]);
        self.dropped += bytes.len() - take;
    }
    fn render(&self) -> String {
        let mut s = String::from_utf8_lossy(&self.text).into_owned();
        if self.dropped > 0 {
            s.push_str(&format!("\n[… {} more bytes not kept]", self.dropped));
        }
        s
    }
}

/// The word of a directive line (`ask` of `::ask {…}`), for messages about it.
fn directive_word(line: &[u8]) -> String {
    let rest = line.strip_prefix(b"::").unwrap_or(line);
    let end = rest
        .iter()
        .position(|b| !b.is_ascii_alphanumeric() && *b != b'_')
        .unwrap_or(rest.len())
        .min(32);
    String::from_utf8_lossy(&rest[..end]).into_owned()
}

enum Directive {
    Progress(f64, Option<f64>, Option<String>),
    Status(String),
    Log(LogLevel, String),
    Ask(String, Value),
    Checkpoint(Value),
    /// A `::checkpoint` line whose JSON does not parse: why.
    BadCheckpoint(String),
    /// `::event NAME {json}`: an event to publish (or, when the JSON does not parse, why not).
    Event(String, Result<Value, String>),
}

fn parse_directive(line: &str) -> Option<Directive> {
    let rest = line.strip_prefix("::")?;
    let (word, tail) = rest.split_once(' ').unwrap_or((rest, ""));
    let tail = tail.trim();
    match word {
        "progress" => {
            let (nums, msg) = tail.split_once(' ').unwrap_or((tail, ""));
            let (done, total) = match nums.split_once('/') {
                Some((d, t)) => (d.parse().ok()?, Some(t.parse().ok()?)),
                None => (nums.parse().ok()?, None),
            };
            let msg = (!msg.trim().is_empty()).then(|| msg.trim().to_string());
            Some(Directive::Progress(done, total, msg))
        }
        "status" if !tail.is_empty() => Some(Directive::Status(tail.to_string())),
        "log" => {
            let (level, msg) = tail.split_once(' ').unwrap_or((tail, ""));
            Some(Directive::Log(LogLevel::parse(level)?, msg.to_string()))
        }
        "ask" => {
            let v: Value = serde_json::from_str(tail).ok()?;
            let message = v.get("message")?.as_str()?.to_string();
            let schema = v
                .get("schema")
                .cloned()
                .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
            Some(Directive::Ask(message, schema))
        }
        "checkpoint" => Some(match serde_json::from_str(tail) {
            Ok(state) => Directive::Checkpoint(state),
            Err(e) => Directive::BadCheckpoint(e.to_string()),
        }),
        "event" => {
            let (name, json) = tail.split_once(' ').unwrap_or((tail, "{}"));
            if name.is_empty() {
                return None;
            }
            let data = serde_json::from_str(json.trim()).map_err(|e| e.to_string());
            Some(Directive::Event(name.to_string(), data))
        }
        _ => None,
    }
}

/// Publishes an event the program printed; a refusal is told to the client and the log (the
/// program goes on).
async fn publish_event(ctx: &TaskContext, tool: &str, name: String, data: Result<Value, String>) {
    let result = match data {
        Ok(data) => ctx.publish(&name, data).await.map_err(|e| e.to_string()),
        Err(why) => Err(format!("its JSON does not parse ({why})")),
    };
    if let Err(e) = result {
        tracing::warn!(tool, event = %name, error = %e, "an ::event line was not published");
        ctx.log(
            LogLevel::Warning,
            json!(format!("{tool}: the {name} event was not published: {e}")),
        )
        .await;
    }
}

/// Stores a checkpoint the program printed; a failure is told to the client and the log (the
/// program goes on: the task then resumes from an older checkpoint, or not at all).
async fn save_checkpoint(ctx: &TaskContext, tool: &str, state: Value) {
    if let Err(e) = ctx.save_checkpoint(state).await {
        tracing::warn!(tool, error = %e, "a ::checkpoint line was not stored");
        ctx.log(
            LogLevel::Warning,
            json!(format!("{tool}: the checkpoint was not stored: {e}")),
        )
        .await;
    }
}

/// Kills a command's process group (SIGKILL) when dropped; under a supervisor, the whole tree
/// (the group and every descendant that left it), synchronously. Disarmed once the child was
/// waited for: its pid may then be another process's.
struct KillGroupOnDrop {
    pid: Option<u32>,
    supervised: bool,
}

impl Drop for KillGroupOnDrop {
    fn drop(&mut self) {
        kill_tree(self.pid, self.supervised);
    }
}

/// SIGKILL to a command's process group, or under a supervisor to its whole tree.
fn kill_tree(pid: Option<u32>, supervised: bool) {
    match pid {
        Some(raw) if supervised => super::supervisor::kill_all(raw),
        _ => stop_group(pid, Signal::SIGKILL),
    }
}

fn stop_group(pid: Option<u32>, signal: Signal) {
    if let Some(pid) = pid {
        // The child leads its own process group, so this reaches everything it started.
        let _ = killpg(Pid::from_raw(pid as i32), signal);
    }
}

#[async_trait]
impl TaskHandler for CommandHandler {
    async fn run(&self, ctx: TaskContext, arguments: Arc<Value>) -> Outcome {
        let spec = &self.spec;
        let max = spec.max_processes.unwrap_or(DEFAULT_MAX_PROCESSES).max(1);
        let _slot = match self.slots.clone().try_acquire_owned() {
            Ok(permit) => permit,
            // A task is durable work: it waits its turn, and says so.
            Err(_) if ctx.task_id().is_some() => {
                ctx.status(format!(
                    "waiting: {max} processes of {} are running (max_processes)",
                    spec.name
                ))
                .await;
                tokio::select! {
                    permit = self.slots.clone().acquire_owned() => match permit {
                        Ok(p) => p,
                        Err(_) => return crate::core::rules::failure("the tool was shut down".into()),
                    },
                    _ = ctx.cancelled() => return crate::core::rules::failure("cancelled while waiting to start".into()),
                }
            }
            Err(_) => {
                return Outcome::Error {
                    code: mcp_tasks_protocol::error_codes::TOO_MANY_TASKS,
                    message: format!(
                        "Too many processes running: {max} of tool {}, the limit is {max}; wait for one to finish, or call the tool as a task",
                        spec.name
                    ),
                    data: Some(json!({"running": max, "limit": max})),
                }
            }
        };
        let argv = match expand_argv(&spec.command, &arguments) {
            Ok(a) => a,
            Err(e) => {
                return crate::tool::text_result(
                    format!("{}: cannot build the command line: {e}", spec.name),
                    true,
                )
            }
        };
        let supervised = super::supervisor::program();
        let mut cmd = match supervised {
            // The program under a supervisor, which outlives a killed server long enough to
            // take the program's descendants with it (`supervisor.rs`).
            Some(supervisor) => {
                let mut c = Command::new(supervisor);
                c.arg(super::supervisor::ARG)
                    .arg(std::process::id().to_string())
                    .arg("--")
                    .args(&argv);
                c
            }
            None => {
                let mut c = Command::new(&argv[0]);
                c.args(&argv[1..]);
                c
            }
        };
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .envs(&spec.env)
            .env("MCP_TASKS_TOOL", &spec.name)
            .env("MCP_TASKS_TASK_ID", ctx.task_id().unwrap_or(""))
            .env("MCP_TASKS_ATTEMPT", ctx.attempt().to_string())
            // Its parent may be the supervisor: the server says who it is.
            .env("MCP_TASKS_SERVER_PID", std::process::id().to_string())
            // The server's own secrets are not the program's.
            .env_remove("MCP_TASKS_WEBHOOK_KEYS");
        if let Some(saved) = ctx.checkpoint() {
            cmd.env("MCP_TASKS_CHECKPOINT", saved.to_string());
        }
        if let Some(dir) = &spec.cwd {
            cmd.current_dir(dir);
        }
        die_with_server(&mut cmd);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return crate::tool::text_result(
                    format!("{}: cannot start {:?}: {e}", spec.name, argv[0]),
                    true,
                )
            }
        };
        let pid = child.id();
        // However the run ends, the program's whole process group goes with it, also when the
        // run is dropped (a lost lease drops it at once): nothing it started outlives the run.
        let mut group = KillGroupOnDrop {
            pid,
            supervised: supervised.is_some(),
        };
        let mut stdin = child.stdin.take();
        // Answers to `::ask` questions, written back on stdin as they arrive (questions may overlap).
        let (answer_tx, mut answers) = mpsc::channel::<String>(16);
        let cap = spec.max_output_bytes.unwrap_or(1024 * 1024);
        let (tx, mut rx) = mpsc::channel(256);
        if let Some(out) = child.stdout.take() {
            tokio::spawn(read_lines(out, tx.clone(), true));
        }
        if let Some(err) = child.stderr.take() {
            tokio::spawn(read_lines(err, tx.clone(), false));
        }
        drop(tx);
        let timeout = Duration::from_secs(spec.timeout_secs.unwrap_or(3600));
        let grace = Duration::from_secs(spec.kill_grace_secs.unwrap_or(5));
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut stdout = Captured::default();
        let mut stderr = Captured::default();
        let mut stopped: Option<&'static str> = None;
        let mut kill_at: Option<tokio::time::Instant> = None;
        let mut streams_open = true;
        let mut reports = Reports::default();
        // The rest of an over-long line on stdout: dropped when the line was a directive.
        let mut skip_rest = false;
        let status = loop {
            let kill_timer = async {
                match kill_at {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            let flush_at = reports.flush_at();
            let flush_timer = async {
                match flush_at {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                line = rx.recv(), if streams_open => match line {
                    Some((true, Piece::Line(bytes))) => {
                        let text = String::from_utf8_lossy(&bytes);
                        match parse_directive(text.trim_end_matches(['\n', '\r'])) {
                            Some(Directive::Progress(d, t, m)) => {
                                reports.progress = Some((d, t, m));
                                if reports.due() {
                                    reports.apply(&ctx).await;
                                }
                            }
                            Some(Directive::Status(s)) => {
                                reports.status = Some(s);
                                if reports.due() {
                                    reports.apply(&ctx).await;
                                }
                            }
                            Some(Directive::Log(level, m)) => ctx.log(level, json!(m)).await,
                            Some(Directive::Checkpoint(state)) => {
                                // What the program reported before it is on the task first.
                                reports.apply(&ctx).await;
                                save_checkpoint(&ctx, &spec.name, state).await;
                            }
                            Some(Directive::Event(name, data)) => {
                                publish_event(&ctx, &spec.name, name, data).await;
                            }
                            Some(Directive::BadCheckpoint(why)) => {
                                tracing::warn!(tool = %spec.name, error = %why, "a ::checkpoint line is not JSON; not stored");
                                ctx.log(LogLevel::Warning, json!(format!("{}: a ::checkpoint line is not JSON ({why}); it was not stored", spec.name))).await;
                            }
                            Some(Directive::Ask(message, schema)) => {
                                // What the program was told before it asks is on the task first.
                                reports.apply(&ctx).await;
                                let ctx = ctx.clone();
                                let tx = answer_tx.clone();
                                tokio::spawn(async move {
                                    let line = match ctx.elicit(&message, schema).await {
                                        Ok(Elicitation::Accept(c)) => json!({"action": "accept", "content": c}),
                                        Ok(Elicitation::Decline) => json!({"action": "decline"}),
                                        Ok(Elicitation::Cancel) => json!({"action": "cancel"}),
                                        Err(e) => json!({"action": "cancel", "error": e.to_string()}),
                                    };
                                    let _ = tx.send(line.to_string()).await;
                                });
                            }
                            None => stdout.push(&bytes, cap),
                        }
                    }
                    Some((true, Piece::Head(bytes))) => {
                        skip_rest = bytes.starts_with(b"::");
                        if skip_rest {
                            let word = directive_word(&bytes);
                            tracing::warn!(tool = %spec.name, directive = %word, limit = MAX_LINE, "a directive line is too long; it was not applied");
                            let why = format!("the ::{word} line is longer than {MAX_LINE} bytes, the limit for a directive; it was not applied");
                            ctx.log(LogLevel::Warning, json!(format!("{}: {why}", spec.name))).await;
                            if word == "ask" {
                                // The program waits for an answer line: it gets one that says why.
                                let _ = answer_tx.try_send(json!({"action": "cancel", "error": why}).to_string());
                            }
                        } else {
                            stdout.push(&bytes, cap);
                        }
                    }
                    Some((true, Piece::Rest(bytes))) => {
                        if !skip_rest {
                            stdout.push(&bytes, cap);
                        }
                    }
                    Some((false, Piece::Line(bytes) | Piece::Head(bytes) | Piece::Rest(bytes))) => stderr.push(&bytes, cap),
                    None => streams_open = false,
                },
                () = flush_timer => reports.apply(&ctx).await,
                Some(answer) = answers.recv() => {
                    if let Some(pipe) = stdin.as_mut() {
                        use tokio::io::AsyncWriteExt;
                        let line = format!("{answer}\n");
                        if pipe.write_all(line.as_bytes()).await.is_err() || pipe.flush().await.is_err() {
                            stdin = None; // the program closed its stdin
                        }
                    }
                }
                status = child.wait() => {
                    if supervised.is_some() {
                        // Reaped: the supervisor killed what the program left before it exited,
                        // and its pid is free for others now.
                        group.pid = None;
                    }
                    break status;
                }
                _ = &mut deadline, if stopped.is_none() => {
                    stopped = Some("timed out");
                    stop_group(pid, Signal::SIGTERM);
                    kill_at = Some(tokio::time::Instant::now() + grace);
                }
                _ = ctx.cancelled(), if stopped.is_none() => {
                    // A hand-off stops it the same way: SIGTERM, then the grace period to print a
                    // last ::checkpoint; what it returns then is not the task's result.
                    stopped = Some(if ctx.is_handed_off() { "handed off" } else { "cancelled" });
                    stop_group(pid, Signal::SIGTERM);
                    kill_at = Some(tokio::time::Instant::now() + grace);
                }
                _ = kill_timer => {
                    kill_tree(pid, supervised.is_some());
                    kill_at = None;
                }
            }
        };
        // The program is gone; take what is left in the pipes (bounded by the readers' end of input).
        while let Ok(Some((is_out, piece))) =
            tokio::time::timeout(Duration::from_millis(200), rx.recv()).await
        {
            match (is_out, piece) {
                (true, Piece::Line(bytes)) => {
                    let text = String::from_utf8_lossy(&bytes);
                    match parse_directive(text.trim_end_matches(['\n', '\r'])) {
                        Some(Directive::Progress(d, t, m)) => reports.progress = Some((d, t, m)),
                        Some(Directive::Status(s)) => reports.status = Some(s),
                        Some(Directive::Checkpoint(state)) => {
                            save_checkpoint(&ctx, &spec.name, state).await
                        }
                        Some(Directive::Event(name, data)) => {
                            publish_event(&ctx, &spec.name, name, data).await
                        }
                        Some(_) => {}
                        None => stdout.push(&bytes, cap),
                    }
                }
                (true, Piece::Head(bytes)) => {
                    skip_rest = bytes.starts_with(b"::");
                    if !skip_rest {
                        stdout.push(&bytes, cap);
                    }
                }
                (true, Piece::Rest(bytes)) if !skip_rest => stdout.push(&bytes, cap),
                (true, Piece::Rest(_)) => {}
                (false, Piece::Line(b) | Piece::Head(b) | Piece::Rest(b)) => stderr.push(&b, cap),
            }
        }
        // The last reports count: the task's progress is where the program left it.
        reports.apply(&ctx).await;
        // Anything the program left running in its group goes too (a supervisor did this itself).
        if supervised.is_none() {
            stop_group(pid, Signal::SIGKILL);
        }
        let code = status.as_ref().ok().and_then(|s| s.code());
        let said = String::from_utf8_lossy(&stderr.text);
        if let Some(why) = said
            .strip_prefix(super::supervisor::CANNOT_START_PREFIX)
            .filter(|_| supervised.is_some() && code == Some(super::supervisor::CANNOT_START))
        {
            // The supervisor could not start the program: the same result as a failed spawn.
            return crate::tool::text_result(
                format!("{}: cannot start {}", spec.name, why.trim_end()),
                true,
            );
        }
        let (is_error, headline) = match (stopped, &status) {
            (Some(why), _) => (
                true,
                format!("{} {why} after {} s", spec.name, timeout.as_secs()),
            ),
            (None, Ok(s)) if s.success() => (false, String::new()),
            (None, Ok(s)) => (true, format!("{} exited with {}", spec.name, s)),
            (None, Err(e)) => (
                true,
                format!("{}: waiting for the program failed: {e}", spec.name),
            ),
        };
        let headline = match stopped {
            Some("cancelled") => format!("{} was cancelled", spec.name),
            _ => headline,
        };
        let mut content = Vec::new();
        if !headline.is_empty() {
            content.push(json!({"type": "text", "text": headline}));
        }
        content.push(json!({"type": "text", "text": stdout.render()}));
        if !stderr.text.is_empty() {
            content.push(json!({"type": "text", "text": format!("stderr:\n{}", stderr.render())}));
        }
        let mut value = json!({
            "content": content,
            "structuredContent": {
                "exitCode": code,
                "stdout": stdout.render(),
                "stderr": stderr.render(),
            },
        });
        if is_error {
            value["isError"] = json!(true);
        }
        Outcome::Result { value, is_error }
    }
}

/// Makes the command's process die with the server (Linux: the parent-death signal). Without it, a
/// server killed with SIGKILL left its tools running: on a shared store another replica then takes the
/// task over and re-runs it while the first run goes on. The process's own children are covered only
/// under a supervisor (`supervisor.rs`), which replaces this signal with one it can act on.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)] // the one `unsafe` of the workspace (which denies it elsewhere)
pub(crate) fn die_with_server(cmd: &mut Command) {
    let server = std::process::id() as i32;
    // SAFETY: the closure runs in the child between fork and exec and only makes two system calls
    // (`prctl`, `getppid`), both async-signal-safe; it allocates nothing and takes no lock.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
            // The server may have died between fork and prctl: then no signal would ever come.
            if nix::unistd::getppid().as_raw() != server {
                return Err(std::io::Error::other("the server exited"));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn die_with_server(_cmd: &mut Command) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_expands_whole_and_embedded_placeholders() {
        let t: Vec<String> = ["echo", "{msg}", "--n={n}", "{files}", "{absent}", "{{lit}}"]
            .map(String::from)
            .to_vec();
        let argv =
            expand_argv(&t, &json!({"msg": "hi there", "n": 3, "files": ["a", "b"]})).unwrap();
        assert_eq!(argv, ["echo", "hi there", "--n=3", "a", "b", "{lit}"]);
    }

    #[test]
    fn directives_parse() {
        assert!(
            matches!(parse_directive("::progress 3/10 copying"), Some(Directive::Progress(d, Some(t), Some(ref m))) if d == 3.0 && t == 10.0 && m == "copying")
        );
        assert!(
            matches!(parse_directive("::progress 4"), Some(Directive::Progress(d, None, None)) if d == 4.0)
        );
        assert!(
            matches!(parse_directive("::checkpoint {\"next\": 7}"), Some(Directive::Checkpoint(ref v)) if v["next"] == 7)
        );
        assert!(matches!(
            parse_directive("::checkpoint not json"),
            Some(Directive::BadCheckpoint(_))
        ));
        assert!(
            matches!(parse_directive("::status packing"), Some(Directive::Status(ref s)) if s == "packing")
        );
        assert!(matches!(
            parse_directive("::log warning low disk"),
            Some(Directive::Log(LogLevel::Warning, _))
        ));
        assert!(parse_directive("::progress x/y").is_none());
        assert!(parse_directive("plain output").is_none());
    }
}
