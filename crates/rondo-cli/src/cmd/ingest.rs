//! `rondo ingest`: store media files as titles, each atomically.
//!
//! With no process owning the data directory, the store is opened (or
//! created with `rondo serve`'s defaults) and each file ingested here. When
//! a server owns it (the directory lock is held), each file is uploaded to
//! that server, which ingests it with writes paced around its streams
//! (`rondo_server::ingest::handoff` describes the exchange). Prints one line
//! per file, or with `--json` an array of results; exits non-zero when any
//! file was not stored.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rondo_server::ingest::handoff::{ServerInfo, read_token};
use rondo_server::ingest::{Unthrottled, ingest_file};
use rondo_server::titles::{DEFAULT_DATA_DIR, default_store_config, open_or_create, title_json};
use rondo_store::{Store, StoreError};
use serde_json::{Value, json};

#[derive(Args, Debug)]
pub struct IngestArgs {
    /// Media files to store (MP4, including moov-at-end and fragmented, or
    /// MPEG-TS with H.264/H.265/MPEG-2 video).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// The data directory; created with `rondo serve`'s defaults (4 disks,
    /// cheetah-4lp, minimum reservation, deterministic placement) when absent.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// Title name (one file only); default: the file name without extension.
    #[arg(long)]
    pub name: Option<String>,
    /// Store the files on this tier (named in the data directory's
    /// tiers.toml, see `rondo tier add`) instead of the disk array: each is
    /// staged onto the array when a client first asks for it, and evicted
    /// again by popularity when the array needs room.
    #[arg(long, value_name = "TIER")]
    pub tier: Option<String>,
    /// Print a JSON array of results (no progress bar).
    #[arg(long)]
    pub json: bool,
    /// The layout of a data directory created here (as `rondo serve
    /// --layout`); for an existing one it must match.
    #[command(flatten)]
    pub layout: crate::cmd::layout_args::LayoutArgs,
}

/// What happened to one file.
struct Outcome {
    file: PathBuf,
    result: Result<Value, String>,
}

pub fn run(args: IngestArgs) -> anyhow::Result<()> {
    if args.name.is_some() && args.files.len() > 1 {
        bail!(
            "--name names one title, but {} files were given; ingest them one at a time to name \
             each",
            args.files.len()
        );
    }
    let segment_rounds = args.layout.segment_rounds()?;
    let mut create = default_store_config();
    if let Some(n) = segment_rounds {
        create.segment_rounds = n;
    }
    if let Some(g) = args.layout.disk_groups {
        create.disk_groups = g;
    }
    if let Some(w) = args.layout.stripe_disks {
        create.stripe_disks = w;
    }
    let outcomes = match open_or_create(&args.data_dir, create) {
        Ok((store, created)) => {
            if !created {
                store
                    .config()
                    .check_flags(&rondo_store::DirectoryFlags {
                        segment_rounds,
                        disk_groups: args.layout.disk_groups,
                        stripe_disks: args.layout.stripe_disks,
                        ..rondo_store::DirectoryFlags::default()
                    })
                    .map_err(|e| anyhow::anyhow!("{}: {e}", args.data_dir.display()))?;
            }
            if created && !args.json {
                let config = store.config();
                eprintln!(
                    "created data directory {} ({} disks, {}, {} reservation, {} placement, {} \
                     layout)",
                    args.data_dir.display(),
                    config.disk_count,
                    config.disk_profile,
                    config.scheme,
                    serde_json::to_value(config.placement)?
                        .as_str()
                        .unwrap_or_default(),
                    crate::cmd::layout_args::layout_name(config.segment_rounds)
                );
            }
            for name in store.recovered_titles() {
                eprintln!(
                    "removed unfinished title {name:?} left by an interrupted ingest; its space \
                     is free again"
                );
            }
            ingest_locally(&store, &args)?
        }
        Err(StoreError::Locked { .. }) => upload_to_server(&args)?,
        Err(e) => {
            return Err(e).with_context(|| {
                format!("cannot open data directory {}", args.data_dir.display())
            });
        }
    };
    report(&outcomes, args.json)
}

