//! An open data directory: creating and opening it, the directory lock,
//! crash recovery, and the title lifecycle (begin, write, commit or abort,
//! list, read, delete).
//!
//! Atomic ingest: [`Store::begin_title`] places the title's strides through
//! the model's [`ArrayAllocator`] and records the title as `writing` with its
//! strides in one transaction; [`TitleWriter::write_round`] writes each round
//! to its primary and backup extents, computing checksums;
//! [`TitleWriter::commit`] syncs the devices, then records the extents and
//! marks the title `complete` in one transaction. Readers see only complete
//! titles. A writer dropped without commit removes its title; a title left
//! `writing` by a crash is removed, and its strides freed, by the next
//! [`Store::open`]. The store persists what the model decided and decides
//! nothing itself: the plan, the start disk and the seed come from the caller
//! (or from [`Store::layout_inputs`], which applies the model's round-robin
//! and seed rules to the catalog's title counter).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use rondo_model::array::ExtentFaults;
use rondo_model::layout::{
    ArrayAllocator, LayoutError, LayoutParams, Replica, TitleLayout, TitlePlan, TitleStrides,
    derive_title_seed, round_robin_start_disk,
};
use rondo_model::schedule::Schedule;
use rondo_model::units::{DiskIndex, TitleId};
use rusqlite::{Connection, params};

use crate::catalog::{self, CATALOG_FILE, ExtentRecord, TitleKey, TitleRow};
use crate::config::{ArrayConfig, ArrayId, CONFIG_FILE, FORMAT_VERSION, StoreConfig};
use crate::device::{AlignedBuf, Device, DeviceHeader, HeaderMismatch, IoMode, device_size_bytes};
use crate::disk_state::{DiskStates, FailedDisk};
use crate::error::{Result, StoreError};
use crate::extent_faults::ExtentFaultRecords;

/// The lock file that makes one process the owner of a data directory.
pub const LOCK_FILE: &str = "rondo.lock";

/// Longest title name, in bytes.
pub const MAX_TITLE_NAME_BYTES: usize = 255;

/// Refuses title names that are empty, too long, contain `/`, `\`, `..` or
/// control characters, or are `.`: a name is used in URLs and file names.
pub fn validate_title_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        Some("a name must not be empty")
    } else if name.len() > MAX_TITLE_NAME_BYTES {
        Some("a name must be at most 255 bytes")
    } else if name.contains('/') || name.contains('\\') {
        Some("a name must not contain '/' or '\\'")
    } else if name.contains("..") {
        Some("a name must not contain '..'")
    } else if name == "." {
        Some("a name must not be '.'")
    } else if name.chars().any(char::is_control) {
        Some("a name must not contain control characters")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(StoreError::InvalidName {
            name: name.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

/// The CRC32C of `bytes`: the checksum kept for every extent.
pub fn checksum(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// The checksum of the bytes whose checksum is `so_far` followed by
/// `bytes` (`checksum(a ++ b) == checksum_append(checksum(a), b)`): an
/// extent read in parts is checked as it would be whole.
pub fn checksum_append(so_far: u32, bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(so_far, bytes)
}

/// Checks `bytes`, read from `extent`'s place on its device, against the
/// checksum recorded when it was written.
pub fn verify_extent(extent: &ExtentRecord, bytes: &[u8]) -> Result<()> {
    let found = checksum(bytes);
    if found != extent.crc32c || bytes.len() as u64 != extent.length_bytes {
        return Err(StoreError::ChecksumMismatch {
            title: extent.title,
            round: extent.round,
            replica: extent.replica,
            piece: extent.piece,
            disk: extent.disk,
            device_offset_bytes: extent.device_offset_bytes,
            length_bytes: extent.length_bytes,
            expected: extent.crc32c,
            found,
        });
    }
    Ok(())
}

/// What ingest knows about a title before writing it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TitleMeta {
    pub name: String,
    /// The file the title was ingested from (its name, for display).
    pub source_file_name: String,
    /// e.g. `mp4`, `mpeg-ts` (named by the media crate).
    pub container_kind: String,
    /// The HTTP Content-Type, e.g. `video/mp4`.
    pub content_type: String,
    pub duration_ns: u64,
    /// Bytes of the stored stream's header (ftyp+moov) at its start.
    pub header_bytes: u64,
    /// T the schedule was made for; must be the array's.
    pub round_duration_ns: u64,
    /// The schedule's client bytes per playback round; they sum to the
    /// stored stream's size.
    pub client_bytes: Vec<u64>,
    /// Passed in by the caller: the store reads no clock.
    pub created_unix_ns: u64,
}

/// A complete title as the catalog holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TitleRecord {
    pub id: TitleId,
    pub name: String,
    pub source_file_name: String,
    pub container_kind: String,
    pub content_type: String,
    pub duration_ns: u64,
    /// Bytes of the stored stream: the sum of `client_bytes`.
    pub size_bytes: u64,
    pub header_bytes: u64,
    pub round_duration_ns: u64,
    pub client_bytes: Vec<u64>,
    pub layout_seed: u64,
    pub start_disk: DiskIndex,
    pub created_unix_ns: u64,
}

impl TitleRecord {
    /// The title's schedule for blocks of `block_bytes` (the array's B_l).
    pub fn schedule(&self, block_bytes: u64) -> Schedule {
        Schedule::from_client_bytes(
            self.client_bytes.clone(),
            self.round_duration_ns,
            block_bytes,
        )
        .expect("a stored title has rounds and a positive round length")
    }

    pub(crate) fn from_row(row: TitleRow) -> Result<TitleRecord> {
        let client_bytes =
            catalog::decode_client_bytes(&row.client_bytes_blob).ok_or_else(|| {
                StoreError::CatalogCorrupt {
                    reason: format!(
                        "title {} ({:?}) has a malformed client_bytes blob",
                        row.id.0, row.name
                    ),
                }
            })?;
        if client_bytes.len() as u64 != row.round_count {
            return Err(StoreError::CatalogCorrupt {
                reason: format!(
                    "title {} ({:?}) has {} rounds of client bytes but round_count {}",
                    row.id.0,
                    row.name,
                    client_bytes.len(),
                    row.round_count
                ),
            });
        }
        Ok(TitleRecord {
            id: row.id,
            name: row.name,
            source_file_name: row.source_file_name,
            container_kind: row.container_kind,
            content_type: row.content_type,
            duration_ns: row.duration_ns,
            size_bytes: row.size_bytes,
            header_bytes: row.header_bytes,
            round_duration_ns: row.round_duration_ns,
            client_bytes,
            layout_seed: row.layout_seed,
            start_disk: row.start_disk,
            created_unix_ns: row.created_unix_ns,
        })
    }
}

/// Everything needed to read a complete title: its record, its layout
/// (recomputed from the plan and the stored strides) and its extents with
/// checksums.
#[derive(Clone, Debug)]
pub struct StoredTitle {
    pub record: TitleRecord,
    pub layout: TitleLayout,
    /// By round, replica (primary first) and piece.
    pub extents: Vec<ExtentRecord>,
}

impl StoredTitle {
    /// The extents of one round and replica, in piece order.
    pub fn round_extents(&self, round: usize, replica: Replica) -> &[ExtentRecord] {
        let key = (round as u32, replica);
        let start = self.extents.partition_point(|e| (e.round, e.replica) < key);
        let end = self
            .extents
            .partition_point(|e| (e.round, e.replica) <= key);
        &self.extents[start..end]
    }
}

/// The layout inputs the catalog chooses for the next title: round-robin
/// start disk over titles and a per-title seed derived from the array id
/// (the model's `round_robin_start_disk` and `derive_title_seed`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LayoutInputs {
    pub start_disk: DiskIndex,
    pub seed: u64,
}

pub(crate) struct State {
    pub(crate) conn: Connection,
    pub(crate) allocator: ArrayAllocator,
    /// Titles abandoned while the catalog could not be written (a full
    /// filesystem): their rows are deleted and strides freed at the next
    /// catalog change that succeeds, not only at the next open.
    pending_abandons: Vec<(TitleId, TitleStrides)>,
    /// Strides an interrupted ingest held, freed at open, whose device was
    /// not there to give their bytes back (a cluster node's, punched when
    /// [`Store::attach_remote_device`] attaches it).
    unpunched: StrideList,
}

struct Inner {
    dir: PathBuf,
    /// rondo.toml as opened (a device replaced since keeps its old path here;
    /// the file and [`Store::device`] have the new one).
    config: ArrayConfig,
    /// By disk; an entry changes only through [`Store::replace_device`].
    devices: RwLock<Vec<Arc<Device>>>,
    /// By disk: a process elsewhere that reads the device this directory
    /// holds (a cluster's storage node on a shared filesystem), told when
    /// [`Store::replace_device`] makes a new one here.
    readers_elsewhere: RwLock<Vec<Option<Arc<dyn crate::RemoteDevice>>>>,
    state: Mutex<State>,
    recovered: Vec<String>,
    /// Held (flock) for the store's lifetime.
    _lock: File,
}

/// An open data directory. Cheap to clone (shared); `Send + Sync`. Only one
/// process at a time can hold a directory open.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.inner.dir)
            .field("array_id", &self.inner.config.array_id)
            .finish_non_exhaustive()
    }
}

