//! The emulated optical jukebox tier: seed 002's striped files on a farm of
//! jukeboxes whose discs are directories, with every exchange, spin-up,
//! seek and transfer paced by the core's jukebox model.
//!
//! A farm directory holds `jukebox.toml` (the farm's parameters, NSM
//! Satellite's by default), one directory per disc (`j0/d3/` is slot 3 of
//! jukebox 0), the *shadow directory* (`shadow/j0-d3.json`: a copy of each
//! disc's directory, so that placing and opening a file never loads a
//! disc), and the *tables of extents* (`files/KEY.json`). A striped file is
//! cut into SF contiguous extent files, one per disc, on SF discs spread
//! over the jukeboxes (seed 002 §3). SF is the farm's `stripe_factor`, or
//! SF_opt = round(√((F / X_drive) / T_exchange)) for the file when it is 0.
//!
//! The paper's roles are threads: the *InterfaceServer* (the caller's
//! thread: `open_file` reads the table, `fetch` asks the model for each
//! extent's schedule and hands the reads out, `close_file`), one
//! *ExtentServer* per drive (`open_disk_file`, `read_extent`: it waits for
//! the exchange, opens the extent file in the disc's directory, reads and
//! checks it), and one *RobotServer* per jukebox (`load_disk`: the arm's
//! exchange). Each waits until the instant the model gives
//! (`JukeboxFarm::schedule`), so the model is the one source of the
//! emulation's timing and its prediction is the model run ahead on a copy.
//! `time_scale` (wall seconds per model second, 1 by default) lets tests
//! run a farm faster than life; predictions are scaled alike. The
//! *extent memory cache* keeps recently read extents (`cache_bytes`): a
//! cached extent costs no drive time.

use std::collections::{BTreeMap, VecDeque};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use rondo_model::tier::jukebox::{
    DiscId, ExtentStep, JukeboxFarm, JukeboxParams, optimal_stripe_factor,
};
use serde::{Deserialize, Serialize};

use crate::{Tier, TierError, TierObject, TierStatus, validate_key};

/// The farm's parameter file inside its directory.
pub const JUKEBOX_FILE: &str = "jukebox.toml";

/// `jukebox.toml`. Defaults: seed 002's NSM Satellite (docs/tier.md has the
/// source of each value) in four jukeboxes, as its Fig. 5.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FarmConfig {
    pub jukeboxes: u32,
    /// Drives per jukebox.
    pub drives: u32,
    /// Magazine slots (discs) per jukebox.
    pub slots: u32,
    /// Bytes one disc holds.
    pub disc_bytes: u64,
    /// SF of new files; 0 = SF_opt for each file's size.
    pub stripe_factor: u32,
    pub exchange_ms: f64,
    pub spinup_ms: f64,
    pub seek_ms: f64,
    pub rotation_ms: f64,
    /// X_drive.
    pub drive_bytes_per_s: u64,
    /// Wall seconds per model second (1: real time).
    pub time_scale: f64,
    /// The InterfaceServer's extent memory cache.
    pub cache_bytes: u64,
}

impl Default for FarmConfig {
    fn default() -> FarmConfig {
        let p = JukeboxParams::nsm_satellite();
        let ms = |ns: u64| ns as f64 / 1e6;
        FarmConfig {
            jukeboxes: 4,
            drives: p.drives,
            slots: p.slots,
            // assumption: a CD-ROM's 650 MB; the paper gives no disc size.
            disc_bytes: 650_000_000,
            stripe_factor: 0,
            exchange_ms: ms(p.exchange_ns),
            spinup_ms: ms(p.spinup_ns),
            seek_ms: ms(p.seek_ns),
            rotation_ms: ms(p.rotation_ns),
            drive_bytes_per_s: p.drive_rate_bytes_per_s,
            time_scale: 1.0,
            // assumption: 64 MiB of the tier host's memory for extents.
            cache_bytes: 64 << 20,
        }
    }
}

