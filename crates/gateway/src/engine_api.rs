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
//! HTTP, with one exception: a `compact` on an engine that delegates compaction to the runtime
//! (`legacy`) gets the runtime's services bound to the gateway's own stored session of that
//! key, so it compacts that transcript with the runtime's summarizer; a session the gateway
//! does not store is 404 and a `sessionId` other than the stored one 409 (the caller's own
//! transcript is not the gateway's to compact).
//!
//! `prepareSubagentSpawn` answers as the plugin protocol does, `{hasRollback, rollbackId}`: the
//! rollback stays in the gateway and `POST /v1/engine/rollback {rollbackId}` runs it (once).
//! A rollback is dropped when `onSubagentEnded` names its child, and the oldest go past
//! [`MAX_ROLLBACKS`](crate::rollbacks::MAX_ROLLBACKS) kept ([`crate::rollbacks`]).
//!
//! Recall (`lcm_grep`, `lcm_describe`, `lcm_expand`) is [`crate::recall`], over the engine's
//! own store ([`crate::engine_store`]); the session list here reads the lossless conversations
//! from that store too.

use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::extract::State;
use axum::Json;
use clawctx_engine::{AbortController, CallContext, EngineError, Method};
use clawctx_protocol::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::api_error::{ApiError, ApiJson};
use crate::session_files::SessionFiles;
use crate::state::{AppState, Shared};

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

/// `POST /v1/engine/prepareSubagentSpawn`: the plugin protocol's answer.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpawnPreparationResponse {
    /// The engine returned a rollback (run it with `POST /v1/engine/rollback`).
    pub has_rollback: bool,
    /// Its id, `null` without one.
    pub rollback_id: Option<String>,
}

/// `POST /v1/engine/rollback`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollbackRequest {
    /// The `rollbackId` `prepareSubagentSpawn` answered.
    pub rollback_id: String,
}

/// `GET /v1/sessions`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct SessionList {
    /// The gateway's own sessions newest first, then the conversations only the lossless store
    /// holds (by key).
    pub sessions: Vec<SessionRow>,
}

/// One session: a transcript of the gateway's (agent `main`: the chat completions' sessions),
/// a conversation of the lossless store (created by turns, the engine API or the OpenClaw
/// bridge), or both.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionRow {
    /// `agent:<id>:...`.
    pub session_key: String,
    /// The current session id of the gateway's transcript (absent for a lossless-only one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Last update of the gateway's transcript (epoch ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<i64>,
    /// Where it is stored: `transcript` (the gateway's sessions), `lossless` (the lossless
    /// store's active conversation of the key).
    pub stores: Vec<String>,
    /// Messages the lossless store holds for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lossless_messages: Option<u64>,
    /// The engine that holds it (`clawctx_gateway::holding`: the engine that served its last
    /// turn, else `lossless` when only the lossless store has it, else `legacy`).
    pub engine: String,
    /// Its compactions, the host's and the engine's own (`clawctx_gateway::holding`).
    pub compactions: u64,
}

/// The session a call belongs to: its lane key.
/// Both ids are limited as chat's session header is (`crate::validate::check_session_key`).
pub(crate) fn lane_key(session_key: Option<&str>, session_id: &str) -> Result<String, ApiError> {
    if let Some(k) = session_key {
        crate::validate::check_session_key("sessionKey", k)?;
    }
    crate::validate::check_session_key("sessionId", session_id)?;
    let key = session_key
        .filter(|k| !k.trim().is_empty())
        .unwrap_or(session_id)
        .trim();
    if key.is_empty() {
        return Err(ApiError::invalid(
            "sessionId",
            "`sessionId` (or `sessionKey`) must not be empty",
        ));
    }
    Ok(key.to_owned())
}

/// The ids a call names (its session key and id), trimmed: the markers a relative
/// `sessionFile` may be.
fn ids<'a>(session_key: Option<&'a str>, session_id: &'a str) -> [&'a str; 2] {
    [session_key.unwrap_or("").trim(), session_id.trim()]
}

