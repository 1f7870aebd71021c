//! `mcp-tasks wrap [OPTIONS] -- COMMAND [ARGS…]`: durable tasks in front of any MCP server, from one
//! line of a host's config. The wrapped server is the gateway's one upstream; every tool of it is a
//! task tool, a host that speaks no tasks gets the sync budget (the "continues as task …" reply and
//! `task_status` / `task_result` / `task_cancel`), and tasks live in a SQLite file of this user's
//! named after the wrapped command, so a host that restarts it finds its tasks again.

use anyhow::{bail, Context, Result};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::config::{default_sqlite_path, ConfigFile};

/// Seconds a call from a host that asks for no task waits for its result before it continues as a
/// task: under the 60 s after which common hosts give up on a call.
pub const DEFAULT_SYNC_BUDGET_SECS: u64 = 45;

/// What `mcp-tasks wrap` takes.
#[derive(clap::Args, Debug)]
pub struct WrapArgs {
    /// Put tasks in front of this Streamable HTTP server instead of a command.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Serve Streamable HTTP on this address instead of stdio.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Task store: sqlite://PATH, postgres://… or memory: [default: a SQLite file of this user's
    /// named after the wrapped command, under $XDG_DATA_HOME/mcp-tasks/wrap/, i.e.
    /// ~/.local/share/mcp-tasks/wrap/NAME-HASH.db].
    #[arg(long, env = "MCP_TASKS_STORE")]
    pub store: Option<String>,
    /// Seconds a call from a host that asks for no task waits for its result before it continues
    /// as a task (0: a plain call waits for its result however long it takes) [default: the
    /// config's [tasks] sync_budget_secs, else 45].
    #[arg(long, value_name = "SECS")]
    pub sync_budget: Option<u64>,
    /// Longest run of one call, in seconds (after it, the call is cancelled upstream).
    #[arg(long, value_name = "SECS", default_value_t = 3600)]
    pub timeout: u64,
    /// Seconds the server has at start-up to answer `initialize` and list its tools.
    #[arg(long, value_name = "SECS", default_value_t = 20)]
    pub connect_timeout: u64,
    /// Serve the upstream's tools as PREFIX_name.
    #[arg(long)]
    pub prefix: Option<String>,
    /// Only these tools of the upstream (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub tools: Option<Vec<String>>,
    /// Not these tools of the upstream (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub exclude: Vec<String>,
    /// Run calls interrupted by a restart again (only for tools that are safe to repeat).
    #[arg(long)]
    pub retry_on_restart: bool,
    /// A TOML config for everything else ([server], [tasks], [auth], more [[upstreams]], …).
    #[arg(long, short = 'c', env = "MCP_TASKS_CONFIG")]
    pub config: Option<PathBuf>,
    /// The MCP server to wrap: its program and arguments, after `--`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// What `serve` is given for a wrap: the config with the upstream in it, the store and where to
/// listen (`None`: stdio).
pub struct Plan {
    /// The config file, with the wrapped server as one more upstream and the sync budget set.
    pub file: ConfigFile,
    /// The store URL.
    pub store: String,
}

/// A name for the wrapped server (logs, the store's file name): the program's file name without
/// its extension, or the URL's host, in letters, digits, `-` and `_`.
fn upstream_name(args: &WrapArgs) -> String {
    let raw = match (&args.url, args.command.first()) {
        (Some(url), _) => url
            .split("://")
            .nth(1)
            .unwrap_or(url)
            .split(['/', ':', '?'])
            .next()
            .unwrap_or("upstream")
            .to_string(),
        (None, Some(program)) => {
            // `python server.py`, `node build/index.js`, `uv run server.py`: the script names the
            // server better than the interpreter does.
            let interpreter = [
                "python", "python3", "node", "uv", "uvx", "npx", "deno", "bun",
            ];
            let base = |s: &str| {
                Path::new(s)
                    .file_stem()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            };
            let first = base(program);
            if interpreter.contains(&first.as_str()) {
                let rest = &args.command[1..];
                let script = ["py", "js", "mjs", "cjs", "ts"];
                rest.iter()
                    .find(|a| {
                        Path::new(a)
                            .extension()
                            .is_some_and(|e| script.contains(&e.to_string_lossy().as_ref()))
                    })
                    .or_else(|| rest.iter().find(|a| !a.starts_with('-') && *a != "run"))
                    .map(|a| base(a))
                    .unwrap_or(first)
            } else {
                first
            }
        }
        (None, None) => "upstream".into(),
    };
    let name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    if name.is_empty() {
        "upstream".into()
    } else {
        name
    }
}

/// The default store of a wrap: `wrap/NAME-HASH.db` beside the default store, the hash of the
/// working directory and the command (or URL), so the same server started the same way finds its
/// tasks again and two servers never share a file.
pub fn default_store_path(args: &WrapArgs) -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_default();
    let what = match &args.url {
        Some(url) => url.clone(),
        None => args.command.join("\u{0}"),
    };
    let hash = mcp_tasks_server::auth::hash_key(&format!("{}\u{0}{what}", cwd.display()));
    let dir = default_sqlite_path()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
        .join("wrap");
    dir.join(format!("{}-{}.db", upstream_name(args), &hash[..10]))
}

