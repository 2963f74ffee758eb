//! `fsck`: checks a data directory end to end without changing it, and
//! reports every problem it finds in words an operator can act on.
//!
//! It checks rondo.toml, every device header, the catalog's schema version,
//! `PRAGMA integrity_check` and foreign keys, that the strides of all titles
//! are disjoint and inside their disks, that every complete title's extents
//! are exactly the ones its plan and strides give and lie inside strides the
//! title owns, and that every extent's checksum matches the bytes on its
//! device. Titles left `writing` by a crash are listed as orphans: they are
//! expected after a crash and are removed by the next open, so they do not
//! fail the check.
//!
//! A directory with no problem can still be *degraded*: disks recorded
//! failed (their data has one copy left), or rounds of titles with no
//! working replica (both copies on failed disks or failing their
//! checksums). [`FsckReport::status`] says which: passed, degraded or
//! failed; `rondo fsck` exits 0, 2 and 1 for them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rondo_model::layout::{Replica, TitleLayout, TitlePlan};
use rondo_model::schedule::Schedule;
use rondo_model::units::{DiskIndex, TitleId};
use rusqlite::Connection;
use serde::Serialize;

use crate::catalog::{self, CATALOG_FILE, SCHEMA_VERSION};
use crate::config::{ArrayConfig, CONFIG_FILE, IO_ALIGN_BYTES};
use crate::device::{AlignedBuf, Device, IoMode};
use crate::disk_state::{DISK_STATE_FILE, DiskStates};
use crate::extent_faults::ExtentFaultRecords;
use crate::store::{TitleRecord, device_is_missing_or_blank, expected_header, lock_dir};

/// What part of the directory a problem is in.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProblemKind {
    /// rondo.toml is missing or invalid.
    Config,
    /// Another process owns the directory.
    Lock,
    /// A device is missing, foreign, reordered, damaged or too small.
    Device,
    /// The catalog cannot be opened, has the wrong schema or fails SQLite's checks.
    Catalog,
    /// Strides overlap, are out of range or do not match a title's plan.
    Strides,
    /// An extent is not where the title's layout puts it.
    Extent,
    /// An extent's bytes do not match its checksum.
    Checksum,
}

/// One problem found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FsckProblem {
    pub kind: ProblemKind,
    pub message: String,
}

/// A title left `writing` (an interrupted ingest).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Orphan {
    pub id: u64,
    pub name: String,
    pub strides: u64,
}

/// What fsck found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FsckReport {
    pub dir: PathBuf,
    pub problems: Vec<FsckProblem>,
    pub orphans: Vec<Orphan>,
    pub titles_checked: u64,
    pub extents_checked: u64,
    pub bytes_checked: u64,
    /// Disks recorded failed (`disk-state.toml`): their devices are not
    /// read, since they are broken or await a rebuild.
    pub failed_disks: Vec<DiskIndex>,
    /// Extents on those disks, not checked.
    pub extents_skipped: u64,
    /// Rounds of titles with no working replica: every copy is on a failed
    /// disk, unreadable or fails its checksum.
    pub lost_rounds: Vec<LostData>,
}

/// A round of a title with no working replica.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LostData {
    pub title: u64,
    pub name: String,
    pub round: u32,
}

/// fsck's verdict.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FsckStatus {
    /// No problem, every disk serving, every round with a working replica.
    Passed,
    /// No problem in the directory's structure, but disks are failed or
    /// some rounds have no working replica.
    Degraded,
    /// Problems found.
    Failed,
}

impl FsckReport {
    /// Whether no problem was found (orphans alone pass).
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }

    /// Passed, degraded (failed disks, or data with no working replica) or
    /// failed (problems).
    pub fn status(&self) -> FsckStatus {
        if !self.problems.is_empty() {
            FsckStatus::Failed
        } else if !self.failed_disks.is_empty() || !self.lost_rounds.is_empty() {
            FsckStatus::Degraded
        } else {
            FsckStatus::Passed
        }
    }

    /// The problems of one kind.
    pub fn problems_of(&self, kind: ProblemKind) -> impl Iterator<Item = &FsckProblem> {
        self.problems.iter().filter(move |p| p.kind == kind)
    }

    fn problem(&mut self, kind: ProblemKind, message: impl Into<String>) {
        self.problems.push(FsckProblem {
            kind,
            message: message.into(),
        });
    }
}

