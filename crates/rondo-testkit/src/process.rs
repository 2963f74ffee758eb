//! The built `rondo` binary as a child process.
//!
//! This module owns starting `rondo serve` from a test and waiting for it to
//! be ready: [`Serve`] builds the command (`rondo serve`, extra flags, a
//! working directory, where its stderr goes, how long to wait), starts it
//! with `RONDO_LOG=warn` and its stdout read line by line on a thread until
//! it prints `player: URL`, and hands back a [`RondoServe`] that kills and
//! reaps the server when it drops, panics included. The thread keeps reading
//! stdout afterwards, so the server never blocks on a full pipe. The binary's
//! path is an argument because only the binary's own crate's integration
//! tests know it (`env!("CARGO_BIN_EXE_rondo")`). It also owns reading a
//! subcommand's `--json` output ([`stdout_json`], [`success_json`]) and the
//! text to show when a subcommand fails ([`output_text`]).

use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

/// How to start `rondo serve`; [`Serve::start`] starts it.
pub struct Serve {
    command: Command,
    stderr_file: Option<PathBuf>,
    timeout: Duration,
}

impl Serve {
    /// `rondo serve` with no flags, its stderr discarded, waiting up to 60 s
    /// for its URL.
    pub fn new(rondo: impl AsRef<OsStr>) -> Serve {
        Serve::from_program(Command::new(rondo))
    }

    /// `rondo serve` run inside the network namespace `netns` (`ip netns
    /// exec`, which execs it: the child is the server).
    pub fn in_netns(netns: &str, rondo: impl AsRef<OsStr>) -> Serve {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", netns]).arg(rondo);
        Serve::from_program(command)
    }

    /// `serve` after `program` (the binary, perhaps behind a wrapper).
    fn from_program(mut command: Command) -> Serve {
        command
            .arg("serve")
            .env("RONDO_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        Serve {
            command,
            stderr_file: None,
            timeout: Duration::from_secs(60),
        }
    }

    /// `rondo serve --data-dir DATA --listen 127.0.0.1:0` (a free port).
    pub fn on(rondo: impl AsRef<OsStr>, data: &Path) -> Serve {
        Serve::new(rondo)
            .arg("--data-dir")
            .arg(data)
            .args(["--listen", "127.0.0.1:0"])
    }

    /// Appends one flag or value.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Serve {
        self.command.arg(arg);
        self
    }

    /// Appends flags and values.
    pub fn args<I, S>(mut self, args: I) -> Serve
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command.args(args);
        self
    }

    /// Runs the server in `dir` (where a relative `./rondo-data` lands).
    pub fn current_dir(mut self, dir: &Path) -> Serve {
        self.command.current_dir(dir);
        self
    }

    /// Writes the server's stderr to `path` (read back with
    /// [`RondoServe::log`]).
    pub fn stderr_to(mut self, path: PathBuf) -> Serve {
        let file = File::create(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        self.command.stderr(file);
        self.stderr_file = Some(path);
        self
    }

    /// Lets the server's stderr through to the test's.
    pub fn stderr_inherit(mut self) -> Serve {
        self.command.stderr(Stdio::inherit());
        self
    }

    /// How long to wait for the URL.
    pub fn timeout(mut self, timeout: Duration) -> Serve {
        self.timeout = timeout;
        self
    }

    /// Starts the server and waits until it prints `player: URL`; panics,
    /// with what it printed, when it does not within the timeout.
    pub fn start(mut self) -> RondoServe {
        let mut child = self.command.spawn().expect("rondo serve starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            // Read to the end even when no one listens any more.
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        // From here on, a panic drops the guard, which kills the server.
        let mut server = RondoServe {
            child,
            url: String::new(),
            printed: Vec::new(),
            stderr_file: self.stderr_file,
        };
        let deadline = std::time::Instant::now() + self.timeout;
        server.url = loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = lines.recv_timeout(left).unwrap_or_else(|_| {
                panic!(
                    "rondo serve printed no player URL within {:?}: {:?}",
                    self.timeout, server.printed
                )
            });
            server.printed.push(line.clone());
            if let Some(url) = line.trim().strip_prefix("player: ") {
                break url.trim_end_matches('/').to_string();
            }
        };
        // The rest of the start-up lines (token, dashboard, hints), printed
        // at once after the URL, up to `Press Ctrl-C to stop.`.
        while !server
            .printed
            .last()
            .is_some_and(|l| l.starts_with("Press Ctrl-C"))
        {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match lines.recv_timeout(left.max(Duration::from_secs(5))) {
                Ok(line) => server.printed.push(line),
                Err(_) => break,
            }
        }
        server
    }
}

/// A running `rondo serve`, killed (SIGKILL) and reaped on drop.
pub struct RondoServe {
    pub child: Child,
    /// The player's URL without a trailing slash (`http://127.0.0.1:PORT`).
    pub url: String,
    /// What it printed on stdout at start-up, up to `Press Ctrl-C to stop.`.
    pub printed: Vec<String>,
    stderr_file: Option<PathBuf>,
}

