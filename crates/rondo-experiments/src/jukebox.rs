//! Seed 002's experiments on the jukebox model (`rondo_model::tier::jukebox`):
//! response time against the stripe factor (its Fig. 4, from the closed
//! form), and what the paper only states, contention: mean and 95th
//! percentile response time against the request rate for several stripe
//! factors, from seeded Poisson arrivals replicated until the confidence
//! interval of the mean is tight.
//!
//! ```toml
//! kind = "jukebox"
//! name = "seed002-contention"
//! paper = "seed 002, §4"
//! description = "..."
//! experiment = "contention"        # or "response-vs-sf"
//! jukeboxes = 4
//! sf_values = [1, 2, 4, 8]
//! file_mb = [500]                  # file sizes (contention: min and max, uniform)
//! rates_per_hour = [20, 40, 60]    # contention only
//! files = 200                      # the library, contention only
//! requests = 2000                  # per replication, after the warm-up
//! warmup_requests = 200
//! [replications]
//! min = 5
//! max = 30
//! ci_fraction = 0.05
//! ```

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use rondo_model::layout::rng::SplitMix64;
use rondo_model::tier::jukebox::{
    DiscId, JukeboxFarm, JukeboxParams, optimal_stripe_factor, response_time_ns,
};
use rondo_model::units::NS_PER_S;

use crate::plot::{Chart, ChartPoint};
use crate::spec::{Replications, SpecError};
use crate::stats::Estimate;

const MB: u64 = 1_000_000;
const NS_PER_HOUR: f64 = 3600.0 * NS_PER_S as f64;

/// Which of seed 002's experiments.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JukeboxExperimentKind {
    /// Fig. 4: T(SF) for each file size, one idle jukebox (or `jukeboxes`).
    ResponseVsSf,
    /// Mean and 95th-percentile response time against request rate.
    Contention,
}

/// A jukebox experiment file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JukeboxSpec {
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub paper: String,
    #[serde(default)]
    pub description: String,
    pub experiment: JukeboxExperimentKind,
    #[serde(default = "one")]
    pub jukeboxes: u32,
    pub sf_values: Vec<u32>,
    /// File sizes in MB (10^6 bytes); contention draws uniformly between
    /// the first and the last.
    pub file_mb: Vec<u64>,
    #[serde(default)]
    pub rates_per_hour: Vec<f64>,
    #[serde(default = "default_files")]
    pub files: u64,
    #[serde(default = "default_requests")]
    pub requests: usize,
    #[serde(default = "default_warmup")]
    pub warmup_requests: usize,
    #[serde(default)]
    pub replications: Replications,
    /// The plots' y axis top in seconds (saturated points run off it).
    #[serde(default)]
    pub plot_y_max_s: Option<f64>,
}

fn one() -> u32 {
    1
}
fn default_files() -> u64 {
    200
}
fn default_requests() -> usize {
    2000
}
fn default_warmup() -> usize {
    200
}

/// Whether a TOML experiment file is a jukebox experiment (`kind = "jukebox"`).
pub fn is_jukebox_spec(text: &str) -> bool {
    crate::spec::spec_kind(text).is_some_and(|k| k == "jukebox")
}

impl JukeboxSpec {
    pub fn from_toml(text: &str, origin: &str) -> Result<JukeboxSpec, SpecError> {
        let spec: JukeboxSpec = crate::spec::parse_toml(text, origin)?;
        spec.validate()?;
        Ok(spec)
    }

    fn validate(&self) -> Result<(), SpecError> {
        let invalid = |m: &str| Err(SpecError::Invalid(format!("{}: {m}", self.name)));
        if self.kind != "jukebox" {
            return invalid("kind must be \"jukebox\"");
        }
        if self.jukeboxes == 0 || self.sf_values.is_empty() || self.sf_values.contains(&0) {
            return invalid("jukeboxes and every stripe factor must be at least 1");
        }
        if self.file_mb.is_empty() || self.file_mb.contains(&0) {
            return invalid("file_mb needs positive sizes");
        }
        if self.experiment == JukeboxExperimentKind::Contention {
            if self.rates_per_hour.is_empty() || self.rates_per_hour.iter().any(|&r| r <= 0.0) {
                return invalid("contention needs positive rates_per_hour");
            }
            if self.files == 0 || self.requests == 0 {
                return invalid("contention needs files and requests");
            }
        }
        Ok(())
    }
}

