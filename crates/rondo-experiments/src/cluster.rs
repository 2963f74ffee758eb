//! Seed 001's experiments on the simulated cluster (`rondo_sim::cluster`):
//! the delay components, average and maximum, against the streams per I
//! node (its Figures 4, 5, 7, 8 and 10, with Figures 6 and 9's summaries at
//! two loads), and the largest number of streams each retrieval algorithm
//! supports against the share of requests for one popular title (Figure 11).
//!
//! ```toml
//! kind = "cluster"
//! name = "seed001-fig4"
//! experiment = "delays"                 # or "capacity"
//! streams_per_interface = [5, 10, 50]   # delays: the x axis
//! summary_loads = [15, 50]              # delays: Figs 6/9 at these loads
//! summary_x = "fetch_kib"               # ... against this setting
//! popular_shares = [0.0, 0.1, 0.5]      # capacity: the x axis
//! max_streams = 600                     # capacity: the search's bound
//! [base]                                # any `Setup` field
//! interface_nodes = 6
//! storage_nodes = 35
//! stripe_factor = 4
//! fetch_kib = 40
//! [[series]]
//! label = "P_S = 40 kB"
//! fetch_kib = 40
//! [replications]
//! min = 3
//! max = 3
//! ```

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use rondo_model::cluster::{Retrieval, StreamParams};
use rondo_model::units::NS_PER_S;
use rondo_sim::cluster::{
    Admission, ClusterConfig, ClusterOutcome, Components, Population, max_supported,
};

use crate::plot::{Chart, ChartPoint};
use crate::spec::{Replications, Series, SpecError};
use crate::stats::Estimate;

/// Which of seed 001's experiments.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClusterExperimentKind {
    Delays,
    Capacity,
    /// `offered_streams` requests against the admission the setup chooses
    /// (§7's measured admission with `measured_history`): how many it
    /// admits, and how many fragments then arrive late.
    Admission,
}

/// How requests arrive in capacity and admission experiments.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// All within `ramp_s`, playing to `play_end_s` (§5's 4–5 minutes).
    Ramp,
    /// Poisson arrivals for `steady_run_s`, each playing `play_s`: streams
    /// of every age at once.
    Steady,
}

/// One configuration of the cluster; `base` and each series' overrides.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Setup {
    pub interface_nodes: u32,
    pub storage_nodes: u32,
    pub stripe_factor: u32,
    /// P_S in KiB; or give `stream_buffer_kib` (B_I) and P_S = B_I / S.
    #[serde(default)]
    pub fetch_kib: Option<f64>,
    #[serde(default)]
    pub stream_buffer_kib: Option<f64>,
    #[serde(default = "rdss")]
    pub retrieval: Retrieval,
    /// B_I_tot per I node in MiB (condition (4)); none: unbounded.
    #[serde(default)]
    pub interface_buffer_mib: Option<f64>,
    /// LMSS: the popular title's first MiB in the dedicated node's memory.
    #[serde(default)]
    pub lmss_memory_mib: f64,
    /// Streams play until `play_end_s`, at least `play_min_s` (§5: 4 to 5
    /// minutes, by arrival).
    #[serde(default = "play_min")]
    pub play_min_s: f64,
    #[serde(default = "play_end")]
    pub play_end_s: f64,
    /// Disks per I node for a local copy (LDSS, LMSS).
    #[serde(default = "one")]
    pub interface_local_disks: u32,
    /// Capacity and admission: how requests arrive.
    #[serde(default = "ramp_workload")]
    pub workload: Workload,
    /// Ramp: requests arrive uniformly over this many seconds.
    #[serde(default = "ramp")]
    pub ramp_s: f64,
    /// Steady: each stream plays this long (4.5 minutes, the middle of
    /// §5's 4 to 5) and arrivals go on for `steady_run_s`.
    #[serde(default = "steady_play")]
    pub play_s: f64,
    #[serde(default = "steady_run")]
    pub steady_run_s: f64,
    #[serde(default = "window")]
    pub popularity_window_s: f64,
    #[serde(default = "threshold")]
    pub popularity_threshold_requests: u32,
    /// §7's measured admission with w_ij over the last m retrievals; none:
    /// only condition (4).
    #[serde(default)]
    pub measured_history: Option<usize>,
    /// Investigations: the interconnect's rate in MB/s (10^6 bytes; the
    /// paper's measured 13.8 by default) and a factor on every seek time.
    #[serde(default)]
    pub network_mbytes_per_s: Option<f64>,
    #[serde(default)]
    pub seek_scale: Option<f64>,
    /// Investigations: nodes on a 2D mesh this wide, messages holding
    /// their XY route's links (none: contention at the nodes' ports only).
    #[serde(default)]
    pub mesh_width: Option<u32>,
    /// Investigations: a round's fetches spread over its first half.
    #[serde(default)]
    pub stagger_fetches: bool,
}

