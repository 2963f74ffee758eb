//! A stream's shape in time: which of its playback rounds it reads in each
//! of its stream rounds, when each may be sent, and what it holds and sends
//! per round, for a plain stream and for one with a start burst.
//!
//! A *plain* stream started in round s reads playback round `first + q` in
//! round s + q and sends it in the round after (seed 000 §2.3, double
//! buffering). A stream with a *start burst* of k rounds reads its first k
//! playback rounds all in round s, each on its own disk when k ≤ D (the
//! layout puts successive rounds on successive disks), and they may be sent
//! as soon as they are read; from round `first + k` on it reads and sends
//! exactly as a plain stream started in round s − 1 would. Its client gets
//! its first byte within round s instead of at the start of round s + 1, and
//! k rounds of data at once (what players probe before they play: an
//! MPEG-TS player reads seconds of the title, then its last 250 kB); the
//! rounds it read early are charged to the server buffer from round s until
//! the round a plain stream would have sent them, so a client that takes
//! them only at its playback rate is covered. Nothing else changes: every
//! read is charged to its disk in the round it is made.
//!
//! That burst *spends* its lead: from round `first + k` on its client is
//! again about one round ahead of what it plays. A burst that **keeps** its
//! lead ([`BurstLead::Kept`]) reads on from round `first + k` in stream
//! round 1, one round per round, as a plain stream started k − 1 rounds
//! earlier: its client stays about k rounds ahead for the whole stream, as
//! a rate-limited HTTP server's client does after its first bytes (nginx's
//! `limit_rate_after`). Its early rounds are charged to the server buffer
//! until that plain stream would have sent them, and its later rounds as a
//! plain stream's; a client that takes them only at its playback rate holds
//! the lead's rounds at the server, beyond its buffer, as under a backup
//! window's lead (below).
//!
//! A stream of a title with read **groups** (seed 003's GPMP,
//! [`Grouping`]) reads each group of rounds in one request in the round
//! its first round would be read alone, and sends each round when a plain
//! stream would: the rest of the group waits in the server buffer. A stream
//! that starts mid-group reads the rest of that group in its first round.
//! Groups and a start burst are exclusive (a grouped stream has no burst).
//!
//! A plain stream may have a **lead** of L rounds (a backup window of
//! k = L + 1 rounds, `reservation::window`): it reads as a plain stream but
//! sends nothing before stream round L + 1, when every round read so far
//! goes at once, and from then on as a plain stream. Its client is then L
//! rounds ahead of what it plays, so a backup read recovered up to L rounds
//! late reaches it in time; the rounds held for the lead are charged to the
//! server buffer until they are sent.

use std::ops::Range;

use super::{BurstLead, Grouping, PairCost, RoundChoice, TitleCharges, stream_end};

/// How a stream reads one playback round.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReadKind {
    /// Its own request (or a read group's, `Shape::is_read_start`).
    Single,
    /// The first of a drive-cache pair: read from the media with the next
    /// round read on into a cache segment.
    PairFirst(PairCost),
    /// The second of a pair: read from the drive cache.
    PairSecond(PairCost),
}