/// A commit's `advancementKey` is what the engine is idempotent by: a blank one is the
/// client's mistake, refused here as a 400. Left to the engine it would be a failed call, and
/// the guard quarantines an engine that fails, so one bad request would take the configured
/// engine away from every session of the gateway.
pub(crate) fn check_advancement_key(p: &CommitTurnParams) -> Result<(), ApiError> {
    if p.advancement_key.trim().is_empty() {
        return Err(ApiError::invalid(
            "advancementKey",
            "`advancementKey` must not be empty: it is what makes a retried commit a duplicate",
        ));
    }
    Ok(())
}

fn engine_error(method: Method, e: EngineError, engine: &str) -> ApiError {
    match e {
        EngineError::NotImplemented(_) => ApiError {
            status: axum::http::StatusCode::NOT_IMPLEMENTED,
            ..ApiError::bad_request(format!(
                "the engine \"{engine}\" does not implement {}",
                method.name()
            ))
        }
        .with_code("not_implemented"),
        // The engine's store cannot be reached for now (a PostgreSQL outage): the call was not
        // done and may be sent again, as `/readyz` says while it lasts.
        other if other.is_unavailable() => ApiError::unavailable(format!(
            "context engine \"{engine}\" cannot do {} now: {other}; send it again later (a repeated write is not stored twice)",
            method.name()
        ))
        .with_code("store_unavailable"),
        other => ApiError::internal(format!(
            "context engine \"{engine}\" failed in {}: {other}",
            method.name()
        ))
        .with_code("engine_error"),
    }
}

/// One lifecycle call: shutdown check, the optional-method check, the session's lane, the
/// call, metrics.
///
/// The call runs in a task of its own (tracked for shutdown) that holds the session's lane
/// (`key`; `None` for `maintain`, see [`maintain`]) until the engine has answered, as a chat
/// turn does: a client that disconnects, or the
/// request deadline, drops only the wait for the answer, never the engine's call mid-write
/// (an `ingest` or `commitTurn` half done, its connection handed back to a pool with a
/// statement still running). Only a gateway shutdown aborts it, through its abort signal.
async fn call<T, F, Fut>(
    shared: &AppState,
    method: Method,
    key: impl Into<Option<String>>,
    f: F,
) -> Result<T, ApiError>
where
    F: FnOnce(CallContext) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, EngineError>> + Send + 'static,
    T: Send + 'static,
{
    let key = key.into();
    if shared.stopping.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(ApiError::unavailable("the gateway is shutting down"));
    }
    let engine = shared.runtime.engine();
    let engine_id = engine.info().id;
    if !engine.methods().has(method) {
        return Err(engine_error(
            method,
            EngineError::NotImplemented(method),
            &engine_id,
        ));
    }
    let lane = match key {
        Some(key) => Some(shared.lanes.acquire(&key).await?),
        None => None,
    };
    if shared.stopping.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(ApiError::unavailable(
            "the gateway is shutting down; the call was not made",
        ));
    }
    let task_shared = shared.clone();
    let task = shared.tasks.spawn(async move {
        let _lane = lane;
        let controller = AbortController::new();
        let started = Instant::now();
        let call = f(CallContext::none().with_abort(controller.signal()));
        tokio::pin!(call);
        let result = tokio::select! {
            r = &mut call => r,
            () = task_shared.abort_all.cancelled() => {
                controller.abort("the gateway is shutting down");
                call.await
            }
        };
        task_shared
            .metrics
            .engine_call(method.name(), started.elapsed(), result.is_ok());
        if result.is_ok() && task_shared.abort_all.is_cancelled() {
            tracing::debug!(
                method = method.name(),
                "engine call finished during shutdown"
            );
        }
        result
    });
    let result = task.await.map_err(|e| {
        ApiError::internal(format!(
            "context engine \"{engine_id}\" failed in {}: its task ended without an answer ({e})",
            method.name()
        ))
        .with_code("engine_error")
    })?;
    result.map_err(|e| {
        tracing::warn!(method = method.name(), "engine call failed: {e}");
        engine_error(method, e, &engine_id)
    })
}

