//! HTTP delivery and the control API (axum).
//!
//! | route | what |
//! |---|---|
//! | `GET /` | the player page |
//! | `GET /api` | this table as JSON |
//! | `GET /api/titles`, `GET /api/titles/{id}` | titles: id, name, duration, stream URL, … |
//! | `GET /api/titles/{id}/schedule` | the title's per-round client bytes |
//! | `GET /api/metrics` | the server's counters as JSON |
//! | `GET`/`HEAD /stream/{id}[.mp4\|.ts]` | the title, paced by its schedule; single byte ranges (206); `?t=SECONDS` from the keyframe at or before t (MP4: a rewritten header first; MPEG-TS) |
//! | `POST /api/admin/titles?name=NAME` | ingest the request body (token) |
//! | `DELETE /api/admin/titles/{id}` | delete a title (token) |
//!
//! A stream response is server push: admitted by the core from the round
//! holding its first byte, then one round of data per round (see
//! `session`). A request that cannot be admitted within the look-ahead gets
//! 503 with `Retry-After` and a JSON reason. Every error is JSON
//! `{"error": "..."}` with a status that says what went wrong.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use futures_util::StreamExt;
use rondo_media::container::MPEG_TS_CONTENT_TYPE;
use rondo_model::reservation::Rejection;
use rondo_model::units::{NS_PER_S, TitleId};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::auth::bearer_matches;
use crate::ingest::{IngestError, ingest_file_as};
use crate::listener::ConnectionHandle;
use crate::session::{StreamRequest, admit};
use crate::state::Shared;
use crate::titles::{LoadedTitle, TimeSeek, TimeSeekError, TimeStart, title_json};

/// The player page, served at `/`.
const PLAYER_HTML: &str = include_str!("player.html");

/// The router of a running server.
pub fn router(shared: Arc<Shared>) -> Router {
    let admin = Router::new()
        .route(
            "/api/admin/titles",
            post(upload).layer(DefaultBodyLimit::disable()),
        )
        .route(
            "/api/admin/titles/{id}",
            axum::routing::delete(delete_title),
        )
        .merge(crate::ops::admin_routes())
        .merge(crate::tier_http::admin_routes())
        .route_layer(axum::middleware::from_fn_with_state(
            Arc::clone(&shared),
            require_token,
        ));
    Router::new()
        .route("/", get(player_page))
        .route("/api", get(api_index))
        .route("/api/titles", get(list_titles))
        .route("/api/titles/{id}", get(one_title))
        .route("/api/titles/{id}/schedule", get(schedule))
        .route("/api/metrics", get(metrics))
        .route(crate::ingest::handoff::SERVER_ID_PATH, get(server_id))
        .route("/stream/{file}", get(stream))
        .merge(admin)
        .merge(crate::ops::public_routes())
        .merge(crate::observe::public_routes())
        .merge(crate::tier_http::public_routes())
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&shared),
            limit_body,
        ))
        .with_state(shared)
}

/// Bounds every request's body: uploads by `upload_bytes_max`, every other
/// route by `request_body_bytes_max`. A declared length beyond the bound is
/// refused before a byte is read (413); a chunked body is cut at the bound.
async fn limit_body(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let is_upload = request.method() == Method::POST && request.uri().path() == "/api/admin/titles";
    let (limit_bytes, flag) = if is_upload {
        (shared.config.upload_bytes_max, "--upload-bytes-max")
    } else {
        (
            shared.config.request_body_bytes_max as u64,
            "--request-body-bytes-max",
        )
    };
    if limit_bytes == 0 {
        return next.run(request).await;
    }
    let declared_bytes = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(declared_bytes) = declared_bytes
        && declared_bytes > limit_bytes
    {
        let mut e = ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the request body ({declared_bytes} bytes) exceeds this server's limit of \
                 {limit_bytes} bytes for {} {} ({flag})",
                request.method(),
                request.uri().path()
            ),
        );
        e.headers
            .push((header::CONNECTION, HeaderValue::from_static("close")));
        return e.into_response();
    }
    let (parts, body) = request.into_parts();
    let limited = http_body_util::Limited::new(body, limit_bytes as usize);
    next.run(Request::from_parts(parts, Body::new(limited)))
        .await
}

/// An error answer: status and JSON `{"error": message, ...}`.
pub struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) body: Value,
    pub(crate) headers: Vec<(header::HeaderName, HeaderValue)>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: json!({ "error": message.into() }),
            headers: Vec::new(),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body)).into_response();
        for (name, value) in self.headers {
            response.headers_mut().insert(name, value);
        }
        response
    }
}

async fn not_found(method: Method, uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!(
        "no such endpoint: {method} {}; see GET /api for the endpoints",
        uri.path()
    ))
}

async fn player_page() -> Html<&'static str> {
    Html(PLAYER_HTML)
}

