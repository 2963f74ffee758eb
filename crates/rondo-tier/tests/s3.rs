//! The S3 tier against a real S3 server: s3s-fs over a temporary directory,
//! in this process (`rondo_testkit::s3::S3Server`), signatures checked.
//! Round trips (one PUT and multipart), refusals, corruption behind the
//! tier's back, missing objects, the measured predictions, and a server
//! that is down.

use std::cell::Cell;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use rondo_testkit::s3::S3Server;
use rondo_tier::s3::{CALIBRATION_KEY, PART_BYTES, S3Tier};
use rondo_tier::{S3TierConfig, Tier, TierError, TierObject};

fn config(server: &S3Server) -> S3TierConfig {
    S3TierConfig {
        endpoint: server.endpoint.clone(),
        bucket: server.bucket.clone(),
        region: "us-east-1".into(),
        access_key_id: server.access_key_id.clone(),
        secret_access_key: server.secret_access_key.clone(),
        allow_http: true,
        prefix: None,
    }
}

fn open(server: &S3Server) -> S3Tier {
    S3Tier::open("cloud", &config(server), Path::new("tiers.toml")).expect("the S3 tier opens")
}

/// `bytes` of a seeded xorshift sequence (incompressible, distinct per seed).
fn pattern(bytes: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..bytes)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

fn file_with(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Fetches `object` into memory, checking that progress only grows.
fn fetch(tier: &dyn Tier, object: &TierObject) -> Result<Vec<u8>, TierError> {
    let mut out = Vec::new();
    let last = Cell::new(0u64);
    tier.fetch(object, &mut out, &|done| {
        assert!(
            done >= last.get(),
            "progress went back: {} → {done}",
            last.get()
        );
        last.set(done);
    })?;
    assert_eq!(last.get(), object.size_bytes, "progress ends at the size");
    Ok(out)
}

#[test]
fn puts_and_fetches_back_the_same_bytes_in_one_put_and_in_parts() {
    let dir = tempfile::tempdir().unwrap();
    let server = S3Server::start(&dir.path().join("s3"));
    let tier = open(&server);
    // Calibration object made at open, under its reserved key.
    assert!(server.object_file(CALIBRATION_KEY).is_file());

    // 3 MiB: one conditional PUT. 2.5 parts: a multipart upload.
    for (key, size) in [("small.ts", 3 << 20), ("large.ts", PART_BYTES * 5 / 2 + 7)] {
        let data = pattern(size, size as u64);
        let source = file_with(dir.path(), key, &data);
        let object = tier.put(key, &source).unwrap();
        assert_eq!(object.key, key);
        assert_eq!(object.size_bytes, size as u64);
        assert_eq!(object.crc32c, crc32c::crc32c(&data), "{key}");
        assert_eq!(
            std::fs::read(server.object_file(key)).unwrap(),
            data,
            "{key} as stored"
        );
        let back = fetch(&tier, &object).unwrap();
        assert!(back == data, "{key}: fetched bytes differ");
    }
    let status = tier.status();
    assert_eq!(status.kind, "s3");
    assert_eq!(status.fetches_total, 2);
    assert_eq!(status.fetch_failures_total, 0);
    assert_eq!(status.fetches_active, 0);
    assert_eq!(
        status.fetched_bytes_total,
        (3 << 20) + (PART_BYTES * 5 / 2 + 7) as u64
    );
    assert!(status.measured_bytes_per_s.unwrap() > 0.0);

    // The calibration object is kept: a second open reads it, writes nothing.
    drop(tier);
    let before = std::fs::metadata(server.object_file(CALIBRATION_KEY))
        .unwrap()
        .modified()
        .unwrap();
    let _again = open(&server);
    let after = std::fs::metadata(server.object_file(CALIBRATION_KEY))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(before, after);
}

#[test]
fn a_key_that_exists_is_refused_and_bad_keys_too() {
    let dir = tempfile::tempdir().unwrap();
    let server = S3Server::start(&dir.path().join("s3"));
    let tier = open(&server);
    let small = file_with(dir.path(), "a", &pattern(1000, 1));
    let large = file_with(dir.path(), "b", &pattern(PART_BYTES + 1, 2));
    for (key, source) in [("one.ts", &small), ("two.ts", &large)] {
        let first = tier.put(key, source).unwrap();
        let err = tier.put(key, &small).unwrap_err();
        assert!(matches!(err, TierError::Exists { .. }), "{key}: {err}");
        assert!(err.to_string().contains(key), "{err}");
        // The object is still the first one.
        assert_eq!(
            fetch(&tier, &first).unwrap(),
            std::fs::read(source).unwrap()
        );
    }
    for key in [CALIBRATION_KEY, "a/b", ""] {
        let err = tier.put(key, &small).unwrap_err();
        assert!(
            matches!(err, TierError::InvalidKey { .. }),
            "{key:?}: {err}"
        );
    }
}

#[test]
fn objects_changed_behind_the_tiers_back_are_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let server = S3Server::start(&dir.path().join("s3"));
    let tier = open(&server);
    let data = pattern(2 << 20, 3);
    let object = tier
        .put("title.ts", &file_with(dir.path(), "t", &data))
        .unwrap();

    // Same size, one byte flipped: the checksum.
    let mut flipped = data.clone();
    flipped[1 << 20] ^= 0x40;
    std::fs::write(server.object_file("title.ts"), &flipped).unwrap();
    let err = fetch(&tier, &object).unwrap_err();
    assert!(matches!(err, TierError::Corrupt { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("cloud") && text.contains("title.ts") && text.contains("checksum"),
        "{text}"
    );
    assert!(err.is_object_fault());

    // Shorter: the size, before any byte is written.
    std::fs::write(server.object_file("title.ts"), &data[..1000]).unwrap();
    let mut out = Vec::new();
    let err = tier.fetch(&object, &mut out, &|_| {}).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, TierError::Corrupt { .. }), "{text}");
    assert!(
        text.contains("1000 bytes") && text.contains(&data.len().to_string()),
        "{text}"
    );
    assert!(out.is_empty());
    assert_eq!(tier.status().fetch_failures_total, 2);
}

