//! Runtime settings of a running server: what `rondo serve`'s flags may
//! change without touching the data directory.
//!
//! What a data directory fixes (D, stride, B_l, T, disk profile, scheme,
//! placement) lives in its `rondo.toml` and is read from the store; this
//! module owns only the settings that may differ from one run to the next:
//! where to listen, how many rounds admission looks ahead, whether device
//! reads are paced to the disk model, the per-session buffer, how long a
//! client that stops reading keeps its stream, and the server buffer admission
//! may reserve.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Serialize;

use rondo_model::reservation::{BurstLead, Guarantee};

/// How device reads are timed.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DiskTiming {
    /// Every device is paced to its disk model: a read completes at the later
    /// of the model's completion time and the real one. What admission
    /// promises then holds whatever the host's storage is (the default).
    Emulated,
    /// No pacing: reads complete when the device returns them. Admission
    /// still charges the configured profile, so its guarantee holds only for
    /// devices at least as fast as that profile.
    Native,
}

impl DiskTiming {
    pub fn name(self) -> &'static str {
        match self {
            DiskTiming::Emulated => "emulated",
            DiskTiming::Native => "native",
        }
    }
}

/// Default listen address: loopback only, so nothing is exposed unless asked.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
pub use rondo_store::titles::{DEFAULT_BUFFER_PER_DISK_BYTES, DEFAULT_LOOKAHEAD_ROUNDS};
/// Default client buffer: what a session may hold ahead of playback.
pub const DEFAULT_CLIENT_BUFFER_ROUNDS: u64 = 2;
/// Default start burst: how much of a title a new stream gets at once, read
/// in its first round. Measured: ffmpeg and mpv (libavformat) read 5 s of an
/// MPEG-TS title's timestamps (`max_analyze_duration`) before they play, so
/// six 1 s rounds; see docs/server.md, "MPEG-TS start-up".
pub const DEFAULT_START_BURST: Duration = Duration::from_secs(6);
/// Default start burst by size: a title's leading rounds up to this many
/// bytes come at once too. libavformat reads on through its connection to a
/// title's last 250 kB when they lie within its TCP window instead of asking
/// for them, so a short title is wanted whole (assumption: 1 MiB, a typical
/// Linux receive window after autotuning; docs/server.md).
pub const DEFAULT_START_BURST_BYTES: u64 = 1 << 20;
/// Time a late start's reads must have left in the round beyond the disk
/// model's (`ArrayConfig::late_start_allowance_ns`). Assumption: the batch's
/// hand-over to the disk thread, its report at the next wake (one
/// `io::EMULATION_QUANTUM_NS`) and a loaded host's scheduling take under
/// 10 ms. Measured: a late start admitted 2.9 ms before its round's end,
/// whose model reads fitted, completed after it on a loaded 2-core host
/// (6 deadline misses in a `tools/cost.sh` run, docs/capacity.md). A stream
/// asked for in a round's last 10 ms starts at the next boundary instead.
pub const LATE_START_ALLOWANCE_NS: u64 = 10_000_000;
/// Default grace time for a client that stops reading.
pub const DEFAULT_STALL_GRACE: Duration = Duration::from_secs(30);
/// Titles up to this long can be admitted: it sizes the reservation tables
/// (their rings span the longest title plus the look-ahead).
pub const DEFAULT_MAX_TITLE_DURATION: Duration = Duration::from_secs(4 * 3600);