async fn api_index() -> axum::Json<Value> {
    axum::Json(json!({
        "endpoints": [
            {"method": "GET", "path": "/api/titles", "what": "titles with their stream URLs"},
            {"method": "GET", "path": "/api/titles/{id}", "what": "one title"},
            {"method": "GET", "path": "/api/titles/{id}/schedule", "what": "per-round client bytes"},
            {"method": "GET", "path": "/api/metrics", "what": "admissions, deadline misses, bytes sent, per-disk time"},
            {"method": "GET, HEAD", "path": "/stream/{id}", "what": "the title, paced by its schedule; Range (one range); ?t=SECONDS starts at the video keyframe at or before t (MP4: a rewritten header, then the stored bytes from the first kept sample; MPEG-TS: from the keyframe's PAT/PMT)"},
            {"method": "POST", "path": "/api/admin/titles?name=NAME", "what": "ingest the request body as a title (Authorization: Bearer <token>); with &tier=TIER it is stored on that tier and staged onto the array when asked for"},
            {"method": "DELETE", "path": "/api/admin/titles/{id}", "what": "delete a title (Authorization: Bearer <token>)"},
            {"method": "GET", "path": "/api/disks", "what": "each disk's state and errors, and the rebuild's progress"},
            {"method": "GET", "path": "/api/cluster", "what": "a cluster's manager (rondo serve --etcd): its storage nodes with their disks, and the managers (leader and standbys), as last seen in etcd; 404 elsewhere"},
            {"method": "GET", "path": "/api/admin/disks", "what": "as /api/disks, with each disk's device file (Authorization: Bearer <token>)"},
            {"method": "POST", "path": "/api/admin/disks/{k}/fail", "what": "mark disk k failed (Authorization: Bearer <token>)"},
            {"method": "POST", "path": "/api/admin/disks/{k}/replace", "what": "map a new device {\"path\": ...} to failed disk k (Authorization: Bearer <token>)"},
            {"method": "POST", "path": "/api/admin/disks/{k}/restore", "what": "rebuild disk k from the replicas in unreserved disk time (Authorization: Bearer <token>)"},
            {"method": "GET", "path": "/metrics", "what": "Prometheus text"},
            {"method": "GET", "path": "/dashboard", "what": "live charts of reserved vs measured disk time, streams, admissions, failures"},
            {"method": "GET", "path": "/api/events", "what": "server-sent events: recent history, then one event per round"},
            {"method": "GET", "path": "/api/history", "what": "the recent per-round history as JSON"},
            {"method": "GET, HEAD", "path": "/tier/{name}", "what": "a title whose home is a tier: redirects to its stream once staged onto the array; until then 503 with Retry-After, the predicted staging delay (staging starts at the first request)"},
            {"method": "GET", "path": "/api/tiers", "what": "the tiers, their queues and the titles being staged"},
            {"method": "POST", "path": "/api/admin/tier-titles/{name}/pin", "what": "keep a tier title on the array once staged (…/unpin to let it be evicted) (Authorization: Bearer <token>)"},
        ]
    }))
}

/// `http://host` as the client addressed us (for absolute URLs).
pub(crate) fn base_url(shared: &Shared, headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()));
    match host {
        Some(host) => format!("http://{host}"),
        None => shared.base_url.clone(),
    }
}

/// The file extension a title's stream URL carries.
pub(crate) fn extension(title: &LoadedTitle) -> &'static str {
    if title.record.content_type == MPEG_TS_CONTENT_TYPE {
        "ts"
    } else {
        "mp4"
    }
}

pub(crate) fn stream_path(title: &LoadedTitle) -> String {
    format!("/stream/{}.{}", title.id().0, extension(title))
}

/// A title as `GET /api/titles` lists it.
fn title_entry(shared: &Shared, title: &LoadedTitle, base: &str) -> Value {
    let record = &title.record;
    let id = record.id.0;
    // Rounds with no good replica: streams are refused from there on.
    let lost_rounds: Vec<u32> = shared
        .lost_rounds()
        .get(&record.id)
        .map(|rounds| rounds.iter().map(|r| r.0).collect())
        .unwrap_or_default();
    let playable_bytes = lost_rounds.first().map_or(record.size_bytes, |&r| {
        title.round_byte_range(r as usize).start
    });
    json!({
        "id": id,
        "name": record.name,
        "duration_seconds": record.duration_ns as f64 / NS_PER_S as f64,
        "stream_url": format!("{base}{}", stream_path(title)),
        "schedule_url": format!("{base}/api/titles/{id}/schedule"),
        "content_type": record.content_type,
        "video_codec": title.mp4_codecs.as_ref().and_then(|c| c.video.clone()),
        "audio_codec": title.mp4_codecs.as_ref().and_then(|c| c.audio.clone()),
        "codecs": title.mp4_codecs.as_ref().map(|c| c.parameter()),
        "container_kind": record.container_kind,
        "size_bytes": record.size_bytes,
        "header_bytes": record.header_bytes,
        "rounds": title.rounds(),
        "round_duration_seconds": record.round_duration_ns as f64 / NS_PER_S as f64,
        "source_file_name": record.source_file_name,
        "lost_rounds": lost_rounds,
        "playable_bytes": playable_bytes,
    })
}

