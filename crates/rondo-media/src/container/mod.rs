//! Real media files: container parsing, the consumption curve and the stored
//! stream.
//!
//! This module owns what a user's MP4 or MPEG-TS file looks like to rondo:
//! which tracks and codecs it holds ([`probe`]), which bytes are stored and
//! served (the source file, or for a moov-at-end MP4 its faststart rewrite),
//! how many of those bytes form the pre-roll header, and the consumption
//! curve: every sample of every track, in stored-stream byte order, with the
//! time at which the player needs it ([`prepare`]). It decides nothing about
//! rounds, disks or layout; `rondo_model::schedule::Schedule::from_frames`
//! turns [`PreparedMedia::frames`] into rounds.
//!
//! The parsers are written for untrusted input: every length and count read
//! from a file is checked before it is used, arithmetic on file values is
//! checked, and a malformed file is refused with a [`MediaError`] naming the
//! box or packet and its byte offset. `docs/media.md` explains the curve.

mod audio;
mod codecs;
mod curve;
mod faststart;
mod mp4;
pub mod seek;
mod source;
mod ts;

pub use codecs::{Mp4Codecs, mp4_codecs};

use std::fmt;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

use rondo_model::schedule::Frame;
use serde::Serialize;
use thiserror::Error;

use source::{FileSource, Source};

/// Content-Type of MP4 files.
pub const MP4_CONTENT_TYPE: &str = "video/mp4";
/// Content-Type of MPEG transport streams.
pub const MPEG_TS_CONTENT_TYPE: &str = "video/mp2t";

/// How a file is packaged. The MP4 variants differ in where the sample
/// tables live, which decides the stored stream and its header.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum ContainerKind {
    /// MP4 with `moov` before the media data: stored as is.
    Mp4Faststart,
    /// MP4 with `moov` after (some of) the media data: stored as its
    /// faststart rewrite.
    Mp4MoovAtEnd,
    /// Fragmented MP4: an init segment (`ftyp`+`moov`) and `moof`+`mdat`
    /// pairs. Stored as is.
    Mp4Fragmented,
    /// MPEG-2 transport stream (188-byte packets). Stored as is.
    MpegTs,
}

impl ContainerKind {
    /// The Content-Type to serve the stored stream with.
    pub fn content_type(self) -> &'static str {
        match self {
            ContainerKind::MpegTs => MPEG_TS_CONTENT_TYPE,
            _ => MP4_CONTENT_TYPE,
        }
    }

    /// Short lower-case name, as printed by the CLI.
    pub fn name(self) -> &'static str {
        match self {
            ContainerKind::Mp4Faststart => "mp4 (faststart)",
            ContainerKind::Mp4MoovAtEnd => "mp4 (moov at end)",
            ContainerKind::Mp4Fragmented => "mp4 (fragmented)",
            ContainerKind::MpegTs => "mpeg-ts",
        }
    }
}

/// Video codecs rondo accepts.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum VideoCodec {
    H264,
    H265,
    Mpeg2,
}

impl VideoCodec {
    /// The name ffprobe uses (`codec_name`).
    pub fn name(self) -> &'static str {
        match self {
            VideoCodec::H264 => "h264",
            VideoCodec::H265 => "hevc",
            VideoCodec::Mpeg2 => "mpeg2video",
        }
    }
}

/// Audio codecs rondo accepts.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum AudioCodec {
    Aac,
    Mp3,
    /// MPEG-1/2 audio layer II, ffmpeg's default audio codec for MPEG-TS.
    Mp2,
}

impl AudioCodec {
    /// The name ffprobe uses (`codec_name`).
    pub fn name(self) -> &'static str {
        match self {
            AudioCodec::Aac => "aac",
            AudioCodec::Mp3 => "mp3",
            AudioCodec::Mp2 => "mp2",
        }
    }
}

/// What a track carries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum TrackKind {
    Video(VideoCodec),
    Audio(AudioCodec),
    /// Subtitles, timecode, metadata, private data: stored and served, timed
    /// when the container times it (MP4), container overhead otherwise (TS).
    Other {
        description: String,
    },
}

/// One track (MP4 `trak`) or elementary stream (TS PID).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TrackInfo {
    /// MP4 `track_ID`, or the TS PID.
    pub id: u32,
    pub kind: TrackKind,
    /// Samples on the consumption curve: MP4 samples, TS video PES packets,
    /// TS audio frames. Zero for TS streams carried as overhead.
    pub samples: u64,
    /// Sum of the samples' sizes (elementary-stream bytes, no container
    /// overhead).
    pub payload_bytes: u64,
}

