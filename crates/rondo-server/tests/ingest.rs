//! Ingest end to end: media made with ffmpeg at test time (MP4 faststart,
//! MP4 moov-at-end, a 32 s MPEG-TS) stored into temporary data directories
//! and read back round by round, both replicas, byte for byte against the
//! media crate's stored stream; the schedule against the consumption curve;
//! refused inputs (corrupt, truncated, random bytes, MPEG-4 Part 2, bad or
//! taken names, a full array, rounds larger than a stride, a source that
//! changes mid-write) leaving the store exactly as it was; the write gate
//! and progress callbacks; the embedded sample titles; and the byte/round
//! mapping of loaded titles against the bytes actually stored.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use rondo_media::container::{ContainerKind, prepare, prepare_bytes};
use rondo_model::layout::{Replica, TitleLayout};
use rondo_model::schedule::Schedule;
use rondo_model::units::TitleId;
use rondo_server::ingest::{
    IngestError, Unthrottled, WriteGate, ingest_bytes, ingest_file, ingest_file_as,
    ingest_sample_titles, sample_titles, stored_frames,
};
use rondo_server::titles::{RoundPosition, load_titles, rondo_bound};
use rondo_store::{ArrayId, Store, StoreConfig, StoredTitle, TitleRecord};
use rondo_testkit::media::Clip;
use tempfile::TempDir;

const MIB: u64 = 1024 * 1024;
/// Device capacity of the test arrays: real 2 MiB strides, small sparse disks.
const CAPACITY_BYTES: u64 = 256 * MIB;

/// Makes `dir/name` with ffmpeg from `video` (a lavfi source) and a sine
/// tone, `seconds` long, then `args` (codecs, container options).
fn make_media(dir: &Path, name: &str, video: &str, seconds: u32, args: &[&str]) -> PathBuf {
    Clip::video(video)
        .sine()
        .seconds(seconds)
        .args(args)
        .make(dir.join(name))
}

const TESTSRC: &str = "testsrc2=size=320x240:rate=30";
const H264_AAC: &[&str] = &[
    "-c:v",
    "libx264",
    "-preset",
    "ultrafast",
    "-pix_fmt",
    "yuv420p",
    "-g",
    "30",
    "-c:a",
    "aac",
];

fn with(base: &[&'static str], extra: &[&'static str]) -> Vec<&'static str> {
    base.iter().chain(extra).copied().collect()
}

fn store_config(seed: u64, capacity_bytes: u64) -> StoreConfig {
    let mut config = StoreConfig::new(4, "cheetah-4lp", capacity_bytes);
    config.array_id = Some(ArrayId::from_seed(seed));
    config
}

fn new_store(dir: &TempDir, seed: u64) -> Store {
    Store::create(dir.path().join("data"), store_config(seed, CAPACITY_BYTES)).unwrap()
}

fn ingest(store: &Store, path: &Path, name: Option<&str>) -> Result<TitleRecord, IngestError> {
    ingest_file(
        store,
        path,
        name,
        1_700_000_000_000_000_000,
        &Unthrottled,
        &|_, _| {},
    )
}

/// The stored stream the media crate says `path` has.
fn expected_stream(path: &Path) -> Vec<u8> {
    let prepared = prepare(path).unwrap();
    let mut out = Vec::new();
    prepared.write_stored_from_path(path, &mut out).unwrap();
    assert_eq!(out.len() as u64, prepared.stored_bytes);
    out
}

/// Every round of `title` from `replica`, concatenated.
fn read_back(store: &Store, title: &StoredTitle, replica: Replica) -> Vec<u8> {
    let mut out = Vec::new();
    for round in 0..title.record.client_bytes.len() {
        let bytes = store.read_round(title, round, replica).unwrap();
        assert_eq!(bytes.len() as u64, title.record.client_bytes[round]);
        out.extend_from_slice(&bytes);
    }
    out
}

/// What a refused ingest must leave unchanged.
fn snapshot(store: &Store) -> (Vec<TitleRecord>, Vec<u64>) {
    (store.titles().unwrap(), store.free_strides())
}

