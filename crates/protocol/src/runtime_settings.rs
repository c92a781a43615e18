//! `runtimeSettings` schema v1 (contract §6): the read-only snapshot the host hands the
//! selected engine. Unknown values are `null`, never absent; the discriminators are never null.
//! The builder with the normalization rules lives in `clawctx-engine` (`runtime_settings`).

use serde::{Deserialize, Serialize};

/// `runtime.mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum RuntimeMode {
    /// Everything as requested.
    #[default]
    Normal,
    /// A fallback is in effect (model, provider).
    Fallback,
    /// Running degraded.
    Degraded,
}

/// `contextEngineSelection.source`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum SelectionSource {
    /// Chosen by config.
    Configured,
    /// The default engine.
    Default,
    /// Unknown.
    #[default]
    Unknown,
}

/// Normalized fallback/degradation reason codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ReasonCode {
    /// `provider_timeout`.
    ProviderTimeout,
    /// `provider_unavailable`.
    ProviderUnavailable,
    /// `rate_limited`.
    RateLimited,
    /// `context_overflow`.
    ContextOverflow,
    /// `runtime_unavailable`.
    RuntimeUnavailable,
    /// `unknown`.
    Unknown,
}

/// `runtime` block.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RuntimeBlock {
    /// Always `openclaw`.
    pub host: String,
    /// Mode.
    pub mode: RuntimeMode,
    /// Harness id, or null.
    pub harness_id: Option<String>,
    /// Runtime id, or null.
    pub runtime_id: Option<String>,
}

/// `model` block.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ModelBlock {
    /// Requested model.
    pub requested: Option<String>,
    /// Resolved model.
    pub resolved: Option<String>,
    /// Provider.
    pub provider: Option<String>,
    /// Model family.
    pub family: Option<String>,
}

/// `contextEngineSelection` block.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SelectionBlock {
    /// Selected engine id, or null.
    pub selected_id: Option<String>,
    /// Where the selection came from.
    pub source: SelectionSource,
}

/// `executionHost` block.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ExecutionHostBlock {
    /// Host id, or null.
    pub id: Option<String>,
    /// Host label, or null.
    pub label: Option<String>,
}

/// `limits` block.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct LimitsBlock {
    /// Prompt token budget, or null.
    pub prompt_token_budget: Option<f64>,
    /// Max output tokens, or null.
    pub max_output_tokens: Option<f64>,
}

/// `diagnostics` block.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DiagnosticsBlock {
    /// Why a fallback is in effect, or null.
    pub fallback_reason: Option<ReasonCode>,
    /// Why the run is degraded, or null.
    pub degraded_reason: Option<ReasonCode>,
}

/// `runtimeSettings` v1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RuntimeSettings {
    /// Always 1.
    pub schema_version: u32,
    /// Runtime block.
    pub runtime: RuntimeBlock,
    /// Model block.
    pub model: ModelBlock,
    /// Selection block.
    pub context_engine_selection: SelectionBlock,
    /// Execution host block.
    pub execution_host: ExecutionHostBlock,
    /// Limits block.
    pub limits: LimitsBlock,
    /// Diagnostics block.
    pub diagnostics: DiagnosticsBlock,
}
