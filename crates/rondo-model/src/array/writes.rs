//! The write queue: ingest writes granted in disk time that admitted
//! streams left unreserved, after the rebuild has taken its share.
//!
//! An ingest registers its title's layout ([`WriteQueue::begin`]) and says
//! which round its writer waits for ([`WriteQueue::want`]); at each round
//! boundary the array grants the titles' next rounds in order
//! ([`WriteQueue::grant`]) as long as, on every disk a round writes, its
//! charge fits what is left of that disk's credit (the reservations'
//! `write_credits_ns`, less the rebuild's charges: the rule "rebuild first,
//! ingest takes the rest"). A write is charged per disk with the array's
//! write bound, one charge per extent. A round whose charge on some disk
//! exceeds a whole idle round is granted alone, in a round with nothing
//! reserved nor granted on the disks it writes. At most
//! [`WRITE_LOOKAHEAD_ROUNDS`] rounds past the one the writer waits for are
//! granted, which bounds how far the model's writes run ahead of the real
//! ones. Later, a tier's staging writes (seed 002) queue here too.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::command::{CommandExtent, DiskCommand, Purpose};
use crate::disk::Op;
use crate::layout::TitleLayout;
use crate::reservation::Bound;
use crate::units::{DiskIndex, PlaybackRound, Round, TitleId};

/// Rounds granted past the one an ingest's writer waits for.
pub const WRITE_LOOKAHEAD_ROUNDS: usize = 64;

#[derive(Clone, Debug)]
struct TitleWrites {
    layout: Arc<TitleLayout>,
    /// The next round to grant.
    next_grant: usize,
    /// The round the writer waits for.
    wanted: usize,
}

/// Ingests waiting for disk time, by title.
#[derive(Clone, Debug, Default)]
pub struct WriteQueue {
    titles: BTreeMap<TitleId, TitleWrites>,
}

/// What [`super::Array::predict_write`] assumes of the streams to come.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum WriteLoad {
    /// Only the streams admitted now: time they free goes to the write.
    AdmittedOnly,
    /// Arrivals keep the array as busy as now: no round leaves more than
    /// the mean unreserved time over the disks now.
    Steady,
}

/// A write's predicted course ([`super::Array::predict_write`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct WritePrediction {
    /// Rounds, from the next one, until its last round is granted.
    pub rounds: u64,
    /// The model's busiest disk time in that last round (fixed term,
    /// reservations and grants): its writes are done by then.
    pub last_round_busy_ns: u64,
}

/// What the queue granted in one round.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteGrant {
    /// Per disk: the write commands.
    pub commands: Vec<Vec<DiskCommand>>,
    /// Per disk: the time charged.
    pub charged_ns: Vec<u64>,
    /// `(title, title round, bytes)` of every granted round.
    pub rounds: Vec<(TitleId, PlaybackRound, u64)>,
}

impl WriteQueue {
    /// An ingest of `title` will write `layout`'s rounds in order.
    pub fn begin(&mut self, title: TitleId, layout: Arc<TitleLayout>) {
        self.titles.insert(
            title,
            TitleWrites {
                layout,
                next_grant: 0,
                wanted: 0,
            },
        );
    }

    /// The writer of `title` waits for `round`: rounds up to
    /// [`WRITE_LOOKAHEAD_ROUNDS`] past it may be granted.
    pub fn want(&mut self, title: TitleId, round: PlaybackRound) {
        let round = round.index();
        if let Some(t) = self.titles.get_mut(&title) {
            t.wanted = t.wanted.max(round);
            // A writer that skipped rounds (nothing to write) moves the grant on.
            t.next_grant = t.next_grant.max(round.min(t.layout.rounds().len()));
        }
    }

    /// The ingest of `title` ended (stored or not).
    pub fn end(&mut self, title: TitleId) -> bool {
        self.titles.remove(&title).is_some()
    }

    /// Grants, in `round`, the waiting rounds that fit `credits_ns` (per
    /// disk); `idle_round_ns` is the write time of a round with nothing
    /// reserved (`T − fixed`).
    pub fn grant(
        &mut self,
        round: Round,
        credits_ns: &[u64],
        idle_round_ns: u64,
        write_bound: &Bound,
    ) -> WriteGrant {
        let disks = credits_ns.len();
        let mut grant = WriteGrant {
            commands: vec![Vec::new(); disks],
            charged_ns: vec![0; disks],
            rounds: Vec::new(),
        };
        let mut left_ns: Vec<u64> = credits_ns.iter().map(|&c| c.min(idle_round_ns)).collect();
        for (&title, writes) in self.titles.iter_mut() {
            let end = (writes.wanted + WRITE_LOOKAHEAD_ROUNDS).min(writes.layout.rounds().len());
            while writes.next_grant < end {
                let title_round = writes.next_grant;
                let commands = round_writes(&writes.layout, title, title_round, round, write_bound);
                let mut charges: Vec<(DiskIndex, u64)> = Vec::new();
                for c in &commands {
                    match charges.iter_mut().find(|(d, _)| *d == c.disk) {
                        Some((_, total)) => *total += c.charge_ns,
                        None => charges.push((c.disk, c.charge_ns)),
                    }
                }
                let oversized = charges.iter().any(|&(_, ns)| ns > idle_round_ns);
                let fits = charges.iter().all(|&(d, ns)| {
                    let left = left_ns[d.index()];
                    if oversized {
                        left == idle_round_ns
                    } else {
                        ns <= left
                    }
                });
                if !fits {
                    // Rounds of a title go in order; later titles may fit.
                    break;
                }
                for &(d, ns) in &charges {
                    let left = &mut left_ns[d.index()];
                    *left = if oversized { 0 } else { *left - ns };
                    grant.charged_ns[d.index()] += ns;
                }
                let bytes = commands.iter().map(DiskCommand::bytes).sum();
                for c in commands {
                    grant.commands[c.disk.index()].push(c);
                }
                grant
                    .rounds
                    .push((title, PlaybackRound(title_round as u32), bytes));
                writes.next_grant += 1;
            }
        }
        grant
    }
}

/// The write commands of round `title_round` of `layout`: one per extent of
/// its primary and of every backup piece, each charged the write bound.
fn round_writes(
    layout: &TitleLayout,
    title: TitleId,
    title_round: usize,
    round: Round,
    write_bound: &Bound,
) -> Vec<DiskCommand> {
    let l = layout.round(title_round);
    let mut out = Vec::new();
    let mut push = |disk: DiskIndex, x: &crate::layout::Extent| {
        if x.length_bytes == 0 {
            return;
        }
        let extent = CommandExtent {
            device_offset_bytes: x.device_offset_bytes,
            length_bytes: x.length_bytes,
            crc32c: None,
            whole: None,
        };
        out.push(DiskCommand {
            disk,
            round,
            op: Op::Write,
            purpose: Purpose::IngestWrite {
                title,
                title_round: PlaybackRound(title_round as u32),
            },
            charge_ns: write_bound.extents_ns(&[extent.sectors()]),
            extents: vec![extent],
            joins_previous: false,
            prefetch_bytes: 0,
            part_offset_bytes: 0,
        });
    };
    for x in l.primary.as_slice() {
        push(l.primary_disk, x);
    }
    for b in &l.backups {
        for x in b.extents.as_slice() {
            push(b.disk, x);
        }
    }
    out
}
