//! Admission (seed 000 §6.2): the start rounds tried, the check that every
//! round of the stream fits, and which replica each round reads.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{
    Admission, Burst, Charge, DiskSlot, Rejection, ReplicaChoice, Reservations, RoundChoice,
    Scheme, Shape, SlotCharge, StartChoice, StreamRecord, TitleCharges, read_charges, spread,
};
use crate::units::{DiskIndex, PlaybackRound, Round, StreamId, TitleId};

/// When admission tries a stream in drive-cache pairs
/// ([`Reservations::try_admit_shaped`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pairs {
    /// Never (seed 000, GPMP).
    #[default]
    Never,
    /// Before the plain stream (and before a start burst: a paired stream
    /// has none).
    First,
    /// After the plain stream.
    Fallback,
    /// After the plain stream, and when neither fits: seed 003's switch
    /// into prefetch mode. The admitted streams that read plain are
    /// switched into pairs from the earliest round (two of opposite phase
    /// at a time, so that one's pair read meets the other's cache hit),
    /// each switch kept only if every round still fits; then the new
    /// stream is tried again (Sweep&Prefetch).
    Switch,
}

/// How many switches (of one or two streams) one admission may make to
/// fit a new stream (assumption: a bound on the work of one admission; each
/// switch frees one disk-round, and a stream that needs more is refused).
const SWITCHES_PER_ADMISSION_MAX: usize = 16;

impl Reservations {
    /// Tries start rounds `earliest_round`, `earliest_round + 1`, … up to
    /// `lookahead_rounds` of them; admits the stream at the first that fits
    /// every round of the title, or rejects it (seed 000 §6.2).
    pub fn try_admit(
        &mut self,
        title: TitleId,
        earliest_round: Round,
        lookahead_rounds: u64,
    ) -> Result<Admission, Rejection> {
        self.try_admit_from(title, PlaybackRound(0), earliest_round, lookahead_rounds)
    }

    /// Like [`Reservations::try_admit`] for a stream that begins at the
    /// title's playback round `first_playback_round` (a seek or a range
    /// request): only the rounds from there on are reserved. Its first
    /// round's buffer and network reservation is the title's for that round,
    /// which also counts the previous round's data: a slight overcount, never
    /// an undercount.
    pub fn try_admit_from(
        &mut self,
        title: TitleId,
        first_playback_round: PlaybackRound,
        earliest_round: Round,
        lookahead_rounds: u64,
    ) -> Result<Admission, Rejection> {
        let rounds = self
            .titles
            .get(&title)
            .ok_or(Rejection::UnknownTitle(title))?
            .rounds();
        self.try_admit_range(
            title,
            first_playback_round..PlaybackRound(rounds as u32),
            earliest_round,
            lookahead_rounds,
        )
    }

    /// Like [`Reservations::try_admit_from`] for a stream that reads only
    /// the title's playback rounds `playback_rounds` (a range request for
    /// part of a title): nothing is reserved past the range's last round.
    /// An `end` past the title's end is cut to it.
    pub fn try_admit_range(
        &mut self,
        title: TitleId,
        playback_rounds: std::ops::Range<PlaybackRound>,
        earliest_round: Round,
        lookahead_rounds: u64,
    ) -> Result<Admission, Rejection> {
        self.try_admit_span(
            title,
            playback_rounds,
            earliest_round,
            lookahead_rounds,
            Burst::default(),
        )
    }

    /// Like [`Reservations::try_admit_range`], with a start burst (see
    /// `reservation::shape`). At each start round the whole burst is tried
    /// first, then its `rounds` part alone, then the plain stream: a burst
    /// never makes a stream start later.
    pub fn try_admit_span(
        &mut self,
        title: TitleId,
        playback_rounds: std::ops::Range<PlaybackRound>,
        earliest_round: Round,
        lookahead_rounds: u64,
        burst: Burst,
    ) -> Result<Admission, Rejection> {
        self.try_admit_shaped(
            title,
            playback_rounds,
            earliest_round,
            lookahead_rounds,
            burst,
            Pairs::Never,
        )
    }

