//! Starting an MP4 title at a time: the pseudo-streaming rewrite.
//!
//! This module owns [`mp4_seek`], a pure function that turns a stored MP4's
//! header (`ftyp`+`moov`, the title's first `header_bytes` stored bytes) and
//! a time into a new, self-contained header for "the same movie from the
//! video keyframe at or before that time", as nginx's `ngx_http_mp4_module`
//! does: the client receives the new header (`ftyp`, the cut `moov` and an
//! `mdat` box header) followed by the stored stream's bytes from
//! [`Mp4Seek::media_first_byte`] to its end, and every chunk offset of the
//! new `moov` points into those bytes. The media data is never touched.
//!
//! What is cut, per kept track: `stts`, `ctts`, `stss`, `stsc`, `stsz`
//! (`stz2` becomes `stsz`) and `stco`/`co64` (the first kept chunk is split
//! at the first kept sample, as nginx does); durations in `mvhd`, `tkhd` and
//! `mdhd`; and a new one-entry edit list per track that keeps audio and
//! video in step (the video starts at its keyframe, each audio track at the
//! sample playing at that instant, with `media_time` skipping the part
//! before it). Other sample-indexed boxes (`sdtp`, `sbgp`/`sgpd`, `subs`,
//! `cslg`, `stps`, `saiz`/`saio`) are dropped rather than cut, and tracks
//! that are neither audio nor video (subtitles, timecode) are dropped.
//! Fragmented MP4 is refused. Every value read is checked; malformed input
//! is an error, never a panic.

use thiserror::Error;

use super::mp4::{
    Child, FourCc, Movie, RawSample, Sizes, Trak, children, find, parse_header, parse_movie, show,
    sync_flags, table_samples,
};
use super::{Format, MediaError, TrackKind, ticks_to_ns};

/// The new header of a title started at a keyframe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mp4Seek {
    /// `ftyp`, the cut `moov` and an `mdat` box header whose payload is the
    /// stored stream's bytes from `media_first_byte` to its end.
    pub header: Vec<u8>,
    /// First stored byte sent after `header`.
    pub media_first_byte: u64,
    /// Presentation time of the video keyframe the new file starts at, on
    /// the title's timeline (the same as [`super::Keyframe::time_ns`]).
    pub start_time_ns: u64,
    /// Video samples in the new file (the keyframe and everything after).
    pub video_frames: u64,
    /// Presentation duration of the new file (its `mvhd` duration).
    pub duration_ns: u64,
}

impl Mp4Seek {
    /// Bytes of the whole new file: the header and the stored tail.
    pub fn total_bytes(&self, stored_bytes: u64) -> u64 {
        self.header.len() as u64 + (stored_bytes - self.media_first_byte)
    }
}

/// Why an MP4 cannot be started at a time.
#[derive(Debug, Error)]
pub enum SeekError {
    #[error("t={t_s:.3} s is at or past the end of the title ({duration_s:.3} s)")]
    PastEnd { t_s: f64, duration_s: f64 },
    #[error("{0}")]
    Media(#[from] MediaError),
}

fn corrupt(offset: u64, what: impl Into<String>) -> SeekError {
    SeekError::Media(MediaError::corrupt(Format::Mp4, offset, what))
}

fn unsupported(what: impl Into<String>) -> SeekError {
    SeekError::Media(MediaError::unsupported(Format::Mp4, what))
}

/// A track's presentation timeline: media ticks to title nanoseconds.
struct Timeline {
    media_time: i64,
    timescale: u32,
    empty_ns: i64,
}

impl Timeline {
    fn of(movie: &Movie, trak: &Trak) -> Result<Timeline, SeekError> {
        let empty_ns = ticks_to_ns(trak.edits.empty_movie_ticks as i128, movie.timescale)
            .ok_or_else(|| corrupt(trak.offset, "edit list duration overflows"))?;
        Ok(Timeline {
            media_time: trak.edits.media_time,
            timescale: trak.timescale,
            empty_ns,
        })
    }

