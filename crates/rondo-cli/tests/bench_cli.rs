//! Smoke tests of `rondo bench admission` and `rondo bench simulate` with
//! tiny parameters: the commands run, their JSON holds together, and the
//! measurement follows the requested workload. Timings are never asserted;
//! measured numbers live in docs/benchmarks.md.

use assert_cmd::Command;
use serde_json::Value;

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

fn json(args: &[&str]) -> Value {
    let text = run_ok(args);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

#[test]
fn admission_measures_each_configuration_in_its_own_process() {
    let v = json(&[
        "bench",
        "admission",
        "--disks",
        "4,6",
        "--schemes",
        "none,minimum",
        "--decisions",
        "30",
        "--warmup-rounds",
        "40",
        "--releases",
        "5",
        "--json",
    ]);
    assert!(!v["machine"]["cpu_model"].as_str().unwrap().is_empty());
    assert!(u(&v["machine"]["logical_cpus"]) >= 1);
    let results = v["results"].as_array().unwrap();
    let configs: Vec<(u64, &str)> = results
        .iter()
        .map(|r| (u(&r["disks"]), r["scheme"].as_str().unwrap()))
        .collect();
    assert_eq!(
        configs,
        [(4, "none"), (4, "minimum"), (6, "none"), (6, "minimum")]
    );
    for r in results {
        let d = &r["decision"];
        let count = u(&d["count"]);
        // The window ends with the round in which the 30th decision was timed.
        assert!(count >= 30, "{r}");
        assert_eq!(u(&r["admitted"]) + u(&r["rejected"]), count, "{r}");
        assert_eq!(
            u(&r["decision_admitted"]["count"]),
            u(&r["admitted"]),
            "{r}"
        );
        assert!(u(&d["p50_ns"]) <= u(&d["p99_ns"]) && u(&d["p99_ns"]) <= u(&d["max_ns"]));
        assert_eq!(u(&r["warmup_rounds"]), 40);
        assert!(u(&r["measured_rounds"]) > 0);
        assert!(u(&r["release"]["count"]) <= 5);
        // Look-ahead ⌈1/λ⌉, as the simulator computes it.
        let rate = r["arrival_rate_per_round"].as_f64().unwrap();
        assert_eq!(u(&r["lookahead_rounds"]), (1.0 / rate).ceil() as u64);
        // Rounds 0, 100, ... up to the end of the window.
        let rounds = u(&r["warmup_rounds"]) + u(&r["measured_rounds"]);
        let every_100 = r["active_streams_every_100_rounds"].as_array().unwrap();
        assert_eq!(every_100.len() as u64, rounds.div_ceil(100));
        assert_eq!(
            r["vm_rss_every_100_rounds_bytes"].as_array().unwrap().len(),
            every_100.len()
        );
        // Memory comes from /proc/self/status of the child.
        let (hwm, rss) = (u(&r["vm_hwm_bytes"]), u(&r["vm_rss_bytes"]));
        assert!(rss > 1 << 20 && hwm >= rss, "{r}");
        let a = &r["attribution"];
        assert_eq!(u(&a["on_cpu"]["count"]), count);
        assert!(u(&a["descheduled"]) <= count);
        assert!(u(&a["over_1ms_descheduled"]) <= u(&a["over_1ms"]));
    }
}

#[test]
fn admission_measures_exactly_the_rounds_asked_and_prints_a_table() {
    let v = json(&[
        "bench",
        "admission",
        "--disks",
        "4",
        "--schemes",
        "dynamic",
        "--rounds",
        "120",
        "--warmup-rounds",
        "10",
        "--no-attribute",
        "--json",
    ]);
    let r = &v["results"][0];
    assert_eq!(u(&r["measured_rounds"]), 120);
    assert!(r["attribution"].is_null());
    let text = run_ok(&[
        "bench",
        "admission",
        "--disks",
        "1024",
        "--schemes",
        "minimum",
        "--rounds",
        "2",
        "--warmup-rounds",
        "3",
        "--releases",
        "2",
    ]);
    for needle in [
        "decisions/s",
        "p99 µs",
        "VmHWM MiB",
        "machine:",
        "D = 1024, minimum: peak memory",
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
}

#[test]
fn simulate_counts_the_same_stream_rounds_in_both_modes() {
    let v = json(&[
        "bench", "simulate", "--disks", "4", "--rounds", "300", "--json",
    ]);
    let results = v["results"].as_array().unwrap();
    let modes: Vec<&str> = results
        .iter()
        .map(|r| r["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["admission-only", "simulated-disk"]);
    for r in results {
        assert_eq!(u(&r["rounds"]), 300);
        assert!(u(&r["stream_rounds"]) > 0);
        let mean = r["mean_active_streams"].as_f64().unwrap();
        assert_eq!(u(&r["stream_rounds"]), (mean * 300.0).round() as u64);
        assert!(r["stream_rounds_per_s"].as_f64().unwrap() > 0.0);
    }
    // Admission does not depend on disks executing reads: both modes admit
    // the same streams, so they play the same stream-rounds.
    assert_eq!(
        u(&results[0]["stream_rounds"]),
        u(&results[1]["stream_rounds"])
    );
}

#[test]
fn bad_arguments_are_refused_clearly() {
    let output = rondo()
        .args(["bench", "admission", "--schemes", "bogus"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let err = String::from_utf8(output.stderr).unwrap();
    assert!(err.contains("unknown scheme 'bogus'"), "{err}");
    let output = rondo()
        .args(["bench", "admission", "--disks", "1", "--schemes", "none"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let err = String::from_utf8(output.stderr).unwrap();
    assert!(err.contains("at least 2"), "{err}");
}
