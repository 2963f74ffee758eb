//! Replacing a disk's device: the new device gets this array's header for
//! the disk, rondo.toml records its path, the store reads and writes it, and
//! paths that hold something (another disk, a non-empty file) are refused.

mod common;

use common::*;
use rondo_model::layout::Replica;
use rondo_model::units::DiskIndex;
use rondo_store::{ProblemKind, Store, fsck};

#[test]
fn a_replaced_device_is_recorded_and_rebuilt_extents_read_back() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let store = Store::create(&dir, small_config(41, 40)).unwrap();
    let record = store_title(&store, "t", 7, 9);
    let title = store.load_title(record.id).unwrap();

    // Another disk's path and a non-empty file are refused, nothing changes.
    let err = store
        .replace_device(DiskIndex(1), &dir.join("disk-2.dev"))
        .unwrap_err();
    assert!(err.to_string().contains("already disk 2"), "{err}");
    let full = tmp.path().join("full.dev");
    std::fs::write(&full, b"data").unwrap();
    let err = store.replace_device(DiskIndex(1), &full).unwrap_err();
    assert!(err.to_string().contains("not empty"), "{err}");
    assert!(err.to_string().contains("full.dev"), "{err}");
    assert!(
        std::fs::read_to_string(dir.join("rondo.toml"))
            .unwrap()
            .contains("disk-1.dev")
    );

    let new_path = tmp.path().join("new-1.dev");
    let device = store.replace_device(DiskIndex(1), &new_path).unwrap();
    assert_eq!(device.path(), new_path);
    assert_eq!(store.device(DiskIndex(1)).path(), new_path);
    let toml = std::fs::read_to_string(dir.join("rondo.toml")).unwrap();
    assert!(
        toml.contains("new-1.dev") && !toml.contains("disk-1.dev"),
        "{toml}"
    );
    // The old device file, inside the data directory, is gone; the other
    // disks' files and the refused candidate (outside it) stay.
    assert!(
        !dir.join("disk-1.dev").exists(),
        "the replaced device file stays behind"
    );
    assert!(dir.join("disk-2.dev").exists() && full.exists());

    // The new device is empty: every extent disk 1 held now fails its
    // checksum, and the other replica still serves those rounds.
    let report = store.fsck();
    let bad: Vec<_> = report.problems_of(ProblemKind::Checksum).collect();
    assert!(!bad.is_empty());
    assert!(bad.iter().all(|p| p.message.contains("disk 1")), "{report}");
    // Rewrite what disk 1 held from the other replica (what a rebuild does).
    for round in 0..record.client_bytes.len() {
        let layout = title.layout.round(round);
        let data = store.read_round(&title, round, Replica::Backup);
        let primary = store.read_round(&title, round, Replica::Primary);
        let good = if layout.primary_disk.0 == 1 {
            data
        } else {
            primary
        }
        .unwrap();
        let mut padded = rondo_store::AlignedBuf::zeroed(layout.primary.bytes() as usize);
        padded[..good.len()].copy_from_slice(&good);
        if layout.primary_disk.0 == 1 {
            let mut at = 0usize;
            for x in layout.primary.as_slice() {
                let len = x.length_bytes as usize;
                device
                    .write_at(x.device_offset_bytes, &padded[at..at + len])
                    .unwrap();
                at += len;
            }
        }
        for b in layout.backups.iter().filter(|b| b.disk.0 == 1) {
            let mut piece = Vec::new();
            for f in &b.fragments {
                piece.extend_from_slice(&padded[f.start as usize..f.end as usize]);
            }
            let mut at = 0usize;
            for x in b.extents.as_slice() {
                let len = x.length_bytes as usize;
                let mut buf = rondo_store::AlignedBuf::zeroed(len);
                buf.copy_from_slice(&piece[at..at + len]);
                device.write_at(x.device_offset_bytes, &buf).unwrap();
                at += len;
            }
        }
    }
    device.sync().unwrap();
    drop(title);
    drop(store);
    let report = fsck(&dir);
    assert!(report.passed(), "{report}");
    // The directory opens with the new device as disk 1.
    let store = Store::open(&dir).unwrap();
    assert_eq!(store.device(DiskIndex(1)).path(), new_path);
}

#[test]
fn a_disk_outside_the_array_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let store = Store::create(&dir, small_config(42, 8)).unwrap();
    let err = store
        .replace_device(DiskIndex(3), &tmp.path().join("x.dev"))
        .unwrap_err();
    assert!(err.to_string().contains('3'), "{err}");
    assert!(!tmp.path().join("x.dev").exists());
}

