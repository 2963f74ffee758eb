//! What the round driver, the I/O side and the HTTP handlers share, and the
//! core the round driver owns.
//!
//! The round driver thread owns the [`Core`] outright: the array state
//! machine (every decision: admission, round plans, health, rebuild, ingest
//! grants) and the sessions of admitted streams. Nothing else touches it and
//! no mutex guards it: an HTTP handler, a session's release guard or the
//! copier hands the driver a job ([`Shared::with_core`]), which the driver
//! runs between rounds and completions, and the answer comes back by
//! message. Completed reads reach the driver over the disk threads' channel,
//! so no lock is taken per completed read. The titles' catalog view, which
//! HTTP answers from, is behind a read-mostly lock of its own.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, RwLock};

use rondo_model::array::Array;
use rondo_model::units::{PlaybackRound, StreamId, TitleId};
use rondo_store::{ArrayConfig, Store};

use crate::buffers::BufferPool;
use crate::config::ServerConfig;
use crate::gate::DiskTimeGate;
use crate::io::RoundClock;
use crate::metrics::Metrics;
use crate::session::StreamState;
use crate::titles::LoadedTitle;

/// What the round driver owns.
pub struct Core {
    /// The array: every decision, shared with the simulator.
    pub array: Array,
    /// The sessions of admitted streams (delivery only).
    pub streams: BTreeMap<StreamId, StreamState>,
    /// Device swaps and the rebuild's wall-clock progress (`ops`).
    pub ops: crate::ops::OpsState,
    /// Late starts' batches, sent to the disks by the driver after the job
    /// that admitted them.
    pub late_batches: Vec<crate::io::DiskBatch>,
    /// Releases for the send loops, handed over at the end of each driver
    /// step (`sink`).
    pub outbox: crate::sink::Outbox,
}

/// Shared by every part of a running server.
pub struct Shared {
    pub store: Store,
    pub data_dir: PathBuf,
    pub array: ArrayConfig,
    pub config: ServerConfig,
    /// The bound in force and the drive it charges (`stroke`): widened
    /// while serving under `Stroke::Data`.
    pub stroke: crate::stroke::ChargedStroke,
    /// The longest stream the reservation tables hold (their horizon).
    pub horizon_stream_rounds: u64,
    pub clock: RoundClock,
    pub metrics: Arc<Metrics>,
    /// The stored titles' catalog and media view (what HTTP answers from);
    /// the array holds each one's charges, layout and round index.
    pub titles: RwLock<BTreeMap<TitleId, Arc<LoadedTitle>>>,
    /// Sessions the driver holds (published after every job and event).
    pub active_streams: AtomicUsize,
    /// Jobs for the round driver, which owns the core.
    pub jobs: crossbeam_channel::Sender<CoreJob>,
    pub gate: Arc<DiskTimeGate>,
    /// Each damaged title's rounds with no good replica (published by the
    /// driver when the array's extent faults change).
    pub lost_rounds: RwLock<BTreeMap<TitleId, Vec<PlaybackRound>>>,
    /// The read buffers (the driver trims what it keeps free every round).
    pub pool: BufferPool,
    /// Feeds the rebuild's copies to the copier thread.
    pub copier: crossbeam_channel::Sender<crate::ops::CopierJob>,
    /// Set at shutdown: no new admissions, the driver drops every stream.
    pub shutting_down: AtomicBool,
    /// The API token (control endpoints).
    pub token: String,
    /// Random per start, written into `server.json` and answered at
    /// `/api/server-id` (see `ingest::handoff`).
    pub instance_id: String,
    /// `http://` and the address the server listens on, for absolute URLs
    /// when a request has no Host header.
    pub base_url: String,
    /// The tiers and the titles being staged from them (seed 002).
    pub staging: crate::staging::Staging,
    /// LDSS/LMSS: the popularity log, the dedicated interface nodes, and
    /// the copy-capable nodes in the order first heard of (their numbers).
    pub local_copies: Option<std::sync::Mutex<rondo_model::cluster::LocalCopies>>,
}

/// Why a title was not removed from the array.
#[derive(Debug, thiserror::Error)]
pub enum RemoveTitleError {
    #[error("no title with id {}", .0.0)]
    NotFound(TitleId),
    #[error(
        "title {} is being streamed ({playing} stream(s) hold reservations for it); delete it \
         when they have ended",
        .id.0
    )]
    Streaming { id: TitleId, playing: usize },
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("removing title {} from the store: {error}", .id.0)]
    Store { id: TitleId, error: String },
}

impl Shared {
    /// This server's numbering of rounds, as named in its streams'
    /// `x-rondo-schedule` headers: from its per-start instance id.
    pub fn schedule_id(&self) -> u64 {
        let hex = self.instance_id.get(..16).unwrap_or(&self.instance_id);
        u64::from_str_radix(hex, 16).unwrap_or(0)
    }

