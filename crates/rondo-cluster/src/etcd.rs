//! A local etcd server for a cluster on one machine: the one-command local
//! cluster and the tests start it in a directory of their own, on loopback
//! ports chosen free, and stop it when dropped (Debian's `etcd-server`).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running etcd, killed on drop.
pub struct LocalEtcd {
    child: Child,
    client_url: String,
    data_dir: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    #[error(
        "`etcd` is not installed ({0}): install Debian's etcd-server \
         (`apt-get install -y etcd-server`; CI's .ci/run does)"
    )]
    Missing(std::io::Error),
    #[error("etcd in {dir} did not answer on {url} within {secs} s; its log: {log}")]
    NoAnswer {
        dir: String,
        url: String,
        secs: u64,
        log: String,
    },
    #[error(
        "etcd in {dir} exited after it started, {attempts} times (its ports taken?); its log: {log}"
    )]
    Exited {
        dir: String,
        attempts: u32,
        log: String,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Two distinct free ports on `host`: both held until both are chosen.
fn free_ports(host: &str) -> std::io::Result<(u16, u16)> {
    let a = TcpListener::bind((host, 0))?;
    let b = TcpListener::bind((host, 0))?;
    Ok((a.local_addr()?.port(), b.local_addr()?.port()))
}

impl LocalEtcd {
    /// Starts etcd with its data in `data_dir` (created), listening on
    /// `host` (an address of this machine, e.g. 127.0.0.1 or a namespace's
    /// veth address) on free ports, and waits until it answers.
    pub fn start(data_dir: &Path, host: &str) -> Result<LocalEtcd, EtcdError> {
        // Ports found free may be taken again before etcd binds them (by
        // another test's etcd, which would then answer for this one): an
        // etcd that did not outlive its first answer is started again on
        // other ports.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (client_port, peer_port) = free_ports(host)?;
            let mut etcd = LocalEtcd::spawn(
                data_dir,
                host,
                (client_port, peer_port),
                Command::new("etcd"),
            )?;
            std::thread::sleep(Duration::from_millis(300));
            if etcd.child.try_wait()?.is_none() {
                return Ok(etcd);
            }
            if attempt == 5 {
                return Err(EtcdError::Exited {
                    dir: etcd.data_dir.display().to_string(),
                    attempts: attempt,
                    log: std::fs::read_to_string(etcd.data_dir.join("etcd.log"))
                        .unwrap_or_default(),
                });
            }
            etcd.kill();
            let _ = std::fs::remove_dir_all(data_dir);
        }
    }

    /// Starts etcd inside the network namespace `netns` (`ip netns exec`),
    /// listening on `host`, that namespace's address, on etcd's own ports
    /// (2379 for clients, 2380 for peers: the namespace holds nothing else),
    /// and waits until it answers there.
    pub fn start_in_netns(
        data_dir: &Path,
        netns: &str,
        host: &str,
    ) -> Result<LocalEtcd, EtcdError> {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", netns, "etcd"]);
        LocalEtcd::spawn(data_dir, host, (2379, 2380), command)
    }

    fn spawn(
        data_dir: &Path,
        host: &str,
        (client_port, peer_port): (u16, u16),
        mut command: Command,
    ) -> Result<LocalEtcd, EtcdError> {
        std::fs::create_dir_all(data_dir)?;
        let client_url = format!("http://{host}:{client_port}");
        let peer_url = format!("http://{host}:{peer_port}");
        let log = std::fs::File::create(data_dir.join("etcd.log"))?;
        let child = command
            .args(["--name", "rondo"])
            .arg("--data-dir")
            .arg(data_dir.join("data"))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("rondo={peer_url}")])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(EtcdError::Missing)?;
        let mut etcd = LocalEtcd {
            child,
            client_url,
            data_dir: data_dir.to_path_buf(),
        };
        let address: SocketAddr = format!("{host}:{client_port}")
            .parse()
            .map_err(|e| std::io::Error::other(format!("{host}: {e}")))?;
        let timeout = Duration::from_secs(20);
        let start = Instant::now();
        // An open port is not yet a server: etcd accepts connections before
        // it has elected itself and serves requests (a client then gets its
        // connection reset), so wait for its health endpoint to say so.
        while !answers_healthy(&address) {
            if start.elapsed() > timeout || etcd.child.try_wait()?.is_some() {
                return Err(EtcdError::NoAnswer {
                    dir: etcd.data_dir.display().to_string(),
                    url: etcd.client_url.clone(),
                    secs: timeout.as_secs(),
                    log: std::fs::read_to_string(etcd.data_dir.join("etcd.log"))
                        .unwrap_or_default(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(etcd)
    }

    /// The URL clients connect to.
    pub fn client_url(&self) -> &str {
        &self.client_url
    }

    /// Stops etcd at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the etcd at `address` answers `GET /health` with
/// `"health":"true"` (it has a leader and serves requests).
fn answers_healthy(address: &SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = TcpStream::connect_timeout(address, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let request = format!("GET /health HTTP/1.0\r\nHost: {address}\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.contains("\"health\":\"true\"")
}

impl Drop for LocalEtcd {
    fn drop(&mut self) {
        self.kill();
    }
}
