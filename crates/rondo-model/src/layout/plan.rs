//! The pure per-round placement of one title: which disk serves each round's
//! primary and backup, with how many bytes and extents, and where each request
//! sits in the title's packed byte space on that disk.
//!
//! Nothing here allocates disk space. A plan is a function of the round sizes,
//! the [`LayoutParams`], the start disk and the seed, so admission-only runs
//! compute it for thousands of titles and read it per round without touching
//! an allocator, and the store recomputes it on restart from the catalog.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::rng::SplitMix64;
use super::{
    BackupParams, FragmentSequence, LayoutError, LayoutParams, Replica, ReplicaPlacement,
    RoundRobinCounter,
};
use crate::units::DiskIndex;

/// One request of one replica of one round: what admission reserves.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DiskRead {
    pub disk: DiskIndex,
    /// Stride accesses of the request: 0 for an empty round, else 1 or 2.
    pub extent_count: u32,
    pub bytes: u64,
}

/// A title's placement, round by round (see the module docs and
/// `docs/layout.md` for the rules).
///
/// Storage is flat so that per-round queries are two slice lookups: backups of
/// round i are `backup[backup_start[i]..backup_start[i + 1]]`. Serialisable
/// for inspection only; it is rebuilt from its inputs, never deserialised.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TitlePlan {
    params: LayoutParams,
    start_disk: DiskIndex,
    seed: u64,
    primary: Vec<DiskRead>,
    /// Where each round's primary starts in the title's primary bytes on its disk.
    primary_offset_bytes: Vec<u64>,
    backup_start: Vec<usize>,
    backup: Vec<DiskRead>,
    /// Where each backup request starts in the title's backup bytes on its disk.
    backup_offset_bytes: Vec<u64>,
    /// Fragments of backup request r are `fragments[fragment_start[r]..fragment_start[r + 1]]`,
    /// as fragment ordinals within the round, in the order they are stored.
    fragment_start: Vec<usize>,
    fragments: Vec<u32>,
    primary_strides: Vec<u64>,
    backup_strides: Vec<u64>,
}

impl TitlePlan {
    /// The plan of a title whose round i stores `round_bytes[i]` bytes (a
    /// schedule's `disk_read_bytes`), with round 0 on `start_disk`. `seed`
    /// drives random placement and is ignored otherwise.
    pub fn new(
        round_bytes: &[u64],
        params: &LayoutParams,
        start_disk: DiskIndex,
        seed: u64,
    ) -> Result<TitlePlan, LayoutError> {
        params.validate()?;
        if start_disk.0 >= params.disk_count {
            return Err(LayoutError::StartDiskOutOfRange {
                start: start_disk.0,
                disk_count: params.disk_count,
            });
        }
        for (round, &bytes) in round_bytes.iter().enumerate() {
            if !bytes.is_multiple_of(params.block_bytes) {
                return Err(LayoutError::RoundNotBlocks {
                    round,
                    bytes,
                    block_bytes: params.block_bytes,
                });
            }
            if bytes > params.stride_bytes {
                return Err(LayoutError::RoundExceedsStride {
                    round,
                    bytes,
                    stride_bytes: params.stride_bytes,
                });
            }
        }
        let mut builder = Builder::new(*params, start_disk, seed, round_bytes.len());
        for (round, &bytes) in round_bytes.iter().enumerate() {
            builder.add_round(round, bytes);
        }
        Ok(builder.finish())
    }

    /// The parameters the plan was made with.
    pub fn params(&self) -> &LayoutParams {
        &self.params
    }

    /// D.
    pub fn disk_count(&self) -> u32 {
        self.params.disk_count
    }

    /// The disk of round 0.
    pub fn start_disk(&self) -> DiskIndex {
        self.start_disk
    }

    /// The random-placement seed the plan was made with.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Number of rounds.
    pub fn rounds(&self) -> usize {
        self.primary.len()
    }

    /// The primary request of round `round`: disk (start + ⌊round /
    /// segment_rounds⌋ mod W) mod D.
    #[inline]
    pub fn primary(&self, round: usize) -> DiskRead {
        self.primary[round]
    }

    /// The backup requests of round `round`, one per disk holding part of its
    /// backup, in the order of their first fragment. Empty without backups
    /// and for an empty round. Never on the primary's disk, never two on one
    /// disk.
    #[inline]
    pub fn backups(&self, round: usize) -> &[DiskRead] {
        &self.backup[self.backup_start[round]..self.backup_start[round + 1]]
    }

