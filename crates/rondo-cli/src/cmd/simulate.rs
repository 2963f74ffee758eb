//! `rondo simulate`: the capacity planner for one configuration.
//!
//! Runs the configuration at the requested load and at saturation (ρ = 1.5:
//! the "capacity" of ARCHITECTURE.md's vocabulary), each replicated until its confidence interval is
//! within the target, and prints mean active streams, rejection ratio,
//! capacity, reserved and measured disk time, and misses.
//!
//! Titles are synthetic traces or trace files (`--titles`), or with
//! `--data-dir` a data directory's stored titles: then everything the
//! directory fixes (disks, profile, scheme, placement, declustering, round
//! length, stride and block) comes from its `rondo.toml`, and the titles are
//! loaded by the store's loader (the one the server uses) (`rondo_store::titles::load_titles`:
//! the catalog's client bytes, the stored layout, the charges under the
//! server's rondo-mode bound) and run through `rondo_sim::run::run_placed`,
//! with the server's admission defaults (look-ahead, buffer). A prediction
//! for a directory is thus a statement about the array `rondo serve` would
//! run on it.

use std::path::PathBuf;

use anyhow::Context;
use clap::builder::TypedValueParser as _;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use rondo_experiments::runner::{PointResult, Progress, run_point, run_point_with};
use rondo_experiments::spec::{Point, TraceOptions, titles_with};
use rondo_experiments::stats::StoppingRule;
use rondo_model::disk::profile_by_name;
use rondo_model::layout::{ReplicaPlacement, RoundRobinCounter};
use rondo_model::reservation::{Bound, BurstLead, Guarantee, ReplicaChoice, Scheme, StartChoice};
use rondo_model::units::{DiskIndex, NS_PER_MS, NS_PER_S, Round};
use rondo_sim::faults::{BadExtentSpec, IngestSpec, RebuildSpec};
use rondo_sim::run::{BoundKind, FailureSpec, Mode, PlacedTitle, SimConfig, SimTitle};
use rondo_store::{DirectoryFlags, Store};

/// Disks without `--disks` (and without `--data-dir`).
const DEFAULT_DISKS: u32 = 8;
/// Disk profile without `--profile`.
const DEFAULT_PROFILE: &str = "cheetah-4lp";
/// Round length without `--round-ms`.
const DEFAULT_ROUND_MS: u64 = 1000;