async fn list_titles(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> axum::Json<Value> {
    let base = base_url(&shared, &headers);
    let mut titles: Vec<Value> = shared
        .titles()
        .iter()
        .map(|t| title_entry(&shared, t, &base))
        .collect();
    // Titles whose home is a tier: their stable URL, and those not on the
    // array now.
    crate::tier_http::add_tier_entries(&shared, &base, &mut titles).await;
    axum::Json(Value::Array(titles))
}

/// Parses a title id from a path segment.
fn parse_id(text: &str) -> Result<TitleId, ApiError> {
    text.parse::<u64>().map(TitleId).map_err(|_| {
        ApiError::bad_request(format!(
            "{text:?} is not a title id: ids are non-negative integers (see GET /api/titles)"
        ))
    })
}

fn find_title(shared: &Shared, id: TitleId) -> Result<Arc<LoadedTitle>, ApiError> {
    shared.title(id).ok_or_else(|| {
        ApiError::not_found(format!(
            "no title with id {}; GET /api/titles lists them",
            id.0
        ))
    })
}

async fn one_title(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<axum::Json<Value>, ApiError> {
    let title = find_title(&shared, parse_id(&id)?)?;
    Ok(axum::Json(title_entry(
        &shared,
        &title,
        &base_url(&shared, &headers),
    )))
}

async fn schedule(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let title = find_title(&shared, parse_id(&id)?)?;
    let record = &title.record;
    Ok(axum::Json(json!({
        "id": record.id.0,
        "round_duration_ns": record.round_duration_ns,
        "header_bytes": record.header_bytes,
        "size_bytes": record.size_bytes,
        "client_bytes": record.client_bytes,
    })))
}

async fn metrics(State(shared): State<Arc<Shared>>) -> axum::Json<Value> {
    let active = shared.active_streams();
    axum::Json(serde_json::to_value(shared.metrics.snapshot(active)).expect("serialisable"))
}

/// What part of a title a request gets.
struct Selection {
    status: StatusCode,
    first_byte: u64,
    /// Stored bytes sent from `first_byte`.
    length_bytes: u64,
    content_range: Option<String>,
    /// Bytes sent first, from memory (an MP4 time seek's header).
    prefix: Bytes,
    /// A time seek's start: the keyframe's presentation time.
    start_time_ns: Option<u64>,
}

/// `x-rondo-defer-ms` ([`crate::config::DEFER_HEADER`]) as whole rounds
/// (rounded up): how long the stream's first read waits at least.
fn deferred_rounds(shared: &Shared, headers: &HeaderMap) -> Result<u64, ApiError> {
    let Some(value) = headers.get(crate::config::DEFER_HEADER) else {
        return Ok(0);
    };
    let ms: u64 = value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "{} must be a whole number of milliseconds",
                crate::config::DEFER_HEADER
            ))
        })?;
    if ms > crate::config::DEFER_MS_MAX {
        return Err(ApiError::bad_request(format!(
            "{} {ms} is over {} ms",
            crate::config::DEFER_HEADER,
            crate::config::DEFER_MS_MAX
        )));
    }
    let round_ms = (shared.array.round_duration_ns / 1_000_000).max(1);
    Ok(ms.div_ceil(round_ms))
}

/// What LDSS/LMSS make of a stream request ([`route_local_copies`]).
enum CopyDecision {
    /// Serve it; once admitted, a new viewer through I node `from` is
    /// logged ([`viewer_admitted`]).
    Serve { from: Option<u32>, new_viewer: bool },
    /// Send the client to the title's dedicated interface node, or (an
    /// exclusive dedicated node asked for another title) to a node
    /// dedicated to none: its URL.
    Redirect(String),
}

/// LDSS/LMSS on a cluster's manager (seed 001 §6.4; the decisions are
/// `rondo_model::cluster::LocalCopies`'), before admission: a request for a
/// dedicated title through another node is redirected to it, and under
/// `exclusive` a dedicated node's request for another title is redirected
/// away. Resumed streams (an interface node asking for the rest) and HEAD
/// requests are served as they are.
fn route_local_copies(
    shared: &Shared,
    title: TitleId,
    method: &Method,
    headers: &HeaderMap,
    selection: &Selection,
    peer: SocketAddr,
) -> CopyDecision {
    let serve = CopyDecision::Serve {
        from: None,
        new_viewer: false,
    };
    let Some(copies) = &shared.local_copies else {
        return serve;
    };
    if method != Method::GET || headers.contains_key(crate::config::RESUME_HEADER) {
        return serve;
    }
    // A node is believed only at its own address, and (in a cluster
    // through etcd) only as an interface node registered there: a client
    // that names a URL is not made a title's dedicated node, nor a node
    // other viewers are sent to.
    let from_url = headers
        .get(crate::config::INTERFACE_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(|url| url.trim_end_matches('/').to_string())
        .filter(|url| url_host_is(url, peer.ip()) && registered_interface(shared, url));
    let can_copy = headers.contains_key(crate::config::LOCAL_COPIES_HEADER);
    let new_viewer = selection.first_byte == 0 && selection.start_time_ns.is_none();
    // The lock covers the node table and the decision only.
    let copies = &mut *copies.lock().expect("not poisoned");
    let from = from_url
        .as_deref()
        .map(|url| copies.interface(url, can_copy));
    match copies.route_continuing(title, from) {
        rondo_model::cluster::CopyRoute::Redirect { interface } => {
            CopyDecision::Redirect(copies.interfaces()[interface as usize].clone())
        }
        _ => CopyDecision::Serve { from, new_viewer },
    }
}

/// Logs a new viewer's request (past a takeover's refusal, before
/// admission) in the popularity log.
fn log_viewer_request(shared: &Shared, title: TitleId) {
    if let Some(copies) = &shared.local_copies {
        let now_ns = popularity_now_ns(shared);
        copies
            .lock()
            .expect("not poisoned")
            .log_request(title, now_ns);
    }
}

/// The popularity log's clock: time since the server's round 0.
fn popularity_now_ns(shared: &Shared) -> u64 {
    shared
        .clock
        .boundary(rondo_model::units::Round(0))
        .elapsed()
        .as_nanos() as u64
}

/// After a new viewer's admission: answers the header that
/// tells the interface node it came through to copy the title (`ldss` or
/// `lmss`), when this viewer made the title popular there.
fn viewer_admitted(shared: &Shared, title: TitleId, from: Option<u32>) -> Option<&'static str> {
    let copies = shared.local_copies.as_ref()?;
    let now_ns = popularity_now_ns(shared);
    let (copy, retrieval, url) = {
        let copies = &mut *copies.lock().expect("not poisoned");
        let copy = copies.viewer_admitted(title, from, now_ns);
        let url = from.map(|i| copies.interfaces()[i as usize].clone());
        (copy, copies.retrieval(), url)
    };
    if !copy {
        return None;
    }
    tracing::info!(
        title = title.0,
        interface = url.as_deref().unwrap_or("?"),
        "title popular: dedicated to the interface node that asked (it copies the title)"
    );
    // Under LMSS the node also keeps the title's first seconds in memory.
    Some(match retrieval {
        rondo_model::cluster::Retrieval::Lmss => "lmss",
        _ => "ldss",
    })
}

