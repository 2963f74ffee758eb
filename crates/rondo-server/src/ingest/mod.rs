//! Ingest: a media file becomes a stored title, atomically.
//!
//! This module owns the path from a user's MP4 or MPEG-TS file to a complete
//! title in the store: the title name (the file's stem unless one is given;
//! checked before the file is read), the media crate's stored stream and
//! consumption curve, the stored stream's frames with the header as pre-roll
//! (one frame of `header_bytes` at decode time 0, so it is admitted like data
//! and sent before round 0's media), the schedule and plan from the model,
//! and the write: the stored stream is streamed from the source through one
//! round-sized buffer, cut at the schedule's round boundaries, and each round
//! handed to the store's writer after the [`WriteGate`] lets it through.
//! Nothing is visible until the store commits; any error aborts the writer,
//! which removes the title and frees its strides. The embedded sample titles
//! (`rondo serve`'s demo) live in [`samples`]; how `rondo ingest` finds a
//! running server to upload to is [`handoff`].

pub mod handoff;
mod samples;

pub use samples::{SAMPLE_TITLES, ingest_sample_titles, sample_titles};

use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::path::Path;

use rondo_media::container::{MediaError, PreparedMedia, prepare, prepare_bytes};
use rondo_model::layout::{LayoutError, TitleLayout, TitlePlan};
use rondo_model::schedule::{Frame, Schedule, ScheduleError};
use rondo_model::units::TitleId;
use rondo_store::{
    DeviceError, KeyframeRecord, Store, StoreError, TierTitleRecord, TitleMeta, TitleRecord,
    TitleWriter, validate_title_name,
};
use rondo_tier::{Tier, TierError};
use thiserror::Error;

/// Paces ingest writes. The running server implements it to let a round's
/// writes through only when the disk time admitted streams have reserved
/// leaves room (and to have its emulated disks serve them); offline ingest
/// uses [`Unthrottled`].
pub trait WriteGate {
    /// Called before round `round` of `title` is written, with the title's
    /// layout (where the round's writes go, and the rounds after it) and the
    /// bytes the round writes to the devices (every replica, block padding
    /// included). Returns when the writes may go ahead.
    fn before_write_round(
        &self,
        title: TitleId,
        layout: &TitleLayout,
        round: usize,
        round_bytes: u64,
    );

    /// Title `title` was placed as `layout`, before any byte of it is
    /// written: the server makes its charged stroke cover it
    /// (`crate::stroke`), or refuses the title with the reason.
    fn placed(&self, title: TitleId, layout: &TitleLayout) -> Result<(), String> {
        let _ = (title, layout);
        Ok(())
    }

    /// The ingest of `title` has ended (stored or not): no more rounds of it
    /// will be asked for.
    fn title_done(&self, title: TitleId) {
        let _ = title;
    }
}

/// Lets every write through at once (no server owns the directory).
#[derive(Copy, Clone, Debug, Default)]
pub struct Unthrottled;

impl WriteGate for Unthrottled {
    fn before_write_round(&self, _: TitleId, _: &TitleLayout, _: usize, _: u64) {}
}

/// Why a file was not stored. Every message starts with the file and says
/// what is wrong with it; the store is unchanged.
/// A stride that holds a round of `round_bytes`: the smallest power-of-two
/// multiple of the current stride (so a multiple of the block) at least
/// twice the round (room for the title's larger rounds).
pub fn suggested_stride_bytes(round_bytes: u64, stride_bytes: u64) -> u64 {
    let mut stride = stride_bytes.max(1);
    while stride < round_bytes.saturating_mul(2) {
        stride = stride.saturating_mul(2);
    }
    stride
}

