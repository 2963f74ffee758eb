//! Seed 003's retrieval policies on one disk, analytically: how many
//! constant-rate streams each policy carries in a round, with how much host
//! memory and drive cache, and how late a new stream may start.
//!
//! Every policy reads in rounds of T, one block of b bytes per stream per
//! round of playback, in SCAN order. A *random retrieval* pays the disk's
//! positioning (seek and rotation) and the block's transfer; a block read
//! right after the previous one of the same stream (it lies next to it on
//! the disk: the `segments` layout) pays only its transfer. The policies
//! differ in which streams the disk reads in a round and where the blocks
//! read ahead wait:
//!
//! - **Sweep**: every stream's next block each round, double buffering in
//!   host memory. N·(o + t) ≤ T.
//! - **Sweep&Prefetch** (v, p): v random retrievals; for p ≤ v of them the
//!   disk reads on into its cache the stream's following block, which serves
//!   that stream in the next round without disk time. N = v + p,
//!   v·(o + t) + p·t ≤ T, p·b ≤ the drive cache. The server switches into
//!   prefetch mode only when Sweep is full, and the streams admitted then
//!   hold a third block in host memory until the switch is over (triple
//!   buffering); their start waits one round more.
//! - **Gradual Prefetching**: always in prefetch mode; every other admitted
//!   stream has its next block prefetched (p = ⌊N/2⌋, at most what the
//!   cache holds), so no transition, no triple buffering.
//! - **GPMP** (v, u): epochs of k = u + 1 rounds; each round one group of v
//!   streams is read, each stream's block and its u following blocks in one
//!   request, held in host memory; the other groups play from memory.
//!   N = v·k, v·(o + k·t) ≤ T. A new stream waits for its group's round.
//!
//! Seed 003's worked example (10 MB/s, 15 ms per request, 2 Mbit/s, 1 s
//! rounds, so b = 250 KB, o + t = 40 ms, t = 25 ms) gives Sweep 25, S&P 28
//! with v = 20 and p = 8 (the 2 MB drive cache holds 8 blocks), GPMP 36 with
//! v = 6 and u = 5; the unit tests check these from the formulas here.
//!
//! This module is the admission arithmetic the array's policies use and the
//! planner's comparison; it does no scheduling itself.

use serde::Serialize;
use thiserror::Error;

use crate::units::NS_PER_S;

/// What one disk's round costs, in seed 003's terms: a positioning time per
/// random request, a transfer rate, and a fixed charge per round (C-SCAN's
/// sweep back, 0 for seed 003's simplified disk).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DiskRound {
    pub round_duration_ns: u64,
    pub round_fixed_ns: u64,
    /// o: seek and rotation of one random retrieval.
    pub positioning_ns: u64,
    pub rate_bytes_per_s: u64,
    /// b: one stream's data per round.
    pub block_bytes: u64,
    /// The drive's on-board cache (Sweep&Prefetch and Gradual keep their
    /// prefetched blocks there).
    pub drive_cache_bytes: u64,
}

impl DiskRound {
    /// Seed 003's simplified disk: 10 MB/s, 15 ms of positioning per
    /// request, 2 Mbit/s streams in 1 s rounds (b = 250 KB), with a drive
    /// cache of `drive_cache_bytes` (MB = 10^6 bytes, as the paper's rates).
    pub fn seed003_example(drive_cache_bytes: u64) -> DiskRound {
        DiskRound {
            round_duration_ns: NS_PER_S,
            round_fixed_ns: 0,
            positioning_ns: 15_000_000,
            rate_bytes_per_s: 10_000_000,
            block_bytes: 2_000_000 / 8,
            drive_cache_bytes,
        }
    }

    /// t: transfer time of `blocks` blocks (rounded up to the nanosecond).
    pub fn transfer_ns(&self, blocks: u64) -> u64 {
        (u128::from(blocks * self.block_bytes) * u128::from(NS_PER_S))
            .div_ceil(u128::from(self.rate_bytes_per_s)) as u64
    }

