//! The Anthropic Messages provider (`api: "anthropic-messages"`).
//!
//! Differs from Chat Completions in ways that matter for conversion: the system prompt is a
//! top-level field, tool calls and results are content blocks (`tool_use` / `tool_result`)
//! inside assistant and user turns, consecutive same-role turns are merged, and `max_tokens` is
//! required.
//!
//! Anthropic caches a prompt only up to explicit `cache_control` breakpoints (at most four a
//! request), so every request carries them (see [`AnthropicProvider::request_body`]): on the
//! system prompt (sent as a block array; on the last tool when there is no system prompt),
//! at the end of the stable history (the last message before what depends on the current
//! prompt, [`stable_prefix_len`]), and at the end of the request (which the next call of a
//! tool loop extends). The usage's `cache_creation_input_tokens` and `cache_read_input_tokens`
//! are read into `cacheWrite` and `cacheRead`.

use std::collections::BTreeMap;

use async_trait::async_trait;
use clawctx_protocol::{
    AgentMessage, Content, ContentBlock, JsonMap, ThinkingContent, ToolCall, Usage,
};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::error::{classify_stream_error, excerpt};
use crate::http::{self, ApiKey, HttpSettings};
use crate::types::{MessageParts, Sink};
use crate::wire::{bash_text, content_text, summary_text};
use crate::{
    Completion, CompletionRequest, EventSender, ModelError, ModelProvider, StopReason, StreamEvent,
};

/// The API family string for this provider.
pub const ANTHROPIC_API: &str = "anthropic-messages";
/// Default base URL when none is configured.
pub const DEFAULT_ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// The `anthropic-version` header value sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// `max_tokens` when neither the request nor the model config gives one.
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// Calls `<baseUrl>/v1/messages`.
#[derive(Debug)]
pub struct AnthropicProvider {
    id: String,
    base_url: String,
    api_key: Option<ApiKey>,
    default_max_tokens: u64,
    settings: HttpSettings,
    client: reqwest::Client,
}

impl AnthropicProvider {
    /// A provider with id `id` at `base_url` (without `/v1`).
    pub fn new(
        id: impl Into<String>,
        base_url: impl Into<String>,
        api_key: Option<ApiKey>,
        settings: HttpSettings,
    ) -> Result<Self, ModelError> {
        let id = id.into();
        let client = http::build_client(&settings, &id)?;
        Ok(Self {
            id,
            base_url: base_url.into(),
            api_key,
            default_max_tokens: DEFAULT_MAX_TOKENS,
            settings,
            client,
        })
    }

    /// The `max_tokens` sent when a request has none (the model's configured `maxTokens`).
    pub fn with_default_max_tokens(mut self, max: u64) -> Self {
        self.default_max_tokens = max;
        self
    }