/// Whether `url` is an interface node's address as registered in the
/// cluster's etcd (the manager's last view of it, refreshed every second);
/// any URL when the manager has no such view (nodes listed by hand).
fn registered_interface(shared: &Shared, url: &str) -> bool {
    let Some(view) = &shared.config.cluster else {
        return true;
    };
    view.0.snapshot()["nodes"].as_array().is_some_and(|nodes| {
        nodes.iter().any(|n| {
            n["role"] == "interface"
                && n["address"].as_str().map(|a| a.trim_end_matches('/')) == Some(url)
        })
    })
}

/// Whether `url` (`http://HOST:PORT...`) names the address `ip`.
fn url_host_is(url: &str, ip: std::net::IpAddr) -> bool {
    url.parse::<axum::http::Uri>()
        .ok()
        .and_then(|uri| uri.host().map(|h| h.trim_matches(['[', ']']).to_string()))
        .and_then(|host| host.parse::<std::net::IpAddr>().ok())
        .is_some_and(|host| host == ip || (host.is_loopback() && ip.is_loopback()))
}

/// Parses `?t=` as non-negative seconds, in ns.
fn parse_time(t: &str) -> Result<u64, ApiError> {
    t.parse()
        .ok()
        .filter(|s: &f64| s.is_finite() && *s >= 0.0)
        .map(|s| (s * NS_PER_S as f64).min(u64::MAX as f64) as u64)
        .ok_or_else(|| {
            ApiError::bad_request(format!("t={t:?} is not a time in seconds (e.g. t=12.5)"))
        })
}

/// The answer to `?t=`: from the keyframe at or before t to the end.
async fn select_time(title: &Arc<LoadedTitle>, t: &str) -> Result<Selection, ApiError> {
    let t_ns = parse_time(t)?;
    // Cutting an MP4 header is CPU work proportional to its size.
    let seek_title = Arc::clone(title);
    let start: TimeStart = tokio::task::spawn_blocking(move || seek_title.start_at_time(t_ns))
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the time seek failed: {e}"),
            )
        })?
        .map_err(|e| match e {
            TimeSeekError::PastEnd { duration_s, .. } => ApiError {
                status: StatusCode::RANGE_NOT_SATISFIABLE,
                body: json!({ "error": e.to_string(), "duration_seconds": duration_s }),
                headers: Vec::new(),
            },
            TimeSeekError::Unsupported { .. } => ApiError::bad_request(e.to_string()),
        })?;
    Ok(Selection {
        status: StatusCode::OK,
        first_byte: start.first_byte,
        length_bytes: title.record.size_bytes - start.first_byte,
        content_range: None,
        prefix: start.prefix,
        start_time_ns: Some(start.start_time_ns),
    })
}

/// Chooses the bytes to send from `Range` or its absence.
fn select(title: &LoadedTitle, headers: &HeaderMap) -> Result<Selection, ApiError> {
    let size = title.record.size_bytes;
    let full = Selection {
        status: StatusCode::OK,
        first_byte: 0,
        length_bytes: size,
        content_range: None,
        prefix: Bytes::new(),
        start_time_ns: None,
    };
    let Some(range) = headers.get(header::RANGE) else {
        return Ok(full);
    };
    let Ok(range) = range.to_str() else {
        return Ok(full);
    };
    match resolve_range(range, size) {
        // A Range header that does not parse is ignored (RFC 9110 §14.2),
        // and several disjoint ranges are served whole, as RFC 9110 allows.
        RangeChoice::Whole => Ok(full),
        RangeChoice::One { first, last } => Ok(Selection {
            status: StatusCode::PARTIAL_CONTENT,
            first_byte: first,
            length_bytes: last - first + 1,
            content_range: Some(format!("bytes {first}-{last}/{size}")),
            prefix: Bytes::new(),
            start_time_ns: None,
        }),
        RangeChoice::Unsatisfiable => {
            let mut e = ApiError::new(
                StatusCode::RANGE_NOT_SATISFIABLE,
                format!(
                    "no range of {range:?} overlaps the title's {size} bytes (bytes 0 to {})",
                    size.saturating_sub(1)
                ),
            );
            e.headers.push((
                header::CONTENT_RANGE,
                HeaderValue::from_str(&format!("bytes */{size}")).expect("ascii"),
            ));
            Err(e)
        }
    }
}

/// What a `Range` header asks of a title of `size` bytes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum RangeChoice {
    /// Send the whole title (200): no usable header, or disjoint ranges.
    Whole,
    /// Send bytes `first..=last` (206).
    One { first: u64, last: u64 },
    /// 416: no range overlaps the title.
    Unsatisfiable,
}