impl FarmConfig {
    pub fn params(&self) -> JukeboxParams {
        let ns = |ms: f64| (ms * 1e6).round() as u64;
        JukeboxParams {
            exchange_ns: ns(self.exchange_ms),
            spinup_ns: ns(self.spinup_ms),
            seek_ns: ns(self.seek_ms),
            rotation_ns: ns(self.rotation_ms),
            drive_rate_bytes_per_s: self.drive_bytes_per_s,
            drives: self.drives,
            slots: self.slots,
        }
    }

    fn check(&self, path: &Path) -> Result<(), TierError> {
        let bad = |what: String| TierError::Config {
            path: path.to_path_buf(),
            what,
        };
        if self.jukeboxes == 0 || self.drives == 0 || self.slots == 0 {
            return Err(bad(
                "jukeboxes, drives and slots must each be at least 1".into()
            ));
        }
        if self.drive_bytes_per_s == 0 || self.disc_bytes == 0 {
            return Err(bad(
                "drive_bytes_per_s and disc_bytes must be positive".into()
            ));
        }
        if !(self.time_scale > 0.0 && self.time_scale.is_finite()) {
            return Err(bad(format!(
                "time_scale {} must be positive",
                self.time_scale
            )));
        }
        for (name, v) in [
            ("exchange_ms", self.exchange_ms),
            ("spinup_ms", self.spinup_ms),
            ("seek_ms", self.seek_ms),
            ("rotation_ms", self.rotation_ms),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(bad(format!("{name} {v} must be a non-negative number")));
            }
        }
        Ok(())
    }
}

/// One extent file of a striped file, in its table of extents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtentEntry {
    pub jukebox: u32,
    pub slot: u32,
    /// The extent file's name in the disc's directory.
    pub file: String,
    /// Where in the striped file it starts.
    pub offset: u64,
    pub bytes: u64,
    pub crc32c: u32,
}

/// A striped file's table of extents (`files/KEY.json`): its visibility
/// point (written last by `put`, removed first by `remove`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtentTable {
    pub key: String,
    pub size_bytes: u64,
    pub crc32c: u32,
    pub extents: Vec<ExtentEntry>,
}

/// A disc's directory as the shadow directory keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct ShadowDisc {
    used_bytes: u64,
    /// Extent file name → bytes.
    files: BTreeMap<String, u64>,
}

/// Opened by [`EmulatedJukebox::open_file`]; closed by `close_file`.
#[derive(Debug)]
pub struct StripedFile {
    pub table: ExtentTable,
}

/// Work for a RobotServer: exchange a disc into a drive.
struct LoadDisk {
    step: ExtentStep,
    exchange_ns: u64,
    done: Sender<()>,
}

/// Work for an ExtentServer: read one extent file.
struct ReadExtent {
    step: ExtentStep,
    path: PathBuf,
    entry: ExtentEntry,
    key: String,
    reply: Sender<Result<Vec<u8>, TierError>>,
}

/// The model's clock in wall time.
#[derive(Copy, Clone, Debug)]
struct Clock {
    epoch: Instant,
    time_scale: f64,
}

impl Clock {
    fn model_now_ns(&self) -> u64 {
        (self.epoch.elapsed().as_nanos() as f64 / self.time_scale) as u64
    }

    fn wall_ns(&self, model_ns: u64) -> u64 {
        (model_ns as f64 * self.time_scale) as u64
    }

    fn sleep_until(&self, model_ns: u64) {
        let target = self.epoch + Duration::from_nanos(self.wall_ns(model_ns));
        let now = Instant::now();
        if target > now {
            std::thread::sleep(target - now);
        }
    }
}

struct FarmState {
    farm: JukeboxFarm,
    /// Extent cache: (key, extent index) → bytes, least recently used first.
    cache: VecDeque<((String, usize), Vec<u8>)>,
    cache_used_bytes: u64,
}

pub struct EmulatedJukebox {
    name: String,
    root: PathBuf,
    config: FarmConfig,
    clock: Clock,
    state: Mutex<FarmState>,
    /// Serialises `put` and `remove` (placement reads and writes shadows).
    placing: Mutex<()>,
    /// Per jukebox, per drive: the ExtentServer's queue.
    extent_servers: Vec<Vec<Sender<ReadExtent>>>,
    fetches_active: AtomicU64,
    fetches_total: AtomicU64,
    fetch_failures_total: AtomicU64,
    fetched_bytes_total: AtomicU64,
    exchanges_total: AtomicU64,
    cache_hits_total: AtomicU64,
}

