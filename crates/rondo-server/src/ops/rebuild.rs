//! The rebuild of a replaced disk, round by round.
//!
//! Each round the round driver calls [`rebuild_round`]: the core's
//! `RebuildQueue::next_round` picks the copies whose source reads (charged
//! with the array's read bound) and target writes (charged with the
//! rondo-mode write bound, `RondoBound::for_op(.., Op::Write, ..)`) fit in
//! the time admitted streams left unreserved on those disks in that round,
//! and the driver hands them to the copier thread. The copier reads the
//! surviving replica's extents, checks each against the catalog's CRC32C,
//! rebuilds the lost extents (a primary from its backup fragments, a backup
//! piece cut from the primary), checks each rebuilt extent against the
//! catalog's CRC32C (so it is byte-identical to what was lost) and writes
//! it. When the queue is empty the copier syncs the device and the disk
//! serves again (`Reservations::restore_disk`, `ArrayHealth::restore`).
//!
//! The copies' reads and writes are also handed to the disks' batches of the
//! same round ([`RebuildRound::io`]: reads on the source disks, writes on the
//! rebuilt one), so each disk's model serves them in its C-SCAN batch with
//! the stream reads and the round's busy time includes them; the copier
//! moves the bytes (a copy's write needs reads on other disks of the same
//! round, so no single disk's service order can hold the whole copy). The
//! charges `next_round` made are returned per disk: the round's budget for
//! the busy-versus-budget check, and what the ingest gate may not use.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use rondo_model::disk::{Op, RoundBound};
use rondo_model::layout::{Extent, Replica};
use rondo_model::rebuild::{CopyTask, RebuildQueue};
use rondo_model::reservation::Bound;
use rondo_model::units::{DiskIndex, SECTOR_BYTES};
use rondo_store::{AlignedBuf, ExtentRecord, Store, checksum};
use serde::Serialize;
use serde_json::{Value, json};

use super::publish_state;
use crate::io::ModelIo;
use crate::state::{Core, Shared};
use crate::titles::LoadedTitle;

/// A rebuild in progress.
pub struct Rebuild {
    pub disk: u32,
    pub queue: RebuildQueue,
    pub started_round: u64,
    pub started_at: Instant,
    /// Copies handed to the copier, and those it has finished.
    pub sent_copies: u64,
    pub finished_copies: u64,
    /// Bytes written and verified on the rebuilt disk.
    pub copied_bytes: u64,
    /// Copies that could not be done (source gone or corrupt, I/O error).
    pub failures: Vec<String>,
    /// The queue is empty and the copier was told to finish.
    pub finishing: bool,
}

/// How a rebuild ended (`GET /api/disks`'s `last_rebuild`).
#[derive(Clone, Debug, Serialize)]
pub struct RebuildSummary {
    pub disk: u32,
    pub restored: bool,
    pub copies: u64,
    pub bytes: u64,
    pub rounds: u64,
    pub seconds: f64,
    pub rate_bytes_per_s: f64,
    pub failures: Vec<String>,
}

impl Rebuild {
    pub fn new(disk: u32, queue: RebuildQueue, round: u64) -> Rebuild {
        Rebuild {
            disk,
            queue,
            started_round: round,
            started_at: Instant::now(),
            sent_copies: 0,
            finished_copies: 0,
            copied_bytes: 0,
            failures: Vec::new(),
            finishing: false,
        }
    }

    /// Progress and an estimate of the time left at the rate so far.
    pub fn json(&self) -> Value {
        let progress = self.queue.progress();
        let elapsed_s = self.started_at.elapsed().as_secs_f64();
        let rate = if elapsed_s > 0.0 {
            self.copied_bytes as f64 / elapsed_s
        } else {
            0.0
        };
        let left_bytes = progress.total_bytes.saturating_sub(self.copied_bytes);
        let eta = (rate > 0.0).then(|| left_bytes as f64 / rate);
        json!({
            "disk": self.disk,
            "done_bytes": self.copied_bytes,
            "scheduled_bytes": progress.done_bytes,
            "total_bytes": progress.total_bytes,
            "fraction_done": if progress.total_bytes == 0 { 1.0 } else {
                self.copied_bytes as f64 / progress.total_bytes as f64
            },
            "copies_left": progress.tasks_left as u64 + self.sent_copies - self.finished_copies,
            "elapsed_seconds": elapsed_s,
            "rate_bytes_per_s": rate,
            "eta_seconds": eta,
            "failures": self.failures,
        })
    }
}