    /// Where round `round`'s primary starts in the title's primary bytes on its disk.
    pub fn primary_offset_bytes(&self, round: usize) -> u64 {
        self.primary_offset_bytes[round]
    }

    /// Where each backup request of round `round` starts in the title's backup
    /// bytes on its disk (parallel to [`TitlePlan::backups`]).
    pub fn backup_offset_bytes(&self, round: usize) -> &[u64] {
        &self.backup_offset_bytes[self.backup_start[round]..self.backup_start[round + 1]]
    }

    /// The fragment ordinals (from 0 within the round) stored, back to back
    /// and in this order, by backup request `entry` of round `round`.
    pub fn fragment_ordinals(&self, round: usize, entry: usize) -> &[u32] {
        let r = self.backup_start[round] + entry;
        assert!(
            r < self.backup_start[round + 1],
            "round {round} has no backup request {entry}"
        );
        &self.fragments[self.fragment_start[r]..self.fragment_start[r + 1]]
    }

    /// The byte ranges of the round's data held by backup request `entry`, in
    /// stored order: concatenated they are exactly the request's bytes.
    pub fn fragment_ranges(&self, round: usize, entry: usize) -> impl Iterator<Item = Range<u64>> {
        let round_bytes = self.primary[round].bytes;
        let fragment_bytes = self.fragment_bytes(round_bytes);
        self.fragment_ordinals(round, entry).iter().map(move |&q| {
            let start = u64::from(q) * fragment_bytes;
            start..round_bytes.min(start + fragment_bytes)
        })
    }

    /// Strides the title needs on `disk` for `replica`.
    pub fn strides_needed(&self, disk: DiskIndex, replica: Replica) -> u64 {
        match replica {
            Replica::Primary => self.primary_strides[disk.0 as usize],
            Replica::Backup => self.backup_strides[disk.0 as usize],
        }
    }

    /// Strides the title needs on `disk`, both replicas.
    pub fn strides_needed_on(&self, disk: DiskIndex) -> u64 {
        self.primary_strides[disk.0 as usize] + self.backup_strides[disk.0 as usize]
    }

    /// The fragment size for a round of `round_bytes`: B_d, or the whole round.
    fn fragment_bytes(&self, round_bytes: u64) -> u64 {
        match self.params.backup.and_then(|b| b.backup_block_bytes) {
            Some(b_d) => b_d,
            None => round_bytes.max(1),
        }
    }
}

/// Number of stride accesses for `bytes` starting at `offset_bytes` of a
/// packed space cut into `stride_bytes` strides (bytes ≤ stride_bytes).
pub(super) fn extent_count(offset_bytes: u64, bytes: u64, stride_bytes: u64) -> u32 {
    if bytes == 0 {
        0
    } else if offset_bytes / stride_bytes == (offset_bytes + bytes - 1) / stride_bytes {
        1
    } else {
        2
    }
}

const NO_ENTRY: u32 = u32::MAX;

/// Builds a plan round by round; holds the per-disk counters and scratch
/// space so that a round costs O(fragments), not O(D).
struct Builder {
    plan: TitlePlan,
    rng: SplitMix64,
    /// Deterministic placement: the round-robin position of disk k's rounds
    /// (fragments or rounds placed so far, per `FragmentSequence`); with a
    /// per-title counter only slot 0 is used.
    fragment_counter: Vec<u64>,
    primary_used_bytes: Vec<u64>,
    backup_used_bytes: Vec<u64>,
    /// The placement state the current run started with (`segments`): its
    /// disk's round-robin counter and the random state.
    run_start: (u64, SplitMix64),
    /// Random placement: a partial Fisher–Yates permutation of the offsets
    /// 0..D−1, restored to the identity after each pass.
    candidates: Vec<u32>,
    touched: Vec<u32>,
    /// Per fragment of the current round: its offset 1..D from the primary disk.
    fragment_offset: Vec<u32>,
    /// Per disk: index of its backup request in the current round.
    entry_of_disk: Vec<u32>,
    entry_disks: Vec<u32>,
    fragment_entry: Vec<u32>,
    entry_fill: Vec<usize>,
    entry_next: Vec<usize>,
}

