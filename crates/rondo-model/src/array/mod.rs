//! The array: one sans-IO state machine that owns every decision about a
//! disk array, executed alike by the simulator and by the server.
//!
//! It holds the reservation tables and admission, the one title registry
//! (charges, layout with checksums, byte ↔ round index), the one stream
//! registry (in the tables), disk health as the only truth about a disk's
//! state, the rebuild queue and the write queue for ingest. Drivers hand it
//! requests ([`Array::admit`], [`Array::release`]), round boundaries
//! ([`Array::begin_round`]), completions with their outcomes
//! ([`Array::complete`]) and operator actions ([`Array::fail_disk`],
//! [`Array::start_replace`], [`Array::start_rebuild`]); it answers with
//! admissions or rejections, fully resolved per-disk commands
//! ([`RoundPlan`]) and effects (re-reads, disk state changes, aborted
//! streams). It does no I/O, reads no clock and draws no random numbers;
//! [`Array::check_invariants`] checks its state in O(streams + disks ×
//! horizon).
//!
//! Its seams: the retrieval policy ([`RetrievalPolicy`]: which reads a disk
//! does in a round), the round length asked of the array
//! ([`Array::round_duration_ns`], [`Array::round_start_ns`]), the write
//! queue (ingest now, a tier's staging later) and the command boundary
//! ([`command`]: plain data that a storage node could execute behind RPC).

pub mod command;
mod cycle;
pub mod delivery;
mod host;
pub mod policy;
mod recovery;
pub mod repair;
mod titles;
pub mod writes;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use serde::Serialize;
use thiserror::Error;

use crate::disk::{DiskError, DiskProfile, Op, RondoBound};
use crate::health::{ArrayHealth, DiskState, ExtentKey, HealthPolicy};
use crate::layout::{Replica, TitleLayout};
use crate::rebuild::{CopyFailure, RebuildProgress, RebuildQueue, rebuild_tasks};
use crate::reservation::{
    Admission, BackupWindow, Bound, Burst, BurstLead, Grouping, Guarantee, Overloaded, Pairs,
    PlannedRead, Rejection, ReservationConfig, Reservations, Shape, TitleCharges,
    replica_after_error,
};
use crate::units::{DiskIndex, PlaybackRound, Round, StreamId, TitleId};

pub use command::{
    AbortReason, Aborted, BatchPlan, Completion, CompletionOrder, Copy, CopyId, DiskCommand,
    DiskRoundPlan, Effect, FailCause, Miss, Purpose, ReadOutcome, RoundPlan, RoundReady,
    WholeExtent, batch_plan,
};
pub use cycle::{CycleEvent, CycleStatus, DynamicCycle};
pub use delivery::{DeliveryConfig, Release};
pub use policy::{OneReadPerStream, RetrievalPolicy};
pub use recovery::backup_window_unavailable;
pub use repair::{ExtentFaults, LostRound, Marked, Repairs};
pub use titles::{ArrayTitle, ExtentChecksums, RoundIndex, RoundPosition};
pub use writes::{WRITE_LOOKAHEAD_ROUNDS, WriteLoad, WritePrediction, WriteQueue};

/// Extents per round the rondo-mode write bound's seek line is tuned for (a
/// rebuild writes a few large extents per round; any value gives a valid
/// bound).
pub const WRITE_BOUND_EXTENTS: u32 = 8;

/// The rondo-mode bound for writes on `profile`'s disks: what ingest and
/// rebuild writes are charged, in the simulator and the server alike.
pub fn rondo_write_bound(profile: &DiskProfile) -> Result<Bound, DiskError> {
    Ok(Bound::Rondo(RondoBound::for_op(
        profile,
        Op::Write,
        WRITE_BOUND_EXTENTS,
    )?))
}

/// Why [`Array::recharge`] kept the bound in force.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RechargeRefused {
    #[error("the array is not whole: {why}")]
    NotWhole { why: String },
    #[error("the streams admitted now would not fit: {0}")]
    Overloaded(#[source] Overloaded),
}

/// What a reservation config takes from the read bound, as the simulator
/// and the server both set it (the server again when its charged stroke
/// widens): the drive caches' segments and bus for seed 003's prefetching,
/// the backup window of `backup_window_rounds` (with a loss noticed up to
/// `loss_notice_rounds` late, blocks of `block_bytes`) and its split charge,
/// and the guarantee's rotation credits. The reason when the guarantee
/// cannot be had with this bound.
pub fn configure_for_bound(
    reservation: &mut ReservationConfig,
    bound: &Bound,
    prefetch: DrivePrefetch,
    backup_window_rounds: u32,
    loss_notice_rounds: u32,
    block_bytes: u64,
    guarantee: Guarantee,
) -> Result<(), String> {
    prefetch.configure(bound, reservation);
    reservation.set_backup_window(
        BackupWindow::new(backup_window_rounds, bound, block_bytes)
            .with_loss_notice_rounds(loss_notice_rounds),
    );
    guarantee.configure(bound, reservation)
}

/// What an array is configured with.
#[derive(Clone, Debug)]
pub struct ArrayConfig {
    pub reservation: ReservationConfig,
    /// Start rounds admission tries from the next round (seed 000 §6.2).
    pub lookahead_rounds: u64,
    pub health: HealthPolicy,
    /// The bound admission and the rebuild's reads are charged with.
    pub read_bound: Bound,
    /// The bound ingest and rebuild writes are charged with (rondo mode's
    /// write bound; the read bound where the paper has none).
    pub write_bound: Bound,
    /// Clients' buffers and how long one that stops reading keeps its stream.
    pub delivery: DeliveryConfig,
    /// A new stream's start burst: playback rounds read in its first round
    /// and sent as soon as read, when they fit (none, as in seed 000, by
    /// default; see `reservation::shape`).
    pub burst: Burst,
    /// Whether a stream may start in the round in progress, its first reads
    /// handed to the disks at once, when they finish within the round after
    /// everything the disks were given for it ([`Array::admit_now`]). Off
    /// in seed 000 (streams start at round boundaries) and the simulator.
    pub late_start: bool,
    /// Time a late start's reads must have left in the round beyond what
    /// the model gives them: the executor's delay between the model's
    /// instants and the reads' real completion (handing the batch over,
    /// reporting at its wake quantum, a loaded host's scheduling). 0 where
    /// the model's instants are the completions (the simulator).
    pub late_start_allowance_ns: u64,
    /// Seed 003's drive-cache prefetching: which streams read in
    /// drive-cache pairs (the reservation config's `drive_cache_segments`
    /// bounds how many prefetched blocks a disk holds).
    pub drive_prefetch: DrivePrefetch,
    /// Seed 004's dynamic cycle (`None`: every stream reads in its title's
    /// groups, a fixed cycle). Needs titles with charges for every group
    /// length it may use (`ArrayTitle::group_charges`).
    pub cycle: Option<DynamicCycle>,
    /// New streams are refused while the executor's delivery lag of the
    /// round in progress or the one before is over this (`host`); `None`:
    /// the host's pace is not checked (the simulator, which has no host).
    pub delivery_lag_max_ns: Option<u64>,
}

/// Seed 003's policies that prefetch into the drive's cache.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DrivePrefetch {
    /// No prefetching (Sweep; GPMP prefetches into host memory instead).
    #[default]
    None,
    /// Sweep&Prefetch: a stream reads in pairs only when it no longer fits
    /// reading one block per round.
    SweepPrefetch,
    /// Gradual Prefetching: every other admitted stream reads in pairs
    /// (the rest as Sweep&Prefetch does).
    Gradual,
}

impl DrivePrefetch {
    /// Why an array read with `bound`, on a layout of `segment_rounds`
    /// rounds per run and read groups of `group_rounds`, cannot prefetch
    /// into the drive cache (`None`: it can, or no prefetching is asked).
    /// The simulator and the server refuse a configuration with it.
    pub fn unavailable(
        self,
        bound: &Bound,
        segment_rounds: u32,
        group_rounds: u32,
    ) -> Option<&'static str> {
        if self == DrivePrefetch::None {
            None
        } else if bound.drive_cache_segments() == 0 {
            Some(
                "it needs the rondo bound on a profile whose cache holds only what the host \
                 prefetches (requested data not kept, no read-ahead of its own; e.g. \
                 seed003-table1-c8-s8)",
            )
        } else if segment_rounds < 2 {
            Some("it needs the segments layout (the directory or array is variable-grain)")
        } else if group_rounds > 1 {
            Some("read groups (GPMP) are another policy; choose one")
        } else {
            None
        }
    }

    /// Sets what the reservation needs for drive-cache pairs: the drive
    /// cache segments prefetched blocks may hold per disk and, on a drive
    /// that sends hits while its heads work, the bus share that bounds a
    /// disk-round's bus time (both 0 without prefetching). The simulator
    /// and the server both configure their tables here.
    pub fn configure(self, bound: &Bound, reservation: &mut ReservationConfig) {
        let on = self != DrivePrefetch::None;
        reservation.drive_cache_segments = if on { bound.drive_cache_segments() } else { 0 };
        reservation.bus_share_ppm = if on { bound.bus_share_ppm() } else { 0 };
    }
}

/// Which part of a title a stream plays.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Span {
    /// The whole title.
    Whole,
    /// Stored bytes `first_byte .. first_byte + length_bytes` (an HTTP Range,
    /// or a time seek resolved to a keyframe's byte); nothing is reserved
    /// past the round holding the last byte.
    Bytes { first_byte: u64, length_bytes: u64 },
    /// From the round whose playback interval holds `t_ns` to the end (a
    /// time seek on a title without keyframes).
    FromTime { t_ns: u64 },
}

/// A request to play a title.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AdmitRequest {
    pub title: TitleId,
    pub span: Span,
    /// A stream asked for again after the manager that carried it was lost
    /// (a takeover): where that manager read it. `None`: a new stream.
    pub prior: Option<PriorSchedule>,
    /// Rounds the stream's first read waits at least, past the first round
    /// not yet planned: a start reserved now for later (an interface node's
    /// LMSS, whose viewers play their first seconds from its memory). 0: as
    /// soon as it fits. The reservation tables refuse a start whose stream
    /// would end past their horizon (`Rejection::TooLong`).
    pub defer_rounds: u64,
}

/// Where an earlier manager read a stream it carried (its shape there, in
/// that manager's numbering of rounds, `schedule_id`) and when it was lost.
///
/// At capacity every (disk, round) diagonal is full, and the rounds a lost
/// manager's streams leave free are exactly their own diagonals. A stream
/// asked for again and placed first-fit lands on whichever diagonal has
/// room now, which at capacity is usually not its own: the streams that
/// come after it find theirs taken and are refused or start late
/// (measured: 24 of ~250 clients stalled, docs/cluster.md). Placed instead
/// at its old read rounds shifted by one shift common to every stream of
/// that manager, every stream keeps its diagonal and all of them fit as
/// they did ([`Array::admit`] with a prior).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PriorSchedule {
    /// Which manager's numbering of rounds the rounds here are in.
    pub schedule_id: u64,
    /// The round of its first read there.
    pub start_round: u64,
    /// The playback round it read first there.
    pub first_playback_round: u32,
    /// The playback rounds its start burst read in its first round (0:
    /// none).
    pub burst_rounds: u32,
    /// Whether its client kept the burst's lead (how it read after it).
    #[serde(default)]
    pub burst_lead: BurstLead,
    /// That manager's model time when the stream broke (what it said its
    /// time was when it answered, plus the time the client saw pass since):
    /// the round it was lost in, the same for all of its streams, whatever
    /// each had been sent by then.
    pub lost_at_ns: u64,
}

impl PriorSchedule {
    /// Where `stream` of `array` reads, for its client to bring back after
    /// a takeover (with `lost_at_ns` its model time now). `None` for an
    /// unknown stream, and for one read in read groups or drive-cache pairs,
    /// whose reads a start round and burst do not describe.
    pub fn of(array: &Array, stream: StreamId, schedule_id: u64, now_ns: u64) -> Option<Self> {
        let span = array.reservations.stream_span(stream)?;
        if span.grouping.is_grouped() || span.pairs {
            return None;
        }
        Some(PriorSchedule {
            schedule_id,
            start_round: span.start_round.0,
            first_playback_round: span.first_playback_round.0,
            burst_rounds: span.burst_rounds,
            burst_lead: span.burst_lead,
            lost_at_ns: now_ns,
        })
    }

