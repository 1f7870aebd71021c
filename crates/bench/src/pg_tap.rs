//! A loopback TCP relay in front of PostgreSQL that reads the wire protocol passing through it and
//! counts what a client costs the database: statements (by their text), round trips, `Sync`s,
//! prepares, and transactions that wrote and committed. It needs no extension in the database
//! (`pg_stat_statements` must be preloaded at the server's start, which a shared test server is
//! not), and it sees exactly the traffic of the clients pointed at it.
//!
//! What it counts, per connection, from the messages of protocol 3.0:
//! - a statement: each `CommandComplete` (or `EmptyQueryResponse`), attributed to the text of the
//!   `Parse` whose portal was executed, or to the simple query that ran it;
//! - a round trip: each time the database answers after the client sent something new (a
//!   pipelined batch is one);
//! - a commit: a `COMMIT`, or the end (`ReadyForQuery` idle) of an implicit transaction that ran
//!   a statement; one that ran `INSERT`, `UPDATE`, `DELETE`, `MERGE`, `COPY` or a `FOR UPDATE` is a
//!   write commit (the kind that waits for the WAL flush), any other a read-only one.
//!
//! A connection that turns to TLS is relayed without being read.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the clients of a tap have cost so far.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    /// Connections opened through the tap.
    pub connections: u64,
    /// Statements run, by text (whitespace collapsed, long ones shortened in the middle).
    pub statements: BTreeMap<String, u64>,
    /// Round trips: answers to something new the client sent.
    pub round_trips: u64,
    /// `ReadyForQuery` messages (one per `Sync` or simple query).
    pub syncs: u64,
    /// `Parse` messages (statements prepared).
    pub parses: u64,
    /// Transactions that wrote and committed.
    pub write_commits: u64,
    /// Transactions that wrote nothing and committed.
    pub read_commits: u64,
    /// Transactions rolled back, or ended by an error.
    pub rollbacks: u64,
    /// Error responses.
    pub errors: u64,
    /// Notifications delivered (`LISTEN`).
    pub notifications: u64,
    /// Bytes from clients to the database.
    pub bytes_up: u64,
    /// Bytes from the database to clients.
    pub bytes_down: u64,
}

impl Counts {
    /// Statements run in all.
    pub fn statement_total(&self) -> u64 {
        self.statements.values().sum()
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &Counts) -> Counts {
        let mut statements = self.statements.clone();
        for (text, n) in &earlier.statements {
            if let Some(now) = statements.get_mut(text) {
                *now = now.saturating_sub(*n);
            }
        }
        statements.retain(|_, n| *n > 0);
        Counts {
            connections: self.connections - earlier.connections,
            statements,
            round_trips: self.round_trips - earlier.round_trips,
            syncs: self.syncs - earlier.syncs,
            parses: self.parses - earlier.parses,
            write_commits: self.write_commits - earlier.write_commits,
            read_commits: self.read_commits - earlier.read_commits,
            rollbacks: self.rollbacks - earlier.rollbacks,
            errors: self.errors - earlier.errors,
            notifications: self.notifications - earlier.notifications,
            bytes_up: self.bytes_up - earlier.bytes_up,
            bytes_down: self.bytes_down - earlier.bytes_down,
        }
    }
}

/// A running tap; it relays until the process ends.
pub struct Tap {
    /// Where clients connect instead of the database.
    pub addr: SocketAddr,
    counts: Arc<Mutex<Counts>>,
}

