use proptest::prelude::*;

use super::*;
use crate::units::{NS_PER_MS, NS_PER_S};

const MB: u64 = 1_000_000;

fn id(n: u64) -> CycleStreamId {
    CycleStreamId(n)
}

/// Runs `cycles` cycles and checks the scheduler's invariant after each:
/// every read starts where its stream's coverage stood and reaches past the
/// next cycle's end (or two, for a combined stream on its turn), a stream
/// not read covers the next cycle, and the charge fits the cycle.
fn check_cycle(s: &mut CycleScheduler, start_ns: u64) -> CyclePlan {
    let before: Vec<(CycleStreamId, u64)> = s
        .stream_ids()
        .into_iter()
        .map(|i| (i, s.coverage_ns(i).unwrap()))
        .collect();
    let plan = s.plan();
    let end = start_ns + plan.cycle_ns;
    let next_end = end + s.next_cycle_ns();
    assert!(
        plan.charged_ns <= plan.cycle_ns,
        "cycle {} charged {} > {}",
        plan.index,
        plan.charged_ns,
        plan.cycle_ns
    );
    for (sid, cov) in before {
        assert!(cov >= end, "stream {sid:?} covers {cov} < cycle end {end}");
        let after = s.coverage_ns(sid).unwrap();
        assert!(
            after >= next_end,
            "stream {sid:?} covers {after} < {next_end}"
        );
        if let Some(r) = plan.reads.iter().find(|r| r.stream == sid) {
            assert_eq!(r.from_ns, cov);
            assert_eq!(r.to_ns, after);
        } else {
            assert_eq!(after, cov);
        }
    }
    plan
}

#[test]
fn arithmetic_of_the_paper_disk() {
    let d = CycleDisk::seed004();
    // 576 kbit/s for 0.5 s: 36,000 bytes; 0.72 ms at 50 MB/s.
    assert_eq!(bytes_for(576_000, 500 * NS_PER_MS), 36_000);
    assert_eq!(d.transfer_ns(36_000), 720_000);
    assert_eq!(d.read_ns(36_000), 10_720_000);
    assert_eq!(bytes_for(1, 1), 1, "rounded up");
}

#[test]
fn best_fixed_cycle_balances_disk_and_memory() {
    let d = CycleDisk::seed004();
    // 576 kbit/s, 16 MB: the disk limit T/(10 ms + 1.44 ms·T/s) meets the
    // memory limit 16 MB/(72 kB/s·T) near 1.6–1.7 s.
    let (t, n) = best_fixed_cycle_ns(&d, 16 * MB, 576_000, 100 * NS_PER_MS, 10 * NS_PER_S);
    assert!((1_500 * NS_PER_MS..=1_800 * NS_PER_MS).contains(&t), "{t}");
    assert!((125..=140).contains(&n), "{n}");
}

#[test]
fn combination_reads_as_figure_1() {
    let mut c = CycleConfig::seed004(128 * MB, NS_PER_S, Policy::Combination);
    // Low thresholds so that the first cycle with streams combines.
    c.combination.memory_threshold_permille = 0;
    c.combination.time_threshold_permille = 0;
    c.combination.difference_threshold_permille = 0;
    let mut s = CycleScheduler::new(c);
    assert_eq!(s.begin_cycle(0), None);
    for (n, r) in [(1, 1_000_000), (2, 200_000), (3, 300_000)] {
        s.admit(id(n), r).unwrap();
    }
    check_cycle(&mut s, 0);
    let op = s.begin_cycle(NS_PER_S);
    assert_eq!(
        op,
        Some(CycleOp::Combine {
            first: id(2),
            second: id(3)
        })
    );
    // T2: B reads two cycles, C one, A one.
    let p = check_cycle(&mut s, NS_PER_S);
    let bytes = |p: &CyclePlan, n| p.reads.iter().find(|r| r.stream == id(n)).map(|r| r.bytes);
    assert_eq!(bytes(&p, 2), Some(2 * bytes_for(200_000, NS_PER_S)));
    assert_eq!(bytes(&p, 3), Some(bytes_for(300_000, NS_PER_S)));
    assert_eq!(bytes(&p, 1), Some(bytes_for(1_000_000, NS_PER_S)));
    assert_eq!(s.combined_streams(), 2);
    // Equation 2: the combined pair counts twice.
    assert_eq!(
        s.memory_bytes(),
        bytes_for(1_000_000, NS_PER_S) + 2 * bytes_for(500_000, NS_PER_S)
    );
    // T3 on: B and C alternate with two cycles each. Raise the thresholds
    // so nothing else happens.
    s.config_mut().combination.memory_threshold_permille = 1000;
    s.config_mut().combination.time_threshold_permille = 1000;
    s.clear_sflag();
    s.begin_cycle(2 * NS_PER_S);
    let p = check_cycle(&mut s, 2 * NS_PER_S);
    assert_eq!(bytes(&p, 2), None);
    assert_eq!(bytes(&p, 3), Some(2 * bytes_for(300_000, NS_PER_S)));
    s.begin_cycle(3 * NS_PER_S);
    let p = check_cycle(&mut s, 3 * NS_PER_S);
    assert_eq!(bytes(&p, 2), Some(2 * bytes_for(200_000, NS_PER_S)));
    assert_eq!(bytes(&p, 3), None);
    assert_eq!(p.reads.len(), 2, "one access saved per cycle");
}

