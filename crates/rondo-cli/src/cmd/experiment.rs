//! `rondo experiment run FILE.toml`: a published figure or any sweep, with
//! replications, confidence intervals, a table, JSON, CSV and PNG/SVG plots.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use indicatif::{ProgressBar, ProgressStyle};

use rondo_experiments::cluster::{ClusterResult, ClusterSpec, is_cluster_spec, run_cluster};
use rondo_experiments::cycle::{CycleResult, CycleSpec, is_cycle_spec, run_cycle};
use rondo_experiments::jukebox::{
    JukeboxExperimentKind, JukeboxResult, JukeboxSpec, is_jukebox_spec, run_jukebox,
};
use rondo_experiments::plot::{write_chart, write_plots};
use rondo_experiments::runner::{ExperimentResult, run_experiment};
use rondo_experiments::spec::{ExperimentSpec, Replications};

#[derive(Subcommand, Debug)]
pub enum ExperimentCommand {
    /// Run an experiment file (see `experiments/` for the published figures).
    ///
    /// Writes `results.json`, `results.csv`, `plot.png` and `plot.svg` under
    /// `--out` (default `results/<name>/`) and prints a table.
    Run {
        /// The experiment definition (TOML).
        file: PathBuf,
        /// Output directory.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Seed of the first replication of each point.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Override a simulator field for every point, e.g.
        /// `--set end_round=4000 --set warmup_rounds=1000` (repeatable).
        #[arg(long = "set", value_name = "FIELD=VALUE")]
        overrides: Vec<String>,
        /// Override the minimum number of replications per point.
        #[arg(long)]
        min_replications: Option<usize>,
        /// Override the maximum number of replications per point.
        #[arg(long)]
        max_replications: Option<usize>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// `--min-replications` and `--max-replications` over a file's own.
fn override_replications(
    replications: &mut Replications,
    min: Option<usize>,
    max: Option<usize>,
) -> anyhow::Result<()> {
    if let Some(min) = min {
        anyhow::ensure!(min >= 1, "--min-replications must be at least 1");
        replications.min = min;
        replications.max = replications.max.max(min);
    }
    if let Some(max) = max {
        replications.max = max;
        replications.min = replications.min.min(max);
    }
    Ok(())
}

/// The replications' progress bar (hidden for `--json`).
fn replications_bar(json: bool, name: &str) -> ProgressBar {
    let bar = if json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(1)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} {msg} [{bar:40}] {pos}/{len} replications ({elapsed}, ~{eta} left)",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_message(name.to_string());
    bar
}

pub fn run(command: ExperimentCommand) -> anyhow::Result<()> {
    let ExperimentCommand::Run {
        file,
        out,
        seed,
        overrides,
        min_replications,
        max_replications,
        json,
    } = command;
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("cannot read {}", file.display()))?;
    if is_jukebox_spec(&text) {
        anyhow::ensure!(
            overrides.is_empty(),
            "--set overrides simulator fields; {} is a jukebox experiment (seed 002)",
            file.display()
        );
        let mut spec = JukeboxSpec::from_toml(&text, &file.display().to_string())?;
        override_replications(&mut spec.replications, min_replications, max_replications)?;
        return run_jukebox_file(&spec, out, seed, json);
    }
    if is_cluster_spec(&text) {
        anyhow::ensure!(
            overrides.is_empty(),
            "--set overrides simulator fields; {} is a cluster experiment (seed 001): edit its \
             [base] or [[series]]",
            file.display()
        );
        let mut spec = ClusterSpec::from_toml(&text, &file.display().to_string())?;
        override_replications(&mut spec.replications, min_replications, max_replications)?;
        return run_and_write(
            &spec.name,
            out,
            json,
            |report| Ok(run_cluster(&spec, seed, report)?),
            |result: &ClusterResult, out| {
                write_csv_and_charts(out, &result.to_csv(), result.charts())
            },
            |result: &ClusterResult| print!("{}", result.table()),
        );
    }
    if is_cycle_spec(&text) {
        anyhow::ensure!(
            overrides.is_empty() && min_replications.is_none() && max_replications.is_none(),
            "--set and --min/--max-replications apply to simulator experiments; {} is a \
             time-cycle experiment (seed 004): edit its `replications`",
            file.display()
        );
        let spec = CycleSpec::from_toml(&text, &file.display().to_string())?;
        return run_cycle_file(&spec, out, seed, json);
    }
    let mut spec = ExperimentSpec::from_file(&file)?;
    for o in &overrides {
        let (key, value) = o
            .split_once('=')
            .with_context(|| format!("--set '{o}': expected FIELD=VALUE"))?;
        let value: toml::Value = toml::from_str::<toml::Table>(&format!("v = {value}"))
            .map(|mut t| t.remove("v").expect("parsed key"))
            .unwrap_or_else(|_| toml::Value::String(value.to_string()));
        spec.base.insert(key.trim().to_string(), value);
    }
    override_replications(&mut spec.replications, min_replications, max_replications)?;
    // Re-validate with the overrides applied, placing every point's titles
    // so that a configuration that cannot hold them fails before any run.
    spec.check_layouts()?;
    run_and_write(
        &spec.name,
        out,
        json,
        |report| Ok(run_experiment(&spec, seed, report)?),
        |result, out| {
            std::fs::write(out.join("results.csv"), result.to_csv())?;
            write_plots(result, &spec.reference, out, "plot")
                .map_err(|e| anyhow::anyhow!("plot: {e}"))?;
            if let Some(field) = &spec.plot_against {
                let chart = rondo_experiments::plot::Chart::of_experiment_against(result, field)
                    .map_err(|e| anyhow::anyhow!("plot against {field}: {e}"))?;
                write_chart(&chart, &[], out, "plot-against")
                    .map_err(|e| anyhow::anyhow!("plot: {e}"))?;
                return Ok("plot.{png,svg} and plot-against.{png,svg}");
            }
            Ok("plot.{png,svg}")
        },
        print_table,
    )
}

