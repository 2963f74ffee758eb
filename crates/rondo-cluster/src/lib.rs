//! rondo beyond one machine (seed 001's object manager, interface nodes and
//! storage nodes on separate hosts): what the nodes keep in etcd and how they
//! agree through it, never through a consensus of their own.
//!
//! This crate owns the cluster's coordination:
//! - `keys`: the key layout under a cluster's prefix (membership, the
//!   object manager's election, the stream log, the disk → node map);
//! - `coord`: a node's session with etcd (a lease kept alive while the node
//!   lives), membership, the object manager's election with a standby that
//!   takes over when the leader's lease ends, and the stream log, whose
//!   writes are fenced by the writer's leadership so that a deposed or
//!   partitioned manager can never admit a stream, and keyed by the
//!   client's request so that no request is ever admitted twice;
//! - `membership`: a node process kept registered in etcd under its role,
//!   and the manager's discovery of the storage nodes (the disk → node
//!   map) there;
//! - `etcd`: a local etcd server process for a cluster on one machine (the
//!   project's scripts and tests start it; Debian's `etcd-server`).
//!
//! Everything crossing etcd is plain data with round numbers, never a
//! process-local clock or pointer. The single-machine `rondo serve` does
//! not use this crate.

pub mod coord;
pub mod etcd;
pub mod interface_node;
pub mod keys;
pub mod membership;
pub mod remote;
pub mod storage_node;
pub mod wire;

pub use coord::{CoordError, Coordinator, Leadership, Recorded, StreamRecord};
pub use interface_node::{InterfaceConfig, InterfaceNode, LocalServer, Managers};
pub use keys::{ClusterKeys, Role};
pub use membership::{EtcdConfig, LEASE_TTL_S_DEFAULT};
pub use remote::{RemoteError, StorageNodes};
pub use storage_node::{StorageNodeConfig, StorageNodeService};
