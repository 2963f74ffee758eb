//! `rondo serve`: the server, in full operation.
//!
//! Opens the data directory (creating it when absent, with the defaults or
//! the given `--disks`, `--disk-profile`, `--round-ms` and `--stride-bytes`,
//! and ingesting the
//! embedded sample titles into a new one), refuses flags that contradict an
//! existing directory, then serves over HTTP until SIGTERM or SIGINT. Prints
//! the player page's and the API's URLs, and the API token when it was just
//! created. Everything else is `rondo_server`'s.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::Args;
use rondo_model::disk::profile_by_name;
use rondo_model::reservation::{BurstLead, Guarantee, Scheme};
use rondo_model::units::{NS_PER_MS, STRIDE_BYTES_DEFAULT};
use rondo_server::config::{
    DEFAULT_CLIENT_BUFFER_ROUNDS, DEFAULT_LISTEN, DEFAULT_LOOKAHEAD_ROUNDS,
    DEFAULT_REQUEST_BODY_BYTES_MAX, DEFAULT_STALL_GRACE, DEFAULT_START_BURST,
    DEFAULT_START_BURST_BYTES, DEFAULT_UPLOAD_BYTES_MAX,
};
use rondo_server::ingest::{Unthrottled, ingest_sample_titles};
use rondo_server::listener::{self, ConnectionLimits};
use rondo_server::titles::{DEFAULT_DATA_DIR, default_store_config, open_or_create};
use rondo_server::{DiskTiming, ServerConfig, init_logging, serve_until_signal};
use rondo_store::{DirectoryFlags, ServingSettings};

use crate::cmd::layout_args::{LayoutArgs, layout_name};

