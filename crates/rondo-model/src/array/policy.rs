//! The retrieval-policy seam: which reads a disk does in a round and in
//! which order it serves them.
//!
//! Admission reserves per stream and round; the policy turns the round's
//! reserved reads of one disk into that disk's requests. Seed 000's policy,
//! the only one today, reads one request per stream per round and serves
//! them in C-SCAN order. Seed 003's Sweep&Prefetch and GPMP go behind the
//! same trait, so the simulator and the server run the same policy code.

use crate::disk::Scheduler;
use crate::reservation::PlannedRead;
use crate::units::{DiskIndex, Round};

/// Chooses one disk's reads for one round.
pub trait RetrievalPolicy: std::fmt::Debug + Send {
    /// The name used in configurations and reports.
    fn name(&self) -> &'static str;

    /// The reads `disk` does in `round`, from what the reservations planned
    /// (per stream, in stream order). The default policy keeps them all.
    fn disk_reads(
        &mut self,
        disk: DiskIndex,
        round: Round,
        planned: Vec<PlannedRead>,
    ) -> Vec<PlannedRead>;

    /// The order the disk serves its round's commands in.
    fn scheduler(&self) -> Scheduler;
}

/// Seed 000 §2.3: one request per stream per round on the disk holding its
/// data, served in C-SCAN order (the order the round bound assumes).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct OneReadPerStream;

impl RetrievalPolicy for OneReadPerStream {
    fn name(&self) -> &'static str {
        "one-read-per-stream"
    }

    fn disk_reads(
        &mut self,
        _: DiskIndex,
        _: Round,
        planned: Vec<PlannedRead>,
    ) -> Vec<PlannedRead> {
        planned
    }

    fn scheduler(&self) -> Scheduler {
        Scheduler::Cscan
    }
}
