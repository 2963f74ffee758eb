//! The SQLite catalog: its schema, versions and migrations, and the rows the
//! store reads and writes.
//!
//! `catalog.sqlite` runs in WAL mode with `synchronous=FULL`, so a committed
//! transaction survives a crash or power loss. Every state change of a title
//! (begin, commit, delete, crash recovery) is one transaction. The schema
//! version lives in the `schema_version` table; [`migrate`] applies the
//! migrations a catalog lacks, one transaction each, and refuses a catalog
//! newer than this code. Integers are SQLite's signed 64-bit; the only value
//! that can exceed 2^63 (a title's placement seed) is stored bit-cast.
//!
//! Schema versions: 1, the titles, strides and extents; 2, each title's
//! video keyframes (`titles.keyframes`, a compact BLOB; NULL for titles
//! stored before version 2, whose time seeks fall back to round
//! boundaries).

use std::path::Path;

use rondo_model::layout::{Replica, TitleStrides};
use rondo_model::units::{DiskIndex, TitleId};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use crate::error::{Result, StoreError};

/// The name of the catalog inside a data directory.
pub const CATALOG_FILE: &str = "catalog.sqlite";

/// One migration: the SQL that takes the schema from `to_version - 1`.
struct Migration {
    to_version: u32,
    sql: &'static str,
}

/// In order; the last one's version is [`SCHEMA_VERSION`].
const MIGRATIONS: &[Migration] = &[
    Migration {
        to_version: 1,
        sql: r#"
        CREATE TABLE catalog_info (
            key TEXT PRIMARY KEY NOT NULL,
            value TEXT NOT NULL
        ) STRICT;

        CREATE TABLE titles (
            id INTEGER PRIMARY KEY NOT NULL,
            name TEXT NOT NULL UNIQUE,
            source_file_name TEXT NOT NULL,
            container_kind TEXT NOT NULL,
            content_type TEXT NOT NULL,
            duration_ns INTEGER NOT NULL,
            size_bytes INTEGER NOT NULL,
            header_bytes INTEGER NOT NULL,
            round_duration_ns INTEGER NOT NULL,
            round_count INTEGER NOT NULL,
            client_bytes BLOB NOT NULL,
            layout_seed INTEGER NOT NULL,
            start_disk INTEGER NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('writing', 'complete')),
            created_unix_ns INTEGER NOT NULL
        ) STRICT;

        CREATE TABLE title_strides (
            title_id INTEGER NOT NULL REFERENCES titles (id) ON DELETE CASCADE,
            disk INTEGER NOT NULL,
            replica TEXT NOT NULL CHECK (replica IN ('primary', 'backup')),
            ordinal INTEGER NOT NULL,
            stride_index INTEGER NOT NULL,
            PRIMARY KEY (title_id, disk, replica, ordinal)
        ) STRICT, WITHOUT ROWID;

        -- A stride holds data of one replica of one title.
        CREATE UNIQUE INDEX title_strides_owner ON title_strides (disk, stride_index);

        CREATE TABLE extents (
            title_id INTEGER NOT NULL REFERENCES titles (id) ON DELETE CASCADE,
            round INTEGER NOT NULL,
            replica TEXT NOT NULL CHECK (replica IN ('primary', 'backup')),
            piece INTEGER NOT NULL,
            disk INTEGER NOT NULL,
            device_offset_bytes INTEGER NOT NULL,
            length_bytes INTEGER NOT NULL,
            crc32c INTEGER NOT NULL,
            PRIMARY KEY (title_id, round, replica, piece)
        ) STRICT, WITHOUT ROWID;
    "#,
    },
    Migration {
        to_version: 2,
        // NULL: stored before keyframes were kept (unknown, not "none").
        sql: "ALTER TABLE titles ADD COLUMN keyframes BLOB;",
    },
    Migration {
        to_version: 3,
        // Titles whose home is a tier (seed 002): what the tier holds and
        // what the array needs to predict and plan their staging. A staged
        // copy is an ordinary row of `titles` with the same name.
        sql: r#"
        CREATE TABLE tier_titles (
            name TEXT PRIMARY KEY NOT NULL,
            tier TEXT NOT NULL,
            object_key TEXT NOT NULL,
            object_bytes INTEGER NOT NULL,
            object_crc32c INTEGER NOT NULL,
            source_file_name TEXT NOT NULL,
            content_type TEXT NOT NULL,
            duration_ns INTEGER NOT NULL,
            stored_bytes INTEGER NOT NULL,
            round_duration_ns INTEGER NOT NULL,
            client_bytes BLOB NOT NULL,
            pinned INTEGER NOT NULL DEFAULT 0,
            request_count INTEGER NOT NULL DEFAULT 0,
            last_request_unix_ns INTEGER NOT NULL DEFAULT 0,
            created_unix_ns INTEGER NOT NULL
        ) STRICT;
    "#,
    },
];

