//! A cluster on separate hosts (issue 14): etcd, two storage nodes and two
//! managers, each in a network namespace of its own on one bridge, the test
//! process a client on the same LAN. The nodes find each other through
//! etcd alone: the storage nodes register their disks, the first manager is
//! elected and finds them there, the second waits as the standby. Each
//! storage node holds its own devices in a directory of its own; the
//! managers' directory holds only rondo.toml and the catalog.
//!
//! - A storage node cut off the network (its link down, so its peers see
//!   silence rather than a closed connection) while `rondo load` plays:
//!   its disks fail by themselves within seconds, with disk groups no
//!   stream breaks and no reserved read misses its deadline, and every
//!   title plays byte for byte from the other replicas.
//! - The elected manager cut off from etcd: its lease ends, it stops by
//!   itself (it may already have a successor), the standby is elected,
//!   finds the storage nodes (the cut one registered again once healed)
//!   and serves every title byte for byte; a client that was reading from
//!   the old manager resumes at the new one with a Range request.
//!
//! Needs root and iproute2 (as CI has); `RONDO_SKIP_NETNS_TESTS=1` skips it.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rondo_cluster::etcd::LocalEtcd;
use rondo_testkit::http::get_json_blocking as get_json;
use rondo_testkit::netns::{Host, Lan, skip_reason};
use rondo_testkit::process::{RondoServe, Serve, StorageNode, success_json as json};
use serde_json::Value;

const RONDO: &str = env!("CARGO_BIN_EXE_rondo");

/// Every title's whole body, by id (fetched at once: each is paced).
fn bodies(url: &str) -> Vec<(u64, Vec<u8>)> {
    let titles = get_json(&format!("{url}/api/titles"));
    let fetches: Vec<_> = titles
        .as_array()
        .expect("a list of titles")
        .iter()
        .map(|t| {
            let id = t["id"].as_u64().unwrap();
            let url = format!("{url}/stream/{id}");
            std::thread::spawn(move || {
                // A manager that has just taken over refuses new streams for
                // its grace (503, reason takeover): asked again after it.
                let asked_at = Instant::now();
                let mut response = reqwest::blocking::get(&url).unwrap();
                while response.status() == 503 && asked_at.elapsed() < Duration::from_secs(15) {
                    std::thread::sleep(Duration::from_millis(500));
                    response = reqwest::blocking::get(&url).unwrap();
                }
                assert_eq!(response.status(), 200, "{url}");
                (id, response.bytes().unwrap().to_vec())
            })
        })
        .collect();
    fetches.into_iter().map(|f| f.join().unwrap()).collect()
}

