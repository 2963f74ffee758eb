//! Seeded simulation scenarios: determinism, the rondo-mode bound holding in
//! every round, and single-disk failures at any round boundary.
//!
//! A failing seeded case prints its seed and the command that replays it
//! (`RONDO_SEED=<seed>` runs only that seed). `RONDO_SLOW_TESTS=1` runs many
//! more seeds.

use rondo_model::disk;
use rondo_model::layout::{ReplicaPlacement, RoundRobinCounter};
use rondo_model::reservation::{BurstLead, ReplicaChoice, Scheme, StartChoice};
use rondo_model::units::{DiskIndex, Round};
use rondo_sim::faults::FaultPlan;
use rondo_sim::run::{BoundKind, FailureSpec, Mode, SimConfig, SimResult, SimTitle, run};

/// The six Table 3 titles, cut to their first `rounds` rounds.
fn titles(rounds: usize) -> Vec<SimTitle> {
    rondo_sim::titles::table3_cut(rounds, 6)
}

fn slow() -> bool {
    std::env::var("RONDO_SLOW_TESTS").is_ok_and(|v| v == "1")
}

/// Seeds to run: `RONDO_SEED` alone if set, else `0..count` (more when slow).
fn seeds(count: u64, slow_count: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var("RONDO_SEED") {
        return vec![s.parse().expect("RONDO_SEED is a number")];
    }
    (0..if slow() { slow_count } else { count }).collect()
}

