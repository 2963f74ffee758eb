//! Seed 004's time-cycle scheduling for multi-bitrate streams: stream
//! combination with a dynamic cycle, the plain fixed cycle, and the
//! Fixed-Stretch baseline (Chang & Garcia-Molina, VLDB 1997).
//!
//! This module owns the arithmetic of one disk served in time-cycles: how
//! many bytes each stream reads in a cycle, what a cycle's reads cost under
//! the paper's disk (an access time per I/O plus transfer at the media rate),
//! seed 004's memory accounting (its Equation 2), the decisions of its Figure
//! 2 (combine, split, double, shrink; thresholds; one operation per cycle)
//! and the admission test that keeps guaranteed-rate I/O through every
//! operation. It does no I/O and reads no clock: the caller hands it each
//! cycle's start time and the arrivals, and executes the reads it plans
//! (`rondo-experiments`' cycle simulation does, against a simulated disk).
//! docs/cycle.md has the scheduler, the proof sketch and what is not built.

pub mod scheduler;
pub mod stretch;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

pub use scheduler::{
    CombinationParams, CycleConfig, CycleOp, CyclePlan, CycleRead, CycleScheduler, Policy,
    Pressure, Rejection, Trigger,
};
pub use stretch::FixedStretch;

use crate::units::NS_PER_S;

/// A stream of the cycle scheduler (its own id space: one per playback).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CycleStreamId(pub u64);

/// The paper's disk: every read costs one access time plus its transfer,
/// and every cycle a fixed term (0 for the paper's disk; a true bound of a
/// detailed drive model has one, as seed 000's round bound).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CycleDisk {
    /// Charged per read (seek, rotation and settle).
    pub access_ns: u64,
    /// The media transfer rate.
    pub rate_bytes_per_s: u64,
    /// Charged once per cycle.
    #[serde(default)]
    pub fixed_ns: u64,
}

impl CycleDisk {
    /// Seed 004 §3: "maximum disk transfer-rate was 50MB/s and the average
    /// disk access time (including seek, rotational, and settle overheads)
    /// was 10ms". Assumption: MB = 10^6 bytes (a disk vendor's megabyte).
    /// Assumption: the 10 ms average is charged per read as its bound, as
    /// the paper's own admission evidently does; the simulated disk draws
    /// access times at or below it (docs/cycle.md).
    pub fn seed004() -> CycleDisk {
        CycleDisk {
            access_ns: 10_000_000,
            rate_bytes_per_s: 50_000_000,
            fixed_ns: 0,
        }
    }

    /// Transfer time of `bytes`, rounded up.
    pub fn transfer_ns(&self, bytes: u64) -> u64 {
        (u128::from(bytes) * u128::from(NS_PER_S)).div_ceil(u128::from(self.rate_bytes_per_s))
            as u64
    }

    /// What one read of `bytes` is charged: access plus transfer.
    pub fn read_ns(&self, bytes: u64) -> u64 {
        self.access_ns + self.transfer_ns(bytes)
    }
}

/// Bytes a stream of `bitrate_bps` plays in `span_ns`, rounded up.
pub fn bytes_for(bitrate_bps: u64, span_ns: u64) -> u64 {
    (u128::from(bitrate_bps) * u128::from(span_ns)).div_ceil(8 * u128::from(NS_PER_S)) as u64
}

/// The fixed cycle that carries most streams of one bitrate, from the
/// closed form: n(T) = min(disk limit, memory limit) with the disk limit
/// ⌊T / (access + R·T/R_disk)⌋ and the memory limit ⌊M / (R·T)⌋ (Equation 2
/// with no combined stream), over cycles `step_ns`, 2·`step_ns`, … up to
/// `max_ns`. Seed 004 §3's baseline for Fig. 5(b) "picked the time-cycle
/// duration based on the average" bitrate; this is that choice.
pub fn best_fixed_cycle_ns(
    disk: &CycleDisk,
    memory_bytes: u64,
    bitrate_bps: u64,
    step_ns: u64,
    max_ns: u64,
) -> (u64, u64) {
    let mut best = (step_ns, 0);
    let mut t = step_ns;
    while t <= max_ns {
        let per_read = disk.read_ns(bytes_for(bitrate_bps, t));
        let by_disk = t.saturating_sub(disk.fixed_ns) / per_read;
        let by_memory = memory_bytes / bytes_for(bitrate_bps, t).max(1);
        let n = by_disk.min(by_memory);
        if n > best.1 {
            best = (t, n);
        }
        t += step_ns;
    }
    best
}
