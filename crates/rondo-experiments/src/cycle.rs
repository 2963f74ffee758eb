//! Seed 004's experiments (`kind = "cycle"`): memory and streams in service
//! over time (its Figs. 3 and 4), throughput against the cycle length (Fig.
//! 5(a)) and across six workloads (Fig. 5(b)), each under one or more
//! *readings* of the paper's open units (what "kbps" and "128MB" mean), on
//! the seeded simulation in `cycle_sim`.
//!
//! ```toml
//! kind = "cycle"
//! name = "seed004-fig3"
//! paper = "seed 004, Fig. 3"
//! experiment = "timeline"        # or "throughput-vs-cycle", "workloads"
//! cycles_ms = [500]              # fixed cycles / initial cycles (x of Fig. 5(a))
//! workloads = [1, 2, 3, 4, 5, 6] # workloads only
//! run_s = 1200
//! replications = 10              # seeds per point (timeline: the first only)
//! duration_s = [600, 1800]       # optional stream lifetimes; absent: longer than the run
//! [[readings]]
//! label = "kbit/s, 16 MB"
//! bps_per_kbps = 1000
//! memory_bytes = 16000000
//! fixed_cycle_from = "workload"  # Fig. 5(b): or "uniform" (workload #1's mean)
//! [combination]                  # optional: Figure 2's constants
//! memory_threshold_permille = 800
//! ```

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use rondo_model::cycle::{CombinationParams, CycleDisk, Trigger, best_fixed_cycle_ns};
use rondo_model::units::{NS_PER_MS, NS_PER_S};

use crate::cycle_sim::{BitrateMix, Sample, SimConfig, SimPolicy, Workload, simulate};
use crate::plot::{Chart, ChartPoint};
use crate::spec::SpecError;
use crate::stats::Estimate;

/// Which of seed 004's experiments.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CycleExperimentKind {
    /// Figs. 3 and 4: memory, streams and the cycle over one run.
    Timeline,
    /// Fig. 5(a): most streams in service against the (initial) cycle.
    ThroughputVsCycle,
    /// Fig. 5(b): most streams in service for workloads #1–#6.
    Workloads,
}

/// One reading of the paper's units.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reading {
    pub label: String,
    /// Bits per second in one of the paper's "kbps": 1000 (kbit/s) or 8000
    /// (kB/s).
    pub bps_per_kbps: u64,
    /// The paper's "128MB" of buffer memory, in bytes.
    pub memory_bytes: u64,
}

/// Figure 2's constants as the file gives them (absent: the core's
/// defaults, chosen before any run).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CombinationOverrides {
    pub memory_threshold_permille: Option<u32>,
    pub time_threshold_permille: Option<u32>,
    pub difference_threshold_permille: Option<u32>,
    pub unit_permille: Option<u32>,
    pub trigger: Option<Trigger>,
}

impl CombinationOverrides {
    fn params(&self) -> CombinationParams {
        let mut p = CombinationParams::default();
        if let Some(v) = self.memory_threshold_permille {
            p.memory_threshold_permille = v;
        }
        if let Some(v) = self.time_threshold_permille {
            p.time_threshold_permille = v;
        }
        if let Some(v) = self.difference_threshold_permille {
            p.difference_threshold_permille = v;
        }
        if let Some(v) = self.unit_permille {
            p.unit_permille = v;
        }
        if let Some(v) = self.trigger {
            p.trigger = v;
        }
        p
    }
}

/// A cycle experiment file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CycleSpec {
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub paper: String,
    #[serde(default)]
    pub description: String,
    pub experiment: CycleExperimentKind,
    #[serde(default)]
    pub cycles_ms: Vec<u64>,
    #[serde(default)]
    pub workloads: Vec<u32>,
    #[serde(default = "default_run_s")]
    pub run_s: u64,
    #[serde(default = "default_replications")]
    pub replications: usize,
    #[serde(default)]
    pub duration_s: Option<[u64; 2]>,
    pub readings: Vec<Reading>,
    #[serde(default)]
    pub combination: CombinationOverrides,
    /// Fig. 5(b): which mean bitrate the fixed cycle is chosen from.
    #[serde(default)]
    pub fixed_cycle_from: FixedCycleFrom,
}

