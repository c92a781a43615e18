//! Params and results of every lifecycle method (contract §1.2, §1.3, §1.7, §8, §9).
//!
//! Host-added params (`sessionKey`, `prompt`, `runtimeSettings`, `sessionTarget`,
//! `runtimeContext`) are `Option`s that are skipped when absent: the contract requires that
//! `prompt` be *absent*, not `undefined`, when the caller has none, and host-param projection
//! (§1.6) removes keys by setting them to `None`. The abort signal is not data: it travels in
//! the engine crate's call context.
//!
//! Results coming from plugins are read leniently where JavaScript numbers may be fractional
//! (`estimatedTokens: 12.5` becomes 13): a plugin that returns a float must not crash the host.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::{
    AgentMessage, ContextEngineRuntimeContext, ContextEngineSessionTarget, RuntimeSettings,
};

/// Reads a non-negative count that JavaScript may have produced as a float or left null.
pub fn lenient_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = Option::<Value>::deserialize(d)?;
    Ok(match v {
        Some(Value::Number(n)) => n
            .as_u64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.is_finite() && *f > 0.0)
                    .map(|f| f.ceil() as u64)
            })
            .unwrap_or(0),
        _ => 0,
    })
}

fn lenient_opt_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let v = Option::<Value>::deserialize(d)?;
    Ok(match v {
        Some(Value::Number(n)) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.is_finite() && *f >= 0.0)
                .map(|f| f.ceil() as u64)
        }),
        _ => None,
    })
}

/// `ingest` params.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct IngestParams {
    /// Physical session id.
    pub session_id: String,
    /// Routing key (host param).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// The message to store.
    pub message: AgentMessage,
    /// True when the message belongs to a heartbeat run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_heartbeat: Option<bool>,
}

/// `ingest` result.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct IngestResult {
    /// False for a duplicate or a no-op.
    #[serde(default)]
    pub ingested: bool,
}

/// `ingestBatch` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct IngestBatchParams {
    /// Physical session id.
    pub session_id: String,
    /// Routing key (host param).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// A completed turn.
    pub messages: Vec<AgentMessage>,
    /// Heartbeat run marker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_heartbeat: Option<bool>,
}

/// `ingestBatch` result.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct IngestBatchResult {
    /// How many messages were stored.
    #[serde(default, deserialize_with = "lenient_u64")]
    pub ingested_count: u64,
}

/// `bootstrap` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct BootstrapParams {
    /// Physical session id.
    pub session_id: String,
    /// Routing key (host param).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// Session identity (host param).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_target: Option<ContextEngineSessionTarget>,
    /// The host transcript file.
    pub session_file: String,
    /// Host param.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
    /// Host param.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_context: Option<ContextEngineRuntimeContext>,
}

/// `bootstrap` result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct BootstrapResult {
    /// Whether anything was imported or initialized.
    #[serde(default)]
    pub bootstrapped: bool,
    /// Messages imported from the transcript.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_opt_u64"
    )]
    pub imported_messages: Option<u64>,
    /// Why nothing happened, when nothing did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `assemble` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AssembleParams {
    /// Physical session id.
    pub session_id: String,
    /// Routing key (host param).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// Host-prepared history.
    pub messages: Vec<AgentMessage>,
    /// Token budget for the assembled context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    /// Tool names available in this run (a `Set<string>` in TypeScript; an array on the wire).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_tools: Option<Vec<String>>,
    /// Memory citations mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub citations_mode: Option<String>,
    /// Model id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The incoming user prompt (host param); absent when the caller has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Host param.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
    /// Host param (some shims pass it on assemble).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_context: Option<ContextEngineRuntimeContext>,
}

/// `promptAuthority`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum PromptAuthority {
    /// The overflow precheck uses the assembled estimate (skipped for owning engines).
    #[default]
    #[serde(rename = "assembled")]
    Assembled,
    /// The precheck stays on and uses max(assembled, pre-assembly history).
    #[serde(rename = "preassembly_may_overflow")]
    PreassemblyMayOverflow,
}

/// `contextProjection.mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum ContextProjectionMode {
    /// Project every turn.
    #[serde(rename = "per_turn")]
    PerTurn,
    /// Inject once per epoch into a persistent backend thread.
    #[serde(rename = "thread_bootstrap")]
    ThreadBootstrap,
}

