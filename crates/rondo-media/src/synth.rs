//! Synthetic trace kinds and the constant-bit-rate generators.
//!
//! This module owns the list of known kinds (the six VBR content types of
//! seed 000 Table 3, seed 003's 2 Mbit/s CBR stream and seed 004's
//! multi-bitrate stream), the entry points [`generate`] / [`generate_trace`]
//! and the CBR model. The VBR model lives in `vbr`. Every generator is
//! deterministic for its seed: the same seed gives the same frames.

use std::fmt;
use std::str::FromStr;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rondo_model::schedule::Frame;
use rondo_model::units::NS_PER_S;
use thiserror::Error;

use crate::trace::{FrameType, Trace};
use crate::vbr::{ContentType, MPEG2_FPS, VbrParams, decode_time_ns};

/// Why a generator could not produce a trace.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum SynthError {
    #[error("invalid parameter {param}: {reason}")]
    InvalidParams { param: &'static str, reason: String },
    #[error("calibration cannot reach the target: {what}")]
    Unreachable { what: String },
}

/// A name that is not a known trace kind.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("unknown trace type '{name}'; known types: {}", known_kind_names().join(", "))]
pub struct UnknownKind {
    pub name: String,
}

/// A synthetic trace kind.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TraceKind {
    /// A 30-minute VBR MPEG-2 title of seed 000 Table 3.
    Vbr(ContentType),
    /// Seed 003's stream: 2 Mbit/s constant, 30 fps, 30 minutes.
    Cbr2Mbit,
    /// Seed 004's stream: one bitrate uniform in 128–1024 kbit/s drawn from
    /// the seed, constant within the title; 30 fps, 30 minutes.
    MultiBitrate,
}

/// All known kinds: Table 3's order, then the CBR kinds.
pub const KNOWN_KINDS: [TraceKind; 8] = [
    TraceKind::Vbr(ContentType::ScienceFiction),
    TraceKind::Vbr(ContentType::MusicClip),
    TraceKind::Vbr(ContentType::Action),
    TraceKind::Vbr(ContentType::TalkShow),
    TraceKind::Vbr(ContentType::Adventure),
    TraceKind::Vbr(ContentType::Documentary),
    TraceKind::Cbr2Mbit,
    TraceKind::MultiBitrate,
];

/// The known kinds.
pub fn known_kinds() -> &'static [TraceKind] {
    &KNOWN_KINDS
}

/// The names of the known kinds, as the CLI accepts them.
pub fn known_kind_names() -> Vec<&'static str> {
    KNOWN_KINDS.iter().map(|k| k.name()).collect()
}

impl TraceKind {
    pub fn name(self) -> &'static str {
        match self {
            TraceKind::Vbr(content) => content.name(),
            TraceKind::Cbr2Mbit => "cbr-2mbit",
            TraceKind::MultiBitrate => "multi-bitrate",
        }
    }

    /// The kind named `name`, if it is known.
    pub fn from_name(name: &str) -> Option<TraceKind> {
        KNOWN_KINDS.into_iter().find(|k| k.name() == name)
    }
}

impl fmt::Display for TraceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TraceKind {
    type Err = UnknownKind;

    fn from_str(name: &str) -> Result<TraceKind, UnknownKind> {
        TraceKind::from_name(name).ok_or_else(|| UnknownKind {
            name: name.to_string(),
        })
    }
}

/// The frames of `kind` for `seed`.
pub fn generate(kind: TraceKind, seed: u64) -> Vec<Frame> {
    generate_trace(kind, seed).into_frames()
}

/// The trace (frames, picture types, provenance) of `kind` for `seed`.
pub fn generate_trace(kind: TraceKind, seed: u64) -> Trace {
    let result = match kind {
        TraceKind::Vbr(content) => VbrParams::for_content(content).generate(seed),
        TraceKind::Cbr2Mbit => CbrParams::seed_003().generate(),
        TraceKind::MultiBitrate => CbrParams::seed_004(seed).generate(),
    };
    // The built-in parameters are valid and their targets reachable; the
    // tests generate every kind over several seeds.
    result.unwrap_or_else(|e| panic!("built-in kind {kind} failed to generate: {e}"))
}

