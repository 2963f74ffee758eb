//! The sample titles embedded in the binary: three short H.264/AAC MP4s
//! (faststart, one keyframe a second) made with ffmpeg from synthetic
//! sources, so `rondo serve` has something to play on first start from any
//! directory. `crates/rondo-server/assets/README.md` has the exact commands.

use rondo_store::{Store, TitleRecord};

use super::{IngestError, WriteGate, ingest_bytes};

/// (title name, MP4 bytes) of every sample title.
pub const SAMPLE_TITLES: &[(&str, &[u8])] = &[
    (
        "testsrc2",
        include_bytes!("../../assets/testsrc2.mp4").as_slice(),
    ),
    (
        "mandelbrot",
        include_bytes!("../../assets/mandelbrot.mp4").as_slice(),
    ),
    (
        "smptebars",
        include_bytes!("../../assets/smptebars.mp4").as_slice(),
    ),
];

/// (title name, MP4 bytes) of every sample title.
pub fn sample_titles() -> &'static [(&'static str, &'static [u8])] {
    SAMPLE_TITLES
}

/// Ingests every sample title whose name is not taken yet (so a second start
/// adds nothing) and returns the titles it stored, in [`SAMPLE_TITLES`]
/// order. Stops at the first error; titles stored before it stay.
pub fn ingest_sample_titles(
    store: &Store,
    created_unix_ns: u64,
    write_gate: &dyn WriteGate,
) -> Result<Vec<TitleRecord>, IngestError> {
    let mut stored = Vec::new();
    for (name, bytes) in SAMPLE_TITLES {
        let file = format!("{name}.mp4");
        let taken = store
            .title_by_name(name)
            .map_err(|e| IngestError::from_store(&file, e))?
            .is_some();
        if !taken {
            stored.push(ingest_bytes(
                store,
                bytes,
                &file,
                Some(name),
                created_unix_ns,
                write_gate,
                &|_, _| {},
            )?);
        }
    }
    Ok(stored)
}