/// How long a manager that took over refuses new streams (assumption: the
/// interface nodes ask for their streams' rest every 100 ms from the moment
/// the manager answers, so within a round of its start they are all asking;
/// 5 s leaves those refused for lack of room four more rounds to be placed,
/// within the interface buffer's default 6 s).
const TAKEOVER_GRACE_S_DEFAULT: f64 = 5.0;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The data directory; created when absent (with the sample titles).
    #[arg(long, value_name = "DIR", default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// Address to listen on. Loopback by default; give 0.0.0.0:PORT to serve
    /// other machines.
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// Disks of a new data directory (default 4); for an existing one it must
    /// match.
    #[arg(long, value_name = "N")]
    pub disks: Option<u32>,
    /// Failure tolerance of a new data directory: `minimum` (the default:
    /// every admitted stream keeps its deadlines across any single disk
    /// failure, seed 000) or `none` (no time reserved for a failure: more
    /// streams, none protected); for an existing one it must match.
    #[arg(long, value_name = "SCHEME", value_parser = parse_serve_scheme)]
    pub scheme: Option<Scheme>,
    /// Disk profile of a new data directory (default cheetah-4lp; see `rondo
    /// disk list`); for an existing one it must match.
    #[arg(long, value_name = "NAME")]
    pub disk_profile: Option<String>,
    /// Round length T of a new data directory in milliseconds (default
    /// 1000); for an existing one it must match.
    #[arg(long, value_name = "MS")]
    pub round_ms: Option<u64>,
    /// Stride size of a new data directory in bytes (default 2 MiB, a
    /// multiple of the 16 KiB block): one round of a title must fit one
    /// stride, so titles above about 16 Mbit/s at 1 s rounds need larger
    /// strides. For an existing directory it must match.
    #[arg(long, value_name = "BYTES")]
    pub stride_bytes: Option<u64>,
    /// Start rounds admission tries before it answers 503.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_LOOKAHEAD_ROUNDS)]
    pub lookahead_rounds: u64,
    /// Admit with a statistical guarantee: a disk-round's reads run past
    /// their reservation with at most this probability (e.g. 1e-6), the
    /// rotational waits taken as independent and uniform and everything
    /// else at the bound's worst case; more streams fit. Without it every
    /// disk-round is guaranteed (the default). Needs a rotating disk
    /// profile. Stored in a new data directory as its default (rondo.toml's
    /// `[serving]` table); for an existing one it overrides the directory's
    /// for this run. docs/guarantee.md.
    #[arg(long, value_name = "P")]
    pub overrun_probability: Option<f64>,
    /// Which stroke of the drive admission charges seeks for: `whole`
    /// (the default: two full strokes and a sweep per disk-round, wherever
    /// the data lies) or `data`: only the cylinders the data occupies, the
    /// drive short-stroked to the least share that holds it, so more
    /// streams fit while the library fills part of the disks. An ingest
    /// whose data reaches further in widens it first, when every admitted
    /// stream still fits the wider stroke's bound (and is refused with 503
    /// otherwise). Stored in a new data directory as its default; for an
    /// existing one it overrides the directory's for this run.
    /// docs/guarantee.md, "The charged stroke".
    #[arg(long, value_name = "whole|data")]
    pub stroke: Option<rondo_store::Stroke>,
    /// Under `minimum` reservation: rounds a surviving disk has to read a
    /// failed disk's backups (default 1: in their own round, seed 000).
    /// With K > 1 admission reserves per source disk the window's average
    /// backup time, so more streams fit (docs/experiments/
    /// failure-tolerance-cost.md), and every stream's first byte waits
    /// K - 1 rounds, after which its client gets those rounds at once and
    /// stays K - 1 rounds ahead (in place of the start burst). Stored in a
    /// new data directory as its default; for an existing one it overrides
    /// the directory's for this run.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=rondo_store::BACKUP_WINDOW_ROUNDS_MAX as i64))]
    pub backup_window_rounds: Option<u32>,
    /// Under `minimum` reservation: how late the loss of a disk may be
    /// noticed, in rounds (default 0: at a round boundary, seed 000). A
    /// storage node (`--storage-node`) can die at any moment of a round,
    /// with the reads it holds; with L ≥ 1 those reads go to the surviving
    /// disks' backlogs and are covered by the reservation if the loss is
    /// known within L − 1 rounds after its round (L = 2 covers a node whose
    /// broken connection is seen in the next round). Admission spreads each
    /// backup charge over K + L rounds and every client is K − 1 + L rounds
    /// ahead. docs/cluster.md, "A node dying mid-round". Kept, like K, in a
    /// new directory's rondo.toml ([serving]); a later run's flag overrides
    /// it for that run.
    #[arg(long, value_name = "L", value_parser = clap::value_parser!(u32).range(0..=rondo_store::LOSS_NOTICE_ROUNDS_MAX as i64))]
    pub loss_notice_rounds: Option<u32>,
    /// Read devices as fast as they go instead of pacing them to the disk
    /// profile. Admission still uses the profile, so the guarantee then
    /// holds only for devices at least that fast.
    #[arg(long)]
    pub native: bool,
    /// Server buffer per disk in MiB that admission may reserve for the
    /// streams' read buffers [default: 64, seed 000 §6.3]. Streams beyond
    /// what it holds are refused (503, reason "buffer"); size it to the
    /// machine's memory. `rondo simulate --data-dir` takes the same flag.
    #[arg(long, value_name = "MIB")]
    pub buffer_per_disk_mib: Option<u64>,
    /// What the host can send its clients, in megabits per second (10^6
    /// bits): seed 000 §6.3's network capacity. Admission reserves every
    /// stream's bytes of each round against it, so that streams beyond
    /// what the network interface (or the host's CPU, measured with
    /// `tools/cost.sh`) can send are refused (503, reason "network")
    /// rather than all slowed. Default: not limited. `rondo simulate`
    /// takes the same flag.
    #[arg(long, value_name = "MBPS")]
    pub network_mbps_max: Option<f64>,
    /// Refuse new streams (503, reason "host") while the server's sends of
    /// released rounds run later than this many rounds after their release
    /// (the delivery lag, `rondo_delivery_lag_seconds`), in the round in
    /// progress or the one before: the host's CPU is behind, which disk
    /// time, buffers and the network do not show (for example 0.25).
    /// Default: not checked. Measured on a host shared with its load
    /// generator, it refused half of 15,000 arriving streams and those it
    /// admitted still stalled (docs/capacity.md, "Refusing when the host
    /// is behind"); `--network-mbps-max` is the firm limit.
    #[arg(long, value_name = "ROUNDS", default_value_t = 0.0)]
    pub delivery_lag_max_rounds: f64,
    /// Read every stream's every round from its disk, even when another
    /// stream's read of the same extents is still in memory. By default
    /// such reads share that buffer (streams of a title started in the
    /// same round read once); this changes no admission or schedule, only
    /// the host's copies and memory, and is here to measure what sharing
    /// saves (`tools/cost.sh`).
    #[arg(long)]
    pub no_shared_reads: bool,
    /// Send a read without copying it into each socket (`sendfile` from a
    /// memory file) when at least this many streams share it (in its
    /// disk's round, or on average lately on its disk); 0 copies every
    /// round. The default, 32, took 16-20% off the CPU per delivered GB
    /// at 1000 and 12,500 streams on loopback (docs/serving-cost.md, "The
    /// send arena by default"). Changes no admission or schedule.
    #[arg(long, default_value_t = rondo_server::zerocopy::DEFAULT_ZERO_COPY_SHARE_MIN, value_name = "STREAMS")]
    pub zero_copy_share_min: u32,
    /// Rounds of data a session may hold for its client.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_CLIENT_BUFFER_ROUNDS)]
    pub client_buffer_rounds: u64,
    /// Seconds a client that stops reading keeps its stream before it is
    /// dropped (its reservations released, its connection closed).
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_STALL_GRACE.as_secs_f64())]
    pub stall_grace_s: f64,
    /// Seconds of a title a new stream gets at once: read in its first
    /// round (each round on its own disk) and sent as soon as read, when
    /// the disks have room; a short range is read whole. Players start
    /// sooner; 0 turns it off (every round read and sent in real time).
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_START_BURST.as_secs_f64())]
    pub start_burst_s: f64,
    /// A new stream's leading rounds up to this many bytes come at once
    /// too, when that is more than --start-burst-s: a short title whole
    /// (players read on to a title's end when it is near). 0: off.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_START_BURST_BYTES)]
    pub start_burst_bytes: u64,
    /// After its start burst, `spent`: a stream reads on as if started a
    /// round earlier, and its client is again one round ahead of what it
    /// plays (the least server buffer); `kept`: it reads on one round per
    /// round, and its client stays the burst ahead for the whole stream, as
    /// a rate-limited web server's client does (a late round then has the
    /// burst's seconds to arrive in).
    #[arg(long, value_name = "LEAD", default_value = "spent")]
    pub start_burst_lead: BurstLead,
    /// Open connections the server accepts in all; beyond, it answers 503
    /// with Retry-After and closes. 0: no limit.
    #[arg(long, value_name = "N", default_value_t = listener::DEFAULT_CONNECTIONS_MAX)]
    pub connections_max: usize,
    /// Open connections one client address may hold; beyond, 503 with
    /// Retry-After. 0: no limit (load tests from one address need it).
    #[arg(long, value_name = "N", default_value_t = listener::DEFAULT_CONNECTIONS_PER_CLIENT_MAX)]
    pub connections_per_client_max: usize,
    /// Seconds a client may take to send a request's headers (slowloris
    /// bound; also the keep-alive wait for the next request).
    #[arg(long, value_name = "SECONDS", default_value_t = listener::DEFAULT_HEADER_READ_TIMEOUT.as_secs_f64())]
    pub header_timeout_s: f64,
    /// Seconds a connection may go without reading or writing a byte.
    #[arg(long, value_name = "SECONDS", default_value_t = listener::DEFAULT_IDLE_TIMEOUT.as_secs_f64())]
    pub idle_timeout_s: f64,
    /// Largest request head (request line and headers), in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = listener::DEFAULT_HEADER_BYTES_MAX)]
    pub header_bytes_max: usize,
    /// Each connection's kernel send buffer in bytes (bounds what a client
    /// that stops reading absorbs before its stall is seen). 0: the
    /// kernel's autotuning.
    #[arg(long, value_name = "BYTES", default_value_t = listener::DEFAULT_SOCKET_SEND_BUFFER_BYTES)]
    pub socket_send_buffer_bytes: usize,
    /// Largest request body on every route but the upload, in bytes (413 beyond).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_REQUEST_BODY_BYTES_MAX)]
    pub request_body_bytes_max: usize,
    /// Largest upload (POST /api/admin/titles), in bytes (413 beyond). 0: no limit.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_UPLOAD_BYTES_MAX)]
    pub upload_bytes_max: u64,
    /// Do not ingest the sample titles into a new data directory.
    #[arg(long)]
    pub no_samples: bool,
    /// A storage node (`rondo node storage`) that reads some of the array's
    /// disks for this server, as HOST:PORT; repeat it for each node. With
    /// any, every disk must be on exactly one node, and this server is the
    /// cluster's manager and interface: it admits, schedules the rounds and
    /// serves HTTP, while the nodes read the disks (docs/cluster.md).
    #[arg(
        long = "storage-node",
        value_name = "HOST:PORT",
        conflicts_with = "etcd"
    )]
    pub storage_nodes: Vec<String>,
    #[command(flatten)]
    pub etcd: crate::cmd::node::EtcdArgs,
    /// With --etcd: this manager's name in the cluster (default:
    /// manager-<listen address>).
    #[arg(long, value_name = "NAME", requires = "etcd")]
    pub manager_id: Option<String>,
    /// With --etcd: the URL clients reach this server at, as registered in
    /// etcd (default: http://<listen address>).
    #[arg(long, value_name = "URL", requires = "etcd")]
    pub advertise_url: Option<String>,
    /// With --etcd: seconds to wait, once elected, for storage nodes that
    /// cover every disk to register.
    #[arg(long, value_name = "S", default_value_t = 60, requires = "etcd")]
    pub discover_timeout_s: u64,
    /// With --etcd: seconds a manager that took over from another refuses
    /// new streams (503, reason takeover), so that the streams its
    /// predecessor carried, asked for again by the interface nodes, get
    /// their rounds back first.
    #[arg(long, value_name = "S", default_value_t = TAKEOVER_GRACE_S_DEFAULT, requires = "etcd")]
    pub takeover_grace_s: f64,
    /// How a cluster's manager treats popular titles (seed 001 §6): `rdss`
    /// (the default) serves every stream from the storage nodes through
    /// the interface node that asked; `ldss` dedicates a popular title to
    /// the interface node (started with --local-data-dir) whose request
    /// made it popular: that node copies it to its local disk and serves
    /// its viewers from there, and the title's viewers at other interface
    /// nodes are redirected (307) to it; `lmss` as `ldss`, the dedicated
    /// node also keeping the title's first seconds in memory.
    #[arg(long, value_enum, default_value = "rdss")]
    pub retrieval: RetrievalArg,
    /// With --retrieval ldss|lmss: Δt, the popularity log's window, in
    /// seconds (assumption, as in the simulated Figure 11: seed 001 gives
    /// none).
    #[arg(long, value_name = "S", default_value_t = 60.0)]
    pub popular_window_s: f64,
    /// With --retrieval ldss|lmss: requests for a title from its start
    /// within the window that make it popular (Th_pop·Δt).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub popular_requests: u32,
    /// With --retrieval ldss|lmss: titles one interface node may be
    /// dedicated to (seed 001 dedicates one node to its one popular title).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub titles_per_interface: u32,
    /// With --retrieval ldss|lmss: whether a dedicated interface node
    /// serves other titles too. `shared` (the default): it does, and only
    /// its popular title's viewers are sent to it. `exclusive` (seed 001
    /// §6.4 as the paper has it, "other requests go to the other I
    /// nodes"): it serves only its dedicated titles, and a new viewer of
    /// another title that asks through it is redirected (307) to a node
    /// dedicated to none, in turn.
    #[arg(long, value_enum, default_value = "shared")]
    pub dedicated_node: DedicatedNodeArg,
    #[command(flatten)]
    pub layout: LayoutArgs,
    #[command(flatten)]
    pub policy: crate::cmd::policy_args::PolicyArgs,
}

