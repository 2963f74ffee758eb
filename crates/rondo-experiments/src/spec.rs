//! Experiment definitions as data: a TOML file names a sweep axis, the
//! series to compare, the titles, and overrides of the simulator
//! configuration; this module turns it into one `SimConfig` per point.
//!
//! ```toml
//! name = "seed000-fig6"
//! paper = "seed 000, Figure 6"
//! description = "..."
//! x = "disks"                      # any numeric SimConfig field
//! x_values = [4, 8, 16, 32]
//! metric = "mean_active_streams"   # the plotted result field
//! titles = "table3-mixed"          # or "table3-library:N", or one trace type, e.g. "action"
//! [base]                           # overrides of SimConfig::seed000
//! mode = "admission-only"
//! [[series]]
//! label = "none"
//! scheme = "none"
//! [replications]
//! min = 3
//! max = 10
//! ci_fraction = 0.05
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use rondo_media::synth::{self, TraceKind};
use rondo_media::vbr::VbrParams;
use rondo_model::layout::ReplicaPlacement;
use rondo_model::reservation::Scheme;
use rondo_model::schedule::Schedule;
use rondo_sim::run::{SimConfig, SimTitle};

use crate::stats::StoppingRule;

/// Why an experiment file could not be used.
#[derive(Debug, Error)]
pub enum SpecError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: String,
        source: toml::de::Error,
    },
    #[error("series '{series}', {x} = {value}: {message}")]
    Config {
        series: String,
        x: String,
        value: f64,
        message: String,
    },
    #[error(
        "unknown titles '{0}': not a trace file; use 'table3-mixed', 'table3-library:N', \
         'cbr-library', a trace file, or one of {1}"
    )]
    Titles(String, String),
    #[error("{0}")]
    Invalid(String),
}

/// How many replications to run per point.
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Replications {
    #[serde(default = "default_min")]
    pub min: usize,
    #[serde(default = "default_max")]
    pub max: usize,
    #[serde(default = "default_ci")]
    pub ci_fraction: f64,
}

fn default_min() -> usize {
    3
}
fn default_max() -> usize {
    20
}
fn default_ci() -> f64 {
    0.05
}

impl Default for Replications {
    fn default() -> Self {
        Replications {
            min: default_min(),
            max: default_max(),
            ci_fraction: default_ci(),
        }
    }
}

impl Replications {
    pub fn rule(&self) -> StoppingRule {
        StoppingRule {
            min_replications: self.min,
            max_replications: self.max.max(self.min),
            ci_fraction: self.ci_fraction,
        }
    }
}

/// One line of the plot: a label and its overrides.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Series {
    pub label: String,
    #[serde(flatten)]
    pub overrides: toml::Table,
}

/// An experiment file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentSpec {
    pub name: String,
    #[serde(default)]
    pub paper: String,
    #[serde(default)]
    pub description: String,
    pub x: String,
    pub x_values: Vec<f64>,
    #[serde(default = "default_metric")]
    pub metric: String,
    #[serde(default = "default_titles")]
    pub titles: String,
    /// Seed of the synthetic traces (the titles stay the same across
    /// replications, as seed 000's six clips did).
    #[serde(default = "default_trace_seed")]
    pub trace_seed: u64,
    /// Mean scene length of the VBR traces in ms (default: the generator's).
    #[serde(default)]
    pub trace_mean_scene_ms: Option<u64>,
    /// Within-scene over between-scene log-sd ratio of the VBR traces, in
    /// thousandths (default: the generator's).
    #[serde(default)]
    pub trace_gop_log_sd_ratio_permille: Option<u64>,
    #[serde(default)]
    pub base: toml::Table,
    pub series: Vec<Series>,
    #[serde(default)]
    pub replications: Replications,
    /// Lines the paper states, drawn beside ours: label -> y per x.
    #[serde(default)]
    pub reference: Vec<ReferenceLine>,
    /// A second plot (`plot-against.{png,svg}`): each series' metric
    /// against this numeric result field instead of x (e.g.
    /// `mean_buffer_bytes`: seed 003 Figure 4's throughput against memory).
    #[serde(default)]
    pub plot_against: Option<String>,
}

