//! Starting and stopping a server on an open data directory.
//!
//! [`RunningServer::start`] loads the stored titles into the core's
//! reservation tables (rondo-mode bound of the array's disk profile,
//! `Reservations` sized for the longest admissible title), checks that every
//! device lies on its disk model, starts one I/O thread per device and the
//! round driver thread, binds the HTTP listener, creates the API token if
//! needed, and writes `server.json` (`{"url", "pid"}`) so `rondo ingest`
//! finds the server. [`RunningServer::shutdown`] stops accepting
//! connections, ends every stream, joins the driver and I/O threads and
//! removes `server.json`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rondo_model::array::{
    Array, ArrayConfig, DeliveryConfig, DrivePrefetch, DynamicCycle, FailCause,
    backup_window_unavailable, configure_for_bound, rondo_write_bound,
};
use rondo_model::disk::{Disk, DiskError, profile_by_name};
use rondo_model::health::{DiskState, HealthPolicy};
use rondo_model::reservation::{Bound, Burst, ReservationConfig};
use rondo_model::units::{DiskIndex, SECTOR_BYTES};
use rondo_store::{IoMode, Store, Stroke};
use thiserror::Error;
use tokio::sync::oneshot;

use crate::auth::ensure_token;
use crate::buffers::BufferPool;
use crate::config::ServerConfig;
use crate::executor::{DiskLost, ExecutorContext};
use crate::gate::DiskTimeGate;
use crate::http::{UPLOAD_SPOOL_PREFIX, router};
use crate::ingest::handoff::ServerInfo;
use crate::io::{RoundClock, spawn_device};
use crate::metrics::{Metrics, MetricsSnapshot};
use crate::ops::{OpsState, spawn_copier};
use crate::round::Driver;
use crate::state::{Core, Shared};
use crate::titles::{LoadError, ReadCharging, load_titles, rondo_bound};

/// The file `rondo ingest` reads to find the server owning a data directory.
pub use crate::ingest::handoff::SERVER_INFO_FILE as SERVER_JSON;