/// How the user ran this binary, for the hints it prints: `rondo` when it
/// is on PATH under that name (`cargo install --path crates/rondo-cli`),
/// `cargo run --release --` when it runs from a cargo target directory, the
/// path it was started by otherwise.
pub fn invocation() -> String {
    let exe = std::env::current_exe().ok();
    let argv0 = std::env::args().next().unwrap_or_else(|| "rondo".into());
    invocation_for(exe.as_deref(), &argv0, std::env::var_os("CARGO").is_some())
}

/// [`invocation`] for a binary at `exe`, started as `argv0`, under `cargo
/// run` (which sets `CARGO` in the child's environment) or not.
fn invocation_for(exe: Option<&std::path::Path>, argv0: &str, under_cargo: bool) -> String {
    if under_cargo {
        let release = exe.is_some_and(|p| p.parent().is_some_and(|d| d.ends_with("release")));
        if release {
            "cargo run --release --".into()
        } else {
            "cargo run --".into()
        }
    } else {
        // Found on PATH (`rondo`) or started by its path: either works again.
        argv0.to_string()
    }
}

/// "backup window 4 rounds, overrun probability 1e-6", or the defaults'.
fn serving_summary(serving: &ServingSettings) -> String {
    let window = match serving.backup_window() {
        1 => "no backup window".to_string(),
        k => format!("a backup window of {k} rounds"),
    };
    let guarantee = match serving.overrun_probability {
        None => "the deterministic guarantee".to_string(),
        Some(p) => format!("overrun probability {p:e}"),
    };
    match serving.loss_notice() {
        0 => format!("{window} and {guarantee}"),
        l => format!("{window}, a loss noticed up to {l} rounds late and {guarantee}"),
    }
}