/// Checks a stored title against its source: the schedule is the curve's
/// (header as pre-roll), both replicas read back as the stored stream.
fn check_title(store: &Store, record: &TitleRecord, path: &Path) -> Vec<u8> {
    let prepared = prepare(path).unwrap();
    let expected = expected_stream(path);
    let config = store.config();
    let schedule = Schedule::from_frames(
        &stored_frames(&prepared),
        config.round_duration_ns,
        config.block_bytes,
    )
    .unwrap();
    assert_eq!(record.client_bytes, schedule.client_bytes);
    assert_eq!(schedule.total_bytes(), prepared.stored_bytes);
    assert_eq!(record.size_bytes, prepared.stored_bytes);
    assert_eq!(record.header_bytes, prepared.header_bytes);
    assert_eq!(record.duration_ns, prepared.info.duration_ns);
    assert_eq!(record.content_type, prepared.info.content_type);
    assert_eq!(record.container_kind, prepared.info.container.name());
    // Round 0 holds the header and the first round's media.
    let first_media: u64 = prepared
        .frames
        .iter()
        .take_while(|f| f.decode_time_ns < config.round_duration_ns)
        .map(|f| f.bytes)
        .sum();
    assert_eq!(record.client_bytes[0], prepared.header_bytes + first_media);

    let title = store.load_title(record.id).unwrap();
    assert_eq!(&title.record, record);
    let primary = read_back(store, &title, Replica::Primary);
    assert!(primary == expected, "{}: primary differs", path.display());
    let backup = read_back(store, &title, Replica::Backup);
    assert!(backup == expected, "{}: backup differs", path.display());
    expected
}

#[test]
fn mp4_faststart_moov_at_end_and_ts_store_and_read_back_byte_for_byte() {
    let dir = TempDir::new().unwrap();
    let faststart = make_media(
        dir.path(),
        "faststart.mp4",
        TESTSRC,
        8,
        &with(H264_AAC, &["-movflags", "+faststart"]),
    );
    let at_end = make_media(dir.path(), "at-end.mp4", TESTSRC, 6, H264_AAC);
    let ts = make_media(
        dir.path(),
        "long.ts",
        TESTSRC,
        32,
        &with(H264_AAC, &["-f", "mpegts"]),
    );
    assert_eq!(
        prepare(&faststart).unwrap().info.container,
        ContainerKind::Mp4Faststart
    );
    assert_eq!(
        prepare(&at_end).unwrap().info.container,
        ContainerKind::Mp4MoovAtEnd
    );
    assert_eq!(prepare(&ts).unwrap().info.container, ContainerKind::MpegTs);

    let store = new_store(&dir, 1);
    let strides_before: u64 = store.free_strides().iter().sum();
    let a = ingest(&store, &faststart, None).unwrap();
    let b = ingest(&store, &at_end, Some("moov at end")).unwrap();
    let c = ingest(&store, &ts, None).unwrap();
    assert_eq!(
        (a.name.as_str(), b.name.as_str(), c.name.as_str()),
        ("faststart", "moov at end", "long")
    );
    assert_eq!(a.source_file_name, "faststart.mp4");
    assert!(
        c.client_bytes.len() >= 32,
        "{} rounds",
        c.client_bytes.len()
    );
    // Round-robin start disks over titles.
    assert_eq!((a.start_disk.0, b.start_disk.0, c.start_disk.0), (0, 1, 2));
    assert!(store.free_strides().iter().sum::<u64>() < strides_before);

    let mut streams = Vec::new();
    for (record, path) in [(&a, &faststart), (&b, &at_end), (&c, &ts)] {
        streams.push(check_title(&store, record, path));
    }
    // The moov-at-end file is stored as its faststart rewrite.
    assert_eq!(&streams[1][4..8], b"ftyp");
    let moov_at = u32::from_be_bytes(streams[1][..4].try_into().unwrap()) as usize;
    assert_eq!(&streams[1][moov_at + 4..moov_at + 8], b"moov");
    assert_eq!(c.header_bytes, 0);

    // After a reopen the same titles load with charges for the rondo bound,
    // and the byte -> round mapping points at the bytes actually stored.
    drop(store);
    let store = Store::open(dir.path().join("data")).unwrap();
    assert!(store.fsck().passed());
    let (bound, _) = rondo_bound(store.config(), rondo_store::Stroke::Whole, None).unwrap();
    let loaded = load_titles(&store, &bound, rondo_store::titles::ReadCharging::SWEEP).unwrap();
    assert_eq!(loaded.len(), 3);
    for (title, stream) in loaded.iter().zip(&streams) {
        assert_eq!(title.charges.rounds(), title.record.client_bytes.len());
        assert_eq!(title.schedule.total_bytes(), stream.len() as u64);
        assert_eq!(title.plan.rounds(), title.rounds());
        assert_eq!(&title.stored.layout, &title.layout);
        for round in 0..title.rounds() {
            let primary = title.charges.primary(round);
            assert_eq!(primary.disk, title.layout.round(round).primary_disk);
            assert!(primary.cost_ns > 0, "round {round} is charged");
            assert_eq!(title.charges.backup(round).len(), 1);
        }
        let rounds: Vec<Vec<u8>> = (0..title.rounds())
            .map(|r| {
                store
                    .read_round(&title.stored, r, Replica::Primary)
                    .unwrap()
            })
            .collect();
        let size = stream.len() as u64;
        for offset in [0, 1, size / 3, size / 2, size - 1]
            .into_iter()
            .chain((0..title.rounds()).map(|r| title.round_byte_range(r).start))
        {
            let p = title.position_of_byte(offset).unwrap();
            assert_eq!(
                rounds[p.round][p.offset_in_round_bytes as usize],
                stream[offset as usize]
            );
            assert_eq!(title.stored_offset(p), Some(offset));
            assert_eq!(title.round_for_byte(offset), Some(p.round));
        }
        assert_eq!(title.position_of_byte(size), None);
        assert_eq!(
            title.stored_offset(RoundPosition {
                round: title.rounds(),
                offset_in_round_bytes: 0
            }),
            None
        );
        assert_eq!(title.round_for_time(5_500_000_000), 5);
    }
}

