//! The OpenAI-compatible Chat Completions provider (`api: "openai-completions"`).
//!
//! One wire format covers OpenAI itself and the local servers that copy it (vLLM, llama.cpp
//! server, Ollama), so the conversion stays conservative: text-only user content is sent as a
//! plain string, thinking blocks are dropped, and roles those servers do not know become user
//! text.

use std::collections::BTreeMap;

use async_trait::async_trait;
use clawctx_protocol::{AgentMessage, Content, ContentBlock, JsonMap, ToolCall, Usage};
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
pub const OPENAI_API: &str = "openai-completions";
/// Default base URL when none is configured (OpenAI itself).
pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// Calls `<baseUrl>/chat/completions`.
#[derive(Debug)]
pub struct OpenAiProvider {
    id: String,
    base_url: String,
    api_key: Option<ApiKey>,
    max_tokens_field: String,
    send_cache_key: bool,
    settings: HttpSettings,
    client: reqwest::Client,
}

impl OpenAiProvider {
    /// A provider with id `id` at `base_url` (e.g. `http://127.0.0.1:8000/v1`).
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
            max_tokens_field: "max_tokens".into(),
            send_cache_key: true,
            settings,
            client,
        })
    }

    /// Sends the output limit under another name (`max_completion_tokens` for OpenAI reasoning
    /// models).
    pub fn with_max_tokens_field(mut self, field: impl Into<String>) -> Self {
        self.max_tokens_field = field.into();
        self
    }

    /// Whether requests carry their `cache_key` as `prompt_cache_key` (default on; off for a
    /// compatible server that rejects fields it does not know: `promptCacheKey: false`).
    pub fn with_prompt_cache_key(mut self, send: bool) -> Self {
        self.send_cache_key = send;
        self
    }

    /// The JSON body this provider sends for `request` (public so tests and `doctor` can show it).
    pub fn request_body(&self, request: &CompletionRequest, stream: bool) -> Value {
        let mut body = JsonMap::new();
        body.insert("model".into(), Value::String(request.model.clone()));
        body.insert("messages".into(), Value::Array(to_wire_messages(request)));
        if !request.tools.is_empty() {
            let tools = request
                .tools
                .iter()
                .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
                .collect();
            body.insert("tools".into(), Value::Array(tools));
        }
        if let Some(max) = request.max_output_tokens {
            body.insert(self.max_tokens_field.clone(), Value::from(max));
        }
        if let Some(t) = request.temperature {
            body.insert("temperature".into(), json!(t));
        }
        let sampling = &request.sampling;
        if let Some(v) = sampling.top_p {
            body.insert("top_p".into(), json!(v));
        }
        if !sampling.stop.is_empty() {
            body.insert("stop".into(), json!(sampling.stop));
        }
        if let Some(v) = sampling.seed {
            body.insert("seed".into(), json!(v));
        }
        if let Some(v) = sampling.presence_penalty {
            body.insert("presence_penalty".into(), json!(v));
        }
        if let Some(v) = sampling.frequency_penalty {
            body.insert("frequency_penalty".into(), json!(v));
        }
        if let Some(c) = sampling
            .tool_choice
            .as_ref()
            .filter(|_| !request.tools.is_empty())
        {
            body.insert("tool_choice".into(), c.openai());
        }
        if let Some(key) = request.cache_key.as_ref().filter(|_| self.send_cache_key) {
            // Routes the session's requests to the same prompt cache (OpenAI's prompt caching
            // guide); compatible servers ignore it.
            body.insert("prompt_cache_key".into(), Value::String(key.clone()));
        }
        if stream {
            body.insert("stream".into(), Value::Bool(true));
            body.insert("stream_options".into(), json!({"include_usage": true}));
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
            .post(http::join_url(&self.base_url, "chat/completions"))
            .json(&self.request_body(request, stream));
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key.expose());
        }
        let response = http::send(&self.id, builder).await?;
        let parts = if stream {
            self.read_stream(response, sink).await?
        } else {
            parse_response(&self.id, &http::read_json(&self.id, response).await?)?
        };
        Ok(parts.into_completion(OPENAI_API, &self.id, &request.model))
    }

    async fn read_stream(
        &self,
        response: reqwest::Response,
        sink: &Sink<'_>,
    ) -> Result<MessageParts, ModelError> {
        let mut acc = StreamAccumulator::default();
        let done = http::read_sse(&self.id, response, |ev| {
            let data = ev.data.trim();
            if data == "[DONE]" {
                return Ok(true);
            }
            if data.is_empty() {
                return Ok(false);
            }
            let chunk = http::parse_event_json(&self.id, data)?;
            if let Some(err) = chunk.get("error") {
                return Err(classify_stream_error(
                    &self.id,
                    &json!({"error": err}).to_string(),
                ));
            }
            acc.push(&chunk, sink);
            Ok(false)
        })
        .await?;
        if !done && acc.finish_reason.is_none() {
            return Err(ModelError::BadResponse {
                provider: self.id.clone(),
                message: format!(
                    "stream ended before the reply was finished; received so far: {}",
                    excerpt(&acc.text)
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
impl ModelProvider for OpenAiProvider {
    fn id(&self) -> &str {
        &self.id
    }

    fn api(&self) -> &str {
        OPENAI_API
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

/// Converts the request's system prompt and messages to Chat Completions messages.
pub(crate) fn to_wire_messages(request: &CompletionRequest) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(system) = request.system_prompt.as_deref().filter(|s| !s.is_empty()) {
        out.push(json!({"role": "system", "content": system}));
    }
    for message in &request.messages {
        match message {
            AgentMessage::User(m) => {
                out.push(json!({"role": "user", "content": user_content(&m.content)}))
            }
            AgentMessage::Custom(m) => {
                out.push(json!({"role": "user", "content": user_content(&m.content)}))
            }
            AgentMessage::Assistant(m) => {
                let mut text = String::new();
                let mut calls = Vec::new();
                for block in m.content.blocks() {
                    match block {
                        ContentBlock::Text(t) => text.push_str(&t.text),
                        ContentBlock::ToolCall(c) => calls.push(json!({
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": arguments_string(&c.arguments)},
                        })),
                        ContentBlock::Thinking(_) | ContentBlock::Image(_) | ContentBlock::Unknown(_) => {}
                    }
                }
                if text.is_empty() && calls.is_empty() {
                    continue;
                }
                let mut wire = JsonMap::new();
                wire.insert("role".into(), json!("assistant"));
                wire.insert(
                    "content".into(),
                    if text.is_empty() {
                        Value::Null
                    } else {
                        Value::String(text)
                    },
                );
                if !calls.is_empty() {
                    wire.insert("tool_calls".into(), Value::Array(calls));
                }
                out.push(Value::Object(wire));
            }
            AgentMessage::ToolResult(m) => {
                out.push(json!({"role": "tool", "tool_call_id": m.tool_call_id, "content": content_text(&m.content)}));
            }
            AgentMessage::BashExecution(m) => {
                out.push(json!({"role": "user", "content": bash_text(m)}))
            }
            AgentMessage::CompactionSummary(_) | AgentMessage::BranchSummary(_) => {
                out.push(json!({"role": "user", "content": summary_text(message)}))
            }
            AgentMessage::Other(_) => {
                out.push(json!({"role": "user", "content": message.plain_text()}))
            }
        }
    }
    out
}

/// Tool-call arguments as the JSON string the wire format wants.
fn arguments_string(arguments: &Value) -> String {
    match arguments {
        Value::String(s) => s.clone(),
        Value::Null => "{}".into(),
        other => other.to_string(),
    }
}

/// User content: a plain string when it is text only (every compatible server accepts that),
/// otherwise text and `image_url` parts.
fn user_content(content: &Content) -> Value {
    let blocks = match content {
        Content::Text(t) => return Value::String(t.clone()),
        Content::Blocks(b) => b,
    };
    if !blocks.iter().any(|b| matches!(b, ContentBlock::Image(_))) {
        return Value::String(content_text(content));
    }
    let parts = blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) => Some(json!({"type": "text", "text": t.text})),
            ContentBlock::Image(i) => {
                Some(json!({"type": "image_url", "image_url": {"url": format!("data:{};base64,{}", i.mime_type, i.data)}}))
            }
            _ => None,
        })
        .collect();
    Value::Array(parts)
}

fn finish_reason(reason: Option<&str>) -> (StopReason, Option<String>) {
    match reason {
        Some("stop") | None => (StopReason::Stop, None),
        Some("length") => (StopReason::Length, None),
        Some("tool_calls") | Some("function_call") => (StopReason::ToolUse, None),
        Some("content_filter") => (
            StopReason::Error,
            Some("the provider's content filter stopped the reply".into()),
        ),
        // Servers invent their own values ("eos", "end_turn"): a finished reply all the same.
        Some(_) => (StopReason::Stop, None),
    }
}

/// Usage from an OpenAI `usage` object. Cached prompt tokens are reported as `cacheRead` and
/// not counted again in `input`.
fn parse_usage(v: Option<&Value>) -> Usage {
    let Some(u) = v.filter(|u| u.is_object()) else {
        return Usage::default();
    };
    let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
    let prompt = n(u.get("prompt_tokens"));
    let cached = n(u.pointer("/prompt_tokens_details/cached_tokens"));
    Usage {
        input: prompt.saturating_sub(cached),
        output: n(u.get("completion_tokens")),
        cache_read: cached,
        cache_write: 0,
        total_tokens: n(u.get("total_tokens")),
        ..Usage::default()
    }
}

fn parse_arguments(provider: &str, name: &str, raw: &str) -> Result<Value, ModelError> {
    if raw.trim().is_empty() {
        return Ok(Value::Object(JsonMap::new()));
    }
    serde_json::from_str(raw).map_err(|e| ModelError::BadResponse {
        provider: provider.to_owned(),
        message: format!(
            "arguments of tool call `{name}` are not JSON ({e}): {}",
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

/// Parses a non-streaming response.
fn parse_response(provider: &str, v: &Value) -> Result<MessageParts, ModelError> {
    if let Some(err) = v.get("error") {
        return Err(classify_stream_error(
            provider,
            &json!({"error": err}).to_string(),
        ));
    }
    let bad = |what: &str| ModelError::BadResponse {
        provider: provider.to_owned(),
        message: format!("{what}: {}", excerpt(&v.to_string())),
    };
    let choice = v
        .pointer("/choices/0")
        .ok_or_else(|| bad("response has no choices"))?;
    let message = choice
        .get("message")
        .ok_or_else(|| bad("choice has no message"))?;
    let mut blocks = Vec::new();
    if let Some(r) = message
        .get("reasoning_content")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        blocks.push(ContentBlock::Thinking(clawctx_protocol::ThinkingContent {
            thinking: r.to_owned(),
            thinking_signature: None,
            extra: JsonMap::new(),
        }));
    }
    if let Some(t) = message
        .get("content")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        blocks.push(ContentBlock::text(t));
    }
    for call in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = call
            .pointer("/function/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let raw = call
            .pointer("/function/arguments")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        blocks.push(tool_call(
            id,
            name.clone(),
            parse_arguments(provider, &name, raw)?,
        ));
    }
    let (mut stop_reason, error_message) =
        finish_reason(choice.get("finish_reason").and_then(Value::as_str));
    if stop_reason == StopReason::Stop
        && blocks
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolCall(_)))
    {
        stop_reason = StopReason::ToolUse;
    }
    Ok(MessageParts {
        blocks,
        usage: parse_usage(v.get("usage")),
        stop_reason,
        error_message,
        response_id: v.get("id").and_then(Value::as_str).map(str::to_owned),
    })
}

/// A tool call being assembled from streamed fragments.
#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Accumulates streamed chunks: text, reasoning, and tool calls keyed by their `index`.
#[derive(Default)]
struct StreamAccumulator {
    thinking: String,
    text: String,
    calls: BTreeMap<u64, PartialCall>,
    finish_reason: Option<String>,
    usage: Option<Value>,
    id: Option<String>,
}

impl StreamAccumulator {
    fn push(&mut self, chunk: &Value, sink: &Sink<'_>) {
        if self.id.is_none() {
            self.id = chunk.get("id").and_then(Value::as_str).map(str::to_owned);
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(u.clone());
        }
        let Some(choice) = chunk.pointer("/choices/0") else {
            return;
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        let Some(delta) = choice.get("delta") else {
            return;
        };
        for key in ["reasoning_content", "reasoning"] {
            if let Some(r) = delta
                .get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
            {
                self.thinking.push_str(r);
                sink.emit(StreamEvent::ThinkingDelta(r.to_owned()));
            }
        }
        if let Some(t) = delta
            .get("content")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            self.text.push_str(t);
            sink.emit(StreamEvent::TextDelta(t.to_owned()));
        }
        for (position, call) in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let index = call
                .get("index")
                .and_then(Value::as_u64)
                .unwrap_or(position as u64);
            let is_new = !self.calls.contains_key(&index);
            let entry = self.calls.entry(index).or_default();
            if let Some(id) = call
                .get("id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
            {
                entry.id = id.to_owned();
            }
            if let Some(name) = call
                .pointer("/function/name")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
            {
                entry.name.push_str(name);
            }
            if is_new {
                sink.emit(StreamEvent::ToolCallStart {
                    index: index as usize,
                    id: entry.id.clone(),
                    name: entry.name.clone(),
                });
            }
            if let Some(args) = call
                .pointer("/function/arguments")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
            {
                entry.arguments.push_str(args);
                sink.emit(StreamEvent::ToolCallDelta {
                    index: index as usize,
                    fragment: args.to_owned(),
                });
            }
        }
    }

    fn into_parts(self, provider: &str) -> Result<MessageParts, ModelError> {
        let mut blocks = Vec::new();
        if !self.thinking.is_empty() {
            blocks.push(ContentBlock::Thinking(clawctx_protocol::ThinkingContent {
                thinking: self.thinking,
                thinking_signature: None,
                extra: JsonMap::new(),
            }));
        }
        if !self.text.is_empty() {
            blocks.push(ContentBlock::text(self.text));
        }
        let has_calls = !self.calls.is_empty();
        for (_, call) in self.calls {
            let arguments = parse_arguments(provider, &call.name, &call.arguments)?;
            blocks.push(tool_call(call.id, call.name, arguments));
        }
        let (mut stop_reason, error_message) = finish_reason(self.finish_reason.as_deref());
        if stop_reason == StopReason::Stop && has_calls {
            stop_reason = StopReason::ToolUse;
        }
        Ok(MessageParts {
            blocks,
            usage: parse_usage(self.usage.as_ref()),
            stop_reason,
            error_message,
            response_id: self.id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clawctx_protocol::{ImageContent, SummaryMessage, ThinkingContent};

    #[test]
    fn converts_every_role() {
        let mut assistant = AgentMessage::tool_call("c1", "read", json!({"path": "src/lib.rs"}));
        if let AgentMessage::Assistant(a) = &mut assistant {
            if let Content::Blocks(b) = &mut a.content {
                b.insert(
                    0,
                    ContentBlock::Thinking(ThinkingContent {
                        thinking: "secret plan".into(),
                        thinking_signature: None,
                        extra: JsonMap::new(),
                    }),
                );
                b.insert(1, ContentBlock::text("Reading."));
            }
        }
        let image_user = AgentMessage::User(clawctx_protocol::UserMessage {
            content: Content::Blocks(vec![
                ContentBlock::text("what is this?"),
                ContentBlock::Image(ImageContent {
                    data: "QUJD".into(),
                    mime_type: "image/png".into(),
                    extra: JsonMap::new(),
                }),
            ]),
            ..Default::default()
        });
        let mut other = JsonMap::new();
        other.insert("role".into(), json!("system"));
        other.insert("content".into(), json!("be brief"));
        let request = CompletionRequest {
            model: "m".into(),
            system_prompt: Some("sys".into()),
            messages: vec![
                AgentMessage::CompactionSummary(SummaryMessage {
                    summary: "S".into(),
                    ..Default::default()
                }),
                image_user,
                assistant,
                AgentMessage::tool_result("c1", "read", "fn main() {}"),
                AgentMessage::Other(other),
            ],
            ..Default::default()
        };
        let wire = to_wire_messages(&request);
        assert_eq!(wire[0], json!({"role": "system", "content": "sys"}));
        assert_eq!(wire[1]["role"], "user");
        assert!(wire[1]["content"]
            .as_str()
            .unwrap_or_default()
            .contains("<summary>\nS\n</summary>"));
        assert_eq!(
            wire[2]["content"][1]["image_url"]["url"],
            "data:image/png;base64,QUJD"
        );
        assert_eq!(wire[3]["content"], "Reading.");
        assert_eq!(
            wire[3]["tool_calls"][0]["function"]["arguments"],
            "{\"path\":\"src/lib.rs\"}"
        );
        assert!(!wire[3].to_string().contains("secret plan"));
        assert_eq!(
            wire[4],
            json!({"role": "tool", "tool_call_id": "c1", "content": "fn main() {}"})
        );
        assert_eq!(wire[5], json!({"role": "user", "content": "be brief"}));
    }

    #[test]
    fn usage_splits_cached_tokens() {
        let u = parse_usage(Some(
            &json!({"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107, "prompt_tokens_details": {"cached_tokens": 40}}),
        ));
        assert_eq!(
            (u.input, u.output, u.cache_read, u.total_tokens),
            (60, 7, 40, 107)
        );
    }
}

#[cfg(test)]
mod sampling_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{Sampling, ToolChoice, ToolSpec};

    #[test]
    fn sampling_and_tool_choice_in_openais_terms() {
        let p = OpenAiProvider::new("o", "http://127.0.0.1:9/v1", None, HttpSettings::default())
            .unwrap();
        let request = CompletionRequest {
            model: "m".into(),
            messages: vec![AgentMessage::user("hi")],
            tools: vec![ToolSpec {
                name: "f".into(),
                description: String::new(),
                parameters: json!({"type": "object"}),
            }],
            temperature: Some(0.5),
            sampling: Sampling {
                top_p: Some(0.25),
                stop: vec!["a".into(), "b".into()],
                seed: Some(9),
                presence_penalty: Some(0.5),
                frequency_penalty: Some(-0.5),
                tool_choice: Some(ToolChoice::Tool("f".into())),
            },
            ..Default::default()
        };
        let body = p.request_body(&request, false);
        assert_eq!(
            (
                &body["temperature"],
                &body["top_p"],
                &body["stop"],
                &body["seed"]
            ),
            (&json!(0.5), &json!(0.25), &json!(["a", "b"]), &json!(9))
        );
        assert_eq!(
            (&body["presence_penalty"], &body["frequency_penalty"]),
            (&json!(0.5), &json!(-0.5))
        );
        assert_eq!(
            body["tool_choice"],
            json!({"type": "function", "function": {"name": "f"}})
        );
        let plain = p.request_body(
            &CompletionRequest {
                model: "m".into(),
                ..Default::default()
            },
            false,
        );
        for k in [
            "top_p",
            "stop",
            "seed",
            "presence_penalty",
            "frequency_penalty",
            "tool_choice",
        ] {
            assert!(plain.get(k).is_none(), "{k} only when set: {plain}");
        }
    }
}