fn io_error(tier: &str, what: impl Into<String>, path: &Path, source: std::io::Error) -> TierError {
    TierError::Io {
        tier: tier.to_string(),
        what: what.into(),
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `bytes` to `path` atomically (temporary file, fsync, rename,
/// directory fsync).
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().expect("a file in a directory");
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

impl EmulatedJukebox {
    /// Makes a farm directory with `config` (refused if it holds one).
    pub fn create(root: &Path, config: &FarmConfig) -> Result<(), TierError> {
        let path = root.join(JUKEBOX_FILE);
        config.check(&path)?;
        if path.exists() {
            return Err(TierError::Config {
                path,
                what: "a jukebox farm exists here already".into(),
            });
        }
        let mk = |dir: &Path| {
            std::fs::create_dir_all(dir).map_err(|e| TierError::Config {
                path: dir.to_path_buf(),
                what: format!("cannot be created: {e}"),
            })
        };
        mk(&root.join("shadow"))?;
        mk(&root.join("files"))?;
        for j in 0..config.jukeboxes {
            for s in 0..config.slots {
                mk(&disc_dir(
                    root,
                    DiscId {
                        jukebox: j,
                        slot: s,
                    },
                ))?;
            }
        }
        let text = toml::to_string_pretty(config).expect("config serialises");
        write_atomically(&path, text.as_bytes()).map_err(|e| TierError::Config {
            path,
            what: format!("cannot be written: {e}"),
        })
    }

    /// Opens the farm in `root` and starts its RobotServers and
    /// ExtentServers.
    pub fn open(name: &str, root: &Path) -> Result<EmulatedJukebox, TierError> {
        let path = root.join(JUKEBOX_FILE);
        let text = std::fs::read_to_string(&path).map_err(|e| TierError::Config {
            path: path.clone(),
            what: format!(
                "cannot be read ({e}); is {} a jukebox farm (`rondo tier add NAME --jukebox DIR`)?",
                root.display()
            ),
        })?;
        let config: FarmConfig = toml::from_str(&text).map_err(|e| TierError::Config {
            path: path.clone(),
            what: e.to_string(),
        })?;
        config.check(&path)?;
        let clock = Clock {
            epoch: Instant::now(),
            time_scale: config.time_scale,
        };
        let mut extent_servers = Vec::new();
        for j in 0..config.jukeboxes {
            let (robot_tx, robot_rx) = unbounded::<LoadDisk>();
            spawn(format!("rondo-robot-{name}-{j}"), move || {
                robot_server(clock, robot_rx)
            })?;
            let mut drives = Vec::new();
            for d in 0..config.drives {
                let (tx, rx) = unbounded::<ReadExtent>();
                let robot = robot_tx.clone();
                let tier = name.to_string();
                let exchange_ns = config.params().exchange_ns;
                spawn(format!("rondo-extent-{name}-{j}-{d}"), move || {
                    extent_server(&tier, clock, exchange_ns, rx, robot)
                })?;
                drives.push(tx);
            }
            extent_servers.push(drives);
        }
        Ok(EmulatedJukebox {
            name: name.to_string(),
            root: root.to_path_buf(),
            state: Mutex::new(FarmState {
                farm: JukeboxFarm::new(config.params(), config.jukeboxes),
                cache: VecDeque::new(),
                cache_used_bytes: 0,
            }),
            config,
            clock,
            placing: Mutex::new(()),
            extent_servers,
            fetches_active: AtomicU64::new(0),
            fetches_total: AtomicU64::new(0),
            fetch_failures_total: AtomicU64::new(0),
            fetched_bytes_total: AtomicU64::new(0),
            exchanges_total: AtomicU64::new(0),
            cache_hits_total: AtomicU64::new(0),
        })
    }

    pub fn config(&self) -> &FarmConfig {
        &self.config
    }

    /// The stripe factor a new file of `size_bytes` gets.
    pub fn stripe_factor_for(&self, size_bytes: u64) -> u32 {
        let sf = match self.config.stripe_factor {
            0 => optimal_stripe_factor(&self.config.params(), size_bytes),
            sf => sf,
        };
        sf.clamp(1, self.config.jukeboxes * self.config.slots)
    }

    fn table_path(&self, key: &str) -> PathBuf {
        self.root.join("files").join(format!("{key}.json"))
    }

    fn shadow_path(&self, disc: DiscId) -> PathBuf {
        self.root
            .join("shadow")
            .join(format!("j{}-d{}.json", disc.jukebox, disc.slot))
    }

    fn read_shadow(&self, disc: DiscId) -> Result<ShadowDisc, TierError> {
        let path = self.shadow_path(disc);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| TierError::Config {
                path,
                what: format!("the shadow directory entry does not parse: {e}"),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ShadowDisc::default()),
            Err(e) => Err(io_error(
                &self.name,
                "reading the shadow directory",
                &path,
                e,
            )),
        }
    }

    fn write_shadow(&self, disc: DiscId, shadow: &ShadowDisc) -> Result<(), TierError> {
        let path = self.shadow_path(disc);
        let bytes = serde_json::to_vec_pretty(shadow).expect("shadow serialises");
        write_atomically(&path, &bytes)
            .map_err(|e| io_error(&self.name, "writing the shadow directory", &path, e))
    }

    /// InterfaceServer `open_file`: the striped file's table of extents.
    pub fn open_file(&self, key: &str) -> Result<StripedFile, TierError> {
        validate_key(key)?;
        let path = self.table_path(key);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(TierError::Missing {
                    tier: self.name.clone(),
                    key: key.to_string(),
                });
            }
            Err(e) => return Err(io_error(&self.name, "reading a table of extents", &path, e)),
        };
        let table: ExtentTable =
            serde_json::from_slice(&bytes).map_err(|e| TierError::Corrupt {
                tier: self.name.clone(),
                key: key.to_string(),
                what: format!(
                    "its table of extents {} does not parse: {e}",
                    path.display()
                ),
            })?;
        let covered: u64 = table.extents.iter().map(|e| e.bytes).sum();
        if covered != table.size_bytes {
            return Err(TierError::Corrupt {
                tier: self.name.clone(),
                key: key.to_string(),
                what: format!(
                    "its table of extents covers {covered} bytes of {}",
                    table.size_bytes
                ),
            });
        }
        Ok(StripedFile { table })
    }

    /// InterfaceServer `close_file`.
    pub fn close_file(&self, file: StripedFile) {
        drop(file);
    }

    /// The discs for a new file's `sf` extents: jukeboxes in turn from one
    /// that rotates per file, in each the disc with the most room.
    fn place(&self, key: &str, sizes: &[u64]) -> Result<Vec<DiscId>, TierError> {
        let files = std::fs::read_dir(self.root.join("files"))
            .map(|d| d.count() as u32)
            .unwrap_or(0);
        let mut chosen: Vec<DiscId> = Vec::new();
        for (i, &bytes) in sizes.iter().enumerate() {
            let jukebox = (files + i as u32) % self.config.jukeboxes;
            let mut best: Option<(u64, DiscId)> = None;
            for slot in 0..self.config.slots {
                let disc = DiscId { jukebox, slot };
                if chosen.contains(&disc) {
                    continue;
                }
                let used = self.read_shadow(disc)?.used_bytes;
                let free = self.config.disc_bytes.saturating_sub(used);
                if free >= bytes && best.is_none_or(|(f, _)| free > f) {
                    best = Some((free, disc));
                }
            }
            match best {
                Some((_, disc)) => chosen.push(disc),
                None => {
                    return Err(TierError::Full {
                        tier: self.name.clone(),
                        what: format!(
                            "no disc in jukebox {jukebox} has {bytes} bytes free for an extent of {key:?}"
                        ),
                    });
                }
            }
        }
        Ok(chosen)
    }

    /// Which extent server reads a step.
    fn dispatch(&self, work: ReadExtent) {
        let (jukebox, drive) = (work.step.disc.jukebox as usize, work.step.drive as usize);
        let _ = self.extent_servers[jukebox][drive].send(work);
    }

    fn cached(&self, key: &str, index: usize) -> Option<Vec<u8>> {
        let mut state = self.state.lock().expect("farm lock");
        let pos = state
            .cache
            .iter()
            .position(|((k, i), _)| k == key && *i == index)?;
        let entry = state.cache.remove(pos).expect("present");
        let bytes = entry.1.clone();
        state.cache.push_back(entry);
        Some(bytes)
    }

    fn cache_insert(&self, key: &str, index: usize, bytes: &[u8]) {
        let budget = self.config.cache_bytes;
        if bytes.len() as u64 > budget {
            return;
        }
        let mut state = self.state.lock().expect("farm lock");
        state.cache.retain(|((k, i), _)| !(k == key && *i == index));
        state.cache_used_bytes = state.cache.iter().map(|(_, b)| b.len() as u64).sum();
        while state.cache_used_bytes + bytes.len() as u64 > budget {
            let Some((_, old)) = state.cache.pop_front() else {
                break;
            };
            state.cache_used_bytes -= old.len() as u64;
        }
        state.cache_used_bytes += bytes.len() as u64;
        state
            .cache
            .push_back(((key.to_string(), index), bytes.to_vec()));
    }

    fn uncached(&self, table: &ExtentTable) -> Vec<(usize, DiscId, u64)> {
        let state = self.state.lock().expect("farm lock");
        table
            .extents
            .iter()
            .enumerate()
            .filter(|(i, _)| {
                !state
                    .cache
                    .iter()
                    .any(|((k, j), _)| *k == table.key && j == i)
            })
            .map(|(i, e)| {
                (
                    i,
                    DiscId {
                        jukebox: e.jukebox,
                        slot: e.slot,
                    },
                    e.bytes,
                )
            })
            .collect()
    }

    /// Removes objects whose put did not finish: extent files no table
    /// names, left by a crash. Returns the bytes freed.
    pub fn clean_orphans(&self) -> Result<u64, TierError> {
        let _placing = self.placing.lock().expect("placing lock");
        let mut named = std::collections::BTreeSet::new();
        let files_dir = self.root.join("files");
        let entries = std::fs::read_dir(&files_dir)
            .map_err(|e| io_error(&self.name, "listing tables", &files_dir, e))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(key) = name.strip_suffix(".json") {
                if let Ok(file) = self.open_file(key) {
                    for e in file.table.extents {
                        named.insert((e.jukebox, e.slot, e.file));
                    }
                }
            } else if name.ends_with(".tmp") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        let mut freed = 0;
        for j in 0..self.config.jukeboxes {
            for s in 0..self.config.slots {
                let disc = DiscId {
                    jukebox: j,
                    slot: s,
                };
                let mut shadow = self.read_shadow(disc)?;
                let before = shadow.files.len();
                let orphans: Vec<(String, u64)> = shadow
                    .files
                    .iter()
                    .filter(|(f, _)| !named.contains(&(j, s, (*f).clone())))
                    .map(|(f, b)| (f.clone(), *b))
                    .collect();
                for (f, bytes) in orphans {
                    let _ = std::fs::remove_file(disc_dir(&self.root, disc).join(&f));
                    shadow.files.remove(&f);
                    shadow.used_bytes = shadow.used_bytes.saturating_sub(bytes);
                    freed += bytes;
                }
                if shadow.files.len() != before {
                    self.write_shadow(disc, &shadow)?;
                }
            }
        }
        Ok(freed)
    }
}

