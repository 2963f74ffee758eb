//! Where a title's bytes live: stride allocation, variable-grain striping and
//! replica placement (seed 000 §2.2, §2.4, §3.1, §3.2, §5; the rules with a
//! worked example are in `docs/layout.md`).
//!
//! Layout is two steps so that admission-only runs never touch disk space:
//!
//! 1. [`TitlePlan::new`] is a pure function of (per-round stored sizes, D,
//!    stride and block size, start disk, placement policy, seed, B_d). It says,
//!    for every round, which disk holds the primary and which disks hold the
//!    backup fragments, how many bytes and how many extents each request has,
//!    and where each request sits in the title's own packed byte space on that
//!    disk. Admission reads it through the allocation-free
//!    [`TitlePlan::primary`] and [`TitlePlan::backups`].
//! 2. [`ArrayAllocator::place`] maps the title-local strides of a plan onto real
//!    strides of each disk, first fit from LBN 0, all or nothing, and returns a
//!    [`TitleLayout`] with device extents. [`TitleLayout::from_strides`] rebuilds
//!    the same layout from persisted stride lists without allocating.
//!
//! This module does no I/O and uses only the seeded [`rng::SplitMix64`].

mod alloc;
mod extent;
mod plan;
pub mod rng;

#[cfg(test)]
mod tests;

pub use alloc::{ArrayAllocator, StrideAllocator};
pub use extent::{BackupExtents, Extent, Extents, RoundLayout, TitleLayout, TitleStrides};
pub use plan::{DiskRead, TitlePlan};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::schedule::Schedule;
use crate::units::{DiskIndex, SECTOR_BYTES, TitleId};

/// Where backups go: `deterministic` (seed 000 Figure 2) or `random` (a
/// per-title seed), as `docs/layout.md` states them.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplicaPlacement {
    /// Round-robin over the other disks (seed 000 §3.1, Figure 2).
    Deterministic,
    /// Uniform over the other disks, drawn from the title's seed (seed 000 §3.2).
    Random,
}

/// One of the two copies of a round's data.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Replica {
    Primary,
    Backup,
}

/// How far deterministic placement's round-robin moves per round when a
/// round is declustered. Seed 000 gives the rule for whole backups (Figure 2)
/// and leaves open how it extends to fragments; both readings are kept so
/// experiments can compare them (docs/experiments/seed000-fig11.md). Without
/// B_d they are the same rule.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FragmentSequence {
    /// One round-robin position per fragment: the c-th fragment counted goes
    /// to (k + 1 + c mod (D−1)) mod D, so a round's split shifts the backup
    /// disks of the rounds after it. Data directories written before this
    /// variant was renamed store it as "per-disk".
    #[default]
    #[serde(alias = "per-disk")]
    PerFragment,
    /// One round-robin position per round: fragment q of a round whose
    /// counter is c goes to (k + 1 + (c + q) mod (D−1)) mod D, so the first
    /// fragment lands where the whole backup would have.
    PerRound,
}

/// Which rounds share one round-robin counter in deterministic placement.
/// Figure 2 shows disk 0's rounds kD, (k+1)D, … replicated round-robin over
/// the other disks and says the other disks' data are "replicated in a
/// similar way"; both readings below satisfy that for every disk (D and
/// D−1 are coprime), and they differ in how the backup offsets of
/// neighbouring rounds of a title relate. Seed 000 does not say which its
/// prototype used (docs/experiments/seed000-fig11.md compares them).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RoundRobinCounter {
    /// One counter per primary disk: the j-th round a title stores on disk k
    /// has its backup on (k + 1 + j mod (D−1)) mod D, so a stream keeps one
    /// backup offset for D rounds running.
    #[default]
    PerDisk,
    /// One counter for the whole title: round i has its backup on
    /// (k + 1 + i mod (D−1)) mod D, so the offset steps at every round.
    PerTitle,
}

