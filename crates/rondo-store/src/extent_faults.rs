//! Bad extents and lost rounds, kept across restarts.
//!
//! The array repairs a bad extent (one replica that failed its checksum)
//! from its other replica in unreserved disk time, and a round whose
//! replicas are all bad is lost: streams that need it are refused. Neither
//! may be forgotten by a restart: a forgotten bad extent would wait for a
//! reader to find it again (and count again towards its disk's health), a
//! forgotten lost round would be admitted and stop its stream midway. The
//! server saves the array's [`ExtentFaults`] here when they change (from a
//! thread of its own, not the round driver), and gives them back to the
//! array at start.
//!
//! The file is `extent-faults.toml` in the data directory, rewritten whole
//! and atomically; a missing file means no known fault.

use std::path::Path;

use rondo_model::array::{ExtentFaults, LostRound};
use rondo_model::health::ExtentKey;
use rondo_model::layout::Replica;
use rondo_model::units::{DiskIndex, PlaybackRound, TitleId};
use serde::{Deserialize, Serialize};

use crate::atomic::{invalid, read_toml_or_default, write_atomically};
use crate::error::Result;

/// The file, in the data directory.
pub const EXTENT_FAULTS_FILE: &str = "extent-faults.toml";

/// One bad replica extent waiting for its repair.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BadExtentRecord {
    pub title: u64,
    pub playback_round: u32,
    pub replica: Replica,
    /// 0 for a primary; the backup entry for a backup piece.
    #[serde(default)]
    pub piece: u16,
    /// The disk the extent is on.
    pub disk: u32,
}

/// One round of a title with no good replica.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LostRoundRecord {
    pub title: u64,
    pub playback_round: u32,
}

/// The file's contents.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtentFaultRecords {
    #[serde(default)]
    pub bad: Vec<BadExtentRecord>,
    #[serde(default)]
    pub lost: Vec<LostRoundRecord>,
}

impl ExtentFaultRecords {
    pub fn from_faults(faults: &ExtentFaults) -> ExtentFaultRecords {
        ExtentFaultRecords {
            bad: faults
                .bad
                .iter()
                .map(|(k, disk)| BadExtentRecord {
                    title: k.title.0,
                    playback_round: k.playback_round.0,
                    replica: k.replica,
                    piece: k.piece,
                    disk: disk.0,
                })
                .collect(),
            lost: faults
                .lost
                .iter()
                .map(|l| LostRoundRecord {
                    title: l.title.0,
                    playback_round: l.playback_round.0,
                })
                .collect(),
        }
    }

    pub fn to_faults(&self) -> ExtentFaults {
        ExtentFaults {
            bad: self
                .bad
                .iter()
                .map(|b| {
                    (
                        ExtentKey {
                            title: TitleId(b.title),
                            playback_round: PlaybackRound(b.playback_round),
                            replica: b.replica,
                            piece: b.piece,
                        },
                        DiskIndex(b.disk),
                    )
                })
                .collect(),
            lost: self
                .lost
                .iter()
                .map(|l| LostRound {
                    title: TitleId(l.title),
                    playback_round: PlaybackRound(l.playback_round),
                })
                .collect(),
        }
    }

    /// Reads `dir/extent-faults.toml`; none there means no known fault.
    pub fn load(dir: &Path, disk_count: u32) -> Result<ExtentFaultRecords> {
        let records: ExtentFaultRecords = read_toml_or_default(dir, EXTENT_FAULTS_FILE)?;
        if let Some(b) = records.bad.iter().find(|b| b.disk >= disk_count) {
            return Err(invalid(
                &dir.join(EXTENT_FAULTS_FILE),
                format!(
                    "bad extent on disk {}, which is not a disk of this array (0..{disk_count})",
                    b.disk
                ),
            ));
        }
        Ok(records)
    }

    /// Writes the records atomically.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let text = format!(
            "# Bad extents waiting for their repair, and rounds with no good replica;\n\
             # kept across restarts, written by rondo. A bad extent leaves when it is\n\
             # repaired; a lost round when its title is removed.\n{}",
            toml::to_string(self).expect("extent faults serialise")
        );
        write_atomically(dir, EXTENT_FAULTS_FILE, text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_round_trip_through_the_file_and_a_foreign_disk_is_refused() {
        let dir = tempfile::TempDir::new().unwrap();
        assert_eq!(
            ExtentFaultRecords::load(dir.path(), 4).unwrap(),
            ExtentFaultRecords::default()
        );
        let faults = ExtentFaults {
            bad: vec![(
                ExtentKey {
                    title: TitleId(3),
                    playback_round: PlaybackRound(12),
                    replica: Replica::Backup,
                    piece: 2,
                },
                DiskIndex(1),
            )],
            lost: vec![LostRound {
                title: TitleId(3),
                playback_round: PlaybackRound(7),
            }],
        };
        let records = ExtentFaultRecords::from_faults(&faults);
        records.save(dir.path()).unwrap();
        let text = std::fs::read_to_string(dir.path().join(EXTENT_FAULTS_FILE)).unwrap();
        assert!(text.contains("replica = \"backup\""), "{text}");
        let loaded = ExtentFaultRecords::load(dir.path(), 4).unwrap();
        assert_eq!(loaded, records);
        assert_eq!(loaded.to_faults(), faults);
        assert!(
            !dir.path()
                .join(format!("{EXTENT_FAULTS_FILE}.tmp"))
                .exists()
        );

        let err = ExtentFaultRecords::load(dir.path(), 1).unwrap_err();
        assert!(
            err.to_string().contains("not a disk of this array"),
            "{err}"
        );
        std::fs::write(
            dir.path().join(EXTENT_FAULTS_FILE),
            "[[bad]]\ntitle = \"x\"\n",
        )
        .unwrap();
        let err = ExtentFaultRecords::load(dir.path(), 4).unwrap_err();
        assert!(err.to_string().contains(EXTENT_FAULTS_FILE), "{err}");
    }
}
