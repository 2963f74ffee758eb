//! Disk health: when I/O errors and bad checksums turn a disk suspect, then failed.
//!
//! The server reports every read that failed or returned data whose checksum
//! did not match (the read is served from the other replica meanwhile); this
//! module owns the rule that decides a disk's state from those reports:
//! the first error makes it suspect, `errors_to_fail` errors within
//! `window_rounds` rounds make it failed. An operator's `fail` and
//! `restore` override it. Rebuilding is the state between a replacement and
//! the rebuild's completion.

use serde::{Deserialize, Serialize};

use crate::units::{DiskIndex, Round};

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

/// Thresholds (assumption: a few errors within a short window mean a dying
/// disk rather than a transient fault; operators can tune both).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthPolicy {
    pub errors_to_fail: u32,
    pub window_rounds: u64,
}

impl Default for HealthPolicy {
    fn default() -> Self {
        HealthPolicy {
            errors_to_fail: 3,
            window_rounds: 60,
        }
    }
}

/// The health of every disk of an array.
#[derive(Clone, Debug)]
pub struct ArrayHealth {
    policy: HealthPolicy,
    state: Vec<DiskState>,
    /// Rounds of recent errors per disk, oldest first.
    recent_errors: Vec<Vec<Round>>,
    total_errors: Vec<u64>,
}

impl ArrayHealth {
    pub fn new(disks: u32, policy: HealthPolicy) -> ArrayHealth {
        ArrayHealth {
            policy,
            state: vec![DiskState::Healthy; disks as usize],
            recent_errors: vec![Vec::new(); disks as usize],
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

    /// Records a failed read or a bad checksum on `disk` in `round`. Returns
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
