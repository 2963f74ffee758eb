//! The round driver: the array on the wall clock.
//!
//! One OS thread. Round r starts at `t0 + r·T` (`std::time::Instant`
//! deadlines, so rounds do not drift; T is asked of the array). At each
//! boundary it:
//!
//! 1. hands the array the ingest writers' requests (`gate`), then asks it to
//!    begin the round (`Array::begin_round`): the misses of the round that
//!    ended, the streams it stopped, and every disk's commands — stream
//!    reads chosen by the retrieval policy, re-reads after errors, the
//!    rebuild's copies and ingest writes, each fully resolved to extents
//!    with checksums and charged to the round's budget;
//! 2. hands every complete round whose send round has come to its session
//!    (data read in round r is sent in round r+1), dropping streams whose
//!    client has not read for the grace time;
//! 3. sends each disk its batch, the rebuild's copies to the copier and the
//!    ingest grants to the gate.
//!
//! Between boundaries it receives the I/O threads' completions and hands
//! each to the array (`Array::complete`), whose effects it carries out: a
//! complete stream-round is assembled from its pieces and kept for its send
//! round; a failed read is re-read from the other replica in a coming
//! round's unreserved time (the array queues it); a disk that fails is
//! recorded in the data directory; a stream the array stops is ended. The
//! driver decides nothing itself: it never waits for a client (sessions have
//! bounded channels, and a stream that cannot take its data keeps it in its
//! own backlog).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender};
use rondo_model::array::{
    Aborted, Completion, Effect, ReadOutcome, RoundPlan, RoundReady, state_name,
};
use rondo_model::layout::Replica;
use rondo_model::units::StreamId;

use crate::buffers::PooledBuf;
use crate::gate::GateRequest;
use crate::io::{DiskBatch, IoEvent};
use crate::metrics::GrantedIo;
use crate::session::end_stream;
use crate::state::{Core, CoreJob, Shared};
use crate::titles::LoadedTitle;

/// The pieces of one stream-round read so far.
struct Pieces {
    replica: Replica,
    pieces: Vec<Option<PooledBuf>>,
}

/// The driver thread's own state.
pub struct Driver {
    shared: Arc<Shared>,
    /// The array and the sessions: this thread's alone.
    core: Core,
    disks: Vec<Sender<DiskBatch>>,
    events: Receiver<IoEvent>,
    /// Jobs from HTTP handlers, sessions and the copier, run on the core.
    jobs: Receiver<CoreJob>,
    /// Bytes of stream-rounds not complete yet (the array decides when they
    /// are; this only holds their data).
    pieces: BTreeMap<(StreamId, u32), Pieces>,
    /// The round most recently begun.
    current: u64,
}

/// How often the driver looks at the shutdown flag while waiting.
const SHUTDOWN_POLL: Duration = Duration::from_millis(50);

impl Driver {
    pub fn new(
        shared: Arc<Shared>,
        core: Core,
        disks: Vec<Sender<DiskBatch>>,
        events: Receiver<IoEvent>,
        jobs: Receiver<CoreJob>,
    ) -> Driver {
        Driver {
            shared,
            core,
            disks,
            events,
            jobs,
            pieces: BTreeMap::new(),
            current: 0,
        }
    }

    /// Runs rounds until shutdown; then ends every stream and closes the
    /// disks' channels (their threads exit after their current batch).
    pub fn run(mut self) {
        let mut round = 0u64;
        loop {
            let boundary = self.shared.clock.boundary(round);
            loop {
                if self.shared.shutting_down.load(Relaxed) {
                    self.stop();
                    return;
                }
                let now = Instant::now();
                if now >= boundary {
                    break;
                }
                let wait = boundary.min(now + SHUTDOWN_POLL) - now;
                crossbeam_channel::select! {
                    recv(self.events) -> event => match event {
                        Ok(event) => self.on_event(event),
                        Err(_) => {
                            tracing::error!("every disk thread has stopped; the round driver stops");
                            self.stop();
                            return;
                        }
                    },
                    recv(self.jobs) -> job => {
                        if let Ok(job) = job {
                            job(&self.shared, &mut self.core);
                        }
                    },
                    default(wait) => {}
                }
                self.publish();
            }
            let late = Instant::now().saturating_duration_since(boundary);
            if late > Duration::from_nanos(self.shared.clock.round_duration_ns / 4) {
                tracing::warn!(
                    round,
                    late_ms = late.as_millis() as u64,
                    "round started late"
                );
            }
            self.begin_round(round);
            round += 1;
        }
    }

