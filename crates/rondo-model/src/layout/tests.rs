//! Layout tests across plan, allocation and extents: hand-computed worked
//! examples (D = 4, 64 KiB strides, 16 KiB blocks) and property tests of the
//! invariants listed in `docs/layout.md`.

use std::collections::BTreeSet;
use std::ops::Range;

use proptest::prelude::*;

use super::*;
use crate::units::DiskIndex;

const K: u64 = 1024;
const S: u64 = 64 * K;

fn params(disk_count: u32, backup: Option<BackupParams>) -> LayoutParams {
    LayoutParams {
        disk_count,
        stride_bytes: S,
        block_bytes: 16 * K,
        backup,
        segment_rounds: 1,
        stripe_disks: 0,
    }
}

fn deterministic(backup_block_bytes: Option<u64>) -> Option<BackupParams> {
    Some(BackupParams {
        placement: ReplicaPlacement::Deterministic,
        backup_block_bytes,
        fragment_sequence: FragmentSequence::PerFragment,
        round_robin_counter: RoundRobinCounter::PerDisk,
        disk_groups: 1,
    })
}

fn random(backup_block_bytes: Option<u64>) -> Option<BackupParams> {
    Some(BackupParams {
        placement: ReplicaPlacement::Random,
        backup_block_bytes,
        fragment_sequence: FragmentSequence::PerFragment,
        round_robin_counter: RoundRobinCounter::PerDisk,
        disk_groups: 1,
    })
}

/// An extent of the worked examples: stride, offset and length in KiB.
fn ext(stride_index: u64, offset_kib: u64, length_kib: u64) -> Extent {
    Extent {
        stride_index,
        offset_in_stride_bytes: offset_kib * K,
        device_offset_bytes: stride_index * S + offset_kib * K,
        length_bytes: length_kib * K,
    }
}

fn extents_of(round: &RoundLayout) -> Vec<Extent> {
    round.primary.as_slice().to_vec()
}

fn backup_of(round: &RoundLayout) -> Vec<(u32, Vec<Extent>, Vec<Range<u64>>)> {
    round
        .backups
        .iter()
        .map(|b| (b.disk.0, b.extents.as_slice().to_vec(), b.fragments.clone()))
        .collect()
}

fn kib(r: Range<u64>) -> Range<u64> {
    r.start * K..r.end * K
}

#[test]
fn worked_example_deterministic_whole_backups() {
    // Sizes in KiB; round i on disk (1 + i) mod 4. See docs/layout.md.
    let sizes = [48, 32, 16, 64, 48, 48, 32, 16, 32, 0, 64, 48].map(|s| s * K);
    let plan = TitlePlan::new(&sizes, &params(4, deterministic(None)), DiskIndex(1), 0).unwrap();
    let mut array = ArrayAllocator::uniform(4, 16);
    let layout = array.place(&plan).unwrap();
    let r = layout.rounds();
    let whole = |kib_len: u64| vec![kib(0..kib_len)];

    assert_eq!(r[0].primary_disk, DiskIndex(1));
    assert_eq!(extents_of(&r[0]), vec![ext(0, 0, 48)]);
    assert_eq!(backup_of(&r[0]), vec![(2, vec![ext(2, 0, 48)], whole(48))]);
    assert_eq!(extents_of(&r[1]), vec![ext(0, 0, 32)]);
    assert_eq!(backup_of(&r[1]), vec![(3, vec![ext(2, 0, 32)], whole(32))]);
    assert_eq!(extents_of(&r[2]), vec![ext(0, 0, 16)]);
    assert_eq!(backup_of(&r[2]), vec![(0, vec![ext(2, 0, 16)], whole(16))]);
    assert_eq!(extents_of(&r[3]), vec![ext(0, 0, 64)]);
    assert_eq!(backup_of(&r[3]), vec![(1, vec![ext(2, 0, 64)], whole(64))]);
    // Round 4 is the second round on disk 1: 48 KiB at local offset 48 KiB
    // crosses into the title's second stride there, the next one on the
    // device: the title's primary strides on a disk are one run.
    assert_eq!(extents_of(&r[4]), vec![ext(0, 48, 16), ext(1, 0, 32)]);
    assert_eq!(
        backup_of(&r[4]),
        vec![(3, vec![ext(2, 32, 32), ext(3, 0, 16)], whole(48))]
    );
    assert_eq!(extents_of(&r[5]), vec![ext(0, 32, 32), ext(1, 0, 16)]);
    assert_eq!(backup_of(&r[5]), vec![(0, vec![ext(2, 16, 48)], whole(48))]);
    assert_eq!(extents_of(&r[6]), vec![ext(0, 16, 32)]);
    assert_eq!(backup_of(&r[6]), vec![(1, vec![ext(3, 0, 32)], whole(32))]);
    assert_eq!(extents_of(&r[7]), vec![ext(1, 0, 16)]);
    assert_eq!(backup_of(&r[7]), vec![(2, vec![ext(2, 48, 16)], whole(16))]);
    assert_eq!(extents_of(&r[8]), vec![ext(1, 32, 32)]);
    assert_eq!(backup_of(&r[8]), vec![(0, vec![ext(3, 0, 32)], whole(32))]);
    assert_eq!(r[9].primary_disk, DiskIndex(2));
    assert!(r[9].primary.is_empty() && r[9].backups.is_empty());
    assert_eq!(extents_of(&r[10]), vec![ext(0, 48, 16), ext(1, 0, 48)]);
    assert_eq!(backup_of(&r[10]), vec![(2, vec![ext(3, 0, 64)], whole(64))]);
    assert_eq!(extents_of(&r[11]), vec![ext(1, 16, 48)]);
    assert_eq!(
        backup_of(&r[11]),
        vec![(3, vec![ext(3, 16, 48)], whole(48))]
    );

    let held = |k: u32, replica| layout.strides().strides(DiskIndex(k), replica).to_vec();
    use Replica::{Backup, Primary};
    // On every disk the two primary strides, then the two backup strides.
    for k in 0..4 {
        assert_eq!(
            (held(k, Primary), held(k, Backup)),
            (vec![0, 1], vec![2, 3])
        );
    }

    // What admission sees: disk, bytes and stride accesses only.
    assert_eq!(
        plan.primary(4),
        DiskRead {
            disk: DiskIndex(1),
            extent_count: 2,
            bytes: 48 * K
        }
    );
    assert_eq!(
        plan.backups(4),
        &[DiskRead {
            disk: DiskIndex(3),
            extent_count: 2,
            bytes: 48 * K
        }]
    );
    assert_eq!(plan.backups(9), &[]);
    // LBNs in 512-byte sectors: stride 0 offset 48 KiB, then stride 1,
    // where the first extent ends (one access for the disk).
    let lbns: Vec<(u64, u64)> = r[4]
        .primary
        .as_slice()
        .iter()
        .map(|e| (e.first_sector(), e.sector_count()))
        .collect();
    assert_eq!(lbns, vec![(96, 32), (128, 64)]);
}

