//! A storage node (seed 001): a process that owns some of the array's disks
//! and executes the array's per-round commands on them for the cluster's
//! manager, over gRPC (`proto/storage.proto`).
//!
//! Each disk runs on the same device thread the single-machine server uses
//! (`rondo_server::io::spawn_device`: the disk model's C-SCAN order, pacing
//! to the model when emulated, O_DIRECT reads, CRC32C checks, a cut
//! extent's checksum carried from part to part), so a disk behind a node
//! behaves as it does inside `rondo serve`. The node adds only the wire: a
//! manager opens a disk with `Rounds`, sends its batches in order, and gets
//! back, in the order the disk did them, each read's bytes (before its
//! completion, as the session would get them), the completions, and each
//! batch's end with its instants as model time. A newer manager opening the
//! same disk takes it over; the older one's stream ends.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crossbeam_channel::Receiver;
use rondo_model::disk::{Disk, DiskProfile, profile_by_name};
use rondo_model::units::DiskIndex;
use rondo_server::DiskTiming;
use rondo_server::buffers::BufferPool;
use rondo_server::io::{DiskBatch, IoEvent, RoundClock, spawn_device};
use rondo_server::metrics::Metrics;
use rondo_server::session::{Piece, PieceSender};
use rondo_store::{AlignedBuf, Device, IoMode, open_node_devices};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::wire::pb::storage_node_server::{StorageNode, StorageNodeServer};
use crate::wire::{self, pb};

/// What a storage node serves.
#[derive(Clone, Debug)]
pub struct StorageNodeConfig {
    /// The array's data directory (its `rondo.toml` and device files).
    pub data_dir: PathBuf,
    /// The disks this node owns.
    pub disks: Vec<DiskIndex>,
    /// The node's name in the cluster.
    pub node_id: String,
    /// Buffered device reads (for filesystems that refuse O_DIRECT: tmpfs).
    pub buffered: bool,
}

/// Why a storage node cannot start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("opening the storage node's disks: {0}")]
    Store(#[from] rondo_store::StoreError),
    #[error("the array's disk profile {profile:?}: {why}")]
    Profile { profile: String, why: String },
    #[error("a storage node needs at least one disk (--disks)")]
    NoDisks,
}

/// The storage node's gRPC service.
pub struct StorageNodeService {
    node_id: String,
    array_id: String,
    profile_name: String,
    profile: DiskProfile,
    /// The node's devices; a replaced disk's new one takes its place
    /// (`ReplaceDevice`), and its open stream switches to it.
    devices: Arc<Mutex<BTreeMap<DiskIndex, Arc<Device>>>>,
    data_dir: PathBuf,
    io_mode: IoMode,
    /// Per disk, the latest manager stream's number: an older stream stops
    /// taking batches once a newer one opened the disk.
    generations: Arc<Mutex<HashMap<DiskIndex, u64>>>,
    /// Per disk, the highest manager epoch that opened it: a manager below
    /// it was deposed (its etcd leadership ended) and is refused.
    epochs: Arc<Mutex<HashMap<DiskIndex, u64>>>,
    metrics: Arc<Metrics>,
}

impl StorageNodeService {
    /// Opens the node's devices (their headers checked against the array).
    pub fn open(config: &StorageNodeConfig) -> Result<StorageNodeService, NodeError> {
        if config.disks.is_empty() {
            return Err(NodeError::NoDisks);
        }
        let io_mode = if config.buffered {
            IoMode::Buffered
        } else {
            IoMode::Direct
        };
        let (array, devices) = open_node_devices(&config.data_dir, &config.disks, io_mode)?;
        let profile = profile_by_name(&array.disk_profile).map_err(|e| NodeError::Profile {
            profile: array.disk_profile.clone(),
            why: e.to_string(),
        })?;
        Ok(StorageNodeService {
            node_id: config.node_id.clone(),
            array_id: array.array_id.to_string(),
            profile_name: array.disk_profile.clone(),
            profile,
            devices: Arc::new(Mutex::new(
                config.disks.iter().copied().zip(devices).collect(),
            )),
            data_dir: config.data_dir.clone(),
            io_mode,
            generations: Default::default(),
            epochs: Default::default(),
            metrics: Arc::new(Metrics::new(array.disk_count)),
        })
    }

