//! `rondo simulate`: the capacity planner for one configuration.
//!
//! Runs the configuration at the requested load and at saturation (ρ = 1.5,
//! DESIGN.md's "capacity"), each replicated until its confidence interval is
//! within the target, and prints mean active streams, rejection ratio,
//! capacity, reserved and measured disk time, and misses.

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use rondo_experiments::runner::{PointResult, Progress, run_point};
use rondo_experiments::spec::{Point, TraceOptions, titles_with};
use rondo_experiments::stats::StoppingRule;
use rondo_model::layout::ReplicaPlacement;
use rondo_model::reservation::Scheme;
use rondo_model::units::NS_PER_MS;
use rondo_sim::run::{BoundKind, FailureSpec, Mode, SimConfig};

#[derive(Args, Debug)]
pub struct SimulateArgs {
    /// Number of disks D.
    #[arg(long, default_value_t = 8)]
    disks: u32,
    /// Disk profile (`rondo disk list`).
    #[arg(long, default_value = "cheetah-4lp")]
    profile: String,
    /// Reservation scheme: none, unreserved, mirroring, minimum, dynamic.
    #[arg(long, default_value = "minimum")]
    scheme: Scheme,
    /// Backup placement.
    #[arg(long, value_enum, default_value_t = PlacementArg::Deterministic)]
    placement: PlacementArg,
    /// Decluster backups into fragments of this many bytes (B_d).
    #[arg(long)]
    backup_block_bytes: Option<u64>,
    /// Round bound: `paper` (seed 000 §2.3, Table 2) or `rondo` (a true upper
    /// bound of the detailed disk model, used by `rondo serve`).
    #[arg(long, value_enum, default_value_t = BoundArg::Rondo)]
    bound: BoundArg,
    /// `admission-only` (reservations only) or `simulated-disk` (every disk
    /// executes its reads on the detailed model; slower).
    #[arg(long, value_enum, default_value_t = ModeArg::AdmissionOnly)]
    mode: ModeArg,
    /// Round length T in milliseconds.
    #[arg(long, default_value_t = 1000)]
    round_ms: u64,
    /// Offered load ρ: requests arrive at ρ·μ (seed 000 equation 1).
    #[arg(long, default_value_t = 0.8)]
    load: f64,
    /// Titles, comma-separated: `table3-mixed` (seed 000's six types,
    /// round-robin), trace types (`rondo trace generate --help`), or trace
    /// files (`rondo trace generate TYPE --out FILE`).
    #[arg(long, default_value = "table3-mixed")]
    titles: String,
    /// Seed of the synthetic titles.
    #[arg(long, default_value_t = 1)]
    trace_seed: u64,
    /// Mean scene length of the synthetic VBR titles in ms: how long a
    /// bitrate level persists, i.e. their correlation over time (seed 000
    /// does not give it; default: the generator's, see docs/traces.md).
    #[arg(long)]
    trace_mean_scene_ms: Option<u64>,
    /// Start rounds admission tries; default ⌈1/λ⌉ (seed 000 §6.2).
    #[arg(long)]
    lookahead_rounds: Option<u64>,
    /// Rounds before measuring.
    #[arg(long, default_value_t = 3000)]
    warmup_rounds: u64,
    /// Measure rounds warmup ≤ r < this.
    #[arg(long, default_value_t = 9000)]
    end_round: u64,
    /// Fail this disk (numbered from 0) at `--fail-round`.
    #[arg(long, requires = "fail_round")]
    fail_disk: Option<u32>,
    /// The round at whose start `--fail-disk` fails.
    #[arg(long, requires = "fail_disk")]
    fail_round: Option<u64>,
    /// Minimum replications per configuration.
    #[arg(long, default_value_t = 3)]
    replications: usize,
    /// Maximum replications per configuration.
    #[arg(long, default_value_t = 20)]
    max_replications: usize,
    /// Target 95% confidence half-width as a fraction of the mean.
    #[arg(long, default_value_t = 0.05)]
    ci: f64,
    /// Seed of the first replication.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Skip the saturation run (ρ = 1.5) that measures capacity.
    #[arg(long)]
    no_capacity: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum PlacementArg {
    Deterministic,
    Random,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum BoundArg {
    Paper,
    Rondo,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
pub enum ModeArg {
    AdmissionOnly,
    SimulatedDisk,
}

#[derive(Serialize)]
struct Report {
    at_load: PointResult,
    capacity: Option<PointResult>,
}

pub fn run(args: SimulateArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.round_ms > 0, "--round-ms must be positive");
    anyhow::ensure!(args.load > 0.0, "--load must be positive");
    anyhow::ensure!(
        args.end_round > args.warmup_rounds,
        "--end-round must exceed --warmup-rounds"
    );
    let mut config = SimConfig::seed000(
        args.disks,
        args.scheme,
        match args.placement {
            PlacementArg::Deterministic => ReplicaPlacement::Deterministic,
            PlacementArg::Random => ReplicaPlacement::Random,
        },
    );
    config.profile = args.profile.clone();
    config.backup_block_bytes = args.backup_block_bytes;
    config.bound = match args.bound {
        BoundArg::Paper => BoundKind::Paper,
        BoundArg::Rondo => BoundKind::Rondo,
    };
    config.mode = match args.mode {
        ModeArg::AdmissionOnly => Mode::AdmissionOnly,
        ModeArg::SimulatedDisk => Mode::SimulatedDisk,
    };
    config.round_duration_ns = args.round_ms * NS_PER_MS;
    config.load = args.load;
    config.lookahead_rounds = args.lookahead_rounds;
    config.warmup_rounds = args.warmup_rounds;
    config.end_round = args.end_round;
    config.failure = args
        .fail_disk
        .zip(args.fail_round)
        .map(|(disk, round)| FailureSpec { disk, round });
    let trace = TraceOptions {
        seed: args.trace_seed,
        mean_scene_ms: args.trace_mean_scene_ms,
    };
    let titles = titles_with(&args.titles, trace, &config)?;
    let rule = StoppingRule {
        min_replications: args.replications.max(1),
        max_replications: args.max_replications.max(args.replications.max(1)),
        ci_fraction: args.ci,
    };
    let point = |load: f64, label: &str| Point {
        series: label.to_string(),
        x_name: "load".into(),
        x: load,
        config: SimConfig {
            load,
            ..config.clone()
        },
        titles: args.titles.clone(),
        trace,
    };
    let bar = progress_bar(!args.json);
    let report_progress = |done: usize, total: usize| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    };
    let counter = Progress::new(
        rule.min_replications * if args.no_capacity { 1 } else { 2 },
        &report_progress,
    );
    let at_load = run_point(
        &point(args.load, "at load"),
        &titles,
        "mean_active_streams",
        rule,
        args.seed,
        &counter,
    )?;
    let capacity = if args.no_capacity {
        None
    } else {
        Some(run_point(
            &point(1.5, "capacity"),
            &titles,
            "mean_active_streams",
            rule,
            args.seed,
            &counter,
        )?)
    };
    bar.finish_and_clear();
    let report = Report { at_load, capacity };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&args, &report);
    }
    Ok(())
}

