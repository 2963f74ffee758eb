//! Audio frame headers: ADTS (AAC) and MPEG audio (MP2/MP3).
//!
//! An MPEG-TS audio PES usually carries several audio frames, and a frame
//! may straddle PES packets. Splitting the elementary stream at frame
//! headers gives every audio frame its own place on the consumption curve
//! (the same frames `ffprobe -show_packets` lists) and its own time: the PES
//! timestamp for the first frame starting in the PES, plus the durations of
//! the frames before it.

use super::AudioCodec;

/// Bytes of an ADTS header needed to know the frame's length.
pub(crate) const ADTS_HEADER_BYTES: usize = 7;
/// Bytes of an MPEG audio frame header.
pub(crate) const MPEG_AUDIO_HEADER_BYTES: usize = 4;

/// What an audio frame header says.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct AudioFrameHeader {
    pub codec: AudioCodec,
    /// The whole frame, header included.
    pub frame_bytes: u32,
    /// PCM samples per channel the frame decodes to.
    pub samples: u32,
    pub sample_rate_hz: u32,
}

/// Why a header was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HeaderProblem {
    Corrupt(String),
    Unsupported(String),
}

const ADTS_RATES_HZ: [u32; 13] = [
    96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350,
];

/// Parses the first [`ADTS_HEADER_BYTES`] of an ADTS frame.
pub(crate) fn parse_adts(h: &[u8; ADTS_HEADER_BYTES]) -> Result<AudioFrameHeader, HeaderProblem> {
    if h[0] != 0xff || h[1] & 0xf6 != 0xf0 {
        return Err(HeaderProblem::Corrupt(format!(
            "no ADTS sync word (found {:02x} {:02x})",
            h[0], h[1]
        )));
    }
    let protection_absent = h[1] & 1 == 1;
    let rate_index = ((h[2] >> 2) & 0x0f) as usize;
    let sample_rate_hz = *ADTS_RATES_HZ.get(rate_index).ok_or_else(|| {
        HeaderProblem::Corrupt(format!(
            "ADTS sampling-frequency index {rate_index} is reserved"
        ))
    })?;
    let frame_bytes = ((h[3] as u32 & 0x03) << 11) | ((h[4] as u32) << 3) | ((h[5] as u32) >> 5);
    let header_bytes = if protection_absent { 7 } else { 9 };
    if frame_bytes < header_bytes {
        return Err(HeaderProblem::Corrupt(format!(
            "ADTS frame length {frame_bytes} is shorter than its {header_bytes}-byte header"
        )));
    }
    let raw_blocks = (h[6] & 0x03) as u32 + 1;
    Ok(AudioFrameHeader {
        codec: AudioCodec::Aac,
        frame_bytes,
        samples: 1024 * raw_blocks,
        sample_rate_hz,
    })
}

// Bitrates by index (layer I is refused, so its tables are absent).
const KBPS_V1_L2: [u32; 15] = [
    0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384,
];
const KBPS_V1_L3: [u32; 15] = [
    0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320,
];
const KBPS_V2_L23: [u32; 15] = [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160];

