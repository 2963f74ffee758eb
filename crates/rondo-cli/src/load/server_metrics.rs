//! The server's own counters, read before and after a run so that the
//! report can set the server's deadline misses beside the clients' stalls.
//!
//! Deadline misses come from the Prometheus endpoint `GET /metrics`
//! (`rondo_deadline_misses_total`, summed over its label sets) when the
//! server has it; otherwise from the JSON counters of `GET /api/metrics`
//! (`stream_round_misses`, the same stream-round misses ARCHITECTURE.md defines);
//! otherwise they are `null` and the report says why. The JSON counters'
//! differences are reported whole, since admissions, rejections by reason
//! and streams dropped for not reading explain what the clients saw. Both
//! are differences over the run, so they include any other client the
//! server had meanwhile.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

/// The Prometheus counter of stream-round deadline misses.
pub const PROMETHEUS_DEADLINE_MISSES: &str = "rondo_deadline_misses_total";
/// The JSON counter `GET /api/metrics` gives for the same misses.
const API_DEADLINE_MISSES: &str = "stream_round_misses";
/// `GET /api/metrics` fields that are levels, not counters.
const API_GAUGES: &[&str] = &["active_streams", "buffer_bytes_in_use"];

/// One reading of the server's counters.
#[derive(Clone, Debug)]
pub struct ServerMetrics {
    /// `rondo_deadline_misses_total`, or why it is missing.
    pub prometheus_misses: Result<f64, String>,
    /// `GET /api/metrics`, or why it is missing.
    pub api: Result<Value, String>,
}

/// Reads both endpoints of the server at `base_url`.
pub async fn fetch(client: &reqwest::Client, base_url: &str, timeout: Duration) -> ServerMetrics {
    let prometheus_url = format!("{base_url}/metrics");
    let api_url = format!("{base_url}/api/metrics");
    let (text, api_text) = tokio::join!(
        get_text(client, &prometheus_url, timeout),
        get_text(client, &api_url, timeout)
    );
    let prometheus_misses = text.and_then(|text| {
        prometheus_sum(&text, PROMETHEUS_DEADLINE_MISSES).ok_or(format!(
            "{prometheus_url} has no {PROMETHEUS_DEADLINE_MISSES}"
        ))
    });
    let api = api_text.and_then(|text| {
        serde_json::from_str::<Value>(&text).map_err(|e| format!("{api_url} is not JSON: {e}"))
    });
    ServerMetrics {
        prometheus_misses,
        api,
    }
}

async fn get_text(
    client: &reqwest::Client,
    url: &str,
    timeout: Duration,
) -> Result<String, String> {
    let fetch = async {
        let response = client
            .get(url)
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("{url} answered {status}"));
        }
        response.text().await.map_err(|e| format!("{url}: {e}"))
    };
    tokio::time::timeout(timeout, fetch)
        .await
        .unwrap_or_else(|_| Err(format!("{url}: no answer within {timeout:?}")))
}

/// The sum of every sample of metric `name` in Prometheus text exposition
/// format; `None` if it has none.
pub fn prometheus_sum(text: &str, name: &str) -> Option<f64> {
    let mut total = None;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (metric, rest) = match line.find(['{', ' ', '\t']) {
            Some(i) => line.split_at(i),
            None => continue,
        };
        if metric != name {
            continue;
        }
        // Skip the labels (values may hold spaces), then the value.
        let rest = match rest.strip_prefix('{') {
            Some(labels) => &labels[labels.rfind('}')? + 1..],
            None => rest,
        };
        let value: f64 = rest.split_whitespace().next()?.parse().ok()?;
        *total.get_or_insert(0.0) += value;
    }
    total
}

/// Deadline misses over a run, with where they came from.
#[derive(Clone, Debug, Serialize)]
pub struct DeadlineMisses {
    pub value: Option<u64>,
    /// `metrics:rondo_deadline_misses_total`, `api/metrics:stream_round_misses`
    /// or `none`.
    pub source: String,
    /// Why the preferred source was not used, if it was not.
    pub note: Option<String>,
}

