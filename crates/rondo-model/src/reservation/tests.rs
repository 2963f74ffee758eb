use super::*;
use proptest::prelude::*;

const MS: u64 = 1_000_000;

fn config(disks: u32, scheme: Scheme) -> ReservationConfig {
    ReservationConfig {
        disks,
        scheme,
        round_duration_ns: 1000 * MS,
        round_fixed_ns: 100 * MS,
        buffer_capacity_bytes: u64::MAX,
        network_capacity_bytes_per_round: None,
        horizon_rounds: 64,
        drive_cache_segments: 0,
        bus_share_ppm: 0,
        replica_choice: ReplicaChoice::Primary,
        start_choice: StartChoice::First,
        guarantee: Guarantee::Deterministic,
        revolution_ns: REVOLUTION_NS,
        backup_window: BackupWindow::default(),
    }
}

/// The revolution `striped` titles' charges include (less than their
/// smallest read, 10 ms).
const REVOLUTION_NS: u64 = 8 * MS;

/// A title striped round-robin from `start` with deterministic backups
/// (Figure 2) and per-round costs `costs_ms`; backups cost the same.
fn striped(disks: u32, start: u32, costs_ms: &[u64]) -> TitleCharges {
    let mut on_disk = vec![0u32; disks as usize];
    let mut primary = Vec::new();
    let mut backups = Vec::new();
    for (i, &c) in costs_ms.iter().enumerate() {
        let k = (start + i as u32) % disks;
        let j = on_disk[k as usize];
        on_disk[k as usize] += 1;
        // Each read's charge includes one revolution (`REVOLUTION_NS`), as
        // the rondo bound's one-extent reads do.
        primary.push(Charge {
            disk: DiskIndex(k),
            cost_ns: c * MS,
            revolutions: 1,
        });
        backups.push(if disks == 1 {
            vec![]
        } else {
            vec![Charge {
                disk: DiskIndex((k + 1 + j % (disks - 1)) % disks),
                cost_ns: c * MS,
                revolutions: 1,
            }]
        });
    }
    let n = costs_ms.len();
    TitleCharges::new(primary, backups, vec![1; n + 1], &vec![1; n]).unwrap()
}

#[test]
fn none_admits_until_the_disk_budget_is_spent() {
    let mut r = Reservations::new(config(1, Scheme::None));
    r.add_title(TitleId(0), striped(1, 0, &[300]));
    // Budget 1000 - 100 fixed = 900 ms: three 300 ms reads fit, a fourth does not.
    for _ in 0..3 {
        assert_eq!(
            r.try_admit(TitleId(0), Round(0), 1).unwrap().start_round,
            Round(0)
        );
    }
    assert_eq!(
        r.try_admit(TitleId(0), Round(0), 1),
        Err(Rejection::DiskTime {
            lookahead_rounds: 1,
            disk: DiskIndex(0),
            round: Round(0)
        })
    );
    // With a look-ahead of two rounds it starts one round later.
    assert_eq!(
        r.try_admit(TitleId(0), Round(0), 2).unwrap().start_round,
        Round(1)
    );
    r.check_invariants();
}

#[test]
fn minimum_reserves_the_largest_backup_per_source() {
    // Three disks; two one-round titles with primaries on disks 0 and 1,
    // both backed up on disk 2.
    let mut r = Reservations::new(config(3, Scheme::Minimum));
    let one = |p: u32, b: u32, ms: u64| {
        TitleCharges::new(
            vec![Charge {
                disk: DiskIndex(p),
                cost_ns: ms * MS,
                revolutions: 0,
            }],
            vec![vec![Charge {
                disk: DiskIndex(b),
                cost_ns: ms * MS,
                revolutions: 0,
            }]],
            vec![0, 0],
            &[0],
        )
        .unwrap()
    };
    r.add_title(TitleId(0), one(0, 2, 200));
    r.add_title(TitleId(1), one(1, 2, 300));
    r.try_admit(TitleId(0), Round(0), 1).unwrap();
    r.try_admit(TitleId(1), Round(0), 1).unwrap();
    // Disk 2 holds backup time 200 (from disk 0) and 300 (from disk 1): only the max is reserved.
    assert_eq!(r.reserved_ns(DiskIndex(2), Round(0)), 300 * MS);
    assert_eq!(
        r.reserved_backup_from_ns(DiskIndex(2), Round(0), DiskIndex(0)),
        200 * MS
    );
    // Mirroring would reserve the sum.
    let mut m = Reservations::new(config(3, Scheme::Mirroring));
    m.add_title(TitleId(0), one(0, 2, 200));
    m.add_title(TitleId(1), one(1, 2, 300));
    m.try_admit(TitleId(0), Round(0), 1).unwrap();
    m.try_admit(TitleId(1), Round(0), 1).unwrap();
    assert_eq!(m.reserved_ns(DiskIndex(2), Round(0)), 500 * MS);
    // Unreserved reserves no backup time at all.
    let mut u = Reservations::new(config(3, Scheme::Unreserved));
    u.add_title(TitleId(0), one(0, 2, 200));
    u.try_admit(TitleId(0), Round(0), 1).unwrap();
    assert_eq!(u.reserved_ns(DiskIndex(2), Round(0)), 0);
}

#[test]
fn release_returns_the_tables_to_empty() {
    let mut r = Reservations::new(config(4, Scheme::Minimum));
    r.add_title(TitleId(0), striped(4, 1, &[100, 250, 50, 400, 120]));
    let a = r.try_admit(TitleId(0), Round(0), 1).unwrap();
    let b = r.try_admit(TitleId(0), Round(2), 1).unwrap();
    assert!(r.release(a.stream));
    assert!(r.release(b.stream));
    assert!(!r.release(b.stream));
    for round in Round::range(Round(0), Round(10)) {
        for disk in 0..4 {
            assert_eq!(r.reserved_ns(DiskIndex(disk), round), 0);
        }
    }
    r.check_invariants();
}

