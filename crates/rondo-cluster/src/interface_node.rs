//! An interface node (seed 001's I node): the HTTP sessions of a cluster's
//! clients, apart from the object manager, so that losing the manager does
//! not lose them.
//!
//! Every request goes to the current object manager: a listed URL, or the
//! leader elected in etcd. Streams (`GET /stream/{id}`, whole or one byte
//! range) are relayed through an interface buffer B_I
//! (`rondo_model::interface::Relay`): each is held back by `hold_ns` and
//! released on the title's own schedule. When the manager's stream breaks
//! (the manager killed, or deposed), the interface node finds the manager
//! that leads now and asks it for the rest of the body with a Range request,
//! retrying while it is refused (503) or unreachable; the client keeps
//! receiving from the buffer meanwhile, so a takeover shorter than the
//! buffer's slack does not reach it. Everything else (the player page, the
//! API, `?t=` time seeks, uploads) is proxied as it is.
//!
//! With a local data directory (LDSS, seed 001 §6.4), the node runs rondo's
//! own server over it, on a loopback port. When the manager answers a
//! stream request with `x-rondo-copy` (the request made the title popular
//! and this node is dedicated to it), the node copies the title: it reads
//! it from the manager as one more viewer and uploads what arrives to its
//! local server. Once the copy is stored, the node serves that title's
//! streams from its local disk, admitted there as on any rondo server, and
//! the manager sends the title's viewers at other nodes here. The other
//! titles are relayed as before (RDSS).
//!
//! `GET /api/interface` and `/interface/metrics` (Prometheus) report the
//! node's streams, takeovers and local copies.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use rondo_model::array::{PriorSchedule, RoundIndex};
use rondo_model::interface::{Relay, ReleaseCurve};
use serde_json::json;

use crate::coord::Observer;
use crate::membership::EtcdConfig;

/// Where an interface node finds the object manager.
#[derive(Clone, Debug)]
pub enum Managers {
    /// These base URLs, tried in turn (the first that answers is used until
    /// it fails).
    Listed(Vec<String>),
    /// The leader elected in this cluster's etcd.
    Etcd(EtcdConfig),
}

#[derive(Clone, Debug)]
pub struct InterfaceConfig {
    pub node_id: String,
    pub managers: Managers,
    /// The interface buffer B_I, as playback time: how long each stream is
    /// held back, and so the longest upstream gap its client never sees.
    pub hold_ns: u64,
    /// How long a broken stream keeps asking for its rest before it gives
    /// up and ends the client's response short.
    pub resume_timeout: Duration,
    /// The URL clients reach this node at: sent to the manager with each
    /// stream request, so it can send a popular title's viewers here.
    pub url: String,
    /// The node's own rondo server over its local data directory (LDSS).
    pub local: Option<LocalServer>,
    /// LMSS: seconds of each copy, from its start, kept in memory when the
    /// manager asks for LMSS (`x-rondo-copy: lmss`).
    pub memory_prefix_ns: u64,
    /// B_I_tot (seed 001 §7.1): the node takes a stream only while its
    /// streams' buffers B_Ij, with the new one's, stay below this
    /// (condition (4)); `None`, no limit.
    pub buffer_total_bytes: Option<u64>,
}

/// How long before a viewer of a copy held in memory needs the first byte
/// past the memory prefix its rest's reads may start at the latest: the
/// rest is reserved at the local server when the viewer arrives, deferred
/// by the time to that byte less this. Assumption: the local server's
/// default look-ahead (5 rounds) plus the round that reads and one round of
/// margin, at 1 s rounds.
const TAIL_LEAD: Duration = Duration::from_secs(7);

/// An interface node's local server (`rondo node interface
/// --local-data-dir`): its URL and API token.
#[derive(Clone, Debug)]
pub struct LocalServer {
    pub url: String,
    pub token: String,
}

/// A title's local copy on this node.
#[derive(Clone, Debug, PartialEq, Eq)]
enum LocalCopy {
    /// Being read from the manager and uploaded.
    Copying,
    /// Stored locally: its stream path on the local server, and under LMSS
    /// the title's first bytes in memory.
    Ready { local_path: String, prefix: Bytes },
    /// The copy failed (why); the title is relayed from the manager.
    Failed(String),
}

/// The name a copy of the manager's title `id` is stored under locally, so
/// a restarted node finds its copies again.
fn copy_name(id: u64) -> String {
    format!("copy-of-{id}")
}

/// How often a broken stream asks again while the manager is unreachable
/// or refuses (assumption: a tenth of the 1 s default round, so a resumed
/// stream loses at most that to polling; cheap beside a takeover's seconds).
const RESUME_RETRY: Duration = Duration::from_millis(100);

/// How long a request waits for a manager to answer (or to end its
/// takeover's refusal of new streams) before it is refused
/// (assumption: past the 2.5–3.3 s a standby took to serve on the
/// namespace cluster, docs/cluster.md, with room for a slower host).
const MANAGER_WAIT: Duration = Duration::from_secs(10);

/// A running interface node's state.
pub struct InterfaceNode {
    config: InterfaceConfig,
    http: reqwest::Client,
    observer: Option<tokio::sync::Mutex<Observer>>,
    /// The manager in use (a listed one's index, or etcd's leader).
    current: std::sync::Mutex<Option<String>>,
    listed_next: AtomicU64,
    schedules: std::sync::Mutex<HashMap<u64, Arc<RoundIndex>>>,
    /// Local copies, by the manager's title id.
    copies: std::sync::Mutex<HashMap<u64, LocalCopy>>,
    /// Condition (4)'s ledger, with `--buffer-total-mib`.
    buffer: Option<std::sync::Mutex<rondo_model::cluster::InterfaceBuffer>>,
    stats: Stats,
}

/// A stream's B_Ij, reserved in the node's buffer ledger while the stream
/// is served and returned when its body is dropped (ended or the client
/// gone).
struct BufferReservation {
    node: Arc<InterfaceNode>,
    bytes: u64,
}

impl Drop for BufferReservation {
    fn drop(&mut self) {
        if let Some(buffer) = &self.node.buffer {
            let mut buffer = buffer.lock().expect("not poisoned");
            buffer.release(self.bytes);
            (self.node.stats.buffer_reserved_bytes).store(buffer.in_use_bytes(), Relaxed);
        }
    }
}

