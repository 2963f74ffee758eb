//! Reservations and admission control (seed 000 §2.3, §4, §5, §6.2).
//!
//! This module owns the per-disk, per-round reservation tables and the rule
//! that admits a stream only if every round of its title fits: disk time on
//! every disk it touches (under the configured reservation scheme), buffer
//! space and network bandwidth. The tables are rings indexed by absolute
//! round, `horizon_rounds` long (the longest title plus the look-ahead), so
//! memory does not grow with time. Minimum reservation keeps, per disk and
//! round, a short sparse list of (source disk, backup time) pairs instead of
//! §8's D² dense vectors: a disk holds backups of at most a few streams per
//! round, so the list is short whatever D is.
//!
//! A title's per-round disk costs are computed once (when it is stored) into
//! a [`TitleCharges`] record: where each round's primary and backup fragments
//! live and what each costs under the round bound. Admission then only adds
//! integers. The same tables answer, round by round, which reads each disk
//! does ([`Reservations::plan_round`]), so the simulator and the server
//! execute exactly what was admitted.

mod admission;
mod charges;
mod degraded;
mod guarantee;
mod plan;
mod regroup;
mod shape;
mod switch;
mod tables;
#[cfg(test)]
mod tests;
mod window;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::layout::Replica;
use crate::units::{DiskIndex, PlaybackRound, Round, StreamId, TitleId};

pub use admission::Pairs;
pub use charges::{Bound, Charge, ChargesError, Grouping, PairCost, TitleCharges, group_start};
pub use degraded::replica_after_error;
use guarantee::RotationCredit;
pub use guarantee::{Guarantee, rotation_quantile_ns};
pub use regroup::RegroupRefusal;
pub(crate) use shape::{ReadKind, Shape};
use tables::{DiskSlot, SlotCharge};
pub use window::{BackupWindow, FluidRead, RecoveryBacklog, RecoveryPiece, RecoveryRead};

/// Disk bandwidth reservation scheme (seed 000 §3: `none`, `unreserved`,
/// `mirroring`, `minimum`, `dynamic`; `docs/layout.md` compares them).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    /// Primary replica only; a disk failure loses data.
    None,
    /// Primary and backup stored, only primary reads reserved: the negative control.
    Unreserved,
    /// Primary and backup reads both reserved (seed 000 §4, Figure 4).
    Mirroring,
    /// Primary plus, per disk and round, the largest backup time for any one
    /// other disk's failure (seed 000 §4, Figure 5).
    Minimum,
    /// Read whichever replica lies on the less loaded disk, decided at admission (§5).
    Dynamic,
}

impl Scheme {
    pub const ALL: [Scheme; 5] = [
        Scheme::None,
        Scheme::Unreserved,
        Scheme::Mirroring,
        Scheme::Minimum,
        Scheme::Dynamic,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scheme::None => "none",
            Scheme::Unreserved => "unreserved",
            Scheme::Mirroring => "mirroring",
            Scheme::Minimum => "minimum",
            Scheme::Dynamic => "dynamic",
        }
    }

    /// Whether the title's backup replica is stored at all.
    pub fn stores_backup(self) -> bool {
        self != Scheme::None
    }
}

impl std::str::FromStr for Scheme {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scheme::ALL
            .into_iter()
            .find(|scheme| scheme.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown scheme '{s}' (known: none, unreserved, mirroring, minimum, dynamic)"
                )
            })
    }
}

impl std::fmt::Display for Scheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What admission is configured with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReservationConfig {
    pub disks: u32,
    pub scheme: Scheme,
    pub round_duration_ns: u64,
    /// The bound's once-per-disk-per-round term (paper: 2·T_fullSeek).
    pub round_fixed_ns: u64,
    /// Total server buffer (seed 000 §6.3: 64 MB per disk).
    pub buffer_capacity_bytes: u64,
    /// Network bytes per round; `None` is unlimited (seed 000 §6.3).
    pub network_capacity_bytes_per_round: Option<u64>,
    /// Longest stream (in stream rounds) the tables can hold, plus look-ahead.
    pub horizon_rounds: u64,
    /// Drive cache segments per disk that prefetched blocks may hold at once
    /// (seed 003's drive-cache pairs); 0: no pairs.
    #[serde(default)]
    pub drive_cache_segments: u32,
    /// On a drive that sends its cache hits over the bus while its heads
    /// work (`CacheSpec::command_queueing`): the largest share of the bus
    /// the media's data takes, in parts per million
    /// (`RondoBound::bus_share_ppm`); 0 otherwise.
    #[serde(default)]
    pub bus_share_ppm: u32,
    /// Which replica a new stream reads in each round under `minimum`
    /// (`ReplicaChoice`; seed 000 always reads the primary).
    #[serde(default)]
    pub replica_choice: ReplicaChoice,
    /// Which of the start rounds that fit a new stream takes (`StartChoice`).
    #[serde(default)]
    pub start_choice: StartChoice,
    /// What admission guarantees each disk-round (`Guarantee`).
    #[serde(default)]
    pub guarantee: Guarantee,
    /// The worst rotational wait each extent's charge includes
    /// (`Bound::revolution_ns`): what a statistical guarantee credits.
    #[serde(default)]
    pub revolution_ns: u64,
    /// Under `minimum`: the rounds a survivor has to read a failed disk's
    /// backup (1: in the round itself, seed 000). With k > 1 a backup read
    /// due in round r may be done in rounds r..r+k-1 (its stream's client
    /// is k-1 rounds ahead), so its failure reservation is spread as 1/k of
    /// its charge over those k rounds (`BackupWindow`).
    #[serde(default)]
    pub backup_window: BackupWindow,
}

