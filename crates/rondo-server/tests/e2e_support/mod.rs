//! Shared by the end-to-end tests: media made with ffmpeg at test time, a
//! data directory with short rounds, a running server, and small HTTP and
//! ffprobe helpers (those not specific to rondo-server's own API come from
//! rondo-testkit and are re-exported here).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

// Not every test uses every helper (as `dead_code` above).
#[allow(unused_imports)]
pub use rondo_testkit::browser::available as chromium_available;
#[allow(unused_imports)]
pub use rondo_testkit::http::{get_json, get_text};
use rondo_testkit::media::Clip;
#[allow(unused_imports)]
pub use rondo_testkit::media::ffprobe_frames as ffprobe;

use rondo_model::layout::Replica;
use rondo_model::units::DiskIndex;
use rondo_server::ingest::{Unthrottled, ingest_file};
use rondo_server::titles::default_store_config;
use rondo_server::{RunningServer, ServerConfig};
use rondo_store::{Store, StoreConfig, TitleRecord};

/// Round length of the test data directories: the default 1 s. Shorter
/// rounds would not make the tests quicker (streams play in real time) and
/// leave less room for a busy test machine's scheduling delays.
pub const TEST_ROUND_DURATION_NS: u64 = 1_000_000_000;

/// What kind of file to make.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum MediaKind {
    /// H.264 + AAC MP4 with `moov` first.
    Mp4Faststart,
    /// H.264 + AAC MP4 with `moov` at the end (stored as its faststart rewrite).
    Mp4MoovAtEnd,
    /// H.264 + AAC MPEG-TS.
    Ts,
}

/// Makes a `seconds`-long 320×240 25 fps clip with a 1 s GOP and a 440 Hz
/// tone, at a roughly constant bitrate, and returns its path.
pub fn make_media(dir: &Path, name: &str, kind: MediaKind, seconds: u32) -> PathBuf {
    make_media_padded(dir, name, kind, seconds, None)
}

/// [`make_media`]; an MPEG-TS is padded with null packets to a constant
/// `ts_mux_kbps` when given (a high bitrate without a costly encode).
pub fn make_media_padded(
    dir: &Path,
    name: &str,
    kind: MediaKind,
    seconds: u32,
    ts_mux_kbps: Option<u32>,
) -> PathBuf {
    let ext = if kind == MediaKind::Ts { "ts" } else { "mp4" };
    let mut clip = Clip::video("testsrc2=size=320x240:rate=25")
        .sine()
        .seconds(seconds)
        .args([
            "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p",
        ])
        .args(["-g", "25", "-keyint_min", "25", "-sc_threshold", "0"])
        .args(["-b:v", "400k", "-maxrate", "400k", "-bufsize", "400k"])
        .args(["-c:a", "aac", "-b:a", "64k", "-threads", "1"]);
    match kind {
        MediaKind::Mp4Faststart => clip = clip.args(["-movflags", "+faststart"]),
        MediaKind::Mp4MoovAtEnd => {}
        MediaKind::Ts => clip = clip.args(["-f", "mpegts"]),
    }
    if let Some(kbps) = ts_mux_kbps {
        assert_eq!(kind, MediaKind::Ts, "only a TS is padded");
        clip = clip.args(["-muxrate", &format!("{kbps}k")]);
    }
    clip.make(dir.join(format!("{name}.{ext}")))
}

/// A data directory with the `rondo serve` defaults (4 Cheetah disks,
/// `minimum` + `deterministic`) and [`TEST_ROUND_DURATION_NS`] rounds.
pub fn create_store(dir: &Path) -> Store {
    let config = StoreConfig {
        round_duration_ns: TEST_ROUND_DURATION_NS,
        ..default_store_config()
    };
    Store::create(dir, config).expect("create the data directory")
}

/// Ingests `path` as title `name` (no server running yet).
pub fn ingest(store: &Store, path: &Path, name: &str) -> TitleRecord {
    ingest_file(store, path, Some(name), 0, &Unthrottled, &|_, _| {})
        .unwrap_or_else(|e| panic!("ingest {}: {e}", path.display()))
}

