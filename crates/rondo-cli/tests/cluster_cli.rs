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

use rondo_testkit::files::flip_byte;
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

/// The sample titles' bodies as a single `rondo serve` makes `data` and
/// serves them (it stops before this returns).
fn sample_bodies(data: &Path) -> Bodies {
    let mut plain = Serve::on(env!("CARGO_BIN_EXE_rondo"), data)
        .timeout(Duration::from_secs(30))
        .start();
    let reference = bodies(&plain.url);
    assert!(reference.len() >= 3, "the sample titles");
    assert!(plain.terminate().success());
    reference
}

/// The sample titles' bodies as one machine serves them from `data`, then
/// four storage nodes of one disk each and a manager over them started
/// with `manager_args`.
fn cluster_of_processes(
    data: &Path,
    manager_args: &[&str],
) -> (Bodies, Vec<StorageNode>, RondoServe) {
    let reference = sample_bodies(data);
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

/// Four storage nodes of one disk each, node d in `parent/node-d` with a
/// copy of `data`'s rondo.toml and its device put there by `place` (from
/// `data`'s path to the node's), and a manager over `data` and them.
fn cluster_in_node_dirs(
    parent: &Path,
    data: &Path,
    place: impl Fn(&Path, &Path) -> std::io::Result<()>,
) -> (Vec<std::path::PathBuf>, Vec<StorageNode>, RondoServe) {
    let node_dirs: Vec<_> = (0..4u32)
        .map(|d| {
            let dir = parent.join(format!("node-{d}"));
            std::fs::create_dir(&dir).unwrap();
            std::fs::copy(data.join("rondo.toml"), dir.join("rondo.toml")).unwrap();
            let device = format!("disk-{d}.dev");
            place(&data.join(&device), &dir.join(&device)).unwrap();
            dir
        })
        .collect();
    let nodes: Vec<StorageNode> = (0..4u32)
        .map(|d| StorageNode::start(env!("CARGO_BIN_EXE_rondo"), &node_dirs[d as usize], &[d]))
        .collect();
    let mut manager = Serve::on(env!("CARGO_BIN_EXE_rondo"), data).timeout(Duration::from_secs(30));
    for node in &nodes {
        manager = manager.args(["--storage-node", &node.address]);
    }
    (node_dirs, nodes, manager.start())
}

/// The directory's status once disk `disk` is failed, or at `deadline`.
fn status_once_failed(data: &Path, disk: usize, deadline: Instant) -> Value {
    status_once(data, disk, "failed", deadline)
}

/// The directory's status once disk `disk` is in `state`, or at `deadline`.
fn status_once(data: &Path, disk: usize, state: &str, deadline: Instant) -> Value {
    let mut disks = status(data);
    while disks["disks"][disk]["state"] != state && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        disks = status(data);
    }
    disks
}

/// `rondo admin restore-disk DISK`, then waits (up to 60 s) until the
/// rebuilt disk serves.
fn restore_until_healthy(data: &Path, disk: usize) {
    admin(data, &["restore-disk", &disk.to_string()]);
    let disks = status_once(
        data,
        disk,
        "healthy",
        Instant::now() + Duration::from_secs(60),
    );
    assert_eq!(disks["disks"][disk]["state"], "healthy", "{disks:#}");
}

