//! The HTTP connections themselves: how many may be open, how long a client may take to send a
//! request's headers, and how long a connection may sit idle. Without these, a client that opens
//! connections and sends nothing (or a byte at a time) holds a descriptor each for as long as it
//! likes, and a few hundred of them stop the server from taking any new request.
//!
//! - At most `max_connections` are open. At the cap, a new connection takes the place of the oldest
//!   one that has not sent a complete request (or else of the oldest kept-alive one with nothing in
//!   progress): silent connections cannot keep a real client out. When every connection has a
//!   request in progress, new ones wait until one closes. A log line says so (once a minute while
//!   it lasts).
//! - A request's headers must arrive within `header_timeout` once their first byte has.
//! - A connection with no request in progress (a streamed reply counts until its last byte) that
//!   sends nothing for `idle_timeout` is closed; before its first request, after `header_timeout`.
//!
//! Both are watched here rather than with hyper's own header timer, which also runs while a kept-
//! alive connection waits for its next request and so would close it as soon as the header timeout
//! passed.
//! - A POST body must arrive within `body_timeout` (see the POST handler): a 408 otherwise.
//! - While the server winds down (a drain), every HTTP/1 reply says `Connection: close` and its
//!   connection ends after it. A balancer in front keeps no idle connection to a replica that is
//!   about to exit: each one it still sends a request on is closed by the reply, cleanly, instead of
//!   by the exit, where a request written at that instant is lost (nginx answers a POST that met a
//!   closing connection with 502 and, rightly, does not send it elsewhere).

use axum::body::Body;
use axum::extract::ConnectInfo;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Limits on connections (see the module docs).
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// Open connections at most.
    pub max_connections: usize,
    /// Time for a request's headers, once they begin.
    pub header_timeout: Duration,
    /// Time a connection with nothing in progress may send nothing.
    pub idle_timeout: Duration,
}

/// Descriptors kept back from connections: the store, upstream servers, log files, the listener.
const RESERVED_DESCRIPTORS: u64 = 64;

/// Raises the process's soft limit on open descriptors to its hard limit (a server should not stop
/// at a shell's default of 1024 when the system allows more), and returns how many of `wanted`
/// connections fit under it with [`RESERVED_DESCRIPTORS`] kept back (at least 16).
pub fn fit_connections_to_descriptors(wanted: usize) -> usize {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let soft = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) => {
            if soft < hard {
                match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                    Ok(()) => {
                        tracing::debug!(from = soft, to = hard, "raised the open-file limit");
                        hard
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, soft, hard, "could not raise the open-file limit");
                        soft
                    }
                }
            } else {
                soft
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not read the open-file limit");
            return wanted;
        }
    };
    let room = soft.saturating_sub(RESERVED_DESCRIPTORS).max(16);
    let fit = usize::try_from(room).unwrap_or(usize::MAX).min(wanted);
    if fit < wanted {
        tracing::info!(
            wanted,
            fit,
            open_file_limit = soft,
            "fewer connections than configured: the open-file limit is lower"
        );
    }
    fit
}

/// Whether connections should end after their current reply (the server is winding down).
pub(crate) type WindingDown = Arc<dyn Fn() -> bool + Send + Sync>;

