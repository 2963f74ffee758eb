//! What crosses the array's command boundary: the per-disk commands of a
//! round, the completions executors report back, and the effects the array
//! answers with.
//!
//! Everything here is plain data with round numbers and model time, never a
//! process-local clock or pointer, so an executor may be a simulated disk,
//! an I/O thread on a local device or (later) a storage node behind RPC.
//! The simulator and the server execute the same commands.

use serde::{Deserialize, Serialize};

use crate::disk::{BatchRequest, Extent as ModelExtent, Op, Scheduler};
use crate::health::DiskState;
use crate::layout::Replica;
use crate::units::{DiskIndex, PlaybackRound, Round, StreamId, TitleId};

/// One contiguous byte range of a command, with the checksum its bytes must
/// have (block padding included) when the catalog knows it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandExtent {
    /// Relative to the device's stride area, as in the layout's `Extent`.
    pub device_offset_bytes: u64,
    pub length_bytes: u64,
    pub crc32c: Option<u32>,
    /// The extent this one is a part of, when a backup window cut a read
    /// between rounds (`array::recovery`): a part has no checksum of its
    /// own, and the executor checks the whole's once its last part is read
    /// (parts of one extent are read on one disk, in order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub whole: Option<WholeExtent>,
}

/// An extent as stored, of which a command reads a part.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WholeExtent {
    pub device_offset_bytes: u64,
    pub length_bytes: u64,
    pub crc32c: Option<u32>,
}

impl CommandExtent {
    /// `(first sector, sector count)`, the disk model's form.
    pub fn sectors(&self) -> (u64, u64) {
        (
            self.device_offset_bytes / crate::units::SECTOR_BYTES,
            self.length_bytes.div_ceil(crate::units::SECTOR_BYTES),
        )
    }
}

/// Identifies one rebuild copy while it runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CopyId(pub u64);

/// Why a command exists.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Purpose {
    /// One stream's request: a piece of playback round `playback_round`
    /// (`piece` 0 for a primary, the backup entry for a backup piece).
    /// `recovery` marks a re-read from the other replica after an error.
    Deliver {
        stream: StreamId,
        title: TitleId,
        playback_round: PlaybackRound,
        replica: Replica,
        piece: u16,
        recovery: bool,
    },
    /// A rebuild copy's read of the surviving replica.
    RebuildRead { copy: CopyId },
    /// A rebuild copy's write onto the rebuilt disk.
    RebuildWrite { copy: CopyId },
    /// One replica extent of round `title_round` of a title being ingested.
    IngestWrite {
        title: TitleId,
        title_round: PlaybackRound,
    },
}

/// One request a disk executes: 1–2 extents read or written back to back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskCommand {
    pub disk: DiskIndex,
    /// The absolute round the command belongs to.
    pub round: Round,
    pub op: Op,
    pub purpose: Purpose,
    pub extents: Vec<CommandExtent>,
    /// Disk time reserved or granted for it under the array's bounds.
    pub charge_ns: u64,
    /// One more round of the previous command's read group: the disk reads
    /// it in the same request when its first extent follows that
    /// command's last on the disk ([`batch_plan`]); its charge is in the
    /// first command's.
    #[serde(default)]
    pub joins_previous: bool,
    /// Bytes after the command's last extent the drive reads on into its
    /// cache before its next command (seed 003's prefetch: the next round of
    /// a drive-cache pair, read from the cache in its own round); 0: none.
    #[serde(default)]
    pub prefetch_bytes: u64,
    /// Where this command's bytes start in its piece's: 0 unless a backup
    /// window cut the piece's read between rounds (`array::recovery`), whose
    /// later parts start further in.
    #[serde(default)]
    pub part_offset_bytes: u64,
}

impl DiskCommand {
    pub fn bytes(&self) -> u64 {
        self.extents.iter().map(|e| e.length_bytes).sum()
    }

