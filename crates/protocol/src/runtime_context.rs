//! `ContextEngineRuntimeContext` and `ContextEngineSessionTarget` (contract §1.4, §1.5).
//!
//! The runtime context is an open record: the host puts its compaction-runtime bag in it, so
//! unknown keys are kept. The callable members (`rewriteTranscriptEntries`, `llm.complete`) are
//! not data; in-process they travel beside the params (see `clawctx-engine`'s `CallContext`), and
//! out of process they are JSON-RPC callbacks.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::JsonMap;

/// Storage-neutral session identity.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ContextEngineSessionTarget {
    /// Owning agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Physical session id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Routing key (`agent:<id>:...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// Store scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_path: Option<String>,
    /// Thread id (string or number on the wire).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<Value>,
}

impl ContextEngineSessionTarget {
    /// Whether no field is set (`{}`).
    pub fn is_empty(&self) -> bool {
        self.agent_id.is_none()
            && self.session_id.is_none()
            && self.session_key.is_none()
            && self.store_path.is_none()
            && self.thread_id.is_none()
    }
}

/// The usage the provider reported for the last call, for prompt-cache telemetry.
pub type PromptCacheInfo = Value;

/// `runtimeContext`: an open record with these known optional keys.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ContextEngineRuntimeContext {
    /// The runtime task working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// The agent bootstrap workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_dir: Option<String>,
    /// True only for background maintenance runs allowed to pay deferred compaction debt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_deferred_compaction_execution: Option<bool>,
    /// Context window budget for the active model call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    /// Selected harness id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_harness_id: Option<String>,
    /// Best-effort current prompt token estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_token_count: Option<f64>,
    /// Caller agent id (compaction runtime bag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Caller session key (compaction runtime bag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// Caller session target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_target: Option<ContextEngineSessionTarget>,
    /// Legacy file locator (never forwarded by the compaction delegate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_file: Option<String>,
    /// Prompt-cache telemetry, kept as received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_cache: Option<PromptCacheInfo>,
    /// `{kind: "sqlite"}` in G3 hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript_storage: Option<Value>,
    /// Everything else the host put here.
    #[serde(flatten)]
    pub extra: JsonMap,
}
