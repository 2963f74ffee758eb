//! Titles whose home is a tier (seed 002), as the catalog keeps them: which
//! tier and object hold the media file, what the stored stream will look
//! like on the array (its per-round bytes, so a staging's writes can be
//! planned and its delay predicted before the object is fetched), whether
//! it is pinned on the array, and how often it was asked for (eviction is
//! by popularity). A staged copy is an ordinary complete title with the
//! same name; this row is what remains when it is evicted.

use rondo_model::layout::{TitleLayout, TitlePlan};
use rusqlite::{OptionalExtension, params};

use crate::catalog::{decode_client_bytes, encode_client_bytes};
use crate::error::{Result, StoreError};
use crate::store::{Store, validate_title_name};

/// One tier title.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TierTitleRecord {
    pub name: String,
    /// The tier's name in `tiers.toml`.
    pub tier: String,
    pub object_key: String,
    pub object_bytes: u64,
    pub object_crc32c: u32,
    pub source_file_name: String,
    pub content_type: String,
    pub duration_ns: u64,
    /// The stored stream's bytes on the array (header and frames).
    pub stored_bytes: u64,
    pub round_duration_ns: u64,
    /// The client bytes per round of the title's schedule.
    #[serde(skip)]
    pub client_bytes: Vec<u64>,
    /// Kept on the array once staged: never evicted.
    pub pinned: bool,
    pub request_count: u64,
    pub last_request_unix_ns: u64,
    pub created_unix_ns: u64,
}

const COLUMNS: &str = "name, tier, object_key, object_bytes, object_crc32c, source_file_name, \
    content_type, duration_ns, stored_bytes, round_duration_ns, client_bytes, pinned, \
    request_count, last_request_unix_ns, created_unix_ns";

fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(TierTitleRecord, Vec<u8>)> {
    Ok((
        TierTitleRecord {
            name: r.get(0)?,
            tier: r.get(1)?,
            object_key: r.get(2)?,
            object_bytes: r.get::<_, i64>(3)? as u64,
            object_crc32c: r.get::<_, i64>(4)? as u32,
            source_file_name: r.get(5)?,
            content_type: r.get(6)?,
            duration_ns: r.get::<_, i64>(7)? as u64,
            stored_bytes: r.get::<_, i64>(8)? as u64,
            round_duration_ns: r.get::<_, i64>(9)? as u64,
            client_bytes: Vec::new(),
            pinned: r.get::<_, i64>(11)? != 0,
            request_count: r.get::<_, i64>(12)? as u64,
            last_request_unix_ns: r.get::<_, i64>(13)? as u64,
            created_unix_ns: r.get::<_, i64>(14)? as u64,
        },
        r.get(10)?,
    ))
}

fn decode(row: (TierTitleRecord, Vec<u8>)) -> Result<TierTitleRecord> {
    let (mut record, blob) = row;
    record.client_bytes = decode_client_bytes(&blob).ok_or_else(|| StoreError::CatalogCorrupt {
        reason: format!(
            "tier title {:?}: its client bytes do not decode",
            record.name
        ),
    })?;
    Ok(record)
}

fn sql(context: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
    move |e| StoreError::catalog(context, e)
}

impl Store {
    /// Records a title whose media file `tier` holds. Refused when the name
    /// is taken by another tier title or by a title stored on the array.
    pub fn add_tier_title(&self, record: &TierTitleRecord) -> Result<()> {
        validate_title_name(&record.name)?;
        if self.title_by_name(&record.name)?.is_some() || self.tier_title(&record.name)?.is_some() {
            return Err(StoreError::NameTaken {
                name: record.name.clone(),
            });
        }
        let state = self.state();
        state
            .conn
            .execute(
                &format!(
                    "INSERT INTO tier_titles ({COLUMNS}) VALUES \
                     (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"
                ),
                params![
                    record.name,
                    record.tier,
                    record.object_key,
                    record.object_bytes as i64,
                    i64::from(record.object_crc32c),
                    record.source_file_name,
                    record.content_type,
                    record.duration_ns as i64,
                    record.stored_bytes as i64,
                    record.round_duration_ns as i64,
                    encode_client_bytes(&record.client_bytes),
                    i64::from(record.pinned),
                    record.request_count as i64,
                    record.last_request_unix_ns as i64,
                    record.created_unix_ns as i64,
                ],
            )
            .map_err(sql("recording a tier title"))?;
        Ok(())
    }

    /// Every tier title, by name.
    pub fn tier_titles(&self) -> Result<Vec<TierTitleRecord>> {
        let state = self.state();
        let mut stmt = state
            .conn
            .prepare(&format!("SELECT {COLUMNS} FROM tier_titles ORDER BY name"))
            .map_err(sql("listing tier titles"))?;
        let rows = stmt
            .query_map([], from_row)
            .map_err(sql("listing tier titles"))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(sql("listing tier titles"))?;
        rows.into_iter().map(decode).collect()
    }

    /// The tier title named `name`, if any.
    pub fn tier_title(&self, name: &str) -> Result<Option<TierTitleRecord>> {
        let state = self.state();
        let row = state
            .conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM tier_titles WHERE name = ?1"),
                [name],
                from_row,
            )
            .optional()
            .map_err(sql("reading a tier title"))?;
        row.map(decode).transpose()
    }

    /// Counts a request for tier title `name`; false if there is none.
    pub fn record_tier_request(&self, name: &str, now_unix_ns: u64) -> Result<bool> {
        let changed = self
            .state()
            .conn
            .execute(
                "UPDATE tier_titles SET request_count = request_count + 1, \
                 last_request_unix_ns = ?2 WHERE name = ?1",
                params![name, now_unix_ns as i64],
            )
            .map_err(sql("counting a tier title's request"))?;
        Ok(changed == 1)
    }

    /// Pins (or unpins) tier title `name`; false if there is none.
    pub fn set_tier_pinned(&self, name: &str, pinned: bool) -> Result<bool> {
        let changed = self
            .state()
            .conn
            .execute(
                "UPDATE tier_titles SET pinned = ?2 WHERE name = ?1",
                params![name, i64::from(pinned)],
            )
            .map_err(sql("pinning a tier title"))?;
        Ok(changed == 1)
    }

    /// Forgets tier title `name` (its staged copy, if any, stays a title).
    pub fn remove_tier_title(&self, name: &str) -> Result<bool> {
        let changed = self
            .state()
            .conn
            .execute("DELETE FROM tier_titles WHERE name = ?1", [name])
            .map_err(sql("removing a tier title"))?;
        Ok(changed == 1)
    }

    /// Where `plan` would be placed now, without allocating anything: the
    /// layout a staging's writes are predicted with.
    pub fn preview_layout(&self, plan: &TitlePlan) -> Result<TitleLayout> {
        let mut allocator = self.state().allocator.clone();
        Ok(allocator.place(plan)?)
    }
}
