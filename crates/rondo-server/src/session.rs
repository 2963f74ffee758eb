//! Sessions: one admitted stream per HTTP response, from admission to the
//! last byte, a disconnect, a stall or an abort.
//!
//! A stream's data moves in whole playback rounds. The round driver puts a
//! round's bytes into [`StreamState::ready`] when its reads complete, and at
//! the start of the round after the read (the schedule's send round) moves
//! them, in playback order and trimmed to the requested byte range, into a
//! bounded per-session channel. A sender task (the HTTP body,
//! [`SessionBody`]) writes them to the socket as fast as the client reads.
//! If the client stops reading, its channel fills, further rounds wait in
//! the stream's backlog and the stream is marked stalled; the driver never
//! waits for it, and after the grace time drops it with a log line. A client
//! that disconnects drops its body, whose guard releases the stream's
//! reservations at once. A stream may carry a prefix held in memory (an MP4
//! time seek's rewritten header): the body sends it first, before any round,
//! with no disk read.

use std::collections::{BTreeMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use futures_util::Stream;
use rondo_model::array::{AdmitRequest, Span};
use rondo_model::reservation::Rejection;
use rondo_model::units::StreamId;
use tokio::sync::mpsc;

use crate::state::{Core, Shared};
use crate::titles::LoadedTitle;

/// One admitted stream, as the driver and the HTTP side share it.
pub struct StreamState {
    pub title: Arc<LoadedTitle>,
    /// Absolute round of the stream's first read.
    pub start_round: u64,
    pub first_playback_round: usize,
    /// The next playback round to hand to the session.
    pub next_send_round: usize,
    /// Bytes of the first round before the requested range.
    pub skip_bytes: u64,
    /// Bytes of the requested range not yet handed to the session.
    pub remaining_bytes: u64,
    /// Complete rounds waiting for their send round (or for an earlier,
    /// late round): playback round → (round they may be sent in, data).
    pub ready: BTreeMap<usize, (u64, Bytes)>,
    /// Rounds released for sending that the session channel had no room for.
    pub backlog: VecDeque<Bytes>,
    pub sink: mpsc::Sender<Bytes>,
    /// Since when the session channel has been full.
    pub stalled_since: Option<Instant>,
    /// Set when the server ends the stream; the body then fails the response.
    pub abort: Arc<AtomicBool>,
    /// The client, for log lines.
    pub peer: String,
}

impl StreamState {
    /// The round in which playback round `playback_round`'s data is read.
    pub fn read_round(&self, playback_round: usize) -> u64 {
        self.start_round + (playback_round - self.first_playback_round) as u64
    }

    /// Trims a round's data to the requested range.
    fn trim(&mut self, mut data: Bytes) -> Bytes {
        if self.skip_bytes > 0 {
            let skip = self.skip_bytes.min(data.len() as u64);
            data = data.slice(skip as usize..);
            self.skip_bytes -= skip;
        }
        if data.len() as u64 > self.remaining_bytes {
            data.truncate(self.remaining_bytes as usize);
        }
        self.remaining_bytes -= data.len() as u64;
        data
    }

    /// Moves every round that may be sent by round `current` into the
    /// backlog, then as much of the backlog as fits into the channel.
    /// Returns true once every byte of the range is in the channel.
    pub fn flush(&mut self, current: u64, now: Instant) -> bool {
        while let Some(entry) = self.ready.first_entry() {
            if *entry.key() != self.next_send_round || entry.get().0 > current {
                break;
            }
            let (_, data) = entry.remove();
            self.next_send_round += 1;
            let data = self.trim(data);
            if !data.is_empty() {
                self.backlog.push_back(data);
            }
        }
        while let Some(data) = self.backlog.pop_front() {
            match self.sink.try_send(data) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(data)) => {
                    self.backlog.push_front(data);
                    self.stalled_since.get_or_insert(now);
                    return false;
                }
                // The body is gone; its guard releases the stream.
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    self.backlog.clear();
                    return false;
                }
            }
        }
        self.stalled_since = None;
        self.remaining_bytes == 0
    }
}

/// What a client asked to stream.
pub struct StreamRequest {
    pub title: Arc<LoadedTitle>,
    /// First stored byte to send.
    pub first_byte: u64,
    /// Bytes to send from there.
    pub length_bytes: u64,
    /// Bytes sent before the stored ones, from memory (may be empty).
    pub prefix: Bytes,
    pub peer: String,
}

/// An admitted stream and the body that delivers it.
pub struct Admitted {
    pub stream: StreamId,
    pub start_round: u64,
    pub body: SessionBody,
}

