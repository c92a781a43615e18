//! The quarantine guard: what keeps a failing engine from silencing the agent (contract §4.1).
//!
//! Every non-default engine that standalone resolution returns is wrapped in a
//! [`GuardedEngine`]. Each guarded call:
//! 1. rejects at once, without calling the engine, when the caller's signal is already aborted;
//! 2. goes to the fallback when the engine is already quarantined;
//! 3. calls the engine with host-projected params;
//! 4. on failure: the caller's own abort propagates untouched; a store outage
//!    ([`EngineError::Unavailable`]) does not quarantine: `assemble` is answered by the
//!    fallback for that call only (the turn goes on from the transcript), every other method
//!    returns the error (a host's outbox keeps the turn's commit until the store is back), and
//!    the next call goes to the engine again; anything else quarantines the engine for the
//!    process, then `compact` and `prepareSubagentSpawn` rethrow (fail closed) while every
//!    other method answers with the fallback's result for the same params (the original error
//!    if the fallback fails too).
//!
//! Why an outage is not a fault: a database that is restarting or briefly unreachable comes
//! back, and a quarantine for the life of the process would send every later turn to `legacy`
//! while the engine could serve again (issue #27 item 2). The guard remembers the last outage
//! until a call or a [`ContextEngine::probe`] succeeds ([`GuardedEngine::unavailable`]).
//!
//! The fallback (`legacy`) is built lazily, once per wrapper, from the factory captured when the
//! wrapper was made; concurrent failures share that one factory call.
//!
//! `assemble` results are checked here too ([`check_assembled_messages`]), so an in-process
//! engine meets the same rule the plugin adapter applies to plugins: a `toolResult` without a
//! `toolCallId` would break the provider request, so it is a contract violation (quarantine and
//! `legacy`'s answer), named by index and field. What the host can repair is not a violation:
//! `system`-role messages are folded into the system prompt by the runtime (a deliberate
//! deviation, see ARCHITECTURE.md), orphaned tool results are dropped by its final clamp.

use std::sync::Arc;

use async_trait::async_trait;
use clawctx_protocol::*;
use futures::future::BoxFuture;
use tokio::sync::OnceCell;

use crate::engine::*;
use crate::error::EngineError;
use crate::projection::{project_context, project_params, HostParams};
use crate::registry::{owner_plugin_id, ContextEngineRegistry, Factory, FactoryContext};

/// The reason the canned fallback results carry.
pub const DOWNGRADED_REASON: &str = "context engine downgraded to legacy";

/// The violation text for a `toolResult` at `index` without a `toolCallId` (the same words for
/// plugins and in-process engines).
pub fn missing_tool_call_id(index: usize) -> String {
    format!("assemble returned a toolResult without a toolCallId at index {index} (the provider request pairs every tool result with its call by that id)")
}

/// The checks every engine's `assemble` result gets, whatever runs it: `Err` describes the
/// first violation. Today that is a `toolResult` whose `toolCallId` is missing or empty.
pub fn check_assembled_messages(messages: &[AgentMessage]) -> Result<(), String> {
    for (i, m) in messages.iter().enumerate() {
        if let AgentMessage::ToolResult(r) = m {
            if r.tool_call_id.trim().is_empty() {
                return Err(missing_tool_call_id(i));
            }
        }
    }
    Ok(())
}

/// A non-default engine behind the quarantine guard.
pub struct GuardedEngine {
    inner: Arc<dyn ContextEngine>,
    engine_id: String,
    owner: Option<String>,
    registry: Arc<ContextEngineRegistry>,
    fallback_factory: Option<Factory>,
    factory_ctx: FactoryContext,
    fallback: OnceCell<Arc<dyn ContextEngine>>,
    /// Why the engine's store could not be reached at the last call, until one succeeds.
    unavailable: std::sync::Mutex<Option<String>>,
}

type Call<P, T> = for<'b> fn(
    &'b dyn ContextEngine,
    &'b P,
    &'b CallContext,
) -> BoxFuture<'b, Result<T, EngineError>>;

impl GuardedEngine {
    /// Wraps `inner`, registered as `engine_id` by `owner`.
    pub fn new(
        inner: Arc<dyn ContextEngine>,
        engine_id: impl Into<String>,
        owner: Option<String>,
        registry: Arc<ContextEngineRegistry>,
        factory_ctx: FactoryContext,
    ) -> Self {
        let fallback_factory = registry.get(registry.default_id()).map(|r| r.factory);
        Self {
            inner,
            engine_id: engine_id.into(),
            owner,
            registry,
            fallback_factory,
            factory_ctx,
            fallback: OnceCell::new(),
            unavailable: std::sync::Mutex::new(None),
        }
    }

