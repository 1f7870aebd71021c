//! `mcp-tasks events list|watch`: MCP Events from the command line, by `events/stream` (or
//! `events/poll` where a server has no stream), so no webhook is needed: the types a server offers, and a type's events as they come, one line
//! each (or JSON lines), from now or from a cursor a previous run printed.

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{connect, exit, ServerArgs};

/// `mcp-tasks events …`.
#[derive(clap::Subcommand)]
pub enum EventsCommand {
    /// List the event types the server offers (events/list).
    List {
        /// Print JSON lines (each EventDefinition).
        #[arg(long)]
        json: bool,
    },
    /// Print a type's events as they happen (events/stream, or events/poll where the server has
    /// no stream), until Ctrl-C or --count events.
    Watch {
        /// The event type, e.g. task.finished.
        name: String,
        /// Filters: KEY=VALUE (a JSON value, or else a string), e.g. taskId=01a2… or branch=main.
        #[arg(value_name = "KEY=VALUE")]
        arguments: Vec<String>,
        /// Go on from this cursor (a previous run's last printed one) instead of from now.
        #[arg(long)]
        cursor: Option<String>,
        /// Stop after this many events.
        #[arg(long)]
        count: Option<usize>,
        /// Print JSON lines (each EventOccurrence).
        #[arg(long)]
        json: bool,
    },
}

/// The arguments `KEY=VALUE…` as an object (a value that is not JSON is a string).
pub fn arguments(pairs: &[String]) -> Result<Value> {
    let mut m = serde_json::Map::new();
    for p in pairs {
        let Some((k, v)) = p.split_once('=') else {
            bail!("argument {p:?} is not KEY=VALUE");
        };
        let value = serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_string()));
        m.insert(k.to_string(), value);
    }
    Ok(Value::Object(m))
}

