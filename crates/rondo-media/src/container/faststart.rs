//! The faststart rewrite of a moov-at-end MP4.
//!
//! A player reading a file front to back needs the `moov` (the sample
//! tables) before any sample, so the stored stream of a moov-at-end file
//! moves `moov` to just after `ftyp`. Everything between `ftyp` and the old
//! `moov` slides back by the new `moov`'s size; everything after the old
//! `moov` keeps its place relative to the end. Sample data is never copied
//! here: the stored stream is described as source ranges plus the rewritten
//! `moov`, which is the only thing rebuilt. Inside it, every chunk offset
//! (`stco`/`co64` under `moov/trak/mdia/minf/stbl`) is mapped to its new
//! position; when a mapped offset no longer fits 32 bits every `stco` becomes
//! a `co64`, which grows `moov` and therefore the shift, so the rewrite
//! repeats until the `moov` size it assumed is the size it produced.

use super::mp4::{BoxHeader, Child, FourCc, children, show};
use super::{Format, MediaError, StoredPiece};

/// Boxes on the path from `moov` to the chunk-offset tables.
const DESCEND: [&FourCc; 5] = [b"moov", b"trak", b"mdia", b"minf", b"stbl"];

/// A rewritten `moov` and where it goes.
#[derive(Clone, Debug)]
pub(crate) struct Rewrite {
    /// The new `moov` box, header included.
    pub moov: Vec<u8>,
    /// Source offset the new `moov` is inserted at (the end of `ftyp`).
    pub insert_at: u64,
    /// The old `moov` box.
    pub old_moov: BoxHeader,
}

impl Rewrite {
    /// The stored-stream offset of source byte `offset`; `None` for bytes of
    /// the old `moov`, which the stored stream does not hold.
    pub fn map(&self, offset: u64) -> Option<u64> {
        map_offset(
            offset,
            self.insert_at,
            &self.old_moov,
            self.moov.len() as u64,
        )
    }
}

fn map_offset(
    offset: u64,
    insert_at: u64,
    old_moov: &BoxHeader,
    new_moov_bytes: u64,
) -> Option<u64> {
    if offset < insert_at {
        Some(offset)
    } else if offset < old_moov.offset {
        offset.checked_add(new_moov_bytes)
    } else if offset >= old_moov.end() {
        (offset - old_moov.size).checked_add(new_moov_bytes)
    } else {
        None
    }
}

/// The stored stream: `[0, insert_at)`, the new `moov`, the rest of the file
/// without the old `moov`.
pub(crate) fn pieces(rewrite: &Rewrite, file_bytes: u64) -> Vec<StoredPiece> {
    let old = &rewrite.old_moov;
    let ranges = [
        (0, rewrite.insert_at),
        (rewrite.insert_at, old.offset),
        (old.end(), file_bytes),
    ];
    let mut pieces = Vec::with_capacity(4);
    for (i, (start, end)) in ranges.into_iter().enumerate() {
        if i == 1 {
            pieces.push(StoredPiece::Owned(rewrite.moov.clone()));
        }
        if end > start {
            pieces.push(StoredPiece::Source {
                source_offset: start,
                bytes: end - start,
            });
        }
    }
    pieces
}

/// Some `stco` entry does not fit 32 bits after the shift.
struct NeedCo64;

/// Rewrites `moov_bytes` (the whole old `moov` box, at `old_moov`) for
/// insertion at source offset `insert_at`.
pub(crate) fn rewrite(
    moov_bytes: &[u8],
    old_moov: &BoxHeader,
    insert_at: u64,
) -> Result<Rewrite, MediaError> {
    let root = Child {
        header: *old_moov,
        payload: &moov_bytes[old_moov.header_bytes as usize..],
    };
    let mut assumed_bytes = old_moov.size;
    let mut co64 = false;
    // At most: one pass to learn co64 is needed, one with it, one to confirm.
    for _ in 0..6 {
        let map = |offset: u64| map_offset(offset, insert_at, old_moov, assumed_bytes);
        let mut out = Vec::with_capacity(moov_bytes.len() + 64);
        match write_box(&root, &map, co64, &mut out)? {
            Err(NeedCo64) => co64 = true,
            Ok(()) if out.len() as u64 == assumed_bytes => {
                return Ok(Rewrite {
                    moov: out,
                    insert_at,
                    old_moov: *old_moov,
                });
            }
            Ok(()) => assumed_bytes = out.len() as u64,
        }
    }
    Err(MediaError::corrupt(
        Format::Mp4,
        old_moov.offset,
        "the faststart rewrite of 'moov' did not settle on a size",
    ))
}

