//! Building a runtime from an OpenClaw-shaped config: the engine through the registry's slot
//! selection, the backend through model selection, compaction settings from
//! `agents.defaults.compaction`, the system prompt from `agents.defaults.systemPrompt`, and the
//! summarizer compaction uses ([`host_summarizer`]): an LLM whenever a model is configured
//! (`agents.defaults.compaction.model`, else the agent's own model), the extractive one
//! otherwise.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clawctx_engine::compaction::CompactionSettings;
use clawctx_engine::{AgentTool, ContextEngineRegistry, HookDispatcher, SelectionReason};
use clawctx_model::config::EnvLookup;
use clawctx_model::{CircuitBreaker, LlmSummarizer, ModelsConfig, SpendGuard};
use clawctx_protocol::SelectionSource;
use clawctx_summarize::{ExtractiveSummarizer, FallbackSummarizer, Summarizer};
use serde::Serialize;
use serde_json::Value;

use crate::error::{Result, RuntimeError};
use crate::model::{select_backend, Backend, DEFAULT_MAX_OUTPUT_TOKENS};
use crate::runtime::AgentRuntime;

/// The config key naming a separate summary model (`provider/model`, resolved like
/// `agents.defaults.model.primary`). Unset: summaries use the agent's own model.
pub const COMPACTION_MODEL_KEY: &str = "agents.defaults.compaction.model";

/// Summarizer tokens (input + output) one process may spend per [`SUMMARIZER_SPEND_WINDOW`];
/// past it, compaction summarizes extractively until the window moves on.
pub const SUMMARIZER_SPEND_TOKENS: u64 = 2_000_000;
/// The spend guard's sliding window.
pub const SUMMARIZER_SPEND_WINDOW: Duration = Duration::from_secs(3600);
/// Consecutive auth/unavailable failures that open the summarizer's circuit breaker.
pub const SUMMARIZER_BREAKER_THRESHOLD: u32 = 3;
/// How long an open breaker refuses calls before it lets one probe through.
pub const SUMMARIZER_BREAKER_COOLDOWN: Duration = Duration::from_secs(600);

/// Where the summarizer's circuit breaker keeps its state, so an open breaker stays open
/// across `clawctx run` invocations.
pub fn summarizer_breaker_path(state_dir: &Path) -> PathBuf {
    state_dir.join("runtime").join("summarizer-breaker.json")
}

/// Where an LLM summarizer's model was configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SummaryModelSource {
    /// The agent's own model (the selected backend).
    AgentModel,
    /// [`COMPACTION_MODEL_KEY`].
    CompactionModel,
}

/// Why compaction summarizes extractively.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ExtractiveReason {
    /// No model at all (no `--model`, no `agents.defaults.model`, no `OPENAI_*`).
    NoModel,
    /// The agent runs on a CLI backend, which is no model provider.
    CliBackend,
}

/// Which summarizer compaction uses, and why (for logs and `doctor`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum SummarizerChoice {
    /// An LLM summarizer, behind a spend guard and a circuit breaker; the extractive summarizer
    /// stands in whenever it fails.
    Llm {
        /// `provider/model`.
        model: String,
        /// Where it was configured.
        source: SummaryModelSource,
    },
    /// The deterministic extractive summarizer.
    Extractive {
        /// Why no LLM.
        reason: ExtractiveReason,
    },
}

impl std::fmt::Display for SummarizerChoice {
    /// `llm openai/gpt-x (agent model)`, `llm local/small (agents.defaults.compaction.model)`,
    /// `extractive (no model configured)`, `extractive (cli backend)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SummarizerChoice::Llm {
                model,
                source: SummaryModelSource::AgentModel,
            } => {
                write!(f, "llm {model} (agent model)")
            }
            SummarizerChoice::Llm {
                model,
                source: SummaryModelSource::CompactionModel,
            } => {
                write!(f, "llm {model} ({COMPACTION_MODEL_KEY})")
            }
            SummarizerChoice::Extractive {
                reason: ExtractiveReason::NoModel,
            } => f.write_str("extractive (no model configured)"),
            SummarizerChoice::Extractive {
                reason: ExtractiveReason::CliBackend,
            } => f.write_str("extractive (cli backend)"),
        }
    }
}

