//! Where a title's bytes are in time: time seeks, and the title's JSON form.
//!
//! Loading stored titles and a new data directory's defaults are the
//! store's (`rondo_store::titles`, re-exported here); the byte ↔ round
//! mapping is the core's `RoundIndex`.
//!
//! Time seeks (`?t=`) start at the video keyframe at or before `t`
//! ([`TimeSeek::start_at_time`]). An MPEG-TS title starts at the
//! keyframe's entry packet from the catalog's keyframe list (schema 2). An
//! MP4 title is cut by `rondo_media::container::seek::mp4_seek` from its
//! header, read from the store once when the title is loaded and kept in
//! memory ([`MAX_CACHED_HEADER_BYTES`] per title at most, so the cache is
//! bounded by titles × that): the client gets the rewritten header from
//! memory, then the stored bytes from the first kept sample. A title stored
//! before schema 2 has no keyframe list; its MPEG-TS time seeks fall back to
//! the round whose playback interval holds `t` (a transport-packet boundary,
//! so a player resynchronises at the next keyframe), with a log line.

use bytes::Bytes;
use rondo_media::container::MPEG_TS_CONTENT_TYPE;
use rondo_media::container::seek::{SeekError, mp4_seek};
use rondo_store::TitleRecord;
use thiserror::Error;

pub use rondo_model::array::{RoundIndex, RoundPosition};
pub use rondo_store::titles::*;

/// Where a time seek starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimeStart {
    /// Bytes sent before the stored ones, from memory (an MP4's rewritten
    /// header); empty for MPEG-TS.
    pub prefix: Bytes,
    /// First stored byte sent after the prefix; the rest of the title follows.
    pub first_byte: u64,
    /// Presentation time of the keyframe the response starts at (for the
    /// round fallback: the round's start).
    pub start_time_ns: u64,
    /// False when the title has no keyframe list and the start is a round
    /// boundary.
    pub at_keyframe: bool,
}

/// Why a time seek cannot be served.
#[derive(Debug, Error, PartialEq)]
pub enum TimeSeekError {
    #[error("t={t_s:.3} s is at or past the end of title {title} ({duration_s:.3} s)")]
    PastEnd {
        title: u64,
        t_s: f64,
        duration_s: f64,
    },
    #[error("title {title}: {reason}")]
    Unsupported { title: u64, reason: String },
}

/// Time seeks on a loaded title.
pub trait TimeSeek {
    /// Where a stream started at presentation time `t_ns` begins.
    fn start_at_time(&self, t_ns: u64) -> Result<TimeStart, TimeSeekError>;
}

impl TimeSeek for LoadedTitle {
    /// Where a stream started at presentation time `t_ns` begins: at the
    /// video keyframe at or before `t_ns` (the first keyframe before it).
    /// MP4 titles get a rewritten header as a prefix (pure CPU work on the
    /// cached header, no disk read); MPEG-TS titles start at the
    /// keyframe's entry packet. See the module docs for titles without
    /// keyframes.
    fn start_at_time(&self, t_ns: u64) -> Result<TimeStart, TimeSeekError> {
        let title = self.id().0;
        let past_end = || TimeSeekError::PastEnd {
            title,
            t_s: t_ns as f64 / 1e9,
            duration_s: self.record.duration_ns as f64 / 1e9,
        };
        if t_ns >= self.record.duration_ns {
            return Err(past_end());
        }
        let unsupported = |reason: String| TimeSeekError::Unsupported { title, reason };
        if self.record.content_type == MPEG_TS_CONTENT_TYPE {
            return Ok(match self.keyframes.as_deref() {
                Some([first, rest @ ..]) => {
                    let k = rest
                        .iter()
                        .rev()
                        .find(|k| k.time_ns <= t_ns)
                        .unwrap_or(first);
                    TimeStart {
                        prefix: Bytes::new(),
                        first_byte: k.byte_offset,
                        start_time_ns: k.time_ns,
                        at_keyframe: true,
                    }
                }
                _ => {
                    let round = self.round_for_time(t_ns);
                    tracing::info!(
                        title,
                        name = %self.record.name,
                        round,
                        "title has no keyframe list (stored before catalog schema 2): ?t= \
                         starts at a round boundary"
                    );
                    TimeStart {
                        prefix: Bytes::new(),
                        first_byte: self.round_byte_range(round).start,
                        start_time_ns: self.round_index().round_start_ns(round),
                        at_keyframe: false,
                    }
                }
            });
        }
        if self.record.container_kind.contains("fragmented") {
            return Err(unsupported(
                "?t= cannot start a fragmented MP4 (its fragments are not rewritten); seek with \
                 Range requests"
                    .to_string(),
            ));
        }
        let Some(header) = &self.mp4_header else {
            return Err(unsupported(format!(
                "its MP4 header ({} bytes) is not held in memory (more than {} MiB, or it \
                 could not be read at load); seek with Range requests",
                self.record.header_bytes,
                MAX_CACHED_HEADER_BYTES >> 20
            )));
        };
        match mp4_seek(header, self.record.size_bytes, t_ns) {
            Ok(cut) => Ok(TimeStart {
                prefix: Bytes::from(cut.header),
                first_byte: cut.media_first_byte,
                start_time_ns: cut.start_time_ns,
                at_keyframe: true,
            }),
            Err(SeekError::PastEnd { .. }) => Err(past_end()),
            Err(SeekError::Media(e)) => Err(unsupported(format!(
                "its MP4 header cannot be cut at t={:.3} s: {e}",
                t_ns as f64 / 1e9
            ))),
        }
    }
}

/// The JSON form of a title that `rondo ingest --json` prints and the
/// control API returns (`POST /api/admin/titles`).
pub fn title_json(record: &TitleRecord) -> serde_json::Value {
    serde_json::json!({
        "id": record.id.0,
        "name": record.name,
        "source_file_name": record.source_file_name,
        "container_kind": record.container_kind,
        "content_type": record.content_type,
        "duration_ns": record.duration_ns,
        "size_bytes": record.size_bytes,
        "header_bytes": record.header_bytes,
        "round_duration_ns": record.round_duration_ns,
        "rounds": record.client_bytes.len(),
        "start_disk": record.start_disk.0,
        "created_unix_ns": record.created_unix_ns,
    })
}