fn rdss() -> Retrieval {
    Retrieval::Rdss
}
fn play_min() -> f64 {
    240.0
}
fn play_end() -> f64 {
    300.0
}
fn one() -> u32 {
    1
}
fn ramp() -> f64 {
    60.0
}
fn ramp_workload() -> Workload {
    Workload::Ramp
}
fn steady_play() -> f64 {
    270.0
}
fn steady_run() -> f64 {
    900.0
}
fn window() -> f64 {
    60.0
}
fn threshold() -> u32 {
    3
}

impl Setup {
    fn fetch_bytes(&self) -> u64 {
        let kib = match (self.fetch_kib, self.stream_buffer_kib) {
            (Some(p), _) => p,
            (None, Some(b)) => b / f64::from(self.stripe_factor.max(1)),
            (None, None) => 0.0,
        };
        (kib * 1024.0).round() as u64
    }

    /// The requests of a capacity or admission run offering `total`.
    fn requests(&self, total: u32, popular_share: f64) -> Population {
        let s = |secs: f64| (secs * NS_PER_S as f64) as u64;
        match self.workload {
            Workload::Ramp => Population::Requests {
                total,
                popular_share,
                ramp_ns: s(self.ramp_s),
            },
            Workload::Steady => Population::Steady {
                concurrent: total,
                popular_share,
                play_ns: s(self.play_s),
                run_ns: s(self.steady_run_s),
            },
        }
    }

    fn stream(&self) -> StreamParams {
        StreamParams::paragon(self.fetch_bytes(), self.stripe_factor)
    }

    fn config(&self, population: Population, seed: u64) -> ClusterConfig {
        let s = |secs: f64| (secs * NS_PER_S as f64) as u64;
        let mut c = ClusterConfig::paragon(
            self.interface_nodes,
            self.storage_nodes,
            self.stream(),
            population,
            seed,
        );
        c.retrieval = self.retrieval;
        c.interface_buffer_bytes = self
            .interface_buffer_mib
            .map(|m| (m * 1024.0 * 1024.0) as u64);
        c.lmss_memory_bytes = (self.lmss_memory_mib * 1024.0 * 1024.0) as u64;
        c.play_min_ns = s(self.play_min_s);
        c.play_end_ns = s(self.play_end_s);
        c.interface_local_disks = self.interface_local_disks;
        c.popularity_window_ns = s(self.popularity_window_s);
        c.popularity_threshold_requests = self.popularity_threshold_requests;
        if let Some(rate) = self.network_mbytes_per_s {
            c.network.bytes_per_s = (rate * 1e6) as u64;
        }
        if let Some(scale) = self.seek_scale {
            c.disk.seek_scale = scale;
        }
        c.network.mesh_width = self.mesh_width;
        c.stagger_fetches = self.stagger_fetches;
        c.admission = match self.measured_history {
            Some(m) => Admission::Measured { history_fetches: m },
            None => Admission::Buffer,
        };
        c
    }

    fn validate(&self, name: &str) -> Result<(), SpecError> {
        let invalid = |m: &str| Err(SpecError::Invalid(format!("{name}: {m}")));
        if self.interface_nodes == 0 || self.storage_nodes == 0 {
            return invalid("interface_nodes and storage_nodes must be at least 1");
        }
        if self.stripe_factor == 0 || self.stripe_factor > self.storage_nodes {
            return invalid("stripe_factor must be between 1 and storage_nodes");
        }
        if self.fetch_bytes() == 0 {
            return invalid("give fetch_kib (P_S) or stream_buffer_kib (B_I), positive");
        }
        if !(self.play_min_s > 0.0
            && self.play_end_s > 0.0
            && self.ramp_s > 0.0
            && self.play_s > 0.0
            && self.steady_run_s > 0.0)
        {
            return invalid(
                "play_min_s, play_end_s, ramp_s, play_s and steady_run_s must be positive",
            );
        }
        if self.network_mbytes_per_s.is_some_and(|r| r <= 0.0)
            || self.seek_scale.is_some_and(|k| k < 0.0)
        {
            return invalid("network_mbytes_per_s must be positive and seek_scale not negative");
        }
        if self.mesh_width == Some(0) {
            return invalid("mesh_width must be at least 1");
        }
        if self.interface_local_disks == 0 {
            return invalid("interface_local_disks must be at least 1");
        }
        Ok(())
    }
}

