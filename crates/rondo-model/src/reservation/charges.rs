//! A title's per-round disk charges and the bound that computes them.
//!
//! [`TitleCharges`] is what admission adds per stream: where each round's
//! primary and backup pieces live and what each costs under the round
//! bound ([`Bound`], paper or rondo mode). Computed once per title, when it
//! is stored or loaded, for the simulator and the server alike.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::disk::{PaperBound, RondoBound, RoundBound};
use crate::layout::{DiskRead, TitleLayout, TitlePlan};
use crate::schedule::Schedule;
use crate::units::DiskIndex;

/// The disk time one replica piece of one round costs on one disk.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charge {
    pub disk: DiskIndex,
    /// Reserved disk time: the bound's per-request cost of this read.
    pub cost_ns: u64,
    /// Whole revolutions (`Bound::revolution_ns`) `cost_ns` includes as
    /// the worst rotational wait of its extents: one per extent under the
    /// rondo bound on a rotating disk, none under the paper bound (whose
    /// T_avgRot is an average) or on flash.
    #[serde(default)]
    pub revolutions: u16,
}

/// A title's per-round resource needs, computed once from its schedule, its
/// layout and the round bound. Round i is playback round i of the title.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TitleCharges {
    /// Primary read of each round.
    pub(super) primary: Vec<Charge>,
    /// Backup pieces of round i are `backup[backup_start[i]..backup_start[i + 1]]`,
    /// at most one per disk (one request per disk per round per stream).
    pub(super) backup_start: Vec<u32>,
    pub(super) backup: Vec<Charge>,
    /// Server buffer held in each stream round (`rounds + 1` entries).
    pub(super) buffer_bytes: Vec<u64>,
    /// Bytes sent to the client in each stream round (`rounds + 1` entries;
    /// data read in round i is sent in round i + 1).
    pub(super) network_bytes: Vec<u64>,
    /// Bytes read (and held) for each playback round, recovered from the
    /// double-buffered `buffer_bytes` (`buffer[i] = read[i] + read[i - 1]`):
    /// what a start burst holds per round it reads early.
    pub(super) read_bytes: Vec<u64>,
    /// How streams of this title group their reads (one round per read
    /// unless built by [`Bound::title_charges_grouped`]).
    #[serde(default)]
    pub(super) grouping: Grouping,
    /// Drive-cache pairs (seed 003's Sweep&Prefetch and Gradual
    /// Prefetching): `pairs[i]` when round i can be read with round i + 1
    /// prefetched into the drive cache ([`Bound::with_cache_pairs`]); empty
    /// when never built.
    #[serde(default)]
    pub(super) pairs: Vec<Option<PairCost>>,
}

/// A drive-cache pair from round i: round i read from the media with round
/// i + 1 read on into a cache segment, and i + 1 read from the cache in its
/// own round.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairCost {
    /// The read of round i that prefetches i + 1: one media access over both.
    pub first_ns: u64,
    /// The read of round i + 1 from the cache: the drive's time.
    pub hit_ns: u64,
    /// Its bus time when the drive sends it while its heads work on other
    /// commands (`RondoBound::hit_bus_ns`; 0 when the drive serves it alone).
    pub hit_bus_ns: u64,
    /// What the prefetch reads after round i's extent (round i + 1's).
    pub prefetch_bytes: u64,
}

/// Read groups (seed 003's GPMP): a stream reads `group_rounds`
/// consecutive rounds of a segment of `segment_rounds` in one request, at
/// the group's first round (see [`group_start`]). With either 1 every read
/// is one round. A title's primary and backup charge for round `i` is then
/// the cost of the one request that reads rounds `i..group_end(i)`: the
/// whole group at its first round, the rest of it for a stream that starts
/// mid-group.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grouping {
    pub segment_rounds: u32,
    pub group_rounds: u32,
}

impl Default for Grouping {
    fn default() -> Grouping {
        Grouping::NONE
    }
}

impl Grouping {
    /// Every read is one round.
    pub const NONE: Grouping = Grouping {
        segment_rounds: 1,
        group_rounds: 1,
    };

    /// Whether some reads cover more than one round.
    pub fn is_grouped(&self) -> bool {
        self.segment_rounds > 1 && self.group_rounds > 1
    }

    /// Rounds per read (1: not grouped).
    pub fn rounds_per_read(&self) -> u32 {
        if self.is_grouped() {
            self.group_rounds
        } else {
            1
        }
    }