fn now_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    init_logging();
    if args.lookahead_rounds == 0 {
        bail!("--lookahead-rounds must be at least 1");
    }
    if !(args.start_burst_s.is_finite() && (0.0..=600.0).contains(&args.start_burst_s)) {
        bail!(
            "--start-burst-s must be between 0 and 600 seconds, got {}",
            args.start_burst_s
        );
    }
    if !(args.stall_grace_s.is_finite() && args.stall_grace_s >= 0.0) {
        bail!("--stall-grace-s must be a non-negative number of seconds");
    }
    for (flag, seconds) in [
        ("--header-timeout-s", args.header_timeout_s),
        ("--idle-timeout-s", args.idle_timeout_s),
    ] {
        if !(seconds.is_finite() && seconds > 0.0) {
            bail!("{flag} must be a positive number of seconds");
        }
    }
    if args.round_ms == Some(0) {
        bail!("--round-ms must be positive");
    }
    let mut create = default_store_config();
    if let Some(name) = &args.disk_profile {
        let profile = profile_by_name(name)?;
        create.disk_profile = profile.name.clone();
        create.capacity_bytes =
            profile.capacity_bytes()? / STRIDE_BYTES_DEFAULT * STRIDE_BYTES_DEFAULT;
    }
    if let Some(scheme) = args.scheme {
        create.scheme = scheme;
    }
    if let Some(disks) = args.disks {
        create.disk_count = disks;
    }
    if let Some(ms) = args.round_ms {
        create.round_duration_ns = ms * NS_PER_MS;
    }
    let segment_rounds = args.layout.segment_rounds()?;
    if let Some(n) = segment_rounds {
        create.segment_rounds = n;
    }
    if let Some(g) = args.layout.disk_groups {
        create.disk_groups = g;
    }
    if let Some(w) = args.layout.stripe_disks {
        create.stripe_disks = w;
    }
    if let Some(stride_bytes) = args.stride_bytes {
        if stride_bytes == 0 || !stride_bytes.is_multiple_of(create.block_bytes) {
            bail!(
                "--stride-bytes must be a positive multiple of the {}-byte block",
                create.block_bytes
            );
        }
        create.stride_bytes = stride_bytes;
        // Devices hold whole strides.
        create.capacity_bytes = create.capacity_bytes / stride_bytes * stride_bytes;
    }
    if !args.data_dir.exists() {
        // Refuse a policy the new directory's layout cannot serve before
        // creating it.
        args.policy.read_group_rounds(create.segment_rounds)?;
        args.policy.dynamic_cycle(create.segment_rounds)?;
    }
    // With etcd, this server first stands for the cluster's object manager:
    // a standby waits here, before it takes the data directory, until the
    // leader is gone.
    let lost_leadership = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Set when this manager waited as the standby: it then takes over
    // streams that interface nodes will ask for again.
    let mut took_over = false;
    let mut manager_session = match args.etcd.config() {
        None => None,
        Some(etcd) => {
            // The manager's address is registered before it listens.
            if args.advertise_url.is_none()
                && (args.listen.port() == 0 || args.listen.ip().is_unspecified())
            {
                bail!(
                    "--listen {}: with --etcd, give the address clients reach this manager at \
                     (--listen HOST:PORT with a port, or --advertise-url URL)",
                    args.listen
                );
            }
            let manager = rondo_cluster::coord::NodeInfo {
                id: args
                    .manager_id
                    .clone()
                    .unwrap_or_else(|| format!("manager-{}", args.listen)),
                role: rondo_cluster::Role::Manager.name().into(),
                address: args
                    .advertise_url
                    .clone()
                    .unwrap_or_else(|| format!("http://{}", args.listen)),
                disks: Vec::new(),
            };
            eprintln!(
                "standing for the object manager of cluster {} in etcd {}",
                etcd.cluster,
                etcd.endpoints.join(",")
            );
            let session =
                rondo_cluster::membership::ManagerSession::elect(&etcd, &manager, |leader| {
                    eprintln!("standby: the manager at {leader} leads; waiting until it is gone");
                    took_over = true;
                })
                .context("standing for the object manager through etcd")?;
            let lost = std::sync::Arc::clone(&lost_leadership);
            session.on_leadership_lost(move || {
                // Fencing: a manager whose lease ended may already have a
                // successor, so it stops (the nodes refuse its epoch too).
                eprintln!("etcd lease ended: no longer the object manager; stopping");
                lost.store(true, std::sync::atomic::Ordering::SeqCst);
                // SAFETY: kill(2) on this process with a handled signal.
                unsafe {
                    libc::kill(libc::getpid(), libc::SIGTERM);
                }
            });
            Some((session, manager, etcd))
        }
    };
    // A deposed manager on this host releases the directory when it stops,
    // within a lease of its successor's election.
    let cluster_manager = manager_session.is_some() || !args.storage_nodes.is_empty();
    let (store, created) = open_store(
        &args.data_dir,
        create,
        manager_session.is_some(),
        cluster_manager,
    )
    .with_context(|| format!("cannot open data directory {}", args.data_dir.display()))?;
    let config = store.config().clone();
    if created {
        eprintln!(
            "created data directory {} ({} disks, {}, {} ms rounds, {} reservation, {} layout{}{})",
            args.data_dir.display(),
            config.disk_count,
            config.disk_profile,
            config.round_duration_ns / NS_PER_MS,
            config.scheme,
            layout_name(config.segment_rounds),
            match config.disk_groups {
                1 => String::new(),
                g => format!(", {g} disk groups"),
            },
            match config.stripe_disks {
                0 => String::new(),
                w => format!(", titles striped over {w} disks"),
            }
        );
    } else {
        if let Some(name) = &args.disk_profile
            && *name != config.disk_profile
        {
            bail!(
                "data directory {} has disk profile {}; --disk-profile {name} contradicts it",
                args.data_dir.display(),
                config.disk_profile
            );
        }
        config
            .check_flags(&DirectoryFlags {
                disk_count: args.disks,
                round_duration_ns: args.round_ms.map(|ms| ms * NS_PER_MS),
                segment_rounds,
                stride_bytes: args.stride_bytes,
                disk_groups: args.layout.disk_groups,
                stripe_disks: args.layout.stripe_disks,
                scheme: args.scheme,
                ..DirectoryFlags::default()
            })
            .map_err(|e| anyhow::anyhow!("{}: {e}", args.data_dir.display()))?;
    }
    for name in store.recovered_titles() {
        eprintln!("removed unfinished title {name:?} left by an interrupted ingest");
    }
    // How the directory is served: its [serving] table, a new directory's
    // from this run's flags, an existing one's overridden by them.
    let flags = ServingSettings {
        backup_window_rounds: args.backup_window_rounds,
        overrun_probability: args.overrun_probability,
        loss_notice_rounds: args.loss_notice_rounds,
        stroke: args.stroke,
    };
    if created && !flags.is_default() {
        store.set_serving(&flags).with_context(|| {
            format!(
                "recording the serving settings in {}",
                args.data_dir.display()
            )
        })?;
    }
    let serving = config.serving.overridden_by(&flags);
    if !created && serving != config.serving {
        eprintln!(
            "serving {} with {} for this run (its rondo.toml says {})",
            args.data_dir.display(),
            serving_summary(&serving),
            serving_summary(&config.serving)
        );
    }
    if created && !args.no_samples {
        let stored = ingest_sample_titles(&store, now_unix_ns(), &Unthrottled)
            .context("storing the sample titles")?;
        let names: Vec<&str> = stored.iter().map(|r| r.name.as_str()).collect();
        eprintln!("stored the sample titles: {}", names.join(", "));
    }
    // A cluster's manager: the disks are read by storage nodes, named on the
    // command line or found in etcd (`manager_session`, elected above).
    let (storage_nodes, manager_epoch) = match manager_session.as_mut() {
        None => (args.storage_nodes.clone(), 0),
        Some((session, _, _)) => {
            let found = session
                .discover(
                    config.disk_count,
                    Duration::from_secs(args.discover_timeout_s),
                )
                .context("finding the storage nodes in etcd")?;
            eprintln!(
                "elected object manager (epoch {}); storage nodes from etcd: {}",
                session.epoch(),
                found.join(", ")
            );
            (found, session.epoch())
        }
    };
    let remote_disks = if storage_nodes.is_empty() {
        None
    } else {
        let nodes = rondo_cluster::StorageNodes::connect(
            &storage_nodes,
            &config.array_id.to_string(),
            config.disk_count,
        )
        .context("reaching the storage nodes")?
        .with_manager_epoch(manager_epoch)
        .with_loss_notice_rounds(serving.loss_notice());
        // A disk whose device this directory does not hold is the node's
        // own: every access to it goes to the node. One this directory
        // holds (a shared filesystem) is written here, as before.
        // Measured: attaching every disk's node device also on a shared
        // filesystem left cluster_interface's resumed streams a round less
        // slack at a takeover (2.7–2.9 s against 3.5–3.8 s, 5 runs of 6
        // against 3 of 3), cause not found yet.
        // A held disk's node reads the device here: it is told when
        // replace-disk makes a new one, so that it switches to it.
        for (disk, device) in nodes.remote_devices() {
            if store.device(disk).unavailable_reason().is_some() {
                store.attach_remote_device(disk, device);
            } else {
                store.attach_device_reader(disk, device);
            }
        }
        for node in nodes.nodes() {
            eprintln!(
                "storage node {} at {} reads disks {:?}",
                node.node_id,
                node.address,
                node.disks.iter().map(|d| d.0).collect::<Vec<_>>()
            );
        }
        Some(rondo_server::executor::RemoteDisks(std::sync::Arc::new(
            nodes,
        )))
    };
    // What /api/cluster and the dashboard show of the cluster.
    let cluster = manager_session.as_ref().map(|(session, manager, etcd)| {
        rondo_server::executor::Cluster(session.watch(manager, etcd))
    });
    let server_config = ServerConfig {
        remote_disks,
        cluster,
        takeover_until: took_over
            .then(|| std::time::Instant::now() + Duration::from_secs_f64(args.takeover_grace_s)),
        listen: args.listen,
        lookahead_rounds: args.lookahead_rounds,
        guarantee: Guarantee::with_overrun_probability(serving.overrun_probability),
        stroke: serving.stroke(),
        backup_window_rounds: serving.backup_window(),
        loss_notice_rounds: serving.loss_notice(),
        disk_timing: if args.native {
            DiskTiming::Native
        } else {
            DiskTiming::Emulated
        },
        client_buffer_rounds: args.client_buffer_rounds.max(1),
        stall_grace: Duration::from_secs_f64(args.stall_grace_s),
        start_burst: Duration::from_secs_f64(args.start_burst_s),
        start_burst_bytes: args.start_burst_bytes,
        start_burst_lead: args.start_burst_lead,
        read_group_rounds: args.policy.read_group_rounds(config.segment_rounds)?,
        drive_prefetch: args.policy.drive_prefetch(),
        cycle: args.policy.dynamic_cycle(config.segment_rounds)?,
        connections: ConnectionLimits {
            connections_max: args.connections_max,
            connections_per_client_max: args.connections_per_client_max,
            header_read_timeout: Duration::from_secs_f64(args.header_timeout_s),
            idle_timeout: Duration::from_secs_f64(args.idle_timeout_s),
            header_bytes_max: args.header_bytes_max,
            socket_send_buffer_bytes: args.socket_send_buffer_bytes,
        },
        request_body_bytes_max: args.request_body_bytes_max,
        upload_bytes_max: args.upload_bytes_max,
        buffer_per_disk_bytes: buffer_per_disk_bytes(args.buffer_per_disk_mib)?,
        network_bits_per_s_max: network_bits_per_s(args.network_mbps_max)?,
        delivery_lag_max_rounds: delivery_lag_max_rounds(args.delivery_lag_max_rounds)?,
        share_reads: !args.no_shared_reads,
        zero_copy_share_min: args.zero_copy_share_min,
        local_copies: local_copies(&args)?,
        ..ServerConfig::default()
    };
    let data_dir = args.data_dir.clone();
    serve_until_signal(store, server_config, |server| {
        let url = server.url();
        let titles = server.store().titles().map(|t| t.len()).unwrap_or(0);
        println!(
            "rondo is serving {titles} title(s) from {} ({} {} disks, {}, {} ms rounds)",
            data_dir.display(),
            config.disk_count,
            if args.native { "native" } else { "emulated" },
            config.disk_profile,
            config.round_duration_ns / NS_PER_MS
        );
        println!(
            "  failure tolerance: {} reservation, {}",
            config.scheme,
            serving_summary(&serving)
        );
        let charged = server.charged_stroke();
        if charged.stroke == rondo_store::Stroke::Data {
            println!(
                "  admission charges the data's stroke: {} ({}% of the drive's cylinders; \
                 widened as ingest places data further in)",
                charged.charged_profile, charged.stroke_percent
            );
        }
        if serving.backup_window() > 1 {
            println!(
                "    (each stream's first byte waits {} rounds; its player then stays that far ahead)",
                serving.backup_window() - 1
            );
        }
        println!("  player: {url}/");
        println!("  API:    {url}/api  (titles: {url}/api/titles)");
        let token_file = data_dir.join(rondo_server::auth::TOKEN_FILE);
        if server.token_created() {
            println!(
                "  API token for control endpoints (shown once; kept in {}): {}",
                token_file.display(),
                server.token()
            );
        } else {
            println!(
                "  API token for control endpoints: in {} (`rondo admin` reads it there)",
                token_file.display()
            );
        }
        println!("  dashboard: {url}/dashboard  (Prometheus metrics: {url}/metrics)");
        println!(
            "  add titles while it runs: {} ingest FILE --data-dir {}",
            invocation(),
            data_dir.display()
        );
        println!("Press Ctrl-C to stop.");
    })
    .context("rondo serve")?;
    if lost_leadership.load(std::sync::atomic::Ordering::SeqCst) {
        anyhow::bail!(
            "stopped: this server lost the object manager's leadership (its etcd lease ended)"
        );
    }
    if let Some((session, _, _)) = manager_session {
        session
            .resign()
            .context("resigning the object manager's leadership")?;
    }
    Ok(())
}

