//! The tier from the command line (seed 002): `rondo tier add` makes an
//! emulated jukebox farm, `rondo ingest --tier` stores a title on it
//! (offline, and through a running server), `rondo tier list` shows it, and
//! `rondo serve` stages it when asked. `kill -9` while the staging writes to
//! the array leaves nothing partial visible: fsck passes (the cut title is
//! an orphan it removes), the restarted server clears the staging file,
//! lists the title as not staged, and stages it whole on the next request.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rondo_testkit::media::padded_ts;
use rondo_testkit::process::{RondoServe, Serve, output_text, stdout_json};
use serde_json::Value;

fn rondo() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rondo"))
}

fn text(path: &Path) -> &str {
    path.to_str().expect("utf-8 temp path")
}

fn start_server(data: &Path) -> RondoServe {
    Serve::on(env!("CARGO_BIN_EXE_rondo"), data)
        .stderr_to(data.with_extension("log"))
        .timeout(Duration::from_secs(60))
        .start()
}

fn get_json(url: &str) -> Value {
    reqwest::blocking::get(url).unwrap().json().unwrap()
}

fn status(url: &str) -> u16 {
    let client = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    client.get(url).send().unwrap().status().as_u16()
}

fn staged(url: &str, name: &str) -> bool {
    let titles = get_json(&format!("{url}/api/titles"));
    titles
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("{name} not listed: {titles}"))["staged"]
        == true
}

#[test]
fn tier_titles_from_the_cli_and_a_kill_during_staging_leaves_nothing_partial() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // 60 s at 4 Mbit/s: 30 MB, several rounds of staging writes.
    let big = padded_ts(60, 4000).make(dir.path().join("big.ts"));
    let small = padded_ts(8, 1000).make(dir.path().join("small.ts"));

    let out = rondo()
        .args([
            "tier",
            "add",
            "vault",
            "--jukebox",
            "vault",
            "--time-scale",
            "0.2",
        ])
        .args(["--data-dir", text(&data)])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let out = rondo()
        .args([
            "ingest",
            "--tier",
            "vault",
            "--json",
            "--data-dir",
            text(&data),
        ])
        .arg(&big)
        .output()
        .unwrap();
    let stored = stdout_json(&out);
    assert!(out.status.success(), "{stored:#}");
    assert_eq!(stored[0]["title"]["tier"], "vault", "{stored:#}");
    let stored_bytes = stored[0]["title"]["stored_bytes"].as_u64().unwrap();
    // The name is taken, for the array as for the tier.
    let out = rondo()
        .args(["ingest", "--data-dir", text(&data)])
        .arg(&big)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        output_text(&out).contains("already exists"),
        "{}",
        output_text(&out)
    );
    let out = rondo()
        .args(["tier", "list", "--json", "--data-dir", text(&data)])
        .output()
        .unwrap();
    let list = stdout_json(&out);
    assert_eq!(list["tiers"][0]["name"], "vault", "{list:#}");
    assert_eq!(list["titles"][0]["name"], "big", "{list:#}");
    assert_eq!(list["titles"][0]["staged"], false, "{list:#}");

    // Stage, and kill -9 while the staging writes to the array.
    let server = start_server(&data);
    let url = server.url.clone();
    assert_eq!(status(&format!("{url}/tier/big")), 503);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let tiers = get_json(&format!("{url}/api/tiers"));
        if tiers["jobs"][0]["phase"] == "writing" {
            break;
        }
        assert!(
            tiers["staged_total"] == 0,
            "staged before the kill: {tiers}"
        );
        assert!(Instant::now() < deadline, "never writing: {tiers}");
        std::thread::sleep(Duration::from_millis(10));
    }
    let staging_dir = data.join("staging");
    assert_eq!(std::fs::read_dir(&staging_dir).unwrap().count(), 1);
    drop(server); // SIGKILL

    let out = rondo()
        .args(["fsck", "--json", "--data-dir", text(&data)])
        .output()
        .unwrap();
    let report = stdout_json(&out);
    assert!(out.status.success(), "fsck: {report:#}");
    assert_eq!(
        report["problems"].as_array().unwrap().len(),
        0,
        "{report:#}"
    );

    // Restarted: nothing partial, the staging file gone, and the title
    // stages whole on request.
    let server = start_server(&data);
    let url = server.url.clone();
    assert_eq!(std::fs::read_dir(&staging_dir).unwrap().count(), 0);
    assert!(!staged(&url, "big"));
    let started = Instant::now();
    while status(&format!("{url}/tier/big")) == 503 {
        assert!(started.elapsed() < Duration::from_secs(60), "never staged");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(staged(&url, "big"));
    let head = reqwest::blocking::Client::new()
        .head(format!("{url}/tier/big"))
        .send()
        .unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(
        head.headers()["content-length"].to_str().unwrap(),
        stored_bytes.to_string()
    );

    // `rondo ingest --tier` while the server owns the directory: handed to
    // it, stored on the tier, staged when asked for.
    let out = rondo()
        .args([
            "ingest",
            "--tier",
            "vault",
            "--json",
            "--data-dir",
            text(&data),
        ])
        .arg(&small)
        .output()
        .unwrap();
    let stored = stdout_json(&out);
    assert!(out.status.success(), "{stored:#}");
    assert!(!staged(&url, "small"));
    let started = Instant::now();
    while status(&format!("{url}/tier/small")) == 503 {
        assert!(started.elapsed() < Duration::from_secs(60), "never staged");
        std::thread::sleep(Duration::from_millis(100));
    }
    let tiers: Value = get_json(&format!("{url}/api/tiers"));
    assert_eq!(tiers["staged_total"], 2, "{tiers}");
    assert_eq!(tiers["failures_total"], 0, "{tiers}");

    // A tier added while the server runs is used without a restart.
    let out = rondo()
        .args([
            "tier",
            "add",
            "shelf",
            "--jukebox",
            "shelf",
            "--time-scale",
            "0.1",
        ])
        .args(["--data-dir", text(&data)])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let out = rondo()
        .args(["ingest", "--tier", "shelf", "--name", "shelved", "--json"])
        .args(["--data-dir", text(&data)])
        .arg(&small)
        .output()
        .unwrap();
    let stored = stdout_json(&out);
    assert!(out.status.success(), "{stored:#}");
    let started = Instant::now();
    while status(&format!("{url}/tier/shelved")) == 503 {
        assert!(started.elapsed() < Duration::from_secs(60), "never staged");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(staged(&url, "shelved"));
}