pub(crate) async fn bootstrap(
    State(s): State<AppState>,
    ApiJson(mut p): ApiJson<BootstrapParams>,
) -> Result<Json<BootstrapResult>, ApiError> {
    let key = lane_key(p.session_key.as_deref(), &p.session_id)?;
    let engine = s.runtime.engine().clone();
    if engine.methods().has(Method::Bootstrap) {
        // Bootstrap reads the file it names: one the caller may not name is refused.
        let files = SessionFiles::new(&s, &key, &ids(p.session_key.as_deref(), &p.session_id));
        files.require("sessionFile", &p.session_file)?;
        files.context(&mut p.runtime_context);
    }
    call(&s, Method::Bootstrap, key, |cx| async move {
        engine.bootstrap(&p, &cx).await
    })
    .await
    .map(Json)
}

pub(crate) async fn ingest(
    State(s): State<AppState>,
    ApiJson(p): ApiJson<IngestParams>,
) -> Result<Json<IngestResult>, ApiError> {
    let key = lane_key(p.session_key.as_deref(), &p.session_id)?;
    let engine = s.runtime.engine().clone();
    call(&s, Method::Ingest, key, |cx| async move {
        engine.ingest(&p, &cx).await
    })
    .await
    .map(Json)
}

pub(crate) async fn ingest_batch(
    State(s): State<AppState>,
    ApiJson(p): ApiJson<IngestBatchParams>,
) -> Result<Json<IngestBatchResult>, ApiError> {
    let key = lane_key(p.session_key.as_deref(), &p.session_id)?;
    let engine = s.runtime.engine().clone();
    call(&s, Method::IngestBatch, key, |cx| async move {
        engine.ingest_batch(&p, &cx).await
    })
    .await
    .map(Json)
}

pub(crate) async fn assemble(
    State(s): State<AppState>,
    ApiJson(mut p): ApiJson<AssembleParams>,
) -> Result<Json<AssembleResult>, ApiError> {
    let key = lane_key(p.session_key.as_deref(), &p.session_id)?;
    SessionFiles::new(&s, &key, &ids(p.session_key.as_deref(), &p.session_id))
        .context(&mut p.runtime_context);
    let engine = s.runtime.engine().clone();
    let served = clawctx_engine::ServedBy::default();
    let slot = served.clone();
    let (p, r) = call(&s, Method::Assemble, key, |cx| async move {
        engine
            .assemble(&p, &cx.with_served(slot))
            .await
            .map(|r| (p, r))
    })
    .await?;
    crate::trace::watch::engine_assembled(&s, &p, &r, served.fallback());
    Ok(Json(r))
}

pub(crate) async fn compact(
    State(s): State<AppState>,
    ApiJson(mut p): ApiJson<CompactParams>,
) -> Result<Json<CompactResult>, ApiError> {
    let key = lane_key(p.session_key.as_deref(), &p.session_id)?;
    let files = SessionFiles::new(&s, &key, &ids(p.session_key.as_deref(), &p.session_id));
    files.keep_or_drop("sessionFile", &mut p.session_file);
    files.context(&mut p.runtime_context);
    let engine = s.runtime.engine().clone();
    let services = if engine.is_runtime_compaction_delegate() {
        Some(runtime_compaction(&s, &key, &p)?)
    } else {
        None
    };
    call(&s, Method::Compact, key, |cx| async move {
        let cx = match services {
            Some(services) => cx.with_services(services),
            None => cx,
        };
        engine.compact(&p, &cx).await
    })
    .await
    .map(Json)
}