#[test]
fn removed_and_never_stored_objects_are_missing() {
    let dir = tempfile::tempdir().unwrap();
    let server = S3Server::start(&dir.path().join("s3"));
    let tier = open(&server);
    let ghost = TierObject {
        key: "ghost.ts".into(),
        size_bytes: 10,
        crc32c: 0,
    };
    let err = fetch(&tier, &ghost).unwrap_err();
    assert!(matches!(err, TierError::Missing { .. }), "{err}");
    assert!(err.to_string().contains("ghost.ts"), "{err}");

    let object = tier
        .put("gone.ts", &file_with(dir.path(), "g", &pattern(5000, 4)))
        .unwrap();
    tier.remove("gone.ts").unwrap();
    assert!(!server.object_file("gone.ts").exists());
    let err = fetch(&tier, &object).unwrap_err();
    assert!(matches!(err, TierError::Missing { .. }), "{err}");
    // Removing what is not there is no error.
    tier.remove("gone.ts").unwrap();
    tier.remove("ghost.ts").unwrap();
}

#[test]
fn a_prefix_keeps_the_objects_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = S3Server::start(&dir.path().join("s3"));
    let config = S3TierConfig {
        prefix: Some("/vod/titles/".into()),
        ..config(&server)
    };
    let tier = S3Tier::open("cloud", &config, Path::new("tiers.toml")).unwrap();
    let data = pattern(4096, 5);
    let object = tier
        .put("p.ts", &file_with(dir.path(), "p", &data))
        .unwrap();
    let stored = server.root.join(&server.bucket).join("vod/titles/p.ts");
    assert_eq!(std::fs::read(stored).unwrap(), data);
    assert!(
        server
            .root
            .join(&server.bucket)
            .join("vod/titles")
            .join(CALIBRATION_KEY)
            .is_file()
    );
    assert_eq!(fetch(&tier, &object).unwrap(), data);
}

