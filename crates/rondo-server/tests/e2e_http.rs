//! End to end over real HTTP: a data directory with 4 emulated Cheetah disks
//! and 1 s rounds holds a 32 s faststart MP4, a 32 s moov-at-end MP4 and
//! a 32 s MPEG-TS made by ffmpeg at test time. Against one running server,
//! at the same time:
//!
//! - full GETs return exactly the stored stream (and, for the faststart MP4
//!   and the TS, exactly the source file), with the right Content-Type and
//!   Content-Length, paced by the schedule: sampled at the client's round
//!   boundaries, the bytes received never fall behind the consumption curve
//!   shifted by the start-up delay (one round after the first byte) and are
//!   never more than one round of bytes ahead of it;
//! - ffprobe reads every title over HTTP and reports the source's duration
//!   and video frame count;
//! - HEAD, single byte ranges (206, Content-Range; a range is a new stream
//!   admitted from the round holding its first byte), unsatisfiable ranges
//!   (416), `?t=` on the TS;
//! - malformed requests and unknown ids get clear JSON errors;
//! - a client that disconnects releases its reservations at once;
//! - over one raw connection, streams and plain GETs answered by rondo
//!   itself, streams written by its send loops (kept alive between them, a
//!   request sent while one plays answered after it), then, once a HEAD
//!   handed the connection to hyper, a stream sent by hyper: the same bytes
//!   either way, and the counter of streams sent directly counts exactly
//!   the former.
//!
//! Afterwards no admitted stream missed a deadline.
//!
//! The server sends every read here from its send arena (`sendfile`, no
//! copy: `zero_copy_share_min` 1), so the byte-for-byte checks above are
//! of that path; the other end-to-end tests keep the default, where reads
//! shared by few streams are copied into their sockets.

mod e2e_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use e2e_support::*;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT_RANGES, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE};
use rondo_server::RunningServer;
use rondo_store::TitleRecord;

struct Title {
    record: TitleRecord,
    stored: Vec<u8>,
    source: std::path::PathBuf,
    /// The source file is the stored stream (faststart MP4, TS).
    source_is_stored: bool,
    url: String,
}

async fn full_get_is_the_stored_stream_and_paced(client: reqwest::Client, title: Arc<Title>) {
    let (status, headers, body, arrivals) = get_timed(&client, &title.url, None).await;
    assert_eq!(status, StatusCode::OK, "{}", title.record.name);
    assert_eq!(
        headers[CONTENT_TYPE].to_str().unwrap(),
        title.record.content_type
    );
    assert_eq!(
        headers[CONTENT_LENGTH].to_str().unwrap(),
        title.record.size_bytes.to_string()
    );
    assert_eq!(headers[ACCEPT_RANGES].to_str().unwrap(), "bytes");
    assert_eq!(body.len(), title.stored.len(), "{}", title.record.name);
    assert!(
        body == title.stored,
        "{}: body differs from the stored stream",
        title.record.name
    );
    if title.source_is_stored {
        assert!(
            body == std::fs::read(&title.source).unwrap(),
            "{}: body differs from the source",
            title.record.name
        );
    }
    check_pace(&title.record, &arrivals);
}

