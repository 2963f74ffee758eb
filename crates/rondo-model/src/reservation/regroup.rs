//! Regrouping an admitted stream: from a round not yet planned, it reads
//! its rounds in groups of another length (seed 004's stream combination
//! and split, done in the array's rounds; docs/cycle.md, "The server's
//! dynamic cycle").
//!
//! A stream read in groups of g rounds reads g rounds in one request every
//! g rounds and holds them until they are sent. Regrouping it to 2g from
//! playback round p saves a positioning every 2g rounds and holds up to g
//! rounds more; back to g does the reverse. The new groups start where the
//! old ones end (p starts a request of the current shape), so the first
//! request under the new length reads from p to its group's end, which the
//! title's charges for that length price as a stream started at p would
//! be (the "transitory" transfer of seed 004 §2.1 (v) is that request). A
//! regroup is kept only if every round of the stream from the first one not
//! yet planned still fits its disk time, the server buffer and the
//! network, with everything else reserved; otherwise it is undone and
//! nothing changed.

use super::{Reservations, StreamRecord};
use crate::units::{Round, StreamId};

/// Why a stream was not regrouped.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RegroupRefusal {
    UnknownStream,
    /// Its title has no charges for that group length.
    NoCharges,
    /// A start burst or drive-cache pairs: such streams keep their shape.
    NotPlain,
    /// Its previous regroup's rounds are not all sent yet (only one earlier
    /// grouping is kept per stream).
    Unsettled,
    /// It has no request left to regroup.
    NothingLeft,
    /// Some round would not fit (disk time, buffer or network).
    DoesNotFit,
}

impl Reservations {
    /// Regroups `stream` into groups of `group_rounds` from its first
    /// request in `from` or later (`from` not yet planned), if every round
    /// still fits; returns the playback round the new groups start at.
    pub fn regroup(
        &mut self,
        stream: StreamId,
        group_rounds: u32,
        from: Round,
    ) -> Result<u32, RegroupRefusal> {
        self.regroup_together(&[stream], group_rounds, from, true)
            .map(|starts| starts[0])
    }

    /// Regroups all of `streams` as [`Reservations::regroup`] does, or none
    /// of them. With `checked` false the regroups are kept even where a
    /// round no longer fits: only to show what an unchecked operation does
    /// (misses), never in a configuration that serves.
    pub fn regroup_together(
        &mut self,
        streams: &[StreamId],
        group_rounds: u32,
        from: Round,
        checked: bool,
    ) -> Result<Vec<u32>, RegroupRefusal> {
        let mut old: Vec<(StreamId, StreamRecord)> = Vec::with_capacity(streams.len());
        let mut starts = Vec::with_capacity(streams.len());
        for &stream in streams {
            match self.regrouped(stream, group_rounds, from) {
                Ok((new, p)) => {
                    old.push((stream, self.replace_record(stream, new)));
                    starts.push(p as u32);
                }
                Err(refusal) => {
                    self.restore_records(old);
                    return Err(refusal);
                }
            }
        }
        let fits = streams.iter().all(|id| {
            let record = &self.streams[id];
            self.fits_from(record, from) && self.memory_fits_from(record, from)
        });
        if checked && !fits {
            self.restore_records(old);
            return Err(RegroupRefusal::DoesNotFit);
        }
        Ok(starts)
    }

    /// Whether `stream` could be regrouped from `from` (its reads plain,
    /// its last regroup settled, a request left), fit aside.
    pub fn regroupable(&self, stream: StreamId, from: Round) -> bool {
        self.streams
            .get(&stream)
            .is_some_and(|record| self.regroup_point(record, from).is_ok())
    }

    /// A stream's record regrouped, and where the new groups start.
    fn regrouped(
        &self,
        stream: StreamId,
        group_rounds: u32,
        from: Round,
    ) -> Result<(StreamRecord, usize), RegroupRefusal> {
        let record = self
            .streams
            .get(&stream)
            .ok_or(RegroupRefusal::UnknownStream)?;
        let grouping = self
            .grouped(record.title, group_rounds)
            .ok_or(RegroupRefusal::NoCharges)?
            .grouping();
        let p = self.regroup_point(record, from)?;
        let new = StreamRecord {
            shape: record.shape.regrouped(p, grouping),
            ..record.clone()
        };
        Ok((new, p))
    }

    /// The playback round a regroup of `record` from `from` would start at:
    /// its first request there or later.
    fn regroup_point(&self, record: &StreamRecord, from: Round) -> Result<usize, RegroupRefusal> {
        let shape = record.shape;
        if shape.is_burst() || shape.pairs {
            return Err(RegroupRefusal::NotPlain);
        }
        let from = from.max(self.current_round).max(record.start_round);
        let q = record.offset(from);
        // Rounds before the last regroup are sent by stream round
        // `regroup_from − first` (a plain stream sends round i at i − first + 1).
        if shape.regroup_from > shape.first + q {
            return Err(RegroupRefusal::Unsettled);
        }
        let p = shape.first_read_from(q);
        if p >= shape.end {
            return Err(RegroupRefusal::NothingLeft);
        }
        Ok(p)
    }

    /// Whether the server buffer and the network hold every round a
    /// stream plays in from `from` on, with everything now reserved.
    fn memory_fits_from(&self, record: &StreamRecord, from: Round) -> bool {
        let cfg = &self.config;
        let horizon = cfg.horizon_rounds;
        let first = from.max(record.start_round);
        Round::range(first, record.end_round(&self.titles[&record.title])).all(|round| {
            let ring = (round.0 % horizon) as usize;
            self.buffer_bytes[ring] <= cfg.buffer_capacity_bytes
                && cfg
                    .network_capacity_bytes_per_round
                    .is_none_or(|cap| self.network_bytes[ring] <= cap)
        })
    }

    /// The read-group length (rounds per request) of `stream` from the
    /// next round on.
    pub fn stream_group_rounds(&self, stream: StreamId) -> Option<u32> {
        self.streams
            .get(&stream)
            .map(|r| r.shape.grouping.rounds_per_read())
    }
}
