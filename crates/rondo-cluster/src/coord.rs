//! A node's session with etcd, and what the nodes agree on through it.
//!
//! Each `Coordinator` holds one etcd lease, kept alive while the node runs:
//! its membership key and, for the object manager, its leadership are
//! attached to that lease, so a node that dies (or loses etcd for longer
//! than the lease's TTL) leaves the cluster by itself and a standby manager
//! takes over.
//!
//! The stream log (`streams/<request id>`) is the object manager's record of
//! what it admitted. Every write to it is one etcd transaction that also
//! checks that the writer still holds its leadership key (its creation
//! revision, as etcd's election API hands it out). A manager cut off from
//! etcd past its lease has lost that key, so its writes fail: two managers
//! can never both admit. The record's key is the client's request id and a
//! write requires the key to be absent, so a request retried, or replayed by
//! the next manager, is never admitted twice.

use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, LeaderKey, PutOptions, ResignOptions,
    SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};
use serde::{Deserialize, Serialize};

use crate::keys::{ClusterKeys, Role};

#[derive(Debug, thiserror::Error)]
pub enum CoordError {
    #[error("etcd at {endpoints}: {source}")]
    Etcd {
        endpoints: String,
        #[source]
        source: etcd_client::Error,
    },
    #[error("{key} holds what is not a rondo record: {source}")]
    Decode {
        key: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

/// What a node tells the cluster about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub id: String,
    pub role: String,
    /// Where it serves (its RPC or HTTP address).
    pub address: String,
    /// A storage node's disks: the cluster's disk → node map is the union
    /// of its storage nodes' lists.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disks: Vec<u32>,
}

/// One admitted stream, as the object manager logs it: enough for the
/// next manager to reserve it again in the same rounds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamRecord {
    pub title: u64,
    pub first_byte: u64,
    pub end_byte: u64,
    /// The interface node serving it.
    pub interface: String,
    /// The round it was admitted in, and the round its reads start.
    pub admitted_round: u64,
    pub start_round: u64,
}

/// This manager's leadership: etcd's leader key, whose creation revision
/// fences every write to the stream log.
#[derive(Clone, Debug)]
pub struct Leadership {
    key: LeaderKey,
}

impl Leadership {
    /// The leader key's creation revision (etcd's fencing token).
    pub fn revision(&self) -> i64 {
        self.key.rev()
    }
}

/// The outcome of logging an admission.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// Logged at this etcd revision.
    Admitted { revision: i64 },
    /// The request was admitted before (by this or an earlier manager).
    AlreadyAdmitted,
    /// This manager no longer leads: nothing was written.
    NotLeader,
}

/// A node's session with etcd.
pub struct Coordinator {
    client: Client,
    keys: ClusterKeys,
    endpoints: String,
    lease_id: i64,
    keepalive: tokio::task::JoinHandle<()>,
    /// True while the lease is kept alive; false once etcd said it is gone
    /// or has not confirmed it for a whole TTL (it has then ended at etcd,
    /// or will before anyone can tell this node otherwise).
    alive: tokio::sync::watch::Receiver<bool>,
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        self.keepalive.abort();
    }
}

