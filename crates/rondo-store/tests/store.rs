//! Data directory, title lifecycle, reading and fsck, through the public API.

mod common;

use common::*;
use rondo_model::layout::{Replica, ReplicaPlacement};
use rondo_model::units::{DiskIndex, TitleId};
use rondo_store::{
    AlignedBuf, CATALOG_FILE, CONFIG_FILE, DirectoryFlags, HEADER_REGION_BYTES, HeaderMismatch,
    ProblemKind, Store, StoreError, fsck, verify_extent,
};

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn store_and_device_handles_can_move_to_io_threads() {
    assert_send_sync::<Store>();
    assert_send_sync::<rondo_store::Device>();
    assert_send_sync::<AlignedBuf>();
}

#[test]
fn create_then_open_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let store = Store::create(&dir, small_config(11, 64)).unwrap();
    let config = store.config().clone();
    assert_eq!(config.disk_count, 3);
    assert_eq!(config.stride_bytes, STRIDE_BYTES);
    assert_eq!(config.disk_profile, "test-profile");
    assert_eq!(store.stride_counts(), vec![64, 64, 64]);
    assert_eq!(store.free_strides(), vec![64, 64, 64]);
    for k in 0..3 {
        let path = dir.join(format!("disk-{k}.dev"));
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            HEADER_REGION_BYTES + 64 * STRIDE_BYTES
        );
        assert_eq!(store.device(DiskIndex(k)).path(), path);
    }
    assert!(dir.join(CATALOG_FILE).exists());
    let text = std::fs::read_to_string(dir.join(CONFIG_FILE)).unwrap();
    assert!(text.contains("disk_count = 3"), "{text}");
    assert!(text.contains(&config.array_id.to_string()), "{text}");
    drop(store);

    let store = Store::open(&dir).unwrap();
    assert_eq!(store.config(), &config);
    assert!(store.titles().unwrap().is_empty());
    assert!(store.recovered_titles().is_empty());
    drop(store);

    // Creating over a non-empty directory is refused.
    let err = Store::create(&dir, small_config(12, 64)).unwrap_err();
    assert!(matches!(err, StoreError::DirectoryNotEmpty { .. }), "{err}");
    // A directory without rondo.toml is not a data directory.
    let err = Store::open(tmp.path()).unwrap_err();
    assert!(matches!(err, StoreError::NotADataDirectory { .. }), "{err}");
    assert!(err.to_string().contains("no rondo.toml"), "{err}");
}

#[test]
fn runtime_flags_that_contradict_the_directory_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::create(tmp.path(), small_config(13, 16)).unwrap();
    store
        .config()
        .check_flags(&DirectoryFlags {
            disk_count: Some(3),
            ..DirectoryFlags::default()
        })
        .unwrap();
    let err = store
        .config()
        .check_flags(&DirectoryFlags {
            disk_count: Some(8),
            ..DirectoryFlags::default()
        })
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "data directory has 3 disks; --disks 8 contradicts it"
    );
}

