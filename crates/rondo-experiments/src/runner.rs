//! Runs an experiment: every point's replications, in parallel across cores,
//! each replication an independent seeded simulation, until the point's 95%
//! confidence half-width is within the target fraction of its mean.
//!
//! Replication k of a point runs with seed `base_seed + k`, and results are
//! collected in index order, so the output does not depend on thread timing.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use rondo_sim::run::{self, SimConfig, SimResult, SimTitle};

use crate::spec::{ExperimentSpec, Point, SpecError, titles_with};
use crate::stats::{Estimate, StoppingRule};

/// One point's summary over its replications.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PointResult {
    pub series: String,
    pub x: f64,
    pub disks: u32,
    pub scheme: String,
    pub placement: String,
    pub backup_block_bytes: Option<u64>,
    pub mode: String,
    pub bound: String,
    pub titles: String,
    pub replications: usize,
    /// Mean active streams of each replication, in seed order: replication k
    /// of every point of one run used seed `base_seed + k` (the same
    /// arrivals), so two series can be compared pairwise.
    pub replication_values: Vec<f64>,
    /// The plotted metric of each replication, in seed order.
    pub replication_metric_values: Vec<f64>,
    pub mean_active_streams: f64,
    pub ci_half_width: f64,
    /// The plotted metric (the experiment's `metric`) and its half-width.
    pub metric: f64,
    pub metric_ci_half_width: f64,
    pub rejection_ratio: f64,
    pub mean_startup_delay_rounds: f64,
    /// Seconds from arrival to first data (`SimResult::mean_startup_latency_s`).
    #[serde(default)]
    pub mean_startup_latency_s: f64,
    /// Server buffer reserved, mean over rounds (`SimResult::mean_buffer_bytes`).
    #[serde(default)]
    pub mean_buffer_bytes: f64,
    /// Commands served wholly from a drive's cache, summed over
    /// replications (simulated-disk mode; seed 003's prefetched blocks).
    #[serde(default)]
    pub cache_hits: u64,
    /// Seed 004's dynamic cycle: its length in rounds (mean over the
    /// measured rounds and the replications) and the operations made
    /// (combines, splits, doubles, halves, refused; summed).
    #[serde(default)]
    pub mean_cycle_group_rounds: Option<f64>,
    #[serde(default)]
    pub cycle_operations: Option<[u64; 5]>,
    pub reserved_fraction: f64,
    pub reserved_primary_fraction: f64,
    pub reserved_spread_fraction: f64,
    pub reserved_max_fraction: f64,
    pub reserved_min_fraction: f64,
    pub reserved_working_fraction: f64,
    pub busy_fraction: Option<f64>,
    pub deadline_misses: u64,
    pub disk_round_overruns: u64,
    /// Disk-rounds whose measured busy time exceeded their reservation
    /// (simulated-disk mode), summed over replications.
    pub busy_over_reserved_disk_rounds: u64,
    pub lost_reads: u64,
    pub lookahead_rounds: u64,
    /// Fault plans (summed over replications): read errors, late recovered
    /// stream-rounds and streams the array stopped.
    #[serde(default)]
    pub read_errors: u64,
    #[serde(default)]
    pub recovery_misses: u64,
    #[serde(default)]
    pub streams_aborted: u64,
    /// Bad extents (summed): found, repaired from the replica, rounds left
    /// with no good replica; disks not serving at a run's end.
    #[serde(default)]
    pub extents_bad: u64,
    #[serde(default)]
    pub extents_repaired: u64,
    #[serde(default)]
    pub rounds_lost: u64,
    #[serde(default)]
    pub disks_failed: u64,
    /// Under a backup window (summed): a failed disk's backup reads served
    /// from the survivors' backlogs and those cut between rounds; the most
    /// stream-rounds held behind a late round at one boundary (maximum).
    #[serde(default)]
    pub window_recoveries: u64,
    #[serde(default)]
    pub window_splits: u64,
    #[serde(default)]
    pub held_behind_late_max: u64,
    /// Stream-rounds released after a player started at its first byte
    /// needed them (sum; `ArrayCounters::late_releases`).
    #[serde(default)]
    pub late_releases: u64,
    /// Mean over the replications where it finished: rounds from a
    /// rebuild's start to the disk serving again, and from an ingest's start
    /// to its last round granted.
    #[serde(default)]
    pub mean_rebuild_rounds: Option<f64>,
    #[serde(default)]
    pub mean_ingest_rounds: Option<f64>,
}