    /// A random retrieval of `blocks` contiguous blocks: one positioning.
    pub fn random_ns(&self, blocks: u64) -> u64 {
        self.positioning_ns + self.transfer_ns(blocks)
    }

    /// Disk time the round has for requests.
    pub fn available_ns(&self) -> u64 {
        self.round_duration_ns.saturating_sub(self.round_fixed_ns)
    }

    /// Blocks the drive cache holds.
    pub fn cache_blocks(&self) -> u64 {
        self.drive_cache_bytes / self.block_bytes.max(1)
    }
}

/// A policy with its parameters.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "policy", rename_all = "kebab-case")]
pub enum Policy {
    Sweep,
    /// v random retrievals and p prefetched blocks per round.
    SweepPrefetch {
        random: u64,
        prefetched: u64,
    },
    /// N streams, ⌊N/2⌋ prefetched (up to the cache).
    Gradual {
        streams: u64,
    },
    /// v streams per group, u blocks prefetched per stream: k = u + 1.
    Gpmp {
        group: u64,
        prefetch_depth: u64,
    },
}

/// Why a policy's parameters do not fit the round.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum PolicyError {
    #[error("the round's reads take {needed_ns} ns of the {available_ns} ns the disk has")]
    DiskTime { needed_ns: u64, available_ns: u64 },
    #[error(
        "{prefetched} prefetched blocks need more than the drive cache's {cache_blocks} blocks"
    )]
    DriveCache { prefetched: u64, cache_blocks: u64 },
    #[error("{prefetched} prefetches but only {random} random retrievals to continue from")]
    MorePrefetchesThanReads { prefetched: u64, random: u64 },
}

/// A policy's operating point on one disk.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Operating {
    pub policy: Policy,
    /// N: streams carried.
    pub streams: u64,
    /// Random retrievals per round.
    pub random_reads: u64,
    /// Blocks read ahead per round (into the drive cache or host memory).
    pub prefetched_blocks: u64,
    /// Disk time the round's reads take (fixed charge included).
    pub disk_busy_ns: u64,
    /// Host memory at the policy's peak, in blocks (double buffering,
    /// triple buffering in S&P's transition, GPMP's epochs).
    pub host_blocks: u64,
    /// Drive cache in use, in blocks.
    pub drive_cache_blocks: u64,
    /// Rounds from admission to the first block sent, at most, with no
    /// queue of waiting requests.
    pub startup_rounds_max: u64,
}

