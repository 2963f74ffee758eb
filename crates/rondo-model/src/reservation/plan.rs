//! Round planning: which reads each disk does in a round, from the stream
//! records and the failed disks.

use super::{PlannedRead, Reservations, RoundChoice};
use crate::layout::Replica;
use crate::units::{DiskIndex, PlaybackRound, Round};

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
            let i = record.index(round);
            let charges = &self.titles[&record.title];
            if i >= record.end_playback_round {
                continue;
            }
            let read = |disk: DiskIndex, replica: Replica, backup_entry: usize, cost_ns: u64| {
                PlannedRead {
                    stream,
                    title: record.title,
                    playback_round: PlaybackRound(i as u32),
                    disk,
                    replica,
                    backup_entry: backup_entry as u16,
                    cost_ns,
                }
            };
            let primary = charges.primary(i);
            let backup = charges.backup(i);
            let backup_ok =
                !backup.is_empty() && backup.iter().all(|p| !self.failed[p.disk.index()]);
            let primary_ok = !self.failed[primary.disk.index()];
            let wants_backup =
                record.choice[i - record.first_playback_round] != RoundChoice::Primary;
            if backup_ok && (wants_backup || !primary_ok) {
                for (n, piece) in backup.iter().enumerate() {
                    per_disk[piece.disk.index()].push(read(
                        piece.disk,
                        Replica::Backup,
                        n,
                        piece.cost_ns,
                    ));
                }
            } else if primary_ok {
                per_disk[primary.disk.index()].push(read(
                    primary.disk,
                    Replica::Primary,
                    0,
                    primary.cost_ns,
                ));
            } else {
                lost.push(read(primary.disk, Replica::Primary, 0, primary.cost_ns));
            }
        }
        (per_disk, lost)
    }
}