/// The first of `path`, `NAME-2.db`, `NAME-3.db` … that no other process holds (its `.lock` file
/// free): two hosts that start the same wrap line in the same directory (a desktop app and an
/// editor) each get a store, where the second used to fail on the first one's lock. The same
/// host started again finds its own store while the other still runs. (Two that start at the same
/// moment may still pick the same file: the second then stops, saying the store is in use.)
fn free_store_path(path: &Path) -> PathBuf {
    const TRIES: u32 = 8;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    for n in 1..=TRIES {
        let candidate = if n == 1 {
            path.to_path_buf()
        } else {
            path.with_file_name(format!("{stem}-{n}.db"))
        };
        let mut lock = candidate.as_os_str().to_owned();
        lock.push(".lock");
        let is_free = || match std::fs::File::open(&lock) {
            // No lock file yet: nobody ever served it.
            Err(_) => true,
            // Held while its server runs; let go of at once (the store claims it itself).
            Ok(f) => f.try_lock().is_ok(),
        };
        let mut free = is_free();
        if !free && n == 1 {
            // A host that restarts the server finds the one it stopped still stopping (its
            // drain): a moment for it to end, so the host gets its own store back.
            let until = std::time::Instant::now() + PRIMARY_WAIT;
            while !free && std::time::Instant::now() < until {
                std::thread::sleep(std::time::Duration::from_millis(100));
                free = is_free();
            }
        }
        if free {
            if n > 1 {
                tracing::info!(store = %candidate.display(), taken = %path.display(), "the wrap's store is in use by another process; using the next one");
            }
            return candidate;
        }
    }
    path.to_path_buf()
}