/// Which start round admission gives a new stream among those that fit.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StartChoice {
    /// The earliest (seed 000 §6.2).
    #[default]
    First,
    /// The one that adds the least reserved time to the tables (ties: the
    /// earliest).
    LeastAdded,
}

impl std::str::FromStr for StartChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "first" => Ok(StartChoice::First),
            "least-added" => Ok(StartChoice::LeastAdded),
            _ => Err(format!(
                "unknown start choice '{s}' (known: first, least-added)"
            )),
        }
    }
}

/// Which replica a new stream reads in each round under `minimum`
/// reservation.
///
/// Reading the backup of a round instead of its primary swaps the two
/// replicas' roles for that stream and round: the backup's disk does the
/// read, and the primary's disk holds the failure reservation for it (the
/// backup's disk being its source). Both replicas hold the same bytes, so
/// the guarantee across a single failure is the same either way; what
/// changes is which (source, survivor) cell of the failure reservation the
/// round adds to, and so how far the per-disk MAX over sources rises.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReplicaChoice {
    /// Always the primary (seed 000; paper mode).
    #[default]
    Primary,
    /// Per round, of the two replicas that fit, the one whose read and
    /// failure reservation leave the larger of the two disks' reserved
    /// time lowest, then the one adding less (ties: the primary). Needs
    /// whole (not declustered) backups, no drive-cache pairs and no backup
    /// window; otherwise it reads the primary. Measured to lose streams
    /// (docs/experiments/failure-tolerance-cost.md).
    Balanced,
}

impl std::str::FromStr for ReplicaChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "primary" => Ok(ReplicaChoice::Primary),
            "balanced" => Ok(ReplicaChoice::Balanced),
            _ => Err(format!(
                "unknown replica choice '{s}' (known: primary, balanced)"
            )),
        }
    }
}

impl ReservationConfig {
    /// The time a disk-round may reserve: the round less the bound's fixed
    /// term.
    pub fn budget_ns(&self) -> u64 {
        let window = self.backup_window_in_force();
        let split_ns = if window.is_spread() {
            window.split_ns
        } else {
            0
        };
        self.round_duration_ns
            .saturating_sub(self.round_fixed_ns + split_ns)
    }

    /// The backup window admission and the array work with: the configured
    /// one under `minimum`, none (k = 1) under any other scheme.
    pub fn backup_window_in_force(&self) -> BackupWindow {
        if self.scheme == Scheme::Minimum {
            BackupWindow {
                rounds: self.backup_window.rounds.max(1),
                ..self.backup_window
            }
        } else {
            BackupWindow::default()
        }
    }

    /// Sets the network capacity from a link of `bits_per_s` (`None`: not
    /// limited), as bytes per round of this configuration's rounds.
    pub fn set_network_bits_per_s(&mut self, bits_per_s: Option<u64>) {
        self.network_capacity_bytes_per_round =
            bits_per_s.map(|bits| network_bytes_per_round(bits, self.round_duration_ns));
    }

    /// Sets the backup window (`backup_window`); the tables' horizon grows
    /// by its k - 1 + L rounds, which the spread reaches past a stream's last.
    pub fn set_backup_window(&mut self, window: BackupWindow) {
        let before = self.backup_window.spread_rounds();
        self.horizon_rounds =
            self.horizon_rounds - u64::from(before - 1) + u64::from(window.spread_rounds() - 1);
        self.backup_window = window;
    }

    /// The tables of an array of `disks` disks whose longest stream lasts
    /// `longest_stream_rounds` (its reads and its last send round) and whose
    /// admission looks `lookahead_rounds` ahead: the horizon holds a stream
    /// admitted at the end of the look-ahead, plus the current round and the
    /// one being planned. The network is unlimited (seed 000 §6.3); the
    /// simulator and the server both size their tables here.
    pub fn for_array(
        disks: u32,
        scheme: Scheme,
        round_duration_ns: u64,
        round_fixed_ns: u64,
        buffer_per_disk_bytes: u64,
        longest_stream_rounds: u64,
        lookahead_rounds: u64,
    ) -> ReservationConfig {
        ReservationConfig {
            disks,
            scheme,
            round_duration_ns,
            round_fixed_ns,
            buffer_capacity_bytes: buffer_per_disk_bytes * u64::from(disks),
            network_capacity_bytes_per_round: None,
            horizon_rounds: longest_stream_rounds + lookahead_rounds + 2,
            drive_cache_segments: 0,
            bus_share_ppm: 0,
            replica_choice: ReplicaChoice::Primary,
            start_choice: StartChoice::First,
            guarantee: Guarantee::Deterministic,
            revolution_ns: 0,
            backup_window: BackupWindow::default(),
        }
    }
}

