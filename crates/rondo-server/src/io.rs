//! Per-device I/O threads: one OS thread per disk performs each round's reads
//! in the order the core's disk model serves them (C-SCAN), into pooled
//! aligned buffers, and paces them to the model when timing is emulated.
//!
//! Each round the round driver sends a [`DiskBatch`] over a bounded channel.
//! The thread hands the batch's extents to its `Disk` model
//! (`execute_batch(.., Scheduler::Cscan)`, starting at the round's model
//! time), then reads the extents in the model's service order with
//! `Storage::read_many` (O_DIRECT unless the filesystem refused it; one
//! io_uring submission for a group of reads). Emulated: a command completes
//! at the later of its model completion instant and the real one, so the
//! device behaves like the modelled drive, backlog into the next round
//! included; the thread wakes at most once per [`EMULATION_QUANTUM_NS`],
//! reads together what the drive starts within it, and reports what has
//! completed (a completion is at most one quantum late, never early).
//! Native: no waiting, one read after the other in the model's order. A
//! read's buffer is taken when its first extent is read, not when the batch
//! arrives, so that the round's buffers are not all held at its start.
//! Every extent's CRC32C is checked against the catalog. A request (one
//! stream's 1–2 extents) is done as soon as its last extent is in: its bytes
//! go straight to the stream's session piece queue ([`DiskBatch::deliver_to`];
//! no lock, and never through the driver), then its completion goes to the
//! driver for the array, with the others of the same wake in one
//! [`IoEvent::Reads`]. The batch's end, the model's busy time and the
//! measured busy time follow in a [`IoEvent::BatchDone`].
//!
//! **Other I/O on the device.** A batch also carries the round's
//! [`DiskBatch::granted_io`]: the rebuild's source reads and target writes
//! and the ingest writes that the core granted this disk in this round
//! (`RebuildQueue::next_round`, the write gate's share of
//! `Reservations::write_credits_ns`). They are model commands of their own
//! (`Op::Read` / `Op::Write`), served in the same C-SCAN batch as the stream
//! reads, so the model's head position, cache and backlog see them and the
//! round's busy time (model and, paced, measured) includes them. Their bytes
//! are moved by the thread that owns the data, not here: an ingest round
//! goes through the store's `TitleWriter` (which records the checksums the
//! commit needs), and a copy's write depends on reads on other disks of the
//! same round, so it cannot take a fixed place in one disk's service order.
//! Emulated, the thread spends each such command's model time (it sleeps to
//! its completion instant), so the emulated drive is busy for it exactly as
//! the model says; the host's storage serves the bytes. Native, they are
//! modelled but not waited for. Replica re-reads after a read error are
//! stream reads of a coming round's batch, in its unreserved time (the
//! array queues them); a late start's batch ([`DiskBatch::late_start_ns`])
//! is served from the model's state at its arrival (after its backlog).

use std::collections::HashMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use rondo_model::array::command::CommandExtent;
use rondo_model::array::{Completion, DiskCommand, Purpose, ReadOutcome, batch_plan};
use rondo_model::disk::{CommandTiming, Disk, Scheduler};
use rondo_model::units::{DiskIndex, Round, StreamId};
use rondo_store::{checksum, checksum_append};

use crate::storage::{ReadOp, Storage};

use crate::buffers::{BufferPool, PooledBuf};
use crate::config::DiskTiming;
use crate::session::{Piece, PieceSender};

/// Wall-clock position of rounds: round r starts at `t0 + r·T`.
#[derive(Copy, Clone, Debug)]
pub struct RoundClock {
    pub t0: Instant,
    pub round_duration_ns: u64,
}

impl RoundClock {
    /// When round `round` starts.
    pub fn boundary(&self, round: Round) -> Instant {
        self.t0 + Duration::from_nanos(round.0.saturating_mul(self.round_duration_ns))
    }