/// Serves `app` on `listener` until `stop` resolves; then takes no new connection, lets open ones
/// finish their requests, and returns once they have closed or `grace` has passed. While
/// `winding_down` says so, replies end their connections (see the module docs). Once `closing`
/// resolves the listener closes, after taking the connections the kernel has completed, and the
/// open connections are served until `stop` (see `core/stopping.rs`).
pub(crate) async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: ConnectionLimits,
    winding_down: WindingDown,
    closing: impl Future<Output = ()>,
    stop: impl Future<Output = ()>,
    grace: Duration,
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut builder = Builder::new(TokioExecutor::new());
    // No header timer of hyper's: `Activity` watches for it (see the module docs).
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .max_headers(super::strict::HYPER_MAX_HEADERS);
    builder.http2().timer(TokioTimer::new());
    let builder = Arc::new(builder);
    let started = Instant::now();
    let mut last_full_warning: Option<Instant> = None;
    let open = Open::default();
    // Starts serving an accepted connection in its place.
    let start = |tcp: tokio::net::TcpStream,
                 addr: std::net::SocketAddr,
                 permit: tokio::sync::OwnedSemaphorePermit| {
        // No Nagle: a reply is small and often written in parts (a streamed body, SSE events); waiting
        // for the peer's delayed ACK before the last part would add tens of milliseconds.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not turn Nagle off on a connection");
        }
        let activity = Arc::new(Activity {
            started,
            busy: AtomicUsize::new(0),
            served: AtomicUsize::new(0),
            head_since_ms: AtomicU64::new(NOT_STARTED),
            last_read_ms: AtomicU64::new(started.elapsed().as_millis() as u64),
            evict: tokio::sync::Notify::new(),
            responses: AtomicUsize::new(0),
            heads: AtomicUsize::new(0),
            unflushed: std::sync::atomic::AtomicBool::new(false),
        });
        let io = TokioIo::new(Watched {
            inner: tcp,
            activity: activity.clone(),
            replaced: None,
        });
        let service = hyper_util::service::TowerToHyperService::new(PerConnection {
            app: app.clone(),
            addr,
            activity: activity.clone(),
            winding_down: winding_down.clone(),
        });
        let conn = builder
            .serve_connection_with_upgrades(io, service)
            .into_owned();
        let conn = graceful.watch(conn);
        let idle = (limits.header_timeout, limits.idle_timeout);
        let registered = open.add(activity.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let _registered = registered;
            tokio::select! {
                r = conn => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, client = %addr, "connection ended with an error");
                    }
                }
                _ = activity.idle_for(idle) => {
                    tracing::debug!(client = %addr, "idle connection closed");
                }
                _ = activity.evict.notified() => {}
            }
        });
    };
    tokio::pin!(stop);
    tokio::pin!(closing);
    let mut stopped = false;
    'accept: loop {
        // Accept first, then find it a place: a connection waiting in the kernel's backlog cannot
        // be told apart from none, but one accepted can be given the place of an idle one.
        let (tcp, addr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors, say: wait a moment instead of spinning on the error.
                    tracing::warn!(error = %e, "could not accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => {
                stopped = true;
                break;
            }
            _ = &mut closing => break,
        };
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                if last_full_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                    last_full_warning = Some(Instant::now());
                    tracing::warn!(
                        max = limits.max_connections,
                        "open connection limit reached; connections that have not sent a request are closed to admit new ones, the rest wait (raise [server] max_connections if this is load, not abuse)"
                    );
                }
                // Make room, and keep trying while every connection is busy: one may go idle
                // before any closes.
                let mut retry = tokio::time::interval(Duration::from_millis(100));
                loop {
                    tokio::select! {
                        p = permits.clone().acquire_owned() => match p {
                            Ok(p) => break p,
                            Err(_) => break 'accept,
                        },
                        _ = retry.tick() => {
                            if open.close_oldest_idle() {
                                tracing::debug!(client = %addr, "closed an idle connection to admit a new one");
                            }
                        }
                        _ = &mut stop => {
                            stopped = true;
                            break 'accept;
                        }
                    }
                }
            }
        };
        start(tcp, addr, permit);
    }
    // Closing the listener resets the connections the kernel completed and nobody accepted, with
    // any request a balancer wrote into them: take them first, so they are answered.
    // Asked of the socket itself, not through the runtime: its readiness may not have caught up
    // with a connection the kernel completed a moment ago (seen under load in CI: a connection
    // opened before the close was reset).
    match listener.into_std() {
        Ok(backlog) => {
            while let Ok((tcp, addr)) = backlog.accept() {
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    break;
                };
                match tcp
                    .set_nonblocking(true)
                    .and_then(|()| tokio::net::TcpStream::from_std(tcp))
                {
                    Ok(tcp) => start(tcp, addr, permit),
                    Err(e) => {
                        tracing::warn!(client = %addr, error = %e, "a connection taken at the close could not be served")
                    }
                }
            }
            // Dropped here: the listener is closed.
        }
        Err(e) => {
            tracing::warn!(error = %e, "the listener's waiting connections could not be taken at the close")
        }
    }
    if !stopped {
        // The close: open connections are answered until the server stops.
        stop.await;
    }
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(grace) => {
            tracing::warn!("requests still running {grace:?} after shutdown began; closing them");
        }
    }
    Ok(())
}

