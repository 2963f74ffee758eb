//! One disk's reserved time in one round: the cell of the reservation tables.
//!
//! A slot keeps the primary (planned) time, the mirrored backup sum, and
//! for minimum reservation a short sorted list of backup time per source
//! disk with its maximum cached, so adding and removing a stream is cheap
//! and no D² dense vector is ever built.

use super::Scheme;
use crate::units::DiskIndex;

/// What one read reserves on one disk in one round: a read there, or
/// backup time for a read whose primary lies on `source`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum SlotCharge {
    Read {
        cost_ns: u64,
    },
    Backup {
        source: DiskIndex,
        cost_ns: u64,
    },
    /// A block held in one of the drive's cache segments through the round
    /// (a drive-cache pair's prefetched block: from its prefetch to its hit).
    CacheBlock,
}

/// One disk's reserved time in one round.
#[derive(Clone, Debug, Default)]
pub(super) struct DiskSlot {
    /// Reads that will happen: primaries, and reads rerouted to this disk.
    pub(super) primary_ns: u64,
    /// Mirroring: all backup time on this disk.
    pub(super) backup_sum_ns: u64,
    /// Minimum: backup time on this disk per source (primary) disk, sorted by
    /// source; its maximum is cached in `backup_max_ns`.
    pub(super) backup_by_source: Vec<(DiskIndex, u64)>,
    pub(super) backup_max_ns: u64,
    /// Drive cache segments held by prefetched blocks in the round.
    pub(super) cache_blocks: u32,
}

impl DiskSlot {
    pub(super) fn reserved_ns(&self, scheme: Scheme) -> u64 {
        self.primary_ns
            + match scheme {
                Scheme::Mirroring => self.backup_sum_ns,
                Scheme::Minimum => self.backup_max_ns,
                Scheme::None | Scheme::Unreserved | Scheme::Dynamic => 0,
            }
    }

    /// The reserved time (as `reserved_ns` counts it) once `charge` is added.
    pub(super) fn reserved_with(&self, charge: SlotCharge, scheme: Scheme) -> u64 {
        match charge {
            SlotCharge::Read { cost_ns } => self.reserved_ns(scheme) + cost_ns,
            SlotCharge::Backup { source, cost_ns } => match scheme {
                Scheme::Mirroring => self.reserved_ns(scheme) + cost_ns,
                Scheme::Minimum => {
                    self.primary_ns + self.backup_max_ns.max(self.backup_from(source) + cost_ns)
                }
                Scheme::None | Scheme::Unreserved | Scheme::Dynamic => self.reserved_ns(scheme),
            },
            SlotCharge::CacheBlock => self.reserved_ns(scheme),
        }
    }

    /// Adds (`sign` = 1) or removes (`sign` = -1) `charge`.
    pub(super) fn charge(&mut self, charge: SlotCharge, sign: i8) {
        match (charge, sign > 0) {
            (SlotCharge::Read { cost_ns }, true) => self.primary_ns += cost_ns,
            (SlotCharge::Read { cost_ns }, false) => {
                self.primary_ns = self
                    .primary_ns
                    .checked_sub(cost_ns)
                    .expect("released more than was reserved")
            }
            (SlotCharge::Backup { source, cost_ns }, true) => self.add_backup(source, cost_ns),
            (SlotCharge::Backup { source, cost_ns }, false) => self.remove_backup(source, cost_ns),
            (SlotCharge::CacheBlock, true) => self.cache_blocks += 1,
            (SlotCharge::CacheBlock, false) => {
                self.cache_blocks = self
                    .cache_blocks
                    .checked_sub(1)
                    .expect("released a cache block never reserved")
            }
        }
    }

    pub(super) fn backup_from(&self, source: DiskIndex) -> u64 {
        match self.backup_by_source.binary_search_by_key(&source, |e| e.0) {
            Ok(i) => self.backup_by_source[i].1,
            Err(_) => 0,
        }
    }

    pub(super) fn add_backup(&mut self, source: DiskIndex, cost_ns: u64) {
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

    pub(super) fn remove_backup(&mut self, source: DiskIndex, cost_ns: u64) {
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

    pub(super) fn clear(&mut self) {
        self.primary_ns = 0;
        self.backup_sum_ns = 0;
        self.backup_max_ns = 0;
        self.backup_by_source.clear();
        self.backup_by_source.shrink_to(4);
        self.cache_blocks = 0;
    }
}
