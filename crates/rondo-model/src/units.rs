//! Units and ids shared by every crate.
//!
//! Time is integer nanoseconds (`_ns`) at every interface so that runs are
//! bit-for-bit reproducible; sizes are bytes (`_bytes`) or 512-byte sectors
//! (`_sectors`). Ids are newtypes so a disk index is never mistaken for a
//! stream id.

use serde::{Deserialize, Serialize};

/// Nanoseconds per millisecond.
pub const NS_PER_MS: u64 = 1_000_000;
/// Nanoseconds per second.
pub const NS_PER_S: u64 = 1_000_000_000;
/// Physical sector size B_p (seed 000 §6.3: 512 bytes).
pub const SECTOR_BYTES: u64 = 512;
/// Logical block size B_l (seed 000 §6.3: 16 KB), the unit of transfer and buffering.
pub const BLOCK_BYTES_DEFAULT: u64 = 16 * 1024;
/// Stride size B_s (seed 000 §6.3: 2 MB), the unit of disk-space allocation.
pub const STRIDE_BYTES_DEFAULT: u64 = 2 * 1024 * 1024;
/// Round length T (seed 000 §6.3: one second).
pub const ROUND_DURATION_NS_DEFAULT: u64 = NS_PER_S;

/// A disk of the array, numbered from 0: the unit of striping, failure and scheduling.
/// Serialized and displayed as the bare number.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DiskIndex(pub u32);

impl DiskIndex {
    /// The disk's position in a per-disk vector.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// Disks `0..count`, in order.
    pub fn all(count: u32) -> impl DoubleEndedIterator<Item = DiskIndex> + Clone {
        (0..count).map(DiskIndex)
    }
}

impl std::fmt::Display for DiskIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::str::FromStr for DiskIndex {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<DiskIndex, Self::Err> {
        s.parse().map(DiskIndex)
    }
}

/// An absolute round: counted from the array's start. Rounds of a title are
/// [`PlaybackRound`]s; lengths in rounds are plain integers. Serialized and
/// displayed as the bare number.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Round(pub u64);

impl Round {
    /// The round after this one.
    pub fn next(self) -> Round {
        Round(self.0 + 1)
    }

    /// The round `rounds` rounds later.
    pub fn plus(self, rounds: u64) -> Round {
        Round(self.0 + rounds)
    }

    /// The round `rounds` rounds earlier, or round 0.
    pub fn minus(self, rounds: u64) -> Round {
        Round(self.0.saturating_sub(rounds))
    }

    /// Rounds from `earlier` to this one; 0 if `earlier` is later.
    pub fn since(self, earlier: Round) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// Rounds `from..to`, in order.
    pub fn range(from: Round, to: Round) -> impl DoubleEndedIterator<Item = Round> + Clone {
        (from.0..to.0).map(Round)
    }
}

impl std::fmt::Display for Round {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// A playback round: a round of a title, counted from the title's start
/// (round 0 is its first second). Serialized and displayed as the bare number.
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct PlaybackRound(pub u32);

impl PlaybackRound {
    /// The round's position in a per-round vector of the title.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The title round after this one.
    pub fn next(self) -> PlaybackRound {
        PlaybackRound(self.0 + 1)
    }
}

impl std::fmt::Display for PlaybackRound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// A stored video.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TitleId(pub u64);

/// One playback of a title: the unit admitted and scheduled.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct StreamId(pub u64);

/// Converts milliseconds (a datasheet value) to integer nanoseconds, rounding to nearest.
pub fn ms_to_ns(ms: f64) -> u64 {
    debug_assert!(ms >= 0.0, "negative duration {ms} ms");
    (ms * NS_PER_MS as f64).round() as u64
}

/// Converts integer nanoseconds to milliseconds for display.
pub fn ns_to_ms(ns: u64) -> f64 {
    ns as f64 / NS_PER_MS as f64
}

/// Rounds `bytes` up to a whole number of `unit_bytes`.
pub fn round_up(bytes: u64, unit_bytes: u64) -> u64 {
    assert!(unit_bytes > 0);
    bytes.div_ceil(unit_bytes) * unit_bytes
}