    /// Each damaged title's lost rounds.
    pub fn lost_rounds(
        &self,
    ) -> std::sync::RwLockReadGuard<'_, BTreeMap<TitleId, Vec<PlaybackRound>>> {
        self.lost_rounds
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn round_duration_ns(&self) -> u64 {
        self.clock.round_duration_ns
    }

    /// A loaded title by id.
    pub fn title(&self, id: TitleId) -> Option<Arc<LoadedTitle>> {
        self.titles.read().expect("titles lock").get(&id).cloned()
    }

    /// Every loaded title, by id.
    pub fn titles(&self) -> Vec<Arc<LoadedTitle>> {
        self.titles
            .read()
            .expect("titles lock")
            .values()
            .cloned()
            .collect()
    }

    /// How titles' reads are charged under this server's retrieval policy
    /// and cycle (what loading a title needs).
    pub fn read_charging(&self) -> rondo_store::titles::ReadCharging {
        rondo_store::titles::ReadCharging {
            group_rounds: self.config.read_group_rounds.max(1),
            cache_pairs: self.config.drive_prefetch != rondo_model::array::DrivePrefetch::None,
            cycle_max_group_rounds: self.config.cycle.map_or(0, |c| c.max_group_rounds),
        }
    }

    /// Removes title `id` from the array, the titles' view and the store,
    /// unless a stream holds reservations for it (from a thread that may
    /// block: the staging's eviction and the delete endpoint).
    pub fn remove_title_blocking(&self, id: TitleId) -> Result<(), RemoveTitleError> {
        if self.title(id).is_none() {
            return Err(RemoveTitleError::NotFound(id));
        }
        let removed = self.with_core_blocking(move |_, core| {
            let removed = core.array.remove_title(id);
            let playing = core.streams.values().filter(|s| s.title.id() == id).count();
            (removed, playing)
        });
        match removed {
            Some((true, _)) => {
                self.titles.write().expect("titles lock").remove(&id);
            }
            Some((false, playing)) => return Err(RemoveTitleError::Streaming { id, playing }),
            None => return Err(RemoveTitleError::ShuttingDown),
        }
        self.store
            .delete_title(id)
            .map_err(|e| RemoveTitleError::Store {
                id,
                error: e.to_string(),
            })
    }

    /// Streams the server holds sessions for.
    pub fn active_streams(&self) -> usize {
        self.active_streams.load(Relaxed)
    }

    /// Runs `job` on the round driver, which owns the core, and waits for
    /// its answer; `None` once the driver has stopped.
    pub async fn with_core<T: Send + 'static>(
        &self,
        job: impl FnOnce(&Shared, &mut Core) -> T + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Box::new(move |shared, core| {
                let _ = tx.send(job(shared, core));
            }))
            .ok()?;
        rx.await.ok()
    }

    /// Like [`Shared::with_core`] from a thread that may block.
    pub fn with_core_blocking<T: Send + 'static>(
        &self,
        job: impl FnOnce(&Shared, &mut Core) -> T + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.jobs
            .send(Box::new(move |shared, core| {
                let _ = tx.send(job(shared, core));
            }))
            .ok()?;
        rx.recv().ok()
    }

    /// Hands `job` to the round driver without waiting.
    pub fn on_core(&self, job: impl FnOnce(&Shared, &mut Core) + Send + 'static) {
        let _ = self.jobs.send(Box::new(job));
    }

    /// Loads stored title `id` with its charges under the bound in force
    /// and registers it with the array, the stroke held between the two
    /// so that a widening cannot fall between them (from a thread that may
    /// block: after an ingest or a tier's staging).
    pub fn load_and_add_title(
        &self,
        id: TitleId,
    ) -> Result<Arc<LoadedTitle>, rondo_store::titles::LoadError> {
        let held = self.stroke.hold();
        let loaded =
            rondo_store::titles::load_title(&self.store, &held.bound, self.read_charging(), id)?;
        let title = self.add_title(loaded);
        drop(held);
        Ok(title)
    }

    /// Registers a loaded title with the array (from a thread that may block).
    pub fn add_title(&self, title: LoadedTitle) -> Arc<LoadedTitle> {
        let title = Arc::new(title);
        let array_title = title.array_title();
        self.with_core_blocking(move |_, core| {
            core.array.add_title(array_title);
        });
        self.titles
            .write()
            .expect("titles lock")
            .insert(title.id(), Arc::clone(&title));
        title
    }
}

/// A job the round driver runs on the core.
pub type CoreJob = Box<dyn FnOnce(&Shared, &mut Core) + Send>;
