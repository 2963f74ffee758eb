//! The store's error type: every way opening, writing, reading or checking a
//! data directory can fail, each naming the directory, device, title or field
//! that is wrong so an operator can act on the message alone.

use std::path::PathBuf;

use rondo_model::layout::{LayoutError, Replica};
use rondo_model::units::{DiskIndex, TitleId};
use thiserror::Error;

use crate::config::ArrayId;
use crate::device::{DeviceError, HeaderMismatch};

/// Why a store operation failed.
#[derive(Debug, Error)]
pub enum StoreError {
    #[error("{} is not a rondo data directory: it has no rondo.toml", .dir.display())]
    NotADataDirectory { dir: PathBuf },
    #[error("refusing to create a data directory in {}: it is not empty", .dir.display())]
    DirectoryNotEmpty { dir: PathBuf },
    #[error(
        "data directory {} is already open{}: only one process at a time may own it",
        .dir.display(),
        .holder_pid.map(|p| format!(" (held by pid {p})")).unwrap_or_default()
    )]
    Locked {
        dir: PathBuf,
        holder_pid: Option<u32>,
    },
    #[error("{}: {reason}", .path.display())]
    BadConfig { path: PathBuf, reason: String },
    #[error("invalid store configuration: {reason}")]
    InvalidConfig { reason: String },
    #[error(
        "{}: format version {found} is newer than this rondo supports ({supported}); \
         use a newer rondo",
        .path.display()
    )]
    UnsupportedFormat {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("data directory has {dir_value}; {flag} {flag_value} contradicts it")]
    FlagConflict {
        flag: &'static str,
        flag_value: String,
        dir_value: String,
    },
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error("device {} (disk {}): {problem}", .path.display(), .disk.0)]
    DeviceHeader {
        path: PathBuf,
        disk: DiskIndex,
        problem: HeaderMismatch,
    },
    #[error("device {}: {reason}", .path.display())]
    DeviceUnusable { path: PathBuf, reason: String },
    #[error("catalog: {context}: {source}")]
    Catalog {
        context: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("{} is not a rondo catalog (it has no schema_version table)", .path.display())]
    NotACatalog { path: PathBuf },
    #[error(
        "{}: catalog schema version {found} is newer than this rondo supports ({supported}); \
         use a newer rondo",
        .path.display()
    )]
    FutureSchema {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error(
        "{}: the catalog belongs to array {found}, but rondo.toml says array {expected}",
        .path.display()
    )]
    ForeignCatalog {
        path: PathBuf,
        found: String,
        expected: ArrayId,
    },
    #[error("catalog is inconsistent: {reason} (run `rondo fsck`)")]
    CatalogCorrupt { reason: String },
    #[error("invalid title name {name:?}: {reason}")]
    InvalidName { name: String, reason: &'static str },
    #[error("a title named {name:?} already exists")]
    NameTaken { name: String },
    #[error(
        "cannot store title {name:?}: disk {} is full (the title needs {needed_strides} strides \
         there, {free_strides} are free)",
        .disk.0
    )]
    DiskFull {
        name: String,
        disk: DiskIndex,
        needed_strides: u64,
        free_strides: u64,
    },
    #[error("title {name:?}: {reason}")]
    PlanMismatch { name: String, reason: String },
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error("no complete title with id {}", .0.0)]
    TitleNotFound(TitleId),
    #[error("title {} round {round} has no backup replica (the array's scheme stores none)", .title.0)]
    NoBackup { title: TitleId, round: usize },
    #[error("title {}: expected round {expected} next, got round {got}", .title.0)]
    RoundOutOfOrder {
        title: TitleId,
        expected: usize,
        got: usize,
    },
    #[error("title {}: round {round} has {expected_bytes} bytes, got {got_bytes}", .title.0)]
    RoundLengthMismatch {
        title: TitleId,
        round: usize,
        expected_bytes: u64,
        got_bytes: u64,
    },
    #[error(
        "title {}: commit after {written} of {rounds} rounds: every round must be written",
        .title.0
    )]
    IncompleteTitle {
        title: TitleId,
        written: usize,
        rounds: usize,
    },
    #[error(
        "title {} round {round} {replica:?} piece {piece}: checksum mismatch on disk {} at \
         device offset {device_offset_bytes} ({length_bytes} bytes): catalog has {expected:#010x}, \
         device has {found:#010x}",
        .title.0, .disk.0
    )]
    ChecksumMismatch {
        title: TitleId,
        round: u32,
        replica: Replica,
        piece: u32,
        disk: DiskIndex,
        device_offset_bytes: u64,
        length_bytes: u64,
        expected: u32,
        found: u32,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

/// Shorthand for results of store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

impl StoreError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> StoreError {
        StoreError::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn catalog(context: impl Into<String>, source: rusqlite::Error) -> StoreError {
        StoreError::Catalog {
            context: context.into(),
            source,
        }
    }
}