#[test]
fn reordered_or_foreign_devices_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    drop(Store::create(&a, small_config(21, 16)).unwrap());
    drop(Store::create(&b, small_config(22, 16)).unwrap());

    // Swap disks 0 and 1 of array a.
    let d0 = a.join("disk-0.dev");
    let d1 = a.join("disk-1.dev");
    let swap = a.join("swap.dev");
    std::fs::rename(&d0, &swap).unwrap();
    std::fs::rename(&d1, &d0).unwrap();
    std::fs::rename(&swap, &d1).unwrap();
    let err = Store::open(&a).unwrap_err();
    match &err {
        StoreError::DeviceHeader { path, problem, .. } => {
            assert_eq!(path, &d0);
            assert_eq!(
                problem,
                &HeaderMismatch::WrongDisk {
                    found: 1,
                    expected: 0
                }
            );
        }
        other => panic!("expected a header mismatch, got {other}"),
    }
    let message = err.to_string();
    assert!(
        message.contains("disk-0.dev") && message.contains("reordered"),
        "{message}"
    );
    let report = fsck(&a);
    assert!(!report.passed());
    assert_eq!(
        report.problems_of(ProblemKind::Device).count(),
        2,
        "{report}"
    );
    // Swap back: it opens again.
    std::fs::rename(&d0, &swap).unwrap();
    std::fs::rename(&d1, &d0).unwrap();
    std::fs::rename(&swap, &d1).unwrap();
    drop(Store::open(&a).unwrap());

    // A device of array b in array a's slot 2.
    std::fs::copy(b.join("disk-2.dev"), a.join("disk-2.dev")).unwrap();
    let err = Store::open(&a).unwrap_err();
    assert!(
        matches!(
            &err,
            StoreError::DeviceHeader {
                problem: HeaderMismatch::ForeignArray { .. },
                ..
            }
        ),
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.contains("disk-2.dev") && message.contains("another array"),
        "{message}"
    );

    // A blank device (no rondo header at all): a dead disk, not a foreign
    // one. The store opens with that disk unavailable (a server starts with
    // it failed), and every access to it says why.
    std::fs::write(a.join("disk-2.dev"), vec![0u8; 8192]).unwrap();
    let store = Store::open(&a).unwrap();
    let unavailable = store.unavailable_disks();
    assert_eq!(unavailable.len(), 1, "{unavailable:?}");
    assert_eq!(unavailable[0].0, DiskIndex(2));
    assert!(
        unavailable[0].1.contains("not a rondo device"),
        "{unavailable:?}"
    );
    let mut buf = rondo_store::AlignedBuf::zeroed(4096);
    let err = store.device(DiskIndex(2)).read_at(0, &mut buf).unwrap_err();
    assert!(
        err.to_string().contains("no usable device") && err.to_string().contains("disk-2.dev"),
        "{err}"
    );
    drop(store);
    // A missing device: the same.
    std::fs::remove_file(a.join("disk-2.dev")).unwrap();
    let store = Store::open(&a).unwrap();
    let unavailable = store.unavailable_disks();
    assert!(
        unavailable.len() == 1 && unavailable[0].1.contains("cannot open"),
        "{unavailable:?}"
    );
    drop(store);
    // Every device missing: nothing to serve from (the wrong directory?).
    for k in 0..4 {
        let _ = std::fs::remove_file(a.join(format!("disk-{k}.dev")));
    }
    let err = Store::open(&a).unwrap_err();
    assert!(err.to_string().contains("cannot open"), "{err}");
}

#[test]
fn future_catalog_schema_and_format_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    drop(Store::create(tmp.path(), small_config(31, 16)).unwrap());
    let conn = rusqlite::Connection::open(tmp.path().join(CATALOG_FILE)).unwrap();
    conn.execute(
        "UPDATE schema_version SET version = ?1",
        [rondo_store::SCHEMA_VERSION + 1],
    )
    .unwrap();
    drop(conn);
    let err = Store::open(tmp.path()).unwrap_err();
    assert!(
        matches!(err, StoreError::FutureSchema { found, supported, .. }
            if found == rondo_store::SCHEMA_VERSION + 1 && supported == rondo_store::SCHEMA_VERSION),
        "{err}"
    );
    assert!(
        err.to_string().contains("newer than this rondo supports"),
        "{err}"
    );
    let report = fsck(tmp.path());
    assert!(!report.passed());
    assert_eq!(
        report.problems_of(ProblemKind::Catalog).count(),
        1,
        "{report}"
    );

    // rondo.toml of a newer format.
    let config_path = tmp.path().join(CONFIG_FILE);
    let text = std::fs::read_to_string(&config_path).unwrap();
    let newer = text.replace("format_version = 1", "format_version = 2\nnew_field = 1");
    assert_ne!(text, newer);
    std::fs::write(&config_path, newer).unwrap();
    let err = Store::open(tmp.path()).unwrap_err();
    assert!(
        matches!(err, StoreError::UnsupportedFormat { found: 2, .. }),
        "{err}"
    );
}