/// Which playback rounds a stream reads, and how (see the module docs).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    /// The first playback round read.
    pub first: usize,
    /// The playback round after the last read.
    pub end: usize,
    /// Playback rounds read in the first stream round: 0 for a plain
    /// stream; otherwise 2 or more, or 1 for a one-round span.
    pub burst: usize,
    /// Whether its client keeps the burst's lead after it (see the module
    /// docs); a plain stream's is `Spent`.
    pub burst_lead: BurstLead,
    /// The read groups of playback rounds from `regroup_from` on
    /// ([`Grouping::NONE`]: one round per read): the title's, or another
    /// length where the stream was regrouped (seed 004's stream combination
    /// in the array, [`Shape::regrouped`]).
    pub grouping: Grouping,
    /// Where the stream's groups last changed length: rounds before it are
    /// read in groups of `grouping_before`, cut at it. `first` (or less) for
    /// a stream never regrouped.
    pub regroup_from: usize,
    pub grouping_before: Grouping,
    /// Reads in drive-cache pairs where the title has them (seed 003's
    /// Sweep&Prefetch and Gradual Prefetching): each pair's second round is
    /// prefetched into the drive cache with its first and read from there
    /// in its own round. Timing is a plain stream's.
    pub pairs: bool,
    /// The first playback round that may start a pair: `first`, or where
    /// a stream admitted plain was switched into pairs (seed 003's switch
    /// into prefetch mode, [`Shape::switched_to_pairs`]).
    pub pairs_from: usize,
    /// The playback round after the last that may be read in a pair:
    /// `end`, or where a switched stream's partner ends.
    pub pairs_end: usize,
    /// Rounds the first send waits beyond a plain stream's (a plain,
    /// ungrouped stream's only; 0: none, as in seed 000).
    pub lead: usize,
}

impl Shape {
    /// The shape of a stream over playback rounds `first..end` with a start
    /// burst of up to `burst_rounds_max` rounds (0: plain). A burst reads at
    /// least two rounds: a one-round burst would read the second round in
    /// the same round anyway (it is a plain stream started a round earlier
    /// from there).
    pub fn new(first: usize, end: usize, burst_rounds_max: usize, grouping: Grouping) -> Shape {
        debug_assert!(first < end, "a stream reads at least one round");
        let burst = if burst_rounds_max == 0 || grouping.is_grouped() {
            0
        } else {
            burst_rounds_max.max(2).min(end - first)
        };
        Shape {
            first,
            end,
            burst,
            burst_lead: BurstLead::Spent,
            grouping,
            regroup_from: first,
            grouping_before: grouping,
            pairs: false,
            pairs_from: first,
            pairs_end: end,
            lead: 0,
        }
    }

    /// This burst shape keeping its lead as `lead` says (a plain shape is
    /// returned as it is).
    pub fn with_burst_lead(self, burst_lead: BurstLead) -> Shape {
        if !self.is_burst() {
            return self;
        }
        Shape { burst_lead, ..self }
    }

    /// How many rounds earlier than its start a plain stream starts that
    /// reads and sends as this burst stream does after its burst: one when
    /// the burst spends its lead, `burst − 1` when it keeps it.
    fn after_burst_shift(&self) -> usize {
        match self.burst_lead {
            BurstLead::Spent => 1,
            BurstLead::Kept => self.burst.saturating_sub(1).max(1),
        }
    }

    /// This plain, ungrouped shape sending nothing before stream round
    /// `lead + 1` (see the module docs); other shapes are returned as they are.
    pub fn with_lead(self, lead: usize) -> Shape {
        if self.is_burst() || self.is_grouped() || self.pairs {
            return self;
        }
        Shape { lead, ..self }
    }

    /// This shape reading in drive-cache pairs (a plain stream's only: no
    /// burst, no read groups).
    pub fn with_pairs(self) -> Shape {
        Shape {
            pairs: self.burst == 0 && !self.is_grouped(),
            ..self
        }
    }

    /// This (plain) shape reading its playback rounds `from..end` in
    /// drive-cache pairs and the others as before: nothing it reads or
    /// sends moves, only how those rounds are read.
    pub fn switched_to_pairs(self, from: usize, end: usize) -> Shape {
        Shape {
            pairs_from: from.max(self.first),
            pairs_end: end.min(self.end),
            ..self.with_pairs()
        }
    }

    /// This (grouped, burst-free) shape reading its playback rounds from
    /// `from` on in groups of `grouping`, the rounds before as before. `from`
    /// must start a request of the current shape, and rounds before the
    /// last regroup must no longer matter (the caller's rule: they have
    /// been sent), since only one earlier grouping is kept.
    pub fn regrouped(self, from: usize, grouping: Grouping) -> Shape {
        debug_assert!(!self.is_burst() && !self.pairs, "a plain stream");
        debug_assert!(
            from >= self.end || self.is_read_start(from),
            "a regroup starts a request"
        );
        Shape {
            grouping_before: self.grouping_at(from.saturating_sub(1)),
            regroup_from: from,
            grouping,
            ..self
        }
    }

