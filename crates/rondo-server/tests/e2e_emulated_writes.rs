//! The emulated disks serve the writes and re-reads that share them with
//! streams: a rebuild's copies and an ingest upload, each under stream load.
//! Per disk-round, the disk model's busy time includes the granted
//! commands' time (`granted_model_ns`), every granted byte reached the
//! models (`granted_bytes`: the rebuilt bytes on the new disk; the gate's
//! written bytes for the upload), no stream-round misses, and no disk-round
//! busier than what was reserved for streams plus what was granted to the
//! writers, in the model or measured.
//!
//! Timing assertions are loose on purpose (a loaded 2-core machine): they
//! compare sums the model computes, not wall-clock instants; the printed
//! numbers are what `docs/operations.md` and `docs/server.md` quote.

mod e2e_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use e2e_support::*;
use futures_util::StreamExt;
use rondo_model::reservation::Scheme;
use rondo_model::units::{DiskIndex, Round};
use rondo_server::RunningServer;
use rondo_server::metrics::MetricsSnapshot;
use rondo_store::Store;

/// The tests share two cores and measure busy time: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// 1 MB per round per stream (8 Mbit/s, null-padded MPEG-TS), 16 s.
const TITLE_SECONDS: u32 = 16;
const TITLE_KBPS: u32 = 8000;

/// The streams' title: TITLE_SECONDS of MPEG-TS padded to TITLE_KBPS.
fn long_title(dir: &Path) -> PathBuf {
    make_media_padded(dir, "long", MediaKind::Ts, TITLE_SECONDS, Some(TITLE_KBPS))
}

/// One disk-round as `/api/metrics`' last-round fields showed it.
#[derive(Clone, Copy, Debug)]
struct DiskRound {
    model_busy_ns: u64,
    measured_busy_ns: u64,
    granted_ns: u64,
    granted_model_ns: u64,
}

