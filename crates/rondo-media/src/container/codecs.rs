//! The `codecs` parameter (RFC 6381) of an MP4's tracks, for a browser to ask
//! whether it can decode a title before it plays it.
//!
//! This module owns one question: given an MP4's header (`ftyp` + `moov`, as
//! the store caches it), which codec strings describe its first video and
//! first audio track, in the form `HTMLMediaElement.canPlayType` and
//! `MediaCapabilities` take (`avc1.64001e`, `hvc1.1.6.L93.B0`, `mp4a.40.2`).
//! It reads only the sample descriptions (`stsd`) and their configuration
//! boxes (`avcC`, `hvcC`, `esds`); anything it cannot read gives `None`,
//! never an error: the answer is advice to a player, not a check on the file.

use super::mp4::{Child, children, find, object_type};

/// The RFC 6381 codec strings of an MP4 header's first video and first audio
/// track.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mp4Codecs {
    /// `avc1.PPCCLL`, `hvc1.…`/`hev1.…`, `mp4v.6X`; `None` without video.
    pub video: Option<String>,
    /// `mp4a.40.2`, `mp4a.6B`, `mp3`; `None` without audio.
    pub audio: Option<String>,
}

impl Mp4Codecs {
    /// Both strings joined as a MIME `codecs` parameter's value.
    pub fn parameter(&self) -> String {
        [&self.video, &self.audio]
            .into_iter()
            .flatten()
            .cloned()
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The codec strings of the MP4 whose header (top-level boxes from the start
/// of the file, `moov` among them) is `header`; `None` if it has no `moov`
/// or no track it can describe.
pub fn mp4_codecs(header: &[u8]) -> Option<Mp4Codecs> {
    let top = children(header, 0, *b"file").ok()?;
    let moov = find(&top, b"moov")?;
    let boxes = children(moov.payload, moov.header.payload_offset(), *b"moov").ok()?;
    let mut codecs = Mp4Codecs {
        video: None,
        audio: None,
    };
    for trak in boxes.iter().filter(|c| &c.header.kind == b"trak") {
        let Some((handler, entry)) = first_sample_entry(trak) else {
            continue;
        };
        match &handler {
            b"vide" if codecs.video.is_none() => codecs.video = video_codec(&entry),
            b"soun" if codecs.audio.is_none() => codecs.audio = audio_codec(&entry),
            _ => {}
        }
    }
    (codecs.video.is_some() || codecs.audio.is_some()).then_some(codecs)
}

/// A track's handler type and its first sample description.
fn first_sample_entry<'a>(trak: &Child<'a>) -> Option<([u8; 4], Child<'a>)> {
    let inside = |b: &Child<'a>| children(b.payload, b.header.payload_offset(), b.header.kind).ok();
    let mdia = find(&inside(trak)?, b"mdia")?;
    let mdia_boxes = inside(&mdia)?;
    let hdlr = find(&mdia_boxes, b"hdlr")?;
    // version/flags (4), pre_defined (4), handler_type (4).
    let handler: [u8; 4] = hdlr.payload.get(8..12)?.try_into().ok()?;
    let minf = find(&mdia_boxes, b"minf")?;
    let stbl = find(&inside(&minf)?, b"stbl")?;
    let stsd = find(&inside(&stbl)?, b"stsd")?;
    // version/flags (4), entry_count (4), then the entries.
    let entries = children(
        stsd.payload.get(8..)?,
        stsd.header.payload_offset() + 8,
        *b"stsd",
    )
    .ok()?;
    Some((handler, *entries.first()?))
}

/// Child boxes of a sample entry whose own fields take `skip` bytes.
fn entry_boxes<'a>(entry: &Child<'a>, skip: usize) -> Option<Vec<Child<'a>>> {
    children(
        entry.payload.get(skip..)?,
        entry.header.payload_offset() + skip as u64,
        entry.header.kind,
    )
    .ok()
}

/// Bytes a visual sample entry's own fields take before its child boxes.
const VISUAL_ENTRY_BYTES: usize = 78;
/// Bytes an ISO audio sample entry's own fields take (version 0).
const AUDIO_ENTRY_BYTES: usize = 28;