    fn ns(&self, ticks: i64) -> Result<i64, SeekError> {
        ticks_to_ns(ticks as i128 - self.media_time as i128, self.timescale)
            .and_then(|ns| ns.checked_add(self.empty_ns))
            .ok_or_else(|| corrupt(0, "timestamps overflow"))
    }
}

/// One kept track: its box, samples and where the cut starts.
struct Cut<'a> {
    trak_box: Child<'a>,
    trak: &'a Trak,
    samples: Vec<RawSample>,
    first: usize,
    /// New edit list: leading empty edit (movie ticks), media_time (media
    /// ticks), segment duration (movie ticks).
    empty_movie_ticks: u64,
    media_time: u64,
    segment_movie_ticks: u64,
}

/// Cuts the stored MP4 whose header (`ftyp`+`moov`, the first
/// `header_bytes` stored bytes) is `header` and whose stored stream is
/// `stored_bytes` long so that it starts at the first video track's sync
/// sample presented at or before `time_ns` (the first sync sample when
/// `time_ns` precedes every one). `time_ns` is on the title's timeline
/// (edit lists applied, 0 = the title's start).
pub fn mp4_seek(header: &[u8], stored_bytes: u64, time_ns: u64) -> Result<Mp4Seek, SeekError> {
    // Top-level boxes of the header: ftyp (kept), moov, anything else (dropped).
    let mut ftyp: Option<&[u8]> = None;
    let mut moov: Option<Child> = None;
    let mut pos = 0u64;
    while pos < header.len() as u64 {
        let head = &header[pos as usize..header.len().min(pos as usize + 16)];
        let h = parse_header(head, pos, header.len() as u64, super::mp4::Parent::File)?;
        let bytes = &header[h.offset as usize..h.end() as usize];
        match &h.kind {
            b"ftyp" if ftyp.is_none() => ftyp = Some(bytes),
            b"moov" if moov.is_none() => {
                moov = Some(Child {
                    header: h,
                    payload: &bytes[h.header_bytes as usize..],
                })
            }
            b"moov" => return Err(corrupt(h.offset, "a second 'moov' box")),
            b"mdat" | b"moof" => {
                return Err(corrupt(
                    h.offset,
                    format!("the header holds a {} box", show(&h.kind)),
                ));
            }
            _ => {}
        }
        pos = h.end();
    }
    let moov = moov.ok_or_else(|| unsupported("the header holds no 'moov' box"))?;
    if stored_bytes < header.len() as u64 {
        return Err(corrupt(
            0,
            format!(
                "the stored stream ({stored_bytes} bytes) is shorter than its header ({} bytes)",
                header.len()
            ),
        ));
    }
    let movie = parse_movie(&moov, stored_bytes)?;
    if movie.has_mvex {
        return Err(unsupported(
            "a fragmented MP4 cannot be started at a time (its fragments are not rewritten)",
        ));
    }
    let moov_boxes = children(moov.payload, moov.header.payload_offset(), *b"moov")?;
    let trak_boxes: Vec<Child> = moov_boxes
        .iter()
        .filter(|c| &c.header.kind == b"trak")
        .copied()
        .collect();
    if trak_boxes.len() != movie.traks.len() {
        return Err(corrupt(
            moov.header.offset,
            "track boxes changed while parsed",
        ));
    }

    // The title's timeline, as `prepare` computes it.
    let mut per_track = Vec::with_capacity(movie.traks.len());
    let mut start_ns = i64::MAX;
    let mut end_ns = i64::MIN;
    for trak in &movie.traks {
        let samples = table_samples(trak.track_id, &trak.table)?;
        let line = Timeline::of(&movie, trak)?;
        let timed = matches!(trak.kind, TrackKind::Video(_) | TrackKind::Audio(_));
        if timed {
            if trak.edits.present && trak.edits.total_movie_ticks > 0 {
                start_ns = start_ns.min(0);
                let edit_end =
                    ticks_to_ns(trak.edits.total_movie_ticks as i128, movie.timescale)
                        .ok_or_else(|| corrupt(trak.offset, "edit list duration overflows"))?;
                end_ns = end_ns.max(edit_end);
            } else {
                for s in &samples {
                    let pts = s.dts.saturating_add(s.cto as i64);
                    start_ns = start_ns.min(line.ns(pts)?);
                    end_ns = end_ns.max(line.ns(pts.saturating_add(s.duration as i64))?);
                }
            }
        }
        per_track.push(samples);
    }
    let video = movie
        .traks
        .iter()
        .position(|t| matches!(t.kind, TrackKind::Video(_)))
        .ok_or_else(|| unsupported("no video track to find a keyframe in"))?;
    let duration_ns = (end_ns as i128 - start_ns as i128).max(0) as u64;
    if time_ns >= duration_ns {
        return Err(SeekError::PastEnd {
            t_s: time_ns as f64 / 1e9,
            duration_s: duration_ns as f64 / 1e9,
        });
    }
    let target_ns = (start_ns as i128 + time_ns as i128).min(i64::MAX as i128) as i64;

    // The video keyframe: the last sync sample presented at or before t.
    let video_trak = &movie.traks[video];
    let video_line = Timeline::of(&movie, video_trak)?;
    let flags = sync_flags(&video_trak.table);
    let mut keyframe: Option<(usize, i64)> = None;
    for (i, (s, &sync)) in per_track[video].iter().zip(&flags).enumerate() {
        if !sync {
            continue;
        }
        let pts_ns = video_line.ns(s.dts.saturating_add(s.cto as i64))?;
        match keyframe {
            None => keyframe = Some((i, pts_ns)),
            Some(_) if pts_ns <= target_ns => keyframe = Some((i, pts_ns)),
            Some(_) => break,
        }
    }
    let (key_index, key_pts_ns) =
        keyframe.ok_or_else(|| corrupt(video_trak.offset, "the video track has no sync sample"))?;

    // Where each kept track starts, and its new edit list.
    let mut cuts: Vec<Cut> = Vec::new();
    for (index, (trak, samples)) in movie.traks.iter().zip(per_track).enumerate() {
        let first = if index == video {
            key_index
        } else if matches!(trak.kind, TrackKind::Audio(_)) {
            // The sample playing at the keyframe's instant (or the first).
            let line = Timeline::of(&movie, trak)?;
            let mut first = 0;
            for (i, s) in samples.iter().enumerate() {
                if line.ns(s.dts.saturating_add(s.cto as i64))? <= key_pts_ns {
                    first = i;
                } else {
                    break;
                }
            }
            first
        } else {
            continue;
        };
        if first >= samples.len() {
            continue;
        }
        let line = Timeline::of(&movie, trak)?;
        let ts = trak.timescale as i128;
        let first_dts = samples[first].dts;
        // New presentation = old presentation − keyframe time: the media
        // time (ticks) at which the new presentation starts, minus any
        // empty edit, equals X below.
        let x_ns = key_pts_ns as i128 - line.empty_ns as i128
            + ((trak.edits.media_time as i128 - first_dts as i128) * 1_000_000_000).div_euclid(ts);
        let (empty_movie_ticks, media_time) = if x_ns >= 0 {
            (0u64, (x_ns * ts / 1_000_000_000) as u64)
        } else {
            (
                ((-x_ns) * movie.timescale as i128 / 1_000_000_000) as u64,
                0u64,
            )
        };
        // Where the track's presentation ends, in new media ticks.
        let mut media_end: i128 = 0;
        for s in &samples[first..] {
            let end = (s.dts - first_dts) as i128 + s.cto as i128 + s.duration as i128;
            media_end = media_end.max(end);
        }
        let mut segment_ns = ((media_end - media_time as i128).max(0) * 1_000_000_000) / ts;
        if trak.edits.present && trak.edits.total_movie_ticks > 0 {
            // The original edit list may stop the track before its media does.
            let edit_end_ns = ticks_to_ns(trak.edits.total_movie_ticks as i128, movie.timescale)
                .ok_or_else(|| corrupt(trak.offset, "edit list duration overflows"))?;
            let empty_ns = empty_movie_ticks as i128 * 1_000_000_000 / movie.timescale as i128;
            let left_ns = edit_end_ns as i128 - key_pts_ns as i128 - empty_ns;
            segment_ns = segment_ns.min(left_ns);
        }
        if segment_ns <= 0 {
            if index == video {
                return Err(corrupt(trak.offset, "the video track ends at its keyframe"));
            }
            continue;
        }
        let segment_movie_ticks = (segment_ns * movie.timescale as i128 / 1_000_000_000) as u64;
        cuts.push(Cut {
            trak_box: trak_boxes[index],
            trak,
            samples,
            first,
            empty_movie_ticks,
            media_time,
            segment_movie_ticks,
        });
    }
    let media_first_byte = cuts
        .iter()
        .flat_map(|c| c.samples[c.first..].iter().map(|s| s.offset))
        .min()
        .ok_or_else(|| corrupt(moov.header.offset, "no samples after the keyframe"))?;
    if media_first_byte < header.len() as u64 {
        return Err(corrupt(
            media_first_byte,
            "a sample after the keyframe lies inside the header",
        ));
    }
    if media_first_byte >= stored_bytes {
        return Err(corrupt(
            media_first_byte,
            "a sample after the keyframe lies past the end of the file",
        ));
    }
    let tail_bytes = stored_bytes - media_first_byte;
    let mdat_header_bytes: u64 = if tail_bytes + 8 > u32::MAX as u64 {
        16
    } else {
        8
    };
    let ftyp = ftyp.unwrap_or(&[]);

    // Offsets depend on the header's size, which depends on stco vs co64:
    // build with 32-bit offsets unless the tail is too long for them.
    let mut wide = false;
    loop {
        // Box sizes do not depend on offset values: size with base 0.
        let moov_len = build_moov(&movie, &moov_boxes, &cuts, 0, media_first_byte, wide)?.len();
        let base = ftyp.len() as u64 + moov_len as u64 + mdat_header_bytes;
        let last_offset = base + tail_bytes;
        if !wide && last_offset > u32::MAX as u64 {
            wide = true;
            continue;
        }
        let moov_out = build_moov(&movie, &moov_boxes, &cuts, base, media_first_byte, wide)?;
        let mut out = Vec::with_capacity(base as usize);
        out.extend_from_slice(ftyp);
        out.extend_from_slice(&moov_out);
        if mdat_header_bytes == 16 {
            out.extend_from_slice(&1u32.to_be_bytes());
            out.extend_from_slice(b"mdat");
            out.extend_from_slice(&(tail_bytes + 16).to_be_bytes());
        } else {
            out.extend_from_slice(&((tail_bytes + 8) as u32).to_be_bytes());
            out.extend_from_slice(b"mdat");
        }
        let video_cut = cuts
            .iter()
            .find(|c| matches!(c.trak.kind, TrackKind::Video(_)))
            .expect("the video track is kept");
        let movie_duration_ticks = movie_duration(&cuts);
        return Ok(Mp4Seek {
            header: out,
            media_first_byte,
            start_time_ns: (key_pts_ns as i128 - start_ns as i128).max(0) as u64,
            video_frames: (video_cut.samples.len() - video_cut.first) as u64,
            duration_ns: (movie_duration_ticks as u128 * 1_000_000_000 / movie.timescale as u128)
                as u64,
        });
    }
}

