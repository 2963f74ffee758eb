//! The HTTP face of tiers (seed 002): `GET /tier/{name}`, the stable URL of
//! a title whose home is a tier (a redirect to its stream once it is on the
//! array; until then 503 with the predicted staging delay as Retry-After,
//! staging started by the first request), `GET /api/tiers` (the tiers,
//! their queues, the jobs), the pin endpoints, and the tier titles in
//! `GET /api/titles`.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rondo_model::units::NS_PER_S;
use rondo_store::TierTitleRecord;
use serde_json::{Value, json};

use crate::http::{ApiError, base_url, extension};
use crate::staging::{StageAnswer, request};
use crate::state::Shared;

pub(crate) fn public_routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/tier/{name}", get(tier_stream))
        .route("/api/tiers", get(tiers))
}

pub(crate) fn admin_routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/api/admin/tier-titles/{name}/pin", post(pin))
        .route("/api/admin/tier-titles/{name}/unpin", post(unpin))
}

/// The stable URL of a tier title, percent-encoded.
pub fn tier_path(name: &str) -> String {
    let mut out = String::from("/tier/");
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

async fn tier_records(shared: &Arc<Shared>) -> Vec<TierTitleRecord> {
    let store = shared.store.clone();
    tokio::task::spawn_blocking(move || store.tier_titles())
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default()
}

async fn tier_record(shared: &Arc<Shared>, name: &str) -> Result<TierTitleRecord, ApiError> {
    let store = shared.store.clone();
    let key = name.to_string();
    let found = tokio::task::spawn_blocking(move || store.tier_title(&key))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    found.ok_or_else(|| {
        ApiError::not_found(format!(
            "no title named {name:?} lives on a tier; GET /api/titles lists the titles"
        ))
    })
}

/// Marks the array titles whose home is a tier (stable URL, tier, pin) and
/// adds the tier titles not on the array now.
pub(crate) async fn add_tier_entries(shared: &Arc<Shared>, base: &str, titles: &mut Vec<Value>) {
    let records = tier_records(shared).await;
    if records.is_empty() {
        return;
    }
    let jobs: BTreeMap<String, crate::staging::JobView> = shared
        .staging
        .snapshot()
        .jobs
        .into_iter()
        .map(|j| (j.name.clone(), j))
        .collect();
    for record in records {
        let url = format!("{base}{}", tier_path(&record.name));
        let staging = jobs.get(&record.name).map(|j| json!(j));
        if let Some(entry) = titles
            .iter_mut()
            .find(|t| t["name"].as_str() == Some(record.name.as_str()))
        {
            entry["home"] = json!(record.tier);
            entry["staged"] = json!(true);
            entry["pinned"] = json!(record.pinned);
            entry["array_stream_url"] = entry["stream_url"].clone();
            entry["stream_url"] = json!(url);
            continue;
        }
        titles.push(json!({
            "id": null,
            "name": record.name,
            "home": record.tier,
            "staged": false,
            "pinned": record.pinned,
            "staging": staging,
            "stream_url": url,
            "duration_seconds": record.duration_ns as f64 / NS_PER_S as f64,
            "content_type": record.content_type,
            "size_bytes": record.stored_bytes,
            "round_duration_seconds": record.round_duration_ns as f64 / NS_PER_S as f64,
            "rounds": record.client_bytes.len(),
            "source_file_name": record.source_file_name,
            "requests": record.request_count,
        }));
    }
}

/// `GET /tier/{name}`.
async fn tier_stream(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    method: Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let record = tier_record(&shared, &name).await?;
    if method == Method::HEAD
        && let Some(title) = shared.titles().into_iter().find(|t| t.record.name == name)
    {
        return Ok(redirect(&shared, &headers, &title, query.as_deref()));
    }
    match request(&shared, record.clone()).await {
        StageAnswer::Staged(title) => Ok(redirect(&shared, &headers, &title, query.as_deref())),
        StageAnswer::Waiting { retry_after_s, job } => Err(ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            body: json!({
                "error": format!(
                    "title {:?} is being staged from tier {:?} onto the array; it can be \
                     streamed in about {retry_after_s} s",
                    record.name, record.tier
                ),
                "reason": "staging",
                "retry_after_seconds": retry_after_s,
                "staging": job,
            }),
            headers: vec![(header::RETRY_AFTER, HeaderValue::from(retry_after_s))],
        }),
        StageAnswer::Failed {
            error,
            object_fault,
        } => Err(ApiError {
            status: if object_fault {
                StatusCode::BAD_GATEWAY
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            },
            body: json!({
                "error": format!("title {:?} cannot be staged from tier {:?}: {error}", record.name, record.tier),
                "reason": if object_fault { "tier_object_unreadable" } else { "staging_failed" },
            }),
            headers: Vec::new(),
        }),
    }
}

fn redirect(
    shared: &Shared,
    headers: &HeaderMap,
    title: &crate::titles::LoadedTitle,
    query: Option<&str>,
) -> Response {
    let mut location = format!(
        "{}/stream/{}.{}",
        base_url(shared, headers),
        title.id().0,
        extension(title)
    );
    if let Some(q) = query.filter(|q| !q.is_empty()) {
        location.push('?');
        location.push_str(q);
    }
    (
        StatusCode::TEMPORARY_REDIRECT,
        [
            (header::LOCATION, location),
            (header::CACHE_CONTROL, "no-store".to_string()),
        ],
    )
        .into_response()
}

/// `GET /api/tiers`.
async fn tiers(State(shared): State<Arc<Shared>>) -> axum::Json<Value> {
    let snapshot = {
        let shared = Arc::clone(&shared);
        tokio::task::spawn_blocking(move || shared.staging.snapshot())
            .await
            .unwrap_or_default()
    };
    axum::Json(json!(snapshot))
}

async fn set_pin(
    shared: Arc<Shared>,
    name: String,
    pinned: bool,
) -> Result<axum::Json<Value>, ApiError> {
    let store = shared.store.clone();
    let key = name.clone();
    let changed = tokio::task::spawn_blocking(move || store.set_tier_pinned(&key, pinned))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    if !changed {
        return Err(ApiError::not_found(format!(
            "no title named {name:?} lives on a tier"
        )));
    }
    tracing::info!(title = %name, pinned, "tier title pin changed");
    Ok(axum::Json(json!({ "name": name, "pinned": pinned })))
}

async fn pin(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    set_pin(shared, name, true).await
}

async fn unpin(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
) -> Result<axum::Json<Value>, ApiError> {
    set_pin(shared, name, false).await
}