    /// The instant `model_ns` nanoseconds after round 0's start (model time).
    pub fn at_model_ns(&self, model_ns: u64) -> Instant {
        self.t0 + Duration::from_nanos(model_ns)
    }

    /// Model time of `instant` (0 before round 0).
    pub fn model_ns(&self, instant: Instant) -> u64 {
        instant.saturating_duration_since(self.t0).as_nanos() as u64
    }
}

/// A disk's commands for one round, as the array planned them.
pub struct DiskBatch {
    pub round: Round,
    /// Disk time admission reserved on this disk for the round, fixed term
    /// included (`None` if the disk serves no reads this round); returned in
    /// [`IoEvent::BatchDone`] to compare with the busy time.
    pub reserved_ns: Option<u64>,
    /// Disk time granted on this disk in this round to re-reads, the
    /// rebuild's copies and ingest writes (their charges, out of the
    /// unreserved time); the round's budget is `reserved_ns + granted_ns`.
    pub granted_ns: u64,
    /// Stream reads (read here, checked, handed to the driver), then the
    /// rebuild's and the ingest's I/O (timed by the model in the same
    /// C-SCAN batch; their bytes are moved by the copier and ingest threads).
    pub commands: Vec<DiskCommand>,
    /// The order the disk serves them in (the retrieval policy's).
    pub scheduler: Scheduler,
    /// A replacement device for this disk (`Store::replace_device`): used
    /// from this batch on.
    pub device: Option<Arc<dyn Storage>>,
    /// Per command, the piece queue of the session its read's bytes go to (`None`
    /// for other commands, or to drop the bytes: tests).
    pub deliver_to: Vec<Option<PieceSender>>,
    /// A late start's batch (`Array::admit_now`): the model time it was
    /// given at, from which the disk serves it (after what it has). `None`:
    /// the round's own batch, served from the round's start.
    pub late_start_ns: Option<u64>,
}

impl DiskBatch {
    /// A batch of `commands` with nothing reserved nor granted (tests).
    pub fn round(round: Round, reserved_ns: Option<u64>, commands: Vec<DiskCommand>) -> DiskBatch {
        DiskBatch {
            round,
            reserved_ns,
            granted_ns: 0,
            commands,
            scheduler: Scheduler::Cscan,
            device: None,
            deliver_to: Vec::new(),
            late_start_ns: None,
        }
    }
}

/// What I/O threads report to the round driver.
pub enum IoEvent {
    /// Stream reads are complete (or failed), in the disk's service order:
    /// their completions for the array (their bytes, when read and checked,
    /// are in the sessions' piece queues). One message per wake of the disk
    /// thread, not per read.
    Reads { round: Round, reads: Vec<ReadDone> },
    /// A disk finished its batch for `round`.
    BatchDone {
        disk: DiskIndex,
        round: Round,
        /// The batch's [`DiskBatch::reserved_ns`] and [`DiskBatch::granted_ns`].
        reserved_ns: Option<u64>,
        granted_ns: u64,
        /// Stream reads (requests) and their bytes.
        requests: usize,
        bytes: u64,
        /// The granted rebuild and ingest commands and their bytes.
        granted_commands: usize,
        /// Stream reads the model served wholly from the drive's cache.
        cache_hits: usize,
        granted_bytes: u64,
        /// The model's service time of those commands (start to completion
        /// of each), part of `model_busy_ns`.
        granted_model_ns: u64,
        /// When the last read completed (or the batch arrived, if empty).
        ended_at: Instant,
        /// A late start's batch: a second batch of the round on this disk.
        late: bool,
        /// `Disk::execute_batch`'s busy time.
        model_busy_ns: u64,
        /// Wall time from the later of the round start and the batch's
        /// arrival to the last completion.
        measured_busy_ns: u64,
    },
}

/// One stream read's completion.
pub struct ReadDone {
    /// Model time of the read's last extent's completion.
    pub model_completion_ns: u64,
    pub completion: Completion,
}

