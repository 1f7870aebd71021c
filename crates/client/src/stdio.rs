//! stdio: the server is a child process speaking newline-delimited JSON-RPC on stdin/stdout.
//! Responses go to the request that waits for them by id. What the server sends on its own goes to
//! the request it most likely belongs to, as a stream's would on HTTP: a progress notification to
//! the request with its progress token; a question to the longest-waiting request that has no
//! question of the server unanswered (stdio carries no other link between a server's question and
//! the call it is about, so concurrent calls each asking are told apart this way); the rest to the
//! longest-waiting request.

use mcp_tasks_protocol::jsonrpc::{message_from_value, Message, RequestId};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, Command};
use tokio::sync::mpsc;

use crate::error::{ClientError, Result};
use crate::http::Exchange;

/// How to start a stdio server.
#[derive(Clone, Debug)]
pub struct StdioCommand {
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// Working directory (default: this process's).
    pub cwd: Option<std::path::PathBuf>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Runs on the command before it starts (e.g. to make the child die with this process).
    pub prepare: Option<fn(&mut Command)>,
    /// Reads the server's standard error instead of passing it through: each line is logged (target
    /// `mcp_tasks_client::stderr`) and the last ones go into [`ClientError::Exited`] when it exits.
    pub keep_stderr: bool,
    /// Starts the server as the leader of a process group of its own (Unix), and kills that whole
    /// group when the connection ends. A host that stops us by signalling our process group (the
    /// MCP SDKs' stdio clients do: SIGTERM to the group two seconds after closing our stdin) then
    /// reaches only us, so a call in flight is not failed by the server dying beside us; and what
    /// the server started in its group ends with it.
    pub own_group: bool,
}

impl StdioCommand {
    /// Splits a command line as a POSIX shell would (quotes, escapes), without running a shell.
    pub fn parse(line: &str) -> Result<StdioCommand> {
        let argv = shlex::split(line)
            .filter(|a| !a.is_empty())
            .ok_or_else(|| {
                ClientError::Unsupported(format!("cannot split the command {line:?}"))
            })?;
        Ok(StdioCommand {
            argv,
            cwd: None,
            env: Vec::new(),
            prepare: None,
            keep_stderr: false,
            own_group: false,
        })
    }

    /// The command as one line (for references and messages).
    pub fn line(&self) -> String {
        shlex::try_join(self.argv.iter().map(String::as_str))
            .unwrap_or_else(|_| self.argv.join(" "))
    }
}

/// Who waits for what: per request id, the exchange its messages go to, in the order sent; and
/// what the server sent of its own while no request was waiting (a question must not be lost: it
/// goes to the next request, which then answers it).
#[derive(Default)]
struct Waiting {
    next: u64,
    by_id: BTreeMap<String, Waiter>,
    unclaimed: Vec<Message>,
    /// The server's questions not answered yet: their id → the request they went to.
    asked: std::collections::HashMap<String, String>,
}

/// A request waiting for its answer.
struct Waiter {
    /// When it was sent (a counter).
    order: u64,
    tx: mpsc::Sender<Result<Message>>,
    /// Its `_meta.progressToken`, as JSON text.
    token: Option<String>,
    /// Server questions routed to it and not answered yet.
    questions: usize,
}

impl Waiting {
    /// The request a message the server sent on its own goes to.
    fn target(&self, msg: &Message) -> Option<String> {
        let oldest = |free: bool| {
            self.by_id
                .iter()
                .filter(|(_, w)| !free || w.questions == 0)
                .min_by_key(|(_, w)| w.order)
                .map(|(k, _)| k.clone())
        };
        match msg {
            Message::Notification(n) => {
                let token = n
                    .params
                    .as_ref()
                    .and_then(|p| p.get("progressToken"))
                    .map(Value::to_string);
                token
                    .and_then(|t| {
                        self.by_id
                            .iter()
                            .find(|(_, w)| w.token.as_deref() == Some(t.as_str()))
                            .map(|(k, _)| k.clone())
                    })
                    .or_else(|| oldest(false))
            }
            Message::Request(_) => oldest(true).or_else(|| oldest(false)),
            _ => None,
        }
    }
}