#[test]
fn dynamic_reads_the_less_loaded_replica() {
    let mut r = Reservations::new(config(2, Scheme::Dynamic));
    let one = |p: u32, b: u32| {
        TitleCharges::new(
            vec![Charge {
                disk: DiskIndex(p),
                cost_ns: 100 * MS,
                revolutions: 0,
            }],
            vec![vec![Charge {
                disk: DiskIndex(b),
                cost_ns: 100 * MS,
                revolutions: 0,
            }]],
            vec![0, 0],
            &[0],
        )
        .unwrap()
    };
    r.add_title(TitleId(0), one(0, 1));
    r.try_admit(TitleId(0), Round(0), 1).unwrap();
    r.try_admit(TitleId(0), Round(0), 1).unwrap();
    // The first read disk 0 (tie keeps the primary), the second disk 1.
    assert_eq!(r.reserved_ns(DiskIndex(0), Round(0)), 100 * MS);
    assert_eq!(r.reserved_ns(DiskIndex(1), Round(0)), 100 * MS);
    let (plan, lost) = r.plan_round(Round(0));
    assert!(lost.is_empty());
    assert_eq!(plan[0].len(), 1);
    assert_eq!(plan[1].len(), 1);
    assert_eq!(plan[1][0].replica, Replica::Backup);
}

#[test]
fn failed_disk_reads_go_to_backups_and_new_streams_reserve_for_after_the_rebuild() {
    let mut r = Reservations::new(config(4, Scheme::Minimum));
    r.add_title(TitleId(0), striped(4, 0, &[100; 8]));
    let a = r.try_admit(TitleId(0), Round(0), 1).unwrap();
    assert!(
        r.fail_disk(DiskIndex(0)).is_empty(),
        "one failure loses nothing"
    );
    assert_eq!(
        r.unreserved_ns(DiskIndex(0), Round(0)),
        900 * MS,
        "a failed disk is free for rebuild"
    );
    assert_eq!(
        r.unreserved_ns(DiskIndex(1), Round(0)),
        900 * MS - r.reserved_ns(DiskIndex(1), Round(0))
    );
    // The write credits are each disk's unreserved time less other writes.
    let unreserved: Vec<u64> = (0..4)
        .map(|d| r.unreserved_ns(DiskIndex(d), Round(0)))
        .collect();
    assert_eq!(r.write_credits_ns(Round(0), &[]), unreserved);
    let used = [5 * MS, unreserved[1], unreserved[2] + 1, 0];
    assert_eq!(
        r.write_credits_ns(Round(0), &used),
        vec![unreserved[0] - 5 * MS, 0, 0, unreserved[3]]
    );
    let (plan, lost) = r.plan_round(Round(0));
    assert!(lost.is_empty());
    assert!(plan[0].is_empty());
    assert_eq!(plan[1][0].stream, a.stream);
    assert_eq!(plan[1][0].replica, Replica::Backup);
    // A new stream on the degraded array reserves as if disk 0 served: its
    // slot there (for after the rebuild) and the backup time its failure
    // reroutes to disk 1, so it is read from the backup now ...
    let b = r.try_admit(TitleId(0), Round(1), 1).unwrap();
    assert_eq!(r.reserved_primary_ns(DiskIndex(0), Round(1)), 100 * MS);
    assert_eq!(
        r.reserved_backup_from_ns(DiskIndex(1), Round(1), DiskIndex(0)),
        100 * MS
    );
    let (plan, _) = r.plan_round(Round(1));
    assert!(
        plan[1]
            .iter()
            .any(|p| p.stream == b.stream && p.replica == Replica::Backup)
    );
    r.check_invariants();
    // ... and from its primary once disk 0 is rebuilt, so that a later
    // failure of disk 1 finds that read reserved on disk 0.
    r.restore_disk(DiskIndex(0));
    let (plan, _) = r.plan_round(Round(1));
    assert!(
        plan[0]
            .iter()
            .any(|p| p.stream == b.stream && p.replica == Replica::Primary)
    );
    r.fail_disk(DiskIndex(0));
    // A second failure that removes both replicas loses data, and says which streams.
    // Both streams read title round 0, primary on disk 0, backup on disk 1.
    let stopped = r.fail_disk(DiskIndex(1));
    assert_eq!(stopped, vec![a.stream, b.stream]);
    let (_, lost) = r.plan_round(Round(1));
    assert_eq!(lost.len(), 1, "stream b reads title round 0 in round 1");
    assert!(matches!(
        r.try_admit(TitleId(0), Round(2), 1),
        Err(Rejection::DataUnavailable { .. })
    ));
}

#[test]
fn advance_clears_past_rounds_and_forgets_ended_streams() {
    let mut r = Reservations::new(config(2, Scheme::Mirroring));
    r.add_title(TitleId(0), striped(2, 0, &[100, 100, 100]));
    r.try_admit(TitleId(0), Round(0), 1).unwrap();
    assert_eq!(r.active_streams(), 1);
    r.advance_to(Round(3));
    assert_eq!(r.active_streams(), 1); // still sending its last round
    r.advance_to(Round(4));
    assert_eq!(r.active_streams(), 0);
    // The ring wraps: round 64 + 0 reuses slot 0, which must be clear.
    r.advance_to(Round(64));
    assert_eq!(r.reserved_ns(DiskIndex(0), Round(64)), 0);
    r.check_invariants();
}

#[test]
fn a_stream_can_start_mid_title() {
    let mut r = Reservations::new(config(4, Scheme::Minimum));
    r.add_title(TitleId(0), striped(4, 0, &[100, 200, 300, 400, 500]));
    let a = r
        .try_admit_from(TitleId(0), PlaybackRound(3), Round(0), 1)
        .unwrap();
    // Stream round 0 reads playback round 3 (disk 3), round 1 reads round 4 (disk 0).
    assert_eq!(r.reserved_primary_ns(DiskIndex(3), Round(0)), 400 * MS);
    assert_eq!(r.reserved_primary_ns(DiskIndex(0), Round(1)), 500 * MS);
    assert_eq!(r.reserved_primary_ns(DiskIndex(0), Round(0)), 0);
    let (plan, _) = r.plan_round(Round(1));
    assert_eq!(plan[0][0].playback_round, PlaybackRound(4));
    r.check_invariants();
    r.advance_to(Round(3));
    assert_eq!(
        r.active_streams(),
        0,
        "two reads and a send round, then it ends"
    );
    assert!(!r.release(a.stream));
    assert!(matches!(
        r.try_admit_from(TitleId(0), PlaybackRound(5), Round(3), 1),
        Err(Rejection::PastEnd { .. })
    ));
}

#[test]
fn buffer_capacity_limits_admission() {
    let mut cfg = config(2, Scheme::None);
    cfg.buffer_capacity_bytes = 10;
    let mut r = Reservations::new(cfg);
    let charges = TitleCharges::new(
        vec![Charge {
            disk: DiskIndex(0),
            cost_ns: 1,
            revolutions: 0,
        }],
        vec![vec![]],
        vec![6, 6],
        &[1],
    )
    .unwrap();
    r.add_title(TitleId(0), charges);
    r.try_admit(TitleId(0), Round(0), 1).unwrap();
    assert!(matches!(
        r.try_admit(TitleId(0), Round(0), 1),
        Err(Rejection::Buffer { .. })
    ));
    assert_eq!(
        r.try_admit(TitleId(0), Round(0), 3).unwrap().start_round,
        Round(2)
    );
}

