//! What `rondo load` reports: the clients' records summed up (streams by
//! outcome, rejections by reason, errors by kind, start-up latency
//! quantiles, stalls, mean active streams), the server's deadline misses and
//! counter differences, idle clients and byte verification; as JSON
//! (`--json`) or as a few lines for a person.
//!
//! Quantiles are exact, from the sorted sample, by the nearest-rank rule
//! (the p-quantile of n values is the ⌈p·n⌉-th smallest).

use std::collections::BTreeMap;

use serde::Serialize;

use super::client::{Outcome, StreamRecord, TitleInfo};
use super::idle::{IdleOutcome, IdleRecord};
use super::server_metrics::DeadlineMisses;

/// The settings a run used, echoed into the report.
#[derive(Clone, Debug, Serialize)]
pub struct RunSettings {
    pub url: String,
    pub rate_per_s: f64,
    pub duration_s: f64,
    pub zipf_exponent: f64,
    /// `--popular-share`: the first title's share, in place of Zipf.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub popular_share: Option<f64>,
    pub seed: u64,
    pub max_streams: usize,
    pub idle_clients: usize,
    pub warmup_s: f64,
    pub verify_streams: usize,
    pub header_timeout_s: f64,
    pub read_timeout_s: f64,
    pub drain_timeout_s: f64,
    /// `None`: one round of each title.
    pub playout_delay_ms: Option<f64>,
    /// Client processes the streams were dealt over (`--processes`).
    pub processes: usize,
}

/// Requests per title.
#[derive(Clone, Debug, Serialize)]
pub struct TitleSummary {
    pub id: u64,
    pub name: String,
    pub duration_seconds: f64,
    pub requested: u64,
    pub started: u64,
    pub rejected: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct IdleSummary {
    pub requested: usize,
    /// Admitted and held unread until the run ended.
    pub held: usize,
    pub rejected: usize,
    pub errors: usize,
}

/// One title's byte check (`--verify`).
#[derive(Clone, Debug, Serialize)]
pub struct VerifiedTitle {
    pub title_id: u64,
    /// Completed streams of the title whose bodies were hashed.
    pub streams: usize,
    /// Of those, how many match the reference.
    pub matching: usize,
    /// FNV-1a 64 of a full GET made after the run, on an otherwise idle
    /// server; `None` if that GET did not complete.
    pub reference_fnv64: Option<String>,
    pub reference_error: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct VerifySummary {
    pub streams_checked: usize,
    pub mismatches: usize,
    pub titles: Vec<VerifiedTitle>,
}

/// Everything a run measured.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub settings: RunSettings,
    /// Streams the arrival process made (idle clients not included).
    pub streams_requested: usize,
    /// Admitted (200): completed + broken.
    pub streams_started: usize,
    /// Every byte arrived.
    pub streams_completed: usize,
    /// Admitted, then the body ended early, failed, fell silent or was
    /// still running at the drain timeout.
    pub streams_broken: usize,
    /// 503: admission refused.
    pub streams_rejected: usize,
    /// Not admitted for another reason (schedule fetch, connection, status).
    pub streams_errors: usize,
    /// rejected / (started + rejected).
    pub rejection_ratio: Option<f64>,
    pub rejections_by_reason: BTreeMap<String, u64>,
    pub retry_after_s_max: Option<u64>,
    /// Kinds of errors and of broken streams.
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Stalls at the playout delay (see `settings.playout_delay_ms`).
    pub stalls: u64,
    /// Stalls the strict player (no playout delay) would have had.
    pub stalls_without_delay: u64,
    pub stalled_streams: usize,
    /// Streams resumed at another interface node after their body broke
    /// (`--failover`), and how many times in all.
    pub failed_over_streams: usize,
    pub failovers: u64,
    pub stall_ms_total: f64,
    pub stall_ms_max: f64,
    /// Smallest margin by which any round arrived before it was due.
    pub min_slack_ms: Option<f64>,
    /// The server's stream-round deadline misses over the run.
    pub deadline_misses: Option<u64>,
    pub deadline_misses_source: String,
    pub deadline_misses_note: Option<String>,
    pub startup_latency_ms_p50: Option<f64>,
    pub startup_latency_ms_p90: Option<f64>,
    pub startup_latency_ms_p99: Option<f64>,
    pub startup_latency_ms_max: Option<f64>,
    pub startup_latency_ms_mean: Option<f64>,
    /// From a stream's Poisson arrival time to its stream request (task
    /// start and schedule fetch): large values mean the generator or the API
    /// lags, not the stream.
    pub request_delay_ms_p99: Option<f64>,
    pub request_delay_ms_max: Option<f64>,
    /// Streams in playback (round 0 arrived, playback not ended), averaged
    /// over [warmup, duration] of the arrival clock.
    pub mean_active_streams: f64,
    /// Most streams in playback at once.
    pub max_active_streams: usize,
    pub bytes_received: u64,
    pub titles: Vec<TitleSummary>,
    pub idle_clients: IdleSummary,
    /// After − before of the server's `GET /api/metrics` counters.
    pub server_metrics_delta: Option<BTreeMap<String, i64>>,
    pub verify: Option<VerifySummary>,
    /// RLIMIT_NOFILE after raising it to the hard limit.
    pub open_files_limit: Option<u64>,
    /// From the first arrival's clock origin to the end of the drain.
    pub wall_s: f64,
    /// CPU seconds (user + system) the load generator used: this process
    /// and the client processes it waited for. Kept apart from the
    /// server's, and added to them for what the host spent in all
    /// (`tools/cost.sh`: on loopback part of each side's TCP work is
    /// charged to the other, docs/serving-cost.md).
    pub cpu_s: f64,
    /// With `--per-stream`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub streams: Option<Vec<StreamRecord>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_streams: Option<Vec<IdleRecord>>,
}

/// The p-quantile (0 < p ≤ 1) of an ascending sample, nearest rank.
pub fn quantile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p * sorted.len() as f64).ceil().max(1.0) as usize;
    Some(sorted[rank.min(sorted.len()) - 1])
}

