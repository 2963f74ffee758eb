//! Operations on a running server: disk failure, replacement and rebuild
//! (being built). Its routes are merged into the server's router: public
//! ones by [`public_routes`], token-protected ones by [`admin_routes`].

use std::sync::Arc;

use axum::Router;

use crate::state::Shared;

/// Routes anyone may call.
pub fn public_routes() -> Router<Arc<Shared>> {
    Router::new()
}

/// Routes behind the API token.
pub fn admin_routes() -> Router<Arc<Shared>> {
    Router::new()
}
