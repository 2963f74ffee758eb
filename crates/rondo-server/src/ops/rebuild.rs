//! The rebuild of a replaced disk, round by round, and the repairs of
//! single bad extents.
//!
//! Each round the array's plan (`Array::begin_round`) lists the copies whose
//! source reads (charged with the array's read bound) and target writes
//! (charged with the rondo-mode write bound) fit in the time admitted
//! streams and re-reads left unreserved on those disks in that round, and
//! the round driver hands them to the copier thread ([`hand_out`]). The copier reads the
//! surviving replica's extents, checks each against the catalog's CRC32C,
//! rebuilds the lost extents (a primary from its backup fragments, a backup
//! piece cut from the primary), checks each rebuilt extent against the
//! catalog's CRC32C (so it is byte-identical to what was lost) and writes
//! it, and reports each copy to the array (`Array::copy_done`). When every
//! copy has been handed out the copier syncs the device, records the disk
//! serving and the array restores it (`Array::finish_rebuild`).
//!
//! The copies' reads and writes are also commands in the disks' batches of
//! the same round (reads on the source disks, writes on the rebuilt one), so
//! each disk's model serves them in its C-SCAN batch with the stream reads
//! and the round's busy time includes them; the copier moves the bytes (a
//! copy's write needs reads on other disks of the same round, so no single
//! disk's service order can hold the whole copy).
//!
//! A repair of a bad extent (an extent whose checksum failed) is the same
//! copy for one extent: the array plans it in unreserved time
//! (`RoundPlan::repairs`), the copier reads the other replica, verifies it,
//! writes the extent, syncs its device and reports it (a source that fails
//! its checksum too means the round has no good replica).

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::Receiver;
use rondo_model::array::{CopyId, RebuildStatus, RoundPlan};
use rondo_model::health::DiskState;
use rondo_model::layout::{Extent, Replica};
use rondo_model::rebuild::{CopyFailure, CopyTask};
use rondo_model::units::{DiskIndex, Round};
use rondo_store::{AlignedBuf, ExtentRecord, Store, checksum};
use serde::Serialize;
use serde_json::{Value, json};

use super::publish_state;
use crate::state::{Core, Shared};
use crate::titles::LoadedTitle;

/// A rebuild in progress: what the array does not track (wall-clock time).
pub struct Rebuild {
    pub disk: DiskIndex,
    pub started_round: Round,
    pub started_at: Instant,
}

/// How a rebuild ended (`GET /api/disks`'s `last_rebuild`).
#[derive(Clone, Debug, Serialize)]
pub struct RebuildSummary {
    pub disk: DiskIndex,
    pub restored: bool,
    pub copies: u64,
    pub bytes: u64,
    pub rounds: u64,
    pub seconds: f64,
    pub rate_bytes_per_s: f64,
    pub failures: Vec<String>,
}

impl Rebuild {
    pub fn new(disk: DiskIndex, round: Round) -> Rebuild {
        Rebuild {
            disk,
            started_round: round,
            started_at: Instant::now(),
        }
    }

    /// Progress (the array's) and an estimate of the time left at the rate so far.
    pub fn json(&self, status: &RebuildStatus) -> Value {
        let progress = status.progress;
        let elapsed_s = self.started_at.elapsed().as_secs_f64();
        let rate = if elapsed_s > 0.0 {
            status.copied_bytes as f64 / elapsed_s
        } else {
            0.0
        };
        let left_bytes = progress.total_bytes.saturating_sub(status.copied_bytes);
        let eta = (rate > 0.0).then(|| left_bytes as f64 / rate);
        json!({
            "disk": self.disk,
            "done_bytes": status.copied_bytes,
            "scheduled_bytes": progress.done_bytes,
            "total_bytes": progress.total_bytes,
            "fraction_done": if progress.total_bytes == 0 { 1.0 } else {
                status.copied_bytes as f64 / progress.total_bytes as f64
            },
            "copies_left": progress.tasks_left + status.copies_outstanding,
            "elapsed_seconds": elapsed_s,
            "rate_bytes_per_s": rate,
            "eta_seconds": eta,
            "failures": status.failures,
        })
    }
}