#[test]
fn network_capacity_limits_admission_by_the_bytes_sent_each_round() {
    let mut cfg = config(2, Scheme::None);
    // Two streams' sends fit in a round, a third's does not.
    cfg.network_capacity_bytes_per_round = Some(2 * 700 + 100);
    let mut r = Reservations::new(cfg);
    let charges = TitleCharges::new(
        vec![
            Charge {
                disk: DiskIndex(0),
                cost_ns: 1,
                revolutions: 0,
            };
            2
        ],
        vec![vec![], vec![]],
        vec![0, 700, 700],
        &[700, 700],
    )
    .unwrap();
    r.add_title(TitleId(0), charges);
    r.try_admit(TitleId(0), Round(0), 1).unwrap();
    r.try_admit(TitleId(0), Round(0), 1).unwrap();
    assert!(matches!(
        r.try_admit(TitleId(0), Round(0), 1),
        Err(Rejection::Network { .. })
    ));
    // Two rounds later the first two have sent their last round.
    assert_eq!(
        r.try_admit(TitleId(0), Round(0), 4).unwrap().start_round,
        Round(2)
    );
}

#[test]
fn network_bytes_per_round_is_the_link_over_a_round_rounded_down() {
    assert_eq!(network_bytes_per_round(8_000_000, 1000 * MS), 1_000_000);
    assert_eq!(network_bytes_per_round(8_000_000, 500 * MS), 500_000);
    assert_eq!(network_bytes_per_round(15, 1000 * MS), 1);
    assert_eq!(network_bytes_per_round(u64::MAX, u64::MAX), u64::MAX);
}

#[test]
fn a_range_reserves_only_its_rounds() {
    let mut r = Reservations::new(config(4, Scheme::Minimum));
    r.add_title(TitleId(0), striped(4, 0, &[100, 200, 300, 400, 500]));
    // Playback rounds 1 and 2 only (disks 1, 2), from round 0.
    let a = r
        .try_admit_range(TitleId(0), PlaybackRound(1)..PlaybackRound(3), Round(0), 1)
        .unwrap();
    assert_eq!(a.start_round, Round(0));
    assert_eq!(r.reserved_primary_ns(DiskIndex(1), Round(0)), 200 * MS);
    assert_eq!(r.reserved_primary_ns(DiskIndex(2), Round(1)), 300 * MS);
    assert_eq!(
        r.reserved_primary_ns(DiskIndex(3), Round(2)),
        0,
        "round 3 is past the range"
    );
    assert_eq!(r.reserved_primary_ns(DiskIndex(0), Round(3)), 0);
    let (plan, _) = r.plan_round(Round(2));
    assert!(plan.iter().all(Vec::is_empty), "no read after the range");
    // Its buffer is held one round past its last read (the send round).
    assert!(r.reserved_buffer_bytes(Round(2)) > 0);
    assert_eq!(r.reserved_buffer_bytes(Round(3)), 0);
    r.check_invariants();
    r.advance_to(Round(3));
    assert_eq!(r.active_streams(), 0, "two reads and a send round");
    // The whole title from mid-title is the same as an open range.
    let b = r
        .try_admit_from(TitleId(0), PlaybackRound(3), Round(3), 1)
        .unwrap();
    let from = (
        r.reserved_ns(DiskIndex(3), Round(3)),
        r.reserved_ns(DiskIndex(0), Round(4)),
        r.reserved_buffer_bytes(Round(5)),
    );
    assert_eq!(from.0, 400 * MS);
    r.release(b.stream);
    let c = r
        .try_admit_range(TitleId(0), PlaybackRound(3)..PlaybackRound(99), Round(3), 1)
        .unwrap();
    let range = (
        r.reserved_ns(DiskIndex(3), Round(3)),
        r.reserved_ns(DiskIndex(0), Round(4)),
        r.reserved_buffer_bytes(Round(5)),
    );
    assert_eq!(from, range);
    r.release(c.stream);
    assert_eq!(r.reserved_ns(DiskIndex(3), Round(3)), 0);
    r.check_invariants();
    assert!(matches!(
        r.try_admit_range(TitleId(0), PlaybackRound(5)..PlaybackRound(9), Round(3), 1),
        Err(Rejection::PastEnd { .. })
    ));
    assert!(matches!(
        r.try_admit_range(TitleId(0), PlaybackRound(2)..PlaybackRound(2), Round(3), 1),
        Err(Rejection::PastEnd { .. })
    ));
}

#[derive(Clone, Debug)]
enum Op {
    Admit {
        title: usize,
        lookahead: u64,
        first: usize,
        /// Playback rounds read; past the title's end means to its end.
        length: usize,
        /// Start burst in rounds (0: a plain stream).
        burst: u32,
        /// Whether the burst keeps its lead.
        kept: bool,
    },
    Release {
        nth: usize,
    },
    Advance {
        rounds: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0usize..4, 1u64..4, 0usize..4, 1usize..24, prop_oneof![Just(0u32), 0u32..9], any::<bool>()).prop_map(|(title, lookahead, first, length, burst, kept)| Op::Admit { title, lookahead, first, length, burst, kept }),
        1 => (0usize..64).prop_map(|nth| Op::Release { nth }),
        2 => (1u64..5).prop_map(|rounds| Op::Advance { rounds }),
    ]
}