/// Seed 004 §3 picks the fixed cycle "based on the average" bitrate without
/// saying whose: each workload's own mean, or the uniform mix's (workload
/// #1's) for every workload, as a server configured once would be.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FixedCycleFrom {
    #[default]
    Workload,
    Uniform,
}

fn default_run_s() -> u64 {
    1200
}
fn default_replications() -> usize {
    10
}

/// Whether a TOML experiment file is a cycle experiment (`kind = "cycle"`).
pub fn is_cycle_spec(text: &str) -> bool {
    crate::spec::spec_kind(text).is_some_and(|k| k == "cycle")
}

impl CycleSpec {
    pub fn from_toml(text: &str, origin: &str) -> Result<CycleSpec, SpecError> {
        let spec: CycleSpec = crate::spec::parse_toml(text, origin)?;
        spec.validate()?;
        Ok(spec)
    }

    fn validate(&self) -> Result<(), SpecError> {
        let invalid = |m: &str| Err(SpecError::Invalid(format!("{}: {m}", self.name)));
        if self.kind != "cycle" {
            return invalid("kind must be \"cycle\"");
        }
        if self.readings.is_empty()
            || self
                .readings
                .iter()
                .any(|r| r.bps_per_kbps == 0 || r.memory_bytes == 0)
        {
            return invalid("readings need positive bps_per_kbps and memory_bytes");
        }
        if self.run_s == 0 || self.replications == 0 {
            return invalid("run_s and replications must be positive");
        }
        match self.experiment {
            CycleExperimentKind::Workloads => {
                if self.workloads.is_empty() || self.workloads.iter().any(|w| !(1..=6).contains(w))
                {
                    return invalid("workloads are numbered 1 to 6");
                }
            }
            _ => {
                if self.cycles_ms.is_empty() || self.cycles_ms.contains(&0) {
                    return invalid("cycles_ms needs positive cycle lengths");
                }
            }
        }
        if let Some([lo, hi]) = self.duration_s
            && (lo == 0 || lo > hi)
        {
            return invalid("duration_s is [min, max] with 0 < min <= max");
        }
        Ok(())
    }

    /// Workload #n of Fig. 5(b) under a reading (the paper defines #1's
    /// parameters only through Fig. 3; the rest are ours, docs/experiments).
    pub fn workload(&self, n: u32, bps_per_kbps: u64) -> Workload {
        let mut w = Workload::seed004(bps_per_kbps);
        w.run_ns = self.run_s * NS_PER_S;
        w.duration_ns = self
            .duration_s
            .map(|[lo, hi]| (lo * NS_PER_S, hi * NS_PER_S));
        match n {
            // #1: Fig. 3's workload.
            1 => {}
            // #2: uniform bitrates, arrivals twice as fast (gaps 1–3.5 s).
            2 => {
                w.gap_min_ns = NS_PER_S;
                w.gap_max_ns = 3_500 * NS_PER_MS;
            }
            // #3: uniform over the upper half (512–1024), Fig. 3's gaps.
            3 => w.min_bps = 512 * bps_per_kbps,
            // #4: favours high bitrates.
            4 => w.mix = BitrateMix::High,
            // #5: favours low bitrates.
            5 => w.mix = BitrateMix::Low,
            // #6: favours low bitrates in the first half, high ones after.
            _ => {
                w.mix = BitrateMix::Low;
                w.shift = Some((BitrateMix::High, w.run_ns / 2));
            }
        }
        w
    }
}