/// Appends a box header for a payload of `payload_bytes`, with a 64-bit
/// size only when the box needs one.
fn write_header(kind: &FourCc, payload_bytes: u64, out: &mut Vec<u8>) {
    match u32::try_from(payload_bytes + 8) {
        Ok(size) => {
            out.extend_from_slice(&size.to_be_bytes());
            out.extend_from_slice(kind);
        }
        Err(_) => {
            out.extend_from_slice(&1u32.to_be_bytes());
            out.extend_from_slice(kind);
            out.extend_from_slice(&(payload_bytes + 16).to_be_bytes());
        }
    }
}

/// Appends `child` to `out`, rebuilt when it leads to chunk offsets.
fn write_box(
    child: &Child,
    map: &dyn Fn(u64) -> Option<u64>,
    co64: bool,
    out: &mut Vec<u8>,
) -> Result<Result<(), NeedCo64>, MediaError> {
    let kind = &child.header.kind;
    let payload = if DESCEND.contains(&kind) {
        let mut payload = Vec::with_capacity(child.payload.len());
        for grandchild in children(child.payload, child.header.payload_offset(), *kind)? {
            if let Err(need) = write_box(&grandchild, map, co64, &mut payload)? {
                return Ok(Err(need));
            }
        }
        payload
    } else if kind == b"stco" || kind == b"co64" {
        match chunk_offsets(child, map, co64)? {
            Ok((new_kind, payload)) => {
                write_header(&new_kind, payload.len() as u64, out);
                out.extend_from_slice(&payload);
                return Ok(Ok(()));
            }
            Err(need) => return Ok(Err(need)),
        }
    } else {
        child.payload.to_vec()
    };
    write_header(kind, payload.len() as u64, out);
    out.extend_from_slice(&payload);
    Ok(Ok(()))
}

