//! `rondo node`: a cluster's nodes as processes (seed 001, docs/cluster.md).
//!
//! `rondo node storage` reads some of an array's disks for the cluster's
//! manager (`rondo serve --storage-node HOST:PORT`) over gRPC, until SIGTERM
//! or SIGINT. With `--etcd` it registers its address and disks there while it
//! runs, so that the manager finds it. Everything else is `rondo_cluster`'s.

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
    #[command(flatten)]
    pub etcd: EtcdArgs,
    /// The address the manager reaches this node at, as registered in etcd
    /// (default: the listen address; needed when listening on 0.0.0.0).
    #[arg(long, value_name = "HOST:PORT")]
    pub advertise: Option<String>,
}

/// Where a node finds the cluster's etcd (docs/cluster.md).
#[derive(Args, Debug, Clone)]
pub struct EtcdArgs {
    /// etcd's client URLs, comma-separated (e.g. http://10.0.0.1:2379).
    /// With it, a storage node registers its address and disks there for as
    /// long as it runs, and `rondo serve` finds its storage nodes there and
    /// stands for the cluster's object manager (a second one waits as the
    /// standby).
    #[arg(long, value_name = "URLS")]
    pub etcd: Option<String>,
    /// The cluster's name in etcd (several clusters may share one etcd).
    #[arg(long, value_name = "NAME", default_value = "rondo", requires = "etcd")]
    pub cluster: String,
    /// Seconds a node's etcd lease lives without keep-alives: how long a
    /// dead node stays registered, and a standby manager waits.
    #[arg(long, value_name = "S", default_value_t = rondo_cluster::LEASE_TTL_S_DEFAULT, requires = "etcd")]
    pub lease_ttl_s: i64,
}

impl EtcdArgs {
    pub fn config(&self) -> Option<rondo_cluster::EtcdConfig> {
        self.etcd
            .as_deref()
            .map(|urls| rondo_cluster::EtcdConfig::new(urls, &self.cluster, self.lease_ttl_s))
    }
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
        let advertised = match &args.advertise {
            Some(a) => a.clone(),
            None if address.ip().is_unspecified() => {
                bail!("listening on {address}: give --advertise HOST:PORT, the address the manager reaches this node at")
            }
            None => address.to_string(),
        };
        let _registration = match args.etcd.config() {
            None => None,
            Some(etcd) => {
                let info = rondo_cluster::coord::NodeInfo {
                    id: node_id.clone(),
                    role: rondo_cluster::Role::Storage.name().into(),
                    address: advertised.clone(),
                    disks: disk_list.clone(),
                };
                let (registered, mut told) = tokio::sync::watch::channel(0u64);
                let endpoints = etcd.endpoints.join(",");
                let task = tokio::spawn(rondo_cluster::membership::keep_registered(
                    etcd,
                    rondo_cluster::Role::Storage,
                    info,
                    registered,
                ));
                tokio::time::timeout(
                    std::time::Duration::from_secs(20),
                    told.wait_for(|&n| n > 0),
                )
                .await
                .map_err(|_| anyhow::anyhow!("etcd at {endpoints} did not answer within 20 s"))?
                .context("registering in etcd")?;
                Some(AbortOnDrop(task))
            }
        };
        if args.json {
            println!(
                "{}",
                serde_json::json!({
                    "node_id": node_id,
                    "address": address.to_string(),
                    "array_id": array_id,
                    "disks": disk_list,
                    "advertised": advertised,
                    "etcd": args.etcd.etcd,
                })
            );
        } else {
            println!(
                "storage node {node_id} reads disks {disk_list:?} of array {array_id} from {}",
                args.data_dir.display()
            );
            match &args.etcd.etcd {
                Some(etcd) => println!(
                    "  listening on {address}; registered in etcd {etcd} (cluster {}) as {advertised}",
                    args.etcd.cluster
                ),
                None => println!(
                    "  listening on {address}: give the manager --storage-node {advertised}"
                ),
            }
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

/// A task aborted when dropped (a node's registration ends with it).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