/// Work for the copier thread.
pub enum CopierJob {
    /// Copies onto `disk`, with the titles they belong to.
    Copies {
        disk: u32,
        tasks: Vec<(CopyTask, Arc<LoadedTitle>)>,
    },
    /// Every copy has been handed over: sync the device and end the rebuild.
    Finish { disk: u32 },
}

/// The rebuild's share of one round.
#[derive(Clone, Debug, Default)]
pub struct RebuildRound {
    /// Disk time the copies were charged, per disk (reads on the sources,
    /// writes on the rebuilt disk).
    pub charged_ns: Vec<u64>,
    /// The copies' reads and writes, per disk, for the round's batches.
    pub io: Vec<Vec<ModelIo>>,
}

/// The disk time of reading `extents` under the array's read bound.
fn read_cost_ns(bound: &Bound, extents: &[(u64, u64)]) -> u64 {
    match bound {
        Bound::Paper(b) => b.extents_ns(extents),
        Bound::Rondo(b) => b.extents_ns(extents),
    }
}

/// `(first sector, sector count)` extents as model commands of `op`.
fn model_io(op: Op, extents: &[(u64, u64)]) -> impl Iterator<Item = ModelIo> + '_ {
    extents
        .iter()
        .filter(|&&(_, sectors)| sectors > 0)
        .map(move |&(lbn, sectors)| ModelIo {
            op,
            device_offset_bytes: lbn * SECTOR_BYTES,
            length_bytes: sectors * SECTOR_BYTES,
        })
}

/// The round driver's part, once per round after planning its reads: the
/// copies that fit this round's unreserved time go to the copier. Returns
/// the disk time they are charged, per disk (what other writers may not
/// use), and their I/O for each disk's batch.
pub fn rebuild_round(shared: &Shared, core: &mut Core, round: u64) -> RebuildRound {
    let Core {
        reservations,
        ops,
        titles,
        ..
    } = core;
    let disks = reservations.config().disks as usize;
    let mut out = RebuildRound {
        charged_ns: vec![0u64; disks],
        io: vec![Vec::new(); disks],
    };
    let Some(rebuild) = ops.rebuild.as_mut() else {
        return out;
    };
    if rebuild.finishing {
        return out;
    }
    let read_ns = |_: u32, extents: &[(u64, u64)]| read_cost_ns(&shared.bound, extents);
    let write_ns = |extents: &[(u64, u64)]| shared.write_bound.extents_ns(extents);
    let (run, lost) = rebuild
        .queue
        .next_round(reservations, round, &[], read_ns, write_ns);
    for task in &run {
        for source in &task.read_from {
            out.charged_ns[source.disk as usize] += read_ns(source.disk, &source.extents);
            out.io[source.disk as usize].extend(model_io(Op::Read, &source.extents));
        }
        let target = task.write_to.disk as usize;
        out.charged_ns[target] += write_ns(&task.write_to.extents);
        out.io[target].extend(model_io(Op::Write, &task.write_to.extents));
    }
    for task in lost {
        let message = format!(
            "title {} round {} {:?}: no working replica to copy from",
            task.title.0, task.round, task.target
        );
        tracing::error!(disk = rebuild.disk, "rebuild copy lost: {message}");
        rebuild.failures.push(message);
    }
    let disk = rebuild.disk;
    let mut tasks = Vec::with_capacity(run.len());
    for task in run {
        // A title deleted since the rebuild started needs no copy.
        if let Some(title) = titles.get(&task.title) {
            tasks.push((task, Arc::clone(title)));
        }
    }
    if !tasks.is_empty() {
        rebuild.sent_copies += tasks.len() as u64;
        let _ = shared.copier.send(CopierJob::Copies { disk, tasks });
    }
    if rebuild.queue.is_done() {
        rebuild.finishing = true;
        let _ = shared.copier.send(CopierJob::Finish { disk });
    }
    out
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
            loop {
                if shared.shutting_down.load(Relaxed) {
                    return;
                }
                match jobs.recv_timeout(Duration::from_millis(100)) {
                    Ok(CopierJob::Copies { disk, tasks }) => {
                        for (task, title) in tasks {
                            let result = copy(&shared.store, &task, &title);
                            copy_done(&shared, disk, &task, result);
                        }
                    }
                    Ok(CopierJob::Finish { disk }) => finish(&shared, disk),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
        })
}

