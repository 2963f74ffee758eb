//! The S3 tier: objects in one bucket of an S3-compatible store (AWS S3,
//! MinIO, Ceph RGW, s3s-fs), reached through the `object_store` crate.
//!
//! An [`S3Tier`] owns its store clients and a small tokio runtime (two
//! worker threads): `object_store` is async, [`Tier`] is blocking, so each
//! call spawns its requests on the runtime and parks the calling thread
//! until they end (never `block_on`, so a call from inside another runtime
//! blocks instead of panicking). An object is stored whole under
//! `[PREFIX/]KEY`: one conditional PUT (`If-None-Match: *`) up to
//! [`PART_BYTES`], a multipart upload above (up to [`PARTS_IN_FLIGHT`] parts
//! at once; the object appears only when the upload completes). The CRC32C
//! of the whole file is computed while it is read and kept by the caller in
//! [`TierObject`]; a fetch streams the GET to the destination and checks
//! size and CRC32C at the end.
//!
//! Predictions come from the store's measured behaviour, nothing
//! configured. Each fetch gives a first-byte latency (request sent → first
//! bytes in the caller's hands) and adds to a *busy period*: from the first
//! byte of a fetch while none was transferring to the end of the last
//! transferring one; a busy period's bytes over its length is one
//! throughput sample, so concurrent fetches measure the store's aggregate
//! rate, not each one's share. The tier keeps the last [`SAMPLES_KEPT`]
//! samples of each: latency is their median (robust to one slow request),
//! throughput their total bytes over total time (a large fetch weighs more
//! than a small one). A fetch started now is predicted to end after the
//! latency plus the time to move its bytes and the bytes the fetches in
//! progress still have to come (they share the same link):
//! `latency + (remaining_bytes_in_progress + size_bytes) / throughput`.
//!
//! Before any fetch has completed the samples come from a calibration at
//! [`S3Tier::open`]: the tier keeps a [`CALIBRATION_BYTES`] object under the
//! reserved key [`CALIBRATION_KEY`] (written at open if absent; no user key
//! starts with `.`, see [`crate::validate_key`]) and GETs it twice, the
//! first to open a connection, the second measured. The first real fetch
//! replaces the calibration's samples. Opening therefore also proves that
//! the endpoint answers, the credentials are accepted and the bucket exists.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::io::{Read, Write};
use std::path::Path;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, ClientOptions, GetOptions, MultipartUpload, ObjectStore, ObjectStoreExt,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, RetryConfig,
};

use crate::{S3TierConfig, Tier, TierError, TierObject, TierStatus, validate_key};

