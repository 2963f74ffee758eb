//! The server's counters as Prometheus text exposition format 0.0.4,
//! rendered by hand from [`Metrics`]: a `# HELP` and a `# TYPE` line per
//! family, counters ending in `_total`, times in seconds and sizes in bytes
//! (Prometheus' base units), disks labelled `disk="N"`, titles
//! `title="ID",name="NAME"`; latency histograms as `_bucket{le}`, `_sum`
//! and `_count`; the process's CPU and memory under the client libraries'
//! `process_*` names (`observe::process`).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use rondo_model::units::NS_PER_S;

use crate::metrics::{LatencyHistogram, Metrics};

/// The `Content-Type` of the exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Names of `DiskMetrics::state`'s values, by value.
pub const DISK_STATES: [&str; 4] = ["healthy", "suspect", "failed", "rebuilding"];

/// Builds the text one family at a time.
struct Writer {
    out: String,
}

impl Writer {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (key, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                // Label values here are digits and fixed words; escape anyway
                // so the format stays valid whatever a caller passes.
                let escaped = val
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n");
                let _ = write!(self.out, "{key}=\"{escaped}\"");
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }

    /// A histogram family: cumulative buckets by upper bound (seconds),
    /// `+Inf`, the sum (seconds) and the count.
    fn histogram(&mut self, name: &str, help: &str, h: &LatencyHistogram) {
        self.family(name, "histogram", help);
        let bucket = format!("{name}_bucket");
        let cumulative = h.cumulative();
        for (bound_ns, count) in h.bounds_ns.iter().zip(&cumulative) {
            let le = format!("{}", seconds(*bound_ns));
            self.sample(&bucket, &[("le", &le)], count);
        }
        self.sample(
            &bucket,
            &[("le", "+Inf")],
            cumulative.last().copied().unwrap_or(0),
        );
        self.sample(&format!("{name}_sum"), &[], seconds(h.sum_ns()));
        self.sample(&format!("{name}_count"), &[], h.count());
    }

    /// A family with one unlabelled sample.
    fn single(&mut self, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }
}

/// Seed 002's tiers and staging: jobs by phase, their progress, staged,
/// failed and evicted titles, the delays against their predictions, and
/// each tier's queue (`tier="NAME"`).
pub fn render_staging(s: &crate::staging::StagingSnapshot) -> String {
    use crate::staging::Phase;
    let mut w = Writer { out: String::new() };
    w.family(
        "rondo_staging_jobs",
        "gauge",
        "Titles being staged from a tier onto the array, by phase.",
    );
    for (phase, name) in [(0, "fetching"), (1, "writing"), (2, "failed")] {
        let count = s
            .jobs
            .iter()
            .filter(|j| {
                matches!(
                    (&j.phase, phase),
                    (Phase::Fetching, 0) | (Phase::Writing, 1) | (Phase::Failed { .. }, 2)
                )
            })
            .count();
        w.sample("rondo_staging_jobs", &[("phase", name)], count);
    }
    w.family(
        "rondo_staging_progress_bytes",
        "gauge",
        "Each job's bytes fetched from its tier and written to the array.",
    );
    for j in &s.jobs {
        w.sample(
            "rondo_staging_progress_bytes",
            &[("title", &j.name), ("step", "fetched")],
            j.fetched_bytes,
        );
        w.sample(
            "rondo_staging_progress_bytes",
            &[("title", &j.name), ("step", "written")],
            j.written_bytes,
        );
    }
    w.single(
        "rondo_staged_titles_total",
        "counter",
        "Titles staged onto the array since start.",
        s.staged_total,
    );
    w.single(
        "rondo_staging_failures_total",
        "counter",
        "Stagings that failed (tier object missing or corrupt, no room).",
        s.failures_total,
    );
    w.single(
        "rondo_staging_evictions_total",
        "counter",
        "Staged titles evicted from the array to make room.",
        s.evictions_total,
    );
    w.single(
        "rondo_staging_delay_seconds_total",
        "counter",
        "Measured staging delays (first request to stored), summed over staged titles.",
        s.delay_seconds_sum,
    );
    w.single(
        "rondo_staging_predicted_seconds_total",
        "counter",
        "The model's predicted staging delays, summed over the same titles.",
        s.predicted_seconds_sum,
    );
    w.family(
        "rondo_tier_fetches_active",
        "gauge",
        "Fetches in progress or queued on each tier.",
    );
    for t in &s.tiers {
        w.sample(
            "rondo_tier_fetches_active",
            &[("tier", &t.name)],
            t.fetches_active,
        );
    }
    w.family(
        "rondo_tier_fetched_bytes_total",
        "counter",
        "Bytes fetched from each tier.",
    );
    for t in &s.tiers {
        w.sample(
            "rondo_tier_fetched_bytes_total",
            &[("tier", &t.name)],
            t.fetched_bytes_total,
        );
    }
    w.family(
        "rondo_tier_fetch_failures_total",
        "counter",
        "Fetches from each tier that failed.",
    );
    for t in &s.tiers {
        w.sample(
            "rondo_tier_fetch_failures_total",
            &[("tier", &t.name)],
            t.fetch_failures_total,
        );
    }
    w.family(
        "rondo_tier_drives_busy",
        "gauge",
        "A jukebox tier's drives busy now (serving or with work queued).",
    );
    for t in &s.tiers {
        if let Some(busy) = t.drives_busy {
            w.sample("rondo_tier_drives_busy", &[("tier", &t.name)], busy);
        }
    }
    w.family(
        "rondo_tier_measured_bytes_per_second",
        "gauge",
        "An object-store tier's measured fetch throughput, which its predictions use.",
    );
    for t in &s.tiers {
        if let Some(rate) = t.measured_bytes_per_s {
            w.sample(
                "rondo_tier_measured_bytes_per_second",
                &[("tier", &t.name)],
                rate,
            );
        }
    }
    w.family(
        "rondo_tier_exchanges_total",
        "counter",
        "A jukebox tier's disc exchanges by its robot arms.",
    );
    for t in &s.tiers {
        if let Some(n) = t.exchanges_total {
            w.sample("rondo_tier_exchanges_total", &[("tier", &t.name)], n);
        }
    }
    w.out
}