/// How the backup replica is stored, when there is one.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BackupParams {
    pub placement: ReplicaPlacement,
    /// B_d: cut each round's backup into fragments of this size (seed 000 §5);
    /// `None` keeps each round's backup whole on one disk.
    pub backup_block_bytes: Option<u64>,
    /// Deterministic placement of fragments (ignored without B_d, and by
    /// random placement).
    #[serde(default)]
    pub fragment_sequence: FragmentSequence,
    /// Deterministic placement's counter scope (ignored by random placement).
    #[serde(default)]
    pub round_robin_counter: RoundRobinCounter,
    /// G, the disk groups (seed 000 §8): disk d is in group d mod G, and a
    /// round's backup stays on the other disks of its primary's group. A
    /// node holding G consecutive disks then has each in another group, so
    /// the whole node can fail as one failure per group. 1: one group, the
    /// whole array (seed 000 §3).
    #[serde(default = "one_group")]
    pub disk_groups: u32,
}

fn one_group() -> u32 {
    1
}

impl BackupParams {
    /// Seed 000's backups: each round's whole, placed deterministically
    /// (the default fragment sequence and counter), one group.
    pub fn whole_deterministic() -> BackupParams {
        BackupParams {
            placement: ReplicaPlacement::Deterministic,
            backup_block_bytes: None,
            fragment_sequence: FragmentSequence::default(),
            round_robin_counter: RoundRobinCounter::default(),
            disk_groups: 1,
        }
    }

    /// The disks in each group (D / G).
    pub fn group_disks(&self, disk_count: u32) -> u32 {
        disk_count / self.disk_groups.max(1)
    }
}

/// The array-wide layout parameters, fixed when a data directory is created.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LayoutParams {
    /// D, the number of disks a title is striped over.
    pub disk_count: u32,
    /// B_s, the allocation unit; larger than any round's data.
    pub stride_bytes: u64,
    /// B_l; every round's stored size is a whole number of blocks.
    pub block_bytes: u64,
    /// `None` stores the primary only (reservation scheme `none`).
    pub backup: Option<BackupParams>,
    /// Rounds per run: a title's rounds are cut into runs of this many
    /// consecutive rounds, each run packed contiguously on one disk and the
    /// runs round-robin over the disks. 1 is seed 000's `variable-grain`
    /// striping (round i on disk (start + i) mod D); more is the
    /// `segments` layout of seeds 003 and 004, where the next rounds of a
    /// stream lie next to each other on one disk (prefetching, combined
    /// reads). A run's backup keeps one placement for the whole run, so it
    /// is contiguous on its backup disk(s) too.
    #[serde(default = "one_round_per_segment")]
    pub segment_rounds: u32,
    /// W, the disks a title's runs go round-robin over, counted from its
    /// start disk: run j is on disk (start + j mod W) mod D. 0 (the
    /// default) is every disk, seed 000's striping. Fewer is seed 001's
    /// placement, a title on S of the storage nodes (§4.1: "each object
    /// is striped over S nodes"): with G consecutive disks per node,
    /// W = S·G, and titles start W disks apart
    /// ([`round_robin_start_disk`]). Backups stay where the backup rules
    /// put them, on any other disk (of the primary's group).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stripe_disks: u32,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

fn one_round_per_segment() -> u32 {
    1
}

/// Rounds per run of a new `segments` directory or simulation when none is
/// given. Assumption: seed 003 places "contiguous video portions
/// (containing tens of blocks, for example)" per disk; 32 one-round blocks
/// is such a portion, and 32 s of a title per disk keeps a stream on one
/// disk long enough for GPMP's epochs (k ≤ 20 in its Figure 5) to fit
/// inside a run most of the time.
pub const DEFAULT_SEGMENT_ROUNDS: u32 = 32;

/// The two layouts (the vocabulary of ARCHITECTURE.md), by `segment_rounds`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LayoutKind {
    /// Seed 000: round i on disk (start + i) mod D (`segment_rounds` = 1).
    VariableGrain,
    /// Seeds 003 and 004: runs of `segment_rounds` > 1 consecutive rounds
    /// contiguous on one disk.
    Segments,
}

impl LayoutKind {
    pub fn name(self) -> &'static str {
        match self {
            LayoutKind::VariableGrain => "variable-grain",
            LayoutKind::Segments => "segments",
        }
    }
}

