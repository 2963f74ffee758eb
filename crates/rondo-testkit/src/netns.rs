//! Hosts for the cluster tests: network namespaces on one bridge, so that
//! each node of a cluster runs behind its own network stack and address, as
//! on separate machines, and a test can cut a host off or partition two
//! hosts (issue 14). Needs root and iproute2 (`ip netns`), as CI has;
//! [`skip_reason`] says why a test should not run here.
//!
//! The bridge lives in the test's own namespace, which is also a host on the
//! LAN (`.1`), so the test process reaches every host directly.

use std::ffi::OsStr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Set to skip the namespace tests on a machine without root or iproute2.
pub const SKIP_ENV: &str = "RONDO_SKIP_NETNS_TESTS";

/// Why namespace tests cannot run here, if they cannot: skipped by
/// [`SKIP_ENV`]. Otherwise `None`, and a missing `ip` or permission then
/// fails the test with the command's error (CI must run them).
pub fn skip_reason() -> Option<String> {
    std::env::var_os(SKIP_ENV).map(|_| format!("{SKIP_ENV} is set"))
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("iproute2's `ip` (apt-get install -y iproute2)");
    assert!(
        out.status.success(),
        "ip {}: {} (namespace tests need root; {SKIP_ENV}=1 skips them)",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

fn ip_quiet(args: &[&str]) {
    let _ = Command::new("ip").args(args).output();
}

static LANS: AtomicU32 = AtomicU32::new(0);

/// A bridge with hosts on it, all removed on drop.
pub struct Lan {
    tag: String,
    bridge: String,
    subnet: String,
    hosts: Vec<(String, String)>,
}

/// A namespace on a [`Lan`].
#[derive(Clone, Debug)]
pub struct Host {
    pub name: String,
    pub netns: String,
    /// Its address on the LAN.
    pub address: String,
    veth_host: String,
}

impl Lan {
    /// A new bridge on a /24 of its own in 10.214.0.0/16; this process's
    /// namespace is `.1` on it.
    pub fn new() -> Lan {
        let n = LANS.fetch_add(1, Ordering::SeqCst);
        let id = (std::process::id() % 10_000) * 8 + n % 8;
        let tag = format!("r{id}");
        let bridge = format!("{tag}br");
        let subnet = format!("10.214.{}", id % 250 + 1);
        ip_quiet(&["link", "del", &bridge]);
        ip(&["link", "add", &bridge, "type", "bridge"]);
        ip(&["addr", "add", &format!("{subnet}.1/24"), "dev", &bridge]);
        ip(&["link", "set", &bridge, "up"]);
        Lan {
            tag,
            bridge,
            subnet,
            hosts: Vec::new(),
        }
    }

    /// This process's address on the LAN.
    pub fn local_address(&self) -> String {
        format!("{}.1", self.subnet)
    }

    /// A new host: a namespace joined to the bridge by a veth pair, with
    /// loopback up and the next address.
    pub fn host(&mut self, name: &str) -> Host {
        let k = self.hosts.len() + 2;
        let netns = format!("{}-{name}", self.tag);
        let veth_host = format!("{}h{k}", self.tag);
        let veth_ns = format!("{}n{k}", self.tag);
        let address = format!("{}.{k}", self.subnet);
        ip_quiet(&["netns", "del", &netns]);
        ip_quiet(&["link", "del", &veth_host]);
        ip(&["netns", "add", &netns]);
        self.hosts.push((netns.clone(), veth_host.clone()));
        ip(&[
            "link", "add", &veth_host, "type", "veth", "peer", "name", &veth_ns,
        ]);
        ip(&["link", "set", &veth_host, "master", &self.bridge]);
        ip(&["link", "set", &veth_host, "up"]);
        ip(&["link", "set", &veth_ns, "netns", &netns]);
        let exec = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &netns, "ip"];
            all.extend_from_slice(args);
            ip(&all);
        };
        exec(&["addr", "add", &format!("{address}/24"), "dev", &veth_ns]);
        exec(&["link", "set", &veth_ns, "up"]);
        exec(&["link", "set", "lo", "up"]);
        Host {
            name: name.to_string(),
            netns,
            address,
            veth_host,
        }
    }
}

impl Default for Lan {
    fn default() -> Lan {
        Lan::new()
    }
}

impl Host {
    /// `program` run inside this host's namespace (`ip netns exec`, which
    /// execs it: the child's pid is the program's).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.netns]).arg(program);
        c
    }

    /// Cuts the host off the LAN (its link down): its peers see silence,
    /// not a closed connection, as when a cable or switch fails.
    pub fn cut(&self) {
        ip(&["link", "set", &self.veth_host, "down"]);
    }

    /// Joins a cut host back.
    pub fn heal(&self) {
        ip(&["link", "set", &self.veth_host, "up"]);
    }

    /// Partitions this host from one peer only: packets to `peer` are
    /// dropped in this host's namespace (a blackhole route); the peer's
    /// packets still arrive but get no answer.
    pub fn block(&self, peer: &str) {
        self.blackhole("add", peer);
    }

    /// Ends a [`Host::block`].
    pub fn unblock(&self, peer: &str) {
        self.blackhole("del", peer);
    }

    fn blackhole(&self, verb: &str, peer: &str) {
        let route = format!("{peer}/32");
        ip(&[
            "netns",
            "exec",
            &self.netns,
            "ip",
            "route",
            verb,
            "blackhole",
            &route,
        ]);
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        for (netns, veth) in &self.hosts {
            ip_quiet(&["link", "del", veth]);
            ip_quiet(&["netns", "del", netns]);
        }
        ip_quiet(&["link", "del", &self.bridge]);
    }
}
