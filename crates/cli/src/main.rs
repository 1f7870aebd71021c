//! `mcp-tasks`: an MCP server whose tools run as durable tasks, and a client that runs any MCP
//! server's tools as tasks.

mod admin;
mod client;
mod config;
mod telemetry;
mod wrap;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_engine::store::postgres::PostgresStore;
use mcp_tasks_engine::store::sqlite::SqliteStore;
use mcp_tasks_engine::store::TaskStore;
use mcp_tasks_engine::EngineConfig;
use mcp_tasks_server::{http, stdio, Server, ServerConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use config::{default_sqlite_path, ConfigFile, StoreUrl};

/// mimalloc: the request path allocates many small JSON values; with the system allocator malloc and
/// free were about a third of a create's instructions (callgrind, see docs/bench).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "mcp-tasks",
    version,
    about = "Durable, long-running MCP tool calls (MCP Tasks)",
    after_help = "Exit status of call and task result|watch: 0 completed, 1 the tool reported an error or the task failed, \
2 usage or connection error, 3 cancelled, 130 detached by Ctrl-C."
)]
struct Cli {
    /// How log lines (on stderr) are written: text for people, json (one object per line, with
    /// the request's span: method, principal) for log collectors.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "MCP_TASKS_LOG_FORMAT"
    )]
    log_format: telemetry::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the MCP server (Streamable HTTP on /mcp, or stdio).
    Serve(ServeArgs),
    /// Manage API keys.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Call a tool of an MCP server, as a task where the server offers it, and print its result.
    #[command(
        after_help = "Exit status: 0 completed, 1 the tool reported an error or the task failed, \
2 usage or connection error, 3 cancelled, 130 detached by Ctrl-C."
    )]
    Call {
        #[command(flatten)]
        server: client::ServerArgs,
        #[command(flatten)]
        call: client::CallArgs,
    },
    /// Follow, fetch, cancel or list tasks.
    Task {
        #[command(flatten)]
        server: client::ServerArgs,
        #[command(subcommand)]
        command: client::TaskCommand,
    },
    /// The operator's commands (list, show, cancel, purge tasks) against a server's admin API.
    Admin(admin::AdminArgs),
    /// Put durable tasks in front of an MCP server, from one line of a host's config: serves stdio
    /// (or HTTP with --listen) with every tool of the server as a task tool.
    #[command(
        after_help = "Example (a host's config): mcp-tasks wrap -- python server.py\n\
A host that speaks no tasks gets a call's result within --sync-budget seconds, or a reply that \
the work continues as a task, with the tools task_status, task_result and task_cancel to follow it."
    )]
    Wrap(wrap::WrapArgs),
    /// Print a shell completion script on stdout.
    #[command(after_help = "Install it where your shell looks:\n  \
