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

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::disk::{PaperBound, RondoBound, RoundBound};
use crate::layout::{DiskRead, Replica, TitleLayout, TitlePlan};
use crate::schedule::Schedule;
use crate::units::{StreamId, TitleId};

/// Disk bandwidth reservation scheme (DESIGN.md, "Reservation schemes").
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

/// The disk time one replica piece of one round costs on one disk.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charge {
    pub disk: u32,
    /// Reserved disk time: the bound's per-request cost of this read.
    pub cost_ns: u64,
}

/// A title's per-round resource needs, computed once from its schedule, its
/// layout and the round bound. Round i is playback round i of the title.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TitleCharges {
    /// Primary read of each round.
    primary: Vec<Charge>,
    /// Backup pieces of round i are `backup[backup_start[i]..backup_start[i + 1]]`,
    /// at most one per disk (one request per disk per round per stream).
    backup_start: Vec<u32>,
    backup: Vec<Charge>,
    /// Server buffer held in each stream round (`rounds + 1` entries).
    buffer_bytes: Vec<u64>,
    /// Bytes sent to the client in each stream round (`rounds + 1` entries;
    /// data read in round i is sent in round i + 1).
    network_bytes: Vec<u64>,
}

/// Why charges could not be built.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ChargesError {
    #[error("round {round}: a backup piece lies on the primary's disk {disk}")]
    BackupOnPrimaryDisk { round: usize, disk: u32 },
    #[error(
        "round {round}: two backup pieces on disk {disk}; a stream issues one request per disk per round"
    )]
    TwoPiecesOnOneDisk { round: usize, disk: u32 },
    #[error("buffer and network sequences need {expected} entries (rounds + 1), got {got}")]
    SequenceLength { expected: usize, got: usize },
    #[error("a title needs at least one round")]
    Empty,
    #[error("the rondo-mode bound needs the title's placed extents")]
    NeedsLayout,
}

impl TitleCharges {
    /// Builds charges from per-round primary charges and backup pieces.
    /// `client_bytes[i]` is what playback round i sends (in stream round i + 1);
    /// `buffer_bytes` has `rounds + 1` entries (see `schedule::Schedule`).
    pub fn new(
        primary: Vec<Charge>,
        backups: Vec<Vec<Charge>>,
        buffer_bytes: Vec<u64>,
        client_bytes: &[u64],
    ) -> Result<TitleCharges, ChargesError> {
        let rounds = primary.len();
        if rounds == 0 {
            return Err(ChargesError::Empty);
        }
        if buffer_bytes.len() != rounds + 1 || client_bytes.len() != rounds {
            return Err(ChargesError::SequenceLength {
                expected: rounds + 1,
                got: buffer_bytes.len().min(client_bytes.len() + 1),
            });
        }
        assert_eq!(backups.len(), rounds, "one backup list per round");
        let mut backup_start = Vec::with_capacity(rounds + 1);
        let mut backup = Vec::new();
        for (round, pieces) in backups.into_iter().enumerate() {
            backup_start.push(backup.len() as u32);
            for (n, piece) in pieces.iter().enumerate() {
                if piece.disk == primary[round].disk {
                    return Err(ChargesError::BackupOnPrimaryDisk {
                        round,
                        disk: piece.disk,
                    });
                }
                if pieces[..n].iter().any(|p| p.disk == piece.disk) {
                    return Err(ChargesError::TwoPiecesOnOneDisk {
                        round,
                        disk: piece.disk,
                    });
                }
            }
            backup.extend(pieces);
        }
        backup_start.push(backup.len() as u32);
        let mut network_bytes = vec![0];
        network_bytes.extend_from_slice(client_bytes);
        Ok(TitleCharges {
            primary,
            backup_start,
            backup,
            buffer_bytes,
            network_bytes,
        })
    }

    /// Charges of a title laid out by `plan` with `schedule` (the same
    /// rounds), where `request_cost_ns(round, read, backup_entry)` is the
    /// round bound's cost of one request (`backup_entry` is `None` for the
    /// primary). Empty rounds issue no request and cost nothing. Backups are
    /// included only when the plan has them.
    pub fn from_plan(
        plan: &TitlePlan,
        schedule: &Schedule,
        mut request_cost_ns: impl FnMut(usize, &DiskRead, Option<usize>) -> u64,
    ) -> Result<TitleCharges, ChargesError> {
        assert_eq!(
            plan.rounds(),
            schedule.rounds(),
            "plan and schedule of one title"
        );
        let mut cost = |round: usize, read: &DiskRead, entry: Option<usize>| Charge {
            disk: read.disk.0,
            cost_ns: if read.extent_count == 0 {
                0
            } else {
                request_cost_ns(round, read, entry)
            },
        };
        let primary = (0..plan.rounds())
            .map(|i| cost(i, &plan.primary(i), None))
            .collect();
        let backups = (0..plan.rounds())
            .map(|i| {
                plan.backups(i)
                    .iter()
                    .enumerate()
                    .map(|(e, read)| cost(i, read, Some(e)))
                    .collect()
            })
            .collect();
        TitleCharges::new(
            primary,
            backups,
            schedule.buffer_bytes.clone(),
            &schedule.client_bytes,
        )
    }

    pub fn rounds(&self) -> usize {
        self.primary.len()
    }

    pub fn primary(&self, round: usize) -> Charge {
        self.primary[round]
    }

    pub fn backup(&self, round: usize) -> &[Charge] {
        &self.backup[self.backup_start[round] as usize..self.backup_start[round + 1] as usize]
    }

    /// Stream rounds the title occupies: its reads plus the final send round.
    pub fn stream_rounds(&self) -> usize {
        self.buffer_bytes.len()
    }
}

/// The round bound admission charges requests with (DESIGN.md, "Paper mode
/// and rondo mode").
#[derive(Clone, Debug)]
pub enum Bound {
    /// Seed 000 §2.3 with its datasheet parameters; ignores where data lies.
    Paper(PaperBound),
    /// A true upper bound of the detailed disk model for the data's location.
    Rondo(RondoBound),
}

impl Bound {
    /// Charged once per disk per round.
    pub fn fixed_ns(&self) -> u64 {
        match self {
            Bound::Paper(b) => b.fixed_ns(),
            Bound::Rondo(b) => b.fixed_ns(),
        }
    }