/// Tries of a busy lock after the first, and the pause between them.
const LOCK_RETRIES: u32 = 10;
const LOCK_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(25);

/// Takes the directory's lock (flock on `rondo.lock`, released when the
/// returned file closes, including when the process dies) and records our
/// pid in it for the message another process gets.
pub(crate) fn lock_dir(dir: &Path) -> Result<File> {
    let path = dir.join(LOCK_FILE);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| StoreError::io(format!("opening {}", path.display()), e))?;
    // A process that has just closed the store may have a child between
    // fork and exec that still shares the lock's open file (a test harness
    // spawning processes from other threads did, on a loaded machine), so
    // a busy lock is tried again for a quarter of a second before it is
    // reported (what `rondo ingest` beside a running server waits more).
    let mut result = file.try_lock();
    for _ in 0..LOCK_RETRIES {
        if !matches!(result, Err(std::fs::TryLockError::WouldBlock)) {
            break;
        }
        std::thread::sleep(LOCK_RETRY_PAUSE);
        result = file.try_lock();
    }
    match result {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            return Err(StoreError::Locked {
                dir: dir.to_path_buf(),
                holder_pid: text.trim().parse().ok(),
            });
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(StoreError::io(format!("locking {}", path.display()), e));
        }
    }
    file.set_len(0)
        .and_then(|()| {
            use std::io::{Seek, SeekFrom};
            file.seek(SeekFrom::Start(0))?;
            write!(file, "{}", std::process::id())
        })
        .map_err(|e| StoreError::io(format!("writing {}", path.display()), e))?;
    Ok(file)
}

/// A storage node's devices: `disks` of the data directory at `dir`, opened
/// for reading without the directory's lock (the cluster's manager holds
/// it and owns the catalog; a storage node only reads the extents the
/// manager's commands name). Each device's header is checked as
/// [`Store::open`] checks it, so a node never serves another array's or
/// another disk's bytes.
pub fn open_node_devices(
    dir: &Path,
    disks: &[DiskIndex],
    io_mode: IoMode,
) -> Result<(ArrayConfig, Vec<Arc<Device>>)> {
    if !dir.join(CONFIG_FILE).exists() {
        return Err(StoreError::NotADataDirectory {
            dir: dir.to_path_buf(),
        });
    }
    let config = ArrayConfig::load(dir)?;
    let mut devices = Vec::with_capacity(disks.len());
    for &disk in disks {
        let k = disk.0 as usize;
        if k >= config.devices.len() {
            return Err(StoreError::InvalidConfig {
                reason: format!(
                    "disk {disk} is not in the array at {}: it has disks 0 to {}",
                    dir.display(),
                    config.devices.len().saturating_sub(1)
                ),
            });
        }
        let path = config.device_path(dir, k);
        devices.push(Arc::new(Device::open(
            &path,
            disk,
            &expected_header(&config, k),
            io_mode,
        )?));
    }
    Ok((config, devices))
}

/// Makes the device of disk `disk` of the directory at `dir` the one at
/// `path` (relative paths are inside `dir`): an absent or empty file, a
/// block device without a rondo header, or the disk's own path again. It
/// gets this array's and disk's header, rondo.toml records it, and the old
/// device file is removed when the directory holds it. What a store's
/// [`Store::replace_device`] does to its own devices and a storage node to
/// its (`rondo node storage`, devices of its own).
pub fn replace_device_file(
    dir: &Path,
    disk: DiskIndex,
    path: &Path,
    io_mode: IoMode,
) -> Result<Device> {
    let k = disk.0 as usize;
    let mut config = ArrayConfig::load(dir)?;
    if k >= config.devices.len() {
        return Err(StoreError::Layout(LayoutError::NoSuchDisk {
            disk,
            disk_count: config.disk_count,
        }));
    }
    let resolved = if path.is_absolute() {
        path.to_path_buf()
    } else {
        dir.join(path)
    };
    let unusable = |reason: String| StoreError::DeviceUnusable {
        path: resolved.clone(),
        reason,
    };
    for (other, _) in config.devices.iter().enumerate() {
        if other != k && config.device_path(dir, other) == resolved {
            return Err(unusable(format!("is already disk {other} of this array")));
        }
    }
    let header = expected_header(&config, k);
    let needed_bytes = header.stride_area_offset_bytes + header.capacity_bytes;
    let same_path = config.device_path(dir, k) == resolved;
    let prep = match inspect_device(&resolved, needed_bytes) {
        Ok(prep) => prep,
        // Reusing the disk's own path (the same slot, a new medium):
        // whatever it holds is this disk's, being replaced.
        Err(_) if same_path && resolved.is_file() => DevicePrep::Resize,
        Err(e) => return Err(e),
    };
    let mut changed = Vec::new();
    let prepared = prepare_device(&resolved, needed_bytes, prep, &mut changed).and_then(|()| {
        Device::write_header(&resolved, &header)
            .map_err(|e| unusable(format!("cannot write the header: {e}")))
    });
    if let Err(e) = prepared {
        if !same_path {
            undo_create_devices(&changed);
        }
        return Err(e);
    }
    let device = Device::open(&resolved, disk, &header, io_mode)?;
    let old_entry = config.devices[k].path.clone();
    let old_path = config.device_path(dir, k);
    config.devices[k].path = path.to_path_buf();
    write_config_file(dir, &config)?;
    if !same_path {
        remove_replaced_device(dir, &old_entry, &old_path);
    }
    Ok(device)
}

/// The header disk `k` of `config` must carry.
pub(crate) fn expected_header(config: &ArrayConfig, k: usize) -> DeviceHeader {
    DeviceHeader {
        format_version: FORMAT_VERSION,
        array_id: config.array_id,
        disk_index: DiskIndex(k as u32),
        disk_count: config.disk_count,
        stride_area_offset_bytes: config.header_region_bytes,
        capacity_bytes: config.devices[k].capacity_bytes,
        stride_bytes: config.stride_bytes,
    }
}

/// Removes the device file a replaced disk used, once `rondo.toml` no
/// longer names it, when it is a regular file the data directory holds (a
/// relative path without `..`: the emulated devices rondo created). A
/// device outside the directory or a block device is the operator's and is
/// left alone. Its data is not needed: the disk is rebuilt from the other
/// replicas. A reader that still has it open keeps reading it until it
/// switches to the new device (an unlinked file stays readable).
fn remove_replaced_device(dir: &Path, entry: &Path, old_path: &Path) {
    let inside = entry.is_relative()
        && entry
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
    let regular = std::fs::symlink_metadata(old_path).is_ok_and(|m| m.file_type().is_file());
    if !(inside && regular) {
        return;
    }
    match std::fs::remove_file(old_path) {
        Ok(()) => {
            let _ = sync_dir(dir);
            tracing::info!(path = %old_path.display(), "removed the replaced disk's old device file");
        }
        Err(e) => tracing::warn!(
            path = %old_path.display(),
            error = %e,
            "cannot remove the replaced disk's old device file"
        ),
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io(format!("syncing directory {}", dir.display()), e))
}

