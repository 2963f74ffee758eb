//! Observability of a running server: Prometheus metrics, the live
//! dashboard and its event stream (being built). Its routes are merged into
//! the server's router by [`public_routes`].

use std::sync::Arc;

use axum::Router;

use crate::state::Shared;

/// Routes anyone may call.
pub fn public_routes() -> Router<Arc<Shared>> {
    Router::new()
}
