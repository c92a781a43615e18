//! The `ContextEngine` trait: the contract every engine implements (contract §1).
//!
//! Params are passed by reference: the quarantine guard must be able to hand the *same* params
//! to the `legacy` fallback after the engine failed, and the hot path (assemble over a long
//! history) must not clone the message list just in case.
//!
//! Optional methods must be distinguishable from no-ops, because the host behaves differently
//! when they are absent (afterTurn beats ingestBatch beats ingest; the guard's canned fallback
//! results; the durable-turn declaration). An engine says which optional methods it has in
//! [`ContextEngine::methods`]; the default bodies return [`EngineError::NotImplemented`].

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use clawctx_protocol::*;
use futures::future::BoxFuture;
use serde_json::Value;

use crate::abort::AbortSignal;
use crate::error::EngineError;

/// A lifecycle method, named as the contract names it (quarantine records use these names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Method {
    /// `ingest` (required).
    Ingest,
    /// `assemble` (required).
    Assemble,
    /// `compact` (required).
    Compact,
    /// `ingestBatch`.
    IngestBatch,
    /// `bootstrap`.
    Bootstrap,
    /// `maintain`.
    Maintain,
    /// `afterTurn`.
    AfterTurn,
    /// `commitTurn` (G3).
    CommitTurn,
    /// `prepareSubagentSpawn`.
    PrepareSubagentSpawn,
    /// `onSubagentEnded`.
    OnSubagentEnded,
    /// `dispose`.
    Dispose,
}

impl Method {
    /// Every method, required first.
    pub const ALL: [Method; 11] = [
        Method::Ingest,
        Method::Assemble,
        Method::Compact,
        Method::IngestBatch,
        Method::Bootstrap,
        Method::Maintain,
        Method::AfterTurn,
        Method::CommitTurn,
        Method::PrepareSubagentSpawn,
        Method::OnSubagentEnded,
        Method::Dispose,
    ];

    /// The contract's camelCase name.
    pub fn name(self) -> &'static str {
        match self {
            Method::Ingest => "ingest",
            Method::Assemble => "assemble",
            Method::Compact => "compact",
            Method::IngestBatch => "ingestBatch",
            Method::Bootstrap => "bootstrap",
            Method::Maintain => "maintain",
            Method::AfterTurn => "afterTurn",
            Method::CommitTurn => "commitTurn",
            Method::PrepareSubagentSpawn => "prepareSubagentSpawn",
            Method::OnSubagentEnded => "onSubagentEnded",
            Method::Dispose => "dispose",
        }
    }

    /// Parses a contract name.
    pub fn from_name(name: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.name() == name)
    }

    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// A set of [`Method`]s: which methods an engine implements.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct MethodSet(u16);

impl MethodSet {
    /// No methods.
    pub const EMPTY: MethodSet = MethodSet(0);
    /// `ingest`, `assemble`, `compact`.
    pub const REQUIRED: MethodSet = MethodSet(0b111);

    /// Builds a set from a list.
    pub fn of(methods: &[Method]) -> Self {
        MethodSet(methods.iter().fold(0, |acc, m| acc | m.bit()))
    }

    /// Adds `m`.
    pub fn with(self, m: Method) -> Self {
        MethodSet(self.0 | m.bit())
    }

    /// Whether `m` is in the set.
    pub fn has(self, m: Method) -> bool {
        self.0 & m.bit() != 0
    }

    /// The methods in the set, in [`Method::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = Method> {
        Method::ALL.into_iter().filter(move |m| self.has(*m))
    }
}

impl fmt::Debug for MethodSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(self.iter().map(Method::name))
            .finish()
    }
}

