//! One simulation run: a disk array, a set of titles and a workload, stepped
//! round by round on a virtual clock.
//!
//! Each round: time advances in the reservation tables; a scheduled disk
//! failure takes effect at the round boundary; in simulated-disk mode every
//! disk executes the reads the core planned for the round on the detailed
//! disk model (C-SCAN order, head, cache and backlog kept across rounds) and
//! misses and overruns are counted; then the round's arrivals are offered to
//! admission, which tries start rounds from the next one up to the
//! look-ahead. Measurements cover rounds `warmup_rounds ≤ r < end_round`.
//!
//! Titles come in two forms: [`SimTitle`]s (a schedule only), which a run
//! plans, places on a fresh array and charges itself ([`place_titles`]), and
//! [`PlacedTitle`]s, already planned, placed and charged by someone else —
//! `rondo simulate --data-dir` loads a data directory's stored titles with
//! the server's own loader and runs them through [`run_placed`], so the
//! simulated array has the very layout and charges the server admits with.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use rondo_model::array::{
    Aborted, AdmitRequest, Array, ArrayConfig, ArrayTitle, Completion, CompletionOrder,
    CycleStatus, DeliveryConfig, DiskCommand, DrivePrefetch, DynamicCycle, Effect, ExtentChecksums,
    FailCause, Purpose, ReadOutcome, RoundPlan, Span, batch_plan, configure_for_bound,
    rondo_write_bound,
};
use rondo_model::disk::{self, Disk, DiskError, DiskProfile, PaperBound, RondoBound};
use rondo_model::health::{ExtentKey, HealthPolicy};
use rondo_model::layout::{
    self, ArrayAllocator, BackupParams, FragmentSequence, LayoutError, LayoutParams, Replica,
    ReplicaPlacement, RoundRobinCounter, TitleLayout, TitlePlan,
};
use rondo_model::rebuild::{CopyFailure, CopyTask};
use rondo_model::reservation::{
    Bound, Burst, BurstLead, Guarantee, ReplicaChoice, ReservationConfig, Reservations, Scheme,
    StartChoice, TitleCharges,
};
use rondo_model::schedule::Schedule;
use rondo_model::units::{
    BLOCK_BYTES_DEFAULT, DiskIndex, NS_PER_S, PlaybackRound, ROUND_DURATION_NS_DEFAULT, Round,
    STRIDE_BYTES_DEFAULT, StreamId, TitleId,
};

use crate::faults::{FaultPlan, ReadErrorKind};
use crate::workload::{PoissonArrivals, TitleChoice};

/// Whether disks only hold reservations or also execute their reads.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Reservations only: no disk executes anything (seed 000 §6.1).
    AdmissionOnly,
    /// Every disk executes its round's reads on the detailed disk model.
    SimulatedDisk,
}

/// Which round bound admission uses: the paper's (paper mode) or rondo's true
/// upper bound of the detailed model (rondo mode; ARCHITECTURE.md, invariants).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BoundKind {
    /// Seed 000 §2.3 with Table 2's datasheet values.
    Paper,
    /// A true upper bound of the detailed model for the data's real location.
    Rondo,
}

/// A disk failing at a round boundary.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailureSpec {
    pub disk: DiskIndex,
    /// The first round in which the disk is unavailable.
    pub round: Round,
}

fn one_group() -> u32 {
    1
}

/// Everything one run depends on, besides the titles. Unknown fields are
/// refused, so a misspelled key in an experiment file is an error rather
/// than a silently different experiment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimConfig {
    pub disks: u32,
    /// Disk profile name (`rondo disk list`).
    pub profile: String,
    pub scheme: Scheme,
    pub placement: ReplicaPlacement,
    /// B_d of backup declustering; `None` keeps backups whole.
    pub backup_block_bytes: Option<u64>,
    /// Deterministic placement of declustered fragments (docs/layout.md).
    #[serde(default)]
    pub fragment_sequence: FragmentSequence,
    /// Deterministic placement's round-robin counter: per primary disk or
    /// per title (docs/layout.md).
    #[serde(default)]
    pub round_robin_counter: RoundRobinCounter,
    /// G disk groups: each backup in its primary's group (d mod G), so a
    /// storage node of G consecutive disks can fail whole (seed 000 §8).
    #[serde(default = "one_group")]
    pub disk_groups: u32,
    /// W, the disks one title is striped over (`LayoutParams::stripe_disks`):
    /// 0 is every disk; fewer is seed 001's placement, a title on S nodes.
    #[serde(default)]
    pub stripe_disks: u32,
    /// Which replica each round of a new stream reads under `minimum`
    /// (`ReplicaChoice`; seed 000: the primary).
    #[serde(default)]
    pub replica_choice: ReplicaChoice,
    /// Which start round that fits a new stream takes (`StartChoice`; seed
    /// 000: the first).
    #[serde(default)]
    pub start_choice: StartChoice,
    /// What admission guarantees each disk-round (`Guarantee`; seed 000:
    /// deterministic). The statistical one needs the rondo bound.
    #[serde(default)]
    pub guarantee: Guarantee,
    /// Which stroke the rondo bound charges: the whole drive's (seed 000)
    /// or the cylinders the placed titles occupy (`disk::stroke_holding`,
    /// as `rondo serve --stroke data`; the titles are placed before they
    /// are charged).
    #[serde(default)]
    pub stroke: disk::Stroke,
    /// Under `minimum`: rounds a survivor has to read a failed disk's
    /// backups (`BackupWindow`; 1, seed 000: in the round itself).
    #[serde(default = "one_round")]
    pub backup_window_rounds: u32,
    /// Under `minimum`: how late a disk's loss may be noticed
    /// (`BackupWindow::loss_notice_rounds`; 0, seed 000: at a round
    /// boundary).
    #[serde(default)]
    pub loss_notice_rounds: u32,
    pub bound: BoundKind,
    pub mode: Mode,
    pub round_duration_ns: u64,
    pub stride_bytes: u64,
    pub block_bytes: u64,
    /// Rounds per run on one disk: 1 is `variable-grain`, more `segments`
    /// (`LayoutParams::segment_rounds`).
    pub segment_rounds: u32,
    /// Rounds a stream reads in one request (seed 003's GPMP, k = u + 1):
    /// 1 is one read per round (Sweep, seed 000); more groups consecutive
    /// rounds of a segment (`Bound::title_charges_grouped`), executed by the
    /// array as one request per group.
    pub read_group_rounds: u32,
    /// A new stream's start burst in rounds (`ArrayConfig::burst`; 0:
    /// none, as in seed 000).
    #[serde(default)]
    pub burst_rounds: u32,
    /// Whether a start burst's client keeps its lead (`BurstLead`; spent:
    /// rondo's first burst).
    #[serde(default)]
    pub burst_lead: BurstLead,
    /// Seed 003's prefetching into the drive cache (`ArrayConfig::
    /// drive_prefetch`): needs the segments layout, the rondo bound and a
    /// profile whose cache holds only what the host prefetches (e.g.
    /// `seed003-table1-c2-s8`); not with read groups.
    #[serde(default)]
    pub drive_prefetch: DrivePrefetch,
    /// Re-cut the drive cache into segments of one block each, the block
    /// being the largest round any title reads (`disk::with_cache_segments_
    /// for`): as many prefetched blocks as the cache has room for.
    #[serde(default)]
    pub fit_drive_segments: bool,
    /// Seed 004's dynamic cycle in the array's rounds (`ArrayConfig::
    /// cycle`): needs the segments layout; titles are charged for every
    /// group length it may use.
    #[serde(default)]
    pub dynamic_cycle: Option<DynamicCycle>,
    /// ρ: arrivals at ρ·μ per round (seed 000 §6.2).
    pub load: f64,
    /// R_disk in μ = D·R_disk·T/S_tot (equation 1); seed 000 uses Table 2's
    /// minimum internal rate, 11.3 MB/s.
    pub mu_rate_bytes_per_s: f64,
    /// Start rounds tried after the next one; `None` is ⌈1/λ⌉ (seed 000 §6.2).
    pub lookahead_rounds: Option<u64>,
    /// Server buffer per disk (seed 000 §6.3: 64 MB).
    pub buffer_per_disk_bytes: u64,
    /// Network capacity in bits per second (seed 000 §6.3); `None`: not
    /// limited, as in seed 000's experiments.
    pub network_bits_per_s_max: Option<u64>,
    pub warmup_rounds: u64,
    pub end_round: u64,
    pub failure: Option<FailureSpec>,
    /// Where each disk's first stride lies, in strides from LBN 0 (0: the
    /// outer edge). Lets tests put data in the inner zones.
    pub first_stride: u64,
    pub seed: u64,
    /// Title popularity: `None` offers the titles round-robin (seed 000
    /// §6.3); `Some(a)` draws title k (from 0) with probability ∝ 1/(k+1)^a
    /// from a ChaCha8 stream seeded `seed + 1`, as `rondo load --zipf a`
    /// does, so with 1 s rounds a replication with the load generator's
    /// seed offers the very arrivals and titles of that load run.
    #[serde(default)]
    pub zipf_exponent: Option<f64>,
    /// Seed 001 §6.4's popularity instead: title 0 takes this share of the
    /// requests and the others share the rest evenly (`TitleChoice::popular`,
    /// from the same seeded stream). At most one of the two is set.
    #[serde(default)]
    pub popular_share: Option<f64>,
    /// Arrivals per round; `None` is `load`·μ (equation 1).
    #[serde(default)]
    pub arrival_rate_per_round: Option<f64>,
    /// Arrivals per second (instead of per round: experiments that compare
    /// round lengths at one offered rate); at most one of the two is set.
    #[serde(default)]
    pub arrival_rate_per_s: Option<f64>,
    /// Faults injected into the run: failures, read errors, a rebuild, an
    /// ingest, range and time-start arrivals (`faults`).
    #[serde(default)]
    pub faults: FaultPlan,
    /// Run the array's invariant check after every round (slow on long
    /// titles; the seeded scenarios turn it on).
    #[serde(default)]
    pub check_invariants: bool,
}

