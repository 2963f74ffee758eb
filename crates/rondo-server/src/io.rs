//! Per-device I/O threads: one OS thread per disk performs each round's reads
//! in the order the core's disk model serves them (C-SCAN), into pooled
//! aligned buffers, and paces them to the model when timing is emulated.
//!
//! Each round the round driver sends a [`DiskBatch`] over a bounded queue.
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
//! **Shared reads.** Streams of a title that started in the same round read
//! the same extents in the same rounds. A stream read whose extents (device
//! offset, length and stored CRC32C of each) are those of a read still held
//! in memory, by a stream of this batch or of an earlier round that has not
//! sent it yet, takes that buffer instead of reading the device again
//! (`Bytes` clones of one pooled buffer). It completes at its own model
//! instant all the same: the schedule, the reservations and the model's
//! busy time are those of every stream reading for itself, so the
//! guarantee does not depend on what is shared; only the host's copies,
//! checksums and buffers are saved. A read that was to share a read of
//! this batch that failed or is not complete yet reads for itself.
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

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use crossbeam_channel::Sender;
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
    Reads {
        round: Round,
        reads: Vec<ReadDone>,
        /// When they were reported: reads reported by a round's boundary
        /// are on time for it, even if the driver takes them later.
        sent_at: Instant,
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
        /// Stream reads that took the bytes of another stream's read of the
        /// same extents instead of reading the device (part of `requests`),
        /// and their bytes (part of `bytes`).
        shared_reads: usize,
        shared_bytes: u64,
        granted_bytes: u64,
        /// The model's service time of those commands (start to completion
        /// of each), part of `model_busy_ns`.
        granted_model_ns: u64,
        /// When the last read completed (or the batch arrived, if empty).
        ended_at: Instant,
        /// When the batch reached the disk thread.
        arrived_at: Instant,
        /// Model time the model began the batch (its arrival in the model,
        /// or the end of its backlog) and ended it: with `arrived_at` and
        /// `ended_at`, where a late batch's time went. `None` for a batch
        /// the model did not run (refused, or a lost node's).
        model_ns: Option<Range<u64>>,
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
    pub batches: BatchSender,
    pub handle: JoinHandle<()>,
}

/// The bounded queue of a disk thread's batches. A waiting disk thread
/// sleeps on a condition variable: a channel's receive spins and then
/// yields the CPU several times before it sleeps, which on a 2-core host
/// running eight disk threads cost about 5% of the server's CPU in
/// `sched_yield` (a profile of `tools/cost.sh` at 1000 streams,
/// docs/serving-cost.md), for a wait that is usually most of a round.
struct BatchQueue {
    state: Mutex<BatchQueueState>,
    /// Signalled when a batch is queued or the sender is gone.
    filled: Condvar,
    /// Signalled when the disk thread takes a batch.
    drained: Condvar,
}

struct BatchQueueState {
    batches: VecDeque<DiskBatch>,
    senders: usize,
    receiver_gone: bool,
}

/// The driver's end of a disk thread's batch queue; when the last clone is
/// dropped the thread stops once the queued batches are done.
pub struct BatchSender(Arc<BatchQueue>);

/// A disk thread's end of its batch queue.
pub struct BatchReceiver(Arc<BatchQueue>);

/// The disk thread has stopped: the batch was not queued.
#[derive(Debug)]
pub struct DiskThreadGone;

/// Why [`BatchReceiver::recv_timeout`] returned no batch.
#[derive(Debug, PartialEq, Eq)]
pub enum BatchRecvError {
    Timeout,
    /// Every sender is gone and every batch taken.
    Disconnected,
}

/// A disk thread's batch queue of [`BATCH_QUEUE_ROUNDS`].
pub fn batch_queue() -> (BatchSender, BatchReceiver) {
    let queue = Arc::new(BatchQueue {
        state: Mutex::new(BatchQueueState {
            batches: VecDeque::with_capacity(BATCH_QUEUE_ROUNDS),
            senders: 1,
            receiver_gone: false,
        }),
        filled: Condvar::new(),
        drained: Condvar::new(),
    });
    (BatchSender(Arc::clone(&queue)), BatchReceiver(queue))
}

impl BatchSender {
    /// Queues a batch, waiting while [`BATCH_QUEUE_ROUNDS`] are queued.
    pub fn send(&self, batch: DiskBatch) -> Result<(), DiskThreadGone> {
        let mut state = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
        while state.batches.len() >= BATCH_QUEUE_ROUNDS && !state.receiver_gone {
            state = self
                .0
                .drained
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
        }
        if state.receiver_gone {
            return Err(DiskThreadGone);
        }
        state.batches.push_back(batch);
        drop(state);
        self.0.filled.notify_one();
        Ok(())
    }
}

impl Clone for BatchSender {
    fn clone(&self) -> BatchSender {
        self.0
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .senders += 1;
        BatchSender(Arc::clone(&self.0))
    }
}

impl Drop for BatchSender {
    fn drop(&mut self) {
        self.0
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .senders -= 1;
        self.0.filled.notify_one();
    }
}

impl BatchReceiver {
    /// The next batch, sleeping until there is one; `None` once every
    /// sender is gone and every batch is taken.
    pub fn recv(&self) -> Option<DiskBatch> {
        self.recv_until(None).ok()
    }

