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
use rondo_testkit::http::get_json_blocking as get_json;
use rondo_testkit::process::{InterfaceNode, Serve, StorageNode, success_json as json};
use serde_json::Value;

const RONDO: &str = env!("CARGO_BIN_EXE_rondo");

/// A port free now (a manager registers its address before it listens).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn manager(data: &Path, etcd: &str, cluster: &str, id: &str, log: &Path) -> Serve {
    Serve::new(RONDO)
        .arg("--data-dir")
        .arg(data)
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--etcd", etcd, "--cluster", cluster, "--manager-id", id])
        .stderr_to(log.to_path_buf())
        .timeout(Duration::from_secs(120))
}

/// etcd and two storage nodes (disks 0–1 and 2–3, two disk groups) over a
/// new data directory holding the sample titles.
struct Cluster {
    /// Its name in etcd (each test its own, though each has its own etcd).
    name: &'static str,
    _storage: [StorageNode; 2],
    etcd: LocalEtcd,
    data: std::path::PathBuf,
    tmp: tempfile::TempDir,
}

impl Cluster {
    fn start(name: &'static str) -> Cluster {
        Cluster::start_with(name, &[], |_| {})
    }

    /// A cluster over a new data directory made with `create_args` and
    /// then given its titles by `store` (before any node starts).
    fn start_with(name: &'static str, create_args: &[&str], store: impl FnOnce(&Path)) -> Cluster {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let mut plain = Serve::on(RONDO, &data)
            .args(["--disks", "4", "--disk-groups", "2"])
            .args(create_args)
            .timeout(Duration::from_secs(60))
            .start();
        assert!(plain.terminate().success());
        store(&data);
        let etcd = LocalEtcd::start(&tmp.path().join("etcd"), "127.0.0.1").expect("etcd starts");
        let spawn_storage = |disks: &[u32], id: &str| {
            let mut command = Command::new(RONDO);
            command.args(["node", "storage"]);
            let extra = [
                "--listen",
                "127.0.0.1:0",
                "--node-id",
                id,
                "--etcd",
                etcd.client_url(),
                "--cluster",
                name,
            ];
            StorageNode::spawn(command, &data, disks, &extra)
        };
        let storage = [spawn_storage(&[0, 1], "s0"), spawn_storage(&[2, 3], "s1")];
        Cluster {
            name,
            _storage: storage,
            etcd,
            data,
            tmp,
        }
    }

    fn manager(&self, id: &str) -> Serve {
        manager(
            &self.data,
            self.etcd.client_url(),
            self.name,
            id,
            &self.tmp.path().join(format!("manager-{id}.log")),
        )
    }

    fn interface(&self, id: &str, buffer_s: &str) -> InterfaceNode {
        self.interface_with(id, buffer_s, &[])
    }

    /// An interface node with these flags besides its name, buffer and etcd.
    fn interface_with(&self, id: &str, buffer_s: &str, extra: &[&str]) -> InterfaceNode {
        let mut args = vec![
            "--node-id",
            id,
            "--buffer-s",
            buffer_s,
            "--etcd",
            self.etcd.client_url(),
            "--cluster",
            self.name,
        ];
        args.extend_from_slice(extra);
        InterfaceNode::start(RONDO, &args)
    }
}