/// The summarizer the host offers compaction: the choice and, for an LLM, the summarizer.
#[derive(Clone)]
pub struct HostSummarizer {
    /// What was chosen and why.
    pub choice: SummarizerChoice,
    /// The guarded LLM summarizer when [`SummarizerChoice::Llm`]. It fails when the model
    /// does: engines with their own fallback (the lossless engine) call it directly.
    pub llm: Option<Arc<dyn Summarizer>>,
}

impl std::fmt::Debug for HostSummarizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostSummarizer")
            .field("choice", &self.choice)
            .finish_non_exhaustive()
    }
}

impl HostSummarizer {
    /// The summarizer of the runtime's built-in compaction: the LLM with the extractive
    /// summarizer behind it ([`FallbackSummarizer`]), or the extractive one alone.
    pub fn for_runtime(&self) -> Arc<dyn Summarizer> {
        match &self.llm {
            Some(llm) => Arc::new(FallbackSummarizer::new(llm.clone())),
            None => Arc::new(ExtractiveSummarizer),
        }
    }
}

/// The model ref at [`COMPACTION_MODEL_KEY`], if set. A value that is not a string is an error
/// naming the key.
fn compaction_model_ref(config: &Value) -> Result<Option<String>> {
    match config.pointer("/agents/defaults/compaction/model") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.trim().to_owned())),
        Some(other) => Err(RuntimeError::Config {
            key: COMPACTION_MODEL_KEY.into(),
            message: format!("must be a model ref string like \"provider/model\"; found {other}"),
        }),
    }
}

/// Chooses compaction's summarizer: the model at [`COMPACTION_MODEL_KEY`] when set, else the
/// agent's own model when `backend` is a model provider, else the extractive summarizer (no
/// model, or a CLI backend). An LLM summarizer gets a spend guard
/// ([`SUMMARIZER_SPEND_TOKENS`] per [`SUMMARIZER_SPEND_WINDOW`]), a circuit breaker persisted at
/// [`summarizer_breaker_path`], and never asks for more output than the model's `maxTokens`.
/// A summary model that does not resolve is an error naming [`COMPACTION_MODEL_KEY`].
pub fn host_summarizer(
    config: &Value,
    backend: Option<&Backend>,
    env: EnvLookup<'_>,
    state_dir: &Path,
) -> Result<HostSummarizer> {
    let (llm, model, source) = if let Some(model_ref) = compaction_model_ref(config)? {
        let at_key = |message: String| RuntimeError::Config {
            key: COMPACTION_MODEL_KEY.into(),
            message,
        };
        let provider_part = model_ref
            .split_once('/')
            .map_or(model_ref.as_str(), |(p, _)| p);
        if config
            .pointer(&format!("/agents/defaults/cliBackends/{provider_part}"))
            .is_some()
        {
            return Err(at_key(format!(
                "\"{model_ref}\" names the CLI backend `{provider_part}`, which cannot write summaries; name a model of models.providers"
            )));
        }
        let models = ModelsConfig::from_config(config, env).map_err(|e| at_key(e.to_string()))?;
        let resolved = models
            .resolve(&model_ref)
            .map_err(|e| at_key(format!("\"{model_ref}\": {e}")))?;
        let provider = resolved
            .provider
            .build_for(Some(&resolved.model))
            .map_err(|e| at_key(e.to_string()))?;
        let max_output = resolved
            .model
            .max_tokens
            .unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS);
        let name = format!("{}/{}", resolved.provider.id, resolved.model.id);
        (
            LlmSummarizer::new(provider, &resolved.model.id).with_max_output_tokens(max_output),
            name,
            SummaryModelSource::CompactionModel,
        )
    } else {
        match backend {
            Some(Backend::Model(b)) => (
                LlmSummarizer::new(b.provider.clone(), &b.model_id)
                    .with_max_output_tokens(b.max_output_tokens),
                b.resolved_ref(),
                SummaryModelSource::AgentModel,
            ),
            Some(Backend::Cli(_)) => {
                return Ok(HostSummarizer {
                    choice: SummarizerChoice::Extractive {
                        reason: ExtractiveReason::CliBackend,
                    },
                    llm: None,
                })
            }
            None => {
                return Ok(HostSummarizer {
                    choice: SummarizerChoice::Extractive {
                        reason: ExtractiveReason::NoModel,
                    },
                    llm: None,
                })
            }
        }
    };
    let llm = llm
        .with_spend_guard(Arc::new(SpendGuard::new(
            SUMMARIZER_SPEND_TOKENS,
            SUMMARIZER_SPEND_WINDOW,
        )))
        .with_circuit_breaker(Arc::new(CircuitBreaker::with_state_file(
            SUMMARIZER_BREAKER_THRESHOLD,
            SUMMARIZER_BREAKER_COOLDOWN,
            summarizer_breaker_path(state_dir),
        )));
    Ok(HostSummarizer {
        choice: SummarizerChoice::Llm { model, source },
        llm: Some(Arc::new(llm)),
    })
}

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

