//! End-to-end tests of `rondo disk list`, `describe` and `replay`: the
//! binary, its JSON, its CSV and its error messages.

use std::path::Path;

use assert_cmd::Command;
use serde_json::Value;

const PROFILES: [&str; 4] = ["cheetah-4lp", "seed003-table1", "hdd-7200", "nvme-gen4"];

fn rondo() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rondo"))
}

fn run_ok(args: &[&str]) -> String {
    let output = rondo().args(args).output().unwrap();
    assert!(
        output.status.success(),
        "rondo {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Runs a command that must fail; returns its standard error.
fn run_err(args: &[&str]) -> String {
    let output = rondo().args(args).output().unwrap();
    assert!(!output.status.success(), "rondo {args:?} should fail");
    String::from_utf8(output.stderr).unwrap()
}

fn json(args: &[&str]) -> Value {
    serde_json::from_str(&run_ok(args)).unwrap()
}

fn close(v: &Value, expected: f64, tolerance: f64) -> bool {
    (v.as_f64().unwrap() - expected).abs() <= tolerance
}

#[test]
fn list_shows_every_profile() {
    let text = run_ok(&["disk", "list"]);
    for p in PROFILES {
        assert!(text.contains(p), "{p} missing from:\n{text}");
    }
    let v = json(&["disk", "list", "--json"]);
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, PROFILES);
    for e in v.as_array().unwrap() {
        assert!(e["capacity_bytes"].as_u64().unwrap() > 1_000_000_000);
    }
}

#[test]
fn describe_cheetah_json_meets_the_datasheet() {
    let v = json(&["disk", "describe", "cheetah-4lp", "--json"]);
    assert!(close(&v["avg_rotational_latency_ms"], 2.99, 0.01));
    assert!(close(&v["rpm"], 10033.0, 0.0));
    // disk-models.md §1.2: 7.96 ms mean over random cylinder pairs.
    assert!(close(&v["avg_seek_ms"], 7.96, 0.01));
    assert!(close(&v["capacity_bytes"], 4.55e9, 0.01e9));
    let zones = v["zones"].as_array().unwrap();
    assert_eq!(zones.len(), 7);
    assert!(close(&zones[0]["media_rate_mb_per_s"], 16.69, 0.05));
    assert!(close(&zones[6]["media_rate_mb_per_s"], 11.22, 0.05));
    // Media rates fall from the outer zone inwards.
    let rates: Vec<f64> = zones
        .iter()
        .map(|z| z["media_rate_mb_per_s"].as_f64().unwrap())
        .collect();
    assert!(rates.windows(2).all(|w| w[0] > w[1]));
    // Paper mode with seed 000 Table 2: 15 streams of ~625 KB per 1 s round.
    assert_eq!(v["paper_bound"]["source"], "datasheet");
    assert_eq!(v["paper_bound"]["max_requests_per_round"], 15);
    let rows = v["paper_bound"]["rows"].as_array().unwrap();
    let ms: Vec<u64> = rows
        .iter()
        .map(|r| r["requests"].as_u64().unwrap())
        .collect();
    assert_eq!(ms, [5, 10, 20, 40, 80]);
    // M = 10: 36.4 + 10·(7.94 + 624,718 B / 11.3 MB/s) ms.
    let expected = 36.4 + 10.0 * (7.94 + 624_718.0 / 11_300.0);
    assert!(close(&rows[1]["bound_ms"], expected, 1e-3));
    // rondo mode: zone by zone; the outer zones admit more than the paper's 15.
    let rondo = v["rondo_bound"]["zones"].as_array().unwrap();
    assert_eq!(rondo.len(), 7);
    assert!(rondo[0]["max_requests_per_round"].as_u64().unwrap() > 15);
    let inner = rondo[6]["request_ms"].as_f64().unwrap();
    assert!(rondo[0]["request_ms"].as_f64().unwrap() < inner);
}

#[test]
fn describe_prints_tables_for_every_profile() {
    for p in PROFILES {
        let text = run_ok(&["disk", "describe", p]);
        assert!(text.contains("paper-mode round bound"), "{p}:\n{text}");
        assert!(text.contains("max streams per round"), "{p}:\n{text}");
        assert!(text.contains("rondo-mode round bound"), "{p}:\n{text}");
        let v = json(&["disk", "describe", p, "--json"]);
        assert_eq!(v["name"], p);
    }
    let text = run_ok(&["disk", "describe", "cheetah-4lp"]);
    assert!(text.contains("16.69") && text.contains("11.22"), "{text}");
    assert!(
        text.contains("max streams per round of 1000 ms: 15"),
        "{text}"
    );
}

/// A short-stroked Cheetah: its outer zones only, shorter seeks, and a
/// rondo bound that charges the kept stroke.
#[test]
fn a_short_stroked_cheetah_keeps_its_outer_zones_and_admits_more() {
    let whole = json(&["disk", "describe", "cheetah-4lp", "--json"]);
    let short = json(&["disk", "describe", "cheetah-4lp-outer35", "--json"]);
    assert_eq!(short["name"], "cheetah-4lp-outer35");
    let share =
        short["capacity_bytes"].as_f64().unwrap() / whole["capacity_bytes"].as_f64().unwrap();
    assert!((0.35..0.40).contains(&share), "{share}");
    let zones = short["zones"].as_array().unwrap();
    assert_eq!(zones.len(), 2, "{zones:?}");
    assert!(close(&zones[0]["media_rate_mb_per_s"], 16.69, 0.05));
    assert!(short["avg_seek_ms"].as_f64().unwrap() < 0.7 * whole["avg_seek_ms"].as_f64().unwrap());
    // The rondo bound's fixed part (two strokes and a sweep) covers the kept
    // stroke: 24.4 ms against 50.0 (docs/disk-model.md).
    let fixed = |v: &Value| v["rondo_bound"]["fixed_ms"].as_f64().unwrap();
    assert!(
        fixed(&short) < 0.6 * fixed(&whole),
        "{} vs {}",
        fixed(&short),
        fixed(&whole)
    );
    let zone0 = |v: &Value| v["rondo_bound"]["zones"][0]["request_ms"].as_f64().unwrap();
    assert!(zone0(&short) <= zone0(&whole));
    let err = run_err(&["disk", "describe", "nvme-gen4-outer50"]);
    assert!(err.contains("no stroke"), "{err}");
}

#[test]
fn unknown_profiles_list_the_known_ones() {
    for args in [
        vec!["disk", "describe", "cheetah"],
        vec!["disk", "replay", "nope", "trace.csv"],
    ] {
        let err = run_err(&args);
        assert!(err.contains("unknown disk profile"), "{err}");
        for p in PROFILES {
            assert!(err.contains(p), "{p} not listed in: {err}");
        }
    }
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

fn parse_output(text: &str) -> Vec<(u64, f64, u64, u64, f64)> {
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("id,arrival_ms,lbn,sectors,response_ms"));
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(f.len(), 5, "{l}");
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
                f[3].parse().unwrap(),
                f[4].parse().unwrap(),
            )
        })
        .collect()
}

