//! The manager's side of storage nodes: each disk a node serves is driven
//! through one gRPC stream (`StorageNode::Rounds`), behind the channel of
//! `DiskBatch`es the round driver sends any disk, answered with the same
//! `IoEvent`s and session pieces a local disk thread gives
//! (`rondo_server::executor`). The round driver and the array do not know
//! where the disk is.
//!
//! **A node lost.** When a disk's stream breaks (the node died, the
//! connection reset, HTTP/2 keep-alive found the network gone) or a batch is
//! still not done [`LOST_AFTER_ROUNDS`] rounds after its round ended, the
//! disk is lost (with `--loss-notice-rounds L` ≥ 2, already when a batch is
//! open half a round into the round after its own, and more generally
//! 2L − 3 half rounds after its round ended, so that a node that went
//! silent is noticed within the L − 1 rounds the reservation covers:
//! [`StorageNodes::with_loss_notice_rounds`]): the server fails it
//! (`DiskLost`), every read still out on
//! it completes with an I/O error (so the array re-reads it from the other
//! replica) and every batch still open ends, and batches sent to it later
//! complete the same way at once. A clean stop (the server shutting down) is
//! not a loss: the node finishes what it has.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use rondo_model::array::{Completion, Purpose, ReadOutcome};
use rondo_model::layout::Replica;
use rondo_model::units::{DiskIndex, PlaybackRound, Round, StreamId};
use rondo_server::buffers::BufferPool;
use rondo_server::executor::{DiskExecutors, DiskLost, ExecutorContext};
use rondo_server::io::{
    BATCH_QUEUE_ROUNDS, BatchReceiver, BatchRecvError, DeviceThread, DiskBatch, IoEvent, ReadDone,
    RoundClock, batch_queue,
};
use rondo_server::session::{Piece, PieceSender};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

use crate::storage_node::MESSAGE_BYTES_MAX;
use crate::wire::pb::storage_node_client::StorageNodeClient;
use crate::wire::{self, pb};

/// A batch not done this many rounds after its round ended means its node
/// is lost. Assumption: admission keeps every disk's round within the round
/// (a disk runs into the next round only under an overrun the guarantee
/// bounds), so two whole rounds late is no longer a slow disk but a node or
/// a network that stopped answering.
pub const LOST_AFTER_ROUNDS: u64 = 2;

/// HTTP/2 keep-alive on a node's connection: a network that stops carrying
/// it is found within interval + timeout even when no batch is out.
/// Assumption: 1 s + 1 s, two rounds of the default round.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a clean stop waits for a node to finish its open batches.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// Why the manager cannot use its storage nodes.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("storage node {address}: {why}")]
    Node { address: String, why: String },
    #[error("disk {disk} is served by two storage nodes, {first} and {second}")]
    DiskTwice {
        disk: DiskIndex,
        first: String,
        second: String,
    },
    #[error(
        "no storage node serves disks {missing:?} of the array's {disk_count}: start their nodes \
         and name each with --storage-node"
    )]
    DisksMissing { missing: Vec<u32>, disk_count: u32 },
}

/// One storage node as the manager found it.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub address: String,
    pub node_id: String,
    pub disks: Vec<DiskIndex>,
}

/// The manager's storage nodes: which node serves each disk.
pub struct StorageNodes {
    runtime: Arc<NodeRuntime>,
    array_id: String,
    nodes: Vec<NodeInfo>,
    disk_node: BTreeMap<DiskIndex, usize>,
    /// This manager's epoch (its etcd leadership's revision; 0 without
    /// etcd), sent when it opens a disk: a node refuses a lower one.
    manager_epoch: u64,
    /// Half rounds after its round ended that a batch may stay open before
    /// its node is lost (2 · [`LOST_AFTER_ROUNDS`] unless a loss noticed
    /// late asks for less).
    silence_half_rounds: u64,
}

/// Why a set of nodes' disk lists is not a disk → node map.
#[derive(Debug, PartialEq, Eq)]
pub enum DiskMapError {
    /// Node `node` (its index in the list) names a disk past the array.
    Beyond { node: usize, disk: u32 },
    /// Two nodes name the same disk.
    Twice {
        disk: u32,
        first: usize,
        second: usize,
    },
    /// No node names these disks.
    Missing(Vec<u32>),
}

