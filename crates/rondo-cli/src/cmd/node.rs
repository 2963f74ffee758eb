//! `rondo node`: a cluster's nodes as processes (seed 001, docs/cluster.md).
//!
//! `rondo node storage` reads some of an array's disks for the cluster's
//! manager (`rondo serve --storage-node HOST:PORT`) over gRPC, until SIGTERM
//! or SIGINT. Everything else is `rondo_cluster`'s.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use rondo_cluster::{StorageNodeConfig, StorageNodeService};
use rondo_model::units::DiskIndex;
use rondo_server::{init_logging, shutdown_signal};

#[derive(Subcommand, Debug)]
pub enum NodeCommand {
    /// A storage node: reads the given disks of a data directory for the
    /// manager, in the rounds and order the manager's array plans, paced to
    /// the disk model as `rondo serve` paces its own.
    Storage(StorageArgs),
}

#[derive(Args, Debug)]
pub struct StorageArgs {
    /// The array's data directory (its rondo.toml and device files; the
    /// manager owns its catalog).
    #[arg(long, value_name = "DIR")]
    pub data_dir: PathBuf,
    /// The disks this node reads, comma-separated (e.g. 0,1).
    #[arg(long, value_name = "LIST", value_delimiter = ',', required = true)]
    pub disks: Vec<u32>,
    /// Address the node's gRPC service listens on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7400")]
    pub listen: SocketAddr,
    /// The node's name in the cluster (default: storage-<first disk>).
    #[arg(long, value_name = "NAME")]
    pub node_id: Option<String>,
    /// Read devices through the page cache (for filesystems that refuse
    /// O_DIRECT, such as tmpfs).
    #[arg(long)]
    pub buffered: bool,
    /// Print the node's address and disks as JSON once it listens.
    #[arg(long)]
    pub json: bool,
}

pub fn run(command: NodeCommand) -> anyhow::Result<()> {
    match command {
        NodeCommand::Storage(args) => storage(args),
    }
}

fn storage(args: StorageArgs) -> anyhow::Result<()> {
    init_logging();
    let mut disks: Vec<DiskIndex> = args.disks.iter().map(|&d| DiskIndex(d)).collect();
    disks.sort();
    disks.dedup();
    if disks.len() != args.disks.len() {
        bail!("--disks names a disk twice: {:?}", args.disks);
    }
    let node_id = args
        .node_id
        .clone()
        .unwrap_or_else(|| format!("storage-{}", disks.first().map(|d| d.0).unwrap_or(0)));
    let service = StorageNodeService::open(&StorageNodeConfig {
        data_dir: args.data_dir.clone(),
        disks: disks.clone(),
        node_id: node_id.clone(),
        buffered: args.buffered,
    })
    .with_context(|| format!("storage node {node_id}"))?;
    let array_id = service.array_id().to_string();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("rondo-node")
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("listening on {}", args.listen))?;
        let address = listener
            .local_addr()
            .context("reading the listen address")?;
        let disk_list: Vec<u32> = disks.iter().map(|d| d.0).collect();
        if args.json {
            println!(
                "{}",
                serde_json::json!({
                    "node_id": node_id,
                    "address": address.to_string(),
                    "array_id": array_id,
                    "disks": disk_list,
                })
            );
        } else {
            println!(
                "storage node {node_id} reads disks {disk_list:?} of array {array_id} from {}",
                args.data_dir.display()
            );
            println!("  listening on {address}: give the manager --storage-node {address}");
            println!("Press Ctrl-C to stop.");
        }
        tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .add_service(service.into_server())
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                shutdown_signal(),
            )
            .await
            .context("serving gRPC")
    })
}