    /// The round the lost manager read `playback_round` in (its start round
    /// for the rounds of its start burst); `None` before its first.
    pub fn read_round(&self, playback_round: PlaybackRound) -> Option<u64> {
        let (first, i) = (self.first_playback_round as usize, playback_round.index());
        let shape = Shape::new(
            first,
            i.checked_add(1)?.max(first + 1),
            self.burst_rounds as usize,
            Grouping::NONE,
        )
        .with_burst_lead(self.burst_lead);
        (i >= first).then(|| self.start_round.saturating_add(shape.read_offset(i) as u64))
    }

    /// Whether `playback_round` was read in its start burst with the rounds
    /// before it.
    fn read_early(&self, playback_round: PlaybackRound) -> bool {
        let first = self.first_playback_round as usize;
        let i = playback_round.index();
        i > first && i < first.saturating_add(self.burst_rounds as usize)
    }
}

/// Rounds past the earliest start round that a lost manager's round of
/// loss is placed at, setting the shift of all of its streams asked for
/// again. Each round of margin is a round of every resumed client's buffer.
/// One: a stream whose client has every round read before the loss (all
/// of them in the capacity run, docs/cluster.md) may then come a round
/// after the first and still find its diagonal (measured: 247 streams came
/// back within 1 s, over two of the new manager's rounds); one behind by a
/// round, or later, is placed first-fit.
pub const RESUME_MARGIN_ROUNDS: u64 = 1;

/// Lost managers whose shift the array keeps (assumption: more takeovers
/// than this within one title's length are not expected; an older one's
/// streams are placed first-fit).
const RESUME_SHIFTS_MAX: usize = 8;

/// An admitted stream.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Admitted {
    pub stream: StreamId,
    /// Absolute round of its first read.
    pub start_round: Round,
    /// The earliest round it could have started in (the next round).
    pub earliest_round: Round,
    pub first_playback_round: PlaybackRound,
    pub end_playback_round: PlaybackRound,
    /// Stored bytes of the first round before the span's first byte.
    pub skip_bytes: u64,
    /// Stored bytes the stream sends.
    pub length_bytes: u64,
    /// Playback rounds read in its first round and sent as soon as read
    /// (its start burst; 0: a plain stream).
    pub burst_rounds: u32,
    /// The bytes its first send hands the client at once
    /// ([`crate::reservation::StreamSpan::first_send_rounds`] trimmed to its span): what its
    /// socket must take in one go for that send not to wait on the client.
    pub first_send_bytes: u64,
}

/// A stream started in the round in progress ([`Array::admit_now`]): its
/// reads in that round, to hand to the disks at once, each disk's as a
/// batch of its own after what it was given at the round's start.
#[derive(Clone, Debug)]
pub struct LateStart {
    /// Model time of the admission: the disks serve these reads from then
    /// on (or when they finish what they have).
    pub start_ns: u64,
    /// The commands per disk; `reserved_ns` is the batch's budget (the
    /// fixed term and the reads' charges).
    pub disks: Vec<DiskRoundPlan>,
    /// Rounds released at once (a burst's empty rounds).
    pub releases: Vec<Release>,
}

/// Why an operator action was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error, Serialize)]
pub enum OpsError {
    #[error("no disk {disk}: this array has {disks} disks, numbered 0 to {}", .disks - 1)]
    NoSuchDisk { disk: DiskIndex, disks: u32 },
    #[error("disk {disk} is {state} already")]
    Already {
        disk: DiskIndex,
        state: &'static str,
    },
    #[error("disk {disk} is {state}: {what}")]
    WrongState {
        disk: DiskIndex,
        state: &'static str,
        what: &'static str,
    },
    #[error("disk {disk} is being replaced; {what}")]
    Replacing { disk: DiskIndex, what: &'static str },
    #[error("disk {disk} is being rebuilt; one rebuild at a time")]
    RebuildRunning { disk: DiskIndex },
}

/// The name of a disk state, as the API and logs spell it.
pub fn state_name(state: DiskState) -> &'static str {
    match state {
        DiskState::Healthy => "healthy",
        DiskState::Suspect => "suspect",
        DiskState::Failed => "failed",
        DiskState::Rebuilding => "rebuilding",
    }
}

/// A rebuild started: what it will copy.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RebuildStarted {
    pub disk: DiskIndex,
    pub copies: usize,
    pub total_bytes: u64,
    pub round: Round,
    /// Copies with no good replica to copy from (the other replica's disk
    /// is failed too, or the round is already lost): their rounds are
    /// lost, the rest of the disk is rebuilt and serves.
    pub lost_copies: usize,
}

/// A rebuild in progress, as the array tracks it.
#[derive(Clone, Debug)]
struct RebuildState {
    queue: RebuildQueue,
    started_round: Round,
    /// Copies handed out and not reported done: their bytes and round.
    outstanding: BTreeMap<CopyId, (u64, LostRound)>,
    copies_done: u64,
    copied_bytes: u64,
    /// Copies with no good source (their rounds are lost, the disk is not
    /// kept failed for them).
    lost_copies: u64,
    failures: Vec<String>,
    /// Every copy has been handed out.
    handed_out: bool,
}

/// Progress of the rebuild, for status pages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RebuildStatus {
    pub progress: RebuildProgress,
    pub started_round: Round,
    /// Copies the executor reported done (moved or failed).
    pub copies_done: u64,
    /// Bytes the executor reported written and verified.
    pub copied_bytes: u64,
    pub copies_outstanding: usize,
    /// Copies whose round has no good replica (lost; not a failure of
    /// the rebuilt disk).
    pub lost_copies: u64,
    pub failures: Vec<String>,
}

/// One stream-round being read.
#[derive(Clone, Debug)]
struct Inflight {
    replica: Replica,
    read_round: Round,
    /// The last round it may complete in without a miss: its read round
    /// (plus L - 1 with a loss noticed L ≥ 2 rounds late), or under a
    /// backup window a failed disk's backup read's read round plus
    /// k - 1 + L.
    due_round: Round,
    /// The round from which it may be sent (its stream's shape).
    send_round: Round,
    /// Its pieces' progress.
    pieces: Pieces,
    missed: bool,
    /// A re-read from the other replica: if it fails too, the stream stops.
    recovery: bool,
    /// The re-read waits for unreserved disk time in a coming round.
    queued: bool,
}

/// One piece of an in-flight stream-round (a primary read, or one backup
/// fragment).
#[derive(Copy, Clone, Debug, Default)]
struct PieceState {
    /// Still to complete.
    pending: bool,
    /// Its commands handed out and not yet complete (one, or the parts of a
    /// backup read cut between rounds).
    parts_out: u16,
    /// A part of it still waits in a survivor's recovery backlog (a backup
    /// window).
    held: bool,
}

/// The pieces of an in-flight stream-round. A primary read and a whole
/// backup are one piece, kept inline: issuing one allocates nothing, which
/// at 13,000 streams is a malloc and a free fewer per stream-round in the
/// server's driver (docs/serving-cost.md).
#[derive(Clone, Debug)]
enum Pieces {
    One(PieceState),
    Many(Vec<PieceState>),
}

impl Pieces {
    fn new(count: usize) -> Pieces {
        if count == 1 {
            Pieces::One(PieceState::default())
        } else {
            Pieces::Many(vec![PieceState::default(); count])
        }
    }

    fn as_slice(&self) -> &[PieceState] {
        match self {
            Pieces::One(p) => std::slice::from_ref(p),
            Pieces::Many(v) => v,
        }
    }

    fn get(&self, piece: usize) -> Option<&PieceState> {
        self.as_slice().get(piece)
    }

    fn get_mut(&mut self, piece: usize) -> Option<&mut PieceState> {
        match self {
            Pieces::One(p) => (piece == 0).then_some(p),
            Pieces::Many(v) => v.get_mut(piece),
        }
    }

    fn is_pending(&self, piece: usize) -> bool {
        self.get(piece).is_some_and(|p| p.pending)
    }

    fn any_pending(&self) -> bool {
        self.as_slice().iter().any(|p| p.pending)
    }

    fn any_held(&self) -> bool {
        self.as_slice().iter().any(|p| p.held)
    }
}

impl std::ops::Index<usize> for Pieces {
    type Output = PieceState;
    fn index(&self, piece: usize) -> &PieceState {
        &self.as_slice()[piece]
    }
}

impl std::ops::IndexMut<usize> for Pieces {
    fn index_mut(&mut self, piece: usize) -> &mut PieceState {
        self.get_mut(piece).expect("a piece of the stream-round")
    }
}

/// Counts over the array's life, for metrics and reports.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ArrayCounters {
    pub admitted: u64,
    pub rejected: u64,
    /// Of `admitted`, streams started in the round in progress.
    pub late_starts: u64,
    /// Late starts that fitted the round as the model and the fixed
    /// allowance see it, but not with the host's measured lateness
    /// (`Array::batch_late`) left too: started at the next boundary instead.
    pub late_starts_moved: u64,
    /// Of `admitted`, streams with a start burst.
    pub burst_starts: u64,
    /// Planned stream-rounds not complete when their round ended: what
    /// admission guarantees never happens under `minimum`.
    pub stream_round_misses: u64,
    /// Stream-rounds recovered from the other replica after a read error,
    /// late: a re-read is served in unreserved time from the next round on,
    /// never in time reserved for admitted streams.
    pub recovery_misses: u64,
    pub read_errors: u64,
    /// Re-reads from the other replica after an error (queued).
    pub rereads: u64,
    pub streams_aborted: u64,
    /// Streams stopped because their client stopped taking data.
    pub clients_stalled: u64,
    /// Streams whose client took every round.
    pub streams_finished: u64,
    /// Planned reads with no working replica.
    pub lost_reads: u64,
    /// Replica extents found bad (a checksum error; each extent once until
    /// repaired).
    pub extents_bad: u64,
    /// Bad extents rewritten from their replica.
    pub extents_repaired: u64,
    /// Rounds found with no good replica.
    pub rounds_lost: u64,
    /// Under a backup window: a failed disk's backup reads a survivor
    /// served from its recovery backlog, and how many of them it cut
    /// between rounds.
    pub window_recoveries: u64,
    pub window_splits: u64,
    /// The most stream-rounds held at one round boundary behind a late
    /// round of their stream (complete, due, not yet sent in order): the
    /// server buffer late rounds take beyond double buffering.
    pub held_behind_late_max: u64,
    /// Stream-rounds released after a player started at its stream's first
    /// release would have played them (`delivery`): client stalls as the
    /// array sees them. 0 across a failure under a backup window, whose
    /// clients lead by k - 1 rounds.
    pub late_releases: u64,
    /// Of `admitted`, streams asked for again after a takeover
    /// ([`PriorSchedule`]) placed on their own diagonal, and those placed
    /// first-fit because it had no room or they came too late for it.
    pub resumed_in_place: u64,
    pub resumed_moved: u64,
    /// Of `rejected`, streams refused because the host's deliveries were
    /// late (`host`).
    pub rejected_host_behind: u64,
}

/// The array state machine.
#[derive(Debug)]
pub struct Array {
    config: ArrayConfig,
    reservations: Reservations,
    titles: BTreeMap<TitleId, Arc<ArrayTitle>>,
    health: ArrayHealth,
    policy: Box<dyn RetrievalPolicy>,
    inflight: BTreeMap<(StreamId, PlaybackRound), Inflight>,
    rebuild: Option<RebuildState>,
    /// Bad extents, their repairs, rounds with no good replica.
    repairs: Repairs,
    replacing: Vec<bool>,
    writes: WriteQueue,
    /// When each stream's rounds go to its client.
    deliveries: delivery::Deliveries,
    /// False once rounds are begun admission-only: nothing is read, so
    /// nothing is delivered.
    delivering: bool,
    /// Stream-rounds waiting for a re-read from their other replica, in
    /// the order their errors came.
    rereads: Vec<(StreamId, PlaybackRound)>,
    /// The first round not begun: the earliest start round of a new stream.
    next_round: Round,
    /// Per disk, model time by which everything it was given in the round
    /// in progress is done at the latest (its batch's budget from the
    /// round's start, then late starts' reads); `u64::MAX` for a disk that
    /// serves no reads.
    late_horizon_ns: Vec<u64>,
    next_copy: u64,
    counters: ArrayCounters,
    /// Seed 004's dynamic cycle, when configured.
    cycle: Option<cycle::CycleState>,
    /// Under a backup window, per disk: the failed disk's backup reads it
    /// still has to do, earliest deadline first (`reservation::window`).
    recovery: recovery::Recovery,
    /// Per lost manager (`PriorSchedule::schedule_id`), the shift its
    /// streams asked for again are placed with, oldest first.
    resume_shifts: Vec<(u64, i64)>,
    /// The executor's delivery lag, which admission checks (`host`).
    host: host::HostPace,
}

