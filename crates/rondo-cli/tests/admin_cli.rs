//! `rondo admin` against a real `rondo serve` (the built binary, its sample
//! titles): a disk failed while `rondo load` plays streams (no stall, no
//! deadline miss), a wrong token refused, status, replace-disk and
//! restore-disk rebuilding the disk until it serves again, and fsck passing
//! after a clean shutdown. The server is killed when its guard drops.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use rondo_testkit::process::{Serve, output_text as out, success_json as json};
use serde_json::Value;

fn rondo() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rondo"))
}

fn text(path: &Path) -> &str {
    path.to_str().expect("utf-8 temp path")
}

fn admin(data: &Path, args: &[&str]) -> Output {
    rondo()
        .arg("admin")
        .args(args)
        .args(["--data-dir", text(data)])
        .output()
        .unwrap()
}

#[test]
fn fail_replace_and_restore_a_disk_through_the_cli() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut server = Serve::on(env!("CARGO_BIN_EXE_rondo"), &data)
        .timeout(Duration::from_secs(30))
        .start();

    // Streams play while disk 1 fails.
    let load = rondo()
        .args([
            "load",
            "--url",
            &server.url,
            "--rate",
            "3",
            "--duration",
            "8",
        ])
        .args(["--seed", "5", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(4));
    let failed = admin(&data, &["fail-disk", "1"]);
    assert!(failed.status.success(), "{}", out(&failed));
    assert!(out(&failed).contains("disk 1 failed"), "{}", out(&failed));
    let report: Value = {
        let output = load.wait_with_output().unwrap();
        json(&output)
    };
    assert!(
        report["streams_started"].as_u64().unwrap() >= 3,
        "{report:#}"
    );
    assert_eq!(report["stalls"], 0, "{report:#}");
    assert_eq!(report["streams_broken"], 0, "{report:#}");
    assert_eq!(report["deadline_misses"], 0, "{report:#}");

    // Refusals say why.
    let again = admin(&data, &["fail-disk", "1"]);
    assert!(!again.status.success());
    assert!(out(&again).contains("already"), "{}", out(&again));
    let wrong = rondo()
        .args([
            "admin",
            "fail-disk",
            "2",
            "--url",
            &server.url,
            "--token",
            "wrong",
        ])
        .output()
        .unwrap();
    assert!(!wrong.status.success());
    assert!(out(&wrong).contains("401"), "{}", out(&wrong));
    let status = admin(&data, &["status", "--json"]);
    let status = json(&status);
    assert_eq!(status["disks"][1]["state"], "failed", "{status:#}");
    assert_eq!(status["disks"][2]["state"], "healthy", "{status:#}");
    let busy = admin(&data, &["replace-disk", "2", "other.dev"]);
    assert!(!busy.status.success(), "a serving disk is not replaced");
    assert!(out(&busy).contains("fail it first"), "{}", out(&busy));

    // Replace with a new device inside the directory, then rebuild.
    let replaced = admin(&data, &["replace-disk", "1", "new-1.dev"]);
    assert!(replaced.status.success(), "{}", out(&replaced));
    assert!(data.join("new-1.dev").exists());
    let toml = std::fs::read_to_string(data.join("rondo.toml")).unwrap();
    assert!(toml.contains("new-1.dev"), "{toml}");
    let restored = admin(&data, &["restore-disk", "1"]);
    assert!(restored.status.success(), "{}", out(&restored));
    let started = Instant::now();
    loop {
        let status = json(&admin(&data, &["status", "--json"]));
        if status["disks"][1]["state"] == "healthy" {
            assert_eq!(status["last_rebuild"]["restored"], true, "{status:#}");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{status:#}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let shown = admin(&data, &["status"]);
    assert!(shown.status.success());
    assert!(
        out(&shown).contains("last rebuild: disk 1 restored"),
        "{}",
        out(&shown)
    );
    // SIGTERM, then a clean exit.
    let status = server.terminate();
    assert!(status.success(), "rondo serve exited with {status}");

    let fsck = rondo()
        .args(["fsck", "--data-dir", text(&data), "--json"])
        .output()
        .unwrap();
    let fsck = json(&fsck);
    assert_eq!(fsck["problems"].as_array().unwrap().len(), 0, "{fsck:#}");
}

#[test]
fn a_server_json_left_by_a_dead_server_is_named_as_such() {
    let tmp = tempfile::tempdir().unwrap();
    // A child that has exited: its pid names no process now.
    let mut child = Command::new("true").spawn().unwrap();
    let dead_pid = child.id();
    child.wait().unwrap();
    std::fs::write(
        tmp.path().join("server.json"),
        format!(r#"{{"url": "http://127.0.0.1:9", "pid": {dead_pid}}}"#),
    )
    .unwrap();
    let output = admin(tmp.path(), &["status"]);
    assert!(!output.status.success());
    let message = out(&output);
    assert!(
        message.contains(&format!("process {dead_pid}"))
            && message.contains("has exited")
            && message.contains("rondo serve --data-dir"),
        "{message}"
    );
}