#[test]
fn refused_inputs_say_what_is_wrong_and_change_nothing() {
    let dir = TempDir::new().unwrap();
    let good = make_media(
        dir.path(),
        "good.mp4",
        TESTSRC,
        3,
        &with(H264_AAC, &["-movflags", "+faststart"]),
    );
    let mpeg4 = make_media(
        dir.path(),
        "part2.mp4",
        TESTSRC,
        2,
        &["-c:v", "mpeg4", "-c:a", "aac"],
    );
    let bytes = std::fs::read(&good).unwrap();
    let truncated = dir.path().join("truncated.mp4");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let random = dir.path().join("random.mp4");
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let noise: Vec<u8> = (0..200_000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect();
    std::fs::write(&random, &noise).unwrap();
    // Corrupt: the first sample-size table claims a million entries.
    let corrupt = dir.path().join("corrupt.mp4");
    let mut damaged = bytes.clone();
    let stsz = damaged.windows(4).position(|w| w == b"stsz").unwrap();
    damaged[stsz + 12..stsz + 16].copy_from_slice(&1_000_000u32.to_be_bytes());
    std::fs::write(&corrupt, &damaged).unwrap();
    let empty = dir.path().join("empty.mp4");
    std::fs::write(&empty, b"").unwrap();

    let missing = dir.path().join("missing.mp4");

    let store = new_store(&dir, 2);
    let kept = ingest(&store, &good, Some("kept")).unwrap();
    let before = snapshot(&store);

    let cases: Vec<(&Path, Option<&str>, &str)> = vec![
        (&truncated, None, "truncated MP4 file"),
        (&random, None, "not an MP4 or MPEG-TS file"),
        (&corrupt, None, "corrupt MP4 file"),
        (&corrupt, None, "stsz"),
        (&mpeg4, None, "unsupported MP4 file"),
        (&mpeg4, None, "MPEG-4 Part 2"),
        (&empty, None, "the file is empty"),
        (&good, Some("a/b"), "must not contain '/'"),
        (&good, Some(".."), "must not contain '..'"),
        (&good, Some("up/../x"), "invalid title name"),
        (&good, Some(""), "must not be empty"),
        (&good, Some("tab\there"), "control characters"),
        (&good, Some("kept"), "a title named \"kept\" already exists"),
        (&missing, None, "missing.mp4"),
    ];
    for (path, name, expected) in cases {
        let err = ingest(&store, path, name).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains(expected),
            "{}: {message:?} lacks {expected:?}",
            path.display()
        );
        assert!(
            message.starts_with(&path.display().to_string()),
            "{message:?} names the file first"
        );
        assert_eq!(err.file(), path.display().to_string());
        assert_eq!(snapshot(&store), before, "{message}");
    }
    assert!(matches!(
        ingest(&store, &mpeg4, None).unwrap_err(),
        IngestError::Media { .. }
    ));
    assert!(matches!(
        ingest(&store, &good, Some("kept")).unwrap_err(),
        IngestError::NameTaken { .. }
    ));
    assert_eq!(store.titles().unwrap(), vec![kept]);
    assert!(store.fsck().passed());
}

