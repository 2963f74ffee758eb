//! Sending without a copy: read buffers in a memory file that the send
//! loops hand to sockets with `sendfile`.
//!
//! This module owns the send arena: one `memfd` mapped once, carved into
//! read buffers of the pool's size classes. A buffer there is read into
//! with O_DIRECT like any other; a socket is then given its bytes with
//! `sendfile` from the memory file, so the kernel takes references to the
//! pages rather than copying them into the socket (the copy was 15% of the
//! server's samples at 10,000 streams, docs/serving-cost.md). Pages a
//! socket still holds must not change: when a buffer's last reference goes,
//! its range is punched out of the file (`MADV_REMOVE`), so a socket keeps
//! the old pages and the next read of that range gets fresh ones. Punching
//! and faulting fresh pages cost more than the copy for a read sent to few
//! streams, so only reads shared by many take an arena buffer
//! (`DeviceIo::zero_copy_share_min`; measured in
//! `tools/bench/zerocopy.c`). A chunk's place in the arena is found from
//! its address, so `Bytes` slices of an arena buffer need no other tag.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

use crossbeam_channel::{Receiver, Sender};

/// Bytes of address space the arena maps (nothing is allocated until a
/// page is read into). Assumption: 256 GiB, ten times this machine's
/// memory: offsets are reused within a size class only, so the arena must
/// hold each class's peak at once; a buffer that does not fit is taken
/// from the ordinary pool instead.
const ARENA_BYTES: usize = 256 << 30;
/// Streams a read must be shared by before it goes to the arena, unless
/// configured (0: never). Measured (docs/serving-cost.md, "The send arena
/// by default"): in alternating runs on this machine's loopback on
/// 2026-11-30 the arena at 32 took 16–20% off the CPU per delivered GB
/// (12,500 streams: 0.56–0.58 against 0.71 s; 1000 streams: 0.79 against
/// 0.94 s), where three pairs on 2026-11-29 had found no difference: the
/// copy it removes touches every byte sent, and what a byte's copy costs
/// moves with the host's memory bandwidth, which the `sendfile` path does
/// not use. Below 32 streams per read the punch and fresh pages of each
/// buffer cost more than the copy (`tools/bench/zerocopy.c`).
pub const DEFAULT_ZERO_COPY_SHARE_MIN: u32 = 32;

/// The process's send arena.
pub(crate) struct Arena {
    fd: OwnedFd,
    base: usize,
    /// Bytes handed out from the start so far (offsets below are reused).
    next_bytes: AtomicUsize,
    /// Free offsets of each size class.
    free: Vec<(Sender<usize>, Receiver<usize>)>,
}

static ARENA: OnceLock<Option<Arena>> = OnceLock::new();

/// The arena, made on first use; `None` where the system has no memory
/// files or the mapping fails (then every buffer is an ordinary one).
pub(crate) fn arena() -> Option<&'static Arena> {
    ARENA
        .get_or_init(|| match Arena::create(crate::buffers::class_count()) {
            Ok(arena) => Some(arena),
            Err(e) => {
                tracing::warn!(error = %e, "no send arena: every round is copied into its socket");
                None
            }
        })
        .as_ref()
}

/// The arena if it was made (never makes it): for the send path, which
/// only meets arena bytes once a buffer was taken from it.
fn existing() -> Option<&'static Arena> {
    ARENA.get().and_then(Option::as_ref)
}

