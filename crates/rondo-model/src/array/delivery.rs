//! Delivery: when a stream's complete rounds go to its client, and when a
//! stream ends on the client's side.
//!
//! A stream-round read in round i may be sent from round i + 1 (its send
//! round), and a client gets its rounds in playback order: a round recovered
//! late after a read error holds back the rounds behind it. A *release* is
//! the array's word that one playback round may now be handed to the client.
//! The executor reports how many released rounds the client has taken
//! ([`Deliveries::took`]); a client holding more than its buffer
//! (`client_buffer_rounds`) has stalled, and one stalled for
//! `stall_grace_rounds` rounds is stopped, so that a client that stops
//! reading cannot hold its buffers and reservations for ever. A stream ends
//! when its client has taken every round of its span (`finished`).
//!
//! This is the stream lifecycle's last part, decided here so that the
//! simulator (whose clients take every round at once unless a fault plan
//! stalls them) and the server (whose sessions count what the socket took)
//! run the same rule.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::layout::Replica;
use crate::reservation::StreamSpan;
use crate::units::{PlaybackRound, Round, StreamId};

/// How the array treats clients.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryConfig {
    /// Released rounds a client may hold before it counts as stalled (the
    /// server's per-session buffer).
    pub client_buffer_rounds: u64,
    /// Rounds a stalled client keeps its stream before it is stopped.
    pub stall_grace_rounds: u64,
}

impl Default for DeliveryConfig {
    /// The server's defaults: 2 rounds of client buffer, 30 one-second
    /// rounds of grace (assumption: long enough for a player paused by its
    /// user to keep its place for a moment; see docs/assumptions.md).
    fn default() -> DeliveryConfig {
        DeliveryConfig {
            client_buffer_rounds: 2,
            stall_grace_rounds: 30,
        }
    }
}

/// One playback round that may now be handed to the stream's client.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Release {
    pub stream: StreamId,
    pub playback_round: PlaybackRound,
    /// The replica its data came from (how the executor assembles it).
    pub replica: Replica,
}

/// A client's progress through its stream.
#[derive(Clone, Debug)]
struct Client {
    span: StreamSpan,
    /// The next playback round to release.
    next_release: PlaybackRound,
    /// Complete rounds not released yet: playback round → (send round, replica).
    ready: BTreeMap<PlaybackRound, (Round, Replica)>,
    /// Released rounds the client has taken.
    taken: u32,
    /// The first round of the client's current stall.
    stalled_since: Option<Round>,
    /// The round of its first release: its player's clock starts there.
    first_release: Option<Round>,
}

impl Client {
    fn released(&self) -> u32 {
        self.next_release.0 - self.span.first_playback_round.0
    }

    fn total(&self) -> u32 {
        self.span.end_playback_round.0 - self.span.first_playback_round.0
    }

    /// Released rounds a client may hold beyond its buffer at the start of
    /// `round`: what a start burst released ahead of a plain stream started
    /// a round earlier (which has released `round − start + 1` rounds by
    /// then); 0 for a plain stream. For a burst that keeps its lead this is
    /// the lead for the whole stream: a client that takes its rounds only at
    /// its playback rate is not counted stalled.
    fn ahead(&self, round: Round) -> u32 {
        if round < self.span.start_round {
            return 0;
        }
        let plain = round.since(self.span.start_round) + 1;
        u64::from(self.released()).saturating_sub(plain) as u32
    }
}

/// A client stopped for not taking its data.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct Stalled {
    pub stream: StreamId,
    pub held_rounds: u64,
    pub stalled_rounds: u64,
}

/// Every admitted stream's delivery.
#[derive(Clone, Debug, Default)]
pub(super) struct Deliveries {
    config: DeliveryConfig,
    clients: BTreeMap<StreamId, Client>,
    /// The executor's buffers are over budget: stalled clients get no grace.
    over_budget: bool,
    /// Stream-rounds complete and due at the last round's start but held
    /// because an earlier round of their stream was not complete (a late
    /// round): what late rounds make the server keep beyond double
    /// buffering.
    pub held_behind_late: u64,
    /// Stream-rounds released after their client needed them: a player
    /// that starts at its first release and plays a round per round would
    /// have stalled (a late round, a backup window's recovery beyond the
    /// client's lead).
    pub late_releases: u64,
}

