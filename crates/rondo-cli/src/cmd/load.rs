//! `rondo load` (being built; see the issue tracker).

use clap::Args;

#[derive(Args, Debug)]
pub struct LoadArgs {}

pub fn run(_args: LoadArgs) -> anyhow::Result<()> {
    anyhow::bail!("rondo load is not available in this build yet")
}
