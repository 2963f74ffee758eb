//! The read-buffer pool: 4096-aligned buffers (as O_DIRECT needs) that the
//! I/O threads read into and that travel, without a copy, through the round
//! driver and the session channel to the socket, returning to the pool when
//! the last reference is dropped.
//!
//! The pool is bounded in two ways. What streams hold is bounded by
//! admission: a stream holds at most the round it reads and the round it
//! sends, and the buffer admission reserves per round never exceeds the
//! configured server buffer. What the pool keeps for reuse is capped at that
//! same capacity. Buffers come in power-of-two size classes (64 KiB and up)
//! so that rounds of different sizes reuse each other's buffers. Taking a
//! buffer never blocks: an I/O thread must not wait for a slow client.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use rondo_store::AlignedBuf;

use crate::metrics::Metrics;

/// Smallest size class.
const MIN_CLASS_BYTES: usize = 64 * 1024;

struct PoolInner {
    /// Free buffers by size class.
    free: Mutex<BTreeMap<usize, Vec<AlignedBuf>>>,
    /// Most bytes kept free for reuse.
    keep_bytes: usize,
    metrics: Arc<Metrics>,
}

/// A shared pool of aligned read buffers.
#[derive(Clone)]
pub struct BufferPool {
    inner: Arc<PoolInner>,
}

impl BufferPool {
    /// A pool that keeps at most `keep_bytes` of free buffers for reuse.
    pub fn new(keep_bytes: u64, metrics: Arc<Metrics>) -> BufferPool {
        BufferPool {
            inner: Arc::new(PoolInner {
                free: Mutex::new(BTreeMap::new()),
                keep_bytes: usize::try_from(keep_bytes).unwrap_or(usize::MAX),
                metrics,
            }),
        }
    }

    /// A buffer of `len` bytes (contents unspecified: the caller overwrites
    /// them), aligned for O_DIRECT.
    pub fn take(&self, len: usize) -> PooledBuf {
        let class = len.max(MIN_CLASS_BYTES).next_power_of_two();
        let reused = self
            .inner
            .free
            .lock()
            .expect("buffer pool lock")
            .get_mut(&class)
            .and_then(Vec::pop);
        let buf = reused.unwrap_or_else(|| AlignedBuf::zeroed(class));
        self.inner
            .metrics
            .buffer_bytes_in_use
            .fetch_add(class as u64, Relaxed);
        PooledBuf {
            buf: Some(buf),
            len,
            pool: Arc::clone(&self.inner),
        }
    }

    /// Bytes kept free for reuse.
    pub fn free_bytes(&self) -> usize {
        self.inner
            .free
            .lock()
            .expect("buffer pool lock")
            .iter()
            .map(|(class, bufs)| class * bufs.len())
            .sum()
    }
}

/// A buffer taken from a [`BufferPool`]; goes back to it when dropped.
pub struct PooledBuf {
    buf: Option<AlignedBuf>,
    len: usize,
    pool: Arc<PoolInner>,
}

impl PooledBuf {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The buffer's bytes, mutable (for reading into; the start and every
    /// 4096-byte multiple within are aligned).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut self.buf.as_mut().expect("present until dropped")[..len]
    }

    /// Turns the buffer into `Bytes` without copying; it returns to the pool
    /// when the last clone or slice is dropped.
    pub fn into_bytes(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for PooledBuf {
    fn as_ref(&self) -> &[u8] {
        &self.buf.as_ref().expect("present until dropped")[..self.len]
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        let Some(buf) = self.buf.take() else { return };
        let class = buf.len();
        self.pool
            .metrics
            .buffer_bytes_in_use
            .fetch_sub(class as u64, Relaxed);
        let mut free = self.pool.free.lock().expect("buffer pool lock");
        let kept: usize = free.iter().map(|(c, bufs)| c * bufs.len()).sum();
        if kept + class <= self.pool.keep_bytes {
            free.entry(class).or_default().push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_reused_and_accounted() {
        let metrics = Arc::new(Metrics::new(1));
        let pool = BufferPool::new(1 << 20, Arc::clone(&metrics));
        let mut a = pool.take(100_000);
        assert_eq!(a.len(), 100_000);
        assert_eq!(a.as_mut_slice().as_ptr() as usize % 4096, 0);
        assert_eq!(metrics.buffer_bytes_in_use.load(Relaxed), 128 * 1024);
        a.as_mut_slice()[0] = 7;
        let bytes = a.into_bytes().slice(0..10);
        assert_eq!(bytes[0], 7);
        assert_eq!(pool.free_bytes(), 0, "still referenced by the slice");
        drop(bytes);
        assert_eq!(pool.free_bytes(), 128 * 1024);
        assert_eq!(metrics.buffer_bytes_in_use.load(Relaxed), 0);
        // Reused for a request of the same class.
        let b = pool.take(70_000);
        assert_eq!(pool.free_bytes(), 0);
        drop(b);
        // Nothing beyond the cap is kept.
        let big = pool.take(2 << 20);
        drop(big);
        assert_eq!(pool.free_bytes(), 128 * 1024);
    }
}
