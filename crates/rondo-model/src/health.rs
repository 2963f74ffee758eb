//! Disk health: when I/O errors and bad extents turn a disk suspect, then failed.
//!
//! The executors report every read that failed or returned data whose
//! checksum did not match (the read is served from the other replica
//! meanwhile); this module owns the rule that decides a disk's state from
//! those reports. The two kinds of report are evidence of different things:
//! an I/O error is the device's own word that it is failing, so
//! `errors_to_fail` of them within `window_rounds` rounds fail the disk; a
//! bad checksum is a fault of one extent (the array repairs it from the
//! replica), so only a rate of bad extents across many *distinct* extents
//! (`bad_extents_to_fail` within `bad_extent_window_rounds`) fails the disk:
//! the same bad extent read again and again counts once. The first report
//! of either kind makes the disk suspect. An operator's `fail` and `restore`
//! override both. Rebuilding is the state between a replacement and the
//! rebuild's completion.

use serde::{Deserialize, Serialize};

use crate::layout::Replica;
use crate::units::{DiskIndex, PlaybackRound, Round, TitleId};

/// One replica extent of one round of a title: a round's primary (`piece`
/// 0) or one backup piece (`piece` = its backup entry).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ExtentKey {
    pub title: TitleId,
    pub playback_round: PlaybackRound,
    pub replica: Replica,
    pub piece: u16,
}

/// The state of one disk.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiskState {
    Healthy,
    /// Errors seen, below the threshold: still serving.
    Suspect,
    /// Not serving: its reads go to the other replicas.
    Failed,
    /// A replacement is being filled from the other replicas; not serving yet.
    Rebuilding,
}

/// Thresholds (assumption: a few I/O errors within a short window mean a
/// dying disk rather than a transient fault; a dozen and more distinct bad
/// extents within ten minutes mean failing media rather than a few silently
/// corrupted sectors; operators can tune all four, `docs/assumptions.md`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HealthPolicy {
    /// I/O errors within `window_rounds` that fail a disk.
    pub errors_to_fail: u32,
    pub window_rounds: u64,
    /// Distinct bad extents within `bad_extent_window_rounds` that fail a disk.
    pub bad_extents_to_fail: u32,
    pub bad_extent_window_rounds: u64,
}

impl Default for HealthPolicy {
    fn default() -> Self {
        HealthPolicy {
            errors_to_fail: 3,
            window_rounds: 60,
            bad_extents_to_fail: 16,
            bad_extent_window_rounds: 600,
        }
    }
}

/// The health of every disk of an array.
#[derive(Clone, Debug)]
pub struct ArrayHealth {
    policy: HealthPolicy,
    state: Vec<DiskState>,
    /// Rounds of recent I/O errors per disk, oldest first.
    recent_errors: Vec<Vec<Round>>,
    /// Recent bad extents per disk, each once, with the round it was last
    /// reported bad in.
    recent_bad_extents: Vec<Vec<(Round, ExtentKey)>>,
    total_errors: Vec<u64>,
}

impl ArrayHealth {
    pub fn new(disks: u32, policy: HealthPolicy) -> ArrayHealth {
        ArrayHealth {
            policy,
            state: vec![DiskState::Healthy; disks as usize],
            recent_errors: vec![Vec::new(); disks as usize],
            recent_bad_extents: vec![Vec::new(); disks as usize],
            total_errors: vec![0; disks as usize],
        }
    }

    pub fn state(&self, disk: DiskIndex) -> DiskState {
        self.state[disk.index()]
    }

    pub fn total_errors(&self, disk: DiskIndex) -> u64 {
        self.total_errors[disk.index()]
    }

    /// Whether the disk serves reads.
    pub fn is_serving(&self, disk: DiskIndex) -> bool {
        matches!(self.state(disk), DiskState::Healthy | DiskState::Suspect)
    }

    pub fn policy(&self) -> HealthPolicy {
        self.policy
    }

    /// Distinct bad extents on `disk` within the window ending at `round`.
    pub fn recent_bad_extents(&self, disk: DiskIndex) -> usize {
        self.recent_bad_extents[disk.index()].len()
    }

    /// Records a bad checksum of `extent` on `disk` in `round`: a fault of
    /// that extent. The disk fails only when `bad_extents_to_fail` distinct
    /// extents went bad within the window. Returns the new state if it
    /// changed (`Some(Failed)`: fail the disk in the reservations).
    pub fn record_bad_extent(
        &mut self,
        disk: DiskIndex,
        extent: ExtentKey,
        round: Round,
    ) -> Option<DiskState> {
        let d = disk.index();
        self.total_errors[d] += 1;
        if !self.is_serving(disk) {
            return None;
        }
        let window = self.policy.bad_extent_window_rounds;
        let recent = &mut self.recent_bad_extents[d];
        recent.retain(|&(r, x)| r.plus(window) > round && x != extent);
        recent.push((round, extent));
        let next = if recent.len() as u32 >= self.policy.bad_extents_to_fail {
            DiskState::Failed
        } else {
            DiskState::Suspect
        };
        self.set(disk, next)
    }

