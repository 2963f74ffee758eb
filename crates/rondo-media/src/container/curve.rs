//! The consumption curve: samples of all tracks, in stored-stream byte
//! order, each holding the bytes that arrive with it and the time the player
//! needs them.
//!
//! Both parsers hand over [`Unit`]s: a sample's stored range (for TS, the
//! range of the transport packets carrying it) and its decode time. The
//! stream is delivered in byte order, so a sample is available once every
//! byte up to its end has arrived; "bytes needed by time t" is therefore the
//! largest end offset of any sample decoded by t. Sorting units by end offset,
//! giving unit i the bytes since unit i−1's end (container overhead before a
//! sample travels with it) and the earliest decode time among itself and all
//! later units (a later-decoded sample ahead of an earlier one in the file is
//! needed when the earlier one is) yields a curve that is non-decreasing in
//! time, accounts every byte after the header exactly once, and whose
//! cumulative bytes at t equal that largest end offset.

use rondo_model::schedule::Frame;

use super::{Format, MediaError, StoredSample};

/// One sample as a container parser sees it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Unit {
    pub track_index: usize,
    /// Stored-stream offset of the sample's first byte.
    pub stored_offset: u64,
    /// Stored-stream offset just past the last byte needed for the sample.
    pub stored_end: u64,
    pub payload_bytes: u64,
    /// Decode time on the container's timeline; may be negative (B-frame
    /// delay, edit lists), shifted to start at 0 here.
    pub decode_ns: i64,
}

/// Builds the curve from `units` of a stored stream of `stored_bytes` bytes
/// whose first `header_bytes` are the pre-roll.
pub(crate) fn build(
    format: Format,
    mut units: Vec<Unit>,
    header_bytes: u64,
    stored_bytes: u64,
) -> Result<(Vec<Frame>, Vec<StoredSample>), MediaError> {
    if units.is_empty() {
        return Err(MediaError::corrupt(
            format,
            header_bytes,
            "the file holds no media samples",
        ));
    }
    // Stable: samples ending at the same byte keep the parser's order.
    units.sort_by_key(|u| (u.stored_end, u.stored_offset));
    for unit in &units {
        if unit.stored_offset < header_bytes
            || unit.stored_end < unit.stored_offset
            || unit.stored_end > stored_bytes
        {
            return Err(MediaError::corrupt(
                format,
                unit.stored_offset,
                format!(
                    "a sample of track #{} spans bytes {}..{}, outside the media data \
                     ({}..{})",
                    unit.track_index,
                    unit.stored_offset,
                    unit.stored_end,
                    header_bytes,
                    stored_bytes
                ),
            ));
        }
    }
    let origin_ns = units.iter().map(|u| u.decode_ns).min().unwrap_or(0);
    let shifted = |ns: i64| -> u64 { (ns as i128 - origin_ns as i128) as u64 };

    let mut needed_ns = vec![0u64; units.len()];
    let mut earliest = u64::MAX;
    for (i, unit) in units.iter().enumerate().rev() {
        earliest = earliest.min(shifted(unit.decode_ns));
        needed_ns[i] = earliest;
    }

    let mut frames = Vec::with_capacity(units.len());
    let mut samples = Vec::with_capacity(units.len());
    let mut previous_end = header_bytes;
    for (unit, &decode_time_ns) in units.iter().zip(&needed_ns) {
        frames.push(Frame {
            decode_time_ns,
            bytes: unit.stored_end - previous_end,
        });
        previous_end = unit.stored_end;
        samples.push(StoredSample {
            track_index: unit.track_index,
            stored_offset: unit.stored_offset,
            stored_end: unit.stored_end,
            payload_bytes: unit.payload_bytes,
            decode_time_ns: shifted(unit.decode_ns),
        });
    }
    if let Some(last) = frames.last_mut() {
        // Trailing boxes or packets after the last sample.
        last.bytes += stored_bytes - previous_end;
    }
    Ok((frames, samples))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(stored_offset: u64, stored_end: u64, decode_ns: i64) -> Unit {
        Unit {
            track_index: 0,
            stored_offset,
            stored_end,
            payload_bytes: stored_end - stored_offset,
            decode_ns,
        }
    }

    #[test]
    fn overhead_goes_to_the_next_sample_and_tail_to_the_last() {
        // Header 100, samples at 108..200 and 220..300, file 310.
        let (frames, _) = build(
            Format::Mp4,
            vec![unit(220, 300, 40), unit(108, 200, 0)],
            100,
            310,
        )
        .unwrap();
        assert_eq!(
            frames,
            vec![
                Frame {
                    decode_time_ns: 0,
                    bytes: 100
                },
                Frame {
                    decode_time_ns: 40,
                    bytes: 110
                }
            ]
        );
    }

    #[test]
    fn a_late_sample_ahead_of_an_early_one_is_needed_early() {
        // Audio decoded at 50 sits before video decoded at 10: both are
        // needed by 10. Decode times shift so the earliest is 0.
        let (frames, samples) = build(
            Format::MpegTs,
            vec![unit(0, 10, -20), unit(10, 30, 50), unit(30, 40, 10)],
            0,
            40,
        )
        .unwrap();
        let times: Vec<u64> = frames.iter().map(|f| f.decode_time_ns).collect();
        assert_eq!(times, vec![0, 30, 30]);
        assert_eq!(samples[1].decode_time_ns, 70);
        assert_eq!(frames.iter().map(|f| f.bytes).sum::<u64>(), 40);
    }

    #[test]
    fn refuses_samples_inside_the_header_or_past_the_end() {
        let err = build(Format::Mp4, vec![unit(50, 60, 0)], 100, 200).unwrap_err();
        assert!(err.to_string().contains("outside the media data"), "{err}");
        let err = build(Format::Mp4, vec![unit(150, 260, 0)], 100, 200).unwrap_err();
        assert!(err.to_string().contains("outside the media data"), "{err}");
        let err = build(Format::Mp4, vec![], 100, 200).unwrap_err();
        assert!(err.to_string().contains("no media samples"), "{err}");
    }
}
