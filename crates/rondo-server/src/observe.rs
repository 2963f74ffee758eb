//! Observability of a running server: the counters as Prometheus text
//! (`GET /metrics`, [`prometheus`]), a per-round history sampled from them
//! ([`history`]) streamed as server-sent events (`GET /api/events`), and a
//! dashboard page with live charts (`GET /dashboard`) whose chart library,
//! uPlot, is embedded in the binary: the page loads nothing from elsewhere.
//! Its routes are merged into the server's router by [`public_routes`].
//!
//! The history's sampler is one tokio task per server, started by [`start`]
//! or by the first request to one of these routes; it holds the server's
//! state only weakly and stops at shutdown, which also ends every event
//! stream (graceful shutdown waits for open connections).

pub mod history;
pub mod process;
pub mod prometheus;

use std::convert::Infallible;
use std::sync::{Arc, Mutex, Weak};

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use futures_util::{Stream, StreamExt, stream};
use tokio_stream::wrappers::BroadcastStream;

use crate::state::Shared;
use history::History;

const DASHBOARD_HTML: &str = include_str!("../assets/dashboard/index.html");
const DASHBOARD_JS: &str = include_str!("../assets/dashboard/dashboard.js");
const UPLOT_JS: &str = include_str!("../assets/dashboard/vendor/uPlot.iife.min.js");
const UPLOT_CSS: &str = include_str!("../assets/dashboard/vendor/uPlot.min.css");

/// Routes anyone may call.
pub fn public_routes() -> Router<Arc<Shared>> {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/dashboard", get(dashboard))
        .route("/dashboard/dashboard.js", get(dashboard_js))
        .route("/dashboard/vendor/uPlot.iife.min.js", get(uplot_js))
        .route("/dashboard/vendor/uPlot.min.css", get(uplot_css))
        .route("/api/events", get(events))
        .route("/api/history", get(history_json))
}

/// Every server's history in this process, found by its shared state (the
/// router does not give this module a place in `Shared`). Entries of
/// servers that are gone are dropped on the next look-up.
static HISTORIES: Mutex<Vec<(Weak<Shared>, Arc<History>)>> = Mutex::new(Vec::new());

/// Starts the per-round sampler of `shared` if it does not run yet, and
/// returns its history. Must be called within a tokio runtime.
pub fn start(shared: &Arc<Shared>) -> Arc<History> {
    let mut histories = HISTORIES.lock().expect("histories lock");
    histories.retain(|(weak, _)| weak.strong_count() > 0);
    if let Some((_, history)) = histories
        .iter()
        .find(|(weak, _)| std::ptr::eq(weak.as_ptr(), Arc::as_ptr(shared)))
    {
        return Arc::clone(history);
    }
    let history = Arc::new(History::new());
    histories.push((Arc::downgrade(shared), Arc::clone(&history)));
    tokio::spawn(history::run_sampler(
        Arc::downgrade(shared),
        Arc::clone(&history),
    ));
    history
}

async fn metrics(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    start(&shared);
    let active = shared.active_streams();
    let mut text = prometheus::render(&shared.metrics, active, shared.round_duration_ns());
    if shared.staging.has_tiers() {
        text.push_str(&prometheus::render_staging(&shared.staging.snapshot()));
    }
    ([(header::CONTENT_TYPE, prometheus::CONTENT_TYPE)], text)
}

async fn dashboard(State(shared): State<Arc<Shared>>) -> Html<&'static str> {
    start(&shared);
    Html(DASHBOARD_HTML)
}

/// Static assets: cached for an hour, they only change with the binary.
fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        body,
    )
}

async fn dashboard_js() -> impl IntoResponse {
    asset("text/javascript; charset=utf-8", DASHBOARD_JS)
}

async fn uplot_js() -> impl IntoResponse {
    asset("text/javascript; charset=utf-8", UPLOT_JS)
}

async fn uplot_css() -> impl IntoResponse {
    asset("text/css; charset=utf-8", UPLOT_CSS)
}

/// Samples (JSON objects) as one JSON array.
fn json_array(samples: &[Arc<str>]) -> String {
    let mut array = String::with_capacity(samples.iter().map(|s| s.len() + 1).sum::<usize>() + 2);
    array.push('[');
    for (i, sample) in samples.iter().enumerate() {
        if i > 0 {
            array.push(',');
        }
        array.push_str(sample);
    }
    array.push(']');
    array
}

/// `GET /api/history`: the recent rounds' samples as a JSON array, oldest
/// first (what `/api/events` sends first), for scripts and the dashboard's
/// snapshot view.
async fn history_json(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let (recent, _) = start(&shared).subscribe();
    (
        [(header::CONTENT_TYPE, "application/json")],
        json_array(&recent),
    )
}

/// `GET /api/events`: a `history` event (JSON array of the recent rounds'
/// samples, oldest first), then a `round` event per round. A client too
/// slow for the channel skips samples (a `lagged` event says how many).
async fn events(
    State(shared): State<Arc<Shared>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let history = start(&shared);
    let (recent, receiver) = history.subscribe();
    let array = json_array(&recent);
    let head = stream::once(async move { Ok(Event::default().event("history").data(array)) });
    let live = match receiver {
        Some(receiver) => BroadcastStream::new(receiver)
            .map(|item| {
                Ok(match item {
                    Ok(sample) => Event::default().event("round").data(&*sample),
                    Err(tokio_stream::wrappers::errors::BroadcastStreamRecvError::Lagged(n)) => {
                        Event::default().event("lagged").data(n.to_string())
                    }
                })
            })
            .boxed(),
        None => stream::empty().boxed(),
    };
    Sse::new(head.chain(live)).keep_alive(KeepAlive::default())
}