/// What a media file is, as far as serving it goes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MediaInfo {
    pub container: ContainerKind,
    /// Content-Type to serve the stored stream with.
    pub content_type: &'static str,
    /// Presentation duration: from the earliest presentation start to the
    /// latest presentation end over all tracks (MP4 edit lists respected).
    pub duration_ns: u64,
    /// Codec of the first video track.
    pub video_codec: VideoCodec,
    /// Frames of the first video track.
    pub video_frames: u64,
    /// Codec of the first audio track, if any.
    pub audio_codec: Option<AudioCodec>,
    /// Size of the source file.
    pub file_bytes: u64,
    pub tracks: Vec<TrackInfo>,
}

/// One piece of the stored stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoredPiece {
    /// `bytes` bytes of the source file starting at `source_offset`.
    Source { source_offset: u64, bytes: u64 },
    /// Bytes rondo wrote (the rewritten `moov` of a faststart rewrite).
    Owned(Vec<u8>),
}

impl StoredPiece {
    pub fn bytes(&self) -> u64 {
        match self {
            StoredPiece::Source { bytes, .. } => *bytes,
            StoredPiece::Owned(data) => data.len() as u64,
        }
    }
}

/// One sample on the consumption curve, in stored-stream order.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StoredSample {
    /// Index into [`MediaInfo::tracks`].
    pub track_index: usize,
    /// Stored-stream offset of the sample's first byte (TS: of the first
    /// transport packet carrying it).
    pub stored_offset: u64,
    /// Stored-stream offset just past the last byte needed to have the whole
    /// sample (TS: the end of the last transport packet carrying it).
    pub stored_end: u64,
    /// The sample's own size (elementary-stream bytes).
    pub payload_bytes: u64,
    /// The sample's own decode time on the title's timeline (starts at 0).
    pub decode_time_ns: u64,
}

/// A place a player can start decoding: a video sync sample (MP4 `stss`,
/// or every sample without one) or a TS video PES that starts an IDR/IRAP
/// access unit or MPEG-2 I-picture (or whose first packet has the
/// random_access_indicator set).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Keyframe {
    /// Presentation time of the keyframe from the title's presentation
    /// start (MP4: edit lists applied; TS: PTS minus the earliest
    /// presentation time of any audio or video stream), the timeline
    /// `?t=` and `MediaInfo::duration_ns` use.
    pub time_ns: u64,
    /// Stored-stream offset where a player starting at this keyframe starts
    /// reading. MP4: the sample's first byte (after any faststart rewrite).
    /// TS: the keyframe PES's first packet, or the first of the PAT/PMT/SDT
    /// packets directly before it, so the player learns the program first.
    pub byte_offset: u64,
}

/// A media file ready to be stored: the stored stream's bytes, its header
/// and its consumption curve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedMedia {
    pub info: MediaInfo,
    /// The stored stream, in order.
    pub pieces: Vec<StoredPiece>,
    /// Size of the stored stream: the sum of the pieces.
    pub stored_bytes: u64,
    /// Bytes at the start of the stored stream sent before round 0's media:
    /// `ftyp`+`moov` for MP4 (the init segment when fragmented), 0 for TS.
    pub header_bytes: u64,
    /// The consumption curve: one frame per sample, in stored-stream byte
    /// order, non-decreasing in decode time, starting at 0. Frame i's bytes
    /// run from the end of frame i−1 (or the header) to
    /// `samples[i].stored_end`; the last frame also holds any trailing
    /// bytes. The bytes sum to `stored_bytes − header_bytes`. A frame's
    /// decode time is when the player needs its last byte: the earliest
    /// decode time of its own and every later sample.
    pub frames: Vec<Frame>,
    /// The sample behind each frame (same index).
    pub samples: Vec<StoredSample>,
    /// The first video track's keyframes, in time (and stored) order. Empty
    /// for fragmented MP4 (its fragments' sync flags are not read).
    pub keyframes: Vec<Keyframe>,
}