/// `Activity::head_since_ms` when no request is being received.
const NOT_STARTED: u64 = u64::MAX;

/// What a connection is doing, for the idle check.
struct Activity {
    started: Instant,
    /// Requests whose reply has not been sent in full.
    busy: AtomicUsize,
    /// Requests received so far.
    served: AtomicUsize,
    /// When the first byte of a request not yet received in full arrived (ms since `started`), or
    /// [`NOT_STARTED`].
    head_since_ms: AtomicU64,
    /// When a byte last arrived, in ms since `started`.
    last_read_ms: AtomicU64,
    /// Told to close: its place is given to a new connection.
    evict: tokio::sync::Notify,
    /// Bodiless error responses (4xx, 5xx) the router made, and such heads written: a head beyond
    /// the responses made is one hyper wrote itself, for a request it could not read.
    responses: AtomicUsize,
    heads: AtomicUsize,
    /// Written since the last flush, or a reply's body done while hyper may still hold its end:
    /// the connection is not idle yet.
    unflushed: std::sync::atomic::AtomicBool,
}

impl Activity {
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Resolves once the connection has had nothing in progress and received nothing for long
    /// enough: `first` before its first request (a client that connects means to send one now;
    /// holding a connection open unused is how descriptors are exhausted), `idle` after it.
    /// Also resolves once a request's headers, begun, have not all arrived within `first`.
    async fn idle_for(&self, (first, idle): (Duration, Duration)) {
        let step = (first.min(idle) / 4).max(Duration::from_millis(50));
        loop {
            tokio::time::sleep(step).await;
            if self.busy.load(Ordering::Relaxed) > 0 {
                continue;
            }
            let now = self.now_ms();
            let head_since = self.head_since_ms.load(Ordering::Relaxed);
            if head_since != NOT_STARTED {
                if now.saturating_sub(head_since) >= first.as_millis() as u64 {
                    return;
                }
                continue;
            }
            let limit = if self.served.load(Ordering::Relaxed) == 0 {
                first
            } else {
                idle
            };
            let quiet = now.saturating_sub(self.last_read_ms.load(Ordering::Relaxed));
            if quiet >= limit.as_millis() as u64 {
                return;
            }
        }
    }
}

/// The open connections in the order they were accepted, so that at the cap the oldest one with
/// nothing in progress can make room.
#[derive(Clone, Default)]
struct Open(Arc<std::sync::Mutex<OpenInner>>);

#[derive(Default)]
struct OpenInner {
    next: u64,
    by_age: std::collections::BTreeMap<u64, Arc<Activity>>,
}

/// A connection's place in [`Open`], given up when dropped.
struct OpenEntry {
    open: Open,
    seq: u64,
}

impl Drop for OpenEntry {
    fn drop(&mut self) {
        self.open.lock().by_age.remove(&self.seq);
    }
}

impl Open {
    fn lock(&self) -> std::sync::MutexGuard<'_, OpenInner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn add(&self, activity: Arc<Activity>) -> OpenEntry {
        let mut inner = self.lock();
        let seq = inner.next;
        inner.next += 1;
        inner.by_age.insert(seq, activity);
        OpenEntry {
            open: self.clone(),
            seq,
        }
    }

    /// Closes the oldest connection that has not sent a complete request (silent, or still
    /// trickling its headers), or else the oldest kept-alive one with nothing in progress. A
    /// connection with a request in progress (a streamed reply included) is never chosen. Whether
    /// one was.
    fn close_oldest_idle(&self) -> bool {
        let mut inner = self.lock();
        // Nothing in progress: no request being served, and nothing of a reply left unwritten.
        let quiet = |a: &Activity| {
            a.busy.load(Ordering::Relaxed) == 0 && !a.unflushed.load(Ordering::Relaxed)
        };
        let never_asked = |a: &Activity| quiet(a) && a.served.load(Ordering::Relaxed) == 0;
        // A kept-alive connection that is not sending its next request either, quiet longest.
        let idle =
            |a: &Activity| quiet(a) && a.head_since_ms.load(Ordering::Relaxed) == NOT_STARTED;
        let victim = inner
            .by_age
            .iter()
            .find(|(_, a)| never_asked(a))
            .or_else(|| {
                inner
                    .by_age
                    .iter()
                    .filter(|(_, a)| idle(a))
                    .min_by_key(|(_, a)| a.last_read_ms.load(Ordering::Relaxed))
            })
            .map(|(seq, a)| (*seq, a.clone()));
        match victim {
            Some((seq, activity)) => {
                // Out of the running at once, so the next call picks another.
                inner.by_age.remove(&seq);
                activity.evict.notify_one();
                true
            }
            None => false,
        }
    }
}