impl Arena {
    fn create(classes: usize) -> std::io::Result<Arena> {
        // SAFETY: a constant NUL-terminated name; the result is checked.
        let fd = unsafe { libc::memfd_create(c"rondo-send-arena".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned here alone.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: an open descriptor; a sparse size allocates nothing.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), ARENA_BYTES as libc::off_t) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a new shared mapping of the whole file, checked below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ARENA_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_NORESERVE,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Arena {
            fd,
            base: base as usize,
            next_bytes: AtomicUsize::new(0),
            free: (0..classes)
                .map(|_| crossbeam_channel::unbounded())
                .collect(),
        })
    }

    /// The offset of a free range of `class_bytes` (a pool class of index
    /// `index`), or `None` if the arena is full.
    pub(crate) fn take(&self, class_bytes: usize, index: usize) -> Option<usize> {
        if let Ok(offset) = self.free[index].1.try_recv() {
            return Some(offset);
        }
        let offset = self.next_bytes.fetch_add(class_bytes, Relaxed);
        if offset + class_bytes > ARENA_BYTES {
            self.next_bytes.fetch_sub(class_bytes, Relaxed);
            return None;
        }
        Some(offset)
    }

    /// The range's bytes, to read into (the caller owns the range).
    ///
    /// # Safety
    /// `offset..offset + len` was taken and not given back, and no other
    /// reference to it is live.
    // An allocator's ranges: each is one owner's, by the caller's contract.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice_mut(&self, offset: usize, len: usize) -> &mut [u8] {
        // SAFETY: within the mapping, which lives as long as the process;
        // exclusive by the caller's contract.
        unsafe { std::slice::from_raw_parts_mut((self.base + offset) as *mut u8, len) }
    }

    /// The range's bytes.
    ///
    /// # Safety
    /// As for [`Arena::slice_mut`], with shared references only.
    pub(crate) unsafe fn slice(&self, offset: usize, len: usize) -> &[u8] {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts((self.base + offset) as *const u8, len) }
    }

    /// Gives a range back: its pages leave the file (a socket that holds
    /// some keeps them) and the offset is reused by its class.
    pub(crate) fn give_back(&self, offset: usize, class_bytes: usize, index: usize) {
        // SAFETY: the range lies in the mapping and nothing refers to it.
        let punched = unsafe {
            libc::madvise(
                (self.base + offset) as *mut libc::c_void,
                class_bytes,
                libc::MADV_REMOVE,
            )
        };
        if punched != 0 {
            // Its pages would be overwritten while a socket may hold
            // them: the range is never used again.
            tracing::error!(
                error = %std::io::Error::last_os_error(),
                "punching a send buffer out of the arena failed; its range is dropped"
            );
            return;
        }
        let _ = self.free[index].0.send(offset);
    }

    /// Where `bytes` lie in the arena's file, if they do.
    fn file_offset(&self, bytes: &[u8]) -> Option<u64> {
        let at = bytes.as_ptr() as usize;
        (at >= self.base && at + bytes.len() <= self.base + ARENA_BYTES)
            .then(|| (at - self.base) as u64)
    }
}

/// The arena's file and the offset of `bytes` in it, if they lie there.
pub(crate) fn file_range(bytes: &[u8]) -> Option<(RawFd, u64)> {
    let arena = existing()?;
    Some((arena.fd.as_raw_fd(), arena.file_offset(bytes)?))
}

/// `sendfile` of `len` bytes at `offset` of `file` into `socket`: the bytes
/// the socket took, or the error (`WouldBlock` when it is full).
pub(crate) fn send_file(
    socket: RawFd,
    file: RawFd,
    offset: u64,
    len: usize,
) -> std::io::Result<usize> {
    let mut at = offset as libc::off_t;
    // SAFETY: both descriptors are open for the call; `at` is a local.
    let sent = unsafe { libc::sendfile(socket, file, &mut at, len) };
    if sent < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(sent as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_socket_keeps_what_it_was_sent_after_the_range_is_punched_and_rewritten() {
        let arena = arena().expect("memory files on Linux");
        let (class_bytes, index) = (8192, 1);
        let offset = arena.take(class_bytes, index).expect("room");
        // SAFETY: the range was just taken.
        let buf = unsafe { arena.slice_mut(offset, class_bytes) };
        buf.fill(0xAB);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let sender = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut receiver, _) = listener.accept().unwrap();
        // SAFETY: the range is still taken.
        let bytes = unsafe { arena.slice(offset, class_bytes) };
        let (file, at) = file_range(bytes).expect("in the arena");
        assert_eq!(at, offset as u64);
        let mut sent = 0;
        while sent < class_bytes {
            sent += send_file(
                sender.as_raw_fd(),
                file,
                at + sent as u64,
                class_bytes - sent,
            )
            .unwrap();
        }
        // The buffer goes back and its range is reused for another read
        // before the receiver has read a byte.
        arena.give_back(offset, class_bytes, index);
        let again = arena.take(class_bytes, index).expect("room");
        assert_eq!(again, offset, "the class reuses its offset");
        // SAFETY: taken again above.
        let reused = unsafe { arena.slice_mut(again, class_bytes) };
        assert!(
            reused.iter().all(|&b| b == 0),
            "a punched range reads as zeros"
        );
        reused.fill(0xCD);
        let mut got = vec![0u8; class_bytes];
        receiver.read_exact(&mut got).unwrap();
        assert!(
            got.iter().all(|&b| b == 0xAB),
            "the socket sent the pages it was given, not the range's new bytes"
        );
        arena.give_back(again, class_bytes, index);
        assert!(
            file_range(&got).is_none(),
            "a heap buffer is not in the arena"
        );
    }
}
