//! Per-device I/O threads: one OS thread per disk performs each round's reads
//! in the order the core's disk model serves them (C-SCAN), into pooled
//! aligned buffers, and paces them to the model when timing is emulated.
//!
//! Each round the round driver sends a [`DiskBatch`] over a bounded channel.
//! The thread hands the batch's extents to its `Disk` model
//! (`execute_batch(.., Scheduler::Cscan)`, starting at the round's model
//! time), then reads every extent in the model's service order with
//! `Device::read_at` (O_DIRECT unless the filesystem refused it). Emulated: a
//! command completes at the later of its model completion instant and the
//! real one, so the device behaves like the modelled drive, backlog into the
//! next round included. Native: no waiting, the model only orders the reads.
//! Every extent's CRC32C is checked against the catalog. A request (one
//! stream's 1–2 extents) is done as soon as its last extent is in: its bytes
//! go straight to the stream's session piece queue ([`DiskBatch::deliver_to`];
//! no lock, and never through the driver), then its completion goes to the
//! driver for the array. The batch's end, the model's busy time and the
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
//! modelled but not waited for. Replica re-reads after a read error are real
//! reads done here, in an unplanned batch ([`BatchKind::Unplanned`]) served
//! from the model's state at arrival (after its backlog); their busy time is
//! carried into the disk's next round report, since nothing reserved them.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use rondo_model::array::command::CommandExtent;
use rondo_model::array::{Completion, DiskCommand, Purpose, ReadOutcome, batch_plan};
use rondo_model::disk::{Disk, Scheduler};
use rondo_model::units::{DiskIndex, Round};
use rondo_store::checksum;

use crate::storage::Storage;

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
    /// One stream read is complete (or failed): its completion for the
    /// array (its bytes, when read and checked, are in the session's piece queue).
    Read {
        round: Round,
        /// Model time of the read's last extent's completion.
        model_completion_ns: u64,
        completion: Completion,
    },
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
}

/// Sleeps until `deadline` (no-op if it has passed).
fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        std::thread::sleep(deadline - now);
    }
}

/// The outcome of reading one extent into `slice`: the device's error, or a
/// checksum that does not match the catalog's.
pub fn read_checked(
    device: &dyn Storage,
    disk: DiskIndex,
    extent: &CommandExtent,
    slice: &mut [u8],
) -> ReadOutcome {
    match device.read_at(extent.device_offset_bytes, slice) {
        Err(err) => ReadOutcome::IoError(err.to_string()),
        Ok(()) => match extent.crc32c {
            Some(sum) if checksum(slice) != sum => ReadOutcome::BadChecksum(format!(
                "disk {disk} offset {}: checksum mismatch ({} bytes)",
                extent.device_offset_bytes, extent.length_bytes
            )),
            _ => ReadOutcome::Ok,
        },
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
                    for command in &batch.commands {
                        let failed = ReadOutcome::IoError(reason.clone());
                        self.report(batch.round, 0, command, failed, None, None);
                    }
                    self.done(&batch, arrived_at, 0, 0, 0, 0);
                    return;
                }
            };
        let mut buffers: Vec<Option<PooledBuf>> = batch
            .commands
            .iter()
            .map(|c| is_delivery(c).then(|| self.pool.take(c.bytes() as usize)))
            .collect();
        let mut failures: Vec<Option<ReadOutcome>> = vec![None; batch.commands.len()];
        let mut extents_left: Vec<usize> = batch
            .commands
            .iter()
            .map(|c| c.extents.iter().filter(|x| x.length_bytes > 0).count())
            .collect();
        let mut ended_at = arrived_at;
        let mut granted_model_ns = 0u64;
        for &(request, timing) in &outcome.commands {
            let owners = &plan.owners[request];
            if owners
                .iter()
                .all(|&(c, _)| !is_delivery(&batch.commands[c]))
            {
                // Another thread moves the bytes; the drive is busy for the
                // model's time all the same.
                granted_model_ns += timing.completion_ns.saturating_sub(timing.start_ns);
                if self.timing == DiskTiming::Emulated {
                    sleep_until(self.clock.at_model_ns(timing.completion_ns));
                }
                ended_at = Instant::now();
                continue;
            }
            // The extents of one media access, read back to back (a read
            // group's rounds are adjacent on the device).
            for &(c, e) in owners {
                let command = &batch.commands[c];
                let extents: Vec<&CommandExtent> = command
                    .extents
                    .iter()
                    .filter(|x| x.length_bytes > 0)
                    .collect();
                let extent = extents[e];
                let at: u64 = extents[..e].iter().map(|x| x.length_bytes).sum();
                if failures[c].is_none() {
                    let buf = buffers[c].as_mut().expect("taken until reported");
                    let slice =
                        &mut buf.as_mut_slice()[at as usize..(at + extent.length_bytes) as usize];
                    match read_checked(self.device.as_ref(), self.disk, extent, slice) {
                        ReadOutcome::Ok => {}
                        failed => failures[c] = Some(failed),
                    }
                }
            }
            if self.timing == DiskTiming::Emulated {
                sleep_until(self.clock.at_model_ns(timing.completion_ns));
            }
            ended_at = Instant::now();
            for &(c, _) in owners {
                extents_left[c] -= 1;
                if extents_left[c] > 0 {
                    continue;
                }
                let command = &batch.commands[c];
                let at_ns = timing.completion_ns;
                match failures[c].take() {
                    None => {
                        let data = buffers[c].take();
                        let queue = batch.deliver_to.get(c).and_then(Option::as_ref);
                        self.report(batch.round, at_ns, command, ReadOutcome::Ok, data, queue);
                    }
                    Some(failed) => self.report(batch.round, at_ns, command, failed, None, None),
                }
            }
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
            granted_model_ns,
            cache_hits,
        );
    }

    /// Hands a read's bytes to its session, then its completion to the
    /// driver (in that order: the release the completion leads to must find
    /// the bytes in the piece queue).
    fn report(
        &self,
        round: Round,
        model_completion_ns: u64,
        command: &DiskCommand,
        outcome: ReadOutcome,
        data: Option<PooledBuf>,
        queue: Option<&PieceSender>,
    ) {
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
            // A session that has ended drops it (back to the pool).
            let _ = queue.send(Piece {
                playback_round,
                replica,
                piece,
                data,
            });
        }
        // The driver only goes away at shutdown; a lost report then is fine.
        let _ = self.events.send(IoEvent::Read {
            round,
            model_completion_ns,
            completion: Completion {
                disk: self.disk,
                stream,
                playback_round,
                replica,
                piece,
                outcome,
            },
        });
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
            }],
            charge_ns: 0,
            joins_previous: false,
            prefetch_bytes: 0,
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
