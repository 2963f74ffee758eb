//! The array's title registry: what the array knows of each stored title.
//!
//! An [`ArrayTitle`] is a title's reservation charges, its placed layout
//! (device extents of every round and replica) with each extent's
//! checksum, and its [`RoundIndex`]: where round boundaries fall in the
//! stored stream, the pure byte ↔ round mapping that HTTP Range requests,
//! time seeks and the simulator's range requests all go through.

use std::ops::Range;
use std::sync::Arc;

use serde::Serialize;

use crate::layout::{Replica, TitleLayout};
use crate::reservation::TitleCharges;
use crate::units::TitleId;

/// Where a stored byte is in playback: round `round`, `offset_in_round_bytes`
/// into that round's client bytes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RoundPosition {
    pub round: usize,
    pub offset_in_round_bytes: u64,
}

/// Where round boundaries fall in a stored stream: the cumulative client
/// bytes. Pure; the byte and time mappings of [`LoadedTitle`] are made of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoundIndex {
    round_duration_ns: u64,
    /// `rounds + 1` entries: round i holds stored bytes
    /// `[round_start_bytes[i], round_start_bytes[i + 1])`.
    round_start_bytes: Vec<u64>,
}

impl RoundIndex {
    /// The index of a title whose playback round i holds `client_bytes[i]`
    /// bytes, rounds being `round_duration_ns` long.
    pub fn new(client_bytes: &[u64], round_duration_ns: u64) -> RoundIndex {
        assert!(round_duration_ns > 0, "rounds have a positive length");
        let mut round_start_bytes = Vec::with_capacity(client_bytes.len() + 1);
        let mut at = 0u64;
        round_start_bytes.push(at);
        for &bytes in client_bytes {
            at += bytes;
            round_start_bytes.push(at);
        }
        RoundIndex {
            round_duration_ns,
            round_start_bytes,
        }
    }

    pub fn round_duration_ns(&self) -> u64 {
        self.round_duration_ns
    }

    /// Number of playback rounds.
    pub fn rounds(&self) -> usize {
        self.round_start_bytes.len() - 1
    }

    /// Size of the stored stream.
    pub fn size_bytes(&self) -> u64 {
        *self.round_start_bytes.last().expect("at least one entry")
    }

    /// The stored bytes round `round` holds (empty for an empty round).
    pub fn round_byte_range(&self, round: usize) -> Range<u64> {
        self.round_start_bytes[round]..self.round_start_bytes[round + 1]
    }

    /// The stored bytes rounds `rounds` hold, the range cut to the title's
    /// rounds (empty past its end).
    pub fn rounds_byte_range(&self, rounds: Range<usize>) -> Range<u64> {
        let end = rounds.end.min(self.rounds());
        let start = rounds.start.min(end);
        self.round_start_bytes[start]..self.round_start_bytes[end]
    }

    /// The round holding stored byte `stored_offset`, and where in it;
    /// `None` at or past the end. Empty rounds hold no byte, so they are
    /// never the answer.
    pub fn position_of_byte(&self, stored_offset: u64) -> Option<RoundPosition> {
        if stored_offset >= self.size_bytes() {
            return None;
        }
        // The last round starting at or before the offset: among rounds
        // sharing a start (empty ones first), the non-empty one.
        let round = self
            .round_start_bytes
            .partition_point(|&start| start <= stored_offset)
            - 1;
        Some(RoundPosition {
            round,
            offset_in_round_bytes: stored_offset - self.round_start_bytes[round],
        })
    }

    /// The stored offset of `position`; `None` when the round does not
    /// exist or holds fewer bytes.
    pub fn stored_offset(&self, position: RoundPosition) -> Option<u64> {
        if position.round >= self.rounds() {
            return None;
        }
        let range = self.round_byte_range(position.round);
        let offset = range.start.checked_add(position.offset_in_round_bytes)?;
        (offset < range.end).then_some(offset)
    }

    /// The round whose playback interval `[i·T, (i+1)·T)` holds `t_ns`
    /// (the last round for times past the end).
    pub fn round_for_time(&self, t_ns: u64) -> usize {
        let round = usize::try_from(t_ns / self.round_duration_ns).unwrap_or(usize::MAX);
        round.min(self.rounds() - 1)
    }

    /// When round `round` starts, from the start of playback.
    pub fn round_start_ns(&self, round: usize) -> u64 {
        round as u64 * self.round_duration_ns
    }
}

/// The CRC32C of every extent of a title, per round and replica in the
/// layout's extent order (a backup's pieces in plan order, each piece's
/// extents in order); what a read is checked against.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtentChecksums {
    /// `primary[round][extent]`.
    pub primary: Vec<Vec<u32>>,
    /// `backup[round][extent]`, every piece's extents back to back.
    pub backup: Vec<Vec<u32>>,
}

/// One title as the array holds it.
#[derive(Clone, Debug)]
pub struct ArrayTitle {
    pub id: TitleId,
    /// What admission reserves for a stream of the title.
    pub charges: Arc<TitleCharges>,
    /// Device extents of every round and replica; `None` in admission-only
    /// simulations, which read nothing.
    pub layout: Option<Arc<TitleLayout>>,
    /// The extents' checksums; `None` when the title's bytes were never
    /// written (simulated titles).
    pub checksums: Option<Arc<ExtentChecksums>>,
    pub index: RoundIndex,
    /// Its charges for read groups of other lengths (seed 004's dynamic
    /// cycle regroups streams among them; empty otherwise).
    pub group_charges: Vec<Arc<TitleCharges>>,
}

