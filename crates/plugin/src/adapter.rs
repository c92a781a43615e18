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
//! Speed: `assemble` carries the whole history both ways on every model call, so its path is
//! kept lean. Params are serialized once, straight to the request bytes. The reply's messages
//! are compared as raw JSON with the messages we sent: a message the plugin handed back
//! unchanged (byte-identical) is taken from the params instead of being decoded again, and its
//! encoded length is already known for the budget bound. Only new or changed messages are
//! decoded. Byte identity is a safe test: equal bytes decode to equal values, and any
//! difference (re-encoded numbers, reordered keys) just takes the decoding path.
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
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::error::PluginError;
use crate::host::PluginHost;
use crate::rpc::{Connection, Reply, ToolDecl};

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

    /// One `engine/<method>` call with typed params serialized straight into the request.
    /// Answers the encoded `params` object (the `{instanceId, params, abortable}` envelope) next
    /// to the raw reply, for callers that compare the reply with what they sent.
    async fn invoke_raw<P: Serialize>(
        &self,
        method: Method,
        params: &P,
        cx: &CallContext,
    ) -> Result<(Vec<u8>, Reply), EngineError> {
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
        let request = serde_json::to_vec(&EngineCall {
            instance_id: &instance_id,
            params,
            abortable: cx.abort.is_some(),
        })
        .map_err(|e| EngineError::failed(format!("cannot encode {} params: {e}", method.name())))?;
        let reply = conn
            .call_encoded(
                &format!("engine/{}", method.name()),
                &request,
                Some(cx),
                self.host.options().call_timeout,
            )
            .await?;
        Ok((request, reply))
    }

    async fn invoke_with<P: Serialize>(
        &self,
        method: Method,
        params: &P,
        cx: &CallContext,
    ) -> Result<Reply, EngineError> {
        self.invoke_raw(method, params, cx)
            .await
            .map(|(_, reply)| reply)
    }
}

/// The params of every `engine/<method>` request.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EngineCall<'a, P> {
    instance_id: &'a str,
    params: &'a P,
    abortable: bool,
}

/// Just the `messages` of an assemble params or result object, as raw JSON slices.
#[derive(Deserialize)]
struct RawMessages<'a> {
    #[serde(borrow)]
    messages: Vec<&'a RawValue>,
}

/// The `params.messages` of an encoded [`EngineCall`].
#[derive(Deserialize)]
struct SentMessages<'a> {
    #[serde(borrow)]
    params: RawMessages<'a>,
}

/// Decodes an assemble reply, taking every message the plugin returned byte-identical to one
/// it was sent from `params` (see the module header). Answers the result and, per message, its
/// encoded length when known (for [`byte_bound`]).
fn decode_assembled(
    params: &AssembleParams,
    request: &[u8],
    reply: &Reply,
) -> Result<(AssembleResult, Vec<Option<u64>>), EngineError> {
    let invalid = |e: &dyn std::fmt::Display| {
        EngineError::failed(format!(
            "contract violation: assemble returned an invalid result: {e}"
        ))
    };
    let (Some(text), Ok(sent)) = (reply.raw(), serde_json::from_slice::<SentMessages>(request))
    else {
        return decode(Method::Assemble, reply).map(|r: AssembleResult| (r, Vec::new()));
    };
    let sent = sent.params.messages;
    let Ok(got) = serde_json::from_str::<RawMessages>(text) else {
        // Not an object with a `messages` array: the typed decoder says what is wrong.
        return decode(Method::Assemble, reply).map(|r: AssembleResult| (r, Vec::new()));
    };
    let got = got.messages;
    // The rest of the result, decoded by the real type: the text with `messages` emptied.
    let (Some(first), Some(last)) = (got.first(), got.last()) else {
        return decode(Method::Assemble, reply).map(|r: AssembleResult| (r, Vec::new()));
    };
    let offset = |raw: &RawValue| raw.get().as_ptr() as usize - text.as_ptr() as usize;
    let start = offset(first);
    let end = offset(last) + last.get().len();
    let (Some(open), Some(close)) = (
        text[..start].rfind('['),
        text[end..].find(']').map(|i| end + i + 1),
    ) else {
        return decode(Method::Assemble, reply).map(|r: AssembleResult| (r, Vec::new()));
    };
    let mut rest = String::with_capacity(text.len() - (close - open) + 2);
    rest.push_str(&text[..open]);
    rest.push_str("[]");
    rest.push_str(&text[close..]);
    let mut result: AssembleResult = serde_json::from_str(&rest).map_err(|e| invalid(&e))?;

    let mut index: Option<std::collections::HashMap<&str, usize>> = None;
    let mut next = 0usize;
    let mut lengths = Vec::with_capacity(got.len());
    result.messages.reserve(got.len());
    for raw in &got {
        let raw = raw.get();
        // Most engines keep order (a suffix, a window, summaries then the tail): try the next
        // sent message first, then look the bytes up.
        let found = if sent.get(next).is_some_and(|s| s.get() == raw) {
            Some(next)
        } else {
            index
                .get_or_insert_with(|| {
                    sent.iter()
                        .enumerate()
                        .rev()
                        .map(|(i, s)| (s.get(), i))
                        .collect()
                })
                .get(raw)
                .copied()
        };
        match found.and_then(|i| params.messages.get(i).map(|m| (i, m))) {
            Some((i, m)) => {
                result.messages.push(m.clone());
                lengths.push(Some(raw.len() as u64));
                next = i + 1;
            }
            None => {
                let m: AgentMessage = serde_json::from_str(raw).map_err(|e| invalid(&e))?;
                result.messages.push(m);
                lengths.push(None);
            }
        }
    }
    Ok((result, lengths))
}