/// Parses an MPEG-1/2/2.5 audio frame header (layers I–III).
pub(crate) fn parse_mpeg_audio(
    h: &[u8; MPEG_AUDIO_HEADER_BYTES],
) -> Result<AudioFrameHeader, HeaderProblem> {
    if h[0] != 0xff || h[1] & 0xe0 != 0xe0 {
        return Err(HeaderProblem::Corrupt(format!(
            "no MPEG audio sync word (found {:02x} {:02x})",
            h[0], h[1]
        )));
    }
    // 0: MPEG-2.5, 2: MPEG-2, 3: MPEG-1.
    let version = (h[1] >> 3) & 0x03;
    // 1: layer III, 2: layer II, 3: layer I.
    let layer = (h[1] >> 1) & 0x03;
    if version == 1 || layer == 0 {
        return Err(HeaderProblem::Corrupt(format!(
            "MPEG audio header uses reserved version/layer bits ({:02x})",
            h[1]
        )));
    }
    if layer == 3 {
        return Err(HeaderProblem::Unsupported(
            "MPEG audio layer I is not supported (MP2 and MP3 are)".to_string(),
        ));
    }
    let bitrate_index = (h[2] >> 4) as usize;
    if bitrate_index == 0 {
        return Err(HeaderProblem::Unsupported(
            "free-format MPEG audio is not supported".to_string(),
        ));
    }
    let table = match (version == 3, layer) {
        (true, 2) => &KBPS_V1_L2,
        (true, _) => &KBPS_V1_L3,
        (false, _) => &KBPS_V2_L23,
    };
    let kbps = *table.get(bitrate_index).ok_or_else(|| {
        HeaderProblem::Corrupt("MPEG audio bitrate index 15 is invalid".to_string())
    })?;
    let rate_index = ((h[2] >> 2) & 0x03) as usize;
    let base_rates_hz = [44100u32, 48000, 32000];
    let base_rate = *base_rates_hz.get(rate_index).ok_or_else(|| {
        HeaderProblem::Corrupt("MPEG audio sample-rate index 3 is reserved".to_string())
    })?;
    let sample_rate_hz = match version {
        3 => base_rate,
        2 => base_rate / 2,
        _ => base_rate / 4,
    };
    let padding = ((h[2] >> 1) & 1) as u32;
    let bits_per_s = kbps * 1000;
    let (codec, samples, frame_bytes) = match layer {
        2 => (
            AudioCodec::Mp2,
            1152,
            144 * bits_per_s / sample_rate_hz + padding,
        ),
        _ if version == 3 => (
            AudioCodec::Mp3,
            1152,
            144 * bits_per_s / sample_rate_hz + padding,
        ),
        _ => (
            AudioCodec::Mp3,
            576,
            72 * bits_per_s / sample_rate_hz + padding,
        ),
    };
    Ok(AudioFrameHeader {
        codec,
        frame_bytes,
        samples,
        sample_rate_hz,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adts_header_of_a_48k_aac_frame() {
        // ffmpeg's AAC-LC, 48 kHz, mono, 219-byte frame.
        let h = [0xff, 0xf1, 0x4c, 0x40, 0x1b, 0x7f, 0xfc];
        let header = parse_adts(&h).unwrap();
        assert_eq!(header.sample_rate_hz, 48000);
        assert_eq!(header.samples, 1024);
        assert_eq!(header.frame_bytes, 219);
        assert!(matches!(
            parse_adts(&[0xff, 0x00, 0, 0, 0, 0, 0]),
            Err(HeaderProblem::Corrupt(_))
        ));
    }

    #[test]
    fn mpeg_audio_frame_lengths() {
        // MPEG-1 layer III, 128 kbit/s, 44.1 kHz, no padding: 417 bytes.
        let mp3 = parse_mpeg_audio(&[0xff, 0xfb, 0x90, 0x00]).unwrap();
        assert_eq!(
            (mp3.codec, mp3.frame_bytes, mp3.samples, mp3.sample_rate_hz),
            (AudioCodec::Mp3, 417, 1152, 44100)
        );
        // MPEG-1 layer II, 384 kbit/s, 48 kHz: 1152 bytes.
        let mp2 = parse_mpeg_audio(&[0xff, 0xfd, 0xe4, 0x00]).unwrap();
        assert_eq!((mp2.codec, mp2.frame_bytes), (AudioCodec::Mp2, 1152));
        // MPEG-2 layer III, 64 kbit/s, 24 kHz: 576 samples, 192 bytes.
        let lsf = parse_mpeg_audio(&[0xff, 0xf3, 0x84, 0x00]).unwrap();
        assert_eq!(
            (lsf.samples, lsf.frame_bytes, lsf.sample_rate_hz),
            (576, 192, 24000)
        );
        assert!(matches!(
            parse_mpeg_audio(&[0xff, 0xff, 0x90, 0x00]),
            Err(HeaderProblem::Unsupported(_))
        ));
        assert!(matches!(
            parse_mpeg_audio(&[0xff, 0xfb, 0xf0, 0x00]),
            Err(HeaderProblem::Corrupt(_))
        ));
    }
}