/// The band: the prediction for the second fetch, made from the first
/// fetch's measurements, within a factor of 3 of the second's measured
/// time. Loopback on a 2-core machine shared with builds moves a
/// ~100 ms transfer by tens of percent from one run to the next; a factor of
/// 3 still fails a prediction that is structurally wrong (the calibration's
/// 1 MiB rate, the size ignored, a unit slip of 10^3).
#[test]
fn the_prediction_after_a_fetch_is_near_the_next_fetchs_time() {
    const SIZE: usize = 48 << 20;
    let dir = tempfile::tempdir().unwrap();
    let server = S3Server::start(&dir.path().join("s3"));
    let tier = open(&server);
    let calibrated_bytes_per_s = tier.measured_bytes_per_s();
    let calibrated_latency_ns = tier.measured_latency_ns();
    let first = tier
        .put("first.ts", &file_with(dir.path(), "1", &pattern(SIZE, 6)))
        .unwrap();
    let second = tier
        .put("second.ts", &file_with(dir.path(), "2", &pattern(SIZE, 7)))
        .unwrap();
    let before_ns = tier.predict_fetch_ns(&second);

    let started = Instant::now();
    fetch(&tier, &first).unwrap();
    let first_ns = started.elapsed().as_nanos() as u64;
    let predicted_ns = tier.predict_fetch_ns(&second);
    let started = Instant::now();
    fetch(&tier, &second).unwrap();
    let measured_ns = started.elapsed().as_nanos() as u64;

    let ms = |ns: u64| ns as f64 / 1e6;
    eprintln!(
        "calibration: {:.2} ms first byte, {:.0} MB/s → predicted {:.1} ms for {} MiB; \
         first fetch {:.1} ms ({:.0} MB/s measured, {:.2} ms first byte) → predicted {:.1} ms; \
         second fetch took {:.1} ms (ratio {:.2})",
        ms(calibrated_latency_ns),
        calibrated_bytes_per_s / 1e6,
        ms(before_ns),
        SIZE >> 20,
        ms(first_ns),
        tier.measured_bytes_per_s() / 1e6,
        ms(tier.measured_latency_ns()),
        ms(predicted_ns),
        ms(measured_ns),
        predicted_ns as f64 / measured_ns as f64,
    );
    assert!(
        measured_ns >= 10_000_000,
        "{} MiB should take tens of ms even on loopback: {:.1} ms",
        SIZE >> 20,
        ms(measured_ns)
    );
    assert!(
        predicted_ns >= measured_ns / 3 && predicted_ns <= measured_ns * 3,
        "predicted {:.1} ms, took {:.1} ms",
        ms(predicted_ns),
        ms(measured_ns)
    );
    // The prediction scales with the size: twice the bytes, about twice
    // the transfer time on top of the same latency.
    let double = TierObject {
        size_bytes: 2 * SIZE as u64,
        ..second.clone()
    };
    let latency_ns = tier.measured_latency_ns();
    let doubled = tier.predict_fetch_ns(&double) - latency_ns;
    let single = tier.predict_fetch_ns(&second) - latency_ns;
    assert!(
        doubled.abs_diff(2 * single) <= 2,
        "{doubled} vs 2 × {single}"
    );
}

/// A writer that blocks in its first write until told to go on.
struct Gate {
    entered: crossbeam_channel::Sender<()>,
    go: crossbeam_channel::Receiver<()>,
    open: bool,
    sink: Vec<u8>,
}

impl Write for Gate {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if !self.open {
            let _ = self.entered.send(());
            let _ = self.go.recv();
            self.open = true;
        }
        self.sink.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_fetch_queues_behind_the_fetches_in_progress() {
    const SIZE: usize = 16 << 20;
    let dir = tempfile::tempdir().unwrap();
    let server = S3Server::start(&dir.path().join("s3"));
    let tier = open(&server);
    let a = tier
        .put("a.ts", &file_with(dir.path(), "a", &pattern(SIZE, 8)))
        .unwrap();
    let b = tier
        .put("b.ts", &file_with(dir.path(), "b", &pattern(SIZE, 9)))
        .unwrap();
    let idle_ns = tier.predict_fetch_ns(&b);
    let (entered_tx, entered) = crossbeam_channel::bounded(1);
    let (go, go_rx) = crossbeam_channel::bounded(1);
    std::thread::scope(|scope| {
        let fetching = scope.spawn(|| {
            let mut gate = Gate {
                entered: entered_tx,
                go: go_rx,
                open: false,
                sink: Vec::new(),
            };
            tier.fetch(&a, &mut gate, &|_| {}).map(|()| gate.sink)
        });
        entered
            .recv_timeout(Duration::from_secs(30))
            .expect("the fetch reaches its first write");
        // A's bytes, less its first chunk, are still to come before B's.
        let queued_ns = tier.predict_fetch_ns(&b);
        let status = tier.status();
        let a_alone_ns = (SIZE as f64 * 1e9 / tier.measured_bytes_per_s()) as u64;
        eprintln!(
            "B alone {:.1} ms, behind A {:.1} ms (A's transfer alone {:.1} ms)",
            idle_ns as f64 / 1e6,
            queued_ns as f64 / 1e6,
            a_alone_ns as f64 / 1e6
        );
        assert_eq!(status.fetches_active, 1);
        assert!(
            queued_ns >= idle_ns + a_alone_ns * 9 / 10,
            "behind A: {queued_ns} ns; alone {idle_ns} ns; A's transfer {a_alone_ns} ns"
        );
        go.send(()).unwrap();
        let bytes = fetching.join().unwrap().unwrap();
        assert_eq!(bytes.len(), SIZE);
    });
    assert_eq!(tier.status().fetches_active, 0);
}

#[test]
fn a_server_that_is_down_is_a_remote_error_naming_the_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = S3Server::start(&dir.path().join("s3"));
    let tier = open(&server);
    let object = tier
        .put("t.ts", &file_with(dir.path(), "t", &pattern(100_000, 10)))
        .unwrap();
    let endpoint = server.endpoint.clone();
    server.stop();