/// The runtime's services for a delegating engine's `compact`: bound to the gateway's stored
/// session of `key`, which the call's `sessionId` must name.
fn runtime_compaction(
    s: &Shared,
    key: &str,
    p: &CompactParams,
) -> Result<std::sync::Arc<dyn clawctx_engine::RuntimeServices>, ApiError> {
    let engine = s.runtime.engine_id();
    let found = s
        .runtime
        .session_services(key)
        .map_err(|e| ApiError::internal(format!("cannot read the session \"{key}\": {e}")))?;
    let Some((stored_id, services)) = found else {
        return Err(ApiError {
            status: axum::http::StatusCode::NOT_FOUND,
            ..ApiError::invalid(
                "sessionKey",
                format!(
                    "the engine \"{engine}\" compacts through the runtime, which compacts only the sessions this gateway \
                     stores; it stores no session \"{key}\" (see GET /v1/sessions)"
                ),
            )
        });
    };
    if p.session_id.trim() != stored_id {
        return Err(ApiError {
            param: Some("sessionId".into()),
            ..ApiError::conflict(format!(
                "the gateway's session \"{key}\" is session id \"{stored_id}\", not \"{}\"; the engine \"{engine}\" \
                 compacts the gateway's own transcript",
                p.session_id
            ))
        });
    }
    Ok(services)
}

/// `maintain` runs outside the session's lane: its compaction waits for summarizer calls
/// (seconds, a slow local model minutes), and OpenClaw calls it before the session's next
/// `assemble`, which must not wait behind it (issue #40). The engine makes that safe as it
/// does for the chat path's background maintenance: a compaction plans its rounds from the
/// frontier, summarizes with no lock held, and commits each round in one transaction that
/// checks the planned ranges are unchanged (messages stored meanwhile are only appended), one
/// compaction per conversation at a time. The call is still a tracked task with the gateway's
/// abort signal, and a panic in it is answered as a failed call without holding anything.
///
/// A deferred run (`runtimeContext.allowDeferredCompactionExecution`, the host's background
/// maintenance after the reply) is not waited for at all: it goes on this gateway's own
/// maintenance lane for the session (coalescing, aborted at shutdown, failures logged) and the
/// call answers at once. The host's side of the run then ends in milliseconds, so nothing there
/// waits for a summary either (issue #41: OpenClaw's `agent` printed one turn's output 10.75 s
/// after the model's answer, behind the previous turn's deferred `maintain`).
pub(crate) async fn maintain(
    State(s): State<AppState>,
    ApiJson(mut p): ApiJson<MaintainParams>,
) -> Result<Json<TranscriptRewriteResult>, ApiError> {
    let key = lane_key(p.session_key.as_deref(), &p.session_id)?;
    let files = SessionFiles::new(&s, &key, &ids(p.session_key.as_deref(), &p.session_id));
    files.keep_or_mark("sessionFile", &mut p.session_file);
    files.context(&mut p.runtime_context);
    let engine = s.runtime.engine().clone();
    let deferred = p
        .runtime_context
        .as_ref()
        .and_then(|c| c.allow_deferred_compaction_execution)
        == Some(true);
    if deferred
        && engine.methods().has(Method::Maintain)
        && !s.stopping.load(std::sync::atomic::Ordering::SeqCst)
    {
        let job = clawctx_runtime::MaintainJob {
            engine,
            params: p,
            services: std::sync::Arc::new(NoServices),
        };
        let reason = match s.runtime.scheduler().schedule(&key, job) {
            clawctx_runtime::Scheduled::ShutDown => {
                return Err(ApiError::unavailable("the gateway is shutting down"));
            }
            clawctx_runtime::Scheduled::Coalesced => "coalesced into the running maintenance",
            clawctx_runtime::Scheduled::Started => "scheduled on the gateway's maintenance lane",
        };
        return Ok(Json(TranscriptRewriteResult {
            reason: Some(reason.into()),
            ..Default::default()
        }));
    }
    call(&s, Method::Maintain, None::<String>, |cx| async move {
        engine.maintain(&p, &cx).await
    })
    .await
    .map(Json)
}

