//! The control API's token: generated at first start, kept in the data
//! directory as `token` (mode 0600, readable by its owner only), and checked
//! in constant time against `Authorization: Bearer <token>`.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub use crate::ingest::handoff::TOKEN_FILE;
/// Random bytes in a token (printed as hex).
const TOKEN_BYTES: usize = 32;

/// The token of data directory `dir`: read from `dir/token`, or created
/// there (mode 0600) when absent. Returns the token and whether it was
/// created now (the caller prints it once).
pub fn ensure_token(dir: &Path) -> std::io::Result<(String, bool)> {
    let path = token_path(dir);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let token = text.trim().to_string();
            if token.is_empty() {
                return Err(std::io::Error::other(format!(
                    "{} is empty; delete it to have a new token generated",
                    path.display()
                )));
            }
            let mode = std::fs::metadata(&path)?.permissions().mode();
            if mode & 0o077 != 0 {
                tracing::warn!(
                    path = %path.display(),
                    mode = format!("{:o}", mode & 0o777),
                    "the API token file is readable by others; run chmod 600 on it"
                );
            }
            Ok((token, false))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let token = new_token()?;
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)?;
            file.write_all(format!("{token}\n").as_bytes())?;
            file.sync_all()?;
            Ok((token, true))
        }
        Err(e) => Err(e),
    }
}

/// `dir/token`.
pub fn token_path(dir: &Path) -> PathBuf {
    dir.join(TOKEN_FILE)
}

fn new_token() -> std::io::Result<String> {
    let mut bytes = [0u8; TOKEN_BYTES];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A fresh random id for one start of the server (not a credential: it
/// only tells `rondo ingest` that a listener is the start that wrote
/// `server.json`).
pub fn new_instance_id() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Compares two byte strings in time that depends only on their lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // black_box keeps the compiler from turning the fold into an early exit.
    std::hint::black_box(diff) == 0
}

/// Whether an `Authorization` header value carries `token` as a bearer token.
pub fn bearer_matches(header: Option<&str>, token: &str) -> bool {
    let Some(value) = header else { return false };
    let Some((scheme, presented)) = value.trim().split_once(' ') else {
        return false;
    };
    scheme.eq_ignore_ascii_case("bearer")
        && constant_time_eq(presented.trim().as_bytes(), token.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_is_created_once_with_owner_only_mode() {
        let dir = tempfile::tempdir().unwrap();
        let (token, created) = ensure_token(dir.path()).unwrap();
        assert!(created);
        assert_eq!(token.len(), 2 * TOKEN_BYTES);
        let mode = std::fs::metadata(token_path(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let (again, created) = ensure_token(dir.path()).unwrap();
        assert!(!created);
        assert_eq!(again, token);
    }

    #[test]
    fn bearer_checks() {
        assert!(bearer_matches(Some("Bearer abc"), "abc"));
        assert!(bearer_matches(Some("bearer  abc "), "abc"));
        assert!(!bearer_matches(Some("Bearer abd"), "abc"));
        assert!(!bearer_matches(Some("Bearer ab"), "abc"));
        assert!(!bearer_matches(Some("Basic abc"), "abc"));
        assert!(!bearer_matches(Some("abc"), "abc"));
        assert!(!bearer_matches(None, "abc"));
        assert!(constant_time_eq(b"", b""));
    }
}
