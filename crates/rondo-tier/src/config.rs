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
    /// A bucket of an S3-compatible object store.
    S3(S3TierConfig),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JukeboxTierConfig {
    /// The farm's directory; relative paths are inside the data directory.
    pub path: PathBuf,
}

/// An S3-compatible store (AWS S3, MinIO, Ceph RGW, s3s-fs, ...), addressed
/// path-style (`ENDPOINT/BUCKET/KEY`).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct S3TierConfig {
    /// The store's base URL, e.g. `https://s3.eu-west-1.amazonaws.com` or
    /// `http://127.0.0.1:9000`.
    pub endpoint: String,
    pub bucket: String,
    #[serde(default = "default_region")]
    pub region: String,
    pub access_key_id: String,
    /// Kept in `tiers.toml`, which is therefore written readable by its
    /// owner only.
    pub secret_access_key: String,
    /// Whether a plain `http://` endpoint is allowed (no TLS: the requests
    /// are signed, the bytes are not private).
    #[serde(default)]
    pub allow_http: bool,
    /// Prepended to every key (`PREFIX/KEY`), to share a bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
}

fn default_region() -> String {
    "us-east-1".to_string()
}

// By hand, so that a logged or printed config never shows the secret.
impl std::fmt::Debug for S3TierConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3TierConfig")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"(hidden)")
            .field("allow_http", &self.allow_http)
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl TierKind {
    pub fn name(&self) -> &'static str {
        match self {
            TierKind::Jukebox(_) => "jukebox",
            TierKind::S3(_) => "s3",
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

    /// Replaces `dir/tiers.toml` atomically (temporary file, fsync, rename),
    /// readable by its owner only (an S3 tier's secret key is in it).
    pub fn write(&self, dir: &Path) -> Result<(), TierError> {
        let path = dir.join(TIERS_FILE);
        let tmp = dir.join(format!("{TIERS_FILE}.tmp"));
        let text = toml::to_string_pretty(self).expect("tiers serialise");
        let write = || -> std::io::Result<()> {
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create(true).truncate(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let mut f = options.open(&tmp)?;
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

    #[test]
    fn s3_tiers_round_trip_with_defaults_and_hide_the_secret() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(TIERS_FILE),
            "[[tier]]\nname = \"cloud\"\nkind = \"s3\"\nendpoint = \"http://127.0.0.1:9000\"\n\
             bucket = \"media\"\naccess_key_id = \"AK\"\nsecret_access_key = \"SK\"\n",
        )
        .unwrap();
        let file = TiersFile::read(dir.path()).unwrap();
        let TierKind::S3(s3) = &file.tiers[0].kind else {
            panic!("not s3: {file:?}");
        };
        assert_eq!(file.tiers[0].kind.name(), "s3");
        assert_eq!(s3.region, "us-east-1");
        assert!(!s3.allow_http);
        assert_eq!(s3.prefix, None);
        assert!(!format!("{file:?}").contains("SK"), "{file:?}");
        file.write(dir.path()).unwrap();
        assert_eq!(TiersFile::read(dir.path()).unwrap(), file);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(TIERS_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "tiers.toml mode {mode:o}");
        }
    }
}