/// A network of `bits_per_s` as the bytes it sends in one round of
/// `round_duration_ns` (seed 000 §6.3's per-round network capacity),
/// rounded down so that admission never reserves more than the link carries.
pub fn network_bytes_per_round(bits_per_s: u64, round_duration_ns: u64) -> u64 {
    (u128::from(bits_per_s) * u128::from(round_duration_ns) / 8 / 1_000_000_000)
        .min(u128::from(u64::MAX)) as u64
}

/// Why a stream was not admitted.
#[derive(Clone, Debug, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum Rejection {
    #[error(
        "no start round within {lookahead_rounds} rounds: disk {disk} is full in round {round}"
    )]
    DiskTime {
        lookahead_rounds: u64,
        disk: DiskIndex,
        round: Round,
    },
    #[error(
        "no start round within {lookahead_rounds} rounds: server buffer is full in round {round}"
    )]
    Buffer { lookahead_rounds: u64, round: Round },
    #[error("no start round within {lookahead_rounds} rounds: network is full in round {round}")]
    Network { lookahead_rounds: u64, round: Round },
    #[error("round {round} of the title has no replica on a working disk")]
    DataUnavailable { round: PlaybackRound },
    #[error(
        "round {round} of the title has no good replica (every copy failed its checksum): \
         the title plays up to that round; re-ingest it to play it whole"
    )]
    DataLost { round: PlaybackRound },
    #[error("title is {rounds} stream rounds long; the reservation horizon is {horizon_rounds}")]
    TooLong { rounds: u64, horizon_rounds: u64 },
    #[error("unknown title {0:?}")]
    UnknownTitle(TitleId),
    #[error(
        "the host is behind: its deliveries ran {} ms late, over the limit of {} ms; \
         new streams wait until it catches up",
        lag_ns / 1_000_000,
        lag_max_ns / 1_000_000
    )]
    HostBehind { lag_ns: u64, lag_max_ns: u64 },
    #[error("playback round {first_playback_round} is past the title's end ({rounds} rounds)")]
    PastEnd {
        first_playback_round: PlaybackRound,
        rounds: usize,
    },
}

/// One read a disk performs in a round, as planned from the reservations.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedRead {
    pub stream: StreamId,
    pub title: TitleId,
    /// The title's playback round whose data is read.
    pub playback_round: PlaybackRound,
    pub disk: DiskIndex,
    pub replica: Replica,
    /// For a backup read, which entry of the round's backup list
    /// (`TitlePlan::backups`); 0 for the primary.
    pub backup_entry: u16,
    /// The disk time reserved for this read (its bound cost; 0 for a read
    /// that joins the previous one).
    pub cost_ns: u64,
    /// A backup read made because the round's primary disk has failed (what
    /// a backup window lets a survivor delay, `array::recovery`).
    pub rerouted: bool,
    /// Whether this read is one more round of the previous read's request
    /// (a read group): the disk reads both in one request, whose charge the
    /// first carries.
    pub joins_previous: bool,
    /// Bytes after this read that the drive reads on into its cache (the
    /// first of a drive-cache pair: the next round, read from the cache in
    /// its own round); 0: none.
    pub prefetch_bytes: u64,
    /// Read from the drive cache (the second of a drive-cache pair): the
    /// array puts it before the disk-round's other reads, so that no other
    /// stream's read of the same block takes it from the cache first.
    pub cache_hit: bool,
}

/// How one admitted stream reads each round, kept so its reservations can be
/// released and its rounds planned.
#[derive(Clone, Debug)]
struct StreamRecord {
    title: TitleId,
    /// Absolute round of the stream's first read.
    start_round: Round,
    /// Its playback rounds (from 0 unless it started mid-title, e.g. a
    /// player's range request, to the title's end or the range's) and
    /// which it reads in each round.
    shape: Shape,
    /// Per playback round from `shape.first` on, the replica the stream
    /// was admitted to read.
    choice: Vec<RoundChoice>,
}

impl StreamRecord {
    /// The stream round (offset from the start) that `round` is.
    fn offset(&self, round: Round) -> usize {
        (round.0 - self.start_round.0) as usize
    }

    /// The first round after the stream's last.
    fn end_round(&self, charges: &TitleCharges) -> Round {
        self.start_round
            .plus(self.shape.stream_rounds(charges) as u64)
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum RoundChoice {
    /// Primary read; backups reserved per the scheme.
    Primary,
    /// Dynamic balancing, or `ReplicaChoice::Balanced` under `minimum`,
    /// chose the backup (all its pieces); under the latter the primary's
    /// disk holds the failure reservation.
    Backup,
    /// The primary's disk had failed at admission: the backup pieces are read
    /// (and charged as reads); nothing else is reserved.
    Rerouted,
}

/// The schedule index after a stream's last round (its data held and sent
/// after its last read) when its reads end before playback round
/// `end_playback_round`.
fn stream_end(charges: &TitleCharges, end_playback_round: usize) -> usize {
    end_playback_round + (charges.stream_rounds() - charges.rounds())
}

/// A new stream's start burst: the rounds it may read in its first round
/// and send as soon as read (`reservation::shape`). `Burst::default()` is
/// none, as in seed 000.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Burst {
    /// Playback rounds (0: none by time).
    pub rounds: u32,
    /// Or the whole span, when it holds at most this many bytes (0: none
    /// by size).
    pub bytes: u64,
    /// Whether the client keeps the burst's lead after it.
    #[serde(default)]
    pub lead: BurstLead,
}

/// What a start burst's client is left with after the burst
/// (`reservation::shape`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BurstLead {
    /// The stream reads on as a plain stream started a round earlier: its
    /// client is again about one round ahead of what it plays (rondo's
    /// first burst; the least server buffer).
    #[default]
    Spent,
    /// The stream reads on from the round after the burst, one round per
    /// round: its client stays the burst ahead for the whole stream, and a
    /// late round has the burst's seconds to arrive in, not one.
    Kept,
}

