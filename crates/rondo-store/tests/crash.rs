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
use rondo_store::{Store, StoreError, fsck};

const DIR_VAR: &str = "RONDO_STORE_CHILD_DIR";
const EXPECT_VAR: &str = "RONDO_STORE_CHILD_EXPECT";

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

#[test]
fn only_one_process_owns_a_directory() {
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
