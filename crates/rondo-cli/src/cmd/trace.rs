//! `rondo trace`: generate synthetic traces and describe their per-round statistics.
//!
//! Parsing and printing only: the generators and the trace file format live
//! in `rondo-media`, the per-round rule (`client_bytes_per_round`) and the
//! statistics (`RoundStats::of`) in `rondo-model`.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Subcommand;
use rondo_media::{
    ContentType, Trace, TraceKind, generate_trace, known_kind_names, parse_trace_bytes, write_trace,
};
use rondo_model::schedule::{RoundStats, client_bytes_per_round};
use rondo_model::units::{NS_PER_MS, NS_PER_S};
use serde::Serialize;

#[derive(Subcommand, Debug)]
pub enum TraceCommand {
    /// Generate a synthetic trace of one content type.
    Generate {
        /// Content type: science-fiction, music-clip, action, talk-show,
        /// adventure, documentary (seed 000 Table 3), or a CBR / multi-bitrate type.
        #[arg(value_name = "TYPE")]
        kind: String,
        /// Seed of the generator; the same seed gives the same trace.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Output file (default: standard output).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Per-round mean, maximum and coefficient of variation of a trace.
    Describe {
        /// A content type (generated with seed 1) or a trace file.
        #[arg(value_name = "TYPE|FILE")]
        source: String,
        /// Round length in milliseconds.
        #[arg(long, default_value_t = 1000)]
        round_ms: u64,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Seed of the trace `describe` generates when given a type name.
const DESCRIBE_SEED: u64 = 1;
/// Most rounds `describe` will lay out: a guard against files whose decode
/// times (or a tiny --round-ms) would need an enormous round vector.
const DESCRIBE_ROUNDS_MAX: u64 = 100_000_000;

pub fn run(command: TraceCommand) -> anyhow::Result<()> {
    match command {
        TraceCommand::Generate { kind, seed, out } => generate(&kind, seed, out.as_deref()),
        TraceCommand::Describe {
            source,
            round_ms,
            json,
        } => describe(&source, round_ms, json),
    }
}

fn generate(kind: &str, seed: u64, out: Option<&Path>) -> anyhow::Result<()> {
    let kind: TraceKind = kind.parse()?;
    let trace = generate_trace(kind, seed);
    match out {
        Some(path) => {
            let file =
                File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
            let mut writer = BufWriter::new(file);
            write_trace(&mut writer, &trace)
                .and_then(|()| writer.flush())
                .with_context(|| format!("cannot write {}", path.display()))
        }
        None => {
            let mut writer = BufWriter::new(io::stdout().lock());
            match write_trace(&mut writer, &trace).and_then(|()| writer.flush()) {
                // `rondo trace generate action | head` is not an error.
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
                result => result.context("cannot write to standard output"),
            }
        }
    }
}

/// A known type (generated with seed 1) or a trace file.
fn load(source: &str) -> anyhow::Result<Trace> {
    if let Some(kind) = TraceKind::from_name(source) {
        return Ok(generate_trace(kind, DESCRIBE_SEED));
    }
    let bytes = match std::fs::read(source) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => bail!(
            "'{source}' is neither a known trace type ({}) nor an existing file",
            known_kind_names().join(", ")
        ),
        Err(e) => return Err(e).with_context(|| format!("cannot read {source}")),
    };
    parse_trace_bytes(&bytes).with_context(|| format!("{source} is not a valid rondo trace"))
}

/// What `describe` prints; the JSON keys are the field names.
#[derive(Serialize)]
struct Description {
    kind: String,
    source: String,
    seed: Option<u64>,
    frames: usize,
    round_ms: u64,
    #[serde(flatten)]
    stats: RoundStats,
    /// Total bytes over the rounds' duration, in bits per second.
    mean_bits_per_s: f64,
    /// Seed 000 Table 3's row for the trace's kind, with one-second rounds.
    table3: Option<Table3>,
}

#[derive(Serialize)]
struct Table3 {
    mean_bytes_per_round: f64,
    max_bytes_per_round: u64,
    cov_per_round: f64,
}

fn describe(source: &str, round_ms: u64, json: bool) -> anyhow::Result<()> {
    if round_ms == 0 {
        bail!("--round-ms must be positive");
    }
    let round_duration_ns = round_ms
        .checked_mul(NS_PER_MS)
        .context("--round-ms is too large")?;
    let trace = load(source)?;
    let last_ns = trace.frames().last().map_or(0, |f| f.decode_time_ns);
    let rounds = last_ns / round_duration_ns + 1;
    if rounds > DESCRIBE_ROUNDS_MAX {
        bail!(
            "{source} spans {rounds} rounds of {round_ms} ms (last frame at {last_ns} ns); \
             at most {DESCRIBE_ROUNDS_MAX} are described"
        );
    }
    let stats = RoundStats::of(&client_bytes_per_round(trace.frames(), round_duration_ns)?);
    let table3 = ContentType::from_name(trace.kind())
        .filter(|_| round_duration_ns == NS_PER_S)
        .map(|content| {
            let row = content.table3();
            Table3 {
                mean_bytes_per_round: row.mean_bytes_per_round,
                max_bytes_per_round: row.max_bytes_per_round,
                cov_per_round: row.cov_per_round,
            }
        });
    let description = Description {
        kind: trace.kind().to_string(),
        source: source.to_string(),
        seed: trace.seed(),
        frames: trace.len(),
        round_ms,
        mean_bits_per_s: stats.total_bytes as f64 * 8.0
            / (stats.rounds as f64 * round_duration_ns as f64 / NS_PER_S as f64),
        stats,
        table3,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&description)?);
    } else {
        print_table(&description);
    }
    Ok(())
}

fn print_table(d: &Description) {
    let seed = d.seed.map_or("-".to_string(), |s| s.to_string());
    println!(
        "trace {} (source {}, seed {seed}): {} frames",
        d.kind, d.source, d.frames
    );
    let mut table = comfy_table::Table::new();
    table.load_style(comfy_table::presets::UTF8_FULL_CONDENSED);
    let mut header = vec!["per round".to_string(), format!("{} ms rounds", d.round_ms)];
    if d.table3.is_some() {
        header.push("seed 000 Table 3".to_string());
    }
    table.set_header(header);
    let s = &d.stats;
    let t = d.table3.as_ref();
    let rows: [(&str, String, Option<String>); 6] = [
        ("rounds", s.rounds.to_string(), None),
        (
            "mean bytes",
            format!("{:.0}", s.mean_bytes_per_round),
            t.map(|t| format!("{:.0}", t.mean_bytes_per_round)),
        ),
        (
            "max bytes",
            s.max_bytes_per_round.to_string(),
            t.map(|t| t.max_bytes_per_round.to_string()),
        ),
        (
            "coefficient of variation",
            format!("{:.3}", s.cov_per_round),
            t.map(|t| format!("{:.3}", t.cov_per_round)),
        ),
        ("total bytes", s.total_bytes.to_string(), None),
        (
            "mean bitrate",
            format!("{:.3} Mbit/s", d.mean_bits_per_s / 1e6),
            None,
        ),
    ];
    for (name, value, paper) in rows {
        let mut row = vec![name.to_string(), value];
        if t.is_some() {
            row.push(paper.unwrap_or_default());
        }
        table.add_row(row);
    }
    println!("{table}");
}
