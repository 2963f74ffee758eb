//! End-to-end tests of `rondo simulate` and `rondo experiment run`.

use assert_cmd::Command;

fn rondo() -> Command {
    Command::cargo_bin("rondo").unwrap()
}

#[test]
fn simulate_json_reports_load_and_capacity() {
    let out = rondo()
        .args([
            "simulate",
            "--disks",
            "4",
            "--warmup-rounds",
            "300",
            "--end-round",
            "1200",
            "--max-replications",
            "3",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let at_load = &v["at_load"];
    let capacity = &v["capacity"];
    assert_eq!(at_load["disks"], 4);
    assert_eq!(at_load["scheme"], "minimum");
    assert_eq!(at_load["bound"], "rondo");
    let active = at_load["mean_active_streams"].as_f64().unwrap();
    let cap = capacity["mean_active_streams"].as_f64().unwrap();
    assert!(
        active > 5.0 && cap >= 0.9 * active,
        "at load {active}, capacity {cap}"
    );
    let rejection = capacity["rejection_ratio"].as_f64().unwrap();
    assert!(rejection > 0.0 && rejection < 1.0, "{rejection}");
}

#[test]
fn simulated_disk_mode_with_a_failure_reports_zero_misses_under_minimum() {
    let out = rondo()
        .args([
            "simulate",
            "--disks",
            "4",
            "--mode",
            "simulated-disk",
            "--warmup-rounds",
            "100",
            "--end-round",
            "500",
            "--fail-disk",
            "2",
            "--fail-round",
            "200",
            "--replications",
            "1",
            "--max-replications",
            "1",
            "--no-capacity",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["at_load"]["deadline_misses"], 0);
    assert!(v["at_load"]["busy_fraction"].as_f64().unwrap() > 0.1);
    assert!(v["capacity"].is_null());
}

#[test]
fn simulate_refuses_bad_arguments_clearly() {
    let out = rondo()
        .args(["simulate", "--scheme", "raid5"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown scheme 'raid5'"));
    let out = rondo()
        .args(["simulate", "--profile", "floppy"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown disk profile 'floppy'"));
    let out = rondo()
        .args(["simulate", "--titles", "opera"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown titles 'opera'"));
}

#[test]
fn experiment_run_writes_table_json_csv_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tiny.toml");
    std::fs::write(
        &file,
        r#"
name = "tiny"
x = "disks"
x_values = [4, 8]
[base]
warmup_rounds = 200
end_round = 800
[[series]]
label = "none"
scheme = "none"
[[series]]
label = "minimum"
scheme = "minimum"
[replications]
min = 2
max = 2
"#,
    )
    .unwrap();
    let out_dir = dir.path().join("out");
    let out = rondo()
        .args(["experiment", "run"])
        .arg(&file)
        .arg("--out")
        .arg(&out_dir)
        .args(["--set", "load=1.5"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("minimum") && stdout.contains("none"),
        "{stdout}"
    );
    for f in ["results.json", "results.csv", "plot.png", "plot.svg"] {
        let len = std::fs::metadata(out_dir.join(f)).unwrap().len();
        assert!(len > 100, "{f} is {len} bytes");
    }
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("results.json")).unwrap()).unwrap();
    let points = json["points"].as_array().unwrap();
    assert_eq!(points.len(), 4);
    // Per-replication values, in seed order, for paired comparisons.
    assert_eq!(points[0]["replication_values"].as_array().unwrap().len(), 2);
    for key in [
        "disks",
        "scheme",
        "placement",
        "backup_block_bytes",
        "mode",
        "mean_active_streams",
        "ci_half_width",
        "rejection_ratio",
    ] {
        assert!(points[0].get(key).is_some(), "missing {key}");
    }
    let csv = std::fs::read_to_string(out_dir.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), 5);
    let png = std::fs::read(out_dir.join("plot.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
}

#[test]
fn experiment_run_names_what_is_wrong_in_a_bad_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "name = \"bad\"\nx = \"disks\"\nx_values = [4]\n[[series]]\nlabel = \"a\"\nscheme = \"raid5\"\n").unwrap();
    let out = rondo()
        .args(["experiment", "run"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("series 'a'") && err.contains("raid5"), "{err}");
    // A misspelled field is refused, not silently ignored.
    let typo = dir.path().join("typo.toml");
    std::fs::write(
        &typo,
        "name = \"t\"\nx = \"disks\"\nx_values = [4]\n[[series]]\nlabel = \"a\"\nplacment = \"random\"\n",
    )
    .unwrap();
    let out = rondo()
        .args(["experiment", "run"])
        .arg(&typo)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown field `placment`"));
    let out = rondo()
        .args(["experiment", "run", "/nonexistent/x.toml"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent/x.toml"));
}

#[test]
fn simulate_takes_titles_from_trace_files() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("action.trace");
    let out = rondo()
        .args(["trace", "generate", "action", "--seed", "4", "--out"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(out.status.success());
    let titles = format!("{},documentary", trace.display());
    let out = rondo()
        .args([
            "simulate",
            "--disks",
            "4",
            "--warmup-rounds",
            "300",
            "--end-round",
            "1000",
            "--max-replications",
            "3",
            "--no-capacity",
            "--json",
            "--titles",
        ])
        .arg(&titles)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["at_load"]["titles"], titles.as_str());
    assert!(v["at_load"]["mean_active_streams"].as_f64().unwrap() > 5.0);
    // A corrupt trace file is refused with the file and line named.
    std::fs::write(&trace, "# rondo-trace v1 kind=action seed=4 fps=30 frames=1\nframe,decode_time_ns,bytes,frame_type\n0,zero,5,I\n").unwrap();
    let out = rondo()
        .args(["simulate", "--no-capacity", "--titles"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("action.trace") && err.contains("line"),
        "{err}"
    );
}