/// The disk → node map of nodes given by their disk lists: every disk
/// `0..disk_count` on exactly one node (its index in `lists`). The one rule
/// both the manager's connection to its nodes and its discovery in etcd
/// (`membership::cover_disks`) check.
pub fn disk_map(lists: &[Vec<u32>], disk_count: u32) -> Result<BTreeMap<u32, usize>, DiskMapError> {
    let mut disk_node = BTreeMap::new();
    for (node, disks) in lists.iter().enumerate() {
        for &disk in disks {
            if disk >= disk_count {
                return Err(DiskMapError::Beyond { node, disk });
            }
            if let Some(&first) = disk_node.get(&disk) {
                return Err(DiskMapError::Twice {
                    disk,
                    first,
                    second: node,
                });
            }
            disk_node.insert(disk, node);
        }
    }
    let missing: Vec<u32> = (0..disk_count)
        .filter(|d| !disk_node.contains_key(d))
        .collect();
    if !missing.is_empty() {
        return Err(DiskMapError::Missing(missing));
    }
    Ok(disk_node)
}

/// `http://` in front of a bare `host:port`.
pub fn endpoint_uri(address: &str) -> String {
    if address.contains("://") {
        address.to_string()
    } else {
        format!("http://{address}")
    }
}

fn endpoint(address: &str) -> Result<Endpoint, RemoteError> {
    Ok(Endpoint::from_shared(endpoint_uri(address))
        .map_err(|e| RemoteError::Node {
            address: address.to_string(),
            why: format!("not an address: {e}"),
        })?
        .connect_timeout(Duration::from_secs(5))
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true)
        .tcp_nodelay(true))
}

async fn client(address: &str) -> Result<StorageNodeClient<Channel>, RemoteError> {
    let channel = endpoint(address)?
        .connect()
        .await
        .map_err(|e| RemoteError::Node {
            address: address.to_string(),
            why: format!("cannot connect: {e}"),
        })?;
    Ok(StorageNodeClient::new(channel)
        .max_decoding_message_size(MESSAGE_BYTES_MAX)
        .max_encoding_message_size(MESSAGE_BYTES_MAX))
}

/// The runtime the manager's node links run on, apart from the HTTP
/// server's (a slow client never delays a disk's answers). Stopped in the
/// background when dropped, which may happen inside the server's runtime.
struct NodeRuntime(Option<tokio::runtime::Runtime>);

impl NodeRuntime {
    fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().expect("present until dropped").handle()
    }
}

