//! Sessions: one admitted stream per HTTP response, from admission to the
//! last byte, a disconnect, a stall or an abort.
//!
//! A stream's data moves in whole playback rounds, and it does not pass
//! through the round driver. A disk thread puts every piece it read and
//! checked straight into its session's piece queue ([`Piece`]; lock-free,
//! and it wakes no one), then tells the driver the read completed; the
//! driver hands the completion to the array, and when the array *releases*
//! a playback round (the round is whole and its send round has come, in
//! playback order) the driver hands the release to the stream's
//! [`Delivery`]: a send loop's batch of the round ([`crate::sink`], for a
//! stream the listener answers itself) or a [`SessionMsg::Release`] in the
//! inbox of a response body hyper polls ([`SessionBody`], woken once per
//! round). The piece was queued before its completion was reported, so the
//! release always finds its pieces. The queues are unbounded, and bounded
//! in practice by admission and the stall rule.
//! Either way [`SessionData`] holds the pieces until their release, then
//! assembles the round and trims it to the requested byte range; the round
//! goes to the socket as fast as the client reads, and the rounds the
//! client has taken are counted. The driver gives that count to the array every round
//! (`Array::client_took`): a client holding more than its buffer for the
//! grace time is stopped by the array, and one that took every round is
//! finished. A client that disconnects drops its body, whose guard releases
//! the stream's reservations at once. A stream may carry a prefix held in
//! memory (an MP4 time seek's rewritten header): the body sends it first,
//! before any round, with no disk read.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use futures_util::Stream;
use rondo_model::array::{AdmitRequest, LateStart, PriorSchedule, Span};
use rondo_model::layout::Replica;
use rondo_model::reservation::{BurstLead, Rejection};
use rondo_model::units::{PlaybackRound, Round, StreamId};
use tokio::sync::mpsc;

use crate::io::DiskBatch;
use crate::listener::ConnectionHandle;
use crate::metrics::TitleCounters;
use crate::sink::Sink;
use crate::state::{Core, Shared};
use crate::titles::LoadedTitle;

/// A piece of a stream-round, read and checked by a disk thread: all of
/// it, or under a backup window one part of it, read in its own round.
pub struct Piece {
    /// The stream it was read for (a storage node elsewhere names it so
    /// its manager finds the session).
    pub stream: StreamId,
    pub playback_round: PlaybackRound,
    pub replica: Replica,
    pub piece: u16,
    /// Where `data` starts in the piece (0 unless its read was cut).
    pub offset_bytes: u64,
    /// The bytes, in a pooled read buffer (back to the pool when the last
    /// holder drops them): the streams that read the same extents share
    /// one buffer (`io`'s shared reads).
    pub data: Bytes,
}

/// Where disk threads put a session's pieces, and where its release takes
/// them from: a queue that wakes no one (the release that follows does).
/// A locked `Vec` rather than a channel: a stream holds it for its life,
/// and an unbounded channel's block of 31 slots and its cache-padded ends
/// were about 2.4 KiB per stream, a fifth of a stream's memory at 10,000
/// streams (docs/serving-cost.md); an empty queue here holds no buffer.
#[derive(Clone, Default)]
pub struct PieceSender(Arc<Mutex<Vec<Piece>>>);

impl PieceSender {
    /// Queues a piece for the session.
    pub fn send(&self, piece: Piece) {
        self.lock().push(piece);
    }

