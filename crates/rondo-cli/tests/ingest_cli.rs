//! End-to-end tests of `rondo ingest` and `rondo fsck`, run as the built
//! binary on media made with ffmpeg at test time: local ingest into a
//! missing directory (created with `rondo serve`'s defaults) and into an
//! existing one, several files with one bad, upload to the server that owns
//! a directory (a stand-in HTTP server checks the request), fsck finding a
//! flipped byte, and a `rondo ingest` killed with SIGKILL mid-write: fsck
//! passes, the next open removes the partial title and frees its space, and
//! the complete titles read back identically.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rondo_media::container::prepare;
use rondo_model::layout::Replica;
use rondo_server::ingest::handoff::{SERVER_INFO_FILE, ServerInfo, TOKEN_FILE};
use rondo_server::titles::default_store_config;
use rondo_store::{ArrayId, HEADER_REGION_BYTES, Store, StoreConfig, TitleRecord};
use rondo_testkit::media::{Clip, X264_ULTRAFAST};
use rondo_testkit::process::stdout_json;
use tempfile::TempDir;

const MIB: u64 = 1024 * 1024;

fn rondo() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rondo"))
}

fn run(args: &[&str]) -> Output {
    rondo().args(args).output().unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn assert_ok(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        stderr(output)
    );
}

/// Makes `dir/name` with ffmpeg: `video` (a lavfi source) and a sine tone,
/// `seconds` long, H.264 (ultrafast) + AAC, then `extra` arguments.
fn make_media(dir: &Path, name: &str, video: &str, seconds: u32, extra: &[&str]) -> PathBuf {
    Clip::video(video)
        .sine()
        .seconds(seconds)
        .args(X264_ULTRAFAST)
        .args(["-g", "30", "-c:a", "aac"])
        .args(extra)
        .make(dir.join(name))
}

const TESTSRC: &str = "testsrc2=size=320x240:rate=30";

fn small_mp4(dir: &Path, name: &str) -> PathBuf {
    make_media(dir, name, TESTSRC, 4, &["-movflags", "+faststart"])
}

/// A data directory with four sparse 256 MiB disks.
fn create_store(dir: &Path, seed: u64) {
    let mut config = StoreConfig::new(4, "cheetah-4lp", 256 * MIB);
    config.array_id = Some(ArrayId::from_seed(seed));
    Store::create(dir, config).unwrap();
}