#[test]
fn worked_example_segments_are_contiguous_runs_round_robin_over_the_disks() {
    // Runs of 3 rounds (seed 003's disk partitioning), D = 4, 64 KiB
    // strides, whole backups, per-title counter: run j on disk (1 + j) mod
    // 4, its backup on (primary + 1 + j mod 3) mod 4 for all its rounds.
    let sizes = [48, 32, 16, 64, 48, 48, 32, 16, 32, 0, 64, 48, 16, 16].map(|s| s * K);
    let mut p = params(4, deterministic(None));
    p.segment_rounds = 3;
    p.backup.as_mut().unwrap().round_robin_counter = RoundRobinCounter::PerTitle;
    assert_eq!(p.kind(), LayoutKind::Segments);
    let plan = TitlePlan::new(&sizes, &p, DiskIndex(1), 0).unwrap();
    let runs: Vec<u32> = (0..sizes.len()).map(|i| plan.primary(i).disk.0).collect();
    assert_eq!(runs, [1, 1, 1, 2, 2, 2, 3, 3, 3, 0, 0, 0, 1, 1]);
    let backup_disks: Vec<Vec<u32>> = (0..sizes.len())
        .map(|i| plan.backups(i).iter().map(|b| b.disk.0).collect())
        .collect();
    let want: [&[u32]; 14] = [
        &[2],
        &[2],
        &[2],
        &[0],
        &[0],
        &[0],
        &[2],
        &[2],
        &[2],
        &[],
        &[1],
        &[1],
        &[3],
        &[3],
    ];
    assert_eq!(backup_disks, want);
    // On a fresh array each run is one contiguous byte range on its disk,
    // for the primary and for the backup: round i + 1 of a run starts where
    // round i ends.
    let mut array = ArrayAllocator::uniform(4, 16);
    let layout = array.place(&plan).unwrap();
    let r = layout.rounds();
    let end = |e: &Extents| e.as_slice().last().map(|x| x.device_end_bytes());
    let start = |e: &Extents| e.as_slice().first().map(|x| x.device_offset_bytes);
    for i in 1..sizes.len() {
        if i % 3 == 0 {
            // A run starts on a stride boundary.
            if let Some(at) = start(&r[i].primary) {
                assert_eq!(at % S, 0, "round {i}");
            }
            continue;
        }
        if sizes[i] == 0 || sizes[i - 1] == 0 {
            continue;
        }
        assert_eq!(start(&r[i].primary), end(&r[i - 1].primary), "round {i}");
        assert_eq!(
            start(&r[i].backups[0].extents),
            end(&r[i - 1].backups[0].extents),
            "backup of round {i}"
        );
    }
    // Variable-grain is the one-round run.
    p.segment_rounds = 1;
    assert_eq!(p.kind(), LayoutKind::VariableGrain);
    let one = TitlePlan::new(&sizes, &p, DiskIndex(1), 0).unwrap();
    assert_eq!(one.primary(1).disk, DiskIndex(2));
    p.segment_rounds = 0;
    assert_eq!(
        TitlePlan::new(&sizes, &p, DiskIndex(1), 0).unwrap_err(),
        LayoutError::EmptySegments
    );
}

#[test]
fn worked_example_deterministic_declustered() {
    // B_d = 16 KiB; round i on disk i mod 4. Round 4 has four fragments, more
    // than the three other disks: fragments 0 and 3 share disk 1 and are
    // stored back to back there, read with one request.
    let sizes = [48, 16, 0, 32, 64, 32].map(|s| s * K);
    let plan = TitlePlan::new(
        &sizes,
        &params(4, deterministic(Some(16 * K))),
        DiskIndex(0),
        0,
    )
    .unwrap();
    let mut array = ArrayAllocator::uniform(4, 16);
    let layout = array.place(&plan).unwrap();
    let r = layout.rounds();

    assert_eq!(extents_of(&r[0]), vec![ext(0, 0, 48)]);
    assert_eq!(
        backup_of(&r[0]),
        vec![
            (1, vec![ext(1, 0, 16)], vec![kib(0..16)]),
            (2, vec![ext(0, 0, 16)], vec![kib(16..32)]),
            (3, vec![ext(1, 0, 16)], vec![kib(32..48)]),
        ]
    );
    assert_eq!(extents_of(&r[1]), vec![ext(0, 0, 16)]);
    assert_eq!(
        backup_of(&r[1]),
        vec![(2, vec![ext(0, 16, 16)], vec![kib(0..16)])]
    );
    assert!(r[2].primary.is_empty() && r[2].backups.is_empty());
    assert_eq!(extents_of(&r[3]), vec![ext(0, 0, 32)]);
    assert_eq!(
        backup_of(&r[3]),
        vec![
            (0, vec![ext(2, 0, 16)], vec![kib(0..16)]),
            (1, vec![ext(1, 16, 16)], vec![kib(16..32)]),
        ]
    );
    assert_eq!(extents_of(&r[4]), vec![ext(0, 48, 16), ext(1, 0, 48)]);
    assert_eq!(
        backup_of(&r[4]),
        vec![
            (1, vec![ext(1, 32, 32)], vec![kib(0..16), kib(48..64)]),
            (2, vec![ext(0, 32, 16)], vec![kib(16..32)]),
            (3, vec![ext(1, 16, 16)], vec![kib(32..48)]),
        ]
    );
    assert_eq!(extents_of(&r[5]), vec![ext(0, 16, 32)]);
    assert_eq!(
        backup_of(&r[5]),
        vec![
            (3, vec![ext(1, 32, 16)], vec![kib(0..16)]),
            (0, vec![ext(2, 16, 16)], vec![kib(16..32)]),
        ]
    );
    let held = |k: u32, replica| layout.strides().strides(DiskIndex(k), replica).to_vec();
    use Replica::{Backup, Primary};
    assert_eq!((held(0, Primary), held(0, Backup)), (vec![0, 1], vec![2]));
    assert_eq!((held(1, Primary), held(1, Backup)), (vec![0], vec![1]));
    assert_eq!((held(2, Primary), held(2, Backup)), (vec![], vec![0]));
    assert_eq!((held(3, Primary), held(3, Backup)), (vec![0], vec![1]));
    assert_eq!(
        plan.backups(4)[0],
        DiskRead {
            disk: DiskIndex(1),
            extent_count: 1,
            bytes: 32 * K
        }
    );
}

