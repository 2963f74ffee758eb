//! The host's pace as admission sees it: measured admission for the one
//! resource the reservations do not model, the CPU that writes the rounds
//! into the clients' sockets.
//!
//! The reservation tables prove that the disks read every admitted
//! stream's rounds in time, and (with a network capacity) that the link
//! carries them; nothing there says the host has the CPU to hand them to
//! the sockets. On a full host the disks keep every deadline while the
//! sends fall behind and the clients stall (docs/capacity.md: at 15,000
//! streams on two cores, 0 deadline misses and thousands of stalls). So the
//! executor measures how late it delivers (the delivery lag: from a
//! release's hand-over to the send loops to the end of their writing it)
//! and reports it here; while the worst lag of the round in progress or the
//! one before is over the limit, new streams are refused (a 503 with reason
//! `host`) instead of admitted onto a host that is already late. Seed 001
//! §7 admits by measured waits the same way (max w_ij < δ_S − δ_ov); here
//! the wait is the host's, not a storage node's.
//!
//! A measurement, not a proof: the lag shows the shortage only once the
//! host is late, and it cannot see another process about to take the CPU.
//! `rondo serve` leaves it off unless asked (`--delivery-lag-max-rounds`):
//! on a 2-core host shared with its load generator it refused half of
//! 15,000 arriving streams, and half of those it admitted still stalled
//! (docs/capacity.md, "Refusing when the host is behind").
//!
//! The same module remembers how late the disks ended their batches past
//! the model's instants ([`HostPace::batch_late_ns`]): a late start leaves
//! that much more of its round. That does not refuse a stream; it only
//! moves a start to the next boundary.
//!
//! A stream asked for again after a takeover (`AdmitRequest::prior`) is not
//! refused here: it replaces load the host carried a moment ago. The
//! simulator, which has no host, never reports a lag, so it never refuses
//! for one.

use crate::reservation::Rejection;

/// What the array remembers of the executor's delivery lag, and of how
/// late its disks ended their batches.
#[derive(Clone, Debug, Default)]
pub(crate) struct HostPace {
    /// Refuse new streams while a recent lag is over this; `None`: never.
    lag_max_ns: Option<u64>,
    /// The worst lag reported in the round in progress.
    this_round_ns: u64,
    /// The worst lag reported in the round before it.
    last_round_ns: u64,
    /// The latest a disk ended a batch past the model's end for it, in the
    /// round in progress and the one before (see [`HostPace::batch_late_ns`]).
    batch_late_this_round_ns: u64,
    batch_late_last_round_ns: u64,
}

impl HostPace {
    pub(crate) fn new(lag_max_ns: Option<u64>) -> HostPace {
        HostPace {
            lag_max_ns,
            ..HostPace::default()
        }
    }

    /// A lag measured in the round in progress.
    pub(crate) fn observe(&mut self, lag_ns: u64) {
        self.this_round_ns = self.this_round_ns.max(lag_ns);
    }

    /// A disk ended a batch `late_ns` after the model's end for it.
    pub(crate) fn observe_batch_late(&mut self, late_ns: u64) {
        self.batch_late_this_round_ns = self.batch_late_this_round_ns.max(late_ns);
    }

    /// How much later than the model the disks ended their batches lately
    /// (the round in progress and the one before): what a late start must
    /// leave of its round beyond the fixed allowance. A late start is a
    /// promise made against the model's instants with little of the round
    /// left; on a host that has just run its disks' batches late (its
    /// scheduling, a device slower than the model), the same promise needs
    /// that much more room, or the stream starts at the next boundary.
    /// Measured: on a saturated 2-core host, late starts' batches that the
    /// model ended in time ended up to 60 ms after their round
    /// (docs/capacity.md, "Late starts on a host that runs late").
    pub(crate) fn batch_late_ns(&self) -> u64 {
        self.batch_late_this_round_ns
            .max(self.batch_late_last_round_ns)
    }

    /// A round begins: the round in progress becomes the one before.
    pub(crate) fn next_round(&mut self) {
        self.last_round_ns = std::mem::take(&mut self.this_round_ns);
        self.batch_late_last_round_ns = std::mem::take(&mut self.batch_late_this_round_ns);
    }

    /// The worst lag of the round in progress and the one before.
    pub(crate) fn recent_lag_ns(&self) -> u64 {
        self.this_round_ns.max(self.last_round_ns)
    }

    /// Whether a new stream may be admitted as far as the host's pace goes.
    pub(crate) fn check(&self) -> Result<(), Rejection> {
        let lag_ns = self.recent_lag_ns();
        match self.lag_max_ns {
            Some(lag_max_ns) if lag_ns > lag_max_ns => {
                Err(Rejection::HostBehind { lag_ns, lag_max_ns })
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lag_over_the_limit_refuses_for_its_round_and_the_next_only() {
        let mut pace = HostPace::new(Some(250));
        assert!(pace.check().is_ok());
        pace.observe(100);
        pace.observe(250);
        assert!(pace.check().is_ok(), "at the limit is not over it");
        pace.observe(400);
        assert_eq!(
            pace.check(),
            Err(Rejection::HostBehind {
                lag_ns: 400,
                lag_max_ns: 250
            })
        );
        pace.next_round();
        pace.observe(10);
        assert!(pace.check().is_err(), "the round before still counts");
        pace.next_round();
        assert!(pace.check().is_ok(), "two rounds on, the host caught up");
    }

    #[test]
    fn a_late_batch_counts_for_its_round_and_the_next_only() {
        let mut pace = HostPace::new(None);
        assert_eq!(pace.batch_late_ns(), 0);
        pace.observe_batch_late(3_000_000);
        pace.observe_batch_late(60_000_000);
        pace.observe_batch_late(1_000_000);
        assert_eq!(pace.batch_late_ns(), 60_000_000, "the latest of the round");
        pace.next_round();
        pace.observe_batch_late(2_000_000);
        assert_eq!(
            pace.batch_late_ns(),
            60_000_000,
            "the round before still counts"
        );
        pace.next_round();
        assert_eq!(pace.batch_late_ns(), 2_000_000);
        pace.next_round();
        assert_eq!(pace.batch_late_ns(), 0);
        // It never refuses a stream by itself.
        pace.observe_batch_late(u64::MAX);
        assert!(pace.check().is_ok());
    }

    #[test]
    fn without_a_limit_no_lag_refuses() {
        let mut pace = HostPace::new(None);
        pace.observe(u64::MAX);
        assert!(pace.check().is_ok());
    }
}
