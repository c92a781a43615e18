//! The adapter: a plugin engine instance behind the [`ContextEngine`] trait.
//!
//! Every trait call becomes one `engine/<method>` request. Results are **checked before
//! use**: a result that does not deserialize into the wire type, an assembled context over
//! `tokenBudget`, a tool result whose call is not before it, or a `system`-role message is a
//! contract violation (`EngineError::Failed("contract violation: …")`), which the registry's
//! guard turns into a quarantine plus the `legacy` answer. Extra fields are ignored; `null`
//! is fine for void methods (and read as the empty result for ingest-like ones).
//!
//! `system` messages: OpenClaw's message model (contract §2) has no `system` role, and the
//! runtime pipeline would either drop such a message or send it as something it is not.
//! Instructions belong in `systemPromptAddition`. We treat a `system` message in an assembled
//! context as a contract violation rather than silently dropping it, so the operator sees it.
//!
//! `delegateCompactionToRuntime` in the plugin SDKs returns a marker
//! (`"__clawctx": {"delegateCompaction": true}`); on it the adapter runs the host's own
//! compaction with [`clawctx_engine::legacy::delegate_compaction_to_runtime`].

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use clawctx_engine::resolve::missing_info_contract_error;
use clawctx_engine::{
    AgentTool, CallContext, ContextEngine, EngineError, FactoryContext, Method, MethodSet,
    SubagentSpawnPreparation, ToolCallContext,
};
use clawctx_protocol::*;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::error::PluginError;
use crate::host::PluginHost;
use crate::rpc::{Connection, ToolDecl};

/// The key of the SDK marker object in a compact result.
pub const MARKER_KEY: &str = "__clawctx";

/// The `factoryContext` JSON for a factory context.
pub fn factory_context_json(ctx: &FactoryContext) -> Value {
    json!({
        "config": ctx.config.as_deref().cloned(),
        "agentDir": ctx.agent_dir.as_ref().map(|p| p.display().to_string()),
        "workspaceDir": ctx.workspace_dir.as_ref().map(|p| p.display().to_string()),
    })
}

/// One engine instance living in a plugin process.
pub struct PluginEngine {
    host: Arc<PluginHost>,
    engine_id: String,
    factory_context: Value,
    info: ContextEngineInfo,
    methods: MethodSet,
    instance: tokio::sync::Mutex<(u64, String)>,
    tools: Vec<Arc<dyn AgentTool>>,
}

impl std::fmt::Debug for PluginEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginEngine")
            .field("engine_id", &self.engine_id)
            .field("methods", &self.methods)
            .finish()
    }
}

struct Created {
    instance_id: String,
    info: Value,
    methods: Vec<String>,
}

async fn create_instance(
    conn: &Connection,
    host: &PluginHost,
    engine_id: &str,
    factory_context: &Value,
) -> Result<Created, EngineError> {
    let raw = conn
        .call(
            "engine/create",
            json!({"engineId": engine_id, "factoryContext": factory_context}),
            None,
            host.options().call_timeout,
        )
        .await?;
    let instance_id = raw
        .get("instanceId")
        .and_then(|v| {
            v.as_str()
                .map(str::to_owned)
                .or_else(|| v.as_u64().map(|n| n.to_string()))
        })
        .ok_or_else(|| {
            EngineError::failed(format!(
                "contract violation: engine/create returned no instanceId: {raw}"
            ))
        })?;
    let methods = raw
        .get("methods")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    Ok(Created {
        instance_id,
        info: raw.get("info").cloned().unwrap_or(Value::Null),
        methods,
    })
}

/// Reads `info` leniently: id and name default to "" (so contract validation reports them),
/// the rest must fit the wire type.
fn parse_info(
    engine_id: &str,
    info: Value,
    missing: &[&str],
) -> Result<ContextEngineInfo, EngineError> {
    let Value::Object(mut map) = info else {
        return Err(EngineError::Contract(missing_info_contract_error(
            engine_id, missing,
        )));
    };
    for key in ["id", "name"] {
        let ok = map.get(key).is_some_and(Value::is_string);
        if !ok {
            map.insert(key.into(), Value::String(String::new()));
        }
    }
    serde_json::from_value(Value::Object(map)).map_err(|e| {
        EngineError::failed(format!(
            "contract violation: engine \"{engine_id}\" info is invalid: {e}"
        ))
    })
}

