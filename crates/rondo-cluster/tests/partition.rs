//! A network partition between an object manager and etcd, on real hosts:
//! manager A runs in a network namespace of its own, joined to this host by a
//! veth pair; etcd and manager B run on this host. Cutting the pair leaves A
//! believing it leads while etcd ends its lease and elects B. The test checks
//! the property the fencing exists for: whatever A attempts, during the
//! partition and after it heals, no stream is admitted twice and none that
//! was acknowledged is lost.
//!
//! Needs root and iproute2 (`ip netns`), as CI has; `RONDO_SKIP_NETNS_TESTS=1`
//! skips it elsewhere.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use common::record;
use rondo_cluster::etcd::LocalEtcd;
use rondo_cluster::{Coordinator, Recorded};

const TTL_S: i64 = 2;
const ETCD_ENV: &str = "RONDO_PARTITION_ETCD";

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("iproute2's `ip`");
    assert!(
        out.status.success(),
        "ip {}: {} (this test needs root; RONDO_SKIP_NETNS_TESTS=1 skips it)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A namespace joined to this host by a veth pair, removed on drop.
struct Host {
    netns: String,
    veth_host: String,
    host_address: String,
}

impl Host {
    fn new() -> Host {
        // Names unique to this process, within the 15 characters a link
        // name may have; a subnet of its own in 10.213.0.0/16.
        let id = std::process::id() % 60_000;
        let (netns, veth_host, veth_ns) = (
            format!("rondo-p{id}"),
            format!("rph{id}"),
            format!("rpn{id}"),
        );
        let subnet = format!("10.213.{}", id % 250 + 1);
        let _ = Command::new("ip").args(["netns", "del", &netns]).output();
        let _ = Command::new("ip")
            .args(["link", "del", &veth_host])
            .output();
        ip(&["netns", "add", &netns]);
        ip(&[
            "link", "add", &veth_host, "type", "veth", "peer", "name", &veth_ns,
        ]);
        ip(&["link", "set", &veth_ns, "netns", &netns]);
        ip(&["addr", "add", &format!("{subnet}.1/24"), "dev", &veth_host]);
        ip(&["link", "set", &veth_host, "up"]);
        let exec = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &netns, "ip"];
            all.extend_from_slice(args);
            ip(&all);
        };
        exec(&["addr", "add", &format!("{subnet}.2/24"), "dev", &veth_ns]);
        exec(&["link", "set", &veth_ns, "up"]);
        exec(&["link", "set", "lo", "up"]);
        Host {
            netns,
            veth_host,
            host_address: format!("{subnet}.1"),
        }
    }

    fn cut(&self) {
        ip(&["link", "set", &self.veth_host, "down"]);
    }

    fn heal(&self) {
        ip(&["link", "set", &self.veth_host, "up"]);
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.veth_host])
            .output();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .output();
    }
}

/// Manager A: this test binary run again inside the namespace, on the
/// `manager_in_namespace` entry below, driven line by line.
struct Remote {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Remote {
    fn start(host: &Host, etcd_url: &str) -> Remote {
        let exe = std::env::current_exe().unwrap();
        let mut child = Command::new("ip")
            .args(["netns", "exec", &host.netns])
            .arg(exe)
            .args([
                "--exact",
                "manager_in_namespace",
                "--ignored",
                "--nocapture",
            ])
            .env(ETCD_ENV, etcd_url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap());
        Remote {
            child,
            input,
            output,
        }
    }

    /// The next line that is the protocol's (the harness prints its own).
    fn answer(&mut self) -> String {
        loop {
            let mut line = String::new();
            assert!(
                self.output.read_line(&mut line).unwrap() > 0,
                "manager A exited"
            );
            if let Some(a) = line.trim().strip_prefix("A: ") {
                return a.to_string();
            }
        }
    }

    fn ask(&mut self, command: &str) -> String {
        writeln!(self.input, "{command}").unwrap();
        self.answer()
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Manager A's side: runs only when the partition test starts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "manager A of partition_between_a_manager_and_etcd, run inside its namespace"]
async fn manager_in_namespace() {
    let Ok(url) = std::env::var(ETCD_ENV) else {
        return;
    };
    let mut a = Coordinator::connect(&[url], "partition", TTL_S)
        .await
        .unwrap();
    let lead = a.campaign("manager-a").await.unwrap();
    println!("A: LEADER {}", lead.revision());
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line.unwrap();
        let reply = match line.split_once(' ') {
            Some(("admit", id)) => match a.record_admission(&lead, id, &record(9)).await {
                Ok(Recorded::Admitted { .. }) => "ADMITTED".to_string(),
                Ok(Recorded::AlreadyAdmitted) => "ALREADY".to_string(),
                Ok(Recorded::NotLeader) => "NOT_LEADER".to_string(),
                Err(e) => format!("ERROR {e}"),
            },
            _ => format!("ERROR unknown command {line:?}"),
        };
        println!("A: {reply}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_between_a_manager_and_etcd() {
    if std::env::var("RONDO_SKIP_NETNS_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("skipped: RONDO_SKIP_NETNS_TESTS=1");
        return;
    }
    let host = Host::new();
    let dir = tempfile::tempdir().unwrap();
    let etcd = LocalEtcd::start(dir.path(), &host.host_address).unwrap_or_else(|e| panic!("{e}"));
    let url = etcd.client_url().to_string();
    let mut a = Remote::start(&host, &url);
    assert!(a.answer().starts_with("LEADER"), "A leads first");
    assert_eq!(a.ask("admit req-1"), "ADMITTED");

    let mut b = Coordinator::connect(std::slice::from_ref(&url), "partition", TTL_S)
        .await
        .unwrap();
    let mut log = Coordinator::connect(std::slice::from_ref(&url), "partition", TTL_S)
        .await
        .unwrap();
    let standby = tokio::spawn(async move {
        let lead = b.campaign("manager-b").await.unwrap();
        (b, lead, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!standby.is_finished(), "B stands by while A leads");

    // The partition: A can no longer reach etcd (nor etcd A).
    let cut = Instant::now();
    host.cut();
    let (mut b, lead_b, elected) = tokio::time::timeout(Duration::from_secs(15), standby)
        .await
        .expect("etcd ends A's lease and elects B")
        .unwrap();
    eprintln!(
        "B elected {:?} after the partition (lease TTL {TTL_S} s)",
        elected - cut
    );
    // A, cut off, still believes it leads: whatever it attempts now fails.
    let during = a.ask("admit req-3");
    assert!(
        during.starts_with("ERROR"),
        "A during the partition: {during}"
    );
    assert!(matches!(
        b.record_admission(&lead_b, "req-2", &record(2))
            .await
            .unwrap(),
        Recorded::Admitted { .. }
    ));
    assert_eq!(
        b.record_admission(&lead_b, "req-1", &record(1))
            .await
            .unwrap(),
        Recorded::AlreadyAdmitted,
        "B finds A's acknowledged admission"
    );

    // The partition heals: A's writes reach etcd and are refused.
    host.heal();
    let start = Instant::now();
    let after = loop {
        let reply = a.ask("admit req-4");
        if !reply.starts_with("ERROR") || start.elapsed() > Duration::from_secs(30) {
            break reply;
        }
    };
    assert_eq!(after, "NOT_LEADER", "a deposed manager admits nothing");
    assert_eq!(a.ask("admit req-2"), "ALREADY");
    let admitted: Vec<String> = log
        .streams()
        .await
        .unwrap()
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(admitted, ["req-1", "req-2"], "each once, none lost");
}