    /// [`BatchReceiver::recv`], waiting at most `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<DiskBatch, BatchRecvError> {
        self.recv_until(Some(Instant::now() + timeout))
    }

    fn recv_until(&self, deadline: Option<Instant>) -> Result<DiskBatch, BatchRecvError> {
        let mut state = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(batch) = state.batches.pop_front() {
                drop(state);
                self.0.drained.notify_one();
                return Ok(batch);
            }
            if state.senders == 0 {
                return Err(BatchRecvError::Disconnected);
            }
            state = match deadline {
                None => self.0.filled.wait(state).unwrap_or_else(|e| e.into_inner()),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(BatchRecvError::Timeout);
                    }
                    self.0
                        .filled
                        .wait_timeout(state, deadline - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
    }
}

impl Drop for BatchReceiver {
    fn drop(&mut self) {
        self.0
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .receiver_gone = true;
        self.0.drained.notify_all();
    }
}

/// Batches a device thread may have queued before the driver's send waits:
/// more than this means the disk is rounds behind, which admission prevents
/// unless the host's storage is far slower than the model.
pub const BATCH_QUEUE_ROUNDS: usize = 4;

/// How a disk thread does its I/O.
#[derive(Copy, Clone, Debug)]
pub struct DeviceIo {
    pub timing: DiskTiming,
    /// Whether stream reads of the same extents share one buffer (module
    /// doc). Off where each stream read must reach the device: the
    /// differential test's faults are per stream read, as the simulator's.
    pub share_reads: bool,
    /// Streams of a batch that must share a read before its buffer is
    /// taken from the send arena, whose bytes go to sockets without a copy
    /// (`crate::zerocopy`); 0: never.
    pub zero_copy_share_min: u32,
}

impl From<DiskTiming> for DeviceIo {
    /// `timing`, with shared reads and the default zero-copy threshold.
    fn from(timing: DiskTiming) -> DeviceIo {
        DeviceIo {
            timing,
            share_reads: true,
            zero_copy_share_min: crate::zerocopy::DEFAULT_ZERO_COPY_SHARE_MIN,
        }
    }
}

