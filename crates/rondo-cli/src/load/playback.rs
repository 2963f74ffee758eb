//! The player model of `rondo load`: from the times a stream's rounds
//! arrive to its start-up latency and stalls.
//!
//! A title's schedule gives the client bytes of each playback round k
//! (round 0 holds the header pre-roll). Round k has *arrived* once the bytes
//! received reach Σ_{j≤k} client_bytes[j]. The start-up latency is the time
//! from the stream request to round 0's arrival. Playback starts a playout
//! delay D after that (D = 0 is the strict player that starts the instant
//! round 0 is complete). Round k is due one round length T after round k−1
//! began playing. If it has not arrived by its due time, the player stalls:
//! the stall is counted once for round k, playback pauses until the round
//! arrives, and every later due time moves by the stall's duration (as a
//! real player resumes where it paused). Times are nanoseconds since the
//! stream's request, so the model is a pure function that tests can drive.

/// One stream's playback, fed round arrivals in order.
#[derive(Clone, Debug)]
pub struct Player {
    round_duration_ns: u64,
    playout_delay_ns: u64,
    /// Rounds that have arrived (the next one expected is `rounds_arrived`).
    rounds_arrived: usize,
    /// When round 0 arrived, since the request.
    startup_ns: Option<u64>,
    /// When the most recently arrived round began (or will begin) playing.
    last_play_ns: u64,
    stalls: u32,
    stall_ns_total: u64,
    stall_ns_max: u64,
    /// Smallest margin by which a round arrived before it was due (negative
    /// margins are stalls); `None` until round 1 has arrived.
    min_slack_ns: Option<i64>,
    /// The playback round whose margin was `min_slack_ns`: where in a
    /// stream's life it came closest to (or past) a stall.
    min_slack_round: Option<usize>,
    /// The first stall: its round and when that round arrived (since the
    /// request), so a report can tell a start-up stall from a later one.
    first_stall: Option<(usize, u64)>,
}

impl Player {
    pub fn new(round_duration_ns: u64, playout_delay_ns: u64) -> Player {
        assert!(round_duration_ns > 0, "a round has a positive length");
        Player {
            round_duration_ns,
            playout_delay_ns,
            rounds_arrived: 0,
            startup_ns: None,
            last_play_ns: 0,
            stalls: 0,
            stall_ns_total: 0,
            stall_ns_max: 0,
            min_slack_ns: None,
            min_slack_round: None,
            first_stall: None,
        }
    }

    /// Round `rounds_arrived()` arrived at `arrival_ns` (since the request).
    /// Returns the stall this round caused, in nanoseconds (0 for none).
    pub fn round_arrived(&mut self, arrival_ns: u64) -> u64 {
        let round = self.rounds_arrived;
        self.rounds_arrived += 1;
        if round == 0 {
            self.startup_ns = Some(arrival_ns);
            self.last_play_ns = arrival_ns + self.playout_delay_ns;
            return 0;
        }
        let due_ns = self.last_play_ns + self.round_duration_ns;
        let slack_ns = due_ns as i64 - arrival_ns as i64;
        if self.min_slack_ns.is_none_or(|m| slack_ns < m) {
            self.min_slack_ns = Some(slack_ns);
            self.min_slack_round = Some(round);
        }
        if arrival_ns > due_ns {
            let stall_ns = arrival_ns - due_ns;
            self.first_stall.get_or_insert((round, arrival_ns));
            self.stalls += 1;
            self.stall_ns_total += stall_ns;
            self.stall_ns_max = self.stall_ns_max.max(stall_ns);
            self.last_play_ns = arrival_ns;
            stall_ns
        } else {
            self.last_play_ns = due_ns;
            0
        }
    }

    /// The stream ended at `end_ns` with `rounds` rounds in its title. If
    /// rounds were missing and playback had reached the next one's due time,
    /// that is a stall that never ended: counted, lasting until `end_ns`.
    pub fn end(&mut self, end_ns: u64, rounds: usize) {
        if self.startup_ns.is_none() || self.rounds_arrived >= rounds {
            return;
        }
        let due_ns = self.last_play_ns + self.round_duration_ns;
        if end_ns > due_ns {
            let stall_ns = end_ns - due_ns;
            self.first_stall
                .get_or_insert((self.rounds_arrived, end_ns));
            self.stalls += 1;
            self.stall_ns_total += stall_ns;
            self.stall_ns_max = self.stall_ns_max.max(stall_ns);
            if self.min_slack_ns.is_none_or(|m| -(stall_ns as i64) < m) {
                self.min_slack_ns = Some(-(stall_ns as i64));
                self.min_slack_round = Some(self.rounds_arrived);
            }
        }
    }

    pub fn rounds_arrived(&self) -> usize {
        self.rounds_arrived
    }

    /// Start-up latency: when round 0 arrived, since the request.
    pub fn startup_ns(&self) -> Option<u64> {
        self.startup_ns
    }

    /// When playback began (round 0 plus the playout delay), since the request.
    pub fn playback_start_ns(&self) -> Option<u64> {
        self.startup_ns.map(|s| s + self.playout_delay_ns)
    }

    /// When playback of the rounds that arrived ends (the last one plays
    /// for a whole round), since the request; `None` before round 0.
    pub fn playback_end_ns(&self) -> Option<u64> {
        self.startup_ns
            .map(|_| self.last_play_ns + self.round_duration_ns)
    }

    pub fn stalls(&self) -> u32 {
        self.stalls
    }

    pub fn stall_ns_total(&self) -> u64 {
        self.stall_ns_total
    }

