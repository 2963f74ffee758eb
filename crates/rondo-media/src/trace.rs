//! A trace: one title's frames in decode order, each with its picture type,
//! plus the provenance a trace file records (kind, seed, frame rate).
//!
//! This module owns only the in-memory value and its invariants; the
//! generators (`synth`, `vbr`) build traces and `trace_file` reads and writes
//! them. Per-round statistics are not computed here: they come from
//! `rondo_model::schedule::client_bytes_per_round` and `RoundStats::of`, the
//! one rule every crate uses.

use std::fmt;

use rondo_model::schedule::Frame;

/// MPEG picture type of a frame, or `Unspecified` for traces (CBR, real files
/// without type information) that model only the byte rate.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum FrameType {
    I,
    P,
    B,
    Unspecified,
}

impl FrameType {
    /// The symbol used in trace files: `I`, `P`, `B` or `-`.
    pub fn symbol(self) -> &'static str {
        match self {
            FrameType::I => "I",
            FrameType::P => "P",
            FrameType::B => "B",
            FrameType::Unspecified => "-",
        }
    }

    /// Inverse of [`FrameType::symbol`].
    pub fn from_symbol(symbol: &str) -> Option<FrameType> {
        match symbol {
            "I" => Some(FrameType::I),
            "P" => Some(FrameType::P),
            "B" => Some(FrameType::B),
            "-" => Some(FrameType::Unspecified),
            _ => None,
        }
    }
}

impl fmt::Display for FrameType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.symbol())
    }
}

/// True when `kind` can be written in a trace header: a non-empty token of
/// ASCII letters, digits, `-`, `_` and `.` (no spaces or `=`, which delimit
/// header fields).
pub fn is_valid_kind(kind: &str) -> bool {
    !kind.is_empty()
        && kind
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A title's frames in decode order with their picture types.
///
/// Invariants (checked by [`Trace::new`]): at least one frame, one type per
/// frame, decode times non-decreasing, total size fits in `u64`, `kind` is a
/// valid header token and `fps`, when present, is finite and positive.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    kind: String,
    seed: Option<u64>,
    fps: Option<f64>,
    frames: Vec<Frame>,
    frame_types: Vec<FrameType>,
}

impl Trace {
    /// Builds a trace.
    ///
    /// # Panics
    /// When an invariant listed on [`Trace`] does not hold: generators build
    /// traces that satisfy them by construction, and the file parser checks
    /// each one and reports a line-numbered error before calling this.
    pub fn new(
        kind: impl Into<String>,
        seed: Option<u64>,
        fps: Option<f64>,
        frames: Vec<Frame>,
        frame_types: Vec<FrameType>,
    ) -> Trace {
        let kind = kind.into();
        assert!(is_valid_kind(&kind), "invalid trace kind {kind:?}");
        assert!(!frames.is_empty(), "a trace needs at least one frame");
        assert_eq!(frames.len(), frame_types.len(), "one frame type per frame");
        if let Some(fps) = fps {
            assert!(fps.is_finite() && fps > 0.0, "invalid frame rate {fps}");
        }
        assert!(
            frames
                .windows(2)
                .all(|w| w[0].decode_time_ns <= w[1].decode_time_ns),
            "frames must be in decode order"
        );
        assert!(
            frames
                .iter()
                .try_fold(0u64, |sum, f| sum.checked_add(f.bytes))
                .is_some(),
            "total size overflows u64"
        );
        Trace {
            kind,
            seed,
            fps,
            frames,
            frame_types,
        }
    }

    /// What produced the trace: a generator kind (e.g. `science-fiction`) or
    /// a free label.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The generator seed, when the trace depends on one.
    pub fn seed(&self) -> Option<u64> {
        self.seed
    }

    /// Nominal frames per second, when known.
    pub fn fps(&self) -> Option<f64> {
        self.fps
    }

    /// The frames in decode order.
    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }

    /// The picture type of each frame (same length as [`Trace::frames`]).
    pub fn frame_types(&self) -> &[FrameType] {
        &self.frame_types
    }

    /// Number of frames (never zero).
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Always false: a trace has at least one frame.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Sum of the frame sizes.
    pub fn total_bytes(&self) -> u64 {
        self.frames.iter().map(|f| f.bytes).sum()
    }

    /// The frames, dropping types and provenance.
    pub fn into_frames(self) -> Vec<Frame> {
        self.frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_type_symbols_round_trip() {
        for t in [
            FrameType::I,
            FrameType::P,
            FrameType::B,
            FrameType::Unspecified,
        ] {
            assert_eq!(FrameType::from_symbol(t.symbol()), Some(t));
        }
        assert_eq!(FrameType::from_symbol("X"), None);
        assert_eq!(FrameType::from_symbol("i"), None);
    }

    #[test]
    fn kind_tokens() {
        assert!(is_valid_kind("science-fiction"));
        assert!(is_valid_kind("cbr_2.5"));
        assert!(!is_valid_kind(""));
        assert!(!is_valid_kind("a b"));
        assert!(!is_valid_kind("a=b"));
    }

    #[test]
    #[should_panic(expected = "decode order")]
    fn out_of_order_frames_panic() {
        let frames = vec![
            Frame {
                decode_time_ns: 5,
                bytes: 1,
            },
            Frame {
                decode_time_ns: 4,
                bytes: 1,
            },
        ];
        Trace::new("x", None, None, frames, vec![FrameType::I; 2]);
    }
}