    /// The command as the disk model's requests: one per extent (empty
    /// extents left out), each placed in the C-SCAN order on its own, as the
    /// model places every extent of a request anyway; the command completes
    /// with its last. Both executors time a batch with these.
    pub fn batch_requests(&self) -> Vec<BatchRequest> {
        let mut requests: Vec<BatchRequest> = self
            .extents
            .iter()
            .filter(|x| x.length_bytes > 0)
            .map(|x| {
                let (lbn, sectors) = x.sectors();
                BatchRequest {
                    op: self.op,
                    first: ModelExtent::new(lbn, sectors),
                    second: None,
                    prefetch_sectors: 0,
                }
            })
            .collect();
        // The prefetch follows the command's last extent.
        if let Some(last) = requests.last_mut() {
            last.prefetch_sectors = self.prefetch_bytes.div_ceil(crate::units::SECTOR_BYTES);
        }
        requests
    }
}

/// One disk's batch as the disk model's requests, and which command
/// extents each request reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchPlan {
    pub requests: Vec<BatchRequest>,
    /// `owners[r]`: the `(command, extent)` pairs request `r` reads, in
    /// disk order; `extent` counts the command's non-empty extents.
    pub owners: Vec<Vec<(usize, usize)>>,
}

impl BatchPlan {
    /// For each command, the requests that read it (a read completes with
    /// the last of them).
    pub fn requests_of(&self, commands: usize) -> Vec<Vec<usize>> {
        let mut of = vec![Vec::new(); commands];
        for (r, owners) in self.owners.iter().enumerate() {
            for &(c, _) in owners {
                if of[c].last() != Some(&r) {
                    of[c].push(r);
                }
            }
        }
        of
    }
}

/// The requests one disk executes for `commands`: each extent its own
/// request, placed in the C-SCAN order on its own ([`DiskCommand::
/// batch_requests`]), except that an extent continues the request before it
/// when it starts where that request ends and that request is its own
/// command's previous extent (a round cut at a stride boundary whose next
/// stride happens to follow on the disk) or, for a command joining the
/// previous one (a read group), the previous command's last. A group's
/// contiguous rounds are then one media access, as admission charged them
/// (`Bound::title_charges_grouped` merges adjacent extents). Both executors
/// time a batch with this.
pub fn batch_plan(commands: &[DiskCommand]) -> BatchPlan {
    let mut plan = BatchPlan::default();
    for (c, command) in commands.iter().enumerate() {
        for (e, request) in command.batch_requests().into_iter().enumerate() {
            let continues = |&(owner, extent): &(usize, usize)| {
                if e > 0 {
                    owner == c && extent == e - 1
                } else {
                    command.joins_previous && c > 0 && owner == c - 1
                }
            };
            if let (Some(last), Some(owners)) = (plan.requests.last_mut(), plan.owners.last_mut())
                && owners.last().is_some_and(continues)
                && last.op == request.op
                && last.second.is_none()
                && last.first.lbn + last.first.sectors == request.first.lbn
            {
                last.first.sectors += request.first.sectors;
                last.prefetch_sectors = request.prefetch_sectors;
                owners.push((c, e));
                continue;
            }
            plan.requests.push(request);
            plan.owners.push(vec![(c, e)]);
        }
    }
    plan
}

/// One disk's share of a round.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskRoundPlan {
    pub disk: DiskIndex,
    /// Whether the disk serves reads this round (not failed or rebuilding).
    pub serving: bool,
    /// Disk time reserved for streams, fixed term included; `None` for a
    /// disk that serves no reads and is granted nothing.
    pub reserved_ns: Option<u64>,
    /// Disk time granted to the rebuild's copies and ingest writes out of
    /// the unreserved time. The round's budget is `reserved + granted`.
    pub granted_ns: u64,
    /// The order the disk serves the round's commands in.
    pub scheduler: Scheduler,
    /// Stream reads first (the retrieval policy's choice), then the
    /// rebuild's and the ingest's commands.
    pub commands: Vec<DiskCommand>,
}

/// A stream-round whose data is complete: it may be sent from `send_round`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundReady {
    pub stream: StreamId,
    pub playback_round: PlaybackRound,
    /// The replica the data came from.
    pub replica: Replica,
    pub read_round: Round,
    /// Data read in round i is sent in round i + 1.
    pub send_round: Round,
    /// It completed after its round ended (a deadline miss).
    pub late: bool,
}