proptest! {
    /// Whatever the order of admissions (plain and with start bursts, which
    /// put several reads of one stream on one disk in one round, spending
    /// or keeping their lead), releases
    /// and advances, the incremental tables equal tables rebuilt from
    /// scratch, no disk is reserved past its round, and under
    /// `minimum` any single failure leaves every surviving disk within
    /// its round: fixed + primary + backup from the failed disk ≤ T.
    #[test]
    fn tables_stay_consistent_and_minimum_covers_any_single_failure(
        disks in 2u32..7,
        scheme in prop::sample::select(Scheme::ALL.to_vec()),
        costs in proptest::collection::vec(proptest::collection::vec(10u64..400, 3..20), 4),
        ops in proptest::collection::vec(op(), 1..120),
        replica_choice in prop::sample::select(vec![ReplicaChoice::Primary, ReplicaChoice::Balanced]),
        start_choice in prop::sample::select(vec![StartChoice::First, StartChoice::LeastAdded]),
        statistical in any::<bool>(),
        window_rounds in prop_oneof![2 => Just(1u32), 3 => 2u32..6],
        notice_rounds in prop_oneof![2 => Just(0u32), 2 => 1u32..3],
    ) {
        let guarantee = if statistical {
            Guarantee::Statistical { overrun_probability: 1e-3 }
        } else {
            Guarantee::Deterministic
        };
        let mut config = ReservationConfig {
            replica_choice,
            start_choice,
            guarantee,
            ..config(disks, scheme)
        };
        config.set_backup_window(BackupWindow {
            rounds: window_rounds,
            split_ns: 20 * MS,
            loss_notice_rounds: notice_rounds,
            ..BackupWindow::default()
        });
        let budget_ns = config.budget_ns();
        let window = config.backup_window_in_force();
        let mut r = Reservations::new(config);
        for (t, c) in costs.iter().enumerate() {
            r.add_title(TitleId(t as u64), striped(disks, t as u32 % disks, c));
        }
        let mut admitted = Vec::new();
        for op in ops {
            match op {
                Op::Admit { title, lookahead, first, length, burst, kept } => {
                    let now = r.current_round();
                    let first = first.min(costs[title].len() - 1);
                    let rounds = PlaybackRound(first as u32)..PlaybackRound((first + length) as u32);
                    let lead = if kept { BurstLead::Kept } else { BurstLead::Spent };
                    let burst = Burst { rounds: burst, bytes: 0, lead };
                    if let Ok(a) = r.try_admit_span(TitleId(title as u64), rounds, now, lookahead, burst) {
                        admitted.push(a.stream);
                    }
                }
                Op::Release { nth } => {
                    if !admitted.is_empty() {
                        let s = admitted.remove(nth % admitted.len());
                        r.release(s);
                    }
                }
                Op::Advance { rounds } => r.advance_to(r.current_round().plus(rounds)),
            }
        }
        r.check_invariants();
        if scheme == Scheme::Minimum || scheme == Scheme::Mirroring {
            let now = r.current_round();
            for failed in 0..disks {
                for disk in (0..disks).filter(|&d| d != failed) {
                    for round in Round::range(now, now.plus(30)) {
                        let load = r.reserved_primary_ns(DiskIndex(disk), round)
                            + r.reserved_backup_from_ns(DiskIndex(disk), round, DiskIndex(failed));
                        prop_assert!(load <= budget_ns);
                    }
                }
                if statistical {
                    // The reads' worst case may exceed the round: the
                    // tables' condition above is the guarantee.
                    continue;
                }
                // What the failed array really reads (a swapped round's
                // primary among them) fits every survivor's round.
                let mut degraded = r.clone();
                degraded.fail_disk(DiskIndex(failed));
                if window.is_spread() {
                    // A backup window: each survivor reads the failed
                    // disk's backups earliest deadline first in the time
                    // its own reads leave, and each is done within
                    // k - 1 + L rounds of its own. With a loss noticed L
                    // rounds late the disk is lost as round `now` begins
                    // (its reads of that round and the L - 1 after gone)
                    // and known only as round `now + L` begins: the worst
                    // case of the guarantee.
                    let mut backlog: Vec<RecoveryBacklog<FluidRead>> = (0..disks)
                        .map(|_| RecoveryBacklog::new(window))
                        .collect();
                    let noticed = now.plus(u64::from(window.loss_notice_rounds));
                    let mut unknown: Vec<Vec<(Round, u64)>> = vec![Vec::new(); disks as usize];
                    let end = now.plus(30);
                    for round in Round::range(now, end.plus(u64::from(window.spread_rounds()))) {
                        let (healthy, _) = r.plan_round(round);
                        let (per_disk, lost) = degraded.plan_round(round);
                        prop_assert!(lost.is_empty());
                        for disk in (0..disks).filter(|&d| d != failed) {
                            let d = disk as usize;
                            let own: u64 = healthy[d].iter().map(|read| read.cost_ns).sum();
                            let all: u64 = per_disk[d].iter().map(|read| read.cost_ns).sum();
                            prop_assert!(own <= budget_ns);
                            if round < end && all > own {
                                unknown[d].push((round, all - own));
                            }
                            if round >= noticed {
                                for (due, charge_ns) in unknown[d].drain(..) {
                                    backlog[d].push(FluidRead { tag: due.0, charge_ns }, due);
                                }
                            }
                            backlog[d].serve(budget_ns - own);
                            prop_assert_eq!(backlog[d].overdue(round), None);
                        }
                    }
                    continue;
                }
                for round in Round::range(now, now.plus(30)) {
                    let (per_disk, lost) = degraded.plan_round(round);
                    prop_assert!(lost.is_empty());
                    for reads in per_disk {
                        let busy: u64 = reads.iter().map(|read| read.cost_ns).sum();
                        prop_assert!(100 * MS + busy <= 1000 * MS);
                    }
                }
            }
        }
    }
}

#[test]
fn a_failed_read_falls_back_to_the_other_replica_if_it_serves() {
    let all = |_| true;
    assert_eq!(
        replica_after_error(
            Replica::Primary,
            DiskIndex(0),
            &[DiskIndex(1), DiskIndex(2)],
            all
        ),
        Some(Replica::Backup)
    );
    assert_eq!(
        replica_after_error(Replica::Backup, DiskIndex(0), &[DiskIndex(1)], all),
        Some(Replica::Primary)
    );
    // One fragment of a declustered backup on a failed disk: no backup.
    assert_eq!(
        replica_after_error(
            Replica::Primary,
            DiskIndex(0),
            &[DiskIndex(1), DiskIndex(2)],
            |d| d != DiskIndex(2)
        ),
        None
    );
    assert_eq!(
        replica_after_error(Replica::Backup, DiskIndex(0), &[DiskIndex(1)], |d| d
            != DiskIndex(0)),
        None
    );
    // No backup stored (`none`).
    assert_eq!(
        replica_after_error(Replica::Primary, DiskIndex(0), &[], all),
        None
    );
}

#[test]
fn read_groups_restart_at_each_segment() {
    let starts: Vec<usize> = (0..14).map(|i| group_start(i, 6, 4)).collect();
    assert_eq!(starts, [0, 0, 0, 0, 4, 4, 6, 6, 6, 6, 10, 10, 12, 12]);
    // One-round groups, or one-round segments (variable-grain): each round
    // is its own group.
    assert!((0..20).all(|i| group_start(i, 6, 1) == i && group_start(i, 1, 5) == i));
}

