//! `rondo fsck` (being built; see the issue tracker).

use clap::Args;

#[derive(Args, Debug)]
pub struct FsckArgs {}

pub fn run(_args: FsckArgs) -> anyhow::Result<()> {
    anyhow::bail!("rondo fsck is not available in this build yet")
}
