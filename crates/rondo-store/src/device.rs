//! Devices: the file or block device behind each disk, its header, and
//! aligned positional I/O.
//!
//! A device starts with a header region of `header_region_bytes` (1 MiB); its
//! first 4096 bytes are the [`DeviceHeader`] (magic, format version, array id,
//! disk index, stride area offset, capacity), so a device of another array, or
//! one moved to another disk slot, is refused by name. The stride area follows;
//! every offset a [`Device`] takes is relative to it, exactly the layout's
//! `Extent::device_offset_bytes`. All I/O is aligned to [`IO_ALIGN_BYTES`] in
//! offset, length and buffer address and uses O_DIRECT where the filesystem
//! allows it (buffered otherwise, see [`IoMode`]). A `Device` is `Send + Sync`;
//! the server gives each one to its own I/O thread.

use std::alloc::Layout;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::ops::{Deref, DerefMut};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

use rondo_model::units::DiskIndex;
use thiserror::Error;

use crate::config::{ArrayId, FORMAT_VERSION, IO_ALIGN_BYTES};

/// A zero-initialised byte buffer whose start is aligned to
/// [`IO_ALIGN_BYTES`], as O_DIRECT requires. Sub-slices starting at multiples
/// of 4096 bytes are aligned too.
///
/// Buffers of [`MAPPED_MIN_BYTES`] and more are anonymous mappings of their
/// own, so that dropping one returns its memory to the system at once: the
/// heap allocator keeps freed large blocks in its arenas (glibc raises its
/// mmap threshold after the first free), and a server whose clients came and
/// went would keep its peak resident memory for ever. The kernel hands out
/// mapped pages zeroed, and only the pages touched become resident.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    /// Bytes allocated (whole pages, at least one).
    size: usize,
    mapped: bool,
}

