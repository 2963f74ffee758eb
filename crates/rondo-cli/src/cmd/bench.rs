//! `rondo bench`: benchmarks kept in the repository (results in
//! `docs/benchmarks.md`).
//!
//! - `rondo bench admission`: admission decisions per second, decision and
//!   release latency, and resident memory, per number of disks and
//!   reservation scheme, on seed 000's set-up (Cheetah disks, the six Table 3
//!   titles, paper bound, ρ = 0.8, look-ahead ⌈1/λ⌉). Each configuration runs
//!   in a child process (the hidden `rondo bench admission-one`) so that its
//!   peak resident memory (`VmHWM`) is its own.
//! - `rondo bench simulate`: simulated stream-rounds per second of whole
//!   simulation runs in admission-only and simulated-disk mode.
//!
//! The set-up is exactly the simulator's (`rondo_sim::run::prepare`); only
//! the timing is done here, since the simulator never reads the wall clock.
//! Run benchmarks on a release build: `cargo run --release -- bench ...`.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};
use serde::{Deserialize, Serialize};

use rondo_experiments::spec::titles_for;
use rondo_model::layout::{ReplicaPlacement, RoundRobinCounter};
use rondo_model::reservation::Scheme;
use rondo_model::units::{Round, StreamId, TitleId};
use rondo_sim::run::{self, BoundKind, Mode, SimConfig};
use rondo_sim::workload::{PoissonArrivals, TitleChoice};
use rondo_store::titles::DEFAULT_LOOKAHEAD_ROUNDS;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Admission decisions per second, decision and release latency, and
    /// resident memory, per number of disks and scheme.
    ///
    /// Seed 000's set-up (Cheetah disks, six Table 3 titles, paper bound,
    /// ρ = 0.8, look-ahead ⌈1/λ⌉), built by the simulator's own `prepare`;
    /// `--titles table3-library:N` measures a library of N titles, `--rondo`
    /// admission as `rondo serve` does it.
    /// Each configuration runs in its own child process, so its peak
    /// resident memory is its own; the array is driven to steady state
    /// (Poisson arrivals at ρ·μ) before every `try_admit` of the measurement
    /// window is timed. Run on a release build: `cargo run --release -- bench
    /// admission`.
    Admission(AdmissionArgs),
    /// Simulated stream-rounds per second, admission-only and simulated-disk.
    ///
    /// Σ over rounds of streams in playback ÷ wall time of whole simulation
    /// runs (`rondo_sim::run::run`) on seed 000's set-up.
    Simulate(SimulateArgs),
    /// One admission configuration measured in this process; prints JSON.
    /// Used by `rondo bench admission`.
    #[command(hide = true)]
    AdmissionOne(AdmissionOneArgs),
}

/// Workload options shared by `admission` and its child.
#[derive(Args, Debug, Clone)]
pub struct AdmissionWorkload {
    /// Measure exactly this many rounds after warm-up (default: as many
    /// rounds as it takes to time `--decisions` decisions).
    #[arg(long)]
    rounds: Option<u64>,
    /// Decisions to time when `--rounds` is not given (the measurement
    /// stops at the end of the round in which this many were timed).
    #[arg(long, default_value_t = 50_000)]
    decisions: u64,
    /// Warm-up rounds before measuring (default: seed 000's 3000, or the
    /// reservation horizon plus 200 if that is longer; a title is 1800
    /// rounds, so the first streams have ended and the active count
    /// oscillates, damped, around its steady state).
    #[arg(long)]
    warmup_rounds: Option<u64>,
    /// Streams released (and timed) after the measurement window.
    #[arg(long, default_value_t = 1000)]
    releases: u64,
    /// Offered load ρ.
    #[arg(long, default_value_t = 0.8)]
    load: f64,
    /// Seed of the arrivals (the simulator's run seed).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Seed of the synthetic Table 3 titles.
    #[arg(long, default_value_t = 1)]
    trace_seed: u64,
    /// Titles: `table3-mixed` (seed 000's six) or `table3-library:N` (N
    /// titles of the six types in turn, each from its own trace seed).
    #[arg(long, default_value = "table3-mixed")]
    titles: String,
    /// Admit as `rondo serve` does rather than as seed 000: the rondo
    /// bound, the per-title round-robin counter, and its look-ahead.
    #[arg(long)]
    rondo: bool,
    /// Do not read this thread's scheduler and page-fault counters
    /// (`/proc/thread-self/schedstat` and `stat`) around every timed
    /// operation. By default they are read, outside the timed region, to
    /// tell which slow decisions were descheduled by the OS (another task
    /// ran) or took page faults; that costs two small file reads per
    /// operation.
    #[arg(long)]
    no_attribute: bool,
}

