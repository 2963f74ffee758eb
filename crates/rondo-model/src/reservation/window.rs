//! The backup window: how long a survivor has to read a failed disk's
//! backups, what `minimum` reservation keeps for it, and the rule that
//! serves the reads after a failure.
//!
//! Seed 000's `minimum` reservation keeps, on each disk and in each round,
//! the largest backup time any one other disk's failure would add there,
//! because a backup read due in round r must be done in round r. With whole
//! reads that maximum is one or two reads while a failure adds a fraction
//! of one on average, so the cost of failure tolerance stays far above 1/D
//! (docs/experiments/failure-tolerance-cost.md). With a window of k rounds
//! a backup read due in round r may be done in any of rounds r..r+k-1 (its
//! client holds k - 1 rounds more), and the reservation keeps, per source,
//! the average over the window: each backup charge is spread as 1/k of it
//! over the k rounds it may be read in.
//!
//! Why that is enough: after disk s fails, give every backup job j (charge
//! b_j, released in round t_j) b_j/k of disk time in each round of its
//! window. A survivor's round then holds its primaries plus Σ b_j/k over
//! the jobs whose window covers it, which is at most its primaries plus
//! its reserved backup time for source s, within the budget: this fluid
//! schedule meets every deadline. Serving the jobs earliest deadline first
//! ([`RecoveryBacklog`]) meets every deadline a fluid schedule meets, on
//! one disk; the price of serving reads in whole pieces is that the job
//! in progress at a round's end is split, and its second piece pays a
//! second positioning and the rounding of the piece to whole blocks. At
//! most one job is split per disk and round, so the budget keeps one
//! `split_ns` per disk-round.
//!
//! **A loss noticed late** (`loss_notice_rounds`, L). Seed 000's failure
//! comes at a round boundary, before the round's reads are given to the
//! disk. A storage node that dies takes the reads it holds with it, at any
//! moment of a round, and is found dead only when its connection breaks
//! or it stops answering. With L ≥ 1 the guarantee covers a disk lost at
//! any moment of round r and known failed before the end of round
//! r + L − 1 (L = 1: within its round; L = 2: within the next one). Every
//! read of the lost disk due in round r' ≥ r not done is then a job of
//! deadline r' + k − 1 + L, available from round r + L on. Give each such
//! job b/k in each of rounds r' + L … r' + L + k − 1: round m holds the
//! shares of jobs due in m − L − k + 1 … m − L. The reservation spreads
//! each backup charge as b/k over the k + L rounds r' … r' + k − 1 + L,
//! so round m holds b/k for the jobs due in m − k − L + 1 … m, which
//! includes those: the fluid schedule fits, and so does earliest deadline
//! first with one cut per round, as above. Every stream's client is
//! k − 1 + L rounds ahead, and a read not reported by the end of its round
//! counts as missed only L − 1 rounds later (its disk may be found lost
//! meanwhile). The price: L more rounds of each backup's share reserved,
//! and L more rounds of every client's lead.

use serde::{Deserialize, Serialize};

use crate::units::Round;

/// How long a survivor has to read a failed disk's backups (see the
/// module docs).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupWindow {
    /// k: rounds in which a backup read due in round r may be done
    /// (1: in round r, seed 000).
    pub rounds: u32,
    /// What splitting one read between two rounds may add to its charges:
    /// a second positioning and the rounding of the pieces to whole blocks
    /// (`Bound::split_ns`). Kept once per disk-round when k > 1.
    pub split_ns: u64,
    /// Where a read may be cut: at whole blocks of its data (B_l).
    pub block_bytes: u64,
    /// L: how late a disk's loss may be noticed (see the module docs): 0,
    /// at a round boundary (seed 000); L ≥ 1, at any moment of a round and
    /// known before the end of the round L − 1 after it.
    #[serde(default)]
    pub loss_notice_rounds: u32,
}

impl Default for BackupWindow {
    fn default() -> BackupWindow {
        BackupWindow {
            rounds: 1,
            split_ns: 0,
            block_bytes: crate::units::BLOCK_BYTES_DEFAULT,
            loss_notice_rounds: 0,
        }
    }
}

