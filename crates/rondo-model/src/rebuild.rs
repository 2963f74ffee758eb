//! Rebuilding a replaced disk from the surviving replicas.
//!
//! When disk k is replaced, everything it held must be copied back from the
//! other replica: each primary round on k is read from its backup pieces,
//! and each backup piece on k is read from its primary (only the piece's
//! fragment ranges). Data goes back to the same extents, so the rebuilt disk
//! is byte-identical to the lost one. This module owns which copies exist
//! ([`rebuild_tasks`]) and which of them run in a round
//! ([`RebuildQueue::next_round`]): a copy runs only where its reads fit in the
//! source disks' unreserved time and its writes in the rebuilt disk's, so
//! admitted streams never lose disk time to the rebuild. The same copies
//! repair single bad extents ([`copy_task`], [`fit_copies`]): the array
//! queues one per extent whose checksum failed. The server performs the
//! copies; the simulator can time them.

use std::collections::VecDeque;
use std::ops::Range;

use serde::Serialize;

use crate::layout::{Replica, TitleLayout};
use crate::reservation::Reservations;
use crate::units::{DiskIndex, PlaybackRound, Round, TitleId};

/// One request's extents on one disk, as `(first sector, sector count)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DiskExtents {
    pub disk: DiskIndex,
    pub extents: Vec<(u64, u64)>,
}

/// One copy onto the rebuilt disk: one round's primary, or one backup piece.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CopyTask {
    pub title: TitleId,
    /// The title's round copied.
    pub round: PlaybackRound,
    /// What is rebuilt: the round's primary, or its backup piece `backup_entry`.
    pub target: Replica,
    pub backup_entry: u16,
    /// Where the data is read: the backup pieces (rebuilding a primary) or
    /// the primary (rebuilding a backup piece).
    pub read_from: Vec<DiskExtents>,
    /// For a backup piece: the byte ranges of the round's data it holds, in
    /// stored order (what to cut out of the primary's data).
    pub fragments: Vec<Range<u64>>,
    /// The extents written on the rebuilt disk.
    pub write_to: DiskExtents,
    pub bytes: u64,
}

/// Every copy that rebuilds `disk`, over the titles' layouts, in title and
/// round order (so a rebuilt title becomes whole early in the rebuild).
pub fn rebuild_tasks<'a>(
    disk: DiskIndex,
    titles: impl IntoIterator<Item = (TitleId, &'a TitleLayout)>,
) -> Vec<CopyTask> {
    let mut tasks = Vec::new();
    for (title, layout) in titles {
        for (round, r) in layout.rounds().iter().enumerate() {
            let round = PlaybackRound(round as u32);
            if r.primary_disk == disk {
                tasks.extend(copy_task(title, layout, round, Replica::Primary, 0));
            }
            for (entry, b) in r.backups.iter().enumerate() {
                if b.disk == disk {
                    tasks.extend(copy_task(
                        title,
                        layout,
                        round,
                        Replica::Backup,
                        entry as u16,
                    ));
                }
            }
        }
    }
    tasks
}

/// The copy that rewrites one replica extent of `round` from the other
/// replica: the round's primary (from its backup pieces) or its backup
/// piece `backup_entry` (cut from the primary). `None` when there is
/// nothing to copy (an empty primary, or no backup stored). A rebuild is
/// every such copy of one disk; a repair is one of them.
pub fn copy_task(
    title: TitleId,
    layout: &TitleLayout,
    round: PlaybackRound,
    target: Replica,
    backup_entry: u16,
) -> Option<CopyTask> {
    let r = layout.rounds().get(round.index())?;
    let pairs = |x: &crate::layout::Extents| -> Vec<(u64, u64)> {
        x.as_slice()
            .iter()
            .map(|e| (e.first_sector(), e.sector_count()))
            .collect()
    };
    match target {
        Replica::Primary => {
            if r.primary.is_empty() || r.backups.is_empty() {
                return None;
            }
            Some(CopyTask {
                title,
                round,
                target: Replica::Primary,
                backup_entry: 0,
                read_from: r
                    .backups
                    .iter()
                    .map(|b| DiskExtents {
                        disk: b.disk,
                        extents: pairs(&b.extents),
                    })
                    .collect(),
                fragments: Vec::new(),
                write_to: DiskExtents {
                    disk: r.primary_disk,
                    extents: pairs(&r.primary),
                },
                bytes: r.primary.bytes(),
            })
        }
        Replica::Backup => {
            let b = r.backups.get(backup_entry as usize)?;
            Some(CopyTask {
                title,
                round,
                target: Replica::Backup,
                backup_entry,
                read_from: vec![DiskExtents {
                    disk: r.primary_disk,
                    extents: pairs(&r.primary),
                }],
                fragments: b.fragments.clone(),
                write_to: DiskExtents {
                    disk: b.disk,
                    extents: pairs(&b.extents),
                },
                bytes: b.extents.bytes(),
            })
        }
    }
}

