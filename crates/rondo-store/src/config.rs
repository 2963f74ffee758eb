//! What is fixed when a data directory is created, and `rondo.toml`, where it
//! is kept: the array id, D, stride and block sizes, the round length, the disk
//! profile, the reservation scheme, replica placement, B_d, the format version
//! and the devices. Runtime flags may change everything else; a flag that
//! contradicts this file is refused ([`ArrayConfig::check_flags`]).

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use rondo_model::layout::{BackupParams, LayoutParams, ReplicaPlacement, RoundRobinCounter};
use rondo_model::reservation::Scheme;
use rondo_model::units::{
    BLOCK_BYTES_DEFAULT, NS_PER_MS, ROUND_DURATION_NS_DEFAULT, STRIDE_BYTES_DEFAULT,
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Result, StoreError};

/// Version of the on-disk format (rondo.toml and device headers).
pub const FORMAT_VERSION: u32 = 1;

/// Every device read and write is aligned to this, in offset, length and
/// buffer address, so devices can be opened with O_DIRECT.
pub const IO_ALIGN_BYTES: u64 = 4096;

/// Bytes at the start of each device kept for its header; the stride area
/// begins here. A whole MiB keeps the stride area aligned for any device.
pub const HEADER_REGION_BYTES: u64 = 1024 * 1024;

/// The name of the configuration file inside a data directory.
pub const CONFIG_FILE: &str = "rondo.toml";

/// A random 128-bit identity shared by rondo.toml, every device header and
/// the catalog, so that parts of different arrays are never mixed.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ArrayId(pub [u8; 16]);

impl ArrayId {
    /// A fresh id from the operating system's randomness.
    pub fn random() -> std::io::Result<ArrayId> {
        let mut bytes = [0u8; 16];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
        Ok(ArrayId(bytes))
    }

    /// A reproducible id from a caller-supplied seed (tests, demos).
    pub fn from_seed(seed: u64) -> ArrayId {
        let mut rng = rondo_model::layout::rng::SplitMix64::new(seed);
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&rng.next_u64().to_le_bytes());
        bytes[8..].copy_from_slice(&rng.next_u64().to_le_bytes());
        ArrayId(bytes)
    }

    /// Parses 32 hexadecimal digits.
    pub fn parse_hex(text: &str) -> Option<ArrayId> {
        if text.len() != 32 || !text.is_ascii() {
            return None;
        }
        let mut bytes = [0u8; 16];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(ArrayId(bytes))
    }

    /// The array-wide seed that per-title placement seeds derive from
    /// (`rondo_model::layout::derive_title_seed`).
    pub fn placement_seed(&self) -> u64 {
        u64::from_le_bytes(self.0[..8].try_into().expect("8 bytes"))
    }
}

impl fmt::Display for ArrayId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ArrayId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ArrayId({self})")
    }
}

impl Serialize for ArrayId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for ArrayId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ArrayId, D::Error> {
        let text = String::deserialize(deserializer)?;
        ArrayId::parse_hex(&text).ok_or_else(|| {
            serde::de::Error::custom(format!("array_id {text:?} is not 32 hexadecimal digits"))
        })
    }
}

/// What the caller chooses when creating a data directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreConfig {
    /// `None` draws a fresh id from the OS.
    pub array_id: Option<ArrayId>,
    /// D.
    pub disk_count: u32,
    pub stride_bytes: u64,
    /// B_l; a multiple of [`IO_ALIGN_BYTES`] so every extent can be read with O_DIRECT.
    pub block_bytes: u64,
    pub round_duration_ns: u64,
    /// Name of the disk profile the array is planned with (e.g. `cheetah-4lp`).
    pub disk_profile: String,
    pub scheme: Scheme,
    pub placement: ReplicaPlacement,
    /// B_d; `None` keeps each round's backup whole.
    pub backup_block_bytes: Option<u64>,
    /// Deterministic placement's round-robin counter (docs/layout.md).
    pub round_robin_counter: RoundRobinCounter,
    /// Rounds per run on one disk: 1 is `variable-grain` (the default), more
    /// is `segments` (`LayoutParams::segment_rounds`).
    pub segment_rounds: u32,
    /// G disk groups: a backup stays in its primary's group (d mod G), so a
    /// storage node holding G consecutive disks can fail whole
    /// (`BackupParams::disk_groups`); 1 (the default): one group.
    pub disk_groups: u32,
    /// W, the disks one title is striped over (`LayoutParams::stripe_disks`);
    /// 0 (the default): every disk. Fewer is seed 001's placement, a title
    /// on S of the storage nodes.
    pub stripe_disks: u32,
    /// Size of each device's stride area (the caller takes it from the disk
    /// profile or a configured size).
    pub capacity_bytes: u64,
    /// `None`: sparse files `disk-0.dev`, … inside the directory. Otherwise one
    /// path per disk (block devices or files elsewhere), in disk order.
    pub device_paths: Option<Vec<PathBuf>>,
}