impl Builder {
    fn new(params: LayoutParams, start_disk: DiskIndex, seed: u64, rounds: usize) -> Builder {
        let d = params.disk_count as usize;
        let others = if params.backup.is_some() { d - 1 } else { 0 };
        Builder {
            plan: TitlePlan {
                params,
                start_disk,
                seed,
                primary: Vec::with_capacity(rounds),
                primary_offset_bytes: Vec::with_capacity(rounds),
                backup_start: {
                    let mut v = Vec::with_capacity(rounds + 1);
                    v.push(0);
                    v
                },
                backup: Vec::new(),
                backup_offset_bytes: Vec::new(),
                fragment_start: vec![0],
                fragments: Vec::new(),
                primary_strides: Vec::new(),
                backup_strides: Vec::new(),
            },
            rng: SplitMix64::new(seed),
            fragment_counter: vec![0; d],
            primary_used_bytes: vec![0; d],
            backup_used_bytes: vec![0; d],
            run_start: (0, SplitMix64::new(seed)),
            candidates: (0..others as u32).collect(),
            touched: Vec::new(),
            fragment_offset: Vec::new(),
            entry_of_disk: vec![NO_ENTRY; d],
            entry_disks: Vec::new(),
            fragment_entry: Vec::new(),
            entry_fill: Vec::new(),
            entry_next: Vec::new(),
        }
    }

    fn add_round(&mut self, round: usize, bytes: u64) {
        let p = &self.plan.params;
        let d = u64::from(p.disk_count);
        let run = round as u64 / u64::from(p.segment_rounds);
        let w = u64::from(p.stripe_width());
        let disk = DiskIndex(((u64::from(self.plan.start_disk.0) + run % w) % d) as u32);
        // A segment starts on a stride boundary, so that on a disk whose
        // free strides are adjacent it is one contiguous run of strides.
        let run_start =
            p.segment_rounds > 1 && (round as u64).is_multiple_of(u64::from(p.segment_rounds));
        if run_start {
            let used = &mut self.primary_used_bytes[disk.index()];
            *used = used.next_multiple_of(p.stride_bytes);
        }
        let offset = self.primary_used_bytes[disk.index()];
        self.primary_used_bytes[disk.index()] += bytes;
        self.plan.primary.push(DiskRead {
            disk,
            extent_count: extent_count(offset, bytes, p.stride_bytes),
            bytes,
        });
        self.plan.primary_offset_bytes.push(offset);
        if let Some(backup) = p.backup {
            let fragment_bytes = backup.backup_block_bytes.unwrap_or(bytes.max(1));
            // An empty round still takes one (empty) fragment slot, so that a
            // B_d at least as large as every round places exactly as no B_d.
            let fragments = bytes.div_ceil(fragment_bytes).max(1) as usize;
            // A run keeps its first round's placement: every round of it
            // starts from the counter and random state the run started
            // with, so fragment q of each round goes to the same disk and
            // the run's backup is contiguous there (no effect when runs are
            // one round long).
            if p.segment_rounds > 1 {
                let slot = match backup.round_robin_counter {
                    RoundRobinCounter::PerDisk => disk.index(),
                    RoundRobinCounter::PerTitle => 0,
                };
                if (round as u64).is_multiple_of(u64::from(p.segment_rounds)) {
                    self.run_start = (self.fragment_counter[slot], self.rng.clone());
                } else {
                    self.fragment_counter[slot] = self.run_start.0;
                    self.rng = self.run_start.1.clone();
                }
            }
            self.assign_fragments(disk, fragments, backup);
            if bytes > 0 {
                self.emit_backups(disk, bytes, fragment_bytes, run_start);
            }
        }
        self.plan.backup_start.push(self.plan.backup.len());
    }

