//! Disk space in strides: one first-fit allocator per disk, and the array of
//! them that places a [`TitlePlan`] all or nothing.
//!
//! A disk's space is the sequence of strides 0, 1, … from LBN 0 (seed 000
//! §2.2). Strides are handed out lowest free index first, a title's strides
//! of one replica on one disk as one run of adjacent strides where one fits
//! (so its rounds that cross a stride end are one access for the disk), so a
//! layout depends only on the order of allocations and frees, and the
//! allocator is rebuilt on restart from the stride lists the store persisted
//! for each title.

use super::extent::TitleStrides;
use super::plan::TitlePlan;
use super::{LayoutError, Replica, TitleLayout};
use crate::units::DiskIndex;

/// Which strides of one disk are in use: a bitmap, first fit from stride 0.
/// Equality compares the strides in use, not the search hint.
#[derive(Clone, Debug)]
pub struct StrideAllocator {
    stride_count: u64,
    free_count: u64,
    /// Bit s of word s / 64 is set when stride s is allocated.
    used: Vec<u64>,
    /// No word below this one has a free stride (a search hint, not state
    /// that changes results).
    first_candidate_word: usize,
}

impl StrideAllocator {
    /// An empty disk of `stride_count` strides.
    pub fn new(stride_count: u64) -> StrideAllocator {
        let words = usize::try_from(stride_count.div_ceil(64)).expect("stride count fits memory");
        let mut used = vec![0u64; words];
        // Strides past the end are marked used so the search never returns them.
        let tail = stride_count % 64;
        if tail != 0 {
            used[words - 1] = !0u64 << tail;
        }
        StrideAllocator {
            stride_count,
            free_count: stride_count,
            used,
            first_candidate_word: 0,
        }
    }

    /// An empty disk of `capacity_bytes`, in whole strides (a partial stride
    /// at the end is not used).
    pub fn for_capacity(capacity_bytes: u64, stride_bytes: u64) -> StrideAllocator {
        assert!(stride_bytes > 0);
        StrideAllocator::new(capacity_bytes / stride_bytes)
    }

    /// Strides on the disk.
    pub fn stride_count(&self) -> u64 {
        self.stride_count
    }

    /// Strides not allocated.
    pub fn free_count(&self) -> u64 {
        self.free_count
    }

    /// The highest allocated stride, `None` on an empty disk: where the
    /// data on this disk ends (first fit keeps it packed from LBN 0, so a
    /// bound may charge the stroke up to here, `docs/guarantee.md`).
    pub fn highest_allocated(&self) -> Option<u64> {
        let words = self.used.len();
        (0..words).rev().find_map(|w| {
            let mut word = self.used[w];
            // The padding past the last stride is marked used; it holds no data.
            if w + 1 == words && !self.stride_count.is_multiple_of(64) {
                word &= !(!0u64 << (self.stride_count % 64));
            }
            (word != 0).then(|| w as u64 * 64 + 63 - u64::from(word.leading_zeros()))
        })
    }

    /// Whether stride `stride` is free (false beyond the end of the disk).
    pub fn is_free(&self, stride: u64) -> bool {
        stride < self.stride_count && self.used[(stride / 64) as usize] & (1 << (stride % 64)) == 0
    }

    /// Allocates the lowest free stride, or `None` when the disk is full.
    pub fn allocate(&mut self) -> Option<u64> {
        let start = self.first_candidate_word;
        let offset = self.used[start..].iter().position(|&w| w != !0u64)?;
        let word = start + offset;
        let bit = (!self.used[word]).trailing_zeros();
        self.used[word] |= 1 << bit;
        self.free_count -= 1;
        self.first_candidate_word = word;
        Some(word as u64 * 64 + u64::from(bit))
    }

