//! Server counters: admissions by outcome, deadline misses (stream-round
//! misses and disk-round overruns, counted separately as ARCHITECTURE.md's
//! vocabulary defines them), bytes sent, sessions by how they ended, and per disk the reserved
//! and measured busy time of each round, the time granted in it to the
//! rebuild's copies and ingest writes, and the disk-rounds whose busy time
//! exceeded what was reserved for streams plus what was granted to those
//! writers ([`DiskMetrics::record_round`]).
//!
//! It also owns the latency histograms operators ask for
//! ([`LatencyHistogram`]: how long an admission decision takes, how long a
//! stream waits for its first byte, how late each round begins) and the
//! per-title counters ([`TitleCounters`], by title id).
//!
//! Everything is an atomic so the round driver, the I/O threads and the HTTP
//! tasks update it without locks (the per-title map takes a lock once per
//! admission, never per byte); [`Metrics::snapshot`] gives a consistent
//! enough JSON view (`GET /api/metrics`); `observe::prometheus` renders the
//! same struct as Prometheus text.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock};

use rondo_model::reservation::Rejection;
use rondo_model::units::{DiskIndex, Round, TitleId};
use serde::Serialize;

use crate::listener::{CloseReason, Refusal};

/// One disk's per-round figures.
#[derive(Debug)]
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
    /// The last finished round's disk time granted to the rebuild's copies
    /// and ingest writes, and the model's service time of those commands.
    pub last_granted_ns: AtomicU64,
    pub last_granted_model_ns: AtomicU64,
    /// Sums over all finished rounds.
    pub reserved_ns_total: AtomicU64,
    pub granted_ns_total: AtomicU64,
    pub granted_model_ns_total: AtomicU64,
    /// Rebuild and ingest commands the disk model served (extents), and
    /// their bytes.
    pub granted_commands: AtomicU64,
    pub granted_bytes: AtomicU64,
    /// Reads the disk model served wholly from the drive's cache (seed
    /// 003's prefetched blocks).
    pub cache_hits: AtomicU64,
    /// Stream reads that took another stream's buffer of the same extents
    /// instead of reading the device (part of `reads`), and their bytes
    /// (part of `bytes_read`).
    pub shared_reads: AtomicU64,
    pub shared_bytes: AtomicU64,
    pub model_busy_ns_total: AtomicU64,
    pub measured_busy_ns_total: AtomicU64,
    /// Rounds whose batch ended after the round did (disk-round overruns).
    pub overruns: AtomicU64,
    /// The disk's state as `rondo_model::health::DiskState`: 0 healthy,
    /// 1 suspect, 2 failed, 3 rebuilding (written by the operations code).
    pub state: AtomicU64,
    /// Read errors and checksum mismatches on this disk.
    pub errors: AtomicU64,
    /// Finished rounds whose measured busy time exceeded the disk time
    /// reserved for them (fixed term included) plus the time granted in
    /// them to the rebuild and ingest. Admission's bound is a true upper
    /// bound of the emulated disk, so with emulated timing this stays 0
    /// unless the host delays the I/O thread or a grant's charge is short
    /// of what its writes took.
    pub rounds_over_reserved: AtomicU64,
    /// Finished rounds whose model busy time exceeded reserved + granted: a
    /// bound that does not hold for the model (0 in rondo mode).
    pub rounds_model_over_reserved: AtomicU64,
    /// Smallest (reserved + granted) − measured busy time over finished
    /// rounds that had a budget (negative: over); `i64::MAX` until the first.
    pub min_headroom_ns: AtomicI64,
}