/// `--scheme`: the schemes `rondo serve` serves (`none`, `minimum`).
fn parse_serve_scheme(s: &str) -> Result<Scheme, String> {
    match s.parse::<Scheme>()? {
        scheme @ (Scheme::None | Scheme::Minimum) => Ok(scheme),
        other => Err(format!(
            "rondo serve serves `minimum` or `none`, not `{other}` (rondo simulate models the others)"
        )),
    }
}

/// Opens (or creates) the data directory; an elected manager waits up to
/// 30 s for a deposed one on the same host to let it go.
/// Opens (or creates) the data directory. A cluster's manager opens an
/// existing one without requiring its devices here: its storage nodes may
/// hold them on hosts of their own.
fn open_store(
    dir: &std::path::Path,
    create: rondo_store::StoreConfig,
    wait_for_lock: bool,
    cluster_manager: bool,
) -> Result<(rondo_store::Store, bool), rondo_store::StoreError> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let opened = if cluster_manager && dir.join(rondo_store::CONFIG_FILE).exists() {
            rondo_store::Store::open_devices_elsewhere(dir).map(|store| (store, false))
        } else {
            open_or_create(dir, create.clone())
        };
        match opened {
            Err(rondo_store::StoreError::Locked { .. })
                if wait_for_lock && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(200));
            }
            other => return other,
        }
    }
}

