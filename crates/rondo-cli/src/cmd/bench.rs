//! `rondo bench` (being built; see the issue tracker).

use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Not available in this build yet.
    Pending,
}

pub fn run(_command: BenchCommand) -> anyhow::Result<()> {
    anyhow::bail!("rondo bench is not available in this build yet")
}