impl Default for DiskMetrics {
    fn default() -> DiskMetrics {
        DiskMetrics {
            rounds: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
            last_round: AtomicU64::new(0),
            last_reserved_ns: AtomicU64::new(0),
            last_model_busy_ns: AtomicU64::new(0),
            last_measured_busy_ns: AtomicU64::new(0),
            last_granted_ns: AtomicU64::new(0),
            last_granted_model_ns: AtomicU64::new(0),
            reserved_ns_total: AtomicU64::new(0),
            granted_ns_total: AtomicU64::new(0),
            granted_model_ns_total: AtomicU64::new(0),
            granted_commands: AtomicU64::new(0),
            granted_bytes: AtomicU64::new(0),
            cache_hits: AtomicU64::new(0),
            shared_reads: AtomicU64::new(0),
            shared_bytes: AtomicU64::new(0),
            model_busy_ns_total: AtomicU64::new(0),
            measured_busy_ns_total: AtomicU64::new(0),
            overruns: AtomicU64::new(0),
            state: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            rounds_over_reserved: AtomicU64::new(0),
            rounds_model_over_reserved: AtomicU64::new(0),
            min_headroom_ns: AtomicI64::new(i64::MAX),
        }
    }
}

/// How one finished disk-round compared with its budget.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RoundCheck {
    /// Measured busy time > reserved + granted.
    pub measured_over: bool,
    /// Model busy time > reserved + granted.
    pub model_over: bool,
}

/// The rebuild and ingest I/O one finished disk-round served.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct GrantedIo {
    /// Disk time granted to it out of the round's unreserved time.
    pub granted_ns: u64,
    /// Its model commands (extents) and their bytes.
    pub commands: u64,
    pub bytes: u64,
    /// The model's service time of those commands.
    pub model_ns: u64,
}

impl DiskMetrics {
    /// Records one finished round's busy times: the last-round gauges, the
    /// totals and, when the round had a budget, whether either busy time
    /// exceeded it. The budget is what admission reserved for streams
    /// (`reserved_ns`, fixed term included; `None` for a disk that was
    /// failed when the round was planned) plus what the round granted the
    /// rebuild and ingest (both come out of the same round). A failed disk
    /// being rebuilt has a budget too: the fixed term (in `reserved_ns`)
    /// plus its copies' writes.
    pub fn record_round(
        &self,
        round: Round,
        reserved_ns: Option<u64>,
        granted: GrantedIo,
        model_busy_ns: u64,
        measured_busy_ns: u64,
    ) -> RoundCheck {
        self.last_round.store(round.0, Relaxed);
        self.last_model_busy_ns.store(model_busy_ns, Relaxed);
        self.last_measured_busy_ns.store(measured_busy_ns, Relaxed);
        self.last_granted_ns.store(granted.granted_ns, Relaxed);
        self.last_granted_model_ns.store(granted.model_ns, Relaxed);
        self.model_busy_ns_total.fetch_add(model_busy_ns, Relaxed);
        self.measured_busy_ns_total
            .fetch_add(measured_busy_ns, Relaxed);
        self.granted_ns_total.fetch_add(granted.granted_ns, Relaxed);
        self.granted_model_ns_total
            .fetch_add(granted.model_ns, Relaxed);
        self.granted_commands.fetch_add(granted.commands, Relaxed);
        self.granted_bytes.fetch_add(granted.bytes, Relaxed);
        let Some(reserved_ns) = reserved_ns else {
            return RoundCheck {
                measured_over: false,
                model_over: false,
            };
        };
        let budget_ns = reserved_ns + granted.granted_ns;
        let headroom_ns = budget_ns as i64 - measured_busy_ns as i64;
        self.min_headroom_ns.fetch_min(headroom_ns, Relaxed);
        let check = RoundCheck {
            measured_over: measured_busy_ns > budget_ns,
            model_over: model_busy_ns > budget_ns,
        };
        if check.measured_over {
            self.rounds_over_reserved.fetch_add(1, Relaxed);
        }
        if check.model_over {
            self.rounds_model_over_reserved.fetch_add(1, Relaxed);
        }
        check
    }

    /// [`DiskMetrics::min_headroom_ns`], `None` before the first round.
    pub fn min_headroom(&self) -> Option<i64> {
        let v = self.min_headroom_ns.load(Relaxed);
        (v != i64::MAX).then_some(v)
    }
}

/// A latency histogram with fixed bucket bounds (nanoseconds), cumulative
/// as Prometheus wants them when rendered: per bucket the observations at
/// or below its bound, and the sum and count of all.
#[derive(Debug)]
pub struct LatencyHistogram {
    /// Upper bounds of the buckets, increasing; `+Inf` is implicit.
    pub bounds_ns: &'static [u64],
    /// Observations in each bucket alone (not cumulative), one more for
    /// those above the last bound.
    counts: Vec<AtomicU64>,
    sum_ns: AtomicU64,
}