/// Settings of one server run.
#[derive(Clone, Debug, Serialize)]
pub struct ServerConfig {
    /// Address the HTTP server binds (port 0 picks a free port).
    pub listen: SocketAddr,
    /// Start rounds admission tries, from the earliest possible one, before
    /// it answers 503.
    pub lookahead_rounds: u64,
    /// What admission guarantees each disk-round (docs/guarantee.md):
    /// deterministic (the default) or statistical.
    pub guarantee: Guarantee,
    /// Which stroke of the drive the rondo bound charges: the whole
    /// drive's (the default) or the cylinders the data occupies, widened
    /// as ingest places data further in (`crate::stroke`).
    pub stroke: rondo_store::Stroke,
    pub disk_timing: DiskTiming,
    /// Rounds of data a session's sender may hold for its client (the
    /// bounded per-session channel); the schedule itself never sends more
    /// than two rounds ahead of playback.
    pub client_buffer_rounds: u64,
    /// How long a client that stops reading keeps its buffer and
    /// reservations before its stream is dropped.
    pub stall_grace: Duration,
    /// Playback time a new stream reads in its first round and sends as soon
    /// as read, when the disks have room (`Duration::ZERO`: none; rounded up
    /// to whole rounds). A short range (a player's look at a title's end) is
    /// read whole at once.
    pub start_burst: Duration,
    /// A new stream's leading rounds up to this many bytes come at once too,
    /// if that is more than `start_burst` (0: no burst by size).
    pub start_burst_bytes: u64,
    /// Whether a start burst's client keeps the burst's lead for the whole
    /// stream or drops back to a round ahead after it
    /// (`rondo_model::reservation::shape`).
    pub start_burst_lead: BurstLead,
    /// Start a stream in the round in progress when the disks can read its
    /// first rounds before the round ends (`Array::admit_now`), rather than
    /// at the next round boundary: a request costs one read, not up to a
    /// round of waiting. A player's second and third requests (an MPEG-TS
    /// title's end, then its start again) come just after a round began.
    pub late_start: bool,
    /// Stream reads of the same extents share one buffer while it is held
    /// (`io`: streams of a title started in the same round read once). Off
    /// only to measure what it saves; it changes no decision.
    pub share_reads: bool,
    /// A read shared by at least this many streams of a batch is read into
    /// the send arena and goes to their sockets without a copy
    /// (`crate::zerocopy`); 0: every round is copied. It changes no
    /// decision, only the host's CPU.
    pub zero_copy_share_min: u32,
    /// Rounds a stream reads per request (seed 003's GPMP: k = u + 1, the
    /// next u rounds read ahead into host memory with each read); 1 reads
    /// each round in its own request (Sweep). Above 1 it needs a `segments`
    /// data directory, whose consecutive rounds lie next to each other.
    /// A grouped stream has no start burst.
    pub read_group_rounds: u32,
    /// Seed 003's prefetching into the drive cache (Sweep&Prefetch,
    /// Gradual): needs a `segments` directory whose disk profile has a
    /// cache (e.g. `seed003-table1-c8-s8`) and emulated disks, whose model
    /// has the cache; a real drive's cache cannot be commanded so.
    pub drive_prefetch: rondo_model::array::DrivePrefetch,
    /// Seed 004's dynamic cycle (`None`: fixed): needs a `segments`
    /// directory and one round per read (`read_group_rounds` 1).
    pub cycle: Option<rondo_model::array::DynamicCycle>,
    /// k: rounds in which a survivor may read a failed disk's backups
    /// (`reservation::BackupWindow`; `minimum` only). 1, seed 000's: in
    /// their own round. Above 1 a stream's first send waits k − 1 rounds,
    /// so that its client stays that far ahead, and there is no start burst.
    pub backup_window_rounds: u32,
    /// L: how late the loss of a disk may be noticed
    /// (`BackupWindow::loss_notice_rounds`; `minimum` only). 0, seed
    /// 000's: at a round boundary. With L ≥ 1 a storage node that dies at
    /// any moment of a round and is found dead within L − 1 rounds after
    /// it leaves no admitted stream short: its reads in flight go to the
    /// survivors' backlogs, covered by the reservation, and every client
    /// is k − 1 + L rounds ahead.
    pub loss_notice_rounds: u32,
    /// Server buffer admission may reserve, per disk.
    pub buffer_per_disk_bytes: u64,
    /// What the host can send its clients, in bits per second (seed 000
    /// §6.3's network term): admission reserves each stream's bytes of each
    /// round against it and refuses the rest (503, reason "network").
    /// `None`: not limited.
    pub network_bits_per_s_max: Option<u64>,
    /// New streams are refused (503, reason "host") while the send loops'
    /// delivery lag in the round in progress or the one before is over this
    /// many rounds: the host's CPU, which the reservations do not model, is
    /// behind (`rondo_model::array` `host`). `None`: not checked.
    pub delivery_lag_max_rounds: Option<f64>,
    /// Longest title the reservation tables can hold.
    pub max_title_duration: Duration,
    /// Bounds on client connections (count, header and idle timeouts,
    /// header size).
    pub connections: crate::listener::ConnectionLimits,
    /// Largest request body on every route but the upload.
    pub request_body_bytes_max: usize,
    /// Largest upload (`POST /api/admin/titles`); 0: no limit.
    pub upload_bytes_max: u64,
    /// Disks read by storage nodes elsewhere (a cluster's manager), not by
    /// threads here; `None`: every disk is read here.
    #[serde(skip)]
    pub remote_disks: Option<crate::executor::RemoteDisks>,
    /// A cluster's manager: its view of the cluster's nodes (etcd), for
    /// `/api/cluster` and the dashboard; `None` outside a cluster.
    #[serde(skip)]
    pub cluster: Option<crate::executor::Cluster>,
    /// A manager that took over from another: until this instant it
    /// refuses new streams (503, reason `takeover`), admitting only the
    /// streams its predecessor carried, which interface nodes ask for again
    /// with `x-rondo-resume` ([`RESUME_HEADER`]); so those get the rounds
    /// back before new arrivals take them.
    #[serde(skip)]
    pub takeover_until: Option<std::time::Instant>,
    /// LDSS or LMSS on a cluster's manager (seed 001 §6): the popularity
    /// log and the interface nodes dedicated to popular titles
    /// (`rondo_model::cluster::LocalCopies`); `None` is RDSS.
    pub local_copies: Option<LocalCopiesConfig>,
}

