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

/// A storage node for each list of disks of the directory at `data`.
fn start_nodes(data: &Path, nodes: &[Vec<u32>]) -> Vec<RunningNode> {
    nodes
        .iter()
        .map(|disks| {
            let service = StorageNodeService::open(&StorageNodeConfig {
                data_dir: data.to_path_buf(),
                disks: disks.iter().map(|&d| DiskIndex(d)).collect(),
                node_id: format!("storage-{}", disks[0]),
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
    /// Clients that stalled at least once.
    stalled_clients: usize,
    broken: usize,
    misses: u64,
    /// Re-reads of a failed read not complete by their round's end.
    recovery_misses: u64,
    read_errors: u64,
    /// Backup reads served from the survivors' backlogs (a backup window).
    window_recoveries: u64,
}

/// How the run's array is spread over nodes.
struct Layout {
    /// G disk groups (a backup in its primary's group, d mod G).
    disk_groups: u32,
    /// Each node's disks.
    nodes: Vec<Vec<u32>>,
    /// The node killed six seconds in, if any.
    kill: Option<usize>,
    /// The backup window k and how late a loss may be noticed, L
    /// (`rondo serve --backup-window-rounds K --loss-notice-rounds L`).
    window: (u32, u32),
}

/// One node per disk, one group.
fn node_per_disk(kill: Option<usize>) -> Layout {
    Layout {
        disk_groups: 1,
        nodes: (0..4).map(|d| vec![d]).collect(),
        kill,
        window: (1, 0),
    }
}

/// Offers `clients` streams at once, kills a node six seconds in (or not),
/// and waits for every stream to end.
async fn cluster_run(clients: usize, layout: Layout) -> Run {
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
    let store = rondo_store::Store::create(
        &data,
        rondo_store::StoreConfig {
            round_duration_ns: TEST_ROUND_DURATION_NS,
            scheme: Scheme::Minimum,
            disk_groups: layout.disk_groups,
            ..rondo_server::titles::default_store_config()
        },
    )
    .expect("create the data directory");
    for i in 0..4 {
        ingest(&store, &media, &format!("long-{i}"));
    }
    let titles = store.titles().unwrap();
    let array_id = store.config().array_id.to_string();
    let disk_count = store.config().disk_count;
    let mut nodes = start_nodes(&data, &layout.nodes);
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
            backup_window_rounds: layout.window.0,
            loss_notice_rounds: layout.window.1,
            ..test_config()
        },
    )
    .await;
    let url = server.url();
    let http = reqwest::Client::new();
    let disks = get_json(&http, &format!("{url}/api/disks")).await;
    for (n, node_disks) in layout.nodes.iter().enumerate() {
        for &d in node_disks {
            let node = disks["disks"][d as usize]["node"]
                .as_str()
                .unwrap_or_default();
            assert!(node.contains(&nodes[n].address().to_string()), "{disks}");
        }
    }
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
    if let Some(killed) = layout.kill {
        // Killed early in a round, while its disks read the round's batch:
        // a third into the shorter of their last rounds' measured busy
        // times, so that reads are in flight however fast the host runs
        // them (a fixed 150 ms once found both disks done on a loaded host).
        let lost_disks = layout.nodes[killed].clone();
        let mut kill_after = Duration::from_millis(20);
        for _ in 0..8 {
            let round = server.metrics().rounds;
            while server.metrics().rounds == round {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let snapshot = server.metrics();
            let busy_ns_min = lost_disks
                .iter()
                .map(|&d| snapshot.disks[d as usize].last_measured_busy_ns)
                .min()
                .unwrap_or(0);
            kill_after = Duration::from_nanos(busy_ns_min / 3).max(Duration::from_millis(5));
            if busy_ns_min >= 30_000_000 {
                break;
            }
        }
        tokio::time::sleep(kill_after).await;
        eprintln!("node {killed} killed {kill_after:?} into a round");
        nodes.remove(killed).kill();
        // Found by the node's stream ending, within a round or two.
        let killed_at = std::time::Instant::now();
        let mut disks = get_json(&http, &format!("{url}/api/disks")).await;
        let lost = &layout.nodes[killed];
        let all_failed = |disks: &serde_json::Value| {
            lost.iter()
                .all(|&d| disks["disks"][d as usize]["state"] == "failed")
        };
        while !all_failed(&disks) && killed_at.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(50)).await;
            disks = get_json(&http, &format!("{url}/api/disks")).await;
        }
        eprintln!(
            "disks {lost:?} failed {:?} after their node was killed",
            killed_at.elapsed()
        );
        assert!(all_failed(&disks), "{disks}");
        for d in 0..disk_count {
            if !lost.contains(&d) {
                assert_eq!(disks["disks"][d as usize]["state"], "healthy", "{disks}");
            }
        }
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
        stalled_clients: admitted.iter().filter(|r| r.stalls > 0).count(),
        broken: admitted
            .iter()
            .filter(|r| r.broken || r.received_bytes != r.expected_bytes || r.body_crc != media_crc)
            .count(),
        misses: after.stream_round_misses,
        recovery_misses: after.recovery_misses,
        read_errors: after.read_errors,
        window_recoveries: after.window_recoveries,
    };
    eprintln!(
        "cluster run (G = {}, nodes {:?}, kill {:?}): {run:?}",
        layout.disk_groups, layout.nodes, layout.kill
    );
    run
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_nodes_serve_every_stream_whole_and_on_time() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let run = cluster_run(48, node_per_disk(None)).await;
    assert!(run.admitted >= 20, "{run:?}");
    assert!(run.admitted < 48, "admission must refuse some: {run:?}");
    assert_eq!(run.stalls, 0, "{run:?}");
    assert_eq!(run.broken, 0, "{run:?}");
    assert_eq!(run.misses, 0, "{run:?}");
    assert_eq!(run.read_errors, 0, "{run:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_storage_node_is_absorbed_like_a_failed_disk() {
    // Seed 000's guarantee is for a failure at a round boundary; a node
    // killed mid-round also takes the reads it had in flight, which are
    // read at once from the other replicas, in what the round has left.
    let _serial = SERIAL.lock().await;
    init_logs();
    let run = cluster_run(48, node_per_disk(Some(1))).await;
    assert_absorbed(&run);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_lost_mid_round_keeps_every_deadline_with_a_loss_noticed_late() {
    // With a backup window of 2 rounds and a loss noticed up to 2 rounds
    // late (docs/cluster.md, "A node dying mid-round"), the reads the node
    // took with it go to the survivors' backlogs, which the reservation
    // covers, and every client is 3 rounds ahead: nothing is re-read in
    // unreserved time and no stream may stall, wherever in the round the
    // node dies and whenever within the next round its loss is seen.
    let _serial = SERIAL.lock().await;
    init_logs();
    let run = cluster_run(
        48,
        Layout {
            window: (2, 2),
            ..node_per_disk(Some(1))
        },
    )
    .await;
    assert_absorbed(&run);
    // The lost reads went through the backlogs (not re-read at once).
    assert!(run.window_recoveries >= run.read_errors, "{run:?}");
    assert_eq!(run.recovery_misses, 0, "{run:?}");
    assert_eq!(run.stalls, 0, "{run:?}");
}

/// A node's death cost no stream anything: its reads in flight were read
/// again at once. A re-read that did not fit in what was left of the round
/// waits for unreserved time (a recovery miss), and only its stream may
/// stall; every admitted stream still plays whole and byte for byte.
fn assert_absorbed(run: &Run) {
    assert!(run.admitted >= 10, "{run:?}");
    assert!(
        run.read_errors > 0,
        "the kill must catch reads in flight: {run:?}"
    );
    assert!(run.recovery_misses <= run.read_errors, "{run:?}");
    assert!(
        run.stalled_clients as u64 <= run.recovery_misses,
        "only a stream whose re-read missed its round may stall: {run:?}"
    );
    assert_eq!(run.broken, 0, "{run:?}");
    assert_eq!(run.misses, 0, "{run:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_of_two_disks_is_absorbed_with_disk_groups() {
    // Two nodes of two disks each, G = 2 groups ({0, 2} and {1, 3}): the
    // node holding disks 0 and 1 dies, one failure in each group, and every
    // round keeps a replica.
    let _serial = SERIAL.lock().await;
    init_logs();
    let run = cluster_run(
        48,
        Layout {
            disk_groups: 2,
            nodes: vec![vec![0, 1], vec![2, 3]],
            kill: Some(0),
            window: (1, 0),
        },
    )
    .await;
    assert_absorbed(&run);
}

/// A storage node fences managers by epoch (their etcd leadership's
/// revision): once a manager of epoch 9 opened a disk, a deposed one of
/// epoch 3 is refused, by name, while a later one of epoch 12 takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storage_node_refuses_a_deposed_manager() {
    use rondo_cluster::wire::pb;
    use rondo_cluster::wire::pb::storage_node_client::StorageNodeClient;
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let store = create_store(&data);
    let array_id = store.config().array_id.to_string();
    drop(store);
    let nodes = tokio::task::spawn_blocking(move || start_nodes(&data, &[vec![0]]))
        .await
        .unwrap();
    let uri = rondo_cluster::remote::endpoint_uri(&nodes[0].address().to_string());
    let open = |epoch: u64| {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tx.try_send(pb::ToDisk {
            kind: Some(pb::to_disk::Kind::Open(pb::Open {
                disk: 0,
                array_id: array_id.clone(),
                round_zero_unix_ns: 1,
                round_duration_ns: 1_000_000_000,
                emulated: true,
                buffer_bytes: 1 << 20,
                manager_epoch: epoch,
            })),
        })
        .unwrap();
        (tx, tokio_stream::wrappers::ReceiverStream::new(rx))
    };
    let mut client = StorageNodeClient::connect(uri).await.unwrap();
    let (_held, stream) = open(9);
    client.rounds(stream).await.expect("epoch 9 opens disk 0");
    let (_deposed, stream) = open(3);
    let refused = client.rounds(stream).await.expect_err("epoch 3 is below 9");
    assert_eq!(format!("{:?}", refused.code()), "FailedPrecondition");
    assert!(refused.message().contains("deposed"), "{refused:?}");
    let (_later, stream) = open(12);
    client.rounds(stream).await.expect("epoch 12 takes over");
}