/// A published value set beside ours.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReferenceLine {
    pub label: String,
    pub x_values: Vec<f64>,
    pub y_values: Vec<f64>,
}

fn default_metric() -> String {
    "mean_active_streams".into()
}
fn default_titles() -> String {
    "table3-mixed".into()
}
fn default_trace_seed() -> u64 {
    1
}

/// How synthetic titles are generated for a point.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TraceOptions {
    pub seed: u64,
    /// Mean scene length of the VBR traces (their correlation over time,
    /// which seed 000 does not give); `None` is the generator's default.
    pub mean_scene_ms: Option<u64>,
    /// The VBR traces' ratio of GOP-to-GOP variation within a scene to the
    /// variation between scenes (log-sd ratio), in thousandths: how much of
    /// the per-round variation is short-term, another side of their
    /// correlation over time; `None` is the generator's default.
    pub gop_log_sd_ratio_permille: Option<u64>,
    /// The `cbr-library` titles' display rate in kbit/s (1000 bit/s).
    pub cbr_rate_kbps: Option<u64>,
    /// How many titles the `cbr-library` holds.
    pub cbr_titles: Option<u64>,
}

/// Seed 003's workload: "a video library that holds videos that are 90 to
/// 120 minutes long", CBR streams. The display rate is not given (it is
/// swept); the library's size is not given either (assumption: 20 titles,
/// enough for Zipf popularity to matter; docs/assumptions.md).
pub const CBR_TITLES_DEFAULT: u64 = 20;
/// The worked example's display rate (seed 003: "2 megabits per second").
pub const CBR_RATE_KBPS_DEFAULT: u64 = 2000;

/// The `cbr-library` titles: `count` constant-bit-rate titles whose lengths
/// step evenly from 90 to 120 minutes (seed 003), `rate_kbps`·T/8 bytes per
/// round (the remainder of a fractional byte carried to the next round).
pub fn cbr_library(
    rate_kbps: u64,
    count: u64,
    round_duration_ns: u64,
    block_bytes: u64,
) -> Result<Vec<SimTitle>, SpecError> {
    if rate_kbps == 0 || count == 0 {
        return Err(SpecError::Invalid(
            "cbr-library needs a positive cbr_rate_kbps and cbr_titles".into(),
        ));
    }
    const NS_PER_S: u128 = 1_000_000_000;
    (0..count)
        .map(|j| {
            // 90 minutes plus an even share of 30 (the last title 120).
            let seconds = 90 * 60 + (30 * 60 * j) / (count - 1).max(1);
            let rounds = (seconds as u128 * NS_PER_S).div_ceil(round_duration_ns as u128);
            // Bits sent by the end of round i: rate·(i + 1)·T, whole bytes.
            let bytes_by = |i: u128| {
                rate_kbps as u128 * 1000 * (i * round_duration_ns as u128) / (8 * NS_PER_S)
            };
            let client_bytes: Vec<u64> = (0..rounds)
                .map(|i| (bytes_by(i + 1) - bytes_by(i)) as u64)
                .collect();
            let schedule =
                Schedule::from_client_bytes(client_bytes, round_duration_ns, block_bytes)
                    .map_err(|e| SpecError::Invalid(format!("cbr-library: {e}")))?;
            Ok(SimTitle {
                name: format!("cbr-{rate_kbps}k-{}min", seconds / 60),
                schedule,
            })
        })
        .collect()
}

/// Keys an experiment may set that describe the titles rather than the
/// simulator (in `[base]`, a series, or as the swept `x`).
const TITLE_KEYS: [&str; 6] = [
    "titles",
    "trace_seed",
    "trace_mean_scene_ms",
    "trace_gop_log_sd_ratio_permille",
    "cbr_rate_kbps",
    "cbr_titles",
];

