//! `rondo admin` (being built; see the issue tracker).

use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum AdminCommand {
    /// Not available in this build yet.
    Pending,
}

pub fn run(_command: AdminCommand) -> anyhow::Result<()> {
    anyhow::bail!("rondo admin is not available in this build yet")
}
