//! `mcp-tasks admin …`: the operator's commands, on the admin API of a running server.

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::path::PathBuf;

use crate::config::ConfigFile;

/// Where the server's admin API is and who is asking. The flags are global: they may come before
/// or after the subcommand (`admin --url U tasks` and `admin tasks --url U`).
#[derive(clap::Args, Debug)]
pub struct AdminArgs {
    /// The admin address, e.g. http://127.0.0.1:9090 (default: from --config, else
    /// http://127.0.0.1:8080).
    #[arg(
        long,
        env = "MCP_TASKS_ADMIN_URL",
        conflicts_with = "config",
        global = true
    )]
    url: Option<String>,
    /// The server's config file: its [admin] listen (else [server] listen) is the address.
    #[arg(long, short = 'c', global = true)]
    config: Option<PathBuf>,
    /// An operator's credentials: an API key whose [[auth.keys]] entry has operator = true, or an
    /// OAuth access token carrying [auth.oauth] operator_scope.
    #[arg(long, env = "MCP_TASKS_KEY", hide_env_values = true, global = true)]
    key: Option<String>,
    #[command(subcommand)]
    command: AdminCommand,
}

/// The admin commands.
#[derive(clap::Subcommand, Debug)]
pub enum AdminCommand {
    /// List every principal's tasks, newest first.
    Tasks {
        /// working, input_required, completed, failed (a JSON-RPC error or a tool error) or
        /// cancelled.
        #[arg(long)]
        status: Option<String>,
        /// Only this tool's.
        #[arg(long)]
        tool: Option<String>,
        /// Only this principal's.
        #[arg(long)]
        principal: Option<String>,
        /// At most this many (default 200).
        #[arg(long)]
        limit: Option<usize>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one task: arguments, status, progress, pending questions, result or error.
    Show {
        /// The task's id.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a task.
    Cancel {
        /// The task's id.
        id: String,
    },
    /// Send a task a signal as the operator (an approval, a decision); kept with the task if
    /// nothing waits for it yet.
    Signal {
        /// The task's id.
        id: String,
        /// The signal's name.
        name: String,
        /// What it carries, as JSON; without it, null.
        payload: Option<String>,
        /// A key: sending again with it is the same signal.
        #[arg(long, value_name = "KEY")]
        signal_key: Option<String>,
    },
    /// Delete finished tasks (and their questions) that ended more than DURATION ago.
    Purge {
        /// How long ago, e.g. 30m, 12h, 7d (s, m, h, d).
        #[arg(long, value_parser = parse_duration_ms)]
        finished_before: u64,
    },
    /// Webhook deliveries: list them, show one with its attempts, send one again.
    #[command(subcommand)]
    Webhooks(WebhooksCommand),
    /// MCP Events subscriptions: list them with how delivery goes, show one with its deliveries,
    /// end one.
    #[command(subcommand)]
    Subscriptions(SubscriptionsCommand),
    /// A task's step journal: export it (for a replay check before a deploy), run the task again
    /// from a step, or drop the journal and start over.
    #[command(subcommand)]
    Journal(JournalCommand),
}

/// `mcp-tasks admin journal …`.
#[derive(clap::Subcommand, Debug)]
pub enum JournalCommand {
    /// Print the task's journal as JSON (step outputs in full): what
    /// `mcp_tasks_engine::replay_check` replays.
    Export {
        /// The task's id.
        id: String,
    },
    /// Run an unfinished task again from step N: steps N and after are dropped and run again,
    /// the steps before are replayed. Its current run is stopped first.
    Rewind {
        /// The task's id.
        id: String,
        /// The first step to drop (its place, as `admin show` lists it).
        #[arg(long)]
        from: u32,
    },
    /// Drop an unfinished task's journal and checkpoint, and run it again from the start.
    Restart {
        /// The task's id.
        id: String,
    },
}

/// `mcp-tasks admin subscriptions …`.
#[derive(clap::Subcommand, Debug)]
pub enum SubscriptionsCommand {
    /// List subscriptions, oldest first.
    List {
        /// Only this principal's.
        #[arg(long)]
        principal: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one subscription and its latest deliveries.
    Show {
        /// The subscription's id (sub_…).
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// End a subscription: no more deliveries (its client's next refresh makes it again).
    End {
        /// The subscription's id (sub_…).
        id: String,
    },
    /// End every subscription to an event type this server no longer declares (after a deploy
    /// that removed it from `[[events.types]]`, once every replica runs the new config).
    EndUndeclared,
}

/// `mcp-tasks admin webhooks …`.
#[derive(clap::Subcommand, Debug)]
pub enum WebhooksCommand {
    /// List deliveries, newest first.
    List {
        /// Only this task's.
        #[arg(long)]
        task: Option<String>,
        /// pending, delivered, failed (given up) or gone (the receiver answered 410).
        #[arg(long)]
        state: Option<String>,
        /// At most this many (default 200).
        #[arg(long)]
        limit: Option<usize>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one delivery: its body and every attempt.
    Show {
        /// The delivery's id (its webhook-id, msg_…).
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Send a delivery again now (also one delivered, given up or gone), with the same webhook-id.
    Redeliver {
        /// The delivery's id (msg_…).
        id: String,
    },
}

/// Milliseconds in `text`: a number and a unit (s, m, h, d).
fn parse_duration_ms(text: &str) -> std::result::Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?}: give a unit (s, m, h or d), e.g. 7d"))?;
    let (n, unit) = text.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{text:?}: not a number of s, m, h or d"))?;
    let ms = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        other => return Err(format!("{text:?}: unknown unit {other:?} (s, m, h or d)")),
    };
    Ok(n.saturating_mul(ms))
}

fn base_url(args: &AdminArgs) -> Result<String> {
    if let Some(u) = &args.url {
        return Ok(u.trim_end_matches('/').to_string());
    }
    if let Some(path) = &args.config {
        let cfg = ConfigFile::load(path)?;
        let addr = cfg
            .admin
            .listen
            .or(cfg.server.listen)
            .unwrap_or_else(|| "127.0.0.1:8080".into());
        return Ok(format!("http://{addr}"));
    }
    Ok("http://127.0.0.1:8080".into())
}

/// Runs an admin command; the exit status.
pub async fn run(args: AdminArgs) -> Result<i32> {
    let base = base_url(&args)?;
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .context("set up the HTTP client")?;
    let call = |method: reqwest::Method, path: String| {
        // The admin API takes state changes as JSON only (a cross-site form cannot send it).
        let post = method == reqwest::Method::POST || method == reqwest::Method::DELETE;
        let mut rb = http.request(method, format!("{base}{path}"));
        if post {
            rb = rb
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body("{}");
        }
        if let Some(k) = &args.key {
            rb = rb.bearer_auth(k);
        }
        rb
    };
    let send = |rb: reqwest::RequestBuilder| async {
        let resp = rb
            .send()
            .await
            .with_context(|| format!("cannot reach the admin API at {base}"))?;
        let status = resp.status();
        let body: Value = resp.json().await.with_context(|| {
            format!("{base} did not answer with JSON (is it the admin address?)")
        })?;
        Ok::<_, anyhow::Error>((status, body))
    };
    let refused = |status: reqwest::StatusCode, body: &Value| {
        let why = body["error"].as_str().unwrap_or("no reason given");
        anyhow::anyhow!("{why} (HTTP {status})")
    };
    match &args.command {
        AdminCommand::Tasks {
            status,
            tool,
            principal,
            limit,
            json,
        } => {
            let mut query = Vec::new();
            for (k, v) in [("status", status), ("tool", tool), ("principal", principal)] {
                if let Some(v) = v {
                    query.push((k, v.clone()));
                }
            }
            if let Some(l) = limit {
                query.push(("limit", l.to_string()));
            }
            let (status, body) =
                send(call(reqwest::Method::GET, "/admin/api/tasks".into()).query(&query)).await?;
            if !status.is_success() {
                return Err(refused(status, &body));
            }
            let tasks = body["tasks"].as_array().cloned().unwrap_or_default();
            if *json {
                println!("{}", serde_json::to_string_pretty(&tasks)?);
            } else {
                print_table(&tasks);
            }
            Ok(0)
        }
        AdminCommand::Show { id, json } => {
            let (status, body) =
                send(call(reqwest::Method::GET, format!("/admin/api/tasks/{id}"))).await?;
            if !status.is_success() {
                return Err(refused(status, &body));
            }
            if *json {
                println!("{}", serde_json::to_string_pretty(&body)?);
            } else {
                print_task(&body);
            }
            Ok(0)
        }
        AdminCommand::Cancel { id } => {
            let (status, body) = send(call(
                reqwest::Method::POST,
                format!("/admin/api/tasks/{id}/cancel"),
            ))
            .await?;
            if status == reqwest::StatusCode::CONFLICT {
                println!("{}", body["error"].as_str().unwrap_or("already finished"));
                return Ok(1);
            }
            if !status.is_success() {
                return Err(refused(status, &body));
            }
            println!("cancelled {id}");
            Ok(0)
        }
        AdminCommand::Purge { finished_before } => {
            let (status, body) = send(
                call(reqwest::Method::POST, "/admin/api/purge".into())
                    .query(&[("finished_before_ms", finished_before.to_string())]),
            )
            .await?;
            if !status.is_success() {
                return Err(refused(status, &body));
            }
            println!("purged {} tasks", body["purged"].as_u64().unwrap_or(0));
            Ok(0)
        }
        AdminCommand::Webhooks(WebhooksCommand::List {
            task,
            state,
            limit,
            json,
        }) => {
            let mut query = Vec::new();
            for (k, v) in [("task", task), ("state", state)] {
                if let Some(v) = v {
                    query.push((k, v.clone()));
                }
            }
            if let Some(l) = limit {
                query.push(("limit", l.to_string()));
            }
            let (status, body) =
                send(call(reqwest::Method::GET, "/admin/api/webhooks".into()).query(&query))
                    .await?;
            if !status.is_success() {
                return Err(refused(status, &body));
            }
            let deliveries = body["deliveries"].as_array().cloned().unwrap_or_default();
            if *json {
                println!("{}", serde_json::to_string_pretty(&deliveries)?);
            } else {
                print_deliveries(&deliveries);
            }
            Ok(0)
        }
        AdminCommand::Webhooks(WebhooksCommand::Show { id, json }) => {
            let (status, body) = send(call(
                reqwest::Method::GET,
                format!("/admin/api/webhooks/{id}"),
            ))
            .await?;
            if !status.is_success() {
                return Err(refused(status, &body));
            }
            if *json {
                println!("{}", serde_json::to_string_pretty(&body)?);
            } else {
                print_delivery(&body);
            }
            Ok(0)
        }
        AdminCommand::Subscriptions(SubscriptionsCommand::List { principal, json }) => {
            let mut query = Vec::new();
            if let Some(p) = principal {
                query.push(("principal", p.clone()));
            }
            let (status, body) =
                send(call(reqwest::Method::GET, "/admin/api/subscriptions".into()).query(&query))
                    .await?;
            if !status.is_success() {
                return Err(refused(status, &body));
            }
            let subs = body["subscriptions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if *json {
                println!("{}", serde_json::to_string_pretty(&subs)?);
            } else {
                println!(
                    "{:<36}  {:<16}  {:<20}  {:<6}  {:<18}  URL",
                    "SUBSCRIPTION", "PRINCIPAL", "EVENT", "ACTIVE", "LAST ERROR"
                );
                for s in &subs {
                    println!(
                        "{:<36}  {:<16}  {:<20}  {:<6}  {:<18}  {}",
                        s["id"].as_str().unwrap_or(""),
                        s["principal"].as_str().unwrap_or(""),
                        s["name"].as_str().unwrap_or(""),
                        if s["active"] == true { "yes" } else { "no" },
                        s["lastError"].as_str().unwrap_or("-"),
                        s["url"].as_str().unwrap_or("")
                    );
                }
            }
            Ok(0)
        }
        AdminCommand::Subscriptions(SubscriptionsCommand::Show { id, json }) => {
            let (status, body) = send(call(
                reqwest::Method::GET,
                format!("/admin/api/subscriptions/{id}"),
            ))
            .await?;
            if !status.is_success() {
                return Err(refused(status, &body));
            }
            if *json {
                println!("{}", serde_json::to_string_pretty(&body)?);
            } else {
                for k in [
                    "id",
                    "principal",
                    "name",
                    "arguments",
                    "url",
                    "active",
                    "expiresAt",
                    "lastDeliveryAt",
                    "lastError",
                    "failedSince",
                ] {
                    println!("{k}: {}", body[k]);
                }
                for d in body["deliveries"].as_array().into_iter().flatten() {
                    println!(
                        "  {}  {}  {}  attempts {}  last {}",
                        d["eventId"].as_str().unwrap_or(""),
                        d["name"].as_str().unwrap_or(""),
                        d["state"].as_str().unwrap_or(""),
                        d["attempts"],
                        d["lastStatus"]
                    );
                }
            }
            Ok(0)
        }
        AdminCommand::Subscriptions(SubscriptionsCommand::End { id }) => {
            let (status, body) = send(call(
                reqwest::Method::DELETE,
                format!("/admin/api/subscriptions/{id}"),
            ))
            .await?;
            if !status.is_success() {
                return Err(refused(status, &body));
            }
            println!("{id} ended");
            Ok(0)
        }
        AdminCommand::Subscriptions(SubscriptionsCommand::EndUndeclared) => {
            let (status, body) = send(call(
                reqwest::Method::POST,
                "/admin/api/subscriptions/end-undeclared".into(),
            ))
            .await?;
            if !status.is_success() {
                return Err(refused(status, &body));
            }
            println!("{} subscriptions ended", body["ended"]);
            Ok(0)
        }
        AdminCommand::Webhooks(WebhooksCommand::Redeliver { id }) => {
            let (status, body) = send(call(
                reqwest::Method::POST,
                format!("/admin/api/webhooks/{id}/redeliver"),
            ))
            .await?;
            if !status.is_success() {
                return Err(refused(status, &body));
            }
            println!("{id} will be sent again now");
            Ok(0)
        }
        AdminCommand::Signal {
            id,
            name,
            payload,
            signal_key,
        } => {
            let payload: Value = match payload {
                None => Value::Null,
                Some(text) => serde_json::from_str(text).map_err(|e| {
                    anyhow::anyhow!("the payload must be JSON ({e}); for text, quote it")
                })?,
            };
            let body = json!({"name": name, "payload": payload, "key": signal_key});
            let path = format!("/admin/api/tasks/{id}/signal");
            let (status, body) =
                send(call(reqwest::Method::POST, path).body(body.to_string())).await?;
            if status == reqwest::StatusCode::CONFLICT
                || status == reqwest::StatusCode::UNPROCESSABLE_ENTITY
            {
                eprintln!("{}", body["error"].as_str().unwrap_or("refused"));
                return Ok(1);
            }
            if !status.is_success() {
                return Err(refused(status, &body));
            }
            let again = if body["duplicate"] == true {
                " (sent before under this key)"
            } else {
                ""
            };
            println!("{id}  signal {name} #{} sent{again}", body["signal"]["seq"]);
            Ok(0)
        }
        AdminCommand::Journal(JournalCommand::Export { id }) => {
            let (status, body) = send(call(
                reqwest::Method::GET,
                format!("/admin/api/tasks/{id}/journal"),
            ))
            .await?;
            if !status.is_success() {
                return Err(refused(status, &body));
            }
            println!("{}", serde_json::to_string_pretty(&body)?);
            Ok(0)
        }
        AdminCommand::Journal(JournalCommand::Rewind { id, from }) => {
            let path = format!("/admin/api/tasks/{id}/journal/rewind?from={from}");
            let (status, body) = send(call(reqwest::Method::POST, path)).await?;
            rewound(id, status, &body)
        }
        AdminCommand::Journal(JournalCommand::Restart { id }) => {
            let path = format!("/admin/api/tasks/{id}/journal/restart");
            let (status, body) = send(call(reqwest::Method::POST, path)).await?;
            rewound(id, status, &body)
        }
    }
}

/// What a rewind or a restart answered: done (0), refused for this task (1, saying why), or an
/// error.
fn rewound(id: &str, status: reqwest::StatusCode, body: &Value) -> Result<i32> {
    if status == reqwest::StatusCode::CONFLICT
        || status == reqwest::StatusCode::UNPROCESSABLE_ENTITY
    {
        eprintln!("{}", body["error"].as_str().unwrap_or("refused"));
        return Ok(1);
    }
    if !status.is_success() {
        let why = body["error"].as_str().unwrap_or("no reason given");
        bail!("{why} (HTTP {status})");
    }
    println!(
        "{id}: {} step(s) dropped; it runs again",
        body["dropped"].as_u64().unwrap_or(0)
    );
    Ok(0)
}

fn print_deliveries(deliveries: &[Value]) {
    println!(
        "{:<36}  {:<44}  {:<19}  {:<9}  {:>8}  {:<6}  URL",
        "DELIVERY", "TASK", "EVENT", "STATE", "ATTEMPTS", "LAST"
    );
    for d in deliveries {
        println!(
            "{:<36}  {:<44}  {:<19}  {:<9}  {:>8}  {:<6}  {}",
            d["id"].as_str().unwrap_or("?"),
            d["taskId"].as_str().unwrap_or("?"),
            d["event"].as_str().unwrap_or("?"),
            d["state"].as_str().unwrap_or("?"),
            d["attempts"].as_u64().unwrap_or(0),
            d["lastStatus"]
                .as_u64()
                .map_or_else(|| "-".to_string(), |s| s.to_string()),
            d["url"].as_str().unwrap_or("?"),
        );
    }
}

fn print_delivery(d: &Value) {
    let line = |k: &str, v: String| println!("{k:<14} {v}");
    line("delivery", d["id"].as_str().unwrap_or("?").into());
    line("task", d["taskId"].as_str().unwrap_or("?").into());
    line("event", d["event"].as_str().unwrap_or("?").into());
    line("url", d["url"].as_str().unwrap_or("?").into());
    if let Some(s) = d["subscription"].as_str() {
        line("subscription", s.into());
    }
    line("state", d["state"].as_str().unwrap_or("?").into());
    line("created", when(&d["createdAt"]));
    if d["nextAt"].is_u64() {
        line("next attempt", when(&d["nextAt"]));
    }
    if d["deliveredAt"].is_u64() {
        line("delivered", when(&d["deliveredAt"]));
    }
    println!("attempts");
    for a in d["attemptsMade"].as_array().into_iter().flatten() {
        println!(
            "  {}  {:<4}  {:>6} ms  {}",
            when(&a["at"]),
            a["status"]
                .as_u64()
                .map_or_else(|| "-".to_string(), |s| s.to_string()),
            a["latencyMs"].as_u64().unwrap_or(0),
            a["error"].as_str().unwrap_or("")
        );
    }
    println!("body");
    println!(
        "{}",
        serde_json::to_string_pretty(&d["body"]).unwrap_or_default()
    );
}

fn when(ms: &Value) -> String {
    ms.as_u64()
        .map(mcp_tasks_engine::format_rfc3339)
        .unwrap_or_else(|| "-".into())
}

fn progress(t: &Value) -> String {
    match (t["progress"].as_f64(), t["total"].as_f64()) {
        (Some(p), Some(total)) => format!("{p}/{total}"),
        (Some(p), None) => format!("{p}"),
        _ => "-".into(),
    }
}

fn print_table(tasks: &[Value]) {
    println!(
        "{:<44}  {:<14}  {:<24}  {:<12}  {:<24}  {:<9}  MESSAGE",
        "ID", "STATUS", "TOOL", "PRINCIPAL", "CREATED", "PROGRESS"
    );
    for t in tasks {
        let message = t["statusMessage"]
            .as_str()
            .or(t["progressMessage"].as_str())
            .unwrap_or("");
        println!(
            "{:<44}  {:<14}  {:<24}  {:<12}  {:<24}  {:<9}  {}",
            t["taskId"].as_str().unwrap_or("?"),
            t["status"].as_str().unwrap_or("?"),
            t["tool"].as_str().unwrap_or("?"),
            t["principal"].as_str().unwrap_or("?"),
            when(&t["createdAt"]),
            progress(t),
            message
        );
    }
}

fn print_task(t: &Value) {
    let line = |k: &str, v: String| println!("{k:<14} {v}");
    line("id", t["taskId"].as_str().unwrap_or("?").into());
    line("tool", t["tool"].as_str().unwrap_or("?").into());
    line("principal", t["principal"].as_str().unwrap_or("?").into());
    line("status", t["status"].as_str().unwrap_or("?").into());
    if let Some(m) = t["statusMessage"]
        .as_str()
        .or(t["progressMessage"].as_str())
    {
        line("message", m.into());
    }
    line("progress", progress(t));
    line("wire", t["wire"].as_str().unwrap_or("?").into());
    line("created", when(&t["createdAt"]));
    line("updated", when(&t["updatedAt"]));
    line("finished", when(&t["finishedAt"]));
    line("attempt", t["attempt"].to_string());
    line("arguments", t["arguments"].to_string());
    for h in t["history"].as_array().into_iter().flatten() {
        let note = h["message"]
            .as_str()
            .map(|m| format!(" ({m})"))
            .unwrap_or_default();
        line(
            "history",
            format!(
                "{}  {}{note}",
                when(&h["at"]),
                h["status"].as_str().unwrap_or("?")
            ),
        );
    }
    for s in t["steps"].as_array().into_iter().flatten() {
        let ended = match s["error"].as_str() {
            Some(e) => format!("failed: {e}"),
            None => format!("→ {}", s["output"].as_str().unwrap_or("?")),
        };
        line(
            "step",
            format!(
                "{:>3} {}  attempt {}, {} ms, at {}  {ended}",
                s["seq"],
                s["name"].as_str().unwrap_or("?"),
                s["attempt"],
                s["durationMs"],
                when(&s["at"]),
            ),
        );
    }
    for s in t["signals"].as_array().into_iter().flatten() {
        line(
            "signal",
            format!(
                "{:>3} {}  from {}, at {}  {}",
                s["seq"],
                s["name"].as_str().unwrap_or("?"),
                s["sender"].as_str().unwrap_or("?"),
                when(&s["at"]),
                s["payload"].as_str().unwrap_or("?"),
            ),
        );
    }
    if let Some(q) = t["pendingInputs"].as_array().filter(|q| !q.is_empty()) {
        for i in q {
            line("waiting for", format!("{} {}", i["method"], i["params"]));
        }
    }
    if !t["result"].is_null() {
        line("result", t["result"].to_string());
    }
    if !t["error"].is_null() {
        line("error", t["error"].to_string());
    }
    for d in t["deliveries"].as_array().into_iter().flatten() {
        line(
            "webhook",
            format!(
                "{} {} to {}: {} after {} attempt(s) ({})",
                d["id"].as_str().unwrap_or("?"),
                d["event"].as_str().unwrap_or("?"),
                d["url"].as_str().unwrap_or("?"),
                d["state"].as_str().unwrap_or("?"),
                d["attempts"].as_u64().unwrap_or(0),
                d["lastError"].as_str().unwrap_or("no error"),
            ),
        );
    }
}

/// Checks what clap does not: the address's scheme.
pub fn check(args: &AdminArgs) -> Result<()> {
    if let Some(u) = &args.url {
        if !(u.starts_with("http://") || u.starts_with("https://")) {
            bail!("--url must be an http:// or https:// address, got {u:?}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_duration_ms;

    #[test]
    fn durations_take_a_unit() {
        assert_eq!(parse_duration_ms("30s"), Ok(30_000));
        assert_eq!(parse_duration_ms("7d"), Ok(7 * 86_400_000));
        assert!(parse_duration_ms("7").is_err());
        assert!(parse_duration_ms("7w").is_err());
        assert!(parse_duration_ms("d").is_err());
    }
}
