//! An interface node's buffer of one stream (seed 001's B_I): when it hands
//! the stream's bytes to its client, and how long it can go on doing so with
//! nothing coming from upstream.
//!
//! An interface node relays a stream that the object manager paces one
//! playback round per round. It holds each stream back by `hold_ns` and
//! then releases it on the title's own schedule (round k's client bytes by
//! `anchor + k·T`), not on the times bytes happen to arrive. So the client
//! sees the same consumption curve it would see from the manager, later by
//! the hold; and when the upstream stops (the manager lost, a standby taking
//! over), the client keeps receiving from the buffer while the interface
//! node asks the new manager for the rest with a Range request. The resumed
//! stream's bytes are released on the same curve, so a takeover shorter
//! than the slack ([`Relay::slack_ns`]) costs the client nothing.
//!
//! Pure: the I/O side (`rondo_cluster::interface_node`) hands it the time
//! and the bytes.

use crate::array::RoundIndex;

/// When each of a stream's body bytes is due at the client: the body's
/// cumulative bytes by release round, from the round holding its first byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseCurve {
    /// `due_bytes[k]`: body bytes released by the end of release round k
    /// (non-decreasing, the last equal to the body's length).
    due_bytes: Vec<u64>,
}

impl ReleaseCurve {
    /// The curve of the body `[first_byte, first_byte + length_bytes)` of a
    /// title indexed by `index`: release round k carries what the title's
    /// playback round `r(first_byte) + k` holds of it, as the manager paces a
    /// Range request (admitted from the round holding its first byte).
    /// `None` for an empty body or one past the title's end.
    pub fn for_span(index: &RoundIndex, first_byte: u64, length_bytes: u64) -> Option<Self> {
        if length_bytes == 0 || first_byte.checked_add(length_bytes)? > index.size_bytes() {
            return None;
        }
        let first_round = index.position_of_byte(first_byte)?.round;
        let last_round = index.position_of_byte(first_byte + length_bytes - 1)?.round;
        let due_bytes = (first_round..=last_round)
            .map(|round| (index.round_byte_range(round).end - first_byte).min(length_bytes))
            .collect();
        Some(ReleaseCurve { due_bytes })
    }

    /// Release rounds the body spans.
    pub fn rounds(&self) -> usize {
        self.due_bytes.len()
    }

    pub fn length_bytes(&self) -> u64 {
        *self.due_bytes.last().expect("a curve has a round")
    }

    /// Body bytes due by the end of release round `k` (all of them past the
    /// last round).
    pub fn due_bytes(&self, k: usize) -> u64 {
        self.due_bytes
            .get(k)
            .copied()
            .unwrap_or_else(|| self.length_bytes())
    }

    /// The release round in which body byte `offset` is due (`rounds()` for
    /// offsets at or past the end).
    pub fn round_due(&self, offset: u64) -> usize {
        self.due_bytes.partition_point(|&due| due <= offset)
    }
}

/// B_Ij, what one stream of `index`'s title may hold in an interface
/// node's buffer when held back by `hold_ns`: the most bytes any
/// ⌈hold / T⌉ + 1 consecutive rounds of the title carry (the held-back
/// playback and the round arriving ahead of its release). The node's
/// admission reserves this per stream (seed 001 §7.1, condition (4)).
pub fn stream_buffer_bytes(index: &RoundIndex, hold_ns: u64) -> u64 {
    let window = hold_ns.div_ceil(index.round_duration_ns()) as usize + 1;
    let rounds = index.rounds();
    if rounds <= window {
        return index.size_bytes();
    }
    (0..=rounds - window)
        .map(|k| {
            let r = index.rounds_byte_range(k..k + window);
            r.end - r.start
        })
        .max()
        .unwrap_or(0)
}

/// One relayed stream: bytes received from upstream and released to the
/// client, on a [`ReleaseCurve`] anchored `hold_ns` after the first byte
/// arrived. Times are nanoseconds on the caller's clock.
#[derive(Clone, Debug)]
pub struct Relay {
    curve: ReleaseCurve,
    round_duration_ns: u64,
    hold_ns: u64,
    /// When release round 0 begins; set by the first byte received.
    anchor_ns: Option<u64>,
    received_bytes: u64,
    released_bytes: u64,
    /// Release rounds whose bytes had not all arrived when the round began:
    /// the client got them late (a stall at a client with no slack).
    late_rounds: u32,
    /// The next release round not yet begun.
    next_round: usize,
    buffered_bytes_max: u64,
}