#[test]
fn random_placement_is_pinned_to_splitmix64_draws() {
    // Value-stability pin, computed outside Rust from the documented rule:
    // the backup of round i is (k + 1 + next_below(D − 1)) mod D.
    let sizes = [16 * K; 12];
    let plan = TitlePlan::new(&sizes, &params(4, random(None)), DiskIndex(0), 42).unwrap();
    let disks: Vec<u32> = (0..12).map(|i| plan.backups(i)[0].disk.0).collect();
    assert_eq!(disks, vec![3, 2, 3, 1, 1, 0, 3, 2, 2, 3, 3, 1]);

    // Declustered: round 1 (on disk 1) has five 16 KiB fragments; the first
    // pass draws disks 3, 2, 0 without replacement, the second pass 3, 2.
    let sizes = [48 * K, 80 * K];
    let p = LayoutParams {
        stride_bytes: 128 * K,
        ..params(4, random(Some(16 * K)))
    };
    let plan = TitlePlan::new(&sizes, &p, DiskIndex(0), 7).unwrap();
    let disks = |i| plan.backups(i).iter().map(|b| b.disk.0).collect::<Vec<_>>();
    assert_eq!(disks(0), vec![2, 1, 3]);
    assert_eq!(disks(1), vec![3, 2, 0]);
    assert_eq!(plan.fragment_ordinals(1, 0), &[0, 3]);
    assert_eq!(plan.fragment_ordinals(1, 1), &[1, 4]);
    assert_eq!(plan.fragment_ordinals(1, 2), &[2]);
}

#[test]
fn invalid_inputs_get_clear_errors() {
    let p = params(4, deterministic(None));
    let err = TitlePlan::new(&[16 * K, 80 * K], &p, DiskIndex(0), 0).unwrap_err();
    assert_eq!(
        err,
        LayoutError::RoundExceedsStride {
            round: 1,
            bytes: 80 * K,
            stride_bytes: S
        }
    );
    assert!(err.to_string().contains("round 1 needs 81920 bytes"));
    assert_eq!(
        TitlePlan::new(&[1000], &p, DiskIndex(0), 0),
        Err(LayoutError::RoundNotBlocks {
            round: 0,
            bytes: 1000,
            block_bytes: 16 * K
        })
    );
    assert_eq!(
        TitlePlan::new(&[], &p, DiskIndex(4), 0),
        Err(LayoutError::StartDiskOutOfRange {
            start: 4,
            disk_count: 4
        })
    );
    assert_eq!(
        TitlePlan::new(&[], &params(1, deterministic(None)), DiskIndex(0), 0),
        Err(LayoutError::BackupNeedsTwoDisks)
    );
    assert_eq!(
        TitlePlan::new(&[], &params(4, deterministic(Some(1000))), DiskIndex(0), 0),
        Err(LayoutError::BackupBlockNotBlocks {
            backup_block_bytes: 1000,
            block_bytes: 16 * K
        })
    );
    let huge = LayoutParams {
        stride_bytes: 1 << 46,
        ..params(4, random(Some(16 * K)))
    };
    assert_eq!(
        huge.validate(),
        Err(LayoutError::TooManyFragments {
            stride_bytes: 1 << 46,
            backup_block_bytes: 16 * K
        })
    );
    let schedule =
        crate::schedule::Schedule::from_client_bytes(vec![100], 1_000_000_000, 512).unwrap();
    assert_eq!(
        TitlePlan::for_schedule(&schedule, &p, DiskIndex(0), 0),
        Err(LayoutError::BlockSizeMismatch {
            schedule_block_bytes: 512,
            block_bytes: 16 * K
        })
    );
    // A single disk without backups is a valid array.
    let plan = TitlePlan::new(&[16 * K, 0], &params(1, None), DiskIndex(0), 0).unwrap();
    assert_eq!(plan.primary(1).disk, DiskIndex(0));
}

#[test]
fn start_disks_go_round_robin_over_titles() {
    let starts: Vec<u32> = (0..7).map(|n| round_robin_start_disk(n, 3, 0).0).collect();
    assert_eq!(starts, vec![0, 1, 2, 0, 1, 2, 0]);
    // Striped over every disk, W = D places as W = 0.
    let full: Vec<u32> = (0..7).map(|n| round_robin_start_disk(n, 3, 3).0).collect();
    assert_eq!(full, starts);
    // Seed 001: W = 2 of 6 disks, each title right after the previous one's
    // last disk, so the titles fall into three disjoint pairs.
    let narrow: Vec<u32> = (0..5).map(|n| round_robin_start_disk(n, 6, 2).0).collect();
    assert_eq!(narrow, vec![0, 2, 4, 0, 2]);
    assert_ne!(
        derive_title_seed(1, TitleId(1)),
        derive_title_seed(1, TitleId(2))
    );
    assert_ne!(
        derive_title_seed(1, TitleId(1)),
        derive_title_seed(2, TitleId(1))
    );
}

#[test]
fn full_disk_is_an_error_and_changes_nothing() {
    let sizes = [48, 32, 16, 64, 48, 48, 32, 16, 32, 0, 64, 48].map(|s| s * K);
    let plan = TitlePlan::new(&sizes, &params(4, deterministic(None)), DiskIndex(1), 0).unwrap();
    // Every disk needs 4 strides (see the worked example); disk 2 has 3.
    let mut array = ArrayAllocator::new(&[4, 4, 3, 9]);
    let before = array.clone();
    let err = array.place(&plan).unwrap_err();
    assert_eq!(
        err,
        LayoutError::DiskFull {
            disk: DiskIndex(2),
            needed_strides: 4,
            free_strides: 3
        }
    );
    assert_eq!(
        err.to_string(),
        "disk 2 is full: the title needs 4 strides there and 3 are free"
    );
    assert_eq!(array, before);
    let mut wrong = ArrayAllocator::uniform(3, 100);
    assert!(matches!(
        wrong.place(&plan),
        Err(LayoutError::DiskCountMismatch { .. })
    ));
}

#[test]
fn release_is_all_or_nothing() {
    let sizes = [48 * K, 32 * K, 64 * K];
    let plan = TitlePlan::new(&sizes, &params(4, deterministic(None)), DiskIndex(0), 0).unwrap();
    let mut array = ArrayAllocator::uniform(4, 8);
    let layout = array.place(&plan).unwrap();
    let mut bogus = layout.strides().clone();
    bogus.push(DiskIndex(3), Replica::Backup, 7); // never allocated
    let before = array.clone();
    assert_eq!(
        array.release(&bogus),
        Err(LayoutError::StrideNotAllocated {
            disk: DiskIndex(3),
            stride: 7
        })
    );
    assert_eq!(array, before);
    let mut twice = layout.strides().clone();
    let (disk, replica, stride) = twice.iter().next().unwrap();
    twice.push(disk, replica, stride);
    assert_eq!(
        array.release(&twice),
        Err(LayoutError::StrideHeldTwice { disk, stride })
    );
    assert_eq!(array, before);
    array.release(layout.strides()).unwrap();
    assert_eq!(array, ArrayAllocator::uniform(4, 8));
    assert_eq!(
        array.release(layout.strides()),
        Err(LayoutError::StrideNotAllocated { disk, stride })
    );
}

