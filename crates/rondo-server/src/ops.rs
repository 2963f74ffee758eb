//! Operations on a running server: disk failure, replacement and rebuild.
//!
//! Every decision here is the array's (`rondo_model::array::Array`): this
//! module turns HTTP calls into its operator entry points and carries out
//! what they answer. A disk fails by an operator's
//! `POST /api/admin/disks/{k}/fail` (`Array::fail_disk`), or when read
//! errors pass the array's health threshold (an effect of
//! `Array::complete`). The array then plans the disk's reads on the backups
//! from the next round; streams whose data has no working replica left (a
//! second failure) are stopped by the array, and here their responses fail
//! with a log line, counted in `streams_aborted`. `POST /api/admin/disks/{k}/replace` maps a new device
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
use rondo_model::array::{
    Aborted, Effect, ExtentFaults, FailCause, OpsError as ArrayOpsError, state_name,
};
use rondo_model::health::DiskState;
use rondo_model::units::{DiskIndex, StreamId};
use serde::Deserialize;
use serde_json::{Value, json};

pub use rebuild::{CopierJob, Rebuild, RebuildSummary, spawn_copier};

use crate::state::{Core, Shared};

/// Pending device replacements and the rebuild's wall-clock progress; kept
/// in the core (one lock with the array). Disk health is the array's.
pub struct OpsState {
    /// Replacement devices the driver has not handed to their I/O thread yet.
    pub device_swaps: Vec<Option<Arc<dyn crate::storage::Storage>>>,
    pub rebuild: Option<Rebuild>,
    /// How the last rebuild ended.
    pub last_rebuild: Option<RebuildSummary>,
}

