//! `rondo ingest` (being built; see the issue tracker).

use clap::Args;

#[derive(Args, Debug)]
pub struct IngestArgs {}

pub fn run(_args: IngestArgs) -> anyhow::Result<()> {
    anyhow::bail!("rondo ingest is not available in this build yet")
}
