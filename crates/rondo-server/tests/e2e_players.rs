//! MPEG-TS start-up in real players, measured: ffmpeg and mpv play a 10 s
//! MPEG-TS title over HTTP from a running server (4 emulated Cheetah disks,
//! 1 s rounds); the test times the first decoded frame (ffmpeg's
//! `showinfo` frame 0, mpv's `--term-playing-msg`) and the player's exit
//! from the request, prints the numbers with the server's admissions (each
//! request a player made), and checks that both play the whole title.
//!
//! Both players ask for the title more than once: from the start (to probe
//! it: libavformat reads 5 s of its timestamps), its last 250 kB (to find
//! the duration; ffmpeg reads on to it through its first connection, mpv
//! asks for it), and from the start again. Each request starts in the round
//! in progress when the disks have room (a late start), and its first six
//! seconds (a title this short: all of it) come at once (the start burst),
//! so a request costs a read, not rounds (`docs/server.md`, "MPEG-TS
//! start-up"). Measured twice: on an idle server, and with 24 other streams
//! playing. Asserted: issue 18's target, the first frame within 2 s and
//! the end within 12 s of the request, in both players, with no deadline
//! missed.
//!
//! To measure the server without one or both (docs/server.md's table),
//! set `RONDO_START_BURST_S`, `RONDO_START_BURST_BYTES` or
//! `RONDO_LATE_START=0`: the numbers are printed and the target is then
//! not asserted (the players must still play the whole title).
//!
//! About 60 s: it runs only with `RONDO_SLOW_TESTS=1`. mpv is optional
//! (skipped with a note when absent); ffmpeg is required.

mod e2e_support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Instant;

use e2e_support::*;
use rondo_server::RunningServer;

/// Runs `command`, and returns (seconds to the first line `started`
/// accepts, seconds to exit, whether it exited 0, its output).
fn timed(mut command: Command, started: fn(&str) -> bool) -> (Option<f64>, f64, bool, String) {
    let t0 = Instant::now();
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the player starts");
    // Both streams, merged line by line with their arrival time.
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, String)>();
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    let tx2 = tx.clone();
    let readers = [
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send((Instant::now(), line));
            }
        }),
        std::thread::spawn(move || {
            // mpv and ffmpeg end status lines with \r: split on both.
            let mut reader = BufReader::new(err);
            let mut buf = Vec::new();
            while reader.read_until(b'\n', &mut buf).is_ok_and(|n| n > 0) {
                for part in String::from_utf8_lossy(&buf).split('\r') {
                    let _ = tx2.send((Instant::now(), part.trim_end().to_string()));
                }
                buf.clear();
            }
        }),
    ];
    let status = child.wait().expect("the player runs");
    let ended_s = t0.elapsed().as_secs_f64();
    for r in readers {
        let _ = r.join();
    }
    let mut first = None;
    let mut text = String::new();
    for (at, line) in rx.try_iter() {
        if first.is_none() && started(&line) {
            first = Some(at.duration_since(t0).as_secs_f64());
        }
        text.push_str(&line);
        text.push('\n');
    }
    (first, ended_s, status.success(), text)
}