impl PreparedMedia {
    /// Writes the stored stream to `out`, copying source ranges from
    /// `source` (the file `prepare` read) through a bounded buffer. Returns
    /// the number of bytes written.
    pub fn write_stored<R: Read + Seek, W: Write>(
        &self,
        source: &mut R,
        out: &mut W,
    ) -> Result<u64, MediaError> {
        let io_err = |what: &str, e: io::Error| MediaError::Io {
            context: what.to_string(),
            source: e,
        };
        let source_bytes = source
            .seek(SeekFrom::End(0))
            .map_err(|e| io_err("source", e))?;
        if source_bytes != self.info.file_bytes {
            return Err(MediaError::SourceChanged {
                expected_bytes: self.info.file_bytes,
                found_bytes: source_bytes,
            });
        }
        let mut buffer = vec![0u8; 1 << 20];
        let mut written_bytes = 0u64;
        for piece in &self.pieces {
            match piece {
                StoredPiece::Owned(data) => {
                    out.write_all(data).map_err(|e| io_err("output", e))?;
                }
                StoredPiece::Source {
                    source_offset,
                    bytes,
                } => {
                    source
                        .seek(SeekFrom::Start(*source_offset))
                        .map_err(|e| io_err("source", e))?;
                    let mut left = *bytes;
                    while left > 0 {
                        let n = left.min(buffer.len() as u64) as usize;
                        source
                            .read_exact(&mut buffer[..n])
                            .map_err(|e| io_err("source", e))?;
                        out.write_all(&buffer[..n])
                            .map_err(|e| io_err("output", e))?;
                        left -= n as u64;
                    }
                }
            }
            written_bytes += piece.bytes();
        }
        Ok(written_bytes)
    }

    /// Writes the stored stream of the file at `source_path` to `out`.
    pub fn write_stored_from_path<W: Write>(
        &self,
        source_path: &Path,
        out: &mut W,
    ) -> Result<u64, MediaError> {
        let mut file = std::fs::File::open(source_path).map_err(|e| MediaError::Io {
            context: source_path.display().to_string(),
            source: e,
        })?;
        self.write_stored(&mut file, out)
    }
}

/// The container format a [`MediaError`] is about.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Format {
    Mp4,
    MpegTs,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Mp4 => "MP4",
            Format::MpegTs => "MPEG-TS",
        })
    }
}

/// Why a file cannot be served. Every message says what is wrong and where.
#[derive(Debug, Error)]
pub enum MediaError {
    #[error("cannot read {context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error("the file is empty")]
    Empty,
    #[error("not an MP4 or MPEG-TS file: {what}")]
    UnknownFormat { what: String },
    #[error("unsupported {format} file: {what}")]
    Unsupported { format: String, what: String },
    #[error("corrupt {format} file at byte {offset}: {what}")]
    Corrupt {
        format: Format,
        offset: u64,
        what: String,
    },
    #[error("truncated {format} file: {what}; the file ends at byte {file_bytes}")]
    Truncated {
        format: Format,
        offset: u64,
        file_bytes: u64,
        what: String,
    },
    #[error(
        "the source file changed since it was prepared: {expected_bytes} bytes expected, {found_bytes} found"
    )]
    SourceChanged {
        expected_bytes: u64,
        found_bytes: u64,
    },
}

impl MediaError {
    pub(crate) fn corrupt(format: Format, offset: u64, what: impl Into<String>) -> MediaError {
        MediaError::Corrupt {
            format,
            offset,
            what: what.into(),
        }
    }

    pub(crate) fn unsupported(format: impl fmt::Display, what: impl Into<String>) -> MediaError {
        MediaError::Unsupported {
            format: format.to_string(),
            what: what.into(),
        }
    }
}

/// What the stored stream of a file is; shared by both container parsers.
pub(crate) struct Analysis {
    pub info: MediaInfo,
    pub pieces: Vec<StoredPiece>,
    pub header_bytes: u64,
    pub units: Vec<curve::Unit>,
    pub keyframes: Vec<Keyframe>,
}

/// Probes the file at `path`: container, codecs, duration, frame count.
/// Reads only what it needs (an MP4's boxes and `moov`, a TS's packets in
/// bounded chunks), never the whole file at once.
pub fn probe(path: impl AsRef<Path>) -> Result<MediaInfo, MediaError> {
    let source = FileSource::open(path.as_ref())?;
    Ok(analyze(&source)?.info)
}

/// Probes a file held in memory.
pub fn probe_bytes(bytes: &[u8]) -> Result<MediaInfo, MediaError> {
    Ok(analyze(bytes)?.info)
}

/// Prepares the file at `path` for storage: the stored stream (the file, or
/// its faststart rewrite), its header and its consumption curve. Media data
/// is never loaded into memory; only container structures are.
pub fn prepare(path: impl AsRef<Path>) -> Result<PreparedMedia, MediaError> {
    let source = FileSource::open(path.as_ref())?;
    finish(analyze(&source)?)
}

