//! End-to-end tests of `rondo trace generate` and `rondo trace describe`:
//! the binary, its files, its JSON and its error messages.

use std::path::Path;

use assert_cmd::Command;
use serde_json::Value;

/// Seed 000 Table 3: (type, mean bytes per round, max bytes per round, CoV).
const TABLE3: [(&str, f64, u64, f64); 6] = [
    ("science-fiction", 624_935.0, 1_201_221, 0.383),
    ("music-clip", 624_728.0, 1_201_221, 0.366),
    ("action", 624_194.0, 1_201_221, 0.245),
    ("talk-show", 624_729.0, 1_201_221, 0.234),
    ("adventure", 624_658.0, 1_201_221, 0.201),
    ("documentary", 625_062.0, 625_786, 0.028),
];

const KNOWN_TYPES: [&str; 8] = [
    "science-fiction",
    "music-clip",
    "action",
    "talk-show",
    "adventure",
    "documentary",
    "cbr-2mbit",
    "multi-bitrate",
];

fn rondo() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rondo"))
}

fn run_ok(args: &[&str]) -> Vec<u8> {
    let output = rondo().args(args).output().unwrap();
    assert!(
        output.status.success(),
        "rondo {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// Runs a command that must fail; returns its standard error.
fn run_err(args: &[&str]) -> String {
    let output = rondo().args(args).output().unwrap();
    assert!(!output.status.success(), "rondo {args:?} should fail");
    assert!(output.stdout.is_empty());
    String::from_utf8(output.stderr).unwrap()
}

fn describe_json(args: &[&str]) -> Value {
    let mut all = vec!["trace", "describe"];
    all.extend_from_slice(args);
    all.push("--json");
    serde_json::from_slice(&run_ok(&all)).unwrap()
}

#[test]
fn every_content_type_matches_table3() {
    for (kind, mean, max, cov) in TABLE3 {
        let d = describe_json(&[kind]);
        assert_eq!(d["kind"], kind);
        assert_eq!(d["seed"], 1);
        assert_eq!(d["rounds"], 1800);
        assert_eq!(d["frames"], 54_000);
        let got_mean = d["mean_bytes_per_round"].as_f64().unwrap();
        let got_max = d["max_bytes_per_round"].as_u64().unwrap();
        let got_cov = d["cov_per_round"].as_f64().unwrap();
        assert!((got_mean / mean - 1.0).abs() <= 0.02, "{kind}: {d}");
        assert!(got_max <= 1_201_221 && got_max <= max, "{kind}: {d}");
        assert!((got_cov - cov).abs() <= 0.02, "{kind}: {d}");
        let total = d["total_bytes"].as_u64().unwrap();
        assert!((total as f64 - got_mean * 1800.0).abs() < 1.0);
        // Table 3 is printed beside the measurement.
        assert_eq!(d["table3"]["cov_per_round"], cov);
        assert_eq!(d["table3"]["max_bytes_per_round"], max);
    }
}

#[test]
fn generate_is_deterministic_per_seed() {
    let a = run_ok(&["trace", "generate", "action", "--seed", "5"]);
    let b = run_ok(&["trace", "generate", "action", "--seed", "5"]);
    let c = run_ok(&["trace", "generate", "action", "--seed", "6"]);
    assert_eq!(a, b);
    assert_ne!(a, c);
    let text = String::from_utf8(a).unwrap();
    assert!(
        text.starts_with("# rondo-trace v1 kind=action seed=5 fps=30 frames=54000\n"),
        "{}",
        &text[..80]
    );
    // Header, comment, column header, then one line per frame.
    assert_eq!(text.lines().count(), 3 + 54_000);
    assert!(text.contains("\nframe,decode_time_ns,bytes,frame_type\n0,0,"));
}

#[test]
fn file_round_trip_gives_the_same_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scifi.trace");
    let path_str = path.to_str().unwrap();
    let stdout = run_ok(&["trace", "generate", "science-fiction", "--out", path_str]);
    assert!(stdout.is_empty());
    // The file is what stdout would have been.
    let written = std::fs::read(&path).unwrap();
    assert_eq!(written, run_ok(&["trace", "generate", "science-fiction"]));

    let from_file = describe_json(&[path_str]);
    let from_type = describe_json(&["science-fiction"]);
    for key in [
        "kind",
        "seed",
        "frames",
        "rounds",
        "mean_bytes_per_round",
        "max_bytes_per_round",
        "cov_per_round",
        "total_bytes",
        "mean_bits_per_s",
    ] {
        assert_eq!(from_file[key], from_type[key], "{key}");
    }
    assert_eq!(from_file["source"], path_str);
}

#[test]
fn cbr_and_multi_bitrate() {
    let d = describe_json(&["cbr-2mbit"]);
    assert_eq!(d["mean_bytes_per_round"], 250_000.0);
    assert_eq!(d["max_bytes_per_round"], 250_000);
    assert_eq!(d["cov_per_round"], 0.0);
    assert_eq!(d["mean_bits_per_s"], 2_000_000.0);
    assert_eq!(d["table3"], Value::Null);
    assert_eq!(d["seed"], Value::Null);

    let half = describe_json(&["cbr-2mbit", "--round-ms", "500"]);
    assert_eq!(half["rounds"], 3600);
    assert_eq!(half["mean_bytes_per_round"], 125_000.0);

    let m = describe_json(&["multi-bitrate"]);
    let rate = m["mean_bits_per_s"].as_f64().unwrap();
    assert!((128_000.0..=1_024_000.0).contains(&rate), "{m}");
    assert!(m["cov_per_round"].as_f64().unwrap() < 1e-5, "{m}");
    let other_seed = run_ok(&["trace", "generate", "multi-bitrate", "--seed", "2"]);
    assert_ne!(other_seed, run_ok(&["trace", "generate", "multi-bitrate"]));
}

#[test]
fn round_length_changes_the_rounds() {
    let d = describe_json(&["talk-show", "--round-ms", "2000"]);
    assert_eq!(d["rounds"], 900);
    assert_eq!(d["round_ms"], 2000);
    // Table 3 holds for one-second rounds only.
    assert_eq!(d["table3"], Value::Null);
    let one = describe_json(&["talk-show"]);
    assert_eq!(d["total_bytes"], one["total_bytes"]);
    let err = run_err(&["trace", "describe", "talk-show", "--round-ms", "0"]);
    assert!(err.contains("--round-ms must be positive"), "{err}");
}

#[test]
fn table_output_shows_the_paper_beside_the_trace() {
    let out = String::from_utf8(run_ok(&["trace", "describe", "adventure"])).unwrap();
    for text in [
        "trace adventure",
        "seed 000 Table 3",
        "coefficient of variation",
        "0.201",
        "624658",
        "1201221",
        "mean bitrate",
    ] {
        assert!(out.contains(text), "missing {text:?} in\n{out}");
    }
}

#[test]
fn unknown_type_lists_the_known_types() {
    let err = run_err(&["trace", "generate", "comedy"]);
    assert!(err.contains("unknown trace type 'comedy'"), "{err}");
    for known in KNOWN_TYPES {
        assert!(err.contains(known), "{err}");
    }
    let err = run_err(&["trace", "describe", "comedy"]);
    assert!(
        err.contains("'comedy' is neither a known trace type"),
        "{err}"
    );
    for known in KNOWN_TYPES {
        assert!(err.contains(known), "{err}");
    }
}

fn describe_file_err(dir: &Path, name: &str, content: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    run_err(&["trace", "describe", path.to_str().unwrap()])
}

#[test]
fn bad_files_name_the_line_and_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let good = "# rondo-trace v1 kind=t frames=2\n\
                frame,decode_time_ns,bytes,frame_type\n\
                0,0,10,I\n\
                1,500,20,B\n";
    describe_json(&[{
        let p = dir.path().join("good.trace");
        std::fs::write(&p, good).unwrap();
        p.to_str().unwrap().to_string()
    }
    .as_str()]);

    let cases: [(&str, String, &str); 6] = [
        ("empty", String::new(), "line 1: the input is empty"),
        (
            "noheader",
            good.lines().skip(1).collect::<Vec<_>>().join("\n"),
            "line 1: missing header",
        ),
        (
            "version",
            good.replace("v1", "v7"),
            "line 1: unsupported trace format version \"v7\"",
        ),
        (
            "number",
            good.replace("1,500,20,B", "1,500,2O,B"),
            "line 4: bytes \"2O\" is not a non-negative integer",
        ),
        (
            "backwards",
            good.replace("1,500,20,B", "1,0,20,B")
                .replace("0,0,10,I", "0,900,10,I"),
            "line 4: decode_time_ns 0 goes backwards",
        ),
        (
            "noframes",
            "# rondo-trace v1 kind=t\nframe,decode_time_ns,bytes,frame_type\n".to_string(),
            "line 2: no frames",
        ),
    ];
    for (name, content, expected) in cases {
        let err = describe_file_err(dir.path(), name, content.as_bytes());
        assert!(err.contains("is not a valid rondo trace"), "{name}: {err}");
        assert!(err.contains(expected), "{name}: {err}");
    }
    let err = describe_file_err(dir.path(), "binary", b"\x00\xff\xfe garbage");
    assert!(err.contains("line 1: the input is not UTF-8"), "{err}");
}

#[test]
fn describe_refuses_an_absurd_round_count() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "# rondo-trace v1 kind=t\nframe,decode_time_ns,bytes,frame_type\n0,{},1,-\n",
        u64::MAX
    );
    let err = describe_file_err(dir.path(), "far", text.as_bytes());
    assert!(err.contains("at most 100000000 are described"), "{err}");
}