/// How a device path will be made ready, decided before anything is changed.
enum DevicePrep {
    /// Absent: create a sparse file.
    Create,
    /// An empty regular file: size it.
    Resize,
    /// A block device large enough and holding no rondo header.
    Block,
}

/// What `Store::create` changed outside the directory, to undo on failure.
enum Changed {
    Created(PathBuf),
    Resized(PathBuf),
    BlockHeader(PathBuf),
}

/// Checks that `path` can become a device of `needed_bytes` without
/// overwriting anything that holds data.
fn inspect_device(path: &Path, needed_bytes: u64) -> Result<DevicePrep> {
    let unusable = |reason: String| StoreError::DeviceUnusable {
        path: path.to_path_buf(),
        reason,
    };
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(DevicePrep::Create),
        Err(e) => Err(unusable(format!("cannot inspect: {e}"))),
        Ok(meta) if meta.is_file() => {
            if meta.len() > 0 {
                Err(unusable(
                    "exists and is not empty; refusing to overwrite it".into(),
                ))
            } else {
                Ok(DevicePrep::Resize)
            }
        }
        Ok(meta) if meta.file_type().is_block_device() => {
            let file = File::open(path).map_err(|e| unusable(format!("cannot open: {e}")))?;
            let size_bytes =
                device_size_bytes(&file).map_err(|e| unusable(format!("cannot size: {e}")))?;
            if size_bytes < needed_bytes {
                return Err(unusable(format!(
                    "holds {size_bytes} bytes but the header region and stride area need \
                     {needed_bytes}"
                )));
            }
            let mut block = vec![0u8; 4096];
            (&file)
                .read_exact(&mut block)
                .map_err(|e| unusable(format!("cannot read: {e}")))?;
            match DeviceHeader::decode(&block) {
                Err(HeaderMismatch::NotARondoDevice) => Ok(DevicePrep::Block),
                Ok(h) => Err(unusable(format!(
                    "already holds disk {} of rondo array {}; wipe its first MiB to reuse it",
                    h.disk_index, h.array_id
                ))),
                Err(_) => Err(unusable(
                    "starts with a damaged rondo header; wipe its first MiB to reuse it".into(),
                )),
            }
        }
        Ok(_) => Err(unusable(
            "is neither a regular file nor a block device".into(),
        )),
    }
}

/// Makes `path` a device of `needed_bytes` as `prep` says; sparse when a file.
fn prepare_device(
    path: &Path,
    needed_bytes: u64,
    prep: DevicePrep,
    changed: &mut Vec<Changed>,
) -> Result<()> {
    let unusable = |reason: String| StoreError::DeviceUnusable {
        path: path.to_path_buf(),
        reason,
    };
    let file = match prep {
        DevicePrep::Create => {
            let file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| unusable(format!("cannot create: {e}")))?;
            changed.push(Changed::Created(path.to_path_buf()));
            Some(file)
        }
        DevicePrep::Resize => {
            let file = OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(|e| unusable(format!("cannot open: {e}")))?;
            changed.push(Changed::Resized(path.to_path_buf()));
            Some(file)
        }
        DevicePrep::Block => {
            changed.push(Changed::BlockHeader(path.to_path_buf()));
            None
        }
    };
    if let Some(file) = file {
        // Sparse: space is taken only where titles are written.
        file.set_len(needed_bytes)
            .map_err(|e| unusable(format!("cannot size to {needed_bytes} bytes: {e}")))?;
    }
    Ok(())
}