impl Drop for NodeRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl StorageNodes {
    /// Asks each node which disks it serves. Every disk of the array
    /// (`array_id`, `disk_count` disks) must be served by exactly one node
    /// of the same array. Blocks; call it outside an async runtime.
    pub fn connect(
        addresses: &[String],
        array_id: &str,
        disk_count: u32,
    ) -> Result<StorageNodes, RemoteError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("rondo-nodes")
            .enable_all()
            .build()
            .map_err(|e| RemoteError::Node {
                address: addresses.join(", "),
                why: format!("starting the runtime for node links: {e}"),
            })?;
        let (nodes, disk_node) =
            runtime.block_on(Self::describe_all(addresses, array_id, disk_count))?;
        Ok(StorageNodes {
            runtime: Arc::new(NodeRuntime(Some(runtime))),
            array_id: array_id.to_string(),
            nodes,
            disk_node,
            manager_epoch: 0,
            silence_half_rounds: 2 * LOST_AFTER_ROUNDS,
        })
    }

    /// Opens the disks as the manager of `epoch` (its etcd leadership's
    /// revision): a node then refuses any manager of a lower epoch.
    pub fn with_manager_epoch(mut self, epoch: u64) -> StorageNodes {
        self.manager_epoch = epoch;
        self
    }

    /// Finds a silent node soon enough for a loss noticed up to L rounds
    /// late (`BackupWindow::loss_notice_rounds`): a disk lost in round r
    /// must be known lost before round r + L - 1 ends, so with L ≥ 2 a
    /// batch still open 2L − 3 half rounds after its round ended (L = 2:
    /// half a round into the next) loses its node. A disk that answers
    /// within its round (what admission reserves) is never taken for
    /// lost. With L < 2 the silence rule stays [`LOST_AFTER_ROUNDS`]: a
    /// node that goes silent is then outside the guarantee.
    pub fn with_loss_notice_rounds(mut self, rounds: u32) -> StorageNodes {
        if rounds >= 2 {
            self.silence_half_rounds = 2 * u64::from(rounds) - 3;
        }
        self
    }

    async fn describe_all(
        addresses: &[String],
        array_id: &str,
        disk_count: u32,
    ) -> Result<(Vec<NodeInfo>, BTreeMap<DiskIndex, usize>), RemoteError> {
        let mut nodes = Vec::new();
        for address in addresses {
            let description = describe(address).await?;
            if description.array_id != array_id {
                return Err(RemoteError::Node {
                    address: address.clone(),
                    why: format!(
                        "it serves array {}, not this directory's {array_id}",
                        description.array_id
                    ),
                });
            }
            nodes.push(NodeInfo {
                address: address.clone(),
                node_id: description.node_id,
                disks: description.disks.iter().map(|&d| DiskIndex(d)).collect(),
            });
        }
        let lists: Vec<Vec<u32>> = nodes
            .iter()
            .map(|n| n.disks.iter().map(|d| d.0).collect())
            .collect();
        let disk_node = disk_map(&lists, disk_count).map_err(|e| match e {
            DiskMapError::Beyond { node, disk } => RemoteError::Node {
                address: nodes[node].address.clone(),
                why: format!("it claims disk {disk}, but the array has {disk_count}"),
            },
            DiskMapError::Twice {
                disk,
                first,
                second,
            } => RemoteError::DiskTwice {
                disk: DiskIndex(disk),
                first: nodes[first].address.clone(),
                second: nodes[second].address.clone(),
            },
            DiskMapError::Missing(missing) => RemoteError::DisksMissing {
                missing,
                disk_count,
            },
        })?;
        let disk_node = disk_node
            .into_iter()
            .map(|(d, n)| (DiskIndex(d), n))
            .collect();
        Ok((nodes, disk_node))
    }

    pub fn nodes(&self) -> &[NodeInfo] {
        &self.nodes
    }

    /// Every disk's device as its node holds it: the manager's store
    /// attaches these (`Store::attach_remote_device`), so ingest writes,
    /// rebuild copies, holes and syncs go to the node, and a node's devices
    /// may be its own, on a host that shares no filesystem with the
    /// manager. One connection per node, made on first use.
    pub fn remote_devices(&self) -> Vec<(DiskIndex, Arc<dyn rondo_store::RemoteDevice>)> {
        let _entered = self.runtime.handle().enter();
        let channels: Vec<Option<Channel>> = self
            .nodes
            .iter()
            .map(|node| endpoint(&node.address).ok().map(|e| e.connect_lazy()))
            .collect();
        self.disk_node
            .iter()
            .filter_map(|(&disk, &n)| {
                let channel = channels[n].clone()?;
                let node = &self.nodes[n];
                let device: Arc<dyn rondo_store::RemoteDevice> = Arc::new(NodeDevice {
                    disk,
                    location: format!(
                        "disk {disk} on storage node {} ({})",
                        node.node_id, node.address
                    ),
                    runtime: Arc::clone(&self.runtime),
                    client: StorageNodeClient::new(channel)
                        .max_decoding_message_size(MESSAGE_BYTES_MAX)
                        .max_encoding_message_size(MESSAGE_BYTES_MAX),
                    array_id: self.array_id.clone(),
                    manager_epoch: self.manager_epoch,
                });
                Some((disk, device))
            })
            .collect()
    }
}

/// How long one device access on a node may take before it fails.
/// Assumption: a stride (a few MiB) written and synced on a loaded disk
/// takes well under a second; 30 s tells a dead or cut-off node from a
/// slow one without holding an ingest for long.
const DEVICE_ACCESS_TIMEOUT: Duration = Duration::from_secs(30);

/// A disk's device held by its storage node, used through `Device` RPCs.
struct NodeDevice {
    disk: DiskIndex,
    location: String,
    runtime: Arc<NodeRuntime>,
    client: StorageNodeClient<Channel>,
    array_id: String,
    manager_epoch: u64,
}