    /// Why the engine's store could not be reached at the last call or probe (`None` once one
    /// succeeded, or before any failed).
    pub fn unavailable(&self) -> Option<String> {
        self.unavailable.lock().ok().and_then(|u| u.clone())
    }

    /// Records the outcome of a call for [`Self::unavailable`].
    fn note_availability(&self, err: Option<&EngineError>) {
        let Ok(mut u) = self.unavailable.lock() else {
            return;
        };
        match err {
            Some(EngineError::Unavailable(why)) => {
                if u.is_none() {
                    tracing::warn!(
                        "[context-engine] {} cannot reach its store ({why}); not quarantined: \
                         turns are answered from the transcript and their commits wait until it is back",
                        self.engine_id
                    );
                }
                *u = Some(why.clone());
            }
            Some(_) => {}
            None => {
                if u.take().is_some() {
                    tracing::info!(
                        "[context-engine] {} reaches its store again",
                        self.engine_id
                    );
                }
            }
        }
    }

    /// The registered id.
    pub fn engine_id(&self) -> &str {
        &self.engine_id
    }

    /// Whether the engine behind this wrapper is quarantined.
    pub fn is_quarantined(&self) -> bool {
        self.registry.is_quarantined(&self.engine_id)
    }

    /// `resolveContextEngineOwnerPluginId`: the `<id>` of a `plugin:<id>` owner, or `None` once
    /// quarantined (downgraded work belongs to core).
    pub fn owner_plugin_id(&self) -> Option<&str> {
        if self.is_quarantined() {
            return None;
        }
        self.owner.as_deref().and_then(owner_plugin_id)
    }

    /// The wrapped engine (`hasSameContextEngineInstance` compares these).
    pub fn inner(&self) -> &Arc<dyn ContextEngine> {
        &self.inner
    }

    async fn fallback(&self) -> Result<&Arc<dyn ContextEngine>, EngineError> {
        self.fallback
            .get_or_try_init(|| async {
                let factory = self.fallback_factory.clone().ok_or_else(|| {
                    EngineError::NotRegistered(format!(
                        "[context-engine] fallback failed: default engine \"{}\" is not registered. Available engines: {}",
                        self.registry.default_id(),
                        available(&self.registry)
                    ))
                })?;
                factory(self.factory_ctx.clone()).await
            })
            .await
    }

    async fn run<P, T>(
        &self,
        method: Method,
        params: &P,
        cx: &CallContext,
        call: Call<P, T>,
        canned: Option<fn() -> T>,
        fail_closed: bool,
    ) -> Result<T, EngineError>
    where
        P: HostParams + Sync,
        T: Send,
    {
        if let Some(signal) = &cx.abort {
            if signal.is_aborted() {
                return Err(EngineError::Aborted {
                    reason: signal.reason(),
                });
            }
        }
        if self.is_quarantined() {
            let why = format!("{} is quarantined for this process", self.engine_id);
            return self
                .via_fallback(method, params, cx, call, canned, why)
                .await;
        }
        let info = self.inner.info();
        let projected = project_params(params, &info);
        let pcx = project_context(cx, &info, method);
        match call(self.inner.as_ref(), projected.as_ref(), &pcx).await {
            Ok(v) => {
                // Only a call that needs the store says it is back (a `maintain` or
                // `bootstrap` with nothing to do may succeed without it).
                if matches!(
                    method,
                    Method::Assemble
                        | Method::CommitTurn
                        | Method::Ingest
                        | Method::IngestBatch
                        | Method::AfterTurn
                ) {
                    self.note_availability(None);
                }
                Ok(v)
            }
            Err(err) => {
                let caller_aborted = cx.abort.as_ref().is_some_and(|s| s.is_aborted());
                if caller_aborted && err.looks_like_abort() {
                    return Err(err);
                }
                if err.is_unavailable() {
                    self.note_availability(Some(&err));
                    if method != Method::Assemble {
                        return Err(err);
                    }
                    let why = format!("{} cannot reach its store ({err})", self.engine_id);
                    return match self
                        .via_fallback(method, params, cx, call, canned, why)
                        .await
                    {
                        Ok(v) => Ok(v),
                        Err(_) => Err(err),
                    };
                }
                self.registry.quarantine(
                    &self.engine_id,
                    self.owner.as_deref(),
                    method.name(),
                    &err.to_string(),
                );
                if fail_closed {
                    return Err(err);
                }
                let why = format!("{} failed in {} ({err})", self.engine_id, method.name());
                match self
                    .via_fallback(method, params, cx, call, canned, why)
                    .await
                {
                    Ok(v) => Ok(v),
                    Err(_) => Err(err),
                }
            }
        }
    }

