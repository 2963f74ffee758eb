//! The README's first steps, as a new user takes them: in an empty
//! directory, `rondo serve` with no arguments creates `./rondo-data` with
//! the sample titles and prints the player's and the API's URLs; the player
//! page lists the titles in a `<video>` page; `rondo ingest my.mp4`, run
//! beside the running server, adds a title that then streams and that
//! ffprobe reads over HTTP; SIGTERM stops the server cleanly.
//!
//! The server listens on the default 127.0.0.1:8080 when that port is free
//! (exactly the README's command); otherwise on a free port, with a note.

use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use rondo_testkit::media::{Clip, Probe, X264_ULTRAFAST, ffprobe_frames};
use rondo_testkit::process::Serve;
use serde_json::Value;
use tempfile::TempDir;

/// Time for a first start: creating the array and storing three samples on
/// a loaded 2-core CI machine.
const START_TIMEOUT: Duration = Duration::from_secs(180);

fn rondo(cwd: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rondo"));
    command.current_dir(cwd);
    command
}

fn make_mp4(path: &Path, seconds: u32) {
    Clip::video(format!("testsrc2=size=320x240:rate=25:duration={seconds}"))
        .audio(format!("sine=frequency=440:duration={seconds}"))
        .args(X264_ULTRAFAST)
        .args(["-c:a", "aac", "-movflags", "+faststart"])
        .make(path);
}

fn get_json(url: &str) -> Value {
    let response = reqwest::blocking::get(url).unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert!(
        response.status().is_success(),
        "GET {url}: {}",
        response.status()
    );
    response.json().unwrap()
}

fn titles(api: &str) -> Vec<Value> {
    get_json(&format!("{api}/titles"))
        .as_array()
        .expect("GET /api/titles answers a JSON array")
        .clone()
}

/// A title's stream URL, absolute or relative to the server.
fn stream_url(base: &str, title: &Value) -> String {
    let url = title["stream_url"]
        .as_str()
        .expect("stream_url is a string");
    if url.starts_with("http://") {
        url.to_string()
    } else {
        format!("{base}{url}")
    }
}

