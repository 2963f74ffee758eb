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
//! stream's 1–2 extents) is reported to the driver as soon as its last extent
//! is in; the batch's end, the model's busy time and the measured busy time
//! follow in a [`IoEvent::BatchDone`].
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
use rondo_model::disk::{BatchRequest, Disk, Op, Scheduler};
use rondo_model::units::{SECTOR_BYTES, StreamId};
use rondo_store::{Device, checksum};

use crate::buffers::{BufferPool, PooledBuf};
use crate::config::DiskTiming;

/// Wall-clock position of rounds: round r starts at `t0 + r·T`.
#[derive(Copy, Clone, Debug)]
pub struct RoundClock {
    pub t0: Instant,
    pub round_ns: u64,
}

impl RoundClock {
    /// When round `round` starts.
    pub fn boundary(&self, round: u64) -> Instant {
        self.t0 + Duration::from_nanos(round.saturating_mul(self.round_ns))
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

/// One extent of a read, as the catalog recorded it.
#[derive(Copy, Clone, Debug)]
pub struct JobExtent {
    pub device_offset_bytes: u64,
    pub length_bytes: u64,
    pub crc32c: u32,
}

/// One planned read on this disk: one stream's request (1–2 extents, read
/// back to back into one buffer).
#[derive(Clone, Debug)]
pub struct ReadJob {
    pub stream: StreamId,
    pub playback_round: u32,
    /// Which piece of the stream-round this is (0 for a primary; the backup
    /// entry for a backup read).
    pub piece: usize,
    pub extents: Vec<JobExtent>,
}

impl ReadJob {
    pub fn bytes(&self) -> u64 {
        self.extents.iter().map(|e| e.length_bytes).sum()
    }
}

/// One extent of I/O another thread performs on this disk (a rebuild copy's
/// read or write, an ingest write), given to the model so it is timed in the
/// round's batch.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ModelIo {
    pub op: Op,
    pub device_offset_bytes: u64,
    pub length_bytes: u64,
}

/// What a batch is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum BatchKind {
    /// The round's planned work: reported with [`IoEvent::BatchDone`].
    Round,
    /// Re-reads after a read error, sent mid-round: served after the disk's
    /// backlog, their busy time carried into the next round's report.
    Unplanned,
}

/// A disk's reads for one round.
#[derive(Debug)]
pub struct DiskBatch {
    pub round: u64,
    pub kind: BatchKind,
    /// Disk time admission reserved on this disk for the round, fixed term
    /// included (`None` if the disk was failed when the round was planned);
    /// returned in [`IoEvent::BatchDone`] to compare with the busy time.
    pub reserved_ns: Option<u64>,
    /// Disk time granted on this disk in this round to the rebuild's copies
    /// and ingest writes (their charges, out of the unreserved time);
    /// returned in [`IoEvent::BatchDone`]: the round's budget is
    /// `reserved_ns + granted_ns`.
    pub granted_ns: u64,
    pub jobs: Vec<ReadJob>,
    /// The granted rebuild and ingest I/O of this disk in this round, timed
    /// by the model in the same C-SCAN batch (their bytes are moved by the
    /// copier and ingest threads).
    pub granted_io: Vec<ModelIo>,
    /// A replacement device for this disk (`Store::replace_device`): used
    /// from this batch on.
    pub device: Option<Arc<Device>>,
}

impl DiskBatch {
    /// A round's batch with nothing granted to other work.
    pub fn round(round: u64, reserved_ns: Option<u64>, jobs: Vec<ReadJob>) -> DiskBatch {
        DiskBatch {
            round,
            kind: BatchKind::Round,
            reserved_ns,
            granted_ns: 0,
            jobs,
            granted_io: Vec::new(),
            device: None,
        }
    }
}

/// What I/O threads report to the round driver.
pub enum IoEvent {
    /// One request is complete (or failed).
    Read {
        disk: u32,
        round: u64,
        stream: StreamId,
        playback_round: u32,
        piece: usize,
        result: Result<PooledBuf, String>,
    },
    /// A disk finished its batch for `round`.
    BatchDone {
        disk: u32,
        round: u64,
        /// The batch's [`DiskBatch::reserved_ns`] and [`DiskBatch::granted_ns`].
        reserved_ns: Option<u64>,
        granted_ns: u64,
        /// Stream reads (requests) and their bytes, re-reads after errors
        /// since the last report included.
        requests: usize,
        bytes: u64,
        /// The granted rebuild and ingest commands and their bytes.
        granted_commands: usize,
        granted_bytes: u64,
        /// The model's service time of those commands (start to completion
        /// of each), part of `model_busy_ns`.
        granted_model_ns: u64,
        /// When the last read completed (or the batch arrived, if empty).
        ended_at: Instant,
        /// `Disk::execute_batch`'s busy time (re-reads since the last report
        /// added).
        model_busy_ns: u64,
        /// Wall time from the later of the round start and the batch's
        /// arrival to the last completion (re-reads since the last report
        /// added).
        measured_busy_ns: u64,
    },
}

