//! Staging a tier title onto the array: when it is ready, and which staged
//! titles leave the array when it needs room. The server's staging and the
//! tier simulation (`rondo_sim::tier`) share both rules.
//!
//! **Ready** ([`ready_ns`]): the tier's fetch ends; the writer's first
//! request reaches the array at the next round boundary; the array grants
//! the title's rounds over `WritePrediction::rounds` rounds from there
//! (`Array::predict_write`), and the last one is written once that round's
//! batches are done: at the latest the model's busiest disk time in it.
//!
//! **Eviction** ([`eviction_order`]): a staged title is a candidate unless
//! it is pinned or a stream holds reservations for it; candidates go least
//! requested first, then least recently requested, then by id (a total
//! order, so the choice is deterministic).

use crate::array::WritePrediction;

/// Model time at which a staging whose fetch ends at `fetched_ns` is on the
/// array, for rounds of `round_duration_ns` starting at time 0.
pub fn ready_ns(fetched_ns: u64, round_duration_ns: u64, write: WritePrediction) -> u64 {
    let first_round = fetched_ns.div_ceil(round_duration_ns.max(1));
    let last_round = first_round + write.rounds.max(1) - 1;
    last_round * round_duration_ns + write.last_round_busy_ns
}

/// What the rule needs to know of one staged title.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct StagedTitle {
    pub id: u64,
    /// Requests for it so far (its popularity).
    pub requests: u64,
    /// When it was last asked for (any clock; only the order matters).
    pub last_request_ns: u64,
    pub pinned: bool,
    /// A stream holds reservations for it.
    pub streaming: bool,
}

/// The ids of the titles that may be evicted, in the order to evict them.
pub fn eviction_order(titles: &[StagedTitle]) -> Vec<u64> {
    let mut candidates: Vec<&StagedTitle> = titles
        .iter()
        .filter(|t| !t.pinned && !t.streaming)
        .collect();
    candidates.sort_by_key(|t| (t.requests, t.last_request_ns, t.id));
    candidates.into_iter().map(|t| t.id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn title(id: u64, requests: u64, last: u64) -> StagedTitle {
        StagedTitle {
            id,
            requests,
            last_request_ns: last,
            pinned: false,
            streaming: false,
        }
    }

    #[test]
    fn ready_is_the_last_granted_rounds_busy_time_after_the_boundary_past_the_fetch() {
        let write = WritePrediction {
            rounds: 3,
            last_round_busy_ns: 400,
        };
        // Fetched at 2.5 rounds: grants in rounds 3, 4, 5; done 400 ns in.
        assert_eq!(ready_ns(2_500, 1_000, write), 5_400);
        // Fetched on a boundary: that round is the first.
        assert_eq!(ready_ns(3_000, 1_000, write), 5_400);
    }

    #[test]
    fn least_requested_then_least_recent_never_pinned_or_streaming() {
        let mut titles = vec![
            title(1, 5, 10),
            title(2, 1, 50),
            title(3, 1, 20),
            title(4, 0, 99),
        ];
        titles.push(StagedTitle {
            pinned: true,
            ..title(5, 0, 0)
        });
        titles.push(StagedTitle {
            streaming: true,
            ..title(6, 0, 0)
        });
        assert_eq!(eviction_order(&titles), vec![4, 3, 2, 1]);
        assert!(eviction_order(&titles[4..]).is_empty());
    }
}