fn disc_dir(root: &Path, disc: DiscId) -> PathBuf {
    root.join(format!("j{}", disc.jukebox))
        .join(format!("d{}", disc.slot))
}

fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> Result<(), TierError> {
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(f)
        .map(|_| ())
        .map_err(|e| TierError::Config {
            path: PathBuf::from(name),
            what: format!("cannot start the thread: {e}"),
        })
}

/// RobotServer: one arm. `load_disk` ends when the model's exchange does
/// (the arm's start, from the schedule, plus T_exchange).
fn robot_server(clock: Clock, work: Receiver<LoadDisk>) {
    for op in work {
        let start_ns = op.step.exchange_start_ns.unwrap_or(0);
        clock.sleep_until(start_ns + op.exchange_ns);
        tracing::debug!(
            jukebox = op.step.disc.jukebox,
            slot = op.step.disc.slot,
            drive = op.step.drive,
            unloaded = ?op.step.unloaded,
            "load_disk"
        );
        let _ = op.done.send(());
    }
}

/// ExtentServer: one drive. For each extent: the exchange if the disc is
/// not in the drive (`load_disk` by the RobotServer), `open_disk_file`,
/// `read_extent`, each ending at the model's instant.
fn extent_server(
    tier: &str,
    clock: Clock,
    exchange_ns: u64,
    work: Receiver<ReadExtent>,
    robot: Sender<LoadDisk>,
) {
    for op in work {
        if op.step.exchange_start_ns.is_some() {
            let (done, wait) = bounded(1);
            let load = LoadDisk {
                step: op.step,
                exchange_ns,
                done,
            };
            if robot.send(load).is_ok() {
                let _ = wait.recv();
            }
        }
        clock.sleep_until(op.step.transfer_start_ns);
        let result = read_extent_file(tier, &op);
        clock.sleep_until(op.step.done_ns);
        let _ = op.reply.send(result);
    }
}

