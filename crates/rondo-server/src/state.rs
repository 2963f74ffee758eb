//! What the round driver, the I/O side and the HTTP handlers share: the
//! store, the array's configuration and bound, the round clock, the metrics,
//! and behind one mutex the core's array state machine (every decision:
//! admission, round plans, health, rebuild, ingest grants), the loaded
//! titles' catalog view and the sessions of admitted streams.
//!
//! The mutex is held only for short, non-blocking work: an admission (the
//! core's decision is sub-millisecond), registering or ending a stream, the
//! driver's per-round planning and hand-over of complete rounds. Nothing
//! that waits on a client or a device runs under it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use rondo_model::array::Array;
use rondo_model::reservation::Bound;
use rondo_model::units::{StreamId, TitleId};
use rondo_store::{ArrayConfig, Store};

use crate::config::ServerConfig;
use crate::gate::DiskTimeGate;
use crate::io::RoundClock;
use crate::metrics::Metrics;
use crate::session::StreamState;
use crate::titles::LoadedTitle;

/// State behind the core mutex.
pub struct Core {
    /// The array: every decision, shared with the simulator.
    pub array: Array,
    /// The stored titles' catalog and media view (what HTTP answers from);
    /// the array holds each one's charges, layout and round index.
    pub titles: BTreeMap<TitleId, Arc<LoadedTitle>>,
    /// The sessions of admitted streams (delivery only).
    pub streams: BTreeMap<StreamId, StreamState>,
    /// Device swaps and the rebuild's wall-clock progress (`ops`).
    pub ops: crate::ops::OpsState,
}

/// Shared by every part of a running server.
pub struct Shared {
    pub store: Store,
    pub data_dir: PathBuf,
    pub array: ArrayConfig,
    pub config: ServerConfig,
    pub bound: Bound,
    pub clock: RoundClock,
    pub metrics: Arc<Metrics>,
    pub core: Mutex<Core>,
    pub gate: Arc<DiskTimeGate>,
    /// Feeds the rebuild's copies to the copier thread.
    pub copier: crossbeam_channel::Sender<crate::ops::CopierJob>,
    /// Set at shutdown: no new admissions, the driver drops every stream.
    pub shutting_down: AtomicBool,
    /// The API token (control endpoints).
    pub token: String,
    /// `http://` and the address the server listens on, for absolute URLs
    /// when a request has no Host header.
    pub base_url: String,
}

impl Shared {
    pub fn round_ns(&self) -> u64 {
        self.clock.round_ns
    }

    /// A loaded title by id.
    pub fn title(&self, id: TitleId) -> Option<Arc<LoadedTitle>> {
        self.core
            .lock()
            .expect("core lock")
            .titles
            .get(&id)
            .cloned()
    }

    /// Every loaded title, by id.
    pub fn titles(&self) -> Vec<Arc<LoadedTitle>> {
        self.core
            .lock()
            .expect("core lock")
            .titles
            .values()
            .cloned()
            .collect()
    }

    /// Registers a loaded title with the array.
    pub fn add_title(&self, title: LoadedTitle) -> Arc<LoadedTitle> {
        let title = Arc::new(title);
        let array_title = title.array_title();
        let mut core = self.core.lock().expect("core lock");
        core.array.add_title(array_title);
        core.titles.insert(title.id(), Arc::clone(&title));
        title
    }
}
