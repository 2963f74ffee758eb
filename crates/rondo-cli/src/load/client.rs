//! One `rondo load` client: fetches its title's schedule, requests the
//! stream, reads the body as fast as it arrives (counting bytes, keeping
//! none) and feeds each round's arrival time to the [`Player`] model.
//!
//! The outcome is a [`StreamRecord`]: completed (every byte arrived),
//! broken (admitted but the body ended early, failed, went silent for the
//! read timeout, or was cut at the drain timeout), rejected (503, with its
//! `Retry-After` and JSON reason) or error (anything else before admission:
//! the schedule fetch, the connection, another status). Live counters let
//! the progress line follow the run without locks.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::playback::{Player, cumulative_bytes};

/// A title as `GET /api/titles` lists it (the fields the load generator uses).
#[derive(Clone, Debug, Deserialize)]
pub struct TitleInfo {
    pub id: u64,
    pub name: String,
    pub duration_seconds: f64,
    pub stream_url: String,
    pub schedule_url: String,
}

/// `GET /api/titles/{id}/schedule`.
#[derive(Clone, Debug, Deserialize)]
pub struct Schedule {
    pub round_duration_ns: u64,
    pub client_bytes: Vec<u64>,
    pub size_bytes: u64,
}

/// Settings every client uses.
#[derive(Clone, Copy, Debug)]
pub struct ClientSettings {
    /// From sending a request to its response headers.
    pub header_timeout: Duration,
    /// Longest silence of an admitted stream's body before it counts as broken.
    pub read_timeout: Duration,
    /// From round 0's arrival to the start of playback; `None`: one round
    /// of the title.
    pub playout_delay: Option<Duration>,
}

/// Base URLs of a cluster's interface nodes a broken stream may resume at
/// (`--failover`); empty: a broken body is the stream's end.
pub type FailoverUrls = std::sync::Arc<[String]>;

/// How long a client whose stream broke keeps asking other interface nodes
/// for the rest (assumption: an interface node answers within seconds; a
/// manager's takeover, which it waits out, takes about 4 s, docs/cluster.md).
const FAILOVER_TIME: Duration = Duration::from_secs(15);
/// Pause between two asks.
const FAILOVER_RETRY: Duration = Duration::from_millis(200);

/// Counters the progress line reads while the run goes on.
#[derive(Debug, Default)]
pub struct LiveCounters {
    pub requested: AtomicU64,
    pub active: AtomicU64,
    pub started: AtomicU64,
    pub rejected: AtomicU64,
    pub errors: AtomicU64,
    pub broken: AtomicU64,
    pub completed: AtomicU64,
    pub stalls: AtomicU64,
    /// Streams resumed at another interface node after their body broke.
    pub failovers: AtomicU64,
}

/// What one client is asked to do.
#[derive(Clone, Debug)]
pub struct StreamPlan {
    pub index: usize,
    pub title: TitleInfo,
    /// The Poisson arrival time, seconds since the run started.
    pub arrival_s: f64,
    /// Hash the body (FNV-1a 64) for `--verify`.
    pub hash_body: bool,
}

/// How a stream ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Completed,
    Broken,
    Rejected,
    Error,
}

/// One client's measurements (`--per-stream` prints them).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StreamRecord {
    pub index: usize,
    pub title_id: u64,
    pub title_name: String,
    pub outcome: Outcome,
    /// Poisson arrival time, seconds since the run started.
    pub arrival_s: f64,
    /// When the stream request was sent (after the schedule fetch).
    pub request_s: Option<f64>,
    pub http_status: Option<u16>,
    pub startup_latency_ms: Option<f64>,
    pub stalls: u32,
    /// Stalls of the strict player (no playout delay), for comparison.
    pub stalls_without_delay: u32,
    pub stall_ms_total: f64,
    pub stall_ms_max: f64,
    /// Smallest margin by which a round arrived before it was due; negative
    /// is a stall.
    pub min_slack_ms: Option<f64>,
    /// The playback round of that margin.
    pub min_slack_round: Option<usize>,
    /// The first stall's playback round, and when that round arrived (or
    /// the stream ended without it), seconds since the run started.
    pub first_stall_round: Option<usize>,
    pub first_stall_s: Option<f64>,
    pub rounds: usize,
    pub rounds_arrived: usize,
    pub round_ms: Option<f64>,
    pub playout_delay_ms: Option<f64>,
    pub bytes_expected: Option<u64>,
    pub bytes_received: u64,
    /// Playback interval, seconds since the run started.
    pub playback_start_s: Option<f64>,
    pub playback_end_s: Option<f64>,
    pub retry_after_s: Option<u64>,
    /// The server's reason for a 503 (`disk_time`, `buffer`, …).
    pub reject_reason: Option<String>,
    pub error_kind: Option<String>,
    pub error: Option<String>,
    /// FNV-1a 64 of the body, hex, with `--verify`.
    pub body_fnv64: Option<String>,
    /// Times its body broke and it resumed at another interface node
    /// (`--failover`).
    pub failovers: u32,
}

