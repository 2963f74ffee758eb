//! MP4 (ISO base media file format): boxes, sample tables and fragments.
//!
//! This module owns reading an MP4 into samples: the top-level box walk
//! (which finds `ftyp`, `moov`, every `mdat` and `moof` without reading media
//! data), the `moov` sample tables (`stts`, `ctts`, `stsc`, `stsz`/`stz2`,
//! `stco`/`co64`, edit lists), fragment runs (`tfhd`, `tfdt`, `trun` with
//! `trex` defaults), codec identification from `stsd`, and the choice of
//! stored stream: the file itself when `moov` comes first, its faststart
//! rewrite (see [`super::faststart`]) when it does not. Every sample must lie
//! inside an `mdat` and no two samples may overlap, so that the curve can
//! account every byte once.

use super::curve::Unit;
use super::faststart;
use super::source::{Source, read_vec};
use super::{
    Analysis, AudioCodec, ContainerKind, Format, Keyframe, MediaError, MediaInfo, StoredPiece,
    TrackInfo, TrackKind, VideoCodec, ticks_to_ns,
};

/// Largest `moov` rondo reads into memory (a two-hour film's is tens of MB).
const MAX_MOOV_BYTES: u64 = 256 << 20;
/// Largest `moof` rondo reads into memory.
const MAX_MOOF_BYTES: u64 = 64 << 20;

pub(crate) type FourCc = [u8; 4];

/// A box type for messages: its characters, or hex when not printable.
pub(crate) fn show(kind: &FourCc) -> String {
    if kind.iter().all(|b| (0x20..0x7f).contains(b)) {
        format!("'{}'", String::from_utf8_lossy(kind))
    } else {
        format!(
            "0x{}",
            kind.iter().map(|b| format!("{b:02x}")).collect::<String>()
        )
    }
}

fn corrupt(offset: u64, what: impl Into<String>) -> MediaError {
    MediaError::corrupt(Format::Mp4, offset, what)
}

fn unsupported(what: impl Into<String>) -> MediaError {
    MediaError::unsupported(Format::Mp4, what)
}

/// A box's place in the file.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct BoxHeader {
    pub kind: FourCc,
    /// Absolute offset of the box's first byte.
    pub offset: u64,
    /// 8, or 16 with a 64-bit size.
    pub header_bytes: u64,
    /// The whole box, header included.
    pub size: u64,
}

impl BoxHeader {
    pub fn end(&self) -> u64 {
        self.offset + self.size
    }

    pub fn payload_offset(&self) -> u64 {
        self.offset + self.header_bytes
    }
}

/// Where a box sits, for messages and for the rules on overruns.
#[derive(Copy, Clone)]
pub(crate) enum Parent {
    /// The file: a box past its end means the file was cut.
    File,
    /// A box: overrunning it means the box tables are corrupt.
    Box(FourCc),
}

/// Parses the header of a box at `offset` given its first bytes (`head`,
/// up to 16, fewer only at the end of the parent) and where the parent ends.
pub(crate) fn parse_header(
    head: &[u8],
    offset: u64,
    parent_end: u64,
    parent: Parent,
) -> Result<BoxHeader, MediaError> {
    let overrun = |what: String| match parent {
        Parent::File => MediaError::Truncated {
            format: Format::Mp4,
            offset,
            file_bytes: parent_end,
            what,
        },
        Parent::Box(kind) => corrupt(
            offset,
            format!(
                "{what}, past the end of its parent {} at byte {parent_end}",
                show(&kind)
            ),
        ),
    };
    if head.len() < 8 {
        return Err(overrun(format!(
            "{} stray bytes at byte {offset} where a box header (8 bytes) should start",
            head.len()
        )));
    }
    let size32 = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    let kind: FourCc = [head[4], head[5], head[6], head[7]];
    if !kind.iter().all(|b| (0x20..0x7f).contains(b) || *b == 0xa9) {
        return Err(corrupt(
            offset,
            format!(
                "box type {} is not a valid four-character code",
                show(&kind)
            ),
        ));
    }
    let (header_bytes, size) = match size32 {
        1 => {
            if head.len() < 16 {
                return Err(overrun(format!(
                    "box {} at byte {offset} needs a 16-byte header with its 64-bit size",
                    show(&kind)
                )));
            }
            let mut large = [0u8; 8];
            large.copy_from_slice(&head[8..16]);
            (16, u64::from_be_bytes(large))
        }
        0 => (8, parent_end - offset),
        n => (8, n as u64),
    };
    if size < header_bytes {
        return Err(corrupt(
            offset,
            format!(
                "box {} declares {size} bytes, less than its {header_bytes}-byte header",
                show(&kind)
            ),
        ));
    }
    if offset.checked_add(size).is_none_or(|end| end > parent_end) {
        return Err(overrun(format!(
            "box {} at byte {offset} declares {size} bytes",
            show(&kind)
        )));
    }
    Ok(BoxHeader {
        kind,
        offset,
        header_bytes,
        size,
    })
}

/// A box held in memory: its header and its payload.
#[derive(Copy, Clone)]
pub(crate) struct Child<'a> {
    pub header: BoxHeader,
    pub payload: &'a [u8],
}

/// The boxes inside `payload`, which starts at absolute offset `base` and is
/// the payload of a box of type `parent`.
pub(crate) fn children<'a>(
    payload: &'a [u8],
    base: u64,
    parent: FourCc,
) -> Result<Vec<Child<'a>>, MediaError> {
    let parent_end = base + payload.len() as u64;
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < payload.len() {
        let head = &payload[pos..payload.len().min(pos + 16)];
        let header = parse_header(head, base + pos as u64, parent_end, Parent::Box(parent))?;
        // Fits: parse_header checked the box against the parent's end.
        let end = pos + header.size as usize;
        out.push(Child {
            header,
            payload: &payload[pos + header.header_bytes as usize..end],
        });
        pos = end;
    }
    Ok(out)
}

pub(crate) fn find<'a>(boxes: &[Child<'a>], kind: &FourCc) -> Option<Child<'a>> {
    boxes.iter().find(|c| &c.header.kind == kind).copied()
}

pub(crate) fn require<'a>(
    boxes: &[Child<'a>],
    kind: &FourCc,
    parent: &Child,
) -> Result<Child<'a>, MediaError> {
    find(boxes, kind).ok_or_else(|| {
        corrupt(
            parent.header.offset,
            format!(
                "box {} has no {} box",
                show(&parent.header.kind),
                show(kind)
            ),
        )
    })
}