impl Deliveries {
    pub fn new(config: DeliveryConfig) -> Deliveries {
        Deliveries {
            config,
            clients: BTreeMap::new(),
            over_budget: false,
            held_behind_late: 0,
            late_releases: 0,
        }
    }

    /// A stream admitted over `span`.
    pub fn admit(&mut self, stream: StreamId, span: StreamSpan) {
        self.clients.insert(
            stream,
            Client {
                span,
                next_release: span.first_playback_round,
                ready: BTreeMap::new(),
                taken: 0,
                stalled_since: None,
                first_release: None,
            },
        );
    }

    /// Forgets a stream (released or stopped). False if unknown.
    pub fn remove(&mut self, stream: StreamId) -> bool {
        self.clients.remove(&stream).is_some()
    }

    pub fn contains(&self, stream: StreamId) -> bool {
        self.clients.contains_key(&stream)
    }

    pub fn stream_ids(&self) -> impl Iterator<Item = StreamId> + '_ {
        self.clients.keys().copied()
    }

    /// Where a known stream is in time.
    pub fn span(&self, stream: StreamId) -> Option<StreamSpan> {
        self.clients.get(&stream).map(|c| c.span)
    }

    /// A stream-round is complete; it may be sent from `send_round`. Gives
    /// `out` what may be released now that round `current` is in progress.
    pub fn ready(
        &mut self,
        stream: StreamId,
        playback_round: PlaybackRound,
        replica: Replica,
        send_round: Round,
        current: Round,
        mut out: impl FnMut(Release),
    ) {
        let Some(client) = self.clients.get_mut(&stream) else {
            return;
        };
        // The common case, a round complete in order and due with nothing
        // held back, is released without passing through the map (whose
        // first entry would allocate a node, freed again at once).
        if client.ready.is_empty() && playback_round == client.next_release && send_round <= current
        {
            self.late_releases += release_next(stream, client, replica, current, &mut out);
            return;
        }
        client.ready.insert(playback_round, (send_round, replica));
        self.late_releases += release_due(stream, client, current, &mut out);
    }

    pub fn set_over_budget(&mut self, over: bool) {
        self.over_budget = over;
    }

    /// The client of `stream` has taken `taken_rounds` released rounds in all.
    pub fn took(&mut self, stream: StreamId, taken_rounds: u32) {
        if let Some(client) = self.clients.get_mut(&stream) {
            client.taken = taken_rounds.min(client.released());
        }
    }

    /// Round `round` begins: releases every round whose send round has come
    /// (in playback order), then finds clients that took everything and
    /// clients stalled past the grace time. Finished streams are forgotten
    /// here; the caller releases their reservations and stops the stalled.
    pub fn begin_round(
        &mut self,
        round: Round,
        releases: &mut Vec<Release>,
    ) -> (Vec<StreamId>, Vec<Stalled>) {
        let mut finished = Vec::new();
        let mut stalled = Vec::new();
        let buffer = self.config.client_buffer_rounds;
        let grace = self.config.stall_grace_rounds;
        let over_budget = self.over_budget;
        self.held_behind_late = 0;
        for (&stream, client) in self.clients.iter_mut() {
            self.late_releases += release_due(stream, client, round, &mut |r| releases.push(r));
            // What is left ready and due now waits behind a late round.
            self.held_behind_late += client
                .ready
                .values()
                .filter(|(send_round, _)| *send_round <= round)
                .count() as u64;
            if client.taken == client.total() {
                finished.push(stream);
                continue;
            }
            let held = u64::from(client.released() - client.taken);
            if held <= buffer + u64::from(client.ahead(round)) {
                client.stalled_since = None;
                continue;
            }
            let since = *client.stalled_since.get_or_insert(round);
            if round.since(since) >= grace || over_budget {
                stalled.push(Stalled {
                    stream,
                    held_rounds: held,
                    stalled_rounds: round.since(since),
                });
            }
        }
        for stream in &finished {
            self.clients.remove(stream);
        }
        (finished, stalled)
    }

    /// Panics if a client's progress is inconsistent.
    pub fn check_invariants(&self) {
        for (stream, c) in &self.clients {
            assert!(
                c.span.first_playback_round <= c.next_release
                    && c.next_release <= c.span.end_playback_round,
                "stream {}: released up to {} outside {}..{}",
                stream.0,
                c.next_release,
                c.span.first_playback_round,
                c.span.end_playback_round
            );
            assert!(
                c.taken <= c.released(),
                "stream {}: the client took more than was released",
                stream.0
            );
            if let Some((&first, _)) = c.ready.first_key_value() {
                assert!(
                    first >= c.next_release,
                    "stream {}: round {first} ready but already released",
                    stream.0
                );
            }
        }
    }
}

