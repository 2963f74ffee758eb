//! `kill -9` of `rondo serve` under load, then a restart on the same data
//! directory (the built binary, 4 emulated Cheetah disks, 1 s rounds, the
//! embedded sample titles).
//!
//! Before the kill: a fresh server's idle reservations (the fixed term per
//! disk) and its capacity for a burst of requests of one title; then twelve
//! paced streams mid-flight and an upload (`rondo ingest` handing a 240 s
//! title to the server) inside the write gate. SIGKILL. Then:
//!
//! - the stale files: `rondo.lock` (its flock died with the process) and
//!   `server.json` naming the dead pid are still there; `rondo fsck` takes
//!   the lock and passes, listing the half-written upload as an orphan;
//!   `rondo ingest` of another file opens the store directly (it is not
//!   fooled by the stale `server.json`), removing the orphan;
//! - every stream cut by the kill received a prefix of its title;
//! - the restarted server rewrites `server.json` with its own pid and URL,
//!   removes the spooled upload, lists exactly the complete titles, starts with no stream, no buffer, and every disk's reservation
//!   at the fixed term in its first rounds, and admits the same burst as the
//!   fresh server did;
//! - every title streams byte for byte as the store held it before the
//!   server ever ran (and the file ingested while it was down, as the store
//!   held it); after a clean stop fsck passes with no orphan.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rondo_model::layout::Replica;
use rondo_server::ingest::{Unthrottled, ingest_sample_titles};
use rondo_server::titles::{default_store_config, open_or_create};
use rondo_testkit::http::{get_json, get_text};
use rondo_testkit::media::padded_ts;
use rondo_testkit::process::{RondoServe, Serve, stdout_json};
use serde_json::Value;

fn rondo() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rondo"))
}

fn text(path: &Path) -> &str {
    path.to_str().expect("utf-8 temp path")
}

/// Streams cut by the kill.
const STREAMS: usize = 12;
/// Requests of one title offered at once to measure what admission takes
/// (the sample titles' capacity on this array is about 150).
const BURST: usize = 300;

/// An MPEG-TS of `seconds` made with ffmpeg, padded with null packets to
/// `mux_kbps` (a large file without a costly encode).
fn make_ts(dir: &Path, name: &str, seconds: u32, mux_kbps: u32) -> PathBuf {
    padded_ts(seconds, mux_kbps).make(dir.join(format!("{name}.ts")))
}

/// A running `rondo serve` on `data`, killed on drop; its stderr goes to a
/// file.
fn start_server(data: &Path, stderr: PathBuf) -> RondoServe {
    Serve::on(env!("CARGO_BIN_EXE_rondo"), data)
        // Streams paced from their first round, so that they are mid-flight
        // at the kill (a start burst sends a short title whole at once).
        .args(["--start-burst-s", "0", "--start-burst-bytes", "0"])
        .stderr_to(stderr)
        .timeout(Duration::from_secs(60))
        .start()
}

/// The value of one Prometheus sample line `series value`.
fn prom(metrics: &str, series: &str) -> f64 {
    let prefix = format!("{series} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {series} in /metrics"))
        .parse()
        .unwrap()
}

/// What one stream client received.
#[derive(Debug)]
struct Received {
    status: u16,
    body: Vec<u8>,
    /// The body ended with an error (or short of its length).
    cut: bool,
}

/// GETs `url` and reads the whole body; `progress` gets the byte count as
/// it grows.
async fn stream(
    http: reqwest::Client,
    url: String,
    progress: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> Received {
    let mut response = http.get(&url).send().await.expect("request sent");
    let status = response.status().as_u16();
    let length = response.content_length();
    let mut body = Vec::new();
    let mut cut = false;
    if status == 200 {
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    body.extend_from_slice(&chunk);
                    progress.store(body.len() as u64, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(None) => break,
                Err(_) => {
                    cut = true;
                    break;
                }
            }
        }
        cut |= length != Some(body.len() as u64);
    }
    Received { status, body, cut }
}

