//! Round bounds: how much disk time a round of requests may take.
//!
//! This module owns the closed-form bounds admission control reserves disk
//! time with. `PaperBound` is seed 000 §2.3's expression (paper mode):
//!
//! T_disk = 2·T_fullSeek + Σ_requests [2·(T_trackSeek + T_avgRot) + bytes / R_disk]
//!
//! The first term is charged once per disk per round (the C-SCAN sweep and its
//! return), the bracket once per stream request, whether it touches one stride
//! or two. Transfer times are rounded up to whole nanoseconds so the bound
//! never under-counts. Both bounds implement `RoundBound`, the interface
//! admission uses: a fixed per-round part plus a per-request part.

use serde::{Deserialize, Serialize};

use crate::units::{NS_PER_S, SECTOR_BYTES, ms_to_ns};

/// A per-disk round bound: `fixed_ns()` once per disk per round plus
/// `extents_ns(request)` for every request (1–2 extents of `(lbn, sectors)`).
pub trait RoundBound {
    /// Charged once per disk per round.
    fn fixed_ns(&self) -> u64;
    /// Charged for one request: its 1–2 extents, each `(lbn, sectors)`.
    fn extents_ns(&self, extents: &[(u64, u64)]) -> u64;
    /// The bound for a whole round: fixed plus every request.
    fn round_extents_ns(&self, requests: &[&[(u64, u64)]]) -> u64 {
        self.fixed_ns() + requests.iter().map(|r| self.extents_ns(r)).sum::<u64>()
    }
}

/// Seed 000 §2.3's bound with its four parameters.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaperBound {
    /// T_fullSeek: edge-to-edge seek.
    pub full_seek_ns: u64,
    /// T_trackSeek: single-track seek.
    pub track_seek_ns: u64,
    /// T_avgRot: average rotational latency.
    pub avg_rot_ns: u64,
    /// R_disk: minimum internal transfer rate.
    pub rate_bytes_per_s: u64,
}

impl PaperBound {
    /// Seed 000 Table 2 (Seagate Cheetah datasheet): T_fullSeek 18.2 ms (read),
    /// T_trackSeek 0.98 ms (read), T_avgRot 2.99 ms, R_disk 11.3 MB/s (inner
    /// zone sustained; MB = 10^6 bytes).
    pub fn seed000_table2() -> PaperBound {
        PaperBound {
            full_seek_ns: ms_to_ns(18.2),
            track_seek_ns: ms_to_ns(0.98),
            avg_rot_ns: ms_to_ns(2.99),
            rate_bytes_per_s: 11_300_000,
        }
    }

    /// 2·T_fullSeek: charged once per disk per round.
    pub fn fixed_ns(&self) -> u64 {
        2 * self.full_seek_ns
    }

    /// bytes / R_disk, rounded up to a whole nanosecond.
    pub fn transfer_ns(&self, bytes: u64) -> u64 {
        assert!(self.rate_bytes_per_s > 0, "R_disk must be positive");
        (bytes as u128 * NS_PER_S as u128).div_ceil(self.rate_bytes_per_s as u128) as u64
    }

    /// 2·(T_trackSeek + T_avgRot) + bytes / R_disk: one stream request of `bytes`.
    pub fn request_ns(&self, bytes: u64) -> u64 {
        2 * (self.track_seek_ns + self.avg_rot_ns) + self.transfer_ns(bytes)
    }

    /// fixed + Σ request over the round's request sizes.
    pub fn round_ns(&self, request_bytes: &[u64]) -> u64 {
        self.fixed_ns()
            + request_bytes
                .iter()
                .map(|&b| self.request_ns(b))
                .sum::<u64>()
    }

    /// The largest number of requests of `request_bytes` each that fit in a
    /// round of `round_ns` (0 if not even one does).
    pub fn max_requests(&self, request_bytes: u64, round_ns: u64) -> u64 {
        let per = self.request_ns(request_bytes);
        round_ns.saturating_sub(self.fixed_ns()) / per
    }
}

impl RoundBound for PaperBound {
    fn fixed_ns(&self) -> u64 {
        PaperBound::fixed_ns(self)
    }

    /// The paper ignores where the data lies: total bytes of the extents.
    fn extents_ns(&self, extents: &[(u64, u64)]) -> u64 {
        let sectors: u64 = extents.iter().map(|&(_, s)| s).sum();
        self.request_ns(sectors * SECTOR_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn table2_values_and_one_request() {
        let b = PaperBound::seed000_table2();
        assert_eq!(b.fixed_ns(), 36_400_000);
        // 2·(0.98 + 2.99) ms = 7.94 ms; 11,300 bytes take exactly 1 ms at 11.3 MB/s.
        assert_eq!(b.request_ns(11_300), 7_940_000 + 1_000_000);
        // One byte takes 88.495... ns: rounded up to 89.
        assert_eq!(b.transfer_ns(1), 89);
        assert_eq!(b.round_ns(&[11_300, 11_300]), 36_400_000 + 2 * 8_940_000);
        assert_eq!(b.round_ns(&[]), 36_400_000);
        // Seed 000 Table 3's mean request (~625 KB): 15 streams per 1 s round.
        assert_eq!(b.max_requests(624_718, 1_000_000_000), 15);
        // The trait ignores LBNs and counts sectors.
        let via_trait: &dyn RoundBound = &b;
        assert_eq!(
            via_trait.extents_ns(&[(5, 10), (1_000_000, 12)]),
            b.request_ns(22 * 512)
        );
        assert_eq!(
            via_trait.round_extents_ns(&[&[(0, 10)], &[(9, 1), (99, 1)]]),
            b.round_ns(&[10 * 512, 2 * 512])
        );
    }

    #[test]
    fn transfer_never_under_counts() {
        let b = PaperBound::seed000_table2();
        for bytes in [1u64, 7, 512, 16_384, 625_000, 1_201_221, u32::MAX as u64] {
            let t = b.transfer_ns(bytes) as f64;
            let exact = bytes as f64 / 11.3e6 * 1e9;
            assert!(t >= exact && t < exact + 1.0, "{bytes}: {t} vs {exact}");
        }
    }

    proptest! {
        #[test]
        fn monotone_in_number_and_size_of_requests(
            sizes in prop::collection::vec(0u64..4_000_000, 0..40),
            extra in 0u64..4_000_000,
            grow_at in any::<prop::sample::Index>(),
            grow_by in 0u64..1_000_000,
        ) {
            let b = PaperBound::seed000_table2();
            let base = b.round_ns(&sizes);
            // One more request never lowers the bound, and raises it.
            let mut more = sizes.clone();
            more.push(extra);
            prop_assert!(b.round_ns(&more) > base);
            // A larger request never lowers it.
            if !sizes.is_empty() {
                let mut bigger = sizes.clone();
                let i = grow_at.index(bigger.len());
                bigger[i] += grow_by;
                prop_assert!(b.round_ns(&bigger) >= base);
            }
        }
    }
}