#[test]
fn memory_pressure_splits_the_highest_bitrate_pair_then_shrinks() {
    let mut c = CycleConfig::seed004(128 * MB, NS_PER_S, Policy::Combination);
    c.combination.memory_threshold_permille = 0;
    c.combination.time_threshold_permille = 0;
    c.combination.difference_threshold_permille = 0;
    let mut s = CycleScheduler::new(c);
    s.begin_cycle(0);
    for n in 0..4 {
        s.admit(id(n), 100_000 * (n + 1)).unwrap();
    }
    check_cycle(&mut s, 0);
    let mut t = NS_PER_S;
    // Disk-heavy (tiny streams, big memory): two combinations.
    for _ in 0..2 {
        assert!(matches!(s.begin_cycle(t), Some(CycleOp::Combine { .. })));
        check_cycle(&mut s, t);
        t += s.cycle_ns();
    }
    assert_eq!(s.combined_streams(), 4);
    // Now make memory the pressure: shrink the budget below the disk's use.
    s.config_mut().memory_bytes = s.memory_bytes() + 1;
    let op = s.begin_cycle(t);
    assert_eq!(
        op,
        Some(CycleOp::Split {
            first: id(3),
            second: Some(id(2))
        })
    );
    check_cycle(&mut s, t);
    t += s.cycle_ns();
    let op = s.begin_cycle(t);
    assert!(matches!(op, Some(CycleOp::Split { .. })), "{op:?}");
    check_cycle(&mut s, t);
    t += s.cycle_ns();
    let op = s.begin_cycle(t);
    assert_eq!(
        op,
        Some(CycleOp::Shrink {
            from_ns: NS_PER_S,
            to_ns: 900 * NS_PER_MS
        })
    );
    check_cycle(&mut s, t);
    t += s.cycle_ns();
    s.begin_cycle(t);
    assert_eq!(s.cycle_ns(), 900 * NS_PER_MS);
    check_cycle(&mut s, t);
}

#[test]
fn doubling_uncombines_every_stream_without_a_late_read() {
    let mut c = CycleConfig::seed004(1_000 * MB, 200 * NS_PER_MS, Policy::Combination);
    c.combination.memory_threshold_permille = 0;
    c.combination.time_threshold_permille = 0;
    c.combination.difference_threshold_permille = 0;
    let mut s = CycleScheduler::new(c);
    s.begin_cycle(0);
    for n in 0..8 {
        s.admit(id(n), 128_000 + 10_000 * n).unwrap();
    }
    check_cycle(&mut s, 0);
    let mut t = 200 * NS_PER_MS;
    let mut ops = Vec::new();
    for _ in 0..20 {
        let op = s.begin_cycle(t);
        check_cycle(&mut s, t);
        t += s.cycle_ns();
        ops.extend(op);
    }
    let doubled = ops
        .iter()
        .any(|o| matches!(o, CycleOp::Double { from_ns, to_ns } if *to_ns == 2 * *from_ns));
    assert!(doubled, "{ops:?}");
    assert!(s.cycle_ns() >= 400 * NS_PER_MS);
}