impl StoreConfig {
    /// D disks of `capacity_bytes` each with the defaults `rondo serve` uses:
    /// 2 MiB strides, 16 KiB blocks, 1 s rounds, `minimum` + `deterministic`
    /// with a per-title round-robin counter (it carries more streams than
    /// per-disk: docs/experiments/seed000-fig11.md), no declustering, device
    /// files inside the directory, a random array id.
    pub fn new(disk_count: u32, disk_profile: &str, capacity_bytes: u64) -> StoreConfig {
        StoreConfig {
            array_id: None,
            disk_count,
            stride_bytes: STRIDE_BYTES_DEFAULT,
            block_bytes: BLOCK_BYTES_DEFAULT,
            round_duration_ns: ROUND_DURATION_NS_DEFAULT,
            disk_profile: disk_profile.to_string(),
            scheme: Scheme::Minimum,
            placement: ReplicaPlacement::Deterministic,
            backup_block_bytes: None,
            round_robin_counter: RoundRobinCounter::PerTitle,
            segment_rounds: 1,
            disk_groups: 1,
            stripe_disks: 0,
            capacity_bytes,
            device_paths: None,
        }
    }
}

/// One device as rondo.toml lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceEntry {
    /// Relative paths are inside the data directory.
    pub path: PathBuf,
    /// Size of the stride area on this device.
    pub capacity_bytes: u64,
}

/// The contents of `rondo.toml`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArrayConfig {
    pub format_version: u32,
    pub array_id: ArrayId,
    pub disk_count: u32,
    pub stride_bytes: u64,
    pub block_bytes: u64,
    pub round_duration_ns: u64,
    pub disk_profile: String,
    pub scheme: Scheme,
    pub placement: ReplicaPlacement,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_block_bytes: Option<u64>,
    /// Absent in directories created before the option existed, which were
    /// all laid out per disk (the serde default).
    #[serde(default)]
    pub round_robin_counter: RoundRobinCounter,
    /// Rounds per run on one disk (`LayoutParams::segment_rounds`); absent
    /// (1, `variable-grain`) in directories created before the `segments`
    /// layout existed, and not written for them.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub segment_rounds: u32,
    /// G disk groups (`BackupParams::disk_groups`); absent (1, one group) in
    /// directories created before groups existed, and not written for them.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub disk_groups: u32,
    /// W, the disks one title is striped over (`LayoutParams::stripe_disks`);
    /// absent (0, every disk) in directories striped over every disk, and
    /// not written for them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stripe_disks: u32,
    /// Where the stride area starts on every device.
    pub header_region_bytes: u64,
    /// In disk order: entry k is disk k.
    pub devices: Vec<DeviceEntry>,
    /// How the directory is served unless a run's flags say otherwise: the
    /// `[serving]` table, absent when it holds the defaults.
    #[serde(default, skip_serializing_if = "ServingSettings::is_default")]
    pub serving: ServingSettings,
}