/// Releases `client`'s ready rounds, in order, whose send round is at or
/// before `current`; returns how many of them come after the client's
/// player, started at its first release, needed them.
fn release_due(
    stream: StreamId,
    client: &mut Client,
    current: Round,
    out: &mut impl FnMut(Release),
) -> u64 {
    let mut late = 0;
    while let Some(entry) = client.ready.first_entry() {
        let (send_round, replica) = *entry.get();
        if *entry.key() != client.next_release || send_round > current {
            break;
        }
        entry.remove();
        late += release_next(stream, client, replica, current, out);
    }
    late
}

/// Releases `client`'s next playback round, read from `replica`, in round
/// `current`; returns 1 if it comes after the client's player needed it.
fn release_next(
    stream: StreamId,
    client: &mut Client,
    replica: Replica,
    current: Round,
    out: &mut impl FnMut(Release),
) -> u64 {
    let first = *client.first_release.get_or_insert(current);
    let late = u64::from(current > first.plus(u64::from(client.released())));
    out(Release {
        stream,
        playback_round: client.next_release,
        replica,
    });
    client.next_release = client.next_release.next();
    late
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::reservation::Grouping;
    use crate::units::TitleId;

    fn span(rounds: u32) -> StreamSpan {
        StreamSpan {
            title: TitleId(0),
            start_round: Round(10),
            first_playback_round: PlaybackRound(0),
            end_playback_round: PlaybackRound(rounds),
            burst_rounds: 0,
            burst_lead: Default::default(),
            grouping: Grouping::NONE,
            regroup_from: PlaybackRound(0),
            grouping_before: Grouping::NONE,
            pairs: false,
            pairs_from: PlaybackRound(0),
            pairs_end: PlaybackRound(0),
            lead_rounds: 0,
        }
    }

    proptest! {
        /// Whatever the order rounds complete in and whatever their send
        /// rounds, a round is released exactly once, in playback order, at
        /// the first moment it and every round before it are complete and
        /// its send round has come: the direct release of a round complete
        /// in order (no map) and the held path agree.
        #[test]
        fn rounds_are_released_in_order_as_soon_as_due(
            plan in proptest::collection::vec((0u64..6, 0u64..3), 1..24),
        ) {
            let stream = StreamId(7);
            let rounds = plan.len() as u32;
            let mut deliveries = Deliveries::new(DeliveryConfig {
                client_buffer_rounds: u64::MAX / 4,
                stall_grace_rounds: u64::MAX / 4,
            });
            deliveries.admit(stream, span(rounds));
            // Round p completes in round 10 + p + delay, sendable `wait`
            // rounds later.
            let completes: Vec<u64> = plan.iter().enumerate().map(|(p, &(d, _))| 10 + p as u64 + d).collect();
            let sends: Vec<u64> = plan.iter().zip(&completes).map(|(&(_, w), &c)| c + w).collect();
            let mut released: Vec<u32> = Vec::new();
            let last = completes.iter().max().copied().unwrap_or(10) + 4;
            for r in 10..=last {
                let mut out = Vec::new();
                deliveries.begin_round(Round(r), &mut out);
                released.extend(out.iter().map(|x| x.playback_round.0));
                // This round's completions, latest playback round first so
                // that some arrive out of order.
                for p in (0..plan.len()).rev().filter(|&p| completes[p] == r) {
                    deliveries.ready(
                        stream,
                        PlaybackRound(p as u32),
                        Replica::Primary,
                        Round(sends[p]),
                        Round(r),
                        |x| released.push(x.playback_round.0),
                    );
                    // The reference: the longest prefix complete by now and due.
                    let expected = (0..plan.len())
                        .take_while(|&q| {
                            (completes[q] < r || (completes[q] == r && q >= p)) && sends[q] <= r
                        })
                        .count();
                    prop_assert_eq!(released.len(), expected, "after round {}'s completion of {}", r, p);
                }
                let expected = (0..plan.len())
                    .take_while(|&q| completes[q] <= r && sends[q] <= r)
                    .count();
                prop_assert_eq!(released.len(), expected, "at the end of round {}", r);
            }
            prop_assert_eq!(released, (0..rounds).collect::<Vec<u32>>());
            deliveries.check_invariants();
        }
    }
}
