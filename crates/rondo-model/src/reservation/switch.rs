//! Seed 003's switch into prefetch mode: admitted streams that read one
//! block per round are switched into drive-cache pairs, so that a full
//! server makes room for more.
//!
//! Sweep&Prefetch "services streams without prefetching until the system
//! reaches its maximum throughput. It then switches into the prefetch
//! mode". In rondo a switch changes how a stream reads its rounds from a
//! round not yet planned on: each pair's first round is read with the next
//! round read on into a drive cache segment, and the next round is read
//! from the cache in its own round. Nothing the stream reads or sends moves
//! in time, so host memory is unchanged: the block read ahead waits in the
//! drive's cache, and the reservation holds a cache segment for it in both
//! rounds of the pair (the transition's extra buffer is there, not in the
//! host). A switched stream's pair read costs more than its plain read
//! (one more block's transfer) and its hit less, so streams are switched
//! two at a time, one of each phase (the parity of the round of their
//! first pair read): one's pair read falls in the round of the other's
//! hit. A switch is made where a new stream found a disk full, kept only
//! if every round of the switched streams still fits its disk time, bus
//! time and cache segments, and undone if the new stream still does not fit
//! (a switch that makes no room only ties up the drive's cache).

use super::{ReadKind, Reservations, RoundChoice, StreamRecord, read_charges, spread};
use crate::units::{DiskIndex, Round, StreamId};

/// Couples (and then single streams) `switch_at` tries before it gives up
/// (assumption: a bound on the work of one switch).
const SWITCH_TRIES_MAX: usize = 3;

/// Rounds from the earliest one in which `switch_at` may start a switch
/// (assumption: a bound on its work, as `SWITCH_TRIES_MAX`).
const SWITCH_START_ROUNDS_MAX: u64 = 4;

/// The records of streams as they were before a switch, to undo it.
pub(super) type Switched = Vec<(StreamId, StreamRecord)>;

impl Reservations {
    /// Makes room on `disk` in `round` by switching two admitted streams
    /// that read plain there, one of each phase, into drive-cache pairs
    /// from a round between `from` and `round` (or one stream alone when no
    /// two fit together). Returns what it switched (empty: nothing fits).
    ///
    /// The first round of a switch costs more than it saves: the stream
    /// whose pair starts there reads one block more, and the other's first
    /// hit is a round later. So the switch starts in the first round whose
    /// slack on `disk` holds that block; from the next round on the two
    /// streams' pair reads and hits alternate and each round saves.
    pub(super) fn switch_at(&mut self, disk: DiskIndex, round: Round, from: Round) -> Switched {
        let from = from.max(self.current_round);
        let (scheme, bus_share_ppm) = (self.config.scheme, self.config.bus_share_ppm);
        let budget_ns = self.config.budget_ns();
        // Candidates by phase: streams reading plain on `disk` in `round`
        // with a pair ahead of `from`.
        let mut phases: [Vec<StreamId>; 2] = [Vec::new(), Vec::new()];
        for (&id, record) in &self.streams {
            let shape = record.shape;
            if shape.pairs || shape.is_burst() || shape.is_grouped() || round < record.start_round {
                continue;
            }
            let charges = &self.titles[&record.title];
            let i = shape.first + record.offset(round);
            if i >= shape.end
                || record.choice[i - shape.first] != RoundChoice::Primary
                || charges.primary(i).disk != disk
            {
                continue;
            }
            if let Some(x) = self.first_pair_round(record, from) {
                phases[(x.0 % 2) as usize].push(id);
            }
        }
        let [even, odd] = &phases;
        let couples: Vec<Vec<StreamId>> = even
            .iter()
            .zip(odd)
            .map(|(&a, &b)| vec![a, b])
            .take(SWITCH_TRIES_MAX)
            .chain(
                even.iter()
                    .chain(odd)
                    .map(|&one| vec![one])
                    .take(SWITCH_TRIES_MAX),
            )
            .collect();
        // The earliest rounds only: a switch frees every round after its
        // first, so starting later frees less.
        let last_start = round.min(from.plus(SWITCH_START_ROUNDS_MAX));
        for x in Round::range(from, last_start) {
            let slack_ns =
                budget_ns.saturating_sub(self.slot(disk, x).reserved_ns(scheme, bus_share_ppm));
            for streams in &couples {
                // The block the stream whose pair starts in `x` reads more.
                let extra_ns: u64 = streams
                    .iter()
                    .filter_map(|id| {
                        let record = &self.streams[id];
                        let i = record.shape.first + record.offset(x.max(record.start_round));
                        let pair = self.titles[&record.title].pair(i)?;
                        let plain = self.titles[&record.title].primary(i).cost_ns;
                        (self.first_pair_round(record, x) == Some(x))
                            .then(|| pair.first_ns.saturating_sub(plain))
                    })
                    .sum();
                if extra_ns > slack_ns {
                    continue;
                }
                // Pairs while both read: past the partner's end, a pair
                // read would have no hit beside it.
                let end_round = streams
                    .iter()
                    .map(|id| {
                        let record = &self.streams[id];
                        record
                            .start_round
                            .plus(record.shape.reads_end_offset() as u64)
                    })
                    .min()
                    .expect("a switch has a stream");
                let with_from: Vec<(StreamId, usize, usize)> = streams
                    .iter()
                    .map(|&id| {
                        let record = &self.streams[&id];
                        let at = |r: Round| {
                            record.shape.first + r.0.saturating_sub(record.start_round.0) as usize
                        };
                        (id, at(x), at(end_round))
                    })
                    .collect();
                if let Some(old) = self.try_switch(&with_from, x) {
                    return old;
                }
            }
        }
        Vec::new()
    }

