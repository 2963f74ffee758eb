//! Fuzzing the catalog's blob decoders (`rondo_testkit::fuzz`): a title's
//! per-round client bytes and its keyframes are stored as varint blobs in
//! SQLite; a damaged blob decodes to an error (`None`) or to values that
//! encode and decode back to themselves, never a panic. Short by default;
//! `RONDO_SLOW_TESTS=1` runs for `RONDO_FUZZ_SECONDS` (600).

use std::path::Path;

use rondo_store::{
    KeyframeRecord, decode_client_bytes, decode_keyframes, encode_client_bytes, encode_keyframes,
};
use rondo_testkit::fuzz::fuzz;

#[test]
fn fuzz_catalog_blobs() {
    let client_bytes = encode_client_bytes(&[0, 1, 127, 128, 16_384, 62_500, u64::MAX]);
    let keyframes = encode_keyframes(&[
        KeyframeRecord {
            time_ns: 0,
            byte_offset: 0,
        },
        KeyframeRecord {
            time_ns: 2_000_000_000,
            byte_offset: 125_000,
        },
        KeyframeRecord {
            time_ns: u64::MAX,
            byte_offset: u64::MAX,
        },
    ])
    .unwrap();
    let report = fuzz(
        "catalog-blobs",
        "cargo test -p rondo-store --test fuzz fuzz_catalog_blobs",
        vec![client_bytes, keyframes],
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz-regressions/catalog-blobs"),
        4096,
        |blob| {
            if let Some(values) = decode_client_bytes(blob) {
                assert_eq!(
                    decode_client_bytes(&encode_client_bytes(&values)),
                    Some(values)
                );
            }
            if let Some(keyframes) = decode_keyframes(blob) {
                let again = encode_keyframes(&keyframes).expect("decoded keyframes ascend");
                assert_eq!(decode_keyframes(&again), Some(keyframes));
            }
        },
    );
    assert!(report.executions > 0);
}
