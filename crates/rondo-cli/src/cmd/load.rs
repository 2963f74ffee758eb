//! `rondo load`: a load generator of real HTTP clients for `rondo serve`.
//!
//! Streams arrive as a Poisson process at `--rate` per second for
//! `--duration` seconds and pick titles by Zipf popularity (both seeded, from
//! the simulator's workload generators); each client reads its title's
//! schedule, requests the stream, starts playback when round 0 has arrived
//! and plays at the schedule, recording start-up latency and stalls. Idle
//! clients that never read can be added. The report (text, or `--json`)
//! sets the clients' view beside the server's deadline misses. The client
//! model is defined in `docs/load.md`; the work is in `src/load/`.

use std::time::Duration;

use anyhow::bail;
use clap::Args;

#[path = "../load/client.rs"]
mod client;
#[path = "../load/idle.rs"]
mod idle;
#[path = "../load/playback.rs"]
mod playback;
#[path = "../load/report.rs"]
mod report;
#[path = "../load/run.rs"]
mod run;
#[path = "../load/server_metrics.rs"]
mod server_metrics;

#[derive(Args, Debug)]
#[command(after_long_help = "\
Streams arrive as a Poisson process at --rate per second during --duration seconds; each \
picks a title by Zipf popularity over the order of GET /api/titles (rank 1 = the first \
title). A client fetches its title's schedule (client bytes per round), requests the \
stream and reads it as fast as it comes (counting bytes, keeping none). The start-up \
latency is the time until round 0's bytes (header pre-roll included) have all arrived; \
playback starts a playout delay later (default one round: the server sends round i's data \
during round i+1). Round k is due one round after round k-1 began \
playing; if its bytes are not all there, that is a stall: playback pauses until they \
arrive. A 503 is a rejection (its \
Retry-After and reason are kept); other failures are errors. When the duration ends no \
stream starts and the running ones are waited for.\n\n\
The server's deadline misses over the run come from GET /metrics \
(rondo_deadline_misses_total) or else GET /api/metrics (stream_round_misses).\n\n\
Examples:\n  rondo load --rate 2 --duration 60\n  \
rondo load --url http://127.0.0.1:8080 --rate 50 --duration 300 --warmup 60 --json\n  \
rondo load --rate 100 --max-streams 900 --idle-clients 100 --duration 20 --json --per-stream\n  \
rondo load --rate 2000 --max-streams 30000 --duration 30 --processes 2   (more connections than one process may open)")]
pub struct LoadArgs {
    /// Base URL of the rondo server. Several, comma-separated (a cluster's
    /// interface nodes): stream k goes to URL k mod n, so the clients spread
    /// evenly over them; the titles and the server's metrics are read from
    /// the first.
    #[arg(
        long,
        value_name = "URL",
        default_value = "http://127.0.0.1:8080",
        value_delimiter = ','
    )]
    pub url: Vec<String>,
    /// Mean arrival rate of new streams per second (Poisson).
    #[arg(long, value_name = "R", default_value_t = 1.0)]
    pub rate: f64,
    /// Seconds during which streams arrive; then the running ones are waited for.
    #[arg(long, value_name = "S", default_value_t = 60.0)]
    pub duration: f64,
    /// Zipf exponent of title popularity: title k (from 1, in GET /api/titles
    /// order) is chosen with probability ∝ 1/k^A; 0 is uniform.
    #[arg(long, value_name = "A", default_value_t = 1.0)]
    pub zipf: f64,
    /// Seed 001 §6.4's popularity instead of --zipf: the first title (in GET
    /// /api/titles order) takes this share of the streams and the others
    /// share the rest evenly.
    #[arg(long, value_name = "P")]
    pub popular_share: Option<f64>,
    /// Seed of the arrival times and title choices.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// At most this many streams arrive (idle clients not counted).
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub max_streams: usize,
    /// Clients that open a stream before the first arrival, never read it and
    /// hold the connection until the run ends.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub idle_clients: usize,
    /// Seconds at the start left out of mean active streams.
    #[arg(long, value_name = "S", default_value_t = 0.0)]
    pub warmup: f64,
    /// Hash the bodies of the first N streams and compare them with one full
    /// GET per title made after the run (which takes a title's duration).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub verify: usize,
    /// Milliseconds from round 0's arrival to the start of playback (default:
    /// one round of the title, the lateness the server's "read in round i,
    /// sent during round i+1" allows); 0 is the strict player.
    #[arg(long, value_name = "MS")]
    pub playout_delay_ms: Option<f64>,
    /// Seconds to wait for response headers (and for the API's answers).
    #[arg(long, value_name = "S", default_value_t = 30.0)]
    pub header_timeout: f64,
    /// Seconds an admitted stream may go without data before it counts as broken.
    #[arg(long, value_name = "S", default_value_t = 30.0)]
    pub read_timeout: f64,
    /// Seconds to wait for running streams after the duration (default: twice
    /// the longest title plus 60); streams still running are then cut.
    #[arg(long, value_name = "S")]
    pub drain_timeout: Option<f64>,
    /// Print the report as JSON (and no progress line).
    #[arg(long)]
    pub json: bool,
    /// Add one record per stream and per idle client to the report.
    #[arg(long)]
    pub per_stream: bool,
    /// When a stream's body breaks (its interface node died), ask another
    /// of the cluster's interface nodes (listed at the start by GET
    /// /api/cluster) for the rest with a Range request, as rondo's player
    /// page does, for up to 15 s; playback goes on from where it was.
    /// Without it a broken body ends the stream (counted broken).
    #[arg(long)]
    pub failover: bool,
    /// Run the clients in K processes of this program. One process holds at
    /// most its open-file limit of connections (`ulimit -n`, one per stream
    /// or idle client); K processes hold K times that. Each draws the same
    /// seeded arrivals and titles and runs every K-th stream, so the load is
    /// the one a single process makes; their records are merged into one
    /// report. Not with --verify.
    #[arg(long, value_name = "K", default_value_t = 1)]
    pub processes: usize,
    /// Run only streams and idle clients whose index is I modulo K (set by
    /// --processes for its client processes).
    #[arg(long, value_name = "I/K", hide = true)]
    pub shard: Option<String>,
}