#[derive(Debug, Error)]
pub enum IngestError {
    /// Corrupt, truncated, unknown or unsupported media, or an unreadable
    /// file (the media crate's message names the box or packet and offset).
    #[error("{file}: {source}")]
    Media {
        file: String,
        #[source]
        source: MediaError,
    },
    #[error(
        "{file}: reading it failed while it was being stored ({source}); did it change? \
         Nothing was stored"
    )]
    SourceRead {
        file: String,
        #[source]
        source: io::Error,
    },
    #[error("{file}: invalid title name {name:?}: {reason}")]
    InvalidName {
        file: String,
        name: String,
        reason: String,
    },
    #[error("{file}: a title named {name:?} already exists; choose another name")]
    NameTaken { file: String, name: String },
    #[error("{file}: {reason}")]
    DiskFull { file: String, reason: String },
    #[error("{file}: not stored: {reason}")]
    StrokeBusy { file: String, reason: String },
    #[error(
        "{file}: playback round {round} holds {bytes} bytes{}, but one round's data must fit a \
         {stride_bytes}-byte stride: the bitrate is too high for {} ms rounds (re-encode at a \
         lower bitrate, or store it in a new data directory with larger strides, created by \
         `rondo serve --data-dir NEW_DIR --stride-bytes {}`, or shorter rounds, `--round-ms`)",
        if *.round == 0 && *.header_bytes > 0 {
            format!(" (including the {}-byte header)", .header_bytes)
        } else {
            String::new()
        },
        .round_duration_ns / 1_000_000,
        suggested_stride_bytes(*.bytes, *.stride_bytes)
    )]
    RoundTooLarge {
        file: String,
        round: usize,
        /// Stored bytes of the round, block padding included.
        bytes: u64,
        stride_bytes: u64,
        round_duration_ns: u64,
        header_bytes: u64,
    },
    #[error("{file}: its frames cannot be scheduled: {source}")]
    Schedule {
        file: String,
        #[source]
        source: ScheduleError,
    },
    #[error("{file}: cannot be laid out: {source}")]
    Layout {
        file: String,
        #[source]
        source: LayoutError,
    },
    #[error("{file}: {source}")]
    Tier {
        file: String,
        #[source]
        source: TierError,
    },
    #[error("{file}: {source}")]
    Store {
        file: String,
        #[source]
        source: StoreError,
    },
    #[error(
        "{file}: the stored stream has {found_bytes} bytes but its consumption curve accounts \
         for {expected_bytes}"
    )]
    StreamLength {
        file: String,
        expected_bytes: u64,
        found_bytes: u64,
    },
}

impl IngestError {
    /// The file (or label of in-memory media) the error is about.
    pub fn file(&self) -> &str {
        match self {
            IngestError::Media { file, .. }
            | IngestError::SourceRead { file, .. }
            | IngestError::InvalidName { file, .. }
            | IngestError::NameTaken { file, .. }
            | IngestError::DiskFull { file, .. }
            | IngestError::StrokeBusy { file, .. }
            | IngestError::RoundTooLarge { file, .. }
            | IngestError::Schedule { file, .. }
            | IngestError::Layout { file, .. }
            | IngestError::Store { file, .. }
            | IngestError::Tier { file, .. }
            | IngestError::StreamLength { file, .. } => file,
        }
    }

    fn from_store(file: &str, error: StoreError) -> IngestError {
        let file = file.to_string();
        match error {
            StoreError::InvalidName { name, reason } => IngestError::InvalidName {
                file,
                name,
                reason: reason.to_string(),
            },
            StoreError::NameTaken { name } => IngestError::NameTaken { file, name },
            e @ StoreError::DiskFull { .. } => IngestError::DiskFull {
                file,
                reason: e.to_string(),
            },
            StoreError::Device(DeviceError::Io {
                disk, path, source, ..
            }) if source.kind() == io::ErrorKind::StorageFull => IngestError::DiskFull {
                file,
                reason: format!(
                    "the filesystem holding disk {}'s device {} is full ({source}); the title \
                     was not stored",
                    disk.0,
                    path.display()
                ),
            },
            source => IngestError::Store { file, source },
        }
    }
}