impl Relay {
    pub fn new(curve: ReleaseCurve, round_duration_ns: u64, hold_ns: u64) -> Relay {
        assert!(round_duration_ns > 0, "rounds have a positive length");
        Relay {
            curve,
            round_duration_ns,
            hold_ns,
            anchor_ns: None,
            received_bytes: 0,
            released_bytes: 0,
            late_rounds: 0,
            next_round: 0,
            buffered_bytes_max: 0,
        }
    }

    pub fn curve(&self) -> &ReleaseCurve {
        &self.curve
    }

    /// `bytes` more of the body arrived at `now_ns` (in order, from
    /// whichever upstream). Bytes past the body's end are a caller's error.
    pub fn received(&mut self, now_ns: u64, bytes: u64) {
        assert!(
            self.received_bytes + bytes <= self.curve.length_bytes(),
            "an upstream sent more than the body"
        );
        if bytes > 0 && self.anchor_ns.is_none() {
            self.anchor_ns = Some(now_ns + self.hold_ns);
        }
        self.received_bytes += bytes;
        self.buffered_bytes_max = self
            .buffered_bytes_max
            .max(self.received_bytes - self.released_bytes);
    }

    pub fn received_bytes(&self) -> u64 {
        self.received_bytes
    }

    pub fn released_bytes(&self) -> u64 {
        self.released_bytes
    }

    /// Every byte received and released.
    pub fn is_done(&self) -> bool {
        self.released_bytes == self.curve.length_bytes()
    }

    /// When release round `k` begins; `None` before the first byte.
    pub fn round_start_ns(&self, k: usize) -> Option<u64> {
        self.anchor_ns
            .map(|anchor| anchor + k as u64 * self.round_duration_ns)
    }

    /// How many more bytes go to the client at `now_ns`: what the rounds
    /// begun by now are due, of what has arrived. The caller sends them and
    /// asks again at [`Relay::next_release_ns`] or when more bytes arrive.
    pub fn release(&mut self, now_ns: u64) -> u64 {
        let Some(anchor) = self.anchor_ns else {
            return 0;
        };
        // Rounds begun by now; a round that begins with its bytes missing
        // is late (counted once).
        while self.next_round < self.curve.rounds()
            && anchor + self.next_round as u64 * self.round_duration_ns <= now_ns
        {
            if self.received_bytes < self.curve.due_bytes(self.next_round) {
                self.late_rounds += 1;
            }
            self.next_round += 1;
        }
        let due = match self.next_round {
            0 => 0,
            k => self.curve.due_bytes(k - 1),
        };
        let release = due
            .min(self.received_bytes)
            .saturating_sub(self.released_bytes);
        self.released_bytes += release;
        release
    }

    /// When the next release round begins (`None` when every round has).
    pub fn next_release_ns(&self) -> Option<u64> {
        (self.next_round < self.curve.rounds())
            .then(|| self.round_start_ns(self.next_round))
            .flatten()
    }

    /// How long from `now_ns` the client is served from what has already
    /// arrived: until the release round that first needs a byte not yet
    /// received begins (`u64::MAX` once everything has arrived). Zero when
    /// that round has begun. An upstream that stops at `now_ns` must resume
    /// (its first round arriving) within this. `None` before the first
    /// byte: the release curve is anchored by the first bytes to arrive, so
    /// a stream with nothing received has no schedule to fall behind (an
    /// upstream lost then delays its start, not its playback).
    pub fn slack_ns(&self, now_ns: u64) -> Option<u64> {
        if self.received_bytes >= self.curve.length_bytes() {
            return Some(u64::MAX);
        }
        self.round_start_ns(self.curve.round_due(self.received_bytes))
            .map(|starts| starts.saturating_sub(now_ns))
    }

    pub fn late_rounds(&self) -> u32 {
        self.late_rounds
    }

