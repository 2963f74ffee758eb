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

use rondo_model::reservation::Guarantee;

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
    /// Start a stream in the round in progress when the disks can read its
    /// first rounds before the round ends (`Array::admit_now`), rather than
    /// at the next round boundary: a request costs one read, not up to a
    /// round of waiting. A player's second and third requests (an MPEG-TS
    /// title's end, then its start again) come just after a round began.
    pub late_start: bool,
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
    /// Server buffer admission may reserve, per disk.
    pub buffer_per_disk_bytes: u64,
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
}

/// The header an interface node sends when it asks for the rest of a
/// stream whose manager was lost.
pub const RESUME_HEADER: &str = "x-rondo-resume";

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
            disk_timing: DiskTiming::Emulated,
            client_buffer_rounds: DEFAULT_CLIENT_BUFFER_ROUNDS,
            stall_grace: DEFAULT_STALL_GRACE,
            start_burst: DEFAULT_START_BURST,
            start_burst_bytes: DEFAULT_START_BURST_BYTES,
            late_start: true,
            read_group_rounds: 1,
            drive_prefetch: rondo_model::array::DrivePrefetch::None,
            cycle: None,
            backup_window_rounds: 1,
            buffer_per_disk_bytes: DEFAULT_BUFFER_PER_DISK_BYTES,
            max_title_duration: DEFAULT_MAX_TITLE_DURATION,
            connections: Default::default(),
            request_body_bytes_max: DEFAULT_REQUEST_BODY_BYTES_MAX,
            upload_bytes_max: DEFAULT_UPLOAD_BYTES_MAX,
            remote_disks: None,
            cluster: None,
            takeover_until: None,
        }
    }
}