/// Sampled at the client's round boundaries `t_first + m·T`, bytes received
/// lie between the consumption curve shifted by the start-up delay (playback
/// starts one round after the first byte) and one round of bytes above it,
/// or above the start burst (the server's default: its first rounds at
/// once, when the disks had room) while that lasts.
fn check_pace(record: &TitleRecord, arrivals: &[Arrival]) {
    let round = Duration::from_nanos(TEST_ROUND_DURATION_NS);
    let client_bytes = &record.client_bytes;
    let max_round_bytes = *client_bytes.iter().max().unwrap();
    let burst_rounds = (rondo_server::config::DEFAULT_START_BURST.as_nanos() as u64)
        .div_ceil(TEST_ROUND_DURATION_NS) as usize;
    assert!(
        client_bytes.iter().sum::<u64>() > rondo_server::config::DEFAULT_START_BURST_BYTES,
        "{}: a title sent whole at once has no pace to check",
        record.name
    );
    let t_first = arrivals[0].at;
    let mut worst_behind = 0i64;
    let mut worst_ahead = 0i64;
    for m in 1..=client_bytes.len() {
        let t = t_first + round * m as u32;
        // Playback round m−1 starts at t_first + m·T: rounds 0..m are needed.
        let needed: u64 = client_bytes[..m].iter().sum();
        let received = received_by(arrivals, t);
        let ahead = received as i64 - needed as i64;
        // The burst's rounds not yet needed may be here already.
        let burst_bytes: u64 = client_bytes
            [m.min(burst_rounds)..burst_rounds.min(client_bytes.len())]
            .iter()
            .sum();
        let ahead = ahead - burst_bytes as i64;
        worst_behind = worst_behind.min(received as i64 - needed as i64);
        worst_ahead = worst_ahead.max(ahead);
        assert!(
            received >= needed,
            "{}: at round boundary {m} the client has {received} bytes but playback needs {needed}",
            record.name
        );
        assert!(
            ahead <= max_round_bytes as i64,
            "{}: at round boundary {m} the client is {ahead} bytes ahead of playback and its start burst (one round is at most {max_round_bytes})",
            record.name
        );
    }
    let last = arrivals.last().unwrap().at - t_first;
    let expected = round * (client_bytes.len() as u32 - 1);
    assert!(
        last + round >= expected && last <= expected + round,
        "{}: the body took {last:?} after its first byte; the schedule spans {expected:?}",
        record.name
    );
    eprintln!(
        "{}: paced over {:.1} s, at round boundaries between {} and {} bytes ahead of playback (beyond its start burst; max round {} bytes)",
        record.name,
        last.as_secs_f64(),
        worst_behind,
        worst_ahead,
        max_round_bytes
    );
}

async fn ffprobe_over_http_matches_the_source(title: Arc<Title>) {
    let (over_http, from_file) = tokio::task::spawn_blocking(move || {
        (ffprobe(&title.url), ffprobe(title.source.to_str().unwrap()))
    })
    .await
    .unwrap();
    assert_eq!(over_http.video_frames, from_file.video_frames);
    assert!(
        (over_http.duration_s - from_file.duration_s).abs() < 0.05,
        "{over_http:?} vs {from_file:?}"
    );
}