/// A connection's socket, noting when bytes arrive, and giving hyper's own error answers (a
/// request it could not read: a byte not allowed in a header, conflicting `Content-Length`s,
/// headers too large) a JSON-RPC body like every other answer.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
    /// A replacement answer being written, and how much of it has been.
    replaced: Option<(Vec<u8>, usize)>,
}

impl Watched {
    /// Writes what is left of a replacement answer; `Ready(Ok)` once it is all out.
    fn drain_replaced(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while let Some((bytes, done)) = &mut self.replaced {
            if *done >= bytes.len() {
                self.replaced = None;
                break;
            }
            match Pin::new(&mut self.inner).poll_write(cx, &bytes[*done..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()))
                }
                Poll::Ready(Ok(n)) => *done += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }

    /// The JSON-RPC answer for a head hyper wrote itself (`buf` starts with it), when it is one.
    fn replacement_for(&self, buf: &[u8]) -> Option<Vec<u8>> {
        // hyper's own answers: an error status, no body (looked for in the head only).
        if !buf.starts_with(b"HTTP/1.") || !matches!(buf.get(9), Some(b'4' | b'5')) {
            return None;
        }
        let head_end = buf
            .windows(4)
            .take(16 * 1024)
            .position(|w| w == b"\r\n\r\n")?;
        let head = &buf[..head_end + 2];
        if !head.windows(21).any(|w| w == b"\r\ncontent-length: 0\r\n") {
            return None;
        }
        let a = &self.activity;
        let heads = a.heads.fetch_add(1, Ordering::Relaxed) + 1;
        if heads <= a.responses.load(Ordering::Relaxed) {
            return None; // one of the router's
        }
        let status = buf.get(9..12).and_then(|c| std::str::from_utf8(c).ok())?;
        let status: u16 = status.parse().ok()?;
        Some(error_answer(status))
    }
}

