//! The server as a cluster's manager (issue 14, seed 001's storage nodes):
//! its four disks read by four storage nodes over gRPC
//! (`rondo_cluster::StorageNodeService`, each on a runtime and sockets of
//! its own), many concurrent high-bitrate streams, and one node killed
//! mid-run. Under `minimum` the node's disk fails as a disk would (found
//! by its stream's end, not by an operator), no client stalls, no
//! stream-round misses, and every admitted stream plays whole and byte for
//! byte.

mod e2e_support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use e2e_support::*;
use rondo_cluster::storage_node::RunningNode;
use rondo_cluster::{StorageNodeConfig, StorageNodeService, StorageNodes};
use rondo_model::reservation::Scheme;
use rondo_model::units::DiskIndex;
use rondo_server::ServerConfig;
use rondo_server::executor::RemoteDisks;

/// The tests share two cores and measure deadlines: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// As in e2e_failure: 16 s titles at 8 Mbit/s (1 MB per round), so a disk
/// carries about ten streams and transfer dominates.
const TITLE_SECONDS: u32 = 16;
const TITLE_KBPS: u32 = 8000;

/// One storage node per disk of the directory at `data`.
fn start_nodes(data: &Path, disk_count: u32) -> Vec<RunningNode> {
    (0..disk_count)
        .map(|d| {
            let service = StorageNodeService::open(&StorageNodeConfig {
                data_dir: data.to_path_buf(),
                disks: vec![DiskIndex(d)],
                node_id: format!("storage-{d}"),
                buffered: false,
            })
            .expect("the node opens its disk");
            RunningNode::start(service, "127.0.0.1:0".parse().unwrap()).expect("the node starts")
        })
        .collect()
}

/// What a cluster run measured.
#[derive(Debug)]
struct Run {
    admitted: usize,
    stalls: u32,
    broken: usize,
    misses: u64,
    read_errors: u64,
}

/// Offers `clients` streams at once; `kill` the node of disk 1 six seconds
/// in (or not), and waits for every stream to end.
async fn cluster_run(clients: usize, kill: bool) -> Run {
    let tmp = tempfile::tempdir().unwrap();
    let media = make_media_padded(
        tmp.path(),
        "long",
        MediaKind::Ts,
        TITLE_SECONDS,
        Some(TITLE_KBPS),
    );
    let media_crc = rondo_store::checksum(&std::fs::read(&media).unwrap());
    let data = tmp.path().join("data");
    let store = create_store_with_scheme(&data, Scheme::Minimum);
    for i in 0..4 {
        ingest(&store, &media, &format!("long-{i}"));
    }
    let titles = store.titles().unwrap();
    let array_id = store.config().array_id.to_string();
    let disk_count = store.config().disk_count;
    let mut nodes = start_nodes(&data, disk_count);
    let addresses: Vec<String> = nodes.iter().map(|n| n.address().to_string()).collect();
    let remote = tokio::task::spawn_blocking(move || {
        StorageNodes::connect(&addresses, &array_id, disk_count)
    })
    .await
    .unwrap()
    .expect("the manager reaches its nodes");
    let server = start(
        store,
        ServerConfig {
            remote_disks: Some(RemoteDisks(Arc::new(remote))),
            ..test_config()
        },
    )
    .await;
    let url = server.url();
    let http = reqwest::Client::new();
    let disks = get_json(&http, &format!("{url}/api/disks")).await;
    assert!(
        disks["disks"][1]["node"]
            .as_str()
            .is_some_and(|n| n.starts_with("storage-1")),
        "{disks}"
    );
    let mut tasks = Vec::new();
    for i in 0..clients {
        let title = &titles[i % titles.len()];
        tasks.push(tokio::spawn(play(
            http.clone(),
            format!("{url}/stream/{}.ts", title.id.0),
            title.client_bytes.clone(),
        )));
    }
    tokio::time::sleep(Duration::from_secs(6)).await;
    if kill {
        // Killed 150 ms into a round, while disk 1 reads the round's batch.
        let round = server.metrics().rounds;
        while server.metrics().rounds == round {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        nodes.remove(1).kill();
        // Found by the node's stream ending, within a round or two.
        let killed_at = std::time::Instant::now();
        let mut disks = get_json(&http, &format!("{url}/api/disks")).await;
        while disks["disks"][1]["state"] != "failed" && killed_at.elapsed() < Duration::from_secs(5)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
            disks = get_json(&http, &format!("{url}/api/disks")).await;
        }
        eprintln!(
            "disk 1 failed {:?} after its node was killed",
            killed_at.elapsed()
        );
        assert_eq!(disks["disks"][1]["state"], "failed", "{disks}");
        assert_eq!(disks["disks"][0]["state"], "healthy", "{disks}");
    }
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    let after = server.metrics();
    server.shutdown().await;
    drop(nodes);
    for r in &results {
        assert!(r.status == 200 || r.status == 503, "{r:?}");
    }
    let admitted: Vec<&ClientResult> = results.iter().filter(|r| r.status == 200).collect();
    let run = Run {
        admitted: admitted.len(),
        stalls: admitted.iter().map(|r| r.stalls).sum(),
        broken: admitted
            .iter()
            .filter(|r| r.broken || r.received_bytes != r.expected_bytes || r.body_crc != media_crc)
            .count(),
        misses: after.stream_round_misses,
        read_errors: after.read_errors,
    };
    eprintln!("cluster run (kill: {kill}): {run:?}");
    run
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_nodes_serve_every_stream_whole_and_on_time() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let run = cluster_run(48, false).await;
    assert!(run.admitted >= 20, "{run:?}");
    assert!(run.admitted < 48, "admission must refuse some: {run:?}");
    assert_eq!(run.stalls, 0, "{run:?}");
    assert_eq!(run.broken, 0, "{run:?}");
    assert_eq!(run.misses, 0, "{run:?}");
    assert_eq!(run.read_errors, 0, "{run:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_storage_node_is_absorbed_like_a_failed_disk() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let run = cluster_run(48, true).await;
    assert!(run.admitted >= 20, "{run:?}");
    // Reads were out on the node when it died: they failed and were read
    // again from the other replicas, in time.
    assert!(
        run.read_errors > 0,
        "the kill must catch reads in flight: {run:?}"
    );
    assert_eq!(run.stalls, 0, "{run:?}");
    assert_eq!(run.broken, 0, "{run:?}");
    assert_eq!(run.misses, 0, "{run:?}");
}
