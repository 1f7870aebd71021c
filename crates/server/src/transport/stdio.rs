//! stdio transport: newline-delimited JSON-RPC on stdin/stdout; logs go to stderr.
//!
//! The caller is the local user. Requests run concurrently, so a blocking `tasks/result` does not hold
//! up other calls; everything the server sends goes through one writer, one message per line.

use mcp_tasks_protocol::jsonrpc::{parse_message, ErrorObject, Message};
use std::sync::Arc;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, RwLock};

use crate::core::streams::StreamGuard;
use crate::core::{Peer, Server};
use crate::inbound::Transport;
use crate::wire::era::{self, Facts};

/// Serves one client on `input` / `output` until the input ends.
pub async fn serve<R, W>(server: Arc<Server>, input: R, output: W) -> std::io::Result<()>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, mut rx) = mpsc::channel::<Message>(1024);
    let writer = tokio::spawn(async move {
        let mut output = output;
        while let Some(m) = rx.recv().await {
            let mut line = m.to_json();
            line.push('\n');
            if output.write_all(line.as_bytes()).await.is_err() || output.flush().await.is_err() {
                break;
            }
        }
    });
    let peer = Arc::new(RwLock::new(Peer::new(server.local_user())));
    let mut _standalone: Option<StreamGuard> = None;
    let max = server.config().max_body_bytes;
    let mut reader = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        match read_line_bounded(&mut reader, &mut line, max).await? {
            LineRead::Eof => break,
            LineRead::TooLong => {
                let e = ErrorObject::invalid_request(format!(
                    "message larger than the limit of {max} bytes"
                ));
                let _ = tx.send(Message::error(None, e)).await;
                continue;
            }
            LineRead::Line => {}
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        // Bytes, not text: invalid UTF-8 is a parse error for that line, not the end of the session.
        let msg = match parse_message(&line) {
            Ok(m) => m,
            Err(rejected) => {
                let _ = tx.send(Message::error(rejected.id, rejected.error)).await;
                continue;
            }
        };
        let era = {
            let p = peer.read().await;
            era::classify(&Facts {
                session_async_tools: p.session.as_ref().map(|s| s.async_tools()),
                ..era::body_facts(&msg)
            })
        };
        match msg {
            Message::Request(req) if req.method == "initialize" && era != crate::Era::Stateless => {
                if peer.read().await.session.is_some() {
                    let e = ErrorObject::invalid_request("this session is already initialized");
                    let _ = tx.send(Message::error(Some(req.id), e)).await;
                    continue;
                }
                let caller = peer.read().await.clone();
                let reply = match server.initialize(&caller, req.params.as_ref()).await {
                    Ok((session, result)) => {
                        // stdout is this session's standalone stream for task notifications.
                        _standalone = Some(server.streams().register_standalone(
                            &session.id,
                            tx.clone(),
                            Vec::new(),
                        ));
                        peer.write().await.session = Some(session);
                        Message::response(req.id, result)
                    }
                    Err(f) => Message::error(Some(req.id), f.error),
                };
                let _ = tx.send(reply).await;
            }
            Message::Request(req) => {
                let server = server.clone();
                let peer = peer.read().await.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    if let Some(reply) = server
                        .handle_request(era, &peer, Transport::Stdio, req, tx.clone())
                        .await
                    {
                        // One writer, in order: once the reply is queued, what follows it comes after.
                        let _ = tx.send(reply.message.clone()).await;
                        server.reply_written(&reply);
                    }
                });
            }
            Message::Notification(n) => {
                let p = peer.read().await.clone();
                server.handle_notification(&p, n).await;
            }
            m @ (Message::Response(_) | Message::Error(_)) => {
                let p = peer.read().await.clone();
                if let Err(e) = server.handle_client_response(&p, m).await {
                    // A response gets no reply on the wire; say what was wrong where the user looks.
                    tracing::warn!(error = %e.message, "rejected a response from the client");
                }
            }
        }
    }
    drop(_standalone);
    drop(tx);
    // Requests still running (a blocked tasks/result, say) hold senders; the client is gone, so give
    // the writer a moment to flush what is queued and stop.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), writer).await;
    Ok(())
}

enum LineRead {
    Line,
    TooLong,
    Eof,
}

/// Reads one newline-terminated line into `buf` without ever holding more than `max` bytes; a longer
/// line is consumed and reported as too long.
async fn read_line_bounded<R: AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<LineRead> {
    let mut too_long = false;
    loop {
        let chunk = r.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(if too_long {
                LineRead::TooLong
            } else if buf.is_empty() {
                LineRead::Eof
            } else {
                LineRead::Line
            });
        }
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if !too_long {
            if buf.len() + take > max + 1 {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(&chunk[..take]);
            }
        }
        r.consume(take);
        if done {
            return Ok(if too_long {
                LineRead::TooLong
            } else {
                LineRead::Line
            });
        }
    }
}