#[test]
fn a_doubling_that_does_not_fit_one_cycle_is_prepared() {
    let mut c = CycleConfig::seed004(1_000 * MB, 200 * NS_PER_MS, Policy::Combination);
    c.combination.memory_threshold_permille = 0;
    c.combination.time_threshold_permille = 0;
    c.combination.difference_threshold_permille = 0;
    let mut s = CycleScheduler::new(c);
    let mut t = 0;
    let mut ops = Vec::new();
    let mut next = 0;
    for _ in 0..80 {
        ops.extend(s.begin_cycle(t));
        // Keep the disk busy: two arrivals a cycle, refused when full.
        for _ in 0..2 {
            let _ = s.admit(id(next), 128_000);
            next += 1;
        }
        check_cycle(&mut s, t);
        t += s.cycle_ns();
    }
    let prepared = ops
        .iter()
        .position(|o| matches!(o, CycleOp::PrepareDouble { prepared } if *prepared > 0));
    let doubled = ops
        .iter()
        .rposition(|o| matches!(o, CycleOp::Double { .. }));
    assert!(prepared.is_some() && doubled > prepared, "{ops:?}");
}

#[test]
fn admission_refuses_what_does_not_fit() {
    let c = CycleConfig::seed004(128 * MB, 500 * NS_PER_MS, Policy::Fixed);
    let mut s = CycleScheduler::new(c);
    s.begin_cycle(0);
    // 1 Mbit/s at 0.5 s: 62.5 kB, 11.25 ms a read: 44 fit in 500 ms.
    let admitted = (0..100)
        .filter(|&n| s.admit(id(n), 1_000_000).is_ok())
        .count();
    assert_eq!(admitted, 44);
    assert_eq!(s.admit(id(200), 1_000_000), Err(Rejection::Disk));
    assert_eq!(s.admit(id(0), 1), Err(Rejection::Duplicate));
    let p = s.plan();
    assert!(p.charged_ns <= p.cycle_ns);
    assert_eq!(s.admit(id(300), 1), Err(Rejection::NotInCycle));
    // Memory: 5 s cycles of 1 Mbit/s need 625 kB each: 2 MB holds 3.
    let mut s = CycleScheduler::new(CycleConfig::seed004(2 * MB, 5 * NS_PER_S, Policy::Fixed));
    s.begin_cycle(0);
    let admitted = (0..10)
        .filter(|&n| s.admit(id(n), 1_000_000).is_ok())
        .count();
    assert_eq!(admitted, 3);
    assert_eq!(s.admit(id(20), 1_000_000), Err(Rejection::Memory));
}

