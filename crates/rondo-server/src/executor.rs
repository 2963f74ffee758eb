//! Where each disk's batches run. By default a thread on this host
//! (`io::spawn_device`) reads the disk's device; a cluster's manager hands
//! them to storage nodes elsewhere (`rondo-cluster`) through the same
//! channel of [`DiskBatch`](crate::io::DiskBatch)es, answered with the same
//! [`IoEvent`]s and session pieces, so the round driver and the array do not
//! know where a disk is. A disk whose executor stops answering is reported
//! through [`DiskLost`] and failed like any other disk.

use std::sync::Arc;

use crossbeam_channel::Sender;
use rondo_model::disk::Disk;
use rondo_model::units::DiskIndex;

use crate::buffers::BufferPool;
use crate::config::DiskTiming;
use crate::io::{DeviceThread, IoEvent, RoundClock};

/// Called once when a disk's executor can no longer serve it (its storage
/// node died or cannot be reached), with the reason: the server fails the
/// disk, so its streams read the other replicas from the next round on.
pub type DiskLost = Arc<dyn Fn(DiskIndex, String) + Send + Sync>;

/// What a disk's executor is started with.
pub struct ExecutorContext {
    pub disk: DiskIndex,
    /// The disk's model (the array's profile).
    pub model: Disk,
    pub timing: DiskTiming,
    /// Where rounds are on the wall clock.
    pub clock: RoundClock,
    /// The buffers read bytes are handed to sessions in.
    pub pool: BufferPool,
    /// The buffer admission may reserve per disk, for an executor that keeps
    /// a pool of its own.
    pub buffer_per_disk_bytes: u64,
    pub events: Sender<IoEvent>,
    pub lost: DiskLost,
}

/// Starts the executors of disks that are not read on this host.
pub trait DiskExecutors: Send + Sync {
    /// Whether `disk` is executed here (else the server reads it itself).
    fn serves(&self, disk: DiskIndex) -> bool;
    /// Starts `context.disk`'s executor: it takes the disk's batches in
    /// order and reports as a device thread does.
    fn spawn(&self, context: ExecutorContext) -> std::io::Result<DeviceThread>;
    /// Where the disk is, for logs and `/api/disks` (a node's address).
    fn location(&self, disk: DiskIndex) -> Option<String>;
}

/// A server's remote disk executors (`ServerConfig::remote_disks`).
#[derive(Clone)]
pub struct RemoteDisks(pub Arc<dyn DiskExecutors>);

impl std::fmt::Debug for RemoteDisks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RemoteDisks")
    }
}

/// What a cluster's manager knows of its cluster (its nodes, from etcd),
/// for `GET /api/cluster` and the dashboard. Answered from a snapshot the
/// implementation keeps current: a request never waits on etcd.
pub trait ClusterView: Send + Sync {
    /// The cluster's nodes and managers as JSON (`rondo_cluster` says the
    /// shape; docs/cluster.md).
    fn snapshot(&self) -> serde_json::Value;
}

/// A server's view of its cluster (`ServerConfig::cluster`).
#[derive(Clone)]
pub struct Cluster(pub Arc<dyn ClusterView>);

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cluster")
    }
}