fn one_round() -> u32 {
    1
}

impl SimConfig {
    /// Seed 000's set-up: Cheetah disks, 1 s rounds, 2 MB strides, 16 KB
    /// blocks, ρ = 0.8, 64 MB of buffer per disk, rounds 3000–9000, paper mode.
    pub fn seed000(disks: u32, scheme: Scheme, placement: ReplicaPlacement) -> SimConfig {
        SimConfig {
            disks,
            profile: "cheetah-4lp".to_string(),
            scheme,
            placement,
            backup_block_bytes: None,
            fragment_sequence: FragmentSequence::PerFragment,
            round_robin_counter: RoundRobinCounter::PerDisk,
            disk_groups: 1,
            stripe_disks: 0,
            replica_choice: ReplicaChoice::Primary,
            start_choice: StartChoice::First,
            guarantee: Guarantee::Deterministic,
            stroke: disk::Stroke::Whole,
            backup_window_rounds: 1,
            loss_notice_rounds: 0,
            bound: BoundKind::Paper,
            mode: Mode::AdmissionOnly,
            round_duration_ns: ROUND_DURATION_NS_DEFAULT,
            stride_bytes: STRIDE_BYTES_DEFAULT,
            block_bytes: BLOCK_BYTES_DEFAULT,
            segment_rounds: 1,
            read_group_rounds: 1,
            burst_rounds: 0,
            burst_lead: BurstLead::Spent,
            drive_prefetch: DrivePrefetch::None,
            fit_drive_segments: false,
            dynamic_cycle: None,
            load: 0.8,
            // Seed 000 Table 2: 11.3 MB/s inner-zone sustained rate.
            mu_rate_bytes_per_s: 11.3e6,
            lookahead_rounds: None,
            // Seed 000 §6.3: "64 MB for every extra disk"; MB read as 2^20
            // bytes since buffers are 16 KB blocks (assumption).
            buffer_per_disk_bytes: 64 << 20,
            network_bits_per_s_max: None,
            warmup_rounds: 3000,
            end_round: 9000,
            failure: None,
            first_stride: 0,
            seed: 1,
            zipf_exponent: None,
            popular_share: None,
            arrival_rate_per_round: None,
            arrival_rate_per_s: None,
            faults: FaultPlan::default(),
            check_invariants: false,
        }
    }
}

/// A title offered to the simulation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SimTitle {
    pub name: String,
    pub schedule: Schedule,
}

/// A title planned, placed and charged: what [`place_titles`] makes of a
/// [`SimTitle`], or a stored title loaded by the server's loader.
#[derive(Clone, Debug)]
pub struct PlacedTitle {
    pub name: String,
    pub schedule: Schedule,
    /// Device extents of every round and replica; needed in simulated-disk
    /// mode (and by the rondo bound, which has charged them already).
    pub layout: Option<TitleLayout>,
    /// What admission reserves for a stream of the title.
    pub charges: TitleCharges,
    /// Its charges for other read-group lengths (the dynamic cycle's).
    pub group_charges: Vec<TitleCharges>,
    /// Every extent's checksum, when the title's bytes exist (the commands
    /// carry them; the simulated disks do not read bytes).
    pub checksums: Option<ExtentChecksums>,
}

