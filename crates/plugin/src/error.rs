//! The plugin boundary's error type.
//!
//! Variants say what went wrong and so what the caller can do: a bad manifest or plugin config
//! is the operator's to fix (the message names the file and key, or the config path); a dead,
//! hung or misbehaving process is the plugin's fault and becomes an [`EngineError::Failed`]
//! that the quarantine guard turns into a fallback to `legacy`; an abort is the caller's own.

use std::path::PathBuf;

use clawctx_engine::EngineError;
use serde_json::Value;

/// An error crossing the plugin boundary.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PluginError {
    /// The manifest (or `package.json`) is missing, unreadable or wrong. Fix the file.
    #[error("{}: `{key}`: {message}", file.display())]
    Manifest {
        /// The file that is wrong.
        file: PathBuf,
        /// The key that is wrong (`(file)` for the whole file).
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// `plugins.entries.<id>.config` does not match the plugin's `configSchema`. Fix the config.
    #[error("invalid config at {path}: {message}")]
    ConfigInvalid {
        /// The plugin.
        plugin_id: String,
        /// The failing config path, e.g. `plugins.entries.my-engine.config.maxMessages`.
        path: String,
        /// Why it fails.
        message: String,
    },
    /// Install, link, uninstall or index problems.
    #[error("{0}")]
    Install(String),
    /// No installed plugin with that id.
    #[error("plugin \"{0}\" is not installed")]
    NotInstalled(String),
    /// The plugin process could not be started (missing `node`/`python3`, bad command, ...).
    #[error("failed to start plugin \"{plugin_id}\": {message}")]
    Spawn {
        /// The plugin.
        plugin_id: String,
        /// Why.
        message: String,
    },
    /// The plugin process is gone, or broke the protocol and was killed. The next call
    /// restarts it (after a backoff).
    #[error("{0}")]
    Dead(String),
    /// A call did not answer in time; the process was killed.
    #[error("plugin \"{plugin_id}\" did not answer `{method}`: timed out after {timeout_ms} ms; the process was killed")]
    Timeout {
        /// The plugin.
        plugin_id: String,
        /// The JSON-RPC method.
        method: String,
        /// The timeout.
        timeout_ms: u64,
    },
    /// The plugin stopped reading its input: what the host had to write (a request, the
    /// notice that a call is no longer wanted, an answer to a plugin→host request) could not
    /// be written within its limit, so the pipe stayed full. The process was killed. (The
    /// message avoids the words the guard reads as the caller's own abort: this is the
    /// plugin's failure even when the caller gave up first.)
    #[error("plugin \"{plugin_id}\" stopped reading its input: the host could not write {what} within {limit_ms} ms; the process was killed")]
    StoppedReading {
        /// The plugin.
        plugin_id: String,
        /// The JSON-RPC method of the call (or of the plugin→host request answered).
        method: String,
        /// What could not be written, naming the method.
        what: String,
        /// How long the host waited for the pipe.
        limit_ms: u64,
    },
    /// The plugin answered with a JSON-RPC error object (the engine threw).
    #[error("{message}")]
    Remote {
        /// JSON-RPC error code.
        code: i64,
        /// The engine's error message.
        message: String,
        /// `error.data`, when sent.
        data: Option<Value>,
    },
    /// The caller aborted the call.
    #[error("{0}")]
    Aborted(String),
    /// The host could not encode a request's params (a host-side bug, not the plugin's).
    #[error("cannot encode the params of `{method}`: {message}")]
    Encode {
        /// The JSON-RPC method.
        method: String,
        /// The serializer's message.
        message: String,
    },
    /// The plugin's answer does not have the shape or keep the invariants the contract
    /// requires (the message starts with `contract violation:`).
    #[error("{0}")]
    Contract(String),
    /// The plugin process started but the plugin did not load: its entry (or a module it
    /// imports) failed, its `register(api)` threw, or it exited while loading. Carries the
    /// kind, the module at fault, its stderr tail and a suggested fix.
    #[error("{0}")]
    Load(Box<crate::load_error::LoadError>),
}

impl PluginError {
    pub(crate) fn manifest(
        file: impl Into<PathBuf>,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        PluginError::Manifest {
            file: file.into(),
            key: key.into(),
            message: message.into(),
        }
    }

    /// What the operator can do about this error, when there is something to say: the fix of
    /// a [`PluginError::Load`], the file and key to change for a manifest error. Shown by
    /// `clawctx doctor` under the error.
    pub fn suggested_fix(&self) -> Option<String> {
        match self {
            PluginError::Load(load) => load.fix.clone(),
            PluginError::Manifest { file, key, message } => {
                let dir = file
                    .parent()
                    .map(|d| d.display().to_string())
                    .unwrap_or_default();
                Some(if key == "configSchema" && message.contains("requires configSchema") {
                    format!(
                        "add {} to {} (or the JSON Schema of the plugin's settings); OpenClaw requires it too",
                        crate::manifest::EMPTY_CONFIG_SCHEMA,
                        file.display()
                    )
                } else if message.contains("not found") {
                    format!(
                        "the entry file is missing: build the plugin (e.g. `npm install && npm run build`) in {dir}, or fix `{key}` in {}",
                        file.display()
                    )
                } else {
                    format!("fix `{key}` in {}", file.display())
                })
            }
            PluginError::ConfigInvalid { path, .. } => Some(format!(
                "fix {path} in the config (`clawctx config set`), or remove it to use the plugin's defaults"
            )),
            _ => None,
        }
    }

    /// Whether the remote error is a factory contract failure (`error.data.kind == "contract"`).
    pub fn is_remote_contract(&self) -> bool {
        matches!(self, PluginError::Remote { data: Some(d), .. } if d.get("kind").and_then(Value::as_str) == Some("contract"))
    }
}

impl From<PluginError> for EngineError {
    fn from(err: PluginError) -> Self {
        match err {
            PluginError::Aborted(reason) => EngineError::Aborted { reason },
            e if e.is_remote_contract() => EngineError::Contract(e.to_string()),
            e => EngineError::Failed(e.to_string()),
        }
    }
}