impl Array {
    /// An array with seed 000's retrieval policy.
    pub fn new(config: ArrayConfig) -> Array {
        Array::with_policy(config, Box::new(OneReadPerStream))
    }

    pub fn with_policy(config: ArrayConfig, policy: Box<dyn RetrievalPolicy>) -> Array {
        let disks = config.reservation.disks;
        Array {
            reservations: Reservations::new(config.reservation.clone()),
            health: ArrayHealth::new(disks, config.health),
            titles: BTreeMap::new(),
            policy,
            inflight: BTreeMap::new(),
            rebuild: None,
            repairs: Repairs::default(),
            replacing: vec![false; disks as usize],
            writes: WriteQueue::default(),
            deliveries: delivery::Deliveries::new(config.delivery),
            delivering: true,
            rereads: Vec::new(),
            next_round: Round(0),
            late_horizon_ns: Vec::new(),
            next_copy: 0,
            counters: ArrayCounters::default(),
            cycle: config.cycle.map(cycle::CycleState::new),
            recovery: recovery::Recovery::new(&config),
            resume_shifts: Vec::new(),
            host: host::HostPace::new(config.delivery_lag_max_ns),
            config,
        }
    }

    pub fn config(&self) -> &ArrayConfig {
        &self.config
    }

    pub fn disk_count(&self) -> u32 {
        self.config.reservation.disks
    }

    /// The reservation tables (read-only: every change goes through the array).
    pub fn reservations(&self) -> &Reservations {
        &self.reservations
    }

    pub fn counters(&self) -> ArrayCounters {
        ArrayCounters {
            late_releases: self.deliveries.late_releases,
            ..self.counters
        }
    }

    // ----- time -----

    /// The first round not begun yet.
    pub fn next_round(&self) -> Round {
        self.next_round
    }

    /// The length of round `round`. Constant today (seed 000); seed 004's
    /// dynamic time-cycle changes it, so drivers always ask.
    pub fn round_duration_ns(&self, _round: Round) -> u64 {
        self.config.reservation.round_duration_ns
    }

    /// Model time at which round `round` starts.
    pub fn round_start_ns(&self, round: Round) -> u64 {
        round.0 * self.config.reservation.round_duration_ns
    }

    // ----- titles -----

    /// Registers a stored title.
    pub fn add_title(&mut self, title: ArrayTitle) -> Arc<ArrayTitle> {
        let title = Arc::new(title);
        self.reservations
            .add_title(title.id, title.charges.as_ref().clone());
        for charges in &title.group_charges {
            self.reservations
                .add_title_grouping(title.id, charges.as_ref().clone());
        }
        self.titles.insert(title.id, Arc::clone(&title));
        title
    }

    /// Charges every title and admitted stream under `read_bound` and
    /// `reservation` (built from it as at start), in place of the bound in
    /// force: `titles` holds every registered title's charges under it (and
    /// its group charges, as `ArrayTitle::group_charges`). Taken only when
    /// every disk-round already reserved fits the new budget
    /// ([`Reservations::recharge`]), and only on a whole array (no disk
    /// failed or rebuilding, no dynamic cycle); otherwise nothing changes.
    /// For a bound that widens while streams play: the charged stroke as
    /// ingest adds data further in (`docs/guarantee.md`).
    pub fn recharge(
        &mut self,
        read_bound: Bound,
        reservation: ReservationConfig,
        titles: &BTreeMap<TitleId, (Arc<TitleCharges>, Vec<Arc<TitleCharges>>)>,
    ) -> Result<(), RechargeRefused> {
        let disks = self.disk_count();
        if let Some(disk) = DiskIndex::all(disks).find(|&d| {
            !matches!(
                self.health.state(d),
                DiskState::Healthy | DiskState::Suspect
            )
        }) {
            return Err(RechargeRefused::NotWhole {
                why: format!("disk {disk} is {}", state_name(self.health.state(disk))),
            });
        }
        if self.rebuild.is_some() {
            return Err(RechargeRefused::NotWhole {
                why: "a rebuild is running".into(),
            });
        }
        if self.cycle.is_some() {
            return Err(RechargeRefused::NotWhole {
                why: "a dynamic cycle regroups streams under the bound in force".into(),
            });
        }
        let mut charges = BTreeMap::new();
        let mut group_charges = BTreeMap::new();
        for (&id, (own, groups)) in titles {
            if !self.titles.contains_key(&id) {
                continue;
            }
            charges.insert(id, Arc::clone(own));
            for g in groups {
                group_charges.insert((id, g.grouping().rounds_per_read()), Arc::clone(g));
            }
        }
        self.reservations
            .recharge(reservation.clone(), charges, group_charges)
            .map_err(RechargeRefused::Overloaded)?;
        for (id, title) in self.titles.iter_mut() {
            let (own, groups) = &titles[id];
            let mut updated = ArrayTitle::clone(title);
            updated.charges = Arc::clone(own);
            updated.group_charges = groups.clone();
            *title = Arc::new(updated);
        }
        self.config.read_bound = read_bound;
        self.config.reservation = reservation;
        self.recovery = recovery::Recovery::new(&self.config);
        Ok(())
    }

    /// Removes a title; refused (false) while a stream plays it or an
    /// ingest writes it.
    pub fn remove_title(&mut self, title: TitleId) -> bool {
        if !self.reservations.remove_title(title) {
            return false;
        }
        self.titles.remove(&title);
        self.repairs.forget_title(title);
        true
    }

    pub fn title(&self, title: TitleId) -> Option<&Arc<ArrayTitle>> {
        self.titles.get(&title)
    }

    pub fn titles(&self) -> impl Iterator<Item = &Arc<ArrayTitle>> {
        self.titles.values()
    }

    // ----- streams -----

    /// Admits a stream from the next round, with the configured look-ahead.
    pub fn admit(&mut self, request: &AdmitRequest) -> Result<Admitted, Rejection> {
        let lookahead = self.config.lookahead_rounds;
        self.admit_with_lookahead(request, lookahead)
    }

    /// Like [`Array::admit`] with another look-ahead.
    pub fn admit_with_lookahead(
        &mut self,
        request: &AdmitRequest,
        lookahead_rounds: u64,
    ) -> Result<Admitted, Rejection> {
        let earliest_round = self.next_round.plus(request.defer_rounds);
        let result = self.try_admit(request, earliest_round, lookahead_rounds);
        match &result {
            Ok(a) => self.count_admitted(a.stream),
            Err(rejection) => {
                self.counters.rejected += 1;
                if matches!(rejection, Rejection::HostBehind { .. }) {
                    self.counters.rejected_host_behind += 1;
                }
            }
        }
        result
    }

    /// Admits a stream, in the round in progress if the configuration
    /// allows (`ArrayConfig::late_start`) and its reads there fit: at model
    /// time `now_ns`, each disk it reads finishes what it was given, then
    /// the stream's reads as a sweep of their own (the fixed term again),
    /// before the round ends; and the tables have room as for any start.
    /// Those reads come back as a [`LateStart`] for the executor to hand to
    /// the disks at once. Otherwise as [`Array::admit`], from the next round.
    pub fn admit_now(
        &mut self,
        request: &AdmitRequest,
        now_ns: u64,
    ) -> Result<(Admitted, Option<LateStart>), Rejection> {
        // A stream asked for again is placed on its own diagonal (`admit`);
        // a deferred one starts in a later round anyway.
        if let Some((admitted, late)) = (request.prior.is_none() && request.defer_rounds == 0)
            .then(|| self.try_late_start(request, now_ns))
            .flatten()
        {
            self.count_admitted(admitted.stream);
            self.counters.late_starts += 1;
            return Ok((admitted, Some(late)));
        }
        self.admit(request).map(|a| (a, None))
    }

    fn count_admitted(&mut self, stream: StreamId) {
        self.counters.admitted += 1;
        let span = self.reservations.stream_span(stream);
        if span.is_some_and(|s| s.burst_rounds > 0) {
            self.counters.burst_starts += 1;
        }
    }

    fn try_late_start(
        &mut self,
        request: &AdmitRequest,
        now_ns: u64,
    ) -> Option<(Admitted, LateStart)> {
        if !self.config.late_start || !self.delivering || self.late_horizon_ns.is_empty() {
            return None;
        }
        let round = self.next_round.minus(1);
        // The end without the host's lateness, and with it: a start that
        // fits the first and not the second is counted as moved.
        let end_fixed_ns = (self.round_start_ns(round) + self.round_duration_ns(round))
            .saturating_sub(self.config.late_start_allowance_ns);
        let end_ns = end_fixed_ns.saturating_sub(self.host.batch_late_ns());
        if now_ns >= end_fixed_ns {
            return None;
        }
        let admitted = self.try_admit(request, round, 1).ok()?;
        let stream = admitted.stream;
        let (per_disk, lost) = self.reservations.plan_stream_round(stream, round);
        // Each disk's batch: a sweep of its own (the fixed term) and the reads.
        let fixed_ns = self.config.reservation.round_fixed_ns;
        let work_ns: Vec<u64> = per_disk
            .iter()
            .map(|reads| fixed_ns + reads.iter().map(|r| r.cost_ns).sum::<u64>())
            .collect();
        let fits_by = |end_ns: u64| {
            now_ns < end_ns
                && lost.is_empty()
                && per_disk
                    .iter()
                    .zip(&work_ns)
                    .enumerate()
                    .all(|(d, (reads, &work))| {
                        reads.is_empty()
                            || self.late_horizon_ns[d].max(now_ns).saturating_add(work) <= end_ns
                    })
        };
        if !fits_by(end_ns) {
            if fits_by(end_fixed_ns) {
                self.counters.late_starts_moved += 1;
            }
            self.release(stream);
            return None;
        }
        let mut late = LateStart {
            start_ns: now_ns,
            disks: Vec::new(),
            releases: Vec::new(),
        };
        let mut ready = Vec::new();
        for (d, reads) in per_disk.into_iter().enumerate() {
            if reads.is_empty() {
                continue;
            }
            let disk = DiskIndex(d as u32);
            self.late_horizon_ns[d] = self.late_horizon_ns[d].max(now_ns) + work_ns[d];
            let reads = self.policy.disk_reads(disk, round, reads);
            let batch = self.late_batch(round, disk, &reads, false, work_ns[d], &mut ready);
            late.disks.push(batch);
        }
        // Empty rounds of a burst are complete at once.
        late.releases = self.release_ready(ready, round);
        Some((admitted, late))
    }