#[test]
fn fixed_stretch_slots_and_shared_memory() {
    let d = CycleDisk::seed004();
    let mut f = FixedStretch::new(d, 128 * MB, NS_PER_S, true);
    for n in 0..10 {
        f.admit(id(n), 800_000).unwrap();
    }
    let b = bytes_for(800_000, NS_PER_S);
    assert_eq!(f.equation2_bytes(), 10 * b);
    // Equal streams spread over the cycle share about (N+1)/2 buffers
    // (less: the slots fill only part of the cycle).
    let shared = f.memory_bytes();
    assert!(shared < 10 * b && shared > 10 * b / 2, "{shared}");
    // A departed stream's hole is reused by one that fits.
    f.remove(id(3));
    let hole = f.slots()[3].offset_ns;
    f.admit(id(50), 800_000).unwrap();
    assert_eq!(f.slots()[3].stream, id(50));
    assert!(f.slots()[3].offset_ns < hole);
    // Reads are planned in slot order and due at their slot's end.
    let p = f.plan(7 * NS_PER_S);
    for (r, s) in p.iter().zip(f.slots()) {
        assert_eq!(r.not_before_ns, 7 * NS_PER_S + s.offset_ns);
        assert_eq!(r.read.from_ns, r.not_before_ns + s.slot_ns);
    }
    // Even slots sized for 1 Mbit/s at 1 s: 12.5 ms each, 80 of them, at
    // k·12.5 ms; a lower bitrate still takes a whole slot, a higher one none.
    let mut f = FixedStretch::with_even_slots(d, 128 * MB, NS_PER_S, true, 1_000_000);
    assert_eq!(f.admit(id(0), 2_000_000), Err(Rejection::Disk));
    let n = (0..200)
        .filter(|&n| f.admit(id(n), 128_000).is_ok())
        .count();
    assert_eq!(n, 80);
    let offsets: Vec<u64> = f.slots().iter().map(|s| s.offset_ns).collect();
    assert_eq!(offsets, (0..80).map(|k| k * 12_500_000).collect::<Vec<_>>());
    let hole = f
        .slots()
        .iter()
        .find(|s| s.stream == id(5))
        .unwrap()
        .offset_ns;
    f.remove(id(5));
    f.admit(id(500), 1_000_000).unwrap();
    let taken = f.slots().iter().find(|s| s.stream == id(500)).unwrap();
    assert_eq!(taken.offset_ns, hole);
    // The first streams go to grid slots 0, 64, 32, 16 (van der Corput
    // over 128, slots past 80 skipped).
    let first: Vec<u64> = [0, 1, 2, 3]
        .map(|n| {
            f.slots()
                .iter()
                .find(|s| s.stream == id(n))
                .unwrap()
                .offset_ns
        })
        .to_vec();
    assert_eq!(first, [0, 64, 32, 16].map(|k| k * 12_500_000).to_vec());
    // Spread reads share more than packed ones.
    let mut packed = FixedStretch::new(d, 128 * MB, NS_PER_S, true);
    let mut spread = FixedStretch::with_even_slots(d, 128 * MB, NS_PER_S, true, 1_000_000);
    for n in 0..20 {
        packed.admit(id(n), 1_000_000).unwrap();
        spread.admit(id(n), 1_000_000).unwrap();
    }
    assert!(spread.memory_bytes() < packed.memory_bytes());
    // Admission: slots fill the cycle (1 Mbit/s, 1 s: 12.5 ms a slot, 80).
    let mut f = FixedStretch::new(d, 128 * MB, NS_PER_S, false);
    let n = (0..200)
        .filter(|&n| f.admit(id(n), 1_000_000).is_ok())
        .count();
    assert_eq!(n, 80);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Whatever arrives and leaves, and whatever the thresholds make the
    /// scheduler do, every cycle fits and every stream stays covered.
    #[test]
    fn every_cycle_fits_and_covers(
        seed in any::<u64>(),
        memory_mb in 1u64..64,
        initial_ms in prop::sample::select(vec![100u64, 500, 1_500, 5_000]),
        m_t in 0u32..1000,
        t_t in 0u32..1000,
        d_t in 0u32..300,
        pseudo in any::<bool>(),
    ) {
        let mut c = CycleConfig::seed004(memory_mb * MB, initial_ms * NS_PER_MS, Policy::Combination);
        c.combination.memory_threshold_permille = m_t;
        c.combination.time_threshold_permille = t_t;
        c.combination.difference_threshold_permille = d_t;
        if pseudo {
            c.combination.trigger = Trigger::PseudoCode;
        }
        let mut s = CycleScheduler::new(c);
        let mut rng = crate::layout::rng::SplitMix64::new(seed);
        let mut t = 0;
        let mut next = 0;
        for _ in 0..120 {
            // Departures: each stream leaves with probability 1/16.
            for i in s.stream_ids() {
                if rng.next_below(16) == 0 {
                    s.remove(i);
                }
            }
            s.begin_cycle(t);
            for _ in 0..rng.next_below(4) {
                let _ = s.admit(id(next), 128_000 + rng.next_below(896_001));
                next += 1;
            }
            check_cycle(&mut s, t);
            prop_assert!(s.memory_bytes() <= s.config().memory_bytes.max(1) || s.streams() == 0);
            t += s.cycle_ns();
        }
    }
}

#[test]
fn check_schedule_acts_by_the_prose_or_the_pseudo_code_and_names_the_pressure() {
    let prose = CombinationParams::default();
    // Below both thresholds: nothing, unless forced (SFLAG).
    assert_eq!(prose.check(0.5, 0.3, false), None);
    assert_eq!(prose.check(0.5, 0.3, true), Some(Pressure::Memory));
    assert_eq!(prose.check(0.3, 0.5, true), Some(Pressure::Time));
    // Over u_tT and apart by more than u_dT: relieve the disk.
    assert_eq!(prose.check(0.5, 0.85, false), Some(Pressure::Time));
    assert_eq!(prose.check(0.9, 0.2, false), Some(Pressure::Memory));
    // Over a threshold but within u_dT: the prose waits.
    assert_eq!(prose.check(0.82, 0.85, false), None);
    assert!(!prose.apart(0.82, 0.85));
    assert!(prose.apart(0.5, 0.85));
    // The pseudo-code's `abs(u_m - u_t) < u_dT` acts exactly there.
    let pseudo = CombinationParams {
        trigger: Trigger::PseudoCode,
        ..prose
    };
    assert_eq!(pseudo.check(0.82, 0.85, false), Some(Pressure::Time));
    assert_eq!(pseudo.check(0.5, 0.85, false), None);
}