#[test]
fn a_catalog_of_another_array_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    drop(Store::create(&a, small_config(41, 16)).unwrap());
    drop(Store::create(&b, small_config(42, 16)).unwrap());
    std::fs::copy(b.join(CATALOG_FILE), a.join(CATALOG_FILE)).unwrap();
    let err = Store::open(&a).unwrap_err();
    assert!(matches!(err, StoreError::ForeignCatalog { .. }), "{err}");
}

/// Writes titles, reopens, and reads every round of both replicas and every
/// extent back, comparing bytes.
fn write_and_read_back(config: rondo_store::StoreConfig) {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::create(tmp.path(), config).unwrap();
    let titles: Vec<(String, u64, usize)> = (0..4)
        .map(|i| (format!("title {i}"), 100 + i, 5 + 3 * i as usize))
        .collect();
    let mut ids = Vec::new();
    for (name, seed, rounds) in &titles {
        let record = store_title(&store, name, *seed, *rounds);
        assert_eq!(record.client_bytes, client_bytes(*seed, *rounds));
        assert_eq!(record.size_bytes, record.client_bytes.iter().sum::<u64>());
        ids.push(record.id);
    }
    // Round-robin start disks over titles.
    let starts: Vec<u32> = store
        .titles()
        .unwrap()
        .iter()
        .map(|t| t.start_disk.0)
        .collect();
    assert_eq!(starts, vec![0, 1, 2, 0]);
    let free_before = store.free_strides();
    drop(store);

    let store = Store::open(tmp.path()).unwrap();
    assert_eq!(store.free_strides(), free_before);
    let listed = store.titles().unwrap();
    assert_eq!(
        listed.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        titles.iter().map(|t| t.0.as_str()).collect::<Vec<_>>()
    );
    let mut extents_read = 0;
    let mut two_extent_requests = 0;
    for ((name, seed, rounds), id) in titles.iter().zip(&ids) {
        let by_name = store.title_by_name(name).unwrap().unwrap();
        assert_eq!(by_name.id, *id);
        assert_eq!(by_name.content_type, "video/mp4");
        let title = store.load_title(*id).unwrap();
        assert_eq!(title.layout.rounds().len(), *rounds);
        for round in 0..*rounds {
            let expected = round_data(*seed, round, title.record.client_bytes[round]);
            for replica in [Replica::Primary, Replica::Backup] {
                let got = store.read_round(&title, round, replica).unwrap();
                assert_eq!(got, expected, "{name} round {round} {replica:?}");
            }
        }
        // Every extent, read raw through the device handle, matches its
        // checksum, and primary extents hold the round's bytes (padded).
        for extent in &title.extents {
            let mut buf = AlignedBuf::zeroed(extent.length_bytes as usize);
            store
                .device(extent.disk)
                .read_at(extent.device_offset_bytes, &mut buf)
                .unwrap();
            verify_extent(extent, &buf).unwrap();
            extents_read += 1;
        }
        for round in 0..*rounds {
            let layout = title.layout.round(round);
            two_extent_requests += usize::from(layout.primary.len() == 2);
            let mut padded = round_data(*seed, round, title.record.client_bytes[round]);
            padded.resize(layout.primary.bytes() as usize, 0);
            let mut at = 0;
            for extent in layout.primary.as_slice() {
                let mut buf = AlignedBuf::zeroed(extent.length_bytes as usize);
                store
                    .read_extent(layout.primary_disk, extent.device_offset_bytes, &mut buf)
                    .unwrap();
                assert_eq!(&buf[..], &padded[at..at + buf.len()]);
                at += buf.len();
            }
        }
    }
    assert!(extents_read > 40, "{extents_read}");
    // Some requests cross a stride end (two extents), so both cases were exercised.
    assert!(two_extent_requests > 0);
    // fsck of the open store, then of the closed directory.
    let report = store.fsck();
    assert!(report.passed(), "{report}");
    assert_eq!(report.extents_checked, extents_read);
    drop(store);
    let report = fsck(tmp.path());
    assert!(report.passed(), "{report}");
    assert_eq!(report.titles_checked, 4);
    assert_eq!(report.extents_checked, extents_read);
}