/// How a cluster's manager dedicates interface nodes to popular titles
/// (`rondo serve --retrieval ldss|lmss`).
#[derive(Copy, Clone, Debug, Serialize)]
pub struct LocalCopiesConfig {
    pub retrieval: rondo_model::cluster::Retrieval,
    /// Δt of the popularity log.
    pub window_ns: u64,
    /// Th_pop·Δt: requests within Δt that make a title popular.
    pub threshold_requests: u32,
    /// Titles one interface node may be dedicated to.
    pub titles_per_interface: u32,
    /// A dedicated node serves only its dedicated titles (seed 001 §6.4);
    /// otherwise it serves every title (rondo's default).
    pub exclusive: bool,
}

/// The header on a stream request an interface node forwards: the node's
/// own URL, so the manager can send a popular title's viewers to the node
/// dedicated to it ([`LocalCopiesConfig`]).
pub const INTERFACE_HEADER: &str = "x-rondo-interface-url";

/// Sent with [`INTERFACE_HEADER`] by an interface node that can hold local
/// copies of popular titles (`rondo node interface --local-data-dir`).
pub const LOCAL_COPIES_HEADER: &str = "x-rondo-local-copies";

/// On the manager's answer to the request that made a title popular:
/// `ldss` or `lmss`, the asking interface node is now its dedicated node
/// and copies it (under `lmss` keeping its first seconds in memory).
pub const COPY_HEADER: &str = "x-rondo-copy";

/// On a stream request: reserve the stream now but start its reads no
/// sooner than this many milliseconds from now (rounded up to whole
/// rounds). An LMSS interface node asks its local server for the rest of a
/// viewer whose first seconds it sends from memory.
pub const DEFER_HEADER: &str = "x-rondo-defer-ms";

/// The longest deferral [`DEFER_HEADER`] may ask for: 10 minutes
/// (assumption: far past an LMSS memory prefix, and short enough that a
/// client cannot hold disk time for hours ahead).
pub const DEFER_MS_MAX: u64 = 600_000;

