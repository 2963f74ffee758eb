//! A failed disk's backup reads under a backup window: each survivor keeps
//! them in a backlog and serves it earliest deadline first in the disk
//! time its own reads leave in each round, cutting the read in progress at
//! a block boundary when the round is full (`reservation::window` has the
//! rule and why `minimum` reservation with a window keeps every deadline).
//!
//! A backup read due in round r is then complete by the end of round
//! r + k - 1 (its `Inflight::due_round`), not of round r: its stream's
//! client holds k - 1 rounds more than seed 000's, and the rounds behind a
//! late one wait in order (`delivery`). With k = 1 (seed 000, the default)
//! nothing here is used.
//!
//! With a loss noticed late (L ≥ 1, `BackupWindow::loss_notice_rounds`), a
//! disk lost in the middle of a round ([`Array::recover_now`]) puts the
//! reads it took with it into the same backlogs, due k - 1 + L rounds
//! after their own, instead of re-reading them in what is left of the
//! round, and every read's miss is counted L - 1 rounds after its round.

use std::sync::Arc;

use super::Array;
use super::command::{CommandExtent, DiskCommand, Purpose, WholeExtent};
use crate::layout::Replica;
use crate::reservation::{BackupWindow, Bound, RecoveryBacklog, RecoveryRead};
use crate::units::{DiskIndex, Round};

/// Why a backup window of `rounds` rounds cannot be used with this
/// scheme and these retrieval settings (`None`: it can, or none is asked).
/// The simulator and the server refuse such a configuration.
///
/// - It spreads `minimum`'s failure reservation; the other schemes reserve
///   for a failure differently or not at all.
/// - Its client lead is a plain stream's held first send
///   (`reservation::shape`): read groups and drive-cache pairs read and
///   send on other schedules, and a pair whose cached block a rebuilt disk
///   lost is read from its backup within its own round, which a spread
///   reservation does not cover. The dynamic cycle regroups streams.
pub fn backup_window_unavailable(
    rounds: u32,
    loss_notice_rounds: u32,
    scheme: crate::reservation::Scheme,
    group_rounds: u32,
    prefetch: super::DrivePrefetch,
    dynamic_cycle: bool,
) -> Option<String> {
    if rounds <= 1 && loss_notice_rounds == 0 {
        None
    } else if scheme != crate::reservation::Scheme::Minimum {
        Some(format!(
            "a backup window (and a loss noticed late) applies to the minimum scheme only \
             (this one: {scheme})"
        ))
    } else if group_rounds > 1 || prefetch != super::DrivePrefetch::None || dynamic_cycle {
        Some(
            "a backup window needs one round per read (--policy sweep): read groups, \
             drive-cache prefetching and the dynamic cycle do not combine with it yet"
                .into(),
        )
    } else {
        None
    }
}

/// The survivors' recovery backlogs (empty unless a window is configured).
#[derive(Debug)]
pub(super) struct Recovery {
    window: BackupWindow,
    /// What cut parts are charged with (the array's read bound).
    bound: Arc<Bound>,
    backlogs: Vec<RecoveryBacklog<RecoveryCommand>>,
}

impl Recovery {
    pub(super) fn new(config: &super::ArrayConfig) -> Recovery {
        let reservation = &config.reservation;
        let window = reservation.backup_window_in_force();
        Recovery {
            window,
            bound: Arc::new(config.read_bound.clone()),
            backlogs: (0..reservation.disks)
                .map(|_| RecoveryBacklog::new(window))
                .collect(),
        }
    }

    /// Whether a failed disk's backup reads are served over a window.
    pub(super) fn is_windowed(&self) -> bool {
        self.window.is_spread()
    }

    /// L: how late a disk's loss may be noticed (`BackupWindow`); 0 when
    /// no window is in force.
    pub(super) fn loss_notice_rounds(&self) -> u32 {
        self.window.loss_notice_rounds
    }
}

/// A backup read (or the rest of one) waiting in a survivor's backlog: the
/// command as the array resolved it, charged by the read bound when cut.
#[derive(Clone, Debug)]
pub(super) struct RecoveryCommand {
    command: DiskCommand,
    bound: Arc<Bound>,
    block_bytes: u64,
}

impl RecoveryCommand {
    fn charge_of(bound: &Bound, extents: &[CommandExtent]) -> u64 {
        let sectors: Vec<(u64, u64)> = extents.iter().map(CommandExtent::sectors).collect();
        bound.extents_ns(&sectors)
    }