/// Seed 004's dynamic cycle: its length, the utilisations CheckSchedule
/// reads, streams by cycle and the operations made.
fn render_cycle(w: &mut Writer, cycle: &rondo_model::array::CycleStatus) {
    w.single(
        "rondo_cycle_seconds",
        "gauge",
        "The dynamic time-cycle new streams start at (seed 004): rounds per read times T.",
        seconds(cycle.cycle_ns),
    );
    w.single(
        "rondo_cycle_memory_utilisation",
        "gauge",
        "u_m: server buffer reserved over its capacity, over the coming rounds.",
        cycle.memory_utilisation,
    );
    w.single(
        "rondo_cycle_time_utilisation",
        "gauge",
        "u_t: the busiest disk's reserved time over the round, over the coming rounds.",
        cycle.time_utilisation,
    );
    w.family(
        "rondo_cycle_streams",
        "gauge",
        "Admitted streams by their cycle (rounds read per request).",
    );
    for (rounds, count) in &cycle.streams_by_group_rounds {
        w.sample(
            "rondo_cycle_streams",
            &[("rounds", &rounds.to_string())],
            count,
        );
    }
    w.family(
        "rondo_cycle_operations_total",
        "counter",
        "Time-cycle operations made (combine, split, double, halve), and those due that did not fit (refused).",
    );
    for (op, count) in [
        ("combine", cycle.combines),
        ("split", cycle.splits),
        ("double", cycle.doubles),
        ("halve", cycle.halves),
        ("refused", cycle.refusals),
    ] {
        w.sample("rondo_cycle_operations_total", &[("op", op)], count);
    }
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / NS_PER_S as f64
}

