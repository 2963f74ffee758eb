//! The round driver: rondo's core on the wall clock.
//!
//! One OS thread. Round r starts at `t0 + r·T` (`std::time::Instant`
//! deadlines, so rounds do not drift). At each boundary it:
//!
//! 1. counts deadline misses of the round that just ended (a live stream's
//!    request not complete by then; disk-round overruns are counted when a
//!    batch reports its end);
//! 2. advances the reservation tables and hands every complete round whose
//!    send round has come to its session (data read in round r is sent in
//!    round r+1), dropping streams whose client has not read for the grace
//!    time;
//! 3. asks the core which reads each disk does this round
//!    (`Reservations::plan_round`) and turns them into device extents from
//!    the titles' layouts and catalog checksums;
//! 4. asks the core which rebuild copies run this round
//!    (`RebuildQueue::next_round`) and grants ingest writes from what they
//!    leave (`Reservations::write_credits_ns`, per disk, through the write gate), and
//!    adds their reads and writes to each disk's batch, so the disk models
//!    serve them with the stream reads; then sends each disk its batch, with
//!    its budget: reserved for streams plus granted to those writers.
//!
//! Between boundaries it receives the I/O threads' completions, assembles
//! each stream-round (one primary request, or the backup's pieces from
//! several disks), and hands late rounds over as soon as they arrive. A
//! read that fails is read again from the other replica (the core's
//! `replica_after_error`) by the disks holding it, in an unplanned batch
//! through their models. It never waits for a client: sessions have bounded
//! channels and a stream that cannot take its data keeps it in its own
//! backlog.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use bytes::Bytes;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use rondo_model::health::DiskState;
use rondo_model::layout::Replica;
use rondo_model::reservation::{PlannedRead, replica_after_error};
use rondo_model::units::StreamId;

use crate::buffers::PooledBuf;
use crate::io::{BatchKind, DiskBatch, IoEvent, JobExtent, ReadJob};
use crate::metrics::GrantedIo;
use crate::session::end_stream;
use crate::state::{Core, Shared};
use crate::titles::LoadedTitle;

/// One stream-round being read: its pieces as they arrive.
struct Inflight {
    title: Arc<LoadedTitle>,
    replica: Replica,
    /// Round of the reads.
    read_round: u64,
    pieces: Vec<Option<PooledBuf>>,
    /// Counted as a deadline miss already.
    missed: bool,
    /// A re-read from the other replica after this stream-round's read
    /// failed: if it fails too, the stream stops.
    recovery: bool,
}

/// The driver thread's own state.
pub struct Driver {
    shared: Arc<Shared>,
    disks: Vec<Sender<DiskBatch>>,
    events: Receiver<IoEvent>,
    inflight: BTreeMap<(StreamId, u32), Inflight>,
    /// The round most recently begun.
    current: u64,
}

/// How often the driver looks at the shutdown flag while waiting.
const SHUTDOWN_POLL: Duration = Duration::from_millis(50);

