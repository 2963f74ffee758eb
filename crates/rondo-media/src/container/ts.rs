//! MPEG-2 transport streams: packets, PSI tables, PES and audio frames.
//!
//! This module owns reading a TS into samples. The first pass finds the
//! first program's PMT (through the PAT, both CRC-checked) and with it the
//! elementary streams and their codecs. The second pass reads every 188-byte
//! packet in bounded chunks, checks sync bytes and continuity counters of the
//! audio and video PIDs, reassembles PES packets and reads their PTS/DTS
//! (33-bit, unwrapped across the wrap-around). A video PES is one sample; an
//! audio PES is split at ADTS / MPEG audio frame headers into frames (see
//! [`super::audio`]). A sample's stored range is the range of the transport
//! packets carrying it; packets of other PIDs (PAT, PMT, SDT, PCR-only,
//! null, unhandled streams) are overhead that the curve attributes to the
//! next sample to complete. A video PES is a keyframe when its first packet
//! has the random_access_indicator set or its first picture is an H.264
//! IDR, an H.265 IRAP (BLA/IDR/CRA) or an MPEG-2 I-picture ([`KeyScan`]).

use super::audio::{
    ADTS_HEADER_BYTES, AudioFrameHeader, HeaderProblem, MPEG_AUDIO_HEADER_BYTES, parse_adts,
    parse_mpeg_audio,
};
use super::curve::Unit;
use super::source::Source;
use super::{
    Analysis, AudioCodec, ContainerKind, Format, MediaError, MediaInfo, StoredPiece, TrackInfo,
    TrackKind, VideoCodec, ticks_to_ns,
};

/// PID of the service description table, which ffmpeg repeats with the
/// PAT and PMT.
const SDT_PID: u16 = 0x11;
/// Payload bytes of a video PES searched for its first picture before it is
/// taken as not a keyframe (x264's first SEI is under 1 KB).
const KEY_SCAN_LIMIT_BYTES: u64 = 64 << 10;

pub(crate) const PACKET_BYTES: u64 = 188;
/// Packets read per chunk (about 770 KB).
const CHUNK_PACKETS: u64 = 4096;
/// How far into the file the PAT and PMT must appear.
const PSI_SCAN_BYTES: u64 = 16 << 20;
/// PES timestamps run at 90 kHz and wrap at 2^33.
const PES_CLOCK_HZ: u32 = 90_000;
const TIMESTAMP_WRAP: i64 = 1 << 33;

fn corrupt(offset: u64, what: impl Into<String>) -> MediaError {
    MediaError::corrupt(Format::MpegTs, offset, what)
}

fn unsupported(what: impl Into<String>) -> MediaError {
    MediaError::unsupported(Format::MpegTs, what)
}

/// One transport packet's header fields and payload.
#[derive(Debug)]
struct Packet<'a> {
    offset: u64,
    pid: u16,
    payload_unit_start: bool,
    scrambling: u8,
    continuity_counter: u8,
    has_payload: bool,
    discontinuity: bool,
    /// The adaptation field's random_access_indicator.
    random_access: bool,
    payload: &'a [u8],
}

fn parse_packet(p: &[u8], offset: u64) -> Result<Packet<'_>, MediaError> {
    if p[0] != 0x47 {
        return Err(corrupt(
            offset,
            format!("lost sync: packet starts with 0x{:02x}, not 0x47", p[0]),
        ));
    }
    if p[1] & 0x80 != 0 {
        return Err(corrupt(
            offset,
            "transport_error_indicator is set: the packet is damaged",
        ));
    }
    let pid = (((p[1] & 0x1f) as u16) << 8) | p[2] as u16;
    let adaptation_control = (p[3] >> 4) & 0x03;
    if adaptation_control == 0 {
        return Err(corrupt(
            offset,
            format!("PID 0x{pid:04x}: reserved adaptation_field_control 00"),
        ));
    }
    let mut payload_start = 4usize;
    let mut discontinuity = false;
    let mut random_access = false;
    if adaptation_control & 0x2 != 0 {
        let length = p[4] as usize;
        if length > 183 {
            return Err(corrupt(
                offset,
                format!("PID 0x{pid:04x}: adaptation field of {length} bytes overruns the packet"),
            ));
        }
        discontinuity = length > 0 && p[5] & 0x80 != 0;
        random_access = length > 0 && p[5] & 0x40 != 0;
        payload_start = 5 + length;
    }
    let has_payload = adaptation_control & 0x1 != 0;
    Ok(Packet {
        offset,
        pid,
        payload_unit_start: p[1] & 0x40 != 0,
        scrambling: p[3] >> 6,
        continuity_counter: p[3] & 0x0f,
        has_payload,
        discontinuity,
        random_access,
        payload: if has_payload {
            &p[payload_start..]
        } else {
            &[]
        },
    })
}

/// Calls `visit` on every packet in `[0, end)` (whole packets only), reading
/// the file in bounded chunks; stops early when `visit` returns false.
fn for_each_packet(
    source: &(impl Source + ?Sized),
    end: u64,
    mut visit: impl FnMut(&Packet) -> Result<bool, MediaError>,
) -> Result<(), MediaError> {
    let packets = end / PACKET_BYTES;
    let mut buffer = vec![0u8; (CHUNK_PACKETS.min(packets) * PACKET_BYTES) as usize];
    let mut first = 0u64;
    while first < packets {
        let count = CHUNK_PACKETS.min(packets - first);
        let chunk = &mut buffer[..(count * PACKET_BYTES) as usize];
        source.read_at(first * PACKET_BYTES, chunk)?;
        for (i, raw) in chunk.chunks_exact(PACKET_BYTES as usize).enumerate() {
            let packet = parse_packet(raw, (first + i as u64) * PACKET_BYTES)?;
            if !visit(&packet)? {
                return Ok(());
            }
        }
        first += count;
    }
    Ok(())
}

