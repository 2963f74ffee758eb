//! End to end: the control API, admission refusals and slow clients.
//!
//! - Control endpoints refuse requests without the token (401, also with a
//!   wrong token or scheme); with it, an upload is ingested through the
//!   write gate while streams play (every written round passes the gate; no
//!   stream misses a deadline), the title appears in `/api/titles` and
//!   streams back byte for byte; a title being streamed cannot be deleted
//!   (409), afterwards it can, and then it is gone (404).
//! - When admission finds no start round within the look-ahead the client
//!   gets 503 with `Retry-After` and a JSON reason, and once a stream ends
//!   its reservations admit the next client (native timing); a shutdown
//!   with a stream playing cuts it and completes at once.
//! - A client that stops reading (a tiny receive window, never read) keeps
//!   its stream for the grace time, is then dropped with a log line, and a
//!   client of the same title reading at the same time gets every byte on
//!   time.

mod e2e_support;

use std::time::Duration;

use e2e_support::*;
use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, RETRY_AFTER};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn control_endpoints_need_the_token_and_ingest_through_the_gate() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let media = dir.path().join("media");
    std::fs::create_dir(&media).unwrap();
    let playing = make_media(&media, "playing", MediaKind::Ts, 12);
    let upload = make_media(&media, "upload", MediaKind::Mp4Faststart, 10);
    let store = create_store(&dir.path().join("data"));
    let playing_record = ingest(&store, &playing, "playing");
    // A 10 s title is sent whole at once under the start burst by size;
    // the test deletes the uploaded title while it plays.
    let config = rondo_server::ServerConfig {
        start_burst_bytes: 0,
        ..test_config()
    };
    let server = start(store, config).await;
    let base = server.url();
    let token = server.token().to_string();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("data/token"))
            .unwrap()
            .trim(),
        token
    );
    let client = reqwest::Client::new();
    let upload_bytes = std::fs::read(&upload).unwrap();

    // Without the token, or with a wrong one: 401 and nothing changes.
    for auth in [
        None,
        Some("Bearer wrong".to_string()),
        Some(format!("Basic {token}")),
        Some(format!("Bearer {token}x")),
    ] {
        let mut post = client
            .post(format!("{base}/api/admin/titles?name=sneaky"))
            .body(upload_bytes.clone());
        let mut delete = client.delete(format!("{base}/api/admin/titles/0"));
        if let Some(auth) = &auth {
            post = post.header(AUTHORIZATION, auth);
            delete = delete.header(AUTHORIZATION, auth);
        }
        for request in [post, delete] {
            let r = request.send().await.unwrap();
            assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{auth:?}");
            assert_eq!(r.headers()["www-authenticate"], "Bearer");
            let body: serde_json::Value = r.json().await.unwrap();
            assert!(body["error"].as_str().unwrap().contains("Bearer"), "{body}");
        }
    }
    let titles = get_json(&client, &format!("{base}/api/titles")).await;
    assert_eq!(titles.as_array().unwrap().len(), 1);

    // With the token: a missing name and a file that is not media are refused.
    let bearer = format!("Bearer {token}");
    let r = client
        .post(format!("{base}/api/admin/titles"))
        .header(AUTHORIZATION, &bearer)
        .body(upload_bytes.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = client
        .post(format!("{base}/api/admin/titles?name=junk"))
        .header(AUTHORIZATION, &bearer)
        .body(vec![0x42u8; 100_000])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(!body["error"].as_str().unwrap().is_empty(), "{body}");

    // Streams play while the upload is ingested through the write gate.
    let stream_url = format!("{base}/stream/{}.ts", playing_record.id.0);
    let players: Vec<_> = (0..3)
        .map(|_| {
            let client = client.clone();
            let url = stream_url.clone();
            tokio::spawn(async move { get_timed(&client, &url, None).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let gated_before = server.metrics().gated_writes;
    let r = client
        .post(format!(
            "{base}/api/admin/titles?name=uploaded&file=upload.mp4"
        ))
        .header(AUTHORIZATION, &bearer)
        .body(upload_bytes.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let created: serde_json::Value = r.json().await.unwrap();
    assert_eq!(created["name"], "uploaded");
    assert_eq!(created["source_file_name"], "upload.mp4");
    let rounds = created["rounds"].as_u64().unwrap();
    let m = server.metrics();
    assert_eq!(
        m.gated_writes - gated_before,
        rounds,
        "every written round went through the gate"
    );
    let new_url = created["stream_url"].as_str().unwrap().to_string();
    let titles = get_json(&client, &format!("{base}/api/titles")).await;
    assert!(
        titles
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "uploaded" && t["stream_url"] == new_url.as_str()),
        "{titles}"
    );
    // A second upload under the same name: 409.
    let r = client
        .post(format!("{base}/api/admin/titles?name=uploaded"))
        .header(AUTHORIZATION, &bearer)
        .body(upload_bytes.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CONFLICT);

    // The uploaded title streams back exactly; while it plays it cannot be deleted.
    let id = created["id"].as_u64().unwrap();
    let fetch = {
        let client = client.clone();
        let url = new_url.clone();
        tokio::spawn(async move { get_timed(&client, &url, None).await })
    };
    tokio::time::sleep(Duration::from_millis(800)).await;
    let r = client
        .delete(format!("{base}/api/admin/titles/{id}"))
        .header(AUTHORIZATION, &bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let (status, _, body, _) = fetch.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert!(
        body == upload_bytes,
        "the uploaded title streams back byte for byte"
    );
    for player in players {
        let (status, _, body, _) = player.await.unwrap();
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, std::fs::read(&playing).unwrap());
    }
    // Now nothing plays it: deleted, and gone.
    let r = client
        .delete(format!("{base}/api/admin/titles/{id}"))
        .header(AUTHORIZATION, &bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    assert_eq!(
        client.get(&new_url).send().await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
    let r = client
        .delete(format!("{base}/api/admin/titles/{id}"))
        .header(AUTHORIZATION, &bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);

    let m = server.metrics();
    assert_eq!(m.stream_round_misses, 0, "{m:?}");
    assert_eq!(m.disk_round_overruns, 0, "{m:?}");
    server.shutdown().await;
    assert!(
        !dir.path().join("data/server.json").exists(),
        "server.json is removed at shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_start_round_within_the_lookahead_gives_503_with_retry_after() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let clip = make_media(dir.path(), "clip", MediaKind::Ts, 6);
    let store = create_store(&dir.path().join("data"));
    let record = ingest(&store, &clip, "clip");
    // A server buffer that holds two streams of this title at a time.
    let per_stream_bytes = 2 * record.client_bytes.iter().max().unwrap().div_ceil(16384) * 16384;
    // Native timing here: admission is the same, reads are not paced.
    let config = rondo_server::ServerConfig {
        buffer_per_disk_bytes: (2 * per_stream_bytes).div_ceil(4),
        lookahead_rounds: 1,
        disk_timing: rondo_server::DiskTiming::Native,
        ..test_config()
    };
    let server = start(store, config).await;
    let url = format!("{}/stream/{}.ts", server.url(), record.id.0);
    let client = reqwest::Client::new();
    let first = client.get(&url).send().await.unwrap();
    let second = client.get(&url).send().await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(second.status(), StatusCode::OK);
    let third = client.get(&url).send().await.unwrap();
    assert_eq!(third.status(), StatusCode::SERVICE_UNAVAILABLE);
    let retry: u64 = third.headers()[RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry >= 1);
    let body: serde_json::Value = third.json().await.unwrap();
    assert_eq!(body["reason"], "buffer", "{body}");
    assert!(body["error"].as_str().unwrap().contains("buffer"), "{body}");
    assert_eq!(body["retry_after_seconds"], retry);
    assert_eq!(server.metrics().rejected_buffer, 1);
    // HEAD needs no admission.
    assert_eq!(
        client.head(&url).send().await.unwrap().status(),
        StatusCode::OK
    );
    // One client leaves: its reservations are released at once and the next
    // client is admitted.
    drop(first);
    let released = eventually(Duration::from_millis(500), || {
        server.metrics().streams_disconnected == 1
    })
    .await;
    assert!(released);
    let fourth = client.get(&url).send().await.unwrap();
    assert_eq!(fourth.status(), StatusCode::OK);
    let body = fourth.bytes().await.unwrap();
    assert!(body == std::fs::read(&clip).unwrap());
    // Shutdown with a stream still playing: it ends at once (the response
    // fails), the threads are joined and server.json is removed.
    drop(second);
    let playing = client.get(&url).send().await.unwrap();
    assert_eq!(playing.status(), StatusCode::OK);
    let mut playing = playing.bytes_stream();
    use futures_util::StreamExt;
    assert!(
        playing.next().await.unwrap().is_ok(),
        "the first round arrives"
    );
    let stopping = std::time::Instant::now();
    server.shutdown().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(2),
        "{:?}",
        stopping.elapsed()
    );
    let mut cut = false;
    while let Some(chunk) = playing.next().await {
        if chunk.is_err() {
            cut = true;
            break;
        }
    }
    assert!(cut, "the playing stream is cut, not ended as if complete");
    assert!(!dir.path().join("data/server.json").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn streams_beyond_the_network_capacity_get_503_and_the_others_play_whole() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    // 4 Mbit/s, padded: every full round is close to the largest.
    let clip = make_media_padded(dir.path(), "clip", MediaKind::Ts, 6, Some(4000));
    let store = create_store(&dir.path().join("data"));
    let record = ingest(&store, &clip, "clip");
    let round_bytes_max = *record.client_bytes.iter().max().unwrap();
    // Room for two streams' largest rounds and a quarter more: a third
    // stream, started in the same round or the next, exceeds it.
    let bytes_per_round = 2 * round_bytes_max + round_bytes_max / 4;
    let config = rondo_server::ServerConfig {
        network_bits_per_s_max: Some(bytes_per_round * 8),
        lookahead_rounds: 1,
        start_burst: Duration::ZERO,
        start_burst_bytes: 0,
        disk_timing: rondo_server::DiskTiming::Native,
        ..test_config()
    };
    let server = start(store, config).await;
    let url = format!("{}/stream/{}.ts", server.url(), record.id.0);
    let client = reqwest::Client::new();
    let first = client.get(&url).send().await.unwrap();
    let second = client.get(&url).send().await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(second.status(), StatusCode::OK);
    let third = client.get(&url).send().await.unwrap();
    assert_eq!(third.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(third.headers().contains_key(RETRY_AFTER));
    let body: serde_json::Value = third.json().await.unwrap();
    assert_eq!(body["reason"], "network", "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("network"),
        "{body}"
    );
    assert_eq!(server.metrics().rejected_network, 1);
    // The admitted two play whole, on time.
    let media = std::fs::read(&clip).unwrap();
    assert!(first.bytes().await.unwrap() == media);
    assert!(second.bytes().await.unwrap() == media);
    let m = server.metrics();
    assert_eq!(m.stream_round_misses, 0, "{m:?}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_that_stops_reading_is_dropped_after_the_grace_time_and_delays_no_one() {
    use tokio::io::AsyncWriteExt;
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    // 4 Mbit/s: 125 KB a round, so the stalled connection's socket and
    // HTTP buffers fill within a few rounds.
    let clip = make_media_padded(dir.path(), "clip", MediaKind::Ts, 10, Some(4000));
    let store = create_store(&dir.path().join("data"));
    let record = ingest(&store, &clip, "clip");
    let grace = Duration::from_secs(2);
    let config = rondo_server::ServerConfig {
        stall_grace: grace,
        ..test_config()
    };
    let server = start(store, config).await;
    let url = format!("{}/stream/{}.ts", server.url(), record.id.0);

    // The stalled client: a tiny receive window, a request, and no reads.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = socket.connect(server.local_addr()).await.unwrap();
    stalled
        .write_all(
            format!(
                "GET /stream/{}.ts HTTP/1.1\r\nHost: test\r\n\r\n",
                record.id.0
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    // A client of the same title that reads.
    let client = reqwest::Client::new();
    let (status, _, body, arrivals) = get_timed(&client, &url, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, std::fs::read(&clip).unwrap());
    // It was on time throughout: never behind the curve shifted by one round.
    let round = Duration::from_nanos(TEST_ROUND_DURATION_NS);
    for m in 1..=record.client_bytes.len() {
        let needed: u64 = record.client_bytes[..m].iter().sum();
        assert!(received_by(&arrivals, arrivals[0].at + round * m as u32) >= needed);
    }
    // The stalled client is dropped, and the reader's stream ends at the
    // round boundary after its last byte (the driver publishes both).
    let dropped = eventually(Duration::from_secs(5), || {
        let m = server.metrics();
        m.streams_dropped_stalled == 1 && m.active_streams == 0
    })
    .await;
    let m = server.metrics();
    assert!(
        dropped,
        "the stalled client is dropped, no stream left: {m:?}"
    );
    assert_eq!(m.stream_round_misses, 0, "{m:?}");
    drop(stalled);
    server.shutdown().await;
}
