//! End to end over real HTTP: `?t=SECONDS` starts at the video keyframe at
//! or before t. A data directory with 4 emulated Cheetah disks and 1 s
//! rounds holds a 32 s faststart MP4 and a 32 s MPEG-TS (H.264 + AAC,
//! 25 fps, GOP 2 s) made by ffmpeg at test time. Against one running
//! server, at the same time, for each title:
//!
//! - `GET ?t=11.3` answers 200 with an exact Content-Length; the response
//!   starts at the keyframe at 10 s (`x-rondo-start-seconds`); after its
//!   in-memory prefix (the MP4's rewritten header; none for the TS) the body
//!   is exactly the stored stream from `x-rondo-first-byte` on;
//! - ffprobe reads the response (saved to a file) and reports the source's
//!   duration minus the keyframe time (MP4: within a frame; TS: within
//!   0.2 s, as the audio muxed ahead of the keyframe comes along) and the
//!   source's frames from the keyframe on; the first video frame is a keyframe; `ffmpeg -v error`
//!   decodes it without a message;
//! - HEAD gives the same Content-Length; `t` past the end is a 416 JSON
//!   error with the duration; a bad `t` is a 400.
//!
//! Afterwards no admitted stream missed a deadline.

mod e2e_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use e2e_support::*;
use reqwest::StatusCode;
use reqwest::header::CONTENT_LENGTH;
use rondo_server::RunningServer;
use rondo_testkit::media::Clip;

const SECONDS: u32 = 32;
const FPS: u64 = 25;
const GOP_FRAMES: u64 = 50;

/// A 320×240 25 fps H.264 + AAC clip with a 2 s GOP.
fn make_clip(dir: &Path, name: &str, ts: bool) -> PathBuf {
    let gop = GOP_FRAMES.to_string();
    let clip = Clip::video("testsrc2=size=320x240:rate=25")
        .sine()
        .seconds(SECONDS)
        .args(["-c:v", "libx264", "-preset", "veryfast"])
        .args(["-pix_fmt", "yuv420p", "-g", &gop, "-keyint_min", &gop])
        .args(["-sc_threshold", "0", "-b:v", "400k", "-threads", "1"])
        .args(["-c:a", "aac", "-b:a", "64k"]);
    let clip = if ts {
        clip.args(["-f", "mpegts"])
    } else {
        clip.args(["-movflags", "+faststart"])
    };
    clip.make(dir.join(name))
}

struct Title {
    name: String,
    url: String,
    stored: Vec<u8>,
    source: PathBuf,
    out: PathBuf,
}

fn header_u64(headers: &reqwest::header::HeaderMap, name: &str) -> u64 {
    headers[name].to_str().unwrap().parse().unwrap()
}

/// ffprobe's verdict on the first video frame: is it a keyframe?
fn first_frame_is_key(path: &Path) -> bool {
    let out = Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-select_streams",
            "v:0",
            "-read_intervals",
            "%+#1",
        ])
        .args(["-show_entries", "frame=key_frame", "-of", "json"])
        .arg(path)
        .output()
        .expect("ffprobe runs");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["frames"][0]["key_frame"].as_i64() == Some(1)
}

/// `ffmpeg -v error -i FILE -f null -`: what it prints (nothing when clean).
fn decode_errors(path: &Path) -> String {
    let out = Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(path)
        .args(["-f", "null", "-"])
        .output()
        .expect("ffmpeg runs");
    assert!(out.status.success(), "ffmpeg failed on {}", path.display());
    String::from_utf8_lossy(&out.stderr).trim().to_string()
}