impl BurstLead {
    pub fn name(self) -> &'static str {
        match self {
            BurstLead::Spent => "spent",
            BurstLead::Kept => "kept",
        }
    }
}

impl std::str::FromStr for BurstLead {
    type Err = String;

    fn from_str(text: &str) -> Result<BurstLead, String> {
        match text {
            "spent" => Ok(BurstLead::Spent),
            "kept" => Ok(BurstLead::Kept),
            other => Err(format!(
                "unknown start-burst lead '{other}' (known: spent, kept)"
            )),
        }
    }
}

/// An admitted stream's place in time.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamSpan {
    pub title: TitleId,
    /// Absolute round of its first read.
    pub start_round: Round,
    /// The title's playback round read first.
    pub first_playback_round: PlaybackRound,
    /// The playback round after its last read.
    pub end_playback_round: PlaybackRound,
    /// Playback rounds read in its first round and sent as soon as read (0:
    /// none, a plain stream; see `reservation::shape`).
    pub burst_rounds: u32,
    /// Whether its client keeps the burst's lead after it.
    #[serde(default)]
    pub burst_lead: BurstLead,
    /// Its read groups (`Grouping::NONE`: one round per read) from
    /// `regroup_from` on; before it, `grouping_before` (a stream regrouped
    /// by the dynamic cycle, `Reservations::regroup`).
    pub grouping: Grouping,
    #[serde(default)]
    pub regroup_from: PlaybackRound,
    #[serde(default)]
    pub grouping_before: Grouping,
    /// Whether it reads in drive-cache pairs (its timing is a plain stream's).
    pub pairs: bool,
    /// The first playback round that may start a pair (later than the
    /// first for a stream switched into pairs).
    pub pairs_from: PlaybackRound,
    /// The playback round after the last that may be read in a pair.
    pub pairs_end: PlaybackRound,
    /// Rounds its first send waits beyond a plain stream's: the client's
    /// lead under a backup window (`reservation::shape`); 0 in seed 000.
    #[serde(default)]
    pub lead_rounds: u32,
}

impl StreamSpan {
    pub(crate) fn shape(&self) -> Shape {
        Shape {
            first: self.first_playback_round.index(),
            end: self.end_playback_round.index(),
            burst: self.burst_rounds as usize,
            burst_lead: self.burst_lead,
            grouping: self.grouping,
            regroup_from: self.regroup_from.index(),
            grouping_before: self.grouping_before,
            pairs: self.pairs,
            pairs_from: self.pairs_from.index(),
            pairs_end: self.pairs_end.index(),
            lead: self.lead_rounds as usize,
        }
    }

    /// The absolute round in which playback round `playback_round` is read.
    pub fn read_round(&self, playback_round: PlaybackRound) -> Round {
        self.start_round
            .plus(self.shape().read_offset(playback_round.index()) as u64)
    }

    /// The absolute round from which playback round `playback_round` may be
    /// sent: the round after its read, or the read round itself for a round
    /// read in a start burst.
    pub fn send_round(&self, playback_round: PlaybackRound) -> Round {
        self.start_round
            .plus(self.shape().send_offset(playback_round.index()) as u64)
    }

    /// The playback rounds its first send hands the client at once: a start
    /// burst's rounds, a backup window's lead and the round after it, or
    /// the first round alone. What its socket must take in one go for the
    /// send not to wait on the client's reads (`rondo serve` sizes the
    /// socket's send buffer by it).
    pub fn first_send_rounds(&self) -> std::ops::Range<PlaybackRound> {
        let shape = self.shape();
        let first = shape.first;
        let first_send = shape.send_offset(first);
        let last = (first..shape.end)
            .take_while(|&i| shape.send_offset(i) == first_send)
            .last()
            .unwrap_or(first);
        PlaybackRound(first as u32)..PlaybackRound(last as u32 + 1)
    }

    /// The absolute round after its last read.
    pub fn end_read_round(&self) -> Round {
        self.start_round
            .plus(self.shape().reads_end_offset() as u64)
    }
}

/// Admitted stream: where it starts.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Admission {
    pub stream: StreamId,
    /// Absolute round of the stream's first disk read.
    pub start_round: Round,
}

/// The reservation tables of one disk array.
#[derive(Clone, Debug)]
pub struct Reservations {
    config: ReservationConfig,
    titles: BTreeMap<TitleId, Arc<TitleCharges>>,
    /// A title's charges for read groups of another length than its own
    /// (the dynamic cycle regroups streams), by title and group length.
    group_charges: BTreeMap<(TitleId, u32), Arc<TitleCharges>>,
    /// `slots[disk * horizon + round % horizon]`.
    slots: Vec<DiskSlot>,
    /// The statistical guarantee's rotation credits (`None`: deterministic).
    rotation: Option<RotationCredit>,
    buffer_bytes: Vec<u64>,
    network_bytes: Vec<u64>,
    streams: BTreeMap<StreamId, StreamRecord>,
    next_stream: u64,
    /// Every round before this one is in the past and its slots are cleared.
    current_round: Round,
    failed: Vec<bool>,
    /// Per disk, the current round when it last came back from a rebuild:
    /// a drive-cache pair whose first round it missed (read from the
    /// backup) has no block in its cache.
    restored_at: Vec<Option<Round>>,
}