/// `open_disk_file` + `read_extent`: the whole extent file, checked.
fn read_extent_file(tier: &str, op: &ReadExtent) -> Result<Vec<u8>, TierError> {
    let corrupt = |what: String| TierError::Corrupt {
        tier: tier.to_string(),
        key: op.key.clone(),
        what,
    };
    let mut file = match std::fs::File::open(&op.path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(corrupt(format!(
                "extent file {} (jukebox {}, disc {}) is missing",
                op.path.display(),
                op.entry.jukebox,
                op.entry.slot
            )));
        }
        Err(e) => return Err(io_error(tier, "opening an extent file", &op.path, e)),
    };
    let mut bytes = Vec::with_capacity(op.entry.bytes as usize);
    file.read_to_end(&mut bytes)
        .map_err(|e| io_error(tier, "reading an extent file", &op.path, e))?;
    if bytes.len() as u64 != op.entry.bytes {
        return Err(corrupt(format!(
            "extent file {} holds {} bytes where its table says {}",
            op.path.display(),
            bytes.len(),
            op.entry.bytes
        )));
    }
    let crc = crc32c::crc32c(&bytes);
    if crc != op.entry.crc32c {
        return Err(corrupt(format!(
            "extent file {} fails its checksum (CRC32C {crc:08x}, table {:08x})",
            op.path.display(),
            op.entry.crc32c
        )));
    }
    Ok(bytes)
}

