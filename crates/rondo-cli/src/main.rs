//! The `rondo` binary: argument parsing, dispatch and printing only.
//!
//! Every decision lives in the library crates; each subcommand module here
//! turns parsed arguments into library calls and prints a table or `--json`.

mod cmd;

use clap::{Parser, Subcommand};

/// rondo: a video-on-demand server that guarantees every admitted stream its
/// data on time, and a capacity planner that predicts, by simulating the same
/// code, how many streams a configuration carries.
#[derive(Parser, Debug)]
#[command(name = "rondo", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Disk profiles: list them, describe one (geometry, zone rates, seek,
    /// round capacity), or replay a request trace through the disk model.
    #[command(subcommand)]
    Disk(cmd::disk::DiskCommand),
    /// Synthetic VBR/CBR traces: generate one, or describe a trace's
    /// per-round statistics.
    #[command(subcommand)]
    Trace(cmd::trace::TraceCommand),
    /// Capacity planning for one configuration: mean active streams with its
    /// confidence interval, rejection ratio, capacity (ρ = 1.5), reserved and
    /// measured disk time, and deadline misses.
    Simulate(Box<cmd::simulate::SimulateArgs>),
    /// Experiments: a published figure or any sweep, with replications,
    /// confidence intervals, tables, JSON/CSV and plots.
    #[command(subcommand)]
    Experiment(cmd::experiment::ExperimentCommand),
    /// Serve titles over HTTP from a data directory (full operation). With no
    /// arguments: ./rondo-data with 4 emulated Cheetah disks and sample titles.
    Serve(Box<cmd::serve::ServeArgs>),
    /// Store media files as titles (hands them to a running server that owns
    /// the data directory).
    Ingest(cmd::ingest::IngestArgs),
    /// Check a data directory: catalog against devices and every checksum.
    Fsck(cmd::fsck::FsckArgs),
    /// Tiers below the array (seed 002): add an emulated jukebox farm, list
    /// tier titles, pin titles on the array.
    #[command(subcommand)]
    Tier(cmd::tier::TierCommand),
    /// Benchmarks: admission decisions per second and memory, simulated
    /// stream-rounds per second.
    #[command(subcommand)]
    Bench(cmd::bench::BenchCommand),
    /// Load generator: real HTTP clients arriving as a Poisson process with
    /// Zipf title popularity, playing at their schedule, measuring start-up
    /// latency and stalls.
    Load(cmd::load::LoadArgs),
    /// Operator actions on a running server: fail, replace and restore disks.
    #[command(subcommand)]
    Admin(cmd::admin::AdminCommand),
    /// A cluster's nodes on separate hosts (seed 001): a storage node reads
    /// its disks for a `rondo serve --storage-node` manager over gRPC.
    #[command(subcommand)]
    Node(cmd::node::NodeCommand),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Disk(c) => cmd::disk::run(c),
        Command::Trace(c) => cmd::trace::run(c),
        Command::Simulate(a) => cmd::simulate::run(*a),
        Command::Experiment(c) => cmd::experiment::run(c),
        Command::Serve(a) => cmd::serve::run(*a),
        Command::Ingest(a) => cmd::ingest::run(a),
        Command::Fsck(a) => cmd::fsck::run(a),
        Command::Tier(c) => cmd::tier::run(c),
        Command::Bench(c) => cmd::bench::run(c),
        Command::Load(a) => cmd::load::run(a),
        Command::Admin(c) => cmd::admin::run(c),
        Command::Node(c) => cmd::node::run(c),
    };
    if let Err(err) = result {
        eprintln!("rondo: error: {err:#}");
        std::process::exit(1);
    }
}