/// CRC-32/MPEG-2 (polynomial 0x04C11DB7, no reflection); a section with
/// its CRC appended checks to 0.
fn crc32_mpeg2(data: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &byte in data {
        crc ^= (byte as u32) << 24;
        for _ in 0..8 {
            crc = if crc & 0x8000_0000 != 0 {
                (crc << 1) ^ 0x04c1_1db7
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// Reassembles one PSI section from packets of one PID.
#[derive(Default)]
struct SectionReader {
    data: Vec<u8>,
    start_offset: u64,
    active: bool,
}

impl SectionReader {
    /// Feeds a packet; returns the complete section and the offset of the
    /// packet it started in.
    fn feed(&mut self, packet: &Packet) -> Result<Option<(Vec<u8>, u64)>, MediaError> {
        let payload = packet.payload;
        if packet.payload_unit_start {
            let pointer = *payload.first().unwrap_or(&0) as usize;
            let start = 1 + pointer;
            if start > payload.len() {
                return Err(corrupt(
                    packet.offset,
                    format!(
                        "PID 0x{:04x}: PSI pointer_field {pointer} points past the packet",
                        packet.pid
                    ),
                ));
            }
            self.data = payload[start..].to_vec();
            self.start_offset = packet.offset;
            self.active = true;
        } else if self.active {
            self.data.extend_from_slice(payload);
        } else {
            return Ok(None);
        }
        if self.data.len() >= 3 {
            if self.data[0] == 0xff {
                // Stuffing where a table would start: no section here.
                self.active = false;
                return Ok(None);
            }
            let total = 3 + ((((self.data[1] & 0x0f) as usize) << 8) | self.data[2] as usize);
            if total > 1024 {
                return Err(corrupt(
                    self.start_offset,
                    format!("PSI section of {total} bytes exceeds the 1024-byte limit"),
                ));
            }
            if self.data.len() >= total {
                self.active = false;
                let mut section = std::mem::take(&mut self.data);
                section.truncate(total);
                return Ok(Some((section, self.start_offset)));
            }
        }
        Ok(None)
    }
}

/// Checks a section's table id, syntax and CRC; returns its body (after the
/// 8-byte long header, before the CRC).
fn section_body<'a>(
    section: &'a [u8],
    offset: u64,
    table_id: u8,
    name: &str,
) -> Result<&'a [u8], MediaError> {
    if section.len() < 12 {
        return Err(corrupt(
            offset,
            format!("{name} section of {} bytes is too short", section.len()),
        ));
    }
    if section[0] != table_id {
        return Err(corrupt(
            offset,
            format!(
                "{name} has table_id 0x{:02x}, expected 0x{table_id:02x}",
                section[0]
            ),
        ));
    }
    if crc32_mpeg2(section) != 0 {
        return Err(corrupt(
            offset,
            format!("{name} section fails its CRC-32 check"),
        ));
    }
    Ok(&section[8..section.len() - 4])
}

/// What an elementary stream is, from its PMT entry.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Role {
    Video(VideoCodec),
    Adts,
    MpegAudio,
    Other(String),
}

/// The streams of the first program, in PMT order.
fn classify(stream_type: u8, pid: u16, descriptors: &[u8]) -> Result<Role, MediaError> {
    let refuse_video = |name: &str| {
        Err(unsupported(format!(
            "PID 0x{pid:04x}: {name} video (stream type 0x{stream_type:02x}) is not supported \
             (H.264, H.265 and MPEG-2 are)"
        )))
    };
    let refuse_audio = |name: &str| {
        Err(unsupported(format!(
            "PID 0x{pid:04x}: {name} audio (stream type 0x{stream_type:02x}) is not supported \
             (AAC, MP3 and MP2 are)"
        )))
    };
    match stream_type {
        0x02 => Ok(Role::Video(VideoCodec::Mpeg2)),
        0x1b => Ok(Role::Video(VideoCodec::H264)),
        0x24 => Ok(Role::Video(VideoCodec::H265)),
        0x0f => Ok(Role::Adts),
        0x03 | 0x04 => Ok(Role::MpegAudio),
        0x01 => refuse_video("MPEG-1"),
        0x10 => refuse_video("MPEG-4 Part 2"),
        0x20 => refuse_video("H.264 MVC"),
        0x33 => refuse_video("H.266/VVC"),
        0x42 => refuse_video("AVS"),
        0xea => refuse_video("VC-1"),
        0x11 => refuse_audio("AAC in LATM"),
        0x81 => refuse_audio("AC-3"),
        0x87 => refuse_audio("E-AC-3"),
        0x82 | 0x85 | 0x8a => refuse_audio("DTS"),
        0x06 => {
            // Private PES: AC-3/E-AC-3/DTS in DVB carry a descriptor.
            let mut rest = descriptors;
            while rest.len() >= 2 {
                let (tag, len) = (rest[0], rest[1] as usize);
                match tag {
                    0x6a => return refuse_audio("AC-3"),
                    0x7a => return refuse_audio("E-AC-3"),
                    0x7b => return refuse_audio("DTS"),
                    _ => {}
                }
                rest = rest.get(2 + len..).unwrap_or(&[]);
            }
            Ok(Role::Other("private data (stream type 0x06)".to_string()))
        }
        other => Ok(Role::Other(format!("stream type 0x{other:02x}"))),
    }
}

/// Pass 1: the first program's elementary streams, as (PID, role).
fn find_streams(source: &(impl Source + ?Sized)) -> Result<(Vec<(u16, Role)>, u16), MediaError> {
    let scan_end = source.len().min(PSI_SCAN_BYTES);
    let mut pat = SectionReader::default();
    let mut pmt = SectionReader::default();
    let mut pmt_pid: Option<u16> = None;
    let mut streams: Option<Vec<(u16, Role)>> = None;
    for_each_packet(source, scan_end, |packet| {
        if packet.pid == 0 && pmt_pid.is_none() {
            if let Some((section, offset)) = pat.feed(packet)? {
                let body = section_body(&section, offset, 0x00, "PAT")?;
                pmt_pid = body
                    .chunks_exact(4)
                    .map(|e| {
                        let program = u16::from_be_bytes([e[0], e[1]]);
                        (program, (((e[2] & 0x1f) as u16) << 8) | e[3] as u16)
                    })
                    .find(|&(program, _)| program != 0)
                    .map(|(_, pid)| pid);
                if pmt_pid.is_none() {
                    return Err(corrupt(offset, "the PAT lists no program"));
                }
            }
        } else if Some(packet.pid) == pmt_pid
            && let Some((section, offset)) = pmt.feed(packet)?
        {
            let body = section_body(&section, offset, 0x02, "PMT")?;
            if body.len() < 4 {
                return Err(corrupt(offset, "PMT section is too short"));
            }
            let info_len =
                ((((body[2] & 0x0f) as usize) << 8) | body[3] as usize).min(body.len() - 4);
            let mut rest = &body[4 + info_len..];
            let mut found = Vec::new();
            while rest.len() >= 5 {
                let stream_type = rest[0];
                let pid = (((rest[1] & 0x1f) as u16) << 8) | rest[2] as u16;
                let es_info_len = (((rest[3] & 0x0f) as usize) << 8) | rest[4] as usize;
                let Some(descriptors) = rest.get(5..5 + es_info_len) else {
                    return Err(corrupt(
                        offset,
                        format!("PMT entry for PID 0x{pid:04x} overruns its section"),
                    ));
                };
                if found.iter().any(|(p, _)| *p == pid) {
                    return Err(corrupt(offset, format!("PMT lists PID 0x{pid:04x} twice")));
                }
                found.push((pid, classify(stream_type, pid, descriptors)?));
                rest = &rest[5 + es_info_len..];
            }
            streams = Some(found);
            return Ok(false);
        }
        Ok(true)
    })?;
    match (streams, pmt_pid) {
        (Some(streams), Some(pid)) => Ok((streams, pid)),
        (Some(_), None) => unreachable!("a PMT is read only once its PID is known"),
        (None, None) => Err(corrupt(
            0,
            format!("no program association table (PAT) in the first {scan_end} bytes"),
        )),
        (None, Some(pid)) => Err(corrupt(
            0,
            format!("no program map table (PMT, PID 0x{pid:04x}) in the first {scan_end} bytes"),
        )),
    }
}

/// Reads a 33-bit PES timestamp with its marker bits.
fn timestamp(b: &[u8], offset: u64, name: &str) -> Result<u64, MediaError> {
    if b[0] & 0x01 == 0 || b[2] & 0x01 == 0 || b[4] & 0x01 == 0 {
        return Err(corrupt(
            offset,
            format!("PES {name} has a cleared marker bit"),
        ));
    }
    Ok((((b[0] >> 1) & 0x07) as u64) << 30
        | (b[1] as u64) << 22
        | ((b[2] >> 1) as u64) << 15
        | (b[3] as u64) << 7
        | (b[4] >> 1) as u64)
}

/// The unwrapped value of 33-bit timestamp `raw` closest to `near`.
fn unwrap_timestamp(raw: u64, near: i64) -> i64 {
    let raw = raw as i64;
    let wraps = (near - raw + TIMESTAMP_WRAP / 2).div_euclid(TIMESTAMP_WRAP);
    raw + wraps * TIMESTAMP_WRAP
}

/// A PES header's fields.
struct PesHeader {
    /// Bytes of the payload the header occupies.
    header_bytes: usize,
    /// Payload bytes the PES declares after its header (None: unbounded).
    declared_bytes: Option<u64>,
    pts: Option<u64>,
    dts: Option<u64>,
}

fn parse_pes_header(payload: &[u8], packet: &Packet) -> Result<PesHeader, MediaError> {
    let pid = packet.pid;
    let offset = packet.offset;
    if payload.len() < 6 || payload[..3] != [0, 0, 1] {
        return Err(corrupt(
            offset,
            format!("PID 0x{pid:04x}: a new PES does not start with the 00 00 01 start code"),
        ));
    }
    let stream_id = payload[3];
    let packet_length = u16::from_be_bytes([payload[4], payload[5]]) as u64;
    let no_extension = matches!(
        stream_id,
        0xbc | 0xbe | 0xbf | 0xf0 | 0xf1 | 0xf2 | 0xf8 | 0xff
    );
    let (header_bytes, pts, dts) = if no_extension {
        (6usize, None, None)
    } else {
        if payload.len() < 9 || payload[6] & 0xc0 != 0x80 {
            return Err(corrupt(
                offset,
                format!("PID 0x{pid:04x}: PES header lacks its '10' marker bits"),
            ));
        }
        let flags = payload[7] >> 6;
        let header_bytes = 9 + payload[8] as usize;
        if header_bytes > payload.len() {
            return Err(unsupported(format!(
                "PID 0x{pid:04x}: the PES header at byte {offset} continues into the next packet"
            )));
        }
        let fields = &payload[9..header_bytes];
        let need = match flags {
            0b10 => 5,
            0b11 => 10,
            0b00 => 0,
            _ => {
                return Err(corrupt(
                    offset,
                    format!("PID 0x{pid:04x}: PES PTS_DTS_flags 01 is forbidden"),
                ));
            }
        };
        if fields.len() < need {
            return Err(corrupt(
                offset,
                format!("PID 0x{pid:04x}: PES header too short for its timestamps"),
            ));
        }
        let pts = (need >= 5)
            .then(|| timestamp(&fields[0..5], offset, "PTS"))
            .transpose()?;
        let dts = (need >= 10)
            .then(|| timestamp(&fields[5..10], offset, "DTS"))
            .transpose()?;
        (header_bytes, pts, dts)
    };
    let declared_bytes = if packet_length == 0 {
        None
    } else {
        let after_length = header_bytes as u64 - 6;
        Some(packet_length.checked_sub(after_length).ok_or_else(|| {
            corrupt(
                offset,
                format!(
                    "PID 0x{pid:04x}: PES_packet_length {packet_length} is shorter than its header"
                ),
            )
        })?)
    };
    Ok(PesHeader {
        header_bytes,
        declared_bytes,
        pts,
        dts,
    })
}

/// Decides whether a video PES starts with a keyframe from the start codes
/// of its elementary stream, fed packet by packet (a start code may straddle
/// two packets).
struct KeyScan {
    codec: VideoCodec,
    /// The last bytes of what was fed, not yet examined as a start code.
    tail: [u8; 8],
    tail_len: usize,
    scanned_bytes: u64,
    /// `Some` once the first picture (VCL NAL unit or picture header) is found.
    verdict: Option<bool>,
}

impl KeyScan {
    fn new(codec: VideoCodec) -> KeyScan {
        KeyScan {
            codec,
            tail: [0; 8],
            tail_len: 0,
            scanned_bytes: 0,
            verdict: None,
        }
    }

    /// Bytes from a start code's first byte needed to classify it.
    fn needed_bytes(&self) -> usize {
        match self.codec {
            // 00 00 01 00, temporal_reference, coding type.
            VideoCodec::Mpeg2 => 6,
            VideoCodec::H264 | VideoCodec::H265 => 4,
        }
    }

    /// What the start code `00 00 01` followed by `after` says: `Some` for a
    /// picture (keyframe or not), `None` for anything else.
    fn classify(&self, after: &[u8]) -> Option<bool> {
        match self.codec {
            VideoCodec::H264 => {
                let nal_type = after[0] & 0x1f;
                // 1-5 are coded slices; 5 is an IDR picture's.
                (1..=5).contains(&nal_type).then_some(nal_type == 5)
            }
            VideoCodec::H265 => {
                let nal_type = (after[0] >> 1) & 0x3f;
                // 0-31 are VCL; 16-23 are IRAP (BLA, IDR, CRA, reserved).
                (nal_type <= 31).then_some((16..=23).contains(&nal_type))
            }
            VideoCodec::Mpeg2 => {
                // picture_start_code; picture_coding_type 1 is I.
                (after[0] == 0x00).then_some((after[2] >> 3) & 0x07 == 1)
            }
        }
    }

    fn feed(&mut self, data: &[u8]) {
        if self.verdict.is_some() {
            return;
        }
        if self.scanned_bytes >= KEY_SCAN_LIMIT_BYTES {
            self.verdict = Some(false);
            return;
        }
        self.scanned_bytes += data.len() as u64;
        let mut buf = [0u8; 8 + PACKET_BYTES as usize];
        let data = &data[..data.len().min(PACKET_BYTES as usize)];
        buf[..self.tail_len].copy_from_slice(&self.tail[..self.tail_len]);
        buf[self.tail_len..self.tail_len + data.len()].copy_from_slice(data);
        let buf = &buf[..self.tail_len + data.len()];
        let need = self.needed_bytes();
        let mut i = 0;
        while i + need <= buf.len() {
            if buf[i] == 0 && buf[i + 1] == 0 && buf[i + 2] == 1 {
                if let Some(key) = self.classify(&buf[i + 3..i + need]) {
                    self.verdict = Some(key);
                    return;
                }
                i += 3;
            } else {
                i += 1;
            }
        }
        // Keep the positions not yet examined (fewer than `need` bytes).
        let start = i.min(buf.len());
        self.tail_len = buf.len() - start;
        self.tail[..self.tail_len].copy_from_slice(&buf[start..]);
    }
}

/// A PES being reassembled.
struct Pes {
    start_offset: u64,
    /// Where a player starting at this PES starts reading: its first packet,
    /// or the first of the PAT/PMT/SDT packets directly before it.
    entry_offset: u64,
    random_access: bool,
    key_scan: Option<KeyScan>,
    declared_bytes: Option<u64>,
    payload_bytes: u64,
    last_packet_end: u64,
    /// Unwrapped 90 kHz ticks.
    pts: Option<i64>,
    dts: Option<i64>,
}

/// An audio frame found in the elementary stream.
struct AudioFrame {
    stored_offset: u64,
    stored_end: u64,
    bytes: u64,
    time_ns: i64,
    duration_ns: i64,
}

/// Splits an audio elementary stream into frames across PES and packet
/// boundaries.
struct AudioSplitter {
    adts: bool,
    codec: Option<AudioCodec>,
    header: [u8; ADTS_HEADER_BYTES],
    header_len: usize,
    frame_start: u64,
    frame_pts: Option<i64>,
    frame_bytes: u64,
    frame_time_ns: i64,
    frame_duration_ns: i64,
    /// Bytes of the current frame still to come.
    remaining: u64,
    /// PTS (unwrapped ticks) of the latest PES, for the next frame to start.
    pending_pts: Option<i64>,
    /// (time of the clock's base, samples since, sample rate).
    clock: Option<(i64, u64, u32)>,
}

impl AudioSplitter {
    fn new(adts: bool) -> AudioSplitter {
        AudioSplitter {
            adts,
            codec: None,
            header: [0; ADTS_HEADER_BYTES],
            header_len: 0,
            frame_start: 0,
            frame_pts: None,
            frame_bytes: 0,
            frame_time_ns: 0,
            frame_duration_ns: 0,
            remaining: 0,
            pending_pts: None,
            clock: None,
        }
    }

    fn mid_frame(&self) -> bool {
        self.header_len > 0 || self.remaining > 0
    }

    fn feed(
        &mut self,
        mut data: &[u8],
        packet: &Packet,
        out: &mut Vec<AudioFrame>,
    ) -> Result<(), MediaError> {
        let packet_end = packet.offset + PACKET_BYTES;
        let pid = packet.pid;
        while !data.is_empty() {
            if self.remaining > 0 {
                let n = self.remaining.min(data.len() as u64);
                self.remaining -= n;
                data = &data[n as usize..];
                if self.remaining == 0 {
                    self.emit(packet_end, out);
                }
                continue;
            }
            if self.header_len == 0 {
                self.frame_start = packet.offset;
                self.frame_pts = self.pending_pts.take();
            }
            let need = if self.adts {
                ADTS_HEADER_BYTES
            } else {
                MPEG_AUDIO_HEADER_BYTES
            };
            let take = (need - self.header_len).min(data.len());
            self.header[self.header_len..self.header_len + take].copy_from_slice(&data[..take]);
            self.header_len += take;
            data = &data[take..];
            if self.header_len < need {
                break;
            }
            self.header_len = 0;
            let parsed = if self.adts {
                parse_adts(&self.header)
            } else {
                let mut h = [0u8; MPEG_AUDIO_HEADER_BYTES];
                h.copy_from_slice(&self.header[..MPEG_AUDIO_HEADER_BYTES]);
                parse_mpeg_audio(&h)
            };
            let header: AudioFrameHeader = parsed.map_err(|problem| match problem {
                HeaderProblem::Corrupt(what) => corrupt(
                    self.frame_start,
                    format!("PID 0x{pid:04x}: {what} where an audio frame should start"),
                ),
                HeaderProblem::Unsupported(what) => unsupported(format!("PID 0x{pid:04x}: {what}")),
            })?;
            if self.codec.is_some_and(|c| c != header.codec) {
                return Err(corrupt(
                    self.frame_start,
                    format!("PID 0x{pid:04x}: audio frames switch codec mid-stream"),
                ));
            }
            self.codec = Some(header.codec);
            let rate = header.sample_rate_hz;
            let time_ns = match (self.frame_pts, self.clock) {
                (Some(pts), _) => ticks_to_ns(pts as i128, PES_CLOCK_HZ).unwrap_or(0),
                (None, Some((base_ns, samples, clock_rate))) => {
                    base_ns + ticks_to_ns(samples as i128, clock_rate).unwrap_or(0)
                }
                (None, None) => {
                    return Err(corrupt(
                        self.frame_start,
                        format!("PID 0x{pid:04x}: audio frame before any PES timestamp"),
                    ));
                }
            };
            let samples_before = match self.clock {
                Some((_, samples, clock_rate))
                    if self.frame_pts.is_none() && clock_rate == rate =>
                {
                    samples
                }
                _ => {
                    self.clock = Some((time_ns, 0, rate));
                    0
                }
            };
            if let Some(clock) = &mut self.clock {
                clock.1 = samples_before + header.samples as u64;
            }
            self.frame_time_ns = time_ns;
            self.frame_duration_ns = ticks_to_ns(header.samples as i128, rate).unwrap_or(0);
            self.frame_bytes = header.frame_bytes as u64;
            self.remaining = (header.frame_bytes as u64).saturating_sub(need as u64);
            if self.remaining == 0 {
                self.emit(packet_end, out);
            }
        }
        Ok(())
    }

    fn emit(&mut self, packet_end: u64, out: &mut Vec<AudioFrame>) {
        out.push(AudioFrame {
            stored_offset: self.frame_start,
            stored_end: packet_end,
            bytes: self.frame_bytes,
            time_ns: self.frame_time_ns,
            duration_ns: self.frame_duration_ns,
        });
    }
}

/// Per-PID state of pass 2.
struct Stream {
    pid: u16,
    role: Role,
    track_index: usize,
    last_cc: Option<u8>,
    pes: Option<Pes>,
    audio: Option<AudioSplitter>,
    /// Last unwrapped timestamp, the reference for the next one.
    last_ticks: Option<i64>,
    samples: u64,
    payload_bytes: u64,
    /// Presentation span (ns).
    start_ns: i64,
    end_ns: i64,
    /// Video decode times (ticks), for the frame duration.
    video_dts: Vec<i64>,
    /// Video keyframes: (PTS in ns, entry offset).
    keyframes: Vec<(i64, u64)>,
}

impl Stream {
    fn unwrap(&mut self, raw: u64, global_reference: &mut Option<i64>) -> i64 {
        let near = self.last_ticks.or(*global_reference).unwrap_or(raw as i64);
        let ticks = unwrap_timestamp(raw, near);
        self.last_ticks = Some(ticks);
        global_reference.get_or_insert(ticks);
        ticks
    }

    /// Ends the current PES: checks its length and, for video, makes it a
    /// sample. `at_eof` tells a cut file from a corrupt one.
    fn finish_pes(&mut self, units: &mut Vec<Unit>, at_eof: Option<u64>) -> Result<(), MediaError> {
        let Some(pes) = self.pes.take() else {
            return Ok(());
        };
        let pid = self.pid;
        if let Some(declared) = pes.declared_bytes
            && pes.payload_bytes < declared
        {
            let what = format!(
                "PID 0x{pid:04x}: the PES starting at byte {} declares {declared} payload bytes \
                 but carries {}",
                pes.start_offset, pes.payload_bytes
            );
            return Err(match at_eof {
                Some(file_bytes) => MediaError::Truncated {
                    format: Format::MpegTs,
                    offset: pes.start_offset,
                    file_bytes,
                    what,
                },
                None => corrupt(pes.start_offset, what),
            });
        }
        if let Role::Video(_) = self.role {
            let Some(pts) = pes.pts else {
                return Err(corrupt(
                    pes.start_offset,
                    format!("PID 0x{pid:04x}: a video PES has no PTS"),
                ));
            };
            let dts = pes.dts.unwrap_or(pts);
            let overflow = || corrupt(pes.start_offset, "timestamp overflow");
            let decode_ns = ticks_to_ns(dts as i128, PES_CLOCK_HZ).ok_or_else(overflow)?;
            let pts_ns = ticks_to_ns(pts as i128, PES_CLOCK_HZ).ok_or_else(overflow)?;
            units.push(Unit {
                track_index: self.track_index,
                stored_offset: pes.start_offset,
                stored_end: pes.last_packet_end,
                payload_bytes: pes.payload_bytes,
                decode_ns,
            });
            self.samples += 1;
            self.payload_bytes += pes.payload_bytes;
            self.start_ns = self.start_ns.min(pts_ns);
            self.end_ns = self.end_ns.max(pts_ns);
            self.video_dts.push(dts);
            if pes.random_access || pes.key_scan.is_some_and(|k| k.verdict == Some(true)) {
                self.keyframes.push((pts_ns, pes.entry_offset));
            }
        }
        Ok(())
    }
}

pub(crate) fn analyze(source: &(impl Source + ?Sized)) -> Result<Analysis, MediaError> {
    let file_bytes = source.len();
    let partial_bytes = file_bytes % PACKET_BYTES;
    if partial_bytes != 0 {
        let offset = file_bytes - partial_bytes;
        return Err(MediaError::Truncated {
            format: Format::MpegTs,
            offset,
            file_bytes,
            what: format!(
                "the last packet, at byte {offset}, has {partial_bytes} of its 188 bytes"
            ),
        });
    }
    let (pmt_streams, pmt_pid) = find_streams(source)?;
    let mut streams: Vec<Stream> = pmt_streams
        .iter()
        .enumerate()
        .map(|(track_index, (pid, role))| Stream {
            pid: *pid,
            role: role.clone(),
            track_index,
            last_cc: None,
            pes: None,
            audio: match role {
                Role::Adts => Some(AudioSplitter::new(true)),
                Role::MpegAudio => Some(AudioSplitter::new(false)),
                _ => None,
            },
            last_ticks: None,
            samples: 0,
            payload_bytes: 0,
            start_ns: i64::MAX,
            end_ns: i64::MIN,
            video_dts: Vec::new(),
            keyframes: Vec::new(),
        })
        .collect();
    // PID → index in `streams`, for the streams rondo times.
    let mut by_pid = vec![u16::MAX; 0x2000];
    for (i, s) in streams.iter().enumerate() {
        if !matches!(s.role, Role::Other(_)) {
            by_pid[s.pid as usize] = i as u16;
        }
    }
    let mut units = Vec::new();
    let mut frames = Vec::new();
    let mut global_reference: Option<i64> = None;
    // First packet of the run of PAT/PMT/SDT packets just before this one.
    let mut psi_run_start: Option<u64> = None;

    for_each_packet(source, file_bytes, |packet| {
        if packet.pid == 0 || packet.pid == pmt_pid || packet.pid == SDT_PID {
            psi_run_start.get_or_insert(packet.offset);
            return Ok(true);
        }
        let entry_offset = psi_run_start.take().unwrap_or(packet.offset);
        let index = by_pid[packet.pid as usize];
        if index == u16::MAX {
            return Ok(true);
        }
        let stream = &mut streams[index as usize];
        let pid = packet.pid;
        if packet.scrambling != 0 {
            return Err(unsupported(format!(
                "PID 0x{pid:04x} is scrambled (packet at byte {})",
                packet.offset
            )));
        }
        if !packet.has_payload {
            return Ok(true);
        }
        if let Some(last) = stream.last_cc
            && !packet.discontinuity
        {
            if packet.continuity_counter == last {
                // A duplicate packet (allowed once): same payload again.
                return Ok(true);
            }
            if packet.continuity_counter != (last + 1) & 0x0f {
                return Err(corrupt(
                    packet.offset,
                    format!(
                        "PID 0x{pid:04x}: continuity counter jumps from {last} to {}: packets \
                         are missing",
                        packet.continuity_counter
                    ),
                ));
            }
        }
        stream.last_cc = Some(packet.continuity_counter);

        let data = if packet.payload_unit_start {
            stream.finish_pes(&mut units, None)?;
            let header = parse_pes_header(packet.payload, packet)?;
            let pts = header
                .pts
                .map(|raw| stream.unwrap(raw, &mut global_reference));
            let dts = header
                .dts
                .map(|raw| stream.unwrap(raw, &mut global_reference));
            if let (Some(splitter), Some(_)) = (&mut stream.audio, pts) {
                splitter.pending_pts = pts;
            }
            let key_scan = match stream.role {
                Role::Video(codec) => Some(KeyScan::new(codec)),
                _ => None,
            };
            stream.pes = Some(Pes {
                start_offset: packet.offset,
                entry_offset,
                random_access: packet.random_access,
                key_scan,
                declared_bytes: header.declared_bytes,
                payload_bytes: 0,
                last_packet_end: packet.offset + PACKET_BYTES,
                pts,
                dts,
            });
            &packet.payload[header.header_bytes..]
        } else {
            packet.payload
        };
        // Payload before the first PES start of a PID (a file cut
        // mid-PES) is overhead.
        let Some(pes) = &mut stream.pes else {
            return Ok(true);
        };
        pes.payload_bytes += data.len() as u64;
        pes.last_packet_end = packet.offset + PACKET_BYTES;
        if let Some(scan) = &mut pes.key_scan {
            scan.feed(data);
        }
        if let Some(declared) = pes.declared_bytes
            && pes.payload_bytes > declared
        {
            return Err(corrupt(
                packet.offset,
                format!(
                    "PID 0x{pid:04x}: the PES starting at byte {} declares {declared} payload \
                     bytes but carries more",
                    pes.start_offset
                ),
            ));
        }
        if let Some(splitter) = &mut stream.audio {
            let before = frames.len();
            splitter.feed(data, packet, &mut frames)?;
            for frame in &frames[before..] {
                units.push(Unit {
                    track_index: stream.track_index,
                    stored_offset: frame.stored_offset,
                    stored_end: frame.stored_end,
                    payload_bytes: frame.bytes,
                    decode_ns: frame.time_ns,
                });
                stream.samples += 1;
                stream.payload_bytes += frame.bytes;
                stream.start_ns = stream.start_ns.min(frame.time_ns);
                stream.end_ns = stream.end_ns.max(frame.time_ns + frame.duration_ns);
            }
            frames.clear();
        }
        Ok(true)
    })?;

    for stream in &mut streams {
        stream.finish_pes(&mut units, Some(file_bytes))?;
        if let Some(splitter) = &stream.audio
            && splitter.mid_frame()
        {
            return Err(MediaError::Truncated {
                format: Format::MpegTs,
                offset: splitter.frame_start,
                file_bytes,
                what: format!(
                    "PID 0x{:04x}: the audio frame starting in the packet at byte {} is cut off",
                    stream.pid, splitter.frame_start
                ),
            });
        }
    }

    let mut tracks = Vec::with_capacity(streams.len());
    let mut start_ns = i64::MAX;
    let mut end_ns = i64::MIN;
    for stream in &mut streams {
        let kind = match &stream.role {
            Role::Video(codec) => TrackKind::Video(*codec),
            Role::Adts => TrackKind::Audio(AudioCodec::Aac),
            Role::MpegAudio => match stream.audio.as_ref().and_then(|a| a.codec) {
                Some(codec) => TrackKind::Audio(codec),
                None => TrackKind::Other {
                    description: "MPEG audio stream without frames".to_string(),
                },
            },
            Role::Other(description) => TrackKind::Other {
                description: format!("{description}, carried as overhead"),
            },
        };
        if let Role::Video(_) = stream.role {
            // A video PES lasts one frame: the median decode-time step.
            let mut steps: Vec<i64> = stream
                .video_dts
                .windows(2)
                .map(|w| w[1] - w[0])
                .filter(|&d| d > 0)
                .collect();
            steps.sort_unstable();
            let step_ticks = steps.get(steps.len() / 2).copied().unwrap_or(0);
            stream.end_ns = stream
                .end_ns
                .saturating_add(ticks_to_ns(step_ticks as i128, PES_CLOCK_HZ).unwrap_or(0));
        }
        if stream.samples > 0 {
            start_ns = start_ns.min(stream.start_ns);
            end_ns = end_ns.max(stream.end_ns);
        }
        tracks.push(TrackInfo {
            id: stream.pid as u32,
            kind,
            samples: stream.samples,
            payload_bytes: stream.payload_bytes,
        });
    }
    let (video_codec, video_frames) = tracks
        .iter()
        .find_map(|t| match t.kind {
            TrackKind::Video(codec) => Some((codec, t.samples)),
            _ => None,
        })
        .ok_or_else(|| {
            unsupported("the program has no video stream; audio-only files are not supported")
        })?;
    if video_frames == 0 {
        return Err(corrupt(0, "the video stream carries no PES packets"));
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
    let raw_keyframes = streams
        .iter_mut()
        .find(|s| matches!(s.role, Role::Video(_)))
        .map(|s| std::mem::take(&mut s.keyframes))
        .unwrap_or_default();
    let keyframes = super::mp4::title_keyframes(raw_keyframes, start_ns);
    Ok(Analysis {
        info: MediaInfo {
            container: ContainerKind::MpegTs,
            content_type: ContainerKind::MpegTs.content_type(),
            duration_ns,
            video_codec,
            video_frames,
            audio_codec,
            file_bytes,
            tracks,
        },
        pieces: vec![StoredPiece::Source {
            source_offset: 0,
            bytes: file_bytes,
        }],
        header_bytes: 0,
        units,
        keyframes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(codec: VideoCodec, pieces: &[&[u8]]) -> Option<bool> {
        let mut k = KeyScan::new(codec);
        for p in pieces {
            k.feed(p);
        }
        k.verdict
    }

    #[test]
    fn key_scan_finds_the_first_picture_across_packets() {
        use VideoCodec::*;
        // AUD, SPS, then an IDR slice whose start code straddles two feeds.
        let aud_sps: &[u8] = &[0, 0, 0, 1, 0x09, 0xf0, 0, 0, 1, 0x67, 0x64, 0, 0];
        assert_eq!(scan(H264, &[aud_sps, &[1, 0x65, 0x88]]), Some(true));
        assert_eq!(scan(H264, &[aud_sps, &[1], &[0x41, 0x9a]]), Some(false));
        assert_eq!(scan(H264, &[aud_sps]), None);
        // H.265: CRA (21) and IDR_W_RADL (19) are IRAP, TRAIL_R (1) is not.
        assert_eq!(scan(H265, &[&[0, 0, 1, 21 << 1, 1]]), Some(true));
        assert_eq!(
            scan(H265, &[&[0, 0, 1, 0x40, 1, 0, 0, 1, 19 << 1]]),
            Some(true)
        );
        assert_eq!(scan(H265, &[&[0, 0, 1, 1 << 1, 1]]), Some(false));
        // MPEG-2: a sequence header, then a picture header of type I or P.
        let i_picture: &[u8] = &[0, 0, 1, 0xb3, 0x14, 0, 0, 1, 0x00, 0x00, 0x0f];
        assert_eq!(scan(Mpeg2, &[i_picture]), Some(true));
        assert_eq!(scan(Mpeg2, &[&i_picture[..9], &i_picture[9..]]), Some(true));
        assert_eq!(scan(Mpeg2, &[&[0, 0, 1, 0x00, 0x00, 0x17]]), Some(false));
        // No picture within the scan limit: not a keyframe.
        let mut k = KeyScan::new(H264);
        for _ in 0..KEY_SCAN_LIMIT_BYTES / 184 + 2 {
            k.feed(&[0xaa; 184]);
        }
        assert_eq!(k.verdict, Some(false));
    }

    #[test]
    fn crc_of_a_real_pat_checks_to_zero() {
        // ffmpeg's PAT: program 1 on PID 0x1000.
        let pat = [
            0x00, 0xb0, 0x0d, 0x00, 0x01, 0xc1, 0x00, 0x00, 0x00, 0x01, 0xf0, 0x00, 0x2a, 0xb1,
            0x04, 0xb2,
        ];
        assert_eq!(crc32_mpeg2(&pat), 0);
        let mut damaged = pat;
        damaged[9] ^= 0x04;
        assert_ne!(crc32_mpeg2(&damaged), 0);
    }

    #[test]
    fn timestamps_unwrap_across_the_33_bit_wrap() {
        let near_end = TIMESTAMP_WRAP - 1000;
        assert_eq!(unwrap_timestamp(500, near_end), TIMESTAMP_WRAP + 500);
        assert_eq!(unwrap_timestamp(TIMESTAMP_WRAP as u64 - 10, 20), -10);
        assert_eq!(unwrap_timestamp(126_000, 0), 126_000);
    }

    #[test]
    fn pes_timestamps_and_marker_bits() {
        // PTS 126000 coded with '0010' prefix.
        let pts: u64 = 126_000;
        let b = [
            0x21 | (((pts >> 30) as u8 & 0x07) << 1),
            (pts >> 22) as u8,
            (((pts >> 15) as u8) << 1) | 1,
            (pts >> 7) as u8,
            ((pts as u8) << 1) | 1,
        ];
        assert_eq!(timestamp(&b, 0, "PTS").unwrap(), pts);
        let mut bad = b;
        bad[2] &= 0xfe;
        assert!(timestamp(&bad, 0, "PTS").is_err());
    }

    fn packet(pid: u16, pusi: bool, cc: u8, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![
            0x47,
            ((pid >> 8) as u8) | if pusi { 0x40 } else { 0 },
            pid as u8,
        ];
        let stuffing = 184 - payload.len();
        if stuffing > 0 {
            p.push(0x30 | cc);
            p.push((stuffing - 1) as u8);
            if stuffing > 1 {
                p.push(0);
                p.extend(std::iter::repeat_n(0xff, stuffing - 2));
            }
        } else {
            p.push(0x10 | cc);
        }
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn packets_parse_and_damage_is_named() {
        let p = packet(0x100, true, 5, &[1, 2, 3]);
        let parsed = parse_packet(&p, 376).unwrap();
        assert_eq!(
            (
                parsed.pid,
                parsed.payload_unit_start,
                parsed.continuity_counter
            ),
            (0x100, true, 5)
        );
        assert_eq!(parsed.payload, &[1, 2, 3]);
        let mut lost = p.clone();
        lost[0] = 0x46;
        let err = parse_packet(&lost, 376).unwrap_err().to_string();
        assert!(
            err.contains("byte 376") && err.contains("lost sync"),
            "{err}"
        );
        let mut tei = p.clone();
        tei[1] |= 0x80;
        assert!(
            parse_packet(&tei, 0)
                .unwrap_err()
                .to_string()
                .contains("damaged")
        );
    }

    fn section(table_id: u8, body: &[u8]) -> Vec<u8> {
        let length = 5 + body.len() + 4;
        let mut s = vec![
            table_id,
            0xb0 | (length >> 8) as u8,
            length as u8,
            0,
            1,
            0xc1,
            0,
            0,
        ];
        s.extend_from_slice(body);
        let crc = crc32_mpeg2(&s);
        s.extend_from_slice(&crc.to_be_bytes());
        s
    }

    fn psi_packet(pid: u16, section: &[u8]) -> Vec<u8> {
        let mut payload = vec![0u8];
        payload.extend_from_slice(section);
        payload.resize(184, 0xff);
        let mut p = vec![0x47, 0x40 | (pid >> 8) as u8, pid as u8, 0x10];
        p.extend_from_slice(&payload);
        p
    }

    fn pes_packet(pid: u16, cc: u8, pts: u64, es: &[u8]) -> Vec<u8> {
        let ts = [
            0x21 | (((pts >> 30) as u8 & 0x07) << 1),
            (pts >> 22) as u8,
            (((pts >> 15) as u8) << 1) | 1,
            (pts >> 7) as u8,
            ((pts as u8) << 1) | 1,
        ];
        let mut pes = vec![0, 0, 1, 0xe0, 0, 0, 0x80, 0x80, 5];
        pes.extend_from_slice(&ts);
        pes.extend_from_slice(es);
        packet(pid, true, cc, &pes)
    }

    /// PAT, PMT with one H.264 stream on 0x100, then `frames` video PES.
    fn tiny_ts(frames: u8) -> Vec<u8> {
        let pat = section(0x00, &[0, 1, 0xf0, 0x00]);
        let pmt = section(
            0x02,
            &[0xe1, 0x00, 0xf0, 0x00, 0x1b, 0xe1, 0x00, 0xf0, 0x00],
        );
        let mut ts = psi_packet(0, &pat);
        ts.extend(psi_packet(0x1000, &pmt));
        for i in 0..frames {
            ts.extend(pes_packet(0x100, i & 0x0f, 3000 * i as u64, &[i; 100]));
            ts.extend(packet(0x1fff, false, 0, &[0xff; 184]));
        }
        ts
    }

    #[test]
    fn a_hand_built_stream_has_its_frames_and_overhead() {
        let ts = tiny_ts(4);
        let prepared = super::super::prepare_bytes(&ts).unwrap();
        assert_eq!(prepared.info.video_frames, 4);
        assert_eq!(prepared.info.video_codec, VideoCodec::H264);
        assert_eq!(prepared.info.duration_ns, 133_333_333);
        let times: Vec<u64> = prepared.frames.iter().map(|f| f.decode_time_ns).collect();
        assert_eq!(times, vec![0, 33_333_333, 66_666_666, 100_000_000]);
        // PAT+PMT+PES go to frame 0; each null packet to the next frame;
        // the last null packet trails.
        let bytes: Vec<u64> = prepared.frames.iter().map(|f| f.bytes).collect();
        assert_eq!(bytes, vec![3 * 188, 2 * 188, 2 * 188, 3 * 188]);
        assert_eq!(prepared.samples[0].payload_bytes, 100);
    }

    #[test]
    fn continuity_gaps_and_truncation_are_named() {
        let mut ts = tiny_ts(3);
        // Drop the second video packet (packet index 4): CC jumps 0 → 2.
        ts.drain(4 * 188..5 * 188);
        let err = super::super::prepare_bytes(&ts).unwrap_err().to_string();
        assert!(
            err.contains("continuity counter jumps from 0 to 2"),
            "{err}"
        );
        let ts = tiny_ts(3);
        let err = super::super::prepare_bytes(&ts[..ts.len() - 5]).unwrap_err();
        assert!(matches!(err, MediaError::Truncated { .. }), "{err}");
        assert!(err.to_string().contains("183 of its 188 bytes"), "{err}");
        // An MPEG-4 Part 2 stream is refused by name.
        let pmt = section(
            0x02,
            &[0xe1, 0x00, 0xf0, 0x00, 0x10, 0xe1, 0x00, 0xf0, 0x00],
        );
        let mut ts = psi_packet(0, &section(0x00, &[0, 1, 0xf0, 0x00]));
        ts.extend(psi_packet(0x1000, &pmt));
        let err = super::super::prepare_bytes(&ts).unwrap_err().to_string();
        assert!(err.contains("MPEG-4 Part 2"), "{err}");
    }
}
