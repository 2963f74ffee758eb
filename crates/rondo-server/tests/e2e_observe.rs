//! End to end: observability of a running server.
//!
//! - `GET /metrics` is Prometheus text whose every line is well formed and
//!   whose values follow three playing streams (active streams, admissions,
//!   per-disk reserved and measured busy time) and agree with the JSON
//!   counters once they end (bytes sent equal what the clients received);
//!   `GET /api/events` sends the recent history, then one sample per round;
//!   a disk failed through the control API shows as failed in both; a
//!   shutdown with an event stream open ends it and completes at once.
//! - The dashboard, opened in headless Chromium while streams play, is fed
//!   live by the event stream (its title counts the rounds drawn and grows),
//!   and its snapshot view renders with data in every chart: the DOM says
//!   how many rounds were drawn and has a canvas per chart, and the PNG
//!   screenshot has the charts' line colours in it. `RONDO_DASHBOARD_PNG=FILE`
//!   keeps the screenshot. Needs `chromium`; `RONDO_SKIP_BROWSER_TESTS=1`
//!   skips the browser test where it is missing.

mod e2e_support;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use e2e_support::*;
use futures_util::StreamExt;
use rondo_server::RunningServer;
use rondo_testkit::browser::{launch, page_title};
use serde_json::Value;

/// Prometheus text as series (name with labels, as written) → value,
/// checking that every line is a HELP, a TYPE or a sample.
fn parse_prometheus(text: &str) -> BTreeMap<String, f64> {
    let mut values = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with("# HELP ") || line.starts_with("# TYPE ") {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("malformed line {line:?}"));
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("value of {line:?}"));
        assert!(
            values.insert(series.to_string(), value).is_none(),
            "{series} twice"
        );
    }
    values
}

async fn scrape(client: &reqwest::Client, base: &str) -> BTreeMap<String, f64> {
    let response = client.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let kind = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
    parse_prometheus(&response.text().await.unwrap())
}

fn sum_over_disks(values: &BTreeMap<String, f64>, name: &str) -> f64 {
    values
        .iter()
        .filter(|(k, _)| k.starts_with(&format!("{name}{{disk=")))
        .map(|(_, v)| v)
        .sum()
}

/// Server-sent events as (event name, data), read from a response body.
struct Events {
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
}

impl Events {
    async fn open(client: &reqwest::Client, base: &str) -> Events {
        let response = client
            .get(format!("{base}/api/events"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        Events {
            body: Box::pin(response.bytes_stream()),
            buffer: String::new(),
        }
    }

    /// The next event; `None` when the stream ends.
    async fn next(&mut self) -> Option<(String, String)> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut event = String::from("message");
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(name) = line.strip_prefix("event: ") {
                        event = name.to_string();
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        data.push_str(d);
                    }
                }
                if data.is_empty() {
                    continue; // a keep-alive comment
                }
                return Some((event, data));
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.buffer.push_str(&String::from_utf8_lossy(&chunk)),
                Some(Err(_)) | None => return None,
            }
        }
    }
}

/// Starts a full GET of each title; each task returns the bytes received.
fn play(base: &str, ids: &[u64]) -> Vec<tokio::task::JoinHandle<usize>> {
    ids.iter()
        .map(|id| {
            let url = format!("{base}/stream/{id}");
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                let (status, _, body, _) = get_timed(&client, &url, None).await;
                assert_eq!(status, 200, "{url}");
                body.len()
            })
        })
        .collect()
}

