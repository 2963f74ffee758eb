//! Stream schedules: how a title's frames become per-round byte counts.
//!
//! A title is a sequence of frames, each with a decode time and a size (the
//! media crate produces them from real files, the trace generators from
//! models). For a round length T this module computes, once at ingest, the
//! schedule that admission, the simulator and the server all use:
//!
//! - `client_bytes[i]`: bytes the decoder consumes in playback round i, that
//!   is, the frames whose decode time lies in `[i·T, (i+1)·T)`. Seed 000 §2.1:
//!   "the client should receive in each round the amount of data that will be
//!   needed by the decoder during the next round".
//! - `disk_read_bytes[i]`: bytes read from disk for playback round i, in the
//!   stream round before the data is sent. A round's data starts on a block
//!   boundary and is padded to whole blocks (seed 000 §2.3: transfers and
//!   buffers are in multiples of B_l), so this is `client_bytes[i]` rounded up
//!   to the block size.
//! - `buffer_bytes[r]`: server buffer held in stream round r. Data read in
//!   round r is sent in round r+1, so round r holds what it reads plus what it
//!   sends: `disk_read_bytes[r] + disk_read_bytes[r-1]` (double buffering).
//!
//! Stream round r therefore reads playback round r's data, sends playback
//! round r−1's data, and the stream lasts `rounds() + 1` stream rounds.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::units::round_up;

/// One frame of a title in decode order.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    /// When the decoder needs the frame, from the start of playback.
    pub decode_time_ns: u64,
    /// The frame's size in the stored stream.
    pub bytes: u64,
}

/// Why frames could not be turned into a schedule.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ScheduleError {
    #[error("a title needs at least one frame")]
    NoFrames,
    #[error("round length must be positive")]
    ZeroRound,
    #[error("block size must be positive")]
    ZeroBlock,
    #[error(
        "frame {index} decodes at {decode_time_ns} ns, before the previous frame \
         ({previous_ns} ns): frames must be in decode order"
    )]
    NotInDecodeOrder {
        index: usize,
        decode_time_ns: u64,
        previous_ns: u64,
    },
}

/// Per-round statistics of a byte sequence (seed 000 Table 3's columns).
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoundStats {
    pub rounds: u64,
    pub mean_bytes_per_round: f64,
    pub max_bytes_per_round: u64,
    /// Population standard deviation over the mean.
    pub cov_per_round: f64,
    pub total_bytes: u64,
}

impl RoundStats {
    /// Statistics of `bytes_per_round`; all zero for an empty slice.
    pub fn of(bytes_per_round: &[u64]) -> RoundStats {
        let rounds = bytes_per_round.len() as u64;
        let total_bytes: u64 = bytes_per_round.iter().sum();
        if rounds == 0 {
            return RoundStats {
                rounds,
                mean_bytes_per_round: 0.0,
                max_bytes_per_round: 0,
                cov_per_round: 0.0,
                total_bytes,
            };
        }
        let mean = total_bytes as f64 / rounds as f64;
        let variance = bytes_per_round
            .iter()
            .map(|&b| (b as f64 - mean).powi(2))
            .sum::<f64>()
            / rounds as f64;
        RoundStats {
            rounds,
            mean_bytes_per_round: mean,
            max_bytes_per_round: bytes_per_round.iter().copied().max().unwrap_or(0),
            cov_per_round: if mean > 0.0 {
                variance.sqrt() / mean
            } else {
                0.0
            },
            total_bytes,
        }
    }
}

/// A title's per-round schedule for one round length and block size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    pub round_duration_ns: u64,
    pub block_bytes: u64,
    /// Bytes decoded in each playback round; sums to the title's size.
    pub client_bytes: Vec<u64>,
    /// `client_bytes` padded to whole blocks: what is stored and read per round.
    pub disk_read_bytes: Vec<u64>,
    /// Server buffer held in each stream round (`rounds() + 1` entries).
    pub buffer_bytes: Vec<u64>,
}

/// Bytes decoded in each round of length `round_duration_ns`: the sum of the
/// sizes of the frames whose decode time falls in the round. The result has
/// one entry per round up to the round of the last frame, and sums to the
/// frames' total size.
pub fn client_bytes_per_round(
    frames: &[Frame],
    round_duration_ns: u64,
) -> Result<Vec<u64>, ScheduleError> {
    if round_duration_ns == 0 {
        return Err(ScheduleError::ZeroRound);
    }
    let last = frames.last().ok_or(ScheduleError::NoFrames)?;
    let mut client_bytes = vec![0u64; (last.decode_time_ns / round_duration_ns + 1) as usize];
    let mut previous_ns = 0;
    for (index, frame) in frames.iter().enumerate() {
        if frame.decode_time_ns < previous_ns {
            return Err(ScheduleError::NotInDecodeOrder {
                index,
                decode_time_ns: frame.decode_time_ns,
                previous_ns,
            });
        }
        previous_ns = frame.decode_time_ns;
        client_bytes[(frame.decode_time_ns / round_duration_ns) as usize] += frame.bytes;
    }
    Ok(client_bytes)
}

impl Schedule {
    /// The schedule of a title given its frames in decode order.
    pub fn from_frames(
        frames: &[Frame],
        round_duration_ns: u64,
        block_bytes: u64,
    ) -> Result<Schedule, ScheduleError> {
        let client_bytes = client_bytes_per_round(frames, round_duration_ns)?;
        Schedule::from_client_bytes(client_bytes, round_duration_ns, block_bytes)
    }

