//! The ingest write gate: writes use only disk time that admitted streams
//! have not reserved, and the emulated disks serve them in their rounds.
//!
//! An ingest asks the gate before writing each round of its title
//! ([`WriteGate::before_write_round`], with the title's layout). The gate
//! keeps a short look-ahead of the title's rounds not yet granted
//! ([`LOOKAHEAD_ROUNDS`], with their extents), and the round driver grants
//! from it when it begins a round ([`DiskTimeGate::begin_round`]): the
//! round's credit is the core's `Reservations::write_credit_ns` (the smallest
//! unreserved time over the working disks, `T − fixed − reserved`, less what
//! the rebuild's copies took), and rounds of the title are granted in order
//! as long as their cost fits it. A write's cost is charged with the array's
//! paper bound (seed 000 §2.3) as if every replica's bytes went to one disk,
//! plus the positioning of a second request: conservative, since the credit
//! is the least loaded disk's and the replicas go to different disks. A
//! round whose write costs more than a whole idle round is granted alone in
//! a round with nothing reserved.
//!
//! The granted rounds' extents go into that round's disk batches as write
//! commands ([`crate::io::ModelIo`]), so each disk's model serves them in the
//! same C-SCAN batch as the stream reads and the round's busy time includes
//! them; each disk touched is charged the round's cost for the
//! busy-versus-budget check. The ingest thread writes the bytes (through the
//! store's `TitleWriter`, which records the checksums the commit needs) once
//! the batches of the round it was granted in have completed on every disk,
//! as before: real writes follow the model's. A granted round the ingest
//! never writes (it failed) has cost model time only.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Condvar, Mutex};

use rondo_model::disk::{Op, PaperBound};
use rondo_model::layout::TitleLayout;
use rondo_model::units::TitleId;

use crate::ingest::WriteGate;
use crate::io::ModelIo;
use crate::metrics::Metrics;

/// Rounds of a title the gate lists ahead of the one its ingest waits for,
/// so that several rounds may be granted in one disk-round. Bounds the
/// gate's memory per ingest and how far the model's writes run ahead of the
/// real ones.
pub const LOOKAHEAD_ROUNDS: usize = 64;

/// One round of a title waiting for a grant.
struct RoundWrite {
    round: usize,
    bytes: u64,
    cost_ns: u64,
    /// `(disk, extent)` of every replica.
    extents: Vec<(u32, ModelIo)>,
}

/// A title being ingested.
#[derive(Default)]
struct Ingest {
    /// Its next rounds not yet granted, in order.
    ahead: VecDeque<RoundWrite>,
    /// The first round not listed in `ahead` nor granted.
    next_unlisted: usize,
    /// Granted rounds not yet written: title round → (round granted in, bytes).
    granted: BTreeMap<usize, (u64, u64)>,
}

struct GateState {
    round: u64,
    /// Disks whose batch for `round` has not finished.
    disks_pending: u32,
    shutdown: bool,
    ingests: BTreeMap<TitleId, Ingest>,
}