impl DiskRound {
    /// The operating point of `policy`, or why it does not fit.
    pub fn operate(&self, policy: Policy) -> Result<Operating, PolicyError> {
        let available_ns = self.available_ns();
        let t = self.transfer_ns(1);
        let fit = |needed_ns: u64| {
            if needed_ns <= available_ns {
                Ok(self.round_fixed_ns + needed_ns)
            } else {
                Err(PolicyError::DiskTime {
                    needed_ns,
                    available_ns,
                })
            }
        };
        let cache = |prefetched: u64| {
            if prefetched <= self.cache_blocks() {
                Ok(())
            } else {
                Err(PolicyError::DriveCache {
                    prefetched,
                    cache_blocks: self.cache_blocks(),
                })
            }
        };
        match policy {
            Policy::Sweep => {
                let streams = available_ns / self.random_ns(1);
                Ok(Operating {
                    policy,
                    streams,
                    random_reads: streams,
                    prefetched_blocks: 0,
                    disk_busy_ns: self.round_fixed_ns + streams * self.random_ns(1),
                    host_blocks: 2 * streams,
                    drive_cache_blocks: 0,
                    // Admitted at a round boundary, read in the next round, sent
                    // in the one after.
                    startup_rounds_max: 2,
                })
            }
            Policy::SweepPrefetch { random, prefetched } => {
                if prefetched > random {
                    return Err(PolicyError::MorePrefetchesThanReads { prefetched, random });
                }
                cache(prefetched)?;
                let disk_busy_ns = fit(random * self.random_ns(1) + prefetched * t)?;
                let streams = random + prefetched;
                // The streams admitted past Sweep's capacity during the
                // switch hold a third block until it is over.
                let sweep = available_ns / self.random_ns(1);
                let transition = streams.saturating_sub(sweep);
                Ok(Operating {
                    policy,
                    streams,
                    random_reads: random,
                    prefetched_blocks: prefetched,
                    disk_busy_ns,
                    host_blocks: 2 * streams + transition,
                    drive_cache_blocks: prefetched,
                    startup_rounds_max: if transition > 0 { 3 } else { 2 },
                })
            }
            Policy::Gradual { streams } => {
                let prefetched = (streams / 2).min(self.cache_blocks());
                let random = streams - prefetched;
                let disk_busy_ns = fit(random * self.random_ns(1) + prefetched * t)?;
                Ok(Operating {
                    policy,
                    streams,
                    random_reads: random,
                    prefetched_blocks: prefetched,
                    disk_busy_ns,
                    host_blocks: 2 * streams,
                    drive_cache_blocks: prefetched,
                    startup_rounds_max: 2,
                })
            }
            Policy::Gpmp {
                group,
                prefetch_depth,
            } => {
                let k = prefetch_depth + 1;
                let disk_busy_ns = fit(group * self.random_ns(k))?;
                Ok(Operating {
                    policy,
                    streams: group * k,
                    random_reads: group,
                    prefetched_blocks: group * prefetch_depth,
                    disk_busy_ns,
                    // At a round's start the group read i rounds ago holds
                    // k − i + 1 blocks (i = 1..k), and the group read now
                    // fills k more: v·k(k+1)/2 + v·k.
                    host_blocks: group * k * (k + 3) / 2,
                    drive_cache_blocks: 0,
                    // A new stream waits up to k − 1 rounds for its group's
                    // round, then is read and sent as under Sweep.
                    startup_rounds_max: k + 1,
                })
            }
        }
    }

    /// Sweep&Prefetch with the most streams: for each p the cache allows,
    /// the largest v that fits; ties go to fewer prefetches.
    pub fn best_sweep_prefetch(&self) -> Operating {
        let t = self.transfer_ns(1);
        let random_ns = self.random_ns(1);
        let mut best = self.operate(Policy::Sweep).expect("Sweep always fits");
        for prefetched in 1..=self.cache_blocks() {
            let Some(left) = self.available_ns().checked_sub(prefetched * t) else {
                break;
            };
            let random = left / random_ns;
            if random < prefetched {
                break;
            }
            let point = self
                .operate(Policy::SweepPrefetch { random, prefetched })
                .expect("chosen to fit");
            if point.streams > best.streams {
                best = point;
            }
        }
        best
    }

    /// Gradual Prefetching's most streams.
    pub fn best_gradual(&self) -> Operating {
        let mut best = self.operate(Policy::Sweep).expect("Sweep always fits");
        let mut streams = 1;
        while let Ok(point) = self.operate(Policy::Gradual { streams }) {
            best = point;
            streams += 1;
        }
        best
    }