/// Runs `command` against `server`.
pub async fn run(server: &ServerArgs, command: EventsCommand) -> Result<i32> {
    let client = connect(server, Arc::new(mcp_tasks_client::NoInput)).await?;
    if client.capabilities().get("events").is_none() {
        eprintln!(
            "{} does not offer MCP Events (no capabilities.events)",
            client.url()
        );
        return Ok(exit::USAGE);
    }
    match command {
        EventsCommand::List { json } => {
            let mut cursor: Option<String> = None;
            let mut n = 0;
            loop {
                let mut params = json!({});
                if let Some(c) = &cursor {
                    params["cursor"] = json!(c);
                }
                let page = client
                    .request("events/list", params, &|_| {})
                    .await
                    .context("events/list")?;
                for e in page["events"].as_array().into_iter().flatten() {
                    n += 1;
                    if json {
                        println!("{e}");
                    } else {
                        let modes: Vec<&str> = e["delivery"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(Value::as_str)
                            .collect();
                        let args: Vec<&String> = e["inputSchema"]["properties"]
                            .as_object()
                            .map(|p| p.keys().collect())
                            .unwrap_or_default();
                        println!(
                            "{}  [{}]  arguments: {}  {}",
                            e["name"].as_str().unwrap_or("?"),
                            modes.join(", "),
                            if args.is_empty() {
                                "none".to_string()
                            } else {
                                args.iter()
                                    .map(|a| a.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            },
                            e["description"].as_str().unwrap_or("")
                        );
                    }
                }
                match page["nextCursor"].as_str() {
                    Some(c) if Some(c) != cursor.as_deref() => cursor = Some(c.to_string()),
                    _ => break,
                }
            }
            eprintln!("{n} event types on {}", client.url());
            Ok(exit::OK)
        }
        EventsCommand::Watch {
            name,
            arguments: pairs,
            cursor,
            count,
            json,
        } => {
            let args = arguments(&pairs)?;
            eprintln!("watching {name} on {} (Ctrl-C stops)", client.url());
            let watch = Watch {
                seen: AtomicUsize::new(0),
                count,
                json,
                cursor: Mutex::new(cursor),
                done: tokio::sync::Notify::new(),
            };
            // events/stream where the server has it (the events come as they are written),
            // events/poll where it does not.
            match watch.stream(&client, &name, &args).await {
                Err(e) if e.rpc_code() == Some(METHOD_NOT_FOUND) => {
                    tracing::debug!("the server has no events/stream; polling");
                    watch.poll(&client, &name, &args).await
                }
                other => other.map_err(|e| anyhow::Error::new(e).context("events/stream")),
            }
        }
    }
}

/// JSON-RPC's "method not found".
const METHOD_NOT_FOUND: i64 = -32601;

/// A watch's state: what it printed, where it stands, when it is done.
struct Watch {
    seen: AtomicUsize,
    count: Option<usize>,
    json: bool,
    /// The last cursor: the next poll's, and the one printed when the watch stops.
    cursor: Mutex<Option<String>>,
    /// Raised once `count` events were printed.
    done: tokio::sync::Notify,
}

impl Watch {
    /// Prints `e` (an EventOccurrence); whether the watch is done.
    fn print(&self, e: &Value) -> bool {
        if self.json {
            println!("{e}");
        } else {
            println!(
                "{}  {}  {}",
                e["timestamp"].as_str().unwrap_or(""),
                e["name"].as_str().unwrap_or(""),
                e["data"]
            );
        }
        if let Some(c) = e["cursor"].as_str() {
            *self.cursor.lock().unwrap_or_else(|p| p.into_inner()) = Some(c.to_string());
        }
        let seen = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
        self.count.is_some_and(|c| seen >= c)
    }

    /// Says where to go on from (stderr) and ends the watch.
    fn stop(&self) -> i32 {
        if let Some(c) = &*self.cursor.lock().unwrap_or_else(|p| p.into_inner()) {
            eprintln!("cursor {c}");
        }
        exit::OK
    }

    /// Follows one `events/stream` until `count` events, Ctrl-C or the server's end of it.
    async fn stream(
        &self,
        client: &mcp_tasks_client::Client,
        name: &str,
        args: &Value,
    ) -> std::result::Result<i32, mcp_tasks_client::ClientError> {
        let cursor = self
            .cursor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let on_note = |n: &mcp_tasks_protocol::jsonrpc::Notification| {
            let params = n.params.clone().unwrap_or(Value::Null);
            match n.method.as_str() {
                "notifications/events/event" => {
                    let finished = self.print(&params);
                    if finished {
                        self.done.notify_one();
                    }
                }
                "notifications/events/active" => {
                    if let Some(c) = params["cursor"].as_str() {
                        let mut at = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
                        at.get_or_insert_with(|| c.to_string());
                    }
                    if params["truncated"] == true {
                        eprintln!("some events after the cursor are no longer kept (truncated)");
                    }
                }
                "notifications/events/error" => {
                    eprintln!(
                        "the server could not read its events for a moment: {}",
                        params["error"]["message"]
                    );
                }
                "notifications/events/terminated" => {
                    eprintln!("the server ended the watch: {}", params["error"]["message"]);
                }
                _ => {}
            }
        };
        let request = client.request(
            "events/stream",
            json!({"name": name, "arguments": args, "cursor": cursor}),
            &on_note,
        );
        tokio::select! {
            r = request => {
                r?;
                eprintln!("the server ended the stream");
                Ok(self.stop())
            }
            () = self.done.notified() => Ok(self.stop()),
            _ = tokio::signal::ctrl_c() => Ok(self.stop()),
        }
    }

    /// Polls `events/poll` until `count` events or Ctrl-C (a server without `events/stream`).
    async fn poll(
        &self,
        client: &mcp_tasks_client::Client,
        name: &str,
        args: &Value,
    ) -> Result<i32> {
        loop {
            let cursor = self
                .cursor
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let page = client
                .request(
                    "events/poll",
                    json!({"name": name, "arguments": args, "cursor": cursor}),
                    &|_| {},
                )
                .await
                .context("events/poll")?;
            if page["truncated"] == true {
                eprintln!("some events after the cursor are no longer kept (truncated)");
            }
            for e in page["events"].as_array().into_iter().flatten() {
                if self.print(e) {
                    return Ok(self.stop());
                }
            }
            if let Some(c) = page["cursor"].as_str() {
                *self.cursor.lock().unwrap_or_else(|p| p.into_inner()) = Some(c.to_string());
            }
            let wait = page["nextPollMs"]
                .as_u64()
                .unwrap_or(2_000)
                .max(if page["hasMore"] == true { 0 } else { 500 });
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(wait)) => {}
                _ = tokio::signal::ctrl_c() => return Ok(self.stop()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn arguments_are_json_or_strings() {
        let a = super::arguments(&["taskId=01ab".into(), "n=3".into(), "ok=true".into()]).unwrap();
        assert_eq!(a, serde_json::json!({"taskId": "01ab", "n": 3, "ok": true}));
        assert!(super::arguments(&["nope".into()]).is_err());
    }
}
