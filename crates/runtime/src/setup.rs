//! Building a runtime from an OpenClaw-shaped config: the engine through the registry's slot
//! selection, the backend through model selection, compaction settings from
//! `agents.defaults.compaction`, the system prompt from `agents.defaults.systemPrompt`.

use std::path::PathBuf;
use std::sync::Arc;

use clawctx_engine::compaction::CompactionSettings;
use clawctx_engine::{ContextEngineRegistry, SelectionReason};
use clawctx_model::config::EnvLookup;
use clawctx_protocol::SelectionSource;
use serde_json::Value;

use crate::error::{Result, RuntimeError};
use crate::model::{select_backend, Backend};
use crate::runtime::AgentRuntime;

/// Reads `agents.defaults.compaction.{enabled, reserveTokens, keepRecentTokens,
/// reserveTokensFloor}` over the §7.4 defaults.
pub fn compaction_settings(config: &Value) -> CompactionSettings {
    let mut s = CompactionSettings::default();
    if let Some(c) = config.pointer("/agents/defaults/compaction") {
        let num = |k: &str| c.get(k).and_then(Value::as_u64);
        if let Some(b) = c.get("enabled").and_then(Value::as_bool) {
            s.enabled = b;
        }
        if let Some(n) = num("reserveTokens") {
            s.reserve_tokens = n;
        }
        if let Some(n) = num("keepRecentTokens") {
            s.keep_recent_tokens = n;
        }
        if let Some(n) = num("reserveTokensFloor") {
            s.reserve_tokens_floor = n;
        }
    }
    s
}

/// The `runtimeSettings` selection source for a resolution reason.
pub fn selection_source(reason: &SelectionReason) -> SelectionSource {
    match reason {
        SelectionReason::SlotUnset => SelectionSource::Default,
        SelectionReason::Configured | SelectionReason::SlotIsDefault => SelectionSource::Configured,
        _ => SelectionSource::Default,
    }
}

/// Inputs of [`runtime_from_config`].
pub struct SetupOptions<'a> {
    /// The whole parsed config.
    pub config: Arc<Value>,
    /// State directory.
    pub state_dir: PathBuf,
    /// Engines known to this build.
    pub registry: Arc<ContextEngineRegistry>,
    /// `--model`, if given.
    pub model: Option<String>,
    /// Environment lookup (the `OPENAI_*` fallback and API keys).
    pub env: EnvLookup<'a>,
    /// The agent whose directory the engine gets (`<state>/agents/<id>`).
    pub agent_id: String,
}

/// Selects the backend and the engine and builds the runtime. With no model at all this fails
/// with [`RuntimeError::NoModel`], naming the config keys.
pub async fn runtime_from_config(opts: SetupOptions<'_>) -> Result<AgentRuntime> {
    let backend: Backend = select_backend(&opts.config, opts.model.as_deref(), opts.env)?;
    let agent_dir = opts.state_dir.join("agents").join(&opts.agent_id);
    let resolved = opts
        .registry
        .resolve(Some(opts.config.clone()), Some(agent_dir.clone()), Some(agent_dir.clone()))
        .await
        .map_err(|e| RuntimeError::engine("(selection)", "resolve", e))?;
    let system = opts
        .config
        .pointer("/agents/defaults/systemPrompt")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut builder = AgentRuntime::builder(&opts.state_dir, resolved.engine.clone(), backend)
        .selection(resolved.effective_id.clone(), selection_source(&resolved.reason))
        .compaction(compaction_settings(&opts.config))
        .workspace_dir(agent_dir.to_string_lossy().into_owned());
    if let Some(s) = system {
        builder = builder.system_prompt(s);
    }
    Ok(builder.build())
}
