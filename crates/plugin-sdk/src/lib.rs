//! Write a clawctx context-engine plugin in Rust.
//!
//! Implement [`clawctx_engine::ContextEngine`], register a factory for it on a [`Plugin`], and
//! call [`serve`] from `main`: the binary then speaks the clawctx plugin protocol (JSON-RPC
//! 2.0, one message per line on stdio, `docs/plugin-protocol.md`) and can be installed with a
//! manifest whose `command` runs it. Runtime services reach the host over the same channel:
//! the [`CallContext`] each method receives has services whose `llm_complete` is a
//! `host/llm.complete` callback. An engine whose [`ContextEngine::is_runtime_compaction_delegate`]
//! is true answers `compact` with the delegation marker, so the host runs its own compaction.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use clawctx_engine::{factory, ContextEngine};
//! # fn make() -> Arc<dyn ContextEngine> { unimplemented!() }
//! #[tokio::main]
//! async fn main() -> Result<(), clawctx_plugin_sdk::SdkError> {
//!     let plugin = clawctx_plugin_sdk::Plugin::new().engine("my-engine", factory(|_ctx| async { Ok(make()) }));
//!     clawctx_plugin_sdk::serve(plugin).await
//! }
//! ```

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use clawctx_engine::{
    AbortController, AgentTool, CallContext, ContextEngine, EngineError, Factory, FactoryContext,
    LlmCompleteRequest, LlmCompleteResult, Method, RuntimeServices, SubagentSpawnPreparation,
    ToolCallContext,
};
use clawctx_protocol::*;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};

/// The protocol version this SDK speaks.
pub const PROTOCOL_VERSION: u32 = 1;
/// The compact-result key of the runtime-delegation marker.
pub const MARKER_KEY: &str = "__clawctx";

/// Errors of the serving loop itself (engine errors go back to the host as JSON-RPC errors).
#[derive(Debug, thiserror::Error)]
pub enum SdkError {
    /// Reading stdin or writing stdout failed: the host is gone.
    #[error("plugin stdio failed: {0}")]
    Io(#[from] std::io::Error),
}

/// A plugin: engine factories and tools, by id.
#[derive(Default, Clone)]
pub struct Plugin {
    engines: Vec<(String, Factory)>,
    tools: Vec<Arc<dyn AgentTool>>,
}

impl Plugin {
    /// An empty plugin.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers an engine factory under `id` (`api.registerContextEngine(id, factory)`).
    pub fn engine(mut self, id: impl Into<String>, factory: Factory) -> Self {
        self.engines.push((id.into(), factory));
        self
    }

    /// Registers a tool (`api.registerTool`).
    pub fn tool(mut self, tool: Arc<dyn AgentTool>) -> Self {
        self.tools.push(tool);
        self
    }
}

type Pending = Arc<Mutex<HashMap<String, oneshot::Sender<Result<Value, String>>>>>;

struct Server {
    plugin: Plugin,
    out: mpsc::UnboundedSender<Value>,
    instances: Mutex<HashMap<String, Arc<dyn ContextEngine>>>,
    rollbacks: Mutex<HashMap<String, SubagentSpawnPreparation>>,
    aborts: Mutex<HashMap<String, AbortController>>,
    host_pending: Pending,
    next: AtomicU64,
}

/// `RuntimeServices` whose LLM completions and transcript rewrites are host callbacks
/// (`host/llm.complete`, `host/rewriteTranscriptEntries`).
struct HostServices {
    out: mpsc::UnboundedSender<Value>,
    pending: Pending,
    next: Arc<AtomicU64>,
    call_id: Value,
}

impl HostServices {
    /// One plugin→host request; the host's answer or its error message.
    async fn host_request(&self, method: &str, request: Value) -> Result<Value, EngineError> {
        let id = format!("plugin-{}", self.next.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = self.pending.lock() {
            p.insert(id.clone(), tx);
        }
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"request": request, "callId": self.call_id}});
        self.out
            .send(msg)
            .map_err(|_| EngineError::failed("host connection closed"))?;
        rx.await
            .map_err(|_| EngineError::failed("host connection closed"))?
            .map_err(EngineError::Failed)
    }
}

