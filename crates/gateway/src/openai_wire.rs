//! The JSON shapes of the OpenAI-compatible endpoint ([`crate::openai`]): the chat completion
//! request and its answer, and the model list. In a module of their own because the route
//! table ([`crate::router`], for `/openapi.json`), the request reader ([`crate::chat_input`])
//! and the re-send memory ([`crate::resend`]) read them too.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A chat completion request (the fields the gateway reads; every other field is accepted and
/// not used).
#[derive(Clone, Debug, Default, Deserialize, Serialize, schemars::JsonSchema)]
pub struct ChatCompletionRequest {
    /// Echoed in the response; the gateway's configured model answers every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The conversation as the client has it; the last message must be the user's.
    pub messages: Vec<ChatMessage>,
    /// Stream `chat.completion.chunk` events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// `include_usage`: a last chunk with the usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Names the session when no session header is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Client tools (`{"type": "function", "function": {name, description, parameters}}`),
    /// offered to the model next to the engine's own; calls to them come back to the client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Value>>,
    /// `auto`, `none`, `required` or `{"type": "function", "function": {"name"}}`, passed to
    /// the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    /// Sampling temperature (0-2), forwarded as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling (0-1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Output token limit: at most the model's configured `maxTokens` (more is a 400 naming
    /// the limit, as OpenAI answers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Output token limit; wins over `max_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u64>,
    /// A stop sequence or a list of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Value>,
    /// Sampling seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    /// Presence penalty (-2 to 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    /// Frequency penalty (-2 to 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    /// Choices to generate: 1 only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<u32>,
}

/// `stream_options`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, schemars::JsonSchema)]
pub struct StreamOptions {
    /// Send a last chunk with `usage`.
    #[serde(default)]
    pub include_usage: bool,
}

/// One message of the request.
#[derive(Clone, Debug, Default, Deserialize, Serialize, schemars::JsonSchema)]
pub struct ChatMessage {
    /// `system`, `developer`, `user`, `assistant`, `tool` or `function`.
    pub role: String,
    /// A string or a list of content parts (`{"type": "text", "text"}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
    /// Author name (for a `tool` message: the tool's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// An assistant message's tool calls (the client's copy; not replayed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<Value>>,
    /// The call a `tool` message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

/// A plain (non-streaming) answer.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ChatCompletion {
    /// `chatcmpl-<uuid>`.
    pub id: String,
    /// `chat.completion`.
    pub object: String,
    /// Unix seconds.
    pub created: u64,
    /// The request's model, else the gateway's.
    pub model: String,
    /// One choice.
    pub choices: Vec<Choice>,
    /// Token usage of the turn's model calls.
    pub usage: CompletionUsage,
}

/// `choices[0]`.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Choice {
    /// 0.
    pub index: u32,
    /// The assistant's reply.
    pub message: AssistantReply,
    /// `stop`, `tool_calls` (the client's tools were called), or `length` when the tool loop
    /// ran out of iterations.
    pub finish_reason: String,
}

/// `choices[0].message`.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AssistantReply {
    /// `assistant`.
    pub role: String,
    /// The reply text (`null` for a reply of tool calls only).
    pub content: Option<String>,
    /// Calls of the client's tools, for the client to run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ReplyToolCall>,
}

/// One call of a client tool, in OpenAI's shape.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplyToolCall {
    /// The id the client's `tool` message answers with `tool_call_id`.
    pub id: String,
    /// `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Name and arguments.
    pub function: ReplyFunction,
}

/// A tool call's function.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ReplyFunction {
    /// The tool's name.
    pub name: String,
    /// The arguments as a JSON text.
    pub arguments: String,
}

/// OpenAI's usage object.
#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CompletionUsage {
    /// Input tokens.
    pub prompt_tokens: u64,
    /// Output tokens.
    pub completion_tokens: u64,
    /// Sum.
    pub total_tokens: u64,
}

/// `GET /v1/models`.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ModelList {
    /// `list`.
    pub object: String,
    /// The configured model.
    pub data: Vec<ModelCard>,
}

/// One model.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ModelCard {
    /// `provider/model`.
    pub id: String,
    /// `model`.
    pub object: String,
    /// 0 (unknown).
    pub created: u64,
    /// `clawctx`.
    pub owned_by: String,
}
