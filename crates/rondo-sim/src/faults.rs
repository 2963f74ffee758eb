//! Fault plans: what goes wrong, and when, in one simulation run.
//!
//! A plan lists disk failures at round boundaries, read errors and checksum
//! errors on chosen stream reads, bad extents (replica extents whose bytes
//! stay bad until a repair rewrites them: one per disk is repaired, both
//! replicas of a round make it lost), a rebuild of a failed disk, an ingest
//! under load, and the share of arrivals that are byte-range requests or
//! time starts. The simulator injects them into the array exactly where the
//! server's executors would report them (a failed read is a completion with
//! an error outcome), so the array's reactions are the server's.
//! [`FaultPlan::seeded`] draws a plan from a seed for the seeded scenarios.

use rondo_model::layout::Replica;
use rondo_model::units::{DiskIndex, Round};
use serde::{Deserialize, Serialize};

use crate::run::FailureSpec;

/// Which error a read reports.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadErrorKind {
    /// The device reported an error.
    Io,
    /// The bytes came back but do not match the catalog's checksum.
    Checksum,
}

/// The `nth` stream read (counted from 0, in plan order) of `disk` in
/// `round` fails with `kind`. A round with fewer reads has no error.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadErrorSpec {
    pub round: Round,
    pub disk: DiskIndex,
    pub nth: u32,
    pub kind: ReadErrorKind,
}

/// From round `round` on, replica `replica` (`piece`: 0 for a primary, the
/// backup entry for a backup piece) of playback round `playback_round` of
/// title `title` (index into the run's titles) holds bad bytes: every read
/// of it fails its checksum until a repair or a rebuild rewrites it, and a
/// copy from it fails.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BadExtentSpec {
    pub title: usize,
    pub playback_round: u32,
    pub replica: Replica,
    #[serde(default)]
    pub piece: u16,
    #[serde(default)]
    pub round: Round,
}

/// At `round`, failed disk `disk` is replaced and rebuilt from the other
/// replicas in the disk time streams leave.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RebuildSpec {
    pub disk: DiskIndex,
    pub round: Round,
}

/// At `round`, a copy of title `title` (index into the run's titles) is
/// ingested: placed on free strides and written in the disk time streams
/// and any rebuild leave.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestSpec {
    pub title: usize,
    pub round: Round,
}

/// The client of the `stream_nth` stream admitted (counted from 0) takes
/// no data from round `round` on: the array stops its stream once it has
/// held more than its buffer for the grace time.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StallSpec {
    pub stream_nth: u64,
    pub round: Round,
}

/// The client of the `stream_nth` stream admitted (counted from 0)
/// disconnects at the start of round `round`: its stream is released.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DepartureSpec {
    pub stream_nth: u64,
    pub round: Round,
}

/// Everything injected into one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaultPlan {
    pub failures: Vec<FailureSpec>,
    pub read_errors: Vec<ReadErrorSpec>,
    /// Extents whose bytes are bad (silent corruption).
    pub bad_extents: Vec<BadExtentSpec>,
    pub rebuild: Option<RebuildSpec>,
    pub ingest: Option<IngestSpec>,
    /// Clients that stop taking their data.
    pub stalls: Vec<StallSpec>,
    /// Clients that disconnect before their stream ends.
    pub departures: Vec<DepartureSpec>,
    /// Share of arrivals that ask for a byte range of the title (an HTTP
    /// Range: a seeded start and length).
    pub range_fraction: f64,
    /// Share of arrivals that start at a seeded time (`?t=`).
    pub time_start_fraction: f64,
}

impl FaultPlan {
    /// Whether the plan needs disks that execute reads.
    pub fn needs_simulated_disks(&self) -> bool {
        !self.read_errors.is_empty()
            || !self.bad_extents.is_empty()
            || self.rebuild.is_some()
            || self.ingest.is_some()
            || !self.stalls.is_empty()
            || !self.departures.is_empty()
    }

    /// A plan drawn from `seed` for a run of `rounds` rounds on `disks`
    /// disks with `titles` titles: one disk failure, a few read and
    /// checksum errors on other disks before and after it, the failed disk
    /// rebuilt some rounds later, an ingest, a client that stops reading,
    /// one that disconnects, a quarter of the arrivals as ranges or time
    /// starts, and silent corruption: two bad extents (a primary and a
    /// backup's first piece, each repairable from its replica) and, in one
    /// plan of four, a round with both replicas bad (lost: only the
    /// streams that reach it stop, and later ones are refused). Bad extents
    /// fall in a title's first 16 rounds (assumption: every scenario title
    /// is longer; one past a title's end never matches).
    pub fn seeded(seed: u64, disks: u32, rounds: u64, titles: usize) -> FaultPlan {
        let draw = |salt: u64| mix(seed, salt);
        let failed = (draw(1) % disks as u64) as u32;
        let fail_round = Round(1 + draw(2) % (rounds / 2).max(1));
        let mut read_errors = Vec::new();
        // Spread over the other disks, at most two on one (the default
        // health policy fails a disk at three errors within its window: a
        // second failure is a different scenario).
        let others = disks.saturating_sub(1).max(1) as u64;
        let first = draw(10) % others;
        for n in 0..4 {
            let disk = DiskIndex((failed + 1 + ((first + n) % others) as u32) % disks);
            read_errors.push(ReadErrorSpec {
                round: Round(draw(20 + n) % rounds),
                disk,
                nth: (draw(30 + n) % 3) as u32,
                kind: if draw(40 + n).is_multiple_of(2) {
                    ReadErrorKind::Io
                } else {
                    ReadErrorKind::Checksum
                },
            });
        }
        let title_of = |salt: u64| (draw(salt) % titles.max(1) as u64) as usize;
        let bad_at = |salt: u64, replica: Replica| BadExtentSpec {
            title: title_of(salt),
            playback_round: (draw(salt + 1) % 16) as u32,
            replica,
            piece: 0,
            round: Round(draw(salt + 2) % rounds.max(1)),
        };
        let mut bad_extents = vec![bad_at(50, Replica::Primary), bad_at(60, Replica::Backup)];
        if draw(70).is_multiple_of(4) {
            let primary = bad_at(80, Replica::Primary);
            bad_extents.push(primary);
            bad_extents.push(BadExtentSpec {
                replica: Replica::Backup,
                ..primary
            });
        }
        FaultPlan {
            failures: vec![FailureSpec {
                disk: DiskIndex(failed),
                round: fail_round,
            }],
            read_errors,
            bad_extents,
            rebuild: Some(RebuildSpec {
                disk: DiskIndex(failed),
                round: fail_round.plus(1 + draw(3) % 50),
            }),
            ingest: Some(IngestSpec {
                title: (draw(4) % titles.max(1) as u64) as usize,
                round: Round(draw(5) % (rounds / 2).max(1)),
            }),
            stalls: vec![StallSpec {
                stream_nth: draw(6) % 20,
                round: Round(draw(7) % (rounds / 2).max(1)),
            }],
            departures: vec![DepartureSpec {
                stream_nth: draw(8) % 20,
                round: Round(draw(9) % (rounds / 2).max(1)),
            }],
            range_fraction: 0.15,
            time_start_fraction: 0.1,
        }
    }
}

/// SplitMix64 of `seed` and `salt`: plan parameters from one seed.
fn mix(seed: u64, salt: u64) -> u64 {
    let mut z = seed.wrapping_add(salt.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