impl Reservations {
    pub fn new(config: ReservationConfig) -> Reservations {
        assert!(config.disks >= 1, "an array needs a disk");
        assert!(config.horizon_rounds >= 2, "horizon too short");
        let slots =
            vec![DiskSlot::default(); (config.disks as u64 * config.horizon_rounds) as usize];
        if let Err(why) = config.guarantee.validate() {
            panic!("{why}");
        }
        Reservations {
            rotation: RotationCredit::new(config.guarantee, config.revolution_ns),
            buffer_bytes: vec![0; config.horizon_rounds as usize],
            network_bytes: vec![0; config.horizon_rounds as usize],
            failed: vec![false; config.disks as usize],
            restored_at: vec![None; config.disks as usize],
            slots,
            titles: BTreeMap::new(),
            group_charges: BTreeMap::new(),
            streams: BTreeMap::new(),
            next_stream: 0,
            current_round: Round(0),
            config,
        }
    }

    pub fn config(&self) -> &ReservationConfig {
        &self.config
    }

    pub fn current_round(&self) -> Round {
        self.current_round
    }

    /// Registers a stored title's charges.
    pub fn add_title(&mut self, title: TitleId, charges: TitleCharges) {
        for r in 0..charges.rounds() {
            assert!(charges.primary(r).disk.0 < self.config.disks);
            assert!(
                charges
                    .backup(r)
                    .iter()
                    .all(|c| c.disk.0 < self.config.disks)
            );
        }
        self.titles.insert(title, Arc::new(charges));
    }

    pub fn title(&self, title: TitleId) -> Option<&TitleCharges> {
        self.titles.get(&title).map(|c| c.as_ref())
    }

    /// Registers a title's charges for read groups of another length
    /// (`Bound::title_charges_grouped` with that length; one round per read
    /// when it is 1), so that its streams can be admitted or regrouped at
    /// it. The title must be registered.
    pub fn add_title_grouping(&mut self, title: TitleId, charges: TitleCharges) {
        let own = &self.titles[&title];
        assert_eq!(own.rounds(), charges.rounds(), "the same title");
        for r in 0..charges.rounds() {
            assert_eq!(own.primary(r).disk, charges.primary(r).disk, "same layout");
        }
        let key = (title, charges.grouping().rounds_per_read());
        self.group_charges.insert(key, Arc::new(charges));
    }

    /// The group lengths `title` can be read in: its own and those
    /// registered with [`Reservations::add_title_grouping`].
    pub fn group_lengths(&self, title: TitleId) -> Vec<u32> {
        let mut lengths: Vec<u32> = self
            .group_charges
            .range((title, 0)..=(title, u32::MAX))
            .map(|((_, g), _)| *g)
            .chain(
                self.titles
                    .get(&title)
                    .map(|c| c.grouping().rounds_per_read()),
            )
            .collect();
        lengths.sort_unstable();
        lengths.dedup();
        lengths
    }

    /// Whether streams of `title` can read in groups of `group_rounds`
    /// (its own length or one registered for it).
    pub fn has_grouping(&self, title: TitleId, group_rounds: u32) -> bool {
        self.grouped(title, group_rounds).is_some()
    }

    /// `title`'s charges when read in groups of `group_rounds`, if known.
    fn grouped(&self, title: TitleId, group_rounds: u32) -> Option<&Arc<TitleCharges>> {
        let own = self.titles.get(&title)?;
        if own.grouping().rounds_per_read() == group_rounds {
            Some(own)
        } else {
            self.group_charges.get(&(title, group_rounds))
        }
    }

    /// The charges of a stream's playback round `i`: those of the read
    /// groups `i` is read in.
    fn charges_for(&self, record: &StreamRecord, i: usize) -> &Arc<TitleCharges> {
        let g = record.shape.grouping_at(i).rounds_per_read();
        self.grouped(record.title, g)
            .expect("a stream's group lengths are registered")
    }

    /// Removes a title; refused (returns false) while a stream plays it.
    pub fn remove_title(&mut self, title: TitleId) -> bool {
        if self.streams.values().any(|s| s.title == title) {
            return false;
        }
        self.group_charges.retain(|(t, _), _| *t != title);
        self.titles.remove(&title).is_some()
    }

    /// Where an admitted stream is in time: `None` once it has ended or was
    /// released.
    pub fn stream_span(&self, stream: StreamId) -> Option<StreamSpan> {
        self.streams.get(&stream).map(|r| StreamSpan {
            title: r.title,
            start_round: r.start_round,
            first_playback_round: PlaybackRound(r.shape.first as u32),
            end_playback_round: PlaybackRound(r.shape.end as u32),
            burst_rounds: r.shape.burst as u32,
            burst_lead: r.shape.burst_lead,
            grouping: r.shape.grouping,
            regroup_from: PlaybackRound(r.shape.regroup_from as u32),
            grouping_before: r.shape.grouping_before,
            pairs: r.shape.pairs,
            pairs_from: PlaybackRound(r.shape.pairs_from as u32),
            pairs_end: PlaybackRound(r.shape.pairs_end as u32),
            lead_rounds: r.shape.lead as u32,
        })
    }