fn now_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn progress_bar(file: &Path, total_bytes: u64, hidden: bool) -> ProgressBar {
    if hidden {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total_bytes), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{msg:24!} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
        )
        .expect("a valid template")
        .progress_chars("=> "),
    );
    bar.set_message(
        file.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    );
    bar
}

fn ingest_locally(store: &Store, args: &IngestArgs) -> anyhow::Result<Vec<Outcome>> {
    if let Some(tier_name) = &args.tier {
        return ingest_to_tier_locally(store, tier_name, args);
    }
    Ok(args
        .files
        .iter()
        .map(|file| {
            let bar = progress_bar(file, 0, args.json);
            let progress = |done_bytes: u64, total_bytes: u64| {
                bar.set_length(total_bytes);
                bar.set_position(done_bytes);
            };
            let result = ingest_file(
                store,
                file,
                args.name.as_deref(),
                now_unix_ns(),
                &Unthrottled,
                &progress,
            );
            bar.finish_and_clear();
            Outcome {
                file: file.clone(),
                result: result.map(|r| title_json(&r)).map_err(|e| e.to_string()),
            }
        })
        .collect())
}

/// `--tier`: each file becomes a tier object and a catalog record; nothing
/// is written to the array.
fn ingest_to_tier_locally(
    store: &Store,
    tier_name: &str,
    args: &IngestArgs,
) -> anyhow::Result<Vec<Outcome>> {
    let tiers = rondo_tier::TiersFile::read(store.dir())?;
    let Some(config) = tiers.get(tier_name) else {
        bail!(
            "{}: no tier named {tier_name:?} (tiers: {})",
            store.dir().join(rondo_tier::TIERS_FILE).display(),
            tiers.names()
        );
    };
    let tier = rondo_tier::open(config, store.dir())?;
    Ok(args
        .files
        .iter()
        .map(|file| {
            let source_file_name = file
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| file.display().to_string());
            let result = rondo_server::ingest::ingest_to_tier(
                store,
                tier.as_ref(),
                tier_name,
                file,
                &source_file_name,
                args.name.as_deref(),
                now_unix_ns(),
            );
            Outcome {
                file: file.clone(),
                result: result
                    .map(|r| tier_title_json(&r))
                    .map_err(|e| e.to_string()),
            }
        })
        .collect())
}

/// A tier title as `rondo ingest --tier` and `rondo tier list` print it.
pub fn tier_title_json(record: &rondo_store::TierTitleRecord) -> Value {
    let mut value = serde_json::to_value(record).unwrap_or_default();
    value["rounds"] = json!(record.client_bytes.len());
    value["size_bytes"] = json!(record.stored_bytes);
    value["container_kind"] = json!(record.content_type);
    value
}

/// Counts the bytes read from a file into the progress bar.
struct ProgressReader {
    file: File,
    bar: ProgressBar,
}

impl Read for ProgressReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read(buf)?;
        self.bar.inc(n as u64);
        Ok(n)
    }
}

fn upload_to_server(args: &IngestArgs) -> anyhow::Result<Vec<Outcome>> {
    let dir = &args.data_dir;
    let server = ServerInfo::read(dir)?;
    let client = reqwest::blocking::Client::builder()
        // The server answers once the title is stored, however long it takes.
        .timeout(None)
        .build()
        .context("building the HTTP client")?;
    verify_server(&client, &server, dir)?;
    let token = read_token(dir)?;
    if !args.json {
        eprintln!(
            "data directory {} is owned by the server at {} (pid {}); uploading to it",
            dir.display(),
            server.url,
            server.pid
        );
    }
    Ok(args
        .files
        .iter()
        .map(|file| Outcome {
            file: file.clone(),
            result: upload_one(&client, &server, &token, file, args),
        })
        .collect())
}

/// Asks the listener `server.json` names who it is, without credentials;
/// the token is read and sent only if it is this directory's server.
fn verify_server(
    client: &reqwest::blocking::Client,
    server: &ServerInfo,
    dir: &Path,
) -> anyhow::Result<()> {
    let array_id = rondo_store::ArrayConfig::load(dir)
        .with_context(|| format!("reading {}'s rondo.toml", dir.display()))?
        .array_id
        .to_string();
    let answer = client
        .get(server.server_id_url())
        .timeout(std::time::Duration::from_secs(10))
        .send()
        .and_then(|r| r.error_for_status())
        .and_then(|r| r.text())
        .map_err(|e| format!("asking it who it is failed: {e}"));
    server.verify(dir, &array_id, answer)?;
    Ok(())
}