impl RondoServe {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the server wrote to stderr so far (with [`Serve::stderr_to`];
    /// empty otherwise).
    pub fn log(&self) -> String {
        self.stderr_file
            .as_ref()
            .and_then(|path| std::fs::read_to_string(path).ok())
            .unwrap_or_default()
    }

    /// Sends SIGTERM (a clean stop) and waits for the server to exit.
    pub fn terminate(&mut self) -> ExitStatus {
        // SAFETY: kill(2) on our own child's pid, not yet reaped.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(rc, 0, "SIGTERM to rondo serve");
        self.child.wait().expect("wait for rondo serve")
    }
}

impl Drop for RondoServe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running `rondo node storage`, killed (SIGKILL) and reaped on drop.
pub struct StorageNode {
    pub child: Child,
    /// Its gRPC address (`127.0.0.1:PORT`), for `--storage-node`.
    pub address: String,
}

impl StorageNode {
    /// Starts `rondo node storage --data-dir DATA --disks LIST --listen
    /// 127.0.0.1:0 --json` and waits (up to 30 s) for the line that names
    /// its address.
    pub fn start(rondo: impl AsRef<OsStr>, data: &Path, disks: &[u32]) -> StorageNode {
        let mut command = Command::new(rondo);
        command.args(["node", "storage"]);
        StorageNode::spawn(command, data, disks, &["--listen", "127.0.0.1:0"])
    }

    /// Starts `rondo node storage --data-dir DATA --disks LIST --json
    /// EXTRA...` from `command` (the binary and `node storage`, perhaps
    /// behind `ip netns exec`), and waits (up to 30 s) for the line that
    /// names its advertised address.
    pub fn spawn(mut command: Command, data: &Path, disks: &[u32], extra: &[&str]) -> StorageNode {
        let list: Vec<String> = disks.iter().map(u32::to_string).collect();
        let mut child = command
            .arg("--data-dir")
            .arg(data)
            .args(["--disks", &list.join(","), "--json"])
            .args(extra)
            .env("RONDO_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("rondo node storage starts");
        let json = first_json_line(&mut child, "rondo node storage");
        let address = json["advertised"]
            .as_str()
            .or(json["address"].as_str())
            .expect("an address")
            .to_string();
        StorageNode { child, address }
    }

    /// SIGSTOP, as when its host hangs or its network drops without a
    /// reset: its connections stay open and nothing answers on them. A
    /// later `kill` (or the drop) ends it.
    pub fn freeze(&self) {
        // SAFETY: sends a signal to our own child's pid; no memory is
        // touched.
        let sent = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGSTOP) };
        assert_eq!(sent, 0, "SIGSTOP to the storage node");
    }

    /// SIGKILL, as when its host dies.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for StorageNode {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The first line a node process prints, as JSON (its `--json` start-up
/// line), waiting up to 30 s.
fn first_json_line(child: &mut Child, what: &str) -> Value {
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, lines) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let line = lines
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("{what} printed nothing"));
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{what} printed {line:?}: {e}"))
}

/// A running `rondo node interface`, killed (SIGKILL) and reaped on drop.
pub struct InterfaceNode {
    pub child: Child,
    /// Where clients reach it (`http://127.0.0.1:PORT`).
    pub url: String,
}

impl InterfaceNode {
    /// Starts `rondo node interface --listen 127.0.0.1:0 --json EXTRA...`
    /// and waits (up to 30 s) for the line that names its URL.
    pub fn start(rondo: impl AsRef<OsStr>, extra: &[&str]) -> InterfaceNode {
        let mut child = Command::new(rondo)
            .args(["node", "interface", "--listen", "127.0.0.1:0", "--json"])
            .args(extra)
            .env("RONDO_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("rondo node interface starts");
        let json = first_json_line(&mut child, "rondo node interface");
        let url = json["url"].as_str().expect("a URL").to_string();
        InterfaceNode { child, url }
    }

    /// SIGSTOP, as when its host hangs or its network drops without a
    /// reset: its connections stay open and nothing answers on them. A
    /// later `kill` (or the drop) ends it.
    pub fn freeze(&self) {
        // SAFETY: sends a signal to our own child's pid; no memory is
        // touched.
        let sent = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGSTOP) };
        assert_eq!(sent, 0, "SIGSTOP to the storage node");
    }

    /// SIGKILL, as when its host dies.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for InterfaceNode {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A subcommand's stdout and stderr, for failure messages.
pub fn output_text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A subcommand's stdout as JSON (whatever its exit status); panics with
/// what it printed when that is not JSON.
pub fn stdout_json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// A subcommand that must succeed, and its stdout as JSON.
pub fn success_json(output: &Output) -> Value {
    assert!(output.status.success(), "{}", output_text(output));
    stdout_json(output)
}
