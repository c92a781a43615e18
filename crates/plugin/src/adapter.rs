//! The adapter: a plugin engine instance behind the [`ContextEngine`] trait.
//!
//! Every trait call becomes one `engine/<method>` request. Results are **checked before
//! use**: a result that does not deserialize into the wire type (a bad message is named by its
//! index), a `toolResult` without a `toolCallId`, or a tool result whose call is not before it
//! is a contract violation (`EngineError::Failed("contract violation: …")`), which the
//! registry's guard turns into a quarantine plus the `legacy` answer. Size is never one:
//! OpenClaw quarantines only on a throw. An assembled context over `tokenBudget` from an engine
//! that lets the host compact (`ownsCompaction: false`) or marks its result `promptAuthority:
//! "preassembly_may_overflow"` is clamped to the budget, with one warning; one from an engine
//! that owns compaction is used as it is, with one warning, as OpenClaw 2026.9 does (it skips
//! its precheck for such an engine and sends the engine's messages; see
//! docs/openclaw-compat.md for what the runtime's final clamp then does). Extra fields are
//! ignored; `null` is fine for void methods (and read as the empty result for ingest-like
//! ones).
//!
//! `system` messages: OpenClaw's message model (contract §2) has no `system` role, but plugins
//! written for OpenClaw return them (recalled memories first, say), and OpenClaw's provider
//! adapters drop them. We do better, deliberately (ARCHITECTURE.md, "Cross-cutting
//! decisions"): they pass here, and the runtime folds their text into the run's system prompt
//! the way it adds `systemPromptAddition`, counted in the budget there and warned about once
//! per engine. Like the addition they are not part of the messages measured against
//! `tokenBudget`. The checks shared with in-process engines are
//! [`clawctx_engine::guard::check_assembled_messages`].
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
use crate::message_refs::{Interned, MessageRefs};
use crate::rpc::{Connection, Reply, ToolDecl, UNKNOWN_MESSAGE_REF};

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
    /// Whether an over-budget `assemble` of a plugin that lets the host compact was warned
    /// about (once per engine; see [`ContextEngine::assemble`] below).
    warned_over_budget: std::sync::atomic::AtomicBool,
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
            .map(|decl| Arc::new(PluginTool::new(host.clone(), decl)) as Arc<dyn AgentTool>)
            .collect();
        Ok(Arc::new(PluginEngine {
            host,
            engine_id,
            factory_context,
            info,
            methods,
            instance: tokio::sync::Mutex::new((generation, created.instance_id)),
            tools,
            warned_over_budget: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// The registered engine id.
    pub fn engine_id(&self) -> &str {
        &self.engine_id
    }

    /// One `engine/<method>` call; `encode` writes the request's params (the
    /// `{instanceId, params, abortable}` object) for the live instance id, given the
    /// connection's message-reference table when references are on. A runner that reports an
    /// unknown reference gets the table reset and the request once more.
    async fn invoke_encoded<T: AsRef<[u8]>>(
        &self,
        method: Method,
        cx: &CallContext,
        encode: impl Fn(&str, bool, Option<&mut MessageRefs>) -> Result<T, serde_json::Error>,
    ) -> Result<(T, Reply), EngineError> {
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
        let rpc_method = format!("engine/{}", method.name());
        let timeout = self.host.options().call_timeout;
        let mut retried = false;
        loop {
            let outcome = conn
                .call_built(
                    &rpc_method,
                    |refs| encode(&instance_id, cx.abort.is_some(), refs),
                    Some(cx),
                    timeout,
                )
                .await;
            match outcome {
                Err(PluginError::Remote { code, message, .. })
                    if code == UNKNOWN_MESSAGE_REF && !retried =>
                {
                    tracing::warn!(plugin = %self.host.plugin_id(), "{message}; resending every message");
                    conn.reset_message_refs();
                    retried = true;
                }
                Err(PluginError::Encode { message, .. }) => {
                    return Err(EngineError::failed(format!(
                        "cannot encode {} params: {message}",
                        method.name()
                    )))
                }
                other => return Ok(other?),
            }
        }
    }

    /// One `engine/<method>` call with typed params serialized straight into the request.
    async fn invoke_with<P: Serialize>(
        &self,
        method: Method,
        params: &P,
        cx: &CallContext,
    ) -> Result<Reply, EngineError> {
        self.invoke_encoded(method, cx, |instance_id, abortable, _| {
            let call = EngineCall {
                instance_id,
                params,
                abortable,
            };
            serde_json::to_vec(&call)
        })
        .await
        .map(|(_, reply)| reply)
    }
}

/// An encoded assemble request, and each message as it was encoded.
pub(crate) struct EncodedAssemble {
    /// The request params.
    bytes: Vec<u8>,
    /// Each message's JSON.
    sent: SentJson,
    /// With message references on: `ids[i]` is message `i`'s id (see
    /// [`crate::message_refs`]). Empty when every message went in full.
    ids: Vec<u32>,
    /// `bytes[array]` is the `messages` array as sent (messages, or their ids), which is also
    /// what a pass-through reply writes back.
    array: std::ops::Range<usize>,
}

impl AsRef<[u8]> for EncodedAssemble {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// Where each sent message's JSON is.
enum SentJson {
    /// `bytes[ranges[i]]` is message `i` (sent in full).
    InRequest(Vec<std::ops::Range<usize>>),
    /// As the reference table holds it.
    Held(Vec<Arc<[u8]>>),
}

impl EncodedAssemble {
    fn message(&self, i: usize) -> Option<&[u8]> {
        match &self.sent {
            SentJson::InRequest(ranges) => ranges.get(i).and_then(|r| self.bytes.get(r.clone())),
            SentJson::Held(json) => json.get(i).map(|b| &b[..]),
        }
    }

    fn len(&self) -> usize {
        match &self.sent {
            SentJson::InRequest(ranges) => ranges.len(),
            SentJson::Held(json) => json.len(),
        }
    }

    pub(crate) fn echo(&self) -> &[u8] {
        self.bytes.get(self.array.clone()).unwrap_or_default()
    }
}

/// Encodes `{instanceId, params, abortable}` for an assemble call, byte for byte what
/// `serde_json` writes for [`EngineCall`] when `refs` is `None`, recording each message's
/// encoding on the way (so the reply can be compared with what was sent without parsing the
/// request again). With `refs`, `messages` is the array of the messages' ids, and the object
/// gains the `messageRefs` member: the runner's housekeeping and the messages it does not hold
/// yet (`"define":[[id,message],…]`); see [`crate::message_refs`].
///
/// The params are encoded with an empty `messages` array, and the messages are spliced in at
/// the first `"messages":[]`: the first one is the params' own key, because `messages` comes
/// before every nested object in [`AssembleParams`] and `instanceId` is an escaped string.
pub(crate) fn encode_assemble(
    instance_id: &str,
    params: &AssembleParams,
    abortable: bool,
    refs: Option<&mut MessageRefs>,
) -> Result<EncodedAssemble, serde_json::Error> {
    use std::io::Write;
    // Exhaustive on purpose: a new field must be considered here (is it still after
    // `messages`, or a plain value?), and the compiler says so.
    let AssembleParams {
        session_id,
        session_key,
        messages,
        token_budget,
        available_tools,
        citations_mode,
        model,
        prompt,
        runtime_settings,
        runtime_context,
    } = params;
    let shell = AssembleParams {
        session_id: session_id.clone(),
        session_key: session_key.clone(),
        messages: Vec::new(),
        token_budget: *token_budget,
        available_tools: available_tools.clone(),
        citations_mode: citations_mode.clone(),
        model: model.clone(),
        prompt: prompt.clone(),
        runtime_settings: runtime_settings.clone(),
        runtime_context: runtime_context.clone(),
    };
    let head = serde_json::to_vec(&EngineCall {
        instance_id,
        params: &shell,
        abortable,
    })?;
    const KEY: &[u8] = br#""messages":[]"#;
    let Some(at) = head.windows(KEY.len()).position(|w| w == KEY) else {
        return Err(serde_json::Error::io(std::io::Error::other(
            "the encoded params have no messages key",
        )));
    };
    let split = at + KEY.len() - 1; // just before `]`
    let mut bytes = Vec::with_capacity(head.len() + messages.len() * 400);
    bytes.extend_from_slice(&head[..split]);
    let array_start = split - 1;
    let mut ids = Vec::new();
    let array_end;
    let sent;
    // Writes into a Vec cannot fail.
    match refs {
        None => {
            let mut ranges = Vec::with_capacity(messages.len());
            for (i, m) in messages.iter().enumerate() {
                if i > 0 {
                    bytes.push(b',');
                }
                let start = bytes.len();
                serde_json::to_writer(&mut bytes, m)?;
                ranges.push(start..bytes.len());
            }
            array_end = bytes.len() + 1;
            bytes.extend_from_slice(&head[split..]);
            sent = SentJson::InRequest(ranges);
        }
        Some(table) => {
            table.begin();
            ids.reserve(messages.len());
            let mut json = Vec::with_capacity(messages.len());
            let mut define = Vec::new();
            for (i, m) in messages.iter().enumerate() {
                if i > 0 {
                    bytes.push(b',');
                }
                let (interned, message) = table.intern(m)?;
                serde_json::to_writer(&mut bytes, &interned.id())?;
                if let Interned::New(id) = interned {
                    define.push(b',');
                    let _ = write!(define, "[{id},");
                    define.extend_from_slice(&message);
                    define.push(b']');
                }
                ids.push(interned.id());
                json.push(message);
            }
            array_end = bytes.len() + 1;
            // `head` ends with the envelope's `}`: the housekeeping member goes before it.
            let housekeeping = table.finish();
            bytes.extend_from_slice(head.get(split..head.len() - 1).unwrap_or_default());
            let _ = write!(
                bytes,
                r#","messageRefs":{{"reset":{},"drop":"#,
                housekeeping.reset
            );
            serde_json::to_writer(&mut bytes, &housekeeping.drop)?;
            bytes.extend_from_slice(br#","define":["#);
            bytes.extend_from_slice(define.get(1..).unwrap_or_default());
            bytes.extend_from_slice(b"]}}");
            sent = SentJson::Held(json);
        }
    }
    Ok(EncodedAssemble {
        bytes,
        sent,
        ids,
        array: array_start..array_end,
    })
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

/// Decodes an assemble reply, taking every message the plugin returned byte-identical to one
/// it was sent from `params` (see the module header). Answers the result and, per message, its
/// encoded length when known (for [`byte_bound`]).
pub(crate) fn decode_assembled(
    params: &AssembleParams,
    sent: &EncodedAssemble,
    reply: &Reply,
) -> Result<(AssembleResult, Vec<Option<u64>>), EngineError> {
    let invalid = |e: &dyn std::fmt::Display| {
        EngineError::failed(format!(
            "contract violation: assemble returned an invalid result: {e}"
        ))
    };
    let Some(text) = reply.raw() else {
        return decode(Method::Assemble, reply).map(|r: AssembleResult| (r, Vec::new()));
    };
    // The pass-through shape: `{"messages":<exactly the array we sent>…` (or the array of
    // references to it). One comparison settles every message; the rest of the object is
    // decoded (and validated) on its own.
    const HEAD: &str = r#"{"messages":"#;
    let sent_array = sent.echo();
    if let Some(after) = text.strip_prefix(HEAD) {
        if !sent_array.is_empty() && after.as_bytes().starts_with(sent_array) {
            let tail = after.get(sent_array.len()..).unwrap_or_default();
            let rest = format!("{HEAD}[]{tail}");
            let mut result: AssembleResult =
                serde_json::from_str(&rest).map_err(|e| invalid(&e))?;
            result.messages = params.messages.clone();
            let lengths = (0..sent.len())
                .map(|i| sent.message(i).map(|m| m.len() as u64))
                .collect();
            return Ok((result, lengths));
        }
    }
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

    let mut index: Option<std::collections::HashMap<&[u8], usize>> = None;
    let mut by_id: Option<std::collections::HashMap<u32, usize>> = None;
    let mut next = 0usize;
    let mut lengths = Vec::with_capacity(got.len());
    result.messages.reserve(got.len());
    for raw in &got {
        let raw = raw.get();
        if let Some(id) = reference(raw).filter(|_| !sent.ids.is_empty()) {
            // A message handed back untouched, by its id: it must be one this call sent.
            let at = if sent.ids.get(next) == Some(&id) {
                Some(next)
            } else {
                by_id
                    .get_or_insert_with(|| {
                        sent.ids
                            .iter()
                            .enumerate()
                            .rev()
                            .map(|(i, id)| (*id, i))
                            .collect()
                    })
                    .get(&id)
                    .copied()
            };
            let Some((i, m)) = at.and_then(|i| params.messages.get(i).map(|m| (i, m))) else {
                return Err(invalid(&format!(
                    "message reference {id} names no message of this call"
                )));
            };
            result.messages.push(m.clone());
            lengths.push(sent.message(i).map(|m| m.len() as u64));
            next = i + 1;
            continue;
        }
        // Most engines keep order (a suffix, a window, summaries then the tail): try the next
        // sent message first, then look the bytes up.
        let found = if sent.message(next) == Some(raw.as_bytes()) {
            Some(next)
        } else {
            index
                .get_or_insert_with(|| {
                    (0..sent.len())
                        .rev()
                        .filter_map(|i| sent.message(i).map(|m| (m, i)))
                        .collect()
                })
                .get(raw.as_bytes())
                .copied()
        };
        match found.and_then(|i| params.messages.get(i).map(|m| (i, m))) {
            Some((i, m)) => {
                result.messages.push(m.clone());
                lengths.push(Some(raw.len() as u64));
                next = i + 1;
            }
            None => {
                let at = result.messages.len();
                let m: AgentMessage =
                    serde_json::from_str(raw).map_err(|e| invalid_message(at, raw, &e))?;
                result.messages.push(m);
                lengths.push(None);
            }
        }
    }
    Ok((result, lengths))
}

/// The violation for message `index` of an assemble result that does not decode: a
/// `toolResult` without a usable `toolCallId` gets the words in-process engines get
/// ([`clawctx_engine::guard::missing_tool_call_id`]); anything else names the index and
/// what the decoder said.
fn invalid_message(index: usize, raw: &str, err: &dyn std::fmt::Display) -> EngineError {
    let value: Option<Value> = serde_json::from_str(raw).ok();
    let role = value
        .as_ref()
        .and_then(|v| v.get("role"))
        .and_then(Value::as_str);
    let id = value
        .as_ref()
        .and_then(|v| v.get("toolCallId"))
        .and_then(Value::as_str);
    if role == Some("toolResult") && id.is_none_or(|id| id.trim().is_empty()) {
        return EngineError::failed(format!(
            "contract violation: {}",
            clawctx_engine::guard::missing_tool_call_id(index)
        ));
    }
    EngineError::failed(format!(
        "contract violation: assemble returned an invalid result: message {index}: {err}"
    ))
}

/// `Some(id)` when `raw` is a message reference: a bare integer, the id of a message this
/// call sent (a message is always an object, so nothing else has this shape).
fn reference(raw: &str) -> Option<u32> {
    raw.parse().ok()
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
/// charges them. `system` messages are left out (see [`check_assembled`]).
/// `known[i]`, when present, is message `i`'s encoded length (measured on the wire).
fn byte_bound(messages: &[clawctx_protocol::AgentMessage], known: &[Option<u64>]) -> u64 {
    messages
        .iter()
        .enumerate()
        .filter(|(_, m)| !is_system(m))
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

/// Whether `m` is a `system`-role message (folded into the system prompt by the runtime).
fn is_system(m: &AgentMessage) -> bool {
    m.role() == "system"
}

/// Checks an assembled context against the invariants every engine keeps: the checks every
/// engine gets ([`clawctx_engine::guard::check_assembled_messages`]: no `toolResult` without
/// a `toolCallId`), every tool result after its call, within `tokenBudget` (estimated with
/// [`clawctx_tokens::messages_tokens`]). `system`-role messages are not counted against
/// `tokenBudget`: the runtime moves them into the system prompt and counts them there, as it
/// does `systemPromptAddition`. `Err` is the violation's description.
pub fn check_assembled(params: &AssembleParams, result: &AssembleResult) -> Result<(), String> {
    check_assembled_with(params, result, &[], true)
}

/// [`check_assembled`] with the encoded lengths of (some of) the result's messages already
/// known, so the byte bound does not serialize them again.
fn check_assembled_with(
    params: &AssembleParams,
    result: &AssembleResult,
    known_lengths: &[Option<u64>],
    enforce_budget: bool,
) -> Result<(), String> {
    clawctx_engine::guard::check_assembled_messages(&result.messages)?;
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
    if let Some(budget) = params.token_budget.filter(|_| enforce_budget) {
        // Every o200k token covers at least one byte, so the byte count bounds the token count:
        // when that bound fits, the exact (much dearer) count is not needed.
        if byte_bound(&result.messages, known_lengths) <= budget {
            return Ok(());
        }
        let tokens =
            clawctx_tokens::messages_tokens(result.messages.iter().filter(|m| !is_system(m)));
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
        let (sent, reply) = self
            .invoke_encoded(Method::Assemble, cx, |instance_id, abortable, refs| {
                encode_assemble(instance_id, params, abortable, refs)
            })
            .await?;
        let (mut result, lengths) = decode_assembled(params, &sent, &reply)?;
        // Size is never a contract violation: OpenClaw quarantines only on a throw. A plugin
        // that lets the host compact (`ownsCompaction: false`), or says its result may overflow
        // (`promptAuthority: "preassembly_may_overflow"`), is clamped here (oldest pairing
        // units first), and the runtime's own preflight compaction then runs as for any
        // history. One that owns compaction is taken at its word, as OpenClaw 2026.9 takes it
        // (`prepareEmbeddedAttemptPromptPreflight` skips the precheck for an owning engine and
        // sends its messages as they are): its result goes on unchanged, the runtime's final
        // clamp keeps the model request within the window. One warning per engine either way.
        let lenient = !self.info.owns_compaction()
            || result.prompt_authority == Some(PromptAuthority::PreassemblyMayOverflow);
        check_assembled_with(params, &result, &lengths, false)
            .map_err(|e| EngineError::failed(format!("contract violation: {e}")))?;
        if let Some(budget) = params.token_budget {
            if check_assembled_with(params, &result, &lengths, true).is_err() {
                let tokens = clawctx_tokens::messages_tokens(
                    result.messages.iter().filter(|m| !is_system(m)),
                );
                if !self
                    .warned_over_budget
                    .swap(true, std::sync::atomic::Ordering::Relaxed)
                {
                    let what = if lenient {
                        "the context is clamped to the budget (the engine lets the host compact)"
                    } else {
                        "it is used as returned, as OpenClaw uses an engine that owns compaction (the model request is still kept within the context window)"
                    };
                    tracing::warn!(
                        engine = %self.engine_id,
                        "context engine \"{}\" returned {tokens} tokens from assemble, over the token budget of {budget}; {what}; not quarantined; warned once",
                        self.engine_id
                    );
                }
                if lenient {
                    let (system, rest): (Vec<_>, Vec<_>) =
                        result.messages.into_iter().partition(is_system);
                    let mut report = Default::default();
                    let mut kept = clawctx_engine::pipeline::fit_budget(rest, budget, &mut report);
                    let mut all = system;
                    all.append(&mut kept);
                    result.estimated_tokens =
                        clawctx_tokens::messages_tokens(all.iter().filter(|m| !is_system(m)));
                    result.messages = all;
                }
            }
        }
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

impl PluginTool {
    /// The tool `decl` of the plugin behind `host`.
    pub fn new(host: Arc<PluginHost>, decl: ToolDecl) -> Self {
        Self { host, decl }
    }
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
            "context": {
                "sessionId": context.session_id,
                "sessionKey": context.session_key,
                "toolCallId": context.tool_call_id,
            },
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
    fn request(params: &AssembleParams) -> EncodedAssemble {
        encode_assemble("1", params, false, None).expect("params encode")
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
    fn the_spliced_request_is_byte_identical_to_the_plain_encoding() {
        let mut p = history();
        p.session_key = Some("agent:main:main".into());
        p.available_tools = Some(vec!["read".into(), "messages".into()]);
        p.citations_mode = Some("on".into());
        p.model = Some("m".into());
        p.prompt = Some(r#"a prompt quoting "messages":[] in text"#.into());
        p.runtime_context = Some(
            serde_json::from_value(json!({"cwd": "/w", "messages": [], "other": {"messages": []}}))
                .expect("runtime context"),
        );
        for (params, abortable) in [
            (p.clone(), true),
            (
                AssembleParams {
                    messages: Vec::new(),
                    ..p.clone()
                },
                false,
            ),
        ] {
            let enc = encode_assemble("inst-\"1\"", &params, abortable, None).expect("encodes");
            let plain = serde_json::to_vec(&EngineCall {
                instance_id: "inst-\"1\"",
                params: &params,
                abortable,
            })
            .expect("encodes");
            assert_eq!(
                String::from_utf8_lossy(&enc.bytes),
                String::from_utf8_lossy(&plain)
            );
            assert_eq!(enc.len(), params.messages.len());
            assert_eq!(
                Some(enc.echo()),
                Some(
                    serde_json::to_vec(&params.messages)
                        .expect("encodes")
                        .as_slice()
                ),
                "range of the messages array"
            );
            for (i, m) in params.messages.iter().enumerate() {
                assert_eq!(
                    enc.message(i),
                    Some(serde_json::to_vec(m).expect("encodes").as_slice()),
                    "range of message {i}"
                );
            }
        }
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
    fn a_pass_through_with_trailing_members_is_decoded_and_validated() {
        let p = history();
        let ok = format!(
            r#"{{"messages":{},"estimatedTokens":3,"x":[1]}}"#,
            serde_json::to_string(&p.messages).expect("encodes")
        );
        let reply = Reply::from_raw(Some(RawValue::from_string(ok).expect("json")));
        let (got, lengths) = decode_assembled(&p, &request(&p), &reply).expect("decodes");
        assert_eq!(
            (got.messages, got.estimated_tokens, lengths.len()),
            (p.messages.clone(), 3, 4)
        );
        // Same prefix, broken tail: must be an invalid result, not a pass-through.
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{{"messages":{},"estimatedTokens":}}}}"#,
            serde_json::to_string(&p.messages).expect("encodes")
        );
        let (_, range) = crate::rpc::tests_support::plain_result(&line).expect("split");
        let err = decode_assembled(
            &p,
            &request(&p),
            &crate::rpc::tests_support::reply_in_line(line.clone(), range),
        )
        .expect_err("a broken tail must not pass");
        assert!(err.to_string().contains("invalid result"), "{err}");
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

    /// The request as the runner reads it with references: `(messageRefs member, the ids in
    /// params.messages)`.
    fn read_ref_request(enc: &EncodedAssemble) -> (Value, Vec<u32>) {
        let v: Value = serde_json::from_slice(&enc.bytes).expect("the request is JSON");
        let ids = serde_json::from_value(v["params"]["messages"].clone()).expect("ids");
        (v["messageRefs"].clone(), ids)
    }

    #[test]
    fn with_references_new_messages_are_defined_once_then_named_by_id() {
        let p = history();
        let mut table = MessageRefs::new(Default::default());
        let first = encode_assemble("1", &p, false, Some(&mut table)).expect("encodes");
        let (house, ids) = read_ref_request(&first);
        assert_eq!(ids, first.ids);
        assert_eq!(
            (&house["reset"], &house["drop"]),
            (&json!(false), &json!([]))
        );
        let defined: Vec<(u32, AgentMessage)> =
            serde_json::from_value(house["define"].clone()).expect("[[id, message], …]");
        let sent: Vec<(u32, AgentMessage)> = ids.iter().copied().zip(p.messages.clone()).collect();
        assert_eq!(defined, sent, "every message is defined on first sight");
        // The next call of the conversation: one message more, the rest only named.
        let mut next = p.clone();
        next.messages.push(AgentMessage::user("a follow-up"));
        let second = encode_assemble("1", &next, false, Some(&mut table)).expect("encodes");
        let (house, ids) = read_ref_request(&second);
        assert_eq!(&ids[..4], &first.ids[..]);
        assert_eq!(
            house["define"],
            json!([[ids[4], next.messages[4]]]),
            "only the new message is defined"
        );
        assert!(
            second.bytes.len() < first.bytes.len() / 2,
            "a referencing request should be small: {} vs {} bytes",
            second.bytes.len(),
            first.bytes.len()
        );
        // The pass-through reply is the array of ids.
        let echo: Vec<u32> = serde_json::from_slice(second.echo()).expect("echo is JSON");
        assert_eq!(echo, ids);
    }

    #[test]
    fn referenced_replies_decode_to_the_sent_messages_and_foreign_ids_are_violations() {
        let p = history();
        let mut table = MessageRefs::new(Default::default());
        let enc = encode_assemble("1", &p, false, Some(&mut table)).expect("encodes");
        let r = |i: usize| json!(enc.ids[i]);
        // The pass-through shape, and a reordered mix with a new message.
        let all = json!({"messages": [r(0), r(1), r(2), r(3)], "estimatedTokens": 9});
        let (got, lengths) = decode_assembled(&p, &enc, &reply(all)).expect("decodes");
        assert_eq!(got.messages, p.messages);
        assert!(lengths.iter().all(Option::is_some));
        let summary = json!({"role": "user", "content": "summary"});
        let mixed = json!({"messages": [summary, r(3), r(1), r(2)], "estimatedTokens": 9});
        let (got, lengths) = decode_assembled(&p, &enc, &reply(mixed)).expect("decodes");
        assert_eq!(
            got.messages,
            vec![
                AgentMessage::user("summary"),
                p.messages[3].clone(),
                p.messages[1].clone(),
                p.messages[2].clone()
            ]
        );
        assert_eq!(lengths[0], None);
        // An id this call did not send (an older message the plugin kept) is not trusted.
        let foreign = json!({"messages": [999_999], "estimatedTokens": 1});
        let err = decode_assembled(&p, &enc, &reply(foreign)).expect_err("foreign id");
        assert!(
            err.to_string().contains("names no message of this call"),
            "{err}"
        );
        // Without references on, the same shape is just an invalid message.
        let plain = request(&p);
        let err = decode_assembled(&p, &plain, &reply(json!({"messages": [1]})))
            .expect_err("not a message");
        assert!(err.to_string().contains("invalid result"), "{err}");
    }

    #[test]
    fn the_budget_check_uses_known_lengths_and_still_catches_overflow() {
        let mut p = history();
        let result = AssembleResult {
            messages: p.messages.clone(),
            ..Default::default()
        };
        p.token_budget = Some(5);
        let err = check_assembled_with(&p, &result, &[Some(1); 4], true).expect_err("over budget");
        assert!(err.contains("over the token budget of 5"), "{err}");
        p.token_budget = Some(10_000);
        check_assembled_with(&p, &result, &[Some(1); 4], true).expect("fits");
    }

    #[test]
    fn system_messages_pass_and_are_not_measured_against_the_budget() {
        let p = history();
        let memories = json!({"role": "system", "content": "memory ".repeat(400)});
        let mut result_json = json!({"messages": [memories], "estimatedTokens": 1});
        result_json["messages"]
            .as_array_mut()
            .expect("array")
            .extend(
                p.messages
                    .iter()
                    .map(|m| serde_json::to_value(m).expect("encodes")),
            );
        let (got, lengths) =
            decode_assembled(&p, &request(&p), &reply(result_json)).expect("decodes");
        assert_eq!(got.messages[0].role(), "system");
        let rest = clawctx_tokens::messages_tokens(&p.messages);
        assert!(clawctx_tokens::messages_tokens(&got.messages) > rest + 300);
        let fits = AssembleParams {
            token_budget: Some(rest),
            ..p.clone()
        };
        check_assembled_with(&fits, &got, &lengths, true).expect("the history alone fits");
        let tight = AssembleParams {
            token_budget: Some(rest - 1),
            ..p
        };
        let err = check_assembled_with(&tight, &got, &lengths, true).expect_err("over budget");
        assert!(err.contains("over the token budget"), "{err}");
    }

    #[test]
    fn a_tool_result_without_a_tool_call_id_is_named_by_index_and_field() {
        let p = history();
        let call = serde_json::to_value(&p.messages[1]).expect("encodes");
        for bad in [
            json!({"role": "toolResult", "toolName": "read", "content": "no id"}),
            json!({"role": "toolResult", "toolCallId": null, "toolName": "read", "content": "null id"}),
            json!({"role": "toolResult", "toolCallId": "", "toolName": "read", "content": "empty id"}),
        ] {
            let result = json!({"messages": [p.messages[0], call, bad], "estimatedTokens": 1});
            let outcome =
                decode_assembled(&p, &request(&p), &reply(result)).and_then(|(got, lengths)| {
                    check_assembled_with(&p, &got, &lengths, true)
                        .map_err(|e| EngineError::failed(format!("contract violation: {e}")))
                });
            let err = outcome.expect_err("a violation").to_string();
            assert_eq!(
                err,
                format!(
                    "contract violation: {}",
                    clawctx_engine::guard::missing_tool_call_id(2)
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn an_undecodable_message_is_named_by_its_index() {
        let p = history();
        let result = json!({"messages": [p.messages[0], {"role": "user", "content": 5}], "estimatedTokens": 1});
        let err = decode_assembled(&p, &request(&p), &reply(result)).expect_err("invalid");
        assert!(
            err.to_string().starts_with(
                "contract violation: assemble returned an invalid result: message 1: "
            ),
            "{err}"
        );
    }
}