/// Resolves a `Range` header per RFC 9110 §14.1.2: `a-b` is cut at the
/// title's end, `a-` runs to it, `-n` is the last n bytes (the whole title
/// when n is larger); ranges that lie past the end are dropped, and the rest
/// are merged where they overlap or touch. One range left is served (206);
/// several disjoint ones are served whole (200, no multipart); none is 416.
/// A header that does not parse is ignored.
fn resolve_range(header: &str, size: u64) -> RangeChoice {
    let Some(specs) = header.trim().strip_prefix("bytes=") else {
        return RangeChoice::Whole;
    };
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for spec in specs.split(',') {
        let spec = spec.trim();
        let Some((a, b)) = spec.split_once('-') else {
            return RangeChoice::Whole;
        };
        let number = |t: &str| t.trim().parse::<u64>().ok();
        let range = match (a.trim().is_empty(), b.trim().is_empty()) {
            // `-n`: the last n bytes.
            (true, false) => match number(b) {
                Some(0) => None,
                Some(n) => (size > 0).then(|| (size - n.min(size), size - 1)),
                None => return RangeChoice::Whole,
            },
            (false, true) => match number(a) {
                Some(first) => (first < size).then(|| (first, size - 1)),
                None => return RangeChoice::Whole,
            },
            (false, false) => match (number(a), number(b)) {
                (Some(first), Some(last)) if first <= last => {
                    (first < size).then(|| (first, last.min(size - 1)))
                }
                _ => return RangeChoice::Whole,
            },
            (true, true) => return RangeChoice::Whole,
        };
        ranges.extend(range);
    }
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (first, last) in ranges {
        match merged.last_mut() {
            Some(m) if first <= m.1.saturating_add(1) => m.1 = m.1.max(last),
            _ => merged.push((first, last)),
        }
    }
    match merged.as_slice() {
        [] => RangeChoice::Unsatisfiable,
        [(first, last)] => RangeChoice::One {
            first: *first,
            last: *last,
        },
        _ => RangeChoice::Whole,
    }
}

/// Seconds a rejected client should wait: the look-ahead's span, at least 1.
pub fn retry_after_seconds(shared: &Shared) -> u64 {
    let ns = shared.config.lookahead_rounds.max(1) * shared.round_duration_ns();
    ns.div_ceil(NS_PER_S).max(1)
}

fn rejection_kind(rejection: &Rejection) -> &'static str {
    match rejection {
        Rejection::DiskTime { .. } => "disk_time",
        Rejection::Buffer { .. } => "buffer",
        Rejection::Network { .. } => "network",
        Rejection::HostBehind { .. } => "host",
        Rejection::DataUnavailable { .. } => "data_unavailable",
        Rejection::DataLost { .. } => "data_lost",
        Rejection::TooLong { .. } => "too_long",
        Rejection::UnknownTitle(_) => "unknown_title",
        Rejection::PastEnd { .. } => "past_end",
    }
}

fn unavailable(shared: &Shared, reason: &str, detail: String) -> ApiError {
    let retry = retry_after_seconds(shared);
    ApiError {
        status: StatusCode::SERVICE_UNAVAILABLE,
        body: json!({
            "error": format!("the server cannot guarantee this stream now: {detail}"),
            "reason": reason,
            "retry_after_seconds": retry,
        }),
        headers: vec![(header::RETRY_AFTER, HeaderValue::from(retry))],
    }
}