/// What hyper's own error statuses mean, as a complete HTTP/1.1 answer with a JSON-RPC error.
fn error_answer(status: u16) -> Vec<u8> {
    let (reason, message) = match status {
        400 => (
            "Bad Request",
            "the request could not be read as HTTP: a malformed request line or header (a byte \
             not allowed in a header, conflicting Content-Length headers)",
        ),
        408 => (
            "Request Timeout",
            "the request's headers did not arrive in time",
        ),
        414 => ("URI Too Long", "the request's path is too long"),
        431 => (
            "Request Header Fields Too Large",
            "the request's headers are too large to read (at most 64 KiB are accepted)",
        ),
        505 => (
            "HTTP Version Not Supported",
            "only HTTP/1.1 and HTTP/2 are served",
        ),
        _ => ("Error", "the request could not be read as HTTP"),
    };
    let body = mcp_tasks_protocol::jsonrpc::Message::error(
        None,
        mcp_tasks_protocol::jsonrpc::ErrorObject::invalid_request(message),
    )
    .to_json();
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            let a = &self.activity;
            let now = a.now_ms();
            a.last_read_ms.store(now, Ordering::Relaxed);
            // Bytes while nothing is in progress begin a request; its headers are timed from here.
            if a.busy.load(Ordering::Relaxed) == 0 {
                let _ = a.head_since_ms.compare_exchange(
                    NOT_STARTED,
                    now,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        if let Poll::Ready(Err(e)) = this.drain_replaced(cx) {
            return Poll::Ready(Err(e));
        }
        if this.replaced.is_some() {
            return Poll::Pending;
        }
        if let Some(answer) = this.replacement_for(buf) {
            // hyper's head and empty body are taken as written; ours goes out instead.
            this.replaced = Some((answer, 0));
            if let Poll::Ready(Err(e)) = this.drain_replaced(cx) {
                return Poll::Ready(Err(e));
            }
            return Poll::Ready(Ok(buf.len()));
        }
        this.activity.unflushed.store(true, Ordering::Relaxed);
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        match this.drain_replaced(cx) {
            Poll::Ready(Ok(())) => {
                let flushed = Pin::new(&mut this.inner).poll_flush(cx);
                if matches!(flushed, Poll::Ready(Ok(()))) {
                    this.activity.unflushed.store(false, Ordering::Relaxed);
                }
                flushed
            }
            other => other,
        }
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        match this.drain_replaced(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut this.inner).poll_shutdown(cx),
            other => other,
        }
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        if let Poll::Ready(Err(e)) = this.drain_replaced(cx) {
            return Poll::Ready(Err(e));
        }
        if this.replaced.is_some() {
            return Poll::Pending;
        }
        // A head is the first slice of what hyper writes.
        let first = bufs.iter().find(|b| !b.is_empty());
        if let Some(answer) = first.and_then(|b| this.replacement_for(b)) {
            this.replaced = Some((answer, 0));
            if let Poll::Ready(Err(e)) = this.drain_replaced(cx) {
                return Poll::Ready(Err(e));
            }
            return Poll::Ready(Ok(bufs.iter().map(|b| b.len()).sum()));
        }
        this.activity.unflushed.store(true, Ordering::Relaxed);
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The router as one connection's service: each request carries the client's address, and counts
/// as in progress until its reply's last byte has gone.
#[derive(Clone)]
struct PerConnection {
    app: axum::Router,
    addr: SocketAddr,
    activity: Arc<Activity>,
    winding_down: WindingDown,
}

impl tower_service::Service<http::Request<Incoming>> for PerConnection {
    type Response = http::Response<Tracked>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Incoming>) -> Self::Future {
        let mut req = req.map(Body::new);
        req.extensions_mut().insert(ConnectInfo(self.addr));
        let busy = Busy::new(self.activity.clone());
        let activity = self.activity.clone();
        let mut app = self.app.clone();
        let winding_down = self.winding_down.clone();
        // HTTP/2 has no `Connection` header: hyper's GOAWAY at shutdown ends those.
        let http1 = req.version() < http::Version::HTTP_2;
        Box::pin(async move {
            let mut resp = match tower_service::Service::call(&mut app, req).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            // Asked after the reply is made, so a reply that waited through the start of a drain
            // (a blocked tasks/result) ends its connection too. hyper closes the connection once
            // it has written a reply that says so.
            if http1 && winding_down() {
                resp.headers_mut().insert(
                    http::header::CONNECTION,
                    http::HeaderValue::from_static("close"),
                );
            }
            let bodiless = resp.body().size_hint().exact() == Some(0);
            if resp.status().as_u16() >= 400 && bodiless {
                activity.responses.fetch_add(1, Ordering::Relaxed);
            }
            Ok(resp.map(|body| Tracked { body, _busy: busy }))
        })
    }
}

/// One request in progress on a connection.
struct Busy(Arc<Activity>);

impl Busy {
    fn new(activity: Arc<Activity>) -> Busy {
        activity.busy.fetch_add(1, Ordering::Relaxed);
        activity.served.fetch_add(1, Ordering::Relaxed);
        activity.head_since_ms.store(NOT_STARTED, Ordering::Relaxed);
        Busy(activity)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        // The body is done, but hyper may still hold its end in its buffer.
        self.0.unflushed.store(true, Ordering::Relaxed);
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
        let now = self.0.now_ms();
        // The idle time counts from the end of the reply.
        self.0.last_read_ms.store(now, Ordering::Relaxed);
    }
}

/// A reply body that keeps its request counted as in progress until it is dropped (sent in full, or
/// the connection closed).
struct Tracked {
    body: Body,
    _busy: Busy,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
