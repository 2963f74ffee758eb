//! Server counters: admissions by outcome, deadline misses (stream-round
//! misses and disk-round overruns, counted separately as DESIGN.md defines
//! them), bytes sent, sessions by how they ended, and per disk the reserved
//! and measured busy time of each round.
//!
//! Everything is an atomic so the round driver, the I/O threads and the HTTP
//! tasks update it without locks; [`Metrics::snapshot`] gives a consistent
//! enough JSON view (`GET /api/metrics`). The next issue renders the same
//! struct as Prometheus text and a dashboard.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use rondo_model::reservation::Rejection;
use serde::Serialize;

/// One disk's per-round figures.
#[derive(Debug, Default)]
pub struct DiskMetrics {
    /// Rounds whose batch this disk has finished.
    pub rounds: AtomicU64,
    /// Reads performed (requests, not extents).
    pub reads: AtomicU64,
    pub bytes_read: AtomicU64,
    /// Last finished round: its number, reserved time (fixed term included),
    /// the model's busy time and the measured busy time.
    pub last_round: AtomicU64,
    pub last_reserved_ns: AtomicU64,
    pub last_model_busy_ns: AtomicU64,
    pub last_measured_busy_ns: AtomicU64,
    /// Sums over all finished rounds.
    pub reserved_ns_total: AtomicU64,
    pub model_busy_ns_total: AtomicU64,
    pub measured_busy_ns_total: AtomicU64,
    /// Rounds whose batch ended after the round did (disk-round overruns).
    pub overruns: AtomicU64,
    /// The disk's state as `rondo_model::health::DiskState`: 0 healthy,
    /// 1 suspect, 2 failed, 3 rebuilding (written by the operations code).
    pub state: AtomicU64,
    /// Read errors and checksum mismatches on this disk.
    pub errors: AtomicU64,
}

/// The server's counters.
#[derive(Debug)]
pub struct Metrics {
    pub rounds: AtomicU64,
    pub admitted: AtomicU64,
    /// Admitted streams that start mid-title (Range requests, `?t=`).
    pub admitted_mid_title: AtomicU64,
    pub rejected_disk_time: AtomicU64,
    pub rejected_buffer: AtomicU64,
    pub rejected_network: AtomicU64,
    /// Data unavailable, title too long for the tables, unknown, past its end.
    pub rejected_other: AtomicU64,
    /// A stream's request for round i was not complete when round i ended.
    pub stream_round_misses: AtomicU64,
    /// A disk's batch for round i ended after round i did.
    pub disk_round_overruns: AtomicU64,
    /// Planned reads with no working replica.
    pub lost_reads: AtomicU64,
    /// Device errors and checksum mismatches.
    pub read_errors: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub streams_completed: AtomicU64,
    /// Clients that went away before their stream ended.
    pub streams_disconnected: AtomicU64,
    /// Clients dropped after the grace time without reading.
    pub streams_dropped_stalled: AtomicU64,
    /// Streams ended by the server (read error, lost data, shutdown).
    pub streams_aborted: AtomicU64,
    /// Bytes of read buffers currently held (pool in use).
    pub buffer_bytes_in_use: AtomicU64,
    /// Rounds the ingest write gate let through, and their bytes.
    pub gated_writes: AtomicU64,
    pub gated_write_bytes: AtomicU64,
    pub disks: Vec<DiskMetrics>,
    /// The disk being rebuilt plus one (0: no rebuild), and its progress.
    pub rebuild_disk_plus_one: AtomicU64,
    pub rebuild_done_bytes: AtomicU64,
    pub rebuild_total_bytes: AtomicU64,
}

impl Metrics {
    pub fn new(disks: u32) -> Metrics {
        Metrics {
            rounds: AtomicU64::new(0),
            admitted: AtomicU64::new(0),
            admitted_mid_title: AtomicU64::new(0),
            rejected_disk_time: AtomicU64::new(0),
            rejected_buffer: AtomicU64::new(0),
            rejected_network: AtomicU64::new(0),
            rejected_other: AtomicU64::new(0),
            stream_round_misses: AtomicU64::new(0),
            disk_round_overruns: AtomicU64::new(0),
            lost_reads: AtomicU64::new(0),
            read_errors: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            streams_completed: AtomicU64::new(0),
            streams_disconnected: AtomicU64::new(0),
            streams_dropped_stalled: AtomicU64::new(0),
            streams_aborted: AtomicU64::new(0),
            buffer_bytes_in_use: AtomicU64::new(0),
            gated_writes: AtomicU64::new(0),
            gated_write_bytes: AtomicU64::new(0),
            disks: (0..disks).map(|_| DiskMetrics::default()).collect(),
            rebuild_disk_plus_one: AtomicU64::new(0),
            rebuild_done_bytes: AtomicU64::new(0),
            rebuild_total_bytes: AtomicU64::new(0),
        }
    }

