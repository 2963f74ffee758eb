//! The ingest write gate: an ingest's writer waits here until the array has
//! granted the round it is about to write, and the round's batches are done.
//!
//! The decision is the array's (`rondo_model::array::WriteQueue`, run in
//! `Array::begin_round`): ingest rounds are granted in disk time admitted
//! streams left unreserved, after re-reads and the rebuild took theirs, and
//! each granted round's writes are commands in that round's disk batches,
//! so the disks' models serve them with the stream reads. This module only
//! carries the writer's requests to the round driver (which owns the array)
//! and the grants back: [`WriteGate::before_write_round`] queues "this title
//! will write" and "its writer waits for round r" ([`GateRequest`]); the
//! driver applies them before it plans the next round
//! ([`DiskTimeGate::take_requests`]) and publishes the grants
//! ([`DiskTimeGate::begin_round`]). The writer goes ahead once the batches of
//! the round its round was granted in have completed on every disk
//! ([`DiskTimeGate::disk_done`]): real writes follow the model's.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use rondo_model::layout::TitleLayout;
use rondo_model::units::{PlaybackRound, Round, TitleId};

use crate::ingest::WriteGate;
use crate::metrics::Metrics;

/// What an ingest asks of the array.
#[derive(Debug)]
pub enum GateRequest {
    /// A title placed as `layout` will be written round by round.
    Begin {
        title: TitleId,
        layout: Arc<TitleLayout>,
    },
    /// Its writer waits for title round `round`.
    Want {
        title: TitleId,
        round: PlaybackRound,
    },
    /// Its ingest ended.
    End { title: TitleId },
}

struct GateState {
    round: Round,
    /// Disks whose batch for `round` has not finished.
    disks_pending: u32,
    shutdown: bool,
    /// For the driver, applied before it plans the next round.
    requests: Vec<GateRequest>,
    /// Titles registered with the array.
    registered: BTreeSet<TitleId>,
    /// Granted rounds not yet written: title → (title round → (round granted in, bytes)).
    granted: BTreeMap<TitleId, BTreeMap<PlaybackRound, (Round, u64)>>,
}

/// Checks a title's placement before it is written (the server's charged
/// stroke, `crate::stroke`).
pub type PlacementCheck = Box<dyn Fn(&TitleLayout) -> Result<(), String> + Send + Sync>;

/// Carries ingest writes' requests to the round driver and its grants back.
pub struct DiskTimeGate {
    state: Mutex<GateState>,
    changed: Condvar,
    metrics: Arc<Metrics>,
    placement_check: OnceLock<PlacementCheck>,
}

impl DiskTimeGate {
    pub fn new(metrics: Arc<Metrics>) -> DiskTimeGate {
        DiskTimeGate {
            state: Mutex::new(GateState {
                round: Round(0),
                disks_pending: u32::MAX,
                shutdown: false,
                requests: Vec::new(),
                registered: BTreeSet::new(),
                granted: BTreeMap::new(),
            }),
            changed: Condvar::new(),
            metrics,
            placement_check: OnceLock::new(),
        }
    }

    /// Sets what every placed title is checked with before it is written
    /// (once, when the server is up).
    pub fn set_placement_check(&self, check: PlacementCheck) {
        let _ = self.placement_check.set(check);
    }

    /// The driver takes the writers' requests, to apply to the array before
    /// planning a round.
    pub fn take_requests(&self) -> Vec<GateRequest> {
        std::mem::take(&mut self.state.lock().expect("gate lock").requests)
    }

    /// Round `round` begins with the array's `grants` (`(title, title round,
    /// bytes)`); `disks` batches will report completion.
    pub fn begin_round(&self, round: Round, grants: &[(TitleId, PlaybackRound, u64)], disks: u32) {
        let mut state = self.state.lock().expect("gate lock");
        state.round = round;
        state.disks_pending = disks;
        for &(title, title_round, bytes) in grants {
            if state.registered.contains(&title) {
                state
                    .granted
                    .entry(title)
                    .or_default()
                    .insert(title_round, (round, bytes));
            }
        }
        drop(state);
        self.changed.notify_all();
    }

    /// A disk finished its batch of `round`.
    pub fn disk_done(&self, round: Round) {
        let mut state = self.state.lock().expect("gate lock");
        if state.round == round && state.disks_pending > 0 && state.disks_pending != u32::MAX {
            state.disks_pending -= 1;
            if state.disks_pending == 0 {
                drop(state);
                self.changed.notify_all();
            }
        }
    }