impl ArrayTitle {
    /// A title whose playback round i sends `client_bytes[i]` bytes.
    pub fn new(
        id: TitleId,
        charges: TitleCharges,
        layout: Option<TitleLayout>,
        checksums: Option<ExtentChecksums>,
        client_bytes: &[u64],
        round_duration_ns: u64,
    ) -> ArrayTitle {
        assert_eq!(
            charges.rounds(),
            client_bytes.len(),
            "charges and client bytes of one title"
        );
        ArrayTitle {
            id,
            charges: Arc::new(charges),
            layout: layout.map(Arc::new),
            checksums: checksums.map(Arc::new),
            index: RoundIndex::new(client_bytes, round_duration_ns),
            group_charges: Vec::new(),
        }
    }

    /// This title with charges for read groups of other lengths
    /// (`Bound::title_charges_grouped` of the same plan and layout).
    pub fn with_group_charges(self, group_charges: Vec<TitleCharges>) -> ArrayTitle {
        ArrayTitle {
            group_charges: group_charges.into_iter().map(Arc::new).collect(),
            ..self
        }
    }

    pub fn rounds(&self) -> usize {
        self.index.rounds()
    }

    /// The checksums of one request's extents (`entry` of the round's
    /// backup pieces, or the primary); `None` when unknown.
    pub fn request_checksums(
        &self,
        round: usize,
        replica: Replica,
        entry: usize,
    ) -> Option<&[u32]> {
        let sums = self.checksums.as_deref()?;
        let layout = self.layout.as_deref()?;
        match replica {
            Replica::Primary => sums.primary.get(round).map(Vec::as_slice),
            Replica::Backup => {
                let pieces = &layout.round(round).backups;
                let before: usize = pieces[..entry].iter().map(|b| b.extents.len()).sum();
                let len = pieces[entry].extents.len();
                sums.backup
                    .get(round)
                    .and_then(|all| all.get(before..before + len))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::NS_PER_S;

    fn index(client_bytes: &[u64]) -> RoundIndex {
        RoundIndex::new(client_bytes, NS_PER_S)
    }

    #[test]
    fn bytes_map_to_rounds_and_back() {
        let ix = index(&[100, 50, 70]);
        assert_eq!(ix.rounds(), 3);
        assert_eq!(ix.size_bytes(), 220);
        assert_eq!(ix.round_byte_range(1), 100..150);
        assert_eq!(ix.rounds_byte_range(1..3), 100..220);
        assert_eq!(ix.rounds_byte_range(2..9), 150..220, "cut to the title");
        assert_eq!(ix.rounds_byte_range(5..9), 220..220);
        let at = |round, offset_in_round_bytes| {
            Some(RoundPosition {
                round,
                offset_in_round_bytes,
            })
        };
        assert_eq!(ix.position_of_byte(0), at(0, 0));
        assert_eq!(ix.position_of_byte(99), at(0, 99));
        assert_eq!(ix.position_of_byte(100), at(1, 0));
        assert_eq!(ix.position_of_byte(149), at(1, 49));
        assert_eq!(ix.position_of_byte(150), at(2, 0));
        assert_eq!(ix.position_of_byte(219), at(2, 69));
        assert_eq!(ix.position_of_byte(220), None);
        assert_eq!(ix.position_of_byte(u64::MAX), None);
        for offset in 0..220 {
            let p = ix.position_of_byte(offset).unwrap();
            assert_eq!(ix.stored_offset(p), Some(offset));
        }
        // Positions outside a round or past the last round have no offset.
        assert_eq!(ix.stored_offset(at(1, 50).unwrap()), None);
        assert_eq!(ix.stored_offset(at(3, 0).unwrap()), None);
        assert_eq!(ix.stored_offset(at(0, u64::MAX).unwrap()), None);
    }

    #[test]
    fn empty_rounds_hold_no_byte() {
        // Rounds 1, 2 and 4 are empty (a gap in the media, say).
        let ix = index(&[10, 0, 0, 5, 0, 7]);
        assert_eq!(ix.round_byte_range(1), 10..10);
        let rounds: Vec<usize> = (0..22)
            .map(|b| ix.position_of_byte(b).unwrap().round)
            .collect();
        let mut expected = vec![0; 10];
        expected.extend([3; 5]);
        expected.extend([5; 7]);
        assert_eq!(rounds, expected);
        assert_eq!(
            ix.stored_offset(RoundPosition {
                round: 1,
                offset_in_round_bytes: 0
            }),
            None
        );
        // A leading empty round: byte 0 is in round 1.
        let ix = index(&[0, 4]);
        assert_eq!(ix.position_of_byte(0).unwrap().round, 1);
    }

    #[test]
    fn times_map_to_the_round_that_plays_them() {
        let ix = RoundIndex::new(&[1, 1, 1], NS_PER_S / 2);
        assert_eq!(ix.round_for_time(0), 0);
        assert_eq!(ix.round_for_time(NS_PER_S / 2 - 1), 0);
        assert_eq!(ix.round_for_time(NS_PER_S / 2), 1);
        assert_eq!(ix.round_for_time(NS_PER_S + 1), 2);
        // Past the end: the last round.
        assert_eq!(ix.round_for_time(100 * NS_PER_S), 2);
        assert_eq!(ix.round_for_time(u64::MAX), 2);
        assert_eq!(ix.round_start_ns(2), NS_PER_S);
    }
}