impl std::fmt::Debug for NodeDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NodeDevice({})", self.location)
    }
}

impl NodeDevice {
    /// One device access, its answer's bytes.
    fn call(
        &self,
        device_offset_bytes: u64,
        op: pb::device_request::Op,
    ) -> std::io::Result<Vec<u8>> {
        let request = pb::DeviceRequest {
            disk: self.disk.0,
            array_id: self.array_id.clone(),
            manager_epoch: self.manager_epoch,
            device_offset_bytes,
            op: Some(op),
        };
        self.wait_for(|mut client| async move { client.device(request).await })
            .map(|reply| reply.data)
    }

    /// `ReplaceDevice`: the node makes the disk's new device at `path`, or
    /// (`adopt`) opens the one the manager made in the directory they share.
    fn replace_device(&self, path: &std::path::Path, adopt: bool) -> std::io::Result<()> {
        let request = pb::ReplaceDeviceRequest {
            disk: self.disk.0,
            array_id: self.array_id.clone(),
            manager_epoch: self.manager_epoch,
            path: path.display().to_string(),
            adopt,
        };
        self.wait_for(|mut client| async move { client.replace_device(request).await })
            .map(drop)
    }

    /// Runs `rpc` on the node links' runtime and waits for its answer,
    /// from any thread (the store's callers are blocking code), at most
    /// [`DEVICE_ACCESS_TIMEOUT`].
    fn wait_for<T, F, Fut>(&self, rpc: F) -> std::io::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(StorageNodeClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>
            + Send
            + 'static,
    {
        let answer = rpc(self.client.clone());
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.runtime.handle().spawn(async move {
            let _ = tx.send(tokio::time::timeout(DEVICE_ACCESS_TIMEOUT, answer).await);
        });
        let failed = |why: String| std::io::Error::other(format!("{}: {why}", self.location));
        match rx.recv() {
            Ok(Ok(Ok(reply))) => Ok(reply.into_inner()),
            Ok(Ok(Err(status))) => Err(failed(status.message().to_string())),
            Ok(Err(_)) => Err(failed(format!(
                "no answer within {} s",
                DEVICE_ACCESS_TIMEOUT.as_secs()
            ))),
            Err(_) => Err(failed("the node links are stopping".into())),
        }
    }
}

impl rondo_store::RemoteDevice for NodeDevice {
    fn location(&self) -> String {
        self.location.clone()
    }

    fn read_at(&self, device_offset_bytes: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let data = self.call(
            device_offset_bytes,
            pb::device_request::Op::ReadBytes(buf.len() as u64),
        )?;
        if data.len() != buf.len() {
            return Err(std::io::Error::other(format!(
                "{}: {} bytes read where {} were asked for",
                self.location,
                data.len(),
                buf.len()
            )));
        }
        buf.copy_from_slice(&data);
        Ok(())
    }

    fn write_at(&self, device_offset_bytes: u64, buf: &[u8]) -> std::io::Result<()> {
        self.call(
            device_offset_bytes,
            pb::device_request::Op::Write(buf.to_vec()),
        )
        .map(drop)
    }

    fn punch_hole(&self, device_offset_bytes: u64, length_bytes: u64) {
        if let Err(e) = self.call(
            device_offset_bytes,
            pb::device_request::Op::PunchBytes(length_bytes),
        ) {
            tracing::warn!("punching a hole: {e}");
        }
    }

    fn sync(&self) -> std::io::Result<()> {
        self.call(0, pb::device_request::Op::Sync(true)).map(drop)
    }

    fn replace(&self, path: &std::path::Path) -> std::io::Result<()> {
        self.replace_device(path, false)
    }

    fn adopt(&self, path: &std::path::Path) -> std::io::Result<()> {
        self.replace_device(path, true)
    }
}

impl DiskExecutors for StorageNodes {
    fn serves(&self, disk: DiskIndex) -> bool {
        self.disk_node.contains_key(&disk)
    }

    fn location(&self, disk: DiskIndex) -> Option<String> {
        self.disk_node.get(&disk).map(|&n| {
            let node = &self.nodes[n];
            format!("{} ({})", node.node_id, node.address)
        })
    }