/// Work for the copier thread.
pub enum CopierJob {
    /// Copies onto `disk`, with the titles they belong to.
    Copies {
        disk: DiskIndex,
        tasks: Vec<(CopyId, CopyTask, Arc<LoadedTitle>)>,
    },
    /// Every copy has been handed over: sync the device and end the rebuild.
    Finish { disk: DiskIndex },
    /// Repairs of bad extents, with the titles they belong to.
    Repairs {
        tasks: Vec<(CopyId, CopyTask, Arc<LoadedTitle>)>,
    },
    /// The server is shutting down: the copier exits.
    Stop,
}

/// The round driver's part: the plan's copies go to the copier; copies lost
/// (their source failed too) are logged; once every copy is handed out the
/// copier is told to finish.
pub fn hand_out(shared: &Shared, core: &mut Core, plan: &RoundPlan) {
    for lost in &plan.rounds_lost {
        super::log_extent_effect(&rondo_model::array::Effect::RoundLost(*lost));
    }
    let mut repairs = Vec::with_capacity(plan.repairs.len());
    for copy in &plan.repairs {
        match shared.title(copy.task.title) {
            Some(title) => repairs.push((copy.id, copy.task.clone(), title)),
            None => {
                let effects = core.array.copy_done(
                    copy.id,
                    Err(CopyFailure::Other("the title was deleted".into())),
                );
                super::apply_ops_effects(shared, core, effects);
            }
        }
    }
    if !repairs.is_empty() {
        let _ = shared.copier.send(CopierJob::Repairs { tasks: repairs });
    }
    for task in &plan.copies_lost {
        tracing::error!(
            disk = task.write_to.disk.0,
            "rebuild copy lost: title {} round {} {:?}: no working replica to copy from",
            task.title.0,
            task.round,
            task.target
        );
    }
    let Some(rebuild) = core.ops.rebuild.as_ref() else {
        return;
    };
    let disk = rebuild.disk;
    let mut tasks = Vec::with_capacity(plan.copies.len());
    for copy in &plan.copies {
        match shared.title(copy.task.title) {
            Some(title) => tasks.push((copy.id, copy.task.clone(), title)),
            // A title deleted since the rebuild started needs no copy.
            None => {
                core.array.copy_done(copy.id, Ok(()));
            }
        }
    }
    if !tasks.is_empty() {
        let _ = shared.copier.send(CopierJob::Copies { disk, tasks });
    }
    if plan.rebuild_handed_out == Some(disk) {
        let _ = shared.copier.send(CopierJob::Finish { disk });
    }
}

/// Starts the copier thread (named `name`), fed the rebuild's copies; it
/// exits when the server shuts down. (Replica re-reads after read errors
/// are the disks' I/O threads', through their models.)
pub fn spawn_copier(
    name: &str,
    shared: Arc<Shared>,
    jobs: Receiver<CopierJob>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            // Blocked until a job comes: an idle copier never wakes (a
            // poll every 100 ms cost a tenth of the server's CPU at 100
            // streams, docs/serving-cost.md).
            loop {
                match jobs.recv() {
                    Ok(CopierJob::Stop) | Err(_) => return,
                    Ok(CopierJob::Copies { disk, tasks }) => {
                        for (id, task, title) in tasks {
                            let result = copy(&shared.store, &task, &title);
                            copy_done(&shared, disk, id, result);
                        }
                    }
                    Ok(CopierJob::Finish { disk }) => finish(&shared, disk),
                    Ok(CopierJob::Repairs { tasks }) => {
                        for (id, task, title) in tasks {
                            let target = task.write_to.disk;
                            let result =
                                copy(&shared.store, &task, &title).and_then(|()| {
                                    // Durable before the extent counts as good.
                                    shared.store.device(target).sync().map_err(|e| {
                                        CopyFailure::Io {
                                            disk: target,
                                            detail: e.to_string(),
                                        }
                                    })
                                });
                            if let Err(e) = &result {
                                tracing::error!(
                                    disk = target.0,
                                    "repair of a bad extent failed: {e}"
                                );
                            }
                            shared.on_core(move |shared, core| {
                                let effects = core.array.copy_done(id, result);
                                super::apply_ops_effects(shared, core, effects);
                                super::publish_extent_counts(shared, core);
                            });
                        }
                    }
                }
            }
        })
}

