//! Direct sending: a stream's rounds written into its socket by a send loop,
//! not by a task per stream.
//!
//! This module owns the answers the listener gives itself, to a
//! connection's plain GETs (what players and `rondo load` send: the API and
//! the streams): rondo writes the head, and another answer's body as it
//! comes. A stream's released rounds are written by one of a few send
//! loops (one per HTTP worker thread), each
//! woken once per driver step with that step's releases for its streams
//! ([`Outbox`]). A stream's task (the connection's) sleeps while its socket
//! takes what it is given: it wakes only when the socket is full (to wait
//! until it drains), when the client closes, or when the stream ends. So a
//! stream-round costs a write, not a task wake, a channel message and a
//! poll of hyper's connection, which it did when hyper sent every stream
//! (docs/serving-cost.md). A request with a body, a HEAD or a pipelined
//! request hands its connection to hyper for good, and a stream asked for
//! there is a [`crate::session::SessionBody`] hyper polls; both paths share
//! [`crate::session::SessionData`], which turns pieces into a round's
//! client bytes. The connection stays open after each answer unless the
//! client closes it.

use std::collections::VecDeque;
use std::io::{ErrorKind, IoSlice};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::http::{header, response};
use bytes::Bytes;
use rondo_model::layout::Replica;
use rondo_model::units::{PlaybackRound, StreamId};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::listener::{CloseReason, ConnectionHandle};
use crate::metrics::Metrics;
use crate::session::SessionData;

/// Chunks given to one `writev`: a round is one chunk (a primary read's
/// buffer) or a few, so a socket with room takes a round in one call.
const IOVECS_MAX: usize = 16;
/// The nice value of the send loops' threads where the process may lower
/// it: ahead of the HTTP workers (nice 0), so that the rounds of admitted
/// streams go out before new requests are served when both want the CPU,
/// and behind the deadline threads (real-time, or nice −5 without it).
/// Assumption: −3, a weight about twice the default's. Measured: with the
/// loops as tasks among the HTTP workers' connection tasks, 11,250 streams
/// arriving at 1125 a second delayed running streams' rounds by up to a
/// second and their clients stalled (docs/serving-cost.md, "Send loops
/// ahead of new requests").
pub const SEND_THREAD_NICE: i32 = -3;
/// The largest send buffer a stream's first send sizes its socket to
/// ([`Sink::fit_send_buffer`]). Assumption: 8 MiB, eight times the default
/// start burst's byte bound; the kernel caps it at `net.core.wmem_max`.
const SEND_BUFFER_MAX_BYTES: usize = 8 << 20;
/// Bytes read at a time of what a client sends while its answer goes out.
const SCRATCH_BYTES: usize = 4096;
/// How long a finished connection waits for the client to close after the
/// last byte (reading what it may still send, so the close does not reset
/// the end of the answer away).
const LINGER: Duration = Duration::from_secs(2);

/// Marks a request the listener answers itself: a stream admitted for it
/// is sent through this sink.
#[derive(Clone)]
pub struct FastPath(pub Arc<Sink>);

/// What a chunk of the queue is, for counting.
#[derive(Copy, Clone, PartialEq, Eq)]
enum ChunkKind {
    /// The response head: not the stream's bytes.
    Head,
    /// Bytes sent before the first round (an MP4 time seek's header).
    Prefix,
    /// A released round's client bytes (maybe none).
    Round,
}

struct Chunk {
    bytes: Bytes,
    kind: ChunkKind,
}

/// How a sink's stream ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SinkEnd {
    /// Every byte is in the socket.
    Finished,
    /// The server stopped the stream.
    Aborted,
    /// The socket failed (the client went away) or a round had no data.
    Failed(String),
}