    /// Like [`Reservations::try_admit_span`], with drive-cache pairs tried
    /// as `pairs` says (seed 003): at each start round, `First` tries the
    /// stream in pairs before it tries it plain (Gradual Prefetching's
    /// streams that prefetch), `Fallback` after (Sweep&Prefetch: pairs only
    /// once plain reads no longer fit).
    pub fn try_admit_shaped(
        &mut self,
        title: TitleId,
        playback_rounds: std::ops::Range<PlaybackRound>,
        earliest_round: Round,
        lookahead_rounds: u64,
        burst: Burst,
        pairs: Pairs,
    ) -> Result<Admission, Rejection> {
        self.try_admit_with(
            title,
            playback_rounds,
            earliest_round,
            lookahead_rounds,
            burst,
            pairs,
            None,
        )
    }

    /// Like [`Reservations::try_admit_span`], the stream read in groups of
    /// `group_rounds` (its title's own length or one registered with
    /// [`Reservations::add_title_grouping`]): the dynamic cycle admits new
    /// streams at its current cycle. A grouped stream has no start burst.
    pub fn try_admit_grouped(
        &mut self,
        title: TitleId,
        playback_rounds: std::ops::Range<PlaybackRound>,
        earliest_round: Round,
        lookahead_rounds: u64,
        burst: Burst,
        group_rounds: u32,
    ) -> Result<Admission, Rejection> {
        self.try_admit_with(
            title,
            playback_rounds,
            earliest_round,
            lookahead_rounds,
            burst,
            Pairs::Never,
            Some(group_rounds),
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn try_admit_with(
        &mut self,
        title: TitleId,
        playback_rounds: std::ops::Range<PlaybackRound>,
        earliest_round: Round,
        lookahead_rounds: u64,
        burst: Burst,
        pairs: Pairs,
        group_rounds: Option<u32>,
    ) -> Result<Admission, Rejection> {
        let charges = match group_rounds {
            None => self.titles.get(&title),
            Some(g) => self.grouped(title, g),
        };
        let charges = Arc::clone(charges.ok_or(Rejection::UnknownTitle(title))?);
        let first_playback_round = playback_rounds.start.index();
        let end_playback_round = playback_rounds.end.index().min(charges.rounds());
        if first_playback_round >= end_playback_round {
            return Err(Rejection::PastEnd {
                first_playback_round: playback_rounds.start,
                rounds: charges.rounds(),
            });
        }
        let (first, end) = (first_playback_round, end_playback_round);
        let grouping = charges.grouping();
        // Under a backup window of k rounds a stream's client leads by
        // k - 1 rounds, which a plain stream with its first send held
        // provides; a start burst would send rounds read in its first round
        // before they could be recovered, so there is none.
        let lead = self.config.backup_window_in_force().lead_rounds() as usize;
        let plain = Shape::new(first, end, 0, grouping).with_lead(lead);
        // Largest first: the whole span (or the burst by time), the burst
        // by time, the plain stream.
        let mut shapes = vec![plain];
        if lead == 0 {
            for k in [
                burst.rounds as usize,
                Shape::burst_rounds(&charges, first, end, burst.rounds as usize, burst.bytes),
            ] {
                let shape = Shape::new(first, end, k, grouping).with_burst_lead(burst.lead);
                if k > 0 && shape != shapes[0] {
                    shapes.insert(0, shape);
                }
            }
        }
        let paired = plain.with_pairs();
        let has_pairs = paired.pairs
            && self.config.drive_cache_segments > 0
            && (first..end).any(|i| charges.pair(i).is_some());
        match pairs {
            // Before any burst too: a stream reads in pairs or has a burst.
            Pairs::First if has_pairs => shapes.insert(0, paired),
            Pairs::Fallback | Pairs::Switch if has_pairs => shapes.push(paired),
            _ => {}
        }
        let stream_rounds = plain.stream_rounds(&charges) as u64;
        let earliest_round = earliest_round.max(self.current_round);
        let lookahead_rounds = lookahead_rounds.max(1);
        let window_end = self.current_round.plus(self.config.horizon_rounds);
        if earliest_round.plus(stream_rounds) > window_end {
            return Err(Rejection::TooLong {
                rounds: stream_rounds,
                horizon_rounds: self.config.horizon_rounds,
            });
        }
        let first_try =
            self.admit_first_fit(title, &charges, &shapes, earliest_round, lookahead_rounds);
        if pairs != Pairs::Switch || !has_pairs {
            return first_try;
        }
        // Sweep&Prefetch's switch into prefetch mode, where the new stream
        // found a disk full, until it fits; undone if it never does.
        let mut result = first_try;
        let mut switched = Vec::new();
        for _ in 0..SWITCHES_PER_ADMISSION_MAX {
            let Err(Rejection::DiskTime { disk, round, .. }) = result else {
                break;
            };
            let more = self.switch_at(disk, round, earliest_round);
            if more.is_empty() {
                break;
            }
            switched.extend(more);
            result =
                self.admit_first_fit(title, &charges, &shapes, earliest_round, lookahead_rounds);
        }
        if result.is_err() {
            self.undo_switches(switched);
        }
        result
    }

    /// Admits a stream of `title` in the first of `shapes` that fits at the
    /// first start round from `earliest_round` on that has one.
    fn admit_first_fit(
        &mut self,
        title: TitleId,
        charges: &Arc<TitleCharges>,
        shapes: &[Shape],
        earliest_round: Round,
        lookahead_rounds: u64,
    ) -> Result<Admission, Rejection> {
        let window_end = self.current_round.plus(self.config.horizon_rounds);
        let mut last = Rejection::DiskTime {
            lookahead_rounds,
            disk: DiskIndex(0),
            round: earliest_round,
        };
        let least_added = self.config.start_choice == StartChoice::LeastAdded;
        let mut best: Option<(u64, Round, Shape, Vec<RoundChoice>)> = None;
        for start in Round::range(earliest_round, earliest_round.plus(lookahead_rounds)) {
            for &shape in shapes {
                if start.plus(shape.stream_rounds(charges) as u64) > window_end {
                    continue;
                }
                match self.fits(charges, shape, start, lookahead_rounds) {
                    Ok(choice) if least_added => {
                        let added = self.added_ns(charges, shape, start, &choice);
                        if best.as_ref().is_none_or(|b| added < b.0) {
                            best = Some((added, start, shape, choice));
                        }
                        break;
                    }
                    Ok(choice) => return Ok(self.admit_record(title, start, shape, choice)),
                    Err(rejection @ Rejection::DataUnavailable { .. }) => return Err(rejection),
                    Err(rejection) => last = rejection,
                }
            }
        }
        match best {
            Some((_, start, shape, choice)) => Ok(self.admit_record(title, start, shape, choice)),
            None => Err(last),
        }
    }

    /// Admits a stream that fits: its record kept and its reservations made.
    fn admit_record(
        &mut self,
        title: TitleId,
        start: Round,
        shape: Shape,
        choice: Vec<RoundChoice>,
    ) -> Admission {
        let stream = StreamId(self.next_stream);
        self.next_stream += 1;
        let record = StreamRecord {
            title,
            start_round: start,
            shape,
            choice,
        };
        self.apply(&record, 1);
        self.streams.insert(stream, record);
        Admission {
            stream,
            start_round: start,
        }
    }

    /// The reserved time a stream of this shape and replica choice would
    /// add to the tables if it started at `start` (each read's charges
    /// against the tables as they are).
    fn added_ns(
        &self,
        charges: &TitleCharges,
        shape: Shape,
        start: Round,
        choice: &[RoundChoice],
    ) -> u64 {
        let (scheme, bus) = (self.config.scheme, self.config.bus_share_ppm);
        let mut added = 0;
        for i in (shape.first..shape.end).filter(|&i| shape.is_read_start(i)) {
            let round = start.plus(shape.read_offset(i) as u64);
            let kind = shape.read_kind(charges, choice, i);
            for (disk, charge) in read_charges(scheme, charges, i, choice[i - shape.first], kind) {
                for (at, part) in spread(charge, round, self.spread_window()) {
                    let slot = self.slot(disk, at);
                    added += slot
                        .reserved_with(part, scheme, bus, self.rotation.as_ref())
                        .saturating_sub(slot.reserved_ns(scheme, bus));
                }
            }
        }
        added
    }

    /// Checks whether a stream of this shape fits starting at `start`;
    /// returns the replica choice per round. Pure: changes nothing.
    fn fits(
        &self,
        charges: &TitleCharges,
        shape: Shape,
        start: Round,
        lookahead_rounds: u64,
    ) -> Result<Vec<RoundChoice>, Rejection> {
        let cfg = &self.config;
        let budget_ns = cfg.budget_ns();
        let horizon = cfg.horizon_rounds;
        let disk_full = |disk: DiskIndex, round: Round| Rejection::DiskTime {
            lookahead_rounds,
            disk,
            round,
        };
        for q in 0..shape.stream_rounds(charges) {
            let round = start.plus(q as u64);
            let ring = (round.0 % horizon) as usize;
            let (buffer_bytes, network_bytes) = shape.charges_at(charges, q);
            if self.buffer_bytes[ring] + buffer_bytes > cfg.buffer_capacity_bytes {
                return Err(Rejection::Buffer {
                    lookahead_rounds,
                    round,
                });
            }
            if let Some(cap) = cfg.network_capacity_bytes_per_round
                && self.network_bytes[ring] + network_bytes > cap
            {
                return Err(Rejection::Network {
                    lookahead_rounds,
                    round,
                });
            }
        }
        // A burst makes several reads in its first round, possibly on one
        // disk: they are checked against the tables plus the burst's own
        // reads so far (copies of the slots they touch). Every other round
        // has one read of the stream, checked against the tables alone.
        // Which replica each round reads (a group's rounds its first's).
        let mut choice = Vec::with_capacity(shape.end - shape.first);
        for i in shape.first..shape.end {
            if !shape.is_read_start(i) {
                // Read with its group's first round, from the same replica.
                let read_start = shape.read_start(i);
                choice.push(choice[read_start - shape.first]);
                continue;
            }
            let round = start.plus(shape.read_offset(i) as u64);
            choice.push(self.choose(
                charges.primary(i),
                charges.backup(i),
                round,
                PlaybackRound(i as u32),
            )?);
        }
        // A burst makes several reads in its first round, possibly on one
        // disk, and a spread backup (a backup window of k > 1 rounds) may
        // land on a disk-round the stream also reads in: such slots are
        // checked against the tables plus the stream's own charges so far
        // (copies of the slots they touch).
        let window = self.spread_window();
        let mut scratch: BTreeMap<(DiskIndex, Round), DiskSlot> = BTreeMap::new();
        for i in (shape.first..shape.end).filter(|&i| shape.is_read_start(i)) {
            let round = start.plus(shape.read_offset(i) as u64);
            let keep = shape.is_early(i) || window.is_spread();
            let kind = shape.read_kind(charges, &choice, i);
            let round_choice = choice[i - shape.first];
            for (disk, charge) in read_charges(cfg.scheme, charges, i, round_choice, kind) {
                for (at, part) in spread(charge, round, window) {
                    let slot = match scratch.get(&(disk, at)) {
                        Some(slot) => slot,
                        None => self.slot(disk, at),
                    };
                    if slot.reserved_with(
                        part,
                        cfg.scheme,
                        cfg.bus_share_ppm,
                        self.rotation.as_ref(),
                    ) > budget_ns
                    {
                        return Err(disk_full(disk, at));
                    }
                    if matches!(part, SlotCharge::CacheBlock { .. })
                        && slot.cache_blocks >= cfg.drive_cache_segments
                    {
                        return Err(disk_full(disk, at));
                    }
                    if keep {
                        scratch
                            .entry((disk, at))
                            .or_insert_with(|| self.slot(disk, at).clone())
                            .charge(part, 1, self.rotation.as_ref());
                    }
                }
            }
        }
        Ok(choice)
    }

    /// Which replica a new stream reads in one round.
    fn choose(
        &self,
        primary: Charge,
        backup: &[Charge],
        round: Round,
        playback_round: PlaybackRound,
    ) -> Result<RoundChoice, Rejection> {
        let backup_ok = !backup.is_empty() && backup.iter().all(|p| !self.failed[p.disk.index()]);
        if self.failed[primary.disk.index()] {
            return if backup_ok && self.config.scheme.stores_backup() {
                // The schemes that reserve backup time admit as if the
                // failed disk served: its slot is kept for after its
                // rebuild, and the backup time the failure reroutes is the
                // backup reservation. Reserving the backup as a plain read
                // instead would leave the round unreserved on the rebuilt
                // disk, and a later failure of the backup's disk (after
                // the rebuild, a single failure) would read it there
                // unreserved (found by the seeded fault scenarios).
                if matches!(self.config.scheme, Scheme::Minimum | Scheme::Mirroring) {
                    Ok(RoundChoice::Primary)
                } else {
                    Ok(RoundChoice::Rerouted)
                }
            } else {
                Err(Rejection::DataUnavailable {
                    round: playback_round,
                })
            };
        }
        if self.config.scheme == Scheme::Minimum
            && self.config.replica_choice == ReplicaChoice::Balanced
            && self.config.drive_cache_segments == 0
            && !self.spread_window().is_spread()
            && backup_ok
            && let [piece] = backup
        {
            return Ok(self.balanced_choice(primary, *piece, round));
        }
        if self.config.scheme == Scheme::Dynamic && backup_ok {
            // Seed 000 §5: the replica on the disk expected to be least
            // loaded, judged by the reservations made so far. Ties keep the
            // primary. A declustered backup is judged by its busiest piece.
            let scheme = self.config.scheme;
            let primary_load = self
                .slot(primary.disk, round)
                .reserved_ns(scheme, self.config.bus_share_ppm)
                + primary.cost_ns;
            let backup_load = backup
                .iter()
                .map(|p| {
                    self.slot(p.disk, round)
                        .reserved_ns(scheme, self.config.bus_share_ppm)
                        + p.cost_ns
                })
                .max()
                .unwrap_or(u64::MAX);
            if backup_load < primary_load {
                return Ok(RoundChoice::Backup);
            }
        }
        Ok(RoundChoice::Primary)
    }

    /// `ReplicaChoice::Balanced`: of the replicas whose read and failure
    /// reservation fit in `round`, the one leaving the larger of the two
    /// disks' reserved time lowest, then the one adding less (the primary
    /// on a tie, or when neither fits: `fits` then refuses the round).
    fn balanced_choice(&self, primary: Charge, backup: Charge, round: Round) -> RoundChoice {
        let (scheme, bus) = (self.config.scheme, self.config.bus_share_ppm);
        let budget_ns = self.config.budget_ns();
        let (x, y) = (
            self.slot(primary.disk, round),
            self.slot(backup.disk, round),
        );
        let before = x.reserved_ns(scheme, bus) + y.reserved_ns(scheme, bus);
        let rotation = self.rotation.as_ref();
        let option = |read: &DiskSlot, read_charge: Charge, hold: &DiskSlot, source, hold_ns| {
            let read_after = read.reserved_with(
                SlotCharge::Read {
                    cost_ns: read_charge.cost_ns,
                    revolutions: read_charge.revolutions,
                },
                scheme,
                bus,
                rotation,
            );
            let hold_after = hold.reserved_with(
                SlotCharge::Backup {
                    source,
                    cost_ns: hold_ns,
                },
                scheme,
                bus,
                rotation,
            );
            let fits = read_after <= budget_ns && hold_after <= budget_ns;
            (
                fits,
                (
                    read_after.max(hold_after),
                    (read_after + hold_after).saturating_sub(before),
                ),
            )
        };
        let (primary_fits, primary_added) = option(x, primary, y, primary.disk, backup.cost_ns);
        let (backup_fits, backup_added) = option(y, backup, x, backup.disk, primary.cost_ns);
        if backup_fits && (!primary_fits || backup_added < primary_added) {
            RoundChoice::Backup
        } else {
            RoundChoice::Primary
        }
    }
}