/// Most messages kept for the next request.
const MAX_UNCLAIMED: usize = 1024;
/// Lines of standard error kept for the exit report, and the longest line kept.
const STDERR_LINES: usize = 20;
const STDERR_LINE_CHARS: usize = 400;
/// How long a server that closed its output gets to exit before it is killed.
const EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// How the server ended: its status and last lines on standard error.
#[derive(Clone, Debug)]
struct Exit {
    status: String,
    stderr_tail: String,
}

pub(crate) struct StdioTransport {
    command: StdioCommand,
    stdin: tokio::sync::Mutex<ChildStdin>,
    waiting: Arc<Mutex<Waiting>>,
    /// Set once when the server is gone.
    exit: tokio::sync::watch::Receiver<Option<Exit>>,
    /// Dropped with the transport: the reader then kills the child.
    _alive: tokio::sync::oneshot::Sender<()>,
    /// While set (and until the instant it holds, if any), the server's stderr is relayed at debug:
    /// what it says about our discovery probe (a 2025 server's validation errors for
    /// `server/discover`) is not news to whoever reads the log at info.
    quiet: Arc<Mutex<Option<Option<std::time::Instant>>>>,
}

/// How long after the probe's answer its stderr lines are still taken for the probe's (they come
/// on another pipe than the answer, and are read when the reader task next runs).
const QUIET_AFTER_PROBE: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether stderr lines are relayed at debug now (see [`StdioTransport::quiet`]).
fn quiet_now(quiet: &Mutex<Option<Option<std::time::Instant>>>) -> bool {
    match *quiet.lock().unwrap_or_else(|e| e.into_inner()) {
        None => false,
        Some(None) => true,
        Some(Some(until)) => std::time::Instant::now() < until,
    }
}

/// Kills the process group led by the server when dropped (for [`StdioCommand::own_group`]).
struct GroupEnd(Option<u32>);