impl BackupWindow {
    /// A window of `rounds` rounds for reads charged by `bound`, cut at
    /// blocks of `block_bytes` (the data directory's B_l).
    pub fn new(rounds: u32, bound: &super::Bound, block_bytes: u64) -> BackupWindow {
        BackupWindow {
            rounds: rounds.max(1),
            split_ns: bound.split_ns(block_bytes),
            block_bytes,
            loss_notice_rounds: 0,
        }
    }

    /// The same window, covering a loss noticed up to `rounds` late
    /// (`loss_notice_rounds`).
    pub fn with_loss_notice_rounds(self, rounds: u32) -> BackupWindow {
        BackupWindow {
            loss_notice_rounds: rounds,
            ..self
        }
    }

    /// Rounds every stream's first send waits under this window
    /// (k − 1 + L): its client's lead, so that a backup round recovered
    /// that late still reaches it in time (`reservation::shape`).
    pub fn lead_rounds(&self) -> u32 {
        self.rounds.max(1) - 1 + self.loss_notice_rounds
    }

    /// Whether backup time is spread over more than one round (k > 1, or
    /// a loss noticed late).
    pub fn is_spread(&self) -> bool {
        self.spread_rounds() > 1
    }

    /// The rounds each backup charge is spread over (k + L), as 1/k of it
    /// in each.
    pub fn spread_rounds(&self) -> u32 {
        self.rounds.max(1) + self.loss_notice_rounds
    }

    /// The last round a failed disk's backup read due in `due` may end in
    /// (due + k − 1 + L).
    pub fn deadline(&self, due: Round) -> Round {
        due.plus(u64::from(self.lead_rounds()))
    }
}

/// A backup read a survivor may cut in two at a block boundary.
pub trait RecoveryRead: Clone {
    /// The bound's charge of reading it whole.
    fn charge_ns(&self) -> u64;
    /// A first part whose charge is at most `fit_ns` and the rest, or
    /// `None` when not even one block fits.
    fn split(&self, fit_ns: u64) -> Option<(Self, Self)>;
}

/// A survivor's backup reads after a failure, served earliest deadline
/// first within a backup window (see the module docs).
#[derive(Clone, Debug)]
pub struct RecoveryBacklog<R> {
    window: BackupWindow,
    /// (deadline round, the read or what is left of it).
    jobs: std::collections::VecDeque<(Round, R)>,
}

/// One part a survivor reads in a round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryPiece<R> {
    pub read: R,
    /// Whether it ends its job (else the rest stays in the backlog).
    pub last: bool,
}

impl<R: RecoveryRead> RecoveryBacklog<R> {
    pub fn new(window: BackupWindow) -> RecoveryBacklog<R> {
        RecoveryBacklog {
            window,
            jobs: Default::default(),
        }
    }

    /// A backup read due in round `due` (to be done by the end of round
    /// `due + k - 1 + L`).
    pub fn push(&mut self, read: R, due: Round) {
        let deadline = self.window.deadline(due);
        // In deadline order, after the jobs of the same deadline (reads
        // come in due order, except those a lost disk took with it).
        let at = self.jobs.partition_point(|j| j.0 <= deadline);
        self.jobs.insert(at, (deadline, read));
    }

    /// Serves one round with `available_ns` of disk time: whole jobs in
    /// deadline order, then the first part of the next one (its rest
    /// continues in a later round).
    pub fn serve(&mut self, mut available_ns: u64) -> Vec<RecoveryPiece<R>> {
        let mut pieces = Vec::new();
        while let Some((deadline, read)) = self.jobs.front() {
            let charge_ns = read.charge_ns();
            if charge_ns <= available_ns {
                available_ns -= charge_ns;
                let (_, read) = self.jobs.pop_front().expect("a front job");
                pieces.push(RecoveryPiece { read, last: true });
                continue;
            }
            if let Some((first, rest)) = read.split(available_ns) {
                debug_assert!(first.charge_ns() <= available_ns);
                let deadline = *deadline;
                self.jobs[0] = (deadline, rest);
                pieces.push(RecoveryPiece {
                    read: first,
                    last: false,
                });
            }
            break;
        }
        pieces
    }

    /// Keeps only the jobs `keep` accepts (a stream stopped meanwhile).
    pub fn retain(&mut self, mut keep: impl FnMut(&R) -> bool) {
        self.jobs.retain(|(_, r)| keep(r));
    }