/// Offers `BURST` requests of one title at once, holding every admitted
/// response until all are answered; returns how many were admitted (the
/// rest must be 503). Dropping the responses then releases the streams.
async fn burst(http: &reqwest::Client, url: &str, title: u64) -> usize {
    // Start just after a round boundary, so that the whole burst normally
    // sees the same earliest start round on both servers.
    let round = |m: Value| m["rounds"].as_u64().unwrap();
    let now = round(get_json(http, &format!("{url}/api/metrics")).await);
    while round(get_json(http, &format!("{url}/api/metrics")).await) == now {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut tasks = Vec::new();
    for _ in 0..BURST {
        let request = http.get(format!("{url}/stream/{title}"));
        tasks.push(tokio::spawn(async move { request.send().await }));
    }
    let mut held = Vec::new();
    for task in tasks {
        let response = task.await.unwrap().expect("burst request answered");
        let status = response.status().as_u16();
        assert!(status == 200 || status == 503, "burst answer {status}");
        if status == 200 {
            held.push(response);
        }
    }
    let admitted = held.len();
    drop(held);
    // The disconnects release the streams at once.
    let started = Instant::now();
    loop {
        let metrics = get_json(http, &format!("{url}/api/metrics")).await;
        if metrics["active_streams"] == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "burst streams not released: {metrics}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    admitted
}

/// Waits until the server has begun `rounds` rounds.
async fn wait_rounds(http: &reqwest::Client, url: &str, rounds: u64) {
    let started = Instant::now();
    while get_json(http, &format!("{url}/api/metrics")).await["rounds"]
        .as_u64()
        .unwrap()
        < rounds
    {
        assert!(started.elapsed() < Duration::from_secs(30));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Per disk, `rondo_disk_reserved_seconds` of an idle server.
fn idle_reserved_s(metrics: &str, disks: usize) -> Vec<f64> {
    (0..disks)
        .map(|d| {
            prom(
                metrics,
                &format!("rondo_disk_reserved_seconds{{disk=\"{d}\"}}"),
            )
        })
        .collect()
}

fn fsck(data: &Path) -> Value {
    let output = rondo()
        .args(["fsck", "--data-dir", text(data), "--json"])
        .output()
        .unwrap();
    let report = stdout_json(&output);
    assert!(output.status.success(), "fsck failed: {report:#}");
    assert_eq!(
        report["problems"].as_array().unwrap().len(),
        0,
        "{report:#}"
    );
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_then_restart_is_clean() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");

    // The data directory as `rondo serve` creates it, and what the store
    // holds before any server ran: the reference bytes of every title.
    let references: Vec<(u64, String, Vec<u8>)> = {
        let (store, created) = open_or_create(&data, default_store_config()).unwrap();
        assert!(created);
        ingest_sample_titles(&store, 0, &Unthrottled).unwrap();
        let mut references = Vec::new();
        for record in store.titles().unwrap() {
            let title = store.load_title(record.id).unwrap();
            let mut bytes = Vec::new();
            for round in 0..record.client_bytes.len() {
                bytes.extend(store.read_round(&title, round, Replica::Primary).unwrap());
            }
            assert_eq!(bytes.len() as u64, record.size_bytes);
            references.push((record.id.0, record.name.clone(), bytes));
        }
        references
    };
    assert_eq!(references.len(), 3, "the three sample titles");
    let upload = make_ts(tmp.path(), "upload", 240, 4000);
    let offline = make_ts(tmp.path(), "offline", 4, 300);
    let disks = default_store_config().disk_count as usize;
    let http = reqwest::Client::new();

    // A fresh server: idle reservations and the burst it admits.
    let first = start_server(&data, tmp.path().join("serve-1.log"));
    let url = first.url.clone();
    wait_rounds(&http, &url, 2).await;
    let fresh_idle = idle_reserved_s(&get_text(&http, &format!("{url}/metrics")).await, disks);
    assert!(
        fresh_idle.iter().all(|&s| s > 0.0 && s == fresh_idle[0]),
        "{fresh_idle:?}"
    );
    let burst_title = references[0].0;
    let fresh_admitted = burst(&http, &url, burst_title).await;
    assert!(
        fresh_admitted > 20 && fresh_admitted < BURST,
        "the burst fills the array and is partly refused: {fresh_admitted} of {BURST}"
    );

    // Load: paced streams and an upload in the write gate.
    let mut clients = Vec::new();
    for i in 0..STREAMS {
        let (id, _, _) = &references[i % references.len()];
        let progress = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let task = tokio::spawn(stream(
            http.clone(),
            format!("{url}/stream/{id}"),
            progress.clone(),
        ));
        clients.push((*id, progress, task));
    }
    let mut ingest = rondo()
        .args([
            "ingest",
            text(&upload),
            "--data-dir",
            text(&data),
            "--name",
            "upload",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let load_started = Instant::now();
    loop {
        let metrics = get_json(&http, &format!("{url}/api/metrics")).await;
        let receiving = clients
            .iter()
            .filter(|(_, p, _)| p.load(std::sync::atomic::Ordering::Relaxed) > 0)
            .count();
        let gated = metrics["gated_writes"].as_u64().unwrap();
        if gated >= 2 && receiving == STREAMS && load_started.elapsed() > Duration::from_secs(4) {
            break;
        }
        assert!(
            load_started.elapsed() < Duration::from_secs(30),
            "load did not get going: {receiving} streams receiving, {gated} gated writes: {metrics}"
        );
        assert!(
            ingest.try_wait().unwrap().is_none(),
            "the upload finished before the kill: make it longer"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let dead_pid = first.child.id();
    drop(first); // SIGKILL, then reaped
    let upload_status = ingest.wait().unwrap();
    assert!(!upload_status.success(), "the upload was cut by the kill");
    for (id, _, task) in clients {
        let received = task.await.unwrap();
        let reference = &references.iter().find(|r| r.0 == id).unwrap().2;
        assert_eq!(received.status, 200);
        assert!(
            received.cut,
            "title {id}: the stream was mid-flight at the kill"
        );
        assert!(
            !received.body.is_empty() && reference.starts_with(&received.body),
            "title {id}: what arrived before the kill ({} bytes) is a prefix of the title",
            received.body.len()
        );
    }

    // Stale files, fsck, and the store opened directly while no server runs.
    assert!(data.join("rondo.lock").exists());
    let stale: Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("server.json")).unwrap()).unwrap();
    assert_eq!(
        stale["pid"], dead_pid,
        "server.json still names the dead server"
    );
    let report = fsck(&data);
    let orphans: Vec<&str> = report["orphans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        orphans,
        ["upload"],
        "the cut upload is an orphan: {report:#}"
    );
    let spooled = |dir: &Path| {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".upload-"))
            .count()
    };
    assert!(spooled(&data) >= 1, "the upload's spool file is left");
    // `rondo ingest` finds the lock free: it opens the store itself (the
    // stale server.json does not send it to a dead server), removes the
    // orphan and stores its file.
    let offline_ingest = rondo()
        .args([
            "ingest",
            text(&offline),
            "--data-dir",
            text(&data),
            "--name",
            "offline",
        ])
        .output()
        .unwrap();
    let offline_log = String::from_utf8_lossy(&offline_ingest.stderr).to_string();
    assert!(
        offline_ingest.status.success(),
        "ingest with no server running: {offline_log}"
    );
    assert!(
        offline_log.contains("removed unfinished title \"upload\""),
        "{offline_log}"
    );
    let offline_reference: Vec<u8> = {
        let store = rondo_store::Store::open(&data).unwrap();
        let record = store
            .titles()
            .unwrap()
            .into_iter()
            .find(|t| t.name == "offline")
            .unwrap();
        let title = store.load_title(record.id).unwrap();
        (0..record.client_bytes.len())
            .flat_map(|round| store.read_round(&title, round, Replica::Primary).unwrap())
            .collect()
    };

    // The restart.
    let second = start_server(&data, tmp.path().join("serve-2.log"));
    let url = second.url.clone();
    let info: Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("server.json")).unwrap()).unwrap();
    assert_eq!(info["pid"], second.child.id(), "{info}");
    assert_eq!(info["url"], url.as_str(), "{info}");
    assert_eq!(spooled(&data), 0, "the spooled upload is removed");
    let titles = get_json(&http, &format!("{url}/api/titles")).await;
    let mut names: Vec<&str> = titles
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort();
    let mut expected: Vec<&str> = references.iter().map(|r| r.1.as_str()).collect();
    expected.push("offline");
    expected.sort();
    assert_eq!(names, expected, "exactly the complete titles");

    // Reservations start clean.
    wait_rounds(&http, &url, 3).await;
    let metrics = get_text(&http, &format!("{url}/metrics")).await;
    assert_eq!(prom(&metrics, "rondo_streams_active"), 0.0);
    assert_eq!(prom(&metrics, "rondo_buffer_in_use_bytes"), 0.0);
    assert_eq!(
        prom(&metrics, "rondo_admissions_total{result=\"admitted\"}"),
        0.0
    );
    assert_eq!(
        idle_reserved_s(&metrics, disks),
        fresh_idle,
        "only the fixed term"
    );
    let fixed_ns = (fresh_idle[0] * 1e9).round() as u64;
    let history = get_json(&http, &format!("{url}/api/history")).await;
    let samples = history.as_array().unwrap();
    assert!(!samples.is_empty());
    for sample in samples {
        let rounds = sample["rounds"].as_u64().unwrap();
        for (d, disk) in sample["disks"].as_array().unwrap().iter().enumerate() {
            let reserved_ns = disk["reserved_ns"].as_u64().unwrap();
            assert!(
                reserved_ns.abs_diff(fixed_ns * rounds) <= rounds,
                "round {}: disk {d} reserved {reserved_ns} ns beyond the fixed term",
                sample["round"]
            );
        }
    }
    let restarted_admitted = burst(&http, &url, burst_title).await;
    eprintln!(
        "burst of {BURST}: {fresh_admitted} admitted fresh, {restarted_admitted} after the restart"
    );
    let tolerance = fresh_admitted.div_ceil(20); // 5 %
    assert!(
        restarted_admitted.abs_diff(fresh_admitted) <= tolerance,
        "full capacity again: {restarted_admitted} admitted after the restart, \
         {fresh_admitted} on the fresh server"
    );

    // Every title streams as it was stored.
    let mut tasks = Vec::new();
    for (id, name, bytes) in &references {
        let progress = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let task = tokio::spawn(stream(http.clone(), format!("{url}/stream/{id}"), progress));
        tasks.push((name.clone(), bytes.clone(), task));
    }
    let offline_id = titles
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "offline")
        .unwrap()["id"]
        .as_u64()
        .unwrap();
    let progress = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    tasks.push((
        "offline".into(),
        offline_reference,
        tokio::spawn(stream(
            http.clone(),
            format!("{url}/stream/{offline_id}"),
            progress,
        )),
    ));
    for (name, reference, task) in tasks {
        let received = task.await.unwrap();
        assert_eq!(received.status, 200, "{name}");
        assert!(!received.cut, "{name}");
        assert!(received.body == reference, "{name} streams byte for byte");
    }
    let metrics = get_json(&http, &format!("{url}/api/metrics")).await;
    assert_eq!(
        metrics["stream_round_misses"],
        0,
        "{metrics}\n{}",
        second.log()
    );

    // A clean stop; fsck passes with nothing left over.
    let mut second = second;
    let status = second.terminate();
    assert!(status.success(), "rondo serve exited with {status}");
    assert!(!data.join("server.json").exists());
    let report = fsck(&data);
    assert_eq!(report["orphans"].as_array().unwrap().len(), 0, "{report:#}");
    eprintln!(
        "crash and restart took {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