impl LayoutParams {
    /// W, the disks one title is striped over: `stripe_disks`, or D when
    /// that is 0.
    pub fn stripe_width(&self) -> u32 {
        if self.stripe_disks == 0 {
            self.disk_count
        } else {
            self.stripe_disks
        }
    }

    /// Which layout `segment_rounds` makes.
    pub fn kind(&self) -> LayoutKind {
        if self.segment_rounds > 1 {
            LayoutKind::Segments
        } else {
            LayoutKind::VariableGrain
        }
    }

    /// Checks the relations the layout relies on: blocks are whole sectors,
    /// strides and B_d are whole blocks, runs have a round, and a backup has
    /// a disk to go to.
    pub fn validate(&self) -> Result<(), LayoutError> {
        if self.disk_count == 0 {
            return Err(LayoutError::NoDisks);
        }
        if self.segment_rounds == 0 {
            return Err(LayoutError::EmptySegments);
        }
        if self.stripe_disks > self.disk_count {
            return Err(LayoutError::StripeWiderThanArray {
                stripe_disks: self.stripe_disks,
                disk_count: self.disk_count,
            });
        }
        if self.block_bytes == 0 || !self.block_bytes.is_multiple_of(SECTOR_BYTES) {
            return Err(LayoutError::BlockNotSectors {
                block_bytes: self.block_bytes,
            });
        }
        if self.stride_bytes == 0 || !self.stride_bytes.is_multiple_of(self.block_bytes) {
            return Err(LayoutError::StrideNotBlocks {
                stride_bytes: self.stride_bytes,
                block_bytes: self.block_bytes,
            });
        }
        if let Some(backup) = self.backup {
            if self.disk_count < 2 {
                return Err(LayoutError::BackupNeedsTwoDisks);
            }
            let groups = backup.disk_groups;
            if groups == 0
                || !self.disk_count.is_multiple_of(groups)
                || self.disk_count / groups < 2
            {
                return Err(LayoutError::DiskGroups {
                    disk_groups: groups,
                    disk_count: self.disk_count,
                });
            }
            if let Some(b_d) = backup.backup_block_bytes {
                if b_d == 0 || !b_d.is_multiple_of(self.block_bytes) {
                    return Err(LayoutError::BackupBlockNotBlocks {
                        backup_block_bytes: b_d,
                        block_bytes: self.block_bytes,
                    });
                }
                // Fragment ordinals within a round are stored as u32.
                if self.stride_bytes / b_d > u64::from(u32::MAX) {
                    return Err(LayoutError::TooManyFragments {
                        stride_bytes: self.stride_bytes,
                        backup_block_bytes: b_d,
                    });
                }
            }
        }
        Ok(())
    }
}