    /// The read groups playback round `i` belongs to.
    pub fn grouping_at(&self, i: usize) -> Grouping {
        if i < self.regroup_from {
            self.grouping_before
        } else {
            self.grouping
        }
    }

    /// Whether any of its rounds are read in groups.
    pub fn is_grouped(&self) -> bool {
        self.grouping.is_grouped() || self.grouping_before.is_grouped()
    }

    /// The round after the last of `i`'s request (not cut to `end`).
    fn group_end(&self, i: usize) -> usize {
        let end = self.grouping_at(i).end(i);
        if i < self.regroup_from {
            end.min(self.regroup_from)
        } else {
            end
        }
    }

    /// How playback round `i` is read, given the replica chosen for each
    /// round (`choice[i − first]`): a pair only where the title has one,
    /// both its rounds are in the span and both read the primary.
    pub(super) fn read_kind(
        &self,
        charges: &TitleCharges,
        choice: &[RoundChoice],
        i: usize,
    ) -> ReadKind {
        if !self.pairs {
            return ReadKind::Single;
        }
        let primary = |j: usize| {
            j >= self.pairs_from
                && j < self.pairs_end
                && choice.get(j - self.first) == Some(&RoundChoice::Primary)
        };
        if let Some(p) = charges.pair(i)
            && primary(i)
            && primary(i + 1)
        {
            return ReadKind::PairFirst(p);
        }
        if i > self.first
            && let Some(p) = charges.pair(i - 1)
            && primary(i - 1)
            && primary(i)
        {
            return ReadKind::PairSecond(p);
        }
        ReadKind::Single
    }

    /// The start burst, in playback rounds from `first`, of a stream of
    /// this title over `first..end`: the whole span when it holds at most
    /// `bytes_max` bytes, otherwise `rounds` (0 and 0: no burst). The byte
    /// term is for short titles and ranges: a player that reads a title's
    /// end to find its duration reads on through its first connection when
    /// the end is near (within its TCP window) instead of asking for the
    /// end alone, so a short title is wanted whole.
    pub fn burst_rounds(
        charges: &TitleCharges,
        first: usize,
        end: usize,
        rounds: usize,
        bytes_max: u64,
    ) -> usize {
        let span_bytes: u64 = charges.read_bytes[first..end].iter().sum();
        if span_bytes <= bytes_max {
            end - first
        } else {
            rounds
        }
    }

    pub fn is_burst(&self) -> bool {
        self.burst > 0
    }

    /// Whether playback round `i` is read in the first round, ahead of time.
    pub fn is_early(&self, i: usize) -> bool {
        i < self.first + self.burst
    }

    /// The playback round whose request reads playback round `i`: `i`
    /// itself unless `i` is read with the rest of its group.
    pub fn read_start(&self, i: usize) -> usize {
        let start = self.grouping_at(i).start(i).max(self.first);
        if i >= self.regroup_from {
            start.max(self.regroup_from)
        } else {
            start
        }
    }

    /// Whether playback round `i` is read by a request of its own (or is
    /// the first round of its group's request), i.e. is charged.
    pub fn is_read_start(&self, i: usize) -> bool {
        self.read_start(i) == i
    }

    /// The stream round (offset from the start round) in which playback
    /// round `i` is read.
    pub fn read_offset(&self, i: usize) -> usize {
        if !self.is_burst() {
            self.read_start(i) - self.first
        } else if self.is_early(i) {
            0
        } else {
            i - self.first - self.after_burst_shift()
        }
    }

