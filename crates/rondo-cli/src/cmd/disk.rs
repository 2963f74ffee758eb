//! `rondo disk`: list profiles, describe one, replay a request trace.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Subcommand, ValueEnum};
use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};
use rondo_model::disk::{
    self, Disk, DiskSummary, Extent, Op, Scheduler, TimedRequest, profiles,
    summary::SEED000_MEAN_REQUEST_BYTES,
};
use rondo_model::units::{ms_to_ns, ns_to_ms};
use serde::Serialize;

#[derive(Subcommand, Debug)]
pub enum DiskCommand {
    /// List the built-in disk profiles.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Describe a profile: geometry, per-zone media rates, mean seek over random
    /// cylinder pairs, mean rotational latency, and the paper-mode round bound.
    Describe {
        /// Profile name, as `rondo disk list` shows it (e.g. `cheetah-4lp`).
        profile: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Replay a read trace through the detailed disk model.
    ///
    /// TRACE.csv has a header line and columns `arrival_ms,lbn,sectors`
    /// (512-byte sectors, reads). Output, in input order:
    /// `id,arrival_ms,lbn,sectors,response_ms` (response = completion - arrival).
    /// The disk starts idle at time 0, heads at cylinder 0, angle 0, cache empty.
    Replay {
        /// Profile name.
        profile: String,
        /// The request trace (CSV).
        trace: PathBuf,
        /// Queue discipline for requests waiting at the disk.
        #[arg(long, value_enum, default_value_t = SchedulerArg::Fcfs)]
        scheduler: SchedulerArg,
    },
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedulerArg {
    /// First come, first served.
    Fcfs,
    /// C-SCAN (C-LOOK): ascending start LBN from the last dispatched, wrapping to the lowest.
    Cscan,
}

pub fn run(command: DiskCommand) -> anyhow::Result<()> {
    match command {
        DiskCommand::List { json } => list(json),
        DiskCommand::Describe { profile, json } => describe(&profile, json),
        DiskCommand::Replay {
            profile,
            trace,
            scheduler,
        } => replay(&profile, &trace, scheduler),
    }
}

#[derive(Serialize)]
struct ListEntry {
    name: String,
    kind: &'static str,
    capacity_bytes: u64,
    rpm: Option<f64>,
    summary: String,
}

fn list(json: bool) -> anyhow::Result<()> {
    let mut out = String::new();
    let mut entries = vec![];
    for p in profiles::builtin() {
        let (kind, rpm) = match &p.model {
            disk::DiskModelSpec::Mechanical(m) => ("mechanical", Some(m.rpm)),
            disk::DiskModelSpec::SolidState(_) => ("solid_state", None),
        };
        entries.push(ListEntry {
            capacity_bytes: p.capacity_bytes()?,
            name: p.name,
            kind,
            rpm,
            summary: p.summary,
        });
    }
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&entries)?)?;
        return emit(&out);
    }
    let mut table = Table::new();
    table.load_style(UTF8_BORDERS_ONLY);
    table.set_header(["profile", "kind", "capacity", "rpm", "drive"]);
    for e in &entries {
        // The summary up to its first ':' or '(' names the drive; describe has the rest.
        let drive = e.summary.split([':', '(']).next().unwrap_or("").trim();
        table.add_row([
            e.name.clone(),
            e.kind.to_string(),
            format!("{:.2} GB", e.capacity_bytes as f64 / 1e9),
            e.rpm.map_or("-".into(), |r| format!("{r}")),
            drive.to_string(),
        ]);
    }
    writeln!(out, "{table}")?;
    writeln!(
        out,
        "`rondo disk describe PROFILE` shows a profile's figures and sources.\n\
         Variants by name: NAME-q (command queueing, drives with a cache), NAME-outer<PERCENT>\n\
         (a rotating drive short-stroked to the outer PERCENT% of its cylinders, e.g.\n\
         cheetah-4lp-outer35), seed003-table1-c<MIB>-s<SEGMENTS> (seed 003's cache set-ups)."
    )?;
    emit(&out)
}