/// One point of the sweep: a series at one x.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub series: String,
    /// The swept field's name and value.
    pub x_name: String,
    pub x: f64,
    pub config: SimConfig,
    pub titles: String,
    pub trace: TraceOptions,
}

impl ExperimentSpec {
    pub fn from_file(path: &Path) -> Result<ExperimentSpec, SpecError> {
        let text = std::fs::read_to_string(path).map_err(|source| SpecError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml(&text, &path.display().to_string())
    }

    pub fn from_toml(text: &str, origin: &str) -> Result<ExperimentSpec, SpecError> {
        let spec: ExperimentSpec = toml::from_str(text).map_err(|source| SpecError::Parse {
            path: origin.to_string(),
            source,
        })?;
        if spec.series.is_empty() || spec.x_values.is_empty() {
            return Err(SpecError::Invalid(format!(
                "{origin}: an experiment needs at least one series and one x value"
            )));
        }
        // Build every point now so a bad field is reported before any run.
        spec.points()?;
        Ok(spec)
    }

    /// Every (series, x) point with its full configuration.
    pub fn points(&self) -> Result<Vec<Point>, SpecError> {
        let mut points = Vec::new();
        for series in &self.series {
            for &x in &self.x_values {
                let err = |message: String| SpecError::Config {
                    series: series.label.clone(),
                    x: self.x.clone(),
                    value: x,
                    message,
                };
                let mut table = toml::Table::try_from(SimConfig::seed000(
                    8,
                    Scheme::None,
                    ReplicaPlacement::Deterministic,
                ))
                .map_err(|e| err(e.to_string()))?;
                let mut titles = self.titles.clone();
                let mut trace = TraceOptions {
                    seed: self.trace_seed,
                    mean_scene_ms: self.trace_mean_scene_ms,
                    gop_log_sd_ratio_permille: self.trace_gop_log_sd_ratio_permille,
                    cbr_rate_kbps: None,
                    cbr_titles: None,
                };
                let x_value = if x.fract() == 0.0 {
                    toml::Value::Integer(x as i64)
                } else {
                    toml::Value::Float(x)
                };
                let x_entry = (&self.x, &x_value);
                let entries = self
                    .base
                    .iter()
                    .chain(series.overrides.iter())
                    .chain([x_entry]);
                for (key, value) in entries {
                    if !TITLE_KEYS.contains(&key.as_str()) {
                        table.insert(key.clone(), value.clone());
                        continue;
                    }
                    match key.as_str() {
                        "titles" => {
                            titles = value
                                .as_str()
                                .ok_or_else(|| err("titles must be a string".into()))?
                                .to_string();
                        }
                        _ => {
                            let n = value
                                .as_integer()
                                .filter(|&n| n >= 0)
                                .ok_or_else(|| err(format!("{key} must be a whole number")))?
                                as u64;
                            match key.as_str() {
                                "trace_seed" => trace.seed = n,
                                "trace_mean_scene_ms" => trace.mean_scene_ms = Some(n),
                                "cbr_rate_kbps" => trace.cbr_rate_kbps = Some(n),
                                "cbr_titles" => trace.cbr_titles = Some(n),
                                _ => trace.gop_log_sd_ratio_permille = Some(n),
                            }
                        }
                    }
                }
                let config: SimConfig = table
                    .try_into()
                    .map_err(|e: toml::de::Error| err(e.message().to_string()))?;
                titles_with(&titles, trace, &config)?;
                points.push(Point {
                    series: series.label.clone(),
                    x_name: self.x.clone(),
                    x,
                    config,
                    titles,
                    trace,
                });
            }
        }
        Ok(points)
    }
}

impl ExperimentSpec {
    /// Plans and places every point's titles once (no rounds run), so a
    /// configuration that cannot hold its titles fails before anything runs.
    pub fn check_layouts(&self) -> Result<(), SpecError> {
        for p in self.points()? {
            let titles = titles_with(&p.titles, p.trace, &p.config)?;
            rondo_sim::run::prepare(&p.config, &titles).map_err(|e| SpecError::Config {
                series: p.series.clone(),
                x: p.x_name.clone(),
                value: p.x,
                message: e.to_string(),
            })?;
        }
        Ok(())
    }
}

/// The `kind` an experiment file declares (`"jukebox"`, `"cycle"`), if
/// any; simulator experiments have none.
pub fn spec_kind(text: &str) -> Option<String> {
    toml::from_str::<toml::Table>(text)
        .ok()
        .and_then(|t| t.get("kind").and_then(|k| k.as_str().map(str::to_owned)))
}

/// Parses an experiment file of any kind; `origin` names it in errors.
pub fn parse_toml<T: serde::de::DeserializeOwned>(
    text: &str,
    origin: &str,
) -> Result<T, SpecError> {
    toml::from_str(text).map_err(|source| SpecError::Parse {
        path: origin.to_string(),
        source,
    })
}

/// Seed 000's six Table 3 content types (the synthetic VBR kinds), in order.
fn table3_kinds() -> Vec<TraceKind> {
    synth::known_kinds()
        .iter()
        .copied()
        .filter(|k| matches!(k, TraceKind::Vbr(_)))
        .collect()
}

/// The titles an experiment names: a comma-separated list whose items are
/// `table3-mixed` (seed 000's six types, submitted round-robin),
/// `table3-library:N` (N titles of those types in turn), a trace type
/// (`rondo trace generate --help`), or the path of a trace file
/// (`rondo trace generate --out`).
pub fn titles_for(
    name: &str,
    trace_seed: u64,
    config: &SimConfig,
) -> Result<Vec<SimTitle>, SpecError> {
    titles_with(
        name,
        TraceOptions {
            seed: trace_seed,
            mean_scene_ms: None,
            gop_log_sd_ratio_permille: None,
            cbr_rate_kbps: None,
            cbr_titles: None,
        },
        config,
    )
}

/// [`titles_for`] with every trace option.
pub fn titles_with(
    name: &str,
    trace: TraceOptions,
    config: &SimConfig,
) -> Result<Vec<SimTitle>, SpecError> {
    let generate = |kind: TraceKind| -> Result<Vec<rondo_model::schedule::Frame>, SpecError> {
        let custom = trace.mean_scene_ms.is_some() || trace.gop_log_sd_ratio_permille.is_some();
        match kind {
            TraceKind::Vbr(content) if custom => Ok({
                let mut params = VbrParams::for_content(content);
                if let Some(ms) = trace.mean_scene_ms {
                    params = params.with_mean_scene_duration_ns(ms * 1_000_000);
                }
                if let Some(permille) = trace.gop_log_sd_ratio_permille {
                    params.gop_log_sd_ratio = permille as f64 / 1000.0;
                }
                params
            }
            .generate(trace.seed)
            .map_err(|e| SpecError::Invalid(format!("{}: {e}", kind.name())))?
            .into_frames()),
            _ => Ok(synth::generate(kind, trace.seed)),
        }
    };
    let mut titles = Vec::new();
    for item in name.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if item == "cbr-library" {
            titles.extend(cbr_library(
                trace.cbr_rate_kbps.unwrap_or(CBR_RATE_KBPS_DEFAULT),
                trace.cbr_titles.unwrap_or(CBR_TITLES_DEFAULT),
                config.round_duration_ns,
                config.block_bytes,
            )?);
            continue;
        }
        let library = item
            .strip_prefix("table3-library:")
            .map(|n| {
                n.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| {
                    SpecError::Invalid(format!(
                        "'{item}': table3-library:N needs a title count N ≥ 1"
                    ))
                })
            })
            .transpose()?;
        if let Some(n) = library {
            // A library of n titles: seed 000's six types in turn, the k-th
            // of a type from trace seed `seed + k` (the first six are
            // table3-mixed's titles).
            let kinds = table3_kinds();
            for i in 0..n {
                let (kind, k) = (kinds[i % kinds.len()], (i / kinds.len()) as u64);
                let options = TraceOptions {
                    seed: trace.seed + k,
                    ..trace
                };
                let mut title = titles_with(kind.name(), options, config)?
                    .pop()
                    .expect("one title per trace type");
                title.name = format!("{}-{k}", kind.name());
                titles.push(title);
            }
            continue;
        }
        let traces: Vec<(String, Vec<rondo_model::schedule::Frame>)> = if item == "table3-mixed" {
            table3_kinds()
                .into_iter()
                .map(|k| Ok((k.name().to_string(), generate(k)?)))
                .collect::<Result<_, SpecError>>()?
        } else if let Some(kind) = TraceKind::from_name(item) {
            vec![(kind.name().to_string(), generate(kind)?)]
        } else if Path::new(item).is_file() {
            let bytes = std::fs::read(item).map_err(|source| SpecError::Read {
                path: item.to_string(),
                source,
            })?;
            let trace = rondo_media::parse_trace_bytes(&bytes)
                .map_err(|e| SpecError::Invalid(format!("{item}: {e}")))?;
            vec![(item.to_string(), trace.into_frames())]
        } else {
            return Err(SpecError::Titles(
                item.to_string(),
                synth::known_kind_names().join(", "),
            ));
        };
        for (title, frames) in traces {
            let schedule =
                Schedule::from_frames(&frames, config.round_duration_ns, config.block_bytes)
                    .map_err(|e| SpecError::Invalid(format!("{title}: {e}")))?;
            titles.push(SimTitle {
                name: title,
                schedule,
            });
        }
    }
    if titles.is_empty() {
        return Err(SpecError::Invalid("no titles named".into()));
    }
    Ok(titles)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SWEEP: &str = r#"