#[test]
fn replay_one_read_matches_the_parts() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write(dir.path(), "one.csv", "arrival_ms,lbn,sectors\n0,0,8\n");
    let rows = parse_output(&run_ok(&["disk", "replay", "cheetah-4lp", &trace]));
    assert_eq!(rows.len(), 1);
    // Heads on cylinder 0, head 0, angle 0 at t = 0; LBN 0 is sector 0 of that
    // track (angle 0). Read-miss overhead 0.6077 ms, then wait for angle 0 (the
    // rest of the revolution), 8 sectors at 195 per revolution, one bus sector.
    let rev = 60_000.0 / 10_033.0;
    let expected = 0.6077 + (rev - 0.6077) + 8.0 * rev / 195.0 + 512.0 / 40e6 * 1e3;
    assert!(
        (rows[0].4 - expected).abs() < 1e-5,
        "{} vs {expected}",
        rows[0].4
    );
}

#[test]
fn replay_keeps_input_order_under_both_schedulers() {
    let dir = tempfile::tempdir().unwrap();
    // Three reads arrive together, then one later; out of LBN order.
    let trace = write(
        dir.path(),
        "t.csv",
        "arrival_ms,lbn,sectors\n0,5000000,8\n0,1000,8\n0,3000000,8\n200.5,42,16\n",
    );
    let fcfs = parse_output(&run_ok(&["disk", "replay", "cheetah-4lp", &trace]));
    let cscan = parse_output(&run_ok(&[
        "disk",
        "replay",
        "cheetah-4lp",
        &trace,
        "--scheduler",
        "cscan",
    ]));
    for rows in [&fcfs, &cscan] {
        let ids: Vec<u64> = rows.iter().map(|r| r.0).collect();
        assert_eq!(ids, [0, 1, 2, 3]);
        assert_eq!(rows[3].1, 200.5);
        assert_eq!((rows[3].2, rows[3].3), (42, 16));
        assert!(rows.iter().all(|r| r.4 > 0.0));
    }
    // FCFS serves input order: the first read is answered first.
    assert!(fcfs[0].4 < fcfs[1].4 && fcfs[1].4 < fcfs[2].4);
    // C-SCAN from LBN 0 serves ascending LBNs: 1000, 3,000,000, 5,000,000.
    assert!(cscan[1].4 < cscan[2].4 && cscan[2].4 < cscan[0].4);
}

#[test]
fn replay_rejects_bad_input_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent.csv");
    let err = run_err(&["disk", "replay", "cheetah-4lp", missing.to_str().unwrap()]);
    assert!(
        err.contains("cannot read trace") && err.contains("absent.csv"),
        "{err}"
    );

    let cases = [
        (
            "header.csv",
            "time,lbn,sectors\n0,0,8\n",
            vec![":1:", "header"],
        ),
        ("empty.csv", "", vec!["empty"]),
        (
            "nan.csv",
            "arrival_ms,lbn,sectors\n0,0,8\nabc,5,8\n",
            vec![":3:", "arrival_ms 'abc'"],
        ),
        (
            "lbn.csv",
            "arrival_ms,lbn,sectors\n0,x1,8\n",
            vec![":2:", "lbn 'x1'"],
        ),
        (
            "columns.csv",
            "arrival_ms,lbn,sectors\n0,1\n",
            vec![":2:", "3 columns"],
        ),
        (
            "beyond.csv",
            "arrival_ms,lbn,sectors\n0,0,8\n1,8887195,8\n",
            vec![":3:", "capacity", "8887200"],
        ),
        (
            "zero.csv",
            "arrival_ms,lbn,sectors\n0,0,8\n\n5,10,0\n",
            vec![":4:", "at least one sector"],
        ),
        (
            "negative.csv",
            "arrival_ms,lbn,sectors\n-1,0,8\n",
            vec![":2:", "arrival_ms '-1'"],
        ),
    ];
    for (name, text, needles) in cases {
        let trace = write(dir.path(), name, text);
        let err = run_err(&["disk", "replay", "cheetah-4lp", &trace]);
        for needle in needles {
            assert!(err.contains(needle), "{name}: '{needle}' not in: {err}");
        }
    }
}