    /// The disks it serves.
    pub fn disks(&self) -> Vec<DiskIndex> {
        self.devices
            .lock()
            .expect("not poisoned")
            .keys()
            .copied()
            .collect()
    }

    /// Disk `disk`'s device now, or why the node cannot serve it.
    fn device(&self, disk: DiskIndex) -> Result<Arc<Device>, Status> {
        let device = self
            .devices
            .lock()
            .expect("not poisoned")
            .get(&disk)
            .cloned();
        device.ok_or_else(|| {
            Status::not_found(format!(
                "node {} does not serve disk {disk}; it serves {:?}",
                self.node_id,
                self.disks().iter().map(|d| d.0).collect::<Vec<_>>()
            ))
        })
    }

    /// Refuses another array's manager and a deposed one (an epoch below
    /// the highest that opened or used the disk), and records the epoch.
    fn check_manager(&self, disk: DiskIndex, array_id: &str, epoch: u64) -> Result<(), Status> {
        self.check_array(disk, array_id)?;
        let mut epochs = self.epochs.lock().expect("not poisoned");
        let highest = epochs.entry(disk).or_default();
        if epoch < *highest {
            return Err(Status::failed_precondition(format!(
                "disk {disk} is held by a manager of epoch {highest}; epoch {epoch} was deposed"
            )));
        }
        *highest = epoch;
        Ok(())
    }

    fn check_array(&self, disk: DiskIndex, array_id: &str) -> Result<(), Status> {
        if array_id != self.array_id {
            return Err(Status::failed_precondition(format!(
                "disk {disk} belongs to array {}, not {array_id}",
                self.array_id
            )));
        }
        Ok(())
    }

    pub fn array_id(&self) -> &str {
        &self.array_id
    }

    /// The service, for a tonic server.
    pub fn into_server(self) -> StorageNodeServer<StorageNodeService> {
        StorageNodeServer::new(self)
            .max_decoding_message_size(MESSAGE_BYTES_MAX)
            .max_encoding_message_size(MESSAGE_BYTES_MAX)
    }
}

/// The largest message either side takes: a read's bytes (a round of a
/// stream, a read group's rounds) with room to spare. Assumption: 64 MiB,
/// above the largest stream-round any profile admits (a 1 s round of a
/// 100 Mbit/s title is 12.5 MB; a read group of four is 50 MB).
pub const MESSAGE_BYTES_MAX: usize = 64 << 20;

/// The node's answers on one disk's stream.
type Answers = mpsc::Sender<Result<pb::FromDisk, Status>>;

/// Messages buffered toward the manager before the disk thread waits.
/// Assumption: a round of a loaded disk is a few hundred pieces.
const ANSWERS_QUEUED: usize = 1024;

#[tonic::async_trait]
impl StorageNode for StorageNodeService {
    async fn describe(
        &self,
        _request: Request<pb::DescribeRequest>,
    ) -> Result<Response<pb::NodeDescription>, Status> {
        Ok(Response::new(pb::NodeDescription {
            node_id: self.node_id.clone(),
            array_id: self.array_id.clone(),
            disks: self.disks().iter().map(|d| d.0).collect(),
            disk_profile: self.profile_name.clone(),
        }))
    }

    type RoundsStream = ReceiverStream<Result<pb::FromDisk, Status>>;