#[test]
fn restart_rebuilds_allocators_and_layouts_from_stride_lists() {
    let p = params(4, random(Some(16 * K)));
    let plans: Vec<TitlePlan> = (0..3)
        .map(|t| {
            let sizes: Vec<u64> = (0..20).map(|i| ((i * 7 + t) % 5) * 16 * K).collect();
            TitlePlan::new(&sizes, &p, round_robin_start_disk(t, 4, 0), t).unwrap()
        })
        .collect();
    let mut array = ArrayAllocator::uniform(4, 64);
    let layouts: Vec<TitleLayout> = plans
        .iter()
        .map(|plan| array.place(plan).unwrap())
        .collect();
    // The store keeps (disk, replica, ordinal, stride) rows and recomputes plans.
    let reloaded: Vec<TitleStrides> = layouts
        .iter()
        .map(|l| {
            let mut s = TitleStrides::empty(4);
            for (disk, replica, stride) in l.strides().iter() {
                s.push(disk, replica, stride);
            }
            s
        })
        .collect();
    let rebuilt = ArrayAllocator::rebuild(&[64; 4], &reloaded).unwrap();
    assert_eq!(rebuilt, array);
    for ((plan, strides), layout) in plans.iter().zip(&reloaded).zip(&layouts) {
        assert_eq!(
            &TitleLayout::from_strides(plan, strides.clone()).unwrap(),
            layout
        );
    }
    let mut short = reloaded[0].clone();
    let disk = short.iter().next().unwrap().0;
    let mut truncated = TitleStrides::empty(4);
    for (d, r, s) in short.iter().skip(1) {
        truncated.push(d, r, s);
    }
    assert!(matches!(
        TitleLayout::from_strides(&plans[0], truncated),
        Err(LayoutError::StrideListMismatch { disk: d, .. }) if d == disk
    ));
    short.push(DiskIndex(0), Replica::Primary, 0);
    assert!(matches!(
        ArrayAllocator::rebuild(&[64; 4], [&reloaded[1], &short]),
        Err(LayoutError::StrideHeldTwice { .. })
    ));
}

// ---------------------------------------------------------------------------
// Randomness quality of random placement.

/// Pearson's statistic of `counts` against a uniform expectation.
fn chi_square(counts: &[u64]) -> f64 {
    let total: u64 = counts.iter().sum();
    let expected = total as f64 / counts.len() as f64;
    counts
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum()
}

/// Wilson–Hilferty approximation of the chi-square quantile at p = 1e-6
/// (z = 4.75): a correct generator exceeds it once in a million runs.
fn chi_square_bound(df: usize) -> f64 {
    let df = df as f64;
    let h = 2.0 / (9.0 * df);
    df * (1.0 - h + 4.75 * h.sqrt()).powi(3)
}

/// Per primary disk: chi-square of the backup offsets (df D−2) and of pairs of
/// offsets of consecutive rounds on that disk (df (D−1)²−1). Round-robin is
/// uniform in the first and fails the second; a biased draw fails the first.
fn backup_offset_statistics(plan: &TitlePlan) -> Vec<(f64, f64)> {
    let d = plan.disk_count() as usize;
    let others = d - 1;
    let mut single = vec![vec![0u64; others]; d];
    let mut pairs = vec![vec![0u64; others * others]; d];
    let mut previous = vec![None; d];
    for i in 0..plan.rounds() {
        let k = plan.primary(i).disk.0 as usize;
        let b = plan.backups(i)[0].disk.0 as usize;
        let offset = (b + d - k - 1) % d;
        single[k][offset] += 1;
        if let Some(prev) = previous[k] {
            pairs[k][prev * others + offset] += 1;
        }
        previous[k] = Some(offset);
    }
    (0..d)
        .map(|k| (chi_square(&single[k]), chi_square(&pairs[k])))
        .collect()
}

#[test]
fn random_backups_are_uniform_and_independent() {
    let d = 5u32;
    let sizes = vec![16 * K; 60_000];
    let single_bound = chi_square_bound(d as usize - 2);
    let pair_bound = chi_square_bound((d as usize - 1).pow(2) - 1);
    for seed in [1, 2, 3] {
        let plan = TitlePlan::new(&sizes, &params(d, random(None)), DiskIndex(2), seed).unwrap();
        for (k, (single, pair)) in backup_offset_statistics(&plan).into_iter().enumerate() {
            assert!(
                single < single_bound,
                "seed {seed} disk {k}: chi2 {single} ≥ {single_bound}"
            );
            assert!(
                pair < pair_bound,
                "seed {seed} disk {k}: pair chi2 {pair} ≥ {pair_bound}"
            );
        }
    }
    // The statistics do reject non-random placements.
    let rr = TitlePlan::new(&sizes, &params(d, deterministic(None)), DiskIndex(2), 0).unwrap();
    assert!(
        backup_offset_statistics(&rr)
            .iter()
            .all(|&(s, p)| s < 1.0 && p > 100.0 * pair_bound)
    );
    let skew = [3100u64, 3000, 3000, 2900].map(|c| c * 10);
    assert!(chi_square(&skew) > single_bound);
}

#[test]
fn random_declustered_fragments_are_uniform() {
    // D = 6 and three 16 KiB fragments per round: each fragment's disk is
    // uniform over the five others, and the three are distinct.
    let d = 6usize;
    let sizes = vec![48 * K; 30_000];
    let plan = TitlePlan::new(
        &sizes,
        &params(d as u32, random(Some(16 * K))),
        DiskIndex(0),
        9,
    )
    .unwrap();
    let mut by_position = vec![vec![0u64; d - 1]; 3];
    for i in 0..plan.rounds() {
        let k = plan.primary(i).disk.0 as usize;
        let backups = plan.backups(i);
        assert_eq!(backups.len(), 3);
        for (position, b) in backups.iter().enumerate() {
            by_position[position][(b.disk.0 as usize + d - k - 1) % d] += 1;
        }
    }
    for counts in by_position {
        assert!(chi_square(&counts) < chi_square_bound(d - 2), "{counts:?}");
    }
}

#[test]
fn random_placement_is_reproducible_per_seed() {
    let sizes: Vec<u64> = (0..200).map(|i| (i % 4) * 16 * K).collect();
    let p = params(4, random(Some(16 * K)));
    let a = TitlePlan::new(&sizes, &p, DiskIndex(3), 11).unwrap();
    assert_eq!(a, TitlePlan::new(&sizes, &p, DiskIndex(3), 11).unwrap());
    assert_ne!(a, TitlePlan::new(&sizes, &p, DiskIndex(3), 12).unwrap());
    let mut one = ArrayAllocator::uniform(4, 100);
    let mut two = ArrayAllocator::uniform(4, 100);
    assert_eq!(one.place(&a).unwrap(), two.place(&a).unwrap());
}

// ---------------------------------------------------------------------------
// Property tests.

/// A title's block-multiple round sizes with a few empty rounds.
fn round_sizes(block_bytes: u64, stride_blocks: u64) -> impl Strategy<Value = Vec<u64>> {
    proptest::collection::vec(
        prop_oneof![1 => Just(0u64), 6 => 1..=stride_blocks].prop_map(move |b| b * block_bytes),
        0..80,
    )
}

