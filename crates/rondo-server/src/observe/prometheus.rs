//! The server's counters as Prometheus text exposition format 0.0.4,
//! rendered by hand from [`Metrics`]: a `# HELP` and a `# TYPE` line per
//! family, counters ending in `_total`, times in seconds and sizes in bytes
//! (Prometheus' base units), disks labelled `disk="N"`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use rondo_model::units::NS_PER_S;

use crate::metrics::Metrics;

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

    /// A family with one unlabelled sample.
    fn single(&mut self, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
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
        "Admission decisions by result: admitted, or rejected for disk time, buffer, network or another reason (data unavailable, title too long, past its end).",
    );
    for (result, counter) in [
        ("admitted", &metrics.admitted),
        ("rejected_disk_time", &metrics.rejected_disk_time),
        ("rejected_buffer", &metrics.rejected_buffer),
        ("rejected_network", &metrics.rejected_network),
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
    let per_disk: [(&str, &str, &str, DiskValue); 17] = [
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
                assert!(matches!(kind, "counter" | "gauge"), "TYPE {kind}");
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
            let kind = types
                .get(name)
                .unwrap_or_else(|| panic!("TYPE declared before {name}"));
            if kind == "counter" {
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
        for name in types.keys() {
            assert!(
                samples.iter().any(|s| &s.name == name),
                "family {name} has samples"
            );
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

        let text = render(&metrics, 6, 1_000_000_000);
        let (samples, types) = parse(&text);

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