/// The stored stream of a title, read back round by round from its primary
/// replica with every checksum verified.
pub fn stored_stream(store: &Store, record: &TitleRecord) -> Vec<u8> {
    let title = store.load_title(record.id).expect("load title");
    let mut out = Vec::with_capacity(record.size_bytes as usize);
    for round in 0..record.client_bytes.len() {
        out.extend(
            store
                .read_round(&title, round, Replica::Primary)
                .expect("read round"),
        );
    }
    out
}

/// Test server settings: port 0 on loopback, defaults otherwise.
pub fn test_config() -> ServerConfig {
    ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..ServerConfig::default()
    }
}

/// Starts a server on `store`.
pub async fn start(store: Store, config: ServerConfig) -> RunningServer {
    RunningServer::start(store, config)
        .await
        .expect("the server starts")
}

/// One chunk of a response body as the client received it.
#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    pub at: Instant,
    /// Bytes received so far, this chunk included.
    pub total_bytes: u64,
}

/// GETs `url` (with an optional Range), returning status, headers, the body
/// and when each chunk arrived.
pub async fn get_timed(
    client: &reqwest::Client,
    url: &str,
    range: Option<&str>,
) -> (
    reqwest::StatusCode,
    reqwest::header::HeaderMap,
    Vec<u8>,
    Vec<Arrival>,
) {
    use futures_util::StreamExt;
    let mut request = client.get(url);
    if let Some(range) = range {
        request = request.header(reqwest::header::RANGE, range);
    }
    let response = request.send().await.expect("request sent");
    let status = response.status();
    let headers = response.headers().clone();
    let mut body = Vec::new();
    let mut arrivals = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.expect("body chunk");
        body.extend_from_slice(&chunk);
        arrivals.push(Arrival {
            at: Instant::now(),
            total_bytes: body.len() as u64,
        });
    }
    (status, headers, body, arrivals)
}

/// Bytes received by `t` according to `arrivals`.
pub fn received_by(arrivals: &[Arrival], t: Instant) -> u64 {
    arrivals
        .iter()
        .take_while(|a| a.at <= t)
        .last()
        .map_or(0, |a| a.total_bytes)
}