    /// The JSON body this provider sends for `request`.
    pub fn request_body(&self, request: &CompletionRequest, stream: bool) -> Value {
        let mut body = JsonMap::new();
        body.insert("model".into(), Value::String(request.model.clone()));
        body.insert(
            "max_tokens".into(),
            Value::from(request.max_output_tokens.unwrap_or(self.default_max_tokens)),
        );
        let system = request.system_prompt.as_deref().filter(|s| !s.is_empty());
        if let Some(system) = system {
            body.insert(
                "system".into(),
                json!([{"type": "text", "text": system, "cache_control": ephemeral()}]),
            );
        }
        let (mut turns, ends) = wire_turns(&request.messages);
        // The end of the stable history, then the end of the request.
        let stable = stable_prefix_len(&request.messages);
        let mut marks: Vec<(usize, usize)> = Vec::new();
        for end in [
            stable.checked_sub(1).and_then(|i| ends[i]),
            ends.last().copied().flatten(),
        ]
        .into_iter()
        .flatten()
        {
            if let Some(at) = markable_at_or_before(&turns, end) {
                if !marks.contains(&at) {
                    marks.push(at);
                }
            }
        }
        for (t, b) in marks {
            if let Some(Value::Object(block)) = turns.get_mut(t).and_then(|(_, bs)| bs.get_mut(b)) {
                block.insert("cache_control".into(), ephemeral());
            }
        }
        body.insert(
            "messages".into(),
            Value::Array(
                turns
                    .into_iter()
                    .map(|(role, content)| json!({"role": role, "content": content}))
                    .collect(),
            ),
        );
        if !request.tools.is_empty() {
            let mut tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
                .collect();
            if system.is_none() {
                if let Some(Value::Object(last)) = tools.last_mut() {
                    last.insert("cache_control".into(), ephemeral());
                }
            }
            body.insert("tools".into(), Value::Array(tools));
        }
        if let Some(t) = request.temperature {
            body.insert("temperature".into(), json!(t));
        }
        if let Some(v) = request.sampling.top_p {
            body.insert("top_p".into(), json!(v));
        }
        if !request.sampling.stop.is_empty() {
            body.insert("stop_sequences".into(), json!(request.sampling.stop));
        }
        if let Some(c) = request
            .sampling
            .tool_choice
            .as_ref()
            .filter(|_| !request.tools.is_empty())
        {
            body.insert("tool_choice".into(), c.anthropic());
        }
        if stream {
            body.insert("stream".into(), Value::Bool(true));
        }
        Value::Object(body)
    }

    async fn attempt(
        &self,
        request: &CompletionRequest,
        sink: &Sink<'_>,
    ) -> Result<Completion, ModelError> {
        let stream = sink.is_streaming();
        let mut builder = self
            .client
            .post(http::join_url(&self.base_url, "v1/messages"))
            .header("anthropic-version", ANTHROPIC_VERSION)
            .json(&self.request_body(request, stream));
        if let Some(key) = &self.api_key {
            builder = builder.header("x-api-key", key.expose());
        }
        let response = http::send(&self.id, builder).await?;
        let parts = if stream {
            self.read_stream(response, sink).await?
        } else {
            parse_response(&self.id, &http::read_json(&self.id, response).await?)?
        };
        Ok(parts.into_completion(ANTHROPIC_API, &self.id, &request.model))
    }

    async fn read_stream(
        &self,
        response: reqwest::Response,
        sink: &Sink<'_>,
    ) -> Result<MessageParts, ModelError> {
        let mut acc = StreamAccumulator::default();
        let done = http::read_sse(&self.id, response, |ev| {
            if ev.data.trim().is_empty() {
                return Ok(false);
            }
            let v = http::parse_event_json(&self.id, &ev.data)?;
            let kind = v
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or(ev.event.as_str())
                .to_owned();
            acc.push(&self.id, &kind, &v, sink)
        })
        .await?;
        if !done {
            return Err(ModelError::BadResponse {
                provider: self.id.clone(),
                message: format!(
                    "stream ended before message_stop; received so far: {}",
                    excerpt(&acc.text_so_far())
                ),
            });
        }
        let parts = acc.into_parts(&self.id)?;
        sink.emit(StreamEvent::Done {
            stop_reason: parts.stop_reason,
            usage: crate::types::finish_usage(parts.usage.clone()),
        });
        Ok(parts)
    }
}

#[async_trait]
impl ModelProvider for AnthropicProvider {
    fn id(&self) -> &str {
        &self.id
    }

    fn api(&self) -> &str {
        ANTHROPIC_API
    }

    async fn complete(
        &self,
        request: CompletionRequest,
        events: Option<&EventSender>,
        cancel: &CancellationToken,
    ) -> Result<Completion, ModelError> {
        let sink = Sink::new(events);
        http::run_with_retry(&self.id, &self.settings, &sink, cancel, || {
            self.attempt(&request, &sink)
        })
        .await
    }
}