/// The reserved key of the calibration object (under the prefix, if any).
pub const CALIBRATION_KEY: &str = ".rondo-calibration";
/// The calibration object's size: large enough to span many TCP segments,
/// small enough to GET twice at every open even over a slow link.
pub const CALIBRATION_BYTES: usize = 1 << 20;
/// Files up to this size go in one PUT; larger ones in parts of this size
/// (S3's minimum part is 5 MiB).
pub const PART_BYTES: usize = 8 << 20;
/// Parts of a multipart upload sent at once.
pub const PARTS_IN_FLIGHT: usize = 3;
/// Latency and throughput samples kept for the predictions.
pub const SAMPLES_KEPT: usize = 8;
/// Chunks a GET may read ahead of the destination's writes.
const CHUNKS_IN_FLIGHT: usize = 32;
/// A GET that delivers nothing for this long has failed.
const STALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Every request but a GET (whose body may take as long as the object is
/// large) ends within this.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One tier on an S3-compatible store.
pub struct S3Tier {
    name: String,
    endpoint: String,
    bucket: String,
    prefix: Option<ObjectPath>,
    /// HEAD, PUT, DELETE: each request bounded by [`REQUEST_TIMEOUT`].
    store: Arc<AmazonS3>,
    /// GET: no whole-request timeout; a stall of [`STALL_TIMEOUT`] ends it.
    get_store: Arc<AmazonS3>,
    /// Taken by `drop` (shut down in the background: dropping a runtime
    /// inside another one panics).
    runtime: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
    measure: Mutex<Measure>,
    fetches_total: AtomicU64,
    fetch_failures_total: AtomicU64,
    fetched_bytes_total: AtomicU64,
}

/// What the measurements of one GET gave: the calibration's, or a fetch's.
#[derive(Clone, Copy, Debug)]
struct GetSample {
    latency_ns: u64,
    /// Bytes after the first chunk, and the time they took.
    transfer: Option<(u64, u64)>,
}

/// The measured behaviour of the store, and the fetches in progress.
#[derive(Debug, Default)]
struct Measure {
    calibration: Option<GetSample>,
    /// First-byte latencies of recent fetches, oldest first.
    latencies_ns: VecDeque<u64>,
    /// Recent busy periods: (bytes, ns), oldest first.
    transfers: VecDeque<(u64, u64)>,
    active: BTreeMap<u64, ActiveFetch>,
    next_id: u64,
    busy: Option<BusyPeriod>,
}

#[derive(Debug)]
struct ActiveFetch {
    size_bytes: u64,
    done_bytes: u64,
    transferring: bool,
}

#[derive(Debug)]
struct BusyPeriod {
    start: Instant,
    bytes: u64,
    transferring: u32,
}

/// Used when nothing could be measured at all (an empty calibration
/// object): 10 MB/s, a modest WAN link.
const FALLBACK_BYTES_PER_S: f64 = 10e6;

fn push_sample<T>(samples: &mut VecDeque<T>, sample: T) {
    if samples.len() == SAMPLES_KEPT {
        samples.pop_front();
    }
    samples.push_back(sample);
}

impl Measure {
    fn latency_ns(&self) -> u64 {
        if self.latencies_ns.is_empty() {
            return self.calibration.map_or(0, |c| c.latency_ns);
        }
        let mut sorted: Vec<u64> = self.latencies_ns.iter().copied().collect();
        sorted.sort_unstable();
        sorted[sorted.len() / 2]
    }

    fn bytes_per_s(&self) -> f64 {
        let (bytes, ns) = if self.transfers.is_empty() {
            match self.calibration.and_then(|c| c.transfer) {
                Some(t) => t,
                None => return FALLBACK_BYTES_PER_S,
            }
        } else {
            self.transfers
                .iter()
                .fold((0, 0), |(b, n), &(bytes, ns)| (b + bytes, n + ns))
        };
        if bytes == 0 || ns == 0 {
            FALLBACK_BYTES_PER_S
        } else {
            bytes as f64 * 1e9 / ns as f64
        }
    }

    /// Bytes the fetches in progress still have to receive.
    fn remaining_bytes(&self) -> u64 {
        self.active
            .values()
            .map(|f| f.size_bytes.saturating_sub(f.done_bytes))
            .sum()
    }

    fn predict_ns(&self, size_bytes: u64) -> u64 {
        let bytes = self.remaining_bytes() + size_bytes;
        self.latency_ns() + (bytes as f64 * 1e9 / self.bytes_per_s()) as u64
    }

    fn begin(&mut self, size_bytes: u64) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.active.insert(
            id,
            ActiveFetch {
                size_bytes,
                done_bytes: 0,
                transferring: false,
            },
        );
        id
    }

    /// A chunk of fetch `id` reached the caller; `latency_ns` is given with
    /// the first.
    fn chunk(&mut self, id: u64, bytes: u64, latency_ns: Option<u64>, now: Instant) {
        let Some(fetch) = self.active.get_mut(&id) else {
            return;
        };
        fetch.done_bytes += bytes;
        if let Some(latency_ns) = latency_ns {
            push_sample(&mut self.latencies_ns, latency_ns);
        }
        if !fetch.transferring {
            fetch.transferring = true;
            match &mut self.busy {
                Some(busy) => {
                    busy.transferring += 1;
                    busy.bytes += bytes;
                }
                // The period starts with these bytes in hand: they took no
                // transfer time of it.
                None => {
                    self.busy = Some(BusyPeriod {
                        start: now,
                        bytes: 0,
                        transferring: 1,
                    })
                }
            }
        } else if let Some(busy) = &mut self.busy {
            busy.bytes += bytes;
        }
    }

    fn end(&mut self, id: u64, now: Instant) {
        let Some(fetch) = self.active.remove(&id) else {
            return;
        };
        if !fetch.transferring {
            return;
        }
        let Some(busy) = &mut self.busy else {
            return;
        };
        busy.transferring -= 1;
        if busy.transferring == 0 {
            let ns = now.duration_since(busy.start).as_nanos() as u64;
            if busy.bytes > 0 && ns > 0 {
                push_sample(&mut self.transfers, (busy.bytes, ns));
            }
            self.busy = None;
        }
    }
}