    let started = Instant::now();
    let err = fetch(&tier, &object).unwrap_err();
    let took = started.elapsed();
    let text = err.to_string();
    eprintln!("down ({took:?}): {text}");
    assert!(matches!(err, TierError::Remote { .. }), "{text}");
    assert!(!err.is_object_fault());
    assert!(
        text.contains("cloud") && text.contains(&endpoint) && text.contains("t.ts"),
        "{text}"
    );
    assert!(took < Duration::from_secs(20), "{took:?}");
    let err = tier
        .put("u.ts", &file_with(dir.path(), "u", b"x"))
        .unwrap_err();
    assert!(matches!(err, TierError::Remote { .. }), "{err}");
    assert_eq!(tier.status().fetch_failures_total, 1);

    // Opening against it fails too, and says where.
    let config = S3TierConfig {
        endpoint: endpoint.clone(),
        bucket: "rondo-test".into(),
        region: "us-east-1".into(),
        access_key_id: "k".into(),
        secret_access_key: "s".into(),
        allow_http: true,
        prefix: None,
    };
    let err = S3Tier::open("cloud", &config, Path::new("tiers.toml"))
        .err()
        .expect("no server");
    assert!(matches!(err, TierError::Remote { .. }), "{err}");
    assert!(err.to_string().contains(&endpoint), "{err}");
}

#[test]
fn wrong_credentials_and_a_missing_bucket_are_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let server = S3Server::start(&dir.path().join("s3"));
    let wrong = S3TierConfig {
        secret_access_key: "not-the-secret".into(),
        ..config(&server)
    };
    let err = S3Tier::open("cloud", &wrong, Path::new("tiers.toml"))
        .err()
        .expect("a wrong secret");
    eprintln!("wrong secret: {err}");
    assert!(matches!(err, TierError::Remote { .. }), "{err}");
    assert!(err.to_string().contains("secret_access_key"), "{err}");
    let no_bucket = S3TierConfig {
        bucket: "nobucket".into(),
        ..config(&server)
    };
    let err = S3Tier::open("cloud", &no_bucket, Path::new("tiers.toml"))
        .err()
        .expect("no such bucket")
        .to_string();
    eprintln!("no bucket: {err}");
    assert!(err.contains("no bucket \"nobucket\""), "{err}");
}

/// A server opens its tiers inside its async `main`: the tier's blocking
/// bridge must neither panic there nor spin (tokio's cooperative budget of
/// the caller's task runs out after some 128 polls and is never renewed
/// while the task blocks).
#[test]
fn works_from_inside_another_runtimes_task() {
    let dir = tempfile::tempdir().unwrap();
    let server = S3Server::start(&dir.path().join("s3"));
    let data = pattern(4 << 20, 11);
    let source = file_with(dir.path(), "r", &data);
    let config = config(&server);
    let (done, result) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let fetched = runtime.block_on(async {
            let tier = S3Tier::open("cloud", &config, Path::new("tiers.toml"))?;
            let object = tier.put("r.ts", &source)?;
            let mut out = Vec::new();
            tier.fetch(&object, &mut out, &|_| {})?;
            Ok::<_, TierError>(out)
        });
        let _ = done.send(fetched);
    });
    let fetched = result
        .recv_timeout(Duration::from_secs(60))
        .expect("open, put and fetch end within a minute")
        .unwrap();
    assert!(fetched == data);
}