/// Default title length of the CBR kinds: seed 000's 30 minutes (§6.3), so
/// that every kind has the same length. Seed 003 simulates 90–120-minute
/// videos and seed 004 does not state one; use [`CbrParams::duration_ns`]
/// for other lengths.
pub const CBR_DURATION_NS_DEFAULT: u64 = 30 * 60 * NS_PER_S;
/// Seed 003: "a constant display rate of 2 megabits per second".
pub const SEED_003_BITS_PER_S: u64 = 2_000_000;
/// Seed 004 §3: "stream bitrates between 128 and 1024 kbps" (k = 1000).
pub const SEED_004_MIN_BITS_PER_S: u64 = 128_000;
pub const SEED_004_MAX_BITS_PER_S: u64 = 1_024_000;

/// A constant-bit-rate title: every frame carries the bytes the rate gives
/// it, so every round of any length carries its duration times the rate
/// (within one byte per frame boundary).
///
/// Frames are untyped (`-`): seeds 003 and 004 specify a rate, not a picture
/// structure, and the server sees the rate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CbrParams {
    /// Kind written to the trace header.
    pub kind: String,
    /// Seed recorded in the header, when the trace depends on one.
    pub seed: Option<u64>,
    pub bits_per_s: u64,
    /// Frames per second (assumption: 30, as seed 000's titles; seeds 003 and
    /// 004 do not state a frame rate).
    pub fps: u32,
    pub duration_ns: u64,
}

impl CbrParams {
    /// A CBR title of `bits_per_s` lasting `duration_ns`, at 30 fps.
    pub fn new(bits_per_s: u64, duration_ns: u64) -> CbrParams {
        CbrParams {
            kind: "cbr".to_string(),
            seed: None,
            bits_per_s,
            fps: MPEG2_FPS,
            duration_ns,
        }
    }

    /// Seed 003's 2 Mbit/s stream (250,000 bytes per one-second round).
    pub fn seed_003() -> CbrParams {
        CbrParams {
            kind: TraceKind::Cbr2Mbit.name().to_string(),
            ..CbrParams::new(SEED_003_BITS_PER_S, CBR_DURATION_NS_DEFAULT)
        }
    }

    /// Seed 004's stream for `seed`: its bitrate is [`multi_bitrate_bits_per_s`].
    pub fn seed_004(seed: u64) -> CbrParams {
        CbrParams {
            kind: TraceKind::MultiBitrate.name().to_string(),
            seed: Some(seed),
            ..CbrParams::new(multi_bitrate_bits_per_s(seed), CBR_DURATION_NS_DEFAULT)
        }
    }

    /// Number of frames: the whole frames that start within the duration.
    pub fn frame_count(&self) -> u64 {
        (self.duration_ns as u128 * self.fps as u128).div_ceil(NS_PER_S as u128) as u64
    }

    pub fn generate(&self) -> Result<Trace, SynthError> {
        if !crate::trace::is_valid_kind(&self.kind) {
            return Err(invalid(
                "kind",
                "must be a token of letters, digits, '-', '_', '.'",
            ));
        }
        if self.fps == 0 {
            return Err(invalid("fps", "must be positive"));
        }
        if self.bits_per_s == 0 {
            return Err(invalid("bits_per_s", "must be positive"));
        }
        let n = self.frame_count();
        if n == 0 {
            return Err(invalid("duration_ns", "must be positive"));
        }
        // Bytes decoded by the end of frame i: floor((i+1)·rate/(8·fps)); the
        // differences give frame sizes whose sums over any whole second are
        // exactly rate/8 when the rate is a multiple of 8 bits.
        let bits_per_frame_denominator = 8 * self.fps as u128;
        let through =
            |i: u64| (i as u128 * self.bits_per_s as u128 / bits_per_frame_denominator) as u64;
        let frames = (0..n)
            .map(|i| Frame {
                decode_time_ns: decode_time_ns(i, self.fps),
                bytes: through(i + 1) - through(i),
            })
            .collect();
        Ok(Trace::new(
            self.kind.clone(),
            self.seed,
            Some(self.fps as f64),
            frames,
            vec![FrameType::Unspecified; n as usize],
        ))
    }
}

fn invalid(param: &'static str, reason: &str) -> SynthError {
    SynthError::InvalidParams {
        param,
        reason: reason.to_string(),
    }
}