fn decode<T: DeserializeOwned>(method: Method, reply: &Reply) -> Result<T, EngineError> {
    reply.decode().map_err(|e| {
        EngineError::failed(format!(
            "contract violation: {} returned an invalid result: {e}",
            method.name()
        ))
    })
}

fn decode_or_default<T: DeserializeOwned + Default>(
    method: Method,
    reply: &Reply,
) -> Result<T, EngineError> {
    if reply.is_null() {
        return Ok(T::default());
    }
    decode(method, reply)
}

/// The reply as a JSON tree (for the few results read field by field).
fn tree(method: Method, reply: Reply) -> Result<Value, EngineError> {
    reply.into_value().map_err(|e| {
        EngineError::failed(format!(
            "contract violation: {} returned an invalid result: {e}",
            method.name()
        ))
    })
}

/// An upper bound of `messages_tokens(messages)` computed from byte lengths: tokens never
/// outnumber the bytes they encode; images and per-message framing are added as the estimator
/// charges them.
/// `known[i]`, when present, is message `i`'s encoded length (measured on the wire).
fn byte_bound(messages: &[clawctx_protocol::AgentMessage], known: &[Option<u64>]) -> u64 {
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            // Serialized JSON is longer than every text the estimator counts (names, arguments,
            // text blocks), so its length bounds their bytes.
            let bytes = match known.get(i).copied().flatten() {
                Some(n) => n,
                None => serde_json::to_vec(m)
                    .map(|v| v.len() as u64)
                    .unwrap_or(u64::MAX / 4),
            };
            bytes
                + clawctx_tokens::MESSAGE_OVERHEAD_TOKENS
                + m.image_count() as u64 * clawctx_tokens::IMAGE_TOKENS
        })
        .fold(0u64, u64::saturating_add)
}

/// Checks an assembled context against the invariants every engine keeps: within
/// `tokenBudget` (estimated with [`clawctx_tokens::messages_tokens`]), every tool result after
/// its call, no `system`-role messages. `Err` is the violation's description.
pub fn check_assembled(params: &AssembleParams, result: &AssembleResult) -> Result<(), String> {
    check_assembled_with(params, result, &[])
}