/// A running device thread.
pub struct DeviceThread {
    pub disk: DiskIndex,
    pub batches: Sender<DiskBatch>,
    pub handle: JoinHandle<()>,
}

/// Batches a device thread may have queued before the driver's send waits:
/// more than this means the disk is rounds behind, which admission prevents
/// unless the host's storage is far slower than the model.
pub const BATCH_QUEUE_ROUNDS: usize = 4;

/// Starts disk `disk`'s thread. It exits when the batch channel closes.
pub fn spawn_device(
    disk: DiskIndex,
    device: Arc<dyn Storage>,
    model: Disk,
    timing: DiskTiming,
    clock: RoundClock,
    pool: BufferPool,
    events: Sender<IoEvent>,
) -> std::io::Result<DeviceThread> {
    let (batches, receiver) = crossbeam_channel::bounded(BATCH_QUEUE_ROUNDS);
    let handle = std::thread::Builder::new()
        .name(format!("rondo-disk-{disk}"))
        .spawn(move || {
            let mut worker = Worker {
                disk,
                device,
                model,
                timing,
                clock,
                pool,
                events,
                partials: PartialChecks::default(),
            };
            worker.run(receiver);
        })?;
    Ok(DeviceThread {
        disk,
        batches,
        handle,
    })
}

struct Worker {
    disk: DiskIndex,
    device: Arc<dyn Storage>,
    model: Disk,
    timing: DiskTiming,
    clock: RoundClock,
    pool: BufferPool,
    events: Sender<IoEvent>,
    partials: PartialChecks,
}

/// How far an emulated disk thread may run ahead of its model to read, and
/// how late after its model instant it may report a completion: it wakes at
/// most once per quantum, reading together what the drive starts within it.
/// Assumption: 1 ms is 0.1% of the default 1 s round; completions matter to
/// the driver at round boundaries (releases) and for late starts, where it
/// adds at most 1 ms to the start-up. An NVMe drive serves a 64 KiB read in
/// about 0.1 ms, so a thread woken per read would wake ten times as often;
/// a Cheetah's reads take milliseconds each and are paced as before.
pub const EMULATION_QUANTUM_NS: u64 = 1_000_000;

/// Sleeps until `deadline` (no-op if it has passed).
fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        std::thread::sleep(deadline - now);
    }
}

/// `Ok`, or the mismatch if `data` (an extent's bytes as read) does not
/// match the catalog's checksum.
fn checked(disk: DiskIndex, extent: &CommandExtent, data: &[u8]) -> ReadOutcome {
    match extent.crc32c {
        Some(sum) if checksum(data) != sum => ReadOutcome::BadChecksum(format!(
            "disk {disk} offset {}: checksum mismatch ({} bytes)",
            extent.device_offset_bytes, extent.length_bytes
        )),
        _ => ReadOutcome::Ok,
    }
}

/// The checksums of extents a backup window cut between rounds
/// (`CommandExtent::whole`), carried from part to part: a disk reads one
/// stream's parts of an extent in order, in its own rounds, and the
/// whole's checksum is checked when its last part is read.
#[derive(Default)]
struct PartialChecks {
    /// By stream and whole extent's device offset (streams of one title
    /// read the same extents, and their parts interleave): the bytes
    /// checked so far and their CRC32C.
    running: HashMap<(StreamId, u64), (u64, u32)>,
}

/// Wholes whose parts stopped coming (their stream ended between parts)
/// are forgotten beyond this many (assumption: far more than the cuts in
/// flight on one disk, at most one per round per backup window).
const PARTIAL_CHECKS_MAX: usize = 4096;