/// The runtime's built-in compaction request, as `delegateCompactionToRuntime` builds it
/// (contract §7.2).
#[derive(Clone, Debug, Default)]
pub struct RuntimeCompactionRequest {
    /// Caller session id.
    pub session_id: String,
    /// `params.sessionKey ?? runtimeContext.sessionKey`.
    pub session_key: Option<String>,
    /// `params.agentId ?? runtimeContext.agentId`.
    pub agent_id: Option<String>,
    /// `params.sessionTarget ?? runtimeContext.sessionTarget`.
    pub session_target: Option<ContextEngineSessionTarget>,
    /// Token budget.
    pub token_budget: Option<u64>,
    /// Compact even below threshold.
    pub force: Option<bool>,
    /// Extra focus for the summary.
    pub custom_instructions: Option<String>,
    /// `params.currentTokenCount`, else a positive finite `runtimeContext.currentTokenCount`.
    pub current_token_count: Option<u64>,
    /// `runtimeContext.workspaceDir`, else the process working directory.
    pub workspace_dir: String,
    /// Every other runtimeContext field (never `sessionFile`).
    pub runtime_fields: JsonMap,
    /// The caller's runtimeContext, passed through as `contextEngineRuntimeContext`.
    pub context_engine_runtime_context: Option<ContextEngineRuntimeContext>,
    /// The caller's abort signal.
    pub abort: Option<AbortSignal>,
}

/// What the runtime's compaction did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RuntimeCompactionOutcome {
    /// Success.
    pub ok: bool,
    /// Whether anything was compacted.
    pub compacted: bool,
    /// Why not.
    pub reason: Option<String>,
    /// The nested result, when the runtime produced one.
    pub result: Option<RuntimeCompactionDetail>,
}

/// The runtime's nested compaction result.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RuntimeCompactionDetail {
    /// Summary text.
    pub summary: Option<String>,
    /// First entry kept raw.
    pub first_kept_entry_id: Option<String>,
    /// Tokens before.
    pub tokens_before: u64,
    /// Tokens after.
    pub tokens_after: Option<u64>,
    /// File-ops details.
    pub details: Option<Value>,
    /// Successor session id, when the runtime rotated the session.
    pub session_id: Option<String>,
    /// Successor agent id, when known.
    pub agent_id: Option<String>,
    /// Successor session key, when known.
    pub session_key: Option<String>,
    /// Successor store scope, when known.
    pub store_path: Option<String>,
}

/// An LLM completion requested by an engine through the host (`runtime.llm.complete`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmCompleteRequest {
    /// System prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The user prompt.
    #[serde(default)]
    pub prompt: String,
    /// Full message list instead of (or after) `prompt`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<AgentMessage>,
    /// Output cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Model override (`provider/model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// The host's answer to [`LlmCompleteRequest`].
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LlmCompleteResult {
    /// The completion text.
    pub text: String,
    /// Usage, when the provider reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// The callable members of `runtimeContext`: what the host offers engines beyond data.
///
/// Every method has a default saying the host does not offer it, so hosts implement only
/// what they have (and advertise it as a host capability).
#[async_trait]
pub trait RuntimeServices: Send + Sync {
    /// `runtimeContext.rewriteTranscriptEntries` (contract §9). Never fails: problems come back
    /// as `{changed:false, reason}`.
    async fn rewrite_transcript_entries(
        &self,
        _request: TranscriptRewriteRequest,
    ) -> TranscriptRewriteResult {
        TranscriptRewriteResult {
            reason: Some("transcript rewrite is not available on this host".into()),
            ..Default::default()
        }
    }

    /// `runtimeContext.llm.complete` (capability `runtime-llm-complete`).
    async fn llm_complete(
        &self,
        _request: LlmCompleteRequest,
    ) -> Result<LlmCompleteResult, EngineError> {
        Err(EngineError::failed(
            "runtime LLM completion is not available on this host",
        ))
    }

    /// OpenClaw's `readSessionTranscriptVisibleMessageDelta` (contract §1.7): one page of the
    /// visible messages of this call's session after a cursor. Fails for another session and
    /// on a host without transcripts.
    async fn read_transcript_delta(
        &self,
        _request: clawctx_protocol::transcript::TranscriptDeltaRequest,
    ) -> Result<clawctx_protocol::transcript::TranscriptDelta, EngineError> {
        Err(EngineError::failed(
            "reading the session transcript is not available on this host",
        ))
    }

    /// The runtime's built-in summarization compaction, the target of
    /// `delegateCompactionToRuntime` (contract §7.2, §7.4).
    async fn compact_session(
        &self,
        _request: RuntimeCompactionRequest,
    ) -> Result<RuntimeCompactionOutcome, EngineError> {
        Err(EngineError::failed(
            "runtime compaction is not available on this host",
        ))
    }
}

/// Everything a call carries besides its JSON params: the abort signal and the runtime
/// services. Host-param projection (§1.6) strips these like the JSON host params
/// (`abortSignal`, `runtimeContext`).
#[derive(Clone, Default)]
pub struct CallContext {
    /// The caller's abort signal (`abortSignal`).
    pub abort: Option<AbortSignal>,
    /// The callable half of `runtimeContext`.
    pub services: Option<Arc<dyn RuntimeServices>>,
    /// Where a [`crate::GuardedEngine`] says that its fallback answered the call, for a caller
    /// that reports which engine served (the turn trace). Never given to the engine itself.
    pub served: Option<ServedBy>,
}

/// The engine that really answered a call, when it was not the one called: a guarded engine's
/// fallback (`legacy`), because the engine was quarantined or its store could not be reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fallback {
    /// The engine that answered.
    pub engine_id: String,
    /// The engine that was called and did not answer.
    pub instead_of: String,
    /// Why, in words.
    pub reason: String,
}