/// [`check_assembled`] with the encoded lengths of (some of) the result's messages already
/// known, so the byte bound does not serialize them again.
fn check_assembled_with(
    params: &AssembleParams,
    result: &AssembleResult,
    known_lengths: &[Option<u64>],
) -> Result<(), String> {
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
        if byte_bound(&result.messages, known_lengths) <= budget {
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
        decode_or_default(Method::Ingest, &v)
    }

    async fn assemble(
        &self,
        params: &AssembleParams,
        cx: &CallContext,
    ) -> Result<AssembleResult, EngineError> {
        let (request, reply) = self.invoke_raw(Method::Assemble, params, cx).await?;
        let (result, lengths) = decode_assembled(params, &request, &reply)?;
        check_assembled_with(params, &result, &lengths)
            .map_err(|e| EngineError::failed(format!("contract violation: {e}")))?;
        Ok(result)
    }

    async fn compact(
        &self,
        params: &CompactParams,
        cx: &CallContext,
    ) -> Result<CompactResult, EngineError> {
        let reply = self.invoke_with(Method::Compact, params, cx).await?;
        let v = tree(Method::Compact, reply)?;
        let delegated = v
            .get(MARKER_KEY)
            .and_then(|m| m.get("delegateCompaction"))
            .and_then(Value::as_bool)
            == Some(true);
        if delegated {
            return clawctx_engine::legacy::delegate_compaction_to_runtime(params, cx).await;
        }
        serde_json::from_value(v).map_err(|e| {
            EngineError::failed(format!(
                "contract violation: compact returned an invalid result: {e}"
            ))
        })
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
        decode_or_default(Method::IngestBatch, &v)
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
        decode_or_default(Method::Bootstrap, &v)
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
        decode_or_default(Method::Maintain, &v)
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
        decode(Method::CommitTurn, &v)
    }

    async fn prepare_subagent_spawn(
        &self,
        params: &PrepareSubagentSpawnParams,
        cx: &CallContext,
    ) -> Result<Option<SubagentSpawnPreparation>, EngineError> {
        if !self.methods.has(Method::PrepareSubagentSpawn) {
            return Err(EngineError::NotImplemented(Method::PrepareSubagentSpawn));
        }
        let reply = self
            .invoke_with(Method::PrepareSubagentSpawn, params, cx)
            .await?;
        let v = tree(Method::PrepareSubagentSpawn, reply)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn history() -> AssembleParams {
        AssembleParams {
            session_id: "s".into(),
            messages: vec![
                AgentMessage::user("first question").with_timestamp(1),
                AgentMessage::tool_call("c1", "read", json!({"path": "a.rs"})),
                AgentMessage::tool_result("c1", "read", "fn main() {}"),
                AgentMessage::assistant("an answer with \"quotes\" and a\nnewline")
                    .with_timestamp(4),
            ],
            token_budget: Some(10_000),
            ..Default::default()
        }
    }

    /// The request bytes the adapter would send for `params`.
    fn request(params: &AssembleParams) -> Vec<u8> {
        serde_json::to_vec(&EngineCall {
            instance_id: "1",
            params,
            abortable: false,
        })
        .expect("params encode")
    }

    fn reply(result: Value) -> Reply {
        let line = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "result": result}))
            .expect("reply encodes");
        #[derive(Deserialize)]
        struct Env {
            result: Option<Box<RawValue>>,
        }
        let env: Env = serde_json::from_slice(&line).expect("reply parses");
        Reply::from_raw(env.result)
    }

    /// The reference: the whole result decoded by the typed decoder.
    fn typed(result: &Value) -> AssembleResult {
        serde_json::from_value(result.clone()).expect("reference decodes")
    }

    #[test]
    fn a_pass_through_reply_reuses_every_sent_message() {
        let p = history();
        let result = json!({"messages": p.messages, "estimatedTokens": 12.0, "systemPromptAddition": "x", "extra": 1});
        let (got, lengths) =
            decode_assembled(&p, &request(&p), &reply(result.clone())).expect("decodes");
        assert_eq!(got, typed(&result));
        assert!(
            lengths.iter().all(Option::is_some),
            "every message should have matched: {lengths:?}"
        );
        for (m, n) in got.messages.iter().zip(&lengths) {
            assert_eq!(
                *n,
                Some(serde_json::to_vec(m).expect("encodes").len() as u64),
                "a known length differs from the encoded length"
            );
        }
    }

    #[test]
    fn new_changed_and_reordered_messages_are_decoded_like_the_typed_decoder_does() {
        let p = history();
        let mut changed = serde_json::to_value(&p.messages[3]).expect("encodes");
        changed["content"][0]["text"] = json!("edited");
        let reordered = json!({"content": "first question", "timestamp": 1, "role": "user"});
        let summary = json!({"role": "user", "content": "summary of earlier turns"});
        let result = json!({"messages": [summary, reordered, p.messages[1], p.messages[2], changed], "estimatedTokens": 3});
        let (got, lengths) =
            decode_assembled(&p, &request(&p), &reply(result.clone())).expect("decodes");
        assert_eq!(got, typed(&result));
        let matched: Vec<bool> = lengths.iter().map(Option::is_some).collect();
        assert_eq!(
            matched,
            [false, false, true, true, false],
            "only byte-identical messages are reused"
        );
    }

    #[test]
    fn empty_missing_and_malformed_messages_go_through_the_typed_decoder() {
        let p = history();
        let empty = json!({"messages": [], "estimatedTokens": 0});
        assert_eq!(
            decode_assembled(&p, &request(&p), &reply(empty.clone()))
                .expect("decodes")
                .0,
            typed(&empty)
        );
        for bad in [
            json!({"estimatedTokens": 0}),
            json!({"messages": "nope"}),
            json!([1]),
            json!({"messages": [{"content": "no role"}]}),
        ] {
            let err =
                decode_assembled(&p, &request(&p), &reply(bad.clone())).expect_err("must fail");
            assert!(
                err.to_string()
                    .contains("contract violation: assemble returned an invalid result"),
                "{bad}: unexpected error {err}"
            );
        }
    }

    #[test]
    fn the_budget_check_uses_known_lengths_and_still_catches_overflow() {
        let mut p = history();
        let result = AssembleResult {
            messages: p.messages.clone(),
            ..Default::default()
        };
        p.token_budget = Some(5);
        let err = check_assembled_with(&p, &result, &[Some(1); 4]).expect_err("over budget");
        assert!(err.contains("over the token budget of 5"), "{err}");
        p.token_budget = Some(10_000);
        check_assembled_with(&p, &result, &[Some(1); 4]).expect("fits");
    }
}