    async fn rounds(
        &self,
        request: Request<Streaming<pb::ToDisk>>,
    ) -> Result<Response<Self::RoundsStream>, Status> {
        let mut inbound = request.into_inner();
        let open = match inbound.message().await? {
            Some(pb::ToDisk {
                kind: Some(pb::to_disk::Kind::Open(open)),
            }) => open,
            Some(_) => {
                return Err(Status::invalid_argument(
                    "the first message on a disk's stream must open the disk",
                ));
            }
            None => {
                return Err(Status::invalid_argument(
                    "the stream ended before it opened a disk",
                ));
            }
        };
        let disk = DiskIndex(open.disk);
        let device = self.device(disk)?;
        if open.round_duration_ns == 0 {
            return Err(Status::invalid_argument(
                "round_duration_ns must be positive",
            ));
        }
        self.check_manager(disk, &open.array_id, open.manager_epoch)?;
        let generation = {
            let mut generations = self.generations.lock().expect("not poisoned");
            let g = generations.entry(disk).or_default();
            *g += 1;
            *g
        };
        let clock = RoundClock {
            t0: wire::instant_of_unix_ns(open.round_zero_unix_ns),
            round_duration_ns: open.round_duration_ns,
        };
        let model = Disk::new(self.profile.clone())
            .map_err(|e| Status::internal(format!("the disk model: {e}")))?;
        let timing = if open.emulated {
            DiskTiming::Emulated
        } else {
            DiskTiming::Native
        };
        let pool = BufferPool::new(open.buffer_bytes, Arc::clone(&self.metrics));
        let (events_tx, events_rx) = crossbeam_channel::unbounded();
        let thread = spawn_device(
            disk,
            Arc::clone(&device) as Arc<dyn rondo_server::storage::Storage>,
            model,
            timing.into(),
            clock,
            pool,
            events_tx,
        )
        .map_err(|e| Status::internal(format!("starting disk {disk}'s thread: {e}")))?;
        tracing::info!(
            node = %self.node_id,
            disk = disk.0,
            timing = timing.name(),
            "a manager opened disk {disk}"
        );
        let (answers, answers_rx) = mpsc::channel(ANSWERS_QUEUED);
        let pending: Pending = Default::default();
        {
            let pending = Arc::clone(&pending);
            let answers = answers.clone();
            std::thread::Builder::new()
                .name(format!("rondo-node-out-{disk}"))
                .spawn(move || forward_events(events_rx, pending, answers, clock))
                .map_err(|e| Status::internal(format!("starting disk {disk}'s sender: {e}")))?;
        }
        let generations = Arc::clone(&self.generations);
        let node_id = self.node_id.clone();
        let devices = Arc::clone(&self.devices);
        tokio::spawn(async move {
            let batches = thread.batches;
            // The device the disk thread reads; a replacement is handed to
            // it with the next batch.
            let mut reading = device;
            loop {
                let message = match inbound.message().await {
                    Ok(Some(message)) => message,
                    Ok(None) => break,
                    Err(status) => {
                        tracing::warn!(node = %node_id, disk = disk.0, "the manager's stream broke: {status}");
                        break;
                    }
                };
                let current = generations
                    .lock()
                    .expect("not poisoned")
                    .get(&disk)
                    .copied();
                if current != Some(generation) {
                    let _ = answers
                        .send(Err(Status::aborted(format!(
                            "another manager opened disk {disk}"
                        ))))
                        .await;
                    break;
                }
                let batch = match message.kind {
                    Some(pb::to_disk::Kind::Batch(batch)) => batch,
                    _ => {
                        let _ = answers
                            .send(Err(Status::invalid_argument(
                                "only batches may follow a disk's open",
                            )))
                            .await;
                        break;
                    }
                };
                let (seq, mut batch, pieces) = match decode_batch(batch) {
                    Ok(decoded) => decoded,
                    Err(e) => {
                        let _ = answers
                            .send(Err(Status::invalid_argument(e.to_string())))
                            .await;
                        break;
                    }
                };
                let now = devices.lock().expect("not poisoned").get(&disk).cloned();
                if let Some(now) = now
                    && !Arc::ptr_eq(&now, &reading)
                {
                    batch.device =
                        Some(Arc::clone(&now) as Arc<dyn rondo_server::storage::Storage>);
                    reading = now;
                }
                pending
                    .lock()
                    .expect("not poisoned")
                    .push_back((seq, pieces));
                let batches = batches.clone();
                // The thread's queue is bounded: wait off the runtime.
                let sent = tokio::task::spawn_blocking(move || batches.send(batch).is_ok())
                    .await
                    .unwrap_or(false);
                if !sent {
                    break;
                }
            }
            // The disk thread finishes what it has and exits; the sender
            // then ends the answers.
            drop(batches);
            tracing::info!(node = %node_id, disk = disk.0, "disk {disk}'s manager stream ended");
        });
        Ok(Response::new(ReceiverStream::new(answers_rx)))
    }