/// The command line of client process `index` of `count` for
/// `--processes`: these arguments, that process's `--shard`, and a JSON
/// report with every stream's record for the parent to merge.
fn child_args(args: &LoadArgs, index: usize, count: usize) -> Vec<String> {
    let mut line: Vec<String> = vec![
        "load".into(),
        "--url".into(),
        args.url.join(","),
        "--rate".into(),
        args.rate.to_string(),
        "--duration".into(),
        args.duration.to_string(),
        "--zipf".into(),
        args.zipf.to_string(),
        "--seed".into(),
        args.seed.to_string(),
        "--max-streams".into(),
        args.max_streams.to_string(),
        "--idle-clients".into(),
        args.idle_clients.to_string(),
        "--warmup".into(),
        args.warmup.to_string(),
        "--header-timeout".into(),
        args.header_timeout.to_string(),
        "--read-timeout".into(),
        args.read_timeout.to_string(),
        "--shard".into(),
        format!("{index}/{count}"),
        "--json".into(),
        "--per-stream".into(),
    ];
    if let Some(p) = args.popular_share {
        line.extend(["--popular-share".into(), p.to_string()]);
    }
    if let Some(ms) = args.playout_delay_ms {
        line.extend(["--playout-delay-ms".into(), ms.to_string()]);
    }
    if let Some(s) = args.drain_timeout {
        line.extend(["--drain-timeout".into(), s.to_string()]);
    }
    if args.failover {
        line.push("--failover".into());
    }
    line
}

fn seconds(name: &str, value: f64, allow_zero: bool) -> anyhow::Result<Duration> {
    if !value.is_finite() || value < 0.0 || (!allow_zero && value == 0.0) {
        bail!(
            "--{name} must be a {} number of seconds, not {value}",
            if allow_zero {
                "non-negative"
            } else {
                "positive"
            }
        );
    }
    Ok(Duration::from_secs_f64(value))
}

pub fn run(args: LoadArgs) -> anyhow::Result<()> {
    if !(args.rate.is_finite() && args.rate > 0.0) {
        bail!("--rate must be a positive number of streams per second");
    }
    if !(args.zipf.is_finite() && args.zipf >= 0.0) {
        bail!("--zipf must be a non-negative exponent (0 is uniform)");
    }
    if let Some(p) = args.popular_share
        && !(0.0..=1.0).contains(&p)
    {
        bail!("--popular-share must be a share between 0 and 1, got {p}");
    }
    let duration = seconds("duration", args.duration, false)?;
    let warmup = seconds("warmup", args.warmup, true)?;
    if warmup >= duration {
        bail!(
            "--warmup ({} s) must be shorter than --duration ({} s)",
            args.warmup,
            args.duration
        );
    }
    if args.processes == 0 {
        bail!("--processes must be at least 1");
    }
    if args.processes > 1 && args.verify > 0 {
        bail!("--verify runs in one process: leave out --processes, or --verify");
    }
    if args.processes > 1 && args.shard.is_some() {
        bail!("--shard is set by --processes for its client processes; give one or the other");
    }
    let shard = match &args.shard {
        Some(text) => run::Shard::parse(text)?,
        None => run::Shard::ALL,
    };
    let urls: Vec<String> = args
        .url
        .iter()
        .map(|u| u.trim_end_matches('/').to_string())
        .collect();
    if let Some(bad) = urls.iter().find(|u| !u.starts_with("http://")) {
        bail!(
            "--url {bad:?}: each must be an http:// URL of a rondo server, like http://127.0.0.1:8080"
        );
    }
    let config = run::LoadConfig {
        url: urls[0].clone(),
        entry_urls: urls,
        rate_per_s: args.rate,
        duration,
        zipf_exponent: args.zipf,
        popular_share: args.popular_share,
        seed: args.seed,
        max_streams: args.max_streams,
        idle_clients: args.idle_clients,
        warmup,
        verify_streams: args.verify,
        client: client::ClientSettings {
            header_timeout: seconds("header-timeout", args.header_timeout, false)?,
            read_timeout: seconds("read-timeout", args.read_timeout, false)?,
            playout_delay: args
                .playout_delay_ms
                .map(|ms| seconds("playout-delay-ms", ms / 1e3, true))
                .transpose()?,
        },
        drain_timeout: args
            .drain_timeout
            .map(|s| seconds("drain-timeout", s, true))
            .transpose()?,
        progress: !args.json,
        failover: args.failover,
        per_stream: args.per_stream,
        shard,
    };
    let report = if args.processes > 1 {
        let children = (0..args.processes)
            .map(|index| child_args(&args, index, args.processes))
            .collect();
        run::run_processes(config, children)?
    } else {
        run::run_blocking(config)?
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report::render_text(&report));
    }
    Ok(())
}