/// The payload of the mapped chunk-offset box and its type.
fn chunk_offsets(
    child: &Child,
    map: &dyn Fn(u64) -> Option<u64>,
    co64: bool,
) -> Result<Result<(FourCc, Vec<u8>), NeedCo64>, MediaError> {
    let mut f = super::mp4::Fields::of(child);
    let version_flags = f.u32("version and flags")?;
    let count = f.u32("entry_count")?;
    let is_co64 = &child.header.kind == b"co64";
    let entry_bytes = if is_co64 { 8 } else { 4 };
    f.check_entries(count as u64, entry_bytes, "chunk offsets")?;
    let write_co64 = is_co64 || co64;
    let mut payload = Vec::with_capacity(8 + count as usize * 8);
    payload.extend_from_slice(&version_flags.to_be_bytes());
    payload.extend_from_slice(&count.to_be_bytes());
    for _ in 0..count {
        let entry_offset = f.offset();
        let old = if is_co64 {
            f.u64("chunk_offset")?
        } else {
            f.u32("chunk_offset")? as u64
        };
        let new = map(old).ok_or_else(|| {
            MediaError::corrupt(
                Format::Mp4,
                entry_offset,
                format!(
                    "{} chunk offset {old} points inside the 'moov' box",
                    show(&child.header.kind)
                ),
            )
        })?;
        if write_co64 {
            payload.extend_from_slice(&new.to_be_bytes());
        } else {
            match u32::try_from(new) {
                Ok(v) => payload.extend_from_slice(&v.to_be_bytes()),
                Err(_) => return Ok(Err(NeedCo64)),
            }
        }
    }
    let kind = if write_co64 { *b"co64" } else { *b"stco" };
    Ok(Ok((kind, payload)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A box with the given type and payload.
    fn boxed(kind: &[u8; 4], payload: &[u8]) -> Vec<u8> {
        let mut out = ((payload.len() + 8) as u32).to_be_bytes().to_vec();
        out.extend_from_slice(kind);
        out.extend_from_slice(payload);
        out
    }

    fn stco(offsets: &[u32]) -> Vec<u8> {
        let mut p = vec![0, 0, 0, 0];
        p.extend_from_slice(&(offsets.len() as u32).to_be_bytes());
        for o in offsets {
            p.extend_from_slice(&o.to_be_bytes());
        }
        boxed(b"stco", &p)
    }

    fn moov_with(stco_box: Vec<u8>) -> Vec<u8> {
        let stbl = boxed(b"stbl", &stco_box);
        let minf = boxed(b"minf", &stbl);
        let mdia = boxed(b"mdia", &minf);
        let trak = boxed(b"trak", &[boxed(b"tkhd", &[7; 12]), mdia].concat());
        boxed(b"moov", &[boxed(b"mvhd", &[9; 20]), trak].concat())
    }

    fn header_of(bytes: &[u8], offset: u64) -> BoxHeader {
        BoxHeader {
            kind: [bytes[4], bytes[5], bytes[6], bytes[7]],
            offset,
            header_bytes: 8,
            size: bytes.len() as u64,
        }
    }

    #[test]
    fn chunk_offsets_shift_by_the_moov_size() {
        // ftyp 0..24, mdat 24..1024, moov at 1024.
        let moov = moov_with(stco(&[32, 500]));
        let old = header_of(&moov, 1024);
        let r = rewrite(&moov, &old, 24).unwrap();
        assert_eq!(r.moov.len(), moov.len(), "same size: no co64 needed");
        let n = moov.len() as u32;
        let tail = &r.moov[r.moov.len() - 8..];
        assert_eq!(
            tail,
            [(32 + n).to_be_bytes(), (500 + n).to_be_bytes()].concat()
        );
        // Untouched boxes are copied byte for byte.
        assert_eq!(&r.moov[..28], &moov[..28]);
        let pieces = pieces(&r, 1024 + moov.len() as u64);
        assert_eq!(
            pieces,
            vec![
                StoredPiece::Source {
                    source_offset: 0,
                    bytes: 24
                },
                StoredPiece::Owned(r.moov.clone()),
                StoredPiece::Source {
                    source_offset: 24,
                    bytes: 1000
                },
            ]
        );
        assert_eq!(r.map(1024 + 3), None);
        assert_eq!(r.map(10), Some(10));
    }

    #[test]
    fn offsets_past_4_gib_turn_stco_into_co64() {
        let moov = moov_with(stco(&[u32::MAX - 10, 100]));
        let old = header_of(&moov, 5_000_000_000);
        let r = rewrite(&moov, &old, 24).unwrap();
        // Two 4-byte entries became 8-byte ones.
        assert_eq!(r.moov.len(), moov.len() + 8);
        let root = Child {
            header: header_of(&r.moov, 24),
            payload: &r.moov[8..],
        };
        let mut found = Vec::new();
        let mut stack = vec![root];
        while let Some(b) = stack.pop() {
            if &b.header.kind == b"co64" {
                let p = b.payload;
                for i in 0..2 {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(&p[8 + 8 * i..16 + 8 * i]);
                    found.push(u64::from_be_bytes(a));
                }
            } else if DESCEND.contains(&&b.header.kind) {
                stack
                    .extend(children(b.payload, b.header.payload_offset(), b.header.kind).unwrap());
            }
        }
        let n = r.moov.len() as u64;
        assert_eq!(found, vec![u32::MAX as u64 - 10 + n, 100 + n]);
    }

    #[test]
    fn a_chunk_inside_the_old_moov_is_refused() {
        let moov = moov_with(stco(&[1030]));
        let old = header_of(&moov, 1024);
        let err = rewrite(&moov, &old, 24).unwrap_err().to_string();
        assert!(err.contains("inside the 'moov'"), "{err}");
    }
}