/// A slot a call's [`Fallback`] is written to (see [`CallContext::served`]).
#[derive(Clone, Debug, Default)]
pub struct ServedBy(Arc<std::sync::Mutex<Option<Fallback>>>);

impl ServedBy {
    /// Records that `fallback` answered.
    pub fn record(&self, fallback: Fallback) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some(fallback);
        }
    }

    /// The fallback that answered, `None` when the engine called did.
    pub fn fallback(&self) -> Option<Fallback> {
        self.0.lock().ok().and_then(|slot| slot.clone())
    }
}

impl fmt::Debug for CallContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallContext")
            .field("abort", &self.abort.as_ref().map(|a| a.is_aborted()))
            .field("services", &self.services.is_some())
            .field("served", &self.served.as_ref().and_then(ServedBy::fallback))
            .finish()
    }
}

impl CallContext {
    /// A context with no signal and no services.
    pub fn none() -> Self {
        Self::default()
    }

    /// With an abort signal.
    pub fn with_abort(mut self, signal: AbortSignal) -> Self {
        self.abort = Some(signal);
        self
    }

    /// With runtime services.
    pub fn with_services(mut self, services: Arc<dyn RuntimeServices>) -> Self {
        self.services = Some(services);
        self
    }

    /// With a slot for the engine that really answers (see [`ServedBy`]).
    pub fn with_served(mut self, served: ServedBy) -> Self {
        self.served = Some(served);
        self
    }
}

/// The rollback handle `prepareSubagentSpawn` may return (§8): run when the launch fails after
/// preparation succeeded.
pub struct SubagentSpawnPreparation {
    rollback: Box<dyn FnOnce() -> BoxFuture<'static, Result<(), EngineError>> + Send>,
}

impl SubagentSpawnPreparation {
    /// Wraps a rollback action.
    pub fn new<F, Fut>(rollback: F) -> Self
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<(), EngineError>> + Send + 'static,
    {
        Self {
            rollback: Box::new(move || Box::pin(rollback())),
        }
    }

    /// Runs the rollback (awaited; may be async).
    pub async fn rollback(self) -> Result<(), EngineError> {
        (self.rollback)().await
    }
}

impl fmt::Debug for SubagentSpawnPreparation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SubagentSpawnPreparation { .. }")
    }
}

/// A tool an engine offers the model (e.g. the lossless engine's recall tools). The runtime's
/// tool loop calls it; plugins register theirs through `api.registerTool`.
#[async_trait]
pub trait AgentTool: Send + Sync {
    /// Tool name as the model sees it.
    fn name(&self) -> &str;
    /// One-paragraph description for the model.
    fn description(&self) -> &str;
    /// JSON Schema of the arguments object.
    fn parameters(&self) -> Value;
    /// Runs the tool. An `Err` is shown to the model as a tool error, not a turn failure.
    async fn execute(&self, arguments: Value, context: ToolCallContext) -> Result<String, String>;
}

/// Where a tool call comes from.
#[derive(Clone, Debug, Default)]
pub struct ToolCallContext {
    /// Physical session id.
    pub session_id: String,
    /// Routing key.
    pub session_key: Option<String>,
    /// The model's id for this call (`toolCallId`, what a tool's `execute(toolCallId, ...)`
    /// gets); `None` outside a model's tool call.
    pub tool_call_id: Option<String>,
}