#[test]
fn a_failed_disk_stays_failed_across_opens_and_fsck_skips_its_device() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let store = Store::create(&dir, small_config(43, 40)).unwrap();
    store_title(&store, "t", 7, 9);
    let clean = store.fsck();
    assert!(clean.passed() && clean.failed_disks.is_empty(), "{clean}");
    assert_eq!(clean.status(), rondo_store::FsckStatus::Passed);

    // Failed, then replaced by an empty device not yet rebuilt.
    store
        .record_disk_failed(DiskIndex(2), "an operator failed it", 1_790_000_000)
        .unwrap();
    store
        .replace_device(DiskIndex(2), &tmp.path().join("new-2.dev"))
        .unwrap();
    let report = store.fsck();
    assert!(report.passed(), "{report}");
    assert_eq!(report.status(), rondo_store::FsckStatus::Degraded);
    assert!(report.to_string().contains("DEGRADED"), "{report}");
    assert!(
        report.lost_rounds.is_empty(),
        "one failed disk loses nothing"
    );
    assert_eq!(report.failed_disks, vec![DiskIndex(2)]);
    assert!(report.extents_skipped > 0, "{report}");
    assert!(report.to_string().contains("disk 2 is failed"), "{report}");
    drop(store);

    // A restart (a new open) still sees it failed; fsck of the closed
    // directory does too.
    let store = Store::open(&dir).unwrap();
    assert_eq!(
        store.disk_states().unwrap().failed_disks(),
        vec![DiskIndex(2)]
    );
    let failed = &store.disk_states().unwrap().failed["2"];
    assert_eq!(failed.reason, "an operator failed it");
    drop(store);
    let report = fsck(&dir);
    assert!(report.passed(), "{report}");
    assert_eq!(report.failed_disks, vec![DiskIndex(2)]);

    // Serving again without a rebuild: the empty device's checksums fail,
    // which shows fsck skipped it only because it was failed.
    let store = Store::open(&dir).unwrap();
    store.record_disk_serving(DiskIndex(2)).unwrap();
    assert!(store.disk_states().unwrap().failed_disks().is_empty());
    let report = store.fsck();
    assert!(!report.passed(), "{report}");
    assert!(
        report
            .problems_of(ProblemKind::Checksum)
            .all(|p| p.message.contains("disk 2")),
        "{report}"
    );
}

#[test]
fn fsck_reports_data_with_no_working_replica_as_degraded() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let store = Store::create(&dir, small_config(44, 40)).unwrap();
    store_title(&store, "t", 7, 9);
    // Two failed disks: rounds with both copies on them have none left.
    store.record_disk_failed(DiskIndex(0), "x", 1).unwrap();
    store.record_disk_failed(DiskIndex(1), "x", 1).unwrap();
    let report = store.fsck();
    assert!(report.passed(), "no structural problem: {report}");
    assert_eq!(report.status(), rondo_store::FsckStatus::Degraded);
    assert!(!report.lost_rounds.is_empty(), "{report}");
    assert!(
        report.to_string().contains("has no working replica"),
        "{report}"
    );
}

#[test]
fn extent_faults_are_kept_across_opens_and_a_damaged_record_fails_fsck_by_name() {
    use rondo_model::array::{ExtentFaults, LostRound};
    use rondo_model::units::{PlaybackRound, TitleId};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let store = Store::create(&dir, small_config(44, 40)).unwrap();
    store_title(&store, "t", 7, 9);
    assert_eq!(store.extent_faults().unwrap(), ExtentFaults::default());
    let faults = ExtentFaults {
        bad: Vec::new(),
        lost: vec![LostRound {
            title: TitleId(0),
            playback_round: PlaybackRound(3),
        }],
    };
    store.save_extent_faults(&faults).unwrap();
    drop(store);
    let store = Store::open(&dir).unwrap();
    assert_eq!(store.extent_faults().unwrap(), faults);
    // The record is the server's; fsck finds its own lost rounds from the
    // checksums (none here) and only checks that the record loads.
    assert!(store.fsck().passed());
    drop(store);
    std::fs::write(
        dir.join(rondo_store::EXTENT_FAULTS_FILE),
        "[[bad]]\nnot = 1\n",
    )
    .unwrap();
    let report = fsck(&dir);
    assert!(!report.passed(), "{report}");
    assert!(
        report
            .problems_of(ProblemKind::Config)
            .any(|p| p.message.contains(rondo_store::EXTENT_FAULTS_FILE)),
        "{report}"
    );
}