/// Anthropic accepts only `[A-Za-z0-9_-]` in tool ids; ids made by other providers (e.g.
/// `call_abc|fc_1`) are mapped onto that alphabet, the same way for a call and its result.
fn tool_id(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

fn user_blocks(content: &Content) -> Vec<Value> {
    match content {
        Content::Text(t) => vec![text_block(t)],
        Content::Blocks(blocks) => blocks
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text(t) => Some(text_block(&t.text)),
                ContentBlock::Image(i) => {
                    Some(json!({"type": "image", "source": {"type": "base64", "media_type": i.mime_type, "data": i.data}}))
                }
                _ => None,
            })
            .collect(),
    }
}

/// `cache_control` of a breakpoint (the default 5-minute lifetime).
fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// Messages at the front of `messages` that do not depend on the current prompt: all of them
/// up to the last user message (the turn's prompt, which tool calls and results of the turn
/// may follow), less a context engine's per-prompt block right before it (a user message
/// opening with `<recalled`, the lossless engine's prompt recall, which changes with every
/// prompt). The history up to there is what the next turn sends again unchanged, so a
/// breakpoint at its end is what the next turn reads.
pub fn stable_prefix_len(messages: &[AgentMessage]) -> usize {
    let Some(prompt) = messages
        .iter()
        .rposition(|m| matches!(m, AgentMessage::User(_)))
    else {
        return messages.len();
    };
    let recalled = prompt.checked_sub(1).and_then(|i| match &messages[i] {
        AgentMessage::User(u) => Some(i).filter(|_| {
            crate::wire::content_text(&u.content)
                .trim_start()
                .starts_with("<recalled")
        }),
        _ => None,
    });
    recalled.unwrap_or(prompt)
}

