//! `rondo trace`: generate synthetic traces and describe their per-round statistics.

use std::path::PathBuf;

use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum TraceCommand {
    /// Generate a synthetic trace of one content type.
    Generate {
        /// Content type: science-fiction, music-clip, action, talk-show,
        /// adventure, documentary (seed 000 Table 3), or a CBR / multi-bitrate type.
        #[arg(value_name = "TYPE")]
        kind: String,
        /// Seed of the generator; the same seed gives the same trace.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Output file (default: standard output).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Per-round mean, maximum and coefficient of variation of a trace.
    Describe {
        /// A content type (generated with seed 1) or a trace file.
        #[arg(value_name = "TYPE|FILE")]
        source: String,
        /// Round length in milliseconds.
        #[arg(long, default_value_t = 1000)]
        round_ms: u64,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(command: TraceCommand) -> anyhow::Result<()> {
    let _ = command;
    anyhow::bail!("rondo trace: not built yet")
}