impl LatencyHistogram {
    pub fn new(bounds_ns: &'static [u64]) -> LatencyHistogram {
        debug_assert!(bounds_ns.windows(2).all(|w| w[0] < w[1]));
        LatencyHistogram {
            bounds_ns,
            counts: (0..=bounds_ns.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
        }
    }

    /// Counts one observation of `ns`.
    pub fn observe_ns(&self, ns: u64) {
        let bucket = self.bounds_ns.partition_point(|&b| b < ns);
        self.counts[bucket].fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(ns, Relaxed);
    }

    /// Counts one observation of `d`.
    pub fn observe(&self, d: std::time::Duration) {
        self.observe_ns(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Cumulative counts per bound (the observations at or below it), then
    /// the count of all (`+Inf`).
    pub fn cumulative(&self) -> Vec<u64> {
        let mut total = 0;
        self.counts
            .iter()
            .map(|c| {
                total += c.load(Relaxed);
                total
            })
            .collect()
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Relaxed)).sum()
    }

    pub fn sum_ns(&self) -> u64 {
        self.sum_ns.load(Relaxed)
    }
}

/// Admission decisions: from the request reaching admission to the round
/// driver's answer (its queue included): 50 µs to 1 s.
pub const ADMISSION_DECISION_BOUNDS_NS: &[u64] = &[
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    1_000_000_000,
];
/// Stream start-up on the server: from the request reaching admission to
/// its first byte handed to the connection: 10 ms to 30 s (a round is 1 s
/// by default; admission may delay a start by its look-ahead).
pub const STREAM_START_BOUNDS_NS: &[u64] = &[
    10_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    750_000_000,
    1_000_000_000,
    1_500_000_000,
    2_000_000_000,
    3_000_000_000,
    5_000_000_000,
    10_000_000_000,
    30_000_000_000,
];
/// How late the round driver began a round after its boundary: 10 µs to
/// 1 s.
/// Buckets of the delivery lag: a batch's writing takes from microseconds
/// (a few streams) to about a hundred milliseconds (thousands), and the
/// admission limit is a share of a round.
pub const DELIVERY_LAG_BOUNDS_NS: &[u64] = &[
    100_000,
    1_000_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    200_000_000,
    300_000_000,
    500_000_000,
    750_000_000,
    1_000_000_000,
    2_000_000_000,
];
pub const ROUND_LATENESS_BOUNDS_NS: &[u64] = &[
    10_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    1_000_000_000,
];

/// One title's counters. Kept from the title's first request until the
/// server stops (a deleted title's series stay, so rates do not jump).
#[derive(Debug)]
pub struct TitleCounters {
    pub name: String,
    pub admitted: AtomicU64,
    pub rejected: AtomicU64,
    pub bytes_sent: AtomicU64,
    pub streams_completed: AtomicU64,
}

/// The server's counters.
#[derive(Debug)]
pub struct Metrics {
    pub rounds: AtomicU64,
    pub admitted: AtomicU64,
    /// Admitted streams that start mid-title (Range requests, `?t=`).
    pub admitted_mid_title: AtomicU64,
    /// Admitted streams started in the round in progress (a late start).
    pub admitted_late_start: AtomicU64,
    /// Late starts moved to the next boundary by the disks' measured
    /// lateness (`ArrayCounters::late_starts_moved`).
    pub late_starts_moved: AtomicU64,
    /// Admitted streams given a start burst (their first rounds read at
    /// once and sent as soon as read).
    pub admitted_burst: AtomicU64,
    /// Admitted streams written by the send loops (`sink`), not by hyper.
    pub admitted_direct: AtomicU64,
    /// Streams asked for again after a takeover, with their lost manager's
    /// schedule: placed on their own diagonal, or first-fit.
    pub resumed_in_place: AtomicU64,
    pub resumed_moved: AtomicU64,
    pub rejected_disk_time: AtomicU64,
    pub rejected_buffer: AtomicU64,
    pub rejected_network: AtomicU64,
    /// Refused while the host's deliveries ran late
    /// (`ServerConfig::delivery_lag_max_rounds`).
    pub rejected_host: AtomicU64,
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
    /// Re-reads of the other replica after an error (in unreserved time).
    pub rereads: AtomicU64,
    /// Replica extents found bad (checksum), each once until repaired;
    /// bad extents rewritten from their replica; rounds with no good
    /// replica. The array's counts, copied by the round driver.
    pub extents_bad: AtomicU64,
    pub extents_repaired: AtomicU64,
    pub rounds_lost: AtomicU64,
    /// Under a backup window: a failed disk's backup reads the survivors
    /// read from their backlogs, and those cut between rounds (the
    /// array's counts, copied by the round driver).
    pub window_recoveries: AtomicU64,
    pub window_splits: AtomicU64,
    /// Stream-rounds recovered after an error that were late (apart from
    /// `stream_round_misses`, which counts planned reads only).
    pub recovery_misses: AtomicU64,
    pub bytes_sent: AtomicU64,
    /// Of `bytes_sent`, those a socket took from the send arena without a
    /// copy (`crate::zerocopy`).
    pub bytes_sent_zero_copy: AtomicU64,
    /// Times a stream's socket was full: its connection's task then waits
    /// for room and writes the rest (`Sink::flush`).
    pub socket_full: AtomicU64,
    pub streams_completed: AtomicU64,
    /// Clients that went away before their stream ended.
    pub streams_disconnected: AtomicU64,
    /// Clients dropped after the grace time without reading.
    pub streams_dropped_stalled: AtomicU64,
    /// Streams ended by the server (read error, lost data, shutdown).
    pub streams_aborted: AtomicU64,
    /// Bytes of read buffers currently held (pool in use).
    pub buffer_bytes_in_use: AtomicU64,
    /// Bytes of read buffers the pool keeps free for reuse.
    pub buffer_bytes_free: AtomicU64,
    /// Rounds the ingest write gate let through, and their bytes.
    pub gated_writes: AtomicU64,
    pub gated_write_bytes: AtomicU64,
    /// The share of the drives' stroke admission charges, in percent (100:
    /// the whole drive), and how often it widened (`stroke`).
    pub charged_stroke_percent: AtomicU64,
    pub stroke_widenings: AtomicU64,
    pub disks: Vec<DiskMetrics>,
    /// The disk being rebuilt plus one (0: no rebuild), and its progress.
    pub rebuild_disk_plus_one: AtomicU64,
    pub rebuild_done_bytes: AtomicU64,
    pub rebuild_total_bytes: AtomicU64,
    /// Client connections open now.
    pub connections_open: AtomicU64,
    /// Connections answered 503 at accept: beyond the total bound, beyond
    /// the per-client bound.
    pub connections_refused_total: AtomicU64,
    pub connections_refused_per_client: AtomicU64,
    /// Connections the server closed, indexed by [`CloseReason`] as usize.
    pub connections_closed: [AtomicU64; 3],
    /// From a stream request reaching admission to the decision.
    pub admission_decision: LatencyHistogram,
    /// From a stream request reaching admission to its first byte handed
    /// to the client connection (admitted streams that sent a byte).
    pub stream_start: LatencyHistogram,
    /// How late the round driver began each round after its boundary.
    pub round_lateness: LatencyHistogram,
    /// How late the send loops wrote each batch of releases: from the
    /// driver's hand-over to the end of the writing (`sink::Outbox`).
    pub delivery_lag: LatencyHistogram,
    /// How late each disk batch reached its disk thread past the model's
    /// start for it (the round's start, a late start's admission instant,
    /// or the end of the disk's backlog), and how late it ended past the
    /// model's end: the host's pace as the disks see it. The end's lateness
    /// is what a late start leaves of its round (`Array::batch_late`).
    pub batch_arrival_lateness: LatencyHistogram,
    pub batch_end_lateness: LatencyHistogram,
    /// Per-title counters, by title id.
    pub titles: RwLock<BTreeMap<TitleId, Arc<TitleCounters>>>,
    /// Seed 004's dynamic cycle as of the last round begun (`None`: a
    /// fixed cycle); written by the round driver once a round.
    pub cycle: std::sync::Mutex<Option<rondo_model::array::CycleStatus>>,
}

impl Metrics {
    pub fn new(disks: u32) -> Metrics {
        Metrics {
            rounds: AtomicU64::new(0),
            admitted: AtomicU64::new(0),
            admitted_mid_title: AtomicU64::new(0),
            admitted_late_start: AtomicU64::new(0),
            late_starts_moved: AtomicU64::new(0),
            admitted_burst: AtomicU64::new(0),
            admitted_direct: AtomicU64::new(0),
            resumed_in_place: AtomicU64::new(0),
            resumed_moved: AtomicU64::new(0),
            rejected_disk_time: AtomicU64::new(0),
            rejected_buffer: AtomicU64::new(0),
            rejected_network: AtomicU64::new(0),
            rejected_host: AtomicU64::new(0),
            rejected_other: AtomicU64::new(0),
            stream_round_misses: AtomicU64::new(0),
            disk_round_overruns: AtomicU64::new(0),
            lost_reads: AtomicU64::new(0),
            read_errors: AtomicU64::new(0),
            rereads: AtomicU64::new(0),
            extents_bad: AtomicU64::new(0),
            extents_repaired: AtomicU64::new(0),
            rounds_lost: AtomicU64::new(0),
            window_recoveries: AtomicU64::new(0),
            window_splits: AtomicU64::new(0),
            recovery_misses: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            bytes_sent_zero_copy: AtomicU64::new(0),
            socket_full: AtomicU64::new(0),
            streams_completed: AtomicU64::new(0),
            streams_disconnected: AtomicU64::new(0),
            streams_dropped_stalled: AtomicU64::new(0),
            streams_aborted: AtomicU64::new(0),
            buffer_bytes_in_use: AtomicU64::new(0),
            buffer_bytes_free: AtomicU64::new(0),
            gated_writes: AtomicU64::new(0),
            charged_stroke_percent: AtomicU64::new(100),
            stroke_widenings: AtomicU64::new(0),
            gated_write_bytes: AtomicU64::new(0),
            disks: (0..disks).map(|_| DiskMetrics::default()).collect(),
            rebuild_disk_plus_one: AtomicU64::new(0),
            rebuild_done_bytes: AtomicU64::new(0),
            rebuild_total_bytes: AtomicU64::new(0),
            connections_open: AtomicU64::new(0),
            connections_refused_total: AtomicU64::new(0),
            connections_refused_per_client: AtomicU64::new(0),
            connections_closed: Default::default(),
            admission_decision: LatencyHistogram::new(ADMISSION_DECISION_BOUNDS_NS),
            stream_start: LatencyHistogram::new(STREAM_START_BOUNDS_NS),
            round_lateness: LatencyHistogram::new(ROUND_LATENESS_BOUNDS_NS),
            delivery_lag: LatencyHistogram::new(DELIVERY_LAG_BOUNDS_NS),
            batch_arrival_lateness: LatencyHistogram::new(ROUND_LATENESS_BOUNDS_NS),
            batch_end_lateness: LatencyHistogram::new(ROUND_LATENESS_BOUNDS_NS),
            titles: RwLock::new(BTreeMap::new()),
            cycle: std::sync::Mutex::new(None),
        }
    }