fn text(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The stored stream of `path`, as the media crate writes it.
fn expected_stream(path: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    prepare(path)
        .unwrap()
        .write_stored_from_path(path, &mut out)
        .unwrap();
    out
}

/// Every round of title `record`, primary and backup, concatenated.
fn read_back(store: &Store, record: &TitleRecord) -> Vec<u8> {
    let title = store.load_title(record.id).unwrap();
    let mut out = Vec::new();
    for round in 0..record.client_bytes.len() {
        let primary = store.read_round(&title, round, Replica::Primary).unwrap();
        let backup = store.read_round(&title, round, Replica::Backup).unwrap();
        assert!(primary == backup, "round {round}: replicas differ");
        out.extend_from_slice(&primary);
    }
    out
}

#[test]
fn ingest_creates_a_missing_directory_with_the_serve_defaults() {
    let dir = TempDir::new().unwrap();
    let clip = small_mp4(dir.path(), "clip.mp4");
    let data = dir.path().join("rondo-data");

    let output = run(&["ingest", "--data-dir", text(&data), text(&clip)]);
    assert_ok(&output, "rondo ingest");
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(
        out.contains("stored") && out.contains("as \"clip\" (title 0)"),
        "{out}"
    );
    assert!(stderr(&output).contains("created data directory"));

    let store = Store::open(&data).unwrap();
    let config = store.config();
    let defaults = default_store_config();
    assert_eq!(config.disk_count, defaults.disk_count);
    assert_eq!(config.disk_profile, "cheetah-4lp");
    assert_eq!(config.scheme.name(), "minimum");
    assert_eq!(config.placement, defaults.placement);
    assert_eq!(config.devices[0].capacity_bytes, defaults.capacity_bytes);
    let titles = store.titles().unwrap();
    assert_eq!(titles.len(), 1);
    assert!(read_back(&store, &titles[0]) == expected_stream(&clip));
    drop(store);

    // --name names one file only; a taken name fails and exits non-zero.
    let output = run(&[
        "ingest",
        "--data-dir",
        text(&data),
        "--name",
        "x",
        text(&clip),
        text(&clip),
    ]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("--name names one title"));
    let output = run(&["ingest", "--data-dir", text(&data), text(&clip)]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("a title named \"clip\" already exists"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn several_files_each_stored_or_refused_with_json_results() {
    let dir = TempDir::new().unwrap();
    let data = dir.path().join("data");
    create_store(&data, 11);
    let mp4 = small_mp4(dir.path(), "first.mp4");
    let ts = make_media(dir.path(), "second.ts", TESTSRC, 5, &["-f", "mpegts"]);
    let junk = dir.path().join("junk.mp4");
    std::fs::write(&junk, b"this is not a video at all").unwrap();

    let output = run(&[
        "ingest",
        "--data-dir",
        text(&data),
        "--json",
        text(&mp4),
        text(&junk),
        text(&ts),
    ]);
    assert!(!output.status.success(), "one file failed: exit non-zero");
    assert!(stderr(&output).contains("1 of 3 files were not stored; the other 2 were"));
    let results = stdout_json(&output);
    let results = results.as_array().unwrap();
    assert_eq!(results.len(), 3);
    assert_eq!(results[0]["ok"], true);
    assert_eq!(results[0]["title"]["name"], "first");
    assert_eq!(results[0]["title"]["content_type"], "video/mp4");
    assert_eq!(results[1]["ok"], false);
    assert_eq!(results[1]["file"], text(&junk));
    let error = results[1]["error"].as_str().unwrap();
    assert!(
        error.starts_with(text(&junk)) && error.contains("not an MP4 or MPEG-TS file"),
        "{error}"
    );
    assert_eq!(results[2]["ok"], true);
    assert_eq!(results[2]["title"]["name"], "second");
    assert_eq!(results[2]["title"]["content_type"], "video/mp2t");

    let store = Store::open(&data).unwrap();
    let titles = store.titles().unwrap();
    let names: Vec<&str> = titles.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["first", "second"]);
    assert_eq!(
        results[2]["title"]["size_bytes"].as_u64(),
        Some(titles[1].size_bytes)
    );
    assert!(read_back(&store, &titles[1]) == expected_stream(&ts));
}

#[test]
fn fsck_passes_a_good_directory_and_fails_a_flipped_byte() {
    let dir = TempDir::new().unwrap();
    let data = dir.path().join("data");
    create_store(&data, 12);
    let clip = small_mp4(dir.path(), "clip.mp4");
    assert_ok(
        &run(&["ingest", "--data-dir", text(&data), text(&clip)]),
        "ingest",
    );

    let output = run(&["fsck", "--data-dir", text(&data)]);
    assert_ok(&output, "fsck");
    assert!(String::from_utf8_lossy(&output.stdout).contains(": passed"));
    assert_eq!(
        stdout_json(&run(&["fsck", "--data-dir", text(&data), "--json"]))["status"],
        "passed"
    );

    // Degraded: two disks recorded failed (the rest of the directory is
    // sound): its own exit status, and data with no working replica listed.
    std::fs::write(
        data.join("disk-state.toml"),
        "[failed.0]\nreason = \"x\"\nsince_unix_s = 1\n[failed.1]\nreason = \"x\"\nsince_unix_s = 1\n",
    )
    .unwrap();
    let output = run(&["fsck", "--data-dir", text(&data), "--json"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let report = stdout_json(&output);
    assert_eq!(report["status"], "degraded", "{report}");
    assert_eq!(report["failed_disks"], serde_json::json!([0, 1]));
    assert!(
        report["lost_rounds"]
            .as_array()
            .is_some_and(|l| !l.is_empty()),
        "{report}"
    );
    let output = run(&["fsck", "--data-dir", text(&data)]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stdout).contains("DEGRADED"));
    std::fs::remove_file(data.join("disk-state.toml")).unwrap();

    // Flip one byte inside round 1's primary extent.
    let store = Store::open(&data).unwrap();
    let title = store.load_title(store.titles().unwrap()[0].id).unwrap();
    let extent = title.round_extents(1, Replica::Primary)[0];
    let device = store.config().device_path(&data, extent.disk.0 as usize);
    drop(store);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&device)
        .unwrap();
    let at = HEADER_REGION_BYTES + extent.device_offset_bytes + 100;
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, at).unwrap();
    file.write_all_at(&[byte[0] ^ 0xff], at).unwrap();
    drop(file);

    let output = run(&["fsck", "--data-dir", text(&data)]);
    assert!(!output.status.success());
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(out.contains("FAILED with 1 problem(s)"), "{out}");
    assert!(
        out.contains("[checksum] title 0 \"clip\" round 1 primary"),
        "{out}"
    );
    assert!(stderr(&output).contains("fsck found 1 problem(s)"));
    let output = run(&["fsck", "--data-dir", text(&data), "--json"]);
    assert!(!output.status.success());
    let report = stdout_json(&output);
    assert_eq!(report["problems"][0]["kind"], "checksum");

    // Not a data directory.
    let output = run(&["fsck", "--data-dir", text(dir.path())]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).contains("not a rondo data directory"));
}

/// One HTTP request as the stand-in server received it.
struct Received {
    request_line: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Accepts one connection on `listener`, reads one request with a
/// Content-Length body, answers `status` with `body` (JSON), and returns
/// what it received.
fn serve_once(listener: &TcpListener, status: &str, body: &str) -> Received {
    let (stream, _) = listener.accept().unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    reader.read_line(&mut request_line).unwrap();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').unwrap();
        headers.push((name.trim().to_string(), value.trim().to_string()));
    }
    let mut received = Received {
        request_line: request_line.trim_end().to_string(),
        headers,
        body: Vec::new(),
    };
    let len: usize = received
        .header("content-length")
        .map_or(0, |l| l.parse().unwrap());
    received.body = vec![0; len];
    reader.read_exact(&mut received.body).unwrap();
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    received
}

/// Answers `rondo ingest`'s identity question (it carries no token).
fn answer_identity(listener: &TcpListener, identity: &str) {
    let asked = serve_once(listener, "200 OK", identity);
    assert_eq!(asked.request_line, "GET /api/server-id HTTP/1.1");
    assert_eq!(asked.header("authorization"), None, "no token to ask");
}

#[test]
fn a_directory_owned_by_a_server_gets_the_file_uploaded() {
    let dir = TempDir::new().unwrap();
    let data = dir.path().join("data");
    create_store(&data, 13);
    let clip = small_mp4(dir.path(), "my clip.mp4");
    // This test process owns the directory, as a running server would.
    let store = Store::open(&data).unwrap();

    let output = run(&["ingest", "--data-dir", text(&data), text(&clip)]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("has no server.json"),
        "{}",
        stderr(&output)
    );

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let array_id = rondo_store::ArrayConfig::load(&data)
        .unwrap()
        .array_id
        .to_string();
    ServerInfo {
        url: url.clone(),
        pid: std::process::id(),
        array_id: array_id.clone(),
        instance_id: "start-1".into(),
    }
    .write(&data)
    .unwrap();
    // The server answers who it is first (no credentials), then the upload.
    let identity = serde_json::json!({"array_id": array_id, "instance_id": "start-1"}).to_string();

    std::fs::write(data.join(TOKEN_FILE), "s3cret-token\n").unwrap();
    assert!(data.join(SERVER_INFO_FILE).exists());

    let title = serde_json::json!({"id": 7, "name": "a&b", "size_bytes": 123});
    let server = {
        let listener = listener.try_clone().unwrap();
        let body = title.to_string();
        let identity = identity.clone();
        std::thread::spawn(move || {
            answer_identity(&listener, &identity);
            serve_once(&listener, "201 Created", &body)
        })
    };
    let output = run(&[
        "ingest",
        "--data-dir",
        text(&data),
        "--name",
        "a&b",
        "--json",
        text(&clip),
    ]);
    let received = server.join().unwrap();
    assert_ok(&output, "upload");
    assert_eq!(
        received.request_line,
        "POST /api/admin/titles?name=a%26b&file=my+clip.mp4 HTTP/1.1"
    );
    assert_eq!(
        received.header("authorization"),
        Some("Bearer s3cret-token")
    );
    assert_eq!(
        received.header("content-type"),
        Some("application/octet-stream")
    );
    assert!(received.body == std::fs::read(&clip).unwrap());
    let results = stdout_json(&output);
    assert_eq!(results[0]["ok"], true);
    assert_eq!(results[0]["title"], title);

    // Without --name the file's stem names it; a refusal is reported with
    // the server's message and a non-zero exit.
    let server = {
        let listener = listener.try_clone().unwrap();
        let identity = identity.clone();
        std::thread::spawn(move || {
            answer_identity(&listener, &identity);
            serve_once(
                &listener,
                "409 Conflict",
                r#"{"error": "a title named \"my clip\" already exists"}"#,
            )
        })
    };
    let output = run(&["ingest", "--data-dir", text(&data), text(&clip)]);
    let received = server.join().unwrap();
    assert_eq!(
        received.request_line,
        "POST /api/admin/titles?name=my+clip&file=my+clip.mp4 HTTP/1.1"
    );
    assert!(!output.status.success());
    let err = stderr(&output);
    assert!(
        err.contains("409") && err.contains("a title named \"my clip\" already exists"),
        "{err}"
    );
    // Nothing was written locally while the server owned the directory.
    assert!(store.titles().unwrap().is_empty());
}

/// A stale `server.json` (its server crashed) points at a port another
/// listener holds now: it is asked who it is, cannot answer this
/// directory's ids, and never receives the token.
#[test]
fn a_stale_server_json_pointing_at_a_foreign_listener_sends_no_token() {
    let dir = TempDir::new().unwrap();
    let data = dir.path().join("data");
    create_store(&data, 17);
    let clip = small_mp4(dir.path(), "clip.mp4");
    let array_id = rondo_store::ArrayConfig::load(&data)
        .unwrap()
        .array_id
        .to_string();
    let _store = Store::open(&data).unwrap();
    std::fs::write(data.join(TOKEN_FILE), "s3cret-token\n").unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    ServerInfo {
        url: format!("http://{}", listener.local_addr().unwrap()),
        pid: 999_999,
        array_id: array_id.clone(),
        instance_id: "crashed-start".into(),
    }
    .write(&data)
    .unwrap();
    // Two foreign listeners: one that answers anything with a page (and
    // would take any upload), one that is another rondo (another start).
    let foreign_answers = [
        (
            "200 OK",
            "<html>hello</html>".to_string(),
            "does not answer",
        ),
        (
            "200 OK",
            serde_json::json!({"array_id": array_id, "instance_id": "another-start"}).to_string(),
            "another start",
        ),
    ];
    for (status, body, said) in foreign_answers {
        let foreign = {
            let listener = listener.try_clone().unwrap();
            std::thread::spawn(move || {
                // Everything it receives before the client gives up.
                let mut seen = vec![serve_once(&listener, status, &body)];
                listener.set_nonblocking(true).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(500));
                while let Ok((stream, _)) = listener.accept() {
                    let mut text = String::new();
                    let _ = BufReader::new(stream).read_line(&mut text);
                    seen.push(Received {
                        request_line: text,
                        headers: Vec::new(),
                        body: Vec::new(),
                    });
                }
                listener.set_nonblocking(false).unwrap();
                seen
            })
        };
        let output = run(&["ingest", "--data-dir", text(&data), text(&clip)]);
        let seen = foreign.join().unwrap();
        assert!(!output.status.success());
        let err = stderr(&output);
        assert!(
            err.contains("not this directory's server") && err.contains("No token was sent"),
            "{err}"
        );
        assert!(err.contains(said), "{err}");
        assert_eq!(
            seen.len(),
            1,
            "only the identity question: {:?}",
            seen.len()
        );
        assert_eq!(seen[0].request_line, "GET /api/server-id HTTP/1.1");
        assert!(
            seen.iter().all(|r| r.header("authorization").is_none()
                && !String::from_utf8_lossy(&r.body).contains("s3cret")),
            "the token never left"
        );
    }
}