/// Why a run could not start.
#[derive(Debug, Error)]
pub enum SimError {
    #[error("disk: {0}")]
    Disk(#[from] DiskError),
    #[error("layout: {0}")]
    Layout(#[from] LayoutError),
    #[error("a simulation needs at least one title")]
    NoTitles,
    #[error("title '{name}': {source}")]
    Charges {
        name: String,
        source: rondo_model::reservation::ChargesError,
    },
    #[error("{0}")]
    Config(String),
}

/// What one run measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SimResult {
    /// Streams in playback, averaged over the measured rounds.
    pub mean_active_streams: f64,
    /// Requests that arrived in the measured rounds.
    pub arrivals: u64,
    pub admitted: u64,
    pub rejected: u64,
    pub rejection_ratio: f64,
    /// Rounds between arrival and first read, averaged over admitted requests.
    pub mean_startup_delay_rounds: f64,
    /// Seconds from arrival to the first data sent (seed 003 Figure 5):
    /// an arrival falls, on average, half-way through the round in which it
    /// is offered (`mean_startup_delay_rounds` counts from that round's
    /// start), and the first data goes out at the start of the round after
    /// the first read, k − 1 rounds later under a backup window of k rounds
    /// (its client's lead): `(mean_startup_delay_rounds + 1/2 + k − 1)·T`.
    #[serde(default)]
    pub mean_startup_latency_s: f64,
    /// λ, arrivals per round, and μ of equation 1.
    pub arrival_rate_per_round: f64,
    pub mu_per_round: f64,
    pub lookahead_rounds: u64,
    /// Averaged over disks and measured rounds, as fractions of the round:
    /// reserved time (fixed term included) and its primary part.
    pub reserved_fraction: f64,
    pub reserved_primary_fraction: f64,
    /// The backup part: `reserved_fraction − reserved_primary_fraction` (Fig. 8).
    pub reserved_backup_fraction: f64,
    /// Average over measured rounds of (most − least reserved disk) / T (Fig. 12).
    pub reserved_spread_fraction: f64,
    /// Averages over measured rounds of the most and the least reserved
    /// disk's reserved time / T (their difference is the spread).
    pub reserved_max_fraction: f64,
    pub reserved_min_fraction: f64,
    /// Simulated-disk mode: measured busy time over the round, averaged over
    /// working disks and measured rounds.
    pub busy_fraction: Option<f64>,
    /// The same for reserved time on working disks (to set beside busy time).
    pub reserved_working_fraction: f64,
    /// Stream-rounds not complete when their round ended, over the whole run.
    pub deadline_misses: u64,
    /// Disk-rounds whose batch ran past the round's end.
    pub disk_round_overruns: u64,
    /// Disk-rounds whose measured busy time exceeded the time reserved on
    /// that disk (fixed term included); the bound was not an upper bound.
    pub busy_over_reserved_disk_rounds: u64,
    /// Reads whose data had no working replica.
    pub lost_reads: u64,
    /// Stream reads that failed (I/O error or bad checksum), and re-reads
    /// from the other replica they caused.
    #[serde(default)]
    pub read_errors: u64,
    #[serde(default)]
    pub rereads: u64,
    /// Stream-rounds recovered after a read error that were late: re-reads
    /// run in unreserved time from the next round on (a planned read's
    /// miss is `deadline_misses`).
    #[serde(default)]
    pub recovery_misses: u64,
    /// Under a backup window: a failed disk's backup reads served from the
    /// survivors' backlogs, and how many were cut between rounds.
    #[serde(default)]
    pub window_recoveries: u64,
    #[serde(default)]
    pub window_splits: u64,
    /// The most stream-rounds held at one round boundary behind a late
    /// round (`ArrayCounters::held_behind_late_max`).
    #[serde(default)]
    pub held_behind_late_max: u64,
    /// Stream-rounds released after a player started at its stream's first
    /// release would have played them (`ArrayCounters::late_releases`).
    #[serde(default)]
    pub late_releases: u64,
    /// Streams the array stopped (their data was lost, or their client
    /// stopped taking it).
    #[serde(default)]
    pub streams_aborted: u64,
    /// Of those, streams whose client stopped taking data (the fault plan's
    /// stalls).
    #[serde(default)]
    pub clients_stalled: u64,
    /// Streams admitted with a start burst (`SimConfig::burst_rounds`).
    #[serde(default)]
    pub burst_starts: u64,
    /// Streams released because their client disconnected (the fault
    /// plan's departures).
    #[serde(default)]
    pub departures: u64,
    /// Replica extents found bad (checksum), bad extents repaired from
    /// their replica, and rounds left with no good replica.
    #[serde(default)]
    pub extents_bad: u64,
    #[serde(default)]
    pub extents_repaired: u64,
    #[serde(default)]
    pub rounds_lost: u64,
    /// Disks not serving at the run's end.
    #[serde(default)]
    pub disks_failed: u64,
    /// Rounds from the rebuild's start to the disk serving again.
    #[serde(default)]
    pub rebuild_rounds: Option<u64>,
    /// Rounds from the ingest's start to its last round granted.
    #[serde(default)]
    pub ingest_rounds: Option<u64>,
    /// Rounds after which the array's invariants were checked.
    #[serde(default)]
    pub invariant_checks: u64,
    pub rounds_measured: u64,
    /// Server buffer admission reserved, averaged over the measured rounds
    /// (what a policy costs in host memory: seed 003 Figure 4's x axis).
    #[serde(default)]
    pub mean_buffer_bytes: f64,
    /// Simulated-disk mode: disk commands served wholly from the drive's
    /// cache over the run (seed 003's prefetched blocks).
    #[serde(default)]
    pub cache_hits: u64,
    /// The dynamic cycle: its length in rounds averaged over the measured
    /// rounds, and its state at the run's end (operations counted).
    #[serde(default)]
    pub mean_cycle_group_rounds: Option<f64>,
    /// Measured disk-rounds whose reservation (with the fixed term) exceeds
    /// the round: never, unless an operation was made unchecked.
    #[serde(default)]
    pub overcommitted_disk_rounds: u64,
    #[serde(default)]
    pub cycle: Option<CycleStatus>,
}

/// A prepared array: titles planned, placed and charged, admission
/// configured. [`run`] drives one; benchmarks drive exactly the same set-up
/// through [`prepare`].
pub struct PreparedArray {
    array: Array,
    lookahead_rounds: u64,
    arrival_rate_per_round: f64,
    mu_per_round: f64,
}

impl PreparedArray {
    /// The array's reservation tables, with every title added.
    pub fn reservations(&self) -> &Reservations {
        self.array.reservations()
    }

    /// The array state machine the run executes.
    pub fn array(&self) -> &Array {
        &self.array
    }

    pub fn array_mut(&mut self) -> &mut Array {
        &mut self.array
    }

    /// Start rounds admission tries (the configured look-ahead or ⌈1/λ⌉).
    pub fn lookahead_rounds(&self) -> u64 {
        self.lookahead_rounds
    }

    /// λ: requests per round at the configured load.
    pub fn arrival_rate_per_round(&self) -> f64 {
        self.arrival_rate_per_round
    }

    /// μ of seed 000 equation 1, per round.
    pub fn mu_per_round(&self) -> f64 {
        self.mu_per_round
    }
}

/// Plans, places and charges every title and configures admission, as
/// [`run`] does before its first round.
pub fn prepare(config: &SimConfig, titles: &[SimTitle]) -> Result<PreparedArray, SimError> {
    let profile = config.disk_profile(titles.iter().map(|t| &t.schedule))?;
    let (bound, placed) = place_titles(config, &profile, titles)?;
    prepare_placed(config, &bound, &placed)
}

/// Runs one simulation: [`place_titles`], then [`run_placed`].
pub fn run(config: &SimConfig, titles: &[SimTitle]) -> Result<SimResult, SimError> {
    let profile = config.disk_profile(titles.iter().map(|t| &t.schedule))?;
    let (bound, placed) = place_titles(config, &profile, titles)?;
    run_placed(config, &bound, &placed)
}

/// What a run decided, round by round: the admissions it was asked for and
/// their answers, every disk's commands and the streams stopped. Two
/// executors of the same scenario must log the same (the differential test).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunLog {
    pub admissions: Vec<AdmissionLog>,
    pub rounds: Vec<RoundLog>,
}

/// One arrival offered to admission.
#[derive(Clone, Debug, PartialEq)]
pub struct AdmissionLog {
    /// The round during which it arrived.
    pub round: Round,
    pub request: AdmitRequest,
    /// The stream and its start round, or the rejection's text.
    pub result: Result<(StreamId, Round), String>,
}

/// One round's decisions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoundLog {
    pub round: Round,
    /// Per disk, the commands in plan order.
    pub commands: Vec<Vec<DiskCommand>>,
    /// Streams stopped at the round's start or by the round's completions.
    pub aborted: Vec<StreamId>,
}

/// The simulated disks, and stream reads in flight ordered by the model time
/// they complete at.
struct SimDisks {
    disks: Vec<Disk>,
    /// `(completion order, sequence)` → the completion to report then
    /// (`Completion::order_at`: model time, ties by content).
    events: BTreeMap<(CompletionOrder, u64), Completion>,
    sequence: u64,
}

impl SimDisks {
    fn push(&mut self, at_ns: u64, completion: Completion) {
        self.events
            .insert((completion.order_at(at_ns), self.sequence), completion);
        self.sequence += 1;
    }
}

/// The run's executor: the array, the disks, the workload and what is measured.
struct Executor<'a> {
    config: &'a SimConfig,
    titles: &'a [PlacedTitle],
    prepared: PreparedArray,
    sim: Option<SimDisks>,
    /// playing[r]: change in streams in playback at round r (a difference array).
    playing: Vec<i64>,
    m: Measure,
    /// Spans of range and time-start arrivals.
    spans: ChaCha8Rng,
    ingest: Option<IngestRun>,
    rebuild_started_round: Option<Round>,
    log: Option<RunLog>,
    /// The simulated clients of admitted streams.
    clients: BTreeMap<StreamId, SimClient>,
    /// Streams admitted so far, in order (the fault plan's stalls and
    /// departures name them by rank).
    admitted: Vec<StreamId>,
    /// The round in progress.
    round: Round,
    /// Replica extents whose bytes are bad now (the fault plan's bad
    /// extents, until a repair or a rebuild rewrites them).
    corrupt: BTreeSet<ExtentKey>,
}

