//! Small state files written whole and atomically: a temporary file beside
//! the target, fsync, rename over it, fsync of the directory. A crash at
//! any point leaves either the old file or the new one, never a mix.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use crate::error::{Result, StoreError};

/// Replaces `dir/file_name` with `bytes` atomically.
pub(crate) fn write_atomically(dir: &Path, file_name: &str, bytes: &[u8]) -> Result<()> {
    let path = dir.join(file_name);
    let tmp_path = dir.join(format!("{file_name}.tmp"));
    let write = || -> std::io::Result<()> {
        let mut file = File::create(&tmp_path)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp_path, &path)?;
        File::open(dir)?.sync_all()
    };
    write().map_err(|e| StoreError::io(format!("writing {}", path.display()), e))
}
