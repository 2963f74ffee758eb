//! `rondo fsck`: checks a data directory (catalog against devices, every
//! extent's checksum) without changing it, prints the store's readable
//! report (or `--json`), and exits non-zero when anything is wrong. Titles
//! left half-written by a crash are listed but do not fail the check: the
//! next open removes them.

use std::path::PathBuf;

use anyhow::bail;
use clap::Args;
use rondo_server::titles::DEFAULT_DATA_DIR;

#[derive(Args, Debug)]
pub struct FsckArgs {
    /// The data directory to check (stop the server that owns it first).
    #[arg(long, value_name = "DIR", default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: FsckArgs) -> anyhow::Result<()> {
    let report = rondo_store::fsck(&args.data_dir);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{report}");
    }
    if !report.passed() {
        bail!(
            "fsck found {} problem(s) in {}",
            report.problems.len(),
            args.data_dir.display()
        );
    }
    Ok(())
}
