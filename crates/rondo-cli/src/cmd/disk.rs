//! `rondo disk`: list profiles, describe one, replay a request trace.

use std::path::PathBuf;

use clap::{Subcommand, ValueEnum};

#[derive(Subcommand, Debug)]
pub enum DiskCommand {
    /// List the built-in disk profiles.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Describe a profile: geometry, per-zone media rates, mean seek over random
    /// cylinder pairs, mean rotational latency, and the paper-mode round bound.
    Describe {
        /// Profile name, as `rondo disk list` shows it (e.g. `cheetah-4lp`).
        profile: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Replay a read trace through the detailed disk model.
    ///
    /// TRACE.csv has a header line and columns `arrival_ms,lbn,sectors`
    /// (512-byte sectors, reads). Output, in input order:
    /// `id,arrival_ms,lbn,sectors,response_ms` (response = completion - arrival).
    /// The disk starts idle at time 0, heads at cylinder 0, angle 0, cache empty.
    Replay {
        /// Profile name.
        profile: String,
        /// The request trace (CSV).
        trace: PathBuf,
        /// Queue discipline for requests waiting at the disk.
        #[arg(long, value_enum, default_value_t = SchedulerArg::Fcfs)]
        scheduler: SchedulerArg,
    },
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedulerArg {
    /// First come, first served.
    Fcfs,
    /// C-SCAN (C-LOOK): ascending start LBN from the last dispatched, wrapping to the lowest.
    Cscan,
}

pub fn run(command: DiskCommand) -> anyhow::Result<()> {
    let _ = command;
    anyhow::bail!("rondo disk: not built yet")
}
