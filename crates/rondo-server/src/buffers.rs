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
//! buffers are mappings of their own, see `rondo_store::AlignedBuf`).
//! Buffers come in size classes, whole pages, at most 1/8 larger than the
//! read (exact up to 32 KiB, then eight classes per doubling), so that
//! rounds of near sizes reuse each other's buffers while a stream holds
//! little more than its data. Taking a
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

/// Bytes of a page: every class is a whole number of pages, as O_DIRECT
/// reads are.
const PAGE_BYTES: usize = 4096;
/// Classes per doubling of size above 8 pages (32 KiB): a buffer is at most
/// 1/8 larger than the read it holds (about 6% on average), where
/// power-of-two classes wasted up to half (a 70 KB round took 128 KiB).
const CLASSES_PER_DOUBLING: usize = 8;
/// Classes above a read's own that [`BufferPool::take`] may reuse.
const LARGER_CLASSES_REUSED: usize = 2;
/// Largest pooled size (16 GiB, far above any round read); larger buffers
/// are allocated and freed without the pool.
const MAX_POOLED_BYTES: usize = 1 << 34;

/// The class of a buffer for `len` bytes: its size in bytes (a whole number
/// of pages: exact up to 8 pages, then 8 steps per doubling) and the index
/// of its free list.
pub(crate) fn class_of(len: usize) -> (usize, usize) {
    let pages = len.max(1).div_ceil(PAGE_BYTES);
    let steps = CLASSES_PER_DOUBLING;
    if pages <= steps {
        return (pages * PAGE_BYTES, pages - 1);
    }
    let class_pages = |pages: usize| {
        let step = 1usize << (pages.ilog2() as usize - steps.ilog2() as usize);
        (pages.div_ceil(step) * step, step)
    };
    // Rounding up may reach the next doubling's first class: take the
    // step of the size reached.
    let (rounded, _) = class_pages(pages);
    let (rounded, step) = class_pages(rounded);
    let doubling = rounded.ilog2() as usize - steps.ilog2() as usize;
    // Doubling 0 (9–15 pages, m = 9..15) follows the exact classes
    // (index 0..7 for 1–8 pages); each later doubling has m = 8..15.
    let index = doubling * steps + rounded / step - 1;
    (rounded * PAGE_BYTES, index)
}

struct PoolInner {
    /// Free buffers of each class, smallest first.
    free: Vec<(Sender<AlignedBuf>, Receiver<AlignedBuf>)>,
    /// Bytes kept free for reuse at most (what is kept now is
    /// `metrics.buffer_bytes_free`).
    keep_bytes: u64,
    metrics: Arc<Metrics>,
}

