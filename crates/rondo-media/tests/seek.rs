//! Keyframes and the MP4 seek rewrite, checked with ffmpeg/ffprobe on media
//! made at test time.
//!
//! Each test makes 12 s clips (320×240, 25 fps, GOP 2 s, 48 kHz sine) with
//! ffmpeg, prepares them, compares the keyframes with ffprobe's packet
//! flags, cuts MP4s at a time with `mp4_seek` and has ffprobe and ffmpeg
//! read and decode the cut file (new header + the stored stream's tail):
//! duration ≈ source − keyframe time, the right frame count, a keyframe
//! first, no decode errors. A proptest-style loop damages a real header at
//! random and checks that `mp4_seek` returns an error or a header, never
//! panics.

use std::path::{Path, PathBuf};
use std::process::Command;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rondo_media::container::seek::{SeekError, mp4_seek};
use rondo_media::container::{PreparedMedia, prepare};
use rondo_testkit::media::{Clip, X264_ULTRAFAST_BFRAMES, has_encoder, require_tool};
use serde_json::Value;
use tempfile::TempDir;

const CLIP_SECONDS: f64 = 12.0;
const FPS: u64 = 25;
const GOP_FRAMES: u64 = 50;
const NS_PER_S: u64 = 1_000_000_000;

/// A clip with testsrc2 video (`video` codec args) and, when `audio`, a sine.
fn make_clip(dir: &Path, name: &str, video: &[&str], audio: bool, extra: &[&str]) -> PathBuf {
    let gop = GOP_FRAMES.to_string();
    let mut clip = Clip::video(format!("testsrc2=size=320x240:rate={FPS}"));
    if audio {
        clip = clip.audio("sine=frequency=440:sample_rate=48000");
    }
    clip = clip.seconds(CLIP_SECONDS).args(video).args([
        "-g",
        &gop,
        "-keyint_min",
        &gop,
        "-sc_threshold",
        "0",
    ]);
    if audio {
        clip = clip.args(["-c:a", "aac"]);
    }
    clip.args(extra).make(dir.join(name))
}

const H264: &[&str] = X264_ULTRAFAST_BFRAMES;
const H265: &[&str] = &[
    "-c:v",
    "libx265",
    "-preset",
    "ultrafast",
    "-x265-params",
    "log-level=error:bframes=2:keyint=50:min-keyint=50:scenecut=0:open-gop=0",
    "-pix_fmt",
    "yuv420p",
    "-tag:v",
    "hvc1",
];

fn stored(path: &Path, prepared: &PreparedMedia) -> Vec<u8> {
    let mut out = Vec::new();
    prepared.write_stored_from_path(path, &mut out).unwrap();
    out
}