    /// Counts a rejection by its reason.
    pub fn count_rejection(&self, rejection: &Rejection) {
        let counter = match rejection {
            Rejection::DiskTime { .. } => &self.rejected_disk_time,
            Rejection::Buffer { .. } => &self.rejected_buffer,
            Rejection::Network { .. } => &self.rejected_network,
            _ => &self.rejected_other,
        };
        counter.fetch_add(1, Relaxed);
    }

    /// A JSON-friendly copy of every counter.
    pub fn snapshot(&self, active_streams: usize) -> MetricsSnapshot {
        let g = |a: &AtomicU64| a.load(Relaxed);
        MetricsSnapshot {
            rounds: g(&self.rounds),
            active_streams,
            admitted: g(&self.admitted),
            admitted_mid_title: g(&self.admitted_mid_title),
            rejected_disk_time: g(&self.rejected_disk_time),
            rejected_buffer: g(&self.rejected_buffer),
            rejected_network: g(&self.rejected_network),
            rejected_other: g(&self.rejected_other),
            stream_round_misses: g(&self.stream_round_misses),
            disk_round_overruns: g(&self.disk_round_overruns),
            lost_reads: g(&self.lost_reads),
            read_errors: g(&self.read_errors),
            bytes_sent: g(&self.bytes_sent),
            streams_completed: g(&self.streams_completed),
            streams_disconnected: g(&self.streams_disconnected),
            streams_dropped_stalled: g(&self.streams_dropped_stalled),
            streams_aborted: g(&self.streams_aborted),
            buffer_bytes_in_use: g(&self.buffer_bytes_in_use),
            gated_writes: g(&self.gated_writes),
            gated_write_bytes: g(&self.gated_write_bytes),
            disks: self
                .disks
                .iter()
                .enumerate()
                .map(|(disk, d)| DiskSnapshot {
                    disk: disk as u32,
                    rounds: g(&d.rounds),
                    reads: g(&d.reads),
                    bytes_read: g(&d.bytes_read),
                    last_round: g(&d.last_round),
                    last_reserved_ns: g(&d.last_reserved_ns),
                    last_model_busy_ns: g(&d.last_model_busy_ns),
                    last_measured_busy_ns: g(&d.last_measured_busy_ns),
                    reserved_ns_total: g(&d.reserved_ns_total),
                    model_busy_ns_total: g(&d.model_busy_ns_total),
                    measured_busy_ns_total: g(&d.measured_busy_ns_total),
                    overruns: g(&d.overruns),
                })
                .collect(),
        }
    }
}

/// [`Metrics`] as plain numbers.
#[derive(Clone, Debug, Serialize)]
pub struct MetricsSnapshot {
    pub rounds: u64,
    pub active_streams: usize,
    pub admitted: u64,
    pub admitted_mid_title: u64,
    pub rejected_disk_time: u64,
    pub rejected_buffer: u64,
    pub rejected_network: u64,
    pub rejected_other: u64,
    pub stream_round_misses: u64,
    pub disk_round_overruns: u64,
    pub lost_reads: u64,
    pub read_errors: u64,
    pub bytes_sent: u64,
    pub streams_completed: u64,
    pub streams_disconnected: u64,
    pub streams_dropped_stalled: u64,
    pub streams_aborted: u64,
    pub buffer_bytes_in_use: u64,
    pub gated_writes: u64,
    pub gated_write_bytes: u64,
    pub disks: Vec<DiskSnapshot>,
}

/// One disk in a [`MetricsSnapshot`].
#[derive(Clone, Debug, Serialize)]
pub struct DiskSnapshot {
    pub disk: u32,
    pub rounds: u64,
    pub reads: u64,
    pub bytes_read: u64,
    pub last_round: u64,
    pub last_reserved_ns: u64,
    pub last_model_busy_ns: u64,
    pub last_measured_busy_ns: u64,
    pub reserved_ns_total: u64,
    pub model_busy_ns_total: u64,
    pub measured_busy_ns_total: u64,
    pub overruns: u64,
}