bash: mcp-tasks completions bash > ~/.local/share/bash-completion/completions/mcp-tasks\n  \
zsh:  mcp-tasks completions zsh > \"${fpath[1]}/_mcp-tasks\"\n  \
fish: mcp-tasks completions fish > ~/.config/fish/completions/mcp-tasks.fish")]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) on stdout (mcp-tasks man > mcp-tasks.1), or write it and a page
    /// per subcommand (mcp-tasks-wrap.1, …) into a directory.
    Man {
        /// Write mcp-tasks.1 and mcp-tasks-SUBCOMMAND.1 here instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// MCP Events: list a server's event types, or watch a type's events (by polling).
    Events {
        #[command(flatten)]
        server: client::ServerArgs,
        #[command(subcommand)]
        command: client::events::EventsCommand,
    },
    /// List a server's tools with each one's task support.
    Tools {
        #[command(flatten)]
        server: client::ServerArgs,
        /// Print JSON lines.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum KeyCommand {
    /// Make a new random API key and print the [[auth.keys]] entry (with its hash) for the config.
    New {
        /// The principal the key will authenticate.
        #[arg(long)]
        principal: String,
    },
    /// Make a new webhook signing secret (whsec_…) and print a [[webhooks.subscriptions]] entry.
    Webhook {
        /// The endpoint the subscription sends to.
        #[arg(long, default_value = "https://hooks.example.com/mcp-tasks")]
        url: String,
    },
    /// Make a new key that encrypts stored webhook secrets and print the [webhooks] line for it.
    Seal,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// TOML config file with [server], [tasks] and [[tools]] sections (see examples/mcp-tasks.toml).
    #[arg(long, short = 'c', env = "MCP_TASKS_CONFIG")]
    config: Option<PathBuf>,
    /// HTTP listen address [default: 127.0.0.1:8080, or [server].listen].
    #[arg(long, env = "MCP_TASKS_LISTEN")]
    listen: Option<SocketAddr>,
    /// Serve /metrics, /healthz, /readyz, the dashboard (/ui) and the admin API on this address
    /// instead of next to /mcp [default: [admin].listen, else next to /mcp].
    #[arg(long, env = "MCP_TASKS_ADMIN_LISTEN")]
    admin_listen: Option<SocketAddr>,
    /// Task store: sqlite://PATH, postgres://USER@HOST:PORT/DB (several replicas may share one
    /// database) or memory: [default: sqlite://$XDG_DATA_HOME/mcp-tasks/tasks.db, i.e.
    /// ~/.local/share/mcp-tasks/tasks.db].
    #[arg(long, env = "MCP_TASKS_STORE")]
    store: Option<String>,
    /// Serve one client on stdin/stdout instead of HTTP (logs go to stderr).
    #[arg(long)]
    stdio: bool,
    /// Also register the demo tools (greet, slow_compute, failing_job, protocol_error_job, confirm_delete,
    /// write_haiku, multi_input, test_tool_with_task) and the conformance-suite fixtures (test_* tools,
    /// test:// resources and a template, test_* prompts).
    #[arg(long)]
    demo: bool,
}

fn main() -> Result<()> {
    // Started as a command tool's supervisor, this process supervises and exits here.
    mcp_tasks_server::tools::supervisor::run_if_asked();
    // `/proc/self/exe`, not the path: it names this binary even after an upgrade replaced it.
    mcp_tasks_server::tools::supervisor::enable(PathBuf::from("/proc/self/exe"));
    let cli = Cli::parse();
    // Generated from the flags themselves, so they never go stale.
    match &cli.command {
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut out = Vec::new();
            clap_complete::generate(*shell, &mut cmd, "mcp-tasks", &mut out);
            if *shell == clap_complete::Shell::Bash {
                // clap_complete 4.6 names a subcommand's state two ways when the program's name
                // has a dash (`mcp__tasks__subcmd__wrap` where it walks the words,
                // `mcp__subcmd__tasks__subcmd__wrap` where it offers their flags), so nothing
                // after a subcommand completed; one name for both (tests/completions.rs).
                let fixed =
                    String::from_utf8_lossy(&out).replace("mcp__subcmd__tasks", "mcp__tasks");
                return print_all(fixed.as_bytes());
            }
            return print_all(&out);
        }
        Command::Man { dir } => {
            let cmd = <Cli as clap::CommandFactory>::command();
            if let Some(dir) = dir {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
                clap_mangen::generate_to(cmd, dir).with_context(|| {
                    format!("cannot write the manual pages to {}", dir.display())
                })?;
                return Ok(());
            }
            let mut out = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut out)?;
            return print_all(&out);
        }
        _ => {}
    }
    let client_side = matches!(
        cli.command,
        Command::Call { .. }
            | Command::Task { .. }
            | Command::Tools { .. }
            | Command::Events { .. }
            | Command::Admin(_)
    );
    // The server's config is read once, here: it also says where traces go ([telemetry]).
    let config = match &cli.command {
        Command::Serve(ServeArgs { config, .. }) | Command::Wrap(wrap::WrapArgs { config, .. }) => {
            config.as_deref()
        }
        _ => None,
    };
    let file = match config.map(ConfigFile::load).transpose() {
        Ok(f) => f.unwrap_or_default(),
        Err(e) => {
            eprintln!("error: {}", client::error_text(&e));
            std::process::exit(1);
        }
    };
    let _telemetry = telemetry::init(
        cli.log_format,
        // rustls-platform-verifier logs each refused certificate at ERROR on its own; our errors
        // already carry that cause (and say which connection), so by default it is not said twice.
        if client_side {
            "warn,rustls_platform_verifier=off"
        } else if matches!(cli.command, Command::Wrap(_)) {
            // A host keeps our stderr in its log: warnings, and the wrapped server's own lines.
            "warn,mcp_tasks_client::stderr=info,rustls_platform_verifier=off"
        } else {
            "info,rustls_platform_verifier=off"
        },
        file.telemetry.otlp_endpoint.as_deref(),
    )?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if client_side {
        let status = runtime.block_on(async {
            match cli.command {
                Command::Call { server, call } => client::call(&server, call).await,
                Command::Task { server, command } => client::task(&server, command).await,
                Command::Tools { server, json } => client::tools(&server, json).await,
                Command::Events { server, command } => client::events::run(&server, command).await,
                Command::Admin(args) => match admin::check(&args) {
                    Ok(()) => admin::run(args).await,
                    Err(e) => Err(e),
                },
                _ => Ok(client::exit::USAGE),
            }
        });
        let code = match status {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {}", client::error_text(&e));
                client::exit::USAGE
            }
        };
        // Background tasks (an SSE reader) must not hold the exit.
        runtime.shutdown_timeout(Duration::from_millis(100));
        std::process::exit(code);
    }
    match cli.command {
        Command::Serve(args) => {
            if let Err(e) = runtime.block_on(serve(args, file)) {
                // One line with each cause once; no backtrace for a configuration or start-up error.
                eprintln!("error: {}", client::error_text(&e));
                std::process::exit(1);
            }
            // The stop is done (tasks handed off, the store closed): a read of stdin still blocked
            // on a thread (a stdio server stopped by a signal) must not hold the exit.
            runtime.shutdown_timeout(SERVE_EXIT);
            Ok(())
        }
        Command::Wrap(args) => {
            let run = wrap::plan(&args, file).and_then(|plan| {
                let serve_args = ServeArgs {
                    config: None,
                    listen: args.listen,
                    admin_listen: None,
                    store: Some(plan.store),
                    stdio: args.listen.is_none(),
                    demo: false,
                };
                runtime.block_on(serve(serve_args, plan.file))
            });
            if let Err(e) = run {
                eprintln!("error: {}", client::error_text(&e));
                std::process::exit(1);
            }
            runtime.shutdown_timeout(SERVE_EXIT);
            Ok(())
        }
        Command::Key(KeyCommand::New { principal }) => {
            let key = mcp_tasks_server::auth::generate_key();
            println!("# API key for {principal} (shown once; give it to the client as `Authorization: Bearer <key>`):");
            println!("# {key}");
            println!("[[auth.keys]]");
            println!("principal = {}", toml::Value::String(principal));
            println!("sha256 = \"{}\"", mcp_tasks_server::auth::hash_key(&key));
            println!("# max_running_tasks = 100");
            println!("# calls_per_minute = 1200   # no rate limit unless set");
            println!("# operator = true           # also opens the admin API (mcp-tasks admin …)");
            Ok(())
        }
        Command::Key(KeyCommand::Webhook { url }) => {
            let secret = mcp_tasks_server::webhooks::sign::new_secret();
            println!("# A webhook subscription; its receiver verifies deliveries with this secret (Standard Webhooks).");
            println!("[[webhooks.subscriptions]]");
            println!("name = \"failures\"");
            println!("url = {}", toml::Value::String(url));
            println!("secret = \"{secret}\"");
            println!("events = [\"task.failed\"]   # leave out for every event");
            println!("# principals = [\"alice\"]     # only these principals' tasks");
            println!("# tools = [\"deploy\"]         # only these tools' tasks");
            Ok(())
        }
        Command::Key(KeyCommand::Seal) => {
            let key = mcp_tasks_server::webhooks::seal::new_key();
            println!("# Encrypts the webhook secrets clients register before they are stored. Keep it out of");
            println!(
                "# the database's backups (or give it as {}=<key>). To rotate: list a new key",
                config::WEBHOOK_KEYS_ENV
            );
            println!("# second on every replica, then move it first; keep this one until the tasks sealed");
            println!(
                "# with it are purged and their events settled and gone ([webhooks] keep_days)."
            );
            println!("[webhooks]");
            println!("secret_keys = [\"{key}\"]");
            Ok(())
        }
        Command::Call { .. }
        | Command::Task { .. }
        | Command::Tools { .. }
        | Command::Events { .. }
        | Command::Admin(_)
        | Command::Completions { .. }
        | Command::Man { .. } => Ok(()),
    }
}