impl Driver {
    pub fn new(
        shared: Arc<Shared>,
        disks: Vec<Sender<DiskBatch>>,
        events: Receiver<IoEvent>,
    ) -> Driver {
        Driver {
            shared,
            disks,
            events,
            inflight: BTreeMap::new(),
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
                let wait_until = boundary.min(now + SHUTDOWN_POLL);
                match self.events.recv_deadline(wait_until) {
                    Ok(event) => self.on_event(event),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => {
                        tracing::error!("every disk thread has stopped; the round driver stops");
                        self.stop();
                        return;
                    }
                }
            }
            let late = Instant::now().saturating_duration_since(boundary);
            if late > Duration::from_nanos(self.shared.clock.round_ns / 4) {
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

    fn stop(&mut self) {
        let mut core = self.shared.core.lock().expect("core lock");
        let streams: Vec<StreamId> = core.streams.keys().copied().collect();
        for stream in streams {
            if let Some(state) = end_stream(&mut core, stream) {
                state.abort.store(true, Relaxed);
                self.shared.metrics.streams_aborted.fetch_add(1, Relaxed);
            }
        }
        drop(core);
        self.inflight.clear();
        self.disks.clear();
        self.shared.gate.shutdown();
    }

    fn begin_round(&mut self, round: u64) {
        let now = Instant::now();
        self.current = round;
        let shared = Arc::clone(&self.shared);
        let metrics = &shared.metrics;
        metrics.rounds.fetch_add(1, Relaxed);
        let mut core = shared.core.lock().expect("core lock");

        // 1. Deadline misses of the round that just ended, for live streams.
        for ((stream, _), inflight) in self.inflight.iter_mut() {
            if inflight.read_round < round && !inflight.missed {
                inflight.missed = true;
                if core.streams.contains_key(stream) {
                    metrics.stream_round_misses.fetch_add(1, Relaxed);
                    tracing::warn!(
                        stream = stream.0,
                        read_round = inflight.read_round,
                        "deadline miss: a read was not complete when its round ended"
                    );
                }
            }
        }

        // 2. Advance the tables; hand over what may be sent now.
        core.reservations.advance_to(round);
        let ids: Vec<StreamId> = core.streams.keys().copied().collect();
        for id in ids {
            self.flush(&mut core, id, now);
        }

        // 3. This round's reads.
        let (plan, lost) = core.reservations.plan_round(round);
        core.next_round = round + 1;
        for read in &lost {
            metrics.lost_reads.fetch_add(1, Relaxed);
            self.abort(&mut core, read.stream, "no working replica holds its data");
        }
        let mut swaps = std::mem::take(&mut core.ops.device_swaps);
        core.ops.device_swaps = vec![None; swaps.len()];
        let disk_count = plan.len();
        let mut batches: Vec<DiskBatch> = Vec::with_capacity(disk_count);
        let fixed_ns = core.reservations.config().round_fixed_ns;
        for (disk, reads) in plan.iter().enumerate() {
            let disk = disk as u32;
            let mut jobs = Vec::with_capacity(reads.len());
            for read in reads {
                if let Some(job) = self.job(&core, round, read) {
                    jobs.push(job);
                }
            }
            let mut reserved = None;
            if !core.reservations.is_failed(disk) {
                let reserved_ns = fixed_ns + core.reservations.reserved_ns(disk, round);
                let d = &metrics.disks[disk as usize];
                d.last_reserved_ns.store(reserved_ns, Relaxed);
                d.reserved_ns_total.fetch_add(reserved_ns, Relaxed);
                reserved = Some(reserved_ns);
            }
            let mut batch = DiskBatch::round(round, reserved, jobs);
            batch.device = swaps[disk as usize].take();
            batches.push(batch);
        }
        // The rebuild's copies for this round, in the time left unreserved;
        // the ingest gate gets what they leave.
        let rebuild = crate::ops::rebuild_round(&shared, &mut core, round);
        let credits_ns = core
            .reservations
            .write_credits_ns(round, &rebuild.charged_ns);
        // Empty rounds (no bytes) complete at once: they have no extents.
        let empty: Vec<(StreamId, u32)> = self
            .inflight
            .iter()
            .filter(|(_, f)| f.read_round == round && f.pieces.is_empty())
            .map(|(k, _)| *k)
            .collect();
        for key in empty {
            let inflight = self.inflight.remove(&key).expect("listed above");
            self.deliver(
                &mut core,
                key.0,
                key.1,
                inflight.read_round,
                Bytes::new(),
                now,
            );
        }
        drop(core);

        let working = batches.len() as u32;
        let writes = shared.gate.begin_round(round, &credits_ns, working);
        // What was granted goes into the disks' batches: their models serve
        // it with the stream reads, and it is part of the round's budget.
        for (disk, batch) in batches.iter_mut().enumerate() {
            batch.granted_io.extend_from_slice(&rebuild.io[disk]);
            batch.granted_io.extend_from_slice(&writes.io[disk]);
            batch.granted_ns = rebuild.charged_ns[disk] + writes.charged_ns[disk];
            if batch.reserved_ns.is_none() && batch.granted_ns > 0 {
                // A failed disk being rebuilt: no stream reads, but its
                // copies' writes were budgeted (after the fixed term).
                batch.reserved_ns = Some(fixed_ns);
            }
        }
        for (disk, batch) in batches.into_iter().enumerate() {
            // Bounded: a disk rounds behind makes the driver wait here rather
            // than queue without limit; clients never do.
            if self.disks[disk].send(batch).is_err() {
                tracing::error!(disk, "disk thread has stopped");
            }
        }
    }

    /// The device job for one planned read, registering its stream-round.
    fn job(&mut self, core: &Core, round: u64, read: &PlannedRead) -> Option<ReadJob> {
        let state = core.streams.get(&read.stream)?;
        let title = &state.title;
        let playback_round = read.playback_round as usize;
        let layout = title.layout.round(playback_round);
        let records = title.round_extents(playback_round, read.replica);
        let (extents, records) = match read.replica {
            Replica::Primary => (layout.primary.as_slice(), records),
            Replica::Backup => {
                let entry = read.backup_entry as usize;
                let before: usize = layout.backups[..entry]
                    .iter()
                    .map(|b| b.extents.len())
                    .sum();
                let extents = layout.backups[entry].extents.as_slice();
                (extents, &records[before..before + extents.len()])
            }
        };
        let pieces = match read.replica {
            Replica::Primary => 1,
            Replica::Backup => layout.backups.len(),
        };
        let key = (read.stream, read.playback_round);
        let inflight = self.inflight.entry(key).or_insert_with(|| Inflight {
            title: Arc::clone(title),
            replica: read.replica,
            read_round: round,
            pieces: Vec::new(),
            missed: false,
            recovery: false,
        });
        if extents.is_empty() {
            // An empty round: nothing to read.
            return None;
        }
        if inflight.pieces.len() < pieces {
            inflight.pieces.resize_with(pieces, || None);
        }
        Some(ReadJob {
            stream: read.stream,
            playback_round: read.playback_round,
            piece: if read.replica == Replica::Primary {
                0
            } else {
                read.backup_entry as usize
            },
            extents: extents
                .iter()
                .zip(records)
                .map(|(x, r)| JobExtent {
                    device_offset_bytes: x.device_offset_bytes,
                    length_bytes: x.length_bytes,
                    crc32c: r.crc32c,
                })
                .collect(),
        })
    }

    fn on_event(&mut self, event: IoEvent) {
        match event {
            IoEvent::Read {
                disk,
                round: _,
                stream,
                playback_round,
                piece,
                result,
            } => self.on_read(disk, stream, playback_round, piece, result),
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
                let d = &metrics.disks[disk as usize];
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
                        disk,
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
                        disk,
                        round,
                        "disk-round overrun: the batch ended after its round"
                    );
                }
                self.shared.gate.disk_done(round);
            }
        }
    }

    fn on_read(
        &mut self,
        disk: u32,
        stream: StreamId,
        playback_round: u32,
        piece: usize,
        result: Result<PooledBuf, String>,
    ) {
        let key = (stream, playback_round);
        let Some(inflight) = self.inflight.get_mut(&key) else {
            return;
        };
        let buf = match result {
            Ok(buf) => buf,
            Err(reason) => {
                let inflight = self.inflight.remove(&key).expect("present");
                self.on_read_error(disk, stream, playback_round, inflight, &reason);
                return;
            }
        };
        inflight.pieces[piece] = Some(buf);
        if inflight.pieces.iter().any(Option::is_none) {
            return;
        }
        let inflight = self.inflight.remove(&key).expect("present");
        let read_round = inflight.read_round;
        let data = assemble(inflight, playback_round as usize);
        let shared = Arc::clone(&self.shared);
        let mut core = shared.core.lock().expect("core lock");
        self.deliver(
            &mut core,
            stream,
            playback_round,
            read_round,
            data,
            Instant::now(),
        );
    }

    /// A planned read failed (I/O error or bad checksum): count it against
    /// the disk (`ArrayHealth`: suspect, then failed past the threshold) and
    /// read the stream-round from the other replica if the core's rule
    /// (`replica_after_error`) finds one; otherwise, or if that re-read
    /// failed too, stop the stream. The re-read is done by the I/O threads
    /// of the disks holding the other replica, in an unplanned batch through
    /// their models (so the emulated disks spend its time), and assembled
    /// like a planned read; late, it counts as a deadline miss.
    fn on_read_error(
        &mut self,
        disk: u32,
        stream: StreamId,
        playback_round: u32,
        inflight: Inflight,
        reason: &str,
    ) {
        let metrics = &self.shared.metrics;
        metrics.read_errors.fetch_add(1, Relaxed);
        metrics.disks[disk as usize].errors.fetch_add(1, Relaxed);
        let shared = Arc::clone(&self.shared);
        let mut core = shared.core.lock().expect("core lock");
        let was = core.ops.health.state(disk);
        let now = core.ops.health.record_error(disk, self.current);
        crate::ops::publish_state(&shared, &core, disk);
        tracing::warn!(
            disk,
            stream = stream.0,
            playback_round,
            "read error on disk {disk} ({reason}){}",
            if inflight.recovery {
                ""
            } else {
                "; reading the other replica"
            }
        );
        if now == Some(DiskState::Failed) && was != DiskState::Failed {
            crate::ops::fail_disk(
                &shared,
                &mut core,
                disk,
                "read errors passed the health threshold",
            );
        }
        if !core.streams.contains_key(&stream) {
            return;
        }
        if inflight.recovery {
            self.abort(
                &mut core,
                stream,
                &format!("playback round {playback_round}: the other replica failed too: {reason}"),
            );
            return;
        }
        let layout = inflight.title.layout.round(playback_round as usize);
        let backup_disks: Vec<u32> = layout.backups.iter().map(|b| b.disk.0).collect();
        let other = replica_after_error(
            inflight.replica,
            layout.primary_disk.0,
            &backup_disks,
            |d| !core.reservations.is_failed(d),
        );
        let Some(replica) = other else {
            self.abort(
                &mut core,
                stream,
                &format!(
                    "reading playback round {playback_round} failed ({reason}) and no other \
                     working replica holds it"
                ),
            );
            return;
        };
        // The other replica's requests, as `plan_round` would give them.
        let reads: Vec<PlannedRead> = match replica {
            Replica::Primary => vec![(layout.primary_disk.0, 0u16)],
            Replica::Backup => (0..backup_disks.len())
                .map(|entry| (backup_disks[entry], entry as u16))
                .collect(),
        }
        .into_iter()
        .map(|(on_disk, backup_entry)| PlannedRead {
            stream,
            title: inflight.title.id(),
            playback_round,
            disk: on_disk,
            replica,
            backup_entry,
            cost_ns: 0,
        })
        .collect();
        let mut batches: Vec<(u32, ReadJob)> = Vec::new();
        for read in &reads {
            if let Some(job) = self.job(&core, inflight.read_round, read) {
                batches.push((read.disk, job));
            }
        }
        drop(core);
        let key = (stream, playback_round);
        if let Some(again) = self.inflight.get_mut(&key) {
            again.recovery = true;
            again.missed = inflight.missed;
        }
        if batches.is_empty() {
            // Nothing to read (cannot happen for a round that had bytes).
            self.inflight.remove(&key);
            return;
        }
        for (on_disk, job) in batches {
            let mut batch = DiskBatch::round(self.current, None, vec![job]);
            batch.kind = BatchKind::Unplanned;
            if self.disks[on_disk as usize].send(batch).is_err() {
                tracing::error!(disk = on_disk, "disk thread has stopped");
            }
        }
    }

    /// A stream-round is complete: keep it for its send round (or send it
    /// now if that round has begun).
    fn deliver(
        &mut self,
        core: &mut Core,
        stream: StreamId,
        playback_round: u32,
        read_round: u64,
        data: Bytes,
        now: Instant,
    ) {
        let Some(state) = core.streams.get_mut(&stream) else {
            return;
        };
        state
            .ready
            .insert(playback_round as usize, (read_round + 1, data));
        self.flush(core, stream, now);
    }

    /// Hands a stream's sendable rounds to its session; ends it when its
    /// range is all handed over or its client has stalled too long.
    fn flush(&mut self, core: &mut Core, stream: StreamId, now: Instant) {
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

    /// Ends a stream the server cannot serve.
    fn abort(&mut self, core: &mut Core, stream: StreamId, reason: &str) {
        crate::ops::abort_stream(&self.shared, core, stream, reason);
    }
}

/// The client bytes of one stream-round from its pieces: a primary read is
/// the round's data padded to whole blocks (sliced, no copy); a backup's
/// pieces hold the round's fragments in stored order (copied into place).
fn assemble(inflight: Inflight, playback_round: usize) -> Bytes {
    let title = &inflight.title;
    let client_bytes = title.record.client_bytes[playback_round] as usize;
    let mut pieces = inflight.pieces.into_iter();
    match inflight.replica {
        Replica::Primary => {
            let buf = pieces.next().flatten().expect("one piece");
            buf.into_bytes().slice(..client_bytes)
        }
        Replica::Backup => {
            let layout = title.layout.round(playback_round);
            let mut out = vec![0u8; layout.primary.bytes() as usize];
            for (entry, piece) in layout.backups.iter().zip(pieces) {
                let piece = piece.expect("complete");
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
