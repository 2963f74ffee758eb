//! Stored titles as the core sees them, and where a title's bytes are in time.
//!
//! This module owns loading the store's complete titles into what the round
//! executor and admission need ([`LoadedTitle`]: the catalog record, the
//! schedule rebuilt from the catalog's client bytes, the plan, the placed
//! layout with its extents, and the reservation charges under the array's
//! bound), the pure mapping between a title's stored byte offsets and its
//! playback rounds (for HTTP Range starts and seeks), and the defaults a new
//! data directory gets, kept here once so `rondo serve` and `rondo ingest`
//! create identical directories.
//!
//! Time seeks (`?t=`) start at the video keyframe at or before `t`
//! ([`LoadedTitle::start_at_time`]). An MPEG-TS title starts at the
//! keyframe's entry packet from the catalog's keyframe list (schema 2). An
//! MP4 title is cut by `rondo_media::container::seek::mp4_seek` from its
//! header, read from the store once when the title is loaded and kept in
//! memory ([`MAX_CACHED_HEADER_BYTES`] per title at most, so the cache is
//! bounded by titles × that): the client gets the rewritten header from
//! memory, then the stored bytes from the first kept sample. A title stored
//! before schema 2 has no keyframe list; its MPEG-TS time seeks fall back to
//! the round whose playback interval holds `t` (a transport-packet boundary,
//! so a player resynchronises at the next keyframe), with a log line.

use std::ops::Range;
use std::path::Path;

use bytes::Bytes;
use rondo_media::container::MPEG_TS_CONTENT_TYPE;
use rondo_media::container::seek::{SeekError, mp4_seek};

use rondo_model::array::{ArrayTitle, ExtentChecksums};
use rondo_model::disk::{DiskError, RondoBound, profile_by_name};
use rondo_model::layout::{Replica, TitleLayout, TitlePlan};
use rondo_model::reservation::{Bound, ChargesError, TitleCharges};
use rondo_model::schedule::Schedule;
use rondo_model::units::{STRIDE_BYTES_DEFAULT, TitleId};
use rondo_store::{
    ArrayConfig, CONFIG_FILE, ExtentRecord, KeyframeRecord, Store, StoreConfig, StoreError,
    StoredTitle, TitleRecord,
};
use thiserror::Error;

/// Where `rondo serve` and `rondo ingest` keep their data without `--data-dir`.
pub const DEFAULT_DATA_DIR: &str = "rondo-data";
/// Disks of a data directory created with the defaults.
pub const DEFAULT_DISK_COUNT: u32 = 4;
/// Disk profile of a data directory created with the defaults.
pub const DEFAULT_DISK_PROFILE: &str = "cheetah-4lp";

/// The configuration a missing data directory is created with by both
/// `rondo serve` and `rondo ingest`: [`DEFAULT_DISK_COUNT`] sparse device
/// files of the [`DEFAULT_DISK_PROFILE`]'s capacity (whole strides), 2 MiB
/// strides, 16 KiB blocks, 1 s rounds, `minimum` reservation with
/// `deterministic` placement, no declustering, a random array id.
pub fn default_store_config() -> StoreConfig {
    let profile = profile_by_name(DEFAULT_DISK_PROFILE).expect("the default profile is built in");
    let capacity_bytes = profile
        .capacity_bytes()
        .expect("the default profile is valid");
    StoreConfig::new(
        DEFAULT_DISK_COUNT,
        DEFAULT_DISK_PROFILE,
        capacity_bytes / STRIDE_BYTES_DEFAULT * STRIDE_BYTES_DEFAULT,
    )
}

/// Opens the data directory `dir`, or creates it with `config` when `dir`
/// is absent or empty. Returns the store and whether it was created. A
/// non-empty directory without `rondo.toml` is refused as not a data
/// directory (nothing in it is touched).
pub fn open_or_create(dir: &Path, config: StoreConfig) -> Result<(Store, bool), StoreError> {
    let absent_or_empty = !dir.join(CONFIG_FILE).exists()
        && match std::fs::read_dir(dir) {
            Ok(mut entries) => entries.next().is_none(),
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        };
    if absent_or_empty {
        Ok((Store::create(dir, config)?, true))
    } else {
        Ok((Store::open(dir)?, false))
    }
}

