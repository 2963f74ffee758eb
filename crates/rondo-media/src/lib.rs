//! rondo-media: turns media into frames.
//!
//! This crate owns what a title's bytes look like over time, never what to do
//! with them (rounds, disks and layout belong to `rondo-model`). Today it
//! holds the synthetic traces: VBR MPEG-2 titles calibrated to seed 000
//! Table 3 ([`vbr`]), the CBR and multi-bitrate streams of seeds 003 and 004
//! ([`synth`]), the [`Trace`] value ([`trace`]) and its text file format
//! ([`trace_file`]). Container parsing will join it as separate modules.

pub mod container;
pub mod synth;
pub mod trace;
pub mod trace_file;
pub mod vbr;

pub use synth::{
    CbrParams, KNOWN_KINDS, SynthError, TraceKind, UnknownKind, generate, generate_trace,
    known_kind_names, known_kinds, multi_bitrate_bits_per_s,
};
pub use trace::{FrameType, Trace};
pub use trace_file::{
    Problem, TraceFileError, parse_trace, parse_trace_bytes, trace_to_string, write_trace,
};
pub use vbr::{ContentType, Table3Row, VbrCalibration, VbrParams};