fn copy_done(shared: &Shared, disk: u32, task: &CopyTask, result: Result<(), String>) {
    let mut core = shared.core.lock().expect("core lock");
    let Some(rebuild) = core.ops.rebuild.as_mut().filter(|r| r.disk == disk) else {
        return;
    };
    rebuild.finished_copies += 1;
    match result {
        Ok(()) => {
            rebuild.copied_bytes += task.bytes;
            shared
                .metrics
                .rebuild_done_bytes
                .store(rebuild.copied_bytes, Relaxed);
        }
        Err(message) => {
            tracing::error!(disk, "rebuild copy failed: {message}");
            rebuild.failures.push(message);
        }
    }
}

/// Syncs the rebuilt device; the disk serves again if every copy succeeded.
fn finish(shared: &Shared, disk: u32) {
    let synced = shared.store.device(DiskIndex(disk)).sync();
    let mut core = shared.core.lock().expect("core lock");
    let Some(mut rebuild) = core.ops.rebuild.take().filter(|r| r.disk == disk) else {
        return;
    };
    if let Err(e) = synced {
        rebuild.failures.push(format!("syncing the device: {e}"));
    }
    let seconds = rebuild.started_at.elapsed().as_secs_f64();
    let restored = rebuild.failures.is_empty();
    // The disk serves again only once that is on record: a restart before
    // would otherwise find it failed and a restart after, serving.
    let recorded = if restored {
        shared
            .store
            .record_disk_serving(DiskIndex(disk))
            .map_err(|e| {
                rebuild
                    .failures
                    .push(format!("recording the disk as serving: {e}"))
            })
            .is_ok()
    } else {
        false
    };
    if restored && recorded {
        core.reservations.restore_disk(disk);
        core.ops.health.restore(disk);
        tracing::info!(
            disk,
            bytes = rebuild.copied_bytes,
            seconds,
            "rebuild complete: every extent verified; the disk serves again"
        );
    } else {
        core.ops.health.fail(disk);
        tracing::error!(
            disk,
            failures = rebuild.failures.len(),
            "rebuild incomplete: the disk stays failed"
        );
    }
    publish_state(shared, &core, disk);
    let metrics = &shared.metrics;
    metrics.rebuild_disk_plus_one.store(0, Relaxed);
    core.ops.last_rebuild = Some(RebuildSummary {
        disk,
        restored,
        copies: rebuild.finished_copies,
        bytes: rebuild.copied_bytes,
        rounds: core.next_round.saturating_sub(rebuild.started_round),
        seconds,
        rate_bytes_per_s: if seconds > 0.0 {
            rebuild.copied_bytes as f64 / seconds
        } else {
            0.0
        },
        failures: rebuild.failures,
    });
}

/// Reads `extents` of `disk` back to back, checking each against its
/// catalog record.
fn read_verified(
    store: &Store,
    disk: DiskIndex,
    extents: &[Extent],
    records: &[ExtentRecord],
) -> Result<Vec<u8>, String> {
    let device = store.device(disk);
    let mut out = Vec::new();
    for (x, r) in extents.iter().zip(records) {
        let mut buf = AlignedBuf::zeroed(x.length_bytes as usize);
        device
            .read_at(x.device_offset_bytes, &mut buf)
            .map_err(|e| e.to_string())?;
        if checksum(&buf) != r.crc32c {
            return Err(format!(
                "disk {} offset {}: the source replica fails its checksum",
                disk.0, x.device_offset_bytes
            ));
        }
        out.extend_from_slice(&buf);
    }
    Ok(out)
}

/// One copy: the lost extents rebuilt from the other replica, each checked
/// against the catalog's checksum, then written.
pub fn copy(store: &Store, task: &CopyTask, title: &LoadedTitle) -> Result<(), String> {
    let round = task.round as usize;
    let layout = title.layout.round(round);
    let backup_records = title.round_extents(round, Replica::Backup);
    let primary_records = title.round_extents(round, Replica::Primary);
    let context = |e: String| {
        format!(
            "title {} round {round} {:?}: {e}",
            title.id().0,
            task.target
        )
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
    let device = store.device(DiskIndex(task.write_to.disk));
    let mut at = 0usize;
    for (x, r) in extents.iter().zip(records) {
        let len = x.length_bytes as usize;
        let mut buf = AlignedBuf::zeroed(len);
        buf.copy_from_slice(&data[at..at + len]);
        if checksum(&buf) != r.crc32c {
            return Err(context(format!(
                "the rebuilt extent at offset {} does not match the catalog's checksum",
                x.device_offset_bytes
            )));
        }
        device
            .write_at(x.device_offset_bytes, &buf)
            .map_err(|e| context(e.to_string()))?;
        at += len;
    }
    Ok(())
}