/// How long a wrap waits for its own store to be let go of before it takes the next one.
const PRIMARY_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Checks the arguments and builds what `serve` runs.
pub fn plan(args: &WrapArgs, mut file: ConfigFile) -> Result<Plan> {
    match (&args.url, args.command.is_empty()) {
        (Some(_), false) => bail!(
            "give either --url URL or a command after `--`, not both (mcp-tasks wrap -- python server.py)"
        ),
        (None, true) => bail!(
            "no server to wrap: give its command after `--` (mcp-tasks wrap -- python server.py) or --url URL"
        ),
        _ => {}
    }
    let name = upstream_name(args);
    let mut spec = serde_json::json!({
        "name": name,
        "timeout_secs": args.timeout,
        "connect_timeout_secs": args.connect_timeout,
        "retry_on_restart": args.retry_on_restart,
        "exclude": args.exclude,
    });
    match &args.url {
        Some(url) => spec["url"] = url.clone().into(),
        None => spec["command"] = serde_json::json!(args.command),
    }
    if let Some(p) = &args.prefix {
        spec["prefix"] = p.clone().into();
    }
    if let Some(t) = &args.tools {
        spec["tools"] = serde_json::json!(t);
    }
    let spec: mcp_tasks_server::gateway::UpstreamSpec =
        serde_json::from_value(spec).context("the wrapped server's settings")?;
    file.upstreams.push(spec);
    // The flag wins; without it, the config's own [tasks] sync_budget_secs; without that, the
    // default that suits a host.
    file.tasks.sync_budget_secs = match (args.sync_budget, file.tasks.sync_budget_secs) {
        (Some(0), _) => None,
        (Some(secs), _) => Some(secs),
        (None, Some(secs)) => Some(secs),
        (None, None) => Some(DEFAULT_SYNC_BUDGET_SECS),
    };
    let store = match &args.store {
        Some(s) => s.clone(),
        None => {
            let path = default_store_path(args);
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
            }
            format!("sqlite://{}", free_store_path(&path).display())
        }
    };
    Ok(Plan { file, store })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        wrap: WrapArgs,
    }

    fn args(line: &[&str]) -> WrapArgs {
        T::try_parse_from(std::iter::once("wrap").chain(line.iter().copied()))
            .unwrap()
            .wrap
    }

    #[test]
    fn the_name_comes_from_the_script_not_the_interpreter() {
        assert_eq!(
            upstream_name(&args(&["--", "python", "server.py"])),
            "server"
        );
        assert_eq!(
            upstream_name(&args(&["--", "uv", "run", "--with", "x", "my-tools.py"])),
            "my-tools"
        );
        assert_eq!(
            upstream_name(&args(&[
                "--",
                "npx",
                "-y",
                "@modelcontextprotocol/server-everything"
            ])),
            "server-everything"
        );
        assert_eq!(
            upstream_name(&args(&["--", "/usr/local/bin/Weather.Server", "-v"])),
            "weather"
        );
        assert_eq!(
            upstream_name(&args(&["--url", "http://127.0.0.1:9/mcp"])),
            "127_0_0_1"
        );
    }

    #[test]
    fn a_wrap_needs_exactly_one_server_and_sets_the_budget() {
        let e = plan(&args(&[]), ConfigFile::default()).err().unwrap();
        assert!(e.to_string().contains("no server to wrap"), "{e}");
        let e = plan(
            &args(&["--url", "http://127.0.0.1:9/mcp", "--", "x"]),
            ConfigFile::default(),
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("not both"), "{e}");
        let p = plan(
            &args(&[
                "--store", "memory:", "--prefix", "w", "--tools", "a,b", "--", "srv",
            ]),
            ConfigFile::default(),
        )
        .unwrap();
        assert_eq!(p.store, "memory:");
        assert_eq!(
            p.file.tasks.sync_budget_secs,
            Some(DEFAULT_SYNC_BUDGET_SECS)
        );
        let u = &p.file.upstreams[0];
        assert_eq!(u.command.as_deref(), Some(&["srv".to_string()][..]));
        assert_eq!(u.prefix.as_deref(), Some("w"));
        assert_eq!(
            u.tools.as_deref(),
            Some(&["a".to_string(), "b".to_string()][..])
        );
        let off = plan(
            &args(&["--store", "memory:", "--sync-budget", "0", "--", "srv"]),
            ConfigFile::default(),
        )
        .unwrap();
        assert_eq!(off.file.tasks.sync_budget_secs, None);
        // A config's budget stands unless the flag is given.
        let mut cfg = ConfigFile::default();
        cfg.tasks.sync_budget_secs = Some(7);
        let from_config = plan(&args(&["--store", "memory:", "--", "srv"]), cfg).unwrap();
        assert_eq!(from_config.file.tasks.sync_budget_secs, Some(7));
        let mut cfg = ConfigFile::default();
        cfg.tasks.sync_budget_secs = Some(7);
        let flag = plan(
            &args(&["--store", "memory:", "--sync-budget", "9", "--", "srv"]),
            cfg,
        )
        .unwrap();
        assert_eq!(flag.file.tasks.sync_budget_secs, Some(9));
    }

    #[test]
    fn a_store_held_by_another_process_gives_way_to_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("srv-abc.db");
        assert_eq!(free_store_path(&db), db, "nobody holds it");
        let held = std::fs::File::create(dir.path().join("srv-abc.db.lock")).unwrap();
        held.lock().unwrap();
        // Another open file description stands for another process (flock is per open file).
        assert_eq!(free_store_path(&db), dir.path().join("srv-abc-2.db"));
        drop(held);
        assert_eq!(free_store_path(&db), db, "free again");
    }

    #[test]
    fn the_same_command_finds_the_same_store_and_another_does_not() {
        let a = default_store_path(&args(&["--", "python", "server.py"]));
        let b = default_store_path(&args(&["--", "python", "server.py"]));
        let c = default_store_path(&args(&["--", "python", "other.py"]));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(
            a.to_string_lossy().contains("/mcp-tasks/wrap/server-"),
            "{a:?}"
        );
    }
}