#[derive(Default)]
struct Stats {
    streams_relayed: AtomicU64,
    streams_active: AtomicU64,
    /// Streams reading from a manager now (the rest: every byte arrived,
    /// or resuming).
    upstreams_reading: AtomicU64,
    /// Streams whose upstream broke and that asked a manager for the rest.
    upstreams_lost: AtomicU64,
    /// ... and got it.
    streams_resumed: AtomicU64,
    /// ... and gave up (the client's response ended short).
    streams_abandoned: AtomicU64,
    /// Release rounds whose bytes had not all arrived when due.
    late_rounds: AtomicU64,
    /// The longest time from an upstream's loss to the answer with its rest.
    resume_gap_ns_max: AtomicU64,
    /// The least slack a resumed stream had left when that answer came.
    resume_slack_ns_min: AtomicU64,
    /// The least slack a stream had when its upstream broke: the most its
    /// rest's first bytes may take, from the loss, without a late round.
    loss_slack_ns_min: AtomicU64,
    /// The longest time from an upstream's loss to its rest's first bytes
    /// (the answer's gap plus the new manager's wait for the stream's read
    /// round): a resumed stream has a late round when this passes its
    /// slack at the loss.
    resume_bytes_gap_ns_max: AtomicU64,
    /// The least slack a resumed stream had left when its rest's first
    /// bytes came: the margin the buffer kept over the takeover (zero when
    /// a round was already late).
    resume_bytes_slack_ns_min: AtomicU64,
    bytes_released: AtomicU64,
    buffered_bytes: AtomicU64,
    /// Streams the node refused because its buffer (B_I_tot) was full.
    streams_refused_buffer: AtomicU64,
    /// Σ B_Ij of the streams served now (with --buffer-total-mib).
    buffer_reserved_bytes: AtomicU64,
    /// Streams served from the node's local copies.
    streams_local: AtomicU64,
    /// ... of which started from memory (LMSS).
    streams_from_memory: AtomicU64,
    /// Viewers of a copy the local server refused (its disks full), relayed
    /// from the storage nodes instead.
    local_refused: AtomicU64,
    /// Copies stored, and copies that failed.
    copies_stored: AtomicU64,
    copies_failed: AtomicU64,
}