impl Tier for EmulatedJukebox {
    fn name(&self) -> &str {
        &self.name
    }

    fn put(&self, key: &str, source: &Path) -> Result<TierObject, TierError> {
        validate_key(key)?;
        let _placing = self.placing.lock().expect("placing lock");
        if self.table_path(key).exists() {
            return Err(TierError::Exists {
                tier: self.name.clone(),
                key: key.to_string(),
            });
        }
        let data = std::fs::read(source)
            .map_err(|e| io_error(&self.name, "reading the file to store", source, e))?;
        let size_bytes = data.len() as u64;
        let sf = self.stripe_factor_for(size_bytes) as u64;
        let sf = sf.min(size_bytes.max(1));
        let base = size_bytes / sf;
        let sizes: Vec<u64> = (0..sf)
            .map(|i| base + u64::from(i < size_bytes % sf))
            .collect();
        let discs = self.place(key, &sizes)?;
        let mut extents = Vec::new();
        let mut offset = 0u64;
        for (i, (&bytes, &disc)) in sizes.iter().zip(&discs).enumerate() {
            let chunk = &data[offset as usize..(offset + bytes) as usize];
            let file = format!("{key}.e{i}");
            let path = disc_dir(&self.root, disc).join(&file);
            write_atomically(&path, chunk)
                .map_err(|e| io_error(&self.name, "writing an extent file", &path, e))?;
            let mut shadow = self.read_shadow(disc)?;
            shadow.files.insert(file.clone(), bytes);
            shadow.used_bytes += bytes;
            self.write_shadow(disc, &shadow)?;
            extents.push(ExtentEntry {
                jukebox: disc.jukebox,
                slot: disc.slot,
                file,
                offset,
                bytes,
                crc32c: crc32c::crc32c(chunk),
            });
            offset += bytes;
        }
        let table = ExtentTable {
            key: key.to_string(),
            size_bytes,
            crc32c: crc32c::crc32c(&data),
            extents,
        };
        let path = self.table_path(key);
        write_atomically(&path, &serde_json::to_vec_pretty(&table).expect("table"))
            .map_err(|e| io_error(&self.name, "writing the table of extents", &path, e))?;
        tracing::info!(tier = %self.name, key, size_bytes, stripe_factor = sf, "stored on the jukebox");
        Ok(TierObject {
            key: key.to_string(),
            size_bytes,
            crc32c: table.crc32c,
        })
    }

