//! Interface nodes (issue 14, seed 001's I nodes): clients reach the
//! cluster through `rondo node interface`, apart from the object manager,
//! so that the manager's loss does not reach them.
//!
//! etcd, two storage nodes (two disks each, in two disk groups), an elected
//! manager, its standby and an interface node, as processes on this
//! machine. `rondo load` plays streams through the interface node while
//! the elected manager is killed (SIGKILL): the standby is elected, the
//! interface node asks it for the rest of every broken stream with a Range
//! request, and its buffer carries the clients across the takeover: no
//! client stalls, no stream breaks, and the bodies are byte for byte.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rondo_cluster::etcd::LocalEtcd;
use rondo_testkit::process::{InterfaceNode, Serve, StorageNode, success_json as json};
use serde_json::Value;

const RONDO: &str = env!("CARGO_BIN_EXE_rondo");

fn get_json(url: &str) -> Value {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
        .get(url)
        .send()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .json()
        .unwrap()
}

/// A port free now (a manager registers its address before it listens).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn manager(data: &Path, etcd: &str, id: &str, log: &Path) -> Serve {
    Serve::new(RONDO)
        .arg("--data-dir")
        .arg(data)
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--etcd", etcd, "--cluster", "iface", "--manager-id", id])
        .stderr_to(log.to_path_buf())
        .timeout(Duration::from_secs(120))
}

#[test]
fn clients_of_an_interface_node_play_on_across_the_managers_takeover() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut plain = Serve::on(RONDO, &data)
        .args(["--disks", "4", "--disk-groups", "2"])
        .timeout(Duration::from_secs(60))
        .start();
    assert!(plain.terminate().success());

    let etcd = LocalEtcd::start(&tmp.path().join("etcd"), "127.0.0.1").expect("etcd starts");
    let etcd_url = etcd.client_url().to_string();
    let node_args = ["--etcd", &etcd_url, "--cluster", "iface"];
    let spawn_storage = |disks: &[u32], id: &str| {
        let mut command = Command::new(RONDO);
        command.args(["node", "storage"]);
        let mut extra = vec!["--listen", "127.0.0.1:0", "--node-id", id];
        extra.extend(node_args);
        StorageNode::spawn(command, &data, disks, &extra)
    };
    let _s0 = spawn_storage(&[0, 1], "s0");
    let _s1 = spawn_storage(&[2, 3], "s1");
    let a_log = tmp.path().join("manager-a.log");
    let b_log = tmp.path().join("manager-b.log");
    let mut a = manager(&data, &etcd_url, "a", &a_log).start();
    let standby = {
        let serve = manager(&data, &etcd_url, "b", &b_log);
        std::thread::spawn(move || serve.start())
    };
    let mut extra = vec!["--node-id", "i0", "--buffer-s", "6"];
    extra.extend(node_args);
    let interface = InterfaceNode::start(RONDO, &extra);

    // Through the interface node, the manager's API and player page, with
    // URLs that point at the interface node.
    let titles = get_json(&format!("{}/api/titles", interface.url));
    let first_url = titles[0]["stream_url"].as_str().unwrap_or_default();
    assert!(
        first_url.starts_with(&interface.url),
        "stream URLs name the interface node: {titles:#}"
    );
    // The manager's view of etcd, polled every second, lists the node.
    let interfaces_seen = || {
        let cluster = get_json(&format!("{}/api/cluster", interface.url));
        let interfaces: Vec<String> = cluster["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .filter(|n| n["role"] == "interface")
            .map(|n| n["address"].as_str().unwrap().to_string())
            .collect();
        (interfaces, cluster)
    };
    let asked_at = Instant::now();
    let (mut interfaces, mut cluster) = interfaces_seen();
    while interfaces.is_empty() && asked_at.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(200));
        (interfaces, cluster) = interfaces_seen();
    }
    assert_eq!(
        interfaces,
        std::slice::from_ref(&interface.url),
        "{cluster:#}"
    );

    // Streams through the interface node; the manager killed under them.
    let load = Command::new(RONDO)
        .args([
            "load",
            "--url",
            &interface.url,
            "--rate",
            "2",
            "--duration",
            "12",
        ])
        .args(["--seed", "11", "--verify", "4", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(8));
    let reading = get_json(&format!("{}/api/interface", interface.url))["upstreams_reading"]
        .as_u64()
        .unwrap();
    assert!(
        reading >= 3,
        "streams reading from the manager when it dies: {reading}"
    );
    let killed_at = Instant::now();
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let b = standby.join().expect("the standby starts");
    eprintln!(
        "manager A killed with {reading} streams reading from it; B serves {:.1} s later",
        killed_at.elapsed().as_secs_f64()
    );
    let report: Value = json(&load.wait_with_output().unwrap());
    let stats = get_json(&format!("{}/api/interface", interface.url));
    eprintln!(
        "interface node: {stats}\nload: {} started, {} stalled, {} broken, {} rejected, verify {}",
        report["streams_started"],
        report["stalled_streams"],
        report["streams_broken"],
        report["streams_rejected"],
        report["verify"]
    );
    let lost = stats["upstreams_lost"].as_u64().unwrap();
    assert!(
        lost >= reading,
        "every stream reading from it lost its manager: {stats:#}"
    );
    assert_eq!(stats["streams_resumed"], lost, "{stats:#}");
    assert_eq!(stats["streams_abandoned"], 0, "{stats:#}");
    assert_eq!(stats["late_rounds"], 0, "{stats:#}");
    assert!(
        report["streams_started"].as_u64().unwrap() >= 15,
        "{report:#}"
    );
    assert_eq!(report["stalled_streams"], 0, "{report:#}");
    assert_eq!(report["streams_broken"], 0, "{report:#}");
    assert_eq!(report["streams_errors"], 0, "{report:#}");
    assert_eq!(report["verify"]["mismatches"], 0, "{report:#}");
    assert_eq!(report["verify"]["streams_checked"], 4, "{report:#}");
    // The interface node follows the new leader.
    assert_eq!(stats["manager"], b.url, "{stats:#}");
}