/// How a data directory is served by default (`rondo serve`'s flags of the
/// same names override them for one run): policies that change no byte on
/// the disks, chosen per directory (issue 16). Written when `rondo serve`
/// creates the directory with those flags; edit rondo.toml's `[serving]`
/// table to change them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServingSettings {
    /// k: rounds in which a survivor may read a failed disk's backup
    /// (`reservation::BackupWindow`; 1, absent: seed 000's, in the round
    /// itself). A stream's first send then waits k − 1 rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_window_rounds: Option<u32>,
    /// Admit with a statistical guarantee at this overrun probability per
    /// disk-round (docs/guarantee.md); absent: deterministic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrun_probability: Option<f64>,
    /// L: rounds after its round by which a disk's loss at any moment of a
    /// round is known (`BackupWindow::loss_notice_rounds`; absent: 0, a
    /// loss at a round boundary). A cluster's storage node dying mid-round
    /// needs L ≥ 1 (≥ 2 to be noticed when it goes silent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_notice_rounds: Option<u32>,
    /// Which stroke of the drive the rondo bound charges seeks for
    /// ([`Stroke`]; absent: the whole drive's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stroke: Option<Stroke>,
}

pub use rondo_model::disk::Stroke;

/// The largest L a directory may set (assumption: a loss noticed more
/// than 4 rounds late is a broken monitor, not a slow one; each round of L
/// adds a round of start-up and of spread backup reservation).
pub const LOSS_NOTICE_ROUNDS_MAX: u32 = 4;

/// The largest backup window a directory may set: the client then holds
/// that many rounds ahead (assumption: a minute of 1 s rounds bounds what a
/// player is asked to buffer and the wait before its first byte).
pub const BACKUP_WINDOW_ROUNDS_MAX: u32 = 60;

impl ServingSettings {
    pub fn is_default(&self) -> bool {
        *self == ServingSettings::default()
    }

    /// These settings with a run's flags (`Some` values) taking their place.
    pub fn overridden_by(&self, flags: &ServingSettings) -> ServingSettings {
        ServingSettings {
            backup_window_rounds: flags.backup_window_rounds.or(self.backup_window_rounds),
            overrun_probability: flags.overrun_probability.or(self.overrun_probability),
            loss_notice_rounds: flags.loss_notice_rounds.or(self.loss_notice_rounds),
            stroke: flags.stroke.or(self.stroke),
        }
    }

    /// The stroke the bound charges (the whole drive's when unset).
    pub fn stroke(&self) -> Stroke {
        self.stroke.unwrap_or_default()
    }

    /// L (0 when unset).
    pub fn loss_notice(&self) -> u32 {
        self.loss_notice_rounds.unwrap_or(0)
    }

    /// k of the backup window (1 when unset).
    pub fn backup_window(&self) -> u32 {
        self.backup_window_rounds.unwrap_or(1)
    }

    /// Checks the values' ranges; the reason names the field.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if let Some(k) = self.backup_window_rounds
            && !(1..=BACKUP_WINDOW_ROUNDS_MAX).contains(&k)
        {
            return Err(format!(
                "serving.backup_window_rounds {k} is outside 1..={BACKUP_WINDOW_ROUNDS_MAX}"
            ));
        }
        if let Some(p) = self.overrun_probability
            && !(p > 0.0 && p < 1.0)
        {
            return Err(format!("serving.overrun_probability {p} is outside (0, 1)"));
        }
        if let Some(l) = self.loss_notice_rounds
            && l > LOSS_NOTICE_ROUNDS_MAX
        {
            return Err(format!(
                "serving.loss_notice_rounds {l} is outside 0..={LOSS_NOTICE_ROUNDS_MAX}"
            ));
        }
        Ok(())
    }
}

// rondo.toml's fields compare exactly; the probability is never NaN
// (`ServingSettings::validate`).
impl Eq for ServingSettings {}

