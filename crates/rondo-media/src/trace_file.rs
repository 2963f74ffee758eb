//! The rondo trace file format (v1): writer and parser.
//!
//! This module owns the text form of a [`Trace`]; docs/traces.md is its
//! specification. A file looks like:
//!
//! ```text
//! # rondo-trace v1 kind=science-fiction seed=1 fps=30 frames=54000
//! # columns: frame index from 0; decode time in ns; size in bytes; I, P, B or - (unspecified)
//! frame,decode_time_ns,bytes,frame_type
//! 0,0,81234,I
//! 1,33333333,9120,B
//! ```
//!
//! Line 1 is the header: `# rondo-trace v1`, then space-separated `key=value`
//! fields: `kind` (required), `seed`, `fps`, `frames` (optional; when present
//! the parser checks the frame count against it). Other lines starting with
//! `#` are comments and blank lines are ignored, anywhere after line 1. The
//! first other line is the column header, then one line per frame in decode
//! order. Any departure is an error naming the line and the problem; the
//! parser never panics, whatever the input.

use std::fmt::Write as _;
use std::io;

use rondo_model::schedule::Frame;
use thiserror::Error;

use crate::trace::{FrameType, Trace, is_valid_kind};

/// First token of the header line.
pub const MAGIC: &str = "# rondo-trace";
/// The format version this module writes and reads.
pub const VERSION: &str = "v1";
/// The column header line.
pub const COLUMNS: &str = "frame,decode_time_ns,bytes,frame_type";

/// A trace file that could not be parsed: where, and what is wrong.
#[derive(Debug, Error, Clone, PartialEq)]
#[error("line {line}: {problem}")]
pub struct TraceFileError {
    /// 1-based line number.
    pub line: usize,
    pub problem: Problem,
}

/// What is wrong with a trace file.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum Problem {
    #[error("the input is empty; a trace starts with the header line '{MAGIC} {VERSION} kind=...'")]
    Empty,
    #[error("the input is not UTF-8 text")]
    NotUtf8,
    #[error("missing header: expected '{MAGIC} {VERSION} kind=...', found {found:?}")]
    MissingHeader { found: String },
    #[error("unsupported trace format version {found:?}; this rondo reads {VERSION}")]
    UnsupportedVersion { found: String },
    #[error("header field {field:?}: {reason}")]
    BadHeaderField { field: String, reason: String },
    #[error("the header has no kind=... field")]
    MissingKind,
    #[error("expected the column header '{COLUMNS}', found {found:?}")]
    MissingColumns { found: String },
    #[error("expected 4 comma-separated fields ({COLUMNS}), found {found}")]
    FieldCount { found: usize },
    #[error("{column} {value:?} is not a non-negative integer that fits in 64 bits")]
    NotANumber { column: &'static str, value: String },
    #[error("frame_type {value:?} is not one of I, P, B, -")]
    BadFrameType { value: String },
    #[error("frame number {found} is out of sequence: expected {expected}")]
    FrameOutOfSequence { expected: u64, found: u64 },
    #[error(
        "decode_time_ns {decode_time_ns} goes backwards: the previous frame decodes at \
         {previous_ns} (frames must be in decode order)"
    )]
    DecodeTimeBackwards {
        decode_time_ns: u64,
        previous_ns: u64,
    },
    #[error("the total size overflows a 64-bit byte count")]
    TotalOverflow,
    #[error("no frames: the trace has no line after the column header")]
    NoFrames,
    #[error("no column header '{COLUMNS}' and no frames")]
    NoColumns,
    #[error("the header says frames={header} but the trace has {found} frames")]
    FrameCountMismatch { header: u64, found: u64 },
}

fn error(line: usize, problem: Problem) -> TraceFileError {
    TraceFileError { line, problem }
}

/// At most 60 characters of `text`, for quoting input in messages.
fn excerpt(text: &str) -> String {
    const MAX_CHARS: usize = 60;
    match text.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
}

/// The header line of `trace`.
pub fn header_line(trace: &Trace) -> String {
    let mut line = format!("{MAGIC} {VERSION} kind={}", trace.kind());
    if let Some(seed) = trace.seed() {
        write!(line, " seed={seed}").expect("writing to a String");
    }
    if let Some(fps) = trace.fps() {
        // f64's Display is the shortest text that parses back to the same value.
        write!(line, " fps={fps}").expect("writing to a String");
    }
    write!(line, " frames={}", trace.len()).expect("writing to a String");
    line
}