/// `--buffer-per-disk-mib` in bytes (the default without it), shared by
/// `rondo serve` and `rondo simulate --data-dir` so that a prediction is
/// made with the budget the server admits against.
pub fn buffer_per_disk_bytes(mib: Option<u64>) -> anyhow::Result<u64> {
    match mib {
        None => Ok(rondo_store::titles::DEFAULT_BUFFER_PER_DISK_BYTES),
        Some(0) => anyhow::bail!("--buffer-per-disk-mib must be positive"),
        Some(mib) => mib
            .checked_mul(1 << 20)
            .with_context(|| format!("--buffer-per-disk-mib {mib}: too large")),
    }
}

/// `--delivery-lag-max-rounds`: 0 turns the check off.
pub fn delivery_lag_max_rounds(rounds: f64) -> anyhow::Result<Option<f64>> {
    if !rounds.is_finite() || rounds < 0.0 {
        anyhow::bail!(
            "--delivery-lag-max-rounds {rounds}: must be a number of rounds, 0 or more (0: not checked)"
        )
    }
    Ok((rounds > 0.0).then_some(rounds))
}

/// `--network-mbps-max` in bits per second, shared by `rondo serve` and
/// `rondo simulate` so that a prediction is made with the capacity the
/// server admits against.
pub fn network_bits_per_s(mbps: Option<f64>) -> anyhow::Result<Option<u64>> {
    match mbps {
        None => Ok(None),
        Some(m) if !(m.is_finite() && m > 0.0) => {
            anyhow::bail!(
                "--network-mbps-max {m}: must be a positive number of megabits per second"
            )
        }
        Some(m) if m * 1e6 >= u64::MAX as f64 => {
            anyhow::bail!("--network-mbps-max {m}: too large")
        }
        Some(m) => Ok(Some((m * 1e6).round() as u64)),
    }
}