/// A context engine.
///
/// Implementors provide `info`, `ingest`, `assemble` and `compact`, list any optional methods
/// they implement in [`ContextEngine::methods`], and override those.
#[async_trait]
pub trait ContextEngine: Send + Sync {
    /// The engine's self-description. May change at run time (a quarantined wrapper reports
    /// its fallback's info).
    fn info(&self) -> ContextEngineInfo;

    /// Which methods the engine implements. Defaults to the required three.
    fn methods(&self) -> MethodSet {
        MethodSet::REQUIRED
    }

    /// Whether `compact` delegates to the runtime's native compaction (the
    /// "runtime compaction delegate" marker: the host's compaction watchdog then treats it as
    /// native).
    fn is_runtime_compaction_delegate(&self) -> bool {
        false
    }

    /// Tools this engine offers the model.
    fn tools(&self) -> Vec<Arc<dyn AgentTool>> {
        Vec::new()
    }

    /// The engine as [`std::any::Any`], for a host that knows a concrete engine and wants what
    /// it offers beyond the contract (the gateway asks the lossless engine for recall and
    /// inspection over the engine's own store, so a process opens one store per engine).
    /// `None` by default; the quarantine guard answers with the engine it wraps.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }

    /// Whether the engine can serve now: [`EngineError::Unavailable`] while its store cannot be
    /// reached (a readiness probe asks this, so it must be cheap: one round trip at most).
    /// `Ok` by default (an engine without a remote store is always there).
    async fn probe(&self) -> Result<(), EngineError> {
        Ok(())
    }

    /// Stores one message. `ingested: false` for a duplicate or a no-op.
    async fn ingest(
        &self,
        params: &IngestParams,
        cx: &CallContext,
    ) -> Result<IngestResult, EngineError>;

    /// Returns exactly the messages the model will receive, within `tokenBudget`.
    async fn assemble(
        &self,
        params: &AssembleParams,
        cx: &CallContext,
    ) -> Result<AssembleResult, EngineError>;

    /// Summarizes older context.
    async fn compact(
        &self,
        params: &CompactParams,
        cx: &CallContext,
    ) -> Result<CompactResult, EngineError>;

    /// Ingests a completed turn as one unit.
    async fn ingest_batch(
        &self,
        _params: &IngestBatchParams,
        _cx: &CallContext,
    ) -> Result<IngestBatchResult, EngineError> {
        Err(EngineError::NotImplemented(Method::IngestBatch))
    }

    /// Called once when the engine first sees a session.
    async fn bootstrap(
        &self,
        _params: &BootstrapParams,
        _cx: &CallContext,
    ) -> Result<BootstrapResult, EngineError> {
        Err(EngineError::NotImplemented(Method::Bootstrap))
    }

    /// Transcript maintenance.
    async fn maintain(
        &self,
        _params: &MaintainParams,
        _cx: &CallContext,
    ) -> Result<TranscriptRewriteResult, EngineError> {
        Err(EngineError::NotImplemented(Method::Maintain))
    }

    /// Post-run work.
    async fn after_turn(
        &self,
        _params: &AfterTurnParams,
        _cx: &CallContext,
    ) -> Result<(), EngineError> {
        Err(EngineError::NotImplemented(Method::AfterTurn))
    }

    /// Durable turn advancement (G3).
    async fn commit_turn(
        &self,
        _params: &CommitTurnParams,
        _cx: &CallContext,
    ) -> Result<CommitTurnResult, EngineError> {
        Err(EngineError::NotImplemented(Method::CommitTurn))
    }

    /// Prepares a subagent spawn; the returned handle rolls it back.
    async fn prepare_subagent_spawn(
        &self,
        _params: &PrepareSubagentSpawnParams,
        _cx: &CallContext,
    ) -> Result<Option<SubagentSpawnPreparation>, EngineError> {
        Err(EngineError::NotImplemented(Method::PrepareSubagentSpawn))
    }

    /// A subagent ended.
    async fn on_subagent_ended(
        &self,
        _params: &SubagentEndedParams,
        _cx: &CallContext,
    ) -> Result<(), EngineError> {
        Err(EngineError::NotImplemented(Method::OnSubagentEnded))
    }

    /// Releases instance resources. Never guarded, never quarantines.
    async fn dispose(&self) -> Result<(), EngineError> {
        Ok(())
    }
}