/// `rondo admin ARGS --json --data-dir DATA`'s answer.
fn admin(data: &Path, args: &[&str]) -> Value {
    let output = rondo()
        .arg("admin")
        .args(args)
        .args(["--json", "--data-dir"])
        .arg(data)
        .output()
        .unwrap();
    json(&output)
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

/// Storage nodes with devices of their own (issue 14: nodes on hosts that
/// share no filesystem with the manager). Each node's directory holds a
/// copy of rondo.toml and only its disk's device file; the manager's holds
/// no device at all. The manager serves the titles byte for byte, stores an
/// uploaded one (its writes go to the nodes), rebuilds a disk whose stride
/// area was wiped on its node (the rebuild's reads and writes go to the
/// nodes), replaces a disk's device with a new one the node makes on its
/// host and rebuilds it, and the devices, moved back into one directory
/// (with the manager's rondo.toml naming the new device), serve the same
/// bytes from a single machine.
#[test]
fn storage_nodes_with_devices_of_their_own_store_rebuild_and_serve() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let reference = sample_bodies(&data);

    // Each node's own directory: rondo.toml and its device, moved out.
    let device = |dir: &Path, d: u32| dir.join(format!("disk-{d}.dev"));
    let (node_dirs, nodes, mut manager) =
        cluster_in_node_dirs(tmp.path(), &data, |from, to| std::fs::rename(from, to));
    assert_eq!(bodies(&manager.url), reference, "read by the nodes");

    // An upload: the manager's ingest writes every round to the nodes.
    let clip = rondo_testkit::media::Clip::video("testsrc2=size=320x240:rate=30")
        .sine()
        .seconds(4)
        .args(rondo_testkit::media::X264_ULTRAFAST)
        .args(["-g", "30", "-c:a", "aac", "-movflags", "+faststart"])
        .make(tmp.path().join("clip.mp4"));
    let uploaded = rondo()
        .args(["ingest", "--name", "uploaded", "--json", "--data-dir"])
        .arg(&data)
        .arg(&clip)
        .output()
        .unwrap();
    let title = json(&uploaded);
    let with_upload = bodies(&manager.url);
    assert_eq!(with_upload.len(), reference.len() + 1, "{title:#}");
    let id = title[0]["title"]["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("the new title's id: {title:#}"));
    let body = &with_upload.iter().find(|(i, _)| *i == id).unwrap().1;
    assert!(body.len() > 10_000, "the uploaded title plays whole");

    // Disk 1 fails and its node's stride area is wiped (the header kept);
    // a rebuild through the nodes writes it again.
    admin(&data, &["fail-disk", "1"]);
    let allocated = || {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(device(&node_dirs[1], 1))
            .unwrap()
            .blocks()
            * 512
    };
    let held_bytes = allocated();
    wipe_stride_area(&device(&node_dirs[1], 1));
    assert!(allocated() <= 1 << 20, "wiped: {} bytes left", allocated());
    restore_until_healthy(&data, 1);
    // Written again on the node's own device (the rebuild copies each
    // stride the disk holds; the header's megabyte was never wiped).
    assert!(
        allocated() + (1 << 20) >= held_bytes,
        "{} bytes rebuilt of {held_bytes}",
        allocated()
    );
    // Disk 1 serves again; a stride it lacked would fail its checksum, be
    // read from the other replica and count as a read error.
    assert_eq!(bodies(&manager.url), with_upload, "after the rebuild");
    assert_eq!(read_errors(&manager.url), 0, "disk 1 holds its data again");

    // Disk 2's medium is replaced: the node makes the new device on its
    // host, and the rebuild fills it through the node.
    admin(&data, &["fail-disk", "2"]);
    // The old device, still open on the node, is wiped too: a disk thread
    // left reading it after the replacement would find its checksums bad.
    wipe_stride_area(&device(&node_dirs[2], 2));
    let replaced = admin(&data, &["replace-disk", "2", "new-disk-2.dev"]);
    assert_eq!(replaced["path"], "new-disk-2.dev", "{replaced:#}");
    assert!(
        node_dirs[2].join("new-disk-2.dev").exists(),
        "made on the node"
    );
    assert!(!device(&node_dirs[2], 2).exists(), "the old device removed");
    restore_until_healthy(&data, 2);
    assert_eq!(bodies(&manager.url), with_upload, "after the replacement");
    assert_eq!(
        read_errors(&manager.url),
        0,
        "disk 2's new device holds its data"
    );
    assert!(
        std::fs::read_dir(&data).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".dev")),
        "the manager made no device of its own"
    );

    // With the manager stopped, fsck reads the nodes' devices through them.
    assert!(manager.terminate().success());
    let addresses: Vec<&str> = nodes.iter().map(|n| n.address.as_str()).collect();
    let report = fsck(&data, &addresses);
    assert_eq!(report["status"], "passed", "{report:#}");
    assert!(
        report["extents_checked"].as_u64().unwrap() > 0,
        "{report:#}"
    );
    let alone = fsck(&data, &[]);
    assert_eq!(alone["status"], "failed", "no device here: {alone:#}");
    // A flipped byte on a node's device is found there, by its checksum.
    let first_stride = 1 << 20;
    flip_byte(&device(&node_dirs[0], 0), first_stride);
    let report = fsck(&data, &addresses);
    assert_eq!(report["status"], "failed", "{report:#}");
    assert!(
        report["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["kind"] == "checksum" && p["message"].as_str().unwrap().contains("disk 0")),
        "{report:#}"
    );
    flip_byte(&device(&node_dirs[0], 0), first_stride);

    // The devices back in one directory serve the same bytes on one machine.
    drop(nodes);
    for d in [0, 1, 3u32] {
        std::fs::rename(device(&node_dirs[d as usize], d), device(&data, d)).unwrap();
    }
    std::fs::rename(
        node_dirs[2].join("new-disk-2.dev"),
        data.join("new-disk-2.dev"),
    )
    .unwrap();
    let mut plain = Serve::on(env!("CARGO_BIN_EXE_rondo"), &data)
        .timeout(Duration::from_secs(30))
        .start();
    assert_eq!(
        bodies(&plain.url),
        with_upload,
        "written where the catalog says"
    );
    assert_eq!(read_errors(&plain.url), 0, "every copy in its place");
    assert!(plain.terminate().success());
}