fn describe(name: &str, json: bool) -> anyhow::Result<()> {
    let mut out = String::new();
    let profile = profiles::by_name(name)?;
    let s = DiskSummary::of(&profile)?;
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&s)?)?;
        return emit(&out);
    }
    writeln!(out, "{}: {}", s.name, s.summary)?;
    writeln!(out)?;
    writeln!(
        out,
        "capacity       {:.3} GB ({} sectors of 512 B)",
        s.capacity_bytes as f64 / 1e9,
        s.capacity_sectors
    )?;
    if s.kind == "mechanical" {
        writeln!(
            out,
            "geometry       {} surfaces, {} cylinders, {} zones",
            s.surfaces.unwrap_or(0),
            s.cylinders.unwrap_or(0),
            s.zones.len()
        )?;
        writeln!(
            out,
            "rotation       {} rpm, mean rotational latency {:.3} ms",
            s.rpm.unwrap_or(0.0),
            s.avg_rotational_latency_ms
        )?;
        writeln!(
            out,
            "seek           one cylinder {:.3} ms, mean over random cylinder pairs {:.3} ms, \
             full stroke {:.3} ms; head switch {:.3} ms",
            s.single_cylinder_seek_ms, s.avg_seek_ms, s.full_stroke_seek_ms, s.head_switch_ms
        )?;
        writeln!(out, "bus            {:.1} MB/s", s.bus_mb_per_s)?;
        if let Some(c) = s.cache {
            writeln!(
                out,
                "cache          {} segments × {} sectors, read-ahead up to {} sectors",
                c.segments, c.segment_sectors, c.max_read_ahead_sectors
            )?;
        }
        writeln!(out)?;
        let mut zones = Table::new();
        zones.load_style(UTF8_BORDERS_ONLY);
        zones.set_header([
            "zone",
            "cylinders",
            "sectors/track",
            "skew track/cyl",
            "sectors",
            "media MB/s",
            "effective MB/s",
        ]);
        for z in &s.zones {
            zones.add_row([
                z.zone.to_string(),
                format!("{}–{}", z.first_cylinder, z.last_cylinder),
                z.sectors_per_track.to_string(),
                format!("{}/{}", z.track_skew_sectors, z.cylinder_skew_sectors),
                z.sectors.to_string(),
                format!("{:.2}", z.media_rate_mb_per_s),
                format!("{:.2}", z.effective_rate_mb_per_s),
            ]);
        }
        writeln!(out, "{zones}")?;
    } else {
        writeln!(
            out,
            "flash          read latency {:.3} ms, read rate {:.0} MB/s, no positional dependence",
            s.read_latency_ms.unwrap_or(0.0),
            s.read_rate_mb_per_s.unwrap_or(0.0)
        )?;
    }
    let b = &s.paper_bound;
    writeln!(out)?;
    writeln!(
        out,
        "paper-mode round bound (seed 000 §2.3; {} values: T_fullSeek {:.3} ms, T_trackSeek \
         {:.3} ms, T_avgRot {:.3} ms, R_disk {:.2} MB/s)",
        b.source, b.full_seek_ms, b.track_seek_ms, b.avg_rot_ms, b.rate_mb_per_s
    )?;
    writeln!(
        out,
        "for M requests of {} B each (seed 000 Table 3's mean):",
        SEED000_MEAN_REQUEST_BYTES
    )?;
    let mut rounds = Table::new();
    rounds.load_style(UTF8_BORDERS_ONLY);
    rounds.set_header(["M", "bound ms"]);
    for row in &b.rows {
        rounds.add_row([row.requests.to_string(), format!("{:.1}", row.bound_ms)]);
    }
    writeln!(out, "{rounds}")?;
    writeln!(
        out,
        "max streams per round of {:.0} ms: {}",
        b.round_ms, b.max_requests_per_round
    )?;
    let r = &s.rondo_bound;
    writeln!(out)?;
    match r.seek_line_ms {
        Some((a, b)) => writeln!(
            out,
            "rondo-mode round bound (a true upper bound of the model's C-SCAN batches): fixed \
             {:.2} ms per round, seek line {a:.3} ms + {b:.5} ms per cylinder",
            r.fixed_ms
        ),
        None => writeln!(
            out,
            "rondo-mode round bound (a true upper bound of the model's batches): fixed {:.3} ms \
             per round",
            r.fixed_ms
        ),
    }?;
    writeln!(
        out,
        "for one request of {} B, at its worst place in each zone:",
        r.request_bytes
    )?;
    let mut zones = Table::new();
    zones.load_style(UTF8_BORDERS_ONLY);
    zones.set_header(["zone", "request ms", "max streams per round"]);
    for z in &r.zones {
        zones.add_row([
            z.zone.map_or("all".into(), |z| z.to_string()),
            format!("{:.2}", z.request_ms),
            z.max_requests_per_round.to_string(),
        ]);
    }
    writeln!(out, "{zones}")?;
    emit(&out)
}