fn one() -> u32 {
    1
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// Runtime flags that may restate what a data directory fixes; `None` = not
/// given. Checked by [`ArrayConfig::check_flags`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirectoryFlags {
    /// `--disks`
    pub disk_count: Option<u32>,
    /// `--stride-bytes`
    pub stride_bytes: Option<u64>,
    /// `--block-bytes`
    pub block_bytes: Option<u64>,
    /// `--round-ms`, in ns
    pub round_duration_ns: Option<u64>,
    /// `--profile`
    pub disk_profile: Option<String>,
    /// `--scheme`
    pub scheme: Option<Scheme>,
    /// `--placement`
    pub placement: Option<ReplicaPlacement>,
    /// `--backup-block-bytes`
    pub backup_block_bytes: Option<u64>,
    /// `--segment-rounds` (1 for `--layout variable-grain`)
    pub segment_rounds: Option<u32>,
    /// `--disk-groups`
    pub disk_groups: Option<u32>,
    /// `--stripe-disks`
    pub stripe_disks: Option<u32>,
}

fn placement_name(placement: ReplicaPlacement) -> &'static str {
    match placement {
        ReplicaPlacement::Deterministic => "deterministic",
        ReplicaPlacement::Random => "random",
    }
}

impl ArrayConfig {
    /// The configuration a new directory gets from `config`, with `array_id`
    /// drawn already.
    pub(crate) fn from_store_config(config: &StoreConfig, array_id: ArrayId) -> ArrayConfig {
        let devices = (0..config.disk_count)
            .map(|k| DeviceEntry {
                path: match &config.device_paths {
                    Some(paths) => paths[k as usize].clone(),
                    None => PathBuf::from(format!("disk-{k}.dev")),
                },
                capacity_bytes: config.capacity_bytes,
            })
            .collect();
        ArrayConfig {
            format_version: FORMAT_VERSION,
            array_id,
            disk_count: config.disk_count,
            stride_bytes: config.stride_bytes,
            block_bytes: config.block_bytes,
            round_duration_ns: config.round_duration_ns,
            disk_profile: config.disk_profile.clone(),
            scheme: config.scheme,
            placement: config.placement,
            backup_block_bytes: config.backup_block_bytes,
            round_robin_counter: config.round_robin_counter,
            segment_rounds: config.segment_rounds,
            disk_groups: config.disk_groups,
            stripe_disks: config.stripe_disks,
            header_region_bytes: HEADER_REGION_BYTES,
            devices,
            serving: ServingSettings::default(),
        }
    }

    /// The layout parameters every title of this array is planned with.
    pub fn layout_params(&self) -> LayoutParams {
        LayoutParams {
            disk_count: self.disk_count,
            stride_bytes: self.stride_bytes,
            block_bytes: self.block_bytes,
            backup: self.scheme.stores_backup().then_some(BackupParams {
                placement: self.placement,
                backup_block_bytes: self.backup_block_bytes,
                // Declustered data directories use the original fragment
                // rule (docs/layout.md).
                fragment_sequence: Default::default(),
                round_robin_counter: self.round_robin_counter,
                disk_groups: self.disk_groups,
            }),
            segment_rounds: self.segment_rounds,
            stripe_disks: self.stripe_disks,
        }
    }

    /// Strides on each disk (a partial stride at the end is not used).
    pub fn stride_counts(&self) -> Vec<u64> {
        self.devices
            .iter()
            .map(|d| d.capacity_bytes / self.stride_bytes)
            .collect()
    }

    /// The path of disk `k`'s device, relative paths taken inside `dir`.
    pub fn device_path(&self, dir: &Path, k: usize) -> PathBuf {
        let path = &self.devices[k].path;
        if path.is_absolute() {
            path.clone()
        } else {
            dir.join(path)
        }
    }