impl InterfaceNode {
    /// Connects to etcd when told to find the manager there.
    pub async fn new(config: InterfaceConfig) -> Result<Arc<InterfaceNode>, String> {
        let observer = match &config.managers {
            Managers::Listed(urls) if urls.is_empty() => {
                return Err("no object manager given (--manager URL or --etcd URLS)".into());
            }
            Managers::Listed(_) => None,
            Managers::Etcd(etcd) => Some(tokio::sync::Mutex::new(
                Observer::connect(&etcd.endpoints, &etcd.cluster)
                    .await
                    .map_err(|e| e.to_string())?,
            )),
        };
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(2))
            .tcp_nodelay(true)
            .build()
            .map_err(|e| format!("building the HTTP client: {e}"))?;
        let buffer = config
            .buffer_total_bytes
            .map(|b| std::sync::Mutex::new(rondo_model::cluster::InterfaceBuffer::new(b)));
        Ok(Arc::new(InterfaceNode {
            config,
            http,
            observer,
            current: Default::default(),
            listed_next: AtomicU64::new(0),
            schedules: Default::default(),
            copies: Default::default(),
            buffer,
            stats: Stats {
                resume_slack_ns_min: AtomicU64::new(u64::MAX),
                loss_slack_ns_min: AtomicU64::new(u64::MAX),
                resume_bytes_slack_ns_min: AtomicU64::new(u64::MAX),
                ..Stats::default()
            },
        }))
    }

    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/stream/{file}", get(stream))
            .route("/api/interface", get(interface_json))
            .route("/interface/metrics", get(interface_metrics))
            .fallback(proxy)
            .layer(axum::middleware::from_fn(cross_origin))
            .with_state(Arc::clone(self))
    }

    /// Serves clients on `listener` until `shutdown` resolves.
    pub async fn serve(
        self: &Arc<Self>,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        axum::serve(listener, self.router())
            .with_graceful_shutdown(shutdown)
            .await
    }

    /// The object manager to ask now.
    async fn manager(&self) -> Result<String, String> {
        if let Some(url) = self.current.lock().expect("not poisoned").clone() {
            return Ok(url);
        }
        let url = match (&self.config.managers, &self.observer) {
            (Managers::Listed(urls), _) => {
                let k = self.listed_next.load(Relaxed) as usize % urls.len();
                urls[k].trim_end_matches('/').to_string()
            }
            (Managers::Etcd(etcd), Some(observer)) => {
                let candidates = observer
                    .lock()
                    .await
                    .candidates()
                    .await
                    .map_err(|e| e.to_string())?;
                candidates.into_iter().next().ok_or_else(|| {
                    format!(
                        "no object manager is elected in cluster {} (etcd {})",
                        etcd.cluster,
                        etcd.endpoints.join(",")
                    )
                })?
            }
            (Managers::Etcd(_), None) => unreachable!("an etcd node has an observer"),
        };
        *self.current.lock().expect("not poisoned") = Some(url.clone());
        Ok(url)
    }

    /// `url` failed: the next call asks etcd again, or tries the next
    /// listed manager.
    fn manager_failed(&self, url: &str) {
        let mut current = self.current.lock().expect("not poisoned");
        if current.as_deref() == Some(url) {
            *current = None;
            self.listed_next.fetch_add(1, Relaxed);
        }
    }

    /// A title's round index, from the manager's `/api/titles/{id}/schedule`
    /// (kept: a title's schedule never changes under its id).
    async fn schedule(&self, id: u64) -> Option<Arc<RoundIndex>> {
        if let Some(index) = self.schedules.lock().expect("not poisoned").get(&id) {
            return Some(Arc::clone(index));
        }
        #[derive(serde::Deserialize)]
        struct Schedule {
            round_duration_ns: u64,
            client_bytes: Vec<u64>,
        }
        let response = self
            .forward(
                &Method::GET,
                &format!("/api/titles/{id}/schedule"),
                &HeaderMap::new(),
                None,
            )
            .await
            .ok()
            .filter(|r| r.status().is_success())?;
        let schedule: Schedule = response.json().await.ok()?;
        if schedule.round_duration_ns == 0 || schedule.client_bytes.is_empty() {
            return None;
        }
        let index = Arc::new(RoundIndex::new(
            &schedule.client_bytes,
            schedule.round_duration_ns,
        ));
        self.schedules
            .lock()
            .expect("not poisoned")
            .insert(id, Arc::clone(&index));
        Some(index)
    }

    /// Sends `method path` with `headers` and `body` to the manager. A
    /// request without a body waits out a takeover: while no manager
    /// answers it asks again (etcd's leader, or the next listed manager)
    /// for up to `MANAGER_WAIT`, so a client arriving then starts late
    /// rather than fails. A body is sent once.
    async fn forward(
        &self,
        method: &Method,
        path_and_query: &str,
        headers: &HeaderMap,
        body: Option<Body>,
    ) -> Result<reqwest::Response, String> {
        let mut body = body;
        let give_up = Instant::now() + MANAGER_WAIT;
        loop {
            let manager = match self.manager().await {
                Ok(manager) => manager,
                Err(e) if body.is_none() && Instant::now() < give_up => {
                    tracing::debug!("no object manager yet: {e}");
                    tokio::time::sleep(RESUME_RETRY).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let mut request = self
                .http
                .request(method.clone(), format!("{manager}{path_and_query}"));
            for (name, value) in headers {
                // The forwarded body sets its own length.
                if !is_hop_by_hop(name) && name != header::CONTENT_LENGTH {
                    request = request.header(name, value);
                }
            }
            let had_body = body.is_some();
            if let Some(body) = body.take() {
                request = request.body(reqwest::Body::wrap_stream(body.into_data_stream()));
            }
            match request.send().await {
                Ok(response) => return Ok(response),
                Err(e) => {
                    self.manager_failed(&manager);
                    if had_body || Instant::now() >= give_up {
                        return Err(format!("object manager {manager}: {e}"));
                    }
                    tokio::time::sleep(RESUME_RETRY).await;
                }
            }
        }
    }

    /// Reserves a new stream of `index`'s title in the buffer ledger
    /// (condition (4)): `Ok(None)` with no B_I_tot, the reservation, or the
    /// 503 that refuses the stream, naming the buffer.
    fn reserve_buffer(
        self: &Arc<Self>,
        index: &RoundIndex,
    ) -> Result<Option<BufferReservation>, Box<Response>> {
        let Some(buffer) = &self.buffer else {
            return Ok(None);
        };
        let bytes = rondo_model::interface::stream_buffer_bytes(index, self.config.hold_ns);
        let reserved = {
            let mut buffer = buffer.lock().expect("not poisoned");
            let reserved = buffer.reserve(bytes);
            (self.stats.buffer_reserved_bytes).store(buffer.in_use_bytes(), Relaxed);
            reserved
        };
        match reserved {
            Ok(()) => Ok(Some(BufferReservation {
                node: Arc::clone(self),
                bytes,
            })),
            Err(rondo_model::cluster::MeasuredRefusal::Buffer {
                in_use_bytes,
                total_bytes,
            }) => {
                self.stats.streams_refused_buffer.fetch_add(1, Relaxed);
                let mut response = (
                    StatusCode::SERVICE_UNAVAILABLE,
                    axum::Json(json!({
                        "error": format!(
                            "interface node {} is full: its streams' buffers hold {in_use_bytes} \
                             of its {total_bytes} bytes (--buffer-total-mib) and this stream needs \
                             {bytes} more",
                            self.config.node_id
                        ),
                        "reason": "interface_buffer",
                    })),
                )
                    .into_response();
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                Err(Box::new(response))
            }
            Err(other) => unreachable!("the buffer ledger refuses only on its buffer: {other:?}"),
        }
    }

    fn copies_json(&self) -> Vec<serde_json::Value> {
        let copies = self.copies.lock().expect("not poisoned");
        let mut ids: Vec<&u64> = copies.keys().collect();
        ids.sort();
        ids.into_iter()
            .map(|id| match &copies[id] {
                LocalCopy::Copying => json!({"title": id, "state": "copying"}),
                LocalCopy::Ready { local_path, prefix } => json!({
                    "title": id,
                    "state": "ready",
                    "local_path": local_path,
                    "memory_prefix_bytes": prefix.len(),
                }),
                LocalCopy::Failed(why) => json!({"title": id, "state": "failed", "error": why}),
            })
            .collect()
    }

    /// Finds the copies a earlier run of this node stored (by their names).
    pub async fn find_local_copies(&self) -> Result<usize, String> {
        let Some(local) = &self.config.local else {
            return Ok(0);
        };
        let url = format!("{}/api/titles", local.url);
        let titles: serde_json::Value = self
            .http
            .get(&url)
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .map_err(|e| format!("{url}: {e}"))?
            .json()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        let mut found = 0;
        let mut copies = self.copies.lock().expect("not poisoned");
        for title in titles.as_array().into_iter().flatten() {
            let (Some(name), Some(stream_url)) =
                (title["name"].as_str(), title["stream_url"].as_str())
            else {
                continue;
            };
            let Some(id) = name
                .strip_prefix("copy-of-")
                .and_then(|id| id.parse::<u64>().ok())
            else {
                continue;
            };
            let local_path = stream_url
                .strip_prefix(&local.url)
                .unwrap_or(stream_url)
                .to_string();
            // A restarted node has no memory prefix (LDSS for these).
            copies.insert(
                id,
                LocalCopy::Ready {
                    local_path,
                    prefix: Bytes::new(),
                },
            );
            found += 1;
        }
        Ok(found)
    }

    /// The headers a forwarded stream request carries besides the client's:
    /// this node's URL, and whether it can hold copies.
    fn stream_headers(&self, client: &HeaderMap) -> HeaderMap {
        let mut headers = client.clone();
        // Only this node says what it is: a client's own claims are dropped.
        for name in [
            rondo_server::config::INTERFACE_HEADER,
            rondo_server::config::LOCAL_COPIES_HEADER,
            rondo_server::config::DEFER_HEADER,
        ] {
            headers.remove(name);
        }
        if let Ok(url) = HeaderValue::from_str(&self.config.url) {
            headers.insert(rondo_server::config::INTERFACE_HEADER, url);
        }
        if self.config.local.is_some() {
            headers.insert(
                rondo_server::config::LOCAL_COPIES_HEADER,
                HeaderValue::from_static("1"),
            );
        }
        headers
    }

    /// Starts copying the manager's title `id` (requested as `path`) to the
    /// local server, unless it is copied or being copied.
    fn start_copy(self: &Arc<Self>, id: u64, path: &str, keep_prefix: bool) {
        if self.config.local.is_none() {
            return;
        }
        {
            let mut copies = self.copies.lock().expect("not poisoned");
            if matches!(
                copies.get(&id),
                Some(LocalCopy::Copying | LocalCopy::Ready { .. })
            ) {
                return;
            }
            copies.insert(id, LocalCopy::Copying);
        }
        let node = Arc::clone(self);
        let path = path_without_query(path);
        tokio::spawn(async move {
            let outcome = node.copy(id, &path, keep_prefix).await;
            let state = match outcome {
                Ok((local_path, prefix)) => {
                    tracing::info!(
                        title = id,
                        local_path,
                        memory_prefix_bytes = prefix.len(),
                        "local copy stored"
                    );
                    node.stats.copies_stored.fetch_add(1, Relaxed);
                    LocalCopy::Ready { local_path, prefix }
                }
                Err(why) => {
                    tracing::warn!(title = id, "local copy failed: {why}");
                    node.stats.copies_failed.fetch_add(1, Relaxed);
                    LocalCopy::Failed(why)
                }
            };
            node.copies.lock().expect("not poisoned").insert(id, state);
        });
    }

    /// Reads the title from the manager as a viewer does (its stream,
    /// admitted and paced there: seed 001's copy "as its next viewer
    /// fetches it") and uploads the bytes as they arrive to the local
    /// server. Answers the copy's stream path there and, with `keep_prefix`
    /// (LMSS), the title's first `memory_prefix_ns` of bytes.
    async fn copy(
        &self,
        id: u64,
        path: &str,
        keep_prefix: bool,
    ) -> Result<(String, Bytes), String> {
        let local = self
            .config
            .local
            .as_ref()
            .expect("copies need a local server");
        let prefix_bytes = match (keep_prefix, self.schedule(id).await) {
            (true, Some(index)) => {
                let rounds = self
                    .config
                    .memory_prefix_ns
                    .div_ceil(index.round_duration_ns().max(1));
                let rounds = (rounds as usize).min(index.rounds());
                index.rounds_byte_range(0..rounds).end
            }
            _ => 0,
        };
        let upstream = self
            .forward(
                &Method::GET,
                path,
                &self.stream_headers(&HeaderMap::new()),
                None,
            )
            .await?;
        if upstream.status() != StatusCode::OK {
            return Err(format!(
                "the manager answered {} for {path}",
                upstream.status()
            ));
        }
        let file = path.rsplit('/').next().unwrap_or("title");
        let upload = format!(
            "{}/api/admin/titles?name={}&file={}",
            local.url,
            copy_name(id),
            file
        );
        let prefix = Arc::new(std::sync::Mutex::new(Vec::with_capacity(
            prefix_bytes as usize,
        )));
        let kept = Arc::clone(&prefix);
        let body = tokio_stream::StreamExt::map(upstream.bytes_stream(), move |chunk| {
            if let Ok(bytes) = &chunk {
                let mut kept = kept.lock().expect("not poisoned");
                let room = (prefix_bytes as usize).saturating_sub(kept.len());
                kept.extend_from_slice(&bytes[..room.min(bytes.len())]);
            }
            chunk
        });
        let response = self
            .http
            .post(&upload)
            .bearer_auth(&local.token)
            .body(reqwest::Body::wrap_stream(body))
            .send()
            .await
            .map_err(|e| format!("uploading to the local server: {e}"))?;
        let status = response.status();
        let body: serde_json::Value = response
            .json()
            .await
            .map_err(|e| format!("the local server's answer ({status}): {e}"))?;
        if !status.is_success() {
            return Err(format!(
                "the local server refused the copy ({status}): {}",
                body["error"]
            ));
        }
        let stream_url = body["stream_url"]
            .as_str()
            .ok_or("the local server's answer names no stream_url")?;
        let local_path = stream_url
            .strip_prefix(&local.url)
            .unwrap_or(stream_url)
            .to_string();
        let prefix = Bytes::from(std::mem::take(&mut *prefix.lock().expect("not poisoned")));
        Ok((local_path, prefix))
    }

    /// The local stream path of title `id` and its memory prefix (empty
    /// without LMSS), when its copy is stored.
    fn local_copy(&self, id: u64) -> Option<(String, Bytes)> {
        match self.copies.lock().expect("not poisoned").get(&id) {
            Some(LocalCopy::Ready { local_path, prefix }) => {
                Some((local_path.clone(), prefix.clone()))
            }
            _ => None,
        }
    }

    fn snapshot(&self) -> serde_json::Value {
        let s = &self.stats;
        let slack_min = s.resume_slack_ns_min.load(Relaxed);
        let loss_slack_min = s.loss_slack_ns_min.load(Relaxed);
        let bytes_slack_min = s.resume_bytes_slack_ns_min.load(Relaxed);
        json!({
            "node_id": self.config.node_id,
            "manager": self.current.lock().expect("not poisoned").clone(),
            "hold_seconds": self.config.hold_ns as f64 / 1e9,
            "streams_relayed": s.streams_relayed.load(Relaxed),
            "streams_active": s.streams_active.load(Relaxed),
            "upstreams_reading": s.upstreams_reading.load(Relaxed),
            "upstreams_lost": s.upstreams_lost.load(Relaxed),
            "streams_resumed": s.streams_resumed.load(Relaxed),
            "streams_abandoned": s.streams_abandoned.load(Relaxed),
            "late_rounds": s.late_rounds.load(Relaxed),
            "resume_gap_ms_max": s.resume_gap_ns_max.load(Relaxed) as f64 / 1e6,
            "resume_slack_ms_min": (slack_min != u64::MAX).then(|| slack_min as f64 / 1e6),
            "loss_slack_ms_min": (loss_slack_min != u64::MAX).then(|| loss_slack_min as f64 / 1e6),
            "resume_bytes_gap_ms_max": s.resume_bytes_gap_ns_max.load(Relaxed) as f64 / 1e6,
            "resume_bytes_slack_ms_min": (bytes_slack_min != u64::MAX).then(|| bytes_slack_min as f64 / 1e6),
            "bytes_released": s.bytes_released.load(Relaxed),
            "buffered_bytes": s.buffered_bytes.load(Relaxed),
            "local_server": self.config.local.as_ref().map(|l| l.url.clone()),
            "streams_local": s.streams_local.load(Relaxed),
            "streams_from_memory": s.streams_from_memory.load(Relaxed),
            "local_refused": s.local_refused.load(Relaxed),
            "buffer_total_bytes": self.config.buffer_total_bytes,
            "buffer_reserved_bytes": s.buffer_reserved_bytes.load(Relaxed),
            "streams_refused_buffer": s.streams_refused_buffer.load(Relaxed),
            "memory_prefix_seconds": self.config.memory_prefix_ns as f64 / 1e9,
            "copies_stored": s.copies_stored.load(Relaxed),
            "copies_failed": s.copies_failed.load(Relaxed),
            "copies": self.copies_json(),
        })
    }
}

/// Headers that belong to one connection, not to the message (RFC 9110
/// §7.6.1).
fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
    )
}