/// Admits a stream over the rounds holding its bytes, from the round of its
/// first byte to the round of its last: the array's admission
/// (`Array::admit` of a byte span) with the configured look-ahead, run on
/// the round driver. `Err(None)`: the server is shutting down.
pub async fn admit(
    shared: &Arc<Shared>,
    request: StreamRequest,
) -> Result<Admitted, Option<Rejection>> {
    let title = request.title;
    let channel_rounds = shared.config.client_buffer_rounds.max(1) as usize;
    let (sink, receiver) = mpsc::channel(channel_rounds);
    let abort = Arc::new(AtomicBool::new(false));
    let (first_byte, length_bytes) = (request.first_byte, request.length_bytes);
    let (job_title, job_abort, peer) =
        (Arc::clone(&title), Arc::clone(&abort), request.peer.clone());
    let admission = shared
        .with_core(move |shared, core| {
            // The array maps the bytes to playback rounds and reserves only
            // those (nothing past the round of the range's last byte), from
            // the first round the driver has not planned yet.
            let admission = core.array.admit(&AdmitRequest {
                title: job_title.id(),
                span: Span::Bytes {
                    first_byte,
                    length_bytes,
                },
            });
            match &admission {
                Ok(a) => {
                    shared.metrics.admitted.fetch_add(1, Relaxed);
                    if a.first_playback_round > 0 || a.skip_bytes > 0 {
                        shared.metrics.admitted_mid_title.fetch_add(1, Relaxed);
                    }
                    core.streams.insert(
                        a.stream,
                        StreamState {
                            title: job_title,
                            start_round: a.start_round,
                            first_playback_round: a.first_playback_round,
                            next_send_round: a.first_playback_round,
                            skip_bytes: a.skip_bytes,
                            remaining_bytes: a.length_bytes,
                            ready: BTreeMap::new(),
                            backlog: VecDeque::new(),
                            sink,
                            stalled_since: None,
                            abort: job_abort,
                            peer,
                        },
                    );
                }
                // The HTTP handler logs the rejection with its reason.
                Err(rejection) => shared.metrics.count_rejection(rejection),
            }
            admission
        })
        .await
        .ok_or(None)?
        .map_err(Some)?;
    let earliest = admission.earliest_round;
    tracing::info!(
        stream = admission.stream.0,
        title = title.id().0,
        name = %title.record.name,
        first_byte = request.first_byte,
        bytes = request.length_bytes,
        prefix_bytes = request.prefix.len(),
        playback_round = admission.first_playback_round,
        start_round = admission.start_round,
        earliest_round = earliest,
        delay_rounds = admission.start_round - earliest,
        peer = %request.peer,
        "stream admitted"
    );
    Ok(Admitted {
        stream: admission.stream,
        start_round: admission.start_round,
        body: SessionBody {
            prefix: (!request.prefix.is_empty()).then_some(request.prefix),
            receiver,
            abort,
            guard: ReleaseGuard {
                shared: Arc::clone(shared),
                stream: admission.stream,
            },
            done: false,
        },
    })
}

/// Releases a stream that is still registered when its body is dropped (the
/// client disconnected, or the server is dropping the connection): a job for
/// the round driver, which owns the sessions.
struct ReleaseGuard {
    shared: Arc<Shared>,
    stream: StreamId,
}

impl Drop for ReleaseGuard {
    fn drop(&mut self) {
        let stream = self.stream;
        self.shared.on_core(move |shared, core| {
            if let Some(state) = end_stream(core, stream) {
                shared.metrics.streams_disconnected.fetch_add(1, Relaxed);
                tracing::info!(
                    stream = stream.0,
                    title = state.title.id().0,
                    peer = %state.peer,
                    "client disconnected; reservations released"
                );
            }
        });
    }
}

/// Removes a stream and releases its reservations from the current round
/// on. Returns its state if it was still registered.
pub fn end_stream(core: &mut Core, stream: StreamId) -> Option<StreamState> {
    let state = core.streams.remove(&stream)?;
    core.array.release(stream);
    Some(state)
}

/// The HTTP body of a stream: the session channel's rounds, failing the
/// response if the server drops the stream.
pub struct SessionBody {
    /// Sent before the first round's data.
    prefix: Option<Bytes>,
    receiver: mpsc::Receiver<Bytes>,
    abort: Arc<AtomicBool>,
    guard: ReleaseGuard,
    done: bool,
}

impl Stream for SessionBody {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        let aborted = || std::io::Error::other("the server ended this stream");
        if self.abort.load(Relaxed) {
            self.done = true;
            return Poll::Ready(Some(Err(aborted())));
        }
        if let Some(prefix) = self.prefix.take() {
            self.guard
                .shared
                .metrics
                .bytes_sent
                .fetch_add(prefix.len() as u64, Relaxed);
            return Poll::Ready(Some(Ok(prefix)));
        }
        match self.receiver.poll_recv(cx) {
            Poll::Ready(Some(data)) => {
                self.guard
                    .shared
                    .metrics
                    .bytes_sent
                    .fetch_add(data.len() as u64, Relaxed);
                Poll::Ready(Some(Ok(data)))
            }
            Poll::Ready(None) => {
                self.done = true;
                if self.abort.load(Relaxed) {
                    Poll::Ready(Some(Err(aborted())))
                } else {
                    Poll::Ready(None)
                }
            }
            Poll::Pending => Poll::Pending,
        }
    }
}
