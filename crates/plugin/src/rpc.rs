//! The JSON-RPC 2.0 client side of the plugin protocol (see `docs/plugin-protocol.md`).
//!
//! One JSON message per line over the child's stdio: requests and responses go both ways
//! (the plugin calls back into the host for `host/log` and `host/llm.complete`). A
//! [`Connection`] owns the process; a reader task routes responses to pending calls and serves
//! plugin→host requests. Anything that breaks the framing — a line that is not a JSON object,
//! a line over the size cap, EOF — fails every pending call with a message saying what
//! happened (EOF: `plugin process exited (code …): <stderr tail>`) and marks the connection
//! dead; a timed-out call kills the process, since a plugin that stopped answering is in an
//! unknown state.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use clawctx_engine::{CallContext, LlmCompleteRequest, RuntimeServices};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::oneshot;

use crate::error::PluginError;
use crate::process::{BoundedLineReader, LineError, PluginProcess, ProcessInfo, SpawnSpec};

/// The protocol version this host speaks.
pub const PROTOCOL_VERSION: u32 = 1;
/// Default cap on one message (one line): 16 MiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// JSON-RPC "method not found".
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC "invalid params".
pub const INVALID_PARAMS: i64 = -32602;
/// Application error (the engine threw).
pub const ENGINE_ERROR: i64 = -32000;

/// An engine a plugin registered, as the handshake reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineDecl {
    /// The registered engine id (the slot value).
    pub id: String,
    /// `info`, when known without running the factory (object-form registrations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<Value>,
    /// Method names, when known without running the factory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub methods: Option<Vec<String>>,
}

/// A tool a plugin registered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolDecl {
    /// Tool name.
    pub name: String,
    /// Description for the model.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments.
    #[serde(default)]
    pub parameters: Value,
}

/// The `initialize` result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    /// The runner's protocol version.
    #[serde(default)]
    pub protocol_version: Option<u32>,
    /// Registered engines.
    #[serde(default)]
    pub engines: Vec<EngineDecl>,
    /// Registered tools.
    #[serde(default)]
    pub tools: Vec<ToolDecl>,
    /// Runner name/version, free-form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<Value>,
}

struct Pending {
    tx: oneshot::Sender<Result<Value, PluginError>>,
    services: Option<Arc<dyn RuntimeServices>>,
}

/// Services used for plugin→host calls that cannot be tied to an in-flight call.
pub type SharedServices = Arc<RwLock<Option<Arc<dyn RuntimeServices>>>>;

struct Shared {
    plugin_id: String,
    stdin: tokio::sync::Mutex<ChildStdin>,
    pending: Mutex<HashMap<u64, Pending>>,
    dead: Mutex<Option<String>>,
    process: ProcessInfo,
    default_services: SharedServices,
}

impl Shared {
    fn dead_reason(&self) -> Option<String> {
        self.dead.lock().ok().and_then(|d| d.clone())
    }

    /// Marks the connection dead (first reason wins) and fails every pending call.
    fn fail(&self, reason: String) {
        if let Ok(mut d) = self.dead.lock() {
            if d.is_none() {
                *d = Some(reason);
            }
        }
        let reason = self.dead_reason().unwrap_or_default();
        let drained: Vec<Pending> = match self.pending.lock() {
            Ok(mut p) => p.drain().map(|(_, v)| v).collect(),
            Err(_) => Vec::new(),
        };
        for p in drained {
            let _ = p.tx.send(Err(PluginError::Dead(reason.clone())));
        }
    }

    async fn write(&self, msg: &Value) -> Result<(), std::io::Error> {
        let mut line = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut stdin = self.stdin.lock().await;
        stdin.write_all(&line).await?;
        stdin.flush().await
    }

    fn services_for(&self, call_id: Option<u64>) -> Option<Arc<dyn RuntimeServices>> {
        let pending = self.pending.lock().ok()?;
        let by_call = call_id
            .and_then(|id| pending.get(&id))
            .and_then(|p| p.services.clone());
        by_call
            .or_else(|| pending.values().find_map(|p| p.services.clone()))
            .or_else(|| self.default_services.read().ok().and_then(|s| s.clone()))
    }
}