#[async_trait]
impl RuntimeServices for HostServices {
    async fn llm_complete(
        &self,
        request: LlmCompleteRequest,
    ) -> Result<LlmCompleteResult, EngineError> {
        let request = serde_json::to_value(request).map_err(|e| {
            EngineError::failed(format!("cannot encode the llm.complete request: {e}"))
        })?;
        let value = self.host_request("host/llm.complete", request).await?;
        serde_json::from_value(value)
            .map_err(|e| EngineError::failed(format!("invalid llm.complete result: {e}")))
    }

    async fn rewrite_transcript_entries(
        &self,
        request: TranscriptRewriteRequest,
    ) -> TranscriptRewriteResult {
        let unchanged = |reason: String| TranscriptRewriteResult {
            reason: Some(reason),
            ..Default::default()
        };
        let request = match serde_json::to_value(request) {
            Ok(r) => r,
            Err(e) => return unchanged(format!("cannot encode the rewrite request: {e}")),
        };
        match self
            .host_request("host/rewriteTranscriptEntries", request)
            .await
        {
            Ok(value) => serde_json::from_value(value).unwrap_or_else(|e| {
                unchanged(format!("invalid rewriteTranscriptEntries result: {e}"))
            }),
            Err(e) => unchanged(e.to_string()),
        }
    }
}

fn rpc_error(message: String, kind: Option<&str>) -> Value {
    json!({"code": -32000, "message": message, "data": {"kind": kind}})
}

fn decode<P: DeserializeOwned>(params: &Value) -> Result<P, Value> {
    serde_json::from_value(params.get("params").cloned().unwrap_or(Value::Null))
        .map_err(|e| json!({"code": -32602, "message": format!("invalid params: {e}")}))
}

fn encode<T: Serialize>(r: Result<T, EngineError>) -> Result<Value, Value> {
    match r {
        Ok(v) => serde_json::to_value(v).map_err(|e| rpc_error(e.to_string(), None)),
        Err(e) => Err(rpc_error(e.to_string(), None)),
    }
}

impl Server {
    fn instance(&self, params: &Value) -> Result<Arc<dyn ContextEngine>, Value> {
        let id = params
            .get("instanceId")
            .and_then(Value::as_str)
            .unwrap_or_default();
        self.instances
            .lock()
            .ok()
            .and_then(|i| i.get(id).cloned())
            .ok_or_else(|| rpc_error(format!("unknown engine instance {id}"), None))
    }

    fn services(&self, call_id: &Value) -> Arc<dyn RuntimeServices> {
        Arc::new(HostServices {
            out: self.out.clone(),
            pending: self.host_pending.clone(),
            next: Arc::new(AtomicU64::new(self.next.fetch_add(1000, Ordering::Relaxed))),
            call_id: call_id.clone(),
        })
    }