#[derive(Args, Debug)]
#[command(after_long_help = "\
With --data-dir, the titles are the directory's stored titles and the array is its \
rondo.toml's (flags that restate it must agree with it); admission uses the server's \
defaults (look-ahead 5 rounds, 64 MiB of buffer per disk) unless --lookahead-rounds is \
given. The directory must not be in use by a running server (its lock).\n\n\
Examples:\n  rondo simulate --disks 16\n  \
rondo simulate --data-dir rondo-data --zipf 1 --warmup-rounds 300 --end-round 900\n  \
rondo simulate --data-dir rondo-data --rate 2.5 --no-capacity --json")]
pub struct SimulateArgs {
    /// Simulate this data directory's stored titles on its array.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["titles", "trace_seed", "trace_mean_scene_ms", "bound"])]
    data_dir: Option<PathBuf>,
    /// Number of disks D [default: 8, or the data directory's].
    #[arg(long)]
    disks: Option<u32>,
    /// Disk profile (`rondo disk list`) [default: cheetah-4lp, or the data directory's].
    #[arg(long)]
    profile: Option<String>,
    /// Reservation scheme: none, unreserved, mirroring, minimum, dynamic
    /// [default: minimum, or the data directory's].
    #[arg(long)]
    scheme: Option<Scheme>,
    /// Backup placement [default: deterministic, or the data directory's].
    #[arg(long, value_enum)]
    placement: Option<PlacementArg>,
    /// Deterministic placement's round-robin counter: `per-title` (round i's
    /// backup at offset 1 + i mod (D−1), what new data directories use) or
    /// `per-disk` (the j-th round on a disk at offset 1 + j mod (D−1), what
    /// directories created before it and the paper-mode experiments use)
    /// [default: per-title, or the data directory's]. docs/layout.md.
    #[arg(long, value_enum, conflicts_with = "data_dir")]
    round_robin_counter: Option<CounterArg>,
    /// Decluster backups into fragments of this many bytes (B_d).
    #[arg(long)]
    backup_block_bytes: Option<u64>,
    /// Which start round within the look-ahead a new stream takes: `first`
    /// (seed 000, what `rondo serve` does) or `least-added` (the one that
    /// adds the least reserved time). docs/experiments/failure-tolerance-cost.md.
    #[arg(long, default_value = "first", conflicts_with = "data_dir")]
    start_choice: StartChoice,
    /// Under `minimum`: rounds a survivor has to read a failed disk's
    /// backups (1: in the round itself, seed 000 and `rondo serve`). With
    /// K > 1 a failed disk's backup read may complete up to K - 1 rounds
    /// late (its client holds K - 1 rounds more), admission reserves per
    /// source disk the window's average backup time, and after a failure
    /// each survivor reads those backups earliest deadline first, cut
    /// between rounds at block boundaries; a stream's first send waits
    /// K - 1 rounds. With --data-dir: the directory's setting unless given,
    /// as to `rondo serve`. docs/experiments/failure-tolerance-cost.md.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=rondo_store::BACKUP_WINDOW_ROUNDS_MAX as i64))]
    backup_window_rounds: Option<u32>,
    /// Under `minimum`: how late a disk's loss may be noticed, in rounds
    /// (0, seed 000: at a round boundary), as `rondo serve
    /// --loss-notice-rounds`: each backup charge is spread over K + L
    /// rounds and every client is K − 1 + L rounds ahead.
    /// With --data-dir, the directory's [serving] value unless given.
    #[arg(long, value_name = "L", value_parser = clap::value_parser!(u32).range(0..=rondo_store::LOSS_NOTICE_ROUNDS_MAX as i64))]
    loss_notice_rounds: Option<u32>,
    /// Which replica each round of a new stream reads under `minimum`:
    /// `primary` (seed 000, what `rondo serve` does) or `balanced` (per
    /// round, the replica that leaves the two disks' larger reserved time
    /// lowest; measured to lose streams).
    /// docs/experiments/failure-tolerance-cost.md.
    #[arg(long, default_value = "primary", conflicts_with = "data_dir")]
    replica_choice: ReplicaChoice,
    /// Admit with a statistical guarantee: a disk-round's reads overrun
    /// their reservation with at most this probability (e.g. 1e-6), the
    /// rotational waits taken as independent and uniform, everything else
    /// at the bound's worst case. Without it the guarantee is
    /// deterministic (the default, what `rondo serve` does). Needs the
    /// rondo bound on a rotating disk. With --data-dir: the directory's
    /// setting unless given, as to `rondo serve`. docs/guarantee.md.
    #[arg(long, value_name = "P")]
    overrun_probability: Option<f64>,
    /// Which stroke of the drive the rondo bound charges: `whole` (the
    /// default) or `data`, the cylinders the titles occupy once placed (as
    /// `rondo serve --stroke`). With --data-dir: the directory's setting
    /// unless given. docs/guarantee.md, "The charged stroke".
    #[arg(long, value_name = "whole|data")]
    stroke: Option<rondo_store::Stroke>,
    #[command(flatten)]
    layout: crate::cmd::layout_args::LayoutArgs,
    #[command(flatten)]
    policy: crate::cmd::policy_args::PolicyArgs,
    /// Re-cut the drive cache into one segment per block of the largest
    /// round (the host sets the segmentation, as SCSI's caching mode page
    /// allows): as many prefetched blocks as the cache holds. For
    /// `--policy sweep-prefetch|gradual`; docs/retrieval.md.
    #[arg(long, conflicts_with = "data_dir")]
    fit_drive_segments: bool,
    /// Server buffer per disk in MiB [default: 64, seed 000 §6.3]; GPMP
    /// trades it for disk time (seed 003 Figure 4). With --data-dir, give
    /// what `rondo serve --buffer-per-disk-mib` is given.
    #[arg(long, value_name = "MIB")]
    buffer_per_disk_mib: Option<u64>,
    /// Network capacity in megabits per second (seed 000 §6.3): streams
    /// whose bytes of a round would exceed it are refused. Default: not
    /// limited. With --data-dir, give what `rondo serve --network-mbps-max`
    /// is given.
    #[arg(long, value_name = "MBPS")]
    network_mbps_max: Option<f64>,
    /// Start burst: up to this many of a new stream's first rounds read in
    /// its first round and sent at once, when they fit (`rondo serve
    /// --start-burst-s`); 0: none, as in seed 000.
    #[arg(long, value_name = "ROUNDS", default_value_t = 0)]
    start_burst_rounds: u32,
    /// After a start burst, `spent`: the stream reads on as if started a
    /// round earlier (its client one round ahead again); `kept`: it reads
    /// on one round per round and its client stays the burst ahead
    /// (`rondo serve --start-burst-lead`).
    #[arg(long, value_name = "LEAD", default_value = "spent")]
    start_burst_lead: BurstLead,
    /// Round bound: `paper` (seed 000 §2.3, Table 2) or `rondo` (a true upper
    /// bound of the detailed disk model, used by `rondo serve`).
    #[arg(long, value_enum, default_value_t = BoundArg::Rondo)]
    bound: BoundArg,
    /// `admission-only` (reservations only) or `simulated-disk` (every disk
    /// executes its reads on the detailed model; slower).
    #[arg(long, value_enum, default_value_t = ModeArg::AdmissionOnly)]
    mode: ModeArg,
    /// Round length T in milliseconds [default: 1000, or the data directory's].
    #[arg(long)]
    round_ms: Option<u64>,
    /// Offered load ρ: requests arrive at ρ·μ (seed 000 equation 1).
    #[arg(long, default_value_t = 0.8)]
    load: f64,
    /// Requests arrive at this many per second instead of ρ·μ.
    #[arg(long, value_name = "R", conflicts_with = "load")]
    rate: Option<f64>,
    /// Zipf popularity: title k (from 1, in id order with --data-dir, else
    /// in --titles order) is asked for with probability ∝ 1/k^A, as `rondo
    /// load --zipf A`; without it titles are offered round-robin (seed 000).
    #[arg(long, value_name = "A")]
    zipf: Option<f64>,
    /// Seed 001 §6.4's popularity: the first title (in id order with
    /// --data-dir, else in --titles order) is asked for with probability P
    /// and the others share the rest evenly. With --stripe-disks it shows
    /// the hot spot of a popular title on few disks.
    #[arg(long, value_name = "P", conflicts_with = "zipf")]
    popular_share: Option<f64>,
    /// Titles, comma-separated: `table3-mixed` (seed 000's six types,
    /// round-robin), `table3-library:N` (a library of N titles: the six
    /// types in turn, the k-th of a type from trace seed + k), trace types
    /// (`rondo trace generate --help`), or trace files (`rondo trace
    /// generate TYPE --out FILE`).
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
    /// Start rounds admission tries; default ⌈1/λ⌉ (seed 000 §6.2), or with
    /// --data-dir the server's (5).
    #[arg(long)]
    lookahead_rounds: Option<u64>,
    /// Rounds before measuring.
    #[arg(long, default_value_t = 3000)]
    warmup_rounds: u64,
    /// Measure rounds warmup ≤ r < this.
    #[arg(long, default_value_t = 9000)]
    end_round: u64,
    /// Fail this disk (numbered from 0) at `--fail-round`.
    #[arg(long, requires = "fail_round", value_parser = clap::value_parser!(u32).map(DiskIndex))]
    fail_disk: Option<DiskIndex>,
    /// The round at whose start `--fail-disk` fails.
    #[arg(long, requires = "fail_disk")]
    fail_round: Option<u64>,
    /// Replace and rebuild the `--fail-disk` disk from this round on, in the
    /// disk time streams leave (simulated-disk mode): answers how long a
    /// rebuild takes under this load.
    #[arg(long, requires = "fail_disk")]
    rebuild_round: Option<u64>,
    /// Ingest a copy of title `--ingest-title` from this round on, in the
    /// disk time streams (and a rebuild) leave (simulated-disk mode):
    /// answers how long an ingest takes and what it costs in streams.
    #[arg(long)]
    ingest_round: Option<u64>,
    /// A bad extent (silent corruption), repeatable:
    /// `TITLE:ROUND:primary|backup[:PIECE][@FROM_ROUND]`: that replica of
    /// playback round ROUND of title TITLE (numbered from 0; PIECE, from 0,
    /// picks one piece of a declustered backup) fails its checksum from
    /// FROM_ROUND (0) until repaired (simulated-disk mode). Both replicas of
    /// one round make it lost.
    #[arg(long, value_name = "SPEC", value_parser = parse_bad_extent)]
    bad_extent: Vec<BadExtentSpec>,
    /// Which title (numbered from 0) `--ingest-round` copies.
    #[arg(long, default_value_t = 0, requires = "ingest_round")]
    ingest_title: usize,
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
    /// Answer "which retrieval policy suits this drive?": run Sweep, GPMP
    /// with u = 1..5 and, on a profile with a drive cache, Sweep&Prefetch
    /// and Gradual on the same titles, array and arrivals, and print each
    /// one's capacity (at ρ = 1.5, or 6 or 24 until it refuses 5% of its
    /// arrivals), its memory there and its start-up latency with arrivals
    /// at --load times Sweep's capacity (or --rate), naming the best
    /// (needs --layout segments; synthetic titles). docs/retrieval.md.
    #[arg(long, conflicts_with_all = ["data_dir", "no_capacity"])]
    compare_policies: bool,
    /// A library on optical jukeboxes staged onto this array (seed 002).
    #[command(flatten)]
    tier: crate::cmd::simulate_tier::TierArgs,
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
pub enum CounterArg {
    PerDisk,
    PerTitle,
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
    /// The array and titles simulated.
    setup: Setup,
    at_load: PointResult,
    capacity: Option<PointResult>,
}

#[derive(Serialize)]
struct Setup {
    data_dir: Option<String>,
    disks: u32,
    profile: String,
    /// With --data-dir: the drive admission charges (the profile, or under
    /// `--stroke data` it short-stroked to where the data ends).
    charged_profile: Option<String>,
    /// Deterministic placement's round-robin counter (`per-disk`, `per-title`).
    round_robin_counter: RoundRobinCounter,
    round_ms: f64,
    /// μ of equation 1 (D·R_disk·T/S_tot) per second, R_disk the profile's
    /// minimum media rate, S_tot the mean title size.
    mu_per_s: f64,
    mu_rate_bytes_per_s: f64,
    /// Arrivals per second of the "at load" point and of the capacity point.
    arrival_rate_per_s: f64,
    capacity_arrival_rate_per_s: f64,
    lookahead_rounds: u64,
    zipf_exponent: Option<f64>,
    popular_share: Option<f64>,
    warmup_rounds: u64,
    end_round: u64,
    /// The faults injected (a failure, a rebuild, an ingest), as the run's
    /// fault plan.
    fault_plan: rondo_sim::faults::FaultPlan,
    #[serde(skip)]
    faults: bool,
    titles: Vec<SetupTitle>,
}

#[derive(Serialize)]
struct SetupTitle {
    name: String,
    rounds: usize,
    size_bytes: u64,
    mean_bitrate_bits_per_s: f64,
}

/// What the replications run on: synthetic titles the run places itself, or
/// a data directory's titles, placed and charged as the server does.
enum Titles {
    Synthetic(Vec<SimTitle>),
    Stored {
        bound: Bound,
        titles: Vec<PlacedTitle>,
        /// The drive the bound charges (`--stroke`).
        charged: rondo_store::titles::ChargedDrive,
    },
}

pub fn run(args: SimulateArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.load > 0.0, "--load must be positive");
    if let Some(rate) = args.rate {
        anyhow::ensure!(
            rate.is_finite() && rate > 0.0,
            "--rate must be a positive number of requests per second"
        );
    }
    if let Some(a) = args.zipf {
        anyhow::ensure!(
            a.is_finite() && a >= 0.0,
            "--zipf must be a non-negative exponent (0 is uniform)"
        );
    }
    if let Some(p) = args.popular_share {
        anyhow::ensure!(
            (0.0..=1.0).contains(&p),
            "--popular-share must be a share between 0 and 1, got {p}"
        );
    }
    anyhow::ensure!(
        args.end_round > args.warmup_rounds,
        "--end-round must exceed --warmup-rounds"
    );
    let placement_of = |p: PlacementArg| match p {
        PlacementArg::Deterministic => ReplicaPlacement::Deterministic,
        PlacementArg::Random => ReplicaPlacement::Random,
    };
    let trace = TraceOptions {
        seed: args.trace_seed,
        mean_scene_ms: args.trace_mean_scene_ms,
        gop_log_sd_ratio_permille: None,
        cbr_rate_kbps: None,
        cbr_titles: None,
    };
    let (mut config, titles, titles_label) = match &args.data_dir {
        None => {
            let round_ms = args.round_ms.unwrap_or(DEFAULT_ROUND_MS);
            anyhow::ensure!(round_ms > 0, "--round-ms must be positive");
            let mut config = SimConfig::seed000(
                args.disks.unwrap_or(DEFAULT_DISKS),
                args.scheme.unwrap_or(Scheme::Minimum),
                placement_of(args.placement.unwrap_or(PlacementArg::Deterministic)),
            );
            config.profile = args
                .profile
                .clone()
                .unwrap_or_else(|| DEFAULT_PROFILE.to_string());
            config.backup_block_bytes = args.backup_block_bytes;
            config.segment_rounds = args.layout.segment_rounds()?.unwrap_or(1);
            config.disk_groups = args.layout.disk_groups.unwrap_or(1);
            config.stripe_disks = args.layout.stripe_disks.unwrap_or(0);
            config.buffer_per_disk_bytes =
                super::serve::buffer_per_disk_bytes(args.buffer_per_disk_mib)?;
            config.network_bits_per_s_max =
                super::serve::network_bits_per_s(args.network_mbps_max)?;
            config.read_group_rounds = args.policy.read_group_rounds(config.segment_rounds)?;
            config.drive_prefetch = args.policy.drive_prefetch();
            config.dynamic_cycle = args.policy.dynamic_cycle(config.segment_rounds)?;
            config.fit_drive_segments = args.fit_drive_segments;
            config.round_robin_counter = match args.round_robin_counter {
                Some(CounterArg::PerDisk) => RoundRobinCounter::PerDisk,
                Some(CounterArg::PerTitle) | None => RoundRobinCounter::PerTitle,
            };
            config.bound = match args.bound {
                BoundArg::Paper => BoundKind::Paper,
                BoundArg::Rondo => BoundKind::Rondo,
            };
            config.round_duration_ns = round_ms * NS_PER_MS;
            config.start_choice = args.start_choice;
            config.backup_window_rounds = args.backup_window_rounds.unwrap_or(1);
            config.loss_notice_rounds = args.loss_notice_rounds.unwrap_or(0);
            config.replica_choice = args.replica_choice;
            config.guarantee = Guarantee::with_overrun_probability(args.overrun_probability);
            config.stroke = args.stroke.unwrap_or_default();
            let titles = titles_with(&args.titles, trace, &config)?;
            (config, Titles::Synthetic(titles), args.titles.clone())
        }
        Some(dir) => {
            let (config, bound, titles, charged) = load_data_dir(dir, &args, placement_of)?;
            (
                config,
                Titles::Stored {
                    bound,
                    titles,
                    charged,
                },
                dir.display().to_string(),
            )
        }
    };
    config.mode = match args.mode {
        ModeArg::AdmissionOnly => Mode::AdmissionOnly,
        ModeArg::SimulatedDisk => Mode::SimulatedDisk,
    };
    config.load = args.load;
    config.burst_rounds = args.start_burst_rounds;
    config.burst_lead = args.start_burst_lead;
    let round_s = config.round_duration_ns as f64 / NS_PER_S as f64;
    config.arrival_rate_per_round = args.rate.map(|r| r * round_s);
    config.zipf_exponent = args.zipf;
    config.popular_share = args.popular_share;
    if args.lookahead_rounds.is_some() {
        config.lookahead_rounds = args.lookahead_rounds;
    }
    config.warmup_rounds = args.warmup_rounds;
    config.end_round = args.end_round;
    config.failure = args
        .fail_disk
        .zip(args.fail_round)
        .map(|(disk, round)| FailureSpec {
            disk,
            round: Round(round),
        });
    config.faults.rebuild =
        args.fail_disk
            .zip(args.rebuild_round)
            .map(|(disk, round)| RebuildSpec {
                disk,
                round: Round(round),
            });
    config.faults.bad_extents = args.bad_extent.clone();
    config.faults.ingest = args.ingest_round.map(|round| IngestSpec {
        title: args.ingest_title,
        round: Round(round),
    });
    if config.faults.needs_simulated_disks() && config.mode != Mode::SimulatedDisk {
        anyhow::bail!(
            "--rebuild-round, --ingest-round and --bad-extent need disks that execute their \
             I/O: add --mode simulated-disk"
        );
    }
    let rule = StoppingRule {
        min_replications: args.replications.max(1),
        max_replications: args.max_replications.max(args.replications.max(1)),
        ci_fraction: args.ci,
    };
    if args.tier.library.is_some() {
        return crate::cmd::simulate_tier::run(
            &args.tier,
            &config,
            args.zipf.unwrap_or(1.0),
            args.seed,
            rule,
            args.json,
        );
    }
    let setup = setup_of(&args, &config, &titles)?;
    let point = |load: f64, rate_per_round: Option<f64>, label: &str| Point {
        series: label.to_string(),
        x_name: "load".into(),
        x: load,
        config: SimConfig {
            load,
            arrival_rate_per_round: rate_per_round,
            ..config.clone()
        },
        titles: titles_label.clone(),
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
    let run_at = |p: &Point| match &titles {
        Titles::Synthetic(t) => run_point(p, t, "mean_active_streams", rule, args.seed, &counter),
        Titles::Stored { bound, titles, .. } => {
            run_point_with(p, "mean_active_streams", rule, args.seed, &counter, &|c| {
                rondo_sim::run::run_placed(c, bound, titles)
            })
        }
    };
    let at_load_x = args
        .rate
        .map_or(args.load, |_| setup.arrival_rate_per_s / setup.mu_per_s);
    if args.compare_policies {
        let Titles::Synthetic(t) = &titles else {
            unreachable!("--compare-policies conflicts with --data-dir")
        };
        let mean_title_rounds =
            t.iter().map(|t| t.schedule.rounds() as f64).sum::<f64>() / t.len().max(1) as f64;
        anyhow::ensure!(
            config.segment_rounds > 1,
            "--compare-policies compares policies that read a stream's next rounds together: \
             they need --layout segments"
        );
        let comparison = compare_policies(
            &config,
            &|c, load, rate, label| {
                let p = Point {
                    config: SimConfig {
                        load,
                        arrival_rate_per_round: rate,
                        ..c.clone()
                    },
                    ..point(load, rate, label)
                };
                run_point(&p, t, "mean_active_streams", rule, args.seed, &counter)
            },
            at_load_x,
            mean_title_rounds,
        )?;
        bar.finish_and_clear();
        if args.json {
            println!("{}", serde_json::to_string_pretty(&comparison)?);
        } else {
            print_comparison(&comparison);
        }
        return Ok(());
    }
    let at_load = run_at(&point(at_load_x, config.arrival_rate_per_round, "at load"))?;
    let capacity = if args.no_capacity {
        None
    } else {
        Some(run_at(&point(1.5, None, "capacity"))?)
    };
    bar.finish_and_clear();
    let report = Report {
        setup,
        at_load,
        capacity,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
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

fn print_report(report: &Report) {
    let p = &report.at_load;
    let s = &report.setup;
    let counter = match (p.placement.as_str(), s.round_robin_counter) {
        ("deterministic", RoundRobinCounter::PerDisk) => " (per-disk counter)",
        ("deterministic", RoundRobinCounter::PerTitle) => " (per-title counter)",
        _ => "",
    };
    println!(
        "{} disks ({}), scheme {}, placement {}{counter}, {} bound, {}, T = {} ms, titles {}",
        p.disks, s.profile, p.scheme, p.placement, p.bound, p.mode, s.round_ms, p.titles
    );
    if let Some(charged) = s.charged_profile.as_ref().filter(|c| **c != s.profile) {
        println!("admission charges the data's stroke: {charged}");
    }
    println!(
        "μ = {:.4}/s (equation 1, R_disk {:.1} MB/s); arrivals {:.4}/s at load, {:.4}/s at ρ = 1.5; \
         look-ahead {} rounds; popularity {}; measured rounds {}..{}",
        s.mu_per_s,
        s.mu_rate_bytes_per_s / 1e6,
        s.arrival_rate_per_s,
        s.capacity_arrival_rate_per_s,
        s.lookahead_rounds,
        match (s.zipf_exponent, s.popular_share) {
            (Some(a), _) => format!("Zipf {a}"),
            (None, Some(p)) => format!("the first title {:.0}%, the rest even", p * 100.0),
            (None, None) => "round-robin".to_string(),
        },
        s.warmup_rounds,
        s.end_round
    );
    if s.data_dir.is_some() {
        for t in &s.titles {
            println!(
                "  title {:?}: {} rounds, {} bytes, {:.0} kb/s",
                t.name,
                t.rounds,
                t.size_bytes,
                t.mean_bitrate_bits_per_s / 1e3
            );
        }
    }
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
    if p.busy_fraction.is_some() {
        table.add_row(row("disk-rounds busy past reserved", &|r| {
            r.busy_over_reserved_disk_rounds.to_string()
        }));
        table.add_row(row("drive cache hits", &|r| r.cache_hits.to_string()));
    }
    if report.at_load.window_recoveries
        + report.capacity.as_ref().map_or(0, |c| c.window_recoveries)
        > 0
    {
        table.add_row(row("backup window: reads recovered / cut", &|r| {
            format!("{} / {}", r.window_recoveries, r.window_splits)
        }));
        table.add_row(row("  most rounds held behind a late one", &|r| {
            r.held_behind_late_max.to_string()
        }));
        table.add_row(row(
            "  rounds late for a player started at its first byte",
            &|r| r.late_releases.to_string(),
        ));
    }
    if p.mean_cycle_group_rounds.is_some() {
        table.add_row(row("dynamic cycle, mean (rounds per read)", &|r| {
            r.mean_cycle_group_rounds
                .map_or("-".into(), |g| format!("{g:.2}"))
        }));
        table.add_row(row(
            "  combines / splits / doubles / halves / refused",
            &|r| {
                r.cycle_operations.map_or("-".into(), |[c, s, d, h, x]| {
                    format!("{c} / {s} / {d} / {h} / {x}")
                })
            },
        ));
    }
    if s.faults {
        table.add_row(row("streams stopped (data lost)", &|r| {
            r.streams_aborted.to_string()
        }));
        let rounds = |v: Option<f64>| {
            v.map(|x| format!("{x:.1} rounds"))
                .unwrap_or_else(|| "did not finish".into())
        };
        table.add_row(row("bad extents found / repaired", &|r| {
            format!("{} / {}", r.extents_bad, r.extents_repaired)
        }));
        table.add_row(row("rounds with no good replica", &|r| {
            r.rounds_lost.to_string()
        }));
        table.add_row(row("disks failed at the end", &|r| {
            r.disks_failed.to_string()
        }));
        table.add_row(row("rebuild took", &|r| rounds(r.mean_rebuild_rounds)));
        table.add_row(row("ingest took", &|r| rounds(r.mean_ingest_rounds)));
    }
    table.add_row(row("replications", &|r| r.replications.to_string()));
    println!("{table}");
}

/// The array, the stored titles (placed and charged by the server's loader)
/// and the simulation config of data directory `dir`.
fn load_data_dir(
    dir: &std::path::Path,
    args: &SimulateArgs,
    placement_of: impl Fn(PlacementArg) -> ReplicaPlacement,
) -> anyhow::Result<(
    SimConfig,
    Bound,
    Vec<PlacedTitle>,
    rondo_store::titles::ChargedDrive,
)> {
    let store = match Store::open(dir) {
        Ok(store) => store,
        Err(e @ rondo_store::StoreError::Locked { .. }) => {
            anyhow::bail!("{e}; stop the server to simulate its directory")
        }
        Err(e) => return Err(e.into()),
    };
    let array = store.config().clone();
    array.check_flags(&DirectoryFlags {
        disk_count: args.disks,
        round_duration_ns: args.round_ms.map(|ms| ms * NS_PER_MS),
        disk_profile: args.profile.clone(),
        scheme: args.scheme,
        placement: args.placement.map(placement_of),
        backup_block_bytes: args.backup_block_bytes,
        segment_rounds: args.layout.segment_rounds()?,
        disk_groups: args.layout.disk_groups,
        stripe_disks: args.layout.stripe_disks,
        ..DirectoryFlags::default()
    })?;
    // How the directory is served, as `rondo serve` resolves it.
    let serving = array.serving.overridden_by(&rondo_store::ServingSettings {
        backup_window_rounds: args.backup_window_rounds,
        overrun_probability: args.overrun_probability,
        loss_notice_rounds: args.loss_notice_rounds,
        stroke: args.stroke,
    });
    let (bound, charged) = rondo_store::titles::rondo_bound(
        &array,
        serving.stroke(),
        store.highest_allocated_stride(),
    )
    .with_context(|| format!("disk profile {}", array.disk_profile))?;
    // Charged as the server charges them under the same --policy.
    let group_rounds = args.policy.read_group_rounds(array.segment_rounds)?;
    let cycle = args.policy.dynamic_cycle(array.segment_rounds)?;
    let reads = rondo_store::titles::ReadCharging {
        group_rounds,
        cache_pairs: args.policy.drive_prefetch() != rondo_model::array::DrivePrefetch::None,
        cycle_max_group_rounds: cycle.map_or(0, |c| c.max_group_rounds),
    };
    let loaded = rondo_store::titles::load_titles(&store, &bound, reads)?;
    drop(store);
    anyhow::ensure!(
        !loaded.is_empty(),
        "{} has no stored titles to simulate (rondo ingest FILE --data-dir {})",
        dir.display(),
        dir.display()
    );
    let titles = loaded
        .into_iter()
        .map(|t| PlacedTitle {
            name: t.record.name.clone(),
            schedule: t.schedule,
            layout: Some(t.layout),
            charges: t.charges,
            group_charges: t.group_charges,
            // The simulated disks read no bytes.
            checksums: None,
        })
        .collect();
    let profile = profile_by_name(&array.disk_profile)?;
    let mut config = SimConfig::seed000(array.disk_count, array.scheme, array.placement);
    config.profile = array.disk_profile.clone();
    config.backup_block_bytes = array.backup_block_bytes;
    config.segment_rounds = array.segment_rounds;
    config.read_group_rounds = group_rounds;
    config.drive_prefetch = args.policy.drive_prefetch();
    config.dynamic_cycle = cycle;
    config.round_robin_counter = array.round_robin_counter;
    config.disk_groups = array.disk_groups;
    config.stripe_disks = array.stripe_disks;
    config.guarantee = Guarantee::with_overrun_probability(serving.overrun_probability);
    // The bound itself is `rondo_bound`'s, on where the stored data ends.
    config.stroke = serving.stroke();
    config.backup_window_rounds = serving.backup_window();
    config.loss_notice_rounds = serving.loss_notice();
    config.bound = BoundKind::Rondo;
    config.round_duration_ns = array.round_duration_ns;
    config.stride_bytes = array.stride_bytes;
    config.block_bytes = array.block_bytes;
    // R_disk of equation 1: the profile's minimum media rate (for the
    // Cheetah, seed 000 Table 2's 11.3 MB/s).
    config.mu_rate_bytes_per_s = profile.paper_bound()?.rate_bytes_per_s as f64;
    config.buffer_per_disk_bytes = super::serve::buffer_per_disk_bytes(args.buffer_per_disk_mib)?;
    config.network_bits_per_s_max = super::serve::network_bits_per_s(args.network_mbps_max)?;
    config.lookahead_rounds = Some(rondo_store::titles::DEFAULT_LOOKAHEAD_ROUNDS);
    Ok((config, bound, titles, charged))
}

/// What the report says of the array, the titles and the arrival rates.
fn setup_of(args: &SimulateArgs, config: &SimConfig, titles: &Titles) -> anyhow::Result<Setup> {
    let prepared = match titles {
        Titles::Synthetic(t) => rondo_sim::run::prepare(config, t)?,
        Titles::Stored { bound, titles, .. } => {
            rondo_sim::run::prepare_placed(config, bound, titles)?
        }
    };
    let round_s = config.round_duration_ns as f64 / NS_PER_S as f64;
    let schedules: Vec<(&str, &rondo_model::schedule::Schedule)> = match titles {
        Titles::Synthetic(t) => t.iter().map(|t| (t.name.as_str(), &t.schedule)).collect(),
        Titles::Stored { titles, .. } => titles
            .iter()
            .map(|t| (t.name.as_str(), &t.schedule))
            .collect(),
    };
    let mu_per_s = prepared.mu_per_round() / round_s;
    Ok(Setup {
        data_dir: args.data_dir.as_ref().map(|d| d.display().to_string()),
        disks: config.disks,
        profile: config.profile.clone(),
        charged_profile: match titles {
            Titles::Stored { charged, .. } => Some(charged.profile_name.clone()),
            Titles::Synthetic(_) => None,
        },
        round_robin_counter: config.round_robin_counter,
        round_ms: config.round_duration_ns as f64 / NS_PER_MS as f64,
        mu_per_s,
        mu_rate_bytes_per_s: config.mu_rate_bytes_per_s,
        arrival_rate_per_s: prepared.arrival_rate_per_round() / round_s,
        capacity_arrival_rate_per_s: 1.5 * mu_per_s,
        lookahead_rounds: prepared.lookahead_rounds(),
        zipf_exponent: config.zipf_exponent,
        popular_share: config.popular_share,
        warmup_rounds: config.warmup_rounds,
        end_round: config.end_round,
        fault_plan: config.faults.clone(),
        faults: config.failure.is_some() || config.faults != Default::default(),
        titles: schedules
            .into_iter()
            .map(|(name, s)| SetupTitle {
                name: name.to_string(),
                rounds: s.rounds(),
                size_bytes: s.total_bytes(),
                mean_bitrate_bits_per_s: 8.0 * s.total_bytes() as f64
                    / (s.rounds().max(1) as f64 * round_s),
            })
            .collect(),
    })
}

/// Parses `TITLE:ROUND:primary|backup[@FROM_ROUND]` (`--bad-extent`).
fn parse_bad_extent(text: &str) -> Result<BadExtentSpec, String> {
    let (spec, from) = match text.split_once('@') {
        Some((spec, from)) => (
            spec,
            from.parse::<u64>()
                .map_err(|_| format!("{from:?} after @ is not a round number"))?,
        ),
        None => (text, 0),
    };
    let parts: Vec<&str> = spec.split(':').collect();
    let (title, round, replica, piece) = match parts.as_slice() {
        [title, round, replica] => (title, round, replica, None),
        [title, round, replica, piece] => (title, round, replica, Some(piece)),
        _ => {
            return Err(format!(
                "{text:?}: expected TITLE:ROUND:primary|backup[:PIECE][@FROM_ROUND], e.g. \
                 0:5:primary or 0:5:backup:1"
            ));
        }
    };
    let number = |t: &str, what: &str| {
        t.parse::<u64>()
            .map_err(|_| format!("{text:?}: {t:?} is not a {what} number"))
    };
    let replica = match *replica {
        "primary" => rondo_model::layout::Replica::Primary,
        "backup" => rondo_model::layout::Replica::Backup,
        other => return Err(format!("{text:?}: {other:?} is neither primary nor backup")),
    };
    let piece = match piece {
        None => 0,
        Some(_) if replica == rondo_model::layout::Replica::Primary => {
            return Err(format!(
                "{text:?}: a primary is one extent; only a backup has pieces (backup:PIECE)"
            ));
        }
        Some(p) => u16::try_from(number(p, "piece")?)
            .map_err(|_| format!("{text:?}: piece {p} is past any backup's pieces"))?,
    };
    Ok(BadExtentSpec {
        title: number(title, "title")? as usize,
        playback_round: number(round, "round")? as u32,
        replica,
        piece,
        round: Round(from),
    })
}

/// One policy's figures in a `--compare-policies` run.
#[derive(serde::Serialize)]
struct PolicyRow {
    policy: String,
    /// Mean streams in playback at capacity, with its CI half-width.
    capacity_streams: f64,
    capacity_ci_half_width: f64,
    /// Server buffer reserved at capacity, mean over rounds.
    capacity_buffer_bytes: f64,
    /// The load (of the drive's bandwidth) capacity was measured at, and
    /// the share of arrivals refused there.
    capacity_load: f64,
    capacity_rejection_ratio: f64,
    /// Start-up latency, and the share refused, at `load` times Sweep's
    /// capacity.
    startup_latency_s: f64,
    rejection_ratio: f64,
    deadline_misses: u64,
}

#[derive(serde::Serialize)]
struct Comparison {
    /// The start-up runs' offered load, as a fraction of Sweep's capacity
    /// (unless `--rate` set `arrival_rate_per_round`).
    load: f64,
    arrival_rate_per_round: f64,
    rows: Vec<PolicyRow>,
    /// The policy with the most streams at capacity (the least memory
    /// among those within the best's CI), and why.
    best: String,
    why: String,
}

/// The load capacity is first measured at (seed 000's ρ = 1.5), how much it
/// grows while a policy refuses fewer than `SATURATED_REJECTION_MIN` of
/// its arrivals (at most twice), and that share. Assumption: refusing 5%
/// of arrivals means the array is full (a policy below it is carrying what
/// it is offered, and its count would say nothing about its capacity).
const CAPACITY_LOAD: f64 = 1.5;
const CAPACITY_LOAD_GROWTH: f64 = 4.0;
const SATURATED_REJECTION_MIN: f64 = 0.05;

/// Runs one configuration at a load (or a rate per round) under a label.
type RunPoint<'a> = &'a dyn Fn(
    &SimConfig,
    f64,
    Option<f64>,
    &str,
) -> Result<PointResult, rondo_experiments::spec::SpecError>;

/// Runs every policy the array executes on `config`'s drive and titles.
fn compare_policies(
    config: &SimConfig,
    run: RunPoint<'_>,
    load: f64,
    mean_title_rounds: f64,
) -> anyhow::Result<Comparison> {
    use rondo_model::array::DrivePrefetch;
    let profile = profile_by_name(&config.profile)?;
    let bound = config.read_bound(&profile)?;
    // Loads are relative to this drive: a drive faster than seed 000's
    // (whose R_disk sets μ by default) would not be saturated at ρ = 1.5.
    let config = &SimConfig {
        mu_rate_bytes_per_s: config
            .mu_rate_bytes_per_s
            .max(profile.paper_bound()?.rate_bytes_per_s as f64),
        ..config.clone()
    };
    let has_cache = DrivePrefetch::SweepPrefetch
        .unavailable(&bound, config.segment_rounds, 1)
        .is_none();
    let mut candidates: Vec<(String, SimConfig)> = vec![(
        "sweep".into(),
        SimConfig {
            read_group_rounds: 1,
            drive_prefetch: DrivePrefetch::None,
            ..config.clone()
        },
    )];
    for u in 1..=5u32 {
        candidates.push((
            format!("gpmp u={u}"),
            SimConfig {
                read_group_rounds: u + 1,
                drive_prefetch: DrivePrefetch::None,
                ..config.clone()
            },
        ));
    }
    if has_cache {
        for (name, prefetch) in [
            ("sweep-prefetch", DrivePrefetch::SweepPrefetch),
            ("gradual", DrivePrefetch::Gradual),
        ] {
            candidates.push((
                name.into(),
                SimConfig {
                    read_group_rounds: 1,
                    drive_prefetch: prefetch,
                    ..config.clone()
                },
            ));
        }
    }
    // Capacity is measured where the policy refuses streams: a policy
    // that carries far more than Sweep (GPMP with much memory) would not be
    // saturated at ρ = 1.5 of the drive's bandwidth, and a memory-bound
    // array is saturated long before it.
    let saturated = |c: &SimConfig, name: &str| -> anyhow::Result<(f64, PointResult)> {
        let mut capacity_load = CAPACITY_LOAD;
        loop {
            let result = run(c, capacity_load, None, name)?;
            if result.rejection_ratio >= SATURATED_REJECTION_MIN
                || capacity_load >= CAPACITY_LOAD * CAPACITY_LOAD_GROWTH.powi(2)
            {
                return Ok((capacity_load, result));
            }
            capacity_load *= CAPACITY_LOAD_GROWTH;
        }
    };
    let mut capacities = Vec::new();
    for (name, c) in &candidates {
        capacities.push(saturated(c, name)?);
    }
    // Every policy meets the same arrivals: `load` times Sweep's capacity
    // (Little's law over the titles' mean length), so start-up latencies
    // compare at one offered load that Sweep could carry.
    // (`--rate` instead sets the arrivals itself.)
    let sweep_capacity = capacities[0].1.mean_active_streams;
    let arrival_rate_per_round = config
        .arrival_rate_per_round
        .unwrap_or(load * sweep_capacity / mean_title_rounds.max(1.0));
    let mut rows = Vec::new();
    for ((name, c), (capacity_load, capacity)) in candidates.into_iter().zip(capacities) {
        // `run` runs the same titles under every policy (their charges
        // follow it).
        let at_load = run(&c, load, Some(arrival_rate_per_round), &name)?;
        rows.push(PolicyRow {
            policy: name,
            capacity_streams: capacity.mean_active_streams,
            capacity_ci_half_width: capacity.ci_half_width,
            capacity_buffer_bytes: capacity.mean_buffer_bytes,
            capacity_load,
            capacity_rejection_ratio: capacity.rejection_ratio,
            startup_latency_s: at_load.mean_startup_latency_s,
            rejection_ratio: at_load.rejection_ratio,
            deadline_misses: at_load.deadline_misses + capacity.deadline_misses,
        });
    }
    let top = rows
        .iter()
        .map(|r| r.capacity_streams)
        .fold(f64::NEG_INFINITY, f64::max);
    let margin = rows
        .iter()
        .find(|r| r.capacity_streams == top)
        .map_or(0.0, |r| r.capacity_ci_half_width);
    let leader = rows
        .iter()
        .find(|r| r.capacity_streams == top)
        .map(|r| r.policy.clone())
        .unwrap_or_default();
    let best = rows
        .iter()
        .filter(|r| r.capacity_streams >= top - margin)
        .min_by(|a, b| a.capacity_buffer_bytes.total_cmp(&b.capacity_buffer_bytes))
        .map(|r| r.policy.clone())
        .unwrap_or_default();
    let why = if best == leader {
        "the most streams at capacity".to_string()
    } else {
        format!(
            "no policy carries significantly more streams ({leader}'s {top:.1} ± {margin:.1} \
             is the most) and it needs the least memory among those that come close"
        )
    };
    Ok(Comparison {
        load,
        arrival_rate_per_round,
        rows,
        best,
        why,
    })
}

fn print_comparison(c: &Comparison) {
    let mut table = comfy_table::Table::new();
    table.load_style(comfy_table::presets::UTF8_FULL_CONDENSED);
    table.set_header(vec![
        "policy".to_string(),
        "streams at capacity".into(),
        "memory there (MiB)".into(),
        "capacity at ρ (refused)".into(),
        format!("start-up at {} × Sweep's capacity (s)", c.load),
        "refused there".into(),
        "misses".into(),
    ]);
    for r in &c.rows {
        table.add_row(vec![
            r.policy.clone(),
            format!(
                "{:.1} ± {:.1}",
                r.capacity_streams, r.capacity_ci_half_width
            ),
            format!("{:.1}", r.capacity_buffer_bytes / (1u64 << 20) as f64),
            format!(
                "{} ({:.3}){}",
                r.capacity_load,
                r.capacity_rejection_ratio,
                if r.capacity_rejection_ratio < SATURATED_REJECTION_MIN {
                    " not full"
                } else {
                    ""
                }
            ),
            format!("{:.2}", r.startup_latency_s),
            format!("{:.3}", r.rejection_ratio),
            r.deadline_misses.to_string(),
        ]);
    }
    println!("{table}");
    println!("best: {} ({})", c.best, c.why);
}