// One argument per axum extractor.
#[allow(clippy::too_many_arguments)]
async fn stream(
    State(shared): State<Arc<Shared>>,
    Path(file): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    connection: Option<axum::Extension<ConnectionHandle>>,
    fast_path: Option<axum::Extension<crate::sink::FastPath>>,
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let (id_text, ext) = match file.split_once('.') {
        Some((id, ext)) => (id, Some(ext)),
        None => (file.as_str(), None),
    };
    let title = find_title(&shared, parse_id(id_text)?)?;
    if let Some(ext) = ext
        && ext != extension(&title)
    {
        return Err(ApiError::not_found(format!(
            "title {} is {}; its stream URL is {}",
            title.id().0,
            title.record.content_type,
            stream_path(&title)
        )));
    }
    // `?t=` takes precedence over Range.
    let selection = match query.get("t") {
        Some(t) => select_time(&title, t).await?,
        None => select(&title, &headers)?,
    };
    let (from_interface, new_viewer) =
        match route_local_copies(&shared, title.id(), &method, &headers, &selection, peer) {
            CopyDecision::Serve { from, new_viewer } => (from, new_viewer),
            CopyDecision::Redirect(base) => {
                let path = uri.path_and_query().map_or("/", |p| p.as_str());
                return Ok(Response::builder()
                    .status(StatusCode::TEMPORARY_REDIRECT)
                    .header(header::LOCATION, format!("{base}{path}"))
                    .header(header::CACHE_CONTROL, "no-store")
                    .body(Body::empty())
                    .expect("valid response"));
            }
        };
    let prefix_bytes = selection.prefix.len() as u64;
    let mut builder = Response::builder()
        .status(selection.status)
        .header(header::CONTENT_TYPE, title.record.content_type.as_str())
        .header(header::ACCEPT_RANGES, "bytes")
        .header(
            header::CONTENT_LENGTH,
            prefix_bytes + selection.length_bytes,
        )
        .header(header::CACHE_CONTROL, "no-store");
    if let Some(range) = &selection.content_range {
        builder = builder.header(header::CONTENT_RANGE, range.as_str());
    }
    if let Some(start_ns) = selection.start_time_ns {
        // Where a time seek landed: the keyframe's time, the in-memory
        // prefix's length and the first stored byte after it.
        builder = builder
            .header(
                "x-rondo-start-seconds",
                format!("{:.6}", start_ns as f64 / 1e9),
            )
            .header("x-rondo-prefix-bytes", prefix_bytes)
            .header("x-rondo-first-byte", selection.first_byte);
    }
    if method == Method::HEAD || selection.length_bytes == 0 {
        return Ok(builder.body(Body::empty()).expect("valid response"));
    }
    if shared.shutting_down.load(Relaxed) {
        return Err(unavailable(
            &shared,
            "shutting_down",
            "the server is shutting down".into(),
        ));
    }
    if let Some(until) = shared.config.takeover_until
        && std::time::Instant::now() < until
        && !headers.contains_key(crate::config::RESUME_HEADER)
    {
        let mut refusal = unavailable(
            &shared,
            "takeover",
            "this manager has just taken over; the streams its predecessor carried resume first"
                .into(),
        );
        // Interface nodes hold such a request and ask again.
        refusal.headers.push((
            header::HeaderName::from_static(crate::config::TAKEOVER_HEADER),
            HeaderValue::from_static("1"),
        ));
        return Err(refusal);
    }
    let prior = resumed_from(&shared, &headers)?;
    if new_viewer {
        log_viewer_request(&shared, title.id());
    }
    let admitted = admit(
        &shared,
        StreamRequest {
            title: Arc::clone(&title),
            first_byte: selection.first_byte,
            length_bytes: selection.length_bytes,
            prefix: selection.prefix,
            peer: peer.to_string(),
            connection: connection.map(|c| c.0),
            prior,
            sink: fast_path.map(|f| f.0.0),
            defer_rounds: deferred_rounds(&shared, &headers)?,
        },
    )
    .await
    .map_err(|rejection| match rejection {
        Some(Rejection::DataLost { round }) => {
            // Waiting does not bring the data back: no Retry-After, and
            // the client is told how much of the title still plays.
            let playable_bytes = title.round_byte_range(round.0 as usize).start;
            tracing::warn!(
                title = title.id().0,
                peer = %peer,
                playback_round = round.0,
                "stream refused: the title's round {round} has no good replica"
            );
            ApiError {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                body: json!({
                    "error": format!(
                        "title {} cannot be played through: {}",
                        title.id().0,
                        Rejection::DataLost { round }
                    ),
                    "reason": "data_lost",
                    "playback_round": round.0,
                    "playable_bytes": playable_bytes,
                }),
                headers: Vec::new(),
            }
        }
        Some(rejection) => {
            tracing::info!(
                title = title.id().0,
                peer = %peer,
                "stream rejected: {rejection}"
            );
            unavailable(&shared, rejection_kind(&rejection), rejection.to_string())
        }
        None => unavailable(
            &shared,
            "shutting_down",
            "the server is shutting down".into(),
        ),
    })?;
    if new_viewer && let Some(copy) = viewer_admitted(&shared, title.id(), from_interface) {
        builder = builder.header(crate::config::COPY_HEADER, copy);
    }
    if let Some(schedule) = &admitted.schedule
        && let Ok(value) = HeaderValue::from_str(&crate::config::format_schedule(schedule))
    {
        builder = builder.header(crate::config::SCHEDULE_HEADER, value);
    }
    // Sent by hyper, or by the listener's send loops (the body is then
    // empty here, and the head says how long the stream is).
    let body = admitted.body.map_or_else(Body::empty, Body::from_stream);
    Ok(builder.body(body).expect("valid response"))
}

/// The lost manager's schedule a resumed stream brings (`x-rondo-resume`
/// with a schedule), for admission to place it on its old diagonal. `None`
/// for a new stream, a bare `x-rondo-resume: 1`, and a schedule of this
/// server's own (a stream resumed here keeps no diagonal of a round that
/// is gone). A malformed one is refused: 400 naming what is wrong.
fn resumed_from(
    shared: &Shared,
    headers: &HeaderMap,
) -> Result<Option<rondo_model::array::PriorSchedule>, ApiError> {
    let Some(value) = headers.get(crate::config::RESUME_HEADER) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or_default().trim();
    if text == "1" {
        return Ok(None);
    }
    let prior = crate::config::parse_schedule(text).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("{}: {e}", crate::config::RESUME_HEADER),
        )
    })?;
    Ok((prior.schedule_id != shared.schedule_id()).then_some(prior))
}

/// Most body bytes read (and dropped) from a refused request.
const DRAIN_BYTES: usize = 16 * 1024 * 1024;
/// Longest time spent reading them.
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads and drops a refused request's body, up to [`DRAIN_BYTES`] and
/// [`DRAIN_TIME`]: answering while the client is still sending makes the
/// kernel reset the connection, and the client would see a reset instead of
/// the answer.
async fn drain(body: Body) {
    let mut data = body.into_data_stream();
    let _ = tokio::time::timeout(DRAIN_TIME, async {
        let mut drained_bytes = 0usize;
        while let Some(Ok(chunk)) = data.next().await {
            drained_bytes += chunk.len();
            if drained_bytes > DRAIN_BYTES {
                break;
            }
        }
    })
    .await;
}

