//! Tiers below the disk array (seed 002): where the titles live that the
//! array does not hold, behind one interface, [`Tier`].
//!
//! A tier stores a media file whole as an *object* under a key and gives it
//! back, checked, when a title is staged onto the array; it also predicts
//! how long that will take from now, which the server tells a waiting
//! client. Two backends: an emulated optical jukebox ([`jukebox`]: discs as
//! directories, striped files as seed 002 builds them, every exchange and
//! transfer paced by the core's jukebox model) and an S3-compatible object
//! store ([`s3`]). `tiers.toml` in a data directory names the tiers it uses
//! ([`config`]). Nothing here decides what to stage or evict: the server
//! does, with the array's write queue pacing the staging writes.

pub mod config;
mod error;
pub mod jukebox;
pub mod s3;

use std::io::Write;

pub use config::{JukeboxTierConfig, S3TierConfig, TIERS_FILE, TierConfig, TierKind, TiersFile};
pub use error::TierError;

/// What a tier keeps about one stored object, and the catalog with it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TierObject {
    pub key: String,
    pub size_bytes: u64,
    /// CRC32C of the whole object, checked after every fetch.
    pub crc32c: u32,
}

/// What a tier is doing now, for the dashboard and `/metrics`.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct TierStatus {
    pub name: String,
    pub kind: &'static str,
    /// Fetches in progress or queued.
    pub fetches_active: u32,
    /// Bytes fetched since start.
    pub fetched_bytes_total: u64,
    /// Fetches since start, and those that failed.
    pub fetches_total: u64,
    pub fetch_failures_total: u64,
    /// Jukebox: drives busy now, exchanges and extent-cache hits since
    /// start. S3: the measured throughput the predictions use.
    pub drives_busy: Option<u32>,
    pub drives_total: Option<u32>,
    pub exchanges_total: Option<u64>,
    pub cache_hits_total: Option<u64>,
    pub measured_bytes_per_s: Option<f64>,
}

/// One tier: a place to keep media files whole and fetch them back.
pub trait Tier: Send + Sync {
    /// The tier's name in `tiers.toml`.
    fn name(&self) -> &str;

    /// Stores the file at `source` under `key` (replacing nothing: a key
    /// that exists is refused). Atomic: a crash leaves no object under
    /// `key`.
    fn put(&self, key: &str, source: &std::path::Path) -> Result<TierObject, TierError>;

    /// Wall-clock nanoseconds from now until a fetch of `object` started
    /// now would end, by the tier's model (jukebox) or measured throughput
    /// (S3), behind the fetches already under way.
    fn predict_fetch_ns(&self, object: &TierObject) -> u64;

    /// Writes the object's bytes to `dest` in order, calling
    /// `progress(done_bytes)` as they come, and checks them against
    /// `object`'s size and checksum: a missing or corrupt object is an
    /// error naming the tier, the key and what is wrong.
    fn fetch(
        &self,
        object: &TierObject,
        dest: &mut dyn Write,
        progress: &dyn Fn(u64),
    ) -> Result<(), TierError>;

    /// Removes the object (a missing one is not an error).
    fn remove(&self, key: &str) -> Result<(), TierError>;

    fn status(&self) -> TierStatus;
}

/// Opens the tier `config` describes (`base` resolves relative paths: the
/// data directory, whose `tiers.toml` an S3 tier's configuration errors
/// name). An S3 tier is reached and measured before this returns.
pub fn open(config: &TierConfig, base: &std::path::Path) -> Result<Box<dyn Tier>, TierError> {
    match &config.kind {
        TierKind::Jukebox(j) => Ok(Box::new(jukebox::EmulatedJukebox::open(
            &config.name,
            &base.join(&j.path),
        )?)),
        TierKind::S3(s) => Ok(Box::new(s3::S3Tier::open(
            &config.name,
            s,
            &base.join(TIERS_FILE),
        )?)),
    }
}

/// Whether `key` can name an object: what a title name may be (letters,
/// digits, `-`, `_`, `.`; not starting with `.`), so it is also a file name.
pub fn validate_key(key: &str) -> Result<(), TierError> {
    let ok = !key.is_empty()
        && key.len() <= 200
        && !key.starts_with('.')
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(TierError::InvalidKey {
            key: key.to_string(),
        })
    }
}