impl PluginEngine {
    /// The factory body: creates an instance of `engine_id` in the plugin process (starting
    /// the process when needed). A factory that throws or returns a non-object fails with the
    /// plugin's message (the exact contract text for the latter).
    pub async fn create(
        host: Arc<PluginHost>,
        engine_id: String,
        ctx: FactoryContext,
    ) -> Result<Arc<dyn ContextEngine>, EngineError> {
        let factory_context = factory_context_json(&ctx);
        let (conn, generation) = host.connection().await?;
        let created = create_instance(&conn, &host, &engine_id, &factory_context).await?;
        let names: HashSet<&str> = created.methods.iter().map(String::as_str).collect();
        let methods = MethodSet::of(
            &Method::ALL
                .into_iter()
                .filter(|m| names.contains(m.name()) || *m == Method::Dispose)
                .collect::<Vec<_>>(),
        );
        let missing: Vec<&str> = [Method::Ingest, Method::Assemble, Method::Compact]
            .into_iter()
            .filter(|m| !methods.has(*m))
            .map(Method::name)
            .collect();
        let info = parse_info(&engine_id, created.info, &missing)?;
        let tools = host
            .initialize_result()
            .map(|i| i.tools)
            .unwrap_or_default()
            .into_iter()
            .map(|decl| {
                Arc::new(PluginTool {
                    host: host.clone(),
                    decl,
                }) as Arc<dyn AgentTool>
            })
            .collect();
        Ok(Arc::new(PluginEngine {
            host,
            engine_id,
            factory_context,
            info,
            methods,
            instance: tokio::sync::Mutex::new((generation, created.instance_id)),
            tools,
        }))
    }

    /// The registered engine id.
    pub fn engine_id(&self) -> &str {
        &self.engine_id
    }

    async fn invoke(
        &self,
        method: Method,
        params: Value,
        cx: &CallContext,
    ) -> Result<Value, EngineError> {
        let (conn, generation) = self.host.connection().await?;
        let instance_id = {
            let mut inst = self.instance.lock().await;
            if inst.0 != generation {
                let created =
                    create_instance(&conn, &self.host, &self.engine_id, &self.factory_context)
                        .await?;
                *inst = (generation, created.instance_id);
            }
            inst.1.clone()
        };
        let req =
            json!({"instanceId": instance_id, "params": params, "abortable": cx.abort.is_some()});
        let value = conn
            .call(
                &format!("engine/{}", method.name()),
                req,
                Some(cx),
                self.host.options().call_timeout,
            )
            .await?;
        Ok(value)
    }

    async fn invoke_with<P: serde::Serialize>(
        &self,
        method: Method,
        params: &P,
        cx: &CallContext,
    ) -> Result<Value, EngineError> {
        let params = serde_json::to_value(params).map_err(|e| {
            EngineError::failed(format!("cannot encode {} params: {e}", method.name()))
        })?;
        self.invoke(method, params, cx).await
    }
}

fn decode<T: DeserializeOwned>(method: Method, v: Value) -> Result<T, EngineError> {
    serde_json::from_value(v).map_err(|e| {
        EngineError::failed(format!(
            "contract violation: {} returned an invalid result: {e}",
            method.name()
        ))
    })
}

fn decode_or_default<T: DeserializeOwned + Default>(
    method: Method,
    v: Value,
) -> Result<T, EngineError> {
    if v.is_null() {
        return Ok(T::default());
    }
    decode(method, v)
}

/// An upper bound of `messages_tokens(messages)` computed from byte lengths: tokens never
/// outnumber the bytes they encode; images and per-message framing are added as the estimator
/// charges them.
fn byte_bound(messages: &[clawctx_protocol::AgentMessage]) -> u64 {
    messages
        .iter()
        .map(|m| {
            // Serialized JSON is longer than every text the estimator counts (names, arguments,
            // text blocks), so its length bounds their bytes.
            let bytes = serde_json::to_vec(m).map(|v| v.len() as u64).unwrap_or(u64::MAX / 4);
            bytes + clawctx_tokens::MESSAGE_OVERHEAD_TOKENS + m.image_count() as u64 * clawctx_tokens::IMAGE_TOKENS
        })
        .fold(0u64, u64::saturating_add)
}

