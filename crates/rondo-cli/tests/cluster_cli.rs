//! A cluster of processes on this machine (issue 14, seed 001's storage
//! nodes): four `rondo node storage` processes each read one disk of a data
//! directory for a `rondo serve --storage-node ...` manager over gRPC. The
//! manager serves the titles byte for byte as a single `rondo serve` does;
//! one node process is killed (SIGKILL) while `rondo load` plays streams,
//! its disk fails by itself within a round, no reserved read misses its
//! deadline, no stream breaks, only streams with a read in flight on the
//! node may stall, and every title still plays byte for byte from the
//! other replicas.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rondo_testkit::process::{RondoServe, Serve, StorageNode, success_json as json};
use serde_json::Value;

fn rondo() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rondo"))
}

fn status(data: &Path) -> Value {
    let output: Output = rondo()
        .args(["admin", "status", "--json", "--data-dir"])
        .arg(data)
        .output()
        .unwrap();
    json(&output)
}

/// Every title's whole body, by id.
fn bodies(url: &str) -> Bodies {
    let titles: Value = reqwest::blocking::get(format!("{url}/api/titles"))
        .unwrap()
        .json()
        .unwrap();
    titles
        .as_array()
        .expect("a list of titles")
        .iter()
        .map(|t| {
            let id = t["id"].as_u64().unwrap();
            let response = reqwest::blocking::get(format!("{url}/stream/{id}")).unwrap();
            assert_eq!(response.status(), 200, "title {id}");
            (id, response.bytes().unwrap().to_vec())
        })
        .collect()
}

/// Each sample title's id and body.
type Bodies = Vec<(u64, Vec<u8>)>;

/// The sample titles' bodies as one machine serves them from `data`, then
/// four storage nodes of one disk each and a manager over them started
/// with `manager_args`.
fn cluster_of_processes(
    data: &Path,
    manager_args: &[&str],
) -> (Bodies, Vec<StorageNode>, RondoServe) {
    let mut plain = Serve::on(env!("CARGO_BIN_EXE_rondo"), data)
        .timeout(Duration::from_secs(30))
        .start();
    let reference = bodies(&plain.url);
    assert!(reference.len() >= 3, "the sample titles");
    assert!(plain.terminate().success());
    let nodes: Vec<StorageNode> = (0..4)
        .map(|d| StorageNode::start(env!("CARGO_BIN_EXE_rondo"), data, &[d]))
        .collect();
    let mut manager = Serve::on(env!("CARGO_BIN_EXE_rondo"), data)
        .timeout(Duration::from_secs(30))
        .args(manager_args);
    for node in &nodes {
        manager = manager.args(["--storage-node", &node.address]);
    }
    (reference, nodes, manager.start())
}

/// The directory's status once disk `disk` is failed, or at `deadline`.
fn status_once_failed(data: &Path, disk: usize, deadline: Instant) -> Value {
    let mut disks = status(data);
    while disks["disks"][disk]["state"] != "failed" && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        disks = status(data);
    }
    disks
}

