//! `tiers.toml` in a data directory: the tiers its titles may live on.
//! Unlike `rondo.toml` it changes after the directory is made (`rondo tier
//! add`); it is written whole and atomically.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::TierError;

/// The file's name inside a data directory.
pub const TIERS_FILE: &str = "tiers.toml";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TiersFile {
    #[serde(default, rename = "tier")]
    pub tiers: Vec<TierConfig>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TierConfig {
    /// How titles and `rondo ingest --tier NAME` refer to it.
    pub name: String,
    #[serde(flatten)]
    pub kind: TierKind,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum TierKind {
    /// An emulated optical jukebox farm in a directory (its parameters are
    /// in the directory's `jukebox.toml`).
    Jukebox(JukeboxTierConfig),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JukeboxTierConfig {
    /// The farm's directory; relative paths are inside the data directory.
    pub path: PathBuf,
}

impl TierKind {
    pub fn name(&self) -> &'static str {
        match self {
            TierKind::Jukebox(_) => "jukebox",
        }
    }
}

impl TiersFile {
    /// Reads `dir/tiers.toml`; a missing file is no tiers.
    pub fn read(dir: &Path) -> Result<TiersFile, TierError> {
        let path = dir.join(TIERS_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(TiersFile::default()),
            Err(e) => {
                return Err(TierError::Config {
                    path,
                    what: format!("cannot be read: {e}"),
                });
            }
        };
        let file: TiersFile = toml::from_str(&text).map_err(|e| TierError::Config {
            path: path.clone(),
            what: e.to_string(),
        })?;
        let mut names: Vec<&str> = file.tiers.iter().map(|t| t.name.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(TierError::Config {
                path,
                what: format!("two tiers are named {:?}", w[0]),
            });
        }
        Ok(file)
    }

    /// Replaces `dir/tiers.toml` atomically (temporary file, fsync, rename).
    pub fn write(&self, dir: &Path) -> Result<(), TierError> {
        let path = dir.join(TIERS_FILE);
        let tmp = dir.join(format!("{TIERS_FILE}.tmp"));
        let text = toml::to_string_pretty(self).expect("tiers serialise");
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            std::fs::File::open(dir)?.sync_all()
        };
        write().map_err(|e| TierError::Config {
            path,
            what: format!("cannot be written: {e}"),
        })
    }

    pub fn get(&self, name: &str) -> Option<&TierConfig> {
        self.tiers.iter().find(|t| t.name == name)
    }

    /// The names, for messages.
    pub fn names(&self) -> String {
        if self.tiers.is_empty() {
            "none (add one with `rondo tier add`)".to_string()
        } else {
            self.tiers
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(TiersFile::read(dir.path()).unwrap(), TiersFile::default());
        let file = TiersFile {
            tiers: vec![TierConfig {
                name: "vault".into(),
                kind: TierKind::Jukebox(JukeboxTierConfig {
                    path: "tiers/vault".into(),
                }),
            }],
        };
        file.write(dir.path()).unwrap();
        let text = std::fs::read_to_string(dir.path().join(TIERS_FILE)).unwrap();
        assert!(text.contains("kind = \"jukebox\""), "{text}");
        assert_eq!(TiersFile::read(dir.path()).unwrap(), file);
        std::fs::write(dir.path().join(TIERS_FILE), format!("{text}\n{text}")).unwrap();
        let err = TiersFile::read(dir.path()).unwrap_err().to_string();
        assert!(err.contains("two tiers are named \"vault\""), "{err}");
        std::fs::write(dir.path().join(TIERS_FILE), "[[tier]]\nname = 3\n").unwrap();
        let err = TiersFile::read(dir.path()).unwrap_err().to_string();
        assert!(err.contains(TIERS_FILE), "{err}");
    }
}
