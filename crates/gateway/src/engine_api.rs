//! The context engine as a service: the lifecycle methods of the selected engine over HTTP,
//! the lossless recall tools, and the session listing.
//!
//! `POST /v1/engine/<method>` takes exactly the params the plugin protocol sends for
//! `engine/<method>` (`docs/plugin-protocol.md`: the `clawctx-protocol` types, camelCase) and
//! answers with the method's result type (`null` for `afterTurn` and `onSubagentEnded`), so an
//! agent in any language, or the OpenClaw bridge, speaks one vocabulary. Calls go to the
//! runtime's engine, the same guarded instance turns use (a quarantine answers from `legacy`
//! as it does in a turn), one call at a time per session through the same lanes as chat turns.
//! A method the engine does not implement is 501. The engine gets no runtime services over
//! HTTP: `legacy`'s `compact`, which delegates to the runtime's compaction, answers that the
//! host does not offer it (the caller's transcript is not the gateway's).
//!
//! Recall (`lcm_grep`, `lcm_describe`, `lcm_expand`) reads the lossless store through
//! `clawctx_lossless`'s library API on a connection of its own, opened on first use when the
//! engine in charge is `lossless`, scoped to the caller's session (grep) or its agent
//! (describe, expand) as the model's recall tools are.

use std::time::Instant;

use axum::extract::State;
use axum::Json;
use clawctx_engine::{AbortController, CallContext, EngineError, Method};
use clawctx_lossless::{ConvKey, GrepMode, GrepQuery, GrepSort, GrepTarget, LosslessConfig, LosslessStore, Scope};
use clawctx_protocol::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::api_error::{ApiError, ApiJson};
use crate::server::{AppState, Shared};

/// `GET /v1/engine/info`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EngineInfoResponse {
    /// The engine in charge (a quarantined engine reports its fallback's info).
    pub info: ContextEngineInfo,
    /// The lifecycle methods it implements, as the contract names them.
    pub methods: Vec<String>,
    /// Engines quarantined in this process.
    pub quarantined: Vec<String>,
}

/// `GET /v1/sessions`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct SessionList {
    /// Newest first.
    pub sessions: Vec<SessionRow>,
}

/// One session of agent `main`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionRow {
    /// `agent:main:...`.
    pub session_key: String,
    /// The current session id.
    pub session_id: String,
    /// Last update (epoch ms).
    pub updated_at: i64,
}

/// Grep mode.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecallMode {
    /// Every term must match (BM25 ranked).
    #[default]
    FullText,
    /// A whole question: rows sharing the most and rarest words.
    AnyTerm,
    /// A regular expression.
    Regex,
}

/// What grep searches.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecallTarget {
    /// Messages and summaries.
    #[default]
    Both,
    /// Messages only.
    Messages,
    /// Summaries only.
    Summaries,
}

/// Grep order.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecallSort {
    /// Best match first.
    #[default]
    Relevance,
    /// Newest first.
    Recency,
}

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

/// The session a call belongs to: its lane key.
fn lane_key(session_key: Option<&str>, session_id: &str) -> Result<String, ApiError> {
    let key = session_key.filter(|k| !k.trim().is_empty()).unwrap_or(session_id).trim();
    if key.is_empty() {
        return Err(ApiError::invalid("sessionId", "`sessionId` (or `sessionKey`) must not be empty"));
    }
    Ok(key.to_owned())
}

/// Aborts the engine call when the client goes away before it has answered.
struct CallGuard(AbortController, bool);

impl Drop for CallGuard {
    fn drop(&mut self) {
        if self.1 {
            self.0.abort("the client disconnected");
        }
    }
}