    /// The earliest deadline of a job not done once round `round` has been
    /// served, if it is `round` or earlier: a job late.
    pub fn overdue(&self, round: Round) -> Option<Round> {
        self.jobs.front().map(|j| j.0).filter(|&d| d <= round)
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
}

/// A read as an amount of disk time, cut anywhere: the fluid model the
/// window's argument is made in, and what the property tests serve.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FluidRead {
    pub tag: u64,
    pub charge_ns: u64,
}

impl RecoveryRead for FluidRead {
    fn charge_ns(&self) -> u64 {
        self.charge_ns
    }

    fn split(&self, fit_ns: u64) -> Option<(FluidRead, FluidRead)> {
        (fit_ns > 0 && fit_ns < self.charge_ns).then_some((
            FluidRead {
                charge_ns: fit_ns,
                ..*self
            },
            FluidRead {
                charge_ns: self.charge_ns - fit_ns,
                ..*self
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reservation::spread;
    use crate::reservation::tables::SlotCharge;
    use crate::units::DiskIndex;
    use proptest::prelude::*;

    proptest! {
        /// The module docs' argument, on one survivor whose own reads take
        /// all of every round but its spread backup time for one source:
        /// the source is lost as round `lost_at` begins and known only L
        /// rounds later, and its reads due from `lost_at` on, served
        /// earliest deadline first in that time (cut anywhere), are each
        /// done within k - 1 + L rounds of their own.
        #[test]
        fn a_loss_noticed_late_is_served_in_the_time_the_spread_reserves(
            k in 1u32..6,
            notice in 0u32..3,
            charges in proptest::collection::vec(0u64..1000, 1..40),
            lost_at in 0usize..12,
        ) {
            let window = BackupWindow {
                rounds: k,
                loss_notice_rounds: notice,
                ..BackupWindow::default()
            };
            let rounds = charges.len() + window.spread_rounds() as usize;
            let mut reserved = vec![0u64; rounds];
            for (due, &cost_ns) in charges.iter().enumerate() {
                let backup = SlotCharge::Backup { source: DiskIndex(1), cost_ns };
                for (at, part) in spread(backup, Round(due as u64), window) {
                    let SlotCharge::Backup { cost_ns, .. } = part else { unreachable!() };
                    reserved[at.0 as usize] += cost_ns;
                }
            }
            let noticed = lost_at + notice as usize;
            let mut backlog = RecoveryBacklog::new(window);
            for (m, &available_ns) in reserved.iter().enumerate() {
                let due: Vec<usize> = if m == noticed {
                    (lost_at..=m).collect()
                } else if m > noticed {
                    vec![m]
                } else {
                    Vec::new()
                };
                for r in due.into_iter().filter(|&r| r < charges.len()) {
                    backlog.push(FluidRead { tag: r as u64, charge_ns: charges[r] }, Round(r as u64));
                }
                backlog.serve(available_ns);
                prop_assert_eq!(backlog.overdue(Round(m as u64)), None, "round {}", m);
            }
            prop_assert!(backlog.is_empty());
        }
    }

    #[test]
    fn jobs_are_served_in_deadline_order_and_the_last_one_split() {
        let mut b = RecoveryBacklog::new(BackupWindow {
            rounds: 3,
            ..BackupWindow::default()
        });
        let read = |tag, charge_ns| FluidRead { tag, charge_ns };
        b.push(read(1, 40), Round(10));
        b.push(read(2, 50), Round(10));
        b.push(read(3, 30), Round(11));
        let pieces = b.serve(60);
        assert_eq!(
            pieces,
            [
                RecoveryPiece {
                    read: read(1, 40),
                    last: true
                },
                RecoveryPiece {
                    read: read(2, 20),
                    last: false
                },
            ]
        );
        assert_eq!(b.overdue(Round(11)), None);
        // The rest of 2 (30) is due by the end of round 12; 10 in round 11
        // is not enough.
        b.serve(10);
        assert_eq!(b.overdue(Round(12)), Some(Round(12)));
        let rest = b.serve(100);
        assert_eq!(rest.len(), 2);
        assert!(rest.iter().all(|p| p.last));
        assert!(b.is_empty());
    }
}
