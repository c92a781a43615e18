//! The `runtimeSettings` v1 builder and its normalization rules (contract §6).
//!
//! Inputs are whatever the host happens to know; the builder turns them into the strict v1
//! shape: strings trimmed (blank → null), numbers finite (else null), reason strings folded into
//! the reason-code enum, and `runtime.mode` derived when not given.

use clawctx_protocol::*;

/// What the host knows when it builds runtime settings. All optional.
#[derive(Clone, Debug, Default)]
pub struct RuntimeSettingsInput {
    /// Explicit mode (wins over derivation).
    pub mode: Option<RuntimeMode>,
    /// Harness id.
    pub harness_id: Option<String>,
    /// Runtime id.
    pub runtime_id: Option<String>,
    /// Requested model.
    pub requested_model: Option<String>,
    /// Resolved model.
    pub resolved_model: Option<String>,
    /// Provider.
    pub provider: Option<String>,
    /// Model family.
    pub family: Option<String>,
    /// Selected engine id.
    pub selected_id: Option<String>,
    /// Selection source (defaults: configured when an id is set, else unknown).
    pub source: Option<SelectionSource>,
    /// The execution host.
    pub host: Option<HostDescriptor>,
    /// Prompt token budget.
    pub prompt_token_budget: Option<f64>,
    /// Max output tokens.
    pub max_output_tokens: Option<f64>,
    /// Free-form fallback reason.
    pub fallback_reason: Option<String>,
    /// Free-form degraded reason.
    pub degraded_reason: Option<String>,
}

fn norm_str(s: &Option<String>) -> Option<String> {
    s.as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

fn norm_num(n: Option<f64>) -> Option<f64> {
    n.filter(|f| f.is_finite())
}

/// Folds a free-form reason into a [`ReasonCode`] (exact value kept; then substring rules in
/// the contract's order).
pub fn normalize_reason(reason: &str) -> Option<ReasonCode> {
    let r = reason.trim();
    if r.is_empty() {
        return None;
    }
    let exact = match r {
        "provider_timeout" => Some(ReasonCode::ProviderTimeout),
        "provider_unavailable" => Some(ReasonCode::ProviderUnavailable),
        "rate_limited" => Some(ReasonCode::RateLimited),
        "context_overflow" => Some(ReasonCode::ContextOverflow),
        "runtime_unavailable" => Some(ReasonCode::RuntimeUnavailable),
        "unknown" => Some(ReasonCode::Unknown),
        _ => None,
    };
    if exact.is_some() {
        return exact;
    }
    let l = r.to_ascii_lowercase();
    let has = |needles: &[&str]| needles.iter().any(|n| l.contains(n));
    Some(if has(&["timeout"]) {
        ReasonCode::ProviderTimeout
    } else if has(&["rate", "limit", "429"]) {
        ReasonCode::RateLimited
    } else if has(&["overflow", "context", "pressure"]) {
        ReasonCode::ContextOverflow
    } else if has(&["runtime"]) {
        ReasonCode::RuntimeUnavailable
    } else if has(&["provider", "primary", "unavailable"]) {
        ReasonCode::ProviderUnavailable
    } else {
        ReasonCode::Unknown
    })
}

/// `buildContextEngineRuntimeSettings`.
pub fn build_runtime_settings(input: &RuntimeSettingsInput) -> RuntimeSettings {
    let requested = norm_str(&input.requested_model);
    let resolved = norm_str(&input.resolved_model);
    let fallback_reason = input.fallback_reason.as_deref().and_then(normalize_reason);
    let degraded_reason = input.degraded_reason.as_deref().and_then(normalize_reason);
    let mode = input.mode.unwrap_or({
        if degraded_reason.is_some() {
            RuntimeMode::Degraded
        } else if fallback_reason.is_some()
            || matches!((&requested, &resolved), (Some(a), Some(b)) if a != b)
        {
            RuntimeMode::Fallback
        } else {
            RuntimeMode::Normal
        }
    });
    let selected_id = norm_str(&input.selected_id);
    let source = input.source.unwrap_or(if selected_id.is_some() {
        SelectionSource::Configured
    } else {
        SelectionSource::Unknown
    });
    RuntimeSettings {
        schema_version: 1,
        runtime: RuntimeBlock {
            host: "openclaw".into(),
            mode,
            harness_id: norm_str(&input.harness_id),
            runtime_id: norm_str(&input.runtime_id),
        },
        model: ModelBlock {
            requested,
            resolved,
            provider: norm_str(&input.provider),
            family: norm_str(&input.family),
        },
        context_engine_selection: SelectionBlock {
            selected_id,
            source,
        },
        execution_host: ExecutionHostBlock {
            id: input
                .host
                .as_ref()
                .and_then(|h| norm_str(&Some(h.id.clone()))),
            label: input
                .host
                .as_ref()
                .and_then(|h| norm_str(&Some(h.label.clone()))),
        },
        limits: LimitsBlock {
            prompt_token_budget: norm_num(input.prompt_token_budget),
            max_output_tokens: norm_num(input.max_output_tokens),
        },
        diagnostics: DiagnosticsBlock {
            fallback_reason,
            degraded_reason,
        },
    }
}
