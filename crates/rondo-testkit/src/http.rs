//! The HTTP requests the end-to-end tests repeat.
//!
//! This module owns the plain reads of a running server's API from a test
//! (async, on a shared `reqwest::Client`): a GET answered with JSON
//! ([`get_json`]) or text ([`get_text`]), panicking with the URL when the
//! request or the body fails. They check no status: a test that cares about
//! the status, headers or pacing of a response makes the request itself.

use serde_json::Value;

/// GETs `url` from a test without a runtime (a 10 s timeout) and parses
/// the answer as JSON.
pub fn get_json_blocking(url: &str) -> Value {
    reqwest::blocking::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .expect("an HTTP client")
        .get(url)
        .send()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .json()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
}

/// GETs `url` and parses the answer as JSON.
pub async fn get_json(client: &reqwest::Client, url: &str) -> Value {
    client
        .get(url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .json()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
}

/// GETs `url` and returns the answer as text.
pub async fn get_text(client: &reqwest::Client, url: &str) -> String {
    client
        .get(url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .text()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
}
