//! Recall over HTTP (`POST /v1/engine/lcm_grep`, `lcm_describe`, `lcm_expand`), over the one
//! lossless store the gateway reads: the engine's own ([`crate::engine_store`]).
//!
//! Errors: a bad id or argument is a 400 (not found: 404), an engine other than `lossless` a
//! 409, and a failing store a 5xx naming the store ([`store_error`]): 503 `store_unavailable`
//! when it cannot be reached for now (PostgreSQL down, the connection lost, SQLite busy past
//! its timeout, the store closed), 500 `store_error` for anything else (a damaged row, a
//! refused file, an SQL failure), so store outages count as server errors in `/metrics`.
//!
//! Grep is scoped to the caller's session (or its agent), describe and expand to its agent, as
//! the model's recall tools are.

use std::time::Instant;

use axum::extract::State;
use axum::Json;
use clawctx_lossless::{ConvKey, GrepQuery, LosslessError, Recall, Scope};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::api_error::{ApiError, ApiJson};
use crate::engine_store::{handle, store_error};
use crate::recall_args::{RecallMode, RecallSort, RecallTarget};
use crate::state::{AppState, Shared};

/// Which conversations grep sees.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecallScope {
    /// This session key (including before `/new`).
    #[default]
    Session,
    /// Every session of the session's agent.
    Agent,
}

/// `POST /v1/engine/lcm_grep`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrepRequest {
    /// The caller's session key.
    pub session_key: String,
    /// Terms, a question (`any_term`) or a regular expression (`regex`).
    pub query: String,
    /// Mode.
    #[serde(default)]
    pub mode: RecallMode,
    /// Target.
    #[serde(default)]
    pub target: RecallTarget,
    /// Order.
    #[serde(default)]
    pub sort: RecallSort,
    /// Scope.
    #[serde(default)]
    pub scope: RecallScope,
    /// Page size (1-200, default 20).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Hits to skip.
    #[serde(default)]
    pub offset: Option<usize>,
}

/// `POST /v1/engine/lcm_describe`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DescribeRequest {
    /// The caller's session key (its agent scopes the lookup).
    pub session_key: String,
    /// `sum_<n>` or `msg_<n>`.
    pub id: String,
}

/// `POST /v1/engine/lcm_expand`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExpandRequest {
    /// The caller's session key (its agent scopes the lookup).
    pub session_key: String,
    /// `sum_<n>` (or `msg_<n>`).
    pub id: String,
    /// Token cap of the expansion (default: the engine's `maxExpandTokens`).
    #[serde(default)]
    pub max_tokens: Option<u64>,
}

/// A recall report as `clawctx lcm … --json` prints it.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct RecallReport(pub serde_json::Map<String, Value>);

fn report<T: Serialize>(
    recall: &Recall,
    r: Result<T, LosslessError>,
    what: &str,
) -> Result<Json<RecallReport>, ApiError> {
    let r = r.map_err(|e| store_error(recall, what, e))?;
    match serde_json::to_value(r) {
        Ok(Value::Object(m)) => Ok(Json(RecallReport(m))),
        Ok(other) => Ok(Json(RecallReport(serde_json::Map::from_iter([(
            "result".to_owned(),
            other,
        )])))),
        Err(e) => Err(ApiError::internal(format!(
            "{what}: cannot encode the report: {e}"
        ))),
    }
}

fn started(s: &Shared) -> Result<(), ApiError> {
    if s.stopping.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(ApiError::unavailable("the gateway is shutting down"));
    }
    Ok(())
}

pub(crate) async fn lcm_grep(
    State(s): State<AppState>,
    ApiJson(r): ApiJson<GrepRequest>,
) -> Result<Json<RecallReport>, ApiError> {
    started(&s)?;
    crate::validate::check_session_key("sessionKey", &r.session_key)?;
    if r.query.trim().is_empty() {
        return Err(ApiError::invalid("query", "`query` must not be empty"));
    }
    let recall = handle(&s)?;
    let key = ConvKey::from_host(Some(&r.session_key), &r.session_key);
    let mut q = GrepQuery::new(
        r.query,
        match r.scope {
            RecallScope::Session => Scope::Session(key.clone()),
            RecallScope::Agent => Scope::Agent(key.agent_id.clone()),
        },
    );
    q.mode = r.mode.into();
    q.target = r.target.into();
    q.sort = r.sort.into();
    q.limit = r.limit.unwrap_or(20).clamp(1, 200);
    q.offset = r.offset.unwrap_or(0);
    q.max_scan_rows = recall.config().grep_max_scan_rows;
    let at = Instant::now();
    let result = recall.grep(q).await;
    s.metrics
        .engine_call("lcm_grep", at.elapsed(), result.is_ok());
    report(&recall, result, "lcm_grep")
}

pub(crate) async fn lcm_describe(
    State(s): State<AppState>,
    ApiJson(r): ApiJson<DescribeRequest>,
) -> Result<Json<RecallReport>, ApiError> {
    started(&s)?;
    crate::validate::check_session_key("sessionKey", &r.session_key)?;
    let recall = handle(&s)?;
    let agent = ConvKey::from_host(Some(&r.session_key), &r.session_key).agent_id;
    let at = Instant::now();
    let result = recall.describe(&r.id, Some(&agent)).await;
    s.metrics
        .engine_call("lcm_describe", at.elapsed(), result.is_ok());
    report(&recall, result, "lcm_describe")
}

pub(crate) async fn lcm_expand(
    State(s): State<AppState>,
    ApiJson(r): ApiJson<ExpandRequest>,
) -> Result<Json<RecallReport>, ApiError> {
    started(&s)?;
    crate::validate::check_session_key("sessionKey", &r.session_key)?;
    let recall = handle(&s)?;
    let agent = ConvKey::from_host(Some(&r.session_key), &r.session_key).agent_id;
    let at = Instant::now();
    let result = recall.expand(&r.id, r.max_tokens, Some(&agent)).await;
    s.metrics
        .engine_call("lcm_expand", at.elapsed(), result.is_ok());
    report(&recall, result, "lcm_expand")
}