/// A disk replaced on a shared filesystem (the nodes read the manager's
/// directory's devices): `replace-disk` makes the new device in the
/// manager's directory and its storage node switches to it
/// (`RemoteDevice::adopt`). The old device, still open on the node after
/// the replacement removes it, is wiped first: a node left reading it
/// would find its checksums bad and count read errors.
#[test]
fn a_disk_replaced_on_a_shared_filesystem_is_read_from_its_new_device() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let (reference, _nodes, manager) = cluster_of_processes(&data, &[]);
    assert_eq!(bodies(&manager.url), reference, "read by the nodes");
    admin(&data, &["fail-disk", "2"]);
    wipe_stride_area(&data.join("disk-2.dev"));
    let replaced = admin(&data, &["replace-disk", "2", "new-disk-2.dev"]);
    assert_eq!(replaced["state"], "failed", "{replaced:#}");
    assert!(data.join("new-disk-2.dev").exists(), "{replaced:#}");
    assert!(!data.join("disk-2.dev").exists(), "the old device removed");
    restore_until_healthy(&data, 2);
    assert_eq!(bodies(&manager.url), reference, "after the replacement");
    assert_eq!(
        read_errors(&manager.url),
        0,
        "disk 2's node reads the new device"
    );
}

/// A node whose directory is a copy of the manager's (its own rondo.toml,
/// the devices held by both) cannot follow a replacement the manager made in its own
/// directory: `replace-disk` is refused with why, naming the node, and
/// the node keeps serving the device it has.
#[test]
fn a_node_with_a_copied_directory_refuses_a_replacement_made_by_the_manager() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let reference = sample_bodies(&data);
    // Held by both directories (a hard link: copying a sparse device file
    // would write its whole size).
    let (_, nodes, manager) =
        cluster_in_node_dirs(tmp.path(), &data, |from, to| std::fs::hard_link(from, to));
    admin(&data, &["fail-disk", "2"]);
    let refused = rondo()
        .args([
            "admin",
            "replace-disk",
            "2",
            "new-disk-2.dev",
            "--json",
            "--data-dir",
        ])
        .arg(&data)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&refused.stdout),
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(!refused.status.success(), "{said}");
    assert!(said.contains("not the manager's"), "{said}");
    assert!(said.contains(&nodes[2].address), "names the node: {said}");
    assert!(said.contains("restart that storage node"), "{said}");
    // The node still reads its own (copied) device: disk 2 restored
    // serves every title with no read error.
    restore_until_healthy(&data, 2);
    assert_eq!(bodies(&manager.url), reference);
}

/// `rondo fsck --json` of `data`, reading the disks it does not hold
/// through `nodes`.
fn fsck(data: &Path, nodes: &[&str]) -> Value {
    let mut command = rondo();
    command.args(["fsck", "--json", "--data-dir"]).arg(data);
    for node in nodes {
        command.args(["--storage-node", node]);
    }
    let output = command.output().unwrap();
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "rondo fsck printed no report ({e}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// Punches out everything after a device's 1 MiB header region (its stride
/// area reads zeros), with util-linux's `fallocate`.
fn wipe_stride_area(device: &Path) {
    let length = std::fs::metadata(device).unwrap().len() - (1 << 20);
    let wiped = std::process::Command::new("fallocate")
        .args([
            "--punch-hole",
            "--keep-size",
            "--offset",
            "1048576",
            "--length",
        ])
        .arg(length.to_string())
        .arg(device)
        .status()
        .unwrap();
    assert!(
        wiped.success(),
        "fallocate --punch-hole {}",
        device.display()
    );
}

fn read_errors(url: &str) -> u64 {
    let metrics: Value = reqwest::blocking::get(format!("{url}/api/metrics"))
        .unwrap()
        .json()
        .unwrap();
    metrics["read_errors"].as_u64().expect("read_errors")
}
