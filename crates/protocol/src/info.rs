//! `ContextEngineInfo` and the host-capability vocabulary (contract §1.1, §5).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::JsonMap;

/// An operation the host checks requirements for before starting it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum ContextEngineOperation {
    /// A model run of an agent.
    #[serde(rename = "agent-run")]
    AgentRun,
    /// `/compact` or an explicit compaction request.
    #[serde(rename = "manual-compact")]
    ManualCompact,
    /// A subagent spawn.
    #[serde(rename = "subagent-spawn")]
    SubagentSpawn,
}

impl ContextEngineOperation {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AgentRun => "agent-run",
            Self::ManualCompact => "manual-compact",
            Self::SubagentSpawn => "subagent-spawn",
        }
    }
}

/// A host capability name. Unknown strings are accepted (hosts advertise values such as
/// `reference-context` that are not in the type union), so this is a string newtype with
/// constants for the known values.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(transparent)]
pub struct HostCapability(pub String);

impl HostCapability {
    /// `bootstrap`.
    pub const BOOTSTRAP: &'static str = "bootstrap";
    /// `assemble-before-prompt`: the engine controls the actual model prompt via assemble().
    pub const ASSEMBLE_BEFORE_PROMPT: &'static str = "assemble-before-prompt";
    /// `after-turn`.
    pub const AFTER_TURN: &'static str = "after-turn";
    /// `maintain`.
    pub const MAINTAIN: &'static str = "maintain";
    /// `compact`.
    pub const COMPACT: &'static str = "compact";
    /// `runtime-llm-complete`: the host offers `llm.complete` to the engine.
    pub const RUNTIME_LLM_COMPLETE: &'static str = "runtime-llm-complete";
    /// `thread-bootstrap-projection`.
    pub const THREAD_BOOTSTRAP_PROJECTION: &'static str = "thread-bootstrap-projection";
    /// `reference-context` (advertised by hosts, not in the engine-side union).
    pub const REFERENCE_CONTEXT: &'static str = "reference-context";

    /// A capability from its name.
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for HostCapability {
    fn from(s: &str) -> Self {
        Self(s.to_owned())
    }
}

/// What an engine needs from the host for one operation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ContextEngineHostRequirements {
    /// Capabilities the host must advertise.
    #[serde(default)]
    pub required_capabilities: Vec<HostCapability>,
    /// Text appended to the error when the host falls short.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsupported_message: Option<String>,
}

/// `turnMaintenanceMode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum TurnMaintenanceMode {
    /// Inline: the reply waits for maintain().
    #[default]
    Foreground,
    /// Deferred: scheduled per session key, coalesced, the reply does not wait.
    Background,
}

/// G3 durable-turn declaration (§1.7).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TranscriptSemantics {
    /// `before-current-turn-entry-v1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_turn_fence: Option<String>,
    /// `atomic-idempotent-v1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_advancement_idempotency: Option<String>,
}

impl TranscriptSemantics {
    /// The only fence value the contract defines.
    pub const FENCE_V1: &'static str = "before-current-turn-entry-v1";
    /// The only idempotency value the contract defines.
    pub const IDEMPOTENCY_V1: &'static str = "atomic-idempotent-v1";

    /// Whether both halves of the declaration are present with their v1 values.
    pub fn is_full(&self) -> bool {
        self.current_turn_fence.as_deref() == Some(Self::FENCE_V1)
            && self.turn_advancement_idempotency.as_deref() == Some(Self::IDEMPOTENCY_V1)
    }
}

/// The host-added parameter keys (§1.6), in the order the contract lists them.
pub const HOST_PARAM_KEYS: [&str; 6] = [
    "sessionKey",
    "prompt",
    "runtimeSettings",
    "sessionTarget",
    "runtimeContext",
    "abortSignal",
];

/// `info`: an engine's self-description.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ContextEngineInfo {
    /// The engine's own id (metadata; may differ from the registered slot id).
    pub id: String,
    /// Display name.
    pub name: String,
    /// Free-form version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Whether the engine owns compaction (unset = false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owns_compaction: Option<bool>,
    /// Maintenance mode (unset = foreground).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_maintenance_mode: Option<TurnMaintenanceMode>,
    /// Host capability requirements per operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_requirements: Option<BTreeMap<ContextEngineOperation, ContextEngineHostRequirements>>,
    /// Host params the engine accepts; `None` = all, `[]` = none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_host_params: Option<Vec<String>>,
    /// Durable-turn opt-in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript_semantics: Option<TranscriptSemantics>,
    /// Fields this type does not name.
    #[serde(flatten)]
    pub extra: JsonMap,
}

impl ContextEngineInfo {
    /// Info with an id and a name and nothing else.
    pub fn new(id: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    /// `ownsCompaction`, unset meaning false.
    pub fn owns_compaction(&self) -> bool {
        self.owns_compaction.unwrap_or(false)
    }

    /// `turnMaintenanceMode`, unset meaning foreground.
    pub fn maintenance_mode(&self) -> TurnMaintenanceMode {
        self.turn_maintenance_mode.unwrap_or_default()
    }

    /// Whether the engine accepts the host param `key` (`acceptedHostParams` unset = all).
    pub fn accepts_host_param(&self, key: &str) -> bool {
        match &self.accepted_host_params {
            None => true,
            Some(list) => list.iter().any(|k| k == key),
        }
    }
}

/// A host descriptor: who is calling the engine and what it can do (§5).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct HostDescriptor {
    /// e.g. `openclaw-embedded`, `cli:<backendId>`.
    pub id: String,
    /// e.g. `OpenClaw embedded runner`, `CLI backend "<backendId>"`.
    pub label: String,
    /// What the host offers.
    pub capabilities: Vec<HostCapability>,
}

impl HostDescriptor {
    /// Whether the host advertises `cap`.
    pub fn has(&self, cap: &str) -> bool {
        self.capabilities.iter().any(|c| c.0 == cap)
    }
}
