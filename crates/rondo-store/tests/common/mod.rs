//! Helpers shared by the store's integration tests: small arrays (D = 3,
//! 64 KiB strides) and synthetic titles whose bytes are a function of
//! (title seed, round), so every read can be compared with what was written.

#![allow(dead_code)]

use rondo_model::layout::TitlePlan;
use rondo_model::layout::rng::SplitMix64;
use rondo_model::schedule::Schedule;
use rondo_model::units::NS_PER_S;
use rondo_store::{ArrayId, Store, StoreConfig, TitleMeta, TitleRecord, TitleWriter};

pub const STRIDE_BYTES: u64 = 64 * 1024;
pub const BLOCK_BYTES: u64 = 16 * 1024;

/// D = 3 disks of `strides` 64 KiB strides, 16 KiB blocks, 1 s rounds.
pub fn small_config(seed: u64, strides: u64) -> StoreConfig {
    let mut config = StoreConfig::new(3, "test-profile", strides * STRIDE_BYTES);
    config.array_id = Some(ArrayId::from_seed(seed));
    config.stride_bytes = STRIDE_BYTES;
    config.block_bytes = BLOCK_BYTES;
    config
}

/// Per-round client bytes of a synthetic VBR title: 0..=64 KiB, not block
/// multiples, with an empty round when `rounds` > 4.
pub fn client_bytes(seed: u64, rounds: usize) -> Vec<u64> {
    let mut rng = SplitMix64::new(seed);
    (0..rounds)
        .map(|i| {
            if i == 3 {
                0
            } else {
                1 + rng.next_below(STRIDE_BYTES)
            }
        })
        .collect()
}

/// The bytes of round `round` of the title with seed `seed`.
pub fn round_data(seed: u64, round: usize, len: u64) -> Vec<u8> {
    let mut rng = SplitMix64::new(seed.wrapping_mul(1_000_003) ^ round as u64);
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

pub fn meta(name: &str, client_bytes: Vec<u64>) -> TitleMeta {
    TitleMeta {
        name: name.to_string(),
        source_file_name: format!("{name}.mp4"),
        container_kind: "mp4".into(),
        content_type: "video/mp4".into(),
        duration_ns: client_bytes.len() as u64 * NS_PER_S,
        header_bytes: client_bytes.first().copied().unwrap_or(0).min(1000),
        round_duration_ns: NS_PER_S,
        client_bytes,
        created_unix_ns: 1_700_000_000_000_000_000,
    }
}

/// The plan the store's next title gets for `client_bytes`.
pub fn plan_for(store: &Store, client_bytes: &[u64]) -> TitlePlan {
    let schedule =
        Schedule::from_client_bytes(client_bytes.to_vec(), NS_PER_S, store.config().block_bytes)
            .unwrap();
    let inputs = store.layout_inputs().unwrap();
    TitlePlan::for_schedule(
        &schedule,
        &store.layout_params(),
        inputs.start_disk,
        inputs.seed,
    )
    .unwrap()
}

/// Begins a title and writes its first `rounds_to_write` rounds.
pub fn begin_and_write(
    store: &Store,
    name: &str,
    seed: u64,
    rounds: usize,
    rounds_to_write: usize,
) -> TitleWriter {
    let bytes = client_bytes(seed, rounds);
    let plan = plan_for(store, &bytes);
    let mut writer = store.begin_title(meta(name, bytes.clone()), &plan).unwrap();
    for (round, &len) in bytes.iter().enumerate().take(rounds_to_write) {
        writer
            .write_round(round, &round_data(seed, round, len))
            .unwrap();
    }
    writer
}

/// Writes and commits a whole title.
pub fn store_title(store: &Store, name: &str, seed: u64, rounds: usize) -> TitleRecord {
    begin_and_write(store, name, seed, rounds, rounds)
        .commit()
        .unwrap()
}

#[allow(unused_imports)] // not every test binary flips bytes
pub use rondo_testkit::files::flip_byte;