    async fn device(
        &self,
        request: Request<pb::DeviceRequest>,
    ) -> Result<Response<pb::DeviceReply>, Status> {
        let request = request.into_inner();
        let disk = DiskIndex(request.disk);
        let device = self.device(disk)?;
        let Some(op) = request.op else {
            return Err(Status::invalid_argument(
                "a device request names no operation",
            ));
        };
        if matches!(op, pb::device_request::Op::ReadBytes(_)) {
            // A read changes nothing: any process of this array may read
            // (`rondo fsck --storage-node` while the manager is stopped).
            self.check_array(disk, &request.array_id)?;
        } else {
            // Fencing as for `Rounds`: a deposed manager writes nothing.
            self.check_manager(disk, &request.array_id, request.manager_epoch)?;
        }
        let offset = request.device_offset_bytes;
        // Device I/O blocks (O_DIRECT, fdatasync): off the runtime.
        let done = tokio::task::spawn_blocking(move || device_op(&device, offset, op))
            .await
            .map_err(|e| Status::internal(format!("disk {disk}'s device access: {e}")))?;
        done.map(|data| Response::new(pb::DeviceReply { data }))
            .map_err(|e| Status::internal(e.to_string()))
    }

    async fn replace_device(
        &self,
        request: Request<pb::ReplaceDeviceRequest>,
    ) -> Result<Response<pb::ReplaceDeviceReply>, Status> {
        let request = request.into_inner();
        let disk = DiskIndex(request.disk);
        self.device(disk)?;
        self.check_manager(disk, &request.array_id, request.manager_epoch)?;
        let (dir, io_mode) = (self.data_dir.clone(), self.io_mode);
        let path = PathBuf::from(&request.path);
        let adopt = request.adopt;
        let made = tokio::task::spawn_blocking(move || {
            if adopt {
                adopt_device(&dir, disk, &path, io_mode)
            } else {
                rondo_store::replace_device_file(&dir, disk, &path, io_mode).map(Arc::new)
            }
        })
        .await
        .map_err(|e| Status::internal(format!("replacing disk {disk}'s device: {e}")))?
        .map_err(|e| Status::failed_precondition(e.to_string()))?;
        let path = made.path().display().to_string();
        tracing::info!(node = %self.node_id, disk = disk.0, path = %path, "disk {disk}'s device replaced");
        self.devices
            .lock()
            .expect("not poisoned")
            .insert(disk, made);
        Ok(Response::new(pb::ReplaceDeviceReply { path }))
    }
}

/// Opens disk `disk`'s device as the node's rondo.toml now records it,
/// which must be `path`: the manager made it in the directory the two
/// share and recorded it there (`ReplaceDevice` with `adopt`). A node whose
/// directory is not the manager's still records its old device, and says so.
fn adopt_device(
    dir: &std::path::Path,
    disk: DiskIndex,
    path: &std::path::Path,
    io_mode: IoMode,
) -> rondo_store::Result<Arc<Device>> {
    let (config, mut devices) = open_node_devices(dir, &[disk], io_mode)?;
    let recorded = &config.devices[disk.index()].path;
    if recorded != path {
        return Err(rondo_store::StoreError::DeviceUnusable {
            path: path.to_path_buf(),
            reason: format!(
                "the manager made it in its directory, but this node's {} records {} for \
                 disk {disk}: the node's directory is not the manager's (move the node's \
                 devices out of the manager's directory, then replace-disk makes the new \
                 device on the node)",
                dir.join("rondo.toml").display(),
                recorded.display()
            ),
        });
    }
    Ok(devices.pop().expect("one disk asked for"))
}

/// One [`pb::DeviceRequest`]'s operation on `device`, with the device's own
/// alignment and bounds checks (a write's bytes are copied into an aligned
/// buffer, as O_DIRECT needs).
fn device_op(
    device: &Device,
    device_offset_bytes: u64,
    op: pb::device_request::Op,
) -> Result<Vec<u8>, rondo_store::DeviceError> {
    use pb::device_request::Op;
    match op {
        Op::ReadBytes(length_bytes) => {
            // Beyond the stride area it is refused by `read_at`; cap the
            // buffer so a bad length cannot allocate without bound.
            let length_bytes = length_bytes.min(MESSAGE_BYTES_MAX as u64) as usize;
            let mut buf = AlignedBuf::zeroed(length_bytes);
            device.read_at(device_offset_bytes, &mut buf)?;
            Ok(buf.to_vec())
        }
        Op::Write(bytes) => {
            let mut buf = AlignedBuf::zeroed(bytes.len());
            buf.copy_from_slice(&bytes);
            device.write_at(device_offset_bytes, &buf)?;
            Ok(Vec::new())
        }
        Op::PunchBytes(length_bytes) => {
            device.punch_hole(device_offset_bytes, length_bytes);
            Ok(Vec::new())
        }
        Op::Sync(_) => {
            device.sync()?;
            Ok(Vec::new())
        }
    }
}