/// Writes `bytes` to stdout; a reader that stops early (`| head`) is not an error.
fn print_all(bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("cannot write to standard output"),
    }
}

async fn serve(args: ServeArgs, file: ConfigFile) -> Result<()> {
    let store_url = match args.store.as_deref().or(file.server.store.as_deref()) {
        Some(s) => StoreUrl::parse(s)?,
        None => StoreUrl::Sqlite(default_sqlite_path()),
    };
    let store: Arc<dyn TaskStore> = match &store_url {
        StoreUrl::Memory { max_finished } => {
            tracing::warn!(
                max_finished,
                "using the in-memory store: tasks are lost when the server stops"
            );
            Arc::new(MemoryStore::with_max_finished(*max_finished))
        }
        StoreUrl::Sqlite(path) => {
            let s = SqliteStore::open(path)
                .with_context(|| format!("cannot open the task store {}", path.display()))?;
            tracing::info!(path = %path.display(), "task store: SQLite");
            Arc::new(s)
        }
        StoreUrl::Postgres(url) => {
            let s = PostgresStore::open(url)
                .await
                .context("cannot open the PostgreSQL task store")?;
            tracing::info!(store = ?s, "task store: PostgreSQL");
            Arc::new(s)
        }
    };

    let mut engine = EngineConfig::default();
    let t = &file.tasks;
    if let Some(v) = t.default_ttl_secs {
        engine.default_ttl_ms = Some(v * 1000);
    }
    if let Some(v) = t.max_ttl_secs {
        engine.max_ttl_ms = Some(v * 1000);
    }
    if let Some(v) = t.poll_interval_ms {
        engine.poll_interval_ms = v;
    }
    if let Some(v) = t.finished_grace_secs {
        engine.finished_grace_ms = v * 1000;
    }
    if let Some(v) = t.cancel_grace_secs {
        engine.cancel_grace = Duration::from_secs(v);
    }
    if let Some(v) = t.hand_off_grace_secs {
        engine.hand_off_grace = Duration::from_secs(v);
    }
    if let Some(v) = t.sweep_interval_secs {
        engine.sweep_interval = Duration::from_secs(v.max(1));
    }
    if let Some(v) = t.lease_secs {
        engine.lease_ms = v.max(1) * 1000;
    }
    if let Some(v) = t.max_attempts {
        if v == 0 {
            anyhow::bail!(
                "[tasks] max_attempts must be at least 1 (a task's first run is its first attempt)"
            );
        }
        engine.max_attempts = v;
    }
    if let Some(v) = t.suspend_sleeps_over_secs {
        engine.suspend_sleeps_over = (v > 0).then(|| Duration::from_secs(v));
    }
    if let Some(v) = file.webhooks.progress_interval()? {
        engine.webhook_progress_interval = v;
    }

    let mut server_cfg = ServerConfig::default();
    let s = &file.server;
    if let Some(v) = &s.allowed_origins {
        server_cfg.allowed_origins = v.clone();
    }
    if let Some(v) = &s.allowed_hosts {
        server_cfg.allowed_hosts = v.clone();
    }
    server_cfg.metrics_public = file.admin.metrics_public;
    if let Some(v) = s.max_body_bytes {
        server_cfg.max_body_bytes = v;
    }
    if let Some(v) = s.keep_alive_secs {
        server_cfg.keep_alive = Duration::from_secs(v.max(1));
    }
    if let Some(v) = s.header_timeout_secs {
        server_cfg.header_timeout = Duration::from_secs(v.max(1));
    }
    if let Some(v) = s.body_timeout_secs {
        server_cfg.body_timeout = Duration::from_secs(v.max(1));
    }
    if let Some(v) = s.idle_timeout_secs {
        server_cfg.idle_timeout = Duration::from_secs(v.max(1));
    }
    server_cfg.max_connections = mcp_tasks_server::connections::fit_connections_to_descriptors(
        s.max_connections
            .unwrap_or(server_cfg.max_connections)
            .max(1),
    );
    server_cfg.instructions = s.instructions.clone();
    server_cfg.request_state_secret = s.request_state_secret.clone();
    server_cfg.sync_budget = t.sync_budget_secs.map(Duration::from_secs);
    server_cfg.auth = file.auth.to_config()?;
    server_cfg.webhooks = file.webhooks.to_settings()?;
    server_cfg.events = file.events.to_settings(&server_cfg.webhooks)?;
    server_cfg.signal_urls = file.signals.to_settings()?;
    if !server_cfg.auth.keys.is_empty() {
        tracing::info!(
            keys = server_cfg.auth.keys.len(),
            anonymous = server_cfg.auth.allow_anonymous,
            "API keys loaded"
        );
    }
    if let Some(o) = &server_cfg.auth.oauth {
        tracing::info!(
            issuer = %o.issuer,
            audience = %o.audience,
            anonymous = server_cfg.auth.allow_anonymous,
            "OAuth access tokens accepted"
        );
    }

    let relay_stop = tokio_util::sync::CancellationToken::new();
    let _stop_relay = relay_stop.clone().drop_guard();
    let notifier = mcp_tasks_engine::Notifier::new();
    if let StoreUrl::Postgres(url) = &store_url {
        // Replicas on one database hear each other's task events (LISTEN/NOTIFY).
        mcp_tasks_engine::store::postgres::relay::start(
            url,
            notifier.clone(),
            store.clone(),
            relay_stop.clone(),
        )
        .await
        .context("cannot listen for other replicas on PostgreSQL")?;
    }
    let plan = stop_plan(&file);
    let mut builder = Server::builder(store, engine, server_cfg).notifier(notifier);
    if args.demo {
        builder = builder.demo()?;
    }
    for spec in file.tools {
        builder = builder.tool(spec.into_tool())?;
    }
    // The gateway: each upstream's tools, as task tools. A name taken twice is a start-up error.
    let mut upstreams = Vec::new();
    for spec in &file.upstreams {
        // Its error names the upstream and says what went wrong with it.
        let upstream = mcp_tasks_server::gateway::connect(spec).await?;
        for tool in upstream.tools.clone() {
            let name = tool.name.clone();
            builder = builder.group_tool(&spec.name, tool).with_context(|| {
                format!(
                    "upstream {:?}: tool {name:?} is already taken (set prefix = \"…\" in its [[upstreams]] entry)",
                    spec.name
                )
            })?;
        }
        builder = builder.catalog_source(upstream.catalog());
        upstreams.push(upstream);
    }
    let server = builder.build();
    let recovered = server
        .start()
        .await
        .context("recovering unfinished tasks failed")?;
    if recovered > 0 {
        tracing::info!(
            recovered,
            "recovered tasks left unfinished by a previous run"
        );
    }
    tracing::info!(tools = ?server.tools().names(), "tools registered");
    // Upstreams are kept up (restarted when they exit) and their tool lists followed while we run.
    let _supervisors: Vec<_> = upstreams
        .iter()
        .map(|u| u.supervise(server.clone()))
        .collect();

    if args.stdio {
        stdin_blocking();
        // The host closing stdin, or a signal, stops the server the way a deploy stops it over
        // HTTP: a drain (the running tasks may finish; their results wait in the store for the
        // host's next session), the hand-off of the rest, then the webhooks' stop.
        let served = stdio::serve(server.clone(), tokio::io::stdin(), tokio::io::stdout());
        tokio::pin!(served);
        let ended = tokio::select! {
            r = &mut served => r.context("stdio transport failed"),
            () = shutdown_signal() => Ok(()),
        };
        // A second signal stops at once.
        server.stop(&plan, shutdown_signal()).await;
        return ended;
    }
    let addr: SocketAddr = match (args.listen, &file.server.listen) {
        (Some(a), _) => a,
        (None, Some(s)) => s
            .parse()
            .with_context(|| format!("invalid [server].listen address {s:?}"))?,
        (None, None) => "127.0.0.1:8080".parse()?,
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (is another server running there?)"))?;
    let local = listener.local_addr()?;
    tracing::info!(url = %http::endpoint_url(local), "serving MCP over Streamable HTTP");
    // Printed on stdout so scripts (and tests) can find the port when listening on :0.
    println!("listening on {}", http::endpoint_url(local));
    let admin: Option<SocketAddr> = match (args.admin_listen, &file.admin.listen) {
        (Some(a), _) => Some(a),
        (None, Some(s)) => Some(
            s.parse()
                .with_context(|| format!("invalid [admin].listen address {s:?}"))?,
        ),
        (None, None) => None,
    };
    let app = match admin {
        // Metrics and health on their own address: /mcp's address does not expose them.
        Some(addr) => {
            let admin_listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
                format!("cannot listen on {addr} for [admin] (is another server running there?)")
            })?;
            let local = admin_listener.local_addr()?;
            tracing::info!(url = %format!("http://{local}/metrics"), "serving metrics and health");
            let admin_server = server.clone();
            tokio::spawn(async move {
                if let Err(e) = mcp_tasks_server::admin::serve(
                    admin_server,
                    admin_listener,
                    std::future::pending(),
                )
                .await
                {
                    tracing::error!(error = %e, "the admin listener failed");
                }
            });
            http::router(server.clone())
        }
        None => http::router(server.clone())
            .merge(mcp_tasks_server::admin::router(server.clone(), false)),
    };
    // Ended by `Server::stop`.
    let mut serving = tokio::spawn(http::serve_router(
        server.clone(),
        listener,
        app,
        std::future::pending(),
    ));
    tokio::select! {
        r = &mut serving => {
            return match r {
                Ok(r) => r.context("HTTP server failed"),
                Err(e) => Err(anyhow::anyhow!("the HTTP server stopped: {e}")),
            };
        }
        _ = shutdown_signal() => {}
    }
    // The drain, the hand-off, the close, the serve loop's end, the webhooks, the engine (see
    // `Server::stop`); a second signal stops at once.
    server.stop(&plan, shutdown_signal()).await;
    let _ = serving.await;
    Ok(())
}