fn engine_error(method: Method, e: EngineError, engine: &str) -> ApiError {
    match e {
        EngineError::NotImplemented(_) => ApiError {
            status: axum::http::StatusCode::NOT_IMPLEMENTED,
            ..ApiError::bad_request(format!("the engine \"{engine}\" does not implement {}", method.name()))
        }
        .with_code("not_implemented"),
        other => ApiError::internal(format!("context engine \"{engine}\" failed in {}: {other}", method.name()))
            .with_code("engine_error"),
    }
}

/// One lifecycle call: shutdown check, the optional-method check, the session's lane, the
/// call with an abort signal tied to the request, metrics.
async fn call<T, F, Fut>(shared: &Shared, method: Method, key: String, f: F) -> Result<T, ApiError>
where
    F: FnOnce(CallContext) -> Fut,
    Fut: std::future::Future<Output = Result<T, EngineError>>,
{
    if shared.stopping.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(ApiError::unavailable("the gateway is shutting down"));
    }
    let engine = shared.runtime.engine();
    let engine_id = engine.info().id;
    if !engine.methods().has(method) {
        return Err(engine_error(method, EngineError::NotImplemented(method), &engine_id));
    }
    let _lane = shared.lanes.acquire(&key).await?;
    let controller = AbortController::new();
    let mut guard = CallGuard(controller.clone(), true);
    let started = Instant::now();
    let result = f(CallContext::none().with_abort(controller.signal())).await;
    guard.1 = false;
    shared.metrics.engine_call(method.name(), started.elapsed(), result.is_ok());
    result.map_err(|e| {
        tracing::warn!(method = method.name(), "engine call failed: {e}");
        engine_error(method, e, &engine_id)
    })
}

pub(crate) async fn bootstrap(
    State(s): State<AppState>,
    ApiJson(p): ApiJson<BootstrapParams>,
) -> Result<Json<BootstrapResult>, ApiError> {
    let key = lane_key(p.session_key.as_deref(), &p.session_id)?;
    let engine = s.runtime.engine().clone();
    call(&s, Method::Bootstrap, key, |cx| async move { engine.bootstrap(&p, &cx).await }).await.map(Json)
}

pub(crate) async fn ingest(
    State(s): State<AppState>,
    ApiJson(p): ApiJson<IngestParams>,
) -> Result<Json<IngestResult>, ApiError> {
    let key = lane_key(p.session_key.as_deref(), &p.session_id)?;
    let engine = s.runtime.engine().clone();
    call(&s, Method::Ingest, key, |cx| async move { engine.ingest(&p, &cx).await }).await.map(Json)
}

pub(crate) async fn ingest_batch(
    State(s): State<AppState>,
    ApiJson(p): ApiJson<IngestBatchParams>,
) -> Result<Json<IngestBatchResult>, ApiError> {
    let key = lane_key(p.session_key.as_deref(), &p.session_id)?;
    let engine = s.runtime.engine().clone();
    call(&s, Method::IngestBatch, key, |cx| async move { engine.ingest_batch(&p, &cx).await }).await.map(Json)
}

pub(crate) async fn assemble(
    State(s): State<AppState>,
    ApiJson(p): ApiJson<AssembleParams>,
) -> Result<Json<AssembleResult>, ApiError> {
    let key = lane_key(p.session_key.as_deref(), &p.session_id)?;
    let engine = s.runtime.engine().clone();
    call(&s, Method::Assemble, key, |cx| async move { engine.assemble(&p, &cx).await }).await.map(Json)
}

pub(crate) async fn compact(
    State(s): State<AppState>,
    ApiJson(p): ApiJson<CompactParams>,
) -> Result<Json<CompactResult>, ApiError> {
    let key = lane_key(p.session_key.as_deref(), &p.session_id)?;
    let engine = s.runtime.engine().clone();
    call(&s, Method::Compact, key, |cx| async move { engine.compact(&p, &cx).await }).await.map(Json)
}

