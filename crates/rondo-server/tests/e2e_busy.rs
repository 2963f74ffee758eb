//! Measured busy time per disk stays below reserved, end to end: a load
//! near capacity (more requests than the array admits, high-bitrate titles
//! so transfer dominates each request) on emulated Cheetah disks, with one
//! disk failed mid-run. The round driver compares, for every disk and
//! round, the busy time the I/O thread measured (and the disk model's) with
//! the disk time admission reserved for that round (fixed term included)
//! and counts the rounds over it (`rondo_disk_rounds_over_reserved_total`,
//! `rondo_disk_rounds_model_over_reserved_total`).
//!
//! The server reserves with the rondo-mode bound, a true upper bound of the
//! detailed disk model's busy time for any C-SCAN batch (docs/disk-model.md),
//! and with emulated timing a read completes when the model says (or later,
//! if the host is slower). So under `minimum`, whose reservation already
//! holds the reads a failure reroutes, no disk-round may exceed its
//! reservation, before or after the failure: the assertion is per
//! disk-round, not on average. The negative control runs the same load
//! under `unreserved`: the rerouted reads were never reserved, and the
//! surviving disks' rounds exceed their reservations (the check can fail).

mod e2e_support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use e2e_support::*;
use futures_util::StreamExt;
use rondo_model::reservation::Scheme;

/// The tests share two cores and measure time: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Four titles of this many seconds of null-padded MPEG-TS at this bitrate:
/// about 1 MB per round, so a Cheetah disk carries about ten streams.
const TITLE_SECONDS: u32 = 16;
const TITLE_KBPS: u32 = 8000;

/// The streams' title: TITLE_SECONDS of MPEG-TS padded to TITLE_KBPS.
fn long_title(dir: &Path) -> PathBuf {
    make_media_padded(dir, "long", MediaKind::Ts, TITLE_SECONDS, Some(TITLE_KBPS))
}
/// Requests made at once: about twice what the array admits.
const CLIENTS: usize = 48;
/// When disk 1 is failed, after the requests.
const FAIL_AFTER: Duration = Duration::from_secs(6);

/// Reads a body to its end; returns (status, bytes received, whether the
/// body ended with an error).
async fn read_stream(client: reqwest::Client, url: String) -> (u16, u64, bool) {
    let response = client.get(&url).send().await.expect("request sent");
    let status = response.status().as_u16();
    if status != 200 {
        return (status, 0, false);
    }
    let mut bytes = 0u64;
    let mut body = response.bytes_stream();
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(chunk) => bytes += chunk.len() as u64,
            Err(_) => return (status, bytes, true),
        }
    }
    (status, bytes, false)
}

/// One sample of a Prometheus text: the value of `name{disk="d"}`.
fn disk_value(text: &str, name: &str, disk: usize) -> f64 {
    let prefix = format!("{name}{{disk=\"{disk}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {prefix} in /metrics"))
        .parse()
        .expect("a number")
}

/// What a run measured, per disk and overall.
#[derive(Debug)]
struct BusyRun {
    admitted: usize,
    incomplete: usize,
    misses: u64,
    /// Per disk: rounds finished, rounds measured over reserved, rounds the
    /// model was over reserved, smallest reserved − measured (ms).
    rounds: Vec<u64>,
    over: Vec<u64>,
    model_over: Vec<u64>,
    min_headroom_ms: Vec<Option<f64>>,
    /// Largest fraction of T reserved on any disk in a one-round history
    /// sample (how close to capacity the load came).
    max_reserved_fraction: f64,
}