async fn head_and_ranges(client: reqwest::Client, title: Arc<Title>) {
    let size = title.record.size_bytes;
    // HEAD: headers only, no stream admitted.
    let head = client.head(&title.url).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::OK);
    assert_eq!(
        head.headers()[CONTENT_LENGTH].to_str().unwrap(),
        size.to_string()
    );
    assert_eq!(head.headers()[ACCEPT_RANGES].to_str().unwrap(), "bytes");
    assert_eq!(
        head.headers()[CONTENT_TYPE].to_str().unwrap(),
        title.record.content_type
    );
    // A range inside the title, starting mid-round: exactly those bytes.
    let (first, last) = (size / 2 + 12_345, size / 2 + 400_000);
    let (status, headers, body, _) =
        get_timed(&client, &title.url, Some(&format!("bytes={first}-{last}"))).await;
    assert_eq!(status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(
        headers[CONTENT_RANGE].to_str().unwrap(),
        format!("bytes {first}-{last}/{size}")
    );
    assert!(body == title.stored[first as usize..=last as usize]);
    // A suffix range: the last bytes.
    let (status, _, body, _) = get_timed(&client, &title.url, Some("bytes=-1000")).await;
    assert_eq!(status, StatusCode::PARTIAL_CONTENT);
    assert!(body == title.stored[size as usize - 1000..]);
    // A suffix longer than the title: the whole title, as a 206.
    let (status, headers, body, _) =
        get_timed(&client, &title.url, Some(&format!("bytes=-{}", size * 3))).await;
    assert_eq!(status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(
        headers[CONTENT_RANGE].to_str().unwrap(),
        format!("bytes 0-{}/{size}", size - 1)
    );
    assert!(body == title.stored);
    // Overlapping ranges: merged into one.
    let (status, headers, body, _) =
        get_timed(&client, &title.url, Some("bytes=0-999,500-1999")).await;
    assert_eq!(status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(
        headers[CONTENT_RANGE].to_str().unwrap(),
        format!("bytes 0-1999/{size}")
    );
    assert!(body == title.stored[..2000]);
    // Outside the title: 416 with the size, and a message that says so.
    let r = client
        .get(&title.url)
        .header("Range", format!("bytes={size}-,{}-", size + 10))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::RANGE_NOT_SATISFIABLE);
    let message = r.text().await.unwrap();
    assert!(message.contains("no range of"), "{message}");
    assert!(message.contains(&format!("{size} bytes")), "{message}");
    let r = client
        .get(&title.url)
        .header("Range", format!("bytes={size}-"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(
        r.headers()[CONTENT_RANGE].to_str().unwrap(),
        format!("bytes */{size}")
    );
    // A Range header that does not parse is ignored: the whole title.
    let r = client
        .head(&title.url)
        .header("Range", "pages=1-2")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

async fn time_seek_on_ts(client: reqwest::Client, title: Arc<Title>) {
    // ?t=20 starts at the keyframe at or before 20 s (e2e_seek checks
    // which): the rest of the stored stream from a packet boundary at or
    // before the round holding 20 s.
    let url = format!("{}?t=20", title.url);
    let (status, headers, body, _) = get_timed(&client, &url, None).await;
    assert_eq!(status, StatusCode::OK);
    let round = (20 * 1_000_000_000 / TEST_ROUND_DURATION_NS) as usize;
    let round_start: u64 = title.record.client_bytes[..=round].iter().sum();
    let start: u64 = headers["x-rondo-first-byte"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(start <= round_start);
    assert!(body == title.stored[start as usize..]);
    assert_eq!(start % 188, 0, "a TS keyframe starts on a packet boundary");
    assert_eq!(body[0], 0x47, "TS sync byte");
}

async fn errors_are_clear(client: reqwest::Client, base: String, mp4_url: String) {
    let check = |status: StatusCode, expect: StatusCode, body: serde_json::Value, what: &str| {
        assert_eq!(status, expect, "{what}: {body}");
        assert!(
            body["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{what}: {body}"
        );
    };
    for (path, expect) in [
        ("/stream/999", StatusCode::NOT_FOUND),
        ("/stream/abc", StatusCode::BAD_REQUEST),
        ("/stream/-1.mp4", StatusCode::BAD_REQUEST),
        ("/stream/99999999999999999999999", StatusCode::BAD_REQUEST),
        ("/api/titles/999", StatusCode::NOT_FOUND),
        ("/api/titles/x/schedule", StatusCode::BAD_REQUEST),
        ("/no/such/thing", StatusCode::NOT_FOUND),
    ] {
        let r = client.get(format!("{base}{path}")).send().await.unwrap();
        let status = r.status();
        check(status, expect, r.json().await.unwrap(), path);
    }
    // Wrong extension for the title's type, and a bad ?t=.
    let ts_style = mp4_url.replace(".mp4", ".ts");
    let r = client.get(&ts_style).send().await.unwrap();
    let status = r.status();
    check(
        status,
        StatusCode::NOT_FOUND,
        r.json().await.unwrap(),
        "wrong extension",
    );
    for t in ["abc", "-3", "NaN"] {
        let r = client.get(format!("{mp4_url}?t={t}")).send().await.unwrap();
        let status = r.status();
        check(status, StatusCode::BAD_REQUEST, r.json().await.unwrap(), t);
    }
    // Raw malformed HTTP: the server answers 400 and keeps serving.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://").to_string();
    for garbage in [
        &b"GARBAGE\r\n\r\n"[..],
        b"GET /api/titles HTTP/9.9\r\n\r\n",
        b"GET /api/titles HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
        b"\x00\x01\x02\x03\r\n\r\n",
    ] {
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        s.write_all(garbage).await.unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut answer)).await;
        let text = String::from_utf8_lossy(&answer);
        assert!(
            text.is_empty() || text.starts_with("HTTP/1.1 4") || text.starts_with("HTTP/1.1 5"),
            "{text}"
        );
    }
    let r = client
        .get(format!("{base}/api/titles"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::OK,
        "still serving after malformed requests"
    );
}

/// One HTTP/1.1 response read off a raw connection: status, lower-case
/// headers and the body (by its Content-Length; none for `HEAD`).
struct RawResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl RawResponse {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one response (head, then a Content-Length body) from `socket`,
/// keeping what follows it in `buffer`.
async fn read_response(socket: &mut tokio::net::TcpStream, buffer: &mut Vec<u8>) -> RawResponse {
    read_response_to(socket, buffer, false).await
}

async fn read_response_to(
    socket: &mut tokio::net::TcpStream,
    buffer: &mut Vec<u8>,
    head_only: bool,
) -> RawResponse {
    use tokio::io::AsyncReadExt;
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let mut chunk = [0u8; 65536];
        let n = socket.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the connection closed before a response head");
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buffer[..head_end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next().unwrap()[9..12].parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.trim().to_ascii_lowercase(), v.trim().to_string())
        })
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map(|(_, v)| v.parse().unwrap())
        .expect("a content-length");
    buffer.drain(..head_end);
    let length = if head_only { 0 } else { length };
    while buffer.len() < length {
        let mut chunk = [0u8; 65536];
        let n = socket.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the connection closed inside a body");
        buffer.extend_from_slice(&chunk[..n]);
    }
    let body = buffer.drain(..length).collect();
    RawResponse {
        status,
        headers,
        body,
    }
}

/// Run alone, after the other checks, so that the counters' deltas are
/// this check's own.
async fn send_loops_and_hyper_send_the_same_bytes_on_one_connection(
    server: Arc<RunningServer>,
    title: Arc<Title>,
) {
    use tokio::io::AsyncWriteExt;
    let before = server.metrics();
    let path = title.url.split_once("/stream/").unwrap().1;
    let host = server.url().trim_start_matches("http://").to_string();
    let size = title.record.size_bytes as usize;
    let get = |range: String| {
        format!("GET /stream/{path} HTTP/1.1\r\nhost: {host}\r\nrange: bytes={range}\r\n\r\n")
    };
    // A small receive window: a client that does not read fills it soon.
    let connect = |addr: &str| {
        let addr: std::net::SocketAddr = addr.parse().unwrap();
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        socket.connect(addr)
    };
    let mut socket = connect(&host).await.unwrap();
    let mut buffer = Vec::new();
    // 1. A range of the title's last rounds, answered by a send loop. The
    //    client reads nothing for a while, so the stream cannot end (its
    //    bytes are more than the socket buffers hold), and sends its next
    //    request meanwhile, as a client that pipelines does.
    let tail_from = size.saturating_sub(1_000_000);
    socket
        .write_all(get(format!("{tail_from}-")).as_bytes())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    socket
        .write_all(get("0-999".into()).as_bytes())
        .await
        .unwrap();
    let first = read_response(&mut socket, &mut buffer).await;
    assert_eq!(first.status, 206);
    assert!(first.body == title.stored[tail_from..]);
    assert_eq!(first.header("connection"), None, "kept alive");
    // 2. The request sent while the stream played is answered after it,
    //    and one more after that, on the same connection.
    let second = read_response(&mut socket, &mut buffer).await;
    assert_eq!(second.status, 206);
    assert!(second.body == title.stored[..1000]);
    socket
        .write_all(get("1000-4999".into()).as_bytes())
        .await
        .unwrap();
    let third = read_response(&mut socket, &mut buffer).await;
    assert_eq!(third.status, 206);
    assert!(third.body == title.stored[1000..5000]);
    // 3. A plain GET of another route stays on rondo's side; a HEAD hands
    //    the connection to hyper, and a stream asked for after it is
    //    hyper's to send, byte for byte the same.
    socket
        .write_all(format!("GET /api/titles HTTP/1.1\r\nhost: {host}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let list = read_response(&mut socket, &mut buffer).await;
    assert_eq!(list.status, 200);
    let listed: serde_json::Value = serde_json::from_slice(&list.body).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 3);
    socket
        .write_all(format!("HEAD /stream/{path} HTTP/1.1\r\nhost: {host}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let head = read_response_to(&mut socket, &mut buffer, true).await;
    assert_eq!(head.status, 200);
    assert_eq!(
        head.header("content-length"),
        Some(size.to_string().as_str())
    );
    socket
        .write_all(get(format!("{tail_from}-")).as_bytes())
        .await
        .unwrap();
    let by_hyper = read_response(&mut socket, &mut buffer).await;
    assert_eq!(by_hyper.status, 206);
    assert!(by_hyper.body == first.body);
    // 4. A client that says `connection: close` gets it after its stream.
    let mut socket = tokio::net::TcpStream::connect(&host).await.unwrap();
    socket
        .write_all(
            format!(
                "GET /stream/{path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\nrange: bytes=0-9999\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut buffer = Vec::new();
    let closing = read_response(&mut socket, &mut buffer).await;
    assert_eq!(closing.status, 206);
    assert_eq!(closing.header("connection"), Some("close"));
    assert!(closing.body == title.stored[..10_000]);
    let mut rest = Vec::new();
    use tokio::io::AsyncReadExt;
    let n = tokio::time::timeout(Duration::from_secs(5), socket.read_to_end(&mut rest))
        .await
        .expect("the server closes the connection after the stream")
        .unwrap();
    assert_eq!(n, 0);
    let after = server.metrics();
    assert_eq!(after.admitted - before.admitted, 5, "{after:?}");
    assert_eq!(
        after.admitted_direct - before.admitted_direct,
        4,
        "four streams by the send loops, one by hyper: {after:?}"
    );
    // An idle array gives a new stream its start burst (the default).
    assert!(
        after.admitted_burst > before.admitted_burst,
        "no stream got a start burst: {after:?}"
    );
    assert_eq!(after.streams_disconnected, before.streams_disconnected);
}

async fn disconnect_releases_at_once(
    client: reqwest::Client,
    server: Arc<RunningServer>,
    url: String,
) {
    let before = server.metrics().streams_disconnected;
    let response = client.get(&url).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut stream = response.bytes_stream();
    use futures_util::StreamExt;
    let _first = stream.next().await.unwrap().unwrap();
    drop(stream);
    let released = eventually(Duration::from_millis(500), || {
        server.metrics().streams_disconnected > before
    })
    .await;
    assert!(
        released,
        "a client that disconnects releases its stream within 500 ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn titles_stream_over_http_exactly_and_on_time() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let media = dir.path().join("media");
    std::fs::create_dir(&media).unwrap();
    let (a, b, c) = (media.clone(), media.clone(), media.clone());
    let makers = [
        std::thread::spawn(move || make_media(&a, "clip-faststart", MediaKind::Mp4Faststart, 32)),
        std::thread::spawn(move || make_media(&b, "clip-moov-at-end", MediaKind::Mp4MoovAtEnd, 32)),
        std::thread::spawn(move || make_media(&c, "clip-ts", MediaKind::Ts, 32)),
    ];
    let sources: Vec<_> = makers.into_iter().map(|m| m.join().unwrap()).collect();
    let store = create_store(&dir.path().join("data"));
    let mut titles = Vec::new();
    for (source, source_is_stored) in sources.iter().zip([true, false, true]) {
        let name = source.file_stem().unwrap().to_str().unwrap();
        let record = ingest(&store, source, name);
        let stored = stored_stream(&store, &record);
        assert_eq!(stored.len() as u64, record.size_bytes);
        titles.push((record, stored, source.clone(), source_is_stored));
    }
    let config = rondo_server::ServerConfig {
        zero_copy_share_min: 1,
        ..test_config()
    };
    let server = Arc::new(start(store, config).await);
    let base = server.url();
    let client = reqwest::Client::new();

    // The title list has what players need.
    let list = get_json(&client, &format!("{base}/api/titles")).await;
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 3);
    let titles: Vec<Arc<Title>> = titles
        .into_iter()
        .map(|(record, stored, source, source_is_stored)| {
            let entry = list
                .iter()
                .find(|e| e["id"] == record.id.0)
                .expect("listed");
            assert_eq!(entry["name"], record.name.as_str());
            let duration = entry["duration_seconds"].as_f64().unwrap();
            assert!((duration - 32.0).abs() < 0.2, "{entry}");
            let url = entry["stream_url"].as_str().unwrap().to_string();
            assert!(url.starts_with(&base), "{url}");
            Arc::new(Title {
                record,
                stored,
                source,
                source_is_stored,
                url,
            })
        })
        .collect();
    // The schedule endpoint gives the per-round client bytes.
    let schedule = get_json(
        &client,
        &format!("{base}/api/titles/{}/schedule", titles[0].record.id.0),
    )
    .await;
    let per_round: Vec<u64> = serde_json::from_value(schedule["client_bytes"].clone()).unwrap();
    assert_eq!(per_round, titles[0].record.client_bytes);
    assert_eq!(schedule["round_duration_ns"], TEST_ROUND_DURATION_NS);

    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for title in &titles {
        tasks.spawn(full_get_is_the_stored_stream_and_paced(
            client.clone(),
            Arc::clone(title),
        ));
        tasks.spawn(ffprobe_over_http_matches_the_source(Arc::clone(title)));
        tasks.spawn(head_and_ranges(client.clone(), Arc::clone(title)));
    }
    tasks.spawn(time_seek_on_ts(client.clone(), Arc::clone(&titles[2])));
    tasks.spawn(errors_are_clear(
        client.clone(),
        base.clone(),
        titles[0].url.clone(),
    ));
    tasks.spawn(disconnect_releases_at_once(
        client.clone(),
        Arc::clone(&server),
        titles[1].url.clone(),
    ));
    while let Some(result) = tasks.join_next().await {
        result.expect("a check failed");
    }
    send_loops_and_hyper_send_the_same_bytes_on_one_connection(
        Arc::clone(&server),
        Arc::clone(&titles[0]),
    )
    .await;
    let m = server.metrics();
    eprintln!(
        "all checks done in {:.1} s: {m:?}",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        m.stream_round_misses, 0,
        "no admitted stream missed a deadline"
    );
    assert_eq!(m.disk_round_overruns, 0);
    assert_eq!(m.read_errors, 0);
    // Rounds sent by the send loops went without a copy (those hyper sent,
    // after a HEAD, and response heads were copied).
    assert!(
        m.bytes_sent_zero_copy > 0 && m.bytes_sent_zero_copy <= m.bytes_sent,
        "{m:?}"
    );
    assert!(m.admitted >= 12, "{m:?}");
    assert!(m.admitted_mid_title >= 6, "{m:?}");
    assert_eq!(m.rejected_disk_time + m.rejected_buffer, 0);
    let server = Arc::into_inner(server).expect("every task is done");
    server.shutdown().await;
}