    /// Allocates the lowest run of `count` consecutive free strides and
    /// returns its first, or `None` when the disk has no such run (or
    /// `count` is 0).
    pub fn allocate_run(&mut self, count: u64) -> Option<u64> {
        if count == 0 || count > self.free_count {
            return None;
        }
        let (mut start, mut length) = (0u64, 0u64);
        let mut stride = self.first_candidate_word as u64 * 64;
        while stride < self.stride_count {
            let word = self.used[(stride / 64) as usize];
            if stride.is_multiple_of(64) && word == !0u64 {
                // A whole word in use ends any run.
                length = 0;
                stride += 64;
                continue;
            }
            if word & (1 << (stride % 64)) == 0 {
                if length == 0 {
                    start = stride;
                }
                length += 1;
                if length == count {
                    for s in start..start + count {
                        self.used[(s / 64) as usize] |= 1 << (s % 64);
                    }
                    self.free_count -= count;
                    return Some(start);
                }
            } else {
                length = 0;
            }
            stride += 1;
        }
        None
    }

    /// Marks stride `stride` allocated (rebuilding from persisted lists).
    pub fn mark_allocated(&mut self, disk: DiskIndex, stride: u64) -> Result<(), LayoutError> {
        self.check_in_range(disk, stride)?;
        if !self.is_free(stride) {
            return Err(LayoutError::StrideHeldTwice { disk, stride });
        }
        self.used[(stride / 64) as usize] |= 1 << (stride % 64);
        self.free_count -= 1;
        Ok(())
    }

    /// Frees stride `stride`; an error when it is not allocated.
    pub fn free(&mut self, disk: DiskIndex, stride: u64) -> Result<(), LayoutError> {
        self.check_in_range(disk, stride)?;
        if self.is_free(stride) {
            return Err(LayoutError::StrideNotAllocated { disk, stride });
        }
        let word = (stride / 64) as usize;
        self.used[word] &= !(1 << (stride % 64));
        self.free_count += 1;
        self.first_candidate_word = self.first_candidate_word.min(word);
        Ok(())
    }

    fn check_in_range(&self, disk: DiskIndex, stride: u64) -> Result<(), LayoutError> {
        if stride >= self.stride_count {
            return Err(LayoutError::StrideOutOfRange {
                disk,
                stride,
                stride_count: self.stride_count,
            });
        }
        Ok(())
    }
}

impl PartialEq for StrideAllocator {
    fn eq(&self, other: &StrideAllocator) -> bool {
        self.stride_count == other.stride_count && self.used == other.used
    }
}

impl Eq for StrideAllocator {}

/// The stride allocators of all D disks. Not serialised: the store persists
/// each title's [`TitleStrides`] and calls [`ArrayAllocator::rebuild`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArrayAllocator {
    disks: Vec<StrideAllocator>,
}

impl ArrayAllocator {
    /// Empty disks with the given stride counts (index = disk).
    pub fn new(stride_counts: &[u64]) -> ArrayAllocator {
        ArrayAllocator {
            disks: stride_counts
                .iter()
                .map(|&n| StrideAllocator::new(n))
                .collect(),
        }
    }

    /// `disk_count` empty disks of `stride_count` strides each.
    pub fn uniform(disk_count: u32, stride_count: u64) -> ArrayAllocator {
        ArrayAllocator::new(&vec![stride_count; disk_count as usize])
    }