/// Why a copy (of a rebuild or a repair) could not be moved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum CopyFailure {
    /// The source replica's bytes fail their checksum: the extent has no
    /// good replica (a fault of the data, not of a device).
    SourceBad(String),
    /// A device reported an error reading the source or writing the target.
    Io { disk: DiskIndex, detail: String },
    /// Anything else (the title is gone, the executor stopped).
    Other(String),
}

impl std::fmt::Display for CopyFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CopyFailure::SourceBad(e) | CopyFailure::Other(e) => f.write_str(e),
            CopyFailure::Io { disk, detail } => write!(f, "I/O error on disk {disk}: {detail}"),
        }
    }
}

/// A copy granted a round, with what it was charged: each source read (in
/// `read_from` order) and the write on the rebuilt disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChargedCopy {
    pub task: CopyTask,
    pub read_charges_ns: Vec<u64>,
    pub write_charge_ns: u64,
}

/// The rebuild of one disk, round by round.
#[derive(Clone, Debug)]
pub struct RebuildQueue {
    disk: DiskIndex,
    pending: VecDeque<CopyTask>,
    total_bytes: u64,
    done_bytes: u64,
}

/// Progress of a rebuild.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RebuildProgress {
    pub disk: DiskIndex,
    pub done_bytes: u64,
    pub total_bytes: u64,
    pub tasks_left: usize,
}

impl RebuildQueue {
    pub fn new(disk: DiskIndex, tasks: Vec<CopyTask>) -> RebuildQueue {
        let total_bytes = tasks.iter().map(|t| t.bytes).sum();
        RebuildQueue {
            disk,
            pending: tasks.into(),
            total_bytes,
            done_bytes: 0,
        }
    }

    pub fn disk(&self) -> DiskIndex {
        self.disk
    }

    pub fn is_done(&self) -> bool {
        self.pending.is_empty()
    }

    pub fn progress(&self) -> RebuildProgress {
        RebuildProgress {
            disk: self.disk,
            done_bytes: self.done_bytes,
            total_bytes: self.total_bytes,
            tasks_left: self.pending.len(),
        }
    }

    /// The copies to run in `round` ([`fit_copies`]), counted as handed out.
    pub fn next_round(
        &mut self,
        reservations: &Reservations,
        round: Round,
        used_ns: &[u64],
        read_ns: impl Fn(DiskIndex, &[(u64, u64)]) -> u64,
        write_ns: impl Fn(&[(u64, u64)]) -> u64,
    ) -> (Vec<ChargedCopy>, Vec<CopyTask>) {
        let (run, lost) = fit_copies(
            &mut self.pending,
            reservations,
            round,
            used_ns,
            read_ns,
            write_ns,
        );
        self.done_bytes += run.iter().map(|c| c.task.bytes).sum::<u64>();
        self.done_bytes += lost.iter().map(|t| t.bytes).sum::<u64>();
        (run, lost)
    }
}