/// Checks an assembled context against the invariants every engine keeps: within
/// `tokenBudget` (estimated with [`clawctx_tokens::messages_tokens`]), every tool result after
/// its call, no `system`-role messages. `Err` is the violation's description.
pub fn check_assembled(params: &AssembleParams, result: &AssembleResult) -> Result<(), String> {
    for (i, m) in result.messages.iter().enumerate() {
        if m.role() == "system" {
            return Err(format!(
                "assemble returned a system-role message at index {i} (use systemPromptAddition for instructions)"
            ));
        }
    }
    let mut calls: HashSet<&str> = HashSet::new();
    for (i, m) in result.messages.iter().enumerate() {
        for c in m.tool_calls() {
            calls.insert(c.id.as_str());
        }
        if let Some(id) = m.tool_result_id() {
            if !calls.contains(id) {
                return Err(format!(
                    "assemble broke tool pairing: the toolResult at index {i} (toolCallId \"{id}\") has no matching toolCall before it"
                ));
            }
        }
    }
    if let Some(budget) = params.token_budget {
        // Every o200k token covers at least one byte, so the byte count bounds the token count:
        // when that bound fits, the exact (much dearer) count is not needed.
        if byte_bound(&result.messages) <= budget {
            return Ok(());
        }
        let tokens = clawctx_tokens::messages_tokens(&result.messages);
        if tokens > budget {
            return Err(format!(
                "assemble returned {tokens} tokens, over the token budget of {budget}"
            ));
        }
    }
    Ok(())
}

#[async_trait]
impl ContextEngine for PluginEngine {
    fn info(&self) -> ContextEngineInfo {
        self.info.clone()
    }

    fn methods(&self) -> MethodSet {
        self.methods
    }

    fn tools(&self) -> Vec<Arc<dyn AgentTool>> {
        self.tools.clone()
    }

    async fn ingest(
        &self,
        params: &IngestParams,
        cx: &CallContext,
    ) -> Result<IngestResult, EngineError> {
        let v = self.invoke_with(Method::Ingest, params, cx).await?;
        decode_or_default(Method::Ingest, v)
    }

    async fn assemble(
        &self,
        params: &AssembleParams,
        cx: &CallContext,
    ) -> Result<AssembleResult, EngineError> {
        let v = self.invoke_with(Method::Assemble, params, cx).await?;
        let result: AssembleResult = decode(Method::Assemble, v)?;
        check_assembled(params, &result)
            .map_err(|e| EngineError::failed(format!("contract violation: {e}")))?;
        Ok(result)
    }

    async fn compact(
        &self,
        params: &CompactParams,
        cx: &CallContext,
    ) -> Result<CompactResult, EngineError> {
        let v = self.invoke_with(Method::Compact, params, cx).await?;
        let delegated = v
            .get(MARKER_KEY)
            .and_then(|m| m.get("delegateCompaction"))
            .and_then(Value::as_bool)
            == Some(true);
        if delegated {
            return clawctx_engine::legacy::delegate_compaction_to_runtime(params, cx).await;
        }
        decode(Method::Compact, v)
    }

    async fn ingest_batch(
        &self,
        params: &IngestBatchParams,
        cx: &CallContext,
    ) -> Result<IngestBatchResult, EngineError> {
        if !self.methods.has(Method::IngestBatch) {
            return Err(EngineError::NotImplemented(Method::IngestBatch));
        }
        let v = self.invoke_with(Method::IngestBatch, params, cx).await?;
        decode_or_default(Method::IngestBatch, v)
    }

    async fn bootstrap(
        &self,
        params: &BootstrapParams,
        cx: &CallContext,
    ) -> Result<BootstrapResult, EngineError> {
        if !self.methods.has(Method::Bootstrap) {
            return Err(EngineError::NotImplemented(Method::Bootstrap));
        }
        let v = self.invoke_with(Method::Bootstrap, params, cx).await?;
        decode_or_default(Method::Bootstrap, v)
    }

    async fn maintain(
        &self,
        params: &MaintainParams,
        cx: &CallContext,
    ) -> Result<TranscriptRewriteResult, EngineError> {
        if !self.methods.has(Method::Maintain) {
            return Err(EngineError::NotImplemented(Method::Maintain));
        }
        let v = self.invoke_with(Method::Maintain, params, cx).await?;
        decode_or_default(Method::Maintain, v)
    }

