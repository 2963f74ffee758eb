//! How `rondo ingest` hands files to the server that owns a data directory.
//!
//! While `rondo serve` runs it holds the directory's lock, so no other
//! process can open the store. It writes `server.json` (`{"url": "...",
//! "pid": N}`, the base URL of its HTTP listener) and `token` (mode 0600, the
//! bearer token of the control API) into the directory. `rondo ingest`,
//! finding the directory locked, reads both and uploads each file with
//! `POST {url}/api/admin/titles?name=NAME&file=FILE_NAME` (the title name
//! and the file's own name, for the catalog), `Authorization: Bearer <token>`,
//! `Content-Type: application/octet-stream` and the file as the body; the
//! server ingests it through its write gate and answers with the title's JSON
//! ([`crate::titles::title_json`]) or an error `{"error": "..."}`.
//!
//! `server.json` may be stale (a server killed before it could remove it),
//! and whatever listens on its port now must not receive the token. So
//! before sending it, `rondo ingest` asks the listener who it is, without
//! credentials: `GET {url}/api/server-id` must answer this directory's array
//! id (from `rondo.toml`) and the instance id the server wrote into
//! `server.json` at its start (fresh random bytes each start, so a listener
//! of another directory, another start or another program cannot answer
//! it). Neither id is a credential: they only say which server this is.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The file a running server describes itself in, inside the data directory.
pub const SERVER_INFO_FILE: &str = "server.json";
/// The file holding the control API's bearer token (mode 0600).
pub const TOKEN_FILE: &str = "token";
/// Path of the upload endpoint under the server's base URL.
pub const UPLOAD_PATH: &str = "/api/admin/titles";
/// Path of the unauthenticated identity endpoint.
pub const SERVER_ID_PATH: &str = "/api/server-id";

/// What `server.json` holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerInfo {
    /// Base URL of the server, e.g. `http://127.0.0.1:8080`.
    pub url: String,
    pub pid: u32,
    /// The array id of the data directory it serves (`rondo.toml`).
    #[serde(default)]
    pub array_id: String,
    /// Random per start: what only this start's listener answers.
    #[serde(default)]
    pub instance_id: String,
}

/// What `GET /api/server-id` answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerId {
    pub array_id: String,
    pub instance_id: String,
}

/// Why a running server could not be found.
#[derive(Debug, Error)]
pub enum HandoffError {
    #[error(
        "data directory {} is owned by another process, but it has no {SERVER_INFO_FILE}: only \
         a running `rondo serve` accepts files; wait for the other process to finish",
        .dir.display()
    )]
    NoServer { dir: PathBuf },
    #[error("{}: {reason}", .path.display())]
    Unreadable { path: PathBuf, reason: String },
    #[error(
        "{SERVER_INFO_FILE} in {} points at {url}, but the listener there is not this \
         directory's server ({reason}); {SERVER_INFO_FILE} may be stale from a crash. No token \
         was sent. Start `rondo serve` on the directory, or remove {SERVER_INFO_FILE} if no \
         server owns it",
        .dir.display()
    )]
    NotThisServer {
        dir: PathBuf,
        url: String,
        reason: String,
    },
}

impl ServerInfo {
    /// Reads `dir/server.json`.
    pub fn read(dir: &Path) -> Result<ServerInfo, HandoffError> {
        let path = dir.join(SERVER_INFO_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(HandoffError::NoServer {
                    dir: dir.to_path_buf(),
                });
            }
            Err(e) => {
                return Err(HandoffError::Unreadable {
                    path,
                    reason: e.to_string(),
                });
            }
        };
        serde_json::from_str(&text).map_err(|e| HandoffError::Unreadable {
            path,
            reason: format!("not a server description ({{\"url\": ..., \"pid\": ...}}): {e}"),
        })
    }

    /// Writes `dir/server.json` atomically (temporary file, then rename).
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let path = dir.join(SERVER_INFO_FILE);
        let tmp = dir.join(format!("{SERVER_INFO_FILE}.tmp"));
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(
            serde_json::to_string(self)
                .expect("a server description serialises")
                .as_bytes(),
        )?;
        file.sync_all()?;
        std::fs::rename(&tmp, &path)
    }

    /// The identity endpoint's URL.
    pub fn server_id_url(&self) -> String {
        format!("{}{SERVER_ID_PATH}", self.url.trim_end_matches('/'))
    }

    /// Checks what the listener answered at [`SERVER_ID_PATH`] (`answer`:
    /// its body, or why there was none) against this description and the
    /// directory's array id; `Ok` only when both ids match.
    pub fn verify(
        &self,
        dir: &Path,
        array_id: &str,
        answer: Result<String, String>,
    ) -> Result<(), HandoffError> {
        let not = |reason: String| HandoffError::NotThisServer {
            dir: dir.to_path_buf(),
            url: self.url.clone(),
            reason,
        };
        if self.instance_id.is_empty() {
            return Err(not(format!(
                "{SERVER_INFO_FILE} has no instance id (written by an older rondo)"
            )));
        }
        let body = answer.map_err(not)?;
        let id: ServerId = serde_json::from_str(&body)
            .map_err(|_| not(format!("it does not answer {SERVER_ID_PATH}")))?;
        if id.array_id != array_id {
            return Err(not(format!(
                "it serves array {}, this directory is array {array_id}",
                id.array_id
            )));
        }
        if id.instance_id != self.instance_id {
            return Err(not(
                "it is another start than the one that wrote the file".into()
            ));
        }
        Ok(())
    }

    /// The upload endpoint's URL.
    pub fn upload_url(&self) -> String {
        format!("{}{UPLOAD_PATH}", self.url.trim_end_matches('/'))
    }
}