/// Stores the media file at `path` as a title named `name` (default: the
/// file's stem), recording `created_unix_ns` as its creation time. Writes go
/// through `write_gate`; `progress(done_bytes, total_bytes)` is called as the
/// stored stream is written. Atomic: on any error nothing is visible and the
/// title's space is free again.
pub fn ingest_file(
    store: &Store,
    path: &Path,
    name: Option<&str>,
    created_unix_ns: u64,
    write_gate: &dyn WriteGate,
    progress: &dyn Fn(u64, u64),
) -> Result<TitleRecord, IngestError> {
    let source_file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    let label = path.display().to_string();
    let job = Job {
        store,
        file: &label,
        source_file_name: &source_file_name,
        created_unix_ns,
        write_gate,
        progress,
        staging: false,
    };
    job.run_path(path, name)
}

/// [`ingest_file`] for a file whose original name is `source_file_name`
/// (an upload spooled to a temporary file): the default title name is that
/// name's stem, the catalog records it as the source, and error messages
/// name it rather than the temporary file.
pub fn ingest_file_as(
    store: &Store,
    path: &Path,
    source_file_name: &str,
    name: Option<&str>,
    created_unix_ns: u64,
    write_gate: &dyn WriteGate,
    progress: &dyn Fn(u64, u64),
) -> Result<TitleRecord, IngestError> {
    let job = Job {
        store,
        file: source_file_name,
        source_file_name,
        created_unix_ns,
        write_gate,
        progress,
        staging: false,
    };
    job.run_path(path, name)
}

/// Stores media held in memory (`source_file_name` labels it in messages
/// and the catalog, and its stem is the default name).
pub fn ingest_bytes(
    store: &Store,
    bytes: &[u8],
    source_file_name: &str,
    name: Option<&str>,
    created_unix_ns: u64,
    write_gate: &dyn WriteGate,
    progress: &dyn Fn(u64, u64),
) -> Result<TitleRecord, IngestError> {
    let file = source_file_name.to_string();
    let name = resolve_name(store, &file, source_file_name, name, false)?;
    let prepared = prepare_bytes(bytes).map_err(|source| IngestError::Media {
        file: file.clone(),
        source,
    })?;
    let job = Job {
        store,
        file: &file,
        source_file_name,
        created_unix_ns,
        write_gate,
        progress,
        staging: false,
    };
    job.run(&name, &prepared, &mut io::Cursor::new(bytes))
}

/// Stores the media file at `path`, fetched from a tier, as the staged copy
/// of tier title `record` (same name, same source file name); writes through
/// `write_gate`, atomically, as [`ingest_file`].
pub fn stage_file(
    store: &Store,
    path: &Path,
    record: &TierTitleRecord,
    created_unix_ns: u64,
    write_gate: &dyn WriteGate,
    progress: &dyn Fn(u64, u64),
) -> Result<TitleRecord, IngestError> {
    let job = Job {
        store,
        file: &record.source_file_name,
        source_file_name: &record.source_file_name,
        created_unix_ns,
        write_gate,
        progress,
        staging: true,
    };
    job.run_path(path, Some(&record.name))
}