/// An experiment's results.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExperimentResult {
    pub name: String,
    pub paper: String,
    pub description: String,
    pub x: String,
    pub metric: String,
    pub points: Vec<PointResult>,
}

/// Reads a numeric field of a result by name (the experiment's `metric`).
pub fn metric_of(result: &SimResult, metric: &str) -> Result<f64, SpecError> {
    let value = serde_json::to_value(result).expect("results serialize");
    value
        .get(metric)
        .and_then(|v| v.as_f64())
        .ok_or_else(|| SpecError::Invalid(format!("unknown or non-numeric metric '{metric}'")))
}

/// Runs every point; `progress(done, total)` is called after each replication
/// (`total` grows when a point needs more replications than the minimum).
pub fn run_experiment(
    spec: &ExperimentSpec,
    base_seed: u64,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<ExperimentResult, SpecError> {
    let points = spec.points()?;
    let rule = spec.replications.rule();
    let counter = Progress::new(points.len() * rule.min_replications, progress);
    let results: Vec<Result<PointResult, SpecError>> = points
        .par_iter()
        .map(|point| {
            let titles = titles_with(&point.titles, point.trace, &point.config)?;
            run_point(point, &titles, &spec.metric, rule, base_seed, &counter)
        })
        .collect();
    Ok(ExperimentResult {
        name: spec.name.clone(),
        paper: spec.paper.clone(),
        description: spec.description.clone(),
        x: spec.x.clone(),
        metric: spec.metric.clone(),
        points: results.into_iter().collect::<Result<_, _>>()?,
    })
}

/// Counts replications done across threads and reports them.
pub struct Progress<'a> {
    done: AtomicUsize,
    total: AtomicUsize,
    report: &'a (dyn Fn(usize, usize) + Sync),
}