/// Per batch sent to the disk thread and not yet done: its number and the
/// queue its pieces arrive on.
type Pending = Arc<Mutex<VecDeque<(u64, PieceSender)>>>;

/// A batch from the wire, with a piece queue of its own for its reads.
fn decode_batch(batch: pb::Batch) -> Result<(u64, DiskBatch, PieceSender), wire::WireError> {
    let commands = batch
        .commands
        .iter()
        .map(wire::command_from_wire)
        .collect::<Result<Vec<_>, _>>()?;
    let pieces = PieceSender::default();
    let deliver_to = commands.iter().map(|_| Some(pieces.clone())).collect();
    Ok((
        batch.seq,
        DiskBatch {
            round: rondo_model::units::Round(batch.round),
            reserved_ns: batch.reserved_ns,
            granted_ns: batch.granted_ns,
            commands,
            scheduler: wire::scheduler_from_wire(batch.scheduler)?,
            device: None,
            deliver_to,
            late_start_ns: batch.late_start_ns,
        },
        pieces,
    ))
}

/// The disk thread's reports to the manager, in its order: before each
/// report, the pieces it put in the open batches' queues (a read's bytes
/// precede its completion, as they reach a session before the driver hears
/// of the read); a batch's end closes the oldest open batch (the thread
/// does batches in the order it got them).
fn forward_events(
    events: Receiver<IoEvent>,
    pending: Pending,
    answers: Answers,
    clock: RoundClock,
) {
    for event in events {
        let mut messages = Vec::new();
        let mut done_seq = 0;
        {
            let mut pending = pending.lock().expect("not poisoned");
            for (seq, pieces) in pending.iter() {
                messages.extend(
                    pieces
                        .take_all()
                        .into_iter()
                        .map(|piece| piece_message(*seq, piece)),
                );
            }
            if matches!(event, IoEvent::BatchDone { .. })
                && let Some((seq, _)) = pending.pop_front()
            {
                done_seq = seq;
            }
        }
        messages.push(wire::event_to_wire(&event, done_seq, &clock));
        for message in messages {
            if answers.blocking_send(Ok(message)).is_err() {
                // The manager is gone; the disk thread stops with its queue.
                return;
            }
        }
    }
}

fn piece_message(seq: u64, piece: Piece) -> pb::FromDisk {
    pb::FromDisk {
        kind: Some(pb::from_disk::Kind::Piece(pb::Piece {
            seq,
            stream: piece.stream.0,
            playback_round: piece.playback_round.0,
            replica: wire::replica_to_wire(piece.replica),
            piece: u32::from(piece.piece),
            offset_bytes: piece.offset_bytes,
            data: piece.data,
        })),
    }
}

/// A storage node served on a runtime of its own in this process (tests,
/// and a local cluster's nodes): [`RunningNode::kill`] stops it at once,
/// its connections dropped, as when a node's process dies.
pub struct RunningNode {
    address: std::net::SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
}

impl RunningNode {
    /// Serves `service` on `listen` (port 0: any). Call it outside an async
    /// context or from one: it does not block on the runtime.
    pub fn start(
        service: StorageNodeService,
        listen: std::net::SocketAddr,
    ) -> std::io::Result<RunningNode> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("rondo-node")
            .enable_all()
            .build()?;
        let listener = std::net::TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        runtime.spawn(async move {
            let served = tonic::transport::Server::builder()
                .tcp_nodelay(true)
                .add_service(service.into_server())
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await;
            if let Err(e) = served {
                tracing::error!("storage node at {address}: {e}");
            }
        });
        Ok(RunningNode {
            address,
            runtime: Some(runtime),
        })
    }

    pub fn address(&self) -> std::net::SocketAddr {
        self.address
    }

    /// Stops the node at once: its tasks and connections are dropped.
    pub fn kill(mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for RunningNode {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