/// Prepares a file held in memory.
pub fn prepare_bytes(bytes: &[u8]) -> Result<PreparedMedia, MediaError> {
    finish(analyze(bytes)?)
}

fn finish(analysis: Analysis) -> Result<PreparedMedia, MediaError> {
    let stored_bytes = analysis.pieces.iter().map(StoredPiece::bytes).sum();
    let format = match analysis.info.container {
        ContainerKind::MpegTs => Format::MpegTs,
        _ => Format::Mp4,
    };
    let (frames, samples) =
        curve::build(format, analysis.units, analysis.header_bytes, stored_bytes)?;
    Ok(PreparedMedia {
        info: analysis.info,
        pieces: analysis.pieces,
        stored_bytes,
        header_bytes: analysis.header_bytes,
        frames,
        samples,
        keyframes: analysis.keyframes,
    })
}

/// What the first bytes of a file say it is.
#[derive(Debug, PartialEq, Eq)]
enum Sniffed {
    Mp4,
    MpegTs,
}

fn analyze(source: &(impl Source + ?Sized)) -> Result<Analysis, MediaError> {
    match sniff(source)? {
        Sniffed::Mp4 => mp4::analyze(source),
        Sniffed::MpegTs => ts::analyze(source),
    }
}

/// MP4 top-level box types a file may start with.
const MP4_FIRST_BOXES: [&[u8; 4]; 9] = [
    b"ftyp", b"styp", b"moov", b"mdat", b"free", b"skip", b"wide", b"pnot", b"uuid",
];

fn sniff(source: &(impl Source + ?Sized)) -> Result<Sniffed, MediaError> {
    let file_bytes = source.len();
    if file_bytes == 0 {
        return Err(MediaError::Empty);
    }
    let mut head = [0u8; 200];
    let head_len = file_bytes.min(head.len() as u64) as usize;
    source.read_at(0, &mut head[..head_len])?;
    let head = &head[..head_len];
    let unsupported = |what: &str| Err(MediaError::unsupported("media", what));
    if head.starts_with(&[0x1a, 0x45, 0xdf, 0xa3]) {
        return unsupported("Matroska/WebM (EBML) files are not supported yet; remux to MP4");
    }
    if head.starts_with(b"RIFF") {
        return unsupported("RIFF (AVI/WAV) files are not supported; remux to MP4");
    }
    if head.starts_with(b"FLV") {
        return unsupported("FLV files are not supported; remux to MP4");
    }
    if head.starts_with(b"OggS") {
        return unsupported("Ogg files are not supported");
    }
    if head.starts_with(&[0, 0, 1, 0xba]) {
        return unsupported("MPEG program streams (VOB/MPG) are not supported; remux to MPEG-TS");
    }
    if head.starts_with(b"ID3") || (head.len() >= 2 && head[0] == 0xff && head[1] & 0xe0 == 0xe0) {
        return Err(MediaError::unsupported(
            "media",
            "an audio elementary stream (MP3/AAC) has no video track; audio-only files are not supported",
        ));
    }
    if head[0] == 0x47 && (head_len <= 188 || head[188] == 0x47) {
        return Ok(Sniffed::MpegTs);
    }
    if head_len > 196 && head[4] == 0x47 && head[196] == 0x47 {
        return unsupported(
            "BDAV M2TS (192-byte packets) is not supported; remux to 188-byte MPEG-TS",
        );
    }
    if head_len >= 8 && MP4_FIRST_BOXES.iter().any(|kind| &head[4..8] == *kind) {
        return Ok(Sniffed::Mp4);
    }
    let shown: Vec<String> = head.iter().take(8).map(|b| format!("{b:02x}")).collect();
    Err(MediaError::UnknownFormat {
        what: format!(
            "the first bytes ({}) are neither an MP4 box nor a TS sync byte (0x47)",
            shown.join(" ")
        ),
    })
}