/// Bytes allocated on the array's devices (sparse files).
fn allocated_bytes(store_dir: &Path, disks: usize) -> u64 {
    (0..disks)
        .map(|k| {
            std::fs::metadata(store_dir.join(format!("disk-{k}.dev")))
                .unwrap()
                .blocks()
                * 512
        })
        .sum()
}

#[test]
fn a_killed_ingest_leaves_no_trace_and_fsck_passes() {
    let dir = TempDir::new().unwrap();
    let data = dir.path().join("data");
    create_store(&data, 14);
    let first = small_mp4(dir.path(), "first.mp4");
    let second = make_media(dir.path(), "second.ts", TESTSRC, 6, &["-f", "mpegts"]);
    // 60 s at about 1 MB/s: noise does not compress, the VBV caps each second.
    let big = make_media(
        dir.path(),
        "big.mp4",
        "color=gray:size=320x240:rate=30,noise=alls=60:allf=t",
        60,
        &[
            "-b:v",
            "8M",
            "-maxrate",
            "8M",
            "-bufsize",
            "4M",
            "-movflags",
            "+faststart",
        ],
    );
    let big_bytes = std::fs::metadata(&big).unwrap().len();
    assert!(big_bytes > 40 * MIB, "{big_bytes} bytes");

    assert_ok(
        &run(&[
            "ingest",
            "--data-dir",
            text(&data),
            text(&first),
            text(&second),
        ]),
        "ingest",
    );
    let store = Store::open(&data).unwrap();
    let titles_before = store.titles().unwrap();
    let free_before = store.free_strides();
    let streams: Vec<Vec<u8>> = titles_before.iter().map(|t| read_back(&store, t)).collect();
    assert!(streams[0] == expected_stream(&first));
    assert!(streams[1] == expected_stream(&second));
    drop(store);

    let baseline_bytes = allocated_bytes(&data, 4);
    // Both replicas of the big title.
    let title_bytes = 2 * big_bytes;
    let mut child = rondo()
        .args(["ingest", "--data-dir", text(&data), "--json", text(&big)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        let written = allocated_bytes(&data, 4) - baseline_bytes;
        if written >= title_bytes / 10 {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "rondo ingest ended before it could be killed ({written} bytes written)"
        );
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "ingest stalled"
        );
        std::thread::sleep(Duration::from_micros(500));
    }
    // Freeze it, check it is mid-way, then SIGKILL.
    let pid = child.id().to_string();
    // The shell's own `kill`, so no procps is needed.
    let stopped = Command::new("sh")
        .args(["-c", &format!("kill -STOP {pid}")])
        .status()
        .unwrap();
    assert!(stopped.success());
    let written = allocated_bytes(&data, 4) - baseline_bytes;
    assert!(
        written < title_bytes,
        "the title was completely written ({written} of {title_bytes} bytes) before the kill"
    );
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success());

    // fsck passes and lists the interrupted title as an orphan.
    let output = run(&["fsck", "--data-dir", text(&data), "--json"]);
    assert_ok(&output, "fsck after the kill");
    let report = stdout_json(&output);
    assert_eq!(report["orphans"].as_array().unwrap().len(), 1, "{report}");
    assert_eq!(report["orphans"][0]["name"], "big");
    assert_eq!(report["titles_checked"], 2);

    // The next open removes it and frees its space; the others are intact.
    let store = Store::open(&data).unwrap();
    assert_eq!(store.recovered_titles(), ["big".to_string()]);
    assert_eq!(store.titles().unwrap(), titles_before);
    assert_eq!(store.free_strides(), free_before);
    for (record, stream) in titles_before.iter().zip(&streams) {
        assert!(read_back(&store, record) == *stream, "{}", record.name);
    }
    drop(store);

    let output = run(&["fsck", "--data-dir", text(&data)]);
    assert_ok(&output, "fsck after recovery");
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(out.contains(": passed") && !out.contains("orphan"), "{out}");

    // And the same file ingests completely afterwards.
    let output = run(&["ingest", "--data-dir", text(&data), text(&big)]);
    assert_ok(&output, "ingest after recovery");
    let store = Store::open(&data).unwrap();
    let big_title = store.title_by_name("big").unwrap().unwrap();
    assert!(read_back(&store, &big_title) == expected_stream(&big));
}