impl StreamRecord {
    fn new(plan: &StreamPlan) -> StreamRecord {
        StreamRecord {
            index: plan.index,
            title_id: plan.title.id,
            title_name: plan.title.name.clone(),
            outcome: Outcome::Error,
            arrival_s: plan.arrival_s,
            request_s: None,
            http_status: None,
            startup_latency_ms: None,
            stalls: 0,
            stalls_without_delay: 0,
            stall_ms_total: 0.0,
            stall_ms_max: 0.0,
            min_slack_ms: None,
            min_slack_round: None,
            first_stall_round: None,
            first_stall_s: None,
            rounds: 0,
            rounds_arrived: 0,
            round_ms: None,
            playout_delay_ms: None,
            bytes_expected: None,
            bytes_received: 0,
            playback_start_s: None,
            playback_end_s: None,
            retry_after_s: None,
            reject_reason: None,
            error_kind: None,
            error: None,
            body_fnv64: None,
            failovers: 0,
        }
    }

    /// A stream cut at the drain timeout before its response came.
    pub fn unanswered(plan: &StreamPlan) -> StreamRecord {
        StreamRecord::new(plan).fail(
            Outcome::Error,
            "unfinished",
            "no answer before the drain timeout".into(),
        )
    }

    fn fail(mut self, outcome: Outcome, kind: &str, message: String) -> StreamRecord {
        self.outcome = outcome;
        self.error_kind = Some(kind.to_string());
        self.error = Some(message);
        self
    }
}

const NS_PER_MS: f64 = 1e6;

/// FNV-1a 64: split-invariant, so chunk boundaries do not matter.
#[derive(Clone, Copy, Debug)]
pub struct Fnv64(u64);

impl Fnv64 {
    pub fn new() -> Fnv64 {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }

    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= b as u64;
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    pub fn hex(self) -> String {
        format!("{:016x}", self.0)
    }
}

/// A short description of a reqwest error, naming timeouts and refused
/// connections.
fn error_kind(e: &reqwest::Error) -> &'static str {
    if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        "connect"
    } else if e.is_body() || e.is_decode() {
        "body"
    } else {
        "request"
    }
}