/// `ticks` of a clock running at `per_second` ticks per second, in ns,
/// rounded toward negative infinity; `None` if it does not fit an i64.
pub(crate) fn ticks_to_ns(ticks: i128, per_second: u32) -> Option<i64> {
    if per_second == 0 {
        return None;
    }
    let ns = (ticks.checked_mul(1_000_000_000)?).div_euclid(per_second as i128);
    i64::try_from(ns).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn boxed(kind: &[u8; 4], payload: &[u8]) -> Vec<u8> {
        let mut out = ((payload.len() + 8) as u32).to_be_bytes().to_vec();
        out.extend_from_slice(kind);
        out.extend_from_slice(payload);
        out
    }

    fn full(kind: &[u8; 4], words: &[u32]) -> Vec<u8> {
        let payload: Vec<u8> = std::iter::once(0u32)
            .chain(words.iter().copied())
            .flat_map(u32::to_be_bytes)
            .collect();
        boxed(kind, &payload)
    }

    /// Three H.264 samples (100, 50, 70 bytes) at 30 fps in one chunk
    /// starting at `chunk_offset`.
    fn tiny_moov(chunk_offset: u32) -> Vec<u8> {
        let mut hdlr = full(b"hdlr", &[0, u32::from_be_bytes(*b"vide"), 0, 0, 0]);
        hdlr.push(0);
        hdlr[3] += 1;
        let stsd = [full(b"stsd", &[1]), boxed(b"avc1", &[0; 78])].concat();
        let mut stsd_box = stsd.clone();
        stsd_box[3] = stsd.len() as u8;
        let stbl = boxed(
            b"stbl",
            &[
                stsd_box,
                full(b"stts", &[1, 3, 1]),
                full(b"stsc", &[1, 1, 3, 1]),
                full(b"stsz", &[0, 3, 100, 50, 70]),
                full(b"stco", &[1, chunk_offset]),
            ]
            .concat(),
        );
        let mdia = boxed(
            b"mdia",
            &[
                full(b"mdhd", &[0, 0, 30, 3, 0]),
                hdlr,
                boxed(b"minf", &stbl),
            ]
            .concat(),
        );
        let trak = boxed(b"trak", &[full(b"tkhd", &[0, 0, 1, 0, 0]), mdia].concat());
        boxed(b"moov", &[full(b"mvhd", &[0, 0, 1000, 100]), trak].concat())
    }

    fn tiny_mp4(moov_at_end: bool) -> Vec<u8> {
        let ftyp = boxed(b"ftyp", b"isom\0\0\0\0isom");
        let mdat = boxed(
            b"mdat",
            &[[1u8; 100].as_slice(), &[2; 50], &[3; 70]].concat(),
        );
        let moov_len = tiny_moov(0).len();
        if moov_at_end {
            let moov = tiny_moov(ftyp.len() as u32 + 8);
            [ftyp, mdat, moov].concat()
        } else {
            let moov = tiny_moov((ftyp.len() + moov_len) as u32 + 8);
            [ftyp, moov, mdat].concat()
        }
    }

    #[test]
    fn a_hand_built_mp4_has_its_curve() {
        let bytes = tiny_mp4(false);
        let prepared = prepare_bytes(&bytes).unwrap();
        assert_eq!(prepared.info.container, ContainerKind::Mp4Faststart);
        assert_eq!(prepared.info.video_frames, 3);
        assert_eq!(prepared.info.duration_ns, 100_000_000);
        assert_eq!(prepared.header_bytes, bytes.len() as u64 - 228);
        // The mdat header travels with the first sample.
        let frames: Vec<(u64, u64)> = prepared
            .frames
            .iter()
            .map(|f| (f.decode_time_ns, f.bytes))
            .collect();
        assert_eq!(frames, vec![(0, 108), (33_333_333, 50), (66_666_666, 70)]);
        // No 'stss': every sample is a sync sample.
        let keyframes: Vec<(u64, u64)> = prepared
            .keyframes
            .iter()
            .map(|k| (k.time_ns, k.byte_offset))
            .collect();
        let media = prepared.header_bytes + 8;
        assert_eq!(
            keyframes,
            vec![
                (0, media),
                (33_333_333, media + 100),
                (66_666_666, media + 150)
            ]
        );
        // Cut at the second sample: one chunk split, offsets into the new file.
        let header = &bytes[..prepared.header_bytes as usize];
        let cut = seek::mp4_seek(header, bytes.len() as u64, 40_000_000).unwrap();
        assert_eq!(cut.media_first_byte, media + 100);
        assert_eq!(cut.video_frames, 2);
        assert_eq!(cut.start_time_ns, 33_333_333);
        let mut file = cut.header.clone();
        file.extend_from_slice(&bytes[cut.media_first_byte as usize..]);
        let again = prepare_bytes(&file).unwrap();
        assert_eq!(again.info.video_frames, 2);
        assert_eq!(again.samples[0].stored_offset, cut.header.len() as u64);
        assert_eq!(again.samples[0].payload_bytes, 50);
        // The edit list counts in the movie's 1 ms ticks.
        assert_eq!(again.info.duration_ns, 66_000_000);
    }

    #[test]
    fn moov_at_end_rewrites_to_the_faststart_file_byte_for_byte() {
        let faststart = tiny_mp4(false);
        let at_end = tiny_mp4(true);
        assert_eq!(faststart.len(), at_end.len());
        let prepared = prepare_bytes(&at_end).unwrap();
        assert_eq!(prepared.info.container, ContainerKind::Mp4MoovAtEnd);
        let mut stored = Vec::new();
        let written = prepared
            .write_stored(&mut io::Cursor::new(&at_end), &mut stored)
            .unwrap();
        assert_eq!(written, prepared.stored_bytes);
        assert_eq!(stored, faststart);
        let direct = prepare_bytes(&faststart).unwrap();
        assert_eq!(direct.frames, prepared.frames);
        assert_eq!(direct.header_bytes, prepared.header_bytes);
        // A source that changed since prepare is refused.
        let err = prepared
            .write_stored(&mut io::Cursor::new(&at_end[..10]), &mut Vec::new())
            .unwrap_err();
        assert!(matches!(err, MediaError::SourceChanged { .. }), "{err}");
    }

    #[test]
    fn sniff_refuses_other_formats_with_their_names() {
        let cases: [(&[u8], &str); 5] = [
            (&[0x1a, 0x45, 0xdf, 0xa3, 1, 2, 3, 4], "Matroska"),
            (b"RIFF\0\0\0\0AVI LIST", "AVI"),
            (b"ID3\x04\0\0\0\0\0\0", "audio-only"),
            (
                b"hello world, this is text",
                "neither an MP4 box nor a TS sync byte",
            ),
            (&[0, 0, 1, 0xba, 0x44], "program streams"),
        ];
        for (bytes, expected) in cases {
            let message = probe_bytes(bytes).unwrap_err().to_string();
            assert!(message.contains(expected), "{message}");
        }
        assert!(matches!(probe_bytes(&[]), Err(MediaError::Empty)));
    }

    #[test]
    fn ticks_convert_exactly_and_refuse_overflow() {
        assert_eq!(ticks_to_ns(90_000, 90_000), Some(1_000_000_000));
        assert_eq!(ticks_to_ns(-1024, 15_360), Some(-66_666_667));
        assert_eq!(ticks_to_ns(1, 0), None);
        assert_eq!(ticks_to_ns(u64::MAX as i128, 1), None);
    }

    /// When a damaged file is accepted, its curve still adds up.
    fn check_no_panic(bytes: &[u8]) {
        if let Ok(p) = prepare_bytes(bytes) {
            let frame_bytes: u64 = p.frames.iter().map(|f| f.bytes).sum();
            assert_eq!(frame_bytes, p.stored_bytes - p.header_bytes);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1200)) {
            check_no_panic(&bytes);
        }

        #[test]
        fn arbitrary_boxes_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..1200)) {
            // Starts like an MP4 so the box parser, not the sniffer, sees it.
            let bytes = [boxed(b"ftyp", b"isom"), tail].concat();
            check_no_panic(&bytes);
        }

        #[test]
        fn arbitrary_packets_never_panic(
            mut bytes in proptest::collection::vec(any::<u8>(), 188..188 * 6),
        ) {
            let whole = bytes.len() / 188 * 188;
            bytes.truncate(whole);
            for packet in bytes.chunks_mut(188) {
                packet[0] = 0x47;
            }
            check_no_panic(&bytes);
        }

        #[test]
        fn damaged_hand_built_mp4s_never_panic(
            moov_at_end in any::<bool>(),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
            keep in any::<usize>(),
        ) {
            let mut bytes = tiny_mp4(moov_at_end);
            for (at, value) in flips {
                let len = bytes.len();
                bytes[at % len] = value;
            }
            bytes.truncate(keep % (bytes.len() + 1));
            check_no_panic(&bytes);
        }

        #[test]
        fn damaged_headers_never_panic_the_seek(
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
            keep in any::<usize>(),
            t_ns in 0u64..200_000_000,
        ) {
            let file = tiny_mp4(false);
            let header_bytes = file.len() - 228;
            let mut header = file[..header_bytes].to_vec();
            for (at, value) in flips {
                let len = header.len();
                header[at % len] = value;
            }
            header.truncate(keep % (header.len() + 1));
            let _ = seek::mp4_seek(&header, file.len() as u64, t_ns);
        }
    }
}
