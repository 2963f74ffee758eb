//! A placed title: device extents per round and replica, and the strides the
//! title holds per disk and replica.
//!
//! A title's bytes for one replica on one disk form a packed, title-local byte
//! space; its n-th stride-sized piece lives in the n-th stride of the title's
//! list for that (disk, replica). [`TitleStrides`] is that list, which is all
//! the store persists; [`TitleLayout::from_strides`] turns it and the title's
//! [`TitlePlan`] back into extents.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::plan::TitlePlan;
use super::{LayoutError, Replica};
use crate::units::{DiskIndex, SECTOR_BYTES};

/// A contiguous byte range inside one stride of one disk.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Extent {
    /// The stride, counted from LBN 0 of the disk.
    pub stride_index: u64,
    pub offset_in_stride_bytes: u64,
    /// `stride_index · stride_bytes + offset_in_stride_bytes`.
    pub device_offset_bytes: u64,
    pub length_bytes: u64,
}

impl Extent {
    /// The first logical block number, in 512-byte sectors from the start of
    /// the disk's stride area.
    pub fn first_sector(&self) -> u64 {
        self.device_offset_bytes / SECTOR_BYTES
    }

    /// Length in 512-byte sectors.
    pub fn sector_count(&self) -> u64 {
        self.length_bytes / SECTOR_BYTES
    }

    /// One past the last byte on the device.
    pub fn device_end_bytes(&self) -> u64 {
        self.device_offset_bytes + self.length_bytes
    }
}

/// The 0–2 extents of one request (at most two partial stride accesses).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Extents {
    count: u8,
    /// Unused slots stay `Extent::default()` so that equality is by content.
    items: [Extent; 2],
}

impl Extents {
    /// The extents, in data order.
    pub fn as_slice(&self) -> &[Extent] {
        &self.items[..usize::from(self.count)]
    }

    pub fn len(&self) -> usize {
        usize::from(self.count)
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Total length.
    pub fn bytes(&self) -> u64 {
        self.as_slice().iter().map(|e| e.length_bytes).sum()
    }

    /// The extents of `bytes` at `offset_bytes` of a title-local space whose
    /// strides are `strides`.
    fn map(strides: &[u64], offset_bytes: u64, bytes: u64, stride_bytes: u64) -> Extents {
        let mut out = Extents::default();
        let mut offset = offset_bytes;
        let mut left = bytes;
        while left > 0 {
            let stride_index = strides[(offset / stride_bytes) as usize];
            let offset_in_stride_bytes = offset % stride_bytes;
            let length_bytes = left.min(stride_bytes - offset_in_stride_bytes);
            out.items[usize::from(out.count)] = Extent {
                stride_index,
                offset_in_stride_bytes,
                device_offset_bytes: stride_index * stride_bytes + offset_in_stride_bytes,
                length_bytes,
            };
            out.count += 1;
            offset += length_bytes;
            left -= length_bytes;
        }
        out
    }
}

/// The part of a round's backup stored on one disk: one request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BackupExtents {
    pub disk: DiskIndex,
    pub extents: Extents,
    /// Byte ranges of the round's data, in the order they are stored: the
    /// extents, read in order, hold these ranges back to back.
    pub fragments: Vec<Range<u64>>,
}

/// One round of a placed title.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RoundLayout {
    pub primary_disk: DiskIndex,
    /// Empty for an empty round.
    pub primary: Extents,
    /// One entry per disk holding part of the backup, in the order of
    /// [`TitlePlan::backups`]; empty without backups.
    pub backups: Vec<BackupExtents>,
}

/// The strides a title holds, per disk and replica, in title-local order:
/// entry n of a list holds bytes `[n·stride_bytes, (n+1)·stride_bytes)` of
/// the title's packed space for that disk and replica. This is what the store
/// persists and frees on delete.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TitleStrides {
    primary: Vec<Vec<u64>>,
    backup: Vec<Vec<u64>>,
}

impl TitleStrides {
    /// No strides on any of `disk_count` disks.
    pub fn empty(disk_count: u32) -> TitleStrides {
        TitleStrides {
            primary: vec![Vec::new(); disk_count as usize],
            backup: vec![Vec::new(); disk_count as usize],
        }
    }

    /// D.
    pub fn disk_count(&self) -> u32 {
        self.primary.len() as u32
    }

    /// The strides held on `disk` for `replica`, in title-local order.
    pub fn strides(&self, disk: DiskIndex, replica: Replica) -> &[u64] {
        match replica {
            Replica::Primary => &self.primary[disk.0 as usize],
            Replica::Backup => &self.backup[disk.0 as usize],
        }
    }

