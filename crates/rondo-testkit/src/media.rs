//! Media made at test time with ffmpeg.
//!
//! This module owns how a test makes a clip: [`Clip`] is a small builder for
//! one ffmpeg run with lavfi sources as inputs (a video source, optionally an
//! audio source), an optional duration (`-t`), then the codec and muxer
//! arguments in the order given, then the output path. It adds nothing of
//! its own to the media: every parameter (size, rate, GOP, codecs, bitrate,
//! container) is the caller's, so each test file keeps its clips' recipe in
//! view. It also owns the checks that the tools are there
//! ([`require_tool`], with a panic message that says how to install ffmpeg,
//! and [`has_encoder`]) and the frame-counting ffprobe that several suites
//! use to check what a client received ([`ffprobe_frames`]).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The audio source most clips use: a 440 Hz tone at 48 kHz.
pub const SINE_440: &str = "sine=frequency=440:sample_rate=48000";

/// H.264 at libx264's fastest preset, 4:2:0: the video codec arguments of
/// most test clips.
pub const X264_ULTRAFAST: &[&str] = &[
    "-c:v",
    "libx264",
    "-preset",
    "ultrafast",
    "-pix_fmt",
    "yuv420p",
];

/// [`X264_ULTRAFAST`] with two B-frames: a negative first DTS, and in an
/// MP4 an edit list to shift by.
pub const X264_ULTRAFAST_BFRAMES: &[&str] = &[
    "-c:v",
    "libx264",
    "-preset",
    "ultrafast",
    "-x264-params",
    "bframes=2",
    "-pix_fmt",
    "yuv420p",
];

/// A `seconds`-long 160×120 10 fps H.264 MPEG-TS (no audio, a 1 s GOP, one
/// thread) padded with null packets to a constant `mux_kbps`: a large file
/// without a costly encode.
pub fn padded_ts(seconds: u32, mux_kbps: u32) -> Clip {
    Clip::video("testsrc2=size=160x120:rate=10")
        .seconds(seconds)
        .args(X264_ULTRAFAST)
        .args(["-g", "10", "-threads", "1", "-f", "mpegts"])
        .args(["-muxrate", &format!("{mux_kbps}k")])
}

/// Panics with how to install it when `tool` (ffmpeg, ffprobe) does not
/// run.
pub fn require_tool(tool: &str) {
    let found = Command::new(tool)
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "`{tool}` is not installed: these tests make and check media with ffmpeg/ffprobe. \
         Install them with `apt-get install -y --no-install-recommends ffmpeg` (CI's .ci/run does)."
    );
}

/// Whether `ffmpeg -encoders` lists `name` (e.g. `libx265`).
pub fn has_encoder(name: &str) -> bool {
    require_tool("ffmpeg");
    let out = Command::new("ffmpeg")
        .args(["-hide_banner", "-encoders"])
        .output()
        .expect("run ffmpeg -encoders");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(name))
}

/// One ffmpeg run: `ffmpeg -hide_banner -loglevel error -y`, each source as
/// `-f lavfi -i SOURCE` (video first), `-t SECONDS` when set, the arguments
/// in the order they were added, and the output path.
#[derive(Clone, Debug)]
pub struct Clip {
    sources: Vec<String>,
    seconds: Option<String>,
    args: Vec<String>,
}

impl Clip {
    /// A clip from the lavfi video source `source` (e.g.
    /// `testsrc2=size=320x240:rate=30`).
    pub fn video(source: impl Into<String>) -> Clip {
        Clip {
            sources: vec![source.into()],
            seconds: None,
            args: Vec::new(),
        }
    }

    /// Adds the lavfi audio source `source` as the second input.
    pub fn audio(mut self, source: impl Into<String>) -> Clip {
        self.sources.push(source.into());
        self
    }

    /// Adds [`SINE_440`] as the audio input.
    pub fn sine(self) -> Clip {
        self.audio(SINE_440)
    }

    /// `-t seconds` after the inputs (as the number prints: `3`, `12`, `1.5`).
    pub fn seconds(mut self, seconds: impl ToString) -> Clip {
        self.seconds = Some(seconds.to_string());
        self
    }

    /// Appends output arguments (codecs, GOP, muxer, ...).
    pub fn args<I, S>(mut self, args: I) -> Clip
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_string()));
        self
    }

    /// Runs ffmpeg writing `path` (overwritten) and returns it; panics with
    /// ffmpeg's error output when it fails.
    pub fn make(&self, path: impl AsRef<Path>) -> PathBuf {
        require_tool("ffmpeg");
        let path = path.as_ref();
        let mut command = Command::new("ffmpeg");
        command.args(["-hide_banner", "-loglevel", "error", "-y"]);
        for source in &self.sources {
            command.args(["-f", "lavfi", "-i", source]);
        }
        if let Some(seconds) = &self.seconds {
            command.args(["-t", seconds]);
        }
        let out = command
            .args(&self.args)
            .arg(path)
            .output()
            .expect("run ffmpeg");
        assert!(
            out.status.success(),
            "ffmpeg failed making {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        path.to_path_buf()
    }
}

/// What ffprobe reports about a file or URL: container duration and the
/// number of video frames it decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    pub duration_s: f64,
    pub video_frames: u64,
}

/// Runs ffprobe on `input` (a path or URL), counting the first video
/// stream's frames, so it reads everything.
pub fn ffprobe_frames(input: &str) -> Probe {
    require_tool("ffprobe");
    let output = Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-count_frames",
            "-select_streams",
            "v:0",
            "-show_entries",
            "stream=nb_read_frames:format=duration",
            "-of",
            "json",
            input,
        ])
        .output()
        .expect("ffprobe runs");
    assert!(
        output.status.success(),
        "ffprobe {input} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&output.stdout).expect("ffprobe json");
    Probe {
        duration_s: v["format"]["duration"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("duration"),
        video_frames: v["streams"][0]["nb_read_frames"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("nb_read_frames"),
    }
}
