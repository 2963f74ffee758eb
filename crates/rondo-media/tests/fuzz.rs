//! Fuzzing the container parsers (`rondo_testkit::fuzz`): real MP4
//! (faststart and moov-at-end) and MPEG-TS clips made with ffmpeg, damaged
//! at random, through `prepare_bytes` and `mp4_codecs` and, for MP4
//! headers, `mp4_seek`.
//! A damaged file is refused with an error or accepted with a consistent
//! frame curve; nothing panics. Short by default; `RONDO_SLOW_TESTS=1`
//! runs each target for `RONDO_FUZZ_SECONDS` (600).

use std::path::Path;

use rondo_media::container::prepare_bytes;
use rondo_media::container::seek::mp4_seek;
use rondo_testkit::fuzz::fuzz;
use rondo_testkit::media::{Clip, require_tool};

/// Largest fuzzed input: a 1 s clip is about 60 KB.
const SIZE_MAX: usize = 256 * 1024;

fn clip(dir: &Path, name: &str, container: &[&str]) -> Vec<u8> {
    let path = Clip::video("testsrc2=size=64x48:rate=10")
        .sine()
        .seconds(1)
        .args([
            "-c:v",
            "libx264",
            "-preset",
            "ultrafast",
            "-pix_fmt",
            "yuv420p",
        ])
        .args(["-g", "5", "-c:a", "aac", "-b:a", "32k", "-threads", "1"])
        .args(container)
        .make(dir.join(name));
    std::fs::read(path).unwrap()
}

fn regressions(target: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz-regressions")
        .join(target)
}

/// A damaged file is refused, or accepted with frames that add up; its
/// codec strings (what the player page asks the browser) never panic.
fn prepare_target(input: &[u8]) {
    let _ = rondo_media::container::mp4_codecs(input);
    if let Ok(p) = prepare_bytes(input) {
        let frame_bytes: u64 = p.frames.iter().map(|f| f.bytes).sum();
        assert_eq!(frame_bytes, p.stored_bytes - p.header_bytes);
    }
}

#[test]
fn fuzz_mp4_and_ts_parsing() {
    require_tool("ffmpeg");
    let dir = tempfile::tempdir().unwrap();
    let corpus = vec![
        clip(dir.path(), "a.mp4", &["-movflags", "+faststart"]),
        clip(dir.path(), "b.mp4", &[]),
        clip(dir.path(), "c.ts", &["-f", "mpegts"]),
    ];
    let report = fuzz(
        "containers",
        "cargo test -p rondo-media --test fuzz fuzz_mp4_and_ts_parsing",
        corpus,
        &regressions("containers"),
        SIZE_MAX,
        prepare_target,
    );
    assert!(report.executions > 0);
}

#[test]
fn fuzz_mp4_seek_headers() {
    require_tool("ffmpeg");
    let dir = tempfile::tempdir().unwrap();
    let file = clip(dir.path(), "a.mp4", &["-movflags", "+faststart"]);
    let header_bytes = prepare_bytes(&file).unwrap().header_bytes as usize;
    let stored_bytes = file.len() as u64;
    let header = file[..header_bytes].to_vec();
    let report = fuzz(
        "mp4-seek",
        "cargo test -p rondo-media --test fuzz fuzz_mp4_seek_headers",
        vec![header],
        &regressions("mp4-seek"),
        SIZE_MAX,
        |input| {
            for t_ns in [0, 300_000_000, 2_000_000_000] {
                let _ = mp4_seek(input, stored_bytes, t_ns);
            }
        },
    );
    assert!(report.executions > 0);
}