/// The schema version this code reads and writes.
pub const SCHEMA_VERSION: u32 = MIGRATIONS[MIGRATIONS.len() - 1].to_version;

/// catalog_info key: the array the catalog belongs to.
pub(crate) const INFO_ARRAY_ID: &str = "array_id";
/// catalog_info key: the id (and round-robin ordinal) of the next title.
pub(crate) const INFO_NEXT_TITLE_ID: &str = "next_title_id";

fn sql(context: &str) -> impl FnOnce(rusqlite::Error) -> StoreError + '_ {
    move |e| StoreError::catalog(context, e)
}

/// Opens the catalog at `path` with the durability settings; `create` allows
/// a new file.
pub(crate) fn open(path: &Path, create: bool) -> Result<Connection> {
    if !create && !path.exists() {
        return Err(StoreError::NotACatalog {
            path: path.to_path_buf(),
        });
    }
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn = Connection::open_with_flags(path, flags)
        .map_err(sql(&format!("opening {}", path.display())))?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .map_err(sql("setting WAL mode"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::CatalogCorrupt {
            reason: format!(
                "{} refused WAL mode (journal mode is {mode})",
                path.display()
            ),
        });
    }
    conn.execute_batch(
        "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000;",
    )
    .map_err(sql("setting pragmas"))?;
    Ok(conn)
}

/// The schema version recorded in the catalog; `None` when it has no
/// schema_version table (not a rondo catalog, or a brand-new file).
pub(crate) fn schema_version(conn: &Connection) -> Result<Option<u32>> {
    let has_table: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version')",
            [],
            |r| r.get(0),
        )
        .map_err(sql("reading the schema"))?;
    if !has_table {
        return Ok(None);
    }
    let version: Option<i64> = conn
        .query_row("SELECT version FROM schema_version", [], |r| r.get(0))
        .optional()
        .map_err(sql("reading the schema version"))?;
    Ok(Some(version.unwrap_or(0) as u32))
}

