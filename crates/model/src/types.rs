//! The provider-neutral request, result and streaming-event types.
//!
//! Every provider (OpenAI-compatible, Anthropic, scripted) takes the same [`CompletionRequest`]
//! built from `AgentMessage`s and returns the same [`Completion`], an assistant message in the
//! contract's shape (§2), so callers never see a wire format.

use clawctx_protocol::{AgentMessage, AssistantMessage, Content, ContentBlock, ToolCall, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

/// A tool the model may call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Tool name, as the model will call it.
    pub name: String,
    /// What the tool does (shown to the model).
    pub description: String,
    /// JSON schema of the arguments object.
    pub parameters: Value,
}

/// One model call.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompletionRequest {
    /// Model id at the provider (the part after `provider/` in a model ref).
    pub model: String,
    /// System prompt, sent the way the provider expects (system message or top-level field).
    pub system_prompt: Option<String>,
    /// The conversation, in the contract's message model.
    pub messages: Vec<AgentMessage>,
    /// Tools the model may call.
    pub tools: Vec<ToolSpec>,
    /// Upper bound on output tokens (providers that require one fall back to the model's
    /// configured `maxTokens`, then 4096).
    pub max_output_tokens: Option<u64>,
    /// Sampling temperature, when the caller wants one.
    pub temperature: Option<f64>,
    /// Further sampling settings and the tool choice a caller passed through (the gateway's
    /// OpenAI clients); empty by default.
    pub sampling: Sampling,
    /// A stable key of the conversation for the provider's prompt cache: sent as OpenAI's
    /// `prompt_cache_key` (requests with one key are routed to the same cache). The runtime
    /// passes a digest of the session key, never the key itself.
    pub cache_key: Option<String>,
}

/// The `cache_key` of [`CompletionRequest`] for a session: `clawctx-` and the first 32 hex
/// digits of the SHA-256 of its key (stable across processes and restarts; the key itself, which
/// may name a user or a channel, never reaches the provider).
pub fn prompt_cache_key(session_key: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(session_key.as_bytes());
    let mut out = String::from("clawctx-");
    for b in &digest[..16] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Sampling settings beyond the temperature, in OpenAI's terms; each provider sends what its
/// API has (Anthropic: `top_p`, `stop_sequences`, `tool_choice`; no seed or penalties).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sampling {
    /// Nucleus sampling.
    pub top_p: Option<f64>,
    /// Stop sequences.
    pub stop: Vec<String>,
    /// Deterministic sampling seed (OpenAI-compatible APIs only).
    pub seed: Option<i64>,
    /// Presence penalty (OpenAI-compatible APIs only).
    pub presence_penalty: Option<f64>,
    /// Frequency penalty (OpenAI-compatible APIs only).
    pub frequency_penalty: Option<f64>,
    /// Which tool the model may or must call.
    pub tool_choice: Option<ToolChoice>,
}

/// OpenAI's `tool_choice`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (`auto`).
    Auto,
    /// No tool calls (`none`).
    None,
    /// At least one tool call (`required`; Anthropic's `any`).
    Required,
    /// This tool (`{"type": "function", "function": {"name"}}`).
    Tool(String),
}

impl ToolChoice {
    /// OpenAI's wire form.
    pub fn openai(&self) -> Value {
        match self {
            ToolChoice::Auto => Value::String("auto".into()),
            ToolChoice::None => Value::String("none".into()),
            ToolChoice::Required => Value::String("required".into()),
            ToolChoice::Tool(name) => {
                serde_json::json!({"type": "function", "function": {"name": name}})
            }
        }
    }

    /// Anthropic's wire form.
    pub fn anthropic(&self) -> Value {
        match self {
            ToolChoice::Auto => serde_json::json!({"type": "auto"}),
            ToolChoice::None => serde_json::json!({"type": "none"}),
            ToolChoice::Required => serde_json::json!({"type": "any"}),
            ToolChoice::Tool(name) => serde_json::json!({"type": "tool", "name": name}),
        }
    }
}

/// Why the model stopped (`stopReason` in the contract).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StopReason {
    /// The model finished its answer.
    Stop,
    /// The output token limit cut it.
    Length,
    /// The model wants tool results.
    ToolUse,
    /// The provider reported an error inside an otherwise successful response.
    Error,
    /// The caller cancelled.
    Aborted,
}

impl StopReason {
    /// The contract string: `stop`, `length`, `toolUse`, `error` or `aborted`.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Stop => "stop",
            StopReason::Length => "length",
            StopReason::ToolUse => "toolUse",
            StopReason::Error => "error",
            StopReason::Aborted => "aborted",
        }
    }

    /// Parses a contract string; anything unknown is `None`.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "stop" => StopReason::Stop,
            "length" => StopReason::Length,
            "toolUse" => StopReason::ToolUse,
            "error" => StopReason::Error,
            "aborted" => StopReason::Aborted,
            _ => return None,
        })
    }
}