/// The runtime services of an engine-API call: none (the engine's defaults answer; a deferred
/// `maintain` compacts with the engine's own summarizer).
struct NoServices;

impl clawctx_engine::RuntimeServices for NoServices {}

pub(crate) async fn after_turn(
    State(s): State<AppState>,
    ApiJson(mut p): ApiJson<AfterTurnParams>,
) -> Result<Json<Value>, ApiError> {
    let key = lane_key(p.session_key.as_deref(), &p.session_id)?;
    let files = SessionFiles::new(&s, &key, &ids(p.session_key.as_deref(), &p.session_id));
    files.keep_or_mark("sessionFile", &mut p.session_file);
    files.context(&mut p.runtime_context);
    let engine = s.runtime.engine().clone();
    call(&s, Method::AfterTurn, key, |cx| async move {
        engine.after_turn(&p, &cx).await
    })
    .await?;
    Ok(Json(Value::Null))
}

pub(crate) async fn commit_turn(
    State(s): State<AppState>,
    ApiJson(mut p): ApiJson<CommitTurnParams>,
) -> Result<Json<CommitTurnResult>, ApiError> {
    let key = lane_key(p.session_key.as_deref(), &p.session_id)?;
    SessionFiles::new(&s, &key, &ids(p.session_key.as_deref(), &p.session_id))
        .context(&mut p.runtime_context);
    check_advancement_key(&p)?;
    let engine = s.runtime.engine().clone();
    call(&s, Method::CommitTurn, key, |cx| async move {
        engine.commit_turn(&p, &cx).await
    })
    .await
    .map(Json)
}

pub(crate) async fn on_subagent_ended(
    State(s): State<AppState>,
    ApiJson(p): ApiJson<SubagentEndedParams>,
) -> Result<Json<Value>, ApiError> {
    crate::validate::check_session_key("childSessionKey", &p.child_session_key)?;
    let key = lane_key(Some(&p.child_session_key), "")?;
    let engine = s.runtime.engine().clone();
    let child = p.child_session_key.clone();
    call(&s, Method::OnSubagentEnded, key, |cx| async move {
        engine.on_subagent_ended(&p, &cx).await
    })
    .await?;
    s.spawns.forget_child(&child);
    Ok(Json(Value::Null))
}

pub(crate) async fn prepare_subagent_spawn(
    State(s): State<AppState>,
    ApiJson(mut p): ApiJson<PrepareSubagentSpawnParams>,
) -> Result<Json<SpawnPreparationResponse>, ApiError> {
    if p.parent_session_key.trim().is_empty() {
        return Err(ApiError::invalid(
            "parentSessionKey",
            "`parentSessionKey` must not be empty",
        ));
    }
    crate::validate::check_session_key("parentSessionKey", &p.parent_session_key)?;
    crate::validate::check_session_key("childSessionKey", &p.child_session_key)?;
    let key = lane_key(Some(&p.child_session_key), "")
        .map_err(|_| ApiError::invalid("childSessionKey", "`childSessionKey` must not be empty"))?;
    let parent = p.parent_session_key.trim().to_owned();
    let parent_ids = ids(Some(&parent), p.parent_session_id.as_deref().unwrap_or(""));
    SessionFiles::new(&s, &parent, &parent_ids)
        .keep_or_drop("parentSessionFile", &mut p.parent_session_file);
    let child_ids = ids(Some(&key), p.child_session_id.as_deref().unwrap_or(""));
    SessionFiles::new(&s, &key, &child_ids)
        .keep_or_drop("childSessionFile", &mut p.child_session_file);
    let engine = s.runtime.engine().clone();
    let child = p.child_session_key.clone();
    let prepared = call(&s, Method::PrepareSubagentSpawn, key, |cx| async move {
        engine.prepare_subagent_spawn(&p, &cx).await
    })
    .await?;
    Ok(Json(match prepared {
        Some(preparation) => SpawnPreparationResponse {
            has_rollback: true,
            rollback_id: Some(s.spawns.keep(&child, preparation)),
        },
        None => SpawnPreparationResponse {
            has_rollback: false,
            rollback_id: None,
        },
    }))
}

