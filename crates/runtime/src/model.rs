//! Which model (or CLI backend) a run talks to, and how big its window is.
//!
//! Selection order (the CLI's contract): `--model provider/model`, else
//! `agents.defaults.model.primary` (or a plain string `agents.defaults.model`), else the
//! `OPENAI_*` environment fallback of `clawctx-model`. A ref whose provider part names an entry
//! of `agents.defaults.cliBackends` selects that CLI backend instead of an HTTP provider. Every
//! error names the config key to fix.

use std::sync::Arc;

use clawctx_model::config::EnvLookup;
use clawctx_model::{ModelProvider, ModelsConfig};
use serde_json::Value;

use crate::cli_backend::CliBackendSpec;
use crate::error::{Result, RuntimeError};

/// Context window assumed when the model config does not give one.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;
/// Output limit assumed when the model config does not give one.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u64 = 4_096;

/// A model the embedded runtime calls: the provider plus the facts the budget needs.
#[derive(Clone, Debug)]
pub struct ModelBinding {
    /// The provider.
    pub provider: Arc<dyn ModelProvider>,
    /// What the user asked for (`--model` or the config ref), if anything.
    pub requested: Option<String>,
    /// Provider id (`models.providers.<id>`).
    pub provider_id: String,
    /// Model id at the provider.
    pub model_id: String,
    /// Context window in tokens.
    pub context_window: u64,
    /// Output limit in tokens (also sent as the request's max output).
    pub max_output_tokens: u64,
}

impl ModelBinding {
    /// A binding with explicit limits (tests, replay).
    pub fn new(
        provider: Arc<dyn ModelProvider>,
        model_id: &str,
        context_window: u64,
        max_output_tokens: u64,
    ) -> Self {
        Self {
            provider_id: provider.id().to_owned(),
            provider,
            requested: None,
            model_id: model_id.to_owned(),
            context_window,
            max_output_tokens,
        }
    }

    /// `provider/model`.
    pub fn resolved_ref(&self) -> String {
        format!("{}/{}", self.provider_id, self.model_id)
    }
}

/// What a run executes on.
#[derive(Clone, Debug)]
pub enum Backend {
    /// The embedded runner calling a model provider.
    Model(ModelBinding),
    /// A configured CLI backend process that keeps its own history.
    Cli(CliBackendSpec),
}

/// Provider id of [`Backend::unconfigured`].
pub const NO_MODEL_PROVIDER: &str = "none";

/// The provider of a host that runs without a model: a `clawctx gateway` serving only the
/// engine API (a bridge user's model is OpenClaw's, not the gateway's). Every call fails with a
/// config error naming the keys to set; a host should refuse model work before it gets here.
#[derive(Debug)]
pub struct UnconfiguredModel;

#[async_trait::async_trait]
impl ModelProvider for UnconfiguredModel {
    fn id(&self) -> &str {
        NO_MODEL_PROVIDER
    }

    fn api(&self) -> &str {
        NO_MODEL_PROVIDER
    }

    async fn complete(
        &self,
        _request: clawctx_model::CompletionRequest,
        _events: Option<&clawctx_model::EventSender>,
        _cancel: &tokio_util::sync::CancellationToken,
    ) -> std::result::Result<clawctx_model::Completion, clawctx_model::ModelError> {
        Err(clawctx_model::ModelError::config(
            "agents.defaults.model.primary",
            "no model is configured: set it (providers live under `models.providers.<id>`), \
             pass --model provider/model, or set OPENAI_BASE_URL and OPENAI_MODEL",
        ))
    }
}

impl Backend {
    /// The backend of a host without a model ([`UnconfiguredModel`]), with the default limits.
    pub fn unconfigured() -> Backend {
        Backend::Model(ModelBinding::new(
            Arc::new(UnconfiguredModel),
            NO_MODEL_PROVIDER,
            DEFAULT_CONTEXT_WINDOW,
            DEFAULT_MAX_OUTPUT_TOKENS,
        ))
    }

    /// Whether this is [`Backend::unconfigured`].
    pub fn is_unconfigured(&self) -> bool {
        matches!(self, Backend::Model(b) if b.provider.api() == NO_MODEL_PROVIDER)
    }
}

/// The model ref configured in `agents.defaults.model` (`.primary`, or the plain string).
pub fn configured_model_ref(config: &Value) -> Option<String> {
    match config.pointer("/agents/defaults/model") {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Some(Value::Object(m)) => m
            .get("primary")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
        _ => None,
    }
}

/// Selects the backend for a run: `cli_model`, else the configured ref, else the environment
/// fallback. Fails with [`RuntimeError::NoModel`] when nothing is selected and with
/// [`RuntimeError::Config`] naming the key when the ref does not resolve.
pub fn select_backend(
    config: &Value,
    cli_model: Option<&str>,
    env: EnvLookup<'_>,
) -> Result<Backend> {
    let models = ModelsConfig::from_config(config, env).map_err(RuntimeError::model_config)?;
    let requested = cli_model
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .or_else(|| configured_model_ref(config))
        .or_else(|| models.default_model.clone())
        .ok_or(RuntimeError::NoModel)?;
    if let Some((backend_id, _)) = requested.split_once('/') {
        if config
            .pointer(&format!("/agents/defaults/cliBackends/{backend_id}"))
            .is_some()
        {
            return Ok(Backend::Cli(CliBackendSpec::from_config(
                config, backend_id,
            )?));
        }
    } else if config
        .pointer(&format!("/agents/defaults/cliBackends/{requested}"))
        .is_some()
    {
        return Ok(Backend::Cli(CliBackendSpec::from_config(
            config, &requested,
        )?));
    }
    let resolved = models
        .resolve(&requested)
        .map_err(RuntimeError::model_config)?;
    let provider = resolved
        .provider
        .build_for(Some(&resolved.model))
        .map_err(RuntimeError::model_config)?;
    Ok(Backend::Model(ModelBinding {
        provider,
        requested: Some(requested),
        provider_id: resolved.provider.id.clone(),
        model_id: resolved.model.id.clone(),
        context_window: resolved
            .model
            .context_window
            .unwrap_or(DEFAULT_CONTEXT_WINDOW),
        max_output_tokens: resolved
            .model
            .max_tokens
            .unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS),
    }))
}