    /// The most bytes held at once (received, not yet released).
    pub fn buffered_bytes_max(&self) -> u64 {
        self.buffered_bytes_max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 1_000_000_000;

    #[test]
    fn a_streams_buffer_is_its_titles_busiest_hold_and_one_round() {
        // Rounds of 10, 40, 10, 10, 30 bytes.
        let index = RoundIndex::new(&[10, 40, 10, 10, 30], T);
        assert_eq!(stream_buffer_bytes(&index, 0), 40, "one round");
        assert_eq!(
            stream_buffer_bytes(&index, T),
            50,
            "two rounds: 10+40 or 40+10"
        );
        assert_eq!(stream_buffer_bytes(&index, T + 1), 60, "three rounds");
        assert_eq!(stream_buffer_bytes(&index, 10 * T), 100, "the whole title");
    }

    fn index() -> RoundIndex {
        // Rounds of 100, 50, 0 (empty), 200 and 10 bytes.
        RoundIndex::new(&[100, 50, 0, 200, 10], T)
    }

    #[test]
    fn a_whole_title_is_released_on_its_own_rounds() {
        let curve = ReleaseCurve::for_span(&index(), 0, 360).unwrap();
        assert_eq!(curve.rounds(), 5);
        assert_eq!(
            (0..6).map(|k| curve.due_bytes(k)).collect::<Vec<_>>(),
            [100, 150, 150, 350, 360, 360]
        );
        assert_eq!(curve.round_due(0), 0);
        assert_eq!(curve.round_due(99), 0);
        assert_eq!(curve.round_due(100), 1);
        assert_eq!(curve.round_due(150), 3);
        assert_eq!(curve.round_due(360), 5);
    }

    #[test]
    fn a_range_starts_in_the_round_holding_its_first_byte() {
        // Bytes 120..=299: the rest of round 1 (30 bytes), the empty round,
        // 150 of round 3.
        let curve = ReleaseCurve::for_span(&index(), 120, 180).unwrap();
        assert_eq!(curve.rounds(), 3);
        assert_eq!(
            (0..3).map(|k| curve.due_bytes(k)).collect::<Vec<_>>(),
            [30, 30, 180]
        );
        assert!(ReleaseCurve::for_span(&index(), 300, 61).is_none());
        assert!(ReleaseCurve::for_span(&index(), 10, 0).is_none());
    }

    #[test]
    fn the_client_gets_the_curve_shifted_by_the_hold() {
        let curve = ReleaseCurve::for_span(&index(), 0, 360).unwrap();
        let mut relay = Relay::new(curve, T, 3 * T);
        assert_eq!(relay.release(0), 0);
        // The upstream sends round k at 10 + k·T.
        relay.received(10, 100);
        assert_eq!(relay.next_release_ns(), Some(3 * T + 10));
        assert_eq!(relay.release(T), 0, "held");
        relay.received(T + 10, 50);
        relay.received(3 * T + 10, 200);
        assert_eq!(relay.release(3 * T + 10), 100);
        assert_eq!(relay.release(4 * T + 9), 0);
        assert_eq!(relay.release(4 * T + 10), 50);
        assert_eq!(relay.release(6 * T + 10), 200, "rounds 2 and 3");
        relay.received(4 * T + 10, 10);
        assert_eq!(relay.release(7 * T + 10), 10);
        assert!(relay.is_done());
        assert_eq!(relay.late_rounds(), 0);
        assert_eq!(relay.buffered_bytes_max(), 350);
    }

    #[test]
    fn slack_is_what_the_buffer_covers_and_a_gap_within_it_costs_nothing() {
        let curve = ReleaseCurve::for_span(&index(), 0, 360).unwrap();
        let mut relay = Relay::new(curve, T, 3 * T);
        assert_eq!(relay.slack_ns(0), None, "nothing received: no schedule yet");
        relay.received(0, 100);
        relay.received(T, 50);
        // Upstream lost at 1.5 T: byte 150 is due in round 3, at 3 T + 3 T.
        assert_eq!(relay.slack_ns(T + T / 2), Some(6 * T - (T + T / 2)));
        for t in [3 * T, 4 * T] {
            relay.release(t);
        }
        // The resumed stream's first round arrives at 5.9 T: in time.
        relay.received(5 * T + 9 * T / 10, 200);
        relay.release(6 * T);
        assert_eq!(relay.released_bytes(), 350);
        assert_eq!(relay.late_rounds(), 0);
        assert_eq!(relay.slack_ns(6 * T), Some(T));
        relay.received(6 * T + 1, 10);
        assert_eq!(relay.slack_ns(6 * T + 1), Some(u64::MAX));
    }

    #[test]
    fn a_gap_past_the_slack_makes_a_round_late_and_releases_on_arrival() {
        let curve = ReleaseCurve::for_span(&index(), 0, 360).unwrap();
        let mut relay = Relay::new(curve, T, T);
        relay.received(0, 100);
        assert_eq!(relay.release(T), 100);
        assert_eq!(relay.release(2 * T), 0);
        assert_eq!(relay.late_rounds(), 1, "round 1's 50 bytes missing");
        relay.received(2 * T + 5, 30);
        assert_eq!(relay.release(2 * T + 5), 30, "released as it arrives");
        assert_eq!(relay.slack_ns(2 * T + 5), Some(0));
    }
}