/// The last block at or before `at` (turn, block) that may carry `cache_control` (not an
/// empty text block).
fn markable_at_or_before(
    turns: &[(&'static str, Vec<Value>)],
    at: (usize, usize),
) -> Option<(usize, usize)> {
    let (mut t, mut b) = at;
    loop {
        let block = turns.get(t)?.1.get(b)?;
        let empty_text = block.get("type").and_then(Value::as_str) == Some("text")
            && block
                .get("text")
                .and_then(Value::as_str)
                .is_some_and(str::is_empty);
        if !empty_text {
            return Some((t, b));
        }
        if b > 0 {
            b -= 1;
        } else {
            t = t.checked_sub(1)?;
            b = turns.get(t)?.1.len().checked_sub(1)?;
        }
    }
}

/// Converts messages to Anthropic turns, merging consecutive turns of the same role (tool
/// results that follow one assistant turn become one user turn).
#[cfg(test)]
pub(crate) fn to_wire_messages(messages: &[AgentMessage]) -> Vec<Value> {
    wire_turns(messages)
        .0
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

/// Where a message ends in the turns: (turn, block) of its last block, or of the last block
/// before it when it had none.
type WireEnds = Vec<Option<(usize, usize)>>;

/// [`to_wire_messages`] before the turns are made JSON, with where each message ends.
fn wire_turns(messages: &[AgentMessage]) -> (Vec<(&'static str, Vec<Value>)>, WireEnds) {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut ends: WireEnds = Vec::with_capacity(messages.len());
    for message in messages {
        let (role, blocks): (&'static str, Vec<Value>) = match message {
            AgentMessage::User(m) => ("user", user_blocks(&m.content)),
            AgentMessage::Custom(m) => ("user", user_blocks(&m.content)),
            AgentMessage::Assistant(m) => {
                let blocks = m
                    .content
                    .blocks()
                    .into_iter()
                    .filter_map(|b| match b {
                        ContentBlock::Text(t) if !t.text.is_empty() => Some(text_block(&t.text)),
                        ContentBlock::ToolCall(c) => {
                            let input = match c.arguments {
                                Value::Object(_) => c.arguments,
                                Value::String(s) => serde_json::from_str(&s).unwrap_or_else(|_| json!({})),
                                _ => json!({}),
                            };
                            Some(json!({"type": "tool_use", "id": tool_id(&c.id), "name": c.name, "input": input}))
                        }
                        _ => None,
                    })
                    .collect();
                ("assistant", blocks)
            }
            AgentMessage::ToolResult(m) => {
                let mut result = JsonMap::new();
                result.insert("type".into(), json!("tool_result"));
                result.insert("tool_use_id".into(), json!(tool_id(&m.tool_call_id)));
                let content = user_blocks(&m.content);
                result.insert(
                    "content".into(),
                    if content.is_empty() {
                        json!(content_text(&m.content))
                    } else {
                        Value::Array(content)
                    },
                );
                if m.is_error == Some(true) {
                    result.insert("is_error".into(), Value::Bool(true));
                }
                ("user", vec![Value::Object(result)])
            }
            AgentMessage::BashExecution(m) => ("user", vec![text_block(&bash_text(m))]),
            AgentMessage::CompactionSummary(_) | AgentMessage::BranchSummary(_) => {
                ("user", vec![text_block(&summary_text(message))])
            }
            AgentMessage::Other(_) => ("user", vec![text_block(&message.plain_text())]),
        };
        if !blocks.is_empty() {
            match turns.last_mut() {
                Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
                _ => turns.push((role, blocks)),
            }
        }
        ends.push(
            turns
                .len()
                .checked_sub(1)
                .and_then(|t| Some((t, turns[t].1.len().checked_sub(1)?))),
        );
    }
    (turns, ends)
}

fn stop_reason(reason: Option<&str>) -> (StopReason, Option<String>) {
    match reason {
        Some("max_tokens") => (StopReason::Length, None),
        Some("tool_use") => (StopReason::ToolUse, None),
        Some("refusal") => (
            StopReason::Error,
            Some("the model refused to answer".into()),
        ),
        _ => (StopReason::Stop, None),
    }
}

fn add_usage(usage: &mut Usage, u: &Value) {
    let n = |k: &str| u.get(k).and_then(Value::as_u64);
    if let Some(v) = n("input_tokens") {
        usage.input = v;
    }
    if let Some(v) = n("output_tokens") {
        usage.output = v;
    }
    if let Some(v) = n("cache_read_input_tokens") {
        usage.cache_read = v;
    }
    if let Some(v) = n("cache_creation_input_tokens") {
        usage.cache_write = v;
    }
}

fn parse_input(provider: &str, name: &str, raw: &str) -> Result<Value, ModelError> {
    if raw.trim().is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_str(raw).map_err(|e| ModelError::BadResponse {
        provider: provider.to_owned(),
        message: format!(
            "input of tool call `{name}` is not JSON ({e}): {}",
            excerpt(raw)
        ),
    })
}

fn tool_call(id: String, name: String, arguments: Value) -> ContentBlock {
    ContentBlock::ToolCall(ToolCall {
        id,
        name,
        arguments,
        thought_signature: None,
        extra: JsonMap::new(),
    })
}

fn thinking(text: String, signature: Option<String>) -> ContentBlock {
    ContentBlock::Thinking(ThinkingContent {
        thinking: text,
        thinking_signature: signature,
        extra: JsonMap::new(),
    })
}

/// Parses a non-streaming response.
fn parse_response(provider: &str, v: &Value) -> Result<MessageParts, ModelError> {
    if v.get("type").and_then(Value::as_str) == Some("error") {
        return Err(classify_stream_error(provider, &v.to_string()));
    }
    let content =
        v.get("content")
            .and_then(Value::as_array)
            .ok_or_else(|| ModelError::BadResponse {
                provider: provider.to_owned(),
                message: format!("response has no content array: {}", excerpt(&v.to_string())),
            })?;
    let mut blocks = Vec::new();
    for block in content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => blocks.push(ContentBlock::text(
                block
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            )),
            Some("thinking") => blocks.push(thinking(
                block
                    .get("thinking")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                block
                    .get("signature")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            )),
            Some("tool_use") => blocks.push(tool_call(
                block
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                block
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                block.get("input").cloned().unwrap_or_else(|| json!({})),
            )),
            _ => {}
        }
    }
    let mut usage = Usage::default();
    if let Some(u) = v.get("usage") {
        add_usage(&mut usage, u);
    }
    let (stop_reason, error_message) = stop_reason(v.get("stop_reason").and_then(Value::as_str));
    Ok(MessageParts {
        blocks,
        usage,
        stop_reason,
        error_message,
        response_id: v.get("id").and_then(Value::as_str).map(str::to_owned),
    })
}

/// One content block being streamed.
enum PartialBlock {
    Text(String),
    Thinking {
        text: String,
        signature: Option<String>,
    },
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
}

/// Accumulates `message_start` / `content_block_*` / `message_delta` events.
#[derive(Default)]
struct StreamAccumulator {
    blocks: BTreeMap<u64, PartialBlock>,
    usage: Usage,
    stop: Option<String>,
    id: Option<String>,
    tool_index: usize,
}

impl StreamAccumulator {
    /// Handles one event; `Ok(true)` on `message_stop`.
    fn push(
        &mut self,
        provider: &str,
        kind: &str,
        v: &Value,
        sink: &Sink<'_>,
    ) -> Result<bool, ModelError> {
        match kind {
            "message_start" => {
                self.id = v
                    .pointer("/message/id")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                if let Some(u) = v.pointer("/message/usage") {
                    add_usage(&mut self.usage, u);
                }
            }
            "content_block_start" => {
                let index = v
                    .get("index")
                    .and_then(Value::as_u64)
                    .unwrap_or(self.blocks.len() as u64);
                let block = v.get("content_block").cloned().unwrap_or(Value::Null);
                let s = |k: &str| {
                    block
                        .get(k)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                let partial = match block.get("type").and_then(Value::as_str) {
                    Some("tool_use") => {
                        sink.emit(StreamEvent::ToolCallStart {
                            index: self.tool_index,
                            id: s("id"),
                            name: s("name"),
                        });
                        self.tool_index += 1;
                        PartialBlock::ToolUse {
                            id: s("id"),
                            name: s("name"),
                            json: String::new(),
                        }
                    }
                    Some("thinking") => PartialBlock::Thinking {
                        text: s("thinking"),
                        signature: None,
                    },
                    _ => PartialBlock::Text(s("text")),
                };
                self.blocks.insert(index, partial);
            }
            "content_block_delta" => {
                let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                let delta = v.get("delta").cloned().unwrap_or(Value::Null);
                let s = |k: &str| {
                    delta
                        .get(k)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                let tool_position = self
                    .blocks
                    .range(..index)
                    .filter(|(_, b)| matches!(b, PartialBlock::ToolUse { .. }))
                    .count();
                match (
                    self.blocks.get_mut(&index),
                    delta.get("type").and_then(Value::as_str),
                ) {
                    (Some(PartialBlock::Text(t)), Some("text_delta")) => {
                        let piece = s("text");
                        t.push_str(&piece);
                        sink.emit(StreamEvent::TextDelta(piece));
                    }
                    (Some(PartialBlock::Thinking { text, .. }), Some("thinking_delta")) => {
                        let piece = s("thinking");
                        text.push_str(&piece);
                        sink.emit(StreamEvent::ThinkingDelta(piece));
                    }
                    (Some(PartialBlock::Thinking { signature, .. }), Some("signature_delta")) => {
                        signature
                            .get_or_insert_with(String::new)
                            .push_str(&s("signature"));
                    }
                    (Some(PartialBlock::ToolUse { json, .. }), Some("input_json_delta")) => {
                        let piece = s("partial_json");
                        json.push_str(&piece);
                        sink.emit(StreamEvent::ToolCallDelta {
                            index: tool_position,
                            fragment: piece,
                        });
                    }
                    (None, _) => {
                        return Err(ModelError::BadResponse {
                            provider: provider.to_owned(),
                            message: format!(
                                "delta for block {index} that never started: {}",
                                excerpt(&v.to_string())
                            ),
                        })
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(r) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop = Some(r.to_owned());
                }
                if let Some(u) = v.get("usage") {
                    add_usage(&mut self.usage, u);
                }
            }
            "message_stop" => return Ok(true),
            "error" => return Err(classify_stream_error(provider, &v.to_string())),
            _ => {} // ping, content_block_stop, future event types
        }
        Ok(false)
    }

    fn text_so_far(&self) -> String {
        self.blocks
            .values()
            .filter_map(|b| match b {
                PartialBlock::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    fn into_parts(self, provider: &str) -> Result<MessageParts, ModelError> {
        let mut blocks = Vec::new();
        for (_, b) in self.blocks {
            match b {
                PartialBlock::Text(t) if !t.is_empty() => blocks.push(ContentBlock::text(t)),
                PartialBlock::Text(_) => {}
                PartialBlock::Thinking { text, signature } => {
                    blocks.push(thinking(text, signature))
                }
                PartialBlock::ToolUse { id, name, json } => {
                    let input = parse_input(provider, &name, &json)?;
                    blocks.push(tool_call(id, name, input));
                }
            }
        }
        let (stop_reason, error_message) = stop_reason(self.stop.as_deref());
        Ok(MessageParts {
            blocks,
            usage: self.usage,
            stop_reason,
            error_message,
            response_id: self.id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_tool_ids_are_mapped_consistently() {
        let wire = to_wire_messages(&[
            AgentMessage::tool_call("call_1|fc.2", "ls", json!({})),
            AgentMessage::tool_result("call_1|fc.2", "ls", "a.rs"),
        ]);
        assert_eq!(wire[0]["content"][0]["id"], "call_1_fc_2");
        assert_eq!(wire[1]["content"][0]["tool_use_id"], "call_1_fc_2");
    }

    #[test]
    fn merges_tool_results_into_one_user_turn() {
        let wire = to_wire_messages(&[
            AgentMessage::user("go"),
            AgentMessage::Assistant(clawctx_protocol::AssistantMessage {
                content: Content::Blocks(vec![
                    ContentBlock::ToolCall(ToolCall {
                        id: "a".into(),
                        name: "read".into(),
                        arguments: json!({"p": 1}),
                        thought_signature: None,
                        extra: JsonMap::new(),
                    }),
                    ContentBlock::ToolCall(ToolCall {
                        id: "b".into(),
                        name: "read".into(),
                        arguments: json!({"p": 2}),
                        thought_signature: None,
                        extra: JsonMap::new(),
                    }),
                ]),
                ..Default::default()
            }),
            AgentMessage::tool_result("a", "read", "one"),
            AgentMessage::tool_result("b", "read", "two"),
            AgentMessage::user("and?"),
        ]);
        assert_eq!(wire.len(), 3);
        assert_eq!(
            wire[1]["content"][1],
            json!({"type": "tool_use", "id": "b", "name": "read", "input": {"p": 2}})
        );
        assert_eq!(wire[2]["content"][0]["type"], "tool_result");
        assert_eq!(wire[2]["content"][1]["tool_use_id"], "b");
        assert_eq!(
            wire[2]["content"][2],
            json!({"type": "text", "text": "and?"})
        );
    }
}

#[cfg(test)]
mod sampling_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{Sampling, ToolChoice, ToolSpec};

    #[test]
    fn sampling_and_tool_choice_in_anthropics_terms() {
        let p = AnthropicProvider::new("a", "http://127.0.0.1:9", None, HttpSettings::default())
            .unwrap();
        let request = CompletionRequest {
            model: "m".into(),
            messages: vec![AgentMessage::user("hi")],
            tools: vec![ToolSpec {
                name: "get_weather".into(),
                description: String::new(),
                parameters: json!({"type": "object"}),
            }],
            sampling: Sampling {
                top_p: Some(0.5),
                stop: vec!["END".into()],
                seed: Some(3),
                presence_penalty: Some(0.1),
                frequency_penalty: None,
                tool_choice: Some(ToolChoice::Required),
            },
            ..Default::default()
        };
        let body = p.request_body(&request, false);
        assert_eq!(body["top_p"], 0.5);
        assert_eq!(body["stop_sequences"], json!(["END"]));
        assert_eq!(body["tool_choice"], json!({"type": "any"}));
        assert!(
            body.get("seed").is_none() && body.get("presence_penalty").is_none(),
            "Anthropic has neither: {body}"
        );
        let named = CompletionRequest {
            sampling: Sampling {
                tool_choice: Some(ToolChoice::Tool("get_weather".into())),
                ..Default::default()
            },
            ..request.clone()
        };
        assert_eq!(
            p.request_body(&named, false)["tool_choice"],
            json!({"type": "tool", "name": "get_weather"})
        );
        let no_tools = CompletionRequest {
            tools: Vec::new(),
            ..named
        };
        assert!(
            p.request_body(&no_tools, false)
                .get("tool_choice")
                .is_none(),
            "no tool_choice without tools"
        );
    }
}

#[cfg(test)]
mod cache_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn provider() -> AnthropicProvider {
        AnthropicProvider::new("a", "http://127.0.0.1:9", None, HttpSettings::default()).unwrap()
    }

    /// (turn, block) of every block carrying `cache_control`.
    fn marks(body: &Value) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for (t, turn) in body["messages"].as_array().unwrap().iter().enumerate() {
            for (b, block) in turn["content"].as_array().unwrap().iter().enumerate() {
                if block.get("cache_control").is_some() {
                    out.push((t, b));
                }
            }
        }
        out
    }

    #[test]
    fn breakpoints_on_the_system_prompt_the_stable_history_and_the_end() {
        let recalled =
            AgentMessage::user("<recalled note=\"x\">\n[msg_1 user] old words\n</recalled>");
        let request = CompletionRequest {
            model: "m".into(),
            system_prompt: Some("be terse".into()),
            messages: vec![
                AgentMessage::user("first question"),
                AgentMessage::assistant("first answer"),
                recalled,
                AgentMessage::user("second question"),
            ],
            ..Default::default()
        };
        let body = provider().request_body(&request, false);
        assert_eq!(
            body["system"],
            json!([{"type": "text", "text": "be terse", "cache_control": {"type": "ephemeral"}}])
        );
        // The recalled block and the prompt merge into the last user turn; the stable history
        // ends with the first answer, the request with the prompt.
        assert_eq!(marks(&body), [(1, 0), (2, 1)], "{body}");
        assert_eq!(
            stable_prefix_len(&request.messages),
            2,
            "the recalled block is not stable"
        );
    }

    #[test]
    fn a_tool_loop_keeps_the_stable_mark_before_the_prompt_and_marks_the_last_result() {
        let request = CompletionRequest {
            model: "m".into(),
            messages: vec![
                AgentMessage::user("q1"),
                AgentMessage::assistant("a1"),
                AgentMessage::user("read it"),
                AgentMessage::tool_call("c1", "read", json!({})),
                AgentMessage::tool_result("c1", "read", "contents"),
            ],
            tools: vec![crate::ToolSpec {
                name: "read".into(),
                description: String::new(),
                parameters: json!({"type": "object"}),
            }],
            ..Default::default()
        };
        let body = provider().request_body(&request, false);
        assert_eq!(marks(&body), [(1, 0), (4, 0)], "{body}");
        // No system prompt: the tools carry the first breakpoint.
        assert!(body.get("system").is_none());
        assert_eq!(
            body["tools"][0]["cache_control"],
            json!({"type": "ephemeral"})
        );
        let total = marks(&body).len() + 1;
        assert!(total <= 4, "{total} breakpoints");
    }

    #[test]
    fn a_single_prompt_is_marked_once() {
        let request = CompletionRequest {
            model: "m".into(),
            system_prompt: Some("s".into()),
            messages: vec![AgentMessage::user("hello")],
            ..Default::default()
        };
        let body = provider().request_body(&request, false);
        assert_eq!(marks(&body), [(0, 0)], "{body}");
    }
}