/// One point of a jukebox experiment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JukeboxPoint {
    pub series: String,
    pub stripe_factor: u32,
    /// The x axis: SF (response-vs-sf) or requests per hour (contention).
    pub x: f64,
    pub file_mb: u64,
    pub replications: usize,
    pub mean_response_s: f64,
    pub mean_ci_half_width_s: f64,
    /// Mean over replications of each one's 95th percentile.
    pub p95_response_s: f64,
    pub p95_ci_half_width_s: f64,
    /// Share of the measured span the arms spent exchanging, averaged over
    /// the jukeboxes.
    pub arm_utilisation: f64,
}

/// A jukebox experiment's results.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JukeboxResult {
    pub name: String,
    pub paper: String,
    pub description: String,
    pub experiment: JukeboxExperimentKind,
    pub plot_y_max_s: Option<f64>,
    /// SF_opt of each file size (seed 002's formula).
    pub optimal_stripe_factors: Vec<(u64, u32)>,
    pub points: Vec<JukeboxPoint>,
}

impl JukeboxResult {
    /// The mean response time chart, and for contention also the 95th
    /// percentile's.
    pub fn charts(&self) -> Vec<(String, Chart)> {
        let title = if self.paper.is_empty() {
            self.name.clone()
        } else {
            format!("{} ({})", self.name, self.paper)
        };
        let x_label = match self.experiment {
            JukeboxExperimentKind::ResponseVsSf => "stripe factor SF",
            JukeboxExperimentKind::Contention => "requests per hour",
        };
        let mut labels: Vec<&str> = Vec::new();
        for p in &self.points {
            if !labels.contains(&p.series.as_str()) {
                labels.push(&p.series);
            }
        }
        let chart = |y_label: &str, value: fn(&JukeboxPoint) -> (f64, f64)| Chart {
            title: title.clone(),
            x_label: x_label.to_string(),
            y_label: y_label.to_string(),
            series: labels
                .iter()
                .map(|&label| {
                    let points = self
                        .points
                        .iter()
                        .filter(|p| p.series == label)
                        .map(|p| {
                            let (y, ci) = value(p);
                            ChartPoint {
                                x: p.x,
                                y,
                                ci_half_width: ci,
                            }
                        })
                        .collect();
                    (label.to_string(), points)
                })
                .collect(),
            y_max: self.plot_y_max_s,
            log_x: Some(false),
        };
        let mut charts = vec![(
            "plot".to_string(),
            chart("mean response time (s)", |p| {
                (p.mean_response_s, p.mean_ci_half_width_s)
            }),
        )];
        if self.experiment == JukeboxExperimentKind::Contention {
            charts.push((
                "plot-p95".to_string(),
                chart("95th-percentile response time (s)", |p| {
                    (p.p95_response_s, p.p95_ci_half_width_s)
                }),
            ));
        }
        charts
    }

    pub fn to_csv(&self) -> String {
        let mut out = String::from(
            "series,stripe_factor,x,file_mb,replications,mean_response_s,mean_ci_half_width_s,\
             p95_response_s,p95_ci_half_width_s,arm_utilisation\n",
        );
        for p in &self.points {
            out.push_str(&format!(
                "{},{},{},{},{},{},{},{},{},{}\n",
                p.series,
                p.stripe_factor,
                p.x,
                p.file_mb,
                p.replications,
                p.mean_response_s,
                p.mean_ci_half_width_s,
                p.p95_response_s,
                p.p95_ci_half_width_s,
                p.arm_utilisation
            ));
        }
        out
    }
}