impl Tap {
    /// Listens on 127.0.0.1 (an ephemeral port) and relays every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Result<Tap> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("bind the PostgreSQL tap")?;
        let addr = listener.local_addr()?;
        let counts = Arc::new(Mutex::new(Counts::default()));
        let shared = counts.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let counts = shared.clone();
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(upstream).await {
                        relay(client, server, counts).await;
                    }
                });
            }
        });
        Ok(Tap { addr, counts })
    }

    /// The counts so far.
    pub fn counts(&self) -> Counts {
        lock(&self.counts).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the database owes the client an answer to, in order.
enum Pending {
    /// An `Execute` of a statement with this text.
    Execute(Arc<str>),
    /// A simple query (it may run several statements).
    Simple(Arc<str>),
    /// A `Sync` (or the end of a simple query): answered by `ReadyForQuery`.
    Sync,
}

/// One connection's state, shared by its two directions.
#[derive(Default)]
struct Conn {
    /// The client is still in the untyped start-up messages.
    starting: bool,
    /// Single-byte answers to SSL or GSS encryption requests the database still owes.
    owed_bytes: usize,
    /// The connection went to TLS: nothing more is read.
    opaque: bool,
    /// Prepared statements by name, and bound portals by name: their text.
    statements: HashMap<String, Arc<str>>,
    portals: HashMap<String, Arc<str>>,
    pending: VecDeque<Pending>,
    /// Chunks the client has sent, and how many of them the database has answered.
    sent: u64,
    answered: u64,
    /// The transaction under way: begun explicitly, statements run, whether one wrote, failed.
    explicit: bool,
    ran: u32,
    wrote: bool,
    failed: bool,
}

async fn relay(client: TcpStream, server: TcpStream, counts: Arc<Mutex<Counts>>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    lock(&counts).connections += 1;
    let conn = Arc::new(Mutex::new(Conn {
        starting: true,
        ..Conn::default()
    }));
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(
        client_read,
        server_write,
        conn.clone(),
        counts.clone(),
        Direction::Up,
    );
    let down = pump(server_read, client_write, conn, counts, Direction::Down);
    let _ = tokio::join!(up, down);
}

#[derive(Clone, Copy, PartialEq)]
enum Direction {
    Up,
    Down,
}

/// Relays one direction, reading each whole message before passing the bytes on (so the client's
/// `Execute` is queued before the database can answer it).
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    conn: Arc<Mutex<Conn>>,
    counts: Arc<Mutex<Counts>>,
    direction: Direction,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut partial: Vec<u8> = Vec::new();
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        {
            let mut conn = lock(&conn);
            let mut counts = lock(&counts);
            let chunk = &buf[..n];
            match direction {
                Direction::Up => {
                    counts.bytes_up += n as u64;
                    conn.sent += 1;
                }
                Direction::Down => {
                    counts.bytes_down += n as u64;
                    if conn.answered < conn.sent {
                        conn.answered = conn.sent;
                        counts.round_trips += 1;
                    }
                }
            }
            if !conn.opaque {
                partial.extend_from_slice(chunk);
                let used = match direction {
                    Direction::Up => read_client(&partial, &mut conn, &mut counts),
                    Direction::Down => read_server(&partial, &mut conn, &mut counts),
                };
                partial.drain(..used);
            }
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// The length field of a message header at `at`, when the bytes are there.
fn length_at(bytes: &[u8], at: usize) -> Option<usize> {
    let b = bytes.get(at..at + 4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
}

/// A NUL-terminated string at the start of `bytes`, and the rest after it.
fn cstr(bytes: &[u8]) -> (&str, &[u8]) {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    let text = std::str::from_utf8(&bytes[..end]).unwrap_or("");
    (text, bytes.get(end + 1..).unwrap_or(&[]))
}

/// Reads the client's complete messages in `bytes`; returns how many bytes they took.
fn read_client(bytes: &[u8], conn: &mut Conn, counts: &mut Counts) -> usize {
    let mut at = 0;
    loop {
        if conn.starting {
            // Start-up messages have no type byte: a length, then a request code.
            let Some(len) = length_at(bytes, at) else {
                return at;
            };
            if len < 8 || bytes.len() < at + len {
                return at;
            }
            let code = length_at(bytes, at + 4).unwrap_or(0);
            match code {
                // SSLRequest and GSSENCRequest: one byte of answer, then another start-up message.
                80_877_103 | 80_877_104 => conn.owed_bytes += 1,
                // CancelRequest: the connection ends after it.
                80_877_102 => {}
                _ => conn.starting = false,
            }
            at += len;
            continue;
        }
        let Some(len) = length_at(bytes, at + 1) else {
            return at;
        };
        if len < 4 || bytes.len() < at + 1 + len {
            return at;
        }
        let body = &bytes[at + 5..at + 1 + len];
        match bytes[at] {
            b'P' => {
                counts.parses += 1;
                let (name, rest) = cstr(body);
                let (query, _) = cstr(rest);
                conn.statements
                    .insert(name.to_string(), Arc::from(shorten(query)));
            }
            b'B' => {
                let (portal, rest) = cstr(body);
                let (statement, _) = cstr(rest);
                let text = conn
                    .statements
                    .get(statement)
                    .cloned()
                    .unwrap_or_else(|| Arc::from("(statement prepared before the tap)"));
                conn.portals.insert(portal.to_string(), text);
            }
            b'E' => {
                let (portal, _) = cstr(body);
                let text = conn
                    .portals
                    .get(portal)
                    .cloned()
                    .unwrap_or_else(|| Arc::from("(unknown portal)"));
                conn.pending.push_back(Pending::Execute(text));
            }
            b'S' => conn.pending.push_back(Pending::Sync),
            b'Q' => {
                let (query, _) = cstr(body);
                conn.pending
                    .push_back(Pending::Simple(Arc::from(shorten(query))));
                conn.pending.push_back(Pending::Sync);
            }
            _ => {}
        }
        at += 1 + len;
    }
}

/// Reads the database's complete messages in `bytes`; returns how many bytes they took.
fn read_server(bytes: &[u8], conn: &mut Conn, counts: &mut Counts) -> usize {
    let mut at = 0;
    while conn.owed_bytes > 0 {
        let Some(&answer) = bytes.get(at) else {
            return at;
        };
        conn.owed_bytes -= 1;
        at += 1;
        if answer == b'S' || answer == b'G' {
            conn.opaque = true;
            return bytes.len();
        }
    }
    loop {
        let Some(len) = length_at(bytes, at + 1) else {
            return at;
        };
        if len < 4 || bytes.len() < at + 1 + len {
            return at;
        }
        let body = &bytes[at + 5..at + 1 + len];
        match bytes[at] {
            b'C' | b'I' => {
                let tag = if bytes[at] == b'C' { cstr(body).0 } else { "" };
                completed(tag, conn, counts);
            }
            b'E' => {
                counts.errors += 1;
                conn.failed = true;
                if let Some(Pending::Execute(_)) = conn.pending.front() {
                    conn.pending.pop_front();
                }
            }
            b'Z' => {
                counts.syncs += 1;
                // Whatever was queued before this Sync and not answered was skipped by an error.
                while let Some(p) = conn.pending.pop_front() {
                    if matches!(p, Pending::Sync) {
                        break;
                    }
                }
                let idle = body.first() == Some(&b'I');
                if idle && !conn.explicit && (conn.ran > 0 || conn.failed) {
                    end_transaction(conn, counts, !conn.failed);
                }
                if idle {
                    conn.explicit = false;
                    conn.failed = false;
                }
            }
            b'A' => counts.notifications += 1,
            _ => {}
        }
        at += 1 + len;
    }
}

/// A statement completed with `tag`.
fn completed(tag: &str, conn: &mut Conn, counts: &mut Counts) {
    let text = match conn.pending.front() {
        Some(Pending::Simple(t)) => t.clone(),
        Some(Pending::Execute(_)) => match conn.pending.pop_front() {
            Some(Pending::Execute(t)) => t,
            _ => Arc::from("(unmatched)"),
        },
        _ => Arc::from("(unmatched)"),
    };
    let word = tag.split_whitespace().next().unwrap_or("");
    match word {
        "BEGIN" | "START" => {
            conn.explicit = true;
            conn.ran = 0;
            conn.wrote = false;
        }
        "COMMIT" => end_transaction(conn, counts, true),
        "ROLLBACK" => end_transaction(conn, counts, false),
        _ => {
            conn.ran += 1;
            let upper = text.to_ascii_uppercase();
            if matches!(word, "INSERT" | "UPDATE" | "DELETE" | "MERGE" | "COPY")
                || upper.contains("FOR UPDATE")
                || upper.starts_with("INSERT")
                || upper.starts_with("UPDATE")
                || upper.starts_with("DELETE")
            {
                conn.wrote = true;
            }
        }
    }
    *counts.statements.entry(text.to_string()).or_default() += 1;
}

fn end_transaction(conn: &mut Conn, counts: &mut Counts, committed: bool) {
    if !committed {
        counts.rollbacks += 1;
    } else if conn.wrote {
        counts.write_commits += 1;
    } else {
        counts.read_commits += 1;
    }
    conn.explicit = false;
    conn.ran = 0;
    conn.wrote = false;
}

/// A statement's text for a table: whitespace collapsed, and a long one cut in the middle (where a
/// column list usually is), so what it does and to which table stays readable.
fn shorten(query: &str) -> String {
    let flat = query.split_whitespace().collect::<Vec<_>>().join(" ");
    let chars: Vec<char> = flat.chars().collect();
    if chars.len() <= 110 {
        return flat;
    }
    let head: String = chars[..45].iter().collect();
    let tail: String = chars[chars.len() - 60..].iter().collect();
    format!("{head} … {tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    fn started() -> Conn {
        Conn {
            starting: false,
            ..Conn::default()
        }
    }

    #[test]
    fn an_implicit_insert_is_one_write_commit_and_a_select_a_read_only_one() {
        let (mut conn, mut counts) = (started(), Counts::default());
        let mut up = message(b'P', b"\0INSERT INTO t VALUES ($1)\0\0\0");
        up.extend(message(b'B', b"\0\0\0\0\0\0\0\0"));
        up.extend(message(b'E', b"\0\0\0\0\0"));
        up.extend(message(b'S', b""));
        up.extend(message(b'P', b"s1\0SELECT 1\0\0\0"));
        up.extend(message(b'B', b"p\0s1\0\0\0\0\0\0\0"));
        up.extend(message(b'E', b"p\0\0\0\0\0"));
        up.extend(message(b'S', b""));
        assert_eq!(read_client(&up, &mut conn, &mut counts), up.len());
        let mut down = message(b'1', b"");
        down.extend(message(b'2', b""));
        down.extend(message(b'C', b"INSERT 0 1\0"));
        down.extend(message(b'Z', b"I"));
        down.extend(message(b'C', b"SELECT 1\0"));
        // Half of the last message: kept for the next read.
        let last = message(b'Z', b"I");
        down.extend(&last[..3]);
        let used = read_server(&down, &mut conn, &mut counts);
        assert_eq!(used, down.len() - 3);
        assert_eq!((counts.write_commits, counts.read_commits), (1, 0));
        assert_eq!(read_server(&last, &mut conn, &mut counts), last.len());
        assert_eq!((counts.write_commits, counts.read_commits), (1, 1));
        assert_eq!(counts.syncs, 2);
        assert_eq!(counts.statements.get("INSERT INTO t VALUES ($1)"), Some(&1));
        assert_eq!(counts.statements.get("SELECT 1"), Some(&1));
    }

    #[test]
    fn an_explicit_transaction_commits_once_and_an_error_rolls_back() {
        let (mut conn, mut counts) = (started(), Counts::default());
        let mut up = message(b'Q', b"BEGIN\0");
        up.extend(message(b'P', b"u\0UPDATE t SET a = 1\0\0\0"));
        up.extend(message(b'B', b"\0u\0\0\0\0\0\0\0"));
        up.extend(message(b'E', b"\0\0\0\0\0"));
        up.extend(message(b'S', b""));
        up.extend(message(b'Q', b"COMMIT\0"));
        read_client(&up, &mut conn, &mut counts);
        let mut down = message(b'C', b"BEGIN\0");
        down.extend(message(b'Z', b"T"));
        down.extend(message(b'C', b"UPDATE 1\0"));
        down.extend(message(b'Z', b"T"));
        down.extend(message(b'C', b"COMMIT\0"));
        down.extend(message(b'Z', b"I"));
        read_server(&down, &mut conn, &mut counts);
        assert_eq!((counts.write_commits, counts.read_commits), (1, 0));
        assert_eq!(counts.statement_total(), 3);

        // An implicit statement that fails: a rollback, and the next statement is still matched.
        let mut up = message(b'B', b"\0u\0\0\0\0\0\0\0");
        up.extend(message(b'E', b"\0\0\0\0\0"));
        up.extend(message(b'S', b""));
        up.extend(message(b'Q', b"SELECT 2\0"));
        read_client(&up, &mut conn, &mut counts);
        let mut down = message(b'E', b"SERROR\0\0");
        down.extend(message(b'Z', b"I"));
        down.extend(message(b'C', b"SELECT 1\0"));
        down.extend(message(b'Z', b"I"));
        read_server(&down, &mut conn, &mut counts);
        assert_eq!((counts.errors, counts.rollbacks), (1, 1));
        assert_eq!(counts.statements.get("SELECT 2"), Some(&1));
        assert_eq!((counts.write_commits, counts.read_commits), (1, 1));
    }

    #[test]
    fn ssl_refused_then_start_up() {
        let (mut conn, mut counts) = (
            Conn {
                starting: true,
                ..Conn::default()
            },
            Counts::default(),
        );
        let mut up = 8u32.to_be_bytes().to_vec();
        up.extend(80_877_103u32.to_be_bytes());
        read_client(&up, &mut conn, &mut counts);
        assert_eq!(conn.owed_bytes, 1);
        let mut startup = 9u32.to_be_bytes().to_vec();
        startup.extend(196_608u32.to_be_bytes());
        startup.push(0);
        startup.extend(message(b'S', b""));
        read_client(&startup, &mut conn, &mut counts);
        assert!(!conn.starting);
        let mut down = vec![b'N'];
        down.extend(message(b'R', &0u32.to_be_bytes()));
        down.extend(message(b'Z', b"I"));
        assert_eq!(read_server(&down, &mut conn, &mut counts), down.len());
        assert_eq!(counts.syncs, 1);
        assert!(!conn.opaque);
    }

    #[test]
    fn a_long_statement_keeps_its_ends() {
        let cols = (0..40)
            .map(|i| format!("c{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let q = format!("SELECT {cols}\n   FROM tasks WHERE id = $1");
        let s = shorten(&q);
        assert!(s.starts_with("SELECT c0, c1"), "{s}");
        assert!(s.ends_with("FROM tasks WHERE id = $1"), "{s}");
        assert!(s.chars().count() < 120);
    }
}