/// A simulated client: it takes every round the array releases at once,
/// unless the fault plan stalls it.
struct SimClient {
    taken_rounds: u32,
    stalls_from_round: Option<Round>,
}

/// An ingest in progress in the simulation.
struct IngestRun {
    title: TitleId,
    rounds: usize,
    granted: usize,
    started_round: Round,
}

/// Runs one simulation of titles already placed and charged under `bound`
/// (title k of `titles` is `TitleId(k)`): every round the array plans, the
/// simulated disks execute its commands (simulated-disk mode), completions
/// and injected faults go back to the array in model-time order, and
/// arrivals are offered to admission.
pub fn run_placed(
    config: &SimConfig,
    bound: &Bound,
    titles: &[PlacedTitle],
) -> Result<SimResult, SimError> {
    run_placed_inner(config, bound, titles, false).map(|(r, _)| r)
}

/// Like [`run_placed`], also returning the run's decisions ([`RunLog`]).
pub fn run_logged(
    config: &SimConfig,
    bound: &Bound,
    titles: &[PlacedTitle],
) -> Result<(SimResult, RunLog), SimError> {
    run_placed_inner(config, bound, titles, true).map(|(r, log)| (r, log.unwrap_or_default()))
}

fn run_placed_inner(
    config: &SimConfig,
    bound: &Bound,
    titles: &[PlacedTitle],
    logged: bool,
) -> Result<(SimResult, Option<RunLog>), SimError> {
    let profile = config.disk_profile(titles.iter().map(|t| &t.schedule))?;
    let prepared = prepare_placed(config, bound, titles)?;
    let faults = &config.faults;
    if let Some(why) = rondo_model::array::backup_window_unavailable(
        config.backup_window_rounds,
        config.loss_notice_rounds,
        config.scheme,
        config.read_group_rounds,
        config.drive_prefetch,
        config.dynamic_cycle.is_some(),
    ) {
        return Err(SimError::Config(why));
    }
    if config.mode == Mode::AdmissionOnly && faults.needs_simulated_disks() {
        return Err(SimError::Config(
            "read errors, rebuilds and ingests need --mode simulated-disk".into(),
        ));
    }
    let sim = match config.mode {
        Mode::SimulatedDisk => Some(SimDisks {
            disks: (0..config.disks)
                .map(|_| Disk::new(profile.clone()))
                .collect::<Result<_, _>>()?,
            events: BTreeMap::new(),
            sequence: 0,
        }),
        Mode::AdmissionOnly => None,
    };
    let longest = titles
        .iter()
        .map(|t| t.schedule.rounds() as u64 + 1)
        .max()
        .unwrap_or(0);
    let playing = vec![0i64; (config.end_round + prepared.lookahead_rounds + longest + 2) as usize];
    let mut ingest_layout = None;
    if let Some(spec) = faults.ingest {
        // The server widens the charged stroke before an ingest writes past
        // it (`rondo_server::stroke`); the simulator does not model that.
        if config.stroke == disk::Stroke::Data {
            return Err(SimError::Config(
                "an ingest with the data's stroke charged is not simulated (the server widens \
                 the stroke before it writes; charge the whole stroke)"
                    .into(),
            ));
        }
        ingest_layout = Some(place_ingest(config, &profile, titles, spec.title)?);
    }
    let mut exec = Executor {
        config,
        titles,
        prepared,
        sim,
        playing,
        m: Measure::default(),
        spans: ChaCha8Rng::seed_from_u64(config.seed ^ 0x7370_616e),
        ingest: None,
        rebuild_started_round: None,
        log: logged.then(RunLog::default),
        clients: BTreeMap::new(),
        admitted: Vec::new(),
        round: Round(0),
        corrupt: BTreeSet::new(),
    };
    let mut arrivals = PoissonArrivals::new(exec.prepared.arrival_rate_per_round, config.seed);
    let mut choice = match (config.zipf_exponent, config.popular_share) {
        (Some(a), _) => TitleChoice::zipf(titles.len(), a, config.seed.wrapping_add(1)),
        (None, Some(p)) => TitleChoice::popular(titles.len(), p, config.seed.wrapping_add(1)),
        (None, None) => TitleChoice::round_robin(titles.len()),
    };
    let measured = Round(config.warmup_rounds)..Round(config.end_round);
    let failures = config.failure.iter().chain(&faults.failures);
    for round in Round::range(Round(0), Round(config.end_round)) {
        exec.round = round;
        if let Some(log) = exec.log.as_mut() {
            log.rounds.push(RoundLog {
                round,
                ..RoundLog::default()
            });
        }
        // Faults at the boundary take effect in the round about to be planned.
        for b in faults.bad_extents.iter().filter(|b| b.round == round) {
            exec.corrupt.insert(ExtentKey {
                title: TitleId(b.title as u64),
                playback_round: PlaybackRound(b.playback_round),
                replica: b.replica,
                piece: b.piece,
            });
        }
        for d in faults.departures.iter().filter(|d| d.round == round) {
            if let Some(&stream) = exec.admitted.get(d.stream_nth as usize) {
                exec.depart(stream);
            }
        }
        for f in failures.clone().filter(|f| f.round == round) {
            if let Ok(effects) = exec.prepared.array.fail_disk(f.disk, FailCause::Operator) {
                exec.on_effects(effects);
            }
        }
        if let Some(spec) = faults.rebuild
            && spec.round == round
            && exec.prepared.array.start_rebuild(spec.disk).is_ok()
        {
            exec.rebuild_started_round = Some(round);
        }
        if let Some(spec) = faults.ingest
            && spec.round == round
            && let Some(layout) = ingest_layout.take()
        {
            let title = TitleId(titles.len() as u64);
            exec.ingest = Some(IngestRun {
                title,
                rounds: layout.rounds().len(),
                granted: 0,
                started_round: round,
            });
            exec.prepared.array.begin_ingest(title, Arc::new(layout));
        }
        let in_window = measured.contains(&round);
        if exec.sim.is_some() {
            let plan = exec.prepared.array.begin_round(round);
            if in_window {
                exec.m
                    .observe_reservations(exec.prepared.array.reservations(), round);
                exec.m.observe_cycle(&exec.prepared.array);
            }
            exec.execute(plan, in_window)?;
        } else {
            exec.prepared.array.begin_round_admission_only(round);
            if in_window {
                exec.m
                    .observe_reservations(exec.prepared.array.reservations(), round);
                exec.m.observe_cycle(&exec.prepared.array);
            }
        }
        if config.check_invariants {
            exec.prepared.array.check_invariants();
            exec.m.invariant_checks += 1;
        }
        for _ in 0..arrivals.arrivals_in_round(round) {
            let title = choice.next_title();
            exec.offer(title, round, in_window);
        }
    }
    let mut active = 0i64;
    let mut active_sum = 0i64;
    for (round, delta) in exec
        .playing
        .iter()
        .enumerate()
        .take(config.end_round as usize)
    {
        active += delta;
        if measured.contains(&Round(round as u64)) {
            active_sum += active;
        }
    }
    let rounds_measured = measured.end.since(measured.start);
    let counters = exec.prepared.array.counters();
    exec.m.deadline_misses = counters.stream_round_misses;
    exec.m.recovery_misses = counters.recovery_misses;
    exec.m.lost_reads = counters.lost_reads;
    exec.m.read_errors = counters.read_errors;
    exec.m.rereads = counters.rereads;
    exec.m.window_recoveries = counters.window_recoveries;
    exec.m.window_splits = counters.window_splits;
    exec.m.held_behind_late_max = counters.held_behind_late_max;
    exec.m.late_releases = counters.late_releases;
    exec.m.streams_aborted = counters.streams_aborted;
    exec.m.clients_stalled = counters.clients_stalled;
    exec.m.burst_starts = counters.burst_starts;
    exec.m.extents_bad = counters.extents_bad;
    exec.m.extents_repaired = counters.extents_repaired;
    exec.m.rounds_lost = counters.rounds_lost;
    exec.m.disks_failed = DiskIndex::all(config.disks)
        .filter(|&d| !exec.prepared.array.is_serving(d))
        .count() as u64;
    let result = exec.m.finish(
        &exec.prepared,
        active_sum,
        rounds_measured,
        config.mode,
        config.round_duration_ns as f64 / NS_PER_S as f64,
    );
    Ok((result, exec.log))
}