/// A cluster experiment file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub paper: String,
    #[serde(default)]
    pub description: String,
    pub experiment: ClusterExperimentKind,
    #[serde(default)]
    pub streams_per_interface: Vec<u32>,
    #[serde(default)]
    pub summary_loads: Vec<u32>,
    /// The setting Figs 6 and 9 put on their x axis: "fetch_kib" or
    /// "stripe_factor".
    #[serde(default)]
    pub summary_x: Option<String>,
    #[serde(default)]
    pub popular_shares: Vec<f64>,
    #[serde(default = "max_streams")]
    pub max_streams: u32,
    /// Admission: the requests offered.
    #[serde(default = "max_streams")]
    pub offered_streams: u32,
    pub base: toml::Table,
    pub series: Vec<Series>,
    #[serde(default)]
    pub replications: Replications,
}

fn max_streams() -> u32 {
    600
}

/// Whether a TOML experiment file is a cluster experiment.
pub fn is_cluster_spec(text: &str) -> bool {
    crate::spec::spec_kind(text).is_some_and(|k| k == "cluster")
}

impl ClusterSpec {
    pub fn from_toml(text: &str, origin: &str) -> Result<ClusterSpec, SpecError> {
        let spec: ClusterSpec = crate::spec::parse_toml(text, origin)?;
        spec.validate()?;
        Ok(spec)
    }

    /// Each series' setup: `base` with the series' keys over it.
    pub fn setups(&self) -> Result<Vec<(String, Setup)>, SpecError> {
        self.series
            .iter()
            .map(|s| {
                let mut t = self.base.clone();
                for (k, v) in &s.overrides {
                    t.insert(k.clone(), v.clone());
                }
                let setup: Setup = t.try_into().map_err(|e: toml::de::Error| {
                    SpecError::Invalid(format!("{}: series {}: {e}", self.name, s.label))
                })?;
                setup.validate(&format!("{}: series {}", self.name, s.label))?;
                Ok((s.label.clone(), setup))
            })
            .collect()
    }

    fn validate(&self) -> Result<(), SpecError> {
        let invalid = |m: &str| Err(SpecError::Invalid(format!("{}: {m}", self.name)));
        if self.kind != "cluster" {
            return invalid("kind must be \"cluster\"");
        }
        if self.series.is_empty() {
            return invalid("at least one [[series]]");
        }
        match self.experiment {
            ClusterExperimentKind::Delays => {
                if self.streams_per_interface.is_empty() || self.streams_per_interface.contains(&0)
                {
                    return invalid("delays needs positive streams_per_interface");
                }
                if let Some(x) = &self.summary_x
                    && x != "fetch_kib"
                    && x != "stripe_factor"
                {
                    return invalid("summary_x is \"fetch_kib\" or \"stripe_factor\"");
                }
            }
            ClusterExperimentKind::Capacity | ClusterExperimentKind::Admission => {
                if self.popular_shares.is_empty()
                    || self.popular_shares.iter().any(|p| !(0.0..=1.0).contains(p))
                {
                    return invalid("capacity needs popular_shares within [0, 1]");
                }
            }
        }
        self.setups().map(|_| ())
    }
}

/// One point: a series at one x.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterPoint {
    pub series: String,
    /// Streams per I node (delays) or the popular title's share (capacity).
    pub x: f64,
    pub fetch_kib: f64,
    pub stripe_factor: u32,
    pub replications: usize,
    /// Means over replications of each run's mean components (ms).
    pub mean_ms: Components<f64>,
    /// Means over replications of each run's maximum components (ms).
    pub max_ms: Components<f64>,
    pub mean_total_ci_ms: f64,
    /// Capacity: the largest number of streams supported (0 misses, none
    /// refused), and its CI.
    pub max_streams: Option<f64>,
    pub max_streams_ci: Option<f64>,
    pub misses: u64,
    pub fragments: u64,
    /// Streams admitted and refused, means over replications.
    pub admitted: f64,
    pub refused: f64,
    pub storage_busy_mean: f64,
    pub storage_busy_max: f64,
    pub interface_port_busy_max: f64,
    pub startup_mean_ms: f64,
    pub round_duration_s: f64,
}