pub(crate) async fn maintain(
    State(s): State<AppState>,
    ApiJson(p): ApiJson<MaintainParams>,
) -> Result<Json<TranscriptRewriteResult>, ApiError> {
    let key = lane_key(p.session_key.as_deref(), &p.session_id)?;
    let engine = s.runtime.engine().clone();
    call(&s, Method::Maintain, key, |cx| async move { engine.maintain(&p, &cx).await }).await.map(Json)
}

pub(crate) async fn after_turn(
    State(s): State<AppState>,
    ApiJson(p): ApiJson<AfterTurnParams>,
) -> Result<Json<Value>, ApiError> {
    let key = lane_key(p.session_key.as_deref(), &p.session_id)?;
    let engine = s.runtime.engine().clone();
    call(&s, Method::AfterTurn, key, |cx| async move { engine.after_turn(&p, &cx).await }).await?;
    Ok(Json(Value::Null))
}

pub(crate) async fn commit_turn(
    State(s): State<AppState>,
    ApiJson(p): ApiJson<CommitTurnParams>,
) -> Result<Json<CommitTurnResult>, ApiError> {
    let key = lane_key(p.session_key.as_deref(), &p.session_id)?;
    let engine = s.runtime.engine().clone();
    call(&s, Method::CommitTurn, key, |cx| async move { engine.commit_turn(&p, &cx).await }).await.map(Json)
}

pub(crate) async fn on_subagent_ended(
    State(s): State<AppState>,
    ApiJson(p): ApiJson<SubagentEndedParams>,
) -> Result<Json<Value>, ApiError> {
    let key = lane_key(Some(&p.child_session_key), "")?;
    let engine = s.runtime.engine().clone();
    call(&s, Method::OnSubagentEnded, key, |cx| async move { engine.on_subagent_ended(&p, &cx).await }).await?;
    Ok(Json(Value::Null))
}

pub(crate) async fn info(State(s): State<AppState>) -> Json<EngineInfoResponse> {
    let engine = s.runtime.engine();
    Json(EngineInfoResponse {
        info: engine.info(),
        methods: engine.methods().iter().map(|m| m.name().to_owned()).collect(),
        quarantined: s
            .registry
            .as_ref()
            .map(|r| r.quarantines().into_iter().map(|q| q.engine_id).collect())
            .unwrap_or_default(),
    })
}

pub(crate) async fn sessions(State(s): State<AppState>) -> Result<Json<SessionList>, ApiError> {
    let rows = s
        .runtime
        .store()
        .list("main")
        .map_err(|e| ApiError::internal(format!("cannot list the sessions: {e}")))?;
    Ok(Json(SessionList {
        sessions: rows
            .into_iter()
            .map(|(key, e)| SessionRow { session_key: key, session_id: e.session_id, updated_at: e.updated_at })
            .collect(),
    }))
}

/// The recall store: opened on first use when the engine in charge is `lossless`.
async fn store(s: &Shared) -> Result<LosslessStore, ApiError> {
    let engine = s.runtime.engine_id();
    if engine != clawctx_lossless::ENGINE_ID {
        return Err(ApiError::conflict(format!(
            "recall needs the lossless engine; the engine in charge is \"{engine}\" (plugins.slots.contextEngine)"
        )));
    }
    let host_config = s.host_config.clone();
    let state_dir = s.runtime.state_dir().to_path_buf();
    s.recall
        .get_or_try_init(|| async move {
            let path = LosslessConfig::from_host_config(&host_config)
                .database_path
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|| state_dir.join("agents").join("main").join("lossless.db"));
            tokio::task::spawn_blocking(move || LosslessStore::open(&path))
                .await
                .map_err(|e| ApiError::internal(format!("opening the lossless store failed: {e}")))?
                .map_err(|e| ApiError::internal(format!("cannot open the lossless store: {e}")))
        })
        .await
        .cloned()
}