fn movie_duration(cuts: &[Cut]) -> u64 {
    cuts.iter()
        .map(|c| c.empty_movie_ticks + c.segment_movie_ticks)
        .max()
        .unwrap_or(0)
}

/// Appends a box of `kind` holding `payload`.
fn put_box(out: &mut Vec<u8>, kind: &FourCc, payload: &[u8]) {
    let size = payload.len() as u64 + 8;
    if size > u32::MAX as u64 {
        out.extend_from_slice(&1u32.to_be_bytes());
        out.extend_from_slice(kind);
        out.extend_from_slice(&(size + 8).to_be_bytes());
    } else {
        out.extend_from_slice(&(size as u32).to_be_bytes());
        out.extend_from_slice(kind);
    }
    out.extend_from_slice(payload);
}

/// Appends a full box (version, flags) of `kind` with `body`.
fn put_full_box(out: &mut Vec<u8>, kind: &FourCc, version: u8, body: &[u8]) {
    let mut payload = Vec::with_capacity(body.len() + 4);
    payload.extend_from_slice(&(u32::from(version) << 24).to_be_bytes());
    payload.extend_from_slice(body);
    put_box(out, kind, &payload);
}

/// A copy of a `mvhd`/`mdhd`/`tkhd` payload with its duration replaced.
/// `v0_at`/`v1_at`: the duration's offset in the payload for each version.
fn with_duration(
    b: &Child,
    v0_at: usize,
    v1_at: usize,
    duration: u64,
) -> Result<Vec<u8>, SeekError> {
    let mut payload = b.payload.to_vec();
    let version = payload.first().copied().unwrap_or(0);
    let short = || {
        corrupt(
            b.header.offset,
            format!("box {} is too short for its duration", show(&b.header.kind)),
        )
    };
    if version == 1 {
        let field = payload.get_mut(v1_at..v1_at + 8).ok_or_else(short)?;
        field.copy_from_slice(&duration.to_be_bytes());
    } else {
        let value = u32::try_from(duration).map_err(|_| {
            corrupt(
                b.header.offset,
                format!(
                    "{} duration {duration} does not fit 32 bits",
                    show(&b.header.kind)
                ),
            )
        })?;
        let field = payload.get_mut(v0_at..v0_at + 4).ok_or_else(short)?;
        field.copy_from_slice(&value.to_be_bytes());
    }
    Ok(payload)
}