/// A cluster experiment's results.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterResult {
    pub name: String,
    pub paper: String,
    pub description: String,
    pub experiment: ClusterExperimentKind,
    pub summary_loads: Vec<u32>,
    pub summary_x: Option<String>,
    pub points: Vec<ClusterPoint>,
}

fn mean_of(outcomes: &[ClusterOutcome], f: impl Fn(&ClusterOutcome) -> f64) -> f64 {
    outcomes.iter().map(f).sum::<f64>() / outcomes.len().max(1) as f64
}

fn components_mean(
    outcomes: &[ClusterOutcome],
    pick: impl Fn(&ClusterOutcome) -> Components<f64>,
) -> Components<f64> {
    let m = |f: fn(&Components<f64>) -> f64| mean_of(outcomes, |o| f(&pick(o)));
    Components {
        network: m(|c| c.network),
        transfer: m(|c| c.transfer),
        seek: m(|c| c.seek),
        rotation: m(|c| c.rotation),
        blocking: m(|c| c.blocking),
        queueing: m(|c| c.queueing),
        total: m(|c| c.total),
    }
}

/// Runs the experiment; `progress(done, total)` after each run.
pub fn run_cluster(
    spec: &ClusterSpec,
    base_seed: u64,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<ClusterResult, SpecError> {
    let setups = spec.setups()?;
    let xs: Vec<f64> = match spec.experiment {
        ClusterExperimentKind::Delays => spec
            .streams_per_interface
            .iter()
            .map(|&n| f64::from(n))
            .collect(),
        ClusterExperimentKind::Capacity | ClusterExperimentKind::Admission => {
            spec.popular_shares.clone()
        }
    };
    let cases: Vec<(usize, f64)> = (0..setups.len())
        .flat_map(|s| xs.iter().map(move |&x| (s, x)))
        .collect();
    let rule = spec.replications.rule();
    let done = std::sync::atomic::AtomicUsize::new(0);
    let total = cases.len() * rule.min_replications;
    let points = cases
        .par_iter()
        .map(|&(s, x)| {
            let (label, setup) = &setups[s];
            let mut outcomes = Vec::new();
            let mut supported = Vec::new();
            while outcomes.len() < rule.max_replications {
                let seed = base_seed + outcomes.len() as u64;
                match spec.experiment {
                    ClusterExperimentKind::Delays => {
                        let population = Population::PerInterface {
                            per_interface: x as u32,
                        };
                        outcomes.push(rondo_sim::cluster::run(&setup.config(population, seed)));
                    }
                    ClusterExperimentKind::Capacity => {
                        let with_total = |total: u32| setup.config(setup.requests(total, x), seed);
                        let (n, outcome) =
                            max_supported(spec.max_streams, setup.interface_nodes, with_total);
                        supported.push(f64::from(n));
                        // The supported total's own run (one stream's if none was).
                        outcomes.push(
                            outcome.unwrap_or_else(|| rondo_sim::cluster::run(&with_total(1))),
                        );
                    }
                    ClusterExperimentKind::Admission => {
                        let population = setup.requests(spec.offered_streams, x);
                        let o = rondo_sim::cluster::run(&setup.config(population, seed));
                        supported.push(f64::from(o.admitted));
                        outcomes.push(o);
                    }
                }
                let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                progress(n, total.max(n));
                let watched: Vec<f64> = if supported.is_empty() {
                    outcomes.iter().map(|o| o.mean_ms.total).collect()
                } else {
                    supported.clone()
                };
                if rule.is_done(&watched) {
                    break;
                }
            }
            let total_est =
                Estimate::of(&outcomes.iter().map(|o| o.mean_ms.total).collect::<Vec<_>>());
            let cap = (!supported.is_empty()).then(|| Estimate::of(&supported));
            let params = setup.stream();
            ClusterPoint {
                series: label.clone(),
                x,
                fetch_kib: params.fetch_bytes as f64 / 1024.0,
                stripe_factor: setup.stripe_factor,
                replications: outcomes.len(),
                mean_ms: components_mean(&outcomes, |o| o.mean_ms),
                max_ms: components_mean(&outcomes, |o| o.max_ms),
                mean_total_ci_ms: total_est.ci_half_width,
                max_streams: cap.map(|e| e.mean),
                max_streams_ci: cap.map(|e| e.ci_half_width),
                misses: outcomes.iter().map(|o| o.misses).sum(),
                admitted: mean_of(&outcomes, |o| f64::from(o.admitted)),
                refused: mean_of(&outcomes, |o| f64::from(o.refused)),
                fragments: outcomes.iter().map(|o| o.fragments).sum(),
                storage_busy_mean: mean_of(&outcomes, |o| o.storage_busy_mean),
                storage_busy_max: mean_of(&outcomes, |o| o.storage_busy_max),
                interface_port_busy_max: mean_of(&outcomes, |o| o.interface_port_busy_max),
                startup_mean_ms: mean_of(&outcomes, |o| o.startup_mean_ms),
                round_duration_s: params.round_duration_ns() as f64 / NS_PER_S as f64,
            }
        })
        .collect();
    Ok(ClusterResult {
        name: spec.name.clone(),
        paper: spec.paper.clone(),
        description: spec.description.clone(),
        experiment: spec.experiment,
        summary_loads: spec.summary_loads.clone(),
        summary_x: spec.summary_x.clone(),
        points,
    })
}

impl ClusterResult {
    fn labels(&self) -> Vec<&str> {
        let mut labels: Vec<&str> = Vec::new();
        for p in &self.points {
            if !labels.contains(&p.series.as_str()) {
                labels.push(&p.series);
            }
        }
        labels
    }

    fn title(&self, what: &str) -> String {
        if self.paper.is_empty() {
            format!("{}: {what}", self.name)
        } else {
            format!("{} ({}): {what}", self.name, self.paper)
        }
    }

    /// Delays: per series, the components stacked (each line the sum of
    /// those below it, the top one R_tot), average and maximum; and the
    /// summaries at `summary_loads`. Capacity: the largest supported
    /// number of streams against the popular share, one line per series.
    pub fn charts(&self) -> Vec<(String, Chart)> {
        let point = |x: f64, y: f64, ci: f64| ChartPoint {
            x,
            y,
            ci_half_width: ci,
        };
        let mut charts = Vec::new();
        if self.experiment != ClusterExperimentKind::Delays {
            let y_label = if self.experiment == ClusterExperimentKind::Capacity {
                "maximum streams supported"
            } else {
                "streams admitted"
            };
            charts.push((
                "plot".to_string(),
                Chart {
                    title: self.title(y_label),
                    x_label: "requests for the popular title (%)".into(),
                    y_label: y_label.into(),
                    series: self
                        .labels()
                        .iter()
                        .map(|&l| {
                            let pts = self
                                .points
                                .iter()
                                .filter(|p| p.series == l)
                                .map(|p| {
                                    point(
                                        100.0 * p.x,
                                        p.max_streams.unwrap_or(0.0),
                                        p.max_streams_ci.unwrap_or(f64::NAN),
                                    )
                                })
                                .collect();
                            (l.to_string(), pts)
                        })
                        .collect(),
                    y_max: None,
                    log_x: Some(false),
                },
            ));
            return charts;
        }
        for (i, &label) in self.labels().iter().enumerate() {
            let pts: Vec<&ClusterPoint> =
                self.points.iter().filter(|p| p.series == label).collect();
            for (stem, what, pick) in [
                (
                    "avg",
                    "average delays",
                    (|p: &ClusterPoint| p.mean_ms) as fn(&ClusterPoint) -> Components<f64>,
                ),
                ("max", "maximum delays", |p: &ClusterPoint| p.max_ms),
            ] {
                let mut series = Vec::new();
                let mut below = vec![0.0; pts.len()];
                let names = pick(pts[0]).labelled().map(|(n, _)| n);
                for (k, name) in names.iter().enumerate() {
                    let line = pts
                        .iter()
                        .enumerate()
                        .map(|(j, p)| {
                            below[j] += pick(p).labelled()[k].1;
                            point(p.x, below[j], f64::NAN)
                        })
                        .collect();
                    let stacked = if k == 0 {
                        name.to_string()
                    } else {
                        format!("+ {name}")
                    };
                    series.push((stacked, line));
                }
                charts.push((
                    format!("plot-{stem}-{}", i + 1),
                    Chart {
                        title: self.title(&format!("{what}, {label}")),
                        x_label: "streams per interface node".into(),
                        y_label: "delay, stacked (ms)".into(),
                        series,
                        y_max: None,
                        log_x: Some(false),
                    },
                ));
            }
        }
        if let Some(x_field) = &self.summary_x {
            for &load in &self.summary_loads {
                let at: Vec<&ClusterPoint> = self
                    .points
                    .iter()
                    .filter(|p| p.x == f64::from(load))
                    .collect();
                if at.is_empty() {
                    continue;
                }
                let x_of = |p: &ClusterPoint| {
                    if x_field == "stripe_factor" {
                        f64::from(p.stripe_factor)
                    } else {
                        p.fetch_kib
                    }
                };
                let line = |f: fn(&ClusterPoint) -> f64| {
                    at.iter().map(|p| point(x_of(p), f(p), f64::NAN)).collect()
                };
                charts.push((
                    format!("plot-summary-{load}"),
                    Chart {
                        title: self
                            .title(&format!("maximum N_Q and S_Q at {load} streams per I node")),
                        x_label: if x_field == "stripe_factor" {
                            "stripe factor S".into()
                        } else {
                            "P_S (KiB)".into()
                        },
                        y_label: "maximum delay (ms)".into(),
                        series: vec![
                            ("N_Q (network blocking)".into(), line(|p| p.max_ms.blocking)),
                            ("S_Q (S node queueing)".into(), line(|p| p.max_ms.queueing)),
                        ],
                        y_max: None,
                        log_x: Some(false),
                    },
                ));
            }
        }
        charts
    }

    pub fn to_csv(&self) -> String {
        let mut out = String::from(
            "series,x,fetch_kib,stripe_factor,replications,round_duration_s,\
             mean_nc_ms,mean_dt_ms,mean_ds_ms,mean_dr_ms,mean_nq_ms,mean_sq_ms,mean_total_ms,\
             max_nc_ms,max_dt_ms,max_ds_ms,max_dr_ms,max_nq_ms,max_sq_ms,max_total_ms,\
             max_streams,max_streams_ci,misses,fragments,admitted,refused,storage_busy_mean,storage_busy_max,\
             interface_port_busy_max,startup_mean_ms\n",
        );
        let opt = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
        for p in &self.points {
            let (a, m) = (p.mean_ms, p.max_ms);
            out.push_str(&format!(
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                p.series,
                p.x,
                p.fetch_kib,
                p.stripe_factor,
                p.replications,
                p.round_duration_s,
                a.network,
                a.transfer,
                a.seek,
                a.rotation,
                a.blocking,
                a.queueing,
                a.total,
                m.network,
                m.transfer,
                m.seek,
                m.rotation,
                m.blocking,
                m.queueing,
                m.total,
                opt(p.max_streams),
                opt(p.max_streams_ci),
                p.misses,
                p.fragments,
                p.admitted,
                p.refused,
                p.storage_busy_mean,
                p.storage_busy_max,
                p.interface_port_busy_max,
                p.startup_mean_ms
            ));
        }
        out
    }

    /// A plain-text table for the terminal.
    pub fn table(&self) -> String {
        let mut out = format!("{} — {}\n", self.name, self.paper);
        if self.experiment != ClusterExperimentKind::Delays {
            out.push_str(if self.experiment == ClusterExperimentKind::Capacity {
                "series | popular share | max streams | late fragments | S busy mean/max | I port max | startup ms\n"
            } else {
                "series | popular share | admitted | late fragments | S busy mean/max | I port max | startup ms\n"
            });
            for p in &self.points {
                out.push_str(&format!(
                    "{} | {:.0}% | {:.1} ± {:.1} | {} of {} | {:.0}%/{:.0}% | {:.0}% | {:.0}\n",
                    p.series,
                    100.0 * p.x,
                    p.max_streams.unwrap_or(0.0),
                    p.max_streams_ci.unwrap_or(f64::NAN),
                    p.misses,
                    p.fragments,
                    100.0 * p.storage_busy_mean,
                    100.0 * p.storage_busy_max,
                    100.0 * p.interface_port_busy_max,
                    p.startup_mean_ms
                ));
            }
            return out;
        }
        out.push_str(
            "series | streams/I | avg N_C D_T D_S D_R N_Q S_Q = R_tot (ms) | max N_Q S_Q R_tot (ms) | misses | S busy mean/max | I port max\n",
        );
        for p in &self.points {
            let (a, m) = (p.mean_ms, p.max_ms);
            out.push_str(&format!(
                "{} | {} | {:.1} {:.1} {:.1} {:.1} {:.1} {:.1} = {:.1} | {:.0} {:.0} {:.0} | {} | {:.0}%/{:.0}% | {:.0}%\n",
                p.series,
                p.x,
                a.network,
                a.transfer,
                a.seek,
                a.rotation,
                a.blocking,
                a.queueing,
                a.total,
                m.blocking,
                m.queueing,
                m.total,
                p.misses,
                100.0 * p.storage_busy_mean,
                100.0 * p.storage_busy_max,
                100.0 * p.interface_port_busy_max
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DELAYS: &str = r#"kind = "cluster"
name = "t"
experiment = "delays"
streams_per_interface = [5, 40]
summary_loads = [40]
summary_x = "fetch_kib"
[base]
interface_nodes = 6
storage_nodes = 35
stripe_factor = 4
play_min_s = 25
play_end_s = 30
[[series]]
label = "40"
fetch_kib = 40
[[series]]
label = "160"
fetch_kib = 160
[replications]
min = 2
max = 2"#;

    #[test]
    fn delays_grow_with_load_and_charts_stack() {
        let spec = ClusterSpec::from_toml(DELAYS, "t").unwrap();
        let r = run_cluster(&spec, 1, &|_, _| {}).unwrap();
        assert_eq!(r, run_cluster(&spec, 1, &|_, _| {}).unwrap());
        let at = |s: &str, x: f64| r.points.iter().find(|p| p.series == s && p.x == x).unwrap();
        for s in ["40", "160"] {
            assert!(at(s, 40.0).mean_ms.total > at(s, 5.0).mean_ms.total);
            assert!(at(s, 40.0).max_ms.total >= at(s, 40.0).mean_ms.total);
        }
        let charts = r.charts();
        // Two series × (avg, max) + one summary.
        assert_eq!(charts.len(), 5);
        let (_, avg) = &charts[0];
        let top = avg.series.last().unwrap().1.last().unwrap().y;
        assert!((top - at("40", 40.0).mean_ms.total).abs() < 1e-6 * top);
        assert_eq!(r.to_csv().lines().count(), 1 + 4);
    }

    #[test]
    fn capacity_finds_a_supported_total_per_share() {
        let text = r#"kind = "cluster"
name = "c"
experiment = "capacity"
popular_shares = [0.0, 0.5]
max_streams = 240
[base]
interface_nodes = 6
storage_nodes = 24
stripe_factor = 4
fetch_kib = 64
play_min_s = 40
play_end_s = 60
ramp_s = 20
[[series]]
label = "RDSS"
retrieval = "rdss"
[[series]]
label = "LDSS"
retrieval = "ldss"
[replications]
min = 1
max = 1"#;
        let spec = ClusterSpec::from_toml(text, "c").unwrap();
        let r = run_cluster(&spec, 1, &|_, _| {}).unwrap();
        let cap = |s: &str, x: f64| {
            r.points
                .iter()
                .find(|p| p.series == s && p.x == x)
                .unwrap()
                .max_streams
                .unwrap()
        };
        assert!(cap("RDSS", 0.0) > 0.0);
        // Half the requests for one title: its four S nodes saturate under
        // RDSS; LDSS serves them from one I node's local disk.
        assert!(cap("RDSS", 0.5) < cap("RDSS", 0.0));
        assert!(cap("LDSS", 0.5) > cap("RDSS", 0.5));
        assert_eq!(r.charts().len(), 1);
    }

    #[test]
    fn bad_files_are_refused_by_name() {
        let bad = DELAYS.replace("stripe_factor = 4", "stripe_factor = 40");
        let err = ClusterSpec::from_toml(&bad, "bad.toml").unwrap_err();
        assert!(err.to_string().contains("stripe_factor"), "{err}");
        let bad = DELAYS.replace("fetch_kib = 40", "fetch_kb = 40");
        let err = ClusterSpec::from_toml(&bad, "bad.toml").unwrap_err();
        assert!(err.to_string().contains("fetch_kb"), "{err}");
        assert!(is_cluster_spec(DELAYS));
    }
}
