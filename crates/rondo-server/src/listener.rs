//! Connections: accepting them, bounding them and closing them.
//!
//! This module owns the HTTP/1.1 connections between the listening socket
//! and the router, and every bound a public server puts on them: how many
//! connections are open in all and per client address (beyond either, a
//! short `503` with `Retry-After` and the connection closed, never an
//! accepted connection left waiting), how long a client may take to send
//! its request headers (slowloris), how long a connection may make no
//! progress at all, reading or writing (an idle keep-alive, a stalled
//! upload, a client that stopped reading), and how large request headers
//! may be. Each request carries its connection's [`ConnectionHandle`], so a
//! session the array stops (a client that stopped reading, a stream whose
//! data is gone) closes its connection at once: a response body that hyper
//! no longer polls (the socket is full) could not end it otherwise.
//! While a connection's requests are plain GETs (no body, none pipelined
//! behind), the listener reads each head itself and answers it through
//! `sink` (a stream's rounds written by the send loops; the connection
//! kept alive after each answer); its first other request hands the
//! connection to hyper, with the bytes read of it, for good.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::metrics::Metrics;

/// The bounds on connections. Defaults are for a public server (see
/// docs/assumptions.md for where each comes from).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ConnectionLimits {
    /// Open connections in all; 0: no limit.
    pub connections_max: usize,
    /// Open connections from one client address; 0: no limit.
    pub connections_per_client_max: usize,
    /// Time to send a request's headers, from the request's first byte (or
    /// from the connection's start).
    pub header_read_timeout: Duration,
    /// Time a connection may go without reading or writing a byte.
    pub idle_timeout: Duration,
    /// Largest request head (request line and headers), in bytes.
    pub header_bytes_max: usize,
    /// Each connection's kernel send buffer (`SO_SNDBUF`; the kernel
    /// doubles it); 0: the kernel's autotuning. Bounded, so that what a
    /// client that stops reading can absorb into socket buffers is small
    /// and the session sees the stall within a few rounds; autotuning grows
    /// it to megabytes, which hides a short title entirely.
    pub socket_send_buffer_bytes: usize,
}

/// Default bound on open connections: nginx's default `worker_connections`
/// (512) times the 8 workers of a small host.
pub const DEFAULT_CONNECTIONS_MAX: usize = 4096;
/// Default bound per client address: a household behind one NAT address
/// with a few players, each with a few connections, stays far below it.
pub const DEFAULT_CONNECTIONS_PER_CLIENT_MAX: usize = 64;
/// Default header timeout: Apache's `RequestReadTimeout header=20`;
/// nginx's `client_header_timeout` is 60 s.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(20);
/// Default idle timeout: nginx's `keepalive_timeout` is 75 s, its
/// `send_timeout` and `client_body_timeout` 60 s.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default send buffer: 128 KiB (256 KiB as the kernel counts it), about
/// 4.5 rounds of a 450 kbit/s stream with 1 s rounds; at 100 ms RTT it
/// still carries 20 Mbit/s per connection.
pub const DEFAULT_SOCKET_SEND_BUFFER_BYTES: usize = 128 * 1024;
/// Default largest request head: nginx's `large_client_header_buffers`
/// (4 × 8 KiB) rounded up.
pub const DEFAULT_HEADER_BYTES_MAX: usize = 64 * 1024;

impl Default for ConnectionLimits {
    fn default() -> ConnectionLimits {
        ConnectionLimits {
            connections_max: DEFAULT_CONNECTIONS_MAX,
            connections_per_client_max: DEFAULT_CONNECTIONS_PER_CLIENT_MAX,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            header_bytes_max: DEFAULT_HEADER_BYTES_MAX,
            socket_send_buffer_bytes: DEFAULT_SOCKET_SEND_BUFFER_BYTES,
        }
    }
}

/// Why a connection was closed by the server (a label of
/// `rondo_connections_closed_total`).
/// Its discriminant indexes `Metrics::connections_closed`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(usize)]
pub enum CloseReason {
    /// The request headers did not arrive within the header timeout.
    HeaderTimeout,
    /// Nothing read or written for the idle timeout.
    Idle,
    /// Its stream was stopped (the client stopped reading, or its data is
    /// gone): closed by its session.
    StreamStopped,
}