/// What the gate granted in one round: per disk, the write commands for the
/// disk's batch and the time charged to it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteGrant {
    pub io: Vec<Vec<ModelIo>>,
    pub charged_ns: Vec<u64>,
    /// Rounds of titles granted.
    pub rounds: u64,
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
                shutdown: false,
                ingests: BTreeMap::new(),
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

    /// Round `round` begins with `credit_ns` of write time (the core's
    /// `write_credit_ns`); `disks` batches will report completion. Grants
    /// waiting ingest rounds that fit and returns them for the batches.
    pub fn begin_round(&self, round: u64, credit_ns: u64, disks: u32) -> WriteGrant {
        let disk_count = self.metrics.disks.len();
        let mut grant = WriteGrant {
            io: vec![Vec::new(); disk_count],
            charged_ns: vec![0; disk_count],
            rounds: 0,
        };
        let mut state = self.state.lock().expect("gate lock");
        state.round = round;
        state.disks_pending = disks;
        let idle = credit_ns >= self.idle_round_ns;
        let mut credit_ns = credit_ns.min(self.idle_round_ns);
        'titles: for ingest in state.ingests.values_mut() {
            while let Some(next) = ingest.ahead.front() {
                let oversized = next.cost_ns > self.idle_round_ns;
                let fits = if oversized {
                    idle && credit_ns == self.idle_round_ns
                } else {
                    next.cost_ns <= credit_ns
                };
                if !fits {
                    // Rounds of a title go in order; later titles may fit.
                    continue 'titles;
                }
                let next = ingest.ahead.pop_front().expect("front exists");
                credit_ns = if oversized {
                    0
                } else {
                    credit_ns - next.cost_ns
                };
                let mut touched = vec![false; disk_count];
                for (disk, io) in next.extents {
                    grant.io[disk as usize].push(io);
                    touched[disk as usize] = true;
                }
                for (charged, _) in grant.charged_ns.iter_mut().zip(&touched).filter(|t| *t.1) {
                    *charged += next.cost_ns;
                }
                ingest.granted.insert(next.round, (round, next.bytes));
                grant.rounds += 1;
            }
        }
        drop(state);
        self.changed.notify_all();
        grant
    }

    /// A disk finished its batch of `round`.
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

    /// Tops up `ingest`'s look-ahead to [`LOOKAHEAD_ROUNDS`] past `round`,
    /// the round its writer asks for (rounds are asked in order).
    fn list_ahead(&self, ingest: &mut Ingest, layout: &TitleLayout, round: usize) {
        while ingest.ahead.front().is_some_and(|w| w.round < round) {
            ingest.ahead.pop_front();
        }
        ingest.next_unlisted = ingest.next_unlisted.max(round);
        let end = (round + LOOKAHEAD_ROUNDS).min(layout.rounds().len());
        while ingest.next_unlisted < end {
            let r = ingest.next_unlisted;
            let l = layout.round(r);
            let io = |x: &rondo_model::layout::Extent| ModelIo {
                op: Op::Write,
                device_offset_bytes: x.device_offset_bytes,
                length_bytes: x.length_bytes,
            };
            let mut extents: Vec<(u32, ModelIo)> = l
                .primary
                .as_slice()
                .iter()
                .map(|x| (l.primary_disk.0, io(x)))
                .collect();
            for b in &l.backups {
                extents.extend(b.extents.as_slice().iter().map(|x| (b.disk.0, io(x))));
            }
            extents.retain(|(_, x)| x.length_bytes > 0);
            let bytes = extents.iter().map(|(_, x)| x.length_bytes).sum();
            ingest.ahead.push_back(RoundWrite {
                round: r,
                bytes,
                cost_ns: self.write_cost_ns(bytes),
                extents,
            });
            ingest.next_unlisted += 1;
        }
    }
}

impl WriteGate for DiskTimeGate {
    /// Waits until round `round` of `title` has been granted and the batches
    /// of the round it was granted in (which model its writes) are done.
    fn before_write_round(
        &self,
        title: TitleId,
        layout: &TitleLayout,
        round: usize,
        _round_bytes: u64,
    ) {
        let mut state = self.state.lock().expect("gate lock");
        let ingest = state.ingests.entry(title).or_default();
        self.list_ahead(ingest, layout, round);
        loop {
            if state.shutdown {
                return;
            }
            let (now, pending) = (state.round, state.disks_pending);
            let ingest = state.ingests.get_mut(&title).expect("registered above");
            if let Some(&(granted_in, bytes)) = ingest.granted.get(&round)
                && (now > granted_in || (now == granted_in && pending == 0))
            {
                ingest.granted.remove(&round);
                self.metrics.gated_writes.fetch_add(1, Relaxed);
                self.metrics.gated_write_bytes.fetch_add(bytes, Relaxed);
                return;
            }
            state = self.changed.wait(state).expect("gate lock");
        }
    }