fn layout_params() -> impl Strategy<Value = LayoutParams> {
    let backup = prop_oneof![
        1 => Just(None),
        4 => (
            any::<bool>(),
            prop_oneof![Just(None), (1u64..=10).prop_map(Some)],
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(det, b_d_blocks, per_round, per_title)| Some(BackupParams {
                placement: if det {
                    ReplicaPlacement::Deterministic
                } else {
                    ReplicaPlacement::Random
                },
                backup_block_bytes: b_d_blocks.map(|n| n * 512),
                fragment_sequence: if per_round {
                    FragmentSequence::PerRound
                } else {
                    FragmentSequence::PerFragment
                },
                round_robin_counter: if per_title {
                    RoundRobinCounter::PerTitle
                } else {
                    RoundRobinCounter::PerDisk
                },
                disk_groups: 1,
            })),
    ];
    // Segment runs of 1 (variable-grain) and of 2 to 4 rounds.
    (
        1u32..=7,
        1u64..=8,
        backup,
        prop_oneof![Just(1u32), 2u32..=4],
    )
        .prop_map(|(d, stride_blocks, backup, segment_rounds)| LayoutParams {
            disk_count: if backup.is_some() { d + 1 } else { d },
            stride_bytes: stride_blocks * 512,
            block_bytes: 512,
            backup,
            segment_rounds,
            stripe_disks: 0,
        })
}

/// Some titles over one parameter set: (sizes, start disk, seed) each.
fn titles() -> impl Strategy<Value = (LayoutParams, Vec<(Vec<u64>, u32, u64)>)> {
    layout_params().prop_flat_map(|p| {
        let title = (
            round_sizes(512, p.stride_bytes / 512),
            0..p.disk_count,
            any::<u64>(),
        );
        (Just(p), proptest::collection::vec(title, 1..5))
    })
}

fn fragment_bytes(p: &LayoutParams, round_bytes: u64) -> u64 {
    p.backup
        .and_then(|b| b.backup_block_bytes)
        .unwrap_or(round_bytes.max(1))
}

/// The deterministic counter a round on disk `k` steps.
fn slot(backup: &BackupParams, k: u32) -> usize {
    match backup.round_robin_counter {
        RoundRobinCounter::PerDisk => k as usize,
        RoundRobinCounter::PerTitle => 0,
    }
}

/// Plan-level invariants that need no allocation.
fn check_plan(plan: &TitlePlan, sizes: &[u64], start: u32) -> Result<(), TestCaseError> {
    let p = *plan.params();
    let d = p.disk_count;
    prop_assert_eq!(plan.rounds(), sizes.len());
    // Deterministic rule, simulated independently: a fragment counter per
    // disk, or one for the title in slot 0.
    let mut counter = vec![0u64; d as usize];
    let r = p.segment_rounds as usize;
    let mut run_counter = 0;
    let mut previous_backups: Vec<(u32, DiskIndex)> = Vec::new();
    for (i, &bytes) in sizes.iter().enumerate() {
        let primary = plan.primary(i);
        let k = (start + (i / r) as u32) % d;
        // A run starts on a stride boundary and is packed contiguously on
        // its disk.
        if r > 1 && i % r == 0 {
            prop_assert_eq!(plan.primary_offset_bytes(i) % p.stride_bytes, 0);
        }
        if i % r != 0 {
            prop_assert_eq!(
                plan.primary_offset_bytes(i),
                plan.primary_offset_bytes(i - 1) + sizes[i - 1],
                "round {} does not follow round {} on disk {}",
                i,
                i - 1,
                k
            );
        }
        prop_assert_eq!(primary.disk, DiskIndex(k));
        prop_assert_eq!(primary.bytes, bytes);
        prop_assert!(primary.extent_count <= 2 && (primary.extent_count == 0) == (bytes == 0));
        let backups = plan.backups(i);
        let Some(backup) = p.backup else {
            prop_assert!(backups.is_empty());
            continue;
        };
        let disks: BTreeSet<u32> = backups.iter().map(|b| b.disk.0).collect();
        prop_assert_eq!(
            disks.len(),
            backups.len(),
            "two backup requests on one disk"
        );
        if r > 1 {
            if i % r == 0 {
                run_counter = counter[slot(&backup, k)];
            } else {
                counter[slot(&backup, k)] = run_counter;
            }
        }
        // Within a run, fragment q of every round goes where it went in
        // the run's previous round (both placements): the run's backup is
        // contiguous on its disk(s).
        let mut this_backups = Vec::new();
        for (e, b) in backups.iter().enumerate() {
            for &q in plan.fragment_ordinals(i, e) {
                this_backups.push((q, b.disk));
            }
        }
        if i % r != 0 {
            for (q, disk) in &this_backups {
                if let Some((_, was)) = previous_backups.iter().find(|(pq, _)| pq == q) {
                    prop_assert_eq!(disk, was, "round {} fragment {} moved within its run", i, q);
                }
            }
        }
        previous_backups = this_backups;
        prop_assert!(!disks.contains(&k), "backup on the primary's disk");
        let fb = fragment_bytes(&p, bytes);
        let fragments = bytes.div_ceil(fb).max(1);
        let mut pieces = Vec::new();
        for (e, b) in backups.iter().enumerate() {
            prop_assert!((1..=2).contains(&b.extent_count));
            let ranges: Vec<Range<u64>> = plan.fragment_ranges(i, e).collect();
            prop_assert_eq!(ranges.iter().map(|r| r.end - r.start).sum::<u64>(), b.bytes);
            for &q in plan.fragment_ordinals(i, e) {
                if backup.placement == ReplicaPlacement::Deterministic {
                    let c = counter[slot(&backup, k)] + u64::from(q);
                    let want = (u64::from(k) + 1 + c % u64::from(d - 1)) % u64::from(d);
                    prop_assert_eq!(u64::from(b.disk.0), want, "round {} fragment {}", i, q);
                }
            }
            pieces.extend(ranges);
        }
        // Each byte of the round is in exactly one backup fragment.
        pieces.sort_by_key(|r| r.start);
        let mut next = 0;
        for r in &pieces {
            prop_assert_eq!(r.start, next);
            prop_assert!(r.end > r.start);
            next = r.end;
        }
        prop_assert_eq!(next, bytes);
        let wanted_disks = if bytes == 0 {
            0
        } else {
            fragments.min(u64::from(d - 1))
        };
        prop_assert_eq!(
            backups.len() as u64,
            wanted_disks,
            "fragments spread over too few disks"
        );
        counter[slot(&backup, k)] += match backup.fragment_sequence {
            FragmentSequence::PerFragment => fragments,
            FragmentSequence::PerRound => 1,
        };
        if backup.backup_block_bytes.is_none() && bytes > 0 && r == 1 {
            // Seed 000 Figure 2: the j-th round of the title on disk k, or
            // with one counter for the title, its round i.
            let j = match backup.round_robin_counter {
                RoundRobinCounter::PerDisk => i as u64 / u64::from(d),
                RoundRobinCounter::PerTitle => i as u64,
            };
            let want = (u64::from(k) + 1 + j % u64::from(d - 1)) % u64::from(d);
            if backup.placement == ReplicaPlacement::Deterministic {
                prop_assert_eq!(u64::from(backups[0].disk.0), want);
            }
        }
    }
    Ok(())
}