#[derive(Args, Debug)]
pub struct AdmissionArgs {
    /// Numbers of disks D, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "8,32,128,1024")]
    disks: Vec<u32>,
    /// Reservation schemes, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "none,unreserved,mirroring,minimum,dynamic"
    )]
    schemes: Vec<Scheme>,
    #[command(flatten)]
    workload: AdmissionWorkload,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct AdmissionOneArgs {
    #[arg(long)]
    disks: u32,
    #[arg(long)]
    scheme: Scheme,
    #[command(flatten)]
    workload: AdmissionWorkload,
}

#[derive(Args, Debug)]
pub struct SimulateArgs {
    /// Numbers of disks D, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "8,32,128,1024")]
    disks: Vec<u32>,
    /// Modes, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "admission-only,simulated-disk"
    )]
    modes: Vec<ModeArg>,
    /// Reservation scheme.
    #[arg(long, default_value = "minimum")]
    scheme: Scheme,
    /// Rounds simulated per run, from an empty array (a title is 1800
    /// rounds, so the default, seed 000's warm-up length, covers the ramp
    /// and 1200 rounds of steady state).
    #[arg(long, default_value_t = 3000)]
    rounds: u64,
    /// Offered load ρ.
    #[arg(long, default_value_t = 0.8)]
    load: f64,
    /// Seed of the run.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Seed of the synthetic Table 3 titles.
    #[arg(long, default_value_t = 1)]
    trace_seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeArg {
    AdmissionOnly,
    SimulatedDisk,
}

impl ModeArg {
    fn mode(self) -> Mode {
        match self {
            ModeArg::AdmissionOnly => Mode::AdmissionOnly,
            ModeArg::SimulatedDisk => Mode::SimulatedDisk,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ModeArg::AdmissionOnly => "admission-only",
            ModeArg::SimulatedDisk => "simulated-disk",
        }
    }
}

pub fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Admission(args) => admission(args),
        BenchCommand::AdmissionOne(args) => {
            let result = admission_one(&args)?;
            println!("{}", serde_json::to_string(&result)?);
            Ok(())
        }
        BenchCommand::Simulate(args) => simulate(args),
    }
}

/// Latency distribution of timed operations, in nanoseconds.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct Latency {
    pub count: u64,
    pub mean_ns: f64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// Operations that took more than 1 ms.
    pub over_1ms: u64,
    /// count ÷ Σ latencies: operations per second of pure operation time.
    pub per_s: f64,
}

impl Latency {
    fn from_samples(mut samples: Vec<u64>) -> Latency {
        if samples.is_empty() {
            return Latency::default();
        }
        samples.sort_unstable();
        let total: u64 = samples.iter().sum();
        let n = samples.len();
        // Nearest-rank percentiles.
        let rank = |p: f64| samples[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
        Latency {
            count: n as u64,
            mean_ns: total as f64 / n as f64,
            p50_ns: rank(0.50),
            p99_ns: rank(0.99),
            max_ns: samples[n - 1],
            over_1ms: samples.iter().filter(|&&s| s > 1_000_000).count() as u64,
            per_s: if total == 0 {
                0.0
            } else {
                n as f64 / (total as f64 / 1e9)
            },
        }
    }
}

/// What one admission configuration measured (the child's JSON).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct AdmissionResult {
    pub disks: u32,
    pub scheme: String,
    pub load: f64,
    pub arrival_rate_per_round: f64,
    pub lookahead_rounds: u64,
    pub horizon_rounds: u64,
    pub warmup_rounds: u64,
    pub measured_rounds: u64,
    /// Admitted, not yet ended streams (in playback or about to start),
    /// sampled at the start of every 100th round from round 0 to the end of
    /// the measurement window: shows the ramp and the steady state.
    pub active_streams_every_100_rounds: Vec<u64>,
    /// `VmRSS` at the same rounds: memory against active streams.
    pub vm_rss_every_100_rounds_bytes: Vec<u64>,
    /// Mean over measured rounds of admitted, not yet ended streams.
    pub mean_active_streams: f64,
    pub active_streams_at_warmup_end: u64,
    pub active_streams_at_end: u64,
    pub admitted: u64,
    pub rejected: u64,
    /// Every `try_admit` of the measurement window.
    pub decision: Latency,
    /// The same, split by outcome.
    pub decision_admitted: Latency,
    pub decision_rejected: Latency,
    /// What interrupted the timed decisions (absent with `--no-attribute`).
    pub attribution: Option<Attribution>,
    /// `release` of streams still playing, after the window.
    pub release: Latency,
    pub release_attribution: Option<Attribution>,
    pub vm_rss_before_prepare_bytes: u64,
    pub vm_rss_after_prepare_bytes: u64,
    /// Peak resident memory of the process (`VmHWM`).
    pub vm_hwm_bytes: u64,
    /// Resident memory at the end (`VmRSS`).
    pub vm_rss_bytes: u64,
    pub prepare_s: f64,
    pub warmup_s: f64,
    pub measure_s: f64,
}

