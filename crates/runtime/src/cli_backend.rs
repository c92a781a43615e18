//! The generic CLI backend host (contract §5): a configured command that answers a prompt and
//! keeps its own conversation history.
//!
//! Config: `agents.defaults.cliBackends.<id> = { command, args?, input?: "stdin" | "arg",
//! capabilities?, timeoutMs? }`. The host id is `cli:<id>`; its capabilities default to
//! bootstrap, after-turn and maintain — notably not `assemble-before-prompt`, so an engine that
//! must control the prompt is rejected before the process starts. Because the backend keeps its
//! own thread, the assembled context is *projected* into the instructions sent with the prompt:
//! every turn for `per_turn` projection, once per epoch for `thread_bootstrap` (§1.3).

use std::process::Stdio;
use std::time::Duration;

use clawctx_engine::host::cli_backend_host;
use clawctx_engine::AbortSignal;
use clawctx_protocol::{AgentMessage, HostDescriptor};
use serde_json::Value;
use tokio::io::AsyncWriteExt;

use crate::error::{Result, RuntimeError};

/// How the prompt reaches the backend process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromptInput {
    /// Written to its stdin (the default).
    Stdin,
    /// Passed as an argument: replaces a `{prompt}` placeholder in `args`, else appended.
    Argument,
}

/// One configured CLI backend.
#[derive(Clone, Debug, PartialEq)]
pub struct CliBackendSpec {
    /// Backend id (`agents.defaults.cliBackends.<id>`).
    pub id: String,
    /// Program to run.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// How the prompt is passed.
    pub input: PromptInput,
    /// Capability override (default: bootstrap, after-turn, maintain).
    pub capabilities: Option<Vec<String>>,
    /// How long one call may take.
    pub timeout: Duration,
}

fn key(id: &str, field: &str) -> String {
    format!("agents.defaults.cliBackends.{id}.{field}")
}

impl CliBackendSpec {
    /// Reads `agents.defaults.cliBackends.<id>`; errors name the key.
    pub fn from_config(config: &Value, id: &str) -> Result<Self> {
        let spec = config
            .pointer(&format!("/agents/defaults/cliBackends/{id}"))
            .ok_or_else(|| RuntimeError::Config {
                key: format!("agents.defaults.cliBackends.{id}"),
                message: "no such CLI backend".into(),
            })?;
        let command = spec
            .get("command")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| RuntimeError::Config {
                key: key(id, "command"),
                message: "must be a non-empty string".into(),
            })?
            .to_owned();
        let args = match spec.get("args") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| RuntimeError::Config {
                            key: key(id, "args"),
                            message: format!("every argument must be a string, got {v}"),
                        })
                })
                .collect::<Result<_>>()?,
            Some(other) => {
                return Err(RuntimeError::Config {
                    key: key(id, "args"),
                    message: format!("must be an array, got {other}"),
                })
            }
        };
        let input = match spec.get("input").and_then(Value::as_str) {
            None | Some("stdin") => PromptInput::Stdin,
            Some("arg") | Some("argument") => PromptInput::Argument,
            Some(other) => {
                return Err(RuntimeError::Config {
                    key: key(id, "input"),
                    message: format!("must be \"stdin\" or \"arg\", got {other:?}"),
                })
            }
        };
        let capabilities = spec.get("capabilities").and_then(Value::as_array).map(|a| {
            a.iter()
                .filter_map(|c| c.as_str().map(str::to_owned))
                .collect()
        });
        let timeout = Duration::from_millis(
            spec.get("timeoutMs")
                .and_then(Value::as_u64)
                .unwrap_or(600_000),
        );
        Ok(Self {
            id: id.to_owned(),
            command,
            args,
            input,
            capabilities,
            timeout,
        })
    }

    /// The host descriptor (`cli:<id>`, `CLI backend "<id>"`).
    pub fn host(&self) -> HostDescriptor {
        cli_backend_host(&self.id, self.capabilities.clone())
    }

    /// Runs the backend once with `prompt`; returns its stdout (trimmed). The session key and
    /// id are in the environment (`CLAWCTX_SESSION_KEY`, `CLAWCTX_SESSION_ID`) so the backend
    /// can keep one thread per session.
    pub async fn invoke(
        &self,
        prompt: &str,
        session_key: &str,
        session_id: &str,
        abort: &AbortSignal,
    ) -> Result<String> {
        let fail = |message: String| RuntimeError::CliBackend {
            backend: self.id.clone(),
            message,
        };
        let mut args = self.args.clone();
        if self.input == PromptInput::Argument {
            if let Some(slot) = args.iter_mut().find(|a| a.contains("{prompt}")) {
                *slot = slot.replace("{prompt}", prompt);
            } else {
                args.push(prompt.to_owned());
            }
        }
        let mut child = tokio::process::Command::new(&self.command)
            .args(&args)
            .env("CLAWCTX_SESSION_KEY", session_key)
            .env("CLAWCTX_SESSION_ID", session_id)
            .stdin(if self.input == PromptInput::Stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| fail(format!("cannot start `{}`: {e}", self.command)))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(prompt.as_bytes())
                .await
                .map_err(|e| fail(format!("cannot write the prompt: {e}")))?;
            drop(stdin);
        }
        let output = tokio::select! {
            out = child.wait_with_output() => out.map_err(|e| fail(format!("waiting for the process: {e}")))?,
            _ = abort.aborted() => return Err(RuntimeError::Aborted(abort.reason())),
            _ = tokio::time::sleep(self.timeout) => return Err(fail(format!("no answer within {} ms", self.timeout.as_millis()))),
        };
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            return Err(fail(format!(
                "exited with {}: {}",
                output.status,
                stderr.trim()
            )));
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }
}

/// Renders assembled messages as plain text for a backend's instructions.
pub fn render_context(messages: &[AgentMessage]) -> String {
    let mut out = String::new();
    for m in messages {
        let m = clawctx_protocol::transcript::to_model_message(m);
        let text = m.plain_text();
        if text.trim().is_empty() {
            continue;
        }
        out.push_str(m.role());
        out.push_str(": ");
        out.push_str(text.trim());
        out.push('\n');
    }
    out
}

/// The instructions block that projects `system` and the assembled context into a backend
/// thread, followed by the prompt.
pub fn project_prompt(system: &str, context: &[AgentMessage], prompt: &str) -> String {
    let rendered = render_context(context);
    let mut out = String::new();
    out.push_str("<instructions>\n");
    out.push_str(system.trim());
    out.push_str("\n</instructions>\n");
    if !rendered.is_empty() {
        out.push_str("<conversation_context>\n");
        out.push_str(&rendered);
        out.push_str("</conversation_context>\n");
    }
    out.push('\n');
    out.push_str(prompt);
    out
}