impl Executor<'_> {
    /// Offers one arrival for title `title` to admission.
    fn offer(&mut self, title: usize, round: Round, in_window: bool) {
        let span = self.draw_span(title);
        let request = AdmitRequest {
            title: TitleId(title as u64),
            span,
            prior: None,
            defer_rounds: 0,
        };
        let outcome = self
            .prepared
            .array
            .admit_with_lookahead(&request, self.prepared.lookahead_rounds);
        if let Some(log) = self.log.as_mut() {
            log.admissions.push(AdmissionLog {
                round,
                request,
                result: outcome
                    .as_ref()
                    .map(|a| (a.stream, a.start_round))
                    .map_err(|e| e.to_string()),
            });
        }
        if in_window {
            self.m.arrivals += 1;
        }
        match outcome {
            Ok(a) => {
                let nth = self.admitted.len() as u64;
                self.admitted.push(a.stream);
                let stalls_from_round = self
                    .config
                    .faults
                    .stalls
                    .iter()
                    .find(|s| s.stream_nth == nth)
                    .map(|s| s.round);
                self.clients.insert(
                    a.stream,
                    SimClient {
                        taken_rounds: 0,
                        stalls_from_round,
                    },
                );
                let rounds = u64::from(a.end_playback_round.0 - a.first_playback_round.0);
                self.playing[a.start_round.0 as usize] += 1;
                self.playing[(a.start_round.0 + rounds) as usize] -= 1;
                if in_window {
                    self.m.admitted += 1;
                    self.m.startup_delay_rounds += a.start_round.since(round);
                }
            }
            Err(_) if in_window => self.m.rejected += 1,
            Err(_) => {}
        }
    }

    /// What part of the title an arrival asks for: the whole title unless
    /// the fault plan makes some arrivals ranges or time starts.
    fn draw_span(&mut self, title: usize) -> Span {
        let plan = &self.config.faults;
        if plan.range_fraction <= 0.0 && plan.time_start_fraction <= 0.0 {
            return Span::Whole;
        }
        let u: f64 = self.spans.random();
        let size_bytes = self.titles[title].schedule.total_bytes().max(1);
        if u < plan.range_fraction {
            let first_byte = self.spans.random_range(0..size_bytes);
            let length_bytes = self.spans.random_range(1..=size_bytes - first_byte);
            Span::Bytes {
                first_byte,
                length_bytes,
            }
        } else if u < plan.range_fraction + plan.time_start_fraction {
            let duration_ns =
                self.titles[title].schedule.rounds() as u64 * self.config.round_duration_ns;
            Span::FromTime {
                t_ns: self.spans.random_range(0..duration_ns.max(1)),
            }
        } else {
            Span::Whole
        }
    }

    /// Handles the array's effects at model time within round `round`.
    fn on_effects(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Aborted(a) => self.on_aborted(&a),
                Effect::Released(r) => self.take(r.stream),
                Effect::Ready(_)
                | Effect::ReReadQueued { .. }
                | Effect::DiskState { .. }
                | Effect::DiskFailed { .. }
                | Effect::ExtentBad { .. }
                | Effect::ExtentRepaired { .. }
                | Effect::RoundLost(_) => {}
            }
        }
    }

    /// A client takes a released round, unless it has stalled.
    fn take(&mut self, stream: StreamId) {
        let Some(client) = self.clients.get_mut(&stream) else {
            return;
        };
        if client.stalls_from_round.is_some_and(|r| self.round >= r) {
            return;
        }
        client.taken_rounds += 1;
        self.prepared.array.client_took(stream, client.taken_rounds);
    }

    /// A client disconnects: its stream is released and stops playing.
    fn depart(&mut self, stream: StreamId) {
        let span = self.prepared.array.reservations().stream_span(stream);
        if !self.prepared.array.release(stream) {
            return;
        }
        self.clients.remove(&stream);
        self.m.departures += 1;
        if let Some(span) = span {
            let from = self.round.max(span.start_round);
            let end = span.end_read_round();
            if from < end {
                self.playing[from.0 as usize] -= 1;
                self.playing[end.0 as usize] += 1;
            }
        }
    }

    /// An aborted stream stops playing from the round it was stopped at.
    fn on_aborted(&mut self, a: &Aborted) {
        self.clients.remove(&a.stream);
        if let Some(round) = self.log.as_mut().and_then(|l| l.rounds.last_mut()) {
            round.aborted.push(a.stream);
        }
        let from = a.at_round.max(a.start_round);
        if from < a.end_read_round {
            self.playing[from.0 as usize] -= 1;
            self.playing[a.end_read_round.0 as usize] += 1;
        }
    }

    /// Executes the round's commands on the simulated disks, then reports
    /// the completions due by the round's end (and the effects they cause)
    /// in model-time order.
    fn execute(&mut self, plan: RoundPlan, in_window: bool) -> Result<(), SimError> {
        for a in &plan.aborted {
            self.on_aborted(a);
        }
        for stream in &plan.finished {
            self.clients.remove(stream);
        }
        for r in &plan.releases {
            self.take(r.stream);
        }
        if let Some(round) = self.log.as_mut().and_then(|l| l.rounds.last_mut()) {
            round.commands = plan.disks.iter().map(|d| d.commands.clone()).collect();
        }
        let round = plan.round;
        let round_end_ns = plan.start_ns + plan.duration_ns;
        let t = plan.duration_ns;
        let mut busy_sum = 0u64;
        let mut working = 0u64;
        for disk_plan in &plan.disks {
            let d = disk_plan.disk.index();
            if disk_plan.commands.is_empty() && !disk_plan.serving {
                continue;
            }
            // The disk's requests (a read group's rounds joined into one)
            // and, per stream read, its completion.
            let batch = batch_plan(&disk_plan.commands);
            let requests_of = batch.requests_of(disk_plan.commands.len());
            let mut reads: Vec<(usize, Completion)> = Vec::new();
            let mut nth_read = 0u32;
            for (c, command) in disk_plan.commands.iter().enumerate() {
                if let Purpose::Deliver {
                    stream,
                    playback_round,
                    replica,
                    piece,
                    ..
                } = command.purpose
                {
                    let outcome = self.outcome(round, disk_plan.disk, nth_read, &command.purpose);
                    nth_read += 1;
                    reads.push((
                        c,
                        Completion {
                            disk: disk_plan.disk,
                            stream,
                            playback_round,
                            replica,
                            piece,
                            outcome,
                        },
                    ));
                }
            }
            let sim = self.sim.as_mut().expect("simulated disks");
            let outcome =
                sim.disks[d].execute_batch(&batch.requests, plan.start_ns, disk_plan.scheduler)?;
            for (c, completion) in reads {
                // A read completes with its last request.
                let done_ns = requests_of[c]
                    .iter()
                    .map(|&r| outcome.completion_ns[r])
                    .max();
                sim.push(done_ns.unwrap_or(plan.start_ns), completion);
            }
            self.m.cache_hits += outcome
                .commands
                .iter()
                .filter(|(_, t)| t.service == rondo_model::disk::ServiceKind::FullHit)
                .count() as u64;
            if outcome.end_ns > round_end_ns {
                self.m.disk_round_overruns += 1;
            }
            let budget_ns = disk_plan.reserved_ns.unwrap_or(0) + disk_plan.granted_ns;
            if outcome.busy_ns > budget_ns {
                self.m.busy_over_reserved_disk_rounds += 1;
            }
            if disk_plan.serving {
                working += 1;
                busy_sum += outcome.busy_ns;
            }
        }
        if in_window && working > 0 {
            self.m.busy_fraction_sum += busy_sum as f64 / (working as f64 * t as f64);
            self.m.busy_rounds += 1;
        }
        // The rebuild's copies and the repairs move their bytes within the
        // round (a copy from a bad extent fails, as the copier's check would).
        for copy in plan.repairs.iter().chain(&plan.copies) {
            let result = self.copy(&copy.task);
            let effects = self.prepared.array.copy_done(copy.id, result);
            self.on_effects(effects);
        }
        if let Some(disk) = plan.rebuild_handed_out
            && self.prepared.array.finish_rebuild(disk, true).is_some()
            && let Some(started) = self.rebuild_started_round.take()
        {
            self.m.rebuild_rounds = Some(round.next().since(started));
        }
        // Granted ingest rounds are written once the round's batches are
        // done; the writer then waits for the next one.
        if let Some(ingest) = self.ingest.as_mut() {
            ingest.granted += plan
                .ingest_grants
                .iter()
                .filter(|g| g.0 == ingest.title)
                .count();
            self.prepared
                .array
                .want_write(ingest.title, PlaybackRound(ingest.granted as u32));
            if ingest.granted == ingest.rounds {
                self.prepared.array.end_ingest(ingest.title);
                self.m.ingest_rounds = Some(round.next().since(ingest.started_round));
                self.ingest = None;
            }
        }
        self.report_until(round_end_ns)
    }

    /// A copy's outcome: every source extent must be good; then the
    /// target is (rewritten).
    fn copy(&mut self, task: &CopyTask) -> Result<(), CopyFailure> {
        let key = |replica, piece| ExtentKey {
            title: task.title,
            playback_round: task.round,
            replica,
            piece,
        };
        let sources: Vec<ExtentKey> = match task.target {
            Replica::Primary => (0..task.read_from.len() as u16)
                .map(|p| key(Replica::Backup, p))
                .collect(),
            Replica::Backup => vec![key(Replica::Primary, 0)],
        };
        if sources.iter().any(|k| self.corrupt.contains(k)) {
            return Err(CopyFailure::SourceBad(
                "the source replica fails its checksum".into(),
            ));
        }
        self.corrupt.remove(&key(task.target, task.backup_entry));
        Ok(())
    }

    /// The outcome the fault plan gives a stream read: a bad extent's
    /// checksum fails, else the `nth` stream read of `disk` in `round` may
    /// be an injected error.
    fn outcome(&self, round: Round, disk: DiskIndex, nth: u32, purpose: &Purpose) -> ReadOutcome {
        if let Purpose::Deliver {
            title,
            playback_round,
            replica,
            piece,
            ..
        } = *purpose
            && self.corrupt.contains(&ExtentKey {
                title,
                playback_round,
                replica,
                piece,
            })
        {
            return ReadOutcome::BadChecksum("bad extent (fault plan)".into());
        }
        self.injected(round, disk, nth)
    }

    /// The outcome the fault plan gives the `nth` stream read of `disk` in `round`.
    fn injected(&self, round: Round, disk: DiskIndex, nth: u32) -> ReadOutcome {
        let spec = self
            .config
            .faults
            .read_errors
            .iter()
            .find(|e| e.round == round && e.disk == disk && e.nth == nth);
        match spec.map(|e| e.kind) {
            None => ReadOutcome::Ok,
            Some(ReadErrorKind::Io) => ReadOutcome::IoError("injected I/O error".into()),
            Some(ReadErrorKind::Checksum) => {
                ReadOutcome::BadChecksum("injected checksum mismatch".into())
            }
        }
    }

    /// Reports every completion due at or before `until_ns`, in time order.
    fn report_until(&mut self, until_ns: u64) -> Result<(), SimError> {
        loop {
            let sim = self.sim.as_mut().expect("simulated disks");
            let Some(entry) = sim.events.first_entry() else {
                return Ok(());
            };
            if entry.key().0.0 > until_ns {
                return Ok(());
            }
            let completion = entry.remove();
            let effects = self.prepared.array.complete(&completion);
            self.on_effects(effects);
        }
    }
}