    async fn via_fallback<P, T>(
        &self,
        method: Method,
        params: &P,
        cx: &CallContext,
        call: Call<P, T>,
        canned: Option<fn() -> T>,
        why: String,
    ) -> Result<T, EngineError>
    where
        P: HostParams + Sync,
        T: Send,
    {
        let fb = self.fallback().await?;
        if fb.methods().has(method) {
            let answered = call(fb.as_ref(), params, cx).await;
            if let (Ok(_), Some(served)) = (&answered, &cx.served) {
                served.record(Fallback {
                    engine_id: fb.info().id,
                    instead_of: self.engine_id.clone(),
                    reason: why,
                });
            }
            return answered;
        }
        match canned {
            Some(make) => Ok(make()),
            None => Err(EngineError::failed(format!(
                "No legacy fallback result for {}",
                method.name()
            ))),
        }
    }
}

fn available(registry: &ContextEngineRegistry) -> String {
    let ids = registry.ids();
    if ids.is_empty() {
        "(none)".to_owned()
    } else {
        ids.join(", ")
    }
}

fn c_ingest<'b>(
    e: &'b dyn ContextEngine,
    p: &'b IngestParams,
    c: &'b CallContext,
) -> BoxFuture<'b, Result<IngestResult, EngineError>> {
    e.ingest(p, c)
}
fn c_ingest_batch<'b>(
    e: &'b dyn ContextEngine,
    p: &'b IngestBatchParams,
    c: &'b CallContext,
) -> BoxFuture<'b, Result<IngestBatchResult, EngineError>> {
    e.ingest_batch(p, c)
}
fn c_assemble<'b>(
    e: &'b dyn ContextEngine,
    p: &'b AssembleParams,
    c: &'b CallContext,
) -> BoxFuture<'b, Result<AssembleResult, EngineError>> {
    Box::pin(async move {
        let result = e.assemble(p, c).await?;
        check_assembled_messages(&result.messages)
            .map_err(|v| EngineError::failed(format!("contract violation: {v}")))?;
        Ok(result)
    })
}
fn c_compact<'b>(
    e: &'b dyn ContextEngine,
    p: &'b CompactParams,
    c: &'b CallContext,
) -> BoxFuture<'b, Result<CompactResult, EngineError>> {
    e.compact(p, c)
}
fn c_bootstrap<'b>(
    e: &'b dyn ContextEngine,
    p: &'b BootstrapParams,
    c: &'b CallContext,
) -> BoxFuture<'b, Result<BootstrapResult, EngineError>> {
    e.bootstrap(p, c)
}
fn c_maintain<'b>(
    e: &'b dyn ContextEngine,
    p: &'b MaintainParams,
    c: &'b CallContext,
) -> BoxFuture<'b, Result<TranscriptRewriteResult, EngineError>> {
    e.maintain(p, c)
}
fn c_after_turn<'b>(
    e: &'b dyn ContextEngine,
    p: &'b AfterTurnParams,
    c: &'b CallContext,
) -> BoxFuture<'b, Result<(), EngineError>> {
    e.after_turn(p, c)
}
fn c_commit_turn<'b>(
    e: &'b dyn ContextEngine,
    p: &'b CommitTurnParams,
    c: &'b CallContext,
) -> BoxFuture<'b, Result<Option<CommitTurnResult>, EngineError>> {
    Box::pin(async move { e.commit_turn(p, c).await.map(Some) })
}
fn c_prepare<'b>(
    e: &'b dyn ContextEngine,
    p: &'b PrepareSubagentSpawnParams,
    c: &'b CallContext,
) -> BoxFuture<'b, Result<Option<SubagentSpawnPreparation>, EngineError>> {
    e.prepare_subagent_spawn(p, c)
}
fn c_ended<'b>(
    e: &'b dyn ContextEngine,
    p: &'b SubagentEndedParams,
    c: &'b CallContext,
) -> BoxFuture<'b, Result<(), EngineError>> {
    e.on_subagent_ended(p, c)
}

#[async_trait]
impl ContextEngine for GuardedEngine {
    fn info(&self) -> ContextEngineInfo {
        if self.is_quarantined() {
            if let Some(fb) = self.fallback.get() {
                return fb.info();
            }
            let id = self.registry.default_id();
            let name = if id == crate::registry::DEFAULT_ENGINE_ID {
                "Legacy Context Engine".to_owned()
            } else {
                format!("{id} Context Engine")
            };
            return ContextEngineInfo::new(id, name);
        }
        self.inner.info()
    }

    fn methods(&self) -> MethodSet {
        self.inner.methods()
    }