/// The rondo-mode round bound for the array's disk profile (what `rondo
/// serve` admits with).
pub fn rondo_bound(config: &ArrayConfig) -> Result<Bound, DiskError> {
    let profile = profile_by_name(&config.disk_profile)?;
    Ok(Bound::Rondo(RondoBound::new(&profile)?))
}

/// Why stored titles could not be loaded.
#[derive(Debug, Error)]
pub enum LoadError {
    #[error("loading stored titles: {0}")]
    Store(#[from] StoreError),
    #[error("title {} ({name:?}): {reason}", .id.0)]
    Title {
        id: TitleId,
        name: String,
        reason: String,
    },
    #[error("title {} ({name:?}): its reservation charges cannot be built: {source}", .id.0)]
    Charges {
        id: TitleId,
        name: String,
        #[source]
        source: ChargesError,
    },
}

/// The byte ↔ round mapping lives in the core's title registry.
pub use rondo_model::array::{RoundIndex, RoundPosition};

/// Largest MP4 header (`ftyp`+`moov`) kept in memory for `?t=`; a title
/// with a larger one answers `?t=` with an error (seek with Range). A
/// two-hour film's `moov` is a few MB.
pub const MAX_CACHED_HEADER_BYTES: u64 = 16 << 20;

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

/// A complete title ready for admission and for the round executor.
#[derive(Clone, Debug)]
pub struct LoadedTitle {
    pub record: TitleRecord,
    /// Rebuilt from the catalog's client bytes, the round length and B_l.
    pub schedule: Schedule,
    pub plan: TitlePlan,
    /// Device extents of every round and replica.
    pub layout: TitleLayout,
    /// What admission reserves for a stream of this title
    /// (`Reservations::add_title(record.id, charges.clone())`).
    pub charges: TitleCharges,
    /// The record, layout and extent checksums in the form
    /// `Store::read_round` takes (`stored.record == record`,
    /// `stored.layout == layout`).
    pub stored: StoredTitle,
    index: RoundIndex,
    /// Video keyframes from the catalog; `None` for a title stored before
    /// schema version 2.
    pub keyframes: Option<Vec<KeyframeRecord>>,
    /// An MP4's stored header (`ftyp`+`moov`) when it is at most
    /// [`MAX_CACHED_HEADER_BYTES`] and could be read; `?t=` cuts it.
    pub mp4_header: Option<Bytes>,
}

impl LoadedTitle {
    pub fn id(&self) -> TitleId {
        self.record.id
    }

    /// The title as the array holds it: its charges, its layout with every
    /// extent's catalog checksum, and its round index.
    pub fn array_title(&self) -> ArrayTitle {
        let rounds = self.rounds();
        let sums = |replica| {
            (0..rounds)
                .map(|r| {
                    self.round_extents(r, replica)
                        .iter()
                        .map(|e| e.crc32c)
                        .collect()
                })
                .collect()
        };
        ArrayTitle::new(
            self.id(),
            self.charges.clone(),
            Some(self.layout.clone()),
            Some(ExtentChecksums {
                primary: sums(Replica::Primary),
                backup: sums(Replica::Backup),
            }),
            &self.record.client_bytes,
            self.record.round_duration_ns,
        )
    }

    /// Number of playback rounds.
    pub fn rounds(&self) -> usize {
        self.index.rounds()
    }

    /// The extents (with checksums) of one round and replica, in piece order.
    pub fn round_extents(&self, round: usize, replica: Replica) -> &[ExtentRecord] {
        self.stored.round_extents(round, replica)
    }

    /// The round boundaries of the stored stream.
    pub fn round_index(&self) -> &RoundIndex {
        &self.index
    }

    /// The stored bytes round `round` holds.
    pub fn round_byte_range(&self, round: usize) -> Range<u64> {
        self.index.round_byte_range(round)
    }

    /// The round holding stored byte `stored_offset` and the offset within
    /// it; `None` past the end (see [`RoundIndex::position_of_byte`]).
    pub fn position_of_byte(&self, stored_offset: u64) -> Option<RoundPosition> {
        self.index.position_of_byte(stored_offset)
    }