#[test]
fn serve_with_no_arguments_then_ingest_beside_it() {
    let home = TempDir::new().unwrap();
    let clip = home.path().join("my.mp4");
    make_mp4(&clip, 6);

    let mut serve = Serve::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(home.path())
        .stderr_inherit()
        .timeout(START_TIMEOUT);
    if TcpListener::bind("127.0.0.1:8080").is_err() {
        println!("NOTE: 127.0.0.1:8080 is busy; serving on a free port instead of the default");
        serve = serve.args(["--listen", "127.0.0.1:0"]);
    }
    let mut server = serve.start();
    let player_url = server.url.clone();
    let api = format!("{player_url}/api");
    assert!(
        home.path().join("rondo-data").join("rondo.toml").exists(),
        "serve created ./rondo-data"
    );

    // The sample titles, each with a stream URL that answers HEAD.
    let samples = titles(&api);
    assert_eq!(samples.len(), 3, "three sample titles: {samples:?}");
    for title in &samples {
        assert!(title["duration_seconds"].as_f64().unwrap() > 1.0, "{title}");
        let url = stream_url(&player_url, title);
        let head = reqwest::blocking::Client::new().head(&url).send().unwrap();
        assert_eq!(head.status(), 200, "HEAD {url}");
        assert_eq!(head.headers()["content-type"], "video/mp4", "HEAD {url}");
    }
    // The player page lists titles into a <video> element.
    let page = reqwest::blocking::get(format!("{player_url}/"))
        .unwrap()
        .text()
        .unwrap();
    assert!(page.contains("<video"), "the player page has a <video>");
    assert!(page.contains("/api/titles"), "the player page lists titles");

    // `rondo ingest my.mp4` beside the running server: handed to it.
    let output = rondo(home.path())
        .args(["ingest", "my.mp4", "--json"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "rondo ingest my.mp4: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let after = titles(&api);
    assert_eq!(after.len(), 4, "{after:?}");
    let mine = after
        .iter()
        .find(|t| t["name"] == "my")
        .unwrap_or_else(|| panic!("a title named after the file's stem: {after:?}"));
    let url = stream_url(&player_url, mine);
    let Probe {
        duration_s,
        video_frames: frames,
    } = ffprobe_frames(&url);
    assert!(
        (duration_s - 6.0).abs() < 0.1,
        "ffprobe over HTTP: {duration_s} s"
    );
    assert_eq!(frames, 150, "6 s at 25 fps");

    // SIGTERM: a clean stop, and the data directory is free again.
    let status = server.terminate();
    assert!(status.success(), "serve exits 0 on SIGTERM: {status:?}");
    let output = rondo(home.path()).args(["fsck"]).output().unwrap();
    assert!(
        output.status.success(),
        "fsck after the stop: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A first start on a busy port fails and leaves no token behind, so the
/// next start creates the token and prints it (it used to be created before
/// the bind and never shown). The start-up lines name the dashboard and an
/// ingest command the user can run as printed.
#[test]
fn a_busy_port_at_the_first_start_does_not_hide_the_token() {
    let home = TempDir::new().unwrap();
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy.local_addr().unwrap().to_string();
    let output = rondo(home.path())
        .args(["serve", "--no-samples", "--listen", &busy_addr])
        .env("RONDO_LOG", "warn")
        .output()
        .unwrap();
    assert!(!output.status.success(), "serve on a busy port must fail");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&busy_addr),
        "the error names the address: {stderr}"
    );
    let token_file = home.path().join("rondo-data").join("token");
    assert!(
        !token_file.exists(),
        "a start that could not bind created the token without showing it"
    );
    drop(busy);

    let mut server = Serve::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(home.path())
        .args(["--no-samples", "--listen", "127.0.0.1:0"])
        .timeout(START_TIMEOUT)
        .stderr_to(home.path().join("first.log"))
        .start();
    let printed = server.printed.join("\n");
    let token = std::fs::read_to_string(&token_file).unwrap();
    let token_line = server
        .printed
        .iter()
        .find(|l| l.contains("API token"))
        .unwrap_or_else(|| panic!("no token line:\n{printed}"));
    assert!(
        token_line.contains("shown once") && token_line.contains(token.trim()),
        "{printed}"
    );
    assert!(
        printed.contains(&format!("dashboard: {}/dashboard", server.url)),
        "{printed}"
    );
    let hint = server
        .printed
        .iter()
        .find(|l| l.contains("ingest FILE"))
        .unwrap_or_else(|| panic!("no ingest hint:\n{printed}"));
    // Under cargo (which sets CARGO) the binary is not on PATH: the hint
    // says `cargo run --`; otherwise it repeats how the binary was started.
    let expected = if std::env::var_os("CARGO").is_some() {
        "cargo run --"
    } else {
        env!("CARGO_BIN_EXE_rondo")
    };
    assert!(hint.contains(expected), "{hint}");
    let status = server.terminate();
    assert!(status.success(), "{status:?}\n{}", server.log());

    // A second start does not show the token again, but says where it is.
    let mut again = Serve::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(home.path())
        .args(["--listen", "127.0.0.1:0"])
        .timeout(START_TIMEOUT)
        .stderr_to(home.path().join("again.log"))
        .start();
    let printed = again.printed.join("\n");
    assert!(!printed.contains(token.trim()), "{printed}");
    assert!(
        printed.contains("rondo-data/token (`rondo admin` reads it there)"),
        "{printed}"
    );
    let status = again.terminate();
    assert!(status.success(), "{status:?}\n{}", again.log());
}

/// `rondo serve --stride-bytes` (the size a too-high-bitrate title's
/// refusal suggests) makes a new data directory with that stride; an
/// existing directory refuses another, and a stride that is not a multiple
/// of the block is refused before anything is created.
#[test]
fn serve_creates_a_directory_with_the_stride_asked_for() {
    let home = TempDir::new().unwrap();
    let odd = rondo(home.path())
        .args([
            "serve",
            "--no-samples",
            "--data-dir",
            "odd",
            "--stride-bytes",
            "1000",
        ])
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!odd.status.success());
    let stderr = String::from_utf8_lossy(&odd.stderr);
    assert!(
        stderr.contains("--stride-bytes must be a positive multiple"),
        "{stderr}"
    );
    assert!(!home.path().join("odd").exists(), "nothing created");

    let mut server = Serve::new(env!("CARGO_BIN_EXE_rondo"))
        .current_dir(home.path())
        .args([
            "--no-samples",
            "--data-dir",
            "big",
            "--stride-bytes",
            "8388608",
        ])
        .args(["--listen", "127.0.0.1:0"])
        .timeout(START_TIMEOUT)
        .start();
    let status = server.terminate();
    assert!(status.success(), "{status:?}");
    let toml = std::fs::read_to_string(home.path().join("big").join("rondo.toml")).unwrap();
    assert!(toml.contains("stride_bytes = 8388608"), "{toml}");

    let again = rondo(home.path())
        .args([
            "serve",
            "--no-samples",
            "--data-dir",
            "big",
            "--stride-bytes",
            "4194304",
        ])
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!again.status.success());
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(
        stderr.contains("--stride-bytes") && stderr.contains("8388608"),
        "{stderr}"
    );
}