/// Free lists: one per class up to [`MAX_POOLED_BYTES`].
pub(crate) fn class_count() -> usize {
    class_of(MAX_POOLED_BYTES).1 + 1
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
                free: (0..class_count())
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
        let (class, index) = class_of(len);
        // The read's own class, else a free buffer up to two classes
        // larger (at most 27% above the read): rounds of a title vary in
        // size, and a buffer of the next class is cheaper than a new
        // mapping while its own idles in the pool.
        let reused = (class <= MAX_POOLED_BYTES)
            .then(|| {
                self.inner.free[index..]
                    .iter()
                    .take(1 + LARGER_CLASSES_REUSED)
                    .find_map(|(_, free)| free.try_recv().ok())
            })
            .flatten()
            .inspect(|buf| {
                self.inner
                    .metrics
                    .buffer_bytes_free
                    .fetch_sub(buf.len() as u64, Relaxed);
            });
        let buf = reused.unwrap_or_else(|| AlignedBuf::mapped(class));
        let class = buf.len();
        self.inner
            .metrics
            .buffer_bytes_in_use
            .fetch_add(class as u64, Relaxed);
        PooledBuf {
            buf: Some(Backing::Heap(buf)),
            len,
            pool: Arc::clone(&self.inner),
        }
    }

    /// A buffer of `len` bytes in the send arena, whose bytes a socket is
    /// given without a copy (`crate::zerocopy`): for a read many streams
    /// share. An ordinary buffer where there is no arena or it is full.
    /// Its pages are fresh (a range given back is punched out), so nothing
    /// is kept for reuse.
    pub fn take_sendable(&self, len: usize) -> PooledBuf {
        let (class, index) = class_of(len);
        let Some(offset) = crate::zerocopy::arena().and_then(|a| a.take(class, index)) else {
            return self.take(len);
        };
        self.inner
            .metrics
            .buffer_bytes_in_use
            .fetch_add(class as u64, Relaxed);
        PooledBuf {
            buf: Some(Backing::Arena {
                offset,
                class_bytes: class,
                index,
            }),
            len,
            pool: Arc::clone(&self.inner),
        }
    }

    /// Drops free buffers, largest first, until at most `keep_free_bytes`
    /// are kept for reuse. A buffer taken or returned meanwhile is simply
    /// counted as usual.
    pub fn trim(&self, keep_free_bytes: u64) {
        let kept = &self.inner.metrics.buffer_bytes_free;
        for (_, free) in self.inner.free.iter().rev() {
            while kept.load(Relaxed) > keep_free_bytes {
                let Ok(buf) = free.try_recv() else { break };
                kept.fetch_sub(buf.len() as u64, Relaxed);
                drop(buf);
            }
        }
    }

    /// Bytes kept free for reuse.
    pub fn free_bytes(&self) -> u64 {
        self.inner.metrics.buffer_bytes_free.load(Relaxed)
    }
}

/// Where a pooled buffer's bytes are.
enum Backing {
    /// A mapping of its own, kept for reuse.
    Heap(AlignedBuf),
    /// A range of the send arena (`crate::zerocopy`), punched out when
    /// given back.
    Arena {
        offset: usize,
        class_bytes: usize,
        index: usize,
    },
}

impl Backing {
    fn class_bytes(&self) -> usize {
        match self {
            Backing::Heap(buf) => buf.len(),
            Backing::Arena { class_bytes, .. } => *class_bytes,
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Heap(buf) => buf,
            Backing::Arena {
                offset,
                class_bytes,
                ..
            } => {
                let arena = crate::zerocopy::arena().expect("an arena buffer has its arena");
                // SAFETY: the range is this buffer's until it is dropped.
                unsafe { arena.slice(*offset, *class_bytes) }
            }
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Backing::Heap(buf) => buf,
            Backing::Arena {
                offset,
                class_bytes,
                ..
            } => {
                let arena = crate::zerocopy::arena().expect("an arena buffer has its arena");
                // SAFETY: the range is this buffer's alone; `&mut self`
                // excludes every other reference to it.
                unsafe { arena.slice_mut(*offset, *class_bytes) }
            }
        }
    }
}