const TRACE_HEADER: &str = "arrival_ms,lbn,sectors";

/// Parses a replay trace; errors name the file, the line and the problem.
fn parse_trace(path: &Path, text: &str, disk: &Disk) -> anyhow::Result<Vec<TimedRequest>> {
    let file = path.display();
    let mut lines = text.lines().enumerate();
    let header = lines.next().map(|(_, l)| {
        l.trim()
            .split(',')
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(",")
    });
    match header.as_deref() {
        Some(TRACE_HEADER) => {}
        Some(other) => bail!("{file}:1: the header must be '{TRACE_HEADER}', found '{other}'"),
        None => bail!("{file}: the trace is empty; it needs the header '{TRACE_HEADER}'"),
    }
    let mut requests = vec![];
    for (i, line) in lines {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != 3 {
            bail!(
                "{file}:{n}: expected 3 columns ({TRACE_HEADER}), found {}",
                fields.len()
            );
        }
        let arrival_ms: f64 = fields[0]
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite() && *v >= 0.0)
            .with_context(|| {
                format!(
                    "{file}:{n}: arrival_ms '{}' is not a non-negative number",
                    fields[0]
                )
            })?;
        let lbn: u64 = fields[1].parse().with_context(|| {
            format!(
                "{file}:{n}: lbn '{}' is not a non-negative integer",
                fields[1]
            )
        })?;
        let sectors: u64 = fields[2].parse().with_context(|| {
            format!(
                "{file}:{n}: sectors '{}' is not a non-negative integer",
                fields[2]
            )
        })?;
        let extent = Extent::new(lbn, sectors);
        disk.check_extent(extent)
            .with_context(|| format!("{file}:{n}: bad request"))?;
        requests.push(TimedRequest {
            arrival_ns: ms_to_ns(arrival_ms),
            op: Op::Read,
            extent,
        });
    }
    Ok(requests)
}

fn replay(name: &str, trace: &Path, scheduler: SchedulerArg) -> anyhow::Result<()> {
    let mut disk = Disk::from_name(name)?;
    let text = std::fs::read_to_string(trace)
        .with_context(|| format!("cannot read trace '{}'", trace.display()))?;
    let requests = parse_trace(trace, &text, &disk)?;
    let scheduler = match scheduler {
        SchedulerArg::Fcfs => Scheduler::Fcfs,
        SchedulerArg::Cscan => Scheduler::Cscan,
    };
    let timings = disk.replay(&requests, scheduler)?;
    let mut out = String::with_capacity(requests.len() * 40);
    out.push_str("id,arrival_ms,lbn,sectors,response_ms\n");
    for (id, (r, t)) in requests.iter().zip(&timings).enumerate() {
        out.push_str(&format!(
            "{id},{},{},{},{:.6}\n",
            ns_to_ms(r.arrival_ns),
            r.extent.lbn,
            r.extent.sectors,
            ns_to_ms(t.completion_ns - r.arrival_ns)
        ));
    }
    emit(&out)
}

/// Writes the command's output; a closed pipe (`| head`) is not an error.
fn emit(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        result => Ok(result?),
    }
}
