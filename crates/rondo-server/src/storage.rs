//! Storage backends behind the disk threads: where a disk's commands read.
//!
//! A disk thread executes the array's commands against a [`Storage`]: the
//! data directory's device file read with O_DIRECT ([`rondo_store::Device`]),
//! an in-memory disk ([`MemoryStorage`]), or one that injects faults on
//! chosen reads ([`FaultyStorage`]: an I/O error, or bytes that fail their
//! checksum), which tests use instead of corrupting files. This is the
//! command boundary's executor side: a later storage node behind RPC is one
//! more backend.

use std::sync::{Mutex, RwLock};

use rondo_store::Device;

/// Where a disk's bytes are.
/// One read of a batch: the device offset and the bytes to fill (aligned
/// as `read_at` needs).
pub struct ReadOp<'a> {
    pub device_offset_bytes: u64,
    pub buf: &'a mut [u8],
}

pub trait Storage: Send + Sync {
    /// Reads `buf.len()` bytes at `device_offset_bytes` (relative to the
    /// stride area, as the layout's extents are).
    fn read_at(&self, device_offset_bytes: u64, buf: &mut [u8]) -> std::io::Result<()>;

    /// Reads every op, submitted to the device together where it can take
    /// them so (an O_DIRECT file: one io_uring submission); the results in
    /// the ops' order. By default, one `read_at` after the other.
    fn read_many(&self, ops: &mut [ReadOp<'_>]) -> Vec<std::io::Result<()>> {
        ops.iter_mut()
            .map(|op| self.read_at(op.device_offset_bytes, op.buf))
            .collect()
    }

    /// What to call it in logs.
    fn describe(&self) -> String;
}

impl Storage for Device {
    fn read_at(&self, device_offset_bytes: u64, buf: &mut [u8]) -> std::io::Result<()> {
        Device::read_at(self, device_offset_bytes, buf).map_err(std::io::Error::other)
    }

    fn read_many(&self, ops: &mut [ReadOp<'_>]) -> Vec<std::io::Result<()>> {
        let mut reads: Vec<(u64, &mut [u8])> = ops
            .iter_mut()
            .map(|op| (op.device_offset_bytes, &mut *op.buf))
            .collect();
        Device::read_many(self, &mut reads)
            .into_iter()
            .map(|r| r.map_err(std::io::Error::other))
            .collect()
    }

    fn describe(&self) -> String {
        self.path().display().to_string()
    }
}

/// A disk held in memory.
#[derive(Debug, Default)]
pub struct MemoryStorage {
    bytes: RwLock<Vec<u8>>,
}

impl MemoryStorage {
    pub fn new(capacity_bytes: usize) -> MemoryStorage {
        MemoryStorage {
            bytes: RwLock::new(vec![0; capacity_bytes]),
        }
    }

    /// Writes `data` at `device_offset_bytes`, growing the disk if needed.
    pub fn write_at(&self, device_offset_bytes: u64, data: &[u8]) {
        let mut bytes = self.bytes.write().expect("storage lock");
        let end = device_offset_bytes as usize + data.len();
        if bytes.len() < end {
            bytes.resize(end, 0);
        }
        bytes[device_offset_bytes as usize..end].copy_from_slice(data);
    }
}

impl Storage for MemoryStorage {
    fn read_at(&self, device_offset_bytes: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let bytes = self.bytes.read().expect("storage lock");
        let start = device_offset_bytes as usize;
        let Some(src) = bytes.get(start..start + buf.len()) else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "read of {} bytes at {start} past the end ({} bytes)",
                    buf.len(),
                    bytes.len()
                ),
            ));
        };
        buf.copy_from_slice(src);
        Ok(())
    }

    fn describe(&self) -> String {
        "memory".into()
    }
}

/// A fault for the next read at an offset.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The read fails with an I/O error.
    IoError,
    /// The read returns bytes with one flipped (its checksum fails).
    Corrupt,
}

/// Another storage with one-shot faults on chosen reads.
pub struct FaultyStorage<S> {
    inner: S,
    /// `(offset, skip, fault)`: after `skip` more reads starting at
    /// `offset`, the next one gets `fault`.
    armed: Mutex<Vec<(u64, u32, Fault)>>,
}

impl<S: Storage> FaultyStorage<S> {
    pub fn new(inner: S) -> FaultyStorage<S> {
        FaultyStorage {
            inner,
            armed: Mutex::new(Vec::new()),
        }
    }

    /// The next read starting at `device_offset_bytes` gets `fault`.
    pub fn arm(&self, device_offset_bytes: u64, fault: Fault) {
        self.arm_after(device_offset_bytes, 0, fault);
    }

    /// The read starting at `device_offset_bytes` after `skip_reads` more
    /// such reads gets `fault` (two streams reading the same extent in one
    /// round: fail the second).
    pub fn arm_after(&self, device_offset_bytes: u64, skip_reads: u32, fault: Fault) {
        self.armed
            .lock()
            .expect("faults lock")
            .push((device_offset_bytes, skip_reads, fault));
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }
}

impl<S: Storage> Storage for FaultyStorage<S> {
    fn read_at(&self, device_offset_bytes: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let fault = {
            let mut armed = self.armed.lock().expect("faults lock");
            match armed
                .iter_mut()
                .position(|(at, _, _)| *at == device_offset_bytes)
            {
                Some(i) if armed[i].1 > 0 => {
                    armed[i].1 -= 1;
                    None
                }
                Some(i) => Some(armed.remove(i).2),
                None => None,
            }
        };
        match fault {
            Some(Fault::IoError) => Err(std::io::Error::other("injected I/O error")),
            Some(Fault::Corrupt) => {
                self.inner.read_at(device_offset_bytes, buf)?;
                if let Some(b) = buf.first_mut() {
                    *b ^= 0xff;
                }
                Ok(())
            }
            None => self.inner.read_at(device_offset_bytes, buf),
        }
    }

    fn describe(&self) -> String {
        format!("{} (with injected faults)", self.inner.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_fire_once_at_their_offset() {
        let s = FaultyStorage::new(MemoryStorage::new(0));
        s.inner().write_at(4096, &[7u8; 512]);
        s.arm(4096, Fault::Corrupt);
        s.arm(0, Fault::IoError);
        let mut buf = [0u8; 512];
        s.read_at(4096, &mut buf).unwrap();
        assert_eq!(buf[0], 7 ^ 0xff);
        s.read_at(4096, &mut buf).unwrap();
        assert_eq!(buf, [7u8; 512], "once only");
        assert!(s.read_at(0, &mut buf).is_err());
        assert!(s.read_at(8192, &mut buf).is_err(), "past the end");
    }
}