/// The layout parameters of a run's titles.
fn layout_params(config: &SimConfig) -> LayoutParams {
    LayoutParams {
        disk_count: config.disks,
        stride_bytes: config.stride_bytes,
        block_bytes: config.block_bytes,
        backup: config.scheme.stores_backup().then_some(BackupParams {
            placement: config.placement,
            backup_block_bytes: config.backup_block_bytes,
            fragment_sequence: config.fragment_sequence,
            round_robin_counter: config.round_robin_counter,
            disk_groups: config.disk_groups,
        }),
        segment_rounds: config.segment_rounds,
        stripe_disks: config.stripe_disks,
    }
}

/// Places a copy of title `source` for an ingest: on the strides the
/// titles leave free (and past `first_stride`), as the next title.
pub fn place_ingest(
    config: &SimConfig,
    profile: &DiskProfile,
    titles: &[PlacedTitle],
    source: usize,
) -> Result<TitleLayout, SimError> {
    let title = titles.get(source).ok_or_else(|| {
        SimError::Config(format!(
            "the ingest copies title {source}; the run has {}",
            titles.len()
        ))
    })?;
    let strides_per_disk = profile.capacity_bytes()? / config.stride_bytes;
    let mut allocator = ArrayAllocator::rebuild(
        &vec![strides_per_disk; config.disks as usize],
        titles
            .iter()
            .filter_map(|t| t.layout.as_ref().map(TitleLayout::strides)),
    )?;
    for d in 0..config.disks {
        for s in 0..config.first_stride.min(strides_per_disk) {
            if allocator.disk(DiskIndex(d)).is_free(s) {
                allocator.mark_allocated(DiskIndex(d), s)?;
            }
        }
    }
    let id = TitleId(titles.len() as u64);
    let plan = TitlePlan::new(
        &title.schedule.disk_read_bytes,
        &layout_params(config),
        layout::round_robin_start_disk(id.0, config.disks, config.stripe_disks),
        layout::derive_title_seed(config.seed_layout(), id),
    )?;
    Ok(allocator.place(&plan)?)
}

/// Plans every title, places it on a fresh array (when the bound or the
/// simulated disks need extents) and charges it under the configured bound.
pub fn place_titles(
    config: &SimConfig,
    profile: &DiskProfile,
    titles: &[SimTitle],
) -> Result<(Bound, Vec<PlacedTitle>), SimError> {
    if titles.is_empty() {
        return Err(SimError::NoTitles);
    }
    let params = layout_params(config);
    params.validate()?;
    let mut plans = Vec::with_capacity(titles.len());
    for (t, title) in titles.iter().enumerate() {
        let id = TitleId(t as u64);
        plans.push(TitlePlan::new(
            &title.schedule.disk_read_bytes,
            &params,
            layout::round_robin_start_disk(t as u64, config.disks, config.stripe_disks),
            layout::derive_title_seed(config.seed_layout(), id),
        )?);
    }
    // Real extents are needed when the bound depends on where data lies
    // (rondo mode), and when disks execute reads.
    let needs_extents = config.bound == BoundKind::Rondo || config.mode == Mode::SimulatedDisk;
    let mut allocator = if needs_extents {
        let strides_per_disk = profile.capacity_bytes()? / config.stride_bytes;
        let mut allocator = ArrayAllocator::uniform(config.disks, strides_per_disk);
        // Occupy the first strides so the titles' data starts further in.
        for d in 0..config.disks {
            for s in 0..config.first_stride.min(strides_per_disk) {
                allocator.mark_allocated(DiskIndex(d), s)?;
            }
        }
        Some(allocator)
    } else {
        None
    };
    // Extents are what disks read (and what a rebuild copies); a run that
    // reads nothing keeps only what they cost, its charges: at D = 1024 a
    // title's extents and strides are about 0.6 MB (docs/benchmarks.md).
    let keeps_extents = config.mode == Mode::SimulatedDisk || config.faults != FaultPlan::default();
    let layouts = plans
        .iter()
        .map(|plan| match allocator.as_mut() {
            Some(allocator) => Ok(Some(allocator.place(plan)?)),
            None => Ok(None),
        })
        .collect::<Result<Vec<_>, SimError>>()?;
    // Under the data's stroke the bound is the drive short-stroked to where
    // the placed data ends (the highest stride any disk holds).
    let charged;
    let profile = match (config.stroke, &allocator) {
        (disk::Stroke::Data, Some(allocator)) => {
            charged = disk::stroke_holding_strides(
                profile,
                allocator.highest_allocated(),
                config.stride_bytes,
            )?
            .0;
            &charged
        }
        _ => profile,
    };
    let bound = config.read_bound(profile)?;
    let placed = titles
        .iter()
        .zip(plans)
        .zip(layouts)
        .map(|((title, plan), layout)| {
            let charges = bound
                .title_charges_grouped(
                    &plan,
                    layout.as_ref(),
                    &title.schedule,
                    config.read_group_rounds,
                )
                .map_err(|source| SimError::Charges {
                    name: title.name.clone(),
                    source,
                })?;
            let group_charges = match config.dynamic_cycle {
                Some(cycle) => cycle
                    .title_charges(&bound, &plan, layout.as_ref(), &title.schedule)
                    .map_err(|source| SimError::Charges {
                        name: title.name.clone(),
                        source,
                    })?,
                None => Vec::new(),
            };
            Ok(PlacedTitle {
                name: title.name.clone(),
                schedule: title.schedule.clone(),
                layout: layout.filter(|_| keeps_extents),
                charges,
                group_charges,
                checksums: None,
            })
        })
        .collect::<Result<_, SimError>>()?;
    Ok((bound, placed))
}