#[test]
fn an_error_while_writing_aborts_the_title_and_frees_its_space() {
    let dir = TempDir::new().unwrap();
    let path = make_media(
        dir.path(),
        "shrinks.ts",
        TESTSRC,
        12,
        &with(H264_AAC, &["-f", "mpegts"]),
    );
    let store = new_store(&dir, 3);
    let before = snapshot(&store);
    let rounds_done = RefCell::new(0);
    // After the third round, the source file loses its second half.
    let progress = |done: u64, total: u64| {
        assert!(done <= total);
        if done > 0 {
            *rounds_done.borrow_mut() += 1;
        }
        if *rounds_done.borrow() == 3 {
            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            file.set_len(total / 2).unwrap();
        }
    };
    let err = ingest_file(&store, &path, None, 0, &Unthrottled, &progress).unwrap_err();
    assert!(matches!(err, IngestError::SourceRead { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.starts_with(&path.display().to_string()),
        "{message}"
    );
    assert!(
        message.contains("did it change? Nothing was stored"),
        "{message}"
    );
    assert!(*rounds_done.borrow() >= 3, "the error came mid-write");
    assert_eq!(snapshot(&store), before);
    let report = store.fsck();
    assert!(report.passed() && report.orphans.is_empty(), "{report}");
    // The aborted title's id (0) is not reused.
    let (name, bytes) = sample_titles()[0];
    let next = ingest_bytes(
        &store,
        bytes,
        "next.mp4",
        Some(name),
        0,
        &Unthrottled,
        &|_, _| {},
    )
    .unwrap();
    assert_eq!(next.id.0, 1);
}

#[test]
fn a_full_array_and_oversized_rounds_are_refused_whole() {
    let dir = TempDir::new().unwrap();
    let clip = make_media(
        dir.path(),
        "clip.mp4",
        TESTSRC,
        20,
        &with(H264_AAC, &["-movflags", "+faststart"]),
    );
    // Lossless noise: well over 2 MiB per second.
    let heavy = make_media(
        dir.path(),
        "heavy.mp4",
        "color=gray:size=640x480:rate=30,noise=alls=100:allf=t",
        2,
        &[
            "-c:v",
            "libx264",
            "-preset",
            "ultrafast",
            "-qp",
            "0",
            "-c:a",
            "aac",
        ],
    );

    // Two strides per disk: a few copies fit, then the array is full.
    let small = Store::create(dir.path().join("small"), store_config(4, 4 * MIB)).unwrap();
    let mut full = None;
    for n in 0..8 {
        let before = snapshot(&small);
        if let Err(e) = ingest(&small, &clip, Some(&format!("copy-{n}"))) {
            assert_eq!(snapshot(&small), before, "{e}");
            full = Some((n, e));
            break;
        }
    }
    let (stored, err) = full.expect("a 4-disk array of 16 MiB fills up");
    assert!(stored >= 1, "the first copy fits");
    assert!(matches!(err, IngestError::DiskFull { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("is full"), "{message}");
    assert!(
        message.starts_with(&clip.display().to_string()),
        "{message}"
    );
    assert_eq!(small.titles().unwrap().len(), stored);
    assert!(small.fsck().passed());
    drop(small);

    let store = new_store(&dir, 5);
    let before = snapshot(&store);
    let err = ingest(&store, &heavy, None).unwrap_err();
    assert!(matches!(err, IngestError::RoundTooLarge { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("must fit a 2097152-byte stride") && message.contains("1000 ms rounds"),
        "{message}"
    );
    assert_eq!(snapshot(&store), before);
    drop(store);

    // The advice is a command that works: a data directory with the stride
    // the message suggests stores the same file.
    let suggested: u64 = message
        .split("--stride-bytes ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no --stride-bytes N in the advice: {message}"));
    assert!(suggested > 2 * 1024 * 1024, "{message}");
    let wide_dir = TempDir::new().unwrap();
    let mut wide = store_config(6, CAPACITY_BYTES / suggested * suggested);
    wide.stride_bytes = suggested;
    let wide = Store::create(wide_dir.path().join("data"), wide).unwrap();
    let stored = ingest(&wide, &heavy, None)
        .unwrap_or_else(|e| panic!("with --stride-bytes {suggested}: {e}"));
    assert!(stored.size_bytes > 0);
    assert!(wide.fsck().passed());
}

/// Records every call of the gate.
#[derive(Default)]
struct RecordingGate {
    round_bytes: RefCell<Vec<u64>>,
}

impl WriteGate for RecordingGate {
    fn before_write_round(&self, _: TitleId, _: &TitleLayout, _: usize, round_bytes: u64) {
        self.round_bytes.borrow_mut().push(round_bytes);
    }
}

#[test]
fn the_gate_sees_every_round_and_progress_reaches_the_total() {
    let dir = TempDir::new().unwrap();
    let path = make_media(
        dir.path(),
        "gated.mp4",
        TESTSRC,
        5,
        &with(H264_AAC, &["-movflags", "+faststart"]),
    );
    let store = new_store(&dir, 6);
    let gate = RecordingGate::default();
    let seen = RefCell::new(Vec::new());
    let record = ingest_file(&store, &path, None, 42, &gate, &|done, total| {
        seen.borrow_mut().push((done, total))
    })
    .unwrap();
    assert_eq!(record.created_unix_ns, 42);
    let schedule = record.schedule(store.config().block_bytes);
    // Both replicas of each round, padding included.
    let expected: Vec<u64> = schedule.disk_read_bytes.iter().map(|b| 2 * b).collect();
    assert_eq!(*gate.round_bytes.borrow(), expected);
    let seen = seen.into_inner();
    assert_eq!(seen.first(), Some(&(0, record.size_bytes)));
    assert_eq!(seen.last(), Some(&(record.size_bytes, record.size_bytes)));
    assert_eq!(seen.len(), record.client_bytes.len() + 1);
    assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0));
}

#[test]
fn sample_titles_are_small_h264_aac_faststart_and_ingest_once() {
    let samples = sample_titles();
    assert!(samples.len() >= 2);
    let total: usize = samples.iter().map(|(_, b)| b.len()).sum();
    assert!(total < 3 * MIB as usize, "{total} bytes of samples");
    for (name, bytes) in samples {
        let info = prepare_bytes(bytes).unwrap().info;
        assert_eq!(info.container, ContainerKind::Mp4Faststart, "{name}");
        assert_eq!(info.video_codec.name(), "h264", "{name}");
        assert_eq!(info.audio_codec.map(|c| c.name()), Some("aac"), "{name}");
        let seconds = info.duration_ns / 1_000_000_000;
        assert!((15..=30).contains(&seconds), "{name}: {seconds} s");
    }

    let dir = TempDir::new().unwrap();
    let store = new_store(&dir, 7);
    let stored = ingest_sample_titles(&store, 0, &Unthrottled).unwrap();
    assert_eq!(stored.len(), samples.len());
    assert!(
        ingest_sample_titles(&store, 0, &Unthrottled)
            .unwrap()
            .is_empty()
    );
    for ((name, bytes), record) in samples.iter().zip(&stored) {
        assert_eq!(&record.name, name);
        // Faststart: the stored stream is the file itself.
        let title = store.load_title(record.id).unwrap();
        assert!(read_back(&store, &title, Replica::Primary) == *bytes);
    }
    assert!(store.fsck().passed());
}

#[test]
fn an_upload_is_named_after_its_original_file_not_its_spool_file() {
    let dir = TempDir::new().unwrap();
    let store = new_store(&dir, 8);
    let spool = dir.path().join(".upload-77-1.tmp");
    let (_, bytes) = sample_titles()[2];
    std::fs::write(&spool, bytes).unwrap();
    let record = ingest_file_as(
        &store,
        &spool,
        "holiday.mp4",
        None,
        0,
        &Unthrottled,
        &|_, _| {},
    )
    .unwrap();
    assert_eq!(record.name, "holiday");
    assert_eq!(record.source_file_name, "holiday.mp4");
    let title = store.load_title(record.id).unwrap();
    assert!(read_back(&store, &title, Replica::Primary) == bytes);

    std::fs::write(&spool, b"junk").unwrap();
    let before = snapshot(&store);
    let err = ingest_file_as(
        &store,
        &spool,
        "party.mp4",
        None,
        0,
        &Unthrottled,
        &|_, _| {},
    )
    .unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with("party.mp4: not an MP4 or MPEG-TS file"),
        "{message}"
    );
    assert!(!message.contains(".upload-77-1.tmp"), "{message}");
    assert_eq!(snapshot(&store), before);
    let err = ingest_file_as(
        &store,
        &spool,
        "holiday.mp4",
        None,
        0,
        &Unthrottled,
        &|_, _| {},
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "holiday.mp4: a title named \"holiday\" already exists; choose another name"
    );
}