/// A client's answer begun as the manager's: its status and its message
/// headers.
fn response_head(upstream: &reqwest::Response) -> axum::http::response::Builder {
    let mut response = Response::builder().status(upstream.status());
    for (name, value) in upstream.headers() {
        if !is_hop_by_hop(name) {
            response = response.header(name, value);
        }
    }
    response
}

fn error(status: StatusCode, message: String) -> Response {
    (status, axum::Json(json!({ "error": message }))).into_response()
}

/// No manager answered: refused for now (a takeover may be under way).
fn no_manager(message: String) -> Response {
    let mut response = error(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("no object manager answered: {message}"),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// Any page may read from any interface node: the player page, loaded
/// from one, resumes its stream on another when that one is lost (and asks
/// it why a stream was refused). A preflight is answered here.
async fn cross_origin(request: Request, next: axum::middleware::Next) -> Response {
    let mut response = if request.method() == Method::OPTIONS {
        let mut r = StatusCode::NO_CONTENT.into_response();
        let h = r.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, HEAD"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("range"),
        );
        r
    } else {
        next.run(request).await
    };
    let h = response.headers_mut();
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("retry-after, content-range, content-length"),
    );
    response
}

/// A manager's answer passed on as it is: status, headers, body.
fn pass_on(upstream: reqwest::Response) -> Response {
    response_head(&upstream)
        .body(Body::from_stream(upstream.bytes_stream()))
        .unwrap_or_else(|e| error(StatusCode::BAD_GATEWAY, e.to_string()))
}