fn print_table(result: &ExperimentResult) {
    println!("{} — {}", result.name, result.paper);
    let mut table = comfy_table::Table::new();
    table.load_style(comfy_table::presets::UTF8_FULL_CONDENSED);
    table.set_header(vec![
        "series".to_string(),
        result.x.clone(),
        "mean active streams".into(),
        result.metric.clone(),
        "rejection".into(),
        "reserved".into(),
        "busy".into(),
        "misses".into(),
        "reps".into(),
    ]);
    for p in &result.points {
        table.add_row(vec![
            p.series.clone(),
            format!("{}", p.x),
            format!("{:.1} ± {:.1}", p.mean_active_streams, p.ci_half_width),
            format!("{:.4} ± {:.4}", p.metric, p.metric_ci_half_width),
            format!("{:.3}", p.rejection_ratio),
            format!("{:.1}%", 100.0 * p.reserved_fraction),
            p.busy_fraction
                .map(|b| format!("{:.1}%", 100.0 * b))
                .unwrap_or_else(|| "-".into()),
            p.deadline_misses.to_string(),
            p.replications.to_string(),
        ]);
    }
    println!("{table}");
}

/// Writes `results.csv` and every chart (`plot*.{png,svg}`) under `out`.
fn write_csv_and_charts(
    out: &std::path::Path,
    csv: &str,
    charts: Vec<(String, rondo_experiments::plot::Chart)>,
) -> anyhow::Result<&'static str> {
    std::fs::write(out.join("results.csv"), csv)?;
    for (stem, chart) in charts {
        write_chart(&chart, &[], out, &stem).map_err(|e| anyhow::anyhow!("plot: {e}"))?;
    }
    Ok("plot*.{png,svg}")
}

/// A seed 002 jukebox experiment: results, plots and a table.
fn run_jukebox_file(
    spec: &JukeboxSpec,
    out: Option<PathBuf>,
    seed: u64,
    json: bool,
) -> anyhow::Result<()> {
    run_and_write(
        &spec.name,
        out,
        json,
        |report| Ok(run_jukebox(spec, seed, report)),
        |result, out| write_csv_and_charts(out, &result.to_csv(), result.charts()),
        print_jukebox_table,
    )
}

/// A seed 004 time-cycle experiment: results, timelines, plots and a table.
fn run_cycle_file(
    spec: &CycleSpec,
    out: Option<PathBuf>,
    seed: u64,
    json: bool,
) -> anyhow::Result<()> {
    run_and_write(
        &spec.name,
        out,
        json,
        |report| Ok(run_cycle(spec, seed, report)),
        |result: &CycleResult, out| {
            std::fs::write(out.join("timelines.csv"), result.timelines_csv())?;
            write_csv_and_charts(out, &result.to_csv(), result.charts())
        },
        |result: &CycleResult| print!("{}", result.table()),
    )
}

/// Runs an experiment behind the replications' progress bar, writes
/// `results.json` under `out` (default `results/<name>/`) and what `write`
/// adds (the CSV and the plots, named in its answer), then prints the JSON
/// (`--json`) or `table`.
fn run_and_write<R: serde::Serialize>(
    name: &str,
    out: Option<PathBuf>,
    json: bool,
    run: impl FnOnce(&(dyn Fn(usize, usize) + Sync)) -> anyhow::Result<R>,
    write: impl FnOnce(&R, &std::path::Path) -> anyhow::Result<&'static str>,
    table: impl FnOnce(&R),
) -> anyhow::Result<()> {
    let out = out.unwrap_or_else(|| PathBuf::from("results").join(name));
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let bar = replications_bar(json, name);
    let report = |done: usize, total: usize| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    };
    let result = run(&report)?;
    bar.finish_and_clear();
    std::fs::write(
        out.join("results.json"),
        serde_json::to_string_pretty(&result)?,
    )?;
    let plots = write(&result, &out)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        table(&result);
        println!("wrote {}/results.{{json,csv}} and {plots}", out.display());
    }
    Ok(())
}

fn print_jukebox_table(result: &JukeboxResult) {
    println!("{} — {}", result.name, result.paper);
    for (mb, sf) in &result.optimal_stripe_factors {
        println!("SF_opt for {mb} MB: {sf}");
    }
    let mut table = comfy_table::Table::new();
    table.load_style(comfy_table::presets::UTF8_FULL_CONDENSED);
    if result.experiment == JukeboxExperimentKind::ResponseVsSf {
        table.set_header(vec!["file", "SF", "response time (s)"]);
        for p in &result.points {
            table.add_row(vec![
                p.series.clone(),
                p.stripe_factor.to_string(),
                format!("{:.1}", p.mean_response_s),
            ]);
        }
        println!("{table}");
        return;
    }
    table.set_header(vec![
        "series",
        "requests per hour",
        "mean response (s)",
        "p95 response (s)",
        "arm busy",
        "reps",
    ]);
    let ci = |v: f64| {
        if v.is_finite() {
            format!(" ± {v:.1}")
        } else {
            String::new()
        }
    };
    for p in &result.points {
        table.add_row(vec![
            p.series.clone(),
            format!("{}", p.x),
            format!("{:.1}{}", p.mean_response_s, ci(p.mean_ci_half_width_s)),
            format!("{:.1}{}", p.p95_response_s, ci(p.p95_ci_half_width_s)),
            format!("{:.0}%", 100.0 * p.arm_utilisation),
            p.replications.to_string(),
        ]);
    }
    println!("{table}");
}