/// `rondo load` against `url` at 3 streams a second for `duration_s`, its
/// JSON report on stdout.
fn load(url: &str, duration_s: &str, seed: &str) -> std::process::Child {
    rondo()
        .args([
            "load",
            "--url",
            url,
            "--rate",
            "3",
            "--duration",
            duration_s,
        ])
        .args(["--seed", seed, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn a_cluster_of_processes_serves_and_absorbs_a_killed_storage_node() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let (reference, mut nodes, manager) = cluster_of_processes(&data, &[]);
    let disks = status(&data);
    for d in 0..4 {
        let node = disks["disks"][d]["node"].as_str().unwrap_or_default();
        assert!(node.contains(&nodes[d].address), "{disks:#}");
        assert_eq!(disks["disks"][d]["state"], "healthy", "{disks:#}");
    }
    assert_eq!(
        bodies(&manager.url),
        reference,
        "the cluster serves the same bytes"
    );

    // A node dies while streams play.
    let load = load(&manager.url, "8", "5");
    std::thread::sleep(Duration::from_secs(4));
    let killed_at = Instant::now();
    nodes[2].kill();
    let disks = status_once_failed(&data, 2, killed_at + Duration::from_secs(5));
    assert_eq!(disks["disks"][2]["state"], "failed", "{disks:#}");
    assert_eq!(disks["disks"][1]["state"], "healthy", "{disks:#}");
    let report: Value = json(&load.wait_with_output().unwrap());
    assert!(
        report["streams_started"].as_u64().unwrap() >= 3,
        "{report:#}"
    );
    // Only a stream whose read was in flight on the node when it died may
    // get that round late (read again from the other replica in a later
    // round: docs/cluster.md); no reserved read misses, nothing breaks.
    let metrics: Value = reqwest::blocking::get(format!("{}/api/metrics", manager.url))
        .unwrap()
        .json()
        .unwrap();
    let in_flight = metrics["read_errors"].as_u64().expect("read_errors");
    assert!(
        report["stalled_streams"].as_u64().expect("stalled_streams") <= in_flight,
        "{report:#} {metrics:#}"
    );
    assert_eq!(report["streams_broken"], 0, "{report:#}");
    assert_eq!(report["deadline_misses"], 0, "{report:#}");
    assert_eq!(
        bodies(&manager.url),
        reference,
        "served from the other replicas, the same bytes"
    );
}

/// A storage node that goes silent (SIGSTOP: its connections open, nothing
/// answered) under `--backup-window-rounds 2 --loss-notice-rounds 2`: its
/// disk is taken for lost once a batch is open half a round into the round
/// after its own (`StorageNodes::with_loss_notice_rounds`), within the
/// guarantee's L − 1 = 1 round, and its reads go to the survivors'
/// backlogs: no stream stalls, nothing is missed, every title still plays
/// byte for byte.
#[test]
fn a_silent_storage_node_is_noticed_in_time_and_costs_no_stream() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let (reference, nodes, manager) = cluster_of_processes(
        &data,
        &["--backup-window-rounds", "2", "--loss-notice-rounds", "2"],
    );
    let load = load(&manager.url, "10", "7");
    std::thread::sleep(Duration::from_secs(5));
    let frozen_at = Instant::now();
    nodes[2].freeze();
    let disks = status_once_failed(&data, 2, frozen_at + Duration::from_secs(10));
    let noticed = frozen_at.elapsed();
    eprintln!("disk 2's silent node noticed {noticed:?} after it froze");
    assert_eq!(disks["disks"][2]["state"], "failed", "{disks:#}");
    // Within its round and half the next (1 s rounds), plus the polls.
    assert!(noticed < Duration::from_millis(2500), "{noticed:?}");
    let report: Value = json(&load.wait_with_output().unwrap());
    let metrics: Value = reqwest::blocking::get(format!("{}/api/metrics", manager.url))
        .unwrap()
        .json()
        .unwrap();
    eprintln!(
        "load: {} started, {} stalled, {} broken, {} deadline misses; manager: {} recovery misses, {} backlog recoveries",
        report["streams_started"],
        report["stalled_streams"],
        report["streams_broken"],
        report["deadline_misses"],
        metrics["recovery_misses"],
        metrics["window_recoveries"]
    );
    assert!(
        report["streams_started"].as_u64().unwrap() >= 3,
        "{report:#}"
    );
    assert!(
        metrics["window_recoveries"].as_u64().unwrap() > 0,
        "{metrics:#}"
    );
    assert_eq!(metrics["recovery_misses"], 0, "{metrics:#}");
    assert_eq!(metrics["stream_round_misses"], 0, "{metrics:#}");
    assert_eq!(report["stalled_streams"], 0, "{report:#}");
    assert_eq!(report["streams_broken"], 0, "{report:#}");
    assert_eq!(report["deadline_misses"], 0, "{report:#}");
    assert_eq!(
        bodies(&manager.url),
        reference,
        "served from the other replicas, the same bytes"
    );
}

/// `rondo serve --scheme none` makes a directory without failure
/// tolerance (for the cluster's scaling measurement, docs/cluster.md); the
/// directory keeps it, a contradicting flag is refused by name, and a scheme
/// the server does not serve is refused before anything is made.
#[test]
fn serve_makes_a_directory_with_the_scheme_asked_for() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut server = Serve::on(env!("CARGO_BIN_EXE_rondo"), &data)
        .args(["--scheme", "none", "--no-samples"])
        .start();
    assert!(
        server
            .printed
            .iter()
            .any(|l| l.contains("failure tolerance: none reservation")),
        "{:?}",
        server.printed
    );
    assert!(server.terminate().success());
    let contradicted = rondo()
        .args([
            "serve",
            "--scheme",
            "minimum",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(&data)
        .output()
        .unwrap();
    assert!(!contradicted.status.success());
    let said = String::from_utf8_lossy(&contradicted.stderr);
    assert!(said.contains("scheme"), "{said}");
    let other = tmp.path().join("other");
    let refused = rondo()
        .args(["serve", "--scheme", "mirroring", "--data-dir"])
        .arg(&other)
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("`minimum` or `none`"), "{said}");
    assert!(!other.exists(), "nothing made");
}
