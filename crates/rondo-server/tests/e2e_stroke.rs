//! The charged stroke (`--stroke data`, `rondo_server::stroke`) on a running
//! server: admission charges the cylinders the data occupies; an upload whose
//! data reaches past them widens the stroke before a byte is written, and
//! the title then plays with no deadline missed; an upload that would widen
//! it while the array cannot take a new bound (a disk failed) is refused
//! with 503, nothing stored and its strides given back; a restart charges
//! where the data then ends.

mod e2e_support;

use e2e_support::*;
use futures_util::StreamExt;
use rondo_server::ServerConfig;
use rondo_server::titles::default_store_config;
use rondo_store::{Store, StoreConfig, Stroke};

/// Strides of 32 MiB: each title holds one primary and one backup stride
/// per disk, so every title moves the data's end 64 MiB further in, past a
/// whole percent of the Cheetah's stroke (1% holds about 45 MB).
const STRIDE_BYTES: u64 = 32 << 20;

fn stroke_config() -> ServerConfig {
    ServerConfig {
        stroke: Stroke::Data,
        ..test_config()
    }
}

async fn charged(http: &reqwest::Client, url: &str) -> serde_json::Value {
    get_json(http, &format!("{url}/api/disks")).await["charged_stroke"].clone()
}

async fn upload(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    name: &str,
    body: Vec<u8>,
) -> (reqwest::StatusCode, serde_json::Value) {
    let response = http
        .post(format!("{url}/api/admin/titles?name={name}&file={name}.ts"))
        .bearer_auth(token)
        .body(body)
        .send()
        .await
        .expect("upload sent");
    let status = response.status();
    (status, response.json().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_stroke_widens_for_an_upload_and_refuses_one_it_cannot_charge() {
    init_logs();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let media = make_media_padded(tmp.path(), "clip", MediaKind::Ts, 8, Some(2000));
    let store = Store::create(
        &dir,
        StoreConfig {
            stride_bytes: STRIDE_BYTES,
            round_duration_ns: TEST_ROUND_DURATION_NS,
            ..default_store_config()
        },
    )
    .unwrap();
    for name in ["a", "b"] {
        ingest(&store, &media, name);
    }
    // Two titles: strides 0–3 of every disk, 128 MiB.
    assert_eq!(store.highest_allocated_stride(), Some(3));
    let free_before = store.free_strides();
    let server = start(store, stroke_config()).await;
    let (url, token) = (server.url(), server.token().to_string());
    let http = reqwest::Client::new();

    let first = charged(&http, &url).await;
    assert_eq!(first["stroke"], "data", "{first}");
    let first_percent = first["stroke_percent"].as_u64().unwrap();
    assert!((2..10).contains(&first_percent), "{first}");
    assert_eq!(
        first["charged_profile"],
        format!("cheetah-4lp-outer{first_percent}")
    );

    // A third title lies in strides 4–5: the stroke widens first.
    let (status, title) = upload(&http, &url, &token, "c", std::fs::read(&media).unwrap()).await;
    assert_eq!(status, 201, "{title}");
    let widened = charged(&http, &url).await;
    let widened_percent = widened["stroke_percent"].as_u64().unwrap();
    assert!(widened_percent > first_percent, "{first} -> {widened}");
    assert_eq!(widened["widened"], 1, "{widened}");
    let metrics = get_text(&http, &format!("{url}/metrics")).await;
    assert!(
        metrics.contains(&format!("rondo_charged_stroke_percent {widened_percent}")),
        "{metrics}"
    );
    // It plays whole, under the wider stroke's bound.
    let response = http
        .get(title["stream_url"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let mut bytes = 0u64;
    while let Some(chunk) = body.next().await {
        bytes += chunk.expect("the stream is whole").len() as u64;
    }
    assert_eq!(bytes, title["size_bytes"].as_u64().unwrap(), "{title}");

    // With a disk failed the array takes no new bound: a fourth title,
    // which would need a wider stroke, is refused and nothing is stored.
    let (status, answer) = admin_post(
        &http,
        &format!("{url}/api/admin/disks/2/fail"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let free_with_three = server.store().free_strides();
    let (status, refused) = upload(&http, &url, &token, "d", std::fs::read(&media).unwrap()).await;
    assert_eq!(status, 503, "{refused}");
    let why = refused["error"].as_str().unwrap_or_default();
    assert!(
        why.contains("not stored") && why.contains("disk 2") && why.contains("stride"),
        "{refused}"
    );
    assert_eq!(server.store().free_strides(), free_with_three);
    assert_eq!(server.store().titles().unwrap().len(), 3);
    let after = charged(&http, &url).await;
    assert_eq!(after["stroke_percent"], widened_percent, "{after}");
    assert_eq!(after["refused"], 1, "{after}");
    assert_eq!(server.metrics().stream_round_misses, 0);
    server.shutdown().await;

    // A restart charges where the data ends now: the widened stroke.
    let store = Store::open(&dir).unwrap();
    assert_eq!(store.highest_allocated_stride(), Some(5));
    assert!(
        store
            .free_strides()
            .iter()
            .zip(&free_before)
            .all(|(a, b)| a + 2 == *b)
    );
    let server = start(store, stroke_config()).await;
    let restarted = charged(&http, &server.url()).await;
    assert_eq!(restarted["stroke_percent"], widened_percent, "{restarted}");
    server.shutdown().await;
}

/// The default charges the whole drive and never widens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_stroke_is_the_default() {
    let tmp = tempfile::tempdir().unwrap();
    let store = create_store(&tmp.path().join("data"));
    let server = start(store, test_config()).await;
    let http = reqwest::Client::new();
    let whole = charged(&http, &server.url()).await;
    assert_eq!(whole["stroke"], "whole", "{whole}");
    assert_eq!(whole["stroke_percent"], 100, "{whole}");
    assert_eq!(whole["charged_profile"], "cheetah-4lp", "{whole}");
    server.shutdown().await;
}
