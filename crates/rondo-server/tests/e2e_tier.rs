//! End to end with a tier (seed 002): titles whose home is an emulated
//! optical jukebox are staged onto the array when a client asks for them,
//! with the delay the model predicts told as Retry-After; an unreadable tier
//! object is a clear error while the array's titles keep playing; the array
//! evicts the least requested staged title, never a pinned one, when it
//! needs room.

mod e2e_support;

use std::time::{Duration, Instant};

use e2e_support::*;
use rondo_store::{Store, StoreConfig};
use serde_json::Value;

/// GET `url` as JSON.
async fn json(client: &reqwest::Client, url: &str) -> Value {
    client.get(url).send().await.unwrap().json().await.unwrap()
}

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Asks for `/tier/NAME` until it redirects; returns (first answer's JSON,
/// its Retry-After, seconds until the redirect, the redirect's location).
async fn stage(client: &reqwest::Client, url: &str, name: &str) -> (Value, u64, f64, String) {
    let started = Instant::now();
    let first = client
        .get(format!("{url}/tier/{name}"))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 503, "staging starts with a 503");
    let retry_after: u64 = first.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let body: Value = first.json().await.unwrap();
    loop {
        tokio::time::sleep(Duration::from_millis(25)).await;
        let r = client
            .get(format!("{url}/tier/{name}"))
            .send()
            .await
            .unwrap();
        match r.status().as_u16() {
            503 => assert!(
                started.elapsed() < Duration::from_secs(60),
                "still staging after 60 s"
            ),
            307 => {
                let location = r.headers()["location"].to_str().unwrap().to_string();
                return (body, retry_after, started.elapsed().as_secs_f64(), location);
            }
            other => panic!("{other}: {}", r.text().await.unwrap()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_jukebox_title_is_staged_when_asked_for_within_its_predicted_delay_and_plays_whole() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let store = create_store(&data);
    add_jukebox(&data, 0);
    let clip = make_media(dir.path(), "clip", MediaKind::Mp4Faststart, 20);
    let resident = make_media(dir.path(), "resident", MediaKind::Mp4Faststart, 12);
    to_tier(&store, &data, &clip, "from-the-vault");
    let resident = ingest(&store, &resident, "resident");
    let server = start(store, test_config()).await;
    let url = server.url();
    let client = no_redirects();

    let titles: Value = json(&client, &format!("{url}/api/titles")).await;
    let entry = titles
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "from-the-vault")
        .unwrap_or_else(|| panic!("{titles}"));
    assert_eq!(entry["staged"], false, "{entry}");
    assert_eq!(entry["home"], "vault");
    assert!(
        entry["stream_url"]
            .as_str()
            .unwrap()
            .ends_with("/tier/from-the-vault")
    );

    // A resident title plays while the other one stages.
    let playing = {
        let client = reqwest::Client::new();
        let url = format!("{url}/stream/{}.mp4", resident.id.0);
        tokio::spawn(async move { client.get(url).send().await.unwrap().bytes().await.unwrap() })
    };
    let (body, retry_after, delay_s, location) = stage(&client, &url, "from-the-vault").await;
    assert_eq!(body["reason"], "staging", "{body}");
    let predicted_s = body["staging"]["predicted_seconds"].as_f64().unwrap();
    let fetch_s = body["staging"]["predicted_fetch_seconds"].as_f64().unwrap();
    // The idle farm's T(SF) for this file, scaled: exchange, spin-up, seek,
    // rotation and the transfer at 3 MB/s.
    let size = std::fs::metadata(&clip).unwrap().len() as f64;
    let model_fetch_s = (8.7 + 8.6 + 0.1 + 0.006 + size / 3e6) * TIME_SCALE;
    assert!(
        (fetch_s - model_fetch_s).abs() < 0.01,
        "{fetch_s} vs {model_fetch_s}"
    );
    assert_eq!(retry_after, predicted_s.ceil() as u64);
    let error = delay_s / predicted_s - 1.0;
    eprintln!(
        "staged in {delay_s:.3} s against {predicted_s:.3} s predicted ({:+.1}%)",
        100.0 * error
    );
    assert!(
        error.abs() <= 0.10,
        "staged in {delay_s:.3} s, predicted {predicted_s:.3} s"
    );

    // Staged: the tier URL redirects to the title's stream, which plays the
    // file whole (a faststart MP4 is stored as it is).
    assert!(location.contains("/stream/"), "{location}");
    let played = reqwest::get(format!("{url}/tier/from-the-vault"))
        .await
        .unwrap();
    assert_eq!(played.status(), 200);
    let bytes = played.bytes().await.unwrap();
    assert_eq!(bytes.as_ref(), std::fs::read(&clip).unwrap().as_slice());
    let resident_bytes = playing.await.unwrap();
    assert_eq!(resident_bytes.len() as u64, resident.size_bytes);

    let tiers: Value = json(&client, &format!("{url}/api/tiers")).await;
    assert_eq!(tiers["staged_total"], 1, "{tiers}");
    assert_eq!(tiers["tiers"][0]["exchanges_total"], 1, "{tiers}");
    let metrics = client
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "rondo_staged_titles_total 1",
        "rondo_tier_exchanges_total{tier=\"vault\"} 1",
        "rondo_staging_jobs{phase=\"fetching\"} 0",
    ] {
        assert!(metrics.contains(line), "no {line:?} in /metrics");
    }
    // The dashboard's history carries the staging state.
    let history = client
        .get(format!("{url}/api/history"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(history.contains("\"staged_total\":1"), "{history}");
    let m = server.metrics();
    server.shutdown().await;
    assert_eq!(m.stream_round_misses, 0, "{m:?}");
    assert_eq!(m.disk_round_overruns, 0, "{m:?}");
    assert_eq!(m.streams_dropped_stalled, 0, "{m:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unreadable_tier_object_is_a_clear_error_and_the_array_keeps_playing() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let store = create_store(&data);
    add_jukebox(&data, 2);
    let clip = make_media(dir.path(), "clip", MediaKind::Mp4Faststart, 6);
    let resident = make_media(dir.path(), "resident", MediaKind::Mp4Faststart, 8);
    to_tier(&store, &data, &clip, "damaged");
    to_tier(&store, &data, &clip, "gone");
    let resident = ingest(&store, &resident, "resident");
    // Flip a byte of damaged's second extent file; remove gone's table.
    let vault = data.join("vault");
    let table: Value = serde_json::from_slice(
        &std::fs::read(vault.join(format!(
            "files/{}.json",
            rondo_server::ingest::tier_object_key("damaged")
        )))
        .unwrap(),
    )
    .unwrap();
    let extent = &table["extents"][1];
    let extent_path = vault
        .join(format!("j{}", extent["jukebox"]))
        .join(format!("d{}", extent["slot"]))
        .join(extent["file"].as_str().unwrap());
    let mut bytes = std::fs::read(&extent_path).unwrap();
    bytes[100] ^= 0x5a;
    std::fs::write(&extent_path, bytes).unwrap();
    std::fs::remove_file(vault.join(format!(
        "files/{}.json",
        rondo_server::ingest::tier_object_key("gone")
    )))
    .unwrap();
    let server = start(store, test_config()).await;
    let url = server.url();
    let client = no_redirects();
    let playing = {
        let url = format!("{url}/stream/{}.mp4", resident.id.0);
        tokio::spawn(async move { reqwest::get(url).await.unwrap().bytes().await.unwrap() })
    };
    for (name, says) in [("damaged", "fails its checksum"), ("gone", "no object")] {
        let first = client
            .get(format!("{url}/tier/{name}"))
            .send()
            .await
            .unwrap();
        assert_eq!(first.status(), 503);
        let answer = loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let r = client
                .get(format!("{url}/tier/{name}"))
                .send()
                .await
                .unwrap();
            if r.status() != 503 {
                break r;
            }
        };
        assert_eq!(answer.status(), 502, "{name}");
        let body: Value = answer.json().await.unwrap();
        let error = body["error"].as_str().unwrap();
        assert!(
            error.contains("tier vault") && error.contains(says),
            "{name}: {error}"
        );
        assert_eq!(body["reason"], "tier_object_unreadable");
    }
    let resident_bytes = playing.await.unwrap();
    assert_eq!(resident_bytes.len() as u64, resident.size_bytes);
    let m = server.metrics();
    server.shutdown().await;
    assert_eq!(m.stream_round_misses, 0, "{m:?}");
    assert_eq!(m.streams_completed, 1, "{m:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_array_evicts_the_least_requested_staged_title_and_never_a_pinned_one() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // Four disks of six 2 MiB strides: room for three of these titles
    // (each takes a stride per disk for its primary rounds and one for its
    // backups).
    let config = StoreConfig {
        round_duration_ns: TEST_ROUND_DURATION_NS,
        ..StoreConfig::new(4, "cheetah-4lp", 6 * 2 * 1024 * 1024)
    };
    let store = Store::create(&data, config).unwrap();
    add_jukebox(&data, 1);
    for name in ["a", "b", "p", "c"] {
        let clip = make_media(dir.path(), name, MediaKind::Mp4Faststart, 4);
        to_tier(&store, &data, &clip, name);
    }
    assert!(store.set_tier_pinned("p", true).unwrap());
    let server = start(store, test_config()).await;
    let url = server.url();
    let client = no_redirects();
    for name in ["a", "b", "p"] {
        stage(&client, &url, name).await;
    }
    let tiers: Value = json(&client, &format!("{url}/api/tiers")).await;
    assert_eq!(tiers["evictions_total"], 0, "three titles fit: {tiers}");
    // a is asked for twice more: b is now the least requested.
    for _ in 0..2 {
        let r = client.get(format!("{url}/tier/a")).send().await.unwrap();
        assert_eq!(r.status(), 307);
    }
    stage(&client, &url, "c").await;
    let titles: Value = json(&client, &format!("{url}/api/titles")).await;
    let staged = |name: &str| {
        titles
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["staged"] == true)
            .unwrap()
    };
    let tiers: Value = json(&client, &format!("{url}/api/tiers")).await;
    server.shutdown().await;
    assert!(tiers["evictions_total"].as_u64().unwrap() >= 1, "{tiers}");
    assert!(!staged("b"), "b (least requested) is evicted: {titles}");
    assert!(staged("p"), "p is pinned: {titles}");
    assert!(staged("c"), "{titles}");
}

/// The S3 tier against a real S3 server (s3s-fs over a directory, started
/// by the test): a title stored there is staged when asked for, within 10%
/// of the delay predicted from the store's measured throughput and the
/// array's write queue, and plays whole; a corrupt object is a clear 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_s3_title_is_staged_within_its_predicted_delay_and_a_corrupt_object_is_refused() {
    use rondo_testkit::s3::S3Server;
    use rondo_tier::{S3TierConfig, TierConfig, TierKind, TiersFile};
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let s3 = S3Server::start(&dir.path().join("s3"));
    let data = dir.path().join("data");
    let store = create_store(&data);
    let config = TierConfig {
        name: "cloud".into(),
        kind: TierKind::S3(S3TierConfig {
            endpoint: s3.endpoint.clone(),
            bucket: s3.bucket.clone(),
            region: "us-east-1".into(),
            access_key_id: s3.access_key_id.clone(),
            secret_access_key: s3.secret_access_key.clone(),
            allow_http: true,
            prefix: None,
        }),
    };
    TiersFile {
        tiers: vec![config.clone()],
    }
    .write(&data)
    .unwrap();
    // 90 s: several rounds of writes, so that the write bound's margin
    // over the emulated disks (the last round's worst case) is a small part
    // of the delay.
    let clip = make_media(dir.path(), "clip", MediaKind::Mp4Faststart, 90);
    {
        let tier = rondo_tier::open(&config, &data).unwrap();
        for name in ["from-s3", "rotten"] {
            let source = clip.file_name().unwrap().to_string_lossy().into_owned();
            rondo_server::ingest::ingest_to_tier(
                &store,
                tier.as_ref(),
                "cloud",
                &clip,
                &source,
                Some(name),
                0,
            )
            .unwrap();
        }
    }
    // Flip a byte of rotten's object behind the tier's back.
    let rotten = s3.object_file(&rondo_server::ingest::tier_object_key("rotten"));
    let mut bytes = std::fs::read(&rotten).unwrap();
    bytes[1000] ^= 0x01;
    std::fs::write(&rotten, bytes).unwrap();

    let server = start(store, test_config()).await;
    let url = server.url();
    let client = no_redirects();
    // Ask early in a round: a loopback fetch takes milliseconds, and one
    // that ended right at a boundary could be planned in either round (the
    // prediction's one-round uncertainty, which a real tier's seconds hide).
    let rounds = |m: &rondo_server::metrics::MetricsSnapshot| m.rounds;
    let seen = rounds(&server.metrics());
    while rounds(&server.metrics()) <= seen + 1 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (body, _, delay_s, _) = stage(&client, &url, "from-s3").await;
    let predicted_s = body["staging"]["predicted_seconds"].as_f64().unwrap();
    let error = delay_s / predicted_s - 1.0;
    let tiers: Value = json(&client, &format!("{url}/api/tiers")).await;
    eprintln!(
        "S3 staging: {delay_s:.3} s against {predicted_s:.3} s predicted ({:+.1}%); fetch {:.3} s \
         against {:.3} s predicted at {:.0} MB/s measured",
        100.0 * error,
        tiers["fetch_seconds_sum"].as_f64().unwrap(),
        tiers["predicted_fetch_seconds_sum"].as_f64().unwrap(),
        tiers["tiers"][0]["measured_bytes_per_s"]
            .as_f64()
            .unwrap_or(0.0)
            / 1e6
    );
    assert!(
        error.abs() <= 0.10,
        "staged in {delay_s:.3} s, predicted {predicted_s:.3} s"
    );
    // Staged whole (the jukebox test streams its title byte for byte).
    let head = reqwest::Client::new()
        .head(format!("{url}/tier/from-s3"))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(
        head.headers()["content-length"].to_str().unwrap(),
        std::fs::metadata(&clip).unwrap().len().to_string()
    );

    let first = client
        .get(format!("{url}/tier/rotten"))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 503);
    let answer = loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let r = client
            .get(format!("{url}/tier/rotten"))
            .send()
            .await
            .unwrap();
        if r.status() != 503 {
            break r;
        }
    };
    assert_eq!(answer.status(), 502);
    let body: Value = answer.json().await.unwrap();
    let text = body["error"].as_str().unwrap();
    assert!(
        text.contains("tier cloud") && text.contains("corrupt"),
        "{text}"
    );
    let m = server.metrics();
    server.shutdown().await;
    assert_eq!(m.stream_round_misses, 0, "{m:?}");
}