    /// Appends the next title-local stride of (`disk`, `replica`), for
    /// rebuilding from persisted rows in ordinal order.
    pub fn push(&mut self, disk: DiskIndex, replica: Replica, stride: u64) {
        self.list_mut(disk, replica).push(stride);
    }

    /// Every held stride as (disk, replica, stride), by disk, then primary
    /// before backup, then title-local order; the position within a
    /// (disk, replica) group is the stride's ordinal.
    pub fn iter(&self) -> impl Iterator<Item = (DiskIndex, Replica, u64)> + '_ {
        (0..self.primary.len()).flat_map(move |k| {
            let disk = DiskIndex(k as u32);
            let primary = self.primary[k]
                .iter()
                .map(move |&s| (disk, Replica::Primary, s));
            let backup = self.backup[k]
                .iter()
                .map(move |&s| (disk, Replica::Backup, s));
            primary.chain(backup)
        })
    }

    /// Number of strides held.
    pub fn count(&self) -> u64 {
        self.primary
            .iter()
            .chain(&self.backup)
            .map(|l| l.len() as u64)
            .sum()
    }

    pub(super) fn list_mut(&mut self, disk: DiskIndex, replica: Replica) -> &mut Vec<u64> {
        match replica {
            Replica::Primary => &mut self.primary[disk.0 as usize],
            Replica::Backup => &mut self.backup[disk.0 as usize],
        }
    }
}

/// A title with its data placed: extents per round and replica, and the
/// strides it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TitleLayout {
    stride_bytes: u64,
    rounds: Vec<RoundLayout>,
    strides: TitleStrides,
}

impl TitleLayout {
    /// The layout of `plan` whose title-local strides are `strides` (from
    /// [`ArrayAllocator::place`](super::ArrayAllocator::place) or from the
    /// store). Fails when a stride list is not exactly as long as the plan needs.
    pub fn from_strides(
        plan: &TitlePlan,
        strides: TitleStrides,
    ) -> Result<TitleLayout, LayoutError> {
        if strides.disk_count() != plan.disk_count() {
            return Err(LayoutError::DiskCountMismatch {
                plan_disks: plan.disk_count(),
                array_disks: strides.disk_count(),
            });
        }
        for k in 0..plan.disk_count() {
            let disk = DiskIndex(k);
            for replica in [Replica::Primary, Replica::Backup] {
                let expected = plan.strides_needed(disk, replica);
                let found = strides.strides(disk, replica).len() as u64;
                if expected != found {
                    return Err(LayoutError::StrideListMismatch {
                        disk,
                        replica,
                        expected,
                        found,
                    });
                }
            }
        }
        let stride_bytes = plan.params().stride_bytes;
        let rounds = (0..plan.rounds())
            .map(|round| {
                let primary = plan.primary(round);
                let backups = plan
                    .backups(round)
                    .iter()
                    .zip(plan.backup_offset_bytes(round))
                    .enumerate()
                    .map(|(entry, (read, &offset))| BackupExtents {
                        disk: read.disk,
                        extents: Extents::map(
                            strides.strides(read.disk, Replica::Backup),
                            offset,
                            read.bytes,
                            stride_bytes,
                        ),
                        fragments: plan.fragment_ranges(round, entry).collect(),
                    })
                    .collect();
                RoundLayout {
                    primary_disk: primary.disk,
                    primary: Extents::map(
                        strides.strides(primary.disk, Replica::Primary),
                        plan.primary_offset_bytes(round),
                        primary.bytes,
                        stride_bytes,
                    ),
                    backups,
                }
            })
            .collect();
        Ok(TitleLayout {
            stride_bytes,
            rounds,
            strides,
        })
    }

    pub fn stride_bytes(&self) -> u64 {
        self.stride_bytes
    }

    /// All rounds, in order.
    pub fn rounds(&self) -> &[RoundLayout] {
        &self.rounds
    }

    /// Round `round`.
    pub fn round(&self, round: usize) -> &RoundLayout {
        &self.rounds[round]
    }

    /// The `(first sector, sector count)` pairs of one request: the primary of
    /// round `round` (`backup_entry` `None`) or backup request `backup_entry`
    /// (an index into [`TitlePlan::backups`]). This is the form the disk
    /// model and the rondo-mode bound take.
    pub fn request_extents(&self, round: usize, backup_entry: Option<usize>) -> Vec<(u64, u64)> {
        let r = &self.rounds[round];
        let extents = match backup_entry {
            None => &r.primary,
            Some(e) => &r.backups[e].extents,
        };
        extents
            .as_slice()
            .iter()
            .map(|x| (x.first_sector(), x.sector_count()))
            .collect()
    }

    /// The strides the title holds (persist them; free them on delete).
    pub fn strides(&self) -> &TitleStrides {
        &self.strides
    }
}