/// Buffers this large or larger get their own mapping (see [`AlignedBuf`]).
/// Assumption: 64 KiB, the smallest read-buffer class; below it the heap's
/// reuse is cheaper than a system call per buffer and a few pages kept are
/// harmless.
pub const MAPPED_MIN_BYTES: usize = 64 * 1024;

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out &[u8].
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> AlignedBuf {
        Self::allocate(len, MAPPED_MIN_BYTES)
    }

    /// `len` zero bytes in a mapping of their own whatever their size: for
    /// buffers a pool keeps and reuses, so that the system call is paid on
    /// a pool miss only and a freed buffer never stays in the heap's arenas.
    pub fn mapped(len: usize) -> AlignedBuf {
        Self::allocate(len, 0)
    }

    /// A mapping when the size is at least `mapped_min_bytes` (and the
    /// system gives one), else the heap.
    fn allocate(len: usize, mapped_min_bytes: usize) -> AlignedBuf {
        // Allocate whole 4096-byte pages (at least one, as a zero-size
        // allocation is not allowed).
        let size = len.max(1).next_multiple_of(IO_ALIGN_BYTES as usize);
        if size >= mapped_min_bytes {
            // SAFETY: an anonymous private mapping of `size` bytes; no
            // file, no fixed address.
            let raw = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    size,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if raw != libc::MAP_FAILED {
                let ptr = NonNull::new(raw.cast::<u8>()).expect("mmap never maps page 0");
                return AlignedBuf {
                    ptr,
                    len,
                    size,
                    mapped: true,
                };
            }
            // Out of address space or a mapping limit: let the heap try
            // (and report the failure the usual way if it cannot).
        }
        let layout = Self::heap_layout(size);
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf {
            ptr,
            len,
            size,
            mapped: false,
        }
    }

    fn heap_layout(size: usize) -> Layout {
        Layout::from_size_align(size, IO_ALIGN_BYTES as usize)
            .expect("buffer size fits the address space")
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.mapped {
            // SAFETY: mapped in `zeroed` with this size; nothing refers to
            // it any more.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.size) };
        } else {
            // SAFETY: allocated in `zeroed` with this layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), Self::heap_layout(self.size)) }
        }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` ≤ the allocation, which is initialised (zeroed).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> AlignedBuf {
        let mut copy = AlignedBuf::zeroed(self.len);
        copy.copy_from_slice(self);
        copy
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

/// How a device is accessed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum IoMode {
    /// O_DIRECT: reads bypass the page cache, so measured disk time is real.
    Direct,
    /// The filesystem refused O_DIRECT (e.g. an old tmpfs); reads go through
    /// the page cache. Alignment is still enforced, so code that works here
    /// works with O_DIRECT.
    Buffered,
}

/// Why a device read or write was refused or failed.
#[derive(Debug, Error)]
pub enum DeviceError {
    #[error(
        "disk {} ({}): {what} is not aligned to {IO_ALIGN_BYTES} bytes (device offset \
         {device_offset_bytes}, length {length_bytes})",
        .disk.0, .path.display()
    )]
    Misaligned {
        disk: DiskIndex,
        path: PathBuf,
        what: &'static str,
        device_offset_bytes: u64,
        length_bytes: u64,
    },
    #[error(
        "disk {} ({}): {length_bytes} bytes at device offset {device_offset_bytes} run past the \
         end of the stride area ({capacity_bytes} bytes)",
        .disk.0, .path.display()
    )]
    OutOfRange {
        disk: DiskIndex,
        path: PathBuf,
        device_offset_bytes: u64,
        length_bytes: u64,
        capacity_bytes: u64,
    },
    #[error(
        "disk {} ({}): {op} of {length_bytes} bytes at device offset {device_offset_bytes} \
         failed: {source}",
        .disk.0, .path.display()
    )]
    Io {
        disk: DiskIndex,
        path: PathBuf,
        op: &'static str,
        device_offset_bytes: u64,
        length_bytes: u64,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "disk {} ({}) has no usable device ({reason}): it is failed until `rondo admin \
         replace-disk` maps a new one and `restore-disk` rebuilds it",
        .disk.0, .path.display()
    )]
    Unavailable {
        disk: DiskIndex,
        path: PathBuf,
        reason: String,
    },
}

/// Bytes of the encoded header that carry data (the rest of its 4096-byte
/// block is zero).
const HEADER_USED_BYTES: usize = 68;
const MAGIC: [u8; 8] = *b"RONDODEV";

/// The header at the start of every device.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DeviceHeader {
    pub format_version: u32,
    pub array_id: ArrayId,
    pub disk_index: DiskIndex,
    pub disk_count: u32,
    /// Where the stride area begins on the device.
    pub stride_area_offset_bytes: u64,
    /// Size of the stride area.
    pub capacity_bytes: u64,
    pub stride_bytes: u64,
}

/// How a device's header differs from what rondo.toml expects.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HeaderMismatch {
    #[error("not a rondo device (no rondo header at its start)")]
    NotARondoDevice,
    #[error("the header's checksum is wrong: the header is damaged")]
    DamagedHeader,
    #[error("header format version {found} is not supported (this rondo reads {supported})")]
    UnsupportedVersion { found: u32, supported: u32 },
    #[error(
        "belongs to array {found}, not this directory's array {expected}: a device of another \
         array"
    )]
    ForeignArray { found: ArrayId, expected: ArrayId },
    #[error(
        "holds disk {found} of this array, but rondo.toml lists it as disk {expected}: the \
         devices were reordered"
    )]
    WrongDisk { found: u32, expected: u32 },
    #[error("header says {found} {what}, rondo.toml says {expected}")]
    Geometry {
        what: &'static str,
        found: u64,
        expected: u64,
    },
    #[error("the device has {size_bytes} bytes but its header and stride area need {needed_bytes}")]
    TooSmall { size_bytes: u64, needed_bytes: u64 },
}

impl DeviceHeader {
    /// The header as its 4096-byte block.
    pub fn encode(&self) -> AlignedBuf {
        let mut block = AlignedBuf::zeroed(IO_ALIGN_BYTES as usize);
        block[0..8].copy_from_slice(&MAGIC);
        block[8..12].copy_from_slice(&self.format_version.to_le_bytes());
        block[12..16].copy_from_slice(&self.disk_index.0.to_le_bytes());
        block[16..20].copy_from_slice(&self.disk_count.to_le_bytes());
        // 20..24 reserved, zero.
        block[24..40].copy_from_slice(&self.array_id.0);
        block[40..48].copy_from_slice(&self.stride_area_offset_bytes.to_le_bytes());
        block[48..56].copy_from_slice(&self.capacity_bytes.to_le_bytes());
        block[56..64].copy_from_slice(&self.stride_bytes.to_le_bytes());
        let crc = crc32c::crc32c(&block[..64]);
        block[64..HEADER_USED_BYTES].copy_from_slice(&crc.to_le_bytes());
        block
    }

    /// Parses a header block.
    pub fn decode(block: &[u8]) -> Result<DeviceHeader, HeaderMismatch> {
        if block.len() < HEADER_USED_BYTES || block[0..8] != MAGIC {
            return Err(HeaderMismatch::NotARondoDevice);
        }
        let u32_at = |at: usize| u32::from_le_bytes(block[at..at + 4].try_into().expect("4"));
        let u64_at = |at: usize| u64::from_le_bytes(block[at..at + 8].try_into().expect("8"));
        if crc32c::crc32c(&block[..64]) != u32_at(64) {
            return Err(HeaderMismatch::DamagedHeader);
        }
        let format_version = u32_at(8);
        if format_version != FORMAT_VERSION {
            return Err(HeaderMismatch::UnsupportedVersion {
                found: format_version,
                supported: FORMAT_VERSION,
            });
        }
        Ok(DeviceHeader {
            format_version,
            disk_index: DiskIndex(u32_at(12)),
            disk_count: u32_at(16),
            array_id: ArrayId(block[24..40].try_into().expect("16")),
            stride_area_offset_bytes: u64_at(40),
            capacity_bytes: u64_at(48),
            stride_bytes: u64_at(56),
        })
    }

    /// The first difference from `expected`, checked in the order that
    /// explains it best: another array before another slot before geometry.
    pub fn compare(&self, expected: &DeviceHeader) -> Result<(), HeaderMismatch> {
        if self.array_id != expected.array_id {
            return Err(HeaderMismatch::ForeignArray {
                found: self.array_id,
                expected: expected.array_id,
            });
        }
        if self.disk_index != expected.disk_index {
            return Err(HeaderMismatch::WrongDisk {
                found: self.disk_index.0,
                expected: expected.disk_index.0,
            });
        }
        let fields = [
            ("disks", self.disk_count.into(), expected.disk_count.into()),
            (
                "bytes of header region (stride area offset)",
                self.stride_area_offset_bytes,
                expected.stride_area_offset_bytes,
            ),
            (
                "bytes of stride area capacity",
                self.capacity_bytes,
                expected.capacity_bytes,
            ),
            ("bytes per stride", self.stride_bytes, expected.stride_bytes),
        ];
        for (what, found, expected) in fields {
            if found != expected {
                return Err(HeaderMismatch::Geometry {
                    what,
                    found,
                    expected,
                });
            }
        }
        Ok(())
    }
}

/// A device another process holds: a cluster's storage node with its own
/// disks, reached over the network. Offsets are within the stride area, as
/// in [`Device::read_at`]; the remote side checks the device's header, its
/// array and its bounds, and does the I/O on its own device.
pub trait RemoteDevice: Send + Sync + fmt::Debug {
    /// Where the device is, for messages (for example "node storage-1 at
    /// http://10.0.0.2:7100").
    fn location(&self) -> String;
    fn read_at(&self, device_offset_bytes: u64, buf: &mut [u8]) -> std::io::Result<()>;
    fn write_at(&self, device_offset_bytes: u64, buf: &[u8]) -> std::io::Result<()>;
    /// Best effort, as [`Device::punch_hole`].
    fn punch_hole(&self, device_offset_bytes: u64, length_bytes: u64);
    fn sync(&self) -> std::io::Result<()>;
    /// Makes a new device at `path` on the remote side for this disk (a
    /// failed disk's replacement, `rondo admin replace-disk`), as
    /// [`crate::replace_device_file`] does in a directory.
    fn replace(&self, path: &Path) -> std::io::Result<()> {
        Err(unsupported(self.location(), "replace a device", path))
    }
    /// The device at `path` (as rondo.toml records it) was made for this
    /// disk in the directory the remote side shares with this one (a
    /// shared filesystem, [`crate::Store::replace_device`]): the remote
    /// side reads it from now on, after checking that its own rondo.toml
    /// records the same path.
    fn adopt(&self, path: &Path) -> std::io::Result<()> {
        Err(unsupported(self.location(), "switch to a new device", path))
    }
}

/// What a [`RemoteDevice`] without `replace` or `adopt` answers.
fn unsupported(location: String, what: &str, path: &Path) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        format!("{location}: cannot {what} there (path {})", path.display()),
    )
}

/// One disk's device, opened for aligned positional reads and writes.
#[derive(Debug)]
pub struct Device {
    disk: DiskIndex,
    path: PathBuf,
    /// `None` for a device that was missing or blank when the store opened
    /// (`Device::unavailable`), or that another process holds
    /// (`Device::remote`).
    file: Option<File>,
    /// The process that holds the device, when this one does not.
    remote: Option<Arc<dyn RemoteDevice>>,
    unavailable: Option<String>,
    io_mode: IoMode,
    stride_area_offset_bytes: u64,
    capacity_bytes: u64,
}

/// The size of a regular file or block device.
pub(crate) fn device_size_bytes(file: &File) -> std::io::Result<u64> {
    let meta = file.metadata()?;
    if meta.file_type().is_block_device() {
        // A block device reports size 0 in its metadata; its end is its size.
        use std::io::{Seek, SeekFrom};
        let mut handle = file;
        let end = handle.seek(SeekFrom::End(0))?;
        handle.seek(SeekFrom::Start(0))?;
        Ok(end)
    } else {
        Ok(meta.len())
    }
}

/// Opens `path` read-write, with O_DIRECT unless the filesystem refuses it
/// or `io_mode` asks for buffered access.
pub(crate) fn open_file(path: &Path, io_mode: IoMode) -> std::io::Result<(File, IoMode)> {
    if io_mode == IoMode::Direct {
        match OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        {
            Ok(file) => return Ok((file, IoMode::Direct)),
            // EINVAL: this filesystem does not do O_DIRECT.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(e),
        }
    }
    let file = OpenOptions::new().read(true).write(true).open(path)?;
    Ok((file, IoMode::Buffered))
}

impl Device {
    /// Opens disk `disk`'s device at `path` and checks its header against
    /// `expected`. `io_mode` = `Buffered` forces buffered access (tests).
    pub fn open(
        path: &Path,
        disk: DiskIndex,
        expected: &DeviceHeader,
        io_mode: IoMode,
    ) -> Result<Device, crate::StoreError> {
        let unusable = |reason: String| crate::StoreError::DeviceUnusable {
            path: path.to_path_buf(),
            reason,
        };
        let (file, io_mode) =
            open_file(path, io_mode).map_err(|e| unusable(format!("cannot open: {e}")))?;
        let mismatch = |problem| crate::StoreError::DeviceHeader {
            path: path.to_path_buf(),
            disk,
            problem,
        };
        let size_bytes =
            device_size_bytes(&file).map_err(|e| unusable(format!("cannot size: {e}")))?;
        if size_bytes < IO_ALIGN_BYTES {
            return Err(mismatch(HeaderMismatch::NotARondoDevice));
        }
        let mut block = AlignedBuf::zeroed(IO_ALIGN_BYTES as usize);
        file.read_exact_at(&mut block, 0)
            .map_err(|e| unusable(format!("cannot read the header: {e}")))?;
        let header = DeviceHeader::decode(&block).map_err(mismatch)?;
        header.compare(expected).map_err(mismatch)?;
        let needed_bytes = header.stride_area_offset_bytes + header.capacity_bytes;
        if size_bytes < needed_bytes {
            return Err(mismatch(HeaderMismatch::TooSmall {
                size_bytes,
                needed_bytes,
            }));
        }
        Ok(Device {
            disk,
            path: path.to_path_buf(),
            file: Some(file),
            remote: None,
            unavailable: None,
            io_mode,
            stride_area_offset_bytes: header.stride_area_offset_bytes,
            capacity_bytes: header.capacity_bytes,
        })
    }

    /// A stand-in for disk `disk`'s device at `path`, missing or blank
    /// (`reason`): it has the expected geometry, and every read, write and
    /// sync fails with [`DeviceError::Unavailable`]. The store opens with it
    /// so the server can start with that disk failed.
    pub fn unavailable(
        path: &Path,
        disk: DiskIndex,
        expected: &DeviceHeader,
        reason: String,
    ) -> Device {
        Device {
            disk,
            path: path.to_path_buf(),
            file: None,
            remote: None,
            unavailable: Some(reason),
            io_mode: IoMode::Direct,
            stride_area_offset_bytes: expected.stride_area_offset_bytes,
            capacity_bytes: expected.capacity_bytes,
        }
    }

    /// Disk `disk`'s device held by another process (`remote`), with the
    /// geometry `expected` gives it: every read, write, hole and sync goes
    /// there, after the same alignment and bounds checks as a local one.
    pub fn remote(
        disk: DiskIndex,
        expected: &DeviceHeader,
        remote: Arc<dyn RemoteDevice>,
    ) -> Device {
        Device {
            disk,
            path: PathBuf::from(remote.location()),
            file: None,
            remote: Some(remote),
            unavailable: None,
            io_mode: IoMode::Direct,
            stride_area_offset_bytes: expected.stride_area_offset_bytes,
            capacity_bytes: expected.capacity_bytes,
        }
    }

    /// Whether another process holds the device ([`Device::remote`]).
    pub fn is_remote(&self) -> bool {
        self.remote.is_some()
    }

    /// The process that holds the device, when another one does.
    pub fn remote_handle(&self) -> Option<&Arc<dyn RemoteDevice>> {
        self.remote.as_ref()
    }

    /// Why the device is unusable, if it is (missing or blank at open).
    pub fn unavailable_reason(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    fn file(&self) -> Result<&File, DeviceError> {
        self.file.as_ref().ok_or_else(|| DeviceError::Unavailable {
            disk: self.disk,
            path: self.path.clone(),
            reason: self.unavailable.clone().unwrap_or_default(),
        })
    }

    /// Writes `header` at the start of the device at `path` (which must hold
    /// the header region and stride area) and flushes it.
    pub(crate) fn write_header(path: &Path, header: &DeviceHeader) -> std::io::Result<()> {
        let (file, _) = open_file(path, IoMode::Direct)?;
        file.write_all_at(&header.encode(), 0)?;
        file.sync_all()
    }

    /// The disk this device serves.
    pub fn disk(&self) -> DiskIndex {
        self.disk
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether O_DIRECT is in effect.
    pub fn io_mode(&self) -> IoMode {
        self.io_mode
    }

    /// Size of the stride area.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// Where the stride area begins on the underlying file or block device.
    pub fn stride_area_offset_bytes(&self) -> u64 {
        self.stride_area_offset_bytes
    }

    fn check(&self, device_offset_bytes: u64, buf: &[u8]) -> Result<(), DeviceError> {
        let length_bytes = buf.len() as u64;
        let misaligned = |what| DeviceError::Misaligned {
            disk: self.disk,
            path: self.path.clone(),
            what,
            device_offset_bytes,
            length_bytes,
        };
        if !device_offset_bytes.is_multiple_of(IO_ALIGN_BYTES) {
            return Err(misaligned("the device offset"));
        }
        if !length_bytes.is_multiple_of(IO_ALIGN_BYTES) {
            return Err(misaligned("the length"));
        }
        if !(buf.as_ptr() as u64).is_multiple_of(IO_ALIGN_BYTES) {
            return Err(misaligned("the buffer address"));
        }
        if device_offset_bytes
            .checked_add(length_bytes)
            .is_none_or(|end| end > self.capacity_bytes)
        {
            return Err(DeviceError::OutOfRange {
                disk: self.disk,
                path: self.path.clone(),
                device_offset_bytes,
                length_bytes,
                capacity_bytes: self.capacity_bytes,
            });
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes at `device_offset_bytes` of the stride area.
    /// Offset, length and buffer address must be 4096-aligned (use
    /// [`AlignedBuf`], or sub-slices of one at aligned positions).
    pub fn read_at(&self, device_offset_bytes: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        self.check(device_offset_bytes, buf)?;
        let read = match &self.remote {
            Some(remote) => remote.read_at(device_offset_bytes, buf),
            None => self
                .file()?
                .read_exact_at(buf, self.stride_area_offset_bytes + device_offset_bytes),
        };
        read.map_err(|source| DeviceError::Io {
            disk: self.disk,
            path: self.path.clone(),
            op: "read",
            device_offset_bytes,
            length_bytes: buf.len() as u64,
            source,
        })
    }

    /// Reads each `(device_offset_bytes, buf)` of `reads`, with the same
    /// rules and errors per read as [`Device::read_at`], submitted to the
    /// kernel together (one io_uring submission and one wait; one `pread`
    /// after the other where this thread cannot have a ring).
    pub fn read_many(&self, reads: &mut [(u64, &mut [u8])]) -> Vec<Result<(), DeviceError>> {
        use std::os::fd::AsRawFd;
        let mut results: Vec<Result<(), DeviceError>> = reads
            .iter()
            .map(|(offset, buf)| self.check(*offset, buf))
            .collect();
        // Per read: `true` once read whole through the ring.
        let mut done = vec![false; reads.len()];
        if let Ok(file) = self.file() {
            let mut submitted = Vec::new();
            let mut batch: Vec<(u64, &mut [u8])> = Vec::new();
            for (i, (offset, buf)) in reads.iter_mut().enumerate() {
                if results[i].is_ok() {
                    submitted.push(i);
                    batch.push((self.stride_area_offset_bytes + *offset, &mut **buf));
                }
            }
            if let Some(read) = crate::uring::read_batch(file.as_raw_fd(), &mut batch) {
                for (&i, (result, (_, buf))) in submitted.iter().zip(read.iter().zip(&batch)) {
                    done[i] = matches!(result, Ok(n) if *n == buf.len());
                }
            }
        }
        // What the ring did not read whole (an error, a short read, no
        // ring): `read_at` again, for its complete read or its error.
        for (i, (offset, buf)) in reads.iter_mut().enumerate() {
            if !done[i] && results[i].is_ok() {
                results[i] = self.read_at(*offset, buf);
            }
        }
        results
    }

    /// Writes `buf` at `device_offset_bytes` of the stride area; the same
    /// alignment rules as [`Device::read_at`]. Durable only after [`Device::sync`].
    pub fn write_at(&self, device_offset_bytes: u64, buf: &[u8]) -> Result<(), DeviceError> {
        self.check(device_offset_bytes, buf)?;
        let written = match &self.remote {
            Some(remote) => remote.write_at(device_offset_bytes, buf),
            None => self
                .file()?
                .write_all_at(buf, self.stride_area_offset_bytes + device_offset_bytes),
        };
        written.map_err(|source| DeviceError::Io {
            disk: self.disk,
            path: self.path.clone(),
            op: "write",
            device_offset_bytes,
            length_bytes: buf.len() as u64,
            source,
        })
    }

    /// Gives `length_bytes` at `device_offset_bytes` of the stride area back
    /// to the filesystem (a hole in a sparse device file; reads then see
    /// zeros). Best effort: a block device, or a filesystem without hole
    /// punching, keeps the space; that is not an error.
    pub fn punch_hole(&self, device_offset_bytes: u64, length_bytes: u64) {
        use std::os::fd::AsRawFd;
        if let Some(remote) = &self.remote {
            remote.punch_hole(device_offset_bytes, length_bytes);
            return;
        }
        let Some(file) = self.file.as_ref() else {
            return;
        };
        if !file.metadata().is_ok_and(|m| m.file_type().is_file()) {
            return;
        }
        // SAFETY: fallocate only reads its integer arguments; the
        // descriptor is open for the lifetime of `file`.
        unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                (self.stride_area_offset_bytes + device_offset_bytes) as libc::off_t,
                length_bytes as libc::off_t,
            );
        }
    }

    /// Makes every completed write durable (fdatasync).
    pub fn sync(&self) -> Result<(), DeviceError> {
        let synced = match &self.remote {
            Some(remote) => remote.sync(),
            None => self.file()?.sync_data(),
        };
        synced.map_err(|source| DeviceError::Io {
            disk: self.disk,
            path: self.path.clone(),
            op: "sync",
            device_offset_bytes: 0,
            length_bytes: 0,
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> DeviceHeader {
        DeviceHeader {
            format_version: FORMAT_VERSION,
            array_id: ArrayId::from_seed(3),
            disk_index: DiskIndex(2),
            disk_count: 4,
            stride_area_offset_bytes: 1 << 20,
            capacity_bytes: 1 << 30,
            stride_bytes: 2 << 20,
        }
    }

    /// A device in memory, as a storage node would hold it.
    #[derive(Debug, Default)]
    struct MemoryDevice {
        bytes: std::sync::Mutex<Vec<u8>>,
        calls: std::sync::Mutex<Vec<&'static str>>,
    }

    impl RemoteDevice for MemoryDevice {
        fn location(&self) -> String {
            "memory".into()
        }
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
            self.calls.lock().unwrap().push("read");
            let bytes = self.bytes.lock().unwrap();
            buf.copy_from_slice(&bytes[offset as usize..offset as usize + buf.len()]);
            Ok(())
        }
        fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
            self.calls.lock().unwrap().push("write");
            let mut bytes = self.bytes.lock().unwrap();
            bytes[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
            Ok(())
        }
        fn punch_hole(&self, _offset: u64, _length: u64) {
            self.calls.lock().unwrap().push("punch");
        }
        fn sync(&self) -> std::io::Result<()> {
            self.calls.lock().unwrap().push("sync");
            Err(std::io::Error::other("the node is gone"))
        }
    }

    #[test]
    fn a_remote_device_gets_every_access_after_the_same_checks() {
        let mut expected = header();
        expected.capacity_bytes = 64 * 1024;
        let memory = Arc::new(MemoryDevice::default());
        memory.bytes.lock().unwrap().resize(64 * 1024, 0);
        let device = Device::remote(DiskIndex(2), &expected, memory.clone());
        assert!(device.is_remote());
        assert_eq!(device.capacity_bytes(), 64 * 1024);
        let mut data = AlignedBuf::zeroed(8192);
        data.fill(7);
        device.write_at(4096, &data).unwrap();
        let mut back = AlignedBuf::zeroed(8192);
        device.read_at(4096, &mut back).unwrap();
        assert_eq!(&back[..], &data[..]);
        let mut many = AlignedBuf::zeroed(4096);
        let results = device.read_many(&mut [(8192, &mut many[..])]);
        assert!(results[0].is_ok() && many.iter().all(|&b| b == 7));
        device.punch_hole(0, 4096);
        // Refused here, before the node is asked.
        assert!(matches!(
            device.write_at(64 * 1024, &data),
            Err(DeviceError::OutOfRange { .. })
        ));
        assert!(matches!(
            device.read_at(100, &mut back),
            Err(DeviceError::Misaligned { .. })
        ));
        // The node's failure is the device's, named with its location.
        let failed = device.sync().unwrap_err().to_string();
        assert!(
            failed.contains("memory") && failed.contains("the node is gone"),
            "{failed}"
        );
        assert_eq!(
            *memory.calls.lock().unwrap(),
            ["write", "read", "read", "punch", "sync"]
        );
    }

    #[test]
    fn aligned_buffers_are_aligned_and_zeroed() {
        for len in [
            0,
            1,
            4096,
            5000,
            MAPPED_MIN_BYTES - 1,
            MAPPED_MIN_BYTES,
            1 << 20,
        ] {
            for buf in [AlignedBuf::zeroed(len), AlignedBuf::mapped(len)] {
                assert_eq!(buf.len(), len);
                assert_eq!(buf.as_ptr() as usize % 4096, 0);
                assert!(buf.iter().all(|&b| b == 0));
            }
        }
        assert!(
            AlignedBuf::mapped(4096).mapped,
            "small pool buffers are mapped too"
        );
        assert!(!AlignedBuf::zeroed(4096).mapped);
        let mut a = AlignedBuf::zeroed(8192);
        a[5] = 9;
        let b = a.clone();
        assert_eq!(b[5], 9);
        assert_eq!(b.as_ptr() as usize % 4096, 0);
    }

    #[test]
    fn header_round_trip_and_damage() {
        let h = header();
        let block = h.encode();
        assert_eq!(block.len(), 4096);
        assert_eq!(DeviceHeader::decode(&block), Ok(h));
        let mut damaged = block.clone();
        damaged[50] ^= 1;
        assert_eq!(
            DeviceHeader::decode(&damaged),
            Err(HeaderMismatch::DamagedHeader)
        );
        assert_eq!(
            DeviceHeader::decode(&[0u8; 4096]),
            Err(HeaderMismatch::NotARondoDevice)
        );
    }

    #[test]
    fn comparison_names_the_first_difference() {
        let h = header();
        assert_eq!(h.compare(&h), Ok(()));
        let mut other = h;
        other.disk_index = DiskIndex(0);
        assert_eq!(
            h.compare(&other),
            Err(HeaderMismatch::WrongDisk {
                found: 2,
                expected: 0
            })
        );
        other.array_id = ArrayId::from_seed(4);
        assert!(matches!(
            h.compare(&other),
            Err(HeaderMismatch::ForeignArray { .. })
        ));
        let mut bigger = h;
        bigger.capacity_bytes *= 2;
        let err = h.compare(&bigger).unwrap_err();
        assert!(err.to_string().contains("stride area capacity"), "{err}");
    }

    /// A device file in `dir` with a stride area of `capacity_bytes`, and
    /// its header.
    fn device_file(dir: &Path, capacity_bytes: u64) -> (PathBuf, DeviceHeader) {
        let path = dir.join("d.dev");
        let mut h = header();
        h.capacity_bytes = capacity_bytes;
        let file = File::create(&path).unwrap();
        file.set_len(h.stride_area_offset_bytes + h.capacity_bytes)
            .unwrap();
        Device::write_header(&path, &h).unwrap();
        (path, h)
    }

    #[test]
    fn misaligned_and_out_of_range_io_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (path, h) = device_file(dir.path(), 64 * 1024);
        for mode in [IoMode::Direct, IoMode::Buffered] {
            let device = Device::open(&path, DiskIndex(2), &h, mode).unwrap();
            let mut buf = AlignedBuf::zeroed(8192);
            buf[..4096].fill(0xab);
            device.write_at(4096, &buf).unwrap();
            let mut back = AlignedBuf::zeroed(8192);
            device.read_at(4096, &mut back).unwrap();
            assert_eq!(&back[..], &buf[..]);
            assert!(matches!(
                device.read_at(100, &mut back),
                Err(DeviceError::Misaligned { .. })
            ));
            assert!(matches!(
                device.read_at(0, &mut back[..100]),
                Err(DeviceError::Misaligned { .. })
            ));
            let mut odd = AlignedBuf::zeroed(8192);
            assert!(matches!(
                device.read_at(0, &mut odd[1..4097]),
                Err(DeviceError::Misaligned { .. })
            ));
            assert!(matches!(
                device.read_at(60 * 1024, &mut back),
                Err(DeviceError::OutOfRange { .. })
            ));
        }
    }

    #[test]
    fn many_reads_in_one_submission_match_single_reads_and_keep_their_errors() {
        let dir = tempfile::tempdir().unwrap();
        let (path, h) = device_file(dir.path(), 256 * 1024);
        for mode in [IoMode::Direct, IoMode::Buffered] {
            let device = Device::open(&path, DiskIndex(2), &h, mode).unwrap();
            let mut data = AlignedBuf::zeroed(256 * 1024);
            for (i, b) in data.iter_mut().enumerate() {
                *b = (i / 4096 * 7 + i % 251) as u8;
            }
            device.write_at(0, &data).unwrap();
            // 70 reads (more than one ring's worth), the 3rd misaligned
            // and the 5th past the end.
            let mut bufs: Vec<AlignedBuf> = (0..70).map(|_| AlignedBuf::zeroed(8192)).collect();
            let offsets: Vec<u64> = (0..70u64)
                .map(|i| match i {
                    2 => 100,
                    4 => 252 * 1024,
                    _ => (i * 12 * 1024) % (248 * 1024),
                })
                .collect();
            let mut reads: Vec<(u64, &mut [u8])> = offsets
                .iter()
                .zip(bufs.iter_mut())
                .map(|(&o, b)| (o, &mut b[..]))
                .collect();
            let results = device.read_many(&mut reads);
            assert_eq!(results.len(), 70);
            for (i, (result, buf)) in results.iter().zip(&bufs).enumerate() {
                match i {
                    2 => assert!(matches!(result, Err(DeviceError::Misaligned { .. }))),
                    4 => assert!(matches!(result, Err(DeviceError::OutOfRange { .. }))),
                    _ => {
                        assert!(result.is_ok(), "read {i}: {result:?}");
                        let at = offsets[i] as usize;
                        assert_eq!(&buf[..], &data[at..at + 8192], "read {i} ({mode:?})");
                    }
                }
            }
        }
    }
}
