//! The ingest write gate: writes use only disk time that admitted streams
//! have not reserved.
//!
//! Every round the round driver computes the round's write credit: the
//! smallest unreserved time over the working disks, `T − fixed − reserved`
//! (the same tables admission fills). Once the round's reads have completed
//! on every disk, an ingest may write rounds of its title as long as their
//! cost fits the credit; otherwise it waits for a later round. A write's cost
//! is charged with the array's paper bound (seed 000 §2.3) as if every
//! replica's bytes went to one disk, plus the positioning of a second
//! request: conservative, since the credit is the least loaded disk's and the
//! replicas go to different disks. A round whose write costs more than a
//! whole idle round waits for a round with nothing reserved.
//!
//! This is the server's pacing of the store's writes; the disk models of
//! emulated devices do not see the writes, which the host's storage serves.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Condvar, Mutex};

use rondo_model::disk::PaperBound;

use crate::ingest::WriteGate;
use crate::metrics::Metrics;

struct GateState {
    round: u64,
    /// Disks whose batch for `round` has not finished.
    disks_pending: u32,
    /// Write time left in `round`.
    credit_ns: u64,
    shutdown: bool,
}

/// Paces ingest writes to the unreserved disk time of each round.
pub struct DiskTimeGate {
    state: Mutex<GateState>,
    changed: Condvar,
    /// `T − fixed`: the write time of a round with nothing reserved.
    idle_round_ns: u64,
    bound: PaperBound,
    metrics: Arc<Metrics>,
}

impl DiskTimeGate {
    pub fn new(idle_round_ns: u64, bound: PaperBound, metrics: Arc<Metrics>) -> DiskTimeGate {
        DiskTimeGate {
            state: Mutex::new(GateState {
                round: 0,
                disks_pending: u32::MAX,
                credit_ns: 0,
                shutdown: false,
            }),
            changed: Condvar::new(),
            idle_round_ns,
            bound,
            metrics,
        }
    }

    /// The disk time charged for writing `round_bytes` (every replica).
    pub fn write_cost_ns(&self, round_bytes: u64) -> u64 {
        self.bound.request_ns(round_bytes) + self.bound.request_ns(0)
    }

    /// Round `round` began with `credit_ns` of unreserved time on its least
    /// loaded disk; `disks` batches will report completion.
    pub fn begin_round(&self, round: u64, credit_ns: u64, disks: u32) {
        let mut state = self.state.lock().expect("gate lock");
        state.round = round;
        state.credit_ns = credit_ns.min(self.idle_round_ns);
        state.disks_pending = disks;
        drop(state);
        if disks == 0 {
            self.changed.notify_all();
        }
    }

    /// A disk finished its reads of `round`.
    pub fn disk_done(&self, round: u64) {
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
    fn before_write(&self, round_bytes: u64) {
        let cost_ns = self.write_cost_ns(round_bytes);
        let mut state = self.state.lock().expect("gate lock");
        loop {
            if state.shutdown {
                return;
            }
            let reads_done = state.disks_pending == 0;
            let fits = state.credit_ns >= cost_ns
                || (cost_ns > self.idle_round_ns && state.credit_ns == self.idle_round_ns);
            if reads_done && fits {
                state.credit_ns = state.credit_ns.saturating_sub(cost_ns);
                self.metrics.gated_writes.fetch_add(1, Relaxed);
                self.metrics
                    .gated_write_bytes
                    .fetch_add(round_bytes, Relaxed);
                return;
            }
            state = self.changed.wait(state).expect("gate lock");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn gate() -> Arc<DiskTimeGate> {
        Arc::new(DiskTimeGate::new(
            900_000_000,
            PaperBound::seed000_table2(),
            Arc::new(Metrics::new(2)),
        ))
    }

    #[test]
    fn writes_wait_for_the_rounds_reads_and_its_credit() {
        let g = gate();
        let cost = g.write_cost_ns(1_000_000);
        assert!(cost > 1_000_000_000 / 11 && cost < 200_000_000, "{cost}");
        // Reads of round 0 still running: a writer waits.
        g.begin_round(0, 2 * cost, 2);
        let writer = {
            let g = Arc::clone(&g);
            std::thread::spawn(move || {
                g.before_write(1_000_000);
                g.before_write(1_000_000);
                g.before_write(1_000_000);
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(g.metrics.gated_writes.load(Relaxed), 0);
        g.disk_done(0);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            g.metrics.gated_writes.load(Relaxed),
            0,
            "one disk still reads"
        );
        g.disk_done(0);
        std::thread::sleep(Duration::from_millis(50));
        // Two writes fit the credit; the third waits for the next round.
        assert_eq!(g.metrics.gated_writes.load(Relaxed), 2);
        g.begin_round(1, cost - 1, 0);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(g.metrics.gated_writes.load(Relaxed), 2, "credit too small");
        g.begin_round(2, cost, 0);
        writer.join().unwrap();
        assert_eq!(g.metrics.gated_writes.load(Relaxed), 3);
    }

    #[test]
    fn an_oversized_write_goes_in_an_idle_round() {
        let g = gate();
        g.begin_round(0, 800_000_000, 0);
        let writer = {
            let g = Arc::clone(&g);
            std::thread::spawn(move || g.before_write(50_000_000))
        };
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(g.metrics.gated_writes.load(Relaxed), 0);
        g.begin_round(1, 900_000_000, 0);
        writer.join().unwrap();
        assert_eq!(g.metrics.gated_writes.load(Relaxed), 1);
    }
}