/// Time-average number of open intervals over `[from, to]`, and the most
/// open at once (anywhere).
pub fn active_over(intervals: &[(f64, f64)], from: f64, to: f64) -> (f64, usize) {
    let span = to - from;
    let mean = if span > 0.0 {
        intervals
            .iter()
            .map(|&(start, end)| (end.min(to) - start.max(from)).max(0.0))
            .sum::<f64>()
            / span
    } else {
        0.0
    };
    // Ends sort before starts at the same instant: back-to-back is not overlap.
    let mut events: Vec<(f64, i32)> = intervals
        .iter()
        .flat_map(|&(s, e)| [(s, 1), (e, -1)])
        .collect();
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut open, mut most) = (0i64, 0i64);
    for (_, step) in events {
        open += step as i64;
        most = most.max(open);
    }
    (mean, most as usize)
}

/// What the run collected, for [`summarise`].
pub struct Collected {
    pub settings: RunSettings,
    pub titles: Vec<TitleInfo>,
    pub records: Vec<StreamRecord>,
    pub idle: Vec<IdleRecord>,
    pub deadline_misses: DeadlineMisses,
    pub server_metrics_delta: Option<BTreeMap<String, i64>>,
    pub verify: Option<VerifySummary>,
    pub open_files_limit: Option<u64>,
    pub wall_s: f64,
    pub cpu_s: f64,
    pub per_stream: bool,
}