/// Configures admission for titles placed and charged under `bound`: the
/// arrival rate, the look-ahead and the array (its reservation tables sized
/// for the longest title, the write bound, the titles registered).
pub fn prepare_placed(
    config: &SimConfig,
    bound: &Bound,
    titles: &[PlacedTitle],
) -> Result<PreparedArray, SimError> {
    if titles.is_empty() {
        return Err(SimError::NoTitles);
    }
    if config.read_group_rounds == 0 {
        return Err(SimError::Config(
            "a read group has at least one round".into(),
        ));
    }
    if config.load.is_nan() || config.load <= 0.0 {
        return Err(SimError::Config(format!(
            "load must be positive, got {}",
            config.load
        )));
    }
    if let Some(rate) = config.arrival_rate_per_round
        && !(rate.is_finite() && rate > 0.0)
    {
        return Err(SimError::Config(format!(
            "arrival rate must be positive, got {rate} per round"
        )));
    }
    if let Some(rate) = config.arrival_rate_per_s {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(SimError::Config(format!(
                "arrival rate must be positive, got {rate} per second"
            )));
        }
        if config.arrival_rate_per_round.is_some() {
            return Err(SimError::Config(
                "give the arrival rate per round or per second, not both".into(),
            ));
        }
    }
    if let Some(a) = config.zipf_exponent
        && !(a.is_finite() && a >= 0.0)
    {
        return Err(SimError::Config(format!(
            "the Zipf exponent must be non-negative, got {a}"
        )));
    }
    if let Some(p) = config.popular_share {
        if !(0.0..=1.0).contains(&p) {
            return Err(SimError::Config(format!(
                "the popular title's share must be in [0, 1], got {p}"
            )));
        }
        if config.zipf_exponent.is_some() {
            return Err(SimError::Config(
                "give a Zipf exponent or a popular title's share, not both".into(),
            ));
        }
    }
    let faults = &config.faults;
    let disks_named = config
        .failure
        .iter()
        .chain(&faults.failures)
        .map(|f| f.disk)
        .chain(faults.read_errors.iter().map(|e| e.disk))
        .chain(faults.rebuild.map(|r| r.disk));
    for disk in disks_named {
        if disk.0 >= config.disks {
            return Err(SimError::Config(format!(
                "disk {disk} is not in the array (disks are numbered 0 to {})",
                config.disks - 1
            )));
        }
    }
    for (what, fraction) in [
        ("range_fraction", faults.range_fraction),
        ("time_start_fraction", faults.time_start_fraction),
    ] {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(SimError::Config(format!(
                "{what} must be between 0 and 1, got {fraction}"
            )));
        }
    }
    let profile = config.disk_profile(titles.iter().map(|t| &t.schedule))?;
    let round_fixed_ns = bound.fixed_ns();
    let total_bytes: u64 = titles.iter().map(|t| t.schedule.total_bytes()).sum();
    let s_tot = total_bytes as f64 / titles.len() as f64;
    let t_s = config.round_duration_ns as f64 / NS_PER_S as f64;
    let mu_per_round = config.disks as f64 * config.mu_rate_bytes_per_s * t_s / s_tot;
    let arrival_rate_per_round = config
        .arrival_rate_per_round
        .or(config.arrival_rate_per_s.map(|r| r * t_s))
        .unwrap_or(config.load * mu_per_round);
    let lookahead_rounds = config
        .lookahead_rounds
        .unwrap_or_else(|| (1.0 / arrival_rate_per_round).ceil().max(1.0) as u64);
    let longest = titles
        .iter()
        .map(|t| t.schedule.rounds() as u64 + 1)
        .max()
        .unwrap_or(1);
    // Paper mode has no write bound: writes are charged with the read bound
    // (assumption: seed 000 does not write while streaming). Rondo mode
    // charges them with the detailed model's write bound, as the server does.
    let write_bound = match bound {
        Bound::Paper(_) => bound.clone(),
        Bound::Rondo(_) => rondo_write_bound(&profile)?,
    };
    let mut reservation = ReservationConfig::for_array(
        config.disks,
        config.scheme,
        config.round_duration_ns,
        round_fixed_ns,
        config.buffer_per_disk_bytes,
        longest,
        lookahead_rounds,
    );
    reservation.set_network_bits_per_s(config.network_bits_per_s_max);
    if let Some(why) =
        config
            .drive_prefetch
            .unavailable(bound, config.segment_rounds, config.read_group_rounds)
    {
        return Err(SimError::Config(format!(
            "drive prefetching ({:?}) is unavailable: {why}",
            config.drive_prefetch
        )));
    }
    if config.dynamic_cycle.is_some()
        && let Some(why) = DynamicCycle::unavailable(
            config.segment_rounds,
            config.read_group_rounds,
            config.drive_prefetch,
        )
    {
        return Err(SimError::Config(format!("the dynamic cycle {why}")));
    }
    reservation.replica_choice = config.replica_choice;
    reservation.start_choice = config.start_choice;
    configure_for_bound(
        &mut reservation,
        bound,
        config.drive_prefetch,
        config.backup_window_rounds,
        config.loss_notice_rounds,
        config.block_bytes,
        config.guarantee,
    )
    .map_err(SimError::Config)?;
    let mut array = Array::new(ArrayConfig {
        reservation,
        lookahead_rounds,
        health: HealthPolicy::default(),
        read_bound: bound.clone(),
        write_bound,
        // The server's defaults: a simulated client that stalls is stopped
        // when a served one would be.
        delivery: DeliveryConfig::default(),
        burst: Burst {
            rounds: config.burst_rounds,
            bytes: 0,
            lead: config.burst_lead,
        },
        // Arrivals come at round boundaries in the simulator.
        late_start: false,
        late_start_allowance_ns: 0,
        delivery_lag_max_ns: None,
        drive_prefetch: config.drive_prefetch,
        cycle: config.dynamic_cycle,
    });
    let pairs = config.drive_prefetch != DrivePrefetch::None;
    for (t, title) in titles.iter().enumerate() {
        let charges = match (&title.layout, pairs) {
            (Some(layout), true) => {
                bound.with_cache_pairs(title.charges.clone(), layout, config.segment_rounds)
            }
            _ => title.charges.clone(),
        };
        array.add_title(
            ArrayTitle::new(
                TitleId(t as u64),
                charges,
                title.layout.clone(),
                title.checksums.clone(),
                &title.schedule.client_bytes,
                config.round_duration_ns,
            )
            .with_group_charges(title.group_charges.clone()),
        );
    }
    Ok(PreparedArray {
        array,
        lookahead_rounds,
        arrival_rate_per_round,
        mu_per_round,
    })
}