fn copy_done(shared: &Shared, disk: DiskIndex, id: CopyId, result: Result<(), CopyFailure>) {
    if let Err(message) = &result {
        tracing::error!(disk = disk.0, "rebuild copy failed: {message}");
    }
    shared.on_core(move |shared, core| record_copy(shared, core, id, result));
}

/// The array learns that a copy was moved (or not).
fn record_copy(shared: &Shared, core: &mut Core, id: CopyId, result: Result<(), CopyFailure>) {
    let effects = core.array.copy_done(id, result);
    super::apply_ops_effects(shared, core, effects);
    if let Some(status) = core.array.rebuild_status() {
        shared
            .metrics
            .rebuild_done_bytes
            .store(status.copied_bytes, Relaxed);
    }
}

/// Syncs the rebuilt device; the disk serves again if every copy succeeded
/// and that is on record.
fn finish(shared: &Shared, disk: DiskIndex) {
    let synced = shared.store.device(disk).sync().map_err(|e| e.to_string());
    // After every copy's report: jobs run in the order they were sent.
    shared.with_core_blocking(move |shared, core| end_rebuild(shared, core, disk, synced));
}

/// The rebuild of `disk` ends: the disk serves again if every copy
/// succeeded and that is on record.
fn end_rebuild(shared: &Shared, core: &mut Core, disk: DiskIndex, synced: Result<(), String>) {
    let Some(status) = core.array.rebuild_status() else {
        return;
    };
    let Some(rebuild) = core.ops.rebuild.take().filter(|r| r.disk == disk) else {
        return;
    };
    let mut failures = status.failures.clone();
    if let Err(e) = &synced {
        failures.push(format!("syncing the device: {e}"));
    }
    if status.copies_outstanding > 0 {
        failures.push(format!(
            "{} copies did not report",
            status.copies_outstanding
        ));
    }
    let seconds = rebuild.started_at.elapsed().as_secs_f64();
    // The disk serves again only once that is on record: a restart before
    // would otherwise find it failed and a restart after, serving.
    let recorded = failures.is_empty()
        && shared
            .store
            .record_disk_serving(disk)
            .map_err(|e| failures.push(format!("recording the disk as serving: {e}")))
            .is_ok();
    core.array.finish_rebuild(disk, recorded);
    let restored = recorded && core.array.is_serving(disk);
    if restored {
        tracing::info!(
            disk = disk.0,
            bytes = status.copied_bytes,
            seconds,
            "rebuild complete: every extent verified; the disk serves again"
        );
        publish_state(shared, disk, DiskState::Healthy);
    } else {
        tracing::error!(
            disk = disk.0,
            failures = failures.len(),
            "rebuild incomplete: the disk stays failed"
        );
        publish_state(shared, disk, DiskState::Failed);
    }
    shared.metrics.rebuild_disk_plus_one.store(0, Relaxed);
    core.ops.last_rebuild = Some(RebuildSummary {
        disk,
        restored,
        copies: status.copies_done,
        bytes: status.copied_bytes,
        rounds: core.array.next_round().since(rebuild.started_round),
        seconds,
        rate_bytes_per_s: if seconds > 0.0 {
            status.copied_bytes as f64 / seconds
        } else {
            0.0
        },
        failures,
    });
}