/// Device byte ranges of every extent, checked against the held strides.
fn check_layout(
    plan: &TitlePlan,
    layout: &TitleLayout,
    ranges: &mut Vec<(u32, u64, u64)>,
) -> Result<(), TestCaseError> {
    let s = plan.params().stride_bytes;
    let mut check_extents = |disk: DiskIndex, replica, extents: &Extents, bytes: u64| {
        prop_assert!(extents.len() <= 2);
        prop_assert_eq!(extents.bytes(), bytes);
        let held = layout.strides().strides(disk, replica);
        for e in extents.as_slice() {
            prop_assert!(e.length_bytes > 0 && e.offset_in_stride_bytes + e.length_bytes <= s);
            prop_assert!(
                held.contains(&e.stride_index),
                "extent outside the title's strides"
            );
            prop_assert_eq!(
                e.device_offset_bytes,
                e.stride_index * s + e.offset_in_stride_bytes
            );
            ranges.push((disk.0, e.device_offset_bytes, e.device_end_bytes()));
        }
        Ok(())
    };
    for (i, round) in layout.rounds().iter().enumerate() {
        let primary = plan.primary(i);
        prop_assert_eq!(round.primary_disk, primary.disk);
        prop_assert_eq!(round.primary.len() as u32, primary.extent_count);
        check_extents(
            primary.disk,
            Replica::Primary,
            &round.primary,
            primary.bytes,
        )?;
        prop_assert_eq!(round.backups.len(), plan.backups(i).len());
        for (b, read) in round.backups.iter().zip(plan.backups(i)) {
            prop_assert_eq!(b.disk, read.disk);
            prop_assert_eq!(b.extents.len() as u32, read.extent_count);
            let fragment_total: u64 = b.fragments.iter().map(|r| r.end - r.start).sum();
            prop_assert_eq!(fragment_total, read.bytes);
            check_extents(b.disk, Replica::Backup, &b.extents, read.bytes)?;
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn plans_follow_the_placement_rules((p, titles) in titles()) {
        for (sizes, start, seed) in &titles {
            let plan = TitlePlan::new(sizes, &p, DiskIndex(*start), *seed).unwrap();
            check_plan(&plan, sizes, *start)?;
            // B_d at least as large as every round places exactly as no B_d.
            if let Some(backup) = p.backup {
                let whole = LayoutParams {
                    backup: Some(BackupParams { backup_block_bytes: None, ..backup }),
                    ..p
                };
                let big = LayoutParams {
                    backup: Some(BackupParams {
                        backup_block_bytes: Some(p.stride_bytes),
                        ..backup
                    }),
                    ..p
                };
                let a = TitlePlan::new(sizes, &whole, DiskIndex(*start), *seed).unwrap();
                let b = TitlePlan::new(sizes, &big, DiskIndex(*start), *seed).unwrap();
                for i in 0..a.rounds() {
                    prop_assert_eq!(a.backups(i), b.backups(i));
                }
            }
        }
    }

    #[test]
    fn placed_titles_never_overlap_and_free_cleanly(
        (p, titles) in titles(),
        release_order in any::<proptest::sample::Index>(),
    ) {
        let d = p.disk_count;
        let plans: Vec<TitlePlan> = titles
            .iter()
            .map(|(sizes, start, seed)| TitlePlan::new(sizes, &p, DiskIndex(*start), *seed).unwrap())
            .collect();
        let capacity = 2 + plans.iter().map(|plan| {
            (0..d).map(|k| plan.strides_needed_on(DiskIndex(k))).max().unwrap()
        }).sum::<u64>();
        let mut array = ArrayAllocator::uniform(d, capacity);
        let layouts: Vec<TitleLayout> = plans.iter().map(|plan| array.place(plan).unwrap()).collect();

        let mut ranges = Vec::new();
        let mut held = BTreeSet::new();
        for (plan, layout) in plans.iter().zip(&layouts) {
            check_layout(plan, layout, &mut ranges)?;
            for (disk, replica, stride) in layout.strides().iter() {
                prop_assert!(held.insert((disk, stride)), "stride held twice");
                prop_assert!(!array.disk(disk).is_free(stride));
                let _ = replica;
            }
            prop_assert_eq!(
                layout.strides().count(),
                (0..d).map(|k| plan.strides_needed_on(DiskIndex(k))).sum::<u64>()
            );
        }
        let free: u64 = (0..d).map(|k| array.disk(DiskIndex(k)).free_count()).sum();
        prop_assert_eq!(free + held.len() as u64, capacity * u64::from(d));
        ranges.sort();
        for w in ranges.windows(2) {
            prop_assert!(w[0].0 != w[1].0 || w[0].2 <= w[1].1, "extents overlap: {:?}", w);
        }
        let strides: Vec<TitleStrides> = layouts.iter().map(|l| l.strides().clone()).collect();
        prop_assert_eq!(&ArrayAllocator::rebuild(&vec![capacity; d as usize], &strides).unwrap(), &array);

        // Free one title and place it again: first fit hands back the same strides.
        let victim = release_order.index(plans.len());
        array.release(layouts[victim].strides()).unwrap();
        let again = array.place(&plans[victim]).unwrap();
        prop_assert_eq!(&again, &layouts[victim]);
        // Free everything: the next title starts again from LBN 0 on every disk.
        for l in &layouts {
            array.release(l.strides()).unwrap();
        }
        prop_assert_eq!(&array, &ArrayAllocator::uniform(d, capacity));
        let fresh = array.place(&plans[victim]).unwrap();
        for k in 0..d {
            let disk = DiskIndex(k);
            let mut got: Vec<u64> = [Replica::Primary, Replica::Backup]
                .iter()
                .flat_map(|&r| fresh.strides().strides(disk, r).to_vec())
                .collect();
            got.sort_unstable();
            let n = plans[victim].strides_needed_on(disk);
            prop_assert_eq!(got, (0..n).collect::<Vec<_>>());
        }
    }

    #[test]
    fn a_full_disk_fails_without_side_effects(
        (p, titles) in titles(),
        short_disk in any::<proptest::sample::Index>(),
        shortfall in 1u64..4,
    ) {
        let d = p.disk_count;
        let (sizes, start, seed) = &titles[0];
        let plan = TitlePlan::new(sizes, &p, DiskIndex(*start), *seed).unwrap();
        let needing: Vec<u32> = (0..d).filter(|&k| plan.strides_needed_on(DiskIndex(k)) > 0).collect();
        prop_assume!(!needing.is_empty());
        let short = needing[short_disk.index(needing.len())];
        // Another title occupies some space first, so "unchanged" is not trivial.
        let (other_sizes, other_start, other_seed) = titles.last().unwrap();
        let other = TitlePlan::new(other_sizes, &p, DiskIndex(*other_start), *other_seed).unwrap();
        let counts: Vec<u64> = (0..d)
            .map(|k| {
                let disk = DiskIndex(k);
                let base = other.strides_needed_on(disk);
                let need = plan.strides_needed_on(disk);
                if k == short { base + need.saturating_sub(shortfall) } else { base + need + 3 }
            })
            .collect();
        let mut array = ArrayAllocator::new(&counts);
        array.place(&other).unwrap();
        let before = array.clone();
        let err = array.place(&plan).unwrap_err();
        let need = plan.strides_needed_on(DiskIndex(short));
        prop_assert_eq!(err, LayoutError::DiskFull {
            disk: DiskIndex(short),
            needed_strides: need,
            free_strides: need.saturating_sub(shortfall),
        });
        prop_assert_eq!(&array, &before);
    }
}

#[test]
fn strides_kept_outside_titles_are_skipped_by_first_fit() {
    let sizes = [48 * K, 32 * K, 64 * K, 16 * K];
    let plan = TitlePlan::new(&sizes, &params(2, deterministic(None)), DiskIndex(0), 0).unwrap();
    let mut array = ArrayAllocator::uniform(2, 8);
    array.mark_allocated(DiskIndex(0), 0).unwrap();
    array.mark_allocated(DiskIndex(1), 1).unwrap();
    assert_eq!(
        array.mark_allocated(DiskIndex(2), 0),
        Err(LayoutError::NoSuchDisk {
            disk: DiskIndex(2),
            disk_count: 2
        })
    );
    let layout = array.place(&plan).unwrap();
    // Disk 0 holds rounds 0 and 2 (112 KiB: 2 strides, one run after the
    // kept stride 0) and the backups of rounds 1 and 3 (48 KiB: 1 stride);
    // disk 1 rounds 1 and 3 (1 stride) and the backups of rounds 0 and 2 (a
    // run of 2, which the kept stride 1 pushes past it).
    let held = |k: u32, replica| layout.strides().strides(DiskIndex(k), replica).to_vec();
    assert_eq!(held(0, Replica::Primary), vec![1, 2]);
    assert_eq!(held(0, Replica::Backup), vec![3]);
    assert_eq!(held(1, Replica::Primary), vec![0]);
    assert_eq!(held(1, Replica::Backup), vec![2, 3]);
    array.release(layout.strides()).unwrap();
    array.free(DiskIndex(0), 0).unwrap();
    array.free(DiskIndex(1), 1).unwrap();
    assert_eq!(array, ArrayAllocator::uniform(2, 8));
}

#[test]
fn per_round_fragment_sequence_starts_each_round_where_its_whole_backup_would_go() {
    // D = 4, B_d = 16 KiB, title starting on disk 0: rounds 0 and 4 are
    // disk 0's rounds j = 0 and 1. Per round, round 4's fragments start at
    // (0 + 1 + 1) mod 4 = disk 2, whatever round 0's split; per fragment they
    // continue after round 0's three fragments.
    let sizes = [48, 16, 0, 32, 64, 32].map(|s| s * K);
    let placed = |sequence: FragmentSequence| {
        let backup = Some(BackupParams {
            placement: ReplicaPlacement::Deterministic,
            backup_block_bytes: Some(16 * K),
            fragment_sequence: sequence,
            round_robin_counter: RoundRobinCounter::PerDisk,
            disk_groups: 1,
        });
        let plan = TitlePlan::new(&sizes, &params(4, backup), DiskIndex(0), 0).unwrap();
        (0..sizes.len())
            .map(|i| plan.backups(i).iter().map(|b| b.disk.0).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    };
    let per_round = placed(FragmentSequence::PerRound);
    let per_fragment = placed(FragmentSequence::PerFragment);
    assert_eq!(per_round[0], vec![1, 2, 3]);
    assert_eq!(per_fragment[0], vec![1, 2, 3]);
    // Round 4: four fragments over three disks, the fourth back on the first.
    assert_eq!(per_round[4], vec![2, 3, 1]);
    assert_eq!(per_fragment[4], vec![1, 2, 3]);
    // Whole backups (no B_d) place the same under both rules.
    for sequence in [FragmentSequence::PerFragment, FragmentSequence::PerRound] {
        let backup = Some(BackupParams {
            placement: ReplicaPlacement::Deterministic,
            backup_block_bytes: None,
            fragment_sequence: sequence,
            round_robin_counter: RoundRobinCounter::PerDisk,
            disk_groups: 1,
        });
        let plan = TitlePlan::new(&sizes, &params(4, backup), DiskIndex(0), 0).unwrap();
        let whole = deterministic(None);
        let reference = TitlePlan::new(&sizes, &params(4, whole), DiskIndex(0), 0).unwrap();
        for i in 0..sizes.len() {
            assert_eq!(plan.backups(i), reference.backups(i), "round {i}");
        }
    }
}

#[test]
fn a_per_title_counter_steps_the_backup_offset_every_round() {
    // D = 4, whole backups, title starting on disk 1: per title, round i's
    // backup is at offset 1 + i mod 3 from its primary; per disk, at
    // 1 + ⌊i/4⌋ mod 3. Both give each disk's rounds round-robin backups
    // (Figure 2): disk 2 holds rounds 1, 5, 9, whose backups go to disks
    // 3, 0, 1 per disk and 0, 1, 3 per title (offsets 1, 2, 3 and 2, 3, 1).
    let sizes = [48, 32, 16, 64, 48, 48, 32, 16, 32, 16, 64, 48].map(|s| s * K);
    let backup_disks = |counter: RoundRobinCounter| {
        let backup = Some(BackupParams {
            placement: ReplicaPlacement::Deterministic,
            backup_block_bytes: None,
            fragment_sequence: FragmentSequence::PerFragment,
            round_robin_counter: counter,
            disk_groups: 1,
        });
        let plan = TitlePlan::new(&sizes, &params(4, backup), DiskIndex(1), 0).unwrap();
        (0..sizes.len())
            .map(|i| plan.backups(i)[0].disk.0)
            .collect::<Vec<_>>()
    };
    // Primary disks: 1 2 3 0 1 2 3 0 1 2 3 0.
    assert_eq!(
        backup_disks(RoundRobinCounter::PerDisk),
        vec![2, 3, 0, 1, 3, 0, 1, 2, 0, 1, 2, 3]
    );
    assert_eq!(
        backup_disks(RoundRobinCounter::PerTitle),
        vec![2, 0, 2, 1, 3, 1, 0, 2, 0, 3, 1, 3]
    );
}

/// With G disk groups every backup fragment stays in its primary's group
/// (d mod G), never on the primary, and a group's other disks share a
/// disk's backups evenly; so a node holding G consecutive disks loses one
/// disk per group, and every round keeps a replica.
#[test]
fn disk_groups_keep_each_backup_in_its_primary_group() {
    for placement in [ReplicaPlacement::Deterministic, ReplicaPlacement::Random] {
        for b_d in [None, Some(16 * K)] {
            let backup = BackupParams {
                placement,
                backup_block_bytes: b_d,
                fragment_sequence: FragmentSequence::PerFragment,
                round_robin_counter: RoundRobinCounter::PerDisk,
                disk_groups: 2,
            };
            let p = params(8, Some(backup));
            p.validate().unwrap();
            let sizes: Vec<u64> = (0..240).map(|i| 16 * K + (i % 3) * 16 * K).collect();
            let plan = TitlePlan::new(&sizes, &p, DiskIndex(3), 7).unwrap();
            let mut backups_on = [[0u64; 8]; 8];
            for round in 0..sizes.len() {
                let primary = plan.primary(round).disk;
                for read in plan.backups(round) {
                    assert_eq!(
                        read.disk.0 % 2,
                        primary.0 % 2,
                        "{placement:?} {b_d:?} round {round}"
                    );
                    assert_ne!(read.disk, primary);
                    backups_on[primary.index()][read.disk.index()] += 1;
                }
            }
            // Nodes of two consecutive disks: a node's loss leaves each of
            // its rounds a replica.
            for node in 0..4u32 {
                let lost = [2 * node, 2 * node + 1];
                for round in 0..sizes.len() {
                    let primary = plan.primary(round).disk.0;
                    if lost.contains(&primary) {
                        assert!(
                            plan.backups(round)
                                .iter()
                                .all(|r| !lost.contains(&r.disk.0))
                        );
                    }
                }
            }
            if placement == ReplicaPlacement::Deterministic && b_d.is_none() {
                // Disk 3's 30 rounds: 10 backups on each of 1, 5 and 7.
                let shares: Vec<u64> = [1, 5, 7].iter().map(|&d| backups_on[3][d]).collect();
                assert_eq!(shares, [10, 10, 10]);
            }
        }
    }
    // Groups must divide the disks into groups of at least two.
    for groups in [0, 3, 8] {
        let mut backup = deterministic(None).unwrap();
        backup.disk_groups = groups;
        let e = params(8, Some(backup)).validate().unwrap_err();
        assert!(matches!(e, LayoutError::DiskGroups { .. }), "{groups}: {e}");
    }
}

#[test]
fn a_disk_without_a_run_of_free_strides_takes_them_one_by_one() {
    // Disk 0 of 8 strides with every even stride kept: no two free strides
    // are adjacent, so its two primary strides are taken first fit as the
    // data reaches them (after the backup's run of one, stride 1), and the
    // placement still succeeds.
    let sizes = [48 * K, 32 * K, 64 * K, 16 * K];
    let plan = TitlePlan::new(&sizes, &params(2, deterministic(None)), DiskIndex(0), 0).unwrap();
    let mut array = ArrayAllocator::uniform(2, 8);
    for stride in [0, 2, 4, 6] {
        array.mark_allocated(DiskIndex(0), stride).unwrap();
    }
    let layout = array.place(&plan).unwrap();
    let held = |k: u32, replica| layout.strides().strides(DiskIndex(k), replica).to_vec();
    assert_eq!(held(0, Replica::Primary), vec![3, 5]);
    assert_eq!(held(0, Replica::Backup), vec![1]);
    assert_eq!(held(1, Replica::Primary), vec![0]);
    assert_eq!(held(1, Replica::Backup), vec![1, 2]);
}

#[test]
fn the_highest_allocated_stride_is_where_a_disks_data_ends() {
    // 70 strides: the last word has 6 strides and 58 bits of padding.
    let mut disk = StrideAllocator::new(70);
    assert_eq!(disk.highest_allocated(), None);
    assert_eq!(disk.allocate(), Some(0));
    assert_eq!(disk.highest_allocated(), Some(0));
    assert_eq!(disk.allocate_run(65), Some(1));
    assert_eq!(disk.highest_allocated(), Some(65));
    disk.mark_allocated(DiskIndex(0), 69).unwrap();
    assert_eq!(disk.highest_allocated(), Some(69));
    disk.free(DiskIndex(0), 69).unwrap();
    assert_eq!(disk.highest_allocated(), Some(65));
    // A hole below the end does not move it.
    disk.free(DiskIndex(0), 3).unwrap();
    assert_eq!(disk.highest_allocated(), Some(65));
    // 64 strides exactly: no padding.
    let mut full = StrideAllocator::new(64);
    full.mark_allocated(DiskIndex(0), 63).unwrap();
    assert_eq!(full.highest_allocated(), Some(63));
}

/// Seed 001's placement: a title striped over W < D disks keeps every run
/// on the W disks from its start disk (wrapping past the last disk), its
/// backups on other disks as without W, and a W wider than the array is
/// refused by name.
#[test]
fn a_title_striped_over_w_disks_stays_on_them() {
    let mut p = params(6, deterministic(None));
    p.stripe_disks = 3;
    let sizes: Vec<u64> = (0..12).map(|i| (1 + i % 3) * 16 * K).collect();
    let plan = TitlePlan::new(&sizes, &p, DiskIndex(4), 7).unwrap();
    let primaries: Vec<u32> = (0..12).map(|r| plan.primary(r).disk.0).collect();
    assert_eq!(primaries, vec![4, 5, 0, 4, 5, 0, 4, 5, 0, 4, 5, 0]);
    for r in 0..12 {
        let backups = plan.backups(r);
        assert_eq!(backups.len(), 1);
        assert_ne!(backups[0].disk, plan.primary(r).disk);
    }
    // Only the W disks hold the title's primary strides, and it places.
    let placed = ArrayAllocator::uniform(6, 64).place(&plan).unwrap();
    assert_eq!(placed.rounds().len(), 12);
    for disk in 0..6 {
        let strides = plan.strides_needed(DiskIndex(disk), Replica::Primary);
        assert_eq!(strides > 0, [4, 5, 0].contains(&disk), "disk {disk}");
    }
    // W = D places exactly as the default.
    let mut full = p;
    full.stripe_disks = 6;
    let mut default = p;
    default.stripe_disks = 0;
    let a = TitlePlan::new(&sizes, &full, DiskIndex(4), 7).unwrap();
    let b = TitlePlan::new(&sizes, &default, DiskIndex(4), 7).unwrap();
    assert!((0..12).all(|r| a.primary(r) == b.primary(r) && a.backups(r) == b.backups(r)));
    // Segments keep their runs on the W disks too.
    let mut seg = p;
    seg.segment_rounds = 2;
    let plan = TitlePlan::new(&sizes, &seg, DiskIndex(1), 7).unwrap();
    let runs: Vec<u32> = (0..12).map(|r| plan.primary(r).disk.0).collect();
    assert_eq!(runs, vec![1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3]);
    p.stripe_disks = 7;
    let e = TitlePlan::new(&sizes, &p, DiskIndex(0), 7).unwrap_err();
    assert_eq!(
        e,
        LayoutError::StripeWiderThanArray {
            stripe_disks: 7,
            disk_count: 6
        }
    );
    assert!(e.to_string().contains("7 disks of a 6-disk array"), "{e}");
}
