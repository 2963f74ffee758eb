//! The emulated jukebox tier against its own model: striped files stored
//! and fetched whole, fetch times as predicted, the extent cache and loaded
//! discs, and clear errors for missing and corrupt objects.

use std::path::Path;
use std::time::Instant;

use rondo_tier::jukebox::{EmulatedJukebox, FarmConfig};
use rondo_tier::{Tier, TierError};

/// A farm 100 times faster than life: a 17.4 s exchange + spin-up takes
/// 174 ms, long against thread wake-ups.
fn farm(dir: &Path, stripe_factor: u32) -> EmulatedJukebox {
    let config = FarmConfig {
        time_scale: 0.01,
        stripe_factor,
        slots: 8,
        ..FarmConfig::default()
    };
    EmulatedJukebox::create(dir, &config).unwrap();
    EmulatedJukebox::open("vault", dir).unwrap()
}

fn media(dir: &Path, name: &str, bytes: usize, seed: u8) -> std::path::PathBuf {
    let data: Vec<u8> = (0..bytes)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    let path = dir.join(name);
    std::fs::write(&path, data).unwrap();
    path
}

#[test]
fn a_striped_file_comes_back_whole_in_the_predicted_time() {
    let tmp = tempfile::tempdir().unwrap();
    let farm_dir = tmp.path().join("farm");
    let jukebox = farm(&farm_dir, 4);
    let source = media(tmp.path(), "a.mp4", 6_000_000, 1);
    let object = jukebox.put("a", &source).unwrap();
    assert_eq!(object.size_bytes, 6_000_000);
    let file = jukebox.open_file("a").unwrap();
    assert_eq!(file.table.extents.len(), 4);
    // One disc per jukebox (Fig. 5's placement).
    let mut boxes: Vec<u32> = file.table.extents.iter().map(|e| e.jukebox).collect();
    boxes.sort_unstable();
    assert_eq!(boxes, vec![0, 1, 2, 3]);

    // Idle farm: T(SF) = exchange + spin-up + seek + rotation + (F/X)/SF,
    // exchanges in parallel across the four arms: 17.406 s + 0.5 s.
    let predicted_ns = jukebox.predict_fetch_ns(&object);
    let model_ns = (8_700 + 8_600 + 100 + 6) * 1_000_000 + 500_000_000;
    assert!(
        predicted_ns.abs_diff(model_ns / 100) < 1_000_000,
        "predicted {predicted_ns} ns"
    );
    let started = Instant::now();
    let mut out = Vec::new();
    jukebox.fetch(&object, &mut out, &|_| {}).unwrap();
    let took_ns = started.elapsed().as_nanos() as u64;
    assert_eq!(out, std::fs::read(&source).unwrap());
    let error = took_ns as f64 / predicted_ns as f64 - 1.0;
    assert!(
        (-0.02..0.10).contains(&error),
        "fetch took {took_ns} ns against {predicted_ns} predicted"
    );
    let status = jukebox.status();
    assert_eq!(status.exchanges_total, Some(4));
    assert_eq!(status.fetched_bytes_total, 6_000_000);

    // Again: every extent is in the memory cache, no drive is used.
    assert_eq!(jukebox.predict_fetch_ns(&object), 0);
    let mut again = Vec::new();
    jukebox.fetch(&object, &mut again, &|_| {}).unwrap();
    assert_eq!(again, out);
    assert_eq!(jukebox.status().cache_hits_total, Some(4));
    assert_eq!(jukebox.status().exchanges_total, Some(4));
}

#[test]
fn a_disc_left_in_a_drive_is_read_without_an_exchange() {
    let tmp = tempfile::tempdir().unwrap();
    let farm_dir = tmp.path().join("farm");
    let config = FarmConfig {
        time_scale: 0.01,
        stripe_factor: 1,
        slots: 8,
        cache_bytes: 0,
        ..FarmConfig::default()
    };
    EmulatedJukebox::create(&farm_dir, &config).unwrap();
    let jukebox = EmulatedJukebox::open("vault", &farm_dir).unwrap();
    let source = media(tmp.path(), "b.mp4", 3_000_000, 2);
    let object = jukebox.put("b", &source).unwrap();
    let mut out = Vec::new();
    jukebox.fetch(&object, &mut out, &|_| {}).unwrap();
    // The disc stays in its drive: seek + rotation + 1 s of transfer.
    let predicted = jukebox.predict_fetch_ns(&object);
    assert!(
        predicted.abs_diff(1_106_000_000 / 100) < 1_000_000,
        "{predicted}"
    );
    let started = Instant::now();
    jukebox.fetch(&object, &mut Vec::new(), &|_| {}).unwrap();
    assert!(started.elapsed().as_nanos() as u64 >= predicted);
    assert_eq!(jukebox.status().exchanges_total, Some(1));
}

#[test]
fn sf_opt_is_the_formula_when_the_farm_leaves_it_open() {
    let tmp = tempfile::tempdir().unwrap();
    let jukebox = farm(&tmp.path().join("farm"), 0);
    // seed 002 §4: SF_opt = 4 for 500 MB, 1 for 10 MB.
    assert_eq!(jukebox.stripe_factor_for(500_000_000), 4);
    assert_eq!(jukebox.stripe_factor_for(10_000_000), 1);
}

#[test]
fn missing_and_corrupt_objects_are_named_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let farm_dir = tmp.path().join("farm");
    let jukebox = farm(&farm_dir, 2);
    let source = media(tmp.path(), "c.mp4", 100_000, 3);
    let object = jukebox.put("c", &source).unwrap();
    assert!(matches!(
        jukebox.put("c", &source),
        Err(TierError::Exists { .. })
    ));
    // A flipped byte in the second extent file.
    let file = jukebox.open_file("c").unwrap();
    let second = &file.table.extents[1];
    let path = farm_dir
        .join(format!("j{}", second.jukebox))
        .join(format!("d{}", second.slot))
        .join(&second.file);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[10] ^= 0xff;
    std::fs::write(&path, bytes).unwrap();
    let err = jukebox
        .fetch(&object, &mut Vec::new(), &|_| {})
        .unwrap_err();
    assert!(err.is_object_fault());
    let text = err.to_string();
    assert!(
        text.contains("tier vault") && text.contains("fails its checksum") && text.contains("c.e1"),
        "{text}"
    );
    std::fs::remove_file(&path).unwrap();
    let text = jukebox
        .fetch(&object, &mut Vec::new(), &|_| {})
        .unwrap_err()
        .to_string();
    assert!(text.contains("is missing"), "{text}");
    jukebox.remove("c").unwrap();
    let err = jukebox
        .fetch(&object, &mut Vec::new(), &|_| {})
        .unwrap_err();
    assert!(matches!(err, TierError::Missing { .. }), "{err}");
    assert_eq!(jukebox.status().fetch_failures_total, 3);
}

#[test]
fn extents_left_by_a_crashed_put_are_cleaned_up() {
    let tmp = tempfile::tempdir().unwrap();
    let farm_dir = tmp.path().join("farm");
    let jukebox = farm(&farm_dir, 2);
    let source = media(tmp.path(), "d.mp4", 200_000, 4);
    jukebox.put("d", &source).unwrap();
    jukebox.put("e", &source).unwrap();
    // A crash after the extents but before the table: remove e's table.
    std::fs::remove_file(farm_dir.join("files/e.json")).unwrap();
    assert_eq!(jukebox.clean_orphans().unwrap(), 200_000);
    assert_eq!(jukebox.clean_orphans().unwrap(), 0);
    assert!(jukebox.open_file("d").is_ok());
}