    fn spawn(&self, context: ExecutorContext) -> std::io::Result<DeviceThread> {
        let disk = context.disk;
        let node = self
            .disk_node
            .get(&disk)
            .map(|&n| self.nodes[n].clone())
            .ok_or_else(|| std::io::Error::other(format!("no storage node serves disk {disk}")))?;
        let (batches, batches_rx) = batch_queue();
        let runtime = Arc::clone(&self.runtime);
        let array_id = self.array_id.clone();
        let manager_epoch = self.manager_epoch;
        let silence_half_rounds = self.silence_half_rounds;
        let handle = std::thread::Builder::new()
            .name(format!("rondo-remote-{disk}"))
            .spawn(move || {
                run_disk(
                    runtime,
                    node,
                    (array_id, manager_epoch, silence_half_rounds),
                    context,
                    batches_rx,
                )
            })?;
        Ok(DeviceThread {
            disk,
            batches,
            handle,
        })
    }
}

/// A batch sent to a node and not done.
struct OpenBatch {
    round: Round,
    late: bool,
    reserved_ns: Option<u64>,
    granted_ns: u64,
    /// Each stream's session piece queue.
    sessions: HashMap<StreamId, PieceSender>,
    /// Reads not completed yet: (stream, playback round, replica, piece).
    reads_out: HashSet<(StreamId, PlaybackRound, Replica, u16)>,
}

impl OpenBatch {
    fn of(batch: &DiskBatch) -> OpenBatch {
        let mut sessions = HashMap::new();
        let mut reads_out = HashSet::new();
        for (i, command) in batch.commands.iter().enumerate() {
            if let Purpose::Deliver {
                stream,
                playback_round,
                replica,
                piece,
                ..
            } = command.purpose
            {
                reads_out.insert((stream, playback_round, replica, piece));
                if let Some(Some(queue)) = batch.deliver_to.get(i) {
                    sessions.entry(stream).or_insert_with(|| queue.clone());
                }
            }
        }
        OpenBatch {
            round: batch.round,
            late: batch.late_start_ns.is_some(),
            reserved_ns: batch.reserved_ns,
            granted_ns: batch.granted_ns,
            sessions,
            reads_out,
        }
    }
}

/// The link to one disk's node.
struct Link {
    disk: DiskIndex,
    address: String,
    clock: RoundClock,
    pool: BufferPool,
    events: Sender<IoEvent>,
    lost: DiskLost,
    /// `StorageNodes::silence_half_rounds`.
    silence_half_rounds: u64,
    state: Mutex<LinkState>,
}

#[derive(Default)]
struct LinkState {
    /// Lost: batches complete here with errors.
    lost: bool,
    /// The server is stopping: the stream's end is not a loss.
    closing: bool,
    open: BTreeMap<u64, OpenBatch>,
}

impl Link {
    /// The disk is lost: the server fails it, then every open batch ends
    /// with its outstanding reads failed.
    fn lose(&self, why: String) {
        let open = {
            let mut state = self.state.lock().expect("not poisoned");
            if state.lost || state.closing {
                return;
            }
            state.lost = true;
            std::mem::take(&mut state.open)
        };
        let reads_out: usize = open.values().map(|b| b.reads_out.len()).sum();
        tracing::error!(
            disk = self.disk.0,
            node = %self.address,
            open_batches = open.len(),
            reads_out,
            "disk {} lost: {why}",
            self.disk
        );
        (self.lost)(self.disk, format!("storage node {}: {why}", self.address));
        for batch in open.into_values() {
            self.fail_batch(batch, &why);
        }
    }