/// Why a server could not start.
#[derive(Debug, Error)]
pub enum ServerError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("disk profile {profile:?}: {source}")]
    Profile {
        profile: String,
        #[source]
        source: DiskError,
    },
    #[error(
        "device {path} (disk {disk}) has a {device_bytes}-byte stride area but the {profile} disk \
         model holds {model_bytes} bytes: reads beyond the model's capacity cannot be timed or \
         admitted; use a profile at least as large"
    )]
    DeviceLargerThanModel {
        path: String,
        disk: DiskIndex,
        device_bytes: u64,
        profile: String,
        model_bytes: u64,
    },
    #[error(
        "reads grouped {group_rounds} rounds at a time (GPMP) need a data directory with the \
         segments layout, whose consecutive rounds lie next to each other; this one is \
         variable-grain (create one with `rondo init --layout segments`)"
    )]
    GroupsNeedSegments { group_rounds: u32 },
    #[error(
        "prefetching into the drive cache ({policy}) needs emulated disks whose profile has a \
         cache (e.g. --disk-profile seed003-table1-c8-s8) and a segments data directory: a real \
         drive's cache cannot be told to hold a block for the next round ({why})"
    )]
    DrivePrefetchUnavailable { policy: String, why: String },
    #[error("the dynamic cycle {why}")]
    CycleUnavailable { why: &'static str },
    #[error("the data's stroke cannot be charged: {why}")]
    StrokeUnavailable { why: &'static str },
    #[error("{why} (disk profile {profile})")]
    GuaranteeUnavailable { why: String, profile: String },
    #[error("{why}")]
    BackupWindowUnavailable { why: String },
    #[error("opening the data directory's tiers: {0}")]
    Tiers(#[from] rondo_tier::TierError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

fn io_error(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ServerError {
    let context = context.into();
    move |source| ServerError::Io { context, source }
}

/// What admission reserves with under `bound` (its fixed term, the drive
/// caches' segments and bus, the backup window, the guarantee): at start,
/// and again for the bound of a widened charged stroke (`crate::stroke`).
/// `horizon_stream_rounds` is the longest stream the tables hold.
pub(crate) fn reservation_config(
    array: &rondo_store::ArrayConfig,
    config: &ServerConfig,
    bound: &Bound,
    horizon_stream_rounds: u64,
) -> Result<ReservationConfig, ServerError> {
    let mut reservation = ReservationConfig::for_array(
        array.disk_count,
        array.scheme,
        array.round_duration_ns,
        bound.fixed_ns(),
        config.buffer_per_disk_bytes,
        horizon_stream_rounds,
        config.lookahead_rounds,
    );
    reservation.set_network_bits_per_s(config.network_bits_per_s_max);
    configure_for_bound(
        &mut reservation,
        bound,
        config.drive_prefetch,
        config.backup_window_rounds,
        config.loss_notice_rounds,
        array.block_bytes,
        config.guarantee,
    )
    .map_err(|why| ServerError::GuaranteeUnavailable {
        why,
        profile: array.disk_profile.clone(),
    })?;
    Ok(reservation)
}

/// A server serving a data directory.
pub struct RunningServer {
    shared: Arc<Shared>,
    local_addr: SocketAddr,
    token_created: bool,
    driver: Option<JoinHandle<()>>,
    devices: Vec<JoinHandle<()>>,
    http: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    stop_http: Option<oneshot::Sender<()>>,
    server_json: PathBuf,
}

impl RunningServer {
    /// Starts serving `store` (which this process holds open) with `config`.
    /// Must be called inside a tokio runtime.
    pub async fn start(store: Store, config: ServerConfig) -> Result<RunningServer, ServerError> {
        let array = store.config().clone();
        let data_dir = store.dir().to_path_buf();
        let profile_error = |source| ServerError::Profile {
            profile: array.disk_profile.clone(),
            source,
        };
        let profile = profile_by_name(&array.disk_profile).map_err(profile_error)?;
        if config.stroke == Stroke::Data && config.cycle.is_some() {
            return Err(ServerError::StrokeUnavailable {
                why: "the dynamic cycle regroups streams under a fixed bound; serve its \
                      directory with the whole stroke charged (--stroke whole)",
            });
        }
        let (bound, charged) = rondo_bound(&array, config.stroke, store.highest_allocated_stride())
            .map_err(profile_error)?;
        let model_bytes = Disk::new(profile.clone())
            .map_err(profile_error)?
            .capacity_sectors()
            * SECTOR_BYTES;
        for device in store.devices() {
            if device.capacity_bytes() > model_bytes {
                return Err(ServerError::DeviceLargerThanModel {
                    path: device.path().display().to_string(),
                    disk: device.disk(),
                    device_bytes: device.capacity_bytes(),
                    profile: profile.name.clone(),
                    model_bytes,
                });
            }
            if device.io_mode() == IoMode::Buffered {
                tracing::warn!(
                    disk = device.disk().0,
                    path = %device.path().display(),
                    "the filesystem refused O_DIRECT; reading through the page cache \
                     (measured disk time will be the cache's)"
                );
            }
        }
        remove_stale_uploads(&data_dir);
        let staging = crate::staging::Staging::open(&data_dir)?;

        let group_rounds = config.read_group_rounds.max(1);
        if group_rounds > 1 && array.segment_rounds <= 1 {
            return Err(ServerError::GroupsNeedSegments { group_rounds });
        }
        let prefetch = config.drive_prefetch;
        // The model's own refusals, and one of the executor's: a real
        // drive's cache cannot be told to keep a block.
        let why = if prefetch != DrivePrefetch::None
            && config.disk_timing != crate::config::DiskTiming::Emulated
        {
            Some("the disks are timed natively")
        } else {
            prefetch.unavailable(&bound, array.segment_rounds, group_rounds)
        };
        if let Some(why) = why {
            return Err(ServerError::DrivePrefetchUnavailable {
                policy: format!("{prefetch:?}"),
                why: why.into(),
            });
        }
        if config.cycle.is_some()
            && let Some(why) =
                DynamicCycle::unavailable(array.segment_rounds, group_rounds, prefetch)
        {
            return Err(ServerError::CycleUnavailable { why });
        }
        let reads = ReadCharging {
            group_rounds,
            cache_pairs: prefetch != DrivePrefetch::None,
            cycle_max_group_rounds: config.cycle.map_or(0, |c| c.max_group_rounds),
        };
        let titles = load_titles(&store, &bound, reads)?;
        let round_duration_ns = array.round_duration_ns;
        let longest_stream_rounds = titles
            .iter()
            .map(|t| t.charges.stream_rounds() as u64)
            .max()
            .unwrap_or(1);
        let max_title_rounds =
            (config.max_title_duration.as_nanos() as u64).div_ceil(round_duration_ns);
        // A failed disk's backups read over a window of rounds, the
        // clients that many rounds ahead (docs/experiments/failure-tolerance-cost.md).
        if let Some(why) = backup_window_unavailable(
            config.backup_window_rounds,
            config.loss_notice_rounds,
            array.scheme,
            group_rounds,
            prefetch,
            config.cycle.is_some(),
        ) {
            return Err(ServerError::BackupWindowUnavailable { why });
        }
        // Titles ingested while serving may be as long as the configured maximum.
        let horizon_stream_rounds = longest_stream_rounds.max(max_title_rounds + 1);
        let reservation = reservation_config(&array, &config, &bound, horizon_stream_rounds)?;
        let lead_rounds = reservation.backup_window_in_force().lead_rounds();
        if lead_rounds > 0 && !config.start_burst.is_zero() {
            tracing::info!(
                backup_window_rounds = config.backup_window_rounds,
                "with a backup window, a stream's first send waits {lead_rounds} rounds and \
                 then sends them all at once, in place of the start burst"
            );
        }
        let mut core_array = Array::new(ArrayConfig {
            reservation,
            lookahead_rounds: config.lookahead_rounds,
            health: HealthPolicy::default(),
            read_bound: bound.clone(),
            write_bound: rondo_write_bound(&profile).map_err(profile_error)?,
            delivery: DeliveryConfig {
                client_buffer_rounds: config.client_buffer_rounds.max(1),
                stall_grace_rounds: (config.stall_grace.as_nanos() as u64)
                    .div_ceil(round_duration_ns),
            },
            burst: Burst {
                rounds: (config.start_burst.as_nanos() as u64).div_ceil(round_duration_ns) as u32,
                bytes: config.start_burst_bytes,
                lead: config.start_burst_lead,
            },
            // A late start's check is on this process's model time; a
            // storage node elsewhere gets the batch a network hop later and
            // answers another hop later, which the check does not know
            // (measured: a late start missed its round on the namespace
            // cluster, docs/cluster.md). A cluster's manager starts streams
            // at round boundaries.
            late_start: config.late_start && config.remote_disks.is_none(),
            late_start_allowance_ns: crate::config::LATE_START_ALLOWANCE_NS,
            delivery_lag_max_ns: config
                .delivery_lag_max_rounds
                .map(|rounds| (rounds * round_duration_ns as f64) as u64),
            drive_prefetch: prefetch,
            cycle: config.cycle,
        });
        let mut loaded = std::collections::BTreeMap::new();
        for title in titles {
            core_array.add_title(title.array_title());
            loaded.insert(title.id(), Arc::new(title));
        }

        let listener = crate::listener::bind(config.listen)
            .map_err(io_error(format!("listening on {}", config.listen)))?;
        let local_addr = listener
            .local_addr()
            .map_err(io_error("reading the listen address"))?;
        let base_url = format!("http://{local_addr}");
        // The token is created only once the listener is bound: a first start
        // that cannot bind (the port is busy) leaves none behind, so the next
        // start creates it and `rondo serve` shows it then.
        let (token, token_created) =
            ensure_token(&data_dir).map_err(io_error("creating the API token"))?;

        let metrics = Arc::new(Metrics::new(array.disk_count));
        let gate = Arc::new(DiskTimeGate::new(Arc::clone(&metrics)));
        let pool = BufferPool::new(
            config.buffer_per_disk_bytes * u64::from(array.disk_count),
            Arc::clone(&metrics),
        );
        // Round 0 starts a moment from now so the threads are up for it.
        let clock = RoundClock {
            t0: Instant::now() + Duration::from_millis(20),
            round_duration_ns,
        };
        let (copier_tx, copier_rx) = crossbeam_channel::unbounded();
        let (jobs_tx, jobs_rx) = crossbeam_channel::unbounded();
        let mut core = Core {
            array: core_array,
            streams: Default::default(),
            ops: OpsState::new(array.disk_count),
            late_batches: Vec::new(),
            // One send loop per core (as many as tokio's HTTP workers).
            outbox: crate::sink::Outbox::start(
                std::thread::available_parallelism().map_or(1, |n| n.get()),
                Arc::clone(&metrics),
            )
            .map_err(io_error("starting the send loops"))?,
        };
        let shared = Arc::new(Shared {
            store: store.clone(),
            data_dir: data_dir.clone(),
            array: array.clone(),
            config: config.clone(),
            stroke: crate::stroke::ChargedStroke::new(config.stroke, bound, charged, &array)
                .map_err(|why| ServerError::Io {
                    context: "charging the data's stroke".into(),
                    source: std::io::Error::other(why),
                })?,
            horizon_stream_rounds,
            clock,
            metrics: Arc::clone(&metrics),
            titles: RwLock::new(loaded),
            active_streams: AtomicUsize::new(0),
            jobs: jobs_tx,
            gate,
            lost_rounds: Default::default(),
            pool: pool.clone(),
            copier: copier_tx,
            shutting_down: AtomicBool::new(false),
            token,
            instance_id: crate::auth::new_instance_id()
                .map_err(io_error("drawing the server's instance id"))?,
            base_url: base_url.clone(),
            staging,
            local_copies: config.local_copies.map(|c| {
                std::sync::Mutex::new(
                    rondo_model::cluster::LocalCopies::new(
                        c.retrieval,
                        c.window_ns,
                        c.threshold_requests,
                        c.titles_per_interface,
                    )
                    .exclusive(c.exclusive),
                )
            }),
        });
        metrics
            .charged_stroke_percent
            .store(u64::from(shared.stroke.status().stroke_percent), Relaxed);
        // Every placed title is covered by the charged stroke before it is
        // written (`stroke`).
        let weak = Arc::downgrade(&shared);
        shared
            .gate
            .set_placement_check(Box::new(move |layout| match weak.upgrade() {
                Some(shared) => shared.stroke.cover(&shared, layout),
                None => Err("the server is stopping".into()),
            }));
        // Disks without a usable device start failed; disks failed before
        // a restart stay failed (disk-state.toml).
        crate::ops::fail_unavailable_disks(&shared, &mut core);
        crate::ops::fail_recorded_disks(&shared, &mut core).map_err(|e| ServerError::Io {
            context: "reading the failed disks".into(),
            source: std::io::Error::other(e.to_string()),
        })?;
        // Bad extents and lost rounds known before a restart
        // (extent-faults.toml): repairs queued again, lost rounds refused.
        crate::ops::restore_extent_faults(&shared, &mut core).map_err(|e| ServerError::Io {
            context: "reading the known extent faults".into(),
            source: std::io::Error::other(e.to_string()),
        })?;

        let (events_tx, events_rx) = crossbeam_channel::unbounded();
        let mut batch_senders = Vec::new();
        let mut devices = Vec::new();
        let lost = disk_lost(&shared);
        for device in store.devices() {
            let model = Disk::new(profile.clone()).map_err(profile_error)?;
            let thread = match &config.remote_disks {
                // A storage node elsewhere reads this disk (a cluster's manager).
                Some(remote) if remote.0.serves(device.disk()) => remote
                    .0
                    .spawn(ExecutorContext {
                        disk: device.disk(),
                        model,
                        timing: config.disk_timing,
                        clock,
                        pool: pool.clone(),
                        buffer_per_disk_bytes: config.buffer_per_disk_bytes,
                        events: events_tx.clone(),
                        lost: Arc::clone(&lost),
                    })
                    .map_err(io_error(format!(
                        "reaching disk {}'s storage node",
                        device.disk()
                    )))?,
                _ => spawn_device(
                    device.disk(),
                    Arc::clone(&device) as Arc<dyn crate::storage::Storage>,
                    model,
                    crate::io::DeviceIo {
                        timing: config.disk_timing,
                        share_reads: config.share_reads,
                        zero_copy_share_min: config.zero_copy_share_min,
                    },
                    clock,
                    pool.clone(),
                    events_tx.clone(),
                )
                .map_err(io_error("starting a disk thread"))?,
            };
            batch_senders.push(thread.batches);
            devices.push(thread.handle);
        }
        devices.push(
            spawn_copier("rondo-copier", Arc::clone(&shared), copier_rx)
                .map_err(io_error("starting the rebuild's copier thread"))?,
        );
        let (faults_tx, faults_rx) = crossbeam_channel::unbounded();
        devices.push(
            crate::ops::spawn_fault_saver(store.clone(), faults_rx)
                .map_err(io_error("starting the extent-fault saver thread"))?,
        );
        drop(events_tx);
        // The driver owns the core from here on; everyone else sends it jobs.
        let driver = Driver::new(
            Arc::clone(&shared),
            core,
            batch_senders,
            events_rx,
            jobs_rx,
            faults_tx,
        );
        let driver = std::thread::Builder::new()
            .name("rondo-rounds".into())
            .spawn(move || {
                let priority = crate::io::raise_deadline_thread_priority();
                tracing::info!(
                    priority = %priority.describe(),
                    "the round driver's and the disk threads' priority"
                );
                // A server whose round driver is gone would hold its
                // streams and answer requests without serving a byte: a
                // panic here (printed above) stops the whole process, and
                // the next start recovers the directory.
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| driver.run())).is_err()
                {
                    tracing::error!("the round driver panicked; stopping the server");
                    std::process::abort();
                }
            })
            .map_err(io_error("starting the round driver"))?;

        // The dashboard's history starts with the server, not with its first viewer.
        crate::observe::start(&shared);
        let (stop_http, stopped) = oneshot::channel::<()>();
        let app = router(Arc::clone(&shared));
        let limits = config.connections.clone();
        let retry_after_s = crate::http::retry_after_seconds(&shared);
        let http = tokio::spawn(crate::listener::serve(
            listener,
            app,
            limits,
            retry_after_s,
            Arc::clone(&metrics),
            async move {
                let _ = stopped.await;
            },
        ));

        let server_json = data_dir.join(SERVER_JSON);
        ServerInfo {
            url: base_url.clone(),
            pid: std::process::id(),
            array_id: array.array_id.to_string(),
            instance_id: shared.instance_id.clone(),
        }
        .write(&data_dir)
        .map_err(io_error(format!("writing {}", server_json.display())))?;
        tracing::info!(
            url = %base_url,
            disks = array.disk_count,
            profile = %array.disk_profile,
            timing = config.disk_timing.name(),
            round_ms = round_duration_ns as f64 / 1e6,
            lookahead_rounds = config.lookahead_rounds,
            titles = shared.titles().len(),
            "rondo server running"
        );
        Ok(RunningServer {
            shared,
            local_addr,
            token_created,
            driver: Some(driver),
            devices,
            http: Some(http),
            stop_http: Some(stop_http),
            server_json,
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        self.shared.base_url.clone()
    }

    /// The API token for the control endpoints.
    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// Whether this start created the token (print it once).
    pub fn token_created(&self) -> bool {
        self.token_created
    }

    /// The server's counters.
    pub fn metrics(&self) -> MetricsSnapshot {
        let active = self.shared.active_streams();
        self.shared.metrics.snapshot(active)
    }

    pub fn store(&self) -> &Store {
        &self.shared.store
    }

    /// The drive admission charges now (`stroke`).
    pub fn charged_stroke(&self) -> crate::stroke::StrokeStatus {
        self.shared.stroke.status()
    }

    /// Stops accepting connections, ends every stream (their responses fail,
    /// reservations are released), joins the round driver and the I/O
    /// threads and removes `server.json`.
    pub async fn shutdown(mut self) {
        self.stop().await;
    }

    async fn stop(&mut self) {
        signal_stop(&self.shared);
        if let Some(stop) = self.stop_http.take() {
            let _ = stop.send(());
        }
        // The driver, woken above, ends every stream at once; their
        // connections then close and graceful shutdown completes.
        let driver = self.driver.take();
        let devices = std::mem::take(&mut self.devices);
        let joined = tokio::task::spawn_blocking(move || {
            if let Some(driver) = driver {
                let _ = driver.join();
            }
            for device in devices {
                let _ = device.join();
            }
        });
        let _ = joined.await;
        if let Some(http) = self.http.take() {
            match tokio::time::timeout(Duration::from_secs(5), http).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => tracing::warn!("HTTP server ended with an error: {e}"),
                Ok(Err(e)) => tracing::warn!("HTTP server task failed: {e}"),
                Err(_) => tracing::warn!("connections still open after 5 s; closing them"),
            }
        }
        if let Err(e) = std::fs::remove_file(&self.server_json)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!("removing {}: {e}", self.server_json.display());
        }
        tracing::info!("rondo server stopped");
    }
}

/// Raises the shutdown flag and wakes the copier and the round driver,
/// which wait for work without polling the flag.
fn signal_stop(shared: &Shared) {
    shared.shutting_down.store(true, Relaxed);
    let _ = shared.copier.send(crate::ops::CopierJob::Stop);
    let _ = shared.jobs.send(Box::new(|_, _| {}));
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        // Not shut down through `shutdown`: stop the threads without waiting.
        signal_stop(&self.shared);
        if let Some(stop) = self.stop_http.take() {
            let _ = stop.send(());
        }
        if let Some(http) = self.http.take() {
            http.abort();
        }
        if self.driver.is_some() {
            let _ = std::fs::remove_file(&self.server_json);
        }
    }
}

/// Removes uploads a crashed server left spooled in the data directory.
fn remove_stale_uploads(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with(UPLOAD_SPOOL_PREFIX) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Resolves when the process receives SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    ShutdownSignal::install().recv().await
}

/// SIGTERM and SIGINT handlers, installed when this is made: a signal that
/// arrives after [`ShutdownSignal::install`] is never the default action
/// (which would kill the process without a clean stop).
pub struct ShutdownSignal {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl ShutdownSignal {
    /// Installs the handlers (inside a tokio runtime).
    pub fn install() -> ShutdownSignal {
        use tokio::signal::unix::{SignalKind, signal};
        ShutdownSignal {
            term: signal(SignalKind::terminate()).expect("installing a SIGTERM handler"),
            int: signal(SignalKind::interrupt()).expect("installing a SIGINT handler"),
        }
    }

    /// Waits for either signal.
    pub async fn recv(mut self) {
        tokio::select! {
            _ = self.term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = self.int.recv() => tracing::info!("SIGINT: shutting down"),
        }
    }
}

/// Serves `store` until SIGTERM or SIGINT, on a runtime of its own (for
/// callers without one, like the CLI), with the open-files limit raised
/// ([`raise_open_files_limit`]). `announce` runs once the server is
/// up (print its URLs there); then the server shuts down cleanly.
pub fn serve_until_signal(
    store: Store,
    config: ServerConfig,
    announce: impl FnOnce(&RunningServer),
) -> Result<(), ServerError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("rondo-http")
        .build()
        .map_err(io_error("starting the async runtime"))?;
    let open_files = raise_open_files_limit();
    tracing::info!(
        open_files_limit = open_files,
        "one descriptor per connection; the soft limit is raised to the hard one"
    );
    runtime.block_on(async move {
        // Before the announcement: a client that reads "Press Ctrl-C" and
        // sends SIGTERM at once gets a clean stop, not the default action.
        let signal = ShutdownSignal::install();
        let server = RunningServer::start(store, config).await?;
        announce(&server);
        signal.recv().await;
        server.shutdown().await;
        Ok(())
    })
}

/// Raises the process's soft `RLIMIT_NOFILE` to its hard limit (each
/// client connection holds a descriptor: a thousand streams need more than
/// the usual soft 1024); returns the soft limit in force, `None` if it
/// cannot be read.
pub fn raise_open_files_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return None;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    #[allow(clippy::unnecessary_cast)] // rlim_t is not u64 on every target
    Some(limit.rlim_cur as u64)
}