#[cfg(test)]
mod tests {
    use super::invocation_for;
    use std::path::Path;

    #[test]
    fn network_capacity_is_read_in_megabits_and_bad_values_are_refused() {
        use super::network_bits_per_s;
        assert_eq!(network_bits_per_s(None).unwrap(), None);
        assert_eq!(network_bits_per_s(Some(1.5)).unwrap(), Some(1_500_000));
        assert_eq!(
            network_bits_per_s(Some(10_000.0)).unwrap(),
            Some(10_000_000_000)
        );
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e20] {
            let e = network_bits_per_s(Some(bad)).unwrap_err().to_string();
            assert!(e.contains("--network-mbps-max"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_delivery_lag_limit_is_off_at_zero_and_bad_values_are_refused() {
        use super::delivery_lag_max_rounds;
        assert_eq!(delivery_lag_max_rounds(0.0).unwrap(), None);
        assert_eq!(delivery_lag_max_rounds(0.25).unwrap(), Some(0.25));
        for bad in [-0.5, f64::NAN, f64::INFINITY] {
            let e = delivery_lag_max_rounds(bad).unwrap_err().to_string();
            assert!(e.contains("--delivery-lag-max-rounds"), "{bad}: {e}");
        }
    }

    #[test]
    fn hints_name_the_command_the_user_can_run() {
        let release = Path::new("/src/rondo/target/release/rondo");
        let debug = Path::new("/src/rondo/target/debug/rondo");
        assert_eq!(
            invocation_for(Some(release), "target/release/rondo", true),
            "cargo run --release --"
        );
        assert_eq!(
            invocation_for(Some(debug), "target/debug/rondo", true),
            "cargo run --"
        );
        assert_eq!(invocation_for(Some(release), "rondo", false), "rondo");
        assert_eq!(
            invocation_for(Some(release), "./target/release/rondo", false),
            "./target/release/rondo"
        );
    }
}

/// `--retrieval`: seed 001 §6's three policies.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetrievalArg {
    Rdss,
    Ldss,
    Lmss,
}

/// `--dedicated-node`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DedicatedNodeArg {
    Shared,
    Exclusive,
}

/// The manager's LDSS/LMSS settings from the flags (`None` for RDSS).
fn local_copies(
    args: &ServeArgs,
) -> anyhow::Result<Option<rondo_server::config::LocalCopiesConfig>> {
    use rondo_model::cluster::Retrieval;
    let retrieval = match args.retrieval {
        RetrievalArg::Rdss => return Ok(None),
        RetrievalArg::Ldss => Retrieval::Ldss,
        RetrievalArg::Lmss => Retrieval::Lmss,
    };
    anyhow::ensure!(
        args.popular_window_s.is_finite() && args.popular_window_s > 0.0,
        "--popular-window-s must be a positive number of seconds"
    );
    anyhow::ensure!(
        args.popular_requests >= 1,
        "--popular-requests must be at least 1"
    );
    anyhow::ensure!(
        args.titles_per_interface >= 1,
        "--titles-per-interface must be at least 1"
    );
    Ok(Some(rondo_server::config::LocalCopiesConfig {
        retrieval,
        window_ns: (args.popular_window_s * 1e9) as u64,
        threshold_requests: args.popular_requests,
        titles_per_interface: args.titles_per_interface,
        exclusive: args.dedicated_node == DedicatedNodeArg::Exclusive,
    }))
}