/// Seed 004's bitrate for `seed`: uniform over the whole bit/s values in
/// 128–1024 kbit/s, from ChaCha8 seeded with `seed`.
pub fn multi_bitrate_bits_per_s(seed: u64) -> u64 {
    ChaCha8Rng::seed_from_u64(seed).random_range(SEED_004_MIN_BITS_PER_S..=SEED_004_MAX_BITS_PER_S)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rondo_model::schedule::client_bytes_per_round;

    fn rounds_of(trace: &Trace, round_duration_ns: u64) -> Vec<u64> {
        client_bytes_per_round(trace.frames(), round_duration_ns).unwrap()
    }

    #[test]
    fn kind_names_round_trip_and_unknown_names_list_known() {
        for kind in known_kinds() {
            assert_eq!(kind.name().parse::<TraceKind>(), Ok(*kind));
        }
        assert_eq!(known_kind_names().len(), 8);
        let err = "comedy".parse::<TraceKind>().unwrap_err();
        let message = err.to_string();
        assert!(message.contains("unknown trace type 'comedy'"), "{message}");
        for name in known_kind_names() {
            assert!(message.contains(name), "{message}");
        }
    }

    #[test]
    fn cbr_2mbit_is_250000_bytes_every_second() {
        let trace = generate_trace(TraceKind::Cbr2Mbit, 1);
        assert_eq!(trace.len(), 54_000);
        assert_eq!(trace.kind(), "cbr-2mbit");
        assert_eq!(trace.seed(), None, "the trace does not depend on the seed");
        let rounds = rounds_of(&trace, NS_PER_S);
        assert_eq!(rounds.len(), 1800);
        assert!(rounds.iter().all(|&b| b == 250_000));
        // Half-second rounds (GPMP-style short rounds) carry half the rate.
        assert!(
            rounds_of(&trace, NS_PER_S / 2)
                .iter()
                .all(|&b| b == 125_000)
        );
        assert_eq!(generate(TraceKind::Cbr2Mbit, 7), trace.into_frames());
    }

    #[test]
    fn multi_bitrate_draws_one_rate_per_seed() {
        let rates: Vec<u64> = (0..2000).map(multi_bitrate_bits_per_s).collect();
        assert!(
            rates
                .iter()
                .all(|r| (SEED_004_MIN_BITS_PER_S..=SEED_004_MAX_BITS_PER_S).contains(r))
        );
        // Uniform: mean 576 kbit/s (sd of the mean ≈ 5.8 kbit/s), and both
        // halves of the range are used about equally.
        let mean = rates.iter().sum::<u64>() as f64 / rates.len() as f64;
        assert!((mean - 576_000.0).abs() < 20_000.0, "{mean}");
        let low = rates.iter().filter(|&&r| r < 576_000).count();
        assert!((900..1100).contains(&low), "{low}");

        let trace = generate_trace(TraceKind::MultiBitrate, 9);
        let rate = multi_bitrate_bits_per_s(9);
        assert_eq!(trace.seed(), Some(9));
        for bytes in rounds_of(&trace, NS_PER_S) {
            assert!(
                bytes == rate / 8 || bytes == rate.div_ceil(8),
                "{bytes} vs {rate}"
            );
        }
        assert_eq!(trace, generate_trace(TraceKind::MultiBitrate, 9));
        assert_ne!(
            trace.frames(),
            generate_trace(TraceKind::MultiBitrate, 10).frames()
        );
    }

    #[test]
    fn cbr_parameters_set_rate_and_length() {
        let ninety_minutes = 90 * 60 * NS_PER_S;
        let trace = CbrParams::new(4_000_000, ninety_minutes)
            .generate()
            .unwrap();
        assert_eq!(trace.len(), 162_000);
        assert_eq!(trace.total_bytes(), 4_000_000 / 8 * 90 * 60);
        assert_eq!(trace.kind(), "cbr");
        // A duration that ends mid-frame keeps the frame that started.
        let short = CbrParams::new(8_000, NS_PER_S / 20).generate().unwrap();
        assert_eq!(short.len(), 2);
        assert!(matches!(
            CbrParams::new(0, NS_PER_S).generate(),
            Err(SynthError::InvalidParams {
                param: "bits_per_s",
                ..
            })
        ));
        assert!(CbrParams::new(8_000, 0).generate().is_err());
    }

    #[test]
    fn vbr_kinds_generate_through_the_common_entry_point() {
        let frames = generate(TraceKind::Vbr(ContentType::Adventure), 4);
        assert_eq!(frames.len(), 54_000);
        assert_eq!(frames, generate(TraceKind::Vbr(ContentType::Adventure), 4));
    }
}