    /// The stream round from which playback round `i` may be sent: the
    /// round after its read, or its read round for a round read early; a
    /// round read ahead with its group, when a plain stream would send it.
    pub fn send_offset(&self, i: usize) -> usize {
        if self.is_early(i) {
            0
        } else if self.is_burst() {
            self.read_offset(i) + 1
        } else {
            (i - self.first + 1).max(self.lead + 1)
        }
    }

    /// The playback rounds read in stream round `q`: for a grouped stream,
    /// one request's (its first is the one charged, [`Shape::is_read_start`]).
    pub fn reads_at(&self, q: usize) -> Range<usize> {
        if !self.is_burst() {
            let i = (self.first + q).min(self.end);
            if !self.is_read_start(i) {
                return i..i;
            }
            return i..self.group_end(i).min(self.end);
        }
        if q == 0 {
            return self.first..self.first + self.burst;
        }
        let next = self.first + q + self.after_burst_shift();
        let i = next.clamp(self.first + self.burst, self.end);
        if i == next {
            i..(i + 1).min(self.end)
        } else {
            i..i
        }
    }

    /// The first playback round read in stream round `q` or later (`end`
    /// when there is none).
    pub fn first_read_from(&self, q: usize) -> usize {
        if !self.is_burst() {
            let i = (self.first + q).min(self.end);
            if self.is_read_start(i) {
                i
            } else {
                self.group_end(i).min(self.end)
            }
        } else if q == 0 {
            self.first
        } else {
            (self.first + q + self.after_burst_shift()).clamp(self.first + self.burst, self.end)
        }
    }

    /// Stream rounds after the last read (sending and holding included):
    /// the stream's length in rounds.
    pub fn stream_rounds(&self, charges: &TitleCharges) -> usize {
        let plain = stream_end(charges, self.end) - self.first;
        if self.is_burst() {
            // A plain stream started a round (or the kept lead) earlier,
            // from the same end.
            plain.saturating_sub(self.after_burst_shift()).max(1)
        } else if self.lead > 0 {
            // A span read before its first send is held until then.
            plain.max(self.lead + 2)
        } else {
            plain
        }
    }

    /// The stream round after the last read; for a grouped stream, after
    /// the round its last playback round would be read in alone (its reads
    /// are ahead, its playing is not).
    pub fn reads_end_offset(&self) -> usize {
        if self.is_burst() {
            self.read_offset(self.end - 1) + 1
        } else {
            self.end - self.first
        }
    }

