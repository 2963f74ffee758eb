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
//! titles = "table3-mixed"          # or one trace type, e.g. "action"
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
        "unknown titles '{0}': not a trace file; use 'table3-mixed', a trace file, or one of {1}"
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
    #[serde(default)]
    pub base: toml::Table,
    pub series: Vec<Series>,
    #[serde(default)]
    pub replications: Replications,
    /// Lines the paper states, drawn beside ours: label -> y per x.
    #[serde(default)]
    pub reference: Vec<ReferenceLine>,
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

/// One point of the sweep: a series at one x.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub series: String,
    /// The swept field's name and value.
    pub x_name: String,
    pub x: f64,
    pub config: SimConfig,
    pub titles: String,
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
                for (key, value) in self.base.iter().chain(series.overrides.iter()) {
                    if key == "titles" {
                        titles = value
                            .as_str()
                            .ok_or_else(|| err("titles must be a string".into()))?
                            .to_string();
                    } else {
                        table.insert(key.clone(), value.clone());
                    }
                }
                let x_value = if x.fract() == 0.0 {
                    toml::Value::Integer(x as i64)
                } else {
                    toml::Value::Float(x)
                };
                table.insert(self.x.clone(), x_value);
                let config: SimConfig = table
                    .try_into()
                    .map_err(|e: toml::de::Error| err(e.message().to_string()))?;
                titles_for(&titles, self.trace_seed, &config)?;
                points.push(Point {
                    series: series.label.clone(),
                    x_name: self.x.clone(),
                    x,
                    config,
                    titles,
                });
            }
        }
        Ok(points)
    }
}

/// The titles an experiment names: a comma-separated list whose items are
/// `table3-mixed` (seed 000's six types, submitted round-robin), a trace type
/// (`rondo trace generate --help`), or the path of a trace file
/// (`rondo trace generate --out`).
pub fn titles_for(
    name: &str,
    trace_seed: u64,
    config: &SimConfig,
) -> Result<Vec<SimTitle>, SpecError> {
    let mut titles = Vec::new();
    for item in name.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let traces: Vec<(String, Vec<rondo_model::schedule::Frame>)> = if item == "table3-mixed" {
            synth::known_kinds()
                .iter()
                .filter(|k| matches!(k, TraceKind::Vbr(_)))
                .map(|&k| (k.name().to_string(), synth::generate(k, trace_seed)))
                .collect()
        } else if let Some(kind) = TraceKind::from_name(item) {
            vec![(kind.name().to_string(), synth::generate(kind, trace_seed))]
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