#[test]
fn titles_read_back_byte_for_byte_deterministic() {
    write_and_read_back(small_config(51, 64));
}

#[test]
fn titles_read_back_byte_for_byte_random_declustered() {
    let mut config = small_config(52, 64);
    config.placement = ReplicaPlacement::Random;
    config.backup_block_bytes = Some(BLOCK_BYTES);
    write_and_read_back(config);
}

#[test]
fn titles_read_back_byte_for_byte_in_segments() {
    let mut config = small_config(54, 64);
    config.segment_rounds = 4;
    write_and_read_back(config.clone());
    // The layout is fixed in rondo.toml and a contradicting flag is refused.
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::create(tmp.path(), config).unwrap();
    drop(store);
    let text = std::fs::read_to_string(tmp.path().join(rondo_store::CONFIG_FILE)).unwrap();
    assert!(text.contains("segment_rounds = 4"), "{text}");
    let store = Store::open(tmp.path()).unwrap();
    assert_eq!(store.layout_params().segment_rounds, 4);
    let err = store
        .config()
        .check_flags(&DirectoryFlags {
            segment_rounds: Some(1),
            ..DirectoryFlags::default()
        })
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("segments layout (4 rounds per segment)"),
        "{err}"
    );
    // A variable-grain directory does not write the field (older readers
    // and older directories agree).
    let tmp = tempfile::tempdir().unwrap();
    drop(Store::create(tmp.path(), small_config(55, 16)).unwrap());
    let text = std::fs::read_to_string(tmp.path().join(rondo_store::CONFIG_FILE)).unwrap();
    assert!(!text.contains("segment_rounds"), "{text}");
}

#[test]
fn titles_read_back_byte_for_byte_without_backups() {
    let mut config = small_config(53, 64);
    config.scheme = rondo_model::reservation::Scheme::None;
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::create(tmp.path(), config).unwrap();
    let record = store_title(&store, "solo", 7, 6);
    let title = store.load_title(record.id).unwrap();
    assert!(title.extents.iter().all(|e| e.replica == Replica::Primary));
    for round in 0..6 {
        assert_eq!(
            store.read_round(&title, round, Replica::Primary).unwrap(),
            round_data(7, round, record.client_bytes[round])
        );
        let backup = store.read_round(&title, round, Replica::Backup);
        if record.client_bytes[round] == 0 {
            assert!(backup.unwrap().is_empty());
        } else {
            let err = backup.unwrap_err();
            assert!(matches!(err, StoreError::NoBackup { .. }), "{err}");
        }
    }
    assert!(store.fsck().passed());
}