    async fn after_turn(
        &self,
        params: &AfterTurnParams,
        cx: &CallContext,
    ) -> Result<(), EngineError> {
        if !self.methods.has(Method::AfterTurn) {
            return Err(EngineError::NotImplemented(Method::AfterTurn));
        }
        self.invoke_with(Method::AfterTurn, params, cx)
            .await
            .map(|_| ())
    }

    async fn commit_turn(
        &self,
        params: &CommitTurnParams,
        cx: &CallContext,
    ) -> Result<CommitTurnResult, EngineError> {
        if !self.methods.has(Method::CommitTurn) {
            return Err(EngineError::NotImplemented(Method::CommitTurn));
        }
        let v = self.invoke_with(Method::CommitTurn, params, cx).await?;
        decode(Method::CommitTurn, v)
    }

    async fn prepare_subagent_spawn(
        &self,
        params: &PrepareSubagentSpawnParams,
        cx: &CallContext,
    ) -> Result<Option<SubagentSpawnPreparation>, EngineError> {
        if !self.methods.has(Method::PrepareSubagentSpawn) {
            return Err(EngineError::NotImplemented(Method::PrepareSubagentSpawn));
        }
        let v = self
            .invoke_with(Method::PrepareSubagentSpawn, params, cx)
            .await?;
        if v.is_null() || v.get("hasRollback").and_then(Value::as_bool) != Some(true) {
            return Ok(None);
        }
        let rollback_id = v.get("rollbackId").cloned().unwrap_or(Value::Null);
        let instance_id = self.instance.lock().await.1.clone();
        let host = self.host.clone();
        Ok(Some(SubagentSpawnPreparation::new(move || async move {
            host.call(
                "engine/rollback",
                json!({"instanceId": instance_id, "rollbackId": rollback_id}),
                None,
            )
            .await
            .map(|_| ())
            .map_err(EngineError::from)
        })))
    }

    async fn on_subagent_ended(
        &self,
        params: &SubagentEndedParams,
        cx: &CallContext,
    ) -> Result<(), EngineError> {
        if !self.methods.has(Method::OnSubagentEnded) {
            return Err(EngineError::NotImplemented(Method::OnSubagentEnded));
        }
        self.invoke_with(Method::OnSubagentEnded, params, cx)
            .await
            .map(|_| ())
    }

    async fn dispose(&self) -> Result<(), EngineError> {
        // Never restarts a dead process just to dispose an instance that died with it.
        let Some((conn, generation)) = self.host.current().await else {
            return Ok(());
        };
        let (inst_gen, instance_id) = self.instance.lock().await.clone();
        if inst_gen != generation {
            return Ok(());
        }
        conn.call(
            "engine/dispose",
            json!({"instanceId": instance_id}),
            None,
            self.host.options().call_timeout,
        )
        .await
        .map(|_| ())
        .map_err(|e: PluginError| e.into())
    }
}

/// A tool registered by a plugin (`api.registerTool`), executed with `tool/execute`.
pub struct PluginTool {
    host: Arc<PluginHost>,
    decl: ToolDecl,
}

#[async_trait]
impl AgentTool for PluginTool {
    fn name(&self) -> &str {
        &self.decl.name
    }

    fn description(&self) -> &str {
        &self.decl.description
    }

    fn parameters(&self) -> Value {
        self.decl.parameters.clone()
    }

    async fn execute(&self, arguments: Value, context: ToolCallContext) -> Result<String, String> {
        let params = json!({
            "name": self.decl.name,
            "arguments": arguments,
            "context": {"sessionId": context.session_id, "sessionKey": context.session_key},
        });
        let v = self
            .host
            .call("tool/execute", params, None)
            .await
            .map_err(|e| e.to_string())?;
        let text = tool_text(&v);
        if v.get("isError").and_then(Value::as_bool) == Some(true) {
            Err(text)
        } else {
            Ok(text)
        }
    }
}

/// The text of a tool result: a string, or the text blocks of `{content: [...]}`.
fn tool_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Object(o) => match o.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(blocks)) => blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            _ => v.to_string(),
        },
        Value::Null => String::new(),
        other => other.to_string(),
    }
}
