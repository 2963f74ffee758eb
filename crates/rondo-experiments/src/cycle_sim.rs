//! A seeded event-driven simulation of seed 004's set-up (§3) that runs the
//! core's time-cycle schedulers (`rondo_model::cycle`) and checks every
//! cycle's reads on a simulated disk.
//!
//! This module owns the driver, not the decisions: arrivals (seeded, gaps
//! uniform in a range), bitrates from a mix, stream lifetimes, the cycle
//! boundaries at which streams leave, the scheduler decides and arrivals are
//! offered, and a simple disk with the paper's parameters that executes each
//! cycle's reads one after the other (in a seeded order for the cycle
//! scheduler, in slot order for Fixed-Stretch) with an access time drawn at
//! or below the 10 ms the admission charges. A read that completes after the
//! playback instant of its first byte is a deadline miss of its stream; that
//! check trusts nothing of the scheduler's cycle arithmetic.

use serde::{Deserialize, Serialize};

use rondo_model::cycle::{
    CombinationParams, CycleConfig, CycleDisk, CycleOp, CycleScheduler, CycleStreamId,
    FixedStretch, Policy,
};
use rondo_model::layout::rng::SplitMix64;
use rondo_model::units::NS_PER_S;

/// How bitrates are drawn between `min_bps` and `max_bps`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BitrateMix {
    /// Uniform (seed 004 §3).
    Uniform,
    /// Favours high bitrates: max − (max − min)·U² (workload #4).
    High,
    /// Favours low bitrates: min + (max − min)·U² (workload #5).
    Low,
}

/// A workload: who arrives when, at what bitrate, for how long.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    pub mix: BitrateMix,
    /// From `at_ns` on, bitrates follow this mix instead (workload #6).
    pub shift: Option<(BitrateMix, u64)>,
    pub min_bps: u64,
    pub max_bps: u64,
    pub gap_min_ns: u64,
    pub gap_max_ns: u64,
    /// Stream lifetimes, uniform; `None`: longer than the run.
    pub duration_ns: Option<(u64, u64)>,
    pub run_ns: u64,
}

impl Workload {
    /// Seed 004 §3: bitrates uniform in 128–1024 "kbps" (`unit_bps` per
    /// kbps: 1000 for kbit/s, 8000 for kB/s), gaps uniform in 2–7 s, 20
    /// minutes.
    pub fn seed004(unit_bps: u64) -> Workload {
        Workload {
            mix: BitrateMix::Uniform,
            shift: None,
            min_bps: 128 * unit_bps,
            max_bps: 1024 * unit_bps,
            gap_min_ns: 2 * NS_PER_S,
            gap_max_ns: 7 * NS_PER_S,
            duration_ns: None,
            run_ns: 1200 * NS_PER_S,
        }
    }
}

