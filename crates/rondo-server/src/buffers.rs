//! The read-buffer pool: 4096-aligned buffers (as O_DIRECT needs) that the
//! I/O threads read into and that travel, without a copy, through the round
//! driver and the session channel to the socket, returning to the pool when
//! the last reference is dropped.
//!
//! The pool is bounded in two ways. What streams hold is bounded by
//! admission: a stream holds at most the round it reads and the round it
//! sends, and the buffer admission reserves per round never exceeds the
//! configured server buffer. What the pool keeps for reuse is capped at that
//! same capacity, and the round driver trims it every round to what streams
//! hold now, so that memory goes back to the system when streams leave (the
//! buffers are mappings of their own, see `rondo_store::AlignedBuf`). Buffers come in power-of-two size classes (64 KiB and up)
//! so that rounds of different sizes reuse each other's buffers. Taking a
//! buffer never blocks: an I/O thread must not wait for a slow client. No
//! lock is taken either: each class's free list is a lock-free queue and the
//! bytes kept are an atomic count, so a read costs no lock from the disk
//! thread to the socket and back.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender};
use rondo_store::AlignedBuf;

use crate::metrics::Metrics;

/// Smallest size class (2^16 bytes).
const MIN_CLASS_LOG2: u32 = 16;
/// Largest pooled class (2^34 bytes = 16 GiB, far above any round read);
/// larger buffers are allocated and freed without the pool.
const MAX_CLASS_LOG2: u32 = 34;
const MIN_CLASS_BYTES: usize = 1 << MIN_CLASS_LOG2;

struct PoolInner {
    /// Free buffers of each size class, smallest first.
    free: Vec<(Sender<AlignedBuf>, Receiver<AlignedBuf>)>,
    /// Bytes kept free for reuse at most (what is kept now is
    /// `metrics.buffer_bytes_free`).
    keep_bytes: u64,
    metrics: Arc<Metrics>,
}

/// The free list of a class of `class` bytes (a power of two), if pooled.
fn class_index(class: usize) -> Option<usize> {
    let log2 = class.trailing_zeros();
    (log2 <= MAX_CLASS_LOG2).then(|| (log2 - MIN_CLASS_LOG2) as usize)
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
                free: (MIN_CLASS_LOG2..=MAX_CLASS_LOG2)
                    .map(|_| crossbeam_channel::unbounded())
                    .collect(),
                keep_bytes,
                metrics,
            }),
        }
    }

    /// A buffer of `len` bytes (contents unspecified: the caller overwrites
    /// them), aligned for O_DIRECT.
    pub fn take(&self, len: usize) -> PooledBuf {
        let class = len.max(MIN_CLASS_BYTES).next_power_of_two();
        let reused = class_index(class)
            .and_then(|i| self.inner.free[i].1.try_recv().ok())
            .inspect(|_| {
                self.inner
                    .metrics
                    .buffer_bytes_free
                    .fetch_sub(class as u64, Relaxed);
            });
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

    /// Drops free buffers, largest first, until at most `keep_free_bytes`
    /// are kept for reuse. A buffer taken or returned meanwhile is simply
    /// counted as usual.
    pub fn trim(&self, keep_free_bytes: u64) {
        let kept = &self.inner.metrics.buffer_bytes_free;
        for (i, (_, free)) in self.inner.free.iter().enumerate().rev() {
            let class = (MIN_CLASS_BYTES as u64) << i;
            while kept.load(Relaxed) > keep_free_bytes {
                let Ok(buf) = free.try_recv() else { break };
                kept.fetch_sub(class, Relaxed);
                drop(buf);
            }
        }
    }

    /// Bytes kept free for reuse.
    pub fn free_bytes(&self) -> u64 {
        self.inner.metrics.buffer_bytes_free.load(Relaxed)
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
        let Some(i) = class_index(class) else {
            return;
        };
        // Reserve room in the cap first; give it back if there is none.
        let class = class as u64;
        let kept = &self.pool.metrics.buffer_bytes_free;
        if kept.fetch_add(class, Relaxed) + class > self.pool.keep_bytes {
            kept.fetch_sub(class, Relaxed);
            return;
        }
        let _ = self.pool.free[i].0.send(buf);
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

    #[test]
    fn trim_drops_free_buffers_largest_first_down_to_the_target() {
        let metrics = Arc::new(Metrics::new(1));
        let pool = BufferPool::new(64 << 20, Arc::clone(&metrics));
        let taken: Vec<_> = [64 << 10, 64 << 10, 256 << 10, 1 << 20]
            .into_iter()
            .map(|len| pool.take(len))
            .collect();
        let held = pool.take(64 << 10);
        drop(taken);
        assert_eq!(pool.free_bytes(), (128 << 10) + (256 << 10) + (1 << 20));
        pool.trim(300 << 10);
        // The 1 MiB buffer went first, then the 256 KiB one.
        assert_eq!(pool.free_bytes(), 128 << 10);
        assert_eq!(metrics.buffer_bytes_in_use.load(Relaxed), 64 << 10);
        pool.trim(0);
        assert_eq!(pool.free_bytes(), 0);
        drop(held);
        assert_eq!(
            pool.free_bytes(),
            64 << 10,
            "returned buffers are kept again"
        );
        assert_eq!(metrics.buffer_bytes_in_use.load(Relaxed), 0);
    }
}