/// Polls `f` every 50 ms until it returns true or `timeout` passes.
pub async fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Logs to stderr when `RONDO_LOG` is set (e.g. `RONDO_LOG=rondo_server=debug`).
pub fn init_logs() {
    if let Ok(filter) = std::env::var("RONDO_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}

/// [`create_store`] with another reservation scheme (e.g. `unreserved`, the
/// negative control of the failure tests).
pub fn create_store_with_scheme(dir: &Path, scheme: rondo_model::reservation::Scheme) -> Store {
    let config = StoreConfig {
        round_duration_ns: TEST_ROUND_DURATION_NS,
        scheme,
        ..default_store_config()
    };
    Store::create(dir, config).expect("create the data directory")
}

/// POSTs to a control endpoint with the bearer token (`None`: without it)
/// and an optional JSON body; returns the status and the JSON answer.
pub async fn admin_post(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    body: Option<serde_json::Value>,
) -> (reqwest::StatusCode, serde_json::Value) {
    let mut request = client.post(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("request sent");
    let status = response.status();
    let value = response.json().await.unwrap_or(serde_json::Value::Null);
    (status, value)
}

/// Checks, after a rebuild of `disk`, that every round with a replica on it
/// reads the same bytes from both replicas; returns how many rounds it
/// compared.
pub fn assert_replicas_agree_on(store: &Store, titles: &[TitleRecord], disk: DiskIndex) -> usize {
    let mut compared = 0;
    for record in titles {
        let title = store.load_title(record.id).unwrap();
        for (round, layout) in title.layout.rounds().iter().enumerate() {
            let on_disk =
                layout.primary_disk == disk || layout.backups.iter().any(|b| b.disk == disk);
            if on_disk && !layout.primary.is_empty() {
                let primary = store.read_round(&title, round, Replica::Primary).unwrap();
                let backup = store.read_round(&title, round, Replica::Backup).unwrap();
                assert_eq!(primary, backup, "title {} round {round}", record.id.0);
                compared += 1;
            }
        }
    }
    compared
}

/// Wall seconds per model second of the test jukebox farms: an exchange and
/// spin-up (17.3 s) take 3.5 s.
pub const TIME_SCALE: f64 = 0.2;

/// Makes an emulated jukebox farm `vault` in the data directory (seed 002's
/// NSM Satellite, [`TIME_SCALE`] times real time, 8 slots per jukebox) and
/// names it in tiers.toml.
pub fn add_jukebox(data: &Path, stripe_factor: u32) {
    use rondo_tier::jukebox::{EmulatedJukebox, FarmConfig};
    use rondo_tier::{JukeboxTierConfig, TierConfig, TierKind, TiersFile};
    let config = FarmConfig {
        time_scale: TIME_SCALE,
        stripe_factor,
        slots: 8,
        ..FarmConfig::default()
    };
    EmulatedJukebox::create(&data.join("vault"), &config).unwrap();
    TiersFile {
        tiers: vec![TierConfig {
            name: "vault".into(),
            kind: TierKind::Jukebox(JukeboxTierConfig {
                path: "vault".into(),
            }),
        }],
    }
    .write(data)
    .unwrap();
}

/// Stores `file` on the `vault` tier as title `name` (no server running).
pub fn to_tier(store: &Store, data: &Path, file: &Path, name: &str) {
    let tier = rondo_tier::jukebox::EmulatedJukebox::open("vault", &data.join("vault")).unwrap();
    let source = file.file_name().unwrap().to_string_lossy().into_owned();
    rondo_server::ingest::ingest_to_tier(store, &tier, "vault", file, &source, Some(name), 0)
        .unwrap_or_else(|e| panic!("to the tier: {e}"));
}

/// What one client saw.
#[derive(Debug)]
pub struct ClientResult {
    pub status: u16,
    pub expected_bytes: u64,
    pub received_bytes: u64,
    /// The body ended with an error (the server stopped the stream).
    pub broken: bool,
    /// Playback stalls with a two-round playout delay.
    pub stalls: u32,
    /// CRC32C of the body as received.
    pub body_crc: u32,
}

/// Plays `url` like a player that starts two rounds after the first byte
/// and consumes the title's schedule round by round.
pub async fn play(client: reqwest::Client, url: String, client_bytes: Vec<u64>) -> ClientResult {
    use futures_util::StreamExt;
    let response = client.get(&url).send().await.expect("request sent");
    let status = response.status().as_u16();
    let expected_bytes: u64 = client_bytes.iter().sum();
    let mut result = ClientResult {
        status,
        expected_bytes,
        received_bytes: 0,
        broken: false,
        stalls: 0,
        body_crc: 0,
    };
    if status != 200 {
        return result;
    }
    let mut arrivals = Vec::new();
    let mut body = response.bytes_stream();
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(chunk) => {
                result.received_bytes += chunk.len() as u64;
                result.body_crc = rondo_store::checksum_append(result.body_crc, &chunk);
                arrivals.push(Arrival {
                    at: Instant::now(),
                    total_bytes: result.received_bytes,
                });
            }
            Err(_) => {
                result.broken = true;
                break;
            }
        }
    }
    if let Some(first) = arrivals.first() {
        let round = Duration::from_nanos(TEST_ROUND_DURATION_NS);
        let start = first.at + 2 * round;
        let mut needed = 0u64;
        for (i, bytes) in client_bytes.iter().enumerate() {
            needed += bytes;
            if needed > result.received_bytes {
                break;
            }
            if received_by(&arrivals, start + round * i as u32) < needed {
                result.stalls += 1;
            }
        }
    }
    result
}