/// The failure-tolerance settings a new data directory is created with
/// (`--backup-window-rounds`, `--loss-notice-rounds`, `--overrun-probability`) are its `[serving]`
/// defaults: a later `rondo serve` without flags uses them, and flags
/// override them for one run without changing rondo.toml.
#[test]
fn serve_keeps_the_serving_settings_a_directory_was_created_with() {
    let home = TempDir::new().unwrap();
    let run = |flags: &[&str]| {
        let mut server = Serve::new(env!("CARGO_BIN_EXE_rondo"))
            .current_dir(home.path())
            .args(["--no-samples", "--data-dir", "windowed"])
            .args(flags)
            .args(["--listen", "127.0.0.1:0"])
            .timeout(START_TIMEOUT)
            .start();
        let disks = get_json(&format!("{}/api/disks", server.url));
        let status = server.terminate();
        assert!(status.success(), "{status:?}");
        disks["failure_tolerance"].clone()
    };
    let created = run(&[
        "--backup-window-rounds",
        "3",
        "--loss-notice-rounds",
        "2",
        "--overrun-probability",
        "1e-6",
    ]);
    assert_eq!(created["backup_window_rounds"], 3, "{created}");
    assert_eq!(created["loss_notice_rounds"], 2, "{created}");
    assert_eq!(created["scheme"], "minimum", "{created}");
    let toml_path = home.path().join("windowed").join("rondo.toml");
    let toml = std::fs::read_to_string(&toml_path).unwrap();
    assert!(
        toml.contains("[serving]")
            && toml.contains("backup_window_rounds = 3")
            && toml.contains("loss_notice_rounds = 2"),
        "{toml}"
    );
    // No flags: the directory's settings.
    let again = run(&[]);
    assert_eq!(again["backup_window_rounds"], 3, "{again}");
    assert_eq!(again["loss_notice_rounds"], 2, "{again}");
    assert_eq!(again["guarantee"]["overrun_probability"], 1e-6, "{again}");
    // A flag overrides for one run; rondo.toml is unchanged.
    let overridden = run(&["--backup-window-rounds", "2", "--loss-notice-rounds", "0"]);
    assert_eq!(overridden["backup_window_rounds"], 2, "{overridden}");
    assert_eq!(overridden["loss_notice_rounds"], 0, "{overridden}");
    assert_eq!(std::fs::read_to_string(&toml_path).unwrap(), toml);
    // Out of range: refused by the flag's parser, naming it.
    let bad = rondo(home.path())
        .args([
            "serve",
            "--data-dir",
            "windowed",
            "--backup-window-rounds",
            "0",
        ])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("--backup-window-rounds"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}
