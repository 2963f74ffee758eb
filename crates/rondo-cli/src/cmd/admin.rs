//! `rondo admin`: operator actions on a running server (disk failure,
//! replacement, rebuild, status) through its control API.
//!
//! The server is found through the data directory (`server.json` for the
//! URL, `token` for the bearer token) unless `--url` and `--token` are given.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::builder::TypedValueParser as _;
use clap::{Args, Subcommand};
use rondo_model::units::DiskIndex;
use rondo_server::ingest::handoff::{ServerInfo, TOKEN_FILE};
use rondo_server::titles::DEFAULT_DATA_DIR;
use serde_json::{Value, json};

/// Where the server is and how to talk to it.
#[derive(Args, Debug, Clone)]
pub struct Target {
    /// Data directory of the running server (its server.json and token).
    #[arg(long, default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// The server's base URL (instead of reading server.json).
    #[arg(long)]
    pub url: Option<String>,
    /// The API token (instead of reading the data directory's token file).
    #[arg(long)]
    pub token: Option<String>,
    /// Print the server's JSON answer.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum AdminCommand {
    /// Mark disk K failed: from the next round its reads go to the other
    /// replicas; streams whose data is gone (a second failure) are stopped.
    FailDisk {
        /// Disk number, from 0.
        #[arg(value_parser = clap::value_parser!(u32).map(DiskIndex))]
        disk: DiskIndex,
        #[command(flatten)]
        target: Target,
    },
    /// Map a new device at PATH to failed disk K (it gets a header for this
    /// array and disk; rondo.toml records the path). Then `restore-disk K`.
    ReplaceDisk {
        #[arg(value_parser = clap::value_parser!(u32).map(DiskIndex))]
        disk: DiskIndex,
        /// A new device: an absent or empty file, or a block device without a
        /// rondo header. Relative paths are inside the data directory. On a
        /// cluster, the path is on the host of the storage node that holds
        /// the disk (relative: inside that node's directory), which makes it.
        path: PathBuf,
        #[command(flatten)]
        target: Target,
    },
    /// Rebuild failed disk K from the other replicas in the background, in
    /// disk time admitted streams leave unreserved; it serves again when done.
    RestoreDisk {
        #[arg(value_parser = clap::value_parser!(u32).map(DiskIndex))]
        disk: DiskIndex,
        #[command(flatten)]
        target: Target,
    },
    /// Each disk's state and errors, and the rebuild's progress and time left.
    Status {
        #[command(flatten)]
        target: Target,
    },
}

/// The URL and token of the server owning `target.data_dir`, or the flags'.
fn locate(target: &Target) -> anyhow::Result<(String, Option<String>)> {
    let url = match &target.url {
        Some(url) => url.trim_end_matches('/').to_string(),
        None => {
            let info = ServerInfo::read(&target.data_dir).with_context(|| {
                format!(
                    "finding the server of {} (give --url and --token if it runs elsewhere)",
                    target.data_dir.display()
                )
            })?;
            if !process_exists(info.pid) {
                bail!(
                    "no server is running for {dir}: its server.json names process {pid}, \
                         which has exited without cleaning up (a crash or kill -9). Start it \
                         with `rondo serve --data-dir {dir}`",
                    dir = target.data_dir.display(),
                    pid = info.pid
                );
            }
            info.url
        }
    };
    let token = match &target.token {
        Some(token) => Some(token.clone()),
        None => read_token(&target.data_dir),
    };
    Ok((url, token))
}

/// Whether process `pid` exists (signal 0 checks without sending; EPERM
/// means it exists under another user).
fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill(2) with signal 0 only checks the pid.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

fn read_token(dir: &Path) -> Option<String> {
    std::fs::read_to_string(dir.join(TOKEN_FILE))
        .ok()
        .map(|t| t.trim().to_string())
}

fn client() -> anyhow::Result<reqwest::blocking::Client> {
    Ok(reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?)
}

