//! A start burst that keeps its lead (`--start-burst-lead kept`,
//! `rondo_model::reservation::shape`) on a running server, beside one that
//! spends it (the default), over real HTTP with the same title: both send
//! the stored stream byte for byte with no deadline missed; with the lead
//! kept, the client holds, at every round boundary after its first byte,
//! every round a player started then needs for the next burst − 1 rounds
//! (the rounds after the burst come one round after their read); with the
//! lead spent it does not (it is one round ahead again after the burst).
//! And a client with a small receive window that waits a round before
//! reading finds the kept burst wholly in its socket (no write waited for
//! room, `rondo_socket_full_total`), where the spent one's filled it.

mod e2e_support;

use e2e_support::*;
use reqwest::StatusCode;
use rondo_model::reservation::BurstLead;
use rondo_server::ServerConfig;
use rondo_server::config::DEFAULT_START_BURST;

/// Playback rounds ahead of a player started at the first byte: the least,
/// over the round boundaries m = 1, 2, … after it (up to where the title's
/// end would cut a burst's lead short), of the rounds received whole by
/// then, less the m rounds such a player has begun.
fn least_rounds_ahead(client_bytes: &[u64], arrivals: &[Arrival], burst_rounds: usize) -> i64 {
    let t_first = arrivals[0].at;
    let round = std::time::Duration::from_nanos(TEST_ROUND_DURATION_NS);
    let mut least = i64::MAX;
    for m in 1..client_bytes.len().saturating_sub(burst_rounds) {
        let received = received_by(arrivals, t_first + round * m as u32);
        let mut whole = 0;
        let mut sum = 0;
        for &bytes in client_bytes {
            sum += bytes;
            if sum > received {
                break;
            }
            whole += 1;
        }
        least = least.min(whole as i64 - m as i64);
    }
    least
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_that_keeps_its_lead_keeps_the_client_ahead_for_the_whole_stream() {
    init_logs();
    let tmp = tempfile::tempdir().unwrap();
    let media = make_media(tmp.path(), "clip", MediaKind::Mp4Faststart, 20);
    let mut servers = Vec::new();
    for lead in [BurstLead::Spent, BurstLead::Kept] {
        let store = create_store(&tmp.path().join(lead.name()));
        let record = ingest(&store, &media, "clip");
        let stored = stored_stream(&store, &record);
        let config = ServerConfig {
            start_burst_lead: lead,
            ..test_config()
        };
        servers.push((lead, record, stored, start(store, config).await));
    }
    let http = reqwest::Client::new();
    let mut urls = Vec::new();
    for (_, record, _, server) in &servers {
        let list = get_json(&http, &format!("{}/api/titles", server.url())).await;
        let entry = list
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == record.id.0)
            .expect("listed")
            .clone();
        urls.push(entry["stream_url"].as_str().unwrap().to_string());
    }
    let gets = urls.iter().map(|url| {
        let http = http.clone();
        async move { get_timed(&http, url, None).await }
    });
    let answers = futures_util::future::join_all(gets).await;
    let burst_rounds =
        (DEFAULT_START_BURST.as_nanos() as u64).div_ceil(TEST_ROUND_DURATION_NS) as usize;
    let mut ahead = Vec::new();
    for ((lead, record, stored, server), (status, _, body, arrivals)) in servers.iter().zip(answers)
    {
        assert_eq!(status, StatusCode::OK, "{}", lead.name());
        assert!(
            record.size_bytes > rondo_server::config::DEFAULT_START_BURST_BYTES,
            "a title sent whole at once has no lead to keep"
        );
        assert!(
            body == *stored,
            "{}: the body is not the stored stream",
            lead.name()
        );
        let m = server.metrics();
        assert_eq!(m.admitted_burst, 1, "{}: {m:?}", lead.name());
        assert_eq!(m.stream_round_misses, 0, "{}", lead.name());
        assert_eq!(m.disk_round_overruns, 0, "{}", lead.name());
        let least = least_rounds_ahead(&record.client_bytes, &arrivals, burst_rounds);
        eprintln!(
            "{}: {} bytes in {:.1} s, at least {least} rounds ahead of a player started at the first byte; socket full {} times",
            lead.name(),
            body.len(),
            (arrivals.last().unwrap().at - arrivals[0].at).as_secs_f64(),
            m.socket_full
        );

        ahead.push(least);
    }
    // Spent: the rounds after the burst come one per round, each at the
    // boundary its player starts it (0 ahead, give or take the send).
    assert!(
        ahead[0] <= 1,
        "the spent burst stayed {} rounds ahead",
        ahead[0]
    );
    // Kept: round i ≥ k comes i − k + 2 rounds after the first round, so at
    // boundary m rounds up to m + k − 2 are there: k − 2 ahead.
    assert!(
        ahead[1] >= burst_rounds as i64 - 2,
        "the kept burst's client was only {} rounds ahead (burst {burst_rounds})",
        ahead[1]
    );

    // A client with a small receive window that reads nothing for a
    // round: the burst then waits in the server's send buffer. The spent
    // burst's socket (the 128 KiB default) fills and its connection's task
    // writes the rest when the client reads; the kept burst's socket was
    // given room for all of it (`Sink::fit_send_buffer`).
    let befores: Vec<u64> = servers.iter().map(|s| s.3.metrics().socket_full).collect();
    let paused = servers
        .iter()
        .zip(&urls)
        .map(|(s, url)| get_after_a_pause(s.3.local_addr(), url));
    let bodies = futures_util::future::join_all(paused).await;
    for (((lead, _, stored, server), before), body) in servers.iter().zip(befores).zip(bodies) {
        assert!(
            body.ends_with(stored),
            "{}: the body is not the stored stream",
            lead.name()
        );
        let full = server.metrics().socket_full - before;
        eprintln!(
            "{}, a client that waits a round: socket full {full} times",
            lead.name()
        );
        match lead {
            BurstLead::Spent => assert!(
                full > 0,
                "spent: the burst fitted the default buffer, so this case shows nothing"
            ),
            BurstLead::Kept => assert_eq!(full, 0, "kept: the burst did not fit its socket"),
        }
    }
}

/// GETs `url` over a socket with a 4 KiB receive buffer, reads nothing for
/// a round and a half, then reads the whole answer (head and body).
async fn get_after_a_pause(addr: std::net::SocketAddr, url: &str) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let path = &url[url.find("/stream/").expect("a stream URL")..];
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_nanos(
        TEST_ROUND_DURATION_NS * 3 / 2,
    ))
    .await;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    answer
}