    /// Publishes what others read without asking: the sessions held.
    fn publish(&self) {
        self.shared
            .active_streams
            .store(self.core.streams.len(), Relaxed);
    }

    fn stop(&mut self) {
        let core = &mut self.core;
        let aborted = core.array.abort_all();
        for a in &aborted {
            if let Some(state) = core.streams.remove(&a.stream) {
                state.abort.store(true, Relaxed);
                self.shared.metrics.streams_aborted.fetch_add(1, Relaxed);
            }
        }
        // Sessions the array no longer knows (their reads were done).
        for (_, state) in std::mem::take(&mut core.streams) {
            state.abort.store(true, Relaxed);
            self.shared.metrics.streams_aborted.fetch_add(1, Relaxed);
        }
        self.publish();
        self.pieces.clear();
        self.disks.clear();
        self.shared.gate.shutdown();
    }

    fn begin_round(&mut self, round: u64) {
        let now = Instant::now();
        self.current = round;
        let shared = Arc::clone(&self.shared);
        let metrics = &shared.metrics;
        metrics.rounds.fetch_add(1, Relaxed);
        let core = &mut self.core;

        // 1. The writers' requests, then the array's plan of the round.
        for request in shared.gate.take_requests() {
            match request {
                GateRequest::Begin { title, layout } => core.array.begin_ingest(title, layout),
                GateRequest::Want { title, round } => core.array.want_write(title, round),
                GateRequest::End { title } => {
                    core.array.end_ingest(title);
                }
            }
        }
        let plan = core.array.begin_round(round);
        for miss in &plan.missed {
            if !core.streams.contains_key(&miss.stream) {
                continue;
            }
            if miss.recovery {
                metrics.recovery_misses.fetch_add(1, Relaxed);
            } else {
                metrics.stream_round_misses.fetch_add(1, Relaxed);
                tracing::warn!(
                    stream = miss.stream.0,
                    read_round = miss.read_round,
                    "deadline miss: a read was not complete when its round ended"
                );
            }
        }
        for a in &plan.aborted {
            metrics.lost_reads.fetch_add(1, Relaxed);
            self.aborted(a);
        }

        // 2. Hand over what may be sent now; pieces of streams whose session
        // ended (a client that left mid-round) are dropped.
        let core = &self.core;
        self.pieces
            .retain(|(stream, _), _| core.streams.contains_key(stream));
        let ids: Vec<StreamId> = self.core.streams.keys().copied().collect();
        for id in ids {
            self.flush(id, now);
        }
        for ready in &plan.ready {
            // Empty rounds: nothing to read.
            self.deliver(ready, Bytes::new(), now);
        }

        // 3. The disks' batches, the copies and the grants.
        let core = &mut self.core;
        let mut swaps = std::mem::take(&mut core.ops.device_swaps);
        core.ops.device_swaps = vec![None; swaps.len()];
        crate::ops::rebuild::hand_out(&shared, core, &plan);
        let RoundPlan {
            disks,
            ingest_grants,
            ..
        } = plan;
        for disk_plan in &disks {
            if let Some(reserved_ns) = disk_plan.reserved_ns.filter(|_| disk_plan.serving) {
                let d = &metrics.disks[disk_plan.disk.index()];
                d.last_reserved_ns.store(reserved_ns, Relaxed);
                d.reserved_ns_total.fetch_add(reserved_ns, Relaxed);
            }
        }
        shared
            .gate
            .begin_round(round, &ingest_grants, disks.len() as u32);
        for disk_plan in disks {
            let disk = disk_plan.disk.index();
            let batch = DiskBatch {
                round,
                reserved_ns: disk_plan.reserved_ns,
                granted_ns: disk_plan.granted_ns,
                commands: disk_plan.commands,
                scheduler: disk_plan.scheduler,
                device: swaps[disk].take(),
            };
            // Bounded: a disk rounds behind makes the driver wait here rather
            // than queue without limit; clients never do.
            if self.disks[disk].send(batch).is_err() {
                tracing::error!(disk, "disk thread has stopped");
            }
        }
    }