/// Brings the catalog to [`SCHEMA_VERSION`]. `create` makes the version
/// table of a new catalog; otherwise a catalog without one is refused.
/// Returns the version found before migrating.
pub(crate) fn migrate(conn: &mut Connection, path: &Path, create: bool) -> Result<u32> {
    let found = match schema_version(conn)? {
        Some(v) => v,
        None if create => {
            conn.execute_batch("CREATE TABLE schema_version (version INTEGER NOT NULL) STRICT;")
                .map_err(sql("creating the schema_version table"))?;
            0
        }
        None => {
            return Err(StoreError::NotACatalog {
                path: path.to_path_buf(),
            });
        }
    };
    if found > SCHEMA_VERSION {
        return Err(StoreError::FutureSchema {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    for migration in MIGRATIONS.iter().filter(|m| m.to_version > found) {
        let context = format!(
            "migrating the catalog to schema version {}",
            migration.to_version
        );
        let tx = conn.transaction().map_err(sql(&context))?;
        tx.execute_batch(migration.sql).map_err(sql(&context))?;
        tx.execute("DELETE FROM schema_version", [])
            .map_err(sql(&context))?;
        tx.execute(
            "INSERT INTO schema_version (version) VALUES (?1)",
            [migration.to_version],
        )
        .map_err(sql(&context))?;
        tx.commit().map_err(sql(&context))?;
    }
    Ok(found)
}

/// A catalog_info value.
pub(crate) fn info(conn: &Connection, key: &str) -> Result<Option<String>> {
    conn.query_row(
        "SELECT value FROM catalog_info WHERE key = ?1",
        [key],
        |r| r.get(0),
    )
    .optional()
    .map_err(sql("reading catalog_info"))
}

pub(crate) fn replica_name(replica: Replica) -> &'static str {
    match replica {
        Replica::Primary => "primary",
        Replica::Backup => "backup",
    }
}

pub(crate) fn parse_replica(text: &str) -> Option<Replica> {
    match text {
        "primary" => Some(Replica::Primary),
        "backup" => Some(Replica::Backup),
        _ => None,
    }
}

/// Encodes per-round client bytes compactly: a format byte (1) followed by
/// one unsigned LEB128 varint per round (3 bytes for a typical round).
pub fn encode_client_bytes(client_bytes: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + client_bytes.len() * 3);
    out.push(1);
    for &value in client_bytes {
        push_varint(&mut out, value);
    }
    out
}

/// Decodes [`encode_client_bytes`]; `None` when the blob is malformed.
pub fn decode_client_bytes(blob: &[u8]) -> Option<Vec<u64>> {
    let (&format, body) = blob.split_first()?;
    if format != 1 {
        return None;
    }
    read_varints(body)
}

/// The unsigned LEB128 varints of `body`; `None` if one overflows 64 bits
/// or the last is cut off.
fn read_varints(body: &[u8]) -> Option<Vec<u64>> {
    let mut out = Vec::new();
    let mut value = 0u64;
    let mut shift = 0u32;
    for &byte in body {
        if shift >= 64 || (shift == 63 && byte & 0x7e != 0) {
            return None;
        }
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            out.push(value);
            value = 0;
            shift = 0;
        } else {
            shift += 7;
        }
    }
    (shift == 0).then_some(out)
}

/// A place a player can start decoding a title: the presentation time of
/// a video keyframe and the stored byte where a player starting there
/// starts reading (see `rondo_media::container::Keyframe`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct KeyframeRecord {
    pub time_ns: u64,
    pub byte_offset: u64,
}

fn push_varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Encodes keyframes (ascending in time and byte offset) compactly: a
/// format byte (1), then per keyframe the LEB128 varint differences from
/// the previous one's time and offset (8 bytes for a 2 s GOP). `None`
/// when they are not ascending.
pub fn encode_keyframes(keyframes: &[KeyframeRecord]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(1 + keyframes.len() * 6);
    out.push(1);
    let (mut time_ns, mut byte_offset) = (0u64, 0u64);
    for k in keyframes {
        push_varint(&mut out, k.time_ns.checked_sub(time_ns)?);
        push_varint(&mut out, k.byte_offset.checked_sub(byte_offset)?);
        (time_ns, byte_offset) = (k.time_ns, k.byte_offset);
    }
    Some(out)
}

/// Decodes [`encode_keyframes`]; `None` when the blob is malformed.
pub fn decode_keyframes(blob: &[u8]) -> Option<Vec<KeyframeRecord>> {
    let (&format, body) = blob.split_first()?;
    if format != 1 {
        return None;
    }
    // The same varints as client bytes; pairs of (time, offset) deltas.
    let deltas = read_varints(body)?;
    if deltas.len() % 2 != 0 {
        return None;
    }
    let (mut time_ns, mut byte_offset) = (0u64, 0u64);
    deltas
        .chunks_exact(2)
        .map(|pair| {
            time_ns = time_ns.checked_add(pair[0])?;
            byte_offset = byte_offset.checked_add(pair[1])?;
            Some(KeyframeRecord {
                time_ns,
                byte_offset,
            })
        })
        .collect()
}

