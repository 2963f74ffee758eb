//! Degraded mode: failed disks, the streams that lose data, the time left
//! for writes, and which replica serves a read after an error.

use super::Reservations;
use crate::layout::Replica;
use crate::reservation::Charge;
use crate::units::{DiskIndex, Round, StreamId};

impl Reservations {
    pub fn is_failed(&self, disk: DiskIndex) -> bool {
        self.failed[disk.index()]
    }

    /// Marks a disk failed from the current round on: reads of its data go to
    /// the backups. Reservations made earlier stay as they are: under
    /// `minimum` and `mirroring` they already cover the rerouted reads.
    /// Returns the streams that can no longer be served because some round
    /// they still need has no replica on a working disk (a second failure, or
    /// any failure under `none`); the caller stops them with a clear error and
    /// releases them.
    pub fn fail_disk(&mut self, disk: DiskIndex) -> Vec<StreamId> {
        self.failed[disk.index()] = true;
        self.streams_losing_data()
    }

    /// Like [`Reservations::fail_disk`] for a failure that takes effect at
    /// `from_round` (the first round not planned yet): only rounds a stream
    /// reads from there on count.
    pub fn fail_disk_from(&mut self, disk: DiskIndex, from_round: Round) -> Vec<StreamId> {
        self.failed[disk.index()] = true;
        self.streams_losing_data_from(from_round)
    }

    /// Streams with a remaining round whose data has no working replica.
    pub fn streams_losing_data(&self) -> Vec<StreamId> {
        self.streams_losing_data_from(self.current_round)
    }

    /// Streams with a round read at or after `from_round` whose data has no
    /// working replica.
    pub fn streams_losing_data_from(&self, from_round: Round) -> Vec<StreamId> {
        let working = |c: &Charge| !self.failed[c.disk.index()];
        self.streams
            .iter()
            .filter(|(_, record)| {
                let charges = &self.titles[&record.title];
                let q = record.offset(from_round.max(record.start_round));
                let first = record.shape.first_read_from(q);
                (first..record.shape.end).any(|i| {
                    let backup = charges.backup(i);
                    !working(&charges.primary(i))
                        && (backup.is_empty() || !backup.iter().all(working))
                })
            })
            .map(|(&id, _)| id)
            .collect()
    }

    /// The write credits of `round`, per disk: the time each disk has left
    /// after admitted streams' reservations and `used_ns[disk]` of other
    /// writes (e.g. a rebuild's copies). A write may use on each disk at most
    /// that disk's credit; a failed disk's whole round is free
    /// ([`Reservations::unreserved_ns`]).
    pub fn write_credits_ns(&self, round: Round, used_ns: &[u64]) -> Vec<u64> {
        DiskIndex::all(self.config.disks)
            .map(|d| {
                let used = used_ns.get(d.index()).copied().unwrap_or(0);
                self.unreserved_ns(d, round).saturating_sub(used)
            })
            .collect()
    }

    /// Disk time on `disk` in `round` that no admitted stream has reserved:
    /// what writes (ingest, rebuild) may use. A failed disk serves no reads,
    /// so all of its round is free for rebuild writes.
    pub fn unreserved_ns(&self, disk: DiskIndex, round: Round) -> u64 {
        let budget = self.config.budget_ns();
        if self.failed[disk.index()] {
            return budget;
        }
        budget.saturating_sub(self.reserved_ns(disk, round))
    }

    /// Marks a disk serving again (after rebuild).
    pub fn restore_disk(&mut self, disk: DiskIndex) {
        self.failed[disk.index()] = false;
        self.restored_at[disk.index()] = Some(self.current_round);
    }

    /// Whether `disk` served (was not failed) when round `round − 1`'s
    /// reads were planned: a drive-cache pair's block read then is in its
    /// cache in `round`.
    pub(super) fn served_previous_round(&self, disk: DiskIndex, round: Round) -> bool {
        !self.failed[disk.index()]
            && self.restored_at[disk.index()].is_none_or(|at| at.0 + 1 < round.0)
    }
}

/// Which replica serves a stream-round after its read of `failed` returned
/// an I/O error or data failing its checksum: the other one, when every
/// disk holding it serves (`serving`); `None` when it does not (or there is
/// no backup): the round's data is lost for that stream. Used by the server
/// when a planned read fails.
pub fn replica_after_error(
    failed: Replica,
    primary_disk: DiskIndex,
    backup_disks: &[DiskIndex],
    serving: impl Fn(DiskIndex) -> bool,
) -> Option<Replica> {
    match failed {
        Replica::Primary => (!backup_disks.is_empty() && backup_disks.iter().all(|&d| serving(d)))
            .then_some(Replica::Backup),
        Replica::Backup => serving(primary_disk).then_some(Replica::Primary),
    }
}