    /// The schedule of a title given bytes per playback round directly (a
    /// round-level trace, or a synthetic title).
    pub fn from_client_bytes(
        client_bytes: Vec<u64>,
        round_duration_ns: u64,
        block_bytes: u64,
    ) -> Result<Schedule, ScheduleError> {
        if round_duration_ns == 0 {
            return Err(ScheduleError::ZeroRound);
        }
        if block_bytes == 0 {
            return Err(ScheduleError::ZeroBlock);
        }
        if client_bytes.is_empty() {
            return Err(ScheduleError::NoFrames);
        }
        let disk_read_bytes: Vec<u64> = client_bytes
            .iter()
            .map(|&b| round_up(b, block_bytes))
            .collect();
        let buffer_bytes = (0..=disk_read_bytes.len())
            .map(|r| {
                let reading = disk_read_bytes.get(r).copied().unwrap_or(0);
                let sending = if r > 0 { disk_read_bytes[r - 1] } else { 0 };
                reading + sending
            })
            .collect();
        Ok(Schedule {
            round_duration_ns,
            block_bytes,
            client_bytes,
            disk_read_bytes,
            buffer_bytes,
        })
    }

    /// Number of playback rounds.
    pub fn rounds(&self) -> usize {
        self.client_bytes.len()
    }

    /// The title's size: the sum of the client bytes.
    pub fn total_bytes(&self) -> u64 {
        self.client_bytes.iter().sum()
    }

    /// Bytes stored on disk, padding included.
    pub fn stored_bytes(&self) -> u64 {
        self.disk_read_bytes.iter().sum()
    }

    /// Statistics of the client bytes per round.
    pub fn client_stats(&self) -> RoundStats {
        RoundStats::of(&self.client_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::{BLOCK_BYTES_DEFAULT, NS_PER_S};
    use proptest::prelude::*;

    fn frames_at_30fps(sizes: &[u64]) -> Vec<Frame> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &bytes)| Frame {
                decode_time_ns: i as u64 * NS_PER_S / 30,
                bytes,
            })
            .collect()
    }

    #[test]
    fn thirty_frames_per_one_second_round() {
        let frames = frames_at_30fps(&[1000; 75]);
        let s = Schedule::from_frames(&frames, NS_PER_S, BLOCK_BYTES_DEFAULT).unwrap();
        assert_eq!(s.client_bytes, vec![30_000, 30_000, 15_000]);
        assert_eq!(s.disk_read_bytes, vec![32_768, 32_768, 16_384]);
        assert_eq!(s.buffer_bytes, vec![32_768, 65_536, 49_152, 16_384]);
        assert_eq!(s.total_bytes(), 75_000);
    }

    #[test]
    fn half_second_rounds_split_frames() {
        let frames = frames_at_30fps(&[10; 30]);
        let s = Schedule::from_frames(&frames, NS_PER_S / 2, 16).unwrap();
        assert_eq!(s.client_bytes, vec![150, 150]);
        assert_eq!(s.disk_read_bytes, vec![160, 160]);
    }

    #[test]
    fn out_of_order_frames_are_refused() {
        let frames = vec![
            Frame {
                decode_time_ns: 10,
                bytes: 1,
            },
            Frame {
                decode_time_ns: 5,
                bytes: 1,
            },
        ];
        assert_eq!(
            Schedule::from_frames(&frames, NS_PER_S, 16),
            Err(ScheduleError::NotInDecodeOrder {
                index: 1,
                decode_time_ns: 5,
                previous_ns: 10
            })
        );
        assert_eq!(
            Schedule::from_frames(&[], NS_PER_S, 16),
            Err(ScheduleError::NoFrames)
        );
    }

    #[test]
    fn stats_of_known_sequence() {
        let st = RoundStats::of(&[2, 4, 4, 4, 5, 5, 7, 9]);
        assert_eq!(st.mean_bytes_per_round, 5.0);
        assert!((st.cov_per_round - 0.4).abs() < 1e-12);
        assert_eq!(st.max_bytes_per_round, 9);
    }

    proptest! {
        #[test]
        fn client_bytes_sum_to_title_size(
            sizes in proptest::collection::vec(0u64..2_000_000, 1..400),
            gaps in proptest::collection::vec(0u64..200_000_000, 400),
            round_ms in 100u64..4000,
            block in prop::sample::select(vec![512u64, 4096, 16384, 65536]),
        ) {
            let mut t = 0;
            let frames: Vec<Frame> = sizes.iter().zip(&gaps).map(|(&bytes, &gap)| {
                t += gap;
                Frame { decode_time_ns: t, bytes }
            }).collect();
            let s = Schedule::from_frames(&frames, round_ms * 1_000_000, block).unwrap();
            prop_assert_eq!(s.total_bytes(), sizes.iter().sum::<u64>());
            prop_assert_eq!(s.buffer_bytes.len(), s.rounds() + 1);
            for (c, d) in s.client_bytes.iter().zip(&s.disk_read_bytes) {
                prop_assert!(d >= c && d - c < block && d % block == 0);
            }
            prop_assert_eq!(s.buffer_bytes.iter().sum::<u64>(), 2 * s.stored_bytes());
        }
    }
}