/// The header an interface node sends when it asks for the rest of a
/// stream whose manager was lost: `1`, or the stream's [`SCHEDULE_HEADER`]
/// from that manager with `at-ns` moved on to when the stream broke
/// (the new manager then places it on its old diagonal,
/// `rondo_model::array::PriorSchedule`).
pub const RESUME_HEADER: &str = "x-rondo-resume";

/// The header on an admitted stream's answer: where this manager reads it
/// (its rounds' numbering, the stream's start round, first playback round
/// and start burst) and the manager's model time then, for a client that
/// may have to ask another manager for the rest ([`format_schedule`]).
pub const SCHEDULE_HEADER: &str = "x-rondo-schedule";

/// [`SCHEDULE_HEADER`]'s value: `id=<hex>;start=<round>;first=<playback
/// round>;burst=<rounds>;at-ns=<model ns>`, and `;lead=kept` for a burst
/// that keeps its lead (absent: spent).
pub fn format_schedule(schedule: &rondo_model::array::PriorSchedule) -> String {
    let lead = match schedule.burst_lead {
        BurstLead::Spent => String::new(),
        kept => format!(";lead={}", kept.name()),
    };
    format!(
        "id={:016x};start={};first={};burst={};at-ns={}{lead}",
        schedule.schedule_id,
        schedule.start_round,
        schedule.first_playback_round,
        schedule.burst_rounds,
        schedule.lost_at_ns
    )
}

/// Reads [`format_schedule`]'s value; the error names the part that is
/// wrong.
pub fn parse_schedule(value: &str) -> Result<rondo_model::array::PriorSchedule, String> {
    let mut fields: [Option<&str>; 6] = [None; 6];
    const NAMES: [&str; 6] = ["id", "start", "first", "burst", "at-ns", "lead"];
    for part in value.split(';') {
        let (name, text) = part
            .trim()
            .split_once('=')
            .ok_or_else(|| format!("'{part}' is not name=value"))?;
        let slot = NAMES
            .iter()
            .position(|n| *n == name)
            .ok_or_else(|| format!("unknown field '{name}' (known: {})", NAMES.join(", ")))?;
        fields[slot] = Some(text);
    }
    let field = |i: usize| fields[i].ok_or_else(|| format!("'{}' is missing", NAMES[i]));
    let number = |i: usize| -> Result<u64, String> {
        field(i)?
            .parse()
            .map_err(|e| format!("'{}': {e}", NAMES[i]))
    };
    let small = |i: usize| -> Result<u32, String> {
        u32::try_from(number(i)?).map_err(|_| format!("'{}' is out of range", NAMES[i]))
    };
    Ok(rondo_model::array::PriorSchedule {
        schedule_id: u64::from_str_radix(field(0)?, 16).map_err(|e| format!("'id': {e}"))?,
        start_round: number(1)?,
        first_playback_round: small(2)?,
        burst_rounds: small(3)?,
        burst_lead: match fields[5] {
            None => BurstLead::Spent,
            Some(text) => text.parse().map_err(|e| format!("'lead': {e}"))?,
        },
        lost_at_ns: number(4)?,
    })
}

/// The header on a new stream's refusal during a takeover (503): the
/// refusal lasts seconds, so an interface node holds the request and asks
/// again rather than turning its client away.
pub const TAKEOVER_HEADER: &str = "x-rondo-takeover";