fn ffprobe_json(path: &Path, args: &[&str]) -> Value {
    require_tool("ffprobe");
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-of", "json"])
        .args(args)
        .arg(path)
        .output()
        .expect("run ffprobe");
    assert!(
        out.status.success(),
        "ffprobe failed on {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("ffprobe json")
}

/// Presentation times (s) of the video keyframes ffprobe sees, relative to
/// the file's start_time.
fn probed_keyframes(path: &Path) -> Vec<f64> {
    let v = ffprobe_json(
        path,
        &[
            "-select_streams",
            "v:0",
            "-show_entries",
            "packet=pts_time,flags:format=start_time",
        ],
    );
    let start: f64 = v["format"]["start_time"].as_str().unwrap().parse().unwrap();
    let mut out: Vec<f64> = v["packets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["flags"].as_str().unwrap().starts_with('K'))
        .map(|p| p["pts_time"].as_str().unwrap().parse::<f64>().unwrap() - start)
        .collect();
    out.sort_by(f64::total_cmp);
    out
}

/// What ffprobe and ffmpeg say about a cut file.
struct CutCheck {
    duration_s: f64,
    video_frames: u64,
    first_frame_key: bool,
}

fn check_cut(path: &Path) -> CutCheck {
    let v = ffprobe_json(
        path,
        &[
            "-count_frames",
            "-select_streams",
            "v:0",
            "-show_entries",
            "stream=nb_read_frames:format=duration",
        ],
    );
    let duration_s: f64 = v["format"]["duration"].as_str().unwrap().parse().unwrap();
    let video_frames: u64 = v["streams"][0]["nb_read_frames"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let first = ffprobe_json(
        path,
        &[
            "-select_streams",
            "v:0",
            "-read_intervals",
            "%+#1",
            "-show_entries",
            "frame=key_frame,pict_type",
        ],
    );
    let first_frame_key = first["frames"][0]["key_frame"].as_i64() == Some(1);
    let decode = Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(path)
        .args(["-f", "null", "-"])
        .output()
        .expect("run ffmpeg");
    let errors = String::from_utf8_lossy(&decode.stderr);
    assert!(
        decode.status.success() && errors.trim().is_empty(),
        "decoding {} reported errors: {errors}",
        path.display()
    );
    CutCheck {
        duration_s,
        video_frames,
        first_frame_key,
    }
}

fn source_duration_s(path: &Path) -> f64 {
    let v = ffprobe_json(path, &["-show_entries", "format=duration"]);
    v["format"]["duration"].as_str().unwrap().parse().unwrap()
}

/// Cuts `path` at each time and checks the result with ffprobe and ffmpeg.
fn check_mp4_seeks(dir: &Path, path: &Path, times_s: &[f64]) {
    let prepared = prepare(path).unwrap();
    let bytes = stored(path, &prepared);
    let header = &bytes[..prepared.header_bytes as usize];
    let source_s = source_duration_s(path);
    let frames = prepared.info.video_frames;
    for &t in times_s {
        let t_ns = (t * NS_PER_S as f64) as u64;
        let cut = mp4_seek(header, prepared.stored_bytes, t_ns).unwrap();
        // The keyframe is the last one at or before t, as `keyframes` lists.
        let expected = prepared
            .keyframes
            .iter()
            .rev()
            .find(|k| k.time_ns <= t_ns)
            .unwrap_or(&prepared.keyframes[0]);
        assert_eq!(cut.start_time_ns, expected.time_ns, "t={t}");
        let key_frame_index = expected.time_ns * FPS / NS_PER_S;
        assert_eq!(cut.video_frames, frames - key_frame_index, "t={t}");
        let out_path = dir.join(format!(
            "{}-cut-{t}.mp4",
            path.file_stem().unwrap().to_string_lossy()
        ));
        let mut file = cut.header.clone();
        file.extend_from_slice(&bytes[cut.media_first_byte as usize..]);
        assert_eq!(file.len() as u64, cut.total_bytes(prepared.stored_bytes));
        std::fs::write(&out_path, &file).unwrap();
        let checked = check_cut(&out_path);
        let key_s = cut.start_time_ns as f64 / 1e9;
        let frame_s = 1.0 / FPS as f64;
        assert!(
            (checked.duration_s - (source_s - key_s)).abs() <= frame_s + 1e-3,
            "t={t}: cut lasts {} s, source {source_s} s − keyframe {key_s} s",
            checked.duration_s
        );
        assert_eq!(checked.video_frames, cut.video_frames, "t={t}");
        assert!(
            checked.first_frame_key,
            "t={t}: first frame is not a keyframe"
        );
        eprintln!(
            "{}: t={t} → keyframe {key_s:.3} s, {} frames, {:.3} s (source {source_s:.3} s), \
             header {} bytes, tail from byte {}",
            path.display(),
            checked.video_frames,
            checked.duration_s,
            cut.header.len(),
            cut.media_first_byte
        );
    }
}

#[test]
fn mp4_keyframes_match_ffprobe_and_cuts_play() {
    let dir = TempDir::new().unwrap();
    let faststart = make_clip(
        dir.path(),
        "h264.mp4",
        H264,
        true,
        &["-movflags", "+faststart"],
    );
    let at_end = make_clip(dir.path(), "h264-end.mp4", H264, true, &[]);
    let silent = make_clip(
        dir.path(),
        "silent.mp4",
        H264,
        false,
        &["-movflags", "+faststart"],
    );
    for path in [&faststart, &at_end, &silent] {
        let prepared = prepare(path).unwrap();
        let times: Vec<f64> = prepared
            .keyframes
            .iter()
            .map(|k| k.time_ns as f64 / 1e9)
            .collect();
        let probed = probed_keyframes(path);
        assert_eq!(times.len(), probed.len(), "{}", path.display());
        for (ours, theirs) in times.iter().zip(&probed) {
            assert!((ours - theirs).abs() < 1e-3, "{ours} vs {theirs}");
        }
        assert_eq!(
            times.len() as u64,
            prepared.info.video_frames.div_ceil(GOP_FRAMES)
        );
        // Byte offsets are samples' stored offsets, in order.
        assert!(
            prepared
                .keyframes
                .windows(2)
                .all(|w| w[0].byte_offset < w[1].byte_offset)
        );
        assert!(prepared.keyframes[0].byte_offset >= prepared.header_bytes);
        check_mp4_seeks(dir.path(), path, &[0.0, 3.99, 4.0, 11.3]);
    }
}

#[test]
fn h265_mp4_cuts_play() {
    if !has_encoder("libx265") {
        eprintln!("skipped: this ffmpeg has no libx265");
        return;
    }
    let dir = TempDir::new().unwrap();
    let path = make_clip(
        dir.path(),
        "h265.mp4",
        H265,
        true,
        &["-movflags", "+faststart"],
    );
    let prepared = prepare(&path).unwrap();
    assert_eq!(prepared.keyframes.len(), probed_keyframes(&path).len());
    check_mp4_seeks(dir.path(), &path, &[5.0, 11.3]);
}

#[test]
fn ts_keyframes_start_at_the_program_tables() {
    let dir = TempDir::new().unwrap();
    let mut cases = vec![("h264.ts", H264.to_vec())];
    if has_encoder("libx265") {
        cases.push(("h265.ts", H265[..H265.len() - 2].to_vec()));
    }
    cases.push((
        "mpeg2.ts",
        vec!["-c:v", "mpeg2video", "-bf", "2", "-q:v", "5"],
    ));
    for (name, video) in cases {
        let path = make_clip(dir.path(), name, &video, true, &[]);
        let prepared = prepare(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let probed = probed_keyframes(&path);
        assert_eq!(prepared.keyframes.len(), probed.len(), "{name}: {probed:?}");
        for (ours, theirs) in prepared.keyframes.iter().zip(&probed) {
            // Our times count from the earliest audio or video PTS, ffprobe's
            // from its start_time: the same instant up to rounding.
            assert!(
                (ours.time_ns as f64 / 1e9 - theirs).abs() < 0.05,
                "{name}: {} vs {theirs}",
                ours.time_ns
            );
            let at = ours.byte_offset as usize;
            assert_eq!(at % 188, 0);
            assert_eq!(bytes[at], 0x47);
            // ffmpeg repeats the SDT/PAT/PMT before every video keyframe.
            let pid = (((bytes[at + 1] & 0x1f) as u16) << 8) | bytes[at + 2] as u16;
            assert!(
                pid == 0 || pid == 0x11,
                "{name}: keyframe entry at PID {pid:#x}"
            );
        }
        // A file starting at a keyframe decodes without errors and starts
        // with a keyframe.
        let k = &prepared.keyframes[prepared.keyframes.len() / 2];
        let cut_path = dir.path().join(format!("cut-{name}"));
        std::fs::write(&cut_path, &bytes[k.byte_offset as usize..]).unwrap();
        let checked = check_cut(&cut_path);
        assert!(checked.first_frame_key, "{name}");
        let expected_frames = prepared.info.video_frames - k.time_ns * FPS / NS_PER_S;
        assert!(
            checked.video_frames.abs_diff(expected_frames) <= 1,
            "{name}: {} frames, expected {expected_frames}",
            checked.video_frames
        );
    }
}

#[test]
fn seeking_past_the_end_or_into_a_fragmented_file_is_refused() {
    let dir = TempDir::new().unwrap();
    let path = make_clip(
        dir.path(),
        "h264.mp4",
        H264,
        true,
        &["-movflags", "+faststart"],
    );
    let prepared = prepare(&path).unwrap();
    let bytes = stored(&path, &prepared);
    let header = &bytes[..prepared.header_bytes as usize];
    let err = mp4_seek(header, prepared.stored_bytes, 60 * NS_PER_S).unwrap_err();
    assert!(matches!(err, SeekError::PastEnd { .. }), "{err}");
    assert!(err.to_string().contains("past the end"), "{err}");
    let fragmented = make_clip(
        dir.path(),
        "frag.mp4",
        H264,
        true,
        &["-movflags", "+frag_keyframe+empty_moov"],
    );
    let prepared = prepare(&fragmented).unwrap();
    let bytes = stored(&fragmented, &prepared);
    let err = mp4_seek(
        &bytes[..prepared.header_bytes as usize],
        prepared.stored_bytes,
        NS_PER_S,
    )
    .unwrap_err();
    assert!(err.to_string().contains("fragmented"), "{err}");
    // A header cut short is refused by name.
    let err = mp4_seek(&header[..header.len() - 10], prepared.stored_bytes, 0).unwrap_err();
    assert!(err.to_string().contains("moov"), "{err}");
}

/// Random damage to a real header: `mp4_seek` returns, never panics, and
/// whatever header it returns has consistent sizes.
#[test]
fn damaged_real_headers_never_panic() {
    let dir = TempDir::new().unwrap();
    let path = make_clip(
        dir.path(),
        "h264.mp4",
        H264,
        true,
        &["-movflags", "+faststart"],
    );
    let prepared = prepare(&path).unwrap();
    let bytes = stored(&path, &prepared);
    let header = bytes[..prepared.header_bytes as usize].to_vec();
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let (mut refused, mut accepted) = (0, 0);
    for _ in 0..1500 {
        let mut damaged = header.clone();
        for _ in 0..rng.random_range(1..6) {
            let at = rng.random_range(0..damaged.len());
            damaged[at] = match rng.random_range(0..3) {
                0 => rng.random(),
                1 => 0xff,
                _ => 0,
            };
        }
        if rng.random_range(0..4) == 0 {
            let keep = rng.random_range(0..damaged.len());
            damaged.truncate(keep);
        }
        let t_ns = rng.random_range(0..15 * NS_PER_S);
        match mp4_seek(&damaged, prepared.stored_bytes, t_ns) {
            Ok(cut) => {
                accepted += 1;
                assert!(cut.media_first_byte <= prepared.stored_bytes);
                check_box_sizes(&cut.header, prepared.stored_bytes - cut.media_first_byte);
            }
            Err(e) => {
                refused += 1;
                assert!(!e.to_string().is_empty());
            }
        }
    }
    eprintln!("damaged headers: {accepted} cut, {refused} refused");
    assert!(refused > 0);
}

/// The top-level boxes of a cut header add up: whole boxes, then an `mdat`
/// header declaring exactly the tail that follows it.
fn check_box_sizes(header: &[u8], tail_bytes: u64) {
    let mut pos = 0usize;
    loop {
        let size = u32::from_be_bytes(header[pos..pos + 4].try_into().unwrap()) as u64;
        let kind = &header[pos + 4..pos + 8];
        let (size, head) = if size == 1 {
            (
                u64::from_be_bytes(header[pos + 8..pos + 16].try_into().unwrap()),
                16,
            )
        } else {
            (size, 8)
        };
        if kind == b"mdat" {
            assert_eq!(pos + head, header.len());
            assert_eq!(size, head as u64 + tail_bytes);
            return;
        }
        pos += size as usize;
        assert!(pos < header.len());
    }
}
