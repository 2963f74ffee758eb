//! What the round driver, the I/O side and the HTTP handlers share: the
//! store, the array's configuration and bound, the round clock, the metrics,
//! and behind one mutex the core's reservation tables with the loaded titles
//! and the registered streams.
//!
//! The mutex is held only for short, non-blocking work: an admission (the
//! core's decision is sub-millisecond), registering or ending a stream, the
//! driver's per-round planning and hand-over of complete rounds. Nothing
//! that waits on a client or a device runs under it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use rondo_model::disk::RondoBound;
use rondo_model::reservation::{Bound, Reservations};
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
    pub reservations: Reservations,
    pub titles: BTreeMap<TitleId, Arc<LoadedTitle>>,
    pub streams: BTreeMap<StreamId, StreamState>,
    /// The first round the driver has not planned yet: the earliest start
    /// round admission may give a new stream.
    pub next_round: u64,
    /// Disk health, replacements and the rebuild (`ops`).
    pub ops: crate::ops::OpsState,
}

/// Shared by every part of a running server.
pub struct Shared {
    pub store: Store,
    pub data_dir: PathBuf,
    pub array: ArrayConfig,
    pub config: ServerConfig,
    pub bound: Bound,
    /// The rondo-mode bound for writes: what a rebuild's writes are charged.
    pub write_bound: RondoBound,
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

    /// Registers a loaded title with admission.
    pub fn add_title(&self, title: LoadedTitle) -> Arc<LoadedTitle> {
        let title = Arc::new(title);
        let mut core = self.core.lock().expect("core lock");
        core.reservations
            .add_title(title.id(), title.charges.clone());
        core.titles.insert(title.id(), Arc::clone(&title));
        title
    }
}