/// Why timed decisions were slow, from the thread's own counters.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct Attribution {
    /// Decisions during which the thread waited for a CPU (another task ran).
    pub descheduled: u64,
    /// Decisions during which the thread took page faults.
    pub faulted: u64,
    /// Minor page faults taken inside timed decisions.
    pub minor_faults: u64,
    /// Decisions over 1 ms, and how many of them were descheduled or faulted.
    pub over_1ms: u64,
    pub over_1ms_descheduled: u64,
    pub over_1ms_faulted: u64,
    /// Decisions neither descheduled nor faulting.
    pub undisturbed: Latency,
    /// Every decision's latency minus its run-queue wait.
    pub on_cpu: Latency,
    /// The slowest operations by on-CPU time, slowest first. The run is
    /// deterministic, so an operation slow in every repetition (same
    /// `index`) is slow by its work, one slow only once by its machine.
    pub slowest_on_cpu: Vec<SlowOp>,
}

/// One timed operation, for `Attribution::slowest_on_cpu`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
pub struct SlowOp {
    /// Position among the timed operations, from 0.
    pub index: u64,
    pub latency_ns: u64,
    pub on_cpu_ns: u64,
    /// Whether the decision admitted the stream (always true for releases).
    pub succeeded: bool,
    pub descheduled: bool,
    pub minor_faults: u64,
}

/// How many slow operations `Attribution` lists.
const SLOWEST_KEPT: usize = 5;

/// This thread's scheduler and fault counters (Linux procfs).
struct ThreadCounters {
    schedstat: std::fs::File,
    stat: std::fs::File,
    buf: String,
}

#[derive(Copy, Clone, Default)]
struct Counters {
    /// Time spent runnable but waiting for a CPU.
    run_delay_ns: u64,
    /// Times the thread was put on a CPU.
    timeslices: u64,
    minor_faults: u64,
}

impl ThreadCounters {
    fn open() -> anyhow::Result<ThreadCounters> {
        let open = |p: &str| std::fs::File::open(p).with_context(|| format!("opening {p}"));
        Ok(ThreadCounters {
            schedstat: open("/proc/thread-self/schedstat")?,
            stat: open("/proc/thread-self/stat")?,
            buf: String::with_capacity(512),
        })
    }

    fn read_file(file: &mut std::fs::File, buf: &mut String) -> anyhow::Result<()> {
        use std::io::{Read, Seek, SeekFrom};
        buf.clear();
        file.seek(SeekFrom::Start(0))?;
        file.read_to_string(buf)?;
        Ok(())
    }

    fn read(&mut self) -> anyhow::Result<Counters> {
        let bad = || anyhow::anyhow!("unexpected procfs format");
        Self::read_file(&mut self.schedstat, &mut self.buf)?;
        // "run_time_ns run_delay_ns timeslices"
        let mut f = self.buf.split_whitespace().skip(1);
        let run_delay_ns = f.next().ok_or_else(bad)?.parse()?;
        let timeslices = f.next().ok_or_else(bad)?.parse()?;
        Self::read_file(&mut self.stat, &mut self.buf)?;
        // Fields after "pid (comm)": state is field 3, minflt field 10.
        let rest = &self.buf[self.buf.rfind(')').ok_or_else(bad)? + 1..];
        let minor_faults = rest.split_whitespace().nth(7).ok_or_else(bad)?.parse()?;
        Ok(Counters {
            run_delay_ns,
            timeslices,
            minor_faults,
        })
    }
}

/// Accumulates `Attribution` decision by decision.
#[derive(Default)]
struct Attributor {
    result: Attribution,
    undisturbed_ns: Vec<u64>,
    on_cpu_ns: Vec<u64>,
}

