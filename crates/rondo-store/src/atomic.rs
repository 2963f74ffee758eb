//! Small state files (TOML) written whole and atomically: a temporary file
//! beside the target, fsync, rename over it, fsync of the directory. A crash
//! at any point leaves either the old file or the new one, never a mix. A
//! missing file reads as the type's default; one that does not parse is
//! refused naming the file.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use crate::error::{Result, StoreError};

/// Reads `dir/file_name` as TOML; a missing file is `T::default()`.
pub(crate) fn read_toml_or_default<T: serde::de::DeserializeOwned + Default>(
    dir: &Path,
    file_name: &str,
) -> Result<T> {
    let path = dir.join(file_name);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(T::default()),
        Err(e) => return Err(StoreError::io(format!("reading {}", path.display()), e)),
    };
    toml::from_str(&text).map_err(|e| invalid(&path, e.to_string()))
}

/// An error naming `path` for contents that are not valid.
pub(crate) fn invalid(path: &Path, message: String) -> StoreError {
    StoreError::io(
        format!("reading {}", path.display()),
        std::io::Error::new(std::io::ErrorKind::InvalidData, message),
    )
}

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