    /// The allocators as they were before a restart: empty disks of
    /// `stride_counts`, then every stride the stored titles hold. Two titles
    /// (or replicas) holding one stride is an error, not a silent overlap.
    pub fn rebuild<'a>(
        stride_counts: &[u64],
        titles: impl IntoIterator<Item = &'a TitleStrides>,
    ) -> Result<ArrayAllocator, LayoutError> {
        let mut array = ArrayAllocator::new(stride_counts);
        for title in titles {
            array.check_disk_count(title.disk_count())?;
            for (disk, _replica, stride) in title.iter() {
                array.disks[disk.0 as usize].mark_allocated(disk, stride)?;
            }
        }
        Ok(array)
    }

    /// Marks one stride of one disk allocated outside any title (e.g. space
    /// the store keeps for itself, or data placed further in for a test).
    pub fn mark_allocated(&mut self, disk: DiskIndex, stride: u64) -> Result<(), LayoutError> {
        self.check_disk(disk)?;
        self.disks[disk.0 as usize].mark_allocated(disk, stride)
    }

    /// Frees one stride marked with [`ArrayAllocator::mark_allocated`].
    pub fn free(&mut self, disk: DiskIndex, stride: u64) -> Result<(), LayoutError> {
        self.check_disk(disk)?;
        self.disks[disk.0 as usize].free(disk, stride)
    }

    /// D.
    pub fn disk_count(&self) -> u32 {
        self.disks.len() as u32
    }

    /// The highest stride any disk holds data in (`None`: every disk is
    /// empty).
    pub fn highest_allocated(&self) -> Option<u64> {
        self.disks
            .iter()
            .filter_map(StrideAllocator::highest_allocated)
            .max()
    }

    /// The allocator of one disk.
    pub fn disk(&self, disk: DiskIndex) -> &StrideAllocator {
        &self.disks[disk.0 as usize]
    }

    /// Allocates the strides `plan` needs and returns the title's layout. All
    /// or nothing: when some disk lacks space the error names the first such
    /// disk and no allocator changes.
    ///
    /// On each disk in turn, the title's primary strides are taken as one
    /// run of adjacent strides (the lowest run that fits), then its backup
    /// strides as another, so a round that crosses a stride end continues on
    /// the next stride of the device and the disk reads it in one access
    /// (admission charges it as one, `Bound::extents_ns`). Where a disk has
    /// no such run (its free space in pieces) the strides of that replica
    /// are taken as the data would be written: round by round, each new
    /// title-local stride first fit when the data first reaches it.
    pub fn place(&mut self, plan: &TitlePlan) -> Result<TitleLayout, LayoutError> {
        self.check_disk_count(plan.disk_count())?;
        for (k, allocator) in self.disks.iter().enumerate() {
            let needed_strides = plan.strides_needed_on(DiskIndex(k as u32));
            if needed_strides > allocator.free_count() {
                return Err(LayoutError::DiskFull {
                    disk: DiskIndex(k as u32),
                    needed_strides,
                    free_strides: allocator.free_count(),
                });
            }
        }
        let stride_bytes = plan.params().stride_bytes;
        let mut strides = TitleStrides::empty(plan.disk_count());
        for (k, allocator) in self.disks.iter_mut().enumerate() {
            let disk = DiskIndex(k as u32);
            for replica in [Replica::Primary, Replica::Backup] {
                let count = plan.strides_needed(disk, replica);
                if let Some(first) = allocator.allocate_run(count) {
                    strides.list_mut(disk, replica).extend(first..first + count);
                }
            }
        }
        let mut take = |disk: DiskIndex, replica: Replica, offset_bytes: u64, bytes: u64| {
            if bytes == 0 {
                return;
            }
            let list = strides.list_mut(disk, replica);
            let last_local = (offset_bytes + bytes - 1) / stride_bytes;
            while list.len() as u64 <= last_local {
                let stride = self.disks[disk.0 as usize]
                    .allocate()
                    .expect("free strides were counted before allocating");
                list.push(stride);
            }
        };
        for round in 0..plan.rounds() {
            let primary = plan.primary(round);
            take(
                primary.disk,
                Replica::Primary,
                plan.primary_offset_bytes(round),
                primary.bytes,
            );
            for (read, &offset) in plan
                .backups(round)
                .iter()
                .zip(plan.backup_offset_bytes(round))
            {
                take(read.disk, Replica::Backup, offset, read.bytes);
            }
        }
        Ok(TitleLayout::from_strides(plan, strides)
            .expect("strides allocated from the plan match the plan"))
    }

    /// Frees every stride of a deleted title. All or nothing: a stride that
    /// is not allocated, out of range or listed twice leaves everything as it was.
    pub fn release(&mut self, title: &TitleStrides) -> Result<(), LayoutError> {
        self.check_disk_count(title.disk_count())?;
        // Validate everything first: cloning the bitmaps of a large array
        // would cost more than sorting one title's strides.
        let mut held: Vec<(DiskIndex, u64)> = title.iter().map(|(d, _, s)| (d, s)).collect();
        held.sort_unstable();
        for pair in held.windows(2) {
            if pair[0] == pair[1] {
                let (disk, stride) = pair[0];
                return Err(LayoutError::StrideHeldTwice { disk, stride });
            }
        }
        for &(disk, stride) in &held {
            let allocator = &self.disks[disk.0 as usize];
            allocator.check_in_range(disk, stride)?;
            if allocator.is_free(stride) {
                return Err(LayoutError::StrideNotAllocated { disk, stride });
            }
        }
        for (disk, stride) in held {
            self.disks[disk.0 as usize]
                .free(disk, stride)
                .expect("checked allocated above");
        }
        Ok(())
    }

    fn check_disk(&self, disk: DiskIndex) -> Result<(), LayoutError> {
        if disk.0 >= self.disk_count() {
            return Err(LayoutError::NoSuchDisk {
                disk,
                disk_count: self.disk_count(),
            });
        }
        Ok(())
    }

    fn check_disk_count(&self, plan_disks: u32) -> Result<(), LayoutError> {
        if plan_disks != self.disk_count() {
            return Err(LayoutError::DiskCountMismatch {
                plan_disks,
                array_disks: self.disk_count(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_from_stride_zero_and_reuse_after_free() {
        let d = DiskIndex(0);
        let mut a = StrideAllocator::new(130);
        assert_eq!(a.free_count(), 130);
        let got: Vec<u64> = (0..130).map(|_| a.allocate().unwrap()).collect();
        assert_eq!(got, (0..130).collect::<Vec<_>>());
        assert_eq!(a.allocate(), None);
        assert!(!a.is_free(129) && !a.is_free(130));
        a.free(d, 70).unwrap();
        a.free(d, 3).unwrap();
        a.free(d, 128).unwrap();
        assert_eq!(a.free_count(), 3);
        assert!(a.is_free(3) && a.is_free(70) && a.is_free(128));
        assert_eq!(a.allocate(), Some(3));
        assert_eq!(a.allocate(), Some(70));
        assert_eq!(a.allocate(), Some(128));
        assert_eq!(a.allocate(), None);
    }

    #[test]
    fn a_run_is_the_lowest_one_that_fits_across_words() {
        let d = DiskIndex(0);
        let mut a = StrideAllocator::new(200);
        let all: Vec<u64> = (0..200).map(|_| a.allocate().unwrap()).collect();
        assert_eq!(all.len(), 200);
        // Free 5..8 (3), 60..70 (10, across the word boundary at 64), 150..200 (50).
        for s in (5..8).chain(60..70).chain(150..200) {
            a.free(d, s).unwrap();
        }
        assert_eq!(a.allocate_run(4), Some(60));
        assert!((60..64).all(|s| !a.is_free(s)) && a.is_free(64));
        assert_eq!(a.allocate_run(3), Some(5));
        assert_eq!(a.allocate_run(7), Some(150));
        assert_eq!(a.allocate_run(44), None, "43 strides are left in one run");
        assert_eq!(a.allocate_run(43), Some(157));
        assert_eq!(a.free_count(), 6);
        assert_eq!(a.allocate_run(0), None);
        assert_eq!(a.allocate(), Some(64));
    }

    #[test]
    fn misuse_is_reported() {
        let d = DiskIndex(2);
        let mut a = StrideAllocator::new(10);
        assert_eq!(
            a.free(d, 4),
            Err(LayoutError::StrideNotAllocated { disk: d, stride: 4 })
        );
        assert_eq!(
            a.free(d, 10),
            Err(LayoutError::StrideOutOfRange {
                disk: d,
                stride: 10,
                stride_count: 10
            })
        );
        a.mark_allocated(d, 4).unwrap();
        assert_eq!(
            a.mark_allocated(d, 4),
            Err(LayoutError::StrideHeldTwice { disk: d, stride: 4 })
        );
        assert_eq!(a.free_count(), 9);
        assert_eq!(a.allocate(), Some(0));
    }

    #[test]
    fn capacity_counts_whole_strides_only() {
        assert_eq!(
            StrideAllocator::for_capacity(5 * 1024 + 1000, 1024).stride_count(),
            5
        );
        let mut empty = StrideAllocator::new(0);
        assert_eq!(empty.allocate(), None);
    }
}
