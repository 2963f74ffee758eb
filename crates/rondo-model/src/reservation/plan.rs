//! Round planning: which reads each disk does in a round, from the stream
//! records and the failed disks.

use super::{PlannedRead, ReadKind, Reservations, RoundChoice, StreamRecord, TitleCharges};
use crate::layout::Replica;
use crate::units::{DiskIndex, PlaybackRound, Round, StreamId};

impl Reservations {
    /// The reads each disk performs in `round` (the current round or later),
    /// per disk in stream order. A read whose disk has failed is replaced by
    /// the other replica's pieces; a read with no working replica is returned
    /// in the second list (data lost).
    pub fn plan_round(&self, round: Round) -> (Vec<Vec<PlannedRead>>, Vec<PlannedRead>) {
        let mut per_disk: Vec<Vec<PlannedRead>> = vec![Vec::new(); self.config.disks as usize];
        let mut lost = Vec::new();
        for (&stream, record) in &self.streams {
            if round < record.start_round {
                continue;
            }
            for i in record.shape.reads_at(record.offset(round)) {
                self.plan_read(stream, record, i, &mut per_disk, &mut lost);
            }
        }
        (per_disk, lost)
    }

    /// The reads one stream makes in `round`, per disk (as
    /// [`Reservations::plan_round`] plans them for every stream).
    pub fn plan_stream_round(
        &self,
        stream: StreamId,
        round: Round,
    ) -> (Vec<Vec<PlannedRead>>, Vec<PlannedRead>) {
        let mut per_disk: Vec<Vec<PlannedRead>> = vec![Vec::new(); self.config.disks as usize];
        let mut lost = Vec::new();
        if let Some(record) = self.streams.get(&stream)
            && round >= record.start_round
        {
            for i in record.shape.reads_at(record.offset(round)) {
                self.plan_read(stream, record, i, &mut per_disk, &mut lost);
            }
        }
        (per_disk, lost)
    }

    /// Plans one read of playback round `i` of `stream`.
    fn plan_read(
        &self,
        stream: StreamId,
        record: &StreamRecord,
        i: usize,
        per_disk: &mut [Vec<PlannedRead>],
        lost: &mut Vec<PlannedRead>,
    ) {
        // A round read with its group's first round goes with it: the same
        // replica, in the same request on each disk, charged nothing more.
        let joins = !record.shape.is_read_start(i);
        let i0 = record.shape.read_start(i);
        let charges: &TitleCharges = self.charges_for(record, i0);
        let read =
            |disk: DiskIndex, replica: Replica, backup_entry: usize, cost_ns: u64| PlannedRead {
                stream,
                title: record.title,
                playback_round: PlaybackRound(i as u32),
                disk,
                replica,
                backup_entry: backup_entry as u16,
                cost_ns: if joins { 0 } else { cost_ns },
                rerouted: false,
                joins_previous: joins,
                prefetch_bytes: 0,
                cache_hit: false,
            };
        let primary = charges.primary(i);
        let backup = charges.backup(i);
        let (primary0, backup0) = (charges.primary(i0), charges.backup(i0));
        debug_assert_eq!(primary.disk, primary0.disk, "a group lies on one disk");
        let backup_ok = !backup0.is_empty() && backup0.iter().all(|p| !self.failed[p.disk.index()]);
        let primary_ok = !self.failed[primary0.disk.index()];
        let wants_backup = record.choice[i0 - record.shape.first] != RoundChoice::Primary;
        let kind = record.shape.read_kind(charges, &record.choice, i);
        // A pair's block is in the drive's cache only if the disk served
        // the pair's first round; one back from a rebuild since has none,
        // and the round is read from the backup, whose time the failure
        // reservation holds, rather than from the media at a hit's charge.
        let round = record.start_round.plus(record.shape.read_offset(i) as u64);
        let cache_lost = matches!(kind, ReadKind::PairSecond(_))
            && !self.served_previous_round(primary0.disk, round);
        if backup_ok && (wants_backup || !primary_ok || cache_lost) {
            for (n, piece) in backup.iter().enumerate() {
                per_disk[piece.disk.index()].push(PlannedRead {
                    rerouted: !primary_ok,
                    ..read(piece.disk, Replica::Backup, n, piece.cost_ns)
                });
            }
        } else if primary_ok {
            // A drive-cache pair: its first read prefetches the second round,
            // which is then read from the drive cache.
            let (cost_ns, prefetch_bytes, cache_hit) = match kind {
                ReadKind::Single => (primary.cost_ns, 0, false),
                ReadKind::PairFirst(p) => (p.first_ns, p.prefetch_bytes, false),
                ReadKind::PairSecond(p) => (p.hit_ns, 0, true),
            };
            per_disk[primary.disk.index()].push(PlannedRead {
                prefetch_bytes,
                cache_hit,
                ..read(primary.disk, Replica::Primary, 0, cost_ns)
            });
        } else {
            lost.push(read(primary.disk, Replica::Primary, 0, primary.cost_ns));
        }
    }
}