async fn proxy(State(node): State<Arc<InterfaceNode>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let has_body = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .is_some_and(|v| v.as_bytes() != b"0")
        || parts.headers.contains_key(header::TRANSFER_ENCODING);
    match node
        .forward(
            &parts.method,
            &path,
            &parts.headers,
            has_body.then_some(body),
        )
        .await
    {
        Ok(upstream) => pass_on(upstream),
        Err(e) => no_manager(e),
    }
}

async fn interface_json(State(node): State<Arc<InterfaceNode>>) -> axum::Json<serde_json::Value> {
    axum::Json(node.snapshot())
}

async fn interface_metrics(State(node): State<Arc<InterfaceNode>>) -> Response {
    let s = &node.stats;
    let metrics = [
        (
            "streams_relayed_total",
            "counter",
            "Streams relayed through the interface buffer.",
            &s.streams_relayed,
        ),
        (
            "streams_active",
            "gauge",
            "Streams being relayed now.",
            &s.streams_active,
        ),
        (
            "upstreams_reading",
            "gauge",
            "Streams reading from a manager now.",
            &s.upstreams_reading,
        ),
        (
            "upstreams_lost_total",
            "counter",
            "Streams whose manager's stream broke.",
            &s.upstreams_lost,
        ),
        (
            "streams_resumed_total",
            "counter",
            "Broken streams resumed at a manager with a Range request.",
            &s.streams_resumed,
        ),
        (
            "streams_abandoned_total",
            "counter",
            "Broken streams given up (the client's response ended short).",
            &s.streams_abandoned,
        ),
        (
            "late_rounds_total",
            "counter",
            "Release rounds whose bytes had not all arrived when due.",
            &s.late_rounds,
        ),
        (
            "bytes_released_total",
            "counter",
            "Stream bytes released to clients.",
            &s.bytes_released,
        ),
        (
            "buffered_bytes",
            "gauge",
            "Stream bytes held in interface buffers now.",
            &s.buffered_bytes,
        ),
        (
            "streams_local_total",
            "counter",
            "Streams served from this node's local copies (LDSS).",
            &s.streams_local,
        ),
        (
            "streams_from_memory_total",
            "counter",
            "Local streams started from a copy's first seconds in memory (LMSS).",
            &s.streams_from_memory,
        ),
        (
            "local_refused_total",
            "counter",
            "Viewers of a local copy the local server refused, relayed from the storage nodes.",
            &s.local_refused,
        ),
        (
            "buffer_reserved_bytes",
            "gauge",
            "Interface buffer reserved by the streams served now (B_Ij summed; --buffer-total-mib).",
            &s.buffer_reserved_bytes,
        ),
        (
            "streams_refused_buffer_total",
            "counter",
            "Streams refused (503) because the interface buffer was full (condition (4)).",
            &s.streams_refused_buffer,
        ),
        (
            "copies_stored_total",
            "counter",
            "Popular titles copied to this node's local disk.",
            &s.copies_stored,
        ),
        (
            "copies_failed_total",
            "counter",
            "Copies of popular titles that failed.",
            &s.copies_failed,
        ),
    ];
    let mut text = String::new();
    for (name, kind, help, value) in metrics {
        text.push_str(&format!(
            "# HELP rondo_interface_{name} {help}\n# TYPE rondo_interface_{name} {kind}\nrondo_interface_{name} {}\n",
            value.load(Relaxed)
        ));
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// `GET /stream/{file}`: relayed through the interface buffer when it is
/// the whole title or one byte range of it; anything else is proxied.
async fn stream(
    State(node): State<Arc<InterfaceNode>>,
    Path(file): Path<String>,
    request: Request,
) -> Response {
    let time_seek = request
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p.starts_with("t=")));
    let id = file.split('.').next().and_then(|id| id.parse::<u64>().ok());
    if let (Some(id), Some(local)) = (id, &node.config.local)
        && let Some((local_path, prefix)) = node.local_copy(id)
    {
        let whole = request.method() == Method::GET
            && request.uri().query().is_none()
            && !request.headers().contains_key(header::RANGE);
        let asked = Asked::of(&request);
        // The title's schedule is fetched only when there is a ledger.
        let index = match node.buffer.is_some() && request.method() == Method::GET {
            true => node.schedule(id).await,
            false => None,
        };
        let reservation = match index.map(|index| node.reserve_buffer(&index)) {
            Some(Ok(reservation)) => reservation,
            Some(Err(refusal)) => return *refusal,
            None => None,
        };
        let served = if whole && !prefix.is_empty() {
            serve_from_memory(&node, local, id, &local_path, prefix, &asked).await
        } else {
            serve_local(&node, local, &local_path, &asked).await
        };
        match served {
            Some(response) => return held_while_sent(response, reservation),
            // The local disks are full: relayed from the storage nodes.
            None => {
                node.stats.local_refused.fetch_add(1, Relaxed);
            }
        }
    }
    let (Some(id), false, true) = (id, time_seek, request.method() == Method::GET) else {
        return proxy(State(node), request).await;
    };
    let Some(index) = node.schedule(id).await else {
        // The manager answers for an unknown title, or says why it cannot.
        return proxy(State(node), request).await;
    };
    let path = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    // A manager that has just taken over refuses new streams for seconds:
    // the client waits here meanwhile, as through the takeover itself.
    let asked_at = Instant::now();
    let upstream = loop {
        let upstream = match node
            .forward(
                &Method::GET,
                &path,
                &node.stream_headers(request.headers()),
                None,
            )
            .await
        {
            Ok(upstream) => upstream,
            Err(e) => return no_manager(e),
        };
        let in_takeover = upstream.status() == StatusCode::SERVICE_UNAVAILABLE
            && upstream
                .headers()
                .contains_key(rondo_server::config::TAKEOVER_HEADER);
        if !in_takeover || asked_at.elapsed() >= MANAGER_WAIT {
            break upstream;
        }
        tokio::time::sleep(RESUME_RETRY).await;
    };
    if let Some(copy) = upstream.headers().get(rondo_server::config::COPY_HEADER) {
        let keep_prefix = copy.as_bytes() == b"lmss" && node.config.memory_prefix_ns > 0;
        node.start_copy(id, &path, keep_prefix);
    }
    let span = match upstream.status() {
        StatusCode::OK => Some((0, index.size_bytes())),
        StatusCode::PARTIAL_CONTENT => upstream
            .headers()
            .get(header::CONTENT_RANGE)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_content_range),
        _ => None,
    };
    let curve = span
        .filter(|&(_, length)| upstream.content_length() == Some(length))
        .and_then(|(first, length)| Some((first, ReleaseCurve::for_span(&index, first, length)?)));
    let Some((first_byte, curve)) = curve else {
        // Refusals, errors, and anything not a plain byte span of the
        // title as indexed go to the client as they are.
        return pass_on(upstream);
    };
    // Reserved once the manager has taken the stream, so that a request
    // the manager redirects (to a title's dedicated node) never counts
    // here; a refusal drops the upstream, which ends it at the manager.
    let reservation = match node.reserve_buffer(&index) {
        Ok(reservation) => reservation,
        Err(refusal) => return *refusal,
    };
    let response = response_head(&upstream).header(
        "x-rondo-interface",
        HeaderValue::from_str(&node.config.node_id).unwrap_or(HeaderValue::from_static("?")),
    );
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(2);
    // A client resuming here after its interface node died has played its
    // buffer out: it gets the rest on the title's curve from the first
    // byte, not held back again (the start burst the manager sends it
    // still fills this buffer ahead of the curve).
    // (`x-rondo-resume` from `rondo load --failover`, `?resume=1` from the
    // player page, whose <video> sends no headers of its own.)
    let resuming = request
        .headers()
        .contains_key(rondo_server::config::RESUME_HEADER)
        || request
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|p| p == "resume=1"));
    let hold_ns = if resuming { 0 } else { node.config.hold_ns };
    let relay = Relay::new(curve, index.round_duration_ns(), hold_ns);
    tokio::spawn(relay_stream(
        Arc::clone(&node),
        path_without_query(&path),
        first_byte,
        relay,
        upstream,
        sender,
        reservation,
    ));
    response
        .body(Body::from_stream(
            tokio_stream::wrappers::ReceiverStream::new(receiver),
        ))
        .unwrap_or_else(|e| error(StatusCode::BAD_GATEWAY, e.to_string()))
}