/// A running device thread.
pub struct DeviceThread {
    pub disk: u32,
    pub batches: Sender<DiskBatch>,
    pub handle: JoinHandle<()>,
}

/// Batches a device thread may have queued before the driver's send waits:
/// more than this means the disk is rounds behind, which admission prevents
/// unless the host's storage is far slower than the model.
pub const BATCH_QUEUE_ROUNDS: usize = 4;

/// Starts disk `disk`'s thread. It exits when the batch channel closes.
pub fn spawn_device(
    disk: u32,
    device: Arc<Device>,
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
                carried: Carried::default(),
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
    disk: u32,
    device: Arc<Device>,
    model: Disk,
    timing: DiskTiming,
    clock: RoundClock,
    pool: BufferPool,
    events: Sender<IoEvent>,
    /// Unplanned re-reads since the last round report: reported with it.
    carried: Carried,
}

/// An unplanned batch's figures, added to the next [`IoEvent::BatchDone`].
#[derive(Default)]
struct Carried {
    requests: usize,
    bytes: u64,
    model_busy_ns: u64,
    measured_busy_ns: u64,
}

/// Sleeps until `deadline` (no-op if it has passed).
fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        std::thread::sleep(deadline - now);
    }
}

/// What one model command of a batch is.
#[derive(Copy, Clone)]
enum Command {
    /// Extent `extent` of job `job`: a real read here.
    Read { job: usize, extent: usize },
    /// A granted rebuild or ingest command: model time only.
    Granted,
}