#[test]
fn a_flipped_byte_is_found_by_fsck_and_by_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::create(tmp.path(), small_config(61, 64)).unwrap();
    store_title(&store, "good", 1, 6);
    let record = store_title(&store, "damaged", 2, 6);
    let title = store.load_title(record.id).unwrap();
    drop(store);
    assert!(fsck(tmp.path()).passed());

    let target = *title.round_extents(1, Replica::Primary).first().unwrap();
    let device_path = tmp.path().join(format!("disk-{}.dev", target.disk.0));
    flip_byte(
        &device_path,
        HEADER_REGION_BYTES + target.device_offset_bytes + 100,
    );

    let report = fsck(tmp.path());
    assert!(!report.passed());
    let problems: Vec<_> = report.problems_of(ProblemKind::Checksum).collect();
    assert_eq!(problems.len(), 1, "{report}");
    assert_eq!(report.problems.len(), 1, "{report}");
    let message = &problems[0].message;
    assert!(
        message.contains("\"damaged\"") && message.contains("round 1 primary piece 0"),
        "{message}"
    );
    assert!(report.to_string().contains("FAILED"), "{report}");

    let store = Store::open(tmp.path()).unwrap();
    let title = store.load_title(record.id).unwrap();
    let err = store.read_round(&title, 1, Replica::Primary).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::ChecksumMismatch {
                round: 1,
                replica: Replica::Primary,
                ..
            }
        ),
        "{err}"
    );
    // The backup replica still serves the round.
    assert_eq!(
        store.read_round(&title, 1, Replica::Backup).unwrap(),
        round_data(2, 1, record.client_bytes[1])
    );
    assert_eq!(store.fsck().problems.len(), 1);
}

#[test]
fn a_dropped_writer_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::create(tmp.path(), small_config(71, 64)).unwrap();
    store_title(&store, "kept", 1, 5);
    let free_before = store.free_strides();
    let writer = begin_and_write(&store, "abandoned", 2, 8, 3);
    assert!(store.free_strides().iter().sum::<u64>() < free_before.iter().sum::<u64>());
    // Invisible while being written.
    assert_eq!(store.titles().unwrap().len(), 1);
    assert!(store.title_by_name("abandoned").unwrap().is_none());
    assert!(store.title(writer.id()).unwrap().is_none());
    assert!(matches!(
        store.load_title(writer.id()),
        Err(StoreError::TitleNotFound(_))
    ));
    // Its name is taken while it is being written.
    let bytes = client_bytes(3, 4);
    let err = store
        .begin_title(meta("abandoned", bytes.clone()), &plan_for(&store, &bytes))
        .unwrap_err();
    assert!(matches!(err, StoreError::NameTaken { .. }), "{err}");
    drop(writer);
    assert_eq!(store.free_strides(), free_before);
    assert_eq!(store.titles().unwrap().len(), 1);
    assert!(store.fsck().passed());
    // The name is free again.
    store_title(&store, "abandoned", 4, 4);

    // An explicit abort does the same, and gives the bytes written back to
    // the filesystem at once (holes in the sparse devices): an ingest that
    // failed on a full filesystem does not keep it full until a restart.
    let allocated_bytes = || -> u64 {
        use std::os::unix::fs::MetadataExt;
        store
            .devices()
            .iter()
            .map(|d| std::fs::metadata(d.path()).unwrap().blocks() * 512)
            .sum()
    };
    let free_before = store.free_strides();
    let allocated_before = allocated_bytes();
    let writer = begin_and_write(&store, "aborted", 5, 6, 2);
    let allocated_writing = allocated_bytes();
    assert!(allocated_writing > allocated_before);
    writer.abort().unwrap();
    assert_eq!(store.free_strides(), free_before);
    assert_eq!(store.titles().unwrap().len(), 2);
    // A few KiB of slack: the filesystem may keep an extent-tree block.
    assert!(
        allocated_bytes() <= allocated_before + 16 * 1024,
        "{allocated_before} bytes allocated before, {allocated_writing} while writing, {} after",
        allocated_bytes()
    );
    assert!(store.fsck().passed());
}