/// Runs the experiment; `progress(done, total)` after each replication.
pub fn run_jukebox(
    spec: &JukeboxSpec,
    base_seed: u64,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> JukeboxResult {
    let params = JukeboxParams::nsm_satellite();
    let optimal_stripe_factors = spec
        .file_mb
        .iter()
        .map(|&mb| (mb, optimal_stripe_factor(&params, mb * MB)))
        .collect();
    let points = match spec.experiment {
        JukeboxExperimentKind::ResponseVsSf => response_vs_sf(spec, &params),
        JukeboxExperimentKind::Contention => contention(spec, &params, base_seed, progress),
    };
    JukeboxResult {
        name: spec.name.clone(),
        paper: spec.paper.clone(),
        description: spec.description.clone(),
        experiment: spec.experiment,
        plot_y_max_s: spec.plot_y_max_s,
        optimal_stripe_factors,
        points,
    }
}

/// Fig. 4: the closed form, one line per file size.
fn response_vs_sf(spec: &JukeboxSpec, params: &JukeboxParams) -> Vec<JukeboxPoint> {
    let mut points = Vec::new();
    for &mb in &spec.file_mb {
        for &sf in &spec.sf_values {
            let t = response_time_ns(params, mb * MB, sf, spec.jukeboxes) as f64 / NS_PER_S as f64;
            points.push(JukeboxPoint {
                series: format!("{mb} MB"),
                stripe_factor: sf,
                x: f64::from(sf),
                file_mb: mb,
                replications: 1,
                mean_response_s: t,
                mean_ci_half_width_s: f64::NAN,
                p95_response_s: t,
                p95_ci_half_width_s: f64::NAN,
                arm_utilisation: 0.0,
            });
        }
    }
    points
}

/// One replication: mean and 95th-percentile response time (s) of the
/// requests after the warm-up, and the busiest arm's utilisation.
fn replicate(
    spec: &JukeboxSpec,
    params: &JukeboxParams,
    sf: u32,
    rate_per_hour: f64,
    seed: u64,
) -> (f64, f64, f64) {
    let mut rng = SplitMix64::new(seed);
    let mut farm = JukeboxFarm::new(*params, spec.jukeboxes);
    let (min_mb, max_mb) = (
        *spec.file_mb.first().expect("validated"),
        *spec.file_mb.last().expect("validated"),
    );
    // File f of the library is striped over discs f·SF .. f·SF + SF − 1,
    // numbered round-robin over the jukeboxes; discs are reused once the
    // slots run out (a disc holds extent files of several files).
    let discs = u64::from(spec.jukeboxes) * u64::from(params.slots);
    let disc = |g: u64| {
        let g = g % discs;
        DiscId {
            jukebox: (g % u64::from(spec.jukeboxes)) as u32,
            slot: (g / u64::from(spec.jukeboxes)) as u32,
        }
    };
    let mut now_ns = 0.0f64;
    let mean_gap_ns = NS_PER_HOUR / rate_per_hour;
    let mut responses = Vec::with_capacity(spec.requests);
    let mut exchanges = 0u64;
    let mut first_measured_ns = None;
    let mut last_done_ns = 0;
    for n in 0..spec.warmup_requests + spec.requests {
        // Exponential gaps: −ln(U)·mean, U in (0, 1].
        let u = ((rng.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64;
        now_ns += -u.ln() * mean_gap_ns;
        let arrival_ns = now_ns as u64;
        let file = rng.next_below(spec.files);
        let bytes = (min_mb + rng.next_below(max_mb - min_mb + 1)) * MB;
        let per_disc = bytes.div_ceil(u64::from(sf));
        let extents: Vec<(DiscId, u64)> = (0..u64::from(sf))
            .map(|i| (disc(file * u64::from(sf) + i), per_disc))
            .collect();
        let served = farm.submit(arrival_ns, &extents);
        if n >= spec.warmup_requests {
            first_measured_ns.get_or_insert(arrival_ns);
            responses.push((served.done_ns - arrival_ns) as f64 / NS_PER_S as f64);
            exchanges += u64::from(served.exchanges);
            last_done_ns = last_done_ns.max(served.done_ns);
        }
    }
    let mean = responses.iter().sum::<f64>() / responses.len() as f64;
    responses.sort_by(f64::total_cmp);
    let p95 =
        responses[((responses.len() as f64 * 0.95).ceil() as usize).clamp(1, responses.len()) - 1];
    let span_ns = last_done_ns
        .saturating_sub(first_measured_ns.unwrap_or(0))
        .max(1);
    let arm =
        (exchanges * params.exchange_ns) as f64 / (span_ns as f64 * f64::from(spec.jukeboxes));
    (mean, p95, arm.min(1.0))
}

fn contention(
    spec: &JukeboxSpec,
    params: &JukeboxParams,
    base_seed: u64,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Vec<JukeboxPoint> {
    let rule = spec.replications.rule();
    let cases: Vec<(u32, f64)> = spec
        .sf_values
        .iter()
        .flat_map(|&sf| spec.rates_per_hour.iter().map(move |&r| (sf, r)))
        .collect();
    let done = std::sync::atomic::AtomicUsize::new(0);
    let total = cases.len() * rule.min_replications;
    cases
        .par_iter()
        .map(|&(sf, rate)| {
            let mut runs = Vec::new();
            while runs.len() < rule.max_replications {
                runs.push(replicate(
                    spec,
                    params,
                    sf,
                    rate,
                    base_seed + runs.len() as u64,
                ));
                let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                progress(n, total.max(n));
                let means: Vec<f64> = runs.iter().map(|r| r.0).collect();
                if rule.is_done(&means) {
                    break;
                }
            }
            let mean = Estimate::of(&runs.iter().map(|r| r.0).collect::<Vec<_>>());
            let p95 = Estimate::of(&runs.iter().map(|r| r.1).collect::<Vec<_>>());
            let arm = runs.iter().map(|r| r.2).sum::<f64>() / runs.len() as f64;
            JukeboxPoint {
                series: format!("SF = {sf}"),
                stripe_factor: sf,
                x: rate,
                file_mb: spec.file_mb[0],
                replications: runs.len(),
                mean_response_s: mean.mean,
                mean_ci_half_width_s: mean.ci_half_width,
                p95_response_s: p95.mean,
                p95_ci_half_width_s: p95.ci_half_width,
                arm_utilisation: arm,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> JukeboxSpec {
        JukeboxSpec::from_toml(text, "test").unwrap()
    }

    #[test]
    fn response_vs_sf_is_the_closed_form_and_finds_sf_opt() {
        let s = spec(
            r#"kind = "jukebox"
name = "t"
experiment = "response-vs-sf"
sf_values = [1, 2, 3, 4, 5, 6, 8]
file_mb = [10, 500]"#,
        );
        let r = run_jukebox(&s, 1, &|_, _| {});
        assert_eq!(r.optimal_stripe_factors, vec![(10, 1), (500, 4)]);
        let at = |mb: u64, sf: u32| {
            r.points
                .iter()
                .find(|p| p.file_mb == mb && p.stripe_factor == sf)
                .unwrap()
                .mean_response_s
        };
        assert!((at(500, 1) - 184.0).abs() < 0.02 * 184.0);
        assert!((at(500, 4) - 85.0).abs() < 0.02 * 85.0);
        let best = [1, 2, 3, 4, 5, 6, 8]
            .into_iter()
            .min_by(|&a, &b| at(500, a).total_cmp(&at(500, b)))
            .unwrap();
        assert_eq!(best, 4);
        assert!(at(10, 1) < at(10, 2), "a small file gains nothing");
    }

    #[test]
    fn contention_grows_with_the_rate_and_is_reproducible() {
        let text = r#"kind = "jukebox"
name = "t"
experiment = "contention"
jukeboxes = 4
sf_values = [1, 4]
file_mb = [500]
rates_per_hour = [5, 60]
files = 100
requests = 200
warmup_requests = 20
[replications]
min = 3
max = 3"#;
        let s = spec(text);
        let a = run_jukebox(&s, 7, &|_, _| {});
        assert_eq!(a, run_jukebox(&s, 7, &|_, _| {}));
        let at = |sf: u32, rate: f64| {
            a.points
                .iter()
                .find(|p| p.stripe_factor == sf && p.x == rate)
                .unwrap()
                .clone()
        };
        for sf in [1, 4] {
            assert!(at(sf, 60.0).mean_response_s > at(sf, 5.0).mean_response_s);
            assert!(at(sf, 5.0).p95_response_s >= at(sf, 5.0).mean_response_s);
        }
        // At a light load striping over four jukeboxes pays, as on an idle
        // system (59 s against 184 s, plus a little queueing).
        assert!(at(4, 5.0).mean_response_s < at(1, 5.0).mean_response_s);
        let csv = a.to_csv();
        assert_eq!(csv.lines().count(), 1 + 4);
        assert_eq!(a.charts().len(), 2);
    }

    #[test]
    fn bad_files_are_refused_by_name() {
        let err = JukeboxSpec::from_toml(
            r#"kind = "jukebox"
name = "t"
experiment = "contention"
sf_values = [0]
file_mb = [500]"#,
            "bad.toml",
        )
        .unwrap_err();
        assert!(err.to_string().contains("stripe factor"), "{err}");
        assert!(is_jukebox_spec("kind = \"jukebox\"\nname = \"x\""));
        assert!(!is_jukebox_spec("name = \"seed000-fig6\""));
    }
}
