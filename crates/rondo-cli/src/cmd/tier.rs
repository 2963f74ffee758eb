//! `rondo tier`: the tiers a data directory's titles may live on (seed
//! 002): add one (an emulated optical jukebox farm), list them with their
//! titles, pin a title on the array. `rondo ingest --tier NAME` stores
//! titles there; a running server stages them onto the array when asked.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use comfy_table::Table;
use rondo_server::titles::{DEFAULT_DATA_DIR, default_store_config, open_or_create};
use rondo_store::{Store, StoreError};
use rondo_tier::jukebox::{EmulatedJukebox, FarmConfig};
use rondo_tier::{JukeboxTierConfig, TierConfig, TierKind, TiersFile};
use serde_json::{Value, json};

#[derive(Args, Debug, Clone)]
pub struct DirArg {
    /// The data directory.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
}

#[derive(Subcommand, Debug)]
pub enum TierCommand {
    /// Add a tier: an emulated optical jukebox farm in DIR (made if absent,
    /// with seed 002's NSM Satellite parameters unless told otherwise).
    /// A running server uses it after its next start.
    Add {
        /// The tier's name (`rondo ingest --tier NAME`).
        name: String,
        /// The farm's directory (relative: inside the data directory).
        #[arg(long, value_name = "DIR")]
        jukebox: PathBuf,
        /// Jukeboxes in the farm, each with its own robot arm.
        #[arg(long, default_value_t = 4)]
        jukeboxes: u32,
        /// Drives per jukebox.
        #[arg(long, default_value_t = 4)]
        drives: u32,
        /// Disc slots per jukebox.
        #[arg(long, default_value_t = 100)]
        slots: u32,
        /// SF of new files; 0 = SF_opt = round(√((F / X_drive) / T_exchange)).
        #[arg(long, default_value_t = 0)]
        stripe_factor: u32,
        /// Wall seconds per model second: 1 is real time; 0.1 runs the farm
        /// ten times faster (tests, demos).
        #[arg(long, default_value_t = 1.0)]
        time_scale: f64,
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
            jukeboxes,
            drives,
            slots,
            stripe_factor,
            time_scale,
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
            let root = data_dir.join(&jukebox);
            if !root.join(rondo_tier::jukebox::JUKEBOX_FILE).exists() {
                let config = FarmConfig {
                    jukeboxes,
                    drives,
                    slots,
                    stripe_factor,
                    time_scale,
                    ..FarmConfig::default()
                };
                EmulatedJukebox::create(&root, &config)?;
                eprintln!(
                    "made a jukebox farm in {}: {jukeboxes} jukeboxes × {drives} drives × {slots} \
                     discs, NSM Satellite timing{}",
                    root.display(),
                    if time_scale == 1.0 {
                        String::new()
                    } else {
                        format!(", {time_scale}× real time")
                    }
                );
            }
            // Check that it opens before recording it.
            EmulatedJukebox::open(&name, &root)?;
            tiers.tiers.push(TierConfig {
                name: name.clone(),
                kind: TierKind::Jukebox(JukeboxTierConfig { path: jukebox }),
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
                    "tiers": tiers.tiers.iter().map(|t| json!({"name": t.name, "kind": t.kind.name(), "config": t.kind})).collect::<Vec<Value>>(),
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