    /// Server buffer held and bytes sent in stream round `q`.
    pub fn charges_at(&self, charges: &TitleCharges, q: usize) -> (u64, u64) {
        if self.lead > 0 && q <= self.lead + 1 {
            // Every round read so far is held until the first send, in
            // stream round lead + 1, which sends them all.
            let read_end = (self.first + q + 1).min(self.end);
            let buffer = charges.read_bytes[self.first..read_end].iter().sum();
            let network = if q == self.lead + 1 {
                let sent_end = (self.first + self.lead + 1).min(self.end);
                (self.first..sent_end)
                    .map(|i| charges.network_bytes[i + 1])
                    .sum()
            } else {
                0
            };
            return (buffer, network);
        }
        if !self.is_burst() {
            let i = self.first + q;
            return (charges.buffer_bytes[i], charges.network_bytes[i]);
        }
        let early_end = self.first + self.burst;
        let shift = self.after_burst_shift();
        // Rounds read early are held through the first round, and then until
        // the plain stream started `shift` rounds earlier would have sent
        // them (offset i + 1 − first − shift).
        let held_from = match q {
            0 => self.first,
            _ => self.first + q + shift - 1,
        };
        let mut buffer: u64 = (held_from..early_end).map(|i| charges.read_bytes[i]).sum();
        // After the burst: double buffering, as a plain stream (the round
        // read in stream round q and the one read in q − 1).
        for i in [self.first + q + shift - 1, self.first + q + shift] {
            if i >= early_end && i < self.end {
                buffer += charges.read_bytes[i];
            }
        }
        let client = |i: usize| charges.network_bytes[i + 1];
        let network = if q == 0 {
            (self.first..early_end).map(client).sum()
        } else {
            let i = self.first + q + shift - 1;
            if i >= early_end && i < self.end {
                client(i)
            } else {
                0
            }
        };
        (buffer, network)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reservation::Charge;
    use crate::units::DiskIndex;

    fn charges(rounds: usize) -> TitleCharges {
        let primary = (0..rounds)
            .map(|i| Charge {
                disk: DiskIndex((i % 4) as u32),
                cost_ns: 1,
                revolutions: 0,
            })
            .collect();
        let read: Vec<u64> = (0..rounds).map(|i| 1000 + i as u64).collect();
        let buffer = (0..=rounds)
            .map(|r| read.get(r).copied().unwrap_or(0) + if r > 0 { read[r - 1] } else { 0 })
            .collect();
        let client: Vec<u64> = (0..rounds).map(|i| 900 + i as u64).collect();
        TitleCharges::new(primary, vec![Vec::new(); rounds], buffer, &client).unwrap()
    }

    const GROUPINGS: [Grouping; 3] = [
        Grouping {
            segment_rounds: 6,
            group_rounds: 4,
        },
        Grouping {
            segment_rounds: 5,
            group_rounds: 5,
        },
        Grouping {
            segment_rounds: 8,
            group_rounds: 3,
        },
    ];

    /// A lead of L rounds: reads are a plain stream's; the first send is
    /// in stream round L + 1 and sends every round read by then; each round
    /// reaches the client at least L rounds before it plays (a backup read
    /// recovered up to L rounds late is in time); the held rounds are
    /// charged to the buffer until then, and what is sent in all is the
    /// client's bytes of the span.
    #[test]
    fn a_lead_holds_the_first_send_and_keeps_the_client_ahead() {
        let c = charges(12);
        let r = |i: usize| c.read_bytes[i];
        for first in 0..12 {
            for end in first + 1..=12 {
                let plain = Shape::new(first, end, 0, Grouping::NONE);
                for lead in 0..6 {
                    let led = plain.with_lead(lead);
                    let first_send = led.send_offset(first);
                    assert_eq!(first_send, lead + 1, "{led:?}");
                    for i in first..end {
                        assert_eq!(led.read_offset(i), plain.read_offset(i));
                        // The client plays round i at first_send + (i - first),
                        // and has it once its read, up to `lead` rounds late,
                        // is done.
                        let plays_at = first_send + (i - first);
                        assert!(led.read_offset(i) + lead < plays_at, "{led:?} {i}");
                        assert!(led.send_offset(i) <= plays_at);
                        assert!(led.send_offset(i) < led.stream_rounds(&c));
                    }
                    let sent: u64 = (0..led.stream_rounds(&c))
                        .map(|q| led.charges_at(&c, q).1)
                        .sum();
                    if lead > 0 {
                        let client: u64 = (first..end).map(|i| c.network_bytes[i + 1]).sum();
                        assert_eq!(sent, client, "{led:?}");
                    }
                    if lead > 0 {
                        // Held until the first send: everything read so far.
                        let held: u64 = (first..(first + lead + 1).min(end)).map(r).sum();
                        assert_eq!(led.charges_at(&c, lead).0, held, "{led:?}");
                        assert_eq!(led.charges_at(&c, lead).1, 0);
                    }
                }
            }
        }
        // Shapes that send on other schedules keep them.
        let burst = Shape::new(0, 10, 3, Grouping::NONE);
        assert_eq!(burst.with_lead(2), burst);
    }

    /// Every playback round is read exactly once, in the round `read_offset`
    /// says, and sent no earlier than it is read.
    #[test]
    fn every_round_is_read_once_where_read_offset_says() {
        let c = charges(12);
        for first in 0..12 {
            for end in first + 1..=12 {
                for (burst, grouping) in [0, 1, 2, 3, 5, 20]
                    .into_iter()
                    .map(|b| (b, Grouping::NONE))
                    .chain(GROUPINGS.iter().map(|&g| (3, g)))
                {
                    for lead in [BurstLead::Spent, BurstLead::Kept] {
                        let shape = Shape::new(first, end, burst, grouping).with_burst_lead(lead);
                        let mut seen = [0; 12];
                        for q in 0..shape.stream_rounds(&c) + 2 {
                            for i in shape.reads_at(q) {
                                seen[i] += 1;
                                assert_eq!(shape.read_offset(i), q, "{shape:?} {i}");
                                assert!(shape.send_offset(i) >= q);
                                assert!(shape.first_read_from(q) <= i);
                            }
                            assert!(shape.first_read_from(q) >= shape.reads_at(q).start);
                        }
                        for (i, &n) in seen.iter().enumerate() {
                            assert_eq!(n, usize::from((first..end).contains(&i)), "{shape:?} {i}");
                        }
                        assert!(shape.reads_end_offset() <= shape.stream_rounds(&c));
                        assert_eq!(shape.first_read_from(shape.reads_end_offset()), end);
                        // What a burst sends in all is the client's bytes of
                        // the span (a plain stream is charged its title's).
                        if shape.is_burst() {
                            let sent: u64 = (0..shape.stream_rounds(&c))
                                .map(|q| shape.charges_at(&c, q).1)
                                .sum();
                            let client: u64 = (first..end).map(|i| c.network_bytes[i + 1]).sum();
                            assert_eq!(sent, client, "{shape:?}");
                        }
                    }
                }
            }
        }
    }

    /// A burst stream is a plain stream started a round earlier once its
    /// burst is over: the same reads and the same sends, round by round.
    #[test]
    fn after_its_burst_a_burst_stream_runs_as_a_plain_stream_a_round_earlier() {
        let c = charges(10);
        let plain = Shape::new(2, 10, 0, Grouping::NONE);
        let burst = Shape::new(2, 10, 3, Grouping::NONE);
        assert_eq!(burst.reads_at(0), 2..5);
        assert_eq!(burst.reads_at(1), 5..5);
        for i in 5..10 {
            assert_eq!(burst.read_offset(i) + 1, plain.read_offset(i));
            assert_eq!(burst.send_offset(i) + 1, plain.send_offset(i));
        }
        for q in 4..burst.stream_rounds(&c) {
            assert_eq!(burst.charges_at(&c, q), plain.charges_at(&c, q + 1));
        }
        assert_eq!(burst.stream_rounds(&c) + 1, plain.stream_rounds(&c));
    }

    /// A burst that keeps its lead reads on from the round after the burst
    /// in its second round, and is from then on a plain stream started
    /// `burst − 1` rounds earlier: the same reads, sends and charges. Its
    /// client gets every round after the burst `burst − 1` rounds before a
    /// player started at the first byte plays it.
    #[test]
    fn a_burst_that_keeps_its_lead_runs_as_a_plain_stream_started_the_burst_earlier() {
        let c = charges(12);
        for first in 0..12 {
            for end in first + 1..=12 {
                let plain = Shape::new(first, end, 0, Grouping::NONE);
                for burst in 2..8 {
                    let kept = Shape::new(first, end, burst, Grouping::NONE)
                        .with_burst_lead(BurstLead::Kept);
                    let k = kept.burst;
                    let shift = (k - 1).max(1);
                    for i in first + k..end {
                        assert_eq!(kept.read_offset(i) + shift, plain.read_offset(i));
                        assert_eq!(kept.send_offset(i) + shift, plain.send_offset(i));
                        // Round i plays i - first + 1 rounds after the first byte.
                        assert_eq!(i - first + 1 - kept.send_offset(i), shift, "{kept:?} {i}");
                    }
                    if first + k < end {
                        assert_eq!(kept.reads_at(1), first + k..first + k + 1);
                    }
                    // (Where both read: a plain stream is charged its
                    // title's rounds past the span's end.)
                    for q in (2..kept.stream_rounds(&c)).filter(|q| first + q + shift < end) {
                        assert_eq!(kept.charges_at(&c, q), plain.charges_at(&c, q + shift));
                    }
                    assert_eq!(
                        kept.stream_rounds(&c) + shift,
                        plain.stream_rounds(&c).max(shift + 1)
                    );
                }
            }
        }
        let r = |i: u64| 1000 + i;
        let s = Shape::new(0, 10, 3, Grouping::NONE).with_burst_lead(BurstLead::Kept);
        assert_eq!(s.charges_at(&c, 0), (r(0) + r(1) + r(2), 900 + 901 + 902));
        assert_eq!(s.charges_at(&c, 1), (r(2) + r(3), 0));
        assert_eq!(s.charges_at(&c, 2), (r(3) + r(4), 903));
        assert_eq!(s.charges_at(&c, 8), (r(9), 909));
        assert_eq!(s.stream_rounds(&c), 9);
        // A plain shape has no lead to keep.
        let plain = Shape::new(0, 10, 0, Grouping::NONE);
        assert_eq!(plain.with_burst_lead(BurstLead::Kept), plain);
    }

    /// What a burst holds: each early round from the first round until a
    /// plain stream a round earlier would send it; everything sent at once.
    #[test]
    fn a_burst_holds_its_early_rounds_until_their_plain_send_round() {
        let c = charges(10);
        let s = Shape::new(0, 10, 3, Grouping::NONE);
        let r = |i: u64| 1000 + i;
        assert_eq!(s.charges_at(&c, 0), (r(0) + r(1) + r(2), 900 + 901 + 902));
        assert_eq!(s.charges_at(&c, 1), (r(1) + r(2), 0));
        assert_eq!(s.charges_at(&c, 2), (r(2) + r(3), 0));
        assert_eq!(s.charges_at(&c, 3), (r(3) + r(4), 903));
        // A short range read whole in its first round.
        let tail = Shape::new(7, 10, 4, Grouping::NONE);
        assert_eq!(tail.burst, 3);
        assert_eq!(tail.stream_rounds(&c), 3);
        assert_eq!(
            tail.charges_at(&c, 0),
            (r(7) + r(8) + r(9), 907 + 908 + 909)
        );
        assert_eq!(tail.charges_at(&c, 2), (r(9), 0));
        // A one-round span.
        let one = Shape::new(9, 10, 4, Grouping::NONE);
        assert_eq!((one.burst, one.stream_rounds(&c)), (1, 1));
        assert_eq!(one.charges_at(&c, 0), (r(9), 909));
    }

    /// A grouped stream reads each group in one request at the round its
    /// first round would be read alone and sends every round when a plain
    /// stream would; one that starts mid-group reads the rest of the group
    /// first. No burst with groups.
    #[test]
    fn a_grouped_stream_reads_ahead_and_sends_as_a_plain_stream() {
        let g = GROUPINGS[0]; // segments of 6, groups of 4: 0..4, 4..6, 6..10, 10..12
        let whole = Shape::new(0, 12, 5, g);
        assert_eq!(whole.burst, 0);
        let reads: Vec<_> = (0..12).map(|q| whole.reads_at(q)).collect();
        assert_eq!(reads[0], 0..4);
        assert_eq!(reads[1], 1..1);
        assert_eq!(reads[4], 4..6);
        assert_eq!(reads[6], 6..10);
        assert_eq!(reads[10], 10..12);
        assert_eq!(whole.read_offset(3), 0);
        assert_eq!(whole.send_offset(3), 4);
        assert_eq!(whole.reads_end_offset(), 12);
        let mid = Shape::new(2, 11, 0, g);
        assert_eq!(mid.reads_at(0), 2..4);
        assert!(mid.is_read_start(2) && !mid.is_read_start(3));
        assert_eq!(mid.reads_at(8), 10..11);
        assert_eq!(mid.first_read_from(1), 4);
        assert_eq!(mid.send_offset(2), 1);
    }
}