/// Reads the bearer token from `dir/token` (surrounding whitespace removed).
pub fn read_token(dir: &Path) -> Result<String, HandoffError> {
    let path = dir.join(TOKEN_FILE);
    let token = std::fs::read_to_string(&path)
        .map_err(|e| HandoffError::Unreadable {
            path: path.clone(),
            reason: format!("cannot read the server's token: {e}"),
        })?
        .trim()
        .to_string();
    if token.is_empty() {
        return Err(HandoffError::Unreadable {
            path,
            reason: "the token file is empty".into(),
        });
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_info_round_trips_in_the_agreed_format() {
        let dir = tempfile::TempDir::new().unwrap();
        assert!(matches!(
            ServerInfo::read(dir.path()),
            Err(HandoffError::NoServer { .. })
        ));
        let info = ServerInfo {
            url: "http://127.0.0.1:8080/".into(),
            pid: 1234,
            array_id: "a1".into(),
            instance_id: "i1".into(),
        };
        info.write(dir.path()).unwrap();
        let text = std::fs::read_to_string(dir.path().join(SERVER_INFO_FILE)).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"url": "http://127.0.0.1:8080/", "pid": 1234, "array_id": "a1",
                "instance_id": "i1"})
        );
        assert_eq!(ServerInfo::read(dir.path()).unwrap(), info);
        assert_eq!(info.upload_url(), "http://127.0.0.1:8080/api/admin/titles");

        std::fs::write(dir.path().join(SERVER_INFO_FILE), "{\"url\": 5}").unwrap();
        let err = ServerInfo::read(dir.path()).unwrap_err().to_string();
        assert!(err.contains("not a server description"), "{err}");

        assert!(read_token(dir.path()).is_err());
        std::fs::write(dir.path().join(TOKEN_FILE), "  \n").unwrap();
        assert!(
            read_token(dir.path())
                .unwrap_err()
                .to_string()
                .contains("empty")
        );
        std::fs::write(dir.path().join(TOKEN_FILE), "s3cret\n").unwrap();
        assert_eq!(read_token(dir.path()).unwrap(), "s3cret");
    }

    #[test]
    fn only_the_listener_that_knows_both_ids_is_this_directorys_server() {
        let dir = Path::new("/data");
        let info = ServerInfo {
            url: "http://127.0.0.1:8080".into(),
            pid: 1,
            array_id: "a1".into(),
            instance_id: "i1".into(),
        };
        let answer = |a: &str, i: &str| {
            Ok(serde_json::to_string(&ServerId {
                array_id: a.into(),
                instance_id: i.into(),
            })
            .unwrap())
        };
        assert!(info.verify(dir, "a1", answer("a1", "i1")).is_ok());
        let refused = |r: Result<(), HandoffError>| r.unwrap_err().to_string();
        assert!(refused(info.verify(dir, "a1", answer("a2", "i1"))).contains("serves array a2"));
        assert!(refused(info.verify(dir, "a1", answer("a1", "i0"))).contains("another start"));
        let e = refused(info.verify(dir, "a1", Ok("<html>hello</html>".into())));
        assert!(e.contains("No token was sent"), "{e}");
        assert!(
            refused(info.verify(dir, "a1", Err("connection refused".into())))
                .contains("connection refused")
        );
        let old = ServerInfo {
            instance_id: String::new(),
            ..info
        };
        assert!(refused(old.verify(dir, "a1", answer("a1", ""))).contains("no instance id"));
    }
}