impl fmt::Display for ProblemKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            ProblemKind::Config => "config",
            ProblemKind::Lock => "lock",
            ProblemKind::Device => "device",
            ProblemKind::Catalog => "catalog",
            ProblemKind::Strides => "strides",
            ProblemKind::Extent => "extent",
            ProblemKind::Checksum => "checksum",
        };
        f.write_str(name)
    }
}

impl fmt::Display for FsckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = match self.status() {
            FsckStatus::Passed => "passed".to_string(),
            FsckStatus::Degraded => format!(
                "DEGRADED: {} failed disk(s), {} round(s) with no working replica",
                self.failed_disks.len(),
                self.lost_rounds.len()
            ),
            FsckStatus::Failed => format!("FAILED with {} problem(s)", self.problems.len()),
        };
        writeln!(f, "fsck {}: {verdict}", self.dir.display())?;
        writeln!(
            f,
            "  checked {} complete title(s), {} extent(s), {} bytes",
            self.titles_checked, self.extents_checked, self.bytes_checked
        )?;
        for &disk in &self.failed_disks {
            writeln!(
                f,
                "  disk {disk} is failed (recorded in {DISK_STATE_FILE}): its device was not \
                 read; its data is served from the other replicas until `rondo admin \
                 restore-disk {disk}` rebuilds it"
            )?;
        }
        if self.extents_skipped > 0 {
            writeln!(
                f,
                "  {} extent(s) on failed disks not checked",
                self.extents_skipped
            )?;
        }
        for lost in &self.lost_rounds {
            writeln!(
                f,
                "  title {} {:?} round {} has no working replica (both copies on failed disks, \
                 unreadable or failing their checksums): streams of it stop there",
                lost.title, lost.name, lost.round
            )?;
        }
        for orphan in &self.orphans {
            writeln!(
                f,
                "  orphan: title {} {:?} was being written when the store stopped ({} strides); \
                 the next open removes it",
                orphan.id, orphan.name, orphan.strides
            )?;
        }
        for problem in &self.problems {
            writeln!(f, "  [{}] {}", problem.kind, problem.message)?;
        }
        Ok(())
    }
}

/// Checks the data directory at `dir`, which no other process may hold open
/// (stop the server first, or use [`crate::Store::fsck`] on the open store).
/// Changes nothing.
pub fn fsck(dir: impl AsRef<Path>) -> FsckReport {
    fsck_with_devices_elsewhere(dir, &[])
}

/// [`fsck()`] for a directory whose disks may be held elsewhere: a disk whose
/// device the directory does not hold (missing or blank) is read through
/// its entry in `elsewhere` (a cluster's storage node that holds it), as
/// the manager reads it.
pub fn fsck_with_devices_elsewhere(
    dir: impl AsRef<Path>,
    elsewhere: &[(DiskIndex, Arc<dyn crate::RemoteDevice>)],
) -> FsckReport {
    let dir = dir.as_ref();
    let mut report = FsckReport {
        dir: dir.to_path_buf(),
        ..FsckReport::default()
    };
    if !dir.join(CONFIG_FILE).exists() {
        report.problem(
            ProblemKind::Config,
            format!(
                "{} has no rondo.toml: not a rondo data directory",
                dir.display()
            ),
        );
        return report;
    }
    let _lock = match lock_dir(dir) {
        Ok(lock) => lock,
        Err(e) => {
            report.problem(ProblemKind::Lock, e.to_string());
            return report;
        }
    };
    let config = match ArrayConfig::load(dir) {
        Ok(config) => config,
        Err(e) => {
            report.problem(ProblemKind::Config, e.to_string());
            return report;
        }
    };
    match DiskStates::load(dir, config.disk_count) {
        Ok(states) => report.failed_disks = states.failed_disks(),
        Err(e) => report.problem(ProblemKind::Config, e.to_string()),
    }
    // The server's record of bad extents and lost rounds must load (the
    // rounds it lists are found again below, by their checksums).
    if let Err(e) = ExtentFaultRecords::load(dir, config.disk_count) {
        report.problem(ProblemKind::Config, e.to_string());
    }
    let mut devices = Vec::with_capacity(config.devices.len());
    for k in 0..config.devices.len() {
        if report.failed_disks.contains(&DiskIndex(k as u32)) {
            devices.push(None);
            continue;
        }
        let path = config.device_path(dir, k);
        let disk = DiskIndex(k as u32);
        let header = expected_header(&config, k);
        let remote = elsewhere.iter().find(|(d, _)| *d == disk).map(|(_, r)| r);
        match Device::open(&path, disk, &header, IoMode::Direct) {
            Ok(device) => devices.push(Some(Arc::new(device))),
            Err(e) if remote.is_some() && device_is_missing_or_blank(&e) => {
                let remote = Arc::clone(remote.expect("checked"));
                devices.push(Some(Arc::new(Device::remote(disk, &header, remote))));
            }
            Err(e) => {
                report.problem(ProblemKind::Device, e.to_string());
                devices.push(None);
            }
        }
    }
    let catalog_path = dir.join(CATALOG_FILE);
    let conn = match catalog::open(&catalog_path, false) {
        Ok(conn) => conn,
        Err(e) => {
            report.problem(ProblemKind::Catalog, e.to_string());
            return report;
        }
    };
    match catalog::schema_version(&conn) {
        Ok(Some(SCHEMA_VERSION)) => {}
        Ok(Some(found)) => {
            report.problem(
                ProblemKind::Catalog,
                format!(
                    "{}: schema version {found}, this rondo checks version {SCHEMA_VERSION}{}",
                    catalog_path.display(),
                    if found < SCHEMA_VERSION {
                        " (opening the store migrates it)"
                    } else {
                        " (use a newer rondo)"
                    }
                ),
            );
            return report;
        }
        Ok(None) => {
            report.problem(
                ProblemKind::Catalog,
                format!(
                    "{} is not a rondo catalog (no schema_version table)",
                    catalog_path.display()
                ),
            );
            return report;
        }
        Err(e) => {
            report.problem(ProblemKind::Catalog, e.to_string());
            return report;
        }
    }
    check_catalog(&mut report, &config, &devices, &conn);
    report
}