/// Default largest request body outside uploads: no route but the upload
/// reads one, and the control routes' JSON is under 1 KiB.
pub const DEFAULT_REQUEST_BODY_BYTES_MAX: usize = 64 * 1024;
/// Default largest upload: a 4-hour title at 10 Mbit/s (18 GB), rounded up.
pub const DEFAULT_UPLOAD_BYTES_MAX: u64 = 32 << 30;

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            listen: DEFAULT_LISTEN.parse().expect("the default address parses"),
            lookahead_rounds: DEFAULT_LOOKAHEAD_ROUNDS,
            guarantee: Guarantee::Deterministic,
            stroke: rondo_store::Stroke::Whole,
            disk_timing: DiskTiming::Emulated,
            client_buffer_rounds: DEFAULT_CLIENT_BUFFER_ROUNDS,
            stall_grace: DEFAULT_STALL_GRACE,
            start_burst: DEFAULT_START_BURST,
            start_burst_bytes: DEFAULT_START_BURST_BYTES,
            start_burst_lead: BurstLead::Spent,
            late_start: true,
            share_reads: true,
            zero_copy_share_min: crate::zerocopy::DEFAULT_ZERO_COPY_SHARE_MIN,
            read_group_rounds: 1,
            drive_prefetch: rondo_model::array::DrivePrefetch::None,
            cycle: None,
            backup_window_rounds: 1,
            loss_notice_rounds: 0,
            buffer_per_disk_bytes: DEFAULT_BUFFER_PER_DISK_BYTES,
            network_bits_per_s_max: None,
            delivery_lag_max_rounds: None,
            max_title_duration: DEFAULT_MAX_TITLE_DURATION,
            connections: Default::default(),
            request_body_bytes_max: DEFAULT_REQUEST_BODY_BYTES_MAX,
            upload_bytes_max: DEFAULT_UPLOAD_BYTES_MAX,
            remote_disks: None,
            cluster: None,
            takeover_until: None,
            local_copies: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Any header text: a schedule that formats back to itself, or a
    /// clear error; never a panic.
    #[test]
    fn fuzz_schedule_headers() {
        let corpus: Vec<Vec<u8>> = [
            "id=00abcdef01234567;start=1234;first=56;burst=6;at-ns=987654321000",
            "id=ffffffffffffffff;start=18446744073709551615;first=4294967295;burst=0;at-ns=0",
            "at-ns=1;burst=2;first=3;start=4;id=5",
            "id=1;;start=2",
            "1",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        let regressions =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz-regressions/schedule");
        rondo_testkit::fuzz::fuzz(
            "schedule",
            "cargo test -p rondo-server --lib fuzz_schedule_headers",
            corpus,
            &regressions,
            128,
            |input| {
                let text = String::from_utf8_lossy(input);
                match parse_schedule(&text) {
                    Ok(schedule) => {
                        assert_eq!(parse_schedule(&format_schedule(&schedule)), Ok(schedule))
                    }
                    Err(e) => assert!(!e.is_empty()),
                }
            },
        );
    }

    #[test]
    fn a_schedule_header_reads_back_and_a_bad_one_is_named() {
        let schedule = rondo_model::array::PriorSchedule {
            schedule_id: 0x00ab_cdef_0123_4567,
            start_round: 1234,
            first_playback_round: 56,
            burst_rounds: 6,
            burst_lead: BurstLead::Spent,
            lost_at_ns: 987_654_321_000,
        };
        let text = format_schedule(&schedule);
        assert_eq!(
            text,
            "id=00abcdef01234567;start=1234;first=56;burst=6;at-ns=987654321000"
        );
        assert_eq!(parse_schedule(&text), Ok(schedule));
        let kept = rondo_model::array::PriorSchedule {
            burst_lead: BurstLead::Kept,
            ..schedule
        };
        let text = format_schedule(&kept);
        assert!(text.ends_with(";at-ns=987654321000;lead=kept"), "{text}");
        assert_eq!(parse_schedule(&text), Ok(kept));
        assert!(
            parse_schedule("id=1;start=1;first=0;burst=0;at-ns=0;lead=held")
                .unwrap_err()
                .contains("'lead'")
        );
        for (bad, named) in [
            ("1", "not name=value"),
            ("id=zz;start=1;first=0;burst=0;at-ns=0", "'id'"),
            ("id=1;start=1;first=0;burst=0", "'at-ns' is missing"),
            (
                "id=1;start=1;first=0;burst=0;at-ns=0;seek=3",
                "unknown field 'seek'",
            ),
            ("id=1;start=-1;first=0;burst=0;at-ns=0", "'start'"),
            (
                "id=1;start=1;first=4294967296;burst=0;at-ns=0",
                "'first' is out of range",
            ),
        ] {
            let error = parse_schedule(bad).unwrap_err();
            assert!(error.contains(named), "{bad}: {error}");
        }
    }
}