    /// Checks the relations the store relies on; the reason names the field.
    pub fn validate(&self) -> Result<(), String> {
        if self.format_version != FORMAT_VERSION {
            return Err(format!(
                "format_version {} is not {FORMAT_VERSION}",
                self.format_version
            ));
        }
        self.layout_params().validate().map_err(|e| e.to_string())?;
        if !self.block_bytes.is_multiple_of(IO_ALIGN_BYTES) {
            return Err(format!(
                "block_bytes {} is not a multiple of {IO_ALIGN_BYTES} bytes (needed for O_DIRECT)",
                self.block_bytes
            ));
        }
        if self.backup_block_bytes.is_some() && !self.scheme.stores_backup() {
            return Err(format!(
                "backup_block_bytes is set but scheme {} stores no backup",
                self.scheme
            ));
        }
        if self.round_duration_ns == 0 {
            return Err("round_duration_ns must be positive".into());
        }
        if self.disk_profile.trim().is_empty() {
            return Err("disk_profile must be named".into());
        }
        if self.header_region_bytes < IO_ALIGN_BYTES
            || !self.header_region_bytes.is_multiple_of(IO_ALIGN_BYTES)
        {
            return Err(format!(
                "header_region_bytes {} is not a positive multiple of {IO_ALIGN_BYTES}",
                self.header_region_bytes
            ));
        }
        if self.devices.len() != self.disk_count as usize {
            return Err(format!(
                "disk_count is {} but {} devices are listed",
                self.disk_count,
                self.devices.len()
            ));
        }
        for (k, device) in self.devices.iter().enumerate() {
            if device.capacity_bytes < self.stride_bytes {
                return Err(format!(
                    "device {k} ({}) has capacity {} bytes, less than one {}-byte stride",
                    device.path.display(),
                    device.capacity_bytes,
                    self.stride_bytes
                ));
            }
            if device.path.as_os_str().is_empty() {
                return Err(format!("device {k} has an empty path"));
            }
        }
        for (i, a) in self.devices.iter().enumerate() {
            if self.devices[..i].iter().any(|b| b.path == a.path) {
                return Err(format!("device path {} is listed twice", a.path.display()));
            }
        }
        self.serving.validate()
    }

    /// Reads and validates `dir/rondo.toml`. The format version is checked
    /// before the rest, so a newer format is reported as such rather than as
    /// an unknown field.
    pub fn load(dir: &Path) -> Result<ArrayConfig> {
        let path = dir.join(CONFIG_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::NotADataDirectory {
                    dir: dir.to_path_buf(),
                });
            }
            Err(e) => return Err(StoreError::io(format!("reading {}", path.display()), e)),
        };
        let bad = |reason: String| StoreError::BadConfig {
            path: path.clone(),
            reason,
        };
        let table: toml::Table = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let version = table
            .get("format_version")
            .and_then(|v| v.as_integer())
            .ok_or_else(|| bad("format_version is missing".into()))?;
        if version > i64::from(FORMAT_VERSION) {
            return Err(StoreError::UnsupportedFormat {
                path,
                found: u32::try_from(version).unwrap_or(u32::MAX),
                supported: FORMAT_VERSION,
            });
        }
        let config: ArrayConfig = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
        config.validate().map_err(bad)?;
        Ok(config)
    }

    /// The text of rondo.toml.
    pub fn to_toml(&self) -> String {
        let body = toml::to_string(self).expect("the configuration serialises");
        format!(
            "# rondo data directory: fixed when the directory was created.\n\
             # Runtime flags that contradict these values are refused.\n{body}"
        )
    }

    /// Refuses runtime flags that contradict the directory, with the first
    /// contradiction as the error ("data directory has 4 disks; --disks 8
    /// contradicts it").
    pub fn check_flags(&self, flags: &DirectoryFlags) -> Result<()> {
        fn conflict(flag: &'static str, flag_value: String, dir_value: String) -> StoreError {
            StoreError::FlagConflict {
                flag,
                flag_value,
                dir_value,
            }
        }
        if let Some(d) = flags.disk_count
            && d != self.disk_count
        {
            return Err(conflict(
                "--disks",
                d.to_string(),
                format!("{} disks", self.disk_count),
            ));
        }
        if let Some(b) = flags.stride_bytes
            && b != self.stride_bytes
        {
            return Err(conflict(
                "--stride-bytes",
                b.to_string(),
                format!("{}-byte strides", self.stride_bytes),
            ));
        }
        if let Some(b) = flags.block_bytes
            && b != self.block_bytes
        {
            return Err(conflict(
                "--block-bytes",
                b.to_string(),
                format!("{}-byte blocks", self.block_bytes),
            ));
        }
        if let Some(t) = flags.round_duration_ns
            && t != self.round_duration_ns
        {
            return Err(conflict(
                "--round-ms",
                ms_text(t),
                format!("{} ms rounds", ms_text(self.round_duration_ns)),
            ));
        }
        if let Some(p) = &flags.disk_profile
            && *p != self.disk_profile
        {
            return Err(conflict(
                "--profile",
                p.clone(),
                format!("disk profile {}", self.disk_profile),
            ));
        }
        if let Some(s) = flags.scheme
            && s != self.scheme
        {
            return Err(conflict(
                "--scheme",
                s.to_string(),
                format!("reservation scheme {}", self.scheme),
            ));
        }
        if let Some(p) = flags.placement
            && p != self.placement
        {
            return Err(conflict(
                "--placement",
                placement_name(p).into(),
                format!("{} placement", placement_name(self.placement)),
            ));
        }
        if let Some(b) = flags.backup_block_bytes
            && Some(b) != self.backup_block_bytes
        {
            let dir_value = match self.backup_block_bytes {
                Some(own) => format!("backup blocks (B_d) of {own} bytes"),
                None => "no backup declustering (no B_d)".into(),
            };
            return Err(conflict("--backup-block-bytes", b.to_string(), dir_value));
        }
        if let Some(n) = flags.segment_rounds
            && n != self.segment_rounds
        {
            let layout = |n: u32| match n {
                1 => "the variable-grain layout".to_string(),
                n => format!("the segments layout ({n} rounds per segment)"),
            };
            return Err(conflict(
                "--layout/--segment-rounds",
                layout(n),
                layout(self.segment_rounds),
            ));
        }
        if let Some(g) = flags.disk_groups
            && g != self.disk_groups
        {
            return Err(conflict(
                "--disk-groups",
                g.to_string(),
                format!("{} disk group(s)", self.disk_groups),
            ));
        }
        if let Some(w) = flags.stripe_disks
            && w != self.stripe_disks
        {
            let width = |w: u32| match w {
                0 => "titles striped over every disk".to_string(),
                w => format!("titles striped over {w} disks"),
            };
            return Err(conflict(
                "--stripe-disks",
                width(w),
                width(self.stripe_disks),
            ));
        }
        Ok(())
    }
}

