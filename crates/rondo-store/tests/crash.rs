//! Crash safety and directory ownership across processes: the test binary
//! runs itself as a child process (the `child_*` functions, ignored so they
//! run only when a parent asks for them by name) that either dies with
//! `abort()` in the middle of writing a title, or tries to open a directory
//! another process holds.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output};

use common::*;
use rondo_model::layout::Replica;
use rondo_store::{RemoteDevice, Store, StoreError, fsck};

const DIR_VAR: &str = "RONDO_STORE_CHILD_DIR";
const EXPECT_VAR: &str = "RONDO_STORE_CHILD_EXPECT";

/// Held by each parent test for its whole run. A child process starts with
/// a copy of the parent's descriptors and holds them until it executes the
/// test binary; a child spawned by one test while another test held a
/// directory's lock kept that lock alive past the other test's `drop`, and
/// the other test's own child then found the directory locked (seen in CI
/// on a loaded machine: `Locked { holder_pid: <the parent> }`).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn run_child(test: &str, dir: &Path, expect: &str) -> Output {
    Command::new(std::env::current_exe().unwrap())
        .args([
            test,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_VAR, dir)
        .env(EXPECT_VAR, expect)
        .output()
        .unwrap()
}

fn child_dir() -> std::path::PathBuf {
    std::env::var_os(DIR_VAR)
        .expect("run by a parent test, which sets the directory")
        .into()
}

/// Child: opens the store, writes half of a title, and dies without
/// unwinding, as a power cut or kill -9 would stop it.
#[test]
#[ignore = "child process of a_crash_mid_write_is_recovered_on_open"]
fn child_crashes_mid_write() {
    let store = Store::open(child_dir()).unwrap();
    let _writer = begin_and_write(&store, "partial", 9, 10, 5);
    std::process::abort();
}

/// Child: opens the directory and checks the outcome the parent expects.
#[test]
#[ignore = "child process of only_one_process_owns_a_directory"]
fn child_opens() {
    let expect = std::env::var(EXPECT_VAR).unwrap();
    match Store::open(child_dir()) {
        Err(err @ StoreError::Locked { holder_pid, .. }) => {
            assert_eq!(expect, "locked", "{err}");
            assert_eq!(holder_pid, Some(std::os::unix::process::parent_id()));
            println!("refused: {err}");
        }
        Ok(store) => {
            assert_eq!(expect, "open");
            println!("opened {} titles", store.titles().unwrap().len());
        }
        Err(other) => panic!("unexpected error: {other}"),
    }
}

#[test]
fn a_crash_mid_write_is_recovered_on_open() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::create(tmp.path(), small_config(201, 64)).unwrap();
    let kept = store_title(&store, "kept", 1, 6);
    let free_before = store.free_strides();
    drop(store);

    let output = run_child("child_crashes_mid_write", tmp.path(), "crash");
    assert_eq!(
        output.status.signal(),
        Some(libc::SIGABRT),
        "the child should have aborted: {output:?}"
    );

    // Before recovery: the interrupted title is an orphan holding strides,
    // and nothing else is wrong.
    let report = fsck(tmp.path());
    assert!(report.passed(), "{report}");
    assert_eq!(report.orphans.len(), 1, "{report}");
    assert_eq!(report.orphans[0].name, "partial");
    assert!(report.orphans[0].strides > 0);
    assert!(report.to_string().contains("orphan"), "{report}");

    let store = Store::open(tmp.path()).unwrap();
    assert_eq!(store.recovered_titles(), ["partial".to_string()]);
    assert_eq!(store.free_strides(), free_before);
    let titles = store.titles().unwrap();
    assert_eq!(titles.len(), 1);
    assert_eq!(titles[0].id, kept.id);
    let title = store.load_title(kept.id).unwrap();
    for round in 0..6 {
        assert_eq!(
            store.read_round(&title, round, Replica::Backup).unwrap(),
            round_data(1, round, kept.client_bytes[round])
        );
    }
    // The name can be used again, and the directory checks clean.
    store_title(&store, "partial", 9, 10);
    drop(store);
    let report = fsck(tmp.path());
    assert!(report.passed() && report.orphans.is_empty(), "{report}");
    let store = Store::open(tmp.path()).unwrap();
    assert!(store.recovered_titles().is_empty());
    assert_eq!(store.titles().unwrap().len(), 2);
}

/// Bytes the filesystem holds for the file at `path` (its allocated blocks).
fn allocated_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().blocks() * 512
}