async fn server_with_samples(dir: &std::path::Path) -> (RunningServer, Vec<u64>) {
    let store = create_store(&dir.join("data"));
    let samples =
        rondo_server::ingest::ingest_sample_titles(&store, 0, &rondo_server::ingest::Unthrottled)
            .unwrap();
    let ids = samples.iter().map(|r| r.id.0).collect();
    // The sample titles are short enough to be sent whole at once (the
    // start burst by size); these tests watch streams that last.
    let config = rondo_server::ServerConfig {
        start_burst_bytes: 0,
        ..test_config()
    };
    (start(store, config).await, ids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_and_events_follow_the_streams() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let (server, ids) = server_with_samples(dir.path()).await;
    let base = server.url();
    let client = reqwest::Client::new();

    let idle = scrape(&client, &base).await;
    assert_eq!(idle["rondo_streams_active"], 0.0);
    assert_eq!(idle["rondo_admissions_total{result=\"admitted\"}"], 0.0);
    assert_eq!(
        idle["rondo_round_duration_seconds"],
        TEST_ROUND_DURATION_NS as f64 / 1e9
    );
    for disk in 0..4 {
        assert_eq!(
            idle[&format!("rondo_disk_state{{disk=\"{disk}\",state=\"healthy\"}}")],
            1.0
        );
    }

    let players = play(&base, &ids[..3]);
    // The event stream: the history first, then a sample per round.
    let mut events = Events::open(&client, &base).await;
    let (first, history) = events.next().await.expect("history event");
    assert_eq!(first, "history");
    let history: Vec<Value> = serde_json::from_str(&history).unwrap();
    let mut rounds: Vec<Value> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        let (event, data) = tokio::time::timeout(Duration::from_secs(5), events.next())
            .await
            .expect("a sample within 5 rounds")
            .expect("the stream goes on");
        if event != "round" {
            continue;
        }
        let sample: Value = serde_json::from_str(&data).unwrap();
        let busy = sample["disks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["measured_busy_ns"].as_u64().unwrap() > 0);
        let done = sample["active_streams"] == 3 && busy && rounds.len() >= 2;
        rounds.push(sample);
        if done {
            break;
        }
    }
    let last = rounds.last().expect("round events");
    assert_eq!(last["active_streams"], 3, "{rounds:?}");
    for pair in rounds.windows(2) {
        assert!(
            pair[1]["round"].as_u64() > pair[0]["round"].as_u64(),
            "{pair:?}"
        );
    }
    if let (Some(h), Some(r)) = (history.last(), rounds.first()) {
        assert!(
            r["round"].as_u64() > h["round"].as_u64(),
            "no repeat after the history"
        );
    }
    for sample in &rounds {
        let disks = sample["disks"].as_array().unwrap();
        assert_eq!(disks.len(), 4);
        for d in disks {
            // The fixed term is reserved in every round.
            assert!(d["reserved_ns"].as_u64().unwrap() > 0, "{sample}");
            assert_eq!(d["state"], 0);
        }
        assert_eq!(sample["round_ns"], TEST_ROUND_DURATION_NS);
    }
    let admitted: u64 = history
        .iter()
        .chain(&rounds)
        .map(|s| s["admitted"].as_u64().unwrap())
        .sum();
    assert_eq!(admitted, 3, "each admission counted in one sample");

    let playing = scrape(&client, &base).await;
    assert_eq!(playing["rondo_streams_active"], 3.0);
    assert_eq!(playing["rondo_admissions_total{result=\"admitted\"}"], 3.0);
    assert!(sum_over_disks(&playing, "rondo_disk_reserved_seconds") > 0.0);
    let reserved_total = sum_over_disks(&playing, "rondo_disk_reserved_seconds_total");
    let measured_total = sum_over_disks(&playing, "rondo_disk_measured_busy_seconds_total");
    assert!(
        measured_total > 0.0 && reserved_total > measured_total,
        "reserved {reserved_total} s, measured {measured_total} s"
    );

    let mut received = 0;
    for player in players {
        received += player.await.unwrap();
    }
    assert!(
        eventually(Duration::from_secs(3), || server.metrics().active_streams
            == 0)
        .await,
        "the streams end"
    );
    let after = scrape(&client, &base).await;
    let m = server.metrics();
    assert_eq!(after["rondo_sent_bytes_total"], received as f64);
    assert_eq!(after["rondo_streams_active"], 0.0);
    assert_eq!(after["rondo_streams_ended_total{how=\"completed\"}"], 3.0);
    assert_eq!(
        after["rondo_deadline_misses_total"],
        m.stream_round_misses as f64
    );
    assert_eq!(
        after["rondo_disk_round_overruns_total"],
        m.disk_round_overruns as f64
    );
    // The latency histograms counted each stream once, and the per-title
    // counters add up to the totals.
    assert_eq!(after["rondo_admission_decision_seconds_count"], 3.0);
    assert_eq!(after["rondo_stream_start_seconds_count"], 3.0);
    let start_sum = after["rondo_stream_start_seconds_sum"];
    assert!(
        start_sum > 0.0 && start_sum < 3.0 * 5.0,
        "3 start-ups took {start_sum} s in all"
    );
    assert_eq!(after["rondo_stream_start_seconds_bucket{le=\"+Inf\"}"], 3.0);
    assert!(after["rondo_round_start_lateness_seconds_count"] >= m.rounds as f64 - 1.0);
    let per_title = |family: &str| -> f64 {
        after
            .iter()
            .filter(|(k, _)| k.starts_with(&format!("{family}{{")))
            .map(|(_, v)| v)
            .sum()
    };
    assert_eq!(per_title("rondo_title_sent_bytes_total"), received as f64);
    assert_eq!(per_title("rondo_title_streams_admitted_total"), 3.0);
    assert_eq!(per_title("rondo_title_streams_completed_total"), 3.0);
    for id in &ids {
        let series = after
            .keys()
            .find(|k| {
                k.starts_with(&format!(
                    "rondo_title_streams_admitted_total{{title=\"{id}\",name="
                ))
            })
            .unwrap_or_else(|| panic!("no series for title {id}"));
        assert_eq!(after[series], 1.0, "{series}");
    }
    assert!(after["process_resident_memory_bytes"] > 1e6);
    assert!(after["process_cpu_seconds_total"] > 0.0);
    for d in &m.disks {
        let label = format!("{{disk=\"{}\"}}", d.disk);
        assert_eq!(
            after[&format!("rondo_disk_read_bytes_total{label}")],
            d.bytes_read as f64
        );
        assert_eq!(
            after[&format!("rondo_disk_reads_total{label}")],
            d.reads as f64
        );
    }

    let recent = get_json(&client, &format!("{base}/api/history")).await;
    let recent = recent.as_array().unwrap();
    assert!(
        recent.len() >= history.len() + rounds.len(),
        "{}",
        recent.len()
    );

    // A disk failed by the operator shows in both.
    let failed = client
        .post(format!("{base}/api/admin/disks/1/fail"))
        .bearer_auth(server.token())
        .send()
        .await
        .unwrap();
    assert_eq!(failed.status(), 200);
    let states = scrape(&client, &base).await;
    assert_eq!(states["rondo_disk_state{disk=\"1\",state=\"failed\"}"], 1.0);
    assert_eq!(
        states["rondo_disk_state{disk=\"1\",state=\"healthy\"}"],
        0.0
    );
    assert_eq!(
        states["rondo_disk_state{disk=\"0\",state=\"healthy\"}"],
        1.0
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut seen_failed = false;
    while !seen_failed && Instant::now() < deadline {
        let Ok(Some((event, data))) =
            tokio::time::timeout(Duration::from_secs(3), events.next()).await
        else {
            break;
        };
        if event == "round" {
            let sample: Value = serde_json::from_str(&data).unwrap();
            seen_failed = sample["disks"][1]["state"] == 2;
        }
    }
    assert!(seen_failed, "a round event shows disk 1 failed");

    // An open event stream ends at shutdown and does not hold it up.
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(4), server.shutdown())
        .await
        .expect("shutdown completes with an event stream open");
    let ended = tokio::time::timeout(Duration::from_secs(2), async {
        while events.next().await.is_some() {}
    })
    .await;
    assert!(ended.is_ok(), "the event stream ends at shutdown");
    eprintln!(
        "metrics e2e: {} rounds seen live, {received} bytes sent, shutdown in {:?}",
        rounds.len(),
        started.elapsed()
    );
}

/// Headless Chromium in a one-shot mode (`--dump-dom`, `--screenshot`),
/// killed after 60 s; returns its stdout.
fn chromium_once(profile: &std::path::Path, extra: &[&str], url: &str) -> String {
    let output = Command::new("timeout")
        .arg("60")
        .arg("chromium")
        .args(rondo_testkit::browser::FLAGS)
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stderr(Stdio::null())
        .output()
        .expect("chromium runs");
    assert!(
        output.status.success(),
        "chromium {extra:?} failed: {:?}",
        output.status
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `rondo dashboard: N rounds, K streams` → (N, K).
fn parse_title(title: &str) -> Option<(u64, u64)> {
    let rest = title.strip_prefix("rondo dashboard: ")?;
    let (rounds, rest) = rest.split_once(" rounds, ")?;
    let streams = rest.strip_suffix(" streams")?;
    Some((rounds.parse().ok()?, streams.parse().ok()?))
}

/// Pixels of `png` within `tolerance` of `rgb` in every channel.
fn count_colour(pixels: &[[u8; 3]], rgb: [u8; 3], tolerance: u8) -> usize {
    pixels
        .iter()
        .filter(|p| (0..3).all(|c| p[c].abs_diff(rgb[c]) <= tolerance))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dashboard_renders_with_data_in_headless_chromium() {
    init_logs();
    if !chromium_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (server, ids) = server_with_samples(dir.path()).await;
    let base = server.url();
    let client = reqwest::Client::new();
    // The first request starts the per-round history.
    scrape(&client, &base).await;
    let players = play(&base, &[ids[0], ids[1], ids[2], ids[0]]);
    let history_len = || async {
        let history = get_json(&client, &format!("{base}/api/history")).await;
        history.as_array().unwrap().len()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while history_len().await < 6 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Live: the page draws the history, then every round's event.
    let profile = tempfile::tempdir().unwrap();
    let mut live = launch(&format!("{base}/dashboard"), profile.path());
    let mut titles = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(40);
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if let Some(title) = page_title(&client, profile.path()).await
            && titles.last() != Some(&title)
        {
            titles.push(title);
        }
        let drawn: Vec<(u64, u64)> = titles.iter().filter_map(|t| parse_title(t)).collect();
        if drawn.len() >= 2 && drawn.last().unwrap().0 > drawn[0].0 {
            break;
        }
    }
    let _ = live.kill();
    let _ = live.wait();
    let drawn: Vec<(u64, u64)> = titles.iter().filter_map(|t| parse_title(t)).collect();
    assert!(
        drawn.len() >= 2 && drawn[0].0 >= 6 && drawn.last().unwrap().0 > drawn[0].0,
        "the live page drew the history and then new rounds: {titles:?}"
    );
    assert!(drawn.iter().any(|d| d.1 >= 1), "streams seen: {titles:?}");

    // Snapshot view: a page that finishes loading, so virtual time can run.
    let url = format!("{base}/dashboard?snapshot");
    let profile = tempfile::tempdir().unwrap();
    let dom = chromium_once(
        profile.path(),
        &["--virtual-time-budget=5000", "--dump-dom"],
        &url,
    );
    let points: u64 = dom
        .split("data-points=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no data-points in the DOM:\n{dom}"));
    assert!(points >= 6, "rounds drawn: {points}");
    let canvases = dom.matches("<canvas").count();
    assert_eq!(canvases, 4 + 5, "a chart per disk and five more");
    assert!(dom.contains("disk 3: healthy"), "disk states shown");

    let shot = dir.path().join("dashboard.png");
    let profile = tempfile::tempdir().unwrap();
    chromium_once(
        profile.path(),
        &[
            "--virtual-time-budget=5000",
            "--hide-scrollbars",
            &format!("--screenshot={}", shot.display()),
        ],
        &url,
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (1280, 900));
    let channels = info.color_type.samples();
    assert!(channels >= 3, "{:?}", info.color_type);
    let pixels: Vec<[u8; 3]> = buf[..info.buffer_size()]
        .chunks(channels)
        .map(|p| [p[0], p[1], p[2]])
        .collect();
    let luma: Vec<f64> = pixels
        .iter()
        .map(|p| 0.299 * p[0] as f64 + 0.587 * p[1] as f64 + 0.114 * p[2] as f64)
        .collect();
    let mean = luma.iter().sum::<f64>() / luma.len() as f64;
    let variance = luma.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / luma.len() as f64;
    assert!(
        variance > 100.0,
        "the screenshot is not blank: variance {variance}"
    );
    // The charts' lines: reserved (blue) on every disk chart, measured
    // (orange) where streams read, active streams (green).
    let reserved = count_colour(&pixels, [0x15, 0x65, 0xc0], 40);
    let measured = count_colour(&pixels, [0xe6, 0x51, 0x00], 40);
    // Green only below the disk charts: the disk-state badges are green too.
    let lower_half = &pixels[pixels.len() / 2..];
    let green = count_colour(lower_half, [0x2e, 0x7d, 0x32], 40);
    eprintln!(
        "dashboard: {points} rounds drawn, live titles {:?}, pixels reserved {reserved} measured {measured} green {green}, luma variance {variance:.0}",
        drawn.last()
    );
    assert!(
        reserved > 4 * 200,
        "reserved lines drawn: {reserved} pixels"
    );
    assert!(measured > 4 * 30, "measured lines drawn: {measured} pixels");
    assert!(
        green > 200,
        "active-stream and admission charts drawn: {green} pixels"
    );
    if let Some(keep) = std::env::var_os("RONDO_DASHBOARD_PNG") {
        std::fs::copy(&shot, keep).unwrap();
    }

    for player in players {
        player.abort();
    }
    server.shutdown().await;
}

/// Seed 004's dynamic cycle on the dashboard: on a `segments` directory
/// with thresholds at 0 (an operation every cycle), the snapshot page shows
/// the time-cycle section with the cycle, the streams by rounds per read
/// and the operations, and draws its chart beside the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dashboard_shows_the_dynamic_cycle_in_headless_chromium() {
    init_logs();
    if !chromium_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let store = rondo_store::Store::create(
        dir.path().join("data"),
        rondo_store::StoreConfig {
            round_duration_ns: TEST_ROUND_DURATION_NS,
            segment_rounds: 8,
            ..rondo_server::titles::default_store_config()
        },
    )
    .unwrap();
    let samples =
        rondo_server::ingest::ingest_sample_titles(&store, 0, &rondo_server::ingest::Unthrottled)
            .unwrap();
    let ids: Vec<u64> = samples.iter().map(|r| r.id.0).collect();
    let mut cycle = rondo_model::array::DynamicCycle::new(8);
    cycle.combination.memory_threshold_permille = 0;
    cycle.combination.time_threshold_permille = 0;
    cycle.combination.difference_threshold_permille = 0;
    let server = start(
        store,
        rondo_server::ServerConfig {
            start_burst_bytes: 0,
            cycle: Some(cycle),
            ..test_config()
        },
    )
    .await;
    let base = server.url();
    let client = reqwest::Client::new();
    scrape(&client, &base).await;
    let players = play(&base, &[ids[0], ids[1], ids[2], ids[0]]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let history = get_json(&client, &format!("{base}/api/history")).await;
        let operations = history
            .as_array()
            .unwrap()
            .last()
            .and_then(|s| {
                s["cycle"]["combines"]
                    .as_u64()
                    .zip(s["cycle"]["doubles"].as_u64())
            })
            .map_or(0, |(c, d)| c + d);
        if (history.as_array().unwrap().len() >= 6 && operations > 0) || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let profile = tempfile::tempdir().unwrap();
    let dom = chromium_once(
        profile.path(),
        &["--virtual-time-budget=5000", "--dump-dom"],
        &format!("{base}/dashboard?snapshot"),
    );
    assert!(
        dom.contains("<section id=\"cycleSection\">"),
        "the time-cycle section is shown:\n{dom}"
    );
    assert!(dom.contains("streams by rounds per read"), "{dom}");
    assert!(dom.contains(" combines, "), "{dom}");
    assert_eq!(
        dom.matches("<canvas").count(),
        4 + 5 + 1,
        "a chart per disk, five more and the cycle's"
    );
    for p in players {
        p.await.unwrap();
    }
    server.shutdown().await;
}