/// Wakes a parked thread.
struct ThreadWaker(std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `future` on this thread, parking between polls: the blocking
/// side of the bridge (works on any thread, inside a runtime or not).
/// Unconstrained: called from inside another runtime's task (a server
/// opening its tiers in `main`), tokio's cooperative budget would run out
/// and never be renewed, as this never yields to that scheduler, and every
/// poll would answer "not yet" at once: a busy loop.
fn wait<F: Future>(future: F) -> F::Output {
    let mut future = pin!(tokio::task::coop::unconstrained(future));
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::park();
    }
}

/// What a GET task sends the fetching thread.
enum GetEvent {
    Started { size_bytes: u64 },
    Chunk(Bytes),
    Failed(object_store::Error),
    Stalled,
}

/// An error and its causes on one line (object_store's own message leaves
/// out the cause, e.g. "Connection refused").
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let message = cause.to_string();
        if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        source = cause.source();
    }
    text
}

fn is_not_found(error: &object_store::Error) -> bool {
    matches!(error, object_store::Error::NotFound { .. })
}

fn calibration_bytes() -> Vec<u8> {
    // Not zeros, in case something on the way compresses.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    (0..CALIBRATION_BYTES)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

impl S3Tier {
    /// Builds the clients for `config`, then reaches the bucket and
    /// measures it (see the module doc); `config_path` is where `config`
    /// lives, for configuration errors.
    pub fn open(
        name: &str,
        config: &S3TierConfig,
        config_path: &Path,
    ) -> Result<S3Tier, TierError> {
        let bad = |what: String| TierError::Config {
            path: config_path.to_path_buf(),
            what: format!("tier {name}: {what}"),
        };
        let endpoint = config.endpoint.trim_end_matches('/').to_string();
        if endpoint.starts_with("http://") {
            if !config.allow_http {
                return Err(bad(format!(
                    "endpoint {endpoint} is plain http: set allow_http = true \
                     (`rondo tier add ... --allow-http`) to use it without TLS"
                )));
            }
        } else if !endpoint.starts_with("https://") {
            return Err(bad(format!(
                "endpoint {:?} is not an http:// or https:// URL",
                config.endpoint
            )));
        }
        if config.bucket.is_empty() {
            return Err(bad("the bucket is empty".into()));
        }
        if config.access_key_id.is_empty() || config.secret_access_key.is_empty() {
            return Err(bad(
                "access_key_id and secret_access_key must both be given".into(),
            ));
        }
        let prefix = match config.prefix.as_deref().map(|p| p.trim_matches('/')) {
            None | Some("") => None,
            Some(p) => Some(
                ObjectPath::parse(p).map_err(|e| bad(format!("prefix {p:?} is invalid: {e}")))?,
            ),
        };
        let build = |options: ClientOptions| {
            AmazonS3Builder::new()
                .with_endpoint(&endpoint)
                .with_bucket_name(&config.bucket)
                .with_region(&config.region)
                .with_access_key_id(&config.access_key_id)
                .with_secret_access_key(&config.secret_access_key)
                .with_client_options(
                    options
                        .with_allow_http(config.allow_http)
                        .with_connect_timeout(CONNECT_TIMEOUT),
                )
                // A few quick retries: a store that is down should say so
                // in about a second, not after object_store's 3 minutes.
                .with_retry(RetryConfig {
                    backoff: BackoffConfig {
                        init_backoff: Duration::from_millis(100),
                        max_backoff: Duration::from_secs(2),
                        base: 2.0,
                    },
                    max_retries: 3,
                    retry_timeout: Duration::from_secs(30),
                })
                .build()
                .map_err(|e| bad(error_chain(&e)))
        };
        let store = Arc::new(build(ClientOptions::new().with_timeout(REQUEST_TIMEOUT))?);
        let get_store = Arc::new(build(ClientOptions::new().with_timeout_disabled())?);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(format!("rondo-s3-{name}"))
            .enable_all()
            .build()
            .map_err(|e| bad(format!("cannot start the S3 client's runtime: {e}")))?;
        let tier = S3Tier {
            name: name.to_string(),
            endpoint,
            bucket: config.bucket.clone(),
            prefix,
            store,
            get_store,
            handle: runtime.handle().clone(),
            runtime: Some(runtime),
            measure: Mutex::new(Measure::default()),
            fetches_total: AtomicU64::new(0),
            fetch_failures_total: AtomicU64::new(0),
            fetched_bytes_total: AtomicU64::new(0),
        };
        tier.calibrate()?;
        Ok(tier)
    }

    /// The measured first-byte latency the predictions use.
    pub fn measured_latency_ns(&self) -> u64 {
        self.measure.lock().expect("measure lock").latency_ns()
    }

    /// The measured throughput the predictions use.
    pub fn measured_bytes_per_s(&self) -> f64 {
        self.measure.lock().expect("measure lock").bytes_per_s()
    }

    /// The store's base URL.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn object_path(&self, key: &str) -> ObjectPath {
        match &self.prefix {
            Some(prefix) => prefix.clone().join(key),
            None => ObjectPath::from(key),
        }
    }

    /// Runs `future` on the tier's runtime and waits for it.
    fn run<T: Send + 'static>(&self, future: impl Future<Output = T> + Send + 'static) -> T {
        match wait(self.handle.spawn(future)) {
            Ok(output) => output,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("tier {}: an S3 request task was cancelled: {e}", self.name),
        }
    }

    fn remote(&self, doing: &str, key: &str, error: &object_store::Error) -> TierError {
        let text = error_chain(error);
        let hint = if [
            "403 Forbidden",
            "SignatureDoesNotMatch",
            "InvalidAccessKeyId",
        ]
        .iter()
        .any(|s| text.contains(s))
        {
            " (check the tier's access_key_id and secret_access_key)"
        } else {
            ""
        };
        TierError::Remote {
            tier: self.name.clone(),
            what: format!(
                "{doing} {key:?} in bucket {} at {}: {text}{hint}",
                self.bucket, self.endpoint
            ),
        }
    }

    fn head(&self, path: &ObjectPath) -> Result<(), object_store::Error> {
        let store = Arc::clone(&self.store);
        let path = path.clone();
        self.run(async move { store.head(&path).await.map(|_| ()) })
    }

    /// Starts a GET of `path` on the runtime: its size, then its bytes in
    /// order, come through the channel, at most [`CHUNKS_IN_FLIGHT`] ahead.
    fn start_get(&self, path: ObjectPath) -> tokio::sync::mpsc::Receiver<GetEvent> {
        let (tx, rx) = tokio::sync::mpsc::channel(CHUNKS_IN_FLIGHT);
        let store = Arc::clone(&self.get_store);
        self.handle.spawn(async move {
            let result = match store.get_opts(&path, GetOptions::default()).await {
                Ok(result) => result,
                Err(e) => {
                    let _ = tx.send(GetEvent::Failed(e)).await;
                    return;
                }
            };
            let started = GetEvent::Started {
                size_bytes: result.meta.size,
            };
            if tx.send(started).await.is_err() {
                return;
            }
            let mut stream = result.into_stream();
            loop {
                let event = match tokio::time::timeout(STALL_TIMEOUT, stream.next()).await {
                    Err(_) => GetEvent::Stalled,
                    Ok(None) => return,
                    Ok(Some(Ok(bytes))) => GetEvent::Chunk(bytes),
                    Ok(Some(Err(e))) => GetEvent::Failed(e),
                };
                let last = !matches!(event, GetEvent::Chunk(_));
                // A closed channel: the fetch gave up; dropping the stream
                // closes the connection.
                if tx.send(event).await.is_err() || last {
                    return;
                }
            }
        });
        rx
    }

    /// Makes the calibration object if absent, then GETs it twice and
    /// keeps the second GET's measurements.
    fn calibrate(&self) -> Result<(), TierError> {
        let path = self.object_path(CALIBRATION_KEY);
        let no_bucket = |e: &object_store::Error| TierError::Remote {
            tier: self.name.clone(),
            what: format!(
                "no bucket {:?} at {} (create it first): {}",
                self.bucket,
                self.endpoint,
                error_chain(e)
            ),
        };
        // An (empty) listing first: a missing bucket is a 404 to a LIST on
        // every store, where some make the bucket on a PUT.
        let store = Arc::clone(&self.store);
        let probe = path.clone();
        match self.run(async move { store.list_with_delimiter(Some(&probe)).await }) {
            Ok(_) => {}
            // object_store reports a LIST's 404 as a generic error.
            Err(e) if is_not_found(&e) || error_chain(&e).contains("NoSuchBucket") => {
                return Err(no_bucket(&e));
            }
            Err(e) => return Err(self.remote("listing", CALIBRATION_KEY, &e)),
        }
        match self.head(&path) {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => {
                let store = Arc::clone(&self.store);
                let put_path = path.clone();
                let payload = PutPayload::from(calibration_bytes());
                let put = self.run(async move {
                    let options = PutOptions {
                        mode: PutMode::Create,
                        ..PutOptions::default()
                    };
                    store.put_opts(&put_path, payload, options).await
                });
                match put {
                    Ok(_) | Err(object_store::Error::AlreadyExists { .. }) => {}
                    Err(e) if is_not_found(&e) => return Err(no_bucket(&e)),
                    Err(e) => {
                        return Err(self.remote(
                            "writing the calibration object",
                            CALIBRATION_KEY,
                            &e,
                        ));
                    }
                }
            }
            Err(e) => {
                return Err(self.remote("reaching the calibration object", CALIBRATION_KEY, &e));
            }
        }
        let mut sample = None;
        for _ in 0..2 {
            sample = Some(self.timed_get(&path)?);
        }
        let sample = sample.expect("two GETs");
        tracing::info!(
            tier = %self.name,
            endpoint = %self.endpoint,
            latency_ms = sample.latency_ns as f64 / 1e6,
            mb_per_s = sample.transfer.map(|(b, ns)| b as f64 * 1e3 / ns as f64),
            "S3 tier calibrated"
        );
        self.measure.lock().expect("measure lock").calibration = Some(sample);
        Ok(())
    }

    /// A GET of `path`, its bytes dropped, timed.
    fn timed_get(&self, path: &ObjectPath) -> Result<GetSample, TierError> {
        let start = Instant::now();
        let mut rx = self.start_get(path.clone());
        let mut first: Option<Instant> = None;
        let mut after_first_bytes = 0u64;
        let mut total_bytes = 0u64;
        while let Some(event) = wait(rx.recv()) {
            match event {
                GetEvent::Started { .. } => {}
                GetEvent::Chunk(bytes) => {
                    total_bytes += bytes.len() as u64;
                    match first {
                        None => first = Some(Instant::now()),
                        Some(_) => after_first_bytes += bytes.len() as u64,
                    }
                }
                GetEvent::Failed(e) => {
                    return Err(self.remote("reading the calibration object", CALIBRATION_KEY, &e));
                }
                GetEvent::Stalled => {
                    return Err(self.stalled(CALIBRATION_KEY));
                }
            }
        }
        let end = Instant::now();
        let Some(first) = first else {
            return Ok(GetSample {
                latency_ns: end.duration_since(start).as_nanos() as u64,
                transfer: None,
            });
        };
        let latency_ns = first.duration_since(start).as_nanos() as u64;
        // All in one chunk: only the whole GET's rate is known.
        let transfer = if after_first_bytes > 0 {
            (
                after_first_bytes,
                end.duration_since(first).as_nanos() as u64,
            )
        } else {
            (total_bytes, end.duration_since(start).as_nanos() as u64)
        };
        Ok(GetSample {
            latency_ns,
            transfer: Some(transfer).filter(|&(b, ns)| b > 0 && ns > 0),
        })
    }

    fn stalled(&self, key: &str) -> TierError {
        TierError::Remote {
            tier: self.name.clone(),
            what: format!(
                "GET {key:?} in bucket {} at {}: no bytes for {} s",
                self.bucket,
                self.endpoint,
                STALL_TIMEOUT.as_secs()
            ),
        }
    }

    fn fetch_inner(
        &self,
        id: u64,
        object: &TierObject,
        dest: &mut dyn Write,
        progress: &dyn Fn(u64),
    ) -> Result<(), TierError> {
        let key = &object.key;
        let corrupt = |what: String| TierError::Corrupt {
            tier: self.name.clone(),
            key: key.clone(),
            what,
        };
        let start = Instant::now();
        let mut rx = self.start_get(self.object_path(key));
        let mut crc = 0u32;
        let mut done_bytes = 0u64;
        while let Some(event) = wait(rx.recv()) {
            let bytes = match event {
                GetEvent::Started { size_bytes } => {
                    if size_bytes != object.size_bytes {
                        return Err(corrupt(format!(
                            "the store holds {size_bytes} bytes where the catalog recorded {}",
                            object.size_bytes
                        )));
                    }
                    continue;
                }
                GetEvent::Chunk(bytes) => bytes,
                GetEvent::Failed(e) if is_not_found(&e) => {
                    return Err(TierError::Missing {
                        tier: self.name.clone(),
                        key: key.clone(),
                    });
                }
                GetEvent::Failed(e) => return Err(self.remote("GET", key, &e)),
                GetEvent::Stalled => return Err(self.stalled(key)),
            };
            // The first byte's time is taken before the destination's
            // write, which is not the store's latency.
            let now = Instant::now();
            let latency_ns = (done_bytes == 0).then(|| now.duration_since(start).as_nanos() as u64);
            self.measure.lock().expect("measure lock").chunk(
                id,
                bytes.len() as u64,
                latency_ns,
                now,
            );
            crc = crc32c::crc32c_append(crc, &bytes);
            dest.write_all(&bytes).map_err(|e| TierError::Sink {
                tier: self.name.clone(),
                key: key.clone(),
                source: e,
            })?;
            done_bytes += bytes.len() as u64;
            self.fetched_bytes_total
                .fetch_add(bytes.len() as u64, Relaxed);
            progress(done_bytes);
        }
        if done_bytes != object.size_bytes {
            return Err(corrupt(format!(
                "the store sent {done_bytes} bytes where the catalog recorded {}",
                object.size_bytes
            )));
        }
        if crc != object.crc32c {
            return Err(corrupt(format!(
                "the fetched bytes fail their checksum (CRC32C {crc:08x}, recorded {:08x})",
                object.crc32c
            )));
        }
        Ok(())
    }

    /// Uploads parts `first`, `second` and the rest of `file` as one
    /// multipart upload; aborts it on failure.
    fn put_multipart(
        &self,
        key: &str,
        path: &ObjectPath,
        source: &Path,
        file: &mut std::fs::File,
        parts: [Vec<u8>; 2],
        crc: &mut u32,
    ) -> Result<u64, TierError> {
        let store = Arc::clone(&self.store);
        let upload_path = path.clone();
        let mut upload = self
            .run(async move {
                store
                    .put_multipart_opts(&upload_path, PutMultipartOptions::default())
                    .await
            })
            .map_err(|e| self.remote("starting a multipart upload of", key, &e))?;
        let result = self.send_parts(key, source, file, parts, crc, &mut upload);
        match result {
            Ok(size_bytes) => {
                let (_, completed) = self.run(async move {
                    let completed = upload.complete().await;
                    (upload, completed)
                });
                completed
                    .map_err(|e| self.remote("completing the multipart upload of", key, &e))?;
                Ok(size_bytes)
            }
            Err(e) => {
                // Best effort: parts left behind are invisible, and a
                // bucket lifecycle rule can clear them.
                let _ = self.run(async move { upload.abort().await });
                Err(e)
            }
        }
    }

    fn send_parts(
        &self,
        key: &str,
        source: &Path,
        file: &mut std::fs::File,
        parts: [Vec<u8>; 2],
        crc: &mut u32,
        upload: &mut Box<dyn MultipartUpload>,
    ) -> Result<u64, TierError> {
        let mut in_flight = VecDeque::new();
        let mut size_bytes = 0u64;
        // The first two parts' CRC was taken when they were read.
        let mut read_ahead = VecDeque::from(parts);
        loop {
            let part = match read_ahead.pop_front() {
                Some(part) => part,
                None => {
                    let part = read_part(file).map_err(|e| self.read_error(source, e))?;
                    *crc = crc32c::crc32c_append(*crc, &part);
                    part
                }
            };
            if part.is_empty() {
                break;
            }
            size_bytes += part.len() as u64;
            if in_flight.len() == PARTS_IN_FLIGHT {
                let sent: tokio::task::JoinHandle<object_store::Result<()>> =
                    in_flight.pop_front().expect("a part in flight");
                self.part_done(key, sent)?;
            }
            in_flight.push_back(
                self.handle
                    .spawn(upload.put_part(PutPayload::from(Bytes::from(part)))),
            );
        }
        for sent in in_flight {
            self.part_done(key, sent)?;
        }
        Ok(size_bytes)
    }

    fn part_done(
        &self,
        key: &str,
        sent: tokio::task::JoinHandle<object_store::Result<()>>,
    ) -> Result<(), TierError> {
        match wait(sent) {
            Ok(result) => result.map_err(|e| self.remote("uploading a part of", key, &e)),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("tier {}: an S3 upload task was cancelled: {e}", self.name),
        }
    }

    fn read_error(&self, source: &Path, e: std::io::Error) -> TierError {
        TierError::Io {
            tier: self.name.clone(),
            what: "reading the file to store".into(),
            path: source.to_path_buf(),
            source: e,
        }
    }
}

