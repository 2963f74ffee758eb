//! Batched positional reads through io_uring: one submission and one wait
//! for a whole group of reads, where `pread` costs a system call and a
//! blocking wake-up per read. Each thread that reads keeps its own ring
//! (created on its first batch); where the kernel refuses io_uring (an old
//! kernel, `kernel.io_uring_disabled`, a seccomp filter) the thread says so
//! once and the caller reads with `pread` instead.
//!
//! Safety rests on one rule: a call returns only when the kernel has
//! completed every read it submitted, so no buffer is borrowed past the
//! call. A ring whose state is unknown after an error the kernel should
//! never give cannot keep that rule, and the thread panics rather than let
//! a later read land in a reused buffer.

use std::cell::RefCell;
use std::io;
use std::os::fd::RawFd;

use io_uring::{IoUring, opcode, types};

/// Entries of each thread's ring: reads in flight at once.
const RING_ENTRIES: u32 = 64;

thread_local! {
    /// This thread's ring: `None` before its first use, `Some(None)` once
    /// the kernel refused one.
    static RING: RefCell<Option<Option<IoUring>>> = const { RefCell::new(None) };
}

/// Reads each `(offset, buf)` of `reads` from `fd`, submitted together;
/// per read, the bytes read (short only at the end of the file) or the
/// error. `None`: io_uring is not available to this thread.
pub(crate) fn read_batch(
    fd: RawFd,
    reads: &mut [(u64, &mut [u8])],
) -> Option<Vec<io::Result<usize>>> {
    RING.with(|cell| {
        let mut slot = cell.borrow_mut();
        let ring = slot.get_or_insert_with(|| match IoUring::new(RING_ENTRIES) {
            Ok(ring) => Some(ring),
            Err(e) => {
                tracing::warn!("io_uring is not available ({e}); reads use pread");
                None
            }
        });
        let ring = ring.as_mut()?;
        let mut results: Vec<io::Result<usize>> = Vec::with_capacity(reads.len());
        for chunk in reads.chunks_mut(RING_ENTRIES as usize) {
            let first = results.len();
            results.extend(chunk.iter().map(|_| Ok(0)));
            submit_and_reap(ring, fd, chunk, &mut results[first..]);
        }
        Some(results)
    })
}

/// Submits every read of `chunk` (at most the ring's size) and waits for
/// all of their completions.
fn submit_and_reap(
    ring: &mut IoUring,
    fd: RawFd,
    chunk: &mut [(u64, &mut [u8])],
    results: &mut [io::Result<usize>],
) {
    {
        let mut queue = ring.submission();
        for (i, (offset, buf)) in chunk.iter_mut().enumerate() {
            let entry = opcode::Read::new(types::Fd(fd), buf.as_mut_ptr(), buf.len() as u32)
                .offset(*offset)
                .build()
                .user_data(i as u64);
            // SAFETY: the buffer outlives the read: this function returns
            // only after the kernel completed every read submitted here.
            unsafe { queue.push(&entry) }.expect("the ring holds a whole chunk");
        }
    }
    let mut left = chunk.len();
    while left > 0 {
        match ring.submit_and_wait(left) {
            Ok(_) => {}
            // Interrupted, or short of kernel resources for a moment: the
            // reads are (or stay) queued; ask again.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                ) =>
            {
                continue;
            }
            Err(e) => panic!("io_uring_enter failed ({e}) with reads in flight"),
        }
        for entry in ring.completion() {
            let i = entry.user_data() as usize;
            let result = entry.result();
            results[i] = if result < 0 {
                Err(io::Error::from_raw_os_error(-result))
            } else {
                Ok(result as usize)
            };
            left -= 1;
        }
    }
}