impl Attributor {
    fn record(&mut self, dt_ns: u64, succeeded: bool, before: Counters, after: Counters) {
        let wait_ns = after.run_delay_ns - before.run_delay_ns;
        let descheduled = wait_ns > 0 || after.timeslices != before.timeslices;
        let faults = after.minor_faults - before.minor_faults;
        let r = &mut self.result;
        r.descheduled += descheduled as u64;
        r.faulted += (faults > 0) as u64;
        r.minor_faults += faults;
        if dt_ns > 1_000_000 {
            r.over_1ms += 1;
            r.over_1ms_descheduled += descheduled as u64;
            r.over_1ms_faulted += (faults > 0) as u64;
        }
        if !descheduled && faults == 0 {
            self.undisturbed_ns.push(dt_ns);
        }
        let on_cpu_ns = dt_ns.saturating_sub(wait_ns);
        let op = SlowOp {
            index: self.on_cpu_ns.len() as u64,
            latency_ns: dt_ns,
            on_cpu_ns,
            succeeded,
            descheduled,
            minor_faults: faults,
        };
        let slowest = &mut self.result.slowest_on_cpu;
        let at = slowest.partition_point(|s| s.on_cpu_ns >= on_cpu_ns);
        if at < SLOWEST_KEPT {
            slowest.insert(at, op);
            slowest.truncate(SLOWEST_KEPT);
        }
        self.on_cpu_ns.push(on_cpu_ns);
    }

    fn finish(self) -> Attribution {
        Attribution {
            undisturbed: Latency::from_samples(self.undisturbed_ns),
            on_cpu: Latency::from_samples(self.on_cpu_ns),
            ..self.result
        }
    }
}

/// Resident memory figures from `/proc/self/status`, in bytes.
fn proc_status_bytes(field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")
        .context("reading /proc/self/status (Linux only)")?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))
        .with_context(|| format!("no {field} in /proc/self/status"))?;
    let kb: u64 = line[field.len() + 1..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .with_context(|| format!("unreadable {line:?}"))?;
    Ok(kb * 1024)
}

fn seed000_config(disks: u32, scheme: Scheme, load: f64, seed: u64) -> SimConfig {
    let mut config = SimConfig::seed000(disks, scheme, ReplicaPlacement::Deterministic);
    config.load = load;
    config.seed = seed;
    config
}