    fn try_admit(
        &mut self,
        request: &AdmitRequest,
        earliest_round: Round,
        lookahead_rounds: u64,
    ) -> Result<Admitted, Rejection> {
        let title = self
            .titles
            .get(&request.title)
            .ok_or(Rejection::UnknownTitle(request.title))?;
        if request.prior.is_none() {
            self.host.check()?;
        }
        let index = &title.index;
        let rounds = index.rounds();
        let past_end = |first_playback_round: usize| Rejection::PastEnd {
            first_playback_round: PlaybackRound(first_playback_round as u32),
            rounds,
        };
        let (playback_rounds, skip_bytes, length_bytes): (Range<usize>, u64, u64) =
            match request.span {
                Span::Whole => (0..rounds, 0, index.size_bytes()),
                Span::Bytes {
                    first_byte,
                    length_bytes,
                } => {
                    let first = index
                        .position_of_byte(first_byte)
                        .ok_or_else(|| past_end(rounds))?;
                    let last_byte = first_byte
                        .saturating_add(length_bytes.max(1) - 1)
                        .min(index.size_bytes().saturating_sub(1));
                    let last = index
                        .position_of_byte(last_byte)
                        .expect("clamped to the title's size");
                    (
                        first.round..last.round + 1,
                        first.offset_in_round_bytes,
                        last_byte + 1 - first_byte,
                    )
                }
                Span::FromTime { t_ns } => {
                    let round = index.round_for_time(t_ns);
                    let start = index.round_byte_range(round).start;
                    (round..rounds, 0, index.size_bytes() - start)
                }
            };
        let first_playback_round = PlaybackRound(playback_rounds.start as u32);
        let end_playback_round = PlaybackRound(playback_rounds.end as u32);
        // A stream that would reach a round with no good replica is
        // refused now, rather than admitted and stopped there.
        if let Some(round) = self
            .repairs
            .first_lost_in(request.title, first_playback_round..end_playback_round)
        {
            return Err(Rejection::DataLost { round });
        }
        let group_rounds = self
            .admission_cycle_rounds()
            .filter(|&g| self.reservations.has_grouping(request.title, g));
        // A stream asked for again placed first-fit reads plain: a burst
        // would take other resumed streams' diagonals while all come back.
        let burst = match request.prior {
            Some(_) => Burst::default(),
            None => self.config.burst,
        };
        let in_place = match (request.prior, group_rounds) {
            (Some(prior), None) => self.admit_in_place(
                request.title,
                prior,
                first_playback_round..end_playback_round,
                earliest_round,
            ),
            _ => None,
        };
        let Admission {
            stream,
            start_round,
        } = if let Some(admission) = in_place {
            admission
        } else if let Some(g) = group_rounds {
            // The dynamic cycle: the stream reads groups of the cycle.
            self.reservations.try_admit_grouped(
                request.title,
                first_playback_round..end_playback_round,
                earliest_round,
                lookahead_rounds,
                burst,
                g,
            )?
        } else {
            self.reservations.try_admit_shaped(
                request.title,
                first_playback_round..end_playback_round,
                earliest_round,
                lookahead_rounds,
                burst,
                match self.config.drive_prefetch {
                    DrivePrefetch::None => Pairs::Never,
                    // The switch changes admitted streams' reads from the
                    // earliest round on: never a round already planned (a late
                    // start's, `admit_now`).
                    DrivePrefetch::SweepPrefetch if earliest_round >= self.next_round => {
                        Pairs::Switch
                    }
                    DrivePrefetch::SweepPrefetch => Pairs::Fallback,
                    DrivePrefetch::Gradual if self.counters.admitted % 2 == 1 => Pairs::First,
                    DrivePrefetch::Gradual => Pairs::Fallback,
                },
            )?
        };
        let span = self
            .reservations
            .stream_span(stream)
            .expect("admitted just now");
        if self.delivering {
            self.deliveries.admit(stream, span);
        }
        let first_send = span.first_send_rounds();
        let first_send_range = self.titles[&request.title]
            .index
            .rounds_byte_range(first_send.start.index()..first_send.end.index());
        let first_send_bytes = (first_send_range.end - first_send_range.start)
            .saturating_sub(skip_bytes)
            .min(length_bytes);
        Ok(Admitted {
            stream,
            start_round,
            earliest_round,
            first_playback_round,
            end_playback_round,
            skip_bytes,
            length_bytes,
            burst_rounds: span.burst_rounds,
            first_send_bytes,
        })
    }

    /// A stream asked for again after a takeover, placed at its old read
    /// rounds plus its lost manager's shift (set by the first of them: the
    /// round of loss to [`RESUME_MARGIN_ROUNDS`] past the earliest round):
    /// the whole stream, start burst and all, when its client had none of
    /// it; from a round after its burst, plain. `None` when its client
    /// stopped inside its burst (those rounds were read before the loss),
    /// when that round has passed or the stream does not fit there; it is
    /// then placed first-fit.
    fn admit_in_place(
        &mut self,
        title: TitleId,
        prior: PriorSchedule,
        playback_rounds: Range<PlaybackRound>,
        earliest_round: Round,
    ) -> Option<Admission> {
        let first = playback_rounds.start;
        let (burst_rounds, burst_lead) = match first.0 == prior.first_playback_round {
            true => (prior.burst_rounds, prior.burst_lead),
            false => (0, BurstLead::Spent),
        };
        let placement = prior.read_round(first).filter(|_| !prior.read_early(first));
        let Some(old_round) = placement else {
            self.counters.resumed_moved += 1;
            return None;
        };
        let shift = match self
            .resume_shifts
            .iter()
            .find(|(id, _)| *id == prior.schedule_id)
        {
            Some(&(_, shift)) => shift,
            None => {
                // Rounds are one length in both managers (one configuration).
                let lost_round = prior.lost_at_ns / self.config.reservation.round_duration_ns;
                let shift = (earliest_round.0 + RESUME_MARGIN_ROUNDS) as i64 - lost_round as i64;
                if self.resume_shifts.len() == RESUME_SHIFTS_MAX {
                    self.resume_shifts.remove(0);
                }
                self.resume_shifts.push((prior.schedule_id, shift));
                shift
            }
        };
        // The prior comes from a client: a place later than the lost
        // manager could have given (a start the look-ahead away from its
        // round of loss, then the margin) is not taken.
        let latest_round = earliest_round
            .0
            .saturating_add(RESUME_MARGIN_ROUNDS + self.config.lookahead_rounds + 1);
        let target = i64::try_from(old_round)
            .unwrap_or(i64::MAX)
            .saturating_add(shift);
        let placed = u64::try_from(target)
            .ok()
            .filter(|&t| t >= earliest_round.0 && t < latest_round)
            .and_then(|t| {
                self.reservations
                    .try_admit_shaped(
                        title,
                        playback_rounds,
                        Round(t),
                        1,
                        Burst {
                            rounds: burst_rounds,
                            bytes: 0,
                            lead: burst_lead,
                        },
                        Pairs::Never,
                    )
                    .ok()
            });
        match placed {
            Some(_) => self.counters.resumed_in_place += 1,
            None => self.counters.resumed_moved += 1,
        }
        placed
    }

    /// Releases a stream (its client left): reservations from the next
    /// round on, its reads in flight and its delivery are dropped. False if
    /// unknown.
    pub fn release(&mut self, stream: StreamId) -> bool {
        let reading = self.reservations.release(stream);
        let delivering = self.deliveries.remove(stream);
        self.drop_inflight(stream);
        reading || delivering
    }

    /// The client of `stream` has taken `taken_rounds` of its released
    /// rounds in all (a session's count of rounds handed to its socket; in
    /// the simulator, every round at its release unless the fault plan
    /// stalls the client). Read at the next round's start.
    pub fn client_took(&mut self, stream: StreamId, taken_rounds: u32) {
        self.deliveries.took(stream, taken_rounds);
    }

    /// The executor's buffers are over their budget (or not): while they
    /// are, a stalled client is stopped at the next round's start without
    /// waiting for the grace time, so that clients that stop reading cannot
    /// push the server's memory past its budget for long. Read at the next
    /// round's start; the simulator, which holds no buffers, never sets it.
    pub fn buffers_over_budget(&mut self, over: bool) {
        self.deliveries.set_over_budget(over);
    }

    /// How late the executor delivered: the worst lag it measured since it
    /// last reported, from a release's hand-over to its sender to the end
    /// of the writing (`host`). While a lag over
    /// `ArrayConfig::delivery_lag_max_ns` is reported in the round in
    /// progress or the one before, new streams are refused.
    pub fn delivery_lag(&mut self, lag_ns: u64) {
        self.host.observe(lag_ns);
    }

    /// How late a disk ended a batch: `late_ns` past the model's end for
    /// it, as the executor measured it. A late start then leaves that much
    /// more of its round (`host`), for this round and the next. The
    /// simulator, whose disks are the model, never reports one.
    pub fn batch_late(&mut self, late_ns: u64) {
        self.host.observe_batch_late(late_ns);
    }

    /// The worst delivery lag reported in the round in progress and the one
    /// before.
    pub fn recent_delivery_lag_ns(&self) -> u64 {
        self.host.recent_lag_ns()
    }

    /// Whether the array knows `stream` (reading or delivering).
    pub fn has_stream(&self, stream: StreamId) -> bool {
        self.deliveries.contains(stream) || self.reservations.stream_span(stream).is_some()
    }

    pub fn active_streams(&self) -> usize {
        self.reservations.active_streams()
    }