#[test]
fn writer_misuse_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::create(tmp.path(), small_config(81, 64)).unwrap();
    let bytes = client_bytes(1, 5);
    let mut writer = store
        .begin_title(meta("t", bytes.clone()), &plan_for(&store, &bytes))
        .unwrap();
    let err = writer
        .write_round(1, &round_data(1, 1, bytes[1]))
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::RoundOutOfOrder {
                expected: 0,
                got: 1,
                ..
            }
        ),
        "{err}"
    );
    let err = writer.write_round(0, &[1, 2, 3]).unwrap_err();
    assert!(
        matches!(err, StoreError::RoundLengthMismatch { round: 0, .. }),
        "{err}"
    );
    writer.write_round(0, &round_data(1, 0, bytes[0])).unwrap();
    let err = writer.commit().unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::IncompleteTitle {
                written: 1,
                rounds: 5,
                ..
            }
        ),
        "{err}"
    );
    // The failed commit dropped the writer, which removed the title.
    assert_eq!(store.free_strides(), store.stride_counts());

    // A plan that does not belong to the title's client bytes.
    let other = client_bytes(2, 5);
    let err = store
        .begin_title(meta("t", bytes.clone()), &plan_for(&store, &other))
        .unwrap_err();
    assert!(matches!(err, StoreError::PlanMismatch { .. }), "{err}");
    // A schedule for another round length.
    let mut wrong_round = meta("t", bytes.clone());
    wrong_round.round_duration_ns /= 2;
    let err = store
        .begin_title(wrong_round, &plan_for(&store, &bytes))
        .unwrap_err();
    assert!(err.to_string().contains("ns rounds"), "{err}");
    assert!(store.titles().unwrap().is_empty());
}

#[test]
fn bad_names_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::create(tmp.path(), small_config(91, 64)).unwrap();
    let bytes = client_bytes(1, 4);
    let long = "x".repeat(256);
    for name in [
        "",
        "a/b",
        "..",
        "x..y",
        "tab\there",
        "nl\n",
        "\u{7f}",
        ".",
        "a\\b",
        &long,
    ] {
        let err = store
            .begin_title(meta(name, bytes.clone()), &plan_for(&store, &bytes))
            .unwrap_err();
        assert!(
            matches!(err, StoreError::InvalidName { .. }),
            "{name:?}: {err}"
        );
    }
    assert_eq!(store.free_strides(), store.stride_counts());
    for name in ["Big Buck Bunny (2008)", "été.mp4", "a.b", &"y".repeat(255)] {
        rondo_store::validate_title_name(name).unwrap();
    }
    store_title(&store, "Big Buck Bunny (2008)", 1, 4);
}

/// Rows of every catalog table, to compare before and after a refused change.
fn catalog_snapshot(dir: &std::path::Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(dir.join(CATALOG_FILE)).unwrap();
    let mut out = Vec::new();
    for table in ["catalog_info", "titles", "title_strides", "extents"] {
        let mut stmt = conn.prepare(&format!("SELECT * FROM {table}")).unwrap();
        let columns = stmt.column_count();
        let rows = stmt
            .query_map([], |r| {
                let mut row = format!("{table}:");
                for c in 0..columns {
                    row.push_str(&format!(" {:?}", r.get_ref(c)?));
                }
                Ok(row)
            })
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        out.extend(rows);
    }
    out.sort();
    out
}

#[test]
fn a_full_disk_is_a_clear_error_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    // 6 strides per disk.
    let store = Store::create(tmp.path(), small_config(101, 6)).unwrap();
    store_title(&store, "first", 1, 9);
    let free_before = store.free_strides();
    let snapshot = catalog_snapshot(tmp.path());
    let bytes = client_bytes(2, 30);
    let plan = plan_for(&store, &bytes);
    let err = store
        .begin_title(meta("too big", bytes), &plan)
        .unwrap_err();
    match &err {
        StoreError::DiskFull {
            name,
            needed_strides,
            free_strides,
            ..
        } => {
            assert_eq!(name, "too big");
            assert!(needed_strides > free_strides);
        }
        other => panic!("expected DiskFull, got {other}"),
    }
    assert!(err.to_string().contains("is full"), "{err}");
    assert_eq!(store.free_strides(), free_before);
    assert_eq!(catalog_snapshot(tmp.path()), snapshot);
    assert_eq!(store.titles().unwrap().len(), 1);
    // With the space freed, a small title fits.
    let first = store.title_by_name("first").unwrap().unwrap();
    store.delete_title(first.id).unwrap();
    store_title(&store, "small", 3, 2);
    assert!(store.fsck().passed());
}