/// Checks an open store's catalog and extents (its devices were validated
/// when it opened).
pub(crate) fn check_open(
    dir: &Path,
    config: &ArrayConfig,
    devices: &[Arc<Device>],
    conn: &Connection,
) -> FsckReport {
    let mut report = FsckReport {
        dir: dir.to_path_buf(),
        ..FsckReport::default()
    };
    match DiskStates::load(dir, config.disk_count) {
        Ok(states) => report.failed_disks = states.failed_disks(),
        Err(e) => report.problem(ProblemKind::Config, e.to_string()),
    }
    let devices: Vec<Option<Arc<Device>>> = devices
        .iter()
        .enumerate()
        .map(|(k, d)| (!report.failed_disks.contains(&DiskIndex(k as u32))).then(|| Arc::clone(d)))
        .collect();
    check_catalog(&mut report, config, &devices, conn);
    report
}

fn replica_word(replica: Replica) -> &'static str {
    catalog::replica_name(replica)
}

fn check_catalog(
    report: &mut FsckReport,
    config: &ArrayConfig,
    devices: &[Option<Arc<Device>>],
    conn: &Connection,
) {
    // SQLite's own structural check first: nothing below is trustworthy
    // without it, but what can still be read is still checked.
    let integrity: Result<Vec<String>, _> = conn
        .prepare("PRAGMA integrity_check")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect());
    match integrity {
        Ok(lines) if lines == ["ok"] => {}
        Ok(lines) => {
            for line in lines {
                report.problem(ProblemKind::Catalog, format!("integrity_check: {line}"));
            }
        }
        Err(e) => report.problem(ProblemKind::Catalog, format!("integrity_check failed: {e}")),
    }
    let foreign: Result<Vec<(String, i64, String)>, _> =
        conn.prepare("PRAGMA foreign_key_check").and_then(|mut s| {
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect()
        });
    match foreign {
        Ok(rows) => {
            for (table, rowid, parent) in rows {
                report.problem(
                    ProblemKind::Catalog,
                    format!("{table} row {rowid} refers to a missing {parent} row"),
                );
            }
        }
        Err(e) => report.problem(
            ProblemKind::Catalog,
            format!("foreign_key_check failed: {e}"),
        ),
    }
    match catalog::info(conn, catalog::INFO_ARRAY_ID) {
        Ok(Some(id)) if id == config.array_id.to_string() => {}
        Ok(found) => report.problem(
            ProblemKind::Catalog,
            format!(
                "the catalog belongs to array {}, rondo.toml says {}",
                found.unwrap_or_else(|| "(none)".into()),
                config.array_id
            ),
        ),
        Err(e) => report.problem(ProblemKind::Catalog, e.to_string()),
    }

    let (titles, stride_rows) = match (
        catalog::title_rows(conn, false),
        catalog::stride_rows(conn, None),
    ) {
        (Ok(t), Ok(s)) => (t, s),
        (Err(e), _) | (_, Err(e)) => {
            report.problem(ProblemKind::Catalog, e.to_string());
            return;
        }
    };
    let stride_counts = config.stride_counts();
    let names: HashMap<TitleId, String> = titles.iter().map(|t| (t.id, t.name.clone())).collect();
    let describe = |id: TitleId| match names.get(&id) {
        Some(name) => format!("title {} {name:?}", id.0),
        None => format!("title {} (no such title)", id.0),
    };

    // Strides: in range and held by one (title, replica) at most, over every
    // title including orphans, whose strides are allocated too.
    let mut owner: BTreeMap<(DiskIndex, u64), (TitleId, Replica)> = BTreeMap::new();
    for row in &stride_rows {
        match stride_counts.get(row.disk.index()) {
            None => report.problem(
                ProblemKind::Strides,
                format!(
                    "{} holds a stride on disk {}, but the array has {} disks",
                    describe(row.title),
                    row.disk,
                    config.disk_count
                ),
            ),
            Some(&count) if row.stride_index >= count => report.problem(
                ProblemKind::Strides,
                format!(
                    "{} holds stride {} of disk {}, beyond its {count} strides",
                    describe(row.title),
                    row.stride_index,
                    row.disk
                ),
            ),
            Some(_) => {}
        }
        if let Some(&(other, other_replica)) = owner.get(&(row.disk, row.stride_index)) {
            report.problem(
                ProblemKind::Strides,
                format!(
                    "stride {} of disk {} is held by both {} ({}) and {} ({})",
                    row.stride_index,
                    row.disk,
                    describe(other),
                    replica_word(other_replica),
                    describe(row.title),
                    replica_word(row.replica)
                ),
            );
        } else {
            owner.insert((row.disk, row.stride_index), (row.title, row.replica));
        }
    }

    let mut buf = AlignedBuf::zeroed(config.stride_bytes as usize);
    for title in titles {
        let start = stride_rows.partition_point(|r| r.title < title.id);
        let end = stride_rows.partition_point(|r| r.title <= title.id);
        let rows = &stride_rows[start..end];
        if !title.complete {
            report.orphans.push(Orphan {
                id: title.id.0,
                name: title.name.clone(),
                strides: rows.len() as u64,
            });
            continue;
        }
        report.titles_checked += 1;
        let label = describe(title.id);
        let strides = match catalog::assemble_strides(title.id, rows, config.disk_count) {
            Ok(s) => s,
            Err(reason) => {
                report.problem(ProblemKind::Strides, reason);
                continue;
            }
        };
        let record = match TitleRecord::from_row(title) {
            Ok(r) => r,
            Err(e) => {
                report.problem(ProblemKind::Catalog, e.to_string());
                continue;
            }
        };
        let plan = Schedule::from_client_bytes(
            record.client_bytes.clone(),
            record.round_duration_ns,
            config.block_bytes,
        )
        .map_err(|e| e.to_string())
        .and_then(|schedule| {
            TitlePlan::new(
                &schedule.disk_read_bytes,
                &config.layout_params(),
                record.start_disk,
                record.layout_seed,
            )
            .map_err(|e| e.to_string())
        });
        let plan = match plan {
            Ok(p) => p,
            Err(e) => {
                report.problem(
                    ProblemKind::Catalog,
                    format!("{label}: its plan cannot be recomputed: {e}"),
                );
                continue;
            }
        };
        let owned: BTreeSet<(DiskIndex, Replica, u64)> = strides.iter().collect();
        let layout = match TitleLayout::from_strides(&plan, strides) {
            Ok(l) => l,
            Err(e) => {
                report.problem(ProblemKind::Strides, format!("{label}: {e}"));
                continue;
            }
        };
        let extents = match catalog::extent_rows(conn, record.id) {
            Ok(e) => e,
            Err(e) => {
                report.problem(ProblemKind::Catalog, format!("{label}: {e}"));
                continue;
            }
        };

        // The extents the layout gives, keyed like the catalog's rows.
        let mut expected: BTreeMap<(u32, Replica, u32), (DiskIndex, u64, u64)> = BTreeMap::new();
        for (round, layout_round) in layout.rounds().iter().enumerate() {
            for (piece, e) in layout_round.primary.as_slice().iter().enumerate() {
                expected.insert(
                    (round as u32, Replica::Primary, piece as u32),
                    (
                        layout_round.primary_disk,
                        e.device_offset_bytes,
                        e.length_bytes,
                    ),
                );
            }
            let backups = layout_round
                .backups
                .iter()
                .flat_map(|b| b.extents.as_slice().iter().map(move |e| (b.disk, e)));
            for (piece, (disk, e)) in backups.enumerate() {
                expected.insert(
                    (round as u32, Replica::Backup, piece as u32),
                    (disk, e.device_offset_bytes, e.length_bytes),
                );
            }
        }

        let stride_bytes = config.stride_bytes;
        // Per round and replica: whether some extent of it is not good
        // (failed disk, unreadable, bad checksum); a round is lost when
        // every replica it has is.
        let mut not_good: BTreeMap<u32, [Option<bool>; 2]> = BTreeMap::new();
        let side = |r: Replica| usize::from(r == Replica::Backup);
        for extent in &extents {
            not_good.entry(extent.round).or_default()[side(extent.replica)].get_or_insert(false);
        }
        for extent in &extents {
            let mark_bad = |not_good: &mut BTreeMap<u32, [Option<bool>; 2]>| {
                not_good.entry(extent.round).or_default()[side(extent.replica)] = Some(true);
            };
            let key = (extent.round, extent.replica, extent.piece);
            let at = format!(
                "{label} round {} {} piece {} (disk {}, device offset {}, {} bytes)",
                extent.round,
                replica_word(extent.replica),
                extent.piece,
                extent.disk.0,
                extent.device_offset_bytes,
                extent.length_bytes
            );
            match expected.remove(&key) {
                Some(place) if place == (extent.disk, extent.device_offset_bytes, extent.length_bytes) => {}
                Some((disk, offset, length)) => report.problem(
                    ProblemKind::Extent,
                    format!(
                        "{at}: the layout puts it on disk {} at device offset {offset}, {length} bytes",
                        disk.0
                    ),
                ),
                None => report.problem(
                    ProblemKind::Extent,
                    format!("{at}: the title's layout has no such extent"),
                ),
            }
            let last_byte = extent
                .device_offset_bytes
                .saturating_add(extent.length_bytes.max(1) - 1);
            let first_stride = extent.device_offset_bytes / stride_bytes;
            if extent.length_bytes == 0
                || last_byte / stride_bytes != first_stride
                || !owned.contains(&(extent.disk, extent.replica, first_stride))
            {
                report.problem(
                    ProblemKind::Extent,
                    format!(
                        "{at}: not inside a {} stride the title owns",
                        replica_word(extent.replica)
                    ),
                );
                continue;
            }
            if !extent.device_offset_bytes.is_multiple_of(IO_ALIGN_BYTES)
                || !extent.length_bytes.is_multiple_of(IO_ALIGN_BYTES)
            {
                report.problem(
                    ProblemKind::Extent,
                    format!("{at}: not aligned to {IO_ALIGN_BYTES} bytes"),
                );
                continue;
            }
            let Some(Some(device)) = devices.get(extent.disk.0 as usize) else {
                // A failed disk is not read; a missing device's own problem
                // is already reported.
                if report.failed_disks.contains(&extent.disk) {
                    report.extents_skipped += 1;
                }
                mark_bad(&mut not_good);
                continue;
            };
            let bytes = &mut buf[..extent.length_bytes as usize];
            if let Err(e) = device.read_at(extent.device_offset_bytes, bytes) {
                report.problem(ProblemKind::Device, format!("{at}: {e}"));
                mark_bad(&mut not_good);
                continue;
            }
            report.extents_checked += 1;
            report.bytes_checked += extent.length_bytes;
            let found = crate::checksum(bytes);
            if found != extent.crc32c {
                mark_bad(&mut not_good);
                report.problem(
                    ProblemKind::Checksum,
                    format!(
                        "{at}: checksum mismatch: catalog has {:#010x}, the device holds bytes \
                         with {found:#010x}",
                        extent.crc32c
                    ),
                );
            }
        }
        for (round, replicas) in not_good {
            if replicas.iter().flatten().all(|&bad| bad) {
                report.lost_rounds.push(LostData {
                    title: record.id.0,
                    name: record.name.clone(),
                    round,
                });
            }
        }
        for ((round, replica, piece), (disk, offset, length)) in expected {
            report.problem(
                ProblemKind::Extent,
                format!(
                    "{label} round {round} {} piece {piece} (disk {}, device offset {offset}, \
                     {length} bytes) has no extent row: its checksum is missing",
                    replica_word(replica),
                    disk.0
                ),
            );
        }
    }
}
