//! The ingest write gate: writes use only disk time that admitted streams
//! have not reserved, and the emulated disks serve them in their rounds.
//!
//! An ingest asks the gate before writing each round of its title
//! ([`WriteGate::before_write_round`], with the title's layout). The gate
//! keeps a short look-ahead of the title's rounds not yet granted
//! ([`LOOKAHEAD_ROUNDS`], with their extents), and the round driver grants
//! from it when it begins a round ([`DiskTimeGate::begin_round`]): each
//! disk's credit is the core's `Reservations::write_credits_ns` (that disk's
//! `T − fixed − reserved`, less what the rebuild's copies took there), and
//! rounds of the title are granted in order as long as, on every disk they
//! write, their charge fits what is left of that disk's credit. A write is
//! charged per disk with the rondo-mode write bound
//! (`RondoBound::for_op(.., Op::Write, ..)`, one charge per extent), as the
//! rebuild's copies are. A round whose charge on some disk exceeds a whole
//! idle round is granted alone in a round with nothing reserved on the disks
//! it writes.
//!
//! The granted rounds' extents go into that round's disk batches as write
//! commands ([`crate::io::ModelIo`]), so each disk's model serves them in its
//! C-SCAN batch with the stream reads and the round's busy time includes
//! them; each disk is charged what it was granted for the busy-versus-budget
//! check. The ingest thread writes the bytes (through the store's
//! `TitleWriter`, which records the checksums the commit needs) once the
//! batches of the round it was granted in have completed on every disk, as
//! before: real writes follow the model's. A granted round the ingest never
//! writes (it failed) has cost model time only.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Condvar, Mutex};

use rondo_model::disk::{Op, RondoBound, RoundBound};
use rondo_model::layout::TitleLayout;
use rondo_model::units::SECTOR_BYTES;
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
    /// `(disk, charge)` for every disk the round writes.
    charges_ns: Vec<(u32, u64)>,
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
    /// The rondo-mode write bound of the array's disks.
    bound: RondoBound,
    metrics: Arc<Metrics>,
}

