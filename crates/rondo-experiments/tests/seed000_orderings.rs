//! Reduced seed 000 experiments for the default test suite: the published
//! figures' own experiment files, shortened (warm-up 1000 rounds, measured
//! rounds 1000–4000, three replications), checking only the orderings the
//! paper reports. The full runs with the target bands are in
//! `seed000_bands.rs` (`RONDO_SLOW_TESTS=1`).

use std::path::PathBuf;

use rondo_experiments::runner::{ExperimentResult, run_experiment};
use rondo_experiments::spec::ExperimentSpec;

fn reduced(figure: u32, x_values: &[f64]) -> ExperimentResult {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../experiments")
        .join(format!("seed000-fig{figure}.toml"));
    let mut spec = ExperimentSpec::from_file(&path).unwrap();
    spec.base
        .insert("warmup_rounds".into(), toml::Value::Integer(1000));
    spec.base
        .insert("end_round".into(), toml::Value::Integer(4000));
    spec.x_values = x_values.to_vec();
    spec.replications.min = 3;
    spec.replications.max = 3;
    run_experiment(&spec, 1, &|_, _| {}).unwrap()
}

fn active(r: &ExperimentResult, series: &str, x: f64) -> f64 {
    r.points
        .iter()
        .find(|p| p.series == series && p.x == x)
        .unwrap_or_else(|| panic!("no point {series} at {x}"))
        .mean_active_streams
}

#[test]
fn mirroring_keeps_less_than_half_and_deterministic_beats_random() {
    let r = reduced(6, &[8.0, 16.0]);
    for d in [8.0, 16.0] {
        let none = active(&r, "no replication", d);
        let det = active(&r, "mirroring, deterministic", d);
        let random = active(&r, "mirroring, random", d);
        assert!(
            det < 0.5 * none,
            "{d} disks: mirroring {det} vs none {none}"
        );
        assert!(
            det > random,
            "{d} disks: deterministic {det} vs random {random}"
        );
    }
}

#[test]
fn minimum_reservation_gap_shrinks_as_disks_grow() {
    let r = reduced(7, &[4.0, 8.0, 32.0]);
    let gap =
        |d: f64| 1.0 - active(&r, "minimum, deterministic", d) / active(&r, "no replication", d);
    let (g4, g8, g32) = (gap(4.0), gap(8.0), gap(32.0));
    assert!(
        g4 > g8 && g8 > g32,
        "gaps {g4:.3} {g8:.3} {g32:.3} do not shrink"
    );
    assert!(
        g32 > 1.0 / 32.0,
        "the gap cannot beat the 1/D ideal: {g32:.3}"
    );
    for d in [4.0, 8.0] {
        let det = active(&r, "minimum, deterministic", d);
        let random = active(&r, "minimum, random", d);
        assert!(
            det >= random,
            "{d} disks: deterministic {det} vs random {random}"
        );
    }
}

#[test]
fn dynamic_balancing_beats_no_replication() {
    let r = reduced(10, &[8.0]);
    let none = active(&r, "no replication", 8.0);
    for s in ["dynamic, deterministic", "dynamic, random"] {
        assert!(
            active(&r, s, 8.0) > none,
            "{s} {} vs none {none}",
            active(&r, s, 8.0)
        );
    }
}