/// Stores the media file at `path` (originally `source_file_name`: its stem
/// is the default title name) on `tier` (named `tier_name` in
/// `tiers.toml`) as a title whose home is that tier: the file is checked as
/// an ingest would check it (so it can be staged onto this array later),
/// stored whole as one tier object, and recorded in the catalog with what
/// staging needs. Nothing is written to the array. If the catalog refuses
/// the record, the object is removed again.
pub fn ingest_to_tier(
    store: &Store,
    tier: &dyn Tier,
    tier_name: &str,
    path: &Path,
    source_file_name: &str,
    name: Option<&str>,
    created_unix_ns: u64,
) -> Result<TierTitleRecord, IngestError> {
    let label = source_file_name.to_string();
    let job = Job {
        store,
        file: &label,
        source_file_name,
        created_unix_ns,
        write_gate: &Unthrottled,
        progress: &|_, _| {},
        staging: false,
    };
    let name = resolve_name(store, &label, source_file_name, name, false)?;
    let prepared = prepare(path).map_err(|source| IngestError::Media {
        file: label.clone(),
        source,
    })?;
    let (_, _, meta) = job.plan(&name, &prepared)?;
    let key = tier_object_key(&name);
    let tier_error = |source: TierError| IngestError::Tier {
        file: label.clone(),
        source,
    };
    let object = tier.put(&key, path).map_err(tier_error)?;
    let record = TierTitleRecord {
        name,
        tier: tier_name.to_string(),
        object_key: object.key.clone(),
        object_bytes: object.size_bytes,
        object_crc32c: object.crc32c,
        source_file_name: source_file_name.to_string(),
        content_type: meta.content_type,
        duration_ns: meta.duration_ns,
        stored_bytes: prepared.stored_bytes,
        round_duration_ns: meta.round_duration_ns,
        client_bytes: meta.client_bytes,
        pinned: false,
        request_count: 0,
        last_request_unix_ns: 0,
        created_unix_ns,
    };
    if let Err(e) = store.add_tier_title(&record) {
        let _ = tier.remove(&key);
        return Err(IngestError::from_store(&label, e));
    }
    Ok(record)
}

/// A tier object's key for title `name`: its letters, digits, `-`, `_`
/// and `.` (others become `_`), then the name's CRC32C so that names
/// differing only in other characters get different keys.
pub fn tier_object_key(name: &str) -> String {
    let mut key: String = name
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if key.starts_with('.') {
        key.replace_range(0..1, "_");
    }
    format!("{key}-{:08x}", rondo_store::checksum(name.as_bytes()))
}

/// The title name: `name`, or the stem of `source_file_name`; refused before
/// the media is read when invalid or already taken.
fn resolve_name(
    store: &Store,
    file: &str,
    source_file_name: &str,
    name: Option<&str>,
    staging: bool,
) -> Result<String, IngestError> {
    let name = match name {
        Some(name) => name.to_string(),
        None => Path::new(source_file_name)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    validate_title_name(&name).map_err(|e| IngestError::from_store(file, e))?;
    if !staging {
        match store.tier_title(&name) {
            Ok(Some(_)) => {
                return Err(IngestError::NameTaken {
                    file: file.to_string(),
                    name,
                });
            }
            Ok(None) => {}
            Err(e) => return Err(IngestError::from_store(file, e)),
        }
    }
    match store.title_by_name(&name) {
        Ok(Some(_)) => Err(IngestError::NameTaken {
            file: file.to_string(),
            name,
        }),
        Ok(None) => Ok(name),
        Err(e) => Err(IngestError::from_store(file, e)),
    }
}

/// The frames of the stored stream: the header as one pre-roll frame at
/// decode time 0, then the media's consumption curve.
pub fn stored_frames(prepared: &PreparedMedia) -> Vec<Frame> {
    let mut frames = Vec::with_capacity(prepared.frames.len() + 1);
    if prepared.header_bytes > 0 {
        frames.push(Frame {
            decode_time_ns: 0,
            bytes: prepared.header_bytes,
        });
    }
    frames.extend_from_slice(&prepared.frames);
    frames
}

/// One ingest: the store, the file as messages and the catalog name it, and
/// the callbacks.
struct Job<'a> {
    store: &'a Store,
    file: &'a str,
    source_file_name: &'a str,
    created_unix_ns: u64,
    write_gate: &'a dyn WriteGate,
    progress: &'a dyn Fn(u64, u64),
    /// A tier title's staging: its name is the tier title's.
    staging: bool,
}