impl SimConfig {
    /// The disks' profile: the named one, its cache re-cut into one segment
    /// per block of the largest round of `schedules` when
    /// `fit_drive_segments` is set.
    pub fn disk_profile<'a>(
        &self,
        schedules: impl IntoIterator<Item = &'a Schedule>,
    ) -> Result<disk::DiskProfile, disk::DiskError> {
        let profile = disk::profile_by_name(&self.profile)?;
        if !self.fit_drive_segments {
            return Ok(profile);
        }
        let block_bytes = schedules
            .into_iter()
            .flat_map(|s| s.disk_read_bytes.iter().copied())
            .max()
            .unwrap_or(0);
        Ok(disk::with_cache_segments_for(profile, block_bytes))
    }

    /// The bound admission charges reads with on `profile`'s disks: seed
    /// 000 Table 2's paper bound, or the profile's rondo bound.
    pub fn read_bound(&self, profile: &disk::DiskProfile) -> Result<Bound, disk::DiskError> {
        Ok(match self.bound {
            BoundKind::Paper => Bound::Paper(PaperBound::seed000_table2()),
            BoundKind::Rondo => Bound::Rondo(RondoBound::new(profile)?),
        })
    }

    /// Layout seeds are drawn from the run's seed so replications also vary
    /// random placement.
    fn seed_layout(&self) -> u64 {
        self.seed ^ 0x6c61_796f_7574
    }
}

#[derive(Default)]
struct Measure {
    arrivals: u64,
    admitted: u64,
    rejected: u64,
    startup_delay_rounds: u64,
    reserved_fraction_sum: f64,
    reserved_primary_fraction_sum: f64,
    reserved_spread_sum: f64,
    reserved_max_sum: f64,
    reserved_min_sum: f64,
    reserved_working_fraction_sum: f64,
    buffer_bytes_sum: f64,
    cache_hits: u64,
    cycle_group_rounds_sum: u64,
    overcommitted_disk_rounds: u64,
    observed_rounds: u64,
    busy_fraction_sum: f64,
    busy_rounds: u64,
    deadline_misses: u64,
    disk_round_overruns: u64,
    busy_over_reserved_disk_rounds: u64,
    lost_reads: u64,
    read_errors: u64,
    rereads: u64,
    recovery_misses: u64,
    window_recoveries: u64,
    window_splits: u64,
    held_behind_late_max: u64,
    late_releases: u64,
    streams_aborted: u64,
    clients_stalled: u64,
    burst_starts: u64,
    departures: u64,
    extents_bad: u64,
    extents_repaired: u64,
    rounds_lost: u64,
    disks_failed: u64,
    rebuild_rounds: Option<u64>,
    ingest_rounds: Option<u64>,
    invariant_checks: u64,
}

impl Measure {
    fn observe_cycle(&mut self, array: &Array) {
        if let Some(g) = array.admission_cycle_rounds() {
            self.cycle_group_rounds_sum += u64::from(g);
        }
    }

    fn observe_reservations(&mut self, r: &Reservations, round: Round) {
        let (fixed_ns, t) = (r.config().round_fixed_ns, r.config().round_duration_ns);
        let disks = r.config().disks;
        let (mut total, mut primary, mut working_total) = (0u64, 0u64, 0u64);
        let (mut most, mut least) = (0u64, u64::MAX);
        let mut working = 0u64;
        for d in DiskIndex::all(disks) {
            let reserved = fixed_ns + r.reserved_ns(d, round);
            total += reserved;
            primary += fixed_ns + r.reserved_primary_ns(d, round);
            most = most.max(reserved);
            least = least.min(reserved);
            if reserved > t {
                self.overcommitted_disk_rounds += 1;
            }
            if !r.is_failed(d) {
                working += 1;
                working_total += reserved;
            }
        }
        let t = t as f64;
        self.reserved_fraction_sum += total as f64 / (disks as f64 * t);
        self.reserved_primary_fraction_sum += primary as f64 / (disks as f64 * t);
        self.reserved_spread_sum += (most - least) as f64 / t;
        self.reserved_max_sum += most as f64 / t;
        self.reserved_min_sum += least as f64 / t;
        if working > 0 {
            self.reserved_working_fraction_sum += working_total as f64 / (working as f64 * t);
        }
        self.buffer_bytes_sum += r.reserved_buffer_bytes(round) as f64;
        self.observed_rounds += 1;
    }

    fn finish(
        self,
        array: &PreparedArray,
        active_sum: i64,
        rounds_measured: u64,
        mode: Mode,
        round_duration_s: f64,
    ) -> SimResult {
        let per_round = |x: f64| x / self.observed_rounds.max(1) as f64;
        let cycle = array.array.cycle_status();
        // A backup window holds every stream's first send k - 1 rounds.
        let lead_rounds = f64::from(
            array
                .array
                .config()
                .reservation
                .backup_window_in_force()
                .lead_rounds(),
        );
        SimResult {
            mean_active_streams: active_sum as f64 / rounds_measured.max(1) as f64,
            arrivals: self.arrivals,
            admitted: self.admitted,
            rejected: self.rejected,
            rejection_ratio: self.rejected as f64 / self.arrivals.max(1) as f64,
            mean_startup_delay_rounds: self.startup_delay_rounds as f64
                / self.admitted.max(1) as f64,
            mean_startup_latency_s: (self.startup_delay_rounds as f64
                / self.admitted.max(1) as f64
                + 0.5
                + lead_rounds)
                * round_duration_s,
            arrival_rate_per_round: array.arrival_rate_per_round,
            mu_per_round: array.mu_per_round,
            lookahead_rounds: array.lookahead_rounds,
            reserved_fraction: per_round(self.reserved_fraction_sum),
            reserved_primary_fraction: per_round(self.reserved_primary_fraction_sum),
            reserved_backup_fraction: per_round(
                self.reserved_fraction_sum - self.reserved_primary_fraction_sum,
            ),
            reserved_spread_fraction: per_round(self.reserved_spread_sum),
            reserved_max_fraction: per_round(self.reserved_max_sum),
            reserved_min_fraction: per_round(self.reserved_min_sum),
            busy_fraction: (mode == Mode::SimulatedDisk)
                .then(|| self.busy_fraction_sum / self.busy_rounds.max(1) as f64),
            reserved_working_fraction: per_round(self.reserved_working_fraction_sum),
            deadline_misses: self.deadline_misses,
            disk_round_overruns: self.disk_round_overruns,
            busy_over_reserved_disk_rounds: self.busy_over_reserved_disk_rounds,
            lost_reads: self.lost_reads,
            read_errors: self.read_errors,
            rereads: self.rereads,
            recovery_misses: self.recovery_misses,
            window_recoveries: self.window_recoveries,
            window_splits: self.window_splits,
            held_behind_late_max: self.held_behind_late_max,
            late_releases: self.late_releases,
            streams_aborted: self.streams_aborted,
            clients_stalled: self.clients_stalled,
            burst_starts: self.burst_starts,
            departures: self.departures,
            extents_bad: self.extents_bad,
            extents_repaired: self.extents_repaired,
            rounds_lost: self.rounds_lost,
            disks_failed: self.disks_failed,
            rebuild_rounds: self.rebuild_rounds,
            ingest_rounds: self.ingest_rounds,
            invariant_checks: self.invariant_checks,
            rounds_measured,
            mean_buffer_bytes: per_round(self.buffer_bytes_sum),
            cache_hits: self.cache_hits,
            mean_cycle_group_rounds: cycle
                .as_ref()
                .map(|_| per_round(self.cycle_group_rounds_sum as f64)),
            cycle,
            overcommitted_disk_rounds: self.overcommitted_disk_rounds,
        }
    }
}