/// Mean bitrate of a workload (the fixed baseline's "prior knowledge").
fn mean_bitrate_bps(w: &Workload) -> u64 {
    let (lo, hi) = (w.min_bps as f64, w.max_bps as f64);
    let mean = |m: BitrateMix| match m {
        BitrateMix::Uniform => (lo + hi) / 2.0,
        // E[U²] = 1/3.
        BitrateMix::High => hi - (hi - lo) / 3.0,
        BitrateMix::Low => lo + (hi - lo) / 3.0,
    };
    match w.shift {
        Some((after, at)) => {
            let f = at as f64 / w.run_ns as f64;
            (f * mean(w.mix) + (1.0 - f) * mean(after)).round() as u64
        }
        None => mean(w.mix).round() as u64,
    }
}

/// One run's time series.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    pub series: String,
    pub samples: Vec<Sample>,
    pub max_streams: usize,
    pub misses: u64,
    pub ops: crate::cycle_sim::OpCounts,
}

/// One point: the most streams in service, over the replications.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CyclePoint {
    pub series: String,
    pub x: f64,
    /// The cycle the fixed policies ran (workloads: chosen from the mean
    /// bitrate), or the combination's initial cycle.
    pub cycle_ms: u64,
    pub replications: usize,
    pub max_streams: f64,
    pub ci_half_width: f64,
    pub final_cycle_ms: f64,
    pub misses: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReadingResult {
    pub reading: Reading,
    pub timelines: Vec<Timeline>,
    pub points: Vec<CyclePoint>,
}

/// A cycle experiment's results.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CycleResult {
    pub name: String,
    pub paper: String,
    pub description: String,
    pub experiment: CycleExperimentKind,
    pub readings: Vec<ReadingResult>,
}

/// The policies compared, as (label, policy) at cycle `cycle_ns`;
/// `max_bps` sizes Fixed-Stretch's even slots.
fn policies(cycle_ns: u64, max_bps: u64) -> Vec<(&'static str, SimPolicy)> {
    vec![
        ("fixed", SimPolicy::Fixed { cycle_ns }),
        (
            "Fixed-Stretch",
            SimPolicy::Stretch {
                cycle_ns,
                sharing: true,
                even_slots_max_bps: None,
            },
        ),
        (
            "Fixed-Stretch even slots",
            SimPolicy::Stretch {
                cycle_ns,
                sharing: true,
                even_slots_max_bps: Some(max_bps),
            },
        ),
        (
            "combination",
            SimPolicy::Combination {
                initial_cycle_ns: cycle_ns,
            },
        ),
    ]
}

fn sim_config(
    spec: &CycleSpec,
    reading: &Reading,
    workload: Workload,
    policy: SimPolicy,
    seed: u64,
) -> SimConfig {
    SimConfig {
        disk: CycleDisk::seed004(),
        memory_bytes: reading.memory_bytes,
        policy,
        combination: spec.combination.params(),
        account_transitory: true,
        workload,
        // Assumption (as cycle_sim's tests): access times vary by up to 2 ms
        // below the charged 10 ms.
        access_jitter_ns: 2 * NS_PER_MS,
        seed,
        detailed_profile: None,
    }
}

