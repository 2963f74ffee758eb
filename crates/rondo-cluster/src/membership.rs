//! What a node process does with etcd (seed 001's cluster, docs/cluster.md):
//! a node keeps itself registered under its role for as long as it runs,
//! and the object manager finds the storage nodes, and so the disk → node
//! map, there instead of in its command line.
//!
//! A node's registration lives on its lease: a node that dies, or that
//! loses etcd for longer than the lease's TTL, drops out of the map by
//! itself. Registration re-joins with a new lease when etcd comes back, so
//! a partition healed needs no restart.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::coord::{CoordError, Coordinator, NodeInfo};
use crate::keys::Role;
use crate::remote::{DiskMapError, disk_map};

/// How a node reaches the cluster's etcd.
#[derive(Clone, Debug)]
pub struct EtcdConfig {
    /// etcd's client URLs (e.g. `http://10.0.0.1:2379`).
    pub endpoints: Vec<String>,
    /// The cluster's name: its keys' prefix, `/rondo/<cluster>/`.
    pub cluster: String,
    /// The lease's TTL: how long a dead or cut-off node stays registered,
    /// and how long a standby manager waits for a dead leader.
    pub lease_ttl_s: i64,
}

/// The lease TTL nodes use unless told otherwise (assumption: long enough
/// that a loaded 2-core host's scheduling delays never end a live node's
/// lease — keep-alives go every third of it — and short enough that a
/// standby manager takes over within seconds).
pub const LEASE_TTL_S_DEFAULT: i64 = 3;

impl EtcdConfig {
    pub fn new(endpoints: &str, cluster: &str, lease_ttl_s: i64) -> EtcdConfig {
        EtcdConfig {
            endpoints: endpoints
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(|e| {
                    if e.contains("://") {
                        e.to_string()
                    } else {
                        format!("http://{e}")
                    }
                })
                .collect(),
            cluster: cluster.to_string(),
            lease_ttl_s,
        }
    }

    pub async fn connect(&self) -> Result<Coordinator, CoordError> {
        if self.endpoints.is_empty() {
            return Err(CoordError::Invalid("no etcd endpoint given".into()));
        }
        Coordinator::connect(&self.endpoints, &self.cluster, self.lease_ttl_s).await
    }
}