pub fn deadline_misses(before: &ServerMetrics, after: &ServerMetrics) -> DeadlineMisses {
    if let (Ok(b), Ok(a)) = (&before.prometheus_misses, &after.prometheus_misses) {
        return DeadlineMisses {
            value: Some((a - b).max(0.0).round() as u64),
            source: format!("metrics:{PROMETHEUS_DEADLINE_MISSES}"),
            note: None,
        };
    }
    let why_not_prometheus = before
        .prometheus_misses
        .as_ref()
        .err()
        .or(after.prometheus_misses.as_ref().err())
        .cloned()
        .unwrap_or_default();
    let api_value = |m: &ServerMetrics| {
        m.api
            .as_ref()
            .ok()
            .and_then(|v| v[API_DEADLINE_MISSES].as_u64())
    };
    if let (Some(b), Some(a)) = (api_value(before), api_value(after)) {
        return DeadlineMisses {
            value: Some(a.saturating_sub(b)),
            source: format!("api/metrics:{API_DEADLINE_MISSES}"),
            note: Some(why_not_prometheus),
        };
    }
    let why_not_api = before
        .api
        .as_ref()
        .err()
        .or(after.api.as_ref().err())
        .cloned()
        .unwrap_or_else(|| format!("/api/metrics has no {API_DEADLINE_MISSES}"));
    DeadlineMisses {
        value: None,
        source: "none".into(),
        note: Some(format!(
            "the server exposes no deadline-miss counter: {why_not_prometheus}; {why_not_api}"
        )),
    }
}

/// After − before of every top-level counter of `GET /api/metrics` (levels
/// such as `active_streams` are left out); `None` if either reading failed.
pub fn api_delta(before: &ServerMetrics, after: &ServerMetrics) -> Option<BTreeMap<String, i64>> {
    let (Ok(Value::Object(b)), Ok(Value::Object(a))) = (&before.api, &after.api) else {
        return None;
    };
    Some(
        a.iter()
            .filter(|(name, _)| !API_GAUGES.contains(&name.as_str()))
            .filter_map(|(name, value)| {
                let after = value.as_i64()?;
                let before = b.get(name).and_then(Value::as_i64).unwrap_or(0);
                Some((name.clone(), after - before))
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# HELP rondo_deadline_misses_total Stream-round deadline misses.
# TYPE rondo_deadline_misses_total counter
rondo_deadline_misses_total{disk=\"0\",note=\"a b\"} 3
rondo_deadline_misses_total{disk=\"1\"} 4 1700000000000
rondo_deadline_misses_total_extra 100
rondo_admitted_total 9
";

    #[test]
    fn prometheus_samples_are_summed_over_labels() {
        assert_eq!(prometheus_sum(TEXT, PROMETHEUS_DEADLINE_MISSES), Some(7.0));
        assert_eq!(prometheus_sum(TEXT, "rondo_admitted_total"), Some(9.0));
        assert_eq!(prometheus_sum(TEXT, "rondo_missing"), None);
    }

    fn reading(prometheus: Result<f64, String>, api: Result<Value, String>) -> ServerMetrics {
        ServerMetrics {
            prometheus_misses: prometheus,
            api,
        }
    }

    #[test]
    fn deadline_misses_prefer_prometheus_then_the_json_counters() {
        let json = |misses: u64| {
            Ok(serde_json::json!({"stream_round_misses": misses, "active_streams": 5}))
        };
        let d = deadline_misses(&reading(Ok(2.0), json(0)), &reading(Ok(5.0), json(9)));
        assert_eq!(
            (d.value, d.source.as_str()),
            (Some(3), "metrics:rondo_deadline_misses_total")
        );
        let d = deadline_misses(
            &reading(Err("404".into()), json(1)),
            &reading(Err("404".into()), json(4)),
        );
        assert_eq!(
            (d.value, d.source.as_str()),
            (Some(3), "api/metrics:stream_round_misses")
        );
        let d = deadline_misses(
            &reading(Err("404".into()), Err("404".into())),
            &reading(Err("404".into()), Err("404".into())),
        );
        assert_eq!((d.value, d.source.as_str()), (None, "none"));
        assert!(d.note.unwrap().contains("404"));
        let delta = api_delta(&reading(Ok(0.0), json(1)), &reading(Ok(0.0), json(4))).unwrap();
        assert_eq!(delta.get("stream_round_misses"), Some(&3));
        assert!(!delta.contains_key("active_streams"));
    }
}