    fn is_runtime_compaction_delegate(&self) -> bool {
        if self.is_quarantined() {
            return true;
        }
        self.inner.is_runtime_compaction_delegate()
    }

    fn tools(&self) -> Vec<Arc<dyn AgentTool>> {
        if self.is_quarantined() {
            return Vec::new();
        }
        self.inner.tools()
    }

    async fn probe(&self) -> Result<(), EngineError> {
        if self.is_quarantined() {
            return Ok(());
        }
        let r = self.inner.probe().await;
        match &r {
            Ok(()) => self.note_availability(None),
            Err(e) => self.note_availability(Some(e)),
        }
        r
    }

    /// The wrapped engine, quarantined or not: what a host reads through it (the lossless
    /// engine's store, for recall) is the engine's own, not the fallback's.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        self.inner.as_any()
    }

    async fn ingest(
        &self,
        params: &IngestParams,
        cx: &CallContext,
    ) -> Result<IngestResult, EngineError> {
        self.run(
            Method::Ingest,
            params,
            cx,
            c_ingest,
            Some(|| IngestResult { ingested: false }),
            false,
        )
        .await
    }

    async fn assemble(
        &self,
        params: &AssembleParams,
        cx: &CallContext,
    ) -> Result<AssembleResult, EngineError> {
        self.run(Method::Assemble, params, cx, c_assemble, None, false)
            .await
    }

    async fn compact(
        &self,
        params: &CompactParams,
        cx: &CallContext,
    ) -> Result<CompactResult, EngineError> {
        self.run(Method::Compact, params, cx, c_compact, None, true)
            .await
    }

    async fn ingest_batch(
        &self,
        params: &IngestBatchParams,
        cx: &CallContext,
    ) -> Result<IngestBatchResult, EngineError> {
        self.run(
            Method::IngestBatch,
            params,
            cx,
            c_ingest_batch,
            Some(|| IngestBatchResult { ingested_count: 0 }),
            false,
        )
        .await
    }

    async fn bootstrap(
        &self,
        params: &BootstrapParams,
        cx: &CallContext,
    ) -> Result<BootstrapResult, EngineError> {
        let canned = || BootstrapResult {
            bootstrapped: false,
            imported_messages: None,
            reason: Some(DOWNGRADED_REASON.into()),
        };
        self.run(
            Method::Bootstrap,
            params,
            cx,
            c_bootstrap,
            Some(canned),
            false,
        )
        .await
    }

    async fn maintain(
        &self,
        params: &MaintainParams,
        cx: &CallContext,
    ) -> Result<TranscriptRewriteResult, EngineError> {
        let canned = || TranscriptRewriteResult {
            reason: Some(DOWNGRADED_REASON.into()),
            ..Default::default()
        };
        self.run(
            Method::Maintain,
            params,
            cx,
            c_maintain,
            Some(canned),
            false,
        )
        .await
    }

    async fn after_turn(
        &self,
        params: &AfterTurnParams,
        cx: &CallContext,
    ) -> Result<(), EngineError> {
        self.run(
            Method::AfterTurn,
            params,
            cx,
            c_after_turn,
            Some(|| ()),
            false,
        )
        .await
    }

    async fn commit_turn(
        &self,
        params: &CommitTurnParams,
        cx: &CallContext,
    ) -> Result<CommitTurnResult, EngineError> {
        // The fallback's canned commitTurn result is `undefined`: surfaced as NotImplemented so
        // the host treats the turn as not durably committed by the engine.
        match self
            .run(
                Method::CommitTurn,
                params,
                cx,
                c_commit_turn,
                Some(|| None),
                false,
            )
            .await?
        {
            Some(r) => Ok(r),
            None => Err(EngineError::NotImplemented(Method::CommitTurn)),
        }
    }

    async fn prepare_subagent_spawn(
        &self,
        params: &PrepareSubagentSpawnParams,
        cx: &CallContext,
    ) -> Result<Option<SubagentSpawnPreparation>, EngineError> {
        self.run(
            Method::PrepareSubagentSpawn,
            params,
            cx,
            c_prepare,
            Some(|| None),
            true,
        )
        .await
    }

    async fn on_subagent_ended(
        &self,
        params: &SubagentEndedParams,
        cx: &CallContext,
    ) -> Result<(), EngineError> {
        self.run(
            Method::OnSubagentEnded,
            params,
            cx,
            c_ended,
            Some(|| ()),
            false,
        )
        .await
    }

    async fn dispose(&self) -> Result<(), EngineError> {
        let primary = self.inner.dispose().await;
        if let Some(fb) = self.fallback.get() {
            fb.dispose().await?;
        }
        primary
    }
}