/// A small SplitMix64 for drawing scenario parameters from a seed.
fn mix(seed: u64, salt: u64) -> u64 {
    let mut z = seed.wrapping_add(salt.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A saturated simulated-disk run whose data lies in the innermost strides
/// of every disk, with one disk failing at a seeded round boundary.
fn failure_scenario(seed: u64, scheme: Scheme) -> (SimConfig, SimResult) {
    let c = failure_scenario_config(seed, scheme);
    let r = run(&c, &titles(150)).unwrap();
    (c, r)
}

fn failure_scenario_config(seed: u64, scheme: Scheme) -> SimConfig {
    let disks = 4 + (mix(seed, 1) % 5) as u32; // 4..=8
    let placement = if mix(seed, 2).is_multiple_of(2) {
        ReplicaPlacement::Deterministic
    } else {
        ReplicaPlacement::Random
    };
    let mut c = SimConfig::seed000(disks, scheme, placement);
    // Both round-robin counters: per-disk is paper mode's, per-title what
    // `rondo serve` creates data directories with.
    c.round_robin_counter = if mix(seed, 5).is_multiple_of(2) {
        RoundRobinCounter::PerTitle
    } else {
        RoundRobinCounter::PerDisk
    };
    c.bound = BoundKind::Rondo;
    c.mode = Mode::SimulatedDisk;
    c.load = 1.5;
    c.warmup_rounds = 0;
    c.end_round = 700;
    c.seed = seed;
    // Six 150-round titles need at most about 140 strides per disk with
    // backups at D = 4; start them 200 strides before the end of the disk so
    // the data reaches the innermost zone (placement fails loudly if not).
    let strides = disk::profile_by_name("cheetah-4lp")
        .unwrap()
        .capacity_bytes()
        .unwrap()
        / c.stride_bytes;
    c.first_stride = strides - 200;
    c.failure = Some(FailureSpec {
        disk: DiskIndex((mix(seed, 3) % disks as u64) as u32),
        round: Round(1 + mix(seed, 4) % 600),
    });
    c
}

/// The same saturated array with a seeded fault plan executed through the
/// array: a disk failure at a seeded round, read and checksum errors on
/// other disks, the failed disk rebuilt under load, an ingest, range and
/// time-start arrivals; the array's invariants checked after every round.
fn fault_scenario(seed: u64, scheme: Scheme) -> (SimConfig, SimResult) {
    let mut c = failure_scenario_config(seed, scheme);
    c.failure = None;
    c.faults = FaultPlan::seeded(seed, c.disks, 600, 6);
    c.check_invariants = true;
    // Every other plan gives new streams a start burst of up to 6 rounds
    // (several reads of a stream on one disk in one round), every fourth
    // one that keeps its lead (reads on from its second round).
    c.burst_rounds = if seed % 2 == 1 { 6 } else { 0 };
    c.burst_lead = if seed % 4 == 3 {
        BurstLead::Kept
    } else {
        BurstLead::Spent
    };
    let r = run(&c, &titles(150)).unwrap();
    (c, r)
}

fn replay_hint(test: &str, seed: u64) -> String {
    format!("replay: RONDO_SEED={seed} cargo test --release -p rondo-sim --test scenarios {test}")
}

#[test]
fn a_run_is_a_pure_function_of_its_seed() {
    let t = titles(300);
    let mut c = SimConfig::seed000(4, Scheme::Minimum, ReplicaPlacement::Random);
    c.warmup_rounds = 200;
    c.end_round = 1200;
    let a = run(&c, &t).unwrap();
    let b = run(&c, &t).unwrap();
    assert_eq!(a, b);
    c.seed = 2;
    let other = run(&c, &t).unwrap();
    assert_ne!(a, other);
    assert!(a.mean_active_streams > 10.0, "{a:?}");
}

#[test]
fn minimum_in_rondo_mode_survives_any_single_failure_with_data_in_the_inner_zone() {
    for seed in seeds(6, 200) {
        let (c, r) = failure_scenario(seed, Scheme::Minimum);
        assert!(
            r.admitted > 0,
            "seed {seed}: nothing admitted; {}",
            replay_hint("minimum_in", seed)
        );
        assert!(
            r.deadline_misses == 0 && r.disk_round_overruns == 0 && r.lost_reads == 0,
            "seed {seed}: {} misses, {} overruns, {} lost reads with D = {}, {:?} ({:?}), failure {:?}\n{}",
            r.deadline_misses,
            r.disk_round_overruns,
            r.lost_reads,
            c.disks,
            c.placement,
            c.round_robin_counter,
            c.failure,
            replay_hint("minimum_in", seed)
        );
        assert_eq!(
            r.busy_over_reserved_disk_rounds,
            0,
            "seed {seed}: the rondo bound was exceeded; {}",
            replay_hint("minimum_in", seed)
        );
    }
}

/// A saturated failure scenario kept every deadline: something admitted,
/// no stream-round late, no disk-round past its round or its reserved and
/// granted time, no read without a replica. `options` says what the run
/// varied; a failure names the seed and the command that replays it.
fn assert_single_failure_survived(c: &SimConfig, r: &SimResult, test: &str, options: &str) {
    let seed = c.seed;
    let hint = replay_hint(test, seed);
    assert!(r.admitted > 0, "seed {seed}: nothing admitted; {hint}");
    assert!(
        r.deadline_misses == 0
            && r.disk_round_overruns == 0
            && r.lost_reads == 0
            && r.busy_over_reserved_disk_rounds == 0,
        "seed {seed}: {} misses, {} overruns, {} lost reads, {} rounds past reserved with D = {}, {:?}, {options}, failure {:?}\n{hint}",
        r.deadline_misses,
        r.disk_round_overruns,
        r.lost_reads,
        r.busy_over_reserved_disk_rounds,
        c.disks,
        c.placement,
        c.failure,
    );
}

#[test]
fn minimum_with_the_admission_options_survives_any_single_failure() {
    // The least-added start and the balanced replica choice
    // (docs/experiments/failure-tolerance-cost.md) change where streams'
    // reads and failure reservations go, never what a failure may add: the
    // same saturated runs with data in the inner zone and a seeded failure.
    for seed in seeds(4, 200) {
        let mut c = failure_scenario_config(seed, Scheme::Minimum);
        let (start, replica) = match mix(seed, 6) % 3 {
            0 => (StartChoice::LeastAdded, ReplicaChoice::Primary),
            1 => (StartChoice::First, ReplicaChoice::Balanced),
            _ => (StartChoice::LeastAdded, ReplicaChoice::Balanced),
        };
        c.start_choice = start;
        c.replica_choice = replica;
        let r = run(&c, &titles(150)).unwrap();
        let options = format!("{start:?}, {replica:?}");
        assert_single_failure_survived(&c, &r, "minimum_with_the_admission_options", &options);
    }
}

#[test]
fn minimum_with_a_backup_window_survives_any_single_failure() {
    // A backup window of k rounds (docs/experiments/failure-tolerance-
    // cost.md): the survivors read the failed disk's backups earliest
    // deadline first within k rounds, cutting reads between rounds; no
    // stream-round may complete after its due round, no disk-round may run
    // past its round or its reserved plus granted time.
    let (mut recovered, mut split, mut held) = (0, 0, 0);
    for seed in seeds(4, 1000) {
        let mut c = failure_scenario_config(seed, Scheme::Minimum);
        c.backup_window_rounds = 2 + (mix(seed, 7) % 4) as u32; // 2..=5
        if mix(seed, 8).is_multiple_of(2) {
            c.start_choice = StartChoice::LeastAdded;
        }
        // A loss noticed up to 2 rounds late: backups spread over k + L
        // rounds, clients k - 1 + L rounds ahead (`BackupWindow`).
        c.loss_notice_rounds = (mix(seed, 9) % 3) as u32;
        let r = run(&c, &titles(150)).unwrap();
        let options = format!(
            "k = {}, L = {}, {:?}",
            c.backup_window_rounds, c.loss_notice_rounds, c.start_choice
        );
        assert_single_failure_survived(&c, &r, "minimum_with_a_backup_window", &options);
        // The clients' lead covers the recovery: no round reaches its
        // client after a player started at its first byte needs it.
        assert_eq!(
            r.late_releases,
            0,
            "seed {seed}, {options}: rounds released after their player needed them; {}",
            replay_hint("minimum_with_a_backup_window", seed)
        );
        recovered += r.window_recoveries;
        split += r.window_splits;
        held = held.max(r.held_behind_late_max);
    }
    eprintln!(
        "backup window: {recovered} backup reads recovered, {split} cut between rounds, at most {held} stream-rounds held behind a late one"
    );
    // The failures were served through the backlogs, with reads cut.
    assert!(
        recovered > 0 && split > 0,
        "{recovered} recovered, {split} split"
    );
}

#[test]
fn minimum_in_rondo_mode_survives_seeded_fault_plans_with_its_invariants_checked_every_round() {
    let mut stalled = 0;
    let (mut repaired, mut lost, mut bursts, mut kept_bursts) = (0, 0, 0, 0);
    for seed in seeds(4, 1000) {
        let (c, r) = fault_scenario(seed, Scheme::Minimum);
        let hint = replay_hint("minimum_in_rondo_mode_survives_seeded", seed);
        eprintln!(
            "seed {seed}: D = {}, {} admitted, {} read errors, {} re-reads ({} late), {} aborted ({} stalled clients), {} bad extents ({} repaired), {} rounds lost, rebuild {:?} rounds, ingest {:?} rounds",
            c.disks,
            r.admitted,
            r.read_errors,
            r.rereads,
            r.recovery_misses,
            r.streams_aborted,
            r.clients_stalled,
            r.extents_bad,
            r.extents_repaired,
            r.rounds_lost,
            r.rebuild_rounds,
            r.ingest_rounds
        );
        assert!(r.admitted > 0, "seed {seed}: nothing admitted; {hint}");
        assert_eq!(
            r.invariant_checks, c.end_round,
            "seed {seed}: the invariant check ran every round; {hint}"
        );
        assert!(
            r.deadline_misses == 0 && r.disk_round_overruns == 0 && r.lost_reads == 0,
            "seed {seed}: {} misses, {} overruns, {} lost reads with D = {}, faults {:?}\n{hint}",
            r.deadline_misses,
            r.disk_round_overruns,
            r.lost_reads,
            c.disks,
            c.faults,
        );
        assert_eq!(
            r.busy_over_reserved_disk_rounds, 0,
            "seed {seed}: a disk was busier than reserved + granted; {hint}"
        );
        assert!(
            r.rebuild_rounds.is_some(),
            "seed {seed}: the rebuild did not finish; {hint}"
        );
        assert!(
            r.ingest_rounds.is_some(),
            "seed {seed}: the ingest did not finish; {hint}"
        );
        // Every error was either recovered from the other replica or hit a
        // round whose other replica was on the failed disk.
        assert!(
            r.rereads + r.streams_aborted >= r.read_errors,
            "seed {seed}: {r:?}; {hint}"
        );
        // A stalled client is stopped (unless its stream ended before its
        // stall began); no other client is.
        assert!(
            r.clients_stalled <= c.faults.stalls.len() as u64,
            "seed {seed}: {} clients stopped as stalled; {hint}",
            r.clients_stalled
        );
        if c.burst_rounds > 0 {
            bursts += r.burst_starts;
            if c.burst_lead == BurstLead::Kept {
                kept_bursts += r.burst_starts;
            }
        } else {
            assert_eq!(r.burst_starts, 0, "seed {seed}; {hint}");
        }
        stalled += r.clients_stalled;
        repaired += r.extents_repaired;
        lost += r.rounds_lost;
    }
    assert!(stalled > 0, "no seeded client stall took effect");
    // The seeded silent corruption took effect: bad extents repaired, and
    // rounds lost (both replicas bad) without a miss above.
    assert!(repaired > 0, "no seeded bad extent was repaired");
    assert!(lost > 0, "no seeded round was lost");
    assert!(
        bursts > 0 || std::env::var("RONDO_SEED").is_ok(),
        "no stream started with a burst"
    );
    assert!(
        kept_bursts > 0 || std::env::var("RONDO_SEED").is_ok(),
        "no stream started with a burst that keeps its lead"
    );
}

#[test]
fn unreserved_misses_deadlines_under_the_same_fault_plans() {
    let seeds = seeds(4, 100);
    let misses: u64 = seeds
        .iter()
        .map(|&seed| fault_scenario(seed, Scheme::Unreserved).1.deadline_misses)
        .sum();
    assert!(
        misses > 0,
        "seeds {seeds:?}: the fault plans under `unreserved` caused no miss"
    );
}

#[test]
fn unreserved_backups_do_miss_deadlines_when_a_disk_fails() {
    // The negative control: the same scenarios without reserved backup time.
    let seeds = seeds(4, 40);
    let misses: u64 = seeds
        .iter()
        .map(|&seed| failure_scenario(seed, Scheme::Unreserved).1.deadline_misses)
        .sum();
    assert!(
        misses > 0,
        "seeds {seeds:?}: a failure under `unreserved` caused no miss"
    );
}

#[test]
fn rondo_bound_holds_every_round_and_paper_bound_on_average() {
    let t = titles(300);
    for bound in [BoundKind::Rondo, BoundKind::Paper] {
        let mut c = SimConfig::seed000(4, Scheme::Minimum, ReplicaPlacement::Deterministic);
        c.bound = bound;
        c.mode = Mode::SimulatedDisk;
        c.load = 1.5;
        c.warmup_rounds = 300;
        c.end_round = 1500;
        let r = run(&c, &t).unwrap();
        let busy = r.busy_fraction.unwrap();
        assert!(
            busy < r.reserved_fraction,
            "{bound:?}: busy {busy} ≥ reserved {}",
            r.reserved_fraction
        );
        assert_eq!(r.deadline_misses, 0, "{bound:?}: {r:?}");
        if bound == BoundKind::Rondo {
            assert_eq!(r.busy_over_reserved_disk_rounds, 0, "{r:?}");
        }
    }
}

#[test]
fn placed_titles_run_as_the_run_places_them_and_zipf_follows_the_seed() {
    let mut config = SimConfig::seed000(4, Scheme::Minimum, ReplicaPlacement::Deterministic);
    config.bound = BoundKind::Rondo;
    config.mode = Mode::SimulatedDisk;
    config.load = 1.5;
    config.warmup_rounds = 100;
    config.end_round = 400;
    let titles = titles(120);
    let profile = disk::profile_by_name(&config.profile).unwrap();
    // What a driver that placed and charged the titles itself (the data
    // directory's loader) hands over runs exactly as `run` does.
    let (bound, placed) = rondo_sim::run::place_titles(&config, &profile, &titles).unwrap();
    assert_eq!(
        rondo_sim::run::run_placed(&config, &bound, &placed).unwrap(),
        run(&config, &titles).unwrap()
    );
    // Zipf popularity: reproducible for a seed, different from round-robin,
    // and an absolute arrival rate replaces ρ·μ.
    let zipf = SimConfig {
        zipf_exponent: Some(1.0),
        arrival_rate_per_round: Some(0.5),
        ..config.clone()
    };
    let a = run(&zipf, &titles).unwrap();
    assert_eq!(a, run(&zipf, &titles).unwrap());
    assert_eq!(a.arrival_rate_per_round, 0.5);
    assert_ne!(
        a,
        run(
            &SimConfig {
                zipf_exponent: None,
                ..zipf.clone()
            },
            &titles
        )
        .unwrap()
    );
    assert_eq!(a.deadline_misses, 0);
}

/// A loaded simulated-disk run with the given bad extents (title 0).
fn bad_extent_run(bad: Vec<rondo_sim::faults::BadExtentSpec>) -> SimResult {
    let mut c = SimConfig::seed000(4, Scheme::Minimum, ReplicaPlacement::Deterministic);
    c.bound = BoundKind::Rondo;
    c.mode = Mode::SimulatedDisk;
    c.load = 0.9;
    c.warmup_rounds = 0;
    c.end_round = 200;
    c.seed = 3;
    c.check_invariants = true;
    c.faults.bad_extents = bad;
    run(&c, &titles(40)).unwrap()
}

#[test]
fn bad_extents_on_two_disks_are_repaired_and_no_disk_fails() {
    use rondo_model::layout::Replica;
    use rondo_sim::faults::BadExtentSpec;
    // Rounds 1 and 2 of title 0: consecutive rounds, so two disks.
    let spec = |playback_round| BadExtentSpec {
        title: 0,
        playback_round,
        replica: Replica::Primary,
        piece: 0,
        round: Round(0),
    };
    let r = bad_extent_run(vec![spec(1), spec(2)]);
    assert!(r.read_errors >= 2, "{r:?}");
    assert_eq!(r.extents_bad, 2, "{r:?}");
    assert_eq!(r.extents_repaired, 2, "{r:?}");
    assert_eq!(
        (r.rounds_lost, r.disks_failed, r.streams_aborted),
        (0, 0, 0)
    );
    assert_eq!(r.deadline_misses, 0, "repairs use unreserved time only");
}

#[test]
fn a_round_with_both_replicas_bad_is_lost_and_only_its_streams_stop() {
    use rondo_model::layout::Replica;
    use rondo_sim::faults::BadExtentSpec;
    let spec = |replica| BadExtentSpec {
        title: 0,
        playback_round: 5,
        replica,
        piece: 0,
        round: Round(0),
    };
    let r = bad_extent_run(vec![spec(Replica::Primary), spec(Replica::Backup)]);
    assert_eq!(r.rounds_lost, 1, "{r:?}");
    assert_eq!(r.disks_failed, 0, "{r:?}");
    assert!(r.streams_aborted >= 1, "{r:?}");
    assert!(
        r.admitted > r.streams_aborted * 3,
        "the other streams play: {r:?}"
    );
}

/// Four CBR titles of 2 Mbit/s in 1 s rounds (250 kB each), `rounds` long.
fn cbr_titles(rounds: usize) -> Vec<SimTitle> {
    use rondo_model::schedule::Schedule;
    (0..4)
        .map(|k| SimTitle {
            name: format!("cbr-{k}"),
            schedule: Schedule::from_client_bytes(
                vec![250_000; rounds],
                rondo_model::units::NS_PER_S,
                16 * 1024,
            )
            .unwrap(),
        })
        .collect()
}

/// Sweep&Prefetch on seed 003's drive with command queueing, executed on
/// the detailed model: the switch into prefetch mode carries more streams
/// than Sweep with no missed deadline, also through a disk failure. With
/// admission that believes the drive's cache has four times the segments
/// (the switched streams' prefetched blocks not reserved in the cache they
/// wait in: the transition's extra buffer), the drive drops prefetched
/// blocks, reads them again from the media, and deadlines are missed.
#[test]
fn sweep_prefetch_switches_without_a_miss_and_misses_when_its_cache_is_not_reserved() {
    use rondo_model::array::DrivePrefetch;
    use rondo_model::reservation::Bound;
    let seed = seeds(1, 3);
    for seed in seed {
        let mut c = SimConfig::seed000(2, Scheme::None, ReplicaPlacement::Deterministic);
        c.profile = "seed003-table1-c8-s32-q".into();
        c.bound = BoundKind::Rondo;
        c.mode = Mode::SimulatedDisk;
        c.segment_rounds = 60;
        c.load = 2.0;
        c.warmup_rounds = 300;
        c.end_round = 1200;
        c.seed = seed;
        let replay = format!(
            "RONDO_SEED={seed} cargo test -p rondo-sim --test scenarios sweep_prefetch_switches"
        );
        let titles = cbr_titles(400);
        let sweep = run(&c, &titles).unwrap();
        let sp_config = SimConfig {
            drive_prefetch: DrivePrefetch::SweepPrefetch,
            ..c.clone()
        };
        let sp = run(&sp_config, &titles).unwrap();
        assert_eq!(sp.deadline_misses, 0, "{replay}: {sp:?}");
        assert_eq!(sp.busy_over_reserved_disk_rounds, 0, "{replay}: {sp:?}");
        assert!(sp.cache_hits > 1000, "{replay}: {sp:?}");
        assert!(
            sp.mean_active_streams > 1.05 * sweep.mean_active_streams,
            "{replay}: Sweep {} streams, Sweep&Prefetch {}",
            sweep.mean_active_streams,
            sp.mean_active_streams
        );
        // Through a disk failure (mirroring: the failed disk's reads on
        // its backups, pairs split by it read plain).
        let failed = SimConfig {
            scheme: Scheme::Mirroring,
            failure: Some(FailureSpec {
                disk: DiskIndex(1),
                round: Round(600),
            }),
            ..sp_config.clone()
        };
        let f = run(&failed, &titles).unwrap();
        assert_eq!(f.deadline_misses, 0, "{replay}: {f:?}");
        assert!(f.cache_hits > 0, "{replay}: {f:?}");
        // Drives with 8 segments, admission that believes in 32 of the same
        // size (what the tables would hold if they did not reserve them).
        let small = SimConfig {
            profile: "seed003-table1-c2-s8-q".into(),
            ..sp_config.clone()
        };
        let profile = small
            .disk_profile(titles.iter().map(|t| &t.schedule))
            .unwrap();
        let (_, placed) = rondo_sim::run::place_titles(&small, &profile, &titles).unwrap();
        let believed = disk::profile_by_name("seed003-table1-c8-s32-q").unwrap();
        let bound = Bound::Rondo(disk::RondoBound::new(&believed).unwrap());
        let unreserved = rondo_sim::run::run_placed(&small, &bound, &placed).unwrap();
        assert!(
            unreserved.deadline_misses > 0,
            "{replay}: prefetched blocks beyond the cache, yet no miss: {unreserved:?}"
        );
    }
}

/// GPMP on a modern HDD at saturation: every disk-round stays within its
/// reservation on the detailed model. Read groups whose rounds are cut at
/// stride boundaries are one media access, as admission charged them
/// (before `batch_plan` joined a round's own adjacent extents, 71 of these
/// disk-rounds ran over and deadlines were missed).
#[test]
fn gpmp_groups_on_a_modern_hdd_stay_within_their_reservation() {
    let mut c = SimConfig::seed000(4, Scheme::None, ReplicaPlacement::Deterministic);
    c.profile = "hdd-7200".into();
    c.bound = BoundKind::Rondo;
    c.mode = Mode::SimulatedDisk;
    c.segment_rounds = 32;
    c.read_group_rounds = 2;
    c.buffer_per_disk_bytes = 4 << 30;
    c.arrival_rate_per_round = Some(1.0);
    c.warmup_rounds = 300;
    c.end_round = if slow() { 2500 } else { 900 };
    let r = run(&c, &titles(1800)).unwrap();
    assert!(r.mean_active_streams > 200.0, "{r:?}");
    assert_eq!(r.busy_over_reserved_disk_rounds, 0, "{r:?}");
    assert_eq!(r.deadline_misses, 0, "{r:?}");
}

/// Titles of 128–1024 kbit/s (seed 004 §3's range), CBR, `rounds` rounds
/// of `round_ns`.
fn multi_bitrate_titles(rounds: usize, round_ns: u64) -> Vec<SimTitle> {
    use rondo_model::schedule::Schedule;
    (1..=8u64)
        .map(|k| {
            let bitrate_bps = 128_000 * k;
            let bytes = bitrate_bps * round_ns / 8 / rondo_model::units::NS_PER_S;
            SimTitle {
                name: format!("cbr-{}k", bitrate_bps / 1000),
                schedule: Schedule::from_client_bytes(vec![bytes; rounds], round_ns, 16 * 1024)
                    .unwrap(),
            }
        })
        .collect()
}

/// Seed 004's dynamic cycle executed by the array on the detailed model
/// (2 Cheetah disks, 0.5 s rounds, segments of 32 rounds, 8 MiB of buffer
/// per disk, titles of 128–1024 kbit/s): it combines streams and doubles
/// its cycle with no missed deadline and no disk-round over its
/// reservation, carries far more than the fixed cycle of one round per read
/// and at least as much as the best fixed group length in hindsight (low
/// bitrates combined, high ones not). With its operations unchecked (the
/// transitory reads ignored), rounds are over-committed.
#[test]
fn dynamic_cycle_combines_streams_without_a_miss_and_beats_every_fixed_cycle() {
    use rondo_model::array::DynamicCycle;
    let round_ns = 500_000_000;
    let titles = multi_bitrate_titles(1200, round_ns);
    for seed in seeds(1, 3) {
        let replay =
            format!("RONDO_SEED={seed} cargo test -p rondo-sim --test scenarios dynamic_cycle");
        let mut c = SimConfig::seed000(2, Scheme::None, ReplicaPlacement::Deterministic);
        c.profile = "cheetah-4lp".into();
        c.bound = BoundKind::Rondo;
        c.mode = Mode::SimulatedDisk;
        c.round_duration_ns = round_ns;
        c.segment_rounds = 32;
        c.buffer_per_disk_bytes = 8 << 20;
        c.arrival_rate_per_round = Some(2.0);
        c.warmup_rounds = 600;
        c.end_round = 2000;
        c.seed = seed;
        let fixed = |group| {
            run(
                &SimConfig {
                    read_group_rounds: group,
                    ..c.clone()
                },
                &titles,
            )
            .unwrap()
        };
        let (one, two, four) = (fixed(1), fixed(2), fixed(4));
        let dynamic = run(
            &SimConfig {
                dynamic_cycle: Some(DynamicCycle::new(16)),
                ..c.clone()
            },
            &titles,
        )
        .unwrap();
        let status = dynamic.cycle.clone().expect("a dynamic cycle");
        println!(
            "seed {seed}: fixed 1/2/4 rounds {:.1}/{:.1}/{:.1} streams, dynamic {:.1} \
             (cycle {:.2} rounds on average, {} combines, {} doubles, {} refused)",
            one.mean_active_streams,
            two.mean_active_streams,
            four.mean_active_streams,
            dynamic.mean_active_streams,
            dynamic.mean_cycle_group_rounds.unwrap(),
            status.combines,
            status.doubles,
            status.refusals
        );
        assert_eq!(dynamic.deadline_misses, 0, "{replay}: {dynamic:?}");
        assert_eq!(dynamic.busy_over_reserved_disk_rounds, 0, "{replay}");
        assert_eq!(dynamic.overcommitted_disk_rounds, 0, "{replay}");
        assert!(
            status.combines > 10 && status.doubles >= 1,
            "{replay}: {status:?}"
        );
        assert!(
            dynamic.mean_active_streams > 1.3 * one.mean_active_streams,
            "{replay}"
        );
        let best_fixed = two.mean_active_streams.max(four.mean_active_streams);
        assert!(
            dynamic.mean_active_streams >= 0.95 * best_fixed,
            "{replay}: dynamic {} against the best fixed {best_fixed}",
            dynamic.mean_active_streams
        );
        let unchecked = run(
            &SimConfig {
                dynamic_cycle: Some(DynamicCycle {
                    check_operations: false,
                    ..DynamicCycle::new(16)
                }),
                ..c.clone()
            },
            &titles,
        )
        .unwrap();
        println!(
            "seed {seed}: unchecked operations, {} disk-rounds over-committed, {} deadline misses",
            unchecked.overcommitted_disk_rounds, unchecked.deadline_misses
        );
        assert!(
            unchecked.overcommitted_disk_rounds > 0,
            "{replay}: {unchecked:?}"
        );
    }
}

/// A storage node of G consecutive disks fails whole: with G disk groups
/// (each backup in its primary's group, d mod G; seed 000 §8) that is one
/// failure per group, and `minimum` absorbs it with no miss, no lost read
/// and no stream stopped. The negative control fails the same node without
/// groups: some of its rounds had both replicas on it.
#[test]
fn minimum_with_disk_groups_survives_a_whole_storage_node_failing() {
    let mut control_losses = 0;
    for seed in seeds(4, 200) {
        let mut c = failure_scenario_config(seed, Scheme::Minimum);
        let (disks, groups) = [(4, 2), (6, 2), (6, 3), (8, 2), (8, 4)][(mix(seed, 9) % 5) as usize];
        c.disks = disks;
        c.disk_groups = groups;
        let node = (mix(seed, 3) % u64::from(disks / groups)) as u32;
        let round = Round(1 + mix(seed, 4) % 600);
        c.failure = None;
        c.faults = FaultPlan::default();
        c.faults.failures = (0..groups)
            .map(|i| FailureSpec {
                disk: DiskIndex(node * groups + i),
                round,
            })
            .collect();
        let r = run(&c, &titles(150)).unwrap();
        let hint = replay_hint("minimum_with_disk_groups", seed);
        assert!(r.admitted > 0, "seed {seed}: nothing admitted; {hint}");
        assert!(
            r.deadline_misses == 0
                && r.disk_round_overruns == 0
                && r.lost_reads == 0
                && r.streams_aborted == 0
                && r.busy_over_reserved_disk_rounds == 0,
            "seed {seed}: {} misses, {} overruns, {} lost reads, {} stopped, {} rounds past reserved \
             with D = {disks}, G = {groups}, {:?}, node {node} failing in round {}\n{hint}",
            r.deadline_misses,
            r.disk_round_overruns,
            r.lost_reads,
            r.streams_aborted,
            r.busy_over_reserved_disk_rounds,
            c.placement,
            round.0,
        );
        // The control: one group, the same node lost.
        c.disk_groups = 1;
        let control = run(&c, &titles(150)).unwrap();
        control_losses += control.streams_aborted + control.lost_reads + control.deadline_misses;
        eprintln!(
            "seed {seed}: D = {disks}, G = {groups}: {} admitted, {} disks failed; \
             one group: {} stopped, {} lost reads, {} misses",
            r.admitted,
            r.disks_failed,
            control.streams_aborted,
            control.lost_reads,
            control.deadline_misses
        );
    }
    assert!(
        control_losses > 0,
        "without groups a node's loss must cost something somewhere"
    );
}

/// The data's stroke (`stroke = "data"`, `rondo serve --stroke data`):
/// charged only over the cylinders the titles occupy, the same titles on the
/// same drives carry more streams, and no disk-round is ever busier than
/// reserved, nor a deadline missed; with the data pushed to the innermost
/// strides the stroke is nearly the whole drive's again, and so is the
/// capacity.
#[test]
fn the_data_stroke_carries_more_streams_and_still_bounds_every_round() {
    let t = titles(300);
    let run_with = |stroke: disk::Stroke, first_stride: u64| {
        let mut c = SimConfig::seed000(4, Scheme::None, ReplicaPlacement::Deterministic);
        c.bound = BoundKind::Rondo;
        c.mode = Mode::SimulatedDisk;
        c.stroke = stroke;
        c.first_stride = first_stride;
        c.load = 1.5;
        c.warmup_rounds = 300;
        c.end_round = 1500;
        let r = run(&c, &t).unwrap();
        assert_eq!(r.deadline_misses, 0, "{stroke:?}: {r:?}");
        assert_eq!(r.busy_over_reserved_disk_rounds, 0, "{stroke:?}: {r:?}");
        r
    };
    let whole = run_with(disk::Stroke::Whole, 0);
    let data = run_with(disk::Stroke::Data, 0);
    eprintln!(
        "whole stroke: {:.1} streams, busy {:.1}%; data's stroke: {:.1} streams, busy {:.1}%",
        whole.mean_active_streams,
        100.0 * whole.busy_fraction.unwrap(),
        data.mean_active_streams,
        100.0 * data.busy_fraction.unwrap()
    );
    assert!(
        data.mean_active_streams > 1.03 * whole.mean_active_streams,
        "data {} whole {}",
        data.mean_active_streams,
        whole.mean_active_streams
    );
    assert!(data.busy_fraction.unwrap() > whole.busy_fraction.unwrap());
    // Data reaching the last strides: the data's stroke is the whole drive.
    let base = SimConfig::seed000(4, Scheme::None, ReplicaPlacement::Deterministic);
    let strides = disk::profile_by_name(&base.profile)
        .unwrap()
        .capacity_bytes()
        .unwrap()
        / base.stride_bytes;
    let inner = run_with(disk::Stroke::Data, strides - 200);
    let inner_whole = run_with(disk::Stroke::Whole, strides - 200);
    // (Its last strides are not the drive's last cylinders: a percent or
    // so of the stroke is still not charged.)
    assert!(
        (inner.mean_active_streams - inner_whole.mean_active_streams).abs()
            <= 0.01 * inner_whole.mean_active_streams,
        "data's stroke {} whole {}",
        inner.mean_active_streams,
        inner_whole.mean_active_streams
    );
}

/// The simulator does not widen the charged stroke for an ingest (the
/// server does): such a run is refused with the reason, not run unsafely.
#[test]
fn an_ingest_under_the_data_stroke_is_refused_in_simulation() {
    let mut c = SimConfig::seed000(4, Scheme::None, ReplicaPlacement::Deterministic);
    c.bound = BoundKind::Rondo;
    c.mode = Mode::SimulatedDisk;
    c.stroke = disk::Stroke::Data;
    c.end_round = 200;
    c.warmup_rounds = 0;
    c.faults.ingest = Some(rondo_sim::faults::IngestSpec {
        title: 0,
        round: Round(10),
    });
    let e = run(&c, &titles(100)).unwrap_err().to_string();
    assert!(e.contains("ingest") && e.contains("stroke"), "{e}");
}

/// Seed 001's placement (`stripe_disks`: a title on W of the D disks, as a
/// title on S of the storage nodes): when one title takes most requests,
/// its W disks bind and the array carries far fewer streams than with every
/// title on every disk (seed 001 §6.4, RDSS against a popular title); with
/// the requests spread evenly the two carry about the same. Executed on
/// simulated disks, no round is late either way.
#[test]
fn a_popular_title_on_few_disks_is_a_hot_spot() {
    let t = titles(300);
    let run_with = |stripe_disks: u32, share: f64| {
        let mut c = SimConfig::seed000(6, Scheme::None, ReplicaPlacement::Deterministic);
        c.bound = BoundKind::Rondo;
        c.mode = Mode::SimulatedDisk;
        c.stripe_disks = stripe_disks;
        c.popular_share = Some(share);
        c.load = 1.5;
        c.warmup_rounds = 300;
        c.end_round = 1500;
        let r = run(&c, &t).unwrap();
        let what = format!("W = {stripe_disks}, share {share}");
        assert_eq!(r.deadline_misses, 0, "{what}: {r:?}");
        assert_eq!(r.busy_over_reserved_disk_rounds, 0, "{what}: {r:?}");
        eprintln!("{what}: {:.1} streams", r.mean_active_streams);
        r.mean_active_streams
    };
    // Six titles, W = 2 of 6 disks: titles start on disks 0, 2, 4, 0, 2, 4.
    let (wide_even, narrow_even) = (run_with(0, 1.0 / 6.0), run_with(2, 1.0 / 6.0));
    let (wide_hot, narrow_hot) = (run_with(0, 0.9), run_with(2, 0.9));
    assert!(
        (narrow_even - wide_even).abs() <= 0.1 * wide_even,
        "even requests: W = 2 {narrow_even}, every disk {wide_even}"
    );
    assert!(
        (wide_hot - wide_even).abs() <= 0.1 * wide_even,
        "every disk: popular {wide_hot}, even {wide_even}"
    );
    // The popular title's two disks carry it: about 2/6 of the array's
    // streams, divided by its 0.9 share, so under half.
    assert!(
        narrow_hot < 0.5 * wide_hot,
        "popular title: W = 2 {narrow_hot}, every disk {wide_hot}"
    );
}