impl DiskTimeGate {
    pub fn new(idle_round_ns: u64, bound: RondoBound, metrics: Arc<Metrics>) -> DiskTimeGate {
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

    /// The disk time charged, per disk, for writing `extents` (`(disk,
    /// extent)` of every replica of a round): one write-bound charge per
    /// extent, summed over each disk's, in disk order.
    pub fn write_charges_ns(&self, extents: &[(u32, ModelIo)]) -> Vec<(u32, u64)> {
        let mut charges: Vec<(u32, u64)> = Vec::new();
        for (disk, io) in extents {
            let ns = self.bound.extents_ns(&[(
                io.device_offset_bytes / SECTOR_BYTES,
                io.length_bytes.div_ceil(SECTOR_BYTES),
            )]);
            match charges.iter_mut().find(|(d, _)| d == disk) {
                Some((_, total)) => *total += ns,
                None => charges.push((*disk, ns)),
            }
        }
        charges.sort_unstable();
        charges
    }

    /// Round `round` begins with `credits_ns[disk]` of write time per disk
    /// (the core's `write_credits_ns`); `disks` batches will report
    /// completion. Grants waiting ingest rounds that fit and returns them for
    /// the batches.
    pub fn begin_round(&self, round: u64, credits_ns: &[u64], disks: u32) -> WriteGrant {
        let disk_count = self.metrics.disks.len();
        let mut grant = WriteGrant {
            io: vec![Vec::new(); disk_count],
            charged_ns: vec![0; disk_count],
            rounds: 0,
        };
        let mut state = self.state.lock().expect("gate lock");
        state.round = round;
        state.disks_pending = disks;
        let mut left_ns: Vec<u64> = (0..disk_count)
            .map(|d| {
                credits_ns
                    .get(d)
                    .copied()
                    .unwrap_or(0)
                    .min(self.idle_round_ns)
            })
            .collect();
        'titles: for ingest in state.ingests.values_mut() {
            while let Some(next) = ingest.ahead.front() {
                let oversized = next
                    .charges_ns
                    .iter()
                    .any(|&(_, ns)| ns > self.idle_round_ns);
                let fits = next.charges_ns.iter().all(|&(d, ns)| {
                    let left = left_ns[d as usize];
                    if oversized {
                        // Alone on its disks: nothing reserved nor granted there.
                        left == self.idle_round_ns
                    } else {
                        ns <= left
                    }
                });
                if !fits {
                    // Rounds of a title go in order; later titles may fit.
                    continue 'titles;
                }
                let next = ingest.ahead.pop_front().expect("front exists");
                for &(d, ns) in &next.charges_ns {
                    let left = &mut left_ns[d as usize];
                    *left = if oversized { 0 } else { *left - ns };
                    grant.charged_ns[d as usize] += ns;
                }
                for (disk, io) in next.extents {
                    grant.io[disk as usize].push(io);
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
            let extents = round_writes(layout, r);
            let bytes = extents.iter().map(|(_, x)| x.length_bytes).sum();
            ingest.ahead.push_back(RoundWrite {
                round: r,
                bytes,
                charges_ns: self.write_charges_ns(&extents),
                extents,
            });
            ingest.next_unlisted += 1;
        }
    }
}

/// The write commands of round `round` of `layout`: `(disk, extent)` of its
/// primary and every backup piece, empty extents left out.
fn round_writes(layout: &TitleLayout, round: usize) -> Vec<(u32, ModelIo)> {
    let l = layout.round(round);
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
    extents
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

    fn gate(idle_round_ns: u64) -> Arc<DiskTimeGate> {
        let profile = rondo_model::disk::profile_by_name("cheetah-4lp").unwrap();
        let bound = RondoBound::for_op(&profile, Op::Write, 16).unwrap();
        Arc::new(DiskTimeGate::new(
            idle_round_ns,
            bound,
            Arc::new(Metrics::new(4)),
        ))
    }

    /// Per-disk charges of round `r` of `l` as a credit vector (0 elsewhere).
    fn charges(g: &DiskTimeGate, l: &TitleLayout, r: usize) -> Vec<u64> {
        let mut per_disk = vec![0u64; 4];
        for (d, ns) in g.write_charges_ns(&round_writes(l, r)) {
            per_disk[d as usize] += ns;
        }
        per_disk
    }

    fn plus(a: &[u64], b: &[u64]) -> Vec<u64> {
        a.iter().zip(b).map(|(x, y)| x + y).collect()
    }

    #[test]
    fn an_oversized_round_goes_alone_in_an_idle_round() {
        const MIB: u64 = 1024 * 1024;
        // A 2 MiB round costs more on each of its disks than this gate's
        // idle round: it waits for a round with nothing reserved there.
        let idle = 100_000_000;
        let g = gate(idle);
        let title = TitleId(3);
        let l = Arc::new(layout(2, 2 * MIB));
        assert!(charges(&g, &l, 0).iter().any(|&ns| ns > idle));
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
        let round0 = l.round(0);
        let mut almost = vec![idle; 4];
        almost[round0.backups[0].disk.0 as usize] = idle - 1;
        assert_eq!(g.begin_round(0, &almost, 0).rounds, 0, "not idle");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(g.metrics.gated_writes.load(Relaxed), 0);
        assert_eq!(g.begin_round(1, &[idle; 4], 0).rounds, 1, "alone");
        writer.join().unwrap();
        assert_eq!(g.metrics.gated_writes.load(Relaxed), 1);
    }

    #[test]
    fn ingest_rounds_are_granted_per_disk_into_the_batches_then_written_after_them() {
        const MIB: u64 = 1024 * 1024;
        let idle = 900_000_000;
        let g = gate(idle);
        let title = TitleId(7);
        let l = Arc::new(layout(8, MIB));
        let cost: Vec<Vec<u64>> = (0..8).map(|r| charges(&g, &l, r)).collect();
        // Each round is charged on its primary and its backup disk only, the
        // write bound of that disk's extents (about 1 MiB at the inner
        // zone's rate plus positioning: well under the old charge of both
        // replicas on every disk).
        for (r, c) in cost.iter().enumerate() {
            let round = l.round(r);
            let touched = [round.primary_disk.0, round.backups[0].disk.0];
            for (d, &ns) in c.iter().enumerate() {
                assert_eq!(ns > 0, touched.contains(&(d as u32)), "round {r} disk {d}");
                assert!(ns < 150_000_000, "round {r} disk {d}: {ns} ns for 1 MiB");
            }
        }
        // Nobody waits yet: nothing granted.
        assert_eq!(g.begin_round(0, &[idle; 4], 0).rounds, 0);
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
        // Credits for exactly rounds 0 and 1: both go into round 1's
        // batches, as write commands on each round's primary and backup disks.
        let two = plus(&cost[0], &cost[1]);
        let grant = g.begin_round(1, &two, 4);
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
        assert_eq!(grant.charged_ns, two, "each disk charged its own writes");
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
        // One disk short of round 2's charge: nothing more, whatever the others have.
        let mut short = vec![idle; 4];
        let busy = (0..4).find(|&d| cost[2][d] > 0).unwrap();
        short[busy] = cost[2][busy] - 1;
        assert_eq!(g.begin_round(2, &short, 0).rounds, 0);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(g.metrics.gated_writes.load(Relaxed), 2);
        // An idle round grants the rest of the title while every disk's
        // charges fit (1 MiB rounds on four disks: all six).
        let fit = {
            let mut used = vec![0u64; 4];
            (2..8)
                .take_while(|&r| {
                    used = plus(&used, &cost[r]);
                    used.iter().all(|&ns| ns <= idle)
                })
                .count() as u64
        };
        let first = g.begin_round(3, &[idle; 4], 0);
        assert_eq!(first.rounds, fit);
        assert_eq!(g.begin_round(4, &[idle; 4], 0).rounds, 6 - fit);
        writer.join().unwrap();
        assert_eq!(g.metrics.gated_writes.load(Relaxed), 8);
        assert!(
            g.state.lock().unwrap().ingests.is_empty(),
            "title_done forgets it"
        );
        assert_eq!(g.begin_round(5, &[idle; 4], 0).rounds, 0);
    }
}