/// A stream-round not complete when its round ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Miss {
    pub stream: StreamId,
    pub playback_round: PlaybackRound,
    pub read_round: Round,
    /// A stream-round being recovered after a read error (served in
    /// unreserved time), not a planned read.
    pub recovery: bool,
}

/// Why the array stopped a stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AbortReason {
    /// A round the stream still needs has no replica on a serving disk.
    DataLost { playback_round: PlaybackRound },
    /// Reading a round failed on both replicas (or on the only one).
    ReadFailed {
        playback_round: PlaybackRound,
        detail: String,
    },
    /// A round the stream needs has no good replica: both copies failed
    /// their checksums (a fault of that data; the disks serve on).
    NoGoodReplica {
        title: TitleId,
        playback_round: PlaybackRound,
    },
    /// The client took no data for the grace time while holding more than
    /// its buffer.
    ClientStalled {
        held_rounds: u64,
        stalled_rounds: u64,
    },
    /// The array is shutting down.
    Shutdown,
}

impl std::fmt::Display for AbortReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AbortReason::DataLost { playback_round } => write!(
                f,
                "playback round {playback_round} has no replica on a working disk (a second \
                 failure): its data is gone until the disks are rebuilt"
            ),
            AbortReason::ReadFailed {
                playback_round,
                detail,
            } => write!(
                f,
                "reading playback round {playback_round} failed and no other working replica \
                 holds it: {detail}"
            ),
            AbortReason::NoGoodReplica {
                title,
                playback_round,
            } => write!(
                f,
                "title {} playback round {playback_round} has no good replica (both copies fail \
                 their checksums): this stream stops there; the disks, the title's other rounds \
                 and every other title still serve",
                title.0
            ),
            AbortReason::ClientStalled {
                held_rounds,
                stalled_rounds,
            } => write!(
                f,
                "the client took no data for {stalled_rounds} rounds while {held_rounds} rounds \
                 waited for it (more than its buffer)"
            ),
            AbortReason::Shutdown => f.write_str("the server is shutting down"),
        }
    }
}

/// A stream the array stopped, released from its tables.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Aborted {
    pub stream: StreamId,
    pub title: TitleId,
    /// Where the stream was in time (for the caller's playback counts).
    pub start_round: Round,
    pub end_read_round: Round,
    /// The round from which it no longer reads.
    pub at_round: Round,
    pub reason: AbortReason,
}

/// A rebuild copy the executor moves: read the surviving replica, rebuild
/// the lost extents, write them on the rebuilt disk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Copy {
    pub id: CopyId,
    pub task: crate::rebuild::CopyTask,
}

/// What a round asks of its executors.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RoundPlan {
    pub round: Round,
    /// Model time of the round's start and its length (the cycle: asked of
    /// the array, never fixed in a driver).
    pub start_ns: u64,
    pub duration_ns: u64,
    /// Per disk, in disk order.
    pub disks: Vec<DiskRoundPlan>,
    /// Stream-rounds with nothing to read (empty rounds): complete at once.
    pub ready: Vec<RoundReady>,
    /// Playback rounds that may be handed to their clients from now on, in
    /// each stream's playback order.
    pub releases: Vec<crate::array::Release>,
    /// Streams whose client took every round: their sessions end.
    pub finished: Vec<StreamId>,
    /// Stream-rounds of the round that just ended not complete in time.
    pub missed: Vec<Miss>,
    /// Streams stopped at this boundary (their data is lost).
    pub aborted: Vec<Aborted>,
    /// Rebuild copies to move this round (their disk time is in the
    /// batches as `RebuildRead` / `RebuildWrite` commands).
    pub copies: Vec<Copy>,
    /// Rebuild copies that cannot run: their source has failed too (their
    /// rounds are in `rounds_lost`).
    pub copies_lost: Vec<crate::rebuild::CopyTask>,
    /// Repairs of bad extents to move this round, like the rebuild's copies
    /// (their disk time is in the batches as `RebuildRead` /
    /// `RebuildWrite` commands); report each with `Array::copy_done`.
    pub repairs: Vec<Copy>,
    /// Rounds found with no good replica while planning (a repair's or a
    /// rebuild copy's source disk failed).
    pub rounds_lost: Vec<crate::array::LostRound>,
    /// Every copy has been handed out: once they are done, sync the rebuilt
    /// device and call `Array::finish_rebuild`.
    pub rebuild_handed_out: Option<DiskIndex>,
    /// Ingest rounds granted this round: `(title, title round, bytes)`;
    /// written once the round's batches are done.
    pub ingest_grants: Vec<(TitleId, PlaybackRound, u64)>,
    /// The dynamic cycle's operation at this boundary (seed 004), if any.
    pub cycle_event: Option<crate::array::CycleEvent>,
}