impl PartialChecks {
    /// Checks one extent's bytes as read for `command`: against its own
    /// checksum, or, for a part of a cut extent, carried on to the whole's.
    fn check(
        &mut self,
        disk: DiskIndex,
        command: &DiskCommand,
        extent: &CommandExtent,
        data: &[u8],
    ) -> ReadOutcome {
        let (Some(whole), Purpose::Deliver { stream, .. }) = (extent.whole, command.purpose) else {
            return checked(disk, extent, data);
        };
        let key = (stream, whole.device_offset_bytes);
        let at = extent.device_offset_bytes - whole.device_offset_bytes;
        let so_far = if at == 0 {
            Some(0)
        } else {
            match self.running.remove(&key) {
                Some((checked_bytes, crc)) if checked_bytes == at => Some(crc),
                _ => None,
            }
        };
        let Some(so_far) = so_far else {
            return ReadOutcome::IoError(format!(
                "disk {disk} offset {}: the parts of this extent before byte {at} were not read, \
                 so its checksum cannot be checked",
                whole.device_offset_bytes
            ));
        };
        let crc = checksum_append(so_far, data);
        let end = at + extent.length_bytes;
        if end < whole.length_bytes {
            if self.running.len() >= PARTIAL_CHECKS_MAX {
                self.running.clear();
            }
            self.running.insert(key, (end, crc));
            return ReadOutcome::Ok;
        }
        match whole.crc32c {
            Some(sum) if crc != sum => ReadOutcome::BadChecksum(format!(
                "disk {disk} offset {}: checksum mismatch ({} bytes, read in parts)",
                whole.device_offset_bytes, whole.length_bytes
            )),
            _ => ReadOutcome::Ok,
        }
    }
}

impl Worker {
    fn run(&mut self, batches: Receiver<DiskBatch>) {
        for batch in batches {
            self.execute(batch);
        }
    }