/// What a client asked for (a request without its body, which is not
/// `Sync` and so cannot be held across an await by reference).
struct Asked {
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
}

impl Asked {
    fn of(request: &Request) -> Asked {
        Asked {
            method: request.method().clone(),
            uri: request.uri().clone(),
            headers: request.headers().clone(),
        }
    }
}

/// A stream of a title copied here: asked of the local server (the same
/// path's query, the client's Range), passed on as it answers. The local
/// server admits and paces it as any rondo server does; no interface buffer
/// is needed, as no manager's takeover can break it. `None` when the local
/// server refused it for want of room (503): the caller relays it instead.
async fn serve_local(
    node: &Arc<InterfaceNode>,
    local: &LocalServer,
    local_path: &str,
    request: &Asked,
) -> Option<Response> {
    let query = request
        .uri
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let mut forwarded = node.http.request(
        request.method.clone(),
        format!("{}{local_path}{query}", local.url),
    );
    for (name, value) in &request.headers {
        if !is_hop_by_hop(name) && name != header::HOST {
            forwarded = forwarded.header(name, value);
        }
    }
    let upstream = match forwarded.send().await {
        Ok(upstream) => upstream,
        Err(e) => {
            return Some(error(
                StatusCode::BAD_GATEWAY,
                format!("this node's local server ({}): {e}", local.url),
            ));
        }
    };
    if upstream.status() == StatusCode::SERVICE_UNAVAILABLE {
        return None;
    }
    if upstream.status().is_success() {
        node.stats.streams_local.fetch_add(1, Relaxed);
    }
    Some(
        local_response_head(node, &upstream, "1")
            .body(Body::from_stream(upstream.bytes_stream()))
            .unwrap_or_else(|e| error(StatusCode::BAD_GATEWAY, e.to_string())),
    )
}

/// The head of an answer from this node's copy: the local server's, named.
fn local_response_head(
    node: &InterfaceNode,
    upstream: &reqwest::Response,
    copy: &'static str,
) -> axum::http::response::Builder {
    response_head(upstream)
        .header(
            "x-rondo-interface",
            HeaderValue::from_str(&node.config.node_id).unwrap_or(HeaderValue::from_static("?")),
        )
        .header("x-rondo-local-copy", copy)
}

/// LMSS: a whole-title viewer of a copy whose first seconds are in memory.
/// When the viewer arrives, the rest (from the first byte past the prefix)
/// is reserved at the local server with its reads deferred until
/// `TAIL_LEAD` before the viewer needs them (`x-rondo-defer-ms`), so the
/// local disk reads nothing for a viewer in its first seconds, and a viewer
/// is taken only with its rest guaranteed. The prefix then goes at once
/// (the client's TCP window paces it), the rest as the local server sends
/// it. `None` when the local server refused the rest (503): the caller
/// relays the viewer instead.
async fn serve_from_memory(
    node: &Arc<InterfaceNode>,
    local: &LocalServer,
    id: u64,
    local_path: &str,
    prefix: Bytes,
    request: &Asked,
) -> Option<Response> {
    let index = node.schedule(id).await;
    let prefix_len = prefix.len() as u64;
    let size_bytes = index.as_ref().map_or(0, |i| i.size_bytes());
    if index.is_none() || size_bytes <= prefix_len {
        return serve_local(node, local, local_path, request).await;
    }
    // When the viewer needs the first byte past the prefix: the start of
    // its round on the title's schedule.
    let needed_at_ns = index
        .as_ref()
        .and_then(|i| {
            i.position_of_byte(prefix_len)
                .map(|p| i.round_start_ns(p.round))
        })
        .unwrap_or(0);
    let defer = Duration::from_nanos(needed_at_ns).saturating_sub(TAIL_LEAD);
    let tail_url = format!("{}{local_path}", local.url);
    let tail = match node
        .http
        .get(&tail_url)
        .header(header::RANGE, format!("bytes={prefix_len}-"))
        .header(
            rondo_server::config::DEFER_HEADER,
            defer.as_millis().to_string(),
        )
        .send()
        .await
    {
        Ok(tail) if tail.status() == StatusCode::PARTIAL_CONTENT => tail,
        Ok(tail) if tail.status() == StatusCode::SERVICE_UNAVAILABLE => return None,
        Ok(tail) => {
            return Some(error(
                StatusCode::BAD_GATEWAY,
                format!(
                    "this node's local server answered {} for the rest of {local_path}",
                    tail.status()
                ),
            ));
        }
        Err(e) => return Some(error(StatusCode::BAD_GATEWAY, format!("{tail_url}: {e}"))),
    };
    node.stats.streams_local.fetch_add(1, Relaxed);
    node.stats.streams_from_memory.fetch_add(1, Relaxed);
    let mut response = local_response_head(node, &tail, "memory").status(StatusCode::OK);
    if let Some(headers) = response.headers_mut() {
        headers.remove(header::CONTENT_RANGE);
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(size_bytes));
    }
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    tokio::spawn(async move {
        const CHUNK: usize = 64 * 1024;
        let mut offset = 0;
        while offset < prefix.len() {
            let end = (offset + CHUNK).min(prefix.len());
            if sender.send(Ok(prefix.slice(offset..end))).await.is_err() {
                return; // the viewer left; dropping the tail ends its stream
            }
            offset = end;
        }
        let mut bytes = tail.bytes_stream();
        while let Some(chunk) = tokio_stream::StreamExt::next(&mut bytes).await {
            let chunk = chunk.map_err(std::io::Error::other);
            let failed = chunk.is_err();
            if sender.send(chunk).await.is_err() || failed {
                return;
            }
        }
    });
    Some(
        response
            .body(Body::from_stream(
                tokio_stream::wrappers::ReceiverStream::new(receiver),
            ))
            .unwrap_or_else(|e| error(StatusCode::BAD_GATEWAY, e.to_string())),
    )
}

