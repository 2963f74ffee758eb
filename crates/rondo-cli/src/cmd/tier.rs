//! `rondo tier`: the tiers a data directory's titles may live on (seed
//! 002): add one (an emulated optical jukebox farm, or a bucket of an
//! S3-compatible store), list them with their titles, pin a title on the
//! array. `rondo ingest --tier NAME` stores
//! titles there; a running server stages them onto the array when asked.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{ArgGroup, Args, Subcommand};
use comfy_table::Table;
use rondo_server::titles::{DEFAULT_DATA_DIR, default_store_config, open_or_create};
use rondo_store::{Store, StoreError};
use rondo_tier::jukebox::{EmulatedJukebox, FarmConfig};
use rondo_tier::s3::S3Tier;
use rondo_tier::{JukeboxTierConfig, S3TierConfig, TierConfig, TierKind, TiersFile};
use serde_json::{Value, json};

#[derive(Args, Debug, Clone)]
pub struct DirArg {
    /// The data directory.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
}

/// `rondo tier add --jukebox`: the farm made when DIR holds none.
#[derive(Args, Debug, Clone)]
pub struct FarmArgs {
    /// Jukeboxes in the farm, each with its own robot arm.
    #[arg(long, default_value_t = 4, conflicts_with = "s3")]
    jukeboxes: u32,
    /// Drives per jukebox.
    #[arg(long, default_value_t = 4, conflicts_with = "s3")]
    drives: u32,
    /// Disc slots per jukebox.
    #[arg(long, default_value_t = 100, conflicts_with = "s3")]
    slots: u32,
    /// SF of new files; 0 = SF_opt = round(√((F / X_drive) / T_exchange)).
    #[arg(long, default_value_t = 0, conflicts_with = "s3")]
    stripe_factor: u32,
    /// Wall seconds per model second: 1 is real time; 0.1 runs the farm
    /// ten times faster (tests, demos).
    #[arg(long, default_value_t = 1.0, conflicts_with = "s3")]
    time_scale: f64,
}