impl Coordinator {
    /// Connects to etcd and opens a lease of `ttl_s` seconds kept alive
    /// from now on (every third of its TTL).
    pub async fn connect(
        endpoints: &[String],
        cluster: &str,
        ttl_s: i64,
    ) -> Result<Coordinator, CoordError> {
        let keys = ClusterKeys::new(cluster).map_err(CoordError::Invalid)?;
        if ttl_s < 1 {
            return Err(CoordError::Invalid(format!(
                "lease TTL {ttl_s} s: at least 1 s"
            )));
        }
        let joined = endpoints.join(",");
        let etcd = |source| CoordError::Etcd {
            endpoints: joined.clone(),
            source,
        };
        let mut client = Client::connect(endpoints, Some(connect_options()))
            .await
            .map_err(etcd)?;
        let lease_id = client.lease_grant(ttl_s, None).await.map_err(etcd)?.id();
        let (mut keeper, mut responses) = client.lease_keep_alive(lease_id).await.map_err(etcd)?;
        let period = Duration::from_millis((ttl_s as u64 * 1000 / 3).max(100));
        let ttl = Duration::from_secs(ttl_s as u64);
        let (alive_tx, alive) = tokio::sync::watch::channel(true);
        let keepalive = tokio::spawn(async move {
            // Every answer is awaited for at most a period: across a
            // partition etcd's answers stop without the stream breaking.
            let mut confirmed = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(period).await;
                if confirmed.elapsed() >= ttl {
                    break;
                }
                match tokio::time::timeout(period, keeper.keep_alive()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => break,
                    Err(_) => continue,
                }
                match tokio::time::timeout(period, responses.message()).await {
                    Ok(Ok(Some(r))) if r.ttl() > 0 => confirmed = tokio::time::Instant::now(),
                    // The lease is gone (expired while unreachable, or revoked),
                    // or the stream broke.
                    Ok(_) => break,
                    Err(_) => continue,
                }
            }
            let _ = alive_tx.send(false);
        });
        Ok(Coordinator {
            client,
            keys,
            endpoints: joined,
            lease_id,
            keepalive,
            alive,
        })
    }

    fn etcd(&self, source: etcd_client::Error) -> CoordError {
        etcd_error(&self.endpoints, source)
    }

    pub fn lease_id(&self) -> i64 {
        self.lease_id
    }

    /// Whether this session's lease is still kept alive.
    pub fn lease_alive(&self) -> bool {
        *self.alive.borrow()
    }

    /// Resolves once the lease has ended (see `alive`): the node's
    /// membership and any leadership went with it.
    pub fn lease_ended(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut alive = self.alive.clone();
        async move {
            let _ = alive.wait_for(|a| !*a).await;
        }
    }

    /// Announces this node under its role, for as long as its lease lives.
    pub async fn register(&mut self, role: Role, info: &NodeInfo) -> Result<(), CoordError> {
        let value = serde_json::to_vec(info).expect("serialisable");
        let key = self.keys.node(role, &info.id);
        self.client
            .put(
                key,
                value,
                Some(PutOptions::new().with_lease(self.lease_id)),
            )
            .await
            .map_err(|e| self.etcd(e))?;
        Ok(())
    }

    /// The live members of a role, in id order.
    pub async fn members(&mut self, role: Role) -> Result<Vec<NodeInfo>, CoordError> {
        self.observer().members(role).await
    }

    /// A read-only view on the cluster's keys over this session's
    /// connection, for a task of its own (it does not hold the lease).
    pub fn observer(&self) -> Observer {
        Observer {
            client: self.client.clone(),
            keys: self.keys.clone(),
            endpoints: self.endpoints.clone(),
        }
    }

    /// Stands for object manager and waits until elected; `value` (the
    /// manager's id or address) is what `leader` answers while it leads.
    pub async fn campaign(&mut self, value: &str) -> Result<Leadership, CoordError> {
        let name = self.keys.manager_election();
        // The wait for leadership may last as long as the leader lives, so
        // it runs on a connection with no request timeout: a campaign that
        // times out is cancelled, and etcd's election then resigns its
        // candidate key, possibly after a retry has taken that key up
        // again, leaving a "leader" whose key is gone (seen: a standby
        // elected with no key, so nobody could find it). The wait ends
        // with the lease instead.
        let joined = self.endpoints.clone();
        let endpoints: Vec<&str> = joined.split(',').collect();
        let mut waiting = Client::connect(
            endpoints,
            Some(ConnectOptions::new().with_connect_timeout(Duration::from_secs(3))),
        )
        .await
        .map_err(|e| self.etcd(e))?;
        loop {
            let ended = self.lease_ended();
            let response = tokio::select! {
                r = waiting.campaign(name.clone(), value, self.lease_id) => r.map_err(|e| self.etcd(e))?,
                () = ended => {
                    return Err(CoordError::Invalid(
                        "this node's etcd lease ended while it waited for leadership".into(),
                    ));
                }
            };
            let key = response
                .leader()
                .cloned()
                .ok_or_else(|| CoordError::Invalid("etcd elected no leader key".into()))?;
            // Elected only if the key still stands: it is the fencing token
            // and what others find the leader by.
            let standing = self
                .client
                .get(key.key().to_vec(), None)
                .await
                .map_err(|e| self.etcd(e))?
                .kvs()
                .first()
                .is_some_and(|kv| kv.create_revision() == key.rev());
            if standing {
                return Ok(Leadership { key });
            }
            tracing::warn!("elected on a candidate key that is gone; standing again");
        }
    }

    /// The current object manager's value, if one leads.
    pub async fn leader(&mut self) -> Result<Option<String>, CoordError> {
        let name = self.keys.manager_election();
        match self.client.leader(name).await {
            Ok(r) => Ok(r
                .kv()
                .map(|kv| String::from_utf8_lossy(kv.value()).into_owned())),
            // etcd answers "election: no leader" as an error.
            Err(etcd_client::Error::GRpcStatus(s)) if s.message().contains("no leader") => Ok(None),
            Err(e) => Err(self.etcd(e)),
        }
    }

    /// Gives up leadership at once (a clean shutdown), so that a standby
    /// need not wait for the lease to end.
    pub async fn resign(&mut self, leadership: Leadership) -> Result<(), CoordError> {
        self.client
            .resign(Some(ResignOptions::new().with_leader(leadership.key)))
            .await
            .map_err(|e| self.etcd(e))?;
        Ok(())
    }

    /// Logs an admission under the client's request id, if this manager
    /// still leads and the request was never admitted.
    pub async fn record_admission(
        &mut self,
        leadership: &Leadership,
        request_id: &str,
        record: &StreamRecord,
    ) -> Result<Recorded, CoordError> {
        validate_request_id(request_id)?;
        let stream_key = self.keys.stream(request_id);
        let leader_key = leadership.key.key().to_vec();
        let txn = Txn::new()
            .when([
                Compare::create_revision(
                    leader_key.clone(),
                    CompareOp::Equal,
                    leadership.revision(),
                ),
                Compare::version(stream_key.clone(), CompareOp::Equal, 0),
            ])
            .and_then([TxnOp::put(
                stream_key.clone(),
                serde_json::to_vec(record).expect("serialisable"),
                None,
            )])
            .or_else([TxnOp::get(stream_key, None)]);
        let response = self.client.txn(txn).await.map_err(|e| self.etcd(e))?;
        if response.succeeded() {
            let revision = response.header().map(|h| h.revision()).unwrap_or(0);
            return Ok(Recorded::Admitted { revision });
        }
        let exists = response.op_responses().iter().any(|op| match op {
            TxnOpResponse::Get(g) => !g.kvs().is_empty(),
            _ => false,
        });
        Ok(if exists {
            Recorded::AlreadyAdmitted
        } else {
            Recorded::NotLeader
        })
    }

    /// Removes a finished or stopped stream from the log, if this manager
    /// still leads; answers whether it was there.
    pub async fn record_release(
        &mut self,
        leadership: &Leadership,
        request_id: &str,
    ) -> Result<bool, CoordError> {
        validate_request_id(request_id)?;
        let txn = Txn::new()
            .when([Compare::create_revision(
                leadership.key.key().to_vec(),
                CompareOp::Equal,
                leadership.revision(),
            )])
            .and_then([TxnOp::delete(self.keys.stream(request_id), None)]);
        let response = self.client.txn(txn).await.map_err(|e| self.etcd(e))?;
        Ok(response.succeeded()
            && response.op_responses().iter().any(|op| match op {
                TxnOpResponse::Delete(d) => d.deleted() > 0,
                _ => false,
            }))
    }

    /// The stream log in the order the streams were admitted (their keys'
    /// creation revisions): what a new manager reserves again.
    pub async fn streams(&mut self) -> Result<Vec<(String, StreamRecord)>, CoordError> {
        let prefix = self.keys.streams();
        self.observer()
            .by_creation(&prefix)
            .await?
            .iter()
            .map(|kv| {
                let record = decode(kv)?;
                let key = String::from_utf8_lossy(kv.key());
                Ok((key[prefix.len()..].to_string(), record))
            })
            .collect()
    }

    /// Ends the session: the lease is revoked, so this node's membership
    /// and leadership go at once.
    pub async fn close(mut self) -> Result<(), CoordError> {
        self.keepalive.abort();
        self.client
            .lease_revoke(self.lease_id)
            .await
            .map_err(|e| self.etcd(e))?;
        Ok(())
    }
}