/// Refuses control requests without the right bearer token.
async fn require_token(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if bearer_matches(presented, &shared.token) {
        return next.run(request).await;
    }
    drain(request.into_body()).await;
    let mut e = ApiError::new(
        StatusCode::UNAUTHORIZED,
        format!(
            "control endpoints need 'Authorization: Bearer <token>'; the token is the file {} \
             in the server's data directory",
            crate::auth::TOKEN_FILE
        ),
    );
    e.headers
        .push((header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer")));
    e.into_response()
}

/// Whether a body error is [`limit_body`]'s cut.
fn is_length_limit(error: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// Removes the spooled upload whatever happens.
struct SpoolFile(PathBuf);

impl Drop for SpoolFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Prefix of spooled uploads in the data directory (stale ones are removed at start).
pub const UPLOAD_SPOOL_PREFIX: &str = ".upload-";

static UPLOAD_COUNTER: AtomicU64 = AtomicU64::new(0);

fn ingest_status(error: &IngestError) -> StatusCode {
    match error {
        IngestError::InvalidName { .. } => StatusCode::BAD_REQUEST,
        IngestError::NameTaken { .. } => StatusCode::CONFLICT,
        IngestError::DiskFull { .. } => StatusCode::INSUFFICIENT_STORAGE,
        IngestError::StrokeBusy { .. } => StatusCode::SERVICE_UNAVAILABLE,
        IngestError::Media { .. }
        | IngestError::RoundTooLarge { .. }
        | IngestError::Schedule { .. }
        | IngestError::StreamLength { .. } => StatusCode::UNPROCESSABLE_ENTITY,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

async fn upload(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let Some(name) = query.get("name").filter(|n| !n.is_empty()).cloned() else {
        drain(body).await;
        return Err(ApiError::bad_request(
            "POST /api/admin/titles needs ?name=NAME (the title's name)",
        ));
    };
    let source_file_name = query.get("file").cloned().unwrap_or_else(|| name.clone());
    let spool = SpoolFile(shared.data_dir.join(format!(
        "{UPLOAD_SPOOL_PREFIX}{}-{}.tmp",
        std::process::id(),
        UPLOAD_COUNTER.fetch_add(1, Relaxed)
    )));
    let write_error = |e: std::io::Error| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("spooling the upload to {}: {e}", spool.0.display()),
        )
    };
    let mut file = tokio::fs::File::create(&spool.0)
        .await
        .map_err(write_error)?;
    let mut received_bytes = 0u64;
    let mut data = body.into_data_stream();
    while let Some(chunk) = data.next().await {
        let chunk = chunk.map_err(|e| {
            if is_length_limit(&e) {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!(
                        "the upload exceeds this server's limit of {} bytes (--upload-bytes-max)",
                        shared.config.upload_bytes_max
                    ),
                )
            } else {
                ApiError::bad_request(format!(
                    "the upload ended early after {received_bytes} bytes: {e}"
                ))
            }
        })?;
        received_bytes += chunk.len() as u64;
        file.write_all(&chunk).await.map_err(write_error)?;
    }
    file.flush().await.map_err(write_error)?;
    drop(file);
    if received_bytes == 0 {
        return Err(ApiError::bad_request(
            "the upload is empty: send the media file as the request body",
        ));
    }
    tracing::info!(name = %name, bytes = received_bytes, "upload received; ingesting");
    let created_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let task_shared = Arc::clone(&shared);
    let path = spool.0.clone();
    if let Some(tier_name) = query.get("tier").cloned() {
        // The title's home is a tier: store it there, not on the array.
        let result = tokio::task::spawn_blocking(move || {
            let shared = task_shared;
            let tier = shared
                .staging
                .tier(&tier_name)
                .map_err(ApiError::bad_request)?;
            crate::ingest::ingest_to_tier(
                &shared.store,
                tier.as_ref(),
                &tier_name,
                &path,
                &source_file_name,
                Some(&name),
                created_unix_ns,
            )
            .map_err(|e| ApiError::new(ingest_status(&e), e.to_string()))
        })
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
        drop(spool);
        let record =
            result.inspect_err(|e| tracing::warn!("upload refused: {}", e.body["error"]))?;
        tracing::info!(name = %record.name, tier = %record.tier, "title stored on its tier");
        let mut body = serde_json::to_value(&record).unwrap_or_default();
        body["stream_url"] = json!(format!(
            "{}{}",
            base_url(&shared, &headers),
            crate::tier_http::tier_path(&record.name)
        ));
        return Ok((StatusCode::CREATED, axum::Json(body)).into_response());
    }
    let result = tokio::task::spawn_blocking(move || {
        let shared = task_shared;
        let record = ingest_file_as(
            &shared.store,
            &path,
            &source_file_name,
            Some(&name),
            created_unix_ns,
            shared.gate.as_ref(),
            &|_, _| {},
        )
        .map_err(|e| ApiError::new(ingest_status(&e), e.to_string()))?;
        shared
            .load_and_add_title(record.id)
            .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
    })
    .await
    .map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("ingest task failed: {e}"),
        )
    })?;
    drop(spool);
    let title = result.inspect_err(|e| tracing::warn!("upload refused: {}", e.body["error"]))?;
    tracing::info!(
        id = title.id().0,
        name = %title.record.name,
        rounds = title.rounds(),
        "title ingested and admitted for streaming"
    );
    let mut body = title_json(&title.record);
    let entry = title_entry(&shared, &title, &base_url(&shared, &headers));
    body["stream_url"] = entry["stream_url"].clone();
    body["duration_seconds"] = entry["duration_seconds"].clone();
    Ok((StatusCode::CREATED, axum::Json(body)).into_response())
}

