//! Headless Chromium for end-to-end tests: whether it is installed, started
//! on a page with DevTools on a port of its own, and the title of the page
//! it shows (where rondo's pages report their state).

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Flags every headless run uses.
pub const FLAGS: [&str; 10] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--mute-audio",
    "--autoplay-policy=no-user-gesture-required",
    "--window-size=1280,900",
];

/// Whether `chromium` runs here; panics when it does not, unless
/// `RONDO_SKIP_BROWSER_TESTS` is set (then the caller skips its test).
pub fn available() -> bool {
    if Command::new("chromium").arg("--version").output().is_ok() {
        return true;
    }
    if std::env::var_os("RONDO_SKIP_BROWSER_TESTS").is_some() {
        eprintln!("SKIPPED (RONDO_SKIP_BROWSER_TESTS): chromium is not installed");
        return false;
    }
    panic!(
        "chromium is not installed: apt-get install -y chromium (.ci/run does), or set \
         RONDO_SKIP_BROWSER_TESTS=1 to skip this test"
    );
}

/// Headless Chromium on `url`, with DevTools on a port it picks (written to
/// `profile/DevToolsActivePort`, which [`page_title`] reads).
pub fn launch(url: &str, profile: &Path) -> Child {
    Command::new("chromium")
        .args(FLAGS)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--remote-debugging-port=0")
        .arg(url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts")
}

/// The title of the page Chromium shows, read through DevTools' HTTP
/// endpoint (`/json/list`); `None` until DevTools answers.
pub async fn page_title(client: &reqwest::Client, profile: &Path) -> Option<String> {
    let port = std::fs::read_to_string(profile.join("DevToolsActivePort")).ok()?;
    let port = port.lines().next()?.trim().to_string();
    let pages: serde_json::Value = client
        .get(format!("http://127.0.0.1:{port}/json/list"))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    pages
        .as_array()?
        .iter()
        .find(|p| p["type"] == "page")?
        .get("title")?
        .as_str()
        .map(str::to_string)
}