/// Samples every disk's last finished round until told to stop.
fn sample_rounds(
    server: Arc<RunningServer>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<BTreeMap<(DiskIndex, Round), DiskRound>> {
    tokio::spawn(async move {
        let mut rounds = BTreeMap::new();
        while !stop.load(Relaxed) {
            for d in server.metrics().disks {
                if d.rounds > 0 {
                    rounds.insert(
                        (d.disk, d.last_round),
                        DiskRound {
                            model_busy_ns: d.last_model_busy_ns,
                            measured_busy_ns: d.last_measured_busy_ns,
                            granted_ns: d.last_granted_ns,
                            granted_model_ns: d.last_granted_model_ns,
                        },
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        rounds
    })
}

/// Streams `url` to its end; returns (bytes received, broken).
async fn drain(client: reqwest::Client, url: String) -> (u64, bool) {
    let response = client.get(&url).send().await.expect("request sent");
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let mut bytes = 0u64;
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(chunk) => bytes += chunk.len() as u64,
            Err(_) => return (bytes, true),
        }
    }
    (bytes, false)
}

/// The store and its titles: four 16 s titles at 8 Mbit/s.
fn loaded_store(dir: &std::path::Path, media: &std::path::Path) -> Store {
    let store = create_store_with_scheme(dir, Scheme::Minimum);
    for i in 0..4 {
        ingest(&store, media, &format!("long-{i}"));
    }
    store
}

/// Every disk: no round over reserved + granted, in the model or measured.
fn assert_within_budget(m: &MetricsSnapshot) {
    for d in &m.disks {
        assert_eq!(d.rounds_model_over_reserved, 0, "{d:?}");
        assert_eq!(d.rounds_over_reserved, 0, "{d:?}");
        // The model's time for the granted commands is within their charge
        // (the bounds hold) and inside the disk's busy time.
        assert!(d.granted_model_ns_total <= d.granted_ns_total, "{d:?}");
        assert!(d.granted_model_ns_total <= d.model_busy_ns_total, "{d:?}");
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Mean of `f` over `rounds`, in ms (0 for none).
fn mean_ms(rounds: &[DiskRound], f: impl Fn(&DiskRound) -> u64) -> f64 {
    if rounds.is_empty() {
        return 0.0;
    }
    rounds.iter().map(|r| ms(f(r))).sum::<f64>() / rounds.len() as f64
}

fn report(what: &str, rounds: &BTreeMap<(DiskIndex, Round), DiskRound>) {
    for disk in 0..4u32 {
        let (with, without): (Vec<DiskRound>, Vec<DiskRound>) = rounds
            .iter()
            .filter(|((d, _), _)| *d == DiskIndex(disk))
            .map(|(_, r)| *r)
            .partition(|r| r.granted_ns > 0);
        eprintln!(
            "{what}: disk {disk}: {} rounds with grants: model busy {:.1} ms (of it granted I/O {:.1} ms), \
             measured {:.1} ms, granted {:.1} ms; {} rounds without: model busy {:.1} ms, measured {:.1} ms",
            with.len(),
            mean_ms(&with, |r| r.model_busy_ns),
            mean_ms(&with, |r| r.granted_model_ns),
            mean_ms(&with, |r| r.measured_busy_ns),
            mean_ms(&with, |r| r.granted_ns),
            without.len(),
            mean_ms(&without, |r| r.model_busy_ns),
            mean_ms(&without, |r| r.measured_busy_ns),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_is_served_by_the_emulated_disks_within_the_round_budget() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let media = long_title(tmp.path());
    let store = loaded_store(&dir, &media);
    let titles = store.titles().unwrap();
    let server = Arc::new(start(store, test_config()).await);
    let url = server.url();
    let token = server.token().to_string();
    let http = reqwest::Client::new();
    let mut players = Vec::new();
    for i in 0..12 {
        let title = &titles[i % titles.len()];
        players.push(tokio::spawn(drain(
            http.clone(),
            format!("{url}/stream/{}.ts", title.id.0),
        )));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = sample_rounds(Arc::clone(&server), Arc::clone(&stop));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let admin = |path: &str, body: Option<serde_json::Value>| {
        let http = http.clone();
        let url = format!("{url}/api/admin/disks/{path}");
        let token = token.clone();
        async move { admin_post(&http, &url, Some(&token), body).await }
    };
    let (status, answer) = admin("2/fail", None).await;
    assert_eq!(status, 200, "{answer}");
    let new_device = tmp.path().join("new-2.dev");
    let (status, answer) =
        admin("2/replace", Some(serde_json::json!({ "path": new_device }))).await;
    assert_eq!(status, 200, "{answer}");
    // A round or two with disk 2 failed and nothing rebuilt: its model idles.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before_rebuild = server.metrics().disks[2].model_busy_ns_total;
    let (status, answer) = admin("2/restore", None).await;
    assert_eq!(status, 200, "{answer}");
    let total_bytes = answer["total_bytes"].as_u64().unwrap();
    let started = Instant::now();
    let summary = loop {
        let disks = get_json(&http, &format!("{url}/api/disks")).await;
        if disks["disks"][2]["state"] == "healthy" {
            break disks["last_rebuild"].clone();
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{disks}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(summary["restored"], true, "{summary}");
    eprintln!("rebuild: {summary}");
    for player in players {
        let (_, broken) = player.await.unwrap();
        assert!(!broken);
    }
    stop.store(true, Relaxed);
    let rounds = sampler.await.unwrap();
    let m = server.metrics();
    // Prometheus shows disk 2's granted bytes (the rebuild's, over) as the JSON does.
    let text = get_text(&http, &format!("{url}/metrics")).await;
    let line = format!(
        "rondo_disk_granted_bytes_total{{disk=\"2\"}} {}",
        m.disks[2].granted_bytes
    );
    assert!(
        text.lines().any(|l| l == line),
        "no line {line:?} in /metrics"
    );
    Arc::into_inner(server)
        .expect("sampler done")
        .shutdown()
        .await;

    assert_eq!(m.stream_round_misses, 0);
    assert_within_budget(&m);
    // Every rebuilt byte was written through disk 2's model, and the copies'
    // source reads through the surviving disks' models.
    let d2 = &m.disks[2];
    assert_eq!(d2.granted_bytes, total_bytes, "{d2:?}");
    let read_bytes: u64 = [0, 1, 3].iter().map(|&d| m.disks[d].granted_bytes).sum();
    assert!(read_bytes >= total_bytes, "{read_bytes} < {total_bytes}");
    // Disk 2 serves no stream while failed: its model's busy time during the
    // rebuild is the copies' writes, well above the idle rounds before it.
    let rebuild_busy_ns = d2.model_busy_ns_total - before_rebuild;
    assert!(d2.granted_model_ns_total > 0);
    assert!(
        rebuild_busy_ns >= d2.granted_model_ns_total / 2,
        "{rebuild_busy_ns} {d2:?}"
    );
    let failed_idle: Vec<&DiskRound> = rounds
        .iter()
        .filter(|((d, _), r)| *d == DiskIndex(2) && r.granted_ns == 0 && r.model_busy_ns == 0)
        .map(|(_, r)| r)
        .collect();
    let with_writes: Vec<&DiskRound> = rounds
        .iter()
        .filter(|((d, _), r)| *d == DiskIndex(2) && r.granted_ns > 0)
        .map(|(_, r)| r)
        .collect();
    assert!(!with_writes.is_empty(), "no rebuild round sampled");
    for r in &with_writes {
        assert!(
            r.granted_model_ns > 0 && r.model_busy_ns >= r.granted_model_ns,
            "{r:?}"
        );
    }
    eprintln!(
        "disk 2: {} sampled rounds failed and idle (model busy 0), {} with copies; \
         rebuild total: granted {:.1} ms, model time of the copies' writes {:.1} ms, \
         model busy {:.1} ms, {} bytes in {} commands",
        failed_idle.len(),
        with_writes.len(),
        ms(d2.granted_ns_total),
        ms(d2.granted_model_ns_total),
        ms(rebuild_busy_ns),
        d2.granted_bytes,
        d2.granted_commands,
    );
    report("rebuild", &rounds);

    // The rebuilt extents hold the same bytes as the other replica.
    let store = Store::open(&dir).unwrap();
    assert!(assert_replicas_agree_on(&store, &titles, DiskIndex(2)) > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_is_written_through_the_emulated_disks_within_the_round_budget() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let media = long_title(tmp.path());
    let upload = make_media_padded(tmp.path(), "upload", MediaKind::Ts, 24, Some(TITLE_KBPS));
    let store = loaded_store(&dir, &media);
    let titles = store.titles().unwrap();
    let server = Arc::new(start(store, test_config()).await);
    let url = server.url();
    let http = reqwest::Client::new();
    let mut players = Vec::new();
    for i in 0..12 {
        let title = &titles[i % titles.len()];
        players.push(tokio::spawn(drain(
            http.clone(),
            format!("{url}/stream/{}.ts", title.id.0),
        )));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = sample_rounds(Arc::clone(&server), Arc::clone(&stop));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = server.metrics();
    let response = http
        .post(format!("{url}/api/admin/titles?name=upload&file=upload.ts"))
        .header("authorization", format!("Bearer {}", server.token()))
        .body(std::fs::read(&upload).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let title: serde_json::Value = response.json().await.unwrap();
    let after = server.metrics();
    for player in players {
        let (_, broken) = player.await.unwrap();
        assert!(!broken);
    }
    stop.store(true, Relaxed);
    let rounds = sampler.await.unwrap();
    let m = server.metrics();
    Arc::into_inner(server)
        .expect("sampler done")
        .shutdown()
        .await;

    assert_eq!(m.stream_round_misses, 0);
    assert_within_budget(&m);
    // Every byte the gate let through went through the disks' models as a
    // write, in the rounds that granted it.
    let written = after.gated_write_bytes - before.gated_write_bytes;
    let modelled: u64 = (0..4)
        .map(|d| after.disks[d].granted_bytes - before.disks[d].granted_bytes)
        .sum();
    let rounds_written = after.gated_writes - before.gated_writes;
    assert_eq!(rounds_written, title["rounds"].as_u64().unwrap(), "{title}");
    assert!(written > 0);
    assert_eq!(modelled, written);
    let granted_model_ns: u64 = (0..4)
        .map(|d| after.disks[d].granted_model_ns_total - before.disks[d].granted_model_ns_total)
        .sum();
    let granted_ns: u64 = (0..4)
        .map(|d| after.disks[d].granted_ns_total - before.disks[d].granted_ns_total)
        .sum();
    eprintln!(
        "upload: {} rounds, {written} bytes written (both replicas) in {:.1} s; model time of the \
         writes {:.1} ms, granted {:.1} ms, over the four disks",
        rounds_written,
        (after.rounds - before.rounds) as f64,
        ms(granted_model_ns),
        ms(granted_ns),
    );
    // Rounds with writes are busier in the model than rounds without.
    let (with, without): (Vec<DiskRound>, Vec<DiskRound>) =
        rounds.values().partition(|r| r.granted_ns > 0);
    assert!(!with.is_empty(), "no round with writes sampled");
    for r in &with {
        assert!(
            r.granted_model_ns > 0 && r.model_busy_ns >= r.granted_model_ns,
            "{r:?}"
        );
    }
    let busy_streams_only = |r: &DiskRound| r.model_busy_ns - r.granted_model_ns;
    eprintln!(
        "upload: {} disk-rounds with writes: model busy {:.1} ms = streams {:.1} ms + writes {:.1} ms; \
         {} without: {:.1} ms",
        with.len(),
        mean_ms(&with, |r| r.model_busy_ns),
        mean_ms(&with, busy_streams_only),
        mean_ms(&with, |r| r.granted_model_ns),
        without.len(),
        mean_ms(&without, |r| r.model_busy_ns),
    );
    assert!(mean_ms(&with, |r| r.model_busy_ns) > mean_ms(&without, |r| r.model_busy_ns));
    report("upload", &rounds);
}