    async fn handle(&self, id: &Value, method: &str, params: Value) -> Result<Value, Value> {
        match method {
            "initialize" => {
                let tools: Vec<Value> = self
                    .plugin
                    .tools
                    .iter()
                    .map(|t| json!({"name": t.name(), "description": t.description(), "parameters": t.parameters()}))
                    .collect();
                let engines: Vec<Value> = self
                    .plugin
                    .engines
                    .iter()
                    .map(|(id, _)| json!({"id": id}))
                    .collect();
                Ok(json!({
                    "protocolVersion": PROTOCOL_VERSION,
                    "runner": {"name": "clawctx-plugin-sdk", "version": env!("CARGO_PKG_VERSION")},
                    "engines": engines,
                    "tools": tools,
                }))
            }
            "engine/create" => {
                let engine_id = params
                    .get("engineId")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let factory = self
                    .plugin
                    .engines
                    .iter()
                    .find(|(id, _)| id == engine_id)
                    .map(|(_, f)| f.clone());
                let Some(factory) = factory else {
                    return Err(rpc_error(
                        format!("Context engine \"{engine_id}\" is not registered by this plugin"),
                        None,
                    ));
                };
                let fc = params.get("factoryContext").cloned().unwrap_or(Value::Null);
                let path = |k: &str| fc.get(k).and_then(Value::as_str).map(PathBuf::from);
                let ctx = FactoryContext {
                    config: fc
                        .get("config")
                        .filter(|c| !c.is_null())
                        .cloned()
                        .map(Arc::new),
                    agent_dir: path("agentDir"),
                    workspace_dir: path("workspaceDir"),
                    ..Default::default()
                };
                let engine = factory(ctx)
                    .await
                    .map_err(|e| rpc_error(e.to_string(), None))?;
                let instance_id = format!("{}", self.next.fetch_add(1, Ordering::Relaxed));
                let info = serde_json::to_value(engine.info())
                    .map_err(|e| rpc_error(e.to_string(), None))?;
                let methods: Vec<&str> = engine.methods().iter().map(Method::name).collect();
                if let Ok(mut i) = self.instances.lock() {
                    i.insert(instance_id.clone(), engine);
                }
                Ok(json!({"instanceId": instance_id, "info": info, "methods": methods}))
            }
            "engine/rollback" => {
                let rid = params
                    .get("rollbackId")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let prep = self.rollbacks.lock().ok().and_then(|mut r| r.remove(&rid));
                let prep =
                    prep.ok_or_else(|| rpc_error(format!("unknown rollback id {rid}"), None))?;
                prep.rollback()
                    .await
                    .map_err(|e| rpc_error(e.to_string(), None))?;
                Ok(Value::Null)
            }
            "engine/dispose" => {
                let id = params
                    .get("instanceId")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let engine = self.instances.lock().ok().and_then(|mut i| i.remove(id));
                if let Some(engine) = engine {
                    engine
                        .dispose()
                        .await
                        .map_err(|e| rpc_error(e.to_string(), None))?;
                }
                Ok(Value::Null)
            }
            "tool/execute" => {
                let name = params
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let tool = self.plugin.tools.iter().find(|t| t.name() == name).cloned();
                let tool =
                    tool.ok_or_else(|| rpc_error(format!("unknown tool \"{name}\""), None))?;
                let ctx = params.get("context").cloned().unwrap_or(Value::Null);
                let tcx = ToolCallContext {
                    session_id: ctx
                        .get("sessionId")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    session_key: ctx
                        .get("sessionKey")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    tool_call_id: ctx
                        .get("toolCallId")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                };
                let args = params.get("arguments").cloned().unwrap_or(Value::Null);
                Ok(match tool.execute(args, tcx).await {
                    Ok(text) => json!({"content": [{"type": "text", "text": text}]}),
                    Err(text) => {
                        json!({"content": [{"type": "text", "text": text}], "isError": true})
                    }
                })
            }
            "shutdown" => Ok(Value::Null),
            m => match m.strip_prefix("engine/").and_then(Method::from_name) {
                Some(method) => self.call_engine(id, method, &params).await,
                None => Err(json!({"code": -32601, "message": format!("method not found: {m}")})),
            },
        }
    }

    async fn call_engine(
        &self,
        id: &Value,
        method: Method,
        params: &Value,
    ) -> Result<Value, Value> {
        let engine = self.instance(params)?;
        let mut cx = CallContext::none().with_services(self.services(id));
        let key = id.to_string();
        if params.get("abortable").and_then(Value::as_bool) == Some(true) {
            let controller = AbortController::new();
            cx = cx.with_abort(controller.signal());
            if let Ok(mut a) = self.aborts.lock() {
                a.insert(key.clone(), controller);
            }
        }
        let e = engine.as_ref();
        let out = match method {
            Method::Ingest => encode(e.ingest(&decode::<IngestParams>(params)?, &cx).await),
            Method::Assemble => encode(e.assemble(&decode::<AssembleParams>(params)?, &cx).await),
            Method::Compact => {
                if e.is_runtime_compaction_delegate() {
                    Ok(
                        json!({"ok": true, "compacted": false, "reason": "delegated-to-runtime", MARKER_KEY: {"delegateCompaction": true}}),
                    )
                } else {
                    encode(e.compact(&decode::<CompactParams>(params)?, &cx).await)
                }
            }
            Method::IngestBatch => encode(
                e.ingest_batch(&decode::<IngestBatchParams>(params)?, &cx)
                    .await,
            ),
            Method::Bootstrap => {
                encode(e.bootstrap(&decode::<BootstrapParams>(params)?, &cx).await)
            }
            Method::Maintain => encode(e.maintain(&decode::<MaintainParams>(params)?, &cx).await),
            Method::AfterTurn => {
                encode(e.after_turn(&decode::<AfterTurnParams>(params)?, &cx).await)
            }
            Method::CommitTurn => encode(
                e.commit_turn(&decode::<CommitTurnParams>(params)?, &cx)
                    .await,
            ),
            Method::OnSubagentEnded => encode(
                e.on_subagent_ended(&decode::<SubagentEndedParams>(params)?, &cx)
                    .await,
            ),
            Method::PrepareSubagentSpawn => match e
                .prepare_subagent_spawn(&decode::<PrepareSubagentSpawnParams>(params)?, &cx)
                .await
            {
                Ok(Some(prep)) => {
                    let rid = format!("{}", self.next.fetch_add(1, Ordering::Relaxed));
                    if let Ok(mut r) = self.rollbacks.lock() {
                        r.insert(rid.clone(), prep);
                    }
                    Ok(json!({"hasRollback": true, "rollbackId": rid}))
                }
                Ok(None) => Ok(json!({"hasRollback": false, "rollbackId": null})),
                Err(err) => Err(rpc_error(err.to_string(), None)),
            },
            Method::Dispose => encode(e.dispose().await),
        };
        if let Ok(mut a) = self.aborts.lock() {
            a.remove(&key);
        }
        out
    }
}

