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
    /// the disk model as `rondo serve` paces its own, and takes the
    /// manager's writes to them (ingest, rebuild copies).
    Storage(StorageArgs),
    /// An interface node: serves a cluster's clients (the player page, the
    /// API, streams) apart from the object manager, relaying each stream
    /// through an interface buffer so that a manager's loss and its
    /// standby's takeover do not reach the clients (docs/cluster.md).
    Interface(InterfaceArgs),
}

#[derive(Args, Debug)]
pub struct InterfaceArgs {
    /// Address the node's HTTP server listens on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8090")]
    pub listen: SocketAddr,
    /// The object manager's URL (e.g. http://10.0.0.1:8080); several,
    /// comma-separated, are tried in turn. Without it, give --etcd: the
    /// node follows the manager elected there.
    #[arg(
        long,
        value_name = "URLS",
        value_delimiter = ',',
        required_unless_present = "etcd"
    )]
    pub manager: Vec<String>,
    /// The interface buffer B_I, in seconds of playback: how long each
    /// stream is held back, and so the longest gap in the manager's stream
    /// (a takeover) its client never sees. Clients start this much later.
    #[arg(long, value_name = "S", default_value_t = HOLD_S_DEFAULT)]
    pub buffer_s: f64,
    /// Seconds a broken stream keeps asking the managers for its rest
    /// before its client's response ends short.
    #[arg(long, value_name = "S", default_value_t = 30)]
    pub resume_timeout_s: u64,
    /// The node's name in the cluster (default: interface-<listen address>).
    #[arg(long, value_name = "NAME")]
    pub node_id: Option<String>,
    /// The URL clients reach this node at, as registered in etcd (default:
    /// http://<listen address>).
    #[arg(long, value_name = "URL")]
    pub advertise_url: Option<String>,
    /// A data directory of the node's own (created if absent) for local
    /// copies of popular titles (seed 001's LDSS, with the manager's
    /// `rondo serve --retrieval ldss`): the node runs rondo's server over
    /// it on a loopback port and serves the titles it is given to copy
    /// from there (docs/cluster.md, "Local copies").
    #[arg(long, value_name = "DIR")]
    pub local_data_dir: Option<std::path::PathBuf>,
    /// Disks of a new --local-data-dir (emulated, the default profile,
    /// `none` reservation: a copy's original stays on the storage nodes).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        requires = "local_data_dir"
    )]
    pub local_disks: u32,
    /// With a manager's --retrieval lmss: seconds of each local copy, from
    /// the title's start, kept in this node's memory. A viewer's first
    /// seconds are sent from memory and the rest is read from the local
    /// disk only shortly before the viewer needs it (seed 001's LMSS).
    /// Assumption: 30 s; the simulated Figure 11 kept 16 MiB (89 s at
    /// Paragon's 1.5 Mbit/s).
    #[arg(
        long,
        value_name = "S",
        default_value_t = 30.0,
        requires = "local_data_dir"
    )]
    pub memory_prefix_s: f64,
    /// B_I_tot, the node's buffer for all its streams, in MiB (seed 001
    /// §7.1, condition (4)): each stream reserves B_Ij, the most bytes any
    /// buffer's length (--buffer-s) and one round of its title carry, and
    /// a stream that would take the total to B_I_tot or past it is refused
    /// (503, reason interface_buffer), so the node never holds more than
    /// its memory allows. Default: no limit.
    #[arg(long, value_name = "MIB")]
    pub buffer_total_mib: Option<f64>,
    /// Print the node's address as JSON once it listens.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub etcd: EtcdArgs,
}

/// The interface buffer's default. A stream's slack when its manager dies
/// can be as little as the buffer (the kill just before the manager's next
/// round), and its rest's first bytes come after the takeover (the
/// standby's answer, measured 3.0–3.6 s after a kill, `cluster_interface`)
/// plus up to three of the new manager's rounds (the rest of its round in
/// progress, `RESUME_MARGIN_ROUNDS`, the read round: measured 3.0 s with
/// 1 s rounds). Measured with 6 s: 72 late release rounds in 1 of 10 runs
/// (docs/cluster.md, "How much buffer a takeover needs"). 8 s covers a
/// 3.6 s takeover and three 1 s rounds with 1.4 s to spare (assumption:
/// rounds of at most 1 s, a takeover within about 4 s).
const HOLD_S_DEFAULT: f64 = 8.0;

#[derive(Args, Debug)]
pub struct StorageArgs {
    /// The array's data directory: its rondo.toml and the device files of
    /// this node's disks (the manager's directory, shared, or one of the
    /// node's own holding a copy of rondo.toml and only its devices; the
    /// manager owns the catalog).
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
        NodeCommand::Interface(args) => interface(args),
    }
}