    fn execute(&mut self, mut batch: DiskBatch) {
        let arrived_at = Instant::now();
        if let Some(device) = batch.device.take() {
            tracing::info!(disk = self.disk.0, device = %device.describe(), "disk thread uses its new device");
            self.device = device;
        }
        let round_start = self.clock.boundary(batch.round);
        // One model request per extent, a read group's rounds joined
        // (`batch_plan`), with the command extents each one reads.
        let plan = batch_plan(&batch.commands);
        let model_start_ns = batch
            .late_start_ns
            .unwrap_or_else(|| self.clock.model_ns(round_start));
        let outcome =
            match self
                .model
                .execute_batch(&plan.requests, model_start_ns, batch.scheduler)
            {
                Ok(outcome) => outcome,
                Err(e) => {
                    // Checked at start-up (devices lie on the model disk), so this
                    // is a bug; fail the reads rather than the thread.
                    let reason =
                        format!("disk {}: the disk model refused the batch: {e}", self.disk);
                    tracing::error!("{reason}");
                    let reads = batch
                        .commands
                        .iter()
                        .filter_map(|command| {
                            read_done(0, command, ReadOutcome::IoError(reason.clone()))
                        })
                        .collect();
                    self.send_reads(batch.round, reads);
                    self.done(&batch, arrived_at, 0, 0, 0, 0);
                    return;
                }
            };
        let mut state = BatchState {
            buffers: batch.commands.iter().map(|_| None).collect(),
            failures: vec![None; batch.commands.len()],
            extents_left: batch
                .commands
                .iter()
                .map(|c| c.extents.iter().filter(|x| x.length_bytes > 0).count())
                .collect(),
            granted_model_ns: 0,
        };
        let accesses = &outcome.commands;
        // The media accesses read so far, and reported so far (a prefix of
        // those read: completions go out in service order).
        let mut read_count = 0;
        let mut reported_count = 0;
        let mut ended_at = arrived_at;
        while reported_count < accesses.len() {
            let now_ns = self.clock.model_ns(Instant::now());
            // Read what the drive starts within the quantum (emulated), or
            // the next access (native: in the model's order, one at a time).
            let first = read_count;
            match self.timing {
                DiskTiming::Emulated => {
                    while read_count < accesses.len()
                        && accesses[read_count].1.start_ns <= now_ns + EMULATION_QUANTUM_NS
                    {
                        read_count += 1;
                    }
                    // The next one to report is always read first.
                    read_count = read_count.max(reported_count + 1);
                }
                DiskTiming::Native => read_count = reported_count + 1,
            }
            self.read_accesses(
                &batch,
                &plan.owners,
                accesses,
                first..read_count,
                &mut state,
            );
            // Report, in order, what is read and (emulated) complete in the
            // model: a command completes at the later of the two instants.
            let now = Instant::now();
            let now_ns = self.clock.model_ns(now);
            let mut reads = Vec::new();
            while reported_count < read_count
                && (self.timing == DiskTiming::Native
                    || accesses[reported_count].1.completion_ns <= now_ns)
            {
                let (request, timing) = accesses[reported_count];
                ended_at = now;
                reported_count += 1;
                let owners = &plan.owners[request];
                if owners
                    .iter()
                    .all(|&(c, _)| !is_delivery(&batch.commands[c]))
                {
                    // Another thread moves the bytes; the drive is busy for
                    // the model's time all the same.
                    state.granted_model_ns += timing.completion_ns.saturating_sub(timing.start_ns);
                    continue;
                }
                for &(c, _) in owners {
                    state.extents_left[c] -= 1;
                    if state.extents_left[c] > 0 {
                        continue;
                    }
                    let command = &batch.commands[c];
                    let outcome = state.failures[c].take().unwrap_or(ReadOutcome::Ok);
                    if outcome == ReadOutcome::Ok {
                        let data = state.buffers[c].take();
                        let queue = batch.deliver_to.get(c).and_then(Option::as_ref);
                        deliver(command, data, queue);
                    }
                    reads.extend(read_done(timing.completion_ns, command, outcome));
                }
            }
            self.send_reads(batch.round, reads);
            if reported_count == accesses.len() || self.timing == DiskTiming::Native {
                continue;
            }
            // Sleep to the next event: the next read's start (less the
            // quantum) or the next completion, and at least one quantum, so
            // that a disk thread wakes at most once per quantum.
            let mut next_ns = accesses[reported_count].1.completion_ns;
            if let Some(&(_, next)) = accesses.get(read_count) {
                next_ns = next_ns.min(next.start_ns.saturating_sub(EMULATION_QUANTUM_NS));
            }
            sleep_until(
                self.clock
                    .at_model_ns(next_ns.max(now_ns + EMULATION_QUANTUM_NS)),
            );
        }
        let busy_from = round_start.max(arrived_at);
        let measured_busy_ns = ended_at.saturating_duration_since(busy_from).as_nanos() as u64;
        let cache_hits = outcome
            .commands
            .iter()
            .filter(|(r, t)| {
                t.service == rondo_model::disk::ServiceKind::FullHit
                    && plan.owners[*r]
                        .iter()
                        .any(|&(c, _)| is_delivery(&batch.commands[c]))
            })
            .count();
        self.done(
            &batch,
            ended_at,
            outcome.busy_ns,
            measured_busy_ns,
            state.granted_model_ns,
            cache_hits,
        );
    }