impl OpsState {
    pub fn new(disks: u32) -> OpsState {
        OpsState {
            device_swaps: vec![None; disks as usize],
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

/// Copies a disk's health state into its metrics.
pub fn publish_state(shared: &Shared, disk: DiskIndex, state: DiskState) {
    shared.metrics.disks[disk.index()]
        .state
        .store(state_code(state), Relaxed);
}

/// Copies the array's per-extent fault counts into the metrics.
pub fn publish_extent_counts(shared: &Shared, core: &Core) {
    let c = core.array.counters();
    let m = &shared.metrics;
    m.extents_bad.store(c.extents_bad, Relaxed);
    m.extents_repaired.store(c.extents_repaired, Relaxed);
    m.rounds_lost.store(c.rounds_lost, Relaxed);
    m.window_recoveries.store(c.window_recoveries, Relaxed);
    m.window_splits.store(c.window_splits, Relaxed);
}

/// Logs a per-extent fault effect: a bad extent (repaired in the
/// background), its repair, a round with no good replica.
pub fn log_extent_effect(effect: &Effect) {
    match effect {
        Effect::ExtentBad { extent, disk } => tracing::warn!(
            disk = disk.0,
            title = extent.title.0,
            playback_round = extent.playback_round.0,
            replica = ?extent.replica,
            piece = extent.piece,
            "bad extent (checksum): served from the other replica, repair queued; a fault of \
             this extent, not of the disk"
        ),
        Effect::ExtentRepaired { extent } => tracing::info!(
            title = extent.title.0,
            playback_round = extent.playback_round.0,
            replica = ?extent.replica,
            piece = extent.piece,
            "bad extent repaired from its replica and verified"
        ),
        Effect::RoundLost(lost) => tracing::error!(
            title = lost.title.0,
            playback_round = lost.playback_round.0,
            "round has no good replica: streams of this title stop there; the disks and other \
             titles serve on"
        ),
        _ => {}
    }
}

/// Records `disk` failed in the data directory, so a restart keeps it
/// failed. The failure itself does not wait for the record: if it cannot be
/// written the disk still fails now, and the error is logged.
pub fn record_failed(shared: &Shared, disk: DiskIndex, reason: &str) {
    let since_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    if let Err(e) = shared.store.record_disk_failed(disk, reason, since_unix_s) {
        tracing::error!(
            disk = disk.0,
            "cannot record the disk as failed ({e}); after a restart it would serve again"
        );
    }
}

/// At start: disks whose device is missing or blank fail before any stream
/// is admitted, recorded in `disk-state.toml` (so they stay failed until
/// rebuilt, whatever the next start finds), and the server serves from the
/// other replicas.
pub fn fail_unavailable_disks(shared: &Shared, core: &mut Core) {
    for (disk, reason) in shared.store.unavailable_disks() {
        record_failed(
            shared,
            disk,
            &format!("{}: {reason}", FailCause::DeviceMissing),
        );
        let _ = core.array.fail_disk(disk, FailCause::DeviceMissing);
        publish_state(shared, disk, DiskState::Failed);
        tracing::error!(
            disk = disk.0,
            "disk {disk} has no usable device ({reason}): starting degraded with it failed; \
             its data is served from the other replicas. Map a new device with `rondo admin \
             replace-disk {disk} PATH`, then `rondo admin restore-disk {disk}`"
        );
    }
}

/// At start: the disks recorded failed (before a restart) fail again before
/// any stream is admitted, so no stream is planned on them.
pub fn fail_recorded_disks(
    shared: &Shared,
    core: &mut Core,
) -> Result<(), rondo_store::StoreError> {
    let states = shared.store.disk_states()?;
    for disk in states.failed_disks() {
        if !core.array.is_serving(disk) {
            continue;
        }
        let reason = &states.failed[&disk.to_string()].reason;
        if let Ok(effects) = core.array.fail_disk(disk, FailCause::Recorded) {
            debug_assert!(
                !effects.iter().any(|e| matches!(e, Effect::Aborted(_))),
                "no stream is admitted before the start"
            );
        }
        publish_state(shared, disk, DiskState::Failed);
        tracing::warn!(
            disk = disk.0,
            "disk {disk} is failed since before this start ({reason}): its reads go to the other \
             replicas until `rondo admin restore-disk {disk}` rebuilds it"
        );
    }
    Ok(())
}

/// At start, after the failed disks: the bad extents and lost rounds saved
/// before a restart go back to the array (repairs queued again, streams
/// into a lost round refused), and are logged.
pub fn restore_extent_faults(
    shared: &Shared,
    core: &mut Core,
) -> Result<(), rondo_store::StoreError> {
    let kept = shared.store.extent_faults()?;
    let restored = core.array.restore_extent_faults(&kept);
    if restored > 0 {
        tracing::warn!(
            bad_extents = core.array.bad_extents(),
            lost_rounds = core.array.lost_rounds().len(),
            "extent faults kept from before this start: bad extents are repaired from their \
             replicas in unreserved disk time; streams that need a lost round are refused"
        );
    }
    publish_extent_counts(shared, core);
    Ok(())
}

/// The thread that saves the array's extent faults (`extent-faults.toml`)
/// whenever the round driver sends them, so that the driver never waits
/// for an fsync. Only the latest of several queued snapshots is written. It
/// ends when the driver drops its sender.
pub fn spawn_fault_saver(
    store: rondo_store::Store,
    faults: crossbeam_channel::Receiver<ExtentFaults>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("rondo-faults".into())
        .spawn(move || {
            while let Ok(mut latest) = faults.recv() {
                while let Ok(newer) = faults.try_recv() {
                    latest = newer;
                }
                if let Err(e) = store.save_extent_faults(&latest) {
                    tracing::error!(
                        "cannot save the extent faults ({e}); after a restart, bad extents wait \
                         for a reader to find them again"
                    );
                }
            }
        })
}

/// Ends the session of a stream the array stopped: its response fails, and
/// the reason is logged.
pub fn end_aborted(shared: &Shared, core: &mut Core, aborted: &Aborted) {
    if let Some(state) = core.streams.remove(&aborted.stream) {
        state.abort();
        shared.metrics.streams_aborted.fetch_add(1, Relaxed);
        tracing::error!(
            stream = aborted.stream.0,
            title = state.title.id().0,
            peer = %state.peer,
            "stream stopped: {}",
            aborted.reason
        );
    }
}

/// Carries out the effects of an operator action on the array: disk states
/// published and recorded, stopped streams ended. Returns the streams stopped.
pub fn apply_ops_effects(shared: &Shared, core: &mut Core, effects: Vec<Effect>) -> Vec<StreamId> {
    let mut stopped = Vec::new();
    for effect in effects {
        match effect {
            Effect::DiskState { disk, state } => publish_state(shared, disk, state),
            Effect::DiskFailed { disk, cause } => {
                record_failed(shared, disk, &cause.to_string());
                tracing::error!(
                    disk = disk.0,
                    "disk failed ({cause}): its reads go to the other replicas from the next round"
                );
            }
            Effect::Aborted(a) => {
                stopped.push(a.stream);
                end_aborted(shared, core, &a);
            }
            Effect::ExtentBad { .. } | Effect::ExtentRepaired { .. } | Effect::RoundLost(_) => {
                log_extent_effect(&effect)
            }
            Effect::Ready(_) | Effect::Released(_) | Effect::ReReadQueued { .. } => {}
        }
    }
    stopped
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

/// The array's refusal as an HTTP answer.
fn refused(e: ArrayOpsError) -> OpsError {
    match e {
        ArrayOpsError::NoSuchDisk { .. } => OpsError(StatusCode::NOT_FOUND, e.to_string()),
        _ => conflict(e.to_string()),
    }
}

/// Parses and checks a disk number from the path.
fn parse_disk(shared: &Shared, text: &str) -> Result<DiskIndex, OpsError> {
    let disks = shared.array.disk_count;
    let disk: DiskIndex = text.parse().map_err(|_| {
        OpsError(
            StatusCode::BAD_REQUEST,
            format!("{text:?} is not a disk number: disks are numbered from 0"),
        )
    })?;
    if disk.0 >= disks {
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
    Router::new()
        .route("/api/disks", get(list_disks))
        .route("/api/cluster", get(cluster))
}

/// `GET /api/cluster`: a cluster's nodes and managers as this manager last
/// saw them in etcd; 404 on a server that is no cluster's manager.
async fn cluster(State(shared): State<Arc<Shared>>) -> Result<axum::Json<Value>, OpsError> {
    match &shared.config.cluster {
        Some(view) => {
            let mut snapshot = view.0.snapshot();
            if let (Some(copies), Some(object)) = (&shared.local_copies, snapshot.as_object_mut()) {
                let copies = &*copies.lock().expect("not poisoned");
                let nodes = copies.interfaces();
                let dedicated: Vec<Value> = copies
                    .dedicated_titles()
                    .map(|(title, i)| json!({"title": title.0, "interface": nodes[i as usize]}))
                    .collect();
                object.insert(
                    "local_copies".into(),
                    json!({
                        "retrieval": copies.retrieval(),
                        "interfaces_with_copies": nodes,
                        "dedicated_node": if copies.is_exclusive() { "exclusive" } else { "shared" },
                        "dedicated": dedicated,
                    }),
                );
            }
            Ok(axum::Json(snapshot))
        }
        None => Err(OpsError(
            StatusCode::NOT_FOUND,
            "this server is not a cluster's manager (rondo serve --etcd)".into(),
        )),
    }
}

/// Routes behind the API token.
pub fn admin_routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/api/admin/disks", get(list_disks_admin))
        .route("/api/admin/disks/{disk}/fail", post(fail))
        .route("/api/admin/disks/{disk}/replace", post(replace))
        .route("/api/admin/disks/{disk}/restore", post(restore))
}

/// `GET /api/disks`: every disk's state and errors, and the rebuild (run on
/// the round driver, which owns the core). With `with_paths` (the admin
/// route, behind the token) each disk's device file too: a public answer
/// names no path of the host.
pub fn disks_json(shared: &Shared, core: &Core, with_paths: bool) -> Value {
    let devices = shared.store.devices();
    let disks: Vec<Value> = DiskIndex::all(shared.array.disk_count)
        .map(|disk| {
            let state = core.array.disk_state(disk);
            let mut entry = json!({
                "disk": disk,
                "state": state_name(state),
                "serving": core.array.is_serving(disk),
                "errors": shared.metrics.disks[disk.index()].errors.load(Relaxed),
            });
            if with_paths {
                entry["path"] = devices[disk.index()].path().display().to_string().into();
            }
            // A cluster's disk: the storage node that reads it.
            if let Some(node) = shared
                .config
                .remote_disks
                .as_ref()
                .and_then(|remote| remote.0.location(disk))
            {
                entry["node"] = node.into();
            }
            entry
        })
        .collect();
    let rebuild = core
        .ops
        .rebuild
        .as_ref()
        .zip(core.array.rebuild_status())
        .map(|(r, status)| r.json(&status));
    let lost: Vec<Value> = core
        .array
        .lost_rounds()
        .iter()
        .map(|l| json!({ "title": l.title.0, "playback_round": l.playback_round }))
        .collect();
    json!({
        "round": core.array.next_round().minus(1),
        "disks": disks,
        "bad_extents_pending_repair": core.array.bad_extents(),
        "rounds_lost": lost,
        "rebuild": rebuild,
        "last_rebuild": core.ops.last_rebuild,
        // How a failure is absorbed and what admission guarantees.
        "failure_tolerance": {
            "scheme": shared.array.scheme.to_string(),
            "backup_window_rounds": shared.config.backup_window_rounds,
            "loss_notice_rounds": shared.config.loss_notice_rounds,
            "guarantee": shared.config.guarantee,
        },
        // The drive admission charges (`stroke`).
        "charged_stroke": shared.stroke.status(),
    })
}

async fn list_disks(State(shared): State<Arc<Shared>>) -> Result<axum::Json<Value>, OpsError> {
    shared
        .with_core(|shared, core| disks_json(shared, core, false))
        .await
        .map(axum::Json)
        .ok_or_else(stopping)
}

/// `GET /api/admin/disks`: as `/api/disks`, with each disk's device file.
async fn list_disks_admin(
    State(shared): State<Arc<Shared>>,
) -> Result<axum::Json<Value>, OpsError> {
    shared
        .with_core(|shared, core| disks_json(shared, core, true))
        .await
        .map(axum::Json)
        .ok_or_else(stopping)
}

/// The answer when the round driver has stopped.
fn stopping() -> OpsError {
    OpsError(
        StatusCode::SERVICE_UNAVAILABLE,
        "the server is shutting down".into(),
    )
}

async fn fail(
    State(shared): State<Arc<Shared>>,
    Path(disk): Path<String>,
) -> Result<axum::Json<Value>, OpsError> {
    let disk = parse_disk(&shared, &disk)?;
    let stopped = shared
        .with_core(move |shared, core| {
            let effects = core.array.fail_disk(disk, FailCause::Operator)?;
            Ok(apply_ops_effects(shared, core, effects))
        })
        .await
        .ok_or_else(stopping)?
        .map_err(refused)?;
    tracing::error!(
        disk = disk.0,
        streams_stopped = stopped.len(),
        "an operator failed disk {disk}"
    );
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
    shared
        .with_core(move |_, core| core.array.start_replace(disk))
        .await
        .ok_or_else(stopping)?
        .map_err(refused)?;
    let store = shared.store.clone();
    let path = body.0.path;
    let asked = path.clone();
    let result = tokio::task::spawn_blocking(move || store.replace_device(disk, &path))
        .await
        .map_err(|e| OpsError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()));
    let device = match result? {
        Ok(device) => Ok(device),
        Err(e) => Err(OpsError(StatusCode::UNPROCESSABLE_ENTITY, e.to_string())),
    };
    let swap = device
        .as_ref()
        .ok()
        .map(|d| Arc::clone(d) as Arc<dyn crate::storage::Storage>);
    shared
        .with_core(move |_, core| {
            core.array.end_replace(disk);
            if swap.is_some() {
                core.ops.device_swaps[disk.index()] = swap;
            }
        })
        .await
        .ok_or_else(stopping)?;
    let device = device?;
    if device.is_remote() {
        // A storage node made it on its host, at the path asked for there.
        let path = asked.display().to_string();
        let node = device.path().display().to_string();
        tracing::info!(disk = disk.0, path = %path, node = %node, "disk replaced by a new device on its storage node (restore rebuilds it)");
        return Ok(axum::Json(json!({
            "disk": disk,
            "state": "failed",
            "path": path,
            "node": node,
            "outside_data_dir": false,
            "warning": null,
        })));
    }
    let path = device.path().display().to_string();
    tracing::info!(disk = disk.0, path = %path, "disk replaced by a new device (restore rebuilds it)");
    // Accepted either way (a block device lives outside any directory), but
    // said plainly: the data directory no longer holds the whole array.
    let warning = outside_data_dir(&shared.data_dir, device.path()).then(|| {
        let text = format!(
            "{path} is outside the data directory {}: backing up, moving or deleting the \
             directory will not include this disk's device",
            shared.data_dir.display()
        );
        tracing::warn!(disk = disk.0, "{text}");
        text
    });
    Ok(axum::Json(json!({
        "disk": disk,
        "state": "failed",
        "path": path,
        "outside_data_dir": warning.is_some(),
        "warning": warning,
    })))
}

/// Whether `path` lies outside `data_dir` (after resolving `..` and links
/// where the paths exist).
pub fn outside_data_dir(data_dir: &std::path::Path, path: &std::path::Path) -> bool {
    let resolve =
        |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let dir = resolve(data_dir);
    let path = resolve(&data_dir.join(path));
    !path.starts_with(&dir)
}

/// Starts rebuilding `disk` (which must be failed) from the other replicas:
/// the array checks the preconditions and plans the copies round by round.
pub fn start_rebuild(shared: &Shared, core: &mut Core, disk: DiskIndex) -> Result<Value, String> {
    let started = core.array.start_rebuild(disk).map_err(|e| e.to_string())?;
    publish_state(shared, disk, DiskState::Rebuilding);
    let metrics = &shared.metrics;
    metrics
        .rebuild_disk_plus_one
        .store(u64::from(disk.0) + 1, Relaxed);
    metrics
        .rebuild_total_bytes
        .store(started.total_bytes, Relaxed);
    metrics.rebuild_done_bytes.store(0, Relaxed);
    core.ops.rebuild = Some(Rebuild::new(disk, started.round));
    tracing::info!(
        disk = disk.0,
        copies = started.copies,
        total_bytes = started.total_bytes,
        "rebuild started: copies run in disk time admitted streams left unreserved"
    );
    let warning = (started.lost_copies > 0).then(|| {
        let text = format!(
            "{} of the disk's extents have no good replica to copy from (another disk is failed \
             too, or both copies were bad): those rounds are lost and streams reaching them \
             stop; everything else is rebuilt",
            started.lost_copies
        );
        tracing::error!(disk = disk.0, "{text}");
        text
    });
    Ok(json!({
        "disk": disk,
        "state": "rebuilding",
        "copies": started.copies,
        "total_bytes": started.total_bytes,
        "lost_copies": started.lost_copies,
        "warning": warning,
    }))
}

async fn restore(
    State(shared): State<Arc<Shared>>,
    Path(disk): Path<String>,
) -> Result<axum::Json<Value>, OpsError> {
    let disk = parse_disk(&shared, &disk)?;
    shared
        .with_core(move |shared, core| start_rebuild(shared, core, disk))
        .await
        .ok_or_else(stopping)?
        .map(axum::Json)
        .map_err(conflict)
}