/// Reads big-endian fields of one box, naming the box and field when it
/// runs short.
pub(crate) struct Fields<'a> {
    data: &'a [u8],
    pos: usize,
    base: u64,
    kind: FourCc,
}

impl<'a> Fields<'a> {
    pub fn of(child: &Child<'a>) -> Fields<'a> {
        Fields {
            data: child.payload,
            pos: 0,
            base: child.header.payload_offset(),
            kind: child.header.kind,
        }
    }

    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    pub fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    pub fn bytes(&mut self, n: usize, field: &str) -> Result<&'a [u8], MediaError> {
        if self.remaining() < n {
            return Err(corrupt(
                self.offset(),
                format!(
                    "box {} ends before its {field} ({n} bytes needed, {} left)",
                    show(&self.kind),
                    self.remaining()
                ),
            ));
        }
        let out = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    pub fn skip(&mut self, n: usize, field: &str) -> Result<(), MediaError> {
        self.bytes(n, field).map(|_| ())
    }

    pub fn u8(&mut self, field: &str) -> Result<u8, MediaError> {
        Ok(self.bytes(1, field)?[0])
    }

    pub fn u16(&mut self, field: &str) -> Result<u16, MediaError> {
        let b = self.bytes(2, field)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    pub fn u32(&mut self, field: &str) -> Result<u32, MediaError> {
        let b = self.bytes(4, field)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u64(&mut self, field: &str) -> Result<u64, MediaError> {
        let b = self.bytes(8, field)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    /// A FullBox's version and flags.
    pub fn full_header(&mut self) -> Result<(u8, u32), MediaError> {
        let word = self.u32("version and flags")?;
        Ok(((word >> 24) as u8, word & 0x00ff_ffff))
    }

    /// `count` entries of `entry_bytes` each must fit in what is left.
    pub fn check_entries(
        &self,
        count: u64,
        entry_bytes: u64,
        what: &str,
    ) -> Result<(), MediaError> {
        let room = self.remaining() as u64 / entry_bytes.max(1);
        if count > room {
            return Err(corrupt(
                self.offset(),
                format!(
                    "box {} declares {count} {what} but has room for {room}",
                    show(&self.kind)
                ),
            ));
        }
        Ok(())
    }
}

/// The leading edit-list information rondo uses.
#[derive(Copy, Clone, Debug, Default)]
pub(crate) struct Edits {
    pub(crate) present: bool,
    /// Leading empty edits (media_time −1), in movie ticks.
    pub(crate) empty_movie_ticks: u64,
    /// Media time at which presentation starts, in track ticks.
    pub(crate) media_time: i64,
    /// Sum of all edit segment durations, in movie ticks.
    pub(crate) total_movie_ticks: u64,
}

#[derive(Clone, Debug)]
pub(crate) enum Sizes {
    Constant { size: u32, count: u32 },
    Table(Vec<u32>),
}

impl Sizes {
    pub(crate) fn count(&self) -> u64 {
        match self {
            Sizes::Constant { count, .. } => *count as u64,
            Sizes::Table(t) => t.len() as u64,
        }
    }

    pub(crate) fn get(&self, i: usize) -> u32 {
        match self {
            Sizes::Constant { size, .. } => *size,
            Sizes::Table(t) => t[i],
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct SampleTable {
    pub(crate) stbl_offset: u64,
    pub(crate) stts: Vec<(u32, u32)>,
    pub(crate) ctts: Vec<(u32, i32)>,
    /// (first_chunk, samples_per_chunk).
    pub(crate) stsc: Vec<(u32, u32)>,
    pub(crate) sizes: Sizes,
    pub(crate) chunk_offsets: Vec<u64>,
    /// 1-based sync sample numbers from `stss`, ascending; `None` when the
    /// track has no `stss` (every sample is a sync sample).
    pub(crate) sync_samples: Option<Vec<u32>>,
}

#[derive(Clone, Debug)]
pub(crate) struct Trak {
    pub(crate) offset: u64,
    pub(crate) track_id: u32,
    pub(crate) timescale: u32,
    pub(crate) kind: TrackKind,
    pub(crate) edits: Edits,
    pub(crate) table: SampleTable,
}

#[derive(Copy, Clone, Debug, Default)]
pub(crate) struct Trex {
    track_id: u32,
    duration: u32,
    size: u32,
}

pub(crate) struct Movie {
    pub(crate) timescale: u32,
    pub(crate) traks: Vec<Trak>,
    pub(crate) trex: Vec<Trex>,
    pub(crate) has_mvex: bool,
}

/// One sample in source coordinates and track ticks.
#[derive(Copy, Clone, Debug)]
pub(crate) struct RawSample {
    pub(crate) offset: u64,
    pub(crate) size: u32,
    pub(crate) dts: i64,
    pub(crate) cto: i32,
    pub(crate) duration: u32,
}

pub(crate) fn parse_movie(moov: &Child, file_bytes: u64) -> Result<Movie, MediaError> {
    let boxes = children(moov.payload, moov.header.payload_offset(), *b"moov")?;
    if find(&boxes, b"cmov").is_some() {
        return Err(unsupported(
            "compressed movie header ('cmov') is not supported",
        ));
    }
    let mvhd = require(&boxes, b"mvhd", moov)?;
    let mut f = Fields::of(&mvhd);
    let (version, _) = f.full_header()?;
    f.skip(
        if version == 1 { 16 } else { 8 },
        "creation/modification times",
    )?;
    let timescale = f.u32("timescale")?;
    if timescale == 0 {
        return Err(corrupt(mvhd.header.offset, "'mvhd' timescale is 0"));
    }
    let mut traks = Vec::new();
    for trak in boxes.iter().filter(|c| &c.header.kind == b"trak") {
        let parsed = parse_trak(trak, file_bytes)?;
        if traks.iter().any(|t: &Trak| t.track_id == parsed.track_id) {
            return Err(corrupt(
                trak.header.offset,
                format!("two tracks have track_ID {}", parsed.track_id),
            ));
        }
        traks.push(parsed);
    }
    let mut trex = Vec::new();
    let mvex = find(&boxes, b"mvex");
    if let Some(mvex) = &mvex {
        for child in children(mvex.payload, mvex.header.payload_offset(), *b"mvex")? {
            if &child.header.kind == b"trex" {
                let mut f = Fields::of(&child);
                f.full_header()?;
                let track_id = f.u32("track_ID")?;
                f.u32("default_sample_description_index")?;
                let duration = f.u32("default_sample_duration")?;
                let size = f.u32("default_sample_size")?;
                trex.push(Trex {
                    track_id,
                    duration,
                    size,
                });
            }
        }
    }
    Ok(Movie {
        timescale,
        traks,
        trex,
        has_mvex: mvex.is_some(),
    })
}

fn parse_trak(trak: &Child, file_bytes: u64) -> Result<Trak, MediaError> {
    let boxes = children(trak.payload, trak.header.payload_offset(), *b"trak")?;
    let tkhd = require(&boxes, b"tkhd", trak)?;
    let mut f = Fields::of(&tkhd);
    let (version, _) = f.full_header()?;
    f.skip(
        if version == 1 { 16 } else { 8 },
        "creation/modification times",
    )?;
    let track_id = f.u32("track_ID")?;

    let edits = match find(&boxes, b"edts") {
        Some(edts) => {
            let inner = children(edts.payload, edts.header.payload_offset(), *b"edts")?;
            match find(&inner, b"elst") {
                Some(elst) => parse_elst(&elst)?,
                None => Edits::default(),
            }
        }
        None => Edits::default(),
    };

    let mdia_box = require(&boxes, b"mdia", trak)?;
    let mdia = children(mdia_box.payload, mdia_box.header.payload_offset(), *b"mdia")?;
    let mdhd = require(&mdia, b"mdhd", &mdia_box)?;
    let mut f = Fields::of(&mdhd);
    let (version, _) = f.full_header()?;
    f.skip(
        if version == 1 { 16 } else { 8 },
        "creation/modification times",
    )?;
    let timescale = f.u32("timescale")?;
    if timescale == 0 {
        return Err(corrupt(
            mdhd.header.offset,
            format!("track {track_id}: 'mdhd' timescale is 0"),
        ));
    }
    let hdlr = require(&mdia, b"hdlr", &mdia_box)?;
    let mut f = Fields::of(&hdlr);
    f.full_header()?;
    f.u32("pre_defined")?;
    let mut handler = [0u8; 4];
    handler.copy_from_slice(f.bytes(4, "handler_type")?);

    let minf_box = require(&mdia, b"minf", &mdia_box)?;
    let minf = children(minf_box.payload, minf_box.header.payload_offset(), *b"minf")?;
    let stbl_box = require(&minf, b"stbl", &minf_box)?;
    let stbl = children(stbl_box.payload, stbl_box.header.payload_offset(), *b"stbl")?;
    let stsd = require(&stbl, b"stsd", &stbl_box)?;
    let kind = classify(track_id, &handler, &stsd)?;
    let table = parse_sample_table(track_id, &stbl_box, &stbl, file_bytes)?;
    Ok(Trak {
        offset: trak.header.offset,
        track_id,
        timescale,
        kind,
        edits,
        table,
    })
}

fn parse_elst(elst: &Child) -> Result<Edits, MediaError> {
    let mut f = Fields::of(elst);
    let (version, _) = f.full_header()?;
    let count = f.u32("entry_count")?;
    let entry_bytes = if version == 1 { 20 } else { 12 };
    f.check_entries(count as u64, entry_bytes, "edits")?;
    let mut edits = Edits {
        present: true,
        ..Edits::default()
    };
    let mut media_found = false;
    for _ in 0..count {
        let (duration, media_time) = if version == 1 {
            (f.u64("segment_duration")?, f.u64("media_time")? as i64)
        } else {
            (
                f.u32("segment_duration")? as u64,
                f.u32("media_time")? as i32 as i64,
            )
        };
        f.u32("media_rate")?;
        edits.total_movie_ticks = edits.total_movie_ticks.saturating_add(duration);
        if media_found {
            continue;
        }
        if media_time == -1 {
            edits.empty_movie_ticks = edits.empty_movie_ticks.saturating_add(duration);
        } else if media_time >= 0 {
            edits.media_time = media_time;
            media_found = true;
        } else {
            return Err(corrupt(
                elst.header.offset,
                format!("edit list media_time {media_time} is negative"),
            ));
        }
    }
    Ok(edits)
}

/// What the first sample description says about the codec.
fn classify(track_id: u32, handler: &FourCc, stsd: &Child) -> Result<TrackKind, MediaError> {
    let mut f = Fields::of(stsd);
    f.full_header()?;
    let count = f.u32("entry_count")?;
    if count == 0 {
        return Err(corrupt(
            stsd.header.offset,
            format!("track {track_id}: 'stsd' has no sample description"),
        ));
    }
    let rest = &stsd.payload[8..];
    let entries = children(rest, stsd.header.payload_offset() + 8, *b"stsd")?;
    let entry = entries.first().ok_or_else(|| {
        corrupt(
            stsd.header.offset,
            format!("track {track_id}: 'stsd' declares {count} descriptions but holds none"),
        )
    })?;
    let fourcc = entry.header.kind;
    let name = show(&fourcc);
    match handler {
        b"vide" => match &fourcc {
            b"avc1" | b"avc3" => Ok(TrackKind::Video(VideoCodec::H264)),
            b"hvc1" | b"hev1" => Ok(TrackKind::Video(VideoCodec::H265)),
            b"mp4v" => match object_type(entry, 78)? {
                Some(0x60..=0x65) => Ok(TrackKind::Video(VideoCodec::Mpeg2)),
                Some(0x20) => Err(unsupported(format!(
                    "track {track_id}: MPEG-4 Part 2 video (mp4v, object type 0x20) is not \
                     supported (H.264, H.265 and MPEG-2 are)"
                ))),
                Some(oti) => Err(unsupported(format!(
                    "track {track_id}: video codec mp4v with object type 0x{oti:02x} is not \
                     supported (H.264, H.265 and MPEG-2 are)"
                ))),
                None => Err(corrupt(
                    entry.header.offset,
                    format!("track {track_id}: 'mp4v' description has no 'esds' box"),
                )),
            },
            b"encv" => Err(unsupported(format!(
                "track {track_id}: encrypted video ('encv') is not supported"
            ))),
            _ => Err(unsupported(format!(
                "track {track_id}: video codec {name} is not supported (H.264, H.265 and \
                 MPEG-2 are)"
            ))),
        },
        b"soun" => match &fourcc {
            b"mp4a" => {
                let version = entry
                    .payload
                    .get(8..10)
                    .map(|v| u16::from_be_bytes([v[0], v[1]]));
                // QuickTime sound descriptions v1/v2 are longer than ISO's.
                let skip = match version {
                    Some(1) => 28 + 16,
                    Some(2) => 28 + 36,
                    _ => 28,
                };
                match object_type(entry, skip)? {
                    Some(0x40 | 0x66 | 0x67 | 0x68) => Ok(TrackKind::Audio(AudioCodec::Aac)),
                    Some(0x69 | 0x6b) => Ok(TrackKind::Audio(AudioCodec::Mp3)),
                    Some(oti) => Err(unsupported(format!(
                        "track {track_id}: audio codec mp4a with object type 0x{oti:02x} is \
                         not supported (AAC and MP3 are)"
                    ))),
                    None => Err(corrupt(
                        entry.header.offset,
                        format!("track {track_id}: 'mp4a' description has no 'esds' box"),
                    )),
                }
            }
            b".mp3" => Ok(TrackKind::Audio(AudioCodec::Mp3)),
            b"enca" => Err(unsupported(format!(
                "track {track_id}: encrypted audio ('enca') is not supported"
            ))),
            _ => Err(unsupported(format!(
                "track {track_id}: audio codec {name} is not supported (AAC and MP3 are)"
            ))),
        },
        _ => Ok(TrackKind::Other {
            description: format!("{} track ({name})", show(handler)),
        }),
    }
}

/// The `objectTypeIndication` in the `esds` box of a sample entry whose
/// child boxes start `skip` bytes into its payload (also looked for inside a
/// QuickTime `wave` box).
pub(crate) fn object_type(entry: &Child, skip: usize) -> Result<Option<u8>, MediaError> {
    let Some(rest) = entry.payload.get(skip..) else {
        return Err(corrupt(
            entry.header.offset,
            format!(
                "sample description {} is too short",
                show(&entry.header.kind)
            ),
        ));
    };
    let base = entry.header.payload_offset() + skip as u64;
    let boxes = children(rest, base, entry.header.kind)?;
    let esds = match find(&boxes, b"esds") {
        Some(esds) => esds,
        None => match find(&boxes, b"wave") {
            Some(wave) => {
                let inner = children(wave.payload, wave.header.payload_offset(), *b"wave")?;
                match find(&inner, b"esds") {
                    Some(esds) => esds,
                    None => return Ok(None),
                }
            }
            None => return Ok(None),
        },
    };
    let mut f = Fields::of(&esds);
    f.full_header()?;
    let descriptor_len = |f: &mut Fields| -> Result<(), MediaError> {
        for _ in 0..4 {
            if f.u8("descriptor length")? & 0x80 == 0 {
                break;
            }
        }
        Ok(())
    };
    if f.u8("ES_Descriptor tag")? != 0x03 {
        return Err(corrupt(
            f.offset() - 1,
            "'esds' does not start with an ES_Descriptor",
        ));
    }
    descriptor_len(&mut f)?;
    f.u16("ES_ID")?;
    let flags = f.u8("ES_Descriptor flags")?;
    if flags & 0x80 != 0 {
        f.u16("dependsOn_ES_ID")?;
    }
    if flags & 0x40 != 0 {
        let url_len = f.u8("URL length")? as usize;
        f.skip(url_len, "URL")?;
    }
    if flags & 0x20 != 0 {
        f.u16("OCR_ES_Id")?;
    }
    if f.u8("DecoderConfigDescriptor tag")? != 0x04 {
        return Err(corrupt(
            f.offset() - 1,
            "'esds' has no DecoderConfigDescriptor",
        ));
    }
    descriptor_len(&mut f)?;
    Ok(Some(f.u8("objectTypeIndication")?))
}

fn parse_sample_table(
    track_id: u32,
    stbl_box: &Child,
    stbl: &[Child],
    file_bytes: u64,
) -> Result<SampleTable, MediaError> {
    let stts_box = require(stbl, b"stts", stbl_box)?;
    let mut f = Fields::of(&stts_box);
    f.full_header()?;
    let count = f.u32("entry_count")?;
    f.check_entries(count as u64, 8, "entries")?;
    let mut stts = Vec::with_capacity(count as usize);
    for _ in 0..count {
        stts.push((f.u32("sample_count")?, f.u32("sample_delta")?));
    }

    let mut ctts = Vec::new();
    if let Some(ctts_box) = find(stbl, b"ctts") {
        let mut f = Fields::of(&ctts_box);
        f.full_header()?;
        let count = f.u32("entry_count")?;
        f.check_entries(count as u64, 8, "entries")?;
        ctts.reserve(count as usize);
        for _ in 0..count {
            // Signed in both versions, as players read it.
            ctts.push((f.u32("sample_count")?, f.u32("sample_offset")? as i32));
        }
    }

    let stsc_box = require(stbl, b"stsc", stbl_box)?;
    let mut f = Fields::of(&stsc_box);
    f.full_header()?;
    let count = f.u32("entry_count")?;
    f.check_entries(count as u64, 12, "entries")?;
    let mut stsc = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let first_chunk = f.u32("first_chunk")?;
        let per_chunk = f.u32("samples_per_chunk")?;
        f.u32("sample_description_index")?;
        stsc.push((first_chunk, per_chunk));
    }

    let sizes = if let Some(stsz) = find(stbl, b"stsz") {
        let mut f = Fields::of(&stsz);
        f.full_header()?;
        let size = f.u32("sample_size")?;
        let count = f.u32("sample_count")?;
        if size != 0 {
            // No per-sample table bounds the count, so the samples must fit.
            if count as u64 * size as u64 > file_bytes {
                return Err(corrupt(
                    stsz.header.offset,
                    format!(
                        "track {track_id}: 'stsz' declares {count} samples of {size} bytes,                          more than the file holds"
                    ),
                ));
            }
            Sizes::Constant { size, count }
        } else {
            f.check_entries(count as u64, 4, "sample sizes")?;
            let mut table = Vec::with_capacity(count as usize);
            for _ in 0..count {
                table.push(f.u32("entry_size")?);
            }
            Sizes::Table(table)
        }
    } else if let Some(stz2) = find(stbl, b"stz2") {
        let mut f = Fields::of(&stz2);
        f.full_header()?;
        f.skip(3, "reserved")?;
        let field_bits = f.u8("field_size")?;
        let count = f.u32("sample_count")?;
        if !matches!(field_bits, 4 | 8 | 16) {
            return Err(corrupt(
                stz2.header.offset,
                format!("'stz2' field size {field_bits} is not 4, 8 or 16"),
            ));
        }
        let needed_bytes = (count as u64 * field_bits as u64).div_ceil(8);
        f.check_entries(needed_bytes, 1, "bytes of sample sizes")?;
        let packed = f.bytes(needed_bytes as usize, "sample sizes")?;
        let table = (0..count as usize)
            .map(|i| match field_bits {
                4 => ((packed[i / 2] >> if i % 2 == 0 { 4 } else { 0 }) & 0x0f) as u32,
                8 => packed[i] as u32,
                _ => u16::from_be_bytes([packed[2 * i], packed[2 * i + 1]]) as u32,
            })
            .collect();
        Sizes::Table(table)
    } else {
        return Err(corrupt(
            stbl_box.header.offset,
            format!("track {track_id}: 'stbl' has neither 'stsz' nor 'stz2'"),
        ));
    };
    if sizes.count() > file_bytes {
        return Err(corrupt(
            stbl_box.header.offset,
            format!(
                "track {track_id} declares {} samples, more than the file has bytes",
                sizes.count()
            ),
        ));
    }

    let chunk_offsets = if let Some(stco) = find(stbl, b"stco") {
        let mut f = Fields::of(&stco);
        f.full_header()?;
        let count = f.u32("entry_count")?;
        f.check_entries(count as u64, 4, "chunk offsets")?;
        (0..count)
            .map(|_| f.u32("chunk_offset").map(u64::from))
            .collect::<Result<Vec<_>, _>>()?
    } else if let Some(co64) = find(stbl, b"co64") {
        let mut f = Fields::of(&co64);
        f.full_header()?;
        let count = f.u32("entry_count")?;
        f.check_entries(count as u64, 8, "chunk offsets")?;
        (0..count)
            .map(|_| f.u64("chunk_offset"))
            .collect::<Result<Vec<_>, _>>()?
    } else {
        return Err(corrupt(
            stbl_box.header.offset,
            format!("track {track_id}: 'stbl' has neither 'stco' nor 'co64'"),
        ));
    };
    let sync_samples = match find(stbl, b"stss") {
        Some(stss) => {
            let mut f = Fields::of(&stss);
            f.full_header()?;
            let count = f.u32("entry_count")?;
            f.check_entries(count as u64, 4, "sync samples")?;
            let mut numbers = Vec::with_capacity(count as usize);
            for _ in 0..count {
                numbers.push(f.u32("sample_number")?);
            }
            // Players tolerate an unsorted table; numbers outside the
            // track (0, or past the last sample) name no sample.
            numbers.sort_unstable();
            numbers.dedup();
            numbers.retain(|&n| n >= 1 && n as u64 <= sizes.count());
            Some(numbers)
        }
        None => None,
    };
    Ok(SampleTable {
        stbl_offset: stbl_box.header.offset,
        stts,
        ctts,
        stsc,
        sizes,
        chunk_offsets,
        sync_samples,
    })
}

/// The samples of a `moov` sample table, in decode order.
pub(crate) fn table_samples(track_id: u32, t: &SampleTable) -> Result<Vec<RawSample>, MediaError> {
    let err = |what: String| corrupt(t.stbl_offset, format!("track {track_id}: {what}"));
    let count = t.sizes.count();
    let stts_total: u64 = t.stts.iter().map(|&(n, _)| n as u64).sum();
    if stts_total != count {
        return Err(err(format!(
            "'stts' times {stts_total} samples but the size table lists {count}"
        )));
    }
    let chunk_count = t.chunk_offsets.len() as u64;
    let mut samples = Vec::with_capacity(count as usize);

    // Sizes and offsets from stsc runs over chunks.
    for (i, &(first_chunk, per_chunk)) in t.stsc.iter().enumerate() {
        let next_first = match t.stsc.get(i + 1) {
            Some(&(next, _)) => next as u64,
            None => chunk_count + 1,
        };
        let first = first_chunk as u64;
        if first == 0 || first >= next_first || next_first > chunk_count + 1 {
            return Err(err(format!(
                "'stsc' entry {i} runs chunks {first}..{next_first} outside 1..={chunk_count} \
                 or out of order"
            )));
        }
        for chunk in first..next_first {
            let mut offset = t.chunk_offsets[(chunk - 1) as usize];
            for _ in 0..per_chunk {
                let index = samples.len();
                if index as u64 >= count {
                    return Err(err(format!(
                        "'stsc' places more samples in chunks than the {count} the size table \
                         lists"
                    )));
                }
                let size = t.sizes.get(index);
                samples.push(RawSample {
                    offset,
                    size,
                    dts: 0,
                    cto: 0,
                    duration: 0,
                });
                offset = offset
                    .checked_add(size as u64)
                    .ok_or_else(|| err(format!("sample {index} offset overflows 64 bits")))?;
            }
        }
    }
    if (samples.len() as u64) < count {
        return Err(err(format!(
            "'stsc'/'stco' place {} samples in chunks but the size table lists {count}",
            samples.len()
        )));
    }

    // Decode times from stts, composition offsets from ctts (a short ctts
    // leaves the rest at 0, as players do).
    let mut dts: i64 = 0;
    let mut index = 0usize;
    for &(n, delta) in &t.stts {
        for _ in 0..n {
            let sample = &mut samples[index];
            sample.dts = dts;
            sample.duration = delta;
            dts = dts
                .checked_add(delta as i64)
                .ok_or_else(|| err("decode times overflow".to_string()))?;
            index += 1;
        }
    }
    let mut index = 0usize;
    'ctts: for &(n, offset) in &t.ctts {
        for _ in 0..n {
            let Some(sample) = samples.get_mut(index) else {
                break 'ctts;
            };
            sample.cto = offset;
            index += 1;
        }
    }
    Ok(samples)
}

/// Per-track state carried across fragments.
#[derive(Copy, Clone, Debug, Default)]
struct FragmentCursor {
    /// Decode time where the next fragment starts if it has no `tfdt`.
    next_dts: i64,
}

/// Reads the samples of one `moof`, appending (track index, sample).
fn parse_moof(
    moof: &Child,
    movie: &Movie,
    cursors: &mut [FragmentCursor],
    sample_budget: &mut u64,
    out: &mut Vec<(usize, RawSample)>,
) -> Result<(), MediaError> {
    let moof_offset = moof.header.offset;
    let boxes = children(moof.payload, moof.header.payload_offset(), *b"moof")?;
    // Base offset for a traf that names none and is not moof-relative: the
    // end of the previous traf's data (ISO/IEC 14496-12 8.8.7.1).
    let mut previous_traf_end = moof_offset;
    for traf in boxes.iter().filter(|c| &c.header.kind == b"traf") {
        let inner = children(traf.payload, traf.header.payload_offset(), *b"traf")?;
        let tfhd = require(&inner, b"tfhd", traf)?;
        let mut f = Fields::of(&tfhd);
        let (_, flags) = f.full_header()?;
        let track_id = f.u32("track_ID")?;
        let track_index = movie
            .traks
            .iter()
            .position(|t| t.track_id == track_id)
            .ok_or_else(|| {
                corrupt(
                    tfhd.header.offset,
                    format!("'tfhd' names track {track_id}, which 'moov' does not have"),
                )
            })?;
        let trex = movie
            .trex
            .iter()
            .find(|t| t.track_id == track_id)
            .copied()
            .unwrap_or_default();
        let base = if flags & 0x1 != 0 {
            f.u64("base_data_offset")?
        } else if flags & 0x2_0000 != 0 {
            moof_offset
        } else {
            previous_traf_end
        };
        if flags & 0x2 != 0 {
            f.u32("sample_description_index")?;
        }
        let default_duration = if flags & 0x8 != 0 {
            f.u32("default_sample_duration")?
        } else {
            trex.duration
        };
        let default_size = if flags & 0x10 != 0 {
            f.u32("default_sample_size")?
        } else {
            trex.size
        };

        let mut dts = cursors[track_index].next_dts;
        if let Some(tfdt) = find(&inner, b"tfdt") {
            let mut f = Fields::of(&tfdt);
            let (version, _) = f.full_header()?;
            let base_time = if version == 1 {
                f.u64("baseMediaDecodeTime")?
            } else {
                f.u32("baseMediaDecodeTime")? as u64
            };
            dts = i64::try_from(base_time).map_err(|_| {
                corrupt(tfdt.header.offset, "'tfdt' decode time exceeds 2^63 ticks")
            })?;
        }

        let mut data_pos = base;
        for trun in inner.iter().filter(|c| &c.header.kind == b"trun") {
            let mut f = Fields::of(trun);
            let (_, flags) = f.full_header()?;
            let count = f.u32("sample_count")?;
            if flags & 0x1 != 0 {
                let data_offset = f.u32("data_offset")? as i32 as i64;
                data_pos = base.checked_add_signed(data_offset).ok_or_else(|| {
                    corrupt(
                        trun.header.offset,
                        "'trun' data offset points before the file",
                    )
                })?;
            }
            if flags & 0x4 != 0 {
                f.u32("first_sample_flags")?;
            }
            let per_sample_bytes = 4 * (flags & 0xf00).count_ones() as u64;
            if per_sample_bytes > 0 {
                f.check_entries(count as u64, per_sample_bytes, "samples")?;
            }
            if count as u64 > *sample_budget {
                return Err(corrupt(
                    trun.header.offset,
                    format!("'trun' declares {count} samples, more than the file has bytes"),
                ));
            }
            *sample_budget -= count as u64;
            for _ in 0..count {
                let duration = if flags & 0x100 != 0 {
                    f.u32("sample_duration")?
                } else {
                    default_duration
                };
                let size = if flags & 0x200 != 0 {
                    f.u32("sample_size")?
                } else {
                    default_size
                };
                if flags & 0x400 != 0 {
                    f.u32("sample_flags")?;
                }
                let cto = if flags & 0x800 != 0 {
                    f.u32("sample_composition_time_offset")? as i32
                } else {
                    0
                };
                out.push((
                    track_index,
                    RawSample {
                        offset: data_pos,
                        size,
                        dts,
                        cto,
                        duration,
                    },
                ));
                data_pos = data_pos
                    .checked_add(size as u64)
                    .ok_or_else(|| corrupt(trun.header.offset, "'trun' sample offsets overflow"))?;
                dts = dts
                    .checked_add(duration as i64)
                    .ok_or_else(|| corrupt(trun.header.offset, "'trun' decode times overflow"))?;
            }
        }
        cursors[track_index].next_dts = dts;
        previous_traf_end = data_pos;
    }
    Ok(())
}

/// The top-level boxes of the file.
fn walk_top_level(source: &(impl Source + ?Sized)) -> Result<Vec<BoxHeader>, MediaError> {
    let file_bytes = source.len();
    let mut boxes = Vec::new();
    let mut offset = 0u64;
    let mut head = [0u8; 16];
    while offset < file_bytes {
        let n = (file_bytes - offset).min(16) as usize;
        source.read_at(offset, &mut head[..n])?;
        let header = parse_header(&head[..n], offset, file_bytes, Parent::File)?;
        offset = header.end();
        boxes.push(header);
    }
    Ok(boxes)
}

fn read_box(
    source: &(impl Source + ?Sized),
    header: &BoxHeader,
    limit_bytes: u64,
) -> Result<Vec<u8>, MediaError> {
    if header.size > limit_bytes {
        return Err(unsupported(format!(
            "box {} at byte {} is {} bytes, more than the {} MiB rondo reads into memory",
            show(&header.kind),
            header.offset,
            header.size,
            limit_bytes >> 20
        )));
    }
    read_vec(source, header.offset, header.size as usize)
}

pub(crate) fn analyze(source: &(impl Source + ?Sized)) -> Result<Analysis, MediaError> {
    let file_bytes = source.len();
    let top = walk_top_level(source)?;
    let mut moovs = top.iter().filter(|b| &b.kind == b"moov");
    let moov_header = *moovs.next().ok_or_else(|| {
        let kinds: Vec<String> = top.iter().map(|b| show(&b.kind)).collect();
        unsupported(format!(
            "no 'moov' box (top-level boxes: {}); a fragment or a file cut before its index \
             cannot be served",
            kinds.join(", ")
        ))
    })?;
    if let Some(second) = moovs.next() {
        return Err(corrupt(second.offset, "a second 'moov' box"));
    }
    let moov_bytes = read_box(source, &moov_header, MAX_MOOV_BYTES)?;
    let moov = Child {
        header: moov_header,
        payload: &moov_bytes[moov_header.header_bytes as usize..],
    };
    let movie = parse_movie(&moov, file_bytes)?;

    // Source ranges of mdat payloads, in file order.
    let mdats: Vec<(u64, u64)> = top
        .iter()
        .filter(|b| &b.kind == b"mdat")
        .map(|b| (b.payload_offset(), b.end()))
        .collect();
    let moofs: Vec<&BoxHeader> = top.iter().filter(|b| &b.kind == b"moof").collect();
    let fragmented = movie.has_mvex || !moofs.is_empty();
    let first_media = top
        .iter()
        .find(|b| &b.kind == b"mdat" || &b.kind == b"moof")
        .map(|b| b.offset);

    // Samples, per track in decode order, in source coordinates.
    let mut per_track: Vec<Vec<RawSample>> = movie
        .traks
        .iter()
        .map(|t| table_samples(t.track_id, &t.table))
        .collect::<Result<_, _>>()?;
    if fragmented {
        let mut cursors: Vec<FragmentCursor> = per_track
            .iter()
            .map(|s| FragmentCursor {
                next_dts: s
                    .last()
                    .map_or(0, |l| l.dts.saturating_add(l.duration as i64)),
            })
            .collect();
        let mut sample_budget =
            file_bytes.saturating_sub(per_track.iter().map(|s| s.len() as u64).sum());
        let mut fragment_samples = Vec::new();
        for moof_header in &moofs {
            let bytes = read_box(source, moof_header, MAX_MOOF_BYTES)?;
            let moof = Child {
                header: **moof_header,
                payload: &bytes[moof_header.header_bytes as usize..],
            };
            parse_moof(
                &moof,
                &movie,
                &mut cursors,
                &mut sample_budget,
                &mut fragment_samples,
            )?;
        }
        for (track_index, sample) in fragment_samples {
            per_track[track_index].push(sample);
        }
    }
    check_placement(&movie, &per_track, &mdats)?;

    // Stored stream: the file, or its faststart rewrite.
    let moov_first = first_media.is_none_or(|media| moov_header.offset < media);
    let (container, pieces, header_bytes, rewrite) = if moov_first {
        let container = if fragmented {
            ContainerKind::Mp4Fragmented
        } else {
            ContainerKind::Mp4Faststart
        };
        let pieces = vec![StoredPiece::Source {
            source_offset: 0,
            bytes: file_bytes,
        }];
        (container, pieces, moov_header.end(), None)
    } else {
        if fragmented {
            return Err(unsupported(
                "a fragmented MP4 whose 'moov' follows its fragments cannot be rewritten \
                 (fragments address data by absolute offset)",
            ));
        }
        let insert_at = match top.first() {
            Some(first) if &first.kind == b"ftyp" => first.end(),
            _ => 0,
        };
        let rewritten = faststart::rewrite(&moov_bytes, &moov_header, insert_at)?;
        let pieces = faststart::pieces(&rewritten, file_bytes);
        let header_bytes = insert_at + rewritten.moov.len() as u64;
        (
            ContainerKind::Mp4MoovAtEnd,
            pieces,
            header_bytes,
            Some(rewritten),
        )
    };
    let to_stored = |offset: u64| match &rewrite {
        Some(r) => r.map(offset),
        None => Some(offset),
    };

    // Units, tracks and duration.
    let mut units = Vec::new();
    let mut tracks = Vec::with_capacity(movie.traks.len());
    let mut start_ns = i64::MAX;
    let mut end_ns = i64::MIN;
    let first_video = movie
        .traks
        .iter()
        .position(|t| matches!(t.kind, TrackKind::Video(_)));
    // (presentation time, stored offset) of the first video track's sync
    // samples from its `moov` table; shifted to the title's start below.
    let mut raw_keyframes: Vec<(i64, u64)> = Vec::new();
    for (track_index, (trak, samples)) in movie.traks.iter().zip(&per_track).enumerate() {
        let overflow = || {
            corrupt(
                trak.offset,
                format!("track {}: timestamps overflow", trak.track_id),
            )
        };
        let empty_ns = ticks_to_ns(trak.edits.empty_movie_ticks as i128, movie.timescale)
            .ok_or_else(overflow)?;
        let to_ns = |ticks: i64| -> Result<i64, MediaError> {
            ticks_to_ns(
                ticks as i128 - trak.edits.media_time as i128,
                trak.timescale,
            )
            .and_then(|ns| ns.checked_add(empty_ns))
            .ok_or_else(overflow)
        };
        let mut payload_bytes = 0u64;
        let timed = matches!(trak.kind, TrackKind::Video(_) | TrackKind::Audio(_));
        for sample in samples {
            let stored_offset = to_stored(sample.offset)
                .ok_or_else(|| corrupt(sample.offset, "a sample lies inside the 'moov' box"))?;
            payload_bytes += sample.size as u64;
            units.push(Unit {
                track_index,
                stored_offset,
                stored_end: stored_offset + sample.size as u64,
                payload_bytes: sample.size as u64,
                decode_ns: to_ns(sample.dts)?,
            });
            if timed && !(trak.edits.present && trak.edits.total_movie_ticks > 0) {
                let pts = sample.dts.saturating_add(sample.cto as i64);
                start_ns = start_ns.min(to_ns(pts)?);
                end_ns = end_ns.max(to_ns(pts.saturating_add(sample.duration as i64))?);
            }
        }
        if Some(track_index) == first_video && !fragmented {
            let is_sync = sync_flags(&trak.table);
            for (sample, sync) in samples.iter().zip(is_sync) {
                if sync {
                    let pts = sample.dts.saturating_add(sample.cto as i64);
                    let stored_offset = to_stored(sample.offset).ok_or_else(|| {
                        corrupt(sample.offset, "a sample lies inside the 'moov' box")
                    })?;
                    raw_keyframes.push((to_ns(pts)?, stored_offset));
                }
            }
        }
        if timed && trak.edits.present && trak.edits.total_movie_ticks > 0 {
            start_ns = start_ns.min(0);
            end_ns = end_ns.max(
                ticks_to_ns(trak.edits.total_movie_ticks as i128, movie.timescale)
                    .ok_or_else(overflow)?,
            );
        }
        tracks.push(TrackInfo {
            id: trak.track_id,
            kind: trak.kind.clone(),
            samples: samples.len() as u64,
            payload_bytes,
        });
    }
    let (video_codec, video_frames) = tracks
        .iter()
        .find_map(|t| match t.kind {
            TrackKind::Video(codec) => Some((codec, t.samples)),
            _ => None,
        })
        .ok_or_else(|| {
            unsupported("no video track; audio-only and data-only files are not supported")
        })?;
    if video_frames == 0 {
        return Err(corrupt(
            moov_header.offset,
            "the video track has no samples (neither in 'moov' nor in fragments)",
        ));
    }
    let audio_codec = tracks.iter().find_map(|t| match t.kind {
        TrackKind::Audio(codec) => Some(codec),
        _ => None,
    });
    let duration_ns = if end_ns > start_ns {
        (end_ns as i128 - start_ns as i128) as u64
    } else {
        0
    };
    let keyframes = title_keyframes(raw_keyframes, start_ns);
    Ok(Analysis {
        info: MediaInfo {
            container,
            content_type: container.content_type(),
            duration_ns,
            video_codec,
            video_frames,
            audio_codec,
            file_bytes,
            tracks,
        },
        pieces,
        header_bytes,
        units,
        keyframes,
    })
}

/// For each sample of a `moov` table, whether it is a sync sample.
pub(crate) fn sync_flags(table: &SampleTable) -> Vec<bool> {
    let count = table.sizes.count() as usize;
    match &table.sync_samples {
        None => vec![true; count],
        Some(numbers) => {
            let mut flags = vec![false; count];
            for &n in numbers {
                // In range: parse_sample_table dropped numbers outside it.
                flags[n as usize - 1] = true;
            }
            flags
        }
    }
}

/// Keyframes on the title's timeline: presentation times from `start_ns`
/// (before it: 0), sorted by time and made monotonic in byte offset (a
/// keyframe presented later but stored earlier is not a later start point).
pub(crate) fn title_keyframes(mut raw: Vec<(i64, u64)>, start_ns: i64) -> Vec<Keyframe> {
    raw.sort_by_key(|&(pts_ns, offset)| (pts_ns, offset));
    let mut out: Vec<Keyframe> = Vec::with_capacity(raw.len());
    for (pts_ns, byte_offset) in raw {
        let time_ns = (pts_ns as i128 - start_ns as i128).max(0) as u64;
        if out
            .last()
            .is_some_and(|last| byte_offset <= last.byte_offset)
        {
            continue;
        }
        out.push(Keyframe {
            time_ns,
            byte_offset,
        });
    }
    out
}

/// Every sample must lie inside an `mdat` payload, and no two may overlap.
fn check_placement(
    movie: &Movie,
    per_track: &[Vec<RawSample>],
    mdats: &[(u64, u64)],
) -> Result<(), MediaError> {
    let mut ranges: Vec<(u64, u64, usize)> = Vec::new();
    for (track_index, samples) in per_track.iter().enumerate() {
        let track_id = movie.traks[track_index].track_id;
        for (i, s) in samples.iter().enumerate() {
            let end = s.offset.saturating_add(s.size as u64);
            let inside = mdats.partition_point(|&(start, _)| start <= s.offset);
            let ok = inside > 0 && end <= mdats[inside - 1].1;
            if !ok {
                return Err(corrupt(
                    s.offset,
                    format!(
                        "track {track_id} sample {i} ({} bytes at byte {}) lies outside every \
                         'mdat' box",
                        s.size, s.offset
                    ),
                ));
            }
            ranges.push((s.offset, end, track_index));
        }
    }
    ranges.sort_unstable();
    for pair in ranges.windows(2) {
        if pair[1].0 < pair[0].1 {
            return Err(corrupt(
                pair[1].0,
                format!(
                    "samples overlap: track {} bytes {}..{} and track {} bytes {}..{}",
                    movie.traks[pair[0].2].track_id,
                    pair[0].0,
                    pair[0].1,
                    movie.traks[pair[1].2].track_id,
                    pair[1].0,
                    pair[1].1
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyframes_are_shifted_sorted_and_monotonic_in_bytes() {
        let raw = vec![(2_000, 500), (-100, 100), (1_000, 300), (1_500, 200)];
        let k: Vec<(u64, u64)> = title_keyframes(raw, -100)
            .iter()
            .map(|k| (k.time_ns, k.byte_offset))
            .collect();
        // (1_500, 200) is stored before the keyframe presented at 1_000.
        assert_eq!(k, vec![(0, 100), (1_100, 300), (2_100, 500)]);
    }

    #[test]
    fn header_sizes_and_overruns() {
        let b = [0, 0, 0, 16, b'f', b't', b'y', b'p'];
        let h = parse_header(&b, 0, 100, Parent::File).unwrap();
        assert_eq!((h.size, h.header_bytes, h.end()), (16, 8, 16));
        // Past the end of the file: truncated, with the box's name.
        let err = parse_header(&b, 90, 100, Parent::File).unwrap_err();
        assert!(matches!(err, MediaError::Truncated { .. }), "{err}");
        assert!(err.to_string().contains("'ftyp'"), "{err}");
        // Past the end of a parent: corrupt.
        let err = parse_header(&b, 90, 100, Parent::Box(*b"stbl")).unwrap_err();
        assert!(err.to_string().contains("parent 'stbl'"), "{err}");
        // 64-bit size and size 0 (to the end).
        let big = [0, 0, 0, 1, b'm', b'd', b'a', b't', 0, 0, 0, 0, 0, 0, 0, 40];
        let h = parse_header(&big, 10, 100, Parent::File).unwrap();
        assert_eq!((h.size, h.header_bytes), (40, 16));
        let to_end = [0, 0, 0, 0, b'm', b'd', b'a', b't'];
        assert_eq!(
            parse_header(&to_end, 10, 100, Parent::File).unwrap().size,
            90
        );
        let small = [0, 0, 0, 4, b'f', b'r', b'e', b'e'];
        assert!(parse_header(&small, 0, 100, Parent::File).is_err());
        let binary = [0, 0, 0, 8, 0, 1, 2, 3];
        let err = parse_header(&binary, 0, 100, Parent::File).unwrap_err();
        assert!(err.to_string().contains("four-character code"), "{err}");
    }

    #[test]
    fn fields_name_the_box_and_field_that_run_short() {
        let payload = [0u8; 6];
        let child = Child {
            header: BoxHeader {
                kind: *b"stsz",
                offset: 100,
                header_bytes: 8,
                size: 14,
            },
            payload: &payload,
        };
        let mut f = Fields::of(&child);
        f.full_header().unwrap();
        let err = f.u32("sample_count").unwrap_err().to_string();
        assert!(
            err.contains("'stsz'") && err.contains("sample_count"),
            "{err}"
        );
        assert!(err.contains("byte 112"), "{err}");
    }
}
