//! stdio: the server is a child process speaking newline-delimited JSON-RPC on stdin/stdout.
//! Responses go to the request that waits for them by id; what the server sends on its own
//! (questions, notifications) goes to the longest-waiting request, as a stream's would on HTTP.

use mcp_tasks_protocol::jsonrpc::{message_from_value, Message, RequestId};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
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
    by_id: BTreeMap<String, (u64, mpsc::Sender<Result<Message>>)>,
    unclaimed: Vec<Message>,
}

/// Most messages kept for the next request.
const MAX_UNCLAIMED: usize = 1024;

pub(crate) struct StdioTransport {
    command: StdioCommand,
    stdin: tokio::sync::Mutex<ChildStdin>,
    waiting: Arc<Mutex<Waiting>>,
    _child: Child,
}

fn key(id: &RequestId) -> String {
    id.to_value().to_string()
}

impl StdioTransport {
    pub(crate) fn spawn(command: &StdioCommand) -> Result<StdioTransport> {
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
        let mut child = cmd
            .args(args)
            .envs(command.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
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
        let waiting: Arc<Mutex<Waiting>> = Arc::default();
        let w = waiting.clone();
        let line = command.line();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            loop {
                let next = lines.next_line().await;
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
                let target = {
                    let mut g = w.lock().unwrap_or_else(|e| e.into_inner());
                    // A request given up on (cancelled, timed out) waits no more: what the server
                    // sends of its own must not go to it.
                    g.by_id.retain(|_, (_, tx)| !tx.is_closed());
                    let t = match &msg {
                        Message::Response(r) => g.by_id.remove(&key(&r.id)).map(|(_, tx)| tx),
                        Message::Error(e) => match &e.id {
                            Some(id) => g.by_id.remove(&key(id)).map(|(_, tx)| tx),
                            None => None,
                        },
                        // The longest-waiting request gets what the server sends of its own.
                        _ => g
                            .by_id
                            .values()
                            .min_by_key(|(order, _)| *order)
                            .map(|(_, tx)| tx.clone()),
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
            // The server is gone: everyone waiting hears it.
            let all: Vec<_> = {
                let mut g = w.lock().unwrap_or_else(|e| e.into_inner());
                std::mem::take(&mut g.by_id).into_values().collect()
            };
            for (_, tx) in all {
                let _ = tx
                    .send(Err(ClientError::Connection {
                        context: "the stdio server".into(),
                        source: "it closed its output (exited?)".into(),
                        not_sent: false,
                    }))
                    .await;
            }
        });
        Ok(StdioTransport {
            command: command.clone(),
            stdin: tokio::sync::Mutex::new(stdin),
            waiting,
            _child: child,
        })
    }

    pub(crate) fn command(&self) -> &StdioCommand {
        &self.command
    }

    /// Writes one message; a request's answer (and what comes before it) arrives on the exchange.
    pub(crate) async fn send(&self, body: &Value, context: &str) -> Result<Exchange> {
        let (tx, rx) = mpsc::channel(64 + MAX_UNCLAIMED);
        let is_request = body.get("method").is_some() && body.get("id").is_some();
        if is_request {
            let id = body.get("id").map(Value::to_string).unwrap_or_default();
            let mut g = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
            g.next += 1;
            let order = g.next;
            for m in std::mem::take(&mut g.unclaimed) {
                let _ = tx.try_send(Ok(m));
            }
            g.by_id.insert(id, (order, tx));
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
            return Err(ClientError::Connection {
                context: context.to_string(),
                source: Box::new(e),
                not_sent: true,
            });
        }
        Ok(Exchange::from_receiver(rx))
    }
}