/// Reads up to [`PART_BYTES`] from `file` (fewer only at its end).
fn read_part(file: &mut std::fs::File) -> std::io::Result<Vec<u8>> {
    let mut part = Vec::with_capacity(PART_BYTES);
    file.take(PART_BYTES as u64).read_to_end(&mut part)?;
    Ok(part)
}

impl Drop for S3Tier {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Tier for S3Tier {
    fn name(&self) -> &str {
        &self.name
    }

    fn put(&self, key: &str, source: &Path) -> Result<TierObject, TierError> {
        validate_key(key)?;
        let path = self.object_path(key);
        let exists = || TierError::Exists {
            tier: self.name.clone(),
            key: key.to_string(),
        };
        // The single PUT below is conditional on its own; the HEAD also
        // guards a multipart upload, whose completion S3 does not make
        // conditional here (two concurrent puts of one key could both
        // succeed, the later one winning).
        match self.head(&path) {
            Ok(()) => return Err(exists()),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(self.remote("HEAD", key, &e)),
        }
        let mut file = std::fs::File::open(source).map_err(|e| self.read_error(source, e))?;
        let first = read_part(&mut file).map_err(|e| self.read_error(source, e))?;
        let mut crc = crc32c::crc32c(&first);
        let second = if first.len() == PART_BYTES {
            read_part(&mut file).map_err(|e| self.read_error(source, e))?
        } else {
            Vec::new()
        };
        let started = Instant::now();
        let size_bytes = if second.is_empty() {
            let size_bytes = first.len() as u64;
            let store = Arc::clone(&self.store);
            let put_path = path.clone();
            let put = self.run(async move {
                let options = PutOptions {
                    mode: PutMode::Create,
                    ..PutOptions::default()
                };
                store
                    .put_opts(&put_path, PutPayload::from(first), options)
                    .await
            });
            match put {
                Ok(_) => size_bytes,
                Err(object_store::Error::AlreadyExists { .. }) => return Err(exists()),
                Err(e) => return Err(self.remote("PUT", key, &e)),
            }
        } else {
            crc = crc32c::crc32c_append(crc, &second);
            self.put_multipart(key, &path, source, &mut file, [first, second], &mut crc)?
        };
        tracing::info!(
            tier = %self.name,
            key,
            size_bytes,
            seconds = started.elapsed().as_secs_f64(),
            "stored on S3"
        );
        Ok(TierObject {
            key: key.to_string(),
            size_bytes,
            crc32c: crc,
        })
    }