impl CloseReason {
    pub const ALL: [CloseReason; 3] = [
        CloseReason::HeaderTimeout,
        CloseReason::Idle,
        CloseReason::StreamStopped,
    ];

    pub fn label(self) -> &'static str {
        match self {
            CloseReason::HeaderTimeout => "header_timeout",
            CloseReason::Idle => "idle",
            CloseReason::StreamStopped => "stream_stopped",
        }
    }
}

/// A connection, as the requests on it see it: lets a session close it.
#[derive(Clone, Debug)]
pub struct ConnectionHandle {
    close: CancellationToken,
}

impl ConnectionHandle {
    /// Closes the connection now, whatever it is doing.
    pub fn close(&self) {
        self.close.cancel();
    }

    /// Resolves when the connection is to close.
    pub(crate) fn cancelled(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.close.cancelled()
    }
}

/// Open connections, in all and per client address. Taken on accept only,
/// never on the data path.
#[derive(Default)]
struct Open {
    total: usize,
    per_client: BTreeMap<IpAddr, usize>,
}

/// A place among the open connections, given back on drop.
struct Slot {
    open: Arc<Mutex<Open>>,
    client: IpAddr,
    metrics: Arc<Metrics>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.open.lock().expect("connections lock");
        open.total -= 1;
        if let Some(n) = open.per_client.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                open.per_client.remove(&self.client);
            }
        }
        self.metrics.connections_open.fetch_sub(1, Relaxed);
    }
}

/// Which bound an accepted connection exceeds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    Total,
    PerClient,
}

impl Refusal {
    pub fn label(self) -> &'static str {
        match self {
            Refusal::Total => "total",
            Refusal::PerClient => "per_client",
        }
    }
}

fn take_slot(
    open: &Arc<Mutex<Open>>,
    limits: &ConnectionLimits,
    client: IpAddr,
    metrics: &Arc<Metrics>,
) -> Result<Slot, Refusal> {
    let mut guard = open.lock().expect("connections lock");
    if limits.connections_max > 0 && guard.total >= limits.connections_max {
        return Err(Refusal::Total);
    }
    let from_client = guard.per_client.get(&client).copied().unwrap_or(0);
    if limits.connections_per_client_max > 0 && from_client >= limits.connections_per_client_max {
        return Err(Refusal::PerClient);
    }
    guard.total += 1;
    *guard.per_client.entry(client).or_insert(0) += 1;
    metrics.connections_open.fetch_add(1, Relaxed);
    Ok(Slot {
        open: Arc::clone(open),
        client,
        metrics: Arc::clone(metrics),
    })
}

/// Milliseconds since `epoch`: the coarse clock of connection activity.
fn millis_since(epoch: Instant) -> u64 {
    epoch.elapsed().as_millis() as u64
}

/// A socket that records when it last moved a byte, and gives the bytes
/// of a request the listener already read (`first`) before its own.
struct Tracked {
    inner: TcpStream,
    epoch: Instant,
    last_activity_ms: Arc<AtomicU64>,
    first: Option<bytes::Bytes>,
}