    /// Whether the bound needs the request's extents (LBNs), i.e. a placed layout.
    pub fn needs_extents(&self) -> bool {
        matches!(self, Bound::Rondo(_))
    }

    /// The charges of a title: `layout` must be the placement of `plan`
    /// when the bound needs extents. The simulator and the server both build
    /// titles' charges here, so they admit with the same numbers.
    pub fn title_charges(
        &self,
        plan: &TitlePlan,
        layout: Option<&TitleLayout>,
        schedule: &Schedule,
    ) -> Result<TitleCharges, ChargesError> {
        if self.needs_extents() && layout.is_none() {
            return Err(ChargesError::NeedsLayout);
        }
        TitleCharges::from_plan(plan, schedule, |round, read, entry| match self {
            Bound::Paper(b) => b.request_ns(read.bytes),
            Bound::Rondo(b) => {
                b.extents_ns(&layout.expect("checked above").request_extents(round, entry))
            }
        })
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
}

impl ReservationConfig {
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
        }
    }
}

/// Why a stream was not admitted.
#[derive(Clone, Debug, PartialEq, Eq, Error, Serialize, Deserialize)]
pub enum Rejection {
    #[error(
        "no start round within {lookahead_rounds} rounds: disk {disk} is full in round {round}"
    )]
    DiskTime {
        lookahead_rounds: u64,
        disk: u32,
        round: u64,
    },
    #[error(
        "no start round within {lookahead_rounds} rounds: server buffer is full in round {round}"
    )]
    Buffer { lookahead_rounds: u64, round: u64 },
    #[error("no start round within {lookahead_rounds} rounds: network is full in round {round}")]
    Network { lookahead_rounds: u64, round: u64 },
    #[error("round {round} of the title has no replica on a working disk")]
    DataUnavailable { round: u64 },
    #[error("title is {rounds} stream rounds long; the reservation horizon is {horizon_rounds}")]
    TooLong { rounds: u64, horizon_rounds: u64 },
    #[error("unknown title {0:?}")]
    UnknownTitle(TitleId),
    #[error("playback round {first_playback_round} is past the title's end ({rounds} rounds)")]
    PastEnd {
        first_playback_round: usize,
        rounds: usize,
    },
}

/// One read a disk performs in a round, as planned from the reservations.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedRead {
    pub stream: StreamId,
    pub title: TitleId,
    /// The title's playback round whose data is read.
    pub playback_round: u32,
    pub disk: u32,
    pub replica: Replica,
    /// For a backup read, which entry of the round's backup list
    /// (`TitlePlan::backups`); 0 for the primary.
    pub backup_entry: u16,
    /// The disk time reserved for this read (its bound cost).
    pub cost_ns: u64,
}

/// One disk's reserved time in one round.
#[derive(Clone, Debug, Default)]
struct DiskSlot {
    /// Reads that will happen: primaries, and reads rerouted to this disk.
    primary_ns: u64,
    /// Mirroring: all backup time on this disk.
    backup_sum_ns: u64,
    /// Minimum: backup time on this disk per source (primary) disk, sorted by
    /// source; its maximum is cached in `backup_max_ns`.
    backup_by_source: Vec<(u32, u64)>,
    backup_max_ns: u64,
}

impl DiskSlot {
    fn reserved_ns(&self, scheme: Scheme) -> u64 {
        self.primary_ns
            + match scheme {
                Scheme::Mirroring => self.backup_sum_ns,
                Scheme::Minimum => self.backup_max_ns,
                Scheme::None | Scheme::Unreserved | Scheme::Dynamic => 0,
            }
    }

    fn backup_from(&self, source: u32) -> u64 {
        match self.backup_by_source.binary_search_by_key(&source, |e| e.0) {
            Ok(i) => self.backup_by_source[i].1,
            Err(_) => 0,
        }
    }

    fn add_backup(&mut self, source: u32, cost_ns: u64) {
        self.backup_sum_ns += cost_ns;
        let total = match self.backup_by_source.binary_search_by_key(&source, |e| e.0) {
            Ok(i) => {
                self.backup_by_source[i].1 += cost_ns;
                self.backup_by_source[i].1
            }
            Err(i) => {
                self.backup_by_source.insert(i, (source, cost_ns));
                cost_ns
            }
        };
        self.backup_max_ns = self.backup_max_ns.max(total);
    }

    fn remove_backup(&mut self, source: u32, cost_ns: u64) {
        self.backup_sum_ns -= cost_ns;
        let i = self
            .backup_by_source
            .binary_search_by_key(&source, |e| e.0)
            .expect("removing a backup reservation that was never made");
        let entry = &mut self.backup_by_source[i].1;
        *entry -= cost_ns;
        let was_max = *entry + cost_ns == self.backup_max_ns;
        if *entry == 0 {
            self.backup_by_source.remove(i);
        }
        if was_max {
            self.backup_max_ns = self.backup_by_source.iter().map(|e| e.1).max().unwrap_or(0);
        }
    }

    fn clear(&mut self) {
        self.primary_ns = 0;
        self.backup_sum_ns = 0;
        self.backup_max_ns = 0;
        self.backup_by_source.clear();
        self.backup_by_source.shrink_to(4);
    }
}

/// How one admitted stream reads each round, kept so its reservations can be
/// released and its rounds planned.
#[derive(Clone, Debug)]
struct StreamRecord {
    title: TitleId,
    /// Absolute round of the stream's first read.
    start_round: u64,
    /// The title's playback round read first (0 unless the stream started
    /// mid-title, e.g. a player's range request).
    first_playback_round: usize,
    /// The playback round after the stream's last read: the title's end, or
    /// the end of a range request's bytes.
    end_playback_round: usize,
    /// Per playback round from `first_playback_round` on, the replica the
    /// stream was admitted to read.
    choice: Vec<RoundChoice>,
}

impl StreamRecord {
    /// The title's playback round (and schedule index) the stream handles in `round`.
    fn index(&self, round: u64) -> usize {
        self.first_playback_round + (round - self.start_round) as usize
    }