/// Measures one configuration in this process.
fn admission_one(args: &AdmissionOneArgs) -> anyhow::Result<AdmissionResult> {
    let w = &args.workload;
    anyhow::ensure!(args.disks >= 2, "--disks must be at least 2");
    anyhow::ensure!(w.load > 0.0, "--load must be positive");
    let vm_rss_before_prepare_bytes = proc_status_bytes("VmRSS")?;
    let mut config = seed000_config(args.disks, args.scheme, w.load, w.seed);
    if w.rondo {
        config.bound = BoundKind::Rondo;
        config.round_robin_counter = RoundRobinCounter::PerTitle;
        config.lookahead_rounds = Some(DEFAULT_LOOKAHEAD_ROUNDS);
    }
    let titles = titles_for(&w.titles, w.trace_seed, &config)?;
    let started = Instant::now();
    let mut array = run::prepare(&config, &titles)?;
    let prepare_s = started.elapsed().as_secs_f64();
    let vm_rss_after_prepare_bytes = proc_status_bytes("VmRSS")?;

    let lookahead = array.lookahead_rounds();
    let horizon = array.reservations().config().horizon_rounds;
    let warmup_rounds = w.warmup_rounds.unwrap_or((horizon + 200).max(3000));
    // Same workload as `rondo_sim::run::run`: Poisson arrivals from the run
    // seed, titles round-robin, start rounds from the next round on.
    let mut arrivals = PoissonArrivals::new(array.arrival_rate_per_round(), config.seed);
    let mut choice = TitleChoice::round_robin(titles.len());
    // Streams admitted and when they end, to pick streams to release.
    let mut live: Vec<(StreamId, Round)> = Vec::new();
    let mut samples_ns: Vec<u64> = Vec::with_capacity(w.decisions as usize);
    let (mut admitted_ns, mut rejected_ns) = (Vec::new(), Vec::new());
    let mut counters = if !w.no_attribute {
        Some(ThreadCounters::open()?)
    } else {
        None
    };
    let mut attributor = Attributor::default();
    let mut every_100 = Vec::new();
    let mut rss_every_100 = Vec::new();
    let (mut admitted, mut rejected) = (0u64, 0u64);
    let mut active_sum = 0u64;
    let mut active_at_warmup_end = 0;
    let mut measured_rounds = 0u64;
    let warmup_started = Instant::now();
    let mut measure_started = None;
    let mut round = Round(0);
    loop {
        let measuring = round >= Round(warmup_rounds);
        if measuring {
            let done = match w.rounds {
                Some(n) => measured_rounds >= n,
                None => samples_ns.len() as u64 >= w.decisions.max(1),
            };
            if done {
                break;
            }
        }
        let reservations = array.array_mut();
        reservations.begin_round_admission_only(round);
        let active = reservations.active_streams() as u64;
        if round.0.is_multiple_of(100) {
            every_100.push(active);
            rss_every_100.push(proc_status_bytes("VmRSS")?);
        }
        if round == Round(warmup_rounds) {
            active_at_warmup_end = active;
            measure_started = Some(Instant::now());
        }
        if measuring {
            active_sum += active;
            measured_rounds += 1;
        }
        if round.0.is_multiple_of(256) {
            live.retain(|&(_, end)| end > round);
        }
        for _ in 0..arrivals.arrivals_in_round(round) {
            let title = TitleId(choice.next_title() as u64);
            let outcome = if measuring {
                let before = counters.as_mut().map(|c| c.read()).transpose()?;
                let t0 = Instant::now();
                let outcome = reservations.admit_with_lookahead(&whole(title), lookahead);
                let dt = t0.elapsed().as_nanos() as u64;
                if let (Some(c), Some(before)) = (counters.as_mut(), before) {
                    attributor.record(dt, outcome.is_ok(), before, c.read()?);
                }
                samples_ns.push(dt);
                if outcome.is_ok() {
                    admitted_ns.push(dt);
                } else {
                    rejected_ns.push(dt);
                }
                outcome
            } else {
                reservations.admit_with_lookahead(&whole(title), lookahead)
            };
            match outcome {
                Ok(a) => {
                    if measuring {
                        admitted += 1;
                    }
                    let rounds = reservations
                        .title(title)
                        .expect("admitted titles are known")
                        .charges
                        .stream_rounds() as u64;
                    live.push((a.stream, a.start_round.plus(rounds)));
                }
                Err(_) if measuring => rejected += 1,
                Err(_) => {}
            }
        }
        round = round.next();
    }
    let warmup_s = measure_started
        .map(|m| m.duration_since(warmup_started))
        .unwrap_or_else(|| warmup_started.elapsed())
        .as_secs_f64();
    let measure_s = measure_started
        .map(|m| m.elapsed())
        .unwrap_or(Duration::ZERO)
        .as_secs_f64();
    let reservations = array.array_mut();
    let active_streams_at_end = reservations.active_streams() as u64;

    // Release streams still playing, spread evenly over admission order
    // (so over how far into their title they are).
    live.retain(|&(_, end)| end > round);
    let want = (w.releases as usize).min(live.len());
    let mut release_ns = Vec::with_capacity(want);
    let mut release_attributor = Attributor::default();
    if want > 0 {
        let step = live.len() as f64 / want as f64;
        for k in 0..want {
            let (stream, _) = live[(k as f64 * step) as usize];
            let before = counters.as_mut().map(|c| c.read()).transpose()?;
            let t0 = Instant::now();
            let released = reservations.release(stream);
            let dt = t0.elapsed().as_nanos() as u64;
            if let (Some(c), Some(before)) = (counters.as_mut(), before) {
                let after = c.read()?;
                if released {
                    release_attributor.record(dt, true, before, after);
                }
            }
            if released {
                release_ns.push(dt);
            }
        }
    }

    Ok(AdmissionResult {
        disks: args.disks,
        scheme: args.scheme.name().to_string(),
        load: w.load,
        arrival_rate_per_round: array.arrival_rate_per_round(),
        lookahead_rounds: lookahead,
        horizon_rounds: horizon,
        warmup_rounds,
        measured_rounds,
        active_streams_every_100_rounds: every_100,
        vm_rss_every_100_rounds_bytes: rss_every_100,
        mean_active_streams: active_sum as f64 / measured_rounds.max(1) as f64,
        active_streams_at_warmup_end: active_at_warmup_end,
        active_streams_at_end,
        admitted,
        rejected,
        decision: Latency::from_samples(samples_ns),
        decision_admitted: Latency::from_samples(admitted_ns),
        decision_rejected: Latency::from_samples(rejected_ns),
        attribution: counters.is_some().then(|| attributor.finish()),
        release: Latency::from_samples(release_ns),
        release_attribution: counters.is_some().then(|| release_attributor.finish()),
        vm_rss_before_prepare_bytes,
        vm_rss_after_prepare_bytes,
        vm_hwm_bytes: proc_status_bytes("VmHWM")?,
        vm_rss_bytes: proc_status_bytes("VmRSS")?,
        prepare_s,
        warmup_s,
        measure_s,
    })
}