    pub fn stall_ns_max(&self) -> u64 {
        self.stall_ns_max
    }

    pub fn min_slack_ns(&self) -> Option<i64> {
        self.min_slack_ns
    }

    /// The playback round of the smallest margin.
    pub fn min_slack_round(&self) -> Option<usize> {
        self.min_slack_round
    }

    /// The first stall's playback round and when it arrived (or the stream
    /// ended without it), in nanoseconds since the request.
    pub fn first_stall(&self) -> Option<(usize, u64)> {
        self.first_stall
    }
}

/// Cumulative byte thresholds: entry k is Σ_{j≤k} client_bytes[j], the bytes
/// a client must have received for round k to have arrived.
pub fn cumulative_bytes(client_bytes: &[u64]) -> Vec<u64> {
    let mut total = 0u64;
    client_bytes
        .iter()
        .map(|b| {
            total += b;
            total
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 1_000;

    fn play(arrivals: &[u64]) -> Player {
        let mut p = Player::new(T, 0);
        for &a in arrivals {
            p.round_arrived(a);
        }
        p
    }

    #[test]
    fn rounds_arriving_on_time_never_stall() {
        // Round 0 at 300, then one round per T (or earlier: ahead is fine).
        let p = play(&[300, 1_300, 1_500, 3_300, 4_299]);
        assert_eq!(p.startup_ns(), Some(300));
        assert_eq!(p.stalls(), 0);
        assert_eq!(p.stall_ns_total(), 0);
        assert_eq!(p.min_slack_ns(), Some(0));
        // Rounds 1 and 3 both arrived just in time: the first is kept.
        assert_eq!(p.min_slack_round(), Some(1));
        assert_eq!(p.first_stall(), None);
        assert_eq!(p.playback_end_ns(), Some(300 + 5 * T));
    }

    #[test]
    fn a_late_round_stalls_once_and_shifts_the_rest() {
        // Round 2 is due at 2_300 but arrives at 2_800: one 500 ns stall;
        // round 3 is then due at 3_800, and arriving at 3_500 is on time.
        let mut p = Player::new(T, 0);
        assert_eq!(p.round_arrived(300), 0);
        assert_eq!(p.round_arrived(1_300), 0);
        assert_eq!(p.round_arrived(2_800), 500);
        assert_eq!(p.round_arrived(3_500), 0);
        assert_eq!(p.stalls(), 1);
        assert_eq!(p.stall_ns_total(), 500);
        assert_eq!(p.stall_ns_max(), 500);
        assert_eq!(p.min_slack_ns(), Some(-500));
        assert_eq!(p.min_slack_round(), Some(2));
        assert_eq!(p.first_stall(), Some((2, 2_800)));
        assert_eq!(p.playback_end_ns(), Some(3_800 + T));
    }

    #[test]
    fn every_late_round_counts() {
        let p = play(&[0, 1_100, 2_300, 3_300]);
        assert_eq!(p.stalls(), 2);
        assert_eq!(p.stall_ns_total(), 100 + 200);
        assert_eq!(p.stall_ns_max(), 200);
        // The first stall is round 1's; the worst margin is round 2's.
        assert_eq!(p.first_stall(), Some((1, 1_100)));
        assert_eq!(p.min_slack_round(), Some(2));
    }

    #[test]
    fn a_playout_delay_absorbs_lateness_up_to_its_length() {
        // Rounds 1 and 2 come 400 ns late against round 0: the strict player
        // stalls, one with a 500 ns playout delay does not.
        let arrivals = [300, 1_700, 2_700, 3_300];
        assert_eq!(play(&arrivals).stalls(), 1);
        let mut p = Player::new(T, 500);
        for a in arrivals {
            p.round_arrived(a);
        }
        assert_eq!(p.stalls(), 0);
        assert_eq!(p.startup_ns(), Some(300));
        assert_eq!(p.playback_start_ns(), Some(800));
        assert_eq!(p.min_slack_ns(), Some(100));
        assert_eq!(p.playback_end_ns(), Some(800 + 4 * T));
        // Beyond the delay it stalls by the excess.
        let mut p = Player::new(T, 500);
        for a in [0, 1_600, 2_000] {
            p.round_arrived(a);
        }
        assert_eq!((p.stalls(), p.stall_ns_total()), (1, 100));
    }

    #[test]
    fn a_stream_that_ends_early_stalls_if_playback_caught_up() {
        // Rounds 0 and 1 of 4 arrived; round 2 is due at 2_000.
        let mut p = play(&[0, 1_000]);
        p.end(1_900, 4);
        assert_eq!(p.stalls(), 0);
        p.end(2_600, 4);
        assert_eq!((p.stalls(), p.stall_ns_total()), (1, 600));
        assert_eq!(p.min_slack_ns(), Some(-600));
        assert_eq!(p.first_stall(), Some((2, 2_600)));
        assert_eq!(p.min_slack_round(), Some(2));
        // A complete stream, or one that never started, has nothing to stall.
        let mut p = play(&[0, 1_000]);
        p.end(9_000, 2);
        assert_eq!(p.stalls(), 0);
        let mut p = Player::new(T, 0);
        p.end(9_000, 2);
        assert_eq!(p.stalls(), 0);
    }

    #[test]
    fn cumulative_thresholds_keep_empty_rounds() {
        assert_eq!(cumulative_bytes(&[5, 0, 3]), vec![5, 5, 8]);
        assert_eq!(cumulative_bytes(&[]), Vec::<u64>::new());
    }
}