pub fn summarise(mut c: Collected) -> Report {
    c.records.sort_by_key(|r| r.index);
    c.idle.sort_by_key(|r| r.index);
    let count = |o: Outcome| c.records.iter().filter(|r| r.outcome == o).count();
    let completed = count(Outcome::Completed);
    let broken = count(Outcome::Broken);
    let rejected = count(Outcome::Rejected);
    let errors = count(Outcome::Error);
    let started = completed + broken;

    let mut rejections_by_reason = BTreeMap::new();
    let mut errors_by_kind = BTreeMap::new();
    for r in &c.records {
        if r.outcome == Outcome::Rejected {
            let reason = r.reject_reason.clone().unwrap_or_else(|| "unknown".into());
            *rejections_by_reason.entry(reason).or_insert(0) += 1;
        }
        if let Some(kind) = &r.error_kind {
            *errors_by_kind.entry(kind.clone()).or_insert(0) += 1;
        }
    }

    let mut startup: Vec<f64> = c
        .records
        .iter()
        .filter_map(|r| r.startup_latency_ms)
        .collect();
    startup.sort_by(f64::total_cmp);
    let mean = (!startup.is_empty()).then(|| startup.iter().sum::<f64>() / startup.len() as f64);

    let mut request_delay: Vec<f64> = c
        .records
        .iter()
        .filter_map(|r| Some((r.request_s? - r.arrival_s) * 1e3))
        .collect();
    request_delay.sort_by(f64::total_cmp);

    let intervals: Vec<(f64, f64)> = c
        .records
        .iter()
        .filter_map(|r| Some((r.playback_start_s?, r.playback_end_s?)))
        .collect();
    let (mean_active, max_active) =
        active_over(&intervals, c.settings.warmup_s, c.settings.duration_s);

    let titles = c
        .titles
        .iter()
        .map(|t| {
            let of_title = || c.records.iter().filter(move |r| r.title_id == t.id);
            TitleSummary {
                id: t.id,
                name: t.name.clone(),
                duration_seconds: t.duration_seconds,
                requested: of_title().count() as u64,
                started: of_title()
                    .filter(|r| matches!(r.outcome, Outcome::Completed | Outcome::Broken))
                    .count() as u64,
                rejected: of_title()
                    .filter(|r| r.outcome == Outcome::Rejected)
                    .count() as u64,
            }
        })
        .collect();

    let idle_count = |o: IdleOutcome| c.idle.iter().filter(|r| r.outcome == o).count();
    let idle_clients = IdleSummary {
        requested: c.idle.len(),
        held: idle_count(IdleOutcome::Held),
        rejected: idle_count(IdleOutcome::Rejected),
        errors: idle_count(IdleOutcome::Error),
    };

    Report {
        streams_requested: c.records.len(),
        streams_started: started,
        streams_completed: completed,
        streams_broken: broken,
        streams_rejected: rejected,
        streams_errors: errors,
        rejection_ratio: (started + rejected > 0)
            .then(|| rejected as f64 / (started + rejected) as f64),
        rejections_by_reason,
        retry_after_s_max: c.records.iter().filter_map(|r| r.retry_after_s).max(),
        errors_by_kind,
        stalls: c.records.iter().map(|r| r.stalls as u64).sum(),
        stalls_without_delay: c
            .records
            .iter()
            .map(|r| r.stalls_without_delay as u64)
            .sum(),
        stalled_streams: c.records.iter().filter(|r| r.stalls > 0).count(),
        failed_over_streams: c.records.iter().filter(|r| r.failovers > 0).count(),
        failovers: c.records.iter().map(|r| r.failovers as u64).sum(),
        stall_ms_total: c.records.iter().map(|r| r.stall_ms_total).sum(),
        stall_ms_max: c.records.iter().map(|r| r.stall_ms_max).fold(0.0, f64::max),
        min_slack_ms: c
            .records
            .iter()
            .filter_map(|r| r.min_slack_ms)
            .min_by(f64::total_cmp),
        deadline_misses: c.deadline_misses.value,
        deadline_misses_source: c.deadline_misses.source,
        deadline_misses_note: c.deadline_misses.note,
        startup_latency_ms_p50: quantile(&startup, 0.50),
        startup_latency_ms_p90: quantile(&startup, 0.90),
        startup_latency_ms_p99: quantile(&startup, 0.99),
        startup_latency_ms_max: startup.last().copied(),
        startup_latency_ms_mean: mean,
        request_delay_ms_p99: quantile(&request_delay, 0.99),
        request_delay_ms_max: request_delay.last().copied(),
        mean_active_streams: mean_active,
        max_active_streams: max_active,
        bytes_received: c.records.iter().map(|r| r.bytes_received).sum(),
        titles,
        idle_clients,
        server_metrics_delta: c.server_metrics_delta,
        verify: c.verify,
        open_files_limit: c.open_files_limit,
        wall_s: c.wall_s,
        cpu_s: c.cpu_s,
        streams: c.per_stream.then_some(c.records),
        idle_streams: c.per_stream.then_some(c.idle),
        settings: c.settings,
    }
}

fn ms(value: Option<f64>) -> String {
    value.map_or("-".into(), |v| format!("{v:.0} ms"))
}