/// Undoes a failed `Store::create`: what it created in `dir` (which was empty
/// or absent) and what it changed outside.
fn undo_create(dir: &Path, created_dir: bool, changed: &[Changed]) {
    // Best effort: the error that made create fail is the one reported.
    undo_create_devices(changed);
    if created_dir {
        let _ = std::fs::remove_dir_all(dir);
    } else if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The steps of `Store::create` after the directory is known to be empty:
/// devices (all checked before any is touched), catalog, then rondo.toml.
fn create_in(dir: &Path, array: &ArrayConfig, changed: &mut Vec<Changed>) -> Result<File> {
    let lock = lock_dir(dir)?;
    let headers: Vec<DeviceHeader> = (0..array.devices.len())
        .map(|k| expected_header(array, k))
        .collect();
    let needed = |h: &DeviceHeader| h.stride_area_offset_bytes + h.capacity_bytes;
    let preps = (0..array.devices.len())
        .map(|k| inspect_device(&array.device_path(dir, k), needed(&headers[k])))
        .collect::<Result<Vec<_>>>()?;
    for (k, prep) in preps.into_iter().enumerate() {
        let path = array.device_path(dir, k);
        prepare_device(&path, needed(&headers[k]), prep, changed)?;
        Device::write_header(&path, &headers[k]).map_err(|e| StoreError::DeviceUnusable {
            path: path.clone(),
            reason: format!("cannot write the header: {e}"),
        })?;
    }

    let catalog_path = dir.join(CATALOG_FILE);
    let mut conn = catalog::open(&catalog_path, true)?;
    catalog::migrate(&mut conn, &catalog_path, true)?;
    conn.execute(
        "INSERT INTO catalog_info (key, value) VALUES (?1, ?2), (?3, '0')",
        params![
            catalog::INFO_ARRAY_ID,
            array.array_id.to_string(),
            catalog::INFO_NEXT_TITLE_ID
        ],
    )
    .map_err(|e| StoreError::catalog("recording the array id", e))?;
    drop(conn);

    write_config_file(dir, array)?;
    Ok(lock)
}

/// Writes `dir/rondo.toml` atomically: temp file, fsync, rename, fsync of
/// the directory.
fn write_config_file(dir: &Path, array: &ArrayConfig) -> Result<()> {
    crate::atomic::write_atomically(dir, CONFIG_FILE, array.to_toml().as_bytes())
}

/// Undoes device preparation outside a directory (a failed replacement).
fn undo_create_devices(changed: &[Changed]) {
    for change in changed.iter().rev() {
        let _ = match change {
            Changed::Created(path) => std::fs::remove_file(path),
            Changed::Resized(path) => OpenOptions::new()
                .write(true)
                .open(path)
                .and_then(|f| f.set_len(0)),
            Changed::BlockHeader(path) => OpenOptions::new()
                .write(true)
                .open(path)
                .and_then(|f| std::os::unix::fs::FileExt::write_all_at(&f, &[0u8; 4096], 0)),
        };
    }
}

impl Store {
    /// Creates a data directory at `dir` (which must be absent or empty):
    /// devices with headers, the catalog, then rondo.toml last, so a crash
    /// during creation leaves no directory that opens.
    pub fn create(dir: impl AsRef<Path>, config: StoreConfig) -> Result<Store> {
        let dir = dir.as_ref();
        let invalid = |reason: String| StoreError::InvalidConfig { reason };
        if let Some(paths) = &config.device_paths
            && paths.len() != config.disk_count as usize
        {
            return Err(invalid(format!(
                "{} device paths given for {} disks",
                paths.len(),
                config.disk_count
            )));
        }
        let array_id = match config.array_id {
            Some(id) => id,
            None => ArrayId::random()
                .map_err(|e| StoreError::io("drawing an array id from /dev/urandom", e))?,
        };
        let array = ArrayConfig::from_store_config(&config, array_id);
        array.validate().map_err(invalid)?;

        let created_dir = match std::fs::read_dir(dir) {
            Ok(mut entries) => {
                if entries.next().is_some() {
                    return Err(StoreError::DirectoryNotEmpty {
                        dir: dir.to_path_buf(),
                    });
                }
                false
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| StoreError::io(format!("creating {}", dir.display()), e))?;
                true
            }
            Err(e) => {
                return Err(StoreError::io(format!("reading {}", dir.display()), e));
            }
        };
        let mut changed = Vec::new();
        match create_in(dir, &array, &mut changed) {
            Ok(lock) => Store::open_locked(dir, lock, IoMode::Direct),
            Err(e) => {
                undo_create(dir, created_dir, &changed);
                Err(e)
            }
        }
    }

    /// Opens the data directory at `dir`: takes its lock, validates
    /// rondo.toml, every device header and the catalog schema, removes titles
    /// left `writing` by a crash and rebuilds the stride allocators.
    pub fn open(dir: impl AsRef<Path>) -> Result<Store> {
        Store::open_with_io_mode(dir, IoMode::Direct)
    }

    /// [`Store::open`], with `IoMode::Buffered` forcing buffered device access.
    pub fn open_with_io_mode(dir: impl AsRef<Path>, io_mode: IoMode) -> Result<Store> {
        Store::open_dir(dir.as_ref(), io_mode, false)
    }

    fn open_dir(dir: &Path, io_mode: IoMode, devices_elsewhere: bool) -> Result<Store> {
        if !dir.join(CONFIG_FILE).exists() {
            return Err(StoreError::NotADataDirectory {
                dir: dir.to_path_buf(),
            });
        }
        let lock = lock_dir(dir)?;
        Store::open_locked_with(dir, lock, io_mode, devices_elsewhere)
    }

    /// [`Store::open`] for a cluster's manager, whose storage nodes may
    /// hold the devices on hosts of their own: a device missing here is
    /// not an error even when all are (the manager attaches each node's
    /// with [`Store::attach_remote_device`] before it serves).
    pub fn open_devices_elsewhere(dir: impl AsRef<Path>) -> Result<Store> {
        Store::open_dir(dir.as_ref(), IoMode::Direct, true)
    }

    fn open_locked(dir: &Path, lock: File, io_mode: IoMode) -> Result<Store> {
        Store::open_locked_with(dir, lock, io_mode, false)
    }

    fn open_locked_with(
        dir: &Path,
        lock: File,
        io_mode: IoMode,
        devices_elsewhere: bool,
    ) -> Result<Store> {
        let config = ArrayConfig::load(dir)?;
        let mut devices = Vec::with_capacity(config.devices.len());
        let mut first_error = None;
        for k in 0..config.devices.len() {
            let path = config.device_path(dir, k);
            let header = expected_header(&config, k);
            let disk = DiskIndex(k as u32);
            match Device::open(&path, disk, &header, io_mode) {
                Ok(device) => devices.push(Arc::new(device)),
                // Missing or blank: the disk is dead, not misconfigured. The
                // store opens without it (the server starts with it failed);
                // a foreign or reordered device is still refused, since
                // rebuilding over it would destroy what it holds.
                Err(e) if device_is_missing_or_blank(&e) => {
                    devices.push(Arc::new(Device::unavailable(
                        &path,
                        disk,
                        &header,
                        e.to_string(),
                    )));
                    first_error.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        if let Some(e) = first_error
            && !devices_elsewhere
            && devices.iter().all(|d| d.unavailable_reason().is_some())
        {
            // Nothing to serve from: most likely the wrong directory.
            return Err(e);
        }
        let buffered: Vec<String> = devices
            .iter()
            .filter(|d| d.io_mode() == IoMode::Buffered)
            .map(|d| d.path().display().to_string())
            .collect();
        if io_mode == IoMode::Direct && !buffered.is_empty() {
            eprintln!(
                "rondo-store: warning: O_DIRECT is not supported for {}; reading through the page \
                 cache, so measured disk times include cache hits",
                buffered.join(", ")
            );
        }

        let catalog_path = dir.join(CATALOG_FILE);
        let mut conn = catalog::open(&catalog_path, false)?;
        catalog::migrate(&mut conn, &catalog_path, false)?;
        let catalog_array = catalog::info(&conn, catalog::INFO_ARRAY_ID)?.unwrap_or_default();
        if catalog_array != config.array_id.to_string() {
            return Err(StoreError::ForeignCatalog {
                path: catalog_path,
                found: catalog_array,
                expected: config.array_id,
            });
        }

        let (recovered, recovered_strides) = recover(&mut conn)?;
        let stride_counts = config.stride_counts();
        let rows = catalog::stride_rows(&conn, None)?;
        let titles = catalog::title_rows(&conn, true)?;
        let mut held = Vec::with_capacity(titles.len());
        for title in &titles {
            let start = rows.partition_point(|r| r.title < title.id);
            let end = rows.partition_point(|r| r.title <= title.id);
            held.push(
                catalog::assemble_strides(title.id, &rows[start..end], config.disk_count)
                    .map_err(|reason| StoreError::CatalogCorrupt { reason })?,
            );
        }
        let allocator = ArrayAllocator::rebuild(&stride_counts, &held).map_err(|e| {
            StoreError::CatalogCorrupt {
                reason: format!("the titles' strides cannot be rebuilt: {e}"),
            }
        })?;

        // An interrupted ingest's strides give their bytes back to the
        // filesystem, as an abandoned title's do; those of a disk whose
        // device is elsewhere wait until it is attached.
        let stride_bytes = config.stride_bytes;
        let mut unpunched = Vec::new();
        for (disk, stride) in recovered_strides {
            match devices.get(disk.index()) {
                Some(device) if device.unavailable_reason().is_none() => {
                    punch_stride(device, stride, stride_bytes)
                }
                Some(_) => unpunched.push((disk, stride)),
                None => {}
            }
        }

        Ok(Store {
            inner: Arc::new(Inner {
                dir: dir.to_path_buf(),
                config,
                readers_elsewhere: RwLock::new(vec![None; devices.len()]),
                devices: RwLock::new(devices),
                state: Mutex::new(State {
                    conn,
                    allocator,
                    pending_abandons: Vec::new(),
                    unpunched,
                }),
                recovered,
                _lock: lock,
            }),
        })
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the catalog half
        // changed (transactions roll back), so a poisoned lock is usable.
        self.inner
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Records how the directory is served by default (rondo.toml's
    /// `[serving]` table; temp file, fsync, rename). The loaded
    /// configuration (`config`) keeps what it was opened with.
    pub fn set_serving(&self, serving: &crate::config::ServingSettings) -> Result<()> {
        let dir = &self.inner.dir;
        let mut config = ArrayConfig::load(dir)?;
        serving.validate().map_err(|reason| StoreError::BadConfig {
            path: dir.join(CONFIG_FILE),
            reason,
        })?;
        config.serving = serving.clone();
        write_config_file(dir, &config)
    }

    /// rondo.toml's contents.
    pub fn config(&self) -> &ArrayConfig {
        &self.inner.config
    }

    pub fn array_id(&self) -> ArrayId {
        self.inner.config.array_id
    }

    /// The parameters every title of this array is planned with.
    pub fn layout_params(&self) -> LayoutParams {
        self.inner.config.layout_params()
    }

    /// The device of `disk`, to hand to that disk's I/O thread.
    pub fn device(&self, disk: DiskIndex) -> Arc<Device> {
        Arc::clone(&self.devices()[disk.0 as usize])
    }

    /// All devices, by disk.
    pub fn devices(&self) -> Vec<Arc<Device>> {
        self.inner
            .devices
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Maps a new device at `path` to disk `disk` (a replacement for a failed
    /// one): checks that `path` holds nothing (an absent or empty file, or a
    /// block device without a rondo header; the disk's own current path may
    /// be reused), makes it a device of the same size with a header for this
    /// array and disk index, records the path in rondo.toml (temp file,
    /// fsync, rename) and uses it from now on. Relative paths are inside the
    /// data directory. The new device holds no data: the caller rebuilds
    /// it from the other replicas, and must not read it meanwhile. The old
    /// device file is removed when the data directory holds it (a relative
    /// path, a regular file); one outside it, or a block device, stays.
    pub fn replace_device(&self, disk: DiskIndex, path: &Path) -> Result<Arc<Device>> {
        let dir = &self.inner.dir;
        let k = disk.0 as usize;
        let disk_count = self.inner.config.disk_count;
        if k >= disk_count as usize {
            return Err(StoreError::Layout(LayoutError::NoSuchDisk {
                disk,
                disk_count,
            }));
        }
        let current = self.device(disk);
        if let Some(remote) = current.remote_handle() {
            // A storage node holds the disk: it makes the new device on
            // its host (at `path` there) and records it in its rondo.toml;
            // this directory records the same path.
            remote
                .replace(path)
                .map_err(|e| StoreError::DeviceUnusable {
                    path: path.to_path_buf(),
                    reason: e.to_string(),
                })?;
            let mut config = ArrayConfig::load(dir)?;
            config.devices[k].path = path.to_path_buf();
            write_config_file(dir, &config)?;
            return Ok(current);
        }
        let device = Arc::new(replace_device_file(dir, disk, path, current.io_mode())?);
        self.inner
            .devices
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())[k] = Arc::clone(&device);
        let reader = self
            .inner
            .readers_elsewhere
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())[k]
            .clone();
        if let Some(reader) = reader {
            // The node still reads the old device (removed from the
            // directory, still open there): it must switch before the
            // rebuild's copies are read back.
            reader.adopt(path).map_err(|e| StoreError::DeviceUnusable {
                path: device.path().to_path_buf(),
                reason: format!(
                    "made here, but the process that reads it did not switch to it \
                         ({e}); restart that storage node before restoring the disk"
                ),
            })?;
        }
        Ok(device)
    }

    /// Disk `disk`'s device stays this directory's, and `reader` (a
    /// cluster's storage node on a shared filesystem) reads it too: a
    /// replacement made here ([`Store::replace_device`]) is announced to it
    /// ([`crate::RemoteDevice::adopt`]), so that it reads the new device.
    pub fn attach_device_reader(&self, disk: DiskIndex, reader: Arc<dyn crate::RemoteDevice>) {
        self.inner
            .readers_elsewhere
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())[disk.index()] = Some(reader);
    }

    /// Disk `disk`'s device is `remote`'s from now on (a cluster's storage
    /// node that holds it): every write, read, hole and sync of the store
    /// (ingest, rebuild copies, recovery) goes there. Its geometry is the
    /// one rondo.toml gives the disk; the node checks the device's header.
    pub fn attach_remote_device(&self, disk: DiskIndex, remote: Arc<dyn crate::RemoteDevice>) {
        let k = disk.index();
        let header = expected_header(&self.inner.config, k);
        let device = Arc::new(Device::remote(disk, &header, remote));
        // Under the state lock, so no title is placed on a stride between
        // the check that it is still free and its punch.
        let mut state = self.state();
        self.inner
            .devices
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())[k] = Arc::clone(&device);
        let stride_bytes = self.inner.config.stride_bytes;
        let state = &mut *state;
        state.unpunched.retain(|&(d, stride)| {
            if d != disk {
                return true;
            }
            if state.allocator.disk(d).is_free(stride) {
                punch_stride(&device, stride, stride_bytes);
            }
            false
        });
    }

    /// Disks whose device was missing or blank when the store opened (and
    /// has not been replaced since), with why.
    pub fn unavailable_disks(&self) -> Vec<(DiskIndex, String)> {
        self.devices()
            .iter()
            .filter_map(|d| d.unavailable_reason().map(|r| (d.disk(), r.to_string())))
            .collect()
    }

    /// The array's failed disks, as last recorded (`disk-state.toml`).
    pub fn disk_states(&self) -> Result<DiskStates> {
        DiskStates::load(&self.inner.dir, self.inner.config.disk_count)
    }

    /// Records `disk` as failed, so that it stays failed across restarts
    /// until a rebuild completes. Callers serialise changes (the server
    /// makes them under its core lock).
    pub fn record_disk_failed(
        &self,
        disk: DiskIndex,
        reason: &str,
        since_unix_s: u64,
    ) -> Result<()> {
        let mut states = self.disk_states()?;
        if states.is_failed(disk) {
            return Ok(());
        }
        states.failed.insert(
            disk.0.to_string(),
            FailedDisk {
                reason: reason.to_string(),
                since_unix_s,
            },
        );
        states.save(&self.inner.dir)
    }

    /// The bad extents and lost rounds last saved (`extent-faults.toml`).
    pub fn extent_faults(&self) -> Result<ExtentFaults> {
        ExtentFaultRecords::load(&self.inner.dir, self.inner.config.disk_count)
            .map(|r| r.to_faults())
    }

    /// Saves the array's bad extents and lost rounds, replacing what was
    /// saved. Callers serialise saves (the server has one thread for them).
    pub fn save_extent_faults(&self, faults: &ExtentFaults) -> Result<()> {
        ExtentFaultRecords::from_faults(faults).save(&self.inner.dir)
    }

    /// Records that `disk` serves again (its rebuild completed).
    pub fn record_disk_serving(&self, disk: DiskIndex) -> Result<()> {
        let mut states = self.disk_states()?;
        if states.failed.remove(&disk.0.to_string()).is_some() {
            states.save(&self.inner.dir)?;
        }
        Ok(())
    }

    /// Names of the titles that were being written when the directory was
    /// last closed uncleanly and were removed by this open.
    pub fn recovered_titles(&self) -> &[String] {
        &self.inner.recovered
    }

    /// Free strides per disk.
    pub fn free_strides(&self) -> Vec<u64> {
        let state = self.state();
        (0..self.inner.config.disk_count)
            .map(|k| state.allocator.disk(DiskIndex(k)).free_count())
            .collect()
    }

    /// The highest stride any disk holds data in (a title's, stored or
    /// being written), `None` when every disk is empty: where the data ends
    /// (`titles::rondo_bound` charges the stroke up to it under
    /// `Stroke::Data`).
    pub fn highest_allocated_stride(&self) -> Option<u64> {
        self.state().allocator.highest_allocated()
    }

    /// Strides per disk.
    pub fn stride_counts(&self) -> Vec<u64> {
        self.inner.config.stride_counts()
    }

    /// The start disk and seed for the next title (see [`LayoutInputs`]).
    pub fn layout_inputs(&self) -> Result<LayoutInputs> {
        let state = self.state();
        let next = next_title_id(&state.conn)?;
        Ok(LayoutInputs {
            start_disk: round_robin_start_disk(
                next,
                self.inner.config.disk_count,
                self.inner.config.stripe_disks,
            ),
            seed: derive_title_seed(self.inner.config.array_id.placement_seed(), TitleId(next)),
        })
    }

    /// Starts writing a title laid out by `plan` (made with
    /// [`Store::layout_params`] from `meta.client_bytes`). Allocates its
    /// strides and records it as `writing` in one transaction; until
    /// [`TitleWriter::commit`] no reader sees it. A full disk or a taken name
    /// changes nothing.
    pub fn begin_title(&self, meta: TitleMeta, plan: &TitlePlan) -> Result<TitleWriter> {
        validate_title_name(&meta.name)?;
        let config = &self.inner.config;
        let mismatch = |reason: String| StoreError::PlanMismatch {
            name: meta.name.clone(),
            reason,
        };
        if meta.round_duration_ns != config.round_duration_ns {
            return Err(mismatch(format!(
                "its schedule is for {} ns rounds but the array uses {} ns rounds",
                meta.round_duration_ns, config.round_duration_ns
            )));
        }
        let params = config.layout_params();
        if *plan.params() != params {
            return Err(mismatch(format!(
                "the plan was made for {:?}, the array uses {:?}",
                plan.params(),
                params
            )));
        }
        let schedule = Schedule::from_client_bytes(
            meta.client_bytes.clone(),
            meta.round_duration_ns,
            config.block_bytes,
        )
        .map_err(|e| mismatch(e.to_string()))?;
        // The catalog keeps only the inputs of the plan; check that they
        // reproduce it, or the layout could not be rebuilt on open.
        let replanned = TitlePlan::new(
            &schedule.disk_read_bytes,
            &params,
            plan.start_disk(),
            plan.seed(),
        )
        .map_err(|e| mismatch(e.to_string()))?;
        if replanned != *plan {
            return Err(mismatch(
                "the plan does not match the title's client bytes (plan it from this title's \
                 schedule)"
                    .into(),
            ));
        }
        let size_bytes = schedule.total_bytes();
        if meta.header_bytes > size_bytes {
            return Err(mismatch(format!(
                "header of {} bytes is longer than the title ({size_bytes} bytes)",
                meta.header_bytes
            )));
        }

        let mut guard = self.state();
        let state = &mut *guard;
        // Space an earlier failed ingest could not give back yet.
        if !state.pending_abandons.is_empty() {
            let _ = retry_abandons(state);
        }
        let tx = state
            .conn
            .transaction()
            .map_err(|e| StoreError::catalog("beginning a title", e))?;
        let taken: bool = tx
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM titles WHERE name = ?1)",
                [&meta.name],
                |r| r.get(0),
            )
            .map_err(|e| StoreError::catalog("checking the title name", e))?;
        if taken {
            return Err(StoreError::NameTaken { name: meta.name });
        }
        let layout = state.allocator.place(plan).map_err(|e| match e {
            LayoutError::DiskFull {
                disk,
                needed_strides,
                free_strides,
            } => StoreError::DiskFull {
                name: meta.name.clone(),
                disk,
                needed_strides,
                free_strides,
            },
            other => StoreError::Layout(other),
        })?;
        let recorded = (|| -> rusqlite::Result<TitleId> {
            let id = next_title_id_in(&tx)?;
            tx.execute(
                "INSERT INTO titles (id, name, source_file_name, container_kind, content_type, \
                 duration_ns, size_bytes, header_bytes, round_duration_ns, round_count, \
                 client_bytes, layout_seed, start_disk, state, created_unix_ns) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, 'writing', ?14)",
                params![
                    id as i64,
                    meta.name,
                    meta.source_file_name,
                    meta.container_kind,
                    meta.content_type,
                    meta.duration_ns as i64,
                    size_bytes as i64,
                    meta.header_bytes as i64,
                    meta.round_duration_ns as i64,
                    meta.client_bytes.len() as i64,
                    catalog::encode_client_bytes(&meta.client_bytes),
                    plan.seed() as i64,
                    plan.start_disk().0,
                    meta.created_unix_ns as i64,
                ],
            )?;
            catalog::insert_strides(&tx, TitleId(id), layout.strides())?;
            tx.execute(
                "UPDATE catalog_info SET value = ?1 WHERE key = ?2",
                params![(id + 1).to_string(), catalog::INFO_NEXT_TITLE_ID],
            )?;
            tx.commit()?;
            Ok(TitleId(id))
        })();
        let id = match recorded {
            Ok(id) => id,
            Err(e) => {
                state
                    .allocator
                    .release(layout.strides())
                    .expect("strides placed a moment ago are allocated");
                return Err(StoreError::catalog(
                    format!("recording title {:?}", meta.name),
                    e,
                ));
            }
        };
        drop(guard);

        let max_round_bytes = schedule.disk_read_bytes.iter().copied().max().unwrap_or(0) as usize;
        let record = TitleRecord {
            id,
            name: meta.name,
            source_file_name: meta.source_file_name,
            container_kind: meta.container_kind,
            content_type: meta.content_type,
            duration_ns: meta.duration_ns,
            size_bytes,
            header_bytes: meta.header_bytes,
            round_duration_ns: meta.round_duration_ns,
            client_bytes: meta.client_bytes,
            layout_seed: plan.seed(),
            start_disk: plan.start_disk(),
            created_unix_ns: meta.created_unix_ns,
        };
        Ok(TitleWriter {
            store: self.clone(),
            record,
            layout,
            next_round: 0,
            extents: Vec::new(),
            round_buf: AlignedBuf::zeroed(max_round_bytes),
            backup_buf: AlignedBuf::zeroed(max_round_bytes),
            touched: vec![false; self.inner.config.disk_count as usize],
            finished: false,
            keyframes_blob: None,
        })
    }

    /// Complete titles, by id.
    pub fn titles(&self) -> Result<Vec<TitleRecord>> {
        let rows = catalog::title_rows(&self.state().conn, true)?;
        rows.into_iter().map(TitleRecord::from_row).collect()
    }

    /// The complete title with id `id`, if any.
    pub fn title(&self, id: TitleId) -> Result<Option<TitleRecord>> {
        let row = catalog::complete_title_row(&self.state().conn, TitleKey::Id(id))?;
        row.map(TitleRecord::from_row).transpose()
    }

    /// The keyframes of complete title `id`: `None` when it was stored
    /// before schema version 2 (or without keyframes).
    pub fn title_keyframes(&self, id: TitleId) -> Result<Option<Vec<catalog::KeyframeRecord>>> {
        catalog::keyframes(&self.state().conn, id)
    }

    /// The complete title named `name`, if any.
    pub fn title_by_name(&self, name: &str) -> Result<Option<TitleRecord>> {
        let row = catalog::complete_title_row(&self.state().conn, TitleKey::Name(name))?;
        row.map(TitleRecord::from_row).transpose()
    }

    /// The plan of a stored title, recomputed from its catalog record.
    pub fn title_plan(&self, record: &TitleRecord) -> Result<TitlePlan> {
        let schedule = record.schedule(self.inner.config.block_bytes);
        Ok(TitlePlan::new(
            &schedule.disk_read_bytes,
            &self.layout_params(),
            record.start_disk,
            record.layout_seed,
        )?)
    }

    /// A complete title with its layout and extents, ready to read.
    pub fn load_title(&self, id: TitleId) -> Result<StoredTitle> {
        let state = self.state();
        let row = catalog::complete_title_row(&state.conn, TitleKey::Id(id))?
            .ok_or(StoreError::TitleNotFound(id))?;
        let record = TitleRecord::from_row(row)?;
        let rows = catalog::stride_rows(&state.conn, Some(id))?;
        let strides = catalog::assemble_strides(id, &rows, self.inner.config.disk_count)
            .map_err(|reason| StoreError::CatalogCorrupt { reason })?;
        let extents = catalog::extent_rows(&state.conn, id)?;
        drop(state);
        let plan = self.title_plan(&record)?;
        let layout =
            TitleLayout::from_strides(&plan, strides).map_err(|e| StoreError::CatalogCorrupt {
                reason: format!("title {} ({:?}): {e}", id.0, record.name),
            })?;
        Ok(StoredTitle {
            record,
            layout,
            extents,
        })
    }

    /// Reads `buf.len()` bytes at `device_offset_bytes` of `disk`'s stride
    /// area (4096-aligned offset, length and buffer).
    pub fn read_extent(
        &self,
        disk: DiskIndex,
        device_offset_bytes: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        let device = self
            .devices()
            .get(disk.0 as usize)
            .cloned()
            .ok_or(StoreError::Layout(LayoutError::NoSuchDisk {
                disk,
                disk_count: self.inner.config.disk_count,
            }))?;
        Ok(device.read_at(device_offset_bytes, buf)?)
    }

    /// Reads round `round` of `title` from `replica`, verifying every
    /// extent's checksum, and returns the round's client bytes (padding
    /// removed; backup fragments reassembled in round order).
    pub fn read_round(
        &self,
        title: &StoredTitle,
        round: usize,
        replica: Replica,
    ) -> Result<Vec<u8>> {
        let layout = title.layout.round(round);
        let padded_bytes = layout.primary.bytes() as usize;
        let client_bytes = title.record.client_bytes[round] as usize;
        let records = title.round_extents(round, replica);
        if replica == Replica::Backup && layout.backups.is_empty() && padded_bytes > 0 {
            return Err(StoreError::NoBackup {
                title: title.record.id,
                round,
            });
        }
        let mut stored = AlignedBuf::zeroed(padded_bytes);
        // (disk, extent) in stored order.
        let places: Vec<_> = match replica {
            Replica::Primary => layout
                .primary
                .as_slice()
                .iter()
                .map(|e| (layout.primary_disk, *e))
                .collect(),
            Replica::Backup => layout
                .backups
                .iter()
                .flat_map(|b| b.extents.as_slice().iter().map(move |e| (b.disk, *e)))
                .collect(),
        };
        if places.len() != records.len() {
            return Err(StoreError::CatalogCorrupt {
                reason: format!(
                    "title {} round {round} {replica:?}: the layout has {} extents, the catalog {}",
                    title.record.id.0,
                    places.len(),
                    records.len()
                ),
            });
        }
        let mut at = 0usize;
        for ((disk, extent), record) in places.iter().zip(records) {
            if record.disk != *disk
                || record.device_offset_bytes != extent.device_offset_bytes
                || record.length_bytes != extent.length_bytes
            {
                return Err(StoreError::CatalogCorrupt {
                    reason: format!(
                        "title {} round {round} {replica:?} piece {}: the catalog's extent \
                         differs from the layout's",
                        title.record.id.0, record.piece
                    ),
                });
            }
            let slice = &mut stored[at..at + extent.length_bytes as usize];
            self.read_extent(*disk, extent.device_offset_bytes, slice)?;
            verify_extent(record, slice)?;
            at += extent.length_bytes as usize;
        }
        let mut out = match replica {
            Replica::Primary => stored.to_vec(),
            Replica::Backup => {
                let mut round_bytes = vec![0u8; padded_bytes];
                let mut cursor = 0usize;
                for fragment in layout.backups.iter().flat_map(|b| b.fragments.iter()) {
                    let len = (fragment.end - fragment.start) as usize;
                    round_bytes[fragment.start as usize..fragment.end as usize]
                        .copy_from_slice(&stored[cursor..cursor + len]);
                    cursor += len;
                }
                round_bytes
            }
        };
        out.truncate(client_bytes);
        Ok(out)
    }

    /// Deletes a complete title and frees its strides, in one transaction.
    /// The caller makes sure no stream still reads it.
    pub fn delete_title(&self, id: TitleId) -> Result<()> {
        let mut guard = self.state();
        let state = &mut *guard;
        let row = catalog::complete_title_row(&state.conn, TitleKey::Id(id))?
            .ok_or(StoreError::TitleNotFound(id))?;
        let rows = catalog::stride_rows(&state.conn, Some(id))?;
        let strides = catalog::assemble_strides(id, &rows, self.inner.config.disk_count)
            .map_err(|reason| StoreError::CatalogCorrupt { reason })?;
        let tx = state
            .conn
            .transaction()
            .map_err(|e| StoreError::catalog("deleting a title", e))?;
        tx.execute("DELETE FROM titles WHERE id = ?1", [id.0 as i64])
            .map_err(|e| StoreError::catalog(format!("deleting title {:?}", row.name), e))?;
        tx.commit()
            .map_err(|e| StoreError::catalog(format!("deleting title {:?}", row.name), e))?;
        state
            .allocator
            .release(&strides)
            .map_err(|e| StoreError::CatalogCorrupt {
                reason: format!(
                    "title {:?} was deleted but its strides could not be freed: {e}",
                    row.name
                ),
            })
    }

    /// Checks this open store (see [`crate::fsck()`]); runs under the store's
    /// own lock.
    pub fn fsck(&self) -> crate::fsck::FsckReport {
        let state = self.state();
        crate::fsck::check_open(
            &self.inner.dir,
            &self.inner.config,
            &self.devices(),
            &state.conn,
        )
    }

    /// Removes a `writing` title and frees its strides (a writer that gave up).
    fn abandon(&self, id: TitleId, strides: &TitleStrides) -> Result<()> {
        // The bytes written go back to the filesystem at once (an ingest
        // that failed on a full filesystem must not keep it full); nothing
        // reads a title being written.
        let stride_bytes = self.inner.config.stride_bytes;
        let devices = self.devices();
        for (disk, _, stride) in strides.iter() {
            punch_stride(&devices[disk.index()], stride, stride_bytes);
        }
        let mut guard = self.state();
        let state = &mut *guard;
        state.pending_abandons.push((id, strides.clone()));
        retry_abandons(state)
    }
}

/// Deletes the pending abandoned titles' rows and frees their strides, in
/// order; those whose deletion fails (the catalog cannot be written) stay
/// pending for the next try.
fn retry_abandons(state: &mut State) -> Result<()> {
    let pending = std::mem::take(&mut state.pending_abandons);
    let mut first_error = None;
    for (id, strides) in pending {
        let deleted = state.conn.transaction().and_then(|tx| {
            let removed = tx.execute(
                "DELETE FROM titles WHERE id = ?1 AND state = 'writing'",
                [id.0 as i64],
            )?;
            tx.commit().map(|()| removed)
        });
        match deleted {
            Ok(1) => state.allocator.release(&strides)?,
            Ok(_) => {}
            Err(e) => {
                first_error.get_or_insert(StoreError::catalog("abandoning a title", e));
                state.pending_abandons.push((id, strides));
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

fn next_title_id_in(conn: &Connection) -> rusqlite::Result<u64> {
    let text: String = conn.query_row(
        "SELECT value FROM catalog_info WHERE key = ?1",
        [catalog::INFO_NEXT_TITLE_ID],
        |r| r.get(0),
    )?;
    text.parse::<u64>().map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
    })
}

fn next_title_id(conn: &Connection) -> Result<u64> {
    next_title_id_in(conn).map_err(|e| StoreError::catalog("reading the next title id", e))
}

/// Gives stride `stride`'s bytes back to the filesystem (a hole in a
/// sparse device file; best effort): an abandoned or interrupted title's.
fn punch_stride(device: &Device, stride: u64, stride_bytes: u64) {
    device.punch_hole(stride * stride_bytes, stride_bytes);
}

/// (disk, stride index) pairs.
type StrideList = Vec<(DiskIndex, u64)>;

/// Crash recovery: deletes every title left `writing` (its strides and
/// extents go with it) in one transaction; returns their names and the
/// strides they held.
fn recover(conn: &mut Connection) -> Result<(Vec<String>, StrideList)> {
    let tx = conn
        .transaction()
        .map_err(|e| StoreError::catalog("recovering unfinished titles", e))?;
    let strides = {
        let mut stmt = tx
            .prepare(
                "SELECT s.disk, s.stride_index FROM title_strides s JOIN titles t \
                 ON t.id = s.title_id WHERE t.state = 'writing' ORDER BY s.disk, s.stride_index",
            )
            .map_err(|e| StoreError::catalog("recovering unfinished titles", e))?;
        stmt.query_map([], |r| {
            Ok((DiskIndex(r.get::<_, u32>(0)?), r.get::<_, i64>(1)? as u64))
        })
        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        .map_err(|e| StoreError::catalog("recovering unfinished titles", e))?
    };
    let names = {
        let mut stmt = tx
            .prepare("SELECT name FROM titles WHERE state = 'writing' ORDER BY id")
            .map_err(|e| StoreError::catalog("recovering unfinished titles", e))?;
        stmt.query_map([], |r| r.get::<_, String>(0))
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
            .map_err(|e| StoreError::catalog("recovering unfinished titles", e))?
    };
    tx.execute("DELETE FROM titles WHERE state = 'writing'", [])
        .map_err(|e| StoreError::catalog("recovering unfinished titles", e))?;
    tx.commit()
        .map_err(|e| StoreError::catalog("recovering unfinished titles", e))?;
    Ok((names, strides))
}

/// Writes one title, round by round; see the module docs. Dropping it without
/// [`TitleWriter::commit`] removes the title and frees its strides.
pub struct TitleWriter {
    store: Store,
    record: TitleRecord,
    layout: TitleLayout,
    next_round: usize,
    extents: Vec<ExtentRecord>,
    round_buf: AlignedBuf,
    backup_buf: AlignedBuf,
    touched: Vec<bool>,
    finished: bool,
    /// Encoded keyframes to record at commit (schema version 2).
    keyframes_blob: Option<Vec<u8>>,
}

impl std::fmt::Debug for TitleWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TitleWriter")
            .field("title", &self.record.id)
            .field("name", &self.record.name)
            .field("next_round", &self.next_round)
            .finish_non_exhaustive()
    }
}

impl TitleWriter {
    /// The id the title will have.
    pub fn id(&self) -> TitleId {
        self.record.id
    }

    /// Where every round goes.
    pub fn layout(&self) -> &TitleLayout {
        &self.layout
    }

    /// Number of rounds.
    /// Keyframes to record with the title when it commits (ascending in
    /// time and byte offset, each offset inside the stored stream). Without
    /// this call the title has none recorded (NULL), as one stored before
    /// schema version 2.
    pub fn set_keyframes(&mut self, keyframes: &[catalog::KeyframeRecord]) -> Result<()> {
        let size_bytes = self.record.size_bytes;
        let blob = catalog::encode_keyframes(keyframes)
            .filter(|_| keyframes.iter().all(|k| k.byte_offset < size_bytes))
            .ok_or_else(|| StoreError::CatalogCorrupt {
                reason: format!(
                    "title {} ({:?}): keyframes must ascend in time and offset and lie inside \
                     its {size_bytes} bytes",
                    self.record.id.0, self.record.name
                ),
            })?;
        self.keyframes_blob = Some(blob);
        Ok(())
    }

    pub fn rounds(&self) -> usize {
        self.record.client_bytes.len()
    }

    /// The round [`TitleWriter::write_round`] expects next.
    pub fn next_round(&self) -> usize {
        self.next_round
    }

    /// Writes round `round` (rounds are written in order, from 0): `data`
    /// is exactly the round's client bytes. Pads it to whole blocks, writes
    /// the primary and every backup request, and records each extent's
    /// checksum. Nothing is durable or visible until commit.
    pub fn write_round(&mut self, round: usize, data: &[u8]) -> Result<()> {
        let title = self.record.id;
        if round != self.next_round || round >= self.rounds() {
            return Err(StoreError::RoundOutOfOrder {
                title,
                expected: self.next_round,
                got: round,
            });
        }
        let expected_bytes = self.record.client_bytes[round];
        if data.len() as u64 != expected_bytes {
            return Err(StoreError::RoundLengthMismatch {
                title,
                round,
                expected_bytes,
                got_bytes: data.len() as u64,
            });
        }
        let layout = self.layout.round(round);
        let padded_bytes = layout.primary.bytes() as usize;
        self.round_buf[..data.len()].copy_from_slice(data);
        self.round_buf[data.len()..padded_bytes].fill(0);

        let devices = self.store.devices();
        let mut at = 0usize;
        for (piece, extent) in layout.primary.as_slice().iter().enumerate() {
            let bytes = &self.round_buf[at..at + extent.length_bytes as usize];
            devices[layout.primary_disk.0 as usize].write_at(extent.device_offset_bytes, bytes)?;
            self.touched[layout.primary_disk.0 as usize] = true;
            self.extents.push(ExtentRecord {
                title,
                round: round as u32,
                replica: Replica::Primary,
                piece: piece as u32,
                disk: layout.primary_disk,
                device_offset_bytes: extent.device_offset_bytes,
                length_bytes: extent.length_bytes,
                crc32c: checksum(bytes),
            });
            at += extent.length_bytes as usize;
        }

        let mut piece = 0u32;
        for backup in &layout.backups {
            // The request holds its fragments back to back, in stored order.
            let mut filled = 0usize;
            for fragment in &backup.fragments {
                let len = (fragment.end - fragment.start) as usize;
                self.backup_buf[filled..filled + len].copy_from_slice(
                    &self.round_buf[fragment.start as usize..fragment.end as usize],
                );
                filled += len;
            }
            let mut at = 0usize;
            for extent in backup.extents.as_slice() {
                let bytes = &self.backup_buf[at..at + extent.length_bytes as usize];
                devices[backup.disk.0 as usize].write_at(extent.device_offset_bytes, bytes)?;
                self.touched[backup.disk.0 as usize] = true;
                self.extents.push(ExtentRecord {
                    title,
                    round: round as u32,
                    replica: Replica::Backup,
                    piece,
                    disk: backup.disk,
                    device_offset_bytes: extent.device_offset_bytes,
                    length_bytes: extent.length_bytes,
                    crc32c: checksum(bytes),
                });
                piece += 1;
                at += extent.length_bytes as usize;
            }
        }
        self.next_round += 1;
        Ok(())
    }

    /// Makes the title durable and visible: syncs every device written,
    /// then records the extents and marks the title `complete` in one
    /// transaction. On error the title stays invisible and is removed when
    /// the writer drops.
    pub fn commit(mut self) -> Result<TitleRecord> {
        if self.next_round != self.rounds() {
            return Err(StoreError::IncompleteTitle {
                title: self.record.id,
                written: self.next_round,
                rounds: self.rounds(),
            });
        }
        for (k, touched) in self.touched.iter().enumerate() {
            if *touched {
                self.store.devices()[k].sync()?;
            }
        }
        let id = self.record.id;
        let mut state = self.store.state();
        let context = format!("committing title {:?}", self.record.name);
        let tx = state
            .conn
            .transaction()
            .map_err(|e| StoreError::catalog(context.clone(), e))?;
        catalog::insert_extents(&tx, &self.extents)
            .map_err(|e| StoreError::catalog(context.clone(), e))?;
        if let Some(blob) = &self.keyframes_blob {
            catalog::set_keyframes(&tx, id, blob)
                .map_err(|e| StoreError::catalog(context.clone(), e))?;
        }
        let changed = tx
            .execute(
                "UPDATE titles SET state = 'complete' WHERE id = ?1 AND state = 'writing'",
                [id.0 as i64],
            )
            .map_err(|e| StoreError::catalog(context.clone(), e))?;
        if changed != 1 {
            return Err(StoreError::CatalogCorrupt {
                reason: format!(
                    "title {} ({:?}) disappeared from the catalog while it was being written",
                    id.0, self.record.name
                ),
            });
        }
        tx.commit()
            .map_err(|e| StoreError::catalog(context.clone(), e))?;
        drop(state);
        self.finished = true;
        Ok(self.record.clone())
    }

    /// Gives up: removes the title and frees its strides now.
    pub fn abort(mut self) -> Result<()> {
        self.finished = true;
        self.store.abandon(self.record.id, self.layout.strides())
    }
}

impl Drop for TitleWriter {
    fn drop(&mut self) {
        if !self.finished
            && let Err(e) = self.store.abandon(self.record.id, self.layout.strides())
        {
            // The title stays `writing`; the next open removes it.
            eprintln!(
                "rondo-store: could not remove unfinished title {:?}: {e}",
                self.record.name
            );
        }
    }
}

/// Whether opening a device failed because it is absent or holds no rondo
/// header at all (a dead or blank disk), as opposed to another array's or
/// another disk's device.
pub(crate) fn device_is_missing_or_blank(e: &StoreError) -> bool {
    use crate::device::HeaderMismatch;
    match e {
        StoreError::DeviceUnusable { reason, .. } => reason.starts_with("cannot open"),
        StoreError::DeviceHeader { problem, .. } => matches!(
            problem,
            HeaderMismatch::NotARondoDevice | HeaderMismatch::TooSmall { .. }
        ),
        _ => false,
    }
}
