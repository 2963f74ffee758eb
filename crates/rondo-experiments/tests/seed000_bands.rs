//! Full paper-mode reproductions of seed 000's Figures 6–12 with the target
//! bands of the issue. Slow (a few minutes in release): runs only with
//! `RONDO_SLOW_TESTS=1`, e.g.
//! `RONDO_SLOW_TESTS=1 cargo test --release -p rondo-experiments --test seed000_bands`.
//! Each figure runs exactly its experiment file; the numbers and the
//! explanation of every difference from the paper are in `docs/experiments/`.

use std::path::PathBuf;

use rondo_experiments::runner::{ExperimentResult, PointResult, run_experiment};
use rondo_experiments::spec::ExperimentSpec;

fn slow() -> bool {
    std::env::var("RONDO_SLOW_TESTS").is_ok_and(|v| v == "1")
}

fn figure(n: u32) -> ExperimentResult {
    figure_with(n, &[])
}

/// Figure `n`'s experiment file with base overrides (an investigation).
fn figure_with(n: u32, overrides: &[(&str, toml::Value)]) -> ExperimentResult {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../experiments")
        .join(format!("seed000-fig{n}.toml"));
    let mut spec = ExperimentSpec::from_file(&path).unwrap();
    for (k, v) in overrides {
        spec.base.insert(k.to_string(), v.clone());
    }
    let started = std::time::Instant::now();
    let result = run_experiment(&spec, 1, &|_, _| {}).unwrap();
    println!("figure {n}: {:.1} s", started.elapsed().as_secs_f64());
    for p in &result.points {
        println!(
            "  {:28} {:>10} {:8.2} ± {:5.2}  metric {:.4} ± {:.4}",
            p.series, p.x, p.mean_active_streams, p.ci_half_width, p.metric, p.metric_ci_half_width
        );
    }
    result
}

fn point<'a>(r: &'a ExperimentResult, series: &str, x: f64) -> &'a PointResult {
    r.points
        .iter()
        .find(|p| p.series == series && p.x == x)
        .unwrap_or_else(|| panic!("no point '{series}' at {x}"))
}

fn active(r: &ExperimentResult, series: &str, x: f64) -> f64 {
    point(r, series, x).mean_active_streams
}

#[test]
fn figure_6_mirroring() {
    if !slow() {
        return;
    }
    let r = figure(6);
    for d in [8.0, 16.0] {
        let none = active(&r, "no replication", d);
        let det = active(&r, "mirroring, deterministic", d);
        let random = active(&r, "mirroring, random", d);
        assert!(
            det <= 0.55 * none,
            "{d} disks: mirroring keeps {:.3} of none",
            det / none
        );
        assert!(
            det >= 1.15 * random,
            "{d} disks: deterministic/random = {:.3}",
            det / random
        );
    }
    // The paper's "25% or more" at 4 disks is missed under the default
    // per-disk round-robin counter (1.215) and met with a per-title counter,
    // the input docs/experiments/seed000-fig6.md traces the miss to.
    let per_title = figure_with(6, &[("round_robin_counter", per_title())]);
    let ratio = |r: &ExperimentResult| {
        active(r, "mirroring, deterministic", 4.0) / active(r, "mirroring, random", 4.0)
    };
    let (default, title) = (ratio(&r), ratio(&per_title));
    println!("figure 6 at 4 disks: det./random {default:.3} per disk, {title:.3} per title");
    assert!(default < 1.25, "the per-disk miss is gone: {default:.3}");
    assert!(
        title >= 1.25,
        "per-title det./random at 4 disks: {title:.3}"
    );
}

fn per_title() -> toml::Value {
    toml::Value::String("per-title".into())
}

#[test]
fn figure_7_minimum_reservation() {
    if !slow() {
        return;
    }
    let r = figure(7);
    for (d, paper_gap) in [(8.0, 0.21), (16.0, 0.18), (32.0, 0.17)] {
        let gap = 1.0 - active(&r, "minimum, deterministic", d) / active(&r, "no replication", d);
        assert!(
            (gap - paper_gap).abs() <= 0.06,
            "{d} disks: gap {gap:.3} vs paper {paper_gap}"
        );
    }
    for d in [4.0, 8.0, 16.0, 32.0] {
        let det = point(&r, "minimum, deterministic", d);
        let random = point(&r, "minimum, random", d);
        assert!(
            random.mean_active_streams - det.mean_active_streams <= random.ci_half_width,
            "{d} disks: random {} beats deterministic {} beyond its CI",
            random.mean_active_streams,
            det.mean_active_streams
        );
    }
}

#[test]
fn figure_8_backup_reservation_share() {
    if !slow() {
        return;
    }
    let r = figure(8);
    // The paper: about 24% → 14% (deterministic) and 22% → 14% (random) of
    // the round from 4 to 16 disks; we check the fall and the ends within 4 points.
    for p in ["deterministic", "random"] {
        for t in [
            "science-fiction",
            "music-clip",
            "action",
            "talk-show",
            "adventure",
            "documentary",
        ] {
            let s = format!("{t}, {p}");
            let (at4, at16) = (point(&r, &s, 4.0).metric, point(&r, &s, 16.0).metric);
            assert!(at4 > at16, "{s}: {at4:.3} at 4 disks vs {at16:.3} at 16");
            let paper4 = if p == "deterministic" { 0.24 } else { 0.22 };
            assert!(
                (at4 - paper4).abs() <= 0.04,
                "{s}: {at4:.3} at 4 disks vs paper {paper4}"
            );
            assert!(
                (at16 - 0.14).abs() <= 0.04,
                "{s}: {at16:.3} at 16 disks vs paper 0.14"
            );
        }
    }
}