#[test]
fn deleting_a_title_frees_its_strides() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::create(tmp.path(), small_config(111, 64)).unwrap();
    let empty = store.free_strides();
    let a = store_title(&store, "a", 1, 7);
    let b = store_title(&store, "b", 2, 7);
    store.delete_title(a.id).unwrap();
    assert!(store.title(a.id).unwrap().is_none());
    assert!(matches!(
        store.delete_title(a.id),
        Err(StoreError::TitleNotFound(TitleId(_)))
    ));
    assert!(store.fsck().passed());
    drop(store);
    let store = Store::open(tmp.path()).unwrap();
    assert_eq!(store.titles().unwrap().len(), 1);
    let title = store.load_title(b.id).unwrap();
    assert_eq!(
        store.read_round(&title, 0, Replica::Primary).unwrap(),
        round_data(2, 0, b.client_bytes[0])
    );
    store.delete_title(b.id).unwrap();
    assert_eq!(store.free_strides(), empty);
    // The name is free again; ids are never reused.
    let again = store_title(&store, "a", 1, 7);
    assert_ne!(again.id, a.id);
    assert_ne!(again.id, b.id);
    assert!(fsck_passes(tmp.path(), store));
}

fn fsck_passes(dir: &std::path::Path, store: Store) -> bool {
    drop(store);
    let report = fsck(dir);
    report.passed() && report.orphans.is_empty()
}

#[test]
fn fsck_finds_extents_outside_owned_strides_and_overlapping_strides() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::create(tmp.path(), small_config(121, 64)).unwrap();
    let a = store_title(&store, "a", 1, 6);
    store_title(&store, "b", 2, 6);
    drop(store);
    assert!(fsck(tmp.path()).passed());

    let conn = rusqlite::Connection::open(tmp.path().join(CATALOG_FILE)).unwrap();
    // Move one of a's extents far away, into a stride nobody owns.
    conn.execute(
        "UPDATE extents SET device_offset_bytes = ?1 \
         WHERE title_id = ?2 AND round = 0 AND replica = 'primary' AND piece = 0",
        rusqlite::params![(60 * STRIDE_BYTES) as i64, a.id.0 as i64],
    )
    .unwrap();
    drop(conn);
    let report = fsck(tmp.path());
    let extent_problems: Vec<_> = report.problems_of(ProblemKind::Extent).collect();
    assert_eq!(extent_problems.len(), 2, "{report}");
    assert!(
        extent_problems.iter().any(|p| p
            .message
            .contains("not inside a primary stride the title owns")),
        "{report}"
    );

    // Make b hold one of a's strides (the unique index forbids it, so drop it
    // first, as a damaged catalog might have).
    let conn = rusqlite::Connection::open(tmp.path().join(CATALOG_FILE)).unwrap();
    conn.execute_batch("DROP INDEX title_strides_owner")
        .unwrap();
    let (disk, stride): (i64, i64) = conn
        .query_row(
            "SELECT disk, stride_index FROM title_strides WHERE title_id = ?1 LIMIT 1",
            [a.id.0 as i64],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    conn.execute(
        "INSERT INTO title_strides (title_id, disk, replica, ordinal, stride_index) \
         SELECT id, ?1, 'primary', 99, ?2 FROM titles WHERE name = 'b'",
        rusqlite::params![disk, stride],
    )
    .unwrap();
    drop(conn);
    let report = fsck(tmp.path());
    assert!(
        report
            .problems_of(ProblemKind::Strides)
            .any(|p| p.message.contains("is held by both")),
        "{report}"
    );
    // Opening refuses a catalog whose strides overlap.
    let err = Store::open(tmp.path()).unwrap_err();
    assert!(matches!(err, StoreError::CatalogCorrupt { .. }), "{err}");
}

