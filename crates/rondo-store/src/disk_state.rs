//! Which disks of the array are failed, kept across restarts.
//!
//! A disk that failed (by an operator, or past the read-error threshold)
//! must stay failed when the server restarts: its device may be broken, or
//! it may be a replacement whose data has not been rebuilt yet, and reading
//! it would serve nothing or garbage. A disk leaves this list only when a
//! rebuild completes. An interrupted rebuild leaves it failed, so the
//! operator restores it again. Suspect disks are not kept: their error
//! counts start over.
//!
//! The list is `disk-state.toml` in the data directory, rewritten whole and
//! atomically (temp file, fsync, rename, fsync of the directory) at each
//! change; a missing file means every disk serves. The store reads no clock:
//! the caller passes the time of the failure.

use std::collections::BTreeMap;
use std::path::Path;

use rondo_model::units::DiskIndex;
use serde::{Deserialize, Serialize};

use crate::atomic::{invalid, read_toml_or_default, write_atomically};
use crate::error::Result;

/// The file, in the data directory.
pub const DISK_STATE_FILE: &str = "disk-state.toml";

/// Why and since when a disk is failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailedDisk {
    pub reason: String,
    /// Seconds since the Unix epoch, as the caller's clock gave it.
    pub since_unix_s: u64,
}

/// The failed disks, by disk index.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskStates {
    #[serde(default)]
    pub failed: BTreeMap<String, FailedDisk>,
}

impl DiskStates {
    /// Reads `dir/disk-state.toml`; none there means no failed disk.
    pub fn load(dir: &Path, disk_count: u32) -> Result<DiskStates> {
        let states: DiskStates = read_toml_or_default(dir, DISK_STATE_FILE)?;
        for key in states.failed.keys() {
            match key.parse::<u32>() {
                Ok(disk) if disk < disk_count => {}
                _ => {
                    return Err(invalid(
                        &dir.join(DISK_STATE_FILE),
                        format!(
                            "failed disk {key:?} is not a disk of this array (0..{disk_count})"
                        ),
                    ));
                }
            }
        }
        Ok(states)
    }

    /// The failed disks' indices, in order.
    pub fn failed_disks(&self) -> Vec<DiskIndex> {
        let mut disks: Vec<DiskIndex> = self.failed.keys().filter_map(|k| k.parse().ok()).collect();
        disks.sort_unstable();
        disks
    }

    pub fn is_failed(&self, disk: DiskIndex) -> bool {
        self.failed.contains_key(&disk.to_string())
    }

    /// Writes the list atomically.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let text = format!(
            "# Failed disks of this array, kept across restarts; written by rondo.\n\
             # A disk leaves this list when its rebuild completes (rondo admin restore-disk).\n{}",
            toml::to_string(self).expect("disk states serialise")
        );
        write_atomically(dir, DISK_STATE_FILE, text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_file_means_every_disk_serves_and_changes_round_trip() {
        let dir = tempfile::TempDir::new().unwrap();
        let states = DiskStates::load(dir.path(), 4).unwrap();
        assert!(states.failed_disks().is_empty());

        let mut states = states;
        states.failed.insert(
            "2".into(),
            FailedDisk {
                reason: "an operator failed it".into(),
                since_unix_s: 1_790_000_000,
            },
        );
        states.save(dir.path()).unwrap();
        let loaded = DiskStates::load(dir.path(), 4).unwrap();
        assert_eq!(loaded, states);
        assert_eq!(loaded.failed_disks(), vec![DiskIndex(2)]);
        assert!(loaded.is_failed(DiskIndex(2)) && !loaded.is_failed(DiskIndex(1)));
        assert!(!dir.path().join(format!("{DISK_STATE_FILE}.tmp")).exists());
    }

    #[test]
    fn a_damaged_or_foreign_file_is_refused_by_name() {
        let dir = tempfile::TempDir::new().unwrap();
        std::fs::write(dir.path().join(DISK_STATE_FILE), "failed = 3\n").unwrap();
        let e = DiskStates::load(dir.path(), 4).unwrap_err().to_string();
        assert!(e.contains(DISK_STATE_FILE), "{e}");

        std::fs::write(
            dir.path().join(DISK_STATE_FILE),
            "[failed.7]\nreason = \"x\"\nsince_unix_s = 1\n",
        )
        .unwrap();
        let e = DiskStates::load(dir.path(), 4).unwrap_err().to_string();
        assert!(e.contains("not a disk of this array"), "{e}");
    }
}