    /// Reads the stream extents of the media accesses `range` (indices into
    /// the model's service order) in one submission to the device, each into
    /// its command's buffer (taken when its first extent is read), and
    /// checks each against its checksum.
    fn read_accesses(
        &mut self,
        batch: &DiskBatch,
        owners: &[Vec<(usize, usize)>],
        accesses: &[(usize, CommandTiming)],
        range: std::ops::Range<usize>,
        state: &mut BatchState,
    ) {
        // (command, offset in its buffer, extent) of every extent to read.
        let mut wanted: Vec<(usize, u64, &CommandExtent)> = Vec::new();
        for &(request, _) in &accesses[range] {
            for &(c, e) in &owners[request] {
                let command = &batch.commands[c];
                if !is_delivery(command) || state.failures[c].is_some() {
                    continue;
                }
                let mut extents = command.extents.iter().filter(|x| x.length_bytes > 0);
                let at: u64 = extents.by_ref().take(e).map(|x| x.length_bytes).sum();
                let extent = extents
                    .next()
                    .expect("the plan names the command's extents");
                if state.buffers[c].is_none() {
                    state.buffers[c] = Some(self.pool.take(command.bytes() as usize));
                }
                wanted.push((c, at, extent));
            }
        }
        if wanted.is_empty() {
            return;
        }
        // Disjoint slices of the buffers: by command, in buffer order.
        wanted.sort_by_key(|&(c, at, _)| (c, at));
        let mut ops: Vec<ReadOp<'_>> = Vec::with_capacity(wanted.len());
        let mut buffers = state.buffers.iter_mut().enumerate();
        let mut current: Option<(usize, &mut [u8], u64)> = None;
        for &(c, at, extent) in &wanted {
            if current.as_ref().is_none_or(|(cc, _, _)| *cc != c) {
                let buf = buffers
                    .find(|(i, _)| *i == c)
                    .and_then(|(_, b)| b.as_mut())
                    .expect("taken above");
                current = Some((c, buf.as_mut_slice(), 0));
            }
            let (_, rest, pos) = current.as_mut().expect("set above");
            let (_, tail) = std::mem::take(rest).split_at_mut((at - *pos) as usize);
            let (mine, tail) = tail.split_at_mut(extent.length_bytes as usize);
            *rest = tail;
            *pos = at + extent.length_bytes;
            ops.push(ReadOp {
                device_offset_bytes: extent.device_offset_bytes,
                buf: mine,
            });
        }
        let results = self.device.read_many(&mut ops);
        for ((op, result), &(c, _, extent)) in ops.iter().zip(results).zip(&wanted) {
            if state.failures[c].is_some() {
                continue;
            }
            let outcome = match result {
                Err(err) => ReadOutcome::IoError(err.to_string()),
                Ok(()) => self
                    .partials
                    .check(self.disk, &batch.commands[c], extent, op.buf),
            };
            if outcome != ReadOutcome::Ok {
                state.failures[c] = Some(outcome);
            }
        }
    }

    /// Sends a wake's completions to the driver in one message.
    fn send_reads(&self, round: Round, reads: Vec<ReadDone>) {
        if reads.is_empty() {
            return;
        }
        // The driver only goes away at shutdown; a lost report then is fine.
        let _ = self.events.send(IoEvent::Reads { round, reads });
    }

    fn done(
        &mut self,
        batch: &DiskBatch,
        ended_at: Instant,
        model_busy_ns: u64,
        measured_busy_ns: u64,
        granted_model_ns: u64,
        cache_hits: usize,
    ) {
        let (reads, other): (Vec<&DiskCommand>, Vec<&DiskCommand>) =
            batch.commands.iter().partition(|c| is_delivery(c));
        let _ = self.events.send(IoEvent::BatchDone {
            disk: self.disk,
            round: batch.round,
            reserved_ns: batch.reserved_ns,
            granted_ns: batch.granted_ns,
            requests: reads.len(),
            bytes: reads.iter().map(|c| c.bytes()).sum(),
            granted_commands: other.iter().map(|c| c.extents.len()).sum(),
            granted_bytes: other.iter().map(|c| c.bytes()).sum(),
            granted_model_ns,
            cache_hits,
            ended_at,
            late: batch.late_start_ns.is_some(),
            model_busy_ns,
            measured_busy_ns,
        });
    }
}

/// What a disk thread holds for one batch while it reads it.
struct BatchState {
    /// Per command, its read buffer from its first extent's read until it
    /// is delivered.
    buffers: Vec<Option<PooledBuf>>,
    /// Per command, the first failure of its extents' reads.
    failures: Vec<Option<ReadOutcome>>,
    /// Per command, its extents not yet complete.
    extents_left: Vec<usize>,
    /// The model's service time of the granted (rebuild, ingest) commands.
    granted_model_ns: u64,
}