    fn title_done(&self, title: TitleId) {
        self.state.lock().expect("gate lock").ingests.remove(&title);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn layout(rounds: usize, round_bytes: u64) -> TitleLayout {
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
            }),
        };
        let plan = TitlePlan::new(&vec![round_bytes; rounds], &params, DiskIndex(0), 1).unwrap();
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
    fn an_oversized_round_goes_alone_in_an_idle_round() {
        const MIB: u64 = 1024 * 1024;
        // A 2 MiB round written twice costs more than this gate's idle
        // round: it waits for a round with nothing reserved.
        let g = Arc::new(DiskTimeGate::new(
            200_000_000,
            PaperBound::seed000_table2(),
            Arc::new(Metrics::new(4)),
        ));
        assert!(g.write_cost_ns(4 * MIB) > 200_000_000);
        let title = TitleId(3);
        let l = Arc::new(layout(2, 2 * MIB));
        let writer = {
            let (g, l) = (Arc::clone(&g), Arc::clone(&l));
            std::thread::spawn(move || {
                g.before_write_round(title, &l, 0, 4 * MIB);
                g.title_done(title);
            })
        };
        wait_for("the ingest registers", || {
            g.state.lock().unwrap().ingests.contains_key(&title)
        });
        assert_eq!(g.begin_round(0, 199_999_999, 0).rounds, 0, "not idle");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(g.metrics.gated_writes.load(Relaxed), 0);
        assert_eq!(g.begin_round(1, 200_000_000, 0).rounds, 1, "alone");
        writer.join().unwrap();
        assert_eq!(g.metrics.gated_writes.load(Relaxed), 1);
    }

    #[test]
    fn ingest_rounds_are_granted_into_the_batches_then_written_after_them() {
        const MIB: u64 = 1024 * 1024;
        let g = Arc::new(DiskTimeGate::new(
            900_000_000,
            PaperBound::seed000_table2(),
            Arc::new(Metrics::new(4)),
        ));
        let title = TitleId(7);
        let l = Arc::new(layout(8, MIB));
        let cost = g.write_cost_ns(2 * MIB);
        // Nobody waits yet: nothing granted.
        assert_eq!(g.begin_round(0, 900_000_000, 0).rounds, 0);
        let writer = {
            let (g, l) = (Arc::clone(&g), Arc::clone(&l));
            std::thread::spawn(move || {
                for round in 0..8 {
                    g.before_write_round(title, &l, round, 2 * MIB);
                }
                g.title_done(title);
            })
        };
        wait_for("the ingest registers", || {
            g.state.lock().unwrap().ingests.contains_key(&title)
        });
        // Room for two rounds: rounds 0 and 1 go into round 1's batches, as
        // write commands on each round's primary and backup disks.
        let grant = g.begin_round(1, 2 * cost + 1, 4);
        assert_eq!(grant.rounds, 2);
        let mut written = vec![0u64; 4];
        for (disk, ios) in grant.io.iter().enumerate() {
            for io in ios {
                assert_eq!(io.op, Op::Write);
                written[disk] += io.length_bytes;
            }
        }
        assert_eq!(written.iter().sum::<u64>(), 4 * MIB, "{written:?}");
        for r in 0..2 {
            let round = l.round(r);
            assert!(written[round.primary_disk.0 as usize] >= MIB);
            assert!(written[round.backups[0].disk.0 as usize] >= MIB);
        }
        for (disk, &bytes) in written.iter().enumerate() {
            // Each disk touched is charged each round it writes.
            assert_eq!(grant.charged_ns[disk], cost * bytes / MIB, "disk {disk}");
        }
        // The writes wait for round 1's batches (which model them).
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(g.metrics.gated_writes.load(Relaxed), 0);
        for _ in 0..4 {
            g.disk_done(1);
        }
        wait_for("two rounds written", || {
            g.metrics.gated_writes.load(Relaxed) == 2
        });
        assert_eq!(g.metrics.gated_write_bytes.load(Relaxed), 4 * MIB);
        // Too little credit: nothing more.
        assert_eq!(g.begin_round(2, cost - 1, 0).rounds, 0);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(g.metrics.gated_writes.load(Relaxed), 2);
        // An idle round grants what fits of the look-ahead (4 of 6 here).
        let idle = g.begin_round(3, 900_000_000, 0);
        assert_eq!(idle.rounds, 900_000_000 / cost);
        assert_eq!(g.begin_round(4, 900_000_000, 0).rounds, 6 - idle.rounds);
        writer.join().unwrap();
        assert_eq!(g.metrics.gated_writes.load(Relaxed), 8);
        assert!(
            g.state.lock().unwrap().ingests.is_empty(),
            "title_done forgets it"
        );
        assert_eq!(g.begin_round(5, 900_000_000, 0).rounds, 0);
    }
}