/// Renders every counter. `active_streams` is the number of registered
/// streams (the sessions the round driver holds); `round_duration_ns` is T.
pub fn render(metrics: &Metrics, active_streams: usize, round_duration_ns: u64) -> String {
    let g = |a: &AtomicU64| a.load(Relaxed);
    let mut w = Writer {
        out: String::with_capacity(8 * 1024),
    };
    w.single(
        "rondo_round_duration_seconds",
        "gauge",
        "The round length T.",
        seconds(round_duration_ns),
    );
    if let Some(cycle) = metrics.cycle() {
        render_cycle(&mut w, &cycle);
    }
    w.single(
        "rondo_rounds_total",
        "counter",
        "Rounds the round driver has begun.",
        g(&metrics.rounds),
    );
    w.single(
        "rondo_streams_active",
        "gauge",
        "Admitted streams not yet ended (registered with the round driver).",
        active_streams,
    );
    w.family(
        "rondo_admissions_total",
        "counter",
        "Admission decisions by result: admitted, or rejected for disk time, buffer, network, the host's late deliveries or another reason (data unavailable, title too long, past its end).",
    );
    for (result, counter) in [
        ("admitted", &metrics.admitted),
        ("rejected_disk_time", &metrics.rejected_disk_time),
        ("rejected_buffer", &metrics.rejected_buffer),
        ("rejected_network", &metrics.rejected_network),
        ("rejected_host", &metrics.rejected_host),
        ("rejected_other", &metrics.rejected_other),
    ] {
        w.sample("rondo_admissions_total", &[("result", result)], g(counter));
    }
    w.single(
        "rondo_admissions_mid_title_total",
        "counter",
        "Admitted streams that start mid-title (Range requests, ?t=).",
        g(&metrics.admitted_mid_title),
    );
    w.single(
        "rondo_admissions_late_start_total",
        "counter",
        "Admitted streams started in the round in progress, their first reads given to the disks at once.",
        g(&metrics.admitted_late_start),
    );
    w.single(
        "rondo_late_starts_moved_total",
        "counter",
        "Streams that would have started in the round in progress but for the disks' measured lateness (batches ending past the model's end), started at the next boundary instead.",
        g(&metrics.late_starts_moved),
    );
    w.single(
        "rondo_admissions_burst_total",
        "counter",
        "Admitted streams given a start burst: their first rounds read in their first round and sent as soon as read.",
        g(&metrics.admitted_burst),
    );
    w.single(
        "rondo_admissions_direct_total",
        "counter",
        "Admitted streams whose rounds the send loops wrote into their sockets (the connection's requests before it were streams too); the others went through hyper.",
        g(&metrics.admitted_direct),
    );
    w.single(
        "rondo_resumed_in_place_total",
        "counter",
        "Streams asked for again after a takeover placed on their own (disk, round) diagonal, their lost manager's rounds shifted.",
        g(&metrics.resumed_in_place),
    );
    w.single(
        "rondo_resumed_moved_total",
        "counter",
        "Streams asked for again after a takeover placed first-fit: their own diagonal had no room or its round had passed.",
        g(&metrics.resumed_moved),
    );
    w.single(
        "rondo_deadline_misses_total",
        "counter",
        "Stream-round misses: a live stream's request for round i not complete when round i ended.",
        g(&metrics.stream_round_misses),
    );
    w.single(
        "rondo_disk_round_overruns_total",
        "counter",
        "Disk-round overruns: a disk's batch for round i ended after round i did.",
        g(&metrics.disk_round_overruns),
    );
    w.single(
        "rondo_lost_reads_total",
        "counter",
        "Planned reads with no working replica.",
        g(&metrics.lost_reads),
    );
    w.single(
        "rondo_read_errors_total",
        "counter",
        "Device read errors and checksum mismatches.",
        g(&metrics.read_errors),
    );
    w.single(
        "rondo_rereads_total",
        "counter",
        "Re-reads of the other replica after a read error, in unreserved disk time.",
        g(&metrics.rereads),
    );
    w.single(
        "rondo_extents_bad_total",
        "counter",
        "Replica extents that failed their checksum (each once until repaired).",
        g(&metrics.extents_bad),
    );
    w.single(
        "rondo_extents_repaired_total",
        "counter",
        "Bad extents rewritten from their replica in unreserved disk time.",
        g(&metrics.extents_repaired),
    );
    w.single(
        "rondo_rounds_lost_total",
        "counter",
        "Title rounds found with no good replica (streams reaching them stop).",
        g(&metrics.rounds_lost),
    );
    w.single(
        "rondo_window_recoveries_total",
        "counter",
        "A failed disk's backup reads done from a survivor's backlog over the backup window.",
        g(&metrics.window_recoveries),
    );
    w.single(
        "rondo_window_splits_total",
        "counter",
        "Backup reads cut at a block boundary between rounds of the backup window.",
        g(&metrics.window_splits),
    );
    w.single(
        "rondo_recovery_misses_total",
        "counter",
        "Stream-rounds recovered after a read error that were late (planned reads' misses are rondo_deadline_misses_total).",
        g(&metrics.recovery_misses),
    );
    w.single(
        "rondo_sent_bytes_total",
        "counter",
        "Stream bytes handed to client connections.",
        g(&metrics.bytes_sent),
    );
    w.single(
        "rondo_sent_zero_copy_bytes_total",
        "counter",
        "Of the stream bytes sent, those a socket took from the send arena without a copy (sendfile).",
        g(&metrics.bytes_sent_zero_copy),
    );
    w.single(
        "rondo_socket_full_total",
        "counter",
        "Times a stream's socket was full: its connection's task waits for room and writes the rest.",
        g(&metrics.socket_full),
    );
    w.family(
        "rondo_streams_ended_total",
        "counter",
        "Streams ended, by how: completed, client disconnected, dropped after the stall grace time, aborted by the server.",
    );
    for (how, counter) in [
        ("completed", &metrics.streams_completed),
        ("disconnected", &metrics.streams_disconnected),
        ("dropped_stalled", &metrics.streams_dropped_stalled),
        ("aborted", &metrics.streams_aborted),
    ] {
        w.sample("rondo_streams_ended_total", &[("how", how)], g(counter));
    }
    w.single(
        "rondo_connections_open",
        "gauge",
        "Client connections open now.",
        g(&metrics.connections_open),
    );
    w.family(
        "rondo_connections_refused_total",
        "counter",
        "Connections answered 503 at accept, by the bound they exceeded: total, per_client.",
    );
    for (bound, counter) in [
        ("total", &metrics.connections_refused_total),
        ("per_client", &metrics.connections_refused_per_client),
    ] {
        w.sample(
            "rondo_connections_refused_total",
            &[("bound", bound)],
            g(counter),
        );
    }
    w.family(
        "rondo_connections_closed_total",
        "counter",
        "Connections the server closed, by reason: header_timeout (request headers too slow), idle (no byte moved for the idle timeout), stream_stopped (its stream was stopped: the client stopped reading, or its data is gone).",
    );
    for reason in crate::listener::CloseReason::ALL {
        w.sample(
            "rondo_connections_closed_total",
            &[("reason", reason.label())],
            metrics.connections_closed(reason) as f64,
        );
    }
    w.single(
        "rondo_buffer_in_use_bytes",
        "gauge",
        "Bytes of read buffers currently held by streams.",
        g(&metrics.buffer_bytes_in_use),
    );
    w.single(
        "rondo_buffer_free_bytes",
        "gauge",
        "Bytes of read buffers kept free for reuse (trimmed every round to what streams hold).",
        g(&metrics.buffer_bytes_free),
    );
    w.single(
        "rondo_charged_stroke_percent",
        "gauge",
        "The share of the drives' cylinders admission charges seeks over (100: the whole drive; \
         less under --stroke data).",
        g(&metrics.charged_stroke_percent),
    );
    w.single(
        "rondo_charged_stroke_widenings_total",
        "counter",
        "Times the charged stroke widened to hold a new title's data.",
        g(&metrics.stroke_widenings),
    );
    w.single(
        "rondo_gated_writes_total",
        "counter",
        "Ingest rounds the write gate let through.",
        g(&metrics.gated_writes),
    );
    w.single(
        "rondo_gated_write_bytes_total",
        "counter",
        "Bytes of the ingest rounds the write gate let through.",
        g(&metrics.gated_write_bytes),
    );

    // Per disk: one family at a time, a sample per disk.
    let disk_labels: Vec<String> = (0..metrics.disks.len()).map(|d| d.to_string()).collect();
    type DiskValue = fn(&crate::metrics::DiskMetrics) -> f64;
    let per_disk: [(&str, &str, &str, DiskValue); 20] = [
        (
            "rondo_disk_shared_reads_total",
            "counter",
            "Stream reads that took the buffer of another stream's read of the same extents instead of reading the device.",
            |d| d.shared_reads.load(Relaxed) as f64,
        ),
        (
            "rondo_disk_shared_bytes_total",
            "counter",
            "Bytes of the stream reads that shared another stream's buffer.",
            |d| d.shared_bytes.load(Relaxed) as f64,
        ),
        (
            "rondo_disk_cache_hits_total",
            "counter",
            "Stream reads the disk model served wholly from the drive's cache (prefetched blocks).",
            |d| d.cache_hits.load(Relaxed) as f64,
        ),
        (
            "rondo_disk_reserved_seconds",
            "gauge",
            "Disk time reserved for the disk's last planned round, fixed term included.",
            |d| seconds(d.last_reserved_ns.load(Relaxed)),
        ),
        (
            "rondo_disk_model_busy_seconds",
            "gauge",
            "The disk model's busy time in the disk's last finished round.",
            |d| seconds(d.last_model_busy_ns.load(Relaxed)),
        ),
        (
            "rondo_disk_measured_busy_seconds",
            "gauge",
            "Measured busy time of the disk's last finished round (first read issued to last read done).",
            |d| seconds(d.last_measured_busy_ns.load(Relaxed)),
        ),
        (
            "rondo_disk_last_round",
            "gauge",
            "The disk's last finished round.",
            |d| d.last_round.load(Relaxed) as f64,
        ),
        (
            "rondo_disk_reserved_seconds_total",
            "counter",
            "Disk time reserved, summed over the disk's planned rounds.",
            |d| seconds(d.reserved_ns_total.load(Relaxed)),
        ),
        (
            "rondo_disk_model_busy_seconds_total",
            "counter",
            "The disk model's busy time, summed over finished rounds.",
            |d| seconds(d.model_busy_ns_total.load(Relaxed)),
        ),
        (
            "rondo_disk_measured_busy_seconds_total",
            "counter",
            "Measured busy time, summed over finished rounds.",
            |d| seconds(d.measured_busy_ns_total.load(Relaxed)),
        ),
        (
            "rondo_disk_rounds_total",
            "counter",
            "Rounds whose batch the disk has finished.",
            |d| d.rounds.load(Relaxed) as f64,
        ),
        (
            "rondo_disk_reads_total",
            "counter",
            "Reads (requests) the disk performed.",
            |d| d.reads.load(Relaxed) as f64,
        ),
        (
            "rondo_disk_read_bytes_total",
            "counter",
            "Bytes the disk read.",
            |d| d.bytes_read.load(Relaxed) as f64,
        ),
        (
            "rondo_disk_overruns_total",
            "counter",
            "Rounds whose batch on this disk ended after the round did.",
            |d| d.overruns.load(Relaxed) as f64,
        ),
        (
            "rondo_disk_errors_total",
            "counter",
            "Read errors and checksum mismatches on this disk.",
            |d| d.errors.load(Relaxed) as f64,
        ),
        (
            "rondo_disk_granted_seconds_total",
            "counter",
            "Disk time granted to writes and the rebuild's copies (ingest, rebuild), summed over finished rounds.",
            |d| seconds(d.granted_ns_total.load(Relaxed)),
        ),
        (
            "rondo_disk_granted_model_seconds_total",
            "counter",
            "The disk model's time for the granted writes and copies, summed over finished rounds.",
            |d| seconds(d.granted_model_ns_total.load(Relaxed)),
        ),
        (
            "rondo_disk_granted_bytes_total",
            "counter",
            "Bytes of granted writes and copies the disk model served.",
            |d| d.granted_bytes.load(Relaxed) as f64,
        ),
        (
            "rondo_disk_rounds_over_reserved_total",
            "counter",
            "Finished rounds whose measured busy time exceeded the disk time reserved for them (fixed term included) plus the time granted to writes.",
            |d| d.rounds_over_reserved.load(Relaxed) as f64,
        ),
        (
            "rondo_disk_rounds_model_over_reserved_total",
            "counter",
            "Finished rounds whose disk-model busy time exceeded the disk time reserved for them plus the time granted to writes (the round bound did not hold).",
            |d| d.rounds_model_over_reserved.load(Relaxed) as f64,
        ),
    ];
    for (name, kind, help, value) in per_disk {
        w.family(name, kind, help);
        for (disk, d) in metrics.disks.iter().enumerate() {
            w.sample(name, &[("disk", &disk_labels[disk])], value(d));
        }
    }
    w.family(
        "rondo_disk_state",
        "gauge",
        "1 for the disk's current state (healthy, suspect, failed, rebuilding), 0 for the others.",
    );
    for (disk, d) in metrics.disks.iter().enumerate() {
        let state = g(&d.state);
        for (value, name) in DISK_STATES.iter().enumerate() {
            w.sample(
                "rondo_disk_state",
                &[("disk", &disk_labels[disk]), ("state", name)],
                u8::from(state == value as u64),
            );
        }
    }

    let rebuild_plus_one = g(&metrics.rebuild_disk_plus_one);
    w.single(
        "rondo_rebuild_disk",
        "gauge",
        "The disk being rebuilt, or -1 when no rebuild runs.",
        rebuild_plus_one as i64 - 1,
    );
    w.single(
        "rondo_rebuild_done_bytes",
        "gauge",
        "Bytes the running (or last) rebuild has copied.",
        g(&metrics.rebuild_done_bytes),
    );
    w.single(
        "rondo_rebuild_total_bytes",
        "gauge",
        "Bytes the running (or last) rebuild has to copy.",
        g(&metrics.rebuild_total_bytes),
    );

    w.histogram(
        "rondo_admission_decision_seconds",
        "Time from a stream request reaching admission to the decision (admitted or refused), the round driver's queue included.",
        &metrics.admission_decision,
    );
    w.histogram(
        "rondo_stream_start_seconds",
        "Time from a stream request reaching admission to its first byte handed to the client connection (the server's part of start-up).",
        &metrics.stream_start,
    );
    w.histogram(
        "rondo_round_start_lateness_seconds",
        "How late the round driver began each round after its boundary.",
        &metrics.round_lateness,
    );
    w.histogram(
        "rondo_delivery_lag_seconds",
        "How late the send loops wrote each batch of released rounds into the sockets, from the round driver's hand-over to the end of the writing; with --delivery-lag-max-rounds, new streams are refused while it is over that.",
        &metrics.delivery_lag,
    );
    w.histogram(
        "rondo_batch_arrival_lateness_seconds",
        "How late each disk batch reached its disk thread past the model's start for it (the round's start, a late start's admission, or the end of the disk's backlog).",
        &metrics.batch_arrival_lateness,
    );
    w.histogram(
        "rondo_batch_end_lateness_seconds",
        "How late each disk batch ended past the model's end for it; a late start leaves the latest of the round in progress and the one before of its round.",
        &metrics.batch_end_lateness,
    );

    let titles = metrics.title_counters();
    let title_labels: Vec<(String, String)> = titles
        .iter()
        .map(|(id, t)| (id.0.to_string(), t.name.clone()))
        .collect();
    type TitleValue = fn(&crate::metrics::TitleCounters) -> u64;
    let per_title: [(&str, &str, TitleValue); 3] = [
        (
            "rondo_title_sent_bytes_total",
            "Stream bytes of the title handed to client connections.",
            |t| t.bytes_sent.load(Relaxed),
        ),
        (
            "rondo_title_streams_completed_total",
            "Streams of the title that sent their last byte.",
            |t| t.streams_completed.load(Relaxed),
        ),
        (
            "rondo_title_streams_admitted_total",
            "Stream requests of the title admitted.",
            |t| t.admitted.load(Relaxed),
        ),
    ];
    if !titles.is_empty() {
        for (name, help, value) in per_title {
            w.family(name, "counter", help);
            for ((_, t), (id, title_name)) in titles.iter().zip(&title_labels) {
                w.sample(name, &[("title", id), ("name", title_name)], value(t));
            }
        }
        w.family(
            "rondo_title_streams_rejected_total",
            "counter",
            "Stream requests of the title refused (503: no start round within the look-ahead).",
        );
        for ((_, t), (id, title_name)) in titles.iter().zip(&title_labels) {
            w.sample(
                "rondo_title_streams_rejected_total",
                &[("title", id), ("name", title_name)],
                t.rejected.load(Relaxed),
            );
        }
    }

    if let Some(p) = super::process::read() {
        w.single(
            "process_cpu_seconds_total",
            "counter",
            "User and system CPU time of the server process, in seconds.",
            p.cpu_seconds,
        );
        w.single(
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory of the server process.",
            p.resident_memory_bytes,
        );
        w.single(
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory of the server process.",
            p.virtual_memory_bytes,
        );
        w.single(
            "process_threads",
            "gauge",
            "Threads of the server process.",
            p.threads,
        );
        w.single(
            "process_open_fds",
            "gauge",
            "Open file descriptors of the server process.",
            p.open_fds,
        );
        w.single(
            "process_start_time_seconds",
            "gauge",
            "Start time of the server process, seconds since the Unix epoch.",
            p.start_time_seconds,
        );
    }
    w.out
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    /// One sample line parsed back: name, labels, value.
    #[derive(Debug)]
    struct Sample {
        name: String,
        labels: BTreeMap<String, String>,
        value: f64,
    }

    fn is_name(text: &str) -> bool {
        let mut chars = text.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    }

    /// A small parser of the text format that fails on anything malformed:
    /// returns the samples and each family's type.
    fn parse(text: &str) -> (Vec<Sample>, BTreeMap<String, String>) {
        let mut types = BTreeMap::new();
        let mut helps = BTreeSet::new();
        let mut samples = Vec::new();
        let mut series = BTreeSet::new();
        assert!(text.ends_with('\n'), "the text ends with a newline");
        for line in text.lines() {
            assert!(!line.is_empty(), "no empty lines");
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').expect("HELP name text");
                assert!(is_name(name), "HELP name {name:?}");
                assert!(!help.trim().is_empty(), "HELP of {name} has text");
                assert!(helps.insert(name.to_string()), "one HELP for {name}");
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
                assert!(is_name(name), "TYPE name {name:?}");
                assert!(
                    matches!(kind, "counter" | "gauge" | "histogram"),
                    "TYPE {kind}"
                );
                assert!(helps.contains(name), "HELP before TYPE for {name}");
                assert!(
                    types.insert(name.to_string(), kind.to_string()).is_none(),
                    "one TYPE for {name}"
                );
                continue;
            }
            assert!(!line.starts_with('#'), "unknown comment {line:?}");
            let (series_text, value) = line.rsplit_once(' ').expect("series value");
            let value: f64 = value
                .parse()
                .unwrap_or_else(|_| panic!("value of {line:?}"));
            assert!(value.is_finite(), "finite value in {line:?}");
            let (name, labels) = match series_text.split_once('{') {
                None => (series_text, BTreeMap::new()),
                Some((name, rest)) => {
                    let body = rest.strip_suffix('}').expect("labels end with }");
                    let mut labels = BTreeMap::new();
                    for pair in body.split(',') {
                        let (key, val) = pair.split_once('=').expect("label key=value");
                        assert!(is_name(key), "label name {key:?}");
                        let val = val
                            .strip_prefix('"')
                            .and_then(|v| v.strip_suffix('"'))
                            .expect("quoted label value");
                        assert!(!val.contains('"'), "no raw quote in {val:?}");
                        labels.insert(key.to_string(), val.to_string());
                    }
                    (name, labels)
                }
            };
            assert!(is_name(name), "sample name {name:?}");
            // A histogram's samples are its name with a suffix.
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| {
                    name.strip_suffix(suffix)
                        .filter(|f| types.get(*f).is_some_and(|k| k == "histogram"))
                })
                .unwrap_or(name);
            let kind = types
                .get(family)
                .unwrap_or_else(|| panic!("TYPE declared before {name}"));
            if kind == "histogram" {
                assert_ne!(family, name, "histogram sample {name} has a suffix");
                assert!(value >= 0.0, "histogram {name} is not negative");
                if name.ends_with("_bucket") {
                    assert!(labels.contains_key("le"), "{name} has le");
                }
            } else if kind == "counter" {
                assert!(name.ends_with("_total"), "counter {name} ends in _total");
                assert!(value >= 0.0, "counter {name} is not negative");
            } else {
                assert!(!name.ends_with("_total"), "gauge {name} has no _total");
            }
            assert!(
                series.insert(series_text.to_string()),
                "series {series_text} once"
            );
            samples.push(Sample {
                name: name.to_string(),
                labels,
                value,
            });
        }
        for (name, kind) in &types {
            let sample_name = if kind == "histogram" {
                format!("{name}_count")
            } else {
                name.clone()
            };
            assert!(
                samples.iter().any(|s| s.name == sample_name),
                "family {name} has samples"
            );
            if kind == "histogram" {
                // Buckets cumulative in increasing `le`, ending at +Inf = count.
                let buckets: Vec<(f64, f64)> = samples
                    .iter()
                    .filter(|s| s.name == format!("{name}_bucket"))
                    .map(|s| {
                        let le = &s.labels["le"];
                        let le = if le == "+Inf" {
                            f64::INFINITY
                        } else {
                            le.parse().expect("le is a number")
                        };
                        (le, s.value)
                    })
                    .collect();
                assert!(buckets.len() >= 2, "{name} has buckets");
                assert!(
                    buckets
                        .windows(2)
                        .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
                    "{name} buckets cumulative: {buckets:?}"
                );
                let last = buckets.last().unwrap();
                assert!(last.0.is_infinite(), "{name} ends at +Inf");
                let count = samples
                    .iter()
                    .find(|s| s.name == format!("{name}_count"))
                    .unwrap()
                    .value;
                assert_eq!(last.1, count, "{name}: +Inf bucket = count");
            }
        }
        (samples, types)
    }

    fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
        let found: Vec<&Sample> = samples
            .iter()
            .filter(|s| {
                s.name == name
                    && s.labels.len() == labels.len()
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(v))
            })
            .collect();
        assert_eq!(found.len(), 1, "one sample {name} {labels:?}");
        found[0].value
    }

    /// Metric names a text mentions: words starting `rondo_` or `process_`,
    /// with a brace list expanded (`rondo_disk_{a,b}_seconds` is two names)
    /// and label lists (`{disk}`) dropped; Rust paths (`rondo_model::…`)
    /// are not names; a name followed by `*` is a prefix (kept with it).
    fn names_in(text: &str) -> BTreeSet<String> {
        let bytes = text.as_bytes();
        let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
        let mut names = BTreeSet::new();
        let mut i = 0;
        while i < bytes.len() {
            let starts = (bytes[i..].starts_with(b"rondo_") || bytes[i..].starts_with(b"process_"))
                && (i == 0 || !word(bytes[i - 1]));
            if !starts {
                i += 1;
                continue;
            }
            let mut stems = vec![String::new()];
            let mut j = i;
            loop {
                let start = j;
                while j < bytes.len() && word(bytes[j]) {
                    j += 1;
                }
                for stem in &mut stems {
                    stem.push_str(&text[start..j]);
                }
                // `{a,b}` followed by more of the name is an alternation.
                if j < bytes.len()
                    && bytes[j] == b'{'
                    && let Some(close) = text[j..].find('}')
                {
                    let after = j + close + 1;
                    if after < bytes.len() && word(bytes[after]) {
                        let options: Vec<&str> = text[j + 1..j + close].split(',').collect();
                        stems = stems
                            .iter()
                            .flat_map(|s| options.iter().map(move |o| format!("{s}{o}")))
                            .collect();
                        j = after;
                        continue;
                    }
                }
                break;
            }
            let path = text[j..].starts_with("::");
            // `rondo_disk_*`: a prefix, kept with its star.
            let prefix = text[j..].starts_with('*');
            if prefix {
                names.extend(stems.into_iter().map(|s| s + "*"));
            } else if !path {
                names.extend(stems);
            }
            i = j.max(i + 1);
        }
        names
    }

    /// Crates and functions the docs name with the same prefix.
    const NOT_METRICS: &[&str] = &[
        "rondo_cli",
        "rondo_experiments",
        "rondo_media",
        "rondo_model",
        "rondo_server",
        "rondo_sim",
        "rondo_store",
        "rondo_testkit",
        "rondo_bound",
        "rondo_bound_covers_every_cscan_batch",
        "rondo_bound_margins_report",
        "rondo_write_bound",
    ];

    /// Every metric the documentation names is one `/metrics` exports (the
    /// renderer with a title and every histogram populated), so an operator
    /// who copies a name from the docs into a query finds it.
    #[test]
    fn every_metric_the_docs_name_is_exported() {
        let metrics = Metrics::new(2);
        metrics.title(rondo_model::units::TitleId(1), "t");
        // And the staging families, with a job and a jukebox and an S3 tier.
        let staging = crate::staging::StagingSnapshot {
            jobs: vec![crate::staging::JobView {
                name: "t".into(),
                tier: "vault".into(),
                phase: crate::staging::Phase::Fetching,
                elapsed_seconds: 1.0,
                predicted_seconds: 2.0,
                remaining_seconds: 1.0,
                predicted_fetch_seconds: 1.5,
                fetch_seconds: None,
                predicted_write_rounds: 1,
                predicted_lower_bound: false,
                fetched_bytes: 1,
                object_bytes: 2,
                written_bytes: 0,
                stored_bytes: 2,
            }],
            tiers: vec![
                rondo_tier::TierStatus {
                    name: "vault".into(),
                    kind: "jukebox",
                    drives_busy: Some(1),
                    drives_total: Some(16),
                    exchanges_total: Some(1),
                    cache_hits_total: Some(0),
                    ..Default::default()
                },
                rondo_tier::TierStatus {
                    name: "cloud".into(),
                    kind: "s3",
                    measured_bytes_per_s: Some(1e8),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let mut text = render(&metrics, 0, 1_000_000_000);
        text.push_str(&render_staging(&staging));
        let (samples, types) = parse(&text);
        let exported: BTreeSet<&str> = types
            .keys()
            .map(String::as_str)
            .chain(samples.iter().map(|s| s.name.as_str()))
            .collect();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(root.join("docs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        files.extend(["README.md", "ARCHITECTURE.md"].map(|f| root.join(f)));
        let mut checked = 0;
        let mut missing = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            for name in names_in(&text) {
                // The interface node's families are its own exporter's
                // (`/interface/metrics`, `rondo_cluster::interface_node`).
                if NOT_METRICS.contains(&name.as_str()) || name.starts_with("rondo_interface_") {
                    continue;
                }
                checked += 1;
                let found = match name.strip_suffix('*') {
                    Some(prefix) => exported.iter().any(|e| e.starts_with(prefix)),
                    None => exported.contains(name.as_str()),
                };
                if !found {
                    missing.push(format!("{}: {name}", file.display()));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "named in the docs, not exported: {missing:#?}"
        );
        assert!(
            checked > 40,
            "only {checked} names found: the scan is broken"
        );
        // The scanner itself: an alternation, labels, a path, a suffix.
        let found = names_in(
            "`rondo_disk_{a,b}_seconds_total{disk}`, rondo_x{le=\"1\"}, \
             rondo_model::units, process_open_fds, `rondo_title_*`.",
        );
        assert_eq!(
            found,
            BTreeSet::from([
                "rondo_disk_a_seconds_total".to_string(),
                "rondo_disk_b_seconds_total".to_string(),
                "rondo_x".to_string(),
                "process_open_fds".to_string(),
                "rondo_title_*".to_string(),
            ])
        );
    }

    #[test]
    fn renders_every_counter_well_formed() {
        let metrics = Metrics::new(3);
        metrics.rounds.store(42, Relaxed);
        metrics.admitted.store(7, Relaxed);
        metrics.rejected_disk_time.store(3, Relaxed);
        metrics.rejected_buffer.store(2, Relaxed);
        metrics.rejected_other.store(1, Relaxed);
        metrics.stream_round_misses.store(5, Relaxed);
        metrics.bytes_sent.store(123_456_789, Relaxed);
        metrics.buffer_bytes_in_use.store(65_536, Relaxed);
        metrics.streams_completed.store(4, Relaxed);
        let d1 = &metrics.disks[1];
        d1.last_reserved_ns.store(250_000_000, Relaxed);
        d1.last_model_busy_ns.store(12_500_000, Relaxed);
        d1.last_measured_busy_ns.store(13_000_001, Relaxed);
        d1.reserved_ns_total.store(10_000_000_000, Relaxed);
        d1.measured_busy_ns_total.store(1_500_000_000, Relaxed);
        d1.state.store(2, Relaxed);
        // Disk 0: one round measured over its reservation, the model within.
        metrics.disks[0].record_round(
            rondo_model::units::Round(9),
            Some(10_000_000),
            crate::metrics::GrantedIo::default(),
            5_000_000,
            12_000_000,
        );
        metrics.disks[2].state.store(3, Relaxed);
        metrics.rebuild_disk_plus_one.store(3, Relaxed);
        metrics.rebuild_done_bytes.store(1 << 20, Relaxed);
        metrics.rebuild_total_bytes.store(4 << 20, Relaxed);

        // Latencies: 3 decisions (0.2, 0.3 and 40 ms), 2 start-ups (0.8 s,
        // 12 s), one round begun 7 µs late.
        for ns in [200_000, 300_000, 40_000_000] {
            metrics.admission_decision.observe_ns(ns);
        }
        metrics.stream_start.observe_ns(800_000_000);
        metrics.stream_start.observe_ns(12_000_000_000);
        metrics.round_lateness.observe_ns(7_000);
        metrics.batch_end_lateness.observe_ns(60_000_000);
        metrics.batch_arrival_lateness.observe_ns(0);
        // Two titles, one with a name that needs escaping.
        let t = metrics.title(rondo_model::units::TitleId(3), "ocean");
        t.admitted.store(5, Relaxed);
        t.rejected.store(2, Relaxed);
        t.bytes_sent.store(1_000_000, Relaxed);
        t.streams_completed.store(4, Relaxed);
        metrics.title(rondo_model::units::TitleId(0), "a\\b");

        let text = render(&metrics, 6, 1_000_000_000);
        let (samples, types) = parse(&text);

        let decision = "rondo_admission_decision_seconds";
        assert_eq!(types[decision], "histogram");
        assert_eq!(value(&samples, &format!("{decision}_count"), &[]), 3.0);
        assert!((value(&samples, &format!("{decision}_sum"), &[]) - 0.0405).abs() < 1e-12);
        let bucket =
            |name: &str, le: &str| value(&samples, &format!("{name}_bucket"), &[("le", le)]);
        assert_eq!(bucket(decision, "0.0001"), 0.0);
        assert_eq!(bucket(decision, "0.00025"), 1.0);
        assert_eq!(bucket(decision, "0.0005"), 2.0);
        assert_eq!(bucket(decision, "0.025"), 2.0);
        assert_eq!(bucket(decision, "0.05"), 3.0);
        let start = "rondo_stream_start_seconds";
        assert_eq!(bucket(start, "0.75"), 0.0);
        assert_eq!(bucket(start, "1"), 1.0);
        assert_eq!(bucket(start, "10"), 1.0);
        assert_eq!(bucket(start, "30"), 2.0);
        assert_eq!(bucket(start, "+Inf"), 2.0);
        assert_eq!(bucket("rondo_round_start_lateness_seconds", "0.00001"), 1.0);
        assert_eq!(bucket("rondo_batch_end_lateness_seconds", "0.05"), 0.0);
        assert_eq!(bucket("rondo_batch_end_lateness_seconds", "0.1"), 1.0);
        assert_eq!(
            bucket("rondo_batch_arrival_lateness_seconds", "0.00001"),
            1.0
        );
        let ocean = [("title", "3"), ("name", "ocean")];
        assert_eq!(
            value(&samples, "rondo_title_streams_admitted_total", &ocean),
            5.0
        );
        assert_eq!(
            value(&samples, "rondo_title_streams_rejected_total", &ocean),
            2.0
        );
        assert_eq!(value(&samples, "rondo_title_sent_bytes_total", &ocean), 1e6);
        assert_eq!(
            value(&samples, "rondo_title_streams_completed_total", &ocean),
            4.0
        );
        assert!(
            text.contains("rondo_title_sent_bytes_total{title=\"0\",name=\"a\\\\b\"} 0\n"),
            "{text}"
        );
        if std::path::Path::new("/proc/self/stat").exists() {
            assert!(value(&samples, "process_resident_memory_bytes", &[]) > 1e6);
            assert!(value(&samples, "process_cpu_seconds_total", &[]) >= 0.0);
            assert!(value(&samples, "process_open_fds", &[]) >= 3.0);
            assert_eq!(types["process_cpu_seconds_total"], "counter");
        }

        assert_eq!(value(&samples, "rondo_round_duration_seconds", &[]), 1.0);
        assert_eq!(value(&samples, "rondo_rounds_total", &[]), 42.0);
        assert_eq!(value(&samples, "rondo_streams_active", &[]), 6.0);
        let admissions = |r| value(&samples, "rondo_admissions_total", &[("result", r)]);
        assert_eq!(admissions("admitted"), 7.0);
        assert_eq!(admissions("rejected_disk_time"), 3.0);
        assert_eq!(admissions("rejected_buffer"), 2.0);
        assert_eq!(admissions("rejected_network"), 0.0);
        assert_eq!(admissions("rejected_other"), 1.0);
        assert_eq!(value(&samples, "rondo_deadline_misses_total", &[]), 5.0);
        assert_eq!(
            value(&samples, "rondo_sent_bytes_total", &[]),
            123_456_789.0
        );
        assert_eq!(value(&samples, "rondo_buffer_in_use_bytes", &[]), 65_536.0);
        assert_eq!(
            value(
                &samples,
                "rondo_streams_ended_total",
                &[("how", "completed")]
            ),
            4.0
        );
        let disk1 = [("disk", "1")];
        assert_eq!(value(&samples, "rondo_disk_reserved_seconds", &disk1), 0.25);
        assert_eq!(
            value(&samples, "rondo_disk_model_busy_seconds", &disk1),
            0.0125
        );
        assert_eq!(
            value(&samples, "rondo_disk_measured_busy_seconds", &disk1),
            0.013000001
        );
        assert_eq!(
            value(&samples, "rondo_disk_reserved_seconds_total", &disk1),
            10.0
        );
        assert_eq!(
            value(&samples, "rondo_disk_measured_busy_seconds_total", &disk1),
            1.5
        );
        let disk0 = [("disk", "0")];
        assert_eq!(
            value(&samples, "rondo_disk_rounds_over_reserved_total", &disk0),
            1.0
        );
        assert_eq!(
            value(&samples, "rondo_disk_measured_busy_seconds", &disk0),
            0.012
        );
        let model_over = "rondo_disk_rounds_model_over_reserved_total";
        assert_eq!(value(&samples, model_over, &disk0), 0.0);
        assert_eq!(
            value(&samples, "rondo_disk_rounds_over_reserved_total", &disk1),
            0.0
        );
        assert_eq!(
            value(&samples, "rondo_disk_reserved_seconds", &[("disk", "0")]),
            0.0
        );
        // Exactly one state is 1 per disk, and it is the stored one.
        for (disk, expected) in [("0", "healthy"), ("1", "failed"), ("2", "rebuilding")] {
            for state in DISK_STATES {
                let v = value(
                    &samples,
                    "rondo_disk_state",
                    &[("disk", disk), ("state", state)],
                );
                assert_eq!(
                    v,
                    f64::from(u8::from(state == expected)),
                    "disk {disk} {state}"
                );
            }
        }
        assert_eq!(value(&samples, "rondo_rebuild_disk", &[]), 2.0);
        assert_eq!(value(&samples, "rondo_rebuild_done_bytes", &[]), 1048576.0);
        assert_eq!(value(&samples, "rondo_rebuild_total_bytes", &[]), 4194304.0);
        // Every disk appears in every per-disk family.
        for (name, _) in types.iter().filter(|(n, _)| {
            n.starts_with("rondo_disk_") && *n != "rondo_disk_round_overruns_total"
        }) {
            let disks: BTreeSet<&str> = samples
                .iter()
                .filter(|s| &s.name == name)
                .map(|s| s.labels["disk"].as_str())
                .collect();
            assert_eq!(disks, BTreeSet::from(["0", "1", "2"]), "{name}");
        }
    }

    #[test]
    fn no_rebuild_is_minus_one_and_idle_server_is_valid() {
        let metrics = Metrics::new(1);
        let text = render(&metrics, 0, 500_000_000);
        let (samples, _) = parse(&text);
        assert_eq!(value(&samples, "rondo_rebuild_disk", &[]), -1.0);
        assert_eq!(value(&samples, "rondo_round_duration_seconds", &[]), 0.5);
        assert_eq!(
            value(
                &samples,
                "rondo_disk_state",
                &[("disk", "0"), ("state", "healthy")]
            ),
            1.0
        );
    }

    #[test]
    fn the_parser_rejects_malformed_text() {
        let bad = [
            "rondo_x_total 1\n",                                      // no TYPE
            "# HELP a h\n# TYPE a counter\na 1\n",                    // counter without _total
            "# HELP a h\n# TYPE a gauge\na{disk=0} 1\n",              // unquoted label
            "# HELP a h\n# TYPE a gauge\na one\n",                    // not a number
            "# HELP a h\n# TYPE a gauge\na 1\na 2\n",                 // duplicate series
            "# HELP a_total h\n# TYPE a_total counter\na_total -1\n", // negative counter
        ];
        for text in bad {
            let result = std::panic::catch_unwind(|| parse(text));
            assert!(result.is_err(), "accepted {text:?}");
        }
    }
}