    /// The command's extents cut after `bytes`: the first part's and the
    /// rest's. A cut extent's checksum covers neither part: both name the
    /// extent as stored (`CommandExtent::whole`), whose checksum the
    /// executor checks once it has read the last part.
    fn cut(&self, bytes: u64) -> (Vec<CommandExtent>, Vec<CommandExtent>) {
        let (mut first, mut rest) = (Vec::new(), Vec::new());
        let mut left = bytes;
        for x in &self.command.extents {
            if left >= x.length_bytes {
                left -= x.length_bytes;
                first.push(*x);
            } else if left == 0 {
                rest.push(*x);
            } else {
                let whole = x.whole.or(Some(WholeExtent {
                    device_offset_bytes: x.device_offset_bytes,
                    length_bytes: x.length_bytes,
                    crc32c: x.crc32c,
                }));
                first.push(CommandExtent {
                    device_offset_bytes: x.device_offset_bytes,
                    length_bytes: left,
                    crc32c: None,
                    whole,
                });
                rest.push(CommandExtent {
                    device_offset_bytes: x.device_offset_bytes + left,
                    length_bytes: x.length_bytes - left,
                    crc32c: None,
                    whole,
                });
                left = 0;
            }
        }
        (first, rest)
    }
}

impl RecoveryRead for RecoveryCommand {
    fn charge_ns(&self) -> u64 {
        self.command.charge_ns
    }

    fn split(&self, fit_ns: u64) -> Option<(RecoveryCommand, RecoveryCommand)> {
        let bytes: u64 = self.command.extents.iter().map(|x| x.length_bytes).sum();
        let blocks = bytes.div_ceil(self.block_bytes);
        let first_ns = |n: u64| Self::charge_of(&self.bound, &self.cut(n * self.block_bytes).0);
        // The most whole blocks whose part fits (charges grow with length).
        let (mut lo, mut hi) = (0u64, blocks.saturating_sub(1));
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if first_ns(mid) <= fit_ns {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        if lo == 0 {
            return None;
        }
        let (first, rest) = self.cut(lo * self.block_bytes);
        let offset = self.command.part_offset_bytes;
        let part = |extents: Vec<CommandExtent>, part_offset_bytes: u64| RecoveryCommand {
            command: DiskCommand {
                charge_ns: Self::charge_of(&self.bound, &extents),
                extents,
                part_offset_bytes,
                ..self.command.clone()
            },
            bound: Arc::clone(&self.bound),
            block_bytes: self.block_bytes,
        };
        Some((
            part(first, offset),
            part(rest, offset + lo * self.block_bytes),
        ))
    }
}

impl Array {
    /// Puts a failed disk's backup read, due in `round`, into its disk's
    /// backlog: it may complete up to k - 1 + L rounds later.
    pub(super) fn hold_for_recovery(&mut self, round: Round, command: DiskCommand) {
        let Purpose::Deliver {
            stream,
            playback_round,
            piece,
            ..
        } = command.purpose
        else {
            unreachable!("only stream reads are recovered");
        };
        let deadline = self.recovery.window.deadline(round);
        if let Some(f) = self.inflight.get_mut(&(stream, playback_round)) {
            let piece = piece as usize;
            f.due_round = deadline;
            f.pieces[piece].parts_out -= 1;
            f.pieces[piece].held = true;
        }
        let disk = command.disk;
        let job = RecoveryCommand {
            command,
            bound: Arc::clone(&self.recovery.bound),
            block_bytes: self.recovery.window.block_bytes,
        };
        self.recovery.backlogs[disk.index()].push(job, round);
    }