/// `rondo tier add --s3`: where the bucket is and the keys to it.
#[derive(Args, Debug, Clone)]
pub struct S3Args {
    /// The S3-compatible store's URL, e.g. https://s3.eu-west-1.amazonaws.com
    /// or http://127.0.0.1:9000 (with --allow-http).
    #[arg(long, value_name = "ENDPOINT", requires = "bucket")]
    s3: Option<String>,
    /// The bucket (it must exist).
    #[arg(long, value_name = "BUCKET", requires = "s3")]
    bucket: Option<String>,
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// The access key id (default: $AWS_ACCESS_KEY_ID). Recorded in
    /// tiers.toml, which only its owner may read.
    #[arg(
        long,
        value_name = "ID",
        env = "AWS_ACCESS_KEY_ID",
        hide_env_values = true
    )]
    access_key_id: Option<String>,
    /// The secret access key (default: $AWS_SECRET_ACCESS_KEY, better than
    /// the command line, which other users can see).
    #[arg(
        long,
        value_name = "KEY",
        env = "AWS_SECRET_ACCESS_KEY",
        hide_env_values = true
    )]
    secret_access_key: Option<String>,
    /// Allow a plain http:// endpoint (no TLS).
    #[arg(long, requires = "s3")]
    allow_http: bool,
    /// Keep the tier's objects under PREFIX/ in the bucket.
    #[arg(long, value_name = "PREFIX", requires = "s3")]
    prefix: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum TierCommand {
    /// Add a tier: an emulated optical jukebox farm in DIR (--jukebox; made
    /// if absent, with seed 002's NSM Satellite parameters unless told
    /// otherwise) or a bucket of an S3-compatible store (--s3 ENDPOINT
    /// --bucket B). The tier must open (an S3 tier: the store answers, the
    /// keys are accepted, the bucket exists) before it is recorded. A
    /// running server opens it when a title first names it.
    #[command(group(ArgGroup::new("backend").required(true).args(["jukebox", "s3"])))]
    Add {
        /// The tier's name (`rondo ingest --tier NAME`).
        name: String,
        /// The farm's directory (relative: inside the data directory).
        #[arg(long, value_name = "DIR")]
        jukebox: Option<PathBuf>,
        #[command(flatten)]
        farm: FarmArgs,
        #[command(flatten)]
        s3: S3Args,
        #[command(flatten)]
        dir: DirArg,
    },
    /// The tiers and the titles that live on them (whether staged onto the
    /// array, pinned, how often asked for).
    List {
        #[command(flatten)]
        dir: DirArg,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Keep a tier title on the array once staged (never evicted).
    Pin {
        name: String,
        #[command(flatten)]
        dir: DirArg,
    },
    /// Let a pinned tier title be evicted again.
    Unpin {
        name: String,
        #[command(flatten)]
        dir: DirArg,
    },
}

pub fn run(command: TierCommand) -> anyhow::Result<()> {
    match command {
        TierCommand::Add {
            name,
            jukebox,
            farm,
            s3,
            dir,
        } => {
            let data_dir = &dir.data_dir;
            match open_or_create(data_dir, default_store_config()) {
                Ok(_) | Err(StoreError::Locked { .. }) => {}
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("cannot open data directory {}", data_dir.display())
                    });
                }
            }
            let mut tiers = TiersFile::read(data_dir)?;
            if tiers.get(&name).is_some() {
                bail!(
                    "{}: a tier named {name:?} exists already",
                    data_dir.display()
                );
            }
            rondo_tier::validate_key(&name).map_err(|_| {
                anyhow::anyhow!("tier name {name:?}: use letters, digits, '-', '_' and '.'")
            })?;
            let kind = match jukebox {
                Some(jukebox) => add_jukebox(&name, data_dir, jukebox, &farm)?,
                None => add_s3(&name, data_dir, s3)?,
            };
            tiers.tiers.push(TierConfig {
                name: name.clone(),
                kind,
            });
            tiers.write(data_dir)?;
            println!(
                "added tier {name:?} to {}; store titles on it with `rondo ingest --tier {name} FILE`",
                data_dir.join(rondo_tier::TIERS_FILE).display()
            );
            Ok(())
        }
        TierCommand::List { dir, json } => {
            let tiers = TiersFile::read(&dir.data_dir)?;
            let store = open_store(&dir.data_dir)?;
            let titles = store.tier_titles()?;
            let staged: Vec<bool> = titles
                .iter()
                .map(|t| store.title_by_name(&t.name).ok().flatten().is_some())
                .collect();
            if json {
                let value = json!({
                    "tiers": tiers.tiers.iter().map(|t| json!({"name": t.name, "kind": t.kind.name(), "config": kind_json(&t.kind)})).collect::<Vec<Value>>(),
                    "titles": titles.iter().zip(&staged).map(|(t, s)| {
                        let mut v = crate::cmd::ingest::tier_title_json(t);
                        v["staged"] = json!(s);
                        v
                    }).collect::<Vec<Value>>(),
                });
                println!("{}", serde_json::to_string_pretty(&value)?);
                return Ok(());
            }
            let mut table = Table::new();
            table.set_header(["tier", "kind", "titles"]);
            for t in &tiers.tiers {
                let count = titles.iter().filter(|r| r.tier == t.name).count();
                table.add_row([t.name.clone(), t.kind.name().to_string(), count.to_string()]);
            }
            println!("{table}");
            let mut table = Table::new();
            table.set_header([
                "title",
                "tier",
                "MB",
                "seconds",
                "on the array",
                "pinned",
                "requests",
            ]);
            for (t, s) in titles.iter().zip(&staged) {
                table.add_row([
                    t.name.clone(),
                    t.tier.clone(),
                    format!("{:.1}", t.object_bytes as f64 / 1e6),
                    format!("{:.1}", t.duration_ns as f64 / 1e9),
                    if *s { "staged" } else { "no" }.to_string(),
                    if t.pinned { "yes" } else { "no" }.to_string(),
                    t.request_count.to_string(),
                ]);
            }
            println!("{table}");
            Ok(())
        }
        TierCommand::Pin { name, dir } => set_pin(&dir.data_dir, &name, true),
        TierCommand::Unpin { name, dir } => set_pin(&dir.data_dir, &name, false),
    }
}

