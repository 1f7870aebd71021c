//! `mcp-tasks events list|watch`: MCP Events from the command line, by polling (`events/poll`),
//! so no webhook is needed: the types a server offers, and a type's events as they come, one line
//! each (or JSON lines), from now or from a cursor a previous run printed.

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::sync::Arc;
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
    /// Print a type's events as they happen (events/poll), until Ctrl-C or --count events.
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
            let mut cursor = cursor;
            let mut seen = 0usize;
            eprintln!("watching {name} on {} (Ctrl-C stops)", client.url());
            loop {
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
                    if json {
                        println!("{e}");
                    } else {
                        println!(
                            "{}  {}  {}",
                            e["timestamp"].as_str().unwrap_or(""),
                            e["name"].as_str().unwrap_or(""),
                            e["data"]
                        );
                    }
                    seen += 1;
                    if count.is_some_and(|c| seen >= c) {
                        if let Some(c) = e["cursor"].as_str() {
                            eprintln!("cursor {c}");
                        }
                        return Ok(exit::OK);
                    }
                }
                cursor = page["cursor"].as_str().map(str::to_string);
                let wait = page["nextPollMs"]
                    .as_u64()
                    .unwrap_or(2_000)
                    .max(if page["hasMore"] == true { 0 } else { 500 });
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(wait)) => {}
                    _ = tokio::signal::ctrl_c() => {
                        if let Some(c) = &cursor {
                            eprintln!("cursor {c}");
                        }
                        return Ok(exit::OK);
                    }
                }
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