    fn predict_fetch_ns(&self, object: &TierObject) -> u64 {
        self.measure
            .lock()
            .expect("measure lock")
            .predict_ns(object.size_bytes)
    }

    fn fetch(
        &self,
        object: &TierObject,
        dest: &mut dyn Write,
        progress: &dyn Fn(u64),
    ) -> Result<(), TierError> {
        validate_key(&object.key)?;
        let id = self
            .measure
            .lock()
            .expect("measure lock")
            .begin(object.size_bytes);
        self.fetches_total.fetch_add(1, Relaxed);
        let result = self.fetch_inner(id, object, dest, progress);
        self.measure
            .lock()
            .expect("measure lock")
            .end(id, Instant::now());
        if result.is_err() {
            self.fetch_failures_total.fetch_add(1, Relaxed);
        }
        result
    }

    fn remove(&self, key: &str) -> Result<(), TierError> {
        validate_key(key)?;
        let store = Arc::clone(&self.store);
        let path = self.object_path(key);
        match self.run(async move { store.delete(&path).await }) {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(self.remote("DELETE", key, &e)),
        }
    }

    fn status(&self) -> TierStatus {
        let measure = self.measure.lock().expect("measure lock");
        TierStatus {
            name: self.name.clone(),
            kind: "s3",
            fetches_active: measure.active.len() as u32,
            fetched_bytes_total: self.fetched_bytes_total.load(Relaxed),
            fetches_total: self.fetches_total.load(Relaxed),
            fetch_failures_total: self.fetch_failures_total.load(Relaxed),
            measured_bytes_per_s: Some(measure.bytes_per_s()),
            ..TierStatus::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn busy_periods_measure_the_aggregate_rate() {
        let mut m = Measure {
            calibration: Some(GetSample {
                latency_ns: 5_000_000,
                transfer: Some((1_000_000, 10_000_000)),
            }),
            ..Measure::default()
        };
        // Calibration only: 5 ms + 1 MB at 100 MB/s = 15 ms.
        assert_eq!(m.predict_ns(1_000_000), 15_000_000);
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        // Two fetches overlap: 20 MB arrive in the 100 ms the period lasts.
        let a = m.begin(10_000_000);
        let b = m.begin(10_000_000);
        m.chunk(a, 1_000_000, Some(2_000_000), ms(0));
        // Behind both: their 18 MB left plus the new 1 MB.
        assert_eq!(m.remaining_bytes(), 19_000_000);
        m.chunk(b, 1_000_000, Some(4_000_000), ms(10));
        m.chunk(a, 9_000_000, None, ms(60));
        m.end(a, ms(60));
        m.chunk(b, 9_000_000, None, ms(100));
        m.end(b, ms(100));
        assert!(m.active.is_empty() && m.busy.is_none());
        // 19 MB after the period's first bytes, in 100 ms.
        assert_eq!(m.transfers, VecDeque::from([(19_000_000, 100_000_000)]));
        assert!((m.bytes_per_s() - 190e6).abs() < 1.0);
        // The median of 2 ms and 4 ms is the upper one.
        assert_eq!(m.latency_ns(), 4_000_000);
        for i in 0..(SAMPLES_KEPT as u64 + 3) {
            push_sample(&mut m.latencies_ns, i);
        }
        assert_eq!(m.latencies_ns.len(), SAMPLES_KEPT);
    }

    #[test]
    fn the_reserved_key_is_not_a_user_key() {
        assert!(validate_key(CALIBRATION_KEY).is_err());
        assert_eq!(calibration_bytes().len(), CALIBRATION_BYTES);
    }

    #[test]
    fn configuration_errors_name_the_tier_and_the_file() {
        let config = S3TierConfig {
            endpoint: "http://127.0.0.1:9".into(),
            bucket: "b".into(),
            region: "us-east-1".into(),
            access_key_id: "a".into(),
            secret_access_key: "s".into(),
            allow_http: false,
            prefix: None,
        };
        let path = PathBuf::from("/data/tiers.toml");
        let err = S3Tier::open("cloud", &config, &path)
            .err()
            .expect("plain http refused")
            .to_string();
        assert!(
            err.contains("/data/tiers.toml") && err.contains("cloud") && err.contains("allow_http"),
            "{err}"
        );
        let ftp = S3TierConfig {
            endpoint: "ftp://x".into(),
            ..config.clone()
        };
        let err = S3Tier::open("cloud", &ftp, &path)
            .err()
            .expect("ftp")
            .to_string();
        assert!(err.contains("not an http"), "{err}");
    }
}
