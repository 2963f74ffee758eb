//! Runs a seed 004 cycle experiment file without the `rondo` binary (the
//! same code `rondo experiment run` calls): writes `results.json`,
//! `results.csv`, `timelines.csv` and the plots under `results/<name>/` (or
//! the second argument) and prints the table.
//!
//! `cargo run --release -p rondo-experiments --example cycle_experiment -- experiments/seed004-fig3.toml`

use rondo_experiments::cycle::{CycleSpec, run_cycle};
use rondo_experiments::plot::write_chart;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let file = args
        .next()
        .ok_or("usage: cycle_experiment FILE.toml [OUT_DIR] [SEED]")?;
    let text = std::fs::read_to_string(&file)?;
    let spec = CycleSpec::from_toml(&text, &file)?;
    let out = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new("results").join(&spec.name));
    let seed: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(1);
    let result = run_cycle(&spec, seed, &|_, _| {});
    std::fs::create_dir_all(&out)?;
    std::fs::write(
        out.join("results.json"),
        serde_json::to_string_pretty(&result)?,
    )?;
    std::fs::write(out.join("results.csv"), result.to_csv())?;
    std::fs::write(out.join("timelines.csv"), result.timelines_csv())?;
    for (stem, chart) in result.charts() {
        write_chart(&chart, &[], &out, &stem)?;
    }
    print!("{}", result.table());
    Ok(())
}
