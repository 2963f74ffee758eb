//! `rondo fsck`: checks a data directory (catalog against devices, every
//! extent's checksum) without changing it, prints the store's readable
//! report (or `--json`, with `"status"`: `passed`, `degraded` or `failed`),
//! and exits 0 when it passed, 2 when it is degraded (failed disks, or
//! rounds with no working replica: it serves, with less or no redundancy)
//! and 1 when anything is wrong. Titles left half-written by a crash are
//! listed but do not fail the check: the next open removes them. A
//! cluster's disks held by storage nodes are read through them
//! (`--storage-node`).

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use rondo_server::titles::DEFAULT_DATA_DIR;
use rondo_store::FsckStatus;

/// `rondo fsck`'s exit status for a degraded directory (1 is for problems).
pub const DEGRADED_EXIT: i32 = 2;

#[derive(Args, Debug)]
pub struct FsckArgs {
    /// The data directory to check (stop the server that owns it first).
    #[arg(long, value_name = "DIR", default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// A cluster's storage node (`rondo node storage`) that holds disks
    /// whose devices this directory does not (repeat for each node): those
    /// disks are read through it, as the manager reads them. Stop the
    /// manager first; the nodes may keep running.
    #[arg(long = "storage-node", value_name = "HOST:PORT")]
    pub storage_nodes: Vec<String>,
}

pub fn run(args: FsckArgs) -> anyhow::Result<()> {
    let report = if args.storage_nodes.is_empty() {
        rondo_store::fsck(&args.data_dir)
    } else {
        let config = rondo_store::ArrayConfig::load(&args.data_dir)
            .with_context(|| format!("reading {}", args.data_dir.display()))?;
        let nodes = rondo_cluster::StorageNodes::connect(
            &args.storage_nodes,
            &config.array_id.to_string(),
            config.disk_count,
        )
        .context("reaching the storage nodes")?;
        rondo_store::fsck_with_devices_elsewhere(&args.data_dir, &nodes.remote_devices())
    };
    let status = report.status();
    if args.json {
        let mut value = serde_json::to_value(&report)?;
        value["status"] = serde_json::to_value(status)?;
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print!("{report}");
    }
    match status {
        FsckStatus::Passed => Ok(()),
        FsckStatus::Failed => bail!(
            "fsck found {} problem(s) in {}",
            report.problems.len(),
            args.data_dir.display()
        ),
        FsckStatus::Degraded => {
            eprintln!(
                "fsck: {} is degraded ({} failed disk(s), {} round(s) with no working replica); \
                 exit status {DEGRADED_EXIT}",
                args.data_dir.display(),
                report.failed_disks.len(),
                report.lost_rounds.len()
            );
            std::process::exit(DEGRADED_EXIT);
        }
    }
}