impl Drop for GroupEnd {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(pid) = self.0.and_then(|p| i32::try_from(p).ok()) {
            // Its members may be gone already (the server reaped, nothing left in its group).
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

fn key(id: &RequestId) -> String {
    id.to_value().to_string()
}

impl StdioTransport {
    pub(crate) fn spawn(
        command: &StdioCommand,
        changes: tokio::sync::broadcast::Sender<String>,
    ) -> Result<StdioTransport> {
        let (program, args) = command
            .argv
            .split_first()
            .ok_or_else(|| ClientError::Unsupported("an empty stdio command".into()))?;
        let mut cmd = Command::new(program);
        if let Some(dir) = &command.cwd {
            cmd.current_dir(dir);
        }
        if let Some(prepare) = command.prepare {
            prepare(&mut cmd);
        }
        #[cfg(unix)]
        if command.own_group {
            cmd.process_group(0);
        }
        let mut child = cmd
            .args(args)
            .envs(command.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(if command.keep_stderr {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| ClientError::Io {
                context: format!("start the stdio server {}", command.line()),
                source: e,
            })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(ClientError::protocol(
                "the stdio server's pipes are missing",
            ));
        };
        // Moved into the task that owns the child: however that task ends (the server exited,
        // the connection was dropped, the runtime shut down), the group goes with it.
        let group = GroupEnd(command.own_group.then(|| child.id()).flatten());
        let waiting: Arc<Mutex<Waiting>> = Arc::default();
        let w = waiting.clone();
        let line = command.line();
        let tail: Arc<Mutex<std::collections::VecDeque<String>>> = Arc::default();
        let quiet: Arc<Mutex<Option<Option<std::time::Instant>>>> = Arc::default();
        let stderr_reader = child.stderr.take().map(|stderr| {
            let (tail, line, quiet) = (tail.clone(), line.clone(), quiet.clone());
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(text)) = lines.next_line().await {
                    if quiet_now(&quiet) {
                        tracing::debug!(target: "mcp_tasks_client::stderr", server = %line, "{text}");
                    } else {
                        tracing::info!(target: "mcp_tasks_client::stderr", server = %line, "{text}");
                    }
                    let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
                    if t.len() == STDERR_LINES {
                        t.pop_front();
                    }
                    t.push_back(text.chars().take(STDERR_LINE_CHARS).collect());
                }
            })
        });
        let (exit_tx, exit) = tokio::sync::watch::channel(None);
        let (alive, mut dropped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let group = group;
            let mut lines = BufReader::new(stdout).lines();
            loop {
                let next = tokio::select! {
                    next = lines.next_line() => next,
                    // The client is gone: so is the server (`kill_on_drop`).
                    _ = &mut dropped => return,
                };
                let text = match next {
                    Ok(Some(t)) => t,
                    Ok(None) | Err(_) => break,
                };
                if text.trim().is_empty() {
                    continue;
                }
                let msg = match serde_json::from_str::<Value>(&text)
                    .ok()
                    .and_then(|v| message_from_value(v).ok())
                {
                    Some(m) => m,
                    None => {
                        tracing::warn!(server = %line, "the stdio server wrote a line that is not JSON-RPC; ignored");
                        continue;
                    }
                };
                // A list change concerns the connection, not a request: it goes to whoever follows
                // the server's lists.
                if let Message::Notification(n) = &msg {
                    if crate::transport::is_list_change(&n.method) {
                        let _ = changes.send(n.method.clone());
                        continue;
                    }
                }
                let target = {
                    let mut g = w.lock().unwrap_or_else(|e| e.into_inner());
                    // A request given up on (cancelled, timed out) waits no more: what the server
                    // sends of its own must not go to it.
                    g.by_id.retain(|_, w| !w.tx.is_closed());
                    let Waiting { by_id, asked, .. } = &mut *g;
                    asked.retain(|_, k| by_id.contains_key(k));
                    let t = match &msg {
                        Message::Response(r) => g.by_id.remove(&key(&r.id)).map(|w| w.tx),
                        Message::Error(e) => match &e.id {
                            Some(id) => g.by_id.remove(&key(id)).map(|w| w.tx),
                            None => None,
                        },
                        other => match g.target(other) {
                            Some(k) => {
                                if let Message::Request(r) = other {
                                    g.asked.insert(key(&r.id), k.clone());
                                    if let Some(w) = g.by_id.get_mut(&k) {
                                        w.questions += 1;
                                    }
                                }
                                g.by_id.get(&k).map(|w| w.tx.clone())
                            }
                            None => None,
                        },
                    };
                    if t.is_none()
                        && matches!(msg, Message::Request(_) | Message::Notification(_))
                        && g.unclaimed.len() < MAX_UNCLAIMED
                    {
                        g.unclaimed.push(msg.clone());
                    }
                    t
                };
                if let Some(tx) = target {
                    let _ = tx.send(Ok(msg)).await;
                }
            }
            // The server closed its output: it exits (or is made to), and everyone waiting hears
            // how it ended.
            let status = match tokio::time::timeout(EXIT_GRACE, child.wait()).await {
                Ok(Ok(status)) => status.to_string(),
                Ok(Err(e)) => format!("its exit status is unknown: {e}"),
                Err(_) => {
                    let _ = child.kill().await;
                    "it closed its output and was killed".to_string()
                }
            };
            // At once after the reap: the group's id cannot have been taken again yet.
            drop(group);
            if let Some(reader) = stderr_reader {
                let _ = tokio::time::timeout(std::time::Duration::from_secs(1), reader).await;
            }
            let stderr_tail = {
                let t = tail.lock().unwrap_or_else(|e| e.into_inner());
                t.iter().map(String::as_str).collect::<Vec<_>>().join("\n")
            };
            let ended = Exit {
                status,
                stderr_tail,
            };
            tracing::debug!(server = %line, status = %ended.status, "the stdio server exited");
            let _ = exit_tx.send(Some(ended.clone()));
            let all: Vec<_> = {
                let mut g = w.lock().unwrap_or_else(|e| e.into_inner());
                std::mem::take(&mut g.by_id).into_values().collect()
            };
            for waiter in all {
                let _ = waiter.tx.send(Err(exited(&line, &ended))).await;
            }
        });
        Ok(StdioTransport {
            command: command.clone(),
            stdin: tokio::sync::Mutex::new(stdin),
            waiting,
            exit,
            _alive: alive,
            quiet,
        })
    }

    /// Relays the server's stderr at debug from now (`true`) until a moment after `false`: the
    /// window of the discovery probe.
    pub(crate) fn quiet_stderr(&self, on: bool) {
        *self.quiet.lock().unwrap_or_else(|e| e.into_inner()) = Some(if on {
            None
        } else {
            Some(std::time::Instant::now() + QUIET_AFTER_PROBE)
        });
    }

    /// Resolves when the server has exited, with how it ended.
    pub(crate) async fn closed(&self) -> ClientError {
        let mut exit = self.exit.clone();
        let line = self.command.line();
        let ended = exit
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|e| e.clone());
        match ended {
            Some(e) => exited(&line, &e),
            None => unreachable_exit(&line),
        }
    }

    pub(crate) fn command(&self) -> &StdioCommand {
        &self.command
    }

    /// Writes one message; a request's answer (and what comes before it) arrives on the exchange.
    pub(crate) async fn send(&self, body: &Value, context: &str) -> Result<Exchange> {
        if let Some(e) = self.exit.borrow().as_ref() {
            return Err(exited(&self.command.line(), e));
        }
        let (tx, rx) = mpsc::channel(64 + MAX_UNCLAIMED);
        let is_request = body.get("method").is_some() && body.get("id").is_some();
        let id = body.get("id").map(Value::to_string).unwrap_or_default();
        if is_request {
            let token = body
                .pointer("/params/_meta/progressToken")
                .map(Value::to_string);
            let mut g = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
            g.next += 1;
            let order = g.next;
            for m in std::mem::take(&mut g.unclaimed) {
                let _ = tx.try_send(Ok(m));
            }
            g.by_id.insert(
                id,
                Waiter {
                    order,
                    tx,
                    token,
                    questions: 0,
                },
            );
        } else if body.get("method").is_none() {
            // An answer to one of the server's questions: the request it went to is free again.
            let mut g = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(k) = g.asked.remove(&id) {
                if let Some(w) = g.by_id.get_mut(&k) {
                    w.questions = w.questions.saturating_sub(1);
                }
            }
        }
        let mut line = body.to_string();
        line.push('\n');
        let mut stdin = self.stdin.lock().await;
        let written = async {
            stdin.write_all(line.as_bytes()).await?;
            stdin.flush().await
        }
        .await;
        if let Err(e) = written {
            drop(stdin);
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                // The server is gone (it exited before reading this): say how it ended, with its
                // last words, rather than that a pipe broke.
                let mut exit = self.exit.clone();
                let limit = EXIT_GRACE + std::time::Duration::from_secs(1);
                let ended = tokio::time::timeout(limit, async {
                    exit.wait_for(Option::is_some)
                        .await
                        .ok()
                        .and_then(|e| e.clone())
                })
                .await;
                if let Ok(Some(ended)) = ended {
                    return Err(exited(&self.command.line(), &ended));
                }
            }
            return Err(ClientError::Connection {
                context: context.to_string(),
                source: Box::new(e),
                not_sent: true,
            });
        }
        Ok(Exchange::from_receiver(rx))
    }
}

fn exited(command: &str, e: &Exit) -> ClientError {
    ClientError::Exited {
        command: command.to_string(),
        status: e.status.clone(),
        stderr_tail: e.stderr_tail.clone(),
    }
}

/// The reader ended without saying how the server did (it cannot: it sets the exit before it ends).
fn unreachable_exit(command: &str) -> ClientError {
    ClientError::Exited {
        command: command.to_string(),
        status: "ended".into(),
        stderr_tail: String::new(),
    }
}
