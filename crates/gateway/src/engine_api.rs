//! The engine lifecycle over HTTP.

use axum::Router;

use crate::server::{AppState, Shared};

/// The engine API routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
}

/// Closes what the engine API opened (the recall store).
pub(crate) async fn close(_shared: &Shared) {}
