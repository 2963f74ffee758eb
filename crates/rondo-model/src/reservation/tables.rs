//! One disk's reserved time in one round: the cell of the reservation tables.
//!
//! A slot keeps the primary (planned) time, the mirrored backup sum, and
//! for minimum reservation a short sorted list of backup time per source
//! disk with its maximum cached, so adding and removing a stream is cheap
//! and no D² dense vector is ever built.

use super::Scheme;
use super::guarantee::RotationCredit;
use crate::units::DiskIndex;

/// What one read reserves on one disk in one round: a read there, or
/// backup time for a read whose primary lies on `source`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum SlotCharge {
    Read {
        cost_ns: u64,
        /// Revolutions `cost_ns` includes (`Charge::revolutions`); what a
        /// statistical guarantee credits.
        revolutions: u16,
    },
    Backup {
        source: DiskIndex,
        cost_ns: u64,
    },
    /// A block held in one of the drive's cache segments through the round
    /// (a drive-cache pair's prefetched block: from its prefetch to its
    /// hit), and, for the hit on a drive that sends hits while its heads
    /// work (`CacheSpec::command_queueing`), the hit's bus time.
    CacheBlock {
        hit_bus_ns: u64,
    },
}

/// One disk's reserved time in one round.
#[derive(Clone, Debug, Default)]
pub(super) struct DiskSlot {
    /// Reads that will happen: primaries, and reads rerouted to this disk.
    /// Their charges, less under a statistical guarantee the rotation
    /// credit of their `revolutions` (`guarantee`: k·T_rev − q(k)).
    pub(super) primary_ns: u64,
    /// The revolutions the reads' charges include.
    pub(super) revolutions: u32,
    /// Mirroring: all backup time on this disk.
    pub(super) backup_sum_ns: u64,
    /// Minimum: backup time on this disk per source (primary) disk, sorted by
    /// source; its maximum is cached in `backup_max_ns`.
    pub(super) backup_by_source: Vec<(DiskIndex, u64)>,
    pub(super) backup_max_ns: u64,
    /// Drive cache segments held by prefetched blocks in the round.
    pub(super) cache_blocks: u32,
    /// Bus time of the round's hits on a drive that overlaps them with its
    /// heads' work (0 on any other drive).
    pub(super) hit_bus_ns: u64,
}

impl DiskSlot {
    /// The disk time reserved: the reads' charges (primaries and the
    /// scheme's backup time) or, on a drive that sends its hits over the bus
    /// while the heads work, the bus time if larger: the hits' bus time
    /// plus `bus_share_ppm` (the largest share of the bus the media's data
    /// takes) of the reads' charges (docs/retrieval.md derives it).
    pub(super) fn reserved_ns(&self, scheme: Scheme, bus_share_ppm: u32) -> u64 {
        disk_or_bus_ns(self.disk_ns(scheme), self.hit_bus_ns, bus_share_ppm)
    }

    fn disk_ns(&self, scheme: Scheme) -> u64 {
        self.primary_ns
            + match scheme {
                Scheme::Mirroring => self.backup_sum_ns,
                Scheme::Minimum => self.backup_max_ns,
                Scheme::None | Scheme::Unreserved | Scheme::Dynamic => 0,
            }
    }

    /// The reserved time (as `reserved_ns` counts it) once `charge` is added.
    pub(super) fn reserved_with(
        &self,
        charge: SlotCharge,
        scheme: Scheme,
        bus_share_ppm: u32,
        rotation: Option<&RotationCredit>,
    ) -> u64 {
        let disk_ns = match charge {
            SlotCharge::Read {
                cost_ns,
                revolutions,
            } => {
                let credit = |k| rotation.map_or(0, |r| r.credit_ns(k));
                // The charges' sum never falls below the credit of its
                // revolutions, so the order of the terms cannot underflow.
                self.disk_ns(scheme) + credit(self.revolutions) + cost_ns
                    - credit(self.revolutions + u32::from(revolutions))
            }
            SlotCharge::Backup { source, cost_ns } => match scheme {
                Scheme::Mirroring => self.disk_ns(scheme) + cost_ns,
                Scheme::Minimum => {
                    self.primary_ns + self.backup_max_ns.max(self.backup_from(source) + cost_ns)
                }
                Scheme::None | Scheme::Unreserved | Scheme::Dynamic => self.disk_ns(scheme),
            },
            SlotCharge::CacheBlock { .. } => self.disk_ns(scheme),
        };
        let hit_bus_ns = match charge {
            SlotCharge::CacheBlock { hit_bus_ns } => self.hit_bus_ns + hit_bus_ns,
            _ => self.hit_bus_ns,
        };
        disk_or_bus_ns(disk_ns, hit_bus_ns, bus_share_ppm)
    }

    /// Adds (`sign` = 1) or removes (`sign` = -1) `charge`.
    pub(super) fn charge(
        &mut self,
        charge: SlotCharge,
        sign: i8,
        rotation: Option<&RotationCredit>,
    ) {
        match (charge, sign > 0) {
            (
                SlotCharge::Read {
                    cost_ns,
                    revolutions,
                },
                add,
            ) => {
                let credit = |k| rotation.map_or(0, |r| r.credit_ns(k));
                // The reads' charges, taken out of the credited time, then
                // the credit of the new count of revolutions.
                let charges_ns = self.primary_ns + credit(self.revolutions);
                let revolutions = u32::from(revolutions);
                let (charges_ns, revolutions) = if add {
                    (charges_ns + cost_ns, self.revolutions + revolutions)
                } else {
                    (
                        charges_ns
                            .checked_sub(cost_ns)
                            .expect("released more than was reserved"),
                        self.revolutions
                            .checked_sub(revolutions)
                            .expect("released more revolutions than were reserved"),
                    )
                };
                self.primary_ns = charges_ns - credit(revolutions);
                self.revolutions = revolutions;
            }
            (SlotCharge::Backup { source, cost_ns }, true) => self.add_backup(source, cost_ns),
            (SlotCharge::Backup { source, cost_ns }, false) => self.remove_backup(source, cost_ns),
            (SlotCharge::CacheBlock { hit_bus_ns }, true) => {
                self.cache_blocks += 1;
                self.hit_bus_ns += hit_bus_ns;
            }
            (SlotCharge::CacheBlock { hit_bus_ns }, false) => {
                self.cache_blocks = self
                    .cache_blocks
                    .checked_sub(1)
                    .expect("released a cache block never reserved");
                self.hit_bus_ns = self
                    .hit_bus_ns
                    .checked_sub(hit_bus_ns)
                    .expect("released hit bus time never reserved");
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
        self.revolutions = 0;
        self.backup_sum_ns = 0;
        self.backup_max_ns = 0;
        self.backup_by_source.clear();
        self.backup_by_source.shrink_to(4);
        self.cache_blocks = 0;
        self.hit_bus_ns = 0;
    }
}

/// A disk-round's time on a drive that overlaps hits' bus transfers with
/// its heads' work: the later of the heads' work (`disk_ns`) and the bus's
/// (the hits' plus at most `bus_share_ppm` of the heads' work). Without
/// such hits it is `disk_ns`.
fn disk_or_bus_ns(disk_ns: u64, hit_bus_ns: u64, bus_share_ppm: u32) -> u64 {
    if hit_bus_ns == 0 {
        return disk_ns;
    }
    let media_bus_ns = (u128::from(disk_ns) * u128::from(bus_share_ppm)).div_ceil(1_000_000);
    disk_ns.max(hit_bus_ns + media_bus_ns as u64)
}
