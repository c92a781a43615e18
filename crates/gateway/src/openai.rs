//! The OpenAI-compatible endpoint (`/v1/chat/completions`, `/v1/models`).

use axum::Router;

use crate::server::AppState;

/// The OpenAI-compatible routes.
pub(crate) fn routes(_shared: &AppState) -> Router<AppState> {
    Router::new()
}