/// Sends one request and returns the JSON answer, or the server's error.
fn call(
    target: &Target,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<Value> {
    let (url, token) = locate(target)?;
    let mut request = client()?.request(method, format!("{url}{path}"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request
        .send()
        .with_context(|| format!("connecting to the server at {url}"))?;
    let status = response.status();
    let text = response.text().unwrap_or_default();
    let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    if !status.is_success() {
        let message = value["error"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| value.to_string());
        bail!("the server refused ({status}): {message}");
    }
    Ok(value)
}

fn human_bytes(bytes: f64) -> String {
    if bytes >= 1e9 {
        format!("{:.2} GB", bytes / 1e9)
    } else if bytes >= 1e6 {
        format!("{:.1} MB", bytes / 1e6)
    } else {
        format!("{:.0} KB", bytes / 1e3)
    }
}

fn print_status(status: &Value) {
    let mut table = comfy_table::Table::new();
    table.set_header(["disk", "state", "errors", "device"]);
    for d in status["disks"].as_array().into_iter().flatten() {
        table.add_row([
            d["disk"].to_string(),
            d["state"].as_str().unwrap_or("?").to_string(),
            d["errors"].to_string(),
            d["path"].as_str().unwrap_or("").to_string(),
        ]);
    }
    println!("{table}");
    let r = &status["rebuild"];
    if r.is_object() {
        let done = r["done_bytes"].as_f64().unwrap_or(0.0);
        let total = r["total_bytes"].as_f64().unwrap_or(0.0);
        let eta = match r["eta_seconds"].as_f64() {
            Some(s) => format!("about {s:.0} s left"),
            None => "time left not known yet".into(),
        };
        println!(
            "rebuilding disk {}: {} of {} ({:.0}%), {}/s, {eta}",
            r["disk"],
            human_bytes(done),
            human_bytes(total),
            100.0 * r["fraction_done"].as_f64().unwrap_or(0.0),
            human_bytes(r["rate_bytes_per_s"].as_f64().unwrap_or(0.0)),
        );
    }
    let last = &status["last_rebuild"];
    if last.is_object() {
        println!(
            "last rebuild: disk {} {} ({} in {:.1} s, {}/s)",
            last["disk"],
            if last["restored"].as_bool() == Some(true) {
                "restored"
            } else {
                "INCOMPLETE"
            },
            human_bytes(last["bytes"].as_f64().unwrap_or(0.0)),
            last["seconds"].as_f64().unwrap_or(0.0),
            human_bytes(last["rate_bytes_per_s"].as_f64().unwrap_or(0.0)),
        );
    }
}

pub fn run(command: AdminCommand) -> anyhow::Result<()> {
    let post = reqwest::Method::POST;
    let (target, answer) = match &command {
        AdminCommand::FailDisk { disk, target } => (
            target,
            call(target, post, &format!("/api/admin/disks/{disk}/fail"), None)?,
        ),
        AdminCommand::ReplaceDisk { disk, path, target } => (
            target,
            call(
                target,
                post,
                &format!("/api/admin/disks/{disk}/replace"),
                Some(json!({ "path": path })),
            )?,
        ),
        AdminCommand::RestoreDisk { disk, target } => (
            target,
            call(
                target,
                post,
                &format!("/api/admin/disks/{disk}/restore"),
                None,
            )?,
        ),
        AdminCommand::Status { target } => (
            target,
            call(target, reqwest::Method::GET, "/api/admin/disks", None)?,
        ),
    };
    if target.json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
        return Ok(());
    }
    match &command {
        AdminCommand::FailDisk { disk, .. } => {
            let stopped = answer["streams_stopped"].as_array().map_or(0, Vec::len);
            println!(
                "disk {disk} failed: its reads go to the other replicas; {stopped} stream(s) \
                 stopped (their data had no other working replica)"
            );
        }
        AdminCommand::ReplaceDisk { disk, .. } => println!(
            "disk {disk} now maps to {}; rebuild it with: rondo admin restore-disk {disk}",
            answer["path"].as_str().unwrap_or("?")
        ),
        AdminCommand::RestoreDisk { disk, .. } => println!(
            "rebuilding disk {disk}: {} copies, {}; follow with: rondo admin status",
            answer["copies"],
            human_bytes(answer["total_bytes"].as_f64().unwrap_or(0.0))
        ),
        AdminCommand::Status { .. } => print_status(&answer),
    }
    // Replacing outside the data directory, or rebuilding with data that
    // has no good replica: said on stderr, apart from the result.
    if let Some(warning) = answer["warning"].as_str() {
        eprintln!("warning: {warning}");
    }
    Ok(())
}