/// The machine a benchmark ran on, as far as the process can tell.
#[derive(Serialize, Debug)]
struct Machine {
    cpu_model: String,
    logical_cpus: usize,
    memory_bytes: u64,
    kernel: String,
    release_build: bool,
}

fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let memory_bytes = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| {
                    l["MemTotal:".len()..]
                        .trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    Machine {
        cpu_model,
        logical_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        memory_bytes,
        kernel,
        release_build: !cfg!(debug_assertions),
    }
}

#[derive(Serialize)]
struct AdmissionReport {
    machine: Machine,
    results: Vec<AdmissionResult>,
}

fn admission(args: AdmissionArgs) -> anyhow::Result<()> {
    anyhow::ensure!(!args.disks.is_empty(), "--disks is empty");
    anyhow::ensure!(!args.schemes.is_empty(), "--schemes is empty");
    warn_if_debug();
    let exe = std::env::current_exe().context("locating the rondo executable")?;
    let w = &args.workload;
    let mut results = Vec::new();
    for &disks in &args.disks {
        for &scheme in &args.schemes {
            eprintln!("rondo bench: admission D = {disks}, {scheme} ...");
            let mut child = Command::new(&exe);
            child.args([
                "bench",
                "admission-one",
                "--disks",
                &disks.to_string(),
                "--scheme",
                scheme.name(),
                "--decisions",
                &w.decisions.to_string(),
                "--releases",
                &w.releases.to_string(),
                "--load",
                &w.load.to_string(),
                "--seed",
                &w.seed.to_string(),
                "--trace-seed",
                &w.trace_seed.to_string(),
                "--titles",
                &w.titles,
            ]);
            if w.rondo {
                child.arg("--rondo");
            }
            if let Some(r) = w.rounds {
                child.args(["--rounds", &r.to_string()]);
            }
            if let Some(r) = w.warmup_rounds {
                child.args(["--warmup-rounds", &r.to_string()]);
            }
            if w.no_attribute {
                child.arg("--no-attribute");
            }
            let output = child
                .output()
                .with_context(|| format!("running {}", exe.display()))?;
            if !output.status.success() {
                bail!(
                    "D = {disks}, {scheme}: child failed ({}): {}",
                    output.status,
                    String::from_utf8_lossy(&output.stderr).trim()
                );
            }
            let result: AdmissionResult = serde_json::from_slice(&output.stdout)
                .with_context(|| format!("D = {disks}, {scheme}: unreadable child output"))?;
            results.push(result);
        }
    }
    let report = AdmissionReport {
        machine: machine(),
        results,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_admission(&report);
    }
    Ok(())
}

fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1e3)
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1u64 << 20) as f64)
}

