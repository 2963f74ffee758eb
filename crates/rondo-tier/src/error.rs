//! Why a tier operation failed: each names the tier, the object and what is
//! wrong, for the client and the log alike.

use std::path::PathBuf;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum TierError {
    #[error("tier {tier}: no object {key:?} (it was removed from the tier, or never stored)")]
    Missing { tier: String, key: String },
    #[error("tier {tier}: object {key:?} is corrupt: {what}")]
    Corrupt {
        tier: String,
        key: String,
        what: String,
    },
    #[error("tier {tier}: object {key:?} exists already")]
    Exists { tier: String, key: String },
    #[error(
        "invalid object key {key:?}: use letters, digits, '-', '_' and '.', not starting with '.'"
    )]
    InvalidKey { key: String },
    #[error("tier {tier}: {what}: {path}: {source}")]
    Io {
        tier: String,
        what: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("tier {tier}: {what}")]
    Full { tier: String, what: String },
    #[error("{path}: {what}")]
    Config { path: PathBuf, what: String },
    #[error("tier {tier}: the store answered: {what}")]
    Remote { tier: String, what: String },
    #[error("writing the fetched object {key:?} from tier {tier}: {source}")]
    Sink {
        tier: String,
        key: String,
        #[source]
        source: std::io::Error,
    },
}

impl TierError {
    /// Whether the object itself is at fault (missing or corrupt), rather
    /// than the tier's machinery or the destination.
    pub fn is_object_fault(&self) -> bool {
        matches!(self, TierError::Missing { .. } | TierError::Corrupt { .. })
    }
}