#[test]
fn devices_can_live_outside_the_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = tmp.path().join("disks");
    std::fs::create_dir(&disks).unwrap();
    let dir = tmp.path().join("data");
    let mut config = small_config(131, 16);
    let paths: Vec<_> = (0..3).map(|k| disks.join(format!("sd{k}"))).collect();
    // One device already exists as an empty file, as a pre-created image might.
    std::fs::File::create(&paths[1]).unwrap();
    config.device_paths = Some(paths.clone());
    let store = Store::create(&dir, config).unwrap();
    for (k, path) in paths.iter().enumerate() {
        assert_eq!(store.device(DiskIndex(k as u32)).path(), path);
        assert_eq!(store.config().devices[k].path, *path);
    }
    assert!(!dir.join("disk-0.dev").exists());
    let record = store_title(&store, "outside", 1, 5);
    drop(store);

    // Buffered access reads the same bytes.
    let store = Store::open_with_io_mode(&dir, rondo_store::IoMode::Buffered).unwrap();
    assert!(
        store
            .devices()
            .iter()
            .all(|d| d.io_mode() == rondo_store::IoMode::Buffered)
    );
    let title = store.load_title(record.id).unwrap();
    for round in 0..5 {
        assert_eq!(
            store.read_round(&title, round, Replica::Primary).unwrap(),
            round_data(1, round, record.client_bytes[round])
        );
    }
    drop(store);
    assert!(fsck(&dir).passed());
}

#[test]
fn a_failed_create_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let disks = tmp.path().join("disks");
    std::fs::create_dir(&disks).unwrap();
    let paths: Vec<_> = (0..3).map(|k| disks.join(format!("sd{k}"))).collect();
    // Disk 2's path holds data: creation must refuse before touching disks 0 and 1.
    std::fs::write(&paths[2], b"precious").unwrap();
    let dir = tmp.path().join("data");
    let mut config = small_config(141, 16);
    config.device_paths = Some(paths.clone());
    let err = Store::create(&dir, config.clone()).unwrap_err();
    assert!(
        matches!(&err, StoreError::DeviceUnusable { path, .. } if *path == paths[2]),
        "{err}"
    );
    assert!(err.to_string().contains("not empty"), "{err}");
    assert!(!dir.exists());
    assert!(!paths[0].exists() && !paths[1].exists());
    assert_eq!(std::fs::read(&paths[2]).unwrap(), b"precious");

    // Disk 2's path cannot be created (no such parent directory): disks 0 and
    // 1 were made by then and are removed again.
    let mut unreachable = config.clone();
    let mut bad_paths = paths.clone();
    bad_paths[2] = tmp.path().join("missing").join("sd2");
    unreachable.device_paths = Some(bad_paths);
    let err = Store::create(&dir, unreachable).unwrap_err();
    assert!(err.to_string().contains("cannot create"), "{err}");
    assert!(!dir.exists());
    assert!(!paths[0].exists() && !paths[1].exists());
    // The same into an existing empty directory empties it again.
    std::fs::create_dir(&dir).unwrap();
    let mut unreachable = config.clone();
    let mut bad_paths = paths.clone();
    bad_paths[2] = tmp.path().join("missing").join("sd2");
    unreachable.device_paths = Some(bad_paths);
    Store::create(&dir, unreachable).unwrap_err();
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir(&dir).unwrap();

    // With the obstacle gone, the same configuration creates fine.
    std::fs::remove_file(&paths[2]).unwrap();
    drop(Store::create(&dir, config).unwrap());

    // An invalid configuration is refused before the directory is touched.
    let mut bad = small_config(142, 16);
    bad.block_bytes = 1024;
    bad.stride_bytes = 64 * 1024;
    let other = tmp.path().join("other");
    let err = Store::create(&other, bad).unwrap_err();
    assert!(matches!(err, StoreError::InvalidConfig { .. }), "{err}");
    assert!(!other.exists());
}
