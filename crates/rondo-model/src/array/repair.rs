//! Per-extent faults: bad extents, their repairs, and rounds with no good
//! replica.
//!
//! A checksum error is a fault of one replica extent, not of its disk (the
//! disk's health hears of it too, and fails the disk only at a rate of
//! distinct bad extents: `health`). This module owns what the array does
//! about the extent: it is marked bad and a repair is queued, the same copy
//! a rebuild would make of it (`rebuild::copy_task`: read the other replica,
//! verify, write over the bad one), run in unreserved disk time after the
//! re-reads and before the rebuild's copies. A repair that completes clears
//! the mark. When the other replica of a bad extent is bad too (or its disk
//! has failed), the round has no good replica: it is *lost*, and only the
//! streams that reach it stop (`AbortReason::NoGoodReplica`); the disks and
//! every other round keep serving, and a new stream that needs a lost round
//! is refused (`Rejection::DataLost`). Lost rounds are kept until their
//! title is removed. The executor keeps both sets across restarts: it saves
//! [`ExtentFaults`] when they change and gives them back at start
//! ([`super::Array::restore_extent_faults`]), so a restart neither forgets a
//! pending repair nor admits a stream into a round it knows is lost.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::Serialize;

use super::command::CopyId;
use crate::health::ExtentKey;
use crate::layout::TitleLayout;
use crate::rebuild::{ChargedCopy, CopyTask, copy_task, fit_copies};
use crate::reservation::Reservations;
use crate::units::{DiskIndex, PlaybackRound, Round, TitleId};

/// A bad replica extent waiting for its repair.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct BadExtent {
    disk: DiskIndex,
    /// The repair copy handed out, if any.
    copy: Option<CopyId>,
}

/// What marking an extent bad found.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Marked {
    /// Newly bad: a repair is queued.
    Queued,
    /// Already known bad (its repair is queued or running), or the round
    /// is already lost.
    Known,
    /// The other replica is bad too: the round has no good replica.
    Lost,
}

/// A round of a title with no good replica, for reports.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct LostRound {
    pub title: TitleId,
    pub playback_round: PlaybackRound,
}

/// The fault state an executor keeps across restarts: the bad extents
/// waiting for their repair (with the disk each is on) and the lost rounds,
/// each in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ExtentFaults {
    pub bad: Vec<(ExtentKey, DiskIndex)>,
    pub lost: Vec<LostRound>,
}

/// The array's per-extent fault state.
#[derive(Clone, Debug, Default)]
pub struct Repairs {
    bad: BTreeMap<ExtentKey, BadExtent>,
    /// Repairs waiting for disk time, in the order their faults came.
    queue: VecDeque<(ExtentKey, CopyTask)>,
    /// Repairs handed out and not reported.
    outstanding: BTreeMap<CopyId, ExtentKey>,
    lost: BTreeSet<LostRound>,
    /// Extents repaired lately, with the round each repair completed in: a
    /// read of such an extent made in that round or before may have read
    /// the bad bytes before the repair wrote over them (the copier writes
    /// outside the disk thread's order, and an emulated read reports at
    /// its model instant), so its failure is not a new fault.
    repaired_in: BTreeMap<ExtentKey, Round>,
}

/// Rounds a repair's completion is remembered against stale failures of
/// reads made before it. Assumption: 64, far more than a read stays in
/// flight (its round, or a backup window's k + L rounds).
const REPAIRED_MEMORY_ROUNDS: u64 = 64;

impl Repairs {
    pub fn is_lost(&self, title: TitleId, playback_round: PlaybackRound) -> bool {
        self.lost.contains(&LostRound {
            title,
            playback_round,
        })
    }

