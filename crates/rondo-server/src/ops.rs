//! Operations on a running server: disk failure, replacement and rebuild.
//!
//! A disk fails by an operator's `POST /api/admin/disks/{k}/fail` (or
//! automatically, when read errors pass `ArrayHealth`'s threshold). The core
//! then plans the disk's reads on the backups from the next round
//! (`Reservations::fail_disk`); streams whose data has no working replica
//! left (a second failure) are stopped with a log line and counted in
//! `streams_aborted`. `POST /api/admin/disks/{k}/replace` maps a new device
//! to a failed disk (`Store::replace_device`, through this process, which
//! holds the store's lock), and `POST /api/admin/disks/{k}/restore` rebuilds
//! it from the other replicas: each round the round driver asks the core
//! which copies fit in the disk time admitted streams left unreserved
//! (`RebuildQueue::next_round`, reads charged with the read bound, writes
//! with the write bound), adds their reads and writes to that round's disk
//! batches (so the disk models serve them with the stream reads) and hands
//! them to the copier thread ([`rebuild`]), which verifies every extent
//! against the catalog's checksum before writing it. When the last copy is written and synced, the
//! disk serves again. `GET /api/disks` shows each disk's state, errors and
//! the rebuild's progress with an estimate of the time left.

pub mod rebuild;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use axum::Router;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rondo_model::health::{ArrayHealth, DiskState, HealthPolicy};
use rondo_model::rebuild::{RebuildQueue, rebuild_tasks};
use rondo_model::units::{DiskIndex, StreamId};
use rondo_store::Device;
use serde::Deserialize;
use serde_json::{Value, json};

pub use rebuild::{CopierJob, Rebuild, RebuildRound, RebuildSummary, rebuild_round, spawn_copier};

use crate::session::end_stream;
use crate::state::{Core, Shared};

/// Disk health, pending device replacements and the rebuild; kept in the
/// core (one lock with the reservations they change).
pub struct OpsState {
    pub health: ArrayHealth,
    /// Replacement devices the driver has not handed to their I/O thread yet.
    pub device_swaps: Vec<Option<Arc<Device>>>,
    /// A replacement is being prepared for this disk (no restore meanwhile).
    pub replacing: Vec<bool>,
    pub rebuild: Option<Rebuild>,
    /// How the last rebuild ended.
    pub last_rebuild: Option<RebuildSummary>,
}

impl OpsState {
    pub fn new(disks: u32) -> OpsState {
        OpsState {
            health: ArrayHealth::new(disks, HealthPolicy::default()),
            device_swaps: vec![None; disks as usize],
            replacing: vec![false; disks as usize],
            rebuild: None,
            last_rebuild: None,
        }
    }
}

/// `DiskMetrics.state`'s code for a disk state.
pub fn state_code(state: DiskState) -> u64 {
    match state {
        DiskState::Healthy => 0,
        DiskState::Suspect => 1,
        DiskState::Failed => 2,
        DiskState::Rebuilding => 3,
    }
}

fn state_name(state: DiskState) -> &'static str {
    match state {
        DiskState::Healthy => "healthy",
        DiskState::Suspect => "suspect",
        DiskState::Failed => "failed",
        DiskState::Rebuilding => "rebuilding",
    }
}

/// Copies a disk's health state into its metrics.
pub fn publish_state(shared: &Shared, core: &Core, disk: u32) {
    shared.metrics.disks[disk as usize]
        .state
        .store(state_code(core.ops.health.state(disk)), Relaxed);
}

/// Records `disk` failed in the data directory, so a restart keeps it
/// failed. The failure itself does not wait for the record: if it cannot be
/// written the disk still fails now, and the error is logged.
fn record_failed(shared: &Shared, disk: u32, reason: &str) {
    let since_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    if let Err(e) = shared
        .store
        .record_disk_failed(DiskIndex(disk), reason, since_unix_s)
    {
        tracing::error!(
            disk,
            "cannot record the disk as failed ({e}); after a restart it would serve again"
        );
    }
}

/// At start: the disks recorded failed (before a restart) fail again before
/// any stream is admitted, so no stream is planned on them.
pub fn fail_recorded_disks(shared: &Shared) -> Result<(), rondo_store::StoreError> {
    let states = shared.store.disk_states()?;
    let mut core = shared.core.lock().expect("core lock");
    for disk in states.failed_disks() {
        let reason = &states.failed[&disk.to_string()].reason;
        core.ops.health.fail(disk);
        publish_state(shared, &core, disk);
        let lost = core.reservations.fail_disk(disk);
        debug_assert!(lost.is_empty(), "no stream is admitted before the start");
        tracing::warn!(
            disk,
            "disk {disk} is failed since before this start ({reason}): its reads go to the other \
             replicas until `rondo admin restore-disk {disk}` rebuilds it"
        );
    }
    Ok(())
}