/// Reads `extents` of `disk` back to back, checking each against its
/// catalog record.
fn read_verified(
    store: &Store,
    disk: DiskIndex,
    extents: &[Extent],
    records: &[ExtentRecord],
) -> Result<Vec<u8>, CopyFailure> {
    let device = store.device(disk);
    let mut out = Vec::new();
    for (x, r) in extents.iter().zip(records) {
        let mut buf = AlignedBuf::zeroed(x.length_bytes as usize);
        device
            .read_at(x.device_offset_bytes, &mut buf)
            .map_err(|e| CopyFailure::Io {
                disk,
                detail: e.to_string(),
            })?;
        if checksum(&buf) != r.crc32c {
            return Err(CopyFailure::SourceBad(format!(
                "disk {} offset {}: the source replica fails its checksum",
                disk.0, x.device_offset_bytes
            )));
        }
        out.extend_from_slice(&buf);
    }
    Ok(out)
}

/// One copy: the lost extents rebuilt from the other replica, each checked
/// against the catalog's checksum, then written.
pub fn copy(store: &Store, task: &CopyTask, title: &LoadedTitle) -> Result<(), CopyFailure> {
    let round = task.round.index();
    let layout = title.layout.round(round);
    let backup_records = title.round_extents(round, Replica::Backup);
    let primary_records = title.round_extents(round, Replica::Primary);
    let what = format!("title {} round {round} {:?}", title.id().0, task.target);
    let context = |e: CopyFailure| match e {
        CopyFailure::SourceBad(m) => CopyFailure::SourceBad(format!("{what}: {m}")),
        CopyFailure::Io { disk, detail } => CopyFailure::Io {
            disk,
            detail: format!("{what}: {detail}"),
        },
        CopyFailure::Other(m) => CopyFailure::Other(format!("{what}: {m}")),
    };
    let (data, extents, records) = match task.target {
        Replica::Primary => {
            let mut out = vec![0u8; layout.primary.bytes() as usize];
            let mut first = 0usize;
            for entry in &layout.backups {
                let n = entry.extents.as_slice().len();
                let piece = read_verified(
                    store,
                    entry.disk,
                    entry.extents.as_slice(),
                    &backup_records[first..first + n],
                )
                .map_err(context)?;
                first += n;
                let mut cursor = 0usize;
                for f in &entry.fragments {
                    let len = (f.end - f.start) as usize;
                    out[f.start as usize..f.end as usize]
                        .copy_from_slice(&piece[cursor..cursor + len]);
                    cursor += len;
                }
            }
            (out, layout.primary.as_slice(), primary_records)
        }
        Replica::Backup => {
            let primary = read_verified(
                store,
                layout.primary_disk,
                layout.primary.as_slice(),
                primary_records,
            )
            .map_err(context)?;
            let entry = task.backup_entry as usize;
            let before: usize = layout.backups[..entry]
                .iter()
                .map(|b| b.extents.as_slice().len())
                .sum();
            let backup = &layout.backups[entry];
            let mut out = Vec::with_capacity(task.bytes as usize);
            for f in &backup.fragments {
                out.extend_from_slice(&primary[f.start as usize..f.end as usize]);
            }
            let n = backup.extents.as_slice().len();
            (
                out,
                backup.extents.as_slice(),
                &backup_records[before..before + n],
            )
        }
    };
    let device = store.device(task.write_to.disk);
    let mut at = 0usize;
    for (x, r) in extents.iter().zip(records) {
        let len = x.length_bytes as usize;
        let mut buf = AlignedBuf::zeroed(len);
        buf.copy_from_slice(&data[at..at + len]);
        if checksum(&buf) != r.crc32c {
            return Err(context(CopyFailure::SourceBad(format!(
                "the rebuilt extent at offset {} does not match the catalog's checksum",
                x.device_offset_bytes
            ))));
        }
        device.write_at(x.device_offset_bytes, &buf).map_err(|e| {
            context(CopyFailure::Io {
                disk: task.write_to.disk,
                detail: e.to_string(),
            })
        })?;
        at += len;
    }
    Ok(())
}