#[test]
fn grouped_charges_read_a_group_in_one_request_and_hold_it_until_sent() {
    use crate::disk::{PaperBound, RondoBound, profile_by_name};
    use crate::layout::{
        ArrayAllocator, BackupParams, LayoutParams, ReplicaPlacement, RoundRobinCounter, TitlePlan,
    };
    use crate::schedule::Schedule;
    const KIB: u64 = 1024;
    let client_bytes: Vec<u64> = (0..40).map(|i| 200 * KIB + (i % 7) * 10 * KIB).collect();
    let schedule =
        Schedule::from_client_bytes(client_bytes, crate::units::NS_PER_S, 16 * KIB).unwrap();
    let params = |segment_rounds| LayoutParams {
        disk_count: 4,
        stride_bytes: 8 * 1024 * KIB,
        block_bytes: 16 * KIB,
        backup: Some(BackupParams {
            placement: ReplicaPlacement::Deterministic,
            backup_block_bytes: None,
            fragment_sequence: Default::default(),
            round_robin_counter: RoundRobinCounter::PerTitle,
            disk_groups: 1,
        }),
        segment_rounds,
        stripe_disks: 0,
    };
    let rondo = Bound::Rondo(RondoBound::new(&profile_by_name("cheetah-4lp").unwrap()).unwrap());
    let paper = Bound::Paper(PaperBound::seed000_table2());
    for segment_rounds in [1, 8] {
        let plan = TitlePlan::new(
            &schedule.disk_read_bytes,
            &params(segment_rounds),
            DiskIndex(1),
            3,
        )
        .unwrap();
        let layout = ArrayAllocator::uniform(4, 200).place(&plan).unwrap();
        for bound in [&paper, &rondo] {
            let single = bound
                .title_charges(&plan, Some(&layout), &schedule)
                .unwrap();
            // Groups of one round are today's charges.
            assert_eq!(
                bound
                    .title_charges_grouped(&plan, Some(&layout), &schedule, 1)
                    .unwrap(),
                single
            );
            let grouped = bound
                .title_charges_grouped(&plan, Some(&layout), &schedule, 4)
                .unwrap();
            if segment_rounds == 1 {
                // Variable-grain: nothing is adjacent, every group is a round.
                assert_eq!(grouped, single);
                continue;
            }
            for i in 0..40 {
                let start = group_start(i, segment_rounds, 4);
                let grouping = grouped.grouping();
                assert_eq!(grouping.start(i), start);
                if start != i {
                    // A stream starting mid-group reads the rest of the
                    // group in one request: less than the whole group,
                    // less than its rounds one by one.
                    let rest = grouped.primary(i).cost_ns;
                    let one_by_one: u64 = (i..grouping.end(i))
                        .map(|j| single.primary(j).cost_ns)
                        .sum();
                    assert!(rest < grouped.primary(start).cost_ns, "round {i}");
                    assert!(rest <= one_by_one, "round {i}: {rest} against {one_by_one}");
                    continue;
                }
                // One positioning for the group: less than its rounds read
                // one by one, more than the first round alone.
                let one_by_one: u64 = (i..i + 4).map(|j| single.primary(j).cost_ns).sum();
                let cost = grouped.primary(i).cost_ns;
                assert!(
                    cost < one_by_one && cost > single.primary(i).cost_ns,
                    "round {i}: {cost} against {one_by_one}"
                );
                let backup_one_by_one: u64 = (i..i + 4)
                    .flat_map(|j| single.backup(j).iter().map(|c| c.cost_ns))
                    .sum();
                let backup: u64 = grouped.backup(i).iter().map(|c| c.cost_ns).sum();
                assert!(backup < backup_one_by_one, "round {i}");
            }
            // Each round is held from its group's read to its send.
            let held: u64 = grouped.buffer_bytes.iter().sum();
            let expected: u64 = (0..40)
                .map(|j| {
                    schedule.disk_read_bytes[j] * (j + 2 - group_start(j, segment_rounds, 4)) as u64
                })
                .sum();
            assert_eq!(held, expected);
            assert!(held > single.buffer_bytes.iter().sum::<u64>());
        }
    }
}

/// A burst reads its rounds in its first round, each charged to its disk
/// there; where two fall on one disk both count, and a burst that does not
/// fit gives way to the plain stream in the same start round.
#[test]
fn a_burst_is_charged_in_its_first_round_and_gives_way_to_a_plain_stream() {
    let mut r = Reservations::new(config(2, Scheme::None));
    r.add_title(TitleId(0), striped(2, 0, &[300; 8]));
    let span = |r: &Reservations, s: StreamId| r.stream_span(s).unwrap();
    let burst = Burst {
        rounds: 3,
        bytes: 0,
        lead: Default::default(),
    };
    let all = PlaybackRound(0)..PlaybackRound(8);
    let a = r
        .try_admit_span(TitleId(0), all.clone(), Round(0), 1, burst)
        .unwrap();
    assert_eq!(span(&r, a.stream).burst_rounds, 3);
    // Rounds 0 and 2 on disk 0, round 1 on disk 1, all in round 0.
    assert_eq!(r.reserved_ns(DiskIndex(0), Round(0)), 600 * MS);
    assert_eq!(r.reserved_ns(DiskIndex(1), Round(0)), 300 * MS);
    // Then as a plain stream started in round -1: round 3 in round 2.
    assert_eq!(r.reserved_ns(DiskIndex(1), Round(1)), 0);
    assert_eq!(r.reserved_ns(DiskIndex(1), Round(2)), 300 * MS);
    let s = span(&r, a.stream);
    assert_eq!(s.read_round(PlaybackRound(2)), Round(0));
    assert_eq!(s.send_round(PlaybackRound(2)), Round(0));
    assert_eq!(s.read_round(PlaybackRound(3)), Round(2));
    assert_eq!(s.send_round(PlaybackRound(3)), Round(3));
    assert_eq!(s.end_read_round(), Round(7));
    // Its first send is the burst's three rounds.
    assert_eq!(s.first_send_rounds(), PlaybackRound(0)..PlaybackRound(3));
    // A second burst in round 0 would put 1200 ms on disk 0: it starts
    // plain there instead (disk 0 has 900 − 600 = 300 ms left).
    let b = r
        .try_admit_span(TitleId(0), all, Round(0), 1, burst)
        .unwrap();
    assert_eq!(
        (b.start_round, span(&r, b.stream).burst_rounds),
        (Round(0), 0)
    );
    // A plain stream sends one round at a time.
    assert_eq!(
        span(&r, b.stream).first_send_rounds(),
        PlaybackRound(0)..PlaybackRound(1)
    );
    assert_eq!(r.reserved_ns(DiskIndex(0), Round(0)), 900 * MS);
    r.check_invariants();
}

