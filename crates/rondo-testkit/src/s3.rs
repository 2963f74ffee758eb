//! A real S3 server for tests: s3s-fs (an S3 implementation over a
//! directory) behind s3s's HTTP service, with SigV4 signature checking on.
//!
//! This module owns serving a directory as S3 ([`serve`]: bucket = top-level
//! directory, object = file under it) and [`S3Server`], which runs that
//! server inside the test process on its own thread and tokio runtime, on
//! 127.0.0.1 and a free port, with one bucket made, until it drops. In
//! process rather than as a child, because a test can only find the binaries
//! of its own crate (`CARGO_BIN_EXE_*`): `cargo test -p rondo-tier` never
//! builds rondo-testkit's. The same server as a process for manual runs is
//! the `rondo-test-s3` binary of this crate (`rondo-test-s3 DIR`; it prints
//! `listening: http://ADDR` and runs until killed).

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use hyper_util::rt::TokioIo;
use s3s::auth::SimpleAuth;
use s3s::service::S3ServiceBuilder;
use tokio::net::TcpListener;

/// The credentials and bucket a test server uses unless told otherwise.
pub const TEST_ACCESS_KEY_ID: &str = "rondo-test";
pub const TEST_SECRET_ACCESS_KEY: &str = "rondo-test-secret-key";
pub const TEST_BUCKET: &str = "rondo-test";

/// Serves `root` as S3 on `listener` (requests must be signed with the
/// key pair) until `shutdown` completes; connections still open then end
/// when the runtime that runs them drops.
pub async fn serve(
    listener: TcpListener,
    root: &Path,
    access_key_id: &str,
    secret_access_key: &str,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let fs = s3s_fs::FileSystem::new(root)
        .map_err(|e| std::io::Error::other(format!("serving {} as S3: {e:?}", root.display())))?;
    let mut builder = S3ServiceBuilder::new(fs);
    builder.set_auth(SimpleAuth::from_single(access_key_id, secret_access_key));
    let service = builder.build();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let socket = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, _)) => socket,
                // e.g. too many open files: keep serving the others.
                Err(_) => continue,
            },
            () = shutdown.as_mut() => return Ok(()),
        };
        // As real stores do: without it a response's last small write can
        // wait out the client's delayed ACK (~40 ms on Linux).
        let _ = socket.set_nodelay(true);
        let service = service.clone();
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(socket), service)
                .await;
        });
    }
}

/// An S3 server on 127.0.0.1 over a directory, stopped on drop.
pub struct S3Server {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    pub access_key_id: String,
    pub secret_access_key: String,
    /// Made (as a directory) by [`S3Server::start`].
    pub bucket: String,
    /// The served directory.
    pub root: PathBuf,
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl S3Server {
    /// Serves `root` (made if absent) with [`TEST_ACCESS_KEY_ID`],
    /// [`TEST_SECRET_ACCESS_KEY`] and the bucket [`TEST_BUCKET`]; ready
    /// when this returns (the socket listens already).
    pub fn start(root: &Path) -> S3Server {
        let bucket_dir = root.join(TEST_BUCKET);
        std::fs::create_dir_all(&bucket_dir)
            .unwrap_or_else(|e| panic!("create {}: {e}", bucket_dir.display()));
        let root = root
            .canonicalize()
            .unwrap_or_else(|e| panic!("{}: {e}", root.display()));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener.set_nonblocking(true).expect("non-blocking socket");
        let addr = listener.local_addr().expect("local address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = root.clone();
        let thread = std::thread::Builder::new()
            .name(format!("s3-test-server-{}", addr.port()))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("the S3 server's runtime");
                let result = runtime.block_on(async move {
                    let listener = TcpListener::from_std(listener)?;
                    serve(
                        listener,
                        &served,
                        TEST_ACCESS_KEY_ID,
                        TEST_SECRET_ACCESS_KEY,
                        async move {
                            let _ = stopped.await;
                        },
                    )
                    .await
                });
                if let Err(e) = result {
                    eprintln!("the test S3 server failed: {e}");
                }
                // Dropping the runtime ends the open connections too: the
                // server is down, not just deaf.
            })
            .expect("start the S3 server's thread");
        S3Server {
            endpoint: format!("http://{addr}"),
            access_key_id: TEST_ACCESS_KEY_ID.to_string(),
            secret_access_key: TEST_SECRET_ACCESS_KEY.to_string(),
            bucket: TEST_BUCKET.to_string(),
            root,
            addr,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The file that holds object `key` of the bucket (to corrupt it behind
    /// a client's back).
    pub fn object_file(&self, key: &str) -> PathBuf {
        self.root.join(&self.bucket).join(key)
    }

    /// Stops the server and waits until its port is closed.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
    }
}
