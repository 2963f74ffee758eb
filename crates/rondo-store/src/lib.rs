//! rondo's on-disk format: the data directory, device headers, extents with
//! checksums, the SQLite catalog, crash recovery and fsck (see `docs/store.md`).
//!
//! The store persists what the pure core (`rondo-model`) decided and decides
//! nothing itself: layouts come from `TitlePlan` and `ArrayAllocator`, and the
//! start disk and seed of a title follow the model's rules. A data directory
//! holds `rondo.toml` (what is fixed at creation), one device per disk (sparse
//! files `disk-N.dev` by default, or block devices), `catalog.sqlite` (WAL,
//! `synchronous=FULL`) and `rondo.lock`, which one process at a time holds.
//!
//! ```text
//! Store::create(dir, StoreConfig) / Store::open(dir)
//!   begin_title(meta, &plan) -> TitleWriter   title `writing`, strides held
//!   writer.write_round(i, bytes) …            primary + backup extents, CRC32C
//!   writer.commit()                           fsync devices, then `complete`
//!   load_title(id) -> StoredTitle; read_round / Device::read_at
//!   delete_title(id)
//! fsck(dir) -> FsckReport
//! ```

mod atomic;
mod catalog;
mod config;
mod device;
mod disk_state;
mod error;
mod extent_faults;
mod fsck;
mod store;
mod tier_titles;
pub mod titles;
mod uring;

pub use catalog::{
    CATALOG_FILE, ExtentRecord, KeyframeRecord, SCHEMA_VERSION, decode_client_bytes,
    decode_keyframes, encode_client_bytes, encode_keyframes,
};
pub use config::{
    ArrayConfig, ArrayId, BACKUP_WINDOW_ROUNDS_MAX, CONFIG_FILE, DeviceEntry, DirectoryFlags,
    FORMAT_VERSION, HEADER_REGION_BYTES, IO_ALIGN_BYTES, LOSS_NOTICE_ROUNDS_MAX, ServingSettings,
    StoreConfig, Stroke,
};
pub use device::{
    AlignedBuf, Device, DeviceError, DeviceHeader, HeaderMismatch, IoMode, RemoteDevice,
};
pub use disk_state::{DISK_STATE_FILE, DiskStates, FailedDisk};
pub use error::{Result, StoreError};
pub use extent_faults::{EXTENT_FAULTS_FILE, ExtentFaultRecords};
pub use fsck::{
    FsckProblem, FsckReport, FsckStatus, LostData, Orphan, ProblemKind, fsck,
    fsck_with_devices_elsewhere,
};
pub use store::{
    LOCK_FILE, LayoutInputs, MAX_TITLE_NAME_BYTES, Store, StoredTitle, TitleMeta, TitleRecord,
    TitleWriter, checksum, checksum_append, open_node_devices, replace_device_file,
    validate_title_name, verify_extent,
};
pub use tier_titles::TierTitleRecord;