/// Under a backup window of k rounds a stream's first send waits k − 1
/// rounds and hands over the k rounds read by then at once.
#[test]
fn a_backup_windows_first_send_is_its_lead_and_the_round_after() {
    let mut config = config(4, Scheme::Minimum);
    config.set_backup_window(BackupWindow {
        rounds: 3,
        ..BackupWindow::default()
    });
    let mut r = Reservations::new(config);
    r.add_title(TitleId(0), striped(4, 0, &[100; 8]));
    let a = r
        .try_admit_span(
            TitleId(0),
            PlaybackRound(2)..PlaybackRound(8),
            Round(0),
            1,
            Burst::default(),
        )
        .unwrap();
    let span = r.stream_span(a.stream).unwrap();
    assert_eq!(span.lead_rounds, 2);
    assert_eq!(span.first_send_rounds(), PlaybackRound(2)..PlaybackRound(5));
    assert_eq!(
        span.send_round(PlaybackRound(4)),
        span.send_round(PlaybackRound(2))
    );
    assert!(span.send_round(PlaybackRound(5)) > span.send_round(PlaybackRound(2)));
}

/// A drive-cache pair whose first round was read from the backup (its
/// disk failed) finds no block in the cache of a disk back from a rebuild
/// since: its second round is read from the backup too, then pairs resume
/// on the primary (prefetch, then a cache hit).
#[test]
fn a_pair_split_by_a_rebuild_reads_its_second_round_from_the_backup() {
    use crate::disk::{RondoBound, seed003_table1_prefetching};
    use crate::schedule::Schedule;
    const KIB: u64 = 1024;
    let bound = Bound::Rondo(RondoBound::new(&seed003_table1_prefetching(8 << 20, 8)).unwrap());
    let schedule =
        Schedule::from_client_bytes(vec![100 * KIB; 12], crate::units::NS_PER_S, 16 * KIB).unwrap();
    let (plan, layout) = two_disk_title(&schedule, 2048 * KIB, 6);
    let charges = bound.with_cache_pairs(
        bound
            .title_charges(&plan, Some(&layout), &schedule)
            .unwrap(),
        &layout,
        6,
    );
    let mut r = Reservations::new(ReservationConfig {
        round_fixed_ns: bound.fixed_ns(),
        drive_cache_segments: 8,
        ..config(2, Scheme::Minimum)
    });
    r.add_title(TitleId(0), charges);
    let all = PlaybackRound(0)..PlaybackRound(12);
    let a = r
        .try_admit_shaped(TitleId(0), all, Round(0), 1, Burst::default(), Pairs::First)
        .unwrap();
    assert!(r.stream_span(a.stream).unwrap().pairs);
    let primary = DiskIndex(0);
    let reads = |r: &Reservations, round: u64| -> Vec<(Replica, bool, u64)> {
        let (per_disk, lost) = r.plan_round(Round(round));
        assert!(lost.is_empty());
        per_disk
            .concat()
            .iter()
            .map(|x| (x.replica, x.cache_hit, x.prefetch_bytes))
            .collect()
    };
    // Round 0: the primary's disk has failed; the pair's first from the backup.
    r.fail_disk(primary);
    assert_eq!(reads(&r, 0), [(Replica::Backup, false, 0)]);
    // It is rebuilt before round 1: the pair's second is not in its cache.
    r.restore_disk(primary);
    r.advance_to(Round(1));
    assert_eq!(reads(&r, 1), [(Replica::Backup, false, 0)]);
    // The next pair on the primary: a prefetch, then a hit.
    r.advance_to(Round(2));
    let first = reads(&r, 2);
    assert_eq!((first[0].0, first[0].1), (Replica::Primary, false));
    assert!(first[0].2 > 0);
    r.advance_to(Round(3));
    assert_eq!(reads(&r, 3), [(Replica::Primary, true, 0)]);
    r.check_invariants();
}

/// Seed 003's switch into prefetch mode: on one full disk of a drive that
/// sends hits while its heads work, Sweep&Prefetch switches admitted plain
/// streams into drive-cache pairs (two of opposite phase at a time) and
/// admits more streams than Sweep; nothing a switched stream reads or sends
/// moves in time, and every disk-round keeps within its disk time, bus time
/// and cache segments (`check_invariants`). How many more is measured in
/// the simulator (docs/retrieval.md); here the disk fills in a few rounds.
#[test]
fn the_switch_into_prefetch_mode_makes_room_on_a_full_disk() {
    use crate::disk::{RondoBound, profile_by_name};
    use crate::layout::{ArrayAllocator, LayoutParams, TitlePlan};
    use crate::schedule::Schedule;
    const KIB: u64 = 1024;
    const ROUNDS: usize = 40;
    // 125 KiB per 0.5 s round (2 Mbit/s), 64 segments of 128 KiB.
    let profile = profile_by_name("seed003-table1-c8-s64-q").unwrap();
    let bound = Bound::Rondo(RondoBound::new(&profile).unwrap());
    assert!(bound.bus_share_ppm() > 300_000 && bound.bus_share_ppm() < 1_000_000);
    let round_ns = crate::units::NS_PER_S / 2;
    let schedule = Schedule::from_client_bytes(vec![125 * KIB; ROUNDS], round_ns, 512).unwrap();
    let params = LayoutParams {
        disk_count: 1,
        // One stride holds a whole title: no round is cut in two.
        stride_bytes: 8192 * KIB,
        block_bytes: 512,
        backup: None,
        segment_rounds: ROUNDS as u32,
        stripe_disks: 0,
    };
    let mut allocator = ArrayAllocator::uniform(1, 20_000);
    let titles: Vec<TitleCharges> = (0..4)
        .map(|_| {
            let plan = TitlePlan::new(&schedule.disk_read_bytes, &params, DiskIndex(0), 1).unwrap();
            let layout = allocator.place(&plan).unwrap();
            let charges = bound
                .title_charges(&plan, Some(&layout), &schedule)
                .unwrap();
            bound.with_cache_pairs(charges, &layout, ROUNDS as u32)
        })
        .collect();
    let run = |pairs: Pairs| {
        let mut config = ReservationConfig {
            round_duration_ns: round_ns,
            round_fixed_ns: bound.fixed_ns(),
            horizon_rounds: 2 * ROUNDS as u64 + 4,
            ..config(1, Scheme::None)
        };
        crate::array::DrivePrefetch::SweepPrefetch.configure(&bound, &mut config);
        assert_eq!(config.drive_cache_segments, 64);
        let mut r = Reservations::new(config);
        for (t, c) in titles.iter().enumerate() {
            r.add_title(TitleId(t as u64), c.clone());
        }
        let mut admitted = vec![];
        // Three requests a round for the length of a title: the disk fills.
        for round in 0..ROUNDS as u64 {
            r.advance_to(Round(round));
            for k in 0..3 {
                let title = TitleId((round + k) % 4);
                let all = PlaybackRound(0)..PlaybackRound(ROUNDS as u32);
                if let Ok(a) =
                    r.try_admit_shaped(title, all, Round(round), 4, Burst::default(), pairs)
                {
                    admitted.push((a.stream, r.stream_span(a.stream).unwrap()));
                }
            }
            r.check_invariants();
        }
        (r, admitted)
    };
    let (sweep, _) = run(Pairs::Never);
    let (sp, admitted) = run(Pairs::Switch);
    let (n_sweep, n_sp) = (sweep.active_streams(), sp.active_streams());
    assert!(
        n_sp > n_sweep,
        "Sweep {n_sweep} streams, Sweep&Prefetch {n_sp}"
    );
    // Some streams were admitted plain and switched later; they read and
    // send every round when they did before.
    let switched: Vec<_> = admitted
        .iter()
        .filter_map(|(s, before)| Some((before, sp.stream_span(*s)?)))
        .filter(|(before, now)| !before.pairs && now.pairs)
        .collect();
    let mid_stream = switched
        .iter()
        .filter(|(_, now)| now.pairs_from > now.first_playback_round)
        .count();
    assert!(
        mid_stream >= 4,
        "{} switched, {mid_stream} mid-stream",
        switched.len()
    );
    for (before, now) in switched {
        for i in before.first_playback_round.0..before.end_playback_round.0 {
            let i = PlaybackRound(i);
            assert_eq!(before.read_round(i), now.read_round(i));
            assert_eq!(before.send_round(i), now.send_round(i));
        }
    }
}

