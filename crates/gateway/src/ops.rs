//! The operations routes: `/healthz` (liveness), `/readyz` (readiness: 503 while shutting
//! down or while the configured engine cannot serve, with why) and `/metrics` (Prometheus).
//! The probes are served without a token and outside the `Host` check (see [`crate::router`]).

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::metrics::CONTENT_TYPE;
use crate::state::AppState;

pub(crate) async fn healthz(State(shared): State<AppState>) -> Json<Value> {
    Json(json!({
        "status": "ok",
        "pid": std::process::id(),
        "version": env!("CARGO_PKG_VERSION"),
        "uptimeSeconds": shared.started.elapsed().as_secs(),
    }))
}

pub(crate) async fn readyz(State(shared): State<AppState>) -> Response {
    let quarantined: Vec<String> = shared
        .registry
        .as_ref()
        .map(|r| r.quarantines().into_iter().map(|q| q.engine_id).collect())
        .unwrap_or_default();
    let stopping = shared.stopping.load(Ordering::SeqCst);
    // The configured engine not serving (its store down, turns waiting for it): 503 with why.
    let problem =
        crate::status::readiness_problem(&shared.runtime, shared.registry.as_deref()).await;
    let body = json!({
        "status": if stopping { "stopping" } else if problem.is_some() { "degraded" } else { "ready" },
        "engine": shared.runtime.engine_id(),
        "quarantined": quarantined,
        "sessionsBusy": shared.lanes.active(),
        "problem": problem,
    });
    let status = if stopping || problem.is_some() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (status, Json(body)).into_response()
}

pub(crate) async fn metrics(State(shared): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        shared.metrics.render(),
    )
        .into_response()
}
