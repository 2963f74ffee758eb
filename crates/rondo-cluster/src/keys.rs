//! The cluster's keys in etcd, all under `/rondo/<cluster>/`:
//!
//! | key | value | lifetime |
//! |---|---|---|
//! | `nodes/<role>/<id>` | the node's `NodeInfo` (JSON) | the node's lease: gone when it dies |
//! | `manager` | the object manager's election (etcd's election API) | the leader's lease |
//! | `streams/<request id>` | a `StreamRecord` (JSON), written only by the leader | until released |
//!
//! The disk → node map and the cluster's configuration come with the node
//! processes.

use std::fmt;

/// A node's role (seed 001 §3.2).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Admission, reservations, routing, the popularity log.
    Manager,
    /// HTTP sessions, buffers, delivery to clients.
    Interface,
    /// Disks, executing the array's per-round commands.
    Storage,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Manager => "manager",
            Role::Interface => "interface",
            Role::Storage => "storage",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The key layout of one cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterKeys {
    prefix: String,
}

impl ClusterKeys {
    /// `cluster` names the cluster; several may share one etcd. Only
    /// `[A-Za-z0-9._-]` is allowed, so that no name is a prefix path of
    /// another's keys.
    pub fn new(cluster: &str) -> Result<ClusterKeys, String> {
        if cluster.is_empty()
            || !cluster
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err(format!(
                "cluster name {cluster:?}: use letters, digits, '.', '_' or '-'"
            ));
        }
        Ok(ClusterKeys {
            prefix: format!("/rondo/{cluster}/"),
        })
    }

    pub fn node(&self, role: Role, id: &str) -> String {
        format!("{}nodes/{role}/{id}", self.prefix)
    }

    pub fn nodes(&self, role: Role) -> String {
        format!("{}nodes/{role}/", self.prefix)
    }

    /// The object manager's election name.
    pub fn manager_election(&self) -> String {
        format!("{}manager", self.prefix)
    }

    pub fn stream(&self, request_id: &str) -> String {
        format!("{}streams/{request_id}", self.prefix)
    }

    pub fn streams(&self) -> String {
        format!("{}streams/", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_nest_under_the_cluster() {
        let k = ClusterKeys::new("lab-1").unwrap();
        assert_eq!(k.node(Role::Storage, "s3"), "/rondo/lab-1/nodes/storage/s3");
        assert!(
            k.node(Role::Storage, "s3")
                .starts_with(&k.nodes(Role::Storage))
        );
        assert!(k.stream("r1").starts_with(&k.streams()));
        for bad in ["", "a/b", "a b", "é"] {
            assert!(ClusterKeys::new(bad).is_err(), "{bad:?}");
        }
    }
}