fn build_moov(
    movie: &Movie,
    moov_boxes: &[Child],
    cuts: &[Cut],
    base: u64,
    media_first_byte: u64,
    wide: bool,
) -> Result<Vec<u8>, SeekError> {
    let mut payload = Vec::new();
    let mut trak_seen = 0usize;
    for b in moov_boxes {
        match &b.header.kind {
            b"mvhd" => {
                let body = with_duration(b, 16, 24, movie_duration(cuts))?;
                put_box(&mut payload, b"mvhd", &body);
            }
            b"trak" => {
                trak_seen += 1;
                if let Some(cut) = cuts
                    .iter()
                    .find(|c| c.trak_box.header.offset == b.header.offset)
                {
                    let trak = build_trak(movie, cut, base, media_first_byte, wide)?;
                    put_box(&mut payload, b"trak", &trak);
                }
            }
            // Offsets into the old file, or fragment defaults: not kept.
            b"mvex" | b"meta" => {}
            kind => put_box(&mut payload, kind, b.payload),
        }
    }
    debug_assert!(trak_seen >= cuts.len());
    let mut out = Vec::with_capacity(payload.len() + 16);
    put_box(&mut out, b"moov", &payload);
    Ok(out)
}

fn build_trak(
    movie: &Movie,
    cut: &Cut,
    base: u64,
    media_first_byte: u64,
    wide: bool,
) -> Result<Vec<u8>, SeekError> {
    let boxes = children(
        cut.trak_box.payload,
        cut.trak_box.header.payload_offset(),
        *b"trak",
    )?;
    let mut out = Vec::new();
    for b in &boxes {
        match &b.header.kind {
            b"tkhd" => {
                let duration = cut.empty_movie_ticks + cut.segment_movie_ticks;
                let body = with_duration(b, 20, 28, duration)?;
                put_box(&mut out, b"tkhd", &body);
                put_box(&mut out, b"edts", &edit_list(cut));
            }
            b"edts" => {}
            b"mdia" => {
                let mdia = build_mdia(movie, cut, b, base, media_first_byte, wide)?;
                put_box(&mut out, b"mdia", &mdia);
            }
            kind => put_box(&mut out, kind, b.payload),
        }
    }
    Ok(out)
}