impl<'a> Progress<'a> {
    pub fn new(expected: usize, report: &'a (dyn Fn(usize, usize) + Sync)) -> Progress<'a> {
        Progress {
            done: AtomicUsize::new(0),
            total: AtomicUsize::new(expected),
            report,
        }
    }

    fn expect_one_more(&self) {
        self.total.fetch_add(1, Ordering::Relaxed);
    }

    fn one_done(&self) {
        let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        (self.report)(done, self.total.load(Ordering::Relaxed));
    }
}

/// Runs one point's replications (seeds `base_seed`, `base_seed + 1`, …; the
/// first `min` in parallel) until the stopping rule holds for the mean
/// number of active streams, and summarises them.
pub fn run_point(
    point: &Point,
    titles: &[SimTitle],
    metric: &str,
    rule: StoppingRule,
    base_seed: u64,
    progress: &Progress,
) -> Result<PointResult, SpecError> {
    run_point_with(point, metric, rule, base_seed, progress, &|config| {
        run::run(config, titles)
    })
}

/// [`run_point`] with the run of one replication given: `run_one(config)`
/// for each replication's config (its seed set). `rondo simulate
/// --data-dir` runs a data directory's stored titles this way
/// (`rondo_sim::run::run_placed`).
pub fn run_point_with(
    point: &Point,
    metric: &str,
    rule: StoppingRule,
    base_seed: u64,
    progress: &Progress,
    run_one: &(dyn Fn(&SimConfig) -> Result<SimResult, rondo_sim::run::SimError> + Sync),
) -> Result<PointResult, SpecError> {
    let replicate = |k: usize| -> Result<SimResult, SpecError> {
        let config = SimConfig {
            seed: base_seed + k as u64,
            ..point.config.clone()
        };
        let result = run_one(&config).map_err(|e| SpecError::Config {
            series: point.series.clone(),
            x: point.x_name.clone(),
            value: point.x,
            message: e.to_string(),
        });
        progress.one_done();
        result
    };
    let mut runs: Vec<SimResult> = (0..rule.min_replications)
        .into_par_iter()
        .map(replicate)
        .collect::<Result<_, _>>()?;
    while !rule.is_done(
        &runs
            .iter()
            .map(|r| r.mean_active_streams)
            .collect::<Vec<_>>(),
    ) {
        progress.expect_one_more();
        runs.push(replicate(runs.len())?);
    }
    summarise(point, &runs, metric)
}

fn summarise(point: &Point, runs: &[SimResult], metric: &str) -> Result<PointResult, SpecError> {
    let est = |f: &dyn Fn(&SimResult) -> f64| Estimate::of(&runs.iter().map(f).collect::<Vec<_>>());
    let mean = |f: &dyn Fn(&SimResult) -> f64| est(f).mean;
    let active = est(&|r| r.mean_active_streams);
    let metric_values = runs
        .iter()
        .map(|r| metric_of(r, metric))
        .collect::<Result<Vec<_>, _>>()?;
    let metric_est = Estimate::of(&metric_values);
    let c = &point.config;
    Ok(PointResult {
        series: point.series.clone(),
        x: point.x,
        disks: c.disks,
        scheme: c.scheme.to_string(),
        placement: serde_name(&c.placement),
        backup_block_bytes: c.backup_block_bytes,
        mode: serde_name(&c.mode),
        bound: serde_name(&c.bound),
        titles: point.titles.clone(),
        replications: runs.len(),
        replication_values: runs.iter().map(|r| r.mean_active_streams).collect(),
        replication_metric_values: metric_values.clone(),
        mean_active_streams: active.mean,
        ci_half_width: active.ci_half_width,
        metric: metric_est.mean,
        metric_ci_half_width: metric_est.ci_half_width,
        rejection_ratio: mean(&|r| r.rejection_ratio),
        mean_startup_delay_rounds: mean(&|r| r.mean_startup_delay_rounds),
        mean_startup_latency_s: mean(&|r| r.mean_startup_latency_s),
        mean_buffer_bytes: mean(&|r| r.mean_buffer_bytes),
        cache_hits: runs.iter().map(|r| r.cache_hits).sum(),
        mean_cycle_group_rounds: runs[0]
            .mean_cycle_group_rounds
            .map(|_| mean(&|r| r.mean_cycle_group_rounds.unwrap_or(0.0))),
        cycle_operations: runs[0].cycle.as_ref().map(|_| {
            runs.iter()
                .filter_map(|r| r.cycle.as_ref())
                .fold([0; 5], |mut sum, c| {
                    for (s, v) in sum
                        .iter_mut()
                        .zip([c.combines, c.splits, c.doubles, c.halves, c.refusals])
                    {
                        *s += v;
                    }
                    sum
                })
        }),
        reserved_fraction: mean(&|r| r.reserved_fraction),
        reserved_primary_fraction: mean(&|r| r.reserved_primary_fraction),
        reserved_spread_fraction: mean(&|r| r.reserved_spread_fraction),
        reserved_max_fraction: mean(&|r| r.reserved_max_fraction),
        reserved_min_fraction: mean(&|r| r.reserved_min_fraction),
        reserved_working_fraction: mean(&|r| r.reserved_working_fraction),
        busy_fraction: runs[0]
            .busy_fraction
            .map(|_| mean(&|r| r.busy_fraction.unwrap_or(0.0))),
        deadline_misses: runs.iter().map(|r| r.deadline_misses).sum(),
        disk_round_overruns: runs.iter().map(|r| r.disk_round_overruns).sum(),
        busy_over_reserved_disk_rounds: runs.iter().map(|r| r.busy_over_reserved_disk_rounds).sum(),
        lost_reads: runs.iter().map(|r| r.lost_reads).sum(),
        lookahead_rounds: runs[0].lookahead_rounds,
        read_errors: runs.iter().map(|r| r.read_errors).sum(),
        recovery_misses: runs.iter().map(|r| r.recovery_misses).sum(),
        streams_aborted: runs.iter().map(|r| r.streams_aborted).sum(),
        extents_bad: runs.iter().map(|r| r.extents_bad).sum(),
        extents_repaired: runs.iter().map(|r| r.extents_repaired).sum(),
        rounds_lost: runs.iter().map(|r| r.rounds_lost).sum(),
        disks_failed: runs.iter().map(|r| r.disks_failed).sum(),
        window_recoveries: runs.iter().map(|r| r.window_recoveries).sum(),
        window_splits: runs.iter().map(|r| r.window_splits).sum(),
        held_behind_late_max: runs
            .iter()
            .map(|r| r.held_behind_late_max)
            .max()
            .unwrap_or(0),
        late_releases: runs.iter().map(|r| r.late_releases).sum(),
        mean_rebuild_rounds: mean_of_some(runs.iter().map(|r| r.rebuild_rounds)),
        mean_ingest_rounds: mean_of_some(runs.iter().map(|r| r.ingest_rounds)),
    })
}

/// The mean of the values that are there; `None` if none is.
fn mean_of_some(values: impl Iterator<Item = Option<u64>>) -> Option<f64> {
    let present: Vec<u64> = values.flatten().collect();
    (!present.is_empty()).then(|| present.iter().sum::<u64>() as f64 / present.len() as f64)
}

/// The serde name of a config enum value, for tables and JSON.
fn serde_name<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

impl ExperimentResult {
    /// Points grouped by series, in the order the series were defined.
    pub fn by_series(&self) -> Vec<(String, Vec<&PointResult>)> {
        let mut order: Vec<String> = Vec::new();
        let mut groups: BTreeMap<String, Vec<&PointResult>> = BTreeMap::new();
        for p in &self.points {
            if !groups.contains_key(&p.series) {
                order.push(p.series.clone());
            }
            groups.entry(p.series.clone()).or_default().push(p);
        }
        order
            .into_iter()
            .map(|s| {
                let v = groups.remove(&s).unwrap_or_default();
                (s, v)
            })
            .collect()
    }