/// The dynamic cycle's regroup (seed 004's combine and split in the
/// array's rounds): from its next request a stream reads in groups of
/// another length; the tables follow exactly (the invariant check rebuilds
/// them from the records), rounds before keep their reads, and a regroup
/// that does not fit, or comes before the last one's rounds are sent,
/// changes nothing.
#[test]
fn a_regrouped_stream_reads_longer_groups_from_its_next_request_or_nothing_changes() {
    use crate::disk::{RondoBound, profile_by_name};
    use crate::layout::{ArrayAllocator, LayoutParams, TitlePlan};
    use crate::schedule::Schedule;
    const KIB: u64 = 1024;
    let schedule =
        Schedule::from_client_bytes(vec![64 * KIB; 32], crate::units::NS_PER_S, 16 * KIB).unwrap();
    let params = LayoutParams {
        disk_count: 2,
        stride_bytes: 8 * 1024 * KIB,
        block_bytes: 16 * KIB,
        backup: None,
        segment_rounds: 8,
        stripe_disks: 0,
    };
    let plan = TitlePlan::new(&schedule.disk_read_bytes, &params, DiskIndex(0), 0).unwrap();
    let layout = ArrayAllocator::uniform(2, 200).place(&plan).unwrap();
    let bound = Bound::Rondo(RondoBound::new(&profile_by_name("cheetah-4lp").unwrap()).unwrap());
    let grouped = |g| {
        bound
            .title_charges_grouped(&plan, Some(&layout), &schedule, g)
            .unwrap()
    };
    let (g2, g4) = (grouped(2), grouped(4));
    let setup = |buffer_capacity_bytes| {
        let mut r = Reservations::new(ReservationConfig {
            buffer_capacity_bytes,
            ..config(2, Scheme::None)
        });
        r.add_title(TitleId(0), g2.clone());
        r.add_title_grouping(TitleId(0), g4.clone());
        r.add_title_grouping(TitleId(0), grouped(1));
        r
    };
    let mut r = setup(u64::MAX);
    assert_eq!(r.group_lengths(TitleId(0)), [1, 2, 4]);
    let all = PlaybackRound(0)..PlaybackRound(32);
    let a = r
        .try_admit_grouped(TitleId(0), all.clone(), Round(0), 1, Burst::default(), 2)
        .unwrap();
    assert_eq!(a.start_round, Round(0));
    assert_eq!(r.stream_group_rounds(a.stream), Some(2));
    r.advance_to(Round(3));
    let buffer_before: Vec<u64> = (3..40).map(|q| r.reserved_buffer_bytes(Round(q))).collect();
    // Round 3 is read with round 2's group: the new groups start at 4.
    assert_eq!(r.regroup(a.stream, 4, Round(3)), Ok(4));
    r.check_invariants();
    assert_eq!(r.stream_group_rounds(a.stream), Some(4));
    let span = r.stream_span(a.stream).unwrap();
    assert_eq!(span.read_round(PlaybackRound(3)), Round(2));
    assert_eq!(span.read_round(PlaybackRound(5)), Round(4));
    assert_eq!(span.read_round(PlaybackRound(9)), Round(8));
    // One request of four rounds at 4, none at 6 (where two were read).
    assert_eq!(r.reserved_ns(DiskIndex(0), Round(4)), g4.primary(4).cost_ns);
    assert_eq!(r.reserved_ns(DiskIndex(0), Round(6)), 0);
    assert!(g4.primary(4).cost_ns < g2.primary(4).cost_ns + g2.primary(6).cost_ns);
    // Longer groups hold more: never less in any round, more in some.
    let buffer_after: Vec<u64> = (3..40).map(|q| r.reserved_buffer_bytes(Round(q))).collect();
    assert!(buffer_after.iter().zip(&buffer_before).all(|(a, b)| a >= b));
    assert!(buffer_after.iter().sum::<u64>() > buffer_before.iter().sum::<u64>());
    // Back to two is refused until the regroup's rounds are sent (round 3
    // is sent in round 4).
    r.advance_to(Round(3));
    assert_eq!(
        r.regroup(a.stream, 2, Round(3)),
        Err(RegroupRefusal::Unsettled)
    );
    r.advance_to(Round(5));
    // At round 5 the next request is at 8: split back to two from there.
    assert_eq!(r.regroup(a.stream, 2, Round(5)), Ok(8));
    r.check_invariants();
    let span = r.stream_span(a.stream).unwrap();
    assert_eq!(span.read_round(PlaybackRound(7)), Round(4));
    assert_eq!(span.read_round(PlaybackRound(9)), Round(8));
    assert_eq!(span.read_round(PlaybackRound(11)), Round(10));
    assert_eq!(
        r.regroup(a.stream, 3, Round(5)),
        Err(RegroupRefusal::NoCharges)
    );
    // With the buffer the groups of two need and no more, the longer
    // groups do not fit and the tables are as they were.
    let mut tight = setup(0);
    let peak: u64 = (0..40)
        .map(|q| g2.buffer_bytes.get(q).copied().unwrap_or(0))
        .max()
        .unwrap();
    tight.config.buffer_capacity_bytes = peak;
    let b = tight
        .try_admit_grouped(TitleId(0), all, Round(0), 1, Burst::default(), 2)
        .unwrap();
    tight.advance_to(Round(1));
    let before: Vec<(u64, u64)> = (1..40)
        .map(|q| {
            (
                tight.reserved_ns(DiskIndex(0), Round(q)),
                tight.reserved_buffer_bytes(Round(q)),
            )
        })
        .collect();
    assert_eq!(
        tight.regroup(b.stream, 4, Round(1)),
        Err(RegroupRefusal::DoesNotFit)
    );
    tight.check_invariants();
    let after: Vec<(u64, u64)> = (1..40)
        .map(|q| {
            (
                tight.reserved_ns(DiskIndex(0), Round(q)),
                tight.reserved_buffer_bytes(Round(q)),
            )
        })
        .collect();
    assert_eq!(before, after);
    assert_eq!(tight.stream_group_rounds(b.stream), Some(2));
}