/// The `edts` payload: an `elst` with an optional empty edit and one media
/// edit at rate 1.
fn edit_list(cut: &Cut) -> Vec<u8> {
    let wide = cut.empty_movie_ticks > u32::MAX as u64
        || cut.segment_movie_ticks > u32::MAX as u64
        || cut.media_time > i32::MAX as u64;
    let mut entries: Vec<(u64, i64)> = Vec::new();
    if cut.empty_movie_ticks > 0 {
        entries.push((cut.empty_movie_ticks, -1));
    }
    entries.push((cut.segment_movie_ticks, cut.media_time as i64));
    let mut body = (entries.len() as u32).to_be_bytes().to_vec();
    for (duration, media_time) in entries {
        if wide {
            body.extend_from_slice(&duration.to_be_bytes());
            body.extend_from_slice(&media_time.to_be_bytes());
        } else {
            body.extend_from_slice(&(duration as u32).to_be_bytes());
            body.extend_from_slice(&(media_time as i32).to_be_bytes());
        }
        body.extend_from_slice(&0x0001_0000u32.to_be_bytes());
    }
    let mut out = Vec::new();
    put_full_box(&mut out, b"elst", u8::from(wide), &body);
    out
}

fn build_mdia(
    movie: &Movie,
    cut: &Cut,
    mdia: &Child,
    base: u64,
    media_first_byte: u64,
    wide: bool,
) -> Result<Vec<u8>, SeekError> {
    let boxes = children(mdia.payload, mdia.header.payload_offset(), *b"mdia")?;
    let mut out = Vec::new();
    for b in &boxes {
        match &b.header.kind {
            b"mdhd" => {
                let media_ticks: u64 = cut.samples[cut.first..]
                    .iter()
                    .map(|s| s.duration as u64)
                    .sum();
                let body = with_duration(b, 16, 24, media_ticks)?;
                put_box(&mut out, b"mdhd", &body);
            }
            b"minf" => {
                let minf = children(b.payload, b.header.payload_offset(), *b"minf")?;
                let mut minf_out = Vec::new();
                for m in &minf {
                    if &m.header.kind == b"stbl" {
                        let stbl = build_stbl(movie, cut, m, base, media_first_byte, wide)?;
                        put_box(&mut minf_out, b"stbl", &stbl);
                    } else {
                        put_box(&mut minf_out, &m.header.kind, m.payload);
                    }
                }
                put_box(&mut out, b"minf", &minf_out);
            }
            kind => put_box(&mut out, kind, b.payload),
        }
    }
    Ok(out)
}