    /// Every registered stream, in id order.
    pub fn stream_ids(&self) -> impl Iterator<Item = StreamId> + '_ {
        self.streams.keys().copied()
    }

    /// The titles registered, in id order.
    pub fn title_ids(&self) -> impl Iterator<Item = TitleId> + '_ {
        self.titles.keys().copied()
    }

    /// Streams not yet past their last send round (a stream's record stays
    /// k - 1 rounds longer under a backup window, for its spread backups).
    pub fn active_streams(&self) -> usize {
        let now = self.current_round;
        self.streams
            .values()
            .filter(|s| s.end_round(&self.titles[&s.title]) > now)
            .count()
    }

    fn slot_index(&self, disk: DiskIndex, round: Round) -> usize {
        (u64::from(disk.0) * self.config.horizon_rounds + round.0 % self.config.horizon_rounds)
            as usize
    }

    /// The backup window backup time is spread by (k = 1 and L = 0: not
    /// spread).
    fn spread_window(&self) -> BackupWindow {
        self.config.backup_window_in_force()
    }

    fn slot(&self, disk: DiskIndex, round: Round) -> &DiskSlot {
        &self.slots[self.slot_index(disk, round)]
    }

    /// Disk time reserved on `disk` in `round`, without the fixed term.
    pub fn reserved_ns(&self, disk: DiskIndex, round: Round) -> u64 {
        self.check_window(round);
        self.slot(disk, round)
            .reserved_ns(self.config.scheme, self.config.bus_share_ppm)
    }

    /// The part of `reserved_ns` that is for primary (planned) reads.
    pub fn reserved_primary_ns(&self, disk: DiskIndex, round: Round) -> u64 {
        self.check_window(round);
        self.slot(disk, round).primary_ns
    }

    /// Backup time on `disk` in `round` for primaries on `source`.
    pub fn reserved_backup_from_ns(&self, disk: DiskIndex, round: Round, source: DiskIndex) -> u64 {
        self.check_window(round);
        self.slot(disk, round).backup_from(source)
    }

    /// Server buffer reserved in `round`.
    pub fn reserved_buffer_bytes(&self, round: Round) -> u64 {
        self.check_window(round);
        self.buffer_bytes[(round.0 % self.config.horizon_rounds) as usize]
    }

    fn check_window(&self, round: Round) {
        assert!(
            round >= self.current_round
                && round < self.current_round.plus(self.config.horizon_rounds),
            "round {round} outside the reservation window [{}, {})",
            self.current_round,
            self.current_round.plus(self.config.horizon_rounds)
        );
    }

    /// Moves time forward to `round`: past rounds' slots are cleared and
    /// streams that ended are forgotten.
    pub fn advance_to(&mut self, round: Round) {
        assert!(round >= self.current_round, "time runs forward");
        let horizon = self.config.horizon_rounds;
        let first_cleared = self.current_round.0.max(round.0.saturating_sub(horizon));
        for past in first_cleared..round.0 {
            let slot = (past % horizon) as usize;
            for disk in 0..self.config.disks {
                let i = (disk as u64 * horizon) as usize + slot;
                self.slots[i].clear();
            }
            self.buffer_bytes[slot] = 0;
            self.network_bytes[slot] = 0;
        }
        self.current_round = round;
        let titles = &self.titles;
        // A stream's spread backup time outlasts it by k - 1 + L rounds:
        // the backup of its last read may be read that much later.
        let tail = u64::from(self.spread_window().spread_rounds() - 1);
        self.streams
            .retain(|_, s| s.end_round(&titles[&s.title]).plus(tail) > round);
    }

    /// Adds (`sign` = 1) or removes (`sign` = -1) a stream's reservations for
    /// rounds at or after the current round.
    fn apply(&mut self, record: &StreamRecord, sign: i8) {
        let title_charges = Arc::clone(&self.titles[&record.title]);
        let scheme = self.config.scheme;
        let horizon = self.config.horizon_rounds;
        let window = self.spread_window();
        // Reads up to k - 1 + L rounds back spread backup time into this
        // round on.
        let first = Round(
            self.current_round
                .0
                .saturating_sub(u64::from(window.spread_rounds() - 1)),
        )
        .max(record.start_round);
        for round in Round::range(first, record.end_round(&title_charges)) {
            let q = record.offset(round);
            if round >= self.current_round {
                // What it holds and sends follows the groups of the round it
                // plays (a burst's stream is never regrouped).
                let held = Arc::clone(self.charges_for(record, record.shape.first + q));
                let (buffer_bytes, network_bytes) = record.shape.charges_at(&held, q);
                let ring = (round.0 % horizon) as usize;
                self.buffer_bytes[ring] = add_signed(self.buffer_bytes[ring], buffer_bytes, sign);
                self.network_bytes[ring] =
                    add_signed(self.network_bytes[ring], network_bytes, sign);
            }
            for i in record.shape.reads_at(q) {
                if !record.shape.is_read_start(i) {
                    continue;
                }
                let choice = record.choice[i - record.shape.first];
                let charges = Arc::clone(self.charges_for(record, i));
                let kind = record.shape.read_kind(&charges, &record.choice, i);
                for (disk, charge) in read_charges(scheme, &charges, i, choice, kind) {
                    for (at, part) in spread(charge, round, window) {
                        if at < self.current_round {
                            continue;
                        }
                        let idx = self.slot_index(disk, at);
                        self.slots[idx].charge(part, sign, self.rotation.as_ref());
                    }
                }
            }
        }
    }

    /// Replaces a stream's record, its reservations from the current round
    /// on following it; returns the record it had (a switch or a regroup).
    fn replace_record(&mut self, id: StreamId, new: StreamRecord) -> StreamRecord {
        let old = self
            .streams
            .insert(id, new.clone())
            .expect("a known stream");
        self.apply(&old, -1);
        self.apply(&new, 1);
        old
    }

    /// Puts streams' records back as they were, last replaced first.
    fn restore_records(&mut self, old: Vec<(StreamId, StreamRecord)>) {
        for (id, record) in old.into_iter().rev() {
            self.replace_record(id, record);
        }
    }

    /// Releases a stream's reservations from the current round on (the
    /// client left, or playback stopped early). Returns false if unknown.
    pub fn release(&mut self, stream: StreamId) -> bool {
        match self.streams.remove(&stream) {
            Some(record) => {
                self.apply(&record, -1);
                true
            }
            None => false,
        }
    }

    /// Charges every admitted stream anew: `config` (its fixed term) and each
    /// title's `titles` charges (and `group_charges`) take the place of the
    /// ones in force, the tables recomputed from the stream records, when
    /// every disk-round from the current one on stays within the new budget
    /// and its drive's cache segments. Otherwise nothing changes and the
    /// first disk-round that would not fit is returned. For a bound that
    /// changes while streams play (the charged stroke widening as ingest
    /// adds data further in, `docs/guarantee.md`): the streams keep their
    /// rounds, replicas and start; only what they are charged changes.
    pub fn recharge(
        &mut self,
        config: ReservationConfig,
        titles: BTreeMap<TitleId, Arc<TitleCharges>>,
        group_charges: BTreeMap<(TitleId, u32), Arc<TitleCharges>>,
    ) -> Result<(), Overloaded> {
        assert_eq!(config.disks, self.config.disks, "the same array");
        assert_eq!(
            config.horizon_rounds, self.config.horizon_rounds,
            "the same horizon"
        );
        for (id, old) in &self.titles {
            let new = titles.get(id).ok_or(Overloaded::TitleMissing(*id))?;
            assert_eq!(
                new.rounds(),
                old.rounds(),
                "title {}: the same rounds",
                id.0
            );
        }
        let mut fresh = Reservations::new(config);
        fresh.titles = titles;
        fresh.group_charges = group_charges;
        fresh.streams = self.streams.clone();
        fresh.next_stream = self.next_stream;
        fresh.current_round = self.current_round;
        fresh.failed = self.failed.clone();
        fresh.restored_at = self.restored_at.clone();
        for record in self.streams.values() {
            fresh.apply(record, 1);
        }
        let cfg = &fresh.config;
        let budget_ns = cfg.budget_ns();
        for round in Round::range(
            fresh.current_round,
            fresh.current_round.plus(cfg.horizon_rounds),
        ) {
            for disk in DiskIndex::all(cfg.disks) {
                let slot = fresh.slot(disk, round);
                let reserved_ns = slot.reserved_ns(cfg.scheme, cfg.bus_share_ppm);
                if reserved_ns > budget_ns || slot.cache_blocks > cfg.drive_cache_segments {
                    return Err(Overloaded::DiskRound {
                        disk,
                        round,
                        reserved_ns,
                        budget_ns,
                    });
                }
            }
        }
        *self = fresh;
        Ok(())
    }

    /// Recomputes every table from the stream records and checks it equals the
    /// incremental one; for tests and the simulator's invariant checks.
    pub fn check_invariants(&self) {
        let mut fresh = Reservations::new(self.config.clone());
        fresh.titles = self.titles.clone();
        fresh.group_charges = self.group_charges.clone();
        fresh.current_round = self.current_round;
        fresh.failed = self.failed.clone();
        for record in self.streams.values() {
            fresh.apply(record, 1);
        }
        let horizon = self.config.horizon_rounds;
        for round in Round::range(self.current_round, self.current_round.plus(horizon)) {
            for disk in DiskIndex::all(self.config.disks) {
                let (a, b) = (self.slot(disk, round), fresh.slot(disk, round));
                assert_eq!(
                    a.primary_ns, b.primary_ns,
                    "primary disk {disk} round {round}"
                );
                assert_eq!(
                    a.revolutions, b.revolutions,
                    "revolutions disk {disk} round {round}"
                );
                assert_eq!(
                    a.backup_sum_ns, b.backup_sum_ns,
                    "backup sum disk {disk} round {round}"
                );
                assert_eq!(
                    a.backup_max_ns, b.backup_max_ns,
                    "backup max disk {disk} round {round}"
                );
                assert_eq!(
                    a.backup_by_source, b.backup_by_source,
                    "disk {disk} round {round}"
                );
                assert_eq!(
                    a.cache_blocks, b.cache_blocks,
                    "cache blocks disk {disk} round {round}"
                );
                assert_eq!(
                    a.hit_bus_ns, b.hit_bus_ns,
                    "hit bus time disk {disk} round {round}"
                );
                assert!(
                    a.cache_blocks <= self.config.drive_cache_segments,
                    "disk {disk} holds more prefetched blocks than cache segments in round {round}"
                );
                assert!(
                    a.reserved_ns(self.config.scheme, self.config.bus_share_ppm)
                        <= self.config.budget_ns(),
                    "disk {disk} over-reserved in round {round}"
                );
            }
            let ring = (round.0 % horizon) as usize;
            assert_eq!(self.buffer_bytes[ring], fresh.buffer_bytes[ring]);
            assert!(self.buffer_bytes[ring] <= self.config.buffer_capacity_bytes);
        }
    }
}