/// Which scheduler a run drives.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum SimPolicy {
    Fixed {
        cycle_ns: u64,
    },
    /// Fixed-Stretch; `sharing`: its own memory accounting (shared
    /// buffers), otherwise seed 004's Equation 2; `even_slots_max_bps`:
    /// equal slots spread over the cycle, sized for that bitrate, instead
    /// of slots packed from the cycle's start.
    Stretch {
        cycle_ns: u64,
        sharing: bool,
        even_slots_max_bps: Option<u64>,
    },
    Combination {
        initial_cycle_ns: u64,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SimConfig {
    pub disk: CycleDisk,
    pub memory_bytes: u64,
    pub policy: SimPolicy,
    pub combination: CombinationParams,
    pub account_transitory: bool,
    pub workload: Workload,
    /// The simulated disk's access time is uniform in
    /// [access − jitter, access]. Assumption: 2 ms, so that reads take
    /// varied times without ever exceeding what admission charged.
    pub access_jitter_ns: u64,
    pub seed: u64,
    /// Execute every cycle on rondo's detailed drive model of this profile
    /// (`rondo_model::disk::Disk`, C-SCAN) instead of the paper's disk;
    /// admission then charges a bound of that drive (`detailed_cycle_disk`)
    /// and `disk`/`access_jitter_ns` are not used. Cycle schedulers only.
    #[serde(default)]
    pub detailed_profile: Option<String>,
}

/// Titles on the detailed drive: this many, each a contiguous region from
/// the outer edge. Assumption: a small library whose regions hold what the
/// highest bitrate plays in the run, so streams wrap within their title.
const DETAILED_TITLES: u64 = 16;

/// Where the titles of a detailed run lie and what admission charges there.
struct DetailedDisk {
    disk: rondo_model::disk::Disk,
    bound: rondo_model::disk::RondoBound,
    region_sectors: u64,
    /// Per stream: (title, byte offset in the title's region).
    position: std::collections::BTreeMap<u64, (u64, u64)>,
    rng: SplitMix64,
}

impl DetailedDisk {
    /// The extent of `bytes` read by `stream`, advancing its position; a
    /// read that would pass its title's end starts the title again (one
    /// extent a read, as the admission disk charges one access a read).
    fn extents(&mut self, stream: u64, bytes: u64) -> Vec<(u64, u64)> {
        let region_bytes = self.region_sectors * SECTOR;
        let rng = &mut self.rng;
        let (title, offset) = *self.position.entry(stream).or_insert_with(|| {
            (
                rng.next_below(DETAILED_TITLES),
                rng.next_below(region_bytes / SECTOR) * SECTOR,
            )
        });
        let sectors = bytes.div_ceil(SECTOR).clamp(1, self.region_sectors);
        let mut first_sector = offset / SECTOR;
        if first_sector + sectors > self.region_sectors {
            first_sector = 0;
        }
        let base = title * self.region_sectors;
        self.position.insert(
            stream,
            (title, ((first_sector + sectors) * SECTOR) % region_bytes),
        );
        vec![(base + first_sector, sectors)]
    }
}

const SECTOR: u64 = rondo_model::units::SECTOR_BYTES;

/// An admission disk for the detailed drive `profile` whose charge, fixed +
/// access + bytes / rate, covers the drive's true bound (`RondoBound`:
/// fixed + Σ extent_ns) for reads of up to `max_bytes` anywhere in the first
/// `sectors` sectors: the access is the largest one-sector extent charge and
/// the rate the smallest that covers every sampled size (5% margin). The
/// simulation checks every read's bound against its charge anyway
/// (`SimResult::undercharged_reads`).
pub fn detailed_cycle_disk(
    bound: &rondo_model::disk::RondoBound,
    sectors: u64,
    max_bytes: u64,
) -> CycleDisk {
    use rondo_model::disk::RoundBound;
    let lbns: Vec<u64> = (0..1025).map(|i| i * (sectors - 1) / 1024).collect();
    // Sizes: powers of two and their neighbours, so track and cylinder
    // crossings at every scale are sampled.
    let mut sizes = Vec::new();
    let mut n = 1u64;
    while n * SECTOR <= max_bytes.max(SECTOR) {
        sizes.extend([n.saturating_sub(1).max(1), n, n + 1, n + n / 2]);
        n *= 2;
    }
    let charge = |l: u64, n: u64| bound.extent_ns(l.min(sectors - n.min(sectors)), n.min(sectors));
    // The slope from large reads, then the access that covers every sample.
    let big = sizes
        .iter()
        .copied()
        .filter(|&n| n >= 4096)
        .collect::<Vec<_>>();
    let mut ns_per_byte: f64 = 0.0;
    for &l in &lbns {
        let one = charge(l, 1) as f64;
        for &n in &big {
            ns_per_byte = ns_per_byte.max((charge(l, n) as f64 - one) / (n * SECTOR) as f64);
        }
    }
    let mut access: f64 = 0.0;
    for &l in &lbns {
        for &n in &sizes {
            access = access.max(charge(l, n) as f64 - ns_per_byte * (n * SECTOR) as f64);
        }
    }
    let rate = (1e9 / (ns_per_byte * 1.05)).floor() as u64;
    CycleDisk {
        access_ns: (access * 1.05).ceil() as u64,
        rate_bytes_per_s: rate.max(1),
        fixed_ns: bound.fixed_ns(),
    }
}

/// A sample of the run at a cycle start (at most one a second).
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub time_s: f64,
    pub streams: usize,
    pub combined: usize,
    /// What the policy's admission counts (Equation 2 for the cycle
    /// schedulers, its own for Fixed-Stretch).
    pub memory_bytes: u64,
    /// Equation 2 for the same streams at the current cycle.
    pub equation2_bytes: u64,
    pub cycle_ns: u64,
}

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpCounts {
    pub combine: u64,
    pub split: u64,
    pub shrink: u64,
    pub prepare_double: u64,
    pub double: u64,
}