    /// CSV with a header line; one row per point.
    pub fn to_csv(&self) -> String {
        let mut out = String::from(
            "series,x,disks,scheme,placement,backup_block_bytes,mode,bound,titles,replications,\
             mean_active_streams,ci_half_width,metric,metric_ci_half_width,rejection_ratio,\
             mean_startup_delay_rounds,reserved_fraction,reserved_primary_fraction,\
             reserved_spread_fraction,reserved_working_fraction,busy_fraction,deadline_misses,\
             disk_round_overruns,lost_reads,reserved_max_fraction,reserved_min_fraction,\
             busy_over_reserved_disk_rounds\n",
        );
        for p in &self.points {
            out.push_str(&format!(
                "\"{}\",{},{},{},{},{},{},{},{},{},{:.3},{:.3},{:.5},{:.5},{:.5},{:.3},{:.5},{:.5},{:.5},{:.5},{},{},{},{},{:.5},{:.5},{}\n",
                p.series.replace('"', "\"\""),
                p.x,
                p.disks,
                p.scheme,
                p.placement,
                p.backup_block_bytes.map(|b| b.to_string()).unwrap_or_default(),
                p.mode,
                p.bound,
                p.titles,
                p.replications,
                p.mean_active_streams,
                p.ci_half_width,
                p.metric,
                p.metric_ci_half_width,
                p.rejection_ratio,
                p.mean_startup_delay_rounds,
                p.reserved_fraction,
                p.reserved_primary_fraction,
                p.reserved_spread_fraction,
                p.reserved_working_fraction,
                p.busy_fraction.map(|b| format!("{b:.5}")).unwrap_or_default(),
                p.deadline_misses,
                p.disk_round_overruns,
                p.lost_reads,
                p.reserved_max_fraction,
                p.reserved_min_fraction,
                p.busy_over_reserved_disk_rounds,
            ));
        }
        out
    }
}