/// How a command ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadOutcome {
    Ok,
    /// The device reported an error.
    IoError(String),
    /// The bytes did not match the catalog's checksum.
    BadChecksum(String),
}

/// A stream read finished: which piece, on which disk, how.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion {
    pub disk: DiskIndex,
    pub stream: StreamId,
    pub playback_round: PlaybackRound,
    pub replica: Replica,
    pub piece: u16,
    pub outcome: ReadOutcome,
}

/// Where a completion stands among those an executor reports in model-time
/// order: its model time, then disk, stream, playback round, replica and
/// piece. Two reads that finish at the same nanosecond (identical requests
/// of two streams, the second a cache hit) can be served in either order by
/// different executors; breaking the tie by the completion's content, not
/// by the order a disk happened to serve them, makes the simulator and the
/// server's executor hand the array the same sequence.
pub type CompletionOrder = (u64, u32, u64, u32, Replica, u16);

impl Completion {
    /// This completion's place when it finishes at `model_ns`.
    pub fn order_at(&self, model_ns: u64) -> CompletionOrder {
        (
            model_ns,
            self.disk.0,
            self.stream.0,
            self.playback_round.0,
            self.replica,
            self.piece,
        )
    }
}

/// Why a disk failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailCause {
    Operator,
    /// I/O errors passed the health threshold.
    Errors,
    /// Bad checksums on many distinct extents passed the health threshold.
    BadExtents,
    /// Its device was missing or blank when the server started.
    DeviceMissing,
    /// Recorded failed before a restart.
    Recorded,
    /// The storage node that holds it stopped answering (a cluster's node
    /// died, or the network to it broke).
    Unreachable,
}

impl std::fmt::Display for FailCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FailCause::Operator => "an operator failed it",
            FailCause::Errors => "I/O errors passed the health threshold",
            FailCause::BadExtents => {
                "bad checksums on many distinct extents passed the health threshold"
            }
            FailCause::DeviceMissing => "its device was missing or blank at start",
            FailCause::Recorded => "recorded failed before this start",
            FailCause::Unreachable => "its storage node stopped answering",
        })
    }
}

/// What the array answers a completion or an operator action with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Effect {
    /// A stream-round is complete.
    Ready(RoundReady),
    /// A playback round may be handed to its client now (a late round, and
    /// the rounds it held back).
    Released(crate::array::Release),
    /// A stream-round whose read failed will be read from its other
    /// replica in a coming round's unreserved time.
    ReReadQueued {
        stream: StreamId,
        playback_round: PlaybackRound,
        replica: Replica,
    },
    /// A disk changed state.
    DiskState { disk: DiskIndex, state: DiskState },
    /// A disk failed: record it (so a restart keeps it failed) before the
    /// next round is planned.
    DiskFailed { disk: DiskIndex, cause: FailCause },
    /// A stream was stopped and released.
    Aborted(Aborted),
    /// A replica extent failed its checksum (newly): a repair from the
    /// other replica is queued.
    ExtentBad {
        extent: crate::health::ExtentKey,
        disk: DiskIndex,
    },
    /// A bad extent was rewritten from its replica and verified.
    ExtentRepaired { extent: crate::health::ExtentKey },
    /// A round has no good replica left (both copies bad, or the other's
    /// disk failed): streams that reach it stop.
    RoundLost(crate::array::LostRound),
}