/// `contextProjection`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ContextProjection {
    /// Projection mode.
    pub mode: ContextProjectionMode,
    /// Changes after the engine's own compaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<String>,
    /// Optional content fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
}

/// `assemble` result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AssembleResult {
    /// Exactly what the model receives, in order.
    pub messages: Vec<AgentMessage>,
    /// The engine's estimate; 0 means "caller estimates".
    #[serde(default, deserialize_with = "lenient_u64")]
    pub estimated_tokens: u64,
    /// Prepended to the run's system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt_addition: Option<String>,
    /// Overflow-precheck authority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_authority: Option<PromptAuthority>,
    /// Thread projection hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_projection: Option<ContextProjection>,
}

/// `compact.forceReason`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ForceReason {
    /// `/compact`.
    Manual,
    /// A preflight check requires compaction before the run.
    PreflightRequired,
}

/// `compact.preflightCompactionTrigger`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum PreflightCompactionTrigger {
    /// Token count over threshold.
    Tokens,
    /// Transcript file over its byte limit.
    TranscriptBytes,
}

/// `compact.compactionTarget`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum CompactionTarget {
    /// Get under the budget (overflow recovery).
    #[default]
    Budget,
    /// Get under the engine's threshold.
    Threshold,
}

/// `compact` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CompactParams {
    /// Physical session id.
    pub session_id: String,
    /// Routing key (projected like a host param).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// Caller-resolved owner agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Session identity (host param).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_target: Option<ContextEngineSessionTarget>,
    /// Deprecated G1/G2 file locator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_file: Option<String>,
    /// Token budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    /// Compact even below threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
    /// Why `force` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_reason: Option<ForceReason>,
    /// What tripped a preflight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight_compaction_trigger: Option<PreflightCompactionTrigger>,
    /// Current prompt tokens, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_token_count: Option<u64>,
    /// Budget (default) or threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction_target: Option<CompactionTarget>,
    /// Extra focus for the summary (`/compact <instructions>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_instructions: Option<String>,
    /// Host param.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
    /// Host param.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_context: Option<ContextEngineRuntimeContext>,
}

/// The nested `result` of a compaction.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CompactResultDetail {
    /// The summary text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// First transcript entry kept raw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_kept_entry_id: Option<String>,
    /// Tokens before compaction.
    #[serde(default, deserialize_with = "lenient_u64")]
    pub tokens_before: u64,
    /// Tokens after compaction.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_opt_u64"
    )]
    pub tokens_after: Option<u64>,
    /// Engine-specific details (file lists, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// Successor session id (duplicates `sessionTarget.sessionId`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Successor session identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_target: Option<ContextEngineSessionTarget>,
    /// Deprecated successor file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_file: Option<String>,
}

impl CompactResultDetail {
    /// The successor session id: `sessionTarget.sessionId ?? sessionId`.
    pub fn successor_session_id(&self) -> Option<&str> {
        self.session_target
            .as_ref()
            .and_then(|t| t.session_id.as_deref())
            .or(self.session_id.as_deref())
    }
}

/// `compact` result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CompactResult {
    /// False when compaction failed.
    #[serde(default)]
    pub ok: bool,
    /// Whether anything was compacted.
    #[serde(default)]
    pub compacted: bool,
    /// Why, when nothing was compacted or it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Details, when there is a result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<CompactResultDetail>,
}

/// `maintain` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct MaintainParams {
    /// Physical session id.
    pub session_id: String,
    /// Routing key (host param).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// Session identity (host param).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_target: Option<ContextEngineSessionTarget>,
    /// Host transcript file.
    pub session_file: String,
    /// Host param.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
    /// Host param.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_context: Option<ContextEngineRuntimeContext>,
}

/// `maintain` result, also the result of `rewriteTranscriptEntries`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TranscriptRewriteResult {
    /// Whether the transcript changed.
    #[serde(default)]
    pub changed: bool,
    /// Bytes saved by the replacements.
    #[serde(default, deserialize_with = "lenient_u64")]
    pub bytes_freed: u64,
    /// Number of entries replaced.
    #[serde(default, deserialize_with = "lenient_u64")]
    pub rewritten_entries: u64,
    /// Why nothing changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The contract's name for the maintain result.
pub type ContextEngineMaintenanceResult = TranscriptRewriteResult;