/// Keeps `info` registered under `role` until the task is dropped or
/// aborted: registers on a lease, and whenever the lease ends (etcd gone
/// past its TTL), registers again on a new one as soon as etcd answers.
/// `registered` is told each time the node is (re-)registered.
pub async fn keep_registered(
    etcd: EtcdConfig,
    role: Role,
    info: NodeInfo,
    registered: tokio::sync::watch::Sender<u64>,
) {
    let mut times = 0u64;
    loop {
        match etcd.connect().await {
            Ok(mut session) => match session.register(role, &info).await {
                Ok(()) => {
                    times += 1;
                    let _ = registered.send(times);
                    tracing::info!(
                        node = %info.id,
                        role = %role,
                        lease = session.lease_id(),
                        "registered in etcd"
                    );
                    session.lease_ended().await;
                    tracing::warn!(node = %info.id, "etcd lease ended; registering again");
                }
                Err(e) => tracing::warn!(node = %info.id, "registering in etcd: {e}"),
            },
            Err(e) => tracing::warn!(node = %info.id, "reaching etcd: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The storage nodes that cover every disk `0..disk_count` exactly once,
/// as registered in etcd: their addresses in disk order.
pub fn cover_disks(members: &[NodeInfo], disk_count: u32) -> Result<Vec<String>, String> {
    let lists: Vec<Vec<u32>> = members.iter().map(|n| n.disks.clone()).collect();
    let disk_node = disk_map(&lists, disk_count).map_err(|e| match e {
        DiskMapError::Beyond { node, disk } => format!(
            "storage node {} registers disk {disk}, but the array has {disk_count} disks",
            members[node].id
        ),
        DiskMapError::Twice {
            disk,
            first,
            second,
        } => format!(
            "disk {disk} is registered by two storage nodes: {} and {}",
            members[first].id, members[second].id
        ),
        DiskMapError::Missing(missing) => format!("no storage node registered disks {missing:?}"),
    })?;
    let mut addresses: Vec<String> = Vec::new();
    for &node in disk_node.values() {
        if !addresses.contains(&members[node].address) {
            addresses.push(members[node].address.clone());
        }
    }
    Ok(addresses)
}

/// Waits until the storage nodes registered in etcd cover every disk of the
/// array, for at most `timeout`; answers their addresses.
pub async fn discover_storage_nodes(
    session: &mut Coordinator,
    disk_count: u32,
    timeout: Duration,
) -> Result<Vec<String>, CoordError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let members = session.members(Role::Storage).await?;
        match cover_disks(&members, disk_count) {
            Ok(addresses) => return Ok(addresses),
            Err(why) if tokio::time::Instant::now() >= deadline => {
                return Err(CoordError::Invalid(format!(
                    "after {} s: {why} (registered: {})",
                    timeout.as_secs(),
                    members
                        .iter()
                        .map(|n| format!("{} at {} with disks {:?}", n.id, n.address, n.disks))
                        .collect::<Vec<_>>()
                        .join("; ")
                )));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The object manager's hold on the cluster: its etcd session, elected
/// leader, on a runtime of its own (the server's is not running yet when it
/// campaigns). Dropping it revokes nothing: a clean stop calls `resign`.
pub struct ManagerSession {
    runtime: tokio::runtime::Runtime,
    session: Option<Coordinator>,
    leadership: crate::coord::Leadership,
    /// Set by a clean stop, whose lease revocation is no loss.
    resigned: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl ManagerSession {
    /// Connects to etcd, stands for object manager and waits while another
    /// leads (`standby` is told who), then registers `manager` under its
    /// role. Blocks; call it outside an async runtime.
    pub fn elect(
        etcd: &EtcdConfig,
        manager: &NodeInfo,
        standby: impl FnOnce(&str),
    ) -> Result<ManagerSession, CoordError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("rondo-etcd")
            .enable_all()
            .build()
            .map_err(|e| CoordError::Invalid(format!("starting the etcd runtime: {e}")))?;
        let (session, leadership) = runtime.block_on(async {
            let mut session = etcd.connect().await?;
            if let Some(leader) = session.leader().await? {
                standby(&leader);
            }
            let leadership = session.campaign(&manager.address).await?;
            session.register(Role::Manager, manager).await?;
            Ok::<_, CoordError>((session, leadership))
        })?;
        Ok(ManagerSession {
            runtime,
            session: Some(session),
            leadership,
            resigned: Default::default(),
        })
    }

    /// Waits at most `timeout` for storage nodes covering every disk
    /// `0..disk_count` to be registered; answers their addresses.
    pub fn discover(
        &mut self,
        disk_count: u32,
        timeout: Duration,
    ) -> Result<Vec<String>, CoordError> {
        let session = self
            .session
            .as_mut()
            .ok_or_else(|| CoordError::Invalid("the manager's session was closed".into()))?;
        self.runtime
            .block_on(discover_storage_nodes(session, disk_count, timeout))
    }

    /// This manager's epoch: its leadership's etcd revision, which the
    /// storage nodes fence older managers by.
    pub fn epoch(&self) -> u64 {
        self.leadership.revision().max(0) as u64
    }

    /// A view of the cluster for `/api/cluster` and the dashboard, kept
    /// current by polling etcd every second on this session's runtime.
    pub fn watch(&self, this: &NodeInfo, etcd: &EtcdConfig) -> Arc<ClusterWatch> {
        let watch = Arc::new(ClusterWatch {
            snapshot: Mutex::new(serde_json::json!({
                "cluster": etcd.cluster,
                "etcd": etcd.endpoints,
                "this_manager": { "id": this.id, "address": this.address, "epoch": self.epoch() },
                "nodes": [],
                "managers": [],
            })),
        });
        if let Some(session) = &self.session {
            let mut observer = session.observer();
            let watch = Arc::clone(&watch);
            self.runtime.spawn(async move {
                loop {
                    let seen = async {
                        let mut nodes = observer.members(Role::Storage).await?;
                        nodes.extend(observer.members(Role::Interface).await?);
                        let candidates = observer.candidates().await?;
                        Ok::<_, CoordError>((nodes, candidates))
                    }
                    .await;
                    watch.update(seen);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            });
        }
        watch
    }

    /// Runs `lost` once if this manager's lease ends (etcd unreachable past
    /// its TTL, or the lease revoked): its leadership is then gone and a
    /// standby may already lead.
    pub fn on_leadership_lost(&self, lost: impl FnOnce() + Send + 'static) {
        if let Some(session) = &self.session {
            let ended = session.lease_ended();
            let resigned = std::sync::Arc::clone(&self.resigned);
            self.runtime.spawn(async move {
                ended.await;
                if !resigned.load(std::sync::atomic::Ordering::SeqCst) {
                    lost();
                }
            });
        }
    }

    /// Gives up leadership at once (a clean stop), so that a standby need
    /// not wait for the lease to end.
    pub fn resign(mut self) -> Result<(), CoordError> {
        let Some(mut session) = self.session.take() else {
            return Ok(());
        };
        self.resigned
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let leadership = self.leadership.clone();
        self.runtime.block_on(async move {
            session.resign(leadership).await?;
            session.close().await
        })
    }
}

/// The cluster as its manager last saw it in etcd.
pub struct ClusterWatch {
    snapshot: Mutex<serde_json::Value>,
}

impl ClusterWatch {
    fn update(&self, seen: Result<(Vec<NodeInfo>, Vec<String>), CoordError>) {
        let mut snapshot = self.snapshot.lock().expect("not poisoned");
        let seen_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        match seen {
            Ok((nodes, candidates)) => {
                snapshot["nodes"] = serde_json::to_value(&nodes).expect("serialisable");
                snapshot["managers"] = candidates
                    .iter()
                    .enumerate()
                    .map(|(k, address)| {
                        serde_json::json!({
                            "address": address,
                            "role": if k == 0 { "leader" } else { "standby" },
                        })
                    })
                    .collect();
                snapshot["seen_unix_ms"] = seen_unix_ms.into();
                snapshot["error"] = serde_json::Value::Null;
            }
            // The last good view stays, with what went wrong since.
            Err(e) => snapshot["error"] = format!("{e}").into(),
        }
    }
}

impl rondo_server::executor::ClusterView for ClusterWatch {
    fn snapshot(&self) -> serde_json::Value {
        self.snapshot.lock().expect("not poisoned").clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, address: &str, disks: &[u32]) -> NodeInfo {
        NodeInfo {
            id: id.into(),
            role: "storage".into(),
            address: address.into(),
            disks: disks.to_vec(),
        }
    }

    #[test]
    fn the_disk_map_must_cover_every_disk_once() {
        let a = node("a", "10.0.0.2:7400", &[0, 2]);
        let b = node("b", "10.0.0.3:7400", &[1, 3]);
        assert_eq!(
            cover_disks(&[b.clone(), a.clone()], 4).unwrap(),
            vec!["10.0.0.2:7400".to_string(), "10.0.0.3:7400".to_string()]
        );
        let missing = cover_disks(std::slice::from_ref(&a), 4).unwrap_err();
        assert!(missing.contains("disks [1, 3]"), "{missing}");
        let twice = cover_disks(&[a.clone(), b, node("c", "x:1", &[2])], 4).unwrap_err();
        assert!(twice.contains("disk 2 is registered by two"), "{twice}");
        let beyond = cover_disks(&[node("d", "x:1", &[7])], 4).unwrap_err();
        assert!(beyond.contains("has 4 disks"), "{beyond}");
    }

    #[test]
    fn endpoints_get_a_scheme() {
        let c = EtcdConfig::new("10.0.0.1:2379, http://h:1", "lab", 3);
        assert_eq!(c.endpoints, vec!["http://10.0.0.1:2379", "http://h:1"]);
    }
}