#[derive(Default)]
struct SinkState {
    /// Until the connection's task ends the stream.
    socket: Option<Arc<TcpStream>>,
    session: Option<SessionData>,
    /// Admission put a stream here.
    installed: bool,
    queue: VecDeque<Chunk>,
    /// Bytes of the queue's first chunk already written.
    front_written: usize,
    /// The head is queued: chunks may go to the socket.
    ready: bool,
    /// The socket was full: the connection's task waits until it drains.
    blocked: bool,
    end: Option<SinkEnd>,
}

/// One stream's end of its connection: the bytes released and not yet
/// written, and the socket they go to. Shared by the round driver (which
/// holds it in the stream's state), a send loop and the connection's task.
pub struct Sink {
    state: Mutex<SinkState>,
    /// Wakes the connection's task: the socket is full, or the stream ended.
    wake: Notify,
}

impl Sink {
    pub fn new(socket: Arc<TcpStream>) -> Arc<Sink> {
        Arc::new(Sink {
            state: Mutex::new(SinkState {
                socket: Some(socket),
                ..SinkState::default()
            }),
            wake: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, SinkState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admission gives the sink its stream (on the round driver, before
    /// any of its rounds is released).
    pub(crate) fn install(&self, mut session: SessionData) {
        let mut st = self.lock();
        if let Some(prefix) = session.take_prefix() {
            st.queue.push_back(Chunk {
                bytes: prefix,
                kind: ChunkKind::Prefix,
            });
        }
        st.session = Some(session);
        st.installed = true;
    }

    /// Gives the socket a send buffer of `bytes` when that is more than
    /// the listener's `floor_bytes` (`--socket-send-buffer-bytes`; 0, the
    /// kernel's autotuning, is left alone). A start burst is several
    /// rounds at once: with room for all of it the kernel takes it in one
    /// write and sends it as the client's window opens, where a smaller
    /// buffer leaves the rest to this connection's task, woken when the
    /// client has read (on the HTTP workers, behind new requests on a busy
    /// host). Measured: with the 128 KiB default, 114 of the 115 stalls of
    /// 13,750 kept-lead streams on two cores were in the burst of the
    /// largest title, the only one whose burst did not fit
    /// (docs/capacity.md). Used for bursts whose lead the client keeps,
    /// which it may hold for the whole stream anyway; a client that stops
    /// reading can absorb that much more before the stall rule sees it.
    pub(crate) fn fit_send_buffer(&self, bytes: usize, floor_bytes: usize) {
        if floor_bytes == 0 || bytes <= floor_bytes {
            return;
        }
        if let Some(socket) = self.lock().socket.as_ref() {
            crate::listener::set_send_buffer(socket, bytes.min(SEND_BUFFER_MAX_BYTES));
        }
    }

    fn installed(&self) -> bool {
        self.lock().installed
    }

    /// The server stopped the stream.
    pub fn abort(&self) {
        let mut st = self.lock();
        if st.end.is_none() {
            st.end = Some(SinkEnd::Aborted);
        }
        drop(st);
        self.wake.notify_one();
    }

    /// A released round (from a send loop): its bytes join the queue and
    /// go to the socket as far as it takes them.
    fn release(&self, playback_round: PlaybackRound, replica: Replica) {
        let mut st = self.lock();
        if st.end.is_some() {
            return;
        }
        // Ended by its connection (the client left): nothing to send.
        let Some(session) = st.session.as_mut() else {
            return;
        };
        match session.release_round(playback_round, replica) {
            Some(bytes) => st.queue.push_back(Chunk {
                bytes,
                kind: ChunkKind::Round,
            }),
            None => {
                st.end = Some(SinkEnd::Failed("a released round has no data".into()));
                drop(st);
                self.wake.notify_one();
                return;
            }
        }
        if self.flush(&mut st) {
            drop(st);
            self.wake.notify_one();
        }
    }

    /// The response head goes first; from now on the queue is written.
    fn start(&self, head: Bytes) {
        let mut st = self.lock();
        st.queue.push_front(Chunk {
            bytes: head,
            kind: ChunkKind::Head,
        });
        st.ready = true;
        if self.flush(&mut st) {
            drop(st);
            self.wake.notify_one();
        }
    }

    /// The full socket has room again.
    fn on_writable(&self) {
        let mut st = self.lock();
        st.blocked = false;
        if self.flush(&mut st) {
            drop(st);
            self.wake.notify_one();
        }
    }

    /// Whether the connection's task must wait for room, and how the
    /// stream ended.
    fn status(&self) -> (bool, Option<SinkEnd>) {
        let st = self.lock();
        (st.blocked, st.end.clone())
    }

    /// Ends the stream here: its session goes (its guard releases the
    /// reservations, or counts the stream finished), and the sink lets go
    /// of the socket, which closes when the connection's task drops its own.
    fn detach(&self) {
        let mut st = self.lock();
        st.socket = None;
        st.queue.clear();
        let session = st.session.take();
        drop(st);
        drop(session);
    }

    /// Writes the queue into the socket until it is empty or the socket is
    /// full. Returns whether the connection's task must wake (the socket
    /// is full, or the stream ended).
    fn flush(&self, st: &mut SinkState) -> bool {
        if !st.ready || st.blocked || st.end.is_some() {
            return false;
        }
        let Some(socket) = st.socket.clone() else {
            return false;
        };
        loop {
            // Empty rounds at the front are taken at once.
            while st
                .queue
                .front()
                .is_some_and(|c| c.bytes.len() == st.front_written)
            {
                let chunk = st.queue.pop_front().expect("a front chunk");
                st.front_written = 0;
                taken(st, &chunk);
            }
            if st.queue.is_empty() {
                if let Some(session) = st.session.as_ref().filter(|s| s.all_released()) {
                    session.mark_finished();
                    st.end = Some(SinkEnd::Finished);
                    return true;
                }
                return false;
            }
            let written = {
                let front = st.queue.front().expect("not empty");
                let rest = &front.bytes[st.front_written..];
                if let Some((file, offset)) = crate::zerocopy::file_range(rest) {
                    // A read many streams share: the socket takes its pages.
                    let fd = std::os::fd::AsRawFd::as_raw_fd(&*socket);
                    let sent = socket.try_io(tokio::io::Interest::WRITABLE, || {
                        crate::zerocopy::send_file(fd, file, offset, rest.len())
                    });
                    if let (Ok(n), Some(session)) = (&sent, st.session.as_ref()) {
                        session.count_zero_copy(*n as u64);
                    }
                    sent
                } else {
                    // Copied: this chunk and those after it up to the next
                    // that lies in the send arena.
                    let mut slices = [IoSlice::new(&[]); IOVECS_MAX];
                    slices[0] = IoSlice::new(rest);
                    let mut n = 1;
                    for chunk in st.queue.iter().skip(1).take(IOVECS_MAX - 1) {
                        if crate::zerocopy::file_range(&chunk.bytes).is_some() {
                            break;
                        }
                        slices[n] = IoSlice::new(&chunk.bytes);
                        n += 1;
                    }
                    socket.try_write_vectored(&slices[..n])
                }
            };
            match written {
                Ok(0) => {
                    st.end = Some(SinkEnd::Failed("the socket took no bytes".into()));
                    return true;
                }
                Ok(mut n) => {
                    while n > 0 {
                        let front = st.queue.front().expect("written bytes were queued");
                        let left = front.bytes.len() - st.front_written;
                        if n < left {
                            st.front_written += n;
                            break;
                        }
                        n -= left;
                        let chunk = st.queue.pop_front().expect("a front chunk");
                        st.front_written = 0;
                        taken(st, &chunk);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    st.blocked = true;
                    if let Some(session) = st.session.as_ref() {
                        session.count_socket_full();
                    }
                    return true;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    st.end = Some(SinkEnd::Failed(e.to_string()));
                    return true;
                }
            }
        }
    }
}

/// A chunk wholly in the socket: the stream's bytes are counted as sent,
/// and a round as taken by the client.
fn taken(st: &mut SinkState, chunk: &Chunk) {
    let Some(session) = st.session.as_mut() else {
        return;
    };
    match chunk.kind {
        ChunkKind::Head => {}
        ChunkKind::Prefix => session.count_sent(chunk.bytes.len() as u64),
        ChunkKind::Round => {
            session.count_sent(chunk.bytes.len() as u64);
            session.count_taken();
        }
    }
}

/// A release for a send loop.
struct Send {
    sink: Arc<Sink>,
    playback_round: PlaybackRound,
    replica: Replica,
}

/// A batch of releases and when the driver handed it over.
type Batch = (Instant, Vec<Send>);

struct Shard {
    loop_tx: crossbeam_channel::Sender<Batch>,
    batch: Vec<Send>,
    /// When each batch handed over and not yet written was handed over,
    /// oldest first (for the delivery lag of a loop that is still busy).
    handed: VecDeque<Instant>,
    /// Batches handed over.
    handed_total: u64,
    /// What the loop reports back.
    done: Arc<LoopDone>,
}

/// What a send loop reports to the driver's side of the outbox.
#[derive(Default)]
struct LoopDone {
    /// Batches written.
    batches: AtomicU64,
    /// The longest a batch waited from its hand-over to the end of its
    /// writing, since the driver last took it.
    lag_max_ns: AtomicU64,
}

/// The round driver's side of the send loops: releases gathered per loop
/// during one driver step, handed over in one message per loop at its end.
///
/// It also measures the delivery lag that admission checks
/// (`rondo_model::array::Array::delivery_lag`): each loop records how long
/// after its hand-over it finished writing a batch, and
/// [`Outbox::take_lag_ns`] adds the age of any batch still waiting, so a
/// loop starved of the CPU shows its lag before it catches up.
pub struct Outbox {
    shards: Vec<Shard>,
}

impl Outbox {
    /// Starts `loops` send loops, each on a thread of its own at
    /// [`SEND_THREAD_NICE`] where the process may (else the default
    /// priority). They end when the outbox is dropped.
    pub fn start(loops: usize, metrics: Arc<Metrics>) -> std::io::Result<Outbox> {
        let shards = (0..loops.max(1))
            .map(|i| {
                let (loop_tx, loop_rx) = crossbeam_channel::unbounded();
                let done = Arc::new(LoopDone::default());
                let loop_done = Arc::clone(&done);
                let loop_metrics = Arc::clone(&metrics);
                std::thread::Builder::new()
                    .name(format!("rondo-send-{i}"))
                    .spawn(move || {
                        let raised = crate::io::set_calling_thread_nice(SEND_THREAD_NICE);
                        if i == 0 {
                            tracing::info!(
                                nice = if raised { SEND_THREAD_NICE } else { 0 },
                                "the send loops' priority (ahead of the HTTP workers where raised)"
                            );
                        }
                        send_loop(loop_rx, &loop_done, &loop_metrics);
                    })?;
                Ok(Shard {
                    loop_tx,
                    batch: Vec::new(),
                    handed: VecDeque::new(),
                    handed_total: 0,
                    done,
                })
            })
            .collect::<std::io::Result<_>>()?;
        Ok(Outbox { shards })
    }

    /// A released round of `stream`, sent through `sink`: to its loop at
    /// the next flush.
    pub(crate) fn push(
        &mut self,
        stream: StreamId,
        sink: &Arc<Sink>,
        playback_round: PlaybackRound,
        replica: Replica,
    ) {
        let n = self.shards.len() as u64;
        self.shards[(stream.0 % n) as usize].batch.push(Send {
            sink: Arc::clone(sink),
            playback_round,
            replica,
        });
    }

    /// Hands each loop what gathered for it (one wake per loop at most).
    pub fn flush(&mut self) {
        let now = Instant::now();
        for shard in &mut self.shards {
            if !shard.batch.is_empty()
                && shard
                    .loop_tx
                    .send((now, std::mem::take(&mut shard.batch)))
                    .is_ok()
            {
                shard.handed.push_back(now);
                shard.handed_total += 1;
            }
        }
    }

    /// The worst delivery lag since the last call: the longest a loop took
    /// to finish a batch after its hand-over, or the age of the oldest
    /// batch a loop has not finished, whichever is longer.
    pub fn take_lag_ns(&mut self) -> u64 {
        let now = Instant::now();
        let mut lag_ns = 0;
        for shard in &mut self.shards {
            lag_ns = lag_ns.max(shard.done.lag_max_ns.swap(0, Relaxed));
            let written = shard.done.batches.load(Relaxed);
            // The batches written are the oldest handed over.
            let unwritten = shard.handed_total.saturating_sub(written) as usize;
            while shard.handed.len() > unwritten {
                shard.handed.pop_front();
            }
            if let Some(&oldest) = shard.handed.front() {
                let age_ns = now.saturating_duration_since(oldest).as_nanos();
                lag_ns = lag_ns.max(u64::try_from(age_ns).unwrap_or(u64::MAX));
            }
        }
        lag_ns
    }
}

/// One send loop: writes each release it is handed into its stream's
/// socket, in the order the driver released them (a socket's writes never
/// wait: a full one is left to its connection's task). Ends with the
/// driver.
fn send_loop(batches: crossbeam_channel::Receiver<Batch>, done: &LoopDone, metrics: &Metrics) {
    while let Ok((handed_at, batch)) = batches.recv() {
        for send in batch {
            send.sink.release(send.playback_round, send.replica);
        }
        let lag = handed_at.elapsed();
        metrics.delivery_lag.observe(lag);
        let lag_ns = u64::try_from(lag.as_nanos()).unwrap_or(u64::MAX);
        done.lag_max_ns.fetch_max(lag_ns, Relaxed);
        done.batches.fetch_add(1, Relaxed);
    }
}

/// How an answer's body is delimited.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Framing {
    /// By the handler's own `content-length` (a stream: its length).
    Given,
    /// By this length.
    Length(u64),
    /// `transfer-encoding: chunked`.
    Chunked,
    /// By closing the connection (HTTP/1.0 and no length).
    Close,
}

/// The response head rondo writes itself: the status line, the handler's
/// headers, the body's framing, the date, and `connection: close` unless
/// the connection stays open.
fn head_bytes(parts: &response::Parts, framing: Framing, keep_alive: bool) -> Bytes {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(
        format!(
            "HTTP/1.1 {} {}\r\n",
            parts.status.as_u16(),
            parts.status.canonical_reason().unwrap_or("")
        )
        .as_bytes(),
    );
    for (name, value) in &parts.headers {
        let framed_here = framing != Framing::Given
            && (name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING);
        if name == header::CONNECTION || framed_here {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    match framing {
        Framing::Given | Framing::Close => {}
        Framing::Length(n) => out.extend_from_slice(format!("content-length: {n}\r\n").as_bytes()),
        Framing::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
    }
    if !parts.headers.contains_key(header::DATE) {
        let date = httpdate::fmt_http_date(std::time::SystemTime::now());
        out.extend_from_slice(format!("date: {date}\r\n").as_bytes());
    }
    if !keep_alive {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Bytes::from(out)
}

/// Writes all of `chunks`, in order, into a socket nothing else writes
/// to: as few `writev`s as the socket's room allows.
async fn write_all_vectored(socket: &TcpStream, mut chunks: Vec<Bytes>) -> std::io::Result<()> {
    use bytes::Buf;
    chunks.retain(|c| !c.is_empty());
    let mut first = 0;
    while first < chunks.len() {
        socket.writable().await?;
        let slices: Vec<IoSlice<'_>> = chunks[first..]
            .iter()
            .take(IOVECS_MAX)
            .map(|c| IoSlice::new(c))
            .collect();
        match socket.try_write_vectored(&slices) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(mut n) => {
                while n > 0 {
                    let len = chunks[first].len();
                    if n < len {
                        chunks[first].advance(n);
                        break;
                    }
                    n -= len;
                    first += 1;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// After the last byte: the write side closes, and what the client may
/// still send is read (not reset away) until it closes or [`LINGER`] ends.
async fn linger(socket: &TcpStream) {
    // SAFETY: the socket is open for as long as `socket` is borrowed.
    unsafe {
        libc::shutdown(std::os::fd::AsRawFd::as_raw_fd(socket), libc::SHUT_WR);
    }
    let _ = tokio::time::timeout(LINGER, async {
        loop {
            if socket.readable().await.is_err() {
                return;
            }
            // On the stack between awaits, not in the connection's task
            // (which a stream holds for its life).
            let mut scratch = [0u8; SCRATCH_BYTES];
            match socket.try_read(&mut scratch) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    })
    .await;
}

/// How an answer left its connection.
pub(crate) enum Answered {
    /// Open for the client's next request, with what it sent of it so far.
    KeepAlive(TcpStream, Vec<u8>),
    /// Closed; by the server for this reason, if it was.
    Closed(Option<CloseReason>),
}

/// Answers a plain `GET` itself: `request` goes through the router (which
/// admits a stream through the request's [`FastPath`]), the answer's head
/// is written here, and an admitted stream's rounds go out through the
/// send loops until it ends; any other answer's body is written as it
/// comes (by its length, chunked, or to the close). A connection whose
/// answer went out whole stays open if the client keeps it (`keep_alive`).
pub(crate) async fn answer(
    socket: TcpStream,
    mut request: axum::http::Request<axum::body::Body>,
    keep_alive: bool,
    router: axum::Router,
    handle: ConnectionHandle,
    shutdown: CancellationToken,
    idle_timeout: Duration,
) -> Answered {
    use tower::ServiceExt;
    let http_11 = request.version() == axum::http::Version::HTTP_11;
    let socket = Arc::new(socket);
    let sink = Sink::new(Arc::clone(&socket));
    request.extensions_mut().insert(FastPath(Arc::clone(&sink)));
    let response = match router.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let (parts, body) = response.into_parts();
    let keep_alive = keep_alive && !parts.headers.contains_key(header::CONNECTION);
    if !sink.installed() {
        // Not a stream: the body as it comes.
        drop(sink);
        let written = write_answer(&socket, &parts, body, keep_alive, http_11, idle_timeout).await;
        return close_or_keep(socket, written == Written::Whole && keep_alive, Vec::new()).await;
    }
    sink.start(head_bytes(&parts, Framing::Given, keep_alive));
    let mut leftover = Vec::new();
    let closed = deliver(&sink, &socket, &handle, &shutdown, &mut leftover).await;
    let finished = closed.is_none() && sink.status().1 == Some(SinkEnd::Finished);
    // The session goes before the connection is used again or closed: a
    // client that sees the end may ask again at once, and must find the
    // stream ended.
    sink.detach();
    drop(sink);
    if let Some(reason) = closed {
        // Closed by the server: reset rather than linger (as the listener
        // does for hyper's connections).
        crate::listener::reset_on_close(std::os::fd::AsRawFd::as_raw_fd(&*socket));
        return Answered::Closed(Some(reason));
    }
    close_or_keep(socket, finished && keep_alive, leftover).await
}

#[derive(PartialEq, Eq)]
enum Written {
    Whole,
    /// The client went away, stopped reading for the idle timeout, or the
    /// body failed: the connection closes.
    Cut,
}

/// Writes an answer other than a stream: its head, then its body's frames
/// as the body yields them, framed by the handler's `content-length` if it
/// gave one, else by the body's length when the body knows it, else
/// chunked (HTTP/1.1) or ended by the close (HTTP/1.0).
async fn write_answer(
    socket: &TcpStream,
    parts: &response::Parts,
    body: axum::body::Body,
    keep_alive: bool,
    http_11: bool,
    idle_timeout: Duration,
) -> Written {
    use http_body_util::BodyExt;
    let given = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let framing = match (given, axum::body::HttpBody::size_hint(&body).exact()) {
        (Some(_), _) => Framing::Given,
        (None, Some(n)) => Framing::Length(n),
        (None, None) if http_11 => Framing::Chunked,
        (None, None) => Framing::Close,
    };
    let length = match framing {
        Framing::Given => given,
        Framing::Length(n) => Some(n),
        Framing::Chunked | Framing::Close => None,
    };
    let mut written_bytes = 0u64;
    let keep_alive = keep_alive && framing != Framing::Close;
    let write = |chunks: Vec<Bytes>| async move {
        matches!(
            tokio::time::timeout(idle_timeout, write_all_vectored(socket, chunks)).await,
            Ok(Ok(()))
        )
    };
    // The head goes out with the body's first frame (most answers are one
    // frame: a write, and a wake of the client, per answer).
    let mut head = Some(head_bytes(parts, framing, keep_alive));
    let mut body = body;
    loop {
        match body.frame().await {
            None => break,
            Some(Err(e)) => {
                tracing::warn!("an answer's body failed: {e}");
                return Written::Cut;
            }
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    // Trailers: not sent over HTTP/1.1 here.
                    continue;
                };
                if data.is_empty() {
                    continue;
                }
                written_bytes += data.len() as u64;
                if length.is_some_and(|n| written_bytes > n) {
                    tracing::warn!("an answer's body is longer than its content-length");
                    return Written::Cut;
                }
                let mut chunks: Vec<Bytes> = head.take().into_iter().collect();
                if framing == Framing::Chunked {
                    chunks.push(Bytes::from(format!("{:x}\r\n", data.len())));
                    chunks.push(data);
                    chunks.push(Bytes::from_static(b"\r\n"));
                } else {
                    chunks.push(data);
                }
                if !write(chunks).await {
                    return Written::Cut;
                }
            }
        }
    }
    let mut chunks: Vec<Bytes> = head.take().into_iter().collect();
    if framing == Framing::Chunked {
        chunks.push(Bytes::from_static(b"0\r\n\r\n"));
    }
    if !chunks.is_empty() && !write(chunks).await {
        return Written::Cut;
    }
    if framing == Framing::Close || length.is_some_and(|n| written_bytes != n) {
        // The close ends the body (or tells the client it is short).
        return Written::Cut;
    }
    Written::Whole
}

/// The connection back for the next request, or closed gracefully.
async fn close_or_keep(socket: Arc<TcpStream>, keep: bool, leftover: Vec<u8>) -> Answered {
    if keep {
        // The sink let go of its handle when it was detached (or was
        // never given one).
        match Arc::try_unwrap(socket) {
            Ok(socket) => return Answered::KeepAlive(socket, leftover),
            Err(socket) => {
                linger(&socket).await;
                return Answered::Closed(None);
            }
        }
    }
    linger(&socket).await;
    Answered::Closed(None)
}

/// What a client may send while its stream plays (its next request, kept
/// for after it); a client sending more is closed.
const LEFTOVER_BYTES_MAX: usize = 64 * 1024;

/// Waits on an admitted stream's connection until the stream ends, the
/// client leaves or the server closes it. `leftover`: what the client sent
/// meanwhile (its next request).
async fn deliver(
    sink: &Sink,
    socket: &TcpStream,
    handle: &ConnectionHandle,
    shutdown: &CancellationToken,
    leftover: &mut Vec<u8>,
) -> Option<CloseReason> {
    let mut shutting_down = false;
    loop {
        let (blocked, end) = sink.status();
        match end {
            Some(SinkEnd::Finished) | Some(SinkEnd::Failed(_)) => return None,
            // Stopped by the server: reset, as a connection closed by it.
            Some(SinkEnd::Aborted) => {
                return (!shutting_down).then_some(CloseReason::StreamStopped);
            }
            None => {}
        }
        tokio::select! {
            _ = sink.wake.notified() => {}
            _ = handle.cancelled(), if !shutting_down => {
                if !shutdown.is_cancelled() {
                    return Some(CloseReason::StreamStopped);
                }
                // Shutting down: the round driver ends every stream.
                shutting_down = true;
            }
            ready = socket.writable(), if blocked => {
                if ready.is_err() {
                    return None;
                }
                sink.on_writable();
            }
            ready = socket.readable() => {
                if ready.is_err() {
                    sink.abort();
                    return None;
                }
                // On the stack, not in the task (see `linger`).
                let mut scratch = [0u8; SCRATCH_BYTES];
                match socket.try_read(&mut scratch) {
                    // The client closed: its stream ends.
                    Ok(0) => {
                        sink.abort();
                        return None;
                    }
                    Ok(n) if leftover.len() + n <= LEFTOVER_BYTES_MAX => {
                        leftover.extend_from_slice(&scratch[..n]);
                    }
                    Ok(_) => {
                        sink.abort();
                        return None;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(_) => {
                        sink.abort();
                        return None;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `SO_SNDBUF` as the kernel reports it (twice what was set).
    fn send_buffer_bytes(socket: &TcpStream) -> usize {
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: the socket is open; `value` and `len` are a valid int
        // option buffer and its size.
        let rc = unsafe {
            libc::getsockopt(
                std::os::fd::AsRawFd::as_raw_fd(socket),
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&raw mut value).cast(),
                &raw mut len,
            )
        };
        assert_eq!(rc, 0, "getsockopt(SO_SNDBUF)");
        value as usize
    }

    /// A stream whose first send is larger than the listener's send buffer
    /// gets room for all of it (within `net.core.wmem_max`); one that fits,
    /// or a socket left to the kernel's autotuning, keeps what it has.
    #[tokio::test]
    async fn a_first_send_larger_than_the_send_buffer_gets_room_for_all_of_it() {
        const FLOOR: usize = 128 * 1024;
        let wmem_max: usize = std::fs::read_to_string("/proc/sys/net/core/wmem_max")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(usize::MAX);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut sockets = Vec::new();
        for _ in 0..3 {
            let client = TcpStream::connect(addr).await.unwrap();
            let (socket, _) = listener.accept().await.unwrap();
            crate::listener::set_send_buffer(&socket, FLOOR);
            sockets.push((client, Arc::new(socket)));
        }
        let set = |i: usize| send_buffer_bytes(&sockets[i].1);
        let floor_as_reported = set(0);
        assert_eq!(floor_as_reported, 2 * FLOOR.min(wmem_max));

        // 660 KB: the 6 s burst of an 800 kbit/s title and a round more.
        let burst = Sink::new(Arc::clone(&sockets[0].1));
        burst.fit_send_buffer(660_000, FLOOR);
        assert_eq!(set(0), 2 * 660_000.min(wmem_max).max(FLOOR.min(wmem_max)));
        assert!(set(0) >= floor_as_reported);

        // A first send that fits leaves the buffer alone.
        Sink::new(Arc::clone(&sockets[1].1)).fit_send_buffer(100_000, FLOOR);
        assert_eq!(set(1), floor_as_reported);

        // With autotuning (floor 0) nothing is set.
        let autotuned_client = TcpStream::connect(addr).await.unwrap();
        let (autotuned, _) = listener.accept().await.unwrap();
        let autotuned = Arc::new(autotuned);
        let before = send_buffer_bytes(&autotuned);
        Sink::new(Arc::clone(&autotuned)).fit_send_buffer(660_000, 0);
        assert_eq!(send_buffer_bytes(&autotuned), before);
        drop(autotuned_client);

        // The cap: never more than `SEND_BUFFER_MAX_BYTES`.
        Sink::new(Arc::clone(&sockets[2].1)).fit_send_buffer(usize::MAX, FLOOR);
        assert_eq!(set(2), 2 * SEND_BUFFER_MAX_BYTES.min(wmem_max));
    }
}