async fn busy_run(media: &Path, scheme: Scheme) -> BusyRun {
    let tmp = tempfile::tempdir().unwrap();
    let store = create_store_with_scheme(&tmp.path().join("data"), scheme);
    for i in 0..4 {
        ingest(&store, media, &format!("long-{i}"));
    }
    let titles = store.titles().unwrap();
    let server = start(store, test_config()).await;
    let url = server.url();
    let http = reqwest::Client::new();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        let title = &titles[i % titles.len()];
        tasks.push(tokio::spawn(read_stream(
            http.clone(),
            format!("{url}/stream/{}.ts", title.id.0),
        )));
    }
    tokio::time::sleep(FAIL_AFTER.saturating_sub(started.elapsed())).await;
    let (status, answer) = admin_post(
        &http,
        &format!("{url}/api/admin/disks/1/fail"),
        Some(server.token()),
        None,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let mut admitted = 0;
    let mut incomplete = 0;
    for (i, task) in tasks.into_iter().enumerate() {
        let (status, bytes, broken) = task.await.unwrap();
        assert!(status == 200 || status == 503, "client {i}: {status}");
        if status == 200 {
            admitted += 1;
            if broken || bytes != titles[i % titles.len()].size_bytes {
                incomplete += 1;
            }
        }
    }
    // Let the last batches report before reading the counters.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let history = get_json(&http, &format!("{url}/api/history")).await;
    let text = get_text(&http, &format!("{url}/metrics")).await;
    let metrics = server.metrics();
    server.shutdown().await;

    let round_duration_ns = TEST_ROUND_DURATION_NS as f64;
    let max_reserved_fraction = history
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["rounds"] == 1)
        .flat_map(|s| s["disks"].as_array().unwrap().clone())
        .map(|d| d["reserved_ns"].as_f64().unwrap() / round_duration_ns)
        .fold(0.0, f64::max);
    let disks = &metrics.disks;
    let run = BusyRun {
        admitted,
        incomplete,
        misses: metrics.stream_round_misses,
        rounds: disks.iter().map(|d| d.rounds).collect(),
        over: disks.iter().map(|d| d.rounds_over_reserved).collect(),
        model_over: disks.iter().map(|d| d.rounds_model_over_reserved).collect(),
        min_headroom_ms: disks
            .iter()
            .map(|d| d.min_headroom_ns.map(|ns| ns as f64 / 1e6))
            .collect(),
        max_reserved_fraction,
    };
    // The Prometheus counters say the same as the JSON ones.
    for (disk, d) in disks.iter().enumerate() {
        assert_eq!(
            disk_value(&text, "rondo_disk_rounds_over_reserved_total", disk),
            d.rounds_over_reserved as f64
        );
        assert_eq!(
            disk_value(&text, "rondo_disk_rounds_model_over_reserved_total", disk),
            d.rounds_model_over_reserved as f64
        );
    }
    eprintln!("{scheme}: {run:?}");
    run
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minimum_keeps_every_disk_round_within_its_reservation_through_a_failure() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let tmp = tempfile::tempdir().unwrap();
    let media = long_title(tmp.path());
    let run = busy_run(&media, Scheme::Minimum).await;
    assert!(
        run.admitted >= 16 && run.admitted < CLIENTS,
        "admission should fill the array and refuse some: {run:?}"
    );
    assert!(
        run.max_reserved_fraction > 0.5,
        "the load should come near capacity: {run:?}"
    );
    assert_eq!(run.incomplete, 0, "{run:?}");
    assert_eq!(run.misses, 0, "{run:?}");
    for disk in 0..4 {
        assert!(
            run.rounds[disk] >= u64::from(TITLE_SECONDS),
            "disk {disk} ran rounds: {run:?}"
        );
        assert_eq!(
            run.model_over[disk], 0,
            "disk {disk}: the disk model exceeded the rondo-mode reservation: {run:?}"
        );
        assert_eq!(
            run.over[disk], 0,
            "disk {disk}: measured busy time exceeded the reservation in some round \
             (RONDO_LOG=warn shows which): {run:?}"
        );
        assert!(
            run.min_headroom_ms[disk].is_some_and(|ms| ms >= 0.0),
            "{run:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreserved_disk_rounds_exceed_their_reservation_after_the_failure() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let tmp = tempfile::tempdir().unwrap();
    let media = long_title(tmp.path());
    let run = busy_run(&media, Scheme::Unreserved).await;
    let model_over: u64 = run.model_over.iter().sum();
    let over: u64 = run.over.iter().sum();
    assert!(
        model_over > 0 && over > 0,
        "the rerouted reads were not reserved: some disk-rounds must exceed it: {run:?}"
    );
    assert_eq!(
        run.model_over[1], 0,
        "the failed disk reads nothing: {run:?}"
    );
}