/// One replacement requested through `rewriteTranscriptEntries`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TranscriptReplacement {
    /// The message entry to replace.
    pub entry_id: String,
    /// Its new message.
    pub message: AgentMessage,
}

/// `rewriteTranscriptEntries` request.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TranscriptRewriteRequest {
    /// Replacements, applied on the active branch.
    #[serde(default)]
    pub replacements: Vec<TranscriptReplacement>,
    /// When set, must cover every active-branch entry from the first replacement on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_rewrite_suffix_entry_ids: Option<Vec<String>>,
}

/// `afterTurn` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AfterTurnParams {
    /// Physical session id.
    pub session_id: String,
    /// Routing key (host param).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// Session identity (host param).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_target: Option<ContextEngineSessionTarget>,
    /// Host transcript file.
    pub session_file: String,
    /// The full transcript view.
    pub messages: Vec<AgentMessage>,
    /// Messages that existed before the prompt was sent.
    pub pre_prompt_message_count: u64,
    /// Summary of a runtime auto-compaction during the turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_compaction_summary: Option<String>,
    /// Heartbeat run marker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_heartbeat: Option<bool>,
    /// Token budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    /// Current prompt tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_token_count: Option<u64>,
    /// Host param.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
    /// Host param.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_context: Option<ContextEngineRuntimeContext>,
}

/// An immutable pointer at one transcript entry (§1.7).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TranscriptEntryAnchor {
    /// Owning agent.
    pub agent_id: String,
    /// Session id.
    pub session_id: String,
    /// Session key.
    pub session_key: String,
    /// Store scope.
    pub store_path: String,
    /// Store generation.
    pub generation: Value,
    /// Entry id.
    pub entry_id: String,
    /// Raw sequence number.
    pub raw_seq: u64,
    /// Parent on the active branch (`null` at the root).
    pub effective_parent_id: Option<String>,
    /// Position among active messages.
    pub active_message_position: u64,
    /// Optional idempotency key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

/// The admitted user entry of a durable turn.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TranscriptTurnAdmission {
    /// The entry.
    #[serde(flatten)]
    pub anchor: TranscriptEntryAnchor,
    /// Logical turn id.
    pub logical_turn_id: String,
    /// Always `user`.
    pub role: String,
}

/// `commitTurn` params (G3).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CommitTurnParams {
    /// Idempotency key of this advancement.
    pub advancement_key: String,
    /// The admitted user entry.
    pub admission: TranscriptTurnAdmission,
    /// The accepted terminal entry.
    pub terminal: TranscriptEntryAnchor,
    /// Messages from the admitted user entry to the terminal entry, inclusive.
    pub messages: Vec<AgentMessage>,
    /// Session id.
    pub session_id: String,
    /// Routing key (host param).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// Host param.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_target: Option<ContextEngineSessionTarget>,
    /// Host param.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
    /// Host param.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_context: Option<ContextEngineRuntimeContext>,
    /// Heartbeat marker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_heartbeat: Option<bool>,
}

/// `commitTurn` status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum CommitTurnStatus {
    /// First write of this key.
    Committed,
    /// The key was already committed.
    Duplicate,
}

/// `commitTurn` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CommitTurnResult {
    /// Outcome.
    pub status: CommitTurnStatus,
}

/// Subagent context mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum SubagentContextMode {
    /// The child starts empty.
    Isolated,
    /// The child starts from a fork of the parent's active branch.
    Fork,
}

/// `prepareSubagentSpawn` params.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct PrepareSubagentSpawnParams {
    /// Parent routing key.
    pub parent_session_key: String,
    /// Child routing key (usually `agent:<id>:subagent:<uuid>`).
    pub child_session_key: String,
    /// Context mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_mode: Option<SubagentContextMode>,
    /// Parent session id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session_id: Option<String>,
    /// Parent transcript.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session_file: Option<String>,
    /// Child session id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_session_id: Option<String>,
    /// Child transcript.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_session_file: Option<String>,
    /// Child lifetime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}

/// Why a subagent ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum SubagentEndReason {
    /// Deleted by the user or host.
    Deleted,
    /// Finished its task.
    Completed,
    /// Swept after its TTL.
    Swept,
    /// Released without completion.
    Released,
}

/// `onSubagentEnded` params.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SubagentEndedParams {
    /// The child's routing key.
    pub child_session_key: String,
    /// Why it ended.
    pub reason: SubagentEndReason,
}
