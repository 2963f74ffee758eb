//! Random-access reads of a media file, from disk or from memory.
//!
//! The parsers read box headers, `moov`/`moof` boxes and TS chunks at known
//! offsets; they never hold a whole file. A short read is an I/O error here:
//! callers check ranges against [`Source::len`] first and report truncation
//! themselves, with the box or packet that runs past the end.

use std::cell::RefCell;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::MediaError;

pub(crate) trait Source {
    /// The file's size in bytes.
    fn len(&self) -> u64;
    /// Fills `buf` from `offset`; the range must lie within the file.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MediaError>;
}

impl Source for [u8] {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MediaError> {
        let range = usize::try_from(offset)
            .ok()
            .and_then(|start| Some(start..start.checked_add(buf.len())?))
            .and_then(|range| self.get(range));
        match range {
            Some(bytes) => {
                buf.copy_from_slice(bytes);
                Ok(())
            }
            None => Err(MediaError::Io {
                context: "in-memory file".to_string(),
                source: std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("read of {} bytes at {offset} past the end", buf.len()),
                ),
            }),
        }
    }
}

/// A file on disk. Reads are seek+read on one handle (the parsers are
/// single-threaded), which works on any platform.
pub(crate) struct FileSource {
    file: RefCell<File>,
    path: PathBuf,
    len: u64,
}

impl FileSource {
    pub(crate) fn open(path: &Path) -> Result<FileSource, MediaError> {
        let io_err = |e| MediaError::Io {
            context: path.display().to_string(),
            source: e,
        };
        let file = File::open(path).map_err(io_err)?;
        let len = file.metadata().map_err(io_err)?.len();
        Ok(FileSource {
            file: RefCell::new(file),
            path: path.to_path_buf(),
            len,
        })
    }
}

impl Source for FileSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MediaError> {
        let mut file = self.file.borrow_mut();
        file.seek(SeekFrom::Start(offset))
            .and_then(|_| file.read_exact(buf))
            .map_err(|e| MediaError::Io {
                context: format!(
                    "{} ({} bytes at byte {offset})",
                    self.path.display(),
                    buf.len()
                ),
                source: e,
            })
    }
}

/// Reads `len` bytes at `offset` into a new buffer (callers bound `len`).
pub(crate) fn read_vec(
    source: &(impl Source + ?Sized),
    offset: u64,
    len: usize,
) -> Result<Vec<u8>, MediaError> {
    let mut buf = vec![0u8; len];
    source.read_at(offset, &mut buf)?;
    Ok(buf)
}