fn interface(args: InterfaceArgs) -> anyhow::Result<()> {
    init_logging();
    if !(args.buffer_s.is_finite() && args.buffer_s >= 0.0) {
        bail!(
            "--buffer-s {}: a number of seconds, 0 or more",
            args.buffer_s
        );
    }
    if let Some(mib) = args.buffer_total_mib
        && !(mib.is_finite() && mib > 0.0)
    {
        bail!("--buffer-total-mib {mib}: a positive number of MiB");
    }
    let node_id = args
        .node_id
        .clone()
        .unwrap_or_else(|| format!("interface-{}", args.listen));
    let managers = match args.etcd.config() {
        Some(etcd) => rondo_cluster::Managers::Etcd(etcd),
        None => rondo_cluster::Managers::Listed(args.manager.clone()),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("rondo-interface")
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("listening on {}", args.listen))?;
        let address = listener
            .local_addr()
            .context("reading the listen address")?;
        let advertised = match &args.advertise_url {
            Some(url) => url.clone(),
            None if address.ip().is_unspecified() => {
                bail!("listening on {address}: give --advertise-url URL, the address clients reach this node at")
            }
            None => format!("http://{address}"),
        };
        let local_server = match &args.local_data_dir {
            Some(dir) => Some(start_local_server(dir, args.local_disks).await?),
            None => None,
        };
        let config = rondo_cluster::InterfaceConfig {
            node_id: node_id.clone(),
            managers,
            hold_ns: (args.buffer_s * 1e9) as u64,
            resume_timeout: std::time::Duration::from_secs(args.resume_timeout_s),
            url: advertised.clone(),
            memory_prefix_ns: (args.memory_prefix_s.max(0.0) * 1e9) as u64,
            buffer_total_bytes: args
                .buffer_total_mib
                .map(|mib| (mib * 1024.0 * 1024.0) as u64),
            local: local_server.as_ref().map(|s| rondo_cluster::LocalServer {
                url: s.url(),
                token: s.token().to_string(),
            }),
        };
        let node = rondo_cluster::InterfaceNode::new(config)
            .await
            .map_err(|e| anyhow::anyhow!("interface node {node_id}: {e}"))?;
        let copies_found = node
            .find_local_copies()
            .await
            .map_err(|e| anyhow::anyhow!("interface node {node_id}: its local server: {e}"))?;
        let _registration = register(
            args.etcd.config(),
            rondo_cluster::Role::Interface,
            &node_id,
            &advertised,
            Vec::new(),
        )
        .await?;
        if args.json {
            println!(
                "{}",
                serde_json::json!({
                    "node_id": node_id,
                    "address": address.to_string(),
                    "url": format!("http://{address}"),
                    "advertised": advertised,
                    "buffer_seconds": args.buffer_s,
                    "etcd": args.etcd.etcd,
                    "manager": args.manager,
                    "local_server": local_server.as_ref().map(|s| s.url()),
                    "local_copies_found": copies_found,
                })
            );
        } else {
            println!("interface node {node_id} serves clients at http://{address}");
            match &args.etcd.etcd {
                Some(etcd) => println!(
                    "  following the manager elected in etcd {etcd} (cluster {}); registered as {advertised}",
                    args.etcd.cluster
                ),
                None => println!("  for the manager at {}", args.manager.join(", ")),
            }
            if let (Some(dir), Some(server)) = (&args.local_data_dir, &local_server) {
                println!(
                    "  local copies of popular titles in {} (its server at {}; {copies_found} found)",
                    dir.display(),
                    server.url()
                );
            }
            println!(
                "  each stream held back {} s (the interface buffer); Press Ctrl-C to stop.",
                args.buffer_s
            );
        }
        let served = node
            .serve(listener, shutdown_signal())
            .await
            .context("serving HTTP");
        if let Some(server) = local_server {
            server.shutdown().await;
        }
        served
    })
}

/// The interface node's own server over `dir` (created with `disks`
/// emulated disks of the default profile when absent), on a loopback port.
async fn start_local_server(
    dir: &std::path::Path,
    disks: u32,
) -> anyhow::Result<rondo_server::RunningServer> {
    anyhow::ensure!(disks >= 1, "--local-disks must be at least 1");
    let mut create = rondo_store::titles::default_store_config();
    create.disk_count = disks;
    // A copy needs no backup: the title is still on the storage nodes, and
    // a viewer whose local read fails can be relayed from there.
    create.scheme = rondo_model::reservation::Scheme::None;
    let (store, _created) = rondo_store::titles::open_or_create(dir, create)
        .with_context(|| format!("opening the local data directory {}", dir.display()))?;
    let config = rondo_server::ServerConfig {
        listen: "127.0.0.1:0".parse().expect("a loopback address"),
        // Every stream comes from this node: a per-client cap (64 by
        // default) would cap the copies' viewers. Measured: with it, 2
        // local disks carried 256 viewers in a 5-minute run where 1
        // storage disk carried 475 (docs/cluster.md).
        connections: rondo_server::ConnectionLimits {
            connections_per_client_max: 0,
            ..rondo_server::ConnectionLimits::default()
        },
        ..rondo_server::ServerConfig::default()
    };
    rondo_server::RunningServer::start(store, config)
        .await
        .with_context(|| format!("starting the local server on {}", dir.display()))
}

/// With etcd, registers this node (`role`, `id`, the `address` others reach
/// it at, its `disks`), waiting at most 20 s for etcd to answer, and keeps
/// it registered until the answer is dropped.
async fn register(
    etcd: Option<rondo_cluster::EtcdConfig>,
    role: rondo_cluster::Role,
    id: &str,
    address: &str,
    disks: Vec<u32>,
) -> anyhow::Result<Option<AbortOnDrop>> {
    let Some(etcd) = etcd else {
        return Ok(None);
    };
    let info = rondo_cluster::coord::NodeInfo {
        id: id.to_string(),
        role: role.name().into(),
        address: address.to_string(),
        disks,
    };
    let (registered, mut told) = tokio::sync::watch::channel(0u64);
    let endpoints = etcd.endpoints.join(",");
    let task = tokio::spawn(rondo_cluster::membership::keep_registered(
        etcd, role, info, registered,
    ));
    tokio::time::timeout(
        std::time::Duration::from_secs(20),
        told.wait_for(|&n| n > 0),
    )
    .await
    .map_err(|_| anyhow::anyhow!("etcd at {endpoints} did not answer within 20 s"))?
    .context("registering in etcd")?;
    Ok(Some(AbortOnDrop(task)))
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
        let _registration = register(
            args.etcd.config(),
            rondo_cluster::Role::Storage,
            &node_id,
            &advertised,
            disk_list.clone(),
        )
        .await?;
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