    /// The first round of the group playback round `i` belongs to.
    pub fn start(&self, i: usize) -> usize {
        group_start(i, self.segment_rounds, self.group_rounds)
    }

    /// The round after the last of the group `i` belongs to (not cut to a
    /// title's end).
    pub fn end(&self, i: usize) -> usize {
        if !self.is_grouped() {
            return i + 1;
        }
        let segment_rounds = self.segment_rounds as usize;
        let segment_end = (i / segment_rounds + 1) * segment_rounds;
        (self.start(i) + self.group_rounds as usize).min(segment_end)
    }
}

/// Why charges could not be built.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ChargesError {
    #[error("round {round}: a backup piece lies on the primary's disk {disk}")]
    BackupOnPrimaryDisk { round: usize, disk: DiskIndex },
    #[error(
        "round {round}: two backup pieces on disk {disk}; a stream issues one request per disk per round"
    )]
    TwoPiecesOnOneDisk { round: usize, disk: DiskIndex },
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
        let mut read_bytes = Vec::with_capacity(rounds);
        for i in 0..rounds {
            let before = if i > 0 { read_bytes[i - 1] } else { 0 };
            // Never below what the client is sent: a sequence that is not
            // double-buffered must not make a burst's charge too small.
            read_bytes.push(buffer_bytes[i].saturating_sub(before).max(client_bytes[i]));
        }
        Ok(TitleCharges {
            primary,
            backup_start,
            backup,
            buffer_bytes,
            network_bytes,
            read_bytes,
            grouping: Grouping::NONE,
            pairs: Vec::new(),
        })
    }

    /// The drive-cache pair starting at round `i`, if there is one.
    pub fn pair(&self, i: usize) -> Option<PairCost> {
        self.pairs.get(i).copied().flatten()
    }

    /// How this title's streams group their reads.
    pub fn grouping(&self) -> Grouping {
        self.grouping
    }

    /// Charges of a title laid out by `plan` with `schedule` (the same
    /// rounds), where `request_cost_ns(round, read, backup_entry)` is the
    /// round bound's cost of one request and the revolutions it includes
    /// (`Charge::revolutions`; `backup_entry` is `None` for the primary).
    /// Empty rounds issue no request and cost nothing. Backups are included
    /// only when the plan has them.
    pub fn from_plan(
        plan: &TitlePlan,
        schedule: &Schedule,
        mut request_cost_ns: impl FnMut(usize, &DiskRead, Option<usize>) -> (u64, u16),
    ) -> Result<TitleCharges, ChargesError> {
        assert_eq!(
            plan.rounds(),
            schedule.rounds(),
            "plan and schedule of one title"
        );
        let mut cost = |round: usize, read: &DiskRead, entry: Option<usize>| {
            let (cost_ns, revolutions) = if read.extent_count == 0 {
                (0, 0)
            } else {
                request_cost_ns(round, read, entry)
            };
            Charge {
                disk: read.disk,
                cost_ns,
                revolutions,
            }
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

    /// Mean bytes read per round: a stream's bitrate in the dynamic
    /// cycle's choice of which streams to combine or split.
    pub fn mean_read_bytes(&self) -> u64 {
        self.read_bytes.iter().sum::<u64>() / self.read_bytes.len().max(1) as u64
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

/// The first round of the read group playback round `round` belongs to:
/// groups of `group_rounds` rounds from the start of each segment of
/// `segment_rounds` rounds (the last group of a segment may be shorter).
pub fn group_start(round: usize, segment_rounds: u32, group_rounds: u32) -> usize {
    let segment_rounds = segment_rounds.max(1) as usize;
    let group_rounds = group_rounds.max(1) as usize;
    let segment = round - round % segment_rounds;
    segment + (round - segment) / group_rounds * group_rounds
}

/// The round bound admission charges requests with: the paper's (paper mode)
/// or rondo's true upper bound of the detailed model (rondo mode; see
/// ARCHITECTURE.md, invariants, and `docs/disk-model.md`).
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

    /// What splitting one request's extent between two rounds at a block
    /// boundary may add to its charges (a backup window's reserve,
    /// `BackupWindow::split_ns`): one more request's positioning and up to
    /// one block's transfer.
    pub fn split_ns(&self, block_bytes: u64) -> u64 {
        match self {
            Bound::Paper(b) => b.request_ns(block_bytes),
            Bound::Rondo(b) => b.split_ns(block_bytes.div_ceil(crate::units::SECTOR_BYTES)),
        }
    }

    /// The bound's cost of one request of `extents` (`(first sector, sector
    /// count)` each): what a rebuild copy's or a write's I/O is charged,
    /// extents that continue one another charged as the one request the
    /// disk is given ([`extend_merged`]).
    pub fn extents_ns(&self, extents: &[(u64, u64)]) -> u64 {
        match self {
            Bound::Paper(b) => b.extents_ns(extents),
            Bound::Rondo(b) => {
                let mut merged = Vec::with_capacity(extents.len());
                extend_merged(&mut merged, extents.iter().copied());
                b.extents_ns(&merged)
            }
        }
    }

    /// The charges of a title whose streams read in **groups** of up to
    /// `group_rounds` consecutive rounds (seed 003's GPMP with k =
    /// `group_rounds`): at a group's first round one request per disk for
    /// the whole group (adjacent extents merged into one, so contiguous data
    /// pays one positioning), nothing in its other rounds, and the buffer
    /// holding each round from its group's read until it is sent. Round i's
    /// charge is the request for `i..group end` ([`Grouping`]): the group's
    /// at its first round, the rest of the group's for a stream starting at
    /// i. Groups
    /// restart at every segment of the layout (`LayoutParams::
    /// segment_rounds`), so a group never spans two disks; under
    /// variable-grain striping every group is one round and the charges are
    /// [`Bound::title_charges`]'s.
    pub fn title_charges_grouped(
        &self,
        plan: &TitlePlan,
        layout: Option<&TitleLayout>,
        schedule: &Schedule,
        group_rounds: u32,
    ) -> Result<TitleCharges, ChargesError> {
        let segment_rounds = plan.params().segment_rounds;
        if group_rounds <= 1 || segment_rounds <= 1 {
            // Every group is one round: one read per round, charged as such.
            return self.title_charges(plan, layout, schedule);
        }
        if self.needs_extents() && layout.is_none() {
            return Err(ChargesError::NeedsLayout);
        }
        let rounds = plan.rounds();
        let grouping = Grouping {
            segment_rounds,
            group_rounds,
        };
        let starts: Vec<usize> = (0..rounds).map(|i| grouping.start(i)).collect();
        // One request's cost for the extents of `rounds` on one disk.
        let cost = |members: &mut dyn Iterator<Item = (usize, Option<usize>, u64)>| {
            let mut extents: Vec<(u64, u64)> = Vec::new();
            let mut bytes = 0;
            for (round, entry, read_bytes) in members {
                bytes += read_bytes;
                if let Some(layout) = layout {
                    extend_merged(&mut extents, layout.request_extents(round, entry));
                }
            }
            if bytes == 0 {
                return (0, 0);
            }
            match self {
                Bound::Paper(b) => (b.request_ns(bytes), 0),
                Bound::Rondo(b) => (b.extents_ns(&extents), self.revolutions(extents.len())),
            }
        };
        // Round i's charge: the one request reading i to its group's end.
        let mut primary = Vec::with_capacity(rounds);
        let mut backups = Vec::with_capacity(rounds);
        for i in 0..rounds {
            let members = i..grouping.end(i).min(rounds);
            let disk = plan.primary(i).disk;
            let (cost_ns, revolutions) =
                cost(&mut members.clone().map(|j| (j, None, plan.primary(j).bytes)));
            primary.push(Charge {
                disk,
                cost_ns,
                revolutions,
            });
            // Each backup disk of round i, with the pieces the group's
            // rounds keep on it (a segment's backup placement is the same
            // for all its rounds).
            backups.push(
                plan.backups(i)
                    .iter()
                    .map(|piece| {
                        let (cost_ns, revolutions) = cost(&mut members.clone().flat_map(|j| {
                            plan.backups(j)
                                .iter()
                                .enumerate()
                                .filter(|(_, p)| p.disk == piece.disk)
                                .map(move |(e, p)| (j, Some(e), p.bytes))
                        }));
                        Charge {
                            disk: piece.disk,
                            cost_ns,
                            revolutions,
                        }
                    })
                    .collect(),
            );
        }
        // Round j is held from its group's read (stream round starts[j])
        // through its send (stream round j + 1).
        let mut starting = vec![0u64; rounds + 2];
        let mut ending = vec![0u64; rounds + 2];
        for j in 0..rounds {
            starting[starts[j]] += schedule.disk_read_bytes[j];
            ending[j + 2] += schedule.disk_read_bytes[j];
        }
        let mut held = 0u64;
        let buffer_bytes = (0..=rounds)
            .map(|r| {
                held = held + starting[r] - ending[r];
                held
            })
            .collect();
        let mut charges =
            TitleCharges::new(primary, backups, buffer_bytes, &schedule.client_bytes)?;
        charges.grouping = grouping;
        Ok(charges)
    }

    /// `charges` with drive-cache pairs (seed 003's Sweep&Prefetch and
    /// Gradual Prefetching): round i starts a pair when it is the first of
    /// two rounds of a segment (pairs restart at each segment, as read
    /// groups of two do), both rounds' primaries are one extent each, i + 1's
    /// begins where i's ends, and it fits one of the drive's cache segments.
    /// The first read is charged the bound of one access over both extents;
    /// the second a cache hit. Only the rondo bound knows the cache, so the
    /// paper bound gets no pairs.
    pub fn with_cache_pairs(
        &self,
        mut charges: TitleCharges,
        layout: &TitleLayout,
        segment_rounds: u32,
    ) -> TitleCharges {
        let Bound::Rondo(b) = self else {
            return charges;
        };
        let (segments, segment_sectors) = b.cache_segments();
        let rounds = charges.rounds();
        if segments == 0 || segment_rounds < 2 {
            return charges;
        }
        charges.pairs = (0..rounds)
            .map(|i| {
                if group_start(i, segment_rounds, 2) != i || i + 1 >= rounds {
                    return None;
                }
                if group_start(i + 1, segment_rounds, 2) != i {
                    return None; // a segment's last round alone
                }
                let (a, b2) = (
                    layout.request_extents(i, None),
                    layout.request_extents(i + 1, None),
                );
                let ([(lbn, sectors)], [(next_lbn, next_sectors)]) = (&a[..], &b2[..]) else {
                    return None;
                };
                if lbn + sectors != *next_lbn || *next_sectors > segment_sectors {
                    return None;
                }
                Some(PairCost {
                    first_ns: b.extents_ns(&[(*lbn, sectors + next_sectors)]),
                    hit_ns: b.cache_hit_ns(*next_sectors),
                    hit_bus_ns: b.hit_bus_ns(*next_sectors),
                    prefetch_bytes: next_sectors * crate::units::SECTOR_BYTES,
                })
            })
            .collect();
        charges
    }

    /// The share of the bus a drive that overlaps hits with its heads'
    /// work lets the media's data take, in parts per million (0: the
    /// drive serves hits alone, or the bound is the paper's).
    pub fn bus_share_ppm(&self) -> u32 {
        match self {
            Bound::Paper(_) => 0,
            Bound::Rondo(b) => b.bus_share_ppm(),
        }
    }

    /// The worst rotational wait one extent's charge includes
    /// (`RondoBound::revolution_ns`); 0 under the paper bound.
    pub fn revolution_ns(&self) -> u64 {
        match self {
            Bound::Paper(_) => 0,
            Bound::Rondo(b) => b.revolution_ns(),
        }
    }

    /// `Charge::revolutions` of a request of `extents` extents.
    fn revolutions(&self, extents: usize) -> u16 {
        if self.revolution_ns() == 0 {
            0
        } else {
            u16::try_from(extents).unwrap_or(u16::MAX)
        }
    }

    /// Drive cache segments a prefetch may use on each disk (0: the bound
    /// knows no cache, as the paper's).
    pub fn drive_cache_segments(&self) -> u32 {
        match self {
            Bound::Paper(_) => 0,
            Bound::Rondo(b) => b.cache_segments().0,
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
            Bound::Paper(b) => (b.request_ns(read.bytes), 0),
            Bound::Rondo(b) => {
                let mut extents = Vec::new();
                extend_merged(
                    &mut extents,
                    layout.expect("checked above").request_extents(round, entry),
                );
                (b.extents_ns(&extents), self.revolutions(extents.len()))
            }
        })
    }
}

/// Appends `more` to `extents`, joining an extent that begins where the
/// previous one ends: the executors' `batch_plan` hands the disk such
/// extents of one command as one request (one positioning, one rotational
/// wait), so admission charges them as one. A block split over two strides
/// that the allocator placed back to back is one extent on the disk.
fn extend_merged(extents: &mut Vec<(u64, u64)>, more: impl IntoIterator<Item = (u64, u64)>) {
    for (lbn, sectors) in more {
        match extents.last_mut() {
            Some(last) if last.0 + last.1 == lbn => last.1 += sectors,
            _ => extents.push((lbn, sectors)),
        }
    }
}