#[test]
fn figure_9_measured_busy_time_below_reserved() {
    if !slow() {
        return;
    }
    let r = figure(9);
    for p in &r.points {
        let busy = p
            .busy_fraction
            .expect("simulated-disk mode measures busy time");
        assert!(
            busy < p.reserved_working_fraction,
            "{} at {}: busy {busy:.3} ≥ reserved",
            p.series,
            p.x
        );
        assert!(
            busy < p.reserved_primary_fraction || p.series.contains("failed"),
            "{} at {}",
            p.series,
            p.x
        );
        assert_eq!(p.deadline_misses, 0, "{} at {}", p.series, p.x);
    }
}

#[test]
fn figure_10_dynamic_balancing() {
    if !slow() {
        return;
    }
    let gain = |r: &ExperimentResult, s: &str, d: f64| {
        active(r, s, d) / active(r, "no replication", d) - 1.0
    };
    let r = figure(10);
    for d in [4.0, 8.0, 16.0] {
        for s in ["dynamic, deterministic", "dynamic, random"] {
            let g = gain(&r, s, d);
            assert!((0.05..=0.10).contains(&g), "{s} at {d} disks: gain {g:.3}");
        }
    }
    // At 32 disks the paper's rule W = ⌈1/λ⌉ gives 4 start rounds, which
    // starves `none`: the gain is about 12%, above the band
    // (docs/experiments/seed000-fig10.md). With W = 16 it is inside.
    let g32 = gain(&r, "dynamic, deterministic", 32.0);
    assert!(
        g32 > 0.10,
        "the documented miss at 32 disks is gone ({g32:.3}): update the docs"
    );
    let r = figure_with(10, &[("lookahead_rounds", toml::Value::Integer(16))]);
    for s in ["dynamic, deterministic", "dynamic, random"] {
        let g = gain(&r, s, 32.0);
        assert!(
            (0.05..=0.10).contains(&g),
            "{s} at 32 disks, W = 16: gain {g:.3}"
        );
    }
}

#[test]
fn figures_11_and_12_declustering() {
    if !slow() {
        return;
    }
    let r = figure(11);
    const WHOLE: f64 = 2_097_152.0; // larger than any round: no declustering
    for s in ["minimum, deterministic", "minimum, random"] {
        let whole = active(&r, s, WHOLE);
        // No effect above the largest round (1,201,220 bytes).
        for b in [1_212_416.0, 1_245_184.0, 1_572_864.0] {
            assert_eq!(
                active(&r, s, b),
                whole,
                "{s}: B_d = {b} differs from no declustering"
            );
        }
    }
    // The paper: the best throughput of random placement with declustering
    // approaches that of deterministic placement.
    let best = |s: &str| {
        r.points
            .iter()
            .filter(|p| p.series == s)
            .map(|p| (p.mean_active_streams, p.ci_half_width))
            .fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a })
    };
    let (det, det_ci) = best("minimum, deterministic");
    let (random, random_ci) = best("minimum, random");
    assert!(
        (det - random).abs() <= det_ci + random_ci,
        "best det {det} vs random {random}"
    );
    // The "< 3% change at 8 disks" is missed under the default
    // per-disk round-robin counter (+4.5% at 128 KiB); the dip at large B_d
    // comes from the per-fragment sequence (per-round removes it).
    // docs/experiments/seed000-fig11.md.
    let whole = active(&r, "minimum, deterministic", WHOLE);
    let gain = det / whole - 1.0;
    println!("figure 11: best declustered deterministic is {gain:+.3} against no declustering");
    assert!(
        gain > 0.0,
        "declustering with small fragments no longer helps: {gain:.3}"
    );
    // The input that explains the miss: with a per-title round-robin counter
    // the whole-backup baseline carries more streams and the small-block
    // gain (16–256 KiB) is under 3%, and under the default per-disk counter's.
    let per_title = figure_with(11, &[("round_robin_counter", per_title())]);
    let small_block_gain = |r: &ExperimentResult| {
        let whole = active(r, "minimum, deterministic", WHOLE);
        [16_384.0, 32_768.0, 65_536.0, 131_072.0, 262_144.0]
            .iter()
            .map(|&b| active(r, "minimum, deterministic", b) / whole - 1.0)
            .fold(f64::MIN, f64::max)
    };
    let (default, title) = (small_block_gain(&r), small_block_gain(&per_title));
    println!("figure 11: best small-block gain {default:+.4} per disk, {title:+.4} per title");
    assert!(default > 0.03, "the per-disk miss is gone: {default:.4}");
    assert!(title < 0.03, "per-title small-block gain {title:.4}");
    let spread = figure(12);
    let whole = point(&spread, "minimum, deterministic", WHOLE).metric;
    assert!(
        whole < 0.2 + 0.02,
        "most − least loaded disk {whole:.3} of the round"
    );
}
