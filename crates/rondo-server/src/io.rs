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

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use rondo_model::disk::{BatchRequest, Disk, Scheduler};
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

/// A disk's reads for one round.
#[derive(Debug)]
pub struct DiskBatch {
    pub round: u64,
    /// Disk time admission reserved on this disk for the round, fixed term
    /// included (`None` if the disk was failed when the round was planned);
    /// returned in [`IoEvent::BatchDone`] to compare with the busy time.
    pub reserved_ns: Option<u64>,
    pub jobs: Vec<ReadJob>,
    /// A replacement device for this disk (`Store::replace_device`): used
    /// from this batch on.
    pub device: Option<Arc<Device>>,
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
    /// A stream-round whose planned read failed, read again from the other
    /// replica by the copier thread (client bytes, or why it failed).
    Recovered {
        stream: StreamId,
        playback_round: u32,
        result: Result<Vec<u8>, String>,
    },
    /// A disk finished its batch for `round`.
    BatchDone {
        disk: u32,
        round: u64,
        /// The batch's [`DiskBatch::reserved_ns`].
        reserved_ns: Option<u64>,
        requests: usize,
        bytes: u64,
        /// When the last read completed (or the batch arrived, if empty).
        ended_at: Instant,
        /// `Disk::execute_batch`'s busy time.
        model_busy_ns: u64,
        /// Wall time from the later of the round start and the batch's
        /// arrival to the last completion.
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
}

/// Sleeps until `deadline` (no-op if it has passed).
fn sleep_until(deadline: Instant) {
    let now = Instant::now();
    if deadline > now {
        std::thread::sleep(deadline - now);
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
            tracing::info!(disk = self.disk, path = %device.path().display(), "disk thread uses its new device");
            self.device = device;
        }
        let round_start = self.clock.boundary(batch.round);
        // Each extent is its own model command; `owner` maps a command back
        // to (job, extent). The model orders commands by C-SCAN over their
        // LBNs either way, so splitting requests changes neither the order
        // nor the timing, and it tells us which extent each command is.
        let mut requests = Vec::new();
        let mut owner = Vec::new();
        for (j, job) in batch.jobs.iter().enumerate() {
            for (e, x) in job.extents.iter().enumerate() {
                requests.push(BatchRequest::read(
                    x.device_offset_bytes / SECTOR_BYTES,
                    x.length_bytes / SECTOR_BYTES,
                ));
                owner.push((j, e));
            }
        }
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
                self.done(&batch, arrived_at, 0, 0);
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
        for &(command, timing) in &outcome.commands {
            // `commands` holds (request index, timing); our requests are single extents.
            let (j, e) = owner[command];
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
        self.done(&batch, ended_at, outcome.busy_ns, measured_busy_ns);
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
        &self,
        batch: &DiskBatch,
        ended_at: Instant,
        model_busy_ns: u64,
        measured_busy_ns: u64,
    ) {
        let _ = self.events.send(IoEvent::BatchDone {
            disk: self.disk,
            round: batch.round,
            reserved_ns: batch.reserved_ns,
            requests: batch.jobs.len(),
            bytes: batch.jobs.iter().map(ReadJob::bytes).sum(),
            ended_at,
            model_busy_ns,
            measured_busy_ns,
        });
    }
}