async fn seek_starts_at_the_keyframe(client: reqwest::Client, title: Arc<Title>) {
    let url = format!("{}?t=11.3", title.url);
    let (status, headers, body, arrivals) = get_timed(&client, &url, None).await;
    assert_eq!(status, StatusCode::OK, "{}", title.name);
    assert_eq!(
        header_u64(&headers, CONTENT_LENGTH.as_str()),
        body.len() as u64
    );
    let start_s: f64 = headers["x-rondo-start-seconds"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let prefix_bytes = header_u64(&headers, "x-rondo-prefix-bytes") as usize;
    let first_byte = header_u64(&headers, "x-rondo-first-byte") as usize;
    // The keyframe at or before 11.3 s with a 2 s GOP is the one at 10 s
    // (the TS's times count from its earliest audio/video PTS).
    assert!(
        (start_s - 10.0).abs() < 0.05,
        "{}: starts at {start_s} s",
        title.name
    );
    assert!(
        body[prefix_bytes..] == title.stored[first_byte..],
        "{}",
        title.name
    );
    std::fs::write(&title.out, &body).unwrap();

    let source = ffprobe(title.source.to_str().unwrap());
    let cut = ffprobe(title.out.to_str().unwrap());
    let key_frame_index = (start_s * FPS as f64).round() as u64;
    let expected_s = source.duration_s - start_s;
    eprintln!(
        "{}: t=11.3 → keyframe {start_s:.3} s, prefix {prefix_bytes} B, stored bytes from {first_byte}, \
         {} B in {:.1} s; ffprobe: {:.3} s (expected {expected_s:.3}), {} frames (source {})",
        title.name,
        body.len(),
        arrivals
            .last()
            .map_or(0.0, |a| (a.at - arrivals[0].at).as_secs_f64()),
        cut.duration_s,
        cut.video_frames,
        source.video_frames,
    );
    // MP4: within one frame. TS: the audio muxed just before the keyframe
    // (ffmpeg interleaves audio a few frames ahead) comes along and starts
    // the cut's timeline earlier: within 0.2 s (measured 0.144 s).
    let tolerance_s = if prefix_bytes > 0 {
        1.0 / FPS as f64
    } else {
        0.2
    };
    assert!(
        (cut.duration_s - expected_s).abs() <= tolerance_s + 1e-3,
        "{}: {} s, expected {expected_s} s",
        title.name,
        cut.duration_s
    );
    assert!(
        cut.video_frames
            .abs_diff(source.video_frames - key_frame_index)
            <= 1,
        "{}: {} frames, expected {}",
        title.name,
        cut.video_frames,
        source.video_frames - key_frame_index
    );
    if prefix_bytes > 0 {
        // MP4: exact.
        assert_eq!(cut.video_frames, source.video_frames - key_frame_index);
    }
    assert!(first_frame_is_key(&title.out), "{}", title.name);
    let errors = decode_errors(&title.out);
    assert!(
        errors.is_empty(),
        "{}: decoding reported {errors}",
        title.name
    );

    // HEAD: the same length, nothing admitted.
    let head = client.head(&url).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::OK);
    assert_eq!(
        header_u64(head.headers(), CONTENT_LENGTH.as_str()),
        body.len() as u64
    );
}

async fn bad_times_are_clear_errors(client: reqwest::Client, title: Arc<Title>) {
    let r = client
        .get(format!("{}?t=40", title.url))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::RANGE_NOT_SATISFIABLE,
        "{}",
        title.name
    );
    let body: serde_json::Value = r.json().await.unwrap();
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("past the end"), "{error}");
    assert!(body["duration_seconds"].as_f64().unwrap() > 31.0);
    let r = client
        .get(format!("{}?t=soon", title.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("not a time"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn time_seeks_start_at_the_keyframe_at_or_before_t() {
    init_logs();
    let dir = tempfile::tempdir().unwrap();
    let media = dir.path().join("media");
    std::fs::create_dir(&media).unwrap();
    let (a, b) = (media.clone(), media.clone());
    let makers = [
        std::thread::spawn(move || make_clip(&a, "seek.mp4", false)),
        std::thread::spawn(move || make_clip(&b, "seek.ts", true)),
    ];
    let sources: Vec<PathBuf> = makers.into_iter().map(|m| m.join().unwrap()).collect();
    let store = create_store(&dir.path().join("data"));
    let mut stored = Vec::new();
    for source in &sources {
        let name = source
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .replace('.', "-");
        let record = ingest(&store, source, &name);
        stored.push((record.id.0, name, stored_stream(&store, &record)));
    }
    let server: Arc<RunningServer> = Arc::new(start(store, test_config()).await);
    let base = server.url();
    let client = reqwest::Client::new();
    let titles: Vec<Arc<Title>> = stored
        .into_iter()
        .zip(&sources)
        .map(|((id, name, stored), source)| {
            let ext = source.extension().unwrap().to_str().unwrap();
            Arc::new(Title {
                url: format!("{base}/stream/{id}.{ext}"),
                out: dir.path().join(format!("out-{name}.{ext}")),
                name,
                stored,
                source: source.clone(),
            })
        })
        .collect();
    let mut tasks = tokio::task::JoinSet::new();
    for title in &titles {
        tasks.spawn(seek_starts_at_the_keyframe(
            client.clone(),
            Arc::clone(title),
        ));
        tasks.spawn(bad_times_are_clear_errors(
            client.clone(),
            Arc::clone(title),
        ));
    }
    while let Some(result) = tasks.join_next().await {
        result.expect("a check failed");
    }
    let m = server.metrics();
    assert_eq!(
        m.stream_round_misses, 0,
        "no admitted stream missed a deadline"
    );
    match Arc::try_unwrap(server) {
        Ok(server) => server.shutdown().await,
        Err(_) => panic!("the server is still shared"),
    }
}