impl Tracked {
    fn touch(&self) {
        self.last_activity_ms
            .store(millis_since(self.epoch), Relaxed);
    }
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Some(mut first) = self.first.take() {
            let n = first.len().min(buf.remaining());
            buf.put_slice(&first.split_to(n));
            if !first.is_empty() {
                self.first = Some(first);
            }
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(poll, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.touch();
        }
        poll
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(poll, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        poll
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(poll, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The answer to a connection beyond a bound: a JSON 503 that says which
/// bound and when to try again, then the connection closes.
fn refusal_response(refusal: Refusal, limits: &ConnectionLimits, retry_after_s: u64) -> Vec<u8> {
    let detail = match refusal {
        Refusal::Total => format!(
            "the server holds its maximum of {} connections",
            limits.connections_max
        ),
        Refusal::PerClient => format!(
            "your address holds the maximum of {} connections per client",
            limits.connections_per_client_max
        ),
    };
    let body = serde_json::json!({
        "error": format!("too many connections: {detail}; try again later"),
        "reason": format!("connections_{}", refusal.label()),
        "retry_after_seconds": retry_after_s,
    })
    .to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: {retry_after_s}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Refusals being answered at once: beyond this many, a refused connection
/// is closed without an answer (answering must not itself be unbounded).
const REFUSALS_IN_FLIGHT_MAX: u64 = 256;
/// Time a refused connection gets to send its request and take the 503
/// (a busy server's refusal task may start late; cut short, the close
/// would reset the connection and lose the answer).
const REFUSAL_TIME: Duration = Duration::from_secs(5);

/// Answers a refused connection: reads what the client sent (closing with
/// unread data would reset the connection and lose the answer), writes the
/// 503 and closes, all within [`REFUSAL_TIME`].
async fn refuse(mut socket: TcpStream, answer: Vec<u8>) {
    use tokio::io::AsyncReadExt;
    let _ = tokio::time::timeout(REFUSAL_TIME, async {
        let mut scratch = [0u8; 4096];
        // Whatever has arrived of the request, without waiting for all of it.
        let _ = tokio::time::timeout(Duration::from_millis(200), socket.read(&mut scratch)).await;
        socket.write_all(&answer).await?;
        socket.shutdown().await?;
        // Drain until the client closes, so the answer is not reset away.
        while socket.read(&mut scratch).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}

/// Accept queue of the listening socket: tokio's default (1024) overflows
/// when a thousand clients connect at once, and an overflowed SYN waits a
/// second for its retransmission; the kernel caps it at `somaxconn`
/// (4096 by default since Linux 5.4).
const LISTEN_BACKLOG: u32 = 4096;

/// Binds the listening socket (`SO_REUSEADDR`, a deep accept queue).
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Serves `router` on `listener` under `limits` until `stop` resolves;
/// then stops accepting, asks every connection to finish its response and
/// returns when all are closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    retry_after_s: u64,
    metrics: Arc<Metrics>,
    stop: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let open = Arc::new(Mutex::new(Open::default()));
    let refusing = Arc::new(AtomicU64::new(0));
    // Every connection holds a clone; when all are gone, shutdown is done.
    let (all_closed_tx, mut all_closed_rx) = tokio::sync::mpsc::channel::<()>(1);
    let shutdown = CancellationToken::new();
    tokio::pin!(stop);
    loop {
        let (socket, peer) = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors or memory: wait a moment rather
                    // than spin (the bound on connections should prevent it).
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let slot = match take_slot(&open, &limits, peer.ip(), &metrics) {
            Ok(slot) => slot,
            Err(refusal) => {
                metrics.count_connection_refused(refusal);
                if refusing.load(Relaxed) < REFUSALS_IN_FLIGHT_MAX {
                    refusing.fetch_add(1, Relaxed);
                    let refusing = Arc::clone(&refusing);
                    let answer = refusal_response(refusal, &limits, retry_after_s);
                    tokio::spawn(async move {
                        refuse(socket, answer).await;
                        refusing.fetch_sub(1, Relaxed);
                    });
                }
                continue;
            }
        };
        let _ = socket.set_nodelay(true);
        if limits.socket_send_buffer_bytes > 0 {
            set_send_buffer(&socket, limits.socket_send_buffer_bytes);
        }
        tokio::spawn(connection(
            socket,
            peer,
            slot,
            router.clone(),
            limits.clone(),
            Arc::clone(&metrics),
            shutdown.child_token(),
            all_closed_tx.clone(),
        ));
    }
    drop(listener);
    shutdown.cancel();
    drop(all_closed_tx);
    // Resolves when the last connection task drops its sender.
    let _ = all_closed_rx.recv().await;
    Ok(())
}

/// Serves one connection until it ends, the server shuts down, a bound is
/// exceeded or a session closes it.
#[allow(clippy::too_many_arguments)]
async fn connection(
    socket: TcpStream,
    peer: SocketAddr,
    _slot: Slot,
    router: Router,
    limits: ConnectionLimits,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    _all_closed: tokio::sync::mpsc::Sender<()>,
) {
    let epoch = Instant::now();
    let last_activity_ms = Arc::new(AtomicU64::new(0));
    let fd = std::os::fd::AsRawFd::as_raw_fd(&socket);
    let handle = ConnectionHandle {
        close: shutdown.child_token(),
    };
    // Each request's head is read here while the connection's requests are
    // plain GETs: rondo answers them itself (`sink`; a stream's rounds by
    // the send loops) and keeps the connection alive after each. The first
    // other request (a body, HEAD, a pipelined one) hands the connection,
    // with the bytes read so far, to hyper for good.
    let mut socket = socket;
    let mut read = Vec::new();
    let (socket, first, header_started) = loop {
        match next_request(socket, read, &limits, &shutdown).await {
            Next::Ours {
                socket: s,
                request,
                keep_alive,
            } => {
                let mut request = *request;
                request.extensions_mut().insert(ConnectInfo(peer));
                request.extensions_mut().insert(handle.clone());
                let answered = crate::sink::answer(
                    s,
                    request,
                    keep_alive,
                    router.clone(),
                    handle.clone(),
                    shutdown.clone(),
                    limits.idle_timeout,
                )
                .await;
                match answered {
                    crate::sink::Answered::KeepAlive(s, leftover) => {
                        socket = s;
                        read = leftover;
                    }
                    crate::sink::Answered::Closed(reason) => {
                        if let Some(reason) = reason {
                            metrics.count_connection_closed(reason);
                            tracing::debug!(peer = %peer, reason = reason.label(), "connection closed by the server");
                        }
                        return;
                    }
                }
            }
            Next::Other {
                socket,
                read,
                header_started,
            } => break (socket, read, header_started),
            Next::TimedOut(socket) => {
                reset_on_close(fd);
                metrics.count_connection_closed(CloseReason::HeaderTimeout);
                drop(socket);
                return;
            }
            Next::Gone => return,
        }
    };
    // Boxed: hyper's connection state is large, and only connections handed
    // to hyper need it (a stream's connection holds its task's state for
    // the stream's life).
    Box::pin(serve_with_hyper(
        HyperConnection {
            socket,
            first,
            header_started,
            peer,
            epoch,
            last_activity_ms,
            fd,
        },
        router,
        limits,
        metrics,
        shutdown,
        handle,
    ))
    .await;
    // The connection (a local) closes its socket before the slot (a
    // parameter) is given back.
}

/// A connection handed to hyper: its socket, the bytes read of it so far,
/// and what its timeouts count from.
struct HyperConnection {
    socket: TcpStream,
    first: Vec<u8>,
    header_started: Instant,
    peer: SocketAddr,
    epoch: Instant,
    last_activity_ms: Arc<AtomicU64>,
    fd: std::os::fd::RawFd,
}

/// Serves a connection with hyper until it ends, the server shuts down, a
/// bound is exceeded or a session closes it.
async fn serve_with_hyper(
    connection: HyperConnection,
    router: Router,
    limits: ConnectionLimits,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    handle: ConnectionHandle,
) {
    let HyperConnection { socket, first, .. } = connection;
    let (peer, epoch, fd) = (connection.peer, connection.epoch, connection.fd);
    let last_activity_ms = connection.last_activity_ms;
    let header_started = connection.header_started;
    last_activity_ms.store(millis_since(epoch), Relaxed);
    let io = TokioIo::new(Tracked {
        inner: socket,
        epoch,
        last_activity_ms: Arc::clone(&last_activity_ms),
        first: (!first.is_empty()).then(|| bytes::Bytes::from(first)),
    });
    // `handle` is a child of the server's shutdown token: each wake of this
    // task then polls only its own token. Polling the one token every
    // connection shares took its lock on every wake of every stream (about
    // 1% of the server's CPU at 1000 streams, docs/serving-cost.md).
    let request_handle = handle.clone();
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        request.extensions_mut().insert(request_handle.clone());
        router.clone().oneshot(request.map(axum::body::Body::new))
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    // The request's header time runs from its first byte, read here (or
    // from the connection's start); a quarter of it is left at least, for
    // the requests after it.
    let header_read_timeout = limits
        .header_read_timeout
        .saturating_sub(header_started.elapsed())
        .max(limits.header_read_timeout / 4);
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .max_buf_size(limits.header_bytes_max.max(8192));
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let idle_ms = limits.idle_timeout.as_millis() as u64;
    // Checked a few times per idle timeout: a connection closes within
    // 1.25 idle timeouts of its last byte.
    let mut idle_check =
        tokio::time::interval((limits.idle_timeout / 4).max(Duration::from_millis(10)));
    idle_check.tick().await;
    let mut shutting_down = false;
    let closed = loop {
        tokio::select! {
            result = conn.as_mut() => {
                break match result {
                    Err(e) if e.is_timeout() => Some(CloseReason::HeaderTimeout),
                    _ => None,
                };
            }
            _ = handle.close.cancelled(), if !shutting_down => {
                if !shutdown.is_cancelled() {
                    break Some(CloseReason::StreamStopped);
                }
                // The server is shutting down: the connection ends when its
                // response does (the round driver ends every stream).
                shutting_down = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = idle_check.tick() => {
                let idle_for_ms = millis_since(epoch).saturating_sub(last_activity_ms.load(Relaxed));
                if idle_for_ms >= idle_ms {
                    break Some(CloseReason::Idle);
                }
            }
        }
    };
    if let Some(reason) = closed {
        // Closed by the server: reset rather than linger, so the kernel
        // drops what a client that does not read left in the socket's
        // buffers at once, and the client learns it at once.
        reset_on_close(fd);
        metrics.count_connection_closed(reason);
        tracing::debug!(peer = %peer, reason = reason.label(), "connection closed by the server");
    }
}

/// What a connection's next request is, as far as the listener needs to know.
enum Next {
    /// `GET` with no body and nothing after its head: answered by rondo
    /// (`sink`); `keep_alive`: the client keeps the connection.
    Ours {
        socket: TcpStream,
        request: Box<axum::http::Request<axum::body::Body>>,
        keep_alive: bool,
    },
    /// Anything else, with the bytes read of it so far and when its first
    /// byte came (or the connection's start): hyper's.
    Other {
        socket: TcpStream,
        read: Vec<u8>,
        header_started: Instant,
    },
    /// The head did not come within the header timeout (which runs, as
    /// hyper's does, from the connection's start or the last answer's end).
    TimedOut(TcpStream),
    /// The client closed, or the server is shutting down.
    Gone,
}

/// What a request line must start with for rondo to answer it itself.
const OWN_REQUEST_PREFIX: &[u8] = b"GET ";
/// Headers parsed in a request read here (a player sends about ten).
const REQUEST_HEADERS_MAX: usize = 64;

/// Reads a request's head only as far as needed to tell whether rondo
/// answers it itself. `read`: bytes of it already read. The header
/// timeout runs from now: the connection's start, or the end of the
/// answer before (a kept-alive connection that sends nothing closes then).
async fn next_request(
    mut socket: TcpStream,
    mut read: Vec<u8>,
    limits: &ConnectionLimits,
    shutdown: &CancellationToken,
) -> Next {
    use tokio::io::AsyncReadExt;
    let header_started = Instant::now();
    let deadline = tokio::time::Instant::now() + limits.header_read_timeout;
    loop {
        let known = read.len().min(OWN_REQUEST_PREFIX.len());
        if read[..known] != OWN_REQUEST_PREFIX[..known] {
            return Next::Other {
                socket,
                read,
                header_started,
            };
        }
        if known == OWN_REQUEST_PREFIX.len() {
            match parse_request(&read) {
                Parsed::Ours {
                    request,
                    keep_alive,
                } => {
                    return Next::Ours {
                        socket,
                        request,
                        keep_alive,
                    };
                }
                // hyper answers an oversized or malformed head (431, 400).
                Parsed::Other => {
                    return Next::Other {
                        socket,
                        read,
                        header_started,
                    };
                }
                Parsed::Partial if read.len() >= limits.header_bytes_max => {
                    return Next::Other {
                        socket,
                        read,
                        header_started,
                    };
                }
                Parsed::Partial => {}
            }
        }
        tokio::select! {
            n = socket.read_buf(&mut read) => match n {
                Ok(0) | Err(_) => return Next::Gone,
                Ok(_) => {}
            },
            _ = tokio::time::sleep_until(deadline) => return Next::TimedOut(socket),
            _ = shutdown.cancelled() => return Next::Gone,
        }
    }
}

enum Parsed {
    Ours {
        request: Box<axum::http::Request<axum::body::Body>>,
        keep_alive: bool,
    },
    Partial,
    Other,
}

/// A complete `GET` head with no body and nothing after it, as a request
/// for the router; anything else is hyper's to answer (a pipelined
/// request, a body, an `Expect`, a malformed head: hyper's errors say what
/// is wrong).
fn parse_request(read: &[u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; REQUEST_HEADERS_MAX];
    let mut parsed = httparse::Request::new(&mut headers);
    let head_bytes = match parsed.parse(read) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    // Origin-form targets only (`/path?query`); hyper takes the others.
    let origin_form = parsed.path.is_some_and(|p| p.starts_with('/'));
    if head_bytes != read.len() || parsed.method != Some("GET") || !origin_form {
        return Parsed::Other;
    }
    let version = match parsed.version {
        Some(0) => axum::http::Version::HTTP_10,
        Some(1) => axum::http::Version::HTTP_11,
        _ => return Parsed::Other,
    };
    // HTTP/1.1 keeps the connection unless told not to; 1.0 only if told to.
    let mut keep_alive = version == axum::http::Version::HTTP_11;
    let mut builder = axum::http::Request::builder()
        .method(axum::http::Method::GET)
        .uri(parsed.path.unwrap_or("/"))
        .version(version);
    for h in parsed.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        let has_body = (name == "content-length" && h.value.trim_ascii() != b"0")
            || name == "transfer-encoding"
            || name == "upgrade"
            || name == "expect";
        if has_body {
            return Parsed::Other;
        }
        if name == "connection" {
            let value = String::from_utf8_lossy(h.value).to_ascii_lowercase();
            if value.split(',').any(|t| t.trim() == "close") {
                keep_alive = false;
            } else if value.split(',').any(|t| t.trim() == "keep-alive") {
                keep_alive = true;
            }
        }
        builder = builder.header(h.name, h.value);
    }
    match builder.body(axum::body::Body::empty()) {
        Ok(request) => Parsed::Ours {
            request: Box::new(request),
            keep_alive,
        },
        Err(_) => Parsed::Other,
    }
}

/// Sets `SO_SNDBUF` (which also turns the kernel's autotuning off).
pub(crate) fn set_send_buffer(socket: &TcpStream, bytes: usize) {
    let value = bytes.min(i32::MAX as usize) as libc::c_int;
    // SAFETY: the socket is open; `value` is a valid int option of the size given.
    unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(socket),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// Sets `SO_LINGER` to zero on `fd` (still open: the connection that owns it
/// is dropped after this), so that closing it sends a reset.
pub(crate) fn reset_on_close(fd: std::os::fd::RawFd) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: fd is the open socket of the connection being closed, and
    // `linger` is a valid SO_LINGER value of the size given.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(head: &str) -> Parsed {
        parse_request(head.as_bytes())
    }

    fn keep_alive(head: &str) -> Option<bool> {
        match parse(head) {
            Parsed::Ours { keep_alive, .. } => Some(keep_alive),
            _ => None,
        }
    }

    #[test]
    fn a_plain_get_is_answered_here_with_its_connection_rule() {
        let head = "GET /stream/3.mp4?t=5 HTTP/1.1\r\nHost: h\r\nRange: bytes=0-9\r\n\r\n";
        let Parsed::Ours {
            request,
            keep_alive: kept_alive,
        } = parse(head)
        else {
            panic!("a stream request");
        };
        assert!(kept_alive);
        assert_eq!(request.uri().path(), "/stream/3.mp4");
        assert_eq!(request.uri().query(), Some("t=5"));
        assert_eq!(request.headers()["range"], "bytes=0-9");
        let close = "GET /stream/3.mp4 HTTP/1.1\r\nConnection: Close\r\n\r\n";
        assert_eq!(keep_alive(close), Some(false));
        assert_eq!(
            keep_alive("GET /stream/3.mp4 HTTP/1.0\r\n\r\n"),
            Some(false)
        );
        let kept = "GET /stream/3.mp4 HTTP/1.0\r\nconnection: keep-alive\r\n\r\n";
        assert_eq!(keep_alive(kept), Some(true));
    }

    #[test]
    fn anything_else_is_hypers_and_a_partial_head_waits() {
        assert!(matches!(
            parse("GET /stream/3.mp4 HTTP/1.1\r\nHost"),
            Parsed::Partial
        ));
        assert_eq!(keep_alive("GET /api/titles HTTP/1.1\r\n\r\n"), Some(true));
        for other in [
            // A body, or a way to send one.
            "GET /stream/3.mp4 HTTP/1.1\r\nContent-Length: 5\r\n\r\n",
            "GET /stream/3.mp4 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET /stream/3.mp4 HTTP/1.1\r\nUpgrade: websocket\r\n\r\n",
            "GET /stream/3.mp4 HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            // Another request after the head (pipelined): hyper keeps the order.
            "GET /stream/3.mp4 HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n",
            // Not a stream, or not HTTP/1.
            "POST /stream/3.mp4 HTTP/1.1\r\n\r\n",
            "GET /stream/3.mp4 HTTP/2.0\r\n\r\n",
            "GET /stream/\x01 HTTP/1.1\r\n\r\n",
            "GET /stream/3.mp4 HTTP/1.1\r\nbad header\r\n\r\n",
            // Not origin-form.
            "GET mp4 HTTP/1.1\r\nHost: h\r\n\r\n",
            "GET http://h/stream/3.mp4 HTTP/1.1\r\n\r\n",
        ] {
            assert!(matches!(parse(other), Parsed::Other), "{other:?}");
        }
        let empty_body = "GET /stream/3.mp4 HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(keep_alive(empty_body), Some(true));
    }

    /// `RONDO_FUZZ_SECONDS` sets the budget (rondo_testkit::fuzz).
    #[test]
    fn fuzz_request_heads() {
        let corpus: Vec<Vec<u8>> = [
            "GET /stream/3.mp4 HTTP/1.1\r\nHost: h\r\nRange: bytes=0-9\r\n\r\n",
            "GET /stream/3.mp4?t=5 HTTP/1.0\r\nConnection: keep-alive, Upgrade\r\n\r\n",
            "GET /stream/3.mp4 HTTP/1.1\r\nContent-Length: 0\r\nX: \u{ff}\r\n\r\n",
            "GET /stream/",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        let regressions =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz-regressions/stream-head");
        rondo_testkit::fuzz::fuzz(
            "stream-head",
            "cargo test -p rondo-server --lib fuzz_request_heads",
            corpus,
            &regressions,
            1024,
            |input| {
                if let Parsed::Ours { request, .. } = parse_request(input) {
                    assert_eq!(request.method(), axum::http::Method::GET);
                    assert!(request.uri().path().starts_with('/'), "{request:?}");
                }
            },
        );
    }
}

#[cfg(test)]
mod size_tests {
    use super::*;

    /// A connection's task state, which a stream's connection holds for the
    /// stream's life, stays small: buffers live on the stack between awaits
    /// and hyper's state is boxed for the connections handed to it
    /// (measured: 7176 bytes before, 2336 after; docs/serving-cost.md).
    #[tokio::test]
    async fn a_connections_task_state_is_small() {
        const STATE_BYTES_MAX: usize = 3072;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (socket, peer) = listener.accept().await.unwrap();
        let metrics = Arc::new(Metrics::new(1));
        let open = Arc::new(Mutex::new(Open::default()));
        let limits = ConnectionLimits::default();
        let slot = take_slot(&open, &limits, peer.ip(), &metrics).unwrap();
        let (all_closed, _) = tokio::sync::mpsc::channel::<()>(1);
        let task = connection(
            socket,
            peer,
            slot,
            Router::new(),
            limits,
            metrics,
            CancellationToken::new(),
            all_closed,
        );
        let state_bytes = std::mem::size_of_val(&task);
        // Printed for docs/serving-cost.md (`-- --nocapture`).
        eprintln!("a connection's task state: {state_bytes} bytes");
        assert!(
            state_bytes <= STATE_BYTES_MAX,
            "a connection's task holds {state_bytes} bytes, more than {STATE_BYTES_MAX}"
        );
    }
}