/// A read's bytes to its session's piece queue (a session that has ended
/// drops them: back to the pool).
fn deliver(command: &DiskCommand, data: Option<PooledBuf>, queue: Option<&PieceSender>) {
    let Purpose::Deliver {
        stream,
        playback_round,
        replica,
        piece,
        ..
    } = command.purpose
    else {
        return;
    };
    if let (Some(data), Some(queue)) = (data, queue) {
        let _ = queue.send(Piece {
            stream,
            playback_round,
            replica,
            piece,
            offset_bytes: command.part_offset_bytes,
            data,
        });
    }
}

/// A stream read's completion for the driver (`None` for other commands).
fn read_done(
    model_completion_ns: u64,
    command: &DiskCommand,
    outcome: ReadOutcome,
) -> Option<ReadDone> {
    let Purpose::Deliver {
        stream,
        playback_round,
        replica,
        piece,
        ..
    } = command.purpose
    else {
        return None;
    };
    Some(ReadDone {
        model_completion_ns,
        completion: Completion {
            disk: command.disk,
            stream,
            playback_round,
            replica,
            piece,
            outcome,
        },
    })
}

/// Whether a command is a stream read (its bytes read here).
fn is_delivery(command: &DiskCommand) -> bool {
    matches!(command.purpose, Purpose::Deliver { .. })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rondo_model::array::command::CommandExtent;
    use rondo_model::disk::Op;
    use rondo_model::layout::Replica;
    use rondo_model::units::{DiskIndex, PlaybackRound, Round, StreamId, TitleId};

    /// An extent read in three parts is checked against its whole
    /// checksum when its last part is read, for each stream reading it; a
    /// corrupt part or a part read without the ones before it is an error.
    #[test]
    fn an_extent_read_in_parts_is_checked_whole() {
        let data: Vec<u8> = (0..3 * 16384u32).map(|i| (i * 7 % 251) as u8).collect();
        let whole = rondo_model::array::WholeExtent {
            device_offset_bytes: 1 << 20,
            length_bytes: data.len() as u64,
            crc32c: Some(checksum(&data)),
        };
        let part = |at: usize, len: usize| CommandExtent {
            device_offset_bytes: whole.device_offset_bytes + at as u64,
            length_bytes: len as u64,
            crc32c: None,
            whole: Some(whole),
        };
        let cuts = [(0, 16384), (16384, 8192), (24576, 24576)];
        let disk = DiskIndex(2);
        let (one, two) = (read(1, 0, 0), read(2, 0, 0));
        let mut checks = PartialChecks::default();
        // Two streams of one title read the same extent in parts, their
        // parts interleaved: each is checked on its own.
        for &(at, len) in &cuts {
            for command in [&one, &two] {
                let outcome = checks.check(disk, command, &part(at, len), &data[at..at + len]);
                assert_eq!(outcome, ReadOutcome::Ok, "part at {at}");
            }
        }
        assert!(checks.running.is_empty(), "a whole checked is forgotten");
        // One corrupt byte in the middle part: the last part reports it.
        let mut bad = data.clone();
        bad[20000] ^= 1;
        let outcomes: Vec<ReadOutcome> = cuts
            .iter()
            .map(|&(at, len)| checks.check(disk, &one, &part(at, len), &bad[at..at + len]))
            .collect();
        assert_eq!(outcomes[..2], [ReadOutcome::Ok, ReadOutcome::Ok]);
        assert!(
            matches!(&outcomes[2], ReadOutcome::BadChecksum(why) if why.contains("in parts")),
            "{outcomes:?}"
        );
        // A later part without the first: not checkable, an error.
        let (at, len) = cuts[1];
        assert!(matches!(
            checks.check(disk, &one, &part(at, len), &data[at..at + len]),
            ReadOutcome::IoError(_)
        ));
        // An uncut extent is checked against its own checksum as before.
        let own = CommandExtent {
            device_offset_bytes: 0,
            length_bytes: 16384,
            crc32c: Some(checksum(&data[..16384])),
            whole: None,
        };
        assert_eq!(
            checks.check(disk, &one, &own, &data[..16384]),
            ReadOutcome::Ok
        );
        assert!(matches!(
            checks.check(disk, &one, &own, &bad[16384..32768]),
            ReadOutcome::BadChecksum(_)
        ));
    }

    fn command(op: Op, purpose: Purpose, offset_bytes: u64, length_bytes: u64) -> DiskCommand {
        DiskCommand {
            disk: DiskIndex(0),
            round: Round(0),
            op,
            purpose,
            extents: vec![CommandExtent {
                device_offset_bytes: offset_bytes,
                length_bytes,
                crc32c: None,
                whole: None,
            }],
            charge_ns: 0,
            joins_previous: false,
            prefetch_bytes: 0,
            part_offset_bytes: 0,
        }
    }

    fn read(i: u64, offset_bytes: u64, length_bytes: u64) -> DiskCommand {
        let purpose = Purpose::Deliver {
            stream: StreamId(i),
            title: TitleId(0),
            playback_round: PlaybackRound(0),
            replica: Replica::Primary,
            piece: 0,
            recovery: false,
        };
        command(Op::Read, purpose, offset_bytes, length_bytes)
    }

    #[test]
    fn granted_writes_make_the_models_batch_busier() {
        const MIB: u64 = 1024 * 1024;
        let reads: Vec<DiskCommand> = (0..6).map(|i| read(i, i * 300 * MIB, 256 * 1024)).collect();
        let writes: Vec<DiskCommand> = (0..2)
            .map(|i| {
                let purpose = Purpose::IngestWrite {
                    title: TitleId(1),
                    title_round: PlaybackRound(i as u32),
                };
                command(Op::Write, purpose, 100 * MIB + i * 1500 * MIB, MIB)
            })
            .collect();
        let round_duration_ns = 1_000_000_000;
        // The same two rounds on two fresh drives: the second round with
        // the writes on one of them. Head position carries across rounds.
        let mut plain = Disk::from_name("cheetah-4lp").unwrap();
        let mut busy = Disk::from_name("cheetah-4lp").unwrap();
        let reads_only = batch_plan(&reads).requests;
        let both: Vec<DiskCommand> = reads.iter().chain(&writes).cloned().collect();
        let plan = batch_plan(&both);
        let with_writes = plan.requests;
        assert_eq!(with_writes.len(), reads_only.len() + 2);
        assert_eq!(with_writes[6].op, Op::Write);
        assert_eq!(plan.owners[6], [(6, 0)]);
        for disk in [&mut plain, &mut busy] {
            disk.execute_batch(&reads_only, 0, Scheduler::Cscan)
                .unwrap();
        }
        let without = plain
            .execute_batch(&reads_only, round_duration_ns, Scheduler::Cscan)
            .unwrap();
        let with = busy
            .execute_batch(&with_writes, round_duration_ns, Scheduler::Cscan)
            .unwrap();
        // 2 MiB written at the Cheetah's 10–15 MB/s media rate is over 130 ms
        // of transfer alone, plus positioning for each write.
        assert!(
            with.busy_ns > without.busy_ns + 130_000_000,
            "with writes {} ns, without {} ns",
            with.busy_ns,
            without.busy_ns
        );
        // The writes are served inside the C-SCAN order, not appended.
        let order: Vec<usize> = with.commands.iter().map(|c| c.0).collect();
        let first_write = order.iter().position(|&i| i >= 6).unwrap();
        assert!(first_write < order.len() - 2, "{order:?}");
        // The model's time for the write commands is most of the difference.
        let write_ns: u64 = with
            .commands
            .iter()
            .filter(|c| c.0 >= 6)
            .map(|c| c.1.completion_ns - c.1.start_ns)
            .sum();
        assert!(
            write_ns >= 130_000_000 && write_ns <= with.busy_ns,
            "{write_ns}"
        );
    }
}
