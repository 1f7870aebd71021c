//! Connections a careless or hostile client opens and does not use (issue 13, item 1): silent ones
//! and ones that trickle their headers are closed, a body that does not arrive is a 408, and a
//! connection that has served a request may stay idle longer than a new one.

mod support;

use mcp_tasks_engine::store::memory::MemoryStore;
use mcp_tasks_server::ServerConfig;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{fast_engine, start_with, TestServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn server(header: u64, idle: u64, body: u64) -> TestServer {
    let config = ServerConfig {
        header_timeout: Duration::from_millis(header),
        idle_timeout: Duration::from_millis(idle),
        body_timeout: Duration::from_millis(body),
        ..ServerConfig::default()
    };
    start_with(Arc::new(MemoryStore::new()), fast_engine(), config, vec![]).await
}

fn addr(s: &TestServer) -> String {
    s.url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string()
}

/// Reads until the server closes the connection (or `limit` passes); returns what it sent and how
/// long that took.
async fn read_until_closed(tcp: &mut TcpStream, limit: Duration) -> (String, Duration) {
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at((started + limit).into(), tcp.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!(
                "the connection was still open after {limit:?}; got {:?}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
    (
        String::from_utf8_lossy(&got).into_owned(),
        started.elapsed(),
    )
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_after_the_header_timeout() {
    let s = server(600, 30_000, 30_000).await;
    let mut tcp = TcpStream::connect(addr(&s)).await.unwrap();
    let (_, took) = read_until_closed(&mut tcp, Duration::from_secs(5)).await;
    assert!(
        took >= Duration::from_millis(500),
        "not before its time: {took:?}"
    );
}

#[tokio::test]
async fn headers_that_trickle_in_are_cut_off() {
    let s = server(800, 30_000, 30_000).await;
    let mut tcp = TcpStream::connect(addr(&s)).await.unwrap();
    tcp.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    // A byte every 100 ms keeps the connection busy but never finishes the headers.
    let trickle = async {
        loop {
            if tcp.write_all(b"X").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            if started.elapsed() > Duration::from_secs(5) {
                panic!("still taking header bytes after 5 s");
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(6), trickle).await;
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_body_that_does_not_arrive_is_a_408() {
    let s = server(5_000, 30_000, 700).await;
    let mut tcp = TcpStream::connect(addr(&s)).await.unwrap();
    tcp.write_all(
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{",
    )
    .await
    .unwrap();
    let (reply, took) = read_until_closed(&mut tcp, Duration::from_secs(5)).await;
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(reply.contains("did not arrive within 0.7 s"), "{reply}");
    assert!(reply.contains("\"jsonrpc\":\"2.0\""), "{reply}");
    assert!(took >= Duration::from_millis(600), "{took:?}");
}

#[tokio::test]
async fn a_connection_that_served_a_request_waits_for_the_idle_timeout() {
    let s = server(500, 2_500, 30_000).await;
    let mut tcp = TcpStream::connect(addr(&s)).await.unwrap();
    let ping = |id: u32| {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{{}},"clientInfo":{{"name":"t","version":"1"}}}}}}"#
        );
        format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let mut buf = [0u8; 8192];
    tcp.write_all(ping(1).as_bytes()).await.unwrap();
    let n = tcp.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    // Past the first-request limit (0.5 s), the connection is still good for another request.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    tcp.write_all(ping(2).as_bytes()).await.unwrap();
    let n = tcp.read(&mut buf).await.unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"),
        "kept alive"
    );
    let (_, took) = read_until_closed(&mut tcp, Duration::from_secs(8)).await;
    assert!(
        took >= Duration::from_millis(2_000),
        "closed after the idle timeout: {took:?}"
    );
}

/// A drain (a deploy) closes each kept-alive connection with the reply to its next request, which
/// says `Connection: close`: a balancer in front learns from the reply, not from a closed socket
/// under a request it is writing.
#[tokio::test]
async fn while_draining_every_reply_ends_its_connection() {
    let s = server(5_000, 30_000, 30_000).await;
    let post = |id: u32, session: &str, method: &str, params: &str| {
        let body =
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#);
        format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n{session}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let initialize = |id| {
        post(
            id,
            "",
            "initialize",
            r#"{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}"#,
        )
    };
    let mut tcp = TcpStream::connect(addr(&s)).await.unwrap();
    let mut buf = [0u8; 8192];
    tcp.write_all(initialize(1).as_bytes()).await.unwrap();
    let n = tcp.read(&mut buf).await.unwrap();
    let first = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
    assert!(first.starts_with("http/1.1 200"), "{first}");
    assert!(!first.contains("connection: close"), "kept alive: {first}");
    let session = first
        .lines()
        .find_map(|l| l.strip_prefix("mcp-session-id: "))
        .unwrap_or_else(|| panic!("no session: {first}"))
        .trim()
        .to_string();

    s.server.begin_drain();
    // A request on the connection kept alive from before: served, and the connection ends with it.
    tcp.write_all(initialize(2).as_bytes()).await.unwrap();
    let (second, took) = read_until_closed(&mut tcp, Duration::from_secs(3)).await;
    let second = second.to_ascii_lowercase();
    assert!(second.starts_with("http/1.1 200"), "{second}");
    assert!(second.contains("\r\nconnection: close\r\n"), "{second}");
    assert!(took < Duration::from_secs(2), "closed at once: {took:?}");

    // A new call is refused (503: a balancer sends it elsewhere) on a connection that ends too.
    let mut tcp = TcpStream::connect(addr(&s)).await.unwrap();
    let call = post(
        3,
        &format!("Mcp-Session-Id: {session}\r\n"),
        "tools/call",
        r#"{"name":"echo","arguments":{"text":"x"}}"#,
    );
    tcp.write_all(call.as_bytes()).await.unwrap();
    let (refused, _) = read_until_closed(&mut tcp, Duration::from_secs(3)).await;
    let refused = refused.to_ascii_lowercase();
    assert!(refused.starts_with("http/1.1 503"), "{refused}");
    assert!(refused.contains("\r\nconnection: close\r\n"), "{refused}");
}