/// The stop of `serve`: the library's defaults (which fit Kubernetes' 30 s grace), with the drain
/// `[tasks] drain_secs` asks for.
fn stop_plan(file: &config::ConfigFile) -> mcp_tasks_server::StopPlan {
    let mut plan = mcp_tasks_server::StopPlan::default();
    if let Some(secs) = file.tasks.drain_secs {
        plan.drain = Duration::from_secs(secs);
    }
    plan
}

/// How long a server that has stopped waits for what is left on the runtime's threads (a blocked
/// read of stdin) before the process exits.
const SERVE_EXIT: Duration = Duration::from_secs(1);

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return ctrl_c.await.unwrap_or(()),
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// Clears `O_NONBLOCK` on stdin when the process that started us left it set. The flag belongs to
/// the pipe's open file, shared with the parent: a Node.js parent that merely opens its own
/// `process.stdin` on an inherited pipe sets it, and a read of an idle non-blocking stdin fails with
/// EAGAIN instead of waiting, which would end the stdio session at the first pause.
#[cfg(unix)]
fn stdin_blocking() {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let stdin = std::io::stdin();
    let Ok(bits) = fcntl(&stdin, FcntlArg::F_GETFL) else {
        return;
    };
    let flags = OFlag::from_bits_truncate(bits);
    if flags.contains(OFlag::O_NONBLOCK) {
        match fcntl(&stdin, FcntlArg::F_SETFL(flags - OFlag::O_NONBLOCK)) {
            Ok(_) => tracing::debug!("stdin was non-blocking; made it blocking"),
            Err(e) => {
                tracing::warn!(error = %e, "stdin is non-blocking and could not be made blocking: reads may fail with EAGAIN")
            }
        }
    }
}

