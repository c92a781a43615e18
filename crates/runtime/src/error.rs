//! The one error type at the runtime's boundary.
//!
//! A turn can fail for reasons that need very different reactions from whoever drives the
//! runtime (a CLI, a gateway, a test): a host that cannot run the selected engine must not be
//! retried, a provider failure can be retried on the next turn, a malformed transcript needs a
//! human. Each variant says which.

use clawctx_engine::EngineError;
use clawctx_model::ModelError;
use clawctx_transcript::TranscriptError;

/// Errors of the agent runtime.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The selected engine requires host capabilities this host lacks (contract §5). The text
    /// is the exact assertion message. Do not retry: select a compatible engine or host.
    #[error("{0}")]
    HostRequirement(String),

    /// No model is selected at all. Pass `--model provider/model`, set
    /// `agents.defaults.model.primary`, or set the `OPENAI_*` environment variables.
    #[error(
        "no model selected: pass --model provider/model, set `agents.defaults.model.primary` in the config \
         (providers live under `models.providers.<id>`), or set OPENAI_BASE_URL and OPENAI_MODEL"
    )]
    NoModel,

    /// The model or backend configuration is wrong. Fix the named config key.
    #[error("config error at `{key}`: {message}")]
    Config {
        /// The config key at fault.
        key: String,
        /// What is wrong.
        message: String,
    },

    /// The model provider failed this turn (its own words are in the message). The user message
    /// stays in the transcript; the next turn may be retried.
    #[error("model call failed: {0}")]
    Provider(ModelError),

    /// The context engine failed in a way the turn cannot continue from (assemble, compact,
    /// a subagent hook). Check the engine (`clawctx doctor`) or select `legacy`.
    #[error("context engine \"{engine}\" failed in {method}: {source}")]
    Engine {
        /// Engine id.
        engine: String,
        /// Lifecycle method.
        method: &'static str,
        /// The engine's error.
        #[source]
        source: EngineError,
    },

    /// The transcript or the sessions map could not be read or written. A `Malformed` cause
    /// names `file:line` and needs a human; I/O and lock timeouts can be retried.
    #[error(transparent)]
    Transcript(#[from] TranscriptError),

    /// The turn was cancelled (Ctrl-C, shutdown). The transcript is valid; nothing to do.
    #[error("turn aborted: {0}")]
    Aborted(String),

    /// A subagent could not be spawned. The spawn is rolled back; fix the cause and retry.
    #[error("subagent spawn failed: {0}")]
    Spawn(String),

    /// A CLI backend process failed (could not start, non-zero exit). Check its command.
    #[error("CLI backend \"{backend}\" failed: {message}")]
    CliBackend {
        /// Backend id.
        backend: String,
        /// What happened, with the process's stderr.
        message: String,
    },

    /// A recorded conversation for `replay` is not in a supported shape. Displays as
    /// `file:line: what was expected`.
    #[error("{path}:{line}: {expected}")]
    Recording {
        /// The recording file.
        path: String,
        /// 1-based line.
        line: usize,
        /// What was expected there.
        expected: String,
    },

    /// A caller's tool results (or tools) do not fit the session: a result for no open call,
    /// an open call without a result, results already answered, a tool named like one of the
    /// agent's own. `index` is the result's position in `TurnRequest::tool_results` when one
    /// is at fault. Nothing was stored; fix the request.
    #[error("{message}")]
    ToolResults {
        /// The result at fault.
        index: Option<usize>,
        /// What does not fit.
        message: String,
    },

    /// An internal invariant broke (a poisoned lock after a panic elsewhere). Restart the
    /// process.
    #[error("internal runtime error: {0}")]
    Internal(String),
}

impl RuntimeError {
    pub(crate) fn engine(engine: &str, method: &'static str, source: EngineError) -> Self {
        match source {
            EngineError::HostRequirement(text) => RuntimeError::HostRequirement(text),
            EngineError::Aborted { reason } => RuntimeError::Aborted(reason),
            source => RuntimeError::Engine {
                engine: engine.to_owned(),
                method,
                source,
            },
        }
    }

    pub(crate) fn model_config(e: ModelError) -> Self {
        match e {
            ModelError::Config { key, message } => RuntimeError::Config { key, message },
            other => RuntimeError::Provider(other),
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