/// Logs through `tracing` to stderr, filtered by `RONDO_LOG` (an
/// `EnvFilter` directive such as `info` or `rondo_server=debug`; default
/// `info`). Does nothing if a subscriber is already installed.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RONDO_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// What the server does when a disk's executor stops answering (its
/// storage node died or cannot be reached): the disk fails as if an
/// operator had failed it, recorded so that it stays failed until rebuilt,
/// and its streams read the other replicas from the next round on.
fn disk_lost(shared: &Arc<Shared>) -> DiskLost {
    let shared = Arc::clone(shared);
    Arc::new(move |disk, why| {
        shared.on_core(move |shared, core| {
            // Its reads in flight (under a loss noticed late, also those
            // whose errors came first and were queued as re-reads): read
            // from the other replica at once, or held for the survivors'
            // backlogs (sent by the driver after this job).
            let recover = |shared: &Shared, core: &mut crate::state::Core| {
                let now_ns = shared.clock.model_ns(Instant::now());
                let round = core.array.next_round().minus(1);
                core.array.recover_now(disk, now_ns).map_or(0, |late| {
                    let reads = late.disks.iter().map(|d| d.commands.len()).sum::<usize>();
                    crate::session::queue_late_start(core, round, late);
                    reads
                })
            };
            if core.array.disk_state(disk) == DiskState::Failed {
                // Failed already by the errors its loss produced.
                recover(shared, core);
                return;
            }
            let cause = FailCause::Unreachable;
            crate::ops::record_failed(shared, disk, &format!("{cause}: {why}"));
            match core.array.fail_disk(disk, FailCause::Unreachable) {
                Ok(effects) => {
                    let stopped = crate::ops::apply_ops_effects(shared, core, effects);
                    crate::ops::publish_state(shared, disk, DiskState::Failed);
                    let recovered = recover(shared, core);
                    tracing::error!(
                        disk = disk.0,
                        streams_stopped = stopped.len(),
                        reads_recovered_at_once = recovered,
                        "disk {disk} failed: {cause} ({why}); its streams read the other replicas"
                    );
                }
                Err(e) => tracing::warn!(
                    disk = disk.0,
                    "disk {disk} lost ({why}) but not failed: {e}"
                ),
            }
        });
    })
}