/// Writes `trace` in the v1 format.
pub fn write_trace<W: io::Write>(out: &mut W, trace: &Trace) -> io::Result<()> {
    writeln!(out, "{}", header_line(trace))?;
    writeln!(
        out,
        "# columns: frame index from 0; decode time in ns; size in bytes; \
         I, P, B or - (unspecified)"
    )?;
    writeln!(out, "{COLUMNS}")?;
    for (index, (frame, frame_type)) in trace.frames().iter().zip(trace.frame_types()).enumerate() {
        writeln!(
            out,
            "{index},{},{},{}",
            frame.decode_time_ns,
            frame.bytes,
            frame_type.symbol()
        )?;
    }
    Ok(())
}

/// `trace` in the v1 format, as a string.
pub fn trace_to_string(trace: &Trace) -> String {
    let mut out = Vec::with_capacity(trace.len() * 24);
    write_trace(&mut out, trace).expect("writing to a Vec cannot fail");
    String::from_utf8(out).expect("the writer emits UTF-8")
}

/// Parses a trace file given as raw bytes (checks UTF-8 first).
pub fn parse_trace_bytes(input: &[u8]) -> Result<Trace, TraceFileError> {
    match std::str::from_utf8(input) {
        Ok(text) => parse_trace(text),
        Err(e) => {
            let line = 1 + input[..e.valid_up_to()]
                .iter()
                .filter(|&&b| b == b'\n')
                .count();
            Err(error(line, Problem::NotUtf8))
        }
    }
}

/// Header fields of a v1 file.
#[derive(Default)]
struct Header {
    kind: Option<String>,
    seed: Option<u64>,
    fps: Option<f64>,
    frames: Option<u64>,
}

fn parse_header(line: &str) -> Result<Header, Problem> {
    // The magic must be a whole word: "# rondo-tracev1" is not a header.
    let rest = match line.strip_prefix(MAGIC) {
        Some(rest) if rest.is_empty() || rest.starts_with(|c: char| c.is_ascii_whitespace()) => {
            rest
        }
        _ => {
            return Err(Problem::MissingHeader {
                found: excerpt(line),
            });
        }
    };
    let mut tokens = rest.split_ascii_whitespace();
    match tokens.next() {
        Some(VERSION) => {}
        Some(other) => {
            return Err(Problem::UnsupportedVersion {
                found: excerpt(other),
            });
        }
        None => {
            return Err(Problem::UnsupportedVersion {
                found: String::new(),
            });
        }
    }
    let mut header = Header::default();
    for token in tokens {
        let bad = |reason: &str| Problem::BadHeaderField {
            field: excerpt(token),
            reason: reason.to_string(),
        };
        let Some((key, value)) = token.split_once('=') else {
            return Err(bad("expected key=value"));
        };
        let duplicate = match key {
            "kind" => {
                if !is_valid_kind(value) {
                    return Err(bad("kind must be letters, digits, '-', '_' or '.'"));
                }
                header.kind.replace(value.to_string()).is_some()
            }
            "seed" => {
                let seed = value
                    .parse()
                    .map_err(|_| bad("seed must be an unsigned integer"))?;
                header.seed.replace(seed).is_some()
            }
            "fps" => {
                let fps: f64 = value.parse().map_err(|_| bad("fps must be a number"))?;
                if !(fps.is_finite() && fps > 0.0) {
                    return Err(bad("fps must be finite and positive"));
                }
                header.fps.replace(fps).is_some()
            }
            "frames" => {
                let frames = value
                    .parse()
                    .map_err(|_| bad("frames must be an unsigned integer"))?;
                header.frames.replace(frames).is_some()
            }
            _ => return Err(bad("unknown key (v1 has kind, seed, fps, frames)")),
        };
        if duplicate {
            return Err(bad("the key appears twice"));
        }
    }
    Ok(header)
}

fn parse_u64(column: &'static str, value: &str) -> Result<u64, Problem> {
    // `u64::from_str` accepts a leading '+'; the format does not.
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Problem::NotANumber {
            column,
            value: excerpt(value),
        });
    }
    value.parse().map_err(|_| Problem::NotANumber {
        column,
        value: excerpt(value),
    })
}