impl Job<'_> {
    /// Settles the name, prepares the file at `path` and stores it.
    fn run_path(&self, path: &Path, name: Option<&str>) -> Result<TitleRecord, IngestError> {
        let name = resolve_name(
            self.store,
            self.file,
            self.source_file_name,
            name,
            self.staging,
        )?;
        let media_err = |source| IngestError::Media {
            file: self.file.to_string(),
            source,
        };
        let prepared = prepare(path).map_err(media_err)?;
        let mut source = File::open(path).map_err(|e| {
            media_err(MediaError::Io {
                context: path.display().to_string(),
                source: e,
            })
        })?;
        self.run(&name, &prepared, &mut source)
    }

    /// The stored stream's schedule, plan and catalog record: every check
    /// that a file can be stored on this array (also run by a tier ingest,
    /// so a title that could never be staged is refused up front).
    fn plan(
        &self,
        name: &str,
        prepared: &PreparedMedia,
    ) -> Result<(Schedule, TitlePlan, TitleMeta), IngestError> {
        let file = self.file.to_string();
        let config = self.store.config();
        let frames = stored_frames(prepared);
        let frame_bytes: u64 = frames.iter().map(|f| f.bytes).sum();
        if frame_bytes != prepared.stored_bytes {
            return Err(IngestError::StreamLength {
                file,
                expected_bytes: frame_bytes,
                found_bytes: prepared.stored_bytes,
            });
        }
        let schedule = Schedule::from_frames(&frames, config.round_duration_ns, config.block_bytes)
            .map_err(|source| IngestError::Schedule {
                file: file.clone(),
                source,
            })?;
        let inputs = self
            .store
            .layout_inputs()
            .map_err(|e| IngestError::from_store(self.file, e))?;
        let plan = TitlePlan::for_schedule(
            &schedule,
            &self.store.layout_params(),
            inputs.start_disk,
            inputs.seed,
        )
        .map_err(|e| match e {
            LayoutError::RoundExceedsStride {
                round,
                bytes,
                stride_bytes,
            } => IngestError::RoundTooLarge {
                file: file.clone(),
                round,
                bytes,
                stride_bytes,
                round_duration_ns: config.round_duration_ns,
                header_bytes: prepared.header_bytes,
            },
            source => IngestError::Layout {
                file: file.clone(),
                source,
            },
        })?;
        let meta = TitleMeta {
            name: name.to_string(),
            source_file_name: self.source_file_name.to_string(),
            container_kind: prepared.info.container.name().to_string(),
            content_type: prepared.info.content_type.to_string(),
            duration_ns: prepared.info.duration_ns,
            header_bytes: prepared.header_bytes,
            round_duration_ns: config.round_duration_ns,
            client_bytes: schedule.client_bytes.clone(),
            created_unix_ns: self.created_unix_ns,
        };
        Ok((schedule, plan, meta))
    }

    fn run<R: Read + Seek>(
        &self,
        name: &str,
        prepared: &PreparedMedia,
        source: &mut R,
    ) -> Result<TitleRecord, IngestError> {
        let (schedule, plan, meta) = self.plan(name, prepared)?;
        let mut writer = self
            .store
            .begin_title(meta, &plan)
            .map_err(|e| IngestError::from_store(self.file, e))?;
        // Keyframes for `?t=` (catalog schema 2).
        let keyframes: Vec<KeyframeRecord> = prepared
            .keyframes
            .iter()
            .map(|k| KeyframeRecord {
                time_ns: k.time_ns,
                byte_offset: k.byte_offset,
            })
            .collect();
        let title = writer.id();
        if let Err(reason) = self.write_gate.placed(title, writer.layout()) {
            if let Err(abort) = writer.abort() {
                tracing::warn!(file = self.file, error = %abort, "could not abort an ingest");
            }
            return Err(IngestError::StrokeBusy {
                file: self.file.to_string(),
                reason,
            });
        }
        let written = writer
            .set_keyframes(&keyframes)
            .map_err(|e| IngestError::from_store(self.file, e))
            .and_then(|()| self.write_rounds(prepared, source, &schedule, &mut writer));
        self.write_gate.title_done(title);
        match written {
            Ok(()) => writer
                .commit()
                .map_err(|e| IngestError::from_store(self.file, e)),
            Err(e) => {
                if let Err(abort) = writer.abort() {
                    // The title stays `writing`; the next open removes it.
                    tracing::warn!(file = self.file, error = %abort, "could not abort an ingest");
                }
                Err(e)
            }
        }
    }

    /// Streams the stored stream into the writer, round by round.
    fn write_rounds<R: Read + Seek>(
        &self,
        prepared: &PreparedMedia,
        source: &mut R,
        schedule: &Schedule,
        writer: &mut TitleWriter,
    ) -> Result<(), IngestError> {
        let replicas = if self.store.layout_params().backup.is_some() {
            2
        } else {
            1
        };
        let mut cutter = RoundCutter {
            writer,
            schedule,
            replicas,
            round: 0,
            buf: Vec::with_capacity(
                schedule.client_bytes.iter().copied().max().unwrap_or(0) as usize
            ),
            done_bytes: 0,
            total_bytes: schedule.total_bytes(),
            write_gate: self.write_gate,
            progress: self.progress,
            failure: None,
        };
        (self.progress)(0, cutter.total_bytes);
        let streamed = prepared
            .write_stored(source, &mut cutter)
            .and_then(|_| cutter.write_empty_rounds().map_err(io_to_media));
        if let Some(e) = cutter.failure.take() {
            return Err(IngestError::from_store(self.file, e));
        }
        streamed.map_err(|error| match error {
            // write_stored names its input "source" and our sink "output".
            MediaError::Io { context, source } if context == "source" => IngestError::SourceRead {
                file: self.file.to_string(),
                source,
            },
            source => IngestError::Media {
                file: self.file.to_string(),
                source,
            },
        })?;
        if cutter.round != schedule.rounds() {
            return Err(IngestError::StreamLength {
                file: self.file.to_string(),
                expected_bytes: cutter.total_bytes,
                found_bytes: cutter.done_bytes + cutter.buf.len() as u64,
            });
        }
        Ok(())
    }
}