    fn predict_fetch_ns(&self, object: &TierObject) -> u64 {
        let Ok(file) = self.open_file(&object.key) else {
            return 0;
        };
        let uncached = self.uncached(&file.table);
        let state = self.state.lock().expect("farm lock");
        let mut farm = state.farm.clone();
        let now = self.clock.model_now_ns();
        let extents: Vec<(DiscId, u64)> = uncached.iter().map(|&(_, d, b)| (d, b)).collect();
        let done = farm
            .schedule(now, &extents)
            .iter()
            .map(|s| s.done_ns)
            .max()
            .unwrap_or(now);
        self.clock.wall_ns(done - now)
    }

    fn fetch(
        &self,
        object: &TierObject,
        dest: &mut dyn Write,
        progress: &dyn Fn(u64),
    ) -> Result<(), TierError> {
        self.fetches_active.fetch_add(1, Relaxed);
        self.fetches_total.fetch_add(1, Relaxed);
        let result = self.fetch_inner(object, dest, progress);
        self.fetches_active.fetch_sub(1, Relaxed);
        if result.is_err() {
            self.fetch_failures_total.fetch_add(1, Relaxed);
        }
        result
    }

    fn remove(&self, key: &str) -> Result<(), TierError> {
        let _placing = self.placing.lock().expect("placing lock");
        let file = match self.open_file(key) {
            Ok(f) => f,
            Err(TierError::Missing { .. }) => return Ok(()),
            Err(e) => return Err(e),
        };
        let path = self.table_path(key);
        std::fs::remove_file(&path)
            .map_err(|e| io_error(&self.name, "removing the table of extents", &path, e))?;
        for e in &file.table.extents {
            let disc = DiscId {
                jukebox: e.jukebox,
                slot: e.slot,
            };
            let _ = std::fs::remove_file(disc_dir(&self.root, disc).join(&e.file));
            let mut shadow = self.read_shadow(disc)?;
            if let Some(bytes) = shadow.files.remove(&e.file) {
                shadow.used_bytes = shadow.used_bytes.saturating_sub(bytes);
            }
            self.write_shadow(disc, &shadow)?;
        }
        self.state
            .lock()
            .expect("farm lock")
            .cache
            .retain(|((k, _), _)| k != key);
        Ok(())
    }

    fn status(&self) -> TierStatus {
        let state = self.state.lock().expect("farm lock");
        TierStatus {
            name: self.name.clone(),
            kind: "jukebox",
            fetches_active: self.fetches_active.load(Relaxed) as u32,
            fetched_bytes_total: self.fetched_bytes_total.load(Relaxed),
            fetches_total: self.fetches_total.load(Relaxed),
            fetch_failures_total: self.fetch_failures_total.load(Relaxed),
            drives_busy: Some(state.farm.busy_drives(self.clock.model_now_ns())),
            drives_total: Some(self.config.jukeboxes * self.config.drives),
            exchanges_total: Some(self.exchanges_total.load(Relaxed)),
            cache_hits_total: Some(self.cache_hits_total.load(Relaxed)),
            measured_bytes_per_s: None,
        }
    }
}

