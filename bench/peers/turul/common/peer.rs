//! What the two turul peers share, none of it on the request path: the arguments, the SQLite file,
//! the port, the `listening on` line and the signals.
//!
//! turul's `McpServer::run` binds `bind_address` itself and takes no listener, so for an ephemeral
//! port the peer reserves one (binds 127.0.0.1:0, reads the port, closes it) and hands it to turul,
//! as turul's own HTTP test suites do (`reserve_port`). The URL is printed only once a TCP connect
//! to it succeeds, so a client never races the bind.
//!
//! The one departure from turul's own setup, as in the rmcp peer: `TCP_NODELAY` on the accepted
//! sockets (unless `--nagle`). turul answers with a chunked body written in more than one segment
//! (the last is the terminating chunk), so with Nagle's algorithm on, that last segment waits for the
//! client's delayed ACK: about 40 ms a request on Linux loopback. turul gives no hook to the
//! listener or the accepted sockets (it binds and accepts inside `McpServer::run`), so the peer sets
//! the option on turul's listening socket, found among its own descriptors, once it listens: Linux
//! copies it to every socket accepted afterwards.
//!
//! A second one for the SQLite stores: the database file is put in WAL mode before turul opens it
//! (unless `--journal delete`). turul's stores set no pragma, so they run SQLite's rollback journal;
//! under 16 clients its writers wait seconds for readers and each other, and past the 5 s busy
//! timeout turul fails a create or drops a task's completion (see bench/peers/README.md). WAL is
//! a property of the file, so turul's own connections then use it; `synchronous` stays turul's
//! (SQLite's default, FULL), so a commit is as durable as before.

use std::future::Future;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Which task store the peer runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    Memory,
    Sqlite,
}

pub struct Args {
    pub port: u16,
    pub store: Store,
    pub db: Option<PathBuf>,
    /// Leave Nagle's algorithm on (turul's sockets as turul makes them).
    pub nagle: bool,
    /// `--pool N`: the SQLite connection pool's size (mcp-peer-turul-2026 only).
    pub pool: Option<u32>,
    /// `--journal delete`: leave the SQLite file's journal mode as turul finds it (rollback
    /// journal for a new file) instead of WAL.
    pub wal: bool,
}

fn usage(bin: &str, message: &str) -> ! {
    eprintln!(
        "{message}\nusage: {bin} [--port N] [--store memory|sqlite] [--db PATH] [--journal wal|delete] [--pool N] [--nagle]"
    );
    std::process::exit(2)
}

pub fn parse_args(bin: &str) -> Args {
    let mut args = Args {
        port: 0,
        store: Store::Memory,
        db: None,
        nagle: false,
        pool: None,
        wal: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| it.next())
                .unwrap_or_else(|| usage(bin, &format!("{name} needs a value")))
        };
        match flag.as_str() {
            "--port" => {
                args.port = value("--port")
                    .parse()
                    .unwrap_or_else(|_| usage(bin, "--port needs an integer in 0..65535"))
            }
            "--store" => {
                args.store = match value("--store").as_str() {
                    "memory" => Store::Memory,
                    "sqlite" => Store::Sqlite,
                    other => usage(bin, &format!("--store is memory or sqlite, not {other:?}")),
                }
            }
            "--db" => args.db = Some(PathBuf::from(value("--db"))),
            "--nagle" => args.nagle = true,
            "--journal" => {
                args.wal = match value("--journal").as_str() {
                    "wal" => true,
                    "delete" => false,
                    other => usage(bin, &format!("--journal is wal or delete, not {other:?}")),
                }
            }
            "--pool" => {
                args.pool = Some(
                    value("--pool")
                        .parse()
                        .unwrap_or_else(|_| usage(bin, "--pool needs an integer")),
                )
            }
            "-h" | "--help" => usage(bin, &format!("{bin}: turul-mcp-server tasks peer")),
            other => usage(bin, &format!("unknown argument: {other}")),
        }
    }
    if (args.db.is_some() || args.pool.is_some()) && args.store != Store::Sqlite {
        usage(bin, "--db and --pool go with --store sqlite");
    }
    args
}

/// Logs to stderr, errors only unless `RUST_LOG` says otherwise (turul logs at info by default).
pub fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}