/// A live connection to one plugin process. Dropping it kills the process.
pub struct Connection {
    shared: Arc<Shared>,
    process: PluginProcess,
    next_id: AtomicU64,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("plugin", &self.shared.plugin_id)
            .field("pid", &self.process.pid())
            .finish()
    }
}

impl Connection {
    /// Spawns the process and starts the reader (no handshake yet).
    pub fn spawn(
        spec: &SpawnSpec,
        max_message_bytes: usize,
        default_services: SharedServices,
    ) -> Result<Arc<Self>, PluginError> {
        let (process, stdin, stdout) = PluginProcess::spawn(spec)?;
        let shared = Arc::new(Shared {
            plugin_id: spec.plugin_id.clone(),
            stdin: tokio::sync::Mutex::new(stdin),
            pending: Mutex::new(HashMap::new()),
            dead: Mutex::new(None),
            process: process.info().clone(),
            default_services,
        });
        tokio::spawn(read_loop(shared.clone(), stdout, max_message_bytes));
        Ok(Arc::new(Connection {
            shared,
            process,
            next_id: AtomicU64::new(1),
        }))
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Why the connection is dead, if it is.
    pub fn dead_reason(&self) -> Option<String> {
        self.shared.dead_reason()
    }

    /// Whether calls can still be made.
    pub fn is_alive(&self) -> bool {
        self.dead_reason().is_none()
    }

    /// Kills the process and fails pending calls with `reason`.
    pub fn kill(&self, reason: String) {
        self.shared.fail(reason);
        self.process.info().kill();
    }

    /// Sends a request and waits for its response, at most `timeout`. The call context's
    /// services serve `host/llm.complete` callbacks made while it runs; its abort signal
    /// cancels it (`$/cancelRequest` is sent to the plugin).
    pub async fn call(
        &self,
        method: &str,
        params: Value,
        cx: Option<&CallContext>,
        timeout: Duration,
    ) -> Result<Value, PluginError> {
        if let Some(reason) = self.shared.dead_reason() {
            return Err(PluginError::Dead(reason));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = self.shared.pending.lock() {
            p.insert(
                id,
                Pending {
                    tx,
                    services: cx.and_then(|c| c.services.clone()),
                },
            );
        }
        if let Some(reason) = self.shared.dead_reason() {
            self.remove_pending(id);
            return Err(PluginError::Dead(reason));
        }
        let msg = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        let shared = self.shared.clone();
        let exchange = async move {
            // A write error means the process is going away: the reader reports why.
            if let Err(e) = shared.write(&msg).await {
                tracing::debug!(plugin = %shared.plugin_id, "write failed: {e}");
            }
            match rx.await {
                Ok(r) => r,
                Err(_) => Err(PluginError::Dead(
                    shared
                        .dead_reason()
                        .unwrap_or_else(|| "plugin connection closed".into()),
                )),
            }
        };
        let abort = cx.and_then(|c| c.abort.clone());
        let aborted = async {
            match &abort {
                Some(a) => a.aborted().await,
                None => futures::future::pending::<()>().await,
            }
        };
        tokio::select! {
            r = tokio::time::timeout(timeout, exchange) => match r {
                Ok(r) => r,
                Err(_) => {
                    self.remove_pending(id);
                    let err = PluginError::Timeout { method: method.to_owned(), timeout_ms: timeout.as_millis() as u64 };
                    self.kill(err.to_string());
                    Err(err)
                }
            },
            _ = aborted => {
                self.remove_pending(id);
                let _ = self.shared.write(&json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": id}})).await;
                let reason = abort.map(|a| a.reason()).unwrap_or_default();
                Err(PluginError::Aborted(reason))
            }
        }
    }

    /// Sends a notification (no response).
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), PluginError> {
        self.shared
            .write(&json!({ "jsonrpc": "2.0", "method": method, "params": params }))
            .await
            .map_err(|e| PluginError::Dead(format!("cannot write to plugin: {e}")))
    }

    fn remove_pending(&self, id: u64) {
        if let Ok(mut p) = self.shared.pending.lock() {
            p.remove(&id);
        }
    }
}

fn snippet(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(&line[..line.len().min(120)]).into_owned();
    if line.len() > 120 {
        format!("{text}…")
    } else {
        text
    }
}

async fn read_loop(shared: Arc<Shared>, stdout: ChildStdout, max: usize) {
    let mut reader =
        BoundedLineReader::new(tokio::io::BufReader::with_capacity(64 * 1024, stdout), max);
    loop {
        match reader.next_line().await {
            Ok(Some(line)) => {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                match serde_json::from_slice::<Value>(&line) {
                    Ok(Value::Object(map)) => dispatch(&shared, map).await,
                    _ => {
                        shared.fail(format!(
                            "protocol violation: plugin wrote a line to stdout that is not a JSON-RPC message: {}",
                            snippet(&line)
                        ));
                        shared.process.kill();
                        return;
                    }
                }
            }
            Ok(None) => {
                let status = shared.process.wait_exit(Duration::from_secs(2)).await;
                shared.fail(shared.process.exit_message(status));
                return;
            }
            Err(LineError::TooLong(n)) => {
                shared.fail(format!(
                    "protocol violation: plugin message exceeds the {n}-byte limit"
                ));
                shared.process.kill();
                return;
            }
            Err(LineError::Io(e)) => {
                shared.fail(format!("cannot read from plugin: {e}"));
                shared.process.kill();
                return;
            }
        }
    }
}

async fn dispatch(shared: &Arc<Shared>, map: serde_json::Map<String, Value>) {
    let id = map.get("id").filter(|v| !v.is_null()).cloned();
    if let Some(method) = map.get("method").and_then(Value::as_str) {
        let params = map.get("params").cloned().unwrap_or(Value::Null);
        match method {
            "host/log" => {
                let level = params
                    .get("level")
                    .and_then(Value::as_str)
                    .unwrap_or("info");
                let message = params.get("message").and_then(Value::as_str).unwrap_or("");
                let plugin = shared.plugin_id.as_str();
                match level {
                    "error" => tracing::error!(plugin, "{message}"),
                    "warn" => tracing::warn!(plugin, "{message}"),
                    "debug" => tracing::debug!(plugin, "{message}"),
                    _ => tracing::info!(plugin, "{message}"),
                }
                if let Some(id) = id {
                    let _ = shared
                        .write(&json!({"jsonrpc": "2.0", "id": id, "result": null}))
                        .await;
                }
            }
            "host/llm.complete" => {
                let Some(id) = id else { return };
                let shared = shared.clone();
                tokio::spawn(async move {
                    let call_id = params.get("callId").and_then(Value::as_u64);
                    let reply = match serde_json::from_value::<LlmCompleteRequest>(
                        params.get("request").cloned().unwrap_or(Value::Null),
                    ) {
                        Err(e) => {
                            json!({"jsonrpc": "2.0", "id": id, "error": {"code": INVALID_PARAMS, "message": format!("invalid llm.complete request: {e}")}})
                        }
                        Ok(request) => match shared.services_for(call_id) {
                            None => {
                                json!({"jsonrpc": "2.0", "id": id, "error": {"code": ENGINE_ERROR, "message": "runtime LLM completion is not available on this host"}})
                            }
                            Some(services) => match services.llm_complete(request).await {
                                Ok(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
                                Err(e) => {
                                    json!({"jsonrpc": "2.0", "id": id, "error": {"code": ENGINE_ERROR, "message": e.to_string()}})
                                }
                            },
                        },
                    };
                    let _ = shared.write(&reply).await;
                });
            }
            other => {
                if let Some(id) = id {
                    let _ = shared
                        .write(&json!({"jsonrpc": "2.0", "id": id, "error": {"code": METHOD_NOT_FOUND, "message": format!("host method not found: {other}")}}))
                        .await;
                }
            }
        }
        return;
    }
    let Some(id) = id.as_ref().and_then(Value::as_u64) else {
        return;
    };
    let pending = shared.pending.lock().ok().and_then(|mut p| p.remove(&id));
    let Some(pending) = pending else { return };
    let outcome = match map.get("error") {
        Some(err) if !err.is_null() => Err(PluginError::Remote {
            code: err
                .get("code")
                .and_then(Value::as_i64)
                .unwrap_or(ENGINE_ERROR),
            message: err
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| format!("plugin returned an error: {err}")),
            data: err.get("data").cloned(),
        }),
        _ => Ok(map.get("result").cloned().unwrap_or(Value::Null)),
    };
    let _ = pending.tx.send(outcome);
}
