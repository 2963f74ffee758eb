//! Issue 16, item 3: at D = 1024 with a library of 1,000 titles, streams
//! per disk within 10% of D = 8's under the same scheme and popularity, with
//! the settings `rondo serve` uses (rondo bound, per-title round-robin
//! counter, 5 rounds of look-ahead), at capacity. Slow (about 4.5 minutes in
//! release): runs only with `RONDO_SLOW_TESTS=1`, e.g.
//! `RONDO_SLOW_TESTS=1 cargo test --release -p rondo-experiments --test rondo_large_array`.
//! It runs the experiment files' points at the server's look-ahead; the
//! numbers and their explanation are in docs/experiments/rondo-large-array.md.

use std::path::PathBuf;

use rondo_experiments::runner::{ExperimentResult, run_experiment};
use rondo_experiments::spec::ExperimentSpec;

fn slow() -> bool {
    std::env::var("RONDO_SLOW_TESTS").is_ok_and(|v| v == "1")
}

/// The experiment file's series `labels` at 5 rounds of look-ahead.
fn run(file: &str, labels: &[&str]) -> ExperimentResult {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../experiments")
        .join(file);
    let mut spec = ExperimentSpec::from_file(&path).unwrap();
    spec.x_values = vec![5.0];
    spec.series.retain(|s| labels.contains(&s.label.as_str()));
    assert_eq!(spec.series.len(), labels.len(), "{file}: series {labels:?}");
    let result = run_experiment(&spec, 1, &|_, _| {}).unwrap();
    for p in &result.points {
        println!(
            "{file}: {:32} {:10.1} streams, {:.2} per disk",
            p.series,
            p.mean_active_streams,
            p.mean_active_streams / f64::from(p.disks)
        );
    }
    result
}

fn per_disk(r: &ExperimentResult, label: &str) -> f64 {
    let p = r
        .points
        .iter()
        .find(|p| p.series == label)
        .unwrap_or_else(|| panic!("no series '{label}'"));
    assert_eq!(p.deadline_misses, 0, "{label}");
    p.mean_active_streams / f64::from(p.disks)
}

#[test]
fn a_thousand_titles_on_1024_disks_fill_each_disk_as_eight_disks_do() {
    if !slow() {
        return;
    }
    let small = run(
        "rondo-large-array-d8.toml",
        &[
            "minimum, 6 titles",
            "minimum, 6 titles, Zipf 1",
            "none, 6 titles",
        ],
    );
    let large = run(
        "rondo-large-array.toml",
        &[
            "minimum, 1000 titles",
            "minimum, 1000 titles, Zipf 1",
            "none, 1000 titles",
        ],
    );
    for (d1024, d8) in [
        ("minimum, 1000 titles", "minimum, 6 titles"),
        ("minimum, 1000 titles, Zipf 1", "minimum, 6 titles, Zipf 1"),
        ("none, 1000 titles", "none, 6 titles"),
    ] {
        let ratio = per_disk(&large, d1024) / per_disk(&small, d8);
        println!("{d1024} / {d8}: {ratio:.3} per disk");
        assert!(
            ratio >= 0.9,
            "{d1024}: {ratio:.3} of D = 8's streams per disk"
        );
    }
}