/// Records a title's keyframes (in the transaction that commits it).
pub(crate) fn set_keyframes(
    tx: &rusqlite::Transaction<'_>,
    title: TitleId,
    blob: &[u8],
) -> rusqlite::Result<()> {
    tx.execute(
        "UPDATE titles SET keyframes = ?2 WHERE id = ?1",
        params![title.0 as i64, blob],
    )?;
    Ok(())
}

/// A complete title's keyframes: `None` when the title was stored before
/// schema version 2 (or without them); an error when the blob is malformed.
pub(crate) fn keyframes(conn: &Connection, title: TitleId) -> Result<Option<Vec<KeyframeRecord>>> {
    let blob: Option<Vec<u8>> = conn
        .query_row(
            "SELECT keyframes FROM titles WHERE id = ?1 AND state = 'complete'",
            [title.0 as i64],
            |r| r.get(0),
        )
        .optional()
        .map_err(sql("reading keyframes"))?
        .flatten();
    blob.map(|blob| {
        decode_keyframes(&blob).ok_or_else(|| StoreError::CatalogCorrupt {
            reason: format!("title {} has a malformed keyframes blob", title.0),
        })
    })
    .transpose()
}

/// One title row, in either state.
#[derive(Clone, Debug)]
pub(crate) struct TitleRow {
    pub id: TitleId,
    pub name: String,
    pub source_file_name: String,
    pub container_kind: String,
    pub content_type: String,
    pub duration_ns: u64,
    pub size_bytes: u64,
    pub header_bytes: u64,
    pub round_duration_ns: u64,
    pub round_count: u64,
    pub client_bytes_blob: Vec<u8>,
    pub layout_seed: u64,
    pub start_disk: DiskIndex,
    pub complete: bool,
    pub created_unix_ns: u64,
}

const TITLE_COLUMNS: &str = "id, name, source_file_name, container_kind, content_type, \
     duration_ns, size_bytes, header_bytes, round_duration_ns, round_count, client_bytes, \
     layout_seed, start_disk, state, created_unix_ns";

fn title_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TitleRow> {
    let state: String = r.get(13)?;
    Ok(TitleRow {
        id: TitleId(r.get::<_, i64>(0)? as u64),
        name: r.get(1)?,
        source_file_name: r.get(2)?,
        container_kind: r.get(3)?,
        content_type: r.get(4)?,
        duration_ns: r.get::<_, i64>(5)? as u64,
        size_bytes: r.get::<_, i64>(6)? as u64,
        header_bytes: r.get::<_, i64>(7)? as u64,
        round_duration_ns: r.get::<_, i64>(8)? as u64,
        round_count: r.get::<_, i64>(9)? as u64,
        client_bytes_blob: r.get(10)?,
        // Bit-cast: seeds use all 64 bits.
        layout_seed: r.get::<_, i64>(11)? as u64,
        start_disk: DiskIndex(r.get::<_, i64>(12)? as u32),
        complete: state == "complete",
        created_unix_ns: r.get::<_, i64>(14)? as u64,
    })
}

/// Every title row (`complete_only` skips titles being written), by id.
pub(crate) fn title_rows(conn: &Connection, complete_only: bool) -> Result<Vec<TitleRow>> {
    let filter = if complete_only {
        "WHERE state = 'complete'"
    } else {
        ""
    };
    let mut stmt = conn
        .prepare(&format!(
            "SELECT {TITLE_COLUMNS} FROM titles {filter} ORDER BY id"
        ))
        .map_err(sql("listing titles"))?;
    let rows = stmt
        .query_map([], title_row)
        .map_err(sql("listing titles"))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(sql("listing titles"))?;
    Ok(rows)
}

/// One complete title by id or name.
pub(crate) fn complete_title_row(conn: &Connection, key: TitleKey<'_>) -> Result<Option<TitleRow>> {
    let result = match key {
        TitleKey::Id(id) => conn.query_row(
            &format!("SELECT {TITLE_COLUMNS} FROM titles WHERE id = ?1 AND state = 'complete'"),
            [id.0 as i64],
            title_row,
        ),
        TitleKey::Name(name) => conn.query_row(
            &format!("SELECT {TITLE_COLUMNS} FROM titles WHERE name = ?1 AND state = 'complete'"),
            [name],
            title_row,
        ),
    };
    result.optional().map_err(sql("reading a title"))
}