/// What a streaming call reports while it runs, so a CLI can print tokens as they arrive.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    /// A fragment of answer text.
    TextDelta(String),
    /// A fragment of reasoning text (providers that expose it).
    ThinkingDelta(String),
    /// The model started a tool call (the `index`-th of this reply).
    ToolCallStart {
        /// Position of the call in the reply.
        index: usize,
        /// Call id, when the provider has given it yet.
        id: String,
        /// Tool name.
        name: String,
    },
    /// A fragment of a tool call's JSON arguments.
    ToolCallDelta {
        /// Position of the call in the reply.
        index: usize,
        /// The raw fragment (not valid JSON on its own).
        fragment: String,
    },
    /// The call failed transiently and will be retried after `delay_ms`.
    Retry {
        /// The attempt that failed (1 = the first request).
        attempt: u32,
        /// How long the provider waits before the next attempt.
        delay_ms: u64,
        /// Why the attempt failed.
        reason: String,
    },
    /// The reply is complete.
    Done {
        /// Why the model stopped.
        stop_reason: StopReason,
        /// Final usage.
        usage: Usage,
    },
}

/// The channel a caller passes to receive [`StreamEvent`]s.
pub type EventSender = mpsc::UnboundedSender<StreamEvent>;

/// A finished model call: the assistant message exactly as it will be stored in the transcript.
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    /// The assistant message (`content`, `usage`, `stopReason`, `api`, `provider`, `model`).
    pub message: AssistantMessage,
}

impl Completion {
    /// Usage as reported (or estimated, for the scripted provider).
    pub fn usage(&self) -> Usage {
        self.message.usage.clone().unwrap_or_default()
    }

    /// The stop reason; an unknown string reads as `Error`.
    pub fn stop_reason(&self) -> StopReason {
        self.message
            .stop_reason
            .as_deref()
            .and_then(StopReason::parse)
            .unwrap_or(StopReason::Error)
    }

    /// All answer text blocks, concatenated (thinking excluded).
    pub fn text(&self) -> String {
        let mut out = String::new();
        for b in self.message.content.block_slice() {
            if let ContentBlock::Text(t) = b {
                out.push_str(&t.text);
            }
        }
        if let Content::Text(t) = &self.message.content {
            out.push_str(t);
        }
        out
    }

    /// The tool calls of the reply, in order.
    pub fn tool_calls(&self) -> Vec<&ToolCall> {
        self.message
            .content
            .block_slice()
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolCall(c) => Some(c),
                _ => None,
            })
            .collect()
    }

    /// The reply as an `AgentMessage`, ready to append to a transcript.
    pub fn into_agent_message(self) -> AgentMessage {
        AgentMessage::Assistant(self.message)
    }
}

/// Fills `total_tokens` when the provider left it at 0.
pub(crate) fn finish_usage(mut usage: Usage) -> Usage {
    if usage.total_tokens == 0 {
        usage.total_tokens = usage.input + usage.output + usage.cache_read + usage.cache_write;
    }
    usage
}

/// Current time in epoch milliseconds (for `timestamp` fields).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Assembles the assistant message every provider returns.
pub(crate) struct MessageParts {
    pub blocks: Vec<ContentBlock>,
    pub usage: Usage,
    pub stop_reason: StopReason,
    pub error_message: Option<String>,
    pub response_id: Option<String>,
}

impl MessageParts {
    pub(crate) fn into_completion(self, api: &str, provider: &str, model: &str) -> Completion {
        let mut extra = clawctx_protocol::JsonMap::new();
        if let Some(id) = self.response_id {
            extra.insert("responseId".into(), Value::String(id));
        }
        Completion {
            message: AssistantMessage {
                content: Content::Blocks(self.blocks),
                api: Some(api.to_owned()),
                provider: Some(provider.to_owned()),
                model: Some(model.to_owned()),
                usage: Some(finish_usage(self.usage)),
                stop_reason: Some(self.stop_reason.as_str().to_owned()),
                error_message: self.error_message,
                timestamp: Some(serde_json::Number::from(now_ms())),
                extra,
            },
        }
    }
}

/// Sends events to an optional channel and remembers whether anything visible was sent, so the
/// retry loop never replays a reply the caller has already started printing.
pub(crate) struct Sink<'a> {
    tx: Option<&'a EventSender>,
    sent: std::sync::atomic::AtomicBool,
}

impl<'a> Sink<'a> {
    pub(crate) fn new(tx: Option<&'a EventSender>) -> Self {
        Self {
            tx,
            sent: std::sync::atomic::AtomicBool::new(false),
        }
    }

    pub(crate) fn is_streaming(&self) -> bool {
        self.tx.is_some()
    }

    pub(crate) fn emit(&self, event: StreamEvent) {
        if let Some(tx) = self.tx {
            if !matches!(event, StreamEvent::Retry { .. }) {
                self.sent.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            // A dropped receiver only means nobody is watching; the call goes on.
            let _ = tx.send(event);
        }
    }

    pub(crate) fn has_sent(&self) -> bool {
        self.sent.load(std::sync::atomic::Ordering::Relaxed)
    }
}