impl std::ops::AddAssign for OpCounts {
    fn add_assign(&mut self, other: OpCounts) {
        self.combine += other.combine;
        self.split += other.split;
        self.shrink += other.shrink;
        self.prepare_double += other.prepare_double;
        self.double += other.double;
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SimResult {
    pub samples: Vec<Sample>,
    pub arrivals: u64,
    pub admitted: u64,
    pub rejected: u64,
    /// The most streams in service at once (seed 004's throughput).
    pub max_streams: usize,
    pub reads: u64,
    /// Reads complete after their first byte's playback instant.
    pub misses: u64,
    /// Streams with at least one miss.
    pub streams_missed: u64,
    /// Cycles whose planned charge exceeded the cycle.
    pub overcommitted_cycles: u64,
    /// Detailed drive only: reads whose true bound exceeded their charge.
    pub undercharged_reads: u64,
    pub ops: OpCounts,
    pub final_cycle_ns: u64,
}

impl SimResult {
    /// One line without the samples, for messages.
    pub fn summary(&self) -> String {
        format!(
            "arrivals {} admitted {} rejected {} max streams {} reads {} misses {} \
             (streams {}) overcommitted cycles {} undercharged reads {} ops {:?} final cycle {} ms",
            self.arrivals,
            self.admitted,
            self.rejected,
            self.max_streams,
            self.reads,
            self.misses,
            self.streams_missed,
            self.overcommitted_cycles,
            self.undercharged_reads,
            self.ops,
            self.final_cycle_ns / 1_000_000
        )
    }
}

/// Bytes the highest bitrate plays in the run (a title's region).
fn bytes_for_run(w: &Workload) -> u64 {
    rondo_model::cycle::bytes_for(w.max_bps, w.run_ns)
}

struct Arrival {
    at_ns: u64,
    bitrate_bps: u64,
    duration_ns: Option<u64>,
}

fn uniform(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

fn between(rng: &mut SplitMix64, lo: u64, hi: u64) -> u64 {
    lo + rng.next_below(hi - lo + 1)
}

/// The run's arrivals, a function of the workload and the seed only (so
/// every policy sees the same ones).
fn arrivals(w: &Workload, seed: u64) -> Vec<Arrival> {
    let mut rng = SplitMix64::new(seed);
    let mut out = Vec::new();
    let mut t = 0;
    loop {
        t += between(&mut rng, w.gap_min_ns, w.gap_max_ns);
        if t >= w.run_ns {
            return out;
        }
        let mix = match w.shift {
            Some((m, at)) if t >= at => m,
            _ => w.mix,
        };
        let u = uniform(&mut rng);
        let span = (w.max_bps - w.min_bps) as f64;
        let bitrate_bps = match mix {
            BitrateMix::Uniform => w.min_bps as f64 + span * u,
            BitrateMix::High => w.max_bps as f64 - span * u * u,
            BitrateMix::Low => w.min_bps as f64 + span * u * u,
        }
        .round() as u64;
        let duration_ns = w.duration_ns.map(|(lo, hi)| between(&mut rng, lo, hi));
        out.push(Arrival {
            at_ns: t,
            bitrate_bps,
            duration_ns,
        });
    }
}

enum Driver {
    Cycle(CycleScheduler),
    Stretch(FixedStretch),
}

/// Runs one configuration.
pub fn simulate(cfg: &SimConfig) -> SimResult {
    let w = &cfg.workload;
    let arrivals = arrivals(w, cfg.seed);
    let mut disk_rng = SplitMix64::new(rondo_model::layout::rng::mix64(cfg.seed ^ 0xD15C));
    let mut detailed = cfg.detailed_profile.as_ref().map(|name| {
        let profile = rondo_model::disk::profile_by_name(name).expect("a built-in disk profile");
        let disk = rondo_model::disk::Disk::new(profile.clone()).expect("a valid profile");
        let bound = rondo_model::disk::RondoBound::new(&profile).expect("a bound");
        let region_sectors = (bytes_for_run(w) / SECTOR)
            .min(disk.capacity_sectors() / DETAILED_TITLES)
            .max(1);
        DetailedDisk {
            disk,
            bound,
            region_sectors,
            position: std::collections::BTreeMap::new(),
            rng: SplitMix64::new(rondo_model::layout::rng::mix64(cfg.seed ^ 0x717E)),
        }
    });
    let admission_disk = match &detailed {
        Some(d) => {
            assert!(
                !matches!(cfg.policy, SimPolicy::Stretch { .. }),
                "the detailed drive runs the cycle schedulers only"
            );
            detailed_cycle_disk(
                &d.bound,
                DETAILED_TITLES * d.region_sectors,
                // The largest read: two cycles of the highest bitrate at the
                // longest cycle.
                rondo_model::cycle::bytes_for(w.max_bps, 2 * cfg.combination.max_cycle_ns),
            )
        }
        None => cfg.disk,
    };
    let mut driver = match cfg.policy {
        SimPolicy::Fixed { cycle_ns }
        | SimPolicy::Combination {
            initial_cycle_ns: cycle_ns,
        } => {
            let policy = if matches!(cfg.policy, SimPolicy::Fixed { .. }) {
                Policy::Fixed
            } else {
                Policy::Combination
            };
            Driver::Cycle(CycleScheduler::new(CycleConfig {
                disk: admission_disk,
                memory_bytes: cfg.memory_bytes,
                initial_cycle_ns: cycle_ns,
                policy,
                combination: cfg.combination,
                account_transitory: cfg.account_transitory,
            }))
        }
        SimPolicy::Stretch {
            cycle_ns,
            sharing,
            even_slots_max_bps,
        } => Driver::Stretch(match even_slots_max_bps {
            Some(max_bps) => FixedStretch::with_even_slots(
                cfg.disk,
                cfg.memory_bytes,
                cycle_ns,
                sharing,
                max_bps,
            ),
            None => FixedStretch::new(cfg.disk, cfg.memory_bytes, cycle_ns, sharing),
        }),
    };
    let mut result = SimResult {
        samples: Vec::new(),
        arrivals: arrivals.len() as u64,
        admitted: 0,
        rejected: 0,
        max_streams: 0,
        reads: 0,
        misses: 0,
        streams_missed: 0,
        overcommitted_cycles: 0,
        undercharged_reads: 0,
        ops: OpCounts::default(),
        final_cycle_ns: 0,
    };
    // (id, end of playback) of admitted streams with a lifetime.
    let mut ends: Vec<(CycleStreamId, u64)> = Vec::new();
    let mut missed: std::collections::BTreeSet<u64> = std::collections::BTreeSet::new();
    let mut next_arrival = 0;
    let mut next_sample_ns = 0;
    let mut t = 0u64;
    // The disk is free from this instant (a late cycle delays the next).
    let mut disk_free_ns = 0u64;
    while t < w.run_ns {
        ends.retain(|&(sid, end)| {
            if end <= t {
                match &mut driver {
                    Driver::Cycle(s) => s.remove(sid),
                    Driver::Stretch(f) => f.remove(sid),
                }
                false
            } else {
                true
            }
        });
        let (cycle_ns, reads) = match &mut driver {
            Driver::Cycle(s) => {
                match s.begin_cycle(t) {
                    Some(CycleOp::Combine { .. }) => result.ops.combine += 1,
                    Some(CycleOp::Split { .. }) => result.ops.split += 1,
                    Some(CycleOp::Shrink { .. }) => result.ops.shrink += 1,
                    Some(CycleOp::PrepareDouble { .. }) => result.ops.prepare_double += 1,
                    Some(CycleOp::Double { .. }) => result.ops.double += 1,
                    None => {}
                }
                let end = t + s.cycle_ns();
                while next_arrival < arrivals.len() && arrivals[next_arrival].at_ns <= t {
                    let a = &arrivals[next_arrival];
                    let sid = CycleStreamId(next_arrival as u64);
                    if s.admit(sid, a.bitrate_bps).is_ok() {
                        result.admitted += 1;
                        if let Some(d) = a.duration_ns {
                            ends.push((sid, end + d));
                        }
                    } else {
                        result.rejected += 1;
                    }
                    next_arrival += 1;
                }
                let plan = s.plan();
                if plan.charged_ns > plan.cycle_ns {
                    result.overcommitted_cycles += 1;
                }
                let mut reads: Vec<(u64, rondo_model::cycle::CycleRead)> =
                    plan.reads.into_iter().map(|r| (t, r)).collect();
                // Any order: the guarantee must not depend on it.
                for i in (1..reads.len()).rev() {
                    let j = disk_rng.next_below(i as u64 + 1) as usize;
                    reads.swap(i, j);
                }
                (plan.cycle_ns, reads)
            }
            Driver::Stretch(f) => {
                while next_arrival < arrivals.len() && arrivals[next_arrival].at_ns <= t {
                    let a = &arrivals[next_arrival];
                    let sid = CycleStreamId(next_arrival as u64);
                    if f.admit(sid, a.bitrate_bps).is_ok() {
                        result.admitted += 1;
                        if let Some(d) = a.duration_ns {
                            ends.push((sid, t + f.cycle_ns() + d));
                        }
                    } else {
                        result.rejected += 1;
                    }
                    next_arrival += 1;
                }
                let reads = f
                    .plan(t)
                    .into_iter()
                    .map(|r| (r.not_before_ns, r.read))
                    .collect();
                (f.cycle_ns(), reads)
            }
        };
        if let Some(d) = &mut detailed {
            use rondo_model::disk::RoundBound;
            let extents: Vec<Vec<(u64, u64)>> = reads
                .iter()
                .map(|(_, r)| d.extents(r.stream.0, r.bytes))
                .collect();
            let requests: Vec<rondo_model::disk::BatchRequest> = extents
                .iter()
                .map(|e| rondo_model::disk::BatchRequest::read_extents(e).expect("1-2 extents"))
                .collect();
            for ((_, r), e) in reads.iter().zip(&extents) {
                if d.bound.extents_ns(e) > r.charge_ns {
                    result.undercharged_reads += 1;
                }
            }
            let out = d
                .disk
                .execute_batch(&requests, t, rondo_model::disk::Scheduler::Cscan)
                .expect("extents on the disk");
            for ((_, r), done) in reads.iter().zip(&out.completion_ns) {
                result.reads += 1;
                if *done > r.from_ns {
                    result.misses += 1;
                    missed.insert(r.stream.0);
                }
            }
        }
        let mut now = disk_free_ns.max(t);
        for (not_before, r) in reads.iter().filter(|_| detailed.is_none()) {
            now = now.max(*not_before);
            let access = cfg.disk.access_ns
                - disk_rng.next_below(cfg.access_jitter_ns.min(cfg.disk.access_ns) + 1);
            now += access + cfg.disk.transfer_ns(r.bytes);
            result.reads += 1;
            if now > r.from_ns {
                result.misses += 1;
                missed.insert(r.stream.0);
            }
        }
        disk_free_ns = now;
        let (streams, combined, memory, eq2) = match &driver {
            Driver::Cycle(s) => (
                s.streams(),
                s.combined_streams(),
                s.memory_bytes(),
                s.memory_bytes(),
            ),
            Driver::Stretch(f) => (f.streams(), 0, f.memory_bytes(), f.equation2_bytes()),
        };
        result.max_streams = result.max_streams.max(streams);
        if t >= next_sample_ns {
            result.samples.push(Sample {
                time_s: t as f64 / NS_PER_S as f64,
                streams,
                combined,
                memory_bytes: memory,
                equation2_bytes: eq2,
                cycle_ns,
            });
            next_sample_ns = t + NS_PER_S;
        }
        result.final_cycle_ns = cycle_ns;
        t += cycle_ns;
    }
    result.streams_missed = missed.len() as u64;
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use rondo_model::units::NS_PER_MS;

    const MB: u64 = 1_000_000;

    fn config(policy: SimPolicy, memory_bytes: u64, unit_bps: u64, seed: u64) -> SimConfig {
        let mut workload = Workload::seed004(unit_bps);
        // Short runs keep the default test run fast; lifetimes make streams
        // leave, so splits and shrinks happen too.
        workload.run_ns = 400 * NS_PER_S;
        workload.gap_min_ns = NS_PER_S / 2;
        workload.gap_max_ns = 3 * NS_PER_S;
        workload.duration_ns = Some((60 * NS_PER_S, 300 * NS_PER_S));
        SimConfig {
            disk: CycleDisk::seed004(),
            memory_bytes,
            policy,
            combination: CombinationParams::default(),
            account_transitory: true,
            workload,
            access_jitter_ns: 2 * NS_PER_MS,
            seed,
            detailed_profile: None,
        }
    }

    /// Stream combination from an initial cycle of `cycle_ms`.
    fn combination(cycle_ms: u64, memory_bytes: u64, unit_bps: u64, seed: u64) -> SimConfig {
        let policy = SimPolicy::Combination {
            initial_cycle_ns: cycle_ms * NS_PER_MS,
        };
        config(policy, memory_bytes, unit_bps, seed)
    }

    /// Seeds to run: `RONDO_CYCLE_SEED` replays one.
    fn seeds(n: u64) -> Vec<u64> {
        match std::env::var("RONDO_CYCLE_SEED") {
            Ok(s) => vec![s.parse().expect("RONDO_CYCLE_SEED is a number")],
            Err(_) => (1..=n).collect(),
        }
    }

    fn replay(test: &str, seed: u64) -> String {
        format!(
            "seed {seed}; replay: RONDO_CYCLE_SEED={seed} cargo test -p rondo-experiments --lib \
             cycle_sim::tests::{test} (RONDO_SLOW_TESTS=1 for the slow test)"
        )
    }

    #[test]
    fn no_admitted_stream_misses_across_combinations_splits_and_cycle_changes() {
        let mut total = OpCounts::default();
        for seed in seeds(8) {
            for (memory, unit, cycle_ms, shift, jitter_ns, eager) in [
                (16 * MB, 1_000, 500, false, 2 * NS_PER_MS, false),
                (16 * MB, 1_000, 5_000, false, 0, false),
                (128 * MB, 8_000, 500, false, 0, false),
                (128 * MB, 8_000, 5_000, false, 2 * NS_PER_MS, false),
                // Low bitrates first, high ones later: combined streams
                // meet memory pressure and are split.
                (16 * MB, 1_000, 500, true, 0, false),
                (128 * MB, 8_000, 1_000, true, 2 * NS_PER_MS, false),
                // Thresholds at zero: an operation nearly every cycle, in
                // both directions.
                (16 * MB, 1_000, 1_000, true, 0, true),
                (128 * MB, 8_000, 5_000, true, 0, true),
            ] {
                let mut cfg = combination(cycle_ms, memory, unit, seed);
                cfg.access_jitter_ns = jitter_ns;
                if eager {
                    cfg.combination.memory_threshold_permille = 0;
                    cfg.combination.time_threshold_permille = 0;
                    cfg.combination.difference_threshold_permille = 0;
                }
                if shift {
                    cfg.workload.mix = BitrateMix::Low;
                    cfg.workload.shift = Some((BitrateMix::High, 150 * NS_PER_S));
                }
                let r = simulate(&cfg);
                assert_eq!(
                    (r.misses, r.overcommitted_cycles),
                    (0, 0),
                    "{} ({memory} B, {unit} b/s per kbps, {cycle_ms} ms, shift {shift}): {}",
                    replay(
                        "no_admitted_stream_misses_across_combinations_splits_and_cycle_changes",
                        seed
                    ),
                    r.summary()
                );
                assert!(r.admitted > 0 && r.reads > 0);
                total += r.ops;
            }
        }
        if std::env::var("RONDO_CYCLE_SEED").is_err() {
            // The runs exercised every operation.
            assert!(
                total.combine > 0 && total.split > 0 && total.shrink > 0 && total.double > 0,
                "{total:?}"
            );
        }
    }

    /// `RONDO_SLOW_TESTS=1`: the paper's full 20-minute runs, every reading
    /// of the units, initial cycles from 100 ms to 8 s, both triggers,
    /// uniform and shifting workloads with and without lifetimes, 20 seeds.
    #[test]
    fn slow_full_runs_miss_nothing() {
        if !std::env::var("RONDO_SLOW_TESTS").is_ok_and(|v| v == "1") {
            return;
        }
        for seed in seeds(20) {
            for (memory, unit) in [(128 * MB, 1_000), (16 * MB, 1_000), (128 * MB, 8_000)] {
                for cycle_ms in [100, 500, 1_500, 5_000, 8_000] {
                    for variant in 0..4 {
                        let mut cfg = combination(cycle_ms, memory, unit, seed);
                        cfg.workload = Workload::seed004(unit);
                        if variant & 1 == 1 {
                            cfg.workload.duration_ns = Some((100 * NS_PER_S, 900 * NS_PER_S));
                            cfg.workload.mix = BitrateMix::Low;
                            cfg.workload.shift = Some((BitrateMix::High, 600 * NS_PER_S));
                        }
                        if variant & 2 == 2 {
                            cfg.combination.trigger = rondo_model::cycle::Trigger::PseudoCode;
                            cfg.access_jitter_ns = 0;
                        }
                        let r = simulate(&cfg);
                        assert_eq!(
                            (r.misses, r.overcommitted_cycles),
                            (0, 0),
                            "{} ({memory} B, {unit}, {cycle_ms} ms, variant {variant}): {}",
                            replay("slow_full_runs_miss_nothing", seed),
                            r.summary()
                        );
                    }
                }
            }
        }
    }

    /// The same guarantee on rondo's detailed drive model: every cycle
    /// executed by `Disk::execute_batch` (C-SCAN, zones, cache, read-ahead),
    /// admission charging a bound of that drive.
    #[test]
    fn no_miss_on_the_detailed_drive_model() {
        let mut total = OpCounts::default();
        for seed in seeds(3) {
            for (profile, memory, unit, cycle_ms, eager) in [
                ("hdd-7200", 16 * MB, 1_000, 500, false),
                ("hdd-7200", 128 * MB, 8_000, 5_000, false),
                ("hdd-7200", 16 * MB, 1_000, 1_000, true),
                ("cheetah-4lp", 16 * MB, 1_000, 500, false),
            ] {
                let mut cfg = combination(cycle_ms, memory, unit, seed);
                cfg.detailed_profile = Some(profile.to_string());
                // The detailed drives are faster than the paper's: arrivals
                // every 0.1–0.5 s load them.
                cfg.workload.gap_min_ns = 100 * NS_PER_MS;
                cfg.workload.gap_max_ns = 500 * NS_PER_MS;
                if eager {
                    cfg.combination.memory_threshold_permille = 0;
                    cfg.combination.time_threshold_permille = 0;
                    cfg.combination.difference_threshold_permille = 0;
                    cfg.workload.mix = BitrateMix::Low;
                    cfg.workload.shift = Some((BitrateMix::High, 150 * NS_PER_S));
                }
                let r = simulate(&cfg);
                assert_eq!(
                    (r.misses, r.overcommitted_cycles, r.undercharged_reads),
                    (0, 0, 0),
                    "{} ({profile}, {memory} B, {unit}, {cycle_ms} ms): {}",
                    replay("no_miss_on_the_detailed_drive_model", seed),
                    r.summary()
                );
                assert!(r.reads > 0 && r.rejected > 0, "{}", r.summary());
                total += r.ops;
            }
        }
        if std::env::var("RONDO_CYCLE_SEED").is_err() {
            assert!(
                total.combine > 0 && total.shrink > 0 && total.double > 0,
                "{total:?}"
            );
        }
    }

    /// `RONDO_SLOW_TESTS=1`: full 20-minute runs on the detailed drives.
    #[test]
    fn slow_detailed_full_runs_miss_nothing() {
        if !std::env::var("RONDO_SLOW_TESTS").is_ok_and(|v| v == "1") {
            return;
        }
        for seed in seeds(10) {
            for profile in ["hdd-7200", "cheetah-4lp"] {
                for (memory, unit) in [(16 * MB, 1_000), (128 * MB, 8_000)] {
                    for cycle_ms in [250, 1_000, 5_000] {
                        let mut cfg = combination(cycle_ms, memory, unit, seed);
                        cfg.workload.run_ns = 1200 * NS_PER_S;
                        cfg.workload.gap_min_ns = 100 * NS_PER_MS;
                        cfg.workload.gap_max_ns = 700 * NS_PER_MS;
                        cfg.detailed_profile = Some(profile.to_string());
                        let r = simulate(&cfg);
                        assert_eq!(
                            (r.misses, r.overcommitted_cycles, r.undercharged_reads),
                            (0, 0, 0),
                            "{} ({profile}, {memory} B, {unit}, {cycle_ms} ms): {}",
                            replay("slow_detailed_full_runs_miss_nothing", seed),
                            r.summary()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_baselines_miss_nothing_either() {
        for seed in seeds(4) {
            for policy in [
                SimPolicy::Fixed {
                    cycle_ns: 500 * NS_PER_MS,
                },
                SimPolicy::Stretch {
                    cycle_ns: 1_500 * NS_PER_MS,
                    sharing: true,
                    even_slots_max_bps: None,
                },
                SimPolicy::Stretch {
                    cycle_ns: 5_000 * NS_PER_MS,
                    sharing: false,
                    even_slots_max_bps: None,
                },
                SimPolicy::Stretch {
                    cycle_ns: 2_000 * NS_PER_MS,
                    sharing: true,
                    even_slots_max_bps: Some(1_024_000),
                },
            ] {
                let r = simulate(&config(policy, 16 * MB, 1_000, seed));
                assert_eq!(
                    r.misses,
                    0,
                    "{policy:?}: {}: {}",
                    replay("the_baselines_miss_nothing_either", seed),
                    r.summary()
                );
                assert!(r.admitted > 0);
            }
        }
    }

    #[test]
    fn ignoring_the_transitory_overhead_misses_deadlines() {
        // The same runs with the transitory reads left out of admission:
        // combinations and doublings on a full disk overrun their cycle.
        let mut misses = 0;
        let mut overcommitted = 0;
        for seed in seeds(8) {
            let mut cfg = combination(500, 16 * MB, 1_000, seed);
            cfg.account_transitory = false;
            // The disk takes what admission charges: the worst case the
            // guarantee is for.
            cfg.access_jitter_ns = 0;
            let r = simulate(&cfg);
            misses += r.misses;
            overcommitted += r.overcommitted_cycles;
            // And with thresholds at zero: an operation nearly every cycle.
            cfg.combination.memory_threshold_permille = 0;
            cfg.combination.time_threshold_permille = 0;
            cfg.combination.difference_threshold_permille = 0;
            let r = simulate(&cfg);
            misses += r.misses;
            overcommitted += r.overcommitted_cycles;
        }
        eprintln!("without transitory accounting: {misses} misses, {overcommitted} overrun cycles");
        assert!(
            misses > 0 && overcommitted > 0,
            "no miss without transitory accounting ({misses}, {overcommitted})"
        );
    }

    /// Without departures, packed Fixed-Stretch under Equation 2 admits what
    /// the fixed cycle admits: the same disk and memory arithmetic, so the
    /// row "fixed" is Fixed-Stretch under seed 004's accounting.
    #[test]
    fn packed_fixed_stretch_under_equation_2_is_the_fixed_cycle() {
        for seed in seeds(4) {
            for (memory, unit, cycle_ms) in [
                (16 * MB, 1_000, 500),
                (16 * MB, 1_000, 5_000),
                (128 * MB, 8_000, 3_000),
            ] {
                let run = |policy| {
                    let mut cfg = config(policy, memory, unit, seed);
                    cfg.workload.duration_ns = None;
                    simulate(&cfg)
                };
                let cycle_ns = cycle_ms * NS_PER_MS;
                let fixed = run(SimPolicy::Fixed { cycle_ns });
                let stretch = run(SimPolicy::Stretch {
                    cycle_ns,
                    sharing: false,
                    even_slots_max_bps: None,
                });
                assert_eq!(
                    (fixed.admitted, fixed.max_streams),
                    (stretch.admitted, stretch.max_streams),
                    "{}",
                    replay(
                        "packed_fixed_stretch_under_equation_2_is_the_fixed_cycle",
                        seed
                    )
                );
                assert!(fixed.rejected > 0, "the load saturates");
            }
        }
    }

    #[test]
    fn a_run_is_a_function_of_its_seed() {
        let cfg = combination(500, 16 * MB, 1_000, 3);
        assert_eq!(simulate(&cfg), simulate(&cfg));
        let mut other = cfg.clone();
        other.seed = 4;
        assert_ne!(simulate(&cfg).samples, simulate(&other).samples);
    }
}