    /// The round of a plain stream's first pair read were it switched from
    /// `from` (`None`: no pair left).
    fn first_pair_round(&self, record: &StreamRecord, from: Round) -> Option<Round> {
        let shape = record.shape;
        let charges = &self.titles[&record.title];
        let from_playback = shape.first + from.0.saturating_sub(record.start_round.0) as usize;
        let switched = shape.switched_to_pairs(from_playback, shape.end);
        (from_playback..shape.end)
            .find(|&j| {
                matches!(
                    switched.read_kind(charges, &record.choice, j),
                    ReadKind::PairFirst(_)
                )
            })
            .map(|j| record.start_round.plus((j - shape.first) as u64))
    }

    /// Puts switched streams back as they were.
    pub(super) fn undo_switches(&mut self, switched: Switched) {
        self.restore_records(switched);
    }

    /// Switches `streams` (each with the playback rounds its pairs run
    /// from and to) together, or none of them if any round would not fit.
    fn try_switch(
        &mut self,
        streams: &[(StreamId, usize, usize)],
        from: Round,
    ) -> Option<Switched> {
        let mut old: Switched = Vec::with_capacity(streams.len());
        for &(id, from_playback, end_playback) in streams {
            let record = &self.streams[&id];
            let new = StreamRecord {
                shape: record.shape.switched_to_pairs(from_playback, end_playback),
                ..record.clone()
            };
            old.push((id, self.replace_record(id, new)));
        }
        if streams
            .iter()
            .all(|(id, _, _)| self.fits_from(&self.streams[id], from))
        {
            Some(old)
        } else {
            self.undo_switches(old);
            None
        }
    }
    /// Whether every disk-round a stream reads in from `from` on is within
    /// its budget (disk and bus time) and its drive's cache segments, with
    /// everything now reserved (the stream's own reads included).
    pub(super) fn fits_from(&self, record: &StreamRecord, from: Round) -> bool {
        let cfg = &self.config;
        let budget_ns = cfg.budget_ns();
        let first = from.max(record.start_round);
        Round::range(first, record.end_round(&self.titles[&record.title])).all(|round| {
            let q = record.offset(round);
            record
                .shape
                .reads_at(q)
                .filter(|&i| record.shape.is_read_start(i))
                .all(|i| {
                    let charges = self.charges_for(record, i);
                    let choice = record.choice[i - record.shape.first];
                    let kind = record.shape.read_kind(charges, &record.choice, i);
                    read_charges(cfg.scheme, charges, i, choice, kind).all(|(disk, charge)| {
                        spread(charge, round, self.spread_window()).all(|(at, _)| {
                            let slot = self.slot(disk, at);
                            slot.reserved_ns(cfg.scheme, cfg.bus_share_ppm) <= budget_ns
                                && slot.cache_blocks <= cfg.drive_cache_segments
                        })
                    })
                })
        })
    }
}