/// Reads the cluster's membership and election without a lease of its own.
#[derive(Clone)]
pub struct Observer {
    client: Client,
    keys: ClusterKeys,
    endpoints: String,
}

impl Observer {
    /// Connects to etcd to read the cluster `cluster`'s keys, holding no
    /// lease (a client of the cluster, such as an interface node looking for
    /// the manager).
    pub async fn connect(endpoints: &[String], cluster: &str) -> Result<Observer, CoordError> {
        let keys = ClusterKeys::new(cluster).map_err(CoordError::Invalid)?;
        let joined = endpoints.join(",");
        let client = Client::connect(endpoints, Some(connect_options()))
            .await
            .map_err(|source| etcd_error(&joined, source))?;
        Ok(Observer {
            client,
            keys,
            endpoints: joined,
        })
    }

    fn etcd(&self, source: etcd_client::Error) -> CoordError {
        etcd_error(&self.endpoints, source)
    }

    /// The live members of a role, in id order.
    pub async fn members(&mut self, role: Role) -> Result<Vec<NodeInfo>, CoordError> {
        let prefix = self.keys.nodes(role);
        let response = self
            .client
            .get(prefix, Some(GetOptions::new().with_prefix()))
            .await
            .map_err(|e| self.etcd(e))?;
        response.kvs().iter().map(decode).collect()
    }