/// The SQLite database file: `--db PATH` as given (kept), or a fresh file in the temp directory that
/// the peer removes when it is stopped with SIGTERM or SIGINT (not after SIGKILL).
pub struct DbFile {
    pub path: PathBuf,
    owned: bool,
}

impl DbFile {
    pub fn new(bin: &str, given: Option<PathBuf>) -> DbFile {
        match given {
            Some(path) => DbFile { path, owned: false },
            None => {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                let name = format!("{bin}-{}-{nanos}.db", std::process::id());
                DbFile {
                    path: std::env::temp_dir().join(name),
                    owned: true,
                }
            }
        }
    }

    /// Puts the file (created if missing) in WAL mode, which SQLite keeps in the file.
    pub async fn make_wal(&self) -> Result<(), BoxError> {
        use sqlx::Connection as _;
        use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode};
        let options = SqliteConnectOptions::new()
            .filename(&self.path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal);
        SqliteConnection::connect_with(&options)
            .await?
            .close()
            .await?;
        Ok(())
    }

    fn remove(&self) {
        if !self.owned {
            return;
        }
        for suffix in ["", "-journal", "-wal", "-shm"] {
            let mut p = self.path.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
    }
}

/// `port` on 127.0.0.1, or (for 0) a port that was free a moment ago.
fn reserve(port: u16) -> std::io::Result<SocketAddr> {
    if port != 0 {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    let probe = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    probe.local_addr()
}

/// Waits until `addr` accepts a connection; fails if `run` ends first or 30 s pass.
async fn until_listening(
    addr: SocketAddr,
    run: &tokio::task::JoinHandle<Result<(), String>>,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if run.is_finished() {
            return Err(format!("the server stopped before listening on {addr}"));
        }
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("the server did not listen on {addr} within 30 s"));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Sets `TCP_NODELAY` on this process's listening TCP socket bound to `addr` (sockets it accepts
/// afterwards inherit it on Linux). Returns whether it found the socket.
fn nodelay_on_listener(addr: SocketAddr) -> std::io::Result<bool> {
    use std::os::fd::{BorrowedFd, RawFd};
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let entry = entry?;
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<RawFd>() else {
            continue;
        };
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
        if !is_socket {
            continue;
        }
        // SAFETY: `fd` is open in this process (just listed) and only borrowed for these calls.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let socket = socket2::SockRef::from(&fd);
        let listening = socket.is_listener().unwrap_or(false);
        let bound = socket.local_addr().ok().and_then(|a| a.as_socket());
        if listening && bound == Some(addr) {
            socket.set_tcp_nodelay(true)?;
            return Ok(true);
        }
    }
    Ok(false)
}

/// Runs the server `make(addr)` builds and runs, prints `listening on http://ADDR/mcp` once it
/// accepts connections, and returns on SIGTERM or SIGINT (or when the server stops). An ephemeral
/// port that another process took in the meantime is tried again with another. Unless `nagle`,
/// turul's listener gets `TCP_NODELAY` first (see the module's notes).
pub async fn serve<F, Fut>(
    port: u16,
    nagle: bool,
    db: Option<&DbFile>,
    make: F,
) -> Result<(), BoxError>
where
    F: Fn(SocketAddr) -> Fut,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let mut attempt = 0;
    let (addr, run) = loop {
        attempt += 1;
        let addr = reserve(port)?;
        let run = tokio::spawn(make(addr));
        match until_listening(addr, &run).await {
            Ok(()) => break (addr, run),
            Err(e) => {
                let why = if run.is_finished() {
                    match run.await {
                        Ok(Err(server)) => format!("{e}: {server}"),
                        _ => e,
                    }
                } else {
                    run.abort();
                    e
                };
                if port != 0 || attempt >= 5 {
                    return Err(why.into());
                }
            }
        }
    };
    if !nagle && !nodelay_on_listener(addr)? {
        return Err(format!("found no listening socket on {addr} to set TCP_NODELAY on").into());
    }
    println!("listening on http://{addr}/mcp");
    std::io::stdout().flush()?;
    let outcome = tokio::select! {
        _ = shutdown_signal() => Ok(()),
        ended = run => match ended {
            Ok(Ok(())) => Err("the server stopped".into()),
            Ok(Err(e)) => Err(e.into()),
            Err(e) => Err(e.into()),
        },
    };
    if let Some(db) = db {
        db.remove();
    }
    outcome
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = ctrl_c => {}
        _ = term.recv() => {}
    }
}