#[test]
fn a_statistical_guarantee_reserves_the_rotation_quantile_and_admits_more() {
    // One disk, reads of 30 ms each including an 8 ms revolution: the
    // deterministic guarantee fits 30 in the 900 ms budget; the statistical
    // one reserves 22 ms per read plus q(k) for the k waits.
    let title = || striped(1, 0, &[30]);
    let admitted = |guarantee| {
        let mut r = Reservations::new(ReservationConfig {
            guarantee,
            ..config(1, Scheme::None)
        });
        r.add_title(TitleId(0), title());
        let mut n = 0u64;
        while r.try_admit(TitleId(0), Round(0), 1).is_ok() {
            n += 1;
        }
        let reserved = r.slot(DiskIndex(0), Round(0)).reserved_ns(Scheme::None, 0);
        r.check_invariants();
        (n, reserved)
    };
    let (det, det_reserved) = admitted(Guarantee::Deterministic);
    assert_eq!(det, 30);
    assert_eq!(det_reserved, 30 * 30 * MS);
    let eps = 1e-6;
    let (stat, stat_reserved) = admitted(Guarantee::Statistical {
        overrun_probability: eps,
    });
    let q = rotation_quantile_ns(stat as u32, REVOLUTION_NS + 1, eps);
    assert_eq!(stat_reserved, stat * 22 * MS + q);
    assert!(stat_reserved <= 900 * MS);
    assert!(stat > det, "statistical {stat} vs deterministic {det}");
    // One more read would not fit.
    let q_next = rotation_quantile_ns(stat as u32 + 1, REVOLUTION_NS + 1, eps);
    assert!((stat + 1) * 22 * MS + q_next > 900 * MS);
}

/// A round that crosses a stride end into the next stride of the device
/// is one extent for the disk: `batch_plan` gives the drive one request
/// (`array::tests::adjacent_extents_of_a_round_and_of_a_group_are_one_request`),
/// and the title's charges count one access (one revolution) for it,
/// exactly the charge of the joined extent; a cut between strides that are
/// not adjacent keeps two accesses.
#[test]
fn a_round_on_adjacent_strides_is_charged_as_one_access() {
    use crate::disk::{RondoBound, RoundBound, profiles::cheetah_4lp};
    use crate::schedule::Schedule;
    const KIB: u64 = 1024;
    let rondo = RondoBound::new(&cheetah_4lp()).unwrap();
    let bound = Bound::Rondo(rondo.clone());
    // 48 KiB rounds in 64 KiB strides: every fourth round on a disk
    // crosses a stride end.
    let schedule =
        Schedule::from_client_bytes(vec![48 * KIB; 16], crate::units::NS_PER_S, 16 * KIB).unwrap();
    let (plan, layout) = two_disk_title(&schedule, 64 * KIB, 1);
    let charges = bound
        .title_charges(&plan, Some(&layout), &schedule)
        .unwrap();
    let mut crossing = 0;
    for round in 0..plan.rounds() {
        let extents = layout.request_extents(round, None);
        let charge = charges.primary(round);
        if extents.len() == 2 {
            crossing += 1;
            // Adjacent on the device (the title's primary strides are one run).
            assert_eq!(extents[0].0 + extents[0].1, extents[1].0);
            let joined = (extents[0].0, extents[0].1 + extents[1].1);
            assert_eq!(charge.cost_ns, rondo.extent_ns(joined.0, joined.1));
            assert_eq!(charge.revolutions, 1);
            assert!(charge.cost_ns + 5_000_000 < rondo.extents_ns(&extents));
        }
    }
    assert!(crossing >= 4, "the title has rounds crossing a stride end");
    // Two strides apart: two accesses, two revolutions.
    assert_eq!(
        bound.extents_ns(&[(0, 32), (256, 32)]),
        rondo.extents_ns(&[(0, 32), (256, 32)])
    );
}

/// A title of `schedule` placed on an empty 2-disk array of 1000 strides,
/// 16 KiB blocks, deterministic whole backups, from disk 0.
fn two_disk_title(
    schedule: &crate::schedule::Schedule,
    stride_bytes: u64,
    segment_rounds: u32,
) -> (crate::layout::TitlePlan, crate::layout::TitleLayout) {
    use crate::layout::{ArrayAllocator, BackupParams, LayoutParams, TitlePlan};
    let params = LayoutParams {
        disk_count: 2,
        stride_bytes,
        block_bytes: 16 * 1024,
        backup: Some(BackupParams::whole_deterministic()),
        segment_rounds,
        stripe_disks: 0,
    };
    let plan = TitlePlan::new(&schedule.disk_read_bytes, &params, DiskIndex(0), 1).unwrap();
    let layout = ArrayAllocator::uniform(2, 1000).place(&plan).unwrap();
    (plan, layout)
}