/// Ends a stream the server cannot serve: its response fails, its
/// reservations are released, and the reason is logged.
pub fn abort_stream(shared: &Shared, core: &mut Core, stream: StreamId, reason: &str) {
    if let Some(state) = end_stream(core, stream) {
        state.abort.store(true, Relaxed);
        shared.metrics.streams_aborted.fetch_add(1, Relaxed);
        tracing::error!(
            stream = stream.0,
            title = state.title.id().0,
            peer = %state.peer,
            "stream stopped: {reason}"
        );
    }
}

/// Marks `disk` failed: from the next round the core plans its reads on the
/// other replicas. Streams that lost data (no working replica for a round
/// they still need) are stopped. Returns them; nothing if it had failed
/// already.
pub fn fail_disk(shared: &Shared, core: &mut Core, disk: u32, reason: &str) -> Vec<StreamId> {
    if core.reservations.is_failed(disk) {
        return Vec::new();
    }
    core.ops.health.fail(disk);
    publish_state(shared, core, disk);
    record_failed(shared, disk, reason);
    let lost = core.reservations.fail_disk(disk);
    tracing::error!(
        disk,
        streams_stopped = lost.len(),
        "disk failed ({reason}): its reads go to the other replicas from the next round"
    );
    for &stream in &lost {
        abort_stream(
            shared,
            core,
            stream,
            &format!(
                "disk {disk} failed and a round this stream still needs has no other working \
                 replica (a second failure): its data is gone until the disks are rebuilt"
            ),
        );
    }
    lost
}

/// An error answer of the operations API: status and `{"error": ...}`.
struct OpsError(StatusCode, String);

impl IntoResponse for OpsError {
    fn into_response(self) -> Response {
        (self.0, axum::Json(json!({ "error": self.1 }))).into_response()
    }
}

fn conflict(message: impl Into<String>) -> OpsError {
    OpsError(StatusCode::CONFLICT, message.into())
}

/// Parses and checks a disk number from the path.
fn parse_disk(shared: &Shared, text: &str) -> Result<u32, OpsError> {
    let disks = shared.array.disk_count;
    let disk: u32 = text.parse().map_err(|_| {
        OpsError(
            StatusCode::BAD_REQUEST,
            format!("{text:?} is not a disk number: disks are numbered from 0"),
        )
    })?;
    if disk >= disks {
        return Err(OpsError(
            StatusCode::NOT_FOUND,
            format!(
                "no disk {disk}: this array has {disks} disks, numbered 0 to {}",
                disks - 1
            ),
        ));
    }
    Ok(disk)
}

/// Routes anyone may call.
pub fn public_routes() -> Router<Arc<Shared>> {
    Router::new().route("/api/disks", get(list_disks))
}

/// Routes behind the API token.
pub fn admin_routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/api/admin/disks/{disk}/fail", post(fail))
        .route("/api/admin/disks/{disk}/replace", post(replace))
        .route("/api/admin/disks/{disk}/restore", post(restore))
}

/// `GET /api/disks`: every disk's state, errors and device, and the rebuild.
pub fn disks_json(shared: &Shared) -> Value {
    let core = shared.core.lock().expect("core lock");
    let devices = shared.store.devices();
    let disks: Vec<Value> = (0..shared.array.disk_count)
        .map(|disk| {
            let state = core.ops.health.state(disk);
            json!({
                "disk": disk,
                "state": state_name(state),
                "serving": !core.reservations.is_failed(disk),
                "errors": shared.metrics.disks[disk as usize].errors.load(Relaxed),
                "path": devices[disk as usize].path().display().to_string(),
            })
        })
        .collect();
    let rebuild = core.ops.rebuild.as_ref().map(|r| r.json());
    json!({
        "round": core.next_round.saturating_sub(1),
        "disks": disks,
        "rebuild": rebuild,
        "last_rebuild": core.ops.last_rebuild,
    })
}

async fn list_disks(State(shared): State<Arc<Shared>>) -> axum::Json<Value> {
    axum::Json(disks_json(&shared))
}

async fn fail(
    State(shared): State<Arc<Shared>>,
    Path(disk): Path<String>,
) -> Result<axum::Json<Value>, OpsError> {
    let disk = parse_disk(&shared, &disk)?;
    let mut core = shared.core.lock().expect("core lock");
    if core.reservations.is_failed(disk) {
        let state = state_name(core.ops.health.state(disk));
        return Err(conflict(format!("disk {disk} is {state} already")));
    }
    let stopped = fail_disk(&shared, &mut core, disk, "an operator failed it");
    Ok(axum::Json(json!({
        "disk": disk,
        "state": "failed",
        "streams_stopped": stopped.iter().map(|s| s.0).collect::<Vec<_>>(),
    })))
}