fn video_codec(entry: &Child) -> Option<String> {
    let fourcc = entry.header.kind;
    let name = std::str::from_utf8(&fourcc).ok()?;
    match &fourcc {
        b"avc1" | b"avc3" => {
            let avcc = find(&entry_boxes(entry, VISUAL_ENTRY_BYTES)?, b"avcC")?;
            // configurationVersion, AVCProfileIndication, profile_compatibility,
            // AVCLevelIndication.
            let p = avcc.payload.get(1..4)?;
            Some(format!("{name}.{:02x}{:02x}{:02x}", p[0], p[1], p[2]))
        }
        b"hvc1" | b"hev1" => {
            let hvcc = find(&entry_boxes(entry, VISUAL_ENTRY_BYTES)?, b"hvcC")?;
            Some(format!("{name}.{}", hevc_parameters(hvcc.payload)?))
        }
        b"mp4v" => {
            let oti = object_type(entry, VISUAL_ENTRY_BYTES).ok()??;
            Some(format!("mp4v.{oti:02x}"))
        }
        _ => None,
    }
}

/// ISO/IEC 14496-15 Annex E: profile space and profile, compatibility flags
/// (bit-reversed, hex), tier and level, constraint bytes (trailing zeros
/// dropped).
fn hevc_parameters(hvcc: &[u8]) -> Option<String> {
    let first = *hvcc.get(1)?;
    let space = ["", "A", "B", "C"][usize::from(first >> 6)];
    let tier = if first & 0x20 != 0 { 'H' } else { 'L' };
    let profile = first & 0x1f;
    let compatibility = u32::from_be_bytes(hvcc.get(2..6)?.try_into().ok()?).reverse_bits();
    let constraints = hvcc.get(6..12)?;
    let level = *hvcc.get(12)?;
    let mut out = format!("{space}{profile}.{compatibility:x}.{tier}{level}");
    let kept = constraints
        .iter()
        .rposition(|b| *b != 0)
        .map_or(0, |i| i + 1);
    for byte in &constraints[..kept] {
        out.push_str(&format!(".{byte:X}"));
    }
    Some(out)
}

fn audio_codec(entry: &Child) -> Option<String> {
    match &entry.header.kind {
        b"mp4a" => {
            let version = entry
                .payload
                .get(8..10)
                .map(|v| u16::from_be_bytes([v[0], v[1]]));
            let skip = match version {
                Some(1) => AUDIO_ENTRY_BYTES + 16,
                Some(2) => AUDIO_ENTRY_BYTES + 36,
                _ => AUDIO_ENTRY_BYTES,
            };
            match object_type(entry, skip).ok()?? {
                // AAC: the audio object type is in the decoder-specific info;
                // LC (2) is what every AAC encoder writes by default and what
                // browsers take to mean "AAC".
                0x40 => Some("mp4a.40.2".to_string()),
                oti => Some(format!("mp4a.{oti:02X}")),
            }
        }
        b".mp3" => Some("mp3".to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hevc_main_profile_reads_as_browsers_expect() {
        // Main profile, main tier, level 3.1 (93), compatibility flag 1 and 2
        // set (0x60000000), progressive + frame-only constraint flags (0xB0).
        let mut hvcc = vec![1u8, 0x01, 0x60, 0, 0, 0, 0xB0, 0, 0, 0, 0, 0, 93];
        assert_eq!(hevc_parameters(&hvcc).unwrap(), "1.6.L93.B0");
        hvcc[1] = 0x21; // high tier
        assert_eq!(hevc_parameters(&hvcc).unwrap(), "1.6.H93.B0");
        assert_eq!(hevc_parameters(&hvcc[..5]), None);
    }

    #[test]
    fn garbage_gives_none() {
        assert_eq!(mp4_codecs(b""), None);
        assert_eq!(mp4_codecs(&[0u8; 64]), None);
        assert_eq!(mp4_codecs(b"\0\0\0\x08moov"), None);
    }
}