fn print_admission(report: &AdmissionReport) {
    let mut table = Table::new();
    table.load_style(UTF8_BORDERS_ONLY);
    table.set_header(vec![
        "D",
        "scheme",
        "active streams",
        "rejected %",
        "decisions",
        "decisions/s",
        "mean µs",
        "p50 µs",
        "p99 µs",
        "max µs",
        ">1 ms (descheduled)",
        "on-CPU max µs",
        "release p50 µs",
        "release p99 µs",
        "VmHWM MiB",
        "VmRSS MiB",
    ]);
    for r in &report.results {
        let d = &r.decision;
        let a = r.attribution.as_ref();
        table.add_row(vec![
            r.disks.to_string(),
            r.scheme.clone(),
            format!("{:.0}", r.mean_active_streams),
            format!(
                "{:.1}",
                100.0 * r.rejected as f64 / (r.admitted + r.rejected).max(1) as f64
            ),
            d.count.to_string(),
            format!("{:.0}", d.per_s),
            us(d.mean_ns),
            us(d.p50_ns as f64),
            us(d.p99_ns as f64),
            us(d.max_ns as f64),
            match a {
                Some(a) => format!("{} ({})", d.over_1ms, a.over_1ms_descheduled),
                None => d.over_1ms.to_string(),
            },
            a.map_or("-".into(), |a| us(a.on_cpu.max_ns as f64)),
            us(r.release.p50_ns as f64),
            us(r.release.p99_ns as f64),
            mib(r.vm_hwm_bytes),
            mib(r.vm_rss_bytes),
        ]);
    }
    println!("{table}");
    let m = &report.machine;
    println!(
        "machine: {}, {} logical CPUs, {:.1} GiB, kernel {}{}",
        m.cpu_model,
        m.logical_cpus,
        m.memory_bytes as f64 / (1u64 << 30) as f64,
        m.kernel,
        if m.release_build {
            ""
        } else {
            " (DEBUG BUILD: numbers not representative)"
        }
    );
    println!(
        "on-CPU: latency minus the time the thread waited for a CPU; descheduled: another task ran during the decision"
    );
    for r in report
        .results
        .iter()
        .filter(|r| r.disks == 1024 && r.scheme == "minimum")
    {
        let below = |yes: bool| if yes { "below" } else { "NOT below" };
        let d = &r.decision;
        println!(
            "D = 1024, minimum: peak memory {:.0} MB ({} 1 GB); decision p50 {:.3} ms, p99 {:.3} ms ({} 1 ms), max {:.3} ms ({} 1 ms){}",
            r.vm_hwm_bytes as f64 / 1e6,
            below(r.vm_hwm_bytes < 1_000_000_000),
            d.p50_ns as f64 / 1e6,
            d.p99_ns as f64 / 1e6,
            below(d.p99_ns < 1_000_000),
            d.max_ns as f64 / 1e6,
            below(d.max_ns < 1_000_000),
            match &r.attribution {
                Some(a) => format!(
                    ", on-CPU max {:.3} ms ({} 1 ms)",
                    a.on_cpu.max_ns as f64 / 1e6,
                    below(a.on_cpu.max_ns < 1_000_000)
                ),
                None => String::new(),
            }
        );
    }
}

/// One simulation-speed measurement.
#[derive(Serialize, Debug)]
struct SimulateResult {
    disks: u32,
    mode: &'static str,
    scheme: String,
    rounds: u64,
    /// Σ over rounds of streams in playback.
    stream_rounds: u64,
    mean_active_streams: f64,
    /// Wall time of `rondo_sim::run::run` (set-up included).
    run_s: f64,
    /// Wall time of the set-up alone (`rondo_sim::run::prepare`), measured
    /// separately.
    prepare_s: f64,
    stream_rounds_per_s: f64,
    rounds_per_s: f64,
    deadline_misses: u64,
}

#[derive(Serialize)]
struct SimulateReport {
    machine: Machine,
    results: Vec<SimulateResult>,
}

fn simulate(args: SimulateArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.rounds > 0, "--rounds must be positive");
    anyhow::ensure!(args.load > 0.0, "--load must be positive");
    warn_if_debug();
    let mut results = Vec::new();
    for &disks in &args.disks {
        for &mode in &args.modes {
            eprintln!("rondo bench: simulate D = {disks}, {} ...", mode.name());
            let mut config = seed000_config(disks, args.scheme, args.load, args.seed);
            config.mode = mode.mode();
            // Measure every round, so the run's mean active streams times
            // its rounds is the Σ of streams in playback over the whole run.
            config.warmup_rounds = 0;
            config.end_round = args.rounds;
            let titles = titles_for("table3-mixed", args.trace_seed, &config)?;
            let started = Instant::now();
            drop(run::prepare(&config, &titles)?);
            let prepare_s = started.elapsed().as_secs_f64();
            let started = Instant::now();
            let result = run::run(&config, &titles)?;
            let run_s = started.elapsed().as_secs_f64();
            let stream_rounds = (result.mean_active_streams * args.rounds as f64).round() as u64;
            results.push(SimulateResult {
                disks,
                mode: mode.name(),
                scheme: args.scheme.name().to_string(),
                rounds: args.rounds,
                stream_rounds,
                mean_active_streams: result.mean_active_streams,
                run_s,
                prepare_s,
                stream_rounds_per_s: stream_rounds as f64 / run_s,
                rounds_per_s: args.rounds as f64 / run_s,
                deadline_misses: result.deadline_misses,
            });
        }
    }
    let report = SimulateReport {
        machine: machine(),
        results,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    let mut table = Table::new();
    table.load_style(UTF8_BORDERS_ONLY);
    table.set_header(vec![
        "D",
        "mode",
        "rounds",
        "mean active streams",
        "stream-rounds",
        "wall s",
        "set-up s (separately)",
        "stream-rounds/s",
        "rounds/s",
    ]);
    for r in &report.results {
        table.add_row(vec![
            r.disks.to_string(),
            r.mode.to_string(),
            r.rounds.to_string(),
            format!("{:.0}", r.mean_active_streams),
            r.stream_rounds.to_string(),
            format!("{:.3}", r.run_s),
            format!("{:.3}", r.prepare_s),
            format!("{:.0}", r.stream_rounds_per_s),
            format!("{:.0}", r.rounds_per_s),
        ]);
    }
    println!("{table}");
    Ok(())
}