    /// The managers standing for election, the leader first and then the
    /// standbys in the order they will lead (etcd's election keys by
    /// creation revision): each one's value (its address).
    pub async fn candidates(&mut self) -> Result<Vec<String>, CoordError> {
        let prefix = format!("{}/", self.keys.manager_election());
        Ok(self
            .by_creation(&prefix)
            .await?
            .iter()
            .map(|kv| String::from_utf8_lossy(kv.value()).into_owned())
            .collect())
    }
}

impl Observer {
    /// The keys under `prefix` in the order they were created (their
    /// creation revisions).
    async fn by_creation(
        &mut self,
        prefix: &str,
    ) -> Result<Vec<etcd_client::KeyValue>, CoordError> {
        let options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend);
        let mut response = self
            .client
            .get(prefix, Some(options))
            .await
            .map_err(|e| self.etcd(e))?;
        Ok(response.take_kvs())
    }
}

/// How every node connects to etcd: an unreachable etcd is an error within
/// seconds, not a hang.
fn connect_options() -> ConnectOptions {
    ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(3))
        .with_timeout(Duration::from_secs(5))
}

fn etcd_error(endpoints: &str, source: etcd_client::Error) -> CoordError {
    CoordError::Etcd {
        endpoints: endpoints.to_string(),
        source,
    }
}

/// A key's value as a rondo record, or the key named in the error.
fn decode<T: serde::de::DeserializeOwned>(kv: &etcd_client::KeyValue) -> Result<T, CoordError> {
    serde_json::from_slice(kv.value()).map_err(|source| CoordError::Decode {
        key: String::from_utf8_lossy(kv.key()).into_owned(),
        source,
    })
}

/// A request id is one path segment of printable ASCII.
fn validate_request_id(id: &str) -> Result<(), CoordError> {
    if id.is_empty() || id.len() > 128 || !id.bytes().all(|b| b.is_ascii_graphic() && b != b'/') {
        return Err(CoordError::Invalid(format!(
            "request id {id:?}: 1 to 128 printable characters, no '/'"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_one_segment() {
        assert!(validate_request_id("c0ffee-1").is_ok());
        for bad in ["", "a/b", "a b", &"x".repeat(129)] {
            assert!(validate_request_id(bad).is_err(), "{bad:?}");
        }
    }
}