fn disk_states(url: &str) -> Vec<String> {
    get_json(&format!("{url}/api/disks"))["disks"]
        .as_array()
        .expect("disks")
        .iter()
        .map(|d| d["state"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn storage_node(host: &Host, data: &Path, disks: &[u32], etcd: &str) -> StorageNode {
    let mut command = host.command(RONDO);
    command.args(["node", "storage"]);
    let listen = format!("{}:7400", host.address);
    StorageNode::spawn(
        command,
        data,
        disks,
        &[
            "--listen",
            &listen,
            "--etcd",
            etcd,
            "--cluster",
            "netns",
            "--node-id",
            &host.name,
        ],
    )
}

fn manager(host: &Host, data: &Path, etcd: &str, log: &Path) -> Serve {
    Serve::in_netns(&host.netns, RONDO)
        .arg("--data-dir")
        .arg(data)
        .args(["--listen", &format!("{}:8080", host.address)])
        .args([
            "--etcd",
            etcd,
            "--cluster",
            "netns",
            "--manager-id",
            &host.name,
        ])
        .stderr_to(log.to_path_buf())
        .timeout(Duration::from_secs(120))
}

#[test]
fn a_cluster_on_separate_hosts_survives_a_cut_storage_node_and_a_manager_cut_from_etcd() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    // Declared first, so dropped last: every process below is gone before
    // its namespace is.
    let mut lan = Lan::new();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");

    // The reference: the sample titles as one machine serves them, on 4
    // disks in 2 groups, so that a node of two consecutive disks is one
    // failure per group.
    let mut plain = Serve::on(RONDO, &data)
        .args(["--disks", "4", "--disk-groups", "2"])
        .timeout(Duration::from_secs(60))
        .start();
    let reference = bodies(&plain.url);
    assert!(reference.len() >= 3, "the sample titles");
    assert!(plain.terminate().success());

    let etcd_host = lan.host("etcd");
    let s0 = lan.host("s0");
    let s1 = lan.host("s1");
    let ma = lan.host("ma");
    let mb = lan.host("mb");
    let etcd = LocalEtcd::start_in_netns(
        &tmp.path().join("etcd"),
        &etcd_host.netns,
        &etcd_host.address,
    )
    .expect("etcd in its namespace");
    let etcd_url = etcd.client_url().to_string();

    // Each storage node's host holds its own devices (a copy of rondo.toml
    // and its disks' files); the managers' directory holds none.
    let own_devices = |host: &str, disks: [u32; 2]| {
        let dir = tmp.path().join(host);
        std::fs::create_dir(&dir).unwrap();
        std::fs::copy(data.join("rondo.toml"), dir.join("rondo.toml")).unwrap();
        for d in disks {
            let file = format!("disk-{d}.dev");
            std::fs::rename(data.join(&file), dir.join(&file)).unwrap();
        }
        dir
    };
    let _node0 = storage_node(&s0, &own_devices("s0", [0, 1]), &[0, 1], &etcd_url);
    let _node1 = storage_node(&s1, &own_devices("s1", [2, 3]), &[2, 3], &etcd_url);
    let a_log = tmp.path().join("manager-a.log");
    let mut a = manager(&ma, &data, &etcd_url, &a_log).start();
    assert_eq!(a.url, format!("http://{}:8080", ma.address));
    // The standby waits for leadership before it prints its URL.
    let b_log = tmp.path().join("manager-b.log");
    let standby = {
        let serve = manager(&mb, &data, &etcd_url, &b_log);
        std::thread::spawn(move || serve.start())
    };

    let disks = get_json(&format!("{}/api/disks", a.url));
    for (d, host) in [(0, &s0), (1, &s0), (2, &s1), (3, &s1)] {
        let node = disks["disks"][d]["node"].as_str().unwrap_or_default();
        assert!(
            node.contains(&format!("{}:7400", host.address)),
            "disk {d} on {}: {disks:#}",
            host.name
        );
    }
    assert_eq!(
        bodies(&a.url),
        reference,
        "the cluster serves the same bytes"
    );
    let b_waiting = std::fs::read_to_string(&b_log).unwrap_or_default();
    assert!(
        b_waiting.contains("standby"),
        "the second manager waits as the standby: {b_waiting}"
    );
    // The manager shows every node it sees in etcd (the dashboard's table).
    let cluster = get_json(&format!("{}/api/cluster", a.url));
    let nodes: Vec<(String, String, Value)> = cluster["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| {
            (
                n["id"].as_str().unwrap().to_string(),
                n["address"].as_str().unwrap().to_string(),
                n["disks"].clone(),
            )
        })
        .collect();
    assert_eq!(
        nodes,
        vec![
            (
                "s0".into(),
                format!("{}:7400", s0.address),
                serde_json::json!([0, 1])
            ),
            (
                "s1".into(),
                format!("{}:7400", s1.address),
                serde_json::json!([2, 3])
            ),
        ],
        "{cluster:#}"
    );
    assert_eq!(cluster["managers"][0]["address"], a.url, "{cluster:#}");
    assert_eq!(cluster["managers"][0]["role"], "leader", "{cluster:#}");
    assert_eq!(
        cluster["managers"][1]["address"],
        format!("http://{}:8080", mb.address),
        "{cluster:#}"
    );
    assert_eq!(cluster["managers"][1]["role"], "standby", "{cluster:#}");

    // A storage node's host is cut off while streams play.
    let load = Command::new(RONDO)
        .args(["load", "--url", &a.url, "--rate", "3", "--duration", "10"])
        .args(["--seed", "7", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(4));
    let cut_at = Instant::now();
    s1.cut();
    let mut states = disk_states(&a.url);
    while !(states[2] == "failed" && states[3] == "failed")
        && cut_at.elapsed() < Duration::from_secs(8)
    {
        std::thread::sleep(Duration::from_millis(100));
        states = disk_states(&a.url);
    }
    let detected = cut_at.elapsed();
    assert_eq!(
        states,
        ["healthy", "healthy", "failed", "failed"],
        "after the cut"
    );
    eprintln!(
        "the cut node's disks failed {:.1} s after the cut",
        detected.as_secs_f64()
    );
    // The reads the cut node had in flight until it was declared lost are
    // late (silence takes the keep-alive's 1 s + 1 s to tell from a slow
    // node, where a killed node's closed connection is seen at once:
    // docs/cluster.md). From the round after that on, the survivors carry
    // every stream with no miss.
    std::thread::sleep(Duration::from_millis(1500));
    let misses_after_detection = get_json(&format!("{}/api/metrics", a.url))["stream_round_misses"]
        .as_u64()
        .unwrap();
    let report: Value = json(&load.wait_with_output().unwrap());
    assert!(
        report["streams_started"].as_u64().unwrap() >= 3,
        "{report:#}"
    );
    let metrics = get_json(&format!("{}/api/metrics", a.url));
    let misses_at_end = metrics["stream_round_misses"].as_u64().unwrap();
    eprintln!(
        "cut node: {misses_after_detection} stream-rounds late until it was declared lost; \
         {} streams stalled of {} started",
        report["stalled_streams"], report["streams_started"]
    );
    assert_eq!(
        misses_at_end, misses_after_detection,
        "no miss once the node is declared lost: {metrics:#}"
    );
    assert_eq!(report["streams_broken"], 0, "{report:#}");
    assert_eq!(
        bodies(&a.url),
        reference,
        "from the other replicas, the same bytes"
    );
    s1.heal();

    // The elected manager is cut off from etcd (and only from etcd) while
    // a client reads from it.
    let title = &reference[0];
    let mut reading = reqwest::blocking::get(format!("{}/stream/{}", a.url, title.0)).unwrap();
    let mut head = vec![0u8; 64 * 1024];
    reading.read_exact(&mut head).unwrap();
    let blocked_at = Instant::now();
    ma.block(&etcd_host.address);
    let status = a.child.wait().expect("manager A exits");
    let a_stopped = blocked_at.elapsed();
    assert!(!status.success(), "a deposed manager stops with an error");
    let a_said = std::fs::read_to_string(&a_log).unwrap();
    assert!(
        a_said.contains("lost the object manager's leadership"),
        "manager A's log: {a_said}"
    );
    drop(reading);
    let mut b: RondoServe = standby.join().expect("the standby starts");
    let b_serves = blocked_at.elapsed();
    eprintln!(
        "manager A stopped {:.1} s after it lost etcd; B served {:.1} s after",
        a_stopped.as_secs_f64(),
        b_serves.as_secs_f64()
    );
    assert!(b_serves < Duration::from_secs(30), "{b_serves:?}");
    let b_said = std::fs::read_to_string(&b_log).unwrap();
    assert!(b_said.contains("elected object manager"), "{b_said}");
    // The client resumes at the new manager where it stopped, saying so
    // (as an interface node does: a manager that took over admits resumed
    // streams before new ones).
    let rest = reqwest::blocking::Client::new()
        .get(format!("{}/stream/{}", b.url, title.0))
        .header("Range", format!("bytes={}-", head.len()))
        .header("x-rondo-resume", "1")
        .send()
        .unwrap();
    assert_eq!(rest.status(), 206);
    let mut resumed = head.clone();
    resumed.extend_from_slice(&rest.bytes().unwrap());
    assert_eq!(
        resumed, title.1,
        "head from A and rest from B make the title"
    );
    assert_eq!(
        disk_states(&b.url),
        ["healthy", "healthy", "failed", "failed"]
    );
    let cluster = get_json(&format!("{}/api/cluster", b.url));
    assert_eq!(cluster["managers"][0]["address"], b.url, "{cluster:#}");
    assert_eq!(
        cluster["managers"].as_array().map(Vec::len),
        Some(1),
        "{cluster:#}"
    );
    assert_eq!(
        bodies(&b.url),
        reference,
        "the new manager serves the same bytes"
    );
    assert!(b.terminate().success());
    ma.unblock(&etcd_host.address);
}