    /// Ends a batch the node will not answer: its reads fail (the array
    /// re-reads them from the other replica), then the batch ends.
    fn fail_batch(&self, batch: OpenBatch, why: &str) {
        let model_ns = self.clock.model_ns(Instant::now());
        let mut reads: Vec<ReadDone> = batch
            .reads_out
            .iter()
            .map(|&(stream, playback_round, replica, piece)| ReadDone {
                model_completion_ns: model_ns,
                completion: Completion {
                    disk: self.disk,
                    stream,
                    playback_round,
                    replica,
                    piece,
                    outcome: ReadOutcome::IoError(format!(
                        "storage node {} is lost: {why}",
                        self.address
                    )),
                },
            })
            .collect();
        reads.sort_by_key(|r| r.completion.order_at(r.model_completion_ns));
        if !reads.is_empty() {
            let _ = self.events.send(IoEvent::Reads {
                round: batch.round,
                reads,
                sent_at: std::time::Instant::now(),
            });
        }
        let _ = self.events.send(IoEvent::BatchDone {
            disk: self.disk,
            round: batch.round,
            reserved_ns: batch.reserved_ns,
            granted_ns: batch.granted_ns,
            requests: 0,
            bytes: 0,
            granted_commands: 0,
            cache_hits: 0,
            shared_reads: 0,
            shared_bytes: 0,
            granted_bytes: 0,
            granted_model_ns: 0,
            ended_at: Instant::now(),
            arrived_at: Instant::now(),
            model_ns: None,
            late: batch.late,
            model_busy_ns: 0,
            measured_busy_ns: 0,
        });
    }

    /// One answer from the node.
    fn answer(&self, message: pb::FromDisk) -> Result<(), String> {
        use pb::from_disk::Kind;
        match message.kind {
            Some(Kind::Piece(piece)) => {
                let queue = {
                    let state = self.state.lock().expect("not poisoned");
                    state
                        .open
                        .get(&piece.seq)
                        .and_then(|b| b.sessions.get(&StreamId(piece.stream)))
                        .cloned()
                };
                // A session that ended takes no more pieces.
                if let Some(queue) = queue {
                    let mut data = self.pool.take(piece.data.len());
                    data.as_mut_slice().copy_from_slice(&piece.data);
                    queue.send(Piece {
                        stream: StreamId(piece.stream),
                        playback_round: PlaybackRound(piece.playback_round),
                        replica: wire::replica_from_wire(piece.replica)
                            .map_err(|e| e.to_string())?,
                        piece: u16::try_from(piece.piece)
                            .map_err(|_| format!("piece {} is out of range", piece.piece))?,
                        offset_bytes: piece.offset_bytes,
                        data: data.into_bytes(),
                    });
                }
            }
            Some(Kind::Reads(reads)) => {
                let reads_round = reads.round;
                let reads = reads
                    .reads
                    .iter()
                    .map(wire::read_done_from_wire)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| e.to_string())?;
                {
                    let mut state = self.state.lock().expect("not poisoned");
                    for read in &reads {
                        let c = &read.completion;
                        let key = (c.stream, c.playback_round, c.replica, c.piece);
                        for batch in state.open.values_mut() {
                            if batch.reads_out.remove(&key) {
                                break;
                            }
                        }
                    }
                }
                let _ = self.events.send(IoEvent::Reads {
                    round: Round(reads_round),
                    reads,
                    sent_at: std::time::Instant::now(),
                });
            }
            Some(Kind::Done(done)) => {
                self.state
                    .lock()
                    .expect("not poisoned")
                    .open
                    .remove(&done.seq);
                let _ = self
                    .events
                    .send(wire::batch_done_from_wire(&done, &self.clock));
            }
            None => return Err("an answer with nothing in it".into()),
        }
        Ok(())
    }
}