/// Disk `k`'s device holds `now` bytes: what it held before the partial
/// title, within a block of the filesystem's own (ext4's extent tree keeps
/// a block it grew), where the partial title had added at least a stride.
fn given_back(now: u64, k: usize, before_crash: &[u64], after_crash: &[u64]) {
    eprintln!(
        "disk {k}: {} bytes before the partial title, {} after it, {now} after recovery",
        before_crash[k], after_crash[k]
    );
    assert!(after_crash[k] >= before_crash[k] + (64 << 10), "disk {k}");
    assert!(
        now <= before_crash[k] + (4 << 10),
        "disk {k}: {now} bytes held after recovery, {} before the partial title",
        before_crash[k]
    );
}

/// A device in another directory, reached as a cluster's storage node's
/// would be (the store sees it only through [`RemoteDevice`]).
#[derive(Debug)]
struct DeviceElsewhere(std::sync::Arc<rondo_store::Device>);

impl RemoteDevice for DeviceElsewhere {
    fn location(&self) -> String {
        self.0.path().display().to_string()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.0.read_at(offset, buf).map_err(std::io::Error::other)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        self.0.write_at(offset, buf).map_err(std::io::Error::other)
    }
    fn punch_hole(&self, offset: u64, length_bytes: u64) {
        self.0.punch_hole(offset, length_bytes)
    }
    fn sync(&self) -> std::io::Result<()> {
        self.0.sync().map_err(std::io::Error::other)
    }
}

/// An interrupted ingest's strides give their bytes back to the filesystem
/// when the next open removes the title: at once on the directory's own
/// devices, and on a device held elsewhere (a storage node's) when it is
/// attached; the strides a title placed meanwhile would keep theirs.
#[test]
fn an_interrupted_ingest_gives_its_bytes_back_here_and_on_a_nodes_device() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let store = Store::create(&dir, small_config(203, 64)).unwrap();
    store_title(&store, "kept", 1, 6);
    let devices: Vec<_> = (0..3)
        .map(|k| store.config().device_path(&dir, k))
        .collect();
    drop(store);
    let before_crash: Vec<u64> = devices.iter().map(|d| allocated_bytes(d)).collect();

    let output = run_child("child_crashes_mid_write", &dir, "crash");
    assert_eq!(output.status.signal(), Some(libc::SIGABRT), "{output:?}");
    let after_crash: Vec<u64> = devices.iter().map(|d| allocated_bytes(d)).collect();
    assert!(
        (0..3).all(|k| after_crash[k] > before_crash[k]),
        "the partial title wrote on every disk: {before_crash:?} -> {after_crash:?}"
    );

    // Disk 1's device moves to a node's directory of its own.
    let node = tmp.path().join("node-1");
    std::fs::create_dir(&node).unwrap();
    std::fs::copy(dir.join("rondo.toml"), node.join("rondo.toml")).unwrap();
    let moved = node.join(devices[1].file_name().unwrap());
    std::fs::rename(&devices[1], &moved).unwrap();

    let store = Store::open_devices_elsewhere(&dir).unwrap();
    assert_eq!(store.recovered_titles(), ["partial".to_string()]);
    for k in [0, 2] {
        given_back(allocated_bytes(&devices[k]), k, &before_crash, &after_crash);
    }
    assert_eq!(
        allocated_bytes(&moved),
        after_crash[1],
        "disk 1's device is not here: nothing punched yet"
    );
    let (_, mut opened) = rondo_store::open_node_devices(
        &node,
        &[rondo_model::units::DiskIndex(1)],
        rondo_store::IoMode::Buffered,
    )
    .unwrap();
    store.attach_remote_device(
        rondo_model::units::DiskIndex(1),
        std::sync::Arc::new(DeviceElsewhere(opened.pop().unwrap())),
    );
    given_back(allocated_bytes(&moved), 1, &before_crash, &after_crash);
    // The kept title still reads whole, disk 1 through the node.
    let kept = store.titles().unwrap()[0].clone();
    let title = store.load_title(kept.id).unwrap();
    for round in 0..6 {
        assert_eq!(
            store.read_round(&title, round, Replica::Primary).unwrap(),
            round_data(1, round, kept.client_bytes[round])
        );
    }
}

#[test]
fn only_one_process_owns_a_directory() {
    let _serial = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::create(tmp.path(), small_config(202, 16)).unwrap();
    store_title(&store, "t", 1, 3);

    let output = run_child("child_opens", tmp.path(), "locked");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(
        stdout.contains(&format!(
            "already open (held by pid {})",
            std::process::id()
        )),
        "{stdout}"
    );
    // A second open in this process is refused too, and so is fsck of the
    // directory (the open store checks itself with Store::fsck).
    assert!(matches!(
        Store::open(tmp.path()),
        Err(StoreError::Locked { .. })
    ));
    assert!(!fsck(tmp.path()).passed());
    assert!(store.fsck().passed());

    drop(store);
    let output = run_child("child_opens", tmp.path(), "open");
    assert!(output.status.success(), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("opened 1 titles"));
}
