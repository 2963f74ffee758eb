//! MPEG-TS start-up in real players, measured: ffmpeg and mpv play a 10 s
//! MPEG-TS title over HTTP from a running server (4 emulated Cheetah disks,
//! 1 s rounds); the test times the first decoded frame (ffmpeg's
//! `showinfo` frame 0, mpv's `--term-playing-msg`) and the player's exit
//! from the request, prints the numbers with the server's admissions (each
//! request a player made), and checks that both play the whole title.
//!
//! Both players ask for the title three times: from the start (to probe
//! it), its last 250 kB (to find the duration from the last timestamps),
//! and from the start again. Each request waits for a round boundary and
//! one round's read, and the tail's rounds are sent one per round, so
//! start-up is several rounds (`docs/server.md`, "MPEG-TS start-up"); the
//! bounds asserted here (first frame within 20 s in ffmpeg, 15 s in mpv)
//! are today's (14.0 s, 9.9 s) with a margin, a guard against it getting
//! worse, not the 2 s the issue asks for.
//!
//! About 40 s: it runs only with `RONDO_SLOW_TESTS=1`. mpv is optional
//! (skipped with a note when absent); ffmpeg is required.

mod e2e_support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Instant;

use e2e_support::*;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ts_start_up_in_ffmpeg_and_mpv() {
    init_logs();
    if std::env::var_os("RONDO_SLOW_TESTS").is_none() {
        eprintln!("SKIPPED: set RONDO_SLOW_TESTS=1 to measure MPEG-TS start-up (about 40 s)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let clip = make_media(dir.path(), "clip", MediaKind::Ts, 10);
    let store = create_store(&dir.path().join("data"));
    let record = ingest(&store, &clip, "clip");
    let server = start(store, test_config()).await;
    let url = format!("{}/stream/{}.ts", server.url(), record.id.0);

    let mut ffmpeg = Command::new("ffmpeg");
    ffmpeg.args([
        "-hide_banner",
        "-nostats",
        "-i",
        &url,
        "-vf",
        "showinfo",
        "-f",
        "null",
        "-",
    ]);
    let (ffmpeg_start, ffmpeg_end, ffmpeg_ok, ffmpeg_text) = tokio::task::block_in_place(|| {
        timed(ffmpeg, |l| {
            l.contains("Parsed_showinfo")
                && l.split("n:")
                    .nth(1)
                    .is_some_and(|n| n.trim_start().starts_with("0 "))
        })
    });
    let frames = ffmpeg_text
        .lines()
        .filter(|l| l.contains("Parsed_showinfo") && l.contains(" pts:"))
        .count();
    let admitted_ffmpeg = server.metrics().admitted;
    eprintln!(
        "ffmpeg: first frame {ffmpeg_start:?} s, exit {ffmpeg_end:.2} s, {frames} frames, \
         {admitted_ffmpeg} requests admitted"
    );
    assert!(ffmpeg_ok, "{ffmpeg_text}");
    assert_eq!(frames, 250, "10 s at 25 fps");
    let ffmpeg_start = ffmpeg_start.expect("a first frame");
    assert!(
        ffmpeg_start < 20.0 && ffmpeg_end < 35.0,
        "{ffmpeg_start} {ffmpeg_end}"
    );

    if mpv_available() {
        let mut mpv = Command::new("mpv");
        mpv.args([
            "--no-config",
            "--vo=null",
            "--ao=null",
            "--term-playing-msg=RONDO-PLAYING",
            &url,
        ]);
        let (mpv_start, mpv_end, mpv_ok, mpv_text) =
            tokio::task::block_in_place(|| timed(mpv, |l| l.contains("RONDO-PLAYING")));
        let admitted_mpv = server.metrics().admitted - admitted_ffmpeg;
        eprintln!(
            "mpv: playing {mpv_start:?} s, exit {mpv_end:.2} s, {admitted_mpv} requests admitted"
        );
        assert!(mpv_ok, "{mpv_text}");
        assert!(mpv_text.contains("End of file"), "{mpv_text}");
        let mpv_start = mpv_start.expect("mpv says it plays");
        assert!(mpv_start < 15.0 && mpv_end < 30.0, "{mpv_start} {mpv_end}");
    } else {
        eprintln!("NOTE: mpv is not installed; only ffmpeg was measured");
    }
    let m = server.metrics();
    server.shutdown().await;
    assert_eq!(m.stream_round_misses, 0, "{m:?}");
}