impl EmulatedJukebox {
    fn fetch_inner(
        &self,
        object: &TierObject,
        dest: &mut dyn Write,
        progress: &dyn Fn(u64),
    ) -> Result<(), TierError> {
        let file = self.open_file(&object.key)?;
        let corrupt = |what: String| TierError::Corrupt {
            tier: self.name.clone(),
            key: object.key.clone(),
            what,
        };
        if file.table.size_bytes != object.size_bytes || file.table.crc32c != object.crc32c {
            return Err(corrupt(format!(
                "the tier holds {} bytes (CRC32C {:08x}) where the catalog recorded {} ({:08x})",
                file.table.size_bytes, file.table.crc32c, object.size_bytes, object.crc32c
            )));
        }
        // Schedule every uncached extent at once (they are read in
        // parallel), then hand the reads to the drives' ExtentServers.
        let uncached = self.uncached(&file.table);
        let mut replies: BTreeMap<usize, Receiver<Result<Vec<u8>, TierError>>> = BTreeMap::new();
        {
            let mut state = self.state.lock().expect("farm lock");
            let now = self.clock.model_now_ns();
            let extents: Vec<(DiscId, u64)> = uncached.iter().map(|&(_, d, b)| (d, b)).collect();
            let steps = state.farm.schedule(now, &extents);
            drop(state);
            for (&(index, _, _), step) in uncached.iter().zip(steps) {
                if step.exchange_start_ns.is_some() {
                    self.exchanges_total.fetch_add(1, Relaxed);
                }
                let entry = file.table.extents[index].clone();
                let disc = DiscId {
                    jukebox: entry.jukebox,
                    slot: entry.slot,
                };
                let (reply, rx) = bounded(1);
                self.dispatch(ReadExtent {
                    step,
                    path: disc_dir(&self.root, disc).join(&entry.file),
                    entry,
                    key: object.key.clone(),
                    reply,
                });
                replies.insert(index, rx);
            }
        }
        let mut crc = 0u32;
        let mut done_bytes = 0u64;
        let mut first_error = None;
        for (index, entry) in file.table.extents.iter().enumerate() {
            let bytes = match replies.remove(&index) {
                None => match self.cached(&object.key, index) {
                    Some(bytes) => {
                        self.cache_hits_total.fetch_add(1, Relaxed);
                        bytes
                    }
                    None => {
                        return Err(corrupt(format!("extent {index} left the cache")));
                    }
                },
                Some(rx) => match rx.recv() {
                    Ok(Ok(bytes)) => {
                        self.cache_insert(&object.key, index, &bytes);
                        bytes
                    }
                    Ok(Err(e)) => {
                        // Wait for the other drives' reads to end too.
                        first_error.get_or_insert(e);
                        continue;
                    }
                    Err(_) => {
                        first_error.get_or_insert(TierError::Config {
                            path: self.root.clone(),
                            what: "an ExtentServer thread ended".into(),
                        });
                        continue;
                    }
                },
            };
            if first_error.is_some() {
                continue;
            }
            debug_assert_eq!(bytes.len() as u64, entry.bytes);
            crc = crc32c::crc32c_append(crc, &bytes);
            dest.write_all(&bytes).map_err(|e| TierError::Sink {
                tier: self.name.clone(),
                key: object.key.clone(),
                source: e,
            })?;
            done_bytes += bytes.len() as u64;
            self.fetched_bytes_total
                .fetch_add(bytes.len() as u64, Relaxed);
            progress(done_bytes);
        }
        self.close_file(file);
        if let Some(e) = first_error {
            return Err(e);
        }
        if crc != object.crc32c {
            return Err(corrupt(format!(
                "the assembled object fails its checksum (CRC32C {crc:08x}, recorded {:08x})",
                object.crc32c
            )));
        }
        Ok(())
    }
}