    /// Fills `fragment_offset[q]` (the backup disk of fragment q is
    /// (primary + offset) mod D, offset in 1..D) for the round's fragments.
    /// With G disk groups the offsets are G, 2G, ...: the other disks of
    /// the primary's group (d mod G), counted as the other disks of the
    /// array are without groups.
    fn assign_fragments(&mut self, disk: DiskIndex, fragments: usize, backup: BackupParams) {
        let groups = backup.disk_groups.max(1);
        let others = u64::from(backup.group_disks(self.plan.params.disk_count) - 1);
        self.fragment_offset.clear();
        match backup.placement {
            ReplicaPlacement::Deterministic => {
                // Per disk, disk k's rounds share a counter; per title, all
                // the title's rounds share slot 0.
                let slot = match backup.round_robin_counter {
                    RoundRobinCounter::PerDisk => disk.index(),
                    RoundRobinCounter::PerTitle => 0,
                };
                let counter = &mut self.fragment_counter[slot];
                match backup.fragment_sequence {
                    FragmentSequence::PerRound => {
                        // One step per round: fragment q of the round whose
                        // counter is c goes to (k + 1 + (c + q) mod (D−1)) mod D.
                        for q in 0..fragments as u64 {
                            self.fragment_offset
                                .push(groups * (1 + ((*counter + q) % others) as u32));
                        }
                        *counter += 1;
                    }
                    FragmentSequence::PerFragment => {
                        // Seed 000 Figure 2, one step per fragment: the c-th
                        // fragment counted goes to (k + 1 + c mod (D−1)) mod D.
                        for _ in 0..fragments {
                            self.fragment_offset
                                .push(groups * (1 + (*counter % others) as u32));
                            *counter += 1;
                        }
                    }
                }
            }
            ReplicaPlacement::Random => {
                // Draw without replacement from the other D−1 disks; only when
                // a round has more than D−1 fragments does a new pass reuse them.
                for q in 0..fragments {
                    let position = q as u64 % others;
                    if position == 0 {
                        self.restore_candidates();
                    }
                    let pick = position + self.rng.next_below(others - position);
                    self.candidates.swap(position as usize, pick as usize);
                    self.touched.push(position as u32);
                    self.touched.push(pick as u32);
                    self.fragment_offset
                        .push(groups * (1 + self.candidates[position as usize]));
                }
                self.restore_candidates();
            }
        }
    }

    fn restore_candidates(&mut self) {
        for &t in &self.touched {
            self.candidates[t as usize] = t;
        }
        self.touched.clear();
    }

    /// Groups the round's fragments by disk (one request per disk, in order
    /// of first fragment, fragments in increasing order) and packs each
    /// request after the title's earlier backups on that disk.
    fn emit_backups(&mut self, disk: DiskIndex, bytes: u64, fragment_bytes: u64, run_start: bool) {
        let d = self.plan.params.disk_count;
        self.entry_disks.clear();
        self.fragment_entry.clear();
        for &offset in &self.fragment_offset {
            let target = ((disk.0 + offset) % d) as usize;
            if self.entry_of_disk[target] == NO_ENTRY {
                self.entry_of_disk[target] = self.entry_disks.len() as u32;
                self.entry_disks.push(target as u32);
            }
            self.fragment_entry.push(self.entry_of_disk[target]);
        }
        // Counting sort of fragments by request, stable in fragment order.
        let base = self.plan.fragments.len();
        self.entry_fill.clear();
        self.entry_fill.resize(self.entry_disks.len() + 1, 0);
        for &e in &self.fragment_entry {
            self.entry_fill[e as usize + 1] += 1;
        }
        for e in 0..self.entry_disks.len() {
            self.entry_fill[e + 1] += self.entry_fill[e];
        }
        self.plan
            .fragments
            .resize(base + self.fragment_entry.len(), 0);
        self.entry_next.clear();
        self.entry_next.extend_from_slice(&self.entry_fill);
        for (q, &e) in self.fragment_entry.iter().enumerate() {
            self.plan.fragments[base + self.entry_next[e as usize]] = q as u32;
            self.entry_next[e as usize] += 1;
        }
        let stride_bytes = self.plan.params.stride_bytes;
        for (e, &target) in self.entry_disks.iter().enumerate() {
            let ordinals =
                &self.plan.fragments[base + self.entry_fill[e]..base + self.entry_fill[e + 1]];
            let request_bytes: u64 = ordinals
                .iter()
                .map(|&q| {
                    bytes.min((u64::from(q) + 1) * fragment_bytes) - u64::from(q) * fragment_bytes
                })
                .sum();
            let used = &mut self.backup_used_bytes[target as usize];
            if run_start {
                *used = used.next_multiple_of(stride_bytes);
            }
            let offset = *used;
            *used += request_bytes;
            self.plan.backup.push(DiskRead {
                disk: DiskIndex(target),
                extent_count: extent_count(offset, request_bytes, stride_bytes),
                bytes: request_bytes,
            });
            self.plan.backup_offset_bytes.push(offset);
            self.plan.fragment_start.push(base + self.entry_fill[e + 1]);
            self.entry_of_disk[target as usize] = NO_ENTRY;
        }
    }

    fn finish(mut self) -> TitlePlan {
        let stride_bytes = self.plan.params.stride_bytes;
        let strides = |used: &[u64]| used.iter().map(|u| u.div_ceil(stride_bytes)).collect();
        self.plan.primary_strides = strides(&self.primary_used_bytes);
        self.plan.backup_strides = strides(&self.backup_used_bytes);
        self.plan
    }
}
