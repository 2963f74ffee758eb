//! `rondo simulate --tier-library N`: a library whose home is a farm of
//! optical jukeboxes (seed 002), staged onto the configured array when
//! asked for: start-up delay against request rate, for a given library,
//! title size and Zipf popularity (`rondo_sim::tier`). The array's part
//! (how many rounds its write queue takes for one title, how many titles
//! it holds) comes from the core for the configured array, as the server
//! predicts its own stagings. Each rate is replicated until its 95%
//! confidence interval is within the target (`--ci`).

use anyhow::Context;
use clap::Args;
use comfy_table::Table;
use rondo_experiments::stats::{Estimate, StoppingRule};
use rondo_model::tier::jukebox::JukeboxParams;
use rondo_model::units::NS_PER_S;
use rondo_sim::run::SimConfig;
use rondo_sim::tier::{TierSimConfig, TierSimResult, run_tier, staging_write};
use serde::Serialize;

/// The tier simulation's flags (`rondo simulate --tier-library N ...`).
#[derive(Args, Debug)]
pub struct TierArgs {
    /// Simulate a library of N titles whose home is a farm of NSM Satellite
    /// jukeboxes, staged onto this array when asked for (seed 002,
    /// docs/tier.md): start-up delay against request rate.
    #[arg(long = "tier-library", value_name = "N")]
    pub library: Option<u32>,
    /// Staged titles the array holds [default: what its disks hold].
    #[arg(long = "tier-array-titles", value_name = "N", requires = "library")]
    pub array_titles: Option<u32>,
    /// Each title's size, MB (10^6 bytes).
    #[arg(
        long = "tier-title-mb",
        value_name = "MB",
        default_value_t = 500,
        requires = "library"
    )]
    pub title_mb: u64,
    /// Each title's playing time, seconds.
    #[arg(
        long = "tier-title-s",
        value_name = "S",
        default_value_t = 5400,
        requires = "library"
    )]
    pub title_s: u64,
    /// Request rates to simulate, per hour.
    #[arg(long = "tier-rates", value_name = "R,R,...", value_delimiter = ',',
          default_values_t = [10.0, 30.0, 60.0, 120.0, 240.0, 480.0], requires = "library")]
    pub rates_per_hour: Vec<f64>,
    /// Jukeboxes in the farm (4 drives and one arm each).
    #[arg(
        long = "tier-jukeboxes",
        value_name = "J",
        default_value_t = 4,
        requires = "library"
    )]
    pub jukeboxes: u32,
    /// SF of every title; 0 = SF_opt for the title size.
    #[arg(
        long = "tier-stripe-factor",
        value_name = "SF",
        default_value_t = 0,
        requires = "library"
    )]
    pub stripe_factor: u32,
    /// Measured requests per replication (after as many again of warm-up).
    #[arg(
        long = "tier-requests",
        value_name = "N",
        default_value_t = 2000,
        requires = "library"
    )]
    pub requests: u64,
}

#[derive(Serialize)]
struct RatePoint {
    rate_per_hour: f64,
    mean_delay_s: Estimate,
    p95_delay_s: f64,
    mean_miss_delay_s: f64,
    hit_ratio: f64,
    refused_ratio: f64,
    replications: usize,
}

#[derive(Serialize)]
struct TierReport {
    library_titles: u32,
    array_titles: u32,
    title_bytes: u64,
    title_seconds: u64,
    zipf: f64,
    jukeboxes: u32,
    stripe_factor: u32,
    write_rounds: u64,
    round_duration_s: f64,
    points: Vec<RatePoint>,
}

pub fn run(
    tier: &TierArgs,
    config: &SimConfig,
    zipf: f64,
    seed: u64,
    rule: StoppingRule,
    json: bool,
) -> anyhow::Result<()> {
    let library = tier.library.context("--tier-library is required")?;
    anyhow::ensure!(library > 0, "--tier-library must be at least 1");
    anyhow::ensure!(
        tier.title_mb > 0 && tier.title_s > 0,
        "--tier-title-mb and --tier-title-s must be positive"
    );
    anyhow::ensure!(tier.jukeboxes > 0, "--tier-jukeboxes must be at least 1");
    anyhow::ensure!(
        tier.rates_per_hour
            .iter()
            .all(|r| r.is_finite() && *r > 0.0),
        "--tier-rates are positive requests per hour"
    );
    let title_bytes = tier.title_mb * 1_000_000;
    let duration_ns = tier.title_s * NS_PER_S;
    let (write, holds) = staging_write(config, title_bytes, duration_ns)
        .context("planning a tier title's staging on this array")?;
    let array_titles = tier.array_titles.unwrap_or(holds).max(1);
    let mut points = Vec::new();
    let mut stripe_factor = tier.stripe_factor;
    for &rate in &tier.rates_per_hour {
        let mut results: Vec<TierSimResult> = Vec::new();
        let mut means = Vec::new();
        while !rule.is_done(&means) {
            let r = run_tier(&TierSimConfig {
                library_titles: library,
                title_bytes,
                title_duration_ns: duration_ns,
                array_titles,
                zipf,
                rate_per_s: rate / 3600.0,
                jukebox: JukeboxParams::nsm_satellite(),
                jukeboxes: tier.jukeboxes,
                stripe_factor: tier.stripe_factor,
                write,
                round_duration_ns: config.round_duration_ns,
                warmup_requests: tier.requests,
                measured_requests: tier.requests,
                seed: seed + results.len() as u64,
            });
            means.push(r.mean_delay_s);
            stripe_factor = r.stripe_factor;
            results.push(r);
        }
        let n = results.len() as f64;
        let avg = |f: fn(&TierSimResult) -> f64| results.iter().map(f).sum::<f64>() / n;
        points.push(RatePoint {
            rate_per_hour: rate,
            mean_delay_s: Estimate::of(&means),
            p95_delay_s: avg(|r| r.p95_delay_s),
            mean_miss_delay_s: avg(|r| r.mean_miss_delay_s),
            hit_ratio: avg(|r| r.hit_ratio),
            refused_ratio: avg(|r| r.refused_ratio),
            replications: results.len(),
        });
    }
    let report = TierReport {
        library_titles: library,
        array_titles,
        title_bytes,
        title_seconds: tier.title_s,
        zipf,
        jukeboxes: tier.jukeboxes,
        stripe_factor,
        write_rounds: write.rounds,
        round_duration_s: config.round_duration_ns as f64 / NS_PER_S as f64,
        points,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "{} titles of {} MB ({} s) on {} NSM Satellite jukeboxes (SF = {}), Zipf {}; the array \
         holds {} of them and writes one in {} rounds of {} s",
        report.library_titles,
        tier.title_mb,
        tier.title_s,
        report.jukeboxes,
        report.stripe_factor,
        zipf,
        report.array_titles,
        report.write_rounds,
        report.round_duration_s
    );
    let mut table = Table::new();
    table.set_header([
        "requests/hour",
        "mean start-up delay (s)",
        "p95 (s)",
        "mean when staged (s)",
        "on the array",
        "refused",
        "replications",
    ]);
    for p in &report.points {
        table.add_row([
            format!("{}", p.rate_per_hour),
            format!(
                "{:.1} ± {:.1}",
                p.mean_delay_s.mean, p.mean_delay_s.ci_half_width
            ),
            format!("{:.1}", p.p95_delay_s),
            format!("{:.1}", p.mean_miss_delay_s),
            format!("{:.1}%", 100.0 * p.hit_ratio),
            format!("{:.1}%", 100.0 * p.refused_ratio),
            p.replications.to_string(),
        ]);
    }
    println!("{table}");
    Ok(())
}