/// Starts disk `disk`'s thread. It exits when the batch channel closes.
pub fn spawn_device(
    disk: DiskIndex,
    device: Arc<dyn Storage>,
    model: Disk,
    io: DeviceIo,
    clock: RoundClock,
    pool: BufferPool,
    events: Sender<IoEvent>,
) -> std::io::Result<DeviceThread> {
    let (batches, receiver) = batch_queue();
    let handle = std::thread::Builder::new()
        .name(format!("rondo-disk-{disk}"))
        .spawn(move || {
            raise_deadline_thread_priority();
            let mut worker = Worker {
                disk,
                device,
                model,
                timing: io.timing,
                share_reads: io.share_reads,
                zero_copy_share_min: io.zero_copy_share_min,
                share_seen: ShareSeen::default(),
                clock,
                pool,
                events,
                partials: PartialChecks::default(),
                recent: HashMap::new(),
                late_held: LateHeld::default(),
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
    share_reads: bool,
    zero_copy_share_min: u32,
    /// Stream reads delivered and device reads made lately: how many
    /// streams a read is sent to here.
    share_seen: ShareSeen,
    clock: RoundClock,
    pool: BufferPool,
    events: Sender<IoEvent>,
    partials: PartialChecks,
    /// Stream reads whose buffers may still be held (by sessions that have
    /// not sent them yet), by their extents: a later read of the same
    /// extents shares a live one.
    recent: HashMap<ReadKey, Recent>,
    /// Late starts' reads of the round in progress, kept for the round.
    late_held: LateHeld,
}

/// A live read later reads of the same extents share.
struct Recent {
    held: Weak<PooledBuf>,
    /// Stream reads given these bytes so far, the first included.
    shares: u32,
}

/// Bytes of late starts' reads a disk thread keeps alive until its round
/// ends, at most. Assumption: 8 MiB per disk, about 150 first rounds of
/// the 450 kbit/s streams of `tools/cost.sh`; far more than the distinct
/// first rounds of a round's late starts when many start at once (a few
/// per title), and small beside the stream buffers admission reserves per
/// disk (64 MiB by default).
const LATE_HELD_BYTES_MAX: usize = 8 << 20;

/// Late starts' reads kept alive for the rest of their round, so that the
/// streams of a title starting in the same round share one read. A late
/// start reads alone (a batch of its own, `Array::admit_now`) and its
/// session sends the round at once, so without this its buffer is gone
/// before the next start of the title asks for the same extents: measured
/// at 10,000 streams arriving at 1000 per second, every late start read
/// the device itself (9306 reads, 99% of the run's device reads) while the
/// streams after them shared 99% of theirs (docs/serving-cost.md). The
/// bytes stay charged to the reading stream's round, whose buffer
/// admission reserved; they go at the round's end.
#[derive(Default)]
struct LateHeld {
    round: Round,
    buffers: Vec<Arc<PooledBuf>>,
    bytes: usize,
}

impl LateHeld {
    /// A batch of `round` arrived: reads held for an earlier round go.
    fn begin(&mut self, round: Round) {
        if round > self.round {
            self.round = round;
            self.buffers.clear();
            self.bytes = 0;
        }
    }

    /// Keeps a late start's read of the current round, within the cap.
    fn hold(&mut self, round: Round, buffer: &Arc<PooledBuf>) {
        let len = buffer.len();
        if round == self.round && self.bytes + len <= LATE_HELD_BYTES_MAX {
            self.bytes += len;
            self.buffers.push(Arc::clone(buffer));
        }
    }
}

/// Device reads after which [`ShareSeen`] halves its counts, so that it
/// follows the load. Assumption: 1024, a few rounds of reads at low
/// sharing and many at high sharing, where a buffer is read once and sent
/// for minutes.
const SHARE_SEEN_HALF_LIFE_READS: u64 = 1024;

/// Stream reads a disk thread delivered and the device reads it made for
/// them, halved now and then: how many streams a new read here is likely
/// to be sent to. A read is shared mostly across rounds (a buffer kept
/// alive by the streams sending it meets the next round's starts of the
/// title), which the batch it is read in does not show: measured at 1000
/// streams, 136–184 stream reads per device read, while no batch held 32
/// reads of one (a threshold of 32 on the batch's count alone sent no
/// byte from the arena, docs/serving-cost.md).
#[derive(Default)]
struct ShareSeen {
    stream_reads: u64,
    device_reads: u64,
}

impl ShareSeen {
    fn delivered(&mut self, from_device: bool) {
        self.stream_reads += 1;
        if from_device {
            self.device_reads += 1;
            if self.device_reads >= SHARE_SEEN_HALF_LIFE_READS {
                self.stream_reads /= 2;
                self.device_reads /= 2;
            }
        }
    }

    /// Whether reads here have been sent to at least `streams` streams
    /// each, on average.
    fn at_least(&self, streams: u32) -> bool {
        self.device_reads > 0 && self.stream_reads >= u64::from(streams) * self.device_reads
    }
}

/// A stream read's extents as a key for sharing its bytes: the device
/// offset, length and stored CRC32C of each. Two reads with the same key
/// read the same checked bytes (the CRC32C guards against an extent
/// rewritten in place between them).
type ReadKey = Box<[(u64, u64, u32)]>;

/// The key of a whole stream read whose every extent has its stored
/// checksum (`None`: parts of a cut read, or other commands, are not
/// shared).
fn read_key(command: &DiskCommand) -> Option<ReadKey> {
    if !is_delivery(command) || command.part_offset_bytes != 0 {
        return None;
    }
    let key: Option<Vec<(u64, u64, u32)>> = command
        .extents
        .iter()
        .filter(|x| x.length_bytes > 0)
        .map(|x| match (x.crc32c, x.whole) {
            (Some(crc), None) => Some((x.device_offset_bytes, x.length_bytes, crc)),
            _ => None,
        })
        .collect();
    key.filter(|k| !k.is_empty()).map(Vec::into_boxed_slice)
}

/// A pooled read buffer several streams hold: back to the pool when the
/// last one drops it.
struct SharedBuf(Arc<PooledBuf>);

impl AsRef<[u8]> for SharedBuf {
    fn as_ref(&self) -> &[u8] {
        self.0.as_ref().as_ref()
    }
}

fn shared_bytes(buf: Arc<PooledBuf>) -> Bytes {
    Bytes::from_owner(SharedBuf(buf))
}

/// Where a stream read of a batch gets its bytes.
enum Sharing {
    /// Not looked at yet (its first extent is not read yet).
    Undecided,
    /// Read here, into its own buffer; with its key if others may share it.
    Own(Option<ReadKey>),
    /// The bytes of a read still held from an earlier round.
    Shared(Bytes),
    /// The bytes of the read of this batch's command of that index.
    Follows(usize),
    /// Delivered.
    Done,
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
    fn run(&mut self, batches: BatchReceiver) {
        while let Some(batch) = batches.recv() {
            self.execute(batch);
        }
    }

    fn execute(&mut self, mut batch: DiskBatch) {
        let arrived_at = Instant::now();
        if let Some(device) = batch.device.take() {
            tracing::info!(disk = self.disk.0, device = %device.describe(), "disk thread uses its new device");
            self.device = device;
            self.recent.clear();
        }
        self.late_held.begin(batch.round);
        self.recent
            .retain(|_, recent| recent.held.strong_count() > 0);
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
                    let times = BatchTimes {
                        arrived_at,
                        ended_at: arrived_at,
                        model_ns: None,
                    };
                    self.done(&batch, times, 0, 0, Tally::default());
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
            sharing: batch.commands.iter().map(|_| Sharing::Undecided).collect(),
            leaders: HashMap::new(),
            share_counts: HashMap::new(),
            keys: batch
                .commands
                .iter()
                .map(|c| read_key(c).filter(|_| self.share_reads))
                .collect(),
            delivered: batch.commands.iter().map(|_| None).collect(),
            shared_reads: 0,
            shared_bytes: 0,
            late_round: batch.late_start_ns.map(|_| batch.round),
        };
        state.share_counts = self.share_counts(&state.keys);
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
                    let (data, outcome) = self.take_bytes(command, c, &mut state);
                    if outcome == ReadOutcome::Ok {
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
        let tally = Tally {
            granted_model_ns: state.granted_model_ns,
            cache_hits,
            shared_reads: state.shared_reads,
            shared_bytes: state.shared_bytes,
        };
        let times = BatchTimes {
            arrived_at,
            ended_at,
            model_ns: Some(outcome.service_start_ns..outcome.end_ns),
        };
        self.done(&batch, times, outcome.busy_ns, measured_busy_ns, tally);
    }

    /// Where stream read `c` gets its bytes, decided when its first extent
    /// is due: a live buffer of the same extents, this batch's first read
    /// of them, or its own read.
    ///
    /// A live buffer outside the send arena that `zero_copy_share_min`
    /// stream reads have been given is copied into the arena once, and the
    /// reads after share the copy. The first of a title's late starts in a
    /// round reads alone (its batch shows no sharing), so its start burst
    /// lands in an ordinary buffer, and without this every later start of
    /// that round was sent copies of it: measured at 12,500 streams
    /// arriving at 1250 a second, 13% of the server's CPU while they
    /// arrived went to those copies' `writev`s (docs/serving-cost.md,
    /// "Start bursts from the send arena").
    fn sharing_for(&mut self, c: usize, state: &mut BatchState) -> Sharing {
        let Some(key) = state.keys[c].take() else {
            return Sharing::Own(None);
        };
        let min = self.zero_copy_share_min;
        if let Some(recent) = self.recent.get_mut(&key)
            && let Some(mut held) = recent.held.upgrade()
        {
            recent.shares = recent.shares.saturating_add(1);
            if min > 0 && recent.shares >= min && !held.is_sendable() {
                let mut copy = self.pool.take_sendable(held.len());
                if copy.is_sendable() {
                    copy.as_mut_slice().copy_from_slice(held.as_ref().as_ref());
                    held = Arc::new(copy);
                    recent.held = Arc::downgrade(&held);
                    if let Some(round) = state.late_round {
                        self.late_held.hold(round, &held);
                    }
                }
            }
            return Sharing::Shared(shared_bytes(held));
        }
        match state.leaders.entry(key.clone()) {
            Entry::Occupied(leader) => Sharing::Follows(*leader.get()),
            Entry::Vacant(slot) => {
                slot.insert(c);
                Sharing::Own(Some(key))
            }
        }
    }

    /// How many of the batch's stream reads read each shareable set of
    /// extents (`keys`); empty unless the send arena is on.
    fn share_counts(&self, keys: &[Option<ReadKey>]) -> HashMap<ReadKey, u32> {
        let mut counts: HashMap<ReadKey, u32> = HashMap::new();
        if self.zero_copy_share_min == 0 {
            return counts;
        }
        for key in keys.iter().flatten() {
            match counts.get_mut(key) {
                Some(n) => *n += 1,
                None => {
                    counts.insert(key.clone(), 1);
                }
            }
        }
        counts
    }

    /// Stream read `c`'s buffer: from the send arena if it is shareable
    /// and at least `zero_copy_share_min` of the batch's reads share it, or
    /// this disk's reads have lately been sent to that many streams each;
    /// else an ordinary one (for a few streams the arena's fresh pages cost
    /// more than the copy they save, `crate::zerocopy`).
    fn buffer_for(&self, command: &DiskCommand, c: usize, state: &BatchState) -> PooledBuf {
        let len = command.bytes() as usize;
        let min = self.zero_copy_share_min;
        let sendable = match &state.sharing[c] {
            Sharing::Own(Some(key)) => {
                min > 0
                    && (state.share_counts.get(key).copied().unwrap_or(0) >= min
                        || self.share_seen.at_least(min))
            }
            _ => false,
        };
        if sendable {
            self.pool.take_sendable(len)
        } else {
            self.pool.take(len)
        }
    }

    /// A complete stream read's bytes and outcome. Its own buffer becomes
    /// shareable (kept for the batch's later reads of the same extents, and
    /// known to later rounds while a session holds it); a read that was to
    /// share one of this batch's that failed or is not complete yet reads
    /// for itself now.
    fn take_bytes(
        &mut self,
        command: &DiskCommand,
        c: usize,
        state: &mut BatchState,
    ) -> (Option<Bytes>, ReadOutcome) {
        let shared = |state: &mut BatchState, bytes: Bytes| {
            state.shared_reads += 1;
            state.shared_bytes += bytes.len() as u64;
            (Some(bytes), ReadOutcome::Ok)
        };
        match std::mem::replace(&mut state.sharing[c], Sharing::Done) {
            Sharing::Shared(bytes) => {
                self.share_seen.delivered(false);
                shared(state, bytes)
            }
            Sharing::Follows(leader) => match state.delivered[leader].clone() {
                Some(bytes) => {
                    self.share_seen.delivered(false);
                    shared(state, bytes)
                }
                None => self.read_now(command),
            },
            own => {
                let outcome = state.failures[c].take().unwrap_or(ReadOutcome::Ok);
                let Some(buf) = state.buffers[c].take() else {
                    return (None, outcome);
                };
                if outcome != ReadOutcome::Ok {
                    return (None, outcome);
                }
                let bytes = match own {
                    Sharing::Own(Some(key)) => {
                        self.share_seen.delivered(true);
                        let held = Arc::new(buf);
                        self.recent.insert(
                            key,
                            Recent {
                                held: Arc::downgrade(&held),
                                shares: 1,
                            },
                        );
                        if let Some(round) = state.late_round {
                            self.late_held.hold(round, &held);
                        }
                        let bytes = shared_bytes(held);
                        state.delivered[c] = Some(bytes.clone());
                        bytes
                    }
                    _ => buf.into_bytes(),
                };
                (Some(bytes), outcome)
            }
        }
    }

    /// Reads and checks a stream read's extents at once, into a buffer of
    /// its own (a read whose shared source failed or came too late).
    fn read_now(&mut self, command: &DiskCommand) -> (Option<Bytes>, ReadOutcome) {
        let extents: Vec<&CommandExtent> = command
            .extents
            .iter()
            .filter(|x| x.length_bytes > 0)
            .collect();
        let mut buf = self.pool.take(command.bytes() as usize);
        let mut outcome = ReadOutcome::Ok;
        {
            let mut rest = buf.as_mut_slice();
            let mut ops = Vec::with_capacity(extents.len());
            for extent in &extents {
                let (mine, tail) =
                    std::mem::take(&mut rest).split_at_mut(extent.length_bytes as usize);
                rest = tail;
                ops.push(ReadOp {
                    device_offset_bytes: extent.device_offset_bytes,
                    buf: mine,
                });
            }
            let results = self.device.read_many(&mut ops);
            for ((op, result), extent) in ops.iter().zip(results).zip(&extents) {
                outcome = self.checked_read(command, extent, result, op.buf);
                if outcome != ReadOutcome::Ok {
                    break;
                }
            }
        }
        if outcome != ReadOutcome::Ok {
            return (None, outcome);
        }
        (Some(buf.into_bytes()), outcome)
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
                if matches!(state.sharing[c], Sharing::Undecided) {
                    state.sharing[c] = self.sharing_for(c, state);
                }
                if !matches!(state.sharing[c], Sharing::Own(_)) {
                    continue;
                }
                let mut extents = command.extents.iter().filter(|x| x.length_bytes > 0);
                let at: u64 = extents.by_ref().take(e).map(|x| x.length_bytes).sum();
                let extent = extents
                    .next()
                    .expect("the plan names the command's extents");
                if state.buffers[c].is_none() {
                    state.buffers[c] = Some(self.buffer_for(command, c, state));
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
            let outcome = self.checked_read(&batch.commands[c], extent, result, op.buf);
            if outcome != ReadOutcome::Ok {
                state.failures[c] = Some(outcome);
            }
        }
    }

    /// An extent read's outcome: the device's error, or its bytes checked
    /// against their checksum (a cut extent's across its parts).
    fn checked_read(
        &mut self,
        command: &DiskCommand,
        extent: &CommandExtent,
        result: std::io::Result<()>,
        data: &[u8],
    ) -> ReadOutcome {
        match result {
            Err(err) => ReadOutcome::IoError(err.to_string()),
            Ok(()) => self.partials.check(self.disk, command, extent, data),
        }
    }

    /// Sends a wake's completions to the driver in one message.
    fn send_reads(&self, round: Round, reads: Vec<ReadDone>) {
        if reads.is_empty() {
            return;
        }
        // The driver only goes away at shutdown; a lost report then is fine.
        let _ = self.events.send(IoEvent::Reads {
            round,
            reads,
            sent_at: Instant::now(),
        });
    }

    fn done(
        &mut self,
        batch: &DiskBatch,
        times: BatchTimes,
        model_busy_ns: u64,
        measured_busy_ns: u64,
        tally: Tally,
    ) {
        let Tally {
            granted_model_ns,
            cache_hits,
            shared_reads,
            shared_bytes,
        } = tally;
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
            shared_reads,
            shared_bytes,
            ended_at: times.ended_at,
            arrived_at: times.arrived_at,
            model_ns: times.model_ns,
            late: batch.late_start_ns.is_some(),
            model_busy_ns,
            measured_busy_ns,
        });
    }
}

/// When a finished batch arrived and ended, really and in the model.
struct BatchTimes {
    arrived_at: Instant,
    ended_at: Instant,
    model_ns: Option<Range<u64>>,
}

/// A finished batch's counts for [`IoEvent::BatchDone`].
#[derive(Default)]
struct Tally {
    granted_model_ns: u64,
    cache_hits: usize,
    shared_reads: usize,
    shared_bytes: u64,
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
    /// Per command, where its bytes come from.
    sharing: Vec<Sharing>,
    /// The first read of each shareable set of extents in this batch.
    leaders: HashMap<ReadKey, usize>,
    /// How many of this batch's stream reads read each shareable set of
    /// extents (only where the send arena may be used).
    share_counts: HashMap<ReadKey, u32>,
    /// Per command, its key for sharing (`read_key`, with shared reads on),
    /// computed once and taken when its sharing is decided.
    keys: Vec<Option<ReadKey>>,
    /// Per command, its bytes once delivered, if others of this batch may
    /// share them (held until the batch ends).
    delivered: Vec<Option<Bytes>>,
    shared_reads: usize,
    shared_bytes: u64,
    /// A late start's batch: its round (its reads are held for it).
    late_round: Option<Round>,
}

/// A read's bytes to its session's piece queue (a session that has ended
/// drops them: back to the pool).
fn deliver(command: &DiskCommand, data: Option<Bytes>, queue: Option<&PieceSender>) {
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
        queue.send(Piece {
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

/// The nice value of the threads whose lateness is a missed deadline (the
/// round driver and the disk threads) where the process may lower it but
/// not give them a real-time policy. They use a few percent of the CPU;
/// the HTTP workers' bulk copies must not queue them (assumption: −5, a
/// weight 3× the default's; measured: on a loaded 2-core host a late
/// start's batch was queued past its round's end behind them,
/// docs/serving-cost.md).
pub const DEADLINE_THREAD_NICE: i32 = -5;

/// The real-time priority (`SCHED_RR`) of those threads where the process
/// may set it. Assumption: 1, the lowest: ahead of every normal thread of
/// the host whatever its nice value (measured: at 11,250 and 12,500 streams
/// a load generator at nice −10 took the CPU of the threads at −5 and
/// rounds missed their deadlines, docs/capacity.md), behind the kernel's
/// own real-time threads. The kernel's real-time throttling (95% of each
/// second by default) still leaves the rest of the host the CPU if one of
/// them ever spun.
pub const DEADLINE_THREAD_RT_PRIORITY: i32 = 1;

/// How the calling deadline thread runs, by what the process may do.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DeadlinePriority {
    /// `SCHED_RR` at [`DEADLINE_THREAD_RT_PRIORITY`] (root, `CAP_SYS_NICE`
    /// or an `RLIMIT_RTPRIO` of at least 1, and a cgroup with real-time
    /// time).
    Realtime,
    /// [`DEADLINE_THREAD_NICE`] (root or `CAP_SYS_NICE`).
    Nice,
    /// The HTTP workers' priority.
    Default,
}

impl DeadlinePriority {
    pub fn describe(self) -> String {
        match self {
            DeadlinePriority::Realtime => format!(
                "real-time (SCHED_RR {DEADLINE_THREAD_RT_PRIORITY}): ahead of every normal thread"
            ),
            DeadlinePriority::Nice => {
                format!("nice {DEADLINE_THREAD_NICE}: ahead of the HTTP workers")
            }
            DeadlinePriority::Default => {
                "the HTTP workers' priority (raising it needs root, CAP_SYS_NICE or RLIMIT_RTPRIO)"
                    .to_string()
            }
        }
    }
}

/// Runs the calling thread ahead of the rest as far as the process may: a
/// real-time policy, else [`DEADLINE_THREAD_NICE`]. Linux keeps both per
/// thread.
pub fn raise_deadline_thread_priority() -> DeadlinePriority {
    // SAFETY: gettid has no arguments and cannot fail.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::pid_t;
    let param = libc::sched_param {
        sched_priority: DEADLINE_THREAD_RT_PRIORITY,
    };
    // SAFETY: sched_setscheduler on this thread's id with a valid
    // parameter; a refusal only returns -1.
    if unsafe { libc::sched_setscheduler(tid, libc::SCHED_RR, &param) } == 0 {
        return DeadlinePriority::Realtime;
    }
    if set_calling_thread_nice(DEADLINE_THREAD_NICE) {
        return DeadlinePriority::Nice;
    }
    DeadlinePriority::Default
}

/// Sets the calling thread's nice value (Linux keeps it per thread) if the
/// process may (root or `CAP_SYS_NICE` to lower it); whether it did.
pub fn set_calling_thread_nice(nice: i32) -> bool {
    // SAFETY: gettid has no arguments and cannot fail.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::pid_t;
    // SAFETY: setpriority on this thread's id; a refusal only returns -1.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rondo_model::array::command::CommandExtent;
    use rondo_model::disk::Op;
    use rondo_model::layout::Replica;
    use rondo_model::units::{DiskIndex, PlaybackRound, Round, StreamId, TitleId};

    /// A disk's share estimate: nothing before its first device read,
    /// stream reads per device read after, and halved counts so that a
    /// later, less shared load takes over.
    #[test]
    fn share_seen_follows_the_stream_reads_per_device_read() {
        let mut seen = ShareSeen::default();
        assert!(!seen.at_least(1), "no device read yet");
        seen.delivered(true);
        (0..31).for_each(|_| seen.delivered(false));
        assert!(seen.at_least(32) && !seen.at_least(33));
        // A long run of unshared reads: the old sharing fades.
        (0..SHARE_SEEN_HALF_LIFE_READS * 4).for_each(|_| seen.delivered(true));
        assert!(seen.at_least(1) && !seen.at_least(2));
    }

    /// The batch queue keeps order, holds the driver back at
    /// [`BATCH_QUEUE_ROUNDS`] until the disk thread takes one, times out
    /// when empty, hands out what is queued after the senders are gone and
    /// then reports them gone; a send to a thread that stopped fails.
    #[test]
    fn the_batch_queue_bounds_orders_and_ends() {
        let batch = |r: u64| DiskBatch::round(Round(r), None, Vec::new());
        let (tx, rx) = batch_queue();
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(5)).err(),
            Some(BatchRecvError::Timeout)
        );
        for r in 0..BATCH_QUEUE_ROUNDS as u64 {
            tx.send(batch(r)).unwrap();
        }
        let second = tx.clone();
        let (sent_tx, sent_rx) = std::sync::mpsc::channel();
        let blocked = std::thread::spawn(move || {
            second.send(batch(99)).unwrap();
            sent_tx.send(()).unwrap();
        });
        // The queue is full: the fifth send waits for the thread.
        assert!(sent_rx.recv_timeout(Duration::from_millis(50)).is_err());
        assert_eq!(rx.recv().map(|b| b.round), Some(Round(0)));
        sent_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        blocked.join().unwrap();
        drop(tx);
        let rest: Vec<u64> = std::iter::from_fn(|| rx.recv())
            .map(|b| b.round.0)
            .collect();
        let queued: Vec<u64> = (1..BATCH_QUEUE_ROUNDS as u64).chain([99]).collect();
        assert_eq!(rest, queued);
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(5)).err(),
            Some(BatchRecvError::Disconnected)
        );
        let (tx, rx) = batch_queue();
        drop(rx);
        assert!(tx.send(batch(0)).is_err());
    }

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

    /// A storage that counts the reads reaching it.
    struct Counted {
        inner: crate::storage::FaultyStorage<crate::storage::MemoryStorage>,
        reads: std::sync::atomic::AtomicU64,
    }

    impl Storage for Counted {
        fn read_at(&self, device_offset_bytes: u64, buf: &mut [u8]) -> std::io::Result<()> {
            self.reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.inner.read_at(device_offset_bytes, buf)
        }

        fn describe(&self) -> String {
            "counted".into()
        }
    }

    /// A native-timed disk thread over `memory`, counting its device reads,
    /// with its buffer pool's metrics and its events.
    fn counted_disk(
        memory: crate::storage::MemoryStorage,
    ) -> (
        DeviceThread,
        Arc<Counted>,
        Arc<crate::metrics::Metrics>,
        crossbeam_channel::Receiver<IoEvent>,
    ) {
        let storage = Arc::new(Counted {
            inner: crate::storage::FaultyStorage::new(memory),
            reads: Default::default(),
        });
        let metrics = Arc::new(crate::metrics::Metrics::new(1));
        let pool = BufferPool::new(1 << 26, Arc::clone(&metrics));
        let (events_tx, events) = crossbeam_channel::unbounded();
        let clock = RoundClock {
            t0: Instant::now(),
            round_duration_ns: 1_000_000_000,
        };
        let thread = spawn_device(
            DiskIndex(0),
            Arc::clone(&storage) as Arc<dyn Storage>,
            Disk::from_name("cheetah-4lp").unwrap(),
            DiskTiming::Native.into(),
            clock,
            pool,
            events_tx,
        )
        .unwrap();
        (thread, storage, metrics, events)
    }

    /// Streams reading the same extents share one read: in one batch (the
    /// first read of them), and in a later round while a session still
    /// holds the bytes; once every holder dropped them, the device is read
    /// again. Every stream gets the right bytes and completes, and a read
    /// whose shared source failed reads for itself.
    #[test]
    fn reads_of_the_same_extents_share_one_buffer_while_it_is_held() {
        use crate::storage::{Fault, MemoryStorage};
        use std::sync::atomic::Ordering::Relaxed;
        const EXTENT: u64 = 16384;
        let memory = MemoryStorage::new(4 << 20);
        let content =
            |at: u64| -> Vec<u8> { (0..EXTENT).map(|i| ((i + at / 4096) % 251) as u8).collect() };
        for at in [0, 1 << 20] {
            memory.write_at(at, &content(at));
        }
        let (thread, storage, metrics, events) = counted_disk(memory);
        let stream_read = |stream: u64, at: u64| {
            let mut c = read(stream, at, EXTENT);
            c.extents[0].crc32c = Some(checksum(&content(at)));
            c
        };
        // Runs one batch of (stream, offset) reads; returns each stream's
        // bytes (in command order), the completions' outcomes and the
        // batch's shared reads.
        let run = |round: u64, reads: &[(u64, u64)]| {
            let pieces_tx = PieceSender::default();
            let commands: Vec<DiskCommand> =
                reads.iter().map(|&(s, at)| stream_read(s, at)).collect();
            let mut batch = DiskBatch::round(Round(round), None, commands);
            batch.deliver_to = reads.iter().map(|_| Some(pieces_tx.clone())).collect();
            thread.batches.send(batch).unwrap();
            let mut outcomes = Vec::new();
            let shared = loop {
                match events.recv().unwrap() {
                    IoEvent::Reads { reads, .. } => outcomes.extend(
                        reads
                            .into_iter()
                            .map(|r| (r.completion.stream.0, r.completion.outcome)),
                    ),
                    IoEvent::BatchDone { shared_reads, .. } => break shared_reads,
                }
            };
            let pieces: Vec<Piece> = pieces_tx.take_all();
            (pieces, outcomes, shared)
        };
        let device_reads = || storage.reads.load(Relaxed);

        // Three streams on extent A, one on B: two device reads.
        let (held, outcomes, shared) = run(0, &[(1, 0), (2, 0), (3, 0), (4, 1 << 20)]);
        assert_eq!(device_reads(), 2);
        assert_eq!(shared, 2);
        assert_eq!(outcomes.len(), 4);
        assert!(
            outcomes.iter().all(|(_, o)| *o == ReadOutcome::Ok),
            "{outcomes:?}"
        );
        assert_eq!(held.len(), 4);
        for piece in &held {
            let at = if piece.stream.0 == 4 { 1 << 20 } else { 0 };
            assert_eq!(
                &piece.data[..],
                &content(at)[..],
                "stream {}",
                piece.stream.0
            );
        }
        // Buffers: one per distinct read (A's three streams hold one).
        assert_eq!(
            metrics.buffer_bytes_in_use.load(Relaxed),
            2 * EXTENT,
            "one buffer per distinct read"
        );

        // A later round's read of A while a session still holds it: shared.
        let (later, _, shared) = run(1, &[(5, 0)]);
        assert_eq!(device_reads(), 2);
        assert_eq!(shared, 1);
        assert_eq!(&later[0].data[..], &content(0)[..]);

        // Every holder drops it: read again.
        drop(held);
        drop(later);
        let (again, _, shared) = run(2, &[(6, 0)]);
        assert_eq!(device_reads(), 3);
        assert_eq!(shared, 0);
        drop(again);

        // The first read of B fails: the stream that was to share it reads
        // for itself, and gets good bytes.
        storage.inner.arm(1 << 20, Fault::IoError);
        let (pieces, outcomes, shared) = run(3, &[(7, 1 << 20), (8, 1 << 20)]);
        assert_eq!(shared, 0);
        assert_eq!(device_reads(), 5);
        let outcome_of = |stream: u64| &outcomes.iter().find(|(s, _)| *s == stream).unwrap().1;
        assert!(
            matches!(outcome_of(7), ReadOutcome::IoError(_)),
            "{outcomes:?}"
        );
        assert_eq!(outcome_of(8), &ReadOutcome::Ok);
        assert_eq!(pieces.len(), 1);
        assert_eq!(pieces[0].stream.0, 8);
        assert_eq!(&pieces[0].data[..], &content(1 << 20)[..]);
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

    /// One stream's late start in `round` over the first `content.len()`
    /// bytes of the device: its piece (dropped at once by the caller, as a
    /// send loop does) and the batch's shared reads.
    fn late_start(
        thread: &DeviceThread,
        events: &crossbeam_channel::Receiver<IoEvent>,
        content: &[u8],
        stream: u64,
        round: u64,
    ) -> (Piece, usize) {
        let pieces_tx = PieceSender::default();
        let mut c = read(stream, 0, content.len() as u64);
        c.extents[0].crc32c = Some(checksum(content));
        let mut batch = DiskBatch::round(Round(round), None, vec![c]);
        batch.late_start_ns = Some(round * 1_000_000_000);
        batch.deliver_to = vec![Some(pieces_tx.clone())];
        thread.batches.send(batch).unwrap();
        let shared = loop {
            if let IoEvent::BatchDone { shared_reads, .. } = events.recv().unwrap() {
                break shared_reads;
            }
        };
        let piece = pieces_tx.take_all().pop().expect("the read's bytes");
        assert_eq!(&piece.data[..], content, "stream {stream}");
        (piece, shared)
    }

    /// A late start's read stays shared for the rest of its round though
    /// its stream dropped the bytes (it sent them at once): the next late
    /// start of the title in that round takes the same buffer; in the next
    /// round it is gone, and a late start reads the device again.
    #[test]
    fn late_starts_of_a_round_share_their_read() {
        use crate::storage::MemoryStorage;
        use std::sync::atomic::Ordering::Relaxed;
        const EXTENT: u64 = 16384;
        let memory = MemoryStorage::new(1 << 20);
        let content: Vec<u8> = (0..EXTENT).map(|i| (i % 251) as u8).collect();
        memory.write_at(0, &content);
        let (thread, storage, metrics, events) = counted_disk(memory);
        let late_start =
            |stream: u64, round: u64| late_start(&thread, &events, &content, stream, round).1;
        let device_reads = || storage.reads.load(Relaxed);
        assert_eq!(late_start(1, 5), 0);
        assert_eq!(device_reads(), 1);
        // The same round: shared, though stream 1 dropped its bytes.
        assert_eq!(late_start(2, 5), 1);
        assert_eq!(late_start(3, 5), 1);
        assert_eq!(device_reads(), 1);
        // A round batch of the next round lets the round's reads go.
        thread
            .batches
            .send(DiskBatch::round(Round(6), None, Vec::new()))
            .unwrap();
        while !matches!(events.recv().unwrap(), IoEvent::BatchDone { .. }) {}
        assert_eq!(metrics.buffer_bytes_in_use.load(Relaxed), 0, "nothing held");
        assert_eq!(late_start(4, 6), 0);
        assert_eq!(device_reads(), 2);
    }

    /// A read many late starts of a round share moves into the send arena
    /// once: the first `DEFAULT_ZERO_COPY_SHARE_MIN - 1` of them are given
    /// the ordinary buffer it was read into, the rest a copy in the arena
    /// (sent without a copy), all the same bytes from one device read.
    #[test]
    fn a_read_shared_by_many_late_starts_moves_into_the_send_arena() {
        use crate::storage::MemoryStorage;
        use crate::zerocopy::DEFAULT_ZERO_COPY_SHARE_MIN as MIN;
        use std::sync::atomic::Ordering::Relaxed;
        const EXTENT: u64 = 16384;
        let memory = MemoryStorage::new(1 << 20);
        let content: Vec<u8> = (0..EXTENT).map(|i| (i % 241) as u8).collect();
        memory.write_at(0, &content);
        let (thread, storage, metrics, events) = counted_disk(memory);
        let mut in_arena = Vec::new();
        for stream in 1..=u64::from(MIN) + 8 {
            let (piece, _) = late_start(&thread, &events, &content, stream, 5);
            in_arena.push(crate::zerocopy::file_range(&piece.data).is_some());
        }
        assert_eq!(storage.reads.load(Relaxed), 1, "one device read");
        let ordinary = in_arena.iter().take_while(|&&a| !a).count();
        assert_eq!(ordinary, MIN as usize - 1, "{in_arena:?}");
        assert!(in_arena[ordinary..].iter().all(|&a| a), "{in_arena:?}");
        // The next round lets both buffers go.
        thread
            .batches
            .send(DiskBatch::round(Round(6), None, Vec::new()))
            .unwrap();
        while !matches!(events.recv().unwrap(), IoEvent::BatchDone { .. }) {}
        assert_eq!(metrics.buffer_bytes_in_use.load(Relaxed), 0, "nothing held");
    }
}