/// The copies of `pending` to run in `round`: in order, as many as fit, each
/// charged `read_ns(disk, extents)` on every source disk and
/// `write_ns(extents)` on its target disk against the time admitted streams
/// left unreserved (`Reservations::write_credits_ns`) less `used_ns[disk]`
/// already granted to others (re-reads after errors, earlier copies). Stops
/// at the first copy that does not fit, so copies complete in order. A copy
/// whose source disk has failed cannot run; it is returned in the second
/// list (no working replica to copy from). Each copy that runs comes with
/// its charges, so the caller need not compute them again.
pub fn fit_copies(
    pending: &mut VecDeque<CopyTask>,
    reservations: &Reservations,
    round: Round,
    used_ns: &[u64],
    read_ns: impl Fn(DiskIndex, &[(u64, u64)]) -> u64,
    write_ns: impl Fn(&[(u64, u64)]) -> u64,
) -> (Vec<ChargedCopy>, Vec<CopyTask>) {
    let disks = reservations.config().disks as usize;
    let mut left = reservations.write_credits_ns(round, used_ns);
    let mut run = Vec::new();
    let mut lost = Vec::new();
    while let Some(task) = pending.front() {
        if task
            .read_from
            .iter()
            .any(|s| reservations.is_failed(s.disk))
        {
            lost.push(pending.pop_front().expect("front exists"));
            continue;
        }
        let mut need = vec![0u64; disks];
        let read_charges_ns: Vec<u64> = task
            .read_from
            .iter()
            .map(|s| read_ns(s.disk, &s.extents))
            .collect();
        for (s, ns) in task.read_from.iter().zip(&read_charges_ns) {
            need[s.disk.index()] += ns;
        }
        let write_charge_ns = write_ns(&task.write_to.extents);
        need[task.write_to.disk.index()] += write_charge_ns;
        if need.iter().zip(&left).any(|(n, l)| n > l) {
            break;
        }
        for (l, n) in left.iter_mut().zip(&need) {
            *l -= n;
        }
        run.push(ChargedCopy {
            task: pending.pop_front().expect("front exists"),
            read_charges_ns,
            write_charge_ns,
        });
    }
    (run, lost)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{ArrayAllocator, BackupParams, LayoutParams, ReplicaPlacement, TitlePlan};
    use crate::reservation::{Charge, ReservationConfig, Scheme, TitleCharges};
    use crate::units::DiskIndex;

    fn layout(disks: u32, rounds: &[u64], b_d: Option<u64>) -> TitleLayout {
        let params = LayoutParams {
            disk_count: disks,
            stride_bytes: 64 * 1024,
            block_bytes: 16 * 1024,
            backup: Some(BackupParams {
                placement: ReplicaPlacement::Deterministic,
                backup_block_bytes: b_d,
                fragment_sequence: Default::default(),
                round_robin_counter: Default::default(),
                disk_groups: 1,
            }),
            segment_rounds: 1,
            stripe_disks: 0,
        };
        let plan = TitlePlan::new(rounds, &params, DiskIndex(0), 1).unwrap();
        ArrayAllocator::uniform(disks, 100).place(&plan).unwrap()
    }

    #[test]
    fn tasks_cover_exactly_what_the_disk_held() {
        for b_d in [None, Some(16 * 1024)] {
            let l = layout(
                4,
                &[32768, 49152, 16384, 65536, 32768, 16384, 49152, 32768],
                b_d,
            );
            for disk in 0..4 {
                let tasks = rebuild_tasks(DiskIndex(disk), [(TitleId(7), &l)]);
                // Every byte the disk held, primary and backup, is rewritten once.
                let held: u64 = l
                    .rounds()
                    .iter()
                    .map(|r| {
                        let p = if r.primary_disk.0 == disk {
                            r.primary.bytes()
                        } else {
                            0
                        };
                        p + r
                            .backups
                            .iter()
                            .filter(|b| b.disk.0 == disk)
                            .map(|b| b.extents.bytes())
                            .sum::<u64>()
                    })
                    .sum();
                assert_eq!(tasks.iter().map(|t| t.bytes).sum::<u64>(), held);
                for t in &tasks {
                    assert_eq!(t.write_to.disk, DiskIndex(disk));
                    assert!(
                        t.read_from.iter().all(|s| s.disk != DiskIndex(disk)),
                        "{t:?}"
                    );
                    if t.target == Replica::Backup {
                        let frag: u64 = t.fragments.iter().map(|f| f.end - f.start).sum();
                        assert_eq!(frag, t.bytes, "a backup piece holds its fragments");
                    }
                }
            }
        }
    }

    #[test]
    fn copies_use_only_unreserved_time_and_complete_in_order() {
        let l = layout(3, &[16384; 9], None);
        let tasks = rebuild_tasks(DiskIndex(0), [(TitleId(0), &l)]);
        assert_eq!(tasks.len(), 6, "3 primaries and 3 backups lived on disk 0");
        let mut r = Reservations::new(ReservationConfig {
            disks: 3,
            scheme: Scheme::Minimum,
            round_duration_ns: 1000,
            round_fixed_ns: 100,
            buffer_capacity_bytes: u64::MAX,
            network_capacity_bytes_per_round: None,
            horizon_rounds: 8,
            drive_cache_segments: 0,
            bus_share_ppm: 0,
            replica_choice: crate::reservation::ReplicaChoice::Primary,
            start_choice: Default::default(),
            guarantee: Default::default(),
            revolution_ns: 0,
            backup_window: Default::default(),
        });
        // A stream reserving 700 of disk 1's 900 unreserved ns in round 0.
        let one = TitleCharges::new(
            vec![Charge {
                disk: DiskIndex(1),
                cost_ns: 700,
                revolutions: 0,
            }],
            vec![vec![Charge {
                disk: DiskIndex(2),
                cost_ns: 1,
                revolutions: 0,
            }]],
            vec![0, 0],
            &[0],
        )
        .unwrap();
        r.add_title(TitleId(9), one);
        r.try_admit(TitleId(9), Round(0), 1).unwrap();
        r.fail_disk(DiskIndex(0));
        let mut q = RebuildQueue::new(DiskIndex(0), tasks);
        // Every read costs 150 on its source, every write 100 on disk 0.
        let (run, lost) = q.next_round(&r, Round(0), &[], |_, _| 150, |_| 100);
        assert!(lost.is_empty());
        // Disk 1 has 200 free in round 0: one read from it fits, the next
        // copy reading disk 1 stops the round (copies stay in order).
        let reads_on_1 = run
            .iter()
            .filter(|c| c.task.read_from.iter().any(|s| s.disk == DiskIndex(1)))
            .count();
        assert_eq!(reads_on_1, 1, "{run:?}");
        assert!(!run.is_empty() && run.len() < 6);
        let before = q.progress();
        // Round 1 is unreserved everywhere: the rest fits (at most 9 writes of 100).
        let (rest, _) = q.next_round(&r, Round(1), &[], |_, _| 150, |_| 100);
        assert_eq!(run.len() + rest.len(), 6);
        assert!(q.is_done());
        assert_eq!(q.progress().done_bytes, q.progress().total_bytes);
        assert!(before.done_bytes < before.total_bytes);
    }

    #[test]
    fn a_second_failure_makes_copies_lost() {
        let l = layout(3, &[16384; 6], None);
        let mut r = Reservations::new(ReservationConfig {
            disks: 3,
            scheme: Scheme::Minimum,
            round_duration_ns: 1000,
            round_fixed_ns: 0,
            buffer_capacity_bytes: u64::MAX,
            network_capacity_bytes_per_round: None,
            horizon_rounds: 8,
            drive_cache_segments: 0,
            bus_share_ppm: 0,
            replica_choice: crate::reservation::ReplicaChoice::Primary,
            start_choice: Default::default(),
            guarantee: Default::default(),
            revolution_ns: 0,
            backup_window: Default::default(),
        });
        r.fail_disk(DiskIndex(0));
        r.fail_disk(DiskIndex(1));
        let mut q = RebuildQueue::new(
            DiskIndex(0),
            rebuild_tasks(DiskIndex(0), [(TitleId(0), &l)]),
        );
        let (run, lost) = q.next_round(&r, Round(0), &[], |_, _| 1, |_| 1);
        assert!(
            lost.iter()
                .all(|t| t.read_from.iter().any(|s| s.disk == DiskIndex(1)))
        );
        assert!(
            run.iter()
                .all(|c| c.task.read_from.iter().all(|s| s.disk == DiskIndex(2)))
        );
        assert!(!lost.is_empty());
    }
}