/// The report for a person.
pub fn render_text(r: &Report) -> String {
    let s = &r.settings;
    let mut out = String::new();
    let mut line = |text: String| {
        out.push_str(&text);
        out.push('\n');
    };
    line(format!(
        "rondo load: {} at {} streams/s for {} s ({}, seed {}{})",
        s.url,
        s.rate_per_s,
        s.duration_s,
        match s.popular_share {
            Some(p) => format!("the first title {:.0}%, the rest even", p * 100.0),
            None => format!("Zipf {}", s.zipf_exponent),
        },
        s.seed,
        if s.processes > 1 {
            format!(", {} client processes", s.processes)
        } else {
            String::new()
        }
    ));
    let reasons: Vec<String> = r
        .rejections_by_reason
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    line(format!(
        "  streams:   {} requested, {} started ({} completed, {} broken), {} rejected{}, {} errors",
        r.streams_requested,
        r.streams_started,
        r.streams_completed,
        r.streams_broken,
        r.streams_rejected,
        if reasons.is_empty() {
            String::new()
        } else {
            format!(
                " ({}; Retry-After up to {} s)",
                reasons.join(", "),
                r.retry_after_s_max.unwrap_or(0)
            )
        },
        r.streams_errors
    ));
    if !r.errors_by_kind.is_empty() {
        let kinds: Vec<String> = r
            .errors_by_kind
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        line(format!("  failures:  {}", kinds.join(", ")));
    }
    line(format!(
        "  start-up:  p50 {}, p90 {}, p99 {}, max {} (request delay p99 {})",
        ms(r.startup_latency_ms_p50),
        ms(r.startup_latency_ms_p90),
        ms(r.startup_latency_ms_p99),
        ms(r.startup_latency_ms_max),
        ms(r.request_delay_ms_p99)
    ));
    line(format!(
        "  stalls:    {} in {} stream(s), {:.1} ms in total, longest {:.1} ms; smallest slack {} \
         (playout delay {}; without it {} stalls)",
        r.stalls,
        r.stalled_streams,
        r.stall_ms_total,
        r.stall_ms_max,
        r.min_slack_ms.map_or("-".into(), |v| format!("{v:.1} ms")),
        s.playout_delay_ms
            .map_or("one round".into(), |v| format!("{v} ms")),
        r.stalls_without_delay
    ));
    if r.failovers > 0 {
        line(format!(
            "  failover:  {} stream(s) resumed at another interface node, {} time(s) in all",
            r.failed_over_streams, r.failovers
        ));
    }
    line(format!(
        "  server:    deadline misses {} ({}){}",
        r.deadline_misses
            .map_or("unknown".into(), |v| v.to_string()),
        r.deadline_misses_source,
        r.deadline_misses_note
            .as_ref()
            .filter(|_| r.deadline_misses.is_none())
            .map_or(String::new(), |n| format!(": {n}"))
    ));
    line(format!(
        "  active:    mean {:.2} streams in playback over {}–{} s, at most {} at once",
        r.mean_active_streams, s.warmup_s, s.duration_s, r.max_active_streams
    ));
    if r.idle_clients.requested > 0 {
        let i = &r.idle_clients;
        line(format!(
            "  idle:      {} clients: {} held unread, {} rejected, {} errors",
            i.requested, i.held, i.rejected, i.errors
        ));
    }
    if let Some(v) = &r.verify {
        line(format!(
            "  verify:    {} stream(s) of {} title(s) hashed, {} mismatch(es)",
            v.streams_checked,
            v.titles.len(),
            v.mismatches
        ));
    }
    if let Some(streams) = &r.streams {
        for x in streams {
            line(format!(
                "    #{:<5} title {:<3} {:<9} start-up {:>8}  stalls {}  bytes {}{}",
                x.index,
                x.title_id,
                format!("{:?}", x.outcome).to_lowercase(),
                ms(x.startup_latency_ms),
                x.stalls,
                x.bytes_received,
                x.error
                    .as_ref()
                    .map_or(String::new(), |e| format!("  ({e})"))
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), Some(50.0));
        assert_eq!(quantile(&v, 0.99), Some(99.0));
        assert_eq!(quantile(&v, 1.0), Some(100.0));
        assert_eq!(quantile(&[7.0], 0.5), Some(7.0));
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&[1.0, 2.0, 3.0], 0.5), Some(2.0));
    }

    #[test]
    fn active_streams_average_over_the_window() {
        // Two streams over a 10 s window: one for 5 s, one straddling its end.
        let (mean, most) = active_over(&[(0.0, 5.0), (8.0, 14.0)], 0.0, 10.0);
        assert!((mean - 0.7).abs() < 1e-12, "{mean}");
        assert_eq!(most, 1);
        let (_, most) = active_over(&[(0.0, 5.0), (4.0, 6.0), (5.0, 7.0)], 0.0, 10.0);
        assert_eq!(most, 2);
        assert_eq!(active_over(&[], 2.0, 2.0), (0.0, 0));
    }
}