#[derive(Deserialize)]
struct ReplaceBody {
    path: PathBuf,
}

async fn replace(
    State(shared): State<Arc<Shared>>,
    Path(disk): Path<String>,
    body: Result<axum::Json<ReplaceBody>, JsonRejection>,
) -> Result<axum::Json<Value>, OpsError> {
    let disk = parse_disk(&shared, &disk)?;
    let body = body.map_err(|e| {
        OpsError(
            StatusCode::BAD_REQUEST,
            format!("the body must be JSON {{\"path\": \"/path/to/new/device\"}}: {e}"),
        )
    })?;
    {
        let mut core = shared.core.lock().expect("core lock");
        match core.ops.health.state(disk) {
            DiskState::Failed if !core.ops.replacing[disk as usize] => {}
            DiskState::Failed => {
                return Err(conflict(format!("disk {disk} is being replaced already")));
            }
            DiskState::Rebuilding => {
                return Err(conflict(format!(
                    "disk {disk} is being rebuilt; wait for the rebuild to end"
                )));
            }
            state => {
                return Err(conflict(format!(
                    "disk {disk} is {} and serving; fail it first (POST /api/admin/disks/{disk}/fail)",
                    state_name(state)
                )));
            }
        }
        core.ops.replacing[disk as usize] = true;
    }
    let store = shared.store.clone();
    let path = body.0.path;
    let result = tokio::task::spawn_blocking(move || store.replace_device(DiskIndex(disk), &path))
        .await
        .map_err(|e| OpsError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()));
    let mut core = shared.core.lock().expect("core lock");
    core.ops.replacing[disk as usize] = false;
    let device = result?.map_err(|e| OpsError(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()))?;
    let path = device.path().display().to_string();
    core.ops.device_swaps[disk as usize] = Some(device);
    tracing::info!(disk, path = %path, "disk replaced by a new device (restore rebuilds it)");
    Ok(axum::Json(json!({
        "disk": disk,
        "state": "failed",
        "path": path,
    })))
}

/// Starts rebuilding `disk` (which must be failed) from the other replicas.
pub fn start_rebuild(shared: &Shared, core: &mut Core, disk: u32) -> Result<Value, String> {
    if core.ops.health.state(disk) != DiskState::Failed {
        return Err(format!(
            "disk {disk} is {}: only a failed disk is rebuilt",
            state_name(core.ops.health.state(disk))
        ));
    }
    if core.ops.replacing[disk as usize] {
        return Err(format!(
            "disk {disk} is being replaced; restore it afterwards"
        ));
    }
    if let Some(r) = &core.ops.rebuild {
        return Err(format!(
            "disk {} is being rebuilt; one rebuild at a time",
            r.disk
        ));
    }
    if let Some(other) =
        (0..shared.array.disk_count).find(|&d| d != disk && core.reservations.is_failed(d))
    {
        return Err(format!(
            "disk {other} has failed too: data whose replicas were on disks {disk} and {other} \
             cannot be rebuilt; replace and rebuild disks one at a time while the others serve"
        ));
    }
    let tasks = rebuild_tasks(disk, core.titles.values().map(|t| (t.id(), &t.layout)));
    let copies = tasks.len();
    let queue = RebuildQueue::new(disk, tasks);
    let total_bytes = queue.progress().total_bytes;
    core.ops.health.start_rebuild(disk);
    publish_state(shared, core, disk);
    let metrics = &shared.metrics;
    metrics
        .rebuild_disk_plus_one
        .store(u64::from(disk) + 1, Relaxed);
    metrics.rebuild_total_bytes.store(total_bytes, Relaxed);
    metrics.rebuild_done_bytes.store(0, Relaxed);
    core.ops.rebuild = Some(Rebuild::new(disk, queue, core.next_round));
    tracing::info!(
        disk,
        copies,
        total_bytes,
        "rebuild started: copies run in disk time admitted streams left unreserved"
    );
    Ok(json!({
        "disk": disk,
        "state": "rebuilding",
        "copies": copies,
        "total_bytes": total_bytes,
    }))
}

async fn restore(
    State(shared): State<Arc<Shared>>,
    Path(disk): Path<String>,
) -> Result<axum::Json<Value>, OpsError> {
    let disk = parse_disk(&shared, &disk)?;
    let mut core = shared.core.lock().expect("core lock");
    start_rebuild(&shared, &mut core, disk)
        .map(axum::Json)
        .map_err(conflict)
}