    /// Rounds with no good replica, in title and round order.
    pub fn lost(&self) -> impl Iterator<Item = LostRound> + '_ {
        self.lost.iter().copied()
    }

    /// The first lost round of `title` in `rounds`, if any.
    pub fn first_lost_in(
        &self,
        title: TitleId,
        rounds: std::ops::Range<PlaybackRound>,
    ) -> Option<PlaybackRound> {
        let at = |playback_round| LostRound {
            title,
            playback_round,
        };
        self.lost
            .range(at(rounds.start)..at(rounds.end))
            .next()
            .map(|l| l.playback_round)
    }

    /// What an executor keeps across restarts.
    pub fn faults(&self) -> ExtentFaults {
        ExtentFaults {
            bad: self.bad.iter().map(|(k, b)| (*k, b.disk)).collect(),
            lost: self.lost.iter().copied().collect(),
        }
    }

    /// Bad extents not repaired yet.
    pub fn bad_count(&self) -> usize {
        self.bad.len()
    }

    /// Rounds with no good replica.
    pub fn lost_count(&self) -> usize {
        self.lost.len()
    }

    pub fn is_bad(&self, key: &ExtentKey) -> bool {
        self.bad.contains_key(key)
    }

    /// Marks `key` (on `disk`, of a title placed as `layout`) bad, found
    /// by a read made in `read_round` (`None`: not by a read, a fault kept
    /// from before a restart).
    pub fn mark_bad(
        &mut self,
        key: ExtentKey,
        disk: DiskIndex,
        layout: &TitleLayout,
        read_round: Option<Round>,
    ) -> Marked {
        if self.is_lost(key.title, key.playback_round) {
            return Marked::Known;
        }
        if self.bad.contains_key(&key) {
            return Marked::Known;
        }
        if let (Some(read), Some(&repaired)) = (read_round, self.repaired_in.get(&key))
            && read <= repaired
        {
            // Read before its repair was known to be written.
            return Marked::Known;
        }
        let other_bad = self.bad.keys().any(|k| {
            k.title == key.title
                && k.playback_round == key.playback_round
                && k.replica != key.replica
        });
        let task = copy_task(
            key.title,
            layout,
            key.playback_round,
            key.replica,
            key.piece,
        );
        match task {
            Some(task) if !other_bad => {
                self.bad.insert(key, BadExtent { disk, copy: None });
                self.queue.push_back((key, task));
                Marked::Queued
            }
            // No other replica stored, or it is bad too.
            _ => {
                self.mark_lost(key.title, key.playback_round);
                Marked::Lost
            }
        }
    }

    /// The round has no good replica: its bad marks and queued repairs go.
    /// Returns whether it was newly lost.
    pub fn mark_lost(&mut self, title: TitleId, playback_round: PlaybackRound) -> bool {
        let same = |k: &ExtentKey| k.title == title && k.playback_round == playback_round;
        self.bad.retain(|k, _| !same(k));
        self.queue.retain(|(k, _)| !same(k));
        self.lost.insert(LostRound {
            title,
            playback_round,
        })
    }

    /// The repairs to run in `round` (as [`fit_copies`]); repairs onto a
    /// disk that no longer serves are dropped (its rebuild rewrites every
    /// extent), and those whose source disk failed make their round lost
    /// (returned second).
    pub fn plan(
        &mut self,
        reservations: &Reservations,
        round: Round,
        used_ns: &[u64],
        read_ns: impl Fn(DiskIndex, &[(u64, u64)]) -> u64,
        write_ns: impl Fn(&[(u64, u64)]) -> u64,
    ) -> (Vec<(ExtentKey, ChargedCopy)>, Vec<LostRound>) {
        if self.queue.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let dropped: Vec<ExtentKey> = self
            .queue
            .iter()
            .filter(|(_, t)| reservations.is_failed(t.write_to.disk))
            .map(|(k, _)| *k)
            .collect();
        for k in &dropped {
            self.bad.remove(k);
        }
        self.queue
            .retain(|(_, t)| !reservations.is_failed(t.write_to.disk));
        let mut tasks: VecDeque<CopyTask> = self.queue.iter().map(|(_, t)| t.clone()).collect();
        let (run, lost) = fit_copies(&mut tasks, reservations, round, used_ns, read_ns, write_ns);
        // `fit_copies` takes from the front, in order: the first
        // `run + lost` queued repairs are the ones it took.
        let taken: Vec<(ExtentKey, CopyTask)> =
            self.queue.drain(..run.len() + lost.len()).collect();
        let mut charged = Vec::with_capacity(run.len());
        let mut run = run.into_iter();
        let mut lost_rounds = Vec::new();
        for (key, task) in taken {
            if lost.contains(&task) {
                if self.mark_lost(key.title, key.playback_round) {
                    lost_rounds.push(LostRound {
                        title: key.title,
                        playback_round: key.playback_round,
                    });
                }
            } else {
                charged.push((key, run.next().expect("one charge per copy run")));
            }
        }
        (charged, lost_rounds)
    }

    /// A repair of `key` was handed out as `copy`.
    pub fn handed_out(&mut self, copy: CopyId, key: ExtentKey) {
        if let Some(b) = self.bad.get_mut(&key) {
            b.copy = Some(copy);
        }
        self.outstanding.insert(copy, key);
    }

    /// Whether `copy` is a repair (not a rebuild's copy).
    pub fn is_repair(&self, copy: CopyId) -> bool {
        self.outstanding.contains_key(&copy)
    }

    /// The repair `copy` ended; returns its extent.
    pub fn done(&mut self, copy: CopyId) -> Option<ExtentKey> {
        self.outstanding.remove(&copy)
    }

    /// The repaired extent is good again, its repair reported in `round`.
    pub fn repaired(&mut self, key: &ExtentKey, round: Round) -> bool {
        let was_bad = self.bad.remove(key).is_some();
        if was_bad {
            self.repaired_in
                .retain(|_, r| r.plus(REPAIRED_MEMORY_ROUNDS) >= round);
            self.repaired_in.insert(*key, round);
        }
        was_bad
    }

    /// A repair that could not write: queue it again (a disk that keeps
    /// failing its writes fails on I/O errors and its repairs are dropped).
    pub fn retry(&mut self, key: ExtentKey, layout: &TitleLayout) {
        if let Some(b) = self.bad.get_mut(&key) {
            b.copy = None;
            if let Some(task) = copy_task(
                key.title,
                layout,
                key.playback_round,
                key.replica,
                key.piece,
            ) {
                self.queue.push_back((key, task));
            }
        }
    }

    /// `disk` stopped serving: its bad extents are rewritten by its rebuild.
    pub fn forget_disk(&mut self, disk: DiskIndex) {
        self.bad.retain(|_, b| b.disk != disk);
        self.queue.retain(|(_, t)| t.write_to.disk != disk);
    }

    /// `title` was removed.
    pub fn forget_title(&mut self, title: TitleId) {
        self.bad.retain(|k, _| k.title != title);
        self.queue.retain(|(k, _)| k.title != title);
        self.lost.retain(|l| l.title != title);
    }

    /// Checks the state; panics with what is wrong.
    pub fn check_invariants(&self) {
        for (key, _) in &self.queue {
            assert!(
                self.bad.contains_key(key),
                "a queued repair's extent is marked bad"
            );
            assert!(
                !self.is_lost(key.title, key.playback_round),
                "no repair of a lost round"
            );
        }
        for key in self.bad.keys() {
            assert!(
                !self.bad.keys().any(|k| k.title == key.title
                    && k.playback_round == key.playback_round
                    && k.replica != key.replica),
                "both replicas of a round bad but the round not lost"
            );
        }
    }
}