/// Serves `plugin` on stdin/stdout until the host closes stdin or sends `shutdown`.
pub async fn serve(plugin: Plugin) -> Result<(), SdkError> {
    serve_io(plugin, tokio::io::stdin(), tokio::io::stdout()).await
}

/// Serves `plugin` on any reader/writer pair (tests use in-memory pipes).
pub async fn serve_io<R, W>(plugin: Plugin, input: R, output: W) -> Result<(), SdkError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        let mut output = output;
        while let Some(msg) = rx.recv().await {
            let mut line = serde_json::to_vec(&msg).unwrap_or_default();
            line.push(b'\n');
            if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                break;
            }
        }
    });
    let server = Arc::new(Server {
        plugin,
        out: tx.clone(),
        instances: Mutex::new(HashMap::new()),
        rollbacks: Mutex::new(HashMap::new()),
        aborts: Mutex::new(HashMap::new()),
        host_pending: Arc::new(Mutex::new(HashMap::new())),
        next: AtomicU64::new(1),
    });
    let mut lines = BufReader::new(input).lines();
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        let Ok(Value::Object(msg)) = serde_json::from_str::<Value>(&line) else {
            tracing::warn!("invalid JSON from host");
            continue;
        };
        let id = msg.get("id").cloned().filter(|v| !v.is_null());
        match (msg.get("method").and_then(Value::as_str), id) {
            (Some("$/cancelRequest"), None) => {
                let key = msg
                    .get("params")
                    .and_then(|p| p.get("id"))
                    .map(Value::to_string)
                    .unwrap_or_default();
                if let Some(c) = server.aborts.lock().ok().and_then(|a| a.get(&key).cloned()) {
                    c.abort("Context engine operation aborted.");
                }
            }
            (Some(method), Some(id)) => {
                let method = method.to_owned();
                let params = msg.get("params").cloned().unwrap_or(Value::Null);
                let shutdown = method == "shutdown";
                let server = server.clone();
                let task = tokio::spawn(async move {
                    let reply = match server.handle(&id, &method, params).await {
                        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
                        Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
                    };
                    let _ = server.out.send(reply);
                });
                if shutdown {
                    let _ = task.await;
                    break;
                }
            }
            (None, Some(id)) => {
                let key = id
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| id.to_string());
                if let Some(tx) = server
                    .host_pending
                    .lock()
                    .ok()
                    .and_then(|mut p| p.remove(&key))
                {
                    let outcome = match msg.get("error").filter(|e| !e.is_null()) {
                        Some(err) => Err(err
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("host error")
                            .to_owned()),
                        None => Ok(msg.get("result").cloned().unwrap_or(Value::Null)),
                    };
                    let _ = tx.send(outcome);
                }
            }
            _ => {}
        }
    }
    drop(tx);
    drop(server);
    // Calls still running when the host left cannot be answered; do not wait for them long.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), writer).await;
    Ok(())
}