fn warn_if_debug() {
    if cfg!(debug_assertions) {
        eprintln!(
            "rondo bench: this is a debug build; run `cargo run --release -- bench ...` for numbers worth recording"
        );
    }
}

/// An admission request for a whole title (what the benchmark offers).
fn whole(title: TitleId) -> rondo_model::array::AdmitRequest {
    rondo_model::array::AdmitRequest {
        title,
        span: rondo_model::array::Span::Whole,
        prior: None,
        defer_rounds: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_percentiles_are_nearest_rank() {
        let samples: Vec<u64> = (1..=100).map(|i| i * 20_000).collect();
        let l = Latency::from_samples(samples.into_iter().rev().collect());
        assert_eq!(l.count, 100);
        assert_eq!(l.p50_ns, 50 * 20_000);
        assert_eq!(l.p99_ns, 99 * 20_000);
        assert_eq!(l.max_ns, 100 * 20_000);
        // 1 ms = 50 × 20 µs: samples 51..=100 are over it.
        assert_eq!(l.over_1ms, 50);
        assert!((l.mean_ns - 50.5 * 20_000.0).abs() < 1e-6);
        assert!((l.per_s - 1e9 / l.mean_ns).abs() < 1e-6);
        assert_eq!(Latency::from_samples(vec![]), Latency::default());
        let one = Latency::from_samples(vec![7]);
        assert_eq!((one.p50_ns, one.p99_ns, one.max_ns), (7, 7, 7));
    }

    #[test]
    fn attribution_keeps_the_slowest_on_cpu_and_subtracts_waits() {
        let c = |run_delay_ns, timeslices, minor_faults| Counters {
            run_delay_ns,
            timeslices,
            minor_faults,
        };
        let mut a = Attributor::default();
        // Undisturbed, 10 µs.
        a.record(10_000, true, c(0, 1, 0), c(0, 1, 0));
        // 4 ms, of which 3.9 ms waiting for a CPU.
        a.record(4_000_000, false, c(0, 1, 0), c(3_900_000, 2, 0));
        // 50 µs with two page faults.
        a.record(50_000, true, c(0, 2, 5), c(0, 2, 7));
        for i in 0..10 {
            a.record(1_000 + i, true, c(0, 2, 7), c(0, 2, 7));
        }
        let r = a.finish();
        assert_eq!((r.descheduled, r.faulted, r.minor_faults), (1, 1, 2));
        assert_eq!((r.over_1ms, r.over_1ms_descheduled), (1, 1));
        assert_eq!(r.undisturbed.count, 11);
        assert_eq!(r.on_cpu.max_ns, 100_000);
        let order: Vec<(u64, u64)> = r
            .slowest_on_cpu
            .iter()
            .map(|s| (s.index, s.on_cpu_ns))
            .collect();
        assert_eq!(
            order,
            [
                (1, 100_000),
                (2, 50_000),
                (0, 10_000),
                (12, 1_009),
                (11, 1_008)
            ]
        );
        assert!(r.slowest_on_cpu[0].descheduled && !r.slowest_on_cpu[0].succeeded);
    }

    #[test]
    fn own_status_and_counters_are_readable() {
        let rss = proc_status_bytes("VmRSS").unwrap();
        let hwm = proc_status_bytes("VmHWM").unwrap();
        assert!(rss > 0 && hwm >= rss, "rss {rss} hwm {hwm}");
        assert!(proc_status_bytes("NoSuchField").is_err());
        let mut t = ThreadCounters::open().unwrap();
        let a = t.read().unwrap();
        // Touch fresh memory: minor faults can only grow.
        let v = vec![1u8; 8 << 20];
        std::hint::black_box(&v);
        let b = t.read().unwrap();
        assert!(b.minor_faults > a.minor_faults);
        assert!(b.timeslices >= a.timeslices && b.run_delay_ns >= a.run_delay_ns);
    }
}