/// A batch's model commands: every stream extent, then every granted I/O,
/// each a request of its own. The model orders commands by C-SCAN over their
/// LBNs either way, so splitting requests changes neither the order nor the
/// timing, and it tells us which extent each command is.
pub fn batch_requests(jobs: &[ReadJob], granted_io: &[ModelIo]) -> Vec<BatchRequest> {
    let mut requests = Vec::new();
    for job in jobs {
        for x in &job.extents {
            requests.push(BatchRequest::read(
                x.device_offset_bytes / SECTOR_BYTES,
                x.length_bytes / SECTOR_BYTES,
            ));
        }
    }
    for io in granted_io {
        let mut request = BatchRequest::read(
            io.device_offset_bytes / SECTOR_BYTES,
            io.length_bytes / SECTOR_BYTES,
        );
        request.op = io.op;
        requests.push(request);
    }
    requests
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
            tracing::info!(disk = self.disk, path = %device.path().display(), "disk thread uses its new device");
            self.device = device;
        }
        // An unplanned batch arrives mid-round: the model serves it from
        // now, after whatever the disk is still doing.
        let round_start = match batch.kind {
            BatchKind::Round => self.clock.boundary(batch.round),
            BatchKind::Unplanned => arrived_at,
        };
        let requests = batch_requests(&batch.jobs, &batch.granted_io);
        let mut owner = Vec::with_capacity(requests.len());
        for (j, job) in batch.jobs.iter().enumerate() {
            owner.extend((0..job.extents.len()).map(|e| Command::Read { job: j, extent: e }));
        }
        owner.extend(batch.granted_io.iter().map(|_| Command::Granted));
        let model_start_ns = self.clock.model_ns(round_start);
        let outcome = match self
            .model
            .execute_batch(&requests, model_start_ns, Scheduler::Cscan)
        {
            Ok(outcome) => outcome,
            Err(e) => {
                // Checked at start-up (devices lie on the model disk), so this
                // is a bug; fail the reads rather than the thread.
                let reason = format!("disk {}: the disk model refused the batch: {e}", self.disk);
                tracing::error!("{reason}");
                for job in &batch.jobs {
                    self.report(batch.round, job, Err(reason.clone()));
                }
                self.done(&batch, arrived_at, 0, 0, 0);
                return;
            }
        };
        let mut buffers: Vec<Option<PooledBuf>> = batch
            .jobs
            .iter()
            .map(|job| Some(self.pool.take(job.bytes() as usize)))
            .collect();
        let mut failures: Vec<Option<String>> = vec![None; batch.jobs.len()];
        let mut extents_left: Vec<usize> = batch.jobs.iter().map(|j| j.extents.len()).collect();
        let mut ended_at = arrived_at;
        let mut granted_model_ns = 0u64;
        for &(command, timing) in &outcome.commands {
            // `commands` holds (request index, timing); our requests are single extents.
            let (j, e) = match owner[command] {
                Command::Read { job, extent } => (job, extent),
                Command::Granted => {
                    // Another thread moves the bytes; the drive is busy for
                    // the model's time all the same.
                    granted_model_ns += timing.completion_ns.saturating_sub(timing.start_ns);
                    if self.timing == DiskTiming::Emulated {
                        sleep_until(self.clock.at_model_ns(timing.completion_ns));
                    }
                    ended_at = Instant::now();
                    continue;
                }
            };
            let job = &batch.jobs[j];
            let extent = job.extents[e];
            let at: u64 = job.extents[..e].iter().map(|x| x.length_bytes).sum();
            if failures[j].is_none() {
                let buf = buffers[j].as_mut().expect("taken until reported");
                let slice =
                    &mut buf.as_mut_slice()[at as usize..(at + extent.length_bytes) as usize];
                match self.device.read_at(extent.device_offset_bytes, slice) {
                    Ok(()) if checksum(slice) == extent.crc32c => {}
                    Ok(()) => {
                        failures[j] = Some(format!(
                            "disk {} offset {}: checksum mismatch ({} bytes)",
                            self.disk, extent.device_offset_bytes, extent.length_bytes
                        ))
                    }
                    Err(err) => failures[j] = Some(err.to_string()),
                }
            }
            if self.timing == DiskTiming::Emulated {
                sleep_until(self.clock.at_model_ns(timing.completion_ns));
            }
            ended_at = Instant::now();
            extents_left[j] -= 1;
            if extents_left[j] == 0 {
                let result = match failures[j].take() {
                    None => Ok(buffers[j].take().expect("reported once")),
                    Some(reason) => Err(reason),
                };
                self.report(batch.round, job, result);
            }
        }
        // Jobs without extents (empty rounds) complete at once.
        for (j, job) in batch.jobs.iter().enumerate() {
            if job.extents.is_empty() {
                let buf = buffers[j].take().expect("reported once");
                self.report(batch.round, job, Ok(buf));
            }
        }
        let busy_from = round_start.max(arrived_at);
        let measured_busy_ns = ended_at.saturating_duration_since(busy_from).as_nanos() as u64;
        self.done(
            &batch,
            ended_at,
            outcome.busy_ns,
            measured_busy_ns,
            granted_model_ns,
        );
    }

    fn report(&self, round: u64, job: &ReadJob, result: Result<PooledBuf, String>) {
        // The driver only goes away at shutdown; a lost report then is fine.
        let _ = self.events.send(IoEvent::Read {
            disk: self.disk,
            round,
            stream: job.stream,
            playback_round: job.playback_round,
            piece: job.piece,
            result,
        });
    }

    fn done(
        &mut self,
        batch: &DiskBatch,
        ended_at: Instant,
        model_busy_ns: u64,
        measured_busy_ns: u64,
        granted_model_ns: u64,
    ) {
        let requests = batch.jobs.len();
        let bytes: u64 = batch.jobs.iter().map(ReadJob::bytes).sum();
        if batch.kind == BatchKind::Unplanned {
            // Nothing reserved it and its round's report may be gone: it
            // counts in this disk's next round.
            let c = &mut self.carried;
            c.requests += requests;
            c.bytes += bytes;
            c.model_busy_ns += model_busy_ns;
            c.measured_busy_ns += measured_busy_ns;
            return;
        }
        let carried = std::mem::take(&mut self.carried);
        let _ = self.events.send(IoEvent::BatchDone {
            disk: self.disk,
            round: batch.round,
            reserved_ns: batch.reserved_ns,
            granted_ns: batch.granted_ns,
            requests: requests + carried.requests,
            bytes: bytes + carried.bytes,
            granted_commands: batch.granted_io.len(),
            granted_bytes: batch.granted_io.iter().map(|io| io.length_bytes).sum(),
            granted_model_ns,
            ended_at,
            model_busy_ns: model_busy_ns + carried.model_busy_ns,
            measured_busy_ns: measured_busy_ns + carried.measured_busy_ns,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(offset_bytes: u64, length_bytes: u64) -> ReadJob {
        ReadJob {
            stream: StreamId(1),
            playback_round: 0,
            piece: 0,
            extents: vec![JobExtent {
                device_offset_bytes: offset_bytes,
                length_bytes,
                crc32c: 0,
            }],
        }
    }

    #[test]
    fn granted_writes_make_the_models_batch_busier() {
        const MIB: u64 = 1024 * 1024;
        let jobs: Vec<ReadJob> = (0..6).map(|i| job(i * 300 * MIB, 256 * 1024)).collect();
        let writes: Vec<ModelIo> = (0..2)
            .map(|i| ModelIo {
                op: Op::Write,
                device_offset_bytes: 100 * MIB + i * 1500 * MIB,
                length_bytes: MIB,
            })
            .collect();
        let round_ns = 1_000_000_000;
        // The same two rounds on two fresh drives: the second round with
        // the writes on one of them. Head position carries across rounds.
        let mut plain = Disk::from_name("cheetah-4lp").unwrap();
        let mut busy = Disk::from_name("cheetah-4lp").unwrap();
        let reads = batch_requests(&jobs, &[]);
        let with_writes = batch_requests(&jobs, &writes);
        assert_eq!(with_writes.len(), reads.len() + 2);
        assert_eq!(with_writes[6].op, Op::Write);
        for disk in [&mut plain, &mut busy] {
            disk.execute_batch(&reads, 0, Scheduler::Cscan).unwrap();
        }
        let without = plain
            .execute_batch(&reads, round_ns, Scheduler::Cscan)
            .unwrap();
        let with = busy
            .execute_batch(&with_writes, round_ns, Scheduler::Cscan)
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