/// Milliseconds for messages: integral when exact.
fn ms_text(ns: u64) -> String {
    if ns.is_multiple_of(NS_PER_MS) {
        (ns / NS_PER_MS).to_string()
    } else {
        format!("{}", ns as f64 / NS_PER_MS as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ArrayConfig {
        let mut c = StoreConfig::new(4, "cheetah-4lp", 64 * 1024 * 1024);
        c.array_id = Some(ArrayId::from_seed(7));
        ArrayConfig::from_store_config(&c, ArrayId::from_seed(7))
    }

    /// Disk groups are kept in rondo.toml (absent when 1, as in directories
    /// made before them), checked against the disk count, and a contradicting
    /// flag is refused by name.
    #[test]
    fn disk_groups_round_trip_and_are_checked() {
        let one = config();
        assert!(!one.to_toml().contains("disk_groups"));
        let mut c = StoreConfig::new(4, "cheetah-4lp", 64 * 1024 * 1024);
        c.disk_groups = 2;
        let two = ArrayConfig::from_store_config(&c, ArrayId::from_seed(7));
        let text = two.to_toml();
        assert!(text.contains("disk_groups = 2"), "{text}");
        let back: ArrayConfig = toml::from_str(text.trim_start_matches(|c| c != '\n')).unwrap();
        assert_eq!(back.layout_params().backup.unwrap().disk_groups, 2);
        assert!(two.validate().is_ok());
        c.disk_groups = 3;
        let three = ArrayConfig::from_store_config(&c, ArrayId::from_seed(7));
        let e = three.validate().unwrap_err();
        assert!(e.contains("3 disk groups"), "{e}");
        let e = two
            .check_flags(&DirectoryFlags {
                disk_groups: Some(1),
                ..DirectoryFlags::default()
            })
            .unwrap_err()
            .to_string();
        assert!(e.contains("--disk-groups"), "{e}");
    }

    /// The stripe width is kept in rondo.toml (absent for every disk, as in
    /// directories made before it), reaches the layout, is checked against
    /// the disk count, and a contradicting flag is refused by name.
    #[test]
    fn stripe_disks_round_trip_and_are_checked() {
        assert!(!config().to_toml().contains("stripe_disks"));
        let mut c = StoreConfig::new(4, "cheetah-4lp", 64 * 1024 * 1024);
        c.stripe_disks = 2;
        let two = ArrayConfig::from_store_config(&c, ArrayId::from_seed(7));
        let text = two.to_toml();
        assert!(text.contains("stripe_disks = 2"), "{text}");
        let back: ArrayConfig = toml::from_str(text.trim_start_matches(|c| c != '\n')).unwrap();
        assert_eq!(back.layout_params().stripe_disks, 2);
        assert_eq!(back.layout_params().stripe_width(), 2);
        assert!(two.validate().is_ok());
        c.stripe_disks = 5;
        let e = ArrayConfig::from_store_config(&c, ArrayId::from_seed(7))
            .validate()
            .unwrap_err();
        assert!(e.contains("5 disks of a 4-disk array"), "{e}");
        let e = two
            .check_flags(&DirectoryFlags {
                stripe_disks: Some(0),
                ..DirectoryFlags::default()
            })
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--stripe-disks") && e.contains("over 2 disks"),
            "{e}"
        );
    }

    #[test]
    fn array_id_hex_round_trip_and_seeded_ids_differ() {
        let id = ArrayId::from_seed(1);
        assert_eq!(ArrayId::parse_hex(&id.to_string()), Some(id));
        assert_ne!(ArrayId::from_seed(1), ArrayId::from_seed(2));
        assert_eq!(ArrayId::parse_hex("zz"), None);
        assert_eq!(ArrayId::parse_hex(&"g".repeat(32)), None);
        assert_ne!(ArrayId::random().unwrap(), ArrayId::random().unwrap());
    }

    #[test]
    fn toml_round_trip() {
        let c = config();
        let back: ArrayConfig = toml::from_str(&c.to_toml()).unwrap();
        assert_eq!(back, c);
        let mut declustered = c.clone();
        declustered.backup_block_bytes = Some(64 * 1024);
        let back: ArrayConfig = toml::from_str(&declustered.to_toml()).unwrap();
        assert_eq!(back, declustered);
    }

    /// A directory's serving settings are a `[serving]` table, absent when
    /// they are the defaults; a run's flags override them; out-of-range
    /// values are refused naming the field.
    #[test]
    fn serving_settings_round_trip_override_and_validate() {
        let c = config();
        assert!(!c.to_toml().contains("[serving]"), "{}", c.to_toml());
        let mut s = c.clone();
        s.serving = ServingSettings {
            backup_window_rounds: Some(4),
            overrun_probability: Some(1e-6),
            loss_notice_rounds: Some(2),
            stroke: Some(Stroke::Data),
        };
        let text = s.to_toml();
        assert!(
            text.contains("[serving]")
                && text.contains("backup_window_rounds = 4")
                && text.contains("loss_notice_rounds = 2")
                && text.contains("stroke = \"data\""),
            "{text}"
        );
        let back: ArrayConfig = toml::from_str(&text).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.serving.backup_window(), 4);
        let run = s.serving.overridden_by(&ServingSettings {
            backup_window_rounds: Some(2),
            overrun_probability: None,
            loss_notice_rounds: Some(0),
            stroke: Some(Stroke::Whole),
        });
        assert_eq!(run.backup_window_rounds, Some(2));
        assert_eq!(run.stroke(), Stroke::Whole);
        assert_eq!(s.serving.stroke(), Stroke::Data);
        assert_eq!(c.serving.stroke(), Stroke::Whole);
        assert_eq!(run.overrun_probability, Some(1e-6));
        assert_eq!(run.loss_notice(), 0);
        assert_eq!(s.serving.loss_notice(), 2);
        assert_eq!(c.serving.backup_window(), 1);
        assert_eq!(c.serving.loss_notice(), 0);
        let mut bad = s.clone();
        bad.serving.backup_window_rounds = Some(0);
        assert!(
            bad.validate()
                .unwrap_err()
                .contains("serving.backup_window_rounds 0")
        );
        let mut bad = s.clone();
        bad.serving.loss_notice_rounds = Some(LOSS_NOTICE_ROUNDS_MAX + 1);
        assert!(
            bad.validate()
                .unwrap_err()
                .contains("serving.loss_notice_rounds 5")
        );
        let mut bad = s.clone();
        bad.serving.overrun_probability = Some(1.5);
        assert!(
            bad.validate()
                .unwrap_err()
                .contains("serving.overrun_probability")
        );
        let unknown = text.replace("backup_window_rounds", "backup_window");
        assert!(toml::from_str::<ArrayConfig>(&unknown).is_err());
    }

    #[test]
    fn directories_from_before_the_counter_option_stay_per_disk() {
        // New directories record the per-title counter; a rondo.toml written
        // before the option existed has no such line and was laid out with
        // the per-disk counter, which is what it must keep planning with.
        let c = config();
        let text = c.to_toml();
        assert!(
            text.contains("round_robin_counter = \"per-title\""),
            "{text}"
        );
        assert_eq!(
            c.layout_params().backup.unwrap().round_robin_counter,
            RoundRobinCounter::PerTitle
        );
        let old_text: String = text
            .lines()
            .filter(|l| !l.starts_with("round_robin_counter"))
            .map(|l| format!("{l}\n"))
            .collect();
        let old: ArrayConfig = toml::from_str(&old_text).unwrap();
        assert_eq!(old.round_robin_counter, RoundRobinCounter::PerDisk);
        assert_eq!(
            old.layout_params().backup.unwrap().round_robin_counter,
            RoundRobinCounter::PerDisk
        );
    }

    #[test]
    fn validation_names_the_field() {
        let mut c = config();
        c.block_bytes = 2048;
        c.stride_bytes = 2048 * 64;
        assert!(c.validate().unwrap_err().contains("block_bytes 2048"));
        let mut c = config();
        c.devices.pop();
        assert!(c.validate().unwrap_err().contains("3 devices"));
        let mut c = config();
        c.scheme = Scheme::None;
        c.backup_block_bytes = Some(16384);
        assert!(c.validate().unwrap_err().contains("stores no backup"));
        let mut c = config();
        c.devices[1].path = c.devices[0].path.clone();
        assert!(c.validate().unwrap_err().contains("listed twice"));
        assert_eq!(config().validate(), Ok(()));
    }

    #[test]
    fn flags_that_contradict_the_directory_are_refused() {
        let c = config();
        let same = DirectoryFlags {
            disk_count: Some(4),
            disk_profile: Some("cheetah-4lp".into()),
            round_duration_ns: Some(ROUND_DURATION_NS_DEFAULT),
            scheme: Some(Scheme::Minimum),
            ..DirectoryFlags::default()
        };
        c.check_flags(&same).unwrap();
        c.check_flags(&DirectoryFlags::default()).unwrap();
        let err = c
            .check_flags(&DirectoryFlags {
                disk_count: Some(8),
                ..DirectoryFlags::default()
            })
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "data directory has 4 disks; --disks 8 contradicts it"
        );
        let err = c
            .check_flags(&DirectoryFlags {
                disk_profile: Some("ssd".into()),
                ..DirectoryFlags::default()
            })
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "data directory has disk profile cheetah-4lp; --profile ssd contradicts it"
        );
        let err = c
            .check_flags(&DirectoryFlags {
                round_duration_ns: Some(500 * NS_PER_MS),
                ..DirectoryFlags::default()
            })
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "data directory has 1000 ms rounds; --round-ms 500 contradicts it"
        );
        let err = c
            .check_flags(&DirectoryFlags {
                backup_block_bytes: Some(65536),
                ..DirectoryFlags::default()
            })
            .unwrap_err();
        assert!(err.to_string().contains("no backup declustering"), "{err}");
        let err = c
            .check_flags(&DirectoryFlags {
                placement: Some(ReplicaPlacement::Random),
                ..DirectoryFlags::default()
            })
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "data directory has deterministic placement; --placement random contradicts it"
        );
    }
}
