//! Disk failure in a running server: many concurrent high-bitrate streams
//! (more requests than the array admits, so admission fills it), one disk
//! failed mid-run through the control API. Under `minimum` no client stalls
//! and no stream-round misses; under `unreserved` (the negative control)
//! the same run misses deadlines. Also: the control endpoints refuse
//! requests without the token, a second failure stops exactly the streams
//! whose data is gone while the others play on (and a restore is still
//! accepted, naming the copies with no good source), a replaced disk is
//! rebuilt byte for byte while streams play, two corrupt extents on two
//! disks are repaired with no disk failed, and a server starts degraded
//! without a device and replace + restore bring it back.

mod e2e_support;

use std::path::Path;
use std::time::{Duration, Instant};

use e2e_support::*;
use futures_util::StreamExt;
use rondo_model::reservation::Scheme;
use rondo_model::units::DiskIndex;
use rondo_server::ServerConfig;
use rondo_store::Store;

/// The tests share two cores and measure deadlines: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Seconds of each long title and its bitrate (null-padded MPEG-TS): 1 MB
/// per round, so a disk carries about ten streams and transfer dominates.
const TITLE_SECONDS: u32 = 16;
const TITLE_KBPS: u32 = 8000;

/// A data directory with `long` high-bitrate titles (one encode, stored
/// under several names so their start disks differ) and one 2-second title.
fn build_store(dir: &Path, media: &Path, scheme: Scheme, long: usize) -> Store {
    let store = create_store_with_scheme(dir, scheme);
    for i in 0..long {
        ingest(&store, media, &format!("long-{i}"));
    }
    store
}

fn make_long_media(dir: &Path) -> std::path::PathBuf {
    make_media_padded(dir, "long", MediaKind::Ts, TITLE_SECONDS, Some(TITLE_KBPS))
}

/// What a failure run measured.
#[derive(Debug)]
struct Run {
    admitted: usize,
    stalls: u32,
    broken: usize,
    misses: u64,
    misses_before_failure: u64,
    #[allow(dead_code)] // printed
    overruns: u64,
    window_recoveries: u64,
    #[allow(dead_code)] // printed
    window_splits: u64,
}

/// Offers `clients` streams at once over the titles, fails disk 1 six
/// seconds in, and waits for every stream to end.
async fn failure_run(scheme: Scheme, clients: usize) -> Run {
    failure_run_with(scheme, clients, test_config()).await
}

/// [`failure_run`] with a server configuration.
async fn failure_run_with(scheme: Scheme, clients: usize, config: ServerConfig) -> Run {
    let tmp = tempfile::tempdir().unwrap();
    let media = make_long_media(tmp.path());
    let media_crc = rondo_store::checksum(&std::fs::read(&media).unwrap());
    let store = build_store(&tmp.path().join("data"), &media, scheme, 4);
    let titles = store.titles().unwrap();
    let server = start(store, config).await;
    let url = server.url();
    let http = reqwest::Client::new();
    let mut tasks = Vec::new();
    for i in 0..clients {
        let title = &titles[i % titles.len()];
        tasks.push(tokio::spawn(play(
            http.clone(),
            format!("{url}/stream/{}.ts", title.id.0),
            title.client_bytes.clone(),
        )));
    }
    tokio::time::sleep(Duration::from_secs(6)).await;
    let before = server.metrics();
    let (status, answer) = admin_post(
        &http,
        &format!("{url}/api/admin/disks/1/fail"),
        Some(server.token()),
        None,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["streams_stopped"].as_array().unwrap().len(), 0);
    let disks = get_json(&http, &format!("{url}/api/disks")).await;
    assert_eq!(disks["disks"][1]["state"], "failed", "{disks}");
    assert_eq!(disks["disks"][1]["serving"], false);
    assert_eq!(disks["disks"][0]["state"], "healthy");
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    let after = server.metrics();
    server.shutdown().await;
    let admitted: Vec<&ClientResult> = results.iter().filter(|r| r.status == 200).collect();
    for r in &results {
        assert!(r.status == 200 || r.status == 503, "{r:?}");
    }
    let run = Run {
        admitted: admitted.len(),
        stalls: admitted.iter().map(|r| r.stalls).sum(),
        // Complete and byte for byte the title (every long title is one
        // encode stored under several names).
        broken: admitted
            .iter()
            .filter(|r| r.broken || r.received_bytes != r.expected_bytes || r.body_crc != media_crc)
            .count(),
        window_recoveries: after.window_recoveries,
        window_splits: after.window_splits,
        misses: after.stream_round_misses,
        misses_before_failure: before.stream_round_misses,
        overruns: after.disk_round_overruns,
    };
    eprintln!("{scheme}: {run:?}");
    run
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minimum_reservation_absorbs_a_disk_failure_without_a_miss() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let run = failure_run(Scheme::Minimum, 48).await;
    assert_absorbed(&run);
}

/// A near-full array took the failure: many streams admitted, some
/// refused, and every admitted one played whole, on time, byte for byte.
fn assert_absorbed(run: &Run) {
    assert!(
        run.admitted >= 16,
        "the array should carry many streams: {run:?}"
    );
    assert!(
        run.admitted < 48,
        "admission should have refused some: {run:?}"
    );
    assert_eq!(run.misses, 0, "{run:?}");
    assert_eq!(run.stalls, 0, "{run:?}");
    assert_eq!(run.broken, 0, "every admitted stream is complete: {run:?}");
}