/// Run-length encodes `values` as (count, value) pairs.
fn runs<T: PartialEq + Copy>(values: impl Iterator<Item = T>) -> Vec<(u32, T)> {
    let mut out: Vec<(u32, T)> = Vec::new();
    for v in values {
        match out.last_mut() {
            Some((n, last)) if *last == v && *n < u32::MAX => *n += 1,
            _ => out.push((1, v)),
        }
    }
    out
}

fn build_stbl(
    _movie: &Movie,
    cut: &Cut,
    stbl: &Child,
    base: u64,
    media_first_byte: u64,
    wide: bool,
) -> Result<Vec<u8>, SeekError> {
    let boxes = children(stbl.payload, stbl.header.payload_offset(), *b"stbl")?;
    let stsd = find(&boxes, b"stsd")
        .ok_or_else(|| corrupt(stbl.header.offset, "'stbl' has no 'stsd' box"))?;
    let table = &cut.trak.table;
    let kept = &cut.samples[cut.first..];
    let mut out = Vec::new();
    put_box(&mut out, b"stsd", stsd.payload);

    // stts
    let stts = runs(kept.iter().map(|s| s.duration));
    let mut body = (stts.len() as u32).to_be_bytes().to_vec();
    for (n, delta) in stts {
        body.extend_from_slice(&n.to_be_bytes());
        body.extend_from_slice(&delta.to_be_bytes());
    }
    put_full_box(&mut out, b"stts", 0, &body);

    // ctts: version 1 when an offset is negative.
    if !table.ctts.is_empty() {
        let ctts = runs(kept.iter().map(|s| s.cto));
        let version = u8::from(kept.iter().any(|s| s.cto < 0));
        let mut body = (ctts.len() as u32).to_be_bytes().to_vec();
        for (n, offset) in ctts {
            body.extend_from_slice(&n.to_be_bytes());
            body.extend_from_slice(&offset.to_be_bytes());
        }
        put_full_box(&mut out, b"ctts", version, &body);
    }

    // stss: renumbered from the first kept sample.
    if let Some(numbers) = &table.sync_samples {
        let first = cut.first as u32 + 1;
        let kept_numbers: Vec<u32> = numbers
            .iter()
            .filter(|&&n| n >= first)
            .map(|&n| n - first + 1)
            .collect();
        let mut body = (kept_numbers.len() as u32).to_be_bytes().to_vec();
        for n in kept_numbers {
            body.extend_from_slice(&n.to_be_bytes());
        }
        put_full_box(&mut out, b"stss", 0, &body);
    }

    // Chunks: which chunk each sample is in, with its description index.
    let stsc_box = find(&boxes, b"stsc")
        .ok_or_else(|| corrupt(stbl.header.offset, "'stbl' has no 'stsc' box"))?;
    let descriptions = stsc_descriptions(&stsc_box)?;
    let chunk_count = table.chunk_offsets.len() as u64;
    // (samples, description index, first sample's offset) per new chunk.
    let mut chunks: Vec<(u32, u32, u64)> = Vec::new();
    let mut sample = 0usize;
    for (i, &(first_chunk, per_chunk)) in table.stsc.iter().enumerate() {
        let next_first = match table.stsc.get(i + 1) {
            Some(&(next, _)) => next as u64,
            None => chunk_count + 1,
        };
        let description = descriptions.get(i).copied().unwrap_or(1);
        for _chunk in first_chunk as u64..next_first {
            let end = sample + per_chunk as usize;
            if end > cut.first {
                let from = sample.max(cut.first);
                let in_chunk = end.min(cut.samples.len()).saturating_sub(from);
                if in_chunk > 0 {
                    let offset = cut.samples[from].offset;
                    chunks.push((in_chunk as u32, description, offset));
                }
            }
            sample = end;
            if sample >= cut.samples.len() {
                break;
            }
        }
        if sample >= cut.samples.len() {
            break;
        }
    }
    let placed: u64 = chunks.iter().map(|c| c.0 as u64).sum();
    if placed != kept.len() as u64 {
        return Err(corrupt(
            stsc_box.header.offset,
            format!(
                "track {}: 'stsc' places {placed} of the {} samples after the cut",
                cut.trak.track_id,
                kept.len()
            ),
        ));
    }

    // stsc: a new entry where samples per chunk or description change.
    let mut body = Vec::new();
    let mut entries = 0u32;
    let mut last: Option<(u32, u32)> = None;
    for (i, &(n, description, _)) in chunks.iter().enumerate() {
        if last != Some((n, description)) {
            body.extend_from_slice(&(i as u32 + 1).to_be_bytes());
            body.extend_from_slice(&n.to_be_bytes());
            body.extend_from_slice(&description.to_be_bytes());
            entries += 1;
            last = Some((n, description));
        }
    }
    let mut stsc_body = entries.to_be_bytes().to_vec();
    stsc_body.extend_from_slice(&body);
    put_full_box(&mut out, b"stsc", 0, &stsc_body);

    // stsz
    let mut body = Vec::new();
    match &table.sizes {
        Sizes::Constant { size, .. } => {
            body.extend_from_slice(&size.to_be_bytes());
            body.extend_from_slice(&(kept.len() as u32).to_be_bytes());
        }
        Sizes::Table(_) => {
            body.extend_from_slice(&0u32.to_be_bytes());
            body.extend_from_slice(&(kept.len() as u32).to_be_bytes());
            for s in kept {
                body.extend_from_slice(&s.size.to_be_bytes());
            }
        }
    }
    put_full_box(&mut out, b"stsz", 0, &body);

    // stco / co64, pointing into the new file.
    let mut body = (chunks.len() as u32).to_be_bytes().to_vec();
    for &(_, _, offset) in &chunks {
        let new_offset = offset
            .checked_sub(media_first_byte)
            .and_then(|o| o.checked_add(base))
            .ok_or_else(|| corrupt(offset, "a chunk lies before the first sent byte"))?;
        if wide {
            body.extend_from_slice(&new_offset.to_be_bytes());
        } else {
            let narrow = u32::try_from(new_offset)
                .map_err(|_| corrupt(offset, "a chunk offset does not fit 'stco'"))?;
            body.extend_from_slice(&narrow.to_be_bytes());
        }
    }
    put_full_box(&mut out, if wide { b"co64" } else { b"stco" }, 0, &body);
    Ok(out)
}

/// The sample_description_index of each `stsc` entry.
fn stsc_descriptions(stsc: &Child) -> Result<Vec<u32>, SeekError> {
    let mut f = super::mp4::Fields::of(stsc);
    f.full_header()?;
    let count = f.u32("entry_count")?;
    f.check_entries(count as u64, 12, "entries")?;
    let mut out = Vec::with_capacity(count as usize);
    for _ in 0..count {
        f.u32("first_chunk")?;
        f.u32("samples_per_chunk")?;
        out.push(f.u32("sample_description_index")?);
    }
    Ok(out)
}