    /// Serves `disk`'s backlog in `round` after its own reads `commands`:
    /// adds the parts read to `commands` and returns the disk time they
    /// take beyond the disk-round's reservation.
    pub(super) fn serve_recovery(
        &mut self,
        disk: DiskIndex,
        round: Round,
        commands: &mut Vec<DiskCommand>,
    ) -> u64 {
        let inflight = &self.inflight;
        let backlog = &mut self.recovery.backlogs[disk.index()];
        // Reads of streams stopped meanwhile are not made.
        backlog.retain(|job| match job.command.purpose {
            Purpose::Deliver {
                stream,
                playback_round,
                piece,
                ..
            } => inflight.get(&(stream, playback_round)).is_some_and(|f| {
                f.replica == Replica::Backup && f.pieces.is_pending(piece as usize)
            }),
            _ => false,
        });
        if backlog.is_empty() {
            return 0;
        }
        let cfg = &self.config.reservation;
        let own_ns: u64 = commands.iter().map(|c| c.charge_ns).sum();
        // The round less its fixed term: the reservation's budget plus the
        // one split it keeps (`BackupWindow::split_ns`).
        let available_ns = cfg
            .round_duration_ns
            .saturating_sub(cfg.round_fixed_ns + own_ns);
        let mut served_ns = 0;
        for piece in backlog.serve(available_ns) {
            let command = piece.read.command;
            if let Purpose::Deliver {
                stream,
                playback_round,
                piece: p,
                ..
            } = command.purpose
                && let Some(f) = self.inflight.get_mut(&(stream, playback_round))
            {
                f.pieces[p as usize].parts_out += 1;
                f.pieces[p as usize].held = !piece.last;
            }
            if piece.last {
                self.counters.window_recoveries += 1;
            } else {
                self.counters.window_splits += 1;
            }
            served_ns += command.charge_ns;
            commands.push(command);
        }
        let reserved_ns = self.reservations.reserved_ns(disk, round);
        (own_ns + served_ns).saturating_sub(reserved_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::array::command::Purpose;
    use crate::reservation::Bound;
    use crate::units::{PlaybackRound, StreamId, TitleId};

    fn command(extents: &[(u64, u64)], bound: &Bound) -> RecoveryCommand {
        let extents: Vec<CommandExtent> = extents
            .iter()
            .map(|&(offset, length)| CommandExtent {
                device_offset_bytes: offset,
                length_bytes: length,
                crc32c: Some(7),
                whole: None,
            })
            .collect();
        RecoveryCommand {
            command: DiskCommand {
                disk: DiskIndex(1),
                round: Round(3),
                op: crate::disk::Op::Read,
                purpose: Purpose::Deliver {
                    stream: StreamId(1),
                    title: TitleId(0),
                    playback_round: PlaybackRound(2),
                    replica: Replica::Backup,
                    piece: 0,
                    recovery: false,
                },
                charge_ns: RecoveryCommand::charge_of(bound, &extents),
                extents,
                joins_previous: false,
                prefetch_bytes: 0,
                part_offset_bytes: 0,
            },
            bound: Arc::new(bound.clone()),
            block_bytes: 16384,
        }
    }

    #[test]
    fn a_cut_read_keeps_its_bytes_in_order_and_its_first_part_fits() {
        let profile = crate::disk::profile_by_name("cheetah-4lp").unwrap();
        let bound = Bound::Rondo(crate::disk::RondoBound::new(&profile).unwrap());
        // Two extents (a request across two strides), 40 blocks in all.
        let job = command(&[(0, 24 * 16384), (2 << 20, 16 * 16384)], &bound);
        let whole = job.charge_ns();
        let (first, rest) = job.split(whole / 2).expect("half the charge holds a block");
        assert!(first.charge_ns() <= whole / 2);
        let bytes =
            |j: &RecoveryCommand| -> u64 { j.command.extents.iter().map(|x| x.length_bytes).sum() };
        assert_eq!(bytes(&first) + bytes(&rest), 40 * 16384);
        assert_eq!(bytes(&first) % 16384, 0);
        // The parts are the whole's bytes in order, the cut extent's
        // checksum on neither.
        let mut joined: Vec<(u64, u64)> = first
            .command
            .extents
            .iter()
            .chain(&rest.command.extents)
            .map(|x| (x.device_offset_bytes, x.length_bytes))
            .collect();
        joined.dedup_by(|b, a| {
            let merged = a.0 + a.1 == b.0;
            if merged {
                a.1 += b.1;
            }
            merged
        });
        assert_eq!(joined, [(0, 24 * 16384), (2 << 20, 16 * 16384)]);
        // Cutting costs at most one split more than the whole.
        let split_ns = bound.split_ns(16384);
        assert!(first.charge_ns() + rest.charge_ns() <= whole + split_ns);
        // Nothing fits in less than a block's charge.
        assert!(job.split(1).is_none());
        // Each part starts where the one before it ended, and every part
        // of a cut extent names it whole, with its checksum, through a
        // second cut too.
        assert_eq!(first.command.part_offset_bytes, 0);
        assert_eq!(rest.command.part_offset_bytes, bytes(&first));
        let (second, third) = rest.split(rest.charge_ns() / 2).expect("a block fits");
        assert_eq!(second.command.part_offset_bytes, bytes(&first));
        assert_eq!(
            third.command.part_offset_bytes,
            bytes(&first) + bytes(&second)
        );
        for part in [&first, &rest, &second, &third] {
            for x in &part.command.extents {
                match x.whole {
                    None => assert_eq!(x.crc32c, Some(7), "an uncut extent keeps its checksum"),
                    Some(w) => {
                        assert_eq!(x.crc32c, None);
                        assert_eq!(w.crc32c, Some(7));
                        assert!(
                            w.device_offset_bytes <= x.device_offset_bytes
                                && x.device_offset_bytes + x.length_bytes
                                    <= w.device_offset_bytes + w.length_bytes
                        );
                        assert!(
                            [(0, 24 * 16384), (2 << 20, 16 * 16384)]
                                .contains(&(w.device_offset_bytes, w.length_bytes))
                        );
                    }
                }
            }
        }
    }
}