    /// The stored offset of a round position (the inverse of
    /// [`LoadedTitle::position_of_byte`]).
    pub fn stored_offset(&self, position: RoundPosition) -> Option<u64> {
        self.index.stored_offset(position)
    }

    /// The round an HTTP Range starting at `stored_offset` starts in.
    pub fn round_for_byte(&self, stored_offset: u64) -> Option<usize> {
        self.position_of_byte(stored_offset).map(|p| p.round)
    }

    /// The round a time seek to `t_ns` starts in: the round whose playback
    /// interval holds `t_ns` (see the module docs on keyframes).
    pub fn round_for_time(&self, t_ns: u64) -> usize {
        self.index.round_for_time(t_ns)
    }

    /// Where a stream started at presentation time `t_ns` begins: at the
    /// video keyframe at or before `t_ns` (the first keyframe before it).
    /// MP4 titles get a rewritten header as a prefix (pure CPU work on the
    /// cached header, no disk read); MPEG-TS titles start at the
    /// keyframe's entry packet. See the module docs for titles without
    /// keyframes.
    pub fn start_at_time(&self, t_ns: u64) -> Result<TimeStart, TimeSeekError> {
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
                        start_time_ns: self.index.round_start_ns(round),
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

/// Reads a stored title's first `header_bytes` (the MP4 `ftyp`+`moov`)
/// from its first rounds, from the backup when a primary read fails.
fn read_header(store: &Store, stored: &StoredTitle, rounds: usize) -> Result<Bytes, StoreError> {
    let want = stored.record.header_bytes as usize;
    let mut header = Vec::with_capacity(want);
    let mut round = 0;
    while header.len() < want && round < rounds {
        let data = match store.read_round(stored, round, Replica::Primary) {
            Ok(data) => data,
            Err(_) => store.read_round(stored, round, Replica::Backup)?,
        };
        let take = (want - header.len()).min(data.len());
        header.extend_from_slice(&data[..take]);
        round += 1;
    }
    Ok(Bytes::from(header))
}

/// Loads the complete title `id` with its charges under `bound`.
pub fn load_title(store: &Store, bound: &Bound, id: TitleId) -> Result<LoadedTitle, LoadError> {
    let stored = store.load_title(id)?;
    let record = stored.record.clone();
    let block_bytes = store.config().block_bytes;
    let schedule = Schedule::from_client_bytes(
        record.client_bytes.clone(),
        record.round_duration_ns,
        block_bytes,
    )
    .map_err(|e| LoadError::Title {
        id,
        name: record.name.clone(),
        reason: format!("its schedule cannot be rebuilt: {e}"),
    })?;
    let plan = store.title_plan(&record)?;
    let charges = bound
        .title_charges(&plan, Some(&stored.layout), &schedule)
        .map_err(|source| LoadError::Charges {
            id,
            name: record.name.clone(),
            source,
        })?;
    let index = RoundIndex::new(&record.client_bytes, record.round_duration_ns);
    let keyframes = store.title_keyframes(id)?;
    let is_mp4 = record.content_type != MPEG_TS_CONTENT_TYPE
        && !record.container_kind.contains("fragmented");
    // Read once here (outside admission's reserved time: a few rounds per
    // title at start-up or after an ingest), never per request.
    let mp4_header = if is_mp4 && record.header_bytes <= MAX_CACHED_HEADER_BYTES {
        match read_header(store, &stored, index.rounds()) {
            Ok(header) => Some(header),
            Err(e) => {
                tracing::warn!(
                    title = id.0,
                    name = %record.name,
                    error = %e,
                    "cannot read the title's MP4 header; ?t= will refuse it"
                );
                None
            }
        }
    } else {
        None
    };
    Ok(LoadedTitle {
        keyframes,
        mp4_header,
        layout: stored.layout.clone(),
        record,
        schedule,
        plan,
        charges,
        stored,
        index,
    })
}

/// Loads every complete title of `store`, by id, with its charges under
/// `bound`. Called by the server at start and after each ingest.
pub fn load_titles(store: &Store, bound: &Bound) -> Result<Vec<LoadedTitle>, LoadError> {
    store
        .titles()?
        .iter()
        .map(|record| load_title(store, bound, record.id))
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use rondo_model::units::NS_PER_S;

    fn index(client_bytes: &[u64]) -> RoundIndex {
        RoundIndex::new(client_bytes, NS_PER_S)
    }

    #[test]
    fn bytes_map_to_rounds_and_back() {
        let ix = index(&[100, 50, 70]);
        assert_eq!(ix.rounds(), 3);
        assert_eq!(ix.size_bytes(), 220);
        assert_eq!(ix.round_byte_range(1), 100..150);
        let at = |round, offset_in_round_bytes| {
            Some(RoundPosition {
                round,
                offset_in_round_bytes,
            })
        };
        assert_eq!(ix.position_of_byte(0), at(0, 0));
        assert_eq!(ix.position_of_byte(99), at(0, 99));
        assert_eq!(ix.position_of_byte(100), at(1, 0));
        assert_eq!(ix.position_of_byte(149), at(1, 49));
        assert_eq!(ix.position_of_byte(150), at(2, 0));
        assert_eq!(ix.position_of_byte(219), at(2, 69));
        assert_eq!(ix.position_of_byte(220), None);
        assert_eq!(ix.position_of_byte(u64::MAX), None);
        for offset in 0..220 {
            let p = ix.position_of_byte(offset).unwrap();
            assert_eq!(ix.stored_offset(p), Some(offset));
        }
        // Positions outside a round or past the last round have no offset.
        assert_eq!(ix.stored_offset(at(1, 50).unwrap()), None);
        assert_eq!(ix.stored_offset(at(3, 0).unwrap()), None);
        assert_eq!(ix.stored_offset(at(0, u64::MAX).unwrap()), None);
    }

    #[test]
    fn empty_rounds_hold_no_byte() {
        // Rounds 1, 2 and 4 are empty (a gap in the media, say).
        let ix = index(&[10, 0, 0, 5, 0, 7]);
        assert_eq!(ix.round_byte_range(1), 10..10);
        let rounds: Vec<usize> = (0..22)
            .map(|b| ix.position_of_byte(b).unwrap().round)
            .collect();
        let mut expected = vec![0; 10];
        expected.extend([3; 5]);
        expected.extend([5; 7]);
        assert_eq!(rounds, expected);
        assert_eq!(
            ix.stored_offset(RoundPosition {
                round: 1,
                offset_in_round_bytes: 0
            }),
            None
        );
        // A leading empty round: byte 0 is in round 1.
        let ix = index(&[0, 4]);
        assert_eq!(ix.position_of_byte(0).unwrap().round, 1);
    }

    #[test]
    fn times_map_to_the_round_that_plays_them() {
        let ix = RoundIndex::new(&[1, 1, 1], NS_PER_S / 2);
        assert_eq!(ix.round_for_time(0), 0);
        assert_eq!(ix.round_for_time(NS_PER_S / 2 - 1), 0);
        assert_eq!(ix.round_for_time(NS_PER_S / 2), 1);
        assert_eq!(ix.round_for_time(NS_PER_S + 1), 2);
        // Past the end: the last round.
        assert_eq!(ix.round_for_time(100 * NS_PER_S), 2);
        assert_eq!(ix.round_for_time(u64::MAX), 2);
        assert_eq!(ix.round_start_ns(2), NS_PER_S);
    }

    #[test]
    fn defaults_are_what_serve_documents() {
        let c = default_store_config();
        assert_eq!(c.disk_count, 4);
        assert_eq!(c.disk_profile, "cheetah-4lp");
        assert_eq!(c.scheme, rondo_model::reservation::Scheme::Minimum);
        assert_eq!(
            c.placement,
            rondo_model::layout::ReplicaPlacement::Deterministic
        );
        assert_eq!(c.capacity_bytes % c.stride_bytes, 0);
        // A Cheetah 4LP holds about 4.5 GB; the stride area is its whole
        // capacity in strides, so the bound's LBNs stay on the modelled disk.
        let profile_bytes = profile_by_name("cheetah-4lp")
            .unwrap()
            .capacity_bytes()
            .unwrap();
        assert!(c.capacity_bytes <= profile_bytes);
        assert!(c.capacity_bytes + c.stride_bytes > profile_bytes);
    }
}