/// Runs the experiment; `progress(done, total)` after each run.
pub fn run_cycle(
    spec: &CycleSpec,
    base_seed: u64,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> CycleResult {
    // Every case: (reading, series, x, cycle, workload, policy).
    struct Case {
        reading: usize,
        series: String,
        x: f64,
        cycle_ms: u64,
        workload: Workload,
        policy: SimPolicy,
    }
    let mut cases = Vec::new();
    for (ri, reading) in spec.readings.iter().enumerate() {
        match spec.experiment {
            CycleExperimentKind::Timeline | CycleExperimentKind::ThroughputVsCycle => {
                let workload = spec.workload(1, reading.bps_per_kbps);
                for &ms in &spec.cycles_ms {
                    for (label, policy) in policies(ms * NS_PER_MS, workload.max_bps) {
                        let series = if spec.experiment == CycleExperimentKind::Timeline
                            && spec.cycles_ms.len() > 1
                        {
                            format!("{label} {ms} ms")
                        } else {
                            label.to_string()
                        };
                        cases.push(Case {
                            reading: ri,
                            series,
                            x: ms as f64 / 1000.0,
                            cycle_ms: ms,
                            workload,
                            policy,
                        });
                    }
                }
            }
            CycleExperimentKind::Workloads => {
                for &n in &spec.workloads {
                    let w = spec.workload(n, reading.bps_per_kbps);
                    let from = match spec.fixed_cycle_from {
                        FixedCycleFrom::Workload => w,
                        FixedCycleFrom::Uniform => spec.workload(1, reading.bps_per_kbps),
                    };
                    // The fixed cycle "based on the average" bitrate
                    // (seed 004 §3). Assumption: searched in 100 ms steps up
                    // to 20 s, finer than any cycle the paper names.
                    let (cycle_ns, _) = best_fixed_cycle_ns(
                        &CycleDisk::seed004(),
                        reading.memory_bytes,
                        mean_bitrate_bps(&from),
                        100 * NS_PER_MS,
                        20 * NS_PER_S,
                    );
                    for (label, policy) in policies(cycle_ns, w.max_bps) {
                        cases.push(Case {
                            reading: ri,
                            series: label.to_string(),
                            x: f64::from(n),
                            cycle_ms: cycle_ns / NS_PER_MS,
                            workload: w,
                            policy,
                        });
                    }
                }
            }
        }
    }
    let reps = if spec.experiment == CycleExperimentKind::Timeline {
        1
    } else {
        spec.replications
    };
    let total = cases.len() * reps;
    let done = std::sync::atomic::AtomicUsize::new(0);
    let outcomes: Vec<(Timeline, CyclePoint)> = cases
        .par_iter()
        .map(|c| {
            let reading = &spec.readings[c.reading];
            let runs: Vec<_> = (0..reps as u64)
                .map(|r| {
                    let out = simulate(&sim_config(
                        spec,
                        reading,
                        c.workload,
                        c.policy,
                        base_seed + r,
                    ));
                    let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                    progress(n, total);
                    out
                })
                .collect();
            let est = Estimate::of(
                &runs
                    .iter()
                    .map(|r| r.max_streams as f64)
                    .collect::<Vec<_>>(),
            );
            let first = &runs[0];
            (
                Timeline {
                    series: c.series.clone(),
                    samples: first.samples.clone(),
                    max_streams: first.max_streams,
                    misses: first.misses,
                    ops: first.ops,
                },
                CyclePoint {
                    series: c.series.clone(),
                    x: c.x,
                    cycle_ms: c.cycle_ms,
                    replications: runs.len(),
                    max_streams: est.mean,
                    ci_half_width: est.ci_half_width,
                    final_cycle_ms: runs.iter().map(|r| r.final_cycle_ns as f64).sum::<f64>()
                        / runs.len() as f64
                        / NS_PER_MS as f64,
                    misses: runs.iter().map(|r| r.misses).sum(),
                },
            )
        })
        .collect();
    let mut readings: Vec<ReadingResult> = spec
        .readings
        .iter()
        .map(|r| ReadingResult {
            reading: r.clone(),
            timelines: Vec::new(),
            points: Vec::new(),
        })
        .collect();
    for (c, (timeline, point)) in cases.iter().zip(outcomes) {
        if spec.experiment == CycleExperimentKind::Timeline {
            readings[c.reading].timelines.push(timeline);
        }
        readings[c.reading].points.push(point);
    }
    CycleResult {
        name: spec.name.clone(),
        paper: spec.paper.clone(),
        description: spec.description.clone(),
        experiment: spec.experiment,
        readings,
    }
}

impl CycleResult {
    /// The charts: per reading, memory, streams and cycle over time
    /// (timeline), or the most streams against x.
    pub fn charts(&self) -> Vec<(String, Chart)> {
        let mut charts = Vec::new();
        for (i, r) in self.readings.iter().enumerate() {
            let title = format!("{} ({})", self.name, r.reading.label);
            match self.experiment {
                CycleExperimentKind::Timeline => {
                    let series = |value: fn(&Sample) -> f64| {
                        r.timelines
                            .iter()
                            .map(|t| {
                                // At most ~150 markers a line.
                                let every = t.samples.len().div_ceil(150).max(1);
                                let points = t
                                    .samples
                                    .iter()
                                    .step_by(every)
                                    .map(|s| ChartPoint {
                                        x: s.time_s,
                                        y: value(s),
                                        ci_half_width: f64::NAN,
                                    })
                                    .collect();
                                (t.series.clone(), points)
                            })
                            .collect()
                    };
                    for (stem, y_label, value) in [
                        (
                            "memory",
                            "memory (MB, as admission counts it)",
                            (|s: &Sample| s.memory_bytes as f64 / 1e6) as fn(&Sample) -> f64,
                        ),
                        ("streams", "streams in service", |s: &Sample| {
                            s.streams as f64
                        }),
                        ("cycle", "cycle (s)", |s: &Sample| s.cycle_ns as f64 / 1e9),
                    ] {
                        charts.push((
                            format!("plot-{}-{stem}", i + 1),
                            Chart {
                                title: title.clone(),
                                x_label: "time (s)".into(),
                                y_label: y_label.into(),
                                series: series(value),
                                y_max: None,
                                log_x: Some(false),
                            },
                        ));
                    }
                }
                _ => {
                    let mut labels: Vec<&str> = Vec::new();
                    for p in &r.points {
                        if !labels.contains(&p.series.as_str()) {
                            labels.push(&p.series);
                        }
                    }
                    let x_label = if self.experiment == CycleExperimentKind::Workloads {
                        "workload #"
                    } else {
                        "fixed / initial cycle (s)"
                    };
                    charts.push((
                        format!("plot-{}", i + 1),
                        Chart {
                            title,
                            x_label: x_label.into(),
                            y_label: "most streams in service".into(),
                            series: labels
                                .iter()
                                .map(|&l| {
                                    let pts = r
                                        .points
                                        .iter()
                                        .filter(|p| p.series == l)
                                        .map(|p| ChartPoint {
                                            x: p.x,
                                            y: p.max_streams,
                                            ci_half_width: p.ci_half_width,
                                        })
                                        .collect();
                                    (l.to_string(), pts)
                                })
                                .collect(),
                            y_max: None,
                            log_x: Some(false),
                        },
                    ));
                }
            }
        }
        charts
    }

    pub fn to_csv(&self) -> String {
        let mut out = String::from(
            "reading,series,x,cycle_ms,replications,max_streams,ci_half_width,final_cycle_ms,misses\n",
        );
        for r in &self.readings {
            for p in &r.points {
                out.push_str(&format!(
                    "{},{},{},{},{},{},{},{},{}\n",
                    csv_field(&r.reading.label),
                    p.series,
                    p.x,
                    p.cycle_ms,
                    p.replications,
                    p.max_streams,
                    p.ci_half_width,
                    p.final_cycle_ms,
                    p.misses
                ));
            }
        }
        out
    }

    /// The timelines as CSV (time series of every run shown).
    pub fn timelines_csv(&self) -> String {
        let mut out = String::from(
            "reading,series,time_s,streams,combined,memory_bytes,equation2_bytes,cycle_ns\n",
        );
        for r in &self.readings {
            for t in &r.timelines {
                for s in &t.samples {
                    out.push_str(&format!(
                        "{},{},{},{},{},{},{},{}\n",
                        csv_field(&r.reading.label),
                        t.series,
                        s.time_s,
                        s.streams,
                        s.combined,
                        s.memory_bytes,
                        s.equation2_bytes,
                        s.cycle_ns
                    ));
                }
            }
        }
        out
    }

    /// A plain-text table of the points (and timelines' summaries).
    pub fn table(&self) -> String {
        let mut out = format!("{} — {}\n", self.name, self.paper);
        for r in &self.readings {
            out.push_str(&format!("reading: {}\n", r.reading.label));
            for t in &r.timelines {
                out.push_str(&format!(
                    "  {:<24} most streams {:>4}  misses {}  ops {:?}\n",
                    t.series, t.max_streams, t.misses, t.ops
                ));
            }
            if self.experiment != CycleExperimentKind::Timeline {
                for p in &r.points {
                    out.push_str(&format!(
                        "  {:<16} x {:>5}  cycle {:>5} ms  most streams {:>7.1} ± {:>5.1}  final cycle {:>7.0} ms  misses {}\n",
                        p.series,
                        p.x,
                        p.cycle_ms,
                        p.max_streams,
                        p.ci_half_width,
                        p.final_cycle_ms,
                        p.misses
                    ));
                }
            }
        }
        out
    }
}

/// A CSV field, quoted when it holds a comma or a quote.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_experiment_of_each_kind_runs_and_misses_nothing() {
        for (kind, extra) in [
            ("timeline", "cycles_ms = [500]"),
            ("throughput-vs-cycle", "cycles_ms = [500, 2000]"),
            ("workloads", "workloads = [1, 6]"),
        ] {
            let text = format!(
                r#"kind = "cycle"
name = "t"
experiment = "{kind}"
{extra}
run_s = 120
replications = 2
[[readings]]
label = "kbit/s, 16 MB"
bps_per_kbps = 1000
memory_bytes = 16000000"#
            );
            assert!(is_cycle_spec(&text));
            let spec = CycleSpec::from_toml(&text, "t").unwrap();
            let r = run_cycle(&spec, 1, &|_, _| {});
            assert_eq!(r, run_cycle(&spec, 1, &|_, _| {}), "reproducible");
            let points = &r.readings[0].points;
            assert!(!points.is_empty());
            assert!(points.iter().all(|p| p.misses == 0 && p.max_streams > 0.0));
            assert!(!r.charts().is_empty());
            assert_eq!(r.to_csv().lines().count(), 1 + points.len());
            assert!(
                r.to_csv().contains("\"kbit/s, 16 MB\""),
                "the label is quoted"
            );
        }
        assert!(!is_cycle_spec("kind = \"jukebox\""));
        let bad = CycleSpec::from_toml(
            "kind = \"cycle\"\nname = \"b\"\nexperiment = \"workloads\"\nworkloads = [7]\n\
             [[readings]]\nlabel = \"x\"\nbps_per_kbps = 1000\nmemory_bytes = 1",
            "b",
        )
        .unwrap_err();
        assert!(bad.to_string().contains("1 to 6"), "{bad}");
    }

    #[test]
    fn the_seed004_experiment_files_parse() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments");
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("seed004-") && n.ends_with(".toml"))
            })
            .collect();
        names.sort();
        assert!(names.len() >= 4, "{names:?}");
        for path in names {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(is_cycle_spec(&text), "{}", path.display());
            let spec = CycleSpec::from_toml(&text, &path.display().to_string()).unwrap();
            let stem = path.file_stem().unwrap().to_str().unwrap();
            assert_eq!(spec.name, stem, "a file's name is its experiment's");
        }
    }

    #[test]
    fn workload_means() {
        let spec = CycleSpec::from_toml(
            "kind = \"cycle\"\nname = \"w\"\nexperiment = \"workloads\"\nworkloads = [1]\n\
             [[readings]]\nlabel = \"x\"\nbps_per_kbps = 1000\nmemory_bytes = 1",
            "w",
        )
        .unwrap();
        assert_eq!(mean_bitrate_bps(&spec.workload(1, 1000)), 576_000);
        assert_eq!(mean_bitrate_bps(&spec.workload(5, 1000)), 426_667);
        assert_eq!(mean_bitrate_bps(&spec.workload(4, 1000)), 725_333);
        assert_eq!(mean_bitrate_bps(&spec.workload(6, 1000)), 576_000);
    }
}