#[cfg(not(unix))]
fn stdin_blocking() {}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every flag of a command with subcommands is global, so it is taken after the subcommand as
    /// well as before (`admin tasks --url U`, `task get ID --url U`).
    #[test]
    fn flags_of_commands_with_subcommands_are_taken_after_the_subcommand() {
        fn walk(cmd: &clap::Command, path: &str) {
            if cmd.has_subcommands() {
                for a in cmd.get_arguments() {
                    let id = a.get_id().as_str();
                    if a.is_positional() || id == "help" || id == "version" {
                        continue;
                    }
                    assert!(a.is_global_set(), "{path}: --{id} is not global");
                }
            }
            for s in cmd.get_subcommands() {
                walk(s, &format!("{path} {}", s.get_name()));
            }
        }
        let cmd = Cli::command();
        cmd.clone().debug_assert();
        walk(&cmd, "mcp-tasks");
        for line in [
            "mcp-tasks admin tasks --url http://127.0.0.1:9 --key k",
            "mcp-tasks admin --url http://127.0.0.1:9 tasks",
            "mcp-tasks admin show ID --config x.toml",
            "mcp-tasks task get ID --url http://127.0.0.1:9/mcp",
            "mcp-tasks tools --url http://127.0.0.1:9/mcp --json",
        ] {
            let parsed = Cli::try_parse_from(line.split(' '));
            assert!(parsed.is_ok(), "{line}: {}", parsed.err().unwrap());
        }
    }
}