pub(crate) async fn rollback(
    State(s): State<AppState>,
    ApiJson(r): ApiJson<RollbackRequest>,
) -> Result<Json<Value>, ApiError> {
    if s.stopping.load(Ordering::SeqCst) {
        return Err(ApiError::unavailable("the gateway is shutting down"));
    }
    let Some((child, preparation)) = s.spawns.take(&r.rollback_id) else {
        return Err(ApiError {
            status: axum::http::StatusCode::NOT_FOUND,
            ..ApiError::invalid(
                "rollbackId",
                format!(
                    "no rollback \"{}\" is kept: it ran already, its child ended, or prepareSubagentSpawn never answered it",
                    r.rollback_id
                ),
            )
        });
    };
    let _lane = s.lanes.acquire(&child).await?;
    let started = Instant::now();
    let result = preparation.rollback().await;
    s.metrics
        .engine_call("rollback", started.elapsed(), result.is_ok());
    let engine = s.runtime.engine_id();
    result.map_err(|e| {
        ApiError::internal(format!(
            "context engine \"{engine}\" failed in the spawn rollback: {e}"
        ))
        .with_code("engine_error")
    })?;
    Ok(Json(Value::Null))
}

pub(crate) async fn info(State(s): State<AppState>) -> Json<EngineInfoResponse> {
    let engine = s.runtime.engine();
    Json(EngineInfoResponse {
        info: engine.info(),
        methods: engine
            .methods()
            .iter()
            .map(|m| m.name().to_owned())
            .collect(),
        quarantined: s
            .registry
            .as_ref()
            .map(|r| r.quarantines().into_iter().map(|q| q.engine_id).collect())
            .unwrap_or_default(),
    })
}

pub(crate) async fn sessions(State(s): State<AppState>) -> Result<Json<SessionList>, ApiError> {
    let listed = s
        .runtime
        .store()
        .list("main")
        .map_err(|e| ApiError::internal(format!("cannot list the sessions: {e}")))?;
    // The lossless store's active conversations: (messages, compaction passes) by key.
    let mut lossless: std::collections::BTreeMap<String, (u64, i64)> = Default::default();
    if let Some(recall) = crate::engine_store::lossless(&s) {
        let stats = recall.store().conversation_stats().await.map_err(|e| {
            crate::engine_store::store_error(&recall, "listing the lossless conversations", e)
        })?;
        for c in stats.into_iter().filter(|c| c.conversation.active) {
            let messages = u64::try_from(c.conversation.msg_count).unwrap_or(0);
            lossless.insert(c.conversation.session_key, (messages, c.compactions));
        }
    }
    let mut sessions: Vec<SessionRow> = listed
        .into_iter()
        .map(|(key, e)| {
            let stored = lossless.remove(&key);
            let mut stores = vec!["transcript".to_owned()];
            if stored.is_some() {
                stores.push("lossless".into());
            }
            SessionRow {
                engine: crate::holding::engine(Some(&e), stored.is_some()),
                compactions: crate::holding::compactions(Some(&e), stored.map(|(_, p)| p)),
                session_id: Some(e.session_id),
                updated_at: Some(e.updated_at),
                stores,
                lossless_messages: stored.map(|(m, _)| m),
                session_key: key,
            }
        })
        .collect();
    // Then the conversations only the lossless store holds, by key (a BTreeMap's order).
    sessions.extend(
        lossless
            .into_iter()
            .map(|(key, (messages, passes))| SessionRow {
                engine: crate::holding::engine(None, true),
                compactions: crate::holding::compactions(None, Some(passes)),
                session_key: key,
                session_id: None,
                updated_at: None,
                stores: vec!["lossless".into()],
                lossless_messages: Some(messages),
            }),
    );
    Ok(Json(SessionList { sessions }))
}