async fn delete_title(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    use crate::state::RemoveTitleError;
    let id = parse_id(&id)?;
    let task_shared = Arc::clone(&shared);
    tokio::task::spawn_blocking(move || task_shared.remove_title_blocking(id))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| {
            let status = match e {
                RemoveTitleError::NotFound(_) => StatusCode::NOT_FOUND,
                RemoveTitleError::Streaming { .. } => StatusCode::CONFLICT,
                RemoveTitleError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
                RemoveTitleError::Store { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            };
            ApiError::new(status, e.to_string())
        })?;
    tracing::info!(id = id.0, "title deleted");
    Ok(axum::Json(json!({ "deleted": id.0 })))
}

/// `GET /api/server-id`: which server this is (the data directory's array
/// id and this start's instance id), for `rondo ingest` to check before it
/// sends the token.
async fn server_id(
    State(shared): State<Arc<Shared>>,
) -> axum::Json<crate::ingest::handoff::ServerId> {
    axum::Json(crate::ingest::handoff::ServerId {
        array_id: shared.array.array_id.to_string(),
        instance_id: shared.instance_id.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::{RangeChoice, parse_time, resolve_range, url_host_is};

    /// An interface node is believed only at its own address: the manager
    /// never dedicates a title to a URL its requester does not sit at.
    #[test]
    fn an_interface_url_counts_only_from_its_own_host() {
        let ip = |t: &str| t.parse::<std::net::IpAddr>().unwrap();
        assert!(url_host_is("http://10.0.0.5:8090", ip("10.0.0.5")));
        assert!(!url_host_is("http://10.0.0.6:8090", ip("10.0.0.5")));
        assert!(!url_host_is("http://evil.example:80", ip("10.0.0.5")));
        assert!(url_host_is("http://127.0.0.1:8090", ip("127.0.0.2")));
        assert!(url_host_is("http://[::1]:8090", ip("::1")));
        assert!(!url_host_is("not a url", ip("10.0.0.5")));
    }

    #[test]
    fn ranges_resolve_as_rfc_9110_says() {
        let one = |first, last| RangeChoice::One { first, last };
        assert_eq!(resolve_range("bytes=0-99", 1000), one(0, 99));
        assert_eq!(resolve_range("bytes=900-", 1000), one(900, 999));
        assert_eq!(resolve_range("bytes=900-5000", 1000), one(900, 999));
        assert_eq!(resolve_range("bytes=-100", 1000), one(900, 999));
        // A suffix longer than the title is the whole title (206).
        assert_eq!(resolve_range("bytes=-5000", 1000), one(0, 999));
        // Overlapping or touching ranges merge into one.
        assert_eq!(resolve_range("bytes=0-499,200-999", 1000), one(0, 999));
        assert_eq!(resolve_range("bytes=0-99, 100-199", 1000), one(0, 199));
        assert_eq!(
            resolve_range("bytes=500-600,0-10,5-20", 1000),
            RangeChoice::Whole
        );
        // A range past the end is dropped; none left is unsatisfiable.
        assert_eq!(resolve_range("bytes=0-9,2000-3000", 1000), one(0, 9));
        assert_eq!(
            resolve_range("bytes=1000-", 1000),
            RangeChoice::Unsatisfiable
        );
        assert_eq!(resolve_range("bytes=-0", 1000), RangeChoice::Unsatisfiable);
        assert_eq!(resolve_range("bytes=-10", 0), RangeChoice::Unsatisfiable);
        // Not understood: ignored.
        assert_eq!(resolve_range("bytes=9-1", 1000), RangeChoice::Whole);
        assert_eq!(resolve_range("items=0-1", 1000), RangeChoice::Whole);
        assert_eq!(resolve_range("bytes=a-b", 1000), RangeChoice::Whole);
    }

    #[test]
    fn fuzz_range_headers_and_time_seeks() {
        let corpus: Vec<Vec<u8>> = [
            "bytes=0-99",
            "bytes=-500",
            "bytes=100-",
            "bytes=0-0,5-9,3-6",
            "bytes= 1 - 2 , -3",
            "bytes=18446744073709551615-",
            "t=12.5",
            "1e308",
            "-0",
            "NaN",
        ]
        .iter()
        // A first byte (the size) before each header.
        .map(|s| [b"x".as_slice(), s.as_bytes()].concat())
        .collect();
        let regressions =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz-regressions/range");
        rondo_testkit::fuzz::fuzz(
            "range",
            "cargo test -p rondo-server --lib fuzz_range_headers_and_time_seeks",
            corpus,
            &regressions,
            256,
            |input| {
                // The first byte picks the title's size, the rest is the header.
                let size = match input.first() {
                    Some(b) => u64::from(*b) * 37,
                    None => 0,
                };
                let header = String::from_utf8_lossy(input.get(1..).unwrap_or_default());
                match resolve_range(&header, size) {
                    RangeChoice::One { first, last } => {
                        assert!(
                            first <= last && last < size,
                            "{header:?} of {size}: {first}-{last}"
                        )
                    }
                    RangeChoice::Whole | RangeChoice::Unsatisfiable => {}
                }
                // Any text: a time in ns or a clear error, never a panic.
                let _ = parse_time(&String::from_utf8_lossy(input));
            },
        );
    }
}