    fn on_event(&mut self, event: IoEvent) {
        match event {
            IoEvent::Read {
                completion, data, ..
            } => self.on_read(completion, data),
            IoEvent::BatchDone {
                disk,
                round,
                reserved_ns,
                granted_ns,
                requests,
                bytes,
                granted_commands,
                granted_bytes,
                granted_model_ns,
                ended_at,
                model_busy_ns,
                measured_busy_ns,
            } => {
                let metrics = &self.shared.metrics;
                let d = &metrics.disks[disk.index()];
                d.rounds.fetch_add(1, Relaxed);
                d.reads.fetch_add(requests as u64, Relaxed);
                d.bytes_read.fetch_add(bytes, Relaxed);
                let granted = GrantedIo {
                    granted_ns,
                    commands: granted_commands as u64,
                    bytes: granted_bytes,
                    model_ns: granted_model_ns,
                };
                let check =
                    d.record_round(round, reserved_ns, granted, model_busy_ns, measured_busy_ns);
                if check.measured_over || check.model_over {
                    tracing::warn!(
                        disk = disk.0,
                        round,
                        reserved_ms = reserved_ns.unwrap_or(0) as f64 / 1e6,
                        granted_ms = granted_ns as f64 / 1e6,
                        granted_model_ms = granted_model_ns as f64 / 1e6,
                        model_busy_ms = model_busy_ns as f64 / 1e6,
                        measured_busy_ms = measured_busy_ns as f64 / 1e6,
                        "disk busier than reserved and granted in a round{}",
                        if check.model_over {
                            " (the disk model too: the round bound does not hold)"
                        } else {
                            " (the model was not: the device or the host was slower than the model)"
                        }
                    );
                }
                if ended_at > self.shared.clock.boundary(round + 1) {
                    d.overruns.fetch_add(1, Relaxed);
                    metrics.disk_round_overruns.fetch_add(1, Relaxed);
                    tracing::warn!(
                        disk = disk.0,
                        round,
                        "disk-round overrun: the batch ended after its round"
                    );
                }
                self.shared.gate.disk_done(round);
            }
        }
    }

    /// A stream read finished: keep its bytes, and let the array decide.
    fn on_read(&mut self, completion: Completion, data: Option<PooledBuf>) {
        let key = (completion.stream, completion.playback_round);
        let shared = Arc::clone(&self.shared);
        // Keep the piece's bytes; the array says when the round is whole.
        if let (ReadOutcome::Ok, Some(data)) = (&completion.outcome, data)
            && self.core.streams.contains_key(&completion.stream)
        {
            let entry = self.pieces.entry(key).or_insert_with(|| Pieces {
                replica: completion.replica,
                pieces: Vec::new(),
            });
            if entry.replica != completion.replica {
                // A re-read from the other replica replaces what came before.
                *entry = Pieces {
                    replica: completion.replica,
                    pieces: Vec::new(),
                };
            }
            let piece = completion.piece as usize;
            if entry.pieces.len() <= piece {
                entry.pieces.resize_with(piece + 1, || None);
            }
            entry.pieces[piece] = Some(data);
        }
        if completion.outcome != ReadOutcome::Ok {
            let metrics = &shared.metrics;
            metrics.read_errors.fetch_add(1, Relaxed);
            metrics.disks[completion.disk.index()]
                .errors
                .fetch_add(1, Relaxed);
            self.pieces.remove(&key);
            let reason = match &completion.outcome {
                ReadOutcome::IoError(e) | ReadOutcome::BadChecksum(e) => e.as_str(),
                ReadOutcome::Ok => "",
            };
            tracing::warn!(
                disk = completion.disk.0,
                stream = completion.stream.0,
                playback_round = completion.playback_round,
                "read error on disk {} ({reason})",
                completion.disk
            );
        }
        let effects = self.core.array.complete(&completion);
        self.apply(effects, Instant::now());
    }