fn io_to_media(e: io::Error) -> MediaError {
    MediaError::Io {
        context: "output".to_string(),
        source: e,
    }
}

/// A `Write` sink that cuts the stored stream at round boundaries and writes
/// each round through the title writer. Holds at most one round in memory.
struct RoundCutter<'a> {
    writer: &'a mut TitleWriter,
    schedule: &'a Schedule,
    replicas: u64,
    /// The round being filled.
    round: usize,
    buf: Vec<u8>,
    done_bytes: u64,
    total_bytes: u64,
    write_gate: &'a dyn WriteGate,
    progress: &'a dyn Fn(u64, u64),
    /// The store error behind a failed `write` (io::Error cannot carry it).
    failure: Option<StoreError>,
}

impl RoundCutter<'_> {
    fn write_round(&mut self) -> io::Result<()> {
        self.write_gate.before_write_round(
            self.writer.id(),
            self.writer.layout(),
            self.round,
            self.schedule.disk_read_bytes[self.round] * self.replicas,
        );
        if let Err(e) = self.writer.write_round(self.round, &self.buf) {
            let message = e.to_string();
            self.failure = Some(e);
            return Err(io::Error::other(message));
        }
        self.done_bytes += self.buf.len() as u64;
        self.buf.clear();
        self.round += 1;
        (self.progress)(self.done_bytes, self.total_bytes);
        Ok(())
    }

    /// Writes the empty rounds that come next (no bytes will fill them).
    fn write_empty_rounds(&mut self) -> io::Result<()> {
        while self.round < self.schedule.rounds() && self.schedule.client_bytes[self.round] == 0 {
            self.write_round()?;
        }
        Ok(())
    }
}

impl Write for RoundCutter<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let mut rest = data;
        while !rest.is_empty() {
            self.write_empty_rounds()?;
            let Some(&round_bytes) = self.schedule.client_bytes.get(self.round) else {
                return Err(io::Error::other(format!(
                    "the stored stream runs past its schedule's {} bytes",
                    self.total_bytes
                )));
            };
            let take = ((round_bytes - self.buf.len() as u64) as usize).min(rest.len());
            self.buf.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            if self.buf.len() as u64 == round_bytes {
                self.write_round()?;
            }
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