/// Makes the farm in `jukebox` if it holds none, and checks that it opens.
fn add_jukebox(
    name: &str,
    data_dir: &Path,
    jukebox: PathBuf,
    farm: &FarmArgs,
) -> anyhow::Result<TierKind> {
    let root = data_dir.join(&jukebox);
    if !root.join(rondo_tier::jukebox::JUKEBOX_FILE).exists() {
        let config = FarmConfig {
            jukeboxes: farm.jukeboxes,
            drives: farm.drives,
            slots: farm.slots,
            stripe_factor: farm.stripe_factor,
            time_scale: farm.time_scale,
            ..FarmConfig::default()
        };
        EmulatedJukebox::create(&root, &config)?;
        eprintln!(
            "made a jukebox farm in {}: {} jukeboxes × {} drives × {} discs, NSM Satellite \
             timing{}",
            root.display(),
            farm.jukeboxes,
            farm.drives,
            farm.slots,
            if farm.time_scale == 1.0 {
                String::new()
            } else {
                format!(", {}× real time", farm.time_scale)
            }
        );
    }
    // Check that it opens before recording it.
    EmulatedJukebox::open(name, &root)?;
    Ok(TierKind::Jukebox(JukeboxTierConfig { path: jukebox }))
}

/// Checks that the bucket opens (reached, keys accepted, measured) before
/// it is recorded.
fn add_s3(name: &str, data_dir: &Path, s3: S3Args) -> anyhow::Result<TierKind> {
    let endpoint = s3.s3.context("--s3 ENDPOINT or --jukebox DIR is needed")?;
    let bucket = s3.bucket.context("--s3 needs --bucket BUCKET")?;
    let access_key_id = s3
        .access_key_id
        .context("--s3 needs --access-key-id ID (or AWS_ACCESS_KEY_ID in the environment)")?;
    let secret_access_key = s3.secret_access_key.context(
        "--s3 needs --secret-access-key KEY (or AWS_SECRET_ACCESS_KEY in the environment)",
    )?;
    let config = S3TierConfig {
        endpoint,
        bucket,
        region: s3.region,
        access_key_id,
        secret_access_key,
        allow_http: s3.allow_http,
        prefix: s3.prefix,
    };
    let tier =
        S3Tier::open(name, &config, &data_dir.join(rondo_tier::TIERS_FILE)).with_context(|| {
            format!(
                "tier {name:?} not added: bucket {:?} at {} does not open",
                config.bucket, config.endpoint
            )
        })?;
    eprintln!(
        "reached bucket {:?} at {}: first byte in {:.1} ms, {:.1} MB/s measured",
        config.bucket,
        tier.endpoint(),
        tier.measured_latency_ns() as f64 / 1e6,
        tier.measured_bytes_per_s() / 1e6
    );
    Ok(TierKind::S3(config))
}

/// A tier's configuration for `tier list --json`, its secret hidden.
fn kind_json(kind: &TierKind) -> Value {
    let mut value = json!(kind);
    if let Some(secret) = value.get_mut("secret_access_key") {
        *secret = json!("(hidden)");
    }
    value
}

fn open_store(dir: &std::path::Path) -> anyhow::Result<Store> {
    match Store::open(dir) {
        Ok(store) => Ok(store),
        Err(StoreError::Locked { .. }) => bail!(
            "{} is owned by a running server: ask it (GET /api/tiers, GET /api/titles) or stop it",
            dir.display()
        ),
        Err(e) => Err(e).with_context(|| format!("cannot open data directory {}", dir.display())),
    }
}

fn set_pin(dir: &std::path::Path, name: &str, pinned: bool) -> anyhow::Result<()> {
    match Store::open(dir) {
        Ok(store) => {
            if !store.set_tier_pinned(name, pinned)? {
                bail!(
                    "no title named {name:?} lives on a tier of {}",
                    dir.display()
                );
            }
        }
        Err(StoreError::Locked { .. }) => {
            let server = rondo_server::ingest::handoff::ServerInfo::read(dir)?;
            let token = rondo_server::ingest::handoff::read_token(dir)?;
            let url = format!(
                "{}/api/admin/tier-titles/{}/{}",
                server.url,
                rondo_server::tier_http::tier_path(name).trim_start_matches("/tier/"),
                if pinned { "pin" } else { "unpin" }
            );
            let response = reqwest::blocking::Client::new()
                .post(&url)
                .bearer_auth(token)
                .send()
                .with_context(|| format!("asking the server at {url}"))?;
            if !response.status().is_success() {
                let status = response.status();
                let text = response.text().unwrap_or_default();
                bail!("the server refused ({status}): {text}");
            }
        }
        Err(e) => {
            return Err(e).with_context(|| format!("cannot open data directory {}", dir.display()));
        }
    }
    println!("{} {name:?}", if pinned { "pinned" } else { "unpinned" });
    Ok(())
}