    /// Carries out the array's effects.
    fn apply(&mut self, effects: Vec<Effect>, now: Instant) {
        for effect in effects {
            match effect {
                Effect::Ready(ready) => {
                    let key = (ready.stream, ready.playback_round);
                    let Some(pieces) = self.pieces.remove(&key) else {
                        continue;
                    };
                    let Some(state) = self.core.streams.get(&ready.stream) else {
                        continue;
                    };
                    let data = assemble(&state.title, &ready, pieces);
                    self.deliver(&ready, data, now);
                }
                Effect::ReReadQueued {
                    stream,
                    playback_round,
                    replica,
                } => {
                    self.shared.metrics.rereads.fetch_add(1, Relaxed);
                    tracing::info!(
                        stream = stream.0,
                        playback_round,
                        ?replica,
                        "reading the other replica in the next round's unreserved time"
                    );
                }
                Effect::DiskState { disk, state } => {
                    crate::ops::publish_state(&self.shared, disk, state);
                    tracing::warn!(
                        disk = disk.0,
                        state = state_name(state),
                        "disk state changed"
                    );
                }
                Effect::DiskFailed { disk, cause } => {
                    crate::ops::record_failed(&self.shared, disk, &cause.to_string());
                    tracing::error!(
                        disk = disk.0,
                        "disk failed ({cause}): its reads go to the other replicas from the next round"
                    );
                }
                Effect::Aborted(a) => self.aborted(&a),
            }
        }
    }

    /// A stream the array stopped: its response fails.
    fn aborted(&mut self, a: &Aborted) {
        crate::ops::end_aborted(&self.shared, &mut self.core, a);
        let keys: Vec<(StreamId, u32)> = self
            .pieces
            .range((a.stream, 0)..=(a.stream, u32::MAX))
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            self.pieces.remove(&key);
        }
    }

    /// A stream-round is complete: keep it for its send round (or send it
    /// now if that round has begun).
    fn deliver(&mut self, ready: &RoundReady, data: Bytes, now: Instant) {
        let Some(state) = self.core.streams.get_mut(&ready.stream) else {
            return;
        };
        state
            .ready
            .insert(ready.playback_round as usize, (ready.send_round, data));
        self.flush(ready.stream, now);
    }

    /// Hands a stream's sendable rounds to its session; ends it when its
    /// range is all handed over or its client has stalled too long.
    fn flush(&mut self, stream: StreamId, now: Instant) {
        let core = &mut self.core;
        let Some(state) = core.streams.get_mut(&stream) else {
            return;
        };
        let finished = state.flush(self.current, now);
        if finished {
            end_stream(core, stream);
            self.shared.metrics.streams_completed.fetch_add(1, Relaxed);
            return;
        }
        let grace = self.shared.config.stall_grace;
        if let Some(since) = state.stalled_since
            && now.saturating_duration_since(since) >= grace
        {
            let state = end_stream(core, stream).expect("present");
            state.abort.store(true, Relaxed);
            self.shared
                .metrics
                .streams_dropped_stalled
                .fetch_add(1, Relaxed);
            tracing::warn!(
                stream = stream.0,
                title = state.title.id().0,
                peer = %state.peer,
                grace_s = grace.as_secs_f64(),
                held_rounds = state.backlog.len(),
                "client stopped reading; stream dropped after the grace time"
            );
        }
    }
}

/// The client bytes of one stream-round from its pieces: a primary read is
/// the round's data padded to whole blocks (sliced, no copy); a backup's
/// pieces hold the round's fragments in stored order (copied into place).
fn assemble(title: &LoadedTitle, ready: &RoundReady, pieces: Pieces) -> Bytes {
    let playback_round = ready.playback_round as usize;
    let client_bytes = title.record.client_bytes[playback_round] as usize;
    let mut pieces = pieces.pieces.into_iter();
    match ready.replica {
        Replica::Primary => {
            let buf = pieces.next().flatten().expect("one piece");
            buf.into_bytes().slice(..client_bytes)
        }
        Replica::Backup => {
            let layout = title.layout.round(playback_round);
            let mut out = vec![0u8; layout.primary.bytes() as usize];
            for (entry, piece) in layout.backups.iter().zip(pieces) {
                let Some(piece) = piece else {
                    // An empty piece: nothing of the round lies there.
                    continue;
                };
                let data = piece.as_ref();
                let mut cursor = 0usize;
                for fragment in &entry.fragments {
                    let len = (fragment.end - fragment.start) as usize;
                    out[fragment.start as usize..fragment.end as usize]
                        .copy_from_slice(&data[cursor..cursor + len]);
                    cursor += len;
                }
            }
            out.truncate(client_bytes);
            Bytes::from(out)
        }
    }
}