    /// Every piece queued so far, leaving the queue empty (and without a
    /// buffer).
    pub fn take_all(&self) -> Vec<Piece> {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Piece>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What the driver tells a session.
pub enum SessionMsg {
    /// The array released this playback round: send it.
    Release {
        playback_round: PlaybackRound,
        replica: Replica,
    },
    /// The server stopped the stream: fail the response.
    Abort,
}

/// How a stream's released rounds reach its client.
pub enum Delivery {
    /// A response body hyper polls: a message per released round wakes it.
    Body(mpsc::UnboundedSender<SessionMsg>),
    /// Written to the socket by a send loop ([`crate::sink`]): the release
    /// joins its send loop's batch of the round, and no task wakes unless
    /// the socket is full or the stream ends.
    Sink(Arc<Sink>),
}

/// One admitted stream, as the round driver holds it.
pub struct StreamState {
    pub title: Arc<LoadedTitle>,
    /// Where the driver's releases go.
    pub delivery: Delivery,
    /// Where disk threads put the stream's pieces.
    pub pieces: PieceSender,
    /// Released rounds the client has taken (counted by the body).
    pub taken_rounds: Arc<AtomicU32>,
    /// The client, for log lines.
    pub peer: String,
    /// The stream's connection.
    pub connection: Option<ConnectionHandle>,
}

impl StreamState {
    /// Tells the body to fail the response and closes the connection: a
    /// client that stopped reading would never poll the body again.
    pub fn abort(&self) {
        match &self.delivery {
            Delivery::Body(inbox) => {
                let _ = inbox.send(SessionMsg::Abort);
            }
            Delivery::Sink(sink) => sink.abort(),
        }
        if let Some(connection) = &self.connection {
            connection.close();
        }
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
    /// The connection it came on (absent when not served by the listener).
    pub connection: Option<ConnectionHandle>,
    /// Where a lost manager read it (a stream asked for again after a
    /// takeover, `x-rondo-resume`).
    pub prior: Option<PriorSchedule>,
    /// The send loop's end of the connection, when the listener answers
    /// this request itself (`sink`); `None`: hyper sends the body.
    pub sink: Option<Arc<Sink>>,
    /// Rounds the first read waits at least (`x-rondo-defer-ms`,
    /// `AdmitRequest::defer_rounds`).
    pub defer_rounds: u64,
}

/// An admitted stream and the body that delivers it.
pub struct Admitted {
    pub stream: StreamId,
    pub start_round: Round,
    /// Where this server reads it, for the `x-rondo-schedule` header.
    pub schedule: Option<PriorSchedule>,
    /// The response body; `None` when the request's sink sends the stream.
    pub body: Option<SessionBody>,
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
    let asked_at = Instant::now();
    let prefix_bytes = request.prefix.len();
    let title_counters = shared.metrics.title(title.id(), &title.record.name);
    let (inbox, receiver) = mpsc::unbounded_channel();
    let pieces = PieceSender::default();
    let pieces_rx = pieces.clone();
    let taken_rounds = Arc::new(AtomicU32::new(0));
    let (first_byte, length_bytes, prior, defer_rounds) = (
        request.first_byte,
        request.length_bytes,
        request.prior,
        request.defer_rounds,
    );
    let (job_title, peer, connection, sink, prefix, job_counters, guard_shared) = (
        Arc::clone(&title),
        request.peer.clone(),
        request.connection.clone(),
        request.sink,
        request.prefix,
        Arc::clone(&title_counters),
        Arc::clone(shared),
    );
    let (admission, schedule, session) = shared
        .with_core(move |shared, core| {
            // The array maps the bytes to playback rounds and reserves only
            // those (nothing past the round of the range's last byte), in
            // the round in progress if its first reads fit there, else from
            // the first round the driver has not planned yet.
            let now_ns = shared.clock.model_ns(Instant::now());
            let admission = core.array.admit_now(
                &AdmitRequest {
                    title: job_title.id(),
                    span: Span::Bytes {
                        first_byte,
                        length_bytes,
                    },
                    prior,
                    defer_rounds,
                },
                now_ns,
            );
            let (admission, late) = match admission {
                Ok((a, late)) => (Ok(a), late),
                Err(e) => (Err(e), None),
            };
            let c = core.array.counters();
            shared
                .metrics
                .late_starts_moved
                .store(c.late_starts_moved, Relaxed);
            if prior.is_some() {
                shared
                    .metrics
                    .resumed_in_place
                    .store(c.resumed_in_place, Relaxed);
                shared.metrics.resumed_moved.store(c.resumed_moved, Relaxed);
            }
            let schedule = admission.as_ref().ok().and_then(|a| {
                PriorSchedule::of(&core.array, a.stream, shared.schedule_id(), now_ns)
            });
            let mut session = None;
            match &admission {
                Ok(a) => {
                    shared.metrics.admitted.fetch_add(1, Relaxed);
                    if a.burst_rounds > 0 {
                        shared.metrics.admitted_burst.fetch_add(1, Relaxed);
                    }
                    if a.first_playback_round > PlaybackRound(0) || a.skip_bytes > 0 {
                        shared.metrics.admitted_mid_title.fetch_add(1, Relaxed);
                    }
                    // The session exists before the stream does in the
                    // core: a late start's rounds are released below. Made
                    // here, a session whose request went away is dropped
                    // with the answer, and its guard ends the stream.
                    let data = SessionData {
                        prefix: (!prefix.is_empty()).then_some(prefix),
                        title: Arc::clone(&job_title),
                        pieces_rx,
                        pieces: BTreeMap::new(),
                        skip_bytes: a.skip_bytes,
                        remaining_bytes: a.length_bytes,
                        taken_rounds: Arc::clone(&taken_rounds),
                        asked_at,
                        first_byte_sent: false,
                        guard: ReleaseGuard {
                            shared: guard_shared,
                            stream: a.stream,
                            finished: Arc::new(AtomicBool::new(false)),
                            title_counters: job_counters,
                        },
                    };
                    let delivery = match sink {
                        Some(sink) => {
                            shared.metrics.admitted_direct.fetch_add(1, Relaxed);
                            // A client that keeps its burst's lead is
                            // entitled to hold it for the whole stream (the
                            // stall rule allows it), so its socket may too.
                            if core
                                .array
                                .reservations()
                                .stream_span(a.stream)
                                .is_some_and(|s| s.burst_lead == BurstLead::Kept)
                            {
                                sink.fit_send_buffer(
                                    prefix_bytes.saturating_add(
                                        usize::try_from(a.first_send_bytes).unwrap_or(usize::MAX),
                                    ),
                                    shared.config.connections.socket_send_buffer_bytes,
                                );
                            }
                            sink.install(data);
                            Delivery::Sink(sink)
                        }
                        None => {
                            session = Some(data);
                            Delivery::Body(inbox)
                        }
                    };
                    core.streams.insert(
                        a.stream,
                        StreamState {
                            title: job_title,
                            delivery,
                            pieces,
                            taken_rounds,
                            peer,
                            connection,
                        },
                    );
                    if let Some(late) = late {
                        shared.metrics.admitted_late_start.fetch_add(1, Relaxed);
                        queue_late_start(core, a.start_round, late);
                    }
                }
                // The HTTP handler logs the rejection with its reason.
                Err(rejection) => shared.metrics.count_rejection(rejection),
            }
            (admission, schedule, session)
        })
        .await
        .ok_or(None)?;
    shared
        .metrics
        .admission_decision
        .observe(asked_at.elapsed());
    match &admission {
        Ok(_) => &title_counters.admitted,
        Err(_) => &title_counters.rejected,
    }
    .fetch_add(1, Relaxed);
    let admission = admission.map_err(Some)?;
    let earliest = admission.earliest_round;
    tracing::info!(
        stream = admission.stream.0,
        title = title.id().0,
        name = %title.record.name,
        first_byte = request.first_byte,
        bytes = request.length_bytes,
        prefix_bytes,
        playback_round = admission.first_playback_round.0,
        start_round = admission.start_round.0,
        earliest_round = earliest.0,
        delay_rounds = admission.start_round.since(earliest),
        peer = %request.peer,
        "stream admitted"
    );
    Ok(Admitted {
        stream: admission.stream,
        start_round: admission.start_round,
        schedule,
        body: session.map(|data| SessionBody {
            data,
            receiver,
            done: false,
        }),
    })
}

/// A late start's reads go to their disks (sent by the driver after this
/// job), each with the session's piece queue; its rounds released at once
/// go to the session.
pub(crate) fn queue_late_start(core: &mut Core, round: Round, late: LateStart) {
    for disk_plan in late.disks {
        let deliver_to = crate::round::deliver_to(core, &disk_plan.commands);
        core.late_batches.push(DiskBatch {
            round,
            reserved_ns: disk_plan.reserved_ns,
            granted_ns: 0,
            commands: disk_plan.commands,
            scheduler: disk_plan.scheduler,
            device: None,
            deliver_to,
            late_start_ns: Some(late.start_ns),
        });
    }
    for release in &late.releases {
        crate::round::send_release(core, release);
    }
}

/// Ends a stream that is still registered when its body is dropped: a job
/// for the round driver, which owns the sessions. A body that sent every
/// byte finished its stream (the client may close before the array's next
/// round says so); otherwise the client disconnected or the server is
/// dropping the connection.
struct ReleaseGuard {
    shared: Arc<Shared>,
    stream: StreamId,
    finished: Arc<AtomicBool>,
    title_counters: Arc<TitleCounters>,
}

impl Drop for ReleaseGuard {
    fn drop(&mut self) {
        let stream = self.stream;
        let finished = self.finished.load(Relaxed);
        let title_counters = Arc::clone(&self.title_counters);
        self.shared.on_core(move |shared, core| {
            let Some(state) = end_stream(core, stream) else {
                return;
            };
            if finished {
                shared.metrics.streams_completed.fetch_add(1, Relaxed);
                title_counters.streams_completed.fetch_add(1, Relaxed);
                return;
            }
            shared.metrics.streams_disconnected.fetch_add(1, Relaxed);
            tracing::info!(
                stream = stream.0,
                title = state.title.id().0,
                peer = %state.peer,
                "client disconnected; reservations released"
            );
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

/// The pieces of one stream-round received so far.
struct Pieces {
    replica: Replica,
    /// Each piece's first (or only) part.
    pieces: Vec<Option<Bytes>>,
    /// The later parts of pieces whose read a backup window cut: (piece,
    /// offset in it, bytes). Empty but for such rounds.
    later_parts: Vec<(u16, u64, Bytes)>,
}

/// A stream's delivery state, wherever its bytes are sent from (a response
/// body hyper polls, [`SessionBody`], or a send loop, `sink`): holds the
/// pieces its disk reads put in its queue until the array releases their
/// round, then makes the round's client bytes.
pub(crate) struct SessionData {
    /// Sent before the first round's data.
    prefix: Option<Bytes>,
    title: Arc<LoadedTitle>,
    pieces_rx: PieceSender,
    /// Pieces of rounds not released yet, by playback round.
    pieces: BTreeMap<PlaybackRound, Pieces>,
    /// Bytes of the first round before the requested range.
    skip_bytes: u64,
    /// Bytes of the requested range not released yet.
    remaining_bytes: u64,
    /// Released rounds the client has taken (read by the driver).
    taken_rounds: Arc<AtomicU32>,
    /// When the request reached admission, and whether a byte went out
    /// since (the stream's start-up, `Metrics::stream_start`).
    asked_at: Instant,
    first_byte_sent: bool,
    guard: ReleaseGuard,
}

impl SessionData {
    /// Counts bytes a socket took without a copy (also counted by
    /// [`SessionData::count_sent`] when their chunk is whole in it).
    pub(crate) fn count_zero_copy(&self, bytes: u64) {
        self.guard
            .shared
            .metrics
            .bytes_sent_zero_copy
            .fetch_add(bytes, Relaxed);
    }

    /// Counts bytes handed to the connection: in all, for the title, and
    /// the first ones as the stream's start-up.
    pub(crate) fn count_sent(&mut self, bytes: u64) {
        let metrics = &self.guard.shared.metrics;
        metrics.bytes_sent.fetch_add(bytes, Relaxed);
        self.guard
            .title_counters
            .bytes_sent
            .fetch_add(bytes, Relaxed);
        if !self.first_byte_sent && bytes > 0 {
            self.first_byte_sent = true;
            metrics.stream_start.observe(self.asked_at.elapsed());
        }
    }

    /// The stream's socket was full.
    pub(crate) fn count_socket_full(&self) {
        self.guard.shared.metrics.socket_full.fetch_add(1, Relaxed);
    }

    /// The client took a released round.
    pub(crate) fn count_taken(&self) {
        self.taken_rounds.fetch_add(1, Relaxed);
    }

    /// The bytes to send before the first round (an MP4 time seek's header).
    pub(crate) fn take_prefix(&mut self) -> Option<Bytes> {
        self.prefix.take()
    }

    /// Every byte of the range is released.
    pub(crate) fn all_released(&self) -> bool {
        self.remaining_bytes == 0
    }

    /// The last byte is sent: dropping the session finishes the stream.
    pub(crate) fn mark_finished(&self) {
        self.guard.finished.store(true, Relaxed);
    }

    /// The client bytes of a released round, trimmed to the range (maybe
    /// empty). `None`: the round has no data, a bug (every piece of the
    /// round was queued before its completion reached the driver, so
    /// before this release).
    pub(crate) fn release_round(
        &mut self,
        playback_round: PlaybackRound,
        replica: Replica,
    ) -> Option<Bytes> {
        for piece in self.pieces_rx.take_all() {
            self.keep(piece);
        }
        let data = self.release(playback_round, replica);
        if data.is_none() {
            tracing::error!(
                stream = self.guard.stream.0,
                playback_round = playback_round.0,
                "a released round has no data (a bug): the response fails"
            );
        }
        data
    }

    /// Keeps a piece; a piece of the other replica (a re-read after an
    /// error) replaces what came before.
    fn keep(&mut self, piece: Piece) {
        let Piece {
            playback_round,
            replica,
            piece,
            offset_bytes,
            data,
            ..
        } = piece;
        let entry = self.pieces.entry(playback_round).or_insert_with(|| Pieces {
            replica,
            pieces: Vec::new(),
            later_parts: Vec::new(),
        });
        if entry.replica != replica {
            *entry = Pieces {
                replica,
                pieces: Vec::new(),
                later_parts: Vec::new(),
            };
        }
        if offset_bytes > 0 {
            entry.later_parts.push((piece, offset_bytes, data));
            return;
        }
        let piece = piece as usize;
        if entry.pieces.len() <= piece {
            entry.pieces.resize_with(piece + 1, || None);
        }
        entry.pieces[piece] = Some(data);
    }

    /// The client bytes of a released round, trimmed to the range.
    fn release(&mut self, playback_round: PlaybackRound, replica: Replica) -> Option<Bytes> {
        // Pieces of this round and any stale ones before it go.
        let later = self.pieces.split_off(&playback_round.next());
        let mut earlier = std::mem::replace(&mut self.pieces, later);
        let (pieces, later_parts) = earlier
            .remove(&playback_round)
            .filter(|p| p.replica == replica)
            .map(|p| (p.pieces, p.later_parts))
            .unwrap_or_default();
        let mut data = assemble(&self.title, playback_round, replica, pieces, later_parts)?;
        if self.skip_bytes > 0 {
            let skip = self.skip_bytes.min(data.len() as u64);
            data = data.slice(skip as usize..);
            self.skip_bytes -= skip;
        }
        if data.len() as u64 > self.remaining_bytes {
            data.truncate(self.remaining_bytes as usize);
        }
        self.remaining_bytes -= data.len() as u64;
        Some(data)
    }
}

/// The HTTP body of a stream hyper sends: woken by each release, it hands
/// the round to hyper, which asks for more only when the socket has taken
/// what came before.
pub struct SessionBody {
    data: SessionData,
    receiver: mpsc::UnboundedReceiver<SessionMsg>,
    done: bool,
}

impl Stream for SessionBody {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let aborted = || std::io::Error::other("the server ended this stream");
        loop {
            if self.done {
                return Poll::Ready(None);
            }
            if let Some(prefix) = self.data.take_prefix() {
                self.data.count_sent(prefix.len() as u64);
                return Poll::Ready(Some(Ok(prefix)));
            }
            if self.data.all_released() {
                self.done = true;
                self.data.mark_finished();
                return Poll::Ready(None);
            }
            match self.receiver.poll_recv(cx) {
                Poll::Ready(Some(SessionMsg::Release {
                    playback_round,
                    replica,
                })) => {
                    let Some(data) = self.data.release_round(playback_round, replica) else {
                        self.done = true;
                        return Poll::Ready(Some(Err(aborted())));
                    };
                    // Taken: the socket asked for more, so the client's
                    // buffer had room for it.
                    self.data.count_taken();
                    if self.data.all_released() {
                        // The last byte is handed over (a response with a
                        // length is not polled again after it).
                        self.data.mark_finished();
                    }
                    if !data.is_empty() {
                        self.data.count_sent(data.len() as u64);
                        return Poll::Ready(Some(Ok(data)));
                    }
                }
                Poll::Ready(Some(SessionMsg::Abort)) | Poll::Ready(None) => {
                    // Ended before its last byte: the response fails.
                    self.done = true;
                    return Poll::Ready(Some(Err(aborted())));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// The client bytes of one stream-round from its pieces: a primary read is
/// the round's data padded to whole blocks (sliced, no copy); a backup's
/// pieces hold the round's fragments in stored order (copied into place).
/// A round with nothing stored (an empty round) has no pieces. A backup
/// piece whose read a backup window cut between rounds comes in parts,
/// joined here. `None`: a primary round's piece is missing, or a cut
/// piece's parts do not join up.
fn assemble(
    title: &LoadedTitle,
    playback_round: PlaybackRound,
    replica: Replica,
    pieces: Vec<Option<Bytes>>,
    later_parts: Vec<(u16, u64, Bytes)>,
) -> Option<Bytes> {
    let playback_round = playback_round.index();
    let client_bytes = title.record.client_bytes[playback_round] as usize;
    if client_bytes == 0 {
        return Some(Bytes::new());
    }
    let mut pieces = pieces.into_iter();
    match replica {
        Replica::Primary => {
            // Only backup reads are recovered over a window, and cut.
            if !later_parts.is_empty() {
                return None;
            }
            let buf = pieces.next().flatten()?;
            Some(buf.slice(..client_bytes))
        }
        Replica::Backup => {
            let layout = title.layout.round(playback_round);
            let mut out = vec![0u8; layout.primary.bytes() as usize];
            for (n, (entry, piece)) in layout.backups.iter().zip(pieces).enumerate() {
                let Some(piece) = piece else {
                    // An empty piece: nothing of the round lies there.
                    continue;
                };
                let joined;
                let data: &[u8] = if later_parts.iter().any(|(p, _, _)| usize::from(*p) == n) {
                    joined = join_parts(&piece, n as u16, &later_parts)?;
                    &joined
                } else {
                    piece.as_ref()
                };
                let mut cursor = 0usize;
                for fragment in &entry.fragments {
                    let len = (fragment.end - fragment.start) as usize;
                    out[fragment.start as usize..fragment.end as usize]
                        .copy_from_slice(&data[cursor..cursor + len]);
                    cursor += len;
                }
            }
            out.truncate(client_bytes);
            Some(Bytes::from(out))
        }
    }
}

/// A cut piece's bytes: its first part followed by its later parts in
/// order (copied once; rare: only backup reads recovered over a backup
/// window are cut). `None` if the parts leave a gap.
fn join_parts(first: &Bytes, piece: u16, later_parts: &[(u16, u64, Bytes)]) -> Option<Vec<u8>> {
    let mut parts: Vec<&(u16, u64, Bytes)> =
        later_parts.iter().filter(|(p, _, _)| *p == piece).collect();
    parts.sort_by_key(|(_, at, _)| *at);
    let mut joined = first.as_ref().to_vec();
    for (_, at, data) in parts {
        if *at != joined.len() as u64 {
            return None;
        }
        joined.extend_from_slice(data.as_ref());
    }
    Some(joined)
}