/// One disk's executor thread: opens the disk's stream on its node, sends
/// the driver's batches in order, watches for a node that stopped
/// answering, and on a clean stop waits for the node to finish.
fn run_disk(
    runtime: Arc<NodeRuntime>,
    node: NodeInfo,
    (array_id, manager_epoch, silence_half_rounds): (String, u64, u64),
    context: ExecutorContext,
    batches: BatchReceiver,
) {
    let ExecutorContext {
        disk,
        timing,
        clock,
        pool,
        buffer_per_disk_bytes,
        events,
        lost,
        ..
    } = context;
    let link = Arc::new(Link {
        disk,
        address: node.address.clone(),
        clock,
        pool,
        events,
        lost,
        silence_half_rounds,
        state: Mutex::new(LinkState::default()),
    });
    let (to_node, to_node_rx) = mpsc::channel::<pb::ToDisk>(BATCH_QUEUE_ROUNDS * 2);
    let open = pb::ToDisk {
        kind: Some(pb::to_disk::Kind::Open(pb::Open {
            disk: disk.0,
            array_id,
            round_zero_unix_ns: wire::unix_ns_of(clock.t0),
            round_duration_ns: clock.round_duration_ns,
            emulated: timing == rondo_server::DiskTiming::Emulated,
            buffer_bytes: buffer_per_disk_bytes,
            manager_epoch,
        })),
    };
    let _ = to_node.try_send(open);
    let (ended_tx, ended_rx) = crossbeam_channel::bounded::<()>(1);
    {
        let link = Arc::clone(&link);
        let address = node.address.clone();
        runtime.handle().spawn(async move {
            let why = match client(&address).await {
                Err(e) => e.to_string(),
                Ok(mut client) => match client.rounds(ReceiverStream::new(to_node_rx)).await {
                    Err(status) => format!("opening disk {disk}: {}", status.message()),
                    Ok(response) => {
                        let mut answers = response.into_inner();
                        loop {
                            match answers.message().await {
                                Ok(Some(message)) => {
                                    if let Err(why) = link.answer(message) {
                                        break format!("a malformed answer: {why}");
                                    }
                                }
                                Ok(None) => break "the node ended the disk's stream".to_string(),
                                Err(status) => {
                                    break format!("the stream broke: {}", status.message());
                                }
                            }
                        }
                    }
                },
            };
            link.lose(why);
            let _ = ended_tx.send(());
        });
    }
    let mut next_seq = 0u64;
    let mut sender = Some(to_node);
    loop {
        let batch = match batches.recv_timeout(Duration::from_millis(100)) {
            Ok(batch) => batch,
            Err(BatchRecvError::Timeout) => {
                check_overdue(&link);
                continue;
            }
            Err(BatchRecvError::Disconnected) => break,
        };
        let seq = next_seq;
        next_seq += 1;
        let open = OpenBatch::of(&batch);
        let sent_open = {
            let mut state = link.state.lock().expect("not poisoned");
            if state.lost {
                None
            } else {
                state.open.insert(seq, open);
                Some(())
            }
        };
        if sent_open.is_none() {
            link.fail_batch(OpenBatch::of(&batch), "it was lost before this batch");
            continue;
        }
        let message = pb::ToDisk {
            kind: Some(pb::to_disk::Kind::Batch(pb::Batch {
                seq,
                round: batch.round.0,
                reserved_ns: batch.reserved_ns,
                granted_ns: batch.granted_ns,
                commands: batch.commands.iter().map(wire::command_to_wire).collect(),
                scheduler: wire::scheduler_to_wire(batch.scheduler),
                late_start_ns: batch.late_start_ns,
            })),
        };
        if let Some(to_node) = &sender
            && to_node.blocking_send(message).is_err()
        {
            // The stream is gone; its task reports the loss (this batch
            // is open, so it is failed with the others).
            sender = None;
        }
        check_overdue(&link);
    }
    // A clean stop: the node finishes the open batches, then ends.
    link.state.lock().expect("not poisoned").closing = true;
    drop(sender);
    let _ = ended_rx.recv_timeout(STOP_WAIT);
}

/// A batch still open `silence_half_rounds` half rounds after its round
/// ended: the node is lost.
fn check_overdue(link: &Link) {
    let oldest = {
        let state = link.state.lock().expect("not poisoned");
        state.open.values().next().map(|b| b.round)
    };
    if let Some(round) = oldest {
        let half_round = Duration::from_nanos(link.clock.round_duration_ns / 2);
        let after = half_round * link.silence_half_rounds as u32;
        let deadline = link.clock.boundary(Round(round.0 + 1)) + after;
        if Instant::now() > deadline {
            link.lose(format!(
                "its batch for round {} is not done {} ms after the round ended",
                round.0,
                after.as_millis()
            ));
        }
    }
}

/// A node's description: its id, array and disks.
pub async fn describe(address: &str) -> Result<pb::NodeDescription, RemoteError> {
    client(address)
        .await?
        .describe(pb::DescribeRequest {})
        .await
        .map(|r| r.into_inner())
        .map_err(|s| RemoteError::Node {
            address: address.to_string(),
            why: s.message().to_string(),
        })
}