    /// GPMP with prefetch depth `u`: the largest group that fits.
    pub fn gpmp(&self, prefetch_depth: u64) -> Operating {
        let group = self.available_ns() / self.random_ns(prefetch_depth + 1);
        self.operate(Policy::Gpmp {
            group,
            prefetch_depth,
        })
        .expect("chosen to fit")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1_000_000;

    #[test]
    fn seed003_worked_example_sweep_25_sweep_prefetch_28_gpmp_36() {
        let disk = DiskRound::seed003_example(2 * MB);
        assert_eq!(disk.block_bytes, 250_000);
        assert_eq!(disk.random_ns(1), 40_000_000, "o + t = 40 ms");
        assert_eq!(disk.transfer_ns(1), 25_000_000, "t = 25 ms");

        let sweep = disk.operate(Policy::Sweep).unwrap();
        assert_eq!(sweep.streams, 25);
        assert_eq!(sweep.disk_busy_ns, NS_PER_S);

        // Figure 2b: v = 20, p = 8 fills the round exactly.
        let sp = disk
            .operate(Policy::SweepPrefetch {
                random: 20,
                prefetched: 8,
            })
            .unwrap();
        assert_eq!(sp.streams, 28);
        assert_eq!(sp.disk_busy_ns, NS_PER_S);
        assert_eq!(sp.drive_cache_blocks, 8);
        // Three streams past Sweep's 25 hold a third block in the switch.
        assert_eq!(sp.host_blocks, 2 * 28 + 3);
        assert_eq!(sp.startup_rounds_max, 3);
        // One more random read, or one more prefetch, does not fit the round
        // or the 2 MB cache (8 blocks).
        assert!(matches!(
            disk.operate(Policy::SweepPrefetch {
                random: 21,
                prefetched: 8
            }),
            Err(PolicyError::DiskTime { .. })
        ));
        assert_eq!(
            disk.operate(Policy::SweepPrefetch {
                random: 19,
                prefetched: 9
            }),
            Err(PolicyError::DriveCache {
                prefetched: 9,
                cache_blocks: 8
            })
        );
        // And 28 is the best S&P on this drive.
        let best = disk.best_sweep_prefetch();
        assert_eq!(
            (best.streams, best.random_reads, best.prefetched_blocks),
            (28, 20, 8)
        );

        // Figure 3: v = 6, u = 5: 6 · (15 + 6 · 25) ms = 990 ms.
        let gpmp = disk
            .operate(Policy::Gpmp {
                group: 6,
                prefetch_depth: 5,
            })
            .unwrap();
        assert_eq!(gpmp.streams, 36);
        assert_eq!(gpmp.disk_busy_ns, 990_000_000);
        assert_eq!(disk.gpmp(5).streams, 36);
        assert!(
            disk.operate(Policy::Gpmp {
                group: 7,
                prefetch_depth: 5
            })
            .is_err()
        );
        // u = 0 is Sweep ("GPMP's performance equals Sweep's").
        assert_eq!(disk.gpmp(0).streams, sweep.streams);
    }

    #[test]
    fn a_larger_cache_lets_sweep_prefetch_and_gradual_carry_more() {
        let small = DiskRound::seed003_example(2 * MB);
        let large = DiskRound::seed003_example(12 * MB);
        // With room for every prefetch, S&P is Gradual at its limit: half
        // the streams prefetched, 65 ms per pair: ⌊1000 / 65⌋ pairs.
        let best = large.best_sweep_prefetch();
        assert_eq!(best.streams, 30, "{best:?}");
        assert_eq!(large.best_gradual().streams, 30);
        assert!(small.best_gradual().streams <= small.best_sweep_prefetch().streams);
        // Gradual never needs the transition's third block.
        let g = large.best_gradual();
        assert_eq!(g.host_blocks, 2 * g.streams);
        assert_eq!(g.startup_rounds_max, 2);
    }

    #[test]
    fn gpmp_trades_memory_and_startup_for_streams() {
        let disk = DiskRound::seed003_example(0);
        let mut last = disk.gpmp(0);
        let mut best = last.streams;
        for u in 1..=10 {
            let point = disk.gpmp(u);
            // N = k·⌊T / (o + k·t)⌋: not monotone in u (u = 2 carries 33,
            // u = 3 only 32), because whole groups must fit the round.
            let k = u + 1;
            assert_eq!(point.streams, k * (NS_PER_S / disk.random_ns(k)), "u = {u}");
            // Memory per stream and start-up grow with the epoch.
            assert!(
                point.host_blocks * last.streams >= last.host_blocks * point.streams,
                "u = {u}: {point:?}"
            );
            assert!(point.startup_rounds_max > last.startup_rounds_max);
            best = best.max(point.streams);
            last = point;
        }
        assert_eq!(
            best, 36,
            "the most GPMP carries here (u = 5, and u = 8 with 4 groups)"
        );
        // Sweep's double buffering is GPMP with k = 1.
        let sweep = disk.operate(Policy::Sweep).unwrap();
        assert_eq!(disk.gpmp(0).host_blocks, sweep.host_blocks);
    }
}