/// The `runtimeSettings` fallback reason of a resolution: the configured engine could not be
/// used (missing, or its factory or contract failed: quarantined at resolution) and the default
/// serves instead. A plugin switched off by policy is not a fallback: the default is what the
/// policy asks for.
pub fn fallback_reason(reason: &SelectionReason) -> Option<String> {
    matches!(reason, SelectionReason::Quarantined { .. }).then(|| "runtime_unavailable".to_owned())
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
    /// Plugin hook handlers (`clawctx_plugin::PluginHooks`), fired by every turn.
    pub hooks: Option<Arc<dyn HookDispatcher>>,
    /// Tools offered besides the selected engine's own (plugins' `registerTool` tools).
    pub tools: Vec<Arc<dyn AgentTool>>,
    /// Build the runtime even when no model is selected, on [`Backend::unconfigured`] (a
    /// gateway serving the engine API needs none); the summarizer is then the extractive one.
    pub model_optional: bool,
}

/// Selects the backend, the summarizer and the engine and builds the runtime. With no model at
/// all this fails with [`RuntimeError::NoModel`], naming the config keys, unless
/// `model_optional` is set.
///
/// The summarizer ([`host_summarizer`]) serves the runtime's built-in compaction (with the
/// extractive summarizer behind it) and is offered to the engines `opts.registry` builds from
/// now on ([`ContextEngineRegistry::set_host_summarizer`]), so the lossless engine summarizes
/// with the same model.
pub async fn runtime_from_config(opts: SetupOptions<'_>) -> Result<AgentRuntime> {
    let backend: Backend = match select_backend(&opts.config, opts.model.as_deref(), opts.env) {
        Err(RuntimeError::NoModel) if opts.model_optional => Backend::unconfigured(),
        other => other?,
    };
    let summarizer = host_summarizer(
        &opts.config,
        Some(&backend).filter(|b| !b.is_unconfigured()),
        opts.env,
        &opts.state_dir,
    )?;
    tracing::debug!("compaction summarizer: {}", summarizer.choice);
    opts.registry.set_host_summarizer(summarizer.llm.clone());
    let agent_dir = opts.state_dir.join("agents").join(&opts.agent_id);
    let resolved = opts
        .registry
        .resolve(
            Some(opts.config.clone()),
            Some(agent_dir.clone()),
            Some(agent_dir.clone()),
        )
        .await
        .map_err(|e| RuntimeError::engine("(selection)", "resolve", e))?;
    let system = opts
        .config
        .pointer("/agents/defaults/systemPrompt")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut builder = AgentRuntime::builder(&opts.state_dir, resolved.engine.clone(), backend)
        .selection(
            resolved.effective_id.clone(),
            selection_source(&resolved.reason),
        )
        .fallback_reason(fallback_reason(&resolved.reason))
        .compaction(compaction_settings(&opts.config))
        .summarizer(summarizer.for_runtime())
        .workspace_dir(agent_dir.to_string_lossy().into_owned());
    if let Some(s) = system {
        builder = builder.system_prompt(s);
    }
    if let Some(hooks) = opts.hooks {
        builder = builder.hooks(hooks);
    }
    for tool in opts.tools {
        builder = builder.tool(tool);
    }
    Ok(builder.build())
}