    fn drop_inflight(&mut self, stream: StreamId) {
        let keys: Vec<(StreamId, PlaybackRound)> = self
            .inflight
            .range((stream, PlaybackRound(0))..=(stream, PlaybackRound(u32::MAX)))
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            self.inflight.remove(&key);
        }
    }

    /// Stops and releases a stream the array cannot serve (or whose client
    /// stalled: its reads may be over, its delivery not).
    fn abort(&mut self, stream: StreamId, reason: AbortReason) -> Option<Aborted> {
        let span = match self.reservations.stream_span(stream) {
            Some(span) => span,
            None => self.deliveries.span(stream)?,
        };
        self.release(stream);
        self.counters.streams_aborted += 1;
        Some(Aborted {
            stream,
            title: span.title,
            start_round: span.start_round,
            end_read_round: span.end_read_round(),
            at_round: self.next_round,
            reason,
        })
    }

    /// Stops every stream (shutdown).
    pub fn abort_all(&mut self) -> Vec<Aborted> {
        let mut streams: Vec<StreamId> = self.reservations.stream_ids().collect();
        streams.extend(self.deliveries.stream_ids());
        streams.sort_unstable();
        streams.dedup();
        streams
            .into_iter()
            .filter_map(|s| self.abort(s, AbortReason::Shutdown))
            .collect()
    }

    // ----- rounds -----

    /// Advances to `round` without planning reads: admission-only mode
    /// (reservations only, seed 000 §6.1).
    pub fn begin_round_admission_only(&mut self, round: Round) {
        assert!(round >= self.next_round, "rounds begin in order");
        self.delivering = false;
        self.deliveries = delivery::Deliveries::new(self.config.delivery);
        self.reservations.advance_to(round);
        self.host.next_round();
        self.next_round = round.next();
        self.cycle_step(round);
    }

    /// Begins round `round` (the next one): counts the misses of the round
    /// that ended, advances the tables, and plans every disk's commands —
    /// the streams' reads chosen by the retrieval policy, then the rebuild's
    /// copies in the time left unreserved, then ingest writes in what the
    /// rebuild left.
    pub fn begin_round(&mut self, round: Round) -> RoundPlan {
        assert!(round >= self.next_round, "rounds begin in order");
        let disks = self.disk_count() as usize;
        let mut plan = RoundPlan {
            round,
            start_ns: self.round_start_ns(round),
            duration_ns: self.round_duration_ns(round),
            ..RoundPlan::default()
        };
        // 1. Stream-rounds of earlier rounds still incomplete are misses.
        for (&(stream, playback_round), f) in self.inflight.iter_mut() {
            if f.due_round < round && !f.missed {
                f.missed = true;
                if f.recovery {
                    self.counters.recovery_misses += 1;
                } else {
                    self.counters.stream_round_misses += 1;
                }
                plan.missed.push(Miss {
                    stream,
                    playback_round,
                    read_round: f.read_round,
                    recovery: f.recovery,
                });
            }
        }
        // 2. Clients: rounds whose send round has come are released; a
        // client that took everything is done, one stalled past the grace
        // time (or stalled at all while buffers are over budget) is stopped
        // before its next reads are planned.
        let (finished, stalled) = self.deliveries.begin_round(round, &mut plan.releases);
        self.counters.held_behind_late_max = self
            .counters
            .held_behind_late_max
            .max(self.deliveries.held_behind_late);
        for stream in finished {
            self.counters.streams_finished += 1;
            self.reservations.release(stream);
            self.drop_inflight(stream);
            plan.finished.push(stream);
        }
        for s in stalled {
            self.counters.clients_stalled += 1;
            let reason = AbortReason::ClientStalled {
                held_rounds: s.held_rounds,
                stalled_rounds: s.stalled_rounds,
            };
            plan.aborted.extend(self.abort(s.stream, reason));
        }
        // 3. Time moves on; the dynamic cycle's operation, if one is due,
        // changes streams' reads from this round on (not yet planned).
        self.reservations.advance_to(round);
        self.host.next_round();
        self.next_round = round.next();
        plan.cycle_event = self.cycle_step(round);
        // 4. The streams' reads.
        let (planned, lost) = self.reservations.plan_round(round);
        self.counters.lost_reads += lost.len() as u64;
        for read in &lost {
            if let Some(a) = self.abort(
                read.stream,
                AbortReason::DataLost {
                    playback_round: read.playback_round,
                },
            ) {
                plan.aborted.push(a);
            }
        }
        // Streams reaching a round with no good replica stop there; their
        // reads this round are not made.
        let mut no_good: Vec<(StreamId, TitleId, PlaybackRound)> = planned
            .iter()
            .flatten()
            .filter(|r| self.repairs.is_lost(r.title, r.playback_round))
            .map(|r| (r.stream, r.title, r.playback_round))
            .collect();
        no_good.sort_unstable();
        no_good.dedup_by_key(|x| x.0);
        let stopped: Vec<StreamId> = no_good.iter().map(|x| x.0).collect();
        for (stream, title, playback_round) in no_good {
            if let Some(a) = self.abort(
                stream,
                AbortReason::NoGoodReplica {
                    title,
                    playback_round,
                },
            ) {
                plan.aborted.push(a);
            }
        }
        let fixed_ns = self.config.reservation.round_fixed_ns;
        let scheduler = self.policy.scheduler();
        // Disk time a survivor's recovery backlog took beyond the
        // disk-round's reservation: not free for re-reads, repairs, the
        // rebuild or ingest.
        let mut recovery_over_ns = vec![0u64; disks];
        for (disk, mut reads) in planned.into_iter().enumerate() {
            let disk = DiskIndex(disk as u32);
            if !stopped.is_empty() {
                reads.retain(|r| stopped.binary_search(&r.stream).is_err());
            }
            let mut reads = self.policy.disk_reads(disk, round, reads);
            // Reads from the drive cache first: a block prefetched for one
            // stream must not go to another's read of it (requested data is
            // not kept, so the first read takes it), and the executors keep
            // this order among reads of the same place.
            reads.sort_by_key(|r| !r.cache_hit);
            let serving = !self.reservations.is_failed(disk);
            let mut commands = Vec::with_capacity(reads.len());
            for read in reads {
                if let Some(c) = self.deliver_command(round, &read, false, &mut plan.ready) {
                    if self.recovery.is_windowed() && read.rerouted {
                        self.hold_for_recovery(round, c);
                    } else {
                        commands.push(c);
                    }
                }
            }
            if serving && self.recovery.is_windowed() {
                let over = self.serve_recovery(disk, round, &mut commands);
                recovery_over_ns[disk.index()] = over;
            }
            plan.disks.push(DiskRoundPlan {
                disk,
                serving,
                reserved_ns: serving.then(|| fixed_ns + self.reservations.reserved_ns(disk, round)),
                granted_ns: 0,
                scheduler,
                commands,
            });
        }
        // 5. Unreserved time goes to re-reads after errors first, then to
        // repairs of bad extents, then to the rebuild, then to ingest writes.
        let mut used_ns = recovery_over_ns;
        let reread_charged = self.plan_rereads(round, &used_ns, &mut plan);
        for (u, r) in used_ns.iter_mut().zip(&reread_charged) {
            *u += r;
        }
        let repair_charged = self.plan_repairs(round, &used_ns, &mut plan);
        for (u, r) in used_ns.iter_mut().zip(&repair_charged) {
            *u += r;
        }
        let rebuild_charged = self.plan_rebuild(round, &used_ns, &mut plan);
        for (u, r) in used_ns.iter_mut().zip(&rebuild_charged) {
            *u += r;
        }
        let credits = self.reservations.write_credits_ns(round, &used_ns);
        let idle_round_ns = self
            .config
            .reservation
            .round_duration_ns
            .saturating_sub(fixed_ns);
        let grant = self
            .writes
            .grant(round, &credits, idle_round_ns, &self.config.write_bound);
        for (d, disk_plan) in plan.disks.iter_mut().enumerate() {
            disk_plan.granted_ns = used_ns[d] + grant.charged_ns[d];
            if disk_plan.reserved_ns.is_none() && disk_plan.granted_ns > 0 {
                // A failed disk being rebuilt: no stream reads, but its
                // copies' writes are budgeted after the fixed term.
                disk_plan.reserved_ns = Some(fixed_ns);
            }
        }
        for (d, commands) in grant.commands.into_iter().enumerate() {
            plan.disks[d].commands.extend(commands);
        }
        plan.ingest_grants = grant.rounds;
        debug_assert_eq!(plan.disks.len(), disks);
        self.late_horizon_ns = plan
            .disks
            .iter()
            .map(|d| match d.reserved_ns {
                Some(reserved_ns) if d.serving => plan.start_ns + reserved_ns + d.granted_ns,
                _ => u64::MAX,
            })
            .collect();
        // 6. Empty rounds are complete at once (sent from their send
        // round: the next one, or this one in a start burst).
        self.release_ready_into(&plan.ready, round, &mut plan.releases);
        plan
    }

    /// The command of one planned read, registering its stream-round in
    /// flight; `None` for a read with nothing on the disk (an empty round,
    /// complete at once and listed in `ready`, or a title without layout).
    fn deliver_command(
        &mut self,
        round: Round,
        read: &PlannedRead,
        recovery: bool,
        ready: &mut Vec<RoundReady>,
    ) -> Option<DiskCommand> {
        let title = self.titles.get(&read.title)?;
        let playback_round = read.playback_round.index();
        let entry = read.backup_entry as usize;
        let layout = title.layout.as_deref()?;
        let round_layout = layout.round(playback_round);
        let (extents, pieces) = match read.replica {
            Replica::Primary => (&round_layout.primary, 1),
            Replica::Backup => (
                &round_layout.backups[entry].extents,
                round_layout.backups.len(),
            ),
        };
        let key = (read.stream, read.playback_round);
        let reservations = &self.reservations;
        // A disk lost late may be noticed up to L - 1 rounds after the
        // round (`BackupWindow::loss_notice_rounds`): only then is a read
        // it has not reported a miss.
        let due_round = round.plus(u64::from(
            self.recovery.loss_notice_rounds().saturating_sub(1),
        ));
        let f = self.inflight.entry(key).or_insert_with(|| Inflight {
            replica: read.replica,
            read_round: round,
            send_round: reservations
                .stream_span(read.stream)
                .map_or(round.next(), |span| span.send_round(read.playback_round)),
            due_round,
            pieces: Pieces::new(pieces),
            missed: false,
            recovery,
            queued: false,
        });
        f.queued = false;
        if extents.is_empty() {
            if !f.pieces.any_pending() {
                let f = self.inflight.remove(&key).expect("inserted above");
                ready.push(RoundReady {
                    stream: read.stream,
                    playback_round: read.playback_round,
                    replica: f.replica,
                    read_round: f.read_round,
                    send_round: f.send_round,
                    late: f.missed,
                });
            }
            return None;
        }
        let piece = if read.replica == Replica::Primary {
            0
        } else {
            entry
        };
        f.pieces[piece].pending = true;
        f.pieces[piece].parts_out += 1;
        let sums = title.request_checksums(playback_round, read.replica, entry);
        let extents = extents
            .as_slice()
            .iter()
            .enumerate()
            .map(|(i, x)| command::CommandExtent {
                device_offset_bytes: x.device_offset_bytes,
                length_bytes: x.length_bytes,
                crc32c: sums.and_then(|s| s.get(i).copied()),
                whole: None,
            })
            .collect();
        Some(DiskCommand {
            disk: read.disk,
            round,
            op: Op::Read,
            purpose: Purpose::Deliver {
                stream: read.stream,
                title: read.title,
                playback_round: read.playback_round,
                replica: read.replica,
                piece: piece as u16,
                recovery,
            },
            extents,
            charge_ns: read.cost_ns,
            joins_previous: read.joins_previous,
            prefetch_bytes: read.prefetch_bytes,
            part_offset_bytes: 0,
        })
    }

    /// The rebuild's copies of `round`; returns the time charged per disk.
    fn plan_rebuild(&mut self, round: Round, used_ns: &[u64], plan: &mut RoundPlan) -> Vec<u64> {
        let disks = self.disk_count() as usize;
        let mut charged = vec![0u64; disks];
        let Some(rebuild) = self.rebuild.as_mut() else {
            return charged;
        };
        if rebuild.handed_out {
            return charged;
        }
        let read_bound = &self.config.read_bound;
        let write_bound = &self.config.write_bound;
        let (run, lost) = rebuild.queue.next_round(
            &self.reservations,
            round,
            used_ns,
            |_, extents| read_bound.extents_ns(extents),
            |extents| write_bound.extents_ns(extents),
        );
        let to_command = |disk, op, purpose, extents: &[(u64, u64)], ns| {
            copy_command(disk, round, op, purpose, extents, ns)
        };
        for copy in run {
            let task = copy.task;
            let id = CopyId(self.next_copy);
            self.next_copy += 1;
            for (source, &ns) in task.read_from.iter().zip(&copy.read_charges_ns) {
                charged[source.disk.index()] += ns;
                let c = to_command(
                    source.disk,
                    Op::Read,
                    Purpose::RebuildRead { copy: id },
                    &source.extents,
                    ns,
                );
                plan.disks[source.disk.index()].commands.push(c);
            }
            let target = task.write_to.disk;
            let ns = copy.write_charge_ns;
            charged[target.index()] += ns;
            let c = to_command(
                target,
                Op::Write,
                Purpose::RebuildWrite { copy: id },
                &task.write_to.extents,
                ns,
            );
            plan.disks[target.index()].commands.push(c);
            let round_of = LostRound {
                title: task.title,
                playback_round: task.round,
            };
            rebuild.outstanding.insert(id, (task.bytes, round_of));
            plan.copies.push(Copy { id, task });
        }
        for task in lost {
            // No working replica to copy from: that round is lost, the rest
            // of the disk is rebuilt.
            rebuild.lost_copies += 1;
            if self.repairs.mark_lost(task.title, task.round) {
                self.counters.rounds_lost += 1;
                plan.rounds_lost.push(LostRound {
                    title: task.title,
                    playback_round: task.round,
                });
            }
            plan.copies_lost.push(task);
        }
        if rebuild.queue.is_done() {
            rebuild.handed_out = true;
            plan.rebuild_handed_out = Some(rebuild.queue.disk());
        }
        charged
    }

    /// The repairs of bad extents that fit `round`'s unreserved time after
    /// `used_ns`; returns the time charged per disk.
    fn plan_repairs(&mut self, round: Round, used_ns: &[u64], plan: &mut RoundPlan) -> Vec<u64> {
        let disks = self.disk_count() as usize;
        let mut charged = vec![0u64; disks];
        let read_bound = &self.config.read_bound;
        let write_bound = &self.config.write_bound;
        let (run, lost) = self.repairs.plan(
            &self.reservations,
            round,
            used_ns,
            |_, extents| read_bound.extents_ns(extents),
            |extents| write_bound.extents_ns(extents),
        );
        self.counters.rounds_lost += lost.len() as u64;
        plan.rounds_lost.extend(lost);
        for (key, copy) in run {
            let id = CopyId(self.next_copy);
            self.next_copy += 1;
            let task = copy.task;
            for (source, &ns) in task.read_from.iter().zip(&copy.read_charges_ns) {
                charged[source.disk.index()] += ns;
                plan.disks[source.disk.index()].commands.push(copy_command(
                    source.disk,
                    round,
                    Op::Read,
                    Purpose::RebuildRead { copy: id },
                    &source.extents,
                    ns,
                ));
            }
            let target = task.write_to.disk;
            charged[target.index()] += copy.write_charge_ns;
            plan.disks[target.index()].commands.push(copy_command(
                target,
                round,
                Op::Write,
                Purpose::RebuildWrite { copy: id },
                &task.write_to.extents,
                copy.write_charge_ns,
            ));
            self.repairs.handed_out(id, key);
            plan.repairs.push(Copy { id, task });
        }
        charged
    }

    // ----- completions -----

    /// A stream read finished. Returns what follows: the stream-round is
    /// ready; or, after an error, the disk's health changes (a failed disk's
    /// streams that lost data are stopped) and the other replica is read,
    /// or the stream stops when there is none.
    pub fn complete(&mut self, completion: &Completion) -> Vec<Effect> {
        let mut effects = Vec::new();
        self.complete_into(completion, &mut effects);
        effects
    }

    /// [`Array::complete`], appending the effects to `effects`: a driver
    /// that keeps one vector for every completion allocates nothing for
    /// the common one (a read complete, its round released).
    pub fn complete_into(&mut self, completion: &Completion, effects: &mut Vec<Effect>) {
        let key = (completion.stream, completion.playback_round);
        let Some(f) = self.inflight.get_mut(&key) else {
            // Released, or a stale piece of a replica replaced by a re-read.
            return;
        };
        if f.replica != completion.replica {
            return;
        }
        if completion.outcome == ReadOutcome::Ok {
            let piece = completion.piece as usize;
            let Some(state) = f.pieces.get_mut(piece).filter(|p| p.pending) else {
                return;
            };
            // A backup read cut between rounds is whole with its last part.
            state.parts_out = state.parts_out.saturating_sub(1);
            if state.parts_out > 0 || state.held {
                return;
            }
            state.pending = false;
            if f.pieces.any_pending() {
                return;
            }
            let f = self.inflight.remove(&key).expect("present");
            let ready = RoundReady {
                stream: completion.stream,
                playback_round: completion.playback_round,
                replica: f.replica,
                read_round: f.read_round,
                send_round: f.send_round,
                late: f.missed,
            };
            effects.push(Effect::Ready(ready));
            // A late round whose send round has come goes out at once (with
            // the rounds it held back).
            let current = self.next_round.minus(1);
            self.deliveries.ready(
                ready.stream,
                ready.playback_round,
                ready.replica,
                ready.send_round,
                current,
                |release| effects.push(Effect::Released(release)),
            );
            return;
        }
        effects.extend(self.read_failed(completion));
    }

    fn read_failed(&mut self, completion: &Completion) -> Vec<Effect> {
        let detail = match &completion.outcome {
            ReadOutcome::IoError(e) => format!("I/O error on disk {}: {e}", completion.disk),
            ReadOutcome::BadChecksum(e) => format!("bad checksum on disk {}: {e}", completion.disk),
            ReadOutcome::Ok => unreachable!("only failures get here"),
        };
        self.counters.read_errors += 1;
        let mut effects = Vec::new();
        let disk = completion.disk;
        let playback_round = completion.playback_round;
        let title = self
            .reservations
            .stream_span(completion.stream)
            .map(|span| span.title);
        // Errors are dated by the round in progress.
        let now = self.next_round.minus(1);
        let was = self.health.state(disk);
        // An I/O error is the device's; a bad checksum is the extent's (it
        // is repaired, and the disk's health hears of it as one extent).
        let (changed, cause) = match (&completion.outcome, title) {
            (ReadOutcome::BadChecksum(_), Some(title)) => {
                let key = ExtentKey {
                    title,
                    playback_round,
                    replica: completion.replica,
                    piece: completion.piece,
                };
                let read_round = self
                    .inflight
                    .get(&(completion.stream, playback_round))
                    .map(|f| f.read_round);
                let marked = self.extent_bad(key, disk, read_round.or(Some(now)));
                effects.extend(marked);
                (
                    self.health.record_bad_extent(disk, key, now),
                    FailCause::BadExtents,
                )
            }
            _ => (self.health.record_error(disk, now), FailCause::Errors),
        };
        if let Some(state) = changed {
            effects.push(Effect::DiskState { disk, state });
            if state == DiskState::Failed && was != DiskState::Failed {
                effects.extend(self.fail_serving_disk(disk, cause));
            }
        }
        let key = (completion.stream, playback_round);
        let Some(f) = self.inflight.remove(&key) else {
            return effects;
        };
        let lost = title.is_some_and(|t| self.repairs.is_lost(t, playback_round));
        let stop = |detail: String| match title {
            Some(title) if lost => AbortReason::NoGoodReplica {
                title,
                playback_round,
            },
            _ => AbortReason::ReadFailed {
                playback_round,
                detail,
            },
        };
        if f.recovery || lost {
            effects.extend(
                self.abort(
                    completion.stream,
                    stop(format!("the other replica failed too: {detail}")),
                )
                .map(Effect::Aborted),
            );
            return effects;
        }
        let Some(span) = self.reservations.stream_span(completion.stream) else {
            return effects;
        };
        let title = Arc::clone(&self.titles[&span.title]);
        let layout = title.layout.as_deref().expect("a read came from a layout");
        let round_layout = layout.round(playback_round.index());
        let backup_disks: Vec<DiskIndex> = round_layout.backups.iter().map(|b| b.disk).collect();
        let other = replica_after_error(f.replica, round_layout.primary_disk, &backup_disks, |d| {
            !self.reservations.is_failed(d)
        });
        let Some(replica) = other else {
            effects.extend(
                self.abort(completion.stream, stop(detail))
                    .map(Effect::Aborted),
            );
            return effects;
        };
        // The other replica is read in a coming round's unreserved time
        // (`plan_rereads`): never in time reserved for admitted streams, so
        // an error delays only the stream-round that hit it.
        let pieces = match replica {
            Replica::Primary => 1,
            Replica::Backup => backup_disks.len(),
        };
        self.inflight.insert(
            key,
            Inflight {
                replica,
                read_round: f.read_round,
                due_round: f.due_round,
                send_round: f.send_round,
                pieces: Pieces::new(pieces),
                missed: f.missed,
                recovery: true,
                queued: true,
            },
        );
        self.rereads.push(key);
        self.counters.rereads += 1;
        effects.push(Effect::ReReadQueued {
            stream: completion.stream,
            playback_round,
            replica,
        });
        effects
    }

    /// `key` on `disk` failed its checksum: marked bad with a repair
    /// queued, or its round lost when the other replica is bad too.
    fn extent_bad(
        &mut self,
        key: ExtentKey,
        disk: DiskIndex,
        read_round: Option<Round>,
    ) -> Vec<Effect> {
        let Some(layout) = self
            .titles
            .get(&key.title)
            .and_then(|t| t.layout.as_ref().map(Arc::clone))
        else {
            return Vec::new();
        };
        match self.repairs.mark_bad(key, disk, &layout, read_round) {
            Marked::Known => Vec::new(),
            Marked::Queued => {
                self.counters.extents_bad += 1;
                vec![Effect::ExtentBad { extent: key, disk }]
            }
            Marked::Lost => {
                self.counters.extents_bad += 1;
                self.counters.rounds_lost += 1;
                vec![
                    Effect::ExtentBad { extent: key, disk },
                    Effect::RoundLost(LostRound {
                        title: key.title,
                        playback_round: key.playback_round,
                    }),
                ]
            }
        }
    }

    /// The queued re-reads that fit this round's unreserved time, in the
    /// order their errors came (a re-read that does not fit waits, and so do
    /// those behind it); returns the time charged per disk.
    fn plan_rereads(&mut self, round: Round, used_ns: &[u64], plan: &mut RoundPlan) -> Vec<u64> {
        let disks = self.disk_count() as usize;
        let mut charged = vec![0u64; disks];
        if self.rereads.is_empty() {
            return charged;
        }
        let mut left = self.reservations.write_credits_ns(round, used_ns);
        let queue = std::mem::take(&mut self.rereads);
        let mut blocked = false;
        for key in queue {
            let (stream, playback_round) = key;
            let Some(f) = self.inflight.get(&key) else {
                continue;
            };
            let Some(span) = self.reservations.stream_span(stream) else {
                self.inflight.remove(&key);
                continue;
            };
            let reads = self.reread(key, span.title, f.replica);
            if reads.iter().any(|r| self.reservations.is_failed(r.disk)) {
                // The other replica's disk failed meanwhile.
                self.inflight.remove(&key);
                if let Some(a) = self.abort(
                    stream,
                    AbortReason::ReadFailed {
                        playback_round,
                        detail: "the other replica's disk failed before it could be read".into(),
                    },
                ) {
                    plan.aborted.push(a);
                }
                continue;
            }
            let fits = reads.iter().all(|r| r.cost_ns <= left[r.disk.index()]);
            if blocked || !fits {
                blocked = true;
                self.rereads.push(key);
                continue;
            }
            for r in &reads {
                left[r.disk.index()] -= r.cost_ns;
                charged[r.disk.index()] += r.cost_ns;
                let mut ready = Vec::new();
                if let Some(c) = self.deliver_command(round, r, true, &mut ready) {
                    plan.disks[r.disk.index()].commands.push(c);
                }
                plan.ready.extend(ready);
            }
        }
        charged
    }

    // ----- disks -----

    pub fn disk_state(&self, disk: DiskIndex) -> DiskState {
        self.health.state(disk)
    }

    /// Whether the disk serves reads.
    pub fn is_serving(&self, disk: DiskIndex) -> bool {
        self.health.is_serving(disk)
    }

    fn check_disk(&self, disk: DiskIndex) -> Result<(), OpsError> {
        let disks = self.disk_count();
        if disk.0 >= disks {
            return Err(OpsError::NoSuchDisk { disk, disks });
        }
        Ok(())
    }

    /// The reads of a re-read of `key` (a stream of `title`) from `replica`:
    /// the primary, or each backup entry, at their charges.
    fn reread(
        &self,
        key: (StreamId, PlaybackRound),
        title: TitleId,
        replica: Replica,
    ) -> Vec<PlannedRead> {
        let charges = &self.titles[&title].charges;
        let i = key.1.index();
        let costs: Vec<(_, u16)> = match replica {
            Replica::Primary => vec![(charges.primary(i), 0u16)],
            Replica::Backup => charges
                .backup(i)
                .iter()
                .enumerate()
                .map(|(entry, &c)| (c, entry as u16))
                .collect(),
        };
        costs
            .into_iter()
            .map(|(c, backup_entry)| PlannedRead {
                stream: key.0,
                title,
                playback_round: key.1,
                disk: c.disk,
                replica,
                backup_entry,
                cost_ns: c.cost_ns,
                rerouted: false,
                joins_previous: false,
                prefetch_bytes: 0,
                cache_hit: false,
            })
            .collect()
    }

    /// One disk's reads in the round in progress as a batch of its own
    /// (a late start's, a lost disk's recovered reads), with `work_ns` as
    /// its budget; rounds with nothing to read go to `ready`.
    fn late_batch(
        &mut self,
        round: Round,
        disk: DiskIndex,
        reads: &[PlannedRead],
        recovery: bool,
        work_ns: u64,
        ready: &mut Vec<RoundReady>,
    ) -> DiskRoundPlan {
        let commands: Vec<DiskCommand> = reads
            .iter()
            .filter_map(|read| self.deliver_command(round, read, recovery, ready))
            .collect();
        DiskRoundPlan {
            disk,
            serving: true,
            reserved_ns: Some(work_ns),
            granted_ns: 0,
            scheduler: self.policy.scheduler(),
            commands,
        }
    }

    /// Rounds complete at once (nothing to read) released from `round` on.
    fn release_ready(&mut self, ready: Vec<RoundReady>, round: Round) -> Vec<Release> {
        let mut releases = Vec::new();
        self.release_ready_into(&ready, round, &mut releases);
        releases
    }

    /// [`Array::release_ready`], appending to `releases`.
    fn release_ready_into(
        &mut self,
        ready: &[RoundReady],
        round: Round,
        releases: &mut Vec<Release>,
    ) {
        for r in ready {
            self.deliveries.ready(
                r.stream,
                r.playback_round,
                r.replica,
                r.send_round,
                round,
                |release| releases.push(release),
            );
        }
    }

    /// Disk `disk` was lost in the middle of the round in progress (its
    /// storage node died) and has been failed ([`Array::fail_disk`]): the
    /// reads it had in flight in this round, and the re-reads already
    /// queued for them, are read at once from the other replica, each
    /// survivor's after the work it was given, when they fit in what is
    /// left of the round. They are the reads whose backups `minimum`
    /// reserved on the survivors for this disk's failure, time those
    /// survivors have not spent, since the disk was serving when the round
    /// began. What does not fit stays queued for unreserved time, as a
    /// failed read's re-read does. The reads come back as a [`LateStart`]
    /// for the executor to hand to the disks, as a late start's do.
    pub fn recover_now(&mut self, disk: DiskIndex, now_ns: u64) -> Option<LateStart> {
        if !self.delivering || self.next_round == Round(0) {
            return None;
        }
        let round = self.next_round.minus(1);
        let end_ns = self.round_start_ns(round) + self.round_duration_ns(round);
        // With a loss noticed late (L ≥ 1) the reads it took go to the
        // survivors' backlogs, whose deadlines the reservation covers
        // (`reservation::window`), whenever in the round it is noticed.
        let notice_rounds = self.recovery.loss_notice_rounds();
        let held = notice_rounds > 0;
        if !held && (self.late_horizon_ns.is_empty() || now_ns >= end_ns) {
            return None;
        }
        // The reads still out on the lost disk (this round's, and with a
        // loss noticed L rounds late the L - 1 rounds' before, not yet
        // missed): to the other replica, queued like a failed read's
        // re-read.
        let oldest = Round(
            round
                .0
                .saturating_sub(u64::from(notice_rounds.saturating_sub(1))),
        );
        let mut lost: Vec<(StreamId, PlaybackRound)> = Vec::new();
        // With a loss noticed late, the reads whose failure the executor
        // reported before the loss (queued as re-reads of their other
        // replica, in unreserved time) are held for the backlogs too.
        let mut requeued: Vec<(StreamId, PlaybackRound)> = Vec::new();
        for (&key, f) in &self.inflight {
            let requeue = held && f.queued && f.recovery;
            if f.read_round < oldest
                || f.read_round > round
                || f.missed
                || (f.queued && !requeue)
                || f.pieces.any_held()
            {
                continue;
            }
            let Some(span) = self.reservations.stream_span(key.0) else {
                continue;
            };
            let Some(layout) = self
                .titles
                .get(&span.title)
                .and_then(|t| t.layout.as_deref())
            else {
                continue;
            };
            let round_layout = layout.round(key.1.index());
            if requeue {
                // The replica it failed on, the one it no longer reads,
                // has a piece on the lost disk.
                let failed_there = match f.replica {
                    Replica::Primary => round_layout.backups.iter().any(|b| b.disk == disk),
                    Replica::Backup => round_layout.primary_disk == disk,
                };
                if failed_there {
                    requeued.push(key);
                }
                continue;
            }
            let out_on_disk = match f.replica {
                Replica::Primary => round_layout.primary_disk == disk && f.pieces.is_pending(0),
                Replica::Backup => round_layout
                    .backups
                    .iter()
                    .enumerate()
                    .any(|(e, b)| b.disk == disk && f.pieces.is_pending(e)),
            };
            if out_on_disk {
                lost.push(key);
            }
        }
        lost.sort_unstable();
        let mut recovered_held = Vec::new();
        if !requeued.is_empty() {
            self.rereads.retain(|key| !requeued.contains(key));
            for key in requeued {
                let f = &self.inflight[&key];
                let span = self.reservations.stream_span(key.0).expect("listed above");
                recovered_held.push((key, f.read_round, span.title, f.replica));
            }
        }
        for key in lost {
            let f = self.inflight.get(&key).expect("listed above").clone();
            let span = self.reservations.stream_span(key.0).expect("listed above");
            let title = Arc::clone(&self.titles[&span.title]);
            let round_layout = title
                .layout
                .as_deref()
                .expect("listed above")
                .round(key.1.index());
            let backup_disks: Vec<DiskIndex> =
                round_layout.backups.iter().map(|b| b.disk).collect();
            let Some(replica) =
                replica_after_error(f.replica, round_layout.primary_disk, &backup_disks, |d| {
                    !self.reservations.is_failed(d)
                })
            else {
                continue;
            };
            let pieces = match replica {
                Replica::Primary => 1,
                Replica::Backup => backup_disks.len(),
            };
            self.inflight.insert(
                key,
                Inflight {
                    replica,
                    pieces: Pieces::new(pieces),
                    recovery: true,
                    queued: true,
                    ..f
                },
            );
            self.counters.rereads += 1;
            if held {
                recovered_held.push((key, f.read_round, span.title, replica));
            } else {
                self.rereads.push(key);
            }
        }
        if held {
            let mut ready = Vec::new();
            recovered_held.sort_by_key(|h| (h.1, h.0));
            for (key, read_round, title, replica) in recovered_held {
                for read in self.reread(key, title, replica) {
                    if let Some(c) = self.deliver_command(read_round, &read, true, &mut ready) {
                        self.hold_for_recovery(read_round, c);
                    }
                }
            }
            let releases = self.release_ready(ready, round);
            return (!releases.is_empty()).then_some(LateStart {
                start_ns: now_ns,
                disks: Vec::new(),
                releases,
            });
        }
        // This round's queued re-reads, at once where they fit. A survivor's
        // planned work ends by its horizon less the failure reservation it
        // holds this round, unspent: no disk had failed when the round
        // began. With another disk failed before (its backups being read
        // now), only the backup time held for the lost disk's primaries.
        let fixed_ns = self.config.reservation.round_fixed_ns;
        let only_failure = (0..self.disk_count())
            .map(DiskIndex)
            .all(|d| d == disk || !self.reservations.is_failed(d));
        let mut horizon_ns: Vec<u64> = self
            .late_horizon_ns
            .iter()
            .enumerate()
            .map(|(d, &h)| {
                if h == u64::MAX {
                    return h;
                }
                let survivor = DiskIndex(d as u32);
                let unspent = if only_failure {
                    self.reservations
                        .reserved_ns(survivor, round)
                        .saturating_sub(self.reservations.reserved_primary_ns(survivor, round))
                } else {
                    self.reservations
                        .reserved_backup_from_ns(survivor, round, disk)
                };
                h.saturating_sub(unspent)
            })
            .collect();
        let mut used = vec![false; horizon_ns.len()];
        let mut per_disk: Vec<Vec<PlannedRead>> = vec![Vec::new(); horizon_ns.len()];
        let queue = std::mem::take(&mut self.rereads);
        for key in queue {
            let Some(f) = self.inflight.get(&key) else {
                continue;
            };
            let Some(span) = self.reservations.stream_span(key.0) else {
                self.rereads.push(key);
                continue;
            };
            if f.read_round != round {
                self.rereads.push(key);
                continue;
            }
            let reads = self.reread(key, span.title, f.replica);
            let mut trial = horizon_ns.clone();
            let mut trial_used = used.clone();
            let fits = reads.iter().all(|r| {
                let d = r.disk.index();
                if self.reservations.is_failed(r.disk) || horizon_ns[d] == u64::MAX {
                    return false;
                }
                // A batch of its own: a sweep's fixed term once per disk.
                let start = trial[d].max(now_ns);
                let fixed = if trial_used[d] { 0 } else { fixed_ns };
                trial_used[d] = true;
                trial[d] = start.saturating_add(fixed + r.cost_ns);
                trial[d] <= end_ns
            });
            if !fits {
                self.rereads.push(key);
                continue;
            }
            horizon_ns = trial;
            used = trial_used;
            for r in reads {
                per_disk[r.disk.index()].push(r);
            }
        }
        let mut late = LateStart {
            start_ns: now_ns,
            disks: Vec::new(),
            releases: Vec::new(),
        };
        let mut ready = Vec::new();
        for (d, reads) in per_disk.into_iter().enumerate() {
            if reads.is_empty() {
                continue;
            }
            let work_ns = fixed_ns + reads.iter().map(|r| r.cost_ns).sum::<u64>();
            // Never below what it was: the unspent rest of the lost disk's
            // backup time is not handed to later late starts.
            self.late_horizon_ns[d] = self.late_horizon_ns[d].max(horizon_ns[d]);
            let batch = self.late_batch(
                round,
                DiskIndex(d as u32),
                &reads,
                true,
                work_ns,
                &mut ready,
            );
            late.disks.push(batch);
        }
        late.releases = self.release_ready(ready, round);
        (!late.disks.is_empty() || !late.releases.is_empty()).then_some(late)
    }

    /// Fails a disk (an operator's action, or recorded failed before a
    /// restart): from the next round its reads go to the other replicas;
    /// streams with a round left that has no working replica are stopped.
    pub fn fail_disk(
        &mut self,
        disk: DiskIndex,
        cause: FailCause,
    ) -> Result<Vec<Effect>, OpsError> {
        self.check_disk(disk)?;
        if !self.health.is_serving(disk) {
            return Err(OpsError::Already {
                disk,
                state: state_name(self.health.state(disk)),
            });
        }
        let mut effects = vec![Effect::DiskState {
            disk,
            state: DiskState::Failed,
        }];
        effects.extend(self.fail_serving_disk(disk, cause));
        Ok(effects)
    }

    fn fail_serving_disk(&mut self, disk: DiskIndex, cause: FailCause) -> Vec<Effect> {
        self.health.fail(disk);
        // Its bad extents are rewritten by its rebuild.
        self.repairs.forget_disk(disk);
        let mut effects = vec![Effect::DiskFailed { disk, cause }];
        let lost = self.reservations.fail_disk_from(disk, self.next_round);
        for stream in lost {
            let span = self.reservations.stream_span(stream).expect("registered");
            // The first playback round it has not read yet.
            let next = PlaybackRound(
                span.first_playback_round.0 + self.next_round.since(span.start_round) as u32,
            );
            if let Some(a) = self.abort(
                stream,
                AbortReason::DataLost {
                    playback_round: next,
                },
            ) {
                effects.push(Effect::Aborted(a));
            }
        }
        effects
    }

    /// A replacement device is being mapped to failed disk `disk`; no
    /// rebuild may start until [`Array::end_replace`].
    pub fn start_replace(&mut self, disk: DiskIndex) -> Result<(), OpsError> {
        self.check_disk(disk)?;
        match self.health.state(disk) {
            DiskState::Failed if !self.replacing[disk.index()] => {
                self.replacing[disk.index()] = true;
                Ok(())
            }
            DiskState::Failed => Err(OpsError::Replacing {
                disk,
                what: "wait for it to end",
            }),
            DiskState::Rebuilding => Err(OpsError::WrongState {
                disk,
                state: "rebuilding",
                what: "wait for the rebuild to end",
            }),
            state => Err(OpsError::WrongState {
                disk,
                state: state_name(state),
                what: "it serves; fail it first",
            }),
        }
    }

    /// The replacement of `disk` ended (mapped or not).
    pub fn end_replace(&mut self, disk: DiskIndex) {
        self.replacing[disk.index()] = false;
    }

    /// Starts rebuilding failed disk `disk` from the other replicas, one
    /// rebuild at a time. Another failed disk does not prevent it: copies
    /// whose only source is there (or whose round is already lost) have no
    /// good replica; their rounds are reported lost and the rest of the disk
    /// is rebuilt, so an operator can always bring a disk back.
    pub fn start_rebuild(&mut self, disk: DiskIndex) -> Result<RebuildStarted, OpsError> {
        self.check_disk(disk)?;
        let state = self.health.state(disk);
        if state != DiskState::Failed {
            return Err(OpsError::WrongState {
                disk,
                state: state_name(state),
                what: "only a failed disk is rebuilt",
            });
        }
        if self.replacing[disk.index()] {
            return Err(OpsError::Replacing {
                disk,
                what: "restore it afterwards",
            });
        }
        if let Some(r) = &self.rebuild {
            return Err(OpsError::RebuildRunning {
                disk: r.queue.disk(),
            });
        }
        let mut tasks = rebuild_tasks(
            disk,
            self.titles
                .values()
                .filter_map(|t| t.layout.as_deref().map(|l| (t.id, l))),
        );
        let before = tasks.len();
        tasks.retain(|t| !self.repairs.is_lost(t.title, t.round));
        let already_lost = before - tasks.len();
        let no_source = tasks
            .iter()
            .filter(|t| {
                t.read_from
                    .iter()
                    .any(|s| s.disk != disk && !self.is_serving(s.disk))
            })
            .count();
        let copies = tasks.len();
        let queue = RebuildQueue::new(disk, tasks);
        let total_bytes = queue.progress().total_bytes;
        self.health.start_rebuild(disk);
        self.rebuild = Some(RebuildState {
            queue,
            started_round: self.next_round,
            outstanding: BTreeMap::new(),
            copies_done: 0,
            copied_bytes: 0,
            lost_copies: already_lost as u64,
            failures: Vec::new(),
            handed_out: false,
        });
        Ok(RebuildStarted {
            disk,
            copies,
            total_bytes,
            round: self.next_round,
            lost_copies: already_lost + no_source,
        })
    }

    /// A copy (a rebuild's or a repair's) was moved (`Ok`) or could not be
    /// (`Err`). Returns what follows: a repaired extent, a round with no
    /// good replica, or (an I/O error) the disk's health changing.
    pub fn copy_done(&mut self, copy: CopyId, result: Result<(), CopyFailure>) -> Vec<Effect> {
        if let Some(key) = self.repairs.done(copy) {
            return self.repair_done(key, result);
        }
        let Some(r) = self.rebuild.as_mut() else {
            return Vec::new();
        };
        let Some((bytes, round_of)) = r.outstanding.remove(&copy) else {
            return Vec::new();
        };
        r.copies_done += 1;
        match result {
            Ok(()) => {
                r.copied_bytes += bytes;
                Vec::new()
            }
            Err(CopyFailure::SourceBad(_)) => {
                // The round has no good replica: lost, not a failure of the
                // rebuilt disk.
                r.lost_copies += 1;
                self.round_lost(round_of)
            }
            Err(e) => {
                r.failures.push(e.to_string());
                Vec::new()
            }
        }
    }

    fn round_lost(&mut self, lost: LostRound) -> Vec<Effect> {
        if self.repairs.mark_lost(lost.title, lost.playback_round) {
            self.counters.rounds_lost += 1;
            vec![Effect::RoundLost(lost)]
        } else {
            Vec::new()
        }
    }

    fn repair_done(&mut self, key: ExtentKey, result: Result<(), CopyFailure>) -> Vec<Effect> {
        match result {
            Ok(()) => {
                if self.repairs.repaired(&key, self.next_round.minus(1)) {
                    self.counters.extents_repaired += 1;
                    vec![Effect::ExtentRepaired { extent: key }]
                } else {
                    Vec::new()
                }
            }
            Err(CopyFailure::SourceBad(_)) => self.round_lost(LostRound {
                title: key.title,
                playback_round: key.playback_round,
            }),
            Err(CopyFailure::Io { disk, .. }) => {
                // Evidence about the device; the repair is tried again.
                let mut effects = Vec::new();
                let was = self.health.state(disk);
                if let Some(state) = self.health.record_error(disk, self.next_round.minus(1)) {
                    effects.push(Effect::DiskState { disk, state });
                    if state == DiskState::Failed && was != DiskState::Failed {
                        effects.extend(self.fail_serving_disk(disk, FailCause::Errors));
                    }
                }
                if let Some(layout) = self
                    .titles
                    .get(&key.title)
                    .and_then(|t| t.layout.as_ref().map(Arc::clone))
                {
                    self.repairs.retry(key, &layout);
                }
                effects
            }
            Err(CopyFailure::Other(_)) => {
                self.repairs.repaired(&key, self.next_round.minus(1));
                Vec::new()
            }
        }
    }

    /// Bad extents not repaired yet.
    pub fn bad_extents(&self) -> usize {
        self.repairs.bad_count()
    }

    /// Rounds with no good replica, in title and round order.
    pub fn lost_rounds(&self) -> Vec<LostRound> {
        self.repairs.lost().collect()
    }

    /// Changes whenever [`Array::extent_faults`] does (counts of what is
    /// bad and lost now, and of every mark and repair so far), so that an
    /// executor can look every round without building the lists.
    pub fn extent_faults_signature(&self) -> [u64; 5] {
        [
            self.repairs.bad_count() as u64,
            self.repairs.lost_count() as u64,
            self.counters.extents_bad,
            self.counters.extents_repaired,
            self.counters.rounds_lost,
        ]
    }

    /// The bad extents and lost rounds, for the executor to keep across
    /// restarts (it saves them when they change).
    pub fn extent_faults(&self) -> ExtentFaults {
        self.repairs.faults()
    }

    /// At start, before any stream is admitted: the faults kept from before
    /// a restart. Lost rounds are lost again; bad extents are marked bad and
    /// their repairs queued (as when first read), except those of titles no
    /// longer stored or on disks that do not serve (a rebuild rewrites
    /// those). Returns how many entries took effect.
    pub fn restore_extent_faults(&mut self, faults: &ExtentFaults) -> usize {
        let mut restored = 0;
        for &lost in &faults.lost {
            if self.titles.contains_key(&lost.title) && !self.round_lost(lost).is_empty() {
                restored += 1;
            }
        }
        for &(key, disk) in &faults.bad {
            // Marked as when first read; an extent whose title is gone
            // (no effect) or whose disk does not serve is dropped.
            if !self.reservations.is_failed(disk) && !self.extent_bad(key, disk, None).is_empty() {
                restored += 1;
            }
        }
        restored
    }

    /// The rebuilt device is synced: the disk serves again when every copy
    /// succeeded. Returns the disk's new state change, if any.
    pub fn finish_rebuild(&mut self, disk: DiskIndex, synced: bool) -> Option<RebuildStatus> {
        let r = self.rebuild.as_ref()?;
        if r.queue.disk() != disk || !r.handed_out {
            return None;
        }
        let status = self.rebuild_status().expect("running");
        self.rebuild = None;
        if synced && status.failures.is_empty() && status.copies_outstanding == 0 {
            self.health.restore(disk);
            self.reservations.restore_disk(disk);
        } else {
            // Not whole: the disk stays failed and may be rebuilt again.
            self.health.fail(disk);
        }
        Some(status)
    }

    pub fn rebuild_status(&self) -> Option<RebuildStatus> {
        self.rebuild.as_ref().map(|r| RebuildStatus {
            progress: r.queue.progress(),
            started_round: r.started_round,
            copies_done: r.copies_done,
            copied_bytes: r.copied_bytes,
            copies_outstanding: r.outstanding.len(),
            lost_copies: r.lost_copies,
            failures: r.failures.clone(),
        })
    }

    // ----- writes -----

    /// An ingest of `title` (placed as `layout`) will write its rounds in
    /// order, in disk time the streams and the rebuild leave.
    pub fn begin_ingest(&mut self, title: TitleId, layout: Arc<TitleLayout>) {
        self.writes.begin(title, layout);
    }

    /// The ingest's writer waits for round `title_round`.
    pub fn want_write(&mut self, title: TitleId, title_round: PlaybackRound) {
        self.writes.want(title, title_round);
    }

    /// How a new write of `layout` (a title staged from a tier, say) would
    /// go if it began now: the write queue's rule run ahead on a copy,
    /// behind the ingests queued now, in the disk time that the streams
    /// admitted now leave, with the writer keeping up. Streams admitted
    /// later, re-reads and a rebuild can only make it later. `None` when
    /// some round never fits (past the tables' horizon no stream is
    /// reserved, so only a write larger than an idle round could).
    ///
    /// `load` says what happens to the time streams free as they end:
    /// [`WriteLoad::AdmittedOnly`] gives it to the write (no stream is
    /// admitted meanwhile: exact for the write queue's rule, a test checks
    /// it); [`WriteLoad::Steady`] lets new streams take it back, so no
    /// round leaves the write more than the mean unreserved time over the
    /// disks now (a server at capacity, where arrivals refill what
    /// departures free).
    pub fn predict_write(
        &self,
        layout: Arc<TitleLayout>,
        load: WriteLoad,
    ) -> Option<WritePrediction> {
        let rounds = layout.rounds().len();
        if rounds == 0 {
            return Some(WritePrediction {
                rounds: 0,
                last_round_busy_ns: 0,
            });
        }
        let probe = TitleId(u64::MAX);
        let mut writes = self.writes.clone();
        writes.begin(probe, layout);
        let fixed_ns = self.config.reservation.round_fixed_ns;
        let idle_round_ns = self
            .config
            .reservation
            .round_duration_ns
            .saturating_sub(fixed_ns);
        // The tables hold rounds [current, current + horizon); the round in
        // progress may be before `next_round`, so count from the tables'
        // own window, not from the next round.
        let window_end = self
            .reservations
            .current_round()
            .plus(self.config.reservation.horizon_rounds);
        let horizon = window_end.0.saturating_sub(self.next_round.0);
        let disks = self.disk_count() as usize;
        let no_use = vec![0u64; disks];
        let steady_cap_ns = match load {
            WriteLoad::AdmittedOnly => u64::MAX,
            WriteLoad::Steady if horizon == 0 => u64::MAX,
            WriteLoad::Steady => {
                let now = self.reservations.write_credits_ns(self.next_round, &no_use);
                now.iter().sum::<u64>() / disks.max(1) as u64
            }
        };
        let mut granted = 0usize;
        // Under a steady load a round may leave less than a whole idle
        // round forever; a write larger than the cap then never fits.
        let limit = match load {
            WriteLoad::AdmittedOnly => horizon + rounds as u64 + 1,
            WriteLoad::Steady => horizon + 64 * (rounds as u64 + 1),
        };
        for k in 0..limit {
            let round = Round(self.next_round.0 + k);
            let mut credits = if k < horizon {
                self.reservations.write_credits_ns(round, &no_use)
            } else {
                vec![idle_round_ns; disks]
            };
            for c in &mut credits {
                *c = (*c).min(steady_cap_ns);
            }
            let grant = writes.grant(round, &credits, idle_round_ns, &self.config.write_bound);
            granted += grant.rounds.iter().filter(|(t, ..)| *t == probe).count();
            for (title, playback_round, _) in &grant.rounds {
                writes.want(*title, PlaybackRound(playback_round.0 + 1));
            }
            if granted >= rounds {
                // The writer goes on when every disk's batch of this round
                // is done: at the latest, its reserved and granted time.
                let last_round_busy_ns = DiskIndex::all(self.disk_count())
                    .map(|d| {
                        let reserved = if k < horizon {
                            self.reservations.reserved_ns(d, round)
                        } else {
                            0
                        };
                        fixed_ns + reserved + grant.charged_ns[d.index()]
                    })
                    .max()
                    .unwrap_or(0);
                return Some(WritePrediction {
                    rounds: k + 1,
                    last_round_busy_ns,
                });
            }
        }
        None
    }

    /// The ingest of `title` ended.
    pub fn end_ingest(&mut self, title: TitleId) -> bool {
        self.writes.end(title)
    }

    // ----- invariants -----

    /// Checks the array's state; panics with what is wrong. O(streams +
    /// disks × horizon + in-flight reads).
    pub fn check_invariants(&self) {
        self.reservations.check_invariants();
        self.deliveries.check_invariants();
        for stream in self.reservations.stream_ids() {
            assert!(
                !self.delivering || self.deliveries.contains(stream),
                "stream {} reads with no delivery",
                stream.0
            );
        }
        for d in DiskIndex::all(self.disk_count()) {
            assert_eq!(
                self.health.is_serving(d),
                !self.reservations.is_failed(d),
                "disk {d}: health and the tables disagree on whether it serves"
            );
        }
        assert!(
            self.reservations
                .title_ids()
                .eq(self.titles.keys().copied()),
            "the title registry and the tables hold different titles"
        );
        for (&(stream, playback_round), f) in &self.inflight {
            assert!(
                f.queued || f.pieces.any_pending(),
                "stream {} round {playback_round}: in flight with nothing pending",
                stream.0
            );
            assert_eq!(
                f.queued,
                self.rereads.contains(&(stream, playback_round)),
                "stream {} round {playback_round}: queued for a re-read",
                stream.0
            );
            assert!(f.read_round < self.next_round, "in flight before its round");
        }
        self.repairs.check_invariants();
        if let Some(r) = &self.rebuild {
            assert_eq!(
                self.health.state(r.queue.disk()),
                DiskState::Rebuilding,
                "the rebuilt disk is in the rebuilding state"
            );
        }
        for d in DiskIndex::all(self.disk_count()) {
            if self.health.state(d) == DiskState::Rebuilding {
                assert!(
                    self.rebuild.as_ref().is_some_and(|r| r.queue.disk() == d),
                    "disk {d} is rebuilding without a rebuild"
                );
            }
        }
    }
}

/// A rebuild or repair copy's read or write on `disk` in `round`.
fn copy_command(
    disk: DiskIndex,
    round: Round,
    op: Op,
    purpose: Purpose,
    extents: &[(u64, u64)],
    charge_ns: u64,
) -> DiskCommand {
    DiskCommand {
        disk,
        round,
        op,
        purpose,
        extents: extents
            .iter()
            .filter(|&&(_, sectors)| sectors > 0)
            .map(|&(lbn, sectors)| command::CommandExtent {
                device_offset_bytes: lbn * crate::units::SECTOR_BYTES,
                length_bytes: sectors * crate::units::SECTOR_BYTES,
                crc32c: None,
                whole: None,
            })
            .collect(),
        charge_ns,
        joins_previous: false,
        prefetch_bytes: 0,
        part_offset_bytes: 0,
    }
}
