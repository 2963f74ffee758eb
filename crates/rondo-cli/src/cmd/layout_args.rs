//! The layout flags shared by the commands that create a data directory or
//! a simulated array: `--layout variable-grain|segments` and
//! `--segment-rounds N` (docs/layout.md).

use clap::{Args, ValueEnum};
use rondo_model::layout::DEFAULT_SEGMENT_ROUNDS;

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutArg {
    /// Seed 000: round i of a title on disk (start + i) mod D.
    VariableGrain,
    /// Seeds 003 and 004: runs of consecutive rounds contiguous on one disk,
    /// runs round-robin over the disks (prefetching and combined reads need
    /// it).
    Segments,
}

/// `--layout` and `--segment-rounds`.
#[derive(Args, Clone, Debug, Default)]
pub struct LayoutArgs {
    /// Layout of a new data directory or simulated array: `variable-grain`
    /// (seed 000, the default) or `segments` (seeds 003 and 004); for an
    /// existing data directory it must match.
    #[arg(long, value_enum)]
    pub layout: Option<LayoutArg>,
    /// Rounds per segment of the `segments` layout [default: 32].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(2..))]
    pub segment_rounds: Option<u32>,
    /// Disk groups G of a new data directory or simulated array (seed 000
    /// §8): disk d is in group d mod G and each backup stays in its
    /// primary's group, so a storage node holding G consecutive disks can
    /// fail whole under `minimum`. G must divide the disks into groups of
    /// at least two [default: 1, one group]; for an existing data directory
    /// it must match.
    #[arg(long, value_name = "G", value_parser = clap::value_parser!(u32).range(1..))]
    pub disk_groups: Option<u32>,
    /// W, the disks each title of a new data directory or simulated array
    /// is striped over, from its start disk (seed 001's placement: a title
    /// on S of the storage nodes, W = S × disks per node); titles start W
    /// disks apart. 0 or the disk count: every disk (seed 000) [default:
    /// 0]; for an existing data directory it must match.
    #[arg(long, value_name = "W")]
    pub stripe_disks: Option<u32>,
}

impl LayoutArgs {
    /// Rounds per run the flags ask for, if they ask: 1 for
    /// `variable-grain`, N (or the default) for `segments`.
    pub fn segment_rounds(&self) -> anyhow::Result<Option<u32>> {
        match (self.layout, self.segment_rounds) {
            (None, None) => Ok(None),
            (Some(LayoutArg::VariableGrain), None) => Ok(Some(1)),
            (Some(LayoutArg::VariableGrain), Some(n)) => anyhow::bail!(
                "--segment-rounds {n} is for the segments layout; --layout variable-grain has \
                 one round per disk"
            ),
            (Some(LayoutArg::Segments), n) | (None, n @ Some(_)) => {
                Ok(Some(n.unwrap_or(DEFAULT_SEGMENT_ROUNDS)))
            }
        }
    }
}

/// "variable-grain" or "segments (N rounds per segment)", for messages.
pub fn layout_name(segment_rounds: u32) -> String {
    match segment_rounds {
        0 | 1 => "variable-grain".to_string(),
        n => format!("segments ({n} rounds per segment)"),
    }
}