pub(crate) enum TitleKey<'a> {
    Id(TitleId),
    Name(&'a str),
}

/// A stride row as stored, for checking and rebuilding.
#[derive(Copy, Clone, Debug)]
pub(crate) struct StrideRow {
    pub title: TitleId,
    pub disk: DiskIndex,
    pub replica: Replica,
    pub ordinal: u64,
    pub stride_index: u64,
}

/// Every stride row, by title, disk, replica and ordinal. A row with an
/// unknown replica is an error naming it.
pub(crate) fn stride_rows(conn: &Connection, title: Option<TitleId>) -> Result<Vec<StrideRow>> {
    let mut stmt = conn
        .prepare(
            "SELECT title_id, disk, replica, ordinal, stride_index FROM title_strides \
             WHERE ?1 IS NULL OR title_id = ?1 ORDER BY title_id, disk, replica, ordinal",
        )
        .map_err(sql("reading strides"))?;
    let raw = stmt
        .query_map([title.map(|t| t.0 as i64)], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, i64>(4)?,
            ))
        })
        .map_err(sql("reading strides"))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(sql("reading strides"))?;
    raw.into_iter()
        .map(|(title, disk, replica, ordinal, stride_index)| {
            let replica = parse_replica(&replica).ok_or_else(|| StoreError::CatalogCorrupt {
                reason: format!("title {title} has a stride with replica {replica:?}"),
            })?;
            Ok(StrideRow {
                title: TitleId(title as u64),
                disk: DiskIndex(disk as u32),
                replica,
                ordinal: ordinal as u64,
                stride_index: stride_index as u64,
            })
        })
        .collect()
}

/// Assembles one title's stride rows (sorted as [`stride_rows`] returns
/// them) into [`TitleStrides`]; an error when a disk is out of range or the
/// ordinals of a (disk, replica) are not 0, 1, 2, …
pub(crate) fn assemble_strides(
    title: TitleId,
    rows: &[StrideRow],
    disk_count: u32,
) -> Result<TitleStrides, String> {
    let mut strides = TitleStrides::empty(disk_count);
    for row in rows {
        if row.disk.0 >= disk_count {
            return Err(format!(
                "title {} holds a stride on disk {}, but the array has {disk_count} disks",
                title.0, row.disk
            ));
        }
        let disk = row.disk;
        let next = strides.strides(disk, row.replica).len() as u64;
        if row.ordinal != next {
            return Err(format!(
                "title {}: {} strides on disk {} jump from ordinal {next} to {}",
                title.0,
                replica_name(row.replica),
                row.disk,
                row.ordinal
            ));
        }
        strides.push(disk, row.replica, row.stride_index);
    }
    Ok(strides)
}

/// Inserts a title's stride rows.
pub(crate) fn insert_strides(
    tx: &rusqlite::Transaction<'_>,
    title: TitleId,
    strides: &TitleStrides,
) -> rusqlite::Result<()> {
    let mut stmt = tx.prepare(
        "INSERT INTO title_strides (title_id, disk, replica, ordinal, stride_index) \
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    let mut last: Option<(DiskIndex, Replica)> = None;
    let mut ordinal = 0i64;
    for (disk, replica, stride) in strides.iter() {
        if last != Some((disk, replica)) {
            last = Some((disk, replica));
            ordinal = 0;
        }
        stmt.execute(params![
            title.0 as i64,
            disk.0,
            replica_name(replica),
            ordinal,
            stride as i64
        ])?;
        ordinal += 1;
    }
    Ok(())
}

/// One extent of a stored title with the checksum of its bytes as written.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ExtentRecord {
    pub title: TitleId,
    pub round: u32,
    pub replica: Replica,
    /// Position among the round's extents of this replica, in stored order
    /// (backup requests in plan order, each request's extents in order).
    pub piece: u32,
    pub disk: DiskIndex,
    /// Relative to the stride area, as in the layout's `Extent`.
    pub device_offset_bytes: u64,
    pub length_bytes: u64,
    /// CRC32C of the extent's bytes, block padding included.
    pub crc32c: u32,
}