fn report<T: Serialize>(r: Result<T, clawctx_lossless::LosslessError>, what: &str) -> Result<Json<RecallReport>, ApiError> {
    let r = r.map_err(|e| ApiError::bad_request(format!("{what} failed: {e}")))?;
    match serde_json::to_value(r) {
        Ok(Value::Object(m)) => Ok(Json(RecallReport(m))),
        Ok(other) => Ok(Json(RecallReport(serde_json::Map::from_iter([("result".to_owned(), other)])))),
        Err(e) => Err(ApiError::internal(format!("{what}: cannot encode the report: {e}"))),
    }
}

fn recall_started(s: &Shared) -> Result<(), ApiError> {
    if s.stopping.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(ApiError::unavailable("the gateway is shutting down"));
    }
    Ok(())
}

pub(crate) async fn lcm_grep(
    State(s): State<AppState>,
    ApiJson(r): ApiJson<GrepRequest>,
) -> Result<Json<RecallReport>, ApiError> {
    recall_started(&s)?;
    if r.query.trim().is_empty() {
        return Err(ApiError::invalid("query", "`query` must not be empty"));
    }
    let store = store(&s).await?;
    let key = ConvKey::from_host(Some(&r.session_key), &r.session_key);
    let mut q = GrepQuery::new(
        r.query,
        match r.scope {
            RecallScope::Session => Scope::Session(key.clone()),
            RecallScope::Agent => Scope::Agent(key.agent_id.clone()),
        },
    );
    q.mode = match r.mode {
        RecallMode::FullText => GrepMode::FullText,
        RecallMode::AnyTerm => GrepMode::AnyTerm,
        RecallMode::Regex => GrepMode::Regex,
    };
    q.target = match r.target {
        RecallTarget::Both => GrepTarget::Both,
        RecallTarget::Messages => GrepTarget::Messages,
        RecallTarget::Summaries => GrepTarget::Summaries,
    };
    q.sort = match r.sort {
        RecallSort::Relevance => GrepSort::Relevance,
        RecallSort::Recency => GrepSort::Recency,
    };
    q.limit = r.limit.unwrap_or(20).clamp(1, 200);
    q.offset = r.offset.unwrap_or(0);
    let started = Instant::now();
    let result = store.grep(q).await;
    s.metrics.engine_call("lcm_grep", started.elapsed(), result.is_ok());
    report(result, "lcm_grep")
}

pub(crate) async fn lcm_describe(
    State(s): State<AppState>,
    ApiJson(r): ApiJson<DescribeRequest>,
) -> Result<Json<RecallReport>, ApiError> {
    recall_started(&s)?;
    let store = store(&s).await?;
    let agent = ConvKey::from_host(Some(&r.session_key), &r.session_key).agent_id;
    let started = Instant::now();
    let id = r.id;
    let result = store.call(move |db| db.read(|db| db.describe(&id, Some(&agent)))).await;
    s.metrics.engine_call("lcm_describe", started.elapsed(), result.is_ok());
    report(result, "lcm_describe")
}

pub(crate) async fn lcm_expand(
    State(s): State<AppState>,
    ApiJson(r): ApiJson<ExpandRequest>,
) -> Result<Json<RecallReport>, ApiError> {
    recall_started(&s)?;
    let store = store(&s).await?;
    let agent = ConvKey::from_host(Some(&r.session_key), &r.session_key).agent_id;
    let max = r
        .max_tokens
        .unwrap_or_else(|| LosslessConfig::from_host_config(&s.host_config).max_expand_tokens)
        .max(1);
    let started = Instant::now();
    let id = r.id;
    let result = store.call(move |db| db.read(|db| db.expand(&id, max, Some(&agent)))).await;
    s.metrics.engine_call("lcm_expand", started.elapsed(), result.is_ok());
    report(result, "lcm_expand")
}

/// Closes what the engine API opened (the recall store), waiting for it to flush.
pub(crate) async fn close(shared: &Shared) {
    if let Some(store) = shared.recall.get() {
        store.close_wait().await;
    }
}