fn progress_bar(visible: bool) -> ProgressBar {
    if !visible {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(1);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} simulating [{bar:40}] {pos}/{len} replications ({elapsed})",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar
}

fn print_report(args: &SimulateArgs, report: &Report) {
    let p = &report.at_load;
    println!(
        "{} disks ({}), scheme {}, placement {}, {} bound, {}, T = {} ms, titles {}",
        p.disks, args.profile, p.scheme, p.placement, p.bound, p.mode, args.round_ms, p.titles
    );
    let mut table = comfy_table::Table::new();
    table.load_style(comfy_table::presets::UTF8_FULL_CONDENSED);
    table.set_header(vec!["", "at load ρ", "capacity (ρ = 1.5)"]);
    let cap = report.capacity.as_ref();
    let row = |name: &str, f: &dyn Fn(&PointResult) -> String| {
        vec![
            name.to_string(),
            f(p),
            cap.map(f).unwrap_or_else(|| "-".into()),
        ]
    };
    table.add_row(row("load ρ", &|r| format!("{}", r.x)));
    table.add_row(row("mean active streams", &|r| {
        format!("{:.1} ± {:.1}", r.mean_active_streams, r.ci_half_width)
    }));
    table.add_row(row("rejection ratio", &|r| {
        format!("{:.3}", r.rejection_ratio)
    }));
    table.add_row(row("mean start-up delay (rounds)", &|r| {
        format!("{:.2}", r.mean_startup_delay_rounds)
    }));
    table.add_row(row("reserved disk time / round", &|r| {
        format!("{:.1}%", 100.0 * r.reserved_fraction)
    }));
    table.add_row(row("  of which primary reads", &|r| {
        format!("{:.1}%", 100.0 * r.reserved_primary_fraction)
    }));
    table.add_row(row("measured busy time / round", &|r| {
        r.busy_fraction
            .map(|b| format!("{:.1}%", 100.0 * b))
            .unwrap_or_else(|| "(admission-only)".into())
    }));
    table.add_row(row("deadline misses", &|r| r.deadline_misses.to_string()));
    table.add_row(row("disk-round overruns", &|r| {
        r.disk_round_overruns.to_string()
    }));
    table.add_row(row("replications", &|r| r.replications.to_string()));
    println!("{table}");
}