/// A buffer taken from a [`BufferPool`]; goes back to it when dropped.
pub struct PooledBuf {
    buf: Option<Backing>,
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
        &mut self
            .buf
            .as_mut()
            .expect("present until dropped")
            .bytes_mut()[..len]
    }

    /// Whether the buffer lies in the send arena (a socket takes its
    /// bytes without a copy).
    pub fn is_sendable(&self) -> bool {
        matches!(self.buf, Some(Backing::Arena { .. }))
    }

    /// Turns the buffer into `Bytes` without copying; it returns to the pool
    /// when the last clone or slice is dropped.
    pub fn into_bytes(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl AsRef<[u8]> for PooledBuf {
    fn as_ref(&self) -> &[u8] {
        &self.buf.as_ref().expect("present until dropped").bytes()[..self.len]
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        let Some(backing) = self.buf.take() else {
            return;
        };
        let class = backing.class_bytes();
        self.pool
            .metrics
            .buffer_bytes_in_use
            .fetch_sub(class as u64, Relaxed);
        let buf = match backing {
            Backing::Heap(buf) => buf,
            Backing::Arena {
                offset,
                class_bytes,
                index,
            } => {
                if let Some(arena) = crate::zerocopy::arena() {
                    arena.give_back(offset, class_bytes, index);
                }
                return;
            }
        };
        if class > MAX_POOLED_BYTES {
            return;
        }
        let i = class_of(class).1;
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
        // 100,000 bytes are 25 pages: the class of 26 pages (step 2).
        assert_eq!(metrics.buffer_bytes_in_use.load(Relaxed), 26 * 4096);
        a.as_mut_slice()[0] = 7;
        let bytes = a.into_bytes().slice(0..10);
        assert_eq!(bytes[0], 7);
        assert_eq!(pool.free_bytes(), 0, "still referenced by the slice");
        drop(bytes);
        assert_eq!(pool.free_bytes(), 26 * 4096);
        assert_eq!(metrics.buffer_bytes_in_use.load(Relaxed), 0);
        // Reused for a request of the same class (26 pages).
        let b = pool.take(102_000);
        assert_eq!(pool.free_bytes(), 0);
        drop(b);
        // Nothing beyond the cap is kept.
        let big = pool.take(2 << 20);
        drop(big);
        assert_eq!(pool.free_bytes(), 26 * 4096);
    }

    #[test]
    fn a_sendable_buffer_lies_in_the_send_arena_and_is_accounted() {
        let metrics = Arc::new(Metrics::new(1));
        let pool = BufferPool::new(1 << 20, Arc::clone(&metrics));
        let mut a = pool.take_sendable(100_000);
        assert_eq!(a.len(), 100_000);
        assert_eq!(a.as_mut_slice().as_ptr() as usize % 4096, 0);
        assert_eq!(metrics.buffer_bytes_in_use.load(Relaxed), 26 * 4096);
        a.as_mut_slice().fill(9);
        let bytes = a.into_bytes().slice(10..20);
        assert_eq!(&bytes[..], &[9u8; 10]);
        let (_, offset) = crate::zerocopy::file_range(&bytes).expect("in the arena");
        assert_eq!(
            offset % 4096,
            10,
            "a slice's file offset follows its address"
        );
        drop(bytes);
        assert_eq!(metrics.buffer_bytes_in_use.load(Relaxed), 0);
        assert_eq!(pool.free_bytes(), 0, "an arena range is punched, not kept");
        let b = pool.take(100_000).into_bytes();
        assert!(
            crate::zerocopy::file_range(&b).is_none(),
            "an ordinary buffer is copied"
        );
    }

    #[test]
    fn classes_are_whole_pages_at_most_an_eighth_above_the_read_and_indexed_in_order() {
        let mut last = (0, 0);
        for pages in 1..=5000usize {
            for len in [pages * PAGE_BYTES - 4095, pages * PAGE_BYTES] {
                let (bytes, index) = class_of(len);
                assert!(
                    bytes >= len && bytes.is_multiple_of(PAGE_BYTES),
                    "{len}: {bytes}"
                );
                if pages <= 8 {
                    assert_eq!(bytes, pages * PAGE_BYTES, "exact up to 8 pages");
                } else {
                    assert!(8 * bytes <= 9 * pages * PAGE_BYTES, "{len}: {bytes}");
                }
                // Sizes and indices rise together, one index per size.
                if bytes == last.0 {
                    assert_eq!(index, last.1);
                } else {
                    assert!(bytes > last.0);
                    assert_eq!(index, last.1 + usize::from(last.0 > 0), "{len}: {bytes}");
                }
                last = (bytes, index);
                // A class's own size maps to itself.
                assert_eq!(class_of(bytes), (bytes, index));
            }
        }
        assert_eq!(class_of(MAX_POOLED_BYTES).0, MAX_POOLED_BYTES);
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