/// `response` with `reservation` held until its body is dropped (sent, or
/// the client gone); at once for an answer that is no stream.
fn held_while_sent(response: Response, reservation: Option<BufferReservation>) -> Response {
    let Some(reservation) = reservation.filter(|_| response.status().is_success()) else {
        return response;
    };
    let (parts, body) = response.into_parts();
    let body = tokio_stream::StreamExt::map(body.into_data_stream(), move |chunk| {
        let _held = &reservation;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(body))
}

fn path_without_query(path: &str) -> String {
    path.split('?').next().unwrap_or(path).to_string()
}

/// `bytes FIRST-LAST/SIZE` → (first, length).
fn parse_content_range(value: &str) -> Option<(u64, u64)> {
    let range = value.strip_prefix("bytes ")?.split('/').next()?;
    let (first, last) = range.split_once('-')?;
    let (first, last): (u64, u64) = (first.trim().parse().ok()?, last.trim().parse().ok()?);
    (last >= first).then(|| (first, last - first + 1))
}

/// Where a stream's bytes come from now.
enum Upstream {
    Reading(reqwest::Response),
    /// Lost at this instant; asking for the rest.
    Resuming {
        lost_at: Instant,
        asking: std::pin::Pin<Box<dyn Future<Output = Option<reqwest::Response>> + Send>>,
    },
    /// Every byte arrived, or the rest could not be had.
    Ended,
}

/// Keeps the longest gap and the least slack (none before a stream's
/// first byte) of a resume's stage.
fn note_gap_and_slack(gap_max: (&AtomicU64, u64), slack_min: (&AtomicU64, Option<u64>)) {
    gap_max.0.fetch_max(gap_max.1, Relaxed);
    if let Some(slack_ns) = slack_min.1 {
        slack_min.0.fetch_min(slack_ns, Relaxed);
    }
}

/// What woke a relayed stream.
enum Event {
    Chunk(Result<Option<Bytes>, reqwest::Error>),
    Rest(Option<reqwest::Response>),
    Release,
}

/// One relayed stream: reads its upstream into the buffer, resumes it at
/// whichever manager leads when it breaks, and releases to the client on
/// the relay's curve until every byte is out or the client leaves.
async fn relay_stream(
    node: Arc<InterfaceNode>,
    path: String,
    first_byte: u64,
    mut relay: Relay,
    upstream: reqwest::Response,
    client: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    // Held until the relay ends.
    _reservation: Option<BufferReservation>,
) {
    let stats = &node.stats;
    stats.streams_relayed.fetch_add(1, Relaxed);
    stats.streams_active.fetch_add(1, Relaxed);
    stats.upstreams_reading.fetch_add(1, Relaxed);
    let epoch = Instant::now();
    let now_ns = || epoch.elapsed().as_nanos() as u64;
    let mut schedule = schedule_of(&upstream);
    let mut upstream = Upstream::Reading(upstream);
    let mut held: VecDeque<Bytes> = VecDeque::new();
    let mut held_bytes = 0u64;
    let mut abandoned = false;
    // A resumed upstream's loss, until its rest's first bytes come.
    let mut rest_awaited_since: Option<Instant> = None;
    loop {
        let wake = relay
            .next_release_ns()
            .map(|ns| tokio::time::Instant::from_std(epoch + Duration::from_nanos(ns)));
        let event = tokio::select! {
            event = async {
                match &mut upstream {
                    Upstream::Reading(r) => Event::Chunk(r.chunk().await),
                    Upstream::Resuming { asking, .. } => Event::Rest(asking.await),
                    Upstream::Ended => std::future::pending().await,
                }
            } => event,
            _ = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => Event::Release,
            _ = client.closed() => break,
        };
        match event {
            Event::Release => {}
            Event::Chunk(Ok(Some(bytes)))
                if relay.received_bytes() + bytes.len() as u64 <= relay.curve().length_bytes() =>
            {
                if let Some(lost_at) = rest_awaited_since.take() {
                    let bytes_gap_ns = lost_at.elapsed().as_nanos() as u64;
                    let slack_ns = relay.slack_ns(now_ns());
                    note_gap_and_slack(
                        (&stats.resume_bytes_gap_ns_max, bytes_gap_ns),
                        (&stats.resume_bytes_slack_ns_min, slack_ns),
                    );
                    tracing::info!(
                        path,
                        bytes_gap_ms = bytes_gap_ns / 1_000_000,
                        slack_ms = slack_ns.map(|s| s / 1_000_000),
                        "a resumed stream's first bytes"
                    );
                }
                relay.received(now_ns(), bytes.len() as u64);
                held_bytes += bytes.len() as u64;
                stats.buffered_bytes.fetch_add(bytes.len() as u64, Relaxed);
                held.push_back(bytes);
                if relay.received_bytes() == relay.curve().length_bytes() {
                    stats.upstreams_reading.fetch_sub(1, Relaxed);
                    upstream = Upstream::Ended;
                }
            }
            // Broken, ended short, or more than asked for: ask the manager
            // that leads now for the rest.
            Event::Chunk(_) => {
                stats.upstreams_reading.fetch_sub(1, Relaxed);
                stats.upstreams_lost.fetch_add(1, Relaxed);
                let from = first_byte + relay.received_bytes();
                let last = first_byte + relay.curve().length_bytes() - 1;
                let slack_ns = relay.slack_ns(now_ns());
                if let Some(slack_ns) = slack_ns {
                    stats.loss_slack_ns_min.fetch_min(slack_ns, Relaxed);
                }
                tracing::info!(
                    path,
                    from,
                    slack_ms = slack_ns.map(|s| s / 1_000_000),
                    "upstream lost; asking a manager for the rest"
                );
                let lost_at = Instant::now();
                // The lost manager's time at the loss: what it said when it
                // answered, plus what passed here since.
                let prior =
                    schedule.map(|(s, answered_at): (PriorSchedule, Instant)| PriorSchedule {
                        lost_at_ns: s.lost_at_ns + (lost_at - answered_at).as_nanos() as u64,
                        ..s
                    });
                upstream = Upstream::Resuming {
                    lost_at,
                    asking: Box::pin(ask_rest(Arc::clone(&node), path.clone(), from, last, prior)),
                };
            }
            Event::Rest(rest) => {
                let Upstream::Resuming { lost_at, .. } = &upstream else {
                    unreachable!("only a resuming upstream answers")
                };
                let gap_ns = lost_at.elapsed().as_nanos() as u64;
                match rest {
                    Some(response) => {
                        // A stream resumed before its first byte has no
                        // slack to count (its schedule starts with the rest).
                        let slack_ns = relay.slack_ns(now_ns());
                        stats.streams_resumed.fetch_add(1, Relaxed);
                        note_gap_and_slack(
                            (&stats.resume_gap_ns_max, gap_ns),
                            (&stats.resume_slack_ns_min, slack_ns),
                        );
                        tracing::info!(
                            path,
                            gap_ms = gap_ns / 1_000_000,
                            slack_ms = slack_ns.map(|s| s / 1_000_000),
                            "stream resumed"
                        );
                        stats.upstreams_reading.fetch_add(1, Relaxed);
                        rest_awaited_since = Some(*lost_at);
                        schedule = schedule_of(&response);
                        upstream = Upstream::Reading(response);
                    }
                    None => {
                        stats.streams_abandoned.fetch_add(1, Relaxed);
                        tracing::warn!(
                            path,
                            gap_ms = gap_ns / 1_000_000,
                            "no manager resumed a stream"
                        );
                        abandoned = true;
                        upstream = Upstream::Ended;
                    }
                }
            }
        }
        let late_before = relay.late_rounds();
        let mut release = relay.release(now_ns());
        stats
            .late_rounds
            .fetch_add((relay.late_rounds() - late_before) as u64, Relaxed);
        while release > 0 {
            let mut bytes = held.pop_front().expect("released bytes are held");
            if bytes.len() as u64 > release {
                held.push_front(bytes.split_off(release as usize));
            }
            release -= bytes.len() as u64;
            held_bytes -= bytes.len() as u64;
            stats.buffered_bytes.fetch_sub(bytes.len() as u64, Relaxed);
            stats.bytes_released.fetch_add(bytes.len() as u64, Relaxed);
            if client.send(Ok(bytes)).await.is_err() {
                break;
            }
        }
        if relay.is_done() {
            break;
        }
        if abandoned {
            // What arrived is released on time; then the body ends short,
            // which the client sees as a broken stream.
            if relay.released_bytes() == relay.received_bytes() {
                let _ = client
                    .send(Err(std::io::Error::other(
                        "the stream's manager was lost and no manager resumed it",
                    )))
                    .await;
                break;
            }
        }
    }
    stats.buffered_bytes.fetch_sub(held_bytes, Relaxed);
    stats.streams_active.fetch_sub(1, Relaxed);
    if matches!(upstream, Upstream::Reading(_)) {
        stats.upstreams_reading.fetch_sub(1, Relaxed);
    }
}

/// Where the manager that answered reads the stream, and when the answer
/// came (`x-rondo-schedule`), if it said.
fn schedule_of(response: &reqwest::Response) -> Option<(PriorSchedule, Instant)> {
    let value = response
        .headers()
        .get(rondo_server::config::SCHEDULE_HEADER)?
        .to_str()
        .ok()?;
    Some((
        rondo_server::config::parse_schedule(value).ok()?,
        Instant::now(),
    ))
}

/// Asks the managers for bytes `from..=last` of `path` until one sends
/// them (206 with that range), or `resume_timeout` passes. With the lost
/// manager's schedule (`prior`) the new one places the stream on its old
/// diagonal.
async fn ask_rest(
    node: Arc<InterfaceNode>,
    path: String,
    from: u64,
    last: u64,
    prior: Option<PriorSchedule>,
) -> Option<reqwest::Response> {
    let give_up = Instant::now() + node.config.resume_timeout;
    let mut headers = HeaderMap::new();
    headers.insert(
        header::RANGE,
        HeaderValue::from_str(&format!("bytes={from}-{last}")).expect("ASCII"),
    );
    // A manager that just took over admits these before new streams.
    let resume = prior.map_or("1".to_string(), |p| {
        rondo_server::config::format_schedule(&p)
    });
    headers.insert(
        rondo_server::config::RESUME_HEADER,
        HeaderValue::from_str(&resume).expect("ASCII"),
    );
    while Instant::now() < give_up {
        match node.forward(&Method::GET, &path, &headers, None).await {
            Ok(response)
                if response.status() == StatusCode::PARTIAL_CONTENT
                    && response
                        .headers()
                        .get(header::CONTENT_RANGE)
                        .and_then(|v| v.to_str().ok())
                        .and_then(parse_content_range)
                        == Some((from, last - from + 1)) =>
            {
                return Some(response);
            }
            Ok(response) if response.status() == StatusCode::SERVICE_UNAVAILABLE => {}
            Ok(response) => {
                tracing::warn!(path, status = %response.status(), "a manager refused a stream's rest");
            }
            Err(e) => tracing::debug!(path, "no manager for a stream's rest yet: {e}"),
        }
        tokio::time::sleep(RESUME_RETRY).await;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `rondo_interface_*` family docs/cluster.md names is one the
    /// node's `/interface/metrics` exports (the server's own docs test
    /// leaves these to this one).
    #[test]
    fn every_interface_metric_the_docs_name_is_exported() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let text = runtime.block_on(async {
            let node = InterfaceNode::new(InterfaceConfig {
                node_id: "i".into(),
                managers: Managers::Listed(vec!["http://127.0.0.1:9".into()]),
                hold_ns: 0,
                resume_timeout: Duration::from_secs(1),
                url: "http://127.0.0.1:8090".into(),
                local: None,
                memory_prefix_ns: 0,
                buffer_total_bytes: None,
            })
            .await
            .unwrap();
            let response = interface_metrics(State(node)).await;
            let body = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            String::from_utf8(body.to_vec()).unwrap()
        });
        let docs = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/cluster.md"),
        )
        .unwrap();
        let mut named = 0;
        for (at, _) in docs.match_indices("rondo_interface_") {
            let name: String = docs[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            named += 1;
            assert!(
                text.contains(&format!("\n{name} ")),
                "docs/cluster.md names {name}, which /interface/metrics does not export:\n{text}"
            );
        }
        assert!(
            named >= 1,
            "the docs name no interface metric: the scan is broken"
        );
    }

    #[test]
    fn content_ranges_parse_to_first_and_length() {
        assert_eq!(parse_content_range("bytes 0-99/200"), Some((0, 100)));
        assert_eq!(parse_content_range("bytes 150-199/200"), Some((150, 50)));
        for bad in ["bytes */200", "bytes 9-3/200", "items 0-1/2", "bytes 0-x/2"] {
            assert_eq!(parse_content_range(bad), None, "{bad}");
        }
    }

    #[test]
    fn hop_by_hop_headers_stay_on_their_connection() {
        assert!(is_hop_by_hop(&header::CONNECTION));
        assert!(is_hop_by_hop(&header::TRANSFER_ENCODING));
        assert!(!is_hop_by_hop(&header::RANGE));
        assert!(!is_hop_by_hop(&header::HOST));
    }
}
