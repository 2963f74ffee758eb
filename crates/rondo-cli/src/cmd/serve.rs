//! `rondo serve` (being built; see the issue tracker).

use clap::Args;

#[derive(Args, Debug)]
pub struct ServeArgs {}

pub fn run(_args: ServeArgs) -> anyhow::Result<()> {
    anyhow::bail!("rondo serve is not available in this build yet")
}