/// The same failure with a backup window of 3 rounds: the survivors read
/// the failed disk's backups from backlogs over up to 3 rounds, cutting
/// reads between rounds, and the clients, 2 rounds ahead from their first
/// byte, neither stall nor get a wrong byte (parts joined, their checksums
/// checked across the cut).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_window_absorbs_the_same_failure_without_a_stall() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let config = ServerConfig {
        backup_window_rounds: 3,
        ..test_config()
    };
    let run = failure_run_with(Scheme::Minimum, 48, config).await;
    assert_absorbed(&run);
    assert!(
        run.window_recoveries > 0,
        "the failed disk's backups went through the backlogs: {run:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreserved_misses_deadlines_after_the_same_failure() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let run = failure_run(Scheme::Unreserved, 48).await;
    assert_eq!(
        run.misses_before_failure, 0,
        "no misses while every disk works: {run:?}"
    );
    assert!(
        run.misses > 0,
        "the rerouted reads do not fit unreserved disks: {run:?}"
    );
}

/// Two disks `(f1, f2)` such that, with both failed, every round of `title`
/// still has a working replica. Which pairs those are depends on the title's
/// start disk and on the placement's round-robin counter, so the test asks
/// the stored layout rather than assuming a pair.
fn disks_sparing(store: &Store, title: &rondo_store::TitleRecord) -> (u32, u32) {
    let stored = store.load_title(title.id).unwrap();
    (0u32..4)
        .flat_map(|f1| {
            (0u32..4)
                .filter(move |&f2| f2 != f1)
                .map(move |f2| (f1, f2))
        })
        .find(|&(f1, f2)| {
            let working = |d: u32| d != f1 && d != f2;
            stored
                .layout
                .rounds()
                .iter()
                .all(|r| working(r.primary_disk.0) || r.backups.iter().all(|b| working(b.disk.0)))
        })
        .expect("a short title survives some pair of failures")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_failure_stops_only_streams_whose_data_is_gone() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let tmp = tempfile::tempdir().unwrap();
    let media = make_long_media(tmp.path());
    let short = make_media(tmp.path(), "short", MediaKind::Ts, 2);
    let store = build_store(&tmp.path().join("data"), &media, Scheme::Minimum, 4);
    let short = ingest(&store, &short, "short");
    let (first, second) = disks_sparing(&store, &short);
    let titles = store.titles().unwrap();
    let server = start(store, test_config()).await;
    let url = server.url();
    let token = server.token().to_string();
    let http = reqwest::Client::new();

    // Control endpoints refuse requests without the right token.
    for (path, body) in [
        ("fail", None),
        ("replace", Some(serde_json::json!({"path": "x.dev"}))),
        ("restore", None),
    ] {
        for bad in [None, Some("not-the-token")] {
            let (status, answer) = admin_post(
                &http,
                &format!("{url}/api/admin/disks/1/{path}"),
                bad,
                body.clone(),
            )
            .await;
            assert_eq!(status, 401, "{path} {bad:?}: {answer}");
        }
    }
    let disks = get_json(&http, &format!("{url}/api/disks")).await;
    assert!(
        disks["disks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["state"] == "healthy"),
        "nothing failed without the token: {disks}"
    );
    let (status, _) = admin_post(
        &http,
        &format!("{url}/api/admin/disks/4/fail"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, 404, "there is no disk 4");

    let long: Vec<_> = titles
        .iter()
        .filter(|t| t.name.starts_with("long"))
        .collect();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let title = long[i % long.len()];
        tasks.push(tokio::spawn(play(
            http.clone(),
            format!("{url}/stream/{}.ts", title.id.0),
            title.client_bytes.clone(),
        )));
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    let fail = |disk: u32| {
        let http = http.clone();
        let url = format!("{url}/api/admin/disks/{disk}/fail");
        let token = token.clone();
        async move { admin_post(&http, &url, Some(&token), None).await }
    };
    let (status, answer) = fail(first).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["streams_stopped"].as_array().unwrap().is_empty());
    let (status, again) = fail(first).await;
    assert_eq!(status, 409, "failing a failed disk: {again}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (status, answer) = fail(second).await;
    assert_eq!(status, 200, "{answer}");
    let stopped = answer["streams_stopped"].as_array().unwrap().len();
    assert!(stopped > 0, "long streams lost data: {answer}");

    // The server still admits and plays what has a working replica.
    let short_url = format!("{url}/stream/{}.ts", short.id.0);
    let after = play(http.clone(), short_url, short.client_bytes.clone()).await;
    assert_eq!(after.status, 200, "{after:?}");
    assert!(
        !after.broken && after.received_bytes == after.expected_bytes,
        "{after:?}"
    );
    let mut broken = 0;
    for task in tasks {
        let r = task.await.unwrap();
        assert_eq!(r.status, 200, "{r:?}");
        if r.broken {
            broken += 1;
            assert!(r.received_bytes < r.expected_bytes, "{r:?}");
        } else {
            assert_eq!(r.received_bytes, r.expected_bytes, "{r:?}");
        }
    }
    assert_eq!(broken, stopped, "exactly the stopped streams broke");
    let metrics = server.metrics();
    assert_eq!(metrics.streams_aborted as usize, stopped);
    let disks = get_json(&http, &format!("{url}/api/disks")).await;
    assert_eq!(disks["disks"][first as usize]["state"], "failed");
    assert_eq!(disks["disks"][second as usize]["state"], "failed");
    // With two disks failed a rebuild cannot restore every extent, but it
    // is not refused (an operator must always be able to bring a disk
    // back): the copies with no good source are named lost, the rest is
    // rebuilt.
    let (status, answer) = admin_post(
        &http,
        &format!("{url}/api/admin/disks/{first}/restore"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["lost_copies"].as_u64().unwrap() > 0, "{answer}");
    assert!(
        answer["lost_copies"].as_u64() < answer["copies"].as_u64(),
        "{answer}"
    );
    assert!(
        answer["warning"]
            .as_str()
            .is_some_and(|w| w.contains("no good replica")),
        "{answer}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_disk_is_rebuilt_byte_for_byte_while_streams_play() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let media = make_long_media(tmp.path());
    let store = build_store(&dir, &media, Scheme::Minimum, 4);
    let titles = store.titles().unwrap();
    let server = start(store, test_config()).await;
    let url = server.url();
    let token = server.token().to_string();
    let http = reqwest::Client::new();
    let mut tasks = Vec::new();
    for i in 0..12 {
        let title = &titles[i % titles.len()];
        tasks.push(tokio::spawn(play(
            http.clone(),
            format!("{url}/stream/{}.ts", title.id.0),
            title.client_bytes.clone(),
        )));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let admin = |path: String, body: Option<serde_json::Value>| {
        let http = http.clone();
        let url = format!("{url}/api/admin/disks/{path}");
        let token = token.clone();
        async move { admin_post(&http, &url, Some(&token), body).await }
    };
    let new_device = tmp.path().join("new-2.dev");
    let body = serde_json::json!({ "path": new_device });
    let (status, answer) = admin("0/replace".into(), Some(body.clone())).await;
    assert_eq!(status, 409, "a serving disk is not replaced: {answer}");
    let (status, answer) = admin("2/fail".into(), None).await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = admin("2/replace".into(), Some(body)).await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = admin("2/restore".into(), None).await;
    assert_eq!(status, 200, "{answer}");
    let total_bytes = answer["total_bytes"].as_u64().unwrap();
    assert!(total_bytes > 0);
    let (status, _) = admin("2/restore".into(), None).await;
    assert_eq!(status, 409, "one rebuild at a time");

    // Progress while it runs, then the disk serves again.
    let started = Instant::now();
    let mut seen_progress = false;
    let summary = loop {
        let disks = get_json(&http, &format!("{url}/api/disks")).await;
        if disks["rebuild"].is_object() {
            assert_eq!(disks["disks"][2]["state"], "rebuilding", "{disks}");
            let r = &disks["rebuild"];
            assert_eq!(r["total_bytes"], total_bytes);
            let done = r["done_bytes"].as_u64().unwrap();
            assert!(done <= total_bytes);
            if done > 0 && done < total_bytes {
                // An estimate of the time left once a copy is done.
                assert!(r["eta_seconds"].as_f64().unwrap() > 0.0, "{r}");
                assert!(r["rate_bytes_per_s"].as_f64().unwrap() > 0.0, "{r}");
            }
            seen_progress = true;
        }
        if disks["disks"][2]["state"] == "healthy" {
            break disks["last_rebuild"].clone();
        }
        assert!(started.elapsed() < Duration::from_secs(40), "{disks}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(seen_progress);
    assert_eq!(summary["restored"], true, "{summary}");
    assert_eq!(summary["bytes"], total_bytes);
    eprintln!("rebuild: {summary}");
    for task in tasks {
        let r = task.await.unwrap();
        assert_eq!(r.status, 200, "{r:?}");
        assert!(!r.broken && r.received_bytes == r.expected_bytes, "{r:?}");
        assert_eq!(r.stalls, 0, "{r:?}");
    }
    let metrics = server.metrics();
    assert_eq!(metrics.stream_round_misses, 0);
    // The copies went through the emulated disks' models (every rebuilt
    // byte written by disk 2's), and no disk-round was busier than its
    // streams' reservation plus what the rebuild was granted.
    assert_eq!(metrics.disks[2].granted_bytes, total_bytes);
    for d in &metrics.disks {
        assert_eq!(d.rounds_model_over_reserved, 0, "{d:?}");
        assert_eq!(d.rounds_over_reserved, 0, "{d:?}");
    }
    // After the rebuild disk 2 serves reads again.
    let reads_before = metrics.disks[2].reads;
    let title = &titles[0];
    let again = play(
        http.clone(),
        format!("{url}/stream/{}.ts", title.id.0),
        title.client_bytes.clone(),
    )
    .await;
    assert!(!again.broken && again.received_bytes == again.expected_bytes);
    assert!(server.metrics().disks[2].reads > reads_before);
    server.shutdown().await;

    // Every extent verifies (fsck), and the rebuilt disk's extents hold the
    // same bytes as the other replica.
    let report = rondo_store::fsck(&dir);
    assert!(report.passed(), "{report}");
    let store = Store::open(&dir).unwrap();
    assert_eq!(store.device(DiskIndex(2)).path(), new_device);
    assert!(assert_replicas_agree_on(&store, &titles, DiskIndex(2)) > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_disk_stays_failed_across_a_restart_until_rebuilt() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let media = make_long_media(tmp.path());
    let store = build_store(&dir, &media, Scheme::Minimum, 2);
    let titles = store.titles().unwrap();
    let server = start(store, test_config()).await;
    let (url, token) = (server.url(), server.token().to_string());
    let http = reqwest::Client::new();
    let new_device = tmp.path().join("new-1.dev");
    let (status, answer) = admin_post(
        &http,
        &format!("{url}/api/admin/disks/1/fail"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    // Replaced by an empty device, and stopped before any rebuild.
    let body = serde_json::json!({ "path": new_device });
    let (status, answer) = admin_post(
        &http,
        &format!("{url}/api/admin/disks/1/replace"),
        Some(&token),
        Some(body),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    // Outside the data directory: accepted, and said so.
    assert_eq!(answer["outside_data_dir"], true, "{answer}");
    assert!(
        answer["warning"]
            .as_str()
            .is_some_and(|w| w.contains("outside the data directory")),
        "{answer}"
    );
    server.shutdown().await;

    let report = rondo_store::fsck(&dir);
    assert!(report.passed(), "{report}");
    assert_eq!(report.failed_disks, vec![DiskIndex(1)], "{report}");

    // After the restart disk 1 is still failed: streams play from the
    // backups without a miss and nothing reads the unrebuilt device.
    let server = start(Store::open(&dir).unwrap(), test_config()).await;
    let url = server.url();
    let token = server.token().to_string();
    let disks = get_json(&http, &format!("{url}/api/disks")).await;
    assert_eq!(disks["disks"][1]["state"], "failed", "{disks}");
    let mut tasks = Vec::new();
    for i in 0..4 {
        let title = &titles[i % titles.len()];
        tasks.push(tokio::spawn(play(
            http.clone(),
            format!("{url}/stream/{}.ts", title.id.0),
            title.client_bytes.clone(),
        )));
    }
    for task in tasks {
        let r = task.await.unwrap();
        assert_eq!(r.status, 200, "{r:?}");
        assert!(!r.broken && r.received_bytes == r.expected_bytes, "{r:?}");
        assert_eq!(r.stalls, 0, "{r:?}");
    }
    let metrics = server.metrics();
    assert_eq!(metrics.stream_round_misses, 0);
    assert_eq!(metrics.disks[1].reads, 0, "the failed disk is not read");
    assert_eq!(metrics.read_errors, 0);

    // Restored: serving, and it stays so across the next restart.
    let (status, answer) = admin_post(
        &http,
        &format!("{url}/api/admin/disks/1/restore"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let started = Instant::now();
    loop {
        let disks = get_json(&http, &format!("{url}/api/disks")).await;
        if disks["disks"][1]["state"] == "healthy" {
            assert_eq!(disks["last_rebuild"]["restored"], true, "{disks}");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{disks}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    server.shutdown().await;
    let report = rondo_store::fsck(&dir);
    assert!(
        report.passed() && report.failed_disks.is_empty(),
        "{report}"
    );
    let server = start(Store::open(&dir).unwrap(), test_config()).await;
    let disks = get_json(&http, &format!("{}/api/disks", server.url())).await;
    assert_eq!(disks["disks"][1]["state"], "healthy", "{disks}");
    server.shutdown().await;
}

/// Plays every title twice at once; asserts each play is whole with no
/// stall and no deadline miss.
async fn play_all(server: &rondo_server::RunningServer, titles: &[rondo_store::TitleRecord]) {
    let http = reqwest::Client::new();
    let url = server.url();
    let mut tasks = Vec::new();
    for i in 0..titles.len() * 2 {
        let title = &titles[i % titles.len()];
        tasks.push(tokio::spawn(play(
            http.clone(),
            format!("{url}/stream/{}.ts", title.id.0),
            title.client_bytes.clone(),
        )));
    }
    for task in tasks {
        let r = task.await.unwrap();
        assert_eq!(r.status, 200, "{r:?}");
        assert!(!r.broken && r.received_bytes == r.expected_bytes, "{r:?}");
        assert_eq!(r.stalls, 0, "{r:?}");
    }
    assert_eq!(server.metrics().stream_round_misses, 0);
}

/// Fails disk `disk` through the admin API, then plays every title again
/// as [`play_all`] does: whole, paced, no stall, no deadline missed.
async fn fail_and_play_all(
    server: &rondo_server::RunningServer,
    disk: u32,
    titles: &[rondo_store::TitleRecord],
) {
    let http = reqwest::Client::new();
    let (status, answer) = admin_post(
        &http,
        &format!("{}/api/admin/disks/{disk}/fail", server.url()),
        Some(server.token()),
        None,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    play_all(server, titles).await;
}

/// Waits until disk `disk` is healthy again after a restore.
async fn wait_restored(http: &reqwest::Client, url: &str, disk: usize) {
    let started = Instant::now();
    loop {
        let disks = get_json(http, &format!("{url}/api/disks")).await;
        if disks["disks"][disk]["state"] == "healthy" {
            assert_eq!(disks["last_rebuild"]["restored"], true, "{disks}");
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(90), "{disks}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The dead-disk start: one device deleted, `serve` starts
/// degraded with that disk failed (recorded), plays every title from the
/// replicas without a stall, and a replace + restore brings the disk back,
/// also across a restart in the middle of the rebuild.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_starts_degraded_without_a_device_and_replace_restore_bring_it_back() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let media = make_long_media(tmp.path());
    let store = build_store(&dir, &media, Scheme::Minimum, 3);
    let titles = store.titles().unwrap();
    drop(store);
    std::fs::remove_file(dir.join("disk-1.dev")).unwrap();

    let server = start(Store::open(&dir).unwrap(), test_config()).await;
    let (url, token) = (server.url(), server.token().to_string());
    let http = reqwest::Client::new();
    let disks = get_json(&http, &format!("{url}/api/disks")).await;
    assert_eq!(disks["disks"][1]["state"], "failed", "{disks}");
    let states = std::fs::read_to_string(dir.join("disk-state.toml")).unwrap();
    assert!(
        states.contains("[failed.1]") && states.contains("missing"),
        "{states}"
    );
    play_all(&server, &titles).await;
    assert_eq!(
        server.metrics().disks[1].reads,
        0,
        "the missing disk is not read"
    );
    assert_eq!(server.metrics().read_errors, 0);

    // A new device at the same path (inside the data directory), then the
    // rebuild, stopped in its middle.
    let admin = |path: String, body: Option<serde_json::Value>| {
        let http = http.clone();
        let url = format!("{url}/api/admin/disks/{path}");
        let token = token.clone();
        async move { admin_post(&http, &url, Some(&token), body).await }
    };
    let body = serde_json::json!({ "path": "disk-1.dev" });
    let (status, answer) = admin("1/replace".into(), Some(body)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outside_data_dir"], false, "{answer}");
    let (status, answer) = admin("1/restore".into(), None).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["lost_copies"], 0, "{answer}");
    let disks = get_json(&http, &format!("{url}/api/disks")).await;
    assert_eq!(
        disks["disks"][1]["state"], "rebuilding",
        "mid-rebuild: {disks}"
    );
    server.shutdown().await;
    let report = rondo_store::fsck(&dir);
    assert_eq!(report.failed_disks, vec![DiskIndex(1)], "{report}");

    // After the restart the disk is failed still (its device half rebuilt),
    // the titles play, and a restore completes.
    let server = start(Store::open(&dir).unwrap(), test_config()).await;
    let (url, token) = (server.url(), server.token().to_string());
    let disks = get_json(&http, &format!("{url}/api/disks")).await;
    assert_eq!(disks["disks"][1]["state"], "failed", "{disks}");
    play_all(&server, &titles).await;
    let (status, answer) = admin_post(
        &http,
        &format!("{url}/api/admin/disks/1/restore"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    wait_restored(&http, &url, 1).await;
    let reads_before = server.metrics().disks[1].reads;
    play_all(&server, &titles).await;
    assert!(
        server.metrics().disks[1].reads > reads_before,
        "disk 1 serves again"
    );
    server.shutdown().await;
    let report = rondo_store::fsck(&dir);
    assert!(
        report.passed() && report.failed_disks.is_empty(),
        "{report}"
    );
    let store = Store::open(&dir).unwrap();
    assert!(store.unavailable_disks().is_empty());
    assert!(assert_replicas_agree_on(&store, &titles, DiskIndex(1)) > 0);
}

/// Flips `bytes` bytes at `device_offset_bytes` of disk `disk`'s stride area.
fn corrupt(dir: &Path, disk: DiskIndex, device_offset_bytes: u64, bytes: usize) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join(format!("disk-{disk}.dev")))
        .unwrap();
    let at = rondo_store::HEADER_REGION_BYTES + device_offset_bytes;
    let mut buf = vec![0u8; bytes];
    file.read_exact_at(&mut buf, at).unwrap();
    for b in &mut buf {
        *b ^= 0x5a;
    }
    file.write_all_at(&buf, at).unwrap();
    file.sync_all().unwrap();
}

/// The two-corruption scenario: 100 bytes corrupted in one extent
/// on each of two disks, the title played three times by anonymous
/// clients. Each bad extent is a fault of that extent: served from the
/// replica, repaired in the background, and no disk fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_corrupt_extents_on_two_disks_are_repaired_and_no_disk_fails() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let media = make_media(tmp.path(), "clip", MediaKind::Ts, 6);
    let store = create_store_with_scheme(&dir, Scheme::Minimum);
    let record = ingest(&store, &media, "clip");
    let other = ingest(&store, &media, "other");
    let expected = stored_stream(&store, &record);
    let expected_other = stored_stream(&store, &other);
    // Rounds 1 and 2 have their primaries on two different disks.
    let title = store.load_title(record.id).unwrap();
    let rounds = title.layout.rounds();
    let (a, b) = (&rounds[1], &rounds[2]);
    assert_ne!(a.primary_disk, b.primary_disk);
    assert!(!a.primary.is_empty() && !b.primary.is_empty());
    corrupt(
        &dir,
        a.primary_disk,
        a.primary.as_slice()[0].device_offset_bytes,
        100,
    );
    corrupt(
        &dir,
        b.primary_disk,
        b.primary.as_slice()[0].device_offset_bytes,
        100,
    );
    let server = start(store, test_config()).await;
    let url = server.url();
    let http = reqwest::Client::new();
    let fetch = |id: u64| {
        let http = http.clone();
        let url = format!("{url}/stream/{id}.ts");
        async move {
            let (status, _, body, _) = get_timed(&http, &url, None).await;
            assert_eq!(status, 200);
            body
        }
    };
    // Three plays, the first two at once (both may read the bad extents).
    let (p1, p2) = tokio::join!(fetch(record.id.0), fetch(record.id.0));
    assert!(p1 == expected && p2 == expected, "byte-identical");
    assert!(fetch(record.id.0).await == expected);
    assert!(fetch(other.id.0).await == expected_other);
    let repaired = eventually(Duration::from_secs(10), || {
        server.metrics().extents_repaired == 2
    })
    .await;
    let metrics = server.metrics();
    assert!(repaired, "{metrics:?}");
    assert_eq!(
        metrics.extents_bad, 2,
        "each bad extent counted once: {metrics:?}"
    );
    assert!(metrics.read_errors >= 2, "{metrics:?}");
    assert_eq!(metrics.streams_aborted, 0);
    assert_eq!(metrics.rounds_lost, 0);
    let disks = get_json(&http, &format!("{url}/api/disks")).await;
    for d in disks["disks"].as_array().unwrap() {
        assert_eq!(d["serving"], true, "no disk failed: {disks}");
    }
    // Repaired on the device: plays read the primaries without an error.
    let errors = server.metrics().read_errors;
    assert!(fetch(record.id.0).await == expected);
    assert_eq!(
        server.metrics().read_errors,
        errors,
        "the extents are good again"
    );
    let prometheus = rondo_testkit::http::get_text(&http, &format!("{url}/metrics")).await;
    assert!(
        prometheus.contains("rondo_extents_repaired_total 2"),
        "{prometheus}"
    );
    server.shutdown().await;
    // Nothing to hand-edit: no failed disk recorded, every checksum good.
    let report = rondo_store::fsck(&dir);
    assert!(
        report.passed() && report.failed_disks.is_empty(),
        "{report}"
    );
}

/// Reads `url` (with `range`), tolerating a body the server breaks off:
/// status, the JSON error body for a refusal, and the bytes received.
async fn get_tolerant(
    http: &reqwest::Client,
    url: &str,
    range: Option<&str>,
) -> (u16, Vec<u8>, bool) {
    let mut request = http.get(url);
    if let Some(range) = range {
        request = request.header(reqwest::header::RANGE, range);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let mut body = Vec::new();
    let mut broken = false;
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(chunk) => body.extend_from_slice(&chunk),
            Err(_) => {
                broken = true;
                break;
            }
        }
    }
    (status, body, broken)
}

/// Both replicas of one round corrupt: that round is lost, and only that
/// title's streams that reach it are affected. The stream playing it stops
/// there; later requests that would reach it are refused at once with a
/// clear error that says how much still plays (and a range before it
/// plays); the other title and every disk serve on; and the loss is kept
/// across a restart (`extent-faults.toml`), so the next server refuses
/// without reading the bad extents again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_with_both_replicas_corrupt_fails_only_that_title_from_there_and_is_kept_across_a_restart()
 {
    let _serial = SERIAL.lock().await;
    init_logs();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let media = make_media(tmp.path(), "clip", MediaKind::Ts, 6);
    let store = create_store_with_scheme(&dir, Scheme::Minimum);
    let record = ingest(&store, &media, "clip");
    let other = ingest(&store, &media, "other");
    let expected = stored_stream(&store, &record);
    let expected_other = stored_stream(&store, &other);
    let title = store.load_title(record.id).unwrap();
    let lost_round = 2;
    let round = &title.layout.rounds()[lost_round];
    assert!(!round.primary.is_empty() && !round.backups.is_empty());
    for e in round.primary.as_slice() {
        corrupt(&dir, round.primary_disk, e.device_offset_bytes, 100);
    }
    for piece in &round.backups {
        for e in piece.extents.as_slice() {
            corrupt(&dir, piece.disk, e.device_offset_bytes, 100);
        }
    }
    let lost_start: u64 = record.client_bytes[..lost_round].iter().sum();
    drop(title);

    let server = start(store, test_config()).await;
    let url = server.url();
    let http = reqwest::Client::new();
    let stream_url = format!("{url}/stream/{}.ts", record.id.0);
    // The first play finds the loss: it stops at the lost round, with the
    // bytes before it intact.
    let (status, body, broken) = get_tolerant(&http, &stream_url, None).await;
    assert_eq!(status, 200);
    assert!(broken, "the stream stops at the lost round");
    assert!(body.len() as u64 <= lost_start, "{} bytes", body.len());
    assert_eq!(body[..], expected[..body.len()]);
    let metrics = server.metrics();
    assert_eq!(metrics.rounds_lost, 1, "{metrics:?}");
    assert_eq!(metrics.stream_round_misses, 0, "{metrics:?}");

    // Then: refused at once, saying which round and how much plays.
    let (status, body, _) = get_tolerant(&http, &stream_url, None).await;
    assert_eq!(status, 500);
    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["reason"], "data_lost", "{answer}");
    assert_eq!(answer["playback_round"], lost_round, "{answer}");
    assert_eq!(answer["playable_bytes"], lost_start, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("no good replica"),
        "{answer}"
    );
    // A range that ends before the lost round plays, byte-identical.
    let range = format!("bytes=0-{}", lost_start - 1);
    let (status, body, broken) = get_tolerant(&http, &stream_url, Some(&range)).await;
    assert_eq!((status, broken), (206, false));
    assert!(body == expected[..lost_start as usize]);
    // The other title plays whole; every disk serves.
    let (status, body, broken) =
        get_tolerant(&http, &format!("{url}/stream/{}.ts", other.id.0), None).await;
    assert_eq!((status, broken), (200, false));
    assert!(body == expected_other);
    let disks = get_json(&http, &format!("{url}/api/disks")).await;
    for d in disks["disks"].as_array().unwrap() {
        assert_eq!(d["serving"], true, "no disk failed: {disks}");
    }
    let listed = get_json(&http, &format!("{url}/api/titles/{}", record.id.0)).await;
    assert_eq!(
        listed["lost_rounds"],
        serde_json::json!([lost_round]),
        "{listed}"
    );
    assert_eq!(listed["playable_bytes"], lost_start, "{listed}");
    let listed = get_json(&http, &format!("{url}/api/titles/{}", other.id.0)).await;
    assert_eq!(listed["lost_rounds"], serde_json::json!([]), "{listed}");
    server.shutdown().await;

    // Kept across the restart: refused before any read.
    let kept = std::fs::read_to_string(dir.join(rondo_store::EXTENT_FAULTS_FILE)).unwrap();
    assert!(kept.contains("[[lost]]"), "{kept}");
    let server = start(Store::open(&dir).unwrap(), test_config()).await;
    let url = server.url();
    let (status, body, _) =
        get_tolerant(&http, &format!("{url}/stream/{}.ts", record.id.0), None).await;
    assert_eq!(status, 500, "{}", String::from_utf8_lossy(&body));
    let metrics = server.metrics();
    assert_eq!(metrics.read_errors, 0, "not read again: {metrics:?}");
    assert_eq!(metrics.rounds_lost, 1, "{metrics:?}");
    let listed = get_json(&http, &format!("{url}/api/titles/{}", record.id.0)).await;
    assert_eq!(
        listed["lost_rounds"],
        serde_json::json!([lost_round]),
        "{listed}"
    );
    server.shutdown().await;
}

/// A `segments` data directory (runs of 3 rounds contiguous on one disk)
/// serves its titles whole and on schedule, and through a disk failure under
/// `minimum` with no stall and no deadline miss: admission, the backups
/// and failure handling are the same code as for variable-grain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segments_directory_plays_whole_and_through_a_disk_failure() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let media = make_media(tmp.path(), "clip", MediaKind::Ts, 8);
    let config = rondo_store::StoreConfig {
        round_duration_ns: TEST_ROUND_DURATION_NS,
        segment_rounds: 3,
        ..rondo_server::titles::default_store_config()
    };
    let store = Store::create(&dir, config).unwrap();
    let record = ingest(&store, &media, "clip");
    let title = store.load_title(record.id).unwrap();
    let disks: Vec<u32> = title
        .layout
        .rounds()
        .iter()
        .map(|r| r.primary_disk.0)
        .collect();
    assert_eq!(disks[0], disks[1], "{disks:?}");
    assert_eq!(disks[1], disks[2], "{disks:?}");
    assert_ne!(disks[2], disks[3], "{disks:?}");
    let failed = disks[0];
    drop(title);
    let titles = store.titles().unwrap();
    let server = start(store, test_config()).await;
    play_all(&server, &titles).await;
    fail_and_play_all(&server, failed, &titles).await;
    server.shutdown().await;
}

/// Seed 003's GPMP in the server: a `segments` directory (runs of 6
/// rounds) whose streams read 3 rounds per request (`read_group_rounds`),
/// held in host memory until sent. Every title plays whole and on
/// schedule with no stall and no deadline miss, ffprobe reads every frame
/// over HTTP, and so it goes on through a disk failure under `minimum`
/// (the groups then read from their backups).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpmp_on_a_segments_directory_plays_whole_and_through_a_disk_failure() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let tmp = tempfile::tempdir().unwrap();
    let config = rondo_server::ServerConfig {
        read_group_rounds: 3,
        ..test_config()
    };
    let (server, failed, titles) = segments_clip_served(tmp.path(), 6, config).await;
    fail_and_play_all(&server, failed, &titles).await;
    server.shutdown().await;
}

/// Serves a 14-round MPEG-TS clip from a new `segments` directory (runs of
/// `segment_rounds`) under `config`, plays every title whole and checks
/// that ffprobe reads every frame over HTTP; returns the server, the disk
/// of the clip's first round and the titles.
async fn segments_clip_served(
    tmp: &Path,
    segment_rounds: u32,
    config: rondo_server::ServerConfig,
) -> (
    rondo_server::RunningServer,
    u32,
    Vec<rondo_store::TitleRecord>,
) {
    let media = make_media(tmp, "clip", MediaKind::Ts, 14);
    let store_config = rondo_store::StoreConfig {
        round_duration_ns: TEST_ROUND_DURATION_NS,
        segment_rounds,
        ..rondo_server::titles::default_store_config()
    };
    let store = Store::create(tmp.join("data"), store_config).unwrap();
    let record = ingest(&store, &media, "clip");
    let failed = store.load_title(record.id).unwrap().layout.rounds()[0]
        .primary_disk
        .0;
    let titles = store.titles().unwrap();
    let server = start(store, config).await;
    play_all(&server, &titles).await;
    let url = format!("{}/stream/{}.ts", server.url(), record.id.0);
    let source = media.to_str().unwrap().to_string();
    let (over_http, from_file) = tokio::task::spawn_blocking(move || {
        (
            rondo_testkit::media::ffprobe_frames(&url),
            rondo_testkit::media::ffprobe_frames(&source),
        )
    })
    .await
    .unwrap();
    assert_eq!(over_http, from_file);
    (server, failed, titles)
}

/// Seed 004's dynamic cycle in the server: a `segments` directory (runs of
/// 8 rounds) with thresholds at 0, so that CheckSchedule acts every cycle
/// with even one stream (combining, doubling the cycle). Every title plays
/// whole and on schedule with no stall and no deadline miss, ffprobe reads
/// every frame over HTTP, `/metrics` shows the cycle and its operations,
/// and so it goes on through a disk failure under `minimum`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamic_cycle_on_a_segments_directory_plays_whole_and_through_a_disk_failure() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let tmp = tempfile::tempdir().unwrap();
    let mut cycle = rondo_model::array::DynamicCycle::new(8);
    cycle.combination.memory_threshold_permille = 0;
    cycle.combination.time_threshold_permille = 0;
    cycle.combination.difference_threshold_permille = 0;
    let config = rondo_server::ServerConfig {
        cycle: Some(cycle),
        ..test_config()
    };
    let (server, failed, titles) = segments_clip_served(tmp.path(), 8, config).await;
    let status = server.metrics().cycle.expect("a dynamic cycle");
    assert!(
        status.combines + status.doubles > 0,
        "the cycle changed: {status:?}"
    );
    let text = reqwest::get(format!("{}/metrics", server.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("rondo_cycle_seconds "), "{text}");
    assert!(
        text.contains("rondo_cycle_operations_total{op=\"combine\"}"),
        "{text}"
    );
    fail_and_play_all(&server, failed, &titles).await;
    assert_eq!(server.metrics().stream_round_misses, 0);
    server.shutdown().await;
}

/// `read_group_rounds` above 1 needs the segments layout: refused, with
/// what to do, on a variable-grain directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpmp_refuses_a_variable_grain_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let store = create_store(&tmp.path().join("data"));
    let err = rondo_server::RunningServer::start(
        store,
        rondo_server::ServerConfig {
            read_group_rounds: 3,
            ..test_config()
        },
    )
    .await
    .err()
    .expect("refused");
    assert!(err.to_string().contains("segments layout"), "{err}");
}

/// Seed 003's Gradual Prefetching in the server, on emulated disks whose
/// model has seed 003's drive cache and command queueing
/// (`seed003-table1-c8-s8-q`, hits sent while the heads work): every other
/// stream reads in drive-cache pairs, the disk model serves their second
/// reads from the cache (counted in the metrics), and every client plays
/// whole with 0 stalls and no deadline missed, also after a disk failure.
/// Natively timed disks are refused (a real drive's cache cannot be told to
/// hold a block).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gradual_prefetching_reads_from_the_drive_cache_and_plays_whole() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let media = make_media(tmp.path(), "clip", MediaKind::Ts, 14);
    let config = rondo_store::StoreConfig {
        round_duration_ns: TEST_ROUND_DURATION_NS,
        segment_rounds: 6,
        disk_profile: "seed003-table1-c8-s8-q".into(),
        ..rondo_server::titles::default_store_config()
    };
    let store = Store::create(&dir, config).unwrap();
    let record = ingest(&store, &media, "clip");
    let failed = store.load_title(record.id).unwrap().layout.rounds()[0]
        .primary_disk
        .0;
    let titles = store.titles().unwrap();
    let server_config = rondo_server::ServerConfig {
        drive_prefetch: rondo_model::array::DrivePrefetch::Gradual,
        ..test_config()
    };
    let server = start(store, server_config.clone()).await;
    play_all(&server, &titles).await;
    let hits: u64 = server.metrics().disks.iter().map(|d| d.cache_hits).sum();
    assert!(hits > 0, "no read was served from the drive cache");
    fail_and_play_all(&server, failed, &titles).await;
    server.shutdown().await;
    let store = Store::open(&dir).unwrap();
    let err = rondo_server::RunningServer::start(
        store,
        rondo_server::ServerConfig {
            disk_timing: rondo_server::DiskTiming::Native,
            ..server_config
        },
    )
    .await
    .err()
    .expect("refused");
    assert!(err.to_string().contains("timed natively"), "{err}");
}
