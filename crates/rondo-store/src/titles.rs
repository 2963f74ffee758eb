//! Stored titles as the core sees them, and the defaults of a new data
//! directory.
//!
//! This module owns loading the store's complete titles into what the array
//! and the executors need ([`LoadedTitle`]: the catalog record, the schedule
//! rebuilt from the catalog's client bytes, the plan, the placed layout with
//! its extents and their checksums, the reservation charges under the
//! array's bound, the keyframes and a cached MP4 header), and the defaults a
//! new data directory gets, kept here once so `rondo serve`, `rondo ingest`
//! and `rondo simulate --data-dir` agree without the simulator linking the
//! HTTP server. It decides nothing: the charges come from the core's
//! `Bound::title_charges`, the byte ↔ round mapping is the core's
//! `RoundIndex`.

use std::ops::Range;
use std::path::Path;

use bytes::Bytes;
use rondo_media::container::MPEG_TS_CONTENT_TYPE;
use rondo_model::array::{ArrayTitle, ExtentChecksums, RoundIndex, RoundPosition};
use rondo_model::disk::{DiskError, RondoBound, profile_by_name, stroke_holding_strides};
use rondo_model::layout::{Replica, TitleLayout, TitlePlan};
use rondo_model::reservation::{Bound, ChargesError, TitleCharges};
use rondo_model::schedule::Schedule;
use rondo_model::units::{STRIDE_BYTES_DEFAULT, TitleId};
use thiserror::Error;

use crate::{
    ArrayConfig, CONFIG_FILE, ExtentRecord, KeyframeRecord, Store, StoreConfig, StoreError,
    StoredTitle, Stroke, TitleRecord,
};

/// Default admission look-ahead of a server: start rounds tried after the
/// earliest one (assumption: a few rounds of start-up delay at most).
pub const DEFAULT_LOOKAHEAD_ROUNDS: u64 = 5;
/// Server buffer per disk admission may reserve (seed 000 §6.3: 64 MB per disk).
pub const DEFAULT_BUFFER_PER_DISK_BYTES: u64 = 64 * 1024 * 1024;

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

/// The rondo-mode round bound `rondo serve` admits with and `rondo simulate
/// --data-dir` predicts with: on the directory's disk profile, or under
/// [`Stroke::Data`] on that drive short-stroked to where its data ends
/// (`disk::profiles::stroke_holding`; `highest_stride` is the highest
/// stride any disk holds, `Store::highest_allocated_stride`). Returns the
/// drive charged with it.
pub fn rondo_bound(
    config: &ArrayConfig,
    stroke: Stroke,
    highest_stride: Option<u64>,
) -> Result<(Bound, ChargedDrive), DiskError> {
    let profile = profile_by_name(&config.disk_profile)?;
    let (charged, stroke_percent) = match stroke {
        Stroke::Whole => (profile, 100),
        Stroke::Data => stroke_holding_strides(&profile, highest_stride, config.stride_bytes)?,
    };
    let bound = Bound::Rondo(RondoBound::new(&charged)?);
    Ok((
        bound,
        ChargedDrive {
            profile_name: charged.name,
            stroke_percent,
        },
    ))
}

/// The drive a directory's bound charges ([`rondo_bound`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChargedDrive {
    /// Its profile's name (`cheetah-4lp-outer5` for a short stroke).
    pub profile_name: String,
    /// The share of the stroke charged, in percent (100: the whole drive).
    pub stroke_percent: u32,
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

/// Largest MP4 header (`ftyp`+`moov`) kept in memory for `?t=`; a title
/// with a larger one answers `?t=` with an error (seek with Range). A
/// two-hour film's `moov` is a few MB.
pub const MAX_CACHED_HEADER_BYTES: u64 = 16 << 20;

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
    /// Its charges for the dynamic cycle's group lengths (empty for a
    /// fixed cycle; `ReadCharging::cycle_max_group_rounds`).
    pub group_charges: Vec<TitleCharges>,
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
    /// The RFC 6381 codec strings of an MP4's first video and audio track,
    /// read from [`LoadedTitle::mp4_header`] (what a browser is asked it can
    /// decode); `None` for MPEG-TS and uncached headers.
    pub mp4_codecs: Option<rondo_media::container::Mp4Codecs>,
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
        .with_group_charges(self.group_charges.clone())
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

/// How a title's streams read, for its charges (seed 003's policies).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ReadCharging {
    /// Rounds of a segment read per request (1: one round per read;
    /// `Bound::title_charges_grouped`).
    pub group_rounds: u32,
    /// Drive-cache pairs charged too (`Bound::with_cache_pairs`).
    pub cache_pairs: bool,
    /// Seed 004's dynamic cycle up to this many rounds per read: the title
    /// is also charged for every group length it may use
    /// (`DynamicCycle::group_lengths`; 0: a fixed cycle).
    pub cycle_max_group_rounds: u32,
}

impl ReadCharging {
    /// Seed 000's: one round per read, no pairs.
    pub const SWEEP: ReadCharging = ReadCharging {
        group_rounds: 1,
        cache_pairs: false,
        cycle_max_group_rounds: 0,
    };
}

/// A title's charges under `bound` as its streams read under `reads`, and
/// its charges for the dynamic cycle's other group lengths (empty for a
/// fixed cycle): what [`load_title`] gives a title, and what the server
/// charges its titles with again when the bound changes (the charged
/// stroke widening).
pub fn title_charges(
    bound: &Bound,
    reads: ReadCharging,
    plan: &TitlePlan,
    layout: &TitleLayout,
    schedule: &Schedule,
) -> Result<(TitleCharges, Vec<TitleCharges>), ChargesError> {
    let charges = bound.title_charges_grouped(plan, Some(layout), schedule, reads.group_rounds)?;
    let group_charges = if reads.cycle_max_group_rounds > 0 {
        rondo_model::array::DynamicCycle::new(reads.cycle_max_group_rounds).title_charges(
            bound,
            plan,
            Some(layout),
            schedule,
        )?
    } else {
        Vec::new()
    };
    let charges = if reads.cache_pairs {
        bound.with_cache_pairs(charges, layout, plan.params().segment_rounds)
    } else {
        charges
    };
    Ok((charges, group_charges))
}

/// Loads the complete title `id` with its charges under `bound`, as its
/// streams read under `reads`.
pub fn load_title(
    store: &Store,
    bound: &Bound,
    reads: ReadCharging,
    id: TitleId,
) -> Result<LoadedTitle, LoadError> {
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
    let (charges, group_charges) = title_charges(bound, reads, &plan, &stored.layout, &schedule)
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
    let mp4_codecs = mp4_header
        .as_deref()
        .and_then(rondo_media::container::mp4_codecs);
    Ok(LoadedTitle {
        keyframes,
        mp4_header,
        mp4_codecs,
        layout: stored.layout.clone(),
        record,
        schedule,
        plan,
        charges,
        group_charges,
        stored,
        index,
    })
}

/// Loads every complete title of `store`, by id, with its charges under
/// `bound` as its streams read under `reads` ([`load_title`]). Called by
/// the server at start and after each ingest.
pub fn load_titles(
    store: &Store,
    bound: &Bound,
    reads: ReadCharging,
) -> Result<Vec<LoadedTitle>, LoadError> {
    store
        .titles()?
        .iter()
        .map(|record| load_title(store, bound, reads, record.id))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
