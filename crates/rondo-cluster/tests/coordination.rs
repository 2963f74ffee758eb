//! The cluster's coordination against a real etcd (Debian's etcd-server,
//! started by the test in a directory of its own): the object manager's
//! election and takeover, the fenced stream log, membership by lease.

mod common;

use std::time::{Duration, Instant};

use common::record;
use rondo_cluster::coord::NodeInfo;
use rondo_cluster::etcd::LocalEtcd;
use rondo_cluster::{Coordinator, Recorded, Role};

const TTL_S: i64 = 2;

fn etcd() -> (tempfile::TempDir, LocalEtcd) {
    let dir = tempfile::tempdir().unwrap();
    let etcd = LocalEtcd::start(dir.path(), "127.0.0.1").unwrap_or_else(|e| panic!("{e}"));
    (dir, etcd)
}

async fn session(etcd: &LocalEtcd, cluster: &str) -> Coordinator {
    Coordinator::connect(&[etcd.client_url().to_string()], cluster, TTL_S)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_manager_takes_over_when_the_leader_dies() {
    let (_dir, etcd) = etcd();
    let mut a = session(&etcd, "t1").await;
    let mut b = session(&etcd, "t1").await;
    let _lead = a.campaign("manager-a").await.unwrap();
    assert_eq!(a.leader().await.unwrap().as_deref(), Some("manager-a"));
    let standby = tokio::spawn(async move {
        let l = b.campaign("manager-b").await.unwrap();
        (b, l, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !standby.is_finished(),
        "the standby waits while the leader lives"
    );
    // The leader dies without resigning: its lease ends within the TTL.
    let died = Instant::now();
    drop(a);
    let (mut b, _l, elected) = tokio::time::timeout(Duration::from_secs(10), standby)
        .await
        .expect("the standby is elected within the lease's TTL and a margin")
        .unwrap();
    let takeover = elected - died;
    eprintln!("standby elected {takeover:?} after the leader died (lease TTL {TTL_S} s)");
    assert!(
        takeover <= Duration::from_secs(TTL_S as u64 + 2),
        "took over in {takeover:?}"
    );
    assert_eq!(b.leader().await.unwrap().as_deref(), Some("manager-b"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_manager_cannot_admit_and_no_request_is_admitted_twice() {
    let (_dir, etcd) = etcd();
    let mut a = session(&etcd, "t2").await;
    let mut admin = session(&etcd, "t2").await;
    let lead_a = a.campaign("a").await.unwrap();
    assert!(matches!(
        a.record_admission(&lead_a, "req-1", &record(1))
            .await
            .unwrap(),
        Recorded::Admitted { .. }
    ));
    // A retry of the same request is not a second stream.
    assert_eq!(
        a.record_admission(&lead_a, "req-1", &record(1))
            .await
            .unwrap(),
        Recorded::AlreadyAdmitted
    );
    // A loses etcd past its lease (here: the lease ends as it would).
    let a_lease = a.lease_id();
    let mut revoker = etcd_client::Client::connect([etcd.client_url()], None)
        .await
        .unwrap();
    revoker.lease_revoke(a_lease).await.unwrap();
    assert_eq!(
        a.record_admission(&lead_a, "req-2", &record(2))
            .await
            .unwrap(),
        Recorded::NotLeader,
        "a deposed manager writes nothing"
    );
    assert!(!a.record_release(&lead_a, "req-1").await.unwrap());
    // The next manager finds req-1 admitted and cannot admit it again.
    let mut b = session(&etcd, "t2").await;
    let lead_b = tokio::time::timeout(Duration::from_secs(5), b.campaign("b"))
        .await
        .unwrap()
        .unwrap();
    assert!(lead_b.revision() > lead_a.revision());
    assert_eq!(
        b.record_admission(&lead_b, "req-1", &record(1))
            .await
            .unwrap(),
        Recorded::AlreadyAdmitted
    );
    assert!(matches!(
        b.record_admission(&lead_b, "req-2", &record(2))
            .await
            .unwrap(),
        Recorded::Admitted { .. }
    ));
    // The log in admission order, as the new manager replays it.
    let log = admin.streams().await.unwrap();
    assert_eq!(
        log.iter()
            .map(|(id, r)| (id.as_str(), r.title))
            .collect::<Vec<_>>(),
        [("req-1", 1), ("req-2", 2)]
    );
    assert!(b.record_release(&lead_b, "req-1").await.unwrap());
    assert!(!b.record_release(&lead_b, "req-1").await.unwrap());
    assert_eq!(admin.streams().await.unwrap().len(), 1);
    // A bad request id is refused with its reason.
    let err = b
        .record_admission(&lead_b, "a/b", &record(3))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("request id"), "{err}");
    // Another cluster in the same etcd sees none of it.
    let mut other = session(&etcd, "t2-other").await;
    assert!(other.streams().await.unwrap().is_empty());
    assert_eq!(other.leader().await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_follows_each_nodes_lease() {
    let (_dir, etcd) = etcd();
    let mut s1 = session(&etcd, "t3").await;
    let mut s2 = session(&etcd, "t3").await;
    let mut observer = session(&etcd, "t3").await;
    let info = |id: &str| NodeInfo {
        id: id.into(),
        role: "storage".into(),
        address: format!("10.0.0.{}:7000", id.len()),
        disks: vec![],
    };
    s1.register(Role::Storage, &info("s1")).await.unwrap();
    s2.register(Role::Storage, &info("s2")).await.unwrap();
    let ids = |m: Vec<NodeInfo>| m.into_iter().map(|n| n.id).collect::<Vec<_>>();
    assert_eq!(
        ids(observer.members(Role::Storage).await.unwrap()),
        ["s1", "s2"]
    );
    assert!(observer.members(Role::Interface).await.unwrap().is_empty());
    // A clean stop leaves at once; a crash leaves when the lease ends.
    s1.close().await.unwrap();
    assert_eq!(ids(observer.members(Role::Storage).await.unwrap()), ["s2"]);
    drop(s2);
    let start = Instant::now();
    while !observer.members(Role::Storage).await.unwrap().is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(TTL_S as u64 + 5),
            "a dead node's key outlived its lease"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_etcd_is_a_clear_error() {
    let (_dir, mut etcd) = etcd();
    let url = etcd.client_url().to_string();
    etcd.kill();
    let err = match Coordinator::connect(std::slice::from_ref(&url), "t4", TTL_S).await {
        Ok(_) => panic!("connected to a dead etcd"),
        Err(e) => e,
    };
    assert!(err.to_string().contains(&url), "{err}");
}