/// The interface nodes the manager sees in etcd, through `url` (polled
/// every second there): waits up to 5 s for `count` of them.
fn interfaces_seen(url: &str, count: usize) -> (Vec<String>, Value) {
    let asked_at = Instant::now();
    loop {
        let cluster = get_json(&format!("{url}/api/cluster"));
        let interfaces: Vec<String> = cluster["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .filter(|n| n["role"] == "interface")
            .map(|n| n["address"].as_str().unwrap().to_string())
            .collect();
        if interfaces.len() >= count || asked_at.elapsed() > Duration::from_secs(5) {
            return (interfaces, cluster);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn clients_of_an_interface_node_play_on_across_the_managers_takeover() {
    let cluster = Cluster::start("takeover");
    let mut a = cluster.manager("a").start();
    let standby = {
        let serve = cluster.manager("b");
        std::thread::spawn(move || serve.start())
    };
    let interface = cluster.interface("i0", "8");

    // Through the interface node, the manager's API and player page, with
    // URLs that point at the interface node.
    let titles = get_json(&format!("{}/api/titles", interface.url));
    let first_url = titles[0]["stream_url"].as_str().unwrap_or_default();
    assert!(
        first_url.starts_with(&interface.url),
        "stream URLs name the interface node: {titles:#}"
    );
    // The manager's view of etcd lists the node.
    let (interfaces, cluster_seen) = interfaces_seen(&interface.url, 1);
    assert_eq!(
        interfaces,
        std::slice::from_ref(&interface.url),
        "{cluster_seen:#}"
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
    // For its first seconds the new manager admits only streams asked for
    // again (the interface node's resumes), not new ones.
    let fresh = reqwest::blocking::get(format!("{}/stream/0", b.url)).unwrap();
    assert_eq!(fresh.status(), 503, "a new stream during the takeover");
    let refusal: Value = fresh.json().unwrap();
    assert_eq!(refusal["reason"], "takeover", "{refusal:#}");
    let resumed = reqwest::blocking::Client::new()
        .get(format!("{}/stream/0", b.url))
        .header("range", "bytes=1000-1999")
        .header("x-rondo-resume", "1")
        .send()
        .unwrap();
    assert_eq!(
        resumed.status(),
        206,
        "a resumed stream during the takeover"
    );
    assert_eq!(resumed.bytes().unwrap().len(), 1000);
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
    let b_said =
        std::fs::read_to_string(cluster.tmp.path().join("manager-b.log")).unwrap_or_default();
    if report["streams_broken"] != 0 {
        eprintln!("manager B's log:\n{b_said}");
    }
    // A stream whose last bytes A had already sent when it died ends
    // normally, so fewer than the sampled count may be lost (CI, 2026-11-30:
    // 7 reading at the sample, 5 lost, all 5 resumed); the sample's minimum
    // of 3 must still be lost, and every lost one resumed.
    let lost = stats["upstreams_lost"].as_u64().unwrap();
    assert!(
        (3..=reading + 2).contains(&lost),
        "the streams reading from it lost their manager ({reading} reading at the kill): {stats:#}"
    );
    assert_eq!(stats["streams_resumed"], lost, "{stats:#}");
    assert_eq!(stats["streams_abandoned"], 0, "{stats:#}");
    assert_eq!(stats["late_rounds"], 0, "{stats:#}");
    assert!(
        report["streams_started"].as_u64().unwrap() >= 12,
        "{report:#}"
    );
    assert_eq!(report["stalled_streams"], 0, "{report:#}");
    assert_eq!(report["streams_broken"], 0, "{report:#}");
    assert_eq!(report["streams_errors"], 0, "{report:#}");
    assert_eq!(report["verify"]["mismatches"], 0, "{report:#}");
    assert_eq!(report["verify"]["streams_checked"], 4, "{report:#}");
    // The interface node follows the new leader.
    assert_eq!(stats["manager"], b.url, "{stats:#}");
    // It brought each stream's schedule at A, and B placed the streams on
    // their old diagonals (one whose start burst was still arriving is
    // placed first-fit).
    let b_metrics = get_json(&format!("{}/api/metrics", b.url));
    let (in_place, moved) = (
        b_metrics["resumed_in_place"].as_u64().unwrap(),
        b_metrics["resumed_moved"].as_u64().unwrap(),
    );
    eprintln!("manager B: {in_place} resumed streams on their own diagonals, {moved} first-fit");
    assert_eq!(in_place + moved, lost, "{b_metrics:#}");
    assert!(in_place >= 1, "{b_metrics:#}");
}

/// rondo's player page, loaded from one interface node, plays a title; that
/// node is killed (SIGKILL) mid-title. The page resumes the title where it
/// was on the other interface node by itself (a Range request there) and
/// plays it to its end.
#[test]
fn the_player_page_resumes_on_another_interface_node_when_its_node_dies() {
    if !rondo_testkit::browser::available() {
        return;
    }
    let cluster = Cluster::start("failover");
    let _manager = cluster.manager("a").start();
    let mut i0 = cluster.interface("i0", "2");
    let i1 = cluster.interface("i1", "2");
    let (interfaces, cluster_seen) = interfaces_seen(&i0.url, 2);
    assert_eq!(interfaces.len(), 2, "{cluster_seen:#}");
    let titles = get_json(&format!("{}/api/titles", i0.url));
    let longest = |t: &&Value| (t["duration_seconds"].as_f64().unwrap() * 1000.0) as u64;
    let title = titles
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(longest)
        .unwrap();
    let (id, name) = (
        title["id"].as_u64().unwrap(),
        title["name"].as_str().unwrap(),
    );
    let duration_s = title["duration_seconds"].as_f64().unwrap();

    let profile = tempfile::tempdir().unwrap();
    let mut chromium =
        rondo_testkit::browser::launch(&format!("{}/#play={id}", i0.url), profile.path());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = reqwest::Client::new();
    let played = |title: &str| -> f64 {
        title
            .split_whitespace()
            .find_map(|w| w.strip_prefix("t="))
            .and_then(|t| t.parse().ok())
            .unwrap_or(0.0)
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen: Vec<String> = Vec::new();
    let mut killed_at: Option<(Instant, f64)> = None;
    let mut changes: Vec<(String, f64)> = Vec::new();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
        let Some(now) =
            runtime.block_on(rondo_testkit::browser::page_title(&client, profile.path()))
        else {
            continue;
        };
        if seen.last() != Some(&now) {
            seen.push(now.clone());
        }
        // Each change of state, timed from the kill.
        let status = now
            .split_whitespace()
            .nth(2)
            .unwrap_or_default()
            .to_string();
        if changes.last().map(|(s, _): &(String, f64)| s) != Some(&status) {
            let since_kill = killed_at.map_or(0.0, |(at, _)| at.elapsed().as_secs_f64());
            changes.push((status, since_kill));
        }
        if killed_at.is_none() && now.contains(" playing ") && played(&now) >= 5.0 {
            i0.kill();
            killed_at = Some((Instant::now(), played(&now)));
        }
        if now.contains(" ended ") || now.contains(" error ") {
            break;
        }
    }
    let _ = chromium.kill();
    let _ = chromium.wait();
    let last = seen.last().cloned().unwrap_or_default();
    let seen = seen.join("\n");
    let (killed_at, killed_t) = killed_at.unwrap_or_else(|| panic!("never played 5 s:\n{seen}"));
    eprintln!(
        "player page: interface node killed at t={killed_t:.1}; {last} ({:.1} s after the kill); \
         states (s after the kill): {changes:?}",
        killed_at.elapsed().as_secs_f64()
    );
    assert!(
        last.starts_with(&format!("rondo: {name} ended")),
        "the page did not play {name} to its end:\n{seen}"
    );
    assert!(last.contains("failovers=1"), "{seen}");
    assert!(played(&last) >= duration_s - 0.5, "{seen}");
    let relayed = get_json(&format!("{}/api/interface", i1.url));
    assert!(
        relayed["streams_relayed"].as_u64().unwrap() >= 1,
        "the other node carried the rest: {relayed:#}"
    );
}

/// `rondo load --failover`'s clients, playing through one interface node,
/// resume on the other when it is killed (SIGKILL), as the player page
/// does: a Range request from the first byte not received; no stream
/// breaks.
#[test]
fn load_clients_resume_on_another_interface_node_when_theirs_dies() {
    let cluster = Cluster::start("load-failover");
    let _manager = cluster.manager("a").start();
    let mut i0 = cluster.interface("i0", "2");
    let i1 = cluster.interface("i1", "2");
    let (interfaces, cluster_seen) = interfaces_seen(&i0.url, 2);
    assert_eq!(interfaces.len(), 2, "{cluster_seen:#}");
    // Arrivals end before the kill: a client arriving later would ask the
    // dead node for its title's schedule.
    let load = Command::new(RONDO)
        .args(["load", "--url", &i0.url, "--rate", "2", "--duration", "5"])
        .args(["--seed", "5", "--failover", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(7));
    let at_kill = get_json(&format!("{}/api/interface", i0.url));
    let active = at_kill["streams_active"].as_u64().unwrap();
    assert!(active >= 3, "streams through i0 at the kill: {at_kill:#}");
    i0.kill();
    let report: Value = json(&load.wait_with_output().unwrap());
    let i1_stats = get_json(&format!("{}/api/interface", i1.url));
    eprintln!(
        "{active} streams through i0 when it was killed; load: {} started, {} failed over ({} \
         times), {} stalled ({} stalls, longest {} ms), {} broken; i1: {i1_stats}",
        report["streams_started"],
        report["failed_over_streams"],
        report["failovers"],
        report["stalled_streams"],
        report["stalls"],
        report["stall_ms_max"],
        report["streams_broken"],
    );
    assert_eq!(report["streams_broken"], 0, "{report:#}");
    assert_eq!(report["streams_errors"], 0, "{report:#}");
    assert!(
        report["failed_over_streams"].as_u64().unwrap() >= active,
        "{report:#}"
    );
    assert!(
        i1_stats["streams_relayed"].as_u64().unwrap() >= active,
        "{i1_stats:#}"
    );
}

/// Titles of the capacity test: long and heavy enough that a few dozen
/// streams fill four Cheetah disks, and every stream admitted before the
/// kill is still playing at it.
const CAPACITY_TITLE_SECONDS: u32 = 60;
const CAPACITY_TITLE_KBPS: [u32; 2] = [3000, 2000];
/// Load: arrivals per second and for how long; the kill, seconds in.
const CAPACITY_RATE: &str = "2";
const CAPACITY_LOAD_S: &str = "60";
const CAPACITY_KILL_S: u64 = 45;

/// The elected manager killed (SIGKILL) at capacity, under clients of an
/// interface node (slow: runs only with `RONDO_SLOW_TESTS=1`, about three
/// minutes; otherwise it says why it was skipped and passes).
///
/// Arrivals at twice what the disks carry fill them and the manager
/// refuses some before the kill. Every stream reading from it then comes
/// back to the standby with its schedule there (`x-rondo-resume`), and the
/// standby places it on its old (disk, round) diagonal: all fit again and
/// no client stalls. Placed first-fit they did not (24 of ~250 clients
/// stalled in the capacity run, docs/cluster.md).
#[test]
fn at_capacity_the_standby_puts_every_stream_back_on_its_diagonal() {
    if std::env::var("RONDO_SLOW_TESTS").as_deref() != Ok("1") {
        eprintln!(
            "skipped: a manager killed at capacity takes about three minutes; run with RONDO_SLOW_TESTS=1"
        );
        return;
    }
    rondo_testkit::media::require_tool("ffmpeg");
    let cluster = Cluster::start_with("capacity", &["--no-samples"], |data| {
        for (i, kbps) in CAPACITY_TITLE_KBPS.into_iter().enumerate() {
            let media = rondo_testkit::media::padded_ts(CAPACITY_TITLE_SECONDS, kbps)
                .make(data.with_file_name(format!("title-{kbps}k.ts")));
            let out = Command::new(RONDO)
                .arg("ingest")
                .arg(&media)
                .arg("--data-dir")
                .arg(data)
                .args(["--name", &format!("t{i}-{kbps}k")])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "ingest: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    });
    let mut a = cluster.manager("a").start();
    let standby = {
        let serve = cluster.manager("b");
        std::thread::spawn(move || serve.start())
    };
    let interface = cluster.interface("i0", "8");
    let seed = "23";
    let load = Command::new(RONDO)
        .args(["load", "--url", &interface.url, "--rate", CAPACITY_RATE])
        .args(["--duration", CAPACITY_LOAD_S, "--seed", seed, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(CAPACITY_KILL_S));
    let a_before = get_json(&format!("{}/api/metrics", a.url));
    let reading = get_json(&format!("{}/api/interface", interface.url))["upstreams_reading"]
        .as_u64()
        .unwrap();
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let b = standby.join().expect("the standby starts");
    let report: Value = json(&load.wait_with_output().unwrap());
    let stats = get_json(&format!("{}/api/interface", interface.url));
    let b_metrics = get_json(&format!("{}/api/metrics", b.url));
    let replay = format!(
        "RONDO_SLOW_TESTS=1 cargo test -p rondo-cli --test cluster_interface at_capacity -- --nocapture \
         (rondo load --seed {seed})"
    );
    eprintln!(
        "manager A before the kill: {} admitted, {} refused (disk time), {} active; {reading} \
         streams reading from it\ninterface node: {stats}\nmanager B: {} resumed on their \
         diagonals, {} first-fit, {} deadline misses\nload: {} started, {} stalled ({} stalls), \
         {} broken, {} rejected\nreplay: {replay}",
        a_before["admitted"],
        a_before["rejected_disk_time"],
        a_before["active_streams"],
        b_metrics["resumed_in_place"],
        b_metrics["resumed_moved"],
        b_metrics["stream_round_misses"],
        report["streams_started"],
        report["stalled_streams"],
        report["stalls"],
        report["streams_broken"],
        report["streams_rejected"],
    );
    assert!(
        a_before["rejected_disk_time"].as_u64().unwrap() > 0,
        "manager A was not at capacity when it was killed: {a_before:#}"
    );
    assert!(
        reading >= 20,
        "streams reading from A at the kill: {reading}"
    );
    // Streams whose last bytes were already on their way end normally
    // (see the takeover test above); most must have been lost and resumed.
    let lost = stats["upstreams_lost"].as_u64().unwrap();
    assert!(
        lost * 4 >= reading * 3,
        "{reading} reading at the kill: {stats:#}"
    );
    assert_eq!(stats["streams_resumed"], lost, "{stats:#}");
    assert_eq!(stats["streams_abandoned"], 0, "{stats:#}");
    let in_place = b_metrics["resumed_in_place"].as_u64().unwrap();
    assert!(
        in_place * 10 >= lost * 9,
        "{in_place} of {lost} on their own diagonals: {b_metrics:#}"
    );
    assert_eq!(b_metrics["stream_round_misses"], 0, "{b_metrics:#}");
    assert_eq!(report["stalled_streams"], 0, "{report:#}\nreplay: {replay}");
    assert_eq!(report["streams_broken"], 0, "{report:#}\nreplay: {replay}");
    assert_eq!(report["streams_errors"], 0, "{report:#}\nreplay: {replay}");
}

/// The whole body of `url` (redirects followed) with the response's headers.
fn fetch(url: &str) -> (reqwest::StatusCode, reqwest::header::HeaderMap, Vec<u8>) {
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let response = client.get(url).send().unwrap();
    let (status, headers) = (response.status(), response.headers().clone());
    (status, headers, response.bytes().unwrap().to_vec())
}

/// LDSS on the real cluster (seed 001 §6.4): the manager logs viewers'
/// requests; the one that makes a title popular dedicates the interface
/// node it came through (one with a local data directory), which copies
/// the title to its own disk as one more viewer. From then on the title's
/// viewers at another interface node are redirected there and served from
/// the local copy, byte for byte, while other titles are still relayed.
/// The dedicated node is exclusive (seed 001 §6.4): another title's viewer
/// that asks it is sent to the node dedicated to none.
#[test]
fn a_popular_title_is_copied_to_its_dedicated_interface_node_and_served_there() {
    popular_title_served_by_its_dedicated_node("ldss", "exclusive");
}

/// LMSS: the same, the dedicated node also keeping the copy's first
/// seconds in memory; a viewer's start comes from memory and its rest from
/// the node's disk, byte for byte. The dedicated node is shared (rondo's
/// default) and serves other titles too. Node B's buffer (B_I_tot) holds
/// no stream: its viewers of the popular title are still sent to A, and
/// another title's viewer there is refused (503) naming the buffer.
#[test]
fn under_lmss_a_popular_titles_viewers_start_from_the_dedicated_nodes_memory() {
    popular_title_served_by_its_dedicated_node("lmss", "shared");
}

fn popular_title_served_by_its_dedicated_node(retrieval: &str, dedicated_node: &str) {
    let exclusive = dedicated_node == "exclusive";
    let cluster = Cluster::start("local-copies");
    let manager = cluster
        .manager("m")
        .args(["--retrieval", retrieval, "--popular-requests", "2"])
        .args(["--dedicated-node", dedicated_node])
        .start();
    let local_dir = cluster.tmp.path().join("interface-a-local");
    let local_dir_text = local_dir.to_str().unwrap();
    let a = cluster.interface_with(
        "a",
        "1",
        &[
            "--local-data-dir",
            local_dir_text,
            // Shorter than the sample titles, so a viewer's rest is read.
            "--memory-prefix-s",
            "4",
            // Room for every stream here: the ledger is kept and returned.
            "--buffer-total-mib",
            "256",
        ],
    );
    // Under `shared`, B's buffer holds no stream.
    let b_extra: &[&str] = if exclusive {
        &[]
    } else {
        &["--buffer-total-mib", "0.001"]
    };
    let b = cluster.interface_with("b", "1", b_extra);
    // The manager believes a node's URL once etcd lists the node.
    let (seen, cluster_seen) = interfaces_seen(&manager.url, 2);
    assert_eq!(seen.len(), 2, "{cluster_seen:#}");
    let titles = get_json(&format!("{}/api/titles", manager.url));
    let titles = titles.as_array().unwrap();
    let duration = |t: &Value| t["duration_seconds"].as_f64().unwrap();
    let shortest = titles
        .iter()
        .filter(|t| duration(t) > 8.0)
        .min_by(|x, y| duration(x).total_cmp(&duration(y)))
        .unwrap();
    let path_of = |t: &Value| {
        t["stream_url"]
            .as_str()
            .unwrap()
            .strip_prefix(&manager.url)
            .unwrap()
            .to_string()
    };
    let path = path_of(shortest);
    let other_path = path_of(titles.iter().find(|t| t["id"] != shortest["id"]).unwrap());
    let id = shortest["id"].as_u64().unwrap();

    // Two viewers through A: the second makes the title popular.
    let first = {
        let url = format!("{}{path}", a.url);
        std::thread::spawn(move || fetch(&url))
    };
    std::thread::sleep(Duration::from_millis(500));
    let (status, headers, second) = fetch(&format!("{}{path}", a.url));
    assert_eq!(status, 200);
    assert!(
        headers.get("x-rondo-local-copy").is_none(),
        "relayed, not local"
    );
    let (_, _, first) = first.join().unwrap();
    assert_eq!(first, second, "both viewers got the title byte for byte");

    // A copies it: as a viewer, so within about the title's length.
    let asked_at = Instant::now();
    let copies = loop {
        let interface = get_json(&format!("{}/api/interface", a.url));
        let copies = interface["copies"].clone();
        if copies[0]["state"] == "ready" || asked_at.elapsed() > Duration::from_secs(90) {
            break interface;
        }
        assert_ne!(copies[0]["state"], "failed", "{interface:#}");
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(copies["copies"][0]["title"], id, "{copies:#}");
    assert_eq!(copies["copies"][0]["state"], "ready", "{copies:#}");
    assert_eq!(copies["copies_stored"], 1, "{copies:#}");
    let prefix_bytes = copies["copies"][0]["memory_prefix_bytes"].as_u64().unwrap();
    let expected_local = if retrieval == "lmss" {
        assert!(
            prefix_bytes > 0 && (prefix_bytes as usize) < first.len(),
            "the first seconds in memory: {copies:#}"
        );
        "memory"
    } else {
        assert_eq!(prefix_bytes, 0, "{copies:#}");
        "1"
    };
    let cluster_seen = get_json(&format!("{}/api/cluster", manager.url));
    assert_eq!(
        cluster_seen["local_copies"]["dedicated"],
        serde_json::json!([{"title": id, "interface": a.url}]),
        "{cluster_seen:#}"
    );

    // A viewer at B is sent to A and served from A's copy, byte for byte.
    let (status, headers, local) = fetch(&format!("{}{path}", b.url));
    assert_eq!(status, 200);
    assert_eq!(
        headers.get("x-rondo-local-copy").map(|v| v.as_bytes()),
        Some(expected_local.as_bytes()),
        "{headers:?}"
    );
    assert_eq!(local, first, "the local copy serves the same bytes");
    // So is one at A.
    let (status, headers, at_a) = fetch(&format!("{}{path}", a.url));
    assert_eq!(status, 200);
    assert_eq!(at_a, first);
    assert!(headers.get("x-rondo-local-copy").is_some());
    let served = get_json(&format!("{}/api/interface", a.url));
    assert_eq!(served["streams_local"], 2, "{served:#}");
    let from_memory = if retrieval == "lmss" { 2 } else { 0 };
    assert_eq!(served["streams_from_memory"], from_memory, "{served:#}");
    assert_eq!(served["local_refused"], 0, "{served:#}");

    let node_of = |headers: &reqwest::header::HeaderMap| {
        headers
            .get("x-rondo-interface")
            .map(|v| v.to_str().unwrap().to_string())
    };
    if exclusive {
        // Another title asked of A goes to B (dedicated to none), relayed
        // from the storage nodes there.
        let (status, headers, _) = fetch(&format!("{}{other_path}", a.url));
        assert_eq!(status, 200);
        assert_eq!(node_of(&headers).as_deref(), Some("b"), "{headers:?}");
        assert!(headers.get("x-rondo-local-copy").is_none());
    } else {
        // Another title is relayed from the storage nodes at A; B, its
        // buffer too small for any stream, refuses it and says why.
        let (status, headers, _) = fetch(&format!("{}{other_path}", a.url));
        assert_eq!(status, 200);
        assert_eq!(node_of(&headers).as_deref(), Some("a"), "{headers:?}");
        assert!(headers.get("x-rondo-local-copy").is_none());
        let (status, headers, body) = fetch(&format!("{}{other_path}", b.url));
        assert_eq!(status, 503);
        assert!(headers.get("retry-after").is_some(), "{headers:?}");
        let refusal: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(refusal["reason"], "interface_buffer", "{refusal:#}");
        let b_seen = get_json(&format!("{}/api/interface", b.url));
        assert_eq!(b_seen["streams_refused_buffer"], 1, "{b_seen:#}");
        assert_eq!(b_seen["buffer_reserved_bytes"], 0, "{b_seen:#}");
    }
    // Every stream A served has ended, and returned its buffer.
    let ended_by = Instant::now() + Duration::from_secs(10);
    let a_seen = loop {
        let a_seen = get_json(&format!("{}/api/interface", a.url));
        if a_seen["buffer_reserved_bytes"] == 0 || Instant::now() > ended_by {
            break a_seen;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(a_seen["buffer_reserved_bytes"], 0, "{a_seen:#}");
    assert_eq!(a_seen["streams_refused_buffer"], 0, "{a_seen:#}");
    drop((a, b, manager));
}