/// Runs one client to its end. `cancel` turns true at the drain timeout:
/// a stream still reading then ends as broken (`unfinished`).
pub async fn run_stream(
    client: reqwest::Client,
    plan: StreamPlan,
    run_start: Instant,
    settings: ClientSettings,
    failover: FailoverUrls,
    live: &LiveCounters,
    mut cancel: watch::Receiver<bool>,
) -> StreamRecord {
    let since_start = |t: Instant| t.saturating_duration_since(run_start).as_secs_f64();
    let mut record = StreamRecord::new(&plan);
    live.requested.fetch_add(1, Relaxed);

    // 1. The schedule.
    let schedule =
        match fetch_schedule(&client, &plan.title.schedule_url, settings.header_timeout).await {
            Ok(s) => s,
            Err((kind, message)) => {
                live.errors.fetch_add(1, Relaxed);
                return record.fail(Outcome::Error, kind, format!("schedule: {message}"));
            }
        };
    let thresholds = cumulative_bytes(&schedule.client_bytes);
    let expected_bytes = thresholds.last().copied().unwrap_or(0);
    record.rounds = thresholds.len();
    record.round_ms = Some(schedule.round_duration_ns as f64 / NS_PER_MS);
    record.bytes_expected = Some(expected_bytes);
    if expected_bytes != schedule.size_bytes || schedule.round_duration_ns == 0 {
        live.errors.fetch_add(1, Relaxed);
        return record.fail(
            Outcome::Error,
            "schedule",
            format!(
                "the schedule's client bytes sum to {expected_bytes}, its size is {} bytes \
                 (round {} ns)",
                schedule.size_bytes, schedule.round_duration_ns
            ),
        );
    }

    // 2. The stream request.
    let request_at = Instant::now();
    record.request_s = Some(since_start(request_at));
    let sent = tokio::time::timeout(
        settings.header_timeout,
        client.get(&plan.title.stream_url).send(),
    );
    let response = match sent.await {
        Err(_) => {
            live.errors.fetch_add(1, Relaxed);
            return record.fail(
                Outcome::Error,
                "timeout",
                format!("no response headers within {:?}", settings.header_timeout),
            );
        }
        Ok(Err(e)) => {
            live.errors.fetch_add(1, Relaxed);
            return record.fail(
                Outcome::Error,
                error_kind(&e),
                format!("stream request: {e}"),
            );
        }
        Ok(Ok(r)) => r,
    };
    let status = response.status();
    record.http_status = Some(status.as_u16());
    if status == reqwest::StatusCode::SERVICE_UNAVAILABLE {
        record.outcome = Outcome::Rejected;
        record.retry_after_s = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok());
        // The reason is a small JSON body; bounded by the header timeout.
        let body = tokio::time::timeout(settings.header_timeout, response.bytes()).await;
        if let Ok(Ok(body)) = body
            && let Ok(json) = serde_json::from_slice::<serde_json::Value>(&body)
        {
            record.reject_reason = json["reason"].as_str().map(str::to_string);
            record.error = json["error"].as_str().map(str::to_string);
        }
        live.rejected.fetch_add(1, Relaxed);
        return record;
    }
    if !status.is_success() {
        live.errors.fetch_add(1, Relaxed);
        return record.fail(
            Outcome::Error,
            "http_status",
            format!("stream request answered {status}"),
        );
    }
    if let Some(length) = response.content_length()
        && length != expected_bytes
    {
        live.errors.fetch_add(1, Relaxed);
        return record.fail(
            Outcome::Error,
            "length_mismatch",
            format!("Content-Length {length}, the schedule sums to {expected_bytes} bytes"),
        );
    }

    // 3. The body, round by round.
    live.started.fetch_add(1, Relaxed);
    live.active.fetch_add(1, Relaxed);
    let playout_delay_ns = settings
        .playout_delay
        .map_or(schedule.round_duration_ns, |d| d.as_nanos() as u64);
    record.playout_delay_ms = Some(playout_delay_ns as f64 / NS_PER_MS);
    let mut player = Player::new(schedule.round_duration_ns, playout_delay_ns);
    let mut strict = Player::new(schedule.round_duration_ns, 0);
    let mut hash = plan.hash_body.then(Fnv64::new);
    let mut received_bytes = 0u64;
    let mut response = response;
    let mut stream_url = plan.title.stream_url.clone();
    let ending: Option<(&str, String)> = loop {
        let chunk = tokio::select! {
            chunk = tokio::time::timeout(settings.read_timeout, response.chunk()) => chunk,
            // A dropped sender disables this branch (the pattern fails).
            Ok(_) = cancel.wait_for(|stop| *stop) => {
                break Some(("unfinished", "still reading at the drain timeout".into()));
            }
        };
        let chunk = match chunk {
            Err(_) => {
                break Some((
                    "read_timeout",
                    format!("no data for {:?}", settings.read_timeout),
                ));
            }
            Ok(Err(e)) => Err(("body", format!("reading the body: {e}"))),
            Ok(Ok(None)) if received_bytes < expected_bytes => Err((
                "truncated",
                format!("the body ended after {received_bytes} of {expected_bytes} bytes"),
            )),
            Ok(Ok(None)) => break None,
            Ok(Ok(Some(chunk))) => Ok(chunk),
        };
        let chunk = match chunk {
            Ok(chunk) => chunk,
            Err(ending) => {
                // As rondo's player page does: the rest from another
                // interface node, from the first byte not received.
                match resume_elsewhere(
                    &client,
                    &failover,
                    &stream_url,
                    received_bytes,
                    expected_bytes,
                    settings.header_timeout,
                )
                .await
                {
                    Some((url, rest)) => {
                        stream_url = url;
                        response = rest;
                        record.failovers += 1;
                        live.failovers.fetch_add(1, Relaxed);
                        continue;
                    }
                    None => break Some(ending),
                }
            }
        };
        let now = Instant::now();
        received_bytes += chunk.len() as u64;
        if let Some(h) = hash.as_mut() {
            h.write(&chunk);
        }
        let arrival_ns = now.saturating_duration_since(request_at).as_nanos() as u64;
        while player.rounds_arrived() < thresholds.len()
            && received_bytes >= thresholds[player.rounds_arrived()]
        {
            strict.round_arrived(arrival_ns);
            if player.round_arrived(arrival_ns) > 0 {
                live.stalls.fetch_add(1, Relaxed);
            }
        }
    };
    live.active.fetch_sub(1, Relaxed);
    let ending = ending.or_else(|| {
        (received_bytes != expected_bytes).then(|| {
            (
                "truncated",
                format!("the body ended after {received_bytes} of {expected_bytes} bytes"),
            )
        })
    });
    // Rounds missing: playback may have caught up with them before the end.
    let end_ns = request_at.elapsed().as_nanos() as u64;
    let stalls_before = player.stalls();
    player.end(end_ns, thresholds.len());
    strict.end(end_ns, thresholds.len());
    live.stalls
        .fetch_add((player.stalls() - stalls_before) as u64, Relaxed);

    record.bytes_received = received_bytes;
    record.rounds_arrived = player.rounds_arrived();
    record.stalls = player.stalls();
    record.stalls_without_delay = strict.stalls();
    record.stall_ms_total = player.stall_ns_total() as f64 / NS_PER_MS;
    record.stall_ms_max = player.stall_ns_max() as f64 / NS_PER_MS;
    record.min_slack_ms = player.min_slack_ns().map(|ns| ns as f64 / NS_PER_MS);
    record.body_fnv64 = hash.map(Fnv64::hex);
    let at = |ns: u64| since_start(request_at) + ns as f64 / 1e9;
    record.min_slack_round = player.min_slack_round();
    if let Some((round, ns)) = player.first_stall() {
        record.first_stall_round = Some(round);
        record.first_stall_s = Some(at(ns));
    }
    if let Some(startup_ns) = player.startup_ns() {
        record.startup_latency_ms = Some(startup_ns as f64 / NS_PER_MS);
    }
    record.playback_start_s = player.playback_start_ns().map(at);
    record.playback_end_s = player.playback_end_ns().map(at);
    match ending {
        Some((kind, message)) => {
            live.broken.fetch_add(1, Relaxed);
            record.fail(Outcome::Broken, kind, message)
        }
        None => {
            live.completed.fetch_add(1, Relaxed);
            record.outcome = Outcome::Completed;
            record
        }
    }
}