/// Parses a trace in the v1 format.
pub fn parse_trace(input: &str) -> Result<Trace, TraceFileError> {
    // Lines numbered from 1; a trailing '\r' (CRLF files) is not content.
    let mut lines = input
        .split('\n')
        .enumerate()
        .map(|(i, l)| (i + 1, l.strip_suffix('\r').unwrap_or(l)));

    let (_, first) = lines.next().expect("split yields at least one item");
    if input.is_empty() {
        return Err(error(1, Problem::Empty));
    }
    let header = parse_header(first).map_err(|p| error(1, p))?;
    let kind = header.kind.clone().ok_or(error(1, Problem::MissingKind))?;

    let mut content = lines.filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'));
    let last_line = input.lines().count().max(1);
    let (columns_line, columns) = content.next().ok_or(error(last_line, Problem::NoColumns))?;
    if columns.trim() != COLUMNS {
        return Err(error(
            columns_line,
            Problem::MissingColumns {
                found: excerpt(columns),
            },
        ));
    }

    let mut frames = Vec::new();
    let mut frame_types = Vec::new();
    let mut total_bytes = 0u64;
    let mut previous_ns = 0u64;
    for (line, text) in content {
        let at = |problem| error(line, problem);
        let fields: Vec<&str> = text.split(',').map(str::trim).collect();
        if fields.len() != 4 {
            return Err(at(Problem::FieldCount {
                found: fields.len(),
            }));
        }
        let index = parse_u64("frame", fields[0]).map_err(at)?;
        let decode_time_ns = parse_u64("decode_time_ns", fields[1]).map_err(at)?;
        let bytes = parse_u64("bytes", fields[2]).map_err(at)?;
        let frame_type = FrameType::from_symbol(fields[3]).ok_or_else(|| {
            at(Problem::BadFrameType {
                value: excerpt(fields[3]),
            })
        })?;
        let expected = frames.len() as u64;
        if index != expected {
            return Err(at(Problem::FrameOutOfSequence {
                expected,
                found: index,
            }));
        }
        if decode_time_ns < previous_ns {
            return Err(at(Problem::DecodeTimeBackwards {
                decode_time_ns,
                previous_ns,
            }));
        }
        total_bytes = total_bytes
            .checked_add(bytes)
            .ok_or(at(Problem::TotalOverflow))?;
        previous_ns = decode_time_ns;
        frames.push(Frame {
            decode_time_ns,
            bytes,
        });
        frame_types.push(frame_type);
    }
    if frames.is_empty() {
        return Err(error(last_line, Problem::NoFrames));
    }
    if let Some(declared) = header.frames
        && declared != frames.len() as u64
    {
        return Err(error(
            1,
            Problem::FrameCountMismatch {
                header: declared,
                found: frames.len() as u64,
            },
        ));
    }
    Ok(Trace::new(
        kind,
        header.seed,
        header.fps,
        frames,
        frame_types,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{TraceKind, generate_trace};
    use crate::vbr::ContentType;
    use proptest::prelude::*;

    fn parse_err(input: &str) -> TraceFileError {
        parse_trace(input).expect_err("input should be refused")
    }

    const GOOD: &str = "# rondo-trace v1 kind=test seed=3 fps=30 frames=3\n\
                        frame,decode_time_ns,bytes,frame_type\n\
                        0,0,100,I\n\
                        1,33333333,20,B\n\
                        2,66666666,40,P\n";

    #[test]
    fn parses_a_small_file() {
        let trace = parse_trace(GOOD).unwrap();
        assert_eq!(trace.kind(), "test");
        assert_eq!(trace.seed(), Some(3));
        assert_eq!(trace.fps(), Some(30.0));
        assert_eq!(trace.total_bytes(), 160);
        assert_eq!(
            trace.frame_types(),
            &[FrameType::I, FrameType::B, FrameType::P]
        );
        assert_eq!(trace.frames()[2].decode_time_ns, 66_666_666);
    }

    #[test]
    fn comments_blank_lines_crlf_and_optional_fields_are_accepted() {
        let input = "# rondo-trace v1 kind=x\r\n# a comment\r\n\r\nframe,decode_time_ns,bytes,frame_type\r\n# mid comment\r\n0, 5 ,7,-\r\n";
        let trace = parse_trace(input).unwrap();
        assert_eq!(trace.seed(), None);
        assert_eq!(trace.fps(), None);
        assert_eq!(trace.frames()[0].decode_time_ns, 5);
        assert_eq!(trace.frame_types()[0], FrameType::Unspecified);
    }

    #[test]
    fn generated_traces_round_trip() {
        for kind in [
            TraceKind::Vbr(ContentType::ScienceFiction),
            TraceKind::Cbr2Mbit,
            TraceKind::MultiBitrate,
        ] {
            let trace = generate_trace(kind, 2);
            let text = trace_to_string(&trace);
            assert!(text.starts_with(&format!("# rondo-trace v1 kind={kind} ")));
            assert_eq!(parse_trace(&text).unwrap(), trace, "{kind}");
        }
    }

    #[test]
    fn empty_input() {
        let e = parse_err("");
        assert_eq!(e.line, 1);
        assert!(e.to_string().contains("empty"), "{e}");
    }

    #[test]
    fn missing_header() {
        let e = parse_err("frame,decode_time_ns,bytes,frame_type\n0,0,1,I\n");
        assert_eq!(e.line, 1);
        assert!(matches!(e.problem, Problem::MissingHeader { .. }));
        assert!(e.to_string().starts_with("line 1: missing header"), "{e}");
        let e = parse_err(&GOOD.replace("# rondo-trace v1", "# rondo-tracev1"));
        assert!(matches!(e.problem, Problem::MissingHeader { .. }));
    }

    #[test]
    fn wrong_version() {
        let e = parse_err(&GOOD.replace("v1", "v2"));
        assert_eq!(e.line, 1);
        assert_eq!(
            e.problem,
            Problem::UnsupportedVersion { found: "v2".into() }
        );
        assert!(e.to_string().contains("this rondo reads v1"), "{e}");
    }

    #[test]
    fn header_fields_are_checked() {
        for (header, field) in [
            ("# rondo-trace v1 seed=1", None),
            ("# rondo-trace v1 kind=a seed=-1", Some("seed=-1")),
            ("# rondo-trace v1 kind=a fps=0", Some("fps=0")),
            ("# rondo-trace v1 kind=a color=red", Some("color=red")),
            ("# rondo-trace v1 kind=a kind=b", Some("kind=b")),
            ("# rondo-trace v1 kind=a junk", Some("junk")),
        ] {
            let e = parse_err(&format!("{header}\n{COLUMNS}\n0,0,1,I\n"));
            assert_eq!(e.line, 1, "{header}");
            match field {
                None => assert_eq!(e.problem, Problem::MissingKind),
                Some(field) => assert!(
                    matches!(&e.problem, Problem::BadHeaderField { field: f, .. } if f == field),
                    "{header}: {e}"
                ),
            }
        }
    }

    #[test]
    fn wrong_column_header() {
        let e = parse_err("# rondo-trace v1 kind=a\n# c\nframe,bytes\n0,1\n");
        assert_eq!(e.line, 3);
        assert!(e.to_string().contains("expected the column header"), "{e}");
    }

    #[test]
    fn non_numeric_fields_name_the_line_and_column() {
        let e = parse_err(&GOOD.replace("1,33333333,20,B", "1,33333333,twenty,B"));
        assert_eq!(e.line, 4);
        assert_eq!(
            e.to_string(),
            "line 4: bytes \"twenty\" is not a non-negative integer that fits in 64 bits"
        );
        let e = parse_err(&GOOD.replace("2,66666666", "2,-5"));
        assert_eq!(e.line, 5);
        assert!(e.to_string().contains("decode_time_ns \"-5\""), "{e}");
        let e = parse_err(&GOOD.replace("0,0,100,I", "0,0,+100,I"));
        assert_eq!(e.line, 3);
        let e = parse_err(&GOOD.replace("0,0,100,I", "0,0,99999999999999999999,I"));
        assert_eq!(e.line, 3);
    }

    #[test]
    fn decode_times_going_backwards() {
        let e = parse_err(&GOOD.replace("2,66666666", "2,1000"));
        assert_eq!(e.line, 5);
        assert_eq!(
            e.problem,
            Problem::DecodeTimeBackwards {
                decode_time_ns: 1000,
                previous_ns: 33_333_333
            }
        );
        assert!(e.to_string().contains("goes backwards"), "{e}");
    }

    #[test]
    fn structural_errors() {
        let e = parse_err(&GOOD.replace("1,33333333,20,B", "1,33333333,20"));
        assert_eq!((e.line, e.problem), (4, Problem::FieldCount { found: 3 }));
        let e = parse_err(&GOOD.replace("1,33333333,20,B", "1,33333333,20,X"));
        assert_eq!(e.line, 4);
        assert!(matches!(e.problem, Problem::BadFrameType { .. }));
        let e = parse_err(&GOOD.replace("2,66666666", "3,66666666"));
        assert_eq!(
            (e.line, e.problem),
            (
                5,
                Problem::FrameOutOfSequence {
                    expected: 2,
                    found: 3
                }
            )
        );
        let e = parse_err(&GOOD.replace("frames=3", "frames=4"));
        assert_eq!(
            (e.line, e.problem),
            (
                1,
                Problem::FrameCountMismatch {
                    header: 4,
                    found: 3
                }
            )
        );
        let e = parse_err("# rondo-trace v1 kind=a\nframe,decode_time_ns,bytes,frame_type\n\n");
        assert_eq!((e.line, e.problem), (3, Problem::NoFrames));
        let e = parse_err("# rondo-trace v1 kind=a\n# only comments\n");
        assert_eq!((e.line, e.problem), (2, Problem::NoColumns));
        let big = u64::MAX;
        let e = parse_err(&format!(
            "# rondo-trace v1 kind=a\n{COLUMNS}\n0,0,{big},I\n1,0,1,I\n"
        ));
        assert_eq!((e.line, e.problem), (4, Problem::TotalOverflow));
    }

    #[test]
    fn invalid_utf8_names_its_line() {
        let mut bytes = GOOD.as_bytes().to_vec();
        bytes.extend_from_slice(b"3,99999999,1,\xff\n");
        let e = parse_trace_bytes(&bytes).unwrap_err();
        assert_eq!((e.line, e.problem), (6, Problem::NotUtf8));
    }

    #[test]
    fn long_garbage_is_quoted_briefly() {
        let e = parse_err(&"x".repeat(10_000));
        assert!(e.to_string().len() < 200, "{e}");
    }

    fn arbitrary_trace() -> impl Strategy<Value = Trace> {
        (
            "[a-z0-9][a-z0-9._-]{0,15}",
            proptest::option::of(any::<u64>()),
            proptest::option::of(1e-3f64..1e6),
            proptest::collection::vec((0u64..1_000_000_000, 0u64..1 << 40, 0usize..4), 1..200),
        )
            .prop_map(|(kind, seed, fps, rows)| {
                let mut t = 0;
                let types = [
                    FrameType::I,
                    FrameType::P,
                    FrameType::B,
                    FrameType::Unspecified,
                ];
                let (frames, frame_types) = rows
                    .into_iter()
                    .map(|(gap, bytes, ty)| {
                        t += gap;
                        (
                            Frame {
                                decode_time_ns: t,
                                bytes,
                            },
                            types[ty],
                        )
                    })
                    .unzip();
                Trace::new(kind, seed, fps, frames, frame_types)
            })
    }

    proptest! {
        #[test]
        fn write_then_parse_gives_the_same_trace(trace in arbitrary_trace()) {
            let text = trace_to_string(&trace);
            prop_assert_eq!(parse_trace(&text).unwrap(), trace);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_trace_bytes(&bytes);
        }

        /// Arbitrary edits of a valid file never panic, and whatever parses
        /// is a valid trace: decode order, one type per frame.
        #[test]
        fn mutated_files_never_panic(
            trace in arbitrary_trace(),
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..8),
        ) {
            let mut bytes = trace_to_string(&trace).into_bytes();
            for (at, byte, op) in edits {
                if bytes.is_empty() {
                    break;
                }
                let i = at.index(bytes.len());
                match op {
                    0 => bytes[i] = byte,
                    1 => { bytes.remove(i); }
                    _ => bytes.insert(i, byte),
                }
            }
            if let Ok(parsed) = parse_trace_bytes(&bytes) {
                prop_assert!(parsed.frames().windows(2).all(|w| w[0].decode_time_ns <= w[1].decode_time_ns));
                prop_assert_eq!(parsed.frames().len(), parsed.frame_types().len());
            }
        }
    }
}