    /// Records a failed read (an I/O error) on `disk` in `round`. Returns
    /// the new state if it changed; `Some(Failed)` means the caller must fail
    /// the disk in the reservations (`Reservations::fail_disk`).
    pub fn record_error(&mut self, disk: DiskIndex, round: Round) -> Option<DiskState> {
        let d = disk.index();
        self.total_errors[d] += 1;
        if !self.is_serving(disk) {
            return None;
        }
        // Errors of the last `window_rounds` rounds, this one included (an
        // error in round 0 counts like any other).
        let window = self.policy.window_rounds;
        let recent = &mut self.recent_errors[d];
        recent.retain(|&r| r.plus(window) > round);
        recent.push(round);
        let next = if recent.len() as u32 >= self.policy.errors_to_fail {
            DiskState::Failed
        } else {
            DiskState::Suspect
        };
        self.set(disk, next)
    }

    /// An operator marks the disk failed.
    pub fn fail(&mut self, disk: DiskIndex) -> Option<DiskState> {
        self.set(disk, DiskState::Failed)
    }

    /// A replacement device is being rebuilt.
    pub fn start_rebuild(&mut self, disk: DiskIndex) -> Option<DiskState> {
        self.set(disk, DiskState::Rebuilding)
    }

    /// The disk serves again (rebuild complete); its error history is cleared.
    pub fn restore(&mut self, disk: DiskIndex) -> Option<DiskState> {
        self.recent_errors[disk.index()].clear();
        self.recent_bad_extents[disk.index()].clear();
        self.set(disk, DiskState::Healthy)
    }

    fn set(&mut self, disk: DiskIndex, next: DiskState) -> Option<DiskState> {
        let current = &mut self.state[disk.index()];
        (*current != next).then(|| {
            *current = next;
            next
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_make_a_disk_suspect_then_failed_within_the_window() {
        let mut h = ArrayHealth::new(
            2,
            HealthPolicy {
                errors_to_fail: 3,
                window_rounds: 10,
                ..HealthPolicy::default()
            },
        );
        assert_eq!(
            h.record_error(DiskIndex(1), Round(100)),
            Some(DiskState::Suspect)
        );
        assert_eq!(
            h.record_error(DiskIndex(1), Round(105)),
            None,
            "still suspect"
        );
        // The first error left the window: two recent errors, still suspect.
        assert_eq!(h.record_error(DiskIndex(1), Round(112)), None);
        assert_eq!(h.state(DiskIndex(1)), DiskState::Suspect);
        assert_eq!(
            h.record_error(DiskIndex(1), Round(113)),
            Some(DiskState::Failed)
        );
        assert!(!h.is_serving(DiskIndex(1)));
        assert_eq!(
            h.record_error(DiskIndex(1), Round(114)),
            None,
            "a failed disk stays failed"
        );
        assert_eq!(h.total_errors(DiskIndex(1)), 5);
        assert_eq!(h.state(DiskIndex(0)), DiskState::Healthy);
    }

    fn extent(round: u32) -> ExtentKey {
        ExtentKey {
            title: TitleId(3),
            playback_round: PlaybackRound(round),
            replica: Replica::Primary,
            piece: 0,
        }
    }

    #[test]
    fn one_bad_extent_read_many_times_never_fails_the_disk() {
        let mut h = ArrayHealth::new(2, HealthPolicy::default());
        assert_eq!(
            h.record_bad_extent(DiskIndex(0), extent(5), Round(1)),
            Some(DiskState::Suspect)
        );
        for r in 2..100 {
            assert_eq!(h.record_bad_extent(DiskIndex(0), extent(5), Round(r)), None);
        }
        assert_eq!(h.state(DiskIndex(0)), DiskState::Suspect);
        assert_eq!(h.recent_bad_extents(DiskIndex(0)), 1);
        assert_eq!(h.total_errors(DiskIndex(0)), 99);
    }

    #[test]
    fn many_distinct_bad_extents_within_the_window_fail_the_disk() {
        let policy = HealthPolicy {
            bad_extents_to_fail: 4,
            bad_extent_window_rounds: 100,
            ..HealthPolicy::default()
        };
        let mut h = ArrayHealth::new(1, policy);
        // Three distinct extents, then the first leaves the window.
        for (x, r) in [(1, 0), (2, 10), (3, 20)] {
            h.record_bad_extent(DiskIndex(0), extent(x), Round(r));
        }
        assert_eq!(
            h.record_bad_extent(DiskIndex(0), extent(4), Round(150)),
            None
        );
        assert_eq!(h.recent_bad_extents(DiskIndex(0)), 1, "the others aged out");
        for x in 5..7 {
            assert_eq!(
                h.record_bad_extent(DiskIndex(0), extent(x), Round(151)),
                None
            );
        }
        assert_eq!(
            h.record_bad_extent(DiskIndex(0), extent(7), Round(152)),
            Some(DiskState::Failed),
            "four distinct bad extents within 100 rounds"
        );
    }

    #[test]
    fn operator_actions_override() {
        let mut h = ArrayHealth::new(3, HealthPolicy::default());
        assert_eq!(h.fail(DiskIndex(2)), Some(DiskState::Failed));
        assert_eq!(h.start_rebuild(DiskIndex(2)), Some(DiskState::Rebuilding));
        assert!(!h.is_serving(DiskIndex(2)));
        assert_eq!(
            h.record_error(DiskIndex(2), Round(1)),
            None,
            "errors on a rebuilding disk change nothing"
        );
        assert_eq!(h.restore(DiskIndex(2)), Some(DiskState::Healthy));
        assert_eq!(h.restore(DiskIndex(2)), None);
    }
}
