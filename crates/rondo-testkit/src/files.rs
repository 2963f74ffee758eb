//! Damage done to files on purpose, for tests of checksums and checks.

use std::path::Path;

/// Flips one bit of the byte at `offset` of the file at `path`, durably
/// (synced, so a reader with O_DIRECT sees it).
pub fn flip_byte(path: &Path, offset: u64) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, offset).unwrap();
    byte[0] ^= 0x10;
    file.write_all_at(&byte, offset).unwrap();
    file.sync_all().unwrap();
}