/// Inserts extent rows.
pub(crate) fn insert_extents(
    tx: &rusqlite::Transaction<'_>,
    extents: &[ExtentRecord],
) -> rusqlite::Result<()> {
    let mut stmt = tx.prepare(
        "INSERT INTO extents (title_id, round, replica, piece, disk, device_offset_bytes, \
         length_bytes, crc32c) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    for e in extents {
        stmt.execute(params![
            e.title.0 as i64,
            e.round,
            replica_name(e.replica),
            e.piece,
            e.disk.0,
            e.device_offset_bytes as i64,
            e.length_bytes as i64,
            e.crc32c
        ])?;
    }
    Ok(())
}

/// A title's extent rows, by round, replica (primary first) and piece.
pub(crate) fn extent_rows(conn: &Connection, title: TitleId) -> Result<Vec<ExtentRecord>> {
    let mut stmt = conn
        .prepare(
            "SELECT round, replica, piece, disk, device_offset_bytes, length_bytes, crc32c \
             FROM extents WHERE title_id = ?1",
        )
        .map_err(sql("reading extents"))?;
    let raw = stmt
        .query_map([title.0 as i64], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, i64>(4)?,
                r.get::<_, i64>(5)?,
                r.get::<_, i64>(6)?,
            ))
        })
        .map_err(sql("reading extents"))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(sql("reading extents"))?;
    let mut out = raw
        .into_iter()
        .map(|(round, replica, piece, disk, offset, length, crc)| {
            let replica = parse_replica(&replica).ok_or_else(|| StoreError::CatalogCorrupt {
                reason: format!(
                    "title {} round {round} has an extent with replica {replica:?}",
                    title.0
                ),
            })?;
            Ok(ExtentRecord {
                title,
                round: round as u32,
                replica,
                piece: piece as u32,
                disk: DiskIndex(disk as u32),
                device_offset_bytes: offset as u64,
                length_bytes: length as u64,
                crc32c: crc as u32,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    out.sort_by_key(|e| (e.round, e.replica, e.piece));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_bytes_blob_round_trip() {
        let values = vec![0, 1, 127, 128, 300, 1 << 21, 2_000_000, u64::MAX, 16384];
        let blob = encode_client_bytes(&values);
        assert_eq!(decode_client_bytes(&blob), Some(values));
        assert_eq!(decode_client_bytes(&encode_client_bytes(&[])), Some(vec![]));
        // A typical 1 s round of a 4 Mb/s stream takes 3 bytes.
        assert_eq!(encode_client_bytes(&[500_000]).len(), 4);
        assert_eq!(decode_client_bytes(&[]), None);
        assert_eq!(decode_client_bytes(&[2, 1]), None);
        // A truncated varint.
        assert_eq!(decode_client_bytes(&[1, 0x80]), None);
        // More than 64 bits.
        let mut too_long = vec![1];
        too_long.extend([0xff; 10]);
        too_long.push(1);
        assert_eq!(decode_client_bytes(&too_long), None);
    }

    #[test]
    fn keyframes_blob_round_trip_and_refusals() {
        let k = |time_ns, byte_offset| KeyframeRecord {
            time_ns,
            byte_offset,
        };
        let values = vec![k(0, 376), k(2_000_000_000, 90_000), k(u64::MAX, u64::MAX)];
        let blob = encode_keyframes(&values).unwrap();
        assert_eq!(decode_keyframes(&blob), Some(values));
        assert_eq!(
            decode_keyframes(&encode_keyframes(&[]).unwrap()),
            Some(vec![])
        );
        // Two-hour title, 2 s GOP, ~250 KB per GOP: 5 + 3 bytes a keyframe.
        let long: Vec<KeyframeRecord> = (0..3600)
            .map(|i| k(i * 2_000_000_000, i * 250_000))
            .collect();
        assert_eq!(encode_keyframes(&long).unwrap().len(), 1 + 2 + 3599 * 8);
        // Not ascending, a dangling time without its offset, another format.
        assert_eq!(encode_keyframes(&[k(5, 5), k(4, 6)]), None);
        assert_eq!(decode_keyframes(&[1, 5]), None);
        assert_eq!(decode_keyframes(&[2]), None);
        assert_eq!(decode_keyframes(&[1, 0x80]), None);
    }

    /// A catalog written by a rondo of schema version 1 opens, migrates to
    /// the current version keeping its titles, reports their keyframes as
    /// unknown (2) and has no tier titles (3).
    #[test]
    fn a_version_1_catalog_migrates_to_the_current_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CATALOG_FILE);
        let conn = open(&path, true).unwrap();
        // Exactly what version 1 created.
        conn.execute_batch(
            "CREATE TABLE schema_version (version INTEGER NOT NULL) STRICT;
             INSERT INTO schema_version (version) VALUES (1);",
        )
        .unwrap();
        conn.execute_batch(MIGRATIONS[0].sql).unwrap();
        conn.execute(
            &format!(
                "INSERT INTO titles ({}) VALUES (7, 'old', 'old.ts', 'mpeg-ts', 'video/mp2t', \
                 1, 10, 0, 1000000000, 1, ?1, 3, 0, 'complete', 0)",
                TITLE_COLUMNS
            ),
            [encode_client_bytes(&[10])],
        )
        .unwrap();
        drop(conn);

        let mut conn = open(&path, false).unwrap();
        assert_eq!(migrate(&mut conn, &path, false).unwrap(), 1);
        assert_eq!(schema_version(&conn).unwrap(), Some(SCHEMA_VERSION));
        assert_eq!(SCHEMA_VERSION, 3);
        let tier_titles: i64 = conn
            .query_row("SELECT COUNT(*) FROM tier_titles", [], |r| r.get(0))
            .unwrap();
        assert_eq!(tier_titles, 0);
        let rows = title_rows(&conn, true).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].name, "old");
        assert_eq!(keyframes(&conn, TitleId(7)).unwrap(), None);
        // A title stored from now on has them.
        let blob = encode_keyframes(&[KeyframeRecord {
            time_ns: 0,
            byte_offset: 0,
        }])
        .unwrap();
        let tx = conn.transaction().unwrap();
        set_keyframes(&tx, TitleId(7), &blob).unwrap();
        tx.commit().unwrap();
        assert_eq!(keyframes(&conn, TitleId(7)).unwrap().unwrap().len(), 1);
        // A damaged blob is an error naming the title, not a panic.
        conn.execute("UPDATE titles SET keyframes = x'0105' WHERE id = 7", [])
            .unwrap();
        let err = keyframes(&conn, TitleId(7)).unwrap_err().to_string();
        assert!(err.contains("title 7"), "{err}");
    }

    #[test]
    fn migrations_create_the_schema_once_and_refuse_the_future() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CATALOG_FILE);
        let mut conn = open(&path, true).unwrap();
        assert_eq!(migrate(&mut conn, &path, true).unwrap(), 0);
        assert_eq!(schema_version(&conn).unwrap(), Some(SCHEMA_VERSION));
        // Idempotent: nothing to do the second time.
        assert_eq!(migrate(&mut conn, &path, false).unwrap(), SCHEMA_VERSION);
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let synchronous: i64 = conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap();
        assert_eq!(synchronous, 2, "FULL");
        conn.execute(
            "UPDATE schema_version SET version = ?1",
            [SCHEMA_VERSION + 1],
        )
        .unwrap();
        let err = migrate(&mut conn, &path, false).unwrap_err();
        assert!(
            matches!(err, StoreError::FutureSchema { found, .. } if found == SCHEMA_VERSION + 1)
        );

        let other = dir.path().join("other.sqlite");
        let mut plain = open(&other, true).unwrap();
        assert!(matches!(
            migrate(&mut plain, &other, false),
            Err(StoreError::NotACatalog { .. })
        ));
        assert!(matches!(
            open(&dir.path().join("missing.sqlite"), false),
            Err(StoreError::NotACatalog { .. })
        ));
    }
}