name = "scenes"
x = "trace_mean_scene_ms"
x_values = [1000, 20000]
titles = "action"
[[series]]
label = "none"
scheme = "none"
trace_seed = 7
"#;

    #[test]
    fn scene_length_and_trace_seed_are_title_options_not_simulator_fields() {
        let spec = ExperimentSpec::from_toml(SWEEP, "test").unwrap();
        let points = spec.points().unwrap();
        assert_eq!(points.len(), 2);
        assert_eq!(
            points[0].trace,
            TraceOptions {
                seed: 7,
                mean_scene_ms: Some(1000),
                gop_log_sd_ratio_permille: None,
                cbr_rate_kbps: None,
                cbr_titles: None,
            }
        );
        assert_eq!(points[1].trace.mean_scene_ms, Some(20000));
        let short = titles_with("action", points[0].trace, &points[0].config).unwrap();
        let long = titles_with("action", points[1].trace, &points[1].config).unwrap();
        // Same content type and calibration, different correlation over time.
        assert_ne!(
            short[0].schedule.client_bytes,
            long[0].schedule.client_bytes
        );
        let mean = |t: &SimTitle| t.schedule.client_stats().mean_bytes_per_round;
        assert!((mean(&short[0]) / mean(&long[0]) - 1.0).abs() < 0.02);
    }

    #[test]
    fn a_bad_title_option_is_named() {
        let bad = SWEEP.replace("trace_seed = 7", "trace_seed = \"seven\"");
        let err = ExperimentSpec::from_toml(&bad, "test")
            .unwrap_err()
            .to_string();
        assert!(err.contains("trace_seed must be a whole number"), "{err}");
    }

    #[test]
    fn the_within_scene_variation_is_a_title_option_that_keeps_mean_and_cov() {
        let spec = ExperimentSpec::from_toml(
            &SWEEP.replace("trace_mean_scene_ms", "trace_gop_log_sd_ratio_permille"),
            "test",
        )
        .unwrap();
        let points = spec.points().unwrap();
        assert_eq!(points[0].trace.gop_log_sd_ratio_permille, Some(1000));
        assert_eq!(points[0].trace.mean_scene_ms, None);
        let a = titles_with("action", points[0].trace, &points[0].config).unwrap();
        let b = titles_with("action", points[1].trace, &points[1].config).unwrap();
        assert_ne!(a[0].schedule.client_bytes, b[0].schedule.client_bytes);
        for t in [&a[0], &b[0]] {
            let stats = t.schedule.client_stats();
            assert!((stats.mean_bytes_per_round / 624_194.0 - 1.0).abs() < 0.01);
        }
    }

    /// Seed 003's library: CBR titles of 90 to 120 minutes at the display
    /// rate, every round's bytes the rate's share (whole bytes, none lost).
    #[test]
    fn the_cbr_library_holds_90_to_120_minute_titles_at_the_display_rate() {
        let titles = cbr_library(2000, 4, 333_333_333, 16 * 1024).unwrap();
        let minutes: Vec<&str> = titles.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            minutes,
            [
                "cbr-2000k-90min",
                "cbr-2000k-100min",
                "cbr-2000k-110min",
                "cbr-2000k-120min"
            ]
        );
        for (t, seconds) in titles.iter().zip([5400u64, 6000, 6600, 7200]) {
            let rounds = t.schedule.rounds() as u64;
            assert_eq!(rounds, (seconds * 1_000_000_000).div_ceil(333_333_333));
            let total: u64 = t.schedule.client_bytes.iter().sum();
            // 2 Mbit/s over the rounds' length, to the byte.
            let expected = 2_000_000u128 * (rounds as u128 * 333_333_333) / 8_000_000_000;
            assert_eq!(total as u128, expected);
            let (lo, hi) = (
                t.schedule.client_bytes.iter().min().unwrap(),
                t.schedule.client_bytes.iter().max().unwrap(),
            );
            assert!(hi - lo <= 1, "{lo}..{hi}");
        }
        assert!(cbr_library(0, 4, 1_000_000_000, 16 * 1024).is_err());
        let spec = ExperimentSpec::from_toml(
            r#"
name = "cbr"
x = "cbr_rate_kbps"
x_values = [1000, 4000]
titles = "cbr-library"
cbr_titles = 3
[[series]]
label = "sweep"
"#,
            "test",
        );
        // `cbr_titles` belongs in [base] or a series, not at the top.
        assert!(spec.is_err());
        let spec = ExperimentSpec::from_toml(
            r#"
name = "cbr"
x = "cbr_rate_kbps"
x_values = [1000, 4000]
titles = "cbr-library"
[base]
cbr_titles = 3
[[series]]
label = "sweep"
"#,
            "test",
        )
        .unwrap();
        let points = spec.points().unwrap();
        let titles = titles_with(&points[1].titles, points[1].trace, &points[1].config).unwrap();
        assert_eq!(titles.len(), 3);
        assert_eq!(titles[0].schedule.client_bytes[0], 500_000);
    }

    #[test]
    fn a_library_cycles_the_six_types_each_title_from_its_own_trace_seed() {
        let config = SimConfig::seed000(8, Scheme::None, ReplicaPlacement::Deterministic);
        let mixed = titles_for("table3-mixed", 1, &config).unwrap();
        let library = titles_for("table3-library:13", 1, &config).unwrap();
        assert_eq!(library.len(), 13);
        // The first six are table3-mixed's titles.
        for (a, b) in mixed.iter().zip(&library) {
            assert_eq!(a.schedule.client_bytes, b.schedule.client_bytes);
        }
        // The seventh is the first type again, from the next trace seed.
        assert_ne!(
            library[6].schedule.client_bytes,
            library[0].schedule.client_bytes
        );
        let mut names: Vec<&str> = library.iter().map(|t| t.name.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 13, "every title has its own name");
        for bad in ["table3-library:0", "table3-library:many", "table3-library:"] {
            let err = titles_for(bad, 1, &config).unwrap_err().to_string();
            assert!(err.contains("table3-library:N"), "{bad}: {err}");
        }
    }
}