    /// Lets every waiting writer go (the server is stopping).
    pub fn shutdown(&self) {
        self.state.lock().expect("gate lock").shutdown = true;
        self.changed.notify_all();
    }
}

impl WriteGate for DiskTimeGate {
    fn placed(&self, _: TitleId, layout: &TitleLayout) -> Result<(), String> {
        self.placement_check
            .get()
            .map_or(Ok(()), |check| check(layout))
    }

    fn before_write_round(
        &self,
        title: TitleId,
        layout: &TitleLayout,
        round: usize,
        _round_bytes: u64,
    ) {
        let round = PlaybackRound(round as u32);
        let mut state = self.state.lock().expect("gate lock");
        if state.registered.insert(title) {
            state.requests.push(GateRequest::Begin {
                title,
                layout: Arc::new(layout.clone()),
            });
        }
        state.requests.push(GateRequest::Want { title, round });
        loop {
            if state.shutdown {
                return;
            }
            let (now, pending) = (state.round, state.disks_pending);
            if let Some(&(granted_in, bytes)) =
                state.granted.get(&title).and_then(|g| g.get(&round))
                && (now > granted_in || (now == granted_in && pending == 0))
            {
                state
                    .granted
                    .get_mut(&title)
                    .expect("present")
                    .remove(&round);
                self.metrics.gated_writes.fetch_add(1, Relaxed);
                self.metrics.gated_write_bytes.fetch_add(bytes, Relaxed);
                return;
            }
            state = self.changed.wait(state).expect("gate lock");
        }
    }

    fn title_done(&self, title: TitleId) {
        let mut state = self.state.lock().expect("gate lock");
        if state.registered.remove(&title) {
            state.requests.push(GateRequest::End { title });
        }
        state.granted.remove(&title);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn layout(rounds: usize) -> TitleLayout {
        use rondo_model::layout::{
            ArrayAllocator, BackupParams, LayoutParams, ReplicaPlacement, TitlePlan,
        };
        use rondo_model::units::DiskIndex;
        let params = LayoutParams {
            disk_count: 4,
            stride_bytes: 2 * 1024 * 1024,
            block_bytes: 16 * 1024,
            backup: Some(BackupParams {
                placement: ReplicaPlacement::Deterministic,
                backup_block_bytes: None,
                fragment_sequence: Default::default(),
                round_robin_counter: Default::default(),
                disk_groups: 1,
            }),
            segment_rounds: 1,
            stripe_disks: 0,
        };
        let plan = TitlePlan::new(&vec![1 << 20; rounds], &params, DiskIndex(0), 1).unwrap();
        ArrayAllocator::uniform(4, 100).place(&plan).unwrap()
    }

    fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !f() {
            assert!(std::time::Instant::now() < deadline, "timed out: {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_writer_registers_then_waits_for_its_grant_and_the_rounds_batches() {
        let g = Arc::new(DiskTimeGate::new(Arc::new(Metrics::new(4))));
        let title = TitleId(7);
        let writer = {
            let g = Arc::clone(&g);
            std::thread::spawn(move || {
                let l = layout(2);
                for round in 0..2 {
                    g.before_write_round(title, &l, round, 1 << 21);
                }
                g.title_done(title);
            })
        };
        let mut requests = Vec::new();
        wait_for("the writer asks for round 0", || {
            requests.extend(g.take_requests());
            requests.len() >= 2
        });
        assert!(matches!(requests[0], GateRequest::Begin { title: t, .. } if t == title));
        assert!(matches!(
            requests[1],
            GateRequest::Want { title: t, round: PlaybackRound(0) } if t == title
        ));
        // Granted in round 5 with 4 batches outstanding: the writer waits.
        g.begin_round(Round(5), &[(title, PlaybackRound(0), 1 << 21)], 4);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(g.metrics.gated_writes.load(Relaxed), 0);
        for _ in 0..4 {
            g.disk_done(Round(5));
        }
        wait_for("round 0 is written", || {
            g.metrics.gated_writes.load(Relaxed) == 1
        });
        g.begin_round(Round(6), &[(title, PlaybackRound(1), 1 << 21)], 0);
        writer.join().unwrap();
        assert_eq!(g.metrics.gated_writes.load(Relaxed), 2);
        let rest = g.take_requests();
        assert!(matches!(rest.last(), Some(GateRequest::End { title: t }) if *t == title));
    }
}