    /// The dynamic cycle's last status (`None`: a fixed cycle).
    pub fn cycle(&self) -> Option<rondo_model::array::CycleStatus> {
        self.cycle.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The counters of title `id` (named `name`), created on first use.
    pub fn title(&self, id: TitleId, name: &str) -> Arc<TitleCounters> {
        if let Some(t) = self
            .titles
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
        {
            return Arc::clone(t);
        }
        let mut titles = self.titles.write().unwrap_or_else(|p| p.into_inner());
        Arc::clone(titles.entry(id).or_insert_with(|| {
            Arc::new(TitleCounters {
                name: name.to_string(),
                admitted: AtomicU64::new(0),
                rejected: AtomicU64::new(0),
                bytes_sent: AtomicU64::new(0),
                streams_completed: AtomicU64::new(0),
            })
        }))
    }

    /// Every title's counters, by id.
    pub fn title_counters(&self) -> Vec<(TitleId, Arc<TitleCounters>)> {
        self.titles
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(id, t)| (*id, Arc::clone(t)))
            .collect()
    }

    /// Counts a rejection by its reason.
    pub fn count_rejection(&self, rejection: &Rejection) {
        let counter = match rejection {
            Rejection::DiskTime { .. } => &self.rejected_disk_time,
            Rejection::Buffer { .. } => &self.rejected_buffer,
            Rejection::Network { .. } => &self.rejected_network,
            Rejection::HostBehind { .. } => &self.rejected_host,
            _ => &self.rejected_other,
        };
        counter.fetch_add(1, Relaxed);
    }