/// Why [`Reservations::recharge`] kept the charges in force.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum Overloaded {
    #[error("title {} has no charges under the new bound", .0.0)]
    TitleMissing(TitleId),
    #[error(
        "disk {disk} would be reserved {:.1} ms in round {round}, over its budget of {:.1} ms",
        *.reserved_ns as f64 / 1e6,
        *.budget_ns as f64 / 1e6
    )]
    DiskRound {
        disk: DiskIndex,
        round: Round,
        reserved_ns: u64,
        budget_ns: u64,
    },
}

/// What a read of playback round `i` with replica choice `choice` reserves,
/// per disk: the primary read and, under `mirroring` and `minimum`, backup
/// time for it on the backup's disks; or the backup pieces read instead.
/// Admission checks these and the tables add them, so both count a read
/// alike.
fn read_charges(
    scheme: Scheme,
    charges: &TitleCharges,
    i: usize,
    choice: RoundChoice,
    kind: ReadKind,
) -> impl Iterator<Item = (DiskIndex, SlotCharge)> + '_ {
    let primary = charges.primary(i);
    let reads_primary = choice == RoundChoice::Primary;
    let reserves_backup = reads_primary && matches!(scheme, Scheme::Mirroring | Scheme::Minimum);
    // A round admitted to read its backup under `minimum`
    // (`ReplicaChoice::Balanced`): the primary's disk holds the failure
    // reservation, one per backup piece's disk, each the whole primary
    // read (what that piece's loss makes the primary's disk read, at most).
    let swapped = choice == RoundChoice::Backup && scheme == Scheme::Minimum;
    let swapped_backup = charges
        .backup(i)
        .iter()
        .filter(move |_| swapped)
        .map(move |piece| {
            (
                primary.disk,
                SlotCharge::Backup {
                    source: piece.disk,
                    cost_ns: primary.cost_ns,
                },
            )
        });
    // A drive-cache pair reads the primary at its own cost and holds a
    // cache segment on its disk in both its rounds; its backups are
    // reserved as plain reads (after a failure the pair is two plain reads).
    // A pair's reads keep their worst case (no rotation credit): the
    // prefetch and the hit are not independent waits.
    let (cost_ns, revolutions, cache) = match kind {
        ReadKind::Single => (primary.cost_ns, primary.revolutions, None),
        ReadKind::PairFirst(p) => (
            p.first_ns,
            0,
            Some((primary.disk, SlotCharge::CacheBlock { hit_bus_ns: 0 })),
        ),
        ReadKind::PairSecond(p) => (
            p.hit_ns,
            0,
            Some((
                primary.disk,
                SlotCharge::CacheBlock {
                    hit_bus_ns: p.hit_bus_ns,
                },
            )),
        ),
    };
    let primary_read = reads_primary
        .then_some((
            primary.disk,
            SlotCharge::Read {
                cost_ns,
                revolutions,
            },
        ))
        .into_iter()
        .chain(cache);
    let backup = charges.backup(i).iter().filter_map(move |piece| {
        let charge = if !reads_primary {
            SlotCharge::Read {
                cost_ns: piece.cost_ns,
                revolutions: piece.revolutions,
            }
        } else if reserves_backup {
            SlotCharge::Backup {
                source: primary.disk,
                cost_ns: piece.cost_ns,
            }
        } else {
            return None;
        };
        Some((piece.disk, charge))
    });
    primary_read.chain(backup).chain(swapped_backup)
}

/// Where a charge made by a read in `round` lands: backup time under a
/// backup window of k rounds, a loss noticed up to L rounds late, as 1/k
/// of it (rounded up) in each of rounds `round..round + k + L`
/// (`window`'s module docs); everything else in `round` itself.
fn spread(
    charge: SlotCharge,
    round: Round,
    window: BackupWindow,
) -> impl Iterator<Item = (Round, SlotCharge)> {
    let (parts, charge) = match charge {
        SlotCharge::Backup { source, cost_ns } if window.is_spread() => (
            window.spread_rounds(),
            SlotCharge::Backup {
                source,
                cost_ns: cost_ns.div_ceil(u64::from(window.rounds.max(1))),
            },
        ),
        other => (1, other),
    };
    (0..u64::from(parts)).map(move |j| (round.plus(j), charge))
}

fn add_signed(value: u64, delta: u64, sign: i8) -> u64 {
    if sign > 0 {
        value + delta
    } else {
        value
            .checked_sub(delta)
            .expect("released more than was reserved")
    }
}
