//! The trace's JSON routes, under `/v1/dashboard/trace/` (listed in the OpenAPI route table,
//! `crate::openapi`; the auth layer is the whole router's, as for the other dashboard routes).
//!
//! - `GET /v1/dashboard/trace/turns?key=&before=&limit=`: a session's turns, newest first,
//!   paged by turn number.
//! - `GET /v1/dashboard/trace/turn?key=&turn=`: one turn (the newest without `turn`) with its
//!   parts, left-out reasons, totals and warnings in words.
//! - `GET /v1/dashboard/trace/diff?key=&turn=`: what came in, went out and was summarized
//!   since the turn kept before it.
//! - `GET /v1/dashboard/trace/session?key=`: the engines that served the session and its last
//!   assembly against its own budget.

use axum::extract::{Query, State};
use axum::Json;
use serde::Deserialize;

use super::store::TurnPage;
use super::views::{self, SessionRecord, TurnDiff, TurnView};
use super::TraceError;
use crate::api_error::ApiError;
use crate::state::AppState;

/// Query of the trace routes.
#[derive(Debug, Deserialize)]
pub(crate) struct TraceQuery {
    key: Option<String>,
    turn: Option<u64>,
    before: Option<u64>,
    limit: Option<usize>,
}

fn key_of(q: &TraceQuery) -> Result<String, ApiError> {
    match q.key.as_deref().map(str::trim) {
        Some(k) if !k.is_empty() && k.len() <= 512 && !k.chars().any(char::is_control) => {
            Ok(k.to_owned())
        }
        _ => Err(ApiError::invalid(
            "key",
            "`key` (the session key: at most 512 bytes, no control characters) is required",
        )),
    }
}

fn error(e: TraceError) -> ApiError {
    match e {
        TraceError::Unavailable(m) => {
            ApiError::unavailable(format!("the turn trace is not available: {m}"))
        }
        other => ApiError::internal(other.to_string()),
    }
}

fn no_turn(key: &str, turn: Option<u64>) -> ApiError {
    ApiError::not_found(match turn {
        Some(n) => format!(
            "session {key} has no turn {n} in the trace (never recorded, or dropped by retention)"
        ),
        None => format!("session {key} has no turns in the trace"),
    })
}

/// `GET /v1/dashboard/trace/turns`.
pub(crate) async fn turns(
    State(s): State<AppState>,
    Query(q): Query<TraceQuery>,
) -> Result<Json<TurnPage>, ApiError> {
    let key = key_of(&q)?;
    let (before, limit) = (q.before, q.limit.unwrap_or(50));
    s.tracer
        .read(move |db| db.list(&key, before, limit))
        .await
        .map(Json)
        .map_err(error)
}

/// `GET /v1/dashboard/trace/turn`.
pub(crate) async fn turn(
    State(s): State<AppState>,
    Query(q): Query<TraceQuery>,
) -> Result<Json<TurnView>, ApiError> {
    let key = key_of(&q)?;
    let (k, n) = (key.clone(), q.turn);
    let found = s
        .tracer
        .read(move |db| db.get(&k, n))
        .await
        .map_err(error)?;
    found
        .map(|t| Json(views::view(t)))
        .ok_or_else(|| no_turn(&key, q.turn))
}

/// `GET /v1/dashboard/trace/diff`.
pub(crate) async fn diff(
    State(s): State<AppState>,
    Query(q): Query<TraceQuery>,
) -> Result<Json<TurnDiff>, ApiError> {
    let key = key_of(&q)?;
    let (k, n) = (key.clone(), q.turn);
    let found = s
        .tracer
        .read(move |db| {
            let Some(now) = db.get(&k, n)? else {
                return Ok(None);
            };
            let before = db.previous(&k, now.turn)?;
            Ok(Some(views::diff(&now, before.as_ref())))
        })
        .await
        .map_err(error)?;
    found.map(Json).ok_or_else(|| no_turn(&key, q.turn))
}

/// `GET /v1/dashboard/trace/session`.
pub(crate) async fn session(
    State(s): State<AppState>,
    Query(q): Query<TraceQuery>,
) -> Result<Json<SessionRecord>, ApiError> {
    let key = key_of(&q)?;
    s.tracer
        .read(move |db| views::session_record(db, &key))
        .await
        .map(Json)
        .map_err(error)
}