    /// The first round after the stream's last.
    fn end_round(&self, charges: &TitleCharges) -> u64 {
        self.start_round
            + (stream_end(charges, self.end_playback_round) - self.first_playback_round) as u64
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum RoundChoice {
    /// Primary read; backups reserved per the scheme.
    Primary,
    /// Dynamic balancing chose the backup (all its pieces).
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

/// Admitted stream: where it starts.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Admission {
    pub stream: StreamId,
    /// Absolute round of the stream's first disk read.
    pub start_round: u64,
}

/// The reservation tables of one disk array.
#[derive(Clone, Debug)]
pub struct Reservations {
    config: ReservationConfig,
    titles: BTreeMap<TitleId, Arc<TitleCharges>>,
    /// `slots[disk * horizon + round % horizon]`.
    slots: Vec<DiskSlot>,
    buffer_bytes: Vec<u64>,
    network_bytes: Vec<u64>,
    streams: BTreeMap<StreamId, StreamRecord>,
    next_stream: u64,
    /// Every round before this one is in the past and its slots are cleared.
    current_round: u64,
    failed: Vec<bool>,
}

impl Reservations {
    pub fn new(config: ReservationConfig) -> Reservations {
        assert!(config.disks >= 1, "an array needs a disk");
        assert!(config.horizon_rounds >= 2, "horizon too short");
        let slots =
            vec![DiskSlot::default(); (config.disks as u64 * config.horizon_rounds) as usize];
        Reservations {
            buffer_bytes: vec![0; config.horizon_rounds as usize],
            network_bytes: vec![0; config.horizon_rounds as usize],
            failed: vec![false; config.disks as usize],
            slots,
            titles: BTreeMap::new(),
            streams: BTreeMap::new(),
            next_stream: 0,
            current_round: 0,
            config,
        }
    }

    pub fn config(&self) -> &ReservationConfig {
        &self.config
    }

    pub fn current_round(&self) -> u64 {
        self.current_round
    }

    /// Registers a stored title's charges.
    pub fn add_title(&mut self, title: TitleId, charges: TitleCharges) {
        for r in 0..charges.rounds() {
            assert!(charges.primary(r).disk < self.config.disks);
            assert!(charges.backup(r).iter().all(|c| c.disk < self.config.disks));
        }
        self.titles.insert(title, Arc::new(charges));
    }

    pub fn title(&self, title: TitleId) -> Option<&TitleCharges> {
        self.titles.get(&title).map(|c| c.as_ref())
    }

    /// Removes a title; refused (returns false) while a stream plays it.
    pub fn remove_title(&mut self, title: TitleId) -> bool {
        if self.streams.values().any(|s| s.title == title) {
            return false;
        }
        self.titles.remove(&title).is_some()
    }

    pub fn active_streams(&self) -> usize {
        self.streams.len()
    }

    pub fn is_failed(&self, disk: u32) -> bool {
        self.failed[disk as usize]
    }

    /// Marks a disk failed from the current round on: reads of its data go to
    /// the backups. Reservations made earlier stay as they are: under
    /// `minimum` and `mirroring` they already cover the rerouted reads.
    /// Returns the streams that can no longer be served because some round
    /// they still need has no replica on a working disk (a second failure, or
    /// any failure under `none`); the caller stops them with a clear error and
    /// releases them.
    pub fn fail_disk(&mut self, disk: u32) -> Vec<StreamId> {
        self.failed[disk as usize] = true;
        self.streams_losing_data()
    }

    /// Streams with a remaining round whose data has no working replica.
    pub fn streams_losing_data(&self) -> Vec<StreamId> {
        let working = |c: &Charge| !self.failed[c.disk as usize];
        self.streams
            .iter()
            .filter(|(_, record)| {
                let charges = &self.titles[&record.title];
                let first = record.index(self.current_round.max(record.start_round));
                (first..record.end_playback_round).any(|i| {
                    let backup = charges.backup(i);
                    !working(&charges.primary(i))
                        && (backup.is_empty() || !backup.iter().all(working))
                })
            })
            .map(|(&id, _)| id)
            .collect()
    }

    /// The write credits of `round`, per disk: the time each disk has left
    /// after admitted streams' reservations and `used_ns[disk]` of other
    /// writes (e.g. a rebuild's copies). A write may use on each disk at most
    /// that disk's credit; a failed disk's whole round is free
    /// ([`Reservations::unreserved_ns`]).
    pub fn write_credits_ns(&self, round: u64, used_ns: &[u64]) -> Vec<u64> {
        (0..self.config.disks)
            .map(|d| {
                let used = used_ns.get(d as usize).copied().unwrap_or(0);
                self.unreserved_ns(d, round).saturating_sub(used)
            })
            .collect()
    }

    /// Disk time on `disk` in `round` that no admitted stream has reserved:
    /// what writes (ingest, rebuild) may use. A failed disk serves no reads,
    /// so all of its round is free for rebuild writes.
    pub fn unreserved_ns(&self, disk: u32, round: u64) -> u64 {
        let budget = self
            .config
            .round_duration_ns
            .saturating_sub(self.config.round_fixed_ns);
        if self.failed[disk as usize] {
            return budget;
        }
        budget.saturating_sub(self.reserved_ns(disk, round))
    }

    /// Marks a disk serving again (after rebuild).
    pub fn restore_disk(&mut self, disk: u32) {
        self.failed[disk as usize] = false;
    }

    fn slot_index(&self, disk: u32, round: u64) -> usize {
        (disk as u64 * self.config.horizon_rounds + round % self.config.horizon_rounds) as usize
    }

    fn slot(&self, disk: u32, round: u64) -> &DiskSlot {
        &self.slots[self.slot_index(disk, round)]
    }

    /// Disk time reserved on `disk` in `round`, without the fixed term.
    pub fn reserved_ns(&self, disk: u32, round: u64) -> u64 {
        self.check_window(round);
        self.slot(disk, round).reserved_ns(self.config.scheme)
    }

    /// The part of `reserved_ns` that is for primary (planned) reads.
    pub fn reserved_primary_ns(&self, disk: u32, round: u64) -> u64 {
        self.check_window(round);
        self.slot(disk, round).primary_ns
    }

    /// Backup time on `disk` in `round` for primaries on `source`.
    pub fn reserved_backup_from_ns(&self, disk: u32, round: u64, source: u32) -> u64 {
        self.check_window(round);
        self.slot(disk, round).backup_from(source)
    }

    /// Server buffer reserved in `round`.
    pub fn reserved_buffer_bytes(&self, round: u64) -> u64 {
        self.check_window(round);
        self.buffer_bytes[(round % self.config.horizon_rounds) as usize]
    }

    fn check_window(&self, round: u64) {
        assert!(
            round >= self.current_round && round < self.current_round + self.config.horizon_rounds,
            "round {round} outside the reservation window [{}, {})",
            self.current_round,
            self.current_round + self.config.horizon_rounds
        );
    }

    /// Moves time forward to `round`: past rounds' slots are cleared and
    /// streams that ended are forgotten.
    pub fn advance_to(&mut self, round: u64) {
        assert!(round >= self.current_round, "time runs forward");
        let horizon = self.config.horizon_rounds;
        let first_cleared = self.current_round.max(round.saturating_sub(horizon));
        for past in first_cleared..round {
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
        self.streams
            .retain(|_, s| s.end_round(&titles[&s.title]) > round);
    }

    /// Tries start rounds `earliest_round`, `earliest_round + 1`, … up to
    /// `lookahead_rounds` of them; admits the stream at the first that fits
    /// every round of the title, or rejects it (seed 000 §6.2).
    pub fn try_admit(
        &mut self,
        title: TitleId,
        earliest_round: u64,
        lookahead_rounds: u64,
    ) -> Result<Admission, Rejection> {
        self.try_admit_from(title, 0, earliest_round, lookahead_rounds)
    }

    /// Like [`Reservations::try_admit`] for a stream that begins at the
    /// title's playback round `first_playback_round` (a seek or a range
    /// request): only the rounds from there on are reserved. Its first
    /// round's buffer and network reservation is the title's for that round,
    /// which also counts the previous round's data: a slight overcount, never
    /// an undercount.
    pub fn try_admit_from(
        &mut self,
        title: TitleId,
        first_playback_round: usize,
        earliest_round: u64,
        lookahead_rounds: u64,
    ) -> Result<Admission, Rejection> {
        let rounds = self
            .titles
            .get(&title)
            .ok_or(Rejection::UnknownTitle(title))?
            .rounds();
        self.try_admit_range(
            title,
            first_playback_round..rounds,
            earliest_round,
            lookahead_rounds,
        )
    }

    /// Like [`Reservations::try_admit_from`] for a stream that reads only
    /// the title's playback rounds `playback_rounds` (a range request for
    /// part of a title): nothing is reserved past the range's last round.
    /// An `end` past the title's end is cut to it.
    pub fn try_admit_range(
        &mut self,
        title: TitleId,
        playback_rounds: std::ops::Range<usize>,
        earliest_round: u64,
        lookahead_rounds: u64,
    ) -> Result<Admission, Rejection> {
        let charges = self
            .titles
            .get(&title)
            .ok_or(Rejection::UnknownTitle(title))?;
        let first_playback_round = playback_rounds.start;
        let end_playback_round = playback_rounds.end.min(charges.rounds());
        if first_playback_round >= end_playback_round {
            return Err(Rejection::PastEnd {
                first_playback_round,
                rounds: charges.rounds(),
            });
        }
        let stream_rounds = (stream_end(charges, end_playback_round) - first_playback_round) as u64;
        let earliest_round = earliest_round.max(self.current_round);
        let lookahead_rounds = lookahead_rounds.max(1);
        let window_end = self.current_round + self.config.horizon_rounds;
        if earliest_round + stream_rounds > window_end {
            return Err(Rejection::TooLong {
                rounds: stream_rounds,
                horizon_rounds: self.config.horizon_rounds,
            });
        }
        let mut last = Rejection::DiskTime {
            lookahead_rounds,
            disk: 0,
            round: earliest_round,
        };
        for start in earliest_round..earliest_round + lookahead_rounds {
            if start + stream_rounds > window_end {
                break;
            }
            let rounds = first_playback_round..end_playback_round;
            match self.fits(charges, rounds, start, lookahead_rounds) {
                Ok(choice) => {
                    let stream = StreamId(self.next_stream);
                    self.next_stream += 1;
                    let record = StreamRecord {
                        title,
                        start_round: start,
                        first_playback_round,
                        end_playback_round,
                        choice,
                    };
                    self.apply(&record, 1);
                    self.streams.insert(stream, record);
                    return Ok(Admission {
                        stream,
                        start_round: start,
                    });
                }
                Err(rejection @ Rejection::DataUnavailable { .. }) => return Err(rejection),
                Err(rejection) => last = rejection,
            }
        }
        Err(last)
    }

    /// Checks whether the title fits starting at `start`; returns the replica
    /// choice per round. Pure: changes nothing.
    fn fits(
        &self,
        charges: &TitleCharges,
        playback_rounds: std::ops::Range<usize>,
        start: u64,
        lookahead_rounds: u64,
    ) -> Result<Vec<RoundChoice>, Rejection> {
        let (first, end) = (playback_rounds.start, playback_rounds.end);
        let cfg = &self.config;
        let budget_ns = cfg.round_duration_ns.saturating_sub(cfg.round_fixed_ns);
        let horizon = cfg.horizon_rounds;
        let disk_full = |disk: u32, round: u64| Rejection::DiskTime {
            lookahead_rounds,
            disk,
            round,
        };
        for i in first..stream_end(charges, end) {
            let round = start + (i - first) as u64;
            let ring = (round % horizon) as usize;
            if self.buffer_bytes[ring] + charges.buffer_bytes[i] > cfg.buffer_capacity_bytes {
                return Err(Rejection::Buffer {
                    lookahead_rounds,
                    round,
                });
            }
            if let Some(cap) = cfg.network_capacity_bytes_per_round
                && self.network_bytes[ring] + charges.network_bytes[i] > cap
            {
                return Err(Rejection::Network {
                    lookahead_rounds,
                    round,
                });
            }
        }
        let mut choice = Vec::with_capacity(end - first);
        for i in first..end {
            let round = start + (i - first) as u64;
            let primary = charges.primary(i);
            let backup = charges.backup(i);
            let round_choice = self.choose(primary, backup, round, i as u64)?;
            match round_choice {
                RoundChoice::Primary => {
                    let slot = self.slot(primary.disk, round);
                    if slot.reserved_ns(cfg.scheme) + primary.cost_ns > budget_ns {
                        return Err(disk_full(primary.disk, round));
                    }
                    if matches!(cfg.scheme, Scheme::Mirroring | Scheme::Minimum) {
                        for piece in backup {
                            let slot = self.slot(piece.disk, round);
                            let extra = match cfg.scheme {
                                Scheme::Mirroring => piece.cost_ns,
                                _ => (slot.backup_from(primary.disk) + piece.cost_ns)
                                    .saturating_sub(slot.backup_max_ns),
                            };
                            if slot.reserved_ns(cfg.scheme) + extra > budget_ns {
                                return Err(disk_full(piece.disk, round));
                            }
                        }
                    }
                }
                RoundChoice::Backup | RoundChoice::Rerouted => {
                    for piece in backup {
                        let slot = self.slot(piece.disk, round);
                        if slot.reserved_ns(cfg.scheme) + piece.cost_ns > budget_ns {
                            return Err(disk_full(piece.disk, round));
                        }
                    }
                }
            }
            choice.push(round_choice);
        }
        Ok(choice)
    }

    /// Which replica a new stream reads in one round.
    fn choose(
        &self,
        primary: Charge,
        backup: &[Charge],
        round: u64,
        playback_round: u64,
    ) -> Result<RoundChoice, Rejection> {
        let backup_ok = !backup.is_empty() && backup.iter().all(|p| !self.failed[p.disk as usize]);
        if self.failed[primary.disk as usize] {
            return if backup_ok && self.config.scheme.stores_backup() {
                Ok(RoundChoice::Rerouted)
            } else {
                Err(Rejection::DataUnavailable {
                    round: playback_round,
                })
            };
        }
        if self.config.scheme == Scheme::Dynamic && backup_ok {
            // Seed 000 §5: the replica on the disk expected to be least
            // loaded, judged by the reservations made so far. Ties keep the
            // primary. A declustered backup is judged by its busiest piece.
            let scheme = self.config.scheme;
            let primary_load = self.slot(primary.disk, round).reserved_ns(scheme) + primary.cost_ns;
            let backup_load = backup
                .iter()
                .map(|p| self.slot(p.disk, round).reserved_ns(scheme) + p.cost_ns)
                .max()
                .unwrap_or(u64::MAX);
            if backup_load < primary_load {
                return Ok(RoundChoice::Backup);
            }
        }
        Ok(RoundChoice::Primary)
    }

    /// Adds (`sign` = 1) or removes (`sign` = -1) a stream's reservations for
    /// rounds at or after the current round.
    fn apply(&mut self, record: &StreamRecord, sign: i8) {
        let charges = Arc::clone(&self.titles[&record.title]);
        let scheme = self.config.scheme;
        let horizon = self.config.horizon_rounds;
        let first = self.current_round.max(record.start_round);
        for round in first..record.end_round(&charges) {
            let i = record.index(round);
            let ring = (round % horizon) as usize;
            self.buffer_bytes[ring] =
                add_signed(self.buffer_bytes[ring], charges.buffer_bytes[i], sign);
            self.network_bytes[ring] =
                add_signed(self.network_bytes[ring], charges.network_bytes[i], sign);
            if i >= record.end_playback_round {
                continue;
            }
            let primary = charges.primary(i);
            match record.choice[i - record.first_playback_round] {
                RoundChoice::Primary => {
                    let idx = self.slot_index(primary.disk, round);
                    let slot = &mut self.slots[idx];
                    slot.primary_ns = add_signed(slot.primary_ns, primary.cost_ns, sign);
                    if matches!(scheme, Scheme::Mirroring | Scheme::Minimum) {
                        for piece in charges.backup(i) {
                            let idx = self.slot_index(piece.disk, round);
                            if sign > 0 {
                                self.slots[idx].add_backup(primary.disk, piece.cost_ns);
                            } else {
                                self.slots[idx].remove_backup(primary.disk, piece.cost_ns);
                            }
                        }
                    }
                }
                RoundChoice::Backup | RoundChoice::Rerouted => {
                    for piece in charges.backup(i) {
                        let idx = self.slot_index(piece.disk, round);
                        let slot = &mut self.slots[idx];
                        slot.primary_ns = add_signed(slot.primary_ns, piece.cost_ns, sign);
                    }
                }
            }
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

    /// The reads each disk performs in `round` (the current round or later),
    /// per disk in stream order. A read whose disk has failed is replaced by
    /// the other replica's pieces; a read with no working replica is returned
    /// in the second list (data lost).
    pub fn plan_round(&self, round: u64) -> (Vec<Vec<PlannedRead>>, Vec<PlannedRead>) {
        let mut per_disk: Vec<Vec<PlannedRead>> = vec![Vec::new(); self.config.disks as usize];
        let mut lost = Vec::new();
        for (&stream, record) in &self.streams {
            if round < record.start_round {
                continue;
            }
            let i = record.index(round);
            let charges = &self.titles[&record.title];
            if i >= record.end_playback_round {
                continue;
            }
            let read =
                |disk: u32, replica: Replica, backup_entry: usize, cost_ns: u64| PlannedRead {
                    stream,
                    title: record.title,
                    playback_round: i as u32,
                    disk,
                    replica,
                    backup_entry: backup_entry as u16,
                    cost_ns,
                };
            let primary = charges.primary(i);
            let backup = charges.backup(i);
            let backup_ok =
                !backup.is_empty() && backup.iter().all(|p| !self.failed[p.disk as usize]);
            let primary_ok = !self.failed[primary.disk as usize];
            let wants_backup =
                record.choice[i - record.first_playback_round] != RoundChoice::Primary;
            if backup_ok && (wants_backup || !primary_ok) {
                for (n, piece) in backup.iter().enumerate() {
                    per_disk[piece.disk as usize].push(read(
                        piece.disk,
                        Replica::Backup,
                        n,
                        piece.cost_ns,
                    ));
                }
            } else if primary_ok {
                per_disk[primary.disk as usize].push(read(
                    primary.disk,
                    Replica::Primary,
                    0,
                    primary.cost_ns,
                ));
            } else {
                lost.push(read(primary.disk, Replica::Primary, 0, primary.cost_ns));
            }
        }
        (per_disk, lost)
    }

    /// Recomputes every table from the stream records and checks it equals the
    /// incremental one; for tests and the simulator's invariant checks.
    pub fn check_invariants(&self) {
        let mut fresh = Reservations::new(self.config.clone());
        fresh.titles = self.titles.clone();
        fresh.current_round = self.current_round;
        fresh.failed = self.failed.clone();
        for record in self.streams.values() {
            fresh.apply(record, 1);
        }
        let horizon = self.config.horizon_rounds;
        for round in self.current_round..self.current_round + horizon {
            for disk in 0..self.config.disks {
                let (a, b) = (self.slot(disk, round), fresh.slot(disk, round));
                assert_eq!(
                    a.primary_ns, b.primary_ns,
                    "primary disk {disk} round {round}"
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
                assert!(
                    self.config.round_fixed_ns + a.reserved_ns(self.config.scheme)
                        <= self.config.round_duration_ns,
                    "disk {disk} over-reserved in round {round}"
                );
            }
            let ring = (round % horizon) as usize;
            assert_eq!(self.buffer_bytes[ring], fresh.buffer_bytes[ring]);
            assert!(self.buffer_bytes[ring] <= self.config.buffer_capacity_bytes);
        }
    }
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

/// Which replica serves a stream-round after its read of `failed` returned
/// an I/O error or data failing its checksum: the other one, when every
/// disk holding it serves (`serving`); `None` when it does not (or there is
/// no backup): the round's data is lost for that stream. Used by the server
/// when a planned read fails.
pub fn replica_after_error(
    failed: Replica,
    primary_disk: u32,
    backup_disks: &[u32],
    serving: impl Fn(u32) -> bool,
) -> Option<Replica> {
    match failed {
        Replica::Primary => (!backup_disks.is_empty() && backup_disks.iter().all(|&d| serving(d)))
            .then_some(Replica::Backup),
        Replica::Backup => serving(primary_disk).then_some(Replica::Primary),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;

    fn config(disks: u32, scheme: Scheme) -> ReservationConfig {
        ReservationConfig {
            disks,
            scheme,
            round_duration_ns: 1000 * MS,
            round_fixed_ns: 100 * MS,
            buffer_capacity_bytes: u64::MAX,
            network_capacity_bytes_per_round: None,
            horizon_rounds: 64,
        }
    }

    /// A title striped round-robin from `start` with deterministic backups
    /// (Figure 2) and per-round costs `costs_ms`; backups cost the same.
    fn striped(disks: u32, start: u32, costs_ms: &[u64]) -> TitleCharges {
        let mut on_disk = vec![0u32; disks as usize];
        let mut primary = Vec::new();
        let mut backups = Vec::new();
        for (i, &c) in costs_ms.iter().enumerate() {
            let k = (start + i as u32) % disks;
            let j = on_disk[k as usize];
            on_disk[k as usize] += 1;
            primary.push(Charge {
                disk: k,
                cost_ns: c * MS,
            });
            backups.push(if disks == 1 {
                vec![]
            } else {
                vec![Charge {
                    disk: (k + 1 + j % (disks - 1)) % disks,
                    cost_ns: c * MS,
                }]
            });
        }
        let n = costs_ms.len();
        TitleCharges::new(primary, backups, vec![1; n + 1], &vec![1; n]).unwrap()
    }

    #[test]
    fn none_admits_until_the_disk_budget_is_spent() {
        let mut r = Reservations::new(config(1, Scheme::None));
        r.add_title(TitleId(0), striped(1, 0, &[300]));
        // Budget 1000 - 100 fixed = 900 ms: three 300 ms reads fit, a fourth does not.
        for _ in 0..3 {
            assert_eq!(r.try_admit(TitleId(0), 0, 1).unwrap().start_round, 0);
        }
        assert_eq!(
            r.try_admit(TitleId(0), 0, 1),
            Err(Rejection::DiskTime {
                lookahead_rounds: 1,
                disk: 0,
                round: 0
            })
        );
        // With a look-ahead of two rounds it starts one round later.
        assert_eq!(r.try_admit(TitleId(0), 0, 2).unwrap().start_round, 1);
        r.check_invariants();
    }

    #[test]
    fn minimum_reserves_the_largest_backup_per_source() {
        // Three disks; two one-round titles with primaries on disks 0 and 1,
        // both backed up on disk 2.
        let mut r = Reservations::new(config(3, Scheme::Minimum));
        let one = |p: u32, b: u32, ms: u64| {
            TitleCharges::new(
                vec![Charge {
                    disk: p,
                    cost_ns: ms * MS,
                }],
                vec![vec![Charge {
                    disk: b,
                    cost_ns: ms * MS,
                }]],
                vec![0, 0],
                &[0],
            )
            .unwrap()
        };
        r.add_title(TitleId(0), one(0, 2, 200));
        r.add_title(TitleId(1), one(1, 2, 300));
        r.try_admit(TitleId(0), 0, 1).unwrap();
        r.try_admit(TitleId(1), 0, 1).unwrap();
        // Disk 2 holds backup time 200 (from disk 0) and 300 (from disk 1): only the max is reserved.
        assert_eq!(r.reserved_ns(2, 0), 300 * MS);
        assert_eq!(r.reserved_backup_from_ns(2, 0, 0), 200 * MS);
        // Mirroring would reserve the sum.
        let mut m = Reservations::new(config(3, Scheme::Mirroring));
        m.add_title(TitleId(0), one(0, 2, 200));
        m.add_title(TitleId(1), one(1, 2, 300));
        m.try_admit(TitleId(0), 0, 1).unwrap();
        m.try_admit(TitleId(1), 0, 1).unwrap();
        assert_eq!(m.reserved_ns(2, 0), 500 * MS);
        // Unreserved reserves no backup time at all.
        let mut u = Reservations::new(config(3, Scheme::Unreserved));
        u.add_title(TitleId(0), one(0, 2, 200));
        u.try_admit(TitleId(0), 0, 1).unwrap();
        assert_eq!(u.reserved_ns(2, 0), 0);
    }

    #[test]
    fn release_returns_the_tables_to_empty() {
        let mut r = Reservations::new(config(4, Scheme::Minimum));
        r.add_title(TitleId(0), striped(4, 1, &[100, 250, 50, 400, 120]));
        let a = r.try_admit(TitleId(0), 0, 1).unwrap();
        let b = r.try_admit(TitleId(0), 2, 1).unwrap();
        assert!(r.release(a.stream));
        assert!(r.release(b.stream));
        assert!(!r.release(b.stream));
        for round in 0..10 {
            for disk in 0..4 {
                assert_eq!(r.reserved_ns(disk, round), 0);
            }
        }
        r.check_invariants();
    }

    #[test]
    fn dynamic_reads_the_less_loaded_replica() {
        let mut r = Reservations::new(config(2, Scheme::Dynamic));
        let one = |p: u32, b: u32| {
            TitleCharges::new(
                vec![Charge {
                    disk: p,
                    cost_ns: 100 * MS,
                }],
                vec![vec![Charge {
                    disk: b,
                    cost_ns: 100 * MS,
                }]],
                vec![0, 0],
                &[0],
            )
            .unwrap()
        };
        r.add_title(TitleId(0), one(0, 1));
        r.try_admit(TitleId(0), 0, 1).unwrap();
        r.try_admit(TitleId(0), 0, 1).unwrap();
        // The first read disk 0 (tie keeps the primary), the second disk 1.
        assert_eq!(r.reserved_ns(0, 0), 100 * MS);
        assert_eq!(r.reserved_ns(1, 0), 100 * MS);
        let (plan, lost) = r.plan_round(0);
        assert!(lost.is_empty());
        assert_eq!(plan[0].len(), 1);
        assert_eq!(plan[1].len(), 1);
        assert_eq!(plan[1][0].replica, Replica::Backup);
    }

    #[test]
    fn failed_disk_reads_go_to_backups_and_new_streams_are_rerouted() {
        let mut r = Reservations::new(config(4, Scheme::Minimum));
        r.add_title(TitleId(0), striped(4, 0, &[100; 8]));
        let a = r.try_admit(TitleId(0), 0, 1).unwrap();
        assert!(r.fail_disk(0).is_empty(), "one failure loses nothing");
        assert_eq!(
            r.unreserved_ns(0, 0),
            900 * MS,
            "a failed disk is free for rebuild"
        );
        assert_eq!(r.unreserved_ns(1, 0), 900 * MS - r.reserved_ns(1, 0));
        // The write credits are each disk's unreserved time less other writes.
        let unreserved: Vec<u64> = (0..4).map(|d| r.unreserved_ns(d, 0)).collect();
        assert_eq!(r.write_credits_ns(0, &[]), unreserved);
        let used = [5 * MS, unreserved[1], unreserved[2] + 1, 0];
        assert_eq!(
            r.write_credits_ns(0, &used),
            vec![unreserved[0] - 5 * MS, 0, 0, unreserved[3]]
        );
        let (plan, lost) = r.plan_round(0);
        assert!(lost.is_empty());
        assert!(plan[0].is_empty());
        assert_eq!(plan[1][0].stream, a.stream);
        assert_eq!(plan[1][0].replica, Replica::Backup);
        // A new stream on the degraded array is charged for the rerouted reads.
        let b = r.try_admit(TitleId(0), 1, 1).unwrap();
        assert_eq!(r.reserved_primary_ns(0, 1), 0);
        r.check_invariants();
        // A second failure that removes both replicas loses data, and says which streams.
        // Both streams read title round 0, primary on disk 0, backup on disk 1.
        let stopped = r.fail_disk(1);
        assert_eq!(stopped, vec![a.stream, b.stream]);
        let (_, lost) = r.plan_round(1);
        assert_eq!(lost.len(), 1, "stream b reads title round 0 in round 1");
        assert!(matches!(
            r.try_admit(TitleId(0), 2, 1),
            Err(Rejection::DataUnavailable { .. })
        ));
    }

    #[test]
    fn advance_clears_past_rounds_and_forgets_ended_streams() {
        let mut r = Reservations::new(config(2, Scheme::Mirroring));
        r.add_title(TitleId(0), striped(2, 0, &[100, 100, 100]));
        r.try_admit(TitleId(0), 0, 1).unwrap();
        assert_eq!(r.active_streams(), 1);
        r.advance_to(3);
        assert_eq!(r.active_streams(), 1); // still sending its last round
        r.advance_to(4);
        assert_eq!(r.active_streams(), 0);
        // The ring wraps: round 64 + 0 reuses slot 0, which must be clear.
        r.advance_to(64);
        assert_eq!(r.reserved_ns(0, 64), 0);
        r.check_invariants();
    }

    #[test]
    fn a_stream_can_start_mid_title() {
        let mut r = Reservations::new(config(4, Scheme::Minimum));
        r.add_title(TitleId(0), striped(4, 0, &[100, 200, 300, 400, 500]));
        let a = r.try_admit_from(TitleId(0), 3, 0, 1).unwrap();
        // Stream round 0 reads playback round 3 (disk 3), round 1 reads round 4 (disk 0).
        assert_eq!(r.reserved_primary_ns(3, 0), 400 * MS);
        assert_eq!(r.reserved_primary_ns(0, 1), 500 * MS);
        assert_eq!(r.reserved_primary_ns(0, 0), 0);
        let (plan, _) = r.plan_round(1);
        assert_eq!(plan[0][0].playback_round, 4);
        r.check_invariants();
        r.advance_to(3);
        assert_eq!(
            r.active_streams(),
            0,
            "two reads and a send round, then it ends"
        );
        assert!(!r.release(a.stream));
        assert!(matches!(
            r.try_admit_from(TitleId(0), 5, 3, 1),
            Err(Rejection::PastEnd { .. })
        ));
    }

    #[test]
    fn buffer_capacity_limits_admission() {
        let mut cfg = config(2, Scheme::None);
        cfg.buffer_capacity_bytes = 10;
        let mut r = Reservations::new(cfg);
        let charges = TitleCharges::new(
            vec![Charge {
                disk: 0,
                cost_ns: 1,
            }],
            vec![vec![]],
            vec![6, 6],
            &[1],
        )
        .unwrap();
        r.add_title(TitleId(0), charges);
        r.try_admit(TitleId(0), 0, 1).unwrap();
        assert!(matches!(
            r.try_admit(TitleId(0), 0, 1),
            Err(Rejection::Buffer { .. })
        ));
        assert_eq!(r.try_admit(TitleId(0), 0, 3).unwrap().start_round, 2);
    }

    #[test]
    fn a_range_reserves_only_its_rounds() {
        let mut r = Reservations::new(config(4, Scheme::Minimum));
        r.add_title(TitleId(0), striped(4, 0, &[100, 200, 300, 400, 500]));
        // Playback rounds 1 and 2 only (disks 1, 2), from round 0.
        let a = r.try_admit_range(TitleId(0), 1..3, 0, 1).unwrap();
        assert_eq!(a.start_round, 0);
        assert_eq!(r.reserved_primary_ns(1, 0), 200 * MS);
        assert_eq!(r.reserved_primary_ns(2, 1), 300 * MS);
        assert_eq!(r.reserved_primary_ns(3, 2), 0, "round 3 is past the range");
        assert_eq!(r.reserved_primary_ns(0, 3), 0);
        let (plan, _) = r.plan_round(2);
        assert!(plan.iter().all(Vec::is_empty), "no read after the range");
        // Its buffer is held one round past its last read (the send round).
        assert!(r.reserved_buffer_bytes(2) > 0);
        assert_eq!(r.reserved_buffer_bytes(3), 0);
        r.check_invariants();
        r.advance_to(3);
        assert_eq!(r.active_streams(), 0, "two reads and a send round");
        // The whole title from mid-title is the same as an open range.
        let b = r.try_admit_from(TitleId(0), 3, 3, 1).unwrap();
        let from = (
            r.reserved_ns(3, 3),
            r.reserved_ns(0, 4),
            r.reserved_buffer_bytes(5),
        );
        assert_eq!(from.0, 400 * MS);
        r.release(b.stream);
        let c = r.try_admit_range(TitleId(0), 3..99, 3, 1).unwrap();
        let range = (
            r.reserved_ns(3, 3),
            r.reserved_ns(0, 4),
            r.reserved_buffer_bytes(5),
        );
        assert_eq!(from, range);
        r.release(c.stream);
        assert_eq!(r.reserved_ns(3, 3), 0);
        r.check_invariants();
        assert!(matches!(
            r.try_admit_range(TitleId(0), 5..9, 3, 1),
            Err(Rejection::PastEnd { .. })
        ));
        assert!(matches!(
            r.try_admit_range(TitleId(0), 2..2, 3, 1),
            Err(Rejection::PastEnd { .. })
        ));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Admit {
            title: usize,
            lookahead: u64,
            first: usize,
            /// Playback rounds read; past the title's end means to its end.
            length: usize,
        },
        Release {
            nth: usize,
        },
        Advance {
            rounds: u64,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0usize..4, 1u64..4, 0usize..4, 1usize..24).prop_map(|(title, lookahead, first, length)| Op::Admit { title, lookahead, first, length }),
            1 => (0usize..64).prop_map(|nth| Op::Release { nth }),
            2 => (1u64..5).prop_map(|rounds| Op::Advance { rounds }),
        ]
    }

    proptest! {
        /// Whatever the order of admissions, releases and advances, the
        /// incremental tables equal tables rebuilt from scratch, and under
        /// `minimum` any single failure leaves every surviving disk within
        /// its round: fixed + primary + backup from the failed disk ≤ T.
        #[test]
        fn tables_stay_consistent_and_minimum_covers_any_single_failure(
            disks in 2u32..7,
            scheme in prop::sample::select(Scheme::ALL.to_vec()),
            costs in proptest::collection::vec(proptest::collection::vec(10u64..400, 3..20), 4),
            ops in proptest::collection::vec(op(), 1..120),
        ) {
            let mut r = Reservations::new(config(disks, scheme));
            for (t, c) in costs.iter().enumerate() {
                r.add_title(TitleId(t as u64), striped(disks, t as u32 % disks, c));
            }
            let mut admitted = Vec::new();
            for op in ops {
                match op {
                    Op::Admit { title, lookahead, first, length } => {
                        let now = r.current_round();
                        let first = first.min(costs[title].len() - 1);
                        let rounds = first..first + length;
                        if let Ok(a) = r.try_admit_range(TitleId(title as u64), rounds, now, lookahead) {
                            admitted.push(a.stream);
                        }
                    }
                    Op::Release { nth } => {
                        if !admitted.is_empty() {
                            let s = admitted.remove(nth % admitted.len());
                            r.release(s);
                        }
                    }
                    Op::Advance { rounds } => r.advance_to(r.current_round() + rounds),
                }
            }
            r.check_invariants();
            if scheme == Scheme::Minimum || scheme == Scheme::Mirroring {
                let now = r.current_round();
                for failed in 0..disks {
                    for disk in (0..disks).filter(|&d| d != failed) {
                        for round in now..now + 30 {
                            let load = 100 * MS + r.reserved_primary_ns(disk, round)
                                + r.reserved_backup_from_ns(disk, round, failed);
                            prop_assert!(load <= 1000 * MS);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_failed_read_falls_back_to_the_other_replica_if_it_serves() {
        let all = |_| true;
        assert_eq!(
            replica_after_error(Replica::Primary, 0, &[1, 2], all),
            Some(Replica::Backup)
        );
        assert_eq!(
            replica_after_error(Replica::Backup, 0, &[1], all),
            Some(Replica::Primary)
        );
        // One fragment of a declustered backup on a failed disk: no backup.
        assert_eq!(
            replica_after_error(Replica::Primary, 0, &[1, 2], |d| d != 2),
            None
        );
        assert_eq!(
            replica_after_error(Replica::Backup, 0, &[1], |d| d != 0),
            None
        );
        // No backup stored (`none`).
        assert_eq!(replica_after_error(Replica::Primary, 0, &[], all), None);
    }
}