/// Why a title cannot be laid out, placed, released or rebuilt.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum LayoutError {
    #[error("the array needs at least one disk")]
    NoDisks,
    #[error("a segment holds at least one round (segment_rounds = 0)")]
    EmptySegments,
    #[error(
        "a title cannot be striped over {stripe_disks} disks of a {disk_count}-disk array \
         (stripe_disks is at most D; 0 means every disk)"
    )]
    StripeWiderThanArray { stripe_disks: u32, disk_count: u32 },
    #[error("a backup replica needs at least two disks")]
    BackupNeedsTwoDisks,
    #[error(
        "{disk_groups} disk groups do not divide {disk_count} disks into groups of at least two \
         (a backup stays in its primary's group)"
    )]
    DiskGroups { disk_groups: u32, disk_count: u32 },
    #[error("block size {block_bytes} bytes is not a positive multiple of the 512-byte sector")]
    BlockNotSectors { block_bytes: u64 },
    #[error(
        "stride size {stride_bytes} bytes is not a positive multiple of the block size {block_bytes} bytes"
    )]
    StrideNotBlocks { stride_bytes: u64, block_bytes: u64 },
    #[error(
        "backup block size B_d = {backup_block_bytes} bytes is not a positive multiple of the \
         block size {block_bytes} bytes"
    )]
    BackupBlockNotBlocks {
        backup_block_bytes: u64,
        block_bytes: u64,
    },
    #[error(
        "B_d = {backup_block_bytes} bytes cuts a {stride_bytes}-byte stride into more than \
         2^32 fragments"
    )]
    TooManyFragments {
        stride_bytes: u64,
        backup_block_bytes: u64,
    },
    #[error(
        "the schedule uses {schedule_block_bytes}-byte blocks but the array uses {block_bytes}-byte blocks"
    )]
    BlockSizeMismatch {
        schedule_block_bytes: u64,
        block_bytes: u64,
    },
    #[error("start disk {start} is not a disk of a {disk_count}-disk array")]
    StartDiskOutOfRange { start: u32, disk_count: u32 },
    #[error("round {round} stores {bytes} bytes, not a whole number of {block_bytes}-byte blocks")]
    RoundNotBlocks {
        round: usize,
        bytes: u64,
        block_bytes: u64,
    },
    #[error(
        "round {round} needs {bytes} bytes from one disk but a stride holds {stride_bytes} bytes: \
         use a larger stride or shorter rounds"
    )]
    RoundExceedsStride {
        round: usize,
        bytes: u64,
        stride_bytes: u64,
    },
    #[error("the plan is for {plan_disks} disks but the array has {array_disks}")]
    DiskCountMismatch { plan_disks: u32, array_disks: u32 },
    #[error(
        "disk {} is full: the title needs {needed_strides} strides there and {free_strides} are free",
        .disk.0
    )]
    DiskFull {
        disk: DiskIndex,
        needed_strides: u64,
        free_strides: u64,
    },
    #[error("disk {} is not a disk of a {disk_count}-disk array", .disk.0)]
    NoSuchDisk { disk: DiskIndex, disk_count: u32 },
    #[error("stride {stride} is beyond the end of disk {} ({stride_count} strides)", .disk.0)]
    StrideOutOfRange {
        disk: DiskIndex,
        stride: u64,
        stride_count: u64,
    },
    #[error("stride {stride} of disk {} is held twice", .disk.0)]
    StrideHeldTwice { disk: DiskIndex, stride: u64 },
    #[error("stride {stride} of disk {} is not allocated", .disk.0)]
    StrideNotAllocated { disk: DiskIndex, stride: u64 },
    #[error(
        "the title holds {found} {replica:?} strides on disk {} but its plan needs {expected}",
        .disk.0
    )]
    StrideListMismatch {
        disk: DiskIndex,
        replica: Replica,
        expected: u64,
        found: u64,
    },
}

/// The start disk of the `title_ordinal`-th title the catalog stores (from 0):
/// round-robin over titles. Striped over every disk (W = D), title n's
/// round 0 is on disk n mod D (seed 000). Striped over W < D disks, title n
/// starts on disk n·W mod D, right after the previous title's last disk
/// (seed 001 §4.1, and `cluster::Placement::storage_node`), so with W
/// dividing D the titles fall into D/W disjoint sets of disks.
pub fn round_robin_start_disk(title_ordinal: u64, disk_count: u32, stripe_disks: u32) -> DiskIndex {
    assert!(disk_count > 0, "an array has at least one disk");
    let d = u64::from(disk_count);
    let step = if stripe_disks == 0 || stripe_disks >= disk_count {
        1
    } else {
        u64::from(stripe_disks)
    };
    DiskIndex((title_ordinal % d * step % d) as u32)
}

/// A per-title placement seed derived from an array-wide seed, for catalogs
/// that do not draw one per title. Value-stable: it fixes stored layouts.
pub fn derive_title_seed(array_seed: u64, title: TitleId) -> u64 {
    rng::mix64(array_seed ^ rng::mix64(title.0.wrapping_add(0x9E37_79B9_7F4A_7C15)))
}

impl TitlePlan {
    /// The plan of a title with schedule `schedule` (its `disk_read_bytes`).
    pub fn for_schedule(
        schedule: &Schedule,
        params: &LayoutParams,
        start_disk: DiskIndex,
        seed: u64,
    ) -> Result<TitlePlan, LayoutError> {
        if schedule.block_bytes != params.block_bytes {
            return Err(LayoutError::BlockSizeMismatch {
                schedule_block_bytes: schedule.block_bytes,
                block_bytes: params.block_bytes,
            });
        }
        TitlePlan::new(&schedule.disk_read_bytes, params, start_disk, seed)
    }
}