    /// Counts a connection answered 503 at accept.
    pub fn count_connection_refused(&self, refusal: Refusal) {
        match refusal {
            Refusal::Total => &self.connections_refused_total,
            Refusal::PerClient => &self.connections_refused_per_client,
        }
        .fetch_add(1, Relaxed);
    }

    /// Counts a connection the server closed.
    pub fn count_connection_closed(&self, reason: CloseReason) {
        self.connections_closed[reason as usize].fetch_add(1, Relaxed);
    }

    /// Connections the server closed for `reason`.
    pub fn connections_closed(&self, reason: CloseReason) -> u64 {
        self.connections_closed[reason as usize].load(Relaxed)
    }

    /// A JSON-friendly copy of every counter.
    pub fn snapshot(&self, active_streams: usize) -> MetricsSnapshot {
        let g = |a: &AtomicU64| a.load(Relaxed);
        MetricsSnapshot {
            rounds: g(&self.rounds),
            active_streams,
            admitted: g(&self.admitted),
            admitted_mid_title: g(&self.admitted_mid_title),
            admitted_late_start: g(&self.admitted_late_start),
            late_starts_moved: g(&self.late_starts_moved),
            admitted_burst: g(&self.admitted_burst),
            admitted_direct: g(&self.admitted_direct),
            resumed_in_place: g(&self.resumed_in_place),
            resumed_moved: g(&self.resumed_moved),
            rejected_disk_time: g(&self.rejected_disk_time),
            rejected_buffer: g(&self.rejected_buffer),
            rejected_network: g(&self.rejected_network),
            rejected_host: g(&self.rejected_host),
            rejected_other: g(&self.rejected_other),
            stream_round_misses: g(&self.stream_round_misses),
            disk_round_overruns: g(&self.disk_round_overruns),
            lost_reads: g(&self.lost_reads),
            read_errors: g(&self.read_errors),
            rereads: g(&self.rereads),
            extents_bad: g(&self.extents_bad),
            extents_repaired: g(&self.extents_repaired),
            rounds_lost: g(&self.rounds_lost),
            window_recoveries: g(&self.window_recoveries),
            window_splits: g(&self.window_splits),
            recovery_misses: g(&self.recovery_misses),
            bytes_sent: g(&self.bytes_sent),
            bytes_sent_zero_copy: g(&self.bytes_sent_zero_copy),
            socket_full: g(&self.socket_full),
            streams_completed: g(&self.streams_completed),
            streams_disconnected: g(&self.streams_disconnected),
            streams_dropped_stalled: g(&self.streams_dropped_stalled),
            streams_aborted: g(&self.streams_aborted),
            buffer_bytes_in_use: g(&self.buffer_bytes_in_use),
            buffer_bytes_free: g(&self.buffer_bytes_free),
            gated_writes: g(&self.gated_writes),
            gated_write_bytes: g(&self.gated_write_bytes),
            connections_open: g(&self.connections_open),
            connections_refused: g(&self.connections_refused_total)
                + g(&self.connections_refused_per_client),
            connections_closed_header_timeout: self.connections_closed(CloseReason::HeaderTimeout),
            connections_closed_idle: self.connections_closed(CloseReason::Idle),
            connections_closed_stream_stopped: self.connections_closed(CloseReason::StreamStopped),
            disks: self
                .disks
                .iter()
                .enumerate()
                .map(|(disk, d)| DiskSnapshot {
                    disk: DiskIndex(disk as u32),
                    rounds: g(&d.rounds),
                    reads: g(&d.reads),
                    bytes_read: g(&d.bytes_read),
                    last_round: Round(g(&d.last_round)),
                    last_reserved_ns: g(&d.last_reserved_ns),
                    last_model_busy_ns: g(&d.last_model_busy_ns),
                    last_measured_busy_ns: g(&d.last_measured_busy_ns),
                    last_granted_ns: g(&d.last_granted_ns),
                    last_granted_model_ns: g(&d.last_granted_model_ns),
                    reserved_ns_total: g(&d.reserved_ns_total),
                    granted_ns_total: g(&d.granted_ns_total),
                    granted_model_ns_total: g(&d.granted_model_ns_total),
                    granted_commands: g(&d.granted_commands),
                    granted_bytes: g(&d.granted_bytes),
                    cache_hits: g(&d.cache_hits),
                    shared_reads: g(&d.shared_reads),
                    shared_bytes: g(&d.shared_bytes),
                    model_busy_ns_total: g(&d.model_busy_ns_total),
                    measured_busy_ns_total: g(&d.measured_busy_ns_total),
                    overruns: g(&d.overruns),
                    rounds_over_reserved: g(&d.rounds_over_reserved),
                    rounds_model_over_reserved: g(&d.rounds_model_over_reserved),
                    min_headroom_ns: d.min_headroom(),
                })
                .collect(),
            cycle: self.cycle(),
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
    pub admitted_late_start: u64,
    pub late_starts_moved: u64,
    pub admitted_burst: u64,
    pub admitted_direct: u64,
    pub resumed_in_place: u64,
    pub resumed_moved: u64,
    pub rejected_disk_time: u64,
    pub rejected_buffer: u64,
    pub rejected_network: u64,
    pub rejected_host: u64,
    pub rejected_other: u64,
    pub stream_round_misses: u64,
    pub disk_round_overruns: u64,
    pub lost_reads: u64,
    pub read_errors: u64,
    pub rereads: u64,
    pub extents_bad: u64,
    pub extents_repaired: u64,
    pub rounds_lost: u64,
    pub window_recoveries: u64,
    pub window_splits: u64,
    pub recovery_misses: u64,
    pub bytes_sent: u64,
    /// Of `bytes_sent`, those sent without a copy (`sendfile` from the
    /// send arena).
    pub bytes_sent_zero_copy: u64,
    /// Times a stream's socket was full (its task waited for room).
    pub socket_full: u64,
    pub streams_completed: u64,
    pub streams_disconnected: u64,
    pub streams_dropped_stalled: u64,
    pub streams_aborted: u64,
    pub buffer_bytes_in_use: u64,
    pub buffer_bytes_free: u64,
    pub gated_writes: u64,
    pub gated_write_bytes: u64,
    pub connections_open: u64,
    /// Connections answered 503 at accept (either bound).
    pub connections_refused: u64,
    pub connections_closed_header_timeout: u64,
    pub connections_closed_idle: u64,
    pub connections_closed_stream_stopped: u64,
    pub disks: Vec<DiskSnapshot>,
    /// Seed 004's dynamic cycle (`None`: a fixed cycle).
    pub cycle: Option<rondo_model::array::CycleStatus>,
}

/// One disk in a [`MetricsSnapshot`].
#[derive(Clone, Debug, Serialize)]
pub struct DiskSnapshot {
    pub disk: DiskIndex,
    pub rounds: u64,
    pub reads: u64,
    pub bytes_read: u64,
    pub last_round: Round,
    pub last_reserved_ns: u64,
    pub last_model_busy_ns: u64,
    pub last_measured_busy_ns: u64,
    /// The last round's time granted to the rebuild and ingest, and the
    /// model's time for their commands.
    pub last_granted_ns: u64,
    pub last_granted_model_ns: u64,
    pub reserved_ns_total: u64,
    pub granted_ns_total: u64,
    pub granted_model_ns_total: u64,
    pub granted_commands: u64,
    pub granted_bytes: u64,
    pub cache_hits: u64,
    pub shared_reads: u64,
    pub shared_bytes: u64,
    pub model_busy_ns_total: u64,
    pub measured_busy_ns_total: u64,
    pub overruns: u64,
    pub rounds_over_reserved: u64,
    pub rounds_model_over_reserved: u64,
    /// Smallest (reserved + granted) − measured busy time of a round (null
    /// before the first).
    pub min_headroom_ns: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_busier_than_its_reservation_is_counted() {
        let d = DiskMetrics::default();
        assert_eq!(d.min_headroom(), None);
        // Within the reservation: nothing counted, headroom 40 ms.
        let ok = d.record_round(
            Round(3),
            Some(100_000_000),
            GrantedIo::default(),
            50_000_000,
            60_000_000,
        );
        assert_eq!(
            ok,
            RoundCheck {
                measured_over: false,
                model_over: false
            }
        );
        assert_eq!(d.rounds_over_reserved.load(Relaxed), 0);
        assert_eq!(d.min_headroom(), Some(40_000_000));
        // Equal is not over.
        d.record_round(
            Round(4),
            Some(100_000_000),
            GrantedIo::default(),
            100_000_000,
            100_000_000,
        );
        assert_eq!(d.rounds_over_reserved.load(Relaxed), 0);
        assert_eq!(d.rounds_model_over_reserved.load(Relaxed), 0);
        // Measured over (the host delayed the thread), model within.
        let late = d.record_round(
            Round(5),
            Some(100_000_000),
            GrantedIo::default(),
            90_000_000,
            100_000_001,
        );
        assert!(late.measured_over && !late.model_over);
        // Both over (a bound that does not hold).
        let bad = d.record_round(
            Round(6),
            Some(10_000_000),
            GrantedIo::default(),
            20_000_000,
            25_000_000,
        );
        assert!(bad.measured_over && bad.model_over);
        assert_eq!(d.rounds_over_reserved.load(Relaxed), 2);
        assert_eq!(d.rounds_model_over_reserved.load(Relaxed), 1);
        assert_eq!(d.min_headroom(), Some(-15_000_000));
        // A failed disk's round has no reservation: never counted.
        let failed = d.record_round(Round(7), None, GrantedIo::default(), 0, 5_000_000);
        assert!(!failed.measured_over && !failed.model_over);
        assert_eq!(d.rounds_over_reserved.load(Relaxed), 2);
        assert_eq!(d.last_round.load(Relaxed), 7);
        assert_eq!(
            d.measured_busy_ns_total.load(Relaxed),
            60_000_000 + 100_000_000 + 100_000_001 + 25_000_000 + 5_000_000
        );
    }

    #[test]
    fn the_budget_is_reserved_plus_granted_and_overruns_still_count() {
        let d = DiskMetrics::default();
        let granted = |granted_ns| GrantedIo {
            granted_ns,
            commands: 2,
            bytes: 1 << 20,
            model_ns: granted_ns / 2,
        };
        // Busier than the streams' reservation, within reserved + granted.
        let ok = d.record_round(
            Round(1),
            Some(100_000_000),
            granted(80_000_000),
            170_000_000,
            180_000_000,
        );
        assert!(!ok.measured_over && !ok.model_over);
        assert_eq!(d.min_headroom(), Some(0));
        // Past reserved + granted: a genuine overrun, counted.
        let over = d.record_round(
            Round(2),
            Some(100_000_000),
            granted(80_000_000),
            170_000_000,
            180_000_001,
        );
        assert!(over.measured_over && !over.model_over);
        let both = d.record_round(
            Round(3),
            Some(100_000_000),
            granted(10_000_000),
            120_000_000,
            130_000_000,
        );
        assert!(both.measured_over && both.model_over);
        assert_eq!(d.rounds_over_reserved.load(Relaxed), 2);
        assert_eq!(d.rounds_model_over_reserved.load(Relaxed), 1);
        assert_eq!(d.granted_ns_total.load(Relaxed), 170_000_000);
        assert_eq!(d.granted_commands.load(Relaxed), 6);
        assert_eq!(d.last_granted_ns.load(Relaxed), 10_000_000);
        // No budget (a failed disk, nothing rebuilt onto it): never compared.
        let failed = d.record_round(Round(4), None, granted(0), 0, 5_000_000);
        assert!(!failed.measured_over);
        assert_eq!(d.rounds_over_reserved.load(Relaxed), 2);
    }
}