fn mpv_available() -> bool {
    Command::new("mpv")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Plays the title in ffmpeg, then in mpv; asserts the target and returns
/// the numbers as a table row.
fn play_both(server: &RunningServer, url: &str, label: &str, target: bool) -> String {
    let mut ffmpeg = Command::new("ffmpeg");
    ffmpeg.args([
        "-hide_banner",
        "-nostats",
        "-i",
        url,
        "-vf",
        "showinfo",
        "-f",
        "null",
        "-",
    ]);
    let admitted_before = server.metrics().admitted;
    let (ffmpeg_start, ffmpeg_end, ffmpeg_ok, ffmpeg_text) = timed(ffmpeg, |l| {
        l.contains("Parsed_showinfo")
            && l.split("n:")
                .nth(1)
                .is_some_and(|n| n.trim_start().starts_with("0 "))
    });
    let frames = ffmpeg_text
        .lines()
        .filter(|l| l.contains("Parsed_showinfo") && l.contains(" pts:"))
        .count();
    let admitted_ffmpeg = server.metrics().admitted - admitted_before;
    eprintln!(
        "{label}: ffmpeg: first frame {ffmpeg_start:?} s, exit {ffmpeg_end:.2} s, {frames} frames, \
         {admitted_ffmpeg} requests admitted"
    );
    assert!(ffmpeg_ok, "{ffmpeg_text}");
    assert_eq!(frames, 250, "10 s at 25 fps");
    let ffmpeg_start = ffmpeg_start.expect("a first frame");
    assert!(
        !target || (ffmpeg_start < 2.0 && ffmpeg_end < 12.0),
        "{label}: ffmpeg started after {ffmpeg_start} s and ended after {ffmpeg_end} s"
    );
    let mut row = format!(
        "| {label} | ffmpeg | {ffmpeg_start:.2} s | {ffmpeg_end:.2} s | {admitted_ffmpeg} |\n"
    );
    if mpv_available() {
        let mut mpv = Command::new("mpv");
        mpv.args([
            "--no-config",
            "--vo=null",
            "--ao=null",
            "--term-playing-msg=RONDO-PLAYING",
            url,
        ]);
        let admitted_before = server.metrics().admitted;
        let (mpv_start, mpv_end, mpv_ok, mpv_text) = timed(mpv, |l| l.contains("RONDO-PLAYING"));
        let admitted_mpv = server.metrics().admitted - admitted_before;
        eprintln!(
            "{label}: mpv: playing {mpv_start:?} s, exit {mpv_end:.2} s, {admitted_mpv} requests admitted"
        );
        assert!(mpv_ok, "{mpv_text}");
        assert!(mpv_text.contains("End of file"), "{mpv_text}");
        let mpv_start = mpv_start.expect("mpv says it plays");
        assert!(
            !target || (mpv_start < 2.0 && mpv_end < 12.0),
            "{label}: mpv started after {mpv_start} s and ended after {mpv_end} s"
        );
        row += &format!("| {label} | mpv | {mpv_start:.2} s | {mpv_end:.2} s | {admitted_mpv} |\n");
    } else {
        eprintln!("NOTE: mpv is not installed; only ffmpeg was measured");
    }
    row
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ts_start_up_in_ffmpeg_and_mpv() {
    init_logs();
    if std::env::var_os("RONDO_SLOW_TESTS").is_none() {
        eprintln!("SKIPPED: set RONDO_SLOW_TESTS=1 to measure MPEG-TS start-up (about 60 s)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let clip = make_media(dir.path(), "clip", MediaKind::Ts, 10);
    let filler = make_media(dir.path(), "filler", MediaKind::Mp4Faststart, 40);
    let store = create_store(&dir.path().join("data"));
    let record = ingest(&store, &clip, "clip");
    let filler = ingest(&store, &filler, "filler");
    // The server's defaults unless the environment asks otherwise (then
    // the target is not asserted: a measurement of the parts alone).
    let mut config = test_config();
    let env = |name: &str| std::env::var(name).ok();
    let defaults = [
        "RONDO_START_BURST_S",
        "RONDO_START_BURST_BYTES",
        "RONDO_LATE_START",
    ]
    .iter()
    .all(|name| env(name).is_none());
    if let Some(s) = env("RONDO_START_BURST_S") {
        config.start_burst = std::time::Duration::from_secs_f64(s.parse().expect("seconds"));
    }
    if let Some(b) = env("RONDO_START_BURST_BYTES") {
        config.start_burst_bytes = b.parse().expect("bytes");
    }
    if let Some(l) = env("RONDO_LATE_START") {
        config.late_start = l != "0";
    }
    let server = start(store, config).await;
    let url = format!("{}/stream/{}.ts", server.url(), record.id.0);

    let mut table = tokio::task::block_in_place(|| play_both(&server, &url, "idle", defaults));

    // 24 other streams, started over two rounds and read as they come.
    let client = reqwest::Client::new();
    let filler_url = format!("{}/stream/{}.mp4", server.url(), filler.id.0);
    let mut others = Vec::new();
    for _ in 0..24 {
        let response = client.get(&filler_url).send().await.unwrap();
        assert_eq!(response.status(), 200, "the server has room for 24 streams");
        others.push(tokio::spawn(async move {
            let mut body = response.bytes_stream();
            while let Some(Ok(_)) = futures_util::StreamExt::next(&mut body).await {}
        }));
        tokio::time::sleep(std::time::Duration::from_millis(80)).await;
    }
    table +=
        &tokio::task::block_in_place(|| play_both(&server, &url, "24 other streams", defaults));
    eprintln!(
        "| server | player | first frame | exit | requests |\n|---|---|---|---|---|\n{table}"
    );
    for task in others {
        task.abort();
    }
    let m = server.metrics();
    server.shutdown().await;
    assert_eq!(m.stream_round_misses, 0, "{m:?}");
    assert_eq!(m.disk_round_overruns, 0, "{m:?}");
    // The players' requests started in the round in progress.
    assert!(!defaults || m.admitted_late_start >= 4, "{m:?}");
}