fn upload_one(
    client: &reqwest::blocking::Client,
    server: &ServerInfo,
    token: &str,
    file: &Path,
    args: &IngestArgs,
) -> Result<Value, String> {
    let shown = file.display();
    let name = match &args.name {
        Some(name) => name.clone(),
        None => file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    let source_file_name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let opened = File::open(file).map_err(|e| format!("{shown}: cannot read it: {e}"))?;
    let len_bytes = opened
        .metadata()
        .map_err(|e| format!("{shown}: cannot read it: {e}"))?
        .len();
    let bar = progress_bar(file, len_bytes, args.json);
    let body = reqwest::blocking::Body::sized(
        ProgressReader {
            file: opened,
            bar: bar.clone(),
        },
        len_bytes,
    );
    let url = server.upload_url();
    let response = client
        .post(&url)
        .query(&[("name", name.as_str()), ("file", source_file_name.as_str())])
        .query(
            &args
                .tier
                .iter()
                .map(|t| ("tier", t.as_str()))
                .collect::<Vec<_>>(),
        )
        .bearer_auth(token)
        .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
        .body(body)
        .send();
    bar.finish_and_clear();
    let response = response.map_err(|e| format!("{shown}: uploading to {url} failed: {e}"))?;
    let status = response.status();
    let text = response
        .text()
        .map_err(|e| format!("{shown}: reading the server's answer failed: {e}"))?;
    let parsed: Option<Value> = serde_json::from_str(&text).ok();
    if status.is_success() {
        parsed.ok_or_else(|| format!("{shown}: the server answered {status} with no title JSON"))
    } else {
        let message = parsed
            .as_ref()
            .and_then(|v| v.get("error"))
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| text.trim().to_string());
        Err(format!(
            "{shown}: the server refused it ({status}): {message}"
        ))
    }
}

fn seconds(ns: Option<u64>) -> String {
    ns.map(|ns| format!("{:.1} s", ns as f64 / 1e9))
        .unwrap_or_else(|| "? s".into())
}

fn report(outcomes: &[Outcome], as_json: bool) -> anyhow::Result<()> {
    let failed = outcomes.iter().filter(|o| o.result.is_err()).count();
    if as_json {
        let results: Vec<Value> = outcomes
            .iter()
            .map(|o| match &o.result {
                Ok(title) => json!({"file": o.file, "ok": true, "title": title}),
                Err(error) => json!({"file": o.file, "ok": false, "error": error}),
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        for outcome in outcomes {
            match &outcome.result {
                Ok(title) if title.get("tier").is_some() => println!(
                    "stored {} as {} on tier {} ({} bytes; staged onto the array when first \
                     asked for): {}, {} rounds",
                    outcome.file.display(),
                    title["name"],
                    title["tier"],
                    title["object_bytes"],
                    seconds(title["duration_ns"].as_u64()),
                    title["rounds"],
                ),
                Ok(title) => println!(
                    "stored {} as {} (title {}): {}, {} rounds, {} bytes, {}",
                    outcome.file.display(),
                    title["name"],
                    title["id"],
                    seconds(title["duration_ns"].as_u64()),
                    title["rounds"],
                    title["size_bytes"],
                    title["container_kind"].as_str().unwrap_or("?"),
                ),
                Err(error) => eprintln!("not stored: {error}"),
            }
        }
    }
    let total = outcomes.len();
    match failed {
        0 => Ok(()),
        _ if total == 1 => bail!("the file was not stored"),
        _ if failed == total => bail!("none of the {total} files was stored"),
        _ if total - failed == 1 => {
            bail!("{failed} of {total} files were not stored; the other one was")
        }
        _ => bail!(
            "{failed} of {total} files were not stored; the other {} were",
            total - failed
        ),
    }
}