/// Asks the interface nodes in `failover` other than the one `stream_url`
/// names, in turn, for bytes `from..` of the stream (a Range request
/// marked `x-rondo-resume`) until one answers 206 with that range, for up
/// to [`FAILOVER_TIME`]. The stream URL it answered at, and its answer.
async fn resume_elsewhere(
    client: &reqwest::Client,
    failover: &[String],
    stream_url: &str,
    from: u64,
    size_bytes: u64,
    header_timeout: Duration,
) -> Option<(String, reqwest::Response)> {
    let path = stream_path(stream_url)?;
    let others: Vec<&String> = failover
        .iter()
        .filter(|base| !stream_url.starts_with(base.as_str()))
        .collect();
    if others.is_empty() || from >= size_bytes {
        return None;
    }
    let give_up = Instant::now() + FAILOVER_TIME;
    for base in others.iter().cycle() {
        if Instant::now() >= give_up {
            return None;
        }
        let url = format!("{base}{path}");
        let asked = client
            .get(&url)
            .header(reqwest::header::RANGE, format!("bytes={from}-"))
            .header("x-rondo-resume", "1")
            .send();
        if let Ok(Ok(response)) = tokio::time::timeout(header_timeout, asked).await
            && response.status() == reqwest::StatusCode::PARTIAL_CONTENT
            && response.content_length() == Some(size_bytes - from)
        {
            return Some((url, response));
        }
        tokio::time::sleep(FAILOVER_RETRY).await;
    }
    None
}

/// `url`'s path on the server at `base` (`http://a:1/stream/1.mp4` on
/// `http://b:2` → `http://b:2/stream/1.mp4`); `url` itself when it has no
/// path.
pub fn rebase(url: &str, base: &str) -> String {
    match stream_path(url) {
        Some(path) => format!("{base}{path}"),
        None => url.to_string(),
    }
}

/// `http://host:port/stream/1.mp4` → `/stream/1.mp4`.
fn stream_path(url: &str) -> Option<&str> {
    let after_scheme = url.split_once("://")?.1;
    Some(&after_scheme[after_scheme.find('/')?..])
}

async fn fetch_schedule(
    client: &reqwest::Client,
    url: &str,
    timeout: Duration,
) -> Result<Schedule, (&'static str, String)> {
    let fetch = async {
        let response = client
            .get(url)
            .send()
            .await
            .map_err(|e| (error_kind(&e), e.to_string()))?;
        let status = response.status();
        if !status.is_success() {
            return Err(("http_status", format!("{url} answered {status}")));
        }
        response
            .json::<Schedule>()
            .await
            .map_err(|e| ("schedule", format!("{url}: {e}")))
    };
    tokio::time::timeout(timeout, fetch)
        .await
        .unwrap_or_else(|_| Err(("timeout", format!("{url}: no answer within {timeout:?}"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_is_split_invariant() {
        let mut whole = Fnv64::new();
        whole.write(b"rondo round robin");
        let mut parts = Fnv64::new();
        parts.write(b"rondo ro");
        parts.write(b"");
        parts.write(b"und robin");
        assert_eq!(whole.hex(), parts.hex());
        assert_ne!(whole.hex(), Fnv64::new().hex());
    }

    #[test]
    fn a_stream_url_moves_to_another_node_with_its_path_and_query() {
        assert_eq!(
            rebase(
                "http://10.0.0.2:8080/stream/3.mp4?t=5",
                "http://10.0.0.9:8090"
            ),
            "http://10.0.0.9:8090/stream/3.mp4?t=5"
        );
        assert_eq!(rebase("not a url", "http://b:1"), "not a url");
    }
}
